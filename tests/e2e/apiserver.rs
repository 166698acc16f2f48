//! End-to-end: `podpass apiserver` as a real process on a free loopback port — TLS with
//! its generated CA, anonymous and authenticated access, live token-file reload, the OIDC
//! documents verifying tokens, refusal of bad configuration before binding, and the real
//! kubectl.

// Test helpers panic on failure by design; the lint targets library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PODPASS: &str = env!("CARGO_BIN_EXE_podpass");

/// A server process, killed on drop.
struct Server {
    child: Child,
    url: String,
    dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, extra: &[&str]) -> Server {
    let _ = std::fs::remove_file(dir.join("server-url"));
    let child = Command::new(PODPASS)
        .args(["apiserver", "--data-dir", dir.to_str().unwrap(), "--secure-port", "0"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let url = loop {
        if let Ok(u) = std::fs::read_to_string(dir.join("server-url")) {
            break u;
        }
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    };
    Server { child, url, dir: dir.to_path_buf() }
}

fn client(dir: &Path) -> reqwest::blocking::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.join("pki/ca.crt")).unwrap()).unwrap();
    reqwest::blocking::Client::builder().tls_certs_only([ca]).build().unwrap()
}

fn get(s: &Server, path: &str, token: Option<&str>) -> (u16, serde_json::Value) {
    let mut req = client(&s.dir).get(format!("{}{path}", s.url));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().unwrap_or(serde_json::Value::Null))
}

fn admin_token(dir: &Path) -> String {
    let line = std::fs::read_to_string(dir.join("tokens.csv")).unwrap();
    line.split(',').next().unwrap().to_owned()
}

fn ok(out: Output, what: &str) -> String {
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
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
    assert_eq!(get(&s, "/api/v1/nothing-here", Some(&admin_token(dir.path()))).0, 404);

    // a kubeconfig added while the server runs works at once (token file reload)
    let out = Command::new(PODPASS)
        .args(["apiserver", "kubeconfig", "--data-dir", dir.path().to_str().unwrap()])
        .args(["--user", "system:node:n1", "--group", "system:nodes"])
        .output()
        .unwrap();
    let kubeconfig = ok(out, "apiserver kubeconfig");
    let token = kubeconfig.lines().find_map(|l| l.trim().strip_prefix("token: ")).unwrap().trim_matches('"').to_owned();
    let (code, status) = get(&s, "/api", Some(&token));
    assert_eq!(code, 403, "authenticated, not yet authorized: {status}");
    assert_eq!(status["message"], r#"forbidden: User "system:node:n1" cannot get path "/api""#);
}

#[test]
fn oidc_documents_verify_tokens_signed_with_the_servers_key() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
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
    let (_, jwks1) = get(&first, "/openid/v1/jwks", None);
    let ca1 = std::fs::read(dir.path().join("pki/ca.crt")).unwrap();
    drop(first);
    let second = start(dir.path(), &[]);
    let (_, jwks2) = get(&second, "/openid/v1/jwks", None);
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
