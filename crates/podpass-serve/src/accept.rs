//! Serving: the accept loop and each connection's TLS + HTTP/1.1, with the bounds
//! kube-apiserver's Go `http.Server` has (`ReadHeaderTimeout` 32 s, which Go also applies
//! to the TLS handshake) plus the ones it leaves to the operating system here: a connection
//! cap and back-off on accept errors (Go's `Serve` sleeps 5 ms doubling to 1 s on
//! temporary errors such as EMFILE, instead of spinning).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tower::ServiceExt;

/// Connection bounds of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// A TLS handshake not done by then closes the connection.
    pub handshake_timeout: Duration,
    /// Request headers not received by then close the connection. hyper also runs this
    /// clock while a kept-alive connection waits for its next request, so it is the idle
    /// timeout as well.
    pub header_read_timeout: Duration,
    /// Connections served at once; past it, new ones wait in the listen backlog.
    pub max_connections: usize,
    /// `--request-timeout`: a request (its body included) not answered by then is
    /// upstream's 504; watches are bounded only until their stream starts. Applied by the
    /// application's router, not by the accept loop.
    pub request_timeout: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(32),
            max_connections: 1000,
            request_timeout: Duration::from_secs(60),
        }
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

/// First and last pause after a failed accept (Go `net/http.Server.Serve`).
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Accepts and serves connections until the task is dropped: over TLS with `tls`, over
/// plain TCP without (callers keep plain servers on loopback).
pub async fn accept_loop(listener: TcpListener, tls: Option<TlsAcceptor>, app: Router, limits: ServeLimits) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        // A permit first: at the cap, connections wait in the kernel's backlog rather than
        // holding file descriptors here.
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else { return };
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
        let _ = tcp.set_nodelay(true);
        let (tls, app) = (tls.clone(), app.clone());
        tokio::spawn(async move {
            let _permit = permit;
            match tls {
                None => serve_connection(tcp, Peer { addr, client_certificates: Arc::from([]) }, app, limits).await,
                Some(tls) => {
                    let Ok(Ok(stream)) = tokio::time::timeout(limits.handshake_timeout, tls.accept(tcp)).await else {
                        return;
                    };
                    let client_certificates: Arc<[CertificateDer<'static>]> = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .map(|chain| chain.iter().map(|c| c.clone().into_owned()).collect())
                        .unwrap_or_else(|| Arc::from([]));
                    serve_connection(stream, Peer { addr, client_certificates }, app, limits).await;
                }
            }
        });
    }
}

/// HTTP/1.1 on one connection, each request tagged with `peer`.
async fn serve_connection<S>(stream: S, peer: Peer, app: Router, limits: ServeLimits)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(peer.clone());
        app.clone().oneshot(request)
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    let _ = builder.http1_only().serve_connection(TokioIo::new(stream), service).await;
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
        let app = Router::new().route(
            "/",
            axum::routing::get(|axum::Extension(peer): axum::Extension<Peer>| async move {
                assert!(peer.addr.ip().is_loopback());
                "ok"
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
        Fixture { addr, connector: tokio_rustls::TlsConnector::from(Arc::new(config)), _dir: dir, task }
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
        }
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
    async fn past_the_cap_connections_wait_and_are_served_when_others_end() {
        let f = serve(ServeLimits { handshake_timeout: Duration::from_secs(60), ..limits(2) }).await;
        let hold: Vec<TcpStream> =
            vec![TcpStream::connect(f.addr).await.unwrap(), TcpStream::connect(f.addr).await.unwrap()];
        // both permits are held by idle connections: a third is not served
        assert!(tokio::time::timeout(Duration::from_millis(500), get(&f)).await.is_err(), "served past the cap");
        drop(hold);
        let answer = tokio::time::timeout(Duration::from_secs(10), get(&f)).await.expect("served once a slot is free");
        assert!(answer.ends_with("ok"), "{answer}");
    }
}
