//! The files a joined node keeps of what the cluster told it at its join, as kubeadm's
//! `join` writes `/var/lib/kubelet/config.yaml` from `kube-system/kubelet-config`: the
//! cluster's CA (`pki/ca.crt`), its KubeletConfiguration (`kubelet-config.yaml`) and its
//! registry (`registry.json`), from which the credential provider's configuration
//! (`credential-provider.yaml`: podpass-credential-provider in exchange mode, fed with each
//! pod's own token) and containerd's `hosts.toml` follow. A restart of the node (no
//! discovery) runs on them as they are.

use std::path::{Path, PathBuf};

use podpass_node::join::{NodeConfiguration, RegistryConfig, RegistryTransport};
use podpass_node::runtime::containerd::RegistryHost;

/// The files under a join's data dir.
pub(super) struct NodeFiles<'a> {
    dir: &'a Path,
}

impl<'a> NodeFiles<'a> {
    pub(super) fn new(dir: &'a Path) -> NodeFiles<'a> {
        NodeFiles { dir }
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("pki").join("ca.crt")
    }

    fn kubelet_config(&self) -> PathBuf {
        self.dir.join("kubelet-config.yaml")
    }

    fn registry(&self) -> PathBuf {
        self.dir.join("registry.json")
    }

    fn provider_config(&self) -> PathBuf {
        self.dir.join("credential-provider.yaml")
    }

    /// Writes what the cluster said (and removes what it no longer says), each file
    /// atomically; a line per file written, for the join to print.
    pub(super) fn write(&self, ca_pem: &str, config: &NodeConfiguration) -> Result<Vec<String>, String> {
        let write = |path: &Path, bytes: &[u8], mode: u32| {
            podpass_serve::durable::replace(path, bytes, mode).map_err(|e| format!("writing {}: {e}", path.display()))
        };
        let pki = self.dir.join("pki");
        podpass_serve::durable::private_dir(&pki).map_err(|e| format!("creating {}: {e}", pki.display()))?;
        write(&self.ca(), ca_pem.as_bytes(), 0o644)?;
        let mut lines: Vec<String> = config
            .forbidden
            .iter()
            .map(|cm| {
                format!(
                    "warning: {cm}: this token may not read it (no kubeadm:kubelet-config Role?): running without it"
                )
            })
            .collect();
        match &config.kubelet {
            Some(text) => {
                write(&self.kubelet_config(), text.as_bytes(), 0o644)?;
                lines.push(format!(
                    "[kubelet-start] Writing kubelet configuration (kube-system/kubelet-config) to file {}",
                    self.kubelet_config().display()
                ));
            }
            None => {
                remove(&self.kubelet_config())?;
                lines.push(
                    "[kubelet-start] the cluster has no kube-system/kubelet-config: the node agent's defaults".into(),
                );
            }
        }
        match &config.registry {
            Some(registry) => {
                write(&self.registry(), registry.to_data().to_string().as_bytes(), 0o644)?;
                crate::up::files::write_provider_config(
                    &self.provider_config(),
                    &registry.host,
                    &registry.exchange_url,
                    &self.ca(),
                    self.dir,
                )
                .map_err(|e| format!("{e:#}"))?;
                lines.push(format!(
                    "[kubelet-start] images from {} pulled with each pod's own token through registry-auth at {}: {}",
                    registry.host,
                    registry.exchange_url,
                    self.provider_config().display()
                ));
            }
            None => {
                remove(&self.registry())?;
                remove(&self.provider_config())?;
            }
        }
        Ok(lines)
    }

    /// The registry the cluster named at the join, if any.
    fn registry_config(&self) -> Result<Option<RegistryConfig>, String> {
        let path = self.registry();
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        let data: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| format!("{}: {e}: join again", path.display()))?;
        RegistryConfig::from_data(&data).map(Some).map_err(|e| format!("{}: {e}: join again", path.display()))
    }

    /// The agent's flags for these files, leaving out any the operator gave in `extra`.
    pub(super) fn agent_flags(&self, extra: &[String]) -> Result<Vec<String>, String> {
        let given = |flag: &str| extra.iter().any(|a| a == flag || a.starts_with(&format!("{flag}=")));
        let mut flags = Vec::new();
        let mut push = |flag: &str, value: String| {
            if !given(flag) {
                flags.push(flag.to_owned());
                flags.push(value);
            }
        };
        if self.kubelet_config().exists() {
            push("--config", self.kubelet_config().display().to_string());
        }
        if let Some(registry) = self.registry_config()? {
            let podpass = std::env::current_exe().map_err(|e| format!("finding the podpass binary: {e}"))?;
            let plugins = crate::up::credential_provider_dir(&podpass)?;
            push("--image-credential-provider-config", self.provider_config().display().to_string());
            push("--image-credential-provider-bin-dir", plugins.display().to_string());
            if registry.transport == RegistryTransport::ClusterCa && !given("--registry-client-cert-file") {
                // The node proves containerd's pulls at the registry itself, showing its
                // own rotated certificate to registry-auth as containerd does.
                push("--registry-ca-file", self.ca().display().to_string());
                push("--registry-node-certificate", "true".to_owned());
            }
        }
        Ok(flags)
    }

    /// How this node's containerd reaches the cluster's registry.
    pub(super) fn containerd_registries(&self) -> Result<Vec<RegistryHost>, String> {
        Ok(match self.registry_config()? {
            Some(r) => crate::up::containerd_registries(&r.host, r.transport, &self.ca(), self.dir),
            None => Vec::new(),
        })
    }
}

fn remove(path: &Path) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("removing {}: {e}", path.display())),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_cluster_said_becomes_the_agents_flags_and_containerds_hosts() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let files = NodeFiles::new(dir.path());
        let registry = RegistryConfig {
            host: "127.0.0.1:5443".into(),
            exchange_url: "https://127.0.0.1:5080".into(),
            transport: RegistryTransport::ClusterCa,
        };
        let config = NodeConfiguration {
            kubelet: Some("kind: KubeletConfiguration\n".into()),
            registry: Some(registry),
            forbidden: Vec::new(),
        };
        let lines = files.write("PEM", &config).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(lines.len(), 2, "{lines:?}");
        let provider = std::fs::read_to_string(dir.path().join("credential-provider.yaml")).unwrap_or_default();
        assert!(
            provider.contains("matchImages: [\"127.0.0.1:5443\"]") && provider.contains("pki/ca.crt"),
            "{provider}"
        );
        assert!(provider.contains("root/pki/kubelet-client-current.pem"), "{provider}");
        let hosts = files.containerd_registries().unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(&hosts[..], [RegistryHost::Tls { host, client: Some(_), .. }] if host == "127.0.0.1:5443"));
        // The operator's own flag wins; the rest follow the files (the plugin may not be
        // built in this test's target dir: then its line says so).
        match files.agent_flags(&["--config=/mine.yaml".to_owned()]) {
            Ok(flags) => {
                assert!(!flags.contains(&"--config".to_owned()), "{flags:?}");
                assert!(flags.contains(&"--registry-node-certificate".to_owned()), "{flags:?}");
            }
            Err(line) => assert!(line.contains("podpass-credential-provider not found"), "{line}"),
        }
        // A cluster that says nothing more: the files go, and so do the flags.
        files.write("PEM", &NodeConfiguration::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(files.agent_flags(&[]), Ok(Vec::new()));
        assert_eq!(files.containerd_registries(), Ok(Vec::new()));
        std::fs::write(dir.path().join("registry.json"), "{\"registry\": \"x\"}").unwrap_or_else(|e| panic!("{e}"));
        assert!(files.agent_flags(&[]).is_err_and(|e| e.contains("data.registry: Invalid value")));
    }
}
