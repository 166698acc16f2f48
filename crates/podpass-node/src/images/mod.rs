//! Ensure-secret-pulled-images (KEP-2535): image references as the kubelet normalises them,
//! the credential verification policy, and the pull records on disk.

pub mod assembly;
pub mod backend;
pub mod backoff;
pub mod cri;
pub mod durable;
pub mod embedded;
pub mod kubelet_config;
pub mod manager;
pub mod manifest_fetch;
pub mod mapping;
pub mod mem_records;
pub mod policy;
pub mod pull_manager;
pub mod records;
pub mod reference;
pub mod service;
