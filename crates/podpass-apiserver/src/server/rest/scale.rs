//! The `scale` subresource (upstream `ScaleREST`, autoscaling/v1 Scale): a view of a
//! workload's `spec.replicas`, its `status.replicas` and its selector as a string; a
//! write changes the workload's `spec.replicas` (through the workload's own update, so its
//! strategy, admission and audit apply) and answers the Scale. `kubectl scale` patches it.

use serde_json::{Value, json};

use super::kinds::Part;
use super::patch;
use super::write::{self, Target};
use crate::field::Field;
use crate::server::status::StatusError;

/// The Scale of a workload `object`.
pub(super) fn scale_of(object: &Value) -> Value {
    let meta = |f: &str| object.field(&format!("/metadata/{f}")).cloned().unwrap_or(Value::Null);
    let mut metadata = json!({"name": meta("name"), "namespace": meta("namespace"), "uid": meta("uid"),
        "resourceVersion": meta("resourceVersion"), "creationTimestamp": meta("creationTimestamp")});
    if let Some(m) = metadata.as_object_mut() {
        m.retain(|_, v| !v.is_null());
    }
    json!({
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": metadata,
        "spec": {"replicas": object.field("/spec/replicas").and_then(Value::as_i64).unwrap_or(0)},
        "status": {
            "replicas": object.field("/status/replicas").and_then(Value::as_i64).unwrap_or(0),
            "selector": selector_string(object.field("/spec/selector")),
        },
    })
}

/// A LabelSelector as `labels.Selector.String()` prints it: `a=b,c in (d,e),!f`, sorted
/// by key as upstream's requirements are.
fn selector_string(selector: Option<&Value>) -> String {
    let mut parts: Vec<(String, String)> = Vec::new();
    for (k, v) in selector.and_then(|s| s.get("matchLabels")).and_then(Value::as_object).into_iter().flatten() {
        parts.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or_default())));
    }
    for e in selector.and_then(|s| s.get("matchExpressions")).and_then(Value::as_array).into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or_default();
        let mut values: Vec<&str> = e["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        values.sort_unstable();
        let text = match e["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        parts.push((key.to_owned(), text));
    }
    parts.sort();
    parts.into_iter().map(|(_, t)| t).collect::<Vec<_>>().join(",")
}

/// `ValidateScale`: replicas not negative.
fn validate(name: &str, scale: &Value) -> Result<i64, StatusError> {
    let replicas = scale.field("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
    if replicas < 0 {
        return Err(StatusError::invalid(format!(
            "Scale.autoscaling {name:?} is invalid: spec.replicas: Invalid value: {replicas}: must be greater than or equal to 0"
        )));
    }
    Ok(replicas)
}

/// GET: the workload's Scale.
pub(super) async fn get(t: &Target<'_>, name: &str) -> Result<Value, StatusError> {
    let current = t.state.store.get(&super::key(t.res, t.ns, name)).await?;
    Ok(scale_of(&current.object))
}

/// PUT: `scale`'s replicas written to the workload (its resourceVersion, when given, a
/// precondition); the new Scale.
pub(super) async fn update(t: &Target<'_>, name: &str, scale: &Value) -> Result<Value, StatusError> {
    let replicas = validate(name, scale)?;
    let current = t.state.store.get(&super::key(t.res, t.ns, name)).await?;
    let mut object = current.object;
    object["spec"]["replicas"] = json!(replicas);
    match scale.field("/metadata/resourceVersion").and_then(Value::as_str).filter(|rv| !rv.is_empty()) {
        Some(rv) => object["metadata"]["resourceVersion"] = json!(rv),
        None => {
            if let Some(m) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
        }
    }
    let stored = write::update_object(t, name, Part::Main, object).await?;
    Ok(scale_of(&stored))
}

/// PATCH (merge, strategic or JSON patch) of the Scale, then as [`update`].
pub(super) async fn patch(t: &Target<'_>, name: &str, content_type: &str, body: &[u8]) -> Result<Value, StatusError> {
    let mut scale = get(t, name).await?;
    let patch_doc: Value =
        serde_json::from_slice(body).map_err(|e| StatusError::bad_request(format!("error decoding patch: {e}")))?;
    match content_type.split(';').next().unwrap_or("").trim() {
        "application/merge-patch+json" => patch::merge_patch(&mut scale, &patch_doc),
        "application/strategic-merge-patch+json" => patch::strategic_merge_patch(&mut scale, &patch_doc),
        "application/json-patch+json" => patch::apply_json_patch(&mut scale, &patch::decode_json_patch(&patch_doc)?)?,
        other => return Err(StatusError::unsupported_media_type(other)),
    }
    // A patch that does not name a resourceVersion applies to whatever is current.
    if patch_doc.field("/metadata/resourceVersion").is_none()
        && let Some(m) = scale.get_mut("metadata").and_then(Value::as_object_mut)
    {
        m.remove("resourceVersion");
    }
    update(t, name, &scale).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scale_shows_replicas_and_the_selector_as_upstream_prints_it() {
        let rs = json!({"metadata": {"name": "web", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]},
                                     {"key": "canary", "operator": "DoesNotExist"}]}},
            "status": {"replicas": 2}});
        let scale = scale_of(&rs);
        assert_eq!(scale["spec"]["replicas"], 3);
        assert_eq!(scale["status"]["replicas"], 2);
        assert_eq!(scale["status"]["selector"], "app=web,!canary,tier in (a,b)");
        assert_eq!(scale["metadata"]["resourceVersion"], "7");
        let e = validate("web", &json!({"spec": {"replicas": -1}})).unwrap_err();
        assert!(e.message.ends_with("spec.replicas: Invalid value: -1: must be greater than or equal to 0"));
    }
}
