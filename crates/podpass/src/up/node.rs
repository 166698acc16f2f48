//! A node `podpass up` runs as one of its parts: its identity (kubeconfig and client
//! certificate), its credential provider and kubelet configuration, then the agent,
//! waited for until its `/healthz` answers and its Node says Ready. Parameterised by the
//! node's name, ports and directory ([`NodePart`]), so a cluster of several nodes adds one
//! entry per node.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::checklist::Checklist;
use super::command_line::{CommandLine, field};
use super::part::{Part, Probes, Readiness, Restart, launch};
use super::supervisor::Supervisor;
use super::{PartCertificates, Tools, files};

/// One node: what differs between the nodes of a cluster.
pub(super) struct NodePart {
    /// The Node's name (`node-1`).
    pub name: String,
    /// Its `/healthz` port.
    pub healthz_port: u16,
    /// Its authenticated HTTPS port (logs, `/metrics`).
    pub port: u16,
    /// Its directory under the data dir (kubeconfig, configurations, `root/`).
    pub dir: PathBuf,
    /// Its eviction settings.
    pub eviction: files::EvictionSettings,
    /// Its containerd, when it runs containers.
    pub runtime: Option<podpass_node::runtime::containerd::Layout>,
    /// That containerd's part, which the agent starts after.
    pub containerd_part: String,
    /// Its `--cgroup-root` (none: the kubelet's `/`): nodes sharing this machine keep
    /// their pods' cgroups apart.
    pub cgroup_root: Option<String>,
}

impl NodePart {
    /// The part's name in the checklist and the supervisor (`node node-1`).
    pub(super) fn part_name(&self) -> String {
        format!("node {}", self.name)
    }

    /// Its agent's root directory.
    pub(super) fn root(&self) -> PathBuf {
        self.dir.join("root")
    }
}

/// What every node of the cluster shares.
pub(super) struct Cluster<'a> {
    pub data: &'a Path,
    pub logs: &'a Path,
    pub tools: &'a Tools,
    pub pki: &'a PartCertificates,
    pub registry_host: &'a str,
    pub auth_url: &'a str,
    pub external_registry: bool,
}

/// How long the token a node bootstraps with lives: its own certificate (a year, rotated)
/// outlives it, and the token cleaner removes it after.
const BOOTSTRAP_TOKEN_TTL_SECONDS: i64 = 3600;

/// The node's identity as a joining node gets it (the kubelet's TLS bootstrap): a bootstrap
/// token in kubeadm's default node group and its kubeconfig (the cluster's server and CA),
/// from which the agent asks for its client certificate (`system:node:<name>` in
/// `system:nodes`) and writes `kubeconfig`. A kubeconfig naming another server (the
/// control plane's port changed) is bootstrapped again. The paths of both kubeconfigs.
async fn identity(data: &Path, node: &NodePart, api: &super::api::Api) -> Result<(PathBuf, PathBuf)> {
    let kubeconfig = node.dir.join("kubeconfig");
    let server = std::fs::read_to_string(data.join("server-url")).context("reading server-url")?;
    let server = server.trim();
    if let Ok(current) = std::fs::read_to_string(&kubeconfig)
        && !current.contains(&format!("server: {server}\n"))
    {
        std::fs::remove_file(&kubeconfig).with_context(|| format!("removing the stale {}", kubeconfig.display()))?;
    }
    let description = format!("podpass up: {}'s TLS bootstrap", node.name);
    let token = create_token(api, BOOTSTRAP_TOKEN_TTL_SECONDS, &description).await?;
    let ca = std::fs::read_to_string(data.join("pki").join("ca.crt")).context("reading the cluster CA")?;
    let bootstrap = podpass_node::join::bootstrap_kubeconfig(server, &ca, &token);
    let bootstrap_path = node.dir.join("bootstrap-kubeconfig");
    podpass_apiserver::write_atomic(&bootstrap_path, bootstrap.as_bytes(), 0o600, true)?;
    Ok((kubeconfig, bootstrap_path))
}

/// The agent's part: `podpass node run` as this node.
fn agent(
    node: &NodePart,
    c: &Cluster<'_>,
    (kubeconfig, bootstrap): (&Path, &Path),
    providers: &Path,
    kubelet: &Path,
) -> Result<Part> {
    type Flags = podpass_node::AgentConfig;
    let mut line = CommandLine::<Flags>::new(&["node", "run"], true)
        .path(field!(Flags, kubeconfig), kubeconfig)
        .path(field!(Flags, bootstrap_kubeconfig), bootstrap)
        .set(field!(Flags, rotate_certificates), true)
        // Its serving certificate from the cluster too: the API server verifies it.
        .set(field!(Flags, rotate_server_certificates), true)
        .set(field!(Flags, node_name), &node.name)
        .path(field!(Flags, root_dir), &node.root())
        .path(field!(Flags, image_credential_provider_config), providers)
        .path(field!(Flags, image_credential_provider_bin_dir), &c.tools.plugin_dir)
        .set(field!(Flags, healthz_port), node.healthz_port)
        .set(field!(Flags, port), node.port)
        .path(field!(Flags, kubelet_config), kubelet)
        // Its image decisions, beside registry-auth's audit: `podpass audit images` joins them.
        .path(field!(Flags, audit.audit_log_path), &c.logs.join(format!("{}-audit.log", node.name)))
        .maybe(field!(Flags, container_runtime_endpoint), node.runtime.as_ref().map(|layout| layout.endpoint()))
        .maybe(field!(Flags, cgroup_root), node.cgroup_root.as_deref());
    if !c.external_registry {
        // The node proves containerd's pulls at the registry itself, showing its own
        // (rotated) certificate to registry-auth as containerd does.
        line =
            line.path(field!(Flags, registry_ca_file), &c.pki.ca).set(field!(Flags, registry_node_certificate), true);
    }
    let mut after = vec![super::core_parts::REGISTRY_AUTH.to_owned()];
    if node.runtime.is_some() {
        after.push(node.containerd_part.clone());
    }
    Ok(Part {
        name: node.part_name(),
        program: c.tools.podpass.clone(),
        args: line.build(&node.part_name())?,
        log: c.logs.join(format!("{}.log", node.name)),
        ready: Readiness::NodeReady {
            healthz: format!("http://127.0.0.1:{}/healthz", node.healthz_port),
            node: node.name.clone(),
        },
        waiting_for: "its /healthz and Ready condition".to_owned(),
        restart: Restart::Always,
        after,
    })
}

/// Starts the node's agent as a part and waits until it is up and its Node Ready.
pub(super) async fn start(
    node: &NodePart,
    c: &Cluster<'_>,
    parts: &mut Supervisor,
    out: &mut Checklist,
    probes: &Probes<'_>,
) -> Result<()> {
    let api = probes.api.context("the node's bootstrap needs the control plane")?;
    let (kubeconfig, bootstrap) = identity(c.data, node, api).await?;
    let providers = node.dir.join("credential-provider.yaml");
    files::write_provider_config(&providers, c.registry_host, c.auth_url, &c.pki.ca, &node.dir)?;
    let kubelet_config = node.dir.join("kubelet-config.yaml");
    files::write_kubelet_config(&kubelet_config, &node.eviction)?;
    let part = agent(node, c, (&kubeconfig, &bootstrap), &providers, &kubelet_config)?;
    let (_, began) = launch(&part, parts, out, probes).await?;
    out.done(
        &part.name,
        &format!(
            "Ready   {}; podpass-credential-provider (exchange mode) for {}",
            if node.runtime.is_some() {
                "runs containers on containerd"
            } else {
                "embedded image store, prepares pods only"
            },
            c.registry_host
        ),
        began,
    );
    Ok(())
}

/// How long the printed join command's token lives (kubeadm's default).
const JOIN_TOKEN_TTL_SECONDS: i64 = 24 * 3600;

/// A bootstrap token for another machine to join with, and the `podpass node join` command
/// that uses it (the server and its CA's pin, as kubeadm prints it).
pub(crate) async fn join_command(data: &Path, api: &super::api::Api) -> Result<String> {
    let token = create_token(api, JOIN_TOKEN_TTL_SECONDS, "podpass up: the printed join command").await?;
    let ca = std::fs::read_to_string(data.join("pki").join("ca.crt")).context("reading the cluster CA")?;
    let pin = podpass_node::join::ca_cert_hashes(&ca)?
        .into_iter()
        .next()
        .context("the cluster CA file holds no certificate")?;
    Ok(format!("podpass node join --server {} --token {token} --discovery-token-ca-cert-hash {pin}", api.url))
}

/// A bootstrap token in kubeadm's default node group, for authentication and signing,
/// living `ttl` seconds.
async fn create_token(api: &super::api::Api, ttl: i64, description: &str) -> Result<String> {
    use podpass_api::bootstrap_token;
    let token = bootstrap_token::generate().map_err(|_| anyhow::anyhow!("the random source failed"))?;
    let expires = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(ttl))
        .context("the bootstrap token's expiry")?
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let secret = bootstrap_token::secret(
        &token,
        Some(&expires),
        Some(description),
        &["authentication", "signing"],
        &[bootstrap_token::NODE_GROUP],
    )
    .context("the bootstrap token's Secret")?;
    api.post(&format!("/api/v1/namespaces/{}/secrets", bootstrap_token::NAMESPACE), &secret).await?;
    Ok(token)
}
