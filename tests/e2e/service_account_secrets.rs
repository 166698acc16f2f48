//! End-to-end: service-account token Secrets, as upstream's tokens controller runs them —
//! filled within seconds with a legacy token, the CA and the namespace; the token
//! authenticates (kubectl, TokenReview) while its Secret holds it, its last use is labelled;
//! a Secret for a missing or replaced account, and an account's Secrets when it is deleted,
//! are removed.

// Test helpers panic on failure by design; the lint targets library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;
use support::*;

/// Polls `path` (every 50 ms, 15 s at most) until `done` holds for its answer.
fn wait_for(s: &Server, path: &str, what: &str, done: impl Fn(u16, &Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (code, body) = admin_get(s, path);
        if done(code, &body) {
            return body;
        }
        assert!(Instant::now() < deadline, "{what}: still {code} {body}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn token_secret(name: &str, account: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
           "metadata": {"name": name, "annotations": {"kubernetes.io/service-account.name": account}}})
}

fn review(s: &Server, token: &str) -> Value {
    review_for(s, token, &[])
}

/// A TokenReview for `audiences`. Authentications are cached for 10 s per token and
/// audiences (upstream's TokenSuccessCacheTTL): naming the API audience explicitly is a
/// fresh review of a token already reviewed without.
fn review_for(s: &Server, token: &str, audiences: &[&str]) -> Value {
    let mut spec = json!({"token": token});
    if !audiences.is_empty() {
        spec["audiences"] = json!(audiences);
    }
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec});
    admin_request(s, reqwest::Method::POST, "/apis/authentication.k8s.io/v1/tokenreviews", Some(body)).1["status"]
        .clone()
}

fn decoded(secret: &Value, key: &str) -> String {
    let b64 = secret["data"][key].as_str().unwrap_or_default();
    String::from_utf8(data_encoding::BASE64.decode(b64.as_bytes()).unwrap()).unwrap()
}

#[test]
fn token_secrets_are_filled_authenticate_while_held_and_go_with_their_account() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    ok(admin_kubectl(d, &["create", "namespace", "team"]), "create namespace");
    wait_namespace_ready(&s, "team");
    ok(admin_kubectl(d, &["-n", "team", "create", "serviceaccount", "deployer"]), "create serviceaccount");
    let sa_uid = admin_get(&s, "/api/v1/namespaces/team/serviceaccounts/deployer").1["metadata"]["uid"].clone();
    let manifest = d.join("secret.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/service-account-token\nmetadata:\n  name: deployer-token\n  namespace: team\n  annotations:\n    kubernetes.io/service-account.name: deployer\n",
    )
    .unwrap();
    ok(admin_kubectl(d, &["apply", "-f", manifest.to_str().unwrap()]), "apply token secret");

    // Filled within seconds: token, CA, namespace, and the account's UID annotation.
    let path = "/api/v1/namespaces/team/secrets/deployer-token";
    let secret = wait_for(&s, path, "secret filled", |code, b| code == 200 && b["data"]["token"].is_string());
    assert_eq!(decoded(&secret, "namespace"), "team");
    assert_eq!(decoded(&secret, "ca.crt"), std::fs::read_to_string(d.join("pki/ca.crt")).unwrap());
    assert_eq!(secret["metadata"]["annotations"]["kubernetes.io/service-account.uid"], sa_uid);
    let token = decoded(&secret, "token");
    let payload: Value = serde_json::from_slice(
        &data_encoding::BASE64URL_NOPAD.decode(token.split('.').nth(1).unwrap().as_bytes()).unwrap(),
    )
    .unwrap();
    assert_eq!(payload["iss"], "kubernetes/serviceaccount");
    assert_eq!(payload["kubernetes.io/serviceaccount/secret.name"], "deployer-token");
    assert!(payload.get("exp").is_none() && payload.get("aud").is_none(), "{payload}");

    // The token passes TokenReview and is a bearer token kubectl can use.
    let status = review(&s, &token);
    assert_eq!(status["authenticated"], true, "{status}");
    assert_eq!(status["user"]["username"], "system:serviceaccount:team:deployer");
    let out = ok(
        admin_kubectl(d, &["--token", &token, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]),
        "whoami with the legacy token",
    );
    assert_eq!(out, "system:serviceaccount:team:deployer");
    // Its use is tracked on the Secret, as upstream's legacy token tracking does.
    let labelled = wait_for(&s, path, "last-used label", |_, b| {
        b["metadata"]["labels"]["kubernetes.io/legacy-token-last-used"].is_string()
    });
    let day = labelled["metadata"]["labels"]["kubernetes.io/legacy-token-last-used"].as_str().unwrap().to_owned();
    assert_eq!(day.len(), 10, "{day}");
    let metrics = client(d).get(format!("{}/metrics", s.url)).bearer_auth(admin_token(d)).send().unwrap();
    let metrics = metrics.text().unwrap();
    assert!(metrics.contains("serviceaccount_legacy_manual_token_uses_total"), "{metrics}");

    // A token the Secret no longer holds is refused: clearing it has the controller mint
    // another, and the old one no longer matches the server's copy.
    let mut cleared = labelled.clone();
    cleared["data"].as_object_mut().unwrap().remove("token");
    assert_eq!(admin_request(&s, reqwest::Method::PUT, path, Some(cleared)).0, 200);
    let refilled =
        wait_for(&s, path, "secret refilled", |_, b| b["data"]["token"].is_string() && decoded(b, "token") != token);
    let issuer = admin_get(&s, "/.well-known/openid-configuration").1["issuer"].as_str().unwrap().to_owned();
    let status = review_for(&s, &token, &[&issuer]);
    assert_eq!(status["authenticated"], false, "{status}");
    assert!(status["error"].as_str().unwrap().contains("Token does not match server's copy"), "{status}");
    let fresh = decoded(&refilled, "token");
    assert_eq!(review(&s, &fresh)["authenticated"], true);

    // A Secret naming an account that does not exist, or one with another UID, is removed.
    let (code, _) = admin_request(
        &s,
        reqwest::Method::POST,
        "/api/v1/namespaces/team/secrets",
        Some(token_secret("ghost-token", "ghost")),
    );
    assert_eq!(code, 201);
    wait_for(&s, "/api/v1/namespaces/team/secrets/ghost-token", "ghost token removed", |code, _| code == 404);
    let mut replaced = token_secret("stale-token", "deployer");
    replaced["metadata"]["annotations"]["kubernetes.io/service-account.uid"] = json!("an-old-uid");
    assert_eq!(admin_request(&s, reqwest::Method::POST, "/api/v1/namespaces/team/secrets", Some(replaced)).0, 201);
    wait_for(&s, "/api/v1/namespaces/team/secrets/stale-token", "stale token removed", |code, _| code == 404);

    // Deleting the account removes its token Secrets, and its tokens stop working.
    ok(admin_kubectl(d, &["-n", "team", "delete", "serviceaccount", "deployer"]), "delete serviceaccount");
    wait_for(&s, path, "token secret removed with its account", |code, _| code == 404);
    let status = review_for(&s, &fresh, &[&issuer]);
    assert_eq!(status["authenticated"], false, "{status}");

    // Other Secrets are left alone.
    ok(admin_kubectl(d, &["-n", "team", "create", "secret", "generic", "plain", "--from-literal=k=v"]), "plain secret");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(admin_get(&s, "/api/v1/namespaces/team/secrets/plain").0, 200);
}
