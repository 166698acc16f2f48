#![allow(clippy::unwrap_used)]

use super::*;
use serde_json::{Value, json};

fn ds(extra: Value) -> DaemonSet {
    let mut v = json!({"metadata": {"name": "agent", "namespace": "ns", "uid": "ds-1", "generation": 3,
            "annotations": {TEMPLATE_GENERATION: "2"}},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "a", "image": "busybox"}]}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}}});
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn node(name: &str, extra: Value) -> Node {
    let mut v = json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}});
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

const NOW: i64 = 1_000_000;

fn at(seconds: i64) -> String {
    jiff::Timestamp::from_second(seconds).unwrap().to_string()
}

/// A pod on `node` with template hash `hash`, created at `created`, ready since `ready`.
fn pod(name: &str, node: &str, hash: &str, created: i64, ready: Option<i64>) -> Pod {
    let conditions = match ready {
        Some(t) => json!([{"type": "Ready", "status": "True", "lastTransitionTime": at(t)}]),
        None => json!([{"type": "Ready", "status": "False"}]),
    };
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns", "creationTimestamp": at(created),
            "labels": {"app": "agent", REVISION_HASH: hash}},
        "spec": {"nodeName": node, "containers": []},
        "status": {"phase": "Running", "conditions": conditions}}))
    .unwrap()
}

fn now() -> jiff::Timestamp {
    jiff::Timestamp::from_second(NOW).unwrap()
}

fn group(pods: &[Pod]) -> BTreeMap<String, Vec<&Pod>> {
    let mut by_node: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for p in pods {
        by_node.entry(target_node(p).unwrap()).or_default().push(p);
    }
    by_node
}

fn eligible(names: &[&str]) -> Vec<(String, Eligibility)> {
    names.iter().map(|n| ((*n).to_owned(), Eligibility { should_run: true, should_continue_running: true })).collect()
}

#[test]
fn nodes_are_eligible_as_node_should_run_daemon_pod_decides() {
    let d = ds(json!({}));
    let run = Eligibility { should_run: true, should_continue_running: true };
    assert_eq!(eligibility(&d, &node("n1", json!({}))), run);
    // The node lifecycle's taints and the condition taints are the daemon's to tolerate.
    let lifecycle = node(
        "n1",
        json!({"spec": {"unschedulable": true, "taints": [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}]}}),
    );
    assert_eq!(eligibility(&d, &lifecycle), run);
    let dedicated =
        node("n1", json!({"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}));
    assert_eq!(eligibility(&d, &dedicated), Eligibility { should_run: false, should_continue_running: true });
    let evicting =
        node("n1", json!({"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoExecute"}]}}));
    assert_eq!(eligibility(&d, &evicting), Eligibility { should_run: false, should_continue_running: false });
    let tolerant =
        ds(json!({"spec": {"template": {"spec": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}}}}));
    assert_eq!(eligibility(&tolerant, &evicting), run);
    let never = Eligibility { should_run: false, should_continue_running: false };
    let selected = ds(json!({"spec": {"template": {"spec": {"nodeSelector": {"disk": "ssd"}}}}}));
    assert_eq!(eligibility(&selected, &node("n1", json!({}))), never);
    assert_eq!(eligibility(&selected, &node("n1", json!({"metadata": {"labels": {"disk": "ssd"}}}))), run);
    let named = ds(json!({"spec": {"template": {"spec": {"nodeName": "n2"}}}}));
    assert_eq!(eligibility(&named, &node("n1", json!({}))), never);
    let affinity = ds(json!({"spec": {"template": {"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}]}}}}}}}));
    assert_eq!(eligibility(&affinity, &node("n1", json!({}))), never);
    assert_eq!(eligibility(&affinity, &node("n2", json!({}))), run);
}

#[test]
fn daemon_pods_get_the_daemon_tolerations_and_are_pinned_by_name() {
    let d = ds(json!({"spec": {"template": {"spec": {"hostNetwork": true, "tolerations": [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
        {"key": "dedicated", "operator": "Exists"}]}}}}));
    let template = pod_template(&d, "h1");
    let labels = template.metadata.as_ref().unwrap().labels.as_ref().unwrap();
    assert_eq!(labels.get(REVISION_HASH).map(String::as_str), Some("h1"));
    assert_eq!(labels.get(TEMPLATE_GENERATION_LABEL).map(String::as_str), Some("2"));
    let tolerations = template.spec.as_ref().unwrap().tolerations.clone().unwrap();
    let keys: Vec<&str> = tolerations.iter().filter_map(|t| t.key.as_deref()).collect();
    assert_eq!(
        keys,
        [
            "node.kubernetes.io/not-ready",
            "dedicated",
            "node.kubernetes.io/unreachable",
            "node.kubernetes.io/disk-pressure",
            "node.kubernetes.io/memory-pressure",
            "node.kubernetes.io/pid-pressure",
            "node.kubernetes.io/unschedulable",
            "node.kubernetes.io/network-unavailable",
        ]
    );
    assert_eq!(tolerations[0].toleration_seconds, None, "the daemon's not-ready toleration is forever");

    let user: Affinity =
        serde_json::from_value(json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}},
        "podAntiAffinity": {}}))
        .unwrap();
    let pinned = pin_to_node(Some(user), "n2");
    assert!(pinned.pod_anti_affinity.is_some(), "the rest of the affinity stays");
    let p: Pod =
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [], "affinity": pinned}}))
            .unwrap();
    assert_eq!(target_node(&p).as_deref(), Some("n2"));
    let terms = serde_json::to_value(&p.spec.as_ref().unwrap().affinity).unwrap();
    assert_eq!(
        terms["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
        json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}])
    );
}

#[test]
fn manage_creates_where_missing_replaces_failed_and_keeps_the_oldest() {
    let d = ds(json!({}));
    let mut failed = pod("failed", "n2", "h1", 10, None);
    failed.status.as_mut().unwrap().phase = Some("Failed".into());
    let pods = [
        pod("old", "n3", "h1", 10, Some(20)),
        pod("young", "n3", "h1", 30, Some(40)),
        failed,
        pod("stray", "n4", "h1", 10, Some(20)),
    ];
    let mut nodes = eligible(&["n1", "n2", "n3"]);
    nodes.push(("n4".into(), Eligibility { should_run: false, should_continue_running: false }));
    let plan = manage(&d, &nodes, &group(&pods), "h1", now());
    assert_eq!(plan.create_on, ["n1"]);
    assert_eq!(plan.delete, ["failed", "young", "stray"]);
    assert_eq!(plan.failed, [("failed".to_owned(), "n2".to_owned())]);

    // With surge, a node may hold the old pod beside the new one until the new is available.
    let surging = ds(json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}}}));
    let waiting = [pod("old", "n1", "h0", 10, Some(20)), pod("new", "n1", "h1", 30, None)];
    assert!(manage(&surging, &eligible(&["n1"]), &group(&waiting), "h1", now()).delete.is_empty());
    let available = [pod("old", "n1", "h0", 10, Some(20)), pod("new", "n1", "h1", 30, Some(40))];
    assert_eq!(manage(&surging, &eligible(&["n1"]), &group(&available), "h1", now()).delete, ["old"]);
}

#[test]
fn a_rolling_update_replaces_at_most_max_unavailable_at_once() {
    let d = ds(json!({}));
    let nodes = eligible(&["n1", "n2", "n3"]);
    let old = [pod("a", "n1", "h0", 1, Some(2)), pod("b", "n2", "h0", 1, Some(2)), pod("c", "n3", "h0", 1, Some(2))];
    let roll = rolling_update(&d, &nodes, &group(&old), "h1", now());
    assert_eq!(roll, Roll { delete: vec!["a".into()], create_on: vec![] });
    // n1's new pod is not available yet: nothing more goes.
    let midway = [pod("a2", "n1", "h1", 5, None), pod("b", "n2", "h0", 1, Some(2)), pod("c", "n3", "h0", 1, Some(2))];
    assert_eq!(rolling_update(&d, &nodes, &group(&midway), "h1", now()), Roll::default());
    // An old pod that is not available is replaced whatever the budget.
    let broken = [pod("a2", "n1", "h1", 5, None), pod("b", "n2", "h0", 1, None), pod("c", "n3", "h0", 1, Some(2))];
    assert_eq!(rolling_update(&d, &nodes, &group(&broken), "h1", now()).delete, ["b"]);
    // A node that should have a pod and has none counts as unavailable.
    let missing = [pod("b", "n2", "h0", 1, Some(2)), pod("c", "n3", "h0", 1, Some(2))];
    assert_eq!(rolling_update(&d, &nodes, &group(&missing), "h1", now()), Roll::default());
    // 50% of three nodes rounds up to two.
    let half = ds(json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "50%"}}}}));
    assert_eq!(rolling_update(&half, &nodes, &group(&old), "h1", now()).delete, ["a", "b"]);
    // The template generation label counts as updated too.
    let mut by_generation = pod("a", "n1", "h0", 1, Some(2));
    by_generation.metadata.labels.as_mut().unwrap().insert(TEMPLATE_GENERATION_LABEL.into(), "2".into());
    assert!(is_updated(&by_generation, "h1", template_generation(&d)));
}

#[test]
fn a_surging_update_adds_the_new_pod_before_the_old_goes() {
    let d = ds(json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}}}));
    let nodes = eligible(&["n1", "n2"]);
    let old = [pod("a", "n1", "h0", 1, Some(2)), pod("b", "n2", "h0", 1, Some(2))];
    assert_eq!(
        rolling_update(&d, &nodes, &group(&old), "h1", now()),
        Roll { delete: vec![], create_on: vec!["n1".into()] }
    );
    let surged = [pod("a", "n1", "h0", 1, Some(2)), pod("a2", "n1", "h1", 5, None), pod("b", "n2", "h0", 1, Some(2))];
    assert_eq!(rolling_update(&d, &nodes, &group(&surged), "h1", now()), Roll::default(), "one surge at a time");
    let ready = [pod("a", "n1", "h0", 1, Some(2)), pod("a2", "n1", "h1", 5, Some(6)), pod("b", "n2", "h0", 1, Some(2))];
    assert_eq!(
        rolling_update(&d, &nodes, &group(&ready), "h1", now()),
        Roll { delete: vec!["a".into()], create_on: vec!["n2".into()] }
    );
}

#[test]
fn the_status_counts_nodes_as_kubectl_rollout_status_reads_them() {
    let d = ds(json!({"spec": {"minReadySeconds": 100}}));
    let pods = [
        pod("a", "n1", "h1", 1, Some(NOW - 200)),
        pod("b", "n2", "h0", 1, Some(NOW - 10)),
        pod("stray", "n4", "h1", 1, Some(2)),
    ];
    let mut nodes = eligible(&["n1", "n2", "n3"]);
    nodes.push(("n4".into(), Eligibility { should_run: false, should_continue_running: false }));
    let s = status(&d, &nodes, &group(&pods), "h1", now());
    assert_eq!(
        (s.desired_number_scheduled, s.current_number_scheduled, s.number_ready, s.number_misscheduled),
        (3, 2, 2, 1)
    );
    assert_eq!((s.number_available, s.number_unavailable, s.updated_number_scheduled), (Some(1), Some(2), Some(1)));
    assert_eq!(s.observed_generation, Some(3));
}

#[test]
fn revisions_hold_the_template_and_old_ones_past_the_limit_go_unless_a_pod_uses_them() {
    let d = ds(json!({"spec": {"revisionHistoryLimit": 1}}));
    let data = revision_data(&d);
    assert_eq!(data["spec"]["template"]["$patch"], "replace");
    assert_eq!(data["spec"]["template"]["spec"]["containers"][0]["image"], "busybox");
    let revision = |name: &str, hash: &str, n: i64, data: Value| -> ControllerRevision {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {REVISION_HASH: hash}}, "revision": n, "data": data}),
        )
        .unwrap()
    };
    assert!(matches(&d, &revision("agent-h1", "h1", 3, data.clone())));
    assert!(!matches(&d, &revision("agent-h0", "h0", 1, json!({"spec": {"template": {}}}))));
    let old = [
        revision("agent-h0", "h0", 1, json!({})),
        revision("agent-hx", "hx", 2, json!({})),
        revision("agent-hy", "hy", 3, json!({})),
    ];
    let refs: Vec<&ControllerRevision> = old.iter().collect();
    let live = pod("a", "n1", "h0", 1, None);
    assert_eq!(history_to_delete(&d, &refs, &[&live]), ["agent-hx", "agent-hy"], "two over the limit; h0 is live");
    let none: [&Pod; 0] = [];
    assert_eq!(history_to_delete(&d, &refs, &none), ["agent-h0", "agent-hx"]);
}
