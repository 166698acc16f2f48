//! The ReplicaSet controller (`pkg/controller/replicaset`), on kube-runtime's Controller:
//! one reconcile per ReplicaSet at a time, five at once, woken by its own changes and by
//! those of the pods it owns or selects. Each sync claims the namespace's pods
//! ([`plan::claim`]), creates or deletes to match `spec.replicas` ([`plan::scale`], creates in
//! slow-start batches), and writes `status` — every write through the controller's own
//! client (`system:serviceaccount:kube-system:replicaset-controller`), so the pods it
//! creates pass ServiceAccount, LimitRanger, Pod Security and quota admission as anyone's.
//!
//! Its pod cache lags its own writes; as upstream's expectations, a ReplicaSet whose last
//! creates or deletes the cache has not seen yet is not acted on again until it has (or
//! five minutes passed).

pub(crate) mod plan;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use crate::credentials::Credentials;
use crate::events::{Recorder, Regarding};
use crate::expectations::Expectations;

/// The controller's name and service account.
pub const NAME: &str = "replicaset-controller";
/// `--concurrent-replicaset-syncs`' default.
const CONCURRENCY: u16 = 5;
/// How soon a sync waiting on its expectations looks again.
const EXPECTATIONS_RETRY: Duration = Duration::from_secs(1);

pub use crate::sync_error::SyncError;

struct Context {
    credentials: Credentials,
    pods: Store<Pod>,
    expectations: Expectations,
    /// Syncs in a row whose creates or deletes failed, by ReplicaSet UID: the back-off
    /// before the next try (the work queue's per-item rate limit, 5 ms doubling to 1000 s).
    failures: Mutex<HashMap<String, u32>>,
    /// The pod cache's first full list, awaited by one sync for all: kube-runtime's
    /// `Store::wait_until_ready` keeps one waker, so of several syncs waiting at once only
    /// the last would ever be woken (a new leader's other sets then never synced).
    pods_ready: tokio::sync::OnceCell<bool>,
}

/// The work queue's per-item back-off after `n` failures in a row.
fn failure_backoff(n: u32) -> Duration {
    Duration::from_millis(5).saturating_mul(1u32 << n.min(20)).min(Duration::from_secs(1000))
}

/// The ReplicaSets a pod concerns: its controller when that is a ReplicaSet, else (an
/// orphan) every ReplicaSet of its namespace that selects it.
fn concerned(pod: &Pod, sets: &Store<ReplicaSet>) -> Vec<ObjectRef<ReplicaSet>> {
    let namespace = pod.namespace().unwrap_or_default();
    if let Some(owner) = crate::claim::controller_of(pod.metadata.owner_references.as_ref()) {
        return if owner.kind == "ReplicaSet" {
            vec![ObjectRef::new(&owner.name).within(&namespace)]
        } else {
            Vec::new()
        };
    }
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    sets.state()
        .iter()
        .filter(|rs| rs.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|rs| rs.spec.as_ref().is_some_and(|s| crate::claim::selects(&s.selector, &labels)))
        .map(|rs| ObjectRef::from_obj(rs.as_ref()))
        .collect()
}

/// Runs the controller until its streams end; watches through the manager's own
/// identity, writes through the controller's.
pub async fn run(credentials: Credentials) {
    let root = credentials.root();
    let sets: Api<ReplicaSet> = Api::all(root.clone());
    let (pods, writer) = reflector::store::<Pod>();
    let pod_events =
        reflector::reflector(writer, watcher(Api::<Pod>::all(root), watcher::Config::default()).default_backoff())
            .touched_objects();
    let controller = Controller::new(sets, watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY));
    let sets_cache = controller.store();
    let context = Arc::new(Context {
        credentials,
        pods,
        expectations: Expectations::default(),
        failures: Mutex::default(),
        pods_ready: tokio::sync::OnceCell::new(),
    });
    controller
        .watches_stream(pod_events, move |pod| concerned(&pod, &sets_cache))
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "replicaset sync");
            }
        })
        .await;
}

fn error_policy(_rs: Arc<ReplicaSet>, error: &SyncError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %error, "replicaset sync failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// The controller reference a ReplicaSet's pods carry.
fn owner_reference(rs: &ReplicaSet) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: rs.name_any(),
        uid: rs.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A pod of `rs` from its template (`GetPodFromTemplate`): `<name>-` as generateName, the
/// template's labels and annotations, the controller reference.
fn pod_from_template(rs: &ReplicaSet) -> Pod {
    let template: PodTemplateSpec = rs.spec.as_ref().and_then(|s| s.template.clone()).unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", rs.name_any())),
            namespace: rs.namespace(),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner_reference(rs)]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

async fn reconcile(rs: Arc<ReplicaSet>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let span = tracing::info_span!("reconcile", controller = NAME, replicaset = %format!("{}/{}", rs.namespace().unwrap_or_default(), rs.name_any()));
    tracing::Instrument::instrument(sync(rs, ctx), span).await
}

async fn sync(rs: Arc<ReplicaSet>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let ready = ctx.pods_ready.get_or_init(|| async { ctx.pods.wait_until_ready().await.is_ok() }).await;
    if !*ready {
        return Err(SyncError::CacheGone("pods"));
    }
    let namespace = rs.namespace().unwrap_or_default();
    let uid = rs.metadata.uid.clone().unwrap_or_default();
    if !ctx.expectations.satisfied(&uid, &namespace, &ctx.pods) {
        tracing::debug!("waiting for the cache to show this set's last creates and deletes");
        return Ok(Action::requeue(EXPECTATIONS_RETRY));
    }
    let client = ctx.credentials.client(NAME).await?;
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let recorder = Recorder::new(client.clone(), NAME);
    let regarding = Regarding {
        api_version: "apps/v1",
        kind: "ReplicaSet",
        namespace: &namespace,
        name: &rs.name_any(),
        uid: &uid,
    };
    let in_namespace: Vec<Pod> = ctx
        .pods
        .state()
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(namespace.as_str()))
        .map(|p| p.as_ref().clone())
        .collect();
    let claim = plan::claim(&rs, &uid, &in_namespace);
    tracing::debug!(
        owned = claim.owned.len(),
        adopt = claim.adopt.len(),
        release = claim.release.len(),
        cached = in_namespace.len(),
        "claimed"
    );
    let mut active: Vec<Pod> = claim.owned.iter().filter(|p| plan::is_active(p)).map(|p| (*p).clone()).collect();
    for pod in &claim.adopt {
        if adopt(&pods_api, &rs, pod).await? {
            active.push((*pod).clone());
        }
    }
    for pod in &claim.release {
        release(&pods_api, &uid, pod).await?;
    }
    let failure = if rs.metadata.deletion_timestamp.is_none() {
        manage(&ctx, &rs, &uid, &pods_api, &recorder, &regarding, &active).await
    } else {
        None
    };
    let refs: Vec<&Pod> = active.iter().collect();
    let now = jiff::Timestamp::now();
    let status = plan::status(&rs, &refs, failure.as_ref().map(|(r, m)| (*r, m.as_str())), rs.status.as_ref(), now);
    if rs.status.as_ref() != Some(&status) {
        update_status(&Api::namespaced(client, &namespace), &rs, status).await?;
    }
    // A failed create or delete is tried again after the item's back-off.
    {
        let mut failures = ctx.failures.lock().unwrap_or_else(PoisonError::into_inner);
        if failure.is_some() {
            let n = failures.entry(uid.clone()).or_insert(0);
            *n = n.saturating_add(1);
            return Ok(Action::requeue(failure_backoff(*n)));
        }
        failures.remove(&uid);
    }
    // With minReadySeconds, a ready pod becomes available later: look again then.
    let min_ready = rs.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0);
    Ok(if min_ready > 0 {
        Action::requeue(Duration::from_secs(u64::try_from(min_ready).unwrap_or(1)))
    } else {
        Action::await_change()
    })
}

/// `updateReplicaSetStatus`: an Update of `/status` (the controller's role allows update,
/// not patch) on the cached object, and once more on a fresh read when the cache lagged the
/// controller's own last write (a conflict).
async fn update_status(sets: &Api<ReplicaSet>, rs: &ReplicaSet, status: ReplicaSetStatus) -> Result<(), SyncError> {
    let mut updated = rs.clone();
    updated.status = Some(status.clone());
    match sets.replace_status(&rs.name_any(), &PostParams::default(), &updated).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let Some(mut fresh) = sets.get_opt(&rs.name_any()).await? else { return Ok(()) };
            if fresh.metadata.uid != rs.metadata.uid {
                return Ok(());
            }
            fresh.status = Some(status);
            sets.replace_status(&rs.name_any(), &PostParams::default(), &fresh).await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Adopts an orphan (a controller reference patched in, conditioned on its UID) after
/// checking the ReplicaSet is still there and not being deleted (`RecheckDeletionTimestamp`).
async fn adopt(pods: &Api<Pod>, rs: &ReplicaSet, pod: &Pod) -> Result<bool, SyncError> {
    let mut owners = pod.metadata.owner_references.clone().unwrap_or_default();
    owners.push(owner_reference(rs));
    let patch = serde_json::json!({"metadata": {"uid": pod.metadata.uid, "ownerReferences": owners}});
    match pods.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 || s.code == 422 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Releases a pod the ReplicaSet no longer selects (its reference patched out).
async fn release(pods: &Api<Pod>, uid: &str, pod: &Pod) -> Result<(), SyncError> {
    let owners: Vec<OwnerReference> =
        pod.metadata.owner_references.iter().flatten().filter(|o| o.uid != uid).cloned().collect();
    let patch = serde_json::json!({"metadata": {"uid": pod.metadata.uid, "ownerReferences": owners}});
    match pods.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 || s.code == 422 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `manageReplicas`: creates (slow start) or deletes to match `spec.replicas`, with the
/// events upstream records; the failure for the `ReplicaFailure` condition, if any.
async fn manage(
    ctx: &Context,
    rs: &ReplicaSet,
    uid: &str,
    pods: &Api<Pod>,
    recorder: &Recorder,
    regarding: &Regarding<'_>,
    active: &[Pod],
) -> Option<(&'static str, String)> {
    let replicas = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let refs: Vec<&Pod> = active.iter().collect();
    match plan::scale(replicas, &refs, jiff::Timestamp::now()) {
        plan::Scale::Keep => None,
        plan::Scale::Create(n) => {
            let mut created = HashSet::new();
            let mut failure = None;
            'batches: for batch in plan::slow_start_batches(n) {
                let template = pod_from_template(rs);
                let params = PostParams::default();
                let results = futures::future::join_all((0..batch).map(|_| pods.create(&params, &template))).await;
                let mut failed = false;
                for result in results {
                    match result {
                        Ok(pod) => {
                            let name = pod.name_any();
                            recorder.normal(regarding, "SuccessfulCreate", &format!("Created pod: {name}")).await;
                            created.insert(name);
                        }
                        Err(e) => {
                            let message = api_message(&e);
                            recorder.warning(regarding, "FailedCreate", &format!("Error creating: {message}")).await;
                            failure = Some(("FailedCreate", message));
                            failed = true;
                        }
                    }
                }
                // The first failing batch stops the rest (slowStartBatch).
                if failed {
                    break 'batches;
                }
            }
            ctx.expectations.expect(uid, created, HashSet::new());
            failure
        }
        plan::Scale::Delete(names) => {
            let mut deleted = HashSet::new();
            let mut failure = None;
            for name in names {
                match pods.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {
                        recorder.normal(regarding, "SuccessfulDelete", &format!("Deleted pod: {name}")).await;
                        deleted.insert(name);
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => {
                        let message = api_message(&e);
                        recorder.warning(regarding, "FailedDelete", &format!("Error deleting: {message}")).await;
                        failure = Some(("FailedDelete", message));
                    }
                }
            }
            ctx.expectations.expect(uid, HashSet::new(), deleted);
            failure
        }
    }
}

/// The API's message of a failed call (what kubectl would print), else the error.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_syncs_back_off_as_the_work_queue() {
        assert_eq!(failure_backoff(0), Duration::from_millis(5));
        assert_eq!(failure_backoff(3), Duration::from_millis(40));
        assert_eq!(failure_backoff(40), Duration::from_secs(1000));
    }

    #[test]
    fn a_pod_concerns_its_controller_or_the_sets_that_select_an_orphan() {
        let pod: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "p", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u", "controller": true}]}}))
        .unwrap_or_default();
        let (store, _writer) = reflector::store::<ReplicaSet>();
        assert_eq!(concerned(&pod, &store), [ObjectRef::new("web").within("ns")]);
        let owned_by_job: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "p", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": true}]}}))
        .unwrap_or_default();
        assert!(concerned(&owned_by_job, &store).is_empty());
    }
}
