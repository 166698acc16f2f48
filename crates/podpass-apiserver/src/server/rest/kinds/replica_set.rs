//! apps/v1 ReplicaSet (pkg/registry/apps/replicaset): defaulted and validated as
//! `ValidateReplicaSet` (a selector that is not empty and matches the template's labels,
//! non-negative replicas and minReadySeconds, the template's pod spec), its selector
//! immutable, `status` written only through `/status` (by the ReplicaSet controller),
//! `scale` for `kubectl scale`, and kubectl's table. What runs ReplicaSets is the controller manager's.

use std::collections::BTreeMap;

use k8s_openapi::api::apps;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};

use super::super::table::{age_column, column, name_column, name_middle_age};
use super::types::{TypeOf, read};
use super::{Names, Printer, Resource, Strategy, invalid};
use crate::server::status::StatusError;

/// The ReplicaSet strategy.
pub(crate) struct ReplicaSetStrategy;

/// The resource (`kubectl get rs`, and in `kubectl get all`).
pub(crate) const RESOURCE: Resource = Resource::stored(
    Names { group: "apps", kind: "ReplicaSet", plural: "replicasets", singular: "replicaset" },
    &ReplicaSetStrategy,
    &TypeOf::<apps::v1::ReplicaSet>::NEW,
)
.with_short_names(&["rs"])
.in_categories(&["all"]);

/// A selector without `matchLabels`.
static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// Whether `selector` selects an object labelled `labels` (metav1's rules,
/// [`podpass_api::label_selector`]).
pub(crate) fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    use podpass_api::label_selector::{Requirement, selects};
    let expressions = selector.match_expressions.iter().flatten();
    let requirements: Vec<Requirement<'_>> = expressions
        .map(|e| Requirement { key: &e.key, operator: &e.operator, values: e.values.as_deref().unwrap_or_default() })
        .collect();
    selects(selector.match_labels.as_ref().unwrap_or(&NO_LABELS), &requirements, labels)
}

/// Whether a selector selects nothing in particular (no pairs, no expressions): upstream
/// refuses it for a ReplicaSet ("empty selector is invalid for deployment").
fn is_empty(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

/// `ValidateReplicaSetSpec` (with the template's pod spec as the pod strategy validates it,
/// its fields under `spec.template.spec`).
fn spec_errors(rs: &ReplicaSet, object: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let spec = rs.spec.clone().unwrap_or_default();
    if spec.replicas.is_some_and(|r| r < 0) {
        errors.push(format!(
            "spec.replicas: Invalid value: {}: must be greater than or equal to 0",
            spec.replicas.unwrap_or_default()
        ));
    }
    if spec.min_ready_seconds.is_some_and(|s| s < 0) {
        errors.push(format!(
            "spec.minReadySeconds: Invalid value: {}: must be greater than or equal to 0",
            spec.min_ready_seconds.unwrap_or_default()
        ));
    }
    if object.pointer("/spec/selector").is_none_or(Value::is_null) {
        errors.push("spec.selector: Required value".to_owned());
    } else if is_empty(&spec.selector) {
        let shown = serde_json::to_string(&spec.selector).unwrap_or_default();
        errors.push(format!("spec.selector: Invalid value: {shown}: empty selector is invalid for deployment"));
    }
    let template = spec.template.unwrap_or_default();
    let labels = template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    if !is_empty(&spec.selector) && !selects(&spec.selector, &labels) {
        // Go's %#v of the labels, as field.Invalid renders a map.
        let quote = podpass_api::validation::quote;
        let shown = labels.iter().map(|(k, v)| format!("{}:{}", quote(k), quote(v))).collect::<Vec<_>>().join(", ");
        errors.push(format!(
            "spec.template.metadata.labels: Invalid value: map[string]string{{{shown}}}: `selector` does not match template `labels`"
        ));
    }
    // The template's pod as the pod strategy validates one: its errors are the template's.
    let pod = json!({"spec": object.pointer("/spec/template/spec").cloned().unwrap_or(json!({}))});
    if template.spec.is_none() {
        errors.push("spec.template.spec.containers: Required value".to_owned());
    } else {
        errors.extend(super::pod_spec::errors(&pod).into_iter().map(|e| format!("spec.template.{e}")));
    }
    if let Some(policy) = template.spec.as_ref().and_then(|s| s.restart_policy.as_deref())
        && policy != "Always"
    {
        errors.push(format!(
            "spec.template.spec.restartPolicy: Unsupported value: {}: supported values: \"Always\"",
            podpass_api::validation::quote(policy)
        ));
    }
    errors
}

/// kubectl's Desired, Current and Ready cells.
fn cells(rs: &ReplicaSet) -> Vec<Value> {
    let desired = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = rs.status.clone().unwrap_or_default();
    vec![json!(desired), json!(status.replicas), json!(status.ready_replicas.unwrap_or(0))]
}

impl Strategy for ReplicaSetStrategy {
    fn default(&self, _name: &str, object: &mut Value) -> Result<(), StatusError> {
        // SetDefaults_ReplicaSet: one replica when none is asked; the template's pod spec
        // defaulted as a pod's is (the scheme defaults nested pod templates too).
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            spec.entry("replicas").or_insert(json!(1));
        }
        if let Some(template) = object.pointer_mut("/spec/template") {
            super::pod::default_pod(template);
        }
        Ok(())
    }

    fn prepare_for_create(&self, object: &mut Value) {
        if let Some(obj) = object.as_object_mut() {
            obj.remove("status");
        }
    }

    fn prepare_for_update(&self, object: &mut Value, old: &Value) {
        super::namespace::keep_status(object, old);
    }

    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        let rs: ReplicaSet = read(object)?;
        invalid("ReplicaSet", name, spec_errors(&rs, object))
    }

    fn validate_update(&self, name: &str, object: &Value, old: &Value) -> Result<(), StatusError> {
        let (rs, was): (ReplicaSet, ReplicaSet) = (read(object)?, read(old)?);
        let mut errors = spec_errors(&rs, object);
        let selector = |r: &ReplicaSet| r.spec.as_ref().map(|s| s.selector.clone());
        if selector(&rs) != selector(&was) {
            // apps/v1: the selector is immutable.
            let shown = serde_json::to_string(&selector(&rs)).unwrap_or_default();
            errors.push(format!("spec.selector: Invalid value: {shown}: field is immutable"));
        }
        invalid("ReplicaSet", name, errors)
    }

    fn subresources(&self) -> &'static [super::Subresource] {
        const SUBRESOURCES: [super::Subresource; 2] = [super::status("ReplicaSet"), super::scale()];
        &SUBRESOURCES
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                column("Desired", "integer", "", "Number of desired pods", 0),
                column("Current", "integer", "", "Number of actually running pods", 0),
                column("Ready", "integer", "", "Number of ready pods", 0),
                age_column(),
            ],
            |o, now| {
                let cells = read(o).map(|rs| cells(&rs)).unwrap_or_else(|_| vec![json!(0); 3]);
                name_middle_age(o, cells, now)
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn replica_set(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"}, "spec": spec})
    }

    #[test]
    fn replica_sets_are_defaulted_and_validated_as_upstream() {
        let template = json!({"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "busybox"}]}});
        let mut ok = replica_set(json!({"selector": {"matchLabels": {"app": "web"}}, "template": template}));
        ReplicaSetStrategy.default("web", &mut ok).unwrap();
        assert_eq!(ok["spec"]["replicas"], 1);
        assert_eq!(ok["spec"]["template"]["spec"]["restartPolicy"], "Always", "the template defaulted as a pod");
        assert_eq!(ok["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert!(ReplicaSetStrategy.validate("web", &ok).is_ok());

        let other =
            replica_set(json!({"replicas": -1, "selector": {"matchLabels": {"app": "db"}}, "template": template}));
        let e = ReplicaSetStrategy.validate("web", &other).unwrap_err().message;
        assert!(e.contains("spec.replicas: Invalid value: -1: must be greater than or equal to 0"), "{e}");
        assert!(
            e.contains(r#"spec.template.metadata.labels: Invalid value: map[string]string{"app":"web"}: `selector` does not match template `labels`"#),
            "{e}"
        );

        let empty = replica_set(json!({"selector": {}, "template": template}));
        let e = ReplicaSetStrategy.validate("web", &empty).unwrap_err().message;
        assert!(e.contains("spec.selector: Invalid value: {}: empty selector is invalid for deployment"), "{e}");
        let none = replica_set(json!({"template": template}));
        let e = ReplicaSetStrategy.validate("web", &none).unwrap_err().message;
        assert!(e.contains("spec.selector: Required value"), "{e}");

        let mut bad_pod = template.clone();
        bad_pod["spec"]["containers"][0]["image"] = json!("");
        bad_pod["spec"]["restartPolicy"] = json!("Never");
        let e = ReplicaSetStrategy
            .validate("web", &replica_set(json!({"selector": {"matchLabels": {"app": "web"}}, "template": bad_pod})))
            .unwrap_err()
            .message;
        assert!(e.contains("spec.template.spec.containers[0].image: Required value"), "{e}");
        assert!(e.contains("spec.template.spec.restartPolicy: Unsupported value: \"Never\""), "{e}");

        let moved = replica_set(json!({"selector": {"matchLabels": {"app": "web", "tier": "x"}},
            "template": {"metadata": {"labels": {"app": "web", "tier": "x"}}, "spec": template["spec"]}}));
        let e = ReplicaSetStrategy.validate_update("web", &moved, &ok).unwrap_err().message;
        assert!(e.contains("spec.selector: Invalid value: ") && e.ends_with("field is immutable"), "{e}");
    }

    #[test]
    fn the_table_reads_as_kubectls() {
        let (_, cells) = ReplicaSetStrategy.printer().unwrap();
        let rs = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3, "selector": {}},
            "status": {"replicas": 2, "readyReplicas": 1}});
        assert_eq!(cells(&rs, 0)[1..4], [json!(3), json!(2), json!(1)]);
    }
}
