//! containerd (or any CRI runtime) over the CRI `runtime.v1.RuntimeService`: pod sandboxes
//! and containers, through the node's one CRI connection ([`crate::cri`]).

use std::collections::HashMap;
use std::time::Duration;

use tonic::transport::Channel;

use crate::cri::*;

/// A CRI call failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RuntimeError {
    /// The runtime could not be reached.
    #[error("container runtime {endpoint}: {reason}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// The runtime answered an error.
    #[error("{method}: {code}: {message}")]
    Rpc {
        /// The CRI method.
        method: &'static str,
        /// gRPC code.
        code: String,
        /// Its message.
        message: String,
    },
}

impl RuntimeError {
    /// The runtime does not know the object (gRPC NotFound).
    pub fn is_not_found(&self) -> bool {
        matches!(self, RuntimeError::Rpc { code, .. } if code == "NotFound")
    }
}

/// A CRI runtime service client on one channel.
#[derive(Clone)]
pub struct CriRuntime {
    channel: Channel,
    endpoint: String,
}

impl std::fmt::Debug for CriRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CriRuntime").field("endpoint", &self.endpoint).finish_non_exhaustive()
    }
}

/// Deadline of calls that only read or change state (the kubelet's `--runtime-request-timeout`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

impl CriRuntime {
    /// Connects to `unix:///path`, as the kubelet's `--container-runtime-endpoint`.
    pub async fn connect(endpoint: &str) -> Result<Self, RuntimeError> {
        let channel = crate::cri::connect(endpoint)
            .await
            .map_err(|e| RuntimeError::Connect { endpoint: endpoint.to_owned(), reason: e.to_string() })?;
        Ok(Self { channel, endpoint: endpoint.to_owned() })
    }

    async fn call<Req, Resp>(&self, method: &'static str, request: Req, timeout: Duration) -> Result<Resp, RuntimeError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        crate::cri::unary(&self.channel, method, request, timeout).await.map_err(|e| match e {
            crate::cri::CallError::Connect(reason) => RuntimeError::Connect { endpoint: self.endpoint.clone(), reason },
            crate::cri::CallError::Status(s) => RuntimeError::Rpc {
                method: method.rsplit('/').next().unwrap_or(method),
                code: format!("{:?}", s.code()),
                message: s.message().to_owned(),
            },
        })
    }

    /// `Version`: the runtime's name and version (`containerd`, `1.6.20`).
    pub async fn version(&self) -> Result<VersionResponse, RuntimeError> {
        let req = VersionRequest { version: "v1".into() };
        self.call("/runtime.v1.RuntimeService/Version", req, REQUEST_TIMEOUT).await
    }

    /// `RunPodSandbox`: the sandbox's ID.
    pub async fn run_pod_sandbox(&self, config: PodSandboxConfig) -> Result<String, RuntimeError> {
        let req = RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
        // Sandbox creation includes networking setup: the kubelet allows it 4 minutes.
        let r: RunPodSandboxResponse =
            self.call("/runtime.v1.RuntimeService/RunPodSandbox", req, Duration::from_secs(240)).await?;
        Ok(r.pod_sandbox_id)
    }

    /// `StopPodSandbox` (idempotent).
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        let req = PodSandboxIdRequest { pod_sandbox_id: id.to_owned() };
        let _: Empty = self.call("/runtime.v1.RuntimeService/StopPodSandbox", req, REQUEST_TIMEOUT).await?;
        Ok(())
    }

    /// `RemovePodSandbox` (idempotent).
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        let req = PodSandboxIdRequest { pod_sandbox_id: id.to_owned() };
        let _: Empty = self.call("/runtime.v1.RuntimeService/RemovePodSandbox", req, REQUEST_TIMEOUT).await?;
        Ok(())
    }

    /// `PodSandboxStatus`.
    pub async fn pod_sandbox_status(&self, id: &str) -> Result<Option<PodSandboxStatus>, RuntimeError> {
        let req = PodSandboxStatusRequest { pod_sandbox_id: id.to_owned(), verbose: false };
        let r: PodSandboxStatusResponse =
            self.call("/runtime.v1.RuntimeService/PodSandboxStatus", req, REQUEST_TIMEOUT).await?;
        Ok(r.status)
    }

    /// The network namespace of sandbox `id`, from its verbose status: the `network`
    /// namespace path of its OCI spec (containerd's CRI), else its pause process's
    /// `/proc/<pid>/ns/net`; `None` when the runtime says neither (or the sandbox shares
    /// the node's network).
    pub async fn pod_sandbox_netns(&self, id: &str) -> Result<Option<std::path::PathBuf>, RuntimeError> {
        let req = PodSandboxStatusRequest { pod_sandbox_id: id.to_owned(), verbose: true };
        let r: PodSandboxStatusResponse =
            self.call("/runtime.v1.RuntimeService/PodSandboxStatus", req, REQUEST_TIMEOUT).await?;
        Ok(r.info.get("info").and_then(|info| netns_of(info)))
    }

    /// `ListPodSandbox` of the sandboxes carrying every label of `labels`.
    pub async fn list_pod_sandboxes(&self, labels: HashMap<String, String>) -> Result<Vec<PodSandbox>, RuntimeError> {
        let filter = PodSandboxFilter { id: String::new(), label_selector: labels };
        let req = ListPodSandboxRequest { filter: Some(filter) };
        let r: ListPodSandboxResponse =
            self.call("/runtime.v1.RuntimeService/ListPodSandbox", req, REQUEST_TIMEOUT).await?;
        Ok(r.items)
    }

    /// `CreateContainer`: the container's ID.
    pub async fn create_container(
        &self,
        sandbox: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> Result<String, RuntimeError> {
        let req = CreateContainerRequest {
            pod_sandbox_id: sandbox.to_owned(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let r: CreateContainerResponse =
            self.call("/runtime.v1.RuntimeService/CreateContainer", req, REQUEST_TIMEOUT).await?;
        Ok(r.container_id)
    }

    /// `ExecSync`: `cmd` run in container `id` to its end, the runtime stopping it after
    /// `timeout` (the call's own deadline a little later, so the runtime's answer wins).
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<ExecSyncResponse, RuntimeError> {
        let seconds = i64::try_from(timeout.as_secs().max(1)).unwrap_or(i64::MAX);
        let req = ExecSyncRequest { container_id: id.to_owned(), cmd, timeout: seconds };
        self.call("/runtime.v1.RuntimeService/ExecSync", req, timeout + Duration::from_secs(2)).await
    }

    /// `Exec`: where the runtime's stream server runs `cmd` in container `id` with the
    /// streams asked for (the URL is served once, for this request).
    pub async fn exec(
        &self,
        id: &str,
        cmd: Vec<String>,
        streams: crate::stream::remote_command::Channels,
    ) -> Result<String, RuntimeError> {
        let req = ExecRequest {
            container_id: id.to_owned(),
            cmd,
            tty: streams.tty,
            stdin: streams.stdin,
            stdout: streams.stdout,
            stderr: streams.stderr && !streams.tty,
        };
        let r: StreamUrlResponse = self.call("/runtime.v1.RuntimeService/Exec", req, REQUEST_TIMEOUT).await?;
        Ok(r.url)
    }

    /// `Attach`: where the runtime's stream server attaches to container `id`'s process.
    pub async fn attach(
        &self,
        id: &str,
        streams: crate::stream::remote_command::Channels,
    ) -> Result<String, RuntimeError> {
        let req = AttachRequest {
            container_id: id.to_owned(),
            stdin: streams.stdin,
            tty: streams.tty,
            stdout: streams.stdout,
            stderr: streams.stderr && !streams.tty,
        };
        let r: StreamUrlResponse = self.call("/runtime.v1.RuntimeService/Attach", req, REQUEST_TIMEOUT).await?;
        Ok(r.url)
    }

    /// `PortForward`: where the runtime's stream server forwards connections to `ports` on
    /// sandbox `id`'s own loopback (the URL is served once, for this request).
    pub async fn port_forward(&self, id: &str, ports: Vec<i32>) -> Result<String, RuntimeError> {
        let req = PortForwardRequest { pod_sandbox_id: id.to_owned(), port: ports };
        let r: StreamUrlResponse = self.call("/runtime.v1.RuntimeService/PortForward", req, REQUEST_TIMEOUT).await?;
        Ok(r.url)
    }

    /// `ListContainerStats` of the containers carrying every label of `labels`.
    pub async fn list_container_stats(
        &self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<ContainerStats>, RuntimeError> {
        let req = ListContainerStatsRequest { filter: Some(ContainerStatsFilter { label_selector: labels }) };
        let r: ListContainerStatsResponse =
            self.call("/runtime.v1.RuntimeService/ListContainerStats", req, REQUEST_TIMEOUT).await?;
        Ok(r.stats)
    }

    /// `StartContainer`.
    pub async fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        let req = ContainerIdRequest { container_id: id.to_owned() };
        let _: Empty = self.call("/runtime.v1.RuntimeService/StartContainer", req, REQUEST_TIMEOUT).await?;
        Ok(())
    }

    /// `StopContainer`: SIGTERM (the image's stop signal), SIGKILL after `grace_seconds`.
    pub async fn stop_container(&self, id: &str, grace_seconds: i64) -> Result<(), RuntimeError> {
        let req = StopContainerRequest { container_id: id.to_owned(), timeout: grace_seconds };
        // The call lasts as long as the grace period: allow that on top of the usual.
        let budget = REQUEST_TIMEOUT + Duration::from_secs(u64::try_from(grace_seconds.max(0)).unwrap_or(0));
        let _: Empty = self.call("/runtime.v1.RuntimeService/StopContainer", req, budget).await?;
        Ok(())
    }

    /// `RemoveContainer` (idempotent).
    pub async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        let req = ContainerIdRequest { container_id: id.to_owned() };
        let _: Empty = self.call("/runtime.v1.RuntimeService/RemoveContainer", req, REQUEST_TIMEOUT).await?;
        Ok(())
    }

    /// `ReopenContainerLog`: the runtime writes the container's output to a new file at its
    /// log path (after the old one was renamed away).
    pub async fn reopen_container_log(&self, id: &str) -> Result<(), RuntimeError> {
        let req = ContainerIdRequest { container_id: id.to_owned() };
        let _: Empty = self.call("/runtime.v1.RuntimeService/ReopenContainerLog", req, REQUEST_TIMEOUT).await?;
        Ok(())
    }

    /// `ListContainers` of those carrying every label of `labels`.
    pub async fn list_containers(&self, labels: HashMap<String, String>) -> Result<Vec<Container>, RuntimeError> {
        let filter = ContainerFilter { label_selector: labels, ..ContainerFilter::default() };
        let req = ListContainersRequest { filter: Some(filter) };
        let r: ListContainersResponse =
            self.call("/runtime.v1.RuntimeService/ListContainers", req, REQUEST_TIMEOUT).await?;
        Ok(r.containers)
    }

    /// Stops (SIGTERM, SIGKILL after `grace_seconds`) and removes every container and sandbox
    /// carrying all of `labels` — a pod, or a node's pods. Every step is tried; what is
    /// already gone (or going) is fine; the first other failure is returned after. Returns
    /// how many sandboxes were removed.
    pub async fn remove_pods(
        &self,
        labels: HashMap<String, String>,
        grace_seconds: i64,
    ) -> Result<usize, RuntimeError> {
        let mut first: Option<RuntimeError> = None;
        let mut keep = |r: Result<(), RuntimeError>| {
            if let Err(e) = r
                && !e.is_not_found()
                && !e.to_string().contains("already in removing state")
            {
                first.get_or_insert(e);
            }
        };
        let containers = self.list_containers(labels.clone()).await?;
        let stops = containers
            .iter()
            .filter(|c| c.state == CONTAINER_RUNNING)
            .map(|c| self.stop_container(&c.id, grace_seconds));
        for r in futures::future::join_all(stops).await {
            keep(r);
        }
        for c in &containers {
            keep(self.remove_container(&c.id).await);
        }
        let sandboxes = self.list_pod_sandboxes(labels).await?;
        for s in &sandboxes {
            keep(self.stop_pod_sandbox(&s.id).await);
            keep(self.remove_pod_sandbox(&s.id).await);
        }
        first.map_or(Ok(sandboxes.len()), Err)
    }

    /// `ContainerStatus`.
    pub async fn container_status(&self, id: &str) -> Result<Option<ContainerStatus>, RuntimeError> {
        let req = ContainerStatusRequest { container_id: id.to_owned(), verbose: false };
        let r: ContainerStatusResponse =
            self.call("/runtime.v1.RuntimeService/ContainerStatus", req, REQUEST_TIMEOUT).await?;
        Ok(r.status)
    }

    /// Where the runtime's images live (`ImageFsInfo`'s first filesystem), `None` when it
    /// does not say.
    pub async fn image_fs_mountpoint(&self) -> Result<Option<std::path::PathBuf>, RuntimeError> {
        let r: ImageFsInfoResponse =
            self.call("/runtime.v1.ImageService/ImageFsInfo", ImageFsInfoRequest {}, REQUEST_TIMEOUT).await?;
        Ok(r.image_filesystems
            .into_iter()
            .find_map(|f| f.fs_id.map(|id| id.mountpoint).filter(|m| !m.is_empty()))
            .map(std::path::PathBuf::from))
    }

    /// Bytes and inodes the container's writable layer uses (`ContainerStats`), `None` when
    /// the runtime does not say.
    pub async fn writable_layer(&self, id: &str) -> Result<Option<(u64, u64)>, RuntimeError> {
        let req = ContainerStatsRequest { container_id: id.to_owned() };
        let r: ContainerStatsResponse =
            self.call("/runtime.v1.RuntimeService/ContainerStats", req, REQUEST_TIMEOUT).await?;
        Ok(r.stats.and_then(|s| s.writable_layer).and_then(|w| {
            let bytes = w.used_bytes?.value;
            Some((bytes, w.inodes_used.map_or(0, |i| i.value)))
        }))
    }
}

/// The network namespace a containerd verbose sandbox `info` document names.
fn netns_of(info: &str) -> Option<std::path::PathBuf> {
    let info: serde_json::Value = serde_json::from_str(info).ok()?;
    let namespaces = info.pointer("/runtimeSpec/linux/namespaces").and_then(serde_json::Value::as_array);
    let network = namespaces.into_iter().flatten().find(|n| n["type"] == "network");
    match network.and_then(|n| n["path"].as_str()).filter(|p| !p.is_empty()) {
        Some(path) => Some(path.into()),
        // A network namespace without a path is the pause process's own.
        None if network.is_some() => info
            .get("pid")
            .and_then(serde_json::Value::as_u64)
            .filter(|p| *p > 0)
            .map(|pid| format!("/proc/{pid}/ns/net").into()),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn the_network_namespace_is_read_from_containerds_verbose_info() {
        let spec = |ns: &str| {
            format!(r#"{{"pid": 42, "runtimeSpec": {{"linux": {{"namespaces": [{{"type": "pid"}}, {ns}]}}}}}}"#)
        };
        let path = netns_of(&spec(r#"{"type": "network", "path": "/var/run/netns/cni-1"}"#));
        assert_eq!(path, Some("/var/run/netns/cni-1".into()));
        assert_eq!(netns_of(&spec(r#"{"type": "network"}"#)), Some("/proc/42/ns/net".into()));
        assert_eq!(netns_of(&spec(r#"{"type": "ipc"}"#)), None, "the node's network");
        assert_eq!(netns_of("not json"), None);
    }

    #[test]
    fn wire_layout_matches_cri_field_numbers() {
        // CreateContainerRequest{1: "sb", 2: ContainerConfig{1: {1: "app", 2: 3}, 11: "app/3.log"}}
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata { name: "app".into(), attempt: 3 }),
            log_path: "app/3.log".into(),
            ..ContainerConfig::default()
        };
        let req = CreateContainerRequest { pod_sandbox_id: "sb".into(), config: Some(config), sandbox_config: None };
        let mut expected = vec![0x0a, 2, b's', b'b', 0x12, 20, 0x0a, 7, 0x0a, 3, b'a', b'p', b'p', 0x10, 3, 0x5a, 9];
        expected.extend_from_slice(b"app/3.log");
        assert_eq!(req.encode_to_vec(), expected);
        // run_as_user is field 5 of LinuxContainerSecurityContext, run_as_group 12
        let sc = LinuxContainerSecurityContext {
            run_as_user: Some(Int64Value { value: 1000 }),
            run_as_group: Some(Int64Value { value: 2000 }),
            ..Default::default()
        };
        assert_eq!(sc.encode_to_vec(), [0x2a, 3, 0x08, 0xe8, 0x07, 0x62, 3, 0x08, 0xd0, 0x0f]);
        // a ContainerStatus with fields this client does not know (resources = 16, user = 18)
        let mut wire = ContainerStatus { id: "c".into(), state: CONTAINER_EXITED, exit_code: 3, ..Default::default() }
            .encode_to_vec();
        wire.extend([0x82, 0x01, 0x00, 0x92, 0x01, 0x00]);
        let back = ContainerStatus::decode(wire.as_slice()).unwrap_or_default();
        assert_eq!((back.id.as_str(), back.state, back.exit_code), ("c", CONTAINER_EXITED, 3));
    }
}
