//! The kubelet's keyring for one pod (`MakeDockerKeyring` + the external provider keyring):
//! pull-secret credentials first, then every provider's answer in config order, then the
//! node-wide docker config; each credential tracked with its source.

use super::Fallback;
use super::docker_config::{DockerConfig, PullSecret};
use super::keyring::{CredentialSource, Keyring, TrackedAuth};
use super::provider::{CachedAnswer, PluginProvider, PodIdentity, ProviderReport};

/// Everything found for one image.
#[derive(Debug, Clone, Default)]
pub struct Lookup {
    /// Credentials to try, in order.
    pub credentials: Vec<TrackedAuth>,
    /// What each provider did.
    pub providers: Vec<ProviderReport>,
    /// A provider whose fallback is `fail` did not get the service account's consent: the
    /// pull is refused with this message.
    pub refusal: Option<String>,
    /// The cached answers (provider index, answer) among the credentials: what to drop
    /// when the registry refuses them.
    pub cached: Vec<(usize, CachedAnswer)>,
}

impl Lookup {
    /// Drops from `providers`' caches the answers this lookup used (the registry refused
    /// them), so the next lookup runs those plugins afresh, with the pod's current token.
    /// `providers` must be the list this lookup was made with.
    pub fn forget_cached(&self, providers: &[PluginProvider]) {
        for (index, answer) in &self.cached {
            if let Some(p) = providers.get(*index) {
                p.forget(answer);
            }
        }
    }
}

/// Credentials for `image` pulled for `pod`.
pub async fn lookup(
    image: &str,
    pod: Option<&PodIdentity>,
    pull_secrets: &[PullSecret],
    providers: &[PluginProvider],
    node_config: &DockerConfig,
) -> Lookup {
    let mut out = Lookup::default();
    let mut secrets = Keyring::new();
    for s in pull_secrets {
        let source =
            CredentialSource::Secret { namespace: s.namespace.clone(), name: s.name.clone(), uid: s.uid.clone() };
        secrets.add(&s.config, &source);
    }
    out.credentials.extend(secrets.lookup(image));

    let mut provided = Keyring::new();
    let mut node_wide = true;
    for (index, provider) in providers.iter().enumerate() {
        let p = provider.provide(image, pod).await;
        if let Some(answer) = p.cached.clone().filter(|_| !p.config.is_empty()) {
            out.cached.push((index, answer));
        }
        match p.fallback {
            Some(Fallback::Fail) if out.refusal.is_none() => {
                out.refusal = Some(format!(
                    "credential provider {}: {} (its fallback is fail)",
                    p.report.name,
                    p.report.skip_reason.as_deref().unwrap_or_default()
                ));
            }
            Some(Fallback::Anonymous) => node_wide = false,
            _ => {}
        }
        let credential_id = p.credential_id.unwrap_or_default();
        let source = p.service_account.map_or(CredentialSource::NodeWide, |sa| CredentialSource::ServiceAccount {
            namespace: sa.namespace,
            name: sa.name,
            uid: sa.uid,
            credential_id,
        });
        provided.add(&p.config, &source);
        out.providers.push(p.report);
    }
    out.credentials.extend(provided.lookup(image));

    // A provider falling back to anonymous keeps the node's own credentials out.
    if node_wide {
        let mut node = Keyring::new();
        node.add(node_config, &CredentialSource::NodeWide);
        out.credentials.extend(node.lookup(image));
    }
    out
}
