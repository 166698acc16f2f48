//! Hollow nodes, as kubemark's hollow kubelet: the node agent's own code — the TLS
//! bootstrap, registration, Lease heartbeats and status, the pod watch, volumes and their
//! tokens, image decisions, the CRI client and its PLEG, pod status writes — against a
//! [`SimulatedRuntime`] that starts nothing. Many run in one process, so one machine can
//! hold a thousand nodes' worth of load on the control plane.
//!
//! A bench tool (`podpass bench cluster`): what a hollow node reports is what the
//! simulation made up, so it never judges correctness. It differs from a real node in what
//! only the machine would feel: volumes are plain directories (no tmpfs), and pods get no
//! in-cluster relay and no cgroups.

mod runtime;

use std::path::PathBuf;

pub use runtime::{ServeError, SimulatedRuntime, listen};

use crate::AgentConfig;

/// One hollow node.
#[derive(Debug, Clone)]
pub struct HollowNode {
    /// The Node's name.
    pub name: String,
    /// Its own directory (root dir, certificates, the runtime's socket).
    pub dir: PathBuf,
    /// A bootstrap token's kubeconfig (the TLS bootstrap asks for the node's certificate).
    pub bootstrap_kubeconfig: PathBuf,
    /// Which `10.x.0.0/16` its pods' addresses come from.
    pub subnet: u16,
}

/// Why a hollow node stopped.
#[derive(Debug, thiserror::Error)]
pub enum HollowError {
    /// Its flags did not validate.
    #[error("hollow node {node}: {message}")]
    Config {
        /// The node.
        node: String,
        /// What was wrong.
        message: String,
    },
    /// Its directory could not be made.
    #[error("hollow node {node}: {source}")]
    Dir {
        /// The node.
        node: String,
        /// Why.
        source: std::io::Error,
    },
    /// The agent failed.
    #[error("hollow node {node}: {source}")]
    Agent {
        /// The node.
        node: String,
        /// Why.
        source: crate::AgentError,
    },
    /// Its runtime failed.
    #[error("hollow node {node}: {source}")]
    Runtime {
        /// The node.
        node: String,
        /// Why.
        source: ServeError,
    },
}

impl HollowNode {
    /// The agent's configuration: the kubelet's flags for a node with no ports of its own,
    /// on the simulated runtime at `socket`, taking the runtime's pulls as proof.
    fn config(&self, socket: &std::path::Path) -> Result<AgentConfig, HollowError> {
        let dir = self.dir.display().to_string();
        let args = [
            "--node-name".to_owned(),
            self.name.clone(),
            "--root-dir".to_owned(),
            format!("{dir}/root"),
            "--kubeconfig".to_owned(),
            format!("{dir}/kubelet.conf"),
            "--bootstrap-kubeconfig".to_owned(),
            self.bootstrap_kubeconfig.display().to_string(),
            "--container-runtime-endpoint".to_owned(),
            format!("unix://{}", socket.display()),
            "--trust-runtime-pulls".to_owned(),
            "--port".to_owned(),
            "0".to_owned(),
            "--healthz-port".to_owned(),
            "0".to_owned(),
        ];
        let mut config: AgentConfig = podpass_serve::parse_flags(args)
            .map_err(|e| HollowError::Config { node: self.name.clone(), message: e.to_string() })?;
        config.hollow = true;
        config.version = env!("CARGO_PKG_VERSION").to_owned();
        Ok(config)
    }

    /// Runs the node and its runtime until `shutdown` completes (or either fails).
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()> + Send) -> Result<(), HollowError> {
        let node = self.name.clone();
        let dir_error = |source| HollowError::Dir { node: node.clone(), source };
        std::fs::create_dir_all(self.dir.join("root")).map_err(dir_error)?;
        let socket = self.dir.join("cri.sock");
        let runtime = SimulatedRuntime::new(self.subnet, &self.dir);
        // Bound before the agent starts, so its first call finds the socket.
        let listener = listen(&socket).map_err(|source| HollowError::Runtime { node: node.clone(), source })?;
        let (stop_runtime, runtime_stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(runtime.serve(listener, async move {
            let _ = runtime_stopped.await;
        }));
        let agent = async {
            let prepared = self
                .config(&socket)?
                .prepare()
                .map_err(|e| HollowError::Config { node: node.clone(), message: e.to_string() })?;
            let bound = prepared.bind().await.map_err(|source| HollowError::Agent { node: node.clone(), source })?;
            bound.serve(shutdown).await.map_err(|source| HollowError::Agent { node: node.clone(), source })
        };
        let result = agent.await;
        let _ = stop_runtime.send(());
        match serving.await {
            Ok(Err(source)) if result.is_ok() => Err(HollowError::Runtime { node, source }),
            _ => result,
        }
    }
}
