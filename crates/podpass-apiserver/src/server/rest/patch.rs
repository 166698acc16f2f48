//! PATCH bodies: JSON patch (RFC 6902, through the `json-patch` crate), JSON merge patch
//! (RFC 7386) and the strategic merge patch kubectl sends for built-in types
//! (apimachinery strategicpatch), for the list fields of the served objects that upstream
//! merges by key.

use axum::http::StatusCode;
use serde_json::{Map, Value};

use crate::server::status::StatusError;

/// Operations one JSON patch may hold (kube-apiserver's maxJSONPatchOperations).
const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Decodes an RFC 6902 patch: a malformed one is a 400, too many operations a 413, as
/// kube-apiserver answers.
pub fn decode_json_patch(patch: &Value) -> Result<json_patch::Patch, StatusError> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| StatusError::bad_request(format!("error decoding json patch: {e}")))?;
    if ops.0.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(StatusError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!(
                "The allowed operations in a JSON patch is limited to {MAX_JSON_PATCH_OPERATIONS}, got {}",
                ops.0.len()
            ),
        ));
    }
    Ok(ops)
}

/// Bytes the `copy` operations of one patch may duplicate in all: kube-apiserver bounds
/// json-patch's accumulated copy size by its request body limit (3 MiB) times three, or
/// 10 000 copies of a large subtree would take gigabytes.
const MAX_ACCUMULATED_COPY_BYTES: usize = 3 * 3 * 1024 * 1024;

/// Applies an RFC 6902 patch; an operation that cannot apply (a failed `test`, a missing
/// path, copies past [`MAX_ACCUMULATED_COPY_BYTES`]) is a 422, as kube-apiserver answers,
/// and leaves `target` unchanged.
pub fn apply_json_patch(target: &mut Value, ops: &json_patch::Patch) -> Result<(), StatusError> {
    let refuse = |m: String| StatusError::new(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", format!("json patch: {m}"));
    let mut doc = target.clone();
    let mut copied: usize = 0;
    for (i, op) in ops.0.iter().enumerate() {
        if let json_patch::PatchOperation::Copy(copy) = op {
            let size = doc.pointer(copy.from.as_str()).map_or(0, |v| serde_json::to_vec(v).map_or(0, |b| b.len()));
            copied = copied.saturating_add(size);
            if copied > MAX_ACCUMULATED_COPY_BYTES {
                return Err(refuse(format!(
                    "operation {i}: the copy operations would duplicate more than {MAX_ACCUMULATED_COPY_BYTES} bytes"
                )));
            }
        }
        json_patch::patch(&mut doc, std::slice::from_ref(op))
            .map_err(|e| refuse(format!("operation {i} failed at path {:?}: {}", e.path.as_str(), e.kind)))?;
    }
    *target = doc;
    Ok(())
}

/// Lists upstream merges element-wise by a key (`patchMergeKey`), by field name.
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers" | "initContainers" | "ephemeralContainers" | "volumes" | "env" | "imagePullSecrets" => {
            Some("name")
        }
        "volumeMounts" => Some("mountPath"),
        "ports" => Some("containerPort"),
        "tolerations" | "secrets" | "subjects" => None,
        _ => None,
    }
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// Strategic merge patch: as the merge patch, except that lists with a merge key are
/// merged element by element (`$patch: delete` removes an element, `$patch: replace`
/// replaces the list), and `$`-directives that only order or retain keys are dropped.
pub fn strategic_merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replacement = patch.clone();
        strip_directives(&mut replacement);
        *target = replacement;
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        match (v, merge_key(k), t.get_mut(k)) {
            (Value::Null, _, _) => {
                t.remove(k);
            }
            (Value::Array(items), Some(key), Some(Value::Array(existing))) => {
                merge_list(existing, items, key);
            }
            (Value::Object(_), _, Some(existing)) => strategic_merge_patch(existing, v),
            _ => {
                let mut value = v.clone();
                strip_directives(&mut value);
                t.insert(k.clone(), value);
            }
        }
    }
}

fn merge_list(existing: &mut Vec<Value>, items: &[Value], key: &str) {
    if items.iter().any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace")) {
        *existing = items.iter().filter(|i| i.get("$patch").is_none()).cloned().collect();
        return;
    }
    for item in items {
        let id = item.get(key).cloned();
        let position = id.as_ref().and_then(|id| existing.iter().position(|e| e.get(key) == Some(id)));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (position, delete) {
            (Some(i), true) => {
                existing.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic_merge_patch(&mut existing[i], item),
            (None, false) => {
                let mut value = item.clone();
                strip_directives(&mut value);
                existing.push(value);
            }
        }
    }
}

fn strip_directives(value: &mut Value) {
    match value {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(strip_directives);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_applies_whole_or_not_at_all() {
        let mut sa = json!({"metadata": {"name": "sa", "labels": {"a": "1"}}});
        let ops = decode_json_patch(&json!([
            {"op": "test", "path": "/metadata/labels/a", "value": "1"},
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
            {"op": "remove", "path": "/metadata/labels/a"}
        ]))
        .unwrap();
        apply_json_patch(&mut sa, &ops).unwrap();
        assert_eq!(sa["metadata"]["labels"], json!({"b": "2"}));
        let before = sa.clone();
        let failing = decode_json_patch(&json!([
            {"op": "add", "path": "/metadata/labels/c", "value": "3"},
            {"op": "test", "path": "/metadata/labels/b", "value": "nope"}
        ]))
        .unwrap();
        let err = apply_json_patch(&mut sa, &failing).unwrap_err();
        assert_eq!(err.code, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(sa, before, "nothing applied");
        let err = decode_json_patch(&json!({"op": "add"})).unwrap_err();
        assert_eq!(err.code, StatusCode::BAD_REQUEST);
        // Copies that would multiply a large value: refused before memory is spent.
        let mut big = json!({"a": "x".repeat(1024 * 1024)});
        let copies: Vec<Value> =
            (0..20).map(|i| json!({"op": "copy", "from": "/a", "path": format!("/c{i}")})).collect();
        let err = apply_json_patch(&mut big, &decode_json_patch(&Value::Array(copies)).unwrap()).unwrap_err();
        assert_eq!(err.code, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(err.message.contains("operation 8: the copy operations would duplicate more than"), "{}", err.message);
        assert_eq!(big.as_object().unwrap().len(), 1, "nothing applied");
        let many = Value::Array(vec![json!({"op": "test", "path": "/a", "value": 1}); 10_001]);
        assert_eq!(decode_json_patch(&many).unwrap_err().code, StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
    }

    #[test]
    fn strategic_patch_merges_keyed_lists() {
        let mut pod = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [
            {"name": "app", "image": "v1"}, {"name": "side", "image": "s1"}]}});
        strategic_merge_patch(
            &mut pod,
            &json!({"metadata": {"labels": {"b": "2"}}, "spec": {
                "$setElementOrder/containers": [{"name": "app"}],
                "containers": [{"name": "app", "image": "v2"}, {"name": "side", "$patch": "delete"}, {"name": "new", "image": "n"}]}}),
        );
        assert_eq!(
            pod,
            json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"containers": [
            {"name": "app", "image": "v2"}, {"name": "new", "image": "n"}]}})
        );
        // unkeyed lists are replaced
        let mut sa = json!({"secrets": [{"name": "a"}]});
        strategic_merge_patch(&mut sa, &json!({"secrets": [{"name": "b"}]}));
        assert_eq!(sa, json!({"secrets": [{"name": "b"}]}));
    }
}
