//! `podpass up`: the whole product on one machine, on loopback, supervised in one process
//! tree — the control plane (embedded store), `podpass registry-auth` with the default
//! policy, the CNCF registry with token auth against it, a containerd of its own (as root;
//! `--prepare-only` goes without), and one node agent (`node-1`, running pods' containers on
//! that containerd, `podpass-credential-provider` in exchange mode). Each part is the same
//! command a user would run by hand; its log is in `<data-dir>/logs`. A second run on the
//! same data dir resumes the same cluster. `--demo` then tells the story ([`demo`]).

pub(crate) mod api;
mod checklist;
mod command_line;
mod core_parts;
mod demo;
pub(crate) mod files;
pub(crate) mod joined;
mod logs;
pub(crate) mod node;
mod node_config;
mod part;
mod push;
mod supervisor;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::json;

use api::Api;
use checklist::Checklist;
use core_parts::{CONTROL_PLANE, REGISTRY_AUTH};
use part::{Probes, launch};
use supervisor::{Supervision, Supervisor};

/// The node `podpass up` runs.
pub const NODE: &str = "node-1";
/// registry-auth's identity at the control plane (TokenReview, service-account checks).
const REVIEWER: &str = "podpass:registry-auth";
/// How long each part may take to come up.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Flags of `podpass up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Where the cluster lives: objects, keys, images, pull records, logs. A second run on
    /// the same directory resumes the same cluster.
    #[arg(long, default_value = "./podpass-data")]
    data_dir: PathBuf,
    /// Use a registry you run (`http://HOST:PORT`) instead of starting the CNCF registry;
    /// it must use token auth with registry-auth as its realm (the block is printed).
    #[arg(long, value_name = "URL")]
    registry: Option<String>,
    /// Then tell the story: a pod pulls with its own identity, a neighbour cannot use its
    /// image, the token and the pull record; exit 0 only if every step held.
    #[arg(long)]
    demo: bool,
    /// With --demo: leave the cluster up afterwards (until Ctrl-C) for exploring with kubectl.
    #[arg(long, requires = "demo")]
    keep: bool,
    /// The control plane's port.
    #[arg(long, default_value_t = 6443)]
    apiserver_port: u16,
    /// registry-auth's port.
    #[arg(long, default_value_t = 5003)]
    registry_auth_port: u16,
    /// The registry's port (when podpass up starts it).
    #[arg(long, default_value_t = 5000)]
    registry_port: u16,
    /// The node agent's /healthz port (its /metrics is on --node-port, to identities allowed
    /// `get nodes/metrics`).
    #[arg(long, default_value_t = podpass_node::DEFAULT_HEALTHZ_PORT)]
    node_healthz_port: u16,
    /// The node agent's HTTPS port (container logs for `kubectl logs`, and /metrics).
    #[arg(long, default_value_t = podpass_node::DEFAULT_PORT)]
    node_port: u16,
    /// How many nodes: node-1…node-N, each with its own containerd, image store, pull
    /// records and certificate, all joining through the TLS bootstrap. node-i listens on
    /// --node-healthz-port and --node-port plus 10·(i−1). A resumed cluster started with
    /// fewer keeps the others' Node objects, NotReady until they come back or are deleted.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=9))]
    nodes: u8,
    /// A node that prepares pods (tokens, volumes, images) but runs no containers: no
    /// containerd, no root needed.
    #[arg(long)]
    prepare_only: bool,
    /// A pull-through mirror or P2P cache (`http://HOST:PORT`) containerd tries before the
    /// cluster's registry. It proves nothing: the node still verifies every pull at the
    /// registry itself.
    #[arg(long, value_name = "URL", conflicts_with = "prepare_only")]
    registry_mirror: Option<String>,
    /// The node's hard eviction thresholds, as the kubelet's `--eviction-hard`
    /// (`memory.available<100Mi,nodefs.available<10%`); they replace upstream's defaults
    /// (memory 100Mi, nodefs 10%, nodefs inodes 5%, imagefs 15%, imagefs inodes 5%).
    #[arg(long, value_name = "SIGNAL<QUANTITY,...", value_parser = eviction_hard)]
    eviction_hard: Option<std::collections::BTreeMap<String, String>>,
    /// How long a pressure condition stays after its threshold was last met, as the
    /// kubelet's `--eviction-pressure-transition-period` (default 5m).
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    eviction_pressure_transition_period: Option<String>,
}

/// Said before anything starts when the data dir's filesystem is already past the node's
/// default disk thresholds (imagefs 15% free, inodes 5%): the node would report
/// `DiskPressure`, refuse new pods and evict, and the user should know why first.
fn disk_pressure_warning(data: &Path, thresholds_given: bool) -> Option<String> {
    if thresholds_given {
        return None;
    }
    let s = rustix::fs::statvfs(data).ok()?;
    let share = |free: u64, total: u64| if total == 0 { 100.0 } else { free as f64 * 100.0 / total as f64 };
    let (bytes, inodes) = (share(s.f_bavail, s.f_blocks), share(s.f_favail, s.f_files));
    (bytes < 15.0 || inodes < 5.0).then(|| {
        format!(
            "{}'s filesystem has {bytes:.1}% of its space and {inodes:.1}% of its inodes free: below the node's hard eviction thresholds (imagefs.available<15%, inodes<5%) it reports DiskPressure, refuses new pods and evicts running ones. Free some disk, or pass --eviction-hard (e.g. memory.available<100Mi,nodefs.available<5%)",
            data.display()
        )
    })
}

/// `--eviction-hard`, checked as the node will check it.
fn eviction_hard(text: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    let map = podpass_node::parse_eviction_hard_flag(text).map_err(|e| e.to_string())?;
    podpass_node::parse_eviction_hard(&map).map_err(|e| e.join("; "))?;
    Ok(map)
}

/// A Go duration (`5m`, `30s`).
fn go_duration(text: &str) -> Result<String, String> {
    podpass_api::duration::GoDuration::parse(text)
        .ok()
        .and_then(|d| d.to_std())
        .map(|_| text.to_owned())
        .ok_or_else(|| format!("{text:?} is not a non-negative duration (5m, 30s)"))
}

/// Runs `podpass up`: exit 0 on a clean stop (or a demo whose every step held), 1 when a
/// part failed or a demo step did not hold, 64 on bad flags.
pub fn run(args: UpArgs) -> ExitCode {
    let runtime = match crate::runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        match up(args).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        }
    })
}

/// Where each part's files are.
struct Layout {
    data: PathBuf,
    logs: PathBuf,
    auth: PathBuf,
    registry: PathBuf,
    node: PathBuf,
    containerd: PathBuf,
}

impl Layout {
    /// Node `i`'s directory (node-1's is `node-1/`, as a one-node cluster's always was).
    fn node_dir(&self, i: u8) -> PathBuf {
        self.data.join(node_name(i))
    }

    /// Node `i`'s containerd directory (node-1's is `containerd/`).
    fn containerd_dir(&self, i: u8) -> PathBuf {
        if i == 1 { self.containerd.clone() } else { self.node_dir(i).join("containerd") }
    }

    fn new(data: PathBuf) -> Layout {
        Layout {
            logs: data.join("logs"),
            auth: data.join("registry-auth"),
            registry: data.join("registry"),
            node: data.join(NODE),
            containerd: data.join("containerd"),
            data,
        }
    }
}

/// Node `i`'s name.
fn node_name(i: u8) -> String {
    format!("node-{i}")
}

/// A running node: what stopping it needs.
pub struct RunningNode {
    name: String,
    root: PathBuf,
    runtime: Option<podpass_node::runtime::containerd::Layout>,
}

/// What the demo needs to know about the running cluster.
pub struct Running {
    api: Api,
    /// The registry's `host:port`.
    registry_host: String,
    /// The registry's base URL.
    registry_url: String,
    /// registry-auth's base URL.
    auth_url: String,
    /// An HTTP client trusting the cluster's CA (registry-auth, the registry).
    http: reqwest::Client,
    /// The node's root dir.
    node_root: PathBuf,
    /// registry-auth's audit log (one JSON decision per line).
    auth_audit: PathBuf,
    /// The API server's audit log (one JSON event per line).
    api_audit: PathBuf,
    /// node-1's containerd, when the nodes run containers.
    runtime: Option<podpass_node::runtime::containerd::Layout>,
    /// Every node, node-1 first.
    nodes: Vec<RunningNode>,
}

async fn up(args: UpArgs) -> Result<ExitCode> {
    // Every Secret, key and private image of the cluster lives here: 0700, as etcd's.
    let loose = podpass_serve::durable::private_dir(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let data = std::fs::canonicalize(&args.data_dir).with_context(|| args.data_dir.display().to_string())?;
    let l = Layout::new(data);
    // One `podpass up` per data dir: the lock is held (by the open file) until exit.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(l.data.join("up.lock"))
        .context("opening up.lock")?;
    if lock.try_lock().is_err() {
        bail!(
            "another `podpass up` is running on {}: stop it first (Ctrl-C), or pass another --data-dir",
            l.data.display()
        );
    }
    let resuming = l.data.join("tokens.csv").exists();
    let (registry_url, external_registry) = match &args.registry {
        Some(u) => (u.trim_end_matches('/').to_owned(), true),
        // podpass's own registry serves TLS from the cluster's CA: tokens never cross
        // loopback in clear.
        None => (format!("https://127.0.0.1:{}", args.registry_port), false),
    };
    let registry_host = registry_host(&registry_url)?;
    if let Some(m) = &args.registry_mirror
        && !(m.starts_with("http://") || m.starts_with("https://"))
    {
        bail!("--registry-mirror {m:?}: must be http://HOST:PORT or https://HOST:PORT");
    }
    let tools = preflight(&args, external_registry)?;
    let mut warnings: Vec<String> = loose.into_iter().collect();
    let node_dirs: Vec<PathBuf> = (2..=args.nodes).flat_map(|i| [l.node_dir(i), l.containerd_dir(i)]).collect();
    for d in [&l.logs, &l.auth, &l.registry, &l.node, &l.containerd].into_iter().chain(&node_dirs) {
        warnings.extend(podpass_serve::durable::private_dir(d).with_context(|| format!("creating {}", d.display()))?);
        // tmp files of writes a killed run left (`durable::replace`)
        podpass_serve::durable::remove_stale_tmp(d);
    }
    podpass_serve::durable::remove_stale_tmp(&l.data);
    warnings.extend(disk_pressure_warning(&l.data, args.eviction_hard.is_some()));
    for w in &warnings {
        eprintln!("warning: {w}");
    }

    let mut out = Checklist::new(std::io::stdout().is_terminal());
    out.say(&format!(
        "podpass up: {} cluster in {}",
        if resuming { "resuming the" } else { "a new" },
        l.data.display()
    ));
    let mut parts = Supervisor::new(on_path("setpriv"));
    let result = start(&args, &l, &tools, &registry_url, &registry_host, external_registry, &mut parts, &mut out).await;
    let running = match result {
        Ok(r) => r,
        Err(e) => {
            out.fail();
            parts.stop().await;
            for i in 1..=args.nodes {
                let _ = podpass_node::unmount_all_under(&l.node_dir(i).join("root"));
            }
            return Err(e);
        }
    };
    out.say("");
    out.say(&format!("export KUBECONFIG={}", l.data.join("admin.kubeconfig").display()));
    let node_names: Vec<&str> = running.nodes.iter().map(|n| n.name.as_str()).collect();
    let node_names = node_names.join(",");
    out.say(&format!(
        "logs: {}/{{apiserver,controller-manager,scheduler,registry-auth,{}{node_names}}}.log; audit: {{apiserver,registry-auth,{node_names}}}-audit.log",
        l.logs.display(),
        if external_registry { "" } else { "registry," }
    ));
    match node::join_command(&l.data, &running.api).await {
        Ok(line) => out.say(&format!("another node joins with (its token lives 24 h): {line}")),
        Err(e) => out.say(&format!("warning: no join command: {e:#}")),
    }

    let mut code = ExitCode::SUCCESS;
    if args.demo {
        out.say("");
        let held = tokio::select! {
            r = demo::run(&running, &mut out) => r,
            report = parts.any_exit() => Err(anyhow::anyhow!("{report}")),
            () = crate::shutdown_signal() => Err(anyhow::anyhow!("interrupted")),
        };
        match held {
            Ok(()) => out.say("demo: every step held."),
            Err(e) => {
                out.say(&format!("demo: FAILED: {e:#}"));
                code = ExitCode::from(1);
            }
        }
        if !args.keep {
            stop(&mut parts, &mut out, &running.nodes).await;
            return Ok(code);
        }
        out.say("");
    }
    out.say("up; Ctrl-C stops every part (a later `podpass up` on this data dir resumes).");
    // A part that exits is started again by itself; only one that keeps exiting ends `up`.
    let shutdown = crate::shutdown_signal();
    tokio::pin!(shutdown);
    let failed = loop {
        tokio::select! {
            event = parts.supervise() => match event {
                Supervision::Restarting { report, delay } => {
                    out.say(&format!("{report}\n  starting it again in {} s", delay.as_secs()));
                }
                Supervision::Restarted { name } => out.say(&format!("{name}: started again")),
                Supervision::GaveUp { report } => break Some(report),
            },
            () = &mut shutdown => break None,
        }
    };
    if let Some(report) = &failed {
        eprintln!("error: {report}");
        code = ExitCode::from(1);
    }
    stop(&mut parts, &mut out, &running.nodes).await;
    Ok(code)
}

async fn stop(parts: &mut Supervisor, out: &mut Checklist, nodes: &[RunningNode]) {
    // The containers the nodes started are stopped too (their shims outlive containerd),
    // once their node is (it would start them again); a later `podpass up` starts them
    // again for the pods still there.
    let mut killed: Vec<String> = Vec::new();
    for node in nodes {
        let Some(layout) = &node.runtime else { continue };
        killed.extend(parts.stop_one(&format!("node {}", node.name)).await);
        match stop_containers(layout, &node.name).await {
            Ok(0) => {}
            Ok(n) => out.say(&format!("stopped the containers of {n} pods on {}", node.name)),
            Err(e) => eprintln!("warning: stopping the pods' containers on {}: {e:#}", node.name),
        }
    }
    killed.extend(parts.stop().await);
    // The pods' secret and projected volumes are tmpfs mounts: gone with the node, so the
    // data dir holds no mount (and can be removed); a later `up` mounts and writes them
    // again, with fresh tokens.
    for node in nodes {
        if let Err(e) = podpass_node::unmount_all_under(&node.root) {
            eprintln!("warning: unmounting the pods' volumes on {}: {e}", node.name);
        }
    }
    if killed.is_empty() {
        out.say("stopped.");
    } else {
        out.say(&format!("stopped ({} did not stop within 10 s and were killed).", killed.join(", ")));
    }
}

/// Stops and removes every sandbox (with its containers) node `name` started; how many.
async fn stop_containers(layout: &podpass_node::runtime::containerd::Layout, name: &str) -> Result<usize> {
    let cri = podpass_node::runtime::CriRuntime::connect(&layout.endpoint()).await?;
    let ours = std::collections::HashMap::from([(podpass_node::runtime::NODE_LABEL.to_owned(), name.to_owned())]);
    Ok(cri.remove_pods(ours, 10).await?)
}

/// The programs `podpass up` runs.
struct Tools {
    podpass: PathBuf,
    /// The directory holding `podpass-credential-provider` (the kubelet's bin dir).
    plugin_dir: PathBuf,
    registry: Option<PathBuf>,
    /// containerd, ctr and Debian's static busybox, when the node runs containers.
    containers: Option<ContainerTools>,
}

/// What running containers needs.
pub(crate) struct ContainerTools {
    /// The containerd binary.
    pub containerd: PathBuf,
    /// containerd's `ctr` (image import).
    pub ctr: PathBuf,
    /// Debian's static busybox (the sandbox and demo images).
    pub busybox: Vec<u8>,
}

/// Whether this machine can run containers, or the one line saying why not: what to install,
/// or that `command` needs root, then `fix` (the way around it).
pub(crate) fn container_tools(command: &str, fix: &str) -> Result<ContainerTools, String> {
    if !rustix::process::geteuid().is_root() {
        return Err(format!("running containers needs root (containerd and runc): run {command} as root, {fix}"));
    }
    let mut missing = Vec::new();
    let (containerd, ctr) = (on_path("containerd"), on_path("ctr"));
    if containerd.is_none() || ctr.is_none() {
        missing.push("containerd");
    }
    for tool in ["nsenter", "ip"] {
        if on_path(tool).is_none()
            && !Path::new("/usr/sbin").join(tool).exists()
            && !Path::new("/sbin").join(tool).exists()
        {
            missing.push(if tool == "ip" { "iproute2" } else { "util-linux" });
        }
    }
    let busybox = std::fs::read("/bin/busybox").ok();
    if busybox.is_none() {
        missing.push("busybox-static");
    }
    match (containerd, ctr, busybox) {
        (Some(containerd), Some(ctr), Some(busybox)) if missing.is_empty() => {
            Ok(ContainerTools { containerd, ctr, busybox })
        }
        _ => Err(format!(
            "running containers needs {}: apt-get install {}, {fix}",
            missing.join(", "),
            missing.join(" ")
        )),
    }
}

/// Everything that would stop a part from starting, all at once, each a line saying what
/// to do; nothing has started yet.
fn preflight(args: &UpArgs, external_registry: bool) -> Result<Tools> {
    let mut problems = Vec::new();
    let mut ports = vec![
        ("--apiserver-port", args.apiserver_port, "the control plane"),
        ("--registry-auth-port", args.registry_auth_port, "registry-auth"),
        ("--node-healthz-port", args.node_healthz_port, "the node agent"),
        ("--node-port", args.node_port, "the node agent's HTTPS server"),
    ];
    if !external_registry {
        ports.push(("--registry-port", args.registry_port, "the registry"));
    }
    let mut seen = std::collections::BTreeMap::new();
    for (flag, port, what) in &ports {
        if let Some(other) = seen.insert(*port, *flag) {
            problems.push(format!("{flag} and {other} are both {port}: give each part its own port"));
        } else if let Err(e) = std::net::TcpListener::bind(("127.0.0.1", *port)) {
            problems.push(format!(
                "port {port} ({what}) on 127.0.0.1: {e}: stop what holds it, or pick another with {flag}"
            ));
        }
    }
    let podpass = std::env::current_exe().context("finding the podpass binary")?;
    let plugin_dir = credential_provider_dir(&podpass).map_err(|p| problems.push(p)).ok();
    let registry = if external_registry { None } else { on_path("docker-registry") };
    if !external_registry && registry.is_none() {
        problems.push(
            "docker-registry (the CNCF registry) not found on PATH: apt-get install docker-registry, or pass --registry URL of one you run"
                .to_owned(),
        );
    }
    let fix = "or pass --prepare-only for a node that prepares pods without running containers";
    let containers =
        if args.prepare_only { None } else { container_tools("podpass up", fix).map_err(|p| problems.push(p)).ok() };
    if !problems.is_empty() {
        bail!("{}", problems.join("\nerror: "));
    }
    Ok(Tools { podpass, plugin_dir: plugin_dir.unwrap_or_default(), registry, containers })
}

/// The directory of `podpass-credential-provider` (the kubelet's
/// `--image-credential-provider-bin-dir`): beside `podpass`, or on PATH; otherwise the line
/// saying how to get it.
pub(crate) fn credential_provider_dir(podpass: &Path) -> Result<PathBuf, String> {
    let plugin = "podpass-credential-provider";
    let dir = if podpass.with_file_name(plugin).is_file() {
        podpass.parent().map(Path::to_path_buf)
    } else {
        on_path(plugin).and_then(|p| p.parent().map(Path::to_path_buf))
    };
    dir.ok_or_else(|| {
        format!(
            "{plugin} not found beside {} nor on PATH: cargo install --path crates/{plugin} (or cargo build -p {plugin})",
            podpass.display()
        )
    })
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

/// `host:port` of an `http(s)://host:port` registry URL.
fn registry_host(url: &str) -> Result<String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .with_context(|| format!("--registry {url:?}: must be http://HOST:PORT or https://HOST:PORT"))?;
    if rest.is_empty() || rest.contains('/') {
        bail!("--registry {url:?}: must be http://HOST:PORT or https://HOST:PORT, without a path");
    }
    Ok(rest.to_owned())
}

fn path_str(p: &Path) -> String {
    p.display().to_string()
}

#[allow(clippy::too_many_arguments)]
async fn start(
    args: &UpArgs,
    l: &Layout,
    tools: &Tools,
    registry_url: &str,
    registry_host: &str,
    external_registry: bool,
    parts: &mut Supervisor,
    out: &mut Checklist,
) -> Result<Running> {
    // 1. The control plane.
    let _ = std::fs::remove_file(l.data.join("server-url"));
    let admission = l.data.join("admission.yaml");
    files::write_admission_config(&admission)?;
    let first = Probes { client: None, api: None };
    let (_, began) = launch(&core_parts::control_plane(args, l, tools, &admission)?, parts, out, &first).await?;
    let api = Api::from_data_dir(&l.data)?;
    let client = cluster_http_client(&l.data, Duration::from_secs(5))?;
    bootstrap(&api, &l.data.join("pki").join("ca.crt")).await?;
    let discovery = api.get_ok("/.well-known/openid-configuration").await?;
    let issuer =
        discovery["issuer"].as_str().context("the control plane's discovery document has no issuer")?.to_owned();
    out.done(CONTROL_PLANE, &format!("{}   issuer {issuer}", api.url), began);
    let probes = Probes { client: Some(&client), api: Some(&api) };

    // The controller manager: kube-controller-manager's controllers (workloads, each
    // namespace's account and root CA, quotas, namespace deletion, garbage collection),
    // through the API as the controllers' own service accounts.
    let (leader, began) = launch(&core_parts::controller_manager(l, tools)?, parts, out, &probes).await?;
    let controllers = podpass_controller_manager::CONTROLLERS.len();
    out.done(core_parts::CONTROLLER_MANAGER, &format!("leader {leader}   {controllers} controllers"), began);
    let (leader, began) = launch(&core_parts::scheduler(l, tools)?, parts, out, &probes).await?;
    out.done(core_parts::SCHEDULER, &format!("leader {leader}   {}", podpass_scheduler::SCHEDULER_NAME), began);

    // 2. registry-auth, trusting the control plane's issuer. It, the registry and the
    // node's client identity get certificates from the cluster's CA: no credential crosses
    // a socket in clear, loopback included (a hostNetwork pod could capture `lo`).
    files::ensure_registry_auth_files(&l.auth)?;
    let pki = issue_part_certificates(&l.data.join("pki"))?;
    let auth_url = format!("https://127.0.0.1:{}", args.registry_auth_port);
    let auth_audit = l.logs.join("registry-auth-audit.log");
    let auth = core_parts::registry_auth(args, l, tools, &pki, &issuer, &auth_audit)?;
    let (_, began) = launch(&auth, parts, out, &probes).await?;
    let policy = path_str(&l.auth.join("policy.yaml"));
    out.done(REGISTRY_AUTH, &format!("{auth_url}   pods of each namespace may pull <namespace>/* ({policy})"), began);

    // 3. The registry, with token auth against registry-auth.
    core_parts::start_registry(
        args,
        l,
        tools,
        &pki,
        (registry_url, external_registry),
        (&mut *parts, &mut *out),
        &probes,
    )
    .await?;

    // What a node joining later reads (kubeadm's `kube-system/kubelet-config`, and the
    // registry): the same configuration as this run's nodes.
    let eviction = files::EvictionSettings {
        hard: args.eviction_hard.clone(),
        transition_period: args.eviction_pressure_transition_period.clone(),
    };
    let registry_config = podpass_node::join::RegistryConfig {
        host: registry_host.to_owned(),
        exchange_url: auth_url.clone(),
        transport: registry_transport(registry_url, external_registry),
    };
    node_config::publish(&api, &files::kubelet_config_text(&eviction), Some(&registry_config)).await?;

    // 4. Each node: its containerd (with podpass's sandbox image and pod network) when the
    // nodes run containers, its identity, its credential provider, the agent.
    // Each node's containerd shows registry-auth that node's own certificate.
    let registries = |node_dir: &Path| -> Result<Vec<podpass_node::runtime::containerd::RegistryHost>> {
        let transport = registry_transport(registry_url, external_registry);
        let mut registries = containerd_registries(registry_host, transport, &pki.ca, node_dir);
        if let Some(mirror) = &args.registry_mirror {
            use podpass_node::runtime::containerd::RegistryHost;
            let origin =
                registries.pop().context("--registry-mirror: the registry is not containerd's to configure")?;
            registries.push(RegistryHost::Mirrored {
                mirror: mirror.trim_end_matches('/').to_owned(),
                origin: Box::new(origin),
            });
        }
        Ok(registries)
    };
    let ctx = node::Cluster {
        data: &l.data,
        logs: &l.logs,
        tools,
        pki: &pki,
        registry_host,
        auth_url: &auth_url,
        external_registry,
    };
    let mut nodes = Vec::new();
    for i in 1..=args.nodes {
        let name = node_name(i);
        let runtime = match &tools.containers {
            Some(c) => {
                let containerd = core_parts::ContainerdPart::for_node(i, l.containerd_dir(i), &l.logs);
                let registries = registries(&l.node_dir(i))?;
                Some(core_parts::start_containerd(c, &containerd, tools, &registries, parts, out, &probes).await?)
            }
            None => None,
        };
        let offset = 10 * u16::from(i - 1);
        let ports = |port: u16, flag: &str| {
            port.checked_add(offset).with_context(|| format!("{flag} {port} leaves no port for {name}"))
        };
        let node = node::NodePart {
            name: name.clone(),
            healthz_port: ports(args.node_healthz_port, "--node-healthz-port")?,
            port: ports(args.node_port, "--node-port")?,
            dir: l.node_dir(i),
            eviction: eviction.clone(),
            runtime: runtime.clone(),
            containerd_part: core_parts::ContainerdPart::part_name(i),
            // node-1 where a one-node cluster always had its pods; each other below its own.
            cgroup_root: (i > 1).then(|| format!("/podpass/{name}")),
        };
        node::start(&node, &ctx, parts, out, &probes).await?;
        nodes.push(RunningNode { name, root: node.root(), runtime });
    }
    Ok(Running {
        api,
        registry_host: registry_host.to_owned(),
        registry_url: registry_url.to_owned(),
        auth_url,
        http: cluster_http_client(&l.data, Duration::from_secs(30))?,
        node_root: l.node.join("root"),
        auth_audit,
        api_audit: l.logs.join(core_parts::API_AUDIT_LOG),
        runtime: nodes.first().and_then(|n| n.runtime.clone()),
        nodes,
    })
}

/// Polls `probe` every 200 ms until it answers, a part exits, or [`READY_TIMEOUT`].
async fn wait<T, F, Fut>(parts: &mut Supervisor, what: &str, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(report) = parts.exited() {
            bail!("{report}");
        }
        if let Some(v) = probe().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("{what} was not ready after {} s; see its log in the logs directory", READY_TIMEOUT.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The cluster objects `podpass up` needs (created once; a resumed cluster has them):
/// registry-auth may read the issuer's discovery documents anonymously (upstream's
/// `system:service-account-issuer-discovery`, bound as the upstream docs suggest for a
/// relying party outside the cluster), and nodes may request tokens for registry-auth's
/// audience (upstream's verb `request-serviceaccounts-token-audience`); registry-auth may
/// review tokens and read service accounts.
async fn bootstrap(api: &Api, ca: &Path) -> Result<()> {
    let crb = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
    api.ensure(
        crb,
        &binding(
            "podpass:anonymous-issuer-discovery",
            "system:service-account-issuer-discovery",
            "system:unauthenticated",
        ),
    )
    .await?;
    api.ensure(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "podpass:registry-auth-audience"},
                "rules": [{"verbs": ["request-serviceaccounts-token-audience"], "apiGroups": [""],
                           "resources": [files::AUDIENCE]}]}),
    )
    .await?;
    api.ensure(crb, &binding("podpass:nodes-registry-auth-audience", "podpass:registry-auth-audience", "system:nodes"))
        .await?;
    // registry-auth reviews tokens (upstream's advice for a delegated authenticator) and
    // checks that an exchange token's service account, and pod, still exist with their UIDs.
    let user_binding = |name: &str, role: &str| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": REVIEWER}]})
    };
    api.ensure(crb, &user_binding("podpass:registry-auth-token-review", "system:auth-delegator")).await?;
    // …and follows the revoked tokens and the deletions (metadata), to refuse those tokens
    // (and exchange tokens made from them) at once.
    let reviewer_rules = json!([
        {"verbs": ["get"], "apiGroups": [""], "resources": ["serviceaccounts", "pods"]},
        {"verbs": ["list", "watch"], "apiGroups": [""], "resources": ["serviceaccounts", "pods", "nodes"]},
        {"verbs": ["list", "watch"], "apiGroups": ["revocation.podpass.dev"], "resources": ["revokedtokens"]}]);
    api.ensure(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "podpass:registry-auth-service-accounts"},
                "rules": reviewer_rules}),
    )
    .await?;
    // A cluster from an earlier run: the role gains `pods` and the revocations.
    api.merge_patch(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/podpass:registry-auth-service-accounts",
        &json!({"rules": reviewer_rules}),
    )
    .await?;
    api.ensure(crb, &user_binding("podpass:registry-auth-service-accounts", "podpass:registry-auth-service-accounts"))
        .await?;
    node_bootstrap_bindings(api).await?;
    cluster_info(api, ca).await
}

/// A ClusterRoleBinding of `role` to `group`.
fn binding(name: &str, role: &str, group: &str) -> serde_json::Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
           "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]})
}

/// kubeadm's bindings for joining nodes (`kubeadm init phase bootstrap-token`): the default
/// node token's group may ask for node client certificates and have them approved; nodes
/// may have their own renewals approved.
pub(crate) async fn node_bootstrap_bindings(api: &Api) -> Result<()> {
    let crb = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
    let node_group = podpass_api::bootstrap_token::NODE_GROUP;
    for (name, role, group) in [
        ("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", node_group),
        (
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            node_group,
        ),
        (
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "system:nodes",
        ),
    ] {
        api.ensure(crb, &binding(name, role, group)).await?;
    }
    Ok(())
}

/// What kubeadm's `bootstrap-token` phase writes for nodes to join: `kube-public/cluster-info`
/// (a kubeconfig naming the server and its CA, no user; the bootstrap signer signs it with
/// each bootstrap token) and its Role letting anyone read it, signed, before they trust the
/// cluster.
async fn cluster_info(api: &Api, ca: &Path) -> Result<()> {
    use podpass_api::bootstrap_token::{CLUSTER_INFO, KUBECONFIG_KEY, PUBLIC_NAMESPACE};
    let ca = std::fs::read(ca).with_context(|| format!("reading the cluster CA {}", ca.display()))?;
    let kubeconfig = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: {}\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\npreferences: {{}}\nusers: null\n",
        data_encoding::BASE64.encode(&ca),
        api.url
    );
    api.ensure(
        &format!("/api/v1/namespaces/{PUBLIC_NAMESPACE}/configmaps"),
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CLUSTER_INFO},
                "data": {KUBECONFIG_KEY: kubeconfig}}),
    )
    .await?;
    let name = "kubeadm:bootstrap-signer-clusterinfo";
    api.ensure(
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{PUBLIC_NAMESPACE}/roles"),
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name},
                "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"],
                           "resourceNames": [CLUSTER_INFO]}]}),
    )
    .await?;
    api.ensure(
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{PUBLIC_NAMESPACE}/rolebindings"),
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:anonymous"}]}),
    )
    .await
}

/// How containerd reaches the cluster's registry at `host` over `transport`: podpass's own
/// (and registry-auth, its token realm) verified against the cluster's CA `ca`, containerd
/// showing the node's certificate (under `node_dir`; registry-auth's proof that a node-bound
/// credential comes from its node); a plain-HTTP one as it is; another left to containerd's
/// defaults. `podpass up`'s nodes and joined ones alike.
pub(crate) fn containerd_registries(
    host: &str,
    transport: podpass_node::join::RegistryTransport,
    ca: &Path,
    node_dir: &Path,
) -> Vec<podpass_node::runtime::containerd::RegistryHost> {
    use podpass_node::join::RegistryTransport;
    use podpass_node::runtime::containerd::RegistryHost;
    let host = host.to_owned();
    match transport {
        RegistryTransport::Http => vec![RegistryHost::PlainHttp(host)],
        RegistryTransport::ClusterCa => {
            let certificate = node_certificate(node_dir);
            vec![RegistryHost::Tls { host, ca: ca.to_path_buf(), client: Some((certificate.clone(), certificate)) }]
        }
        RegistryTransport::System => Vec::new(),
    }
}

/// How containerd reaches the cluster's registry (see [`containerd_registries`]): for
/// `podpass up`'s nodes and what a joining node is told.
fn registry_transport(registry_url: &str, external_registry: bool) -> podpass_node::join::RegistryTransport {
    use podpass_node::join::RegistryTransport;
    if registry_url.starts_with("http://") {
        RegistryTransport::Http
    } else if !external_registry {
        RegistryTransport::ClusterCa
    } else {
        RegistryTransport::System
    }
}

/// The certificates `podpass up` issues its parts from the cluster's CA at every start.
pub struct PartCertificates {
    /// The CA bundle.
    pub ca: PathBuf,
    /// registry-auth's serving certificate and key.
    pub registry_auth: (PathBuf, PathBuf),
    /// The registry's serving certificate and key.
    pub registry: (PathBuf, PathBuf),
}

/// Node `node_dir`'s own client certificate and key, one file (`system:node:<name>` in
/// `system:nodes`, from its TLS bootstrap and rotated by it: `root/pki/
/// kubelet-client-current.pem`), which its credential plugin, its containerd and its own
/// registry checks show registry-auth as the node's proof.
pub(crate) fn node_certificate(node_dir: &Path) -> PathBuf {
    podpass_node::CertificateStore::new(&node_dir.join("root").join("pki"), podpass_node::CLIENT_PREFIX).current_path()
}

/// Issues [`PartCertificates`] into the control plane's `pki` directory.
fn issue_part_certificates(pki: &Path) -> Result<PartCertificates> {
    use podpass_apiserver::{CertificateRequest, CertificateUse, issue_certificate};
    let loopback = [std::net::IpAddr::from([127, 0, 0, 1]), std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST)];
    let server = |file_stem, common_name| CertificateRequest {
        file_stem,
        common_name,
        organizations: &[],
        dns_names: &["localhost"],
        ips: &loopback,
        usage: CertificateUse::Server,
    };
    for request in [server("registry-auth", "podpass-registry-auth"), server("registry", "podpass-registry")] {
        issue_certificate(pki, &request).with_context(|| format!("issuing the {} certificate", request.file_stem))?;
    }
    let pair = |stem: &str| (pki.join(format!("{stem}.crt")), pki.join(format!("{stem}.key")));
    Ok(PartCertificates { ca: pki.join("ca.crt"), registry_auth: pair("registry-auth"), registry: pair("registry") })
}

/// An HTTP client trusting the cluster's CA beside the system's roots.
fn cluster_http_client(data: &Path, timeout: Duration) -> Result<reqwest::Client> {
    let ca = std::fs::read(data.join("pki/ca.crt")).context("reading pki/ca.crt")?;
    let ca = reqwest::Certificate::from_pem(&ca).context("pki/ca.crt")?;
    reqwest::Client::builder().add_root_certificate(ca).timeout(timeout).build().context("HTTP client")
}

/// A kubeconfig at `path` for `user` in `groups`, made once and kept while the control
/// plane's URL is the same.
fn identity_kubeconfig(data: &Path, path: &Path, user: &str, groups: &[String]) -> Result<PathBuf> {
    let server = std::fs::read_to_string(data.join("server-url")).context("reading server-url")?;
    let current = std::fs::read_to_string(path).unwrap_or_default();
    if !current.contains(&format!("server: {}\n", server.trim())) {
        let k = crate::apiserver::add_identity(data, user, groups)?;
        podpass_apiserver::write_atomic(path, k.as_bytes(), 0o600, true)?;
    }
    Ok(path.to_path_buf())
}
