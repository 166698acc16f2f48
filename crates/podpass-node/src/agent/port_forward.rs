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
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::containers::POD_UID_LABEL;
use super::server::{NodeServer, authorize, status};
use super::streaming::{Activity, take_slot};
use crate::runtime::SANDBOX_READY;
use crate::stream::dial;

/// The most ports one request may name.
const MAX_PORTS: usize = 64;

/// The client's handshake headers passed to the runtime.
const HANDSHAKE_REQUEST: [&str; 6] = [
    "connection",
    "upgrade",
    "x-stream-protocol-version",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
];
/// The runtime's handshake headers answered to the client.
const HANDSHAKE_RESPONSE: [&str; 5] =
    ["connection", "upgrade", "x-stream-protocol-version", "sec-websocket-accept", "sec-websocket-protocol"];

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
    if !is_upgrade(&headers) {
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
    let handshake: Vec<(HeaderName, HeaderValue)> = HANDSHAKE_REQUEST
        .iter()
        .flat_map(|name| headers.get_all(*name).iter().map(|v| (HeaderName::from_static(name), v.clone())))
        .collect();
    let upgraded = match dial::upgrade(&url, request.method().clone(), &handshake).await {
        Ok(u) => u,
        // The runtime's refusal (an unknown protocol, say) is the client's to read.
        Err(dial::DialError::Refused { status: code, body }) => {
            return status(StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY), body);
        }
        Err(e) => return status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let client = hyper::upgrade::on(&mut request);
    let mut response = Response::new(axum::body::Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    for name in HANDSHAKE_RESPONSE {
        for value in upgraded.headers.get_all(name) {
            response.headers_mut().append(name, value.clone());
        }
    }
    tracing::info!(namespace = %ns, pod = %pod, ports = ?ports, "port-forward opened");
    let idle_timeout = s.stream_idle_timeout;
    podpass_serve::spawn_named("port-forward", async move {
        let _held = slot;
        let Ok(client) = client.await else { return };
        let quiet = splice(TokioIo::new(client), upgraded.io, idle_timeout).await;
        tracing::info!(namespace = %ns, pod = %pod, idle = quiet, "port-forward closed");
    });
    response
}

/// Whether the request asks to switch protocols.
fn is_upgrade(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::CONNECTION)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade"))))
        && headers.contains_key(axum::http::header::UPGRADE)
}

/// Passes bytes both ways until either side ends (which ends both) or nothing has crossed
/// for `idle_timeout` (`true`).
async fn splice<A, B>(a: A, b: B, idle_timeout: std::time::Duration) -> bool
where
    A: AsyncRead + AsyncWrite,
    B: AsyncRead + AsyncWrite,
{
    let activity = Activity::new();
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    let quiet = tokio::select! {
        () = pass(&mut ar, &mut bw, &activity) => false,
        () = pass(&mut br, &mut aw, &activity) => false,
        () = activity.idle(idle_timeout) => true,
    };
    let _ = aw.shutdown().await;
    let _ = bw.shutdown().await;
    quiet
}

async fn pass<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(from: &mut R, to: &mut W, activity: &Activity) {
    let mut buf = vec![0u8; 32 << 10];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                activity.touch();
                if to.write_all(&buf[..n]).await.is_err() || to.flush().await.is_err() {
                    return;
                }
            }
        }
    }
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

    #[tokio::test]
    async fn a_splice_ends_both_sides_when_one_ends() {
        let (client, mut client_far) = tokio::io::duplex(1024);
        let (runtime, mut runtime_far) = tokio::io::duplex(1024);
        let spliced = tokio::spawn(splice(client, runtime, std::time::Duration::from_secs(3600)));
        client_far.write_all(b"ping").await.unwrap_or_else(|e| panic!("{e}"));
        let mut got = [0u8; 4];
        runtime_far.read_exact(&mut got).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&got, b"ping");
        runtime_far.write_all(b"pong").await.unwrap_or_else(|e| panic!("{e}"));
        client_far.read_exact(&mut got).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&got, b"pong");
        // The client goes: the runtime's side reads its end.
        drop(client_far);
        assert!(!spliced.await.unwrap_or(true), "ended, not idle");
        let mut rest = Vec::new();
        assert_eq!(runtime_far.read_to_end(&mut rest).await.ok(), Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_splice_ends_at_the_idle_timeout() {
        let (client, _client_far) = tokio::io::duplex(1024);
        let (runtime, mut runtime_far) = tokio::io::duplex(1024);
        assert!(splice(client, runtime, std::time::Duration::from_secs(60)).await, "idle");
        let mut rest = Vec::new();
        assert_eq!(runtime_far.read_to_end(&mut rest).await.ok(), Some(0));
    }
}
