//! Leader election on a Lease, as client-go's `leaderelection` with a `LeaseLock`
//! (kube-controller-manager's and kube-scheduler's `--leader-elect`). kube-rs has none; kubert's `lease` would
//! do, but its acquire is a server-side apply and its defaults are not client-go's, and
//! what other tools read off the Lease (holder, times, `leaseTransitions`, the
//! `LeaderElection` events) is client-go's exactly — so a small one of our own:
//!
//! - a candidate retries every `RetryPeriod` (jittered by 1.2, as `wait.JitterUntil`);
//! - a Lease held by another is valid until this candidate's *own* observation of its last
//!   change plus `LeaseDuration` (no trust in the holder's clock);
//! - taking over bumps `leaseTransitions`; renewing keeps `acquireTime`;
//! - every write is an Update conditioned on the resourceVersion read, so two candidates
//!   never both win;
//! - the leader that has not renewed within `RenewDeadline` has lost, and the caller exits
//!   (kube-controller-manager's `OnStoppedLeading` is fatal).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;

/// client-go's `RecommendedDefaultLeaderElectionConfiguration`.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Its renew deadline.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Its retry period.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// `JitterFactor` of the retry loop.
const JITTER: f64 = 1.2;

/// The election's settings.
#[derive(Debug, Clone)]
pub struct Election {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This candidate (`<hostname>_<random>`).
    pub identity: String,
    /// `--leader-elect-lease-duration`.
    pub lease_duration: Duration,
    /// `--leader-elect-renew-deadline`.
    pub renew_deadline: Duration,
    /// `--leader-elect-retry-period`.
    pub retry_period: Duration,
}

/// What this candidate last saw of the Lease, and when on its own clock.
#[derive(Debug, Clone)]
struct Observed {
    spec: LeaseSpec,
    at: Instant,
}

/// What one attempt decides from what was read (client-go `tryAcquireOrRenew`, step 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Another holds a valid lease: wait.
    Held,
    /// Write the lease as ours with these transitions and acquire time (keep it when
    /// renewing).
    Write { transitions: i32, keep_acquire_time: bool },
}

/// client-go's decision, as a pure function: `holder` is the Lease's holder, `observed_at`
/// when this candidate first saw its current record, `now` this candidate's clock.
pub(crate) fn decide(
    spec: &LeaseSpec,
    identity: &str,
    observed_at: Instant,
    now: Instant,
    lease_duration: Duration,
) -> Attempt {
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    let duration =
        spec.lease_duration_seconds.and_then(|s| u64::try_from(s).ok()).map_or(lease_duration, Duration::from_secs);
    let valid = observed_at + duration > now;
    let transitions = spec.lease_transitions.unwrap_or(0);
    if holder == identity {
        Attempt::Write { transitions, keep_acquire_time: true }
    } else if !holder.is_empty() && valid {
        Attempt::Held
    } else {
        Attempt::Write { transitions: transitions.saturating_add(1), keep_acquire_time: false }
    }
}

/// Why the election could not go on.
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    /// Leadership was lost: no renew within the renew deadline.
    #[error("leader election lost: lease {namespace}/{name} not renewed within {deadline:?}")]
    Lost {
        /// The Lease's namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The renew deadline.
        deadline: Duration,
    },
}

/// One candidate.
pub struct Elector {
    api: Api<Lease>,
    events: crate::events::Recorder,
    election: Election,
    observed: Option<Observed>,
}

fn now_micro() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

impl Elector {
    /// A candidate for `election`, reading and writing Leases through `client`; its
    /// `LeaderElection` events come from `component` (`kube-controller-manager`).
    pub fn new(client: kube::Client, election: Election, component: &str) -> Self {
        let api = Api::namespaced(client.clone(), &election.namespace);
        let events = crate::events::Recorder::new(client, component);
        Self { api, events, election, observed: None }
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.election.identity
    }

    /// One `tryAcquireOrRenew`: whether this candidate holds the lease after it. Errors
    /// (the API away, a conflict) are a failed attempt.
    async fn try_acquire_or_renew(&mut self) -> bool {
        let now = Instant::now();
        let id = self.election.identity.clone();
        let seconds = i32::try_from(self.election.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let ours = |transitions: i32, acquire: Option<MicroTime>| LeaseSpec {
            holder_identity: Some(id.clone()),
            lease_duration_seconds: Some(seconds),
            acquire_time: Some(acquire.unwrap_or_else(now_micro)),
            renew_time: Some(now_micro()),
            lease_transitions: Some(transitions),
            ..Default::default()
        };
        let current = match self.api.get_opt(&self.election.name).await {
            Ok(current) => current,
            Err(e) => {
                tracing::warn!(error = %e, "leader election: reading the lease");
                return false;
            }
        };
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.election.name.clone()),
                    namespace: Some(self.election.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(ours(0, None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observed = created.spec.map(|spec| Observed { spec, at: now });
                    true
                }
                Err(e) => {
                    tracing::debug!(error = %e, "leader election: creating the lease");
                    false
                }
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        // A record that changed since last seen starts its validity from now.
        let changed = self.observed.as_ref().is_none_or(|o| o.spec != spec);
        if changed {
            self.observed = Some(Observed { spec: spec.clone(), at: now });
        }
        let observed_at = self.observed.as_ref().map_or(now, |o| o.at);
        match decide(&spec, &id, observed_at, now, self.election.lease_duration) {
            Attempt::Held => false,
            Attempt::Write { transitions, keep_acquire_time } => {
                let acquire = if keep_acquire_time { spec.acquire_time.clone() } else { None };
                lease.spec = Some(ours(transitions, acquire));
                // An Update carries the resourceVersion read: a concurrent writer's wins, ours fails.
                match self.api.replace(&self.election.name, &PostParams::default(), &lease).await {
                    Ok(written) => {
                        self.observed = written.spec.map(|spec| Observed { spec, at: now });
                        true
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "leader election: updating the lease");
                        false
                    }
                }
            }
        }
    }

    fn jittered(&self) -> Duration {
        let extra = self.election.retry_period.mul_f64((JITTER - 1.0) * random_unit());
        self.election.retry_period + extra
    }

    /// Waits until this candidate holds the lease (client-go `acquire`), with the
    /// `LeaderElection` event "<id> became leader".
    pub async fn acquire(&mut self) {
        tracing::info!(lease = %format!("{}/{}", self.election.namespace, self.election.name), identity = %self.election.identity, "attempting to acquire leader lease");
        loop {
            if self.try_acquire_or_renew().await {
                let message = format!("{} became leader", self.election.identity);
                tracing::info!("{message}");
                self.record(&message).await;
                return;
            }
            tokio::time::sleep(self.jittered()).await;
        }
    }

    /// Renews every retry period while leading (client-go `renew`); returns when a renew
    /// deadline passed without one, after the event "<id> stopped leading".
    pub async fn renew_until_lost(&mut self) -> ElectionError {
        let mut last_renew = Instant::now();
        loop {
            tokio::time::sleep(self.election.retry_period).await;
            if self.try_acquire_or_renew().await {
                last_renew = Instant::now();
                continue;
            }
            if last_renew.elapsed() >= self.election.renew_deadline {
                let message = format!("{} stopped leading", self.election.identity);
                tracing::warn!("{message}");
                self.record(&message).await;
                return ElectionError::Lost {
                    namespace: self.election.namespace.clone(),
                    name: self.election.name.clone(),
                    deadline: self.election.renew_deadline,
                };
            }
        }
    }

    /// Gives the lease up (client-go `ReleaseOnCancel`): no holder, a one-second duration,
    /// so the next candidate takes it at once instead of waiting out the lease — a manager
    /// stopped on purpose (SIGTERM) is replaced without a gap. Only this candidate's lease
    /// is released; errors are logged.
    pub async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.election.name).await else { return };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.election.identity.as_str()) {
            return;
        }
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(now_micro()),
            renew_time: Some(now_micro()),
            lease_transitions: spec.lease_transitions,
            ..Default::default()
        });
        match self.api.replace(&self.election.name, &PostParams::default(), &lease).await {
            Ok(_) => tracing::info!(identity = %self.election.identity, "leader lease released"),
            Err(e) => tracing::warn!(error = %e, "releasing the leader lease"),
        }
    }

    async fn record(&self, message: &str) {
        let lease = crate::events::Regarding {
            api_version: "coordination.k8s.io/v1",
            kind: "Lease",
            namespace: &self.election.namespace,
            name: &self.election.name,
            uid: "",
        };
        self.events.normal(&lease, "LeaderElection", message).await;
    }
}

/// A number in [0, 1) from the system's random source (for jitter only).
pub(crate) fn random_unit() -> f64 {
    let mut bytes = [0u8; 4];
    if aws_lc_rs::rand::fill(&mut bytes).is_err() {
        return 0.5;
    }
    f64::from(u32::from_le_bytes(bytes)) / (f64::from(u32::MAX) + 1.0)
}

/// A candidate identity as client-go's components make it: `<hostname>_<random>`.
pub fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "podpass".to_owned());
    let mut bytes = [0u8; 16];
    let suffix = match aws_lc_rs::rand::fill(&mut bytes) {
        Ok(()) => data_encoding::HEXLOWER.encode(&bytes),
        Err(_) => std::process::id().to_string(),
    };
    format!("{host}_{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: &str, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(15),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    #[test]
    fn a_lease_is_taken_only_once_seen_unchanged_for_its_duration() {
        let seen = Instant::now();
        let d = DEFAULT_LEASE_DURATION;
        assert_eq!(decide(&spec("other", 3), "me", seen, seen + Duration::from_secs(14), d), Attempt::Held);
        assert_eq!(
            decide(&spec("other", 3), "me", seen, seen + Duration::from_secs(15), d),
            Attempt::Write { transitions: 4, keep_acquire_time: false },
            "expired on our own clock: taken over, one more transition"
        );
        assert_eq!(
            decide(&spec("me", 3), "me", seen, seen + Duration::from_secs(1), d),
            Attempt::Write { transitions: 3, keep_acquire_time: true },
            "a renew keeps the transitions and the acquire time"
        );
        assert_eq!(
            decide(&spec("", 3), "me", seen, seen, d),
            Attempt::Write { transitions: 4, keep_acquire_time: false },
            "a released lease is free at once"
        );
    }

    #[test]
    fn identities_are_host_and_random() {
        let (a, b) = (identity(), identity());
        assert_ne!(a, b);
        assert!(a.contains('_'), "{a}");
        let u = random_unit();
        assert!((0.0..1.0).contains(&u));
    }
}
