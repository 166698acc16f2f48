//! A pod's required node placement as core/v1 decides it (`nodeSelector` and
//! `requiredDuringSchedulingIgnoredDuringExecution`, `NodeSelectorTerm` matching in
//! `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`), over the JSON of a pod and a
//! node: shared by the scheduler's NodeAffinity filter and the DaemonSet controller's
//! `NodeShouldRunDaemonPod`, which must agree on which nodes a pod may land on.

use serde_json::Value;

use crate::field::Field;

fn text<'a>(object: &'a Value, path: &str) -> &'a str {
    object.field(path).and_then(Value::as_str).unwrap_or_default()
}

/// One `NodeSelectorRequirement` against the node's label (or its name, for matchFields).
fn requirement_matches(requirement: &Value, actual: Option<&str>) -> bool {
    let values: Vec<&str> = requirement
        .field("/values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let number = |s: &str| s.parse::<i64>().ok();
    match (text(requirement, "/operator"), actual) {
        ("In", Some(v)) => values.contains(&v),
        ("In", None) => false,
        ("NotIn", Some(v)) => !values.contains(&v),
        ("NotIn", None) | ("Exists", Some(_)) | ("DoesNotExist", None) => true,
        ("Exists", None) | ("DoesNotExist", Some(_)) => false,
        ("Gt", Some(v)) => matches!((number(v), values.first().and_then(|w| number(w))), (Some(a), Some(b)) if a > b),
        ("Lt", Some(v)) => matches!((number(v), values.first().and_then(|w| number(w))), (Some(a), Some(b)) if a < b),
        _ => false,
    }
}

/// `NodeSelectorTerm`: every expression and field requirement holds (an empty term
/// matches nothing, as upstream). The only field a term may name is `metadata.name`.
pub fn term_matches(term: &Value, node: &Value) -> bool {
    let expressions = term.field("/matchExpressions").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    let fields = term.field("/matchFields").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let labels = node.field("/metadata/labels");
    expressions
        .iter()
        .all(|r| requirement_matches(r, labels.and_then(|l| l.get(text(r, "/key"))).and_then(Value::as_str)))
        && fields.iter().all(|r| {
            let actual = (text(r, "/key") == "metadata.name").then(|| text(node, "/metadata/name"));
            requirement_matches(r, actual)
        })
}

/// `GetRequiredNodeAffinity(pod).Match(node)`: the pod's `nodeSelector` (every pair) and
/// its required node affinity's terms (any one), given the pod's `spec`.
pub fn required_matches(spec: &Value, node: &Value) -> bool {
    let labels = node.field("/metadata/labels");
    let selector = spec.field("/nodeSelector").and_then(Value::as_object);
    let selected = selector.into_iter().flatten().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
    let terms = spec
        .field("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array);
    selected && terms.is_none_or(|terms| terms.iter().any(|t| term_matches(t, node)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_and_terms_match_as_upstream() {
        let n = json!({"metadata": {"name": "n1", "labels": {"disk": "ssd", "zone": "3"}}});
        let selected = |spec: Value| required_matches(&spec, &n);
        assert!(selected(json!({})), "nothing asked: every node");
        assert!(selected(json!({"nodeSelector": {"disk": "ssd"}})));
        assert!(!selected(json!({"nodeSelector": {"disk": "hdd"}})));
        let affinity = |terms: Value| json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}});
        assert!(selected(affinity(
            json!([{"matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["2"]}]}])
        )));
        assert!(!selected(affinity(
            json!([{"matchExpressions": [{"key": "zone", "operator": "Lt", "values": ["2"]}]}])
        )));
        assert!(selected(affinity(json!([
            {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
        ]))));
        assert!(!selected(affinity(
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}])
        )));
        assert!(
            !selected(affinity(json!([{"matchFields": [{"key": "spec.podCIDR", "operator": "Exists"}]}]))),
            "no other field"
        );
        assert!(!selected(affinity(
            json!([{"matchExpressions": [{"key": "disk", "operator": "NotIn", "values": ["ssd"]}]}])
        )));
        assert!(!selected(affinity(json!([{}]))), "an empty term matches nothing");
        assert!(!selected(affinity(
            json!([{"matchExpressions": [{"key": "disk", "operator": "Near", "values": ["ssd"]}]}])
        )));
    }
}
