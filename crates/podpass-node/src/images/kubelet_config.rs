//! The subset of `KubeletConfiguration` (`kubelet.config.k8s.io/v1beta1`) the image
//! manager reads. Fields podpass does not use are ignored, as a kubelet ignores nothing but
//! a podpass node never uses them; the fields it uses are validated with upstream's rules.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::policy::{PolicyEnforcer, VerificationPolicy};

/// The image-related kubelet settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletImageConfig {
    /// `imagePullCredentialsVerificationPolicy` (default NeverVerifyPreloadedImages).
    pub policy: VerificationPolicy,
    /// `preloadedImagesVerificationAllowlist`.
    pub allowlist: Vec<String>,
    /// `serializeImagePulls` (default true).
    pub serialize_image_pulls: bool,
    /// `maxParallelImagePulls` (unset: unlimited when pulls are parallel).
    pub max_parallel_image_pulls: Option<i32>,
    /// `featureGates`.
    pub feature_gates: BTreeMap<String, bool>,
}

impl Default for KubeletImageConfig {
    fn default() -> Self {
        Self {
            policy: VerificationPolicy::default(),
            allowlist: Vec::new(),
            serialize_image_pulls: true,
            max_parallel_image_pulls: None,
            feature_gates: BTreeMap::new(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    image_pull_credentials_verification_policy: Option<String>,
    #[serde(default)]
    preloaded_images_verification_allowlist: Vec<String>,
    #[serde(default)]
    serialize_image_pulls: Option<bool>,
    #[serde(default)]
    max_parallel_image_pulls: Option<i32>,
    #[serde(default)]
    feature_gates: BTreeMap<String, bool>,
}

/// Parses a KubeletConfiguration (YAML or JSON); every problem is reported.
pub fn parse(data: &[u8]) -> Result<KubeletImageConfig, Vec<String>> {
    let value: Value = serde_yaml_ng::from_slice(data).map_err(|e| vec![e.to_string()])?;
    let raw: Raw = serde_json::from_value(value).map_err(|e| vec![e.to_string()])?;
    let mut errors = Vec::new();
    if raw.kind != "KubeletConfiguration" || raw.api_version != "kubelet.config.k8s.io/v1beta1" {
        errors.push(format!("no kind {:?} is registered for version {:?}", raw.kind, raw.api_version));
    }
    let policy = match raw.image_pull_credentials_verification_policy.as_deref() {
        None | Some("") => VerificationPolicy::default(),
        Some(p) => p.parse().unwrap_or_else(|e: String| {
            errors.push(e);
            VerificationPolicy::default()
        }),
    };
    if let Err(allowlist_errors) = PolicyEnforcer::new(policy, &raw.preloaded_images_verification_allowlist) {
        errors
            .extend(allowlist_errors.into_iter().map(|e| format!("invalid preloadedImagesVerificationAllowlist: {e}")));
    }
    let serialize = raw.serialize_image_pulls.unwrap_or(true);
    if let Some(n) = raw.max_parallel_image_pulls {
        if n < 1 {
            errors.push(format!("invalid configuration: maxParallelImagePulls {n} must be a positive number"));
        } else if serialize && n > 1 {
            errors.push(
                "invalid configuration: maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls (true) is set to false".to_owned(),
            );
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(KubeletImageConfig {
        policy,
        allowlist: raw.preloaded_images_verification_allowlist,
        serialize_image_pulls: serialize,
        max_parallel_image_pulls: raw.max_parallel_image_pulls,
        feature_gates: raw.feature_gates,
    })
}

/// Reads `--config FILE`.
pub fn read(path: &Path) -> Result<KubeletImageConfig, Vec<String>> {
    let data = std::fs::read(path).map_err(|e| vec![format!("{}: {e}", path.display())])?;
    parse(&data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_image_settings_and_ignores_the_rest() {
        let yaml = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.example/base/*\"]\nserializeImagePulls: false\nmaxParallelImagePulls: 3\nfeatureGates: {KubeletEnsureSecretPulledImages: true}\ncgroupDriver: systemd\n";
        let c = parse(yaml.as_bytes()).unwrap();
        assert_eq!(c.policy, VerificationPolicy::NeverVerifyAllowlistedImages);
        assert_eq!(c.max_parallel_image_pulls, Some(3));
        assert!(!c.serialize_image_pulls);
        assert!(c.feature_gates["KubeletEnsureSecretPulledImages"]);
        let minimal = parse(b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n").unwrap();
        assert_eq!(minimal, KubeletImageConfig::default());
    }

    #[test]
    fn reports_every_problem() {
        let yaml = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimagePullCredentialsVerificationPolicy: Sometimes\npreloadedImagesVerificationAllowlist: [\"/*\", \"alpine\"]\nmaxParallelImagePulls: 2\n";
        let errors = parse(yaml.as_bytes()).unwrap_err();
        assert_eq!(errors[0], "unknown image pull credential verification policy: Sometimes");
        assert_eq!(errors[1], "invalid preloadedImagesVerificationAllowlist: at least registry hostname is required");
        assert_eq!(
            errors[2],
            "invalid preloadedImagesVerificationAllowlist: neither tag nor digest is accepted in an image reference: alpine"
        );
        assert!(errors[3].contains("maxParallelImagePulls cannot be larger than 1"));
        assert_eq!(errors.len(), 4);
        assert!(parse(b"apiVersion: v1\nkind: Pod\n").unwrap_err()[0].starts_with("no kind"));
    }
}
