//! End-to-end: upstream's `test/e2e/auth/service_accounts.go`, the cases about these
//! designs, ported to pods that run on a real containerd through podpass's node:
//!
//! - "should mount an API token into pods": the automounted token, `ca.crt` and
//!   `namespace`, read by the container; the token authenticates as the pod's service
//!   account and the CA is the cluster's.
//! - "should allow opting out of API token automount": the nine pod/service-account cases.
//! - "should mount projected service account token" and "should set ownership and
//!   permission when RunAsUser or FsGroup is present": the four runAsUser/fsGroup cases,
//!   each file's mode, owner and content as the container sees them.
//! - "ServiceAccountIssuerDiscovery should support OIDC discovery of service account
//!   issuer": a pod verifies its own token through the API server's OIDC discovery and
//!   JWKS, from inside the pod (podpass's `token verify --discover`, as agnhost's
//!   `test-service-account-issuer-discovery`).
//!
//! "should support InClusterConfig with token rotation" needs ~8 minutes of waiting: it is
//! the slow `e2e_rotation` test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use podpass_node::runtime::archive::{self, Entry};
use reqwest::Method;
use serde_json::{Value, json};

mod containerd;
mod registry;
mod support;
use containerd::APP_IMAGE;
use support::*;

const VERIFIER_IMAGE: &str = "podpass.local/verifier:1";
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn create(s: &Server, body: Value) -> Value {
    let (code, out) = admin_request(s, Method::POST, "/api/v1/namespaces/default/pods", Some(body));
    assert_eq!(code, 201, "{out}");
    out
}

fn finished(s: &Server, name: &str) -> Value {
    wait_for(&format!("pod {name} finished"), Duration::from_secs(90), || {
        let p = admin_get(s, &format!("/api/v1/namespaces/default/pods/{name}")).1;
        matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")).then_some(p)
    })
}

/// The container's output, as `kubectl logs` gives it.
fn logs(api: &Path, name: &str) -> String {
    ok(admin_kubectl(api, &["logs", name]), &format!("kubectl logs {name}"))
}

/// An image with podpass itself (and the shared libraries it links, as `ldd` lists them)
/// beside busybox: what verifies a token from inside a pod.
fn verifier_image() -> Vec<u8> {
    let bin = env!("PODPASS_BIN");
    let mut extra = vec![Entry::File { name: "bin/podpass".into(), mode: 0o755, content: std::fs::read(bin).unwrap() }];
    let ldd = std::process::Command::new("ldd").arg(bin).output().unwrap();
    let mut dirs = std::collections::BTreeSet::new();
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        let path = line.split("=>").last().unwrap().split_whitespace().next().unwrap_or_default();
        if !path.starts_with('/') {
            continue;
        }
        let inside = path.trim_start_matches('/').to_owned();
        let mut parent = Path::new(&inside).parent();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            dirs.insert(p.display().to_string());
            parent = p.parent();
        }
        extra.push(Entry::File { name: inside, mode: 0o755, content: std::fs::read(path).unwrap() });
    }
    let mut entries: Vec<Entry> = dirs.into_iter().map(|name| Entry::Dir { name }).collect();
    entries.extend(extra);
    let busybox = std::fs::read("/bin/busybox").unwrap();
    let layer = archive::busybox_layer(&busybox, &["sh", "cat"], entries).unwrap();
    archive::oci_image(VERIFIER_IMAGE, &layer, &[], &["/bin/sh"]).unwrap().0
}

#[test]
fn upstream_service_account_cases_on_running_pods() {
    assert!(rustix::process::geteuid().is_root(), "running containers needs root");
    let dir = tempfile::Builder::new().prefix("sa").tempdir_in("/tmp").unwrap();
    let d = dir.path();
    let api = d.join("api");
    std::fs::create_dir(&api).unwrap();
    let s = start(&api, &[]);
    let runtime = containerd::Containerd::start_with_app(&d.join("c"), &["sh", "cat", "echo", "stat", "true"]);
    runtime.import(VERIFIER_IMAGE, verifier_image());
    let kubeconfig = node_kubeconfig(&api, &d.join("n1.kubeconfig"));
    let port = registry::free_port().to_string();
    let _agent = spawn_agent_with(
        &kubeconfig,
        &d.join("root"),
        Some(&d.join("agent.log")),
        &["--container-runtime-endpoint", &runtime.endpoint, "--port", &port],
    );
    wait_for("node n1 registered", Duration::from_secs(30), || {
        (admin_get(&s, "/api/v1/nodes/n1").0 == 200).then_some(Value::Null)
    });
    wait_for("the default service account", Duration::from_secs(30), || {
        (admin_get(&s, "/api/v1/namespaces/default/serviceaccounts/default").0 == 200).then_some(Value::Null)
    });

    // "should mount an API token into pods".
    let script = format!("for f in token ca.crt namespace; do echo \"== $f\"; cat {SA_DIR}/$f; echo; done");
    create(
        &s,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "automount"},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": APP_IMAGE,
                "imagePullPolicy": "Never", "command": ["/bin/sh", "-c", script]}]}}),
    );
    let pod = finished(&s, "automount");
    assert_eq!(pod["status"]["phase"], "Succeeded", "{}", pod["status"]);
    let out = logs(&api, "automount");
    let section = |name: &str| -> String {
        let start = out.find(&format!("== {name}\n")).unwrap() + name.len() + 4;
        let rest = &out[start..];
        rest[..rest.find("\n== ").unwrap_or(rest.len())].trim().to_owned()
    };
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": section("token")}});
    let (_, review) = admin_request(&s, Method::POST, "/apis/authentication.k8s.io/v1/tokenreviews", Some(review));
    assert_eq!(review["status"]["authenticated"], true, "{review}");
    assert_eq!(review["status"]["user"]["username"], "system:serviceaccount:default:default");
    assert_eq!(
        review["status"]["user"]["extra"]["authentication.kubernetes.io/pod-name"],
        json!(["automount"]),
        "the token is bound to the pod: {review}"
    );
    let root_ca = admin_get(&s, "/api/v1/namespaces/default/configmaps/kube-root-ca.crt").1;
    assert_eq!(section("ca.crt"), root_ca["data"]["ca.crt"].as_str().unwrap().trim());
    assert_eq!(section("namespace"), "default");

    // "should allow opting out of API token automount": the pod spec trumps the service
    // account, which trumps the default (true).
    for (name, automount) in [("mount", true), ("nomount", false)] {
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name},
            "automountServiceAccountToken": automount});
        assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/default/serviceaccounts", Some(sa)).0, 201);
    }
    let cases = [
        ("default", None, true),
        ("mount", None, true),
        ("nomount", None, false),
        ("default", Some(true), true),
        ("mount", Some(true), true),
        ("nomount", Some(true), true),
        ("default", Some(false), false),
        ("mount", Some(false), false),
        ("nomount", Some(false), false),
    ];
    for (i, (sa, spec, expected)) in cases.into_iter().enumerate() {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("optout-{i}")},
            "spec": {"restartPolicy": "Never", "serviceAccountName": sa,
                "containers": [{"name": "token-test", "image": APP_IMAGE, "command": ["true"]}]}});
        if let Some(v) = spec {
            pod["spec"]["automountServiceAccountToken"] = json!(v);
        }
        let created = create(&s, pod);
        let mounted = created["spec"]["containers"][0]["volumeMounts"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["mountPath"] == SA_DIR));
        assert_eq!(mounted, expected, "service account {sa}, pod spec {spec:?}");
    }

    // "should mount projected service account token" and "should set ownership and
    // permission when RunAsUser or FsGroup is present".
    let cases = [
        ("owner-user", Some(1000), None, "-rw-------", 1000, 0),
        ("owner-group", None, Some(10000), "-rw-r-----", 0, 10000),
        ("owner-both", Some(1000), Some(10000), "-rw-r-----", 1000, 10000),
        ("owner-none", None, None, "-rw-r--r--", 0, 0),
    ];
    for (name, user, group, ..) in cases {
        let mut sc = json!({});
        if let Some(u) = user {
            sc["runAsUser"] = json!(u);
        }
        if let Some(g) = group {
            sc["fsGroup"] = json!(g);
        }
        create(
            &s,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"restartPolicy": "Never", "securityContext": sc,
                    "volumes": [{"name": "test-volume", "projected": {"sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}}],
                    "containers": [{"name": "c", "image": APP_IMAGE, "imagePullPolicy": "Never",
                        "command": ["/bin/sh", "-c", "stat -L -c '%A %u %g' /test-volume/token; cat /test-volume/token"],
                        "volumeMounts": [{"name": "test-volume", "mountPath": "/test-volume", "readOnly": true}]}]}}),
        );
    }
    for (name, _, _, perm, uid, gid) in cases {
        let pod = finished(&s, name);
        assert_eq!(pod["status"]["phase"], "Succeeded", "{name}: {}", pod["status"]);
        let out = logs(&api, name);
        let mut lines = out.lines();
        assert_eq!(lines.next().unwrap(), format!("{perm} {uid} {gid}"), "{name}");
        let token = lines.next().unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        assert!(
            parts.len() == 3
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')),
            "{name}: a JWT: {token}"
        );
    }

    // "ServiceAccountIssuerDiscovery should support OIDC discovery of service account
    // issuer": the pod (on the node's network, to reach the API server) finds the keys
    // through discovery with its own credentials and verifies its projected token.
    let issuer = admin_get(&s, "/.well-known/openid-configuration").1["issuer"].as_str().unwrap().to_owned();
    let verify = format!(
        "exec /bin/podpass token verify --discover --bearer-token-file {SA_DIR}/token \\
         --certificate-authority {SA_DIR}/ca.crt --issuer {issuer} --audience oidc-discovery-test \\
         - < /var/run/secrets/tokens/sa-token"
    );
    create(
        &s,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "oidc-discovery-validator"},
            "spec": {"restartPolicy": "Never", "hostNetwork": true, "serviceAccountName": "default",
                "volumes": [{"name": "sa-token", "projected": {"sources": [{"serviceAccountToken": {
                    "path": "sa-token", "expirationSeconds": 600, "audience": "oidc-discovery-test"}}]}}],
                "containers": [{"name": "oidc-discovery-validator", "image": VERIFIER_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", verify],
                    "volumeMounts": [{"name": "sa-token", "mountPath": "/var/run/secrets/tokens", "readOnly": true}]}]}}),
    );
    let pod = finished(&s, "oidc-discovery-validator");
    let out = logs(&api, "oidc-discovery-validator");
    assert_eq!(pod["status"]["phase"], "Succeeded", "{}\n{out}", pod["status"]);
    let user: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(user["username"], "system:serviceaccount:default:default", "{out}");
    assert_eq!(user["extra"]["authentication.kubernetes.io/pod-name"], json!(["oidc-discovery-validator"]));
}
