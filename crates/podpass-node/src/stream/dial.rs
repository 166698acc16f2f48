//! Dialling the runtime's stream server: only a loopback `http` URL (containerd's stream
//! server is plain HTTP on loopback unless told otherwise; nothing the runtime names
//! elsewhere is dialled), one HTTP/1.1 request asking to switch protocols, and the
//! upgraded connection with the headers of the runtime's answer.

use std::time::Duration;

use hyper_util::rt::TokioIo;
use thiserror::Error;

/// How long dialling and the upgrade may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Dialling or upgrading failed.
#[derive(Debug, Error)]
pub enum DialError {
    /// The URL the runtime answered is not a loopback http URL.
    #[error("the runtime's stream URL {0:?} is not a loopback http URL")]
    Url(String),
    /// Dialling or upgrading.
    #[error("connecting to the runtime's stream server: {0}")]
    Connect(String),
    /// The runtime did not upgrade (its status and the start of its answer).
    #[error("the runtime's stream server answered {status}: {body}")]
    Refused {
        /// Its status code.
        status: u16,
        /// Its answer's first bytes.
        body: String,
    },
}

/// `url` parsed, when it is a loopback `http` URL.
pub fn loopback_url(url: &str) -> Result<url::Url, DialError> {
    let parsed = url::Url::parse(url).map_err(|_| DialError::Url(url.to_owned()))?;
    let loopback = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d == "localhost",
        None => false,
    };
    if parsed.scheme() != "http" || !loopback {
        return Err(DialError::Url(url.to_owned()));
    }
    Ok(parsed)
}

/// An upgraded connection and the headers the runtime switched protocols with.
pub struct Upgraded {
    /// The runtime's 101 headers.
    pub headers: http::HeaderMap,
    /// The connection.
    pub io: TokioIo<hyper::upgrade::Upgraded>,
}

/// Sends `method url` with `headers` (an upgrade's handshake) and waits, within
/// [`CONNECT_TIMEOUT`], for the runtime to switch protocols.
pub async fn upgrade(
    url: &url::Url,
    method: http::Method,
    headers: &[(http::HeaderName, http::HeaderValue)],
) -> Result<Upgraded, DialError> {
    tokio::time::timeout(CONNECT_TIMEOUT, upgrade_now(url, method, headers))
        .await
        .map_err(|_| DialError::Connect(format!("no upgrade within {} s", CONNECT_TIMEOUT.as_secs())))?
}

async fn upgrade_now(
    url: &url::Url,
    method: http::Method,
    headers: &[(http::HeaderName, http::HeaderValue)],
) -> Result<Upgraded, DialError> {
    let fail = |e: String| DialError::Connect(e);
    let host = url.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await.map_err(|e| fail(e.to_string()))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|e| fail(e.to_string()))?;
    podpass_serve::spawn_named("stream-upgrade", async move {
        let _ = conn.with_upgrades().await;
    });
    let mut request = http::Request::builder()
        .method(method)
        .uri(&url[url::Position::BeforePath..])
        .header(http::header::HOST, &url[url::Position::BeforeHost..url::Position::AfterPort]);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let request = request.body(http_body_util::Empty::<hyper::body::Bytes>::new()).map_err(|e| fail(e.to_string()))?;
    let response = sender.send_request(request).await.map_err(|e| fail(e.to_string()))?;
    let status = response.status().as_u16();
    if status != 101 {
        use http_body_util::BodyExt;
        let body = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let body = String::from_utf8_lossy(&body[..body.len().min(512)]).trim().to_owned();
        return Err(DialError::Refused { status, body });
    }
    let headers = response.headers().clone();
    let upgraded = hyper::upgrade::on(response).await.map_err(|e| fail(e.to_string()))?;
    Ok(Upgraded { headers, io: TokioIo::new(upgraded) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_loopback_http_url_is_dialled() {
        for url in ["https://127.0.0.1:1/exec/x", "http://10.0.0.1:1/exec/x", "http://example.com/x", "nonsense"] {
            assert!(matches!(loopback_url(url), Err(DialError::Url(_))), "{url}");
        }
        for url in ["http://127.0.0.1:1/exec/x", "http://[::1]:1/portforward/y", "http://localhost:9/z"] {
            assert!(loopback_url(url).is_ok(), "{url}");
        }
    }
}
