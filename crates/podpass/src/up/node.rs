//! A node `podpass up` runs as one of its parts: its identity (kubeconfig and client
//! certificate), its credential provider and kubelet configuration, then the agent,
//! waited for until its `/healthz` answers and its Node says Ready. Parameterised by the
//! node's name, ports and directory ([`NodePart`]), so a cluster of several nodes adds one
//! entry per node.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::checklist::Checklist;
use super::command_line::{CommandLine, field};
use super::part::{Part, Probes, Readiness, Restart, launch};
use super::supervisor::Supervisor;
use super::{PartCertificates, Tools, files, identity_kubeconfig};

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
    pub runtime: Option<&'a podpass_node::runtime::containerd::Layout>,
}

/// The node's kubeconfig (`system:node:<name>` in `system:nodes`).
fn kubeconfig(data: &Path, node: &NodePart) -> Result<PathBuf> {
    identity_kubeconfig(
        data,
        &node.dir.join("kubeconfig"),
        &format!("system:node:{}", node.name),
        &["system:nodes".to_owned()],
    )
}

/// The agent's part: `podpass node run` as this node.
fn agent(node: &NodePart, c: &Cluster<'_>, kubeconfig: &Path, providers: &Path, kubelet: &Path) -> Result<Part> {
    type Flags = podpass_node::AgentConfig;
    let mut line = CommandLine::<Flags>::new(&["node", "run"], true)
        .path(field!(Flags, kubeconfig), kubeconfig)
        .set(field!(Flags, node_name), &node.name)
        .path(field!(Flags, root_dir), &node.root())
        .path(field!(Flags, image_credential_provider_config), providers)
        .path(field!(Flags, image_credential_provider_bin_dir), &c.tools.plugin_dir)
        .set(field!(Flags, healthz_port), node.healthz_port)
        .set(field!(Flags, port), node.port)
        .path(field!(Flags, kubelet_config), kubelet)
        // Its image decisions, beside registry-auth's audit: `podpass audit images` joins them.
        .path(field!(Flags, audit.audit_log_path), &c.logs.join(format!("{}-audit.log", node.name)))
        .maybe(field!(Flags, container_runtime_endpoint), c.runtime.map(|layout| layout.endpoint()));
    if !c.external_registry {
        // The node proves containerd's pulls at the registry itself, showing its
        // certificate to registry-auth as containerd does.
        line = line
            .path(field!(Flags, registry_ca_file), &c.pki.ca)
            .path(field!(Flags, origin.registry_client_cert_file), &c.pki.node_client.0)
            .path(field!(Flags, origin.registry_client_key_file), &c.pki.node_client.1);
    }
    let mut after = vec![super::core_parts::REGISTRY_AUTH.to_owned()];
    if c.runtime.is_some() {
        after.push(super::core_parts::CONTAINERD.to_owned());
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
    let kubeconfig = kubeconfig(c.data, node)?;
    let providers = node.dir.join("credential-provider.yaml");
    files::write_provider_config(&providers, c.registry_host, c.auth_url, c.pki)?;
    let kubelet_config = node.dir.join("kubelet-config.yaml");
    files::write_kubelet_config(&kubelet_config, &node.eviction)?;
    let part = agent(node, c, &kubeconfig, &providers, &kubelet_config)?;
    let (_, began) = launch(&part, parts, out, probes).await?;
    out.done(
        &part.name,
        &format!(
            "Ready   {}; podpass-credential-provider (exchange mode) for {}",
            if c.runtime.is_some() {
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
