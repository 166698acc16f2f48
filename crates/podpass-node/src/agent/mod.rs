//! The node agent daemon (`podpass node run`): configuration validated as a whole before
//! anything connects ([`AgentConfig::prepare`]), then [`Prepared::run`] until shutdown.
//!
//! What runs: node registration, status and the heartbeat Lease; and for every pod bound
//! to the node a worker that writes its projected volumes (rotating their tokens), ensures
//! its images with its own credentials (pull secrets, credential providers fed with its
//! service-account token, node-wide config) under the pull-record policy, posts Events and
//! an honest pod status, and tears it all down when the pod goes.

mod events;
mod heartbeat;
mod ops;
mod pods;
mod status;
mod worker;

pub use events::{EventRecorder, field_path};
pub use ops::{API_STALE_AFTER_SECONDS, ApiContact};
pub use pods::{ApiSources, MAX_CONCURRENT_SYNCS};
pub use status::{ContainerOutcome, ContainerReport, PREPARED_CONDITION, PREPARED_MESSAGE, pod_status};

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use podpass_api::{Feature, FeatureGates};
use thiserror::Error;

use crate::credential::metrics::CredentialMetrics;
use crate::credential::register_providers;
use crate::images::backend::Backend;
use crate::images::kubelet_config::KubeletImageConfig;
use crate::images::policy::PolicyEnforcer;
use pods::PodLoop;
use worker::Shared;

pub use heartbeat::{
    HeartbeatError, LEASE_DURATION_SECONDS, NODE_LEASE_NAMESPACE, NodeIdentity, RENEW_INTERVAL, STATUS_REPORT_INTERVAL,
    initial_node, lease, node_status,
};

/// Flags of `podpass node run`, named as the kubelet's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    /// `--kubeconfig`: the node's identity and the API server.
    pub kubeconfig: PathBuf,
    /// `--hostname-override` / the Node name.
    pub node_name: String,
    /// `--root-dir`: pull records, images, pod volumes.
    pub root_dir: PathBuf,
    /// `--config`: the KubeletConfiguration subset podpass reads.
    pub kubelet_config: Option<PathBuf>,
    /// `--image-credential-provider-config`.
    pub image_credential_provider_config: Option<PathBuf>,
    /// `--image-credential-provider-bin-dir`.
    pub image_credential_provider_bin_dir: Option<PathBuf>,
    /// `--container-runtime-endpoint` (`unix:///…`); none: the embedded image store.
    pub container_runtime_endpoint: Option<String>,
    /// The version reported in `nodeInfo.kubeletVersion`.
    pub version: String,
    /// `--healthz-bind-address` (kubelet default 127.0.0.1).
    pub healthz_bind_address: std::net::IpAddr,
    /// `--healthz-port` (kubelet default 10248; 0 disables).
    pub healthz_port: u16,
    /// `--metrics-bind-address`: a further listener for `/metrics` (and `/healthz`).
    pub metrics_bind_address: Option<std::net::SocketAddr>,
}

/// The kubelet's default `--healthz-port`.
pub const DEFAULT_HEALTHZ_PORT: u16 = 10248;

/// Everything wrong with a configuration, listed at once; nothing was started.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("invalid node agent configuration:\n  {}", .0.join("\n  "))]
pub struct AgentConfigError(pub Vec<String>);

/// A configuration that validated, with its files read.
#[derive(Debug)]
pub struct Prepared {
    config: AgentConfig,
    identity: NodeIdentity,
    kubelet: KubeletImageConfig,
    gates: FeatureGates,
}

impl AgentConfig {
    /// Validates every flag and reads the files they name; reports all problems together.
    pub fn prepare(self) -> Result<Prepared, AgentConfigError> {
        let mut problems = Vec::new();
        for m in podpass_api::validation::is_dns1123_subdomain(&self.node_name) {
            problems.push(format!("--node-name {:?}: {m}", self.node_name));
        }
        match std::fs::metadata(&self.kubeconfig) {
            Ok(m) if m.is_file() => {}
            Ok(_) => problems.push(format!("--kubeconfig {}: not a file", self.kubeconfig.display())),
            Err(e) => problems.push(format!("--kubeconfig {}: {e}", self.kubeconfig.display())),
        }
        match podpass_serve::durable::private_dir(&self.root_dir) {
            Ok(Some(warning)) => tracing::warn!("--root-dir {warning}"),
            Ok(None) => {}
            Err(e) => problems.push(format!("--root-dir {}: {e}", self.root_dir.display())),
        }
        let mut kubelet = KubeletImageConfig::default();
        if let Some(path) = &self.kubelet_config {
            match std::fs::read(path) {
                Ok(data) => match crate::images::kubelet_config::parse(&data) {
                    Ok(k) => kubelet = k,
                    Err(errors) => {
                        problems.extend(errors.into_iter().map(|e| format!("--config {}: {e}", path.display())));
                    }
                },
                Err(e) => problems.push(format!("--config {}: {e}", path.display())),
            }
        }
        let gates = match crate::images::assembly::feature_gates(&kubelet, "") {
            Ok(g) => g,
            Err(e) => {
                problems.push(format!("--config: featureGates: {e}"));
                FeatureGates::default()
            }
        };
        if let Err(errors) = PolicyEnforcer::new(kubelet.policy, &kubelet.allowlist) {
            for e in errors {
                problems.push(format!("--config: preloadedImagesVerificationAllowlist: {e}"));
            }
        }
        if let (Some(config), Some(bin_dir)) =
            (&self.image_credential_provider_config, &self.image_credential_provider_bin_dir)
        {
            let sa = gates.enabled(Feature::KubeletServiceAccountTokenForCredentialProviders);
            if let Err(e) = register_providers(config, bin_dir, sa, None, &CredentialMetrics::default()) {
                problems.push(format!("--image-credential-provider-config {}: {e}", config.display()));
            }
        }
        match (&self.image_credential_provider_config, &self.image_credential_provider_bin_dir) {
            (Some(_), None) => problems
                .push("--image-credential-provider-bin-dir: required with --image-credential-provider-config".into()),
            (None, Some(_)) => problems
                .push("--image-credential-provider-config: required with --image-credential-provider-bin-dir".into()),
            _ => {}
        }
        if let Some(endpoint) = &self.container_runtime_endpoint
            && !endpoint.starts_with("unix://")
        {
            problems.push(format!("--container-runtime-endpoint {endpoint:?}: must be a unix:// socket URL"));
        }
        if !problems.is_empty() {
            return Err(AgentConfigError(problems));
        }
        let identity = NodeIdentity { name: self.node_name.clone(), version: self.version.clone() };
        Ok(Prepared { config: self, identity, kubelet, gates })
    }
}

/// The agent failed while running.
#[derive(Debug, Error)]
pub enum AgentError {
    /// The API server could not be reached with the kubeconfig.
    #[error(transparent)]
    Api(#[from] crate::api::ApiError),
    /// The Node could not be registered.
    #[error(transparent)]
    Register(#[from] HeartbeatError),
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
    /// The node-wide docker config is unreadable.
    #[error("node-wide credentials: {0}")]
    NodeConfig(#[from] crate::credential::docker_config::DockerConfigError),
}

impl Prepared {
    /// The pod workers' shared parts: image service, pull records (with start-up
    /// housekeeping), image manager, providers fed with pod tokens, node-wide credentials.
    async fn assemble(&self, client: kube::Client) -> Result<Shared, AgentError> {
        let root = &self.config.root_dir;
        let backend =
            Arc::new(Backend::open(root, self.config.container_runtime_endpoint.as_deref(), Vec::new()).await?);
        let (images, pull_manager, warnings) = crate::images::assembly::image_manager(
            root,
            backend,
            &self.kubelet,
            &self.gates,
            crate::images::assembly::WarmUp::Background,
        )
        .await?;
        for w in warnings {
            tracing::warn!(file = w.file_kind(), error = %w, "unreadable image record at start-up");
        }
        let service_accounts = crate::api::KubeServiceAccounts::new(client.clone());
        let credential_metrics = CredentialMetrics::default();
        let providers =
            match (&self.config.image_credential_provider_config, &self.config.image_credential_provider_bin_dir) {
                (Some(config), Some(bin_dir)) => register_providers(
                    config,
                    bin_dir,
                    self.gates.enabled(Feature::KubeletServiceAccountTokenForCredentialProviders),
                    Some(service_accounts.clone() as Arc<dyn crate::credential::ServiceAccountSource>),
                    &CredentialMetrics::default(),
                )?,
                _ => Vec::new(),
            };
        let node_config = crate::credential::docker_config::read_node_config(root)?;
        Ok(Shared {
            client: client.clone(),
            root: root.clone(),
            sources: ApiSources::new(client.clone()),
            images,
            pull_manager,
            credential_metrics,
            providers: Arc::new(providers),
            service_accounts,
            node_config: Arc::new(node_config),
            events: EventRecorder::new(client, &self.identity.name),
            syncs: tokio::sync::Semaphore::new(MAX_CONCURRENT_SYNCS),
        })
    }

    /// The node this agent runs as.
    pub fn identity(&self) -> &NodeIdentity {
        &self.identity
    }

    /// Connects, registers the Node, then keeps its Lease renewed and its status posted
    /// until `shutdown` completes. A renewal that fails is logged and retried at the next
    /// interval (the API server may be restarting); registration failing is an error.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
        let mut listeners = Vec::new();
        let mut addrs = Vec::new();
        if self.config.healthz_port != 0 {
            addrs.push(std::net::SocketAddr::new(self.config.healthz_bind_address, self.config.healthz_port));
        }
        addrs.extend(self.config.metrics_bind_address);
        for addr in addrs {
            let listener =
                tokio::net::TcpListener::bind(addr).await.map_err(|source| AgentError::Bind { addr, source })?;
            tracing::info!(address = %addr, "serving /healthz and /metrics");
            listeners.push(listener);
        }
        let client = crate::api::client_from_kubeconfig(&self.config.kubeconfig).await?;
        let id = &self.identity;
        let api = Arc::new(ApiContact::default());
        let node_uid = heartbeat::register_node(&client, id).await?;
        api.touch();
        tracing::info!(node = %id.name, uid = %node_uid, "node registered");
        let shared = Arc::new(self.assemble(client.clone()).await?);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        for listener in listeners {
            let ops = Arc::new(ops::Ops { shared: shared.clone(), api: api.clone() });
            let mut stopped = stopped.clone();
            tokio::spawn(ops::serve(listener, ops, async move {
                let _ = stopped.wait_for(|s| *s).await;
            }));
        }
        let pods = PodLoop::new(shared, &id.name);
        let pod_task = tokio::spawn(pods.run(async move {
            let mut stopped = stopped;
            let _ = stopped.wait_for(|s| *s).await;
        }));
        let mut renew = tokio::time::interval(RENEW_INTERVAL);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut report = tokio::time::interval(STATUS_REPORT_INTERVAL);
        report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        report.tick().await;
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
                _ = report.tick() => {
                    if let Err(e) = heartbeat::post_status(&client, id).await {
                        tracing::warn!(node = %id.name, error = %e, "posting node status failed; retrying");
                    }
                }
            }
        }
    }
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
        let config = AgentConfig {
            kubeconfig: dir.path().join("missing.kubeconfig"),
            node_name: "Node_1".into(),
            root_dir: dir.path().join("root"),
            kubelet_config: Some(bad_config),
            image_credential_provider_config: Some(dir.path().join("providers.yaml")),
            image_credential_provider_bin_dir: None,
            container_runtime_endpoint: Some("tcp://127.0.0.1:1".into()),
            version: "v1.34.0".into(),
            healthz_bind_address: std::net::Ipv4Addr::LOCALHOST.into(),
            healthz_port: 0,
            metrics_bind_address: None,
        };
        let err = config.prepare().unwrap_err();
        let text = err.to_string();
        assert_eq!(err.0.len(), 6, "{text}");
        for needle in
            ["--node-name \"Node_1\"", "--kubeconfig", "--config", "--image-credential-provider-bin-dir", "unix://"]
        {
            assert!(text.contains(needle), "{needle} missing from:\n{text}");
        }
    }
}
