//! Joining a cluster as kubeadm's `join` does: the cluster's CA verified before anything
//! is trusted (token discovery: the signed `cluster-info`, the CA's public key pinned), and
//! the bootstrap kubeconfig the node agent's TLS bootstrap starts from.

mod discovery;
mod fetch;

pub use discovery::{
    ClusterInfo, DiscoveryError, ca_cert_hash, ca_cert_hashes, check_pin, validate as validate_cluster_info,
};
pub use fetch::{JoinError, bootstrap_kubeconfig, discover, server_url};

/// Whether a kubeconfig names a client certificate that has not expired (kubelet
/// `isClientConfigStillValid`): a node that joined before runs on it without discovery.
pub use crate::certificate::client_config_still_valid as holds_valid_client_certificate;
