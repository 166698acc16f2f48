//! The credential-provider configuration, kept current while the node runs (beyond the
//! kubelet, which reads it once and exits on a bad one: k/k#130420). The file — or the
//! directory of files, merged in name order with a duplicate provider name refused, as
//! upstream reads it — is looked at every [`CHECK_INTERVAL`]; a changed one that validates
//! whole (every provider's binary present) replaces the providers at once, between two
//! pulls; one that does not leaves the last good providers in place and is reported — a
//! Warning event on the Node, a log line with the error naming the field, and
//! `podpass_node_credential_provider_config_reloads_total{result="failure"}` — and the node
//! never exits for it. A pull takes the providers of one moment (an `Arc`), so it never
//! mixes two configurations.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::credential::{CredentialMetrics, PluginProvider, RegisterError, ServiceAccountSource, register_providers};

use super::events::EventRecorder;

/// How often the configuration is looked at.
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// Where the providers come from.
pub(crate) struct ProviderSource {
    /// `--image-credential-provider-config`: a file or a directory.
    pub config: PathBuf,
    /// `--image-credential-provider-bin-dir`.
    pub bin_dir: PathBuf,
    /// `KubeletServiceAccountTokenForCredentialProviders`.
    pub service_account_tokens: bool,
    /// Where service accounts and their tokens come from.
    pub accounts: Arc<dyn ServiceAccountSource>,
    /// `--credential-provider-fallback`.
    pub fallbacks: crate::credential::Fallbacks,
}

/// The node's credential providers, replaced whole when their configuration changes.
pub(crate) struct Providers {
    current: RwLock<Arc<Vec<PluginProvider>>>,
    /// `None`: no configuration (no providers, nothing to watch).
    source: Option<ProviderSource>,
    /// The state ([`config_state`]) the current providers come from, or of the last
    /// refused configuration (so a bad one is reported once, not at every check).
    seen: Mutex<String>,
    metrics: CredentialMetrics,
    reloads: Family<Vec<(String, String)>, Counter>,
}

impl std::fmt::Debug for Providers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Providers").field("count", &self.current().len()).finish_non_exhaustive()
    }
}

/// What identifies the configuration at `path`: its hash, as the providers' `config_info`
/// metric shows it, or why it cannot be read (so one unreadable state is reported once).
fn config_state(path: &std::path::Path) -> String {
    match podpass_api::credential_provider::read_config(path) {
        Ok((_, hash)) => hash,
        Err(e) => format!("unreadable: {e}"),
    }
}

impl Providers {
    /// Providers registered from `source` now (the start-up read: a bad configuration is
    /// the caller's error, as the kubelet's); none without a source.
    pub(crate) fn load(
        source: Option<ProviderSource>,
        metrics: &CredentialMetrics,
    ) -> Result<Self, crate::credential::RegisterError> {
        let (providers, seen) = match &source {
            Some(s) => {
                let providers = register_providers(
                    &s.config,
                    &s.bin_dir,
                    s.service_account_tokens,
                    Some(s.accounts.clone()),
                    &s.fallbacks,
                    metrics,
                )?;
                (providers, config_state(&s.config))
            }
            None => (Vec::new(), String::new()),
        };
        Ok(Self {
            current: RwLock::new(Arc::new(providers)),
            source,
            seen: Mutex::new(seen),
            metrics: metrics.clone(),
            reloads: Family::default(),
        })
    }

    /// The providers of this moment: a pull keeps these even if a reload happens meanwhile.
    pub(crate) fn current(&self) -> Arc<Vec<PluginProvider>> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// `podpass_node_credential_provider_config_reloads_total{result}`.
    pub(crate) fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "podpass_node_credential_provider_config_reloads",
            "Changes of the credential-provider configuration seen while the node runs, by result: success (the providers were replaced) or failure (the last good ones were kept).",
            self.reloads.clone(),
        );
    }

    /// Looks at the configuration once: a changed one is applied or refused. Answers what
    /// happened (`None`: unchanged).
    pub(crate) fn check(&self, events: &EventRecorder, node: &str) -> Option<Result<usize, RegisterError>> {
        let source = self.source.as_ref()?;
        let state = config_state(&source.config);
        {
            let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            if state == *seen {
                return None;
            }
        }
        let registered = register_providers(
            &source.config,
            &source.bin_dir,
            source.service_account_tokens,
            Some(source.accounts.clone()),
            &source.fallbacks,
            &self.metrics,
        );
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner) = state;
        let label = |result: &str| vec![("result".to_owned(), result.to_owned())];
        match registered {
            Ok(providers) => {
                let count = providers.len();
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(providers);
                self.reloads.get_or_create(&label("success")).inc();
                tracing::info!(config = %source.config.display(), providers = count, "credential-provider configuration reloaded");
                events.record_node(
                    node,
                    "Normal",
                    "CredentialProviderConfigReloaded",
                    &format!(
                        "credential-provider configuration {} reloaded: {count} providers",
                        source.config.display()
                    ),
                );
                Some(Ok(count))
            }
            Err(e) => {
                let message = format!(
                    "credential-provider configuration {} refused, the last good one stays in use: {e}",
                    source.config.display()
                );
                self.reloads.get_or_create(&label("failure")).inc();
                tracing::warn!(config = %source.config.display(), error = %e, "credential-provider configuration refused; the last good one stays in use");
                events.record_node(node, "Warning", "CredentialProviderConfigInvalid", &message);
                Some(Err(e))
            }
        }
    }

    /// Checks every [`CHECK_INTERVAL`] until `stop` completes.
    pub(crate) async fn watch(
        self: Arc<Self>,
        events: EventRecorder,
        node: String,
        stop: impl std::future::Future<Output = ()>,
    ) {
        if self.source.is_none() {
            return;
        }
        tokio::pin!(stop);
        let mut tick = tokio::time::interval(CHECK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = &mut stop => return,
                _ = tick.tick() => {
                    // Reading and validating touches the disk: off the async workers.
                    let this = Arc::clone(&self);
                    let (events, node) = (events.clone(), node.clone());
                    let _ = tokio::task::spawn_blocking(move || this.check(&events, &node)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::os::unix::fs::PermissionsExt;

    use futures::future::BoxFuture;

    use super::*;
    use crate::credential::{PodIdentity, ProviderServiceAccount};

    struct NoAccounts;

    impl ServiceAccountSource for NoAccounts {
        fn service_account<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<ProviderServiceAccount, crate::request_error::RequestError>> {
            Box::pin(async { Err("no API in this test".into()) })
        }
        fn token<'a>(
            &'a self,
            _: &'a PodIdentity,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<String, crate::token::TokenError>> {
            Box::pin(async { Err(crate::token::TokenError::Fetch("no API in this test".into())) })
        }
    }

    fn config(names: &[&str]) -> String {
        let mut text = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n".to_owned();
        for n in names {
            text.push_str(&format!(
                "- name: {n}\n  matchImages: [\"{n}.example\"]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n"
            ));
        }
        text
    }

    #[tokio::test]
    async fn a_changed_configuration_replaces_the_providers_and_a_bad_one_keeps_the_last_good() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        for name in ["one", "two"] {
            std::fs::write(bin.join(name), "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = dir.path().join("providers.yaml");
        std::fs::write(&path, config(&["one"])).unwrap();
        let metrics = CredentialMetrics::default();
        let source = ProviderSource {
            config: path.clone(),
            bin_dir: bin.clone(),
            service_account_tokens: true,
            accounts: Arc::new(NoAccounts),
            fallbacks: Default::default(),
        };
        let providers = Providers::load(Some(source), &metrics).unwrap();
        let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let events = EventRecorder::new(client, "n1");
        let names = |p: &Providers| p.current().iter().map(|p| p.name().to_owned()).collect::<Vec<_>>();
        assert_eq!(names(&providers), ["one"]);
        assert!(providers.check(&events, "n1").is_none(), "unchanged");

        // A pull in flight keeps the providers it took.
        let in_flight = providers.current();
        std::fs::write(&path, config(&["one", "two"])).unwrap();
        assert!(matches!(providers.check(&events, "n1"), Some(Ok(2))));
        assert_eq!(names(&providers), ["one", "two"]);
        assert_eq!(in_flight.len(), 1);

        // Refused (a field named in the error), reported once, the last good ones kept.
        std::fs::write(&path, config(&["one", "two"]).replace("defaultCacheDuration: 1m", "defaultCacheDuration: -1m"))
            .unwrap();
        let refused = providers.check(&events, "n1").unwrap().unwrap_err().to_string();
        assert!(refused.contains("defaultCacheDuration"), "{refused}");
        assert_eq!(names(&providers), ["one", "two"]);
        assert!(providers.check(&events, "n1").is_none(), "reported once");
        // A provider whose binary is missing: the whole configuration is refused.
        std::fs::write(&path, config(&["one", "three"])).unwrap();
        assert!(providers.check(&events, "n1").unwrap().unwrap_err().to_string().contains("three"));
        assert_eq!(names(&providers), ["one", "two"]);
        // Gone: refused once, the last good ones kept.
        std::fs::remove_file(&path).unwrap();
        assert!(providers.check(&events, "n1").unwrap().is_err());
        assert!(providers.check(&events, "n1").is_none(), "reported once");
        assert_eq!(names(&providers), ["one", "two"]);
        let mut registry = prometheus_client::registry::Registry::default();
        providers.register_metrics(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"podpass_node_credential_provider_config_reloads_total{result="success"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"podpass_node_credential_provider_config_reloads_total{result="failure"} 3"#),
            "{text}"
        );
    }
}
