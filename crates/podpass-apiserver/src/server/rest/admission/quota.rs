//! ResourceQuota admission and the quota controller (upstream:
//! `staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota` and
//! `pkg/controller/resourcequota`, with the pod evaluator of `pkg/quota/v1/evaluator/core`):
//! a create in a namespace with quotas is refused (403) when it would take any quota's
//! `used` past its `hard` (`exceeded quota: <name>, requested: …, used: …, limited: …`) or
//! names no request for a compute resource a quota tracks (`failed quota: <name>: must
//! specify requests.cpu`). Creates in one namespace are decided one at a time, each against
//! the namespace's objects as they are (not a cached `status.used`), so concurrent creates
//! never overshoot; the quota's `status` is written with each admitted create and
//! recomputed by the controller (every [`RESYNC`]) for what went away.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};

use super::{Attributes, Operation};
use crate::field::Field;
use crate::server::AppState;
use crate::server::status::StatusError;
use crate::store::{ListOptions, ObjectKey, StoreError};

/// How often the controller recomputes every quota's `status.used`.
pub(crate) const RESYNC: Duration = Duration::from_secs(5);

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

/// Usage in milli-units by resource name.
type Usage = BTreeMap<String, i128>;

fn milli(q: Option<&Value>) -> Option<i128> {
    q.and_then(Value::as_str).and_then(|s| podpass_api::quantity::parse_milli(s).ok())
}

/// `PodRequests`/`PodLimits` of one kind (`requests` or `limits`) and resource: the sum over
/// containers, at least the largest init container's; a missing request is the limit
/// (API defaulting). `None` for a container naming neither.
fn pod_amount(pod: &Value, kind: &str, resource: &str) -> (i128, bool) {
    let amount = |c: &Value| -> Option<i128> {
        milli(c.pointer(&format!("/resources/{kind}/{resource}"))).or_else(|| {
            (kind == "requests").then(|| milli(c.pointer(&format!("/resources/limits/{resource}")))).flatten()
        })
    };
    let list =
        |name: &str| pod.pointer(&format!("/spec/{name}")).and_then(Value::as_array).cloned().unwrap_or_default();
    let (containers, inits) = (list("containers"), list("initContainers"));
    let all_set = containers.iter().chain(inits.iter()).all(|c| amount(c).is_some());
    let sum: i128 = containers.iter().filter_map(amount).sum();
    let init_max = inits.iter().filter_map(amount).max().unwrap_or(0);
    (sum.max(init_max), all_set)
}

/// Whether a pod still counts against quota (not finished).
fn pod_counts(pod: &Value) -> bool {
    !matches!(pod.field("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"))
}

fn best_effort(pod: &Value) -> bool {
    let list =
        |name: &str| pod.pointer(&format!("/spec/{name}")).and_then(Value::as_array).cloned().unwrap_or_default();
    list("containers").iter().chain(list("initContainers").iter()).all(|c| {
        let empty =
            |k: &str| c.pointer(&format!("/resources/{k}")).and_then(Value::as_object).is_none_or(|m| m.is_empty());
        empty("requests") && empty("limits")
    })
}

/// Whether a pod is in all of `scopes` (upstream's scope matchers).
fn pod_in_scopes(pod: &Value, scopes: &[String]) -> bool {
    let terminating = pod.field("/spec/activeDeadlineSeconds").is_some_and(|v| !v.is_null());
    scopes.iter().all(|s| match s.as_str() {
        "Terminating" => terminating,
        "NotTerminating" => !terminating,
        "BestEffort" => best_effort(pod),
        "NotBestEffort" => !best_effort(pod),
        _ => true,
    })
}

/// What a pod uses (the pod evaluator's usage): `pods`, `count/pods`, and requests and
/// limits of cpu and memory (`cpu` and `memory` are their requests).
fn pod_usage(pod: &Value) -> Usage {
    let mut usage = Usage::new();
    usage.insert("pods".into(), 1000);
    usage.insert("count/pods".into(), 1000);
    for resource in ["cpu", "memory", "ephemeral-storage"] {
        let (requests, _) = pod_amount(pod, "requests", resource);
        let (limits, _) = pod_amount(pod, "limits", resource);
        usage.insert(format!("requests.{resource}"), requests);
        usage.insert(resource.to_owned(), requests);
        usage.insert(format!("limits.{resource}"), limits);
    }
    usage
}

/// The object counts a quota may name for `plural` (`count/<plural>`, and the legacy
/// name for the kinds that had one).
fn count_names(plural: &str) -> Vec<String> {
    let mut names = vec![format!("count/{plural}")];
    if matches!(plural, "secrets" | "configmaps" | "services" | "persistentvolumeclaims" | "replicationcontrollers") {
        names.push(plural.to_owned());
    }
    names
}

/// A quantity as upstream prints one it computed: cores (or milli-cores), bytes in binary
/// units where exact.
pub(crate) fn format_quantity(resource: &str, milli: i128) -> String {
    let memory_like = resource.contains("memory") || resource.contains("storage");
    if milli % 1000 != 0 {
        return format!("{milli}m");
    }
    let units = milli / 1000;
    if memory_like && units != 0 {
        for (suffix, size) in [("Ti", 1_i128 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
            if units % size == 0 {
                return format!("{}{suffix}", units / size);
            }
        }
    }
    units.to_string()
}

fn pretty(usage: &Usage) -> String {
    usage.iter().map(|(k, v)| format!("{k}={}", format_quantity(k, *v))).collect::<Vec<_>>().join(",")
}

/// The namespace's current usage of each resource a quota with `scopes` tracks (`hard`).
async fn used(state: &AppState, ns: &str, hard: &Usage, scopes: &[String]) -> Result<Usage, StoreError> {
    let mut used: Usage = hard.keys().map(|k| (k.clone(), 0)).collect();
    let tracks_pods = hard.keys().any(|k| {
        k == "pods"
            || k == "count/pods"
            || k.starts_with("requests.")
            || k.starts_with("limits.")
            || k == "cpu"
            || k == "memory"
    });
    if tracks_pods {
        for pod in state.store.list("pods", Some(ns), &ListOptions::default()).await?.items {
            if !pod_counts(&pod) || !pod_in_scopes(&pod, scopes) {
                continue;
            }
            for (k, v) in pod_usage(&pod) {
                if let Some(total) = used.get_mut(&k) {
                    *total += v;
                }
            }
        }
    }
    let served = |plural: &str| {
        super::super::resources::RESOURCES.iter().any(|r| r.plural == plural && r.namespaced && r.owns_storage())
    };
    for name in hard.keys() {
        let plural = name.strip_prefix("count/").unwrap_or(name);
        if plural == "pods" || !(name.starts_with("count/") || count_names(plural).contains(name)) || !served(plural) {
            continue;
        }
        let n = state.store.list(plural, Some(ns), &ListOptions::default()).await?.items.len();
        used.insert(name.clone(), i128::try_from(n).unwrap_or(i128::MAX) * 1000);
    }
    Ok(used)
}

fn hard_of(quota: &Value) -> Usage {
    quota
        .field("/spec/hard")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), milli(Some(v))?)))
        .collect()
}

fn scopes_of(quota: &Value) -> Vec<String> {
    quota
        .field("/spec/scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

fn status_of(quota: &Value, used: &Usage) -> Value {
    let hard = quota.field("/spec/hard").cloned().unwrap_or_else(|| json!({}));
    let used: serde_json::Map<String, Value> =
        used.iter().map(|(k, v)| (k.clone(), json!(format_quantity(k, *v)))).collect();
    json!({"hard": hard, "used": used})
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

/// The quota controller: recomputes every quota's `status.used` every [`RESYNC`].
pub(crate) async fn run(state: Arc<AppState>) {
    loop {
        tokio::time::sleep(RESYNC).await;
        let quotas = match state.store.list("resourcequotas", None, &ListOptions::default()).await {
            Ok(list) => list.items,
            Err(e) => {
                tracing::warn!(error = %e, "listing resource quotas failed");
                continue;
            }
        };
        for quota in quotas {
            let (Some(ns), Some(name)) = (
                quota.field("/metadata/namespace").and_then(Value::as_str),
                quota.field("/metadata/name").and_then(Value::as_str),
            ) else {
                continue;
            };
            // Under the namespace's lock: never between an admission and its create.
            let _guard = state.quota_locks.lock(ns).await;
            let result = match used(&state, ns, &hard_of(&quota), &scopes_of(&quota)).await {
                Ok(used) => write_status(&state, ns, name, &used).await,
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                tracing::debug!(namespace = ns, quota = name, error = %e, "recomputing a quota failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_usage_is_upstreams_pod_evaluator() {
        let pod = json!({"spec": {
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}},
                {"name": "b", "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}}]}});
        let u = pod_usage(&pod);
        // cpu: max(0.25 + 0.5 (b's request is its limit), 2 (init)) = 2
        assert_eq!(u["requests.cpu"], 2000);
        assert_eq!(u["requests.memory"], (128 << 20) * 1000);
        assert_eq!(u["limits.memory"], (192 << 20) * 1000);
        assert_eq!(u["pods"], 1000);
        assert!(!pod_amount(&pod, "limits", "cpu").1, "container a states no cpu limit");
        assert!(!best_effort(&pod));
        assert!(best_effort(&json!({"spec": {"containers": [{"name": "c"}]}})));
        assert_eq!(format_quantity("requests.memory", (128 << 20) * 1000), "128Mi");
        assert_eq!(format_quantity("requests.cpu", 2500), "2500m");
        assert_eq!(format_quantity("pods", 2000), "2");
    }
}
