//! End-to-end: pods reach the API server in-cluster, as `rest.InClusterConfig()` expects
//! (upstream `test/e2e/auth/service_accounts.go`: "should mount an API token into pods" used
//! by a client, and "ServiceAccountIssuerDiscovery should support OIDC discovery of service
//! account issuer" from a pod). A real kubectl (a static client-go build, in-cluster mode:
//! no kubeconfig, only `KUBERNETES_SERVICE_HOST`/`_PORT`, the token and `ca.crt`) runs in a
//! containerd pod whose network namespace has loopback only, and talks to the API server
//! through the `kubernetes` Service's address, verifying its certificate with the mounted
//! CA. A `hostNetwork` pod is given the API server's own address.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

mod containerd;
mod registry;
mod support;
use containerd::CLIENT_IMAGE;
use registry::free_port;
use support::*;

/// The image of the OIDC relying party run in a pod: busybox's `sh`, and the `podpass` of
/// this build with the libraries it loads.
const VALIDATOR_IMAGE: &str = "podpass.local/oidc-discovery-validator:1";

/// `bin/podpass` (its debug sections stripped: the image stays small) and each library
/// `ldd` names, at the paths it names, with their directories.
fn podpass_with_its_libraries(scratch: &Path) -> Vec<podpass_node::runtime::archive::Entry> {
    use podpass_node::runtime::archive::Entry;
    let stripped = scratch.join("podpass.stripped");
    let out = std::process::Command::new("strip")
        .args(["--strip-debug", "-o"])
        .arg(&stripped)
        .arg(env!("PODPASS_BIN"))
        .output()
        .expect("strip (binutils)");
    assert!(out.status.success(), "strip: {}", String::from_utf8_lossy(&out.stderr));
    let ldd = std::process::Command::new("ldd").arg(&stripped).output().expect("ldd");
    let libraries: Vec<String> = String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|word| word.starts_with('/'))
        .map(str::to_owned)
        .collect();
    assert!(libraries.iter().any(|l| l.contains("libc.so")), "{libraries:?}");
    let mut dirs = std::collections::BTreeSet::new();
    let mut files =
        vec![Entry::File { name: "bin/podpass".into(), mode: 0o755, content: std::fs::read(&stripped).unwrap() }];
    for library in &libraries {
        let name = library.trim_start_matches('/').to_owned();
        dirs.extend(Path::new(&name).ancestors().skip(1).filter(|a| !a.as_os_str().is_empty()).map(Path::to_path_buf));
        files.push(Entry::File { name, mode: 0o755, content: std::fs::read(library).unwrap() });
    }
    let mut entries: Vec<Entry> = dirs.into_iter().map(|d| Entry::Dir { name: d.display().to_string() }).collect();
    entries.extend(files);
    entries
}

fn start_runtime(dir: &Path) -> containerd::Containerd {
    containerd::Containerd::start_with_client(dir, &["sh", "echo", "env", "grep", "sort", "cat"])
}

fn client_pod(name: &str, script: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "client", "image": CLIENT_IMAGE, "imagePullPolicy": "Never",
                "env": [{"name": "HOME", "value": "/tmp"}],
                "command": ["/bin/sh", "-c", script]}]}})
}

/// The log lines of a finished pod's container (without the CRI prefix).
fn log_lines(root: &Path, pod: &Value) -> Vec<String> {
    let (name, uid) = (pod["metadata"]["name"].as_str().unwrap(), pod["metadata"]["uid"].as_str().unwrap());
    let log = std::fs::read_to_string(root.join(format!("logs/pods/default_{name}_{uid}/client/0.log"))).unwrap();
    log.lines().map(|l| l.splitn(4, ' ').nth(3).unwrap_or_default().to_owned()).collect()
}

fn finished(s: &Server, name: &str) -> Value {
    wait_for(&format!("pod {name} finished"), Duration::from_secs(120), || {
        let (_, p) = admin_get(s, &format!("/api/v1/namespaces/default/pods/{name}"));
        matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")).then_some(p)
    })
}

#[test]
fn a_pod_without_host_network_reaches_the_api_server_as_in_cluster_config_expects() {
    assert!(rustix::process::geteuid().is_root(), "running containers needs root");
    let dir = tempfile::Builder::new().prefix("ic").tempdir_in("/tmp").unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("api")).unwrap();
    let audit_log = d.join("audit.log");
    let s = start(&d.join("api"), &["--audit-log-path", audit_log.to_str().unwrap()]);
    let api_port: u16 = s.url.trim_end_matches('/').rsplit(':').next().unwrap().parse().unwrap();
    let runtime = start_runtime(&d.join("c"));
    let kubeconfig = node_kubeconfig(&d.join("api"), &d.join("n1.kubeconfig"));
    let port = free_port().to_string();
    let _agent = spawn_agent_with(
        &kubeconfig,
        &d.join("root"),
        Some(&d.join("agent.log")),
        &["--container-runtime-endpoint", &runtime.endpoint, "--port", &port],
    );
    wait_for("node n1 registered", Duration::from_secs(30), || {
        let (code, node) = admin_get(&s, "/api/v1/nodes/n1");
        (code == 200).then_some(node)
    });
    wait_for("the kubernetes Service", Duration::from_secs(30), || {
        let (code, svc) = admin_get(&s, "/api/v1/namespaces/default/services/kubernetes");
        (code == 200).then_some(svc)
    });

    // In-cluster: the Service's variables, and kubectl with no kubeconfig at all — it reads
    // them, the automounted token and ca.crt, and verifies the server's certificate.
    let script = "env | grep ^KUBERNETES_ | sort; \
        kubectl auth whoami -o jsonpath='{.status.userInfo.username}{\"\\n\"}'; \
        kubectl get --raw /.well-known/openid-configuration; echo; \
        kubectl get --raw /openid/v1/jwks; echo";
    let created =
        admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(client_pod("inside", script)));
    assert_eq!(created.0, 201, "{}", created.1);
    let inside = finished(&s, "inside");
    let lines = log_lines(&d.join("root"), &inside);
    assert_eq!(inside["status"]["phase"], "Succeeded", "{lines:#?}\n{inside}");
    let expected_env = [
        "KUBERNETES_PORT=tcp://10.96.0.1:443",
        "KUBERNETES_PORT_443_TCP=tcp://10.96.0.1:443",
        "KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1",
        "KUBERNETES_PORT_443_TCP_PORT=443",
        "KUBERNETES_PORT_443_TCP_PROTO=tcp",
        "KUBERNETES_SERVICE_HOST=10.96.0.1",
        "KUBERNETES_SERVICE_PORT=443",
        "KUBERNETES_SERVICE_PORT_HTTPS=443",
    ];
    assert_eq!(lines[..8], expected_env, "{lines:#?}");
    assert_eq!(lines[8], "system:serviceaccount:default:default", "{lines:#?}");
    // OIDC discovery from the pod, as upstream's agnhost does it: the issuer's document and
    // the keys that verify the pod's own token.
    let discovery: Value = serde_json::from_str(&lines[9]).unwrap_or_else(|e| panic!("{e}: {lines:#?}"));
    assert_eq!(discovery["issuer"], s.url.trim_end_matches('/'), "{discovery}");
    let jwks: Value = serde_json::from_str(&lines[10]).unwrap_or_else(|e| panic!("{e}: {lines:#?}"));
    assert!(!jwks["keys"].as_array().unwrap().is_empty(), "{jwks}");

    // Upstream's conformance case "ServiceAccountIssuerDiscovery should support OIDC
    // discovery of service account issuer", as agnhost's test-service-account-issuer-discovery
    // runs it with --in-cluster-discovery: a projected token of its own audience, whose `iss`
    // the pod reaches itself — the discovery document at the issuer, then its jwks_uri —
    // with the pod's service-account token as the bearer and the mounted CA, checking that
    // the document names that very issuer and that its keys verify the token. The relying
    // party is podpass's own (registry-auth's discovery), run inside the pod.
    runtime.import_busybox_image(VALIDATOR_IMAGE, &["sh"], podpass_with_its_libraries(d));
    let issuer = s.url.trim_end_matches('/');
    let validate = format!(
        "podpass token verify --discover --issuer {issuer} --audience oidc-discovery-test \
           --bearer-token-file /var/run/secrets/kubernetes.io/serviceaccount/token \
           --certificate-authority /var/run/secrets/kubernetes.io/serviceaccount/ca.crt \
           < /var/run/secrets/tokens/sa-token"
    );
    let mut validator = client_pod("oidc-discovery-validator", &validate);
    validator["spec"]["containers"][0]["image"] = json!(VALIDATOR_IMAGE);
    validator["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "token", "mountPath": "/var/run/secrets/tokens", "readOnly": true}]);
    validator["spec"]["volumes"] = json!([{"name": "token", "projected": {"sources": [{"serviceAccountToken":
        {"path": "sa-token", "audience": "oidc-discovery-test", "expirationSeconds": 600}}]}}]);
    let created = admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(validator));
    assert_eq!(created.0, 201, "{}", created.1);
    let validator = finished(&s, "oidc-discovery-validator");
    let lines = log_lines(&d.join("root"), &validator);
    assert_eq!(validator["status"]["phase"], "Succeeded", "{lines:#?}\n{validator}");
    let verified: Value = serde_json::from_str(&lines.join("\n")).unwrap_or_else(|e| panic!("{e}: {lines:#?}"));
    assert_eq!(verified["username"], "system:serviceaccount:default:default", "{verified}");
    assert_eq!(verified["extra"]["authentication.kubernetes.io/pod-name"], json!(["oidc-discovery-validator"]));
    // Both documents were asked for at the API server by the pod's own account.
    let audit = std::fs::read_to_string(&audit_log).unwrap();
    for path in ["/.well-known/openid-configuration", "/openid/v1/jwks"] {
        assert!(
            audit.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).any(|e| e["requestURI"] == path
                && e["user"]["username"] == "system:serviceaccount:default:default"
                && e["responseStatus"]["code"] == 200),
            "no audited GET {path} by the pod's account"
        );
    }

    // hostNetwork: the node's namespace, so the API server's own address.
    let mut host = client_pod(
        "host",
        "echo $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT; kubectl auth whoami -o jsonpath='{.status.userInfo.username}'",
    );
    host["spec"]["hostNetwork"] = json!(true);
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(host)).0, 201);
    let host = finished(&s, "host");
    let lines = log_lines(&d.join("root"), &host);
    assert_eq!(host["status"]["phase"], "Succeeded", "{lines:#?}");
    assert_eq!(lines, [format!("127.0.0.1:{api_port}"), "system:serviceaccount:default:default".to_owned()]);

    // A pod's own variable of the same name wins, as the kubelet's.
    let mut own = client_pod("own", "echo $KUBERNETES_SERVICE_HOST");
    own["spec"]["containers"][0]["env"] = json!([{"name": "KUBERNETES_SERVICE_HOST", "value": "mine"}]);
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(own)).0, 201);
    let own = finished(&s, "own");
    assert_eq!(log_lines(&d.join("root"), &own), ["mine"]);

    // Each line a background task logs says which task wrote it (the pod workers run in
    // the `pods` task, each in its pod's span).
    let log = std::fs::read_to_string(d.join("agent.log")).unwrap();
    let tasks: std::collections::BTreeSet<String> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .flat_map(|l| l["spans"].as_array().cloned().unwrap_or_default())
        .filter(|s| s["name"] == "task")
        .filter_map(|s| s["task"].as_str().map(str::to_owned))
        .collect();
    assert!(tasks.contains("pods"), "no line names its task: {tasks:?}");
}
