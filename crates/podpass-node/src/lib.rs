//! The podpass node agent, the kubelet's image and token subsystems:
//!
//! - [`agent`]: the daemon (`podpass node run`): node registration and heartbeat, a worker
//!   per pod bound to the node, Events and pod status.
//! - [`volumes`]: projected volumes (service-account tokens, config maps, secrets, downward
//!   API) written with the kubelet's AtomicWriter.
//! - [`token`]: the token manager (TokenRequest per pod and audience, refreshed at 80% of
//!   its life or after 24 h).
//! - [`credential`]: image credentials for a pod — exec credential provider plugins fed
//!   with its service-account token (KEP-4412 `tokenAttributes`), pull secrets and
//!   node-wide docker config, assembled into a keyring as the kubelet does.
//! - [`images`]: EnsureImageExists with ensure-secret-pulled-images (KEP-2535): pull
//!   intents and records on disk in the upstream format, the four verification policies,
//!   image pulls through containerd's CRI or the embedded OCI store.
//! - [`runtime`]: containers through containerd's CRI runtime service, containerd's own
//!   configuration, and the runnable images (sandbox, demo) podpass makes locally.

pub mod agent;
pub mod api;
pub mod credential;
mod cri;
mod identity;
pub mod images;
pub mod kubelet_config;
mod request_error;
pub mod runtime;
pub mod token;
pub mod volumes;

pub use api::RequestError;
pub use identity::{BoundObjectRef, PodRef, ServiceAccountRef, ServiceAccountRefError};
