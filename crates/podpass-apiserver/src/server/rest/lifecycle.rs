//! Object lifecycle as upstream runs it: `metadata.finalizers` (an object with finalizers
//! is only marked on delete, and goes when the last one is removed), NamespaceLifecycle
//! admission (no new content in a namespace being terminated, none in a namespace that is
//! gone), and the namespace controller (a deleted namespace is marked `Terminating`,
//! emptied, then removed).

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::resources::Resource;
use crate::field::Field;
use crate::server::AppState;
use crate::server::status::StatusError;
use crate::store::{ObjectKey, StoreError, Stored};
use crate::time::format_rfc3339;

/// Namespaces upstream refuses to delete.
const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// The finalizer the namespace controller owns (`spec.finalizers`).
const NAMESPACE_FINALIZER: &str = "kubernetes";

fn str_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
}

/// `metadata.finalizers`.
pub fn finalizers(object: &Value) -> Vec<String> {
    str_list(object.field("/metadata/finalizers"))
}

pub(crate) fn being_deleted(object: &Value) -> bool {
    object.field("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
}

/// NamespaceLifecycle admission for a create in `ns`: the namespace exists and is not
/// terminating. Returns its UID, which [`after_create`] checks again.
pub async fn admit_create(state: &AppState, res: &Resource, ns: &str, name: &str) -> Result<String, StatusError> {
    let namespace = match state.store.get_shared(&ObjectKey::cluster("namespaces", ns)).await {
        Ok(n) => n,
        Err(StoreError::NotFound { .. }) => return Err(StatusError::not_found("namespaces", ns)),
        Err(e) => return Err(e.into()),
    };
    if being_deleted(&namespace.object)
        || namespace.object.field("/status/phase").and_then(Value::as_str) == Some("Terminating")
    {
        return Err(StatusError::new(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "{} {name:?} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                res.plural
            ),
        ));
    }
    Ok(namespace.object.field("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_owned())
}

/// After a create in `ns`: if the namespace began terminating (or was replaced) while the
/// object was written, the namespace controller's last pass may have missed it, so it is
/// removed here and the create refused. Between the two checks no object outlives its
/// namespace into a re-created one of the same name.
pub async fn after_create(
    state: &AppState,
    res: &Resource,
    ns: &str,
    ns_uid: &str,
    key: &ObjectKey,
    created: &Stored,
) -> Result<(), StatusError> {
    let still = match state.store.get_shared(&ObjectKey::cluster("namespaces", ns)).await {
        Ok(n) => !being_deleted(&n.object) && n.object.field("/metadata/uid").and_then(Value::as_str) == Some(ns_uid),
        Err(StoreError::NotFound { .. }) => false,
        Err(e) => return Err(e.into()),
    };
    if still {
        return Ok(());
    }
    match state.store.delete(key, Some(created.revision)).await {
        Ok(_) | Err(StoreError::NotFound { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let name = created.object.field("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    Err(StatusError::new(
        StatusCode::FORBIDDEN,
        "Forbidden",
        format!(
            "{} {name:?} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
            res.plural
        ),
    ))
}

/// `ValidateObjectMetaUpdate`: once deletion started, no finalizer may be added.
pub fn check_finalizer_update(kind: &str, name: &str, old: &Value, new: &Value) -> Result<(), StatusError> {
    if !being_deleted(old) {
        return Ok(());
    }
    let before = finalizers(old);
    let added: Vec<String> = finalizers(new).into_iter().filter(|f| !before.contains(f)).collect();
    if added.is_empty() {
        return Ok(());
    }
    let listed: Vec<String> = added.iter().map(|f| podpass_api::validation::quote(f)).collect();
    Err(StatusError::invalid(format!(
        "{kind} {name:?} is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
        listed.join(", ")
    )))
}

/// Marks an object with finalizers as being deleted (deletionTimestamp now, grace 0), or
/// returns it unchanged if it already is. `None`: it has no finalizers, delete it.
pub async fn mark_if_finalized(
    state: &AppState,
    key: &ObjectKey,
    current: &Stored,
) -> Result<Option<Value>, StatusError> {
    if finalizers(&current.object).is_empty() {
        return Ok(None);
    }
    if being_deleted(&current.object) {
        return Ok(Some(current.object.clone()));
    }
    let mut marked = current.object.clone();
    mark_deleted(&mut marked, podpass_token::now_unix(), 0);
    Ok(Some(state.store.update(key, marked, Some(current.revision)).await?.object))
}

/// After an update: an object being deleted whose last finalizer is gone (and, for pods,
/// whose grace period is over) is removed. Returns the object as the client should see it.
pub async fn finish_if_finalized(state: &AppState, key: &ObjectKey, updated: Stored) -> Result<Value, StatusError> {
    let grace_over = updated.object.field("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0)
        == 0
        || key.resource != "pods";
    // The namespace REST's ShouldDeleteDuringUpdate: its `spec.finalizers` hold it too.
    let namespace_held = key.resource == "namespaces" && !str_list(updated.object.field("/spec/finalizers")).is_empty();
    if being_deleted(&updated.object) && finalizers(&updated.object).is_empty() && grace_over && !namespace_held {
        match state.store.delete(key, Some(updated.revision)).await {
            Ok(_) | Err(StoreError::NotFound { .. } | StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(updated.object)
}

/// New namespaces start `Active` with the controller's finalizer, as upstream's strategy
/// sets them.
pub fn namespace_defaults(object: &mut Value) {
    let Some(obj) = object.as_object_mut() else { return };
    let spec = obj.entry("spec").or_insert_with(|| json!({}));
    if let Some(spec) = spec.as_object_mut() {
        let finalizers = spec.entry("finalizers").or_insert_with(|| json!([]));
        if let Some(list) = finalizers.as_array_mut()
            && !list.iter().any(|f| f == NAMESPACE_FINALIZER)
        {
            list.push(json!(NAMESPACE_FINALIZER));
        }
    }
    obj.insert("status".into(), json!({"phase": "Active"}));
}

/// `DELETE /api/v1/namespaces/{name}` (the namespace registry's `Delete`): refuses the
/// immortal ones; marks an active namespace `Terminating` for the namespace controller
/// (`podpass controller-manager`) to empty; removes a terminating one whose `spec.finalizers`
/// the controller emptied (kept, marked, while `metadata.finalizers` hold it); refuses a
/// terminating one still being emptied.
pub async fn delete_namespace(state: &Arc<AppState>, name: &str, current: Stored) -> Result<Value, StatusError> {
    check_deletable_namespace(name)?;
    let key = ObjectKey::cluster("namespaces", name);
    if being_deleted(&current.object) {
        if !str_list(current.object.field("/spec/finalizers")).is_empty() {
            return Err(namespace_terminating_conflict(name));
        }
        if !finalizers(&current.object).is_empty() {
            return Ok(current.object);
        }
        return Ok(state.store.delete(&key, Some(current.revision)).await?.object);
    }
    let mut marked = current.object.clone();
    mark_terminating(&mut marked, podpass_token::now_unix());
    let updated = state.store.update(&key, marked, Some(current.revision)).await?;
    Ok(updated.object)
}

/// Marks `object` for deletion `grace` seconds after `now` (its `deletionTimestamp` and
/// `deletionGracePeriodSeconds`).
pub fn mark_deleted(object: &mut Value, now: i64, grace: i64) {
    object["metadata"]["deletionTimestamp"] = json!(format_rfc3339(now + grace));
    object["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
}

/// Marks a namespace for deletion at `now`: Terminating until its content is gone.
pub fn mark_terminating(namespace: &mut Value, now: i64) {
    mark_deleted(namespace, now, 0);
    namespace["status"] = json!({"phase": "Terminating"});
}

/// The namespaces that may not be deleted (upstream's NamespaceLifecycle admission).
pub fn check_deletable_namespace(name: &str) -> Result<(), StatusError> {
    if IMMORTAL_NAMESPACES.contains(&name) {
        return Err(StatusError::forbidden_raw(format!(
            "namespaces {name:?} is forbidden: this namespace may not be deleted"
        )));
    }
    Ok(())
}

/// Deleting a namespace that is already terminating (upstream's message).
pub fn namespace_terminating_conflict(name: &str) -> StatusError {
    StatusError::new(
        StatusCode::CONFLICT,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on namespaces {name:?}: The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system."
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_finalizer_may_be_added_once_deletion_started() {
        let old = json!({"metadata": {"name": "c", "finalizers": ["a"], "deletionTimestamp": "2026-01-01T00:00:00Z"}});
        let mut new = old.clone();
        new["metadata"]["finalizers"] = json!(["a", "b"]);
        let err = check_finalizer_update("ConfigMap", "c", &old, &new).unwrap_err();
        assert!(err.message.ends_with(r#"found new finalizers []string{"b"}"#), "{}", err.message);
        new["metadata"]["finalizers"] = json!([]);
        assert_eq!(check_finalizer_update("ConfigMap", "c", &old, &new), Ok(()));
        let live = json!({"metadata": {"name": "c"}});
        assert_eq!(check_finalizer_update("ConfigMap", "c", &live, &old), Ok(()));
    }

    #[test]
    fn namespaces_start_active_with_the_controller_finalizer() {
        let mut ns = json!({"metadata": {"name": "n"}, "spec": {"finalizers": ["example.com/x"]}});
        namespace_defaults(&mut ns);
        assert_eq!(ns["spec"]["finalizers"], json!(["example.com/x", "kubernetes"]));
        assert_eq!(ns["status"]["phase"], "Active");
        namespace_defaults(&mut ns);
        assert_eq!(ns["spec"]["finalizers"], json!(["example.com/x", "kubernetes"]));
    }
}
