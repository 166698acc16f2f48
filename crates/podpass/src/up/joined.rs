//! A node `podpass node join` runs with a containerd of its own, as `podpass up` runs each of
//! its nodes: containerd (its files under the join's data dir, podpass's sandbox image
//! imported) and the node agent on it, each a part under the same supervisor (a part
//! that exits is started again), until Ctrl-C stops them, the agent first and then its
//! pods' containers, so nothing is left running.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use podpass_node::runtime::containerd;

use super::part::Restart;
use super::supervisor::{Supervision, Supervisor};
use super::{ContainerTools, READY_TIMEOUT, on_path, stop_containers};

/// The agent's part name.
const AGENT: &str = "node agent";
/// containerd's part name.
const CONTAINERD: &str = "containerd";

/// What a joined node runs.
pub(crate) struct JoinedNode<'a> {
    /// The join's data dir (`containerd/`, `logs/`, `root/`).
    pub data_dir: &'a Path,
    /// The Node's name.
    pub node: &'a str,
    /// `podpass node run`'s arguments (the container runtime endpoint is added).
    pub agent_args: Vec<String>,
    /// How its containerd reaches the cluster's registry (`hosts.toml`).
    pub registries: Vec<containerd::RegistryHost>,
    /// Its kubeconfig, which holds the node's certificate once it has joined.
    pub kubeconfig: &'a Path,
    /// containerd, ctr and busybox.
    pub tools: ContainerTools,
}

/// Runs the node (containerd, then the agent on it) until Ctrl-C or a part that keeps
/// failing; one line per step on stdout.
pub(crate) async fn run(j: JoinedNode<'_>) -> Result<ExitCode> {
    let podpass = std::env::current_exe().context("finding the podpass binary")?;
    // containerd's configuration names absolute paths.
    let data_dir = std::fs::canonicalize(j.data_dir).with_context(|| j.data_dir.display().to_string())?;
    let logs = data_dir.join("logs");
    let dir = data_dir.join("containerd");
    for d in [&logs, &dir] {
        podpass_serve::durable::private_dir(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let layout = containerd::Layout::new(&dir);
    // The cluster's registry as the cluster said at the join; any other is containerd's
    // defaults or the operator's own `hosts.toml` under containerd/certs.d.
    layout.write(&podpass, &j.registries)?;
    let mut parts = Supervisor::new(on_path("setpriv"));
    let config = layout.config().display().to_string();
    let result = async {
        parts.spawn_with(CONTAINERD, &j.tools.containerd, &["--config".to_owned(), config], logs.join("containerd.log"), Restart::Always)?;
        let version = ready_runtime(&mut parts, &layout.endpoint()).await?;
        let archive = dir.join("sandbox-image.tar");
        std::fs::write(&archive, containerd::sandbox_image(&j.tools.busybox)?).context("writing the sandbox image")?;
        containerd::import(&j.tools.ctr, &layout.socket(), &archive, containerd::SANDBOX_IMAGE, READY_TIMEOUT).await?;
        println!(
            "[kubelet-start] containerd ({version}) runs this node's containers at {}; log {}",
            layout.endpoint(),
            logs.join("containerd.log").display()
        );
        let mut args = j.agent_args.clone();
        args.extend(["--container-runtime-endpoint".to_owned(), layout.endpoint()]);
        parts.spawn_with(AGENT, &podpass, &args, logs.join("node.log"), Restart::Always)?;
        println!(
            "[kubelet-start] node agent started as node {}: it asks the cluster for its client certificate, then registers; log {}",
            j.node,
            logs.join("node.log").display()
        );
        joined(&mut parts, j.kubeconfig).await
    }
    .await;
    let mut code = ExitCode::SUCCESS;
    match result {
        Ok(true) => println!(
            "[kubelet-start] this node has joined the cluster: its certificate is in {}",
            j.kubeconfig.display()
        ),
        Ok(false) => println!(
            "warning: no certificate for this node in {} s: is its request approved (kubectl get csr)? The agent keeps asking",
            READY_TIMEOUT.as_secs()
        ),
        Err(e) => {
            eprintln!("error: {e:#}");
            code = ExitCode::FAILURE;
        }
    }
    if code == ExitCode::SUCCESS {
        println!("node {} runs; Ctrl-C stops it (the same command later resumes it)", j.node);
        let shutdown = crate::shutdown_signal();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                event = parts.supervise() => match event {
                    Supervision::Restarting { report, delay } => {
                        println!("{report}\n  starting it again in {} s", delay.as_secs());
                    }
                    Supervision::Restarted { name } => println!("{name}: started again"),
                    Supervision::GaveUp { report } => {
                        eprintln!("error: {report}");
                        code = ExitCode::FAILURE;
                        break;
                    }
                },
                () = &mut shutdown => break,
            }
        }
    }
    // The agent first (it would start the containers again), then its pods' containers
    // (their shims outlive containerd), then containerd; the pods' tmpfs volumes last.
    let mut killed: Vec<String> = parts.stop_one(AGENT).await.into_iter().collect();
    if let Err(e) = stop_containers(&layout, j.node).await {
        eprintln!("warning: stopping the pods' containers: {e:#}");
    }
    killed.extend(parts.stop().await);
    if let Err(e) = podpass_node::unmount_all_under(&data_dir.join("root")) {
        eprintln!("warning: unmounting the pods' volumes: {e}");
    }
    if !killed.is_empty() {
        println!("stopped ({} did not stop within 10 s and were killed).", killed.join(", "));
    }
    Ok(code)
}

/// Waits until containerd's CRI answers; its name and version.
async fn ready_runtime(parts: &mut Supervisor, endpoint: &str) -> Result<String> {
    super::wait(parts, CONTAINERD, || async {
        let cri = podpass_node::runtime::CriRuntime::connect(endpoint).await.ok()?;
        let v = cri.version().await.ok()?;
        Some(format!("{} {}", v.runtime_name, v.runtime_version))
    })
    .await
}

/// Waits (at most [`READY_TIMEOUT`]) until `kubeconfig` holds the node's own unexpired
/// certificate (the TLS bootstrap done); whether it did. A part that exits meanwhile is an
/// error.
async fn joined(parts: &mut Supervisor, kubeconfig: &Path) -> Result<bool> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let path: PathBuf = kubeconfig.to_path_buf();
    loop {
        if let Some(report) = parts.exited() {
            anyhow::bail!("{report}");
        }
        let p = path.clone();
        if tokio::task::spawn_blocking(move || podpass_node::join::holds_valid_client_certificate(&p))
            .await
            .unwrap_or(false)
        {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
