//! ResourceQuota (pkg/registry/core/resourcequota): `spec.hard` and `spec.scopes`
//! validated as `ValidateResourceQuota`, `status` written only through `/status` (and by
//! quota admission and the quota controller, [`crate::server::rest::admission::quota`]),
//! kubectl's table (`REQUEST`, `LIMIT` as `used/hard`).

use serde_json::{Value, json};

use super::super::table::{age, age_column, column, name_column, text};
use super::{Printer, Strategy, invalid};
use crate::field::Field;
use crate::server::status::StatusError;

/// The ResourceQuota strategy.
pub(crate) struct ResourceQuotaStrategy;

/// The registered strategy.
pub(crate) static RESOURCE_QUOTA: ResourceQuotaStrategy = ResourceQuotaStrategy;

/// The scopes upstream knows.
const SCOPES: [&str; 6] =
    ["Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass", "CrossNamespacePodAffinity"];

/// Resources a quota may name besides `count/<resource>` and `requests.<extended>`.
const STANDARD: [&str; 18] = [
    "pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "requests.storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "services",
    "services.loadbalancers",
    "services.nodeports",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "replicationcontrollers",
];

/// `ValidateResourceQuota`'s rules on `spec`: each `hard` entry a known resource with a
/// non-negative quantity, each scope known.
fn spec_errors(object: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    for (name, value) in object.field("/spec/hard").and_then(Value::as_object).into_iter().flatten() {
        let known = STANDARD.contains(&name.as_str())
            || name.strip_prefix("count/").is_some_and(|r| !r.is_empty())
            || name.strip_prefix("requests.").is_some_and(|r| r.contains('/'));
        if !known {
            errors.push(format!(
                "spec.hard[{name}]: Invalid value: {}: must be a standard resource for quota",
                podpass_api::validation::quote(name)
            ));
        }
        let text = value.as_str().unwrap_or_default();
        match podpass_api::quantity::parse_milli(text) {
            Ok(v) if v < 0 => errors.push(format!(
                "spec.hard[{name}]: Invalid value: {}: must be greater than or equal to 0",
                podpass_api::validation::quote(text)
            )),
            Ok(_) => {}
            Err(e) => {
                errors.push(format!("spec.hard[{name}]: Invalid value: {}: {e}", podpass_api::validation::quote(text)))
            }
        }
    }
    for (i, scope) in object.field("/spec/scopes").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let s = scope.as_str().unwrap_or_default();
        if !SCOPES.contains(&s) {
            errors.push(format!("spec.scopes[{i}]: Unsupported value: {}", podpass_api::validation::quote(s)));
        }
    }
    errors
}

impl Strategy for ResourceQuotaStrategy {
    fn prepare_for_update(&self, object: &mut Value, old: &Value) {
        super::namespace::keep_status(object, old);
    }

    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        invalid("ResourceQuota", name, spec_errors(object))
    }

    fn subresources(&self) -> &'static [super::Subresource] {
        const SUBRESOURCES: [super::Subresource; 1] = [super::status("ResourceQuota")];
        &SUBRESOURCES
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                age_column(),
                column("Request", "string", "", "Non-limit resources: used/hard", 0),
                column("Limit", "string", "", "Limit resources: used/hard", 0),
            ],
            |q, now| {
                let (mut request, mut limit) = (Vec::new(), Vec::new());
                let used = q.field("/status/used");
                for (name, hard) in q.field("/status/hard").and_then(Value::as_object).into_iter().flatten() {
                    let u = used.and_then(|u| u.get(name)).and_then(Value::as_str).unwrap_or("0");
                    let cell = format!("{name}: {u}/{}", hard.as_str().unwrap_or_default());
                    if name.starts_with("limits.") { limit.push(cell) } else { request.push(cell) }
                }
                vec![
                    json!(text(q, "/metadata/name")),
                    json!(age(q, "/metadata/creationTimestamp", now)),
                    json!(request.join(", ")),
                    json!(limit.join(", ")),
                ]
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hard_limits_and_scopes_are_validated_as_upstream() {
        let q = json!({"spec": {"hard": {"pods": "2", "requests.cpu": "500m", "count/configmaps": "3",
            "widgets": "1", "memory": "-1Gi", "limits.memory": "lots"}, "scopes": ["BestEffort", "Sometimes"]}});
        let errors = spec_errors(&q);
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with(r#"spec.hard[widgets]: Invalid value: "widgets": must be a standard resource"#))
        );
        assert!(
            errors
                .iter()
                .any(|e| e == r#"spec.hard[memory]: Invalid value: "-1Gi": must be greater than or equal to 0"#)
        );
        assert!(errors.iter().any(|e| e.starts_with(r#"spec.hard[limits.memory]: Invalid value: "lots""#)));
        assert!(errors.iter().any(|e| e == r#"spec.scopes[1]: Unsupported value: "Sometimes""#));
    }
}
