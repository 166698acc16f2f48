//! LimitRanger admission (upstream: `plugin/pkg/admission/limitranger`): on a pod create in
//! a namespace with LimitRanges, each container without a limit or request of a resource
//! gets the `Container` item's `default` / `defaultRequest` (mutating, recorded in the
//! `kubernetes.io/limit-ranger` annotation), then every container and the pod as a whole
//! must fit each item's `min`, `max` and `maxLimitRequestRatio` (validating: 403 naming
//! every violation in upstream's words).

use serde_json::{Value, json};

use crate::field::Field;
use crate::server::AppState;
use crate::server::status::StatusError;
use crate::store::ListOptions;

/// The annotation naming what the plugin set.
const ANNOTATION: &str = "kubernetes.io/limit-ranger";

fn milli(v: Option<&Value>) -> Option<i128> {
    v.and_then(Value::as_str).and_then(|s| podpass_api::quantity::parse_milli(s).ok())
}

fn items(ranges: &[Value], kind: &str) -> Vec<Value> {
    ranges
        .iter()
        .flat_map(|r| r.field("/spec/limits").and_then(Value::as_array).cloned().unwrap_or_default())
        .filter(|i| i.get("type").and_then(Value::as_str) == Some(kind))
        .collect()
}

async fn ranges(state: &AppState, ns: &str) -> Result<Vec<Value>, StatusError> {
    Ok(state.store.list("limitranges", Some(ns), &ListOptions::default()).await?.items)
}

/// The mutating half: defaults into each container without them.
pub(crate) async fn default_pod(state: &AppState, ns: &str, pod: &mut Value) -> Result<(), StatusError> {
    let ranges = ranges(state, ns).await?;
    let containers = items(&ranges, "Container");
    if containers.is_empty() {
        return Ok(());
    }
    let mut set = Vec::new();
    for list in ["initContainers", "containers"] {
        let Some(cs) = pod.pointer_mut(&format!("/spec/{list}")).and_then(Value::as_array_mut) else { continue };
        for c in cs {
            let name = c.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
            let (mut requests_set, mut limits_set) = (Vec::new(), Vec::new());
            for item in &containers {
                for (field, target, record) in
                    [("defaultRequest", "requests", &mut requests_set), ("default", "limits", &mut limits_set)]
                {
                    for (resource, value) in item.get(field).and_then(Value::as_object).into_iter().flatten() {
                        if c.pointer(&format!("/resources/{target}/{resource}")).is_none() {
                            if c.get("resources").is_none_or(|r| !r.is_object()) {
                                c["resources"] = json!({});
                            }
                            if c["resources"].get(target).is_none_or(|r| !r.is_object()) {
                                c["resources"][target] = json!({});
                            }
                            c["resources"][target][resource] = value.clone();
                            record.push(resource.clone());
                        }
                    }
                }
            }
            for (what, mut names) in [("request", requests_set), ("limit", limits_set)] {
                if !names.is_empty() {
                    names.sort();
                    names.dedup();
                    set.push(format!(
                        "{} {what} for {} {name}",
                        names.join(", "),
                        if list == "containers" { "container" } else { "init container" }
                    ));
                }
            }
        }
    }
    if !set.is_empty() {
        if pod.pointer("/metadata/annotations").is_none_or(|a| !a.is_object()) {
            pod["metadata"]["annotations"] = json!({});
        }
        pod["metadata"]["annotations"][ANNOTATION] = json!(format!("LimitRanger plugin set: {}", set.join("; ")));
    }
    Ok(())
}

/// The validating half: `min`, `max` and `maxLimitRequestRatio` of `Container` and `Pod`
/// items.
pub(crate) async fn validate_pod(state: &AppState, ns: &str, name: &str, pod: &Value) -> Result<(), StatusError> {
    let ranges = ranges(state, ns).await?;
    if ranges.is_empty() {
        return Ok(());
    }
    let mut errors = Vec::new();
    let list = |n: &str| pod.pointer(&format!("/spec/{n}")).and_then(Value::as_array).cloned().unwrap_or_default();
    let containers: Vec<Value> = list("initContainers").into_iter().chain(list("containers")).collect();
    let get = |c: &Value, kind: &str, r: &str| milli(c.pointer(&format!("/resources/{kind}/{r}")));
    let mut check =
        |kind: &str, item: &Value, request: &dyn Fn(&str) -> Option<i128>, limit: &dyn Fn(&str) -> Option<i128>| {
            for (r, v) in item.get("min").and_then(Value::as_object).into_iter().flatten() {
                let min = v.as_str().unwrap_or_default();
                match request(r) {
                    None => errors.push(format!("minimum {r} usage per {kind} is {min}.  No request is specified")),
                    Some(q) if milli(Some(v)).is_some_and(|m| q < m) => {
                        errors.push(format!(
                            "minimum {r} usage per {kind} is {min}, but request is {}",
                            super::quota::format_quantity(r, q)
                        ));
                    }
                    _ => {}
                }
            }
            for (r, v) in item.get("max").and_then(Value::as_object).into_iter().flatten() {
                let max = v.as_str().unwrap_or_default();
                match limit(r) {
                    None => errors.push(format!("maximum {r} usage per {kind} is {max}.  No limit is specified")),
                    Some(q) if milli(Some(v)).is_some_and(|m| q > m) => {
                        errors.push(format!(
                            "maximum {r} usage per {kind} is {max}, but limit is {}",
                            super::quota::format_quantity(r, q)
                        ));
                    }
                    _ => {}
                }
            }
            for (r, v) in item.get("maxLimitRequestRatio").and_then(Value::as_object).into_iter().flatten() {
                let (Some(l), Some(q), Some(ratio)) = (limit(r), request(r), milli(Some(v))) else { continue };
                if q > 0 && l * 1000 > ratio * q {
                    errors.push(format!(
                        "{r} max limit to request ratio per {kind} is {}, but provided ratio is {:.6}",
                        v.as_str().unwrap_or_default(),
                        l as f64 / q as f64
                    ));
                }
            }
        };
    for item in items(&ranges, "Container") {
        for c in &containers {
            check("Container", &item, &|r| get(c, "requests", r), &|r| get(c, "limits", r));
        }
    }
    for item in items(&ranges, "Pod") {
        // The pod's totals: a container without a value leaves the pod without one.
        let total = |kind: &str, r: &str| -> Option<i128> {
            let mut sum = 0;
            for c in list("containers") {
                sum += get(&c, kind, r)?;
            }
            Some(sum)
        };
        check("Pod", &item, &|r| total("requests", r), &|r| total("limits", r));
    }
    if errors.is_empty() {
        return Ok(());
    }
    let joined = if errors.len() == 1 { errors.remove(0) } else { format!("[{}]", errors.join(", ")) };
    Err(StatusError::forbidden_raw(format!("pods {name:?} is forbidden: {joined}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_pick_their_type() {
        let ranges = [json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}}, {"type": "Pod"}]}})];
        assert_eq!(items(&ranges, "Container").len(), 1);
        assert_eq!(items(&ranges, "Pod").len(), 1);
    }
}
