//! The Deployment controller (`pkg/controller/deployment`), on kube-runtime's Controller:
//! one sync per Deployment at a time, five at once, woken by its own changes and by those
//! of the ReplicaSets it owns or selects. Each sync claims the namespace's ReplicaSets,
//! then — as `syncDeployment` — shows pausing, scales in proportion when paused or
//! resized mid-rollout, or rolls out (RollingUpdate or Recreate) one step, and writes the
//! status; every write as `system:serviceaccount:kube-system:deployment-controller`.
//!
//! The decisions are [`plan`] (which sets, what sizes), [`status`] (counts and conditions)
//! and [`revision`] (annotations); this file only reads the caches and writes.

pub(crate) mod plan;
mod revision;
mod status;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use crate::claim;
use crate::credentials::Credentials;
use crate::events::{Recorder, Regarding};

/// The controller's name and service account.
pub const NAME: &str = "deployment-controller";
/// `--concurrent-deployment-syncs`' default.
const CONCURRENCY: u16 = 5;
/// How soon a Recreate rollout looks again while old pods are still running.
const OLD_PODS_RETRY: Duration = Duration::from_secs(1);

pub use crate::sync_error::SyncError;

struct Context {
    credentials: Credentials,
    sets: Store<ReplicaSet>,
    /// The cache's first full list, awaited once for all syncs (kube-runtime's
    /// `Store::wait_until_ready` keeps a single waker).
    sets_ready: tokio::sync::OnceCell<bool>,
}

/// The Deployments a ReplicaSet concerns: its controller when that is a Deployment, else
/// (an orphan) every Deployment of its namespace that selects it.
fn concerned(rs: &ReplicaSet, deployments: &Store<Deployment>) -> Vec<ObjectRef<Deployment>> {
    let namespace = rs.namespace().unwrap_or_default();
    if let Some(owner) = claim::controller_of(rs.metadata.owner_references.as_ref()) {
        return if owner.kind == "Deployment" {
            vec![ObjectRef::new(&owner.name).within(&namespace)]
        } else {
            Vec::new()
        };
    }
    let labels = rs.metadata.labels.clone().unwrap_or_default();
    deployments
        .state()
        .iter()
        .filter(|d| d.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|d| d.spec.as_ref().is_some_and(|s| claim::selects(&s.selector, &labels)))
        .map(|d| ObjectRef::from_obj(d.as_ref()))
        .collect()
}

/// Runs the controller until its streams end; watches through the manager's own
/// identity, writes through the controller's.
pub async fn run(credentials: Credentials) {
    let root = credentials.root();
    let (sets, writer) = reflector::store::<ReplicaSet>();
    let set_events = reflector::reflector(
        writer,
        watcher(Api::<ReplicaSet>::all(root.clone()), watcher::Config::default()).default_backoff(),
    )
    .touched_objects();
    let controller = Controller::new(Api::<Deployment>::all(root), watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY));
    let deployments = controller.store();
    let context = Arc::new(Context { credentials, sets, sets_ready: tokio::sync::OnceCell::new() });
    controller
        .watches_stream(set_events, move |rs| concerned(&rs, &deployments))
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "deployment sync");
            }
        })
        .await;
}

fn error_policy(_d: Arc<Deployment>, error: &SyncError, _ctx: Arc<Context>) -> Action {
    // The cache lagged the controller's own write: soon, on the fresh object.
    if error.is_conflict() {
        return Action::requeue(Duration::from_millis(200));
    }
    tracing::warn!(error = %error, "deployment sync failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(d: Arc<Deployment>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let key = format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any());
    let span = tracing::info_span!("reconcile", controller = NAME, deployment = %key);
    tracing::Instrument::instrument(sync(d.as_ref().clone(), ctx), span).await
}

/// One sync's view and writers: the Deployment as last written, its APIs, its recorder.
struct Sync {
    d: Deployment,
    deployments: Api<Deployment>,
    sets: Api<ReplicaSet>,
    pods: Api<Pod>,
    recorder: Recorder,
}

impl Sync {
    fn regarding(&self) -> (String, String, String) {
        (self.d.namespace().unwrap_or_default(), self.d.name_any(), self.d.metadata.uid.clone().unwrap_or_default())
    }

    async fn event(&self, warning: bool, reason: &str, message: &str) {
        let (namespace, name, uid) = self.regarding();
        let regarding =
            Regarding { api_version: "apps/v1", kind: "Deployment", namespace: &namespace, name: &name, uid: &uid };
        if warning {
            self.recorder.warning(&regarding, reason, message).await;
        } else {
            self.recorder.normal(&regarding, reason, message).await;
        }
    }

    /// Writes `status` if it differs from the last written (an Update of `/status`, as the
    /// controller's role allows).
    async fn write_status(&mut self, status: DeploymentStatus) -> Result<(), SyncError> {
        if self.d.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let mut updated = self.d.clone();
        updated.status = Some(status);
        self.d = self.deployments.replace_status(&self.d.name_any(), &PostParams::default(), &updated).await?;
        Ok(())
    }

    /// `SetDeploymentRevision`: the Deployment's revision annotation follows its new set's.
    async fn write_revision(&mut self, revision: &str) -> Result<(), SyncError> {
        let current = self.d.metadata.annotations.as_ref().and_then(|a| a.get(plan::REVISION));
        if current.map(String::as_str) == Some(revision) {
            return Ok(());
        }
        let mut updated = self.d.clone();
        updated.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(plan::REVISION.into(), revision.into());
        self.d = self.deployments.replace(&self.d.name_any(), &PostParams::default(), &updated).await?;
        Ok(())
    }

    /// `scaleReplicaSet`: the set's size and replica annotations written when either
    /// differs, with a `ScalingReplicaSet` event when the size moved.
    async fn scale(&self, rs: &ReplicaSet, size: i32) -> Result<ReplicaSet, SyncError> {
        let n = plan::replicas(&self.d);
        let mut updated = rs.clone();
        let annotations = updated.metadata.annotations.get_or_insert_with(BTreeMap::new);
        let annotations_moved = revision::set_replicas(annotations, n, n + plan::max_surge(&self.d));
        let from = plan::spec_replicas(rs);
        if from == size && !annotations_moved {
            return Ok(rs.clone());
        }
        if let Some(spec) = updated.spec.as_mut() {
            spec.replicas = Some(size);
        }
        let written = self.sets.replace(&rs.name_any(), &PostParams::default(), &updated).await?;
        if from != size {
            let way = if size > from { "up" } else { "down" };
            let message = format!("Scaled {way} replica set {} to {size} from {from}", rs.name_any());
            self.event(false, "ScalingReplicaSet", &message).await;
        }
        Ok(written)
    }

    /// Scales each named set to its size; whether any size moved.
    async fn scale_all(&self, sets: &mut [ReplicaSet], sizes: &[(String, i32)]) -> Result<bool, SyncError> {
        let mut moved = false;
        for (name, size) in sizes {
            if let Some(rs) = sets.iter_mut().find(|rs| rs.metadata.name.as_ref() == Some(name)) {
                moved |= plan::spec_replicas(rs) != *size;
                *rs = self.scale(rs, *size).await?;
            }
        }
        Ok(moved)
    }
}

/// The controller reference a Deployment's ReplicaSets carry.
fn owner_reference(d: &Deployment) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: d.name_any(),
        uid: d.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

async fn sync(d: Deployment, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let ready = ctx.sets_ready.get_or_init(|| async { ctx.sets.wait_until_ready().await.is_ok() }).await;
    if !*ready {
        return Err(SyncError::CacheGone("replicasets"));
    }
    let namespace = d.namespace().unwrap_or_default();
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let client = ctx.credentials.client(NAME).await?;
    let mut s = Sync {
        deployments: Api::namespaced(client.clone(), &namespace),
        sets: Api::namespaced(client.clone(), &namespace),
        pods: Api::namespaced(client.clone(), &namespace),
        recorder: Recorder::new(client, NAME),
        d,
    };
    let selector = s.d.spec.as_ref().map(|spec| spec.selector.clone()).unwrap_or_default();
    if selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty)
    {
        s.event(true, "SelectingAll", "This deployment is selecting all pods. A non-empty selector is required.").await;
        return Ok(Action::await_change());
    }
    let cached: Vec<ReplicaSet> = ctx
        .sets
        .state()
        .iter()
        .filter(|rs| rs.namespace().as_deref() == Some(namespace.as_str()))
        .map(|rs| rs.as_ref().clone())
        .collect();
    let deleting = s.d.metadata.deletion_timestamp.is_some();
    let claimed = claim::claim(&uid, &selector, deleting, &cached, |rs| &rs.metadata, |_| true);
    let mut owned: Vec<ReplicaSet> = claimed.owned.iter().map(|rs| (*rs).clone()).collect();
    for rs in &claimed.adopt {
        if let Some(adopted) = adopt(&s.sets, &s.d, rs).await? {
            owned.push(adopted);
        }
    }
    for rs in &claimed.release {
        release(&s.sets, &uid, rs).await?;
    }
    let now = jiff::Timestamp::now();
    if deleting {
        let (new, old) = new_and_old(&s.d, owned);
        let all: Vec<&ReplicaSet> = old.iter().chain(new.as_ref()).collect();
        let status = status::calculate(&s.d, &all, new.as_ref(), now);
        s.write_status(status).await?;
        return Ok(Action::await_change());
    }
    if let Some(paused) = status::paused(&s.d, now) {
        s.write_status(paused).await?;
    }
    let paused = s.d.spec.as_ref().and_then(|spec| spec.paused).unwrap_or(false);
    let all_refs: Vec<&ReplicaSet> = owned.iter().collect();
    if paused || plan::is_scaling_event(&s.d, &all_refs) {
        return scale_only(&mut s, owned, paused).await;
    }
    if plan::is_rolling(&s.d) { rolling(&mut s, owned).await } else { recreate(&mut s, owned).await }
}

/// Adopts an orphan set (a controller reference patched in, conditioned on its UID).
async fn adopt(sets: &Api<ReplicaSet>, d: &Deployment, rs: &ReplicaSet) -> Result<Option<ReplicaSet>, SyncError> {
    let mut owners = rs.metadata.owner_references.clone().unwrap_or_default();
    owners.push(owner_reference(d));
    let patch = serde_json::json!({"metadata": {"uid": rs.metadata.uid, "ownerReferences": owners}});
    match sets.patch(&rs.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(adopted) => Ok(Some(adopted)),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 || e.code == 422 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Releases a set the Deployment no longer selects.
async fn release(sets: &Api<ReplicaSet>, uid: &str, rs: &ReplicaSet) -> Result<(), SyncError> {
    let owners: Vec<OwnerReference> =
        rs.metadata.owner_references.iter().flatten().filter(|o| o.uid != uid).cloned().collect();
    let patch = serde_json::json!({"metadata": {"uid": rs.metadata.uid, "ownerReferences": owners}});
    match sets.patch(&rs.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 || e.code == 422 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The new set (if one has the Deployment's template) and the old ones.
fn new_and_old(d: &Deployment, owned: Vec<ReplicaSet>) -> (Option<ReplicaSet>, Vec<ReplicaSet>) {
    let refs: Vec<&ReplicaSet> = owned.iter().collect();
    let new_uid = plan::find_new(d, &refs).and_then(|rs| rs.metadata.uid.clone());
    let (new, old): (Vec<ReplicaSet>, Vec<ReplicaSet>) =
        owned.into_iter().partition(|rs| new_uid.is_some() && rs.metadata.uid == new_uid);
    (new.into_iter().next(), old)
}

/// `getAllReplicaSetsAndSyncRevision`: the new set brought to the next revision (and
/// created when `create` and there is none), the Deployment's revision following it.
async fn sync_revision(
    s: &mut Sync,
    owned: Vec<ReplicaSet>,
    create: bool,
) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>), SyncError> {
    let (new, old) = new_and_old(&s.d, owned);
    let old_refs: Vec<&ReplicaSet> = old.iter().collect();
    let revision = plan::max_revision(&old_refs) + 1;
    let n = plan::replicas(&s.d);
    let sized = (n, n + plan::max_surge(&s.d));
    let d_annotations = s.d.metadata.annotations.clone().unwrap_or_default();
    let min_ready = s.d.spec.as_ref().and_then(|spec| spec.min_ready_seconds);
    let now = jiff::Timestamp::now();
    if let Some(mut rs) = new {
        let mut annotations = rs.metadata.annotations.clone().unwrap_or_default();
        let moved = revision::set_new(&d_annotations, &mut annotations, revision, true, sized);
        let rs_min_ready = rs.spec.as_ref().and_then(|spec| spec.min_ready_seconds);
        if moved || rs_min_ready != min_ready {
            rs.metadata.annotations = Some(annotations);
            if let Some(spec) = rs.spec.as_mut() {
                spec.min_ready_seconds = min_ready;
            }
            rs = s.sets.replace(&rs.name_any(), &PostParams::default(), &rs).await?;
        }
        let rs_revision =
            rs.metadata.annotations.as_ref().and_then(|a| a.get(plan::REVISION)).cloned().unwrap_or_default();
        s.write_revision(&rs_revision).await?;
        let mut current = s.d.status.clone().unwrap_or_default();
        if status::has_deadline(&s.d) && status::get(&current, "Progressing").is_none() {
            let message = format!("Found new replica set {:?}", rs.name_any());
            status::set(&mut current, status::condition("Progressing", "True", status::FOUND_NEW_RS, message, now));
            s.write_status(current).await?;
        }
        return Ok((Some(rs), old));
    }
    if !create {
        return Ok((None, old));
    }
    let created = create_new(s, &old, revision, sized).await?;
    Ok((Some(created), old))
}

/// Creates the new set (`<deployment>-<hash>`); an existing one of that name that is this
/// Deployment's with the same template is taken (the cache lagged), another one is a hash
/// collision (the collision count is raised and the sync tried again).
async fn create_new(
    s: &mut Sync,
    old: &[ReplicaSet],
    revision: i64,
    sized: (i32, i32),
) -> Result<ReplicaSet, SyncError> {
    let spec = s.d.spec.clone().unwrap_or_default();
    let collisions = s.d.status.as_ref().and_then(|st| st.collision_count);
    let hash = plan::template_hash(&spec.template, collisions);
    let mut template = spec.template.clone();
    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    meta.labels.get_or_insert_with(BTreeMap::new).insert(plan::TEMPLATE_HASH.into(), hash.clone());
    let labels = meta.labels.clone();
    let mut selector = spec.selector.clone();
    selector.match_labels.get_or_insert_with(BTreeMap::new).insert(plan::TEMPLATE_HASH.into(), hash.clone());
    let name = format!("{}-{hash}", s.d.name_any());
    let mut rs = ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: s.d.namespace(),
            labels,
            owner_references: Some(vec![owner_reference(&s.d)]),
            ..Default::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(0),
            min_ready_seconds: spec.min_ready_seconds,
            selector,
            template: Some(template),
        }),
        status: None,
    };
    let all: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(&rs)).collect();
    let size = plan::new_rs_replicas(&s.d, &all, 0);
    if let Some(spec) = rs.spec.as_mut() {
        spec.replicas = Some(size);
    }
    let d_annotations = s.d.metadata.annotations.clone().unwrap_or_default();
    let mut annotations = BTreeMap::new();
    revision::set_new(&d_annotations, &mut annotations, revision, false, sized);
    rs.metadata.annotations = Some(annotations);
    let now = jiff::Timestamp::now();
    let (created, existed) = match s.sets.create(&PostParams::default(), &rs).await {
        Ok(created) => (created, false),
        Err(kube::Error::Api(e)) if e.code == 409 && e.reason == "AlreadyExists" => {
            let existing = s.sets.get(&name).await?;
            let ours = claim::controller_of(existing.metadata.owner_references.as_ref())
                .is_some_and(|o| Some(&o.uid) == s.d.metadata.uid.as_ref());
            let template_of = existing.spec.as_ref().and_then(|sp| sp.template.clone()).unwrap_or_default();
            if !(ours && plan::equal_ignore_hash(&template_of, &spec.template)) {
                let mut status = s.d.status.clone().unwrap_or_default();
                status.collision_count = Some(collisions.unwrap_or(0).saturating_add(1));
                s.write_status(status).await?;
                return Err(SyncError::Collision("replicaset", name));
            }
            (existing, true)
        }
        Err(kube::Error::Api(e)) => {
            let message = format!("Failed to create new replica set {name:?}: {}", e.message);
            if status::has_deadline(&s.d) {
                let mut status = s.d.status.clone().unwrap_or_default();
                status::set(
                    &mut status,
                    status::condition("Progressing", "False", status::RS_CREATE_ERROR, message.clone(), now),
                );
                s.write_status(status).await?;
            }
            s.event(true, status::RS_CREATE_ERROR, &message).await;
            return Err(kube::Error::Api(e).into());
        }
        Err(e) => return Err(e.into()),
    };
    if !existed && size > 0 {
        s.event(false, "ScalingReplicaSet", &format!("Scaled up replica set {name} to {size}")).await;
    }
    s.write_revision(&revision.to_string()).await?;
    if !existed && status::has_deadline(&s.d) {
        let mut status = s.d.status.clone().unwrap_or_default();
        let message = format!("Created new replica set {name:?}");
        status::set(&mut status, status::condition("Progressing", "True", status::NEW_RS_CREATED, message, now));
        s.write_status(status).await?;
    }
    Ok(created)
}

/// `syncRolloutStatus`, and the requeue a deadline asks for.
async fn rollout_status(s: &mut Sync, old: &[ReplicaSet], new: Option<&ReplicaSet>) -> Result<Action, SyncError> {
    let all: Vec<&ReplicaSet> = old.iter().chain(new).collect();
    let (status, requeue) = status::rollout(&s.d, &all, new, jiff::Timestamp::now());
    s.write_status(status).await?;
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// `cleanupDeployment`: old sets past the history limit deleted.
async fn cleanup(s: &Sync, old: &[ReplicaSet]) -> Result<(), SyncError> {
    let refs: Vec<&ReplicaSet> = old.iter().collect();
    for name in plan::beyond_history(&s.d, &refs) {
        match s.sets.delete(&name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(replicaset = name, "deleted: beyond the revision history limit"),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// `sync`: a paused Deployment or a scaling event — sizes shared in proportion, history
/// cleaned when paused, the counts written (no rollout step).
async fn scale_only(s: &mut Sync, owned: Vec<ReplicaSet>, paused: bool) -> Result<Action, SyncError> {
    let (mut new, mut old) = sync_revision(s, owned, false).await?;
    let sizes = {
        let old_refs: Vec<&ReplicaSet> = old.iter().collect();
        plan::proportional(&s.d, new.as_ref(), &old_refs)
    };
    if let Some(rs) = new.as_mut() {
        s.scale_all(std::slice::from_mut(rs), &sizes).await?;
    }
    s.scale_all(&mut old, &sizes).await?;
    if paused {
        cleanup(s, &old).await?;
    }
    let all: Vec<&ReplicaSet> = old.iter().chain(new.as_ref()).collect();
    let status = status::calculate(&s.d, &all, new.as_ref(), jiff::Timestamp::now());
    s.write_status(status).await?;
    Ok(Action::await_change())
}

/// `rolloutRolling`: the new set up by what the surge allows, else the old ones down by
/// what availability allows; the history cleaned once complete.
async fn rolling(s: &mut Sync, owned: Vec<ReplicaSet>) -> Result<Action, SyncError> {
    let (new, mut old) = sync_revision(s, owned, true).await?;
    let Some(mut new) = new else { return rollout_status(s, &old, None).await };
    let n = plan::replicas(&s.d);
    let spec = plan::spec_replicas(&new);
    let all: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(&new)).collect();
    let target = if spec > n { n } else { plan::new_rs_replicas(&s.d, &all, spec) };
    if target != spec {
        new = s.scale(&new, target).await?;
        return rollout_status(s, &old, Some(&new)).await;
    }
    let sizes = {
        let active_old: Vec<&ReplicaSet> = old.iter().filter(|rs| plan::spec_replicas(rs) > 0).collect();
        plan::scale_down_old(&s.d, &all, &active_old, Some(&new))
    };
    if s.scale_all(&mut old, &sizes).await? {
        return rollout_status(s, &old, Some(&new)).await;
    }
    if s.d.status.as_ref().is_some_and(|st| status::complete(&s.d, st)) {
        cleanup(s, &old).await?;
    }
    rollout_status(s, &old, Some(&new)).await
}

/// `rolloutRecreate`: the old sets to 0, then — once none of their pods runs — the new set
/// to all the replicas.
async fn recreate(s: &mut Sync, owned: Vec<ReplicaSet>) -> Result<Action, SyncError> {
    let (new, mut old) = sync_revision(s, owned, false).await?;
    let to_zero: Vec<(String, i32)> =
        old.iter().filter(|rs| plan::spec_replicas(rs) > 0).map(|rs| (rs.name_any(), 0)).collect();
    if s.scale_all(&mut old, &to_zero).await? {
        return rollout_status(s, &old, new.as_ref()).await;
    }
    if old_pods_running(s, new.as_ref(), &old).await? {
        rollout_status(s, &old, new.as_ref()).await?;
        return Ok(Action::requeue(OLD_PODS_RETRY));
    }
    let mut new = match new {
        Some(rs) => rs,
        None => match sync_revision(s, old.clone(), true).await? {
            (Some(rs), rest) => {
                old = rest;
                rs
            }
            (None, rest) => return rollout_status(s, &rest, None).await,
        },
    };
    let n = plan::replicas(&s.d);
    if plan::spec_replicas(&new) != n {
        new = s.scale(&new, n).await?;
    }
    if s.d.status.as_ref().is_some_and(|st| status::complete(&s.d, st)) {
        cleanup(s, &old).await?;
    }
    rollout_status(s, &old, Some(&new)).await
}

/// `oldPodsRunning`: an old set still counts replicas, or one of its pods (terminating
/// ones included, which its status no longer counts) has not finished. The pods are listed
/// live: only a Recreate rollout between its two steps asks.
async fn old_pods_running(s: &Sync, new: Option<&ReplicaSet>, old: &[ReplicaSet]) -> Result<bool, SyncError> {
    if old.iter().any(|rs| rs.status.as_ref().is_some_and(|st| st.replicas > 0)) {
        return Ok(true);
    }
    let old_uids: Vec<&String> = old.iter().filter_map(|rs| rs.metadata.uid.as_ref()).collect();
    if old_uids.is_empty() {
        return Ok(false);
    }
    let selector = s.d.spec.as_ref().and_then(|spec| spec.selector.match_labels.clone()).unwrap_or_default();
    let labels: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let pods = s.pods.list(&ListParams::default().labels(&labels.join(","))).await?;
    let new_uid = new.and_then(|rs| rs.metadata.uid.as_ref());
    Ok(pods.items.iter().any(|pod| {
        let owner = claim::controller_of(pod.metadata.owner_references.as_ref()).map(|o| &o.uid);
        let phase = pod.status.as_ref().and_then(|st| st.phase.as_deref()).unwrap_or("Pending");
        owner.is_some_and(|uid| old_uids.contains(&uid) && Some(uid) != new_uid)
            && phase != "Succeeded"
            && phase != "Failed"
    }))
}
