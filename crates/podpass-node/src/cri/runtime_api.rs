//! The `runtime.v1.RuntimeService` messages the node sends and reads: pod sandboxes and
//! containers — the subset of k8s.io/cri-api `api.proto` the node uses, with the upstream
//! field numbers (enums as their numbers); unknown fields the runtime sends are skipped by
//! prost.

use std::collections::HashMap;

use super::ImageSpec;

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

/// `ContainerStatsRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatsRequest {
    /// The container.
    #[prost(string, tag = "1")]
    pub container_id: String,
}

/// `ContainerStatsResponse` (only what the node reads).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatsResponse {
    /// The stats.
    #[prost(message, optional, tag = "1")]
    pub stats: Option<ContainerStats>,
}

/// `ContainerStats`: the writable layer (the eviction manager's rootfs usage), CPU and
/// memory (the resource metrics).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStats {
    /// Which container.
    #[prost(message, optional, tag = "1")]
    pub attributes: Option<ContainerAttributes>,
    /// Its CPU.
    #[prost(message, optional, tag = "2")]
    pub cpu: Option<CpuUsage>,
    /// Its memory.
    #[prost(message, optional, tag = "3")]
    pub memory: Option<MemoryUsage>,
    /// Usage of the container's writable layer.
    #[prost(message, optional, tag = "4")]
    pub writable_layer: Option<FilesystemUsage>,
}

/// `ContainerAttributes`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerAttributes {
    /// The container's ID.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Its labels.
    #[prost(map = "string, string", tag = "3")]
    pub labels: HashMap<String, String>,
}

/// `CpuUsage`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CpuUsage {
    /// When it was measured (ns since the epoch).
    #[prost(int64, tag = "1")]
    pub timestamp: i64,
    /// CPU time used, cumulative (ns).
    #[prost(message, optional, tag = "2")]
    pub usage_core_nano_seconds: Option<UInt64Value>,
}

/// `MemoryUsage`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MemoryUsage {
    /// When it was measured (ns since the epoch).
    #[prost(int64, tag = "1")]
    pub timestamp: i64,
    /// The working set (bytes).
    #[prost(message, optional, tag = "2")]
    pub working_set_bytes: Option<UInt64Value>,
}

/// `ContainerStatsFilter`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatsFilter {
    /// Containers carrying every one of these labels.
    #[prost(map = "string, string", tag = "3")]
    pub label_selector: HashMap<String, String>,
}

/// `ListContainerStatsRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListContainerStatsRequest {
    /// Which containers.
    #[prost(message, optional, tag = "1")]
    pub filter: Option<ContainerStatsFilter>,
}

/// `ListContainerStatsResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListContainerStatsResponse {
    /// Each container's.
    #[prost(message, repeated, tag = "1")]
    pub stats: Vec<ContainerStats>,
}

/// `FilesystemUsage`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FilesystemUsage {
    /// When it was measured (ns).
    #[prost(int64, tag = "1")]
    pub timestamp: i64,
    /// Bytes used.
    #[prost(message, optional, tag = "3")]
    pub used_bytes: Option<UInt64Value>,
    /// Inodes used.
    #[prost(message, optional, tag = "4")]
    pub inodes_used: Option<UInt64Value>,
}

/// `UInt64Value`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UInt64Value {
    /// The value.
    #[prost(uint64, tag = "1")]
    pub value: u64,
}

/// `ExecRequest`: a command to run in a container, streamed (the answer is a URL of the
/// runtime's stream server).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecRequest {
    /// The container.
    #[prost(string, tag = "1")]
    pub container_id: String,
    /// The command.
    #[prost(string, repeated, tag = "2")]
    pub cmd: Vec<String>,
    /// A TTY.
    #[prost(bool, tag = "3")]
    pub tty: bool,
    /// Standard input streamed.
    #[prost(bool, tag = "4")]
    pub stdin: bool,
    /// Standard output streamed.
    #[prost(bool, tag = "5")]
    pub stdout: bool,
    /// Standard error streamed.
    #[prost(bool, tag = "6")]
    pub stderr: bool,
}

/// `PortForwardRequest`: a stream to ports inside a pod sandbox's network namespace.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PortForwardRequest {
    /// The sandbox.
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
    /// The ports forwarded.
    #[prost(int32, repeated, tag = "2")]
    pub port: Vec<i32>,
}

/// `AttachRequest`: the streams of a container's own process.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttachRequest {
    /// The container.
    #[prost(string, tag = "1")]
    pub container_id: String,
    /// Standard input streamed.
    #[prost(bool, tag = "2")]
    pub stdin: bool,
    /// A TTY.
    #[prost(bool, tag = "3")]
    pub tty: bool,
    /// Standard output streamed.
    #[prost(bool, tag = "4")]
    pub stdout: bool,
    /// Standard error streamed.
    #[prost(bool, tag = "5")]
    pub stderr: bool,
}

/// `ExecResponse` and `AttachResponse`: where the streams are served.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StreamUrlResponse {
    /// The stream server's URL for this request.
    #[prost(string, tag = "1")]
    pub url: String,
}

/// `ExecSyncRequest`: a command run in a container to its end (the prober's exec probe).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecSyncRequest {
    /// The container.
    #[prost(string, tag = "1")]
    pub container_id: String,
    /// The command and its arguments.
    #[prost(string, repeated, tag = "2")]
    pub cmd: Vec<String>,
    /// Seconds the runtime lets it run (0: no limit).
    #[prost(int64, tag = "3")]
    pub timeout: i64,
}

/// `ExecSyncResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecSyncResponse {
    /// What it wrote to stdout.
    #[prost(bytes = "vec", tag = "1")]
    pub stdout: Vec<u8>,
    /// What it wrote to stderr.
    #[prost(bytes = "vec", tag = "2")]
    pub stderr: Vec<u8>,
    /// Its exit code.
    #[prost(int32, tag = "3")]
    pub exit_code: i32,
}
