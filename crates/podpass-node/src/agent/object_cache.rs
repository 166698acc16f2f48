//! Config maps and secrets for pod volumes by the kubelet's Watch strategy
//! (`configMapAndSecretChangeDetectionStrategy: Watch`, kubelet watch_based_manager.go):
//! the first read of an object starts a watch of that one object (a `metadata.name` field
//! selector in its namespace, which the Node authorizer allows for objects the node's pods
//! reference), and every later read is answered from what the watch last delivered — no
//! request per read, so idle pods cost the API server nothing. A watch no one has read for
//! [`MAX_IDLE`] stops (upstream: five resync periods); an object marked `immutable` stops
//! its watch and keeps its value, as upstream. A read that the watch cannot answer within
//! [`SYNC_WAIT`] (the API server slow or away) is a plain GET instead.
//!
//! A pod worker subscribes to the objects its volumes read ([`ObjectCache::changes`]) and is
//! woken when one of them changes, so an idle pod needs no periodic resync to see a new
//! value; a watch with subscribers is never recycled.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::api::RequestError;
use futures::future::BoxFuture;

/// How long a read waits for a new watch's first listing before it GETs instead
/// (upstream waits a second, then fails the read).
pub const SYNC_WAIT: Duration = Duration::from_secs(1);
/// A watch not read for this long stops (upstream: 5 × the kubelet's 1 min sync period).
pub const MAX_IDLE: Duration = Duration::from_secs(300);
/// Objects watched at once, at most; past that, reads are plain GETs (a pod spec naming
/// thousands of objects must not open thousands of watches).
pub const MAX_WATCHED: usize = 4096;

/// A namespaced kind a watch can follow.
pub trait Watched:
    kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// What a watch knows of its object: `None` until its first listing is in, then the
/// object, or `Some(None)` when it does not exist.
type Known<K> = Option<Option<K>>;

struct Item<K> {
    known: Arc<watch::Sender<Known<K>>>,
    task: tokio::task::JoinHandle<()>,
    last_read: Instant,
}

impl<K> Drop for Item<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One kind's watched objects, by (namespace, name).
pub struct ObjectCache<K> {
    client: kube::Client,
    items: Mutex<HashMap<(String, String), Item<K>>>,
    immutable: fn(&K) -> bool,
}

impl<K: Watched> ObjectCache<K> {
    /// Reads through `client`; `immutable` says when an object will never change.
    pub fn new(client: kube::Client, immutable: fn(&K) -> bool) -> Self {
        Self { client, items: Mutex::new(HashMap::new()), immutable }
    }

    /// The object `name` in `namespace` (`Ok(None)`: it does not exist).
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Option<K>, RequestError> {
        if let Some(mut known) = self.watched(namespace, name) {
            let synced = tokio::time::timeout(SYNC_WAIT, known.wait_for(Option::is_some)).await;
            if let Ok(Ok(value)) = synced {
                let object = value.clone().flatten();
                drop(value);
                if object.as_ref().is_some_and(self.immutable) {
                    // It will never change: the watch stops, the value stays.
                    self.stop_watching(namespace, name);
                }
                return Ok(object);
            }
        }
        Api::<K>::namespaced(self.client.clone(), namespace).get_opt(name).await.map_err(RequestError::from)
    }

    /// The watch of the object, started on first read; `None` past [`MAX_WATCHED`].
    fn watched(&self, namespace: &str, name: &str) -> Option<watch::Receiver<Known<K>>> {
        let mut items = self.items.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (namespace.to_owned(), name.to_owned());
        if let Some(item) = items.get_mut(&key) {
            item.last_read = Instant::now();
            return Some(item.known.subscribe());
        }
        if items.len() >= MAX_WATCHED {
            return None;
        }
        let tx = Arc::new(watch::channel(None).0);
        let task = podpass_serve::spawn_named(
            "object-watch",
            follow(self.client.clone(), key.0.clone(), key.1.clone(), tx.clone()),
        );
        let known = tx.subscribe();
        items.insert(key, Item { known: tx, task, last_read: Instant::now() });
        Some(known)
    }

    /// A future that completes when the object `name` in `namespace` changes after this
    /// call (created, updated, deleted: its resourceVersion differs from the first one the
    /// watch delivered); it starts the watch if none runs. `None` past [`MAX_WATCHED`]: the
    /// caller must look again on a timer.
    pub fn changes(&self, namespace: &str, name: &str) -> Option<BoxFuture<'static, ()>> {
        let mut known = self.watched(namespace, name)?;
        Some(Box::pin(async move {
            let version = |k: &Known<K>| k.as_ref().map(|o| o.as_ref().and_then(|o| o.meta().resource_version.clone()));
            // `None` until the watch's first listing: that one sets the baseline.
            let mut seen = version(&known.borrow_and_update());
            loop {
                if known.changed().await.is_err() {
                    // The watch ended for good (the cache is gone): nothing will change.
                    return std::future::pending().await;
                }
                let now = version(&known.borrow_and_update());
                match (&seen, now) {
                    (None, now) => seen = now,
                    (Some(before), Some(now)) if *before != now => return,
                    _ => {}
                }
            }
        }))
    }

    /// Stops the watch of an immutable object, keeping what it delivered.
    fn stop_watching(&self, namespace: &str, name: &str) {
        let items = self.items.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(item) = items.get(&(namespace.to_owned(), name.to_owned())) {
            item.task.abort();
        }
    }

    /// Stops the watches nobody read for [`MAX_IDLE`] and nobody subscribes to (upstream
    /// startRecycleIdleWatch); answers how many are left.
    pub fn recycle_idle(&self) -> usize {
        let mut items = self.items.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        items.retain(|_, item| now.duration_since(item.last_read) < MAX_IDLE || item.known.receiver_count() > 0);
        items.len()
    }
}

/// Follows one object: its listing, then its changes (the watcher relists after a 410 and
/// backs off while the API server is away, keeping the last value meanwhile).
async fn follow<K: Watched>(client: kube::Client, namespace: String, name: String, tx: Arc<watch::Sender<Known<K>>>) {
    let api = Api::<K>::namespaced(client, &namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api, config).default_backoff().boxed();
    let mut listing: Option<Option<K>> = None;
    let ours = |o: &K| o.meta().name.as_deref() == Some(name.as_str());
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listing = Some(None),
            Ok(watcher::Event::InitApply(o)) if ours(&o) => listing = Some(Some(o)),
            Ok(watcher::Event::InitDone) => {
                tx.send_replace(Some(listing.take().flatten()));
            }
            Ok(watcher::Event::Apply(o)) if ours(&o) => {
                tx.send_replace(Some(Some(o)));
            }
            Ok(watcher::Event::Delete(o)) if ours(&o) => {
                tx.send_replace(Some(None));
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(%namespace, %name, error = %e, "object watch failed; retrying with back-off"),
        }
    }
}
