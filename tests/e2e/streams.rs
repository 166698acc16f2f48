//! End-to-end: `kubectl exec` (issue 55) through the API server and the node to containerd.
//! The real kubectl (≥ 1.30 speaks WebSocket `v5.channel.k8s.io`) asks the API server, which
//! authorizes `pods/exec` (a WebSocket's GET needs `create`, as upstream since 1.31), audits
//! it and splices the connection to the node's `/exec`; the node (which allows only
//! identities with `nodes/proxy`) asks containerd over CRI `Exec` and relays to its stream
//! server over SPDY. stdout and stderr arrive apart, stdin and its end reach the command,
//! the exit code is kubectl's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

mod containerd;
mod registry;
mod support;
use containerd::APP_IMAGE;
use registry::free_port;
use support::*;

/// The real kubectl with `kubeconfig`, `input` on its stdin.
fn kubectl_input(
    kubeconfig: &std::path::Path,
    cache: &std::path::Path,
    args: &[&str],
    input: &[u8],
) -> std::process::Output {
    kubectl_input_env(kubeconfig, cache, &[], args, input)
}

/// [`kubectl_input`] with `env` set for kubectl.
fn kubectl_input_env(
    kubeconfig: &std::path::Path,
    cache: &std::path::Path,
    env: &[(&str, &str)],
    args: &[&str],
    input: &[u8],
) -> std::process::Output {
    let mut child = Command::new("kubectl")
        .envs(env.iter().copied())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// The real kubectl as the admin of `api`, given `input` on a stdin kept open until its
/// output shows every one of `expect` (at most a minute), then closed; what it printed.
/// An attach without `stdinOnce` ends when its stdin does (upstream's semantics), so a
/// person typing keeps it open as this does.
fn interact(api: &std::path::Path, args: &[&str], input: &[u8], expect: &[&str]) -> String {
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(api.join("admin.kubeconfig"))
        .arg("--cache-dir")
        .arg(api.join("kube-cache"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = std::io::Read::read(&mut stdout, &mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    while !expect.iter().all(|e| String::from_utf8_lossy(&seen).contains(e)) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(chunk) => seen.extend(chunk),
            Err(_) => break,
        }
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    String::from_utf8_lossy(&seen).into_owned()
}

#[test]
fn kubectl_exec_runs_through_the_api_server_and_the_node_under_rbac() {
    assert!(rustix::process::geteuid().is_root(), "running containers needs root");
    let dir = tempfile::Builder::new().prefix("streams").tempdir_in("/tmp").unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("api")).unwrap();
    let audit_log = d.join("audit.log");
    let s = start(&d.join("api"), &["--audit-log-path", audit_log.to_str().unwrap()]);
    let api = d.join("api");
    let runtime = containerd::Containerd::start_with_app(
        &d.join("c"),
        &["sh", "cat", "sleep", "echo", "wc", "ps", "tty", "tar", "mkdir", "httpd", "ls"],
    );
    let kubeconfig = node_kubeconfig(&api, &d.join("n1.kubeconfig"));
    let port = free_port();
    let _agent = spawn_agent_with(
        &kubeconfig,
        &d.join("root"),
        Some(&d.join("agent.log")),
        &["--container-runtime-endpoint", &runtime.endpoint, "--port", &port.to_string()],
    );
    for ns in ["team", "other"] {
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces", Some(body)).0, 201);
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"terminationGracePeriodSeconds": 1, "automountServiceAccountToken": false,
            "containers": [{"name": "app", "image": APP_IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "exec sleep 3600"]}]}});
    for ns in ["team", "other"] {
        let pods = format!("/api/v1/namespaces/{ns}/pods");
        wait_for(&format!("pod {ns}/web created"), Duration::from_secs(30), || {
            let (code, body) = admin_request(&s, Method::POST, &pods, Some(pod.clone()));
            (code == 201 || code == 409).then_some(body)
        });
        wait_for(&format!("pod {ns}/web running"), Duration::from_secs(60), || {
            let (_, p) = admin_get(&s, &format!("{pods}/web"));
            (p["status"]["phase"] == "Running").then_some(p)
        });
    }

    // stdout and stderr apart, the exit code kubectl's own.
    let out =
        admin_kubectl(&api, &["exec", "-n", "team", "web", "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n", "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("err\n"), "{out:?}");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    // stdin, and its end (v5's close signal): cat ends once its input does.
    let input: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let cache = api.join("kube-cache");
    let out =
        kubectl_input(&api.join("admin.kubeconfig"), &cache, &["exec", "-i", "-n", "team", "web", "--", "cat"], &input);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, input, "stdin crossed whole and came back");
    // SPDY, as kubectl before 1.30 speaks it (and kubectl's fallback): the same streams,
    // exit code and stdin's end, the connection passed whole to the runtime.
    let spdy = [("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")];
    let kubeconfig = api.join("admin.kubeconfig");
    let script = ["exec", "-n", "team", "web", "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3"];
    let out = kubectl_input_env(&kubeconfig, &cache, &spdy, &script, b"");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n", "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("err\n"), "{out:?}");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let out = kubectl_input_env(&kubeconfig, &cache, &spdy, &["exec", "-i", "-n", "team", "web", "--", "cat"], &input);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, input, "stdin crossed SPDY whole and came back");
    // The audit names the exec: user, pod, container and command (in the URI).
    let audit = std::fs::read_to_string(&audit_log).unwrap_or_default();
    let line = audit.lines().rev().find(|l| l.contains("/pods/web/exec?")).unwrap_or_default();
    assert!(line.contains("command=cat") && line.contains("\"username\":\"admin\""), "{line}");
    assert!(line.contains("\"subresource\":\"exec\"") && line.contains("\"code\":101"), "{line}");

    // A TTY (kubectl given a terminal by script(1)): the command sees one; stderr merged.
    let tty = Command::new("script")
        .args(["-qec"])
        .arg(format!(
            "kubectl --kubeconfig {} --cache-dir {} exec -it -n team web -- /bin/sh -c 'tty; echo to-stderr >&2'",
            api.join("admin.kubeconfig").display(),
            cache.display()
        ))
        .arg("/dev/null")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&tty.stdout);
    assert!(said.contains("/dev/pts/") && said.contains("to-stderr"), "{tty:?}");

    // The Python client's exec stream (WebSocket v4.channel.k8s.io, a GET).
    let script = r#"
import json, sys
from kubernetes import client, config
from kubernetes.stream import stream
config.load_kube_config(sys.argv[1])
v1 = client.CoreV1Api()
r = stream(v1.connect_get_namespaced_pod_exec, "web", "team", command=["/bin/sh", "-c", "echo py-out; echo py-err >&2; exit 4"],
           stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
r.run_forever(timeout=30)
print(json.dumps({"out": r.read_stdout(), "err": r.read_stderr(), "code": r.returncode}))
"#;
    let py = Command::new("python3")
        .args(["-c", script, api.join("admin.kubeconfig").to_str().unwrap()])
        .output()
        .expect("python3 with the kubernetes client (scripts/install-test-deps)");
    let said: serde_json::Value = serde_json::from_str(&ok(py, "python exec")).unwrap();
    assert_eq!(said, json!({"out": "py-out\n", "err": "py-err\n", "code": 4}));

    // kubectl attach: the container's own process, its stdin given.
    let reader = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reader"},
        "spec": {"terminationGracePeriodSeconds": 1, "automountServiceAccountToken": false,
            "containers": [{"name": "app", "image": APP_IMAGE, "imagePullPolicy": "Never", "stdin": true,
                "command": ["/bin/sh", "-c", "while read line; do for i in 1 2; do echo \"got $line\"; sleep 1; done; done"]}]}});
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/team/pods", Some(reader)).0, 201);
    wait_for("pod team/reader running", Duration::from_secs(60), || {
        let (_, p) = admin_get(&s, "/api/v1/namespaces/team/pods/reader");
        (p["status"]["phase"] == "Running").then_some(p)
    });
    let out = interact(&api, &["attach", "-i", "-n", "team", "reader"], b"one\ntwo\n", &["got one", "got two"]);
    assert!(out.contains("got one") && out.contains("got two"), "{out}");

    // kubectl cp both ways, byte for byte (tar through exec's stdin and stdout).
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(d.join("payload.bin"), &payload).unwrap();
    let cp = |args: &[&str]| {
        let mut all = vec!["cp"];
        all.extend_from_slice(args);
        ok(admin_kubectl(&api, &all), "kubectl cp")
    };
    cp(&[d.join("payload.bin").to_str().unwrap(), "team/web:/tmp/payload.bin"]);
    let back = d.join("back.bin");
    cp(&["team/web:/tmp/payload.bin", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == payload, "the file came back as it went");

    // A tar whose paths climb out of its target (`../`, and through a link to `/`),
    // unpacked by the container's tar as `kubectl cp` has it do: whatever the archive
    // says, the exec runs in the container, so nothing outside it changes.
    let marker = format!("podpass-escape-{}", std::process::id());
    let hostile = podpass_node::runtime::archive::ustar(&[
        podpass_node::runtime::archive::Entry::File {
            name: format!("../../../../../../../tmp/{marker}-dots"),
            mode: 0o644,
            content: b"climbed".to_vec(),
        },
        podpass_node::runtime::archive::Entry::Symlink { name: "root".into(), target: "/".into() },
        podpass_node::runtime::archive::Entry::File {
            name: format!("root/tmp/{marker}-link"),
            mode: 0o644,
            content: b"linked".to_vec(),
        },
    ])
    .unwrap();
    let unpacked = kubectl_input(
        &api.join("admin.kubeconfig"),
        &cache,
        &["exec", "-i", "-n", "team", "web", "--", "/bin/sh", "-c", "mkdir -p /tmp/target && tar -xf - -C /tmp/target"],
        &hostile,
    );
    for suffix in ["dots", "link"] {
        let host = std::path::Path::new("/tmp").join(format!("{marker}-{suffix}"));
        assert!(!host.exists(), "{} written on the host: {unpacked:?}", host.display());
    }
    assert!(!std::path::Path::new("/tmp/target").exists(), "{unpacked:?}");

    // kubectl port-forward to a server listening on the pod's own loopback (its network
    // namespace has nothing else), reached through containerd: over WebSocket with SPDY
    // tunneled (kubectl ≥ 1.31) and over plain SPDY (older clients), byte for byte.
    let server = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "server"},
        "spec": {"terminationGracePeriodSeconds": 1, "automountServiceAccountToken": false,
            "containers": [{"name": "app", "image": APP_IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "mkdir -p /w && echo forwarded > /w/hello && exec httpd -f -p 127.0.0.1:8080 -h /w"]}]}});
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/team/pods", Some(server)).0, 201);
    wait_for("pod team/server running", Duration::from_secs(60), || {
        let (_, p) = admin_get(&s, "/api/v1/namespaces/team/pods/server");
        (p["status"]["phase"] == "Running").then_some(p)
    });
    cp(&[d.join("payload.bin").to_str().unwrap(), "team/server:/w/payload.bin"]);
    for websockets in ["true", "false"] {
        let local = free_port();
        let mut forward = Command::new("kubectl")
            .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", websockets)
            .arg("--kubeconfig")
            .arg(api.join("admin.kubeconfig"))
            .arg("--cache-dir")
            .arg(&cache)
            .args(["port-forward", "-n", "team", "pod/server", &format!("{local}:8080")])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(forward.stdout.as_mut().unwrap()), &mut said).unwrap();
        assert!(said.starts_with("Forwarding from 127.0.0.1:"), "websockets={websockets}: {said:?}");
        let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
        let hello = http.get(format!("http://127.0.0.1:{local}/hello")).send().unwrap();
        assert_eq!(hello.text().unwrap(), "forwarded\n", "websockets={websockets}");
        // Several connections, one after another, on the same forward.
        for _ in 0..3 {
            let got = http.get(format!("http://127.0.0.1:{local}/payload.bin")).send().unwrap().bytes().unwrap();
            assert!(got[..] == payload[..], "websockets={websockets}: {} bytes came back", got.len());
        }
        let _ = forward.kill();
        let _ = forward.wait();
    }
    let audit = std::fs::read_to_string(&audit_log).unwrap_or_default();
    assert!(
        audit.lines().any(|l| l.contains("\"subresource\":\"portforward\"") && l.contains("\"code\":101")),
        "the forward is audited"
    );

    // kubectl run -i --rm: a pod attached to, then deleted.
    let once = kubectl_input(
        &api.join("admin.kubeconfig"),
        &cache,
        &[
            "run",
            "-n",
            "team",
            "twice",
            "-i",
            "--rm",
            "--restart=Never",
            "--image",
            APP_IMAGE,
            "--image-pull-policy",
            "Never",
            "--",
            "/bin/sh",
            "-c",
            // Said for a few seconds: containerd attaches stdin a moment before stdout, so
            // a single answer written at once could go to the log only (the race kubectl's
            // "If you don't see a command prompt, try pressing enter" is about).
            "read line; for i in 1 2 3; do echo \"ran $line\"; sleep 1; done",
        ],
        b"it\n",
    );
    assert!(String::from_utf8_lossy(&once.stdout).contains("ran it"), "{once:?}");
    wait_for("kubectl run --rm deleted its pod", Duration::from_secs(60), || {
        (admin_get(&s, "/api/v1/namespaces/team/pods/twice").0 == 404).then_some(json!(null))
    });

    // kubectl debug -i: an ephemeral container, attached to as it starts.
    let debugged = interact(
        &api,
        &[
            "debug",
            "-i",
            "-n",
            "team",
            "web",
            "--image",
            APP_IMAGE,
            "--image-pull-policy",
            "Never",
            "-c",
            "dbg",
            "--target",
            "app",
            "--",
            "/bin/sh",
        ],
        b"for i in 1 2 3; do echo debugged-$((6*7)); sleep 1; done; exit\n",
        &["debugged-42"],
    );
    assert!(debugged.contains("debugged-42"), "{debugged}");

    // A tenant with `get` on pods/exec but not `create`: a WebSocket exec is refused (403).
    std::fs::write(d.join("alice.kubeconfig"), ok(identity_output(&api, "alice", &[]), "alice kubeconfig")).unwrap();
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "exec"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                  {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get"]}]});
    assert_eq!(
        admin_request(&s, Method::POST, "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles", Some(role)).0,
        201
    );
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "exec"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "exec"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]});
    assert_eq!(
        admin_request(
            &s,
            Method::POST,
            "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings",
            Some(binding)
        )
        .0,
        201
    );
    let alice = |args: &[&str]| kubectl_with(&d.join("alice.kubeconfig"), &d.join("alice-cache"), args);
    let refused = alice(&["exec", "-n", "team", "web", "--", "echo", "hi"]);
    assert!(!refused.status.success(), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("forbidden"), "{refused:?}");
    // With `create`, it runs; another namespace's pod stays out of reach.
    let patch = json!([{"op": "add", "path": "/rules/1/verbs/-", "value": "create"}]);
    let (code, _) = admin_raw_request(
        &s,
        Method::PATCH,
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles/exec",
        Some(("application/json-patch+json", patch.to_string().into_bytes())),
    );
    assert_eq!(code, 200);
    let ran = wait_for("alice's exec allowed", Duration::from_secs(30), || {
        let out = alice(&["exec", "-n", "team", "web", "--", "echo", "hi"]);
        out.status.success().then(|| json!(String::from_utf8_lossy(&out.stdout)))
    });
    assert_eq!(ran, "hi\n");
    let other = alice(&["exec", "-n", "other", "web", "--", "echo", "hi"]);
    assert!(!other.status.success() && String::from_utf8_lossy(&other.stderr).contains("forbidden"), "{other:?}");

    // alice opening streams without end is held to the pod's share (16): the rest are 429,
    // while another tenant's exec, into its own pod, runs. Her clients gone, their
    // commands go with them.
    let flood = r#"
import json, sys, time
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.stream import stream
config.load_kube_config(sys.argv[1])
v1 = client.CoreV1Api()
held, refused = [], []
for i in range(40):
    try:
        held.append(stream(v1.connect_get_namespaced_pod_exec, "web", "team", command=["/bin/sleep", "600"],
                           stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False))
    except ApiException as e:
        refused.append(str(e))
print(json.dumps({"held": len(held), "refused": refused}), flush=True)
sys.stdin.readline()
for h in held:
    h.close()
"#;
    let mut flooder = Command::new("python3")
        .args(["-c", flood, d.join("alice.kubeconfig").to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(flooder.stdout.as_mut().unwrap()), &mut line).unwrap();
    let flooded: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    assert_eq!(flooded["held"], 16, "{flooded}");
    let refused = flooded["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 24, "{flooded}");
    assert!(refused.iter().all(|r| r.to_string().contains("429")), "{flooded}");
    let victim = admin_kubectl(&api, &["exec", "-n", "other", "web", "--", "echo", "unaffected"]);
    assert_eq!(String::from_utf8_lossy(&victim.stdout), "unaffected\n", "{victim:?}");
    // The pod is full: counted from the host (the flood's commands are this test's only
    // `/bin/sleep 600`).
    let sleeping = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .filter(|c| c == b"/bin/sleep\x00600\x00")
            .count()
    };
    assert_eq!(sleeping(), 16);
    let full = admin_kubectl(&api, &["exec", "-n", "team", "web", "--", "true"]);
    assert!(String::from_utf8_lossy(&full.stderr).contains("too many streams"), "{full:?}");
    drop(flooder.stdin.take());
    flooder.wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while sleeping() > 0 {
        let log = std::fs::read_to_string(d.join("agent.log")).unwrap_or_default();
        let tail: Vec<&str> =
            log.lines().filter(|l| l.contains("exec process") || l.contains("stream closed")).collect();
        assert!(
            std::time::Instant::now() < deadline,
            "the flood's commands ended with their clients ({} left): {tail:#?}",
            sleeping()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The node's own streaming path: a tenant's bearer token is no `nodes/proxy`.
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "t"}});
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/team/serviceaccounts", Some(sa)).0, 201);
    let tr = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}});
    let (code, issued) = admin_request(&s, Method::POST, "/api/v1/namespaces/team/serviceaccounts/t/token", Some(tr));
    assert_eq!(code, 201, "{issued}");
    let token = issued["status"]["token"].as_str().unwrap().to_owned();
    let node = reqwest::blocking::Client::builder().tls_danger_accept_invalid_certs(true).build().unwrap();
    let answer = node
        .get(format!("https://127.0.0.1:{port}/exec/team/web/app?command=echo&output=1"))
        .bearer_auth(&token)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("sec-websocket-protocol", "v5.channel.k8s.io")
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 403, "{:?}", answer.text());
    let answer = node
        .post(format!("https://127.0.0.1:{port}/portForward/team/server?port=8080"))
        .bearer_auth(&token)
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .header("x-stream-protocol-version", "portforward.k8s.io")
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 403, "{:?}", answer.text());
    // A client certificate that claims the API server's name and `system:masters` but
    // that the cluster's CA never signed is no identity at all.
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:masters");
    let key = rcgen::KeyPair::generate().unwrap();
    let forged = params.self_signed(&key).unwrap();
    let forged_pem = format!("{}{}", forged.pem(), key.serialize_pem()).into_bytes();
    for (who, pem) in [("a forged certificate", forged_pem)] {
        let with_cert = reqwest::blocking::Client::builder()
            .tls_danger_accept_invalid_certs(true)
            .identity(reqwest::Identity::from_pem(&pem).unwrap())
            .build()
            .unwrap();
        for (method, path, upgrade, protocol) in [
            (Method::GET, "/exec/team/web/app?command=echo&output=1", "websocket", "v5.channel.k8s.io"),
            (Method::POST, "/portForward/team/server?port=8080", "SPDY/3.1", "portforward.k8s.io"),
        ] {
            let answer = with_cert
                .request(method, format!("https://127.0.0.1:{port}{path}"))
                .header("connection", "Upgrade")
                .header("upgrade", upgrade)
                .header("sec-websocket-version", "13")
                .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
                .header("sec-websocket-protocol", protocol)
                .header("x-stream-protocol-version", protocol)
                .send();
            // Refused at the handshake, or answered 401/403: never a stream.
            if let Ok(answer) = answer {
                let code = answer.status().as_u16();
                assert!(code == 401 || code == 403, "{who} at {path}: {code} {:?}", answer.text());
            }
        }
    }

    // kubectl top: the metrics API from the node's samples (two, 10 s apart, make a rate).
    let top = wait_for("kubectl top pod lists team's pods", Duration::from_secs(90), || {
        let out = admin_kubectl(&api, &["top", "pod", "-n", "team", "--containers"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success() && text.lines().any(|l| l.starts_with("web "))).then_some(json!(text))
    });
    let text = top.as_str().unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"], "{text}");
    let row: Vec<&str> = text.lines().find(|l| l.starts_with("web ")).unwrap().split_whitespace().collect();
    assert_eq!(row[1], "app", "{text}");
    assert!(row[2].ends_with('m') && row[3].ends_with("Mi"), "{text}");
    let nodes = ok(admin_kubectl(&api, &["top", "node"]), "kubectl top node");
    let header: Vec<&str> = nodes.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header[..3], ["NAME", "CPU(cores)", "CPU(%)"], "{nodes}");
    assert!(nodes.lines().any(|l| l.starts_with("n1 ")), "{nodes}");
    // Running containers only: the ephemeral `dbg` goes from the metrics once it has exited.
    let one = wait_for("web's metrics name its running container only", Duration::from_secs(60), || {
        let (code, one) = admin_get(&s, "/apis/metrics.k8s.io/v1beta1/namespaces/team/pods/web");
        let names: Vec<&str> = one["containers"].as_array()?.iter().filter_map(|c| c["name"].as_str()).collect();
        (code == 200 && names == ["app"]).then_some(one.clone())
    });
    assert_eq!(one["kind"], "PodMetrics", "{one}");
    assert!(one["window"].as_str().is_some_and(|w| w.ends_with('s')) && one["timestamp"].is_string(), "{one}");
    let (code, _) = admin_get(&s, "/apis/metrics.k8s.io/v1beta1/namespaces/team/pods/absent");
    assert_eq!(code, 404);
    // Selectors as metrics-server takes them: the pod's labels, its metadata's fields.
    let selected = ok(admin_kubectl(&api, &["top", "pod", "-n", "team", "-l", "app=web"]), "kubectl top pod -l");
    assert!(selected.lines().any(|l| l.starts_with("web ")), "{selected}");
    let (code, both) = admin_get(
        &s,
        "/apis/metrics.k8s.io/v1beta1/pods?labelSelector=app%3Dweb&fieldSelector=metadata.namespace%3Dother",
    );
    let names: Vec<(&str, &str)> = both["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["metadata"]["namespace"].as_str().unwrap(), i["metadata"]["name"].as_str().unwrap()))
        .collect();
    assert_eq!((code, names), (200, vec![("other", "web")]), "{both}");
    let (code, none) = admin_get(&s, "/apis/metrics.k8s.io/v1beta1/pods?labelSelector=app%3Ddb");
    assert_eq!((code, none["items"].as_array().map(Vec::len)), (200, Some(0)), "{none}");
    let (code, nodes) = admin_get(&s, "/apis/metrics.k8s.io/v1beta1/nodes?fieldSelector=metadata.name%3Dn1");
    assert_eq!((code, nodes["items"][0]["metadata"]["name"].as_str()), (200, Some("n1")), "{nodes}");
    let (code, refused) = admin_get(&s, "/apis/metrics.k8s.io/v1beta1/pods?fieldSelector=spec.nodeName%3Dn1");
    assert_eq!((code, refused["message"].as_str()), (400, Some("field label not supported: spec.nodeName")));
    // alice's role names no metrics: refused as any other read.
    let denied = alice(&["top", "pod", "-n", "team"]);
    assert!(!denied.status.success() && String::from_utf8_lossy(&denied.stderr).contains("forbidden"), "{denied:?}");
}
