//! What a stream's bytes cross: when anything last did (the kubelet's
//! `streamingConnectionIdleTimeout` counts from it), and the splice of a client's upgraded
//! connection with the runtime's, for the protocols the node passes whole (port-forward,
//! and exec or attach over SPDY).

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::server::status;
use crate::stream::dial;

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

/// Whether the request asks to switch protocols.
pub(crate) fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::CONNECTION)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade"))))
        && headers.contains_key(axum::http::header::UPGRADE)
}

/// Asks the runtime's stream server at `url` to switch protocols with the client's own
/// handshake (`client`), so the protocol the runtime chooses is the client's to speak.
pub(crate) async fn upgrade_runtime(
    url: &url::Url,
    method: axum::http::Method,
    client: &HeaderMap,
) -> Result<dial::Upgraded, dial::DialError> {
    let handshake: Vec<(HeaderName, HeaderValue)> = HANDSHAKE_REQUEST
        .iter()
        .flat_map(|name| client.get_all(*name).iter().map(|v| (HeaderName::from_static(name), v.clone())))
        .collect();
    dial::upgrade(url, method, &handshake).await
}

/// The client's answer when the runtime did not switch: its own refusal (an unknown
/// protocol, say) is the client's to read.
pub(crate) fn refusal(e: dial::DialError) -> Response {
    match e {
        dial::DialError::Refused { status: code, body } => {
            status(StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY), body)
        }
        e => status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// The 101 answering the client, with the runtime's handshake headers.
pub(crate) fn switching(upgraded: &dial::Upgraded) -> Response {
    let mut response = Response::new(axum::body::Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    for name in HANDSHAKE_RESPONSE {
        for value in upgraded.headers.get_all(name) {
            response.headers_mut().append(name, value.clone());
        }
    }
    response
}

/// When anything last crossed a stream (the kubelet's `streamingConnectionIdleTimeout`
/// counts from it).
pub(crate) struct Activity {
    opened: tokio::time::Instant,
    /// Milliseconds from `opened` to the last crossing.
    last_ms: std::sync::atomic::AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Activity {
        Activity { opened: tokio::time::Instant::now(), last_ms: std::sync::atomic::AtomicU64::new(0) }
    }

    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Returns once nothing has crossed for `timeout` (never, for zero).
    pub(crate) async fn idle(&self, timeout: std::time::Duration) {
        if timeout.is_zero() {
            return std::future::pending::<()>().await;
        }
        loop {
            let last = std::time::Duration::from_millis(self.last_ms.load(std::sync::atomic::Ordering::Relaxed));
            let quiet = self.opened.elapsed().saturating_sub(last);
            if quiet >= timeout {
                return;
            }
            tokio::time::sleep(timeout - quiet).await;
        }
    }
}

/// How a splice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The client's side ended first.
    Client,
    /// The runtime's side ended first (for exec: the command is done).
    Runtime,
    /// Nothing crossed for the idle timeout.
    Idle,
}

/// Passes bytes between the client `a` and the runtime `b` until either side ends (which
/// ends both) or nothing has crossed for `idle_timeout`.
pub(crate) async fn splice<A, B>(a: A, b: B, idle_timeout: std::time::Duration) -> Ended
where
    A: AsyncRead + AsyncWrite,
    B: AsyncRead + AsyncWrite,
{
    let activity = Activity::new();
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    let ended = tokio::select! {
        () = pass(&mut ar, &mut bw, &activity) => Ended::Client,
        () = pass(&mut br, &mut aw, &activity) => Ended::Runtime,
        () = activity.idle(idle_timeout) => Ended::Idle,
    };
    let _ = aw.shutdown().await;
    let _ = bw.shutdown().await;
    ended
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
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn a_stream_is_idle_once_nothing_crossed_for_the_timeout() {
        let a = Arc::new(Activity::new());
        let timeout = std::time::Duration::from_secs(60);
        let watch = {
            let a = Arc::clone(&a);
            tokio::spawn(async move { a.idle(timeout).await })
        };
        // Something crosses every 40 s: never idle.
        for _ in 0..5 {
            tokio::time::sleep(std::time::Duration::from_secs(40)).await;
            a.touch();
            tokio::task::yield_now().await;
            assert!(!watch.is_finished());
        }
        // Then nothing: idle 60 s after the last crossing.
        tokio::time::sleep(std::time::Duration::from_secs(59)).await;
        assert!(!watch.is_finished());
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        assert!(watch.await.is_ok());
        // Zero never closes a stream.
        let never =
            tokio::time::timeout(std::time::Duration::from_secs(1 << 20), a.idle(std::time::Duration::ZERO)).await;
        assert!(never.is_err());
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
        assert_eq!(spliced.await.ok(), Some(Ended::Client));
        let mut rest = Vec::new();
        assert_eq!(runtime_far.read_to_end(&mut rest).await.ok(), Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_splice_ends_at_the_idle_timeout() {
        let (client, _client_far) = tokio::io::duplex(1024);
        let (runtime, mut runtime_far) = tokio::io::duplex(1024);
        assert_eq!(splice(client, runtime, std::time::Duration::from_secs(60)).await, Ended::Idle);
        let mut rest = Vec::new();
        assert_eq!(runtime_far.read_to_end(&mut rest).await.ok(), Some(0));
    }
}
