//! A node `podpass up` runs as one of its parts: its identity (kubeconfig and client
//! certificate), its credential provider and kubelet configuration, then the agent,
//! waited for until its `/healthz` answers and its Node says Ready. Parameterised by the
//! node's name, ports and directory ([`NodePart`]), so a cluster of several nodes adds one
//! entry per node.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;

use super::api::Api;
use super::checklist::Checklist;
use super::supervisor::Supervisor;
use super::{PartCertificates, Tools, files, identity_kubeconfig, path_str, strings, wait};

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
    pub api: &'a Api,
    pub client: &'a reqwest::Client,
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

/// The agent's command line.
fn agent_args(node: &NodePart, c: &Cluster<'_>, kubeconfig: &Path, providers: &Path, kubelet: &Path) -> Vec<String> {
    let mut a = strings(&["--log-format", "json", "node", "run", "--kubeconfig"]);
    a.extend([path_str(kubeconfig), "--node-name".into(), node.name.clone(), "--root-dir".into()]);
    a.extend([path_str(&node.root()), "--image-credential-provider-config".into(), path_str(providers)]);
    a.extend(["--image-credential-provider-bin-dir".into(), path_str(&c.tools.plugin_dir)]);
    a.extend(["--healthz-port".into(), node.healthz_port.to_string()]);
    a.extend(["--port".into(), node.port.to_string(), "--config".into(), path_str(kubelet)]);
    // Its image decisions, beside registry-auth's audit: `podpass audit images` joins them.
    a.extend(["--audit-log-path".into(), path_str(&c.logs.join(format!("{}-audit.log", node.name)))]);
    if !c.external_registry {
        a.extend(["--registry-ca-file".into(), path_str(&c.pki.ca)]);
        // The node proves containerd's pulls at the registry itself, showing its
        // certificate to registry-auth as containerd does.
        a.extend(["--registry-client-cert-file".into(), path_str(&c.pki.node_client.0)]);
        a.extend(["--registry-client-key-file".into(), path_str(&c.pki.node_client.1)]);
    }
    if let Some(layout) = c.runtime {
        a.extend(["--container-runtime-endpoint".into(), layout.endpoint()]);
    }
    a
}

/// Starts the node's agent as a part and waits until it is up and its Node Ready.
pub(super) async fn start(node: &NodePart, c: &Cluster<'_>, parts: &mut Supervisor, out: &mut Checklist) -> Result<()> {
    let began = Instant::now();
    let kubeconfig = kubeconfig(c.data, node)?;
    let providers = node.dir.join("credential-provider.yaml");
    files::write_provider_config(&providers, c.registry_host, c.auth_url, c.pki)?;
    let kubelet_config = node.dir.join("kubelet-config.yaml");
    files::write_kubelet_config(&kubelet_config, &node.eviction)?;
    let a = agent_args(node, c, &kubeconfig, &providers, &kubelet_config);
    let part = node.part_name();
    parts.spawn(&part, &c.tools.podpass, &a, c.logs.join(format!("{}.log", node.name)))?;
    out.waiting(&part, "its /healthz and Ready condition");
    let healthz = format!("http://127.0.0.1:{}/healthz", node.healthz_port);
    wait(parts, "the node agent", || async {
        // The Node may still say Ready from an earlier run: the agent's own health first.
        let health = c.client.get(&healthz).send().await.ok()?;
        if health.status() != 200 {
            return None;
        }
        let (code, n) = c.api.get(&format!("/api/v1/nodes/{}", node.name)).await.ok()?;
        let conditions = n["status"]["conditions"].as_array()?;
        let ready = conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True");
        (code == 200 && ready).then_some(())
    })
    .await?;
    out.done(
        &part,
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
