//! A minimal keep-alive HTTP/1.1-over-TLS client for load generation.
//!
//! The load generator shares the machine's cores with the server under test, so every
//! microsecond it spends is taken from the figure being measured. It therefore sends
//! pre-serialised requests and reads answers by `Content-Length` only; it is not a general
//! client (no chunked bodies, no redirects) and refuses what it does not understand.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

/// A TLS connector trusting exactly `ca_pem`.
pub fn connector(ca_pem: &[u8]) -> Result<TlsConnector> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(cert.context("CA certificate")?).context("CA certificate")?;
    }
    let mut config = ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

/// One persistent connection.
pub struct Connection {
    stream: TlsStream<TcpStream>,
    buf: Vec<u8>,
}

/// An answer: status code and body.
pub struct Answer {
    /// HTTP status code.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

impl Connection {
    /// Connects to `addr` over TLS, verifying the server certificate for that IP address.
    pub async fn open(connector: &TlsConnector, addr: std::net::SocketAddr) -> Result<Self> {
        let tcp = TcpStream::connect(addr).await.with_context(|| format!("connecting to {addr}"))?;
        tcp.set_nodelay(true).context("TCP_NODELAY")?;
        let name = ServerName::IpAddress(addr.ip().into());
        let stream = connector.connect(name, tcp).await.context("TLS handshake")?;
        Ok(Self { stream, buf: Vec::with_capacity(8192) })
    }

    /// Sends one pre-serialised request and reads its answer.
    pub async fn round_trip(&mut self, request: &[u8]) -> Result<Answer> {
        self.stream.write_all(request).await.context("sending the request")?;
        self.stream.flush().await.context("sending the request")?;
        self.buf.clear();
        let header_end = loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                break end + 4;
            }
            self.fill().await?;
        };
        let head = std::str::from_utf8(&self.buf[..header_end]).context("non-UTF-8 response head")?;
        let status = head
            .strip_prefix("HTTP/1.1 ")
            .and_then(|r| r.get(..3))
            .and_then(|c| c.parse::<u16>().ok())
            .context("malformed status line")?;
        let mut length = None;
        for line in head.split("\r\n").skip(1) {
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = Some(value.trim().parse::<usize>().context("malformed Content-Length")?);
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    bail!("the bench client does not read {name}: {value}");
                }
            }
        }
        let length = length.context("response without Content-Length")?;
        while self.buf.len() < header_end + length {
            self.fill().await?;
        }
        Ok(Answer { status, body: self.buf[header_end..header_end + length].to_vec() })
    }

    async fn fill(&mut self) -> Result<()> {
        let mut chunk = [0u8; 8192];
        let n = self.stream.read(&mut chunk).await.context("reading the answer")?;
        if n == 0 {
            bail!("the server closed the connection");
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A POST request with a JSON body and a bearer token, ready to send.
pub fn post(host: &str, path: &str, token: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A GET request with a bearer token, ready to send.
pub fn get(host: &str, path: &str, token: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nAccept: application/json\r\n\r\n")
        .into_bytes()
}

/// A DELETE request with a bearer token, ready to send.
pub fn delete(host: &str, path: &str, token: &str) -> Vec<u8> {
    format!(
        "DELETE {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nAccept: application/json\r\nContent-Length: 0\r\n\r\n"
    )
    .into_bytes()
}

/// A PATCH request with a body of `content_type` and a bearer token, ready to send.
pub fn patch(host: &str, path: &str, token: &str, content_type: &str, body: &str) -> Vec<u8> {
    format!(
        "PATCH {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nContent-Type: {content_type}\r\nAccept: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
