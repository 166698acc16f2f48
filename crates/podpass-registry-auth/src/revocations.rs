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

use std::collections::HashSet;
use std::sync::RwLock;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

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
