//! The taints the node lifecycle controller keeps on nodes (`doNoScheduleTaintingPass`,
//! `processTaintBaseEviction`): NoSchedule taints mirroring the node's conditions and
//! `spec.unschedulable` (`TaintNodesByCondition`), and the NoExecute `not-ready` or
//! `unreachable` taint — never both — that the taint eviction controller evicts pods by.
//! A taint of the same key with another effect, or any other key, is the user's and stays.

use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// A node whose Ready condition is `False`.
pub(crate) const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// A node whose Ready condition is `Unknown` (it stopped posting).
pub(crate) const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// `nodeConditionToTaintKeyStatusMap`: a condition in a status → its NoSchedule taint.
const CONDITION_TAINTS: [(&str, &str, &str); 6] = [
    ("Ready", "False", NOT_READY),
    ("Ready", "Unknown", UNREACHABLE),
    ("MemoryPressure", "True", "node.kubernetes.io/memory-pressure"),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("NetworkUnavailable", "True", "node.kubernetes.io/network-unavailable"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
];

/// The node's taints.
pub(crate) fn of(node: &Node) -> &[Taint] {
    node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or_default()
}

/// `taints` with, among the `managed` keys of `effect`, exactly the `wanted` ones: the
/// others of those removed, the missing ones appended stamped `wall` (upstream
/// `SwapNodeControllerTaint`); every other taint kept in its place.
fn set_managed(taints: &[Taint], effect: &str, managed: &[&str], wanted: &[&str], wall: Timestamp) -> Vec<Taint> {
    let mut out: Vec<Taint> = taints
        .iter()
        .filter(|t| t.effect != effect || !managed.contains(&t.key.as_str()) || wanted.contains(&t.key.as_str()))
        .cloned()
        .collect();
    for key in wanted {
        if !out.iter().any(|t| t.effect == effect && t.key == *key) {
            out.push(Taint {
                key: (*key).to_owned(),
                effect: effect.to_owned(),
                time_added: Some(Time(wall)),
                value: None,
            });
        }
    }
    out
}

/// The node's taints with its NoSchedule condition taints as its conditions (and
/// `spec.unschedulable`) say.
pub(crate) fn with_condition_taints(node: &Node, taints: &[Taint], wall: Timestamp) -> Vec<Taint> {
    let conditions: &[NodeCondition] = node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    let mut wanted: Vec<&str> = CONDITION_TAINTS
        .iter()
        .filter(|(kind, status, _)| conditions.iter().any(|c| c.type_ == *kind && c.status == *status))
        .map(|(_, _, key)| *key)
        .collect();
    if node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false) {
        wanted.push(UNSCHEDULABLE);
    }
    let mut managed: Vec<&str> = CONDITION_TAINTS.iter().map(|(_, _, key)| *key).collect();
    managed.push(UNSCHEDULABLE);
    set_managed(taints, "NoSchedule", &managed, &wanted, wall)
}

/// The node's taints with only `key` (or none) of the NoExecute lifecycle taints.
pub(crate) fn with_no_execute(taints: &[Taint], key: Option<&str>, wall: Timestamp) -> Vec<Taint> {
    set_managed(taints, "NoExecute", &[NOT_READY, UNREACHABLE], key.as_slice(), wall)
}

/// What a node's observed Ready status asks of its NoExecute taints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoExecute {
    /// Ready: neither taint, at once (`markNodeAsReachable`).
    Clear,
    /// The other taint is on: swapped at once, no eviction budget spent.
    Swap(&'static str),
    /// Neither is on: this one, when the zone's eviction rate allows (`markNodeForTainting`).
    Queue(&'static str),
    /// As it should be.
    Keep,
}

/// `processTaintBaseEviction` for a node whose object says Ready is `observed`.
pub(crate) fn no_execute(observed: &str, taints: &[Taint]) -> NoExecute {
    let has = |key: &str| taints.iter().any(|t| t.effect == "NoExecute" && t.key == key);
    let (wanted, other) = match observed {
        "True" => return if has(NOT_READY) || has(UNREACHABLE) { NoExecute::Clear } else { NoExecute::Keep },
        "False" => (NOT_READY, UNREACHABLE),
        _ => (UNREACHABLE, NOT_READY),
    };
    match (has(wanted), has(other)) {
        (_, true) => NoExecute::Swap(wanted),
        (true, false) => NoExecute::Keep,
        (false, false) => NoExecute::Queue(wanted),
    }
}

/// The NoExecute taint a node's Ready status calls for (`None` when Ready).
pub(crate) fn no_execute_key(ready: &str) -> Option<&'static str> {
    match ready {
        "True" => None,
        "False" => Some(NOT_READY),
        _ => Some(UNREACHABLE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};

    fn taint(key: &str, effect: &str) -> Taint {
        Taint { key: key.into(), effect: effect.into(), ..Default::default() }
    }

    fn keys(taints: &[Taint]) -> Vec<String> {
        taints.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect()
    }

    fn node(conditions: &[(&str, &str)], unschedulable: bool) -> Node {
        let conditions = conditions
            .iter()
            .map(|(kind, status)| NodeCondition {
                type_: (*kind).into(),
                status: (*status).into(),
                ..Default::default()
            })
            .collect();
        Node {
            spec: Some(NodeSpec { unschedulable: Some(unschedulable), ..Default::default() }),
            status: Some(NodeStatus { conditions: Some(conditions), ..Default::default() }),
            ..Default::default()
        }
    }

    #[test]
    fn no_schedule_taints_mirror_the_conditions_and_leave_the_users_alone() {
        let wall = Timestamp::UNIX_EPOCH;
        let users = [taint("dedicated", "NoSchedule"), taint(NOT_READY, "NoExecute"), taint(UNREACHABLE, "NoSchedule")];
        let n = node(&[("Ready", "False"), ("MemoryPressure", "True"), ("DiskPressure", "False")], true);
        let out = with_condition_taints(&n, &users, wall);
        assert_eq!(
            keys(&out),
            [
                "dedicated:NoSchedule",
                "node.kubernetes.io/not-ready:NoExecute",
                "node.kubernetes.io/not-ready:NoSchedule",
                "node.kubernetes.io/memory-pressure:NoSchedule",
                "node.kubernetes.io/unschedulable:NoSchedule",
            ]
        );
        assert!(out[2..].iter().all(|t| t.time_added == Some(Time(wall))), "added taints carry their time");
        // Ready again: the condition taints go, the user's and the NoExecute one stay
        // (NoExecute is the eviction pass's).
        let ready = node(&[("Ready", "True")], false);
        assert_eq!(
            keys(&with_condition_taints(&ready, &out, wall)),
            ["dedicated:NoSchedule", "node.kubernetes.io/not-ready:NoExecute"]
        );
        // Already as it should be: the same list, nothing to write.
        assert_eq!(with_condition_taints(&n, &out, wall), out);
    }

    #[test]
    fn no_execute_taints_are_exclusive_swapped_at_once_and_queued_when_new() {
        let none: [Taint; 0] = [];
        assert_eq!(no_execute("Unknown", &none), NoExecute::Queue(UNREACHABLE));
        assert_eq!(no_execute("False", &none), NoExecute::Queue(NOT_READY));
        assert_eq!(no_execute("True", &none), NoExecute::Keep);
        let unreachable = [taint(UNREACHABLE, "NoExecute")];
        assert_eq!(no_execute("Unknown", &unreachable), NoExecute::Keep);
        assert_eq!(no_execute("False", &unreachable), NoExecute::Swap(NOT_READY));
        assert_eq!(no_execute("True", &unreachable), NoExecute::Clear);
        // A NoSchedule taint of the same key is no NoExecute one.
        assert_eq!(no_execute("Unknown", &[taint(UNREACHABLE, "NoSchedule")]), NoExecute::Queue(UNREACHABLE));
        let swapped = with_no_execute(&unreachable, Some(NOT_READY), Timestamp::UNIX_EPOCH);
        assert_eq!(keys(&swapped), ["node.kubernetes.io/not-ready:NoExecute"]);
        assert!(with_no_execute(&swapped, None, Timestamp::UNIX_EPOCH).is_empty());
    }
}
