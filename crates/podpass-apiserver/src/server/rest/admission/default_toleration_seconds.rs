//! DefaultTolerationSeconds admission (upstream: `plugin/pkg/admission/
//! defaulttolerationseconds`): on a pod create or update (not its subresources), a pod that
//! does not already tolerate `node.kubernetes.io/not-ready:NoExecute` — or
//! `node.kubernetes.io/unreachable:NoExecute` — gets a toleration of it for 300 s. A
//! toleration with an empty key or an empty effect counts as tolerating it, as upstream.

use serde_json::{Value, json};

/// The not-ready taint.
const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The unreachable taint.
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// `--default-not-ready-toleration-seconds` and `--default-unreachable-toleration-seconds`.
const DEFAULT_SECONDS: i64 = 300;

/// Whether `toleration` covers `key` with effect NoExecute (upstream's test: key equal or
/// empty, effect NoExecute or empty).
fn tolerates(toleration: &Value, key: &str) -> bool {
    let field = |f: &str| toleration.get(f).and_then(Value::as_str).unwrap_or_default();
    (field("key") == key || field("key").is_empty()) && matches!(field("effect"), "NoExecute" | "")
}

/// Adds the missing default tolerations to a pod (not-ready first, then unreachable).
pub(crate) fn admit_pod(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let existing = spec.get("tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    let missing: Vec<&str> =
        [NOT_READY, UNREACHABLE].into_iter().filter(|key| !existing.iter().any(|t| tolerates(t, key))).collect();
    if missing.is_empty() {
        return;
    }
    let mut tolerations = existing;
    for key in missing {
        tolerations.push(json!({
            "key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": DEFAULT_SECONDS,
        }));
    }
    spec.insert("tolerations".into(), Value::Array(tolerations));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tolerations_after(tolerations: Value) -> Value {
        let mut pod = json!({"spec": {"containers": [], "tolerations": tolerations}});
        admit_pod(&mut pod);
        pod["spec"]["tolerations"].clone()
    }

    #[test]
    fn both_are_added_to_a_pod_without_them_in_upstreams_order() {
        let mut pod = json!({"spec": {"containers": []}});
        admit_pod(&mut pod);
        assert_eq!(
            pod["spec"]["tolerations"],
            json!([
                {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ])
        );
    }

    #[test]
    fn a_pod_tolerating_one_gets_only_the_other_and_its_own_is_untouched() {
        let own = json!({"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5});
        let after = tolerations_after(json!([own]));
        assert_eq!(after.as_array().map(Vec::len), Some(2), "{after}");
        assert_eq!(after[0], own);
        assert_eq!(after[1]["key"], UNREACHABLE);
    }

    #[test]
    fn empty_key_or_effect_tolerates_and_other_effects_do_not() {
        let everything = json!([{"operator": "Exists"}]);
        assert_eq!(tolerations_after(everything.clone()), everything, "empty key and effect: all tolerated");
        let any_effect = json!([{"key": NOT_READY, "operator": "Exists"}, {"key": UNREACHABLE, "operator": "Exists"}]);
        assert_eq!(tolerations_after(any_effect.clone()), any_effect);
        let no_schedule = tolerations_after(json!([{"key": NOT_READY, "operator": "Exists", "effect": "NoSchedule"}]));
        assert_eq!(no_schedule.as_array().map(Vec::len), Some(3), "NoSchedule does not cover NoExecute: {no_schedule}");
    }

    #[test]
    fn a_second_pass_changes_nothing() {
        let mut pod = json!({"spec": {"containers": []}});
        admit_pod(&mut pod);
        let once = pod.clone();
        admit_pod(&mut pod);
        assert_eq!(pod, once);
    }
}
