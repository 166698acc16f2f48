//! Joining a cluster as kubeadm's `join` does: the cluster's CA verified before anything
//! is trusted (token discovery: the signed `cluster-info`, the CA's public key pinned), and
//! the bootstrap kubeconfig the node agent's TLS bootstrap starts from.

mod discovery;
mod fetch;

pub use discovery::{
    ClusterInfo, DiscoveryError, ca_cert_hash, ca_cert_hashes, check_pin, validate as validate_cluster_info,
};
pub use fetch::{JoinError, bootstrap_kubeconfig, discover, server_url};
