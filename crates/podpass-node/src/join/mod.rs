//! Joining a cluster as kubeadm's `join` does: the cluster's CA verified before anything
//! is trusted (token discovery: the signed `cluster-info`, the CA's public key pinned), and
//! the bootstrap kubeconfig the node agent's TLS bootstrap starts from, and the cluster's
//! configuration for its nodes.

mod discovery;
mod fetch;
mod node_config;

pub use discovery::{
    ClusterInfo, DiscoveryError, ca_cert_hash, ca_cert_hashes, check_pin, validate as validate_cluster_info,
};
pub use fetch::{JoinError, bootstrap_kubeconfig, discover, server_url};
pub use node_config::{
    KUBELET_CONFIG_KEY, KUBELET_CONFIG_MAP, NAMESPACE as NODE_CONFIG_NAMESPACE, NodeConfiguration, REGISTRY_CONFIG_MAP,
    RegistryConfig, RegistryConfigError, RegistryTransport, node_configuration,
};

/// Whether a kubeconfig names a client certificate that has not expired (kubelet
/// `isClientConfigStillValid`): a node that joined before runs on it without discovery.
pub use crate::certificate::client_config_still_valid as holds_valid_client_certificate;
