//! End-to-end: a node's identity as the kubelet's TLS bootstrap. With only a bootstrap
//! token, `podpass node run --bootstrap-kubeconfig` asks for its client certificate, the
//! controller manager approves (after its SubjectAccessReview) and signs it, the node
//! writes `kubelet-client-current.pem` and its kubeconfig, and from then on is
//! `system:node:<name>` by its certificate, which the API server takes with
//! `--client-ca-file`; killed (-9) and restarted, it keeps its certificate, asks nothing,
//! and resumes the pod it runs (the same container, not restarted).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod containerd;
mod registry;
mod support;

use std::path::Path;
use std::time::Duration;

use containerd::APP_IMAGE;
use serde_json::{Value, json};
use support::*;

/// kubeadm's bindings for joining nodes (`kubeadm init phase bootstrap-token`): the default
/// node token's group may ask for and get node client certificates; nodes may renew their own.
fn kubeadm_bindings(s: &Server) {
    let group = podpass_api::bootstrap_token::NODE_GROUP;
    for (name, role, subject) in [
        ("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", group),
        (
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            group,
        ),
        (
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "system:nodes",
        ),
    ] {
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": subject}]});
        let (code, answer) = admin_request(
            s,
            reqwest::Method::POST,
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            Some(binding),
        );
        assert_eq!(code, 201, "{answer}");
    }
}

/// A kubeconfig for `token` against the server of `api_dir`, as kubeadm's bootstrap
/// kubeconfig: the cluster's CA and the token, nothing else.
fn bootstrap_kubeconfig(s: &Server, api_dir: &Path, token: &str, path: &Path) {
    let ca = data_encoding::BASE64.encode(&std::fs::read(api_dir.join("pki/ca.crt")).unwrap());
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\ncontexts:\n- name: tls-bootstrap-token-user@kubernetes\n  context:\n    cluster: kubernetes\n    user: tls-bootstrap-token-user\ncurrent-context: tls-bootstrap-token-user@kubernetes\nusers:\n- name: tls-bootstrap-token-user\n  user:\n    token: {token}\n",
        s.url
    );
    std::fs::write(path, text).unwrap();
}

/// [`wait_for`], showing the agent's log when it times out.
fn wait_logged(what: &str, log: &Path, limit: Duration, mut f: impl FnMut() -> Option<Value>) -> Value {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if std::time::Instant::now() >= deadline {
            panic!("{what}; agent log:\n{}", std::fs::read_to_string(log).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn csrs(s: &Server) -> Vec<Value> {
    let (_, list) = admin_get(s, "/apis/certificates.k8s.io/v1/certificatesigningrequests");
    list["items"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_node_with_a_bootstrap_token_gets_its_own_certificate_and_keeps_it_and_its_pod_across_a_kill_and_restart() {
    assert!(rustix::process::geteuid().is_root(), "running containers needs root");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let api = d.join("api");
    std::fs::create_dir(&api).unwrap();
    let ca = api.join("pki/ca.crt");
    let ca = ca.to_str().unwrap();
    let s = start(&api, &["--enable-bootstrap-token-auth=true", "--client-ca-file", ca]);
    kubeadm_bindings(&s);
    let token = "abcdef.0123456789abcdef";
    let created = std::process::Command::new(PODPASS)
        .args(["token", "create", token, "--kubeconfig", api.join("admin.kubeconfig").to_str().unwrap()])
        .output()
        .unwrap();
    ok(created, "token create");

    // kubeadm's --print-join-command: the server and its CA's pin from the kubeconfig.
    let line = ok(
        std::process::Command::new(PODPASS)
            .args(["token", "create", "--print-join-command", "--kubeconfig"])
            .arg(api.join("admin.kubeconfig"))
            .output()
            .unwrap(),
        "token create --print-join-command",
    );
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[..5], ["podpass", "node", "join", "--server", s.url.as_str()], "{line}");
    let pem = std::fs::read_to_string(api.join("pki/ca.crt")).unwrap();
    let pin = podpass_node::join::ca_cert_hashes(&pem).unwrap().remove(0);
    assert_eq!(words[7..], ["--discovery-token-ca-cert-hash", pin.as_str()], "{line}");
    // This server lets nobody read cluster-info (nor signs it): discovery gives up in its time,
    // saying why, and the node writes nothing.
    let joined = d.join("joined");
    let refused = std::process::Command::new(PODPASS)
        .args(["node", "join", "--server", &s.url, "--token", words[6], "--discovery-token-ca-cert-hash", &pin])
        .args(["--discovery-timeout", "6s", "--data-dir", joined.to_str().unwrap(), "--node-name", "n9"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("couldn't validate the identity of the API Server within 6s") && said.contains("403 Forbidden"),
        "{said}"
    );
    assert!(!joined.join("bootstrap-kubeconfig").exists());
    let bad_pin = std::process::Command::new(PODPASS)
        .args(["node", "join", "--server", &s.url, "--token", words[6], "--discovery-token-ca-cert-hash", "sha256:12"])
        .output()
        .unwrap();
    assert_eq!(bad_pin.status.code(), Some(64), "{bad_pin:?}");

    // A token the cluster does not know: the node says so and stops.
    let bogus = d.join("bogus.kubeconfig");
    bootstrap_kubeconfig(&s, &api, "qqqqqq.0123456789abcdef", &bogus);
    let root = d.join("root");
    let kubeconfig = d.join("n1.kubeconfig");
    let flags = |b: &Path| ["--bootstrap-kubeconfig".to_owned(), b.to_str().unwrap().to_owned()];
    let bogus_flags = flags(&bogus);
    let bogus_flags: Vec<&str> = bogus_flags.iter().map(String::as_str).collect();
    let mut refused = spawn_agent_with(&kubeconfig, &root, Some(&d.join("refused.log")), &bogus_flags);
    let status = wait_for("the agent with an unknown token stops", Duration::from_secs(60), || {
        refused.0.try_wait().unwrap().map(|st| json!(st.code()))
    });
    assert_ne!(status, json!(0));
    let log = std::fs::read_to_string(d.join("refused.log")).unwrap();
    assert!(log.contains("TLS bootstrap") && log.contains("Unauthorized"), "{log}");
    assert!(!kubeconfig.exists(), "nothing written without a certificate");

    // A token past its expiration (whether or not the token cleaner took its Secret yet):
    // refused as the API server's bootstrap authenticator refuses it.
    let expired = json!({"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": "bootstrap-token-expird", "namespace": "kube-system"},
        "stringData": {"token-id": "expird", "token-secret": "0123456789abcdef", "expiration": "2020-01-01T00:00:00Z",
                       "usage-bootstrap-authentication": "true", "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}});
    let (code, answer) =
        admin_request(&s, reqwest::Method::POST, "/api/v1/namespaces/kube-system/secrets", Some(expired));
    assert_eq!(code, 201, "{answer}");
    let late = d.join("expired.kubeconfig");
    bootstrap_kubeconfig(&s, &api, "expird.0123456789abcdef", &late);
    let whoami = kubectl_with(&late, &d.join("cache"), &["auth", "whoami"]);
    assert!(!whoami.status.success(), "{whoami:?}");
    assert!(String::from_utf8_lossy(&whoami.stderr).contains("Unauthorized"), "{whoami:?}");

    let bootstrap = d.join("bootstrap.kubeconfig");
    bootstrap_kubeconfig(&s, &api, token, &bootstrap);
    let runtime = containerd::Containerd::start_with_app(&d.join("c"), &["sh", "sleep"]);
    let port = registry::free_port().to_string();
    let mut good_flags = flags(&bootstrap).to_vec();
    good_flags.extend(["--container-runtime-endpoint".into(), runtime.endpoint.clone(), "--port".into(), port]);
    let good_flags: Vec<&str> = good_flags.iter().map(String::as_str).collect();
    let log = d.join("agent.log");
    let agent = spawn_agent_with(&kubeconfig, &root, Some(&log), &good_flags);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let (_, node) = admin_get(&s, "/api/v1/nodes/n1");
        let ready = node["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
        if ready {
            break;
        }
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(std::time::Instant::now() < deadline, "node n1 not registered by its certificate; agent log:\n{log}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // One request, under the kubelet's digested name, asked by the bootstrap token and
    // approved by the controller manager's approver.
    let requests = csrs(&s);
    assert_eq!(requests.len(), 1, "{requests:?}");
    let csr = &requests[0];
    let name = csr["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("node-csr-") && name.len() == "node-csr-".len() + 43, "{name}");
    assert_eq!(csr["spec"]["username"], "system:bootstrap:abcdef");
    assert_eq!(csr["spec"]["signerName"], "kubernetes.io/kube-apiserver-client-kubelet");
    assert_eq!(csr["spec"]["usages"], json!(["digital signature", "client auth"]));
    assert_eq!(csr["status"]["conditions"][0]["reason"], "AutoApproved");
    assert_eq!(
        csr["status"]["conditions"][0]["message"],
        "Auto approving kubelet client certificate after SubjectAccessReview."
    );

    // The kubelet's files: a dated pair, current pointing at it, no pending key.
    let pki = root.join("pki");
    let current = pki.join("kubelet-client-current.pem");
    let target = std::fs::read_link(&current).unwrap();
    assert!(target.file_name().unwrap().to_str().unwrap().starts_with("kubelet-client-20"), "{target:?}");
    assert!(!pki.join("kubelet-client.key.tmp").exists());
    let written = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(written.contains("default-context") && written.contains("kubelet-client-current.pem"), "{written}");

    // The real kubectl with the written kubeconfig: the node, by its certificate.
    let whoami = ok(kubectl_with(&kubeconfig, &d.join("cache"), &["auth", "whoami", "-o", "json"]), "whoami");
    let me: Value = serde_json::from_str(&whoami).unwrap();
    assert_eq!(me["status"]["userInfo"]["username"], "system:node:n1", "{me}");
    assert_eq!(me["status"]["userInfo"]["groups"], json!(["system:nodes", "system:authenticated"]));
    // The Node authorizer holds it to its own: no other node's object.
    let other = kubectl_with(&kubeconfig, &d.join("cache"), &["get", "node", "n2"]);
    assert!(String::from_utf8_lossy(&other.stderr).contains("Forbidden"), "{other:?}");

    // A pod on the joined node, running as the node's certificate reports it.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "resident"},
        "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 1, "containers": [{"name": "app",
            "image": APP_IMAGE, "imagePullPolicy": "Never", "command": ["/bin/sh", "-c", "exec sleep 3600"]}]}});
    let (code, answer) = admin_request(&s, reqwest::Method::POST, "/api/v1/namespaces/default/pods", Some(pod));
    assert_eq!(code, 201, "{answer}");
    let running = wait_logged("the pod Running on the joined node", &log, Duration::from_secs(90), || {
        let (_, p) = admin_get(&s, "/api/v1/namespaces/default/pods/resident");
        (p["status"]["phase"] == "Running").then_some(p)
    });
    let container = running["status"]["containerStatuses"][0]["containerID"].as_str().unwrap().to_owned();

    // Killed (-9) and restarted, it runs on the certificate it has (no second request)
    // and resumes its pod: the same container, never restarted.
    drop(agent);
    let lease = |s: &Server| {
        let (_, l) = admin_get(s, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1");
        l["spec"]["renewTime"].as_str().unwrap_or_default().to_owned()
    };
    let before = lease(&s);
    let log = d.join("agent2.log");
    let _agent = spawn_agent_with(&kubeconfig, &root, Some(&log), &good_flags);
    wait_for("the restarted node renews its lease", Duration::from_secs(60), || {
        (lease(&s) != before).then_some(Value::Null)
    });
    assert_eq!(csrs(&s).len(), 1, "no new request");
    assert_eq!(std::fs::read_link(&current).unwrap(), target, "the same certificate");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("client certificate still valid"), "{text}");
    let resumed = wait_logged("the restarted node reports its pod", &log, Duration::from_secs(60), || {
        let (_, p) = admin_get(&s, "/api/v1/namespaces/default/pods/resident");
        let status = &p["status"]["containerStatuses"][0];
        (p["status"]["phase"] == "Running" && status["ready"] == true).then_some(p)
    });
    let status = &resumed["status"]["containerStatuses"][0];
    assert_eq!(status["containerID"], container.as_str(), "the same container: {resumed}");
    assert_eq!(status["restartCount"], 0, "{resumed}");
    // And it still manages it: deleted, the pod goes.
    let (code, answer) = admin_request(&s, reqwest::Method::DELETE, "/api/v1/namespaces/default/pods/resident", None);
    assert_eq!(code, 200, "{answer}");
    wait_logged("the resumed pod removed by the restarted node", &log, Duration::from_secs(60), || {
        let (code, _) = admin_get(&s, "/api/v1/namespaces/default/pods/resident");
        (code == 404).then_some(Value::Null)
    });

    // Serving certificates: the node asks, as itself, for one of its own names and
    // address (approved by podpass, issued), and for another node's name (never approved).
    let serving = |name: &str, cn: &str, sans: &[&str]| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        let csr = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {"signerName": "kubernetes.io/kubelet-serving", "usages": ["digital signature", "server auth"],
                     "request": data_encoding::BASE64.encode(pem.as_bytes())}});
        let file = d.join(format!("{name}.json"));
        std::fs::write(&file, csr.to_string()).unwrap();
        ok(kubectl_with(&kubeconfig, &d.join("cache"), &["create", "-f", file.to_str().unwrap()]), name);
    };
    serving("serving-own", "system:node:n1", &["n1", "127.0.0.1"]);
    serving("serving-other", "system:node:n2", &["n2"]);
    let issued = wait_for("n1's own serving certificate issued", Duration::from_secs(60), || {
        let (_, csr) = admin_get(&s, "/apis/certificates.k8s.io/v1/certificatesigningrequests/serving-own");
        csr["status"]["certificate"].is_string().then_some(csr)
    });
    let approved = issued["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Approved").unwrap();
    assert_eq!(approved["reason"], "AutoApproved", "{approved}");
    let (_, other) = admin_get(&s, "/apis/certificates.k8s.io/v1/certificatesigningrequests/serving-other");
    assert!(other["status"]["conditions"].is_null() && other["status"]["certificate"].is_null(), "{other}");
    // Nor may the node approve it itself.
    let approve = kubectl_with(&kubeconfig, &d.join("cache"), &["certificate", "approve", "serving-other"]);
    assert!(!approve.status.success(), "{approve:?}");
    assert!(String::from_utf8_lossy(&approve.stderr).contains("Forbidden"), "{approve:?}");
    let (_, other) = admin_get(&s, "/apis/certificates.k8s.io/v1/certificatesigningrequests/serving-other");
    assert!(other["status"]["conditions"].is_null(), "{other}");
}

/// A certificate for node n1 signed by the CA of `api_dir`, valid from `from` to `until`
/// seconds from now: a client one, or (`serving`) a serving one for n1's names
/// (`n1`, `127.0.0.1`); the PEM certificate and key.
fn short_node_certificate(api_dir: &Path, from: i64, until: i64, serving: bool) -> (String, String) {
    let ca_pem = std::fs::read_to_string(api_dir.join("pki/ca.crt")).unwrap();
    let ca_key = rcgen::KeyPair::from_pem(&std::fs::read_to_string(api_dir.join("pki/ca.key")).unwrap()).unwrap();
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, "system:node:n1");
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
    if serving {
        params.subject_alt_names =
            vec![rcgen::SanType::DnsName("n1".try_into().unwrap()), rcgen::SanType::IpAddress([127, 0, 0, 1].into())];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    } else {
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    }
    let now = jiff::Timestamp::now().as_second();
    let at = |offset: i64| rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs((now + offset) as u64);
    params.not_before = at(from);
    params.not_after = at(until);
    (params.signed_by(&key, &issuer).unwrap().pem(), key.serialize_pem())
}

/// The notAfter (Unix seconds) of the first certificate of a PEM text.
fn not_after_of(pem: &str) -> i64 {
    let mut child = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-enddate", "-dateopt", "iso_8601"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(pem.as_bytes()).unwrap();
    let text = ok(child.wait_with_output().unwrap(), "openssl x509 -enddate");
    let date = text.trim().trim_start_matches("notAfter=").replace(' ', "T");
    date.parse::<jiff::Timestamp>().unwrap_or_else(|e| panic!("{date}: {e}")).as_second()
}

/// The notAfter (Unix seconds) of the first certificate of a PEM file.
fn not_after(pem_path: &Path) -> i64 {
    not_after_of(&std::fs::read_to_string(pem_path).unwrap())
}

/// The serving certificate 127.0.0.1:`port` shows, once it verifies against `ca` for that
/// address (`openssl s_client -verify_ip`); `None` while it does not.
fn verified_serving_certificate(port: u16, ca: &Path) -> Option<String> {
    let out = std::process::Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}"), "-verify_return_error", "-verify_ip"])
        .args(["127.0.0.1", "-CAfile"])
        .arg(ca)
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !text.contains("Verify return code: 0 (ok)") {
        return None;
    }
    let begin = text.find("-----BEGIN CERTIFICATE-----")?;
    let end = text[begin..].find("-----END CERTIFICATE-----")? + begin + "-----END CERTIFICATE-----".len();
    Some(text[begin..end].to_owned())
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A pod of the `default` service account on n1 (its automounted token volume).
fn churn_pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "registry.example/app:1"}]}})
}

/// `--rotate-certificates` and `--rotate-server-certificates`, while pods come and go: a
/// node whose client and serving certificates are 70–90% through their lives asks, as
/// itself, for new ones (`csr-…`: the client one approved through `selfnodeclient`, the
/// serving one for its Node's names and addresses), stores them as
/// `kubelet-client-current.pem` and `kubelet-server-current.pem` and shows them from the
/// next connection on. Every pod created meanwhile gets its token (TokenRequest as the
/// node) and goes when deleted; past the old client certificate's expiry the node renews
/// its lease; its HTTPS port's certificate verifies against the cluster's CA for its
/// address before and after, and the API server, verifying it, reads through it; restarted,
/// the node runs on the rotated pairs and asks nothing.
#[test]
fn a_node_rotates_its_client_and_serving_certificates_while_pods_churn_and_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let api = d.join("api");
    std::fs::create_dir(&api).unwrap();
    let ca = api.join("pki/ca.crt");
    let ca_flag = ca.to_str().unwrap();
    let s = start(&api, &["--client-ca-file", ca_flag, "--kubelet-certificate-authority", ca_flag]);
    kubeadm_bindings(&s);
    // 80 s of life, 40 s of it gone: rotation due 16–32 s from now, expiry in 40 s.
    let (cert, key) = short_node_certificate(&api, -40, 40, false);
    let expires = jiff::Timestamp::now().as_second() + 40;
    let b64 = |t: &str| data_encoding::BASE64.encode(t.as_bytes());
    let kubeconfig = d.join("n1.kubeconfig");
    let ca_data = data_encoding::BASE64.encode(&std::fs::read(&ca).unwrap());
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {ca_data}\ncontexts:\n- name: n1\n  context:\n    cluster: c\n    user: n1\ncurrent-context: n1\nusers:\n- name: n1\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
            s.url,
            b64(&cert),
            b64(&key)
        ),
    )
    .unwrap();
    let root = d.join("root");
    // The serving pair the node kept from before, as short.
    let (serving_cert, serving_key) = short_node_certificate(&api, -40, 40, true);
    let serving_store = podpass_node::CertificateStore::new(&root.join("pki"), podpass_node::SERVER_PREFIX);
    serving_store.update(&serving_cert, &serving_key).unwrap();
    let port = registry::free_port();
    let port_flag = port.to_string();
    let flags = ["--rotate-certificates=true", "--rotate-server-certificates=true", "--port", port_flag.as_str()];
    let log = d.join("agent.log");
    let agent = spawn_agent_with(&kubeconfig, &root, Some(&log), &flags);
    wait_for("the default service account", Duration::from_secs(30), || {
        (admin_get(&s, "/api/v1/namespaces/default/serviceaccounts/default").0 == 200).then_some(Value::Null)
    });
    // The kept serving pair is shown, verified for the node's address.
    let first = wait_logged("the kept serving certificate shown", &log, Duration::from_secs(30), || {
        verified_serving_certificate(port, &ca).map(Value::String)
    });
    assert_eq!(not_after_of(first.as_str().unwrap()), not_after_of(&serving_cert), "the kept pair, not a new one");

    let lease = |s: &Server| {
        let (_, l) = admin_get(s, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1");
        l["spec"]["renewTime"].as_str().unwrap_or_default().to_owned()
    };
    // Pods come and go while both certificates rotate.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let shown = std::thread::scope(|scope| {
        // However the rest ends (a panic included), the churn stops and the scope ends.
        let _stop_on_exit = StopOnDrop(&stop);
        let churn = {
            let (stop, s, root, log) = (&stop, &s, &root, &log);
            scope.spawn(move || {
                let mut cycles = 0u32;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let name = format!("churn-{cycles}");
                    let (code, pod) = admin_request(
                        s,
                        reqwest::Method::POST,
                        "/api/v1/namespaces/default/pods",
                        Some(churn_pod(&name)),
                    );
                    assert_eq!(code, 201, "{pod}");
                    let uid = pod["metadata"]["uid"].as_str().unwrap().to_owned();
                    let volumes = root.join("pods").join(&uid).join("volumes/kubernetes.io~projected");
                    wait_logged(&format!("{name}'s token written"), log, Duration::from_secs(30), || {
                        let entries = std::fs::read_dir(&volumes).ok()?;
                        entries
                            .flatten()
                            .find(|e| e.path().join("token").is_file())
                            .map(|e| Value::String(e.path().display().to_string()))
                    });
                    let path = format!("/api/v1/namespaces/default/pods/{name}");
                    let (code, _) = admin_request(s, reqwest::Method::DELETE, &path, None);
                    assert_eq!(code, 200, "deleting {name}");
                    wait_logged(&format!("{name} gone"), log, Duration::from_secs(30), || {
                        (admin_get(s, &path).0 == 404 && !root.join("pods").join(&uid).exists()).then_some(Value::Null)
                    });
                    cycles += 1;
                }
                cycles
            })
        };

        let current = root.join("pki/kubelet-client-current.pem");
        let rotated = |signer: &'static str| {
            move |s: &Server| {
                csrs(s).into_iter().find(|c| {
                    c["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("csr-"))
                        && c["spec"]["signerName"] == signer
                        && c["status"]["certificate"].is_string()
                })
            }
        };
        let client_csr = rotated("kubernetes.io/kube-apiserver-client-kubelet");
        let serving_csr = rotated("kubernetes.io/kubelet-serving");
        let (client_request, serving_request) =
            wait_logged("both rotation requests issued", &log, Duration::from_secs(90), || {
                Some(json!([client_csr(&s)?, serving_csr(&s)?]))
            })
            .as_array()
            .map(|a| (a[0].clone(), a[1].clone()))
            .unwrap();
        assert_eq!(client_request["spec"]["username"], "system:node:n1", "asked as the node, by its certificate");
        assert_eq!(
            client_request["status"]["conditions"][0]["message"],
            "Auto approving self kubelet client certificate after SubjectAccessReview."
        );
        assert_eq!(serving_request["spec"]["username"], "system:node:n1");
        assert_eq!(serving_request["spec"]["usages"], json!(["digital signature", "server auth"]));
        assert_eq!(
            serving_request["status"]["conditions"][0]["message"],
            "Auto approving kubelet serving certificate: its names and addresses are its Node's."
        );
        wait_for("the rotated client pair is current", Duration::from_secs(30), || {
            (not_after(&current) > expires + 3600).then_some(Value::Null)
        });
        // The port shows the rotated serving certificate from its next handshake on.
        let shown = wait_logged("the rotated serving certificate shown", &log, Duration::from_secs(30), || {
            verified_serving_certificate(port, &ca).filter(|pem| not_after_of(pem) > expires + 3600).map(Value::String)
        });
        assert_eq!(not_after_of(shown.as_str().unwrap()), not_after(&serving_store.current_path()));

        // Past the old client certificate's expiry the node still renews its lease, and pods
        // still get their tokens.
        wait_for("the old certificate expired", Duration::from_secs(60), || {
            (jiff::Timestamp::now().as_second() > expires + 1).then_some(Value::Null)
        });
        let before = lease(&s);
        wait_for("a lease renewal after the old certificate expired", Duration::from_secs(60), || {
            (lease(&s) != before).then_some(Value::Null)
        });
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let cycles = churn.join().expect("the pod churn failed");
        assert!(cycles >= 2, "pods came and went across the rotation ({cycles})");
        shown
    });

    // The API server, verifying the node's serving certificate, reads through its port: the
    // node's own answer (a pod with no container running), not a TLS failure.
    let (code, pod) =
        admin_request(&s, reqwest::Method::POST, "/api/v1/namespaces/default/pods", Some(churn_pod("reader")));
    assert_eq!(code, 201, "{pod}");
    let (code, body) = admin_raw_request(&s, reqwest::Method::GET, "/api/v1/namespaces/default/pods/reader/log", None);
    assert!(code != 503 && !body.to_string().contains("reading logs from node"), "{code}: {body}");

    // Restarted (its kubeconfig's pair long expired), it runs on the rotated pairs.
    drop(agent);
    let before = lease(&s);
    let log2 = d.join("agent2.log");
    let _agent = spawn_agent_with(&kubeconfig, &root, Some(&log2), &flags);
    wait_for("the restarted node renews its lease", Duration::from_secs(60), || {
        (lease(&s) != before).then_some(Value::Null)
    });
    let again = wait_logged("the restarted node serves", &log2, Duration::from_secs(30), || {
        verified_serving_certificate(port, &ca).map(Value::String)
    });
    assert_eq!(again, shown, "the stored serving pair, not a new one");
    let rotations = csrs(&s).iter().filter(|c| c["metadata"]["name"].as_str().unwrap().starts_with("csr-")).count();
    assert_eq!(rotations, 2, "year-long certificates are not asked for again");
}
