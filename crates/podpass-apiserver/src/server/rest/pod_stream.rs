//! `pods/exec` and `pods/attach` (pkg/registry/core/pod/rest `ExecREST`, `AttachREST`, and
//! the apiserver's `UpgradeAwareHandler`): a connect request, authorized and audited as any
//! other, its container chosen as `pods/log` chooses it, is passed to the pod's node at
//! `/exec/{namespace}/{pod}/{container}` (or `/attach/…`) over HTTPS with the server's
//! kubelet client certificate — the client's upgrade headers and query (the command, the
//! channels) with it. When the node switches protocols the client is answered with the
//! node's handshake and the two connections are spliced until either ends; the server never
//! reads what crosses. Streams are bounded per user (a fair share: one client's thousand
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

/// Connects `pods/{name}/{sub}` (`exec` or `attach`) to the pod's node.
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
    let asked = pairs.iter().find(|(k, _)| k == "container").map(|(_, v)| v.as_str());
    let pod = state.store.get(&ObjectKey::namespaced("pods", ns, name)).await?.object;
    let container = super::pod_log::container(&pod, name, asked)?;
    let (client, mut url, node) = super::pod_log::node_url(state, &pod, name).await?;
    url.set_path(&format!("/{sub}/{ns}/{name}/{container}"));
    for (k, v) in pairs.iter().filter(|(k, _)| k != "container") {
        url.query_pairs_mut().append_pair(k, v);
    }
    let guard = take_stream(state, user)?;
    let mut request = client.get(url);
    for name in HANDSHAKE_REQUEST {
        for value in parts.headers.get_all(name) {
            request = request.header(name, value.clone());
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
    for name in HANDSHAKE_RESPONSE {
        for value in answer.headers().get_all(name) {
            response.headers_mut().append(name, value.clone());
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
    podpass_serve::spawn_named("pod-stream", async move {
        let _held = guard;
        let Ok(client_io) = pending.await else { return };
        let mut client_io = TokioIo::new(client_io);
        let mut node_io = node_io;
        // Either side's end ends both.
        let _ = tokio::io::copy_bidirectional(&mut client_io, &mut node_io).await;
    });
    Ok(response)
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
