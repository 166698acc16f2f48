//! The Job controller (`pkg/controller/job`) and the TTL-after-finished controller
//! (`pkg/controller/ttlafterfinished`), on kube-runtime's Controller: one sync per Job at a
//! time, woken by its own changes and its pods'. Each sync — as `syncJob` —
//!
//! 1. counts finished pods exactly once, as upstream tracks them: a pod carries the
//!    `batch.kubernetes.io/job-tracking` finalizer; once finished its UID goes to
//!    `status.uncountedTerminatedPods`, then the finalizer comes off, then the UID moves to
//!    `succeeded`/`failed` — a crash between steps neither loses nor doubles a count;
//! 2. decides: `SuccessCriteriaMet` (completions reached) or `FailureTarget` (backoff limit,
//!    active deadline) stops the active pods, and once none is left the Job is `Complete`
//!    or `Failed`; a suspended Job runs no pods; otherwise pods are created (slow start, after
//!    the 10 s → 10 min back-off that failures since the last success ask) or deleted;
//! 3. writes the status (`active`, `ready`, `startTime`, `completedIndexes`, conditions).
//!
//! A finished Job with `ttlSecondsAfterFinished` is deleted (in the foreground, after a
//! fresh read) once that long has passed, as `ttl-after-finished-controller`.

pub(crate) mod plan;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{Job, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use crate::claim;
use crate::credentials::Credentials;
use crate::events::{Recorder, Regarding};
use plan::{Outcome, TRACKING_FINALIZER};

/// The controller's name and service account.
pub const NAME: &str = "job-controller";
/// The TTL-after-finished controller's service account.
pub const TTL_NAME: &str = "ttl-after-finished-controller";
/// `--concurrent-job-syncs`' default.
const CONCURRENCY: u16 = 5;
/// At most this many pods created, deleted or counted in one sync (`MaxUncountedPods`,
/// `MaxPodCreateDeletePerSync`).
const PER_SYNC: usize = 500;
/// Expectations not met within this long are dropped.
const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(300);
/// Who manages a Job by default (`spec.managedBy`).
const MANAGED_BY: &str = "kubernetes.io/job-controller";

pub use crate::sync_error::SyncError;

/// Failures in a row since the last success, for the recreate back-off.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    failures: u32,
    last: jiff::Timestamp,
}

struct Context {
    credentials: Credentials,
    pods: Store<Pod>,
    pods_ready: tokio::sync::OnceCell<bool>,
    /// Pods a sync created that the cache has not shown yet, by Job UID.
    expected: Mutex<HashMap<String, (HashSet<String>, Instant)>>,
    backoff: Mutex<HashMap<String, Backoff>>,
}

impl Context {
    fn satisfied(&self, uid: &str, namespace: &str) -> bool {
        let mut all = self.expected.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((names, at)) = all.get(uid) else { return true };
        let seen = names.iter().all(|n| self.pods.get(&ObjectRef::new(n).within(namespace)).is_some());
        if seen || at.elapsed() > EXPECTATIONS_TIMEOUT {
            all.remove(uid);
            return true;
        }
        false
    }
}

/// The Jobs a pod concerns: its controller, when that is a Job.
fn concerned(pod: &Pod) -> Vec<ObjectRef<Job>> {
    match claim::controller_of(pod.metadata.owner_references.as_ref()) {
        Some(owner) if owner.kind == "Job" => {
            vec![ObjectRef::new(&owner.name).within(&pod.namespace().unwrap_or_default())]
        }
        _ => Vec::new(),
    }
}

/// Runs the controller until its streams end.
pub async fn run(credentials: Credentials) {
    let root = credentials.root();
    let (pods, writer) = reflector::store::<Pod>();
    let pod_events = reflector::reflector(
        writer,
        watcher(Api::<Pod>::all(root.clone()), watcher::Config::default()).default_backoff(),
    )
    .touched_objects();
    let context = Arc::new(Context {
        credentials,
        pods,
        pods_ready: tokio::sync::OnceCell::new(),
        expected: Mutex::default(),
        backoff: Mutex::default(),
    });
    let controller = Controller::new(Api::<Job>::all(root), watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY));
    let jobs = controller.store();
    let orphans = release_orphans(Arc::clone(&context), jobs);
    let syncs = controller
        .watches_stream(pod_events, |pod| concerned(&pod))
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "job sync");
            }
        });
    tokio::select! {
        () = syncs => {}
        () = orphans => {}
    }
}

/// How often tracked pods whose Job is gone are looked for.
const ORPHAN_SWEEP: Duration = Duration::from_secs(2);

/// Pods that still carry the tracking finalizer but whose Job is gone (deleted, or another
/// object of its name), or that no Job controls: the finalizer comes off, or such a pod
/// would never finish deleting (upstream's orphan pod handling). A Job missing from the
/// cache is asked for live before its pods are released.
async fn release_orphans(ctx: Arc<Context>, jobs: Store<Job>) {
    if !*ctx.pods_ready.get_or_init(|| async { ctx.pods.wait_until_ready().await.is_ok() }).await
        || jobs.wait_until_ready().await.is_err()
    {
        return;
    }
    loop {
        tokio::time::sleep(ORPHAN_SWEEP).await;
        let tracked: Vec<Arc<Pod>> = ctx.pods.state().into_iter().filter(|p| plan::tracked(p)).collect();
        for pod in tracked {
            let namespace = pod.namespace().unwrap_or_default();
            let owner =
                claim::controller_of(pod.metadata.owner_references.as_ref()).filter(|o| o.kind == "Job").cloned();
            let cached = owner.as_ref().and_then(|o| jobs.get(&ObjectRef::new(&o.name).within(&namespace)));
            if cached.is_some_and(|j| j.metadata.uid.as_deref() == owner.as_ref().map(|o| o.uid.as_str())) {
                continue;
            }
            let Ok(client) = ctx.credentials.client(NAME).await else { continue };
            let live = match &owner {
                Some(o) => match Api::<Job>::namespaced(client.clone(), &namespace).get_opt(&o.name).await {
                    Ok(job) => job.is_some_and(|j| j.metadata.uid.as_deref() == Some(o.uid.as_str())),
                    Err(_) => continue,
                },
                None => false,
            };
            if live {
                continue;
            }
            if let Err(e) = untrack(&Api::namespaced(client, &namespace), &pod).await {
                tracing::debug!(pod = pod.name_any(), error = %e, "releasing an orphaned job pod");
            }
        }
    }
}

fn error_policy(_job: Arc<Job>, error: &SyncError, _ctx: Arc<Context>) -> Action {
    if error.is_conflict() {
        return Action::requeue(Duration::from_millis(200));
    }
    tracing::warn!(error = %error, "job sync failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(job: Arc<Job>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let key = format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any());
    let span = tracing::info_span!("reconcile", controller = NAME, job = %key);
    tracing::Instrument::instrument(sync(job.as_ref().clone(), ctx), span).await
}

/// The controller reference a Job's pods carry.
fn owner_reference(job: &Job) -> OwnerReference {
    OwnerReference {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        name: job.name_any(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A pod of the Job from its template, tracked by the finalizer; an Indexed Job's carries
/// its index (annotation, label, `JOB_COMPLETION_INDEX`, hostname `<job>-<i>`).
fn pod_from_template(job: &Job, index: Option<i32>) -> Pod {
    let template = job.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    let mut finalizers = meta.finalizers.unwrap_or_default();
    finalizers.push(TRACKING_FINALIZER.into());
    let mut spec = template.spec;
    let generate_name = match index {
        Some(i) => {
            labels.insert(plan::COMPLETION_INDEX.into(), i.to_string());
            annotations.insert(plan::COMPLETION_INDEX.into(), i.to_string());
            if let Some(s) = spec.as_mut() {
                s.hostname.get_or_insert_with(|| format!("{}-{i}", job.name_any()));
                let env = EnvVar {
                    name: "JOB_COMPLETION_INDEX".into(),
                    value: None,
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            api_version: None,
                            field_path: format!("metadata.annotations['{}']", plan::COMPLETION_INDEX),
                        }),
                        ..Default::default()
                    }),
                };
                for c in s.containers.iter_mut().chain(s.init_containers.iter_mut().flatten()) {
                    c.env.get_or_insert_with(Vec::new).insert(0, env.clone());
                }
            }
            format!("{}-{i}-", job.name_any())
        }
        None => format!("{}-", job.name_any()),
    };
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name),
            namespace: job.namespace(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: Some(finalizers),
            owner_references: Some(vec![owner_reference(job)]),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

/// One sync's Job as last written and its writers.
struct Sync {
    job: Job,
    jobs: Api<Job>,
    pods: Api<Pod>,
    recorder: Recorder,
}

impl Sync {
    async fn event(&self, warning: bool, reason: &str, message: &str) {
        let (ns, name, uid) = (
            self.job.namespace().unwrap_or_default(),
            self.job.name_any(),
            self.job.metadata.uid.clone().unwrap_or_default(),
        );
        let regarding = Regarding { api_version: "batch/v1", kind: "Job", namespace: &ns, name: &name, uid: &uid };
        if warning {
            self.recorder.warning(&regarding, reason, message).await;
        } else {
            self.recorder.normal(&regarding, reason, message).await;
        }
    }

    async fn write_status(&mut self, status: JobStatus) -> Result<(), SyncError> {
        if self.job.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let mut updated = self.job.clone();
        updated.status = Some(status);
        self.job = self.jobs.replace_status(&self.job.name_any(), &PostParams::default(), &updated).await?;
        Ok(())
    }

    async fn untrack(&self, pod: &Pod) -> Result<(), SyncError> {
        untrack(&self.pods, pod).await
    }

    async fn delete_pod(&self, pod: &Pod) -> Result<(), SyncError> {
        match self.pods.delete(&pod.name_any(), &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Takes the tracking finalizer off a pod (conditioned on the resourceVersion it was read
/// at, so another's finalizer added meanwhile is never dropped: a conflict retries).
async fn untrack(pods: &Api<Pod>, pod: &Pod) -> Result<(), SyncError> {
    let kept: Vec<String> =
        pod.metadata.finalizers.iter().flatten().filter(|f| *f != TRACKING_FINALIZER).cloned().collect();
    let patch = serde_json::json!({"metadata": {"resourceVersion": pod.metadata.resource_version, "finalizers": kept}});
    match pods.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn now_time() -> Time {
    Time(jiff::Timestamp::now())
}

async fn sync(job: Job, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let ready = ctx.pods_ready.get_or_init(|| async { ctx.pods.wait_until_ready().await.is_ok() }).await;
    if !*ready {
        return Err(SyncError::CacheGone("pods"));
    }
    // A Job another controller manages (`spec.managedBy`) is not ours.
    if job.spec.as_ref().and_then(|s| s.managed_by.as_deref()).is_some_and(|m| m != MANAGED_BY) {
        return Ok(Action::await_change());
    }
    let namespace = job.namespace().unwrap_or_default();
    let uid = job.metadata.uid.clone().unwrap_or_default();
    if !ctx.satisfied(&uid, &namespace) {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let client = ctx.credentials.client(NAME).await?;
    let mut s = Sync {
        jobs: Api::namespaced(client.clone(), &namespace),
        pods: Api::namespaced(client.clone(), &namespace),
        recorder: Recorder::new(client, NAME),
        job,
    };
    let cached: Vec<Pod> = ctx
        .pods
        .state()
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(namespace.as_str()))
        .map(|p| p.as_ref().clone())
        .collect();
    let selector = s.job.spec.as_ref().and_then(|spec| spec.selector.clone()).unwrap_or_default();
    let deleting = s.job.metadata.deletion_timestamp.is_some();
    let claimed = claim::claim(&uid, &selector, deleting, &cached, |p| &p.metadata, plan::is_active);
    let owned: Vec<Pod> = claimed.owned.iter().map(|p| (*p).clone()).collect();
    let finished = plan::has(&s.job, "Complete").or_else(|| plan::has(&s.job, "Failed"));
    if let Some(done) = finished {
        for pod in owned.iter().filter(|p| plan::tracked(p)) {
            s.untrack(pod).await?;
        }
        return after_finished(&ctx, &s, done).await;
    }
    count_finished(&ctx, &mut s, &uid, &owned).await?;
    decide(&ctx, &mut s, &uid, &owned).await
}

/// Step 1: newly finished pods' UIDs to `uncountedTerminatedPods` (and an Indexed Job's
/// indexes to `completedIndexes`), their finalizers off, then the UIDs counted.
async fn count_finished(ctx: &Context, s: &mut Sync, uid: &str, owned: &[Pod]) -> Result<(), SyncError> {
    let mut status = s.job.status.clone().unwrap_or_default();
    let mut uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
    let listed = |v: &Option<Vec<String>>, u: &str| v.iter().flatten().any(|x| x == u);
    let mut indexes = plan::parse_indexes(status.completed_indexes.as_deref().unwrap_or(""));
    let mut added = 0;
    for pod in owned.iter().filter(|p| plan::tracked(p)) {
        let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
        if added >= PER_SYNC || listed(&uncounted.succeeded, &pod_uid) || listed(&uncounted.failed, &pod_uid) {
            continue;
        }
        match plan::outcome(pod) {
            Outcome::Running => continue,
            Outcome::Succeeded => {
                uncounted.succeeded.get_or_insert_with(Vec::new).push(pod_uid);
                if plan::is_indexed(&s.job)
                    && let Some(i) = plan::index_of(pod)
                {
                    indexes.insert(i);
                }
            }
            Outcome::Failed => uncounted.failed.get_or_insert_with(Vec::new).push(pod_uid),
        }
        added += 1;
    }
    if added > 0 {
        status.uncounted_terminated_pods = Some(uncounted.clone());
        if plan::is_indexed(&s.job) {
            status.completed_indexes = Some(plan::format_indexes(&indexes));
        }
        s.write_status(status).await?;
    }
    let pending: HashSet<String> =
        uncounted.succeeded.iter().chain(uncounted.failed.iter()).flatten().cloned().collect();
    if pending.is_empty() {
        return Ok(());
    }
    for pod in owned.iter().filter(|p| plan::tracked(p) && p.metadata.uid.as_ref().is_some_and(|u| pending.contains(u)))
    {
        s.untrack(pod).await?;
    }
    // Every pending pod's finalizer is off (or the pod is gone): count them.
    let succeeded = i32::try_from(uncounted.succeeded.iter().flatten().count()).unwrap_or(i32::MAX);
    let failed = i32::try_from(uncounted.failed.iter().flatten().count()).unwrap_or(i32::MAX);
    let mut status = s.job.status.clone().unwrap_or_default();
    status.succeeded = Some(status.succeeded.unwrap_or(0).saturating_add(succeeded));
    status.failed = Some(status.failed.unwrap_or(0).saturating_add(failed));
    status.uncounted_terminated_pods = Some(UncountedTerminatedPods::default());
    s.write_status(status).await?;
    let mut backoff = ctx.backoff.lock().unwrap_or_else(PoisonError::into_inner);
    if succeeded > 0 {
        backoff.remove(uid);
    }
    if failed > 0 {
        let record = backoff.entry(uid.to_owned()).or_insert(Backoff { failures: 0, last: jiff::Timestamp::now() });
        record.failures = record.failures.saturating_add(failed.cast_unsigned());
        record.last = jiff::Timestamp::now();
    }
    Ok(())
}

/// Steps 2 and 3.
async fn decide(ctx: &Context, s: &mut Sync, uid: &str, owned: &[Pod]) -> Result<Action, SyncError> {
    let now = jiff::Timestamp::now();
    let status = s.job.status.clone().unwrap_or_default();
    let (succeeded, failed) = (status.succeeded.unwrap_or(0), status.failed.unwrap_or(0));
    let indexes = plan::parse_indexes(status.completed_indexes.as_deref().unwrap_or(""));
    let active: Vec<&Pod> = owned.iter().filter(|p| plan::is_active(p)).collect();
    // Pods still to be counted or still running hold the final condition back.
    let unfinished = owned.iter().any(|p| plan::tracked(p) || plan::outcome(p) == Outcome::Running);
    let mut status = status;
    let set = |status: &mut JobStatus, c: k8s_openapi::api::batch::v1::JobCondition| {
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        conditions.retain(|x| x.type_ != c.type_);
        conditions.push(c);
    };
    let target = plan::has(&s.job, "FailureTarget")
        .map(|c| (false, c))
        .or_else(|| plan::has(&s.job, "SuccessCriteriaMet").map(|c| (true, c)));
    let target = match target {
        Some(t) => Some(t),
        None => {
            if let Some((reason, message)) = plan::failure(&s.job, failed, &active, now) {
                set(&mut status, plan::condition("FailureTarget", reason, message, now));
                Some((false, plan::condition("FailureTarget", reason, message, now)))
            } else if plan::complete(&s.job, succeeded, &indexes, active.len()) {
                let c = plan::condition(
                    "SuccessCriteriaMet",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    now,
                );
                set(&mut status, c.clone());
                Some((true, c))
            } else {
                None
            }
        }
    };
    if let Some((success, cause)) = target {
        for pod in active.iter().take(PER_SYNC) {
            s.delete_pod(pod).await?;
        }
        status.active = Some(0);
        if !unfinished && active.is_empty() {
            let reason = cause.reason.clone().unwrap_or_default();
            let message = cause.message.clone().unwrap_or_default();
            if success {
                set(&mut status, plan::condition("Complete", &reason, &message, now));
                status.completion_time = Some(now_time());
            } else {
                set(&mut status, plan::condition("Failed", &reason, &message, now));
            }
            s.write_status(status).await?;
            if success {
                s.event(false, "Completed", "Job completed").await;
            } else {
                s.event(true, &reason, &message).await;
            }
            return Ok(Action::requeue(Duration::from_millis(100)));
        }
        s.write_status(status).await?;
        return Ok(Action::requeue(Duration::from_secs(1)));
    }

    let suspended = s.job.spec.as_ref().and_then(|spec| spec.suspend).unwrap_or(false);
    let was_suspended = plan::has(&s.job, "Suspended").is_some();
    if suspended {
        for pod in active.iter().take(PER_SYNC) {
            s.delete_pod(pod).await?;
        }
        if !was_suspended {
            set(&mut status, plan::condition("Suspended", "JobSuspended", "Job suspended", now));
            s.event(false, "Suspended", "Job suspended").await;
        }
        status.active = Some(0);
        s.write_status(status).await?;
        return Ok(Action::await_change());
    }
    if was_suspended {
        let mut resumed = plan::condition("Suspended", "JobResumed", "Job resumed", now);
        resumed.status = "False".into();
        set(&mut status, resumed);
        // The active deadline counts from the resumption.
        status.start_time = Some(now_time());
        s.event(false, "Resumed", "Job resumed").await;
    }
    if status.start_time.is_none() {
        status.start_time = Some(now_time());
    }
    let want = usize::try_from(plan::want_active(&s.job, succeeded)).unwrap_or(0);
    let mut requeue = None;
    if active.len() < want {
        let record = ctx.backoff.lock().unwrap_or_else(PoisonError::into_inner).get(uid).copied();
        let left = record.map_or(Duration::ZERO, |b| plan::backoff_left(b.failures, b.last, now));
        if left.is_zero() {
            create(ctx, s, uid, &active, want - active.len(), &indexes).await;
        } else {
            requeue = Some(left);
        }
    } else if active.len() > want {
        let mut extra: Vec<&&Pod> = active.iter().collect();
        extra.sort_by(|a, b| crate::replica_set::plan::delete_first(a, b, now));
        for pod in extra.into_iter().take(active.len() - want) {
            s.delete_pod(pod).await?;
        }
    }
    let ready = active.iter().filter(|p| {
        p.status.iter().flat_map(|st| st.conditions.iter().flatten()).any(|c| c.type_ == "Ready" && c.status == "True")
    });
    status.ready = Some(i32::try_from(ready.count()).unwrap_or(i32::MAX));
    status.active = Some(i32::try_from(active.len()).unwrap_or(i32::MAX));
    s.write_status(status).await?;
    let deadline = plan::deadline_in(&s.job, jiff::Timestamp::now());
    Ok(match (requeue, deadline) {
        (Some(a), Some(b)) => Action::requeue(a.min(b)),
        (Some(a), None) | (None, Some(a)) => Action::requeue(a),
        (None, None) => Action::await_change(),
    })
}

/// Creates `n` pods (slow start: 1, 2, 4, …; the first failing batch stops the rest), an
/// Indexed Job's at its lowest pending indexes.
async fn create(ctx: &Context, s: &Sync, uid: &str, active: &[&Pod], n: usize, succeeded: &BTreeSet<i32>) {
    let indexes: Vec<Option<i32>> = if plan::is_indexed(&s.job) {
        plan::pending_indexes(&s.job, succeeded, active).into_iter().take(n).map(Some).collect()
    } else {
        vec![None; n]
    };
    let mut created = HashSet::new();
    let mut at = 0;
    for batch in crate::replica_set::plan::slow_start_batches(indexes.len().min(PER_SYNC)) {
        let chunk = &indexes[at..at + batch];
        at += batch;
        let params = PostParams::default();
        let results = futures::future::join_all(chunk.iter().map(|i| {
            let pod = pod_from_template(&s.job, *i);
            let pods = s.pods.clone();
            let params = params.clone();
            async move { pods.create(&params, &pod).await }
        }))
        .await;
        let mut failed = false;
        for result in results {
            match result {
                Ok(pod) => {
                    let name = pod.name_any();
                    s.event(false, "SuccessfulCreate", &format!("Created pod: {name}")).await;
                    created.insert(name);
                }
                Err(e) => {
                    let message = match &e {
                        kube::Error::Api(st) => st.message.clone(),
                        other => other.to_string(),
                    };
                    s.event(true, "FailedCreate", &format!("Error creating: {message}")).await;
                    failed = true;
                }
            }
        }
        if failed {
            break;
        }
    }
    if !created.is_empty() {
        let mut expected = ctx.expected.lock().unwrap_or_else(PoisonError::into_inner);
        expected.insert(uid.to_owned(), (created, Instant::now()));
    }
}

/// A finished Job: deleted once `ttlSecondsAfterFinished` has passed since it finished
/// (`processJob`: after a fresh read, in the foreground), as the TTL controller.
async fn after_finished(
    ctx: &Context,
    s: &Sync,
    done: k8s_openapi::api::batch::v1::JobCondition,
) -> Result<Action, SyncError> {
    let Some(ttl) = s.job.spec.as_ref().and_then(|spec| spec.ttl_seconds_after_finished) else {
        return Ok(Action::await_change());
    };
    if s.job.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let finished = done.last_transition_time.map_or_else(jiff::Timestamp::now, |t| t.0);
    let left = i64::from(ttl) - (jiff::Timestamp::now().as_second() - finished.as_second());
    if left > 0 {
        return Ok(Action::requeue(Duration::from_secs(left.cast_unsigned())));
    }
    let client = ctx.credentials.client(TTL_NAME).await?;
    let jobs: Api<Job> = Api::namespaced(client, &s.job.namespace().unwrap_or_default());
    // A fresh read: the TTL may have changed since the cache saw the Job.
    let Some(fresh) = jobs.get_opt(&s.job.name_any()).await? else { return Ok(Action::await_change()) };
    if fresh.metadata.uid != s.job.metadata.uid
        || fresh.spec.as_ref().and_then(|spec| spec.ttl_seconds_after_finished) != Some(ttl)
    {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        preconditions: fresh
            .metadata
            .uid
            .clone()
            .map(|uid| kube::api::Preconditions { uid: Some(uid), resource_version: None }),
        ..Default::default()
    };
    match jobs.delete(&fresh.name_any(), &params).await {
        Ok(_) => tracing::info!(job = fresh.name_any(), "deleted: ttlSecondsAfterFinished passed"),
        Err(kube::Error::Api(st)) if st.code == 404 || st.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_indexed_pod_carries_its_index_and_every_pod_the_tracking_finalizer() {
        let job: Job =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "pi", "namespace": "ns", "uid": "u"},
            "spec": {"completionMode": "Indexed", "completions": 3, "selector": {},
                     "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}}}}))
            .unwrap_or_default();
        let pod = pod_from_template(&job, Some(2));
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("pi-2-"));
        assert!(plan::tracked(&pod));
        assert_eq!(plan::index_of(&pod), Some(2));
        let spec = pod.spec.unwrap_or_default();
        assert_eq!(spec.hostname.as_deref(), Some("pi-2"));
        let env = spec.containers[0].env.clone().unwrap_or_default();
        assert_eq!(env[0].name, "JOB_COMPLETION_INDEX");
        assert_eq!(pod.metadata.owner_references.unwrap_or_default()[0].kind, "Job");
        let plain = pod_from_template(&job, None);
        assert_eq!(plain.metadata.generate_name.as_deref(), Some("pi-"));
    }
}
