//! The kubelet's prober (pkg/kubelet/prober) for one pod: a worker per container and probe
//! ([`worker`]) while the container runs, each result kept by container ID as the kubelet's
//! results managers keep them — readiness starts `Failure`, liveness `Success`, startup
//! unknown — and a change wakes the pod worker, which reads them: readiness and startup into
//! the container's `ready` and `started` (so the pod's `Ready`, and through it a
//! Deployment's availability), a liveness or startup failure into a kill and restart
//! ([`super::pod_actions`]). Probes reach the pod from inside its own network namespace
//! ([`net`]); exec probes run through the runtime ([`exec`]).
//!
//! Workers end with the container (a new container ID gets new workers and fresh results),
//! and all of them with the pod worker ([`PodProbes`] aborts them when dropped). A pod being
//! deleted is no longer killed by its liveness or startup probes (kubelet: graceful
//! shutdown sets them to success).

mod exec;
mod grpc;
mod http;
mod net;
mod spec;
mod worker;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::sync::Notify;

pub(crate) use net::Target;
pub(crate) use spec::Kind;
use spec::ProbeSpec;

/// A probe's decided result (kubelet `proberesults.Result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Success,
    Failure,
}

/// What one probe run said (kubelet `probe.Result` with its output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Probed {
    Success(String),
    /// Success, with a warning event (a redirect not followed).
    Warning(String),
    Failure(String),
}

/// Why a probe could not be made, in the words the kubelet's (Go's) clients use.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProbeError {
    /// No connection: `dial tcp 127.128.0.9:80: connect: connection refused`.
    #[error("dial tcp {addr}: {why}")]
    Dial { addr: String, why: String },
    /// The host is no name TLS can be asked for.
    #[error("{0}")]
    ServerName(#[from] tokio_rustls::rustls::pki_types::InvalidDnsNameError),
    /// The TLS client could not be made.
    #[error("{0}")]
    TlsConfig(#[from] tokio_rustls::rustls::Error),
    /// The TLS handshake failed.
    #[error("{0}")]
    Tls(#[from] std::io::Error),
    /// The HTTP exchange failed.
    #[error("{0}")]
    Http(#[from] hyper::Error),
    /// The request could not be built (a header the probe names).
    #[error("{0}")]
    Request(#[from] ::http::Error),
    /// More redirects than Go's client follows.
    #[error("stopped after 10 redirects")]
    Redirects,
    /// The runtime could not run the command.
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
}

/// The pod's results by (container ID, kind), and what wakes its worker when one changes.
#[derive(Debug, Default)]
pub(crate) struct Results {
    map: Mutex<HashMap<(String, Kind), Outcome>>,
    changed: Notify,
}

impl Results {
    fn get(&self, id: &str, kind: Kind) -> Option<Outcome> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner).get(&(id.to_owned(), kind)).copied()
    }

    /// Sets a result; a change wakes the pod worker.
    fn set(&self, id: &str, kind: Kind, outcome: Outcome) {
        let before = self.map.lock().unwrap_or_else(PoisonError::into_inner).insert((id.to_owned(), kind), outcome);
        if before != Some(outcome) {
            self.changed.notify_one();
        }
    }

    fn remove(&self, id: &str, kind: Kind) {
        self.map.lock().unwrap_or_else(PoisonError::into_inner).remove(&(id.to_owned(), kind));
    }
}

/// A container the pod worker found running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Running {
    /// Its name.
    pub name: String,
    /// The runtime's container ID.
    pub id: String,
    /// When it started (wall-clock nanoseconds).
    pub started_nanos: i64,
}

/// Why the prober wants a container killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeKill {
    /// `Container app failed liveness probe` (kubelet's words, before `, will be restarted`).
    pub message: String,
    /// The probe's `terminationGracePeriodSeconds`, when it sets one.
    pub grace_seconds: Option<i64>,
}

struct Worker {
    id: String,
    task: tokio::task::JoinHandle<()>,
}

/// One pod's probe workers and results.
#[derive(Default)]
pub(crate) struct PodProbes {
    workers: HashMap<(String, Kind), Worker>,
    results: Arc<Results>,
}

impl std::fmt::Debug for PodProbes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodProbes").field("workers", &self.workers.len()).finish_non_exhaustive()
    }
}

impl Drop for PodProbes {
    fn drop(&mut self) {
        for worker in self.workers.values() {
            worker.task.abort();
        }
    }
}

/// The pod's regular container named `name`.
fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    pod.spec.as_ref()?.containers.iter().find(|c| c.name == name)
}

impl PodProbes {
    /// Completes when a result changes.
    pub(crate) async fn changed(&self) {
        self.results.changed.notified().await;
    }

    /// Brings the workers in line with what runs: a worker per probe of each running regular
    /// container (a new container ID: a new worker with the kind's initial result), none for
    /// what stopped. A pod being deleted keeps only its readiness probes.
    pub(crate) fn update(
        &mut self,
        cri: &crate::runtime::CriRuntime,
        events: &super::events::EventRecorder,
        pod: &Pod,
        running: &[Running],
        target: &Target,
    ) {
        let deleting = pod.metadata.deletion_timestamp.is_some();
        let mut wanted: HashMap<(String, Kind), (&Running, ProbeSpec)> = HashMap::new();
        for run in running {
            let Some(c) = container(pod, &run.name) else { continue };
            for kind in Kind::ALL {
                let Some(probe) = kind.of(c) else { continue };
                if deleting && kind != Kind::Readiness {
                    // kubelet: a pod shutting down gracefully is not killed by its probes.
                    self.results.set(&run.id, kind, Outcome::Success);
                    continue;
                }
                match ProbeSpec::of(probe, c) {
                    Ok(spec) => {
                        wanted.insert((run.name.clone(), kind), (run, spec));
                    }
                    Err(e) => {
                        // A probe that cannot run fails, as the kubelet's prober fails it.
                        let path = super::events::field_path(&run.name, false);
                        let message = format!("{} probe errored and resulted in unknown state: {e}", kind.name());
                        events.record(pod, &path, "Warning", "Unhealthy", &message);
                        if kind == Kind::Readiness {
                            self.results.set(&run.id, kind, Outcome::Failure);
                        }
                    }
                }
            }
        }
        self.workers.retain(|key, worker| {
            // A worker on hold (its container failed) stays until its container is gone:
            // its failure is what gets the container killed.
            let keep = wanted.get(key).is_some_and(|(run, _)| run.id == worker.id);
            if !keep {
                worker.task.abort();
                self.results.remove(&worker.id, key.1);
            }
            keep
        });
        let new: Vec<_> = wanted.into_iter().filter(|(key, _)| !self.workers.contains_key(key)).collect();
        if new.is_empty() {
            // Most syncs start no worker: the pod is not copied for them.
            return;
        }
        let ctx = Arc::new(worker::Context {
            cri: cri.clone(),
            events: events.clone(),
            pod: pod.clone(),
            results: Arc::clone(&self.results),
        });
        for ((name, kind), (run, spec)) in new {
            match kind {
                Kind::Readiness => self.results.set(&run.id, kind, Outcome::Failure),
                Kind::Liveness => self.results.set(&run.id, kind, Outcome::Success),
                // Unknown until it decides: absent.
                Kind::Startup => self.results.remove(&run.id, kind),
            }
            let subject = worker::Subject {
                name: name.clone(),
                id: run.id.clone(),
                started_nanos: run.started_nanos,
                target: target.clone(),
                has_startup: container(pod, &name).is_some_and(|c| c.startup_probe.is_some()),
            };
            let span = tracing::info_span!("probe", container = %name, probe = kind.name());
            let task =
                tokio::spawn(tracing::Instrument::instrument(worker::run(Arc::clone(&ctx), kind, spec, subject), span));
            self.workers.insert((name, kind), Worker { id: run.id.clone(), task });
        }
    }

    /// Whether container `c` (running as `id`) is ready: its readiness probe succeeded, or
    /// it has none.
    pub(crate) fn ready(&self, c: &Container, id: &str) -> bool {
        c.readiness_probe.is_none() || self.results.get(id, Kind::Readiness) == Some(Outcome::Success)
    }

    /// Whether container `c` (running as `id`) started: its startup probe succeeded, or it
    /// has none.
    pub(crate) fn started(&self, c: &Container, id: &str) -> bool {
        c.startup_probe.is_none() || self.results.get(id, Kind::Startup) == Some(Outcome::Success)
    }

    /// The running containers (by runtime ID) a liveness or startup probe failed.
    pub(crate) fn kills(&self, pod: &Pod) -> HashMap<String, ProbeKill> {
        let mut out = HashMap::new();
        for ((name, kind), worker) in &self.workers {
            if !matches!(kind, Kind::Liveness | Kind::Startup)
                || self.results.get(&worker.id, *kind) != Some(Outcome::Failure)
            {
                continue;
            }
            let grace_seconds =
                container(pod, name).and_then(|c| kind.of(c)).and_then(|p| p.termination_grace_period_seconds);
            let what = if *kind == Kind::Liveness { "liveness" } else { "startup" };
            out.insert(
                worker.id.clone(),
                ProbeKill { message: format!("Container {name} failed {what} probe"), grace_seconds },
            );
        }
        out
    }
}
