//! One pod's worker (kubelet: a pod worker running `SyncPod` up to starting containers):
//! volumes first (as the kubelet waits for mounts), then EnsureImageExists for the init
//! containers in order and then every container, events for each decision, and the pod
//! status. It syncs again when the pod's spec or metadata changes, when a token is due, and
//! after a failure (10–15 s, the kubelet's pod-worker back-off with jitter); the image pull
//! back-off itself lives in the image manager. A tear-down ends it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodStatus, VolumeProjection};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use super::containers::{PodRuntime, RuntimeState};
use super::events::{EventRecorder, field_path};
use super::sources::ApiSources;
use super::status::{ContainerOutcome, ContainerReport, PodRuntimeView, VolumesOutcome, pod_status};
use super::sync_error::SyncError;
use crate::credential::{DockerConfig, PluginProvider, PodIdentity, PullSecret};
use crate::images::assembly::pod_lookup;
use crate::images::backend::Backend;
use crate::images::manager::{ImageManager, PullPolicy};
use crate::images::service::ImageService;
use crate::token::now_unix;
use crate::volumes::{remove_pod_volumes, sync_pod_volumes};
use futures::future::BoxFuture;

/// What the worker is asked to do: keep the latest pod prepared, or tear it down.
#[derive(Debug, Clone)]
pub(crate) enum Work {
    /// The pod as last seen.
    Sync(Box<Pod>),
    /// The pod is gone (`confirm`: it carries a deletionTimestamp the API waits on).
    TearDown {
        /// The pod as last seen.
        pod: Box<Pod>,
        /// Confirm the deletion to the API once torn down.
        confirm: bool,
    },
}

/// What every worker shares.
pub(crate) struct Shared {
    pub client: kube::Client,
    pub root: PathBuf,
    pub sources: ApiSources,
    pub images: ImageManager<Backend>,
    pub pull_manager: Option<Arc<crate::images::pull_manager::PullManager>>,
    pub credential_metrics: crate::credential::metrics::CredentialMetrics,
    pub providers: Arc<super::provider_config::Providers>,
    pub node_config: Arc<DockerConfig>,
    pub events: EventRecorder,
    /// Pods synced at once.
    pub syncs: Semaphore,
    /// Where secret and projected volumes live (tmpfs, as upstream).
    pub volume_medium: crate::volumes::VolumeMedium,
    /// The container runtime (`None`: a preparation-only node).
    pub runtime: Option<Arc<PodRuntime>>,
    /// Runtime changes by pod (with the runtime): what wakes a worker when its containers
    /// change state, instead of a poll.
    pub pleg: Option<Arc<super::pleg::Pleg>>,
    /// The pods this node knows now, by name (the node's server reads logs through it).
    pub pods: Arc<super::known_pods::KnownPods>,
    /// The node's InternalIP, every pod's `hostIP`.
    pub host_ip: String,
    /// The node's name.
    pub node: String,
    /// Where image decisions are audited (`--audit-log-path`).
    pub audit: Option<podpass_serve::AuditWriter>,
    /// Pods the eviction manager chose to evict under node pressure.
    pub evictions: super::eviction_manager::Evictions,
    /// The node's pressure conditions (admission reads them).
    pub pressure: tokio::sync::watch::Receiver<super::pressure::Pressure>,
}

/// A failed sync is retried after this long plus up to half again (kubelet: the pod
/// worker's back-off period with jitter 0.5).
const RETRY: Duration = Duration::from_secs(10);

/// Volumes with configMap or secret sources that cannot be watched (past
/// [`super::object_cache::MAX_WATCHED`]) are re-read this often (kubelet: `syncFrequency`,
/// 1 min), plus up to half again, so a changed object reaches the files within a resync
/// period (60 to 87 s). Watched ones wake the worker when they change, so an idle pod costs
/// no wakeup; a pod's own changes come through the pod watch at once.
const RESYNC: Duration = Duration::from_secs(60);

fn resync_at() -> Instant {
    let jitter = crate::token::random_jitter().unsigned_abs() * 3_000;
    Instant::now() + RESYNC + Duration::from_millis(jitter)
}

/// Whether a source of a volume of the pod (projected, configMap, secret, downwardAPI, as
/// projections) is one `source` picks.
fn projects(pod: &Pod, source: impl Fn(&VolumeProjection) -> bool) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .any(|v| crate::volumes::as_projection(v).is_some_and(|(_, p)| p.sources.iter().flatten().any(&source)))
}

/// Whether a volume of the pod reads a config map or a secret.
fn reads_objects(pod: &Pod) -> bool {
    projects(pod, |s| s.config_map.is_some() || s.secret.is_some())
}

/// The first retry of a token refresh that failed; it doubles up to [`TOKEN_RETRY_MAX`].
const TOKEN_RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between token refresh attempts (plus up to a quarter of jitter): a
/// token is fresh within ~10 s of the API server's return (kubernetes/kubernetes#138689
/// left them expired for hours).
const TOKEN_RETRY_MAX: Duration = Duration::from_secs(8);

/// The next token refresh attempt: `backoff` doubled (from [`TOKEN_RETRY_FIRST`], capped at
/// [`TOKEN_RETRY_MAX`]) plus up to a quarter of it at random.
fn token_retry_at(backoff: &mut Duration) -> Instant {
    *backoff = if backoff.is_zero() { TOKEN_RETRY_FIRST } else { (*backoff * 2).min(TOKEN_RETRY_MAX) };
    // random_jitter is whole seconds in [0, 10): a tenth of it, times a quarter of the wait.
    let jitter = backoff.mul_f64(0.25 * crate::token::random_jitter() as f64 / 10.0);
    Instant::now() + *backoff + jitter
}

/// Whether a volume of the pod projects a service-account token.
fn has_token(pod: &Pod) -> bool {
    projects(pod, |s| s.service_account_token.is_some())
}

fn retry_at() -> Instant {
    // random_jitter is whole seconds in [0, 10): half-second steps up to 4.5 s.
    let jitter = crate::token::random_jitter().unsigned_abs() * 500;
    Instant::now() + RETRY + Duration::from_millis(jitter)
}

/// What a change must touch for the pod to be synced again (its own status updates do not).
fn fingerprint(pod: &Pod) -> String {
    serde_json::to_string(&(
        &pod.spec,
        &pod.metadata.labels,
        &pod.metadata.annotations,
        &pod.metadata.deletion_timestamp,
    ))
    .unwrap_or_default()
}

#[derive(Default)]
struct State {
    /// Containers whose image this pod may use: (init, name) → (image, image ref).
    ready: HashMap<(bool, String), (String, String)>,
    /// Containers running (as the last sync found them) on the image their spec names:
    /// the only ones whose image is not checked again in a sync.
    running: std::collections::HashSet<(bool, String)>,
    /// The status last posted (the base for the next one).
    posted: Option<PodStatus>,
    /// Restart back-offs of its containers.
    runtime: RuntimeState,
    /// The current token refresh back-off (zero: the last refresh worked).
    token_retry: Duration,
    /// Why the pod was evicted (its containers killed, never run again).
    evicted: Option<String>,
    /// When its local storage was last measured.
    storage_measured: Option<Instant>,
    /// Its containers' probes (the workers end with the pod worker).
    probes: super::prober::PodProbes,
}

/// Runs until torn down or until the sender goes (agent shutdown).
pub(crate) async fn run(shared: Arc<Shared>, mut rx: watch::Receiver<Work>) {
    let mut state = State::default();
    let mut next: Option<Instant> = None;
    let mut synced: Option<String> = None;
    // Completes when an object the pod's volumes read changes (`None`: not subscribed).
    let mut objects: Option<BoxFuture<'static, ()>> = None;
    // Notified when the pod's sandbox or containers change in the runtime.
    let mut runtime_changed: Option<(String, Arc<tokio::sync::Notify>)> = None;
    loop {
        let work = rx.borrow_and_update().clone();
        match work {
            Work::TearDown { pod, confirm } => {
                // Retried until it succeeds (a runtime that is down, a busy mount), doubling
                // from 1 s to 30 s: a deleted pod's containers never outlive a crash of the
                // runtime. The worker stays, so the pod loop sends later events here.
                let mut backoff = TEARDOWN_RETRY_FIRST;
                loop {
                    match tear_down(&shared, &pod, confirm).await {
                        Ok(()) => break,
                        Err(e) => {
                            tracing::warn!(error = %e, retry_in_s = backoff.as_secs(), "tearing the pod down failed")
                        }
                    }
                    tokio::select! {
                        // The agent stops: the next one finds the pod again.
                        changed = rx.changed() => if changed.is_err() { return },
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(TEARDOWN_RETRY_MAX);
                }
                if let (Some(pleg), Some((uid, _))) = (&shared.pleg, &runtime_changed) {
                    pleg.unsubscribe(uid);
                }
                return;
            }
            Work::Sync(pod) => {
                if runtime_changed.is_none()
                    && let (Some(pleg), Some(uid)) = (&shared.pleg, pod.metadata.uid.as_deref())
                {
                    runtime_changed = Some((uid.to_owned(), pleg.subscribe(uid)));
                }
                let fp = fingerprint(&pod);
                // A pending eviction is acted on at once.
                let evicting = state.evicted.is_none()
                    && shared.evictions.pending(pod.metadata.uid.as_deref().unwrap_or("")).is_some();
                let due = next.is_none_or(|n| n <= Instant::now()) || evicting;
                if synced.as_deref() != Some(fp.as_str()) || due {
                    let permit = shared.syncs.acquire().await;
                    // Subscribed before the reads, so a change during the sync wakes it.
                    objects = shared.sources.changes(&pod);
                    let outcome = sync(&shared, &pod, &mut state, objects.is_some()).await;
                    // The status is posted after the sync slot is given back (kubelet: the
                    // status manager posts apart from the pod workers): its round trip waits
                    // on the API server's durable write, time in which another pod's
                    // volumes can be set up.
                    drop(permit);
                    next = outcome.post(&shared, &pod, &mut state).await;
                    synced = Some(fp);
                }
            }
        }
        let sleep = tokio::time::sleep_until(next.unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400)));
        let object_changed = async {
            match objects.as_mut() {
                Some(changed) => changed.await,
                None => std::future::pending().await,
            }
        };
        let runtime_event = async {
            match &runtime_changed {
                Some((_, signal)) => signal.notified().await,
                None => std::future::pending().await,
            }
        };
        let probed = state.probes.changed();
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            () = sleep => next = Some(Instant::now()),
            () = object_changed => {
                tracing::debug!("a config map or secret of the pod's volumes changed");
                objects = None;
                next = Some(Instant::now());
            }
            () = runtime_event => next = Some(Instant::now()),
            () = probed => next = Some(Instant::now()),
        }
    }
}

fn pull_policy(c: &Container) -> PullPolicy {
    c.image_pull_policy
        .as_deref()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| PullPolicy::default_for(c.image.as_deref().unwrap_or_default()))
}

/// The pod's pull secrets; one that cannot be read is skipped with the kubelet's warning
/// event (`FailedToRetrieveImagePullSecret`).
async fn pull_secrets(shared: &Shared, pod: &Pod) -> Vec<PullSecret> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let names: Vec<String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.name)
        .collect();
    let (out, skipped) = crate::api::pull_secrets(&shared.client, &ns, &names).await;
    let mut missing = Vec::new();
    for (name, e) in skipped {
        tracing::warn!(secret = %name, error = %e, "unable to retrieve pull secret");
        missing.push(name);
    }
    if !missing.is_empty() {
        let message = format!(
            "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
            missing.join(", ")
        );
        shared.events.record(pod, "", "Warning", "FailedToRetrieveImagePullSecret", &message);
    }
    out
}

/// What a sync leaves to do once its slot is given back.
struct Synced {
    /// When the next sync is due (`None`: only on change).
    next: Option<Instant>,
    /// The status to post, when it differs from the one last posted.
    status: Option<PodStatus>,
}

impl Synced {
    /// Posts the status (if any) and answers when the next sync is due: a failed post
    /// brings it forward to the retry back-off.
    async fn post(self, shared: &Shared, pod: &Pod, state: &mut State) -> Option<Instant> {
        let Some(status) = self.status else { return self.next };
        match post_status(shared, pod, &status).await {
            Ok(()) => {
                state.posted = Some(status);
                self.next
            }
            Err(e) => {
                tracing::warn!(error = %e, "posting pod status failed; retrying");
                let retry = retry_at();
                Some(self.next.map_or(retry, |n| n.min(retry)))
            }
        }
    }
}

/// When the next sync is due: the earliest of what each step asks for.
#[derive(Debug, Default)]
struct Due(Option<Instant>);

impl Due {
    fn at(&mut self, at: Instant) {
        self.0 = Some(self.0.map_or(at, |n| n.min(at)));
    }
}

/// One sync up to the pod's new status, which it does not post (see [`Synced::post`]):
/// its volumes, then its images with its own credentials, then its containers, each only
/// on the image its check allowed. `watched`: a change of the objects the pod's volumes
/// read wakes the worker, so no resync is due for them.
async fn sync(shared: &Shared, pod: &Pod, state: &mut State, watched: bool) -> Synced {
    tracing::debug!("sync started");
    // An evicted pod is not run again: its status stays Failed.
    if let Some(rt) = &shared.runtime
        && let Some(synced) = evict_if_due(shared, rt, pod, state).await
    {
        return synced;
    }
    let mut due = Due::default();
    if shared.runtime.is_some() && pod.spec.as_ref().is_some_and(super::eviction::has_storage_limits) {
        due.at(Instant::now() + super::eviction::CHECK_EVERY);
    }
    let volumes = volumes_step(shared, pod, state, watched, &mut due).await;
    let containers = all_containers(pod);
    let (mut reports, checked_now) = images_step(shared, pod, state, &containers, volumes.is_ok(), &mut due).await;
    // Containers run once the pod's volumes are written, each only on the image
    // EnsureImageExists allowed for this pod.
    let view = match (&shared.runtime, &volumes) {
        (Some(rt), Ok(())) => {
            Some(containers_step(shared, rt, pod, state, &containers, &mut reports, &checked_now, &mut due).await)
        }
        (Some(_), Err(_)) => Some(PodRuntimeView::default()),
        (None, _) => None,
    };
    let mut base = pod.clone();
    if let Some(posted) = &state.posted {
        base.status = Some(posted.clone());
    }
    let status = pod_status(&base, &reports, &volumes, &Time(Timestamp::now()), &shared.host_ip, view.as_ref());
    let status = (base.status.as_ref() != Some(&status)).then_some(status);
    Synced { next: due.0, status }
}

/// The prober follows what runs now, and each running container's status shows what its
/// probes say.
fn probe(shared: &Shared, rt: &PodRuntime, pod: &Pod, state: &mut State, run: &mut super::containers::RuntimeSync) {
    use super::status::RunPhase;
    let running: Vec<super::prober::Running> = run
        .states
        .iter()
        .filter(|((init, _), _)| !init)
        .filter_map(|((_, name), s)| {
            let RunPhase::Running { started } = &s.phase else { return None };
            let id = s.id.strip_prefix("containerd://")?.to_owned();
            let started_nanos = started.as_ref().map_or(0, |t| i64::try_from(t.0.as_nanosecond()).unwrap_or(0));
            Some(super::prober::Running { name: name.clone(), id, started_nanos })
        })
        .collect();
    let pod_ip = if super::containers::host_network(pod) {
        shared.host_ip.clone()
    } else {
        run.pod_ip.clone().unwrap_or_default()
    };
    let target = super::prober::Target { netns: run.netns.clone(), pod_ip };
    state.probes.update(&rt.cri, &shared.events, pod, &running, &target);
    let spec = pod.spec.clone().unwrap_or_default();
    for r in &running {
        let Some(c) = spec.containers.iter().find(|c| c.name == r.name) else { continue };
        if let Some(s) = run.states.get_mut(&(false, r.name.clone())) {
            let (ready, started) = (state.probes.ready(c, &r.id), state.probes.started(c, &r.id));
            s.probes = super::status::ProbeView { ready, started };
        }
    }
}

/// The pod's containers in the order their images are checked: init containers, regular
/// ones, then ephemeral ones (their names are unique among all of the pod's containers).
fn all_containers(pod: &Pod) -> Vec<(bool, Container)> {
    let spec = pod.spec.clone().unwrap_or_default();
    spec.init_containers
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|c| (true, c))
        .chain(spec.containers.iter().cloned().map(|c| (false, c)))
        .chain(super::ephemeral::of(pod).into_iter().map(|(c, _)| (false, c)))
        .collect()
}

/// The pod's volumes written (tokens rotated when due); a failure is a `FailedMount`
/// event and a retry on the token back-off.
async fn volumes_step(shared: &Shared, pod: &Pod, state: &mut State, watched: bool, due: &mut Due) -> VolumesOutcome {
    match sync_pod_volumes(&shared.root, pod, &shared.sources, crate::token::random_jitter(), shared.volume_medium)
        .await
    {
        Ok(report) => {
            if !report.written.is_empty() {
                tracing::info!(volumes = ?report.written, "volumes written");
            }
            if let Some(at) = report.next_refresh {
                let now = now_unix();
                if at <= now {
                    // Past due: the refresh failed (the API server is away) and the
                    // cached token is still served. Try again with a short, growing,
                    // capped back-off, so a returning API server sees the refresh
                    // within seconds and an absent one no storm.
                    due.at(token_retry_at(&mut state.token_retry));
                } else {
                    state.token_retry = Duration::ZERO;
                    due.at(Instant::now() + Duration::from_secs(u64::try_from(at - now).unwrap_or(0)));
                }
            }
            if !watched && reads_objects(pod) {
                due.at(resync_at());
            }
            Ok(())
        }
        Err(errors) => {
            let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
            let message = text.join("; ");
            tracing::warn!(error = %message, "volume setup failed; retrying");
            shared.events.record(pod, "", "Warning", "FailedMount", &message);
            // A pod with service-account tokens retries on the token back-off: an
            // expired token is replaced within seconds of the API server's return.
            due.at(if has_token(pod) { token_retry_at(&mut state.token_retry) } else { retry_at() });
            Err(super::status::VolumesNotWritten(message))
        }
    }
}

/// EnsureImageExists for each container not running on its spec's image, with the pod's
/// own credentials; answers each container's report and which were checked now.
async fn images_step(
    shared: &Shared,
    pod: &Pod,
    state: &mut State,
    containers: &[(bool, Container)],
    volumes_ok: bool,
    due: &mut Due,
) -> (Vec<ContainerReport>, std::collections::HashSet<(bool, String)>) {
    let spec = pod.spec.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let ephemeral_names: std::collections::HashSet<String> =
        spec.ephemeral_containers.iter().flatten().map(|e| e.name.clone()).collect();
    let mut reports = Vec::with_capacity(containers.len());
    let mut checked_now = std::collections::HashSet::new();
    let mut secrets: Option<Arc<Vec<PullSecret>>> = None;
    let mut init_blocked = false;
    for (init, c) in containers {
        let image = c.image.clone().unwrap_or_default();
        let mut report = ContainerReport {
            name: c.name.clone(),
            image: image.clone(),
            init: *init,
            outcome: ContainerOutcome::Preparing,
        };
        let key = (*init, c.name.clone());
        // With a runtime, EnsureImageExists runs before every start (kubelet:
        // startContainer): only a container running on its spec's image skips it. A
        // preparation-only node starts nothing and checks each image once.
        let settled = shared.runtime.is_none() || state.running.contains(&key);
        if let Some((_, image_ref)) = state.ready.get(&key).filter(|(img, _)| *img == image && settled) {
            report.outcome = ContainerOutcome::ImageReady { image_ref: image_ref.clone() };
            reports.push(report);
            continue;
        }
        checked_now.insert(key.clone());
        if !volumes_ok {
            reports.push(report);
            continue;
        }
        if init_blocked {
            report.outcome = ContainerOutcome::Initializing;
            reports.push(report);
            continue;
        }
        let pod_secrets = match &secrets {
            Some(s) => s.clone(),
            None => {
                let s = Arc::new(pull_secrets(shared, pod).await);
                secrets = Some(s.clone());
                s
            }
        };
        let identity_ns = pod.metadata.namespace.clone().unwrap_or_default();
        let identity = PodIdentity {
            namespace: identity_ns.clone(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: uid.clone(),
            service_account: spec.service_account_name.clone().unwrap_or_default(),
        };
        let lookup = pod_lookup(
            image.clone(),
            Some(identity),
            pod_secrets,
            shared.providers.current(),
            shared.node_config.clone(),
        );
        let decision =
            shared.images.ensure_image_for_pod(&identity_ns, &uid, &image, pull_policy(c), lookup.clone()).await;
        if let Some(audit) = &shared.audit {
            let found = if lookup.ran() { Some(lookup.get().await) } else { None };
            audit.record(&super::image_audit::event(&shared.node, pod, &c.name, &decision, found));
        }
        let path = if ephemeral_names.contains(&c.name) {
            super::ephemeral::field_path(&c.name)
        } else {
            field_path(&c.name, *init)
        };
        for e in &decision.events {
            shared.events.record(pod, &path, e.event_type, e.reason, &e.message);
        }
        match (&decision.error, &decision.image_ref) {
            (None, Some(image_ref)) => {
                tracing::info!(container = %c.name, image, image_ref, pulled = decision.pulled, "image may be used");
                state.ready.insert(key, (image, image_ref.clone()));
                report.outcome = ContainerOutcome::ImageReady { image_ref: image_ref.clone() };
            }
            (error, _) => {
                let error = SyncError::Image {
                    error: error.unwrap_or(crate::images::EnsureError::ErrImagePull),
                    message: decision.message.clone().unwrap_or_default(),
                };
                tracing::warn!(container = %c.name, image, reason = error.reason(), message = %error, "image may not be used");
                report.outcome = ContainerOutcome::Failed(error);
                init_blocked |= *init;
                due.at(retry_at());
            }
        }
        reports.push(report);
    }
    (reports, checked_now)
}

/// The pod's containers run through the runtime, each only on the image its check
/// allowed; the reports take the states the runtime answers.
#[allow(clippy::too_many_arguments)]
async fn containers_step(
    shared: &Shared,
    rt: &PodRuntime,
    pod: &Pod,
    state: &mut State,
    containers: &[(bool, Container)],
    reports: &mut [ContainerReport],
    checked_now: &std::collections::HashSet<(bool, String)>,
    due: &mut Due,
) -> PodRuntimeView {
    use super::containers::ImageCheck;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let images: HashMap<(bool, String), ImageCheck> = containers
        .iter()
        .zip(reports.iter())
        .filter_map(|((init, c), report)| {
            let key = (*init, c.name.clone());
            if let ContainerOutcome::Failed(error) = &report.outcome {
                return Some((key, ImageCheck::Refused(error.clone())));
            }
            let (image, image_ref) = state.ready.get(&key)?;
            let allowed = ImageCheck::Allowed { image_ref: image_ref.clone(), checked_now: checked_now.contains(&key) };
            (c.image.as_deref() == Some(image.as_str())).then_some((key, allowed))
        })
        .collect();
    let kills = state.probes.kills(pod);
    match super::containers::sync(rt, pod, &images, &mut state.runtime, &shared.sources, &kills).await {
        Ok(mut run) => {
            probe(shared, rt, pod, state, &mut run);
            // What runs on its spec's image needs no check until it must start again.
            state.running = run
                .states
                .iter()
                .filter(|(_, s)| matches!(s.phase, super::status::RunPhase::Running { .. }))
                .map(|(k, _)| k.clone())
                .collect();
            for key in &run.started {
                state.running.insert(key.clone());
            }
            for (path, kind, reason, message) in &run.events {
                shared.events.record(pod, path, kind, reason, message);
            }
            for report in reports.iter_mut() {
                if let Some(s) = run.states.get(&(report.init, report.name.clone())) {
                    report.outcome = ContainerOutcome::Run(Box::new(s.clone()));
                }
            }
            if let Some(at) = run.next {
                due.at(at);
            }
            // Dead instances beyond the one kept go, with their logs (kubelet container GC).
            match super::container_gc::collect_pod(rt, &uid).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(removed = n, "dead containers collected"),
                Err(e) => tracing::warn!(error = %e, "collecting dead containers failed"),
            }
            PodRuntimeView { pod_ip: run.pod_ip }
        }
        Err(error) => {
            tracing::warn!(error = %error, reason = error.event_reason(), "running the pod's containers failed; retrying");
            shared.events.record(pod, "", "Warning", error.event_reason(), &error.to_string());
            due.at(retry_at());
            PodRuntimeView::default()
        }
    }
}

/// The eviction manager's word on this pod: the node-pressure eviction it chose the pod
/// for, else its local-storage check (kubelet `localStorageEviction`). A pod to evict is
/// evicted now; an evicted one stays so. `Some`: the sync ends here with the Failed
/// status; `None`: the pod runs on.
async fn evict_if_due(shared: &Shared, rt: &PodRuntime, pod: &Pod, state: &mut State) -> Option<Synced> {
    use super::eviction;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    if state.evicted.is_none() {
        let message = match shared.evictions.pending(&uid) {
            Some(message) => message,
            None => local_storage_violation(rt, pod, state).await?,
        };
        tracing::warn!(message = %message, "evicting the pod");
        shared.events.record(pod, "", "Warning", "Evicted", &message);
        let ended = eviction::kill(rt, pod).await;
        let base = state.posted.clone().or_else(|| pod.status.clone()).unwrap_or_default();
        state.evicted = Some(message.clone());
        let status = eviction::evicted_status(&base, &message, &ended, &Time(Timestamp::now()));
        // What the pod held goes now, not when it is deleted (kubelet: an evicted pod's
        // content is removed — its containers by the container GC, its volumes by the
        // volume manager), so the eviction gives the node its disk back.
        if let Err(e) = remove_pod_content(shared, pod, &uid, 0).await {
            tracing::warn!(error = %e, "removing the evicted pod's containers and volumes failed");
        }
        shared.evictions.done(&uid);
        return Some(Synced { next: None, status: Some(status) });
    }
    // Posted already, unless the post failed: then again.
    let posted_failed = state.posted.as_ref().is_some_and(|p| p.reason.as_deref() == Some("Evicted"));
    let status = (!posted_failed).then(|| {
        let base = state.posted.clone().or_else(|| pod.status.clone()).unwrap_or_default();
        let message = state.evicted.clone().unwrap_or_default();
        eviction::evicted_status(&base, &message, &HashMap::new(), &Time(Timestamp::now()))
    });
    Some(Synced { next: None, status })
}

/// The pod's storage limits checked on the eviction period (not at every sync: its
/// container changes wake its worker far more often, and a measure walks its directories).
/// `Some`: why it must be evicted.
async fn local_storage_violation(rt: &PodRuntime, pod: &Pod, state: &mut State) -> Option<String> {
    use super::eviction;
    let spec = pod.spec.as_ref().filter(|s| eviction::has_storage_limits(s))?;
    if state.storage_measured.is_some_and(|at| at.elapsed() < eviction::CHECK_EVERY / 2) {
        return None;
    }
    state.storage_measured = Some(Instant::now());
    let usage = match eviction::measure(rt, pod).await {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!(error = %e, "measuring the pod's local storage failed");
            return None;
        }
    };
    eviction::local_storage_violation(spec, &usage)
}

/// A step of removing what a pod holds on the node failed (each is tried again).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TearDownError {
    /// Its containers and sandboxes.
    #[error("stopping the pod's containers: {0}")]
    Containers(#[from] crate::runtime::RuntimeError),
    /// Its volumes.
    #[error("removing volumes: {0}")]
    Volumes(#[from] crate::volumes::PodVolumeError),
    /// Its logs.
    #[error("removing logs: {0}")]
    Logs(std::io::Error),
    /// Its deletion's confirmation.
    #[error("confirming the deletion: {0}")]
    Confirm(kube::Error),
}

/// The pod's containers and sandboxes (stopped with `grace`), volumes and logs removed.
async fn remove_pod_content(shared: &Shared, pod: &Pod, uid: &str, grace: i64) -> Result<(), TearDownError> {
    if let Some(rt) = &shared.runtime {
        super::containers::tear_down(rt, uid, grace).await?;
    }
    remove_pod_volumes(&shared.root, uid).await?;
    if let Some(rt) = &shared.runtime {
        let (logs, owned) = (rt.logs.clone(), pod.clone());
        tokio::task::spawn_blocking(move || super::containers::remove_log_dir(&logs, &owned))
            .await
            .map_err(|e| TearDownError::Logs(std::io::Error::other(e)))?
            .map_err(TearDownError::Logs)?;
    }
    Ok(())
}

pub(crate) async fn post_status(shared: &Shared, pod: &Pod, status: &PodStatus) -> Result<(), kube::Error> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let patch = serde_json::json!({"metadata": {"uid": pod.metadata.uid}, "status": status});
    Api::<Pod>::namespaced(shared.client.clone(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// Minute-by-minute housekeeping: token garbage collection, expired provider cache
/// entries, and (`prune`) the kubelet image GC's `PruneUnknownRecords`: records of images
/// the runtime no longer has, last updated before the image list was taken, are deleted.
pub(crate) async fn housekeeping(shared: Arc<Shared>, prune: bool) {
    let now = now_unix();
    shared.sources.tokens().collect_garbage(now);
    let watched = shared.sources.recycle_idle_watches();
    tracing::debug!(objects = watched, "config map and secret watches");
    let purged: usize = shared.providers.current().iter().map(PluginProvider::purge_expired_cache).sum();
    if purged > 0 {
        tracing::debug!(entries = purged, "expired credential provider cache entries purged");
    }
    let Some(pm) = shared.pull_manager.clone().filter(|_| prune) else { return };
    let until = crate::images::pull_manager::rfc3339_now();
    match shared.images.service().list_images().await {
        Ok(images) => {
            let ids: Vec<String> = images.into_iter().map(|i| i.id).collect();
            let pruned = tokio::task::spawn_blocking(move || pm.prune_unknown_records(&ids, &until)).await;
            if let Ok(n @ 1..) = pruned {
                tracing::info!(records = n, "pull records of images no longer present pruned");
            }
        }
        Err(e) => tracing::warn!(error = %e, "listing images for record pruning failed"),
    }
}

/// The first wait before a failed teardown is tried again.
const TEARDOWN_RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest.
const TEARDOWN_RETRY_MAX: Duration = Duration::from_secs(30);

/// A pod being deleted or gone: its containers stopped and removed, its tokens, back-off and
/// event memory dropped, its volumes and logs removed, then (when asked) the deletion
/// confirmed with grace 0 and a UID precondition, as a kubelet confirms once a pod is torn
/// down. A failure is returned for the caller to try again; every step is idempotent.
async fn tear_down(shared: &Shared, pod: &Pod, confirm: bool) -> Result<(), TearDownError> {
    let Some(uid) = pod.metadata.uid.clone() else { return Ok(()) };
    // The grace the deletion asked for, else the pod's own (30 s by default).
    let grace = pod
        .metadata
        .deletion_grace_period_seconds
        .or_else(|| pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
        .unwrap_or(30);
    remove_pod_content(shared, pod, &uid, grace).await?;
    // One manager holds the pod's volume and credential-provider tokens alike.
    shared.sources.tokens().delete_for_pod(&uid);
    shared.images.forget_pod(&uid);
    shared.events.forget_pod(&uid);
    shared.evictions.done(&uid);
    if !confirm {
        return Ok(());
    }
    let (Some(ns), Some(name)) = (pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref()) else {
        return Ok(());
    };
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions { uid: Some(uid), resource_version: None }),
        ..DeleteParams::default()
    };
    match Api::<Pod>::namespaced(shared.client.clone(), ns).delete(name, &params).await {
        Ok(_) => tracing::info!("pod torn down; deletion confirmed"),
        // Gone already, a newer pod of the name (the UID precondition), or no longer bound
        // to this node as the Node authorizer sees it: nothing left to confirm.
        Err(kube::Error::Api(s)) if matches!(s.code, 403 | 404 | 409) => {}
        Err(e) => return Err(TearDownError::Confirm(e)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_refresh_retries_double_to_a_cap_with_bounded_jitter() {
        let mut backoff = Duration::ZERO;
        for expected in [1, 2, 4, 8, 8, 8] {
            let before = Instant::now();
            let at = token_retry_at(&mut backoff);
            assert_eq!(backoff, Duration::from_secs(expected));
            let wait = at.duration_since(before);
            assert!(wait >= backoff && wait <= backoff + backoff / 4 + Duration::from_millis(50), "{wait:?}");
        }
    }
}
