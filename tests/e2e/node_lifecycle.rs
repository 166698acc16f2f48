//! End-to-end: a node that goes away (kube-controller-manager's node lifecycle and taint
//! eviction, run by `podpass controller-manager` with a shorter grace period than
//! upstream's 50 s so the test is quick). Two nodes; a Deployment's pod lands on n2; n2's
//! agent is killed: n2 turns `Ready=Unknown` (`NodeStatusUnknown`) with a `NodeNotReady`
//! event, gets the `unreachable` NoSchedule and NoExecute taints, its pod is evicted after
//! its toleration (`DeletionByTaintManager`, `TaintManagerEviction`) and the Deployment's
//! replacement runs on n1. n2's agent comes back: Ready again, every lifecycle taint off.

// Test helpers panic on failure by design; the lint targets library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

mod support;
use support::*;

fn ready(node: &Value) -> Option<&Value> {
    node["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")
}

fn taint_keys(node: &Value) -> Vec<String> {
    let taints = node["spec"]["taints"].as_array().cloned().unwrap_or_default();
    taints
        .iter()
        .map(|t| format!("{}:{}", t["key"].as_str().unwrap_or(""), t["effect"].as_str().unwrap_or("")))
        .collect()
}

fn pods_of(s: &Server) -> Vec<Value> {
    let (_, list) = admin_get(s, "/api/v1/namespaces/default/pods?labelSelector=app%3Dweb");
    list["items"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_silent_node_is_tainted_its_pods_move_and_it_recovers_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let api = d.join("api");
    std::fs::create_dir(&api).unwrap();
    let audit = d.join("audit.log");
    let s = start_without_manager(&api, &["--audit-log-path", audit.to_str().unwrap()]);
    // Grace 25 s: more than twice the agents' 10 s lease renewal, even on a loaded machine.
    let _manager = spawn_manager_with(&api, &["--node-monitor-grace-period", "25s", "--node-monitor-period", "2s"]);
    wait_namespace_ready(&s, "default");
    let node_identity = |name: &str| {
        let path = d.join(format!("{name}.kubeconfig"));
        let identity = identity_output(&api, &format!("system:node:{name}"), &["system:nodes"]);
        std::fs::write(&path, ok(identity, "node identity")).unwrap();
        path
    };
    let (n1_config, n2_config) = (node_identity("n1"), node_identity("n2"));
    let spawn = |name: &str, config: &std::path::Path| {
        let log = d.join(format!("{name}.log"));
        spawn_agent_with(config, &d.join(format!("root-{name}")), Some(&log), &["--node-name", name])
    };
    let node_ready = |name: &str| {
        wait_for(&format!("{name} Ready"), Duration::from_secs(60), || {
            let (code, node) = admin_get(&s, &format!("/api/v1/nodes/{name}"));
            (code == 200 && ready(&node)?["status"] == "True").then_some(node)
        })
    };

    // Only n2 at first: the Deployment's pod lands there.
    let mut n2 = spawn("n2", &n2_config);
    let registered = node_ready("n2");
    assert!(taint_keys(&registered).iter().all(|t| !t.starts_with("node.kubernetes.io/")), "{registered}");
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                // Five seconds on an unreachable node instead of DefaultTolerationSeconds' 300.
                "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                 "effect": "NoExecute", "tolerationSeconds": 5}],
                "containers": [{"name": "c", "image": "registry.example/app:1"}]}}}});
    let (code, answer) =
        admin_request(&s, Method::POST, "/apis/apps/v1/namespaces/default/deployments", Some(deployment));
    assert_eq!(code, 201, "{answer}");
    let first = wait_for("web's pod on n2", Duration::from_secs(60), || {
        pods_of(&s).into_iter().find(|p| p["spec"]["nodeName"] == "n2")
    });
    let first_name = first["metadata"]["name"].as_str().unwrap().to_owned();
    let _n1 = spawn("n1", &n1_config);
    node_ready("n1");

    // n2 goes silent.
    n2.0.kill().unwrap();
    n2.0.wait().unwrap();
    let silent = wait_for("n2 Unknown", Duration::from_secs(90), || {
        let (_, node) = admin_get(&s, "/api/v1/nodes/n2");
        (ready(&node)?["status"] == "Unknown").then_some(node)
    });
    let condition = ready(&silent).unwrap();
    assert_eq!(condition["reason"], "NodeStatusUnknown", "{condition}");
    assert_eq!(condition["message"], "Kubelet stopped posting node status.");
    let tainted = wait_for("n2's unreachable taints", Duration::from_secs(30), || {
        let (_, node) = admin_get(&s, "/api/v1/nodes/n2");
        let keys = taint_keys(&node);
        (keys.contains(&"node.kubernetes.io/unreachable:NoExecute".to_owned())
            && keys.contains(&"node.kubernetes.io/unreachable:NoSchedule".to_owned()))
        .then_some(node)
    });
    assert!(tainted["spec"]["taints"].as_array().unwrap().iter().all(|t| t["timeAdded"].is_string()), "{tainted}");
    let described = ok(admin_kubectl(&api, &["describe", "node", "n2"]), "describe node");
    assert!(described.contains("node.kubernetes.io/unreachable:NoExecute"), "{described}");
    wait_for("the NodeNotReady event", Duration::from_secs(20), || {
        let (_, list) = admin_get(&s, "/api/v1/namespaces/default/events?fieldSelector=reason%3DNodeNotReady");
        list["items"].as_array()?.iter().find(|e| e["involvedObject"]["kind"] == "Node").cloned()
    });

    // Its pod goes after its five seconds, with the reason on it, and the Deployment's
    // replacement runs on n1.
    let evicted = wait_for("the pod on n2 evicted", Duration::from_secs(60), || {
        let (_, pod) = admin_get(&s, &format!("/api/v1/namespaces/default/pods/{first_name}"));
        pod["metadata"]["deletionTimestamp"].is_string().then_some(pod)
    });
    let target = evicted["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "DisruptionTarget");
    assert_eq!(target.map(|c| c["reason"].clone()), Some(json!("DeletionByTaintManager")), "{evicted}");
    let events = ok(
        admin_kubectl(&api, &["get", "events", "--field-selector", "reason=TaintManagerEviction", "-o", "json"]),
        "eviction events",
    );
    assert!(events.contains(&format!("Marking for deletion Pod default/{first_name}")), "{events}");
    wait_for("web's replacement on n1", Duration::from_secs(60), || {
        pods_of(&s).into_iter().find(|p| p["spec"]["nodeName"] == "n1" && p["metadata"]["deletionTimestamp"].is_null())
    });
    // The audit trail names the controllers' own accounts.
    let audit = std::fs::read_to_string(&audit).unwrap_or_default();
    for account in ["node-controller", "taint-eviction-controller"] {
        assert!(audit.contains(&format!("system:serviceaccount:kube-system:{account}")), "{account} not audited");
    }

    // n2 comes back: Ready, and the lifecycle taints come off; its old pod is gone for good.
    let _n2 = spawn("n2", &n2_config);
    node_ready("n2");
    wait_for("n2 untainted", Duration::from_secs(30), || {
        let (_, node) = admin_get(&s, "/api/v1/nodes/n2");
        taint_keys(&node).iter().all(|t| !t.starts_with("node.kubernetes.io/")).then_some(node)
    });
    wait_for("the evicted pod removed by its node", Duration::from_secs(60), || {
        let (code, _) = admin_get(&s, &format!("/api/v1/namespaces/default/pods/{first_name}"));
        (code == 404).then_some(Value::Null)
    });
}
