//! End-to-end: the control plane under the attacks it was tried with (issue "Control plane
//! and node inputs under attack"). Each test is named after what it guards and drives the
//! real binary the way the attack did.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// CPU seconds (user + system) a process has used, from /proc.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // fields after the parenthesised command name; utime and stime are 14th and 15th
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

#[test]
fn random_paths_and_methods_do_not_grow_metrics() {
    let dir = tempfile::tempdir().unwrap();
    // The server's own series only (a manager's requests would add theirs).
    let s = start_without_manager(dir.path(), &[]);
    let c = client(dir.path());
    for i in 0..600 {
        let method = reqwest::Method::from_bytes(format!("M{i}").as_bytes()).unwrap();
        let _ = c.request(method, format!("{}/api/v1/random-{i}/x", s.url)).send().unwrap();
        let _ = c.get(format!("{}/apis/g{i}.example/v{i}/things", s.url)).send().unwrap();
        let _ = c.get(format!("{}/unknown/{i}", s.url)).send().unwrap();
    }
    let metrics =
        c.get(format!("{}/metrics", s.url)).bearer_auth(admin_token(dir.path())).send().unwrap().text().unwrap();
    assert!(!metrics.contains("random-") && !metrics.contains("g1.example") && !metrics.contains("M1"), "{metrics}");
    let series = metrics.lines().filter(|l| l.starts_with("apiserver_request_total{")).count();
    assert!(series < 20, "{series} request series:\n{metrics}");
    assert!(metrics.len() < 64 * 1024, "{} bytes of metrics", metrics.len());
}

#[test]
fn idle_connections_past_the_file_limit_neither_spin_nor_take_the_server_down() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 128 open files: the idle connections below exhaust them, so accept fails with EMFILE
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n 128 && exec {PODPASS} apiserver --data-dir {} --secure-port 0", d.to_str().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = wait_for_url(d);
    let addr = url.trim_start_matches("https://").to_owned();
    let idle: Vec<TcpStream> = (0..300).filter_map(|_| TcpStream::connect(&addr).ok()).collect();
    assert!(idle.len() >= 200, "only {} connections", idle.len());
    // while the server is out of file descriptors it backs off instead of spinning
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_seconds(child.id());
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_seconds(child.id()) - before;
    assert!(used < 1.0, "server used {used:.2} CPU seconds in 2 s while out of file descriptors");
    // idle connections are closed by the handshake timeout and a real client gets through
    let c = streaming_client(d, Duration::from_secs(60));
    let resp = c.get(format!("{url}/version")).bearer_auth(admin_token(d)).send().unwrap();
    assert_eq!(resp.status(), 200);
    assert!(child.try_wait().unwrap().is_none(), "server exited");
    drop(idle);
    let _ = child.kill();
    let _ = child.wait();
}

fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Output {
    kubectl_with(kubeconfig, &kubeconfig.with_extension("cache"), args)
}

fn identity(d: &std::path::Path, user: &str, groups: &[&str]) -> std::process::Output {
    identity_output(d, user, groups)
}

fn review(s: &Server, token: &str, audiences: &[&str]) -> serde_json::Value {
    let body = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": token, "audiences": audiences}});
    client(&s.dir)
        .post(format!("{}/apis/authentication.k8s.io/v1/tokenreviews", s.url))
        .bearer_auth(admin_token(&s.dir))
        .json(&body)
        .send()
        .unwrap()
        .json()
        .unwrap()
}

#[test]
fn static_tokens_pass_reviews_only_for_the_api_audiences() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let admin = admin_token(dir.path());
    let api = review(&s, &admin, &[]);
    assert_eq!(api["status"]["authenticated"], true, "{api}");
    assert_eq!(api["status"]["user"]["groups"], serde_json::json!(["system:masters", "system:authenticated"]));
    assert_eq!(api["status"]["audiences"], serde_json::json!([s.url]));
    // a registry asking about its own audience must not accept a user's API token
    let registry = review(&s, &admin, &["registry.example"]);
    assert_eq!(registry["status"]["authenticated"], false, "{registry}");
    let both = review(&s, &admin, &["registry.example", &s.url]);
    assert_eq!(both["status"]["audiences"], serde_json::json!([s.url]), "{both}");
}

#[test]
fn bearer_scheme_is_case_insensitive_and_other_schemes_are_anonymous() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let admin = admin_token(dir.path());
    let c = client(dir.path());
    let whoami = |auth: &str| {
        c.get(format!("{}/api/v1/namespaces", s.url)).header("authorization", auth).send().unwrap().status().as_u16()
    };
    assert_eq!(whoami(&format!("bearer {admin}")), 200);
    assert_eq!(whoami(&format!("BEARER {admin}")), 200);
    assert_eq!(whoami("Basic YWRtaW46cGFzcw=="), 403, "another scheme is anonymous, which may not list");
    assert_eq!(whoami("Bearer not-a-token"), 401);
    // as upstream: "Bearer" alone carries no token (anonymous); an empty token is refused
    assert_eq!(whoami("Bearer "), 403);
    assert_eq!(whoami("Bearer  x"), 401);
}

#[test]
fn kubeconfig_identities_cannot_smuggle_csv_or_yaml() {
    let dir = tempfile::tempdir().unwrap();
    let _s = start(dir.path(), &[]);
    let before = std::fs::read(dir.path().join("tokens.csv")).unwrap();
    for (user, groups) in [
        ("eve\nx,admin,1,system:masters", &[][..]),
        ("eve\"", &[][..]),
        ("eve,admin", &[][..]),
        ("eve", &["dev,system:masters"][..]),
        ("eve", &["dev\"\nt,admin,1,\"system:masters"][..]),
        ("eve", &[""][..]),
    ] {
        let out = identity(dir.path(), user, groups);
        assert!(!out.status.success(), "{user:?} {groups:?} accepted");
        assert!(String::from_utf8_lossy(&out.stderr).contains("must be non-empty and contain no"));
    }
    assert_eq!(std::fs::read(dir.path().join("tokens.csv")).unwrap(), before, "token file untouched");
}

#[test]
fn nodes_cannot_label_themselves_into_restricted_domains_and_pods_cannot_move() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _s = start(d, &[]);
    let admin = d.join("admin.kubeconfig");
    let node_cfg = d.join("n1.kubeconfig");
    std::fs::write(&node_cfg, ok(identity(d, "system:node:n1", &["system:nodes"]), "node identity")).unwrap();
    let node_json = d.join("node.json");
    std::fs::write(
        &node_json,
        r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","labels":{"kubernetes.io/hostname":"n1"}}}"#,
    )
    .unwrap();
    ok(kubectl(&node_cfg, &["create", "-f", node_json.to_str().unwrap()]), "node registers itself");
    let out = kubectl(&node_cfg, &["label", "node", "n1", "node-restriction.kubernetes.io/trusted=true"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not allowed to modify labels: node-restriction.kubernetes.io/trusted"), "{err}");
    ok(kubectl(&node_cfg, &["label", "node", "n1", "example.com/rack=r1"]), "an ordinary label");
    ok(kubectl(&admin, &["label", "node", "n1", "node-restriction.kubernetes.io/trusted=true"]), "admin may");
    let out = kubectl(&node_cfg, &["label", "node", "n1", "node-restriction.kubernetes.io/trusted-"]);
    assert!(!out.status.success(), "the node removed a restricted label");
    let other = d.join("n2.json");
    std::fs::write(&other, std::fs::read_to_string(&node_json).unwrap().replace("n1", "n2")).unwrap();
    let out = kubectl(&node_cfg, &["create", "-f", other.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains(r#"node "n1" is not allowed to modify node "n2""#));

    // a pod's node (and the rest of its spec) is fixed once created
    ok(kubectl(&admin, &["create", "namespace", "team"]), "ns");
    wait_namespace_ready(&_s, "team");
    let pod = d.join("pod.json");
    std::fs::write(
        &pod,
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"team"},
            "spec":{"nodeName":"n1","containers":[{"name":"c","image":"app:1"}]}}"#,
    )
    .unwrap();
    ok(kubectl(&admin, &["create", "-f", pod.to_str().unwrap()]), "pod");
    let out =
        kubectl(&admin, &["-n", "team", "patch", "pod", "web", "--type=merge", "-p", r#"{"spec":{"nodeName":"n2"}}"#]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pod updates may not change fields other than"), "{err}");
    ok(kubectl(&admin, &["-n", "team", "set", "image", "pod/web", "c=app:2"]), "image may change");
    // a grace period past any calendar is bounded, not an overflow
    let c = client(d);
    let resp = c
        .delete(format!("{}/api/v1/namespaces/team/pods/web?gracePeriodSeconds=9223372036854775807", _s.url))
        .bearer_auth(admin_token(d))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().unwrap();
    assert!(body["metadata"]["deletionTimestamp"].as_str().is_some_and(|t| t.starts_with("21")), "{body}");
    let resp = c
        .delete(format!("{}/api/v1/namespaces/team/pods/web?gracePeriodSeconds=soon", _s.url))
        .bearer_auth(admin_token(d))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(c.get(format!("{}/version", _s.url)).send().unwrap().status(), 200, "server alive");
}

fn nested(depth: usize) -> serde_json::Value {
    let mut v = serde_json::json!("leaf");
    for _ in 0..depth {
        v = serde_json::json!({ "n": v });
    }
    v
}

fn longrunning_watches(s: &Server, resource: &str) -> Option<i64> {
    let metrics = client(&s.dir)
        .get(format!("{}/metrics", s.url))
        .bearer_auth(admin_token(&s.dir))
        .send()
        .unwrap()
        .text()
        .unwrap();
    metrics
        .lines()
        .find(|l| l.starts_with("apiserver_longrunning_requests{") && l.contains(&format!("resource=\"{resource}\"")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
}

#[test]
fn abandoned_watches_end_and_watches_per_user_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    // Only this test's watches of ConfigMaps (the root CA publisher would hold one more).
    let s = start_without_manager(dir.path(), &[]);
    let admin = admin_token(dir.path());
    let url = format!("{}/api/v1/configmaps?watch=true&labelSelector=never%3Dmatches", s.url);
    let mut open = Vec::new();
    for _ in 0..200 {
        // a client per watch: each holds its own connection, as separate processes would
        let resp = client(dir.path()).get(&url).bearer_auth(&admin).send().unwrap();
        assert_eq!(resp.status(), 200);
        open.push(resp);
    }
    let refused = client(dir.path()).get(&url).bearer_auth(&admin).send().unwrap();
    assert_eq!(refused.status(), 429, "the 201st watch of one user");
    assert_eq!(longrunning_watches(&s, "configmaps"), Some(200));
    // the clients go away without a word; their watches (and store tasks) end
    drop(open);
    let deadline = Instant::now() + Duration::from_secs(20);
    while longrunning_watches(&s, "configmaps") != Some(0) {
        assert!(Instant::now() < deadline, "watches still open: {:?}", longrunning_watches(&s, "configmaps"));
        std::thread::sleep(Duration::from_millis(100));
    }
    let again = client(dir.path()).get(&url).bearer_auth(&admin).send().unwrap();
    assert_eq!(again.status(), 200, "slots are free again");
}

#[test]
fn deep_objects_are_refused_and_never_poison_resumed_watches() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let admin = admin_token(dir.path());
    let c = client(dir.path());
    let post = |name: &str, depth: usize| {
        let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "extra": nested(depth)});
        c.post(format!("{}/api/v1/namespaces/default/configmaps", s.url))
            .bearer_auth(&admin)
            .json(&body)
            .send()
            .unwrap()
    };
    let list: serde_json::Value =
        c.get(format!("{}/api/v1/configmaps", s.url)).bearer_auth(&admin).send().unwrap().json().unwrap();
    let before = list["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let deep = post("deep", 124);
    assert_eq!(deep.status(), 400);
    let text = deep.text().unwrap();
    assert!(text.contains("nesting depth"), "{text}");
    assert_eq!(post("fine", 60).status(), 201);
    assert_eq!(post("after", 1).status(), 201);
    // a watch resumed from before them sees both and does not fail
    let watch = streaming_client(dir.path(), Duration::from_secs(5))
        .get(format!("{}/api/v1/configmaps?watch=true&resourceVersion={before}", s.url))
        .bearer_auth(&admin)
        .send()
        .unwrap();
    assert_eq!(watch.status(), 200);
    let mut names = Vec::new();
    for line in std::io::BufRead::lines(std::io::BufReader::new(watch)) {
        let Ok(line) = line else { break };
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_ne!(event["type"], "ERROR", "{event}");
        names.push(event["object"]["metadata"]["name"].as_str().unwrap_or_default().to_owned());
        if names.len() == 2 {
            break;
        }
    }
    assert_eq!(names, ["fine", "after"]);
    // a revision from the future is upstream's 504, not a silent wait
    let future = c
        .get(format!("{}/api/v1/configmaps?watch=true&resourceVersion=999999999", s.url))
        .bearer_auth(&admin)
        .send()
        .unwrap();
    assert_eq!(future.status(), 504);
    let text = future.text().unwrap();
    assert!(text.contains("Too large resource version: 999999999, current: "), "{text}");
}

#[test]
fn a_watch_sees_an_object_leave_its_selection_with_its_last_selected_state() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let admin = admin_token(dir.path());
    let c = client(dir.path());
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": {"app": "web"}}, "data": {"k": "before"}});
    let created: serde_json::Value = c
        .post(format!("{}/api/v1/namespaces/default/configmaps", s.url))
        .bearer_auth(&admin)
        .json(&cm)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let rv = created["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let patched = c
        .patch(format!("{}/api/v1/namespaces/default/configmaps/c", s.url))
        .bearer_auth(&admin)
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"metadata":{"labels":{"app":"db"}},"data":{"k":"after"}}"#)
        .send()
        .unwrap();
    assert_eq!(patched.status(), 200);
    let watch = streaming_client(dir.path(), Duration::from_secs(5))
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps?watch=true&labelSelector=app%3Dweb&resourceVersion={rv}",
            s.url
        ))
        .bearer_auth(&admin)
        .send()
        .unwrap();
    let line = std::io::BufRead::lines(std::io::BufReader::new(watch)).next().unwrap().unwrap();
    let event: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(event["type"], "DELETED");
    assert_eq!(event["object"]["metadata"]["labels"]["app"], "web", "{event}");
    assert_eq!(event["object"]["data"]["k"], "before", "{event}");
    assert_ne!(event["object"]["metadata"]["resourceVersion"].as_str().unwrap(), rv);
}

#[test]
fn every_object_is_addressable_and_fake_subresources_do_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    let admin = admin_token(d);
    let c = client(d);
    // a namespaced kind on the cluster path: not creatable (it could never be reached)
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "lost"}});
    let resp = c.post(format!("{}/api/v1/configmaps", s.url)).bearer_auth(&admin).json(&cm).send().unwrap();
    assert_eq!(resp.status(), 405);
    let listed: serde_json::Value =
        c.get(format!("{}/api/v1/configmaps", s.url)).bearer_auth(&admin).send().unwrap().json().unwrap();
    assert!(listed["items"].as_array().unwrap().iter().all(|i| i["metadata"]["name"] != "lost"));
    assert!(!listed["items"].as_array().unwrap().is_empty(), "lists across namespaces");

    // names are what the decoded path says: a role with a space is reachable with %20
    let role = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "with space"}, "rules": []});
    let roles = format!("{}/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", s.url);
    assert_eq!(c.post(&roles).bearer_auth(&admin).json(&role).send().unwrap().status(), 201);
    assert_eq!(c.get(format!("{roles}/with%20space")).bearer_auth(&admin).send().unwrap().status(), 200);
    assert_eq!(c.delete(format!("{roles}/with%20space")).bearer_auth(&admin).send().unwrap().status(), 200);
    for bad in ["nul\u{0}", "line\nbreak", "..", "a/b", "a%b"] {
        let role = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": bad}, "rules": []});
        let resp = c.post(&roles).bearer_auth(&admin).json(&role).send().unwrap();
        assert_eq!(resp.status(), 422, "{bad:?}");
    }
    assert_eq!(c.get(format!("{roles}/bad%zzescape")).bearer_auth(&admin).send().unwrap().status(), 400);

    // a user allowed only `*/status` reads no secret through a status path
    let secret =
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}, "stringData": {"p": "x"}});
    let secrets = format!("{}/api/v1/namespaces/default/secrets", s.url);
    assert_eq!(c.post(&secrets).bearer_auth(&admin).json(&secret).send().unwrap().status(), 201);
    let status_reader = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "status-reader"}, "rules": [{"apiGroups": [""], "resources": ["*/status"], "verbs": ["get"]}]});
    let binding = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "status-reader"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "status-reader"},
        "subjects": [{"kind": "User", "name": "watcher", "apiGroup": "rbac.authorization.k8s.io"}]});
    let rbac = format!("{}/apis/rbac.authorization.k8s.io/v1", s.url);
    assert_eq!(
        c.post(format!("{rbac}/clusterroles")).bearer_auth(&admin).json(&status_reader).send().unwrap().status(),
        201
    );
    assert_eq!(
        c.post(format!("{rbac}/clusterrolebindings")).bearer_auth(&admin).json(&binding).send().unwrap().status(),
        201
    );
    let cfg = d.join("watcher.kubeconfig");
    std::fs::write(&cfg, ok(identity(d, "watcher", &[]), "identity")).unwrap();
    let token = std::fs::read_to_string(&cfg)
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .unwrap()
        .trim_matches('"')
        .to_owned();
    let resp = c.get(format!("{secrets}/db/status")).bearer_auth(&token).send().unwrap();
    assert_eq!(resp.status(), 404);
    assert!(!resp.text().unwrap().contains("\"p\""));
    // … while pods/status, a real subresource, answers
    let pod_status =
        c.get(format!("{}/api/v1/namespaces/default/pods/none/status", s.url)).bearer_auth(&token).send().unwrap();
    assert_eq!(pod_status.status(), 404);
    assert!(pod_status.text().unwrap().contains(r#"pods \"none\" not found"#));
}

fn json_req(
    s: &Server,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let mut req = client(&s.dir).request(method.clone(), format!("{}{path}", s.url)).bearer_auth(admin_token(&s.dir));
    if let Some(b) = body {
        req = if method == reqwest::Method::PATCH {
            req.header("content-type", "application/merge-patch+json").body(b.to_string())
        } else {
            req.json(&b)
        };
    }
    let resp = req.send().unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().unwrap_or(serde_json::Value::Null))
}

fn wait_gone(s: &Server, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while json_req(s, reqwest::Method::GET, path, None).0 != 404 {
        assert!(Instant::now() < deadline, "{path} still there");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn namespace_deletion_terminates_refuses_creates_and_honours_finalizers() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let ns = |name: &str| serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    let cm = |name: &str, finalizers: &[&str]| serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "finalizers": finalizers}});
    assert_eq!(json_req(&s, Method::POST, "/api/v1/namespaces", Some(ns("team"))).0, 201);
    let (code, held) =
        json_req(&s, Method::POST, "/api/v1/namespaces/team/configmaps", Some(cm("held", &["example.com/hold"])));
    assert_eq!(code, 201, "{held}");
    let (code, deleted) = json_req(&s, Method::DELETE, "/api/v1/namespaces/team", None);
    assert_eq!(code, 200);
    assert_eq!(deleted["status"]["phase"], "Terminating");
    // NamespaceLifecycle: nothing new in a terminating namespace
    let (code, refused) = json_req(&s, Method::POST, "/api/v1/namespaces/team/configmaps", Some(cm("late", &[])));
    assert_eq!(code, 403);
    assert_eq!(
        refused["message"],
        r#"configmaps "late" is forbidden: unable to create new content in namespace team because it is being terminated"#
    );
    // the finalized object is marked, not removed, and holds the namespace
    let marked = wait_for("the finalized config map marked for deletion", Duration::from_secs(30), || {
        let (code, marked) = json_req(&s, Method::GET, "/api/v1/namespaces/team/configmaps/held", None);
        assert_eq!(code, 200, "removed although finalized: {marked}");
        marked["metadata"]["deletionTimestamp"].is_string().then_some(marked)
    });
    assert!(marked["metadata"]["deletionTimestamp"].is_string(), "{marked}");
    assert_eq!(json_req(&s, Method::GET, "/api/v1/namespaces/team", None).0, 200, "held by its content");
    // the namespace controller says why, in upstream's conditions
    let terminating = wait_for("the namespace's deletion conditions", Duration::from_secs(30), || {
        let (_, ns) = json_req(&s, Method::GET, "/api/v1/namespaces/team", None);
        let conditions = ns["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let remaining = conditions.iter().find(|c| c["type"] == "NamespaceFinalizersRemaining").cloned();
        remaining.filter(|c| c["status"] == "True").map(|_| ns)
    });
    let condition = |kind: &str| {
        terminating["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == kind).cloned().unwrap()
    };
    assert_eq!(
        condition("NamespaceFinalizersRemaining")["message"],
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    );
    assert_eq!(condition("NamespaceContentRemaining")["reason"], "SomeResourcesRemain");
    assert_eq!(condition("NamespaceDeletionDiscoveryFailure")["status"], "False");
    // `finalize` is the namespace controller's, written with PUT only
    assert_eq!(json_req(&s, Method::GET, "/api/v1/namespaces/team/finalize", None).0, 405);
    // adding a finalizer now is refused; removing the last one lets both go
    let (code, _) = json_req(
        &s,
        Method::PATCH,
        "/api/v1/namespaces/team/configmaps/held",
        Some(serde_json::json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}})),
    );
    assert_eq!(code, 422);
    let (code, _) = json_req(
        &s,
        Method::PATCH,
        "/api/v1/namespaces/team/configmaps/held",
        Some(serde_json::json!({"metadata": {"finalizers": null}})),
    );
    assert_eq!(code, 200);
    wait_gone(&s, "/api/v1/namespaces/team/configmaps/held");
    wait_gone(&s, "/api/v1/namespaces/team");
    // the immortal namespaces stay
    let (code, body) = json_req(&s, Method::DELETE, "/api/v1/namespaces/default", None);
    assert_eq!(code, 403, "{body}");
}

#[test]
fn creates_racing_a_namespace_deletion_never_survive_into_a_new_namespace() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "race"}});
    for round in 0..3 {
        assert_eq!(json_req(&s, Method::POST, "/api/v1/namespaces", Some(ns.clone())).0, 201, "round {round}");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Creates answered so far: the deletion races writers already at work.
        let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let (stop, answered, url, dir) = (stop.clone(), answered.clone(), s.url.clone(), s.dir.clone());
                std::thread::spawn(move || {
                    let c = client(&dir);
                    let mut i = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 400 {
                        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("r{round}-w{w}-{i}")}});
                        let sent = c
                            .post(format!("{url}/api/v1/namespaces/race/configmaps"))
                            .bearer_auth(admin_token(&dir))
                            .json(&cm)
                            .send();
                        if sent.is_ok() {
                            answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        i += 1;
                    }
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        while answered.load(std::sync::atomic::Ordering::Relaxed) < 4 {
            assert!(Instant::now() < deadline, "the writers got no answer");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(json_req(&s, Method::DELETE, "/api/v1/namespaces/race", None).0, 200);
        wait_gone(&s, "/api/v1/namespaces/race");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        let (_, listed) = json_req(&s, Method::GET, "/api/v1/namespaces/race/configmaps", None);
        let left: Vec<&serde_json::Value> = listed["items"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
        assert!(left.is_empty(), "round {round}: survived {}", left.len());
    }
}

#[test]
fn a_service_account_with_finalizers_is_marked_and_its_tokens_keep_their_grace() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let sa = serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder", "finalizers": ["example.com/keep"]}});
    assert_eq!(json_req(&s, Method::POST, "/api/v1/namespaces/default/serviceaccounts", Some(sa)).0, 201);
    let tr = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": ["registry.example"]}});
    let (code, issued) =
        json_req(&s, Method::POST, "/api/v1/namespaces/default/serviceaccounts/builder/token", Some(tr));
    assert_eq!(code, 201, "{issued}");
    let token = issued["status"]["token"].as_str().unwrap().to_owned();
    let (code, marked) = json_req(&s, Method::DELETE, "/api/v1/namespaces/default/serviceaccounts/builder", None);
    assert_eq!(code, 200);
    assert!(marked["metadata"]["deletionTimestamp"].is_string(), "{marked}");
    assert_eq!(json_req(&s, Method::GET, "/api/v1/namespaces/default/serviceaccounts/builder", None).0, 200);
    let review = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": token, "audiences": ["registry.example"]}});
    let (_, reviewed) = json_req(&s, Method::POST, "/apis/authentication.k8s.io/v1/tokenreviews", Some(review));
    assert_eq!(reviewed["status"]["authenticated"], true, "within the one-minute grace: {reviewed}");
}

/// The hostile registry (tests/e2e/hostile_registry.py), killed on drop.
struct HostileRegistry {
    child: std::process::Child,
    addr: String,
}

impl Drop for HostileRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hostile_registry(dir: &std::path::Path) -> HostileRegistry {
    let port_file = dir.join("registry-port");
    let child = Command::new("python3")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("hostile_registry.py"))
        .arg(&port_file)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let port = loop {
        if let Ok(p) = std::fs::read_to_string(&port_file) {
            break p;
        }
        assert!(Instant::now() < deadline, "registry did not start");
        std::thread::sleep(Duration::from_millis(50));
    };
    HostileRegistry { child, addr: format!("127.0.0.1:{}", port.trim()) }
}

fn load(root: &std::path::Path, image: &str) -> (bool, String) {
    let out = Command::new(PODPASS)
        .args(["node", "images", "load", "--root-dir", root.to_str().unwrap(), image])
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn files_in(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

#[test]
fn a_hostile_registry_cannot_exhaust_the_node_and_failed_pulls_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let reg = hostile_registry(dir.path());
    let root = dir.path().join("node");
    for (repo, expect) in [
        ("huge", "larger than the 4194304-byte limit"),
        ("hugelen", "larger than the 4194304-byte limit"),
        ("bigconfig", "config size 3221225472 is outside"),
        ("partial", "Invalid digest"),
    ] {
        let (ok, stderr) = load(&root, &format!("{}/{repo}:1", reg.addr));
        assert!(!ok, "{repo} loaded");
        assert!(stderr.contains(expect), "{repo}: {stderr}");
    }
    // the config the partial pull fetched is gone with it; nothing is left in ingest/
    let images = root.join("images");
    assert_eq!(files_in(&images.join("blobs/sha256")), Vec::<String>::new());
    assert_eq!(files_in(&images.join("ingest")), Vec::<String>::new());
    // a download left behind by a process that died is removed at the next start
    std::fs::write(images.join("ingest").join(format!("{}.999999999.0", "a".repeat(64))), b"half").unwrap();
    let _ = load(&root, &format!("{}/partial:1", reg.addr));
    assert_eq!(files_in(&images.join("ingest")), Vec::<String>::new());
}

#[test]
fn a_tenants_hostile_pull_secret_key_does_not_stop_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let config = serde_json::json!({"auths": {
        "registry.example/%aé": {"username": "u", "password": "p"},
        "%é": {"username": "u", "password": "p"},
        "127.0.0.1:9": {"username": "good", "password": "p"}}});
    let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "team"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": data_encoding::BASE64.encode(config.to_string().as_bytes())}});
    let path = dir.path().join("secret.json");
    std::fs::write(&path, secret.to_string()).unwrap();
    let out = Command::new(PODPASS)
        .args(["node", "images", "load", "--root-dir", dir.path().join("node").to_str().unwrap()])
        .args(["--pull-secret", path.to_str().unwrap(), "127.0.0.1:9/team/app:1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // the pull fails (nothing listens on port 9), but as an error, not a panic
    assert!(!out.status.success());
    assert_ne!(out.status.code(), Some(101), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("127.0.0.1:9"), "{stderr}");
}

#[test]
fn a_body_that_never_arrives_is_cut_off_by_the_request_timeout() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &["--request-timeout", "2s"]);
    let addr = s.url.trim_start_matches("https://").to_owned();
    let mut tls = Command::new("openssl")
        .args(["s_client", "-quiet", "-connect", &addr, "-CAfile", dir.path().join("pki/ca.crt").to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = tls.stdin.take().unwrap();
    // headers promising a body, then nothing (a slow upload)
    write!(
        stdin,
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{",
        admin_token(dir.path())
    )
    .unwrap();
    stdin.flush().unwrap();
    let mut stdout = tls.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        let n = stdout.read(&mut buf).unwrap_or(0);
        let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
    });
    let answer = rx.recv_timeout(Duration::from_secs(30)).expect("an answer before 30 s");
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");
    drop(stdin);
    let _ = tls.kill();
    let _ = tls.wait();
}

#[test]
fn pod_volume_names_cannot_walk_out_of_a_nodes_pod_directory() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}],
                 "volumes": [{"name": "../../../etc", "projected": {"defaultMode": 420, "sources": []}}]}});
    let (code, body) = json_req(&s, reqwest::Method::POST, "/api/v1/namespaces/default/pods", Some(pod));
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains(r#"spec.volumes[0].name: Invalid value: "../../../etc""#),
        "{body}"
    );
}

/// A PATCH of `path` with `content_type` as the admin.
fn patch_as(s: &Server, path: &str, content_type: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let resp = client(&s.dir)
        .patch(format!("{}{path}", s.url))
        .bearer_auth(admin_token(&s.dir))
        .header("content-type", content_type)
        .body(body.to_string())
        .send()
        .unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().unwrap_or(serde_json::Value::Null))
}

fn pod_with_volumes(name: &str, volumes: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": "n1", "automountServiceAccountToken": false,
                 "containers": [{"name": "app", "image": "example/app:1"}], "volumes": volumes}})
}

#[test]
fn setuid_modes_bad_keys_and_escaping_paths_are_refused_as_upstream_refuses_them() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let pods = "/api/v1/namespaces/default/pods";
    // Tenant-chosen setuid files: defaultMode 3583 (07777) and item mode 2541 (04755).
    let (code, status) = json_req(
        &s,
        Method::POST,
        pods,
        Some(pod_with_volumes(
            "setuid",
            serde_json::json!([{"name": "s", "secret": {"secretName": "x", "defaultMode": 3583,
                                  "items": [{"key": "k", "path": "run", "mode": 2541}]}}]),
        )),
    );
    assert_eq!(code, 422, "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains(
            "spec.volumes[0].secret.defaultMode: Invalid value: 3583: must be a number between 0 and 0777 (octal), both inclusive"
        ) && message.contains("spec.volumes[0].secret.items[0].mode: Invalid value: 2541"),
        "{message}"
    );
    // Projected item paths that leave the volume.
    for bad in ["../escape", "/abs", "a/../../b"] {
        let (code, status) = json_req(
            &s,
            Method::POST,
            pods,
            Some(pod_with_volumes(
                "paths",
                serde_json::json!([{"name": "p", "projected": {"sources": [
                    {"configMap": {"name": "c", "items": [{"key": "k", "path": bad}]}}]}}]),
            )),
        );
        assert_eq!(code, 422, "{bad}: {status}");
        assert!(
            status["message"].as_str().unwrap().contains("projected.sources[0].configMap.items[0].path"),
            "{status}"
        );
    }
    // ConfigMap and Secret keys, on create and on update.
    for (resource, kind) in [("configmaps", "ConfigMap"), ("secrets", "Secret")] {
        let path = format!("/api/v1/namespaces/default/{resource}");
        for bad in ["../x", "a/b", "..hidden", "x y"] {
            let (code, status) = json_req(
                &s,
                Method::POST,
                &path,
                Some(
                    serde_json::json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": "k"}, "data": {bad: "eA=="}}),
                ),
            );
            assert_eq!(code, 422, "{kind} key {bad:?}: {status}");
            assert!(status["message"].as_str().unwrap().contains(&format!("data[{bad}]: Invalid value")), "{status}");
        }
        let (code, _) = json_req(
            &s,
            Method::POST,
            &path,
            Some(
                serde_json::json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": "k"}, "data": {"ok.key": "eA=="}}),
            ),
        );
        assert_eq!(code, 201);
        let (code, status) =
            json_req(&s, Method::PATCH, &format!("{path}/k"), Some(serde_json::json!({"data": {"../x": "eA=="}})));
        assert_eq!(code, 422, "{status}");
    }
}

#[test]
fn patches_honour_a_stale_resource_version_refuse_a_namespace_change_and_never_set_status_on_the_main_resource() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let cm = "/api/v1/namespaces/default/configmaps/c";
    let (code, created) = json_req(
        &s,
        Method::POST,
        "/api/v1/namespaces/default/configmaps",
        Some(
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}),
        ),
    );
    assert_eq!(code, 201);
    let stale = created["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let (code, _) = json_req(&s, Method::PATCH, cm, Some(serde_json::json!({"data": {"a": "2"}})));
    assert_eq!(code, 200);
    // A JSON patch setting the stale resourceVersion is a precondition: 409.
    let ops = serde_json::json!([
        {"op": "replace", "path": "/metadata/resourceVersion", "value": stale},
        {"op": "replace", "path": "/data/a", "value": "3"}]);
    let (code, status) = patch_as(&s, cm, "application/json-patch+json", ops);
    assert_eq!(code, 409, "{status}");
    assert_eq!(status["reason"], "Conflict");
    let (_, now) = json_req(&s, Method::GET, cm, None);
    assert_eq!(now["data"]["a"], "2", "the stale patch changed nothing");
    // Moving an object to another namespace by patch is a 400, not a silent no-op.
    let (code, status) =
        json_req(&s, Method::PATCH, cm, Some(serde_json::json!({"metadata": {"namespace": "kube-system"}})));
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "the namespace of the provided object does not match the namespace sent on the request"
    );

    // Status through pods/<name> (not /status): dropped, as upstream's pod strategy does;
    // and a pod created with a status starts Pending whatever it said.
    let mut pod = pod_with_volumes("p", serde_json::json!([]));
    pod["status"] = serde_json::json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
    let (code, created) = json_req(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(pod));
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["status"], serde_json::json!({"phase": "Pending"}));
    let path = "/api/v1/namespaces/default/pods/p";
    let (code, patched) = json_req(
        &s,
        Method::PATCH,
        path,
        Some(serde_json::json!({"metadata": {"labels": {"x": "y"}},
                                "status": {"phase": "Succeeded", "conditions": [{"type": "Ready", "status": "True"}]}})),
    );
    assert_eq!(code, 200);
    assert_eq!(patched["metadata"]["labels"]["x"], "y", "the rest of the patch applies");
    assert_eq!(patched["status"], serde_json::json!({"phase": "Pending"}), "{patched}");
    // ... while pods/<name>/status changes the status (and only it).
    let (code, patched) = json_req(
        &s,
        Method::PATCH,
        &format!("{path}/status"),
        Some(serde_json::json!({"metadata": {"labels": {"x": "z"}}, "status": {"phase": "Running"}})),
    );
    assert_eq!(code, 200);
    assert_eq!(patched["status"]["phase"], "Running");
    assert_eq!(patched["metadata"]["labels"]["x"], "y");
}

#[test]
fn deletes_race_other_writers_without_a_409_and_confirmed_removals_are_never_lost() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let names: Vec<String> = (0..30).map(|i| format!("p{i}")).collect();
    for n in &names {
        let (code, _) = json_req(
            &s,
            Method::POST,
            "/api/v1/namespaces/default/pods",
            Some(pod_with_volumes(n, serde_json::json!([]))),
        );
        assert_eq!(code, 201);
    }
    // A "node" posting every pod's status as fast as it can.
    let writer = {
        let (stop, url, dir, names) = (stop.clone(), s.url.clone(), s.dir.clone(), names.clone());
        std::thread::spawn(move || {
            let c = client(&dir);
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for n in &names {
                    let _ = c
                        .patch(format!("{url}/api/v1/namespaces/default/pods/{n}/status"))
                        .bearer_auth(admin_token(&dir))
                        .header("content-type", "application/merge-patch+json")
                        .body(serde_json::json!({"status": {"message": format!("beat {i}")}}).to_string())
                        .send();
                    i += 1;
                }
            }
        })
    };
    // A precondition that does not hold is a 409 naming it.
    let (code, status) = json_req(
        &s,
        Method::DELETE,
        "/api/v1/namespaces/default/pods/p0",
        Some(serde_json::json!({"preconditions": {"uid": "not-its-uid"}})),
    );
    assert_eq!(code, 409, "{status}");
    assert!(status["message"].as_str().unwrap().contains("Precondition failed: UID in precondition: not-its-uid"));
    // Without preconditions: never a 409, whoever writes meanwhile — neither the graceful
    // DELETE (1 s) nor the node's confirmation (0 s) that completes it, although the status
    // writes keep moving the pods' revisions.
    for grace in [1, 0] {
        for n in &names {
            let path = format!("/api/v1/namespaces/default/pods/{n}?gracePeriodSeconds={grace}");
            let (code, status) = json_req(&s, Method::DELETE, &path, None);
            assert_eq!(code, 200, "DELETE {n} with {grace} s: {status}");
        }
    }
    for n in &names {
        wait_gone(&s, &format!("/api/v1/namespaces/default/pods/{n}"));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
}

#[test]
fn a_terminating_pod_stays_until_its_node_confirms_and_the_server_never_removes_one_on_a_timer() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let node = serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}});
    assert_eq!(json_req(&s, Method::POST, "/api/v1/nodes", Some(node)).0, 201);
    let pods = "/api/v1/namespaces/default/pods";
    assert_eq!(json_req(&s, Method::POST, pods, Some(pod_with_volumes("kept", serde_json::json!([])))).0, 201);
    let mut orphan = pod_with_volumes("orphan", serde_json::json!([]));
    orphan["spec"]["nodeName"] = serde_json::json!("gone-node");
    assert_eq!(json_req(&s, Method::POST, pods, Some(orphan)).0, 201);
    for name in ["kept", "orphan"] {
        let (code, status) = json_req(&s, Method::DELETE, &format!("{pods}/{name}?gracePeriodSeconds=1"), None);
        assert_eq!(code, 200, "{status}");
    }
    // Past their grace both stay, Terminating: a pod its node may still run is removed by
    // that node, one whose node is gone by the pod garbage collector after its quarantine
    // (e2e_conformance), never by the API server on a timer.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        for name in ["kept", "orphan"] {
            let (code, pod) = json_req(&s, Method::GET, &format!("{pods}/{name}"), None);
            assert_eq!(code, 200, "{name} was removed before anything confirmed it");
            assert!(pod["metadata"]["deletionTimestamp"].is_string(), "{pod}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The node's confirmation (the kubelet's zero-grace delete) removes it.
    let (code, status) = json_req(&s, Method::DELETE, &format!("{pods}/kept?gracePeriodSeconds=0"), None);
    assert_eq!(code, 200, "{status}");
    wait_gone(&s, &format!("{pods}/kept"));
}

#[test]
fn node_names_sub_paths_ephemeral_containers_and_oversized_data_are_refused_as_upstream() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let pods = "/api/v1/namespaces/default/pods";
    let mut bad_node = pod_with_volumes("moved", serde_json::json!([]));
    bad_node["spec"]["nodeName"] = serde_json::json!("../node-1");
    let (code, status) = json_req(&s, Method::POST, pods, Some(bad_node));
    assert_eq!(code, 422, "{status}");
    assert!(status["message"].as_str().unwrap().contains(r#"spec.nodeName: Invalid value: "../node-1""#), "{status}");
    let mut escape = pod_with_volumes("escape", serde_json::json!([{"name": "w", "emptyDir": {}}]));
    escape["spec"]["containers"][0]["volumeMounts"] =
        serde_json::json!([{"name": "w", "mountPath": "/w", "subPath": "a/../../x"}]);
    let (code, status) = json_req(&s, Method::POST, pods, Some(escape));
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"].as_str().unwrap().contains(
            r#"spec.containers[0].volumeMounts[0].subPath: Invalid value: "a/../../x": must not contain '..'"#
        ),
        "{status}"
    );
    let mut debug = pod_with_volumes("debug", serde_json::json!([]));
    debug["spec"]["ephemeralContainers"] = serde_json::json!([{"name": "dbg", "image": "busybox"}]);
    let (code, status) = json_req(&s, Method::POST, pods, Some(debug));
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"].as_str().unwrap().contains("spec.ephemeralContainers: Forbidden: cannot be set on create")
    );
    // 1 MiB of data and a little more.
    let big = "x".repeat((1 << 20) + 1);
    let cm =
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"k": big}});
    let (code, status) = json_req(&s, Method::POST, "/api/v1/namespaces/default/configmaps", Some(cm));
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"].as_str().unwrap().ends_with("[]: Too long: may not be more than 1048576 bytes"),
        "{status}"
    );
    let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "big"}, "stringData": {"k": big}});
    let (code, status) = json_req(&s, Method::POST, "/api/v1/namespaces/default/secrets", Some(secret));
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"].as_str().unwrap().ends_with("data: Too long: may not be more than 1048576 bytes"),
        "{status}"
    );
    // Just under the bound: stored.
    let fits = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fits"},
        "data": {"k": "x".repeat((1 << 20) - 1)}});
    assert_eq!(json_req(&s, Method::POST, "/api/v1/namespaces/default/configmaps", Some(fits)).0, 201);
    // ValidatePodSpec beyond names and paths: every error of one pod in one 422, each with
    // upstream's path and words.
    let mut many = pod_with_volumes(
        "many",
        serde_json::json!([{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "expirationSeconds": 60}}]}},
                           {"name": "none"}]),
    );
    many["spec"]["containers"][0]["image"] = serde_json::json!("");
    many["spec"]["containers"][0]["ports"] = serde_json::json!([{"containerPort": 0}]);
    many["spec"]["restartPolicy"] = serde_json::json!("Sometimes");
    many["spec"]["securityContext"] = serde_json::json!({"runAsUser": -1});
    let (code, status) = json_req(&s, Method::POST, pods, Some(many));
    assert_eq!(code, 422, "{status}");
    let message = status["message"].as_str().unwrap();
    for expected in [
        "spec.containers[0].image: Required value",
        "spec.containers[0].ports[0].containerPort: Invalid value: 0: must be between 1 and 65535, inclusive",
        "spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes",
        "spec.volumes[1]: Required value: must specify a volume type",
        r#"spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "Never", "OnFailure""#,
        "spec.securityContext.runAsUser: Invalid value: -1: must be between 0 and 2147483647, inclusive",
    ] {
        assert!(message.contains(expected), "missing {expected:?} in {message}");
    }
    let causes = status["details"]["causes"].as_array().map_or(0, Vec::len);
    assert!(causes >= 6, "each error is a cause: {status}");
}

#[test]
fn half_open_connections_past_the_cap_never_lock_out_a_client_with_a_request() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    let addr = s.url.trim_start_matches("https://").trim_end_matches('/').to_owned();
    // 1050 anonymous half-open TLS connections from one address, past the 1000-connection
    // cap and the client's share alike.
    let flood = Flood::start(&addr, 1050, true);
    assert!(flood.1 >= 1000, "only {} connections opened", flood.1);
    let began = Instant::now();
    let out = admin_kubectl(d, &["get", "ns", "--request-timeout=30s"]);
    assert!(out.status.success(), "kubectl under the flood: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("default"));
    eprintln!("kubectl get ns answered in {:?} under {} half-open connections", began.elapsed(), flood.1);
    drop(flood);
}

#[test]
fn one_identitys_work_in_flight_is_bounded_and_never_starves_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    let addr = s.url.trim_start_matches("https://").trim_end_matches('/').to_owned();
    let kubeconfig = ok(identity(d, "tenant", &[]), "tenant identity");
    let token = kubeconfig.lines().find_map(|l| l.trim().strip_prefix("token: ")).unwrap().trim_matches('"').to_owned();
    // The tenant may create and list config maps in its namespace: its requests get past
    // authorization, to the body.
    ok(
        admin_kubectl(d, &["-n", "default", "create", "role", "cm", "--verb=create,list", "--resource=configmaps"]),
        "role",
    );
    ok(admin_kubectl(d, &["-n", "default", "create", "rolebinding", "cm", "--role=cm", "--user=tenant"]), "binding");
    // 100 requests of one tenant in flight (whole headers, a body that never comes).
    let flood = Flood::start_as(&addr, 100, true, Some(&token));
    assert_eq!(flood.1, 100);
    let c = client(d);
    let as_tenant =
        || c.get(format!("{}/api/v1/namespaces/default/configmaps", s.url)).bearer_auth(&token).send().unwrap();
    // The tenant's next request is answered 429 at once (its slots fill as the server reads
    // the flood's headers: wait for that state) ...
    let deadline = Instant::now() + Duration::from_secs(20);
    let refused = loop {
        let r = as_tenant();
        if r.status() == 429 {
            break r;
        }
        assert!(Instant::now() < deadline, "the tenant was never bounded: {}", r.status());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(refused.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    let body: serde_json::Value = refused.json().unwrap();
    assert_eq!(body["reason"], "TooManyRequests", "{body}");
    // ... while the admin is served as ever.
    let admin = c.get(format!("{}/api/v1/namespaces", s.url)).bearer_auth(admin_token(d)).send().unwrap();
    assert_eq!(admin.status(), 200);
    drop(flood);
}

#[test]
fn subdomain_names_are_allowed_up_to_253_bytes_as_upstream() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let cm = |name: &str| serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    let path = "/api/v1/namespaces/default/configmaps";
    assert_eq!(json_req(&s, Method::POST, path, Some(cm(&"a".repeat(100)))).0, 201, "a 100-character name");
    let (code, status) = json_req(&s, Method::POST, path, Some(cm(&"a".repeat(254))));
    assert_eq!(code, 422, "{status}");
    assert!(status["message"].as_str().unwrap().ends_with("must be no more than 253 bytes"), "{status}");
}
