//! The container phase of `podpass bench node` (on a machine that can run containers, as
//! `podpass up` checks it: root, containerd, busybox-static): a containerd of the bench's own with podpass's sandbox image and a
//! busybox image, and a second agent running containers on it. It times, one at a time,
//! a pod's create answered → its container running in the runtime, against the floor
//! measured in the same run on the same containerd: RunPodSandbox + CreateContainer +
//! StartContainer driven directly through the CRI, as the kubelet's SyncPod calls them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use podpass_node::runtime::containerd::{self, Layout, SANDBOX_IMAGE};
use podpass_node::runtime::{
    CONTAINER_RUNNING, ContainerConfig, ContainerMetadata, CriRuntime, ImageSpec, PodSandboxConfig, PodSandboxMetadata,
    archive,
};
use serde_json::{Value, json};

use super::{Api, Phase};
use crate::up::ContainerTools;

/// The busybox image the bench's pods run.
const APP_IMAGE: &str = "podpass.local/bench-app:1";
/// The node running containers.
pub(super) const NODE: &str = "bench-node-containers";
/// The label on the sandboxes the floor measurement makes.
const RAW_LABEL: &str = "podpass.dev/bench-raw";

/// The figures of the phase.
pub(super) struct ContainerFigures {
    /// RunPodSandbox + CreateContainer + StartContainer through the CRI.
    pub raw: Phase,
    /// Pod created → container running, through the agent.
    pub pods: Phase,
}

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Runs the phase: `count` pods one at a time, and `count` raw CRI sequences.
pub(super) async fn measure(
    tools: &ContainerTools,
    dir: &Path,
    api: &Api,
    kubeconfig: &Path,
    count: usize,
) -> Result<ContainerFigures> {
    let exe = std::env::current_exe().context("own executable")?;
    let layout = Layout::new(&dir.join("c"));
    layout.write(&exe, &[])?;
    let log = std::fs::File::create(dir.join("containerd.log")).context("containerd log")?;
    let _containerd = Killed(
        Command::new(&tools.containerd)
            .arg("--config")
            .arg(layout.config())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting containerd")?,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let cri = loop {
        if let Ok(cri) = CriRuntime::connect(&layout.endpoint()).await
            && cri.version().await.is_ok()
        {
            break cri;
        }
        if Instant::now() > deadline {
            bail!("containerd did not answer within 30 s; see {}", dir.join("containerd.log").display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let layer = archive::busybox_layer(&tools.busybox, &["sh", "sleep"], Vec::new())?;
    for (name, bytes) in [
        (SANDBOX_IMAGE, containerd::sandbox_image(&tools.busybox)?),
        (APP_IMAGE, archive::oci_image(APP_IMAGE, &layer, &[], &["/bin/sh"])?.0),
    ] {
        let path = dir.join("image.tar");
        std::fs::write(&path, bytes).context("writing an image archive")?;
        containerd::import(&tools.ctr, &layout.socket(), &path, name, Duration::from_secs(60)).await?;
    }
    let result = run_both(dir, api, kubeconfig, &cri, &layout, count).await;
    // Whatever happened, nothing the phase started keeps running.
    let _ = cri.remove_pods(HashMap::new(), 0).await;
    result
}

async fn run_both(
    dir: &Path,
    api: &Api,
    kubeconfig: &Path,
    cri: &CriRuntime,
    layout: &Layout,
    count: usize,
) -> Result<ContainerFigures> {
    // One of each first, so neither side pays for a cold start.
    raw_once(cri, dir, usize::MAX).await?;
    let mut raw = Vec::with_capacity(count);
    for i in 0..count {
        raw.push(raw_once(cri, dir, i).await?);
    }
    cri.remove_pods(HashMap::from([(RAW_LABEL.to_owned(), "true".to_owned())]), 0).await?;

    let root: PathBuf = dir.join("node-containers");
    // Declared before the agent: its volume mounts are detached after it is killed.
    let _mounts = podpass_node::UnmountOnDrop(root.clone());
    let exe = std::env::current_exe().context("own executable")?;
    let _agent = Killed(
        Command::new(exe)
            .args(["node", "run", "--kubeconfig"])
            .arg(kubeconfig)
            .args(["--node-name", NODE, "--root-dir"])
            .arg(&root)
            .args(["--healthz-port", "0", "--port", "0", "--container-runtime-endpoint", &layout.endpoint()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the agent with containers")?,
    );
    pod_once(api, cri, "ctr-warm-up").await?;
    let mut pods = Vec::with_capacity(count);
    for i in 0..count {
        pods.push(pod_once(api, cri, &format!("ctr-{i}")).await?);
    }
    raw.sort_unstable();
    pods.sort_unstable();
    let phase =
        |latencies_us: Vec<u64>| Phase { ops: latencies_us.len(), elapsed: Duration::from_secs(1), latencies_us };
    Ok(ContainerFigures { raw: phase(raw), pods: phase(pods) })
}

/// One raw RunPodSandbox + CreateContainer + StartContainer; microseconds.
async fn raw_once(cri: &CriRuntime, dir: &Path, i: usize) -> Result<u64> {
    let name = format!("raw-{i}");
    let logs = dir.join("raw-logs").join(&name);
    std::fs::create_dir_all(logs.join("c")).context("raw log directory")?;
    let labels = HashMap::from([(RAW_LABEL.to_owned(), "true".to_owned())]);
    let sandbox = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.clone(),
            uid: format!("bench-raw-{i}"),
            namespace: "bench".into(),
            attempt: 0,
        }),
        hostname: name.clone(),
        log_directory: logs.display().to_string(),
        labels: labels.clone(),
        ..Default::default()
    };
    let container = ContainerConfig {
        metadata: Some(ContainerMetadata { name: "c".into(), attempt: 0 }),
        image: Some(ImageSpec { image: APP_IMAGE.into(), ..Default::default() }),
        command: vec!["sleep".into(), "1000".into()],
        labels,
        log_path: "c/0.log".into(),
        ..Default::default()
    };
    let began = Instant::now();
    let id = cri.run_pod_sandbox(sandbox.clone()).await?;
    let c = cri.create_container(&id, container, sandbox).await?;
    cri.start_container(&c).await?;
    Ok(micros(began.elapsed()))
}

/// One pod created → its container running in the runtime (polled every 2 ms); microseconds.
async fn pod_once(api: &Api, cri: &CriRuntime, name: &str) -> Result<u64> {
    let body = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"serviceAccountName": "bench", "nodeName": NODE, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "app", "image": APP_IMAGE, "imagePullPolicy": "Never",
                                 "command": ["sleep", "1000"]}]}})
    .to_string();
    let mut conn = api.connect().await?;
    let answer = conn.round_trip(&api.request("/api/v1/namespaces/bench/pods", &body)).await?;
    let began = Instant::now();
    if answer.status != 201 {
        bail!("creating a pod: {}: {}", answer.status, String::from_utf8_lossy(&answer.body));
    }
    let created: Value = serde_json::from_slice(&answer.body).context("decoding the pod")?;
    let uid = created.pointer("/metadata/uid").and_then(Value::as_str).context("pod without uid")?;
    let by_uid = HashMap::from([("io.kubernetes.pod.uid".to_owned(), uid.to_owned())]);
    let deadline = began + Duration::from_secs(60);
    loop {
        if cri.list_containers(by_uid.clone()).await?.iter().any(|c| c.state == CONTAINER_RUNNING) {
            return Ok(micros(began.elapsed()));
        }
        if Instant::now() > deadline {
            bail!("pod {name}'s container not running within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
