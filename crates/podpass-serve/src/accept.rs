//! Serving: the accept loop and each connection's TLS + HTTP/1.1, with the bounds
//! kube-apiserver's Go `http.Server` has (`ReadHeaderTimeout` 32 s, which Go also applies
//! to the TLS handshake) plus the ones it leaves to the operating system here: a connection
//! cap, a share of it per client address, and back-off on accept errors (Go's `Serve`
//! sleeps 5 ms doubling to 1 s on temporary errors such as EMFILE, instead of spinning).
//! At either bound the oldest idle connection makes room for the new one
//! ([`crate::connections`]): idle sockets never lock out a client with work to do.
//!
//! A request's body must arrive in full within [`ServeLimits::request_timeout`] of its
//! headers, whatever the application does with it: a client that announces a body and
//! never sends it is answered `408 Request Timeout` and its connection closed, so it holds
//! a connection slot no longer than a slow-header client does.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tower::ServiceExt;

use crate::connections::{Connections, HoldBody, Slot};

/// Connection bounds of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// A TLS handshake not done by then closes the connection.
    pub handshake_timeout: Duration,
    /// Request headers not received by then close the connection. hyper also runs this
    /// clock while a kept-alive connection waits for its next request, so it is the idle
    /// timeout as well.
    pub header_read_timeout: Duration,
    /// Connections served at once; past it, the oldest idle one is closed for a new one,
    /// and when every one is busy with a request, new ones wait in the listen backlog.
    pub max_connections: usize,
    /// `--request-timeout`: a request body not received in full by then (counted from its
    /// headers) is a 408 and closes the connection (applied here, for every server). The
    /// API server's router also answers a request not handled by then with upstream's
    /// 504; watches are bounded only until their stream starts.
    pub request_timeout: Duration,
    /// Connections one client address may hold at once (a share of `max_connections`, so
    /// one client cannot take every slot); past it, its oldest idle connection is closed
    /// for the new one, and when every one of them is busy, the new one is closed at once.
    /// Behind a proxy every client has the proxy's address: raise it to `max_connections`
    /// there.
    pub max_connections_per_client: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(32),
            max_connections: 1000,
            request_timeout: Duration::from_secs(60),
            max_connections_per_client: 1000,
        }
    }
}

/// A request body that must end by a deadline: past it, the next read fails and `expired`
/// is set (the connection then answers 408 and closes).
struct DeadlineBody {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    expired: Arc<AtomicBool>,
}

/// The error a late body's read returns.
#[derive(Debug, thiserror::Error)]
#[error("request body not received within the request timeout")]
struct BodyTimeout;

impl hyper::body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.expired.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(Box::new(BodyTimeout))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Who a request came from, as the connection knows it: every request served by
/// [`accept_loop`] carries one in its extensions.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The client's address.
    pub addr: SocketAddr,
    /// The client certificate chain (leaf first) the TLS layer verified against the
    /// acceptor's client CA; empty over plain TCP or when the client sent none.
    pub client_certificates: Arc<[CertificateDer<'static>]>,
}

/// How often a connection waiting for a place looks again for an idle one to close.
const IDLE_RECHECK: Duration = Duration::from_millis(100);

/// First and last pause after a failed accept (Go `net/http.Server.Serve`).
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Accepts and serves connections until the task is dropped: over TLS with `tls`, over
/// plain TCP without (callers keep plain servers on loopback).
pub async fn accept_loop(listener: TcpListener, tls: Option<TlsAcceptor>, app: Router, limits: ServeLimits) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let conns = Arc::new(Connections::default());
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        let (tcp, addr) = match listener.accept().await {
            Ok(accepted) => {
                backoff = ACCEPT_BACKOFF_MIN;
                accepted
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "accept failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        // The client's share: its oldest idle connection makes room; one whose every
        // connection is busy with a request gets no more.
        if conns.of(addr.ip()) >= limits.max_connections_per_client.max(1) && !conns.shed_oldest_idle(Some(addr.ip())) {
            tracing::debug!(client = %addr.ip(), "connection closed: the client's connections are all busy");
            continue;
        }
        // The server's bound: the oldest idle connection anywhere makes room; when every
        // one is busy, this one waits for one to end (the next ones wait in the backlog).
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => loop {
                // Looked at again while waiting: a busy connection turns idle when its
                // request ends, without ending (kept alive).
                if conns.shed_oldest_idle(None) {
                    let Ok(permit) = Arc::clone(&permits).acquire_owned().await else { return };
                    break permit;
                }
                tokio::select! {
                    permit = Arc::clone(&permits).acquire_owned() => {
                        let Ok(permit) = permit else { return };
                        break permit;
                    }
                    () = tokio::time::sleep(IDLE_RECHECK) => {}
                }
            },
        };
        let registration = conns.register(addr.ip());
        let _ = tcp.set_nodelay(true);
        let (tls, app) = (tls.clone(), app.clone());
        tokio::spawn(async move {
            let slot = Arc::clone(&registration.slot);
            let _held = (permit, registration);
            let served = async {
                match tls {
                    None => {
                        let peer = Peer { addr, client_certificates: Arc::from([]) };
                        serve_connection(tcp, peer, app, limits, Arc::clone(&slot)).await;
                    }
                    Some(tls) => {
                        let Ok(Ok(stream)) = tokio::time::timeout(limits.handshake_timeout, tls.accept(tcp)).await
                        else {
                            return;
                        };
                        let client_certificates: Arc<[CertificateDer<'static>]> = stream
                            .get_ref()
                            .1
                            .peer_certificates()
                            .map(|chain| chain.iter().map(|c| c.clone().into_owned()).collect())
                            .unwrap_or_else(|| Arc::from([]));
                        serve_connection(stream, Peer { addr, client_certificates }, app, limits, Arc::clone(&slot))
                            .await;
                    }
                }
            };
            tokio::select! {
                () = served => {}
                // Shed while idle: dropping the connection closes it.
                () = slot.shed.notified() => {}
            }
        });
    }
}

/// HTTP/1.1 on one connection, each request tagged with `peer` and counted busy on `slot`
/// until its response has been sent.
async fn serve_connection<S>(stream: S, peer: Peer, app: Router, limits: ServeLimits, slot: Arc<Slot>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let request_timeout = limits.request_timeout;
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let busy = slot.busy();
        let expired = Arc::new(AtomicBool::new(false));
        let deadline = Box::pin(tokio::time::sleep(request_timeout));
        let mut request =
            request.map(|inner| Body::new(DeadlineBody { inner, deadline, expired: Arc::clone(&expired) }));
        request.extensions_mut().insert(peer.clone());
        let answer = app.clone().oneshot(request);
        async move {
            let response = answer.await?;
            let response = if expired.load(Ordering::Relaxed) { body_timeout() } else { response };
            Ok::<_, std::convert::Infallible>(response.map(|inner| Body::new(HoldBody { inner, _busy: busy })))
        }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    // Upgrades (exec and attach streams, WebSocket or SPDY) leave the connection to their
    // handler: it is no longer this server's, nor counted among its connections.
    let _ = builder.http1_only().serve_connection_with_upgrades(TokioIo::new(stream), service).await;
}

/// The answer to a body that did not arrive in time; the connection closes after it.
fn body_timeout() -> axum::response::Response {
    let mut response = axum::response::Response::new(Body::from("request body not received in time\n"));
    *response.status_mut() = StatusCode::REQUEST_TIMEOUT;
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio_rustls::rustls::pki_types::ServerName;
    use tokio_rustls::rustls::{ClientConfig, RootCertStore};

    struct Fixture {
        addr: std::net::SocketAddr,
        connector: tokio_rustls::TlsConnector,
        _dir: tempfile::TempDir,
        task: tokio::task::JoinHandle<()>,
        /// `/slow` requests that reached their handler.
        entered: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    /// A self-signed serving certificate for `localhost`: (chain PEM, key PEM).
    fn self_signed() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap().self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    async fn serve(limits: ServeLimits) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let (chain, key) = self_signed();
        let tls = crate::tls_acceptor(chain.as_bytes(), key.as_bytes(), None).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let entered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let app = Router::new()
            .route(
                "/",
                axum::routing::get(|axum::Extension(peer): axum::Extension<Peer>| async move {
                    assert!(peer.addr.ip().is_loopback());
                    "ok"
                }),
            )
            .route("/upload", axum::routing::post(|body: Bytes| async move { format!("got {}", body.len()) }))
            // Busy for a while: a request in flight, counted once it reached the handler
            // (the server counts its connection busy before that).
            .route(
                "/slow",
                axum::routing::get({
                    let entered = entered.clone();
                    move || async move {
                        entered.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        "slow"
                    }
                }),
            );
        let task = tokio::spawn(accept_loop(listener, Some(tls), app, limits));
        let mut roots = RootCertStore::empty();
        use tokio_rustls::rustls::pki_types::CertificateDer;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        for cert in CertificateDer::pem_slice_iter(chain.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let config = ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
        Fixture { addr, connector: tokio_rustls::TlsConnector::from(Arc::new(config)), _dir: dir, task, entered }
    }

    /// Waits (bounded) for the server to close `stream`; returns how long it took.
    async fn closed_within<S: tokio::io::AsyncRead + Unpin>(stream: &mut S, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        let mut buf = [0u8; 64];
        loop {
            match tokio::time::timeout(limit, stream.read(&mut buf)).await {
                Err(_) => return None,
                Ok(Ok(0) | Err(_)) => return Some(start.elapsed()),
                Ok(Ok(_)) => {}
            }
        }
    }

    async fn get(f: &Fixture) -> String {
        let tcp = TcpStream::connect(f.addr).await.unwrap();
        let mut tls = f.connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
        tls.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
        let mut out = String::new();
        tls.read_to_string(&mut out).await.unwrap_or_default();
        out
    }

    fn limits(max_connections: usize) -> ServeLimits {
        ServeLimits {
            handshake_timeout: Duration::from_millis(300),
            header_read_timeout: Duration::from_millis(300),
            max_connections,
            request_timeout: Duration::from_secs(60),
            max_connections_per_client: max_connections,
        }
    }

    async fn tls_connect(f: &Fixture, from: &str) -> tokio_rustls::client::TlsStream<TcpStream> {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
        let tcp = socket.connect(f.addr).await.unwrap();
        f.connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap()
    }

    /// Reads until the server closes (bounded): what it sent, or `None` if still open.
    async fn read_until_closed<S: tokio::io::AsyncRead + Unpin>(stream: &mut S, limit: Duration) -> Option<String> {
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match tokio::time::timeout(left, stream.read(&mut buf)).await {
                Err(_) => return None,
                Ok(Ok(0) | Err(_)) => return Some(String::from_utf8_lossy(&out).into_owned()),
                Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            }
        }
    }

    #[tokio::test]
    async fn a_body_that_never_arrives_is_a_408_and_frees_the_connection() {
        let f = serve(ServeLimits { request_timeout: Duration::from_millis(400), ..limits(10) }).await;
        let mut tls = tls_connect(&f, "127.0.0.1").await;
        // 1000 bytes announced, 11 sent, then nothing
        tls.write_all(b"POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\nhello world").await.unwrap();
        let answer =
            read_until_closed(&mut tls, Duration::from_secs(10)).await.expect("connection held past the timeout");
        assert!(answer.starts_with("HTTP/1.1 408 Request Timeout"), "{answer}");
        assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
        // a whole body in time is served as ever
        let mut tls = tls_connect(&f, "127.0.0.1").await;
        tls.write_all(b"POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\nconnection: close\r\n\r\nabc")
            .await
            .unwrap();
        let answer = read_until_closed(&mut tls, Duration::from_secs(10)).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("got 3"), "{answer}");
    }

    #[tokio::test]
    async fn a_body_the_handler_never_reads_does_not_hold_the_connection() {
        let f = serve(ServeLimits { request_timeout: Duration::from_millis(400), ..limits(10) }).await;
        let mut tls = tls_connect(&f, "127.0.0.1").await;
        tls.write_all(b"GET / HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\nhello world").await.unwrap();
        let answer = read_until_closed(&mut tls, Duration::from_secs(10)).await.expect("connection held");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    /// Sends a request that keeps the connection busy (`/slow`), without reading the answer.
    /// A connection busy with a `/slow` request, once the request reached its handler.
    async fn busy(f: &Fixture, from: &str) -> tokio_rustls::client::TlsStream<TcpStream> {
        let before = f.entered.load(Ordering::SeqCst);
        let mut tls = tls_connect(f, from).await;
        tls.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while f.entered.load(Ordering::SeqCst) <= before {
            assert!(Instant::now() < deadline, "the /slow request never reached its handler");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tls
    }

    #[tokio::test]
    async fn a_clients_idle_connections_make_room_and_its_busy_ones_bound_it() {
        let f = serve(ServeLimits { max_connections_per_client: 2, ..limits(10) }).await;
        // Two idle connections (a slowloris holds its share this way) ...
        let mut a = tls_connect(&f, "127.0.0.1").await;
        let _b = tls_connect(&f, "127.0.0.1").await;
        // ... do not lock the client out: a third closes the oldest idle one and is served.
        let mut third = tls_connect(&f, "127.0.0.1").await;
        third.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
        assert!(read_until_closed(&mut third, Duration::from_secs(10)).await.unwrap().ends_with("ok"));
        assert!(closed_within(&mut a, Duration::from_secs(10)).await.is_some(), "the oldest idle one was closed");
        drop(_b);
        // Every connection busy with a request: the client gets no more ...
        let _busy = (busy(&f, "127.0.0.1").await, busy(&f, "127.0.0.1").await);
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let tcp = socket.connect(f.addr).await.unwrap();
        let refused = f.connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await;
        assert!(refused.is_err(), "a client whose connections are all busy got one more");
        // ... while another client is served.
        let mut other = tls_connect(&f, "127.0.0.2").await;
        other.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
        assert!(read_until_closed(&mut other, Duration::from_secs(10)).await.unwrap().ends_with("ok"));
    }

    #[tokio::test]
    async fn a_connection_that_never_handshakes_is_closed() {
        let f = serve(limits(10)).await;
        let mut idle = TcpStream::connect(f.addr).await.unwrap();
        assert!(closed_within(&mut idle, Duration::from_secs(10)).await.is_some(), "idle TCP connection kept open");
        assert!(get(&f).await.ends_with("ok"));
    }

    #[tokio::test]
    async fn a_connection_that_never_sends_headers_is_closed() {
        let f = serve(limits(10)).await;
        let tcp = TcpStream::connect(f.addr).await.unwrap();
        let mut tls = f.connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
        // half a request line, then nothing (slowloris)
        tls.write_all(b"GET / HT").await.unwrap();
        assert!(closed_within(&mut tls, Duration::from_secs(10)).await.is_some(), "slow headers kept open");
    }

    #[tokio::test]
    async fn past_the_cap_idle_connections_make_room_and_busy_ones_make_new_ones_wait() {
        let f = serve(ServeLimits { handshake_timeout: Duration::from_secs(60), ..limits(2) }).await;
        // Two connections that never even handshake hold both places: a client with a
        // request is served all the same (the oldest idle one goes).
        let hold: Vec<TcpStream> =
            vec![TcpStream::connect(f.addr).await.unwrap(), TcpStream::connect(f.addr).await.unwrap()];
        let answer = tokio::time::timeout(Duration::from_secs(10), get(&f)).await.expect("locked out by idle sockets");
        assert!(answer.ends_with("ok"), "{answer}");
        drop(hold);
        // Both places busy with requests: a new connection waits for one to end.
        let _busy = (busy(&f, "127.0.0.1").await, busy(&f, "127.0.0.2").await);
        assert!(tokio::time::timeout(Duration::from_millis(500), get(&f)).await.is_err(), "served past the cap");
        // Once a request ends its connection is idle (kept alive, still open here): the
        // waiting connection takes its place.
        let answer = tokio::time::timeout(Duration::from_secs(10), get(&f)).await.expect("served once one ended");
        assert!(answer.ends_with("ok"), "{answer}");
    }
}
