//! containerd (or any CRI runtime) over the CRI `runtime.v1.RuntimeService`: pod sandboxes
//! and containers. The messages are the subset of k8s.io/cri-api `api.proto` the node
//! uses, with the upstream field numbers (enums as their numbers); unknown fields the
//! runtime sends are skipped by prost.

use std::collections::HashMap;
use std::time::Duration;

use tonic::transport::Channel;

/// `NamespaceMode` POD.
pub const NAMESPACE_POD: i32 = 0;
/// `NamespaceMode` CONTAINER.
pub const NAMESPACE_CONTAINER: i32 = 1;
/// `NamespaceMode` NODE.
pub const NAMESPACE_NODE: i32 = 2;
/// `NamespaceMode.TARGET`: the namespace of another container (`NamespaceOption.target_id`).
pub const NAMESPACE_TARGET: i32 = 3;
/// `ContainerState` CONTAINER_CREATED.
pub const CONTAINER_CREATED: i32 = 0;
/// `ContainerState` CONTAINER_RUNNING.
pub const CONTAINER_RUNNING: i32 = 1;
/// `ContainerState` CONTAINER_EXITED.
pub const CONTAINER_EXITED: i32 = 2;
/// `PodSandboxState` SANDBOX_READY.
pub const SANDBOX_READY: i32 = 0;

/// `VersionRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionRequest {
    /// The kubelet's CRI version.
    #[prost(string, tag = "1")]
    pub version: String,
}

/// `VersionResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionResponse {
    /// CRI version.
    #[prost(string, tag = "1")]
    pub version: String,
    /// `containerd`.
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    /// Its version.
    #[prost(string, tag = "3")]
    pub runtime_version: String,
    /// Its CRI version.
    #[prost(string, tag = "4")]
    pub runtime_api_version: String,
}

/// `DNSConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DnsConfig {
    /// Servers.
    #[prost(string, repeated, tag = "1")]
    pub servers: Vec<String>,
    /// Search domains.
    #[prost(string, repeated, tag = "2")]
    pub searches: Vec<String>,
    /// resolv.conf options.
    #[prost(string, repeated, tag = "3")]
    pub options: Vec<String>,
}

/// `Mount`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mount {
    /// Path in the container.
    #[prost(string, tag = "1")]
    pub container_path: String,
    /// Path on the host.
    #[prost(string, tag = "2")]
    pub host_path: String,
    /// Read-only.
    #[prost(bool, tag = "3")]
    pub readonly: bool,
    /// SELinux relabel.
    #[prost(bool, tag = "4")]
    pub selinux_relabel: bool,
    /// `MountPropagation` (0: private).
    #[prost(int32, tag = "5")]
    pub propagation: i32,
}

/// `NamespaceOption`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NamespaceOption {
    /// Network namespace mode.
    #[prost(int32, tag = "1")]
    pub network: i32,
    /// PID namespace mode.
    #[prost(int32, tag = "2")]
    pub pid: i32,
    /// IPC namespace mode.
    #[prost(int32, tag = "3")]
    pub ipc: i32,
    /// With a `TARGET` mode: the container whose namespace is shared (an ephemeral
    /// container's `targetContainerName`).
    #[prost(string, tag = "4")]
    pub target_id: String,
}

/// `Int64Value`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Int64Value {
    /// The value.
    #[prost(int64, tag = "1")]
    pub value: i64,
}

/// `LinuxSandboxSecurityContext`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxSandboxSecurityContext {
    /// Namespaces.
    #[prost(message, optional, tag = "1")]
    pub namespace_options: Option<NamespaceOption>,
    /// UID of the sandbox process.
    #[prost(message, optional, tag = "3")]
    pub run_as_user: Option<Int64Value>,
    /// Read-only root.
    #[prost(bool, tag = "4")]
    pub readonly_rootfs: bool,
    /// Supplemental groups.
    #[prost(int64, repeated, tag = "5")]
    pub supplemental_groups: Vec<i64>,
    /// Privileged.
    #[prost(bool, tag = "6")]
    pub privileged: bool,
    /// GID of the sandbox process.
    #[prost(message, optional, tag = "8")]
    pub run_as_group: Option<Int64Value>,
}

/// `LinuxPodSandboxConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandboxConfig {
    /// Parent cgroup.
    #[prost(string, tag = "1")]
    pub cgroup_parent: String,
    /// Security context.
    #[prost(message, optional, tag = "2")]
    pub security_context: Option<LinuxSandboxSecurityContext>,
    /// Sysctls.
    #[prost(map = "string, string", tag = "3")]
    pub sysctls: HashMap<String, String>,
}

/// `PodSandboxMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxMetadata {
    /// Pod name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Pod UID.
    #[prost(string, tag = "2")]
    pub uid: String,
    /// Pod namespace.
    #[prost(string, tag = "3")]
    pub namespace: String,
    /// Attempt.
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
}

/// `PodSandboxConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxConfig {
    /// Metadata.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<PodSandboxMetadata>,
    /// Hostname.
    #[prost(string, tag = "2")]
    pub hostname: String,
    /// The pod's log directory (`<root>/pods/<ns>_<name>_<uid>` in the kubelet's layout).
    #[prost(string, tag = "3")]
    pub log_directory: String,
    /// DNS.
    #[prost(message, optional, tag = "4")]
    pub dns_config: Option<DnsConfig>,
    /// Labels.
    #[prost(map = "string, string", tag = "6")]
    pub labels: HashMap<String, String>,
    /// Annotations.
    #[prost(map = "string, string", tag = "7")]
    pub annotations: HashMap<String, String>,
    /// Linux options.
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandboxConfig>,
}

/// `RunPodSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxRequest {
    /// Config.
    #[prost(message, optional, tag = "1")]
    pub config: Option<PodSandboxConfig>,
    /// Runtime handler.
    #[prost(string, tag = "2")]
    pub runtime_handler: String,
}

/// `RunPodSandboxResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxResponse {
    /// Sandbox ID.
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

/// `StopPodSandboxRequest` and `RemovePodSandboxRequest` (same layout).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxIdRequest {
    /// Sandbox ID.
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

/// An empty answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// `PodSandboxNetworkStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxNetworkStatus {
    /// IP.
    #[prost(string, tag = "1")]
    pub ip: String,
}

/// `PodSandboxStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxStatus {
    /// ID.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Metadata.
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<PodSandboxMetadata>,
    /// `PodSandboxState`.
    #[prost(int32, tag = "3")]
    pub state: i32,
    /// Created, ns.
    #[prost(int64, tag = "4")]
    pub created_at: i64,
    /// Network.
    #[prost(message, optional, tag = "5")]
    pub network: Option<PodSandboxNetworkStatus>,
    /// Labels.
    #[prost(map = "string, string", tag = "7")]
    pub labels: HashMap<String, String>,
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

/// `PodSandboxStatusRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxStatusRequest {
    /// Sandbox ID.
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
    /// Verbose.
    #[prost(bool, tag = "2")]
    pub verbose: bool,
}

/// `PodSandboxStatusResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxStatusResponse {
    /// Status.
    #[prost(message, optional, tag = "1")]
    pub status: Option<PodSandboxStatus>,
    /// With `verbose`: the runtime's details (containerd: `info`, a JSON document holding
    /// the sandbox's OCI `runtimeSpec` and its `pid`).
    #[prost(map = "string, string", tag = "2")]
    pub info: HashMap<String, String>,
}

/// `PodSandboxFilter`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxFilter {
    /// ID.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Labels that must all match.
    #[prost(map = "string, string", tag = "3")]
    pub label_selector: HashMap<String, String>,
}

/// `ListPodSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodSandboxRequest {
    /// Filter.
    #[prost(message, optional, tag = "1")]
    pub filter: Option<PodSandboxFilter>,
}

/// `PodSandbox`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandbox {
    /// ID.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Metadata.
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<PodSandboxMetadata>,
    /// `PodSandboxState`.
    #[prost(int32, tag = "3")]
    pub state: i32,
    /// Created, ns.
    #[prost(int64, tag = "4")]
    pub created_at: i64,
    /// Labels.
    #[prost(map = "string, string", tag = "5")]
    pub labels: HashMap<String, String>,
}

/// `ListPodSandboxResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodSandboxResponse {
    /// Sandboxes.
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<PodSandbox>,
}

/// `ImageSpec`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageSpec {
    /// Image reference or ID.
    #[prost(string, tag = "1")]
    pub image: String,
}

/// `KeyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    /// Key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `LinuxContainerResources` (the part the node sets).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerResources {
    /// CFS period.
    #[prost(int64, tag = "1")]
    pub cpu_period: i64,
    /// CFS quota.
    #[prost(int64, tag = "2")]
    pub cpu_quota: i64,
    /// Shares.
    #[prost(int64, tag = "3")]
    pub cpu_shares: i64,
    /// Memory limit.
    #[prost(int64, tag = "4")]
    pub memory_limit_in_bytes: i64,
    /// OOM score adjustment.
    #[prost(int64, tag = "5")]
    pub oom_score_adj: i64,
}

/// `LinuxContainerSecurityContext` (the part the node sets).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerSecurityContext {
    /// Capabilities added to and dropped from the runtime's default set.
    #[prost(message, optional, tag = "1")]
    pub capabilities: Option<Capability>,
    /// Privileged.
    #[prost(bool, tag = "2")]
    pub privileged: bool,
    /// Namespaces.
    #[prost(message, optional, tag = "3")]
    pub namespace_options: Option<NamespaceOption>,
    /// UID.
    #[prost(message, optional, tag = "5")]
    pub run_as_user: Option<Int64Value>,
    /// Read-only root.
    #[prost(bool, tag = "7")]
    pub readonly_rootfs: bool,
    /// Supplemental groups (fsGroup and supplementalGroups).
    #[prost(int64, repeated, tag = "8")]
    pub supplemental_groups: Vec<i64>,
    /// no_new_privs (allowPrivilegeEscalation: false).
    #[prost(bool, tag = "11")]
    pub no_new_privs: bool,
    /// GID.
    #[prost(message, optional, tag = "12")]
    pub run_as_group: Option<Int64Value>,
    /// The seccomp profile (absent: the runtime's `Unconfined`, as containerd reads it).
    #[prost(message, optional, tag = "15")]
    pub seccomp: Option<SecurityProfile>,
}

/// `Capability`: names without the `CAP_` prefix, as the kubelet passes them.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Capability {
    /// Added to the runtime's default set.
    #[prost(string, repeated, tag = "1")]
    pub add_capabilities: Vec<String>,
    /// Dropped from it (`ALL`: every one).
    #[prost(string, repeated, tag = "2")]
    pub drop_capabilities: Vec<String>,
}

/// `SecurityProfile.ProfileType.RuntimeDefault`.
pub const PROFILE_RUNTIME_DEFAULT: i32 = 0;
/// `SecurityProfile.ProfileType.Unconfined`.
pub const PROFILE_UNCONFINED: i32 = 1;
/// `SecurityProfile.ProfileType.Localhost`.
pub const PROFILE_LOCALHOST: i32 = 2;

/// `SecurityProfile` (seccomp, AppArmor).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecurityProfile {
    /// `PROFILE_*`.
    #[prost(int32, tag = "1")]
    pub profile_type: i32,
    /// The profile's path on the node, for `Localhost`.
    #[prost(string, tag = "2")]
    pub localhost_ref: String,
}

/// `LinuxContainerConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerConfig {
    /// Resources.
    #[prost(message, optional, tag = "1")]
    pub resources: Option<LinuxContainerResources>,
    /// Security context.
    #[prost(message, optional, tag = "2")]
    pub security_context: Option<LinuxContainerSecurityContext>,
}

/// `ContainerMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerMetadata {
    /// Container name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Attempt (restart count).
    #[prost(uint32, tag = "2")]
    pub attempt: u32,
}

/// `ContainerConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerConfig {
    /// Metadata.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ContainerMetadata>,
    /// Image.
    #[prost(message, optional, tag = "2")]
    pub image: Option<ImageSpec>,
    /// Entrypoint.
    #[prost(string, repeated, tag = "3")]
    pub command: Vec<String>,
    /// Arguments.
    #[prost(string, repeated, tag = "4")]
    pub args: Vec<String>,
    /// Working directory.
    #[prost(string, tag = "5")]
    pub working_dir: String,
    /// Environment.
    #[prost(message, repeated, tag = "6")]
    pub envs: Vec<KeyValue>,
    /// Mounts.
    #[prost(message, repeated, tag = "7")]
    pub mounts: Vec<Mount>,
    /// Labels.
    #[prost(map = "string, string", tag = "9")]
    pub labels: HashMap<String, String>,
    /// Annotations.
    #[prost(map = "string, string", tag = "10")]
    pub annotations: HashMap<String, String>,
    /// Log path, relative to the sandbox's log directory (`<container>/<attempt>.log`).
    #[prost(string, tag = "11")]
    pub log_path: String,
    /// Stdin.
    #[prost(bool, tag = "12")]
    pub stdin: bool,
    /// Stdin once.
    #[prost(bool, tag = "13")]
    pub stdin_once: bool,
    /// TTY.
    #[prost(bool, tag = "14")]
    pub tty: bool,
    /// Linux options.
    #[prost(message, optional, tag = "15")]
    pub linux: Option<LinuxContainerConfig>,
}

/// `CreateContainerRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerRequest {
    /// Sandbox.
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
    /// Config.
    #[prost(message, optional, tag = "2")]
    pub config: Option<ContainerConfig>,
    /// The sandbox's config.
    #[prost(message, optional, tag = "3")]
    pub sandbox_config: Option<PodSandboxConfig>,
}

/// `CreateContainerResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerResponse {
    /// Container ID.
    #[prost(string, tag = "1")]
    pub container_id: String,
}

/// `StartContainerRequest`, `RemoveContainerRequest`, `ReopenContainerLogRequest` (same layout).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerIdRequest {
    /// Container ID.
    #[prost(string, tag = "1")]
    pub container_id: String,
}

/// `StopContainerRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StopContainerRequest {
    /// Container ID.
    #[prost(string, tag = "1")]
    pub container_id: String,
    /// Seconds before SIGKILL.
    #[prost(int64, tag = "2")]
    pub timeout: i64,
}

/// `ContainerStateValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStateValue {
    /// `ContainerState`.
    #[prost(int32, tag = "1")]
    pub state: i32,
}

/// `ContainerFilter`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerFilter {
    /// ID.
    #[prost(string, tag = "1")]
    pub id: String,
    /// State.
    #[prost(message, optional, tag = "2")]
    pub state: Option<ContainerStateValue>,
    /// Sandbox.
    #[prost(string, tag = "3")]
    pub pod_sandbox_id: String,
    /// Labels that must all match.
    #[prost(map = "string, string", tag = "4")]
    pub label_selector: HashMap<String, String>,
}

/// `ListContainersRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListContainersRequest {
    /// Filter.
    #[prost(message, optional, tag = "1")]
    pub filter: Option<ContainerFilter>,
}

/// `Container`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Container {
    /// ID.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Sandbox.
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    /// Metadata.
    #[prost(message, optional, tag = "3")]
    pub metadata: Option<ContainerMetadata>,
    /// Image.
    #[prost(message, optional, tag = "4")]
    pub image: Option<ImageSpec>,
    /// Image digest reference.
    #[prost(string, tag = "5")]
    pub image_ref: String,
    /// `ContainerState`.
    #[prost(int32, tag = "6")]
    pub state: i32,
    /// Created, ns.
    #[prost(int64, tag = "7")]
    pub created_at: i64,
    /// Labels.
    #[prost(map = "string, string", tag = "8")]
    pub labels: HashMap<String, String>,
    /// Annotations (the kubelet's container hash among them).
    #[prost(map = "string, string", tag = "9")]
    pub annotations: HashMap<String, String>,
}

/// `ListContainersResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListContainersResponse {
    /// Containers.
    #[prost(message, repeated, tag = "1")]
    pub containers: Vec<Container>,
}

/// `ContainerStatusRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatusRequest {
    /// Container ID.
    #[prost(string, tag = "1")]
    pub container_id: String,
    /// Verbose.
    #[prost(bool, tag = "2")]
    pub verbose: bool,
}

/// `ContainerStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatus {
    /// ID.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Metadata.
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<ContainerMetadata>,
    /// `ContainerState`.
    #[prost(int32, tag = "3")]
    pub state: i32,
    /// Created, ns.
    #[prost(int64, tag = "4")]
    pub created_at: i64,
    /// Started, ns (0: not started).
    #[prost(int64, tag = "5")]
    pub started_at: i64,
    /// Finished, ns (0: not finished).
    #[prost(int64, tag = "6")]
    pub finished_at: i64,
    /// Exit code.
    #[prost(int32, tag = "7")]
    pub exit_code: i32,
    /// Image.
    #[prost(message, optional, tag = "8")]
    pub image: Option<ImageSpec>,
    /// Image digest reference.
    #[prost(string, tag = "9")]
    pub image_ref: String,
    /// Reason (`Completed`, `Error`, `OOMKilled`).
    #[prost(string, tag = "10")]
    pub reason: String,
    /// Message.
    #[prost(string, tag = "11")]
    pub message: String,
    /// Labels.
    #[prost(map = "string, string", tag = "12")]
    pub labels: HashMap<String, String>,
    /// Annotations.
    #[prost(map = "string, string", tag = "13")]
    pub annotations: HashMap<String, String>,
    /// Log path.
    #[prost(string, tag = "15")]
    pub log_path: String,
    /// Image ID.
    #[prost(string, tag = "17")]
    pub image_id: String,
}

/// `ContainerStatusResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatusResponse {
    /// Status.
    #[prost(message, optional, tag = "1")]
    pub status: Option<ContainerStatus>,
}

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
        let channel = crate::images::cri_channel(endpoint)
            .await
            .map_err(|reason| RuntimeError::Connect { endpoint: endpoint.to_owned(), reason })?;
        Ok(Self { channel, endpoint: endpoint.to_owned() })
    }

    async fn call<Req, Resp>(&self, method: &'static str, request: Req, timeout: Duration) -> Result<Resp, RuntimeError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        crate::images::cri_unary(&self.channel, method, request, timeout).await.map_err(|e| match e {
            crate::images::CallError::Connect(reason) => {
                RuntimeError::Connect { endpoint: self.endpoint.clone(), reason }
            }
            crate::images::CallError::Status(s) => RuntimeError::Rpc {
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
