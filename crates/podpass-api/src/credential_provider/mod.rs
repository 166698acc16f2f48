//! Kubelet image credential provider plugins: the config the kubelet reads
//! (`--image-credential-provider-config`), its validation, and the exec wire protocol.

pub mod config;
pub mod validate;
pub mod wire;

pub use config::{
    ConfigReadError, CredentialProvider, CredentialProviderConfig, ExecEnvVar, ServiceAccountTokenAttributes,
    TokenCacheType, read_config,
};
pub use validate::validate;
pub use wire::{AuthConfig, CacheKeyType, CredentialProviderRequest, CredentialProviderResponse};
