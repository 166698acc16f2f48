//! What the ReplicaSet controller decides, as pure functions of the ReplicaSet, the pods of
//! its namespace and the clock (upstream `replica_set.go` `syncReplicaSet`,
//! `controller_ref_manager.go` `ClaimPods`, `controller_utils.go` `ActivePodsWithRanks`,
//! `replica_set_utils.go` `calculateStatus`); `super` executes the plan.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;

use crate::claim::Claim;

/// `burstReplicas`: at most this many pods created or deleted in one sync.
pub(crate) const BURST_REPLICAS: usize = 500;
/// The annotation that orders deletions (lower cost deleted first).
pub(crate) const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// `FilterActivePods`: not Succeeded or Failed, and not being deleted.
pub(crate) fn is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default();
    phase != "Succeeded" && phase != "Failed" && pod.metadata.deletion_timestamp.is_none()
}

fn labels(pod: &Pod) -> BTreeMap<String, String> {
    pod.metadata.labels.clone().unwrap_or_default()
}

/// `ClaimPods` for `rs` (UID `uid`) over `pods` (its namespace's): active orphans are
/// adopted, and none while the ReplicaSet is being deleted.
pub(crate) fn claim<'a>(rs: &ReplicaSet, uid: &str, pods: &'a [Pod]) -> Claim<'a, Pod> {
    let selector = rs.spec.as_ref().map(|s| s.selector.clone()).unwrap_or_default();
    let deleting = rs.metadata.deletion_timestamp.is_some();
    crate::claim::claim(uid, &selector, deleting, pods, |p| &p.metadata, is_active)
}

/// What `manageReplicas` does: create this many pods, or delete these.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Scale {
    /// As many active pods as asked.
    Keep,
    /// Create this many (at most [`BURST_REPLICAS`]).
    Create(usize),
    /// Delete these pods (names), the first to go first.
    Delete(Vec<String>),
}

/// The diff between the active pods and `spec.replicas`, and which pods go when there
/// are too many.
pub(crate) fn scale(replicas: i32, active: &[&Pod], now: jiff::Timestamp) -> Scale {
    let want = usize::try_from(replicas.max(0)).unwrap_or(0);
    match active.len().cmp(&want) {
        Ordering::Equal => Scale::Keep,
        Ordering::Less => Scale::Create((want - active.len()).min(BURST_REPLICAS)),
        Ordering::Greater => {
            let mut ranked: Vec<&Pod> = active.to_vec();
            ranked.sort_by(|a, b| delete_first(a, b, now));
            let n = (active.len() - want).min(BURST_REPLICAS);
            Scale::Delete(ranked.into_iter().take(n).filter_map(|p| p.metadata.name.clone()).collect())
        }
    }
}

/// The batches `slowStartBatch` creates `count` pods in: 1, 2, 4, … until all are asked.
pub(crate) fn slow_start_batches(count: usize) -> Vec<usize> {
    let mut batches = Vec::new();
    let (mut left, mut size) = (count, 1usize);
    while left > 0 {
        let batch = size.min(left);
        batches.push(batch);
        left -= batch;
        size = size.saturating_mul(2);
    }
    batches
}

fn phase_rank(pod: &Pod) -> u8 {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") | None => 0,
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 3,
    }
}

/// `IsPodAvailable`: Ready, for at least `min_ready` seconds.
pub(crate) fn is_available(pod: &Pod, min_ready: i64, now: jiff::Timestamp) -> bool {
    ready_since(pod).is_some_and(|since| now.as_second() - since.as_second() >= min_ready)
}

/// When the pod turned Ready (`None`: it is not).
pub(crate) fn ready_since(pod: &Pod) -> Option<jiff::Timestamp> {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref())?;
    let ready = conditions.iter().find(|c| c.type_ == "Ready" && c.status == "True")?;
    Some(ready.last_transition_time.as_ref().map_or(jiff::Timestamp::UNIX_EPOCH, |t| t.0))
}

fn restarts(pod: &Pod) -> i32 {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    statuses.into_iter().flatten().map(|c| c.restart_count).max().unwrap_or(0)
}

fn deletion_cost(pod: &Pod) -> i64 {
    let annotations = pod.metadata.annotations.as_ref();
    annotations.and_then(|a| a.get(DELETION_COST)).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// Seconds since `t`, in log2 buckets (LogarithmicScaleDown): pods of about the same age
/// compare equal, so the UID decides among them.
fn age_bucket(t: Option<jiff::Timestamp>, now: jiff::Timestamp) -> i64 {
    let Some(t) = t else { return i64::MAX };
    let seconds = (now.as_second() - t.as_second()).max(0);
    if seconds == 0 { 0 } else { i64::from(64 - seconds.leading_zeros()) }
}

/// `ActivePodsWithRanks.Less`: the pod that goes first. Unassigned before assigned;
/// Pending before Unknown before Running; not ready before ready; lower deletion cost;
/// ready more recently; more restarts; newer; then by UID.
pub(crate) fn delete_first(a: &Pod, b: &Pod, now: jiff::Timestamp) -> Ordering {
    let assigned = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    assigned(a)
        .cmp(&assigned(b))
        .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
        .then_with(|| ready_since(a).is_some().cmp(&ready_since(b).is_some()))
        .then_with(|| deletion_cost(a).cmp(&deletion_cost(b)))
        // Ready more recently (a smaller age) goes first.
        .then_with(|| age_bucket(ready_since(a), now).cmp(&age_bucket(ready_since(b), now)))
        .then_with(|| restarts(b).cmp(&restarts(a)))
        .then_with(|| age_bucket(created(a), now).cmp(&age_bucket(created(b), now)))
        .then_with(|| a.metadata.uid.cmp(&b.metadata.uid))
}

/// `calculateStatus`: the counts of the ReplicaSet's active pods, and the
/// `ReplicaFailure` condition when a create or delete failed (kept from `previous` until
/// the failure clears).
pub(crate) fn status(
    rs: &ReplicaSet,
    active: &[&Pod],
    failure: Option<(&str, &str)>,
    previous: Option<&ReplicaSetStatus>,
    now: jiff::Timestamp,
) -> ReplicaSetStatus {
    let spec = rs.spec.clone().unwrap_or_default();
    let template = spec.template.and_then(|t| t.metadata).and_then(|m| m.labels).unwrap_or_default();
    let min_ready = i64::from(spec.min_ready_seconds.unwrap_or(0));
    let count = |f: &dyn Fn(&Pod) -> bool| i32::try_from(active.iter().filter(|p| f(p)).count()).unwrap_or(i32::MAX);
    let fully_labeled = count(&|p| template.iter().all(|(k, v)| labels(p).get(k) == Some(v)));
    let ready = count(&|p| ready_since(p).is_some());
    let available = count(&|p| is_available(p, min_ready, now));
    let mut conditions: Vec<_> = previous.and_then(|p| p.conditions.clone()).unwrap_or_default();
    let was = conditions.iter().find(|c| c.type_ == "ReplicaFailure" && c.status == "True").cloned();
    conditions.retain(|c| c.type_ != "ReplicaFailure");
    if let Some((reason, message)) = failure {
        // SetCondition: the transition time moves only when the condition's status does.
        let since = was.and_then(|c| c.last_transition_time);
        conditions.push(k8s_openapi::api::apps::v1::ReplicaSetCondition {
            type_: "ReplicaFailure".into(),
            status: "True".into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_transition_time: Some(since.unwrap_or(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now))),
        });
    }
    ReplicaSetStatus {
        replicas: i32::try_from(active.len()).unwrap_or(i32::MAX),
        fully_labeled_replicas: Some(fully_labeled),
        ready_replicas: Some(ready),
        available_replicas: Some(available),
        observed_generation: rs.metadata.generation,
        conditions: (!conditions.is_empty()).then_some(conditions),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap_or_default()
    }

    fn rs() -> ReplicaSet {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "web", "uid": "rs-1", "generation": 2},
            "spec": {"replicas": 2, "minReadySeconds": 10, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web", "tier": "front"}}, "spec": {"containers": []}}}}))
        .unwrap_or_default()
    }

    fn owned_by(uid: &str) -> serde_json::Value {
        serde_json::json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": uid, "controller": true}])
    }

    #[test]
    fn pods_are_claimed_adopted_and_released_as_claim_pods_does() {
        let pods = [
            pod(
                serde_json::json!({"metadata": {"name": "mine", "labels": {"app": "web"}, "ownerReferences": owned_by("rs-1")}}),
            ),
            pod(serde_json::json!({"metadata": {"name": "orphan", "labels": {"app": "web"}}})),
            pod(
                serde_json::json!({"metadata": {"name": "relabelled", "labels": {"app": "db"}, "ownerReferences": owned_by("rs-1")}}),
            ),
            pod(
                serde_json::json!({"metadata": {"name": "theirs", "labels": {"app": "web"}, "ownerReferences": owned_by("rs-2")}}),
            ),
            pod(
                serde_json::json!({"metadata": {"name": "done", "labels": {"app": "web"}}, "status": {"phase": "Succeeded"}}),
            ),
        ];
        let c = claim(&rs(), "rs-1", &pods);
        let names = |v: &[&Pod]| v.iter().filter_map(|p| p.metadata.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&c.owned), ["mine"]);
        assert_eq!(names(&c.adopt), ["orphan"], "a finished orphan is not adopted");
        assert_eq!(names(&c.release), ["relabelled"]);
    }

    #[test]
    fn scaling_down_deletes_unassigned_pending_and_unready_pods_first() {
        let now = jiff::Timestamp::now();
        let t = |s: i64| jiff::Timestamp::from_second(now.as_second() - s).unwrap_or(now).to_string();
        let ready = |since: &str| serde_json::json!([{"type": "Ready", "status": "True", "lastTransitionTime": since}]);
        let pods = [
            pod(serde_json::json!({"metadata": {"name": "running-old", "uid": "a", "creationTimestamp": t(4000)},
                "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Running", "conditions": ready(&t(3000))}})),
            pod(serde_json::json!({"metadata": {"name": "unassigned", "uid": "b", "creationTimestamp": t(10)},
                "spec": {"containers": []}, "status": {"phase": "Pending"}})),
            pod(serde_json::json!({"metadata": {"name": "running-new", "uid": "c", "creationTimestamp": t(100)},
                "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Running", "conditions": ready(&t(50))}})),
            pod(serde_json::json!({"metadata": {"name": "costly", "uid": "d", "creationTimestamp": t(100),
                "annotations": {DELETION_COST: "100"}},
                "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Running", "conditions": ready(&t(50))}})),
        ];
        let active: Vec<&Pod> = pods.iter().collect();
        assert_eq!(scale(4, &active, now), Scale::Keep);
        assert_eq!(scale(6, &active, now), Scale::Create(2));
        assert_eq!(
            scale(1, &active, now),
            Scale::Delete(vec!["unassigned".into(), "running-new".into(), "running-old".into()])
        );
        assert_eq!(
            scale(0, &active, now),
            Scale::Delete(vec!["unassigned".into(), "running-new".into(), "running-old".into(), "costly".into()])
        );
        assert_eq!(scale(1_000, &[], now), Scale::Create(BURST_REPLICAS));
    }

    #[test]
    fn creations_start_slowly_and_double() {
        assert_eq!(slow_start_batches(0), Vec::<usize>::new());
        assert_eq!(slow_start_batches(1), [1]);
        assert_eq!(slow_start_batches(10), [1, 2, 4, 3]);
    }

    #[test]
    fn status_counts_ready_and_available_pods_after_min_ready_seconds() {
        let now = jiff::Timestamp::now();
        let since = |s: i64| jiff::Timestamp::from_second(now.as_second() - s).unwrap_or(now).to_string();
        let ready = |s: i64| serde_json::json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": since(s)}]});
        let pods = [
            pod(
                serde_json::json!({"metadata": {"name": "a", "labels": {"app": "web", "tier": "front"}}, "status": ready(60)}),
            ),
            pod(serde_json::json!({"metadata": {"name": "b", "labels": {"app": "web"}}, "status": ready(2)})),
        ];
        let active: Vec<&Pod> = pods.iter().collect();
        let s = status(&rs(), &active, Some(("FailedCreate", "pods \"x\" is forbidden: exceeded quota")), None, now);
        assert_eq!(s.replicas, 2);
        assert_eq!(s.fully_labeled_replicas, Some(1));
        assert_eq!(s.ready_replicas, Some(2));
        assert_eq!(s.available_replicas, Some(1), "b has not been ready for minReadySeconds");
        assert_eq!(s.observed_generation, Some(2));
        let failure = s.conditions.as_ref().and_then(|c| c.first()).map(|c| (c.type_.clone(), c.reason.clone()));
        assert_eq!(failure, Some(("ReplicaFailure".into(), Some("FailedCreate".into()))));
        let later = jiff::Timestamp::from_second(now.as_second() + 60).unwrap_or(now);
        let again =
            status(&rs(), &active, Some(("FailedCreate", "pods \"x\" is forbidden: exceeded quota")), Some(&s), later);
        assert_eq!(again.conditions, s.conditions, "a failure that goes on keeps its transition time");
        let cleared = status(&rs(), &active, None, Some(&s), now);
        assert_eq!(cleared.conditions, None, "the failure clears once creates succeed");
    }
}
