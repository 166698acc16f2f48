//! Configuration: the flags of `podpass apiserver` (named as kube-apiserver's) and
//! [`ApiServerConfig::prepare`], which validates them and loads keys, PKI, the token file and
//! the store before anything is bound.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use podpass_token::{SigningKey, TokenFeatures, VerificationKey};
use thiserror::Error;
use tokio_rustls::TlsAcceptor;

use super::{audit, authz, serve};
use crate::files::write_atomic;
use crate::pki::ensure_serving_pki;
use crate::store::{EmbeddedStore, Store};
use crate::token_file::TokenFile;

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
    /// `--watch-cache` (default true, as upstream): with etcd, serve reads and watches from
    /// memory kept current by an etcd watch; false: every read is an etcd round trip.
    pub watch_cache: bool,
    /// How long a successful token authentication is remembered (kube-apiserver's
    /// `TokenSuccessCacheTTL`, fixed at 10 s upstream, [`token_cache::DEFAULT_SUCCESS_TTL`]);
    /// zero disables the cache.
    pub token_success_cache_ttl: std::time::Duration,
    /// Connection bounds (handshake and header timeouts, connection cap).
    pub serve_limits: serve::ServeLimits,
    /// `--min-request-timeout`: a watch without `timeoutSeconds` ends after a random time
    /// between this and twice this (kube-apiserver default 1800 s), so clients re-list and
    /// no connection lives for ever.
    pub min_request_timeout: std::time::Duration,
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
    pub(super) config: ApiServerConfig,
    pub(super) signing_key: SigningKey,
    pub(super) extra_keys: Vec<VerificationKey>,
    pub(super) tls: TlsAcceptor,
    pub(super) ca_pem: String,
    pub(super) store: Option<Arc<dyn Store>>,
    pub(super) token_file: TokenFile,
    pub(super) token_file_path: PathBuf,
    pub(super) audit: Option<audit::AuditLog>,
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
        let per_client = self.serve_limits.max_connections_per_client;
        if per_client == 0 || per_client > self.serve_limits.max_connections {
            return Err(ConfigError("--max-connections-per-client: must be between 1 and --max-connections".into()));
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

/// The data dir, 0700 when created here (a looser existing one is warned about); tmp files
/// of writers killed mid-write are removed.
fn create_private_dir(dir: &Path) -> Result<(), ConfigError> {
    let warning = podpass_serve::durable::private_dir(dir)
        .map_err(|e| ConfigError(format!("--data-dir {}: {e}", dir.display())))?;
    if let Some(w) = warning {
        tracing::warn!("--data-dir {w}");
    }
    for d in [dir.to_path_buf(), dir.join("pki")] {
        podpass_serve::durable::remove_stale_tmp(&d);
    }
    Ok(())
}

/// The serving TLS configuration; errors name the flag at fault.
pub(crate) fn tls_acceptor(cert_pem: &[u8], key_pem: &[u8]) -> Result<TlsAcceptor, ConfigError> {
    podpass_serve::tls_acceptor(cert_pem, key_pem, None).map_err(|e| {
        ConfigError(match e {
            podpass_serve::TlsError::CertChain(m) => format!("--tls-cert-file: {m}"),
            podpass_serve::TlsError::PrivateKey(m) => format!("--tls-private-key-file: {m}"),
            other => other.to_string(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path) -> ApiServerConfig {
        ApiServerConfig {
            data_dir: dir.to_owned(),
            bind_address: [127, 0, 0, 1].into(),
            secure_port: 0,
            tls_cert_file: None,
            tls_private_key_file: None,
            issuers: vec![],
            signing_key_file: None,
            key_files: vec![],
            api_audiences: vec![],
            token_auth_file: None,
            features: TokenFeatures::default(),
            extend_token_expiration: true,
            max_token_expiration: None,
            audit_log_path: None,
            authorization_modes: vec![authz::Mode::Rbac],
            node_audience_restriction: true,
            token_request_uid_validation: true,
            etcd_servers: vec![],
            watch_cache: true,
            token_success_cache_ttl: std::time::Duration::ZERO,
            serve_limits: serve::ServeLimits::default(),
            min_request_timeout: std::time::Duration::from_secs(1800),
        }
    }

    fn refused(c: ApiServerConfig) -> String {
        match c.prepare() {
            Ok(_) => panic!("prepared"),
            Err(e) => e.0,
        }
    }

    #[test]
    fn bad_flags_are_refused_before_anything_is_bound() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let d = dir.path();
        assert!(refused(ApiServerConfig { tls_cert_file: Some(d.join("c")), ..config(d) }).contains("given together"));
        assert!(refused(ApiServerConfig { max_token_expiration: Some(60), ..config(d) }).contains("between 1 hour"));
        assert!(refused(ApiServerConfig { issuers: vec!["https://x#y".into()], ..config(d) }).contains("fragment"));
        let no_connections = serve::ServeLimits { max_connections: 0, ..Default::default() };
        assert!(refused(ApiServerConfig { serve_limits: no_connections, ..config(d) }).contains("--max-connections"));
        assert!(
            refused(ApiServerConfig { etcd_servers: vec!["127.0.0.1:2379".into()], ..config(d) }).contains("http://")
        );
        let gates = TokenFeatures { node_binding: true, node_binding_validation: false, ..TokenFeatures::default() };
        assert!(refused(ApiServerConfig { features: gates, ..config(d) }).contains("ServiceAccountTokenNodeBinding"));
        // and a good one prepares: keys, PKI and the admin token are created
        assert!(config(d).prepare().is_ok());
        assert!(d.join("sa.key").exists() && d.join("tokens.csv").exists() && d.join("pki").exists());
    }
}
