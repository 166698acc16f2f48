//! apps/v1 ControllerRevision (pkg/registry/apps/controllerrevision): the history a
//! DaemonSet keeps of its templates (`kubectl rollout history|undo ds`), validated as
//! `ValidateControllerRevision` (`data` mandatory, `revision` not negative) and, on update,
//! its `data` immutable; kubectl's table names the controller that owns it.

use k8s_openapi::api::apps;
use serde_json::{Value, json};

use super::super::table::{age_column, column, name_column, name_middle_age, text};
use super::types::TypeOf;
use super::{Names, Printer, Resource, Strategy, invalid};
use crate::server::status::StatusError;

/// The ControllerRevision strategy.
pub(crate) struct ControllerRevisionStrategy;

/// The resource (`kubectl get controllerrevisions`).
pub(crate) const RESOURCE: Resource = Resource::stored(
    Names { group: "apps", kind: "ControllerRevision", plural: "controllerrevisions", singular: "controllerrevision" },
    &ControllerRevisionStrategy,
    &TypeOf::<apps::v1::ControllerRevision>::NEW,
);

fn errors(object: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    if object.get("data").is_none_or(Value::is_null) {
        errors.push("data: Required value: data is mandatory".to_owned());
    }
    if let Some(n) = object.get("revision").and_then(Value::as_i64).filter(|n| *n < 0) {
        errors.push(format!("revision: Invalid value: {n}: must be greater than or equal to 0"));
    }
    errors
}

/// kubectl's Controller cell: `<kind>.<group>/<name>` of the controller reference.
fn controller(o: &Value) -> String {
    let owners = o.pointer("/metadata/ownerReferences").and_then(Value::as_array);
    let Some(owner) = owners.into_iter().flatten().find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
    else {
        return "<none>".into();
    };
    let group = text(owner, "/apiVersion").rsplit_once('/').map_or("", |(g, _)| g);
    let kind = text(owner, "/kind").to_lowercase();
    let kind = if group.is_empty() { kind } else { format!("{kind}.{group}") };
    format!("{kind}/{}", text(owner, "/name"))
}

impl Strategy for ControllerRevisionStrategy {
    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        invalid("ControllerRevision", name, errors(object))
    }

    fn validate_update(&self, name: &str, object: &Value, old: &Value) -> Result<(), StatusError> {
        let mut errors = errors(object);
        if object.get("data") != old.get("data") {
            let shown = serde_json::to_string(object.get("data").unwrap_or(&Value::Null)).unwrap_or_default();
            errors.push(format!("data: Invalid value: {shown}: field is immutable"));
        }
        invalid("ControllerRevision", name, errors)
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                column("Controller", "string", "", "Controller of the object", 0),
                column(
                    "Revision",
                    "number",
                    "",
                    "Revision indicates the revision of the state represented by Data.",
                    0,
                ),
                age_column(),
            ],
            |o, now| {
                let revision = o.get("revision").and_then(Value::as_i64).unwrap_or(0);
                name_middle_age(o, vec![json!(controller(o)), json!(revision)], now)
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn revisions_are_validated_and_their_data_is_immutable() {
        let s = ControllerRevisionStrategy;
        let ok = json!({"metadata": {"name": "agent-6b7c"}, "data": {"spec": {}}, "revision": 2});
        assert!(s.validate("agent-6b7c", &ok).is_ok());
        let e = s.validate("x", &json!({"metadata": {"name": "x"}, "revision": -1})).unwrap_err().message;
        assert!(e.contains("data: Required value: data is mandatory"), "{e}");
        assert!(e.contains("revision: Invalid value: -1: must be greater than or equal to 0"), "{e}");
        let mut bumped = ok.clone();
        bumped["revision"] = json!(3);
        assert!(s.validate_update("agent-6b7c", &bumped, &ok).is_ok(), "the revision may move");
        let mut rewritten = ok.clone();
        rewritten["data"] = json!({"spec": {"template": {}}});
        let e = s.validate_update("agent-6b7c", &rewritten, &ok).unwrap_err().message;
        assert!(e.contains("data: Invalid value: ") && e.ends_with("field is immutable"), "{e}");
    }

    #[test]
    fn the_table_names_the_controller() {
        let (_, cells) = ControllerRevisionStrategy.printer().unwrap();
        let o = json!({"metadata": {"name": "agent-6b7c", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u", "controller": true}]},
            "revision": 4});
        assert_eq!(cells(&o, 0)[1..3], [json!("daemonset.apps/agent"), json!(4)]);
        assert_eq!(cells(&json!({"metadata": {"name": "x"}, "revision": 1}), 0)[1], json!("<none>"));
    }
}
