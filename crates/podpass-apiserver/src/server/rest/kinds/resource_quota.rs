//! ResourceQuota (pkg/registry/core/resourcequota): `spec.hard` and `spec.scopes`
//! validated as `ValidateResourceQuota`, `status` written only through `/status` (and by
//! quota admission and the quota controller, [`crate::server::rest::admission::quota`]),
//! kubectl's table (`REQUEST`, `LIMIT` as `used/hard`).

use k8s_openapi::api::core::v1::ResourceQuota;
use serde_json::{Value, json};

use super::super::table::{age, age_column, column, name_column, text};
use super::types::read;
use super::{Printer, Strategy, invalid};
use crate::server::status::StatusError;

/// The ResourceQuota strategy.
pub(crate) struct ResourceQuotaStrategy;

/// The registered strategy.
pub(crate) static RESOURCE_QUOTA: ResourceQuotaStrategy = ResourceQuotaStrategy;

/// The resource.
pub(crate) const RESOURCE: super::Resource = super::Resource::stored(
    super::Names { group: "", kind: "ResourceQuota", plural: "resourcequotas", singular: "resourcequota" },
    &RESOURCE_QUOTA,
    &super::types::TypeOf::<k8s_openapi::api::core::v1::ResourceQuota>::NEW,
)
.with_short_names(&["quota"]);

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
fn spec_errors(quota: &ResourceQuota) -> Vec<String> {
    let quote = podpass_api::validation::quote;
    let mut errors = Vec::new();
    let spec = quota.spec.as_ref();
    for (name, quantity) in spec.and_then(|s| s.hard.as_ref()).into_iter().flatten() {
        let known = STANDARD.contains(&name.as_str())
            || name.strip_prefix("count/").is_some_and(|r| !r.is_empty())
            || name.strip_prefix("requests.").is_some_and(|r| r.contains('/'));
        if !known {
            errors.push(format!(
                "spec.hard[{name}]: Invalid value: {}: must be a standard resource for quota",
                quote(name)
            ));
        }
        let text = quantity.0.as_str();
        match podpass_api::quantity::parse_milli(text) {
            Ok(v) if v < 0 => errors
                .push(format!("spec.hard[{name}]: Invalid value: {}: must be greater than or equal to 0", quote(text))),
            Ok(_) => {}
            Err(e) => errors.push(format!("spec.hard[{name}]: Invalid value: {}: {e}", quote(text))),
        }
    }
    for (i, scope) in spec.and_then(|s| s.scopes.as_ref()).into_iter().flatten().enumerate() {
        if !SCOPES.contains(&scope.as_str()) {
            errors.push(format!("spec.scopes[{i}]: Unsupported value: {}", quote(scope)));
        }
    }
    errors
}

/// kubectl's Request and Limit cells: `name: used/hard`, limits apart.
fn usage_cells(quota: &ResourceQuota) -> (String, String) {
    let (mut request, mut limit) = (Vec::new(), Vec::new());
    let status = quota.status.as_ref();
    let used = status.and_then(|s| s.used.as_ref());
    for (name, hard) in status.and_then(|s| s.hard.as_ref()).into_iter().flatten() {
        let u = used.and_then(|u| u.get(name)).map_or("0", |q| q.0.as_str());
        let cell = format!("{name}: {u}/{}", hard.0);
        if name.starts_with("limits.") { limit.push(cell) } else { request.push(cell) }
    }
    (request.join(", "), limit.join(", "))
}

impl Strategy for ResourceQuotaStrategy {
    fn prepare_for_update(&self, object: &mut Value, old: &Value) {
        super::namespace::keep_status(object, old);
    }

    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        invalid("ResourceQuota", name, spec_errors(&read(object)?))
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
                let (request, limit) = read(q).map(|quota| usage_cells(&quota)).unwrap_or_default();
                vec![
                    json!(text(q, "/metadata/name")),
                    json!(age(q, "/metadata/creationTimestamp", now)),
                    json!(request),
                    json!(limit),
                ]
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn hard_limits_and_scopes_are_validated_as_upstream() {
        let q = json!({"spec": {"hard": {"pods": "2", "requests.cpu": "500m", "count/configmaps": "3",
            "widgets": "1", "memory": "-1Gi", "limits.memory": "lots"}, "scopes": ["BestEffort", "Sometimes"]}});
        let errors = spec_errors(&read(&q).unwrap());
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

    #[test]
    fn the_table_shows_used_of_hard_with_limits_apart() {
        let (_, cells) = RESOURCE_QUOTA.printer().unwrap();
        let q = json!({"metadata": {"name": "q"},
            "status": {"hard": {"pods": "2", "limits.cpu": "1", "requests.memory": "1Gi"}, "used": {"pods": "1"}}});
        assert_eq!(cells(&q, 0)[2..4], [json!("pods: 1/2, requests.memory: 0/1Gi"), json!("limits.cpu: 0/1")]);
    }
}
