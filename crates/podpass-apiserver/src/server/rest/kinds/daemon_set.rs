//! apps/v1 DaemonSet (pkg/registry/apps/daemonset): defaulted as `SetDefaults_DaemonSet`
//! (RollingUpdate with maxUnavailable 1 and maxSurge 0, ten revisions of history),
//! validated as `ValidateDaemonSet` (the workload selector and template rules, no
//! `activeDeadlineSeconds`, exactly one of maxUnavailable and maxSurge non-zero), its
//! selector immutable, `status` written only through `/status` (by the DaemonSet
//! controller), the template generation kept by the server in the
//! `deprecated.daemonset.template.generation` annotation (apps/v1's home of
//! `spec.templateGeneration`), and kubectl's table. What runs DaemonSets is the controller
//! manager's.

use k8s_openapi::api::apps;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use podpass_api::int_or_percent::IntOrPercent;
use serde_json::{Value, json};

use super::super::table::{age_column, column, name_column, name_middle_age};
use super::deployment::int_or_percent;
use super::types::{TypeOf, read};
use super::{Names, Printer, Resource, Strategy, invalid, pod_template};
use crate::server::status::StatusError;

/// The annotation holding the template generation (`appsv1.DeprecatedTemplateGeneration`);
/// the DaemonSet controller labels its pods `pod-template-generation` with it.
pub(crate) const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

/// The DaemonSet strategy.
pub(crate) struct DaemonSetStrategy;

/// The resource (`kubectl get ds`, and in `kubectl get all`).
pub(crate) const RESOURCE: Resource = Resource::stored(
    Names { group: "apps", kind: "DaemonSet", plural: "daemonsets", singular: "daemonset" },
    &DaemonSetStrategy,
    &TypeOf::<apps::v1::DaemonSet>::NEW,
)
.with_short_names(&["ds"])
.in_categories(&["all"]);

/// `ValidateDaemonSetUpdateStrategy` and `ValidateRollingUpdateDaemonSet`.
fn strategy_errors(ds: &DaemonSet) -> Vec<String> {
    let strategy = ds.spec.as_ref().and_then(|s| s.update_strategy.clone()).unwrap_or_default();
    let field = "spec.updateStrategy.rollingUpdate";
    match (strategy.type_.as_deref().unwrap_or(""), strategy.rolling_update.as_ref()) {
        ("OnDelete", _) => Vec::new(),
        ("RollingUpdate", None) => vec![format!("{field}: Required value")],
        ("RollingUpdate", Some(rolling)) => {
            let unavailable = rolling.max_unavailable.as_ref().map(int_or_percent);
            let surge = rolling.max_surge.as_ref().map(int_or_percent);
            let mut errors: Vec<String> = unavailable
                .map(|u| u.errors(&format!("{field}.maxUnavailable"), true))
                .into_iter()
                .chain(surge.map(|s| s.errors(&format!("{field}.maxSurge"), true)))
                .flatten()
                .collect();
            let set = |v: Option<IntOrPercent<'_>>| v.is_some_and(|v| v.value().is_ok_and(|n| n != 0));
            match (set(unavailable), set(surge)) {
                (true, true) => {
                    let shown = match rolling.max_surge.as_ref() {
                        Some(IntOrString::Int(n)) => n.to_string(),
                        Some(IntOrString::String(s)) => podpass_api::validation::quote(s),
                        None => "0".into(),
                    };
                    errors.push(format!(
                        "{field}.maxSurge: Invalid value: {shown}: may not be set when maxUnavailable is non-zero"
                    ));
                }
                (false, false) => {
                    errors.push(format!("{field}.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"))
                }
                _ => {}
            }
            errors
        }
        (other, _) => vec![format!(
            "spec.updateStrategy: Unsupported value: {}: supported values: \"RollingUpdate\", \"OnDelete\"",
            podpass_api::validation::quote(other)
        )],
    }
}

/// `ValidateDaemonSetSpec`.
fn spec_errors(ds: &DaemonSet, object: &Value) -> Vec<String> {
    let spec = ds.spec.clone().unwrap_or_default();
    let mut errors =
        pod_template::workload_errors(object, Some(&spec.selector), Some(&spec.template), &["Always"], "daemonset");
    if spec.template.spec.as_ref().is_some_and(|s| s.active_deadline_seconds.is_some()) {
        errors.push(
            "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in DaemonSet is not Supported"
                .into(),
        );
    }
    errors.extend(pod_template::non_negative("spec.minReadySeconds", spec.min_ready_seconds));
    errors.extend(strategy_errors(ds));
    errors.extend(pod_template::non_negative("spec.revisionHistoryLimit", spec.revision_history_limit));
    errors
}

/// The template generation an object carries (1 when it carries none).
fn template_generation(object: &Value) -> i64 {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(TEMPLATE_GENERATION))
        .and_then(Value::as_str)
        .and_then(|g| g.parse().ok())
        .unwrap_or(1)
}

fn set_template_generation(object: &mut Value, generation: i64) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    let annotations = meta.entry("annotations").or_insert(json!({}));
    if !annotations.is_object() {
        *annotations = json!({});
    }
    if let Some(a) = annotations.as_object_mut() {
        a.insert(TEMPLATE_GENERATION.into(), json!(generation.to_string()));
    }
}

/// kubectl's Desired, Current, Ready, Up-to-date, Available and Node Selector cells.
fn cells(ds: &DaemonSet) -> Vec<Value> {
    let status = ds.status.clone().unwrap_or_default();
    let selector = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.node_selector.as_ref())
        .filter(|s| !s.is_empty())
        .map_or_else(
            || "<none>".to_owned(),
            |s| s.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","),
        );
    vec![
        json!(status.desired_number_scheduled),
        json!(status.current_number_scheduled),
        json!(status.number_ready),
        json!(status.updated_number_scheduled.unwrap_or(0)),
        json!(status.number_available.unwrap_or(0)),
        json!(selector),
    ]
}

impl Strategy for DaemonSetStrategy {
    fn default(&self, _name: &str, object: &mut Value) -> Result<(), StatusError> {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            spec.entry("revisionHistoryLimit").or_insert(json!(10));
            let strategy = spec.entry("updateStrategy").or_insert(json!({}));
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
                    if rolling.is_null() {
                        *rolling = json!({});
                    }
                    if let Some(rolling) = rolling.as_object_mut() {
                        rolling.entry("maxUnavailable").or_insert(json!(1));
                        rolling.entry("maxSurge").or_insert(json!(0));
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
        set_template_generation(object, 1);
    }

    fn prepare_for_update(&self, object: &mut Value, old: &Value) {
        super::namespace::keep_status(object, old);
        // The server owns the template generation: the old one, one more when the
        // template changed (`daemonSetStrategy.PrepareForUpdate`).
        let was = template_generation(old);
        let changed = object.pointer("/spec/template") != old.pointer("/spec/template");
        set_template_generation(object, if changed { was.saturating_add(1) } else { was });
    }

    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        let ds: DaemonSet = read(object)?;
        invalid("DaemonSet", name, spec_errors(&ds, object))
    }

    fn validate_update(&self, name: &str, object: &Value, old: &Value) -> Result<(), StatusError> {
        let (ds, was): (DaemonSet, DaemonSet) = (read(object)?, read(old)?);
        let mut errors = spec_errors(&ds, object);
        let selector = |d: &DaemonSet| d.spec.as_ref().map(|s| s.selector.clone());
        if selector(&ds) != selector(&was) {
            let shown = serde_json::to_string(&selector(&ds)).unwrap_or_default();
            errors.push(format!("spec.selector: Invalid value: {shown}: field is immutable"));
        }
        invalid("DaemonSet", name, errors)
    }

    fn subresources(&self) -> &'static [super::Subresource] {
        const SUBRESOURCES: [super::Subresource; 1] = [super::status("DaemonSet")];
        &SUBRESOURCES
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                column(
                    "Desired",
                    "integer",
                    "",
                    "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod).",
                    0,
                ),
                column(
                    "Current",
                    "integer",
                    "",
                    "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
                    0,
                ),
                column(
                    "Ready",
                    "integer",
                    "",
                    "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running with a Ready Condition.",
                    0,
                ),
                column("Up-to-date", "integer", "", "The total number of nodes that are running updated daemon pod", 0),
                column(
                    "Available",
                    "integer",
                    "",
                    "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
                    0,
                ),
                column(
                    "Node Selector",
                    "string",
                    "",
                    "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node.",
                    0,
                ),
                age_column(),
            ],
            |o, now| {
                let cells = read(o).map(|d| cells(&d)).unwrap_or_else(|_| {
                    let mut zeros = vec![json!(0); 5];
                    zeros.push(json!("<none>"));
                    zeros
                });
                name_middle_age(o, cells, now)
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn daemon_set(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"}, "spec": spec})
    }

    fn template() -> Value {
        json!({"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "a", "image": "busybox"}]}})
    }

    fn defaulted(spec: Value) -> Value {
        let mut d = daemon_set(spec);
        DaemonSetStrategy.default("agent", &mut d).unwrap();
        d
    }

    fn refused(spec: Value) -> String {
        DaemonSetStrategy.validate("agent", &defaulted(spec)).unwrap_err().message
    }

    #[test]
    fn daemon_sets_are_defaulted_as_upstream() {
        let ds = defaulted(json!({"selector": {"matchLabels": {"app": "agent"}}, "template": template()}));
        assert_eq!(
            ds["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        assert_eq!(ds["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(ds["spec"]["template"]["spec"]["restartPolicy"], "Always");
        assert!(DaemonSetStrategy.validate("agent", &ds).is_ok());
        let on_delete = defaulted(json!({"selector": {"matchLabels": {"app": "agent"}}, "template": template(),
            "updateStrategy": {"type": "OnDelete"}}));
        assert_eq!(on_delete["spec"]["updateStrategy"], json!({"type": "OnDelete"}));
    }

    #[test]
    fn daemon_sets_are_validated_as_upstream() {
        let base = |extra: Value| {
            let mut spec = json!({"selector": {"matchLabels": {"app": "agent"}}, "template": template()});
            for (k, v) in extra.as_object().unwrap() {
                spec[k] = v.clone();
            }
            spec
        };
        let rolling = |u: Value, s: Value| {
            base(
                json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": u, "maxSurge": s}}}),
            )
        };
        let e = refused(rolling(json!(0), json!(0)));
        assert!(
            e.contains(
                "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"
            ),
            "{e}"
        );
        let e = refused(rolling(json!(1), json!("10%")));
        assert!(e.contains(r#"spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: "10%": may not be set when maxUnavailable is non-zero"#), "{e}");
        let e = refused(rolling(json!("0%"), json!("150%")));
        assert!(
            e.contains(
                r#"spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: "150%": must not be greater than 100%"#
            ),
            "{e}"
        );
        assert!(DaemonSetStrategy.validate("agent", &defaulted(rolling(json!(0), json!(1)))).is_ok(), "surge alone");
        let e = refused(base(json!({"updateStrategy": {"type": "Sideways"}})));
        assert!(
            e.contains(
                r#"spec.updateStrategy: Unsupported value: "Sideways": supported values: "RollingUpdate", "OnDelete""#
            ),
            "{e}"
        );
        let e = refused(base(json!({"selector": {}})));
        assert!(e.contains("spec.selector: Invalid value: {}: empty selector is invalid for daemonset"), "{e}");
        let mut deadline = template();
        deadline["spec"]["activeDeadlineSeconds"] = json!(5);
        deadline["spec"]["restartPolicy"] = json!("OnFailure");
        let e = refused(base(json!({"template": deadline, "minReadySeconds": -1})));
        assert!(e.contains("spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in DaemonSet is not Supported"), "{e}");
        assert!(
            e.contains(
                r#"spec.template.spec.restartPolicy: Unsupported value: "OnFailure": supported values: "Always""#
            ),
            "{e}"
        );
        assert!(e.contains("spec.minReadySeconds: Invalid value: -1: must be greater than or equal to 0"), "{e}");
    }

    #[test]
    fn the_server_keeps_the_template_generation() {
        let mut ds = defaulted(json!({"selector": {"matchLabels": {"app": "agent"}}, "template": template()}));
        DaemonSetStrategy.prepare_for_create(&mut ds);
        assert_eq!(ds["metadata"]["annotations"][TEMPLATE_GENERATION], "1");
        let mut same = ds.clone();
        same["spec"]["minReadySeconds"] = json!(3);
        same["metadata"]["annotations"][TEMPLATE_GENERATION] = json!("7");
        DaemonSetStrategy.prepare_for_update(&mut same, &ds);
        assert_eq!(same["metadata"]["annotations"][TEMPLATE_GENERATION], "1", "a client cannot set it");
        let mut changed = ds.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("busybox:2");
        DaemonSetStrategy.prepare_for_update(&mut changed, &ds);
        assert_eq!(changed["metadata"]["annotations"][TEMPLATE_GENERATION], "2");
        let moved = defaulted(json!({"selector": {"matchLabels": {"app": "agent", "x": "y"}},
            "template": {"metadata": {"labels": {"app": "agent", "x": "y"}}, "spec": template()["spec"]}}));
        let e = DaemonSetStrategy.validate_update("agent", &moved, &ds).unwrap_err().message;
        assert!(e.contains("spec.selector: Invalid value: ") && e.ends_with("field is immutable"), "{e}");
    }

    #[test]
    fn the_table_reads_as_kubectls() {
        let (columns, cells) = DaemonSetStrategy.printer().unwrap();
        assert_eq!(columns.len(), 8);
        let mut ds = defaulted(json!({"selector": {"matchLabels": {"app": "agent"}}, "template": template()}));
        ds["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/os": "linux", "disk": "ssd"});
        ds["status"] = json!({"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2,
            "updatedNumberScheduled": 1, "numberAvailable": 2, "numberMisscheduled": 0});
        assert_eq!(
            cells(&ds, 0)[1..7],
            [json!(3), json!(3), json!(2), json!(1), json!(2), json!("disk=ssd,kubernetes.io/os=linux")]
        );
    }
}
