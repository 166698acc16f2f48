//! `CredentialProviderConfig` (`kubelet.config.k8s.io/v1alpha1|v1beta1|v1`): reading a file
//! or a directory of files the way the kubelet does (plugin/config.go
//! `readCredentialProviderConfig`): lexicographic order, strict decoding, merged providers,
//! duplicate names refused, and the `sha256:` hash of the raw bytes.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::duration::GoDuration;

/// The config group.
pub const CONFIG_GROUP: &str = "kubelet.config.k8s.io";
/// Config apiVersions the kubelet decodes.
pub const CONFIG_VERSIONS: [&str; 3] = ["v1alpha1", "v1beta1", "v1"];

/// The merged configuration of every file.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CredentialProviderConfig {
    /// Providers in file order, then in order within each file.
    pub providers: Vec<CredentialProvider>,
}

/// One exec plugin.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CredentialProvider {
    /// Binary name in the plugin directory.
    #[serde(default)]
    pub name: String,
    /// Image patterns (globs in host parts) the plugin serves.
    #[serde(default)]
    pub match_images: Vec<String>,
    /// Cache duration when the plugin's response gives none (required).
    #[serde(default)]
    pub default_cache_duration: Option<GoDuration>,
    /// `credentialprovider.kubelet.k8s.io/<version>` of requests and responses.
    #[serde(default)]
    pub api_version: String,
    /// Arguments to the binary.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment added to the agent's for the plugin.
    #[serde(default)]
    pub env: Vec<ExecEnvVar>,
    /// Service-account token mode (`kubelet.config.k8s.io/v1` files only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_attributes: Option<ServiceAccountTokenAttributes>,
}

/// `env` entry.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExecEnvVar {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Value.
    #[serde(default)]
    pub value: String,
}

/// `tokenAttributes`: the plugin gets a service-account token bound to the pod.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountTokenAttributes {
    /// Audience of the token (required).
    #[serde(default)]
    pub service_account_token_audience: String,
    /// `Token` or `ServiceAccount`: whether cached credentials are per token or per SA.
    #[serde(default)]
    pub cache_type: TokenCacheType,
    /// Whether pods without a service account are skipped (required).
    #[serde(default)]
    pub require_service_account: Option<bool>,
    /// Service-account annotations that must be present and are sent to the plugin.
    #[serde(default)]
    pub required_service_account_annotation_keys: Vec<String>,
    /// Service-account annotations sent when present.
    #[serde(default)]
    pub optional_service_account_annotation_keys: Vec<String>,
}

/// `tokenAttributes.cacheType`: what a credential the plugin answered is cached for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TokenCacheType {
    /// Not set (validation requires it).
    #[default]
    Unset,
    /// `ServiceAccount`: one answer serves every pod of the service account.
    ServiceAccount,
    /// `Token`: an answer serves the token it was made from (its pod) only.
    Token,
    /// Any other value, kept as written for validation to name.
    Unsupported(String),
}

impl TokenCacheType {
    /// The value as written in the file.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Unset => "",
            Self::ServiceAccount => "ServiceAccount",
            Self::Token => "Token",
            Self::Unsupported(s) => s,
        }
    }
}

impl From<&str> for TokenCacheType {
    fn from(s: &str) -> Self {
        match s {
            "" => Self::Unset,
            "ServiceAccount" => Self::ServiceAccount,
            "Token" => Self::Token,
            other => Self::Unsupported(other.to_owned()),
        }
    }
}

impl Serialize for TokenCacheType {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TokenCacheType {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Ok(Self::from(s.as_str()))
    }
}

/// A configuration that cannot be read (messages as the kubelet's).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigReadError {
    /// No path.
    #[error("credential provider config path is empty")]
    EmptyPath,
    /// `stat` failed.
    #[error("unable to access path {path:?}: {reason}")]
    Access {
        /// The path.
        path: PathBuf,
        /// OS error.
        reason: String,
    },
    /// The directory holds no config file.
    #[error("no configuration files found in directory {0:?}")]
    NoFiles(PathBuf),
    /// A file could not be read.
    #[error("unable to read file {path:?}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// OS error.
        reason: String,
    },
    /// A file did not decode.
    #[error("error decoding config {path:?}: {reason}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A provider name appears in two files (or twice).
    #[error("duplicate provider name {0:?} found in configuration file(s)")]
    DuplicateName(String),
}

/// The files of a config path: the file itself, or the directory's `.json`/`.yaml`/`.yml`
/// files sorted by full path.
pub fn config_files(path: &Path) -> Result<Vec<PathBuf>, ConfigReadError> {
    if path.as_os_str().is_empty() {
        return Err(ConfigReadError::EmptyPath);
    }
    let meta = std::fs::metadata(path)
        .map_err(|e| ConfigReadError::Access { path: path.to_owned(), reason: e.to_string() })?;
    if !meta.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let entries = std::fs::read_dir(path)
        .map_err(|e| ConfigReadError::Access { path: path.to_owned(), reason: e.to_string() })?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| ConfigReadError::Access { path: path.to_owned(), reason: e.to_string() })?;
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        let p = entry.path();
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        if !is_dir && matches!(ext, "json" | "yaml" | "yml") {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(ConfigReadError::NoFiles(path.to_owned()));
    }
    Ok(files)
}

/// Reads and merges the configuration at `path`; returns it with its `sha256:<hex>` hash
/// (over every file in order, each as an 8-byte big-endian length and the raw bytes).
pub fn read_config(path: &Path) -> Result<(CredentialProviderConfig, String), ConfigReadError> {
    let files = config_files(path)?;
    let mut hash = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    let mut merged = CredentialProviderConfig::default();
    let mut names = std::collections::HashSet::new();
    for file in files {
        let data =
            std::fs::read(&file).map_err(|e| ConfigReadError::Read { path: file.clone(), reason: e.to_string() })?;
        hash.update(&(data.len() as u64).to_be_bytes());
        hash.update(&data);
        let config = decode(&data).map_err(|reason| ConfigReadError::Decode { path: file.clone(), reason })?;
        for provider in config.providers {
            if !names.insert(provider.name.clone()) {
                return Err(ConfigReadError::DuplicateName(provider.name));
            }
            merged.providers.push(provider);
        }
    }
    let digest = hash.finish();
    Ok((merged, format!("sha256:{}", data_encoding::HEXLOWER.encode(digest.as_ref()))))
}

/// Decodes one file (YAML or JSON) strictly, as the kubelet's UniversalDecoder with strict
/// decoding does.
pub fn decode(data: &[u8]) -> Result<CredentialProviderConfig, String> {
    let value: Value = serde_yaml_ng::from_slice(data).map_err(|e| e.to_string())?;
    let object = value.as_object().ok_or_else(|| "couldn't get version/kind; json parse error".to_owned())?;
    let compact = || serde_json::to_string(&value).unwrap_or_default();
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind.is_empty() {
        return Err(format!("Object 'Kind' is missing in '{}'", compact()));
    }
    if api_version.is_empty() {
        return Err(format!("Object 'apiVersion' is missing in '{}'", compact()));
    }
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    // The scheme knows one kind in three versions of one group; anything else is unknown to it.
    if group != CONFIG_GROUP || !CONFIG_VERSIONS.contains(&version) || kind != "CredentialProviderConfig" {
        return Err(format!("no kind {kind:?} is registered for version {api_version:?}"));
    }
    let mut unknown = Vec::new();
    unknown_fields(&value, &CONFIG_SCHEMA, version == "v1", "", &mut unknown);
    if !unknown.is_empty() {
        let list: Vec<String> = unknown.iter().map(|f| format!("unknown field {f:?}")).collect();
        return Err(format!("strict decoding error: {}", list.join(", ")));
    }
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// The fields a config object may carry, for strict decoding.
struct Schema {
    fields: &'static [(&'static str, Option<&'static Schema>)],
}

const ENV_SCHEMA: Schema = Schema { fields: &[("name", None), ("value", None)] };
const TOKEN_ATTRIBUTES_SCHEMA: Schema = Schema {
    fields: &[
        ("serviceAccountTokenAudience", None),
        ("cacheType", None),
        ("requireServiceAccount", None),
        ("requiredServiceAccountAnnotationKeys", None),
        ("optionalServiceAccountAnnotationKeys", None),
    ],
};
const PROVIDER_SCHEMA: Schema = Schema {
    fields: &[
        ("name", None),
        ("matchImages", None),
        ("defaultCacheDuration", None),
        ("apiVersion", None),
        ("args", None),
        ("env", Some(&ENV_SCHEMA)),
        ("tokenAttributes", Some(&TOKEN_ATTRIBUTES_SCHEMA)),
    ],
};
const CONFIG_SCHEMA: Schema =
    Schema { fields: &[("apiVersion", None), ("kind", None), ("providers", Some(&PROVIDER_SCHEMA))] };

/// Collects unknown field paths (`providers[0].unknownField`), case-sensitively as the
/// kubelet's strict decoder. `tokenAttributes` exists only in `v1`.
fn unknown_fields(value: &Value, schema: &Schema, v1: bool, prefix: &str, out: &mut Vec<String>) {
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                unknown_fields(item, schema, v1, &format!("{prefix}[{i}]"), out);
            }
        }
        Value::Object(map) => {
            for (key, child) in map {
                let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
                match schema.fields.iter().find(|(name, _)| name == key) {
                    Some(("tokenAttributes", _)) if !v1 => out.push(path),
                    Some((_, Some(sub))) => unknown_fields(child, sub, v1, &path, out),
                    Some((_, None)) => {}
                    None => out.push(path),
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = r#"apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: ecr
    matchImages: ["*.dkr.ecr.*.amazonaws.com", "registry.example:5000"]
    defaultCacheDuration: "12h"
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    args: ["get-credentials"]
    env:
      - name: AWS_PROFILE
        value: node
    tokenAttributes:
      serviceAccountTokenAudience: registry.example
      cacheType: ServiceAccount
      requireServiceAccount: true
      requiredServiceAccountAnnotationKeys: ["example.com/role"]
"#;

    #[test]
    fn decodes_v1_with_token_attributes() {
        let c = decode(V1.as_bytes()).unwrap();
        let p = &c.providers[0];
        assert_eq!(p.name, "ecr");
        assert_eq!(p.default_cache_duration, Some(GoDuration::from_secs(12 * 3600)));
        assert_eq!(p.env, [ExecEnvVar { name: "AWS_PROFILE".into(), value: "node".into() }]);
        let t = p.token_attributes.as_ref().unwrap();
        assert_eq!(t.require_service_account, Some(true));
        assert_eq!(t.cache_type, TokenCacheType::ServiceAccount);
    }

    #[test]
    fn strict_decoding_names_every_unknown_field() {
        let text = V1.replace("    args:", "    unknownField: 1\n    Args: []\n    args:");
        assert_eq!(
            decode(text.as_bytes()).unwrap_err(),
            r#"strict decoding error: unknown field "providers[0].Args", unknown field "providers[0].unknownField""#
        );
        let beta = V1.replace("kubelet.config.k8s.io/v1\n", "kubelet.config.k8s.io/v1beta1\n");
        assert_eq!(
            decode(beta.as_bytes()).unwrap_err(),
            r#"strict decoding error: unknown field "providers[0].tokenAttributes""#
        );
    }

    #[test]
    fn refuses_other_kinds_and_versions() {
        let wrong = V1.replace("kind: CredentialProviderConfig", "kind: KubeletConfiguration");
        assert!(decode(wrong.as_bytes()).unwrap_err().starts_with(r#"no kind "KubeletConfiguration" is registered"#));
        let v2 = V1.replace("kubelet.config.k8s.io/v1\n", "kubelet.config.k8s.io/v2\n");
        assert_eq!(
            decode(v2.as_bytes()).unwrap_err(),
            r#"no kind "CredentialProviderConfig" is registered for version "kubelet.config.k8s.io/v2""#
        );
        assert!(decode(b"apiVersion: kubelet.config.k8s.io/v1\n").unwrap_err().starts_with("Object 'Kind' is missing"));
        let bad_duration = V1.replace("\"12h\"", "\"12x\"");
        assert!(decode(bad_duration.as_bytes()).unwrap_err().contains(r#"time: unknown unit "x" in duration "12x""#));
    }

    #[test]
    fn reads_a_directory_in_order_with_the_upstream_hash() {
        let dir = tempfile::tempdir().unwrap();
        let second = V1.replace("name: ecr", "name: gcr");
        std::fs::write(dir.path().join("b.yml"), &second).unwrap();
        std::fs::write(dir.path().join("a.yaml"), V1).unwrap();
        std::fs::write(dir.path().join("ignored.txt"), "x").unwrap();
        std::fs::create_dir(dir.path().join("sub.json")).unwrap();
        let (config, hash) = read_config(dir.path()).unwrap();
        let names: Vec<_> = config.providers.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["ecr", "gcr"]);
        // sha256(len(a) || a || len(b) || b), computed independently here.
        let mut input = Vec::new();
        for text in [V1, second.as_str()] {
            input.extend_from_slice(&(text.len() as u64).to_be_bytes());
            input.extend_from_slice(text.as_bytes());
        }
        let want = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &input);
        assert_eq!(hash, format!("sha256:{}", data_encoding::HEXLOWER.encode(want.as_ref())));

        std::fs::write(
            dir.path().join("c.json"),
            serde_json::to_string(&serde_yaml_ng::from_str::<Value>(V1).unwrap()).unwrap(),
        )
        .unwrap();
        assert_eq!(
            read_config(dir.path()).unwrap_err().to_string(),
            r#"duplicate provider name "ecr" found in configuration file(s)"#
        );
        let empty = tempfile::tempdir().unwrap();
        assert!(
            read_config(empty.path()).unwrap_err().to_string().starts_with("no configuration files found in directory")
        );
        assert_eq!(read_config(Path::new("")).unwrap_err(), ConfigReadError::EmptyPath);
        assert!(read_config(Path::new("/nonexistent/x")).unwrap_err().to_string().starts_with("unable to access path"));
    }
}
