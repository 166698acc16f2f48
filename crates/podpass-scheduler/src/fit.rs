//! Whether a pod fits a node: kube-scheduler's filter plugins that concern a node without
//! resource accounting beyond the pod count — NodeUnschedulable, TaintToleration (with the
//! node lifecycle controller's not-ready/unreachable taints), NodeAffinity (nodeSelector
//! and required node affinity) and NodeResourcesFit's `pods` — each answering upstream's
//! reason, and the FitError message built from them.

use std::collections::BTreeMap;

use serde_json::Value;

use podpass_api::field::Field;

/// `node.kubernetes.io/unschedulable`, the taint `spec.unschedulable` stands for.
const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";
/// The node lifecycle controller's taint for a node whose Ready condition is not True.
pub(super) const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// ... and for a node that stopped renewing its lease.
pub(super) const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// What the scheduler knows of a node beyond its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct NodeState {
    /// Pods bound to it that still hold their place (not Succeeded or Failed).
    pub pods: usize,
    /// Their cpu requests, in millicores.
    pub cpu: i128,
    /// Their memory requests, in thousandths of a byte.
    pub memory: i128,
    /// Their cpu requests as scoring counts them ([`crate::score::non_zero_request`]).
    pub nz_cpu: i128,
    /// Their memory requests as scoring counts them.
    pub nz_memory: i128,
    /// Its lease was renewed within the grace period.
    pub reachable: bool,
}

/// A pod's request of `resource` in milli-units, as the scheduler counts it
/// (`PodRequests`): the containers' sum, at least the largest init container's; a
/// container without a request counts its limit (API defaulting), else nothing.
pub(super) fn pod_request(pod: &Value, resource: &str) -> i128 {
    pod_request_or(pod, resource, 0)
}

/// [`pod_request`] with a container that states neither request nor limit counting
/// `default` (scoring's `NonZeroRequested`).
pub(super) fn pod_request_or(pod: &Value, resource: &str, default: i128) -> i128 {
    let amount = |c: &Value| -> i128 {
        let get = |kind: &str| {
            c.field(&format!("/resources/{kind}/{resource}"))
                .and_then(Value::as_str)
                .and_then(|q| podpass_api::quantity::parse_milli(q).ok())
        };
        get("requests").or_else(|| get("limits")).unwrap_or(default)
    };
    let list = |name: &str| pod.field(&format!("/spec/{name}")).and_then(Value::as_array).cloned().unwrap_or_default();
    let sum: i128 = list("containers").iter().map(amount).sum();
    let init = list("initContainers").iter().map(amount).max().unwrap_or(0);
    sum.max(init)
}

/// A node's allocatable `resource` in milli-units (none stated: none).
pub(super) fn allocatable(node: &Value, resource: &str) -> i128 {
    node.field(&format!("/status/allocatable/{resource}"))
        .and_then(Value::as_str)
        .and_then(|q| podpass_api::quantity::parse_milli(q).ok())
        .unwrap_or(0)
}

fn text<'a>(object: &'a Value, path: &str) -> &'a str {
    object.field(path).and_then(Value::as_str).unwrap_or_default()
}

/// Whether one of `pod`'s tolerations tolerates the taint (TaintToleration's
/// `ToleratesTaint`, [`podpass_api::taint`]).
fn tolerated(pod: &Value, key: &str, value: &str, effect: &str) -> bool {
    use podpass_api::taint::{Taint, Toleration};
    let taint = Taint { key, value, effect };
    let tolerations = pod.field("/spec/tolerations").and_then(Value::as_array);
    tolerations.into_iter().flatten().any(|t| {
        let toleration = Toleration {
            key: text(t, "/key"),
            operator: text(t, "/operator"),
            value: text(t, "/value"),
            effect: text(t, "/effect"),
        };
        toleration.tolerates(&taint)
    })
}

/// The node lifecycle controller's NoSchedule taints for the node's conditions
/// (`TaintNodesByCondition`: a condition `True` → its taint).
const CONDITION_TAINTS: [(&str, &str); 3] = [
    ("MemoryPressure", "node.kubernetes.io/memory-pressure"),
    ("DiskPressure", "node.kubernetes.io/disk-pressure"),
    ("PIDPressure", "node.kubernetes.io/pid-pressure"),
];

/// The taints that keep pods off `node`: its own NoSchedule and NoExecute ones, and the
/// lifecycle controller's for a node not Ready or not reachable, or under pressure.
fn taints(node: &Value, state: NodeState) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = Vec::new();
    for taint in node.field("/spec/taints").and_then(Value::as_array).into_iter().flatten() {
        let effect = text(taint, "/effect");
        if matches!(effect, "NoSchedule" | "NoExecute") {
            out.push((text(taint, "/key").to_owned(), text(taint, "/value").to_owned(), effect.to_owned()));
        }
    }
    let conditions = node.field("/status/conditions").and_then(Value::as_array);
    let ready = conditions.into_iter().flatten().any(|c| text(c, "/type") == "Ready" && text(c, "/status") == "True");
    let lifecycle = if !state.reachable {
        Some(UNREACHABLE_TAINT)
    } else if !ready {
        Some(NOT_READY_TAINT)
    } else {
        None
    };
    let pressured = CONDITION_TAINTS.iter().filter_map(|(condition, taint)| {
        conditions
            .into_iter()
            .flatten()
            .any(|c| text(c, "/type") == *condition && text(c, "/status") == "True")
            .then_some(*taint)
    });
    for key in lifecycle.into_iter().chain(pressured) {
        if !out.iter().any(|(k, _, _)| k == key) {
            out.push((key.to_owned(), String::new(), "NoSchedule".to_owned()));
        }
    }
    out
}

pub(super) use podpass_api::node_affinity::term_matches;

/// NodeAffinity's filter: `nodeSelector` and the required node affinity's terms (any).
fn affinity_matches(pod: &Value, node: &Value) -> bool {
    pod.field("/spec").is_none_or(|spec| podpass_api::node_affinity::required_matches(spec, node))
}

/// The `pods` a node holds (`status.allocatable.pods`; none stated is none, as upstream).
fn allocatable_pods(node: &Value) -> usize {
    match node.field("/status/allocatable/pods") {
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        Some(Value::Number(n)) => n.as_u64().and_then(|n| usize::try_from(n).ok()).unwrap_or(0),
        _ => 0,
    }
}

/// Why `pod` does not fit `node` (the first failing filter's reason, in kube-scheduler's
/// plugin order), or `None` when it fits.
pub(super) fn unfit(pod: &Value, node: &Value, state: NodeState) -> Option<String> {
    if node.field("/spec/unschedulable").and_then(Value::as_bool) == Some(true)
        && !tolerated(pod, UNSCHEDULABLE_TAINT, "", "NoSchedule")
    {
        return Some("node(s) were unschedulable".into());
    }
    for (key, value, effect) in taints(node, state) {
        if !tolerated(pod, &key, &value, &effect) {
            return Some(format!("node(s) had untolerated taint {{{key}: {value}}}"));
        }
    }
    if !affinity_matches(pod, node) {
        return Some("node(s) didn't match Pod's node affinity/selector".into());
    }
    // NodeResourcesFit, in its order: pods, then each requested resource.
    if state.pods + 1 > allocatable_pods(node) {
        return Some("Too many pods".into());
    }
    for (resource, used) in [("cpu", state.cpu), ("memory", state.memory)] {
        let asked = pod_request(pod, resource);
        if asked > 0 && asked > allocatable(node, resource) - used {
            return Some(format!("Insufficient {resource}"));
        }
    }
    None
}

/// `FitError.Error()` for `nodes` nodes that each refused for a reason: the histogram of
/// reasons, sorted, and the preemption post-filter's verdict (podpass does not preempt).
pub(super) fn fit_error(nodes: usize, reasons: &[String]) -> String {
    if nodes == 0 {
        return "no nodes available to schedule pods".into();
    }
    let mut histogram: BTreeMap<&str, usize> = BTreeMap::new();
    for r in reasons {
        *histogram.entry(r).or_default() += 1;
    }
    let mut counted: Vec<String> = histogram.iter().map(|(reason, n)| format!("{n} {reason}")).collect();
    counted.sort();
    format!(
        "0/{nodes} nodes are available: {}. preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling.",
        counted.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const UP: NodeState = NodeState { pods: 0, cpu: 0, memory: 0, nz_cpu: 0, nz_memory: 0, reachable: true };

    #[test]
    fn requests_fit_what_the_node_has_left_as_node_resources_fit() {
        let pod = json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}});
        let roomy = node(json!({"status": {"allocatable": {"pods": "110", "cpu": "2", "memory": "4Gi"},
            "conditions": [{"type": "Ready", "status": "True"}]}}));
        assert_eq!(unfit(&pod, &roomy, UP), None);
        let busy = NodeState { cpu: 1800, ..UP };
        assert_eq!(unfit(&pod, &roomy, busy).as_deref(), Some("Insufficient cpu"));
        let full = NodeState { memory: (4_i128 << 30) * 1000, ..UP };
        assert_eq!(unfit(&pod, &roomy, full).as_deref(), Some("Insufficient memory"));
        // A pod requesting nothing fits a node stating no cpu or memory at all.
        assert_eq!(unfit(&json!({"spec": {"containers": [{"name": "a"}]}}), &node(json!({})), UP), None);
    }

    fn node(extra: Value) -> Value {
        let mut n = json!({"metadata": {"name": "n1", "labels": {"disk": "ssd", "zone": "3"}},
            "status": {"allocatable": {"pods": "110"}, "conditions": [{"type": "Ready", "status": "True"}]}});
        if let (Some(n), Some(extra)) = (n.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                n.insert(k.clone(), v.clone());
            }
        }
        n
    }

    #[test]
    fn a_ready_node_with_room_takes_a_plain_pod() {
        let pod = json!({"spec": {"containers": [{"name": "c"}]}});
        assert_eq!(unfit(&pod, &node(json!({})), UP), None);
        let full = NodeState { pods: 110, ..UP };
        assert_eq!(unfit(&pod, &node(json!({})), full).as_deref(), Some("Too many pods"));
        let no_allocatable =
            json!({"metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(unfit(&pod, &no_allocatable, UP).as_deref(), Some("Too many pods"));
    }

    #[test]
    fn readiness_and_taints_keep_pods_off_unless_tolerated() {
        let pod = json!({"spec": {}});
        let not_ready = node(
            json!({"status": {"allocatable": {"pods": "110"}, "conditions": [{"type": "Ready", "status": "False"}]}}),
        );
        assert_eq!(
            unfit(&pod, &not_ready, UP).as_deref(),
            Some("node(s) had untolerated taint {node.kubernetes.io/not-ready: }")
        );
        let gone = NodeState { reachable: false, ..UP };
        assert_eq!(
            unfit(&pod, &node(json!({})), gone).as_deref(),
            Some("node(s) had untolerated taint {node.kubernetes.io/unreachable: }")
        );
        let tainted = node(json!({"spec": {"taints": [{"key": "team", "value": "a", "effect": "NoSchedule"},
                                                      {"key": "soft", "effect": "PreferNoSchedule"}]}}));
        assert_eq!(unfit(&pod, &tainted, UP).as_deref(), Some("node(s) had untolerated taint {team: a}"));
        let tolerant = json!({"spec": {"tolerations": [{"key": "team", "operator": "Equal", "value": "a"}]}});
        assert_eq!(unfit(&tolerant, &tainted, UP), None);
        let wrong_value = json!({"spec": {"tolerations": [{"key": "team", "value": "b"}]}});
        assert!(unfit(&wrong_value, &tainted, UP).is_some());
        let everything = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        assert_eq!(unfit(&everything, &tainted, UP), None);
        assert_eq!(unfit(&everything, &not_ready, UP), None);
        let cordoned = node(json!({"spec": {"unschedulable": true}}));
        assert_eq!(unfit(&pod, &cordoned, UP).as_deref(), Some("node(s) were unschedulable"));
    }

    #[test]
    fn a_node_under_pressure_takes_only_pods_tolerating_its_condition_taint() {
        let pressured = node(json!({"status": {"allocatable": {"pods": "110"}, "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "True"},
            {"type": "MemoryPressure", "status": "False"}]}}));
        let pod = json!({"spec": {}});
        assert_eq!(
            unfit(&pod, &pressured, UP).as_deref(),
            Some("node(s) had untolerated taint {node.kubernetes.io/disk-pressure: }")
        );
        let tolerant = json!({"spec": {"tolerations": [
            {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"}]}});
        assert_eq!(unfit(&tolerant, &pressured, UP), None);
        let relieved = node(json!({"status": {"allocatable": {"pods": "110"}, "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}]}}));
        assert_eq!(unfit(&pod, &relieved, UP), None);
    }

    #[test]
    fn node_selector_and_required_affinity_must_match() {
        let n = node(json!({}));
        let selected = |pod: Value| unfit(&pod, &n, UP).is_none();
        assert!(selected(json!({"spec": {"nodeSelector": {"disk": "ssd"}}})));
        assert!(!selected(json!({"spec": {"nodeSelector": {"disk": "hdd"}}})));
        let affinity = |terms: Value| json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}});
        assert!(selected(affinity(
            json!([{"matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["2"]}]}])
        )));
        assert!(!selected(affinity(
            json!([{"matchExpressions": [{"key": "zone", "operator": "Lt", "values": ["2"]}]}])
        )));
        assert!(selected(affinity(json!([
            {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
        ]))));
        assert!(!selected(affinity(
            json!([{"matchExpressions": [{"key": "disk", "operator": "NotIn", "values": ["ssd"]}]}])
        )));
        assert!(!selected(affinity(json!([{}]))), "an empty term matches nothing");
    }

    #[test]
    fn the_fit_error_is_upstreams_sorted_histogram() {
        let reasons = vec![
            "node(s) didn't match Pod's node affinity/selector".to_owned(),
            "Too many pods".to_owned(),
            "node(s) didn't match Pod's node affinity/selector".to_owned(),
        ];
        assert_eq!(
            fit_error(3, &reasons),
            "0/3 nodes are available: 1 Too many pods, 2 node(s) didn't match Pod's node affinity/selector. \
             preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
        assert_eq!(fit_error(0, &[]), "no nodes available to schedule pods");
    }
}
