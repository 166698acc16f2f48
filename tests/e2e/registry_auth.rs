//! End-to-end: `podpass registry-auth` in front of the real CNCF registry 2.8 (Debian
//! `docker-registry`, `auth.token` pointing at it), trusting a real `podpass apiserver`'s
//! issuer; pods pull through `podpass node ensure-image` with `podpass-credential-provider`
//! in both modes, and every kind of bad token is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod containerd;
mod registry;
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use registry::{Registry, free_port, serve_token_auth};
use serde_json::{Value, json};
use support::*;

const AUDIENCE: &str = "registry-auth";

/// The plugin binary, built beside `podpass` (scripts/test builds it).
fn plugin_bin() -> PathBuf {
    let p = Path::new(PODPASS).with_file_name("podpass-credential-provider");
    assert!(p.exists(), "{} missing: cargo build -p podpass-credential-provider", p.display());
    p
}

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn post(s: &Server, path: &str, body: Value) -> Value {
    let resp =
        client(&s.dir).post(format!("{}{path}", s.url)).bearer_auth(admin_token(&s.dir)).json(&body).send().unwrap();
    assert!(resp.status().is_success(), "POST {path}: {}", resp.text().unwrap());
    resp.json().unwrap()
}

/// `podpass token keygen` of an ES256 key at `path`.
fn keygen(path: &Path) {
    let out = Command::new(PODPASS)
        .args(["token", "keygen", "--alg", "ES256", "--out", path.to_str().unwrap()])
        .output()
        .unwrap();
    ok(out, "keygen");
}

/// A token for team-a/builder (uid `u`) of `issuer` with the registry-auth audience,
/// signed with the key at `key` (not the cluster's).
fn mint_builder(key: &Path, issuer: &str) -> String {
    let out = Command::new(PODPASS)
        .args(["token", "mint", "--signing-key", key.to_str().unwrap(), "--issuer", issuer, "--audience", AUDIENCE])
        .args(["--namespace", "team-a", "--service-account", "builder", "--service-account-uid", "u"])
        .output()
        .unwrap();
    ok(out, "mint").trim().to_owned()
}

/// A ClusterRoleBinding `name` of `role` to one subject.
fn bind_cluster_role(s: &Server, name: &str, role: &str, kind: &str, subject: &str) {
    post(
        s,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": subject}]}),
    );
}

fn openssl(dir: &Path, args: &[&str]) {
    let st = Command::new("openssl").args(args).current_dir(dir).stderr(Stdio::null()).status().expect("openssl");
    assert!(st.success(), "openssl {args:?}");
}

/// A TokenRequest for `ns/sa` as the admin, optionally bound to an object.
fn token(s: &Server, ns: &str, sa: &str, audience: &str, bound: Option<(&str, &str, &str)>) -> String {
    let mut spec = json!({"audiences": [audience], "expirationSeconds": 600});
    if let Some((kind, name, uid)) = bound {
        spec["boundObjectRef"] = json!({"apiVersion": "v1", "kind": kind, "name": name, "uid": uid});
    }
    let answer = post(
        s,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token"),
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}),
    );
    answer["status"]["token"].as_str().unwrap().to_owned()
}

struct Cluster {
    s: Server,
    issuer: String,
    /// `(name, uid)` of the pods and nodes created.
    uids: std::collections::HashMap<String, String>,
}

/// An API server whose issuer anyone may discover, with team-a/web and team-b/web2 on node
/// n1 (each with its own `builder` service account), nodes n1 and n2, and nodes allowed
/// to ask for the registry-auth audience.
fn cluster(dir: &Path) -> Cluster {
    let data = dir.join("api");
    std::fs::create_dir_all(&data).unwrap();
    let s = start(&data, &[]);
    bind_cluster_role(
        &s,
        "anonymous-discovery",
        "system:service-account-issuer-discovery",
        "Group",
        "system:unauthenticated",
    );
    post(
        &s,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "registry-auth-audience"},
               "rules": [{"verbs": ["request-serviceaccounts-token-audience"], "apiGroups": [""], "resources": [AUDIENCE]}]}),
    );
    bind_cluster_role(&s, "nodes-registry-auth-audience", "registry-auth-audience", "Group", "system:nodes");
    let mut uids = std::collections::HashMap::new();
    for node in ["n1", "n2"] {
        let n = post(&s, "/api/v1/nodes", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}));
        uids.insert(node.to_owned(), n["metadata"]["uid"].as_str().unwrap().to_owned());
    }
    for (ns, pod) in [("team-a", "web"), ("team-b", "web2")] {
        post(&s, "/api/v1/namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
        wait_namespace_ready(&s, ns);
        post(
            &s,
            &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder"}}),
        );
        let p = post(
            &s,
            &format!("/api/v1/namespaces/{ns}/pods"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
                   "spec": {"serviceAccountName": "builder", "nodeName": "n1",
                            "containers": [{"name": "app", "image": "example/app:1"}]}}),
        );
        uids.insert(pod.to_owned(), p["metadata"]["uid"].as_str().unwrap().to_owned());
    }
    let discovery: Value =
        client(&s.dir).get(format!("{}/.well-known/openid-configuration", s.url)).send().unwrap().json().unwrap();
    let issuer = discovery["issuer"].as_str().unwrap().to_owned();
    Cluster { s, issuer, uids }
}

/// registry-auth on a free loopback port; waits until /healthz says every issuer's keys
/// are known.
fn registry_auth(dir: &Path, issuers: &[&str], ca: &Path, extra: &[&str]) -> (Proc, String) {
    registry_auth_with(dir, issuers, ca, extra, None)
}

/// [`registry_auth`]; with `tls_ca`, it serves HTTPS (the flags are in `extra`) and is
/// reached trusting that CA.
fn registry_auth_with(
    dir: &Path,
    issuers: &[&str],
    ca: &Path,
    extra: &[&str],
    tls_ca: Option<&Path>,
) -> (Proc, String) {
    std::fs::write(
        dir.join("policy.yaml"),
        concat!(
            "rules:\n- serviceAccount: {namespace: \"*\", name: \"*\"}\n  repositories: [\"{namespace}/*\"]\n  actions: [pull]\n",
            "- serviceAccount: {namespace: \"*\", name: \"*\", annotations: {podpass.dev/team: platform}}\n",
            "  repositories: [shared/base]\n  actions: [pull, push]\n",
        ),
    )
    .unwrap();
    let port = free_port();
    let mut cmd = Command::new(PODPASS);
    // Decision lines are debug (the audit log is the record); the span test reads them.
    cmd.env("RUST_LOG", "info,podpass_registry_auth=debug");
    cmd.args(["--log-format", "json", "registry-auth", "--listen", &format!("127.0.0.1:{port}")]);
    for i in issuers {
        cmd.args(["--issuer", i]);
    }
    cmd.args(["--issuer-ca", ca.to_str().unwrap(), "--audience", AUDIENCE])
        .args(["--policy", dir.join("policy.yaml").to_str().unwrap()])
        .args(["--signing-key", dir.join("signer.key").to_str().unwrap()])
        .args(["--registry-service", "registry.local"])
        .args(["--audit-log-path", dir.join("audit.log").to_str().unwrap()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("registry-auth.log")).unwrap());
    let child = Proc(cmd.spawn().unwrap());
    let url = format!("{}://127.0.0.1:{port}", if tls_ca.is_some() { "https" } else { "http" });
    let client = https_client(tls_ca, None);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !client.get(format!("{url}/healthz")).send().is_ok_and(|r| r.status() == 200) {
        assert!(
            Instant::now() < deadline,
            "registry-auth not healthy: {}",
            std::fs::read_to_string(dir.join("registry-auth.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (child, url)
}

/// A client trusting `ca` (else the default roots), presenting `identity` (PEM cert + key).
fn https_client(ca: Option<&Path>, identity: Option<&Path>) -> reqwest::blocking::Client {
    let mut b = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30));
    if let Some(ca) = ca {
        b = b.tls_certs_only([reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap()]);
    }
    if let Some(id) = identity {
        b = b.identity(reqwest::Identity::from_pem(&std::fs::read(id).unwrap()).unwrap());
    }
    b.build().unwrap()
}

/// The sum of the samples of `metrics` whose line starts with `prefix`.
fn metric_sum(metrics: &str, prefix: &str) -> f64 {
    metrics.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// registry-auth's audit events (its `--audit-log-path`, one JSON object per line).
/// Its writer thread appends each event just after the answer: read until two reads 50 ms
/// apart agree (at most 5 s).
fn audit_lines(dir: &Path) -> Vec<Value> {
    let read = || std::fs::read_to_string(dir.join("audit.log")).unwrap_or_default();
    let mut text = read();
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(50));
        let again = read();
        if again == text {
            break;
        }
        text = again;
    }
    text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).collect()
}

/// The kubelet's CredentialProviderConfig for the plugin in `mode`.
fn provider_config(dir: &Path, registry: &str, mode: &str, exchange_url: &str) -> PathBuf {
    let (args, cache) = match mode {
        "passthrough" => ("[\"--mode\", \"passthrough\"]".to_owned(), "Token"),
        _ => (format!("[\"--mode\", \"exchange\", \"--exchange-url\", \"{exchange_url}\"]"), "ServiceAccount"),
    };
    let text = format!(
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - name: podpass-credential-provider\n    apiVersion: credentialprovider.kubelet.k8s.io/v1\n    matchImages: [\"{registry}\"]\n    defaultCacheDuration: 10m\n    args: {args}\n    tokenAttributes:\n      serviceAccountTokenAudience: {AUDIENCE}\n      cacheType: {cache}\n      requireServiceAccount: true\n"
    );
    let path = dir.join(format!("provider-{mode}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn ensure_image(root: &Path, kubeconfig: &Path, config: &Path, bin: &Path, pod: &str, image: &str) -> Output {
    ensure_image_with(root, kubeconfig, config, bin, pod, image, &[])
}

fn ensure_image_with(
    root: &Path,
    kubeconfig: &Path,
    config: &Path,
    bin: &Path,
    pod: &str,
    image: &str,
    extra: &[&str],
) -> Output {
    Command::new(PODPASS)
        .args(["node", "ensure-image", "--root-dir", root.to_str().unwrap()])
        .args(extra)
        .args(["--kubeconfig", kubeconfig.to_str().unwrap(), "--pod", pod])
        .args(["--image-credential-provider-config", config.to_str().unwrap()])
        .args(["--image-credential-provider-bin-dir", bin.to_str().unwrap()])
        .arg(image)
        .output()
        .unwrap()
}

/// GET /token with `token` as the Basic password.
/// registry-auth in `dir` (signing with `d`'s key) that asks the cluster's TokenReview, as
/// its own identity bound to `system:auth-delegator` as upstream advises.
fn reviewed_registry_auth(c: &Cluster, d: &Path, dir: &Path) -> (Proc, String) {
    let reviewer = d.join("reviewer.kubeconfig");
    std::fs::write(&reviewer, ok(identity_output(&c.s.dir, "registry-auth", &[]), "reviewer kubeconfig")).unwrap();
    bind_cluster_role(&c.s, "registry-auth", "system:auth-delegator", "User", "registry-auth");
    std::fs::create_dir(dir).unwrap();
    std::fs::copy(d.join("signer.key"), dir.join("signer.key")).unwrap();
    let review = format!("{}={}", c.issuer, reviewer.display());
    registry_auth(dir, &[&c.issuer], &c.s.dir.join("pki/ca.crt"), &["--token-review-kubeconfig", &review])
}

fn get_token(url: &str, token: &str, scope: &str) -> reqwest::blocking::Response {
    reqwest::blocking::Client::new()
        .get(format!("{url}/token?service=registry.local&scope={scope}"))
        .basic_auth("anyone", Some(token))
        .send()
        .unwrap()
}

/// A token of the cluster's issuer and key, signed with PyJWT, that expired 10 minutes ago.
fn expired_token(c: &Cluster) -> String {
    let key = c.s.dir.join("sa.key");
    let out = Command::new(PODPASS).args(["token", "kid", "--key", key.to_str().unwrap()]).output().unwrap();
    let kid = ok(out, "kid").split_whitespace().nth(1).unwrap().to_owned();
    let script = r#"
import sys, time, jwt
key, kid, iss, aud = sys.argv[1:5]
now = int(time.time())
claims = {"aud": [aud], "exp": now - 600, "iat": now - 1200, "nbf": now - 1200, "iss": iss,
          "kubernetes.io": {"namespace": "team-a", "serviceaccount": {"name": "builder", "uid": "x"}},
          "sub": "system:serviceaccount:team-a:builder"}
print(jwt.encode(claims, open(key, "rb").read(), algorithm="ES256", headers={"kid": kid}))
"#;
    let out = Command::new("python3")
        .args(["-c", script, key.to_str().unwrap(), &kid, &c.issuer, AUDIENCE])
        .output()
        .unwrap();
    ok(out, "pyjwt").trim().to_owned()
}

/// Everything a pull needs: the cluster, registry-auth, a token-auth registry 2.8 whose
/// realm is registry-auth holding `team-a/app:v1`, the plugin in a bin dir, node n1's
/// kubeconfig.
struct Setup {
    c: Cluster,
    auth_url: String,
    host: String,
    image: String,
    bin: PathBuf,
    kubeconfig: PathBuf,
    _procs: Vec<Proc>,
    _plain: Registry,
}

/// An EC signing key (PKCS#8) and its self-signed certificate, `<dir>/<name>.key|.crt`.
fn signing_key(d: &Path, name: &str) {
    openssl(d, &["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", &format!("{name}.ec")]);
    openssl(d, &["pkcs8", "-topk8", "-nocrypt", "-in", &format!("{name}.ec"), "-out", &format!("{name}.key")]);
    openssl(
        d,
        &[
            "req",
            "-new",
            "-x509",
            "-key",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-days",
            "2",
            "-subj",
            "/CN=registry-auth",
        ],
    );
}

fn setup(d: &Path, auth_args: &[&str]) -> Setup {
    let c = cluster(d);
    signing_key(d, "signer");
    let (auth, auth_url) = registry_auth(d, &[&c.issuer], &c.s.dir.join("pki/ca.crt"), auth_args);

    // Images go in through an htpasswd registry; pods pull through a token-auth one over
    // the same storage whose realm is registry-auth.
    let plain = Registry::start(&d.join("reg-plain"), &[("admin", "pw")]);
    plain.push(("admin", "pw"), "team-a/app", "v1", "team-a's app");
    let (reg, host) = serve_token_auth(
        &d.join("reg-token"),
        &plain,
        &format!("{auth_url}/token"),
        "podpass-registry-auth",
        &d.join("signer.crt"),
    );
    let image = format!("{host}/team-a/app:v1");
    let bin = d.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::copy(plugin_bin(), bin.join("podpass-credential-provider")).unwrap();
    std::fs::set_permissions(bin.join("podpass-credential-provider"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let kubeconfig = node_kubeconfig(&c.s.dir, &d.join("n1.kubeconfig"));
    Setup { c, auth_url, host, image, bin, kubeconfig, _procs: vec![auth, Proc(reg)], _plain: plain }
}

#[test]
fn pods_pull_from_the_real_registry_with_their_own_identity_and_bad_tokens_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Setup { c, auth_url, host, image, bin, kubeconfig, .. } = &setup(d, &[]);
    let (c, auth_url, host, image, bin, kubeconfig) =
        (c, auth_url.as_str(), host.as_str(), image.as_str(), bin.as_path(), kubeconfig.as_path());

    // team-a/web pulls its namespace's image, in both modes, each on a fresh node root.
    for mode in ["passthrough", "exchange"] {
        let config = provider_config(d, host, mode, auth_url);
        let root = d.join(format!("root-{mode}"));
        let out = ensure_image(&root, kubeconfig, &config, bin, "team-a/web", image);
        let decision: Value = serde_json::from_str(&ok(out, &format!("ensure-image ({mode})"))).unwrap();
        assert_eq!(decision["pulled"], true, "{mode}: {decision}");
        // the pull record names the pod's service account, not a secret or the node
        let records: Vec<_> = std::fs::read_dir(root.join("image_manager/pulled")).unwrap().flatten().collect();
        assert_eq!(records.len(), 1, "{mode}");
        let record: Value = serde_json::from_slice(&std::fs::read(records[0].path()).unwrap()).unwrap();
        let text = record.to_string();
        assert!(text.contains("\"namespace\":\"team-a\"") && text.contains("\"name\":\"builder\""), "{mode}: {text}");

        // team-b's pod may not use team-a's repository: refused by the registry.
        let out = ensure_image(&root, kubeconfig, &config, bin, "team-b/web2", image);
        assert!(!out.status.success(), "{mode}: team-b pulled team-a/app");
        let refused: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(refused["error"], "ErrImagePull", "{mode}: {refused}");
    }

    // What the registry says to team-b's token: a 200 with no access, then insufficient_scope.
    let team_b = token(&c.s, "team-b", "builder", AUDIENCE, None);
    let resp = get_token(auth_url, &team_b, "repository:team-a/app:pull");
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().unwrap();
    assert_eq!(answer["token"], answer["access_token"]);
    assert_eq!(answer["scope"], "");
    let registry_token = answer["token"].as_str().unwrap();
    let resp = reqwest::blocking::Client::new()
        .get(format!("http://{host}/v2/team-a/app/manifests/v1"))
        .bearer_auth(registry_token)
        .header("accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 401);
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(challenge.contains("error=\"insufficient_scope\""), "{challenge}");

    // Refused, each with 401 and a reason: another audience, an untrusted issuer, the right
    // issuer with another key, an expired token.
    let other_audience = token(&c.s, "team-a", "builder", "another-audience", None);
    let keydir = d.join("rogue");
    std::fs::create_dir(&keydir).unwrap();
    let rogue_key = keydir.join("k.pem");
    keygen(&rogue_key);
    let mint = |issuer: &str| mint_builder(&rogue_key, issuer);
    for (what, bad, expected) in [
        ("another audience", other_audience, "audiences"),
        ("an untrusted issuer", mint("https://rogue.example"), "not trusted"),
        ("the issuer's name with another key", mint(&c.issuer), "invalid signature"),
        ("an expired token", expired_token(c), "expired"),
    ] {
        let resp = get_token(auth_url, &bad, "repository:team-a/app:pull");
        assert_eq!(resp.status(), 401, "{what}");
        assert!(resp.headers().contains_key("www-authenticate"), "{what}");
        let body = resp.text().unwrap();
        assert!(body.contains(expected), "{what}: {body}");
    }

    // A node-bound service-account token is no proof of a node (any tenant can mint one for
    // its own service account): the parameter itself is refused, so no client relies on it.
    let web = token(&c.s, "team-a", "builder", AUDIENCE, Some(("Pod", "web", &c.uids["web"])));
    let tenants_node_token = token(&c.s, "team-b", "builder", AUDIENCE, Some(("Node", "n1", &c.uids["n1"])));
    let resp = reqwest::blocking::Client::new()
        .post(format!("{auth_url}/token"))
        .form(&[
            ("grant_type", "password"),
            ("username", "x"),
            ("password", &web),
            ("service", "registry.local"),
            ("scope", "repository:team-a/app:pull"),
            ("node_token", &tenants_node_token),
        ])
        .send()
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body = resp.text().unwrap();
    assert!(body.contains("node_token is not accepted as a node's proof"), "{body}");

    // Malformed requests are 400 with an OAuth2 code.
    let resp = reqwest::blocking::Client::new()
        .post(format!("{auth_url}/token"))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert!(resp.text().unwrap().contains("unsupported_grant_type"));

    // Every decision is counted.
    let metrics = reqwest::blocking::get(format!("{auth_url}/metrics")).unwrap().text().unwrap();
    assert!(
        metrics.contains(r#"podpass_registry_auth_token_requests_total{outcome="refused",reason="expired"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"podpass_registry_auth_jwks_fetches_total{issuer=""#), "{metrics}");
    // ... and audited: the exchange-mode pull came back with the exchange token.
    let audit = audit_lines(d);
    let exchanged = audit.iter().find(|l| l["credential"] == "exchange-token").expect("an exchange-token grant");
    assert_eq!(exchanged["service_account"], "team-a/builder");
    assert_eq!(exchanged["scope_granted"], "repository:team-a/app:pull");
    assert!(audit.iter().any(|l| l["decision"] == "denied" && l["service_account"] == "team-b/builder"));
    // Its log lines carry the exchange's span: what was asked and whose token it was.
    let log = std::fs::read_to_string(d.join("registry-auth.log")).unwrap();
    let granted = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["fields"]["message"] == "token granted" && l["span"]["service_account"] == "team-a/builder")
        .unwrap_or_else(|| panic!("no 'token granted' line in an exchange span:\n{log}"));
    assert_eq!(granted["span"]["name"], "exchange");
    assert!(granted["span"]["issuer"].as_str().is_some_and(|i| i.starts_with("https://")), "{granted}");
    assert!(granted["span"]["scope"].as_str().is_some_and(|s| s.contains("team-a/app")), "{granted}");
}

#[test]
fn containerd_pulls_through_registry_auth_with_the_plugin_in_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = setup(d, &[]);
    let ctd = containerd::Containerd::start(&d.join("ctd"));
    for mode in ["passthrough", "exchange"] {
        let config = provider_config(d, &s.host, mode, &s.auth_url);
        let root = d.join(format!("root-{mode}"));
        // Always: containerd holds the image after the first mode; each mode must pull.
        let extra = ["--container-runtime-endpoint", ctd.endpoint.as_str(), "--pull-policy", "Always"];
        let out = ensure_image_with(&root, &s.kubeconfig, &config, &s.bin, "team-a/web", &s.image, &extra);
        let decision: Value = serde_json::from_str(&ok(out, &format!("ensure-image on containerd ({mode})"))).unwrap();
        assert_eq!(decision["pulled"], true, "{mode}: {decision}");
        let out = ensure_image_with(&root, &s.kubeconfig, &config, &s.bin, "team-b/web2", &s.image, &extra);
        assert!(!out.status.success(), "{mode}: team-b pulled team-a/app through containerd");
    }
    // containerd POSTs the password grant (interop.md §2): the pod's token, then the
    // exchange token.
    let audit = audit_lines(d);
    for credential in ["serviceaccount-token", "exchange-token"] {
        assert!(
            audit.iter().any(|l| l["via"] == "password"
                && l["credential"] == credential
                && l["decision"] == "granted"
                && l["service_account"] == "team-a/builder"),
            "no granted POST password grant with a {credential}: {audit:?}"
        );
    }
    assert!(
        audit
            .iter()
            .any(|l| l["via"] == "password" && l["decision"] == "denied" && l["service_account"] == "team-b/builder")
    );
}

#[test]
fn one_registry_auth_serves_two_clusters_picks_up_key_rotation_and_outlasts_unknown_kid_floods() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = cluster(&d.join("a"));
    let b = cluster(&d.join("b"));
    assert_ne!(a.issuer, b.issuer);
    let bundle = d.join("issuers-ca.pem");
    let mut pem = std::fs::read(a.s.dir.join("pki/ca.crt")).unwrap();
    pem.extend(std::fs::read(b.s.dir.join("pki/ca.crt")).unwrap());
    std::fs::write(&bundle, pem).unwrap();
    signing_key(d, "signer");
    let (_auth, url) = registry_auth(d, &[&a.issuer, &b.issuer], &bundle, &["--jwks-min-refetch-interval", "2s"]);
    let granted = |token: &str| -> Option<String> {
        let resp = get_token(&url, token, "repository:team-a/app:pull");
        (resp.status() == 200).then(|| resp.json::<Value>().unwrap()["scope"].as_str().unwrap().to_owned())
    };

    // Both clusters' team-a/builder may pull team-a/*: one service, two issuers, two keys.
    for c in [&a, &b] {
        let t = token(&c.s, "team-a", "builder", AUDIENCE, None);
        assert_eq!(granted(&t).as_deref(), Some("repository:team-a/app:pull"), "{}", c.issuer);
    }
    let issuers: Vec<String> = audit_lines(d).iter().map(|l| l["issuer"].as_str().unwrap_or("").to_owned()).collect();
    assert!(issuers.contains(&a.issuer) && issuers.contains(&b.issuer), "{issuers:?}");

    // 64 requests at once with a kid cluster A never published: all refused, and at most
    // one fetch of A's keys per 2 s interval (the burst takes less than two intervals).
    // One address may have 32 exchanges in flight before its credential verifies, so on a
    // loaded machine part of the burst is throttled (429) instead: never granted, and the
    // first 32 at least reach the keys and are refused for them.
    let rogue = d.join("rogue.pem");
    keygen(&rogue);
    let unknown_kid = mint_builder(&rogue, &a.issuer);
    let fetches = |url: &str, issuer: &str| {
        let m = reqwest::blocking::get(format!("{url}/metrics")).unwrap().text().unwrap();
        metric_sum(&m, &format!("podpass_registry_auth_jwks_fetches_total{{issuer=\"{issuer}\""))
    };
    let before = fetches(&url, &a.issuer);
    let started = Instant::now();
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..64)
            .map(|_| scope.spawn(|| get_token(&url, &unknown_kid, "repository:team-a/app:pull").status().as_u16()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let took = started.elapsed();
    assert!(statuses.iter().all(|s| *s == 401 || *s == 429), "{statuses:?}");
    assert!(statuses.iter().filter(|s| **s == 401).count() >= 32, "{statuses:?}");
    let fetched = fetches(&url, &a.issuer) - before;
    let allowed = 1.0 + (took.as_secs_f64() / 2.0).floor();
    assert!(fetched <= allowed, "{fetched} fetches for 64 unknown-kid requests in {took:?}");

    // Cluster A rotates its signing key (the old one still verifies): a token signed with
    // the new key is accepted without restarting registry-auth, and old tokens still are.
    let old_token = token(&a.s, "team-a", "builder", AUDIENCE, None);
    let Cluster { s, issuer, .. } = a;
    let data = s.dir.clone();
    let port = s.url.rsplit(':').next().unwrap().trim_end_matches('/').to_owned();
    drop(s);
    let new_key = d.join("a-new.pem");
    keygen(&new_key);
    let old_key = data.join("sa.key");
    let s = start_on(
        &data,
        &port,
        &[
            "--service-account-signing-key-file",
            new_key.to_str().unwrap(),
            "--service-account-key-file",
            old_key.to_str().unwrap(),
        ],
    );
    let new_token = token(&s, "team-a", "builder", AUDIENCE, None);
    assert_ne!(new_token.split('.').next(), old_token.split('.').next(), "the kid changed");
    let deadline = Instant::now() + Duration::from_secs(15);
    while granted(&new_token).is_none() {
        assert!(Instant::now() < deadline, "the rotated key of {issuer} was not picked up");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(granted(&old_token).as_deref(), Some("repository:team-a/app:pull"));
}

#[test]
fn node_proof_is_the_nodes_client_certificate_and_forged_annotations_grant_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = cluster(d);
    signing_key(d, "signer");
    // A CA for registry-auth's serving certificate and the nodes' client certificates.
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=test-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    let issue = |name: &str, subject: &str, ext: &str| {
        std::fs::write(d.join(format!("{name}.ext")), ext).unwrap();
        openssl(
            d,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                subject,
            ],
        );
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{name}.crt"),
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
            ],
        );
        let mut pem = std::fs::read(d.join(format!("{name}.crt"))).unwrap();
        pem.extend(std::fs::read(d.join(format!("{name}.key"))).unwrap());
        std::fs::write(d.join(format!("{name}.pem")), pem).unwrap();
    };
    issue("server", "/CN=registry-auth", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
    issue("n1", "/O=system:nodes/CN=system:node:n1", "extendedKeyUsage=clientAuth\n");
    issue("n2", "/O=system:nodes/CN=system:node:n2", "extendedKeyUsage=clientAuth\n");
    // Its reviewer follows the cluster's nodes, so a proof of a deleted node is refused.
    let reviewer = d.join("reviewer.kubeconfig");
    std::fs::write(&reviewer, ok(identity_output(&c.s.dir, "registry-auth", &[]), "reviewer kubeconfig")).unwrap();
    bind_cluster_role(&c.s, "registry-auth", "system:auth-delegator", "User", "registry-auth");
    post(
        &c.s,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "registry-auth-watches"},
               "rules": [{"apiGroups": [""], "resources": ["pods", "serviceaccounts", "nodes"], "verbs": ["get", "list", "watch"]}]}),
    );
    bind_cluster_role(&c.s, "registry-auth-watches", "registry-auth-watches", "User", "registry-auth");
    let review = format!("{}={}", c.issuer, reviewer.display());
    let (_auth, url) = registry_auth_with(
        d,
        &[&c.issuer],
        &c.s.dir.join("pki/ca.crt"),
        &[
            "--token-review-kubeconfig",
            &review,
            "--tls-cert-file",
            d.join("server.crt").to_str().unwrap(),
            "--tls-private-key-file",
            d.join("server.key").to_str().unwrap(),
            "--client-ca-file",
            d.join("ca.crt").to_str().unwrap(),
            "--node-binding",
            "require",
        ],
        Some(&d.join("ca.crt")),
    );
    let web = token(&c.s, "team-a", "builder", AUDIENCE, Some(("Pod", "web", &c.uids["web"])));
    let ask = |identity: Option<&str>, token: &str| {
        let client = https_client(Some(&d.join("ca.crt")), identity.map(|n| d.join(format!("{n}.pem"))).as_deref());
        let resp = client
            .get(format!("{url}/token?service=registry.local&scope=repository:team-a/app:pull"))
            .basic_auth("x", Some(token))
            .send()
            .unwrap();
        (resp.status().as_u16(), resp.text().unwrap())
    };
    let (status, body) = ask(Some("n1"), &web);
    assert_eq!(status, 200, "{body}");
    let (status, body) = ask(Some("n2"), &web);
    assert_eq!(status, 401);
    assert!(body.contains(r#"bound to node \"n1\" but the request proves node \"n2\""#), "{body}");
    let (status, body) = ask(None, &web);
    assert_eq!(status, 401);
    assert!(body.contains("present that node's client certificate"), "{body}");
    // A token that names no node needs no proof.
    let unbound = token(&c.s, "team-a", "builder", AUDIENCE, None);
    assert_eq!(ask(None, &unbound).0, 200);

    // Forged annotations: team-b claims `podpass.dev/team: platform` (a rule grants that
    // push to shared/base). Only the node, proven by its certificate, forwards annotations.
    let team_b = token(&c.s, "team-b", "builder", AUDIENCE, None);
    let post_form = |identity: Option<&str>, form: &[(&str, &str)]| -> (u16, Value) {
        let client = https_client(Some(&d.join("ca.crt")), identity.map(|n| d.join(format!("{n}.pem"))).as_deref());
        let resp = client.post(format!("{url}/token")).form(form).send().unwrap();
        (resp.status().as_u16(), resp.json().unwrap())
    };
    let scope = "repository:shared/base:pull,push";
    let forged = [
        ("grant_type", "password"),
        ("password", team_b.as_str()),
        ("service", "registry.local"),
        ("scope", scope),
        ("annotation", "podpass.dev/team=platform"),
        ("access_type", "offline"),
    ];
    let (status, answer) = post_form(None, &forged);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["scope"], "", "annotations without a node certificate were honoured: {answer}");
    let last = audit_lines(d).pop().unwrap();
    assert_eq!(last["node_proof"], "none", "{last}");
    assert_eq!(last["annotations"], "", "{last}");
    // ... and its refresh token carries only what was proven: nothing, even from the node.
    let refresh = answer["refresh_token"].as_str().unwrap().to_owned();
    let refreshed = [("grant_type", "refresh_token"), ("refresh_token", refresh.as_str()), ("scope", scope)];
    let (status, answer) = post_form(Some("n1"), &refreshed);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["scope"], "", "{answer}");
    // The same annotation forwarded by node n1 (its certificate) is the node's word.
    let (status, answer) = post_form(Some("n1"), &forged);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["scope"], scope, "{answer}");
    let last = audit_lines(d).pop().unwrap();
    assert_eq!(last["node_proof"], "certificate:n1", "{last}");
    assert_eq!(last["annotations"], "podpass.dev/team", "{last}");

    // n1 deleted from the cluster: its certificate, still valid, proves nothing any more.
    let resp = client(&c.s.dir)
        .delete(format!("{}/api/v1/nodes/n1", c.s.url))
        .bearer_auth(admin_token(&c.s.dir))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let refused = wait_for("n1's proof refused once n1 is gone", Duration::from_secs(30), || {
        let (status, answer) = post_form(Some("n1"), &forged);
        (status == 401).then_some(answer)
    });
    let said = refused.to_string();
    assert!(said.contains(r#"proves node \"n1\", which no longer exists"#), "{said}");
    let last = audit_lines(d).pop().unwrap();
    assert_eq!(last["reason"], "node_deleted", "{last}");
    // n2, still there, is still the node it proves.
    let (status, answer) = post_form(Some("n2"), &forged);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["scope"], scope, "{answer}");
}

#[test]
fn token_review_refuses_the_token_of_a_deleted_pod_that_a_signature_alone_would_accept() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = cluster(d);
    signing_key(d, "signer");
    let ca = c.s.dir.join("pki/ca.crt");
    let reviewed_dir = d.join("reviewed");
    let (_reviewed, reviewed) = reviewed_registry_auth(&c, d, &reviewed_dir);
    let (_plain, plain) = registry_auth(d, &[&c.issuer], &ca, &[]);
    let scope = "repository:team-a/app:pull";

    // A live pod's token: reviewed once, then from the cache.
    let web = token(&c.s, "team-a", "builder", AUDIENCE, Some(("Pod", "web", &c.uids["web"])));
    for _ in 0..2 {
        let resp = get_token(&reviewed, &web, scope);
        assert_eq!(resp.status(), 200, "{}", resp.text().unwrap());
    }
    let reviews: Vec<String> =
        audit_lines(&reviewed_dir).iter().map(|l| l["token_review"].as_str().unwrap_or_default().to_owned()).collect();
    assert_eq!(reviews, ["reviewed", "cached"]);

    // A pod deleted after its token was issued: the signature is still good, the cluster
    // says no.
    let gone = post(
        &c.s,
        "/api/v1/namespaces/team-a/pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gone"},
               "spec": {"serviceAccountName": "builder", "nodeName": "n1", "containers": [{"name": "app", "image": "example/app:1"}]}}),
    );
    let stolen =
        token(&c.s, "team-a", "builder", AUDIENCE, Some(("Pod", "gone", gone["metadata"]["uid"].as_str().unwrap())));
    let resp = client(&c.s.dir)
        .delete(format!("{}/api/v1/namespaces/team-a/pods/gone?gracePeriodSeconds=0", c.s.url))
        .bearer_auth(admin_token(&c.s.dir))
        .send()
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.text().unwrap());
    assert_eq!(get_token(&plain, &stolen, scope).status(), 200, "without TokenReview the signature is all there is");
    let resp = get_token(&reviewed, &stolen, scope);
    assert_eq!(resp.status(), 401);
    assert!(resp.headers().contains_key("www-authenticate"));
    let body = resp.text().unwrap();
    assert!(body.contains("TokenReview"), "{body}");
    let last = audit_lines(&reviewed_dir).pop().unwrap();
    assert_eq!(last["reason"], "token_review", "{last}");
    let metrics = reqwest::blocking::get(format!("{reviewed}/metrics")).unwrap().text().unwrap();
    assert_eq!(
        metric_sum(&metrics, r#"podpass_registry_auth_token_requests_total{outcome="refused",reason="token_review"}"#),
        1.0
    );

    // A reviewer the cluster does not allow to review: nothing is granted (503), the
    // message says what to bind.
    let outsider = d.join("outsider.kubeconfig");
    std::fs::write(&outsider, ok(identity_output(&c.s.dir, "outsider", &[]), "outsider kubeconfig")).unwrap();
    let denied_dir = d.join("denied");
    std::fs::create_dir(&denied_dir).unwrap();
    std::fs::copy(d.join("signer.key"), denied_dir.join("signer.key")).unwrap();
    let (_denied, denied) =
        registry_auth(&denied_dir, &[&c.issuer], &ca, &["--token-review-kubeconfig", outsider.to_str().unwrap()]);
    let resp = get_token(&denied, &web, scope);
    assert_eq!(resp.status(), 503);
    assert!(resp.text().unwrap().contains("system:auth-delegator"));
}

#[test]
fn every_configuration_problem_is_listed_at_once_and_nothing_is_bound() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("policy.yaml"),
        "rules:\n- serviceAccount: {namespace: a}\n  repositories: []\n  actions: [pul]\n",
    )
    .unwrap();
    std::fs::write(d.join("kubeconfig"), "current-context: nowhere\n").unwrap();
    let port = free_port();
    let out = Command::new(PODPASS)
        .args(["registry-auth", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--issuer", "http://plain.example", "--issuer", "https://a.example"])
        .args(["--audience", "aud", "--registry-service", "registry.local"])
        .args(["--policy", d.join("policy.yaml").to_str().unwrap()])
        .args(["--signing-key", d.join("missing.key").to_str().unwrap()])
        .args(["--token-ttl", "2h"])
        .args(["--token-review-kubeconfig", d.join("kubeconfig").to_str().unwrap()])
        .args(["--token-review-kubeconfig", &format!("https://b.example={}", d.join("kubeconfig").display())])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "--issuer \"http://plain.example\": must be an https:// URL",
        "--token-ttl: must be between 1s and 1h",
        "policy.yaml: rules[0].serviceAccount: missing field `name`",
        "--signing-key",
        "name the issuer (ISSUER=PATH) when several are trusted",
        "issuer \"https://b.example\" is not an --issuer",
    ] {
        assert!(stderr.contains(expected), "missing {expected:?} in:\n{stderr}");
    }
    std::net::TcpListener::bind(("127.0.0.1", port)).expect("nothing was bound");

    // One issuer: the plain path form is that issuer's, and the kubeconfig is checked.
    let out = Command::new(PODPASS)
        .args(["registry-auth", "--issuer", "https://a.example", "--audience", "aud"])
        .args(["--registry-service", "r", "--policy", d.join("policy.yaml").to_str().unwrap()])
        .args(["--signing-key", d.join("missing.key").to_str().unwrap()])
        .args(["--token-review-kubeconfig", d.join("kubeconfig").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("current-context \"nowhere\": no such context"), "{stderr}");
}

/// Connects to `port` on 127.0.0.1 from the loopback address `from` (all of 127/8 is
/// loopback on Linux: each `from` is another client).
fn connect_from(from: &str, port: u16) -> std::io::Result<std::net::TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.bind(&std::net::SocketAddr::new(from.parse().unwrap(), 0).into())?;
    socket.connect_timeout(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into(), Duration::from_secs(5))?;
    Ok(socket.into())
}

/// A GET of `path` from `from`, `connection: close`: the status line, or the error.
fn get_from(from: &str, port: u16, path: &str) -> Result<String, String> {
    use std::io::{Read, Write};
    let mut s = connect_from(from, port).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    out.lines().next().map(str::to_owned).ok_or_else(|| "closed without an answer".into())
}

#[test]
fn bodies_that_never_arrive_hold_no_slot_past_the_request_timeout_and_one_client_cannot_take_every_slot() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = cluster(d);
    signing_key(d, "signer");
    let (_auth, url) = registry_auth(d, &[&c.issuer], &c.s.dir.join("pki/ca.crt"), &["--request-timeout", "10s"]);
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();

    // 1000 connections from one client, each announcing a 1000-byte form and sending 11.
    let mut slow = Vec::new();
    for _ in 0..1000 {
        let mut s = connect_from("127.0.0.1", port).unwrap();
        let _ = s.write_all(
            b"POST /token HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: 1000\r\n\r\ngrant_type=",
        );
        slow.push(s);
    }
    // Meanwhile every other client is served at once: health and a real token exchange.
    assert_eq!(get_from("127.0.0.2", port, "/healthz").unwrap(), "HTTP/1.1 200 OK");
    let team_a = token(&c.s, "team-a", "builder", AUDIENCE, None);
    let socket = "127.0.0.3".parse::<std::net::IpAddr>().unwrap();
    let resp = reqwest::blocking::Client::builder()
        .local_address(socket)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(format!("{url}/token?service=registry.local&scope=repository:team-a/app:pull"))
        .basic_auth("x", Some(&team_a))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200, "another client's exchange during the flood");
    // ... while the flood still holds its share: its first connection is still open.
    slow[0].set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let still_open = matches!(slow[0].read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    assert!(still_open, "the others were served only once the flood's connections were gone");
    slow[0].set_nonblocking(false).unwrap();

    // Each slow connection is closed: past its client's share at once, within its share
    // after the request timeout with a 408.
    let (mut timed_out, mut refused) = (0, 0);
    for mut s in slow {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        if out.starts_with("HTTP/1.1 408") {
            timed_out += 1;
        } else {
            assert!(out.is_empty(), "{out}");
            refused += 1;
        }
    }
    assert_eq!(timed_out, 250, "the client's share (a quarter of 1000) was served, then timed out");
    assert_eq!(refused, 750);
    // The flooding client is served again once its connections are gone.
    assert_eq!(get_from("127.0.0.1", port, "/healthz").unwrap(), "HTTP/1.1 200 OK");
}

#[test]
fn a_legacy_secret_token_is_refused_though_the_cluster_accepts_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = cluster(d);
    signing_key(d, "signer");
    post(
        &c.s,
        "/api/v1/namespaces/team-a/secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
               "metadata": {"name": "builder-token", "annotations": {"kubernetes.io/service-account.name": "builder"}}}),
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    let legacy = loop {
        let secret: Value = client(&c.s.dir)
            .get(format!("{}/api/v1/namespaces/team-a/secrets/builder-token", c.s.url))
            .bearer_auth(admin_token(&c.s.dir))
            .send()
            .unwrap()
            .json()
            .unwrap();
        if let Some(t) = secret["data"]["token"].as_str() {
            break String::from_utf8(data_encoding::BASE64.decode(t.as_bytes()).unwrap()).unwrap();
        }
        assert!(Instant::now() < deadline, "the tokens controller never filled the secret: {secret}");
        std::thread::sleep(Duration::from_millis(50));
    };
    // The cluster accepts it for its own audiences...
    let review = post(
        &c.s,
        "/apis/authentication.k8s.io/v1/tokenreviews",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": legacy}}),
    );
    assert_eq!(review["status"]["authenticated"], true, "{review}");
    // ... and for no other: it carries no audience, so it is not a registry-auth token.
    let review = post(
        &c.s,
        "/apis/authentication.k8s.io/v1/tokenreviews",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
               "spec": {"token": legacy, "audiences": [AUDIENCE]}}),
    );
    assert_eq!(review["status"]["authenticated"], false, "{review}");
    // registry-auth trusts the cluster's issuer only, never the legacy one: refused, with
    // or without a TokenReview behind it.
    let ca = c.s.dir.join("pki/ca.crt");
    let (_plain, plain) = registry_auth(d, &[&c.issuer], &ca, &[]);
    let reviewed_dir = d.join("reviewed");
    let (_reviewed, reviewed) = reviewed_registry_auth(&c, d, &reviewed_dir);
    for url in [&plain, &reviewed] {
        let resp = get_token(url, &legacy, "repository:team-a/app:pull");
        assert_eq!(resp.status(), 401, "{url}: {}", resp.text().unwrap());
    }
    for audit in [d, reviewed_dir.as_path()] {
        let refused = audit_lines(audit).pop().unwrap();
        assert_eq!(refused["reason"], "issuer", "{refused}");
    }
}

#[test]
fn bench_registry_auth_runs_and_reports_the_audit_cost() {
    // A smoke run: the bench must keep working (a renamed request kind once broke it
    // unnoticed); its figures are read by people, not asserted.
    let out = std::process::Command::new(PODPASS)
        .args(["bench", "registry-auth", "--clients", "2", "--seconds", "0.3", "--revocations", "3"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for line in [
        "raw ES256 verify+sign pair",
        "token exchange (GET)",
        "the audit costs",
        "revocation by jti, 3 tokens",
        "API server (TokenReview) p50",
        "registry-auth (exchange) p50",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in\n{stdout}");
    }
}

#[test]
fn idle_connections_of_a_loopback_client_never_stop_a_pods_pull() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Setup { c, auth_url, host, image, bin, kubeconfig, .. } = &setup(d, &[]);
    let port: u16 = auth_url.rsplit(':').next().unwrap().parse().unwrap();
    // 300 idle connections from 127.0.0.1, past its 250-connection share: every loopback
    // client (the node's plugin and the registry among them) shares that address.
    let idle: Vec<std::net::TcpStream> = (0..300).filter_map(|_| connect_from("127.0.0.1", port).ok()).collect();
    assert_eq!(idle.len(), 300);
    // A pod's pull goes through: the plugin's exchange and the registry's token fetch each
    // take the place of the oldest idle connection.
    for mode in ["passthrough", "exchange"] {
        let config = provider_config(d, host, mode, auth_url);
        let root = d.join(format!("root-{mode}"));
        let out = ensure_image(&root, kubeconfig, &config, bin, "team-a/web", image);
        let decision: Value = serde_json::from_str(&ok(out, &format!("ensure-image ({mode})"))).unwrap();
        assert_eq!(decision["pulled"], true, "{mode}: {decision}");
    }
    // And a direct exchange from the same address is served.
    let team_a = token(&c.s, "team-a", "builder", AUDIENCE, None);
    let resp = reqwest::blocking::Client::builder()
        .local_address("127.0.0.1".parse::<std::net::IpAddr>().unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(format!("{auth_url}/token?service=registry.local&scope=repository:team-a/app:pull"))
        .basic_auth("x", Some(&team_a))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200, "an exchange from a loopback client behind 300 idle connections");
    drop(idle);
}

/// A TokenReview endpoint (plain HTTP on loopback) that authenticates every token as the
/// service account its claims name, at once for team-a and, for team-b, only once the test
/// lets go: team-b's exchanges stay in flight for as long as the test needs them to.
struct StallingReviewer {
    url: String,
    team_b_waiting: Arc<std::sync::atomic::AtomicUsize>,
    release: Arc<std::sync::atomic::AtomicBool>,
}

fn stalling_reviewer() -> StallingReviewer {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::atomic::Ordering;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let team_b_waiting = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (waiting, released) = (Arc::clone(&team_b_waiting), Arc::clone(&release));
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let (waiting, released) = (Arc::clone(&waiting), Arc::clone(&released));
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut conn = conn;
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some((k, v)) = line.split_once(':')
                            && k.eq_ignore_ascii_case("content-length")
                        {
                            length = v.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let review: Value = serde_json::from_slice(&body).unwrap();
                    let token = review["spec"]["token"].as_str().unwrap();
                    let payload = token.split('.').nth(1).unwrap();
                    let claims: Value =
                        serde_json::from_slice(&data_encoding::BASE64URL_NOPAD.decode(payload.as_bytes()).unwrap())
                            .unwrap();
                    let sub = claims["sub"].as_str().unwrap().to_owned();
                    if sub.starts_with("system:serviceaccount:team-b:") {
                        waiting.fetch_add(1, Ordering::SeqCst);
                        let deadline = Instant::now() + Duration::from_secs(60);
                        while !released.load(Ordering::SeqCst) && Instant::now() < deadline {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                    let answer = json!({
                        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": review["spec"],
                        "status": {"authenticated": true, "audiences": review["spec"]["audiences"],
                                   "user": {"username": sub, "uid": claims["kubernetes.io"]["serviceaccount"]["uid"]}},
                    })
                    .to_string();
                    let head = format!(
                        "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        answer.len()
                    );
                    if conn.write_all(head.as_bytes()).and_then(|()| conn.write_all(answer.as_bytes())).is_err() {
                        return;
                    }
                }
            });
        }
    });
    StallingReviewer { url, team_b_waiting, release }
}

#[test]
fn one_service_account_holding_its_share_of_exchanges_in_flight_is_refused_and_nobody_else_waits() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = cluster(d);
    signing_key(d, "signer");
    let reviewer = stalling_reviewer();
    let kubeconfig = d.join("stalling.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster: {{server: \"{}\"}}\n\
             users:\n- name: u\n  user: {{token: reviewer}}\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\n",
            reviewer.url
        ),
    )
    .unwrap();
    let review = format!("{}={}", c.issuer, kubeconfig.display());
    let (_auth, url) =
        registry_auth(d, &[&c.issuer], &c.s.dir.join("pki/ca.crt"), &["--token-review-kubeconfig", &review]);
    // team-b holds its whole share (32) in flight, each exchange with a token of its own
    // (one token's concurrent reviews would share one round trip).
    let share = 32;
    let held: Vec<_> = (0..share)
        .map(|_| {
            let (url, t) = (url.clone(), token(&c.s, "team-b", "builder", AUDIENCE, None));
            std::thread::spawn(move || get_token(&url, &t, "repository:team-b/app:pull").status().as_u16())
        })
        .collect();
    wait_for("team-b's exchanges to be in review", Duration::from_secs(30), || {
        (reviewer.team_b_waiting.load(Ordering::SeqCst) == share).then_some(Value::Bool(true))
    });
    // One more of team-b's is refused at once, as upstream's fairness answers: 429 and when
    // to come back.
    let resp = get_token(&url, &token(&c.s, "team-b", "builder", AUDIENCE, None), "repository:team-b/app:pull");
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    // team-a, from the same address, is served meanwhile.
    let resp = get_token(&url, &token(&c.s, "team-a", "builder", AUDIENCE, None), "repository:team-a/app:pull");
    assert_eq!(resp.status(), 200, "{}", resp.text().unwrap());
    reviewer.release.store(true, Ordering::SeqCst);
    for h in held {
        assert_eq!(h.join().unwrap(), 200, "a held exchange completes once its review answers");
    }
    let throttled = audit_lines(d).into_iter().filter(|l| l["decision"] == "throttled").collect::<Vec<_>>();
    assert_eq!(throttled.len(), 1, "{throttled:?}");
    assert_eq!(throttled[0]["reason"], "in_flight_identity");
}

/// A registry-auth reviewing `c`'s tokens through a user granted `rules` (beside
/// `system:auth-delegator`); the process, its URL and its directory.
fn watching_registry_auth(c: &Cluster, d: &Path, rules: Value) -> (Proc, String, PathBuf) {
    post(
        &c.s,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "registry-auth-watches"},
               "rules": rules}),
    );
    bind_cluster_role(&c.s, "registry-auth-watches", "registry-auth-watches", "User", "registry-auth");
    let reviewed_dir = d.join("reviewed");
    let (reviewed, url) = reviewed_registry_auth(c, d, &reviewed_dir);
    (reviewed, url, reviewed_dir)
}

/// An exchange token made from `token` (granted `scope`), checked to be granted in turn.
fn exchange_token(url: &str, token: &str, scope: &str) -> String {
    let resp = reqwest::blocking::Client::new()
        .get(format!("{url}/token?service=registry.local&scope={scope}&offline_token=true"))
        .basic_auth("anyone", Some(token))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let exchange = resp.json::<Value>().unwrap()["refresh_token"].as_str().unwrap().to_owned();
    assert_eq!(get_token(url, &exchange, scope).status(), 200);
    exchange
}

#[test]
fn a_revoked_jti_is_refused_by_registry_auth_at_once_with_every_exchange_token_made_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = cluster(d);
    signing_key(d, "signer");
    // registry-auth's reviewer may follow the cluster's revocations (and check the
    // service accounts and pods of exchange tokens).
    let rules = json!([{"apiGroups": ["revocation.podpass.dev"], "resources": ["revokedtokens"], "verbs": ["list", "watch"]},
                       {"apiGroups": [""], "resources": ["serviceaccounts", "pods"], "verbs": ["get"]}]);
    let (_reviewed, url, reviewed_dir) = watching_registry_auth(&c, d, rules);
    let scope = "repository:team-a/app:pull";

    let leaked = token(&c.s, "team-a", "builder", AUDIENCE, Some(("Pod", "web", &c.uids["web"])));
    let other = token(&c.s, "team-a", "builder", AUDIENCE, Some(("Pod", "web", &c.uids["web"])));
    // Granted (then from the review cache), and an exchange token made from it.
    assert_eq!(get_token(&url, &leaked, scope).status(), 200);
    let exchange = exchange_token(&url, &leaked, scope);

    let jti = jwt_claims(&leaked)["jti"].as_str().unwrap().to_owned();
    let exp = jwt_claims(&leaked)["exp"].as_i64().unwrap();
    let until = String::from_utf8(
        Command::new("date").args(["-u", "-d", &format!("@{exp}"), "+%Y-%m-%dT%H:%M:%SZ"]).output().unwrap().stdout,
    )
    .unwrap();
    post(
        &c.s,
        "/apis/revocation.podpass.dev/v1/revokedtokens",
        json!({"apiVersion": "revocation.podpass.dev/v1", "kind": "RevokedToken", "metadata": {"name": jti},
               "spec": {"expirationTimestamp": until.trim(), "reason": "leaked"}}),
    );
    // The token and the exchange token made from it are refused as soon as the watch says
    // so, whatever the review cache holds; another token of the same pod still works.
    wait_for("the revoked token refused by registry-auth", Duration::from_secs(5), || {
        (get_token(&url, &leaked, scope).status() == 401).then_some(Value::Null)
    });
    let resp = get_token(&url, &exchange, scope);
    assert_eq!(resp.status(), 401);
    assert!(resp.text().unwrap().contains(&format!("revoked (credential id JTI={jti})")));
    let last = audit_lines(&reviewed_dir).pop().unwrap();
    assert_eq!(last["reason"], "revoked", "{last}");
    assert_eq!(get_token(&url, &other, scope).status(), 200, "revocation is by jti");
    // Deleting the revocation lifts it.
    let resp = client(&c.s.dir)
        .delete(format!("{}/apis/revocation.podpass.dev/v1/revokedtokens/{jti}", c.s.url))
        .bearer_auth(admin_token(&c.s.dir))
        .send()
        .unwrap();
    assert!(resp.status().is_success());
    wait_for("the lifted revocation", Duration::from_secs(5), || {
        (get_token(&url, &exchange, scope).status() == 200).then_some(Value::Null)
    });
}

#[test]
fn a_deleted_pods_token_and_its_exchange_tokens_are_refused_at_once_not_when_the_review_cache_expires() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = cluster(d);
    signing_key(d, "signer");
    // registry-auth's reviewer may watch deletions (metadata) and check exchange tokens.
    let rules = json!([{"apiGroups": [""], "resources": ["pods", "serviceaccounts", "nodes"], "verbs": ["get", "list", "watch"]}]);
    let (_reviewed, url, reviewed_dir) = watching_registry_auth(&c, d, rules);
    let scope = "repository:team-a/app:pull";
    let pod = post(
        &c.s,
        "/api/v1/namespaces/team-a/pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "short-lived"},
               "spec": {"serviceAccountName": "builder", "nodeName": "n1", "containers": [{"name": "app", "image": "example/app:1"}]}}),
    );
    let token = token(
        &c.s,
        "team-a",
        "builder",
        AUDIENCE,
        Some(("Pod", "short-lived", pod["metadata"]["uid"].as_str().unwrap())),
    );
    // Reviewed and granted (the answer is now cached for 10 s), and an exchange token made
    // from it (its pod checked, and cached, too).
    assert_eq!(get_token(&url, &token, scope).status(), 200);
    let exchange = exchange_token(&url, &token, scope);
    let resp = client(&c.s.dir)
        .delete(format!("{}/api/v1/namespaces/team-a/pods/short-lived?gracePeriodSeconds=0", c.s.url))
        .bearer_auth(admin_token(&c.s.dir))
        .send()
        .unwrap();
    assert!(resp.status().is_success());
    // Refused well before the 10 s review cache expires: the deletion is pushed by watch.
    for (what, credential) in [("pod token", &token), ("exchange token", &exchange)] {
        wait_for(&format!("the deleted pod's {what} refused"), Duration::from_secs(5), || {
            (get_token(&url, credential, scope).status() == 401).then_some(Value::Null)
        });
    }
    let last = audit_lines(&reviewed_dir).pop().unwrap();
    assert_eq!(last["reason"], "token_review", "{last}");
}

#[test]
fn a_secret_bound_token_is_reviewed_every_time_so_it_ends_with_its_secret() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = cluster(d);
    signing_key(d, "signer");
    let reviewed_dir = d.join("reviewed");
    let (_reviewed, url) = reviewed_registry_auth(&c, d, &reviewed_dir);
    let scope = "repository:team-a/app:pull";
    let secret = post(
        &c.s,
        "/api/v1/namespaces/team-a/secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bound"}, "type": "Opaque"}),
    );
    let token = token(
        &c.s,
        "team-a",
        "builder",
        AUDIENCE,
        Some(("Secret", "bound", secret["metadata"]["uid"].as_str().unwrap())),
    );
    for _ in 0..2 {
        assert_eq!(get_token(&url, &token, scope).status(), 200);
    }
    // Asked each time: registry-auth does not see Secrets, the API server does.
    let reviews: Vec<String> =
        audit_lines(&reviewed_dir).iter().map(|l| l["token_review"].as_str().unwrap_or_default().to_owned()).collect();
    assert_eq!(reviews, ["reviewed", "reviewed"]);
    // No exchange token from it: it could not end with the Secret.
    let resp = reqwest::blocking::Client::new()
        .get(format!("{url}/token?service=registry.local&scope={scope}&offline_token=true"))
        .basic_auth("anyone", Some(&token))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert!(resp.text().unwrap().contains("bound to a Secret"));
    let resp = client(&c.s.dir)
        .delete(format!("{}/api/v1/namespaces/team-a/secrets/bound", c.s.url))
        .bearer_auth(admin_token(&c.s.dir))
        .send()
        .unwrap();
    assert!(resp.status().is_success());
    // The API server drops its cached success as it watches the deletion; the next review says no.
    wait_for("the deleted secret's token refused", Duration::from_secs(5), || {
        (get_token(&url, &token, scope).status() == 401).then_some(Value::Null)
    });
}
