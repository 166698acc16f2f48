//! The pod garbage collector (`pkg/controller/podgc` `PodGCController.gc`), every
//! [`PERIOD`] from the manager's caches of pods and nodes:
//!
//! - `gcTerminated`: past `--terminated-pod-gc-threshold` finished pods, the oldest go;
//! - `gcOrphaned`: a pod bound to a node that has been missing for [`QUARANTINE`] (and a
//!   GET confirms is gone) is marked `Failed` with the `DisruptionTarget` condition
//!   (`DeletionByPodGC`, "PodGC: node no longer exists") and force-deleted — nothing would
//!   ever stop its containers or confirm its deletion;
//! - `gcUnscheduledTerminating`: a pod being deleted that no node ever took is
//!   force-deleted.
//!
//! The API server never removes a gracefully deleted pod itself: its node does, once its
//! containers stopped, or this collector, when the node is gone. Writes are the
//! controller's own (`system:serviceaccount:kube-system:pod-garbage-collector`).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::credentials::Credentials;
use crate::sync_error::SyncError;

/// The controller's name (`--controllers`).
pub const NAME: &str = "pod-garbage-collector-controller";
/// Its service account (upstream's, `system:controller:pod-garbage-collector`).
pub const ACCOUNT: &str = "pod-garbage-collector";
/// How often it looks (`gcCheckPeriod`).
const PERIOD: Duration = Duration::from_secs(20);
/// How long a node must have been missing before its pods are collected
/// (`quarantineTime`): a node re-registering is not taken for a dead one.
pub(crate) const QUARANTINE: Duration = Duration::from_secs(40);
/// `--terminated-pod-gc-threshold`'s default.
const TERMINATED_THRESHOLD: usize = 12_500;
/// The condition's reason and message (upstream `DeletionByPodGC`).
const REASON: &str = "DeletionByPodGC";
const MESSAGE: &str = "PodGC: node no longer exists";

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default()
}

fn node_of(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default()
}

fn terminated(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// What one pass does, decided from the caches ([`plan`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Finished pods past the threshold, oldest first.
    pub terminated: Vec<(String, String)>,
    /// Pods of nodes missing for the quarantine (each node still to be confirmed gone).
    pub orphaned: Vec<(String, String, String)>,
    /// Pods being deleted that no node took.
    pub unscheduled: Vec<(String, String)>,
}

/// `gc`'s decisions: `missing_since` remembers when each node was first seen missing
/// (nodes seen again are forgotten), `now` is this pass's time.
pub(crate) fn plan(
    pods: &[&Pod],
    nodes: &HashSet<String>,
    missing_since: &mut HashMap<String, Instant>,
    threshold: usize,
    now: Instant,
) -> Plan {
    let key = |p: &Pod| (p.namespace().unwrap_or_default(), p.name_any());
    let mut plan = Plan::default();
    // gcTerminated: evicted first, then by creation (byEvictionAndCreationTimestamp).
    let mut finished: Vec<&Pod> = pods.iter().copied().filter(|p| terminated(p)).collect();
    if finished.len() > threshold {
        let evicted = |p: &Pod| p.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("Evicted");
        finished.sort_by(|a, b| {
            evicted(b)
                .cmp(&evicted(a))
                .then_with(|| a.metadata.creation_timestamp.cmp(&b.metadata.creation_timestamp))
                .then_with(|| key(a).cmp(&key(b)))
        });
        plan.terminated = finished[..finished.len() - threshold].iter().map(|p| key(p)).collect();
    }
    // gcOrphaned.
    let mut missing_now = HashSet::new();
    for pod in pods {
        let node = node_of(pod);
        if node.is_empty() || nodes.contains(node) {
            continue;
        }
        missing_now.insert(node.to_owned());
        let since = *missing_since.entry(node.to_owned()).or_insert(now);
        if now.duration_since(since) >= QUARANTINE {
            let (ns, name) = key(pod);
            plan.orphaned.push((ns, name, node.to_owned()));
        }
    }
    missing_since.retain(|node, _| missing_now.contains(node));
    // gcUnscheduledTerminating.
    plan.unscheduled = pods
        .iter()
        .filter(|p| node_of(p).is_empty() && p.metadata.deletion_timestamp.is_some())
        .map(|p| key(p))
        .collect();
    plan
}

/// Runs the collector until the task is dropped.
pub async fn run(credentials: Credentials) {
    let root = credentials.root();
    let (pods, fill_pods) = crate::cache::cached(Api::<Pod>::all(root.clone()));
    let (nodes, fill_nodes) = crate::cache::cached(Api::<Node>::all(root));
    let drive = futures::future::join(fill_pods, fill_nodes);
    tokio::join!(drive, collect(credentials, pods, nodes));
}

async fn collect(credentials: Credentials, pods: Store<Pod>, nodes: Store<Node>) {
    if pods.wait_until_ready().await.is_err() || nodes.wait_until_ready().await.is_err() {
        return;
    }
    let mut missing_since = HashMap::new();
    let mut ticks = tokio::time::interval(PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let span = tracing::info_span!("reconcile", controller = NAME);
        let pass = gc(&credentials, &pods, &nodes, &mut missing_since);
        if let Err(e) = tracing::Instrument::instrument(pass, span).await {
            tracing::warn!(error = %e, "pod GC pass failed; trying again next period");
        }
    }
}

async fn gc(
    credentials: &Credentials,
    pods: &Store<Pod>,
    nodes: &Store<Node>,
    missing_since: &mut HashMap<String, Instant>,
) -> Result<(), SyncError> {
    let all = pods.state();
    let listed: Vec<&Pod> = all.iter().map(AsRef::as_ref).collect();
    let node_names: HashSet<String> = nodes.state().iter().map(|n| n.name_any()).collect();
    let plan = plan(&listed, &node_names, missing_since, TERMINATED_THRESHOLD, Instant::now());
    if plan.terminated.is_empty() && plan.orphaned.is_empty() && plan.unscheduled.is_empty() {
        return Ok(());
    }
    let client = credentials.client(ACCOUNT).await?;
    let uid_of = |ns: &str, name: &str| {
        all.iter().find(|p| p.namespace().as_deref() == Some(ns) && p.name_any() == name).and_then(|p| p.uid())
    };
    for (ns, name) in &plan.terminated {
        force_delete(&client, ns, name, uid_of(ns, name), "terminated pods over the threshold").await?;
    }
    let mut gone: HashMap<String, bool> = HashMap::new();
    for (ns, name, node) in &plan.orphaned {
        // Confirmed by a GET: the cache may lag a node that registered again.
        let confirmed = match gone.get(node) {
            Some(g) => *g,
            None => {
                let g = Api::<Node>::all(client.clone()).get_opt(node).await?.is_none();
                gone.insert(node.clone(), g);
                g
            }
        };
        if !confirmed {
            continue;
        }
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let pod = all.iter().find(|p| p.namespace().as_deref() == Some(ns.as_str()) && &p.name_any() == name);
        if pod.is_some_and(|p| !terminated(p)) {
            // markFailedAndDeletePod: the reason it stopped, on the pod, first.
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let status = json!({"status": {
                "phase": "Failed",
                "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": REASON,
                                "message": MESSAGE, "lastTransitionTime": now}]}});
            match api.patch_status(name, &PatchParams::default(), &Patch::Strategic(status)).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => continue,
                Err(e) => return Err(e.into()),
            }
        }
        force_delete(&client, ns, name, uid_of(ns, name), "its node no longer exists").await?;
    }
    for (ns, name) in &plan.unscheduled {
        force_delete(&client, ns, name, uid_of(ns, name), "being deleted and never scheduled").await?;
    }
    Ok(())
}

/// A DELETE with no grace (upstream's `forceDelete`), of that pod only (its UID).
async fn force_delete(
    client: &kube::Client,
    ns: &str,
    name: &str,
    uid: Option<String>,
    why: &str,
) -> Result<(), SyncError> {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions { uid, resource_version: None }),
        ..DeleteParams::default()
    };
    match Api::<Pod>::namespaced(client.clone(), ns).delete(name, &params).await {
        Ok(_) => {
            tracing::info!(pod = %format!("{ns}/{name}"), "pod GC: deleted: {why}");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn pod(name: &str, node: &str, phase: &str, created: i64) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("team".into()),
                creation_timestamp: Some(Time(
                    k8s_openapi::jiff::Timestamp::from_second(created)
                        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                )),
                ..Default::default()
            },
            spec: Some(PodSpec { node_name: (!node.is_empty()).then(|| node.into()), ..Default::default() }),
            status: Some(PodStatus { phase: Some(phase.into()), ..Default::default() }),
        }
    }

    fn names(keys: &[(String, String)]) -> Vec<&str> {
        keys.iter().map(|(_, n)| n.as_str()).collect()
    }

    #[test]
    fn finished_pods_past_the_threshold_go_evicted_then_oldest_first() {
        let mut evicted = pod("evicted", "n1", "Failed", 300);
        evicted.status.get_or_insert_default().reason = Some("Evicted".into());
        let (old, new, running) =
            (pod("old", "n1", "Succeeded", 100), pod("new", "n1", "Succeeded", 200), pod("up", "n1", "Running", 1));
        let pods = [&new, &running, &evicted, &old];
        let nodes = HashSet::from(["n1".to_owned()]);
        let plan = plan(&pods, &nodes, &mut HashMap::new(), 1, Instant::now());
        assert_eq!(names(&plan.terminated), ["evicted", "old"]);
        assert!(plan.orphaned.is_empty() && plan.unscheduled.is_empty());
        let under = super::plan(&pods, &nodes, &mut HashMap::new(), 3, Instant::now());
        assert!(under.terminated.is_empty(), "at the threshold nothing goes");
    }

    #[test]
    fn pods_of_a_missing_node_are_collected_only_after_the_quarantine() {
        let orphan = pod("orphan", "gone", "Running", 1);
        let mut missing = HashMap::new();
        let start = Instant::now();
        let pods = [&orphan];
        let none = HashSet::new();
        assert!(plan(&pods, &none, &mut missing, TERMINATED_THRESHOLD, start).orphaned.is_empty(), "first seen");
        let later = start + QUARANTINE;
        let due = plan(&pods, &none, &mut missing, TERMINATED_THRESHOLD, later);
        assert_eq!(due.orphaned, [("team".to_owned(), "orphan".to_owned(), "gone".to_owned())]);
        // The node came back: forgotten, and a later absence starts the quarantine anew.
        let back = HashSet::from(["gone".to_owned()]);
        assert!(plan(&pods, &back, &mut missing, TERMINATED_THRESHOLD, later).orphaned.is_empty());
        assert!(missing.is_empty());
        assert!(plan(&pods, &none, &mut missing, TERMINATED_THRESHOLD, later).orphaned.is_empty());
    }

    #[test]
    fn a_deleted_pod_no_node_took_is_collected() {
        let mut deleting = pod("deleting", "", "Pending", 1);
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let pending = pod("pending", "", "Pending", 1);
        let plan =
            plan(&[&deleting, &pending], &HashSet::new(), &mut HashMap::new(), TERMINATED_THRESHOLD, Instant::now());
        assert_eq!(names(&plan.unscheduled), ["deleting"]);
        assert!(plan.orphaned.is_empty(), "a pod on no node is no orphan");
    }
}
