//! End-to-end: what kubectl and the Python `kubernetes` client expect of an API server,
//! through those clients where a user meets it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;
use support::*;

fn post(s: &Server, path: &str, body: Value) -> Value {
    let resp =
        client(&s.dir).post(format!("{}{path}", s.url)).bearer_auth(admin_token(&s.dir)).json(&body).send().unwrap();
    assert!(resp.status().is_success(), "POST {path}: {}", resp.text().unwrap());
    resp.json().unwrap()
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

/// The lines of a watch until the server ends it; and how long that took.
fn watch_lines(dir: &Path, url: &str, query: &str) -> (Vec<Value>, Duration) {
    watch_lines_then(dir, url, query, None)
}

/// [`watch_lines`], saying on `established` once the watch's answer began (the server
/// watches from then on).
fn watch_lines_then(
    dir: &Path,
    url: &str,
    query: &str,
    established: Option<std::sync::mpsc::Sender<()>>,
) -> (Vec<Value>, Duration) {
    let started = Instant::now();
    let resp = streaming_client(dir, Duration::from_secs(30))
        .get(format!("{url}/api/v1/namespaces/default/configmaps?watch=true&{query}"))
        .bearer_auth(admin_token(dir))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    if let Some(tx) = established {
        let _ = tx.send(());
    }
    let lines = BufReader::new(resp).lines().map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect();
    (lines, started.elapsed())
}

#[test]
fn the_python_client_watch_stream_returns_at_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    post(&s, "/api/v1/namespaces/default/configmaps", configmap("one"));
    let script = r#"
import json, sys, time
from kubernetes import client, config, watch
config.load_kube_config(sys.argv[1])
v1 = client.CoreV1Api()
t0 = time.time()
names = [e["object"].metadata.name for e in watch.Watch().stream(v1.list_namespaced_config_map, "default", timeout_seconds=2)]
print(json.dumps({"elapsed": time.time() - t0, "names": names}))
"#;
    let mut child = Command::new("python3")
        .args(["-c", script, s.dir.join("admin.kubeconfig").to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 with the kubernetes client (scripts/install-test-deps)");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("watch.stream(timeout_seconds=2) still running after 20 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out: Value = serde_json::from_str(&ok(child.wait_with_output().unwrap(), "python watch")).unwrap();
    assert!(out["names"].as_array().unwrap().contains(&json!("one")), "{out}");
    let elapsed = out["elapsed"].as_f64().unwrap();
    assert!((1.5..10.0).contains(&elapsed), "ended after {elapsed} s");
}

#[test]
fn watches_without_a_timeout_end_in_the_min_request_timeout_window() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &["--min-request-timeout", "2"]);
    let (lines, took) = watch_lines(&s.dir, &s.url, "");
    assert!(lines.iter().all(|l| l["type"] == "ADDED"), "{lines:?}");
    // [2 s, 4 s) plus scheduling slack.
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(8), "ended after {took:?}");
    // A bad timeoutSeconds is a 400 naming it.
    let resp = client(&s.dir)
        .get(format!("{}/api/v1/configmaps?watch=true&timeoutSeconds=soon", s.url))
        .bearer_auth(admin_token(&s.dir))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert!(resp.text().unwrap().contains("timeoutSeconds"));
}

#[test]
fn bookmarks_carry_the_stores_progress_before_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    post(&s, "/api/v1/namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}));
    wait_namespace_ready(&s, "other");
    let (established, watching) = std::sync::mpsc::channel();
    let watcher = {
        let (dir, url) = (s.dir.clone(), s.url.clone());
        std::thread::spawn(move || {
            watch_lines_then(&dir, &url, "allowWatchBookmarks=true&timeoutSeconds=5", Some(established))
        })
    };
    watching.recv_timeout(Duration::from_secs(30)).expect("the watch began");
    // A change elsewhere: not this watch's, yet its bookmark moves past it.
    let elsewhere = post(&s, "/api/v1/namespaces/other/configmaps", configmap("x"));
    let rv: u64 = elsewhere["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    let (lines, took) = watcher.join().unwrap();
    assert!(took >= Duration::from_secs(5) && took < Duration::from_secs(12), "{took:?}");
    let bookmarks: Vec<&Value> = lines.iter().filter(|l| l["type"] == "BOOKMARK").collect();
    assert_eq!(bookmarks.len(), 1, "one, 2 s before the deadline: {lines:?}");
    let object = &bookmarks[0]["object"];
    assert_eq!((object["kind"].as_str(), object["apiVersion"].as_str()), (Some("ConfigMap"), Some("v1")));
    let at: u64 = object["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert!(at >= rv, "bookmark at {at}, the store was at {rv}");
    // Without allowWatchBookmarks: none.
    let (lines, _) = watch_lines(&s.dir, &s.url, "timeoutSeconds=3");
    assert!(lines.iter().all(|l| l["type"] != "BOOKMARK"), "{lines:?}");
}

fn kubectl(s: &Server, cache: &Path, args: &[&str]) -> std::process::Output {
    kubectl_with(&s.dir.join("admin.kubeconfig"), cache, args)
}

#[test]
fn kubectl_auth_whoami_names_the_user_and_its_groups() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let cache = dir.path().join("kubectl-cache");
    let out = ok(kubectl(&s, &cache, &["auth", "whoami", "-o", "json"]), "kubectl auth whoami");
    let review: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(review["kind"], "SelfSubjectReview");
    let info = &review["status"]["userInfo"];
    assert!(info["groups"].as_array().unwrap().contains(&json!("system:masters")), "{review}");
    assert!(info["groups"].as_array().unwrap().contains(&json!("system:authenticated")), "{review}");

    // Another user, as the table kubectl prints.
    let kubeconfig = dir.path().join("alice.kubeconfig");
    std::fs::write(&kubeconfig, ok(identity_output(&s.dir, "alice", &["team-a"]), "alice kubeconfig")).unwrap();
    let out = ok(kubectl_with(&kubeconfig, &cache, &["auth", "whoami"]), "whoami as alice");
    assert!(out.contains("alice") && out.contains("team-a"), "{out}");
}

#[test]
fn kubectl_patch_type_json_applies_rfc_6902_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let cache = dir.path().join("kubectl-cache");
    post(&s, "/api/v1/namespaces/default/configmaps", configmap("cm"));
    let patch = r#"[{"op":"test","path":"/data/k","value":"v"},{"op":"add","path":"/data/added","value":"1"},{"op":"remove","path":"/data/k"}]"#;
    ok(kubectl(&s, &cache, &["patch", "configmap", "cm", "--type", "json", "-p", patch]), "kubectl patch --type json");
    let cm: Value =
        serde_json::from_str(&ok(kubectl(&s, &cache, &["get", "configmap", "cm", "-o", "json"]), "get")).unwrap();
    assert_eq!(cm["data"], json!({"added": "1"}));

    // A failing test op: refused (422), nothing applied.
    let failing =
        r#"[{"op":"add","path":"/data/more","value":"2"},{"op":"test","path":"/data/added","value":"other"}]"#;
    let out = kubectl(&s, &cache, &["patch", "configmap", "cm", "--type", "json", "-p", failing]);
    assert!(!out.status.success());
    let cm: Value =
        serde_json::from_str(&ok(kubectl(&s, &cache, &["get", "configmap", "cm", "-o", "json"]), "get")).unwrap();
    assert_eq!(cm["data"], json!({"added": "1"}), "nothing of the failed patch applied");
}

#[test]
fn kubectl_validation_is_the_servers_strict_warn_or_ignore() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let cache = dir.path().join("kubectl-cache");
    let manifest = |name: &str| {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndatta:\n  k: v\n"))
            .unwrap();
        path
    };
    // kubectl's default (--validate=strict) is the server's Strict: refused, the field named.
    let out = kubectl(&s, &cache, &["create", "-f", manifest("strict").to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "datta""#),
        "{stderr}"
    );
    // Warn: created without the field, with a warning naming it.
    let out = kubectl(&s, &cache, &["create", "--validate=warn", "-f", manifest("warned").to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ok(out, "create --validate=warn");
    assert!(stderr.contains(r#"unknown field "datta""#), "{stderr}");
    let cm: Value =
        serde_json::from_str(&ok(kubectl(&s, &cache, &["get", "configmap", "warned", "-o", "json"]), "get")).unwrap();
    assert!(cm.get("datta").is_none(), "an unknown field is not kept: {cm}");
    // Ignore: no warning.
    let out = kubectl(&s, &cache, &["create", "--validate=false", "-f", manifest("ignored").to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ok(out, "create --validate=false");
    assert!(!stderr.contains("unknown field"), "{stderr}");

    // A duplicate field in a JSON body: Strict refuses it, Warn says so.
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dup"},"data":{"a":"1"},"data":{"b":"2"}}"#;
    let send = |mode: &str| {
        client(&s.dir)
            .post(format!("{}/api/v1/namespaces/default/configmaps?fieldValidation={mode}", s.url))
            .bearer_auth(admin_token(&s.dir))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .unwrap()
    };
    let resp = send("Strict");
    assert_eq!(resp.status(), 400);
    assert!(resp.text().unwrap().contains(r#"strict decoding error: duplicate field \"data\""#));
    let resp = send("Warn");
    assert_eq!(resp.status(), 201);
    let warning = resp.headers().get("warning").unwrap().to_str().unwrap().to_owned();
    assert_eq!(warning, r#"299 - "duplicate field \"data\"""#);
    assert_eq!(send("Bogus").status(), 400);
}

#[test]
fn kubectl_creates_a_tokenreview_from_a_file_and_explains_every_kind() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let cache = dir.path().join("kubectl-cache");
    let token = ok(kubectl(&s, &cache, &["create", "token", "default", "--audience", &s.url]), "create token");
    let manifest = dir.path().join("tokenreview.yaml");
    std::fs::write(
        &manifest,
        format!("apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: {}\n", token.trim()),
    )
    .unwrap();
    let out = ok(kubectl(&s, &cache, &["create", "-f", manifest.to_str().unwrap(), "-o", "json"]), "create -f");
    let review: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(review["status"]["authenticated"], true, "{review}");
    assert_eq!(review["status"]["user"]["username"], "system:serviceaccount:default:default");

    // kubectl's own validation of a kind without PATCH reads /openapi/v2: a misspelt field
    // is named before anything is sent.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  tokn: x\n").unwrap();
    let out = kubectl(&s, &cache, &["create", "-f", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(r#"unknown field "tokn" in io.k8s.api.authentication.v1.TokenReviewSpec"#), "{stderr}");

    let out = ok(kubectl(&s, &cache, &["explain", "pod.spec.serviceAccountName"]), "explain");
    assert!(out.contains("serviceAccountName <string>"), "{out}");
    assert!(out.contains("ServiceAccountName is the name of the ServiceAccount to use to run this pod"), "{out}");
    for kind in ["tokenreview.spec", "clusterrolebinding.roleRef", "lease.spec.holderIdentity", "node.status"] {
        ok(kubectl(&s, &cache, &["explain", kind]), kind);
    }

    // kubectl apply: created, then unchanged.
    let cm = dir.path().join("cm.yaml");
    std::fs::write(&cm, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  k: v\n").unwrap();
    assert!(ok(kubectl(&s, &cache, &["apply", "-f", cm.to_str().unwrap()]), "apply").contains("created"));
    assert!(ok(kubectl(&s, &cache, &["apply", "-f", cm.to_str().unwrap()]), "apply").contains("unchanged"));
}

/// The lines of kubectl's table output, each split into its cells.
fn table(out: &str) -> Vec<Vec<String>> {
    out.lines().map(|l| l.split_whitespace().map(str::to_owned).collect()).collect()
}

#[test]
fn kubectl_get_prints_upstreams_columns() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let cache = dir.path().join("kubectl-cache");
    post(
        &s,
        "/api/v1/nodes",
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/worker": ""}}}),
    );
    let status = r#"{"status":{"conditions":[{"type":"Ready","status":"True"}],"nodeInfo":{"kubeletVersion":"v1.34.0","osImage":"Debian","kernelVersion":"6.1","containerRuntimeVersion":"containerd://1.7","machineID":"","systemUUID":"","bootID":"","kubeProxyVersion":"","operatingSystem":"linux","architecture":"amd64"},"addresses":[{"type":"InternalIP","address":"10.0.0.1"}]}}"#;
    ok(
        kubectl(&s, &cache, &["patch", "node", "n1", "--subresource=status", "--type=merge", "-p", status]),
        "node status",
    );
    let nodes = table(&ok(kubectl(&s, &cache, &["get", "nodes"]), "get nodes"));
    assert_eq!(nodes[0], ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
    assert_eq!(
        (&nodes[1][..3], nodes[1][4].as_str()),
        (&["n1".to_owned(), "Ready".into(), "worker".into()][..], "v1.34.0")
    );

    post(
        &s,
        "/api/v1/namespaces/default/pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
               "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "example/app:1"}, {"name": "side", "image": "example/side:1"}]}}),
    );
    let pods = table(&ok(kubectl(&s, &cache, &["get", "pods"]), "get pods"));
    assert_eq!(pods[0], ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    assert_eq!(pods[1][..4], ["web", "0/2", "Pending", "0"]);
    let status = r#"{"status":{"phase":"Pending","podIPs":[{"ip":"10.1.0.7"}],"containerStatuses":[
        {"name":"app","ready":false,"restartCount":0,"image":"example/app:1","imageID":"","state":{"waiting":{"reason":"ErrImagePull"}}},
        {"name":"side","ready":true,"restartCount":3,"image":"example/side:1","imageID":"","state":{"running":{}}}]}}"#;
    ok(
        kubectl(&s, &cache, &["patch", "pod", "web", "--subresource=status", "--type=merge", "-p", status]),
        "pod status",
    );
    let wide = table(&ok(kubectl(&s, &cache, &["get", "pods", "-o", "wide"]), "get pods -o wide"));
    assert_eq!(wide[0][..7], ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]);
    assert_eq!(wide[1][..4], ["web", "1/2", "ErrImagePull", "3"]);
    assert_eq!(wide[1][5..7], ["10.1.0.7", "n1"]);

    let sas = table(&ok(kubectl(&s, &cache, &["get", "serviceaccounts"]), "get sa"));
    assert_eq!(sas[0], ["NAME", "SECRETS", "AGE"]);
    assert_eq!(sas[1][..2], ["default", "0"]);
    let bindings = table(&ok(kubectl(&s, &cache, &["get", "clusterrolebindings", "cluster-admin"]), "get crb"));
    assert_eq!(bindings[0], ["NAME", "ROLE", "AGE"]);
    assert_eq!(bindings[1][..2], ["cluster-admin", "ClusterRole/cluster-admin"]);
    let all = table(&ok(kubectl(&s, &cache, &["get", "pods", "-A"]), "get pods -A"));
    assert_eq!(all[0][..3], ["NAMESPACE", "NAME", "READY"]);
    assert_eq!(all[1][..2], ["default", "web"]);

    // kubectl get -w: each watch event's object is a one-row Table.
    let resp = streaming_client(&s.dir, Duration::from_secs(30))
        .get(format!("{}/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1", s.url))
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
        .bearer_auth(admin_token(&s.dir))
        .send()
        .unwrap();
    let events: Vec<Value> = BufReader::new(resp).lines().map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["object"]["kind"], "Table");
    assert_eq!(events[0]["object"]["rows"][0]["cells"][2], "ErrImagePull");
    assert_eq!(events[0]["object"]["rows"][0]["object"]["metadata"]["name"], "web");
}

/// Metadata-only reads, as client-go's and kube-rs' metadata informers make them: a get, a
/// list and a watch's objects as PartialObjectMetadata, no spec or data.
#[test]
fn metadata_only_reads_answer_partial_object_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    post(&s, "/api/v1/namespaces/default/configmaps", configmap("meta"));
    let read = |path: &str, accept: &str| {
        let resp = streaming_client(&s.dir, Duration::from_secs(30))
            .get(format!("{}{path}", s.url))
            .header("accept", accept)
            .bearer_auth(admin_token(&s.dir))
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        resp.text().unwrap()
    };
    let one = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
    let got: Value = serde_json::from_str(&read("/api/v1/namespaces/default/configmaps/meta", one)).unwrap();
    assert_eq!(
        (got["kind"].as_str(), got["apiVersion"].as_str()),
        (Some("PartialObjectMetadata"), Some("meta.k8s.io/v1"))
    );
    assert_eq!(got["metadata"]["name"], "meta");
    assert!(got.get("data").is_none(), "{got}");
    let many = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
    let list: Value = serde_json::from_str(&read("/api/v1/namespaces/default/configmaps", many)).unwrap();
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert!(list["metadata"]["resourceVersion"].is_string(), "{list}");
    let items = list["items"].as_array().unwrap();
    assert!(items.iter().any(|i| i["metadata"]["name"] == "meta") && items.iter().all(|i| i.get("data").is_none()));
    let watched = read("/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1", one);
    let events: Vec<Value> = watched.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(!events.is_empty());
    assert!(events.iter().all(|e| e["object"]["kind"] == "PartialObjectMetadata" && e["object"].get("data").is_none()));
    // Plain JSON first in the header: the objects themselves.
    let plain: Value =
        serde_json::from_str(&read("/api/v1/namespaces/default/configmaps/meta", "application/json")).unwrap();
    assert_eq!(plain["kind"], "ConfigMap");
}

#[test]
fn lists_page_with_limit_and_continue_consistently_for_kubectl_and_the_python_client() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    for name in ["c1", "c2", "c3", "c4", "c5"] {
        post(&s, "/api/v1/namespaces/default/configmaps", configmap(name));
    }
    let get = |path: &str| {
        let resp = client(&s.dir).get(format!("{}{path}", s.url)).bearer_auth(admin_token(&s.dir)).send().unwrap();
        (resp.status().as_u16(), resp.json::<Value>().unwrap())
    };
    // 6 with kube-root-ca.crt: pages of 2, the first telling what remains.
    let (code, first) = get("/api/v1/namespaces/default/configmaps?limit=2");
    assert_eq!(code, 200);
    assert_eq!(first["items"].as_array().unwrap().len(), 2);
    assert_eq!(first["metadata"]["remainingItemCount"], 4, "{}", first["metadata"]);
    let token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    // An object created meanwhile is not in the rest of this list: it is consistent.
    post(&s, "/api/v1/namespaces/default/configmaps", configmap("c0-late"));
    let mut names: Vec<String> =
        first["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()).collect();
    let mut next = Some(token);
    while let Some(t) = next {
        let (code, page) = get(&format!("/api/v1/namespaces/default/configmaps?limit=2&continue={t}"));
        assert_eq!(code, 200, "{page}");
        assert_eq!(page["metadata"]["resourceVersion"], first["metadata"]["resourceVersion"], "pinned");
        names.extend(
            page["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()),
        );
        next = page["metadata"]["continue"].as_str().map(str::to_owned);
        assert!(names.len() <= 6, "{names:?}");
    }
    assert_eq!(names, ["c1", "c2", "c3", "c4", "c5", "kube-root-ca.crt"]);
    // A malformed token is a 400; one whose list is not kept is upstream's 410, with a token
    // to continue inconsistently; resourceVersion with continue is a 400.
    let (code, status) = get("/api/v1/namespaces/default/configmaps?limit=2&continue=garbage");
    assert_eq!(code, 400, "{status}");
    let unknown = data_encoding::BASE64URL_NOPAD.encode(br#"{"v":"meta.k8s.io/v1","rv":1,"start":"c3"}"#);
    let (code, status) = get(&format!("/api/v1/namespaces/default/configmaps?limit=2&continue={unknown}"));
    assert_eq!((code, status["reason"].as_str()), (410, Some("Expired")), "{status}");
    let inconsistent = status["metadata"]["continue"].as_str().unwrap().to_owned();
    let (code, rest) = get(&format!("/api/v1/namespaces/default/configmaps?limit=10&continue={inconsistent}"));
    assert_eq!(code, 200);
    let rest: Vec<&str> =
        rest["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(rest, ["c3", "c4", "c5", "kube-root-ca.crt"]);
    let (code, _) = get(&format!("/api/v1/namespaces/default/configmaps?continue={unknown}&resourceVersion=5"));
    assert_eq!(code, 400);

    // kubectl --chunk-size pages through Tables
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(s.dir.join("admin.kubeconfig"))
        .arg("--cache-dir")
        .arg(s.dir.join("kube-cache"))
        .args(["get", "configmaps", "--chunk-size=2", "-o", "name"])
        .output()
        .unwrap();
    let listed = ok(out, "kubectl get --chunk-size=2");
    assert_eq!(listed.lines().count(), 7, "{listed}");
    // the Python client pages with limit/_continue
    let script = r#"
import json, sys
from kubernetes import client, config
config.load_kube_config(sys.argv[1])
v1 = client.CoreV1Api()
names, token, pages = [], None, 0
while True:
    page = v1.list_namespaced_config_map("default", limit=3, _continue=token)
    pages += 1
    names += [i.metadata.name for i in page.items]
    token = page.metadata._continue
    if not token:
        break
print(json.dumps({"pages": pages, "names": names}))
"#;
    let out = Command::new("python3")
        .args(["-c", script, s.dir.join("admin.kubeconfig").to_str().unwrap()])
        .output()
        .unwrap();
    let out: Value = serde_json::from_str(&ok(out, "python pages")).unwrap();
    assert_eq!(out["pages"], 3, "{out}");
    assert_eq!(out["names"].as_array().unwrap().len(), 7, "{out}");
}

#[test]
fn events_are_served_in_events_k8s_io_v1_and_core_v1_from_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let cache = dir.path().join("kube-cache");
    let event = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "web.1"},
        "eventTime": "2026-11-25T10:00:00.000000Z", "reportingController": "podpass.dev/scheduler",
        "reportingInstance": "scheduler-1", "action": "Binding", "reason": "Scheduled", "type": "Normal",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "default"},
        "note": "Successfully assigned default/web to n1"});
    let created = post(&s, "/apis/events.k8s.io/v1/namespaces/default/events", event);
    assert_eq!(created["apiVersion"], "events.k8s.io/v1");
    assert_eq!(created["regarding"]["name"], "web");
    assert!(created.get("involvedObject").is_none(), "{created}");

    // The same Event, read through core/v1: its fields under their core names.
    let get = |path: &str| -> Value {
        client(&s.dir).get(format!("{}{path}", s.url)).bearer_auth(admin_token(&s.dir)).send().unwrap().json().unwrap()
    };
    let core = get("/api/v1/namespaces/default/events/web.1");
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["involvedObject"]["name"], "web");
    assert_eq!(core["message"], "Successfully assigned default/web to n1");
    assert_eq!(core["reportingComponent"], "podpass.dev/scheduler");
    // A core Event read through events.k8s.io/v1, in a list.
    post(
        &s,
        "/api/v1/namespaces/default/events",
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "legacy.1"}, "reason": "Pulled",
               "message": "pulled", "type": "Normal", "count": 2, "source": {"component": "kubelet"},
               "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"}}),
    );
    let list = get("/apis/events.k8s.io/v1/namespaces/default/events");
    assert_eq!(list["kind"], "EventList");
    assert_eq!(list["apiVersion"], "events.k8s.io/v1");
    let legacy = list["items"].as_array().unwrap().iter().find(|e| e["metadata"]["name"] == "legacy.1").unwrap();
    assert_eq!(legacy["deprecatedCount"], 2);
    assert_eq!(legacy["deprecatedSource"]["component"], "kubelet");
    assert_eq!(legacy["note"], "pulled");

    // Writes through events.k8s.io are validated as upstream's: what a reporter must say.
    let resp = client(&s.dir)
        .post(format!("{}/apis/events.k8s.io/v1/namespaces/default/events", s.url))
        .bearer_auth(admin_token(&s.dir))
        .json(&json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "bad"},
                      "eventTime": "2026-11-25T10:00:00.000000Z", "type": "Info"}))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 422);
    let message = resp.json::<Value>().unwrap()["message"].as_str().unwrap().to_owned();
    assert!(message.contains("reportingController: Required value"), "{message}");
    assert!(message.contains("type: Invalid value: \"\": has invalid value: Info"), "{message}");

    // kubectl finds the group and prints the events through it; a patch is written against
    // the events.k8s.io shape, and through this group only the series may move
    // (ValidateEventUpdate), while core/v1 keeps its lenient rules.
    let out = ok(kubectl(&s, &cache, &["get", "events.v1.events.k8s.io"]), "get events.events.k8s.io");
    assert!(out.contains("Scheduled") && out.contains("pod/web"), "{out}");
    let series = r#"{"series":{"count":2,"lastObservedTime":"2026-11-25T10:05:00.000000Z"}}"#;
    ok(kubectl(&s, &cache, &["patch", "events.v1.events.k8s.io", "web.1", "--type=merge", "-p", series]), "patch");
    assert_eq!(get("/api/v1/namespaces/default/events/web.1")["series"]["count"], 2);
    let out =
        kubectl(&s, &cache, &["patch", "events.v1.events.k8s.io", "web.1", "--type=merge", "-p", r#"{"note":"new"}"#]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("message: Invalid value: \"new\": field is immutable"),
        "{stderr}"
    );
    ok(kubectl(&s, &cache, &["patch", "event", "web.1", "--type=merge", "-p", r#"{"message":"updated"}"#]), "core");
    assert_eq!(get("/api/v1/namespaces/default/events/web.1")["message"], "updated");
    // A watch through events.k8s.io sees events.k8s.io objects.
    let resp = streaming_client(&s.dir, Duration::from_secs(10))
        .get(format!("{}/apis/events.k8s.io/v1/namespaces/default/events?watch=true&timeoutSeconds=1", s.url))
        .bearer_auth(admin_token(&s.dir))
        .send()
        .unwrap();
    let lines: Vec<Value> = BufReader::new(resp).lines().map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines.iter().all(|l| l["object"]["apiVersion"] == "events.k8s.io/v1" && l["object"].get("note").is_some()));
}

/// Upstream e2e "should guarantee kube-root-ca.crt exist in any namespace" (root CA cert
/// publisher): published with its description, recreated when deleted, put back when
/// edited or emptied, and published in a new namespace.
#[test]
fn kube_root_ca_crt_is_published_and_reconciled_in_every_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let path = "/api/v1/namespaces/default/configmaps/kube-root-ca.crt";
    let ca = std::fs::read_to_string(s.dir.join("pki/ca.crt")).unwrap();
    let published = |path: &str| {
        let (code, cm) = admin_get(&s, path);
        (code == 200
            && cm["data"] == json!({"ca.crt": ca})
            && cm["metadata"]["annotations"]["kubernetes.io/description"].as_str().is_some_and(|d| !d.is_empty()))
        .then_some(cm)
    };
    let first = wait_for("kube-root-ca.crt in default", Duration::from_secs(30), || published(path));
    assert!(ca.contains("BEGIN CERTIFICATE"), "{first}");

    // deleted: created again, as a new object
    let (code, answer) = admin_request(&s, reqwest::Method::DELETE, path, None);
    assert_eq!(code, 200);
    // genericregistry `finalizeDelete` (no `ReturnDeletedObject` for ConfigMaps): a Status
    // naming what went, its resource as the kind, as the generated clients' V1Status decodes.
    assert_eq!(
        answer,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
               "details": {"name": "kube-root-ca.crt", "kind": "configmaps", "uid": first["metadata"]["uid"]}})
    );
    let again = wait_for("kube-root-ca.crt recreated", Duration::from_secs(30), || {
        published(path).filter(|cm| cm["metadata"]["uid"] != first["metadata"]["uid"])
    });

    // edited (a forged CA, an extra key, no description): put back
    let mut forged = again.clone();
    forged["data"] =
        json!({"ca.crt": "-----BEGIN CERTIFICATE-----\nforged\n-----END CERTIFICATE-----\n", "extra": "x"});
    forged["metadata"]["annotations"] = json!({});
    let (code, written) = admin_request(&s, reqwest::Method::PUT, path, Some(forged));
    assert_eq!(code, 200, "{written}");
    let rv = |cm: &Value| cm["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap();
    let after_edit = rv(&written);
    let fixed = wait_for("kube-root-ca.crt put back after an edit", Duration::from_secs(30), || {
        published(path).filter(|cm| rv(cm) > after_edit)
    });
    assert_eq!(fixed["metadata"]["uid"], again["metadata"]["uid"], "updated in place, not replaced");

    // emptied: put back
    let mut emptied = fixed.clone();
    emptied["data"] = json!({});
    let (code, written) = admin_request(&s, reqwest::Method::PUT, path, Some(emptied));
    assert_eq!(code, 200, "{written}");
    let after_empty = rv(&written);
    wait_for("kube-root-ca.crt put back after emptying", Duration::from_secs(30), || {
        published(path).filter(|cm| rv(cm) > after_empty)
    });

    // a new namespace gets one
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fresh"}});
    assert_eq!(admin_request(&s, reqwest::Method::POST, "/api/v1/namespaces", Some(ns)).0, 201);
    wait_for("kube-root-ca.crt in a new namespace", Duration::from_secs(30), || {
        published("/api/v1/namespaces/fresh/configmaps/kube-root-ca.crt")
    });
}

/// DefaultTolerationSeconds admission: a new pod tolerates not-ready and unreachable nodes
/// for 300 s unless it says otherwise, and an update that leaves them out gets them back
/// (so the pod update rule "tolerations may only be added" holds), as upstream.
#[test]
fn pods_get_upstreams_default_toleration_seconds_on_create_and_update() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let pods = "/api/v1/namespaces/default/pods";
    let pod = |name: &str, tolerations: Value| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "tolerations": tolerations}})
    };
    let default =
        |key: &str| json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300});
    let created = post(&s, pods, pod("plain", json!([])));
    assert_eq!(
        created["spec"]["tolerations"],
        json!([default("node.kubernetes.io/not-ready"), default("node.kubernetes.io/unreachable")])
    );
    let own = json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 7});
    let created = post(&s, pods, pod("own", json!([own])));
    assert_eq!(created["spec"]["tolerations"], json!([own, default("node.kubernetes.io/not-ready")]));

    // a PUT without them: re-added, so the update is not refused as removing tolerations
    // (the scheduler writes the pod's status meanwhile: a lost race is retried)
    let updated = wait_for("the PUT", Duration::from_secs(30), || {
        let (_, mut replaced) = admin_get(&s, &format!("{pods}/own"));
        replaced["spec"]["tolerations"] = json!([own]);
        let (code, updated) = admin_request(&s, reqwest::Method::PUT, &format!("{pods}/own"), Some(replaced));
        assert!(code == 200 || code == 409, "{updated}");
        (code == 200).then_some(updated)
    });
    assert_eq!(updated["spec"]["tolerations"], created["spec"]["tolerations"]);
}

/// DeleteCollection as upstream's `Store.DeleteCollection`: served for every stored kind
/// but namespaces (discovery says so), its own RBAC verb (`delete` does not grant it),
/// selectors pick what goes, dryRun deletes nothing, and the answer is the list as read;
/// the Python client's `delete_collection_namespaced_service_account` (upstream's
/// "ServiceAccount lifecycle") works.
#[test]
fn delete_collection_is_served_with_selectors_dry_run_and_its_own_verb() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dc"}});
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces", Some(ns)).0, 201);
    wait_namespace_ready(&s, "dc");
    let cms = "/api/v1/namespaces/dc/configmaps";
    for (name, app) in [("a", "x"), ("b", "x"), ("c", "y")] {
        post(
            &s,
            cms,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"app": app}}}),
        );
    }
    let names = || -> Vec<String> {
        let mut n: Vec<String> = admin_get(&s, cms).1["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
            .collect();
        n.sort();
        n
    };

    // discovery: configmaps advertise it, namespaces do not (and refuse it)
    let (_, discovery) = admin_get(&s, "/api/v1");
    let verbs = |plural: &str| -> Vec<String> {
        let r = discovery["resources"].as_array().unwrap().iter().find(|r| r["name"] == plural).unwrap();
        r["verbs"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
    };
    assert!(verbs("configmaps").contains(&"deletecollection".to_owned()));
    assert!(!verbs("namespaces").contains(&"deletecollection".to_owned()));
    assert_eq!(admin_request(&s, Method::DELETE, "/api/v1/namespaces", None).0, 405);
    assert_eq!(admin_request(&s, Method::DELETE, "/api/v1/configmaps", None).0, 405, "only in a namespace");

    // `delete` on configmaps does not grant deleting the collection
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "deleter"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["delete"]}]});
    post(&s, "/apis/rbac.authorization.k8s.io/v1/namespaces/dc/roles", role);
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "deleter"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deleter"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}]});
    post(&s, "/apis/rbac.authorization.k8s.io/v1/namespaces/dc/rolebindings", binding);
    let as_carol = client(&s.dir)
        .delete(format!("{}{cms}", s.url))
        .bearer_auth(admin_token(&s.dir))
        .header("Impersonate-User", "carol")
        .send()
        .unwrap();
    assert_eq!(as_carol.status(), 403, "{}", as_carol.text().unwrap());
    assert_eq!(names(), ["a", "b", "c", "kube-root-ca.crt"]);

    // dryRun: the answer names what would go; nothing goes
    let (code, answer) = admin_request(&s, Method::DELETE, &format!("{cms}?labelSelector=app%3Dx&dryRun=All"), None);
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["kind"], "ConfigMapList");
    assert_eq!(answer["items"].as_array().unwrap().len(), 2);
    assert_eq!(names(), ["a", "b", "c", "kube-root-ca.crt"]);
    // a field the kind cannot select is a 400 before anything is deleted
    let (code, answer) = admin_request(&s, Method::DELETE, &format!("{cms}?fieldSelector=data.k%3Dv"), None);
    assert_eq!(code, 400, "{answer}");
    assert_eq!(names(), ["a", "b", "c", "kube-root-ca.crt"]);

    // by label, then by field
    let (code, answer) = admin_request(&s, Method::DELETE, &format!("{cms}?labelSelector=app%3Dx"), None);
    assert_eq!(code, 200, "{answer}");
    let gone: Vec<&str> =
        answer["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(gone, ["a", "b"]);
    assert_eq!(names(), ["c", "kube-root-ca.crt"]);
    let (code, _) = admin_request(&s, Method::DELETE, &format!("{cms}?fieldSelector=metadata.name%3Dc"), None);
    assert_eq!(code, 200);
    assert_eq!(names(), ["kube-root-ca.crt"]);

    // the Python client, as upstream's ServiceAccount lifecycle case uses it
    for name in ["sa-1", "sa-2"] {
        post(
            &s,
            "/api/v1/namespaces/dc/serviceaccounts",
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "labels": {"e2e": "lifecycle"}}}),
        );
    }
    let script = r#"
import sys
from kubernetes import client, config
config.load_kube_config(sys.argv[1])
v1 = client.CoreV1Api()
v1.delete_collection_namespaced_service_account("dc", label_selector="e2e=lifecycle")
left = [sa.metadata.name for sa in v1.list_namespaced_service_account("dc").items]
print(",".join(sorted(left)))
"#;
    let out = Command::new("python3")
        .args(["-c", script, s.dir.join("admin.kubeconfig").to_str().unwrap()])
        .output()
        .expect("python3 with the kubernetes client (scripts/install-test-deps)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "default");
}

/// Bootstrap RBAC as kube-apiserver's: `kubectl create rolebinding --clusterrole=edit`
/// gives a tenant edit rights in that namespace (and no RBAC), `admin` adds RBAC, `view`
/// reads without secrets, and a ClusterRole labelled `aggregate-to-view` extends `view`.
#[test]
fn kubectl_create_rolebinding_with_the_bootstrap_edit_admin_and_view_roles_grants_their_rights() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let cache = dir.path().join("kubectl-cache");
    let alice = dir.path().join("alice.kubeconfig");
    std::fs::write(&alice, ok(identity_output(&s.dir, "alice", &[]), "alice kubeconfig")).unwrap();
    let as_alice = |args: &[&str]| kubectl_with(&alice, &cache, args);
    let can = |who: &str, verb: &str, what: &str| {
        let out = kubectl(&s, &cache, &["auth", "can-i", verb, what, "-n", "default", "--as", who]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(can("alice", "create", "configmaps"), "no");
    let bind = |who: &str, role: &str| {
        let (name, role_flag, user_flag) =
            (format!("{who}-{role}"), format!("--clusterrole={role}"), format!("--user={who}"));
        ok(kubectl(&s, &cache, &["create", "rolebinding", &name, &role_flag, &user_flag, "-n", "default"]), "bind");
    };

    bind("alice", "edit");
    ok(as_alice(&["create", "configmap", "made-by-alice", "-n", "default", "--from-literal=a=b"]), "alice creates");
    ok(as_alice(&["get", "secrets", "-n", "default"]), "edit reads secrets");
    assert_eq!(can("alice", "delete", "pods"), "yes");
    assert_eq!(can("alice", "create", "rolebindings"), "no", "edit grants no RBAC");
    assert_eq!(can("alice", "update", "resourcequotas"), "no");
    let out = as_alice(&["create", "configmap", "elsewhere", "-n", "kube-system", "--from-literal=a=b"]);
    assert!(!out.status.success(), "a RoleBinding is one namespace's");

    bind("carol", "admin");
    assert_eq!(can("carol", "create", "rolebindings"), "yes");
    assert_eq!(can("carol", "create", "secrets"), "yes");

    bind("dave", "view");
    assert_eq!(can("dave", "list", "configmaps"), "yes");
    assert_eq!(can("dave", "get", "secrets"), "no");
    assert_eq!(can("dave", "create", "configmaps"), "no");
    assert_eq!(can("dave", "list", "leases"), "no");
    // an admin's own role labelled aggregate-to-view extends view (the aggregation controller)
    let extra = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "leases-view", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]}]});
    post(&s, "/apis/rbac.authorization.k8s.io/v1/clusterroles", extra);
    wait_for("view aggregating leases-view, and edit view", Duration::from_secs(30), || {
        (can("dave", "list", "leases") == "yes" && can("alice", "list", "leases") == "yes").then_some(Value::Null)
    });
}

#[test]
fn the_kubernetes_service_names_the_api_server_and_is_put_back_and_cluster_info_answers() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let port: u16 = s.url.trim_end_matches('/').rsplit(':').next().unwrap().parse().unwrap();
    let path = "/api/v1/namespaces/default/services/kubernetes";
    let svc = wait_for("the kubernetes Service", Duration::from_secs(30), || {
        let (code, svc) = admin_get(&s, path);
        (code == 200).then_some(svc)
    });
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.1", "{svc}");
    assert_eq!(svc["spec"]["ports"], json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]));
    assert_eq!(svc["metadata"]["labels"], json!({"component": "apiserver", "provider": "kubernetes"}));
    let slice = wait_for("its EndpointSlice", Duration::from_secs(30), || {
        let (code, slice) = admin_get(&s, "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes");
        (code == 200).then_some(slice)
    });
    assert_eq!(slice["endpoints"][0]["addresses"], json!(["127.0.0.1"]), "{slice}");
    assert_eq!(slice["ports"][0]["port"], port);
    assert_eq!(slice["metadata"]["labels"]["kubernetes.io/service-name"], "kubernetes");
    let (code, endpoints) = admin_get(&s, "/api/v1/namespaces/default/endpoints/kubernetes");
    assert_eq!(code, 200, "{endpoints}");
    assert_eq!(endpoints["subsets"][0]["addresses"][0]["ip"], "127.0.0.1");

    // kubectl finds it, prints it as upstream, and cluster-info answers.
    let cache = dir.path().join("kube-cache");
    let out = kubectl(&s, &cache, &["get", "service", "kubernetes", "-n", "default"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows = table(&text);
    assert_eq!(rows[0], ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"], "{text}");
    assert_eq!(rows[1][..5], ["kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP"], "{text}");
    let out = kubectl(&s, &cache, &["cluster-info"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("Kubernetes control plane") && text.contains("is running at"), "{text}");

    // The serving certificate names the Service's address and names.
    let sans = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
        .arg(s.dir.join("pki/apiserver.crt"))
        .output()
        .unwrap();
    let sans = String::from_utf8_lossy(&sans.stdout);
    for name in ["IP Address:10.96.0.1", "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local"] {
        assert!(sans.contains(name), "{name} missing in {sans}");
    }

    // Deleted, it comes back; a moved port is put back.
    let (code, _) = admin_request(&s, reqwest::Method::DELETE, path, None);
    assert_eq!(code, 200);
    wait_for("the kubernetes Service recreated", Duration::from_secs(40), || {
        let (code, again) = admin_get(&s, path);
        (code == 200 && again["metadata"]["uid"] != svc["metadata"]["uid"]).then_some(again)
    });
    let (_, live) = admin_get(&s, path);
    let mut moved = live.clone();
    moved["spec"]["ports"][0]["targetPort"] = json!(1);
    let (code, written) = admin_request(&s, reqwest::Method::PUT, path, Some(moved));
    assert_eq!(code, 200, "{written}");
    wait_for("the kubernetes Service's port put back", Duration::from_secs(40), || {
        let (_, now) = admin_get(&s, path);
        (now["spec"]["ports"][0]["targetPort"] == port).then_some(now)
    });
    // Its cluster IP is fixed once set.
    let mut readdressed = live;
    readdressed["spec"]["clusterIP"] = json!("10.96.0.2");
    readdressed["metadata"]["resourceVersion"] = Value::Null;
    let (code, status) = admin_request(&s, reqwest::Method::PUT, path, Some(readdressed));
    assert_eq!(code, 422, "{status}");
}

/// PodGC (`gcOrphaned`): a pod bound to a node that goes away is never removed by the API
/// server itself; the controller manager's pod garbage collector, once the node has been
/// gone for its 40 s quarantine, marks it `Failed` with `DisruptionTarget`
/// (`DeletionByPodGC`) and force-deletes it.
#[test]
fn the_pods_of_a_deleted_node_are_failed_and_removed_by_pod_gc() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    post(&s, "/api/v1/nodes", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gone"}}));
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stranded"},
        "spec": {"nodeName": "gone", "automountServiceAccountToken": false,
                 "containers": [{"name": "c", "image": "registry.example/app"}]}});
    let created = post(&s, "/api/v1/namespaces/default/pods", pod);
    let rv = created["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let (code, _) = admin_request(&s, reqwest::Method::DELETE, "/api/v1/nodes/gone", None);
    assert_eq!(code, 200);
    // Every change of the pod from its creation on, until it is deleted (3 minutes at most).
    let url = format!(
        "{}/api/v1/namespaces/default/pods?watch=true&fieldSelector=metadata.name%3Dstranded&resourceVersion={rv}",
        s.url
    );
    let resp =
        streaming_client(&s.dir, Duration::from_secs(180)).get(url).bearer_auth(admin_token(&s.dir)).send().unwrap();
    assert_eq!(resp.status(), 200);
    let mut failed_first = None;
    for line in BufReader::new(resp).lines() {
        let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
        let pod = &event["object"];
        if event["type"] == "MODIFIED" && pod["status"]["phase"] == "Failed" {
            failed_first = pod["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "DisruptionTarget").cloned());
        }
        if event["type"] == "DELETED" {
            break;
        }
    }
    let condition = failed_first.expect("marked Failed with DisruptionTarget before it was removed");
    assert_eq!(condition["reason"], "DeletionByPodGC");
    assert_eq!(condition["message"], "PodGC: node no longer exists");
    assert_eq!(admin_get(&s, "/api/v1/namespaces/default/pods/stranded").0, 404);
}

/// CertificateSigningRequests as upstream serves them: the server records who asked, the
/// body's claim notwithstanding; `kubectl get csr` prints upstream's columns; `kubectl
/// certificate approve` writes through `/approval` (a requester may not), `/status` cannot
/// take an approval back, and a request that is no CSR is refused naming the field.
#[test]
fn certificate_signing_requests_record_their_requester_and_are_approved_through_approval() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    let (key, pem) = (d.join("k.pem"), d.join("csr.pem"));
    let openssl = Command::new("openssl")
        .args(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-subj", "/O=system:nodes/CN=system:node:n1", "-keyout", key.to_str().unwrap(), "-out"])
        .arg(&pem)
        .output()
        .unwrap();
    assert!(openssl.status.success(), "{openssl:?}");
    let request = data_encoding::BASE64.encode(&std::fs::read(&pem).unwrap());
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "bob-bootstraps"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-bootstrapper"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]});
    post(&s, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding);
    let bob = d.join("bob.kubeconfig");
    std::fs::write(&bob, ok(identity_output(d, "bob", &["joiners"]), "bob")).unwrap();
    let as_bob = |args: &[&str]| kubectl_with(&bob, &d.join("cache-bob"), args);
    let csr = |request: &str| {
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": "n1"},
               "spec": {"request": request, "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                        "usages": ["digital signature", "client auth"], "expirationSeconds": 3600,
                        "username": "admin", "groups": ["system:masters"]}})
    };
    let file = d.join("csr.json");
    let not_a_csr = data_encoding::BASE64.encode(b"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n");
    std::fs::write(&file, csr(&not_a_csr).to_string()).unwrap();
    let refused = as_bob(&["create", "-f", file.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("spec.request: Invalid value: PEM block type must be CERTIFICATE REQUEST"),
        "{refused:?}"
    );
    std::fs::write(&file, csr(&request).to_string()).unwrap();
    ok(as_bob(&["create", "-f", file.to_str().unwrap()]), "bob's request");
    let (_, stored) = admin_get(&s, "/apis/certificates.k8s.io/v1/certificatesigningrequests/n1");
    assert_eq!(stored["spec"]["username"], "bob", "the server says who asked: {stored}");
    assert_eq!(stored["spec"]["groups"], json!(["joiners", "system:authenticated"]));
    let table = ok(admin_kubectl(d, &["get", "csr"]), "get csr");
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[2..], ["kubernetes.io/kube-apiserver-client-kubelet", "bob", "60m", "Pending"], "{table}");

    let denied = as_bob(&["certificate", "approve", "n1"]);
    assert!(!denied.status.success(), "a requester approved its own request");
    assert_eq!(
        ok(admin_kubectl(d, &["certificate", "approve", "n1"]), "approve").trim(),
        "certificatesigningrequest.certificates.k8s.io/n1 approved"
    );
    let csr_path = "/apis/certificates.k8s.io/v1/certificatesigningrequests/n1";
    let (_, approved) = admin_get(&s, csr_path);
    let condition = &approved["status"]["conditions"][0];
    assert_eq!((condition["type"].as_str(), condition["reason"].as_str()), (Some("Approved"), Some("KubectlApprove")));
    assert!(condition["lastTransitionTime"].is_string(), "{approved}");
    // The controller manager's signer issues it under the cluster CA, for the hour asked.
    let issued = wait_for("n1's certificate", Duration::from_secs(60), || {
        let (_, csr) = admin_get(&s, csr_path);
        csr["status"]["certificate"].is_string().then_some(csr)
    });
    let subject = certificate_text(d, &issued);
    assert!(subject.contains("CN = system:node:n1") && subject.contains("O = system:nodes"), "{subject}");
    assert!(
        ok(admin_kubectl(d, &["get", "csr", "n1"]), "get").lines().nth(1).unwrap().ends_with("Approved,Issued"),
        "the table shows the approval and the certificate"
    );
    // `/status` keeps the approval whatever it is sent; the spec never changes; the
    // certificate, once issued, is never replaced.
    let path = "/apis/certificates.k8s.io/v1/certificatesigningrequests/n1/status";
    let mut cleared = issued.clone();
    cleared["status"]["conditions"] = json!([]);
    cleared["spec"]["signerName"] = json!("example.com/other");
    let (code, after) = admin_request(&s, reqwest::Method::PUT, path, Some(cleared));
    assert_eq!(code, 200, "{after}");
    assert_eq!(after["status"]["conditions"][0]["type"], "Approved", "{after}");
    assert_eq!(after["spec"]["signerName"], "kubernetes.io/kube-apiserver-client-kubelet");
    let mut replaced = after.clone();
    replaced["status"]["certificate"] = json!(data_encoding::BASE64.encode(b"not the one issued"));
    let (code, refused) = admin_request(&s, reqwest::Method::PUT, path, Some(replaced));
    assert_eq!(code, 422, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("status.certificate: Forbidden: updates may not modify existing certificate content"),
        "{refused}"
    );

    // Allowed `nodeclient`, bob's next kubelet client request is approved by the controller
    // manager's approver after a SubjectAccessReview, and issued.
    let nodeclient = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "bob-nodeclient"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:certificates.k8s.io:certificatesigningrequests:nodeclient"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]});
    post(&s, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", nodeclient);
    let mut second = csr(&request);
    second["metadata"]["name"] = json!("n2");
    std::fs::write(&file, second.to_string()).unwrap();
    ok(as_bob(&["create", "-f", file.to_str().unwrap()]), "bob's second request");
    let auto = wait_for("n2 approved by the approver and issued", Duration::from_secs(60), || {
        let (_, csr) = admin_get(&s, "/apis/certificates.k8s.io/v1/certificatesigningrequests/n2");
        csr["status"]["certificate"].is_string().then_some(csr)
    });
    let condition = &auto["status"]["conditions"][0];
    assert_eq!(condition["reason"], "AutoApproved", "{auto}");
    assert_eq!(condition["message"], "Auto approving kubelet client certificate after SubjectAccessReview.");

    // CertificateApproval: writing `/approval` is not enough, the signer's `approve` is
    // needed (its name, or its domain's `*`).
    let approver = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "csr-approver"},
        "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["get", "list"]},
                  {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval"], "verbs": ["update"]}]});
    post(&s, "/apis/rbac.authorization.k8s.io/v1/clusterroles", approver);
    let carol_binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "carol-approves"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "csr-approver"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}]});
    post(&s, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", carol_binding);
    let carol = d.join("carol.kubeconfig");
    std::fs::write(&carol, ok(identity_output(d, "carol", &[]), "carol")).unwrap();
    let mut mine = csr(&request);
    mine["metadata"]["name"] = json!("mine");
    mine["spec"]["signerName"] = json!("example.com/mine");
    post(&s, "/apis/certificates.k8s.io/v1/certificatesigningrequests", mine);
    let refused = kubectl_with(&carol, &d.join("cache-carol"), &["certificate", "approve", "mine"]);
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains(r#"user not permitted to approve requests with signerName "example.com/mine""#),
        "{refused:?}"
    );
    let signers = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "example-signers"},
        "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "verbs": ["approve"],
                   "resourceNames": ["example.com/*"]}]});
    post(&s, "/apis/rbac.authorization.k8s.io/v1/clusterroles", signers);
    let signers_binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "carol-example-signers"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "example-signers"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}]});
    post(&s, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", signers_binding);
    ok(kubectl_with(&carol, &d.join("cache-carol"), &["certificate", "approve", "mine"]), "approved by the domain's *");

    // CertificateSubjectRestriction: no system:masters from the API server's client signer.
    let masters = d.join("masters.pem");
    let openssl = Command::new("openssl")
        .args(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-subj", "/O=system:masters/CN=mallory", "-keyout", key.to_str().unwrap(), "-out"])
        .arg(&masters)
        .output()
        .unwrap();
    assert!(openssl.status.success(), "{openssl:?}");
    let mut root = csr(&data_encoding::BASE64.encode(&std::fs::read(&masters).unwrap()));
    root["metadata"]["name"] = json!("root");
    root["spec"]["signerName"] = json!("kubernetes.io/kube-apiserver-client");
    let (code, answer) =
        admin_request(&s, reqwest::Method::POST, "/apis/certificates.k8s.io/v1/certificatesigningrequests", Some(root));
    assert_eq!(code, 403, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"),
        "{answer}"
    );
}

/// The subject and issuer of a CSR's issued certificate, as openssl prints them.
fn certificate_text(d: &Path, csr: &Value) -> String {
    let pem = data_encoding::BASE64.decode(csr["status"]["certificate"].as_str().unwrap().as_bytes()).unwrap();
    let file = d.join("issued.pem");
    std::fs::write(&file, pem).unwrap();
    let out =
        Command::new("openssl").args(["x509", "-noout", "-subject", "-issuer", "-in"]).arg(&file).output().unwrap();
    ok(out, "openssl x509")
}
