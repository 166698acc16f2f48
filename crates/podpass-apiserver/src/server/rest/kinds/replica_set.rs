//! apps/v1 ReplicaSet (pkg/registry/apps/replicaset): defaulted and validated as
//! `ValidateReplicaSet` (a selector that is not empty and matches the template's labels,
//! non-negative replicas and minReadySeconds, the template's pod spec), its selector
//! immutable, `status` written only through `/status` (by the ReplicaSet controller),
//! `scale` for `kubectl scale`, and kubectl's table. What runs ReplicaSets is the controller manager's.

use k8s_openapi::api::apps;
use k8s_openapi::api::apps::v1::ReplicaSet;
use serde_json::{Value, json};

use super::super::table::{age_column, column, name_column, name_middle_age};
use super::types::{TypeOf, read};
use super::{Names, Printer, Resource, Strategy, invalid, pod_template};
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

/// `ValidateReplicaSetSpec` (with the template's pod spec as the pod strategy validates it,
/// its fields under `spec.template.spec`).
fn spec_errors(rs: &ReplicaSet, object: &Value) -> Vec<String> {
    let spec = rs.spec.clone().unwrap_or_default();
    let mut errors: Vec<String> = [
        pod_template::non_negative("spec.replicas", spec.replicas),
        pod_template::non_negative("spec.minReadySeconds", spec.min_ready_seconds),
    ]
    .into_iter()
    .flatten()
    .collect();
    errors.extend(pod_template::errors(object, Some(&spec.selector), spec.template.as_ref(), &["Always"]));
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
        pod_template::default(object);
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
