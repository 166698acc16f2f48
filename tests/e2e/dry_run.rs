//! End-to-end: `dryRun=All` persists nothing — through the real kubectl (`--dry-run=server`
//! for create, apply, label and delete, `kubectl diff`) and raw requests — while it still
//! runs validation, admission and preconditions; other values are refused as upstream.

// Test helpers panic on failure by design; the lint targets library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

mod support;
use support::*;

#[test]
fn dry_runs_answer_what_would_result_and_persist_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    ok(admin_kubectl(d, &["create", "namespace", "team"]), "create namespace");
    wait_namespace_ready(&s, "team");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "team"},
                    "data": {"mode": "blue"}});
    assert_eq!(admin_request(&s, reqwest::Method::POST, "/api/v1/namespaces/team/configmaps", Some(cm)).0, 201);
    let rv = admin_get(&s, "/api/v1/namespaces/team/configmaps/settings").1["metadata"]["resourceVersion"].clone();

    // create: kubectl apply --dry-run=server of a new object, and a raw POST
    let manifest = d.join("new.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fresh\n  namespace: team\ndata:\n  a: b\n",
    )
    .unwrap();
    let out = ok(admin_kubectl(d, &["apply", "--dry-run=server", "-f", manifest.to_str().unwrap()]), "apply dry run");
    assert!(out.contains("(server dry run)"), "{out}");
    let posted = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fresh2"}});
    let (code, answer) =
        admin_request(&s, reqwest::Method::POST, "/api/v1/namespaces/team/configmaps?dryRun=All", Some(posted));
    assert_eq!(code, 201, "{answer}");
    assert!(answer["metadata"]["uid"].is_string() && answer["metadata"]["creationTimestamp"].is_string(), "{answer}");
    for name in ["fresh", "fresh2"] {
        assert_eq!(admin_get(&s, &format!("/api/v1/namespaces/team/configmaps/{name}")).0, 404, "{name} was created");
    }
    // ... and a pod is not created either (no node would ever see it)
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                     "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}});
    let (code, answer) = admin_request(&s, reqwest::Method::POST, "/api/v1/namespaces/team/pods?dryRun=All", Some(pod));
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["spec"]["serviceAccountName"], "default", "defaulting and admission ran");
    assert_eq!(admin_get(&s, "/api/v1/namespaces/team/pods/web").0, 404);

    // update/patch: kubectl label --dry-run=server, kubectl diff (a dry-run patch)
    let out = ok(
        admin_kubectl(d, &["-n", "team", "label", "configmap", "settings", "tier=gold", "--dry-run=server"]),
        "label",
    );
    assert!(out.contains("(server dry run)"), "{out}");
    let changed = d.join("changed.yaml");
    std::fs::write(
        &changed,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: team\ndata:\n  mode: green\n",
    )
    .unwrap();
    let diff = admin_kubectl(d, &["diff", "-f", changed.to_str().unwrap()]);
    assert_eq!(diff.status.code(), Some(1), "kubectl diff found the change: {diff:?}");
    assert!(String::from_utf8_lossy(&diff.stdout).contains("green"), "{diff:?}");
    let (_, now) = admin_get(&s, "/api/v1/namespaces/team/configmaps/settings");
    assert_eq!(now["data"]["mode"], "blue", "diff applied the change");
    assert!(now["metadata"]["labels"]["tier"].is_null(), "label --dry-run=server labelled");
    assert_eq!(now["metadata"]["resourceVersion"], rv, "nothing was written");
    // a dry-run update still checks its precondition
    let mut stale = now.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    let (code, _) =
        admin_request(&s, reqwest::Method::PUT, "/api/v1/namespaces/team/configmaps/settings?dryRun=All", Some(stale));
    assert_eq!(code, 409);

    // delete: kubectl delete --dry-run=server, a raw DELETE, and a namespace
    let out = ok(admin_kubectl(d, &["-n", "team", "delete", "configmap", "settings", "--dry-run=server"]), "delete");
    assert!(out.contains("(server dry run)"), "{out}");
    let (code, answer) =
        admin_request(&s, reqwest::Method::DELETE, "/api/v1/namespaces/team/configmaps/settings?dryRun=All", None);
    assert_eq!(code, 200, "{answer}");
    ok(admin_kubectl(d, &["delete", "namespace", "team", "--dry-run=server"]), "delete namespace");
    assert_eq!(admin_get(&s, "/api/v1/namespaces/team/configmaps/settings").1["metadata"]["resourceVersion"], rv);
    let (_, ns) = admin_get(&s, "/api/v1/namespaces/team");
    assert_eq!(ns["status"]["phase"], "Active", "{ns}");
    assert!(ns["metadata"]["deletionTimestamp"].is_null(), "{ns}");

    // validation and admission still run: an invalid object is refused, not "created"
    let bad = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_A_Name"}});
    assert_eq!(
        admin_request(&s, reqwest::Method::POST, "/api/v1/namespaces/team/configmaps?dryRun=All", Some(bad)).0,
        422
    );
    // ... and an existing object is still a conflict
    let again = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}});
    assert_eq!(
        admin_request(&s, reqwest::Method::POST, "/api/v1/namespaces/team/configmaps?dryRun=All", Some(again)).0,
        409
    );

    // upstream refuses any other value (422 naming the options), before anything runs
    let (code, status) =
        admin_request(&s, reqwest::Method::DELETE, "/api/v1/namespaces/team/configmaps/settings?dryRun=Yes", None);
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "DeleteOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Yes\"}: supported values: \"All\""
    );
    assert_eq!(admin_get(&s, "/api/v1/namespaces/team/configmaps/settings").0, 200);
}

#[test]
fn a_dry_run_token_request_is_checked_but_signs_counts_and_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    ok(admin_kubectl(d, &["create", "namespace", "team"]), "create namespace");
    wait_namespace_ready(&s, "team");
    ok(admin_kubectl(d, &["-n", "team", "create", "serviceaccount", "builder"]), "create sa");
    let issued = || -> u64 {
        let text =
            client(d).get(format!("{}/metrics", s.url)).bearer_auth(admin_token(d)).send().unwrap().text().unwrap();
        text.lines()
            .find(|l| l.starts_with("serviceaccount_bound_tokens_issued_with_identifier"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    };
    let path = "/api/v1/namespaces/team/serviceaccounts/builder/token";
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": ["registry.example"], "expirationSeconds": 600}});
    let before = issued();
    let (code, answer) = admin_request(&s, reqwest::Method::POST, &format!("{path}?dryRun=All"), Some(body.clone()));
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["status"]["token"], "", "a dry run answers no token: {answer}");
    assert_eq!(answer["spec"]["audiences"], json!(["registry.example"]), "{answer}");
    assert_eq!(issued(), before, "a dry run is not counted as issued");
    // Checked as a real request: a missing service account is still a 404.
    let (code, _) = admin_request(
        &s,
        reqwest::Method::POST,
        "/api/v1/namespaces/team/serviceaccounts/nobody/token?dryRun=All",
        Some(body.clone()),
    );
    assert_eq!(code, 404);
    // The real one is signed and counted.
    let (code, answer) = admin_request(&s, reqwest::Method::POST, path, Some(body));
    assert_eq!(code, 201, "{answer}");
    assert!(answer["status"]["token"].as_str().unwrap().starts_with("eyJ"), "{answer}");
    assert_eq!(issued(), before + 1);
}
