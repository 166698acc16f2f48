//! End-to-end on the real etcd (Debian `etcd-server`): two `podpass apiserver` replicas on
//! one etcd serve the same objects, see each other's writes in watches, review each other's
//! tokens; compacted history is 410 (beyond the watch cache's window); a stopped etcd makes
//! requests fail fast and the replicas recover by themselves, with no acknowledged write
//! lost. The watch cache: consistent reads see every acknowledged write, `resourceVersion`
//! "0" and "N" as upstream, one etcd watcher per server however many watches.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// One etcd test at a time: each runs etcd and two API servers, and four such clusters at
/// once on a loaded two-core machine is a test of the machine, not of podpass.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Etcd {
    child: Child,
    client: u16,
    peer: u16,
    dir: std::path::PathBuf,
}

impl Etcd {
    /// etcd on two free ports, healthy. A port taken between choosing it and etcd binding it
    /// (another test's server) makes etcd exit: it is started again on fresh ports.
    fn fresh(dir: &Path) -> Self {
        let mut attempts = 0;
        loop {
            match Self::try_start(dir, free_port(), free_port()) {
                Ok(etcd) => return etcd,
                Err(e) if attempts < 4 => {
                    attempts += 1;
                    // a half-started member's data names the old ports: start from nothing
                    let _ = std::fs::remove_dir_all(dir);
                    eprintln!("etcd did not start ({e}); again on other ports");
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// etcd on these ports (a restart on the same data and ports), healthy.
    fn start(dir: &Path, client: u16, peer: u16) -> Self {
        Self::try_start(dir, client, peer).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts etcd and waits until it reports healthy, or says why not: it exited (its log
    /// is `<dir>.log`), or it did not become healthy within a minute.
    fn try_start(dir: &Path, client: u16, peer: u16) -> Result<Self, String> {
        let url = |p: u16| format!("http://127.0.0.1:{p}");
        let log_path = dir.with_extension("log");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).unwrap();
        let child = Command::new("etcd")
            .args(["--name", "n1", "--data-dir", dir.to_str().unwrap()])
            .args(["--listen-client-urls", &url(client), "--advertise-client-urls", &url(client)])
            .args(["--listen-peer-urls", &url(peer), "--initial-advertise-peer-urls", &url(peer)])
            .args(["--initial-cluster", &format!("n1={}", url(peer))])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd is installed (scripts/install-test-deps installs etcd-server)");
        let mut etcd = Self { child, client, peer, dir: dir.to_owned() };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let healthy = reqwest::blocking::get(format!("{}/health", etcd.url()))
                .ok()
                .and_then(|r| r.json::<Value>().ok())
                .is_some_and(|v| v["health"] == "true");
            if healthy {
                return Ok(etcd);
            }
            if let Ok(Some(status)) = etcd.child.try_wait() {
                let tail = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: String = tail.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
                return Err(format!("etcd exited ({status}) on ports {client}/{peer}: {tail}"));
            }
            if Instant::now() >= deadline {
                return Err(format!("etcd on port {client} did not become healthy within 60 s"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}

const ADMIN: &str = "admin-token-shared-by-both-replicas";
const BOB: &str = "bob-token-with-no-grants-of-his-own";
const NODE: &str = "node-n1-token";
const MANAGER: &str = "controller-manager-token";

/// The replicas' controller manager, a client of replica `s` (the key of [`replica_flags`]
/// signs its legacy tokens, `s`'s CA goes into `kube-root-ca.crt`).
fn cluster_manager(d: &Path, s: &Server) -> Manager {
    let ca = s.dir.join("pki/ca.crt");
    let kubeconfig = d.join("controller-manager.kubeconfig");
    let text = podpass_apiserver::kubeconfig(
        &s.url,
        &std::fs::read_to_string(&ca).unwrap(),
        "system:kube-controller-manager",
        MANAGER,
    );
    std::fs::write(&kubeconfig, text).unwrap();
    let key = d.join("sa.pem");
    let flags = ["--service-account-private-key-file", key.to_str().unwrap(), "--root-ca-file", ca.to_str().unwrap()];
    manager_with(&kubeconfig, &d.join("controller-manager.log"), &flags)
}

/// Waits until namespace `ns` has its `default` account and `kube-root-ca.crt`.
fn namespace_ready(s: &Server, ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(s, &format!("/api/v1/namespaces/{ns}/serviceaccounts/default")).0 != 200
        || get(s, &format!("/api/v1/namespaces/{ns}/configmaps/kube-root-ca.crt")).0 != 200
    {
        assert!(Instant::now() < deadline, "namespace {ns} never got its default account and root CA");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn call(s: &Server, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let client = reqwest::blocking::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&std::fs::read(s.dir.join("pki/ca.crt")).unwrap()).unwrap()])
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut req = client.request(method, format!("{}{path}", s.url)).bearer_auth(ADMIN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().unwrap_or(Value::Null))
}

fn post(s: &Server, path: &str, body: Value) -> Value {
    let (code, v) = call(s, reqwest::Method::POST, path, Some(body));
    assert!((200..300).contains(&code), "POST {path}: {code} {v}");
    v
}

fn get(s: &Server, path: &str) -> (u16, Value) {
    call(s, reqwest::Method::GET, path, None)
}

/// Flags for replicas sharing `etcd`, one signing key (generated) and one token file: the
/// admin, bob (no grants) and node n1; and the data dirs of replicas `a` and `b` (each
/// makes its own PKI there).
fn replica_flags(d: &Path, etcd: &Etcd) -> Vec<String> {
    for r in ["a", "b"] {
        std::fs::create_dir(d.join(r)).unwrap();
    }
    let key = d.join("sa.pem");
    ok(
        Command::new(PODPASS)
            .args(["token", "keygen", "--alg", "ES256", "--out", key.to_str().unwrap()])
            .output()
            .unwrap(),
        "keygen",
    );
    let tokens = d.join("tokens.csv");
    let users = format!(
        "{ADMIN},admin,admin-uid,\"system:masters\"\n{BOB},bob,bob-uid,\"\"\n{NODE},system:node:n1,n1-uid,\"system:nodes\"\n{MANAGER},system:kube-controller-manager,kcm-uid,\"\"\n"
    );
    std::fs::write(&tokens, users).unwrap();
    [
        "--etcd-servers",
        &etcd.url(),
        "--service-account-signing-key-file",
        key.to_str().unwrap(),
        "--service-account-issuer",
        "https://podpass.test",
        "--token-auth-file",
        tokens.to_str().unwrap(),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The first line of a watch (an event), read within 15 s.
fn first_watch_line(s: &Server, path: &str) -> Value {
    let resp = client(&s.dir).get(format!("{}{path}", s.url)).bearer_auth(ADMIN).send().unwrap();
    assert_eq!(resp.status(), 200, "{path}");
    let line = BufReader::new(resp).lines().next().unwrap().unwrap();
    serde_json::from_str(&line).unwrap()
}

#[test]
fn two_replicas_share_objects_watches_and_tokens_and_survive_an_etcd_restart() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut etcd = Etcd::fresh(&d.join("etcd"));
    let owned = replica_flags(d, &etcd);
    let flags: Vec<&str> = owned.iter().map(String::as_str).collect();
    let a = start(&d.join("a"), &flags);
    let b = start(&d.join("b"), &flags);

    // objects written through A are served by B, same uid and resourceVersion
    post(&a, "/api/v1/namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}));
    let _manager = cluster_manager(d, &a);
    namespace_ready(&a, "team");
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
               "spec": {"serviceAccountName": "default", "nodeName": "n1", "containers": [{"name": "c", "image": "r.example/app"}]}})
    };
    let web = post(&a, "/api/v1/namespaces/team/pods", pod("web"));
    let (code, seen) = get(&b, "/api/v1/namespaces/team/pods/web");
    assert_eq!(code, 200);
    assert_eq!(seen["metadata"]["uid"], web["metadata"]["uid"]);
    assert_eq!(seen["metadata"]["resourceVersion"], web["metadata"]["resourceVersion"]);
    let (_, sa) = get(&b, "/api/v1/namespaces/team/serviceaccounts/default");
    assert_eq!(sa["metadata"]["name"], "default", "namespace defaults created once, visible to both");

    // a watch on B sees a write through A
    let rv = web["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let watcher = {
        let client = reqwest::blocking::Client::builder()
            .tls_certs_only(
                [reqwest::Certificate::from_pem(&std::fs::read(b.dir.join("pki/ca.crt")).unwrap()).unwrap()],
            )
            .timeout(None)
            .build()
            .unwrap();
        let url = format!("{}/api/v1/namespaces/team/pods?watch=true&resourceVersion={rv}", b.url);
        std::thread::spawn(move || {
            let resp = client.get(url).bearer_auth(ADMIN).send().unwrap();
            let mut lines = BufReader::new(resp).lines();
            let line = lines.next().unwrap().unwrap();
            serde_json::from_str::<Value>(&line).unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    post(&a, "/api/v1/namespaces/team/pods", pod("api"));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !watcher.is_finished() {
        assert!(Instant::now() < deadline, "the watch on B never saw the write through A");
        std::thread::sleep(Duration::from_millis(50));
    }
    let event = watcher.join().unwrap();
    assert_eq!((event["type"].as_str(), event["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("api")));

    // a token minted by A is reviewed by B
    let minted = post(
        &a,
        "/api/v1/namespaces/team/serviceaccounts/default/token",
        json!({"spec": {"audiences": ["registry.example"], "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": web["metadata"]["uid"]}}}),
    );
    let review = post(
        &b,
        "/apis/authentication.k8s.io/v1/tokenreviews",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": minted["status"]["token"], "audiences": ["registry.example"]}}),
    );
    assert_eq!(review["status"]["authenticated"], true, "{review}");
    assert_eq!(review["status"]["user"]["extra"]["authentication.kubernetes.io/pod-name"][0], "web");

    // compaction: the watch cache still serves a watch from inside its window, as
    // upstream's cacher does…
    let (_, list) = get(&a, "/api/v1/namespaces/team/pods");
    let current: i64 = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    let compacted = reqwest::blocking::Client::new()
        .post(format!("{}/v3/kv/compaction", etcd.url()))
        .json(&json!({"revision": current.to_string(), "physical": true}))
        .send()
        .unwrap();
    assert!(compacted.status().is_success());
    let first = first_watch_line(&b, &format!("/api/v1/namespaces/team/pods?watch=true&resourceVersion={rv}"));
    assert_eq!((first["type"].as_str(), first["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("api")));
    // …a watch from before the window is told to relist (410 Expired)…
    let (code, gone) = get(&b, "/api/v1/namespaces/team/pods?watch=true&resourceVersion=1");
    assert!(code == 410 || gone["object"]["code"] == 410, "{code} {gone}");
    // …and without the cache, etcd's compaction answers 410 itself.
    std::fs::create_dir(d.join("c")).unwrap();
    let mut uncached_flags = flags.to_vec();
    uncached_flags.push("--watch-cache=false");
    let c = start(&d.join("c"), &uncached_flags);
    let (code, gone) = get(&c, &format!("/api/v1/namespaces/team/pods?watch=true&resourceVersion={}", current - 3));
    assert!(code == 410 || gone["object"]["code"] == 410, "{code} {gone}");
    drop(c);

    // etcd stopped: requests fail fast with a 5xx Status, no hang
    let acknowledged = post(&a, "/api/v1/namespaces/team/pods", pod("before-stop"));
    etcd.stop();
    let started = Instant::now();
    let (code, status) = get(&a, "/api/v1/namespaces/team/pods/web");
    assert!((500..600).contains(&code), "{code} {status}");
    assert_eq!(status["kind"], "Status");
    assert!(started.elapsed() < Duration::from_secs(15), "failed after {:?}", started.elapsed());
    // under load: concurrent reads and writes on both replicas all fail fast, none hang
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|i| {
                let (server, name) = (if i % 2 == 0 { &a } else { &b }, format!("load-{i}"));
                scope.spawn(move || {
                    let started = Instant::now();
                    let codes = [
                        get(server, "/api/v1/namespaces/team/pods").0,
                        call(server, reqwest::Method::POST, "/api/v1/namespaces/team/pods", Some(pod(&name))).0,
                    ];
                    (codes, started.elapsed())
                })
            })
            .collect();
        for w in workers {
            let (codes, took) = w.join().unwrap();
            assert!(codes.iter().all(|c| (500..600).contains(c)), "{codes:?}");
            assert!(took < Duration::from_secs(30), "took {took:?}");
        }
    });
    // etcd back: the replicas recover by themselves, and the acknowledged write is there
    let etcd_dir = etcd.dir.clone();
    let _etcd = Etcd::start(&etcd_dir, etcd.client, etcd.peer);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, obj) = get(&b, "/api/v1/namespaces/team/pods/before-stop");
        if code == 200 {
            assert_eq!(obj["metadata"]["uid"], acknowledged["metadata"]["uid"]);
            break;
        }
        assert!(Instant::now() < deadline, "B did not recover: {code} {obj}");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(get(&a, "/api/v1/namespaces/team/pods/web").0, 200, "A recovered too");
}

/// etcd's own count of open watchers (`etcd_debugging_mvcc_watcher_total`).
fn etcd_watchers(etcd: &Etcd) -> i64 {
    let text = reqwest::blocking::get(format!("{}/metrics", etcd.url())).unwrap().text().unwrap();
    text.lines()
        .find(|l| l.starts_with("etcd_debugging_mvcc_watcher_total "))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
        .map_or(0, |n| n as i64)
}

#[test]
fn abandoned_watches_cancel_their_etcd_watchers() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let etcd = Etcd::fresh(&d.join("etcd"));
    let tokens = d.join("tokens.csv");
    std::fs::write(&tokens, format!("{ADMIN},admin,admin-uid,\"system:masters\"\n")).unwrap();
    let etcd_url = etcd.url();
    let wait_for = |want: &dyn Fn(i64) -> bool, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !want(etcd_watchers(&etcd)) {
            assert!(Instant::now() < deadline, "{what}: {} watchers", etcd_watchers(&etcd));
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let url = |s: &Server| format!("{}/api/v1/configmaps?watch=true&labelSelector=never%3Dmatches", s.url);
    let open = |s: &Server| -> Vec<_> {
        (0..20)
            .map(|_| {
                let resp = client(&s.dir).get(url(s)).bearer_auth(ADMIN).send().unwrap();
                assert_eq!(resp.status(), 200);
                resp
            })
            .collect()
    };

    // Without the watch cache each watch is an etcd watcher, cancelled when its client goes;
    // the server's own informers hold one per RBAC resource and one for pods (the Node
    // authorizer's graph), token revocation one each for pods, service accounts, nodes and
    // secrets, and the revoked tokens' one. The scheduler and the controller manager are
    // clients of their own, none of the server's.
    std::fs::create_dir(d.join("a")).unwrap();
    let flags = ["--etcd-servers", etcd_url.as_str(), "--token-auth-file", tokens.to_str().unwrap()];
    let none = etcd_watchers(&etcd);
    let a = start(&d.join("a"), &[&flags[..], &["--watch-cache=false"]].concat());
    let baseline = none + 10;
    wait_for(&|n| n == baseline, "the informers' five watchers, revocation's four, revoked tokens' one");
    let watches = open(&a);
    wait_for(&|n| n >= baseline + 20, "watches registered in etcd");
    // the clients go away; no event ever matched, yet every etcd watcher is cancelled
    drop(watches);
    wait_for(&|n| n <= baseline, "watchers left behind");

    // With it (the default) a server holds one etcd watcher, however many watches it serves
    // (its informers' among them).
    std::fs::create_dir(d.join("b")).unwrap();
    let b = start(&d.join("b"), &flags);
    wait_for(&|n| n == baseline + 1, "the watch cache's one watcher");
    let watches = open(&b);
    let first = first_watch_line(&b, "/api/v1/namespaces?watch=true");
    assert_eq!(first["type"], "ADDED");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(etcd_watchers(&etcd), baseline + 1);
    drop(watches);
}

/// The watch cache's read semantics on a replica that did not make the writes: every
/// acknowledged write is visible to a consistent read at once (no sleep), `resourceVersion`
/// "0" reads the cache, "N" beyond anything written is 504 after upstream's 3 s, and a
/// watch resumes from any revision in the window with exactly the changes after it.
#[test]
fn the_watch_cache_reads_consistently_across_replicas() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let etcd = Etcd::fresh(&d.join("etcd"));
    let owned = replica_flags(d, &etcd);
    let flags: Vec<&str> = owned.iter().map(String::as_str).collect();
    let (a, b) = (start(&d.join("a"), &flags), start(&d.join("b"), &flags));
    post(&a, "/api/v1/namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}));
    let _manager = cluster_manager(d, &a);
    namespace_ready(&a, "team");
    let cm = |name: &str, v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": v}});

    // Read-your-writes across replicas: every write through A, read back through B at once.
    let (_, before) = get(&b, "/api/v1/namespaces/team/configmaps");
    let existing = before["items"].as_array().unwrap().len(); // kube-root-ca.crt
    let mut last_rv = String::new();
    for i in 0..50 {
        let written = post(&a, "/api/v1/namespaces/team/configmaps", cm(&format!("c{i}"), "1"));
        let (code, seen) = get(&b, &format!("/api/v1/namespaces/team/configmaps/c{i}"));
        assert_eq!(code, 200, "write {i} not visible on B: {seen}");
        assert_eq!(seen["metadata"]["resourceVersion"], written["metadata"]["resourceVersion"]);
        let (_, list) = get(&b, "/api/v1/namespaces/team/configmaps");
        assert_eq!(list["items"].as_array().unwrap().len(), existing + i + 1);
        last_rv = written["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    }
    // Those reads were served from B's cache, and its metrics say so (upstream's names).
    let metrics = client(&b.dir).get(format!("{}/metrics", b.url)).bearer_auth(ADMIN).send().unwrap().text().unwrap();
    let count = |prefix: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    };
    let served = count(
        r#"apiserver_watch_cache_consistent_read_total{fallback="false",group="",resource="configmaps",success="true"}"#,
    );
    assert!(served >= 100, "{served} consistent reads from the cache:\n{metrics}");
    assert_eq!(
        count(
            r#"apiserver_watch_cache_consistent_read_total{fallback="true",group="",resource="configmaps",success="true"}"#
        ),
        0
    );
    assert!(count(r#"apiserver_watch_cache_read_wait_seconds_count{group="",resource="configmaps"}"#) >= 100);

    // A delete through A is gone on B at once.
    let (code, _) = call(&a, reqwest::Method::DELETE, "/api/v1/namespaces/team/configmaps/c0", None);
    assert_eq!(code, 200);
    assert_eq!(get(&b, "/api/v1/namespaces/team/configmaps/c0").0, 404);

    // resourceVersion=0: from the cache; N: not older than N; N in the future: 504 after ~3 s.
    let (code, list) = get(&b, "/api/v1/namespaces/team/configmaps?resourceVersion=0");
    assert_eq!(code, 200);
    assert_eq!(list["items"].as_array().unwrap().len(), existing + 49, "the delete is in the cache already");
    let (code, seen) = get(&b, &format!("/api/v1/namespaces/team/configmaps/c49?resourceVersion={last_rv}"));
    assert_eq!((code, seen["data"]["v"].as_str()), (200, Some("1")));
    let future = last_rv.parse::<u64>().unwrap() + 1000;
    let started = Instant::now();
    let (code, status) = get(&b, &format!("/api/v1/namespaces/team/configmaps/c49?resourceVersion={future}"));
    assert_eq!((code, status["reason"].as_str()), (504, Some("Timeout")), "{status}");
    assert!(status["message"].as_str().unwrap().starts_with(&format!("Too large resource version: {future}")));
    assert!(started.elapsed() >= Duration::from_secs(2), "answered before waiting: {:?}", started.elapsed());
    let (code, _) = get(&b, "/api/v1/namespaces/team/configmaps?resourceVersion=abc");
    assert_eq!(code, 400);

    // A watch on B resumed from c10's revision replays exactly the changes after it.
    let c10 = get(&b, "/api/v1/namespaces/team/configmaps/c10").1;
    let from = c10["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let resp = client(&b.dir)
        .get(format!("{}/api/v1/namespaces/team/configmaps?watch=true&resourceVersion={from}&timeoutSeconds=2", b.url))
        .bearer_auth(ADMIN)
        .send()
        .unwrap();
    let events: Vec<Value> =
        BufReader::new(resp).lines().map(|l| serde_json::from_str::<Value>(&l.unwrap()).unwrap()).collect();
    let names: Vec<(String, String)> = events
        .iter()
        .map(|e| (e["type"].as_str().unwrap().to_owned(), e["object"]["metadata"]["name"].as_str().unwrap().to_owned()))
        .collect();
    let mut expected: Vec<(String, String)> = (11..50).map(|i| ("ADDED".to_owned(), format!("c{i}"))).collect();
    expected.push(("DELETED".to_owned(), "c0".to_owned()));
    assert_eq!(names, expected);

    // RBAC from the index: a grant through A applies on A before it is answered and on B
    // within a second; so does its revocation.
    let as_bob = |s: &Server| {
        let resp = client(&s.dir)
            .get(format!("{}/api/v1/namespaces/team/configmaps/c49", s.url))
            .bearer_auth(BOB)
            .send()
            .unwrap();
        resp.status().as_u16()
    };
    assert_eq!((as_bob(&a), as_bob(&b)), (403, 403));
    let within_a_second = |s: &Server, want: u16| {
        let deadline = Instant::now() + Duration::from_secs(1);
        while as_bob(s) != want {
            assert!(Instant::now() < deadline, "not {want} within a second");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    post(
        &a,
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "cm-reader"},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}),
    );
    post(
        &a,
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "bob-view"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
               "subjects": [{"kind": "User", "name": "bob"}]}),
    );
    assert_eq!(as_bob(&a), 200, "the writer's own server applies the grant before answering");
    within_a_second(&b, 200);
    let (code, _) = call(
        &a,
        reqwest::Method::DELETE,
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings/bob-view",
        None,
    );
    assert_eq!(code, 200);
    assert_eq!(as_bob(&a), 403);
    within_a_second(&b, 403);

    // The Node authorizer's graph: a node reads a secret its pod references, through B as
    // soon as the pod is created through A, and loses it within a second of its deletion.
    post(
        &a,
        "/api/v1/namespaces/team/secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull"}}),
    );
    let as_node = |s: &Server| {
        client(&s.dir)
            .get(format!("{}/api/v1/namespaces/team/secrets/pull", s.url))
            .bearer_auth(NODE)
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(as_node(&b), 403);
    post(
        &a,
        "/api/v1/namespaces/team/pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "puller"},
               "spec": {"nodeName": "n1", "imagePullSecrets": [{"name": "pull"}], "containers": [{"name": "c", "image": "r.example/app"}]}}),
    );
    assert_eq!(as_node(&b), 200, "a pod created a moment ago through A grants its node at once on B");
    let (code, _) = call(&a, reqwest::Method::DELETE, "/api/v1/namespaces/team/pods/puller?gracePeriodSeconds=0", None);
    assert_eq!(code, 200);
    let deadline = Instant::now() + Duration::from_secs(1);
    while as_node(&b) != 403 {
        assert!(Instant::now() < deadline, "the node kept access to the secret after its pod was deleted");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Leader election among replicas for the controllers the API server runs itself: one holds
/// the Lease `kube-system/podpass-apiserver-controllers` and publishes the `kubernetes`
/// Endpoints with its own address; a second replica leaves them alone while the holder
/// renews (no rewriting them back and forth); stopped, the holder releases the lease and the
/// other takes over at once and publishes its own.
#[test]
fn one_elected_replica_publishes_the_kubernetes_endpoints_and_another_takes_over_when_it_stops() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let etcd = Etcd::fresh(&d.join("etcd"));
    let owned = replica_flags(d, &etcd);
    let flags: Vec<&str> = owned.iter().map(String::as_str).collect();
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/podpass-apiserver-controllers";
    let ep_path = "/api/v1/namespaces/default/endpoints/kubernetes";
    let port_of = |s: &Server| s.url.rsplit(':').next().unwrap().parse::<u64>().unwrap();
    let published_port = |s: &Server| get(s, ep_path).1["subsets"][0]["ports"][0]["port"].as_u64();
    let until = |what: &str, f: &mut dyn FnMut() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(40);
        while !f() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    let mut a = start(&d.join("a"), &flags);
    let mut holder_a = String::new();
    until("a elected", &mut || {
        let (code, lease) = get(&a, lease_path);
        holder_a = lease["spec"]["holderIdentity"].as_str().unwrap_or_default().to_owned();
        code == 200 && !holder_a.is_empty() && lease["spec"]["leaseDurationSeconds"] == 15
    });
    until("a's address published", &mut || published_port(&a) == Some(port_of(&a)));

    // b joins; while a renews (twice seen), b neither takes the lease nor touches them.
    let b = start(&d.join("b"), &flags);
    assert_ne!(port_of(&a), port_of(&b));
    let ep_before = get(&b, ep_path).1;
    let renewed = |s: &Server| get(s, lease_path).1["spec"]["renewTime"].as_str().unwrap_or_default().to_owned();
    for _ in 0..2 {
        let seen = renewed(&b);
        until("a renews", &mut || renewed(&b) != seen);
    }
    let lease = get(&b, lease_path).1;
    assert_eq!(lease["spec"]["holderIdentity"].as_str(), Some(holder_a.as_str()), "{lease}");
    let ep_after = get(&b, ep_path).1;
    assert_eq!(ep_after["metadata"]["resourceVersion"], ep_before["metadata"]["resourceVersion"], "{ep_after}");
    // deleted, they come back from the leader, with the leader's address
    assert_eq!(call(&b, reqwest::Method::DELETE, ep_path, None).0, 200);
    until("recreated by a", &mut || published_port(&b) == Some(port_of(&a)));

    // a stops (SIGTERM): it releases the lease, b takes it and publishes its own address.
    let transitions = lease["spec"]["leaseTransitions"].as_u64().unwrap();
    let stopped = Command::new("kill").args(["-TERM", &a.child.id().to_string()]).status().unwrap();
    assert!(stopped.success());
    until("a exits", &mut || a.child.try_wait().unwrap().is_some());
    until("b elected", &mut || {
        let lease = get(&b, lease_path).1;
        let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or_default();
        !holder.is_empty() && holder != holder_a && lease["spec"]["leaseTransitions"] == transitions + 1
    });
    until("b's address published", &mut || published_port(&b) == Some(port_of(&b)));
}

/// Cluster IPs across replicas: an address is an IPAddress object in the shared store, so
/// Services created at once through two replicas never share one, and an address taken
/// through one is refused through the other in upstream's words.
#[test]
fn replicas_on_one_etcd_never_allocate_one_cluster_ip_twice() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let etcd = Etcd::fresh(&d.join("etcd"));
    let owned = replica_flags(d, &etcd);
    let mut flags: Vec<&str> = owned.iter().map(String::as_str).collect();
    // A small range: collisions would be likely if allocation were per replica.
    flags.extend(["--service-cluster-ip-range", "10.96.0.0/26"]);
    let (a, b) = (start(&d.join("a"), &flags), start(&d.join("b"), &flags));
    let service = |name: String| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"ports": [{"port": 80}], "selector": {"app": "x"}}})
    };
    let created: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let (server, body) = (if i % 2 == 0 { &a } else { &b }, service(format!("s{i}")));
                scope.spawn(move || {
                    post(server, "/api/v1/namespaces/default/services", body)["spec"]["clusterIP"]
                        .as_str()
                        .unwrap()
                        .to_owned()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut distinct = created.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 20, "{created:?}");
    let (_, addresses) = get(&b, "/apis/networking.k8s.io/v1/ipaddresses");
    let names: Vec<&str> =
        addresses["items"].as_array().unwrap().iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    for ip in &created {
        assert!(names.contains(&ip.as_str()), "{ip} recorded: {names:?}");
    }
    let fixed = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"clusterIP": "10.96.0.5", "ports": [{"port": 80}]}})
    };
    post(&a, "/api/v1/namespaces/default/services", fixed("first"));
    let (code, refused) = call(&b, reqwest::Method::POST, "/api/v1/namespaces/default/services", Some(fixed("second")));
    assert_eq!(code, 422, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .ends_with("failed to allocate IP 10.96.0.5: provided IP is already allocated"),
        "{refused}"
    );
}
