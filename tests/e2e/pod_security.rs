//! End-to-end: Pod Security admission as kube-apiserver serves it, through the real kubectl
//! against `podpass apiserver` with podpass up's admission configuration (enforce baseline,
//! warn and audit restricted, `kube-system` exempt): a tenant's hostNetwork pod is refused
//! with upstream's message, a baseline pod is admitted with the restricted warnings kubectl
//! prints, the audit log carries the policy and the violations, a namespace labelled
//! `privileged` admits the host network, and labelling a namespace names its existing pods
//! that would violate the new level.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;
use support::*;

const ADMISSION: &str = "apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults: {enforce: baseline, audit: restricted, warn: restricted}
    exemptions: {namespaces: [kube-system]}
";

fn apply(api: &Path, manifest: &str) -> std::process::Output {
    let file = api.join(format!("manifest-{}.yaml", manifest.len()));
    std::fs::write(&file, manifest).unwrap();
    admin_kubectl(api, &["apply", "-f", file.to_str().unwrap()])
}

fn pod(ns: &str, name: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  nodeName: n1\n{extra_spec}  containers:\n  - {{name: app, image: busybox}}\n"
    )
}

#[test]
fn tenants_are_held_to_baseline_warned_of_restricted_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let admission = d.join("admission.yaml");
    std::fs::write(&admission, ADMISSION).unwrap();
    let audit = d.join("audit.log");
    std::fs::create_dir(d.join("api")).unwrap();
    let api = d.join("api");
    let _s = start(
        &api,
        &["--admission-control-config-file", admission.to_str().unwrap(), "--audit-log-path", audit.to_str().unwrap()],
    );
    ok(admin_kubectl(&api, &["create", "namespace", "team"]), "create namespace");
    wait_namespace_ready(&_s, "team");

    // A hostNetwork pod in a tenant's namespace: refused, as upstream words it.
    let host = apply(&api, &pod("team", "sniffer", "  hostNetwork: true\n"));
    let stderr = String::from_utf8_lossy(&host.stderr);
    assert!(!host.status.success());
    assert!(
        stderr.contains(
            "pods \"sniffer\" is forbidden: violates PodSecurity \"baseline:latest\": host namespaces (hostNetwork=true)"
        ),
        "{stderr}"
    );
    // A privileged one with added capabilities and a hostPath: every reason, one message.
    let root = apply(
        &api,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: root, namespace: team}\nspec:\n  volumes: [{name: host, hostPath: {path: /}}]\n  containers:\n  - name: app\n    image: busybox\n    securityContext: {privileged: true, capabilities: {add: [NET_RAW]}}\n",
    );
    let stderr = String::from_utf8_lossy(&root.stderr);
    assert!(
        stderr.contains("violates PodSecurity \"baseline:latest\": privileged (container \"app\" must not set securityContext.privileged=true), non-default capabilities (container \"app\" must not include \"NET_RAW\" in securityContext.capabilities.add), hostPath volumes (volume \"host\")"),
        "{stderr}"
    );

    // A baseline pod is admitted; kubectl prints the restricted warnings.
    let plain = apply(&api, &pod("team", "plain", ""));
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(plain.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false (container \"app\" must set securityContext.allowPrivilegeEscalation=false)"),
        "{stderr}"
    );
    // The audit event of that create names the policy and what restricted found.
    let deadline = Instant::now() + Duration::from_secs(20);
    let event = loop {
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        let found = text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|e| {
            e["objectRef"]["resource"] == "pods"
                && e["objectRef"]["namespace"] == "team"
                && e["verb"] == "create"
                && e["responseStatus"]["code"] == 201
        });
        if let Some(e) = found {
            break e;
        }
        assert!(Instant::now() < deadline, "no audit event of the create");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(event["annotations"]["pod-security.kubernetes.io/enforce-policy"], "baseline:latest", "{event}");
    let violations = event["annotations"]["pod-security.kubernetes.io/audit-violations"].as_str().unwrap_or_default();
    assert!(violations.starts_with("would violate PodSecurity \"restricted:latest\": "), "{event}");

    // Updates that do not touch images are not evaluated (a label on a non-compliant pod).
    ok(admin_kubectl(&api, &["label", "pod", "-n", "team", "plain", "tier=web"]), "label the pod");

    // Labelling the namespace restricted names its existing pods that would violate it.
    let label = admin_kubectl(&api, &["label", "namespace", "team", "pod-security.kubernetes.io/enforce=restricted"]);
    let stderr = String::from_utf8_lossy(&label.stderr);
    assert!(label.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "existing pods in namespace \"team\" violate the new PodSecurity enforce level \"restricted:latest\""
        ),
        "{stderr}"
    );
    assert!(stderr.contains("plain: allowPrivilegeEscalation != false, unrestricted capabilities"), "{stderr}");
    // An invalid level is refused, naming the label.
    let bad = admin_kubectl(
        &api,
        &["label", "--overwrite", "namespace", "team", "pod-security.kubernetes.io/enforce=strict"],
    );
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted"),
        "{stderr}"
    );

    // A namespace an admin labelled privileged admits the host network; kube-system is exempt.
    ok(admin_kubectl(&api, &["create", "namespace", "ops"]), "create namespace ops");
    wait_namespace_ready(&_s, "ops");
    ok(admin_kubectl(&api, &["label", "namespace", "ops", "pod-security.kubernetes.io/enforce=privileged"]), "label");
    let allowed = apply(&api, &pod("ops", "capture", "  hostNetwork: true\n"));
    assert!(allowed.status.success(), "{}", String::from_utf8_lossy(&allowed.stderr));
    let system = apply(&api, &pod("kube-system", "agent", "  hostNetwork: true\n"));
    assert!(system.status.success(), "{}", String::from_utf8_lossy(&system.stderr));
}
