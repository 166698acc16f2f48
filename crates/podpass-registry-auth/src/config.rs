//! `podpass registry-auth`'s configuration: [`Config`] → [`Config::prepare`] (every problem
//! reported at once, nothing bound) → [`RegistryAuth::bind`] → [`Bound::serve`].

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use podpass_serve::{ServeLimits, accept_loop};
use podpass_token::{Jwks, JwsHeader, JwsSigner, SigningKey};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::fetch::DocumentFetcher;
use crate::http::{AppState, router};
use crate::metrics::Metrics;
use crate::node_binding::NodeBinding;
use crate::policy::Policy;
use crate::registry_token::RegistryTokenSigner;
use crate::review::{ReviewConfigError, TokenReviewer, check_kubeconfig};
use crate::service::{ServiceParts, TokenService};
use crate::trust::{IssuerTrust, TrustTimings};

/// Input files larger than this are refused.
const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Timeout of one issuer document fetch.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The flags of `podpass registry-auth`.
#[derive(Debug, Clone)]
pub struct Config {
    /// `--listen`.
    pub listen: SocketAddr,
    /// `--issuer` (repeatable): trusted clusters' service-account issuer URLs.
    pub issuers: Vec<String>,
    /// `--issuer-ca`: PEM bundle trusted for every issuer's HTTPS.
    pub issuer_ca: Option<PathBuf>,
    /// `--audience`: the audience pod tokens must carry.
    pub audience: String,
    /// `--policy`.
    pub policy: PathBuf,
    /// `--signing-key`: the registry-token key (PEM).
    pub signing_key: PathBuf,
    /// `--cert-chain`: its certificate chain, leaf first (tokens then carry `x5c`).
    pub cert_chain: Option<PathBuf>,
    /// `--registry-service`: the registry's `auth.token.service` (the tokens' `aud`).
    pub registry_service: String,
    /// `--token-issuer`: the registry's `auth.token.issuer` (the tokens' `iss`).
    pub token_issuer: String,
    /// `--node-binding`.
    pub node_binding: NodeBinding,
    /// `--tls-cert-file`.
    pub tls_cert_file: Option<PathBuf>,
    /// `--tls-private-key-file`.
    pub tls_private_key_file: Option<PathBuf>,
    /// `--client-ca-file`: CA of node client certificates (a node proof).
    pub client_ca_file: Option<PathBuf>,
    /// `--token-ttl`: registry token lifetime.
    pub token_ttl: Duration,
    /// `--exchange-token-ttl`: exchange token lifetime (never past its source token).
    pub exchange_token_ttl: Duration,
    /// `--token-review-kubeconfig` (repeatable): ask these clusters' TokenReview before
    /// granting.
    pub token_review: Vec<TokenReviewKubeconfig>,
    /// Issuer key refresh timings.
    pub timings: TrustTimings,
    /// Connection bounds.
    pub serve_limits: ServeLimits,
}

impl Config {
    /// A configuration with the defaults for everything but the required flags.
    pub fn new(
        listen: SocketAddr,
        issuers: Vec<String>,
        audience: &str,
        policy: PathBuf,
        signing_key: PathBuf,
        registry_service: &str,
    ) -> Self {
        Self {
            listen,
            issuers,
            issuer_ca: None,
            audience: audience.into(),
            policy,
            signing_key,
            cert_chain: None,
            registry_service: registry_service.into(),
            token_issuer: "podpass-registry-auth".into(),
            node_binding: NodeBinding::default(),
            tls_cert_file: None,
            tls_private_key_file: None,
            client_ca_file: None,
            token_ttl: Duration::from_secs(300),
            exchange_token_ttl: Duration::from_secs(3600),
            token_review: Vec::new(),
            timings: TrustTimings::default(),
            // Internet-facing: a body has 30 s to arrive, and one client address holds at
            // most a quarter of the connections.
            serve_limits: ServeLimits {
                request_timeout: Duration::from_secs(30),
                max_connections_per_client: ServeLimits::default().max_connections / 4,
                ..ServeLimits::default()
            },
        }
    }
}

/// One `--token-review-kubeconfig [ISSUER=]PATH`: the kubeconfig of the cluster whose
/// TokenReview checks `ISSUER`'s tokens (the issuer may be left out when only one is
/// trusted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenReviewKubeconfig {
    /// The issuer, when named.
    pub issuer: Option<String>,
    /// The kubeconfig.
    pub path: PathBuf,
}

impl std::str::FromStr for TokenReviewKubeconfig {
    type Err = String;

    /// `https://issuer=PATH` or `PATH` (issuers have no query, so the first `=` after an
    /// `https://` prefix ends the issuer).
    fn from_str(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("empty".into());
        }
        match s.strip_prefix("https://").and_then(|rest| rest.split_once('=')) {
            Some((host_path, path)) if !path.is_empty() => {
                Ok(Self { issuer: Some(format!("https://{host_path}")), path: path.into() })
            }
            Some(_) => Err(format!("{s:?}: no kubeconfig path after '='")),
            None => Ok(Self { issuer: None, path: s.into() }),
        }
    }
}

/// Every configuration problem, one per line.
#[derive(Debug, Error)]
#[error("{}", .0.join("\n"))]
pub struct ConfigErrors(pub Vec<String>);

/// Binding or serving failed.
#[derive(Debug, Error)]
pub enum RunError {
    /// The listen address could not be bound.
    #[error("--listen {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// A `--token-review-kubeconfig` gives no client.
    #[error(transparent)]
    TokenReview(#[from] ReviewConfigError),
}

fn read_file(flag: &str, path: &Path, errors: &mut Vec<String>) -> Option<Vec<u8>> {
    let result = std::fs::metadata(path).and_then(|m| {
        if m.len() > MAX_FILE_BYTES {
            Err(std::io::Error::other(format!("larger than {MAX_FILE_BYTES} bytes")))
        } else {
            std::fs::read(path)
        }
    });
    result.map_err(|e| errors.push(format!("{flag} {}: {e}", path.display()))).ok()
}

fn check_issuer(issuer: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(issuer).map_err(|e| e.to_string())?;
    if url.scheme() != "https" {
        return Err("must be an https:// URL".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must not have a query or fragment".into());
    }
    Ok(())
}

/// The DER certificates of a PEM chain whose leaf holds `key`'s public key.
fn chain_for(key: &SigningKey, pem: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    use tokio_rustls::rustls::pki_types::CertificateDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    let certs: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(pem)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let leaf = certs.first().ok_or("no certificates found")?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).map_err(|e| format!("leaf certificate: {e}"))?;
    if cert.tbs_certificate.subject_pki.raw != key.public_key().spki_der() {
        return Err("the first certificate is not for --signing-key's public key".into());
    }
    Ok(certs)
}

impl Config {
    /// Validates every flag and loads every file; all problems are reported together and
    /// nothing is bound.
    pub fn prepare(&self) -> Result<RegistryAuth, ConfigErrors> {
        let mut errors = Vec::new();
        if self.issuers.is_empty() {
            errors.push("--issuer: at least one trusted issuer is required".into());
        }
        for (i, issuer) in self.issuers.iter().enumerate() {
            if let Err(e) = check_issuer(issuer) {
                errors.push(format!("--issuer {issuer:?}: {e}"));
            }
            if self.issuers[..i].contains(issuer) {
                errors.push(format!("--issuer {issuer:?}: given twice"));
            }
        }
        for (flag, value) in [
            ("--audience", &self.audience),
            ("--registry-service", &self.registry_service),
            ("--token-issuer", &self.token_issuer),
        ] {
            if value.trim().is_empty() {
                errors.push(format!("{flag}: required"));
            }
        }
        if !(1..=3600).contains(&self.token_ttl.as_secs()) {
            errors.push("--token-ttl: must be between 1s and 1h".into());
        }
        let limits = &self.serve_limits;
        if limits.max_connections == 0 {
            errors.push("--max-connections: must be at least 1".into());
        }
        if limits.max_connections_per_client == 0 || limits.max_connections_per_client > limits.max_connections {
            errors.push("--max-connections-per-client: must be between 1 and --max-connections".into());
        }
        if !(1..=600).contains(&limits.request_timeout.as_secs()) {
            errors.push("--request-timeout: must be between 1s and 10m".into());
        }
        if !(60..=86_400).contains(&self.exchange_token_ttl.as_secs()) {
            errors.push("--exchange-token-ttl: must be between 1m and 24h".into());
        }
        let policy = match Policy::load(&self.policy) {
            Ok(p) => Some(p),
            Err(e) => {
                errors.push(format!("--policy {e}"));
                None
            }
        };
        if let Some(policy) = &policy {
            for (path, glob) in policy.issuer_patterns() {
                if !self.issuers.iter().any(|i| glob.matches(i)) {
                    errors.push(format!("--policy {}: {path}: matches no --issuer", self.policy.display()));
                }
            }
        }
        let key = read_file("--signing-key", &self.signing_key, &mut errors).and_then(|pem| {
            let parse = || SigningKey::from_pem(&pem);
            match (parse(), parse()) {
                (Ok(a), Ok(b)) => Some((a, b)),
                (Err(e), _) | (_, Err(e)) => {
                    errors.push(format!("--signing-key {}: {e}", self.signing_key.display()));
                    None
                }
            }
        });
        let chain = match (&self.cert_chain, &key) {
            (Some(path), Some((k, _))) => read_file("--cert-chain", path, &mut errors).and_then(|pem| {
                chain_for(k, &pem).map_err(|e| errors.push(format!("--cert-chain {}: {e}", path.display()))).ok()
            }),
            _ => Some(Vec::new()),
        };
        let issuer_ca = self.issuer_ca.as_ref().and_then(|p| read_file("--issuer-ca", p, &mut errors));
        let fetcher = match DocumentFetcher::new(issuer_ca.as_deref(), FETCH_TIMEOUT) {
            Ok(f) => Some(f),
            Err(e) => {
                errors.push(format!("--issuer-ca: {e}"));
                None
            }
        };
        let tls = self.tls(&mut errors);
        let token_review = self.resolve_token_review(&mut errors);
        let (Some(policy), Some((key, exchange_key)), Some(chain), Some(fetcher), Some(tls)) =
            (policy, key, chain, fetcher, tls)
        else {
            return Err(ConfigErrors(errors));
        };
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }

        let fail = |e: String| ConfigErrors(vec![e]);
        let jwks_key = key.public_key().clone().with_key_id(key.public_key().libtrust_key_id());
        let jwks = Jwks::from_keys([&jwks_key]).map_err(|e| fail(format!("--signing-key: {e}")))?;
        let jwks = serde_json::to_string(&jwks).map_err(|e| fail(e.to_string()))?;
        let ttl = i64::try_from(self.token_ttl.as_secs()).unwrap_or(300);
        let registry = RegistryTokenSigner::new(key, &chain, &self.token_issuer, &self.registry_service, ttl)
            .map_err(|e| fail(e.to_string()))?;
        let exchange_header = JwsHeader { kid: Some(exchange_key.key_id().to_owned()), ..JwsHeader::default() };
        let exchange_signer = JwsSigner::new(exchange_key, &exchange_header).map_err(|e| fail(e.to_string()))?;
        let metrics = Arc::new(Metrics::default());
        let trusts: Vec<Arc<IssuerTrust>> = self
            .issuers
            .iter()
            .map(|i| Arc::new(IssuerTrust::new(i, &self.audience, fetcher.clone(), self.timings, Arc::clone(&metrics))))
            .collect();
        let parts = ServiceParts {
            trusts: trusts.clone(),
            policy,
            registry,
            exchange_signer,
            node_binding: self.node_binding,
            exchange_ttl_seconds: i64::try_from(self.exchange_token_ttl.as_secs()).unwrap_or(3600),
            metrics,
            reviewers: Vec::new(),
        };
        Ok(RegistryAuth {
            listen: self.listen,
            tls,
            parts,
            jwks,
            audience: self.audience.clone(),
            token_review,
            trusts,
            limits: self.serve_limits,
        })
    }

    /// The `(issuer, kubeconfig)` pairs of `--token-review-kubeconfig`, each kubeconfig read
    /// and checked.
    fn resolve_token_review(&self, errors: &mut Vec<String>) -> Vec<(String, PathBuf)> {
        let mut resolved: Vec<(String, PathBuf)> = Vec::new();
        for entry in &self.token_review {
            let flag = format!("--token-review-kubeconfig {}", entry.path.display());
            let issuer = match (&entry.issuer, self.issuers.as_slice()) {
                (Some(i), _) if self.issuers.contains(i) => i.clone(),
                (Some(i), _) => {
                    errors.push(format!("{flag}: issuer {i:?} is not an --issuer"));
                    continue;
                }
                (None, [only]) => only.clone(),
                (None, _) => {
                    errors.push(format!("{flag}: name the issuer (ISSUER=PATH) when several are trusted"));
                    continue;
                }
            };
            if resolved.iter().any(|(i, _)| *i == issuer) {
                errors.push(format!("{flag}: a second kubeconfig for issuer {issuer:?}"));
                continue;
            }
            if let Err(e) = check_kubeconfig(&entry.path) {
                errors.push(format!("{flag}: {e}"));
                continue;
            }
            resolved.push((issuer, entry.path.clone()));
        }
        resolved
    }

    /// The TLS acceptor (`Some(None)` = plain HTTP, on loopback only), or `None` after
    /// recording problems.
    fn tls(&self, errors: &mut Vec<String>) -> Option<Option<TlsAcceptor>> {
        match (&self.tls_cert_file, &self.tls_private_key_file) {
            (None, None) => {
                if !self.listen.ip().is_loopback() {
                    errors.push(format!(
                        "--listen {}: without --tls-cert-file/--tls-private-key-file only a loopback address may be used",
                        self.listen
                    ));
                }
                if self.client_ca_file.is_some() {
                    errors.push("--client-ca-file: needs --tls-cert-file and --tls-private-key-file".into());
                }
                Some(None)
            }
            (Some(cert), Some(key)) => {
                let cert = read_file("--tls-cert-file", cert, errors);
                let key = read_file("--tls-private-key-file", key, errors);
                let ca = match &self.client_ca_file {
                    Some(p) => Some(read_file("--client-ca-file", p, errors)?),
                    None => None,
                };
                let (cert, key) = (cert?, key?);
                match podpass_serve::tls_acceptor(&cert, &key, ca.as_deref()) {
                    Ok(acceptor) => Some(Some(acceptor)),
                    Err(e) => {
                        errors.push(match e {
                            podpass_serve::TlsError::CertChain(m) => format!("--tls-cert-file: {m}"),
                            podpass_serve::TlsError::PrivateKey(m) => format!("--tls-private-key-file: {m}"),
                            podpass_serve::TlsError::ClientCa(m) => format!("--client-ca-file: {m}"),
                            other => other.to_string(),
                        });
                        None
                    }
                }
            }
            _ => {
                errors.push("--tls-cert-file and --tls-private-key-file must be given together".into());
                None
            }
        }
    }
}

/// A prepared service: configuration checked, files loaded, nothing bound.
pub struct RegistryAuth {
    listen: SocketAddr,
    tls: Option<TlsAcceptor>,
    parts: ServiceParts,
    jwks: String,
    audience: String,
    token_review: Vec<(String, PathBuf)>,
    trusts: Vec<Arc<IssuerTrust>>,
    limits: ServeLimits,
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryAuth")
            .field("listen", &self.listen)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// A bound service.
pub struct Bound {
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    state: Arc<AppState>,
    trusts: Vec<Arc<IssuerTrust>>,
    limits: ServeLimits,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound").field("listener", &self.listener).finish_non_exhaustive()
    }
}

impl RegistryAuth {
    /// Builds the TokenReview clients and binds the listen address.
    pub async fn bind(self) -> Result<Bound, RunError> {
        let RegistryAuth { listen, tls, mut parts, jwks, audience, token_review, trusts, limits } = self;
        for (issuer, path) in &token_review {
            parts.reviewers.push(Arc::new(TokenReviewer::from_kubeconfig(issuer, &audience, path).await?));
        }
        let listener = TcpListener::bind(listen).await.map_err(|source| RunError::Bind { addr: listen, source })?;
        let state = Arc::new(AppState { service: Arc::new(TokenService::new(parts)), jwks });
        Ok(Bound { listener, tls, state, trusts, limits })
    }
}

impl Bound {
    /// The bound address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// The token service (for benchmarks and embedding).
    pub fn service(&self) -> &Arc<TokenService> {
        &self.state.service
    }

    /// Fetches every issuer's keys in the background and serves until `shutdown`.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let Bound { listener, tls, state, trusts, limits } = self;
        let scheme = if tls.is_some() { "https" } else { "http" };
        tracing::info!(address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), scheme, "registry-auth listening");
        let refreshers: Vec<_> = trusts.into_iter().map(|t| tokio::spawn(t.refresh_forever())).collect();
        let server = tokio::spawn(accept_loop(listener, tls, router(state), limits));
        shutdown.await;
        server.abort();
        for r in refreshers {
            r.abort();
        }
    }
}
