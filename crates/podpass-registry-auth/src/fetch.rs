//! Fetching an issuer's public documents (OIDC discovery, JWKS) over HTTPS: from the
//! configured origin only (redirects to another origin are refused), bounded in size and
//! time, trusting the given CA bundle or else the platform's roots.

use podpass_serve::error_chain;
use std::time::Duration;

use thiserror::Error;

/// Documents larger than this are refused (a JWKS is a few KiB).
pub const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;
/// Redirects followed within one origin.
const MAX_REDIRECTS: usize = 5;

/// A document could not be fetched.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// The HTTP client could not be built (bad CA bundle).
    #[error("{0}")]
    Client(String),
    /// Transport failure, timeout or a refused redirect.
    #[error("fetching {url}: {reason}")]
    Transport {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// A non-2xx answer.
    #[error("fetching {url}: HTTP {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// Larger than [`MAX_DOCUMENT_BYTES`].
    #[error("{url}: larger than {MAX_DOCUMENT_BYTES} bytes")]
    TooLarge {
        /// The URL.
        url: String,
    },
}

/// Whether two URLs share scheme, host and port.
pub fn same_origin(a: &reqwest::Url, b: &reqwest::Url) -> bool {
    a.scheme() == b.scheme() && a.host_str() == b.host_str() && a.port_or_known_default() == b.port_or_known_default()
}

/// An HTTPS client for issuer documents.
#[derive(Debug, Clone)]
pub struct DocumentFetcher {
    client: reqwest::Client,
    /// Sent as `Authorization: Bearer` (an API server serves discovery to service accounts).
    bearer: Option<String>,
}

impl DocumentFetcher {
    /// A fetcher trusting the certificates in `ca_pem` (every one; none is an error) or,
    /// without it, the platform's roots.
    pub fn new(ca_pem: Option<&[u8]>, timeout: Duration) -> Result<Self, FetchError> {
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            let first = attempt.previous().first().cloned();
            if attempt.previous().len() > MAX_REDIRECTS {
                attempt.error("too many redirects")
            } else if first.is_some_and(|f| !same_origin(&f, attempt.url())) {
                attempt.error("redirect to another origin refused")
            } else {
                attempt.follow()
            }
        });
        let mut builder = reqwest::Client::builder()
            .https_only(true)
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(redirects)
            .pool_max_idle_per_host(2);
        if let Some(pem) = ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| FetchError::Client(e.to_string()))?;
            if certs.is_empty() {
                return Err(FetchError::Client("no certificates found".into()));
            }
            builder = builder.tls_certs_only(certs);
        }
        Ok(Self { client: builder.build().map_err(|e| FetchError::Client(e.to_string()))?, bearer: None })
    }

    /// The same fetcher, sending `token` as a bearer token with every request (redirects
    /// stay on the first origin, so it goes nowhere else).
    pub fn with_bearer_token(mut self, token: &str) -> Self {
        self.bearer = Some(token.to_owned());
        self
    }

    /// GETs `url` (https only) and returns the body, at most [`MAX_DOCUMENT_BYTES`].
    pub async fn get(&self, url: &str) -> Result<Vec<u8>, FetchError> {
        let transport = |e: reqwest::Error| FetchError::Transport { url: url.into(), reason: error_chain(&e) };
        let mut request = self.client.get(url).header("accept", "application/json");
        if let Some(token) = &self.bearer {
            request = request.bearer_auth(token);
        }
        let mut resp = request.send().await.map_err(transport)?;
        let status = resp.status();
        if !status.is_success() {
            return Err(FetchError::Status { url: url.into(), status: status.as_u16() });
        }
        let too_large = || FetchError::TooLarge { url: url.into() };
        if resp.content_length().is_some_and(|l| l > MAX_DOCUMENT_BYTES as u64) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(transport)? {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}
