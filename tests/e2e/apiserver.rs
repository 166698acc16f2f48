//! End-to-end: `podpass apiserver` as a real process on a free loopback port — TLS with
//! its generated CA, anonymous and authenticated access, live token-file reload, the OIDC
//! documents verifying tokens, refusal of bad configuration before binding, and the real
//! kubectl.

// Test helpers panic on failure by design; the lint targets library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod support;
use support::*;

fn get(s: &Server, path: &str, token: Option<&str>) -> (u16, serde_json::Value) {
    let mut req = client(&s.dir).get(format!("{}{path}", s.url));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().unwrap_or(serde_json::Value::Null))
}

#[test]
fn serves_https_with_generated_pki_and_authenticates() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let (code, version) = get(&s, "/version", None);
    assert_eq!((code, version["major"].as_str()), (200, Some("1")));
    assert_eq!(get(&s, "/healthz", None).0, 200);

    let (code, status) = get(&s, "/api", None);
    assert_eq!(code, 403);
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["message"], r#"forbidden: User "system:anonymous" cannot get path "/api""#);
    let (code, status) = get(&s, "/api", Some("not-a-token"));
    assert_eq!((code, status["reason"].as_str()), (401, Some("Unauthorized")));
    let (code, versions) = get(&s, "/api", Some(&admin_token(dir.path())));
    assert_eq!((code, versions["versions"][0].as_str()), (200, Some("v1")));
    // The roots answer with a trailing slash too, as upstream's (the Python client's
    // VersionApi asks for `/version/`).
    assert_eq!(get(&s, "/version/", None).1, version);
    assert_eq!(get(&s, "/api/", Some(&admin_token(dir.path()))).1, versions);
    let (code, groups) = get(&s, "/apis/", Some(&admin_token(dir.path())));
    assert_eq!((code, groups["kind"].as_str()), (200, Some("APIGroupList")));
    assert_eq!(get(&s, "/api/v1/nothing-here", Some(&admin_token(dir.path()))).0, 404);

    // a kubeconfig added while the server runs works at once (token file reload)
    let out = Command::new(PODPASS)
        .args(["apiserver", "kubeconfig", "--data-dir", dir.path().to_str().unwrap()])
        .args(["--user", "system:node:n1", "--group", "system:nodes"])
        .output()
        .unwrap();
    let kubeconfig = ok(out, "apiserver kubeconfig");
    let token = kubeconfig.lines().find_map(|l| l.trim().strip_prefix("token: ")).unwrap().trim_matches('"').to_owned();
    let (code, _) = get(&s, "/api", Some(&token));
    assert_eq!(code, 200, "discovery is bound to system:authenticated (bootstrap policy)");
    let (code, status) = get(&s, "/api/v1/secrets", Some(&token));
    assert_eq!(code, 403, "authenticated, not authorized: {status}");
    assert_eq!(
        status["message"],
        r#"secrets is forbidden: User "system:node:n1" cannot list resource "secrets" in API group "" at the cluster scope: can only read namespaced object of this type"#
    );
}

#[test]
fn oidc_documents_verify_tokens_signed_with_the_servers_key() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    // as upstream, discovery follows RBAC: service accounts may read it, anonymous clients
    // only once an operator binds system:service-account-issuer-discovery for them
    assert_eq!(get(&s, "/.well-known/openid-configuration", None).0, 403);
    assert_eq!(get(&s, "/openid/v1/jwks", None).0, 403);
    assert_eq!(get(&s, "/openid/v1/jwks", Some(&admin_token(dir.path()))).0, 200);
    let binding = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "oidc-anonymous"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:service-account-issuer-discovery"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:unauthenticated"}]});
    let created = client(&s.dir)
        .post(format!("{}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", s.url))
        .bearer_auth(admin_token(dir.path()))
        .json(&binding)
        .send()
        .unwrap();
    assert_eq!(created.status(), 201);
    let (code, discovery) = get(&s, "/.well-known/openid-configuration", None);
    assert_eq!(code, 200);
    assert_eq!(discovery["issuer"], s.url.as_str());
    assert_eq!(discovery["jwks_uri"], format!("{}/openid/v1/jwks", s.url));
    assert_eq!(discovery["id_token_signing_alg_values_supported"], serde_json::json!(["ES256"]));
    let token = ok(
        Command::new(PODPASS)
            .args(["token", "mint", "--signing-key", dir.path().join("sa.key").to_str().unwrap()])
            .args(["--issuer", &s.url, "--audience", "registry", "--namespace", "ns"])
            .args(["--service-account", "sa", "--service-account-uid", "u"])
            .output()
            .unwrap(),
        "mint",
    );
    let out = Command::new(PODPASS)
        .args(["token", "verify", "--jwks", &format!("{}/openid/v1/jwks", s.url)])
        .args(["--certificate-authority", dir.path().join("pki/ca.crt").to_str().unwrap()])
        .args(["--issuer", &s.url, "--audience", "registry", token.trim()])
        .output()
        .unwrap();
    assert!(ok(out, "verify against served JWKS").contains("system:serviceaccount:ns:sa"));
}

#[test]
fn restart_keeps_keys_ca_and_admin_access() {
    let dir = tempfile::tempdir().unwrap();
    let first = start(dir.path(), &[]);
    let (_, jwks1) = get(&first, "/openid/v1/jwks", Some(&admin_token(dir.path())));
    let ca1 = std::fs::read(dir.path().join("pki/ca.crt")).unwrap();
    drop(first);
    let second = start(dir.path(), &[]);
    let (_, jwks2) = get(&second, "/openid/v1/jwks", Some(&admin_token(dir.path())));
    assert_eq!(jwks1, jwks2, "the signing key is kept");
    assert_eq!(std::fs::read(dir.path().join("pki/ca.crt")).unwrap(), ca1, "the CA is kept");
    assert_eq!(get(&second, "/api", Some(&admin_token(dir.path()))).0, 200);
}

#[test]
fn bad_configuration_exits_64_before_binding() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(PODPASS)
            .args(["apiserver", "--data-dir", dir.path().to_str().unwrap(), "--secure-port", "0"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["--feature-gates", "ServiceAccountTokenNodeBindingValidation=false"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains(
        "the \"ServiceAccountTokenNodeBinding\" feature gate can only be enabled if the \"ServiceAccountTokenNodeBindingValidation\" feature gate is also enabled"
    ));
    assert!(!dir.path().join("server-url").exists(), "nothing was served");
    let out = run(&["--service-account-signing-key-file", "/nonexistent/key.pem"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--service-account-signing-key-file /nonexistent/key.pem"));
    // Three unreadable files: all three named in one run, one `error:` line each.
    let out = run(&[
        "--service-account-signing-key-file=/nonexistent/sa.key",
        "--tls-cert-file=/nonexistent/tls.crt",
        "--tls-private-key-file=/nonexistent/tls.key",
    ]);
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in [
        "error: --service-account-signing-key-file /nonexistent/sa.key: ",
        "error: --tls-cert-file /nonexistent/tls.crt: ",
        "error: --tls-private-key-file /nonexistent/tls.key: ",
    ] {
        assert!(stderr.lines().any(|l| l.starts_with(line)), "{line:?} missing from:\n{stderr}");
    }
    assert!(!dir.path().join("server-url").exists(), "nothing was served");
    let out = run(&["--tls-cert-file", "/x.crt"]);
    assert_eq!(out.status.code(), Some(64));
    let out = run(&["--feature-gates", "Nope=true"]);
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn real_kubectl_talks_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let kubeconfig = dir.path().join("admin.kubeconfig");
    let cache = dir.path().join("kube-cache");
    let kubectl = |args: &[&str]| {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(&cache)
            .args(args)
            .output()
            .expect("kubectl is installed (scripts/test installs kubernetes-client)")
    };
    let raw: serde_json::Value =
        serde_json::from_str(&ok(kubectl(&["get", "--raw", "/api"]), "kubectl get --raw")).unwrap();
    assert_eq!(raw["versions"][0], "v1");
    let version = ok(kubectl(&["version"]), "kubectl version");
    assert!(version.contains("podpass"), "{version}");
    drop(s);
}

fn kubectl_in(dir: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(dir.join("admin.kubeconfig"))
        .arg("--cache-dir")
        .arg(dir.join("kube-cache"))
        .args(args)
        .output()
        .expect("kubectl is installed (scripts/test installs kubernetes-client)")
}

fn token_review(s: &Server, token: &str, audience: &str) -> serde_json::Value {
    let resp = client(&s.dir)
        .post(format!("{}/apis/authentication.k8s.io/v1/tokenreviews", s.url))
        .bearer_auth(admin_token(&s.dir))
        .json(&serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                   "spec": {"token": token, "audiences": [audience]}}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    resp.json().unwrap()
}

/// Reviews until the token is refused. kube-apiserver remembers successful token
/// authentications for 10 s (TokenSuccessCacheTTL), and so does podpass — but podpass drops
/// the cached success of a deleted pod's, service account's or node's token as the deletion
/// is watched, so such a token passes at most until then (and never past the TTL).
fn review_until_refused(s: &Server, token: &str, audience: &str) -> serde_json::Value {
    let started = std::time::Instant::now();
    loop {
        let review = token_review(s, token, audience);
        if review["status"]["authenticated"] == false {
            assert!(started.elapsed() < Duration::from_secs(11), "refused only after {:?}", started.elapsed());
            return review;
        }
        assert!(started.elapsed() < Duration::from_secs(15), "still authenticated: {review}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn kubectl_creates_objects_and_pod_bound_tokens_that_review_until_the_pod_goes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    ok(kubectl_in(d, &["create", "namespace", "team-a"]), "create namespace");
    wait_namespace_ready(&s, "team-a");
    ok(kubectl_in(d, &["-n", "team-a", "create", "serviceaccount", "builder"]), "create sa");
    let pod = d.join("pod.json");
    std::fs::write(
        &pod,
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"team-a"},
            "spec":{"serviceAccountName":"builder","nodeName":"n1","containers":[{"name":"c","image":"registry.example/app:1"}]}}"#,
    )
    .unwrap();
    ok(kubectl_in(d, &["apply", "-f", pod.to_str().unwrap()]), "apply pod");
    // a second apply with a change is a strategic merge patch that keeps server-added fields
    std::fs::write(&pod, std::fs::read_to_string(&pod).unwrap().replace("app:1", "app:2")).unwrap();
    assert!(ok(kubectl_in(d, &["apply", "-f", pod.to_str().unwrap()]), "re-apply").contains("configured"));
    let applied = ok(kubectl_in(d, &["-n", "team-a", "get", "pod", "web", "-o", "json"]), "get pod json");
    let applied: serde_json::Value = serde_json::from_str(&applied).unwrap();
    assert_eq!(applied["spec"]["containers"][0]["image"], "registry.example/app:2");
    assert!(applied["spec"]["volumes"][0]["name"].as_str().unwrap().starts_with("kube-api-access-"));
    ok(kubectl_in(d, &["-n", "team-a", "label", "pod", "web", "tier=front"]), "label");
    assert!(ok(kubectl_in(d, &["-n", "team-a", "get", "pods", "-l", "tier=front"]), "get -l").contains("web"));
    let sas = ok(kubectl_in(d, &["-n", "team-a", "get", "sa"]), "get sa");
    assert!(sas.contains("builder") && sas.contains("default"), "{sas}");
    let uid = ok(kubectl_in(d, &["-n", "team-a", "get", "pod", "web", "-o", "jsonpath={.metadata.uid}"]), "get pod");
    let token = ok(
        kubectl_in(
            d,
            &[
                "-n",
                "team-a",
                "create",
                "token",
                "builder",
                "--audience",
                "registry",
                "--bound-object-kind",
                "Pod",
                "--bound-object-name",
                "web",
                "--bound-object-uid",
                &uid,
            ],
        ),
        "create token",
    );
    assert_eq!(ok(kubectl_in(d, &["auth", "can-i", "get", "pods", "-n", "team-a"]), "can-i").trim(), "yes");

    // the token carries pod, node and jti, and verifies with PyJWT via the served JWKS
    let jwks = d.join("jwks.json");
    let admin = admin_token(d);
    std::fs::write(&jwks, serde_json::to_vec(&get(&s, "/openid/v1/jwks", Some(&admin)).1).unwrap()).unwrap();
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("pyjwt_verify.py"))
        .args([jwks.to_str().unwrap(), &s.url, "registry", token.trim()])
        .output()
        .unwrap();
    let claims: serde_json::Value = serde_json::from_str(&ok(out, "PyJWT")).unwrap();
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], uid.as_str());
    assert_eq!(claims["kubernetes.io"]["node"]["name"], "n1");

    let review = token_review(&s, token.trim(), "registry");
    assert_eq!(review["status"]["authenticated"], true, "{review}");
    assert_eq!(review["status"]["user"]["extra"]["authentication.kubernetes.io/pod-uid"][0], uid.as_str());
    assert!(
        review["status"]["user"]["extra"]["authentication.kubernetes.io/credential-id"][0]
            .as_str()
            .unwrap()
            .starts_with("JTI=")
    );
    let wrong_audience = token_review(&s, token.trim(), "other");
    assert_eq!(wrong_audience["status"]["authenticated"], false);

    // a stale pod UID is refused with 409 and upstream's message
    let out = kubectl_in(
        d,
        &[
            "-n",
            "team-a",
            "create",
            "token",
            "builder",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            "web",
            "--bound-object-uid",
            "not-the-uid",
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not match the UID in record"));

    ok(kubectl_in(d, &["-n", "team-a", "delete", "pod", "web", "--grace-period=0", "--force"]), "delete pod");
    let review = review_until_refused(&s, token.trim(), "registry");
    assert_eq!(review["status"]["authenticated"], false, "{review}");
    assert!(review["status"]["error"].as_str().unwrap().contains("service account token has been invalidated"));
}

#[test]
fn objects_and_tokens_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    let first = start_on(d, &port, &[]);
    ok(kubectl_in(d, &["create", "namespace", "keep"]), "create namespace");
    wait_namespace_ready(&first, "keep");
    ok(kubectl_in(d, &["-n", "keep", "create", "serviceaccount", "sa"]), "create sa");
    let token = ok(kubectl_in(d, &["-n", "keep", "create", "token", "sa", "--audience", "a"]), "create token");
    drop(first);
    let second = start_on(d, &port, &[]);
    assert!(ok(kubectl_in(d, &["-n", "keep", "get", "sa"]), "get sa").contains("sa"));
    assert_eq!(token_review(&second, token.trim(), "a")["status"]["authenticated"], true);
}

#[test]
fn max_token_expiration_shortens_requests_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &["--service-account-max-token-expiration", "2h"]);
    let admin = admin_token(dir.path());
    let c = client(dir.path());
    let resp = c
        .post(format!("{}/api/v1/namespaces/default/serviceaccounts/default/token", s.url))
        .bearer_auth(&admin)
        .json(&serde_json::json!({"spec": {"audiences": ["a"], "expirationSeconds": 86400}}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let warning = resp.headers().get("warning").unwrap().to_str().unwrap().to_owned();
    assert_eq!(warning, r#"299 - "requested expiration of 86400 seconds shortened to 7200 seconds""#);
    let body: serde_json::Value = resp.json().unwrap();
    assert_eq!(body["spec"]["expirationSeconds"], 7200);
    // below the TokenRequest minimum: 422 naming the field
    let resp = c
        .post(format!("{}/api/v1/namespaces/default/serviceaccounts/default/token", s.url))
        .bearer_auth(&admin)
        .json(&serde_json::json!({"spec": {"expirationSeconds": 60}}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 422);
    let status: serde_json::Value = resp.json().unwrap();
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes")
    );
    // a bad maximum is refused at start-up
    let out = Command::new(PODPASS)
        .args(["apiserver", "--data-dir", dir.path().to_str().unwrap(), "--secure-port", "0"])
        .args(["--service-account-max-token-expiration", "10m"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn token_request_uid_validation_gate_refuses_or_warns() {
    // on (the default): a stale service-account UID is a 409 worded as upstream's
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let stale = serde_json::json!({"metadata": {"uid": "stale-uid"}, "spec": {"audiences": ["a"]}});
    let resp = client(dir.path())
        .post(format!("{}/api/v1/namespaces/default/serviceaccounts/default/token", s.url))
        .bearer_auth(admin_token(dir.path()))
        .json(&stale)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 409);
    let status: serde_json::Value = resp.json().unwrap();
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "Operation cannot be fulfilled on TokenRequest.authentication.k8s.io \"default\": the UID in the token request (stale-uid) does not match the UID of the service account ("
        ),
        "{message}"
    );
    assert_eq!(status["reason"], "Conflict");
    drop(s);

    // off: served, with upstream's warning and audit annotation
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let s = start(
        dir.path(),
        &[
            "--feature-gates",
            "TokenRequestServiceAccountUIDValidation=false",
            "--audit-log-path",
            log.to_str().unwrap(),
        ],
    );
    let resp = client(dir.path())
        .post(format!("{}/api/v1/namespaces/default/serviceaccounts/default/token", s.url))
        .bearer_auth(admin_token(dir.path()))
        .json(&stale)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let warning = resp.headers().get("warning").unwrap().to_str().unwrap().to_owned();
    assert!(
        warning.starts_with(
            r#"299 - "the UID in the token request (stale-uid) does not match the UID of the service account ("#
        ),
        "{warning}"
    );
    assert!(warning.ends_with(r#"but TokenRequestServiceAccountUIDValidation is not enabled. In the future, this will return a conflict error""#), "{warning}");
    let body: serde_json::Value = resp.json().unwrap();
    assert_eq!(body["metadata"]["uid"], "stale-uid", "the answer echoes the request's UID, as upstream");
    let deadline = Instant::now() + Duration::from_secs(10);
    let annotation = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let found = text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).find_map(|e| {
            e["annotations"]["authentication.k8s.io/token-request-uid-mismatch"].as_str().map(str::to_owned)
        });
        if let Some(a) = found {
            break a;
        }
        assert!(Instant::now() < deadline, "no audit annotation in {text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(annotation.starts_with("the UID in the token request (stale-uid) does not match"), "{annotation}");
}

#[test]
fn automounted_token_requests_get_extended_expiration_and_warnafter() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start_counting(d, &[]);
    let admin = admin_token(d);
    let c = client(d);
    let pod = serde_json::json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}});
    let resp =
        c.post(format!("{}/api/v1/namespaces/default/pods", s.url)).bearer_auth(&admin).json(&pod).send().unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let created: serde_json::Value = resp.json().unwrap();
    assert_eq!(created["spec"]["serviceAccountName"], "default");
    assert_eq!(
        created["spec"]["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
        3607
    );
    let uid = created["metadata"]["uid"].as_str().unwrap();
    let req = serde_json::json!({"spec": {"expirationSeconds": 3607, "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid}}});
    let resp = c
        .post(format!("{}/api/v1/namespaces/default/serviceaccounts/default/token", s.url))
        .bearer_auth(&admin)
        .json(&req)
        .send()
        .unwrap();
    let body: serde_json::Value = resp.json().unwrap();
    let token = body["status"]["token"].as_str().unwrap();
    let payload = token.split('.').nth(1).unwrap();
    let claims: serde_json::Value =
        serde_json::from_slice(&data_encoding::BASE64URL_NOPAD.decode(payload.as_bytes()).unwrap()).unwrap();
    let iat = claims["iat"].as_i64().unwrap();
    assert_eq!(claims["exp"].as_i64().unwrap() - iat, 31_536_000, "one year");
    assert_eq!(claims["kubernetes.io"]["warnafter"].as_i64().unwrap() - iat, 3607);
    assert_eq!(claims["aud"], serde_json::json!([s.url]), "default audience: the API");
    // the status still reports the requested 3607 s
    let exp = podpass_apiserver::parse_rfc3339(body["status"]["expirationTimestamp"].as_str().unwrap()).unwrap();
    assert!((exp - iat - 3607).abs() <= 1);

    // using it before warnafter counts as a valid tracked token; issuance and verification
    // count under KEP-4193's names (the pod runs on n1: its token carries the node)
    assert_eq!(token_review(&s, token, &s.url)["status"]["authenticated"], true);
    let metrics = c.get(format!("{}/metrics", s.url)).bearer_auth(&admin).send().unwrap().text().unwrap();
    for line in [
        "serviceaccount_valid_tokens_total 1",
        "serviceaccount_stale_tokens_total 0",
        "serviceaccount_bound_tokens_issued_total{bound_object_kind=\"Pod\"} 1",
        "serviceaccount_bound_tokens_issued_pod_with_node_tokens_total 1",
        "serviceaccount_bound_tokens_issued_with_identifier_total 1",
        "serviceaccount_authentication_bound_object_verified_total{bound_object_kind=\"Pod\"} 1",
        "serviceaccount_authentication_pod_node_ref_verified_total 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} missing from:\n{metrics}");
    }
    assert!(metrics.contains("apiserver_request_total{verb=\"create\",group=\"\",version=\"v1\",resource=\"pods\",subresource=\"\",code=\"201\"} 1"), "{metrics}");
    assert!(metrics.contains("apiserver_request_duration_seconds_bucket"));
    assert_eq!(get(&s, "/metrics", None).0, 403, "metrics need authorization");
}

#[test]
fn audit_log_links_issued_tokens_to_their_use() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let log = d.join("audit.log");
    let s = start_counting(d, &["--audit-log-path", log.to_str().unwrap()]);
    let token = default_token(&s, serde_json::json!({}));
    let (code, _) = get(&s, "/api/v1/namespaces/default/pods", Some(&token));
    assert_eq!(code, 403, "authenticated as the service account, not authorized");

    let deadline = Instant::now() + Duration::from_secs(10);
    let events: Vec<serde_json::Value> = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let events: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        if events.iter().any(is_the_tokens_use) || Instant::now() > deadline {
            break events;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let issued = events.iter().find(|e| e["objectRef"]["subresource"] == "token").expect("token creation audited");
    assert_eq!(issued["verb"], "create");
    assert_eq!(issued["level"], "Metadata");
    assert_eq!(issued["user"]["username"], "admin");
    assert_eq!(issued["responseStatus"]["code"], 201);
    let credential = issued["annotations"]["authentication.k8s.io/issued-credential-id"].as_str().unwrap();
    assert!(credential.starts_with("JTI="));
    let used = events.iter().find(|e| is_the_tokens_use(e)).expect("the token's use audited");
    assert_eq!(used["user"]["username"], "system:serviceaccount:default:default");
    assert_eq!(used["user"]["extra"]["authentication.kubernetes.io/credential-id"][0], credential);
    assert_eq!(used["responseStatus"]["code"], 403);
    assert_eq!(used["objectRef"]["resource"], "pods");
}

#[test]
fn node_bound_token_fails_after_the_node_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let (admin, c) = (admin_token(dir.path()), client(dir.path()));
    let node: serde_json::Value = c
        .post(format!("{}/api/v1/nodes", s.url))
        .bearer_auth(&admin)
        .json(&serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let token = default_token(
        &s,
        serde_json::json!({"audiences": ["a"], "boundObjectRef": {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": node["metadata"]["uid"]}}),
    );
    let ok_review = token_review(&s, &token, "a");
    assert_eq!(ok_review["status"]["user"]["extra"]["authentication.kubernetes.io/node-name"][0], "n1");
    let metrics = c.get(format!("{}/metrics", s.url)).bearer_auth(&admin).send().unwrap().text().unwrap();
    for line in [
        "serviceaccount_bound_tokens_issued_total{bound_object_kind=\"Node\"} 1",
        "serviceaccount_authentication_bound_object_verified_total{bound_object_kind=\"Node\"} 1",
        "serviceaccount_authentication_pod_node_ref_verified_total 0",
        "serviceaccount_valid_tokens_total 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} missing from:\n{metrics}");
    }
    let resp = c.delete(format!("{}/api/v1/nodes/n1", s.url)).bearer_auth(&admin).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let review = review_until_refused(&s, &token, "a");
    assert!(review["status"]["error"].as_str().unwrap().contains("service account token has been invalidated"));
}

#[test]
fn bench_apiserver_runs_and_reports_ratios() {
    // A smoke run: the bench must keep working; its figures are read by people, not asserted.
    let out =
        Command::new(PODPASS).args(["bench", "apiserver", "--clients", "2", "--seconds", "0.3"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for line in [
        "raw ES256 sign",
        "TokenRequest (pod-bound)",
        "HTTPS floor (same stack, fixed answer)",
        "TokenRequest against its limits",
        "raw ES256 verify",
        "TokenReview (verified)",
        "TokenReview (10 s cache)",
        "create pod",
        "merge patch pod labels",
        "apply configmap (SSA)",
        "managedFields",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in\n{stdout}");
    }
    assert!(stdout.contains("x raw sign on"), "{stdout}");
    let out = Command::new(PODPASS).args(["bench", "apiserver", "--clients", "0"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--clients"));
}

#[test]
fn kubectl_creates_config_maps_and_secrets_which_send_protobuf_and_string_data_is_merged() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    let token = admin_token(d);
    ok(kubectl_in(d, &["create", "namespace", "team"]), "create namespace");
    wait_namespace_ready(&s, "team");
    let logo = d.join("logo.bin");
    std::fs::write(&logo, [0xffu8, 0x00, 0x01]).unwrap();
    ok(
        kubectl_in(
            d,
            &["-n", "team", "create", "configmap", "settings", "--from-literal=mode=blue"]
                .into_iter()
                .chain([format!("--from-file=logo={}", logo.display()).as_str()])
                .collect::<Vec<_>>(),
        ),
        "create configmap",
    );
    let (_, cm) = get(&s, "/api/v1/namespaces/team/configmaps/settings", Some(&token));
    assert_eq!(cm["data"], serde_json::json!({"mode": "blue"}), "{cm}");
    assert_eq!(cm["binaryData"], serde_json::json!({"logo": "/wAB"}), "{cm}");

    ok(
        kubectl_in(d, &["-n", "team", "create", "secret", "generic", "db", "--from-literal=password=s3cr3t"]),
        "generic",
    );
    let (_, secret) = get(&s, "/api/v1/namespaces/team/secrets/db", Some(&token));
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(secret["data"]["password"], "czNjcjN0", "{secret}");
    ok(
        kubectl_in(
            d,
            &["-n", "team", "create", "secret", "docker-registry", "pull", "--docker-server=registry.example"]
                .into_iter()
                .chain(["--docker-username=u", "--docker-password=p"])
                .collect::<Vec<_>>(),
        ),
        "docker-registry",
    );
    let (_, pull) = get(&s, "/api/v1/namespaces/team/secrets/pull", Some(&token));
    assert_eq!(pull["type"], "kubernetes.io/dockerconfigjson");
    let config = data_encoding::BASE64.decode(pull["data"][".dockerconfigjson"].as_str().unwrap().as_bytes()).unwrap();
    let config: serde_json::Value = serde_json::from_slice(&config).unwrap();
    assert_eq!(config["auths"]["registry.example"]["username"], "u", "{config}");

    // stringData from a manifest: merged into data (overriding), never stored
    let manifest = d.join("secret.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: app\n  namespace: team\ndata:\n  a: eA==\n  b: eQ==\nstringData:\n  b: new\n",
    )
    .unwrap();
    ok(kubectl_in(d, &["apply", "-f", manifest.to_str().unwrap()]), "apply secret");
    let (_, app) = get(&s, "/api/v1/namespaces/team/secrets/app", Some(&token));
    assert_eq!(app["data"], serde_json::json!({"a": "eA==", "b": "bmV3"}), "{app}");
    assert!(app.get("stringData").is_none(), "stringData is never stored: {app}");
}

#[test]
fn kubectl_get_all_lists_the_kinds_upstream_puts_in_the_all_category() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    ok(kubectl_in(d, &["create", "namespace", "team"]), "create namespace");
    wait_namespace_ready(&s, "team");
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}});
    let resp = client(d)
        .post(format!("{}/api/v1/namespaces/team/pods", s.url))
        .bearer_auth(admin_token(d))
        .json(&pod)
        .send()
        .unwrap();
    assert_eq!(resp.status(), 201);
    ok(kubectl_in(d, &["-n", "team", "create", "configmap", "not-in-all", "--from-literal=a=b"]), "configmap");
    let all = ok(kubectl_in(d, &["-n", "team", "get", "all", "-o", "name"]), "kubectl get all");
    assert_eq!(all.trim(), "pod/web", "pods are in category all, config maps are not");
}

#[test]
fn events_expire_after_the_event_ttl_from_their_last_write() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &["--event-ttl", "3s"]);
    let token = admin_token(d);
    let event = |name: &str| {
        serde_json::json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web"},
            "reason": "Pulled", "message": "m", "type": "Normal"})
    };
    let post = |body: serde_json::Value| {
        let resp = client(d)
            .post(format!("{}/api/v1/namespaces/default/events", s.url))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .unwrap();
        assert_eq!(resp.status(), 201);
    };
    post(event("old"));
    // An event seen again keeps living from its last write (a series' lastTimestamp).
    let mut renewed = event("renewed");
    let later = std::time::SystemTime::now() + Duration::from_secs(3600);
    let secs = later.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    renewed["lastTimestamp"] = serde_json::json!(format_time(secs));
    post(renewed);
    // Bounded wait: the reaper looks every second; "old" goes within its TTL plus a pass.
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&s, "/api/v1/namespaces/default/events/old", Some(&token)).0 != 404 {
        assert!(Instant::now() < deadline, "the expired event was never removed");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(get(&s, "/api/v1/namespaces/default/events/renewed", Some(&token)).0, 200);
    // A bad TTL is refused before anything is bound.
    let out = Command::new(PODPASS)
        .args(["apiserver", "--data-dir", d.join("other").to_str().unwrap(), "--secure-port", "0", "--event-ttl", "0s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--event-ttl"), "{out:?}");
}

/// RFC 3339 (UTC) for `secs` since the epoch.
fn format_time(secs: u64) -> String {
    let out = Command::new("date").args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%SZ"]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn deleting_a_pod_revokes_its_cached_tokens_at_once_not_after_the_cache_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    let admin = admin_token(d);
    let c = client(d);
    // An unscheduled pod: deleted at once, no node to confirm.
    let pod = serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let resp =
        c.post(format!("{}/api/v1/namespaces/default/pods", s.url)).bearer_auth(&admin).json(&pod).send().unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let uid = resp.json::<serde_json::Value>().unwrap()["metadata"]["uid"].as_str().unwrap().to_owned();
    let token = default_token(
        &s,
        serde_json::json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid}}),
    );
    let whoami = |token: &str| whoami(&s, token);
    // Used twice: the second use is served from the 10 s success cache.
    assert_eq!(whoami(&token), 201);
    assert_eq!(token_review(&s, &token, &s.url)["status"]["authenticated"], true);
    assert_eq!(whoami(&token), 201);
    let resp = c.delete(format!("{}/api/v1/namespaces/default/pods/p", s.url)).bearer_auth(&admin).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    // Refused well within the cache's 10 s: the deletion itself dropped the cached success
    // (upstream keeps passing it until the TTL).
    wait_for("the deleted pod's token refused", Duration::from_secs(5), || {
        (whoami(&token) == 401).then_some(serde_json::Value::Null)
    });
    assert_eq!(token_review(&s, &token, &s.url)["status"]["authenticated"], false);
}

/// A token of `default/default` issued to the admin for TokenRequest `spec`.
/// The audit event of the service account's list (the scheduler lists as well).
fn is_the_tokens_use(e: &serde_json::Value) -> bool {
    e["verb"] == "list" && e["user"]["username"] == "system:serviceaccount:default:default"
}

/// A server whose token counters and audit log only this test adds to: no controller
/// manager beside it (whose controllers request tokens of their own), the `default` account
/// created here as the manager would.
fn start_counting(d: &Path, extra: &[&str]) -> Server {
    let s = start_without_manager(d, extra);
    let sa = serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
    let (code, body) = admin_request(&s, reqwest::Method::POST, "/api/v1/namespaces/default/serviceaccounts", Some(sa));
    assert_eq!(code, 201, "{body}");
    s
}

fn default_token(s: &Server, spec: serde_json::Value) -> String {
    let path = "/api/v1/namespaces/default/serviceaccounts/default/token";
    let (code, body) = admin_request(s, reqwest::Method::POST, path, Some(serde_json::json!({"spec": spec})));
    assert_eq!(code, 201, "{body}");
    body["status"]["token"].as_str().unwrap().to_owned()
}

/// The status of a SelfSubjectReview made with `token` (201: it authenticates).
fn whoami(s: &Server, token: &str) -> u16 {
    client(&s.dir)
        .post(format!("{}/apis/authentication.k8s.io/v1/selfsubjectreviews", s.url))
        .bearer_auth(token)
        .json(&serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}))
        .send()
        .unwrap()
        .status()
        .as_u16()
}

#[test]
fn a_token_revoked_by_its_jti_is_refused_at_once_until_its_expiry_and_the_revocation_is_then_collected() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let log = d.join("audit.log");
    let s = start(d, &["--audit-log-path", log.to_str().unwrap()]);
    let c = client(d);
    let issue = || default_token(&s, serde_json::json!({"expirationSeconds": 600}));
    let (leaked, other) = (issue(), issue());
    let whoami = |token: &str| whoami(&s, token);
    // Used twice: the second use comes from the success cache.
    assert_eq!(whoami(&leaked), 201);
    assert_eq!(whoami(&leaked), 201);
    let claims = jwt_claims(&leaked);
    let jti = claims["jti"].as_str().unwrap().to_owned();
    let exp = format_time(claims["exp"].as_u64().unwrap());
    let revocation = |name: &str, until: &str| {
        serde_json::json!({"apiVersion": "revocation.podpass.dev/v1", "kind": "RevokedToken",
            "metadata": {"name": name}, "spec": {"expirationTimestamp": until, "reason": "leaked in a CI log"}})
    };
    let path = "/apis/revocation.podpass.dev/v1/revokedtokens";
    // A tenant (the token's own service account) may not revoke; a revocation must say until when.
    let (code, _) = {
        let r = c.post(format!("{}{path}", s.url)).bearer_auth(&other).json(&revocation(&jti, &exp)).send().unwrap();
        (r.status().as_u16(), ())
    };
    assert_eq!(code, 403, "RBAC-gated");
    let (code, body) = admin_request(
        &s,
        reqwest::Method::POST,
        path,
        Some(
            serde_json::json!({"apiVersion": "revocation.podpass.dev/v1", "kind": "RevokedToken", "metadata": {"name": jti}, "spec": {}}),
        ),
    );
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "spec.expirationTimestamp", "{body}");

    let (code, body) = admin_request(&s, reqwest::Method::POST, path, Some(revocation(&jti, &exp)));
    assert_eq!(code, 201, "{body}");
    // Refused at its next use, cached success or not; a TokenReview says why. Another token
    // of the same service account is untouched: revocation is by jti.
    wait_for("the revoked token refused", Duration::from_secs(5), || {
        (whoami(&leaked) == 401).then_some(serde_json::Value::Null)
    });
    let review = token_review(&s, &leaked, &s.url);
    assert_eq!(review["status"]["authenticated"], false);
    let error = review["status"]["error"].as_str().unwrap();
    assert!(error.contains(&format!("revoked (credential id JTI={jti})")), "{error}");
    assert_eq!(whoami(&other), 201);
    let (_, metrics) = {
        let r = c.get(format!("{}/metrics", s.url)).bearer_auth(admin_token(d)).send().unwrap();
        (r.status().as_u16(), r.text().unwrap())
    };
    assert!(metrics.contains("podpass_serviceaccount_revoked_token_uses_total 2"), "{metrics}");
    // The revocation is audited with who made it.
    let text = std::fs::read_to_string(&log).unwrap();
    let audited = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| {
            e["objectRef"]["resource"] == "revokedtokens" && e["verb"] == "create" && e["responseStatus"]["code"] == 201
        })
        .expect("the revocation in the audit log");
    assert_eq!(audited["user"]["username"], "admin");
    assert_eq!(audited["objectRef"]["apiGroup"], "revocation.podpass.dev");

    // A revocation whose token has expired is collected by the elected replica.
    let past = format_time(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() - 600);
    let (code, _) = admin_request(&s, reqwest::Method::POST, path, Some(revocation("expired-jti", &past)));
    assert_eq!(code, 201);
    wait_for("the expired revocation collected", Duration::from_secs(60), || {
        (admin_get(&s, &format!("{path}/expired-jti")).0 == 404).then_some(serde_json::Value::Null)
    });
    let (_, list) = admin_get(&s, path);
    let names: Vec<&str> =
        list["items"].as_array().unwrap().iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    assert_eq!(names, [jti.as_str()], "the live revocation is kept");
    // The real kubectl finds the kind through discovery and prints its columns.
    let table = ok(admin_kubectl(d, &["get", "revokedtokens"]), "kubectl get revokedtokens");
    assert!(table.starts_with("NAME") && table.contains("EXPIRES") && table.contains("REASON"), "{table}");
    assert!(table.contains(&jti) && table.contains("leaked in a CI log"), "{table}");
}

#[test]
fn deleting_a_secret_revokes_the_cached_tokens_bound_to_it_and_held_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    let (code, secret) = admin_request(
        &s,
        reqwest::Method::POST,
        "/api/v1/namespaces/default/secrets",
        Some(serde_json::json!({"metadata": {"name": "bound"}, "type": "Opaque"})),
    );
    assert_eq!(code, 201, "{secret}");
    let uid = secret["metadata"]["uid"].as_str().unwrap();
    let bound = default_token(
        &s,
        serde_json::json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Secret", "name": "bound", "uid": uid}}),
    );
    // A legacy token, held in a Secret the tokens controller fills.
    let (code, _) = admin_request(
        &s,
        reqwest::Method::POST,
        "/api/v1/namespaces/default/secrets",
        Some(
            serde_json::json!({"metadata": {"name": "legacy", "annotations": {"kubernetes.io/service-account.name": "default"}},
                                "type": "kubernetes.io/service-account-token"}),
        ),
    );
    assert_eq!(code, 201);
    let legacy = wait_for("the legacy token filled in", Duration::from_secs(15), || {
        admin_get(&s, "/api/v1/namespaces/default/secrets/legacy").1["data"]["token"].as_str().map(|t| {
            serde_json::Value::String(String::from_utf8(data_encoding::BASE64.decode(t.as_bytes()).unwrap()).unwrap())
        })
    });
    let legacy = legacy.as_str().unwrap().to_owned();
    for token in [&bound, &legacy] {
        // Twice: the second use is served from the 10 s success cache.
        assert_eq!(whoami(&s, token), 201);
        assert_eq!(whoami(&s, token), 201);
    }
    for (name, token) in [("bound", &bound), ("legacy", &legacy)] {
        let (code, _) =
            admin_request(&s, reqwest::Method::DELETE, &format!("/api/v1/namespaces/default/secrets/{name}"), None);
        assert_eq!(code, 200);
        // Refused well within the cache's 10 s (upstream passes it until the TTL).
        wait_for(&format!("the {name} secret's token refused"), Duration::from_secs(5), || {
            (whoami(&s, token) == 401).then_some(serde_json::Value::Null)
        });
    }
}
