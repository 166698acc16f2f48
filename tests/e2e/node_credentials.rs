//! End-to-end: `podpass node check-config` and `podpass node credentials` against a real
//! `podpass apiserver`, running real plugin processes that receive a token bound to the pod.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use data_encoding::{BASE64, BASE64URL_NOPAD};
use serde_json::{Value, json};
use support::*;

/// Logs each request (image, token, annotations) and answers for `*.registry.example` with
/// a password derived from the token; `ECHO_TOKEN=1` makes it return the token itself.
const SA_PLUGIN: &str = r#"#!/usr/bin/env python3
import hashlib, json, os, sys
req = json.load(sys.stdin)
with open(os.environ["RUN_LOG"], "a") as f:
    f.write(json.dumps(req) + "\n")
tok = req.get("serviceAccountToken", "")
password = tok if os.environ.get("ECHO_TOKEN") else "derived-" + hashlib.sha256(tok.encode()).hexdigest()[:12]
print(json.dumps({"kind": "CredentialProviderResponse", "apiVersion": req["apiVersion"],
                  "cacheKeyType": "Registry",
                  "auth": {"*.registry.example": {"username": "sa-user", "password": password}}}))
"#;

fn config(dir: &Path, echo_token: bool) -> std::path::PathBuf {
    config_with(dir, echo_token, "ServiceAccount")
}

fn config_with(dir: &Path, echo_token: bool, cache_type: &str) -> std::path::PathBuf {
    let log = dir.join("runs.log");
    let env = if echo_token { "\n      - name: ECHO_TOKEN\n        value: \"1\"" } else { "" };
    let text = format!(
        r#"apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: sa-plugin
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    matchImages: ["*.registry.example"]
    defaultCacheDuration: 10m
    env:
      - name: RUN_LOG
        value: {log}{env}
    tokenAttributes:
      serviceAccountTokenAudience: registry.example
      cacheType: {cache_type}
      requireServiceAccount: true
      requiredServiceAccountAnnotationKeys: ["example.com/role"]
      optionalServiceAccountAnnotationKeys: ["example.com/team"]
"#,
        log = log.display()
    );
    let path = dir.join(format!("config-{echo_token}-{cache_type}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn post(s: &Server, path: &str, body: Value) -> Value {
    let resp =
        client(&s.dir).post(format!("{}{path}", s.url)).bearer_auth(admin_token(&s.dir)).json(&body).send().unwrap();
    assert!(resp.status().is_success(), "POST {path}: {}", resp.text().unwrap());
    resp.json().unwrap()
}

fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&BASE64URL_NOPAD.decode(payload.as_bytes()).unwrap()).unwrap()
}

#[test]
fn check_config_prints_the_hash_or_the_kubelets_errors() {
    let dir = tempfile::tempdir().unwrap();
    let good = config(dir.path(), false);
    let out = Command::new(PODPASS)
        .args(["node", "check-config", "--image-credential-provider-config", good.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = ok(out, "check-config");
    assert!(stdout.starts_with("ok sha256:") && stdout.trim().len() == "ok sha256:".len() + 64, "{stdout}");
    let out = Command::new(PODPASS)
        .args(["node", "check-config", "--image-credential-provider-config", good.to_str().unwrap()])
        .args(["--feature-gates", "KubeletServiceAccountTokenForCredentialProviders=false"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "failed to validate credential provider config: providers.tokenAttributes: Forbidden: tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled"
    );
}

#[test]
fn pods_get_credentials_from_plugins_fed_their_own_token() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let s = start(&data, &[]);
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("sa-plugin"), SA_PLUGIN).unwrap();
    std::fs::set_permissions(bin.join("sa-plugin"), std::fs::Permissions::from_mode(0o755)).unwrap();

    post(&s, "/api/v1/namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}));
    wait_namespace_ready(&s, "team");
    let sa = post(
        &s,
        "/api/v1/namespaces/team/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder",
               "annotations": {"example.com/role": "puller", "example.com/team": "a", "unrelated": "x"}}}),
    );
    post(
        &s,
        "/api/v1/namespaces/team/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "plain"}}),
    );
    let dockerconfig = BASE64.encode(br#"{"auths":{"other.example":{"username":"secret-user","password":"s"}}}"#);
    let secret = post(
        &s,
        "/api/v1/namespaces/team/secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "regcred"},
               "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": dockerconfig}}),
    );
    let pod = |name: &str, sa: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
               "spec": {"serviceAccountName": sa, "nodeName": "n1", "imagePullSecrets": [{"name": "regcred"}],
                        "containers": [{"name": "app", "image": "a.registry.example/app:1"}]}})
    };
    let web = post(&s, "/api/v1/namespaces/team/pods", pod("web", "builder"));
    post(&s, "/api/v1/namespaces/team/pods", pod("plain-pod", "plain"));

    let cfg = config(dir.path(), false);
    // The agent runs as the node the pods are scheduled on, as a kubelet does.
    let out = Command::new(PODPASS)
        .args(["apiserver", "kubeconfig", "--data-dir", data.to_str().unwrap()])
        .args(["--user", "system:node:n1", "--group", "system:nodes"])
        .output()
        .unwrap();
    let kubeconfig = dir.path().join("n1.kubeconfig");
    std::fs::write(&kubeconfig, ok(out, "node kubeconfig")).unwrap();
    let run = |cfg: &Path, pods: &[&str], images: &[&str]| -> Value {
        let mut cmd = Command::new(PODPASS);
        cmd.args(["node", "credentials", "--image-credential-provider-config", cfg.to_str().unwrap()])
            .args(["--image-credential-provider-bin-dir", bin.to_str().unwrap()])
            .args(["--kubeconfig", kubeconfig.to_str().unwrap()]);
        for p in pods {
            cmd.args(["--pod", p]);
        }
        let out = cmd.args(images).output().unwrap();
        serde_json::from_str(&ok(out, "node credentials")).unwrap()
    };
    // No pod volume names the provider's audience and no RBAC grant allows it: the token
    // request is refused (NodeRestriction), and the report carries the API's message.
    let refused = run(&cfg, &["team/web"], &["a.registry.example/app:1"]);
    let reason = refused["lookups"][0]["providers"][0]["skipReason"].as_str().unwrap();
    assert!(
        reason.starts_with(r#"token request refused: failed to fetch token: serviceaccounts "builder" is forbidden: audience "registry.example" not found in pod spec volume, system:node:n1 is not authorized to request tokens for this audience"#),
        "{reason}"
    );
    assert_eq!(refused["execs"]["sa-plugin"], 0);
    // The admin allows nodes to request tokens for the registry's audience.
    post(
        &s,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "registry-audience"},
               "rules": [{"verbs": ["request-serviceaccounts-token-audience"], "apiGroups": [""], "resources": ["registry.example"]}]}),
    );
    post(
        &s,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "nodes-registry-audience"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "registry-audience"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]}),
    );
    let got = run(
        &cfg,
        &["team/web", "team/plain-pod"],
        &["a.registry.example/app:1", "a.registry.example/app:2", "other.example/x"],
    );
    let lookups = got["lookups"].as_array().unwrap();
    assert_eq!(lookups.len(), 6);

    // web, first image: the plugin ran with web's token; the credential is tracked to the SA
    let first = &lookups[0];
    assert_eq!(first["pod"], "team/web");
    let report = &first["providers"][0];
    assert_eq!(
        (report["matched"].clone(), report["ran"].clone(), report["cacheHit"].clone()),
        (json!(true), json!(true), json!(false))
    );
    assert_eq!(report["serviceAccount"], "team/builder");
    assert_eq!(report["cacheKeyType"], "Registry");
    // The credential id of the token the plugin was given, as the API server's audit names it.
    assert!(report["credentialId"].as_str().is_some_and(|c| c.starts_with("JTI=")), "{report}");
    let cred = &first["credentials"][0];
    assert_eq!(cred["username"], "sa-user");
    assert_eq!(cred["password"], "<redacted>");
    assert_eq!(
        cred["source"],
        json!({"type": "serviceAccount", "namespace": "team", "name": "builder", "uid": sa["metadata"]["uid"],
               "credentialId": report["credentialId"]})
    );
    // second image of the same registry: served from the Registry-keyed cache
    assert_eq!(lookups[1]["providers"][0]["cacheHit"], true);
    assert_eq!(lookups[1]["providers"][0]["ran"], false);
    // other.example: only the pod's pull secret, tracked to the secret
    assert_eq!(lookups[2]["providers"][0]["matched"], false);
    assert_eq!(
        lookups[2]["credentials"],
        json!([{"username": "secret-user", "password": "<redacted>",
                "source": {"type": "secret", "namespace": "team", "name": "regcred", "uid": secret["metadata"]["uid"]}}])
    );
    // the pod whose service account lacks the required annotation: skipped, and says why
    assert_eq!(lookups[3]["pod"], "team/plain-pod");
    assert_eq!(lookups[3]["providers"][0]["skipReason"], "required annotation example.com/role not found");
    assert_eq!(lookups[3]["providers"][0]["ran"], false);
    assert!(lookups[3]["credentials"].as_array().unwrap().is_empty());
    assert_eq!(got["execs"]["sa-plugin"], 1);

    // what the plugin received: a token bound to web for the provider's audience, and only
    // the opted-in annotations
    let log = std::fs::read_to_string(dir.path().join("runs.log")).unwrap();
    let requests: Vec<Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0]["serviceAccountAnnotations"],
        json!({"example.com/role": "puller", "example.com/team": "a"})
    );
    let c = claims(requests[0]["serviceAccountToken"].as_str().unwrap());
    assert_eq!(c["aud"], json!(["registry.example"]));
    assert_eq!(c["kubernetes.io"]["pod"]["name"], "web");
    assert_eq!(c["kubernetes.io"]["pod"]["uid"], web["metadata"]["uid"]);
    assert_eq!(c["kubernetes.io"]["serviceaccount"]["name"], "builder");
    assert_eq!(c["kubernetes.io"]["node"]["name"], "n1");

    // cacheType ServiceAccount: another pod of the same service account hits the cache (pod
    // identity is not in the key); cacheType Token: each pod's token is its own key
    post(&s, "/api/v1/namespaces/team/pods", pod("web2", "builder"));
    let got = run(&cfg, &["team/web", "team/web2"], &["a.registry.example/app:1"]);
    assert_eq!(got["lookups"][1]["providers"][0]["cacheHit"], true);
    assert_eq!(got["execs"]["sa-plugin"], 1);
    let per_token = config_with(dir.path(), false, "Token");
    let got = run(&per_token, &["team/web", "team/web2", "team/web"], &["a.registry.example/app:1"]);
    let ran: Vec<_> = (0..3).map(|i| got["lookups"][i]["providers"][0]["ran"].clone()).collect();
    assert_eq!(ran, [json!(true), json!(true), json!(false)], "the token manager reuses web's token: a cache hit");
    assert_eq!(got["execs"]["sa-plugin"], 2);

    // a plugin echoing the token back as the password is refused under cacheType ServiceAccount
    let echo = config(dir.path(), true);
    let got = run(&echo, &["team/web"], &["a.registry.example/app:1"]);
    let reason = got["lookups"][0]["providers"][0]["skipReason"].as_str().unwrap();
    assert!(reason.contains("returned the service account token as the password"), "{reason}");
    assert!(got["lookups"][0]["credentials"].as_array().unwrap().is_empty());

    // A service account that has not opted in (plain lacks example.com/role), under each
    // --credential-provider-fallback, with node-wide credentials for the registry.
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(
        root.join("config.json"),
        r#"{"auths":{"a.registry.example":{"username":"node-user","password":"n"}}}"#,
    )
    .unwrap();
    let fallback = |mode: &str| {
        let out = Command::new(PODPASS)
            .args(["node", "credentials", "--image-credential-provider-config", cfg.to_str().unwrap()])
            .args(["--image-credential-provider-bin-dir", bin.to_str().unwrap()])
            .args(["--kubeconfig", kubeconfig.to_str().unwrap(), "--root-dir", root.to_str().unwrap()])
            .args(["--credential-provider-fallback", &format!("sa-plugin={mode}")])
            .args(["--pod", "team/plain-pod", "a.registry.example/app:1"])
            .output()
            .unwrap();
        let got: Value = serde_json::from_str(&ok(out, "node credentials")).unwrap();
        got["lookups"][0].clone()
    };
    let users = |l: &Value| -> Vec<(String, String)> {
        l["credentials"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["username"].as_str().unwrap().to_owned(), c["source"]["type"].as_str().unwrap().to_owned()))
            .collect()
    };
    // skip (the kubelet's): the node's own credentials stand in, silently.
    let skip = fallback("skip");
    assert_eq!(users(&skip), [("node-user".to_owned(), "nodeWide".to_owned())]);
    assert!(skip["providers"][0].get("fallback").is_none());
    // anonymous: nothing of the node's.
    let anonymous = fallback("anonymous");
    assert_eq!(anonymous["providers"][0]["fallback"], "anonymous");
    assert!(users(&anonymous).is_empty(), "{anonymous}");
    // node: the plugin runs as for the node, with no token, its answer node-wide.
    let node = fallback("node");
    assert_eq!((&node["providers"][0]["fallback"], &node["providers"][0]["ran"]), (&json!("node"), &json!(true)));
    assert_eq!(users(&node)[0], ("sa-user".to_owned(), "nodeWide".to_owned()));
    let log = std::fs::read_to_string(dir.path().join("runs.log")).unwrap();
    let last: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert!(last.get("serviceAccountToken").is_none_or(|t| t == ""), "{last}");
    // fail: the pull is refused, saying why.
    let fail = fallback("fail");
    assert_eq!(
        fail["refusal"],
        "credential provider sa-plugin: required annotation example.com/role not found (its fallback is fail)"
    );
    // A fallback for a provider the config does not have is an error naming the flag.
    let out = Command::new(PODPASS)
        .args(["node", "credentials", "--image-credential-provider-config", cfg.to_str().unwrap()])
        .args(["--image-credential-provider-bin-dir", bin.to_str().unwrap()])
        .args(["--credential-provider-fallback", "ecr=fail", "a.registry.example/app:1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--credential-provider-fallback names no provider of the config: ecr"), "{err}");
}

#[test]
fn registration_fails_like_the_kubelet() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), false);
    let out = Command::new(PODPASS)
        .args(["node", "credentials", "--image-credential-provider-config", cfg.to_str().unwrap()])
        .args(["--image-credential-provider-bin-dir", "/nonexistent-bin", "x.registry.example/a"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("plugin binary directory /nonexistent-bin did not exist"));
    let out = Command::new(PODPASS)
        .args(["node", "credentials", "--image-credential-provider-config", cfg.to_str().unwrap()])
        .args(["--image-credential-provider-bin-dir", dir.path().to_str().unwrap(), "x.registry.example/a"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("plugin binary executable {}/sa-plugin did not exist", dir.path().display())),
        "{stderr}"
    );
}

#[test]
fn bench_credentials_runs() {
    let out = Command::new(PODPASS)
        .args(["bench", "credentials", "--execs", "3", "--hits", "100", "--concurrent", "20"])
        .output()
        .unwrap();
    let stdout = ok(out, "bench credentials");
    assert!(stdout.contains("bare spawn+wait"), "{stdout}");
    assert!(stdout.contains("cache hit: mean"), "{stdout}");
    assert!(stdout.contains("20 concurrent identical lookups: 1 exec(s), 20 answered"), "{stdout}");
}
