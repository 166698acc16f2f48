//! End-to-end: what a hostile pod spec cannot do to a node running containers on a real
//! containerd. A container that logs forever has its log rotated (containerLogMaxSize,
//! containerLogMaxFiles: older files gzipped, at most that many kept) while `kubectl logs`
//! keeps reading it; a megabyte line without a break comes back whole; a container that
//! ignores SIGTERM is killed at the end of its grace period; a pod past `maxPods` is
//! rejected `OutOfpods` as the kubelet does and never started, and a pod that finished is
//! never run again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use podpass_node::runtime::CriRuntime;
use reqwest::Method;
use serde_json::{Value, json};

mod containerd;
mod registry;
mod support;
use containerd::APP_IMAGE;
use support::*;

const MAX_LOG_BYTES: u64 = 64 << 10;

fn pod(name: &str, script: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": "n1", "restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
            "automountServiceAccountToken": false,
            "containers": [{"name": "app", "image": APP_IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", script]}]}})
}

fn create(s: &Server, body: Value) {
    let (code, out) = admin_request(s, Method::POST, "/api/v1/namespaces/default/pods", Some(body));
    assert_eq!(code, 201, "{out}");
}

fn get(s: &Server, name: &str) -> Value {
    admin_get(s, &format!("/api/v1/namespaces/default/pods/{name}")).1
}

/// The files of a container's log directory, by name.
fn files(dir: &Path) -> Vec<(String, u64)> {
    let mut found: Vec<(String, u64)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().map(|m| m.len()).unwrap_or(0)))
        .collect();
    found.sort();
    found
}

#[test]
fn hostile_pods_are_bounded_by_log_rotation_grace_periods_and_max_pods() {
    assert!(rustix::process::geteuid().is_root(), "running containers needs root");
    let dir = tempfile::Builder::new().prefix("nb").tempdir_in("/tmp").unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("api")).unwrap();
    let s = start(&d.join("api"), &[]);
    let api = d.join("api");
    let runtime = containerd::Containerd::start_with_app(&d.join("c"), &["sh", "head", "tr", "echo", "sleep", "true"]);
    let kubeconfig = node_kubeconfig(&api, &d.join("n1.kubeconfig"));
    let config = d.join("kubelet.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 3\n\
         containerLogMaxSize: 64Ki\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n",
    )
    .unwrap();
    let port = registry::free_port().to_string();
    let _agent = spawn_agent_with(
        &kubeconfig,
        &d.join("root"),
        Some(&d.join("agent.log")),
        &["--container-runtime-endpoint", &runtime.endpoint, "--port", &port, "--config", config.to_str().unwrap()],
    );
    let node = wait_for("node n1 registered", Duration::from_secs(30), || {
        let (code, node) = admin_get(&s, "/api/v1/nodes/n1");
        (code == 200 && node["status"]["capacity"].is_object()).then_some(node)
    });
    assert_eq!(node["status"]["capacity"]["pods"], "3", "maxPods is the pods capacity");
    assert_eq!(node["status"]["allocatable"]["pods"], "3");

    // 160 KiB on one line (within the container's log budget of 3 x 64Ki): containerd
    // splits it into partial records, the logs join them.
    create(&s, pod("wide", "head -c 163840 /dev/zero | tr '\\0' y; echo"));
    wait_pod_phase(&s, "wide", "Succeeded");
    let wide = ok(admin_kubectl(&api, &["logs", "wide"]), "kubectl logs wide");
    assert_eq!(wide.len(), 163_840 + 1, "one line of 160 KiB and its newline");
    assert!(wide.trim_end().bytes().all(|b| b == b'y'));

    // A container that logs forever (~100 KB/s): its log is rotated at 64Ki, older files
    // gzipped, never more than 3 files, and kubectl logs still follows the current one.
    create(&s, pod("chatty", "while true; do head -c 2000 /dev/zero | tr '\\0' x; echo; sleep 0.02; done"));
    let chatty = wait_pod_phase(&s, "chatty", "Running");
    let uid = chatty["metadata"]["uid"].as_str().unwrap();
    let log_dir = d.join(format!("root/logs/pods/default_chatty_{uid}/app"));
    wait_for("two rotations, the older gzipped", Duration::from_secs(60), || {
        let now = files(&log_dir);
        assert!(now.len() <= 3, "containerLogMaxFiles 3: {now:?}");
        let gz = now.iter().filter(|(n, _)| n.starts_with("0.log.") && n.ends_with(".gz")).count();
        (gz >= 1 && now.len() == 3).then_some(Value::Null)
    });
    // Several more rounds: still at most 3 files, each bounded.
    for _ in 0..4 {
        std::thread::sleep(Duration::from_secs(3));
        let now = files(&log_dir);
        assert!(now.len() <= 3, "containerLogMaxFiles 3: {now:?}");
        // What a 3 s round lets through past the limit, with room to spare.
        assert!(now.iter().all(|(_, len)| *len < MAX_LOG_BYTES + (2 << 20)), "{now:?}");
        assert!(now.iter().any(|(n, _)| n == "0.log"), "the current file is always there: {now:?}");
    }
    // The current file reads after rotation. As the kubelet's, `--tail` reads the current
    // file only, which is empty for the moment between a rotation and the container's
    // next line: wait for a line rather than assume one is there.
    wait_for("kubectl logs --tail=1 reads the current file after rotation", Duration::from_secs(30), || {
        let tail = ok(admin_kubectl(&api, &["logs", "chatty", "--tail=1"]), "kubectl logs chatty");
        (tail.trim_end().len() == 2000).then_some(Value::Null)
    });

    // maxPods 3: chatty and two sleepers run; the fourth is rejected, never started.
    create(&s, pod("stubborn", "trap '' TERM; echo ignoring; while true; do sleep 1; done"));
    wait_pod_phase(&s, "stubborn", "Running");
    create(&s, pod("sleeper", "sleep 1000"));
    wait_pod_phase(&s, "sleeper", "Running");
    create(&s, pod("extra", "echo should never run"));
    let extra = wait_pod_phase(&s, "extra", "Failed");
    assert_eq!(extra["status"]["reason"], "OutOfpods", "{}", extra["status"]);
    assert_eq!(
        extra["status"]["message"],
        "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"
    );
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let cri = rt.block_on(CriRuntime::connect(&runtime.endpoint)).unwrap();
    let extra_uid =
        HashMap::from([("io.kubernetes.pod.uid".to_owned(), extra["metadata"]["uid"].as_str().unwrap().to_owned())]);
    assert!(rt.block_on(cri.list_pod_sandboxes(extra_uid.clone())).unwrap().is_empty(), "never started");
    // Events are posted in the background, as a kubelet's are.
    wait_for("the OutOfpods warning event", Duration::from_secs(20), || {
        let events = admin_get(&s, "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name=extra").1;
        events["items"]
            .as_array()?
            .iter()
            .any(|e| e["reason"] == "OutOfpods" && e["type"] == "Warning")
            .then_some(Value::Null)
    });

    // A container that ignores SIGTERM is killed when its 2 s grace period ends, and its
    // sandbox goes (until then it still counts against maxPods, as the kubelet's
    // terminating pods do).
    let stubborn_uid = HashMap::from([(
        "io.kubernetes.pod.uid".to_owned(),
        get(&s, "stubborn")["metadata"]["uid"].as_str().unwrap().to_owned(),
    )]);
    assert_eq!(admin_request(&s, Method::DELETE, "/api/v1/namespaces/default/pods/stubborn", None).0, 200);
    wait_for("stubborn's containers and sandbox removed", Duration::from_secs(60), || {
        let sandboxes = rt.block_on(cri.list_pod_sandboxes(stubborn_uid.clone())).unwrap();
        let containers = rt.block_on(cri.list_containers(stubborn_uid.clone())).unwrap();
        (sandboxes.is_empty() && containers.is_empty()).then_some(Value::Null)
    });
    wait_for("stubborn gone", Duration::from_secs(60), || {
        (admin_get(&s, "/api/v1/namespaces/default/pods/stubborn").0 == 404).then_some(Value::Null)
    });
    // Room again: a new pod runs; the rejected one stays as it was, never run (the node
    // acted on every event since: "later" came after and ran to its end).
    create(&s, pod("later", "echo later"));
    wait_pod_phase(&s, "later", "Succeeded");
    assert_eq!(get(&s, "extra")["status"]["phase"], "Failed");
    assert!(rt.block_on(cri.list_pod_sandboxes(extra_uid)).unwrap().is_empty(), "a rejected pod is never run");
}
