//! PATCH bodies: JSON merge patch (RFC 7386) and the strategic merge patch kubectl sends
//! for built-in types (apimachinery strategicpatch), for the list fields of the served
//! objects that upstream merges by key.

use serde_json::{Map, Value};

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
