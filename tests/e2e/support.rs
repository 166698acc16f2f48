//! Helpers shared by the end-to-end tests: a `podpass apiserver` process on a free port.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const PODPASS: &str = env!("PODPASS_BIN");

/// A server process with the scheduler (`podpass scheduler`, as `system:kube-scheduler`:
/// kube-apiserver binds no pod by itself) and the controller manager beside it (each
/// namespace's `default` account and `kube-root-ca.crt` are its controllers'), killed on
/// drop.
pub struct Server {
    pub child: Child,
    pub url: String,
    pub dir: PathBuf,
    pub scheduler: Option<Child>,
    pub manager: Option<Manager>,
}

impl Drop for Server {
    fn drop(&mut self) {
        // The manager first, while the server still answers its Lease release: the next
        // server on this data dir then has a leader at once.
        drop(self.manager.take());
        if let Some(scheduler) = self.scheduler.as_mut() {
            let _ = scheduler.kill();
            let _ = scheduler.wait();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start(dir: &Path, extra: &[&str]) -> Server {
    start_on(dir, "0", extra)
}

pub fn start_on(dir: &Path, port: &str, extra: &[&str]) -> Server {
    let mut server = start_alone(dir, port, extra);
    // A server given its own --token-auth-file has no identities to mint here: its test
    // names whom it trusts, and starts a scheduler and a manager itself if it needs them.
    if dir.join("tokens.csv").exists() {
        server.scheduler = Some(spawn_scheduler(dir));
        server.manager = Some(spawn_manager(dir));
        // Ready as a cluster is once its controllers ran: `default` can run pods, and the
        // user-facing roles hold their aggregated rules.
        wait_namespace_ready(&server, "default");
        wait_for("admin, edit and view aggregated", Duration::from_secs(60), || {
            let aggregated = ["admin", "edit", "view"].iter().all(|role| {
                let (_, r) = admin_get(&server, &format!("/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}"));
                r["rules"].as_array().is_some_and(|rules| !rules.is_empty())
            });
            aggregated.then_some(serde_json::Value::Null)
        });
    }
    server
}

/// A server with the scheduler but no controller manager: for the tests that run their
/// own managers (several at once, or killed on purpose).
pub fn start_without_manager(dir: &Path, extra: &[&str]) -> Server {
    let mut server = start_alone(dir, "0", extra);
    if dir.join("tokens.csv").exists() {
        server.scheduler = Some(spawn_scheduler(dir));
    }
    server
}

/// The server process alone.
fn start_alone(dir: &Path, port: &str, extra: &[&str]) -> Server {
    let _ = std::fs::remove_file(dir.join("server-url"));
    let child = Command::new(PODPASS)
        .args(["apiserver", "--data-dir", dir.to_str().unwrap(), "--secure-port", port])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = wait_for_url(dir);
    Server { child, url, dir: dir.to_path_buf(), scheduler: None, manager: None }
}

/// `podpass controller-manager` for the control plane whose data dir is `dir`, as
/// `system:kube-controller-manager` (its kubeconfig written there, its log in
/// `controller-manager.log`).
pub fn spawn_manager(dir: &Path) -> Manager {
    spawn_manager_with(dir, &[])
}

/// [`spawn_manager`] with further flags.
pub fn spawn_manager_with(dir: &Path, extra: &[&str]) -> Manager {
    let kubeconfig = dir.join("controller-manager.kubeconfig");
    if !kubeconfig.exists() {
        let identity = identity_output(dir, "system:kube-controller-manager", &[]);
        std::fs::write(&kubeconfig, ok(identity, "controller manager identity")).unwrap();
    }
    let key = dir.join("sa.key");
    let (ca, ca_key) = (dir.join("pki/ca.crt"), dir.join("pki/ca.key"));
    let flags = [
        "--service-account-private-key-file",
        key.to_str().unwrap(),
        "--root-ca-file",
        ca.to_str().unwrap(),
        "--cluster-signing-cert-file",
        ca.to_str().unwrap(),
        "--cluster-signing-key-file",
        ca_key.to_str().unwrap(),
    ];
    let all: Vec<&str> = flags.iter().chain(extra).copied().collect();
    manager_with(&kubeconfig, &dir.join("controller-manager.log"), &all)
}

/// Waits until namespace `ns` holds what the controller manager gives every namespace: the
/// `default` account and `kube-root-ca.crt` (60 s at most).
pub fn wait_namespace_ready(s: &Server, ns: &str) {
    wait_for(&format!("namespace {ns}'s default account and root CA"), Duration::from_secs(60), || {
        let (sa, _) = admin_get(s, &format!("/api/v1/namespaces/{ns}/serviceaccounts/default"));
        let (cm, _) = admin_get(s, &format!("/api/v1/namespaces/{ns}/configmaps/kube-root-ca.crt"));
        (sa == 200 && cm == 200).then_some(serde_json::Value::Null)
    });
}

/// `podpass scheduler` for the control plane whose data dir is `dir` (its kubeconfig
/// written there, its log in `scheduler.log`).
pub fn spawn_scheduler(dir: &Path) -> Child {
    let kubeconfig = dir.join("scheduler.kubeconfig");
    if !kubeconfig.exists() {
        std::fs::write(&kubeconfig, ok(identity_output(dir, "system:kube-scheduler", &[]), "scheduler identity"))
            .unwrap();
    }
    let log = std::fs::File::create(dir.join("scheduler.log")).unwrap();
    Command::new(PODPASS)
        .args(["scheduler", "--kubeconfig", kubeconfig.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// The URL a starting server writes to `<dir>/server-url` once it listens (30 s at most).
pub fn wait_for_url(dir: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(u) = std::fs::read_to_string(dir.join("server-url")) {
            return u;
        }
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A client for streaming reads (watches) that gives up after `timeout`.
pub fn streaming_client(dir: &Path, timeout: Duration) -> reqwest::blocking::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.join("pki/ca.crt")).unwrap()).unwrap();
    reqwest::blocking::Client::builder().tls_certs_only([ca]).timeout(timeout).build().unwrap()
}

/// The real kubectl with `kubeconfig` and its own cache dir.
pub fn kubectl_with(kubeconfig: &Path, cache: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .output()
        .expect("kubectl is installed (scripts/test installs it)")
}

/// `podpass apiserver kubeconfig` for `user` in `groups` (the raw output).
pub fn identity_output(dir: &Path, user: &str, groups: &[&str]) -> Output {
    let mut cmd = Command::new(PODPASS);
    cmd.args(["apiserver", "kubeconfig", "--data-dir", dir.to_str().unwrap(), "--user", user]);
    for g in groups {
        cmd.args(["--group", g]);
    }
    cmd.output().unwrap()
}

pub fn client(dir: &Path) -> reqwest::blocking::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.join("pki/ca.crt")).unwrap()).unwrap();
    reqwest::blocking::Client::builder().tls_certs_only([ca]).build().unwrap()
}

pub fn admin_token(dir: &Path) -> String {
    let line = std::fs::read_to_string(dir.join("tokens.csv")).unwrap();
    line.split(',').next().unwrap().to_owned()
}

/// The real kubectl as the admin of the server in `dir`.
pub fn admin_kubectl(dir: &Path, args: &[&str]) -> Output {
    kubectl_with(&dir.join("admin.kubeconfig"), &dir.join("kube-cache"), args)
}

/// A GET as the admin; the status and the JSON answer.
pub fn admin_get(s: &Server, path: &str) -> (u16, serde_json::Value) {
    admin_request(s, reqwest::Method::GET, path, None)
}

/// The pod `default/name` once its phase is `phase` (a minute at most).
pub fn wait_pod_phase(s: &Server, name: &str, phase: &str) -> serde_json::Value {
    wait_for(&format!("pod {name} {phase}"), Duration::from_secs(60), || {
        let (_, p) = admin_get(s, &format!("/api/v1/namespaces/default/pods/{name}"));
        (p["status"]["phase"] == phase).then_some(p)
    })
}

/// Polls `f` every 200 ms until it answers, failing with `what` after `limit`.
pub fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> Option<serde_json::Value>) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A request as the admin; the status and the JSON answer (`null` when there is none).
pub fn admin_request(
    s: &Server,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let body = body.map(|b| ("application/json", serde_json::to_vec(&b).unwrap()));
    admin_raw_request(s, method, path, body)
}

/// A request as the admin with a body of the given content type; the status and the JSON
/// answer (`null` when there is none).
pub fn admin_raw_request(
    s: &Server,
    method: reqwest::Method,
    path: &str,
    body: Option<(&str, Vec<u8>)>,
) -> (u16, serde_json::Value) {
    let mut req = client(&s.dir).request(method, format!("{}{path}", s.url)).bearer_auth(admin_token(&s.dir));
    if let Some((content_type, bytes)) = body {
        req = req.header("content-type", content_type).body(bytes);
    }
    let resp = req.send().unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().unwrap_or(serde_json::Value::Null))
}

pub fn ok(out: Output, what: &str) -> String {
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The node agent (`podpass node run`) and its root dir, killed if the test ends before it
/// stops; the tmpfs mounts of its pods' volumes are detached then, so the test's temporary
/// directory can be removed.
pub struct Agent(pub Child, pub PathBuf);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = podpass_node::unmount_all_under(&self.1);
    }
}

/// The hard eviction thresholds of the tests' nodes unless a test sets its own: memory
/// only, as kind's nodes run (disk thresholds at 0%), so a test's outcome never depends on
/// how full the machine's disk happens to be. The disk thresholds' defaults are tested in
/// the node's unit tests, their eviction by `podpass up`'s.
pub const TEST_EVICTION_HARD: &str = "memory.available<100Mi";

/// `podpass node run` as node n1 with its root in `root`, logging JSON to `log` (or
/// nowhere); `/healthz` and the node's HTTPS server are off unless `extra` sets
/// `--healthz-port` / `--port`.
pub fn spawn_agent(kubeconfig: &Path, root: &Path, log: Option<&Path>) -> Agent {
    spawn_agent_with(kubeconfig, root, log, &[])
}

/// [`spawn_agent`] with further flags.
pub fn spawn_agent_with(kubeconfig: &Path, root: &Path, log: Option<&Path>, extra: &[&str]) -> Agent {
    let stderr = log.map_or_else(Stdio::null, |p| Stdio::from(std::fs::File::create(p).unwrap()));
    Agent(
        Command::new(PODPASS)
            .args(["--log-format", "json", "node", "run", "--kubeconfig", kubeconfig.to_str().unwrap()])
            .args(if extra.contains(&"--node-name") { &[][..] } else { &["--node-name", "n1"][..] })
            .args(["--root-dir", root.to_str().unwrap()])
            .args(if extra.contains(&"--healthz-port") { &[][..] } else { &["--healthz-port", "0"][..] })
            .args(if extra.contains(&"--port") { &[][..] } else { &["--port", "0"][..] })
            .args(if extra.contains(&"--eviction-hard") {
                &[][..]
            } else {
                &["--eviction-hard", TEST_EVICTION_HARD][..]
            })
            .args(extra)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap(),
        root.to_owned(),
    )
}

/// Writes to `path` a kubeconfig of node n1 (`system:node:n1` in `system:nodes`) for the
/// control plane whose data dir is `api_dir`; returns `path`.
pub fn node_kubeconfig(api_dir: &Path, path: &Path) -> PathBuf {
    std::fs::write(path, ok(identity_output(api_dir, "system:node:n1", &["system:nodes"]), "node kubeconfig")).unwrap();
    path.to_path_buf()
}

/// Holds `count` half-open connections (handshake done when `tls`, half a header sent) to
/// `addr` until dropped; how many it opened.
pub struct Flood(pub std::process::Child, pub usize);

impl Flood {
    pub fn start(addr: &str, count: usize, tls: bool) -> Flood {
        Flood::start_as(addr, count, tls, None)
    }

    /// With `token`: each connection a POST of that identity whose body never comes.
    pub fn start_as(addr: &str, count: usize, tls: bool, token: Option<&str>) -> Flood {
        Flood::start_impersonating(addr, count, tls, token, "default", &[])
    }

    /// As [`Flood::start_as`], posting to `namespace`, the connections impersonating
    /// `users` in turn.
    pub fn start_impersonating(
        addr: &str,
        count: usize,
        tls: bool,
        token: Option<&str>,
        namespace: &str,
        users: &[String],
    ) -> Flood {
        let (host, port) = addr.rsplit_once(':').unwrap();
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tls_flood.py");
        let mut child = Command::new("python3")
            .arg(script)
            .env("FLOOD_NAMESPACE", namespace)
            .env("FLOOD_IMPERSONATE", users.join(","))
            .args([host, port, &count.to_string(), if tls { "tls" } else { "plain" }])
            .args(token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
        let opened = line.trim().strip_prefix("ready ").unwrap_or("0").parse().unwrap();
        Flood(child, opened)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The unverified claims of a JWT (its `jti` and `exp`, as an operator reads them from an
/// audit line).
pub fn jwt_claims(token: &str) -> serde_json::Value {
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&data_encoding::BASE64URL_NOPAD.decode(payload.as_bytes()).unwrap()).unwrap()
}

/// A controller manager (`podpass controller-manager`) process and its log, killed on drop (the log's end printed when the
/// test is failing).
pub struct Manager(pub Child, pub std::path::PathBuf);

impl Drop for Manager {
    fn drop(&mut self) {
        // SIGTERM: a manager that stops cleanly gives its Lease back (a test killing one
        // with -9 on purpose has done so already).
        let pid = rustix::process::Pid::from_child(&self.0);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && matches!(self.0.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.1).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- {} ---", self.1.display());
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

pub fn manager(kubeconfig: &Path, log_path: &Path) -> Manager {
    manager_with(kubeconfig, log_path, &[])
}

/// A controller manager with `extra` flags.
pub fn manager_with(kubeconfig: &Path, log_path: &Path, extra: &[&str]) -> Manager {
    let log = std::fs::File::create(log_path).unwrap();
    let child = Command::new(PODPASS)
        .args(["controller-manager", "--kubeconfig", kubeconfig.to_str().unwrap()])
        .args(extra)
        // A shorter lease than upstream's 15 s, so the takeover below is quicker, but a renew
        // deadline a loaded machine's slow API calls stay well within: a leader that misses
        // it exits, and nothing restarts it here.
        .args(["--leader-elect-lease-duration", "10s", "--leader-elect-renew-deadline", "8s"])
        .args(["--leader-elect-retry-period", "2s"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    Manager(child, log_path.to_path_buf())
}
