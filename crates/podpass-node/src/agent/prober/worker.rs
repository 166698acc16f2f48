//! One probe of one container (kubelet: the prober's `worker`): it probes every
//! `periodSeconds` once the container ran `initialDelaySeconds`, the liveness and readiness
//! probes only once the startup probe succeeded, the startup probe only until then; a result
//! changes once `successThreshold` successes or `failureThreshold` failures come in a row
//! ([`Tally`]). A liveness or startup failure puts the worker on hold: the pod worker kills
//! the container, and its successor gets a worker of its own.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::net::Target;
use super::spec::{Handler, Kind, ProbeSpec};
use super::{Outcome, Probed, Results};
use crate::agent::events::EventRecorder;
use crate::runtime::CriRuntime;

/// Consecutive results and what they decide (kubelet `worker.doProbe`'s `resultRun`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    last: Option<Outcome>,
    run: u32,
}

impl Tally {
    /// Counts `result`; answers the new result once it came often enough in a row.
    pub(crate) fn count(&mut self, result: Outcome, success_threshold: u32, failure_threshold: u32) -> Option<Outcome> {
        if self.last == Some(result) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(result);
            self.run = 1;
        }
        let needed = if result == Outcome::Success { success_threshold } else { failure_threshold };
        (self.run >= needed).then_some(result)
    }
}

/// What a worker needs besides its probe.
pub(crate) struct Context {
    pub cri: CriRuntime,
    pub events: EventRecorder,
    pub pod: Pod,
    pub results: Arc<Results>,
}

/// The container a worker probes.
#[derive(Debug, Clone)]
pub(crate) struct Subject {
    /// Its name.
    pub name: String,
    /// The runtime's ID.
    pub id: String,
    /// When it started (wall-clock nanoseconds).
    pub started_nanos: i64,
    /// Where it is reached.
    pub target: Target,
    /// It has a startup probe (which holds the others until it succeeds).
    pub has_startup: bool,
}

fn wall_nanos() -> i64 {
    i64::try_from(k8s_openapi::jiff::Timestamp::now().as_nanosecond()).unwrap_or(i64::MAX)
}

/// Runs one probe of `kind` on `container` until it is put on hold (or the task is aborted).
pub(crate) async fn run(ctx: Arc<Context>, kind: Kind, spec: ProbeSpec, container: Subject) {
    let mut tally = Tally::default();
    let path = crate::agent::events::field_path(&container.name, false);
    loop {
        if !probe_once(&ctx, kind, &spec, &container, &path, &mut tally).await {
            return;
        }
        tokio::time::sleep(spec.period).await;
    }
}

/// One round; false once the worker is on hold.
async fn probe_once(
    ctx: &Context,
    kind: Kind,
    spec: &ProbeSpec,
    container: &Subject,
    path: &str,
    tally: &mut Tally,
) -> bool {
    let ran = Duration::from_nanos(u64::try_from(wall_nanos() - container.started_nanos).unwrap_or(0));
    if ran < spec.initial_delay {
        return true;
    }
    // Unknown (absent) is not started: only a success, or no startup probe at all, is.
    let started = !container.has_startup || ctx.results.get(&container.id, Kind::Startup) == Some(Outcome::Success);
    match kind {
        // Once started, a startup probe is not run again for this container.
        Kind::Startup if started => return true,
        // The others wait for the start.
        Kind::Liveness | Kind::Readiness if !started => return true,
        _ => {}
    }
    let result = match probe(ctx, spec, container).await {
        Ok(Probed::Success(_)) => Outcome::Success,
        Ok(Probed::Warning(output)) => {
            let message = format!("{} probe warning: {output}", kind.name());
            ctx.events.record(&ctx.pod, path, "Warning", "ProbeWarning", &message);
            Outcome::Success
        }
        Ok(Probed::Failure(output)) => {
            let message = format!("{} probe failed: {output}", kind.name());
            ctx.events.record(&ctx.pod, path, "Warning", "Unhealthy", &message);
            Outcome::Failure
        }
        Err(error) => {
            tracing::debug!(container = %container.name, probe = kind.name(), %error, "probe errored");
            let message = format!("{} probe errored and resulted in unknown state: {error}", kind.name());
            ctx.events.record(&ctx.pod, path, "Warning", "Unhealthy", &message);
            // Thrown away, as the kubelet's worker throws an erroring probe's result away.
            return true;
        }
    };
    if let Some(decided) = tally.count(result, spec.success_threshold, spec.failure_threshold) {
        ctx.results.set(&container.id, kind, decided);
        if decided == Outcome::Failure && matches!(kind, Kind::Liveness | Kind::Startup) {
            return false;
        }
    }
    true
}

async fn probe(ctx: &Context, spec: &ProbeSpec, container: &Subject) -> Result<Probed, super::ProbeError> {
    let target = &container.target;
    Ok(match &spec.handler {
        Handler::Exec(cmd) => return super::exec::exec_probe(&ctx.cri, &container.id, cmd, spec.timeout).await,
        Handler::Http { tls, host, port, path, headers } => {
            let get = super::http::HttpGet { tls: *tls, host, port: *port, path, headers };
            super::http::http_probe(target, &get, spec.timeout).await
        }
        Handler::Tcp { host, port } => super::net::tcp_probe(target, host, *port, spec.timeout).await,
        Handler::Grpc { port, service } => super::grpc::grpc_probe(target, *port, service, spec.timeout).await,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_changes_only_after_its_threshold_in_a_row() {
        let mut t = Tally::default();
        assert_eq!(t.count(Outcome::Failure, 1, 3), None);
        assert_eq!(t.count(Outcome::Failure, 1, 3), None);
        assert_eq!(t.count(Outcome::Success, 1, 3), Some(Outcome::Success), "one success is enough");
        assert_eq!(t.count(Outcome::Failure, 1, 3), None, "the run starts again");
        assert_eq!(t.count(Outcome::Failure, 1, 3), None);
        assert_eq!(t.count(Outcome::Failure, 1, 3), Some(Outcome::Failure));
        assert_eq!(t.count(Outcome::Failure, 1, 3), Some(Outcome::Failure), "and stays decided");
        let mut two = Tally::default();
        assert_eq!(two.count(Outcome::Success, 2, 1), None);
        assert_eq!(two.count(Outcome::Success, 2, 1), Some(Outcome::Success));
    }
}
