//! ClusterRole aggregation (`pkg/controller/clusterroleaggregation`): a ClusterRole with
//! an `aggregationRule` gets, as its `rules`, every rule of the other ClusterRoles its
//! `clusterRoleSelectors` match (roles in name order, each rule once). Pure over the roles'
//! JSON: the controller manager's aggregation controller applies it, the API server's RBAC
//! validation checks the selectors with it.

use serde_json::Value;

/// Whether `labels` satisfy one `metav1.LabelSelector` (matchLabels and matchExpressions,
/// ANDed). `None` for a selector upstream would refuse to convert (such a selector
/// selects nothing here, as the controller's conversion error syncs nothing).
pub fn selector_matches(selector: &Value, labels: &serde_json::Map<String, Value>) -> Option<bool> {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let mut ok = true;
    if let Some(m) = selector.get("matchLabels") {
        for (k, v) in m.as_object()? {
            ok &= label(k) == Some(v.as_str()?);
        }
    }
    if let Some(exprs) = selector.get("matchExpressions") {
        for e in exprs.as_array()? {
            let key = e.get("key")?.as_str()?;
            let values: Vec<&str> = match e.get("values") {
                None | Some(Value::Null) => Vec::new(),
                Some(v) => v.as_array()?.iter().map(Value::as_str).collect::<Option<_>>()?,
            };
            let matched = match e.get("operator")?.as_str()? {
                "In" if !values.is_empty() => label(key).is_some_and(|l| values.contains(&l)),
                "NotIn" if !values.is_empty() => label(key).is_none_or(|l| !values.contains(&l)),
                "Exists" if values.is_empty() => label(key).is_some(),
                "DoesNotExist" if values.is_empty() => label(key).is_none(),
                _ => return None,
            };
            ok &= matched;
        }
    }
    Some(ok)
}

/// The rules `role` aggregates from `roles` (all ClusterRoles, in name order).
pub fn aggregated_rules(role: &Value, roles: &[Value]) -> Option<Vec<Value>> {
    let selectors = role.get("aggregationRule")?.get("clusterRoleSelectors")?.as_array()?;
    let own_name = role.pointer("/metadata/name");
    let empty = serde_json::Map::new();
    let mut rules: Vec<Value> = Vec::new();
    for selector in selectors {
        for other in roles {
            if other.pointer("/metadata/name") == own_name {
                continue;
            }
            let labels = other.pointer("/metadata/labels").and_then(Value::as_object).unwrap_or(&empty);
            if selector_matches(selector, labels) != Some(true) {
                continue;
            }
            for rule in other.get("rules").and_then(Value::as_array).into_iter().flatten() {
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
        }
    }
    Some(rules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn selectors_as_metav1() {
        let l = labels(json!({"agg": "true", "tier": "a"}));
        assert_eq!(selector_matches(&json!({"matchLabels": {"agg": "true"}}), &l), Some(true));
        assert_eq!(selector_matches(&json!({"matchLabels": {"agg": "false"}}), &l), Some(false));
        let expr =
            |op: &str, values: Value| json!({"matchExpressions": [{"key": "tier", "operator": op, "values": values}]});
        assert_eq!(selector_matches(&expr("In", json!(["a", "b"])), &l), Some(true));
        assert_eq!(selector_matches(&expr("NotIn", json!(["a"])), &l), Some(false));
        assert_eq!(selector_matches(&expr("Exists", json!(null)), &l), Some(true));
        assert_eq!(selector_matches(&expr("DoesNotExist", json!([])), &l), Some(false));
        // upstream refuses these selectors
        assert_eq!(selector_matches(&expr("In", json!([])), &l), None);
        assert_eq!(selector_matches(&expr("Exists", json!(["a"])), &l), None);
        assert_eq!(selector_matches(&expr("Gt", json!(["1"])), &l), None);
        // an empty selector selects everything
        assert_eq!(selector_matches(&json!({}), &l), Some(true));
    }

    #[test]
    fn rules_gathered_in_name_order_once_without_self() {
        let r = |name: &str, agg: bool, rules: Value| json!({"metadata": {"name": name, "labels": {"agg": agg.to_string()}}, "rules": rules});
        let get = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]});
        let list = json!({"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]});
        let mut parent = r("parent", true, json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]));
        parent["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {"agg": "true"}}]});
        let roles = vec![
            r("a", true, json!([get.clone()])),
            r("b", true, json!([get.clone(), list.clone()])),
            r("c", false, json!([{"verbs": ["delete"], "apiGroups": [""], "resources": ["pods"]}])),
            parent.clone(),
        ];
        // its own rules are replaced, not kept
        assert_eq!(aggregated_rules(&parent, &roles), Some(vec![get, list]));
        assert_eq!(aggregated_rules(&roles[0], &roles), None);
    }
}
