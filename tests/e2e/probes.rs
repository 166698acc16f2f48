//! End-to-end: the node's prober on real containers (a control plane, a containerd of
//! podpass's own with a busybox image, the node agent). A readiness exec probe holds a
//! running container not ready until its file exists, and takes it out again once the file
//! goes; a tcpSocket readiness probe on a named port reaches a server inside the pod's own
//! (loopback-only) network namespace; a failing httpGet liveness probe gets the container
//! killed and restarted with the kubelet's events; a startup probe holds the others and its
//! failure restarts the container; under `restartPolicy: Never` a liveness failure kills
//! the container for good.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

mod containerd;
mod registry;
mod support;
use containerd::APP_IMAGE;
use registry::free_port;
use support::*;

fn pod(name: &str, restart: &str, script: &str, probes: Value) -> Value {
    let mut container = json!({"name": "app", "image": APP_IMAGE, "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", script], "ports": [{"name": "web", "containerPort": 9000}]});
    for (k, v) in probes.as_object().unwrap() {
        container[k] = v.clone();
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 2, "containers": [container]}})
}

fn status_of(s: &Server, name: &str) -> Value {
    admin_get(s, &format!("/api/v1/namespaces/default/pods/{name}")).1
}

fn condition(pod: &Value, kind: &str) -> Value {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .cloned()
        .unwrap_or(Value::Null)
}

/// The pod's events as `reason: message` lines.
fn events(s: &Server, name: &str) -> Vec<String> {
    let (_, list) =
        admin_get(s, &format!("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name={name}"));
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| format!("{}: {}", e["reason"].as_str().unwrap_or(""), e["message"].as_str().unwrap_or("")))
        .collect()
}

fn wait_event(s: &Server, name: &str, line: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let seen = events(s, name);
        if seen.iter().any(|e| e == line) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "event {line:?} on {name}; its events: {seen:#?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn probes_gate_readiness_and_restart_what_fails_them() {
    assert!(rustix::process::geteuid().is_root(), "running containers needs root");
    let dir = tempfile::Builder::new().prefix("pb").tempdir_in("/tmp").unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("api")).unwrap();
    let s = start(&d.join("api"), &[]);
    let applets = ["sh", "cat", "sleep", "touch", "rm", "mkdir", "echo", "httpd"];
    let runtime = containerd::Containerd::start_with_app(&d.join("c"), &applets);
    let kubeconfig = node_kubeconfig(&d.join("api"), &d.join("n1.kubeconfig"));
    let port = free_port().to_string();
    let _agent = spawn_agent_with(
        &kubeconfig,
        &d.join("root"),
        Some(&d.join("agent.log")),
        &["--container-runtime-endpoint", &runtime.endpoint, "--port", &port],
    );
    let create =
        |p: Value| assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(p)).0, 201);

    let every_second = |handler: Value, extra: Value| {
        let mut probe = json!({"periodSeconds": 1});
        for (k, v) in handler.as_object().unwrap().iter().chain(extra.as_object().unwrap()) {
            probe[k] = v.clone();
        }
        probe
    };
    // Not ready until /tmp/ready exists, ready while it does, not ready once it is gone.
    create(pod(
        "ready-later",
        "Always",
        "sleep 8; touch /tmp/ready; sleep 10; rm /tmp/ready; exec sleep 3600",
        json!({"readinessProbe": every_second(json!({"exec": {"command": ["cat", "/tmp/ready"]}}), json!({}))}),
    ));
    // Served inside the pod's own network namespace, reached on the pod's IP by port name.
    create(pod(
        "tcp-ready",
        "Always",
        "exec httpd -f -p 9000 -h /",
        json!({"readinessProbe": every_second(json!({"tcpSocket": {"port": "web"}}), json!({}))}),
    ));
    // Healthy for six seconds, then /healthz answers 404.
    create(pod(
        "live-http",
        "Always",
        "mkdir -p /www; echo ok > /www/healthz; (sleep 6; rm /www/healthz) & exec httpd -f -p 8080 -h /www",
        json!({"livenessProbe": every_second(json!({"httpGet": {"path": "/healthz", "port": 8080}}),
            json!({"failureThreshold": 2, "terminationGracePeriodSeconds": 1}))}),
    ));
    // Never starts: nothing listens on 9000. The readiness probe waits for the start.
    create(pod(
        "slow-start",
        "Always",
        "exec sleep 3600",
        json!({"startupProbe": every_second(json!({"tcpSocket": {"port": 9000}}), json!({"failureThreshold": 3})),
            "readinessProbe": every_second(json!({"exec": {"command": ["cat", "/nope"]}}), json!({}))}),
    ));
    // Liveness failure under Never: killed, not started again.
    create(pod(
        "never-live",
        "Never",
        "exec sleep 3600",
        json!({"livenessProbe": every_second(json!({"exec": {"command": ["sh", "-c", "echo sick; exit 1"]}}),
            json!({"failureThreshold": 1, "terminationGracePeriodSeconds": 1}))}),
    ));

    // Readiness: running but not ready, then ready, then not ready again.
    let not_ready = wait_for("ready-later running, not ready", Duration::from_secs(90), || {
        let p = status_of(&s, "ready-later");
        let c = &p["status"]["containerStatuses"][0];
        (c["state"]["running"].is_object() && c["ready"] == false).then_some(p)
    });
    assert_eq!(condition(&not_ready, "Ready")["reason"], "ContainersNotReady", "{}", not_ready["status"]);
    assert_eq!(not_ready["status"]["containerStatuses"][0]["started"], true, "no startup probe: started once running");
    let ready = wait_for("ready-later ready", Duration::from_secs(60), || {
        let p = status_of(&s, "ready-later");
        (condition(&p, "Ready")["status"] == "True").then_some(p)
    });
    assert_eq!(ready["status"]["containerStatuses"][0]["ready"], true);
    wait_event(
        &s,
        "ready-later",
        "Unhealthy: Readiness probe failed: cat: can't open '/tmp/ready': No such file or directory\n",
    );
    let again = wait_for("ready-later not ready again", Duration::from_secs(60), || {
        let p = status_of(&s, "ready-later");
        (condition(&p, "Ready")["status"] == "False").then_some(p)
    });
    assert_eq!(again["status"]["containerStatuses"][0]["restartCount"], 0, "readiness restarts nothing");

    wait_for("tcp-ready ready", Duration::from_secs(60), || {
        let p = status_of(&s, "tcp-ready");
        (condition(&p, "Ready")["status"] == "True").then_some(p)
    });

    // Liveness over HTTP: the 404s get it killed and restarted, in the kubelet's words.
    wait_event(&s, "live-http", "Unhealthy: Liveness probe failed: HTTP probe failed with statuscode: 404");
    wait_event(&s, "live-http", "Killing: Container app failed liveness probe, will be restarted");
    let restarted = wait_for("live-http restarted", Duration::from_secs(60), || {
        let p = status_of(&s, "live-http");
        let c = &p["status"]["containerStatuses"][0];
        (c["restartCount"].as_i64() >= Some(1) && c["state"]["running"].is_object()).then_some(p)
    });
    let last = &restarted["status"]["containerStatuses"][0]["lastState"]["terminated"];
    assert!(last["exitCode"].as_i64().is_some_and(|c| c != 0), "the killed container's end: {last}");

    // Startup: not started, not ready, and restarted once it fails three times.
    let starting = status_of(&s, "slow-start");
    let c = &starting["status"]["containerStatuses"][0];
    if c["state"]["running"].is_object() && c["restartCount"] == 0 {
        assert_eq!(c["started"], false, "{c}");
        assert_eq!(c["ready"], false, "{c}");
    }
    let ip = wait_for("slow-start has an IP", Duration::from_secs(60), || {
        let p = status_of(&s, "slow-start");
        p["status"]["podIP"].as_str().map(|ip| json!(ip))
    });
    let ip = ip.as_str().unwrap();
    wait_event(
        &s,
        "slow-start",
        &format!("Unhealthy: Startup probe failed: dial tcp {ip}:9000: connect: connection refused"),
    );
    wait_event(&s, "slow-start", "Killing: Container app failed startup probe, will be restarted");
    wait_for("slow-start restarted", Duration::from_secs(60), || {
        let p = status_of(&s, "slow-start");
        (p["status"]["containerStatuses"][0]["restartCount"].as_i64() >= Some(1)).then_some(p)
    });
    assert!(
        !events(&s, "slow-start").iter().any(|e| e.starts_with("Unhealthy: Readiness")),
        "the readiness probe waits for the start: {:?}",
        events(&s, "slow-start")
    );

    // Under Never the failed container is killed and the pod is done.
    let failed = wait_pod_phase(&s, "never-live", "Failed");
    let c = &failed["status"]["containerStatuses"][0];
    assert_eq!(c["restartCount"], 0, "{c}");
    assert!(c["state"]["terminated"]["exitCode"].as_i64().is_some_and(|code| code != 0), "{c}");
    wait_event(&s, "never-live", "Killing: Container app failed liveness probe");
    wait_event(&s, "never-live", "Unhealthy: Liveness probe failed: sick\n");
}
