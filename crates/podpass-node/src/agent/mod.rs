//! The node agent daemon (`podpass node run`): the flags ([`AgentConfig`]) checked as a
//! whole before anything connects ([`AgentConfig::prepare`]), its listeners bound
//! ([`Prepared::bind`]), then [`Bound::serve`] until shutdown.
//!
//! What runs: node registration, status and the heartbeat Lease; and for every pod bound
//! to the node a worker that writes its projected volumes (rotating their tokens), ensures
//! its images with its own credentials (pull secrets, credential providers fed with its
//! service-account token, node-wide config) under the pull-record policy, posts Events and
//! an honest pod status, and tears it all down when the pod goes.

mod admission;
mod cgroups;
mod container_config;
mod container_gc;
mod containers;
mod ephemeral;
mod events;
mod eviction;
mod eviction_manager;
mod exec_processes;
mod heartbeat;
mod image_audit;
mod in_cluster;
mod known_pods;
mod log_rotation;
mod logs;
mod machine;
mod node_client;
mod object_cache;
mod ops;
mod pleg;
mod pod_actions;
mod pods;
mod port_forward;
mod pressure;
mod prober;
mod provider_config;
mod resource_metrics;
mod server;
mod sources;
mod splice;
mod status;
mod streaming;
mod sync_error;
mod worker;

pub(crate) use cgroups::kubepods_under;
pub use events::EventRecorder;
pub use ops::ApiContact;
pub use pods::MAX_CONCURRENT_SYNCS;
pub use sources::ApiSources;
pub use status::PREPARED_CONDITION;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use podpass_api::{Feature, FeatureGates};
use podpass_serve::{ConfigErrors, Problems};
use thiserror::Error;

use crate::credential::metrics::CredentialMetrics;
use crate::credential::register_providers;
use crate::images::backend::Backend;
use crate::images::policy::PolicyEnforcer;
use crate::kubelet_config::KubeletConfig;
use pods::PodLoop;
use worker::Shared;

pub use heartbeat::{HeartbeatError, LEASE_DURATION_SECONDS, NodeIdentity, RENEW_INTERVAL, STATUS_REPORT_INTERVAL};

/// Flags of `podpass node run`, named as the kubelet's: declared once here, parsed by the
/// CLI (clap) or [`podpass_serve::parse_flags`], checked whole by [`AgentConfig::prepare`].
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct AgentConfig {
    /// Kubeconfig of the node's identity (`system:node:<name>` in `system:nodes`). With
    /// `--bootstrap-kubeconfig`, written by the TLS bootstrap when it is missing or its
    /// client certificate has expired.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// A bootstrap token's kubeconfig, as the kubelet's: the node asks the cluster for its
    /// client certificate (`system:node:<name>`, signer
    /// `kubernetes.io/kube-apiserver-client-kubelet`) and writes `--kubeconfig` naming it.
    #[arg(long)]
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// Where the node's certificates are kept (`kubelet-client-current.pem`); default
    /// `<root-dir>/pki`, as the kubelet's `/var/lib/kubelet/pki`.
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// Rotate the client certificate at 70–90% of its life, as the kubelet's
    /// `rotateCertificates`: a new key, a request as the node, the new pair stored as
    /// `kubelet-client-current.pem` and shown from the next connection on.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub rotate_certificates: bool,
    /// Ask the cluster for the node's serving certificate (signer
    /// `kubernetes.io/kubelet-serving`, for the Node's addresses) and rotate it, as the
    /// kubelet's flag and its configuration's `serverTLSBootstrap`: the HTTPS port answers
    /// once one is issued. Without it (and `serverTLSBootstrap`), a self-signed one.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub rotate_server_certificates: bool,
    /// The Node's name.
    #[arg(long, alias = "hostname-override")]
    pub node_name: String,
    /// Pull records, images and pod volumes.
    #[arg(long)]
    pub root_dir: PathBuf,
    /// KubeletConfiguration (image pull verification policy, allowlist, parallel pulls,
    /// gates).
    #[arg(long = "config")]
    pub kubelet_config: Option<PathBuf>,
    /// The cgroup the node's pods go below (`<root>/kubepods`), as the kubelet's: it replaces
    /// the configuration's `cgroupRoot` (default `/`). Nodes sharing a machine each need
    /// their own, or one node's limits and clean-up would reach another's pods.
    #[arg(long)]
    pub cgroup_root: Option<String>,
    /// Hard eviction thresholds, as the kubelet's `--eviction-hard`
    /// (`memory.available<100Mi,nodefs.available<10%`): they replace the configuration's
    /// `evictionHard` (and upstream's defaults) when given.
    #[arg(long, value_name = "SIGNAL<QUANTITY,...")]
    pub eviction_hard: Option<String>,
    /// CredentialProviderConfig file or directory.
    #[arg(long)]
    pub image_credential_provider_config: Option<PathBuf>,
    /// Directory holding the provider binaries.
    #[arg(long)]
    pub image_credential_provider_bin_dir: Option<PathBuf>,
    /// What provider NAME does when a pod's service account has not opted in to it (no
    /// service account where one is required, a required annotation missing):
    /// `NAME=skip` (the kubelet's: the rest of the keyring, node-wide credentials
    /// included), `NAME=node` (the plugin runs as for the node), `NAME=anonymous` (no
    /// node-wide credentials either) or `NAME=fail` (the pull is refused). Repeatable.
    #[arg(long = "credential-provider-fallback")]
    pub credential_provider_fallbacks: Vec<String>,
    /// containerd's CRI socket (`unix:///run/containerd/containerd.sock`); none: the
    /// embedded image store.
    #[arg(long)]
    pub container_runtime_endpoint: Option<String>,
    /// A PEM CA bundle the embedded image store trusts for registries (loopback ones are
    /// then reached over HTTPS too); containerd trusts what its `hosts.toml` names.
    #[arg(long)]
    pub registry_ca_file: Option<PathBuf>,
    /// How a container runtime's pull is proven (at the image's own registry unless
    /// `--trust-runtime-pulls`).
    #[command(flatten)]
    pub origin: crate::images::OriginFlags,
    /// Show registries that ask for a client certificate the node's own (the one its
    /// kubeconfig names, or with `--rotate-certificates` the current
    /// `kubelet-client-current.pem`, followed across each rotation) when the node verifies
    /// a pull at the image's registry (beyond upstream: registry-auth's node binding).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, conflicts_with = "registry_client_cert_file")]
    pub registry_node_certificate: bool,
    /// Where the node's image decisions are audited, one JSON line each (beyond upstream):
    /// the keys registry-auth's grants carry, for `podpass audit images`.
    #[command(flatten)]
    pub audit: podpass_serve::AuditFlags,
    /// A pull still unfinished after this long is cancelled and fails with `ErrImagePull`
    /// saying so (Go duration, 10s to 1h; beyond upstream, whose CRI pulls have no
    /// deadline: a registry that accepts and never answers would hold its pull slot for
    /// ever).
    #[arg(long, default_value = "5m")]
    pub image_pull_timeout: podpass_api::GoDuration,
    /// Prepare pods (tokens, volumes, images) but start no containers, even with a
    /// container runtime (the node podpass was before it ran containers).
    #[arg(long)]
    pub prepare_only: bool,
    /// Address of the node's HTTPS server (container logs for the API server).
    #[arg(long, default_value = "127.0.0.1")]
    pub address: std::net::IpAddr,
    /// Port of the node's HTTPS server (the kubelet's 10250; 0 disables it).
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Address of the `/healthz` listener (plain HTTP; `/metrics` is on `--port`).
    #[arg(long, default_value = "127.0.0.1")]
    pub healthz_bind_address: std::net::IpAddr,
    /// Port of the `/healthz` listener (0 disables it).
    #[arg(long, default_value_t = DEFAULT_HEALTHZ_PORT)]
    pub healthz_port: u16,
    /// A further `/metrics` (and `/healthz`) listener, `HOST:PORT`: plain and anonymous, for
    /// an operator's scraper on an address they chose. Without it `/metrics` is served only
    /// on the authenticated `--port`, to identities allowed `get nodes/metrics`.
    #[arg(long)]
    pub metrics_bind_address: Option<std::net::SocketAddr>,
    /// The version reported in `nodeInfo.kubeletVersion` (set by the binary, not a flag).
    #[arg(skip)]
    pub version: String,
    /// A hollow node's agent ([`crate::hollow`], never a flag): pod volumes are plain
    /// directories, and pods get no in-cluster relay and no cgroups.
    #[arg(skip)]
    pub hollow: bool,
}

/// The kubelet's default `--healthz-port`.
pub const DEFAULT_HEALTHZ_PORT: u16 = 10248;
/// The kubelet's default `--port`.
pub const DEFAULT_PORT: u16 = 10250;

/// A configuration that validated, with its files read.
#[derive(Debug)]
pub struct Prepared {
    config: AgentConfig,
    identity: NodeIdentity,
    kubelet: KubeletConfig,
    gates: FeatureGates,
    /// `--registry-ca-file`'s PEM, read and checked.
    registry_ca: Option<Vec<u8>>,
    /// `--registry-client-cert-file` and its key, read and checked.
    registry_identity: Option<Vec<u8>>,
    /// `--credential-provider-fallback`, parsed.
    fallbacks: crate::credential::Fallbacks,
}

impl AgentConfig {
    /// `--cert-dir`, or `<root-dir>/pki` (the kubelet's `/var/lib/kubelet/pki`).
    pub fn cert_dir(&self) -> PathBuf {
        self.cert_dir.clone().unwrap_or_else(|| self.root_dir.join("pki"))
    }

    /// Validates every flag and reads the files they name; reports all problems together.
    pub fn prepare(self) -> Result<Prepared, ConfigErrors> {
        let mut problems = Problems::default();
        for m in podpass_api::validation::is_dns1123_subdomain(&self.node_name) {
            problems.push_value("--node-name", format_args!("{:?}", self.node_name), m);
        }
        match (std::fs::metadata(&self.kubeconfig), &self.bootstrap_kubeconfig) {
            (Ok(m), _) if m.is_file() => {}
            (Ok(_), _) => problems.push_value("--kubeconfig", self.kubeconfig.display(), "not a file"),
            // The bootstrap writes it.
            (Err(e), Some(_)) if e.kind() == std::io::ErrorKind::NotFound => {}
            (Err(e), _) => problems.push_value("--kubeconfig", self.kubeconfig.display(), e),
        }
        if let Some(bootstrap) = &self.bootstrap_kubeconfig {
            match std::fs::metadata(bootstrap) {
                Ok(m) if m.is_file() => {}
                Ok(_) => problems.push_value("--bootstrap-kubeconfig", bootstrap.display(), "not a file"),
                Err(e) => problems.push_value("--bootstrap-kubeconfig", bootstrap.display(), e),
            }
        }
        match podpass_serve::durable::private_dir(&self.root_dir) {
            Ok(Some(warning)) => tracing::warn!("--root-dir {warning}"),
            Ok(None) => {}
            Err(e) => problems.push_value("--root-dir", self.root_dir.display(), e),
        }
        let mut kubelet = KubeletConfig::default();
        if let Some(path) = &self.kubelet_config {
            match std::fs::read(path) {
                Ok(data) => match crate::kubelet_config::parse(&data) {
                    Ok(k) => kubelet = k,
                    Err(errors) => {
                        for e in errors {
                            problems.push_value("--config", path.display(), e);
                        }
                    }
                },
                Err(e) => problems.push_value("--config", path.display(), e),
            }
        }
        if let Some(flag) = &self.eviction_hard {
            let parsed = crate::eviction_thresholds::parse_flag(flag)
                .map_err(|e| vec![e.to_string()])
                .and_then(|map| crate::eviction_thresholds::parse_eviction_hard(&map));
            match parsed {
                Ok(thresholds) => kubelet.eviction_hard = thresholds,
                Err(errors) => {
                    for e in errors {
                        problems.push_value("--eviction-hard", flag, e);
                    }
                }
            }
        }
        if let Some(root) = &self.cgroup_root {
            if cgroups::kubepods_under(root).is_some() {
                kubelet.cgroup_root = root.clone();
            } else {
                problems.push_value(
                    "--cgroup-root",
                    format_args!("{root:?}"),
                    "must be an absolute path of cgroup names (letters, digits, '-', '_', '.'; no '.' or '..')",
                );
            }
        }
        let pull_timeout = self
            .image_pull_timeout
            .to_std()
            .filter(|d| (std::time::Duration::from_secs(10)..=std::time::Duration::from_secs(3600)).contains(d));
        if pull_timeout.is_none() {
            problems.push_value("--image-pull-timeout", self.image_pull_timeout, "must be between 10s and 1h");
        }
        let fallbacks =
            crate::credential::Fallbacks::parse(&self.credential_provider_fallbacks).unwrap_or_else(|errors| {
                for e in errors {
                    problems.push("--credential-provider-fallback", e);
                }
                Default::default()
            });
        let gates = match crate::images::assembly::feature_gates(&kubelet, "") {
            Ok(g) => g,
            Err(e) => {
                problems.push("--config", format_args!("featureGates: {e}"));
                FeatureGates::default()
            }
        };
        if let Err(errors) = PolicyEnforcer::new(kubelet.policy, &kubelet.allowlist) {
            for e in errors {
                problems.push("--config", format_args!("preloadedImagesVerificationAllowlist: {e}"));
            }
        }
        if let (Some(config), Some(bin_dir)) =
            (&self.image_credential_provider_config, &self.image_credential_provider_bin_dir)
        {
            let sa = gates.enabled(Feature::KubeletServiceAccountTokenForCredentialProviders);
            match register_providers(config, bin_dir, sa, None, &fallbacks, &CredentialMetrics::default()) {
                Err(e @ crate::credential::RegisterError::UnknownFallback(_)) => {
                    problems.push("--credential-provider-fallback", e)
                }
                Err(e) => problems.push_value("--image-credential-provider-config", config.display(), e),
                Ok(_) => {}
            }
        }
        match (&self.image_credential_provider_config, &self.image_credential_provider_bin_dir) {
            (Some(_), None) => {
                problems.push("--image-credential-provider-bin-dir", "required with --image-credential-provider-config")
            }
            (None, Some(_)) => {
                problems.push("--image-credential-provider-config", "required with --image-credential-provider-bin-dir")
            }
            _ => {}
        }
        if let Some(endpoint) = &self.container_runtime_endpoint
            && !endpoint.starts_with("unix://")
        {
            problems.push_value(
                "--container-runtime-endpoint",
                format_args!("{endpoint:?}"),
                "must be a unix:// socket URL",
            );
        }
        let registry_ca = self.registry_ca_file.as_ref().and_then(|path| match std::fs::read(path) {
            Ok(pem) if reqwest::Certificate::from_pem_bundle(&pem).is_ok_and(|c| !c.is_empty()) => Some(pem),
            Ok(_) => {
                problems.push_value("--registry-ca-file", path.display(), "holds no PEM certificate");
                None
            }
            Err(e) => {
                problems.push_value("--registry-ca-file", path.display(), e);
                None
            }
        });
        let registry_identity = self.origin.client_identity().unwrap_or_else(|errors| {
            for (flag, message) in errors {
                problems.push(flag, message);
            }
            None
        });
        problems.finish()?;
        let identity = NodeIdentity {
            name: self.node_name.clone(),
            version: self.version.clone(),
            machine: machine::Machine::default(),
            container_runtime: None,
            address: self.address,
            port: 0,
        };
        Ok(Prepared { config: self, identity, kubelet, gates, registry_ca, registry_identity, fallbacks })
    }
}

/// The agent failed while running.
#[derive(Debug, Error)]
pub enum AgentError {
    /// The API server could not be reached with the kubeconfig.
    #[error(transparent)]
    Api(#[from] crate::api::ApiClientError),
    /// The Node could not be registered.
    #[error(transparent)]
    Register(#[from] HeartbeatError),
    /// The TLS bootstrap got no client certificate.
    #[error("TLS bootstrap: {0}")]
    Bootstrap(#[from] crate::certificate::CertificateError),
    /// The container runtime could not be reached.
    #[error(transparent)]
    Runtime(crate::runtime::RuntimeError),
    /// The node's HTTPS server could not be set up.
    #[error("the node's HTTPS server: {0}")]
    Tls(String),
    /// The image store or runtime could not be opened.
    #[error("image service: {0}")]
    Images(#[from] crate::images::service::ImageError),
    /// The image side could not be assembled.
    #[error(transparent)]
    Assembly(#[from] crate::images::assembly::AssemblyError),
    /// The credential providers could not be registered.
    #[error("--image-credential-provider-config: {0}")]
    Providers(#[from] crate::credential::RegisterError),
    /// An operations listener could not be bound.
    #[error("listening on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The image decisions' audit file cannot be opened.
    #[error("--audit-log-path: {0}")]
    Audit(std::io::Error),
    /// The node-wide docker config is unreadable.
    #[error("node-wide credentials: {0}")]
    NodeConfig(#[from] crate::credential::docker_config::DockerConfigError),
    /// The pods' cgroups cannot be made (`cgroupsPerQOS: false` runs without them).
    #[error("the pods' cgroups (cgroupsPerQOS): {0}")]
    Cgroups(String),
}

/// Where the machine mounts cgroups.
const CGROUP_MOUNT: &str = "/sys/fs/cgroup";

/// The node's pod cgroups (kubelet: the container manager's node-allocatable and QoS
/// cgroups), made before any pod runs: `kubepods` sized to allocatable. Without them a
/// container with no limit of its own (an ephemeral one) would be bounded by nothing, so a
/// node that cannot make them does not start.
async fn cgroups_for(machine: &machine::Machine, kubelet: &KubeletConfig) -> Result<cgroups::PodCgroups, AgentError> {
    let limits = cgroups::node_limits(machine.cpus, machine.memory_bytes, kubelet.reserved);
    let pod_pids_limit = kubelet.pod_pids_limit;
    // Checked when the configuration was read.
    let kubepods = cgroups::kubepods_under(&kubelet.cgroup_root)
        .ok_or_else(|| AgentError::Cgroups(format!("cgroupRoot {:?} names no cgroup", kubelet.cgroup_root)))?;
    tokio::task::spawn_blocking(move || {
        let mount = std::path::Path::new(CGROUP_MOUNT);
        let cg = cgroups::Cgroups::detect(mount)
            .ok_or_else(|| {
                AgentError::Cgroups(format!("no cgroup v1 memory controller or cgroup v2 hierarchy at {CGROUP_MOUNT}"))
            })?
            .with_kubepods(kubepods);
        cg.ensure_node(&limits).map_err(|e| AgentError::Cgroups(e.to_string()))?;
        tracing::info!(
            version = cg.version(),
            memory_bytes = limits.memory_bytes.unwrap_or(-1),
            pod_pids_limit,
            kubepods = cg.kubepods(),
            "pod cgroups made"
        );
        Ok(cgroups::PodCgroups { cgroups: cg, pod_pids_limit })
    })
    .await
    .map_err(|e| AgentError::Cgroups(e.to_string()))?
}

impl Prepared {
    /// The pod workers' shared parts: image service, pull records (with start-up
    /// housekeeping), image manager, providers fed with pod tokens, node-wide credentials.
    async fn assemble(
        &self,
        client: kube::Client,
        cri: Option<crate::runtime::CriRuntime>,
        cgroups: Option<cgroups::PodCgroups>,
        machine: &machine::Machine,
        pressure: tokio::sync::watch::Receiver<pressure::Pressure>,
        node_pairs: Option<tokio::sync::watch::Receiver<crate::certificate::StoredPair>>,
    ) -> Result<Shared, AgentError> {
        let root = &self.config.root_dir;
        let backend = Backend::open(root, self.config.container_runtime_endpoint.as_deref(), Vec::new())
            .await?
            .with_registry_ca(self.registry_ca.clone());
        let settings = crate::images::OriginSettings {
            registry_ca: self.registry_ca.clone(),
            client_identity: self.registry_identity.clone(),
            insecure_registries: Vec::new(),
        };
        let origin = crate::images::assembly::origin_check(&backend, &self.config.origin, &settings)?;
        if let (Some(check), Some(pairs)) = (&origin, node_pairs) {
            podpass_serve::spawn_named("registry-identity", follow_node_certificate(check.clone(), pairs));
        }
        let (images, pull_manager, warnings) = crate::images::assembly::image_manager(
            root,
            Arc::new(backend),
            &self.kubelet,
            &self.gates,
            crate::images::assembly::WarmUp::Background,
        )
        .await?;
        let images = images
            .with_origin_check(origin)
            .with_pull_timeout(self.config.image_pull_timeout.to_std().unwrap_or(crate::images::DEFAULT_PULL_TIMEOUT));
        for w in warnings {
            tracing::warn!(file = w.file_kind(), error = %w, "unreadable image record at start-up");
        }
        // One token manager for the node, as the kubelet's: projected volumes and
        // credential providers ask it alike.
        let tokens = Arc::new(crate::token::TokenManager::new(crate::api::KubeTokenFetcher::new(client.clone())));
        let service_accounts = crate::api::KubeServiceAccounts::with_tokens(client.clone(), tokens.clone());
        let credential_metrics = CredentialMetrics::default();
        let source =
            match (&self.config.image_credential_provider_config, &self.config.image_credential_provider_bin_dir) {
                (Some(config), Some(bin_dir)) => Some(provider_config::ProviderSource {
                    config: config.clone(),
                    bin_dir: bin_dir.clone(),
                    service_account_tokens: self
                        .gates
                        .enabled(Feature::KubeletServiceAccountTokenForCredentialProviders),
                    accounts: service_accounts.clone() as Arc<dyn crate::credential::ServiceAccountSource>,
                    fallbacks: self.fallbacks.clone(),
                }),
                _ => None,
            };
        // The same families /metrics serves (their clones share one store).
        let providers = provider_config::Providers::load(source, &credential_metrics)?;
        let node_config = crate::credential::docker_config::read_node_config(root)?;
        let in_cluster = match crate::api::api_server_address(&self.config.kubeconfig).await {
            _ if self.config.hollow => None,
            Ok(upstream) => Some(in_cluster::InCluster::new(client.clone(), upstream)),
            Err(e) => {
                tracing::warn!(error = %e, "pods get no in-cluster access to the API server");
                None
            }
        };
        Ok(Shared {
            client: client.clone(),
            root: root.clone(),
            sources: ApiSources::new(client.clone(), tokens),
            images,
            pull_manager,
            credential_metrics,
            providers: Arc::new(providers),
            node_config: Arc::new(node_config),
            events: EventRecorder::new(client, &self.identity.name),
            syncs: tokio::sync::Semaphore::new(MAX_CONCURRENT_SYNCS),
            volume_medium: if self.config.hollow {
                crate::volumes::VolumeMedium::Disk
            } else {
                crate::volumes::VolumeMedium::Memory { node_allocatable_memory: machine.allocatable_memory() }
            },
            pleg: cri.is_some().then(|| Arc::new(pleg::Pleg::default())),
            pods: Arc::default(),
            host_ip: self.identity.internal_ip(),
            node: self.identity.name.clone(),
            audit: self.config.audit.open().map_err(AgentError::Audit)?,
            evictions: Default::default(),
            pressure,
            runtime: cri.map(|cri| {
                Arc::new(containers::PodRuntime {
                    cri,
                    logs: root.join("logs/pods"),
                    root: root.clone(),
                    node: self.identity.name.clone(),
                    node_allocatable_memory: machine.allocatable_memory(),
                    seccomp_default: self.kubelet.seccomp_default,
                    log_max_size: self.kubelet.container_log_max_size,
                    log_max_files: self.kubelet.container_log_max_files,
                    in_cluster: in_cluster.clone(),
                    cgroups,
                })
            }),
        })
    }

    /// The node this agent runs as.
    pub fn identity(&self) -> &NodeIdentity {
        &self.identity
    }

    /// Binds the operations listeners (`--healthz-port`, `--metrics-bind-address`).
    pub async fn bind(self) -> Result<Bound, AgentError> {
        let mut listeners = Vec::new();
        let mut addrs = Vec::new();
        if self.config.healthz_port != 0 {
            // The kubelet's healthz port: /healthz only (its metrics need an identity).
            addrs.push((std::net::SocketAddr::new(self.config.healthz_bind_address, self.config.healthz_port), false));
        }
        // An operator's own plain metrics listener, where they chose to put one.
        addrs.extend(self.config.metrics_bind_address.map(|a| (a, true)));
        for (addr, metrics) in addrs {
            let listener =
                tokio::net::TcpListener::bind(addr).await.map_err(|source| AgentError::Bind { addr, source })?;
            tracing::info!(address = %addr, metrics, "serving /healthz");
            listeners.push((listener, metrics));
        }
        let server = if self.config.port == 0 {
            None
        } else {
            let addr = std::net::SocketAddr::new(self.config.address, self.config.port);
            let listener =
                tokio::net::TcpListener::bind(addr).await.map_err(|source| AgentError::Bind { addr, source })?;
            tracing::info!(address = %addr, "serving container logs and /metrics over HTTPS");
            Some(listener)
        };
        Ok(Bound { prepared: self, listeners, server })
    }
}

/// A node agent with its listeners bound, not yet connected.
#[derive(Debug)]
pub struct Bound {
    prepared: Prepared,
    /// The operations listeners, and whether each serves `/metrics` too.
    listeners: Vec<(tokio::net::TcpListener, bool)>,
    /// The node's HTTPS server (`--port`).
    server: Option<tokio::net::TcpListener>,
}

impl Bound {
    /// Connects, registers the Node, then keeps its Lease renewed and its status posted
    /// and its pods synced until `shutdown` completes. A renewal that fails is logged and
    /// retried at the next interval (the API server may be restarting); registration
    /// failing is an error.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
        let Bound { prepared: this, listeners, server } = self;
        let node_client::NodeClient { client, rotation, pairs } =
            node_client::connect(&this.config, &this.identity.name).await?;
        // The rotation stops with the agent.
        let _rotation = rotation.map(node_client::AbortOnDrop);
        let mut identity = this.identity.clone();
        identity.machine = machine::Machine::read(&this.config.root_dir).await;
        identity.machine.max_pods = this.kubelet.max_pods;
        identity.machine.reserved = this.kubelet.reserved;
        identity.machine.eviction_hard = crate::eviction_thresholds::HardThresholds(this.kubelet.eviction_hard.clone());
        // One connection to the runtime: its version for the Node, then the pods'.
        let cri = match (&this.config.container_runtime_endpoint, this.config.prepare_only) {
            (Some(endpoint), false) => {
                let cri = crate::runtime::CriRuntime::connect(endpoint).await.map_err(AgentError::Runtime)?;
                let v = cri.version().await.map_err(AgentError::Runtime)?;
                identity.container_runtime = Some(format!("{}://{}", v.runtime_name, v.runtime_version));
                Some(cri)
            }
            _ => None,
        };
        let api = Arc::new(ApiContact::default());
        if let Some(listener) = &server {
            identity.port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        }
        identity.address = this.config.address;
        let id = &identity;
        let node_uid = heartbeat::register_node(&client, id).await?;
        api.touch();
        tracing::info!(node = %id.name, uid = %node_uid, "node registered");
        let cgroups = match &cri {
            Some(_) if this.kubelet.cgroups_per_qos && !this.config.hollow => {
                Some(cgroups_for(&identity.machine, &this.kubelet).await?)
            }
            _ => None,
        };
        // The runtime's image filesystem, observed for imagefs.* (the node's own when the
        // runtime does not say).
        let image_fs = match &cri {
            Some(cri) => cri.image_fs_mountpoint().await.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "the runtime did not say where its images live; imagefs is the node's filesystem");
                None
            }),
            None => None,
        };
        let (pressure_tx, mut pressure_rx) = tokio::sync::watch::channel(pressure::Pressure::default());
        let pairs = pairs.filter(|_| this.config.registry_node_certificate);
        let shared =
            Arc::new(this.assemble(client.clone(), cri, cgroups, &identity.machine, pressure_rx.clone(), pairs).await?);
        if let Some(listener) = server {
            spawn_node_server(&this, &client, id, &shared, listener).await?;
        }
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let wake_rx = spawn_background(&this, &shared, &api, listeners, image_fs, pressure_tx, &stopped);
        let pods = PodLoop::new(shared, &id.name, this.kubelet.max_pods, wake_rx);
        let pod_task = podpass_serve::spawn_named(
            "pods",
            pods.run(async move {
                let mut stopped = stopped;
                let _ = stopped.wait_for(|s| *s).await;
            }),
        );
        let mut renew = tokio::time::interval(RENEW_INTERVAL);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut report = tokio::time::interval(STATUS_REPORT_INTERVAL);
        report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        report.tick().await;
        let mut pressure_open = true;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => {
                    tracing::info!(node = %id.name, "shutting down");
                    let _ = stop.send(true);
                    let _ = pod_task.await;
                    return Ok(());
                }
                _ = renew.tick() => {
                    match heartbeat::renew_lease(&client, id, &node_uid).await {
                        Ok(()) => api.touch(),
                        Err(e) => tracing::warn!(node = %id.name, error = %e, "lease renewal failed; retrying"),
                    }
                }
                // At least every report interval, and at once when a pressure condition
                // changes (kubelet: a changed status is posted at its next sync).
                changed = pressure_rx.changed(), if pressure_open => {
                    // The manager gone (it stops with the agent): only the report remains.
                    if changed.is_err() {
                        pressure_open = false;
                        continue;
                    }
                    let pressure = *pressure_rx.borrow_and_update();
                    if let Err(e) = heartbeat::post_status(&client, id, pressure).await {
                        tracing::warn!(node = %id.name, error = %e, "posting node status failed; retrying");
                    }
                }
                _ = report.tick() => {
                    let pressure = *pressure_rx.borrow();
                    if let Err(e) = heartbeat::post_status(&client, id, pressure).await {
                        tracing::warn!(node = %id.name, error = %e, "posting node status failed; retrying");
                    }
                }
            }
        }
    }
}

/// The node's authenticated HTTPS port (logs, `/metrics`), clients verified against the
/// cluster's CA or by TokenReview. Its serving certificate is, with `serverTLSBootstrap`,
/// the cluster's (kept in `kubelet-server-current.pem`, asked for when missing, expired or
/// for other names, rotated at 70–90% of its life), the port answering from the moment one
/// is shown; otherwise a self-signed one for its names, made at each start.
async fn spawn_node_server(
    this: &Prepared,
    client: &kube::Client,
    id: &NodeIdentity,
    shared: &Arc<Shared>,
    listener: tokio::net::TcpListener,
) -> Result<(), AgentError> {
    use crate::certificate::{
        CertificateStore, SERVER_PREFIX, ServingIdentity, ShowsCertificate, Template, issue_with_retry,
        rotate_certificate, still_serves,
    };
    let ca = crate::api::cluster_ca_pem(&this.config.kubeconfig).await?;
    let node_server = Arc::new(server::NodeServer {
        client: client.clone(),
        reviewed: Default::default(),
        node: id.name.clone(),
        pods: shared.pods.clone(),
        runtime: shared.runtime.clone(),
        shared: shared.clone(),
        streams: Default::default(),
        resources: Default::default(),
        stream_idle_timeout: this.kubelet.streaming_connection_idle_timeout,
    });
    podpass_serve::spawn_named(
        "resource-metrics",
        resource_metrics::sample_loop(node_server.resources.clone(), shared.runtime.clone()),
    );
    let router = server::router(node_server);
    let limits = podpass_serve::ServeLimits::default();
    if !(this.config.rotate_server_certificates || this.kubelet.server_tls_bootstrap) {
        let mut names = vec![id.name.clone(), "localhost".to_owned()];
        if !this.config.address.is_unspecified() {
            names.push(this.config.address.to_string());
        }
        let (cert, key) = server::self_signed(&names).map_err(|e| AgentError::Tls(e.to_string()))?;
        let tls = podpass_serve::tls_acceptor(cert.as_bytes(), key.as_bytes(), Some(ca.as_bytes()))
            .map_err(|e| AgentError::Tls(e.to_string()))?;
        podpass_serve::spawn_named("node-server", podpass_serve::accept_loop(listener, Some(tls), router, limits));
        return Ok(());
    }
    let identity = Arc::new(ServingIdentity::default());
    let tls = podpass_serve::tls_acceptor_resolving(identity.clone(), Some(ca.as_bytes()))
        .map_err(|e| AgentError::Tls(e.to_string()))?;
    let store = CertificateStore::new(&this.config.cert_dir(), SERVER_PREFIX);
    let template = Template::kubelet_serving(&id.name, &id.addresses());
    let client = client.clone();
    podpass_serve::spawn_named("serving-certificate", async move {
        let seed = store.clone();
        let stored = tokio::task::spawn_blocking(move || seed.current()).await;
        let now = jiff::Timestamp::now().as_second();
        let pair = match stored {
            Ok(Ok(Some(pair))) if still_serves(&pair, &template, &ca, now) && identity.show(&pair).is_ok() => pair,
            other => {
                if let Ok(Err(e)) = other {
                    tracing::warn!(error = %e, "the stored serving certificate is unreadable; asking for a new one");
                }
                issue_with_retry(&client, &store, &template, identity.as_ref()).await
            }
        };
        tracing::info!(expires = pair.not_after, path = %store.current_path().display(), "serving with the cluster's certificate");
        podpass_serve::spawn_named("node-server", podpass_serve::accept_loop(listener, Some(tls), router, limits));
        rotate_certificate(client, store, template, identity, pair).await;
    });
    Ok(())
}

/// Shows registries the node's client certificate, each rotated one from the moment it is
/// current (`--registry-node-certificate`), until the rotation ends.
async fn follow_node_certificate(
    check: crate::images::OriginCheck,
    mut pairs: tokio::sync::watch::Receiver<crate::certificate::StoredPair>,
) {
    loop {
        let pem = {
            let pair = pairs.borrow_and_update();
            format!("{}\n{}", pair.cert_pem.trim_end(), pair.key_pem)
        };
        if let Err(e) = check.set_client_identity(pem.as_bytes()) {
            tracing::warn!(error = %e, "the node's certificate cannot be shown to registries; the previous one stays");
        }
        if pairs.changed().await.is_err() {
            return;
        }
    }
}

/// What runs beside the pod loop until `stopped`: the operations listeners, the runtime's
/// relist, log rotation, the credential-provider configuration watch and the eviction
/// manager. Answers the eviction manager's wake-ups for the pod loop.
fn spawn_background(
    this: &Prepared,
    shared: &Arc<Shared>,
    api: &Arc<ApiContact>,
    listeners: Vec<(tokio::net::TcpListener, bool)>,
    image_fs: Option<PathBuf>,
    pressure_tx: tokio::sync::watch::Sender<pressure::Pressure>,
    stopped: &tokio::sync::watch::Receiver<bool>,
) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let until_stopped = || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    for (listener, metrics) in listeners {
        let ops = Arc::new(ops::Ops { shared: shared.clone(), api: api.clone() });
        podpass_serve::spawn_named("ops-server", ops::serve(listener, ops, metrics, until_stopped()));
    }
    if let (Some(rt), Some(pleg)) = (shared.runtime.clone(), shared.pleg.clone()) {
        podpass_serve::spawn_named("pleg", pleg.run(rt, until_stopped()));
    }
    if let Some(rt) = shared.runtime.clone() {
        let policy = log_rotation::RotatePolicy {
            max_size: this.kubelet.container_log_max_size,
            max_files: this.kubelet.container_log_max_files,
        };
        let interval = this.kubelet.container_log_monitor_interval;
        podpass_serve::spawn_named("log-rotation", log_rotation::run(rt, policy, interval, until_stopped()));
    }
    // The credential-provider configuration is kept current while the node runs.
    let watch = shared.providers.clone().watch(shared.events.clone(), this.identity.name.clone(), until_stopped());
    podpass_serve::spawn_named("provider-config", watch);
    let (wake_tx, wake_rx) = tokio::sync::mpsc::unbounded_channel();
    let settings = eviction_manager::Settings {
        thresholds: this.kubelet.eviction_hard.clone(),
        transition_period: this.kubelet.eviction_pressure_transition_period,
        image_minimum_gc_age: this.kubelet.image_minimum_gc_age,
        filesystems: pressure::Filesystems { node: this.config.root_dir.clone(), image: image_fs },
    };
    podpass_serve::spawn_named(
        "eviction-manager",
        eviction_manager::run(shared.clone(), settings, pressure_tx, wake_tx, until_stopped()),
    );
    wake_rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_is_reported_before_anything_starts() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let bad_config = dir.path().join("kubelet.yaml");
        std::fs::write(&bad_config, "imagePullCredentialsVerificationPolicy: Sometimes\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let d = |p: &str| dir.path().join(p).display().to_string();
        let config: AgentConfig = podpass_serve::parse_flags([
            "--kubeconfig".to_owned(),
            d("missing.kubeconfig"),
            "--node-name=Node_1".to_owned(),
            "--root-dir".to_owned(),
            d("root"),
            "--config".to_owned(),
            bad_config.display().to_string(),
            "--image-credential-provider-config".to_owned(),
            d("providers.yaml"),
            "--container-runtime-endpoint=tcp://127.0.0.1:1".to_owned(),
            "--healthz-port=0".to_owned(),
            "--eviction-hard=disk.free<1Gi".to_owned(),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let err = config.prepare().unwrap_err();
        let text = err.to_string();
        assert_eq!(err.0.len(), 7, "{text}");
        for flag in [
            "--eviction-hard",
            "--node-name",
            "--kubeconfig",
            "--config",
            "--image-credential-provider-bin-dir",
            "--container-runtime-endpoint",
        ] {
            assert!(err.names(flag), "{flag} missing from:\n{text}");
        }
        assert!(text.contains("--node-name \"Node_1\": ") && text.contains("unix://"), "{text}");
    }
}
