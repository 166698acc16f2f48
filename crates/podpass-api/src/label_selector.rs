//! metav1 label selectors as `LabelSelectorAsSelector` then `Matches` evaluates them, over
//! plain maps, for whatever holds a selector's parts (the API server's validation, the
//! controllers' claims).

use std::collections::BTreeMap;

/// One `matchExpressions` entry.
#[derive(Debug, Clone, Copy)]
pub struct Requirement<'a> {
    /// `key`.
    pub key: &'a str,
    /// `operator`: `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: &'a str,
    /// `values`.
    pub values: &'a [String],
}

/// Whether `labels` satisfy every `match_labels` pair and every requirement. An operator
/// upstream does not know selects nothing (`LabelSelectorAsSelector` refuses it).
pub fn selects(
    match_labels: &BTreeMap<String, String>,
    expressions: &[Requirement<'_>],
    labels: &BTreeMap<String, String>,
) -> bool {
    let pairs = match_labels.iter().all(|(k, v)| labels.get(k) == Some(v));
    let requirements = expressions.iter().all(|e| match e.operator {
        "In" => labels.get(e.key).is_some_and(|v| e.values.contains(v)),
        "NotIn" => labels.get(e.key).is_none_or(|v| !e.values.contains(v)),
        "Exists" => labels.contains_key(e.key),
        "DoesNotExist" => !labels.contains_key(e.key),
        _ => false,
    });
    pairs && requirements
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_select_as_metav1s() {
        let labels: BTreeMap<String, String> = [("app".to_owned(), "web".to_owned())].into();
        let pairs = |k: &str, v: &str| BTreeMap::from([(k.to_owned(), v.to_owned())]);
        assert!(selects(&pairs("app", "web"), &[], &labels));
        assert!(!selects(&pairs("app", "db"), &[], &labels));
        let values = ["web".to_owned(), "db".to_owned()];
        let expr = |operator| Requirement { key: "app", operator, values: &values };
        assert!(selects(&BTreeMap::new(), &[expr("In")], &labels));
        assert!(!selects(&BTreeMap::new(), &[expr("NotIn")], &labels));
        assert!(selects(&BTreeMap::new(), &[expr("Exists")], &labels));
        assert!(!selects(&BTreeMap::new(), &[expr("DoesNotExist")], &labels));
        assert!(!selects(&BTreeMap::new(), &[expr("Gt")], &labels));
    }
}
