//! `podpass node join`: kubeadm's `join` for a podpass node. The cluster is discovered
//! with a bootstrap token (the signed `cluster-info`, the CA's public key pinned) by
//! [`podpass_node::join`], the bootstrap kubeconfig written, and the node agent started on
//! it: the agent asks the cluster for its own client certificate (the kubelet's TLS
//! bootstrap) and registers the Node. Unless told of a container runtime (or to run no
//! containers), the node runs its own containerd beside the agent ([`crate::up::joined`]);
//! otherwise this process becomes `podpass node run`. The cluster's configuration for its
//! nodes (kubeadm's `kube-system/kubelet-config`, podpass's registry) is read with the token
//! and kept ([`node_files`]). This parses flags and prints a line per step.

mod node_files;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use podpass_api::GoDuration;

/// `podpass node join`'s flags (kubeadm's names).
#[derive(Debug, Args)]
pub struct JoinArgs {
    /// The API server, `https://host:port` or `host:port`.
    #[arg(long)]
    pub server: String,
    /// The bootstrap token (`podpass token create`), `[a-z0-9]{6}.[a-z0-9]{16}`.
    #[arg(long)]
    pub token: String,
    /// The cluster CA's public key pin, `sha256:<hex>` (repeatable: any may match).
    #[arg(long = "discovery-token-ca-cert-hash", required = true)]
    pub ca_cert_hashes: Vec<String>,
    /// How long discovery keeps asking for a signed `cluster-info` (Go duration).
    #[arg(long, default_value = "5m")]
    pub discovery_timeout: GoDuration,
    /// The node's files: its kubeconfigs, certificates (`pki/`) and root dir (`root/`).
    #[arg(long, default_value = "./podpass-node")]
    pub data_dir: PathBuf,
    /// The Node's name (default: this machine's host name).
    #[arg(long)]
    pub node_name: Option<String>,
    /// Further `podpass node run` flags, after `--` (ports, the container runtime, …).
    #[arg(last = true)]
    pub agent_args: Vec<String>,
}

/// This machine's host name, lowercased as the kubelet's default node name.
fn hostname() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(name.trim().to_lowercase()).filter(|n| !n.is_empty())
}

/// Discovers, writes the bootstrap kubeconfig, then becomes the node agent. Exit 64 for a
/// bad flag, 1 when discovery fails; otherwise the agent's exit status.
pub fn join(args: JoinArgs) -> ExitCode {
    let Some(timeout) = args.discovery_timeout.to_std().filter(|d| !d.is_zero()) else {
        eprintln!("error: --discovery-timeout {}: must be positive", args.discovery_timeout);
        return ExitCode::from(crate::EXIT_USAGE);
    };
    let Some(node) = args.node_name.clone().or_else(hostname) else {
        eprintln!("error: --node-name: this machine has no host name to default to; name the node");
        return ExitCode::from(crate::EXIT_USAGE);
    };
    let (kubeconfig, root) = (args.data_dir.join("kubeconfig"), args.data_dir.join("root"));
    let bootstrap = args.data_dir.join("bootstrap-kubeconfig");
    // Its own containerd, unless the agent is told of one or to run no containers; what
    // that needs is checked before anything is asked of the cluster.
    let own_runtime = !args.agent_args.iter().any(|a| {
        a == "--prepare-only" || a.starts_with("--prepare-only=") || a.starts_with("--container-runtime-endpoint")
    });
    let tools = if own_runtime {
        let fix = "or pass -- --container-runtime-endpoint unix://… of a running containerd, or -- --prepare-only for a node that prepares pods without running containers";
        match crate::up::container_tools("podpass node join", fix) {
            Ok(tools) => Some(tools),
            Err(line) => {
                eprintln!("error: {line}");
                return ExitCode::from(crate::EXIT_USAGE);
            }
        }
    } else {
        None
    };
    let paths = AgentPaths {
        node: &node,
        bootstrap: &bootstrap,
        kubeconfig: &kubeconfig,
        root: &root,
        data_dir: &args.data_dir,
    };
    // Joined before (a restart of this machine): the node's own certificate is all it
    // needs, whether or not the token is still in force.
    if podpass_node::join::holds_valid_client_certificate(&kubeconfig) {
        println!("[kubelet-start] {} holds this node's certificate: joined before, no discovery", kubeconfig.display());
        return run_node(&paths, tools, &args.agent_args);
    }
    let runtime = match crate::runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let discovered =
        runtime.block_on(podpass_node::join::discover(&args.server, &args.token, &args.ca_cert_hashes, timeout));
    let info = match discovered {
        Ok(info) => info,
        Err(e @ podpass_node::join::JoinError::Discovery(_)) | Err(e @ podpass_node::join::JoinError::Server(_)) => {
            eprintln!("error: {e}");
            return ExitCode::from(crate::EXIT_USAGE);
        }
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!(
                "  is the token in force (podpass token create) and the controller manager's bootstrap signer running?"
            );
            return ExitCode::FAILURE;
        }
    };
    let id = args.token.split('.').next().unwrap_or_default();
    println!(
        "[discovery] cluster-info from {} signed by token {id}, its CA pinned; API server {}",
        args.server, info.server
    );
    if let Err(e) = podpass_serve::durable::private_dir(&args.data_dir) {
        eprintln!("error: --data-dir {}: {e}", args.data_dir.display());
        return ExitCode::from(crate::EXIT_USAGE);
    }
    let text = podpass_node::join::bootstrap_kubeconfig(&info.server, &info.ca_pem, &args.token);
    if let Err(e) = podpass_serve::durable::replace(&bootstrap, text.as_bytes(), 0o600) {
        eprintln!("error: writing {}: {e}", bootstrap.display());
        return ExitCode::FAILURE;
    }
    println!("[kubelet-start] bootstrap kubeconfig written to {}", bootstrap.display());
    // kubeadm's download of the kubelet's configuration, with the same token.
    let configured = runtime.block_on(podpass_node::join::node_configuration(&info, &args.token));
    drop(runtime);
    let written = configured
        .map_err(|e| e.to_string())
        .and_then(|config| node_files::NodeFiles::new(&args.data_dir).write(&info.ca_pem, &config));
    match written {
        Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    run_node(&paths, tools, &args.agent_args)
}

/// Where the node's files are.
struct AgentPaths<'a> {
    node: &'a str,
    bootstrap: &'a std::path::Path,
    kubeconfig: &'a std::path::Path,
    root: &'a std::path::Path,
    data_dir: &'a std::path::Path,
}

/// The node: with `tools`, its own containerd and the agent on it, supervised
/// ([`crate::up::joined`]); otherwise this process becomes the agent.
fn run_node(paths: &AgentPaths<'_>, tools: Option<crate::up::ContainerTools>, extra: &[String]) -> ExitCode {
    let files = node_files::NodeFiles::new(paths.data_dir);
    let (args, registries) = match files.agent_flags(extra).and_then(|f| Ok((f, files.containerd_registries()?))) {
        Ok((flags, registries)) => (agent_args(paths, &flags, extra), registries),
        Err(line) => {
            eprintln!("error: {line}");
            return ExitCode::from(crate::EXIT_USAGE);
        }
    };
    let Some(tools) = tools else {
        println!(
            "[kubelet-start] starting the node agent as node {}: it asks the cluster for its client certificate, then registers",
            paths.node
        );
        return run_agent(&args);
    };
    let runtime = match crate::runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let node = crate::up::joined::JoinedNode {
        data_dir: paths.data_dir,
        node: paths.node,
        agent_args: args,
        registries,
        kubeconfig: paths.kubeconfig,
        tools,
    };
    match runtime.block_on(crate::up::joined::run(node)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `podpass node run`'s arguments as `node` on the bootstrap kubeconfig (TLS bootstrap,
/// and rotation of its client and serving certificates, on), then `configured` (from the
/// cluster's configuration), then `extra`.
fn agent_args(paths: &AgentPaths<'_>, configured: &[String], extra: &[String]) -> Vec<String> {
    let mut args: Vec<String> = ["node", "run", "--node-name", paths.node, "--rotate-certificates=true"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    // Its serving certificate the cluster's too (podpass's approver grants a serving
    // request for the node's own names and addresses).
    args.push("--rotate-server-certificates=true".to_owned());
    if paths.bootstrap.exists() {
        // An expired certificate is bootstrapped again with it, as the kubelet does.
        args.push("--bootstrap-kubeconfig".to_owned());
        args.push(paths.bootstrap.display().to_string());
    }
    for (flag, path) in [("--kubeconfig", paths.kubeconfig), ("--root-dir", paths.root)] {
        args.push(flag.to_owned());
        args.push(path.display().to_string());
    }
    args.extend(configured.iter().cloned());
    args.extend(extra.iter().cloned());
    args
}

/// Becomes `podpass node run` with `args` ([`agent_args`]); returns only if it cannot.
fn run_agent(args: &[String]) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let program = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: finding this program to run the node agent: {e}");
            return ExitCode::FAILURE;
        }
    };
    let err = std::process::Command::new(program).args(args).exec();
    eprintln!("error: starting the node agent: {err}");
    ExitCode::FAILURE
}
