//! Revocation by `jti` (podpass's `RevokedToken`, `revocation.podpass.dev/v1`): for each
//! issuer with a `--token-review-kubeconfig`, registry-auth lists and then watches the
//! issuing cluster's revocations, and refuses a credential whose `jti` is revoked — a pod's
//! token, and every exchange token made from it (it carries the `jti` of the token it was
//! made from) — before anything else is asked, within a second of the revocation and
//! whatever the review cache holds. Registry tokens already issued live out their short TTL.
//!
//! A cluster that does not serve the kind (a real kube-apiserver), or does not let the
//! kubeconfig's user list and watch it, revokes nothing here: the failure is logged and
//! the watch retried with back-off; revocations known before a failure stay enforced.
//!
//! Deletions are pushed the same way ([`Deletions`]): where the kubeconfig's user may list
//! and watch pods, service accounts and nodes (metadata only is asked for), a deleted
//! object's UID is remembered for as long as a cached review could still vouch for it, and a
//! credential naming it — a pod's token, an exchange token made from it — is refused at
//! once instead of when the review cache expires.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Resource, core::PartialObjectMeta};

/// The revoked `jti`s of one issuer.
#[derive(Debug, Default)]
pub struct Revocations {
    jtis: RwLock<HashSet<String>>,
}

impl Revocations {
    /// Whether `jti` is revoked.
    pub fn contains(&self, jti: &str) -> bool {
        self.jtis.read().unwrap_or_else(std::sync::PoisonError::into_inner).contains(jti)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashSet<String>> {
        self.jtis.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Follows `client`'s cluster's revocations until the task is dropped (`issuer` names
    /// them in logs).
    pub async fn follow(&self, client: kube::Client, issuer: &str) {
        let resource = ApiResource {
            group: "revocation.podpass.dev".into(),
            version: "v1".into(),
            api_version: "revocation.podpass.dev/v1".into(),
            kind: "RevokedToken".into(),
            plural: "revokedtokens".into(),
        };
        let api: Api<DynamicObject> = Api::all_with(client, &resource);
        let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
        // A relist is gathered whole and then replaces the set: nothing revoked is
        // forgotten while it runs.
        let mut relisting: Option<HashSet<String>> = None;
        let mut failing = false;
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(e) => e,
                Err(e) => {
                    if !failing {
                        tracing::warn!(issuer, error = %e, "revoked tokens: cannot watch the issuer's revocations; retrying");
                        failing = true;
                    }
                    continue;
                }
            };
            failing = false;
            match event {
                Event::Init => relisting = Some(HashSet::new()),
                Event::InitApply(o) => {
                    if let (Some(set), Some(name)) = (relisting.as_mut(), o.metadata.name) {
                        set.insert(name);
                    }
                }
                Event::InitDone => {
                    if let Some(set) = relisting.take() {
                        tracing::info!(issuer, revoked = set.len(), "revoked tokens listed");
                        *self.write() = set;
                    }
                }
                Event::Apply(o) => {
                    if let Some(name) = o.metadata.name {
                        self.write().insert(name);
                    }
                }
                Event::Delete(o) => {
                    if let Some(name) = o.metadata.name {
                        self.write().remove(&name);
                    }
                }
            }
        }
    }
}

/// UIDs of pods, service accounts and nodes deleted recently (for as long as a review
/// answered before the deletion may still be cached), at most [`MAX_DELETED`]; and the
/// names of the cluster's nodes, to refuse a node proof of a node that no longer exists.
#[derive(Debug, Default)]
pub struct Deletions {
    inner: Mutex<DeletedUids>,
    nodes: Mutex<NodeNames>,
}

/// The names of the cluster's nodes as the node watch last listed and followed them
/// (`known` is `None` until a first list completes).
#[derive(Debug, Default)]
struct NodeNames {
    known: Option<HashSet<String>>,
    listing: Option<HashSet<String>>,
}

/// Node names remembered at most (a cluster with more is not followed by name: proofs of
/// its nodes are then not checked for existence, as before the first list).
const MAX_NODES: usize = 100_000;

impl NodeNames {
    fn observe<K: Resource>(&mut self, event: &Event<PartialObjectMeta<K>>) {
        let name = |o: &PartialObjectMeta<K>| o.metadata.name.clone().unwrap_or_default();
        match event {
            Event::Init => self.listing = Some(HashSet::new()),
            Event::InitApply(o) => {
                if let Some(listing) = self.listing.as_mut() {
                    listing.insert(name(o));
                    if listing.len() > MAX_NODES {
                        self.listing = None;
                    }
                }
            }
            Event::InitDone => self.known = self.listing.take(),
            Event::Apply(o) => {
                if let Some(known) = self.known.as_mut() {
                    known.insert(name(o));
                    if known.len() > MAX_NODES {
                        self.known = None;
                    }
                }
            }
            Event::Delete(o) => {
                if let Some(known) = self.known.as_mut() {
                    known.remove(&name(o));
                }
            }
        }
    }
}

/// The deleted UIDs, and the order they came in (oldest first), so the expired and, past
/// the bound, the oldest go first at constant cost.
#[derive(Debug, Default)]
struct DeletedUids {
    at: HashMap<String, Instant>,
    order: VecDeque<(String, Instant)>,
}

/// Deleted UIDs remembered at most (a flood of deletions forgets the oldest first; a
/// forgotten one is still refused once the review cache expires).
const MAX_DELETED: usize = 65_536;

impl Deletions {
    fn lock(&self) -> std::sync::MutexGuard<'_, DeletedUids> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the cluster is known to have no node named `name` (`false` while its nodes
    /// are not known: before the first list, or when they cannot be watched).
    pub fn node_absent(&self, name: &str) -> bool {
        let nodes = self.nodes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        nodes.known.as_ref().is_some_and(|known| !known.contains(name))
    }

    /// Whether any of `uids` names an object deleted within `window`.
    pub fn any_deleted<'a>(&self, uids: impl IntoIterator<Item = &'a str>, window: Duration) -> bool {
        let inner = self.lock();
        uids.into_iter().filter(|u| !u.is_empty()).any(|u| inner.at.get(u).is_some_and(|at| at.elapsed() < window))
    }

    fn record(&self, uid: String, window: Duration) {
        let mut inner = self.lock();
        let now = Instant::now();
        while inner.order.front().is_some_and(|(_, at)| at.elapsed() >= window) || inner.order.len() >= MAX_DELETED {
            let Some((old, at)) = inner.order.pop_front() else { break };
            // Only if it was not deleted again since (a later entry owns it then).
            if inner.at.get(&old) == Some(&at) {
                inner.at.remove(&old);
            }
        }
        inner.at.insert(uid.clone(), now);
        inner.order.push_back((uid, now));
    }

    /// Follows deletions of pods, service accounts and nodes in `client`'s cluster until
    /// the task is dropped, remembering each for `window`.
    pub async fn follow(&self, client: kube::Client, issuer: &str, window: Duration) {
        use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
        let config = watcher::Config::default;
        // Metadata only: registry-auth reads nothing of the objects but their UIDs.
        let pods = watcher::watcher(Api::<PartialObjectMeta<Pod>>::all(client.clone()), config()).default_backoff();
        let accounts =
            watcher::watcher(Api::<PartialObjectMeta<ServiceAccount>>::all(client.clone()), config()).default_backoff();
        let nodes = watcher::watcher(Api::<PartialObjectMeta<Node>>::all(client), config()).default_backoff();
        let mut events = std::pin::pin!(futures::stream::select(
            futures::stream::select(pods.map(|e| e.map(uid_of_deleted)), accounts.map(|e| e.map(uid_of_deleted))),
            nodes.map(|e| {
                let mut names = self.nodes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                match &e {
                    Ok(event) => names.observe(event),
                    // Nodes no longer followed are no longer known: no proof is refused on
                    // a stale list (the watcher lists anew once it reconnects).
                    Err(_) => names.known = None,
                }
                e.map(uid_of_deleted)
            }),
        ));
        let mut failing = false;
        while let Some(event) = events.next().await {
            match event {
                Ok(deleted) => {
                    failing = false;
                    if let Some(uid) = deleted {
                        self.record(uid, window);
                    }
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(issuer, error = %e, "deletions: cannot watch pods, service accounts or nodes; deleted objects' tokens pass until the review cache expires");
                        failing = true;
                    }
                }
            }
        }
    }
}

/// The UID of a deleted object, from a metadata watch event.
fn uid_of_deleted<K: Resource>(event: Event<PartialObjectMeta<K>>) -> Option<String> {
    match event {
        Event::Delete(o) => o.metadata.uid,
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> PartialObjectMeta<k8s_openapi::api::core::v1::Node> {
        let mut o = PartialObjectMeta::<k8s_openapi::api::core::v1::Node>::default();
        o.metadata.name = Some(name.into());
        o
    }

    #[test]
    fn nodes_are_known_absent_only_once_listed() {
        let d = Deletions::default();
        let observe = |e: Event<PartialObjectMeta<k8s_openapi::api::core::v1::Node>>| {
            d.nodes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).observe(&e);
        };
        assert!(!d.node_absent("n1"), "nothing known before a list");
        observe(Event::Init);
        observe(Event::InitApply(node("n1")));
        assert!(!d.node_absent("n9"), "a list not yet done says nothing");
        observe(Event::InitDone);
        assert!(!d.node_absent("n1"));
        assert!(d.node_absent("n9"));
        observe(Event::Apply(node("n9")));
        assert!(!d.node_absent("n9"), "a node that joined");
        observe(Event::Delete(node("n1")));
        assert!(d.node_absent("n1"), "a deleted node");
        // A relist replaces what was known, once done.
        observe(Event::Init);
        observe(Event::InitApply(node("n1")));
        assert!(d.node_absent("n1"));
        observe(Event::InitDone);
        assert!(!d.node_absent("n1") && d.node_absent("n9"));
    }

    #[test]
    fn a_deletion_is_remembered_for_its_window_and_a_flood_forgets_the_oldest() {
        let d = Deletions::default();
        let window = Duration::from_secs(60);
        d.record("pod-1".into(), window);
        assert!(d.any_deleted(["sa-1", "pod-1"], window));
        assert!(!d.any_deleted(["sa-1", ""], window), "an empty UID names nothing");
        assert!(!d.any_deleted(["pod-1"], Duration::ZERO), "past its window");
        for i in 0..MAX_DELETED {
            d.record(format!("uid-{i}"), window);
        }
        assert!(!d.any_deleted(["pod-1"], window), "the oldest went first");
        assert!(d.any_deleted([format!("uid-{}", MAX_DELETED - 1).as_str()], window));
        assert_eq!(d.lock().at.len(), MAX_DELETED);
        // Expired entries go as new ones come.
        d.record("late".into(), Duration::ZERO);
        assert_eq!(d.lock().order.len(), 1);
    }
}
