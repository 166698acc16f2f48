//! A container's probe as the prober runs it, read from the API's `Probe` with the scheme's
//! defaults for what a client left out (an API server defaults them already): the handler
//! with its port resolved against the container's named ports (kubelet
//! `probe.ResolveContainerPort`), the timing fields, the thresholds.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// `livenessProbe`: a failure kills the container.
    Liveness,
    /// `readinessProbe`: the container's `ready`.
    Readiness,
    /// `startupProbe`: holds the other two until it succeeds; a failure kills.
    Startup,
}

impl Kind {
    /// Every kind, in the order the kubelet adds their workers.
    pub(crate) const ALL: [Kind; 3] = [Kind::Readiness, Kind::Liveness, Kind::Startup];

    /// As the kubelet's events name it (`Readiness probe failed: …`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
            Kind::Startup => "Startup",
        }
    }

    /// The container's probe of this kind.
    pub(crate) fn of(self, c: &Container) -> Option<&Probe> {
        match self {
            Kind::Liveness => c.liveness_probe.as_ref(),
            Kind::Readiness => c.readiness_probe.as_ref(),
            Kind::Startup => c.startup_probe.as_ref(),
        }
    }
}

/// How a probe reaches the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Handler {
    /// `exec`: a command run in the container (CRI `ExecSync`).
    Exec(Vec<String>),
    /// `httpGet`.
    Http {
        /// `https` for `HTTPS`.
        tls: bool,
        /// `host` (empty: the pod's IP).
        host: String,
        /// The port.
        port: u16,
        /// `path`.
        path: String,
        /// `httpHeaders` as (name, value).
        headers: Vec<(String, String)>,
    },
    /// `tcpSocket`: a connection opened.
    Tcp {
        /// `host` (empty: the pod's IP).
        host: String,
        /// The port.
        port: u16,
    },
    /// `grpc`: the gRPC health protocol's `Check` of `service`.
    Grpc {
        /// The port.
        port: u16,
        /// `service` (empty: the server as a whole).
        service: String,
    },
}

/// One probe, ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeSpec {
    pub handler: Handler,
    /// `initialDelaySeconds`: no probe before the container ran this long.
    pub initial_delay: Duration,
    /// `periodSeconds`.
    pub period: Duration,
    /// `timeoutSeconds`.
    pub timeout: Duration,
    /// `successThreshold`.
    pub success_threshold: u32,
    /// `failureThreshold`.
    pub failure_threshold: u32,
    /// `terminationGracePeriodSeconds` of the probe (liveness and startup kills).
    pub grace_seconds: Option<i64>,
}

/// Why a probe cannot run (each is the probe's failure, as the kubelet's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SpecError {
    /// No handler (an API server would have refused it).
    #[error("missing probe handler for {0}")]
    NoHandler(String),
    /// A named port the container does not declare.
    #[error("couldn't find port: {port} in {container}")]
    NoPort { port: String, container: String },
    /// A port number out of range.
    #[error("invalid port number: {0}")]
    BadPort(i64),
}

fn seconds(value: Option<i32>, default: u64) -> Duration {
    match value {
        Some(n) if n > 0 => Duration::from_secs(u64::try_from(n).unwrap_or(default)),
        _ => Duration::from_secs(default),
    }
}

fn threshold(value: Option<i32>, default: u32) -> u32 {
    value.and_then(|n| u32::try_from(n).ok()).filter(|n| *n > 0).unwrap_or(default)
}

/// kubelet `probe.ResolveContainerPort`: a number as it is, a name as the container's port
/// of that name.
fn resolve_port(port: &IntOrString, c: &Container) -> Result<u16, SpecError> {
    let number = match port {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(name) => {
            let found = c.ports.iter().flatten().find(|p| p.name.as_deref() == Some(name.as_str()));
            match found {
                Some(p) => i64::from(p.container_port),
                // A number written as a string is a number (intstr's IntValue).
                None => name
                    .parse::<i64>()
                    .map_err(|_| SpecError::NoPort { port: name.clone(), container: c.name.clone() })?,
            }
        }
    };
    u16::try_from(number).ok().filter(|p| *p > 0).ok_or(SpecError::BadPort(number))
}

impl ProbeSpec {
    /// The probe `probe` of container `c`.
    pub(crate) fn of(probe: &Probe, c: &Container) -> Result<Self, SpecError> {
        let handler = if let Some(exec) = &probe.exec {
            Handler::Exec(exec.command.clone().unwrap_or_default())
        } else if let Some(http) = &probe.http_get {
            let path = http.path.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "/".to_owned());
            Handler::Http {
                tls: http.scheme.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("HTTPS")),
                host: http.host.clone().unwrap_or_default(),
                port: resolve_port(&http.port, c)?,
                path,
                headers: http.http_headers.iter().flatten().map(|h| (h.name.clone(), h.value.clone())).collect(),
            }
        } else if let Some(tcp) = &probe.tcp_socket {
            Handler::Tcp { host: tcp.host.clone().unwrap_or_default(), port: resolve_port(&tcp.port, c)? }
        } else if let Some(grpc) = &probe.grpc {
            let port = u16::try_from(grpc.port).ok().filter(|p| *p > 0).ok_or(SpecError::BadPort(grpc.port.into()))?;
            Handler::Grpc { port, service: grpc.service.clone().unwrap_or_default() }
        } else {
            return Err(SpecError::NoHandler(c.name.clone()));
        };
        Ok(Self {
            handler,
            initial_delay: Duration::from_secs(
                probe.initial_delay_seconds.and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
            ),
            period: seconds(probe.period_seconds, 10),
            timeout: seconds(probe.timeout_seconds, 1),
            success_threshold: threshold(probe.success_threshold, 1),
            failure_threshold: threshold(probe.failure_threshold, 3),
            grace_seconds: probe.termination_grace_period_seconds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(probe: serde_json::Value) -> Container {
        serde_json::from_value(serde_json::json!({"name": "app", "ports": [{"name": "http", "containerPort": 8080}],
            "readinessProbe": probe}))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn spec_of(probe: serde_json::Value) -> Result<ProbeSpec, SpecError> {
        let c = container(probe);
        ProbeSpec::of(c.readiness_probe.as_ref().unwrap_or_else(|| panic!("probe")), &c)
    }

    #[test]
    fn defaults_fill_what_a_client_left_out() {
        let spec = spec_of(serde_json::json!({"httpGet": {"port": "http"}})).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            spec.handler,
            Handler::Http { tls: false, host: String::new(), port: 8080, path: "/".into(), headers: vec![] }
        );
        assert_eq!(
            (spec.initial_delay, spec.period, spec.timeout, spec.success_threshold, spec.failure_threshold),
            (Duration::ZERO, Duration::from_secs(10), Duration::from_secs(1), 1, 3)
        );
    }

    #[test]
    fn named_ports_resolve_against_the_container_or_fail_as_the_kubelet() {
        let tcp =
            spec_of(serde_json::json!({"tcpSocket": {"port": "9090"}, "periodSeconds": 2, "failureThreshold": 1}))
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tcp.handler, Handler::Tcp { host: String::new(), port: 9090 });
        assert_eq!((tcp.period, tcp.failure_threshold), (Duration::from_secs(2), 1));
        assert_eq!(
            spec_of(serde_json::json!({"tcpSocket": {"port": "metrics"}})).err().map(|e| e.to_string()),
            Some("couldn't find port: metrics in app".to_owned())
        );
        assert_eq!(spec_of(serde_json::json!({"grpc": {"port": 70000}})), Err(SpecError::BadPort(70000)));
        assert_eq!(spec_of(serde_json::json!({})), Err(SpecError::NoHandler("app".into())));
    }
}
