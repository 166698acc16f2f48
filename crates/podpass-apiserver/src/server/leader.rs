//! Leader election for the controllers the API server still runs itself, whose answer
//! depends on the replica (client-go `leaderelection` with a Lease lock): of the API server
//! replicas sharing one etcd, one holds the Lease `kube-system/podpass-apiserver-controllers`
//! and runs them. Without it two replicas would rewrite the `kubernetes` Endpoints, each
//! with its own address, back and forth forever. `kube-system/kube-controller-manager` is
//! the controller manager's (`podpass controller-manager`), where kube-controller-manager's
//! controllers run.
//!
//! As client-go: a candidate retries every `RetryPeriod`; a lease held by another is only
//! taken once it was seen unchanged for `LeaseDuration` on this replica's own clock (no
//! trust in another machine's clock); the holder that cannot renew within `RenewDeadline`
//! stops leading; every write is a compare-and-swap on the Lease, so two candidates never
//! both win; and on shutdown the holder releases the lease so another takes over at once
//! (`ReleaseOnCancel`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::watch;

use super::AppState;
use super::rest::objects::{prepare_new, random_suffix};
use super::rest::resources::find;
use crate::field::Field;
use crate::store::{ObjectKey, StoreError};

/// Runs `controller` while this replica leads, stopping it (dropping its future) when it
/// stops leading and starting it afresh when it leads again — kube-controller-manager's
/// controllers behind `--leader-elect`. Returns when the election ends.
pub(crate) async fn while_leading<F, Fut>(mut leading: watch::Receiver<bool>, controller: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    loop {
        if leading.wait_for(|l| *l).await.is_err() {
            return;
        }
        tokio::select! {
            () = controller() => {}
            _ = leading.wait_for(|l| !*l) => {}
        }
    }
}

/// The lease's namespace.
pub const LEASE_NAMESPACE: &str = "kube-system";
/// The lease's name: not kube-controller-manager's, which the controller manager holds.
pub const LEASE_NAME: &str = "podpass-apiserver-controllers";
/// kube-controller-manager's `--leader-elect-lease-duration` default.
const LEASE_DURATION: Duration = Duration::from_secs(15);
/// Its `--leader-elect-renew-deadline` default.
const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Its `--leader-elect-retry-period` default.
const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// How long releasing at shutdown may take.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// One replica's candidacy: its identity and whether it leads now.
pub(crate) struct Elector {
    identity: String,
    leading: watch::Sender<bool>,
}

/// What this replica last saw of the lease, and when (on its own clock).
struct Observed {
    spec: Value,
    at: Instant,
}

impl Elector {
    /// A candidate named as client-go names kube-controller-manager's: `<host>_<random>`.
    pub(crate) fn new() -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "podpass".to_owned());
        let suffix = random_suffix(16).unwrap_or_else(|_| std::process::id().to_string());
        Self { identity: format!("{host}_{suffix}"), leading: watch::channel(false).0 }
    }

    /// Follows whether this replica leads.
    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Campaigns and renews until the task is dropped.
    pub(crate) async fn run(&self, state: Arc<AppState>) {
        let mut observed: Option<Observed> = None;
        let mut last_renewal: Option<Instant> = None;
        loop {
            match self.try_acquire_or_renew(&state, &mut observed).await {
                Ok(true) => last_renewal = Some(Instant::now()),
                Ok(false) => last_renewal = None,
                Err(e) => tracing::warn!(error = %e, "leader election: reading or writing the lease failed"),
            }
            let leading = last_renewal.is_some_and(|t| t.elapsed() < RENEW_DEADLINE);
            self.leading.send_if_modified(|was| {
                let changed = *was != leading;
                if changed {
                    tracing::info!(identity = %self.identity, leading, "leader election: leadership changed");
                }
                *was = leading;
                changed
            });
            tokio::time::sleep(RETRY_PERIOD).await;
        }
    }

    /// client-go `tryAcquireOrRenew`: whether this replica holds the lease now.
    async fn try_acquire_or_renew(
        &self,
        state: &AppState,
        observed: &mut Option<Observed>,
    ) -> Result<bool, StoreError> {
        let key = ObjectKey::namespaced("leases", LEASE_NAMESPACE, LEASE_NAME);
        let now = micro_time();
        let current = match state.store.get(&key).await {
            Ok(current) => current,
            Err(StoreError::NotFound { .. }) => {
                let res = find("coordination.k8s.io", "leases").ok_or(StoreError::Invalid("no leases".into()))?;
                let mut lease = json!({"metadata": {"name": LEASE_NAME}, "spec": self.spec(&now, &now, 0)});
                prepare_new(res, Some(LEASE_NAMESPACE), &mut lease, podpass_token::now_unix())
                    .map_err(|e| StoreError::Invalid(e.message))?;
                return match state.store.create(&key, lease).await {
                    Ok(_) => Ok(true),
                    Err(StoreError::AlreadyExists { .. }) => Ok(false),
                    Err(e) => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        let spec = current.object.get("spec").cloned().unwrap_or_else(|| json!({}));
        if observed.as_ref().is_none_or(|o| o.spec != spec) {
            *observed = Some(Observed { spec: spec.clone(), at: Instant::now() });
        }
        let holder = spec.get("holderIdentity").and_then(Value::as_str).unwrap_or_default();
        let duration = spec
            .get("leaseDurationSeconds")
            .and_then(Value::as_u64)
            .map_or(LEASE_DURATION, |s| Duration::from_secs(s.min(3600)));
        let held_by_other = !holder.is_empty() && holder != self.identity;
        if held_by_other && observed.as_ref().is_some_and(|o| o.at.elapsed() < duration) {
            return Ok(false);
        }
        let transitions = spec.get("leaseTransitions").and_then(Value::as_u64).unwrap_or(0);
        let (acquired, transitions) = if holder == self.identity {
            (spec.get("acquireTime").and_then(Value::as_str).unwrap_or(&now).to_owned(), transitions)
        } else {
            (now.clone(), transitions + 1)
        };
        let mut lease = current.object.clone();
        lease["spec"] = self.spec(&acquired, &now, transitions);
        match state.store.update(&key, lease, Some(current.revision)).await {
            Ok(_) => Ok(true),
            Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn spec(&self, acquired: &str, renewed: &str, transitions: u64) -> Value {
        json!({
            "holderIdentity": self.identity,
            "leaseDurationSeconds": LEASE_DURATION.as_secs(),
            "acquireTime": acquired,
            "renewTime": renewed,
            "leaseTransitions": transitions,
        })
    }

    /// client-go `release`: if this replica holds the lease, it empties the holder (with a
    /// one-second duration) so the next candidate takes it at once. Bounded in time.
    pub(crate) async fn release(&self, state: &AppState) {
        let _ = self.leading.send(false);
        let release = async {
            let key = ObjectKey::namespaced("leases", LEASE_NAMESPACE, LEASE_NAME);
            let Ok(current) = state.store.get(&key).await else { return };
            if current.object.field("/spec/holderIdentity").and_then(Value::as_str) != Some(&self.identity) {
                return;
            }
            let now = micro_time();
            let mut lease = current.object.clone();
            lease["spec"]["holderIdentity"] = json!("");
            lease["spec"]["leaseDurationSeconds"] = json!(1);
            lease["spec"]["acquireTime"] = json!(now);
            lease["spec"]["renewTime"] = json!(now);
            if let Err(e) = state.store.update(&key, lease, Some(current.revision)).await {
                tracing::warn!(error = %e, "leader election: releasing the lease failed");
            }
        };
        let _ = tokio::time::timeout(RELEASE_TIMEOUT, release).await;
    }
}

/// Now as `metav1.MicroTime` writes it: `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
fn micro_time() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_time_has_six_fraction_digits() {
        let t = micro_time();
        assert_eq!(t.len(), "2026-11-22T10:55:02.123456Z".len(), "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[19] == b'.', "{t}");
        assert!(crate::time::parse_rfc3339(&t).is_some(), "{t}");
    }

    #[test]
    fn identities_differ_per_candidate() {
        assert_ne!(Elector::new().identity, Elector::new().identity);
    }
}
