//! Watch-fed in-memory views of the store, as upstream's informers feed its authorizers: a
//! view is filled from a list, then kept current from a watch from the list's revision;
//! when the watch ends or falls behind, it is relisted.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use crate::store::{EventType, ListOptions, Store, StoreError};

/// Pause before watching again after a watch failed or ended.
const REWATCH: Duration = Duration::from_secs(1);

/// Runs `watch` (a controller's list-and-watch) until the task is dropped: one that fails
/// is logged as `what`'s, and one that fails or ends is started again after a second.
pub(crate) async fn rewatch_forever<F, Fut>(what: &str, mut watch: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), StoreError>>,
{
    loop {
        if let Err(e) = watch().await {
            tracing::warn!(error = %e, "{what}: watch failed; starting again");
        }
        tokio::time::sleep(REWATCH).await;
    }
}

/// How long a write through this server waits for a view to apply it.
const APPLY_WAIT: Duration = Duration::from_secs(1);

/// What an informer keeps current.
pub(crate) trait View: Send + Sync + 'static {
    /// Replaces every object of `resource` with `items` (a fresh list).
    fn reset(&self, resource: &'static str, items: Vec<Value>);
    /// Applies one change of `resource`.
    fn apply(&self, resource: &'static str, kind: EventType, object: Value);
}

/// A view and the watches that keep it current.
pub(crate) struct Informer<V> {
    view: V,
    /// Per resource, the revision up to which its changes are applied.
    applied: HashMap<&'static str, watch::Sender<u64>>,
}

impl<V: View> Informer<V> {
    /// An informer over `resources`; [`Informer::start`] fills the view.
    pub(crate) fn new(view: V, resources: &[&'static str]) -> Arc<Self> {
        let applied = resources.iter().map(|r| (*r, watch::channel(0).0)).collect();
        Arc::new(Self { view, applied })
    }

    /// The view.
    pub(crate) fn view(&self) -> &V {
        &self.view
    }

    /// Lists every resource and follows its watch; returns once the lists are in.
    pub(crate) async fn start(self: &Arc<Self>, store: Arc<dyn Store>) -> Result<(), StoreError> {
        let resources: Vec<&'static str> = self.applied.keys().copied().collect();
        for resource in resources {
            let revision = self.relist(store.as_ref(), resource).await?;
            podpass_serve::spawn_named(
                "informer",
                follow(Arc::downgrade(self), Arc::clone(&store), resource, revision),
            );
        }
        Ok(())
    }

    async fn relist(&self, store: &dyn Store, resource: &'static str) -> Result<u64, StoreError> {
        let listed = store.list(resource, None, &ListOptions::default()).await?;
        self.view.reset(resource, listed.items);
        self.mark(resource, listed.revision);
        Ok(listed.revision)
    }

    fn mark(&self, resource: &str, revision: u64) {
        if let Some(applied) = self.applied.get(resource) {
            applied.send_if_modified(|r| {
                let newer = revision > *r;
                *r = (*r).max(revision);
                newer
            });
        }
    }

    /// Waits (at most a second) until a write of `resource` at `revision` is applied.
    pub(crate) async fn wait_applied(&self, resource: &str, revision: u64) {
        let Some(applied) = self.applied.get(resource) else { return };
        let mut rx = applied.subscribe();
        let _ = tokio::time::timeout(APPLY_WAIT, rx.wait_for(|r| *r >= revision)).await;
    }
}

/// Applies `resource`'s changes from `revision` on; relists when the watch ends or falls
/// behind. Stops when the informer is dropped.
async fn follow<V: View>(
    informer: Weak<Informer<V>>,
    store: Arc<dyn Store>,
    resource: &'static str,
    mut revision: u64,
) {
    let mut retry = Duration::from_millis(100);
    loop {
        match store.watch(resource, None, ListOptions::default(), Some(revision)).await {
            Ok(mut stream) => {
                retry = Duration::from_millis(100);
                while let Some(event) = stream.next().await {
                    let Ok(event) = event else { break };
                    let Some(informer) = informer.upgrade() else { return };
                    informer.view.apply(resource, event.kind, event.object);
                    revision = revision.max(event.revision);
                    informer.mark(resource, revision);
                }
            }
            Err(e) => tracing::warn!(resource, error = %e, "informer: watch failed; relisting"),
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(Duration::from_secs(5));
        let Some(strong) = informer.upgrade() else { return };
        match strong.relist(store.as_ref(), resource).await {
            Ok(r) => revision = r,
            Err(e) => tracing::warn!(resource, error = %e, "informer: relist failed"),
        }
    }
}
