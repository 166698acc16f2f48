//! End-to-end: a DaemonSet on two real nodes (each its own containerd and node agent), run
//! by `podpass controller-manager` and bound by `podpass scheduler`. One pod per node,
//! pinned by node affinity on `metadata.name` with the daemon tolerations; `kubectl rollout
//! status|history|undo ds/…` as on upstream; a rolling update that keeps one node
//! available at a time; a node tainted NoExecute loses its daemon pod and gets it back
//! when the taint goes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

mod containerd;
mod registry;
mod support;
use containerd::APP_IMAGE;
use registry::free_port;
use support::*;

const DS: &str = "/apis/apps/v1/namespaces/default/daemonsets/agent";

fn daemon_set() -> Value {
    // Ready a second after it starts, so a rollout takes a visible while.
    let container = json!({"name": "app", "image": APP_IMAGE, "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", "sleep 1; touch /tmp/ready; exec sleep 3600"],
        "env": [{"name": "VERSION", "value": "1"}],
        "readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1}});
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]}}}})
}

/// The live (not terminating) pods of the DaemonSet.
fn live_pods(s: &Server) -> Vec<Value> {
    let (code, list) = admin_get(s, "/api/v1/namespaces/default/pods?labelSelector=app%3Dagent");
    assert_eq!(code, 200, "{list}");
    let pods = list["items"].as_array().cloned().unwrap_or_default();
    pods.into_iter().filter(|p| p["metadata"]["deletionTimestamp"].is_null()).collect()
}

fn rollout_status(api: &Path) -> String {
    ok(admin_kubectl(api, &["rollout", "status", "ds/agent", "--timeout=180s"]), "kubectl rollout status ds")
}

/// Once every pod is gone but one per node, each carrying `hash`: the pods, by node.
fn settled_on(s: &Server, hash: &str) -> Vec<Value> {
    let pods = wait_for(&format!("one pod per node, all of revision {hash}"), Duration::from_secs(120), || {
        let pods = live_pods(s);
        let (_, all) = admin_get(s, "/api/v1/namespaces/default/pods?labelSelector=app%3Dagent");
        let settled = pods.len() == 2
            && all["items"].as_array().is_some_and(|a| a.len() == 2)
            && pods.iter().all(|p| p["metadata"]["labels"]["controller-revision-hash"] == hash);
        settled.then_some(Value::Array(pods))
    });
    let mut pods = pods.as_array().cloned().unwrap();
    pods.sort_by_key(|p| p["spec"]["nodeName"].as_str().unwrap_or_default().to_owned());
    pods
}

fn revisions(s: &Server) -> Vec<Value> {
    let (_, list) = admin_get(s, "/apis/apps/v1/namespaces/default/controllerrevisions");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// The hash of the ControllerRevision that holds revision `n`.
fn hash_of_revision(s: &Server, n: i64) -> String {
    let found = wait_for(&format!("revision {n}"), Duration::from_secs(60), || {
        revisions(s).into_iter().find(|r| r["revision"] == n)
    });
    found["metadata"]["labels"]["controller-revision-hash"].as_str().unwrap().to_owned()
}

/// Whether the cgroup `relative` (`/a/b`) exists, in the v2 hierarchy or v1's memory one.
fn pod_cgroup_exists(relative: &str) -> bool {
    let mount = std::path::Path::new("/sys/fs/cgroup");
    let relative = relative.trim_start_matches('/');
    if mount.join("cgroup.controllers").exists() {
        mount.join(relative).is_dir()
    } else {
        mount.join("memory").join(relative).is_dir()
    }
}

/// On drop, removes the empty cgroups below its path, deepest first (what the agents left:
/// their `kubepods` and QoS cgroups), in every hierarchy.
struct RemoveCgroups(String);

impl Drop for RemoveCgroups {
    fn drop(&mut self) {
        remove_cgroups(&self.0);
    }
}

fn remove_cgroups(relative: &str) {
    fn remove(dir: &std::path::Path) {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    remove(&e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
    let mount = std::path::Path::new("/sys/fs/cgroup");
    let relative = relative.trim_start_matches('/');
    remove(&mount.join(relative));
    for controller in ["memory", "cpu", "pids"] {
        remove(&mount.join(controller).join(relative));
    }
}

#[test]
fn a_daemon_set_runs_one_pod_per_node_rolls_undoes_and_follows_taints() {
    assert!(rustix::process::geteuid().is_root(), "running containers needs root");
    let dir = tempfile::Builder::new().prefix("ds").tempdir_in("/tmp").unwrap();
    let d = dir.path();
    let api = d.join("api");
    std::fs::create_dir(&api).unwrap();
    let s = start(&api, &[]);
    // (agent, containerd): a tuple drops its fields in order, so each agent stops before
    // its containerd removes the sandboxes (no agent left to start one again).
    // Each node's pods below a cgroup root of its own (kubelet --cgroup-root), as nodes
    // sharing a machine need: this run's, so no other run's cgroups are touched, and
    // removed after the nodes (declared first, dropped last).
    let run_root = format!("/podpass-e2e-{}", d.file_name().unwrap().to_str().unwrap());
    let _cgroups = RemoveCgroups(run_root.clone());
    let cgroup_root = |name: &str| format!("{run_root}/{name}");
    let mut _nodes = Vec::new();
    for name in ["n1", "n2"] {
        let runtime =
            containerd::Containerd::start_with_app(&d.join(format!("c-{name}")), &["sh", "cat", "touch", "sleep"]);
        let kubeconfig = d.join(format!("{name}.kubeconfig"));
        let identity = identity_output(&api, &format!("system:node:{name}"), &["system:nodes"]);
        std::fs::write(&kubeconfig, ok(identity, "node identity")).unwrap();
        let port = free_port().to_string();
        let agent = spawn_agent_with(
            &kubeconfig,
            &d.join(format!("root-{name}")),
            Some(&d.join(format!("{name}.log"))),
            &[
                "--node-name",
                name,
                "--container-runtime-endpoint",
                &runtime.endpoint,
                "--port",
                &port,
                "--cgroup-root",
                &cgroup_root(name),
            ],
        );
        _nodes.push((agent, runtime));
    }
    for name in ["n1", "n2"] {
        wait_for(&format!("{name} Ready"), Duration::from_secs(60), || {
            let (_, node) = admin_get(&s, &format!("/api/v1/nodes/{name}"));
            let conditions = node["status"]["conditions"].as_array()?.clone();
            conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True").then_some(node)
        });
    }

    // One pod per node, pinned there for the scheduler, tolerating what a daemon must.
    let file = d.join("agent.json");
    std::fs::write(&file, daemon_set().to_string()).unwrap();
    ok(admin_kubectl(&api, &["apply", "-f", file.to_str().unwrap()]), "kubectl apply");
    let done = rollout_status(&api);
    assert!(done.contains("daemon set \"agent\" successfully rolled out"), "{done}");
    let first = hash_of_revision(&s, 1);
    let pods = settled_on(&s, &first);
    for (pod, node) in pods.iter().zip(["n1", "n2"]) {
        assert_eq!(pod["spec"]["nodeName"], node, "{pod}");
        let terms = &pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
        assert_eq!(terms, &json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]));
        let tolerations = pod["spec"]["tolerations"].as_array().unwrap();
        for key in
            ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable", "node.kubernetes.io/unschedulable"]
        {
            let t = tolerations.iter().find(|t| t["key"] == key).unwrap_or_else(|| panic!("{key} in {pod}"));
            assert!(t["tolerationSeconds"].is_null(), "a daemon tolerates {key} forever: {t}");
        }
        assert_eq!(pod["metadata"]["labels"]["pod-template-generation"], "1");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "DaemonSet");
        assert_eq!(pod["metadata"]["generateName"], "agent-");
        // Its cgroup is below its own node's root, not the other's nor the machine's /kubepods.
        let uid = pod["metadata"]["uid"].as_str().unwrap();
        let under = |root: &str| pod_cgroup_exists(&format!("{root}/kubepods/besteffort/pod{uid}"));
        assert!(under(&cgroup_root(node)), "{node}'s pod {uid} below {}", cgroup_root(node));
        let other = if node == "n1" { "n2" } else { "n1" };
        assert!(!under(&cgroup_root(other)) && !under(""), "{node}'s pod {uid} elsewhere too");
    }
    let table = ok(admin_kubectl(&api, &["get", "ds", "agent"]), "kubectl get ds");
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE", "SELECTOR", "AGE"]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..7], ["agent", "2", "2", "2", "2", "2", "<none>"], "{table}");
    let (_, ds) = admin_get(&s, DS);
    assert_eq!(ds["metadata"]["annotations"]["deprecated.daemonset.template.generation"], "1");

    // A new template rolls out node by node (maxUnavailable 1), as revision 2.
    ok(admin_kubectl(&api, &["set", "env", "ds/agent", "VERSION=2"]), "kubectl set env");
    let done = rollout_status(&api);
    assert!(done.contains("daemon set \"agent\" successfully rolled out"), "{done}");
    let second = hash_of_revision(&s, 2);
    assert_ne!(first, second);
    let pods = settled_on(&s, &second);
    assert!(pods.iter().all(|p| p["metadata"]["labels"]["pod-template-generation"] == "2"), "{pods:#?}");
    let (_, ds) = admin_get(&s, DS);
    assert_eq!(ds["metadata"]["annotations"]["deprecated.daemonset.template.generation"], "2");
    let history = ok(admin_kubectl(&api, &["rollout", "history", "ds/agent"]), "kubectl rollout history ds");
    let listed: Vec<&str> = history.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(listed.contains(&"1") && listed.contains(&"2"), "{history}");
    let events = ok(admin_kubectl(&api, &["get", "events", "--field-selector", "involvedObject.name=agent"]), "events");
    assert!(events.contains("SuccessfulCreate") && events.contains("SuccessfulDelete"), "{events}");

    // Undo: the first template back, its revision now the newest (3).
    ok(admin_kubectl(&api, &["rollout", "undo", "ds/agent"]), "kubectl rollout undo ds");
    let done = rollout_status(&api);
    assert!(done.contains("successfully rolled out"), "{done}");
    assert_eq!(hash_of_revision(&s, 3), first, "the first template's revision moved to 3");
    let pods = settled_on(&s, &first);
    let version = |p: &Value| p["spec"]["containers"][0]["env"][0]["value"].clone();
    assert!(pods.iter().all(|p| version(p) == "1"), "{pods:#?}");
    assert_eq!(revisions(&s).len(), 2, "one revision per template");

    // n2 tainted NoExecute: the daemon does not tolerate it, so its pod there goes and the
    // set wants one node; the taint gone, the pod comes back.
    let taint = json!({"spec": {"taints": [{"key": "dedicated", "value": "other", "effect": "NoExecute"}]}});
    let (code, answer) = admin_raw_request(
        &s,
        Method::PATCH,
        "/api/v1/nodes/n2",
        Some(("application/merge-patch+json", taint.to_string().into_bytes())),
    );
    assert_eq!(code, 200, "{answer}");
    wait_for("only n1's pod left, and one desired", Duration::from_secs(60), || {
        let pods = live_pods(&s);
        let (_, ds) = admin_get(&s, DS);
        (pods.len() == 1 && pods[0]["spec"]["nodeName"] == "n1" && ds["status"]["desiredNumberScheduled"] == 1)
            .then_some(Value::Null)
    });
    let untaint = json!({"spec": {"taints": null}});
    let (code, answer) = admin_raw_request(
        &s,
        Method::PATCH,
        "/api/v1/nodes/n2",
        Some(("application/merge-patch+json", untaint.to_string().into_bytes())),
    );
    assert_eq!(code, 200, "{answer}");
    let done = rollout_status(&api);
    assert!(done.contains("successfully rolled out"), "{done}");
    assert_eq!(settled_on(&s, &first).len(), 2);

    // Deleting the set takes its pods and revisions with it (the garbage collector).
    ok(admin_kubectl(&api, &["delete", "ds", "agent"]), "kubectl delete ds");
    wait_for("the set's pods and revisions collected", Duration::from_secs(90), || {
        let (_, all) = admin_get(&s, "/api/v1/namespaces/default/pods?labelSelector=app%3Dagent");
        (all["items"].as_array().is_some_and(Vec::is_empty) && revisions(&s).is_empty()).then_some(Value::Null)
    });
}
