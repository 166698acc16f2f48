//! `pods/binding` (pkg/registry/core/pod/storage `BindingREST`): a scheduler assigns a pod
//! to a node. The pod's `spec.nodeName` is set only if it was empty, the Binding's
//! annotations are merged into the pod's, and the `PodScheduled` condition becomes True —
//! in one compare-and-swap, retried on the latest pod as upstream's `GuaranteedUpdate`.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::write::Target;
use super::{json_response, key};
use crate::field::Field;
use crate::server::AppState;
use crate::server::status::StatusError;
use crate::store::StoreError;
use crate::time::format_rfc3339;

/// Lost compare-and-swaps an assignment retries on the latest pod.
const ASSIGN_RETRIES: usize = 8;

/// POST `pods/{name}/binding`: validates the Binding (`ValidatePodBinding`) and assigns the
/// pod; the answer is a `Status` of Success, as upstream's.
pub(super) async fn create(t: &Target<'_>, name: &str, binding: Value) -> Result<Response, StatusError> {
    if binding.get("kind").and_then(Value::as_str).is_some_and(|k| k != "Binding") {
        return Err(StatusError::bad_request(format!("not a Binding object: {}", binding["kind"])));
    }
    let binding_name = binding.field("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    if binding_name != name {
        return Err(StatusError::bad_request("name in URL does not match name in Binding object"));
    }
    let target_kind = binding.field("/target/kind").and_then(Value::as_str).unwrap_or_default();
    let node = binding.field("/target/name").and_then(Value::as_str).unwrap_or_default();
    let mut errors = Vec::new();
    if !target_kind.is_empty() && target_kind != "Node" {
        errors.push(format!(
            "target.kind: Unsupported value: {}: supported values: \"Node\", \"<empty>\"",
            podpass_api::validation::quote(target_kind)
        ));
    }
    if node.is_empty() {
        errors.push("target.name: Required value".to_owned());
    }
    super::kinds::invalid("Binding", name, errors)?;
    let annotations = binding.field("/metadata/annotations").and_then(Value::as_object).cloned().unwrap_or_default();
    let ns = t.ns.unwrap_or_default();
    assign(t.state, ns, name, node, &annotations, t.write.is_dry_run()).await?;
    Ok(json_response(
        StatusCode::CREATED,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

/// Assigns pod `ns/name` to `node` (`setPodHostAndAnnotations`): a pod being deleted or
/// already on a node is a 409 on `pods/binding`; a missing pod is a 404. `dry_run` checks
/// and writes nothing.
pub(crate) async fn assign(
    state: &AppState,
    ns: &str,
    name: &str,
    node: &str,
    annotations: &Map<String, Value>,
    dry_run: bool,
) -> Result<(), StatusError> {
    let res = super::resources::find("", "pods").ok_or_else(|| StatusError::internal("pods are not served"))?;
    let k = key(res, Some(ns), name);
    let conflict = |why: String| {
        StatusError::new(
            StatusCode::CONFLICT,
            "Conflict",
            format!("Operation cannot be fulfilled on pods/binding {name:?}: {why}"),
        )
    };
    for _ in 0..ASSIGN_RETRIES {
        let current = state.store.get(&k).await?;
        let mut pod = current.object;
        if pod.field("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null()) {
            return Err(conflict(format!("pod {name} is being deleted, cannot be assigned to a host")));
        }
        let assigned = pod.field("/spec/nodeName").and_then(Value::as_str).unwrap_or_default();
        if !assigned.is_empty() {
            return Err(conflict(format!("pod {name} is already assigned to node {assigned:?}")));
        }
        pod["spec"]["nodeName"] = json!(node);
        if !annotations.is_empty() {
            let meta = &mut pod["metadata"];
            if !meta["annotations"].is_object() {
                meta["annotations"] = json!({});
            }
            if let Some(existing) = meta["annotations"].as_object_mut() {
                existing.extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        set_condition(&mut pod, "PodScheduled", "True", None, podpass_token::now_unix());
        if dry_run {
            return Ok(());
        }
        match state.store.update(&k, pod, Some(current.revision)).await {
            Ok(_) => return Ok(()),
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(conflict("the pod kept changing; try again".into()))
}

/// `UpdatePodCondition`: sets condition `kind` to `status` (with a reason and message, or
/// none), moving `lastTransitionTime` only when the status changes; true when anything
/// changed.
pub(crate) fn set_condition(
    pod: &mut Value,
    kind: &str,
    status: &str,
    reason_message: Option<(&str, &str)>,
    now: i64,
) -> bool {
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    let Some(conditions) = pod["status"]["conditions"].as_array_mut() else { return false };
    let mut next = json!({"type": kind, "status": status, "lastProbeTime": null,
                          "lastTransitionTime": format_rfc3339(now)});
    if let Some((reason, message)) = reason_message {
        next["reason"] = json!(reason);
        next["message"] = json!(message);
    }
    match conditions.iter_mut().find(|c| c["type"] == kind) {
        None => {
            conditions.push(next);
            true
        }
        Some(existing) => {
            if existing["status"] == status {
                next["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            }
            let changed = ["status", "reason", "message"].iter().any(|f| existing.get(*f) != next.get(*f));
            if changed {
                *existing = next;
            }
            changed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_moves_its_transition_time_only_when_its_status_changes() {
        let mut pod = json!({"spec": {}});
        assert!(set_condition(&mut pod, "PodScheduled", "False", Some(("Unschedulable", "0/1 nodes")), 100));
        assert!(!set_condition(&mut pod, "PodScheduled", "False", Some(("Unschedulable", "0/1 nodes")), 200));
        assert!(set_condition(&mut pod, "PodScheduled", "False", Some(("Unschedulable", "0/2 nodes")), 300));
        assert_eq!(pod["status"]["conditions"][0]["lastTransitionTime"], format_rfc3339(100), "same status");
        assert!(set_condition(&mut pod, "PodScheduled", "True", None, 400));
        let condition = &pod["status"]["conditions"][0];
        assert_eq!(condition["lastTransitionTime"], format_rfc3339(400));
        assert!(condition.get("reason").is_none(), "{condition}");
        assert_eq!(pod["status"]["conditions"].as_array().unwrap().len(), 1);
    }
}
