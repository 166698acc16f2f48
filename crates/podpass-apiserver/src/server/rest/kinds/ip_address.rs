//! IPAddress (networking.k8s.io/v1, pkg/registry/networking/ipaddress): one object per
//! allocated Service cluster IP, named by the address, so that two allocations of one
//! address — from this replica or another — collide in the store (KEP-1880, upstream's
//! allocator since 1.33). The API server writes them (`service_ips`); validated and printed
//! as upstream.

use podpass_api::validation::FieldError;
use serde_json::{Value, json};

use super::super::table::{age_column, column, name_column, name_middle_age};
use super::{Names, Printer, Resource, Strategy, invalid};
use crate::field::Field;
use crate::server::status::StatusError;

/// The IPAddress strategy.
pub(crate) struct IpAddress;

/// The resource.
pub(crate) const RESOURCE: Resource = Resource::stored(
    Names { group: "networking.k8s.io", kind: "IPAddress", plural: "ipaddresses", singular: "ipaddress" },
    &IpAddress,
    &super::types::TypeOf::<k8s_openapi::api::networking::v1::IPAddress>::NEW,
)
.cluster_scoped()
.with_short_names(&["ip"]);

/// `ValidateIPAddressName`: an address, written as Go's `netip` writes it.
fn name_problem(name: &str) -> Option<String> {
    match name.parse::<std::net::IpAddr>() {
        Err(_) => Some(format!("ParseAddr({name:?}): unable to parse IP")),
        Ok(ip) if ip.to_string() != name => Some("must be a canonical format IP address".into()),
        Ok(_) => None,
    }
}

/// `validateIPAddressParentReference`: a parent naming at least its resource and name.
fn errors(object: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let Some(parent) = object.field("/spec/parentRef").filter(|p| p.is_object()) else {
        return vec![FieldError::required("spec.parentRef", "").to_string()];
    };
    for field in ["resource", "name"] {
        if parent.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
            errors.push(FieldError::required(&format!("spec.parentRef.{field}"), ""));
        }
    }
    if let Some(group) = parent.get("group").and_then(Value::as_str).filter(|g| !g.is_empty()) {
        for problem in podpass_api::validation::is_dns1123_subdomain(group) {
            errors.push(FieldError::invalid("spec.parentRef.group", group, problem));
        }
    }
    errors.into_iter().map(|e| e.to_string()).collect()
}

/// printIPAddress's ParentRef: `services/<namespace>/<name>` (the group after the resource
/// when there is one).
fn parent(object: &Value) -> String {
    let Some(parent) = object.field("/spec/parentRef") else { return "<none>".into() };
    let text = |k: &str| parent.get(k).and_then(Value::as_str).unwrap_or_default();
    let mut shown = if text("group").is_empty() {
        text("resource").to_owned()
    } else {
        format!("{}.{}", text("resource"), text("group"))
    }
    .to_lowercase();
    if !text("namespace").is_empty() {
        shown = format!("{shown}/{}", text("namespace"));
    }
    format!("{shown}/{}", text("name"))
}

impl Strategy for IpAddress {
    fn name_problem(&self, name: &str) -> Option<String> {
        name_problem(name)
    }

    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        invalid("IPAddress", name, errors(object))
    }

    fn validate_update(&self, name: &str, object: &Value, old: &Value) -> Result<(), StatusError> {
        let mut errors = errors(object);
        if object.field("/spec/parentRef") != old.field("/spec/parentRef") {
            errors.push(FieldError::invalid_unshown("spec.parentRef", "field is immutable").to_string());
        }
        invalid("IPAddress", name, errors)
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                column(
                    "ParentRef",
                    "string",
                    "",
                    "ParentRef references the resource that an IPAddress is attached to. An IPAddress must reference a parent object.",
                    0,
                ),
                age_column(),
            ],
            |o, now| name_middle_age(o, vec![json!(parent(o))], now),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn addresses_are_named_validated_and_printed_as_upstream() {
        assert_eq!(name_problem("10.96.0.10"), None);
        assert_eq!(name_problem("fd00::1"), None);
        assert_eq!(name_problem("010.96.0.10").unwrap(), r#"ParseAddr("010.96.0.10"): unable to parse IP"#);
        assert_eq!(name_problem("fd00:0::1").unwrap(), "must be a canonical format IP address");
        let ip = json!({"metadata": {"name": "10.96.0.10"},
            "spec": {"parentRef": {"group": "", "resource": "services", "namespace": "default", "name": "web"}}});
        assert!(IpAddress.validate("10.96.0.10", &ip).is_ok());
        assert_eq!(parent(&ip), "services/default/web");
        assert_eq!(errors(&json!({"spec": {}})), ["spec.parentRef: Required value"]);
        assert_eq!(
            errors(&json!({"spec": {"parentRef": {"group": "Bad_Group"}}})),
            [
                "spec.parentRef.resource: Required value",
                "spec.parentRef.name: Required value",
                r#"spec.parentRef.group: Invalid value: "Bad_Group": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#,
            ]
        );
        let mut moved = ip.clone();
        moved["spec"]["parentRef"]["name"] = json!("other");
        let e = IpAddress.validate_update("10.96.0.10", &moved, &ip).unwrap_err();
        assert!(e.message.ends_with("spec.parentRef: Invalid value: field is immutable"), "{}", e.message);
    }
}
