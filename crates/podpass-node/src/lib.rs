//! The podpass node agent, the kubelet's image and token subsystems:
//!
//! - `agent`: the daemon (`podpass node run`): node registration and heartbeat, a worker
//!   per pod bound to the node, Events and pod status.
//! - `volumes`: projected volumes (service-account tokens, config maps, secrets, downward
//!   API) written with the kubelet's AtomicWriter.
//! - `token`: the token manager (TokenRequest per pod and audience, refreshed at 80% of
//!   its life or after 24 h).
//! - [`credential`]: image credentials for a pod — exec credential provider plugins fed
//!   with its service-account token (KEP-4412 `tokenAttributes`), pull secrets and
//!   node-wide docker config, assembled into a keyring as the kubelet does.
//! - [`images`]: EnsureImageExists with ensure-secret-pulled-images (KEP-2535): pull
//!   intents and records on disk in the upstream format, the four verification policies,
//!   image pulls through containerd's CRI or the embedded OCI store.
//! - [`runtime`]: containers through containerd's CRI runtime service, containerd's own
//!   configuration, and the runnable images (sandbox, demo) podpass makes locally.
//! - [`join`]: joining a cluster as kubeadm's `join` (token discovery of `cluster-info`,
//!   the CA pinned).
//!
//! The four public modules are namespaces with a curated surface, as the crate root is:
//! their own submodules are private to the crate, and what they offer is their `pub use`
//! list (runtime's `archive`, `cni` and `containerd` are the tools `podpass up`, the CNI
//! plugin and the benches call by name). Everything else is private.

mod agent;
mod api;
mod certificate;

/// The node whose client certificate the kubelet root dir `root` holds
/// (`<root>/pki/kubelet-client-current.pem`, `CN=system:node:<name>`), when it holds one.
pub fn certificate_node_name(root: &std::path::Path) -> Option<String> {
    let pair = certificate::CertificateStore::new(&root.join("pki"), certificate::CLIENT_PREFIX).current().ok()??;
    pair.common_name.strip_prefix("system:node:").map(str::to_owned)
}
pub mod credential;
mod cri;
mod eviction_thresholds;
pub mod hollow;
mod identity;
pub mod images;
pub mod join;
mod kubelet_config;
mod request_error;
pub mod runtime;
pub mod stream;
mod token;
mod volumes;

pub use agent::{AgentConfig, AgentError, DEFAULT_HEALTHZ_PORT, DEFAULT_PORT, PREPARED_CONDITION};
pub use api::{
    Client, KubeServiceAccounts, PodContainer, RequestError, client_from_kubeconfig, get_pod, get_pod_containers,
    pull_secrets,
};
/// The kubelet's certificate files (`<cert-dir>/kubelet-client-current.pem`,
/// `kubelet-server-current.pem`), for what shows or seeds a node's certificates.
pub use certificate::{CLIENT_PREFIX, CertificateStore, SERVER_PREFIX};
pub use eviction_thresholds::{
    Signal as EvictionSignal, Threshold as EvictionThreshold, ThresholdValue as EvictionThresholdValue,
    parse_eviction_hard, parse_flag as parse_eviction_hard_flag,
};
pub use identity::{BoundObjectRef, PodRef, ServiceAccountRef, ServiceAccountRefError};
pub use kubelet_config::{KubeletConfig, parse as parse_kubelet_config, read as read_kubelet_config};
pub use volumes::{AtomicWriter, FileProjection, TmpfsSetUp, UnmountOnDrop, set_up_tmpfs, unmount_all_under};
