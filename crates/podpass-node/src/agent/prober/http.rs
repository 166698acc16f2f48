//! The httpGet probe (kubelet `http.DoHTTPProbe`): a GET of `scheme://host:port/path` from
//! the pod's side ([`super::net`]), with the probe's headers, `User-Agent: kube-probe/1.34`
//! and `Accept: */*` unless it sets them. 200–399 is success (a redirect not followed, a
//! warning), anything else `HTTP probe failed with statuscode: N`; at most 10 KiB of the
//! body is read. Redirects to the same host are followed (ten at most); to another host,
//! not (kubelet: `followNonLocalRedirects` is off for probes). HTTPS is not verified, as
//! the kubelet's probes do not verify (`InsecureSkipVerify`).

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio_rustls::rustls;

use super::net::{Target, connect, join_host_port};
use super::{ProbeError, Probed};

/// The most of a response body read (kubelet: `maxRespBodyLength`, 10 KiB).
pub(crate) const MAX_BODY: usize = 10 * 1024;
/// Redirects followed at most (Go's http.Client).
const MAX_REDIRECTS: usize = 10;
/// The kubelet's probe user agent, `kube-probe/<major>.<minor>` of the API it speaks.
pub(crate) const USER_AGENT: &str = "kube-probe/1.34";

/// One httpGet probe.
#[derive(Debug, Clone)]
pub(crate) struct HttpGet<'a> {
    pub tls: bool,
    pub host: &'a str,
    pub port: u16,
    pub path: &'a str,
    pub headers: &'a [(String, String)],
}

/// Runs the probe within `timeout`.
pub(crate) async fn http_probe(target: &Target, get: &HttpGet<'_>, timeout: Duration) -> Probed {
    let host = if get.host.is_empty() { target.pod_ip.as_str() } else { get.host };
    let scheme = if get.tls { "https" } else { "http" };
    let path = if get.path.starts_with('/') { get.path.to_owned() } else { format!("/{}", get.path) };
    let shown = format!("{scheme}://{}{path}", join_host_port(host, get.port));
    let Ok(url) = url::Url::parse(&shown) else {
        return Probed::Failure(format!("parse {shown:?}: invalid URL"));
    };
    match tokio::time::timeout(timeout, follow(target, url, get.headers)).await {
        Err(_) => Probed::Failure(format!(
            "Get {shown:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        )),
        Ok(Err((at, e))) => Probed::Failure(format!("Get {at:?}: {e}")),
        Ok(Ok((code, body))) => judge(code, &body),
    }
}

/// What the final response means.
pub(crate) fn judge(code: u16, body: &[u8]) -> Probed {
    let body = String::from_utf8_lossy(body).into_owned();
    match code {
        200..=299 => Probed::Success(body),
        300..=399 => Probed::Warning(format!("Probe terminated redirects, Response body: {body}")),
        _ => Probed::Failure(format!("HTTP probe failed with statuscode: {code}")),
    }
}

/// The GET, following redirects on the same host: the final status and body, or the URL
/// that failed and why.
async fn follow(
    target: &Target,
    mut url: url::Url,
    headers: &[(String, String)],
) -> Result<(u16, Vec<u8>), (String, ProbeError)> {
    let first_host = url.host_str().unwrap_or_default().to_owned();
    for _ in 0..=MAX_REDIRECTS {
        let (code, body, location) = get(target, &url, headers).await.map_err(|e| (url.to_string(), e))?;
        let next = location.filter(|_| (300..400).contains(&code)).and_then(|l| url.join(&l).ok());
        match next {
            Some(next) if next.host_str() == Some(first_host.as_str()) => url = next,
            _ => return Ok((code, body)),
        }
    }
    Err((url.to_string(), ProbeError::Redirects))
}

/// Aborts the connection's task when the probe is done (or dropped at its timeout).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// One GET: status, at most [`MAX_BODY`] of the body, and `Location`.
async fn get(
    target: &Target,
    url: &url::Url,
    headers: &[(String, String)],
) -> Result<(u16, Vec<u8>, Option<String>), ProbeError> {
    let host = url.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    // The outer timeout bounds the whole probe; the connect is bounded by it too.
    let stream = connect(target, &host, port, Duration::from_secs(3600)).await?;
    let io: Box<dyn Io> = if url.scheme() == "https" {
        let name = rustls::pki_types::ServerName::try_from(host.clone())?;
        let tls = tokio_rustls::TlsConnector::from(insecure_config()?).connect(name, stream).await;
        Box::new(tls?)
    } else {
        Box::new(stream)
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    let _conn = AbortOnDrop(tokio::spawn(async move {
        let _ = conn.await;
    }));
    let mut request = http::Request::get(url[url::Position::BeforePath..].to_owned());
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let host_header = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| url[url::Position::BeforeHost..url::Position::AfterPort].to_owned());
    request = request.header(http::header::HOST, host_header).header(http::header::CONNECTION, "close");
    if !has("user-agent") {
        request = request.header(http::header::USER_AGENT, USER_AGENT);
    }
    if !has("accept") {
        request = request.header(http::header::ACCEPT, "*/*");
    }
    for (name, value) in headers.iter().filter(|(n, _)| !n.eq_ignore_ascii_case("host")) {
        // An empty Accept removes it (kubelet: `headers.Del("Accept")`).
        if name.eq_ignore_ascii_case("accept") && value.is_empty() {
            continue;
        }
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request.body(String::new())?;
    let response = sender.send_request(request).await?;
    let code = response.status().as_u16();
    let location = response.headers().get(http::header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut body = response.into_body();
    let mut read = Vec::new();
    while read.len() < MAX_BODY {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    read.extend_from_slice(data);
                }
            }
            Some(Err(e)) => return Err(e.into()),
            None => break,
        }
    }
    // A longer body is cut, not refused (kubelet: "non fatal body truncation").
    read.truncate(MAX_BODY);
    Ok((code, read, location))
}

/// A TLS client that accepts any certificate (probes do not verify, as the kubelet's).
fn insecure_config() -> Result<Arc<rustls::ClientConfig>, ProbeError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The verifier of a client that does not verify: any certificate is taken, but the
/// handshake's signatures are still checked (the session is still TLS).
#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server answering each connection with the next of `answers` (raw HTTP), and the
    /// requests it read.
    async fn serve(answers: Vec<String>) -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            for answer in answers {
                let Ok((mut s, _)) = listener.accept().await else { return };
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
                let _ = s.write_all(answer.as_bytes()).await;
            }
        });
        (port, rx)
    }

    fn probe(port: u16, path: &str, headers: &[(String, String)]) -> HttpGet<'static> {
        HttpGet {
            tls: false,
            host: "",
            port,
            path: Box::leak(path.to_owned().into_boxed_str()),
            headers: Box::leak(headers.to_vec().into_boxed_slice()),
        }
    }

    fn target() -> Target {
        Target { netns: None, pod_ip: "127.0.0.1".into() }
    }

    #[tokio::test]
    async fn a_2xx_succeeds_with_the_kubelets_headers_and_a_5xx_fails_with_its_code() {
        let ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_owned();
        let bad = "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n".to_owned();
        let (port, mut seen) = serve(vec![ok, bad]).await;
        let headers = [("X-Probe".to_owned(), "1".to_owned())];
        let t = Duration::from_secs(5);
        assert_eq!(
            http_probe(&target(), &probe(port, "/healthz?x=1", &headers), t).await,
            Probed::Success("ok".into())
        );
        let request = seen.recv().await.unwrap_or_default().to_ascii_lowercase();
        assert!(request.starts_with("get /healthz?x=1 http/1.1\r\n"), "{request}");
        for line in [
            format!("host: 127.0.0.1:{port}"),
            "user-agent: kube-probe/1.34".into(),
            "accept: */*".into(),
            "x-probe: 1".into(),
        ] {
            assert!(request.contains(&line), "{line} in {request}");
        }
        assert_eq!(
            http_probe(&target(), &probe(port, "/", &[]), t).await,
            Probed::Failure("HTTP probe failed with statuscode: 503".into())
        );
    }

    #[tokio::test]
    async fn same_host_redirects_are_followed_and_others_are_a_warning() {
        let to_other =
            "HTTP/1.1 302 Found\r\nlocation: http://example.invalid/x\r\ncontent-length: 4\r\n\r\nmove".to_owned();
        let (other_port, _s) = serve(vec![to_other]).await;
        assert_eq!(
            http_probe(&target(), &probe(other_port, "/", &[]), Duration::from_secs(5)).await,
            Probed::Warning("Probe terminated redirects, Response body: move".into())
        );
        let (p2, mut seen) = serve(vec![
            "HTTP/1.1 301 Moved\r\nlocation: /ready\r\ncontent-length: 0\r\n\r\n".to_owned(),
            "HTTP/1.1 204 No Content\r\n\r\n".to_owned(),
        ])
        .await;
        assert_eq!(
            http_probe(&target(), &probe(p2, "/", &[]), Duration::from_secs(5)).await,
            Probed::Success(String::new())
        );
        let _ = seen.recv().await;
        assert!(seen.recv().await.unwrap_or_default().starts_with("GET /ready "), "the redirect was followed");
    }

    #[tokio::test]
    async fn a_server_that_never_answers_fails_at_the_timeout_in_gos_words() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let got = http_probe(&target(), &probe(port, "/", &[]), Duration::from_millis(300)).await;
        assert_eq!(
            got,
            Probed::Failure(format!(
                "Get \"http://127.0.0.1:{port}/\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            ))
        );
        drop(listener);
        let Probed::Failure(refused) = http_probe(&target(), &probe(port, "/", &[]), Duration::from_secs(5)).await
        else {
            panic!("a closed port succeeded")
        };
        assert_eq!(
            refused,
            format!("Get \"http://127.0.0.1:{port}/\": dial tcp 127.0.0.1:{port}: connect: connection refused")
        );
    }

    #[tokio::test]
    async fn only_ten_kib_of_a_body_is_kept() {
        let big = "y".repeat(MAX_BODY * 3);
        let (port, _seen) = serve(vec![format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{big}", big.len())]).await;
        let Probed::Success(body) = http_probe(&target(), &probe(port, "/", &[]), Duration::from_secs(5)).await else {
            panic!("not a success")
        };
        assert_eq!(body.len(), MAX_BODY);
    }
}
