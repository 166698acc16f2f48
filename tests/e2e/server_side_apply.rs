//! End-to-end: server-side apply through the real kubectl (`apply --server-side`,
//! `--field-manager`, `--force-conflicts`, `diff --server-side`, `label`, the client-side →
//! server-side upgrade) and raw `application/apply-patch+yaml` requests: managedFields,
//! conflicts with upstream's message, removal of fields no longer applied.

// Test helpers panic on failure by design; the lint targets library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

mod support;
use support::*;

fn write(d: &std::path::Path, name: &str, text: &str) -> String {
    let p = d.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

fn entries(object: &Value) -> Vec<(String, String)> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| (e["manager"].as_str().unwrap().to_owned(), e["operation"].as_str().unwrap().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

fn fields_of<'a>(object: &'a Value, manager: &str) -> &'a Value {
    let entries = object["metadata"]["managedFields"].as_array().unwrap();
    &entries.iter().find(|e| e["manager"] == manager).unwrap_or_else(|| panic!("no entry for {manager}: {object}"))["fieldsV1"]
}

#[test]
fn kubectl_applies_server_side_with_ownership_and_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    let cm = "/api/v1/namespaces/default/configmaps/settings";

    // create, then a field dropped from the file is removed
    let v1 = write(
        d,
        "v1.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: one\n  b: two\n",
    );
    let out = ok(admin_kubectl(d, &["apply", "--server-side", "-f", &v1]), "apply v1");
    assert!(out.contains("configmap/settings serverside-applied"), "{out}");
    let (_, o) = admin_get(&s, cm);
    assert_eq!(o["data"], json!({"a": "one", "b": "two"}));
    assert_eq!(entries(&o), [("kubectl".to_owned(), "Apply".to_owned())]);
    assert_eq!(fields_of(&o, "kubectl"), &json!({"f:data": {"f:a": {}, "f:b": {}}}));
    let v2 = write(d, "v2.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: one\n");
    ok(admin_kubectl(d, &["apply", "--server-side", "-f", &v2]), "apply v2");
    assert_eq!(admin_get(&s, cm).1["data"], json!({"a": "one"}), "b no longer applied: removed");

    // a second manager conflicts on .data.a, with upstream's message; force takes it
    let other =
        write(d, "other.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: other\n");
    let out = admin_kubectl(d, &["apply", "--server-side", "--field-manager=other", "-f", &other]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(r#"Apply failed with 1 conflict: conflict with "kubectl": .data.a"#), "{err}");
    assert_eq!(admin_get(&s, cm).1["data"]["a"], "one", "nothing changed");
    ok(
        admin_kubectl(d, &["apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", &other]),
        "force",
    );
    let (_, o) = admin_get(&s, cm);
    assert_eq!(o["data"]["a"], "other");
    assert_eq!(fields_of(&o, "other"), &json!({"f:data": {"f:a": {}}}));
    assert!(entries(&o).iter().all(|(m, _)| m != "kubectl"), "kubectl lost its only field: {o}");

    // kubectl label is an Update entry; an apply of that label conflicts with it, using v1
    ok(admin_kubectl(d, &["label", "configmap", "settings", "tier=gold"]), "label");
    let (_, o) = admin_get(&s, cm);
    assert!(entries(&o).contains(&("kubectl-label".to_owned(), "Update".to_owned())), "{o}");
    assert_eq!(fields_of(&o, "kubectl-label"), &json!({"f:metadata": {"f:labels": {".": {}, "f:tier": {}}}}));
    let relabel = write(
        d,
        "relabel.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  labels:\n    tier: silver\n",
    );
    let out = admin_kubectl(d, &["apply", "--server-side", "--field-manager=third", "-f", &relabel]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"Apply failed with 1 conflict: conflict with "kubectl-label" using v1: .metadata.labels.tier"#),
        "{err}"
    );

    // diff --server-side persists nothing
    let rv = admin_get(&s, cm).1["metadata"]["resourceVersion"].clone();
    let changed = write(
        d,
        "changed.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: other\n  c: new\n",
    );
    let out = admin_kubectl(d, &["diff", "--server-side", "--field-manager=other", "-f", &changed]);
    assert_eq!(out.status.code(), Some(1), "a diff: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("+  c: new"));
    let (_, o) = admin_get(&s, cm);
    assert_eq!(o["metadata"]["resourceVersion"], rv, "the diff persisted nothing");
    assert!(o["data"].get("c").is_none());
}

#[test]
fn client_side_then_server_side_apply_and_two_managers_on_one_pod() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);

    // kubectl's client-side apply, then its server-side apply of a changed file: no conflict
    let csa = write(
        d,
        "sa.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: builder\n  labels:\n    a: one\n",
    );
    ok(admin_kubectl(d, &["apply", "-f", &csa]), "client-side apply");
    let (_, o) = admin_get(&s, "/api/v1/namespaces/default/serviceaccounts/builder");
    assert!(entries(&o).contains(&("kubectl-client-side-apply".to_owned(), "Update".to_owned())), "{o}");
    let ssa = write(
        d,
        "sa2.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: builder\n  labels:\n    a: two\n",
    );
    ok(admin_kubectl(d, &["apply", "--server-side", "-f", &ssa]), "server-side apply after client-side");
    let (_, o) = admin_get(&s, "/api/v1/namespaces/default/serviceaccounts/builder");
    assert_eq!(o["metadata"]["labels"]["a"], "two");
    let last: Value = serde_json::from_str(
        o["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(last["metadata"]["labels"]["a"], "two", "the annotation follows the server-side apply");

    // two managers on one pod: each keeps the other's label; a container is updated in place
    let pod = |labels: &str, image: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels:\n{labels}\nspec:\n  containers:\n  - name: app\n    image: {image}\n"
        )
    };
    let a1 = write(d, "a1.yaml", &pod("    team: a", "registry.example/app:1"));
    ok(admin_kubectl(d, &["apply", "--server-side", "--field-manager=team-a", "-f", &a1]), "team-a");
    let b = write(d, "b.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels:\n    owner: b\n");
    ok(admin_kubectl(d, &["apply", "--server-side", "--field-manager=team-b", "-f", &b]), "team-b");
    let a2 = write(d, "a2.yaml", &pod("    team: a", "registry.example/app:2"));
    ok(admin_kubectl(d, &["apply", "--server-side", "--field-manager=team-a", "-f", &a2]), "team-a again");
    let (_, p) = admin_get(&s, "/api/v1/namespaces/default/pods/web");
    assert_eq!(p["metadata"]["labels"], json!({"team": "a", "owner": "b"}));
    let containers = p["spec"]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "{p}");
    assert_eq!(containers[0]["image"], "registry.example/app:2");
    assert_eq!(containers[0]["terminationMessagePath"], "/dev/termination-log", "defaults kept");
    let a = fields_of(&p, "team-a");
    assert!(a["f:spec"]["f:containers"].get(r#"k:{"name":"app"}"#).is_some(), "{a}");
}

#[test]
fn raw_apply_requests_follow_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    let path = "/api/v1/namespaces/default/configmaps/raw";
    let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: raw\ndata:\n  k: v\n".to_vec();
    let apply = |query: &str, body: &[u8]| {
        admin_raw_request(
            &s,
            reqwest::Method::PATCH,
            &format!("{path}{query}"),
            Some(("application/apply-patch+yaml", body.to_vec())),
        )
    };
    let (code, answer) = apply("", &yaml);
    assert_eq!(code, 422, "{answer}");
    assert_eq!(
        answer["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    let (code, answer) = apply("?fieldManager=m&dryRun=All", &yaml);
    assert_eq!(code, 201, "{answer}");
    assert_eq!(admin_get(&s, path).0, 404, "a dry run creates nothing");
    // A uid naming no existing object is the patch handler's conflict (409), in its words.
    let with_uid = |uid: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: raw\n  uid: {uid}\ndata:\n  k: v\n").into_bytes()
    };
    let (code, answer) = apply("?fieldManager=m", &with_uid("0a0a0a0a-0000-4000-8000-000000000000"));
    assert_eq!(code, 409, "{answer}");
    assert_eq!(
        answer["message"],
        r#"Operation cannot be fulfilled on configmaps "raw": uid mismatch: the provided object specified uid 0a0a0a0a-0000-4000-8000-000000000000, and no existing object was found"#
    );
    let (code, answer) = apply("?fieldManager=m", &yaml);
    assert_eq!((code, answer["data"]["k"].clone()), (201, json!("v")), "{answer}");
    assert_eq!(answer["metadata"]["managedFields"][0]["operation"], "Apply");
    // An apply may not change an existing object's uid (422, field is immutable); its own
    // uid is fine.
    let uid = answer["metadata"]["uid"].as_str().unwrap().to_owned();
    let (code, answer) = apply("?fieldManager=m", &with_uid("0b0b0b0b-0000-4000-8000-000000000000"));
    assert_eq!(code, 422, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .ends_with(r#"metadata.uid: Invalid value: "0b0b0b0b-0000-4000-8000-000000000000": field is immutable"#),
        "{answer}"
    );
    assert_eq!(apply("?fieldManager=m", &with_uid(&uid)).0, 200);
    // hostile bodies: a field not in the schema, broken YAML, a wrong version, managedFields
    for (body, want) in [
        (
            &b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: raw\nnope: 1\n"[..],
            ".nope: field not declared in schema",
        ),
        (b"apiVersion: v1\nkind: ConfigMap\nmetadata: [\n", "error decoding YAML"),
        (b"apiVersion: v2\nkind: ConfigMap\nmetadata:\n  name: raw\n", "Specified patch version: v2, expected: v1"),
        (
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: raw\n  managedFields: []\n",
            "metadata.managedFields must be nil",
        ),
        (b"- a\n", "must be a mapping"),
    ] {
        let (code, answer) = apply("?fieldManager=m", body);
        assert_eq!(code, 400, "{answer}");
        assert!(answer["message"].as_str().unwrap().contains(want), "{answer}");
    }
    // duplicate keys: refused under Strict naming the field, else the last one wins
    let twice = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: raw\ndata:\n  k: a\n  k: b\n";
    let (code, answer) = apply("?fieldManager=m&fieldValidation=Strict", twice);
    assert_eq!(code, 400, "{answer}");
    assert_eq!(answer["message"], "error strict decoding YAML: duplicate field \"data.k\"");
    let (code, answer) = apply("?fieldManager=m", twice);
    assert_eq!((code, answer["data"]["k"].clone()), (200, json!("b")), "{answer}");
    // force is for apply only; invalid managedFields in an update are a 400 naming the field
    let (code, _) = admin_request(&s, reqwest::Method::PUT, &format!("{path}?force=true"), Some(json!({})));
    assert_eq!(code, 422);
    let mut object = admin_get(&s, path).1;
    object["metadata"]["managedFields"] =
        json!([{"manager": "x", "operation": "Nope", "apiVersion": "v1", "fieldsType": "FieldsV1"}]);
    let (code, answer) = admin_request(&s, reqwest::Method::PUT, path, Some(object.clone()));
    assert_eq!(code, 400, "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("metadata.managedFields[0].operation"), "{answer}");
    // an empty list resets them: the update's own entry is all that is left
    object["metadata"]["managedFields"] = json!([]);
    object["data"]["k"] = json!("w");
    let (code, answer) = admin_request(&s, reqwest::Method::PUT, path, Some(object));
    assert_eq!(code, 200, "{answer}");
    let managers: Vec<Value> =
        answer["metadata"]["managedFields"].as_array().unwrap().iter().map(|e| e["operation"].clone()).collect();
    assert_eq!(managers, [json!("Update")], "{answer}");
}

#[test]
fn the_python_client_applies_server_side() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    // The typed client with `_content_type`, then the dynamic client's server_side_apply:
    // both send `application/apply-patch+yaml` with a JSON body (JSON is YAML).
    let script = r#"
import json, sys
from kubernetes import client, config, dynamic
from kubernetes.client.rest import ApiException
api = config.new_client_from_config(sys.argv[1])
v1 = client.CoreV1Api(api)
out = {}
body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "py"}, "data": {"a": "1", "b": "2"}}
cm = v1.patch_namespaced_config_map("py", "default", body, field_manager="py-typed",
                                    _content_type="application/apply-patch+yaml")
out["created"] = cm.data
out["managers"] = [(e.manager, e.operation) for e in cm.metadata.managed_fields]
dyn = dynamic.DynamicClient(api)
cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
try:
    dyn.server_side_apply(cms, body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "py"},
                                     "data": {"a": "other"}}, namespace="default", field_manager="py-dyn")
    out["conflict"] = None
except ApiException as e:
    out["conflict"] = {"status": e.status, "body": json.loads(e.body)}
forced = dyn.server_side_apply(cms, body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "py"},
                                          "data": {"a": "other"}}, namespace="default",
                               field_manager="py-dyn", force_conflicts=True)
out["forced"] = forced.to_dict()["data"]
# the first manager drops b: removed, since no one else owns it; a now belongs to py-dyn
cm = v1.patch_namespaced_config_map("py", "default", {"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "py"}}, field_manager="py-typed",
                                    _content_type="application/apply-patch+yaml")
out["after"] = cm.data
print(json.dumps(out))
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, s.dir.join("admin.kubeconfig").to_str().unwrap()])
        .output()
        .expect("python3 with the kubernetes client (scripts/install-test-deps)");
    let out: Value = serde_json::from_str(&ok(out, "python apply")).unwrap();
    assert_eq!(out["created"], json!({"a": "1", "b": "2"}), "{out}");
    assert_eq!(out["managers"], json!([["py-typed", "Apply"]]), "{out}");
    assert_eq!(out["conflict"]["status"], 409, "{out}");
    assert_eq!(
        out["conflict"]["body"]["message"], "Apply failed with 1 conflict: conflict with \"py-typed\": .data.a",
        "{out}"
    );
    assert_eq!(out["conflict"]["body"]["details"]["causes"][0]["field"], ".data.a", "{out}");
    assert_eq!(out["forced"], json!({"a": "other", "b": "2"}), "{out}");
    assert_eq!(out["after"], json!({"a": "other"}), "{out}");
}
