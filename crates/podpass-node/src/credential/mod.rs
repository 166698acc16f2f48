//! Image pull credentials (pkg/credentialprovider and its plugin package).

pub mod cache;
pub mod docker_config;
pub mod exec;
pub mod keyring;
pub mod lookup;
pub mod metrics;
pub mod provider;
mod register;

pub use docker_config::{DockerConfig, DockerConfigEntry, PullSecret};
pub use keyring::{CredentialSource, Keyring, TrackedAuth};
pub use lookup::{Lookup, lookup};
pub use provider::{PluginProvider, PodIdentity, Provided, ProviderReport, ServiceAccountInfo, ServiceAccountSource};
pub use register::{RegisterError, register_providers};
