//! The embedded store: one `redb` file, ACID and crash-safe. Every write commits with
//! redb's default immediate durability (fsync) before it is acknowledged, so nothing a
//! client saw succeed is lost on a crash or power cut.
//!
//! Layout: `objects` maps the upstream storage key to (revision, JSON); `events` is the
//! change log by revision, kept for the last `history` revisions so that watches can
//! resume; `meta` holds the current revision and the highest compacted one.
//!
//! Point reads (`get`) are served from an in-memory copy of the latest objects, loaded at
//! open and updated by the one committer after each commit. The process holds redb's file
//! lock, so no one else writes the file and the copy is authoritative; a read never waits
//! for a blocking thread (TokenRequest and TokenReview do two or three gets each).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock, Weak};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;

use super::{
    BoxFuture, EventType, ListOptions, ListResult, ObjectKey, Store, StoreError, Stored, WatchEvent, WatchStream,
    list_prefix, strip_resource_version, with_resource_version,
};

const OBJECTS: TableDefinition<&str, (u64, &[u8])> = TableDefinition::new("objects");
const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const REVISION: &str = "revision";
const COMPACTED: &str = "compacted";

/// Changes kept for watches to resume from, by default.
pub const DEFAULT_HISTORY: u64 = 10_000;
/// Events a slow watcher may fall behind before it must relist.
const WATCH_BUFFER: usize = 4096;

/// One change, as logged and broadcast. Its objects are shared with the store's latest
/// copies (`Arc`), not copied: a deep copy of a pod's JSON tree per write was a tenth of
/// the server's CPU under a write load.
#[derive(Debug, Clone)]
struct Change {
    kind: EventType,
    key: String,
    revision: u64,
    /// The object after the change (its last state for deletions), resourceVersion set:
    /// for a create or an update, the very copy `latest` holds.
    object: Arc<Stored>,
    /// The object before a modification (the copy `latest` held).
    prev: Option<Arc<Stored>>,
}

/// A change as the change log holds it (JSON).
#[derive(Serialize, Deserialize)]
struct LoggedChange<K, O> {
    #[serde(rename = "type")]
    kind: EventType,
    key: K,
    revision: u64,
    object: O,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prev: Option<O>,
}

impl Change {
    /// Its change-log entry.
    fn to_log(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(&LoggedChange {
            kind: self.kind,
            key: self.key.as_str(),
            revision: self.revision,
            object: &self.object.object,
            prev: self.prev.as_ref().map(|p| &p.object),
        })
    }

    /// A change-log entry, read back.
    fn from_log(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        let logged: LoggedChange<String, Value> = serde_json::from_slice(bytes)?;
        Ok(Self {
            kind: logged.kind,
            key: logged.key,
            revision: logged.revision,
            object: Arc::new(Stored { object: logged.object, revision: logged.revision }),
            // Only its object is logged; its revision is the resourceVersion it carries.
            prev: logged.prev.map(|object| {
                let revision = super::resource_version_of(&object).unwrap_or(0);
                Arc::new(Stored { object, revision })
            }),
        })
    }
}

struct Inner {
    db: Database,
    /// Writes waiting for the next commit, in arrival order, and whether a committer is at
    /// work (at most one: it commits, updates `latest` and broadcasts, so watchers see
    /// revisions in order).
    queue: Arc<Mutex<Queue>>,
    /// The latest committed object per storage key (resourceVersion set), for `get`.
    latest: RwLock<HashMap<String, Arc<Stored>>>,
    changes: broadcast::Sender<Arc<Change>>,
    history: u64,
}

/// The embedded, single-file store.
#[derive(Clone)]
pub struct EmbeddedObjectStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EmbeddedObjectStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedObjectStore").field("history", &self.inner.history).finish_non_exhaustive()
    }
}

fn backend(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
    StoreError::backend("redb", e)
}

enum Op {
    Create(Value),
    Update(Value, Option<u64>),
    Delete(Option<u64>),
}

impl EmbeddedObjectStore {
    /// Opens (or creates) the store file at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with_history(path, DEFAULT_HISTORY)
    }

    /// Opens the store keeping `history` revisions of change log for watches.
    pub fn open_with_history(path: &Path, history: u64) -> Result<Self, StoreError> {
        let db = Database::create(path).map_err(|e| StoreError::backend(format!("opening {}", path.display()), e))?;
        // Every Secret of the cluster is in this file: the owner's only, whatever the umask.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| StoreError::backend(format!("chmod 600 {}", path.display()), e))?;
        }
        // Create the tables so that readers never meet a missing table.
        let txn = db.begin_write().map_err(backend)?;
        {
            txn.open_table(OBJECTS).map_err(backend)?;
            txn.open_table(EVENTS).map_err(backend)?;
            txn.open_table(META).map_err(backend)?;
        }
        txn.commit().map_err(backend)?;
        let latest = load_latest(&db)?;
        let (changes, _) = broadcast::channel(WATCH_BUFFER);
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                queue: Arc::default(),
                latest: RwLock::new(latest),
                changes,
                history: history.max(1),
            }),
        })
    }

    fn shared(&self, key: &ObjectKey) -> Result<Arc<Stored>, StoreError> {
        let latest = self.inner.latest.read().unwrap_or_else(|p| p.into_inner());
        latest
            .get(&key.storage_key())
            .cloned()
            .ok_or_else(|| StoreError::NotFound { resource: key.resource.clone(), name: key.name.clone() })
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || f(&inner)).await.map_err(|e| StoreError::backend("store task", e))?
    }
}

/// Every object in the file, decoded, by storage key.
fn load_latest(db: &Database) -> Result<HashMap<String, Arc<Stored>>, StoreError> {
    let txn = db.begin_read().map_err(backend)?;
    let objects = txn.open_table(OBJECTS).map_err(backend)?;
    let mut latest = HashMap::new();
    for entry in objects.iter().map_err(backend)? {
        let (k, v) = entry.map_err(backend)?;
        let (revision, bytes) = v.value();
        latest.insert(k.value().to_owned(), Arc::new(Stored { object: decode(k.value(), revision, bytes)?, revision }));
    }
    Ok(latest)
}

fn decode(key: &str, revision: u64, bytes: &[u8]) -> Result<Value, StoreError> {
    let object: Value =
        serde_json::from_slice(bytes).map_err(|e| StoreError::backend(format!("corrupt object at {key}"), e))?;
    Ok(with_resource_version(object, revision))
}

/// Writes committed together at most: one transaction and one fsync for all of them.
const MAX_BATCH: usize = 256;

/// What a committed batch did.
struct Committed {
    /// Each write's outcome, in the batch's order.
    outcomes: Vec<Result<Stored, StoreError>>,
    /// The changes committed, in revision order.
    changes: Vec<Change>,
    /// The latest object each written key is left with (`None`: deleted).
    overlay: HashMap<String, Option<Arc<Stored>>>,
}

/// A write waiting for its commit, and where its outcome goes.
struct Pending {
    key: ObjectKey,
    op: Op,
    reply: tokio::sync::oneshot::Sender<Result<Stored, StoreError>>,
}

/// The writes waiting for a commit.
#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    /// A committer task is draining `pending`.
    committing: bool,
}

/// The one committer at work. It holds the store only while it commits a batch, and lets
/// go of it before answering the batch's writes, so a store whose last handle is dropped
/// once its writes are answered is closed at once (its file can be opened again).
///
/// If it ends without emptying the queue (a panic, or a runtime that would not run it), the
/// writes still queued fail instead of waiting for ever, and the next write starts a new
/// committer.
struct Committer {
    queue: Arc<Mutex<Queue>>,
    store: Weak<Inner>,
    /// The queue was found empty and the committer said so.
    done: bool,
}

impl Committer {
    /// Commits batches until the queue is empty, then says it is done under the queue's
    /// lock, so a write queued after that starts the next committer.
    fn drain(mut self) {
        loop {
            let batch = {
                let mut queue = lock(&self.queue);
                if queue.pending.is_empty() {
                    queue.committing = false;
                    self.done = true;
                    return;
                }
                let n = queue.pending.len().min(MAX_BATCH);
                queue.pending.drain(..n).collect::<Vec<_>>()
            };
            // Gone: every handle was dropped, and with it every write's wait; the writes
            // still queued are dropped with this committer.
            let Some(store) = self.store.upgrade() else { return };
            let answers = store.commit(batch);
            drop(store);
            for (reply, outcome) in answers {
                let _ = reply.send(outcome);
            }
        }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut queue = lock(&self.queue);
        queue.committing = false;
        // Dropping their reply senders answers them "store committer ended".
        queue.pending.clear();
    }
}

/// A write's reply and its outcome.
type Answer = (tokio::sync::oneshot::Sender<Result<Stored, StoreError>>, Result<Stored, StoreError>);

impl Inner {
    /// Commits `op` on `key` (group commit): the write joins the queue and waits, without a
    /// thread of its own, while one committer on a blocking thread commits everything
    /// queued, in arrival order, up to [`MAX_BATCH`] per transaction with one fsync each,
    /// so concurrent writers share the disk's flush instead of waiting for one each (as
    /// etcd batches its backend commits). Each write keeps its own revision, checks and
    /// outcome; nothing is acknowledged before the transaction holding it is durable.
    ///
    /// A burst of writers holds one blocking thread, not one each: every new thread costs
    /// its creation and a fresh allocator heap, which in a burst of a hundred writes was
    /// more CPU than the writes themselves.
    async fn apply(self: &Arc<Self>, key: &ObjectKey, op: Op) -> Result<Stored, StoreError> {
        let (reply, outcome) = tokio::sync::oneshot::channel();
        let start = {
            let mut queue = lock(&self.queue);
            queue.pending.push(Pending { key: key.clone(), op, reply });
            !std::mem::replace(&mut queue.committing, true)
        };
        if start {
            let committer = Committer { queue: Arc::clone(&self.queue), store: Arc::downgrade(self), done: false };
            // Not awaited: each write learns its outcome from its reply.
            drop(tokio::task::spawn_blocking(move || committer.drain()));
        }
        outcome.await.map_err(|e| StoreError::backend("store committer ended", e))?
    }

    /// Commits `batch` in one transaction and returns each write's answer: its own failure
    /// (not found, exists, conflict) leaves the others alone; a failure of the database
    /// fails them all, as none of them is committed. Watchers and reads see the batch
    /// before its writes are answered.
    fn commit(&self, batch: Vec<Pending>) -> Vec<Answer> {
        let mut replies = Vec::with_capacity(batch.len());
        let mut ops = Vec::with_capacity(batch.len());
        for p in batch {
            replies.push(p.reply);
            ops.push((p.key, p.op));
        }
        match self.write_batch(ops) {
            Ok(Committed { outcomes, changes, overlay }) => {
                {
                    let mut latest = self.latest.write().unwrap_or_else(|p| p.into_inner());
                    for (skey, stored) in overlay {
                        match stored {
                            Some(stored) => latest.insert(skey, stored),
                            None => latest.remove(&skey),
                        };
                    }
                }
                // In revision order; no receivers is fine: nobody watches.
                for change in changes {
                    let _ = self.changes.send(Arc::new(change));
                }
                replies.into_iter().zip(outcomes).collect()
            }
            Err(e) => replies.into_iter().map(|reply| (reply, Err(e.clone()))).collect(),
        }
    }

    /// The batch's writes in one committed transaction.
    fn write_batch(&self, ops: Vec<(ObjectKey, Op)>) -> Result<Committed, StoreError> {
        let txn = self.db.begin_write().map_err(backend)?;
        let mut outcomes = Vec::with_capacity(ops.len());
        let mut changes = Vec::with_capacity(ops.len());
        // The batch's own writes, seen by its later writes before they are committed.
        let mut overlay: HashMap<String, Option<Arc<Stored>>> = HashMap::new();
        {
            let mut objects = txn.open_table(OBJECTS).map_err(backend)?;
            let mut events = txn.open_table(EVENTS).map_err(backend)?;
            let mut meta = txn.open_table(META).map_err(backend)?;
            let mut revision = meta.get(REVISION).map_err(backend)?.map_or(0, |v| v.value());
            for (key, op) in ops {
                let skey = key.storage_key();
                // The in-memory copy is the committed state: only the one committer, running
                // here, writes it, so the current object need not be decoded again.
                let existing = match overlay.get(&skey) {
                    Some(pending) => pending.clone(),
                    None => self.latest.read().unwrap_or_else(|p| p.into_inner()).get(&skey).cloned(),
                };
                let planned = match plan(&key, op, existing, revision + 1) {
                    Ok(planned) => planned,
                    Err(e) => {
                        outcomes.push(Err(e));
                        continue;
                    }
                };
                revision += 1;
                match &planned.bytes {
                    Some(bytes) => objects.insert(skey.as_str(), (revision, bytes.as_slice())).map_err(backend)?,
                    None => objects.remove(skey.as_str()).map_err(backend)?,
                };
                // One copy of the object is shared by the change (watchers) and the latest
                // copy (reads); the writer gets its own.
                let object = Arc::new(Stored { object: planned.object, revision });
                let change = Change { kind: planned.kind, key: skey.clone(), revision, object, prev: planned.prev };
                let logged = change.to_log().map_err(backend)?;
                events.insert(revision, logged.as_slice()).map_err(backend)?;
                let stored = Stored::clone(&change.object);
                let after = (change.kind != EventType::Deleted).then(|| Arc::clone(&change.object));
                overlay.insert(skey, after);
                changes.push(change);
                outcomes.push(Ok(stored));
            }
            if !changes.is_empty() {
                meta.insert(REVISION, revision).map_err(backend)?;
                if revision > self.history {
                    let cut = revision - self.history;
                    events.retain_in(..=cut, |_, _| false).map_err(backend)?;
                    meta.insert(COMPACTED, cut).map_err(backend)?;
                }
            }
        }
        if changes.is_empty() {
            // Nothing to make durable: every write was refused.
            txn.abort().map_err(backend)?;
        } else {
            txn.commit().map_err(backend)?;
        }
        Ok(Committed { outcomes, changes, overlay })
    }

    fn read_revision(meta: &impl ReadableTable<&'static str, u64>, name: &str) -> Result<u64, StoreError> {
        Ok(meta.get(name).map_err(backend)?.map_or(0, |v| v.value()))
    }
}

/// One write, checked against the object it finds and ready to store at `revision`.
struct Planned {
    kind: EventType,
    /// The bytes to store (`None`: delete the key).
    bytes: Option<Vec<u8>>,
    /// The object after the write (its last state for a deletion), resourceVersion set.
    object: Value,
    /// The object before a modification.
    prev: Option<Arc<Stored>>,
}

/// Checks `op` against `existing` (exists, not found, resourceVersion precondition) and
/// prepares what it stores; nothing is written.
fn plan(key: &ObjectKey, op: Op, existing: Option<Arc<Stored>>, revision: u64) -> Result<Planned, StoreError> {
    let not_found = || StoreError::NotFound { resource: key.resource.clone(), name: key.name.clone() };
    let conflict = || StoreError::Conflict { resource: key.resource.clone(), name: key.name.clone() };
    // Stored without its resourceVersion; read (and broadcast) with the new one.
    let encode = |object: Value| -> Result<(Option<Vec<u8>>, Value), StoreError> {
        let object = strip_resource_version(object)?;
        let bytes = serde_json::to_vec(&object).map_err(backend)?;
        Ok((Some(bytes), with_resource_version(object, revision)))
    };
    match (op, existing) {
        (Op::Create(_), Some(_)) => {
            Err(StoreError::AlreadyExists { resource: key.resource.clone(), name: key.name.clone() })
        }
        (Op::Create(object), None) => {
            let (bytes, object) = encode(object)?;
            Ok(Planned { kind: EventType::Added, bytes, object, prev: None })
        }
        (Op::Update(..) | Op::Delete(_), None) => Err(not_found()),
        (Op::Update(_, Some(expected)) | Op::Delete(Some(expected)), Some(old)) if old.revision != expected => {
            Err(conflict())
        }
        (Op::Update(object, _), Some(old)) => {
            let (bytes, object) = encode(object)?;
            Ok(Planned { kind: EventType::Modified, bytes, object, prev: Some(old) })
        }
        // As upstream: a deletion event carries the deletion's revision.
        (Op::Delete(_), Some(old)) => Ok(Planned {
            kind: EventType::Deleted,
            bytes: None,
            object: with_resource_version(old.object.clone(), revision),
            prev: None,
        }),
    }
}

/// A poisoned lock only means a holder panicked; the database is unaffected.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a watcher of `prefix` sends for a change.
impl super::Broadcast for Change {
    fn revision(&self) -> u64 {
        self.revision
    }

    fn event(&self, prefix: &str, options: &ListOptions) -> Option<WatchEvent> {
        if !self.key.starts_with(prefix) {
            return None;
        }
        super::selected_event(
            self.kind,
            &self.object.object,
            self.prev.as_ref().map(|p| &p.object),
            self.revision,
            options,
        )
    }
}

impl Store for EmbeddedObjectStore {
    fn get<'a>(&'a self, key: &'a ObjectKey) -> BoxFuture<'a, Result<Stored, StoreError>> {
        let found = self.shared(key).map(|s| Stored::clone(&s));
        Box::pin(std::future::ready(found))
    }

    fn get_shared<'a>(&'a self, key: &'a ObjectKey) -> BoxFuture<'a, Result<Arc<Stored>, StoreError>> {
        Box::pin(std::future::ready(self.shared(key)))
    }

    fn list<'a>(
        &'a self,
        resource: &'a str,
        namespace: Option<&'a str>,
        options: &'a ListOptions,
    ) -> BoxFuture<'a, Result<ListResult, StoreError>> {
        let prefix = list_prefix(resource, namespace);
        let options = options.clone();
        Box::pin(self.blocking(move |inner| {
            let txn = inner.db.begin_read().map_err(backend)?;
            let objects = txn.open_table(OBJECTS).map_err(backend)?;
            let meta = txn.open_table(META).map_err(backend)?;
            let revision = Inner::read_revision(&meta, REVISION)?;
            let mut items = Vec::new();
            for entry in objects.range(prefix.as_str()..).map_err(backend)? {
                let (k, v) = entry.map_err(backend)?;
                let k = k.value();
                if !k.starts_with(prefix.as_str()) {
                    break;
                }
                let (rev, bytes) = v.value();
                let object = decode(k, rev, bytes)?;
                if options.matches(&object) {
                    items.push(object);
                }
            }
            Ok(ListResult { items, revision })
        }))
    }

    fn create<'a>(&'a self, key: &'a ObjectKey, object: Value) -> BoxFuture<'a, Result<Stored, StoreError>> {
        let key = key.clone();
        Box::pin(async move { self.inner.apply(&key, Op::Create(object)).await })
    }

    fn update<'a>(
        &'a self,
        key: &'a ObjectKey,
        object: Value,
        expected: Option<u64>,
    ) -> BoxFuture<'a, Result<Stored, StoreError>> {
        let key = key.clone();
        Box::pin(async move { self.inner.apply(&key, Op::Update(object, expected)).await })
    }

    fn delete<'a>(&'a self, key: &'a ObjectKey, expected: Option<u64>) -> BoxFuture<'a, Result<Stored, StoreError>> {
        let key = key.clone();
        Box::pin(async move { self.inner.apply(&key, Op::Delete(expected)).await })
    }

    fn watch<'a>(
        &'a self,
        resource: &'a str,
        namespace: Option<&'a str>,
        options: ListOptions,
        from: Option<u64>,
    ) -> BoxFuture<'a, Result<WatchStream, StoreError>> {
        let prefix = list_prefix(resource, namespace);
        Box::pin(async move {
            // Subscribe before reading the backlog so no change falls between the two.
            let live = self.inner.changes.subscribe();
            let (backlog_prefix, backlog_options) = (prefix.clone(), options.clone());
            let (backlog, last) = self
                .blocking(move |inner| {
                    let txn = inner.db.begin_read().map_err(backend)?;
                    let meta = txn.open_table(META).map_err(backend)?;
                    let current = Inner::read_revision(&meta, REVISION)?;
                    let compacted = Inner::read_revision(&meta, COMPACTED)?;
                    let mut out = Vec::new();
                    match from {
                        Some(rv) if rv < compacted => {
                            return Err(StoreError::Gone { requested: rv, oldest: compacted });
                        }
                        Some(rv) if rv > current => {
                            return Err(StoreError::TooLargeResourceVersion { requested: rv, current });
                        }
                        Some(rv) => {
                            let events = txn.open_table(EVENTS).map_err(backend)?;
                            for entry in events.range(rv.saturating_add(1)..=current).map_err(backend)? {
                                let (revision, bytes) = entry.map_err(backend)?;
                                // One undecodable entry must not fail every watch that
                                // resumes before it: it is skipped, and said so.
                                match Change::from_log(bytes.value()) {
                                    Ok(change) => {
                                        out.extend(super::Broadcast::event(&change, &backlog_prefix, &backlog_options))
                                    }
                                    Err(e) => tracing::warn!(revision = revision.value(), error = %e, "skipping an undecodable change-log entry"),
                                }
                            }
                        }
                        None => {
                            let objects = txn.open_table(OBJECTS).map_err(backend)?;
                            for entry in objects.range(backlog_prefix.as_str()..).map_err(backend)? {
                                let (k, v) = entry.map_err(backend)?;
                                if !k.value().starts_with(backlog_prefix.as_str()) {
                                    break;
                                }
                                let (rev, bytes) = v.value();
                                let object = match decode(k.value(), rev, bytes) {
                                    Ok(object) => object,
                                    Err(e) => {
                                        tracing::warn!(key = k.value(), error = %e, "skipping an undecodable object");
                                        continue;
                                    }
                                };
                                if backlog_options.matches(&object) {
                                    out.push(WatchEvent { kind: EventType::Added, object, revision: rev });
                                }
                            }
                        }
                    }
                    Ok((out, current.max(from.unwrap_or(0))))
                })
                .await?;
            Ok(super::serve_broadcast(backlog, last, live, prefix, options))
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::namespaced("configmaps", "ns", name)
    }

    fn object(name: &str, n: u64) -> Value {
        json!({"metadata": {"name": name}, "data": {"n": n}})
    }

    /// One batch whose writes depend on each other: each sees the ones before it, a refused
    /// write neither takes a revision nor disturbs the rest, and watchers see the committed
    /// ones in revision order.
    #[tokio::test]
    async fn a_batch_commits_each_write_on_its_own_terms() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedObjectStore::open(&dir.path().join("store.redb")).unwrap();
        let base = store.create(&key("old"), object("old", 0)).await.unwrap().revision;
        let mut watch = store.watch("configmaps", Some("ns"), ListOptions::default(), Some(base)).await.unwrap();
        let ops = vec![
            (key("a"), Op::Create(object("a", 1))),
            (key("a"), Op::Create(object("a", 2))),
            (key("a"), Op::Update(object("a", 3), Some(base))),
            (key("a"), Op::Update(object("a", 4), Some(base + 1))),
            (key("missing"), Op::Delete(None)),
            (key("old"), Op::Delete(Some(base))),
        ];
        let mut outcomes = Vec::new();
        let mut batch = Vec::new();
        for (key, op) in ops {
            let (reply, outcome) = tokio::sync::oneshot::channel();
            batch.push(Pending { key, op, reply });
            outcomes.push(outcome);
        }
        for (reply, outcome) in store.inner.commit(batch) {
            let _ = reply.send(outcome);
        }
        let got: Vec<Result<u64, StoreError>> =
            outcomes.into_iter().map(|mut o| o.try_recv().unwrap().map(|s| s.revision)).collect();
        assert_eq!(got[0], Ok(base + 1));
        assert!(matches!(got[1], Err(StoreError::AlreadyExists { .. })), "{:?}", got[1]);
        assert!(matches!(got[2], Err(StoreError::Conflict { .. })), "{:?}", got[2]);
        assert_eq!(got[3], Ok(base + 2));
        assert!(matches!(got[4], Err(StoreError::NotFound { .. })), "{:?}", got[4]);
        assert_eq!(got[5], Ok(base + 3));

        let a = store.get(&key("a")).await.unwrap();
        assert_eq!((a.revision, &a.object["data"]["n"]), (base + 2, &json!(4)));
        assert!(matches!(store.get(&key("old")).await, Err(StoreError::NotFound { .. })));
        for (kind, revision) in
            [(EventType::Added, base + 1), (EventType::Modified, base + 2), (EventType::Deleted, base + 3)]
        {
            let e =
                tokio::time::timeout(std::time::Duration::from_secs(5), watch.next()).await.unwrap().unwrap().unwrap();
            assert_eq!((e.kind, e.revision), (kind, revision));
        }
        // Durable as committed: a reopened file has the same objects and revision.
        drop((store, watch));
        let store = EmbeddedObjectStore::open(&dir.path().join("store.redb")).unwrap();
        assert_eq!(store.get(&key("a")).await.unwrap().revision, base + 2);
        assert_eq!(store.create(&key("b"), object("b", 0)).await.unwrap().revision, base + 4);
    }

    /// The change log keeps upstream's watch semantics across a restart: a watch resumed
    /// from it sees an update that leaves its selection as a deletion carrying the object
    /// it was entitled to see, and each entry is the JSON it always was.
    #[tokio::test]
    async fn a_watch_resumed_from_the_change_log_sees_an_object_leave_its_selection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.redb");
        let store = EmbeddedObjectStore::open(&path).unwrap();
        let labelled = |v: &str| json!({"metadata": {"name": "a", "labels": {"tier": v}}});
        let created = store.create(&key("a"), labelled("web")).await.unwrap().revision;
        let updated = store.update(&key("a"), labelled("db"), Some(created)).await.unwrap().revision;
        drop(store);

        let store = EmbeddedObjectStore::open(&path).unwrap();
        let options = ListOptions {
            labels: super::super::selector::LabelSelector::parse("tier=web").unwrap(),
            ..Default::default()
        };
        let mut watch = store.watch("configmaps", Some("ns"), options, Some(created - 1)).await.unwrap();
        let added =
            tokio::time::timeout(std::time::Duration::from_secs(5), watch.next()).await.unwrap().unwrap().unwrap();
        assert_eq!((added.kind, added.revision), (EventType::Added, created));
        let left =
            tokio::time::timeout(std::time::Duration::from_secs(5), watch.next()).await.unwrap().unwrap().unwrap();
        assert_eq!((left.kind, left.revision), (EventType::Deleted, updated));
        assert_eq!(left.object["metadata"]["labels"]["tier"], "web");
        assert_eq!(left.object["metadata"]["resourceVersion"], updated.to_string());

        let txn = store.inner.db.begin_read().unwrap();
        let events = txn.open_table(EVENTS).unwrap();
        let entry: Value = serde_json::from_slice(events.get(updated).unwrap().unwrap().value()).unwrap();
        let rv = |r: u64| r.to_string();
        assert_eq!(
            entry,
            json!({"type": "MODIFIED", "key": key("a").storage_key(), "revision": updated,
                   "object": {"metadata": {"name": "a", "labels": {"tier": "db"}, "resourceVersion": rv(updated)}},
                   "prev": {"metadata": {"name": "a", "labels": {"tier": "web"}, "resourceVersion": rv(created)}}})
        );
    }

    /// Bursts of concurrent writers, one after another so that writes keep arriving just as
    /// the committer finds the queue empty: every write is answered (none waits for a
    /// committer that already left), each with its own revision, and a watcher sees them
    /// all, in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_writers_are_all_committed_and_answered() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedObjectStore::open(&dir.path().join("store.redb")).unwrap();
        let base = store.create(&key("base"), object("base", 0)).await.unwrap().revision;
        let mut watch = store.watch("configmaps", Some("ns"), ListOptions::default(), Some(base)).await.unwrap();
        let mut revisions = Vec::new();
        for round in 0..40 {
            let writes: Vec<_> = (0..12)
                .map(|i| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        let name = format!("r{round}-{i}");
                        store.create(&key(&name), object(&name, i)).await
                    })
                })
                .collect();
            for w in writes {
                let stored = tokio::time::timeout(std::time::Duration::from_secs(30), w)
                    .await
                    .expect("a write was never answered")
                    .unwrap()
                    .unwrap();
                revisions.push(stored.revision);
            }
        }
        revisions.sort_unstable();
        let expected: Vec<u64> = (base + 1..=base + 480).collect();
        assert_eq!(revisions, expected);
        for revision in expected {
            let e =
                tokio::time::timeout(std::time::Duration::from_secs(5), watch.next()).await.unwrap().unwrap().unwrap();
            assert_eq!((e.kind, e.revision), (EventType::Added, revision));
        }
    }

    /// A committer that ends before emptying the queue (it panicked, or never ran) fails the
    /// writes still queued instead of leaving them waiting, and the next write starts a
    /// new one.
    #[tokio::test]
    async fn a_committer_that_ends_early_fails_what_it_left_and_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedObjectStore::open(&dir.path().join("store.redb")).unwrap();
        let (reply, mut outcome) = tokio::sync::oneshot::channel();
        {
            let mut queue = lock(&store.inner.queue);
            queue.pending.push(Pending { key: key("a"), op: Op::Create(object("a", 1)), reply });
            queue.committing = true;
        }
        drop(Committer { queue: Arc::clone(&store.inner.queue), store: Arc::downgrade(&store.inner), done: false });
        assert!(outcome.try_recv().is_err(), "a queued write was left waiting");
        assert!(matches!(store.get(&key("a")).await, Err(StoreError::NotFound { .. })));
        let stored = tokio::time::timeout(std::time::Duration::from_secs(10), store.create(&key("a"), object("a", 2)))
            .await
            .expect("no committer was started")
            .unwrap();
        assert_eq!(stored.object["data"]["n"], json!(2));
    }

    /// A batch in which every write is refused commits nothing and takes no revision.
    #[tokio::test]
    async fn a_batch_of_refused_writes_takes_no_revision() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedObjectStore::open(&dir.path().join("store.redb")).unwrap();
        let base = store.create(&key("a"), object("a", 0)).await.unwrap().revision;
        let (reply, mut outcome) = tokio::sync::oneshot::channel();
        for (reply, outcome) in
            store.inner.commit(vec![Pending { key: key("a"), op: Op::Create(object("a", 1)), reply }])
        {
            let _ = reply.send(outcome);
        }
        assert!(matches!(outcome.try_recv().unwrap(), Err(StoreError::AlreadyExists { .. })));
        assert_eq!(store.create(&key("b"), object("b", 0)).await.unwrap().revision, base + 1);
    }
}
