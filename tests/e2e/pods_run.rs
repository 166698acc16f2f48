//! End-to-end: pods run. A control plane, a containerd of podpass's own (root, state and
//! socket in the test's directory; podpass's sandbox image and a busybox application image
//! made and imported locally) and the node agent on it. A pod without a node is scheduled,
//! its container reads its own projected token and exits 0 (`Succeeded`, `Completed`); one
//! that exits 3 under `restartPolicy: Never` is `Failed` with the code; one that exits 1
//! under `Always` is restarted (the node's relist sees the exit) and backs off; a long-running one
//! is `Running` and Ready with its own IP, survives the agent's `kill -9` (the new agent
//! adopts its container), and deleting it stops and removes its containers and sandbox.

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
use registry::free_port;
use support::*;

/// A containerd for the test with podpass's sandbox image and a busybox application
/// image loaded.
fn start_runtime(dir: &Path) -> containerd::Containerd {
    let applets = ["sh", "cat", "cut", "echo", "sleep", "hostname", "stat", "id", "head", "tr"];
    containerd::Containerd::start_with_app(dir, &applets)
}

fn pod(name: &str, restart: &str, script: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 2,
            "volumes": [{"name": "reg", "projected": {"sources": [{"serviceAccountToken": {
                "audience": "registry.example", "expirationSeconds": 3600, "path": "token"}}]}}],
            "containers": [{"name": "app", "image": APP_IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", script],
                "volumeMounts": [{"name": "reg", "mountPath": "/var/run/secrets/tokens"}]}]}})
}

fn base64url(segment: &str) -> Vec<u8> {
    data_encoding::BASE64URL_NOPAD.decode(segment.trim().as_bytes()).unwrap()
}

#[test]
fn scheduled_pods_run_read_their_own_token_exit_and_are_cleaned_up() {
    assert!(rustix::process::geteuid().is_root(), "running containers needs root");
    let dir = tempfile::Builder::new().prefix("pr").tempdir_in("/tmp").unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("api")).unwrap();
    let s = start(&d.join("api"), &[]);
    let runtime = start_runtime(&d.join("c"));
    let kubeconfig = node_kubeconfig(&d.join("api"), &d.join("n1.kubeconfig"));
    let endpoint = runtime.endpoint.clone();
    let port = free_port().to_string();
    let agent = spawn_agent_with(
        &kubeconfig,
        &d.join("root"),
        Some(&d.join("agent.log")),
        &["--container-runtime-endpoint", &endpoint, "--port", &port],
    );

    // The node says what runs its containers.
    let node = wait_for("node n1 registered", Duration::from_secs(30), || {
        let (code, node) = admin_get(&s, "/api/v1/nodes/n1");
        (code == 200 && node["status"]["nodeInfo"].is_object()).then_some(node)
    });
    assert!(
        node["status"]["nodeInfo"]["containerRuntimeVersion"].as_str().unwrap().starts_with("containerd://1."),
        "{node}"
    );

    // A pod reads its own token and exits 0.
    let script = "cut -d. -f2 /var/run/secrets/tokens/token; hostname";
    assert_eq!(
        admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(pod("reader", "Never", script))).0,
        201
    );
    let reader = wait_pod_phase(&s, "reader", "Succeeded");
    let c = &reader["status"]["containerStatuses"][0];
    assert_eq!(c["state"]["terminated"]["exitCode"], 0, "{c}");
    assert_eq!(c["state"]["terminated"]["reason"], "Completed");
    assert!(c["containerID"].as_str().unwrap().starts_with("containerd://"), "{c}");
    assert_eq!(reader["spec"]["nodeName"], "n1", "scheduled");
    // A finished pod holds no running sandbox.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let cri = rt.block_on(CriRuntime::connect(&endpoint)).unwrap();
    let reader_uid =
        HashMap::from([("io.kubernetes.pod.uid".to_owned(), reader["metadata"]["uid"].as_str().unwrap().to_owned())]);
    wait_for("the finished pod's sandbox stopped", Duration::from_secs(20), || {
        let sandboxes = rt.block_on(cri.list_pod_sandboxes(reader_uid.clone())).unwrap();
        sandboxes.iter().all(|s| s.state != podpass_node::runtime::SANDBOX_READY).then_some(Value::Null)
    });
    let uid = reader["metadata"]["uid"].as_str().unwrap();
    let log = std::fs::read_to_string(d.join(format!("root/logs/pods/default_reader_{uid}/app/0.log"))).unwrap();
    let lines: Vec<&str> = log.lines().map(|l| l.splitn(4, ' ').nth(3).unwrap_or_default()).collect();
    let claims: Value = serde_json::from_slice(&base64url(lines[0])).unwrap();
    assert_eq!(claims["aud"], json!(["registry.example"]));
    assert_eq!(claims["kubernetes.io"]["pod"]["name"], "reader", "the token is this pod's own: {claims}");
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], uid);
    assert_eq!(lines[1], "reader", "its own hostname");

    // kubectl logs reads the same through the API server, which asks the node.
    let api = d.join("api");
    let logs = ok(admin_kubectl(&api, &["logs", "reader"]), "kubectl logs");
    assert_eq!(logs.lines().collect::<Vec<_>>(), lines, "{logs}");
    let tail = ok(admin_kubectl(&api, &["logs", "reader", "--tail=1", "--timestamps"]), "kubectl logs --tail");
    assert!(tail.starts_with("20") && tail.trim_end().ends_with(" reader"), "{tail}");
    let previous = admin_kubectl(&api, &["logs", "reader", "--previous"]);
    let stderr = String::from_utf8_lossy(&previous.stderr);
    assert!(!previous.status.success() && stderr.contains("previous terminated container"), "{stderr}");
    let wrong = admin_kubectl(&api, &["logs", "reader", "-c", "nope"]);
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("container nope is not valid for pod reader"));

    // The environment from a config map and a secret, with $(VAR) expansion; a missing
    // secret is the kubelet's CreateContainerConfigError.
    let cm =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"mode": "blue"}});
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/default/configmaps", Some(cm)).0, 201);
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "stringData": {"password": "s3cr3t"}});
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/default/secrets", Some(secret)).0, 201);
    let mut envy = pod("envy", "Never", "echo $GREETING $PASS $CFG_mode; cat /etc/creds/password /etc/cfg/mode");
    envy["spec"]["volumes"] = json!([
        {"name": "creds", "secret": {"secretName": "creds"}},
        {"name": "cfg", "configMap": {"name": "settings"}}]);
    envy["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "creds", "mountPath": "/etc/creds"}, {"name": "cfg", "mountPath": "/etc/cfg"}]);
    envy["spec"]["containers"][0]["env"] = json!([
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
        {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        {"name": "GREETING", "value": "hello $(MODE)"},
        {"name": "GONE", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": true}}}]);
    envy["spec"]["containers"][0]["envFrom"] = json!([{"prefix": "CFG_", "configMapRef": {"name": "settings"}}]);
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(envy)).0, 201);
    let envy = wait_pod_phase(&s, "envy", "Succeeded");
    let uid = envy["metadata"]["uid"].as_str().unwrap();
    let log = std::fs::read_to_string(d.join(format!("root/logs/pods/default_envy_{uid}/app/0.log"))).unwrap();
    let lines: Vec<&str> = log.lines().map(|l| l.splitn(4, ' ').nth(3).unwrap_or_default()).collect();
    assert_eq!(lines, ["hello blue s3cr3t blue", "s3cr3tblue"], "env, then the secret and config map volumes: {log}");
    let mut missing = pod("missing", "Never", "true");
    missing["spec"]["containers"][0]["env"] =
        json!([{"name": "X", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}}]);
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(missing)).0, 201);
    let waiting = wait_for("missing secret reported", Duration::from_secs(30), || {
        let (_, p) = admin_get(&s, "/api/v1/namespaces/default/pods/missing");
        let w = p["status"]["containerStatuses"][0]["state"]["waiting"].clone();
        (w["reason"] == "CreateContainerConfigError").then_some(w)
    });
    assert_eq!(waiting["message"], "secret \"absent\" not found", "{waiting}");

    // runAsUser and fsGroup: the process runs as that user, and its token file is its own,
    // 0640 and the fsGroup's (the kubelet's FsUser and SetVolumeOwnership).
    // The token volume and a memory emptyDir are tmpfs mounts, the latter of its sizeLimit
    // (a 2 MiB write into 1 MiB fails).
    let mut owned = pod(
        "owned",
        "Never",
        "id -u; id -G; stat -L -c '%a %u %g' /var/run/secrets/tokens/token; \
         stat -f -c %T /var/run/secrets/tokens /mem; head -c 2097152 /dev/zero > /mem/f 2>/dev/null || echo full; \
         echo scratch > /scratch/f",
    );
    owned["spec"]["securityContext"] = json!({"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000});
    let volumes = owned["spec"]["volumes"].as_array_mut().unwrap();
    volumes.push(json!({"name": "scratch", "emptyDir": {}}));
    volumes.push(json!({"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}));
    let mounts = owned["spec"]["containers"][0]["volumeMounts"].as_array_mut().unwrap();
    mounts.push(json!({"name": "scratch", "mountPath": "/scratch"}));
    mounts.push(json!({"name": "mem", "mountPath": "/mem"}));
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(owned)).0, 201);
    let owned = wait_for("pod owned finished", Duration::from_secs(60), || {
        let (_, p) = admin_get(&s, "/api/v1/namespaces/default/pods/owned");
        matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")).then_some(p)
    });
    let uid = owned["metadata"]["uid"].as_str().unwrap();
    let log =
        std::fs::read_to_string(d.join(format!("root/logs/pods/default_owned_{uid}/app/0.log"))).unwrap_or_default();
    assert_eq!(owned["status"]["phase"], "Succeeded", "{}\n{log}", owned["status"]);
    let lines: Vec<&str> = log.lines().map(|l| l.splitn(4, ' ').nth(3).unwrap_or_default()).collect();
    assert_eq!(lines[0], "1000", "{log}");
    assert!(lines[1].split(' ').any(|g| g == "2000") && lines[1].starts_with("3000"), "{log}");
    assert_eq!(lines[2], "640 1000 2000", "{log}");
    assert_eq!(&lines[3..6], ["tmpfs", "tmpfs", "full"], "{log}");

    // A memory limit is the container's cgroup's: past it the kernel kills the container,
    // and the status says OOMKilled.
    let mut hungry = pod("hungry", "Never", "x=$(head -c 134217728 /dev/zero | tr '\\0' a); echo survived");
    hungry["spec"]["containers"][0]["resources"] = json!({"limits": {"memory": "32Mi"}});
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(hungry)).0, 201);
    let hungry = wait_pod_phase(&s, "hungry", "Failed");
    let t = &hungry["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["reason"], "OOMKilled", "{t}");

    // Exit 3 under Never: Failed, with the code.
    assert_eq!(
        admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(pod("fails", "Never", "exit 3"))).0,
        201
    );
    let failed = wait_pod_phase(&s, "fails", "Failed");
    let t = &failed["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!((t["exitCode"].as_i64(), t["reason"].as_str()), (Some(3), Some("Error")), "{t}");

    // Init containers run in order, each to completion before the next (the plan holds the
    // rest until one succeeds), then the app; a failing init container under Never fails
    // the pod and the app never starts.
    let with_inits = |name: &str, second: &str| {
        let mut p = pod(name, "Never", "cat /work/first /work/second");
        let init = |n: &str, script: &str| {
            json!({"name": n, "image": APP_IMAGE, "imagePullPolicy": "Never", "command": ["/bin/sh", "-c", script],
                "volumeMounts": [{"name": "work", "mountPath": "/work"}]})
        };
        p["spec"]["volumes"].as_array_mut().unwrap().push(json!({"name": "work", "emptyDir": {}}));
        p["spec"]["initContainers"] = json!([init("first", "sleep 1; echo one > /work/first"), init("second", second)]);
        p["spec"]["containers"][0]["volumeMounts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "work", "mountPath": "/work"}));
        p
    };
    let ordered = with_inits("ordered", "test -f /work/first && echo two > /work/second");
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(ordered)).0, 201);
    let done = wait_pod_phase(&s, "ordered", "Succeeded");
    let inits = done["status"]["initContainerStatuses"].as_array().unwrap();
    assert_eq!(inits.len(), 2, "{}", done["status"]);
    for i in inits {
        assert_eq!(i["state"]["terminated"]["reason"], "Completed", "{i}");
    }
    let blocked = with_inits("blocked", "exit 4");
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(blocked)).0, 201);
    let failed = wait_pod_phase(&s, "blocked", "Failed");
    let second = &failed["status"]["initContainerStatuses"][1]["state"]["terminated"];
    assert_eq!(second["exitCode"], 4, "{}", failed["status"]);
    assert!(
        failed["status"]["containerStatuses"][0]["state"]["running"].is_null()
            && failed["status"]["containerStatuses"][0]["state"]["terminated"].is_null(),
        "the app never started: {}",
        failed["status"]
    );

    // Exit 1 under Always: no poll watches the container, the node's relist sees it exit
    // and the worker restarts it at once, then backs off (CrashLoopBackOff, 10 s first).
    assert_eq!(
        admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(pod("crasher", "Always", "exit 1"))).0,
        201
    );
    let restarted = wait_for("crasher restarted", Duration::from_secs(60), || {
        let (_, p) = admin_get(&s, "/api/v1/namespaces/default/pods/crasher");
        let c = p["status"]["containerStatuses"][0].clone();
        (c["restartCount"].as_i64() >= Some(1)).then_some(c)
    });
    assert_eq!(restarted["lastState"]["terminated"]["exitCode"], 1, "{restarted}");
    let waiting = wait_for("crasher backing off", Duration::from_secs(30), || {
        let (_, p) = admin_get(&s, "/api/v1/namespaces/default/pods/crasher");
        let w = p["status"]["containerStatuses"][0]["state"]["waiting"].clone();
        (w["reason"] == "CrashLoopBackOff").then_some(w)
    });
    assert!(
        waiting["message"]
            .as_str()
            .unwrap()
            .starts_with("back-off 10s restarting failed container=app pod=crasher_default("),
        "{waiting}"
    );
    assert_eq!(admin_request(&s, Method::DELETE, "/api/v1/namespaces/default/pods/crasher", None).0, 200);

    // A long-running pod: Running and Ready, with an address of its own network.
    assert_eq!(
        admin_request(
            &s,
            Method::POST,
            "/api/v1/namespaces/default/pods",
            Some(pod("server", "Always", "echo serving; sleep 1000"))
        )
        .0,
        201
    );
    wait_pod_phase(&s, "server", "Running");
    wait_for("server Ready", Duration::from_secs(20), || {
        let (_, p) = admin_get(&s, "/api/v1/namespaces/default/pods/server");
        let ready = p["status"]["conditions"].as_array()?.iter().any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then_some(p)
    });
    let ip = admin_get(&s, "/api/v1/namespaces/default/pods/server").1["status"]["podIP"].as_str().unwrap().to_owned();
    assert!(ip.starts_with("127."), "{ip}");
    let server_uid =
        admin_get(&s, "/api/v1/namespaces/default/pods/server").1["metadata"]["uid"].as_str().unwrap().to_owned();
    // Following a running container's log streams what it wrote and stays open.
    let resp = streaming_client(&api, Duration::from_secs(5))
        .get(format!("{}/api/v1/namespaces/default/pods/server/log?follow=true", s.url))
        .bearer_auth(admin_token(&api))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(resp), &mut first).unwrap();
    assert_eq!(first, "serving\n");
    let by_uid = HashMap::from([("io.kubernetes.pod.uid".to_owned(), server_uid.clone())]);
    // `podpass node explain` shows the running container's state beside its image decision;
    // the finished one's, terminated with its reason and code.
    let explain = |pod: &str| -> Value {
        let out = std::process::Command::new(env!("PODPASS_BIN"))
            .args(["node", "explain", "--kubeconfig", kubeconfig.to_str().unwrap()])
            .args(["--root-dir", d.join("root").to_str().unwrap(), "--pod", pod, "-o", "json"])
            .args(["--container-runtime-endpoint", &endpoint])
            .output()
            .unwrap();
        serde_json::from_str(&ok(out, "node explain")).unwrap()
    };
    let running = explain("default/server");
    assert_eq!(running["containers"][0]["status"]["reason"], "Running", "{running}");
    let done = explain("default/fails");
    assert_eq!(done["containers"][0]["status"]["reason"], "Terminated", "{done}");
    assert_eq!(done["containers"][0]["status"]["message"], "Error, exit code 3", "{done}");
    let before = rt.block_on(cri.list_containers(by_uid.clone())).unwrap();
    assert_eq!(before.len(), 1, "{before:?}");

    // A sandbox of another kubelet sharing this containerd (no podpass.dev/node label of
    // n1's): no agent of podpass ever takes it for an orphan.
    let foreign_uid = HashMap::from([("io.kubernetes.pod.uid".to_owned(), "another-kubelets-pod".to_owned())]);
    let foreign = podpass_node::runtime::PodSandboxConfig {
        metadata: Some(podpass_node::runtime::PodSandboxMetadata {
            name: "theirs".into(),
            uid: "another-kubelets-pod".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: "theirs".into(),
        log_directory: d.join("theirs").display().to_string(),
        labels: foreign_uid.clone(),
        ..Default::default()
    };
    rt.block_on(cri.run_pod_sandbox(foreign)).unwrap();

    // The agent killed with -9 while the container runs: a new agent adopts it (found by
    // its labels) and starts no second one.
    drop(agent);
    let _agent = spawn_agent_with(
        &kubeconfig,
        &d.join("root"),
        Some(&d.join("agent2.log")),
        &["--container-runtime-endpoint", &endpoint, "--port", &port],
    );
    // Once the new agent has synced the pod (its worker logged under the pod's span),
    // nothing more was started.
    wait_for("the new agent synced the running pod", Duration::from_secs(60), || {
        let log = std::fs::read_to_string(d.join("agent2.log")).unwrap_or_default();
        log.lines().any(|l| l.contains("\"pod\":\"server\"") && l.contains("image may be used")).then_some(Value::Null)
    });
    let after = rt.block_on(cri.list_containers(by_uid.clone())).unwrap();
    assert_eq!(after.iter().map(|c| &c.id).collect::<Vec<_>>(), before.iter().map(|c| &c.id).collect::<Vec<_>>());
    assert_eq!(rt.block_on(cri.list_pod_sandboxes(by_uid.clone())).unwrap().len(), 1, "no second sandbox");
    let theirs = rt.block_on(cri.list_pod_sandboxes(foreign_uid)).unwrap();
    assert!(theirs.len() == 1 && theirs[0].state == podpass_node::runtime::SANDBOX_READY, "{theirs:?}");
    let status = admin_get(&s, "/api/v1/namespaces/default/pods/server").1["status"].clone();
    assert_eq!(status["phase"], "Running", "{status}");
    assert_eq!(status["containerStatuses"][0]["restartCount"], 0, "{status}");

    // Deleting it stops its container (SIGTERM, then SIGKILL after its 2 s) and removes
    // its sandbox; then the deletion is confirmed.
    assert_eq!(admin_request(&s, Method::DELETE, "/api/v1/namespaces/default/pods/server", None).0, 200);
    wait_for("server gone", Duration::from_secs(60), || {
        (admin_get(&s, "/api/v1/namespaces/default/pods/server").0 == 404).then_some(Value::Null)
    });
    wait_for("the server's sandbox and containers removed", Duration::from_secs(30), || {
        let sandboxes = rt.block_on(cri.list_pod_sandboxes(by_uid.clone())).unwrap();
        let containers = rt.block_on(cri.list_containers(by_uid.clone())).unwrap();
        (sandboxes.is_empty() && containers.is_empty()).then_some(Value::Null)
    });
}
