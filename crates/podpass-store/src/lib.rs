//! The object store behind the API: keys laid out as upstream's etcd keys
//! (`/registry/<resource>/<namespace>/<name>`), a global revision as resourceVersion,
//! compare-and-swap updates, and watches that resume from a revision.
//!
//! Objects are JSON (`serde_json::Value`) exactly as the REST layer accepted them. As
//! upstream's storage does, `metadata.resourceVersion` is never stored: it is cleared on
//! write and set from the object's revision on every read.

mod cache;
mod embedded;
mod etcd;
mod selector;
mod task;

use std::future::Future;
use std::pin::Pin;

use podpass_api::field::Field;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;
use tokio::sync::mpsc;

pub use cache::{CachedStore, DEFAULT_WINDOW};
pub use embedded::EmbeddedObjectStore;
pub use etcd::EtcdStore;
pub use selector::{FieldSelector, LabelSelector, SelectorError};

/// A boxed future, so that `Store` can be used as `dyn Store` (embedded or etcd chosen at
/// start-up).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where an object lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// Plural resource, group-qualified for non-core groups (`roles.rbac.authorization.k8s.io`).
    pub resource: String,
    /// Namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// Object name.
    pub name: String,
}

impl ObjectKey {
    /// A namespaced key.
    pub fn namespaced(resource: &str, namespace: &str, name: &str) -> Self {
        Self { resource: resource.into(), namespace: namespace.into(), name: name.into() }
    }

    /// A cluster-scoped key.
    pub fn cluster(resource: &str, name: &str) -> Self {
        Self { resource: resource.into(), namespace: String::new(), name: name.into() }
    }

    /// The upstream etcd key: `/registry/<resource>/<namespace>/<name>`, or
    /// `/registry/<resource>/<name>` when cluster-scoped.
    pub fn storage_key(&self) -> String {
        if self.namespace.is_empty() {
            format!("/registry/{}/{}", self.resource, self.name)
        } else {
            format!("/registry/{}/{}/{}", self.resource, self.namespace, self.name)
        }
    }

    /// Parses a storage key back; `None` for keys this layout does not produce.
    pub fn from_storage_key(key: &str) -> Option<Self> {
        let rest = key.strip_prefix("/registry/")?;
        let parts: Vec<&str> = rest.split('/').collect();
        match parts.as_slice() {
            [r, n] => Some(Self::cluster(r, n)),
            [r, ns, n] => Some(Self::namespaced(r, ns, n)),
            _ => None,
        }
    }
}

/// The key prefix listing `resource` (in `namespace`, when given).
pub fn list_prefix(resource: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("/registry/{resource}/{ns}/"),
        _ => format!("/registry/{resource}/"),
    }
}

/// An object as read from the store, `metadata.resourceVersion` set.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    /// The object.
    pub object: Value,
    /// Its revision (= resourceVersion).
    pub revision: u64,
}

/// How fresh a read must be: its `resourceVersion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadConsistency {
    /// `""`: at least as recent as etcd when the read started.
    Consistent,
    /// `"0"`: whatever the cache holds.
    Any,
    /// `"N"`: at least revision N.
    NotOlderThan(u64),
    /// At least revision N, which [`Store::consistent_point`] found current: a consistent
    /// read, several of which share one revision fetch.
    AsOf(u64),
}

impl ReadConsistency {
    /// From a request's `resourceVersion` (absent = consistent).
    pub fn from_resource_version(rv: Option<&str>) -> Result<Self, String> {
        match rv {
            None | Some("") => Ok(Self::Consistent),
            Some("0") => Ok(Self::Any),
            Some(rv) => {
                rv.parse::<u64>().map(Self::NotOlderThan).map_err(|_| format!("invalid resourceVersion {rv:?}"))
            }
        }
    }
}

/// Which objects a list or watch selects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Label requirements.
    pub labels: LabelSelector,
    /// Field requirements.
    pub fields: FieldSelector,
}

impl ListOptions {
    /// Whether an object is selected.
    pub fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }
}

/// The result of a list: the selected objects and the revision they were read at.
#[derive(Debug, Clone, PartialEq)]
pub struct ListResult {
    /// Objects, in key order.
    pub items: Vec<Value>,
    /// The store revision of the snapshot (the list's resourceVersion).
    pub revision: u64,
}

/// Kind of change a watch reports (watch event `type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum EventType {
    /// Created, or changed into the selection.
    Added,
    /// Changed and still selected.
    Modified,
    /// Deleted, or changed out of the selection.
    Deleted,
}

/// One change seen by a watch.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    /// Kind of change.
    pub kind: EventType,
    /// The object after the change (before it, for deletions), resourceVersion set.
    pub object: Value,
    /// Revision of the change.
    pub revision: u64,
}

/// A running watch. Ends (returns `None`) when the store closes; yields an error when the
/// watcher fell too far behind and must relist.
#[derive(Debug)]
pub struct WatchStream {
    rx: mpsc::Receiver<Result<WatchEvent, StoreError>>,
    progress: WatchProgress,
}

/// The revision up to which a watch has sent every change it selects: the producer stores
/// it (Release) only after sending those events, so a consumer that reads it (Acquire)
/// *before* finding the channel empty has received every event up to it — what a BOOKMARK
/// may promise.
#[derive(Debug, Clone, Default)]
pub struct WatchProgress(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl WatchProgress {
    /// Records that every selected change up to `revision` has been sent.
    pub fn advance(&self, revision: u64) {
        self.0.fetch_max(revision, std::sync::atomic::Ordering::Release);
    }

    /// The revision recorded last.
    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl WatchStream {
    /// A stream over `rx`, whose producer advances `progress`.
    pub fn new(rx: mpsc::Receiver<Result<WatchEvent, StoreError>>, progress: WatchProgress) -> Self {
        Self { rx, progress }
    }

    /// See [`WatchProgress`]: read it before polling.
    pub fn progress(&self) -> u64 {
        self.progress.get()
    }

    /// The next event.
    pub async fn next(&mut self) -> Option<Result<WatchEvent, StoreError>> {
        self.rx.recv().await
    }

    /// Polls for the next event (for adapting the watch into a response body stream).
    pub fn poll_next(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<WatchEvent, StoreError>>> {
        self.rx.poll_recv(cx)
    }
}

/// A store operation failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// No such object (HTTP 404).
    #[error("{resource} {name:?} not found")]
    NotFound {
        /// Resource.
        resource: String,
        /// Name.
        name: String,
    },
    /// Create of an existing object (HTTP 409, reason AlreadyExists).
    #[error("{resource} {name:?} already exists")]
    AlreadyExists {
        /// Resource.
        resource: String,
        /// Name.
        name: String,
    },
    /// Compare-and-swap lost (HTTP 409, reason Conflict; upstream message).
    #[error(
        "Operation cannot be fulfilled on {resource} {name:?}: the object has been modified; please apply your changes to the latest version and try again"
    )]
    Conflict {
        /// Resource.
        resource: String,
        /// Name.
        name: String,
    },
    /// Watch from a revision older than the retained history (HTTP 410, reason Expired).
    #[error("too old resource version: {requested} ({oldest})")]
    Gone {
        /// The revision asked for.
        requested: u64,
        /// The oldest revision a watch can still start from.
        oldest: u64,
    },
    /// Watch from a revision the store has not reached (HTTP 504, reason Timeout; upstream
    /// message).
    #[error("Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion {
        /// The revision asked for.
        requested: u64,
        /// The store's current revision.
        current: u64,
    },
    /// The object is not one the store can hold (HTTP 400/500 depending on the caller).
    #[error("invalid object: {0}")]
    Invalid(String),
    /// The backend failed (HTTP 503): what was being done, and the backend's own error
    /// (redb's, etcd's, the decoder's), kept for its chain.
    #[error("storage error: {context}: {source}")]
    Backend {
        /// What was being done (`etcd`, `opening /var/lib/…/store.redb`, …).
        context: String,
        /// The backend's error.
        #[source]
        source: BackendError,
    },
    /// The store cannot serve right now: its watch ended, its cache stopped or is being
    /// refilled (HTTP 503).
    #[error("storage error: {0}")]
    Unavailable(String),
}

/// A storage backend's own error, kept whole (its own chain included) and shareable, so
/// that a [`StoreError`] stays `Clone` and comparable (by message).
#[derive(Debug, Clone)]
pub struct BackendError(std::sync::Arc<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for BackendError {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_string() == other.0.to_string()
    }
}

impl Eq for BackendError {}

impl StoreError {
    /// The backend failed while doing `context`.
    pub fn backend(context: impl Into<String>, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Backend { context: context.into(), source: BackendError(std::sync::Arc::from(source.into())) }
    }
}

/// The storage interface of the API server.
pub trait Store: Send + Sync {
    /// Reads one object.
    fn get<'a>(&'a self, key: &'a ObjectKey) -> BoxFuture<'a, Result<Stored, StoreError>>;

    /// Reads one object to look at, not to change: a backend that keeps objects in memory
    /// hands out a shared reference instead of a copy (the token hot paths read two or three
    /// objects per request).
    fn get_shared<'a>(&'a self, key: &'a ObjectKey) -> BoxFuture<'a, Result<std::sync::Arc<Stored>, StoreError>> {
        Box::pin(async move { self.get(key).await.map(std::sync::Arc::new) })
    }

    /// Reads one object at the freshness a request's `resourceVersion` asks for. A store
    /// without a cache reads consistently whatever is asked.
    fn get_with<'a>(
        &'a self,
        key: &'a ObjectKey,
        freshness: ReadConsistency,
    ) -> BoxFuture<'a, Result<std::sync::Arc<Stored>, StoreError>> {
        let _ = freshness;
        self.get_shared(key)
    }

    /// The freshness that makes every read of one request consistent as of now: a store
    /// with a cache fetches the backend's revision once, and each read waits for it.
    fn consistent_point(&self) -> BoxFuture<'_, Result<ReadConsistency, StoreError>> {
        Box::pin(std::future::ready(Ok(ReadConsistency::Consistent)))
    }

    /// Adds the store's own metrics (the watch cache's) to the server's registry.
    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        let _ = registry;
    }

    /// Lists `resource` (in `namespace` when given) at one consistent revision.
    fn list<'a>(
        &'a self,
        resource: &'a str,
        namespace: Option<&'a str>,
        options: &'a ListOptions,
    ) -> BoxFuture<'a, Result<ListResult, StoreError>>;

    /// Lists at the freshness a request's `resourceVersion` asks for. A store without a
    /// cache lists consistently whatever is asked.
    fn list_with<'a>(
        &'a self,
        resource: &'a str,
        namespace: Option<&'a str>,
        options: &'a ListOptions,
        freshness: ReadConsistency,
    ) -> BoxFuture<'a, Result<ListResult, StoreError>> {
        let _ = freshness;
        self.list(resource, namespace, options)
    }

    /// Creates an object; `AlreadyExists` if the key is taken.
    fn create<'a>(&'a self, key: &'a ObjectKey, object: Value) -> BoxFuture<'a, Result<Stored, StoreError>>;

    /// Replaces an object. With `expected` set, only if its revision is still `expected`
    /// (compare-and-swap), else `Conflict`. `NotFound` if it does not exist.
    fn update<'a>(
        &'a self,
        key: &'a ObjectKey,
        object: Value,
        expected: Option<u64>,
    ) -> BoxFuture<'a, Result<Stored, StoreError>>;

    /// Deletes an object (optionally only at revision `expected`); returns its last state.
    fn delete<'a>(&'a self, key: &'a ObjectKey, expected: Option<u64>) -> BoxFuture<'a, Result<Stored, StoreError>>;

    /// Watches `resource` (in `namespace` when given). `from = Some(rv)` delivers every
    /// change after revision `rv` (or `Gone` if that history is compacted); `from = None`
    /// first delivers the current objects as `Added`, then every later change.
    fn watch<'a>(
        &'a self,
        resource: &'a str,
        namespace: Option<&'a str>,
        options: ListOptions,
        from: Option<u64>,
    ) -> BoxFuture<'a, Result<WatchStream, StoreError>>;
}

/// A change on a store's broadcast of every change (the embedded store's, the watch
/// cache's), as a watch sees it.
pub(crate) trait Broadcast: Send + Sync + 'static {
    /// Its revision.
    fn revision(&self) -> u64;
    /// The event a watch of `prefix` selecting `options` sends for it, if any.
    fn event(&self, prefix: &str, options: &ListOptions) -> Option<WatchEvent>;
}

/// Serves a watch from a store's broadcast: `backlog` first, then every change after
/// `last` the watch selects. Ends as soon as the client is gone (even if no change ever
/// matches); a watcher too far behind gets 410 Gone and re-watches.
pub(crate) fn serve_broadcast<C: Broadcast>(
    backlog: Vec<WatchEvent>,
    mut last: u64,
    mut live: tokio::sync::broadcast::Receiver<std::sync::Arc<C>>,
    prefix: String,
    options: ListOptions,
) -> WatchStream {
    use tokio::sync::broadcast::error::RecvError;
    let (tx, rx) = mpsc::channel(256);
    let progress = WatchProgress::default();
    let producer = progress.clone();
    crate::task::spawn_named("watch", async move {
        for event in backlog {
            if tx.send(Ok(event)).await.is_err() {
                return;
            }
        }
        producer.advance(last);
        loop {
            let received = tokio::select! {
                () = tx.closed() => return,
                received = live.recv() => received,
            };
            match received {
                Ok(change) if change.revision() <= last => {}
                Ok(change) => {
                    last = change.revision();
                    if let Some(event) = change.event(&prefix, &options)
                        && tx.send(Ok(event)).await.is_err()
                    {
                        return;
                    }
                    // Every change is on the one broadcast: the watch progresses with the
                    // store, not only with its own resource.
                    producer.advance(last);
                }
                Err(RecvError::Lagged(_)) => {
                    let _ = tx.send(Err(StoreError::Gone { requested: last, oldest: last + 1 })).await;
                    return;
                }
                Err(RecvError::Closed) => return,
            }
        }
    });
    WatchStream::new(rx, progress)
}

/// What a watcher sends for a change given its selection (upstream filtered-watch rules:
/// a change into the selection is ADDED, out of it DELETED).
pub(crate) fn selected_event(
    kind: EventType,
    object: &Value,
    prev: Option<&Value>,
    revision: u64,
    options: &ListOptions,
) -> Option<WatchEvent> {
    let now = options.matches(object);
    let kind = match kind {
        EventType::Added if now => EventType::Added,
        EventType::Deleted if now => EventType::Deleted,
        EventType::Modified => match (prev.is_some_and(|p| options.matches(p)), now) {
            (true, true) => EventType::Modified,
            (false, true) => EventType::Added,
            (true, false) => {
                // Leaving the selection: upstream's cacher sends the last state the watcher
                // was entitled to see (the previous object) at the change's revision.
                let last = with_resource_version(prev.cloned().unwrap_or(Value::Null), revision);
                return Some(WatchEvent { kind: EventType::Deleted, object: last, revision });
            }
            (false, false) => return None,
        },
        _ => return None,
    };
    Some(WatchEvent { kind, object: object.clone(), revision })
}

/// Returns `object` with `metadata.resourceVersion` removed: what is stored.
pub(crate) fn strip_resource_version(mut object: Value) -> Result<Value, StoreError> {
    let meta = object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| StoreError::Invalid("object has no metadata".into()))?;
    meta.remove("resourceVersion");
    Ok(object)
}

/// Deletes each of `listed` (objects of `resource`, as a list returned them) that `doomed`
/// selects, only at the revision listed: one changed or gone since is left alone (a
/// collector's next pass sees it again). Returns how many were deleted.
pub async fn delete_listed(
    store: &dyn Store,
    resource: &str,
    listed: &[Value],
    doomed: impl Fn(&Value) -> bool,
) -> Result<usize, StoreError> {
    let mut removed = 0;
    for object in listed.iter().filter(|o| doomed(o)) {
        let Some(name) = object.field("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        let key = match object.field("/metadata/namespace").and_then(Value::as_str) {
            Some(ns) => ObjectKey::namespaced(resource, ns, name),
            None => ObjectKey::cluster(resource, name),
        };
        match store.delete(&key, resource_version_of(object)).await {
            Ok(_) => removed += 1,
            Err(StoreError::NotFound { .. } | StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// The revision an object carries as its `metadata.resourceVersion` (`None`: none, or not a
/// number).
pub fn resource_version_of(object: &Value) -> Option<u64> {
    object.field("/metadata/resourceVersion").and_then(Value::as_str).and_then(|v| v.parse().ok())
}

/// Sets `metadata.resourceVersion` to `revision`: what is read.
pub(crate) fn with_resource_version(mut object: Value, revision: u64) -> Value {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(revision.to_string()));
    }
    object
}

/// Deepest nesting of arrays and objects the API accepts in an object (upstream's CBOR
/// decoder limit; JSON bodies are held to the same). The store wraps objects in change
/// records a few levels deeper, which must stay decodable.
pub const MAX_OBJECT_DEPTH: usize = 64;

/// The nesting depth of a value (a scalar is 0), computed without recursion.
pub fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(items) => {
                deepest = deepest.max(d + 1);
                stack.extend(items.iter().map(|i| (i, d + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(d + 1);
                stack.extend(map.values().map(|i| (i, d + 1)));
            }
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_error_keeps_its_cause_for_the_chain() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let e = StoreError::backend("opening /x/store.redb", io);
        assert_eq!(e.to_string(), "storage error: opening /x/store.redb: denied");
        let source = std::error::Error::source(&e).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("denied"), "the cause is the error's source");
        assert_eq!(e.clone(), e, "still Clone and comparable");
    }

    #[test]
    fn resource_versions_ask_for_upstreams_freshness() {
        assert_eq!(ReadConsistency::from_resource_version(None), Ok(ReadConsistency::Consistent));
        assert_eq!(ReadConsistency::from_resource_version(Some("")), Ok(ReadConsistency::Consistent));
        assert_eq!(ReadConsistency::from_resource_version(Some("0")), Ok(ReadConsistency::Any));
        assert_eq!(ReadConsistency::from_resource_version(Some("42")), Ok(ReadConsistency::NotOlderThan(42)));
        assert_eq!(
            ReadConsistency::from_resource_version(Some("-1")),
            Err("invalid resourceVersion \"-1\"".to_owned())
        );
    }

    #[test]
    fn depth_counts_containers() {
        assert_eq!(depth(&serde_json::json!(1)), 0);
        assert_eq!(depth(&serde_json::json!({"a": [1, {"b": []}]})), 4);
        let mut deep = serde_json::json!(0);
        for _ in 0..100 {
            deep = serde_json::json!([deep]);
        }
        assert_eq!(depth(&deep), 100);
    }

    #[test]
    fn leaving_a_selection_is_deleted_with_the_last_selected_state() {
        let options = ListOptions { labels: LabelSelector::parse("app=web").unwrap(), ..Default::default() };
        let before = serde_json::json!({"metadata": {"name": "p", "labels": {"app": "web"}, "resourceVersion": "4"}});
        let after = serde_json::json!({"metadata": {"name": "p", "labels": {"app": "db"}, "resourceVersion": "5"}});
        let e = selected_event(EventType::Modified, &after, Some(&before), 5, &options).unwrap();
        assert_eq!(e.kind, EventType::Deleted);
        assert_eq!(e.object["metadata"]["labels"]["app"], "web");
        assert_eq!(e.object["metadata"]["resourceVersion"], "5");
    }

    #[test]
    fn storage_keys_follow_upstream_layout() {
        let k = ObjectKey::namespaced("pods", "ns", "web");
        assert_eq!(k.storage_key(), "/registry/pods/ns/web");
        assert_eq!(ObjectKey::from_storage_key("/registry/pods/ns/web"), Some(k));
        let n = ObjectKey::cluster("nodes", "n1");
        assert_eq!(n.storage_key(), "/registry/nodes/n1");
        assert_eq!(ObjectKey::from_storage_key("/registry/nodes/n1"), Some(n));
        assert_eq!(ObjectKey::from_storage_key("/other/x"), None);
        assert_eq!(list_prefix("pods", Some("ns")), "/registry/pods/ns/");
        assert_eq!(list_prefix("pods", None), "/registry/pods/");
    }
}
