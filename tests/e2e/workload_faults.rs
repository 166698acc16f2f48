//! End-to-end: the controller manager under faults, on a real node (containerd, the node
//! agent, the scheduler). Killed with SIGKILL in the middle of a rolling update, a new
//! manager finishes it with no duplicate ReplicaSet and no orphaned or extra pod; with no
//! manager running, the API server alone creates no pod for a ReplicaSet.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

mod containerd;
mod registry;
mod support;
use containerd::APP_IMAGE;
use registry::free_port;
use support::*;

fn list(s: &Server, path: &str) -> Vec<Value> {
    let (code, list) = admin_get(s, path);
    assert_eq!(code, 200, "{list}");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// The live (not terminating) pods of `default` labelled `app=<app>`.
fn live_pods(s: &Server, app: &str) -> Vec<Value> {
    let pods = list(s, &format!("/api/v1/namespaces/default/pods?labelSelector=app%3D{app}"));
    pods.into_iter().filter(|p| p["metadata"]["deletionTimestamp"].is_null()).collect()
}

fn deployment(version: &str) -> Value {
    // Ready two seconds after it starts, so a rollout of three takes a while.
    let container = json!({"name": "app", "image": APP_IMAGE, "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", "sleep 2; touch /tmp/ready; exec sleep 3600"],
        "env": [{"name": "VERSION", "value": version}],
        "readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1}});
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]}}}})
}

fn apply(d: &Path, object: &Value, name: &str) {
    let file = d.join(format!("{name}.json"));
    std::fs::write(&file, object.to_string()).unwrap();
    ok(admin_kubectl(d, &["apply", "-f", file.to_str().unwrap()]), "kubectl apply");
}

/// Waits until the Deployment's generation `generation` is rolled out: every replica
/// updated and available, no old one left.
fn wait_rolled_out(s: &Server, generation: i64) -> Value {
    wait_for(&format!("generation {generation} rolled out"), Duration::from_secs(180), || {
        let (_, d) = admin_get(s, "/apis/apps/v1/namespaces/default/deployments/web");
        let st = &d["status"];
        (st["observedGeneration"] == generation
            && st["updatedReplicas"] == 3
            && st["availableReplicas"] == 3
            && st["replicas"] == 3)
            .then_some(d)
    })
}

#[test]
fn a_manager_killed_mid_rollout_is_replaced_without_duplicates_and_the_api_server_alone_creates_nothing() {
    assert!(rustix::process::geteuid().is_root(), "running containers needs root");
    let dir = tempfile::Builder::new().prefix("wf").tempdir_in("/tmp").unwrap();
    let d = dir.path();
    let api = d.join("api");
    std::fs::create_dir(&api).unwrap();
    let s = start_without_manager(&api, &[]);
    let runtime = containerd::Containerd::start_with_app(&d.join("c"), &["sh", "cat", "touch", "sleep"]);
    let kubeconfig = node_kubeconfig(&api, &d.join("n1.kubeconfig"));
    let port = free_port().to_string();
    let _agent = spawn_agent_with(
        &kubeconfig,
        &d.join("root"),
        Some(&d.join("agent.log")),
        &["--container-runtime-endpoint", &runtime.endpoint, "--port", &port],
    );
    let cm = d.join("cm.kubeconfig");
    std::fs::write(&cm, ok(identity_output(&api, "system:kube-controller-manager", &[]), "cm identity")).unwrap();

    // With no manager, a ReplicaSet gets no pod: the API server runs no workload
    // controller (watched for a few seconds; a manager then makes them).
    let alone = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "alone", "namespace": "default"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "alone"}},
            "template": {"metadata": {"labels": {"app": "alone"}},
                "spec": {"containers": [{"name": "app", "image": APP_IMAGE, "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", "exec sleep 3600"]}]}}}});
    apply(&api, &alone, "alone");
    std::thread::sleep(Duration::from_secs(3));
    assert!(live_pods(&s, "alone").is_empty(), "no manager, no pods");

    let first = manager(&cm, &d.join("cm-1.log"));
    wait_for("the ReplicaSet's two pods", Duration::from_secs(60), || {
        (live_pods(&s, "alone").len() == 2).then_some(Value::Null)
    });

    // A Deployment rolled out, then rolled to a new template; the manager is killed (-9)
    // once the new ReplicaSet has begun.
    apply(&api, &deployment("1"), "web-v1");
    wait_rolled_out(&s, 1);
    apply(&api, &deployment("2"), "web-v2");
    wait_for("the rollout under way", Duration::from_secs(60), || {
        let sets = list(&s, "/apis/apps/v1/namespaces/default/replicasets?labelSelector=app%3Dweb");
        let started = sets.len() == 2 && sets.iter().all(|rs| rs["status"]["replicas"].as_i64() > Some(0));
        started.then_some(Value::Null)
    });
    let mut first = first;
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let _second = manager(&cm, &d.join("cm-2.log"));
    let done = wait_rolled_out(&s, 2);
    assert_eq!(done["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2", "{done}");

    // Two sets, one per template: the new one holds the three pods, the old one none.
    let sets = list(&s, "/apis/apps/v1/namespaces/default/replicasets?labelSelector=app%3Dweb");
    assert_eq!(sets.len(), 2, "no duplicate ReplicaSet: {sets:#?}");
    let replicas = |rs: &Value| rs["spec"]["replicas"].as_i64().unwrap();
    let new = sets.iter().find(|rs| replicas(rs) == 3).expect("the new set holds three");
    let old = sets.iter().find(|rs| replicas(rs) == 0).expect("the old set is scaled to none");
    assert_eq!(new["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2");
    assert_eq!(old["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "1");
    // Once the old set's last pods are gone: three pods, all the new set's, none orphaned.
    let pods = wait_for("only the new set's pods", Duration::from_secs(60), || {
        let pods = list(&s, "/api/v1/namespaces/default/pods?labelSelector=app%3Dweb");
        (pods.len() == 3).then_some(Value::Array(pods))
    });
    for pod in pods.as_array().unwrap() {
        let owner = &pod["metadata"]["ownerReferences"][0];
        assert_eq!(owner["uid"], new["metadata"]["uid"], "{pod}");
        assert_eq!(owner["controller"], true);
    }
    assert_eq!(live_pods(&s, "alone").len(), 2, "the other set untouched by the change of manager");
}
