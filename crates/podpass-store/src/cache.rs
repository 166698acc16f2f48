//! The watch cache in front of etcd (kube-apiserver's cacher): every object under
//! `/registry/` held in memory and kept current by an etcd watch, so reads and watches are
//! served from memory while writes still go to etcd as compare-and-swap transactions.
//!
//! Consistency, as upstream's: a read with `resourceVersion=""` is consistent
//! (ConsistentListFromCache): it asks etcd for its current revision and is served once the
//! cache has applied that revision; `"0"` is served from the cache as it is; `N` waits until
//! the cache has reached `N` (504 "Too large resource version" after 3 s). A watch resumes
//! from any revision still in the cache's window of recent changes and gets 410 Gone beyond
//! it.
//!
//! One etcd watch over the whole `/registry/` prefix feeds the cache rather than one per
//! resource: the cache then sees every revision a write of ours produces, which proves it
//! current without etcd's progress notifications (the Debian etcd 3.4.23 may answer a
//! progress request before delivering the events it covers — etcd issue 15220 — so upstream
//! would not trust it either). A revision produced outside `/registry/` is never seen: a
//! consistent read that waits for one falls back to etcd after [`FRESHNESS_WAIT`], as
//! upstream falls back when the cache cannot catch up.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use etcd_client::{Client, EventType as EtcdEventType, GetOptions, KeyValue, WatchOptions};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::etcd::{EtcdStore, backend, prefix_end, revision_of};
use super::{
    BoxFuture, Broadcast, EventType, ListOptions, ListResult, ObjectKey, ReadConsistency, Store, StoreError, Stored,
    WatchEvent, WatchStream, list_prefix, selected_event, serve_broadcast, with_resource_version,
};

/// Changes kept for watches to resume from (upstream's cache sizes are of this order).
pub const DEFAULT_WINDOW: usize = 10_000;
/// How long a consistent read waits for the cache to reach etcd's revision before reading
/// etcd itself.
pub const FRESHNESS_WAIT: Duration = Duration::from_secs(1);
/// How long a read or watch at a revision the cache has not reached waits before 504
/// (upstream: 3 s).
const TOO_LARGE_WAIT: Duration = Duration::from_secs(3);
/// Objects per page of the initial list.
const PAGE: i64 = 500;
/// Largest etcd message the cache decodes (a page of large objects, a burst of changes).
const MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// Changes a watcher may be behind before it is closed (the client re-watches).
const WATCH_BUFFER: usize = 4096;
/// Consistent reads queued for a revision fetch at most (beyond that they wait for room:
/// the fetches are shared, so this bounds memory, not throughput).
const MAX_PENDING_FETCHES: usize = 65_536;

/// Labels of `apiserver_watch_cache_consistent_read_total` (upstream's).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConsistentReadLabels {
    fallback: String,
    group: String,
    resource: String,
    success: String,
}

/// Labels of `apiserver_watch_cache_read_wait_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    group: String,
    resource: String,
}

/// The watch cache's metrics, with upstream's names.
struct CacheMetrics {
    consistent_reads: Family<ConsistentReadLabels, Counter>,
    read_wait: Family<ResourceLabels, Histogram>,
    group_of: fn(&str) -> Option<&'static str>,
}

impl CacheMetrics {
    fn new(group_of: fn(&str) -> Option<&'static str>) -> Self {
        Self {
            consistent_reads: Family::default(),
            read_wait: Family::new_with_constructor(|| {
                Histogram::new([0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0])
            }),
            group_of,
        }
    }

    /// Group and resource labels; a resource the API does not serve is `other`, so the
    /// label set stays bounded whatever is in etcd.
    fn labels(&self, resource: &str) -> ResourceLabels {
        match (self.group_of)(resource) {
            Some(group) => ResourceLabels { group: group.to_owned(), resource: resource.to_owned() },
            None => ResourceLabels { group: String::new(), resource: "other".to_owned() },
        }
    }

    fn consistent_read(&self, resource: &str, success: bool, fallback: bool) {
        let ResourceLabels { group, resource } = self.labels(resource);
        let labels =
            ConsistentReadLabels { fallback: fallback.to_string(), group, resource, success: success.to_string() };
        self.consistent_reads.get_or_create(&labels).inc();
    }

    fn read_wait(&self, resource: &str, seconds: f64) {
        self.read_wait.get_or_create(&self.labels(resource)).observe(seconds);
    }
}

/// One applied change.
#[derive(Debug)]
struct Change {
    kind: EventType,
    key: String,
    revision: u64,
    /// After the change; for deletions the last state, at the deletion's revision.
    object: Value,
    prev: Option<Arc<Stored>>,
}

#[derive(Debug)]
struct State {
    objects: BTreeMap<String, Arc<Stored>>,
    /// Every change up to here is applied.
    revision: u64,
    /// Recent changes, oldest first.
    window: VecDeque<Arc<Change>>,
    /// A watch may resume from any revision ≥ this (earlier changes have left the window).
    oldest: u64,
    /// The cache is in sync with etcd (false while it relists after a broken watch).
    synced: bool,
    /// Changes to cache watches, sent under the write lock (so a watch that subscribes
    /// under the read lock misses none); replaced at a relist, which ends every watch.
    changes: broadcast::Sender<Arc<Change>>,
}

impl State {
    fn empty() -> Self {
        Self {
            objects: BTreeMap::new(),
            revision: 0,
            window: VecDeque::new(),
            oldest: 0,
            synced: false,
            changes: broadcast::channel(WATCH_BUFFER).0,
        }
    }
}

#[derive(Debug)]
struct Shared {
    state: RwLock<State>,
    /// The revision applied, for readers waiting on it.
    applied: watch::Sender<u64>,
    window: usize,
}

/// The etcd store with a watch cache in front (see the module docs).
pub struct CachedStore {
    etcd: EtcdStore,
    metrics: CacheMetrics,
    shared: Arc<Shared>,
    revisions: mpsc::Sender<oneshot::Sender<Result<u64, StoreError>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for CachedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedStore").finish_non_exhaustive()
    }
}

impl Drop for CachedStore {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A poisoned lock means a panic while applying a change: the cache cannot be trusted.
fn poisoned() -> StoreError {
    StoreError::Unavailable("watch cache: state lock poisoned".into())
}

impl CachedStore {
    /// Connects to etcd, lists `/registry/` and starts the watch that keeps the cache
    /// current; returns once the cache is filled.
    /// `group_of` names the API group of a stored resource (for metric labels; `None`: not
    /// one the API serves).
    pub async fn connect(
        endpoints: &[String],
        window: usize,
        group_of: fn(&str) -> Option<&'static str>,
    ) -> Result<Self, StoreError> {
        let etcd = EtcdStore::connect(endpoints).await?;
        let client = etcd.client().clone();
        let (applied, _) = watch::channel(0);
        let shared = Arc::new(Shared { state: RwLock::new(State::empty()), applied, window: window.max(1) });
        let (revisions, requests) = mpsc::channel(MAX_PENDING_FETCHES);
        let (filled_tx, filled_rx) = oneshot::channel();
        let tasks = vec![
            crate::task::spawn_named("watch-cache", keep_current(client.clone(), Arc::clone(&shared), filled_tx)),
            crate::task::spawn_named("watch-cache-revisions", fetch_revisions(client, requests)),
        ];
        let store = Self { etcd, metrics: CacheMetrics::new(group_of), shared, revisions, tasks };
        match filled_rx.await {
            Ok(Ok(())) => Ok(store),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(StoreError::Unavailable("watch cache: stopped before it was filled".into())),
        }
    }

    /// etcd's current revision, from a fetch that started after this call (fetches are
    /// shared by every reader waiting when one starts).
    async fn current_revision(&self) -> Result<u64, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.revisions.send(tx).await.map_err(|_| StoreError::Unavailable("watch cache: stopped".into()))?;
        rx.await.map_err(|_| StoreError::Unavailable("watch cache: stopped".into()))?
    }

    /// Waits until the cache has applied `revision`; false after `limit` or while the
    /// cache is out of sync.
    async fn reach(&self, revision: u64, limit: Duration) -> bool {
        let mut applied = self.shared.applied.subscribe();
        let reached = tokio::time::timeout(limit, applied.wait_for(|r| *r >= revision)).await;
        matches!(reached, Ok(Ok(_))) && self.shared.state.read().is_ok_and(|s| s.synced)
    }

    /// Whether a consistent read may be served from the cache (else: from etcd).
    async fn consistent(&self) -> Result<bool, StoreError> {
        let revision = self.current_revision().await?;
        Ok(self.reach(revision, FRESHNESS_WAIT).await)
    }

    fn cached(&self, key: &ObjectKey) -> Result<Arc<Stored>, StoreError> {
        let state = self.shared.state.read().map_err(|_| poisoned())?;
        state
            .objects
            .get(&key.storage_key())
            .cloned()
            .ok_or_else(|| StoreError::NotFound { resource: key.resource.clone(), name: key.name.clone() })
    }

    fn cached_list(
        &self,
        resource: &str,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<ListResult, StoreError> {
        let prefix = list_prefix(resource, namespace);
        let state = self.shared.state.read().map_err(|_| poisoned())?;
        let items = state
            .objects
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(_, s)| options.matches(&s.object))
            .map(|(_, s)| s.object.clone())
            .collect();
        Ok(ListResult { items, revision: state.revision })
    }

    /// Reads one object at the freshness a `resourceVersion` asks for.
    pub async fn get_at(&self, key: &ObjectKey, freshness: ReadConsistency) -> Result<Arc<Stored>, StoreError> {
        let from_cache = self.ready_for(freshness, &key.resource).await?;
        let read = if from_cache { self.cached(key) } else { self.etcd.get(key).await.map(Arc::new) };
        self.count_consistent(freshness, &key.resource, from_cache, &read);
        read
    }

    /// Lists at the freshness a `resourceVersion` asks for.
    pub async fn list_at(
        &self,
        resource: &str,
        namespace: Option<&str>,
        options: &ListOptions,
        freshness: ReadConsistency,
    ) -> Result<ListResult, StoreError> {
        let from_cache = self.ready_for(freshness, resource).await?;
        let read = if from_cache {
            self.cached_list(resource, namespace, options)
        } else {
            self.etcd.list(resource, namespace, options).await
        };
        self.count_consistent(freshness, resource, from_cache, &read);
        read
    }

    /// `apiserver_watch_cache_consistent_read_total` for a consistent read.
    fn count_consistent<T>(
        &self,
        freshness: ReadConsistency,
        resource: &str,
        from_cache: bool,
        read: &Result<T, StoreError>,
    ) {
        if matches!(freshness, ReadConsistency::Consistent | ReadConsistency::AsOf(_)) {
            // A miss (404) is a successful read.
            let success = matches!(read, Ok(_) | Err(StoreError::NotFound { .. }));
            self.metrics.consistent_read(resource, success, !from_cache);
        }
    }

    /// Whether the cache may serve a read of `freshness` (waiting as upstream waits);
    /// false: read etcd.
    async fn ready_for(&self, freshness: ReadConsistency, resource: &str) -> Result<bool, StoreError> {
        let started = std::time::Instant::now();
        let waited = |ready: bool| {
            self.metrics.read_wait(resource, started.elapsed().as_secs_f64());
            ready
        };
        match freshness {
            ReadConsistency::Consistent => {
                let ready = self.consistent().await;
                if ready.is_err() {
                    self.metrics.consistent_read(resource, false, false);
                }
                ready.map(waited)
            }
            ReadConsistency::Any => Ok(self.shared.state.read().map_err(|_| poisoned())?.synced),
            ReadConsistency::AsOf(revision) => Ok(waited(self.reach(revision, FRESHNESS_WAIT).await)),
            ReadConsistency::NotOlderThan(rv) => {
                if self.reach(rv, TOO_LARGE_WAIT).await {
                    return Ok(true);
                }
                let current = self.shared.state.read().map_err(|_| poisoned())?.revision;
                Err(StoreError::TooLargeResourceVersion { requested: rv, current })
            }
        }
    }
}

/// Answers revision requests, one etcd round trip at a time: every request queued when a
/// fetch starts shares it, and each fetch starts after every request it answers was made.
/// (Several fetches in flight cut the wait but cost etcd more CPU than they saved.)
async fn fetch_revisions(client: Client, mut requests: mpsc::Receiver<oneshot::Sender<Result<u64, StoreError>>>) {
    let mut kv = client.kv_client();
    let mut batch = Vec::new();
    while let Some(first) = requests.recv().await {
        batch.push(first);
        while let Ok(more) = requests.try_recv() {
            batch.push(more);
        }
        let result = kv
            .get("/registry/", Some(GetOptions::new().with_count_only()))
            .await
            .map(|r| revision_of(r.header().map_or(0, |h| h.revision())))
            .map_err(backend);
        for waiter in batch.drain(..) {
            let _ = waiter.send(result.clone());
        }
    }
}

/// Lists `/registry/` page by page at one revision.
async fn list_all(client: &Client) -> Result<(BTreeMap<String, Arc<Stored>>, u64), StoreError> {
    let mut kv = client.kv_client().max_decoding_message_size(MAX_MESSAGE);
    let end = prefix_end("/registry/");
    let mut objects = BTreeMap::new();
    let mut from = b"/registry/".to_vec();
    let mut revision = 0;
    loop {
        let mut options = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
        if revision > 0 {
            options = options.with_revision(i64::try_from(revision).unwrap_or(i64::MAX));
        }
        let resp = kv.get(from.clone(), Some(options)).await.map_err(backend)?;
        if revision == 0 {
            revision = revision_of(resp.header().map_or(0, |h| h.revision()));
        }
        for kv in resp.kvs() {
            if let Some((key, stored)) = decode(kv, revision_of(kv.mod_revision())) {
                objects.insert(key, Arc::new(stored));
            }
        }
        match resp.kvs().last() {
            Some(last) if resp.more() => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => return Ok((objects, revision)),
        }
    }
}

/// A key under `/registry/` and its object; `None` (logged) for what the API could not
/// have written, which must not stop the cache.
fn decode(kv: &KeyValue, revision: u64) -> Option<(String, Stored)> {
    let key = std::str::from_utf8(kv.key()).ok()?.to_owned();
    match serde_json::from_slice::<Value>(kv.value()) {
        Ok(object) => Some((key, Stored { object: with_resource_version(object, revision), revision })),
        Err(e) => {
            tracing::warn!(key, error = %e, "watch cache: skipping an undecodable object");
            None
        }
    }
}

/// Fills the cache, then applies etcd's changes; relists when the watch breaks (etcd
/// restarted, history compacted), closing every cache watch (their clients re-watch).
async fn keep_current(client: Client, shared: Arc<Shared>, filled: oneshot::Sender<Result<(), StoreError>>) {
    let mut filled = Some(filled);
    let mut retry = Duration::from_millis(100);
    loop {
        let result = sync_and_follow(&client, &shared, &mut filled).await;
        if let Ok(mut state) = shared.state.write() {
            state.synced = false;
        }
        if let Err(e) = result {
            if let Some(f) = filled.take() {
                let _ = f.send(Err(e));
                return;
            }
            tracing::warn!(error = %e, "watch cache: relisting from etcd");
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(Duration::from_secs(5));
    }
}

async fn sync_and_follow(
    client: &Client,
    shared: &Shared,
    filled: &mut Option<oneshot::Sender<Result<(), StoreError>>>,
) -> Result<(), StoreError> {
    let (objects, revision) = list_all(client).await?;
    {
        let mut state = shared.state.write().map_err(|_| poisoned())?;
        // A new channel: watches of the previous sync end (they may have missed changes).
        *state = State {
            objects,
            revision,
            window: VecDeque::new(),
            oldest: revision,
            synced: true,
            changes: broadcast::channel(WATCH_BUFFER).0,
        };
    }
    shared.applied.send_replace(revision);
    if let Some(f) = filled.take() {
        let _ = f.send(Ok(()));
    }
    let options = WatchOptions::new()
        .with_range(prefix_end("/registry/"))
        .with_start_revision(i64::try_from(revision + 1).unwrap_or(i64::MAX));
    let mut watch_client = client.watch_client().max_decoding_message_size(MAX_MESSAGE);
    let mut stream = watch_client.watch("/registry/", Some(options)).await.map_err(backend)?;
    loop {
        let Some(message) = stream.message().await.map_err(backend)? else {
            return Err(StoreError::Unavailable("etcd: watch ended".into()));
        };
        if message.compact_revision() > 0 {
            return Err(StoreError::Unavailable(format!("etcd: watch compacted at {}", message.compact_revision())));
        }
        if message.canceled() {
            return Err(StoreError::Unavailable(format!("etcd: watch canceled: {}", message.cancel_reason())));
        }
        let mut last = None;
        for event in message.events() {
            let Some(kv) = event.kv() else { continue };
            let revision = revision_of(kv.mod_revision());
            {
                let mut state = shared.state.write().map_err(|_| poisoned())?;
                if let Some(change) = apply(&mut state, event.event_type(), kv, revision) {
                    state.window.push_back(Arc::clone(&change));
                    while state.window.len() > shared.window {
                        if let Some(gone) = state.window.pop_front() {
                            state.oldest = gone.revision;
                        }
                    }
                    // No receivers is fine: nobody watches.
                    let _ = state.changes.send(change);
                }
                state.revision = state.revision.max(revision);
            }
            last = Some(revision);
        }
        if let Some(revision) = last {
            shared.applied.send_replace(revision);
        }
    }
}

/// Applies one etcd event to the map; the change watchers see.
fn apply(state: &mut State, kind: EtcdEventType, kv: &KeyValue, revision: u64) -> Option<Arc<Change>> {
    let key = std::str::from_utf8(kv.key()).ok()?.to_owned();
    let prev = state.objects.get(&key).cloned();
    match kind {
        EtcdEventType::Put => {
            let (_, stored) = decode(kv, revision)?;
            let kind = if kv.create_revision() == kv.mod_revision() || prev.is_none() {
                EventType::Added
            } else {
                EventType::Modified
            };
            let object = stored.object.clone();
            state.objects.insert(key.clone(), Arc::new(stored));
            Some(Arc::new(Change { kind, key, revision, object, prev }))
        }
        EtcdEventType::Delete => {
            let prev = state.objects.remove(&key)?;
            let object = with_resource_version(prev.object.clone(), revision);
            Some(Arc::new(Change { kind: EventType::Deleted, key, revision, object, prev: None }))
        }
    }
}

impl Broadcast for Change {
    fn revision(&self) -> u64 {
        self.revision
    }

    fn event(&self, prefix: &str, options: &ListOptions) -> Option<WatchEvent> {
        if !self.key.starts_with(prefix) {
            return None;
        }
        selected_event(self.kind, &self.object, self.prev.as_ref().map(|p| &p.object), self.revision, options)
    }
}

impl Store for CachedStore {
    fn get<'a>(&'a self, key: &'a ObjectKey) -> BoxFuture<'a, Result<Stored, StoreError>> {
        Box::pin(async move { self.get_at(key, ReadConsistency::Consistent).await.map(|s| Stored::clone(&s)) })
    }

    fn get_shared<'a>(&'a self, key: &'a ObjectKey) -> BoxFuture<'a, Result<Arc<Stored>, StoreError>> {
        Box::pin(self.get_at(key, ReadConsistency::Consistent))
    }

    fn get_with<'a>(
        &'a self,
        key: &'a ObjectKey,
        freshness: ReadConsistency,
    ) -> BoxFuture<'a, Result<Arc<Stored>, StoreError>> {
        Box::pin(self.get_at(key, freshness))
    }

    fn consistent_point(&self) -> BoxFuture<'_, Result<ReadConsistency, StoreError>> {
        Box::pin(async move { Ok(ReadConsistency::AsOf(self.current_revision().await?)) })
    }

    fn register_metrics(&self, registry: &mut Registry) {
        registry.register(
            "apiserver_watch_cache_consistent_read",
            "Counter for consistent reads from cache.",
            self.metrics.consistent_reads.clone(),
        );
        registry.register(
            "apiserver_watch_cache_read_wait_seconds",
            "Histogram of time spent waiting for a watch cache to become fresh.",
            self.metrics.read_wait.clone(),
        );
    }

    fn list<'a>(
        &'a self,
        resource: &'a str,
        namespace: Option<&'a str>,
        options: &'a ListOptions,
    ) -> BoxFuture<'a, Result<ListResult, StoreError>> {
        Box::pin(self.list_at(resource, namespace, options, ReadConsistency::Consistent))
    }

    fn list_with<'a>(
        &'a self,
        resource: &'a str,
        namespace: Option<&'a str>,
        options: &'a ListOptions,
        freshness: ReadConsistency,
    ) -> BoxFuture<'a, Result<ListResult, StoreError>> {
        Box::pin(self.list_at(resource, namespace, options, freshness))
    }

    fn create<'a>(&'a self, key: &'a ObjectKey, object: Value) -> BoxFuture<'a, Result<Stored, StoreError>> {
        self.etcd.create(key, object)
    }

    fn update<'a>(
        &'a self,
        key: &'a ObjectKey,
        object: Value,
        expected: Option<u64>,
    ) -> BoxFuture<'a, Result<Stored, StoreError>> {
        self.etcd.update(key, object, expected)
    }

    fn delete<'a>(&'a self, key: &'a ObjectKey, expected: Option<u64>) -> BoxFuture<'a, Result<Stored, StoreError>> {
        self.etcd.delete(key, expected)
    }

    fn watch<'a>(
        &'a self,
        resource: &'a str,
        namespace: Option<&'a str>,
        options: ListOptions,
        from: Option<u64>,
    ) -> BoxFuture<'a, Result<WatchStream, StoreError>> {
        Box::pin(async move {
            let prefix = list_prefix(resource, namespace);
            match from {
                // The current state: as recent as etcd is now.
                None => {
                    if !self.ready_for(ReadConsistency::Consistent, resource).await? {
                        self.metrics.consistent_read(resource, true, true);
                        return self.etcd.watch(resource, namespace, options, from).await;
                    }
                    self.metrics.consistent_read(resource, true, false);
                }
                Some(rv) => {
                    if !self.reach(rv, TOO_LARGE_WAIT).await {
                        let current = self.shared.state.read().map_err(|_| poisoned())?.revision;
                        return Err(StoreError::TooLargeResourceVersion { requested: rv, current });
                    }
                }
            }
            // Subscribe and read the backlog under one read lock: the writer applies and
            // broadcasts a change under the write lock, so every change is in exactly one
            // of the two.
            let (backlog, last, live) = {
                let state = self.shared.state.read().map_err(|_| poisoned())?;
                if !state.synced {
                    return Err(StoreError::Unavailable("watch cache: relisting from etcd".into()));
                }
                let live = state.changes.subscribe();
                let backlog: Vec<WatchEvent> = match from {
                    Some(rv) if rv < state.oldest => {
                        return Err(StoreError::Gone { requested: rv, oldest: state.oldest });
                    }
                    Some(rv) => state
                        .window
                        .iter()
                        .filter(|c| c.revision > rv)
                        .filter_map(|c| c.event(&prefix, &options))
                        .collect(),
                    None => state
                        .objects
                        .range(prefix.clone()..)
                        .take_while(|(k, _)| k.starts_with(&prefix))
                        .filter(|(_, s)| options.matches(&s.object))
                        .map(|(_, s)| WatchEvent {
                            kind: EventType::Added,
                            object: s.object.clone(),
                            revision: s.revision,
                        })
                        .collect(),
                };
                (backlog, state.revision.max(from.unwrap_or(0)), live)
            };
            Ok(serve_broadcast(backlog, last, live, prefix, options))
        })
    }
}
