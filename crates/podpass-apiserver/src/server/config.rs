//! Configuration: the flags of `podpass apiserver` (named as kube-apiserver's, declared once
//! here) and [`ApiServerConfig::prepare`], which checks them all and loads keys, PKI, the
//! token file and the store before anything is bound, reporting every problem at once.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use podpass_api::{Feature, FeatureGates, GoDuration};
use podpass_serve::{AuditFlags, ConfigErrors, Problems, ServeLimits};
use podpass_token::{SigningKey, TokenFeatures, VerificationKey};
use thiserror::Error;
use tokio_rustls::TlsAcceptor;

use super::authz::AuthorizationModes;
use super::{audit, token_cache};
use crate::files::write_atomic;
use crate::pki::ensure_serving_pki;
use crate::store::{EmbeddedObjectStore, Store};
use crate::token_file::TokenFile;

/// Flags of `podpass apiserver`, named as kube-apiserver's: declared once here, parsed by
/// the CLI (clap) or [`podpass_serve::parse_flags`], checked whole by
/// [`ApiServerConfig::prepare`].
#[derive(Debug, Clone, clap::Args)]
pub struct ApiServerConfig {
    /// Embedded store, generated keys and certificates, kubeconfigs.
    #[arg(long, default_value = "./podpass-data")]
    pub data_dir: PathBuf,
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind_address: IpAddr,
    /// Port to serve HTTPS on (0: any free port).
    #[arg(long, default_value_t = 6443)]
    pub secure_port: u16,
    /// Serving certificate chain (PEM); generated in the data dir when absent.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// Serving private key (PEM).
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// A PEM CA bundle the nodes' serving certificates are verified against (each for the
    /// address it is reached at), as kube-apiserver's; without it they are not verified, as
    /// upstream's default.
    #[arg(long)]
    pub kubelet_certificate_authority: Option<PathBuf>,
    /// Service addresses (IPv4 CIDR); its first address is the `kubernetes` Service's,
    /// which every pod reaches the API server at and the serving certificate names.
    #[arg(long, default_value = "10.96.0.0/12")]
    pub service_cluster_ip_range: String,
    /// Token issuer; repeatable (the first signs, all are accepted). Default:
    /// https://<bind>:<port>.
    #[arg(long = "service-account-issuer")]
    pub issuers: Vec<String>,
    /// Private key that signs service-account tokens; default: a generated ES256 key in the
    /// data dir.
    #[arg(long = "service-account-signing-key-file")]
    pub signing_key_file: Option<PathBuf>,
    /// Extra verification keys (rotation); repeatable.
    #[arg(long = "service-account-key-file")]
    pub key_files: Vec<PathBuf>,
    /// API audiences, comma-separated; default: the issuers.
    #[arg(long, value_delimiter = ',')]
    pub api_audiences: Vec<String>,
    /// Static token CSV (`token,user,uid,"groups"`); default <data-dir>/tokens.csv (created
    /// with an admin token).
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
    /// Authenticate bootstrap tokens (`<id>.<secret>`, Secrets `kube-system/bootstrap-token-<id>`)
    /// as `system:bootstrap:<id>` in `system:bootstrappers`, as a joining node uses them.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub enable_bootstrap_token_auth: bool,
    /// CA bundle (PEM) for client certificates, as kube-apiserver's: a certificate that
    /// chains to it authenticates as its subject's CN, in its Os as groups (a joining
    /// node's `system:node:<name>` in `system:nodes`); one that does not is refused at the
    /// handshake.
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// Feature gates, e.g. `ServiceAccountTokenJTI=false`.
    #[arg(long, default_value = "")]
    pub feature_gates: FeatureGates,
    /// Longest token lifetime a TokenRequest gets (Go duration, e.g. `48h`, between 1h and
    /// 2^32 s; 0: no maximum); longer requests are shortened.
    #[arg(long = "service-account-max-token-expiration")]
    pub max_token_expiration: Option<GoDuration>,
    /// The audit log: one audit.k8s.io/v1 event per request (Metadata level).
    #[command(flatten)]
    pub audit: AuditFlags,
    /// Issue the automounted 3607 s token with a one-year expiry and `warnafter` (upstream
    /// default).
    #[arg(long = "service-account-extend-token-expiration", default_value_t = true, action = clap::ArgAction::Set)]
    pub extend_token_expiration: bool,
    /// Authorizers in order (`Node`, `RBAC`, `AlwaysAllow`, `AlwaysDeny`); `system:masters`
    /// is always allowed.
    #[arg(long = "authorization-mode", default_value = "Node,RBAC")]
    pub authorization_modes: AuthorizationModes,
    /// etcd endpoints, comma-separated (`http://127.0.0.1:2379`); default: the embedded store
    /// in the data dir. Replicas sharing one etcd need the same signing and verification keys.
    #[arg(long, value_delimiter = ',')]
    pub etcd_servers: Vec<String>,
    /// With etcd: serve reads and watches from memory kept current by an etcd watch
    /// (consistent reads wait for it to reach etcd's revision); false: every read goes to
    /// etcd.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub watch_cache: bool,
    /// Connections served at once; more wait in the listen backlog. Keep it below the open
    /// file limit (`ulimit -n`).
    #[arg(long, default_value_t = 1000)]
    pub max_connections: usize,
    /// Connections one client address may hold at once; its further connections are
    /// closed (default: --max-connections, i.e. no share, as kube-apiserver behind a load
    /// balancer).
    #[arg(long)]
    pub max_connections_per_client: Option<usize>,
    /// Longest a request (body upload included) may take before it is answered 504 (Go
    /// duration); watches are not cut by it.
    #[arg(long, default_value = "1m")]
    pub request_timeout: GoDuration,
    /// How long an Event is kept after its last write (Go duration), as kube-apiserver's
    /// --event-ttl.
    #[arg(long, default_value = "1h")]
    pub event_ttl: GoDuration,
    /// Seconds: a watch that names no timeoutSeconds ends after a random time between this
    /// and twice this, as kube-apiserver's --min-request-timeout.
    #[arg(long, default_value_t = 1800)]
    pub min_request_timeout: u64,
    /// An `AdmissionConfiguration` file, as kube-apiserver's: its `PodSecurity` plugin's
    /// `PodSecurityConfiguration` (defaults and exemptions) configures Pod Security
    /// admission. Without one, every namespace without labels is privileged (upstream's
    /// default).
    #[arg(long)]
    pub admission_control_config_file: Option<PathBuf>,
    /// How long a successful token authentication is remembered (kube-apiserver's
    /// `TokenSuccessCacheTTL`, fixed at 10 s upstream, so not a flag); zero disables the
    /// cache.
    #[arg(skip = token_cache::DEFAULT_SUCCESS_TTL)]
    pub token_success_cache_ttl: Duration,
}

/// What [`ApiServerConfig::prepare`] derived from the flags.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) features: TokenFeatures,
    pub(super) node_audience_restriction: bool,
    pub(super) token_request_uid_validation: bool,
    pub(super) max_token_expiration: Option<i64>,
    pub(super) serve_limits: ServeLimits,
    pub(super) min_request_timeout: Duration,
    pub(super) event_ttl: Duration,
    pub(super) pod_security: crate::server::rest::admission::pod_security::PodSecurityConfig,
    /// `--service-cluster-ip-range`: Services' cluster IPs, the first the `kubernetes`
    /// Service's.
    pub(super) service_ips: super::service_ips::ServiceIpRange,
}

/// The server could not start after its configuration was accepted.
#[derive(Debug, Error)]
pub enum StartError {
    /// `--etcd-servers` could not be reached.
    #[error("connecting to --etcd-servers: {0}")]
    Etcd(#[source] crate::store::StoreError),
    /// The address could not be bound.
    #[error("listening on {addr}: {source}")]
    Bind {
        /// `--bind-address`:`--secure-port`.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A file the server writes at start (admin kubeconfig, server URL) could not be.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::files::WriteError,
    },
    /// The serving documents (JWKS, OIDC discovery) could not be built.
    #[error("building the key documents: {0}")]
    Documents(String),
    /// A start-up reconciler (pending deletions, system namespaces, bootstrap RBAC,
    /// aggregation, informers) failed.
    #[error("start-up {step}: {message}")]
    Reconcile {
        /// Which.
        step: &'static str,
        /// Why.
        message: String,
    },
}

/// Validated configuration with everything loaded, not yet listening.
pub struct Prepared {
    pub(super) config: ApiServerConfig,
    pub(super) settings: Settings,
    pub(super) signing_key: SigningKey,
    pub(super) extra_keys: Vec<VerificationKey>,
    pub(super) tls: TlsAcceptor,
    pub(super) ca_pem: String,
    pub(super) store: Option<Arc<dyn Store>>,
    pub(super) token_file: TokenFile,
    pub(super) token_file_path: PathBuf,
    pub(super) audit: Option<audit::AuditLog>,
    /// The client certificate and key shown to nodes (pods/log), when the data dir's CA
    /// issued one.
    pub(super) kubelet_client: Option<(String, String)>,
    /// `--kubelet-certificate-authority`'s certificates, read and checked.
    pub(super) kubelet_ca: Option<Vec<reqwest::Certificate>>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared").field("config", &self.config).finish_non_exhaustive()
    }
}

/// A file a flag names, or `None` with the problem recorded against the flag.
fn read_file(problems: &mut Problems, flag: &str, path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).map_err(|e| problems.push_value(flag, path.display(), e)).ok()
}

/// The random source failed (the kernel's; nothing a flag can fix).
#[derive(Debug, Error)]
#[error("random source failed")]
pub struct RandomError;

/// A random bearer token: 32 bytes, base64url.
pub fn random_token() -> Result<String, RandomError> {
    let mut b = [0u8; 32];
    SystemRandom::new().fill(&mut b).map_err(|_| RandomError)?;
    Ok(data_encoding::BASE64URL_NOPAD.encode(&b))
}

impl ApiServerConfig {
    /// Checks every flag and loads keys, TLS material, the token file and the store; every
    /// problem is reported at once, and nothing is bound.
    pub fn prepare(self) -> Result<Prepared, ConfigErrors> {
        let mut problems = Problems::default();
        let settings = self.settings(&mut problems);
        for issuer in &self.issuers {
            if issuer.is_empty() || issuer.contains('#') || issuer.contains('?') {
                problems.push_value(
                    "--service-account-issuer",
                    format_args!("{issuer:?}"),
                    "must be a URL without query or fragment",
                );
            }
        }
        for server in &self.etcd_servers {
            if !(server.starts_with("http://") || server.starts_with("https://")) {
                problems.push_value("--etcd-servers", format_args!("{server:?}"), "must be an http:// or https:// URL");
            }
        }
        // The files the flags name are read even when a flag is wrong, so that every
        // unreadable one is reported in this one run.
        let data_dir_ok =
            problems.check_value("--data-dir", self.data_dir.display(), create_private_dir(&self.data_dir)).is_some();
        let signing_key = self.signing_key(&mut problems, data_dir_ok);
        let mut extra_keys = Vec::new();
        for path in &self.key_files {
            let flag = "--service-account-key-file";
            if let Some(pem) = read_file(&mut problems, flag, path)
                && let Some(keys) = problems.check_value(flag, path.display(), VerificationKey::from_pem(&pem))
            {
                extra_keys.extend(keys);
            }
        }
        let serving = self.serving_tls(&mut problems, data_dir_ok, settings.service_ips.first());
        let token_file_path = self.token_auth_file.clone().unwrap_or_else(|| self.data_dir.join("tokens.csv"));
        let token_file = self.token_file(&mut problems, &token_file_path, data_dir_ok);
        let audit =
            self.audit.audit_log_path.as_ref().and_then(|p| {
                problems.check_value("--audit-log-path", p.display(), audit::AuditLog::open(&self.audit))
            });
        // etcd is connected to by `bind` (async); the embedded store is opened here, last,
        // so a configuration that fails elsewhere never creates it.
        let store: Option<Arc<dyn Store>> = if self.etcd_servers.is_empty() && problems.is_empty() {
            problems
                .check("--data-dir", EmbeddedObjectStore::open(&self.data_dir.join("store.redb")))
                .map(|s| Arc::new(s) as Arc<dyn Store>)
        } else {
            None
        };
        let kubelet_ca = self.kubelet_certificate_authority.as_ref().and_then(|path| {
            let flag = "--kubelet-certificate-authority";
            let pem = read_file(&mut problems, flag, path)?;
            match reqwest::Certificate::from_pem_bundle(&pem) {
                Ok(certs) if !certs.is_empty() => Some(certs),
                Ok(_) => {
                    problems.push_value(flag, path.display(), "holds no PEM certificate");
                    None
                }
                Err(e) => {
                    problems.push_value(flag, path.display(), e);
                    None
                }
            }
        });
        let (Some(signing_key), Some((tls, ca_pem)), Some(token_file)) = (signing_key, serving, token_file) else {
            // Each part that is missing recorded why (here only as a backstop).
            if problems.is_empty() {
                problems.push("--data-dir", "the server's keys and files could not be prepared");
            }
            return Err(problems.finish().err().unwrap_or_default());
        };
        problems.finish()?;
        // Nodes trust the data dir's CA: a client certificate from it lets the server read
        // container logs from them. Custom serving certificates leave it out.
        let kubelet_client = (self.tls_cert_file.is_none())
            .then(|| crate::pki::issue_kubelet_client(&self.data_dir.join("pki")))
            .and_then(|r| r.map_err(|e| tracing::warn!(error = %e, "no kubelet client certificate")).ok());
        Ok(Prepared {
            kubelet_client,
            kubelet_ca,
            config: self,
            settings,
            signing_key,
            extra_keys,
            tls,
            ca_pem,
            store,
            token_file,
            token_file_path,
            audit,
        })
    }

    /// The settings the flags derive, with each bad flag recorded.
    fn settings(&self, problems: &mut Problems) -> Settings {
        let gates = &self.feature_gates;
        let features = TokenFeatures {
            jti: gates.enabled(Feature::ServiceAccountTokenJTI),
            pod_node_info: gates.enabled(Feature::ServiceAccountTokenPodNodeInfo),
            node_binding: gates.enabled(Feature::ServiceAccountTokenNodeBinding),
            node_binding_validation: gates.enabled(Feature::ServiceAccountTokenNodeBindingValidation),
        };
        if features.node_binding && !features.node_binding_validation {
            problems.push(
                "--feature-gates",
                "the \"ServiceAccountTokenNodeBinding\" feature gate can only be enabled if the \"ServiceAccountTokenNodeBindingValidation\" feature gate is also enabled",
            );
        }
        if self.tls_cert_file.is_some() != self.tls_private_key_file.is_some() {
            problems.push("--tls-cert-file", "--tls-cert-file and --tls-private-key-file must be given together");
        }
        let max_token_expiration = self.max_token_expiration.map(|d| d.0 / 1_000_000_000).filter(|s| *s != 0);
        if let Some(max) = max_token_expiration
            && !(3600..=1i64 << 32).contains(&max)
        {
            problems.push(
                "--service-account-max-token-expiration",
                format_args!("must be between 1 hour and 2^32 seconds, got {max}s"),
            );
        }
        if self.max_connections == 0 {
            problems.push("--max-connections", "must be at least 1");
        }
        let per_client = self.max_connections_per_client.unwrap_or(self.max_connections);
        if per_client == 0 || per_client > self.max_connections {
            problems.push("--max-connections-per-client", "must be between 1 and --max-connections");
        }
        let request_timeout = match self.request_timeout.to_std().filter(|d| !d.is_zero()) {
            Some(d) => d,
            None => {
                problems.push("--request-timeout", format_args!("{}: must be positive", self.request_timeout));
                Duration::from_secs(60)
            }
        };
        let event_ttl = match self.event_ttl.to_std().filter(|d| !d.is_zero()) {
            Some(d) => d,
            None => {
                problems.push("--event-ttl", format_args!("{}: must be positive", self.event_ttl));
                super::event_ttl::DEFAULT_EVENT_TTL
            }
        };
        if self.min_request_timeout == 0 {
            problems.push("--min-request-timeout", "must be at least 1 second");
        }
        if self.authorization_modes.0.is_empty() {
            problems.push("--authorization-mode", "at least one authorizer is required");
        }
        let pod_security = match &self.admission_control_config_file {
            None => Default::default(),
            Some(path) => {
                crate::server::rest::admission::pod_security::read_admission_config(path).unwrap_or_else(|errors| {
                    for e in errors {
                        problems.push_value("--admission-control-config-file", path.display(), e);
                    }
                    Default::default()
                })
            }
        };
        let service_ips = problems
            .check(
                "--service-cluster-ip-range",
                super::service_ips::ServiceIpRange::parse(&self.service_cluster_ip_range),
            )
            .unwrap_or(super::service_ips::DEFAULT_RANGE);
        Settings {
            service_ips,
            features,
            node_audience_restriction: gates.enabled(Feature::ServiceAccountNodeAudienceRestriction),
            token_request_uid_validation: gates.enabled(Feature::TokenRequestServiceAccountUIDValidation),
            max_token_expiration,
            serve_limits: ServeLimits {
                max_connections: self.max_connections,
                max_connections_per_client: per_client,
                request_timeout,
                ..ServeLimits::default()
            },
            min_request_timeout: Duration::from_secs(self.min_request_timeout),
            event_ttl,
            pod_security,
        }
    }

    /// `--service-account-signing-key-file`, or the data dir's generated key.
    fn signing_key(&self, problems: &mut Problems, data_dir_ok: bool) -> Option<SigningKey> {
        let flag = "--service-account-signing-key-file";
        if let Some(path) = &self.signing_key_file {
            let pem = read_file(problems, flag, path)?;
            return problems.check_value(flag, path.display(), SigningKey::from_pem(&pem));
        }
        if !data_dir_ok {
            return None;
        }
        let path = self.data_dir.join("sa.key");
        if path.exists() {
            let pem = read_file(problems, "--data-dir", &path)?;
            return problems.check_value("--data-dir", path.display(), SigningKey::from_pem(&pem));
        }
        let generated = SigningKey::generate(podpass_token::Algorithm::ES256)
            .map_err(|e| format!("generating the service-account key: {e}"))
            .and_then(|key| {
                let pem = key.to_pkcs8_pem().map_err(|e| format!("encoding the service-account key: {e}"))?;
                write_atomic(&path, pem.as_bytes(), 0o600, false).map_err(|e| e.to_string())?;
                Ok(key)
            });
        problems.check_value("--data-dir", path.display(), generated)
    }

    /// The serving TLS acceptor and the CA PEM clients trust: the flags' files, or the data
    /// dir's generated PKI.
    fn serving_tls(
        &self,
        problems: &mut Problems,
        data_dir_ok: bool,
        service_ip: std::net::Ipv4Addr,
    ) -> Option<(TlsAcceptor, String)> {
        let (cert_pem, key_pem, ca_pem) = match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(c), Some(k)) => {
                let cert = read_file(problems, "--tls-cert-file", c);
                let key = read_file(problems, "--tls-private-key-file", k);
                let (cert, key) = (cert?, key?);
                let ca = String::from_utf8_lossy(&cert).into_owned();
                (cert, key, ca)
            }
            (None, None) if data_dir_ok => {
                let pki = problems.check(
                    "--data-dir",
                    ensure_serving_pki(
                        &self.data_dir.join("pki"),
                        &[self.bind_address, service_ip.into()],
                        &super::kubernetes_service::SERVICE_DNS_NAMES,
                    )
                    .map_err(|e| format!("preparing serving certificates: {e}")),
                )?;
                (pki.cert_chain_pem.into_bytes(), pki.key_pem.into_bytes(), pki.ca_pem)
            }
            _ => return None,
        };
        let client_ca = match &self.client_ca_file {
            Some(path) => Some(read_file(problems, "--client-ca-file", path)?),
            None => None,
        };
        match podpass_serve::tls_acceptor(&cert_pem, &key_pem, client_ca.as_deref()) {
            Ok(tls) => Some((tls, ca_pem)),
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

    /// `--token-auth-file`, or the data dir's (created with an admin token).
    fn token_file(&self, problems: &mut Problems, path: &Path, data_dir_ok: bool) -> Option<TokenFile> {
        let flag = if self.token_auth_file.is_some() { "--token-auth-file" } else { "--data-dir" };
        if self.token_auth_file.is_none() {
            if !data_dir_ok {
                return None;
            }
            if !path.exists() {
                let created = random_token()
                    .map_err(|e| e.to_string())
                    .and_then(|token| {
                        let uid = podpass_token::claims::new_uuid_v4().map_err(|e| e.to_string())?;
                        Ok(format!("{token},admin,{uid},\"system:masters\"\n"))
                    })
                    .and_then(|line| {
                        write_atomic(path, line.as_bytes(), 0o600, false)
                            .map_err(|e| format!("{}: {e}", path.display()))
                    });
                problems.check(flag, created)?;
            }
        }
        problems.check(flag, TokenFile::load(path))
    }
}

/// The data dir, 0700 when created here (a looser existing one is warned about); tmp files
/// of writers killed mid-write are removed.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let warning = podpass_serve::durable::private_dir(dir)?;
    if let Some(w) = warning {
        tracing::warn!("--data-dir {w}");
    }
    for d in [dir.to_path_buf(), dir.join("pki")] {
        podpass_serve::durable::remove_stale_tmp(&d);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn config(dir: &Path, flags: &[&str]) -> ApiServerConfig {
        let mut args = vec!["--data-dir", dir.to_str().unwrap(), "--secure-port", "0"];
        args.extend(flags);
        podpass_serve::parse_flags(args).unwrap()
    }

    fn refused(c: ApiServerConfig) -> ConfigErrors {
        match c.prepare() {
            Ok(_) => panic!("prepared"),
            Err(e) => e,
        }
    }

    #[test]
    fn every_bad_flag_is_reported_at_once_before_anything_is_bound() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let e = refused(config(
            d,
            &[
                "--tls-cert-file=c",
                "--service-account-max-token-expiration=1m",
                "--service-account-issuer=https://x#y",
                "--max-connections=0",
                "--etcd-servers=127.0.0.1:2379",
                "--feature-gates=ServiceAccountTokenNodeBinding=true,ServiceAccountTokenNodeBindingValidation=false",
            ],
        ));
        for flag in [
            "--tls-cert-file",
            "--service-account-max-token-expiration",
            "--service-account-issuer",
            "--max-connections",
            "--max-connections-per-client",
            "--etcd-servers",
            "--feature-gates",
        ] {
            assert!(e.names(flag), "{flag} missing from:\n{e}");
        }
        assert!(e.to_string().contains("given together") && e.to_string().contains("between 1 hour"), "{e}");
        // Nothing was created for a configuration that cannot work: no store.
        assert!(!d.join("store.redb").exists());
        // ... and a good one prepares: keys, PKI and the admin token are created.
        assert!(config(d, &[]).prepare().is_ok());
        assert!(d.join("sa.key").exists() && d.join("tokens.csv").exists() && d.join("pki").exists());
    }

    #[test]
    fn three_unreadable_files_are_named_in_one_run() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let e = refused(config(
            d,
            &[
                "--service-account-signing-key-file=/nonexistent/sa.key",
                "--service-account-key-file=/nonexistent/old.pub",
                "--token-auth-file=/nonexistent/tokens.csv",
            ],
        ));
        assert_eq!(e.0.len(), 3, "{e}");
        for path in ["/nonexistent/sa.key", "/nonexistent/old.pub", "/nonexistent/tokens.csv"] {
            assert!(e.to_string().contains(path), "{path} missing from:\n{e}");
        }
    }

    #[test]
    fn max_token_expiration_zero_means_no_maximum() {
        let dir = tempfile::tempdir().unwrap();
        let p = config(dir.path(), &["--service-account-max-token-expiration=0s"]).prepare().unwrap();
        assert_eq!(p.settings.max_token_expiration, None);
        drop(p); // the store is open until then
        let p = config(dir.path(), &["--service-account-max-token-expiration=48h"]).prepare().unwrap();
        assert_eq!(p.settings.max_token_expiration, Some(172_800));
    }
}
