//! `PodSecurityConfiguration` (`pod-security.admission.config.k8s.io/v1`), read from the
//! API server's admission configuration file (`AdmissionConfiguration`, plugin
//! `PodSecurity`, inline or by `path`) as kube-apiserver reads it: defaults for the three
//! modes and exemptions by user, namespace and runtime class.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::policy::{Level, Policy, Version};

/// The most bytes of an admission configuration file read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// What Pod Security admission is configured with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PodSecurityConfig {
    /// The policy of a namespace without labels.
    pub defaults: Policy,
    /// Users whose requests are not checked.
    pub exempt_users: Vec<String>,
    /// Namespaces whose pods are not checked.
    pub exempt_namespaces: Vec<String>,
    /// Runtime classes whose pods are not checked.
    pub exempt_runtime_classes: Vec<String>,
}

impl PodSecurityConfig {
    /// Why a request is exempt (the audit annotation's value), if it is.
    pub(crate) fn exemption(&self, user: &str, namespace: &str, runtime_class: &str) -> Option<&'static str> {
        if self.namespace_exempt(namespace) {
            Some("namespace")
        } else if self.exempt_users.iter().any(|u| u == user) {
            Some("user")
        } else if self.runtime_class_exempt(runtime_class) {
            Some("runtimeClass")
        } else {
            None
        }
    }

    /// Whether pods of `namespace` are exempt.
    pub(crate) fn namespace_exempt(&self, namespace: &str) -> bool {
        self.exempt_namespaces.iter().any(|n| n == namespace)
    }

    /// Whether pods of `runtime_class` are exempt.
    pub(crate) fn runtime_class_exempt(&self, runtime_class: &str) -> bool {
        !runtime_class.is_empty() && self.exempt_runtime_classes.iter().any(|r| r == runtime_class)
    }

    /// A cluster that runs tenants' pods: enforce baseline, warn and audit restricted,
    /// `kube-system` exempt (what `podpass up` configures).
    #[cfg(test)]
    pub(crate) fn multi_tenant() -> Self {
        let at = |level| super::policy::LevelVersion { level, version: Version::Latest };
        PodSecurityConfig {
            defaults: Policy {
                enforce: at(Level::Baseline),
                audit: at(Level::Restricted),
                warn: at(Level::Restricted),
            },
            exempt_namespaces: vec!["kube-system".into()],
            ..Default::default()
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AdmissionConfiguration {
    api_version: String,
    kind: String,
    #[serde(default)]
    plugins: Vec<Plugin>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Plugin {
    name: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    configuration: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Raw {
    api_version: String,
    kind: String,
    #[serde(default)]
    defaults: BTreeMap<String, String>,
    #[serde(default)]
    exemptions: RawExemptions,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawExemptions {
    #[serde(default)]
    usernames: Vec<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    runtime_classes: Vec<String>,
}

/// A configuration file that could not be read whole.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    /// The file system said no.
    #[error("{}: {source}", .path.display())]
    Io { path: std::path::PathBuf, source: std::io::Error },
    /// Past [`MAX_CONFIG_BYTES`].
    #[error("{}: larger than {MAX_CONFIG_BYTES} bytes", .0.display())]
    TooLarge(std::path::PathBuf),
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    let io = |source| ReadError::Io { path: path.to_owned(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut data = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut data).map_err(io)?;
    if data.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ReadError::TooLarge(path.to_owned()));
    }
    Ok(data)
}

/// Reads `--admission-control-config-file`: the PodSecurity plugin's configuration, or the
/// upstream default (privileged everywhere, no exemptions) when the file names none. Every
/// problem is reported.
pub(crate) fn read_admission_config(path: &Path) -> Result<PodSecurityConfig, Vec<String>> {
    let data = read_bounded(path).map_err(|e| vec![e.to_string()])?;
    let config: AdmissionConfiguration = serde_yaml_ng::from_slice(&data).map_err(|e| vec![e.to_string()])?;
    if config.kind != "AdmissionConfiguration"
        || !matches!(config.api_version.as_str(), "apiserver.config.k8s.io/v1" | "apiserver.k8s.io/v1alpha1")
    {
        return Err(vec![format!("no kind {:?} is registered for version {:?}", config.kind, config.api_version)]);
    }
    let Some(plugin) = config.plugins.into_iter().find(|p| p.name == "PodSecurity") else {
        return Ok(PodSecurityConfig::default());
    };
    let raw: Raw = match (plugin.configuration, plugin.path) {
        (Some(inline), None) => {
            serde_json::from_value(inline).map_err(|e| vec![format!("plugins[PodSecurity].configuration: {e}")])?
        }
        (None, Some(p)) => {
            // A relative path is relative to the admission configuration file.
            let p = path.parent().unwrap_or(Path::new(".")).join(p);
            let bytes = read_bounded(&p).map_err(|e| vec![e.to_string()])?;
            serde_yaml_ng::from_slice(&bytes).map_err(|e| vec![format!("{}: {e}", p.display())])?
        }
        _ => return Err(vec!["plugins[PodSecurity]: exactly one of path and configuration must be set".to_owned()]),
    };
    parse(raw)
}

/// `PodSecurityConfiguration` validated as upstream's `ValidatePodSecurityConfiguration`.
fn parse(raw: Raw) -> Result<PodSecurityConfig, Vec<String>> {
    let mut errors = Vec::new();
    if raw.kind != "PodSecurityConfiguration"
        || !matches!(
            raw.api_version.as_str(),
            "pod-security.admission.config.k8s.io/v1"
                | "pod-security.admission.config.k8s.io/v1beta1"
                | "pod-security.admission.config.k8s.io/v1alpha1"
        )
    {
        errors.push(format!("no kind {:?} is registered for version {:?}", raw.kind, raw.api_version));
    }
    let mut defaults = Policy::default();
    for (key, value) in &raw.defaults {
        let (mode, is_version) = match key.strip_suffix("-version") {
            Some(mode) => (mode, true),
            None => (key.as_str(), false),
        };
        let target = match mode {
            "enforce" => &mut defaults.enforce,
            "audit" => &mut defaults.audit,
            "warn" => &mut defaults.warn,
            _ => {
                errors.push(format!("defaults.{key}: Unsupported value: {key:?}"));
                continue;
            }
        };
        let result = if is_version {
            Version::parse(value).map(|v| target.version = v)
        } else {
            Level::parse(value).map(|l| target.level = l)
        };
        if let Err(reason) = result {
            errors.push(format!("defaults.{key}: Invalid value: {value:?}: {reason}"));
        }
    }
    let lists = [
        ("usernames", &raw.exemptions.usernames),
        ("namespaces", &raw.exemptions.namespaces),
        ("runtimeClasses", &raw.exemptions.runtime_classes),
    ];
    for (field, list) in lists {
        for (i, item) in list.iter().enumerate() {
            if item.is_empty() {
                errors.push(format!("exemptions.{field}[{i}]: Invalid value: \"\": must be non-empty"));
            } else if list[..i].contains(item) {
                errors.push(format!("exemptions.{field}[{i}]: Duplicate value: {item:?}"));
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(PodSecurityConfig {
        defaults,
        exempt_users: raw.exemptions.usernames,
        exempt_namespaces: raw.exemptions.namespaces,
        exempt_runtime_classes: raw.exemptions.runtime_classes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
        p
    }

    #[test]
    fn reads_the_pod_security_plugin_inline_or_by_path() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let inline = write(
            dir.path(),
            "admission.yaml",
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  configuration:\n    apiVersion: pod-security.admission.config.k8s.io/v1\n    kind: PodSecurityConfiguration\n    defaults:\n      enforce: baseline\n      enforce-version: latest\n      audit: restricted\n      warn: restricted\n    exemptions:\n      namespaces: [kube-system]\n",
        );
        let c = read_admission_config(&inline).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(c, PodSecurityConfig::multi_tenant());
        write(
            dir.path(),
            "psa.yaml",
            "apiVersion: pod-security.admission.config.k8s.io/v1\nkind: PodSecurityConfiguration\ndefaults: {enforce: restricted}\nexemptions: {usernames: [ci]}\n",
        );
        let by_path = write(
            dir.path(),
            "by-path.yaml",
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  path: psa.yaml\n",
        );
        let c = read_admission_config(&by_path).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(c.defaults.enforce.to_string(), "restricted:latest");
        assert_eq!(c.exemption("ci", "team", ""), Some("user"));
        assert_eq!(c.exemption("dev", "team", ""), None);
    }

    #[test]
    fn every_problem_is_reported_naming_its_field() {
        let raw: Raw = serde_yaml_ng::from_str(
            "apiVersion: pod-security.admission.config.k8s.io/v1\nkind: PodSecurityConfiguration\ndefaults: {enforce: strict, warn-version: v2, audits: x}\nexemptions: {namespaces: [a, a, '']}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let errors = parse(raw).unwrap_err();
        assert_eq!(
            errors,
            [
                "defaults.audits: Unsupported value: \"audits\"",
                "defaults.enforce: Invalid value: \"strict\": must be one of privileged, baseline, restricted",
                "defaults.warn-version: Invalid value: \"v2\": must be 'latest' or 'v1.x'",
                "exemptions.namespaces[1]: Duplicate value: \"a\"",
                "exemptions.namespaces[2]: Invalid value: \"\": must be non-empty",
            ]
        );
    }
}
