//! The DaemonSet controller (`pkg/controller/daemon`), on kube-runtime's Controller: one
//! reconcile per DaemonSet at a time, two at once (`--concurrent-daemonset-syncs`), woken
//! by its own changes, those of its pods and ControllerRevisions, and any node's. Each sync
//! (`syncDaemonSet`):
//!
//! 1. keeps the history: the ControllerRevision `<name>-<hash>` holding the current
//!    template (created, or its revision moved to the newest), the pods' hash from it;
//! 2. claims the namespace's pods and groups them by the node they are bound or pinned to;
//! 3. `manage`s ([`plan::manage`]): a pod on each node that should run one
//!    ([`plan::eligibility`]), pinned there by node affinity on `metadata.name` for the
//!    default scheduler to bind, with the daemon tolerations; failed pods replaced (with
//!    a back-off per node), extra ones and those on nodes where none may stay deleted;
//! 4. when nothing was left to manage, rolls the update ([`plan::rolling_update`],
//!    maxUnavailable or maxSurge), then trims the history past `revisionHistoryLimit`;
//! 5. writes `status` (what `kubectl rollout status ds/…` reads).
//!
//! Every write goes through the controller's own client
//! (`system:serviceaccount:kube-system:daemon-set-controller`), so its pods pass
//! ServiceAccount, LimitRanger, Pod Security and quota admission as anyone's.

pub(crate) mod plan;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use crate::credentials::Credentials;
use crate::events::{Recorder, Regarding};
use crate::expectations::Expectations;
use crate::replica_set::plan::slow_start_batches;

/// The controller's name and service account.
pub const NAME: &str = "daemon-set-controller";
/// `--concurrent-daemonset-syncs`' default.
const CONCURRENCY: u16 = 2;
/// How soon a sync waiting on its expectations looks again.
const EXPECTATIONS_RETRY: Duration = Duration::from_secs(1);
/// The failed-pod back-off per node (`failedPodsBackoff`: 1 s doubling to 15 min).
const FAILED_BACKOFF_START: Duration = Duration::from_secs(1);
const FAILED_BACKOFF_MAX: Duration = Duration::from_secs(15 * 60);

pub use crate::sync_error::SyncError;

struct Context {
    credentials: Credentials,
    pods: Store<Pod>,
    nodes: Store<Node>,
    revisions: Store<ControllerRevision>,
    expectations: Expectations,
    /// Failed daemon pods replaced, by DaemonSet UID and node: how often, and when last.
    failed: Mutex<HashMap<(String, String), (u32, Instant)>>,
    ready: tokio::sync::OnceCell<bool>,
}

impl Context {
    /// Whether a failed pod on `node` may be replaced now; if not, how long until it may.
    fn failed_backoff(&self, uid: &str, node: &str) -> Option<Duration> {
        let mut all = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (uid.to_owned(), node.to_owned());
        let now = Instant::now();
        if let Some((n, at)) = all.get(&key) {
            let wait = FAILED_BACKOFF_START.saturating_mul(1u32 << (*n).min(10)).min(FAILED_BACKOFF_MAX);
            if now.duration_since(*at) < wait {
                return Some(wait - now.duration_since(*at));
            }
        }
        let entry = all.entry(key).or_insert((0, now));
        *entry = (entry.0.saturating_add(1), now);
        None
    }
}

/// The DaemonSet a pod or a revision belongs to: its controller when that is a DaemonSet,
/// else (an orphan) every DaemonSet of its namespace that selects it.
fn concerned(meta: &ObjectMeta, sets: &Store<DaemonSet>) -> Vec<ObjectRef<DaemonSet>> {
    let namespace = meta.namespace.clone().unwrap_or_default();
    if let Some(owner) = crate::claim::controller_of(meta.owner_references.as_ref()) {
        return if owner.kind == "DaemonSet" {
            vec![ObjectRef::new(&owner.name).within(&namespace)]
        } else {
            Vec::new()
        };
    }
    let labels = meta.labels.clone().unwrap_or_default();
    sets.state()
        .iter()
        .filter(|ds| ds.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|ds| ds.spec.as_ref().is_some_and(|s| crate::claim::selects(&s.selector, &labels)))
        .map(|ds| ObjectRef::from_obj(ds.as_ref()))
        .collect()
}

/// What of each node the controller last acted on: its labels, its spec (taints,
/// `unschedulable`) and its conditions' types and statuses.
#[derive(Default)]
struct NodesSeen(Mutex<HashMap<String, String>>);

impl NodesSeen {
    /// Whether `node`'s event changes nothing a daemon pod's placement reads (a deleted
    /// node, gone from `cache`, always counts as a change).
    fn unchanged(&self, node: &Node, cache: &Store<Node>) -> bool {
        let name = node.name_any();
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.get(&ObjectRef::new(&name)).is_none() {
            all.remove(&name);
            return false;
        }
        let conditions: Vec<(&str, &str)> = node
            .status
            .as_ref()
            .and_then(|st| st.conditions.as_ref())
            .into_iter()
            .flatten()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        let fingerprint = serde_json::json!([node.metadata.labels, node.spec, conditions]).to_string();
        all.insert(name, fingerprint.clone()).is_some_and(|was| was == fingerprint)
    }
}

/// Runs the controller until its streams end; watches through the manager's own
/// identity, writes through the controller's.
pub async fn run(credentials: Credentials) {
    let root = credentials.root();
    let (pods, pod_events) = crate::cache::cached_events(Api::<Pod>::all(root.clone()));
    let (nodes, node_events) = crate::cache::cached_events(Api::<Node>::all(root.clone()));
    let (revisions, revision_events) = crate::cache::cached_events(Api::<ControllerRevision>::all(root.clone()));
    let controller = Controller::new(Api::<DaemonSet>::all(root), watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY));
    let (for_pods, for_nodes, for_revisions) = (controller.store(), controller.store(), controller.store());
    let (seen, node_cache) = (NodesSeen::default(), nodes.clone());
    let context = Arc::new(Context {
        credentials,
        pods,
        nodes,
        revisions,
        expectations: Expectations::default(),
        failed: Mutex::default(),
        ready: tokio::sync::OnceCell::new(),
    });
    controller
        .watches_stream(pod_events, move |pod| concerned(&pod.metadata, &for_pods))
        .watches_stream(revision_events, move |r| concerned(&r.metadata, &for_revisions))
        // A node's labels, taints or readiness may change where a daemon pod belongs; its
        // heartbeats alone do not (`shouldIgnoreNodeUpdate`), or every status update of
        // every node would sync every DaemonSet.
        .watches_stream(node_events, move |node| {
            if seen.unchanged(&node, &node_cache) {
                return Vec::new();
            }
            for_nodes.state().iter().map(|ds| ObjectRef::from_obj(ds.as_ref())).collect::<Vec<_>>()
        })
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "daemonset sync");
            }
        })
        .await;
}

fn error_policy(_ds: Arc<DaemonSet>, error: &SyncError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %error, "daemonset sync failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// The controller reference a DaemonSet's pods and revisions carry.
fn owner_reference(ds: &DaemonSet) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "DaemonSet".into(),
        name: ds.name_any(),
        uid: ds.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

async fn reconcile(ds: Arc<DaemonSet>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let span = tracing::info_span!("reconcile", controller = NAME, daemonset = %format!("{}/{}", ds.namespace().unwrap_or_default(), ds.name_any()));
    tracing::Instrument::instrument(sync(ds, ctx), span).await
}

/// What one sync works on: the DaemonSet's API pieces and identity.
struct Sync<'a> {
    ds: &'a DaemonSet,
    uid: String,
    namespace: String,
    client: kube::Client,
    recorder: Recorder,
}

impl Sync<'_> {
    fn regarding(&self) -> Regarding<'_> {
        Regarding {
            api_version: "apps/v1",
            kind: "DaemonSet",
            namespace: &self.namespace,
            name: self.ds.metadata.name.as_deref().unwrap_or_default(),
            uid: &self.uid,
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn revisions(&self) -> Api<ControllerRevision> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}

async fn sync(ds: Arc<DaemonSet>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let ready = ctx
        .ready
        .get_or_init(|| async {
            ctx.pods.wait_until_ready().await.is_ok()
                && ctx.nodes.wait_until_ready().await.is_ok()
                && ctx.revisions.wait_until_ready().await.is_ok()
        })
        .await;
    if !*ready {
        return Err(SyncError::CacheGone("pods, nodes or controllerrevisions"));
    }
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let client = ctx.credentials.client(NAME).await?;
    let s = Sync {
        ds: &ds,
        uid: ds.metadata.uid.clone().unwrap_or_default(),
        namespace: ds.namespace().unwrap_or_default(),
        recorder: Recorder::new(client.clone(), NAME),
        client,
    };
    let (hash, old_revisions) = history(&ctx, &s).await?;

    let in_namespace: Vec<Pod> = ctx
        .pods
        .state()
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(s.namespace.as_str()))
        .map(|p| p.as_ref().clone())
        .collect();
    let selector = ds.spec.as_ref().map(|sp| sp.selector.clone()).unwrap_or_default();
    let claim = crate::claim::claim(&s.uid, &selector, false, &in_namespace, |p| &p.metadata, |_| true);
    let mut owned: Vec<Pod> = claim.owned.iter().map(|p| (*p).clone()).collect();
    for pod in &claim.adopt {
        if set_owners(&s, pod, true).await? {
            owned.push((*pod).clone());
        }
    }
    for pod in &claim.release {
        set_owners(&s, pod, false).await?;
    }
    // getNodesToDaemonPods: a deleted pod that finished no longer holds its node.
    let terminal = |p: &Pod| {
        let phase = p.status.as_ref().and_then(|st| st.phase.as_deref()).unwrap_or_default();
        (phase == "Succeeded" || phase == "Failed") && p.metadata.deletion_timestamp.is_some()
    };
    let mut by_node: std::collections::BTreeMap<String, Vec<&Pod>> = std::collections::BTreeMap::new();
    for pod in owned.iter().filter(|p| !terminal(p)) {
        if let Some(node) = plan::target_node(pod) {
            by_node.entry(node).or_default().push(pod);
        }
    }
    let mut nodes: Vec<(String, plan::Eligibility)> =
        ctx.nodes.state().iter().map(|n| (n.name_any(), plan::eligibility(&ds, n))).collect();
    nodes.sort_by(|a, b| a.0.cmp(&b.0));
    let now = jiff::Timestamp::now();
    let mut requeue: Option<Duration> = None;
    if ctx.expectations.satisfied(&s.uid, &s.namespace, &ctx.pods) {
        let mut work = plan::manage(&ds, &nodes, &by_node, &hash, now);
        // Failed pods are replaced no faster than the node's back-off allows.
        let mut held = HashSet::new();
        for (pod, node) in std::mem::take(&mut work.failed) {
            match ctx.failed_backoff(&s.uid, &node) {
                Some(wait) => {
                    held.insert(pod);
                    requeue = Some(requeue.map_or(wait, |r| r.min(wait)));
                }
                None => {
                    let message =
                        format!("Found failed daemon pod {}/{pod} on node {node}, will try to kill it", s.namespace);
                    s.recorder.warning(&s.regarding(), "FailedDaemonPod", &message).await;
                }
            }
        }
        work.delete.retain(|p| !held.contains(p));
        let mut acted = !work.delete.is_empty() || !work.create_on.is_empty();
        sync_nodes(&ctx, &s, &work.delete, &work.create_on, &hash).await;
        let rolling = ds.spec.as_ref().and_then(|sp| sp.update_strategy.as_ref()).and_then(|u| u.type_.as_deref())
            != Some("OnDelete");
        if !acted && rolling {
            let roll = plan::rolling_update(&ds, &nodes, &by_node, &hash, now);
            acted = !roll.delete.is_empty() || !roll.create_on.is_empty();
            sync_nodes(&ctx, &s, &roll.delete, &roll.create_on, &hash).await;
        }
        if !acted {
            let live: Vec<&Pod> = by_node.values().flatten().copied().collect();
            let old: Vec<&ControllerRevision> = old_revisions.iter().collect();
            for name in plan::history_to_delete(&ds, &old, &live) {
                delete_revision(&s, &name).await?;
            }
        }
    } else {
        tracing::debug!("waiting for the cache to show this set's last creates and deletes");
        requeue = Some(EXPECTATIONS_RETRY);
    }
    let status = plan::status(&ds, &nodes, &by_node, &hash, now);
    if ds.status.as_ref() != Some(&status) {
        update_status(&Api::namespaced(s.client.clone(), &s.namespace), &ds, status.clone()).await?;
    }
    // With minReadySeconds, a ready pod becomes available later: look again then.
    let min_ready = ds.spec.as_ref().and_then(|sp| sp.min_ready_seconds).unwrap_or(0);
    if min_ready > 0 && status.number_ready != status.number_available.unwrap_or(0) {
        let wait = Duration::from_secs(u64::try_from(min_ready).unwrap_or(1));
        requeue = Some(requeue.map_or(wait, |r| r.min(wait)));
    }
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// `constructHistory`: the current revision's hash (the revision created when none holds
/// the template, or its number moved past every old one's), and the old revisions.
async fn history(ctx: &Context, s: &Sync<'_>) -> Result<(String, Vec<ControllerRevision>), SyncError> {
    let ds = s.ds;
    let selector = ds.spec.as_ref().map(|sp| sp.selector.clone()).unwrap_or_default();
    let in_namespace: Vec<ControllerRevision> = ctx
        .revisions
        .state()
        .iter()
        .filter(|r| r.namespace().as_deref() == Some(s.namespace.as_str()))
        .map(|r| r.as_ref().clone())
        .collect();
    let claim = crate::claim::claim(&s.uid, &selector, false, &in_namespace, |r| &r.metadata, |_| true);
    let mut mine: Vec<ControllerRevision> = claim.owned.iter().map(|r| (*r).clone()).collect();
    for r in &claim.adopt {
        let mut owners = r.metadata.owner_references.clone().unwrap_or_default();
        owners.push(owner_reference(ds));
        let patch = serde_json::json!({"metadata": {"uid": r.metadata.uid, "ownerReferences": owners}});
        match s.revisions().patch(&r.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(adopted) => mine.push(adopted),
            Err(kube::Error::Api(e)) if matches!(e.code, 404 | 409 | 422) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let (current, old): (Vec<ControllerRevision>, Vec<ControllerRevision>) =
        mine.into_iter().partition(|r| plan::matches(ds, r));
    let next = old.iter().map(|r| r.revision).max().unwrap_or(0) + 1;
    let hash_of = |r: &ControllerRevision| {
        r.metadata.labels.as_ref().and_then(|l| l.get(plan::REVISION_HASH)).cloned().unwrap_or_else(|| r.name_any())
    };
    let Some(cur) = current.iter().max_by_key(|r| r.revision) else {
        return Ok((snapshot(s, next).await?, old));
    };
    // dedupCurHistories: one revision holds the template; the others go.
    for dup in current.iter().filter(|r| r.metadata.uid != cur.metadata.uid) {
        delete_revision(s, &dup.name_any()).await?;
    }
    if cur.revision < next {
        let mut moved = cur.clone();
        moved.revision = next;
        s.revisions().replace(&cur.name_any(), &PostParams::default(), &moved).await?;
    }
    Ok((hash_of(cur), old))
}

/// Deletes a revision (one already gone is fine).
async fn delete_revision(s: &Sync<'_>, name: &str) -> Result<(), SyncError> {
    match s.revisions().delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `snapshot`: the revision `<name>-<hash>` holding the template. A revision of that name
/// holding another template is a hash collision: the DaemonSet's `collisionCount` moves
/// and the next sync hashes anew.
async fn snapshot(s: &Sync<'_>, revision: i64) -> Result<String, SyncError> {
    let ds = s.ds;
    let template = ds.spec.as_ref().map(|sp| sp.template.clone()).unwrap_or_default();
    let collisions = ds.status.as_ref().and_then(|st| st.collision_count);
    let hash = crate::deployment::plan::template_hash(&template, collisions);
    let name = format!("{}-{hash}", ds.name_any());
    let mut labels = template.metadata.and_then(|m| m.labels).unwrap_or_default();
    labels.insert(plan::REVISION_HASH.into(), hash.clone());
    let object = ControllerRevision {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(s.namespace.clone()),
            labels: Some(labels),
            annotations: ds.metadata.annotations.clone(),
            owner_references: Some(vec![owner_reference(ds)]),
            ..Default::default()
        },
        data: Some(RawExtension(plan::revision_data(ds))),
        revision,
    };
    match s.revisions().create(&PostParams::default(), &object).await {
        Ok(_) => Ok(hash),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = s.revisions().get(&name).await?;
            if plan::matches(ds, &existing) {
                return Ok(hash);
            }
            let mut bumped = ds.clone();
            let status = bumped.status.get_or_insert_with(DaemonSetStatus::default);
            status.collision_count = Some(collisions.unwrap_or(0).saturating_add(1));
            Api::<DaemonSet>::namespaced(s.client.clone(), &s.namespace)
                .replace_status(&ds.name_any(), &PostParams::default(), &bumped)
                .await?;
            Err(SyncError::Collision("controllerrevision", name))
        }
        Err(e) => Err(e.into()),
    }
}

/// Adopts (a controller reference patched in) or releases (patched out) a pod,
/// conditioned on its UID.
async fn set_owners(s: &Sync<'_>, pod: &Pod, adopt: bool) -> Result<bool, SyncError> {
    let mut owners: Vec<OwnerReference> =
        pod.metadata.owner_references.iter().flatten().filter(|o| o.uid != s.uid).cloned().collect();
    if adopt {
        owners.push(owner_reference(s.ds));
    }
    let patch = serde_json::json!({"metadata": {"uid": pod.metadata.uid, "ownerReferences": owners}});
    match s.pods().patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if matches!(e.code, 404 | 409 | 422) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// `syncNodes`: deletes `delete`, creates a pod pinned to each of `create_on` (slow-start
/// batches), with upstream's events; the cache is expected to show them before the next
/// sync acts.
async fn sync_nodes(ctx: &Context, s: &Sync<'_>, delete: &[String], create_on: &[String], hash: &str) {
    let template = plan::pod_template(s.ds, hash);
    let meta = template.metadata.clone().unwrap_or_default();
    let pods = s.pods();
    let mut created = HashSet::new();
    let mut queue = create_on.iter();
    'batches: for batch in slow_start_batches(create_on.len()) {
        let chunk: Vec<&String> = queue.by_ref().take(batch).collect();
        let params = PostParams::default();
        let results = futures::future::join_all(chunk.iter().map(|node| {
            let mut spec = template.spec.clone().unwrap_or_default();
            spec.affinity = Some(plan::pin_to_node(spec.affinity.take(), node));
            let pod = Pod {
                metadata: ObjectMeta {
                    generate_name: Some(format!("{}-", s.ds.name_any())),
                    namespace: Some(s.namespace.clone()),
                    labels: meta.labels.clone(),
                    annotations: meta.annotations.clone(),
                    finalizers: meta.finalizers.clone(),
                    owner_references: Some(vec![owner_reference(s.ds)]),
                    ..Default::default()
                },
                spec: Some(spec),
                status: None,
            };
            let pods = pods.clone();
            let params = params.clone();
            async move { pods.create(&params, &pod).await }
        }))
        .await;
        let mut failed = false;
        for result in results {
            match result {
                Ok(pod) => {
                    let name = pod.name_any();
                    s.recorder.normal(&s.regarding(), "SuccessfulCreate", &format!("Created pod: {name}")).await;
                    created.insert(name);
                }
                Err(e) => {
                    let message = match &e {
                        kube::Error::Api(s) => s.message.clone(),
                        other => other.to_string(),
                    };
                    s.recorder.warning(&s.regarding(), "FailedCreate", &format!("Error creating: {message}")).await;
                    failed = true;
                }
            }
        }
        if failed {
            break 'batches;
        }
    }
    let mut deleted = HashSet::new();
    for name in delete {
        match pods.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                s.recorder.normal(&s.regarding(), "SuccessfulDelete", &format!("Deleted pod: {name}")).await;
                deleted.insert(name.clone());
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                let message = match &e {
                    kube::Error::Api(s) => s.message.clone(),
                    other => other.to_string(),
                };
                s.recorder.warning(&s.regarding(), "FailedDelete", &format!("Error deleting: {message}")).await;
            }
        }
    }
    ctx.expectations.expect(&s.uid, created, deleted);
}

/// `storeDaemonSetStatus`: an Update of `/status` on the cached object, once more on a
/// fresh read when the cache lagged the controller's own last write (a conflict).
async fn update_status(sets: &Api<DaemonSet>, ds: &DaemonSet, status: DaemonSetStatus) -> Result<(), SyncError> {
    let mut updated = ds.clone();
    updated.status = Some(status.clone());
    match sets.replace_status(&ds.name_any(), &PostParams::default(), &updated).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let Some(mut fresh) = sets.get_opt(&ds.name_any()).await? else { return Ok(()) };
            if fresh.metadata.uid != ds.metadata.uid {
                return Ok(());
            }
            // The fresh object may carry a newer collision count; keep it.
            let collisions = fresh.status.as_ref().and_then(|st| st.collision_count);
            fresh.status = Some(DaemonSetStatus { collision_count: collisions.or(status.collision_count), ..status });
            sets.replace_status(&ds.name_any(), &PostParams::default(), &fresh).await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kube::runtime::reflector;

    fn node(zone: &str, ready: &str, heartbeat: &str) -> Node {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "n1", "labels": {"zone": zone}},
            "status": {"conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat}]}}))
        .unwrap()
    }

    #[test]
    fn heartbeats_alone_wake_no_daemon_set() {
        let (store, mut writer) = reflector::store::<Node>();
        let first = node("a", "True", "2026-12-03T10:00:00Z");
        writer.apply_watcher_event(&watcher::Event::Apply(first.clone()));
        let seen = NodesSeen::default();
        assert!(!seen.unchanged(&first, &store), "a node first seen");
        assert!(seen.unchanged(&node("a", "True", "2026-12-03T10:00:10Z"), &store), "a heartbeat");
        assert!(!seen.unchanged(&node("b", "True", "2026-12-03T10:00:20Z"), &store), "a label");
        assert!(!seen.unchanged(&node("b", "Unknown", "2026-12-03T10:00:20Z"), &store), "readiness");
        writer.apply_watcher_event(&watcher::Event::Delete(first));
        assert!(!seen.unchanged(&node("b", "Unknown", "2026-12-03T10:00:20Z"), &store), "a deleted node");
    }
}
