//! `credentialprovider.kubelet.k8s.io` CredentialProviderRequest / CredentialProviderResponse,
//! the stdin/stdout protocol of exec plugins (v1alpha1, v1beta1, v1 share one shape).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::duration::GoDuration;

/// The plugin API group.
pub const GROUP: &str = "credentialprovider.kubelet.k8s.io";
/// `credentialprovider.kubelet.k8s.io/v1`.
pub const V1: &str = "credentialprovider.kubelet.k8s.io/v1";
/// `credentialprovider.kubelet.k8s.io/v1beta1`.
pub const V1BETA1: &str = "credentialprovider.kubelet.k8s.io/v1beta1";
/// `credentialprovider.kubelet.k8s.io/v1alpha1`.
pub const V1ALPHA1: &str = "credentialprovider.kubelet.k8s.io/v1alpha1";
/// Every provider apiVersion the kubelet speaks.
pub const PROVIDER_API_VERSIONS: [&str; 3] = [V1, V1ALPHA1, V1BETA1];

/// What the kubelet writes to the plugin's stdin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CredentialProviderRequest {
    /// `CredentialProviderRequest`.
    pub kind: String,
    /// The provider's configured apiVersion.
    pub api_version: String,
    /// The image as the pod names it.
    pub image: String,
    /// Service-account token bound to the pod (tokenAttributes mode).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_account_token: String,
    /// The opted-in service-account annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub service_account_annotations: BTreeMap<String, String>,
}

impl CredentialProviderRequest {
    /// A request for `image` in `api_version`.
    pub fn new(api_version: &str, image: &str) -> Self {
        Self {
            kind: "CredentialProviderRequest".into(),
            api_version: api_version.into(),
            image: image.into(),
            service_account_token: String::new(),
            service_account_annotations: BTreeMap::new(),
        }
    }
}

/// How the answer may be reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CacheKeyType {
    /// For this exact image string.
    Image,
    /// For every image of this registry host.
    Registry,
    /// For every image the provider matches.
    Global,
}

/// One credential.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// User name (may be empty).
    #[serde(default)]
    pub username: String,
    /// Password or token (may be empty).
    #[serde(default)]
    pub password: String,
}

/// What the plugin prints on stdout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CredentialProviderResponse {
    /// `CredentialProviderResponse`.
    pub kind: String,
    /// Must equal the provider's configured apiVersion.
    pub api_version: String,
    /// Cache scope; anything but the three values makes the response unusable.
    pub cache_key_type: Option<String>,
    /// Overrides the provider's default cache duration (both ways; zero: do not cache).
    #[serde(default)]
    pub cache_duration: Option<GoDuration>,
    /// Credentials by image pattern.
    #[serde(default)]
    pub auth: BTreeMap<String, AuthConfig>,
}

impl CredentialProviderResponse {
    /// The cache key type, if it is one of the three.
    pub fn cache_key_type(&self) -> Option<CacheKeyType> {
        match self.cache_key_type.as_deref() {
            Some("Image") => Some(CacheKeyType::Image),
            Some("Registry") => Some(CacheKeyType::Registry),
            Some("Global") => Some(CacheKeyType::Global),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_omits_empty_service_account_fields() {
        let r = CredentialProviderRequest::new(V1, "registry.example/app:1");
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"registry.example/app:1"}"#
        );
        let mut r = r;
        r.service_account_token = "tok".into();
        r.service_account_annotations.insert("k".into(), "v".into());
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(v["serviceAccountToken"], "tok");
        assert_eq!(v["serviceAccountAnnotations"]["k"], "v");
    }

    #[test]
    fn response_is_strict() {
        let ok = r#"{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","cacheDuration":"5m","auth":{"*.example":{"username":"u","password":"p"}}}"#;
        let r: CredentialProviderResponse = serde_json::from_str(ok).unwrap();
        assert_eq!(r.cache_key_type(), Some(CacheKeyType::Registry));
        assert_eq!(r.cache_duration, Some(GoDuration::from_secs(300)));
        let extra = ok.replace("\"auth\"", "\"extra\":1,\"auth\"");
        assert!(serde_json::from_str::<CredentialProviderResponse>(&extra).is_err());
    }
}
