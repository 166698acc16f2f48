//! The embedded store: one `redb` file, ACID and crash-safe. Every write commits with
//! redb's default immediate durability (fsync) before it is acknowledged, so nothing a
//! client saw succeed is lost on a crash or power cut.
//!
//! Layout: `objects` maps the upstream storage key to (revision, JSON); `events` is the
//! change log by revision, kept for the last `history` revisions so that watches can
//! resume; `meta` holds the current revision and the highest compacted one.
//!
//! Point reads (`get`) are served from an in-memory copy of the latest objects, loaded at
//! open and updated under the writer lock after each commit. The process holds redb's file
//! lock, so no one else writes the file and the copy is authoritative; a read never waits
//! for a blocking thread (TokenRequest and TokenReview do two or three gets each).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

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

/// One change, as logged and broadcast.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Change {
    #[serde(rename = "type")]
    kind: EventType,
    key: String,
    revision: u64,
    /// The object after the change (its last state for deletions), resourceVersion set.
    object: Value,
    /// The object before a modification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prev: Option<Value>,
}

struct Inner {
    db: Database,
    /// Serialises commit + broadcast so watchers see revisions in order.
    writer: Mutex<()>,
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
                writer: Mutex::new(()),
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

impl Inner {
    fn apply(&self, key: &ObjectKey, op: Op) -> Result<Stored, StoreError> {
        let skey = key.storage_key();
        let not_found = || StoreError::NotFound { resource: key.resource.clone(), name: key.name.clone() };
        let conflict = || StoreError::Conflict { resource: key.resource.clone(), name: key.name.clone() };
        // A poisoned lock only means another writer panicked; the database is unaffected.
        let _guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let txn = self.db.begin_write().map_err(backend)?;
        let (result, change) = {
            let mut objects = txn.open_table(OBJECTS).map_err(backend)?;
            let mut events = txn.open_table(EVENTS).map_err(backend)?;
            let mut meta = txn.open_table(META).map_err(backend)?;
            let revision = meta.get(REVISION).map_err(backend)?.map_or(0, |v| v.value()) + 1;
            // The in-memory copy is the committed state: it is only written under the
            // writer lock held here, so the current object need not be decoded again.
            let existing = self.latest.read().unwrap_or_else(|p| p.into_inner()).get(&skey).cloned();
            // Stored without its resourceVersion; read (and broadcast) with the new one.
            let mut write = |object: Value| -> Result<Value, StoreError> {
                let object = strip_resource_version(object)?;
                let bytes = serde_json::to_vec(&object).map_err(backend)?;
                objects.insert(skey.as_str(), (revision, bytes.as_slice())).map_err(backend)?;
                Ok(with_resource_version(object, revision))
            };
            let (kind, stored, prev) = match (op, existing) {
                (Op::Create(_), Some(_)) => {
                    return Err(StoreError::AlreadyExists { resource: key.resource.clone(), name: key.name.clone() });
                }
                (Op::Create(object), None) => (EventType::Added, write(object)?, None),
                (Op::Update(..) | Op::Delete(_), None) => return Err(not_found()),
                (Op::Update(_, Some(expected)) | Op::Delete(Some(expected)), Some(old)) if old.revision != expected => {
                    return Err(conflict());
                }
                (Op::Update(object, _), Some(old)) => (EventType::Modified, write(object)?, Some(old.object.clone())),
                (Op::Delete(_), Some(old)) => {
                    objects.remove(skey.as_str()).map_err(backend)?;
                    // As upstream: a deletion event carries the deletion's revision.
                    (EventType::Deleted, with_resource_version(old.object.clone(), revision), None)
                }
            };
            let change = Change { kind, key: skey.clone(), revision, object: stored.clone(), prev };
            let logged = serde_json::to_vec(&change).map_err(backend)?;
            events.insert(revision, logged.as_slice()).map_err(backend)?;
            meta.insert(REVISION, revision).map_err(backend)?;
            if revision > self.history {
                let cut = revision - self.history;
                events.retain_in(..=cut, |_, _| false).map_err(backend)?;
                meta.insert(COMPACTED, cut).map_err(backend)?;
            }
            (Stored { object: stored, revision }, change)
        };
        txn.commit().map_err(backend)?;
        {
            let mut latest = self.latest.write().unwrap_or_else(|p| p.into_inner());
            if change.kind == EventType::Deleted {
                latest.remove(&skey);
            } else {
                latest.insert(skey, Arc::new(result.clone()));
            }
        }
        // No receivers is fine: nobody watches.
        let _ = self.changes.send(Arc::new(change));
        Ok(result)
    }

    fn read_revision(meta: &impl ReadableTable<&'static str, u64>, name: &str) -> Result<u64, StoreError> {
        Ok(meta.get(name).map_err(backend)?.map_or(0, |v| v.value()))
    }
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
        super::selected_event(self.kind, &self.object, self.prev.as_ref(), self.revision, options)
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
        Box::pin(self.blocking(move |inner| inner.apply(&key, Op::Create(object))))
    }

    fn update<'a>(
        &'a self,
        key: &'a ObjectKey,
        object: Value,
        expected: Option<u64>,
    ) -> BoxFuture<'a, Result<Stored, StoreError>> {
        let key = key.clone();
        Box::pin(self.blocking(move |inner| inner.apply(&key, Op::Update(object, expected))))
    }

    fn delete<'a>(&'a self, key: &'a ObjectKey, expected: Option<u64>) -> BoxFuture<'a, Result<Stored, StoreError>> {
        let key = key.clone();
        Box::pin(self.blocking(move |inner| inner.apply(&key, Op::Delete(expected))))
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
                                match serde_json::from_slice::<Change>(bytes.value()) {
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
