//! `podpass registry-auth`'s configuration: [`Config`] (its flags, declared once) →
//! [`Config::prepare`] (every problem reported at once, nothing bound) →
//! [`RegistryAuth::bind`] → [`Bound::serve`].

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use podpass_api::GoDuration;
use podpass_serve::{AuditFlags, ConfigErrors, Problems, ServeLimits, accept_loop};
use podpass_token::{Jwks, JwsHeader, JwsSigner, SigningKey};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::fetch::DocumentFetcher;
use crate::http::{AppState, router};
use crate::metrics::RegistryAuthMetrics;
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

/// The flags of `podpass registry-auth`: declared once here, parsed by the CLI (clap) or
/// [`podpass_serve::parse_flags`], checked whole by [`Config::prepare`].
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Address to serve on; without TLS flags only a loopback address is accepted.
    #[arg(long, default_value = "127.0.0.1:5003")]
    pub listen: SocketAddr,
    /// A trusted cluster's service-account issuer URL (repeatable).
    #[arg(long = "issuer", required = true)]
    pub issuers: Vec<String>,
    /// PEM bundle trusted for every issuer's HTTPS (else the platform's roots).
    #[arg(long)]
    pub issuer_ca: Option<PathBuf>,
    /// The audience pod tokens must carry (the provider's serviceAccountTokenAudience).
    #[arg(long)]
    pub audience: String,
    /// The access policy (YAML).
    #[arg(long)]
    pub policy: PathBuf,
    /// Private key signing registry tokens (PEM; its certificate goes into the registry's
    /// rootcertbundle).
    #[arg(long)]
    pub signing_key: PathBuf,
    /// Certificate chain of the signing key, leaf first: tokens then carry x5c.
    #[arg(long)]
    pub cert_chain: Option<PathBuf>,
    /// The registry's auth.token.service: the registry tokens' audience.
    #[arg(long)]
    pub registry_service: String,
    /// The registry's auth.token.issuer: the registry tokens' iss.
    #[arg(long, default_value = "podpass-registry-auth")]
    pub token_issuer: String,
    /// A pod token naming a node only from that node: require, prefer or off.
    #[arg(long, default_value = "prefer")]
    pub node_binding: NodeBinding,
    /// Serving certificate chain (PEM).
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// Serving private key (PEM).
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// CA of node client certificates (CN=system:node:NAME, O=system:nodes), a node proof.
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// Lifetime of registry tokens (Go duration, 1s to 1h).
    #[arg(long, default_value = "5m")]
    pub token_ttl: GoDuration,
    /// Lifetime of exchange tokens, never past the token they came from (Go duration, 1m to
    /// 24h).
    #[arg(long, default_value = "1h")]
    pub exchange_token_ttl: GoDuration,
    /// Before granting, ask a cluster's TokenReview whether a pod token still authenticates
    /// (its pod still exists): `[ISSUER=]KUBECONFIG`, repeatable; the issuer may be left out
    /// when only one is trusted. The kubeconfig's user needs create on tokenreviews.
    #[arg(long = "token-review-kubeconfig", value_name = "[ISSUER=]PATH")]
    pub token_review: Vec<TokenReviewKubeconfig>,
    /// Who may read `/metrics`: `none` (anyone; the default) or `delegated` (a bearer token
    /// the cluster's TokenReview authenticates, whose user its SubjectAccessReview allows
    /// `get` on the non-resource path `/metrics`, as kube-scheduler's; through the first
    /// --token-review-kubeconfig, whose user needs create on subjectaccessreviews too).
    #[arg(long, default_value = "none", value_parser = ["none", "delegated"])]
    pub metrics_auth: String,
    /// Connections served at once; more wait in the listen backlog.
    #[arg(long, default_value_t = 1000)]
    pub max_connections: usize,
    /// Connections one client address may hold at once (internet-facing: a quarter of
    /// --max-connections); its further connections are closed. Behind a proxy, raise it to
    /// --max-connections.
    #[arg(long, default_value_t = 250)]
    pub max_connections_per_client: usize,
    /// A request whose body has not arrived in full this long after its headers is
    /// answered 408 and its connection closed (Go duration, 1s to 10m).
    #[arg(long, default_value = "30s")]
    pub request_timeout: GoDuration,
    /// Minimum time between two issuer key fetches caused by an unknown kid (Go duration).
    #[arg(long, default_value = "10s")]
    pub jwks_min_refetch_interval: GoDuration,
    /// Period of the background issuer key refresh (Go duration).
    #[arg(long, default_value = "5m")]
    pub jwks_refresh_interval: GoDuration,
    /// The audit of every decision (one JSON line each). Without `--audit-log-path`,
    /// registry-auth audits to standard out: an internet-facing token service is never
    /// run unaudited.
    #[command(flatten)]
    pub audit: AuditFlags,
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

fn read_file(flag: &str, path: &Path, problems: &mut Problems) -> Option<Vec<u8>> {
    let result = std::fs::metadata(path).and_then(|m| {
        if m.len() > MAX_FILE_BYTES {
            Err(std::io::Error::other(format!("larger than {MAX_FILE_BYTES} bytes")))
        } else {
            std::fs::read(path)
        }
    });
    problems.check_value(flag, path.display(), result)
}

/// A Go duration flag as a [`Duration`] within `range` (seconds), or the problem recorded.
fn duration_in(
    problems: &mut Problems,
    flag: &str,
    value: GoDuration,
    range: std::ops::RangeInclusive<u64>,
    bounds: &str,
) -> Duration {
    match value.to_std() {
        Some(d) if range.contains(&d.as_secs()) && !d.is_zero() => d,
        _ => {
            problems.push(flag, format_args!("must be between {bounds}"));
            Duration::from_secs(*range.start())
        }
    }
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
        let mut problems = Problems::default();
        if self.issuers.is_empty() {
            problems.push("--issuer", "at least one trusted issuer is required");
        }
        for (i, issuer) in self.issuers.iter().enumerate() {
            if let Err(e) = check_issuer(issuer) {
                problems.push_value("--issuer", format_args!("{issuer:?}"), e);
            }
            if self.issuers[..i].contains(issuer) {
                problems.push_value("--issuer", format_args!("{issuer:?}"), "given twice");
            }
        }
        for (flag, value) in [
            ("--audience", &self.audience),
            ("--registry-service", &self.registry_service),
            ("--token-issuer", &self.token_issuer),
        ] {
            if value.trim().is_empty() {
                problems.push(flag, "required");
            }
        }
        let token_ttl = duration_in(&mut problems, "--token-ttl", self.token_ttl, 1..=3600, "1s and 1h");
        let exchange_ttl =
            duration_in(&mut problems, "--exchange-token-ttl", self.exchange_token_ttl, 60..=86_400, "1m and 24h");
        let request_timeout =
            duration_in(&mut problems, "--request-timeout", self.request_timeout, 1..=600, "1s and 10m");
        let timings = TrustTimings {
            min_refetch_interval: duration_in(
                &mut problems,
                "--jwks-min-refetch-interval",
                self.jwks_min_refetch_interval,
                1..=86_400,
                "1s and 24h",
            ),
            refresh_interval: duration_in(
                &mut problems,
                "--jwks-refresh-interval",
                self.jwks_refresh_interval,
                1..=86_400,
                "1s and 24h",
            ),
            ..TrustTimings::default()
        };
        if self.max_connections == 0 {
            problems.push("--max-connections", "must be at least 1");
        }
        if self.max_connections_per_client == 0 || self.max_connections_per_client > self.max_connections {
            problems.push("--max-connections-per-client", "must be between 1 and --max-connections");
        }
        let limits = ServeLimits {
            max_connections: self.max_connections,
            max_connections_per_client: self.max_connections_per_client,
            request_timeout,
            ..ServeLimits::default()
        };
        // The policy's errors name its file and the field at fault.
        let policy = problems.check("--policy", Policy::load(&self.policy));
        if let Some(policy) = &policy {
            for (path, glob) in policy.issuer_patterns() {
                if !self.issuers.iter().any(|i| glob.matches(i)) {
                    problems.push_value("--policy", self.policy.display(), format_args!("{path}: matches no --issuer"));
                }
            }
        }
        let key = read_file("--signing-key", &self.signing_key, &mut problems).and_then(|pem| {
            let parse = || SigningKey::from_pem(&pem);
            problems.check_value("--signing-key", self.signing_key.display(), parse().and_then(|a| Ok((a, parse()?))))
        });
        let chain = match (&self.cert_chain, &key) {
            (Some(path), Some((k, _))) => read_file("--cert-chain", path, &mut problems)
                .and_then(|pem| problems.check_value("--cert-chain", path.display(), chain_for(k, &pem))),
            _ => Some(Vec::new()),
        };
        let issuer_ca = self.issuer_ca.as_ref().and_then(|p| read_file("--issuer-ca", p, &mut problems));
        let fetcher = problems.check("--issuer-ca", DocumentFetcher::new(issuer_ca.as_deref(), FETCH_TIMEOUT));
        let tls = self.tls(&mut problems);
        let token_review = self.resolve_token_review(&mut problems);
        if self.metrics_auth == "delegated" && self.token_review.is_empty() {
            problems.push("--metrics-auth", "delegated needs a --token-review-kubeconfig (the cluster to ask)");
        }
        let audit_flags = AuditFlags {
            audit_log_path: Some(self.audit.audit_log_path.clone().unwrap_or_else(|| PathBuf::from("-"))),
            ..self.audit.clone()
        };
        let audit = audit_flags.open().map_err(|e| {
            let path = audit_flags.audit_log_path.as_deref().unwrap_or(Path::new("-")).display();
            problems.push_value("--audit-log-path", path, e);
        });
        let (Some(policy), Some((key, exchange_key)), Some(chain), Some(fetcher), Some(tls)) =
            (policy, key, chain, fetcher, tls)
        else {
            return Err(problems.finish().err().unwrap_or_default());
        };
        problems.finish()?;
        let audit = audit.ok().flatten();

        let mut problems = Problems::default();
        let jwks_key = key.public_key().clone().with_key_id(key.public_key().libtrust_key_id());
        let jwks = Jwks::from_keys([&jwks_key])
            .map_err(|e| e.to_string())
            .and_then(|j| serde_json::to_string(&j).map_err(|e| e.to_string()));
        let jwks = problems.check("--signing-key", jwks);
        let ttl = i64::try_from(token_ttl.as_secs()).unwrap_or(300);
        let registry = problems.check(
            "--signing-key",
            RegistryTokenSigner::new(key, &chain, &self.token_issuer, &self.registry_service, ttl),
        );
        let exchange_header = JwsHeader { kid: Some(exchange_key.key_id().to_owned()), ..JwsHeader::default() };
        let exchange_signer = problems.check("--signing-key", JwsSigner::new(exchange_key, &exchange_header));
        let (Some(jwks), Some(registry), Some(exchange_signer)) = (jwks, registry, exchange_signer) else {
            return Err(problems.finish().err().unwrap_or_default());
        };
        let metrics = Arc::new(RegistryAuthMetrics::default());
        let trusts: Vec<Arc<IssuerTrust>> = self
            .issuers
            .iter()
            .map(|i| Arc::new(IssuerTrust::new(i, &self.audience, fetcher.clone(), timings, Arc::clone(&metrics))))
            .collect();
        let parts = ServiceParts {
            trusts: trusts.clone(),
            policy,
            registry,
            exchange_signer,
            node_binding: self.node_binding,
            exchange_ttl_seconds: i64::try_from(exchange_ttl.as_secs()).unwrap_or(3600),
            metrics,
            reviewers: Vec::new(),
            audit,
        };
        Ok(RegistryAuth {
            listen: self.listen,
            tls,
            parts,
            jwks,
            audience: self.audience.clone(),
            token_review,
            metrics_delegated: self.metrics_auth == "delegated",
            trusts,
            limits,
        })
    }

    /// The `(issuer, kubeconfig)` pairs of `--token-review-kubeconfig`, each kubeconfig read
    /// and checked.
    fn resolve_token_review(&self, problems: &mut Problems) -> Vec<(String, PathBuf)> {
        const FLAG: &str = "--token-review-kubeconfig";
        let mut resolved: Vec<(String, PathBuf)> = Vec::new();
        for entry in &self.token_review {
            let path = entry.path.display();
            let issuer = match (&entry.issuer, self.issuers.as_slice()) {
                (Some(i), _) if self.issuers.contains(i) => i.clone(),
                (Some(i), _) => {
                    problems.push_value(FLAG, path, format_args!("issuer {i:?} is not an --issuer"));
                    continue;
                }
                (None, [only]) => only.clone(),
                (None, _) => {
                    problems.push_value(FLAG, path, "name the issuer (ISSUER=PATH) when several are trusted");
                    continue;
                }
            };
            if resolved.iter().any(|(i, _)| *i == issuer) {
                problems.push_value(FLAG, path, format_args!("a second kubeconfig for issuer {issuer:?}"));
                continue;
            }
            if problems.check_value(FLAG, path, check_kubeconfig(&entry.path)).is_none() {
                continue;
            }
            resolved.push((issuer, entry.path.clone()));
        }
        resolved
    }

    /// The TLS acceptor (`Some(None)` = plain HTTP, on loopback only), or `None` after
    /// recording problems.
    fn tls(&self, problems: &mut Problems) -> Option<Option<TlsAcceptor>> {
        match (&self.tls_cert_file, &self.tls_private_key_file) {
            (None, None) => {
                if !self.listen.ip().is_loopback() {
                    problems.push_value(
                        "--listen",
                        self.listen,
                        "without --tls-cert-file/--tls-private-key-file only a loopback address may be used",
                    );
                }
                if self.client_ca_file.is_some() {
                    problems.push("--client-ca-file", "needs --tls-cert-file and --tls-private-key-file");
                }
                Some(None)
            }
            (Some(cert), Some(key)) => {
                let cert = read_file("--tls-cert-file", cert, problems);
                let key = read_file("--tls-private-key-file", key, problems);
                let ca = match &self.client_ca_file {
                    Some(p) => Some(read_file("--client-ca-file", p, problems)?),
                    None => None,
                };
                let (cert, key) = (cert?, key?);
                match podpass_serve::tls_acceptor(&cert, &key, ca.as_deref()) {
                    Ok(acceptor) => Some(Some(acceptor)),
                    Err(e) => {
                        match e {
                            podpass_serve::TlsError::CertChain(m) => problems.push("--tls-cert-file", m),
                            podpass_serve::TlsError::PrivateKey(m) => problems.push("--tls-private-key-file", m),
                            podpass_serve::TlsError::ClientCa(m) => problems.push("--client-ca-file", m),
                            other => problems.push("--tls-cert-file", other),
                        }
                        None
                    }
                }
            }
            _ => {
                problems.push("--tls-cert-file", "--tls-cert-file and --tls-private-key-file must be given together");
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
    metrics_delegated: bool,
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
    reviewers: Vec<Arc<TokenReviewer>>,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound").field("listener", &self.listener).finish_non_exhaustive()
    }
}

impl RegistryAuth {
    /// Builds the TokenReview clients and binds the listen address.
    pub async fn bind(self) -> Result<Bound, RunError> {
        let RegistryAuth { listen, tls, mut parts, jwks, audience, token_review, metrics_delegated, trusts, limits } =
            self;
        for (issuer, path) in &token_review {
            parts.reviewers.push(Arc::new(TokenReviewer::from_kubeconfig(issuer, &audience, path).await?));
        }
        let metrics_reviewer = metrics_delegated.then(|| parts.reviewers.first().cloned()).flatten();
        let reviewers = parts.reviewers.clone();
        let listener = TcpListener::bind(listen).await.map_err(|source| RunError::Bind { addr: listen, source })?;
        let state = Arc::new(AppState { service: Arc::new(TokenService::new(parts)), jwks, metrics_reviewer });
        Ok(Bound { listener, tls, state, trusts, limits, reviewers })
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

    /// Fetches every issuer's keys and follows the revocations of every reviewed issuer in
    /// the background, and serves until `shutdown`.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let Bound { listener, tls, state, trusts, limits, reviewers } = self;
        let followers: Vec<_> = reviewers
            .into_iter()
            .map(|r| podpass_serve::spawn_named("revoked-tokens", r.follow_revocations()))
            .collect();
        let scheme = if tls.is_some() { "https" } else { "http" };
        tracing::info!(address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), scheme, "registry-auth listening");
        let refreshers: Vec<_> =
            trusts.into_iter().map(|t| podpass_serve::spawn_named("issuer-keys", t.refresh_forever())).collect();
        let server = podpass_serve::spawn_named("accept", accept_loop(listener, tls, router(state), limits));
        shutdown.await;
        server.abort();
        for r in refreshers.into_iter().chain(followers) {
            r.abort();
        }
    }
}
