//! One credential provider plugin as the kubelet runs it (plugin.go `pluginProvider.provide`):
//! image matching, service-account token mode, cache lookups by image, registry and global
//! key, a single exec shared by concurrent identical lookups, the echoed-token rule, and
//! caching by the response's key type and duration. Unlike upstream, every provider that
//! matched but yielded nothing says why ([`ProviderReport::skip_reason`]).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use podpass_api::credential_provider::{
    CacheKeyType, CredentialProvider, CredentialProviderRequest, CredentialProviderResponse,
    ServiceAccountTokenAttributes as TokenAttributes,
};
use podpass_api::image_url::urls_match_str;
use serde::Serialize;
use tokio::sync::OnceCell;

use super::cache::{CredentialCache, ServiceAccountKey, cache_key, service_account_key, single_flight_key};
use super::docker_config::{DockerConfig, DockerConfigEntry};
use super::exec::{ExecError, PLUGIN_TIMEOUT, exec_plugin};
use super::metrics::{CredentialMetrics, PluginLabels};

/// A boxed future (the source trait stays dyn-compatible): futures' own.
pub use futures::future::BoxFuture;

/// The pod an image is pulled for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodIdentity {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// `spec.serviceAccountName` (empty for static pods).
    pub service_account: String,
}

/// A service account as the provider needs it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProviderServiceAccount {
    /// UID.
    pub uid: String,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

/// Reads service accounts and requests pod-bound tokens from the API server.
pub trait ServiceAccountSource: Send + Sync {
    /// The service account `namespace/name`.
    fn service_account<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ProviderServiceAccount, crate::request_error::RequestError>>;

    /// A token for the service account (guarded by its UID) with `audience`, bound to the
    /// pod; the server's default expiry.
    fn token<'a>(
        &'a self,
        pod: &'a PodIdentity,
        service_account_uid: &'a str,
        audience: &'a str,
    ) -> BoxFuture<'a, Result<String, crate::token::TokenError>>;
}

/// What a provider did for one lookup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ProviderReport {
    /// Provider name.
    pub name: String,
    /// The image matched one of its `matchImages`.
    pub matched: bool,
    /// The plugin was executed for this lookup (not a cache hit, not shared).
    pub ran: bool,
    /// Answered from the cache.
    pub cache_hit: bool,
    /// Why a matching provider yielded no credentials.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_reason: Option<String>,
    /// The response's cache key type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_key_type: Option<String>,
    /// `namespace/name` of the service account whose token was sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    /// The credential id (`JTI=…`) of the token the answer was obtained with (for a cache
    /// hit, the token of the run that filled the cache): what registry-auth's audit names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential_id: Option<String>,
    /// Patterns credentials were returned for.
    pub auth: Vec<String>,
    /// The fallback applied because the pod's service account had not opted in (`node`,
    /// `anonymous` or `fail`; the kubelet's `skip` is not named).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<&'static str>,
}

/// Credentials a provider returned, with the service account they were obtained for.
#[derive(Debug, Clone, Default)]
pub struct Provided {
    /// Credentials by pattern.
    pub config: DockerConfig,
    /// The service account, when one was used.
    pub service_account: Option<crate::ServiceAccountRef>,
    /// The credential id of the token the credentials were obtained with.
    pub credential_id: Option<String>,
    /// What happened.
    pub report: ProviderReport,
    /// `anonymous` or `fail` applied: what the rest of the lookup must do.
    pub fallback: Option<super::Fallback>,
    /// The cached answer these credentials came from (a cache hit).
    pub cached: Option<CachedAnswer>,
}

/// A cached answer a lookup used: what [`PluginProvider::forget`] drops when the registry
/// refuses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedAnswer {
    key: Vec<u8>,
    generation: u64,
}

#[cfg(test)]
impl CachedAnswer {
    /// An answer no cache holds (tests of code that only passes answers on).
    pub(crate) fn for_tests() -> Self {
        Self { key: b"test".to_vec(), generation: u64::MAX }
    }
}

type Flight = Arc<OnceCell<Arc<Result<CredentialProviderResponse, ExecError>>>>;

/// One registered provider.
pub struct PluginProvider {
    config: CredentialProvider,
    bin_dir: PathBuf,
    sa_token_feature: bool,
    source: Option<Arc<dyn ServiceAccountSource>>,
    cache: CredentialCache,
    fallback: super::Fallback,
    inflight: Mutex<HashMap<Vec<u8>, Flight>>,
    metrics: CredentialMetrics,
    timeout: Duration,
    execs: AtomicU64,
}

impl std::fmt::Debug for PluginProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginProvider").field("name", &self.config.name).finish_non_exhaustive()
    }
}

/// `sha256:<hex>` of a token (empty for no token).
pub fn token_hash(token: &str) -> String {
    if token.is_empty() {
        return String::new();
    }
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token.as_bytes());
    format!("sha256:{}", data_encoding::HEXLOWER.encode(digest.as_ref()))
}

/// `parseRegistry`: the text before the first `/`.
fn registry_of(image: &str) -> &str {
    image.split_once('/').map_or(image, |(r, _)| r)
}

impl PluginProvider {
    /// A provider for a validated config entry. `source` serves service-account mode.
    pub fn new(
        config: CredentialProvider,
        bin_dir: PathBuf,
        sa_token_feature: bool,
        source: Option<Arc<dyn ServiceAccountSource>>,
        metrics: CredentialMetrics,
    ) -> Self {
        Self {
            config,
            bin_dir,
            sa_token_feature,
            source,
            cache: CredentialCache::default(),
            fallback: super::Fallback::default(),
            inflight: Mutex::new(HashMap::new()),
            metrics,
            timeout: PLUGIN_TIMEOUT,
            execs: AtomicU64::new(0),
        }
    }

    /// What it does when a pod's service account has not opted in (default: the kubelet's
    /// skip).
    #[must_use]
    pub fn with_fallback(mut self, fallback: super::Fallback) -> Self {
        self.fallback = fallback;
        self
    }

    /// Its fallback.
    pub fn fallback(&self) -> super::Fallback {
        self.fallback
    }

    /// Why `pod`'s service account has not opted in to this provider's tokens (`None`: it
    /// has, or the provider asks for none). A lookup that fails here is left to the
    /// request itself, which reports it.
    async fn not_opted_in(&self, attributes: &TokenAttributes, pod: Option<&PodIdentity>) -> Option<String> {
        let sa_name = pod.map_or("", |p| p.service_account.as_str());
        if sa_name.is_empty() {
            return attributes.require_service_account.unwrap_or(true).then(|| {
                "the pod has no service account and the provider requires one (requireServiceAccount)".into()
            });
        }
        let (pod, source) = (pod?, self.source.as_ref()?);
        let sa = source.service_account(&pod.namespace, sa_name).await.ok()?;
        attributes
            .required_service_account_annotation_keys
            .iter()
            .find(|k| !sa.annotations.contains_key(*k))
            .map(|k| format!("required annotation {k} not found"))
    }

    /// Overrides the one-minute exec timeout (tests).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Provider name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// How many times the plugin has been executed.
    pub fn exec_count(&self) -> u64 {
        self.execs.load(Ordering::Relaxed)
    }

    /// Whether `image` matches one of the provider's `matchImages` (kubelet: URLsMatch).
    pub fn matches(&self, image: &str) -> bool {
        self.config.match_images.iter().any(|m| urls_match_str(m, image))
    }

    /// Drops expired cached answers; returns how many went.
    pub fn purge_expired_cache(&self) -> usize {
        self.cache.purge_expired(Instant::now())
    }

    /// Drops a cached answer the registry refused, unless another lookup has already
    /// replaced it; returns whether it went. The next lookup runs the plugin again.
    pub fn forget(&self, answer: &CachedAnswer) -> bool {
        let gone = self.cache.forget(&answer.key, answer.generation);
        if gone {
            tracing::info!(provider = %self.config.name, "cached credentials the registry refused were dropped");
        }
        gone
    }

    /// Cached answers held (expired ones included until swept).
    pub fn cached_answers(&self) -> usize {
        self.cache.len()
    }

    /// Credentials for `image` pulled for `pod` (None: no pod, e.g. a node-level pull).
    pub async fn provide(&self, image: &str, pod: Option<&PodIdentity>) -> Provided {
        let mut report = ProviderReport { name: self.config.name.clone(), ..Default::default() };
        report.matched = self.matches(image);
        if !report.matched {
            return Provided { report, ..Default::default() };
        }
        let skip = |mut report: ProviderReport, reason: String| {
            tracing::info!(provider = %report.name, image, reason = %reason, "credential provider yielded no credentials");
            report.skip_reason = Some(reason);
            Provided { report, ..Default::default() }
        };

        let mut attributes = self
            .config
            .token_attributes
            .as_ref()
            .filter(|t| self.sa_token_feature && !t.service_account_token_audience.is_empty());
        if let Some(a) = attributes
            && let Some(reason) = self.not_opted_in(a, pod).await
        {
            match self.fallback {
                super::Fallback::Skip => return skip(report, reason),
                // As a node-level pull: no token, no annotations, counted node-wide.
                super::Fallback::Node => {
                    report.fallback = Some("node");
                    attributes = None;
                }
                other @ (super::Fallback::Anonymous | super::Fallback::Fail) => {
                    report.fallback = Some(other.name());
                    let mut provided = skip(report, reason);
                    provided.fallback = Some(other);
                    return provided;
                }
            }
        }
        let pod = if attributes.is_none() && report.fallback.is_some() { None } else { pod };
        let mut request = CredentialProviderRequest::new(&self.config.api_version, image);
        let mut sa_key = Vec::new();
        let mut coordinates = None;
        let mut token = String::new();
        if let Some(attributes) = attributes {
            let sa_name = pod.map_or("", |p| p.service_account.as_str());
            if sa_name.is_empty() {
                if attributes.require_service_account.unwrap_or(true) {
                    return skip(
                        report,
                        "the pod has no service account and the provider requires one (requireServiceAccount)".into(),
                    );
                }
            } else if let (Some(pod), Some(source)) = (pod, &self.source) {
                let sa = match source.service_account(&pod.namespace, sa_name).await {
                    Ok(sa) => sa,
                    Err(e) => return skip(report, format!("service account {}/{sa_name}: {e}", pod.namespace)),
                };
                for key in &attributes.required_service_account_annotation_keys {
                    match sa.annotations.get(key) {
                        Some(v) => {
                            request.service_account_annotations.insert(key.clone(), v.clone());
                        }
                        None => return skip(report, format!("required annotation {key} not found")),
                    }
                }
                for key in &attributes.optional_service_account_annotation_keys {
                    if let Some(v) = sa.annotations.get(key) {
                        request.service_account_annotations.insert(key.clone(), v.clone());
                    }
                }
                token = match source.token(pod, &sa.uid, &attributes.service_account_token_audience).await {
                    Ok(t) => t,
                    Err(e) => return skip(report, format!("token request refused: {e}")),
                };
                let hash = token_hash(&token);
                let key = ServiceAccountKey {
                    namespace: &pod.namespace,
                    name: sa_name,
                    uid: &sa.uid,
                    annotations: &request.service_account_annotations,
                    token_hash: (attributes.cache_type == podpass_api::credential_provider::TokenCacheType::Token)
                        .then_some(hash.as_str()),
                };
                sa_key = match service_account_key(&key) {
                    Ok(k) => k,
                    Err(e) => return skip(report, e.to_string()),
                };
                report.service_account = Some(format!("{}/{sa_name}", pod.namespace));
                coordinates = Some(crate::ServiceAccountRef {
                    namespace: pod.namespace.clone(),
                    name: sa_name.to_owned(),
                    uid: sa.uid.clone(),
                });
                request.service_account_token = token.clone();
            } else {
                return skip(report, "no API access to request a service-account token (--kubeconfig)".into());
            }
        }

        // Cache: image, then registry, then global, under the same service-account part.
        let now = Instant::now();
        for base in [image, registry_of(image), "<global>"] {
            let Ok(key) = cache_key(base, &sa_key) else { continue };
            if let Some(hit) = self.cache.get(&key, now) {
                report.cache_hit = true;
                report.auth = hit.config.keys().cloned().collect();
                report.credential_id.clone_from(&hit.credential_id);
                return Provided {
                    config: hit.config,
                    service_account: hit.service_account.or(coordinates),
                    credential_id: hit.credential_id,
                    report,
                    fallback: None,
                    cached: Some(CachedAnswer { key, generation: hit.generation }),
                };
            }
        }

        let flight_key = if token.is_empty() {
            image.as_bytes().to_vec()
        } else {
            match single_flight_key(image, &token_hash(&token), &request.service_account_annotations) {
                Ok(k) => k,
                Err(e) => return skip(report, e.to_string()),
            }
        };
        let (response, ran) = self.exec_shared(flight_key, &request).await;
        report.ran = ran;
        let response = match response.as_ref() {
            Ok(r) => r,
            Err(e) => {
                let reason = match e {
                    ExecError::Exec { code, stderr_line, .. } => format!(
                        "plugin failed: {}{}",
                        code.map_or_else(|| "timed out or killed".to_owned(), |c| format!("exit code {c}")),
                        if stderr_line.is_empty() { String::new() } else { format!(": {stderr_line}") }
                    ),
                    other => format!("response rejected: {other}"),
                };
                return skip(report, reason);
            }
        };

        let token_cache =
            attributes.is_some_and(|a| a.cache_type == podpass_api::credential_provider::TokenCacheType::Token);
        if !token.is_empty() && !token_cache && response.auth.values().any(|a| a.password == token) {
            return skip(
                report,
                "response rejected: the plugin returned the service account token as the password, which is not allowed when the service account cache type is not 'Token'".into(),
            );
        }
        report.cache_key_type = response.cache_key_type.clone();
        let credential_id = credential_id_of(&token);
        report.credential_id.clone_from(&credential_id);
        let base = match response.cache_key_type() {
            Some(CacheKeyType::Image) => image,
            Some(CacheKeyType::Registry) => registry_of(image),
            Some(CacheKeyType::Global) => "<global>",
            None => {
                return skip(
                    report,
                    format!(
                        "response rejected: invalid cacheKeyType {:?}",
                        response.cache_key_type.as_deref().unwrap_or("")
                    ),
                );
            }
        };
        let config: DockerConfig = response
            .auth
            .iter()
            .map(|(k, a)| {
                (
                    k.clone(),
                    DockerConfigEntry {
                        username: a.username.clone(),
                        password: a.password.clone(),
                        email: String::new(),
                    },
                )
            })
            .collect();
        report.auth = config.keys().cloned().collect();
        let ttl = match response.cache_duration {
            Some(d) => d.to_std(),
            None => self.config.default_cache_duration.and_then(|d| d.to_std()),
        }
        .unwrap_or_default();
        if !ttl.is_zero()
            && let Ok(key) = cache_key(base, &sa_key)
        {
            self.cache.insert(key, config.clone(), coordinates.clone(), credential_id.clone(), now, ttl);
        }
        Provided { config, service_account: coordinates, credential_id, report, fallback: None, cached: None }
    }

    /// Runs the plugin, or waits for the identical run already in flight; returns the
    /// answer and whether this caller ran it.
    async fn exec_shared(
        &self,
        key: Vec<u8>,
        request: &CredentialProviderRequest,
    ) -> (Arc<Result<CredentialProviderResponse, ExecError>>, bool) {
        let flight = {
            let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(inflight.entry(key.clone()).or_default())
        };
        let mut ran = false;
        let result = flight
            .get_or_init(|| async {
                ran = true;
                self.execs.fetch_add(1, Ordering::Relaxed);
                let labels = PluginLabels { plugin_name: self.config.name.clone() };
                let started = Instant::now();
                let result = exec_plugin(&self.bin_dir, &self.config, request, self.timeout).await;
                self.metrics.duration.get_or_create(&labels).observe(started.elapsed().as_secs_f64());
                if let Err(e) = &result
                    && e.is_exec_failure()
                {
                    self.metrics.errors.get_or_create(&labels).inc();
                }
                Arc::new(result)
            })
            .await
            .clone();
        // The flight is over: later lookups run (or hit the cache) afresh.
        let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if inflight.get(&key).is_some_and(|f| Arc::ptr_eq(f, &flight)) {
            inflight.remove(&key);
        }
        (result, ran)
    }
}

/// The credential id (`JTI=<jti>`, as the API server's audit names it) of a service-account
/// token the node holds: read from its payload unverified — the node asked for it, and the
/// id only labels the node's own audit.
pub fn credential_id_of(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = data_encoding::BASE64URL_NOPAD.decode(payload.as_bytes()).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let jti = claims.get("jti")?.as_str().filter(|j| !j.is_empty() && j.len() <= 256)?;
    Some(format!("JTI={jti}"))
}
