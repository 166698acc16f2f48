//! The node's `/portForward/{namespace}/{pod}` (kubelet `getPortForward`): the requester
//! authorized for `nodes/proxy` as for exec, the pod the node knows by that name and its
//! ready sandbox found, the runtime asked (CRI `PortForward`), and the client's upgraded
//! connection passed whole to the runtime's stream server, which speaks the port-forward
//! protocol itself (`portforward.k8s.io` over SPDY: a data and an error stream per
//! `requestID` and `port`; or over WebSocket) and dials the port on the sandbox's own
//! loopback, inside its network namespace: pods stay loopback-only, and nothing reaches
//! a pod's port but through its runtime. A forward takes one of the pod's stream places,
//! ends with either side and after `streamingConnectionIdleTimeout` of quiet; nothing of
//! it is logged but its metadata.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path as UrlPath, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use hyper_util::rt::TokioIo;

use super::containers::POD_UID_LABEL;
use super::server::{NodeServer, authorize, status};
use super::splice;
use super::streaming::take_slot;
use crate::runtime::SANDBOX_READY;
use crate::stream::dial;

/// The most ports one request may name.
const MAX_PORTS: usize = 64;

/// A request's ports that cannot be forwarded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
struct BadPorts(String);

/// The ports a request names (`port`, repeated; kubelet `NewV4Options` reads the same),
/// each in 1..=65535.
fn ports(query: &str) -> Result<Vec<i32>, BadPorts> {
    let mut out = Vec::new();
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        if k != "port" {
            continue;
        }
        for p in v.split(',') {
            let port: u16 = p.trim().parse().map_err(|_| BadPorts(format!("unable to parse {p:?} as a port")))?;
            if port == 0 {
                return Err(BadPorts(format!("port {p:?} must be > 0")));
            }
            out.push(i32::from(port));
        }
        if out.len() > MAX_PORTS {
            return Err(BadPorts(format!("more than {MAX_PORTS} ports in one request")));
        }
    }
    Ok(out)
}

/// GET or POST `/portForward/{namespace}/{pod}`.
pub(super) async fn port_forward(
    State(s): State<Arc<NodeServer>>,
    UrlPath((ns, pod)): UrlPath<(String, String)>,
    axum::Extension(peer): axum::Extension<podpass_serve::Peer>,
    mut request: Request,
) -> Response {
    let headers = request.headers().clone();
    if let Err(refused) = authorize(&s, &peer, &headers, "create", "proxy").await {
        return refused;
    }
    if !splice::is_upgrade(&headers) {
        return status(StatusCode::BAD_REQUEST, "Upgrade request required");
    }
    let ports = match ports(request.uri().query().unwrap_or_default()) {
        Ok(p) => p,
        Err(e) => return status(StatusCode::BAD_REQUEST, e.0),
    };
    let Some(known) = s.pods.get(&ns, &pod) else {
        return status(StatusCode::NOT_FOUND, format!("pod {pod:?} does not exist"));
    };
    let uid = known.metadata.uid.clone().unwrap_or_default();
    let Some(rt) = s.runtime.clone() else {
        return status(StatusCode::NOT_FOUND, format!("node {} runs no containers", s.node));
    };
    let sandbox = match rt.cri.list_pod_sandboxes(HashMap::from([(POD_UID_LABEL.to_owned(), uid.clone())])).await {
        Ok(all) => all.into_iter().filter(|b| b.state == SANDBOX_READY).max_by_key(|b| b.created_at).map(|b| b.id),
        Err(e) => return status(StatusCode::INTERNAL_SERVER_ERROR, format!("listing the pod's sandboxes: {e}")),
    };
    let Some(sandbox) = sandbox else {
        return status(
            StatusCode::BAD_REQUEST,
            format!("pod {pod} has no running sandbox: unable to upgrade connection"),
        );
    };
    let slot = match take_slot(&s, &uid) {
        Ok(slot) => slot,
        Err(full) => return axum::response::IntoResponse::into_response(full),
    };
    let url = match rt.cri.port_forward(&sandbox, ports.clone()).await {
        Ok(url) => url,
        Err(e) => return status(StatusCode::INTERNAL_SERVER_ERROR, format!("asking the runtime for the stream: {e}")),
    };
    let url = match dial::loopback_url(&url) {
        Ok(u) => u,
        Err(e) => return status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let upgraded = match splice::upgrade_runtime(&url, request.method().clone(), &headers).await {
        Ok(u) => u,
        Err(e) => return splice::refusal(e),
    };
    let client = hyper::upgrade::on(&mut request);
    let response = splice::switching(&upgraded);
    tracing::info!(namespace = %ns, pod = %pod, ports = ?ports, "port-forward opened");
    let idle_timeout = s.stream_idle_timeout;
    podpass_serve::spawn_named("port-forward", async move {
        let _held = slot;
        let Ok(client) = client.await else { return };
        let ended = splice::splice(TokioIo::new(client), upgraded.io, idle_timeout).await;
        tracing::info!(namespace = %ns, pod = %pod, ?ended, "port-forward closed");
    });
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_read_as_the_kubelet_reads_them() {
        assert_eq!(ports("port=8080&port=9090"), Ok(vec![8080, 9090]));
        assert_eq!(ports("port=80,443"), Ok(vec![80, 443]));
        assert_eq!(ports(""), Ok(vec![]));
        assert!(ports("port=0").is_err_and(|e| e.0.contains("must be > 0")));
        assert!(ports("port=70000").is_err_and(|e| e.0.contains("unable to parse")));
        assert!(ports("port=http").is_err());
        let many = (1..=65).map(|p| format!("port={p}")).collect::<Vec<_>>().join("&");
        assert!(ports(&many).is_err_and(|e| e.0.contains("64 ports")));
    }
}
