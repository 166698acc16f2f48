//! The quota evaluator (upstream `pkg/quota/v1/evaluator/core` and the resource quota
//! controller's usage): what a pod or an object uses of a ResourceQuota's `hard`
//! resources, pure over the objects' JSON, so the API server's ResourceQuota admission and
//! the controller manager's quota controller count the same way.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// Usage in milli-units by resource name.
pub type Usage = BTreeMap<String, i128>;

/// A quantity in milli-units (`None`: absent or not a quantity).
pub fn milli(q: Option<&Value>) -> Option<i128> {
    q.and_then(Value::as_str).and_then(|s| crate::quantity::parse_milli(s).ok())
}

/// `PodRequests`/`PodLimits` of one kind (`requests` or `limits`) and resource: the sum over
/// containers, at least the largest init container's; a missing request is the limit
/// (API defaulting). `None` for a container naming neither.
pub fn pod_amount(pod: &Value, kind: &str, resource: &str) -> (i128, bool) {
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
pub fn pod_counts(pod: &Value) -> bool {
    !matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"))
}

/// Whether a pod is BestEffort: no container states requests or limits.
pub fn best_effort(pod: &Value) -> bool {
    let list =
        |name: &str| pod.pointer(&format!("/spec/{name}")).and_then(Value::as_array).cloned().unwrap_or_default();
    list("containers").iter().chain(list("initContainers").iter()).all(|c| {
        let empty =
            |k: &str| c.pointer(&format!("/resources/{k}")).and_then(Value::as_object).is_none_or(|m| m.is_empty());
        empty("requests") && empty("limits")
    })
}

/// Whether a pod is in all of `scopes` (upstream's scope matchers).
pub fn pod_in_scopes(pod: &Value, scopes: &[String]) -> bool {
    let terminating = pod.pointer("/spec/activeDeadlineSeconds").is_some_and(|v| !v.is_null());
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
pub fn pod_usage(pod: &Value) -> Usage {
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
pub fn count_names(plural: &str) -> Vec<String> {
    let mut names = vec![format!("count/{plural}")];
    if matches!(plural, "secrets" | "configmaps" | "services" | "persistentvolumeclaims" | "replicationcontrollers") {
        names.push(plural.to_owned());
    }
    names
}

/// A quantity as upstream prints one it computed: cores (or milli-cores), bytes in binary
/// units where exact.
pub fn format_quantity(resource: &str, milli: i128) -> String {
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

/// `name=quantity` pairs as upstream's quota errors print them.
pub fn pretty(usage: &Usage) -> String {
    usage.iter().map(|(k, v)| format!("{k}={}", format_quantity(k, *v))).collect::<Vec<_>>().join(",")
}

/// A quota's `spec.hard`.
pub fn hard_of(quota: &Value) -> Usage {
    quota
        .pointer("/spec/hard")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), milli(Some(v))?)))
        .collect()
}

/// A quota's `spec.scopes`.
pub fn scopes_of(quota: &Value) -> Vec<String> {
    quota
        .pointer("/spec/scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// The `status` of a quota that uses `used`: its hard limits and the usage.
pub fn status_of(quota: &Value, used: &Usage) -> Value {
    let hard = quota.pointer("/spec/hard").cloned().unwrap_or_else(|| json!({}));
    let used: serde_json::Map<String, Value> =
        used.iter().map(|(k, v)| (k.clone(), json!(format_quantity(k, *v)))).collect();
    json!({"hard": hard, "used": used})
}

/// Whether a quota with `hard` counts pods' usage (any pod or compute resource).
pub fn tracks_pods(hard: &Usage) -> bool {
    hard.keys().any(|k| {
        k == "pods"
            || k == "count/pods"
            || k.starts_with("requests.")
            || k.starts_with("limits.")
            || k == "cpu"
            || k == "memory"
    })
}

/// The object counts `hard` names beside pods: each name and the plural it counts
/// (`count/secrets` and the legacy `secrets` both count `secrets`; a `count/<resource>.<group>`
/// keeps its group).
pub fn counted_plurals(hard: &Usage) -> Vec<(String, String)> {
    hard.keys()
        .filter_map(|name| {
            let plural = name.strip_prefix("count/").unwrap_or(name);
            let counted = name.starts_with("count/") || count_names(plural).contains(name);
            (plural != "pods" && counted).then(|| (name.clone(), plural.to_owned()))
        })
        .collect()
}

/// A namespace's usage of what `hard` tracks for a quota with `scopes`: `pods` are the
/// namespace's pods, `count(plural)` the number of its objects of a counted resource
/// (`None`: not served, left at zero).
pub fn usage_of<'a>(
    hard: &Usage,
    scopes: &[String],
    pods: impl IntoIterator<Item = &'a Value>,
    mut count: impl FnMut(&str) -> Option<usize>,
) -> Usage {
    let mut used: Usage = hard.keys().map(|k| (k.clone(), 0)).collect();
    if tracks_pods(hard) {
        for pod in pods {
            if !pod_counts(pod) || !pod_in_scopes(pod, scopes) {
                continue;
            }
            for (k, v) in pod_usage(pod) {
                if let Some(total) = used.get_mut(&k) {
                    *total += v;
                }
            }
        }
    }
    for (name, plural) in counted_plurals(hard) {
        if let Some(n) = count(&plural) {
            used.insert(name, i128::try_from(n).unwrap_or(i128::MAX) * 1000);
        }
    }
    used
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

    #[test]
    fn usage_counts_live_pods_in_scope_and_the_objects_named() {
        let hard: Usage = [("pods", 10_000), ("count/secrets", 5000), ("configmaps", 5000), ("requests.cpu", 4000)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let running = json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}});
        let done = json!({"spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Succeeded"}});
        let used = usage_of(&hard, &[], [&running, &done], |plural| match plural {
            "secrets" => Some(3),
            "configmaps" => Some(1),
            _ => None,
        });
        assert_eq!(used["pods"], 1000, "a finished pod no longer counts");
        assert_eq!(used["requests.cpu"], 1000);
        assert_eq!(used["count/secrets"], 3000);
        assert_eq!(used["configmaps"], 1000, "the legacy name counts the same objects");
        let terminating = usage_of(&hard, &["Terminating".to_owned()], [&running], |_| None);
        assert_eq!(terminating["pods"], 0, "out of the quota's scope");
    }
}
