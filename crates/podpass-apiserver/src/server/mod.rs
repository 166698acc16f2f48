//! `podpass apiserver`: configuration, start-up, the HTTPS listener and the routes.
//!
//! Start-up is two steps so that bad configuration never binds a port:
//! [`ApiServerConfig::prepare`] validates flags and loads keys, PKI and the store;
//! [`Prepared::start`] binds, derives what depends on the bound port (issuer default,
//! kubeconfig) and serves.

pub mod audit;
pub mod authz;
mod lookup;
pub mod metrics;
pub(crate) mod rest;
pub mod serve;
pub mod status;
pub mod token_cache;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use podpass_token::documents::{JWKS_PATH, OPENID_CONFIG_PATH};
use podpass_token::{
    Authenticator, Jwks, OidcDiscovery, SigningKey, TokenFeatures, TokenGenerator, VerificationKey, now_unix,
};
use serde_json::json;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub(crate) use self::lookup::StoreLookup;
use self::status::ApiError;
use crate::files::write_atomic;
use crate::pki::ensure_serving_pki;
use crate::store::{EmbeddedStore, Store};
use crate::token_file::{StaticUser, TokenFile};

/// The Kubernetes version podpass's API matches.
pub const KUBE_MINOR: &str = "34";

/// Flags of `podpass apiserver`, named as kube-apiserver's.
#[derive(Debug, Clone)]
pub struct ApiServerConfig {
    /// `--data-dir`: embedded store, generated keys and PKI, kubeconfigs.
    pub data_dir: PathBuf,
    /// `--bind-address`.
    pub bind_address: IpAddr,
    /// `--secure-port` (0 = any free port).
    pub secure_port: u16,
    /// `--tls-cert-file` (chain PEM); generated when absent.
    pub tls_cert_file: Option<PathBuf>,
    /// `--tls-private-key-file`.
    pub tls_private_key_file: Option<PathBuf>,
    /// `--service-account-issuer` (repeatable: the first signs, all are accepted).
    pub issuers: Vec<String>,
    /// `--service-account-signing-key-file`; generated ES256 key in the data dir when absent.
    pub signing_key_file: Option<PathBuf>,
    /// `--service-account-key-file` (repeatable): extra verification keys.
    pub key_files: Vec<PathBuf>,
    /// `--api-audiences`; default: the issuers.
    pub api_audiences: Vec<String>,
    /// `--token-auth-file`; default `<data-dir>/tokens.csv` (created with an admin token).
    pub token_auth_file: Option<PathBuf>,
    /// Token feature gates.
    pub features: TokenFeatures,
    /// `--service-account-extend-token-expiration` (default true).
    pub extend_token_expiration: bool,
    /// `--service-account-max-token-expiration` in seconds (None: no maximum).
    pub max_token_expiration: Option<i64>,
    /// `--audit-log-path`.
    pub audit_log_path: Option<PathBuf>,
    /// `--authorization-mode` (default `Node,RBAC`); `system:masters` is always allowed.
    pub authorization_modes: Vec<authz::Mode>,
    /// Feature gate `ServiceAccountNodeAudienceRestriction` (default on): a node may only
    /// request tokens for audiences its pod names or RBAC allows.
    pub node_audience_restriction: bool,
    /// Feature gate `TokenRequestServiceAccountUIDValidation` (default on): a TokenRequest
    /// whose `metadata.uid` is not the service account's is refused with 409; off, it is
    /// served with a warning and an audit annotation.
    pub token_request_uid_validation: bool,
    /// `--etcd-servers`: etcd endpoints (`http://host:port`); empty = the embedded store.
    pub etcd_servers: Vec<String>,
    /// How long a successful token authentication is remembered (kube-apiserver's
    /// `TokenSuccessCacheTTL`, fixed at 10 s upstream, [`token_cache::DEFAULT_SUCCESS_TTL`]);
    /// zero disables the cache.
    pub token_success_cache_ttl: std::time::Duration,
    /// Connection bounds (handshake and header timeouts, connection cap).
    pub serve_limits: serve::ServeLimits,
}

/// The configuration cannot work; nothing was bound.
#[derive(Debug, Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn cfg_err(context: impl std::fmt::Display) -> impl FnOnce(Box<dyn std::error::Error>) -> ConfigError {
    move |e| ConfigError(format!("{context}: {e}"))
}

/// Validated configuration with everything loaded, not yet listening.
pub struct Prepared {
    config: ApiServerConfig,
    signing_key: SigningKey,
    extra_keys: Vec<VerificationKey>,
    tls: TlsAcceptor,
    ca_pem: String,
    store: Option<Arc<dyn Store>>,
    token_file: TokenFile,
    token_file_path: PathBuf,
    audit: Option<audit::AuditLog>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared").field("config", &self.config).finish_non_exhaustive()
    }
}

fn read_file(path: &Path, flag: &str) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| ConfigError(format!("{flag} {}: {e}", path.display())))
}

/// A random bearer token: 32 bytes, base64url.
pub fn random_token() -> Result<String, ConfigError> {
    let mut b = [0u8; 32];
    SystemRandom::new().fill(&mut b).map_err(|_| ConfigError("random source failed".into()))?;
    Ok(data_encoding::BASE64URL_NOPAD.encode(&b))
}

impl ApiServerConfig {
    /// Validates the flags and loads keys, TLS material, the token file and the store.
    pub fn prepare(self) -> Result<Prepared, ConfigError> {
        if self.tls_cert_file.is_some() != self.tls_private_key_file.is_some() {
            return Err(ConfigError("--tls-cert-file and --tls-private-key-file must be given together".into()));
        }
        if let Some(max) = self.max_token_expiration
            && !(3600..=1i64 << 32).contains(&max)
        {
            return Err(ConfigError(format!(
                "--service-account-max-token-expiration: must be between 1 hour and 2^32 seconds, got {max}s"
            )));
        }
        if self.features.node_binding && !self.features.node_binding_validation {
            return Err(ConfigError(
                "the \"ServiceAccountTokenNodeBinding\" feature gate can only be enabled if the \"ServiceAccountTokenNodeBindingValidation\" feature gate is also enabled".into(),
            ));
        }
        for issuer in &self.issuers {
            if issuer.is_empty() || issuer.contains('#') || issuer.contains('?') {
                return Err(ConfigError(format!(
                    "--service-account-issuer {issuer:?}: must be a URL without query or fragment"
                )));
            }
        }
        create_private_dir(&self.data_dir)?;

        let signing_key = match &self.signing_key_file {
            Some(path) => SigningKey::from_pem(&read_file(path, "--service-account-signing-key-file")?)
                .map_err(|e| ConfigError(format!("--service-account-signing-key-file {}: {e}", path.display())))?,
            None => {
                let path = self.data_dir.join("sa.key");
                if path.exists() {
                    SigningKey::from_pem(&read_file(&path, "service account key")?)
                        .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?
                } else {
                    let key = SigningKey::generate(podpass_token::Algorithm::ES256)
                        .map_err(|e| cfg_err("generating service account key")(Box::new(e)))?;
                    let pem = key.to_pkcs8_pem().map_err(|e| cfg_err("encoding service account key")(Box::new(e)))?;
                    write_atomic(&path, pem.as_bytes(), 0o600, false)
                        .map_err(|e| cfg_err("writing service account key")(Box::new(e)))?;
                    key
                }
            }
        };
        let mut extra_keys = Vec::new();
        for path in &self.key_files {
            let keys = VerificationKey::from_pem(&read_file(path, "--service-account-key-file")?)
                .map_err(|e| ConfigError(format!("--service-account-key-file {}: {e}", path.display())))?;
            extra_keys.extend(keys);
        }

        let (cert_pem, key_pem, ca_pem) = match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(c), Some(k)) => {
                let cert = read_file(c, "--tls-cert-file")?;
                let ca = String::from_utf8_lossy(&cert).into_owned();
                (cert, read_file(k, "--tls-private-key-file")?, ca)
            }
            _ => {
                let pki = ensure_serving_pki(&self.data_dir.join("pki"), &[self.bind_address])
                    .map_err(|e| ConfigError(format!("preparing serving certificates: {e}")))?;
                (pki.cert_chain_pem.into_bytes(), pki.key_pem.into_bytes(), pki.ca_pem)
            }
        };
        let tls = tls_acceptor(&cert_pem, &key_pem)?;

        let token_file_path = self.token_auth_file.clone().unwrap_or_else(|| self.data_dir.join("tokens.csv"));
        if self.token_auth_file.is_none() && !token_file_path.exists() {
            let line = format!(
                "{},admin,{},\"system:masters\"\n",
                random_token()?,
                podpass_token::claims::new_uuid_v4().map_err(|e| ConfigError(e.to_string()))?
            );
            write_atomic(&token_file_path, line.as_bytes(), 0o600, false)
                .map_err(|e| ConfigError(format!("writing {}: {e}", token_file_path.display())))?;
        }
        let token_file = TokenFile::load(&token_file_path).map_err(|e| ConfigError(e.to_string()))?;

        if self.serve_limits.max_connections == 0 {
            return Err(ConfigError("--max-connections: must be at least 1".into()));
        }
        for server in &self.etcd_servers {
            if !(server.starts_with("http://") || server.starts_with("https://")) {
                return Err(ConfigError(format!("--etcd-servers {server:?}: must be an http:// or https:// URL")));
            }
        }
        // etcd is connected to at start (async); the embedded store is opened here.
        let store: Option<Arc<dyn Store>> = if self.etcd_servers.is_empty() {
            Some(Arc::new(
                EmbeddedStore::open(&self.data_dir.join("store.redb")).map_err(|e| ConfigError(e.to_string()))?,
            ))
        } else {
            None
        };
        let audit = match &self.audit_log_path {
            Some(p) => Some(
                audit::AuditLog::open(p).map_err(|e| ConfigError(format!("--audit-log-path {}: {e}", p.display())))?,
            ),
            None => None,
        };
        Ok(Prepared { config: self, signing_key, extra_keys, tls, ca_pem, store, token_file, token_file_path, audit })
    }
}

fn create_private_dir(dir: &Path) -> Result<(), ConfigError> {
    use std::os::unix::fs::DirBuilderExt;
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| ConfigError(format!("--data-dir {}: {e}", dir.display())))?;
    }
    Ok(())
}

pub(crate) fn tls_acceptor(cert_pem: &[u8], key_pem: &[u8]) -> Result<TlsAcceptor, ConfigError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| ConfigError(format!("--tls-cert-file: {e}")))?;
    if certs.is_empty() {
        return Err(ConfigError("--tls-cert-file: no certificates found".into()));
    }
    let key =
        PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| ConfigError(format!("--tls-private-key-file: {e}")))?;
    let mut config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| ConfigError(format!("TLS configuration: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Shared request state.
pub(crate) struct AppState {
    store: Arc<dyn Store>,
    authenticator: Authenticator,
    generator: TokenGenerator,
    features: TokenFeatures,
    api_audiences: Vec<String>,
    extend_expiration: bool,
    max_token_expiration: Option<i64>,
    token_request_uid_validation: bool,
    authorization_modes: Vec<authz::Mode>,
    node_audience_restriction: bool,
    token_file: TokenFile,
    oidc_config: Vec<u8>,
    jwks: Vec<u8>,
    server_url: String,
    ca_pem: String,
    audit: Option<audit::AuditLog>,
    metrics: metrics::Metrics,
    token_cache: token_cache::TokenCache,
    watches: rest::watch::WatchLimiter,
}

impl AppState {
    /// Counts a service-account token use (pkg/serviceaccount metrics).
    pub(crate) fn count_token_use(&self, a: &podpass_token::Authenticated) {
        if a.legacy {
            self.metrics.legacy_tokens.inc();
        }
        match a.freshness {
            podpass_token::Freshness::Valid => {
                self.metrics.valid_tokens.inc();
            }
            podpass_token::Freshness::Stale(_) => {
                self.metrics.stale_tokens.inc();
            }
            podpass_token::Freshness::NotTracked => {}
        }
    }
}

/// A running server.
#[derive(Debug)]
pub struct Running {
    /// Where it listens.
    pub local_addr: SocketAddr,
    /// `https://host:port` clients use.
    pub server_url: String,
    /// The admin kubeconfig written at start.
    pub admin_kubeconfig: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Serves until the task ends (it does not, unless the runtime shuts down).
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// A kubeconfig for `user` with `token`, trusting `ca_pem`.
pub fn kubeconfig(server_url: &str, ca_pem: &str, user: &str, token: &str) -> String {
    let ca = data_encoding::BASE64.encode(ca_pem.as_bytes());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: podpass\n  cluster:\n    server: {server_url}\n    certificate-authority-data: {ca}\nusers:\n- name: {user:?}\n  user:\n    token: {token:?}\ncontexts:\n- name: podpass\n  context:\n    cluster: podpass\n    user: {user:?}\ncurrent-context: podpass\n"
    )
}

impl Prepared {
    /// Binds, writes the admin kubeconfig and serves in the background.
    pub async fn start(self) -> std::io::Result<Running> {
        let store: Arc<dyn Store> = match self.store.clone() {
            Some(store) => store,
            None => Arc::new(
                crate::store::EtcdStore::connect(&self.config.etcd_servers)
                    .await
                    .map_err(|e| std::io::Error::other(format!("connecting to --etcd-servers: {e}")))?,
            ),
        };
        let listener = TcpListener::bind(SocketAddr::new(self.config.bind_address, self.config.secure_port)).await?;
        let local_addr = listener.local_addr()?;
        let host = if local_addr.ip().is_unspecified() { IpAddr::from([127, 0, 0, 1]) } else { local_addr.ip() };
        let server_url = match host {
            IpAddr::V6(v6) => format!("https://[{v6}]:{}", local_addr.port()),
            IpAddr::V4(v4) => format!("https://{v4}:{}", local_addr.port()),
        };
        let issuers =
            if self.config.issuers.is_empty() { vec![server_url.clone()] } else { self.config.issuers.clone() };
        let audiences =
            if self.config.api_audiences.is_empty() { issuers.clone() } else { self.config.api_audiences.clone() };
        let mut keys = vec![self.signing_key.public_key().clone()];
        keys.extend(self.extra_keys.iter().cloned());
        let jwks = serde_json::to_vec(&Jwks::from_keys(&keys).map_err(std::io::Error::other)?)
            .map_err(std::io::Error::other)?;
        // OIDC discovery needs an https issuer; a non-https issuer simply gets no document.
        let oidc_config = OidcDiscovery::new(&issuers[0], &format!("{server_url}{JWKS_PATH}"), &keys)
            .ok()
            .and_then(|d| serde_json::to_vec(&d).ok())
            .unwrap_or_default();

        let admin_kubeconfig = self.config.data_dir.join("admin.kubeconfig");
        if let Some(admin) = admin_token(&self.token_file_path) {
            write_atomic(
                &admin_kubeconfig,
                kubeconfig(&server_url, &self.ca_pem, "admin", &admin).as_bytes(),
                0o600,
                true,
            )
            .map_err(std::io::Error::other)?;
        }
        write_atomic(&self.config.data_dir.join("server-url"), server_url.as_bytes(), 0o644, true)
            .map_err(std::io::Error::other)?;

        let state = Arc::new(AppState {
            store,
            authenticator: Authenticator::new(issuers.clone(), keys, audiences.clone(), self.config.features),
            features: self.config.features,
            api_audiences: audiences,
            extend_expiration: self.config.extend_token_expiration,
            max_token_expiration: self.config.max_token_expiration,
            token_request_uid_validation: self.config.token_request_uid_validation,
            authorization_modes: self.config.authorization_modes.clone(),
            node_audience_restriction: self.config.node_audience_restriction,
            audit: self.audit,
            metrics: metrics::Metrics::default(),
            watches: rest::watch::WatchLimiter::new(MAX_WATCHES_PER_USER),
            token_cache: token_cache::TokenCache::new(self.config.token_success_cache_ttl)
                .map_err(|_| std::io::Error::other("random source failed"))?,
            generator: TokenGenerator::new(issuers[0].clone(), self.signing_key),
            token_file: self.token_file,
            oidc_config,
            jwks,
            server_url: server_url.clone(),
            ca_pem: self.ca_pem.clone(),
        });
        rest::resume_pending_deletions(&state).await.map_err(std::io::Error::other)?;
        rest::lifecycle::resume_terminating_namespaces(&state).await.map_err(std::io::Error::other)?;
        rest::ensure_system_namespaces(&state).await.map_err(|e| std::io::Error::other(e.message))?;
        authz::bootstrap::ensure(&state).await.map_err(|e| std::io::Error::other(e.message))?;
        authz::aggregation::reconcile(state.store.as_ref()).await.map_err(std::io::Error::other)?;
        let app = router(state);
        let task = tokio::spawn(serve::accept_loop(listener, self.tls, app, self.config.serve_limits));
        Ok(Running { local_addr, server_url, admin_kubeconfig, task })
    }
}

/// The token of the first `system:masters` user named `admin` in the token file.
fn admin_token(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let users = crate::token_file::parse(path, &text).ok()?;
    let mut admins: Vec<_> = users
        .into_iter()
        .filter(|(_, u)| u.name == "admin" && u.groups.iter().any(|g| g == "system:masters"))
        .map(|(t, _)| t)
        .collect();
    admins.sort();
    admins.into_iter().next()
}

fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(ok))
        .fallback(api_request)
        .with_state(state)
}

async fn version() -> Response {
    axum::Json(json!({
        "major": "1",
        "minor": KUBE_MINOR,
        "gitVersion": format!("v1.{KUBE_MINOR}.0-podpass.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    }))
    .into_response()
}

async fn ok() -> &'static str {
    "ok"
}

fn json_bytes(body: Vec<u8>, content_type: &'static str) -> Response {
    if body.is_empty() {
        return ApiError::not_found_path().into_response();
    }
    ([(axum::http::header::CONTENT_TYPE, content_type)], body).into_response()
}

/// The authenticated user of a request.
#[derive(Debug, Clone)]
pub struct User {
    /// User name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Groups, `system:authenticated` included.
    pub groups: Vec<String>,
    /// Extra attributes (service-account tokens: pod, node, credential id).
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl From<StaticUser> for User {
    fn from(u: StaticUser) -> Self {
        let mut groups = u.groups;
        groups.push("system:authenticated".into());
        Self { name: u.name, uid: u.uid, groups, extra: Default::default() }
    }
}

/// Authenticates the bearer token: static token file first, then service-account tokens
/// (validated against the store). No token is `system:anonymous`; a bad one is 401.
async fn authenticate(state: &AppState, authorization: Option<String>) -> Result<User, ApiError> {
    let anonymous = || User {
        name: "system:anonymous".into(),
        uid: String::new(),
        groups: vec!["system:unauthenticated".into()],
        extra: Default::default(),
    };
    let Some(header) = authorization else { return Ok(anonymous()) };
    // bearertoken.Authenticator: the scheme is case-insensitive; a header of another scheme
    // carries no bearer token (the request is anonymous); an empty token is refused.
    let header = header.trim();
    if header.is_empty() {
        return Ok(anonymous());
    }
    let mut parts = header.splitn(3, ' ');
    let scheme = parts.next().unwrap_or_default();
    let Some(token) = parts.next().filter(|_| scheme.eq_ignore_ascii_case("bearer")) else {
        return Ok(anonymous());
    };
    if token.is_empty() {
        return Err(ApiError::unauthorized());
    }
    if let Some(user) = state.token_file.lookup(token) {
        return Ok(user.into());
    }
    if let Some(a) = state.token_cache.get(token, None) {
        return Ok(User::from_token(&a));
    }
    let lookup = StoreLookup { store: state.store.as_ref() };
    let now = now_unix();
    match state.authenticator.authenticate(token, None, &lookup, now).await {
        Ok(a) => {
            state.count_token_use(&a);
            Ok(User::from_token(&state.token_cache.insert(token, None, a, now)))
        }
        Err(_) => Err(ApiError::unauthorized()),
    }
}

impl User {
    fn from_token(a: &podpass_token::Authenticated) -> Self {
        let mut groups = a.user.groups.clone();
        groups.push("system:authenticated".into());
        Self { name: a.user.username.clone(), uid: a.user.uid.clone(), groups, extra: a.user.extra.clone() }
    }
}

/// The authorization attributes of a request.
fn attributes(
    user: &User,
    verb: &str,
    path: &str,
    api_path: Option<&rest::resources::ApiPath>,
    query: &std::collections::HashMap<String, String>,
) -> authz::Attributes {
    let mut attrs = authz::Attributes {
        user: user.clone(),
        verb: verb.to_owned(),
        namespace: String::new(),
        api_group: String::new(),
        resource: String::new(),
        subresource: String::new(),
        name: String::new(),
        resource_request: false,
        path: path.to_owned(),
        field_selector: query.get("fieldSelector").cloned().unwrap_or_default(),
    };
    if let Some(p) = api_path {
        attrs.resource_request = true;
        attrs.namespace = p.namespace.clone().unwrap_or_default();
        attrs.api_group = p.group.clone();
        attrs.resource = p.resource.clone();
        attrs.subresource = p.subresource.clone().unwrap_or_default();
        attrs.name = p.name.clone().unwrap_or_default();
        // As upstream: a namespace's own path is a request in that namespace.
        if p.resource == "namespaces" && p.namespace.is_none() && !attrs.name.is_empty() {
            attrs.namespace = attrs.name.clone();
        }
    }
    attrs
}

/// Authorizes through the configured chain; refusals worded as upstream's.
pub(crate) async fn authorize(state: &AppState, attrs: &authz::Attributes) -> Result<(), ApiError> {
    match authz::authorize(state.store.as_ref(), &state.authorization_modes, attrs).await? {
        authz::Decision::Allow(_) => Ok(()),
        authz::Decision::Deny(reason) | authz::Decision::NoOpinion(reason) => Err(authz::forbidden(attrs, &reason)),
    }
}

/// Watches one user may hold open at once (a kubelet needs a handful; controllers tens).
const MAX_WATCHES_PER_USER: usize = 200;

/// Largest request body accepted.
const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Everything but the public endpoints: authenticate, authorize, then discovery or the
/// resource API.
async fn api_request(State(state): State<Arc<AppState>>, req: Request) -> Response {
    // Wall-clock formatting costs on every request; only the audit log needs it.
    let received = state.audit.as_ref().map(|_| audit_time());
    let received_at = std::time::Instant::now();
    let (parts, body) = req.into_parts();
    // A header that is not visible ASCII cannot hold a token: refused, never anonymous.
    let auth = parts.headers.get(AUTHORIZATION).map(|h| h.to_str().unwrap_or("Bearer \u{0}").to_owned());
    // Go's server hands handlers the decoded path; a malformed escape is a bad request.
    let Some(path) = rest::resources::decode_path(parts.uri.path()) else {
        return ApiError::bad_request(format!("invalid URL escape in path {:?}", parts.uri.path())).into_response();
    };
    let api_path = match rest::resources::parse(&path) {
        Some(rest::resources::Target::Resource(p)) => Some(p),
        _ => None,
    };
    let query: std::collections::HashMap<String, String> =
        axum::extract::Query::try_from_uri(&parts.uri).map(|q| q.0).unwrap_or_default();
    let verb = request_verb(&parts.method, api_path.as_ref(), &query);
    let mut audit_user = None;
    let result = async {
        let requester = authenticate(&state, auth).await?;
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let groups: Vec<String> = parts
            .headers
            .get_all("impersonate-group")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect();
        let impersonated = authz::impersonate(
            state.store.as_ref(),
            &state.authorization_modes,
            &requester,
            header("impersonate-user").as_deref(),
            &groups,
            header("impersonate-uid").as_deref(),
        )
        .await?;
        let user = impersonated.unwrap_or(requester);
        audit_user = Some(user.clone());
        authorize(&state, &attributes(&user, &verb, &path, api_path.as_ref(), &query)).await?;
        let body = axum::body::to_bytes(body, MAX_BODY_BYTES).await.map_err(|_| {
            ApiError::new(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                "the request body is too large",
            )
        })?;
        if path == "/api" {
            let address = state.server_url.trim_start_matches("https://").to_owned();
            return Ok(axum::Json(json!({
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
            }))
            .into_response());
        }
        if path == "/apis" {
            return Ok(rest::group_list());
        }
        // Served after authorization, as upstream: RBAC's
        // system:service-account-issuer-discovery grants them.
        if path == OPENID_CONFIG_PATH && parts.method == axum::http::Method::GET {
            return Ok(json_bytes(state.oidc_config.clone(), "application/json"));
        }
        if path == JWKS_PATH && parts.method == axum::http::Method::GET {
            return Ok(json_bytes(state.jwks.clone(), "application/jwk-set+json"));
        }
        if path == "/openapi/v3" {
            return Ok(axum::Json(rest::openapi::root()).into_response());
        }
        if let Some(gv) = path.strip_prefix("/openapi/v3/") {
            return rest::openapi::group_version(gv)
                .map(|d| axum::Json(d).into_response())
                .ok_or_else(ApiError::not_found_path);
        }
        if path == "/metrics" {
            return Ok(([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.encode())
                .into_response());
        }
        match rest::resources::parse(&path) {
            Some(rest::resources::Target::Group(g)) => rest::group(&g),
            Some(rest::resources::Target::GroupVersion { group, version }) => rest::resource_list(&group, &version),
            Some(rest::resources::Target::Resource(api_path)) => {
                let content_type =
                    parts.headers.get(axum::http::header::CONTENT_TYPE).and_then(|c| c.to_str().ok()).unwrap_or("");
                rest::handle(
                    &state,
                    rest::ResourceRequest {
                        method: parts.method.clone(),
                        path: api_path,
                        query: query.clone(),
                        content_type,
                        body: &body,
                        user: &user,
                    },
                )
                .await
            }
            None => Err(ApiError::not_found_path()),
        }
    }
    .await;
    let response = result.unwrap_or_else(IntoResponse::into_response);
    let elapsed = received_at.elapsed().as_secs_f64();
    state.metrics.observe_request(&verb, api_path.as_ref(), response.status().as_u16(), elapsed);
    if let Some(log) = &state.audit {
        let user = audit_user.map_or(json!({}), |u| {
            let mut v = json!({"username": u.name, "groups": u.groups});
            if !u.uid.is_empty() {
                v["uid"] = json!(u.uid);
            }
            if !u.extra.is_empty() {
                v["extra"] = json!(u.extra);
            }
            v
        });
        let mut event = json!({
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": "Metadata",
            "auditID": podpass_token::claims::new_uuid_v4().unwrap_or_default(),
            "stage": "ResponseComplete",
            "requestURI": parts.uri.to_string(),
            "verb": verb,
            "user": user,
            "userAgent": parts.headers.get(axum::http::header::USER_AGENT).and_then(|h| h.to_str().ok()).unwrap_or(""),
            "responseStatus": {"metadata": {}, "code": response.status().as_u16()},
            "requestReceivedTimestamp": received,
            "stageTimestamp": audit_time(),
        });
        if let Some(p) = &api_path {
            let mut object_ref = json!({"resource": p.resource, "apiVersion": p.version});
            if !p.group.is_empty() {
                object_ref["apiGroup"] = json!(p.group);
            }
            for (k, v) in [("namespace", &p.namespace), ("name", &p.name), ("subresource", &p.subresource)] {
                if let Some(v) = v {
                    object_ref[k] = json!(v);
                }
            }
            event["objectRef"] = object_ref;
        }
        if let Some(annotations) = response.extensions().get::<audit::Annotations>()
            && !annotations.0.is_empty()
        {
            event["annotations"] = json!(annotations.0);
        }
        log.record(&event);
    }
    response
}

/// The Kubernetes verb of a request (`list`/`watch` for collection GETs).
fn request_verb(
    method: &axum::http::Method,
    path: Option<&rest::resources::ApiPath>,
    query: &std::collections::HashMap<String, String>,
) -> String {
    use axum::http::Method;
    let Some(p) = path else { return method.as_str().to_lowercase() };
    match *method {
        Method::GET if p.name.is_none() && query.get("watch").is_some_and(|w| w == "true" || w == "1") => "watch",
        Method::GET if p.name.is_none() => "list",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => return method.as_str().to_lowercase(),
    }
    .to_owned()
}

/// Audit timestamps: RFC 3339 with microseconds, as upstream writes them.
fn audit_time() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let base = crate::time::format_rfc3339(secs);
    format!("{}.{:06}Z", base.trim_end_matches('Z'), now.subsec_micros())
}
