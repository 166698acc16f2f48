//! The etcd store (`--etcd-servers`), laid out as kube-apiserver lays out its etcd: keys
//! `/registry/<resource>/[<namespace>/]<name>`, JSON values without `resourceVersion`,
//! resourceVersion = the key's mod revision, writes as compare-and-swap transactions,
//! watches from a revision, compacted history reported as 410 Gone. Several API servers on
//! one etcd serve the same objects.
//!
//! Every call has a deadline, so a stopped etcd makes requests fail fast (5xx) instead of
//! hanging; the client reconnects by itself when etcd returns.

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType as EtcdEventType, GetOptions, KeyValue, Txn,
    TxnOp, TxnOpResponse, WatchOptions,
};
use serde_json::Value;
use tokio::sync::mpsc;

use super::{
    BoxFuture, EventType, ListOptions, ListResult, ObjectKey, Store, StoreError, Stored, WatchEvent, WatchProgress,
    WatchStream, list_prefix, selected_event, strip_resource_version, with_resource_version,
};

/// Deadline of one etcd request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The etcd-backed store.
#[derive(Clone)]
pub struct EtcdStore {
    client: Client,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore").finish_non_exhaustive()
    }
}

pub(super) fn backend(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
    StoreError::backend("etcd", e)
}

pub(super) fn revision_of(rev: i64) -> u64 {
    u64::try_from(rev).unwrap_or(0)
}

fn decode(kv: &KeyValue, revision: u64) -> Result<Value, StoreError> {
    let object: Value = serde_json::from_slice(kv.value())
        .map_err(|e| StoreError::backend(format!("corrupt object at {}", String::from_utf8_lossy(kv.key())), e))?;
    Ok(with_resource_version(object, revision))
}

/// The key just past every key starting with `prefix` (etcd's range end for a prefix).
pub(super) fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl EtcdStore {
    /// Connects to the endpoints (`http://host:port`, comma-separated in the flag).
    pub async fn connect(endpoints: &[String]) -> Result<Self, StoreError> {
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(3))
            .with_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5));
        let client = Client::connect(endpoints, Some(options)).await.map_err(backend)?;
        Ok(Self { client })
    }

    /// The etcd client (the watch cache shares its connection).
    pub(super) fn client(&self) -> &Client {
        &self.client
    }

    async fn read(&self, key: &ObjectKey) -> Result<Option<Stored>, StoreError> {
        let resp = self.client.kv_client().get(key.storage_key(), None).await.map_err(backend)?;
        match resp.kvs().first() {
            Some(kv) => {
                let revision = revision_of(kv.mod_revision());
                Ok(Some(Stored { object: decode(kv, revision)?, revision }))
            }
            None => Ok(None),
        }
    }

    /// The cluster's current revision (a count-only read of one key).
    async fn current_revision(&self) -> Result<u64, StoreError> {
        let options = GetOptions::new().with_count_only();
        let resp = self.client.kv_client().get("/registry/", Some(options)).await.map_err(backend)?;
        Ok(revision_of(resp.header().map_or(0, |h| h.revision())))
    }

    /// Runs a transaction whose success branch writes `object` at `key`.
    async fn put_if(&self, key: &ObjectKey, compare: Compare, object: Value) -> Result<Option<Stored>, StoreError> {
        let bytes = serde_json::to_vec(&strip_resource_version(object)?).map_err(backend)?;
        let skey = key.storage_key();
        let txn = Txn::new().when([compare]).and_then([TxnOp::put(skey.clone(), bytes.clone(), None)]);
        let resp = self.client.kv_client().txn(txn).await.map_err(backend)?;
        if !resp.succeeded() {
            return Ok(None);
        }
        let revision = revision_of(resp.header().map_or(0, |h| h.revision()));
        let object: Value = serde_json::from_slice(&bytes).map_err(backend)?;
        Ok(Some(Stored { object: with_resource_version(object, revision), revision }))
    }
}

impl Store for EtcdStore {
    fn get<'a>(&'a self, key: &'a ObjectKey) -> BoxFuture<'a, Result<Stored, StoreError>> {
        Box::pin(async move {
            self.read(key)
                .await?
                .ok_or_else(|| StoreError::NotFound { resource: key.resource.clone(), name: key.name.clone() })
        })
    }

    fn list<'a>(
        &'a self,
        resource: &'a str,
        namespace: Option<&'a str>,
        options: &'a ListOptions,
    ) -> BoxFuture<'a, Result<ListResult, StoreError>> {
        Box::pin(async move {
            let prefix = list_prefix(resource, namespace);
            let resp = self
                .client
                .kv_client()
                .get(prefix.clone(), Some(GetOptions::new().with_range(prefix_end(&prefix))))
                .await
                .map_err(backend)?;
            let revision = revision_of(resp.header().map_or(0, |h| h.revision()));
            let mut items = Vec::new();
            for kv in resp.kvs() {
                let object = decode(kv, revision_of(kv.mod_revision()))?;
                if options.matches(&object) {
                    items.push(object);
                }
            }
            Ok(ListResult { items, revision })
        })
    }

    fn create<'a>(&'a self, key: &'a ObjectKey, object: Value) -> BoxFuture<'a, Result<Stored, StoreError>> {
        Box::pin(async move {
            let absent = Compare::create_revision(key.storage_key(), CompareOp::Equal, 0);
            self.put_if(key, absent, object)
                .await?
                .ok_or_else(|| StoreError::AlreadyExists { resource: key.resource.clone(), name: key.name.clone() })
        })
    }

    fn update<'a>(
        &'a self,
        key: &'a ObjectKey,
        object: Value,
        expected: Option<u64>,
    ) -> BoxFuture<'a, Result<Stored, StoreError>> {
        Box::pin(async move {
            let skey = key.storage_key();
            let compare = match expected {
                Some(rev) => Compare::mod_revision(skey, CompareOp::Equal, i64::try_from(rev).unwrap_or(i64::MAX)),
                None => Compare::create_revision(skey, CompareOp::Greater, 0),
            };
            if let Some(stored) = self.put_if(key, compare, object).await? {
                return Ok(stored);
            }
            // Tell a missing object from a stale resourceVersion.
            match self.read(key).await? {
                None => Err(StoreError::NotFound { resource: key.resource.clone(), name: key.name.clone() }),
                Some(_) => Err(StoreError::Conflict { resource: key.resource.clone(), name: key.name.clone() }),
            }
        })
    }

    fn delete<'a>(&'a self, key: &'a ObjectKey, expected: Option<u64>) -> BoxFuture<'a, Result<Stored, StoreError>> {
        Box::pin(async move {
            let skey = key.storage_key();
            let compare = match expected {
                Some(rev) => {
                    Compare::mod_revision(skey.clone(), CompareOp::Equal, i64::try_from(rev).unwrap_or(i64::MAX))
                }
                None => Compare::create_revision(skey.clone(), CompareOp::Greater, 0),
            };
            let txn =
                Txn::new().when([compare]).and_then([TxnOp::delete(skey, Some(DeleteOptions::new().with_prev_key()))]);
            let resp = self.client.kv_client().txn(txn).await.map_err(backend)?;
            if !resp.succeeded() {
                return match self.read(key).await? {
                    None => Err(StoreError::NotFound { resource: key.resource.clone(), name: key.name.clone() }),
                    Some(_) => Err(StoreError::Conflict { resource: key.resource.clone(), name: key.name.clone() }),
                };
            }
            let revision = revision_of(resp.header().map_or(0, |h| h.revision()));
            let prev = resp.op_responses().into_iter().find_map(|r| match r {
                TxnOpResponse::Delete(d) => d.prev_kvs().first().cloned(),
                _ => None,
            });
            let prev =
                prev.ok_or_else(|| StoreError::NotFound { resource: key.resource.clone(), name: key.name.clone() })?;
            // As upstream: the deleted object carries the deletion's revision.
            Ok(Stored { object: decode(&prev, revision)?, revision })
        })
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
            // No revision: the current state as ADDED, then changes after the list.
            let (backlog, start) = match from {
                Some(rv) => {
                    let current = self.current_revision().await?;
                    if rv > current {
                        return Err(StoreError::TooLargeResourceVersion { requested: rv, current });
                    }
                    (Vec::new(), rv + 1)
                }
                None => {
                    let listed = self.list(resource, namespace, &options).await?;
                    let events = listed
                        .items
                        .into_iter()
                        .map(|object| {
                            let revision = object
                                .pointer("/metadata/resourceVersion")
                                .and_then(Value::as_str)
                                .and_then(|r| r.parse().ok())
                                .unwrap_or(0);
                            WatchEvent { kind: EventType::Added, object, revision }
                        })
                        .collect();
                    (events, listed.revision + 1)
                }
            };
            let watch_options = WatchOptions::new()
                .with_range(prefix_end(&prefix))
                .with_start_revision(i64::try_from(start).unwrap_or(i64::MAX))
                .with_prev_key();
            let mut watch_client = self.client.watch_client();
            let mut stream = watch_client.watch(prefix, Some(watch_options)).await.map_err(backend)?;
            let (tx, rx) = mpsc::channel(256);
            let progress = WatchProgress::default();
            let producer = progress.clone();
            crate::task::spawn_named("watch", async move {
                for event in backlog {
                    if tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
                let mut last = start.saturating_sub(1);
                producer.advance(last);
                loop {
                    // Ends as soon as the client is gone, even if no change ever matches;
                    // dropping the stream cancels the etcd watch.
                    let received = tokio::select! {
                        () = tx.closed() => return,
                        received = stream.message() => received,
                    };
                    let message = match received {
                        Ok(Some(m)) => m,
                        Ok(None) => return,
                        Err(e) => {
                            let _ = tx.send(Err(backend(e))).await;
                            return;
                        }
                    };
                    if message.compact_revision() > 0 {
                        let oldest = revision_of(message.compact_revision());
                        let _ = tx.send(Err(StoreError::Gone { requested: last, oldest })).await;
                        return;
                    }
                    if message.canceled() {
                        let _ = tx.send(Err(backend(format!("watch canceled: {}", message.cancel_reason())))).await;
                        return;
                    }
                    for event in message.events() {
                        let Some(kv) = event.kv() else { continue };
                        let revision = revision_of(kv.mod_revision());
                        last = last.max(revision);
                        let converted = match event.event_type() {
                            EtcdEventType::Put => {
                                let Ok(object) = decode(kv, revision) else { continue };
                                let prev = event.prev_kv().and_then(|p| decode(p, revision_of(p.mod_revision())).ok());
                                let kind = if kv.create_revision() == kv.mod_revision() {
                                    EventType::Added
                                } else {
                                    EventType::Modified
                                };
                                selected_event(kind, &object, prev.as_ref(), revision, &options)
                            }
                            EtcdEventType::Delete => {
                                let Some(prev) = event.prev_kv() else { continue };
                                let Ok(object) = decode(prev, revision) else { continue };
                                selected_event(EventType::Deleted, &object, None, revision, &options)
                            }
                        };
                        if let Some(e) = converted
                            && tx.send(Ok(e)).await.is_err()
                        {
                            return;
                        }
                    }
                    // etcd delivers a range's events in revision order: all up to `last`
                    // are sent.
                    producer.advance(last);
                }
            });
            Ok(WatchStream::new(rx, progress))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_range_end() {
        assert_eq!(prefix_end("/registry/pods/"), b"/registry/pods0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
    }
}
