//! `EnsureImageExists` (kubelet: pkg/kubelet/images/image_manager.go, with the
//! KubeletEnsureSecretPulledImages gate): is the image present, may this pod use it, and
//! if not, pull it with the pod's credentials — trying each credential of the keyring
//! lookup in order until one pulls (kuberuntime: `PullImage`) — and record which one did.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::Serialize;
use tokio::sync::{OnceCell, Semaphore};

use super::backoff::Backoff;
use super::origin::{OriginCheck, OriginProof, manifest_digest};
use super::pull_manager::{PodCredentials, PullManager, PullVerdict};
use super::pull_slots::PullSlots;
use super::records::{ImagePullCredentials, ImagePullSecret, ImagePullServiceAccount};
use super::reference::apply_default_tag;
use super::service::{ImageError, ImageService, PresentImage, PullAuth};
use crate::credential::{CredentialSource, Lookup, TrackedAuth};

/// A container's `imagePullPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    /// Always pull.
    Always,
    /// Pull when absent.
    IfNotPresent,
    /// Never pull.
    Never,
}

/// An `imagePullPolicy` upstream does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Unsupported value: {0:?}: supported values: \"Always\", \"IfNotPresent\", \"Never\"")]
pub struct UnsupportedPullPolicy(pub String);

impl std::str::FromStr for PullPolicy {
    type Err = UnsupportedPullPolicy;
    fn from_str(s: &str) -> Result<Self, UnsupportedPullPolicy> {
        match s {
            "Always" => Ok(Self::Always),
            "IfNotPresent" => Ok(Self::IfNotPresent),
            "Never" => Ok(Self::Never),
            _ => Err(UnsupportedPullPolicy(s.to_owned())),
        }
    }
}

impl PullPolicy {
    /// The API's default for a container that names none (core/v1 `SetDefaults_Container`):
    /// `Always` when the image's tag is `latest` (also when it has neither tag nor digest),
    /// otherwise `IfNotPresent`. An image that does not parse gets `IfNotPresent` here; it
    /// fails later with the image manager's own error.
    pub fn default_for(image: &str) -> Self {
        match super::reference::parse(image) {
            Ok(r) if r.tag.as_deref() == Some("latest") || (r.tag.is_none() && r.digest.is_none()) => Self::Always,
            _ => Self::IfNotPresent,
        }
    }

    /// As the API spells it.
    pub fn api_name(self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::IfNotPresent => "IfNotPresent",
            Self::Never => "Never",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Always => "always",
            Self::IfNotPresent => "ifnotpresent",
            Self::Never => "never",
        }
    }
}

/// An event the kubelet would record on the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub event_type: &'static str,
    /// `Pulled`, `Pulling`, `Failed`, `ErrImageNeverPull`, `InspectFailed`.
    pub reason: &'static str,
    /// The message.
    pub message: String,
}

/// The error EnsureImageExists returns (the container's waiting reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EnsureError {
    /// `InvalidImageName`.
    InvalidImageName,
    /// `ImageInspectError`.
    ImageInspectError,
    /// `ErrImageNeverPull`.
    ErrImageNeverPull,
    /// `ErrImagePull`.
    ErrImagePull,
    /// `ImagePullBackOff`: a pull is due but the last one failed too recently.
    ImagePullBackOff,
}

impl EnsureError {
    /// The container's waiting reason, as the kubelet spells the error.
    pub fn reason(self) -> &'static str {
        match self {
            Self::InvalidImageName => "InvalidImageName",
            Self::ImageInspectError => "ImageInspectError",
            Self::ErrImageNeverPull => "ErrImageNeverPull",
            Self::ErrImagePull => "ErrImagePull",
            Self::ImagePullBackOff => "ImagePullBackOff",
        }
    }
}

/// What EnsureImageExists decided and did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EnsureOutcome {
    /// The image after the default tag.
    pub image: String,
    /// The pull policy applied (`Always`, `IfNotPresent`, `Never`).
    pub pull_policy: &'static str,
    /// The runtime had the image before this call.
    pub present: bool,
    /// A pull was required (pull policy, or the pod could not show it may use the image).
    pub must_pull: bool,
    /// A pull happened and succeeded.
    pub pulled: bool,
    /// Where the credential that pulled came from (`none`: anonymous).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential_used: Option<serde_json::Value>,
    /// The image reference (ID) the container would run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_ref: Option<String>,
    /// Where the pull's proof of access came from when the image's own registry was asked
    /// (beyond upstream: a runtime's pull may have come from a mirror).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verified_at: Option<OriginProof>,
    /// Why a present image was allowed without a pull: `record` (this pod's credentials, or
    /// every pod, are on its pull record), `policy` (the verification policy exempts it:
    /// preloaded or allowlisted), `unchecked` (no pull records are kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_by: Option<&'static str>,
    /// The manifest digest the image resolved to, as the runtime recorded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Error kind when the pod may not use the image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<EnsureError>,
    /// The error's message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Events, in order.
    pub events: Vec<Event>,
}

impl EnsureOutcome {
    /// Whether the container may start with the image.
    pub fn allowed(&self) -> bool {
        self.error.is_none() && self.image_ref.is_some()
    }
}

/// Labels of `kubelet_image_manager_ensure_image_requests_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct EnsureLabels {
    /// `always|ifnotpresent|never`.
    pub pull_policy: &'static str,
    /// `true|false|unknown`.
    pub present_locally: &'static str,
    /// `true|false|unknown`.
    pub pull_required: &'static str,
}

/// What one EnsureImageExists saw, for `kubelet_imagemanager_ensure_image_requests_total`
/// (`None`: it ended before knowing).
#[derive(Debug, Default, Clone, Copy)]
struct Observed {
    present_locally: Option<bool>,
    pull_required: Option<bool>,
}

/// Whether a pod may use an image that is on the node.
#[derive(Debug)]
enum PresentImageUse {
    /// Yes: with no records kept (`unchecked`), or the records or the policy allow this pod.
    Use {
        /// `record`, `policy` or `unchecked` ([`EnsureOutcome::allowed_by`]).
        by: &'static str,
    },
    /// No: it must pull to prove access.
    ProveAccess,
    /// The check failed (fail safe: no use; the pod sees the error).
    CheckFailed(String),
}

fn tri(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "true",
        Some(false) => "false",
        None => "unknown",
    }
}

/// A boxed credential lookup, run at most once per call and only when needed.
pub type LookupFuture = Pin<Box<dyn Future<Output = Lookup> + Send>>;

/// Makes the lookup: `None` the first time, then `Some(previous)` to look up again after
/// the registry refused `previous`'s cached answers (drop them, ask the plugins afresh).
pub type MakeLookup = Box<dyn Fn(Option<Lookup>) -> LookupFuture + Send + Sync>;

/// The pod's credentials, looked up on first use, and at most once more when the registry
/// refuses cached ones.
pub struct LazyLookup {
    first: OnceCell<Lookup>,
    again: OnceCell<Lookup>,
    make: MakeLookup,
}

impl std::fmt::Debug for LazyLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyLookup")
            .field("done", &self.first.initialized())
            .field("again", &self.again.initialized())
            .finish()
    }
}

impl LazyLookup {
    /// A lookup that runs `make(None)` the first time it is needed.
    pub fn new(make: impl Fn(Option<Lookup>) -> LookupFuture + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self { first: OnceCell::new(), again: OnceCell::new(), make: Box::new(make) })
    }

    /// A lookup whose answer is `lookup`, with no second chance (one-shot commands, tests).
    pub fn ready(lookup: Lookup) -> Arc<Self> {
        Self::new(move |_| {
            let lookup = lookup.clone();
            Box::pin(async move { lookup })
        })
    }

    /// Whether the lookup ran.
    pub fn ran(&self) -> bool {
        self.first.initialized()
    }

    /// The lookup's result: the second one once [`LazyLookup::again`] has run.
    pub async fn get(&self) -> &Lookup {
        if let Some(again) = self.again.get() {
            return again;
        }
        self.first.get_or_init(|| (self.make)(None)).await
    }

    /// Looks up again, once, when the first lookup's credentials came from providers'
    /// caches: those answers are dropped and the plugins asked afresh. `None` when nothing
    /// was cached (asking again would give the same credentials).
    pub async fn again(&self) -> Option<&Lookup> {
        let first = self.first.get()?;
        if first.cached.is_empty() {
            return None;
        }
        Some(self.again.get_or_init(|| (self.make)(Some(first.clone()))).await)
    }
}

/// The pull-record view of the pod's credentials: its pull secrets (with hashes) and the
/// first service account a provider used. Node-wide credentials are never the pod's.
pub fn pod_credentials(lookup: &Lookup) -> PodCredentials {
    let mut out = PodCredentials::default();
    for c in &lookup.credentials {
        match &c.source {
            CredentialSource::Secret { namespace, name, uid } => out.secrets.push(ImagePullSecret {
                uid: uid.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
                credential_hash: c.auth_config_hash.clone(),
            }),
            CredentialSource::ServiceAccount { namespace, name, uid, .. } if out.service_account.is_none() => {
                out.service_account = Some(ImagePullServiceAccount {
                    uid: uid.clone(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                });
            }
            _ => {}
        }
    }
    out
}

/// What to record for the credential that pulled (`None`: anonymous).
pub fn credentials_to_record(used: Option<&TrackedAuth>) -> ImagePullCredentials {
    match used.map(|c| &c.source) {
        Some(CredentialSource::Secret { namespace, name, uid }) => ImagePullCredentials {
            kubernetes_secrets: vec![ImagePullSecret {
                uid: uid.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
                credential_hash: used.map(|c| c.auth_config_hash.clone()).unwrap_or_default(),
            }],
            ..Default::default()
        },
        Some(CredentialSource::ServiceAccount { namespace, name, uid, .. }) => ImagePullCredentials {
            kubernetes_service_accounts: vec![ImagePullServiceAccount {
                uid: uid.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
            }],
            ..Default::default()
        },
        Some(CredentialSource::NodeWide) | None => {
            ImagePullCredentials { node_pods_accessible: true, ..Default::default() }
        }
    }
}

/// How long one pull may take before it is cancelled. The kubelet gives CRI `PullImage` no
/// deadline and leaves stalls to the runtime (containerd ≥ 1.7: `image_pull_progress_timeout`,
/// 5 min without data); containerd 1.6 has none, and a CRI pull reports no progress, so the
/// whole pull is bounded, by the same 5 minutes.
pub const DEFAULT_PULL_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The image manager: image service, pull manager (`None` when the
/// KubeletEnsureSecretPulledImages gate is off) and the puller's concurrency.
pub struct ImageManager<S> {
    service: Arc<S>,
    pull_manager: Option<Arc<PullManager>>,
    slots: PullSlots,
    pull_timeout: Duration,
    requests: Family<EnsureLabels, Counter>,
    backoff: Mutex<Backoff>,
    origin: Option<Arc<OriginCheck>>,
}

impl<S> std::fmt::Debug for ImageManager<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageManager").field("pull_manager", &self.pull_manager).finish_non_exhaustive()
    }
}

fn format_duration(d: Duration) -> String {
    // Go's Duration.String of a value truncated to milliseconds.
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = ms / 1000;
    let frac = ms % 1000;
    let (m, s) = (secs / 60, secs % 60);
    let sec = if frac == 0 { format!("{s}s") } else { format!("{s}.{}s", format!("{frac:03}").trim_end_matches('0')) };
    if m == 0 { sec } else { format!("{m}m{sec}") }
}

impl<S: ImageService + 'static> ImageManager<S> {
    /// `serialize`: one pull at a time (`serializeImagePulls`); otherwise at most
    /// `max_parallel` (`maxParallelImagePulls`, unlimited when `None`).
    pub fn new(
        service: Arc<S>,
        pull_manager: Option<Arc<PullManager>>,
        serialize: bool,
        max_parallel: Option<i32>,
    ) -> Self {
        let permits = if serialize {
            1
        } else {
            max_parallel.and_then(|n| usize::try_from(n).ok()).filter(|n| *n > 0).unwrap_or(Semaphore::MAX_PERMITS)
        };
        Self {
            service,
            pull_manager,
            slots: PullSlots::new(permits),
            pull_timeout: DEFAULT_PULL_TIMEOUT,
            requests: Family::default(),
            backoff: Mutex::new(Backoff::default()),
            origin: None,
        }
    }

    /// Bounds each pull by `timeout` (default [`DEFAULT_PULL_TIMEOUT`]): a pull still
    /// unanswered then is cancelled and fails with `ErrImagePull` saying so.
    #[must_use]
    pub fn with_pull_timeout(mut self, timeout: Duration) -> Self {
        self.pull_timeout = timeout;
        self
    }

    /// The node's pull slots held right now (tests).
    #[cfg(test)]
    fn slots_in_use(&self) -> usize {
        self.slots.in_use()
    }

    /// Every pull is then proven at the image's own registry before it may write a pull
    /// record or let a container start (for runtimes that may pull through a mirror).
    #[must_use]
    pub fn with_origin_check(mut self, check: Option<OriginCheck>) -> Self {
        self.origin = check.map(Arc::new);
        self
    }

    /// Whether pulls are proven at the image's own registry.
    pub fn verifies_at_origin(&self) -> bool {
        self.origin.is_some()
    }

    /// `kubelet_image_manager_ensure_image_requests_total`, to register.
    pub fn requests_metric(&self) -> Family<EnsureLabels, Counter> {
        self.requests.clone()
    }

    /// The image service.
    pub fn service(&self) -> &Arc<S> {
        &self.service
    }

    /// EnsureImageExists for one container image. `credentials` is looked up only when a
    /// pull happens or the records cannot decide without the pod's credentials.
    /// No pull back-off applies (a one-shot command is one attempt).
    pub async fn ensure_image_exists(
        &self,
        image: &str,
        policy: PullPolicy,
        credentials: Arc<LazyLookup>,
    ) -> EnsureOutcome {
        self.ensure_counted(None, image, policy, credentials).await
    }

    /// EnsureImageExists for a container of the pod `pod_uid`, with the kubelet's image pull
    /// back-off keyed `<podUID>_<image>`: after a failed pull, a pull due within the
    /// back-off is not attempted (`ImagePullBackOff`, a `BackOff` event, and the previous
    /// error repeated in the message).
    /// Its pull counts against `namespace`'s share of the node's parallel pulls.
    pub async fn ensure_image_for_pod(
        &self,
        namespace: &str,
        pod_uid: &str,
        image: &str,
        policy: PullPolicy,
        credentials: Arc<LazyLookup>,
    ) -> EnsureOutcome {
        let pod = PodPull { backoff_key: format!("{pod_uid}_{image}"), namespace: namespace.to_owned() };
        self.ensure_counted(Some(pod), image, policy, credentials).await
    }

    /// When the pull back-off of a pod's image ends (`None`: not backing off).
    pub fn backoff_until(&self, pod_uid: &str, image: &str) -> Option<tokio::time::Instant> {
        self.lock_backoff().until(&format!("{pod_uid}_{image}"), tokio::time::Instant::now())
    }

    /// Drops the back-off state of a pod that is gone.
    pub fn forget_pod(&self, pod_uid: &str) {
        self.lock_backoff().forget_prefix(&format!("{pod_uid}_"));
    }

    fn lock_backoff(&self) -> std::sync::MutexGuard<'_, Backoff> {
        self.backoff.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn ensure_counted(
        &self,
        pod: Option<PodPull>,
        image: &str,
        policy: PullPolicy,
        credentials: Arc<LazyLookup>,
    ) -> EnsureOutcome {
        let (outcome, seen) = self.ensure(pod, image, policy, credentials).await;
        self.requests
            .get_or_create(&EnsureLabels {
                pull_policy: policy.label(),
                present_locally: tri(seen.present_locally),
                pull_required: tri(seen.pull_required),
            })
            .inc();
        outcome
    }

    /// EnsureImageExists in its steps: the image's name (default tag), whether it is on the
    /// node, whether this pod may use it as it is, and otherwise the pull.
    async fn ensure(
        &self,
        pod: Option<PodPull>,
        requested: &str,
        policy: PullPolicy,
        credentials: Arc<LazyLookup>,
    ) -> (EnsureOutcome, Observed) {
        let mut seen = Observed::default();
        let mut d = EnsureOutcome { image: requested.to_owned(), pull_policy: policy.api_name(), ..Default::default() };
        let image = match apply_default_tag(requested) {
            Ok(i) => i,
            Err(e) => {
                let msg = format!(
                    "Failed to apply default image tag {requested:?}: couldn't parse image reference {requested:?}: {e}"
                );
                return (fail(d, "InspectFailed", EnsureError::InvalidImageName, msg), seen);
            }
        };
        d.image = image.clone();
        let present = match self.present_image(&image, policy).await {
            Ok(p) => p,
            Err(e) => {
                let msg = format!("Failed to inspect image {requested:?}: {e}");
                return (fail(d, "InspectFailed", EnsureError::ImageInspectError, msg), seen);
            }
        };
        let image_ref = present.as_ref().map(|p| p.id.clone()).unwrap_or_default();
        d.present = !image_ref.is_empty();
        if policy != PullPolicy::Always {
            seen.present_locally = Some(d.present);
        }
        let wants_pull = match policy {
            PullPolicy::Always => true,
            PullPolicy::IfNotPresent => !d.present,
            PullPolicy::Never => false,
        };
        let must_pull = if !wants_pull && d.present {
            match self.use_present(&image, &image_ref, &credentials).await {
                PresentImageUse::Use { by } => {
                    seen.pull_required = Some(false);
                    d.image_ref = Some(image_ref);
                    d.allowed_by = Some(by);
                    d.digest = present.and_then(|p| manifest_digest(&image, &p.repo_digests));
                    let accessible = if by == "unchecked" { "" } else { " and can be accessed by the pod" };
                    let message = format!("Container image {requested:?} already present on machine{accessible}");
                    d.events.push(normal("Pulled", message));
                    return (d, seen);
                }
                PresentImageUse::CheckFailed(e) => {
                    seen.pull_required = Some(true);
                    d.must_pull = true;
                    return (fail(d, "Failed", EnsureError::ErrImagePull, e), seen);
                }
                PresentImageUse::ProveAccess => true,
            }
        } else {
            wants_pull
        };
        seen.pull_required = Some(must_pull);
        d.must_pull = must_pull;
        if !must_pull || policy == PullPolicy::Never {
            // Also when the image is present but this pod may not use it: the message does
            // not reveal that it exists.
            d.must_pull = d.present;
            let never_msg = format!("Container image {requested:?} is not present with pull policy of Never");
            return (fail_with(d, "Warning", "ErrImageNeverPull", EnsureError::ErrImageNeverPull, never_msg), seen);
        }
        (self.pull(d, pod, requested, image, credentials).await, seen)
    }

    /// The image on the node (`None`: absent; never looked up for `Always`).
    async fn present_image(&self, image: &str, policy: PullPolicy) -> Result<Option<PresentImage>, ImageError> {
        if policy == PullPolicy::Always {
            return Ok(None);
        }
        Ok(self.service.image_status(image).await?.filter(|i| !i.id.is_empty()))
    }

    /// Whether this pod may use the present image without pulling (MustAttemptImagePull,
    /// when pull records are kept).
    async fn use_present(&self, image: &str, image_ref: &str, credentials: &Arc<LazyLookup>) -> PresentImageUse {
        let Some(pm) = self.pull_manager.clone() else {
            return PresentImageUse::Use { by: "unchecked" };
        };
        let verdict = must_attempt(pm, image, image_ref, credentials.clone()).await;
        if let Some(e) = verdict.error() {
            return PresentImageUse::CheckFailed(e.to_owned());
        }
        match verdict {
            PullVerdict::PolicyAllowed => PresentImageUse::Use { by: "policy" },
            PullVerdict::RecordFound => PresentImageUse::Use { by: "record" },
            _ => PresentImageUse::ProveAccess,
        }
    }

    /// The pull: intent recorded, the pod's back-off honoured, each credential tried in
    /// order, the pulled record written.
    async fn pull(
        &self,
        mut d: EnsureOutcome,
        pod: Option<PodPull>,
        requested: &str,
        image: String,
        credentials: Arc<LazyLookup>,
    ) -> EnsureOutcome {
        if let Some(pm) = &self.pull_manager {
            let (pm, img) = (pm.clone(), image.clone());
            let r = tokio::task::spawn_blocking(move || pm.record_pull_intent(&img))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()));
            if let Err(e) = r {
                let msg = format!("Failed to record image pull intent for container image {image:?}: {e}");
                return fail(d, "Failed", EnsureError::ErrImagePull, msg);
            }
        }
        let backoff_key = pod.as_ref().map(|p| p.backoff_key.as_str());
        let namespace = pod.as_ref().map(|p| p.namespace.as_str());
        if let Some(key) = backoff_key {
            // kubelet pullImage: the intent is recorded before the back-off check, and a
            // pull skipped for back-off counts as a failed one.
            let backing_off = {
                let mut backoff = self.lock_backoff();
                match backoff.in_backoff(key, tokio::time::Instant::now()) {
                    Some(previous) => Some(previous.map(str::to_owned)),
                    None => {
                        backoff.clear_error(key);
                        None
                    }
                }
            };
            if let Some(previous) = backing_off {
                let event = format!("Back-off pulling image {requested:?}");
                let msg = match previous {
                    Some(p) => format!("{event}: {p}"),
                    None => event.clone(),
                };
                self.pull_failed(&image).await;
                d.events.push(normal("BackOff", event));
                d.error = Some(EnsureError::ImagePullBackOff);
                d.message = Some(msg);
                return d;
            }
        }
        d.events.push(normal("Pulling", format!("Pulling image {requested:?}")));
        let started = Instant::now();
        let lookup = credentials.get().await;
        if let Some(refusal) = &lookup.refusal {
            return self.refused(d, requested, &image, refusal).await;
        }
        let (mut result, mut pull_time) = self.attempt(&image, namespace, &lookup.credentials).await;
        // A provider's cached answer may have outlived what it was bound to (an exchange
        // token bound to a pod since deleted): drop it and ask the plugin again with this
        // pod's token, once per pull, before the pull counts as failed.
        if result.is_err()
            && let Some(again) = credentials.again().await
        {
            tracing::info!(image, "the registry refused cached provider credentials; pulling with fresh ones");
            if let Some(refusal) = &again.refusal {
                return self.refused(d, requested, &image, refusal).await;
            }
            (result, pull_time) = self.attempt(&image, namespace, &again.credentials).await;
        }
        match result {
            Ok((image_ref, used, proof)) => {
                if let Some(pm) = &self.pull_manager {
                    let creds = credentials_to_record(used.as_ref());
                    let (pm, img, r) = (pm.clone(), image.clone(), image_ref.clone());
                    let written = tokio::task::spawn_blocking(move || pm.record_image_pulled(&img, &r, Some(&creds)))
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|r| r.map_err(|e| e.to_string()));
                    if let Err(e) = written {
                        // The dangling intent keeps the image "pulled by the node" (verify).
                        tracing::warn!(image, error = %e, "failed to record the pulled image");
                    }
                }
                let (size, digest) = match self.service.image_status(&image_ref).await {
                    Ok(Some(i)) => (i.size, manifest_digest(&image, &i.repo_digests)),
                    _ => (0, None),
                };
                d.digest = proof.as_ref().map(|p| p.digest.clone()).or(digest);
                self.lock_backoff().collect_garbage(tokio::time::Instant::now());
                d.pulled = true;
                d.verified_at = proof;
                d.credential_used = Some(match &used {
                    Some(c) => serde_json::to_value(&c.source).unwrap_or_default(),
                    None => serde_json::json!({"type": "none"}),
                });
                d.image_ref = Some(image_ref);
                d.events.push(normal(
                    "Pulled",
                    format!(
                        "Successfully pulled image {requested:?} in {} ({} including waiting). Image size: {size} bytes.",
                        format_duration(pull_time),
                        format_duration(started.elapsed()),
                    ),
                ));
                d
            }
            Err(failure) => {
                let e = match failure {
                    PullFailure::Pull(e) => {
                        self.pull_failed(&image).await;
                        e
                    }
                    PullFailure::Origin { image_ref, message } => {
                        // The image is on the node now, unproven: recorded as pulled by the
                        // node with no credentials on record, so nobody uses it unverified
                        // (and it never counts as preloaded).
                        self.record_unproven(&image, &image_ref).await;
                        message
                    }
                };
                if let Some(key) = backoff_key {
                    self.lock_backoff().next(key, tokio::time::Instant::now(), format!("ErrImagePull: {e}"));
                }
                let msg = format!("Failed to pull image {requested:?}: {e}");
                d.events.push(warning("Failed", msg));
                d.error = Some(EnsureError::ErrImagePull);
                d.message = Some(e);
                d
            }
        }
    }
}

impl<S: ImageService> ImageManager<S> {
    /// One pull with `credentials` in a slot of the node's parallel pulls (the image's
    /// registry's and `namespace`'s shares), bounded by the pull timeout, then its proof at
    /// the image's registry; answers how long the runtime's pull took.
    async fn attempt(
        &self,
        image: &str,
        namespace: Option<&str>,
        credentials: &[TrackedAuth],
    ) -> (Result<(String, Option<TrackedAuth>, Option<OriginProof>), PullFailure>, Duration) {
        let registry = super::reference::parse(image).map(|r| r.domain).unwrap_or_default();
        let slot = self.slots.acquire(&registry, namespace).await;
        let pull_started = Instant::now();
        // Dropping the pull cancels the runtime's call (containerd then cancels its pull).
        let result = match tokio::time::timeout(
            self.pull_timeout,
            pull_with_credentials(self.service.as_ref(), image, credentials),
        )
        .await
        {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!(
                "the pull from {registry} did not finish within {}: cancelled (a registry that answers too slowly, or never)",
                format_duration(self.pull_timeout)
            )),
        };
        let pull_time = pull_started.elapsed();
        drop(slot);
        let result = match result {
            Ok((image_ref, used)) => self.prove_at_origin(image, image_ref, used, credentials).await,
            Err(e) => Err(PullFailure::Pull(e)),
        };
        (result, pull_time)
    }
}

/// A pod's pull: its back-off key (`<podUID>_<image>`) and the namespace whose share of
/// the node's pulls it counts against.
#[derive(Debug, Clone)]
struct PodPull {
    backoff_key: String,
    namespace: String,
}

/// Why a pull did not give the pod the image.
enum PullFailure {
    /// The runtime's pull failed.
    Pull(String),
    /// The runtime pulled `image_ref`, but the image's registry did not confirm access.
    Origin { image_ref: String, message: String },
}

impl<S: ImageService> ImageManager<S> {
    /// Proves a runtime's pull at the image's own registry: the manifest digest the runtime
    /// recorded, asked for with the credential that pulled, then each other credential in
    /// order (anonymously when the pod has none). The one the registry accepts is what the
    /// record names. Without an origin check the runtime's pull is the proof.
    async fn prove_at_origin(
        &self,
        image: &str,
        image_ref: String,
        used: Option<TrackedAuth>,
        credentials: &[TrackedAuth],
    ) -> Result<(String, Option<TrackedAuth>, Option<OriginProof>), PullFailure> {
        let Some(origin) = &self.origin else {
            return Ok((image_ref, used, None));
        };
        let fail = |image_ref: &str, why: String| PullFailure::Origin {
            image_ref: image_ref.to_owned(),
            message: format!("verifying at the image's registry (the runtime may have pulled from a mirror): {why}"),
        };
        let repo_digests = match self.service.image_status(&image_ref).await {
            Ok(Some(i)) => i.repo_digests,
            Ok(None) => Vec::new(),
            Err(e) => return Err(fail(&image_ref, format!("image status of {image_ref}: {e}"))),
        };
        let Some(digest) = manifest_digest(image, &repo_digests) else {
            return Err(fail(&image_ref, format!("the runtime reported no manifest digest for {image}")));
        };
        let mut order: Vec<Option<&TrackedAuth>> = Vec::new();
        if credentials.is_empty() {
            order.push(None);
        } else {
            order.extend(used.as_ref().map(Some));
            order.extend(credentials.iter().filter(|c| Some(*c) != used.as_ref()).map(Some));
        }
        let mut errors = Vec::new();
        for c in order {
            let auth = c.map(|c| PullAuth { username: c.username.clone(), password: c.password.clone() });
            match origin.verify(image, &digest, auth.as_ref()).await {
                Ok(proof) => {
                    tracing::info!(
                        image,
                        registry = %proof.registry,
                        digest = %proof.digest,
                        auth = proof.auth,
                        "pull verified at the image's registry"
                    );
                    return Ok((image_ref, c.cloned(), Some(proof)));
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        let why = if errors.len() == 1 { errors.remove(0) } else { format!("[{}]", errors.join(", ")) };
        Err(fail(&image_ref, why))
    }
}

impl<S> ImageManager<S> {
    /// A pull the image's registry did not confirm: recorded with no credentials.
    async fn record_unproven(&self, image: &str, image_ref: &str) {
        if let Some(pm) = &self.pull_manager {
            let (pm, img, r) = (pm.clone(), image.to_owned(), image_ref.to_owned());
            let written = tokio::task::spawn_blocking(move || pm.record_image_pulled(&img, &r, None)).await;
            if !matches!(written, Ok(Ok(()))) {
                // The dangling intent keeps the image "pulled by the node" (verify).
                tracing::warn!(image, "failed to record an unproven pull");
            }
        }
    }

    /// A pull a provider's fallback refused before the runtime was asked: failed, as the
    /// pull records count it, with the provider's reason.
    async fn refused(&self, d: EnsureOutcome, requested: &str, image: &str, refusal: &str) -> EnsureOutcome {
        self.pull_failed(image).await;
        let msg = format!("Failed to pull image {requested:?}: {refusal}");
        fail(d, "Failed", EnsureError::ErrImagePull, msg)
    }

    /// RecordImagePullFailed, when records are kept.
    async fn pull_failed(&self, image: &str) {
        if let Some(pm) = &self.pull_manager {
            let (pm, img) = (pm.clone(), image.to_owned());
            let _ = tokio::task::spawn_blocking(move || pm.record_image_pull_failed(&img)).await;
        }
    }
}

/// kuberuntime `PullImage`: anonymous when there are no credentials, else each in order
/// until one pulls; all failing is the aggregate of their errors. Returns the image
/// reference and the credential that pulled (`None`: anonymous).
pub async fn pull_with_credentials<S: ImageService>(
    service: &S,
    image: &str,
    creds: &[TrackedAuth],
) -> Result<(String, Option<TrackedAuth>), PullFailed> {
    if creds.is_empty() {
        return service.pull_image(image, None).await.map(|r| (r, None)).map_err(|e| PullFailed(vec![e]));
    }
    let mut errors = Vec::new();
    for c in creds {
        let auth = PullAuth { username: c.username.clone(), password: c.password.clone() };
        match service.pull_image(image, Some(&auth)).await {
            Ok(r) => return Ok((r, Some(c.clone()))),
            Err(e) => errors.push(e),
        }
    }
    Err(PullFailed(errors))
}

/// Every credential tried (or the anonymous pull) failed: their errors, printed as
/// apimachinery's `utilerrors.NewAggregate` prints them (one bare, several as `[a, b]`).
#[derive(Debug, thiserror::Error)]
#[error("{}", aggregate(.0))]
pub struct PullFailed(pub Vec<ImageError>);

fn aggregate(errors: &[ImageError]) -> String {
    match errors {
        [one] => one.to_string(),
        many => format!("[{}]", many.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
    }
}

async fn must_attempt(pm: Arc<PullManager>, image: &str, image_ref: &str, credentials: Arc<LazyLookup>) -> PullVerdict {
    let handle = tokio::runtime::Handle::current();
    let (image, image_ref) = (image.to_owned(), image_ref.to_owned());
    tokio::task::spawn_blocking(move || {
        pm.must_attempt_image_pull(&image, &image_ref, || {
            // A blocking-pool thread may wait on the runtime.
            Ok(pod_credentials(handle.block_on(credentials.get())))
        })
    })
    .await
    .unwrap_or_else(|e| PullVerdict::Error(Some(e.to_string())))
}

fn normal(reason: &'static str, message: String) -> Event {
    Event { event_type: "Normal", reason, message }
}

fn warning(reason: &'static str, message: String) -> Event {
    Event { event_type: "Warning", reason, message }
}

fn fail(d: EnsureOutcome, reason: &'static str, error: EnsureError, message: String) -> EnsureOutcome {
    fail_with(d, "Warning", reason, error, message)
}

fn fail_with(
    mut d: EnsureOutcome,
    event_type: &'static str,
    reason: &'static str,
    error: EnsureError,
    message: String,
) -> EnsureOutcome {
    d.events.push(Event { event_type, reason, message: message.clone() });
    d.error = Some(error);
    d.message = Some(message);
    d
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
