//! apps/v1 Deployment (pkg/registry/apps/deployment): defaulted as `SetDefaults_Deployment`
//! (one replica, RollingUpdate 25%/25%, ten revisions of history, a 600 s progress
//! deadline), validated as `ValidateDeployment` (the workload selector and template rules,
//! the strategy, the deadline beyond `minReadySeconds`), its selector immutable, `status`
//! written only through `/status` (by the Deployment controller), `scale` for `kubectl
//! scale`, and kubectl's table. What rolls Deployments out is the controller manager's.

use k8s_openapi::api::apps;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use podpass_api::int_or_percent::IntOrPercent;
use serde_json::{Value, json};

use super::super::table::{age_column, column, name_column, name_middle_age};
use super::types::{TypeOf, read};
use super::{Names, Printer, Resource, Strategy, invalid, pod_template};
use crate::server::status::StatusError;

/// The Deployment strategy.
pub(crate) struct DeploymentStrategy;

/// The resource (`kubectl get deploy`, and in `kubectl get all`).
pub(crate) const RESOURCE: Resource = Resource::stored(
    Names { group: "apps", kind: "Deployment", plural: "deployments", singular: "deployment" },
    &DeploymentStrategy,
    &TypeOf::<apps::v1::Deployment>::NEW,
)
.with_short_names(&["deploy"])
.in_categories(&["all"]);

/// An IntOrString as the validation reads it (the DaemonSet's too).
pub(super) fn int_or_percent(v: &IntOrString) -> IntOrPercent<'_> {
    match v {
        IntOrString::Int(n) => IntOrPercent::Int(*n),
        IntOrString::String(s) => IntOrPercent::String(s),
    }
}

/// `ValidateDeploymentStrategy` and `ValidateRollingUpdateDeployment`.
fn strategy_errors(deployment: &Deployment) -> Vec<String> {
    let mut errors = Vec::new();
    let strategy = deployment.spec.as_ref().and_then(|s| s.strategy.clone()).unwrap_or_default();
    match (strategy.type_.as_deref().unwrap_or(""), strategy.rolling_update.as_ref()) {
        ("Recreate", Some(_)) => errors.push(
            "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"
                .to_owned(),
        ),
        ("Recreate", None) => {}
        ("RollingUpdate", None) => {
            errors
                .push("spec.strategy.rollingUpdate: Required value: this should be defaulted and never be nil".into());
        }
        ("RollingUpdate", Some(rolling)) => {
            let field = "spec.strategy.rollingUpdate";
            let surge = rolling.max_surge.as_ref().map(int_or_percent);
            let unavailable = rolling.max_unavailable.as_ref().map(int_or_percent);
            if let Some(s) = surge {
                errors.extend(s.errors(&format!("{field}.maxSurge"), false));
            }
            if let Some(u) = unavailable {
                errors.extend(u.errors(&format!("{field}.maxUnavailable"), true));
            }
            let zero = |v: Option<IntOrPercent<'_>>| v.is_none_or(|v| v.value() == Ok(0));
            if zero(surge) && zero(unavailable) {
                errors.push(format!("{field}.maxUnavailable: Invalid value: 0: may not be 0 when `maxSurge` is 0"));
            }
        }
        (other, _) => errors.push(format!(
            "spec.strategy.type: Unsupported value: {}: supported values: \"Recreate\", \"RollingUpdate\"",
            podpass_api::validation::quote(other)
        )),
    }
    errors
}

/// `ValidateDeploymentSpec`.
fn spec_errors(deployment: &Deployment, object: &Value) -> Vec<String> {
    let spec = deployment.spec.clone().unwrap_or_default();
    let mut errors: Vec<String> = [
        pod_template::non_negative("spec.replicas", spec.replicas),
        pod_template::non_negative("spec.minReadySeconds", spec.min_ready_seconds),
        pod_template::non_negative("spec.revisionHistoryLimit", spec.revision_history_limit),
        pod_template::non_negative("spec.progressDeadlineSeconds", spec.progress_deadline_seconds),
    ]
    .into_iter()
    .flatten()
    .collect();
    errors.extend(pod_template::errors(object, Some(&spec.selector), Some(&spec.template), &["Always"]));
    errors.extend(strategy_errors(deployment));
    if let Some(deadline) = spec.progress_deadline_seconds
        && deadline <= spec.min_ready_seconds.unwrap_or(0)
    {
        errors.push(format!(
            "spec.progressDeadlineSeconds: Invalid value: {deadline}: must be greater than minReadySeconds"
        ));
    }
    errors
}

/// kubectl's Ready (`ready/desired`), Up-to-date and Available cells.
fn cells(deployment: &Deployment) -> Vec<Value> {
    let desired = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = deployment.status.clone().unwrap_or_default();
    vec![
        json!(format!("{}/{desired}", status.ready_replicas.unwrap_or(0))),
        json!(status.updated_replicas.unwrap_or(0)),
        json!(status.available_replicas.unwrap_or(0)),
    ]
}

impl Strategy for DeploymentStrategy {
    fn default(&self, _name: &str, object: &mut Value) -> Result<(), StatusError> {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            spec.entry("replicas").or_insert(json!(1));
            spec.entry("revisionHistoryLimit").or_insert(json!(10));
            spec.entry("progressDeadlineSeconds").or_insert(json!(600));
            let strategy = spec.entry("strategy").or_insert(json!({}));
            if strategy.is_null() {
                *strategy = json!({});
            }
            if let Some(strategy) = strategy.as_object_mut() {
                let kind = strategy.entry("type").or_insert(json!("RollingUpdate"));
                if kind.as_str() == Some("") {
                    *kind = json!("RollingUpdate");
                }
                if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
                    let rolling = strategy.entry("rollingUpdate").or_insert(json!({}));
                    if let Some(rolling) = rolling.as_object_mut() {
                        rolling.entry("maxUnavailable").or_insert(json!("25%"));
                        rolling.entry("maxSurge").or_insert(json!("25%"));
                    }
                }
            }
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
        let deployment: Deployment = read(object)?;
        invalid("Deployment", name, spec_errors(&deployment, object))
    }

    fn validate_update(&self, name: &str, object: &Value, old: &Value) -> Result<(), StatusError> {
        let (deployment, was): (Deployment, Deployment) = (read(object)?, read(old)?);
        let mut errors = spec_errors(&deployment, object);
        let selector = |d: &Deployment| d.spec.as_ref().map(|s| s.selector.clone());
        if selector(&deployment) != selector(&was) {
            // apps/v1: the selector is immutable.
            let shown = serde_json::to_string(&selector(&deployment)).unwrap_or_default();
            errors.push(format!("spec.selector: Invalid value: {shown}: field is immutable"));
        }
        invalid("Deployment", name, errors)
    }

    fn subresources(&self) -> &'static [super::Subresource] {
        const SUBRESOURCES: [super::Subresource; 2] = [super::status("Deployment"), super::scale()];
        &SUBRESOURCES
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                column("Ready", "string", "", "Number of the pod with ready state", 0),
                column(
                    "Up-to-date",
                    "string",
                    "",
                    "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
                    0,
                ),
                column(
                    "Available",
                    "string",
                    "",
                    "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
                    0,
                ),
                age_column(),
            ],
            |o, now| {
                let cells = read(o).map(|d| cells(&d)).unwrap_or_else(|_| vec![json!("0/0"), json!(0), json!(0)]);
                name_middle_age(o, cells, now)
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn deployment(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": spec})
    }

    fn template() -> Value {
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "busybox"}]}})
    }

    fn defaulted(spec: Value) -> Value {
        let mut d = deployment(spec);
        DeploymentStrategy.default("web", &mut d).unwrap();
        d
    }

    #[test]
    fn deployments_are_defaulted_as_upstream() {
        let d = defaulted(json!({"selector": {"matchLabels": {"app": "web"}}, "template": template()}));
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
        assert!(DeploymentStrategy.validate("web", &d).is_ok());
        let recreate = defaulted(json!({"selector": {"matchLabels": {"app": "web"}}, "template": template(),
            "strategy": {"type": "Recreate"}}));
        assert_eq!(recreate["spec"]["strategy"], json!({"type": "Recreate"}));
        assert!(DeploymentStrategy.validate("web", &recreate).is_ok());
    }

    #[test]
    fn invalid_strategies_and_deadlines_are_named_as_upstream() {
        let check = |spec: Value, expected: &str| {
            let mut d = deployment(spec);
            d["spec"]["selector"] = json!({"matchLabels": {"app": "web"}});
            d["spec"]["template"] = template();
            let e = DeploymentStrategy.validate("web", &d).unwrap_err().message;
            assert!(e.contains(expected), "{e}");
        };
        check(
            json!({"strategy": {"type": "Recreate", "rollingUpdate": {}}}),
            "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'",
        );
        check(
            json!({"strategy": {"type": "Blue"}}),
            r#"spec.strategy.type: Unsupported value: "Blue": supported values: "Recreate", "RollingUpdate""#,
        );
        check(
            json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}}),
            "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 when `maxSurge` is 0",
        );
        check(
            json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "1", "maxUnavailable": "120%"}}}),
            "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: \"120%\": must not be greater than 100%",
        );
        check(
            json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "1", "maxUnavailable": 1}}}),
            "spec.strategy.rollingUpdate.maxSurge: Invalid value: \"1\": a valid percent string",
        );
        check(
            json!({"minReadySeconds": 30, "progressDeadlineSeconds": 30}),
            "spec.progressDeadlineSeconds: Invalid value: 30: must be greater than minReadySeconds",
        );
        check(json!({"revisionHistoryLimit": -1}), "spec.revisionHistoryLimit: Invalid value: -1");
        let mut job_like = template();
        job_like["spec"]["restartPolicy"] = json!("Never");
        let d = deployment(json!({"selector": {"matchLabels": {"app": "web"}}, "template": job_like}));
        let e = DeploymentStrategy.validate("web", &d).unwrap_err().message;
        assert!(
            e.contains(r#"spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always""#),
            "{e}"
        );
    }

    #[test]
    fn the_selector_is_immutable_and_the_table_reads_as_kubectls() {
        let d = defaulted(json!({"selector": {"matchLabels": {"app": "web"}}, "template": template()}));
        let mut moved = d.clone();
        moved["spec"]["selector"] = json!({"matchLabels": {"app": "web", "tier": "x"}});
        moved["spec"]["template"]["metadata"]["labels"]["tier"] = json!("x");
        let e = DeploymentStrategy.validate_update("web", &moved, &d).unwrap_err().message;
        assert!(e.contains("field is immutable"), "{e}");
        let (_, cells) = DeploymentStrategy.printer().unwrap();
        let mut shown = d.clone();
        shown["spec"]["replicas"] = json!(3);
        shown["status"] = json!({"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 1});
        assert_eq!(cells(&shown, 0)[1..4], [json!("2/3"), json!(3), json!(1)]);
    }
}
