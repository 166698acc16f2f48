//! Joining a cluster as kubeadm's `join` does: the cluster's CA verified before anything
//! is trusted (token discovery: the signed `cluster-info`, the CA's public key pinned). The
//! certificate bootstrap and the node's first start follow.

mod discovery;

pub use discovery::{ClusterInfo, DiscoveryError, ca_cert_hash, check_pin, validate as validate_cluster_info};
