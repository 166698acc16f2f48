//! DELETE as kube-apiserver: `DeleteOptions.preconditions` (UID, resourceVersion) answered
//! 409 when they do not hold; without them a lost compare-and-swap (someone else wrote in
//! between) is retried on the latest object, never answered 409; graceful deletion of pods
//! bound to a node (marked Terminating; the node removes the pod once it has stopped it, with
//! a zero-grace delete, as upstream — only a pod whose node no longer exists is removed
//! when its grace ends, as upstream's PodGC removes orphans); finalizers and namespaces
//! through `lifecycle`.

use std::collections::HashMap;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::admission::{self, Attributes, Operation};
use super::kinds::Written;
use super::resources::Resource;
use super::write::Target;
use super::{json_response, key, lifecycle};
use crate::field::Field;

use crate::server::status::StatusError;
use crate::store::{ObjectKey, StoreError, Stored};

/// `gracePeriodSeconds` from the query or the DeleteOptions; a value that is not an
/// integer is a 400 naming it.
fn grace_period(query: &HashMap<String, String>, options: &Value) -> Result<Option<i64>, StatusError> {
    if let Some(g) = query.get("gracePeriodSeconds") {
        return g.parse().map(Some).map_err(|_| {
            StatusError::bad_request(format!("gracePeriodSeconds: Invalid value: {g:?}: must be an integer"))
        });
    }
    match options.get("gracePeriodSeconds") {
        None | Some(Value::Null) => Ok(None),
        Some(g) => g.as_i64().map(Some).ok_or_else(|| {
            StatusError::bad_request(format!("gracePeriodSeconds: Invalid value: {g}: must be an integer"))
        }),
    }
}

/// The finalizer that has the garbage collector orphan an object's dependents before it
/// goes (`propagationPolicy: Orphan`, `kubectl delete --cascade=orphan`).
pub const ORPHAN_FINALIZER: &str = "orphan";
/// The finalizer that keeps an object until the garbage collector has deleted its
/// blocking dependents (`propagationPolicy: Foreground`).
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// What a delete does to the object's dependents (`DeleteOptions.propagationPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Propagation {
    /// Deleted at once; the garbage collector deletes its dependents after.
    Background,
    /// Kept (deleting) until its blocking dependents are deleted.
    Foreground,
    /// Kept (deleting) until its dependents no longer name it.
    Orphan,
}

/// The request's propagation: `orphanDependents` (deprecated, wins) or
/// `propagationPolicy`, from the query or the DeleteOptions; `None` when unspecified.
fn propagation(query: &HashMap<String, String>, options: &Value) -> Result<Option<Propagation>, StatusError> {
    let text = |name: &str| {
        query.get(name).cloned().or_else(|| match options.get(name) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Bool(b)) => Some(b.to_string()),
            _ => None,
        })
    };
    let (orphan, policy) = (text("orphanDependents"), text("propagationPolicy"));
    if orphan.is_some() && policy.is_some() {
        return Err(StatusError::invalid(
            "DeleteOptions is invalid: propagationPolicy: Invalid value: \"\": orphanDependents and deletionPropagation cannot be both set".to_owned(),
        ));
    }
    if let Some(o) = orphan {
        return Ok((o == "true").then_some(Propagation::Orphan));
    }
    match policy.as_deref() {
        None | Some("") => Ok(None),
        Some("Background") => Ok(Some(Propagation::Background)),
        Some("Foreground") => Ok(Some(Propagation::Foreground)),
        Some("Orphan") => Ok(Some(Propagation::Orphan)),
        Some(other) => Err(StatusError::invalid(format!(
            "DeleteOptions is invalid: propagationPolicy: Unsupported value: {}: supported values: \"Foreground\", \"Background\", \"Orphan\"",
            podpass_api::validation::quote(other)
        ))),
    }
}

/// `deletionFinalizersForGarbageCollection`: the object's finalizers under `propagation`
/// (unspecified keeps the ones it has), or `None` when they stay as they are.
fn gc_finalizers(object: &Value, propagation: Option<Propagation>, orphans_by_default: bool) -> Option<Vec<String>> {
    let current = lifecycle::finalizers(object);
    // Unsaid, and no GC finalizer yet: the resource's default (batch/v1 Jobs orphan,
    // upstream `DefaultGarbageCollectionPolicy`).
    let has_gc = current.iter().any(|f| f == ORPHAN_FINALIZER || f == FOREGROUND_FINALIZER);
    let propagation = propagation.or((orphans_by_default && !has_gc).then_some(Propagation::Orphan));
    let mut wanted: Vec<String> =
        current.iter().filter(|f| *f != ORPHAN_FINALIZER && *f != FOREGROUND_FINALIZER).cloned().collect();
    match propagation? {
        Propagation::Orphan => wanted.push(ORPHAN_FINALIZER.to_owned()),
        Propagation::Foreground => wanted.push(FOREGROUND_FINALIZER.to_owned()),
        Propagation::Background => {}
    }
    (wanted != current).then_some(wanted)
}

/// Lost compare-and-swaps a DELETE without preconditions retries on the latest object
/// before answering 409 (upstream's `GuaranteedUpdate` retries until it wins).
const DELETE_RETRIES: usize = 16;

/// `DeleteOptions.preconditions`: the object must still have this UID / resourceVersion.
#[derive(Debug, Default)]
struct Preconditions {
    uid: Option<String>,
    resource_version: Option<String>,
}

impl Preconditions {
    /// From the DeleteOptions (`null`: none).
    fn from_options(options: &Value) -> Self {
        let field =
            |name: &str| options.pointer(&format!("/preconditions/{name}")).and_then(Value::as_str).map(str::to_owned);
        Self { uid: field("uid"), resource_version: field("resourceVersion") }
    }

    fn is_empty(&self) -> bool {
        self.uid.is_none() && self.resource_version.is_none()
    }

    /// upstream `Preconditions.Check`: 409 Conflict naming what differs.
    fn check(&self, res: &Resource, name: &str, current: &Stored) -> Result<(), StatusError> {
        let conflict = |what: &str, wanted: &str, actual: &str| {
            StatusError::new(
                StatusCode::CONFLICT,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} {name:?}: Precondition failed: {what} in precondition: {wanted}, {what} in object meta: {actual}",
                    res.plural
                ),
            )
        };
        if let Some(uid) = &self.uid {
            let actual = current.object.field("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
            if uid != actual {
                return Err(conflict("UID", uid, actual));
            }
        }
        if let Some(rv) = &self.resource_version {
            let actual = current.revision.to_string();
            if *rv != actual {
                return Err(conflict("ResourceVersion", rv, &actual));
            }
        }
        Ok(())
    }
}

pub(super) async fn delete(
    t: &Target<'_>,
    name: &str,
    query: &HashMap<String, String>,
    options: &Value,
) -> Result<Response, StatusError> {
    let res = t.res;
    let attrs = Attributes {
        user: t.user,
        res,
        subresource: "",
        namespace: t.ns,
        name,
        operation: Operation::Delete,
        notes: t.notes,
        dry_run: t.write.is_dry_run(),
    };
    admission::validate(t.state, &attrs, None, None).await?;
    let requested = grace_period(query, options)?;
    let propagation = propagation(query, options)?;
    let k = key(res, t.ns, name);
    let preconditions = Preconditions::from_options(options);
    let mut attempt = 0;
    loop {
        let mut current = t.state.store.get(&k).await?;
        preconditions.check(res, name, &current)?;
        if t.write.is_dry_run() {
            return Ok(json_response(StatusCode::OK, dry_run_deletion(res, name, requested, current)?));
        }
        // Orphan and Foreground keep the object (deleting) behind a finalizer the garbage
        // collector removes once it has handled the dependents.
        if !lifecycle::being_deleted(&current.object)
            && let Some(finalizers) = gc_finalizers(&current.object, propagation, res.strategy.orphans_by_default())
        {
            let mut object = current.object.clone();
            object["metadata"]["finalizers"] = json!(finalizers);
            match t.state.store.update(&k, object, Some(current.revision)).await {
                Ok(updated) => current = updated,
                Err(StoreError::Conflict { .. }) if preconditions.is_empty() && attempt < DELETE_RETRIES => {
                    attempt += 1;
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        }
        match delete_current(t, name, &k, requested, current).await {
            // Someone else wrote in between (a node posting status, a controller): without
            // preconditions the client asked to delete whatever is there, so try again.
            Err(e) if e.reason == "Conflict" && preconditions.is_empty() && attempt < DELETE_RETRIES => attempt += 1,
            other => return other,
        }
    }
}

/// DELETE of a collection (genericregistry `Store.DeleteCollection`): the objects the
/// query's label and field selectors pick (a consistent list) are deleted one by one, each
/// exactly as its own DELETE would be — admission, the DeleteOptions' grace period,
/// preconditions and dryRun, graceful deletion, finalizers; one already gone is skipped,
/// any other failure ends the request with its error. The answer is the list as it was
/// read, as upstream's.
pub(super) async fn delete_collection(
    t: &Target<'_>,
    query: &HashMap<String, String>,
    options: &Value,
) -> Result<Response, StatusError> {
    // Checked once up front, so a bad value is a 400 before anything is deleted.
    grace_period(query, options)?;
    let selectors = super::list::list_options(t.served, query)?;
    let listed = t.state.store.list_with(t.res.plural, t.ns, &selectors, super::freshness(query)?).await?;
    for item in &listed.items {
        let Some(name) = item.field("/metadata/name").and_then(Value::as_str) else { continue };
        match delete(t, name, query, options).await {
            Ok(_) => {}
            Err(e) if e.reason == "NotFound" => {}
            Err(e) => return Err(e),
        }
    }
    Ok(super::list::list_response(t.served, super::shape::Shape::Objects, &listed.items, listed.revision, None, None))
}

/// What a DELETE of `current` would answer, nothing written and no removal scheduled: an
/// object its strategy deletes gracefully marked, one its controller finalizes (a
/// namespace) Terminating, an object with finalizers marked, anything else as it was.
fn dry_run_deletion(res: &Resource, name: &str, requested: Option<i64>, current: Stored) -> Result<Value, StatusError> {
    let mut object = current.object;
    if object.field("/metadata/deletionTimestamp").is_some() {
        if res.strategy.deleted_by_controller() {
            return Err(lifecycle::namespace_terminating_conflict(name));
        }
        return Ok(object);
    }
    let now = podpass_token::now_unix();
    if let Some(grace) = res.strategy.graceful_delete(&object, requested) {
        lifecycle::mark_deleted(&mut object, now, grace);
    } else if res.strategy.deleted_by_controller() {
        lifecycle::check_deletable_namespace(name)?;
        lifecycle::mark_terminating(&mut object, now);
    } else if !lifecycle::finalizers(&object).is_empty() {
        lifecycle::mark_deleted(&mut object, now, 0);
    }
    Ok(object)
}

/// One attempt of a DELETE on `current` (compare-and-swap on its revision).
async fn delete_current(
    t: &Target<'_>,
    name: &str,
    k: &ObjectKey,
    requested: Option<i64>,
    current: Stored,
) -> Result<Response, StatusError> {
    let (state, res) = (t.state, t.res);
    // Graceful deletion (the strategy's CheckGracefulDelete): marked and removed after its
    // grace period (or when deleted again with 0).
    if let Some(grace) = res.strategy.graceful_delete(&current.object, requested) {
        if current.object.field("/metadata/deletionTimestamp").is_some() {
            return Ok(json_response(StatusCode::OK, current.object));
        }
        let mut marked = current.object.clone();
        lifecycle::mark_deleted(&mut marked, podpass_token::now_unix(), grace);
        // Removed by its node once the containers stopped (a delete with no grace), or by
        // the pod garbage collector if the node is gone: never by the server on a timer.
        let updated = state.store.update(k, marked, Some(current.revision)).await?;
        return Ok(json_response(StatusCode::OK, updated.object));
    }
    if res.strategy.deleted_by_controller() {
        return Ok(json_response(StatusCode::OK, lifecycle::delete_namespace(state, name, current).await?));
    }
    if let Some(marked) = lifecycle::mark_if_finalized(state, k, &current).await? {
        return Ok(json_response(StatusCode::OK, marked));
    }
    let deleted = state.store.delete(k, Some(current.revision)).await?;
    t.after_write(Written::Deleted, name, &deleted, None).await?;
    if res.strategy.returns_deleted_object() {
        return Ok(json_response(StatusCode::OK, deleted.object));
    }
    Ok(json_response(StatusCode::OK, deleted_status(res, &deleted.object)))
}

/// genericregistry `finalizeDelete`'s answer for an object removed: a `Status` of Success
/// whose details name it, its group, its UID and, as upstream's comment says ("Yes we set
/// Kind field to resource"), its resource as the kind.
fn deleted_status(res: &Resource, object: &Value) -> Value {
    let mut details = serde_json::Map::new();
    details.insert("name".into(), object.field("/metadata/name").cloned().unwrap_or(Value::Null));
    if !res.group.is_empty() {
        details.insert("group".into(), json!(res.group));
    }
    details.insert("kind".into(), json!(res.plural));
    if let Some(uid) = object.field("/metadata/uid") {
        details.insert("uid".into(), uid.clone());
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn propagation_sets_the_garbage_collectors_finalizers_as_upstream() {
        let none = HashMap::new();
        let q = |k: &str, v: &str| HashMap::from([(k.to_owned(), v.to_owned())]);
        assert_eq!(propagation(&none, &json!({})).ok(), Some(None));
        assert_eq!(propagation(&q("propagationPolicy", "Orphan"), &json!({})).ok(), Some(Some(Propagation::Orphan)));
        assert_eq!(
            propagation(&none, &json!({"propagationPolicy": "Foreground"})).ok(),
            Some(Some(Propagation::Foreground))
        );
        assert_eq!(propagation(&none, &json!({"orphanDependents": true})).ok(), Some(Some(Propagation::Orphan)));
        let bad = propagation(&q("propagationPolicy", "Sideways"), &json!({})).unwrap_err();
        assert_eq!(bad.code, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(bad.message.contains(r#"propagationPolicy: Unsupported value: "Sideways""#), "{}", bad.message);
        let both = propagation(&q("orphanDependents", "true"), &json!({"propagationPolicy": "Orphan"}));
        assert!(both.is_err());

        let rs = json!({"metadata": {"finalizers": ["example.com/keep"]}});
        assert_eq!(gc_finalizers(&rs, None, false), None, "unspecified keeps what it has");
        assert_eq!(
            gc_finalizers(&rs, None, true),
            Some(vec!["example.com/keep".to_owned(), ORPHAN_FINALIZER.to_owned()]),
            "unspecified on a Job: batch/v1 orphans"
        );
        assert_eq!(gc_finalizers(&rs, Some(Propagation::Background), true), None, "said: background");
        assert_eq!(gc_finalizers(&rs, Some(Propagation::Background), false), None);
        assert_eq!(
            gc_finalizers(&rs, Some(Propagation::Orphan), false),
            Some(vec!["example.com/keep".to_owned(), ORPHAN_FINALIZER.to_owned()])
        );
        let orphaning = json!({"metadata": {"finalizers": [ORPHAN_FINALIZER]}});
        assert_eq!(
            gc_finalizers(&orphaning, Some(Propagation::Foreground), false),
            Some(vec![FOREGROUND_FINALIZER.to_owned()])
        );
        assert_eq!(gc_finalizers(&orphaning, Some(Propagation::Background), false), Some(Vec::new()));
    }
}
