//! Containers: containerd's CRI runtime service (pod sandboxes and containers), a
//! containerd of podpass's own (configuration, images loaded locally), and the runnable
//! images podpass makes without a registry (the sandbox image, the demo's and tests').

/// podpass's own label on what a node agent starts in the runtime: the node's name. Only
/// what carries a node's name is ever removed as that node's orphan (a runtime shared with
/// another kubelet keeps its own).
pub const NODE_LABEL: &str = "podpass.dev/node";

pub mod archive;
pub mod cni;
pub mod containerd;
mod cri;

pub use crate::cri::{
    CONTAINER_CREATED, CONTAINER_EXITED, CONTAINER_RUNNING, Capability, Container, ContainerConfig, ContainerMetadata,
    ContainerStatus, DnsConfig, ImageSpec, Int64Value, KeyValue, LinuxContainerConfig, LinuxContainerResources,
    LinuxContainerSecurityContext, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, Mount, NAMESPACE_CONTAINER,
    NAMESPACE_NODE, NAMESPACE_POD, NAMESPACE_TARGET, NamespaceOption, PROFILE_LOCALHOST, PROFILE_RUNTIME_DEFAULT,
    PROFILE_UNCONFINED, PodSandbox, PodSandboxConfig, PodSandboxMetadata, PodSandboxStatus, SANDBOX_READY,
    SecurityProfile, VersionResponse,
};
pub use cri::{CriRuntime, RuntimeError};
