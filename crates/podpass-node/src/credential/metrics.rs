//! Credential provider metrics with upstream names (pkg/credentialprovider/plugin/metrics.go).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// `plugin_name` label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    /// Provider name.
    pub plugin_name: String,
}

/// `hash` label of the config info gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConfigLabels {
    /// `sha256:<hex>` of the config files.
    pub hash: String,
}

fn default_buckets() -> Histogram {
    // Prometheus DefBuckets: .005 … 10.
    Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0])
}

/// The credential provider metrics.
#[derive(Debug, Clone)]
pub struct CredentialMetrics {
    /// `kubelet_credential_provider_plugin_errors_total`.
    pub errors: Family<PluginLabels, Counter>,
    /// `kubelet_credential_provider_plugin_duration` (seconds).
    pub duration: Family<PluginLabels, Histogram, fn() -> Histogram>,
    /// `kubelet_credential_provider_config_info{hash}`.
    pub config_info: Family<ConfigLabels, Gauge>,
}

impl Default for CredentialMetrics {
    fn default() -> Self {
        Self {
            errors: Family::default(),
            duration: Family::new_with_constructor(default_buckets as fn() -> Histogram),
            config_info: Family::default(),
        }
    }
}

impl CredentialMetrics {
    /// Registers the metrics under their upstream names.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kubelet_credential_provider_plugin_errors",
            "Number of errors from credential provider plugin",
            self.errors.clone(),
        );
        registry.register(
            "kubelet_credential_provider_plugin_duration",
            "Duration of execution in seconds for credential provider plugin",
            self.duration.clone(),
        );
        registry.register(
            "kubelet_credential_provider_config_info",
            "Information about the last applied credential provider configuration with hash as label",
            self.config_info.clone(),
        );
    }

    /// Records the applied config's hash (only the latest is exposed).
    pub fn set_config_hash(&self, hash: &str) {
        self.config_info.clear();
        self.config_info.get_or_create(&ConfigLabels { hash: hash.to_owned() }).set(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_upstream_names() {
        let m = CredentialMetrics::default();
        let mut registry = Registry::default();
        m.register(&mut registry);
        m.errors.get_or_create(&PluginLabels { plugin_name: "ecr".into() }).inc();
        m.duration.get_or_create(&PluginLabels { plugin_name: "ecr".into() }).observe(0.2);
        m.set_config_hash("sha256:old");
        m.set_config_hash("sha256:abc");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("kubelet_credential_provider_plugin_errors_total{plugin_name=\"ecr\"} 1"), "{text}");
        assert!(
            text.contains("kubelet_credential_provider_plugin_duration_bucket{le=\"0.25\",plugin_name=\"ecr\"} 1"),
            "{text}"
        );
        assert!(text.contains("kubelet_credential_provider_config_info{hash=\"sha256:abc\"} 1"), "{text}");
        assert!(!text.contains("sha256:old"));
    }
}
