//! What the workload kinds share (upstream `ValidatePodTemplateSpecForReplicaSet` and the
//! selector checks of apps/v1 and batch/v1): a selector that is not empty and selects the
//! template's labels, the template's pod spec validated as a pod's (its fields under
//! `spec.template.spec`), and the restart policies the kind's controller can honour.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};

/// A selector without `matchLabels`.
static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// Whether `selector` selects an object labelled `labels` (metav1's rules,
/// [`podpass_api::label_selector`]).
fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    use podpass_api::label_selector::{Requirement, selects};
    let expressions = selector.match_expressions.iter().flatten();
    let requirements: Vec<Requirement<'_>> = expressions
        .map(|e| Requirement { key: &e.key, operator: &e.operator, values: e.values.as_deref().unwrap_or_default() })
        .collect();
    selects(selector.match_labels.as_ref().unwrap_or(&NO_LABELS), &requirements, labels)
}

/// Whether a selector selects nothing in particular (no pairs, no expressions): upstream
/// refuses it for a workload ("empty selector is invalid for deployment", or "for daemonset").
fn is_empty(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

/// `field: Invalid value: n: must be greater than or equal to 0` when `value` is negative.
pub(crate) fn non_negative(field: &str, value: Option<i32>) -> Option<String> {
    value.filter(|v| *v < 0).map(|v| format!("{field}: Invalid value: {v}: must be greater than or equal to 0"))
}

/// The selector's and the template's errors: `spec.selector` required and not empty, the
/// template's labels selected by it, the template's pod spec valid, its `restartPolicy` one
/// of `restart_policies` (the first is the one upstream's message lists first).
pub(crate) fn errors(
    object: &Value,
    selector: Option<&LabelSelector>,
    template: Option<&PodTemplateSpec>,
    restart_policies: &[&str],
) -> Vec<String> {
    workload_errors(object, selector, template, restart_policies, "deployment")
}

/// [`errors`], an empty selector refused "for `workload`" (upstream's words per kind:
/// ReplicaSets, Deployments and Jobs say `deployment`, DaemonSets `daemonset`).
pub(crate) fn workload_errors(
    object: &Value,
    selector: Option<&LabelSelector>,
    template: Option<&PodTemplateSpec>,
    restart_policies: &[&str],
    workload: &str,
) -> Vec<String> {
    let mut errors = Vec::new();
    let empty = LabelSelector::default();
    let selector_value = object.pointer("/spec/selector").filter(|v| !v.is_null());
    match (selector_value, selector) {
        (None, _) | (_, None) => errors.push("spec.selector: Required value".to_owned()),
        (Some(_), Some(s)) if is_empty(s) => {
            let shown = serde_json::to_string(s).unwrap_or_default();
            errors.push(format!("spec.selector: Invalid value: {shown}: empty selector is invalid for {workload}"));
        }
        _ => {}
    }
    let selector = selector.unwrap_or(&empty);
    let labels = template.and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.clone()).unwrap_or_default();
    if !is_empty(selector) && !selects(selector, &labels) {
        // Go's %#v of the labels, as field.Invalid renders a map.
        let quote = podpass_api::validation::quote;
        let shown = labels.iter().map(|(k, v)| format!("{}:{}", quote(k), quote(v))).collect::<Vec<_>>().join(", ");
        errors.push(format!(
            "spec.template.metadata.labels: Invalid value: map[string]string{{{shown}}}: `selector` does not match template `labels`"
        ));
    }
    errors.extend(template_errors(object.pointer("/spec/template"), template, "spec.template", restart_policies));
    errors
}

/// A pod template's errors, its fields under `prefix` (`spec.template`,
/// `spec.jobTemplate.spec.template`): its pod spec valid as a pod's, its `restartPolicy` one
/// of `restart_policies`.
pub(crate) fn template_errors(
    json: Option<&Value>,
    template: Option<&PodTemplateSpec>,
    prefix: &str,
    restart_policies: &[&str],
) -> Vec<String> {
    let mut errors = Vec::new();
    let Some(spec) = template.and_then(|t| t.spec.as_ref()) else {
        errors.push(format!("{prefix}.spec.containers: Required value"));
        return errors;
    };
    // The template's pod as the pod strategy validates one: its errors are the template's.
    let pod = json!({"spec": json.and_then(|t| t.get("spec")).cloned().unwrap_or(json!({}))});
    errors.extend(super::pod_spec::errors(&pod).into_iter().map(|e| format!("{prefix}.{e}")));
    if let Some(policy) = spec.restart_policy.as_deref()
        && !restart_policies.contains(&policy)
    {
        let quote = podpass_api::validation::quote;
        let supported: Vec<String> = restart_policies.iter().map(|p| quote(p)).collect();
        errors.push(format!(
            "{prefix}.spec.restartPolicy: Unsupported value: {}: supported values: {}",
            quote(policy),
            supported.join(", ")
        ));
    }
    errors
}

/// The template's pod spec defaulted as a pod's is (the scheme defaults nested pod templates too).
pub(crate) fn default(object: &mut Value) {
    if let Some(template) = object.pointer_mut("/spec/template") {
        super::pod::default_pod(template);
    }
}
