//! `pods/exec`, `pods/attach` and `pods/portforward` (pkg/registry/core/pod/rest `ExecREST`,
//! `AttachREST`, `PortForwardREST`, and the apiserver's `UpgradeAwareHandler`): a connect request, authorized and audited as any
//! other, its container chosen as `pods/log` chooses it, is passed to the pod's node at
//! `/exec/{namespace}/{pod}/{container}` (or `/attach/…`, `/portForward/{namespace}/{pod}`) over HTTPS with the server's
//! kubelet client certificate — the client's upgrade headers and query (the command, the
//! channels) with it. When the node switches protocols the client is answered with the
//! node's handshake and the two connections are spliced until either ends; the server never
//! reads what crosses, but for kubectl's port-forward over WebSocket, whose SPDY it unwraps
//! from the messages for the node (and wraps back). Streams are bounded per user (a fair share: one client's thousand
//! streams do not take another's).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::Response;
use hyper_util::rt::TokioIo;

use crate::server::AppState;
use crate::server::status::StatusError;
use crate::store::ObjectKey;

/// Streams one user may hold open at once.
pub(crate) const MAX_STREAMS_PER_USER: usize = 32;

/// The request headers that carry an upgrade's handshake to the node.
const HANDSHAKE_REQUEST: [&str; 6] = [
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "x-stream-protocol-version",
];
/// The node's handshake headers answered to the client.
const HANDSHAKE_RESPONSE: [&str; 5] =
    ["connection", "upgrade", "sec-websocket-accept", "sec-websocket-protocol", "x-stream-protocol-version"];

/// The client connection's pending upgrade, taken by the handler that accepts it.
pub(crate) struct PendingUpgrade(pub Mutex<Option<hyper::upgrade::OnUpgrade>>);

/// Streams open now, per user.
#[derive(Default)]
pub(crate) struct StreamCounts(Mutex<HashMap<String, usize>>);

/// One user's stream, given back on drop.
struct StreamGuard {
    counts: Arc<AppState>,
    user: String,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut open = self.counts.streams.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.user);
            }
        }
    }
}

fn take_stream(state: &Arc<AppState>, user: &str) -> Result<StreamGuard, StatusError> {
    let mut open = state.streams.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let n = open.entry(user.to_owned()).or_default();
    if *n >= MAX_STREAMS_PER_USER {
        return Err(StatusError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            format!("too many streams open for {user} (at most {MAX_STREAMS_PER_USER})"),
        ));
    }
    *n += 1;
    Ok(StreamGuard { counts: Arc::clone(state), user: user.to_owned() })
}

/// Whether the request asks to switch protocols (apimachinery `httpstream.IsUpgradeRequest`).
pub(crate) fn is_upgrade(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::CONNECTION)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade"))))
        && headers.contains_key(axum::http::header::UPGRADE)
}

/// The WebSocket subprotocol prefix of a SPDY protocol tunneled in WebSocket messages
/// (apimachinery `constants.WebsocketsSPDYTunnelingPrefix`).
const TUNNELING_PREFIX: &str = "SPDY/3.1+";
/// The largest WebSocket message taken from a tunneling client (a SPDY frame, at most).
const MAX_TUNNEL_MESSAGE: usize = 1 << 20;

/// The SPDY protocols a WebSocket request asks to tunnel (`SPDY/3.1+portforward.k8s.io`
/// asks `portforward.k8s.io`); none for another request.
fn tunneled_protocols(headers: &axum::http::HeaderMap) -> Vec<String> {
    let websocket =
        headers.get_all(axum::http::header::UPGRADE).iter().any(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
    if !websocket {
        return Vec::new();
    }
    headers
        .get_all(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|p| p.trim().strip_prefix(TUNNELING_PREFIX))
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Connects `pods/{name}/{sub}` (`exec`, `attach` or `portforward`) to the pod's node.
pub(crate) async fn connect(
    state: &Arc<AppState>,
    parts: &axum::http::request::Parts,
    (ns, name, sub): (&str, &str, &str),
    user: &str,
) -> Result<Response, StatusError> {
    if !is_upgrade(&parts.headers) {
        return Err(StatusError::bad_request("Upgrade request required"));
    }
    let pairs: Vec<(String, String)> = url::form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let pod = state.store.get(&ObjectKey::namespaced("pods", ns, name)).await?.object;
    let (client, mut url, node) = super::pod_log::node_url(state, &pod, name).await?;
    if sub == "portforward" {
        // kubelet `/portForward/{namespace}/{pod}`: the ports asked, no container.
        url.set_path(&format!("/portForward/{ns}/{name}"));
        for (_, v) in pairs.iter().filter(|(k, _)| k == "ports") {
            url.query_pairs_mut().append_pair("port", v);
        }
    } else {
        let asked = pairs.iter().find(|(k, _)| k == "container").map(|(_, v)| v.as_str());
        let container = super::pod_log::container(&pod, name, asked)?;
        url.set_path(&format!("/{sub}/{ns}/{name}/{container}"));
        for (k, v) in pairs.iter().filter(|(k, _)| k != "container") {
            url.query_pairs_mut().append_pair(k, v);
        }
    }
    // kubectl ≥ 1.31's port-forward: SPDY carried in WebSocket messages, which the server
    // unwraps for the node, asked for the SPDY protocol itself (apiserver
    // `tunnelingHandler`, PortForwardWebsockets).
    let tunneled = if sub == "portforward" { tunneled_protocols(&parts.headers) } else { Vec::new() };
    let accept = if tunneled.is_empty() {
        None
    } else {
        let key = parts
            .headers
            .get(axum::http::header::SEC_WEBSOCKET_KEY)
            .ok_or_else(|| StatusError::bad_request("unable to upgrade: missing Sec-WebSocket-Key"))?;
        if parts.headers.get(axum::http::header::SEC_WEBSOCKET_VERSION).map(|v| v.as_bytes()) != Some(b"13") {
            return Err(StatusError::bad_request("unable to upgrade: Sec-WebSocket-Version must be 13"));
        }
        Some(tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()))
    };
    let guard = take_stream(state, user)?;
    // The node's exec and attach are GETs whatever the client sent (a SPDY client's POST is
    // answered there with why it was refused); its port-forward takes either.
    let method = match (sub, tunneled.is_empty()) {
        ("portforward", true) => parts.method.clone(),
        ("portforward", false) => axum::http::Method::POST,
        _ => axum::http::Method::GET,
    };
    let mut request = client.request(method, url);
    if tunneled.is_empty() {
        for name in HANDSHAKE_REQUEST {
            for value in parts.headers.get_all(name) {
                request = request.header(name, value.clone());
            }
        }
    } else {
        request = request.header("connection", "Upgrade").header("upgrade", "SPDY/3.1");
        for protocol in &tunneled {
            request = request.header("x-stream-protocol-version", protocol.as_str());
        }
    }
    let answer = request.timeout(std::time::Duration::from_secs(30)).send().await.map_err(|e| {
        StatusError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            format!("connecting to node {node}: {e}"),
        )
    })?;
    if answer.status() != reqwest::StatusCode::SWITCHING_PROTOCOLS {
        return Err(super::pod_log::node_refusal(answer).await);
    }
    let mut response = Response::new(axum::body::Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    if let Some(accept) = &accept {
        let chosen =
            answer.headers().get("x-stream-protocol-version").and_then(|v| v.to_str().ok()).unwrap_or_default();
        if !tunneled.iter().any(|p| p == chosen) {
            return Err(StatusError::new(
                StatusCode::BAD_GATEWAY,
                "BadGateway",
                format!("node {node} chose protocol {chosen:?}, not one of {tunneled:?}"),
            ));
        }
        let h = response.headers_mut();
        h.insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("Upgrade"));
        h.insert(axum::http::header::UPGRADE, axum::http::HeaderValue::from_static("websocket"));
        let value = |s: String| axum::http::HeaderValue::from_str(&s).map_err(|e| StatusError::internal(e.to_string()));
        h.insert(axum::http::header::SEC_WEBSOCKET_ACCEPT, value(accept.clone())?);
        h.insert(axum::http::header::SEC_WEBSOCKET_PROTOCOL, value(format!("{TUNNELING_PREFIX}{chosen}"))?);
    } else {
        for name in HANDSHAKE_RESPONSE {
            for value in answer.headers().get_all(name) {
                response.headers_mut().append(name, value.clone());
            }
        }
    }
    let pending = parts
        .extensions
        .get::<Arc<PendingUpgrade>>()
        .and_then(|p| p.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take())
        .ok_or_else(|| StatusError::internal("this connection cannot be upgraded"))?;
    let node_io = answer.upgrade().await.map_err(|e| {
        StatusError::new(StatusCode::BAD_GATEWAY, "BadGateway", format!("upgrading the connection to node {node}: {e}"))
    })?;
    let tunneling = accept.is_some();
    podpass_serve::spawn_named("pod-stream", async move {
        let _held = guard;
        let Ok(client_io) = pending.await else { return };
        let client_io = TokioIo::new(client_io);
        if tunneling {
            tunnel(client_io, node_io).await;
        } else {
            let (mut client_io, mut node_io) = (client_io, node_io);
            // Either side's end ends both.
            let _ = tokio::io::copy_bidirectional(&mut client_io, &mut node_io).await;
        }
    });
    Ok(response)
}

/// Carries the node's SPDY bytes in binary WebSocket messages and the client's messages'
/// bytes to the node (client-go `TunnelingConnection`), until either side ends.
async fn tunnel<C, N>(client: C, node: N)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    N: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use futures::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

    let config =
        WebSocketConfig::default().max_message_size(Some(MAX_TUNNEL_MESSAGE)).max_frame_size(Some(MAX_TUNNEL_MESSAGE));
    let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(client, Role::Server, Some(config)).await;
    let (mut sink, mut source) = ws.split();
    let (mut node_read, mut node_write) = tokio::io::split(node);
    let up = async {
        while let Some(Ok(message)) = source.next().await {
            match message {
                Message::Binary(data)
                    if node_write.write_all(&data).await.is_err() || node_write.flush().await.is_err() =>
                {
                    break;
                }
                Message::Close(_) => break,
                // Pings are answered by the WebSocket itself; text has no place in a tunnel.
                _ => {}
            }
        }
        let _ = node_write.shutdown().await;
    };
    let down = async {
        let mut buf = vec![0u8; 32 << 10];
        loop {
            match node_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sink.send(Message::Binary(buf[..n].to_vec().into())).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = sink.send(Message::Close(None)).await;
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upgrade_is_recognised_as_apimachinery_recognises_it() {
        let mut h = axum::http::HeaderMap::new();
        assert!(!is_upgrade(&h));
        h.insert("connection", axum::http::HeaderValue::from_static("keep-alive, Upgrade"));
        assert!(!is_upgrade(&h), "no Upgrade header");
        h.insert("upgrade", axum::http::HeaderValue::from_static("websocket"));
        assert!(is_upgrade(&h));
    }
}
