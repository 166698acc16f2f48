//! End-to-end: `podpass up` — the whole product on loopback (control plane, registry-auth,
//! the real CNCF registry with token auth, a node agent with `podpass-credential-provider`
//! in exchange mode) — tells its story with `--demo`, resumes the same cluster on a second
//! run, leaves no process behind on Ctrl-C, and says in one line what to do when it cannot
//! start.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod registry;
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// The parts `podpass up` runs with containers: control plane, controller manager,
/// scheduler, registry-auth, registry, containerd and the node agent.
const PARTS: usize = 7;

/// `podpass up` with `extra` flags, on the ports kept in `<data>/../ports` (free ones chosen
/// at the first call: a resumed cluster keeps its registry's address, which its images name).
fn up(data: &Path, extra: &[&str]) -> Command {
    let ports_file = data.with_file_name("ports");
    let ports: Vec<String> = match std::fs::read_to_string(&ports_file) {
        Ok(text) => text.split_whitespace().map(str::to_owned).collect(),
        Err(_) => {
            // Held together while chosen: one at a time, the kernel may hand out the same
            // free port twice.
            let held: Vec<std::net::TcpListener> =
                (0..5).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
            let ports: Vec<String> = held.iter().map(|l| l.local_addr().unwrap().port().to_string()).collect();
            drop(held);
            std::fs::write(&ports_file, ports.join(" ")).unwrap();
            ports
        }
    };
    let mut cmd = Command::new(PODPASS);
    cmd.args(["up", "--data-dir", data.to_str().unwrap()]);
    for (flag, port) in
        ["--apiserver-port", "--registry-auth-port", "--registry-port", "--node-healthz-port", "--node-port"]
            .iter()
            .zip(&ports)
    {
        if !extra.contains(flag) {
            cmd.args([flag, port.as_str()]);
        }
    }
    if !extra.contains(&"--eviction-hard") {
        cmd.args(["--eviction-hard", TEST_EVICTION_HARD]);
    }
    cmd.args(extra);
    cmd
}

/// One whole cluster at a time: two demos at once on a loaded two-core machine test the
/// machine, not podpass.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `podpass up` with `args` (a `--demo`) on `data` to its end, its output in `dir`;
/// asserts it exited 0 and answers what it printed.
fn demo(dir: &Path, data: &Path, args: &[&str]) -> String {
    let log = dir.join("demo.out");
    let child = up(data, args)
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::from(std::fs::File::create(dir.join("demo.err")).unwrap()))
        .spawn()
        .unwrap();
    let (code, out) = wait_output(child, Duration::from_secs(300), &log);
    let err = std::fs::read_to_string(dir.join("demo.err")).unwrap_or_default();
    assert_eq!(code, 0, "demo failed:\n{out}\n{err}");
    out
}

/// A running `podpass up`, interrupted (then killed) if the test ends before it stops.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits for `child` (at most `limit`, then kills it and fails).
fn wait_output(mut child: Child, limit: Duration, out: &Path) -> (i32, String) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status.code().unwrap_or(-1), std::fs::read_to_string(out).unwrap_or_default());
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("podpass up did not finish in {limit:?}:\n{}", std::fs::read_to_string(out).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The pids whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
        // pid (comm) state ppid …: comm may hold spaces, so read after the last ')'.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        if after.split(' ').nth(1).and_then(|s| s.parse::<u32>().ok()) == Some(pid) {
            out.push(p);
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
}

fn sa_uid(data: &Path) -> String {
    let resp = client(data)
        .get(format!(
            "{}/api/v1/namespaces/team-a/serviceaccounts/app",
            std::fs::read_to_string(data.join("server-url")).unwrap()
        ))
        .bearer_auth(admin_token(data))
        .send()
        .unwrap();
    let sa: Value = resp.json().unwrap();
    sa["metadata"]["uid"].as_str().unwrap().to_owned()
}

/// The demo's image, from its first step's line.
fn image_in(out: &str) -> String {
    out.split("1. pushed ").nth(1).and_then(|s| s.split(' ').next()).unwrap().to_owned()
}

fn records(data: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(data.join("node-1/root/image_manager/pulled"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// As the admin of the cluster in `data`: `method path` with a JSON body.
fn admin(data: &Path, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
    let url = std::fs::read_to_string(data.join("server-url")).unwrap();
    let mut req = client(data).request(method, format!("{url}{path}")).bearer_auth(admin_token(data));
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().unwrap();
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
    resp.json().unwrap()
}

/// A token of team-a/`sa` for registry-auth's audience, bound to `pod` when given.
fn registry_auth_token(data: &Path, sa: &str, pod: Option<(&str, &str)>) -> String {
    let mut spec = serde_json::json!({"audiences": ["podpass-registry-auth"], "expirationSeconds": 600});
    if let Some((name, uid)) = pod {
        spec["boundObjectRef"] = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid});
    }
    let answer = admin(
        data,
        reqwest::Method::POST,
        &format!("/api/v1/namespaces/team-a/serviceaccounts/{sa}/token"),
        Some(serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})),
    );
    answer["status"]["token"].as_str().unwrap().to_owned()
}

/// Polls `ask` (an HTTP status) until it is 401, at most 40 s (the two 10 s caches, with
/// room to spare on a loaded machine).
fn refused_within(mut ask: impl FnMut() -> u16) -> Duration {
    let started = Instant::now();
    loop {
        let status = ask();
        if status == 401 {
            return started.elapsed();
        }
        assert_eq!(status, 200, "granted or refused, nothing else");
        assert!(started.elapsed() < Duration::from_secs(40), "still granted after 40 s");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// registry-auth's URL and a client that asks it as node-1: it serves TLS from the
/// cluster's CA, and takes a token naming node-1 only with node-1's certificate
/// (--node-binding require): the one node-1 got by its TLS bootstrap and rotates, which its
/// plugin, containerd and registry checks show too.
fn registry_auth_as_node(data: &Path) -> (String, reqwest::blocking::Client) {
    let ports = std::fs::read_to_string(data.with_file_name("ports")).unwrap();
    let auth = format!("https://127.0.0.1:{}", ports.split_whitespace().nth(1).unwrap());
    let pki = data.join("pki");
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pki.join("ca.crt")).unwrap()).unwrap();
    let node = std::fs::read(data.join("node-1/root/pki/kubelet-client-current.pem")).unwrap();
    let http = reqwest::blocking::Client::builder()
        .tls_certs_only([ca])
        .identity(reqwest::Identity::from_pem(&node).unwrap())
        .build()
        .unwrap();
    (auth, http)
}

/// The status registry-auth answers a pull of team-a/app with `password`.
fn team_a_pull_status(auth: &str, http: &reqwest::blocking::Client, password: &str) -> u16 {
    http.get(format!("{auth}/token?service=podpass-registry&scope=repository:team-a/app:pull"))
        .basic_auth("x", Some(password))
        .send()
        .unwrap()
        .status()
        .as_u16()
}

/// An exchange token registry-auth makes of `token` for team-a/app's pulls.
fn exchange_token(auth: &str, http: &reqwest::blocking::Client, token: &str) -> String {
    let scope = "repository:team-a/app:pull";
    let answer: Value = http
        .post(format!("{auth}/token"))
        .form(&[("grant_type", "password"), ("password", token), ("access_type", "offline"), ("scope", scope)])
        .send()
        .unwrap()
        .json()
        .unwrap();
    answer["refresh_token"].as_str().unwrap_or_else(|| panic!("no exchange token: {answer}")).to_owned()
}

/// A revocation reaches registry-auth at once after its watches have idled past every
/// timeout (issue 51 item 5): `quiet_since` is when the revocation watch last had an event.
/// Before, the watch client's 5 s read timeout cut each idle watch, which came back on a
/// back-off of up to 30 s: a revoked token's exchange token was granted for ~40 s.
fn a_revocation_reaches_registry_auth_after_its_watches_idled(data: &Path, quiet_since: Instant) {
    let idle = Duration::from_secs(70);
    // The state under test is the idle itself: past the bookmark interval (60 s).
    if let Some(left) = idle.checked_sub(quiet_since.elapsed()) {
        std::thread::sleep(left);
    }
    let (auth, http) = registry_auth_as_node(data);
    let leaked = registry_auth_token(data, "app", None);
    let exchange = exchange_token(&auth, &http, &leaked);
    assert_eq!(team_a_pull_status(&auth, &http, &exchange), 200);
    let claims = jwt_claims(&leaked);
    let until = jiff::Timestamp::from_second(claims["exp"].as_i64().unwrap()).unwrap().to_string();
    admin(
        data,
        reqwest::Method::POST,
        "/apis/revocation.podpass.dev/v1/revokedtokens",
        Some(serde_json::json!({"apiVersion": "revocation.podpass.dev/v1", "kind": "RevokedToken",
            "metadata": {"name": claims["jti"]}, "spec": {"expirationTimestamp": until, "reason": "idle test"}})),
    );
    let revoked = Instant::now();
    loop {
        let status = team_a_pull_status(&auth, &http, &exchange);
        if status == 401 {
            break;
        }
        assert_eq!(status, 200, "granted or refused, nothing else");
        assert!(revoked.elapsed() < Duration::from_secs(30), "still granted 30 s after the revocation");
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = revoked.elapsed();
    eprintln!("revocation after an idle {} s: the exchange token refused {took:?} after the 201", idle.as_secs());
    // Its watches never failed while idle (this run's part of the appended log).
    let log = std::fs::read_to_string(data.join("logs/registry-auth.log")).unwrap();
    let this_run = log.rsplit("--- podpass up: registry-auth started").next().unwrap();
    for failure in ["cannot watch the issuer's revocations", "deletions: cannot watch"] {
        assert!(!this_run.contains(failure), "an idle watch failed ({failure}):\n{this_run}");
    }
    // Far under the ~40 s of a watch on a back-off; the figure itself is the benchmark's
    // (podpass bench registry-auth).
    assert!(took < Duration::from_secs(5), "refused {took:?} after the revocation");
}

/// Creates pod `ns/name` on node-1 (service account `app`, as the restricted standard
/// asks) running `image`, pulled `Always`.
fn create_pod(data: &Path, ns: &str, name: &str, image: &str) -> Value {
    admin(
        data,
        reqwest::Method::POST,
        &format!("/api/v1/namespaces/{ns}/pods"),
        Some(serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": "node-1", "serviceAccountName": "app", "terminationGracePeriodSeconds": 1,
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65534,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "app", "image": image, "imagePullPolicy": "Always",
                                "securityContext": {"allowPrivilegeEscalation": false,
                                                    "capabilities": {"drop": ["ALL"]}}}]}})),
    )
}

/// Pod `ns/name` once its container runs (two minutes at most).
fn wait_running(data: &Path, ns: &str, name: &str) -> Value {
    let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let pod = admin(data, reqwest::Method::GET, &path, None);
        if pod["status"]["containerStatuses"][0]["state"]["running"].is_object() {
            return pod;
        }
        assert!(Instant::now() < deadline, "{ns}/{name} did not run: {}", pod["status"]);
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The reasons of the events about pod `ns/name`.
fn pod_event_reasons(data: &Path, ns: &str, name: &str) -> Vec<String> {
    let events = admin(data, reqwest::Method::GET, &format!("/api/v1/namespaces/{ns}/events"), None);
    events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .map(|e| e["reason"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A registry that accepts and never answers holds no other tenant's pull (issue 51 item
/// 3): while team-b's pod pulls from one, team-a's pod pulls its own image and runs. Before,
/// node-1 pulled one image at a time and a CRI pull had no deadline: team-a waited.
fn a_registry_that_never_answers_holds_no_other_tenants_pull(data: &Path, image: &str) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts, reads whatever comes, answers nothing; the connections are closed when the
    // step ends.
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let held2 = held.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    listener.set_nonblocking(true).unwrap();
    let acceptor = std::thread::spawn(move || {
        while !stop2.load(std::sync::atomic::Ordering::SeqCst) {
            match listener.accept() {
                Ok((stream, _)) => held2.lock().unwrap().push(stream),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    create_pod(data, "team-b", "stuck", &format!("127.0.0.1:{port}/team-b/stuck:1"));
    wait_for("node-1 pulling from the registry that never answers", Duration::from_secs(60), || {
        (!held.lock().unwrap().is_empty()).then_some(Value::Null)
    });
    create_pod(data, "team-a", "beside-stuck", image);
    let ran = wait_running(data, "team-a", "beside-stuck");
    assert!(ran["status"]["containerStatuses"][0]["imageID"].as_str().is_some_and(|i| !i.is_empty()), "{ran}");
    // ...while team-b's pull was still waiting on its registry.
    let stuck = pod_event_reasons(data, "team-b", "stuck");
    assert!(!stuck.iter().any(|r| r == "Failed" || r == "Pulled"), "team-b's pull had ended: {stuck:?}");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    acceptor.join().unwrap();
    held.lock().unwrap().clear();
    for (ns, name) in [("team-b", "stuck"), ("team-a", "beside-stuck")] {
        admin(data, reqwest::Method::DELETE, &format!("/api/v1/namespaces/{ns}/pods/{name}"), None);
    }
}

/// Local ephemeral storage limits are enforced by eviction (issue 51 item 2), with
/// upstream's reason and messages: a pod writing past its emptyDir's `sizeLimit`, and one
/// whose container's logs grow past its `ephemeral-storage` limit, are evicted (Failed,
/// `Evicted`, a `DisruptionTarget` condition, an `Evicted` event) and their containers
/// killed. Before, both ran on.
fn pods_over_their_storage_limits_are_evicted(data: &Path, image: &str) {
    use reqwest::Method;
    let pods = "/api/v1/namespaces/team-a/pods";
    let restricted = serde_json::json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
    // 64 KiB built by doubling, then written 320 times: 20 MiB.
    let fill = |to: &str| {
        format!(
            "a=x; i=0; while [ $i -lt 16 ]; do a=\"$a$a\"; i=$((i+1)); done; i=0; while [ $i -lt 320 ]; do echo \"$a\"{to}; i=$((i+1)); done; exec sleep 3600"
        )
    };
    let pod = |name: &str, spec: Value| {
        let mut spec = spec;
        spec["nodeName"] = serde_json::json!("node-1");
        spec["serviceAccountName"] = serde_json::json!("app");
        spec["terminationGracePeriodSeconds"] = serde_json::json!(1);
        spec["securityContext"] = serde_json::json!({"runAsNonRoot": true, "runAsUser": 65534,
            "seccompProfile": {"type": "RuntimeDefault"}});
        admin(
            data,
            Method::POST,
            pods,
            Some(serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})),
        );
    };
    pod(
        "fills-dir",
        serde_json::json!({"volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "10Mi"}}],
            "containers": [{"name": "app", "image": image, "command": ["/bin/sh", "-c", fill(" >> /scratch/f")],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}], "securityContext": restricted}]}),
    );
    pod(
        "fills-log",
        serde_json::json!({"containers": [
            {"name": "app", "image": image, "command": ["/bin/sh", "-c", fill("")],
             "resources": {"limits": {"ephemeral-storage": "10Mi"}}, "securityContext": restricted},
            {"name": "idle", "image": image, "command": ["/bin/sh", "-c", "exec sleep 3600"],
             "resources": {"limits": {"ephemeral-storage": "100Mi"}}, "securityContext": restricted}]}),
    );
    for (name, message) in [
        ("fills-dir", "Usage of EmptyDir volume \"scratch\" exceeds the limit \"10Mi\". "),
        ("fills-log", "Container app exceeded its local ephemeral storage limit \"10Mi\". "),
    ] {
        let evicted = wait_for(&format!("team-a/{name} evicted"), Duration::from_secs(120), || {
            let p = admin(data, Method::GET, &format!("{pods}/{name}"), None);
            (p["status"]["reason"] == "Evicted").then_some(p)
        });
        let status = &evicted["status"];
        assert_eq!(status["phase"], "Failed", "{status}");
        assert_eq!(status["message"], message, "{status}");
        let disruption = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "DisruptionTarget");
        assert_eq!(disruption.map(|c| c["reason"].clone()), Some(Value::from("TerminationByKubelet")), "{status}");
        assert!(
            status["containerStatuses"].as_array().unwrap().iter().all(|c| c["state"]["running"].is_null()),
            "killed: {status}"
        );
        assert!(pod_event_reasons(data, "team-a", name).iter().any(|r| r == "Evicted"));
        admin(data, Method::DELETE, &format!("{pods}/{name}"), None);
    }
}

/// The free inodes of the filesystem holding `dir` (statvfs `f_favail`, what the node reads).
fn inodes_free(dir: &Path) -> u64 {
    rustix::fs::statvfs(dir).unwrap().f_favail
}

/// Node-pressure eviction (issue 51 item 2): with `nodefs.inodesFree` a little below what
/// is free, a pod creating files past it is evicted with upstream's message while its
/// neighbour runs on; the node said `DiskPressure` (events `NodeHasDiskPressure`,
/// `EvictionThresholdMet`), the evicted pod's volumes are gone from disk, the condition
/// clears after the transition period and the node admits pods again. Before, the node
/// only reported the condition — five minutes late — and nobody was evicted.
fn a_pod_filling_the_nodes_inodes_is_evicted_and_its_neighbour_runs_on(data: &Path, image: &str, files: u64) {
    use reqwest::Method;
    let pods = "/api/v1/namespaces/team-a/pods";
    let restricted = serde_json::json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
    let pod = |name: &str, command: &str| {
        admin(
            data,
            Method::POST,
            pods,
            Some(serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"nodeName": "node-1", "serviceAccountName": "app", "terminationGracePeriodSeconds": 1,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
                    "volumes": [{"name": "scratch", "emptyDir": {}}],
                    "containers": [{"name": "app", "image": image, "command": ["/bin/sh", "-c", command],
                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}], "securityContext": restricted}]}})),
        )
    };
    pod("neighbour", "exec sleep 3600");
    wait_running(data, "team-a", "neighbour");
    let hog =
        pod("hog", &format!("i=0; while [ $i -lt {files} ]; do : > /scratch/f$i; i=$((i+1)); done; exec sleep 3600"));
    let hog_uid = hog["metadata"]["uid"].as_str().unwrap().to_owned();
    let evicted = wait_for("team-a/hog evicted under inode pressure", Duration::from_secs(180), || {
        let p = admin(data, Method::GET, &format!("{pods}/hog"), None);
        (p["status"]["reason"] == "Evicted").then_some(p)
    });
    let status = &evicted["status"];
    assert_eq!(status["phase"], "Failed", "{status}");
    let message = status["message"].as_str().unwrap();
    eprintln!("node-pressure eviction: {message}");
    assert!(message.starts_with("The node was low on resource: inodes. Threshold quantity: "), "{message}");
    assert!(message.contains(", available: ") && message.ends_with(". "), "{message}");
    let disruption = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "DisruptionTarget");
    assert_eq!(disruption.map(|c| c["reason"].clone()), Some(Value::from("TerminationByKubelet")), "{status}");
    // Its files went with it: the node has its inodes back.
    let volumes = data.join("node-1/root/pods").join(&hog_uid).join("volumes");
    wait_for("the evicted pod's volumes removed", Duration::from_secs(60), || {
        (!volumes.exists()).then_some(Value::Null)
    });
    // The neighbour was not touched.
    let n = admin(data, Method::GET, &format!("{pods}/neighbour"), None);
    assert!(n["status"]["containerStatuses"][0]["state"]["running"].is_object(), "{}", n["status"]);
    assert_eq!(n["status"]["containerStatuses"][0]["restartCount"], 0, "{}", n["status"]);
    // The node said so, as a kubelet does.
    let node_events: Vec<(String, String)> =
        admin(data, Method::GET, "/api/v1/namespaces/default/events", None)["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["involvedObject"]["kind"] == "Node")
            .map(|e| (e["reason"].as_str().unwrap_or("").to_owned(), e["message"].as_str().unwrap_or("").to_owned()))
            .collect();
    assert!(
        node_events.contains(&("EvictionThresholdMet".into(), "Attempting to reclaim inodes".into())),
        "{node_events:?}"
    );
    assert!(
        node_events.contains(&("NodeHasDiskPressure".into(), "Node node-1 status is now: NodeHasDiskPressure".into())),
        "{node_events:?}"
    );
    // The condition clears after the transition period, and the node admits pods again.
    wait_for("DiskPressure False again", Duration::from_secs(120), || {
        let node = admin(data, Method::GET, "/api/v1/nodes/node-1", None);
        let conditions = node["status"]["conditions"].as_array().cloned().unwrap_or_default();
        conditions.iter().any(|c| c["type"] == "DiskPressure" && c["status"] == "False").then_some(Value::Null)
    });
    pod("after", "exec sleep 3600");
    wait_running(data, "team-a", "after");
    for name in ["hog", "neighbour", "after"] {
        admin(data, Method::DELETE, &format!("{pods}/{name}"), None);
    }
}

/// The node's authenticated port takes a bearer token as the kubelet's webhook
/// authentication does (issue 51): a service account allowed `get nodes/metrics` scrapes
/// `/metrics`, one that is not gets 403, a token nobody issued 401. Before, only client
/// certificates were read and every token got 401.
fn the_nodes_port_takes_a_service_account_token(data: &Path) {
    use reqwest::Method;
    let post = |path: &str, body: Value| admin(data, Method::POST, path, Some(body));
    post(
        "/api/v1/namespaces/team-a/serviceaccounts",
        serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "scraper"}}),
    );
    post(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "node-metrics-reader"},
            "rules": [{"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]}]}),
    );
    post(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "scraper-node-metrics"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "node-metrics-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": "team-a"}]}),
    );
    let token_of = |name: &str| {
        let answer = post(
            &format!("/api/v1/namespaces/team-a/serviceaccounts/{name}/token"),
            serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        );
        answer["status"]["token"].as_str().unwrap().to_owned()
    };
    let ports = std::fs::read_to_string(data.with_file_name("ports")).unwrap();
    let node_port = ports.split_whitespace().nth(4).unwrap().to_owned();
    // The node serves its own certificate; the token is what is under test.
    let http = reqwest::blocking::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
    let scrape = |token: &str| {
        let r = http.get(format!("https://127.0.0.1:{node_port}/metrics")).bearer_auth(token).send().unwrap();
        let code = r.status().as_u16();
        (code, r.text().unwrap_or_default())
    };
    let (code, body) = scrape(&token_of("scraper"));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("# TYPE"), "Prometheus text: {body}");
    let (code, body) = scrape(&token_of("app"));
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("subresource=metrics"), "{body}");
    assert_eq!(scrape("not-a-token").0, 401);
}

/// `kubectl set image` to an image the pod may not use (issue 51 item 7): the old
/// container is killed (`Killing`, "definition changed", as upstream's computePodActions),
/// the new one never starts, and the status says why.
fn a_changed_image_the_pod_may_not_use_stops_the_old_container(dir: &Path, data: &Path, image: &str) {
    create_pod(data, "team-a", "changer", image);
    let first = wait_running(data, "team-a", "changer");
    let first_id = first["status"]["containerStatuses"][0]["containerID"].as_str().unwrap().to_owned();
    // Another tenant's repository on the same registry: team-a's credentials get nothing.
    let (host, _) = image.split_once("/team-a/").unwrap();
    let other = format!("{host}/team-b/app:v1");
    let kubeconfig = data.join("admin.kubeconfig");
    ok(
        kubectl_with(
            &kubeconfig,
            &dir.join("cache"),
            &["-n", "team-a", "set", "image", "pod/changer", &format!("app={other}")],
        ),
        "kubectl set image",
    );
    let waiting = wait_for("the changed container refused its image", Duration::from_secs(120), || {
        let p = admin(data, reqwest::Method::GET, "/api/v1/namespaces/team-a/pods/changer", None);
        let s = p["status"]["containerStatuses"][0].clone();
        let reason = s["state"]["waiting"]["reason"].as_str().unwrap_or_default().to_owned();
        (reason == "ErrImagePull" || reason == "ImagePullBackOff").then_some(s)
    });
    assert!(waiting["state"]["running"].is_null(), "{waiting}");
    let reasons = pod_event_reasons(data, "team-a", "changer");
    assert!(reasons.iter().any(|r| r == "Killing"), "the old container was not killed: {reasons:?}");
    // Nothing of the pod runs in containerd any more.
    let sock = data.join("containerd/run/containerd.sock");
    let tasks = Command::new("ctr").arg("--address").arg(&sock).args(["-n", "k8s.io", "tasks", "ls"]).output().unwrap();
    let tasks = String::from_utf8_lossy(&tasks.stdout);
    let old = first_id.trim_start_matches("containerd://");
    assert!(!tasks.lines().any(|l| l.starts_with(old) && l.contains("RUNNING")), "the old container runs on: {tasks}");
    admin(data, reqwest::Method::DELETE, "/api/v1/namespaces/team-a/pods/changer", None);
}

/// A container with no memory limit of its own is bounded by its pod's (issue 51 item 1):
/// in a team-a pod limited to 64Mi, an ephemeral container building a 256 MB string is
/// OOM-killed. The pod's cgroup holds its containers' sums (and `podPidsLimit`), its QoS
/// class is reported. Before, containers sat in flat `k8s.io/<id>` cgroups and the
/// ephemeral container ran to its end.
fn an_ephemeral_container_is_bounded_by_its_pods_memory_limit(data: &Path, image: &str) {
    use reqwest::Method;
    let pods = "/api/v1/namespaces/team-a/pods";
    admin(
        data,
        Method::POST,
        pods,
        Some(serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bounded"},
            "spec": {"nodeName": "node-1", "serviceAccountName": "app", "terminationGracePeriodSeconds": 1,
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65534,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "app", "image": image, "command": ["/bin/sh", "-c", "exec sleep 3600"],
                                "resources": {"limits": {"memory": "64Mi"}},
                                "securityContext": {"allowPrivilegeEscalation": false,
                                                    "capabilities": {"drop": ["ALL"]}}}]}})),
    );
    let pod = wait_running(data, "team-a", "bounded");
    assert_eq!(pod["status"]["qosClass"], "Burstable", "{}", pod["status"]);
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    // The pod's cgroup, v1 or v2 as the machine mounts them.
    let cgroup = Path::new("/sys/fs/cgroup");
    let (memory, pids) = if cgroup.join("cgroup.controllers").exists() {
        let dir = cgroup.join(format!("kubepods/burstable/pod{uid}"));
        (dir.join("memory.max"), dir.join("pids.max"))
    } else {
        let rel = format!("kubepods/burstable/pod{uid}");
        (
            cgroup.join("memory").join(&rel).join("memory.limit_in_bytes"),
            cgroup.join("pids").join(&rel).join("pids.max"),
        )
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert_eq!(read(&memory).trim(), (64u64 << 20).to_string());
    assert_eq!(read(&pids).trim(), "1024");
    // An ephemeral container (no resources: the API allows none) doubles a string 28 times.
    // As `kubectl debug` adds it: a strategic merge patch of the subresource.
    let patch = serde_json::json!({"spec": {"ephemeralContainers": [{"name": "hog", "image": image,
        "command": ["/bin/sh", "-c", "a=x; i=0; while [ $i -lt 28 ]; do a=\"$a$a\"; i=$((i+1)); done; echo ${#a}"],
        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}});
    let url = std::fs::read_to_string(data.join("server-url")).unwrap();
    let patched = client(data)
        .patch(format!("{url}{pods}/bounded/ephemeralcontainers"))
        .bearer_auth(admin_token(data))
        .header("content-type", "application/strategic-merge-patch+json")
        .body(patch.to_string())
        .send()
        .unwrap();
    assert_eq!(patched.status(), 200, "{}", patched.text().unwrap());
    let ended = wait_for("the ephemeral container ended", Duration::from_secs(120), || {
        let p = admin(data, Method::GET, &format!("{pods}/bounded"), None);
        let s = p["status"]["ephemeralContainerStatuses"].as_array()?.iter().find(|c| c["name"] == "hog")?.clone();
        s["state"]["terminated"].is_object().then_some(s)
    });
    let terminated = &ended["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 137, "killed by the kernel for its pod's limit: {ended}");
    // The pod's own container runs on.
    let pod = admin(data, Method::GET, &format!("{pods}/bounded"), None);
    assert!(pod["status"]["containerStatuses"][0]["state"]["running"].is_object(), "{}", pod["status"]);
    admin(data, Method::DELETE, &format!("{pods}/bounded"), None);
    // Its cgroup goes with it.
    wait_for("the pod's cgroup removed", Duration::from_secs(60), || (!memory.exists()).then_some(Value::Null));
}

/// A tenant that impersonates many service accounts still has one flow (issue 51 item 4):
/// team-b's `edit` account holds 700 requests whose bodies never come, each impersonating
/// one of 7 service accounts it made; team-a is still served. Before, each impersonated
/// account was a flow of its own, 7 × 100 filled the API server's 600, and every team-a
/// request got 429.
fn a_tenant_impersonating_many_accounts_denies_no_other_tenant(data: &Path) {
    use reqwest::Method;
    let post = |path: &str, body: Value| admin(data, Method::POST, path, Some(body));
    let sa = |ns: &str, name: &str| {
        post(
            &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
            serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
        )
    };
    let bind = |ns: &str, role: &str, account: &str| {
        post(
            &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
            serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": format!("{account}-{role}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}]}),
        )
    };
    let token_of = |ns: &str, name: &str| {
        let answer = post(
            &format!("/api/v1/namespaces/{ns}/serviceaccounts/{name}/token"),
            serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600}}),
        );
        answer["status"]["token"].as_str().unwrap().to_owned()
    };
    sa("team-b", "flooder");
    bind("team-b", "edit", "flooder");
    // Accounts that may create config maps (what team-b's `edit` may grant), so the
    // flood's requests pass authorization and wait for their bodies.
    let accounts: Vec<String> = (0..7)
        .map(|i| {
            sa("team-b", &format!("made-{i}"));
            bind("team-b", "edit", &format!("made-{i}"));
            format!("system:serviceaccount:team-b:made-{i}")
        })
        .collect();
    sa("team-a", "reader");
    bind("team-a", "view", "reader");
    let (attacker, victim) = (token_of("team-b", "flooder"), token_of("team-a", "reader"));
    let url = std::fs::read_to_string(data.join("server-url")).unwrap();
    let addr = url.trim_start_matches("https://").trim_end_matches('/').to_owned();
    let flood = Flood::start_impersonating(&addr, 700, true, Some(&attacker), "team-b", &accounts);
    assert!(flood.1 >= 690, "only {} requests held", flood.1);
    let http = client(data);
    let status_as = |token: &str, ns: &str| {
        http.get(format!("{url}/api/v1/namespaces/{ns}/configmaps")).bearer_auth(token).send().unwrap().status()
    };
    // The flood is in flight once team-b's own next request is refused.
    wait_for("team-b's requests in flight", Duration::from_secs(60), || {
        (status_as(&attacker, "team-b") == 429).then_some(Value::Null)
    });
    for _ in 0..20 {
        assert_eq!(status_as(&victim, "team-a"), 200, "team-a refused while team-b holds its flood");
    }
    drop(flood);
    wait_for("team-b served again", Duration::from_secs(60), || {
        (status_as(&attacker, "team-b") == 200).then_some(Value::Null)
    });
}

/// A deleted pod's credentials do not break its service account's later pulls on the node
/// (issue 51 item 6): team-a pod `first` pulls `image` (`Always`) and runs; once it is
/// deleted and registry-auth refuses its tokens, team-a pod `second` must still pull and
/// run. Before, the node served `second` the cached exchange token made from `first`'s
/// token (`cacheType: ServiceAccount`) and the registry answered 401.
fn a_new_pod_pulls_after_its_accounts_previous_pod_is_gone(data: &Path, image: &str) {
    use reqwest::Method;
    let (auth, http) = registry_auth_as_node(data);
    let pods = "/api/v1/namespaces/team-a/pods";
    let create = |name: &str| create_pod(data, "team-a", name, image);
    let running = |name: &str| wait_running(data, "team-a", name);
    create("first");
    let first = running("first");
    let token = registry_auth_token(data, "app", Some(("first", first["metadata"]["uid"].as_str().unwrap())));
    assert_eq!(team_a_pull_status(&auth, &http, &token), 200);
    admin(data, Method::DELETE, &format!("{pods}/first"), None);
    let url = std::fs::read_to_string(data.join("server-url")).unwrap();
    wait_for("team-a/first removed", Duration::from_secs(60), || {
        let status = client(data).get(format!("{url}{pods}/first")).bearer_auth(admin_token(data)).send().unwrap();
        (status.status() == 404).then_some(Value::Null)
    });
    // registry-auth knows `first` is gone: whatever the node cached from its token is dead.
    refused_within(|| team_a_pull_status(&auth, &http, &token));
    create("second");
    let second = running("second");
    let events = admin(data, Method::GET, "/api/v1/namespaces/team-a/events", None);
    let pulled = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["involvedObject"]["uid"] == second["metadata"]["uid"] && e["reason"] == "Pulled");
    assert!(pulled, "team-a/second pulled its image (Always): {events}");
    admin(data, Method::DELETE, &format!("{pods}/second"), None);
}

/// What a joining node starts from, as kubeadm's cluster has it: `kube-public/cluster-info`
/// (the server and its CA) is readable without credentials, and a token from
/// `podpass token create` signs it (the bootstrap signer) and authenticates as
/// `system:bootstrap:<id>` (the API server's bootstrap token authentication).
fn a_bootstrap_token_signs_the_cluster_info_anyone_may_read(data: &Path) {
    let out = Command::new(PODPASS)
        .args(["token", "create", "--kubeconfig", data.join("admin.kubeconfig").to_str().unwrap()])
        .output()
        .unwrap();
    let token = ok(out, "podpass token create").trim().to_owned();
    let (id, secret) = podpass_api::bootstrap_token::parse(&token).unwrap_or_else(|| panic!("{token:?}"));
    let url = std::fs::read_to_string(data.join("server-url")).unwrap();
    let anonymous = client(data);
    let info = wait_for("cluster-info signed with the new token", Duration::from_secs(60), || {
        let resp =
            anonymous.get(format!("{url}/api/v1/namespaces/kube-public/configmaps/cluster-info")).send().unwrap();
        assert_eq!(resp.status().as_u16(), 200, "cluster-info is readable without credentials");
        let cm: Value = resp.json().unwrap();
        cm["data"].get(format!("jws-kubeconfig-{id}")).is_some().then_some(cm)
    });
    let kubeconfig = info["data"]["kubeconfig"].as_str().unwrap();
    assert!(kubeconfig.contains(&format!("server: {url}")), "{kubeconfig}");
    let signature = info["data"][format!("jws-kubeconfig-{id}")].as_str().unwrap();
    assert!(podpass_api::bootstrap_token::signature_is_valid(signature, kubeconfig, id, secret));
    let me: Value = anonymous
        .post(format!("{url}/apis/authentication.k8s.io/v1/selfsubjectreviews"))
        .bearer_auth(&token)
        .json(&serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(me["status"]["userInfo"]["username"], format!("system:bootstrap:{id}"));
}

/// node-1 joined as a joining node does (the kubelet's TLS bootstrap): its request, asked by
/// a bootstrap token, auto-approved; its kubeconfig names its own certificate, and the
/// static token file names no node.
fn node_1_is_known_by_its_own_certificate(data: &Path) {
    let csrs = admin(data, reqwest::Method::GET, "/apis/certificates.k8s.io/v1/certificatesigningrequests", None);
    let bootstrap = csrs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["metadata"]["name"].as_str().unwrap().starts_with("node-csr-"))
        .unwrap_or_else(|| panic!("no node-csr- request: {csrs}"));
    assert!(bootstrap["spec"]["username"].as_str().unwrap().starts_with("system:bootstrap:"), "{bootstrap}");
    assert_eq!(bootstrap["status"]["conditions"][0]["reason"], "AutoApproved", "{bootstrap}");
    let kubeconfig = data.join("node-1/kubeconfig");
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(text.contains("kubelet-client-current.pem") && !text.contains("token:"), "{text}");
    let whoami = ok(kubectl_with(&kubeconfig, &data.join("cache-node"), &["auth", "whoami", "-o", "json"]), "whoami");
    let me: Value = serde_json::from_str(&whoami).unwrap();
    assert_eq!(me["status"]["userInfo"]["username"], "system:node:node-1", "{me}");
    let tokens = std::fs::read_to_string(data.join("tokens.csv")).unwrap();
    assert!(!tokens.contains("system:node:"), "tokens.csv names a node:\n{tokens}");
}

/// The join command `podpass up` printed, run from a second data dir on this machine:
/// discovery (the signed cluster-info, the CA pinned), the TLS bootstrap, its own
/// containerd, and node-2 Ready, running a pod bound to it (its token volume names
/// node-2); stopped (SIGTERM), it leaves no container running. node-2 then goes, its Node
/// with it, so nothing later is scheduled there.
fn a_second_data_dir_joins_with_the_printed_command(dir: &Path, data: &Path, said: &str, image: &str) {
    let prefix = "another node joins with (its token lives 24 h): ";
    let line =
        said.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or_else(|| panic!("no join command in:\n{said}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[..3], ["podpass", "node", "join"], "{line}");
    let node_dir = dir.join("node-2");
    let out = dir.join("node-2.out");
    let child = Command::new(PODPASS)
        .args(&words[1..])
        .args(["--data-dir", node_dir.to_str().unwrap(), "--node-name", "node-2", "--"])
        .args(["--port", "0", "--healthz-port", "0", "--eviction-hard", TEST_EVICTION_HARD])
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::from(std::fs::File::options().append(true).open(&out).unwrap()))
        .spawn()
        .unwrap();
    let node2 = Agent(child, node_dir.join("root"));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, node) = admin_status(data, "/api/v1/nodes/node-2");
        let ready = node["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
        if ready {
            break;
        }
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        assert!(Instant::now() < deadline, "node-2 did not join:\n{text}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let text = wait_for("node-2 says it joined", Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        text.contains("this node has joined the cluster").then_some(Value::String(text))
    });
    let text = text.as_str().unwrap();
    assert!(text.contains("[discovery] cluster-info from") && text.contains("[kubelet-start] containerd ("), "{text}");
    // It runs with the cluster's configuration, as kubeadm's join downloads it.
    assert!(text.contains("Writing kubelet configuration (kube-system/kubelet-config)"), "{text}");
    let kubelet = std::fs::read_to_string(node_dir.join("kubelet-config.yaml")).unwrap();
    assert!(kubelet.contains("podPidsLimit: 1024") && kubelet.contains("seccompDefault: true"), "{kubelet}");
    assert!(text.contains("pulled with each pod's own token through registry-auth at https://127.0.0.1:"), "{text}");
    let joined = std::fs::read_to_string(node_dir.join("kubeconfig")).unwrap();
    assert!(joined.contains("kubelet-client-current.pem"), "{joined}");

    let pod = admin(
        data,
        reqwest::Method::POST,
        "/api/v1/namespaces/team-a/pods",
        Some(serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "on-node-2"},
            "spec": {"nodeName": "node-2", "serviceAccountName": "app",
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65534,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "app", "image": image, "imagePullPolicy": "Always",
                                "command": ["/bin/sh", "-c", "exec sleep 3600"],
                                "securityContext": {"allowPrivilegeEscalation": false,
                                                    "capabilities": {"drop": ["ALL"]}}}]}})),
    );
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_owned();
    // It runs, on node-2's own containerd, pulled from the cluster's registry with the
    // pod's own token (node-2's credential provider and hosts.toml, from the cluster), and
    // node-2 records who pulled it.
    wait_for("node-2 runs its pod", Duration::from_secs(120), || {
        let (_, p) = admin_status(data, "/api/v1/namespaces/team-a/pods/on-node-2");
        (p["status"]["phase"] == "Running" && p["status"]["containerStatuses"][0]["state"]["running"].is_object())
            .then_some(p)
    });
    let volumes = node_dir.join(format!("root/pods/{uid}/volumes/kubernetes.io~projected"));
    let token = wait_for("node-2 writes its pod's token", Duration::from_secs(60), || {
        let dir = std::fs::read_dir(&volumes).ok()?.flatten().next()?;
        std::fs::read_to_string(dir.path().join("token")).ok().map(Value::String)
    });
    let payload = token.as_str().unwrap().split('.').nth(1).unwrap().to_owned();
    let claims: Value =
        serde_json::from_slice(&data_encoding::BASE64URL_NOPAD.decode(payload.as_bytes()).unwrap()).unwrap();
    assert_eq!(claims["kubernetes.io"]["node"]["name"], "node-2", "{claims}");
    let pulled: Vec<String> = std::fs::read_dir(node_dir.join("root/image_manager/pulled"))
        .map(|d| d.flatten().map(|e| std::fs::read_to_string(e.path()).unwrap_or_default()).collect())
        .unwrap_or_default();
    assert!(
        pulled.iter().any(|r| r.contains("\"team-a\"") && r.contains("\"app\"")),
        "node-2's pull record names team-a/app: {pulled:?}"
    );
    admin(data, reqwest::Method::DELETE, "/api/v1/namespaces/team-a/pods/on-node-2?gracePeriodSeconds=0", None);
    // Stopped as a person would (Ctrl-C): the agent, the containers, then containerd.
    let mut node2 = node2;
    let pid = rustix::process::Pid::from_raw(node2.0.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = wait_for("node-2's join stops", Duration::from_secs(60), || {
        node2.0.try_wait().unwrap().map(|s| Value::from(s.code().unwrap_or(-1)))
    });
    assert_eq!(status, 0, "{}", std::fs::read_to_string(&out).unwrap_or_default());
    let containerd_dir = node_dir.join("containerd");
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(containerd_dir.to_str().unwrap()))
        .collect();
    assert!(left.is_empty(), "left running: {left:?}");
    drop(node2);

    // The same command again (the machine restarted): its certificate is enough.
    let lease = || {
        let (_, l) = admin_status(data, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-2");
        l["spec"]["renewTime"].as_str().unwrap_or_default().to_owned()
    };
    let before = lease();
    let again_out = dir.join("node-2-again.out");
    let again = Command::new(PODPASS)
        .args(&words[1..])
        .args(["--data-dir", node_dir.to_str().unwrap(), "--node-name", "node-2", "--"])
        .args(["--port", "0", "--healthz-port", "0", "--prepare-only", "--eviction-hard", TEST_EVICTION_HARD])
        .stdout(std::fs::File::create(&again_out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let again = Agent(again, node_dir.join("root"));
    wait_for("the rejoined node-2 renews its lease", Duration::from_secs(60), || {
        (lease() != before).then_some(Value::Null)
    });
    let said = std::fs::read_to_string(&again_out).unwrap();
    assert!(said.contains("joined before, no discovery"), "{said}");
    drop(again);
    admin(data, reqwest::Method::DELETE, "/api/v1/nodes/node-2", None);
}

fn revoked_credentials_are_refused(data: &Path) {
    use reqwest::Method;
    let (auth, http) = registry_auth_as_node(data);
    // registry-auth's metrics: refused without a token, served to the cluster's admin.
    let metrics = format!("{auth}/metrics");
    assert_eq!(http.get(&metrics).send().unwrap().status(), 401);
    let scraped = http.get(&metrics).bearer_auth(admin_token(data)).send().unwrap();
    assert_eq!(scraped.status(), 200);
    assert!(scraped.text().unwrap().contains("registry_auth_"), "the metrics");
    let get = |password: &str| team_a_pull_status(&auth, &http, password);
    // A pod's token: granted while the pod exists, refused once it is deleted.
    let pod = admin(
        data,
        Method::POST,
        "/api/v1/namespaces/team-a/pods",
        Some(serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "short-lived"},
            "spec": {"serviceAccountName": "app",
                "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "c", "image": "example/c:1", "securityContext":
                    {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}})),
    );
    let token = registry_auth_token(data, "app", Some(("short-lived", pod["metadata"]["uid"].as_str().unwrap())));
    assert_eq!(get(&token), 200);
    // ... and an exchange token made from it dies with the pod too.
    let exchange_of = |token: &str| exchange_token(&auth, &http, token);
    let pods_exchange = exchange_of(&token);
    assert_eq!(get(&pods_exchange), 200);
    admin(data, Method::DELETE, "/api/v1/namespaces/team-a/pods/short-lived", None);
    refused_within(|| get(&token));
    refused_within(|| get(&pods_exchange));
    // An exchange token: bound to its service account's UID.
    admin(
        data,
        Method::POST,
        "/api/v1/namespaces/team-a/serviceaccounts",
        Some(serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "temp"}})),
    );
    let sa_token = registry_auth_token(data, "temp", None);
    let exchange = exchange_of(&sa_token);
    assert_eq!(get(&exchange), 200);
    admin(data, Method::DELETE, "/api/v1/namespaces/team-a/serviceaccounts/temp", None);
    refused_within(|| get(&exchange));
    // A leaked token revoked by its jti: refused, with every exchange token made from it.
    let leaked = registry_auth_token(data, "app", None);
    let leaked_exchange = exchange_of(&leaked);
    assert_eq!(get(&leaked), 200);
    let claims = jwt_claims(&leaked);
    let until = jiff::Timestamp::from_second(claims["exp"].as_i64().unwrap()).unwrap().to_string();
    admin(
        data,
        Method::POST,
        "/apis/revocation.podpass.dev/v1/revokedtokens",
        Some(serde_json::json!({"apiVersion": "revocation.podpass.dev/v1", "kind": "RevokedToken",
            "metadata": {"name": claims["jti"]}, "spec": {"expirationTimestamp": until, "reason": "leaked"}})),
    );
    refused_within(|| get(&leaked));
    refused_within(|| get(&leaked_exchange));
}

/// tcpdump on `lo` for the given ports (Debian `tcpdump`), written as it captures; stopped
/// (and its file complete) on [`Capture::finish`].
struct Capture {
    child: Child,
    file: std::path::PathBuf,
}

impl Capture {
    fn start(dir: &Path, ports: &[&str]) -> Capture {
        let file = dir.join("lo.pcap");
        let errors = dir.join("tcpdump.err");
        let filter = ports.iter().map(|p| format!("tcp port {p}")).collect::<Vec<_>>().join(" or ");
        let child = Command::new("tcpdump")
            .args(["-i", "lo", "-U", "-s", "0", "-w"])
            .arg(&file)
            .arg(filter)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&errors).unwrap())
            .spawn()
            .expect("tcpdump (Debian package tcpdump)");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !std::fs::read_to_string(&errors).unwrap_or_default().contains("listening on") {
            assert!(
                std::time::Instant::now() < deadline,
                "tcpdump did not start: {:?}",
                std::fs::read_to_string(&errors)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Capture { child, file }
    }

    /// Stops the capture; what it holds.
    fn finish(mut self) -> Vec<u8> {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(i32::try_from(self.child.id()).unwrap()).unwrap(),
            rustix::process::Signal::INT,
        );
        let _ = self.child.wait();
        std::fs::read(&self.file).unwrap()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn up_demo_tells_the_story_then_a_second_up_resumes_the_same_cluster_and_ctrl_c_leaves_nothing() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Everything the cluster's parts say to each other on loopback while a tenant pulls
    // (the API server, registry-auth, the registry): what a process with the node's
    // network and CAP_NET_RAW would see.
    drop(up(&data, &[]));
    let ports = std::fs::read_to_string(data.with_file_name("ports")).unwrap();
    let ports: Vec<&str> = ports.split_whitespace().take(3).collect();
    let capture = Capture::start(dir.path(), &ports);
    let out = demo(dir.path(), &data, &["--demo"]);
    // No token, exchange token or registry token in clear on loopback: every JWT starts
    // `eyJhbGci` ({"alg"…), and basic or bearer credentials would name their scheme.
    let captured = capture.finish();
    assert!(captured.len() > 100_000, "the capture saw the pull ({} bytes)", captured.len());
    for needle in [&b"eyJhbGci"[..], b"Authorization:", b"authorization:", b"Bearer ", b"Basic "] {
        assert!(
            !captured.windows(needle.len()).any(|w| w == needle),
            "{:?} crossed loopback in clear",
            String::from_utf8_lossy(needle)
        );
    }
    // The checklist, then each step of the story, in order.
    let steps = [
        "podpass up: a new cluster in",
        "✓ control plane",
        "✓ controllers",
        "✓ scheduler",
        "✓ registry-auth",
        "✓ registry ",
        "✓ containerd",
        "✓ node node-1",
        &format!("export KUBECONFIG={}", data.canonicalize().unwrap().join("admin.kubeconfig").display()),
        "1. pushed 127.0.0.1:",
        "as kube-system/podpass-publisher",
        "2. pod team-a/app (service account team-a/app, no pull secret) pulled",
        "registry-auth granted repository:team-a/app:pull to team-a/app (pod team-a/app, node node-1)",
        "its container runs and printed its own token's claims (kubectl logs -n team-a app): sub system:serviceaccount:team-a:app, pod app",
        "3. pod team-b/app on the same image: refused — ErrImagePull",
        "its container never started",
        "registry-auth gave team-b/app nothing of repository:team-a/app:pull",
        "4. the pod's token on node-1:",
        "sub system:serviceaccount:team-a:app",
        "5. the pull record",
        "may be used by service accounts team-a/app (uid",
        "6. deleted both pods",
        "7. deployment team-a/web (2 replicas, service account team-a/app)",
        "whose pods system:serviceaccount:kube-system:replicaset-controller created",
        "each replica's pod pulled",
        "with team-a's own identity: registry-auth granted repository:team-a/app:pull to team-a/app for pods web-",
        "8. rolled to",
        "team-a/app:v2",
        "revision 2",
        "pulled v2 as team-a/app too; the old pods are gone",
        "9. deployment team-b/web on",
        "which never runs — ErrImagePull",
        "demo: every step held.",
        "stopped.",
    ];
    let mut at = 0;
    for step in steps {
        let found = out[at..].find(step).unwrap_or_else(|| panic!("{step:?} (in order) in:\n{out}"));
        at += found + step.len();
    }
    // containerd's pull was proven at the registry itself (registry-auth's token, the
    // node's certificate), not taken on the runtime's word.
    let node_log = std::fs::read_to_string(data.join("logs/node-1.log")).unwrap();
    let verified = node_log
        .lines()
        .find(|l| l.contains("pull verified at the image's registry") && l.contains("team-a/app"))
        .unwrap_or_else(|| panic!("no verification at the registry in the node's log:\n{node_log}"));
    assert!(verified.contains(r#""auth":"bearer""#), "{verified}");
    // One record of who pulled what: the node's decisions joined with registry-auth's
    // grants on the credential id, pod UID and digest.
    let audit = |query: &[&str]| {
        let logs = data.join("logs");
        let out = Command::new(PODPASS)
            .args(["audit", "images", "-o", "json", "--node-log"])
            .arg(logs.join("node-1-audit.log"))
            .arg("--registry-auth-log")
            .arg(logs.join("registry-auth-audit.log"))
            .args(query)
            .output()
            .unwrap();
        let rows: Vec<Value> =
            String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        (out.status.code(), rows)
    };
    let (code, rows) = audit(&["--pod", "team-a/app"]);
    assert_eq!(code, Some(0), "{rows:?}");
    let pulled = rows.iter().find(|r| r["decision"] == "verified_at_origin").unwrap_or_else(|| panic!("{rows:?}"));
    let (digest, credential) = (pulled["digest"].as_str().unwrap(), pulled["credential_id"].as_str().unwrap());
    assert!(digest.starts_with("sha256:") && credential.starts_with("JTI="), "{pulled}");
    assert!(
        !pulled["pod_uid"].as_str().unwrap().is_empty() && !pulled["service_account_uid"].as_str().unwrap().is_empty()
    );
    // ...and registry-auth's grants to that very credential, for team-a's repository.
    let grants: Vec<&Value> = rows.iter().filter(|r| r.get("scope").is_some()).collect();
    assert!(!grants.is_empty(), "{rows:?}");
    for g in &grants {
        assert_eq!(g["credential_id"], credential, "{g}");
        assert_eq!(g["pod_uid"], pulled["pod_uid"], "{g}");
        assert_eq!(g["service_account_uid"], pulled["service_account_uid"], "{g}");
    }
    // The plugin's exchange (no scope) and containerd's pull of team-a's repository.
    assert!(grants.iter().any(|g| g["scope"].as_str().unwrap().contains("repository:team-a/app:pull")), "{grants:?}");
    // Which pods ran that digest: team-a's pod and its Deployment's first two, none of
    // team-b's (refused).
    let (_, ran) = audit(&["--digest", digest]);
    let pods: std::collections::BTreeSet<&str> = ran.iter().filter_map(|r| r["pod"].as_str()).collect();
    assert!(pods.contains("team-a/app") && pods.len() == 3, "{ran:?}");
    assert!(pods.iter().all(|p| p.starts_with("team-a/")), "{ran:?}");
    let (_, team_b) = audit(&["--pod", "team-b/app"]);
    assert!(team_b.iter().any(|r| r["decision"] == "refused"), "{team_b:?}");
    let (code, _) = audit(&["--digest", "sha256:0000"]);
    assert_eq!(code, Some(1), "nothing matched");
    // Nothing of the cluster is readable by other local users (0700 dirs, 0600 store).
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    // containerd's root (a private image's blobs) is inside the 0700 containerd dir.
    for d in ["", "logs", "registry-auth", "registry", "node-1", "node-1/root", "containerd"] {
        assert_eq!(mode(&data.join(d)), 0o700, "{d}");
    }
    assert_eq!(mode(&data.join("store.redb")), 0o600);
    // The cluster is down: what resuming must keep, from the files.
    let key = std::fs::read(data.join("sa.key")).unwrap();
    let kept_records = records(&data);
    assert_eq!(kept_records.len(), 2, "a pull record of v1 and one of v2: {kept_records:?}");

    // A second `podpass up` on the same data dir resumes it; a data dir someone opened up
    // is named in a warning (and left as it is).
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let log2 = dir.path().join("up.out");
    let mut guard = Running(Some(
        up(&data, &[])
            .stdout(std::fs::File::create(&log2).unwrap())
            .stderr(Stdio::from(std::fs::File::create(dir.path().join("up.err")).unwrap()))
            .spawn()
            .unwrap(),
    ));
    let child = guard.0.as_mut().unwrap();
    wait_until_up(child, &log2);
    let text = std::fs::read_to_string(&log2).unwrap();
    assert!(text.starts_with("podpass up: resuming the cluster in"), "{text}");
    let err = std::fs::read_to_string(dir.path().join("up.err")).unwrap();
    assert!(err.contains(&format!("warning: {} is mode 0755", data.display())), "{err}");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    // The logs were appended to, and the first run's registry-auth audit (its own file) is
    // still there.
    let auth_log = std::fs::read_to_string(data.join("logs/registry-auth.log")).unwrap();
    assert_eq!(auth_log.matches("--- podpass up: registry-auth started").count(), 2, "{auth_log}");
    let audit = std::fs::read_to_string(data.join("logs/registry-auth-audit.log")).unwrap();
    assert!(audit.contains("repository:team-a/app:pull"), "the first run's audit lines are kept: {audit}");
    assert_eq!(std::fs::read(data.join("sa.key")).unwrap(), key, "same signing key");
    let first_uid = out
        .split("may be used by service accounts team-a/app (uid ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap()
        .to_owned();
    assert!(sa_uid(&data).starts_with(&first_uid), "team-a/app kept its UID");
    assert_eq!(records(&data), kept_records, "records kept");
    let sock = data.join("containerd/run/containerd.sock");
    let images =
        Command::new("ctr").arg("--address").arg(&sock).args(["-n", "k8s.io", "images", "ls", "-q"]).output().unwrap();
    let images = String::from_utf8_lossy(&images.stdout);
    assert!(images.contains("team-a/app:v1"), "image still present in containerd: {images}");
    // The real kubectl works with the printed KUBECONFIG.
    let kubectl = kubectl_with(&data.join("admin.kubeconfig"), &dir.path().join("cache"), &["get", "node", "node-1"]);
    assert!(ok(kubectl, "kubectl get node").contains("Ready"));
    // Pod Security: a tenant's hostNetwork pod in a namespace without labels is refused at
    // the API (enforce baseline), with upstream's message.
    let sniffer = dir.path().join("sniffer.json");
    std::fs::write(
        &sniffer,
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sniffer", "namespace": "default"},
            "spec": {"hostNetwork": true, "containers": [{"name": "tcpdump", "image": "busybox"}]}})
        .to_string(),
    )
    .unwrap();
    let refused = kubectl_with(
        &data.join("admin.kubeconfig"),
        &dir.path().join("cache"),
        &["apply", "-f", sniffer.to_str().unwrap()],
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("violates PodSecurity \"baseline:latest\": host namespaces (hostNetwork=true)"),
        "{stderr}"
    );

    // registry-auth asks the control plane's TokenReview: a deleted pod's token, and an
    // exchange token of a deleted service account, are refused within the caches' 10 s.
    revoked_credentials_are_refused(&data);
    let revocations_quiet_since = Instant::now();
    a_new_pod_pulls_after_its_accounts_previous_pod_is_gone(&data, &image_in(&out));
    a_registry_that_never_answers_holds_no_other_tenants_pull(&data, &image_in(&out));
    a_tenant_impersonating_many_accounts_denies_no_other_tenant(&data);
    an_ephemeral_container_is_bounded_by_its_pods_memory_limit(&data, &image_in(&out));
    a_changed_image_the_pod_may_not_use_stops_the_old_container(dir.path(), &data, &image_in(&out));
    the_nodes_port_takes_a_service_account_token(&data);
    a_bootstrap_token_signs_the_cluster_info_anyone_may_read(&data);
    node_1_is_known_by_its_own_certificate(&data);
    pods_over_their_storage_limits_are_evicted(&data, &image_in(&out));

    // node-1's provider configuration changes while the cluster runs: a bad one is refused
    // with a Warning on the Node naming the field, the node keeps the last good one; the
    // good one comes back.
    let providers = data.join("node-1/credential-provider.yaml");
    let good = std::fs::read_to_string(&providers).unwrap();
    std::fs::write(&providers, good.replace("defaultCacheDuration: 10m", "defaultCacheDuration: -5s")).unwrap();
    let node_event = |reason: &str| -> Option<Value> {
        let list = admin(&data, reqwest::Method::GET, "/api/v1/namespaces/default/events", None);
        list["items"]
            .as_array()?
            .iter()
            .rev()
            .find(|e| e["involvedObject"]["kind"] == "Node" && e["reason"] == reason)
            .cloned()
    };
    let refused = wait_for("the bad provider configuration refused", Duration::from_secs(30), || {
        node_event("CredentialProviderConfigInvalid")
    });
    assert!(refused["message"].as_str().unwrap().contains("defaultCacheDuration"), "{refused}");
    std::fs::write(&providers, good).unwrap();
    wait_for("the good provider configuration back", Duration::from_secs(30), || {
        node_event("CredentialProviderConfigReloaded")
    });

    // `podpass node explain` on a pod the pull records do not let use the image: the
    // reason comes first; the JSON carries the credentials and providers reports' facts.
    let pod = dir.path().join("team-b.json");
    std::fs::write(
        &pod,
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app", "namespace": "team-b"},
            "spec": {"nodeName": "node-1", "serviceAccountName": "app",
                     "securityContext": {"runAsNonRoot": true, "runAsUser": 65534,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "app", "image": image_in(&out), "imagePullPolicy": "IfNotPresent",
                                     "securityContext": {"allowPrivilegeEscalation": false,
                                                         "capabilities": {"drop": ["ALL"]}}}]}})
        .to_string(),
    )
    .unwrap();
    ok(
        kubectl_with(
            &data.join("admin.kubeconfig"),
            &dir.path().join("cache"),
            &["apply", "-f", pod.to_str().unwrap()],
        ),
        "apply",
    );
    let explain_for = |pod: &[&str], extra: &[&str]| {
        let node = data.join("node-1");
        let out = Command::new(PODPASS)
            .args(["node", "explain", "--kubeconfig", node.join("kubeconfig").to_str().unwrap()])
            .args(["--root-dir", node.join("root").to_str().unwrap()])
            .args(pod)
            .args(["--container-runtime-endpoint", &format!("unix://{}", sock.display())])
            .args(["--image-credential-provider-config", node.join("credential-provider.yaml").to_str().unwrap()])
            .args(["--image-credential-provider-bin-dir", Path::new(PODPASS).parent().unwrap().to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        ok(out, "node explain")
    };
    let explain = |extra: &[&str]| explain_for(&["--pod", "team-b/app"], extra);
    let text = explain(&[]);
    let mut lines = text.lines();
    // The node it looks at, named by the certificate in its root dir.
    assert!(lines.next().is_some_and(|l| l.starts_with("node node-1 (its records and images under ")), "{text}");
    let first: Vec<&str> = lines.take(4).collect();
    assert!(first[0].starts_with("pod team-b/app (service account team-b/app, node node-1)"), "{text}");
    assert!(first[1].ends_with("NOT usable without a pull"), "{text}");
    assert!(first[2].starts_with("  decision: pull to prove access"), "{text}");
    assert_eq!(
        first[3], "  why: the record does not name this pod's credentials: the pod must pull to prove access",
        "{text}"
    );
    assert!(
        text.contains("127.0.0.1:") && text.contains("service account team-a/app (uid"),
        "the record's holder: {text}"
    );
    let json: Value = serde_json::from_str(&explain(&["-o", "json"])).unwrap();
    assert_eq!(json["node"]["name"], "node-1", "{json}");
    assert!(json["node"]["podBoundElsewhere"].is_null(), "{json}");
    let c = &json["containers"][0];
    assert_eq!(c["present"], true);
    assert_eq!(c["verification"]["result"], "mustAuthenticate");
    assert_eq!(c["verification"]["policy"], "NeverVerifyPreloadedImages");
    assert_eq!(c["providers"][0]["name"], "podpass-credential-provider");
    assert_eq!(c["providers"][0]["serviceAccount"], "team-b/app", "{c}");
    assert_eq!(c["credentials"][0]["source"]["type"], "serviceAccount");
    assert_eq!(c["credentials"][0]["password"], "<redacted>");
    assert_eq!(c["record"]["kind"], "ImagePulledRecord");
    // Where a pull's proof comes from: the registry itself, not containerd's pull.
    assert_eq!(c["proof"]["at"], "origin", "{c}");
    assert!(text.contains("  ├─ proof of access by a pull: 127.0.0.1:"), "{text}");
    let trusting: Value = serde_json::from_str(&explain(&["-o", "json", "--trust-runtime-pulls"])).unwrap();
    assert_eq!(trusting["containers"][0]["proof"]["at"], "runtime");
    // One image: for the pod, as its container's; for no pod, a node-level pull, where the
    // provider (it requires a service account) is skipped and says so.
    let image = c["image"].as_str().unwrap();
    let one: Value = serde_json::from_str(&explain(&["-o", "json", "--image", image])).unwrap();
    assert_eq!(one["containers"].as_array().unwrap().len(), 1, "{one}");
    assert_eq!(one["containers"][0]["verification"]["result"], "mustAuthenticate");
    let node_level: Value = serde_json::from_str(&explain_for(&[], &["-o", "json", "--image", image])).unwrap();
    assert!(node_level["pod"].is_null(), "{node_level}");
    let skipped = node_level["containers"][0]["providers"][0]["skipReason"].as_str().unwrap_or_default();
    assert!(skipped.contains("has no service account"), "{node_level}");
    // --no-exec runs no plugin
    let json: Value = serde_json::from_str(&explain(&["-o", "json", "--no-exec"])).unwrap();
    assert_eq!(json["containers"][0]["providers"][0]["ran"], false);
    assert_eq!(json["containers"][0]["providers"][0]["skipReason"], "not run (--no-exec)");
    assert_eq!(records(&data), kept_records, "explain wrote no record");

    a_revocation_reaches_registry_auth_after_its_watches_idled(&data, revocations_quiet_since);
    a_second_data_dir_joins_with_the_printed_command(
        dir.path(),
        &data,
        &std::fs::read_to_string(&log2).unwrap(),
        &image_in(&out),
    );

    a_replica_set_runs_team_as_pods_each_pulling_as_itself(&data, &image_in(&out));
    a_deployment_is_refused_then_rolls_scales_and_undoes_through_kubectl(dir.path(), &data, &image_in(&out));
    jobs_complete_fail_after_their_backoff_and_go_after_their_ttl(dir.path(), &data, &image_in(&out));

    // Each part killed with -9 is started again by itself, and the cluster serves again.
    let up_pid = child.id();
    for victim in children_of(up_pid) {
        assert!(Command::new("kill").args(["-KILL", &victim.to_string()]).status().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = children_of(up_pid);
            if now.len() == PARTS && !now.contains(&victim) && now.iter().all(|p| alive(*p)) {
                break;
            }
            assert!(Instant::now() < deadline, "part {victim} was not started again: {now:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = kubectl_with(&data.join("admin.kubeconfig"), &dir.path().join("cache"), &["get", "node", "node-1"]);
        if out.status.success() && String::from_utf8_lossy(&out.stdout).contains(" Ready ") {
            break;
        }
        assert!(Instant::now() < deadline, "the cluster did not serve again after the restarts");
        std::thread::sleep(Duration::from_millis(500));
    }
    let said = std::fs::read_to_string(&log2).unwrap();
    assert_eq!(said.matches(": started again").count(), PARTS, "{said}");
    assert!(said.contains("starting it again in 1 s"), "{said}");

    // The pods' secret and projected volumes are tmpfs mounts while it runs (as root).
    assert!(!mounts_under(&data.join("node-1/root")).is_empty(), "the pods' volumes are in memory");
    // A pod whose container keeps failing: its restarts are its own history (issue 51
    // item 9), kept across the stop below, which removes its containers.
    let crasher = admin(
        &data,
        reqwest::Method::POST,
        "/api/v1/namespaces/team-a/pods",
        Some(serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "crasher"},
            "spec": {"nodeName": "node-1", "serviceAccountName": "app", "terminationGracePeriodSeconds": 1,
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65534,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "app", "image": image_in(&out), "command": ["/bin/sh", "-c", "exit 1"],
                                "securityContext": {"allowPrivilegeEscalation": false,
                                                    "capabilities": {"drop": ["ALL"]}}}]}})),
    );
    let crasher_path = format!("/api/v1/namespaces/team-a/pods/{}", crasher["metadata"]["name"].as_str().unwrap());
    wait_for("the crasher restarted twice", Duration::from_secs(120), || {
        let p = admin(&data, reqwest::Method::GET, &crasher_path, None);
        let s = p["status"]["containerStatuses"][0].clone();
        (s["restartCount"].as_i64().unwrap_or(0) >= 2).then_some(s)
    });
    // Ctrl-C: every part stops, none is left behind.
    let parts = children_of(child.id());
    assert_eq!(parts.len(), PARTS, "every part: {parts:?}");
    let restarts_before =
        admin(&data, reqwest::Method::GET, &crasher_path, None)["status"]["containerStatuses"][0]["restartCount"]
            .as_i64()
            .unwrap();
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let (code, text) = wait_output(guard.0.take().unwrap(), Duration::from_secs(60), &log2);
    assert_eq!(code, 0, "{text}");
    assert!(text.trim_end().ends_with("stopped."), "{text}");
    for p in parts {
        assert!(!alive(p), "part {p} left running");
    }
    // ...and no mount: the pods' tmpfs volumes are detached, so the data dir can be removed.
    assert_eq!(mounts_under(&data.join("node-1/root")), Vec::<String>::new(), "mounts left under the node's root");

    // A third `podpass up`: the crasher's containers were removed with the stop, its logs
    // were not; its restart count goes on from them (kubelet calcRestartCountByLogDir), not
    // from 0.
    // It runs with an inode threshold a little below what is free now, for the
    // node-pressure step below.
    let log3 = dir.path().join("up3.out");
    let third_began = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let (margin, hog_files) = (20_000, 60_000);
    let threshold = format!("nodefs.inodesFree<{}", inodes_free(&data).saturating_sub(margin));
    let mut third = Running(Some(
        up(&data, &["--eviction-hard", &threshold, "--eviction-pressure-transition-period", "5s"])
            .stdout(std::fs::File::create(&log3).unwrap())
            .stderr(Stdio::from(std::fs::File::create(dir.path().join("up3.err")).unwrap()))
            .spawn()
            .unwrap(),
    ));
    wait_until_up(third.0.as_mut().unwrap(), &log3);
    // The first status of a container this run started (its own start, or the last one's
    // while it waits to restart).
    let again = wait_for("the crasher started again", Duration::from_secs(120), || {
        let p = admin(&data, reqwest::Method::GET, &crasher_path, None);
        let s = p["status"]["containerStatuses"][0].clone();
        let started = [&s["state"]["running"], &s["state"]["terminated"], &s["lastState"]["terminated"]]
            .into_iter()
            .find_map(|t| t["startedAt"].as_str().map(str::to_owned))?;
        // Strictly later: a status the last run posted in the same second is not this run's
        // (this run's first start comes seconds after it began).
        (started > third_began).then_some(s)
    });
    assert!(
        again["restartCount"].as_i64().unwrap() > restarts_before,
        "restarts {restarts_before} before the stop, then {again}"
    );
    a_pod_filling_the_nodes_inodes_is_evicted_and_its_neighbour_runs_on(&data, &image_in(&out), hog_files);
    let child = third.0.take().unwrap();
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let (code, text) = wait_output(child, Duration::from_secs(60), &log3);
    assert_eq!(code, 0, "{text}");
}

/// Waits (two minutes at most) until the `podpass up` writing `log` says every part is up.
fn wait_until_up(child: &mut Child, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !std::fs::read_to_string(log).unwrap().contains("Ctrl-C stops every part") {
        assert!(child.try_wait().unwrap().is_none(), "up exited: {}", std::fs::read_to_string(log).unwrap());
        assert!(Instant::now() < deadline, "not up: {}", std::fs::read_to_string(log).unwrap());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The mount points at or under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap();
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    table
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| Path::new(p).starts_with(&dir))
        .map(String::from)
        .collect()
}

#[test]
fn a_port_in_use_a_missing_registry_or_containerd_is_one_line_saying_what_to_do_and_nothing_starts() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port().to_string();
    let out = up(&data, &["--apiserver-port", &port]).env("PATH", dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "one line per problem: {err}");
    assert!(
        lines.iter().any(|l| l.starts_with("error: running containers needs containerd")
            && l.ends_with("or pass --prepare-only for a node that prepares pods without running containers")),
        "{err}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(&format!("error: port {port} (the control plane) on 127.0.0.1:"))
            && l.ends_with("stop what holds it, or pick another with --apiserver-port")),
        "{err}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(
            "error: docker-registry (the CNCF registry) not found on PATH: apt-get install docker-registry"
        )),
        "{err}"
    );
    assert!(!data.join("server-url").exists(), "nothing started");

    // A second `podpass up` on a data dir in use is refused, naming it.
    let lock = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(data.join("up.lock")).unwrap();
    lock.lock().unwrap();
    let out = up(&data, &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("error: another `podpass up` is running on"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A pull-through mirror in front of the cluster's registry that serves every image without
/// asking for credentials: containerd pulls through it, so its pulls prove nothing. The
/// demo's story still holds — team-a's pod runs with its layers from the mirror, team-b's is
/// refused — because the node verifies each pull at the registry itself.
/// `podpass up --nodes 3 --demo`, its registry behind a mirror: three nodes, each with its
/// own containerd, certificate and pull records; team-a's replicas spread over two of them,
/// each pulling as itself; team-b is refused on a node where team-a's image already is.
#[test]
fn up_three_nodes_demo_through_a_mirror_that_asks_no_credentials_still_refuses_team_b() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for d in [&data, &data.join("registry"), &data.join("registry/storage")] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let mirror = registry::Registry::anonymous_over(&dir.path().join("mirror"), &data.join("registry/storage"));
    let mirror_url = format!("http://{}", mirror.host);
    let out = demo(dir.path(), &data, &["--demo", "--nodes", "3", "--registry-mirror", &mirror_url]);
    for step in [
        "2. pod team-a/app (service account team-a/app, no pull secret) pulled",
        "3. pod team-b/app on the same image: refused — ErrImagePull",
        "its container never started",
        "where team-a's replica pulled it: its ReplicaSet keeps pod",
        "demo: every step held.",
    ] {
        assert!(out.contains(step), "{step:?} in:\n{out}");
    }
    // Every node came up with its own containerd.
    for part in ["containerd node-2", "containerd node-3", "node node-2", "node node-3"] {
        assert!(out.contains(part), "{part:?} in:\n{out}");
    }
    assert!(data.join("node-3/containerd").is_dir() && data.join("logs/containerd-node-3.log").is_file());
    // team-a's two replicas went to two nodes.
    let spread = out.lines().find(|l| l.contains("each replica's pod pulled")).unwrap_or_default();
    let nodes: std::collections::BTreeSet<&str> =
        spread.split("(on ").skip(1).filter_map(|rest| rest.split(')').next()).collect();
    assert_eq!(nodes.len(), 2, "{spread}");
    // Each node knew itself by its own certificate, from the same bootstrap path.
    for node in ["node-2", "node-3"] {
        let current = data.join(node).join("root/pki/kubelet-client-current.pem");
        assert!(current.exists(), "{} missing", current.display());
    }
    // containerd took the layers from the mirror (which the registry never asked about)...
    let mirror_log = std::fs::read_to_string(mirror.dir.join("registry.log")).unwrap();
    assert!(mirror_log.contains("/v2/team-a/app/blobs/sha256:"), "{mirror_log}");
    // ...and the node asked the registry itself: team-a proved access, team-b did not.
    let node_log = std::fs::read_to_string(data.join("logs/node-1.log")).unwrap();
    assert!(node_log.contains("pull verified at the image's registry"), "{node_log}");
    assert!(
        node_log.contains("verifying at the image's registry (the runtime may have pulled from a mirror)"),
        "{node_log}"
    );
}

/// A ReplicaSet of team-a's image, run by the controller manager: its two pods are
/// created by the ReplicaSet controller's own service account, admitted by Pod Security,
/// and each pulls and runs on the node with its own service account's identity.
fn a_replica_set_runs_team_as_pods_each_pulling_as_itself(data: &Path, image: &str) {
    let rs = serde_json::json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"serviceAccountName": "app", "terminationGracePeriodSeconds": 1,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65534,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "app", "image": image, "command": ["/bin/sh", "-c", "sleep 3600"],
                                    "securityContext": {"allowPrivilegeEscalation": false,
                                                        "capabilities": {"drop": ["ALL"]}}}]}}}});
    let created = admin(data, reqwest::Method::POST, "/apis/apps/v1/namespaces/team-a/replicasets", Some(rs));
    let uid = created["metadata"]["uid"].clone();
    let running = wait_for("the ReplicaSet's two pods Running", Duration::from_secs(120), || {
        let pods = admin(data, reqwest::Method::GET, "/api/v1/namespaces/team-a/pods?labelSelector=app%3Dweb", None);
        let owned: Vec<Value> = pods["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p["metadata"]["ownerReferences"][0]["uid"] == uid && p["status"]["phase"] == "Running")
            .collect();
        (owned.len() == 2).then_some(Value::Array(owned))
    });
    for pod in running.as_array().unwrap() {
        assert_eq!(pod["spec"]["serviceAccountName"], "app", "{pod}");
        assert_eq!(pod["spec"]["nodeName"], "node-1", "{pod}");
    }
    let rs = wait_for("status.readyReplicas 2", Duration::from_secs(60), || {
        let rs = admin(data, reqwest::Method::GET, "/apis/apps/v1/namespaces/team-a/replicasets/web", None);
        (rs["status"]["replicas"] == 2).then_some(rs)
    });
    assert_eq!(rs["status"]["observedGeneration"], 1, "{rs}");
    // Scaled to nothing, then deleted (the garbage collector would take the pods too).
    let scaled = serde_json::json!({"spec": {"replicas": 0}});
    let url = std::fs::read_to_string(data.join("server-url")).unwrap();
    let resp = client(data)
        .patch(format!("{url}/apis/apps/v1/namespaces/team-a/replicasets/web"))
        .bearer_auth(admin_token(data))
        .header("content-type", "application/merge-patch+json")
        .body(scaled.to_string())
        .send()
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    wait_for("the set's pods gone", Duration::from_secs(60), || {
        let pods = admin(data, reqwest::Method::GET, "/api/v1/namespaces/team-a/pods?labelSelector=app%3Dweb", None);
        pods["items"].as_array().is_some_and(Vec::is_empty).then_some(Value::Null)
    });
    admin(data, reqwest::Method::DELETE, "/apis/apps/v1/namespaces/team-a/replicasets/web", None);
}

/// A Deployment through the real kubectl: one Pod Security refuses (the events and its
/// `ReplicaFailure` condition say why); then one that rolls out, scales, takes a new image,
/// is rolled back onto its first ReplicaSet, pauses and resumes, and goes in the foreground
/// with all its ReplicaSets and pods.
fn a_deployment_is_refused_then_rolls_scales_and_undoes_through_kubectl(dir: &Path, data: &Path, image: &str) {
    let kubectl = |args: &[&str]| kubectl_with(&data.join("admin.kubeconfig"), &dir.join("cache"), args);
    let get = |path: &str| admin(data, reqwest::Method::GET, path, None);
    let deployments = "/apis/apps/v1/namespaces/team-a/deployments";

    // team-a enforces the restricted standard: kubectl warns at create, the pods are refused.
    let created = kubectl(&["-n", "team-a", "create", "deployment", "bare", &format!("--image={image}")]);
    let warned = String::from_utf8_lossy(&created.stderr).into_owned();
    ok(created, "kubectl create deployment");
    assert!(warned.contains("Warning: would violate PodSecurity \"restricted:latest\""), "{warned}");
    let failure = wait_for("the Deployment's ReplicaFailure", Duration::from_secs(60), || {
        let d = get(&format!("{deployments}/bare"));
        d["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "ReplicaFailure").cloned()
    });
    assert_eq!(failure["reason"], "FailedCreate", "{failure}");
    assert!(failure["message"].as_str().unwrap().contains("violates PodSecurity \"restricted:latest\""), "{failure}");
    let events = ok(kubectl(&["-n", "team-a", "get", "events", "-o", "json"]), "events");
    assert!(events.contains("FailedCreate") && events.contains("ScalingReplicaSet"), "{events}");
    ok(kubectl(&["-n", "team-a", "delete", "deployment", "bare"]), "delete");

    let spec = |image: &str| {
        serde_json::json!({"serviceAccountName": "app", "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "app", "image": image, "command": ["/bin/sh", "-c", "sleep 3600"],
                            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]})
    };
    let file = dir.join("app2.json");
    std::fs::write(
        &file,
        serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app2", "namespace": "team-a"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "app2"}},
                     "template": {"metadata": {"labels": {"app": "app2"}}, "spec": spec(image)}}})
        .to_string(),
    )
    .unwrap();
    ok(kubectl(&["apply", "-f", file.to_str().unwrap()]), "kubectl apply");
    let rolled = |what: &str| {
        let out = ok(kubectl(&["-n", "team-a", "rollout", "status", "deployment/app2", "--timeout=120s"]), what);
        assert!(out.contains("deployment \"app2\" successfully rolled out"), "{out}");
    };
    rolled("rollout status");
    ok(kubectl(&["-n", "team-a", "scale", "deployment/app2", "--replicas=3"]), "kubectl scale");
    rolled("rollout status after scale");
    let table = ok(kubectl(&["-n", "team-a", "get", "deployment", "app2"]), "get deployment");
    assert!(
        table.lines().nth(1).is_some_and(|l| l.split_whitespace().take(4).eq(["app2", "3/3", "3", "3"])),
        "{table}"
    );

    // A new image: a second ReplicaSet, revision 2.
    let v2 = image.replace(":v1", ":v2");
    ok(kubectl(&["-n", "team-a", "set", "image", "deployment/app2", &format!("app={v2}")]), "kubectl set image");
    rolled("rollout status after set image");
    let history = ok(kubectl(&["-n", "team-a", "rollout", "history", "deployment/app2"]), "history");
    let revisions: Vec<&str> = history.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(revisions.ends_with(&["1", "2"]), "{history}");
    let sets = |what: &str| -> Vec<Value> {
        let list = get("/apis/apps/v1/namespaces/team-a/replicasets?labelSelector=app%3Dapp2");
        let sets = list["items"].as_array().cloned().unwrap_or_default();
        assert!(!sets.is_empty(), "{what}: {list}");
        sets
    };
    let revision = |rs: &Value| rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"].clone();
    let first = sets("after set image").into_iter().find(|rs| revision(rs) == "1").expect("revision 1's set");

    // Undo: revision 1's ReplicaSet comes back as revision 3, no third set is made.
    let undone = ok(kubectl(&["-n", "team-a", "rollout", "undo", "deployment/app2"]), "kubectl rollout undo");
    assert!(undone.contains("rolled back"), "{undone}");
    rolled("rollout status after undo");
    let after = sets("after undo");
    assert_eq!(after.len(), 2, "the old ReplicaSet is re-used: {after:?}");
    let reused = after.iter().find(|rs| rs["metadata"]["uid"] == first["metadata"]["uid"]).unwrap();
    assert_eq!(revision(reused), "3", "{reused}");
    assert_eq!(reused["metadata"]["annotations"]["deployment.kubernetes.io/revision-history"], "1", "{reused}");
    assert_eq!(reused["spec"]["replicas"], 3, "{reused}");

    // Pause and resume show in Progressing.
    ok(kubectl(&["-n", "team-a", "rollout", "pause", "deployment/app2"]), "pause");
    let progressing = |reason: &'static str| {
        wait_for(reason, Duration::from_secs(30), || {
            let d = get(&format!("{deployments}/app2"));
            d["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Progressing" && c["reason"] == reason)
                .cloned()
        })
    };
    assert_eq!(progressing("DeploymentPaused")["status"], "Unknown");
    let again = kubectl(&["-n", "team-a", "rollout", "pause", "deployment/app2"]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("is already paused"), "{again:?}");
    ok(kubectl(&["-n", "team-a", "rollout", "resume", "deployment/app2"]), "resume");
    progressing("NewReplicaSetAvailable");

    // Foreground: the Deployment goes last, after its sets and their pods.
    ok(
        kubectl(&["-n", "team-a", "delete", "deployment", "app2", "--cascade=foreground", "--timeout=120s"]),
        "delete --cascade=foreground",
    );
    let list = get("/apis/apps/v1/namespaces/team-a/replicasets?labelSelector=app%3Dapp2");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(0), "{list}");
    wait_for("app2's pods gone", Duration::from_secs(60), || {
        let pods = get("/api/v1/namespaces/team-a/pods?labelSelector=app%3Dapp2");
        pods["items"].as_array().is_some_and(Vec::is_empty).then_some(Value::Null)
    });
}

/// Jobs on the node through kubectl: one of two completions goes `SuccessCriteriaMet` then
/// `Complete` and, past its TTL, is deleted with its pods; an Indexed one completes every
/// index; one whose pods fail is retried after the back-off and fails at its backoff limit.
fn jobs_complete_fail_after_their_backoff_and_go_after_their_ttl(dir: &Path, data: &Path, image: &str) {
    let kubectl = |args: &[&str]| kubectl_with(&data.join("admin.kubeconfig"), &dir.join("cache"), args);
    let get = |path: &str| admin(data, reqwest::Method::GET, path, None);
    let job = |name: &str, script: &str, extra: Value| {
        let mut spec = serde_json::json!({
            "template": {"spec": {"restartPolicy": "Never", "serviceAccountName": "app", "terminationGracePeriodSeconds": 1,
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "c", "image": image, "imagePullPolicy": "IfNotPresent",
                                "command": ["/bin/sh", "-c", script],
                                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}}});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let file = dir.join(format!("{name}.json"));
        let body = serde_json::json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "team-a"}, "spec": spec});
        std::fs::write(&file, body.to_string()).unwrap();
        ok(kubectl(&["apply", "-f", file.to_str().unwrap()]), "kubectl apply job");
    };
    job("twice", "exit 0", serde_json::json!({"completions": 2, "ttlSecondsAfterFinished": 20}));
    job(
        "indexed",
        "test -n \"$JOB_COMPLETION_INDEX\"",
        serde_json::json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed"}),
    );
    job("fails", "exit 1", serde_json::json!({"backoffLimit": 1}));

    let conditions = |j: &Value| -> Vec<String> {
        j["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["status"] == "True")
            .filter_map(|c| c["type"].as_str().map(str::to_owned))
            .collect()
    };
    let done = |name: &str, condition: &str| {
        wait_for(&format!("job {name} {condition}"), Duration::from_secs(120), || {
            let j = get(&format!("/apis/batch/v1/namespaces/team-a/jobs/{name}"));
            conditions(&j).contains(&condition.to_owned()).then_some(j)
        })
    };
    let twice = done("twice", "Complete");
    assert_eq!(twice["status"]["succeeded"], 2, "{twice}");
    assert_eq!(conditions(&twice), ["SuccessCriteriaMet", "Complete"], "{twice}");
    assert!(twice["status"]["completionTime"].is_string(), "{twice}");
    let indexed = done("indexed", "Complete");
    assert_eq!(indexed["status"]["completedIndexes"], "0-2", "{indexed}");
    let table = ok(kubectl(&["-n", "team-a", "get", "job", "indexed"]), "kubectl get job");
    assert!(
        table.lines().nth(1).is_some_and(|l| l.split_whitespace().take(3).eq(["indexed", "Complete", "3/3"])),
        "{table}"
    );
    let pods = get("/api/v1/namespaces/team-a/pods?labelSelector=batch.kubernetes.io%2Fjob-name%3Dindexed");
    for pod in pods["items"].as_array().unwrap() {
        assert!(
            !pod["metadata"]["finalizers"].to_string().contains("job-tracking"),
            "counted pods are released: {pod}"
        );
        assert_eq!(pod["spec"]["hostname"].as_str().map(|h| h.starts_with("indexed-")), Some(true), "{pod}");
    }

    let fails = done("fails", "Failed");
    assert_eq!(fails["status"]["failed"], 2, "{fails}");
    assert!(conditions(&fails).contains(&"FailureTarget".to_owned()), "{fails}");
    let events = ok(kubectl(&["-n", "team-a", "get", "events", "-o", "json"]), "events");
    assert!(
        events.contains("BackoffLimitExceeded") && events.contains("Job has reached the specified backoff limit"),
        "{events}"
    );
    // The retry came after the back-off: at least 10 s after the first pod.
    let pods = get("/api/v1/namespaces/team-a/pods?labelSelector=batch.kubernetes.io%2Fjob-name%3Dfails");
    let mut created: Vec<i64> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| time_of(p["metadata"]["creationTimestamp"].as_str().unwrap()))
        .collect();
    created.sort_unstable();
    assert_eq!(created.len(), 2, "{pods}");
    assert!(created[1] - created[0] >= 10, "the retry waited for the back-off: {created:?}");

    // Past its TTL, the completed Job goes, and its pods with it.
    wait_for("the finished job deleted after its TTL", Duration::from_secs(60), || {
        let (code, _) = admin_status(data, "/apis/batch/v1/namespaces/team-a/jobs/twice");
        let pods = get("/api/v1/namespaces/team-a/pods?labelSelector=batch.kubernetes.io%2Fjob-name%3Dtwice");
        (code == 404 && pods["items"].as_array().is_some_and(Vec::is_empty)).then_some(Value::Null)
    });
    for name in ["indexed", "fails"] {
        ok(kubectl(&["-n", "team-a", "delete", "job", name]), "delete job");
    }
}

/// Unix seconds of an RFC 3339 time.
fn time_of(text: &str) -> i64 {
    text.parse::<jiff::Timestamp>().map(|t| t.as_second()).unwrap_or(0)
}

/// The status code of a GET as admin.
fn admin_status(data: &Path, path: &str) -> (u16, Value) {
    let url = std::fs::read_to_string(data.join("server-url")).unwrap();
    let resp = client(data).get(format!("{url}{path}")).bearer_auth(admin_token(data)).send().unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().unwrap_or(Value::Null))
}
