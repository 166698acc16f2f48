//! Serving: the accept loop and each connection's TLS + HTTP/1.1, with the bounds
//! kube-apiserver's Go `http.Server` has (`ReadHeaderTimeout` 32 s, which Go also applies
//! to the TLS handshake) plus the ones it leaves to the operating system here: a connection
//! cap and back-off on accept errors (Go's `Serve` sleeps 5 ms doubling to 1 s on
//! temporary errors such as EMFILE, instead of spinning).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

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
    /// upstream's 504; watches are bounded only until their stream starts.
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

/// First and last pause after a failed accept (Go `net/http.Server.Serve`).
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Accepts and serves connections until the task is dropped.
pub async fn accept_loop(listener: TcpListener, tls: TlsAcceptor, app: Router, limits: ServeLimits) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        // A permit first: at the cap, connections wait in the kernel's backlog rather than
        // holding file descriptors here.
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else { return };
        let tcp = match listener.accept().await {
            Ok((tcp, _peer)) => {
                backoff = ACCEPT_BACKOFF_MIN;
                tcp
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
            let Ok(Ok(stream)) = tokio::time::timeout(limits.handshake_timeout, tls.accept(tcp)).await else {
                return;
            };
            let service = TowerToHyperService::new(app);
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
            let _ = builder.http1_only().serve_connection(TokioIo::new(stream), service).await;
        });
    }
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

    async fn serve(limits: ServeLimits) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let pki = crate::pki::ensure_serving_pki(dir.path(), &[]).unwrap();
        let tls = crate::server::config::tls_acceptor(pki.cert_chain_pem.as_bytes(), pki.key_pem.as_bytes()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let task = tokio::spawn(accept_loop(listener, tls, app, limits));
        let mut roots = RootCertStore::empty();
        use tokio_rustls::rustls::pki_types::CertificateDer;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        for cert in CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
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
