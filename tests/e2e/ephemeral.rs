//! End-to-end: ephemeral containers (`kubectl debug`) on containerd. The real kubectl adds
//! one through `pods/ephemeralcontainers`; the node runs it once in the pod's sandbox, in
//! its target container's process namespace, and reports it in
//! `status.ephemeralContainerStatuses`; `kubectl logs -c` reads it. One the pod's image check
//! refuses never starts, one Pod Security refuses is never stored, and the API keeps what
//! upstream keeps fixed (an ephemeral container never changes or goes; the main resource
//! cannot add one).

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

#[test]
fn kubectl_debug_runs_an_ephemeral_container_through_the_image_check_and_pod_security() {
    assert!(rustix::process::geteuid().is_root(), "running containers needs root");
    let dir = tempfile::Builder::new().prefix("eph").tempdir_in("/tmp").unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("api")).unwrap();
    let s = start(&d.join("api"), &[]);
    let api = d.join("api");
    let runtime = containerd::Containerd::start_with_app(&d.join("c"), &["sh", "cat", "sleep", "echo", "tr"]);
    let kubeconfig = node_kubeconfig(&api, &d.join("n1.kubeconfig"));
    let port = free_port().to_string();
    let _agent = spawn_agent_with(
        &kubeconfig,
        &d.join("root"),
        Some(&d.join("agent.log")),
        &["--container-runtime-endpoint", &runtime.endpoint, "--port", &port],
    );
    // A namespace enforcing baseline, and a long-running pod in it.
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team",
        "labels": {"pod-security.kubernetes.io/enforce": "baseline"}}});
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces", Some(ns)).0, 201);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
        "spec": {"terminationGracePeriodSeconds": 1, "automountServiceAccountToken": false,
            "containers": [{"name": "app", "image": APP_IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "exec sleep 3600"]}]}});
    let pods = "/api/v1/namespaces/team/pods";
    let created = wait_for("pod web created", Duration::from_secs(30), || {
        let (code, body) = admin_request(&s, Method::POST, pods, Some(pod.clone()));
        (code == 201).then_some(body)
    });
    assert_eq!(created["metadata"]["name"], "web");
    wait_for("pod web running", Duration::from_secs(60), || {
        let (_, p) = admin_get(&s, &format!("{pods}/web"));
        (p["status"]["phase"] == "Running").then_some(p)
    });

    // `kubectl debug -n team web --image IMAGE --image-pull-policy Never -c NAME EXTRA…`.
    let debug = |image: &str, name: &str, extra: &[&str]| {
        let mut args = vec!["debug", "-n", "team", "web", "--image", image, "--image-pull-policy", "Never", "-c", name];
        args.extend_from_slice(extra);
        admin_kubectl(&api, &args)
    };
    // kubectl debug: an ephemeral container in the app's process namespace.
    let out = debug(
        APP_IMAGE,
        "dbg",
        &["--target", "app", "--", "/bin/sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline; echo; echo debugged"],
    );
    assert!(out.status.success(), "kubectl debug: {}", String::from_utf8_lossy(&out.stderr));
    let finished = wait_for("the ephemeral container finished", Duration::from_secs(60), || {
        let (_, p) = admin_get(&s, &format!("{pods}/web"));
        let status = p["status"]["ephemeralContainerStatuses"].as_array()?.iter().find(|c| c["name"] == "dbg")?.clone();
        status["state"]["terminated"].is_object().then_some(p)
    });
    let status = &finished["status"]["ephemeralContainerStatuses"][0];
    assert_eq!(status["state"]["terminated"]["exitCode"], 0, "{status}");
    assert_eq!(finished["spec"]["ephemeralContainers"][0]["targetContainerName"], "app");
    // Not a regular container: the pod is still Running with its one container Ready.
    assert_eq!(finished["status"]["phase"], "Running", "{finished}");
    assert_eq!(finished["status"]["containerStatuses"].as_array().unwrap().len(), 1);
    let logs = ok(admin_kubectl(&api, &["logs", "-n", "team", "web", "-c", "dbg"]), "kubectl logs -c dbg");
    let lines: Vec<&str> = logs.lines().collect();
    assert_eq!(lines[0].trim(), "sleep 3600", "PID 1 is the target's process: {logs}");
    assert_eq!(lines[1], "debugged");

    // Pod Security judges an ephemeral container as any container: a privileged one is
    // refused (kubectl debug's sysadmin profile), and nothing is stored.
    let out = debug(APP_IMAGE, "root", &["--profile", "sysadmin", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("violates PodSecurity \"baseline:latest\""), "{stderr}");
    let (_, p) = admin_get(&s, &format!("{pods}/web"));
    assert_eq!(p["spec"]["ephemeralContainers"].as_array().unwrap().len(), 1, "{p}");

    // An image this pod may not use (never pulled, pull policy Never) is the image check's
    // refusal: the container waits with the kubelet's reason and never starts.
    let out = debug("podpass.local/absent:1", "absent", &["--", "true"]);
    assert!(out.status.success(), "kubectl debug: {}", String::from_utf8_lossy(&out.stderr));
    let waiting = wait_for("the refused ephemeral container reported", Duration::from_secs(60), || {
        let (_, p) = admin_get(&s, &format!("{pods}/web"));
        let status =
            p["status"]["ephemeralContainerStatuses"].as_array()?.iter().find(|c| c["name"] == "absent")?.clone();
        (status["state"]["waiting"]["reason"] == "ErrImageNeverPull").then_some(status)
    });
    assert!(waiting["containerID"].is_null(), "never created: {waiting}");

    // What upstream keeps fixed: an ephemeral container never changes or goes, and the main
    // resource adds none.
    let path = format!("{pods}/web/ephemeralcontainers");
    let (code, current) = admin_get(&s, &path);
    assert_eq!(code, 200, "{current}");
    assert_eq!(current["kind"], "Pod");
    let mut removed = current.clone();
    removed["spec"]["ephemeralContainers"] = json!([]);
    let (code, status) = admin_request(&s, Method::PUT, &path, Some(removed));
    assert_eq!(code, 422, "{status}");
    assert!(status["message"].as_str().unwrap().contains("may not be removed"), "{status}");
    let mut added: Value = current.clone();
    added["spec"]["ephemeralContainers"].as_array_mut().unwrap().push(json!({"name": "sneaky", "image": APP_IMAGE}));
    let (code, updated) = admin_request(&s, Method::PUT, &format!("{pods}/web"), Some(added));
    assert_eq!(code, 200, "{updated}");
    assert!(
        !updated["spec"]["ephemeralContainers"].as_array().unwrap().iter().any(|c| c["name"] == "sneaky"),
        "the main resource keeps the stored ephemeral containers: {updated}"
    );
}
