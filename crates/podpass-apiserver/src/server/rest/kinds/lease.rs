//! Lease (pkg/registry/coordination/lease): its table. Nodes' writes of their own lease
//! are NodeRestriction's (see `admission`).

use podpass_api::validation::FieldError;
use serde_json::{Value, json};

use super::super::table::{age_column, column, name_column, name_middle_age, or_none, text};
use super::{Printer, Strategy, invalid};
use crate::server::status::StatusError;

/// The lease strategy.
pub(crate) struct Lease;

/// Registered in the resource table.
pub(crate) static LEASE: Lease = Lease;

/// The resource.
pub(crate) const RESOURCE: super::Resource = super::Resource::stored(
    super::Names { group: "coordination.k8s.io", kind: "Lease", plural: "leases", singular: "lease" },
    &LEASE,
    &super::types::TypeOf::<k8s_openapi::api::coordination::v1::Lease>::NEW,
);

/// `ValidateLeaseSpec`: a positive duration, a non-negative count of transitions.
fn spec_errors(lease: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let number = |field: &str| lease.pointer(&format!("/spec/{field}")).and_then(Value::as_i64);
    if let Some(d) = number("leaseDurationSeconds").filter(|d| *d <= 0) {
        errors.push(FieldError::invalid_rendered("spec.leaseDurationSeconds", d.to_string(), "must be greater than 0"));
    }
    if let Some(t) = number("leaseTransitions").filter(|t| *t < 0) {
        let message = "must be greater than or equal to 0";
        errors.push(FieldError::invalid_rendered("spec.leaseTransitions", t.to_string(), message));
    }
    errors.into_iter().map(|e| e.to_string()).collect()
}

impl Strategy for Lease {
    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        invalid("Lease", name, spec_errors(object))
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![name_column(), column("Holder", "string", "", "The holder of the lease", 0), age_column()],
            |o, now| name_middle_age(o, vec![json!(or_none(text(o, "/spec/holderIdentity")))], now),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_transitions_are_bounded_as_upstream() {
        assert_eq!(
            spec_errors(&json!({"spec": {"leaseDurationSeconds": 40, "leaseTransitions": 0}})),
            Vec::<String>::new()
        );
        assert_eq!(
            spec_errors(&json!({"spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}})),
            [
                "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
                "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0"
            ]
        );
    }
}
