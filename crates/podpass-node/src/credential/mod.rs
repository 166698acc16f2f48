//! Image pull credentials (pkg/credentialprovider and its plugin package).
//!
//! The modules are private; what callers need is re-exported here.

pub(crate) mod cache;
pub(crate) mod docker_config;
pub(crate) mod exec;
mod fallback;
pub(crate) mod keyring;
pub(crate) mod lookup;
pub(crate) mod metrics;
pub(crate) mod provider;
mod register;

pub use cache::{CachedCredentials, CredentialCache};
pub use docker_config::{
    DockerConfig, DockerConfigEntry, DockerConfigError, PullSecret, parse_config_json, parse_dockercfg,
    parse_pull_secret, read_node_config,
};
pub use exec::{ExecError, MAX_STDERR_BYTES, MAX_STDOUT_BYTES, PLUGIN_TIMEOUT, decode_response};
pub use fallback::{Fallback, Fallbacks};
pub use keyring::{CredentialSource, Keyring, TrackedAuth, auth_config_hash, is_default_registry_match};
pub use lookup::{Lookup, lookup};
pub use metrics::{ConfigLabels, CredentialMetrics, PluginLabels};
pub use provider::{
    BoxFuture, CachedAnswer, PluginProvider, PodIdentity, Provided, ProviderReport, ProviderServiceAccount,
    ServiceAccountSource,
};
pub use register::{RegisterError, register_providers};
