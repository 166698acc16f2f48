//! API request inputs as the REST layer decodes them first: bodies (JSON, and protobuf of
//! every served kind through the generated schema), `continue` tokens, server-side apply
//! configurations (YAML) and `fieldsV1` sets, whether sent or stored in managedFields. A
//! token that decodes names a start key inside its list (never empty, absolute or with a
//! `..` segment) and survives a round trip; a decoded field set survives one too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use podpass_apiserver::{apply_configuration, decode_continue_token, decode_request_body, encode_continue_token};
use serde_json::{Value, json};

/// A stored pod with two managers, so applies meet conflicts and shared fields.
fn live_pod(fields_v1: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": {"a": "1"}, "managedFields": [
            {"manager": "other", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
             "fieldsV1": fields_v1},
            {"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:a": {}}}}}
        ]},
        "spec": {"containers": [{"name": "app", "image": "i", "ports": [{"containerPort": 80}]}]}
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = decode_request_body("application/json", data);
    let _ = decode_request_body("application/vnd.kubernetes.protobuf", data);
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok((revision, start)) = decode_continue_token(text)
    {
        assert!(!start.is_empty() && !start.starts_with('/'), "start key {start:?}");
        assert!(!start.split('/').any(|p| p == ".."), "start key {start:?}");
        let again = decode_continue_token(&encode_continue_token(revision, &start));
        assert_eq!(again, Ok((revision, start)));
    }
    // the bytes as an apply configuration: created, and applied over a pod with owners
    let owned = json!({"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}});
    for (group, plural) in [("", "pods"), ("", "configmaps"), ("rbac.authorization.k8s.io", "roles")] {
        let _ = apply_configuration(group, plural, None, data, "fuzz", false);
    }
    let _ = apply_configuration("", "pods", Some(&live_pod(owned)), data, "fuzz", false);
    let _ = apply_configuration("", "pods", Some(&live_pod(json!({}))), data, "kubectl", true);
    // the bytes as a fieldsV1 set: decoded, round-tripped, and stored as a manager's
    if let Ok(doc) = serde_json::from_slice::<Value>(data) {
        if let Ok(set) = podpass_merge::Set::from_fields_v1(&doc) {
            let again = podpass_merge::Set::from_fields_v1(&set.to_fields_v1());
            assert_eq!(again.as_ref(), Ok(&set), "fieldsV1 round trip of {doc}");
        }
        let config = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"app","image":"j"}]}}"#;
        let _ = apply_configuration("", "pods", Some(&live_pod(doc)), config, "fuzz", false);
    }
});
