//! The parts `podpass up` runs, built from its flags: the control plane, registry-auth,
//! the registry and containerd (the nodes are [`super::node`]'s). Each is a [`Part`]: the
//! daemons' command lines come from their own flag types ([`CommandLine`]), so a flag is
//! spelled once, where the daemon declares it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};

use super::checklist::Checklist;
use super::command_line::{CommandLine, field};
use super::part::{Part, Probes, Readiness, Restart, launch};
use super::supervisor::Supervisor;
use super::{
    ContainerTools, Layout, PartCertificates, READY_TIMEOUT, REVIEWER, Tools, UpArgs, files, identity_kubeconfig,
    path_str, wait,
};

/// The part names the checklist, the supervisor and the dependencies use.
pub(super) const CONTROL_PLANE: &str = "control plane";
pub(super) const REGISTRY_AUTH: &str = "registry-auth";
pub(super) const REGISTRY: &str = "registry";
pub(super) const CONTAINERD: &str = "containerd";
pub(super) const CONTROLLER_MANAGER: &str = "controllers";
pub(super) const SCHEDULER: &str = "scheduler";

/// The API server's audit log, under `<data-dir>/logs`.
pub(super) const API_AUDIT_LOG: &str = "apiserver-audit.log";

/// The control plane's part: `podpass apiserver` on the data dir.
pub(super) fn control_plane(args: &UpArgs, l: &Layout, tools: &Tools, admission: &Path) -> Result<Part> {
    type Flags = podpass_apiserver::ApiServerConfig;
    let line = CommandLine::<Flags>::new(&["apiserver"], false)
        .path(field!(Flags, data_dir), &l.data)
        .set(field!(Flags, secure_port), args.apiserver_port)
        .path(field!(Flags, admission_control_config_file), admission)
        // Who wrote what (a controller's writes name its own service account): a file of
        // its own, rotated by size.
        .path(field!(Flags, audit.audit_log_path), &l.logs.join(API_AUDIT_LOG))
        // As kubeadm runs it: a joining node authenticates with a bootstrap token.
        .set(field!(Flags, enable_bootstrap_token_auth), true)
        // …and then by the client certificate the cluster's CA signed for it.
        .path(field!(Flags, client_ca_file), &l.data.join("pki").join("ca.crt"))
        // Each node's serving certificate is the cluster's (serverTLSBootstrap): verified.
        .path(field!(Flags, kubelet_certificate_authority), &l.data.join("pki").join("ca.crt"))
        .build(CONTROL_PLANE)?;
    Ok(Part {
        name: CONTROL_PLANE.to_owned(),
        program: tools.podpass.clone(),
        args: line,
        log: l.logs.join("apiserver.log"),
        ready: Readiness::ApiServer { data: l.data.clone() },
        waiting_for: "its /readyz".to_owned(),
        restart: Restart::Always,
        after: Vec::new(),
    })
}

/// The controller manager's part: `podpass controller-manager` as
/// `system:kube-controller-manager`, each controller writing as its own service account.
pub(super) fn controller_manager(l: &Layout, tools: &Tools) -> Result<Part> {
    type Flags = podpass_controller_manager::Config;
    let user = "system:kube-controller-manager";
    let kubeconfig = identity_kubeconfig(&l.data, &l.data.join("controller-manager.kubeconfig"), user, &[])?;
    // As kubeadm runs it: the service-account key signs the legacy token Secrets, the
    // cluster CA goes into every namespace's `kube-root-ca.crt` and signs the nodes'
    // certificates.
    let line = CommandLine::<Flags>::new(&["controller-manager"], true)
        .path(field!(Flags, kubeconfig), &kubeconfig)
        .path(field!(Flags, service_account_private_key_file), &l.data.join("sa.key"))
        .path(field!(Flags, root_ca_file), &l.data.join("pki").join("ca.crt"))
        .path(field!(Flags, cluster_signing_cert_file), &l.data.join("pki").join("ca.crt"))
        .path(field!(Flags, cluster_signing_key_file), &l.data.join("pki").join("ca.key"))
        .set(field!(Flags, controllers), "*,bootstrapsigner,tokencleaner")
        .build(CONTROLLER_MANAGER)?;
    Ok(Part {
        name: CONTROLLER_MANAGER.to_owned(),
        program: tools.podpass.clone(),
        args: line,
        log: l.logs.join("controller-manager.log"),
        ready: Readiness::Lease {
            path: "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager".to_owned(),
        },
        waiting_for: "its leader lease".to_owned(),
        restart: Restart::Always,
        after: vec![CONTROL_PLANE.to_owned()],
    })
}

/// The scheduler's part: `podpass scheduler` as `system:kube-scheduler`.
pub(super) fn scheduler(l: &Layout, tools: &Tools) -> Result<Part> {
    type Flags = podpass_scheduler::Config;
    let kubeconfig = identity_kubeconfig(&l.data, &l.data.join("scheduler.kubeconfig"), "system:kube-scheduler", &[])?;
    let line = CommandLine::<Flags>::new(&["scheduler"], true)
        .path(field!(Flags, kubeconfig), &kubeconfig)
        .build(SCHEDULER)?;
    Ok(Part {
        name: SCHEDULER.to_owned(),
        program: tools.podpass.clone(),
        args: line,
        log: l.logs.join("scheduler.log"),
        ready: Readiness::Lease {
            path: format!(
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{}",
                podpass_scheduler::LEASE_NAME
            ),
        },
        waiting_for: "its leader lease".to_owned(),
        restart: Restart::Always,
        after: vec![CONTROL_PLANE.to_owned()],
    })
}

/// registry-auth's part, trusting the control plane's `issuer`.
pub(super) fn registry_auth(
    args: &UpArgs,
    l: &Layout,
    tools: &Tools,
    pki: &PartCertificates,
    issuer: &str,
    audit: &Path,
) -> Result<Part> {
    type Flags = podpass_registry_auth::Config;
    // A token naming a node is only taken from that node (its client certificate): a
    // captured or stolen pod token is worth nothing from elsewhere. The plugin and
    // containerd show the node's certificate; the embedded image store of a prepare-only
    // node (no tenant code runs there) cannot show one to the token realm, so that node
    // keeps `prefer` (a proof, when shown, must name the token's node).
    let binding = if tools.containers.is_some() { "require" } else { "prefer" };
    // The cluster's TokenReview: a signature alone would keep a deleted pod's token (and an
    // exchange token of a deleted service account) good until it expires.
    let reviewer = identity_kubeconfig(&l.data, &l.auth.join("reviewer.kubeconfig"), REVIEWER, &[])?;
    let line = CommandLine::<Flags>::new(&["registry-auth"], true)
        .set(field!(Flags, listen), format!("127.0.0.1:{}", args.registry_auth_port))
        .set(field!(Flags, issuers), issuer)
        .path(field!(Flags, issuer_ca), &l.data.join("pki/ca.crt"))
        .set(field!(Flags, audience), files::AUDIENCE)
        .path(field!(Flags, policy), &l.auth.join("policy.yaml"))
        .path(field!(Flags, signing_key), &l.auth.join("signer.key"))
        .set(field!(Flags, registry_service), files::REGISTRY_SERVICE)
        .set(field!(Flags, token_issuer), files::TOKEN_ISSUER)
        .path(field!(Flags, tls_cert_file), &pki.registry_auth.0)
        .path(field!(Flags, tls_private_key_file), &pki.registry_auth.1)
        .path(field!(Flags, client_ca_file), &pki.ca)
        .set(field!(Flags, node_binding), binding)
        .path(field!(Flags, token_review), &reviewer)
        // Its metrics only to whom the cluster allows `get /metrics` (as kube-scheduler's).
        .set(field!(Flags, metrics_auth), "delegated")
        // Its audit in a file of its own (rotated by size), not mixed into its log.
        .path(field!(Flags, audit.audit_log_path), audit)
        .build(REGISTRY_AUTH)?;
    Ok(Part {
        name: REGISTRY_AUTH.to_owned(),
        program: tools.podpass.clone(),
        args: line,
        log: l.logs.join("registry-auth.log"),
        ready: Readiness::Healthz { url: format!("https://127.0.0.1:{}/healthz", args.registry_auth_port) },
        waiting_for: "the issuer's keys".to_owned(),
        restart: Restart::Always,
        after: vec![CONTROL_PLANE.to_owned()],
    })
}

/// Starts containerd as a part (its files under the data dir), waits for its CRI, and
/// loads podpass's sandbox image; the endpoint for the node.
/// Where one node's containerd lives and how its part is named.
pub(super) struct ContainerdPart {
    name: String,
    dir: PathBuf,
    log: PathBuf,
}

impl ContainerdPart {
    /// Node `i`'s: node-1's is `containerd` (as a one-node cluster's always was), the
    /// others' `containerd node-<i>`.
    pub(super) fn for_node(i: u8, dir: PathBuf, logs: &Path) -> Self {
        let log = if i == 1 { logs.join("containerd.log") } else { logs.join(format!("containerd-node-{i}.log")) };
        Self { name: Self::part_name(i), dir, log }
    }

    /// Node `i`'s containerd part's name.
    pub(super) fn part_name(i: u8) -> String {
        if i == 1 { CONTAINERD.to_owned() } else { format!("{CONTAINERD} node-{i}") }
    }
}

/// A node's containerd, with podpass's sandbox image imported.
pub(super) async fn start_containerd(
    c: &ContainerTools,
    at: &ContainerdPart,
    tools: &Tools,
    registries: &[podpass_node::runtime::containerd::RegistryHost],
    parts: &mut Supervisor,
    out: &mut Checklist,
    probes: &Probes<'_>,
) -> Result<podpass_node::runtime::containerd::Layout> {
    use podpass_node::runtime::containerd;
    let layout = containerd::Layout::new(&at.dir);
    layout.write(&tools.podpass, registries)?;
    let part = Part {
        name: at.name.clone(),
        program: c.containerd.clone(),
        args: vec!["--config".to_owned(), path_str(&layout.config())],
        log: at.log.clone(),
        ready: Readiness::Cri { endpoint: layout.endpoint() },
        waiting_for: "its CRI socket".to_owned(),
        restart: Restart::Always,
        after: Vec::new(),
    };
    let (version, began) = launch(&part, parts, out, probes).await?;
    let archive = at.dir.join("sandbox-image.tar");
    std::fs::write(&archive, containerd::sandbox_image(&c.busybox)?).context("writing the sandbox image")?;
    containerd::import(&c.ctr, &layout.socket(), &archive, containerd::SANDBOX_IMAGE, READY_TIMEOUT).await?;
    out.done(&at.name, &format!("{version}   sandbox image {}", containerd::SANDBOX_IMAGE), began);
    Ok(layout)
}

/// The registry, with token auth against registry-auth: a part when podpass runs it,
/// waited for as well when it is the user's (`registry` is its URL and whether it is).
pub(super) async fn start_registry(
    args: &UpArgs,
    l: &Layout,
    tools: &Tools,
    pki: &PartCertificates,
    (registry_url, external_registry): (&str, bool),
    (parts, out): (&mut Supervisor, &mut Checklist),
    probes: &Probes<'_>,
) -> Result<()> {
    let realm = format!("https://127.0.0.1:{}/token", args.registry_auth_port);
    let challenge = Readiness::TokenChallenge { url: format!("{registry_url}/v2/") };
    let registry = match &tools.registry {
        Some(program) => {
            let signer = l.auth.join("signer.crt");
            files::write_registry_config(&l.registry, args.registry_port, &realm, &signer, &pki.registry)?;
            let part = Part {
                name: REGISTRY.to_owned(),
                program: program.clone(),
                args: vec!["serve".to_owned(), path_str(&l.registry.join("config.yml"))],
                log: l.logs.join("registry.log"),
                ready: challenge,
                waiting_for: "/v2/ to ask for a token".to_owned(),
                restart: Restart::Always,
                after: vec![REGISTRY_AUTH.to_owned()],
            };
            launch(&part, parts, out, probes).await.map(|(_, began)| began)
        }
        None => {
            let began = Instant::now();
            out.waiting(REGISTRY, &format!("{registry_url}/v2/ to ask for a token"));
            wait(parts, REGISTRY, || challenge.probe(probes)).await.map(|_| began)
        }
    };
    let began = registry.map_err(|e| {
        if external_registry {
            anyhow::anyhow!(
                "{e:#}\n  {registry_url} must use token auth against registry-auth; its config needs:\n{}",
                files::token_auth_block(&realm, &l.auth.join("signer.crt"))
            )
        } else {
            e
        }
    })?;
    out.done(REGISTRY, &format!("{registry_url}   token auth via registry-auth"), began);
    Ok(())
}
