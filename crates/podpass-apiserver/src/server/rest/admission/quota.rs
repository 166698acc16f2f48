//! ResourceQuota admission (upstream
//! `staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota`, counting with
//! [`podpass_api::quota`], the evaluator the controller manager's quota controller shares):
//! a create in a namespace with quotas is refused (403) when it would take any quota's
//! `used` past its `hard` (`exceeded quota: <name>, requested: …, used: …, limited: …`) or
//! names no request for a compute resource a quota tracks (`failed quota: <name>: must
//! specify requests.cpu`). Creates in one namespace are decided one at a time, each against
//! the namespace's objects as they are (not a cached `status.used`), so concurrent creates
//! never overshoot; the quota's `status` is written with each admitted create, and the
//! quota controller (`podpass controller-manager`) recomputes it for what went away.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

pub(crate) use podpass_api::quota::format_quantity;
use podpass_api::quota::{
    Usage, count_names, counted_plurals, hard_of, pod_amount, pod_in_scopes, pod_usage, pretty, scopes_of, status_of,
    tracks_pods, usage_of,
};
use serde_json::Value;

use super::{Attributes, Operation};
use crate::field::Field;
use crate::server::AppState;
use crate::server::status::StatusError;
use crate::store::{ListOptions, ObjectKey, StoreError};

/// One lock per namespace: its quota decisions and the creates they admit are serialized.
#[derive(Debug, Default)]
pub(crate) struct QuotaLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl QuotaLocks {
    async fn lock(&self, ns: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            // Bounded by the namespaces that have quotas; unused ones are dropped.
            all.retain(|_, l| Arc::strong_count(l) > 1);
            Arc::clone(all.entry(ns.to_owned()).or_default())
        };
        lock.lock_owned().await
    }
}

/// The namespace's current usage of each resource a quota with `scopes` tracks (`hard`),
/// read from the store as it is now.
async fn used(state: &AppState, ns: &str, hard: &Usage, scopes: &[String]) -> Result<Usage, StoreError> {
    let pods = if tracks_pods(hard) {
        state.store.list("pods", Some(ns), &ListOptions::default()).await?.items
    } else {
        Vec::new()
    };
    let mut counts = std::collections::HashMap::new();
    for (_, plural) in counted_plurals(hard) {
        let served =
            super::super::resources::RESOURCES.iter().any(|r| r.plural == plural && r.namespaced && r.owns_storage());
        if served && !counts.contains_key(&plural) {
            let n = state.store.list(&plural, Some(ns), &ListOptions::default()).await?.items.len();
            counts.insert(plural, n);
        }
    }
    Ok(usage_of(hard, scopes, &pods, |plural| counts.get(plural).copied()))
}

/// Writes `quota`'s status (a lost compare-and-swap is tried again on the latest quota).
async fn write_status(state: &AppState, ns: &str, name: &str, used: &Usage) -> Result<(), StoreError> {
    let key = ObjectKey::namespaced("resourcequotas", ns, name);
    for _ in 0..5 {
        let current = state.store.get(&key).await?;
        let status = status_of(&current.object, used);
        if current.object.get("status") == Some(&status) {
            return Ok(());
        }
        let mut updated = current.object.clone();
        updated["status"] = status;
        match state.store.update(&key, updated, Some(current.revision)).await {
            Err(StoreError::Conflict { .. }) => continue,
            other => return other.map(drop),
        }
    }
    Ok(())
}

/// Quota admission of a create of `object` in `attrs.namespace`.
pub(crate) async fn admit(state: &AppState, attrs: &Attributes<'_>, object: &Value) -> Result<(), StatusError> {
    let Some(ns) = attrs.namespace else { return Ok(()) };
    if attrs.operation != Operation::Create || attrs.res.plural == "resourcequotas" {
        return Ok(());
    }
    let quotas = state.store.list("resourcequotas", Some(ns), &ListOptions::default()).await?.items;
    if quotas.is_empty() {
        return Ok(());
    }
    let is_pod = attrs.res.group.is_empty() && attrs.res.plural == "pods";
    let requested: Usage =
        if is_pod { pod_usage(object) } else { count_names(attrs.res.plural).into_iter().map(|n| (n, 1000)).collect() };
    // Held until the create is stored (the request's notes keep it).
    let guard = state.quota_locks.lock(ns).await;
    let mut updates = Vec::new();
    for quota in &quotas {
        let name = quota.field("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let (hard, scopes) = (hard_of(quota), scopes_of(quota));
        if is_pod && !pod_in_scopes(object, &scopes) {
            continue;
        }
        if !is_pod && !requested.keys().any(|k| hard.contains_key(k)) {
            continue;
        }
        if is_pod {
            // checkRequest: a tracked compute resource the pod does not state.
            for key in hard.keys() {
                let (kind, resource) = match key.split_once('.') {
                    Some((k @ ("requests" | "limits"), r)) => (k, r),
                    None if matches!(key.as_str(), "cpu" | "memory") => ("requests", key.as_str()),
                    _ => continue,
                };
                if !pod_amount(object, kind, resource).1 {
                    return Err(StatusError::forbidden_raw(format!(
                        "{} {:?} is forbidden: failed quota: {name}: must specify {key}",
                        attrs.res.plural, attrs.name
                    )));
                }
            }
        }
        let current = used(state, ns, &hard, &scopes).await?;
        let mut exceeded = (Usage::new(), Usage::new(), Usage::new());
        let mut after = current.clone();
        for (k, limit) in &hard {
            let asked = requested.get(k).copied().unwrap_or(0);
            let now = current.get(k).copied().unwrap_or(0);
            after.insert(k.clone(), now + asked);
            if asked > 0 && now + asked > *limit {
                exceeded.0.insert(k.clone(), asked);
                exceeded.1.insert(k.clone(), now);
                exceeded.2.insert(k.clone(), *limit);
            }
        }
        if !exceeded.0.is_empty() {
            return Err(StatusError::forbidden_raw(format!(
                "{} {:?} is forbidden: exceeded quota: {name}, requested: {}, used: {}, limited: {}",
                attrs.res.plural,
                attrs.name,
                pretty(&exceeded.0),
                pretty(&exceeded.1),
                pretty(&exceeded.2)
            )));
        }
        updates.push((name, after));
    }
    // The reservation: status.used with this create in (the controller corrects it if the
    // create then fails).
    if !attrs.dry_run {
        for (name, after) in updates {
            if let Err(e) = write_status(state, ns, &name, &after).await {
                tracing::warn!(namespace = ns, quota = %name, error = %e, "writing a quota's usage failed");
            }
        }
    }
    attrs.notes.hold(guard);
    Ok(())
}

/// Mutating quota admission: a new quota's status, its hard limits and what the namespace
/// uses now (so `kubectl describe quota` is right from the start).
pub(crate) async fn mutate(state: &AppState, attrs: &Attributes<'_>, object: &mut Value) -> Result<(), StatusError> {
    if attrs.operation == Operation::Create && attrs.res.group.is_empty() && attrs.res.plural == "resourcequotas" {
        initial_status(state, attrs.namespace.unwrap_or_default(), object).await?;
    }
    Ok(())
}

async fn initial_status(state: &AppState, ns: &str, object: &mut Value) -> Result<(), StatusError> {
    let used = used(state, ns, &hard_of(object), &scopes_of(object)).await?;
    object["status"] = status_of(object, &used);
    Ok(())
}
