//! Provider registration as the kubelet does it at start-up (plugin.go
//! `RegisterCredentialProviderPlugins`): the bin dir and every provider's binary must exist
//! and the config must validate, or nothing is registered. One assembly for the daemon and
//! the one-shot commands.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use podpass_api::credential_provider::{read_config, validate};
use thiserror::Error;

use super::metrics::CredentialMetrics;
use super::{PluginProvider, ServiceAccountSource};

/// The providers cannot be registered (upstream's messages).
#[derive(Debug, Error)]
pub enum RegisterError {
    /// `--image-credential-provider-bin-dir` is missing.
    #[error("plugin binary directory {} did not exist", .0.display())]
    BinDirMissing(PathBuf),
    /// A provider's executable is missing.
    #[error("plugin binary executable {} did not exist", .0.display())]
    BinaryMissing(PathBuf),
    /// Inspecting a path failed otherwise.
    #[error("error inspecting {what} {}: {source}", path.display())]
    Inspect {
        /// `binary directory` or `binary executable`.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config could not be read.
    #[error("{0}")]
    Read(String),
    /// The config does not validate.
    #[error("failed to validate credential provider config: {0}")]
    Invalid(podpass_api::validation::FieldErrors),
    /// `--credential-provider-fallback` names providers the config does not have.
    #[error("--credential-provider-fallback names no provider of the config: {}", .0.join(", "))]
    UnknownFallback(Vec<String>),
}

fn inspect(path: &Path, what: &'static str, missing: fn(PathBuf) -> RegisterError) -> Result<(), RegisterError> {
    match std::fs::metadata(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(missing(path.to_owned())),
        Err(source) => Err(RegisterError::Inspect { what, path: path.to_owned(), source }),
    }
}

/// Reads, validates and registers the providers of `config_path` (file or directory) with
/// binaries in `bin_dir`; `source` serves service-account tokens and annotations when
/// `sa_token_feature` (KubeletServiceAccountTokenForCredentialProviders) is on. The config
/// hash is published in `metrics`.
pub fn register_providers(
    config_path: &Path,
    bin_dir: &Path,
    sa_token_feature: bool,
    source: Option<Arc<dyn ServiceAccountSource>>,
    fallbacks: &super::Fallbacks,
    metrics: &CredentialMetrics,
) -> Result<Vec<PluginProvider>, RegisterError> {
    inspect(bin_dir, "binary directory", RegisterError::BinDirMissing)?;
    let (config, hash) = read_config(config_path).map_err(|e| RegisterError::Read(e.to_string()))?;
    let errors = validate(&config, sa_token_feature);
    if !errors.is_empty() {
        return Err(RegisterError::Invalid(errors));
    }
    let names: Vec<&str> = config.providers.iter().map(|p| p.name.as_str()).collect();
    let unknown: Vec<String> = fallbacks.unknown(&names).map(str::to_owned).collect();
    if !unknown.is_empty() {
        return Err(RegisterError::UnknownFallback(unknown));
    }
    let mut providers = Vec::new();
    for p in config.providers {
        inspect(&bin_dir.join(&p.name), "binary executable", RegisterError::BinaryMissing)?;
        let fallback = fallbacks.of(&p.name);
        providers.push(
            PluginProvider::new(p, bin_dir.to_owned(), sa_token_feature, source.clone(), metrics.clone())
                .with_fallback(fallback),
        );
    }
    // Only a configuration that registered whole is the one in use.
    metrics.set_config_hash(&hash);
    Ok(providers)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: helper\n  matchImages: [\"*.registry.example\"]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n";

    #[test]
    fn everything_must_exist_and_validate_before_anything_registers() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (cfg, bin) = (dir.path().join("config.yaml"), dir.path().join("bin"));
        std::fs::write(&cfg, CONFIG).unwrap_or_else(|e| panic!("{e}"));
        let m = CredentialMetrics::default();
        let err = register_providers(&cfg, &bin, true, None, &Default::default(), &m).unwrap_err();
        assert_eq!(err.to_string(), format!("plugin binary directory {} did not exist", bin.display()));
        std::fs::create_dir(&bin).unwrap_or_else(|e| panic!("{e}"));
        let err = register_providers(&cfg, &bin, true, None, &Default::default(), &m).unwrap_err();
        assert_eq!(err.to_string(), format!("plugin binary executable {} did not exist", bin.join("helper").display()));
        std::fs::write(bin.join("helper"), "#!/bin/sh\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(register_providers(&cfg, &bin, true, None, &Default::default(), &m).map(|p| p.len()).ok(), Some(1));
        std::fs::write(&cfg, CONFIG.replace("  defaultCacheDuration: 1m\n", "")).unwrap_or_else(|e| panic!("{e}"));
        let err = register_providers(&cfg, &bin, true, None, &Default::default(), &m).unwrap_err();
        assert!(err.to_string().starts_with("failed to validate credential provider config: "), "{err}");
    }
}
