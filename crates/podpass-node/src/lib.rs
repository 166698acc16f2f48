//! The podpass node agent: image credentials for a pod, from exec credential provider
//! plugins fed with that pod's service-account token (KEP-4412), pull secrets and node-wide
//! docker config, assembled into a keyring as the kubelet does.

pub mod agent;
pub mod api;
pub mod credential;
mod identity;
pub mod images;
pub mod token;
pub mod volumes;

pub use api::RequestError;
pub use identity::{BoundObjectRef, PodRef, ServiceAccountRef, ServiceAccountRefError};
