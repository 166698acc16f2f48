//! DELETE as kube-apiserver: `DeleteOptions.preconditions` (UID, resourceVersion) answered
//! 409 when they do not hold; without them a lost compare-and-swap (someone else wrote in
//! between) is retried on the latest object, never answered 409; graceful deletion of pods
//! bound to a node (marked, then removed after the grace period — also retried, so a pod
//! never stays Terminating); finalizers and namespaces through `lifecycle`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::dry_run::Write;
use super::resources::Resource;
use super::{after_rbac_write, json_response, key, lifecycle};
use crate::field::Field;
use crate::server::AppState;
use crate::server::status::StatusError;
use crate::store::{ListOptions, ObjectKey, StoreError};

/// Default pod termination grace (upstream `terminationGracePeriodSeconds` default).
const DEFAULT_GRACE_SECONDS: i64 = 30;

/// Longest grace period honoured: a century. Larger values (up to `i64::MAX` from a client)
/// would overflow the deletion timestamp.
const MAX_GRACE_SECONDS: i64 = 100 * 365 * 24 * 3600;

/// `gracePeriodSeconds` from the query or the DeleteOptions body; a value that is not an
/// integer is a 400 naming it.
fn grace_period(query: &HashMap<String, String>, body: &[u8]) -> Result<Option<i64>, StatusError> {
    if let Some(g) = query.get("gracePeriodSeconds") {
        return g.parse().map(Some).map_err(|_| {
            StatusError::bad_request(format!("gracePeriodSeconds: Invalid value: {g:?}: must be an integer"))
        });
    }
    Ok(serde_json::from_slice::<Value>(body).ok().and_then(|b| b.get("gracePeriodSeconds").and_then(Value::as_i64)))
}

/// The grace a pod gets: a negative request is 1 s (pod strategy `CheckGracefulDelete`),
/// and no grace exceeds [`MAX_GRACE_SECONDS`].
fn bounded_grace(grace: i64) -> i64 {
    if grace < 0 { 1 } else { grace.min(MAX_GRACE_SECONDS) }
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
    /// From the DeleteOptions body (JSON); an absent or non-JSON body has none.
    fn from_body(body: &[u8]) -> Self {
        let options = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
        let field =
            |name: &str| options.pointer(&format!("/preconditions/{name}")).and_then(Value::as_str).map(str::to_owned);
        Self { uid: field("uid"), resource_version: field("resourceVersion") }
    }

    fn is_empty(&self) -> bool {
        self.uid.is_none() && self.resource_version.is_none()
    }

    /// upstream `Preconditions.Check`: 409 Conflict naming what differs.
    fn check(&self, res: &Resource, name: &str, current: &crate::store::Stored) -> Result<(), StatusError> {
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
    state: &Arc<AppState>,
    res: &Resource,
    ns: Option<&str>,
    name: &str,
    query: &HashMap<String, String>,
    body: &[u8],
    write: Write,
) -> Result<Response, StatusError> {
    let k = key(res, ns, name);
    let preconditions = Preconditions::from_body(body);
    let mut attempt = 0;
    loop {
        let current = state.store.get(&k).await?;
        preconditions.check(res, name, &current)?;
        if write.is_dry_run() {
            return Ok(json_response(StatusCode::OK, dry_run_deletion(res, name, query, body, current)?));
        }
        match delete_current(state, res, name, &k, query, body, current).await {
            // Someone else wrote in between (a node posting status, a controller): without
            // preconditions the client asked to delete whatever is there, so try again.
            Err(e) if e.reason == "Conflict" && preconditions.is_empty() && attempt < DELETE_RETRIES => attempt += 1,
            other => return other,
        }
    }
}

/// What a DELETE of `current` would answer, nothing written and no removal scheduled: a
/// scheduled pod marked for graceful deletion, a namespace Terminating, an object with
/// finalizers marked, anything else as it was.
fn dry_run_deletion(
    res: &Resource,
    name: &str,
    query: &HashMap<String, String>,
    body: &[u8],
    current: crate::store::Stored,
) -> Result<Value, StatusError> {
    let mut object = current.object;
    if object.field("/metadata/deletionTimestamp").is_some() {
        if res.plural == "namespaces" {
            return Err(lifecycle::namespace_terminating_conflict(name));
        }
        return Ok(object);
    }
    let now = podpass_token::now_unix();
    if let Some(grace) = graceful_pod_deletion(res, &object, query, body)? {
        lifecycle::mark_deleted(&mut object, now, grace);
    } else if res.plural == "namespaces" {
        lifecycle::check_deletable_namespace(name)?;
        lifecycle::mark_terminating(&mut object, now);
    } else if !lifecycle::finalizers(&object).is_empty() {
        lifecycle::mark_deleted(&mut object, now, 0);
    }
    Ok(object)
}

/// The grace a DELETE gives a pod bound to a node (marked, removed after it); `None` for
/// anything deleted at once (an unscheduled pod, a zero grace, another kind).
fn graceful_pod_deletion(
    res: &Resource,
    pod: &Value,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Option<i64>, StatusError> {
    if res.plural != "pods" {
        return Ok(None);
    }
    let scheduled = pod.field("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
    let grace = bounded_grace(
        grace_period(query, body)?
            .or_else(|| pod.field("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64))
            .unwrap_or(DEFAULT_GRACE_SECONDS),
    );
    Ok((scheduled && grace > 0).then_some(grace))
}

/// One attempt of a DELETE on `current` (compare-and-swap on its revision).
async fn delete_current(
    state: &Arc<AppState>,
    res: &Resource,
    name: &str,
    k: &ObjectKey,
    query: &HashMap<String, String>,
    body: &[u8],
    current: crate::store::Stored,
) -> Result<Response, StatusError> {
    // Graceful deletion: a pod bound to a node is marked and removed after its grace
    // period (or when deleted again with 0); an unscheduled pod goes at once.
    if let Some(grace) = graceful_pod_deletion(res, &current.object, query, body)? {
        if current.object.field("/metadata/deletionTimestamp").is_some() {
            return Ok(json_response(StatusCode::OK, current.object));
        }
        let mut marked = current.object.clone();
        lifecycle::mark_deleted(&mut marked, podpass_token::now_unix(), grace);
        let updated = state.store.update(k, marked, Some(current.revision)).await?;
        schedule_removal(Arc::clone(state), k.clone(), updated.object.field("/metadata/uid").cloned(), grace);
        return Ok(json_response(StatusCode::OK, updated.object));
    }
    if res.plural == "namespaces" {
        return Ok(json_response(StatusCode::OK, lifecycle::delete_namespace(state, name, current).await?));
    }
    if let Some(marked) = lifecycle::mark_if_finalized(state, k, &current).await? {
        return Ok(json_response(StatusCode::OK, marked));
    }
    let deleted = state.store.delete(k, Some(current.revision)).await?;
    after_rbac_write(state, res, deleted.revision).await?;
    Ok(json_response(StatusCode::OK, deleted.object))
}

/// Removes a gracefully deleted pod once its grace period is over, unless it was
/// replaced (another uid) in between.
pub(crate) fn schedule_removal(state: Arc<AppState>, key: ObjectKey, uid: Option<Value>, grace: i64) {
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_secs(u64::try_from(grace).unwrap_or(0))).await;
        // A lost compare-and-swap (the node posting the pod's status meanwhile) is retried
        // on the latest pod: a pod must not stay Terminating until the next restart.
        for attempt in 0..=DELETE_RETRIES {
            let Ok(current) = state.store.get(&key).await else { return };
            if current.object.field("/metadata/uid") != uid.as_ref() {
                return;
            }
            let result = if lifecycle::finalizers(&current.object).is_empty() {
                state.store.delete(&key, Some(current.revision)).await.map(drop)
            } else {
                // Grace is over; the pod goes when its last finalizer is removed.
                let mut done = current.object.clone();
                done["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                state.store.update(&key, done, Some(current.revision)).await.map(drop)
            };
            match result {
                Err(StoreError::Conflict { .. }) if attempt < DELETE_RETRIES => {}
                Err(e) => {
                    tracing::warn!(pod = ?key, error = %e, "removing a gracefully deleted pod failed");
                    return;
                }
                Ok(()) => return,
            }
        }
    });
}

/// At start-up: pods whose deletion was pending when the server stopped are removed when
/// their deletion time comes.
pub(crate) async fn resume_pending_deletions(state: &Arc<AppState>) -> Result<(), StoreError> {
    let now = podpass_token::now_unix();
    for pod in state.store.list("pods", None, &ListOptions::default()).await?.items {
        let Some(at) =
            pod.field("/metadata/deletionTimestamp").and_then(Value::as_str).and_then(crate::time::parse_rfc3339)
        else {
            continue;
        };
        let (Some(ns), Some(name)) = (
            pod.field("/metadata/namespace").and_then(Value::as_str),
            pod.field("/metadata/name").and_then(Value::as_str),
        ) else {
            continue;
        };
        schedule_removal(
            Arc::clone(state),
            ObjectKey::namespaced("pods", ns, name),
            pod.field("/metadata/uid").cloned(),
            (at - now).max(0),
        );
    }
    Ok(())
}
