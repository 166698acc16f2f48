//! The agent's operations endpoints, on loopback by default (kubelet: `--healthz-port`
//! 10248 on `--healthz-bind-address` 127.0.0.1): `/healthz` says whether the API server
//! answered recently and the image runtime answers now, in the apiserver's verbose healthz
//! form. `/metrics` (the upstream-named image manager, pull record and credential provider
//! metrics in the Prometheus text format) is served by the node's authenticated server, and
//! here only on an operator's `--metrics-bind-address`.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::worker::Shared;
use crate::images::service::ImageService;
use crate::token::now_unix;

/// How long after the last answer from the API server the agent still counts as healthy:
/// the node lease's duration (after that the control plane thinks the node is gone too).
pub const API_STALE_AFTER_SECONDS: i64 = super::LEASE_DURATION_SECONDS as i64;
/// How long the runtime may take to answer a health probe.
const RUNTIME_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// When the API server last answered (Unix seconds), shared by the heartbeat and the probes.
#[derive(Debug, Default)]
pub struct ApiContact(AtomicI64);

impl ApiContact {
    /// The API answered now.
    pub fn touch(&self) {
        self.0.store(now_unix(), Ordering::Relaxed);
    }

    /// Seconds since it last answered (`None`: never).
    pub fn age(&self) -> Option<i64> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            at => Some(now_unix().saturating_sub(at)),
        }
    }
}

pub(crate) struct Ops {
    pub shared: Arc<Shared>,
    pub api: Arc<ApiContact>,
}

async fn healthz(State(ops): State<Arc<Ops>>) -> impl IntoResponse {
    let mut lines = vec!["[+]ping ok".to_owned()];
    let mut healthy = true;
    match ops.api.age() {
        Some(age) if age <= API_STALE_AFTER_SECONDS => lines.push("[+]api-server ok".into()),
        other => {
            healthy = false;
            let why = other.map_or("never answered".to_owned(), |a| format!("last answered {a}s ago"));
            lines.push(format!("[-]api-server failed: {why}"));
        }
    }
    let probe = ops.shared.images.service().image_status("podpass.invalid/healthz:probe");
    match tokio::time::timeout(RUNTIME_PROBE_TIMEOUT, probe).await {
        Ok(Ok(_)) => lines.push("[+]image-runtime ok".into()),
        Ok(Err(e)) => {
            healthy = false;
            lines.push(format!("[-]image-runtime failed: {e}"));
        }
        Err(_) => {
            healthy = false;
            lines.push("[-]image-runtime failed: no answer within 2s".into());
        }
    }
    if healthy {
        (StatusCode::OK, "ok".to_owned())
    } else {
        lines.push("healthz check failed".into());
        (StatusCode::INTERNAL_SERVER_ERROR, lines.join("\n") + "\n")
    }
}

async fn metrics(State(ops): State<Arc<Ops>>) -> axum::response::Response {
    render_metrics(ops.shared.clone()).await
}

/// The node's metrics, in the Prometheus text format.
pub(crate) async fn render_metrics(shared: Arc<Shared>) -> axum::response::Response {
    // The on-disk record counts are read per scrape, off the async threads.
    let text = tokio::task::spawn_blocking(move || {
        let mut registry = Registry::default();
        registry.register(
            "kubelet_image_manager_ensure_image_requests",
            "Number of ensure-image requests processed by the kubelet.",
            shared.images.requests_metric(),
        );
        if let Some(pm) = &shared.pull_manager {
            pm.register_metrics(&mut registry);
        }
        shared.credential_metrics.register(&mut registry);
        shared.providers.register_metrics(&mut registry);
        let tokens = prometheus_client::metrics::family::Family::<Vec<(String, String)>, Gauge>::default();
        let (fresh, past_refresh, expired) = shared.sources.tokens().freshness(crate::token::now_unix());
        for (state, count) in [("fresh", fresh), ("past_refresh", past_refresh), ("expired", expired)] {
            tokens.get_or_create(&vec![("state".to_owned(), state.to_owned())]).set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        registry.register(
            "podpass_node_projected_service_account_tokens",
            "Service-account tokens the node holds (projected volumes and credential providers: one token manager), by state: fresh, past_refresh (its refresh is failing; still valid) or expired (its refresh failed past expiry).",
            tokens,
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).map(|()| text)
    })
    .await;
    match text {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response(),
        _ => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// Serves `/healthz` (and `/metrics` when `with_metrics`) on `listener` until `shutdown`
/// completes.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    ops: Arc<Ops>,
    with_metrics: bool,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let mut app = Router::new().route("/healthz", get(healthz));
    if with_metrics {
        app = app.route("/metrics", get(metrics));
    }
    let app = app.with_state(ops);
    // The shared accept loop: header and body deadlines and a connection cap, as every
    // podpass server (the kubelet's healthz server is a Go http.Server with the same
    // bounds). Plain HTTP, as the kubelet's healthz port.
    let limits = podpass_serve::ServeLimits {
        max_connections: 64,
        max_connections_per_client: 64,
        request_timeout: std::time::Duration::from_secs(10),
        ..podpass_serve::ServeLimits::default()
    };
    tokio::select! {
        () = podpass_serve::accept_loop(listener, None, app, limits) => {}
        () = shutdown => {}
    }
}
