//! EndpointSlice (pkg/registry/discovery/endpointslice): validated as
//! `ValidateEndpointSlice` (address type, ports, at least one address an endpoint) and
//! printed as kubectl prints it, both reading k8s-openapi's `EndpointSlice`. The API server
//! keeps `default/kubernetes`'s slice (`kubernetes_service`).

use k8s_openapi::api::discovery;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use podpass_api::validation::FieldError;
use serde_json::{Value, json};

use super::super::table::{age_column, column, name_column, name_middle_age};
use super::service::{first_of, port_errors, protocol_errors};
use super::types::{TypeOf, read};
use super::{Names, Printer, Resource, Strategy, invalid};
use crate::server::status::StatusError;

/// The EndpointSlice strategy.
pub(crate) struct EndpointSliceStrategy;

/// The resource.
pub(crate) const RESOURCE: Resource = Resource::stored(
    Names { group: "discovery.k8s.io", kind: "EndpointSlice", plural: "endpointslices", singular: "endpointslice" },
    &EndpointSliceStrategy,
    &TypeOf::<discovery::v1::EndpointSlice>::NEW,
);

/// `ValidateEndpointSlice`'s address type, ports and addresses.
fn errors(slice: &EndpointSlice) -> Vec<String> {
    const TYPES: [&str; 3] = ["IPv4", "IPv6", "FQDN"];
    let mut errors = Vec::new();
    match slice.address_type.as_str() {
        "" => errors.push(FieldError::required("addressType", "")),
        t if !TYPES.contains(&t) => errors.push(FieldError::not_supported("addressType", t, &TYPES)),
        _ => {}
    }
    for (i, port) in slice.ports.iter().flatten().enumerate() {
        if let Some(number) = port.port {
            port_errors(Some(number.into()), &format!("ports[{i}].port"), &mut errors);
        }
        protocol_errors(port.protocol.as_deref(), &format!("ports[{i}].protocol"), &mut errors);
    }
    for (i, endpoint) in slice.endpoints.iter().enumerate() {
        if endpoint.addresses.is_empty() {
            errors.push(FieldError::required(&format!("endpoints[{i}].addresses"), "must contain at least 1 address"));
        }
    }
    errors.into_iter().map(|e| e.to_string()).collect()
}

/// kubectl's AddressType, Ports and Endpoints cells.
fn cells(slice: &EndpointSlice) -> Vec<Value> {
    let ports: Vec<String> = slice.ports.iter().flatten().filter_map(|p| p.port).map(|p| p.to_string()).collect();
    let ports = if ports.is_empty() { "<unset>".to_owned() } else { ports.join(",") };
    let addresses = slice.endpoints.iter().flat_map(|e| e.addresses.iter().cloned()).collect();
    vec![json!(slice.address_type), json!(ports), json!(first_of(addresses))]
}

impl Strategy for EndpointSliceStrategy {
    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        invalid("EndpointSlice", name, errors(&read(object)?))
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                column("AddressType", "string", "", "The IP protocol family for this EndpointSlice", 0),
                column("Ports", "string", "", "The ports that this EndpointSlice covers", 0),
                column("Endpoints", "string", "", "Endpoints in this EndpointSlice", 0),
                age_column(),
            ],
            |o, now| {
                let cells = read(o).map(|slice| cells(&slice)).unwrap_or_else(|_| vec![json!(""); 3]);
                name_middle_age(o, cells, now)
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn slices_are_validated_and_printed_as_upstream() {
        let (_, cells) = EndpointSliceStrategy.printer().unwrap();
        let slice = json!({"metadata": {"name": "kubernetes"}, "addressType": "IPv4", "ports": [{"port": 6443}],
            "endpoints": [{"addresses": ["127.0.0.1"]}, {"addresses": ["a"]}, {"addresses": ["b"]}, {"addresses": ["c"]}]});
        assert_eq!(cells(&slice, 0)[1..4], [json!("IPv4"), json!("6443"), json!("127.0.0.1,a,b + 1 more...")]);
        assert!(EndpointSliceStrategy.validate("s", &slice).is_ok());
        let bad = json!({"addressType": "IPv5", "ports": [{"port": 0, "protocol": "ICMP"}], "endpoints": [{"addresses": []}]});
        assert_eq!(
            errors(&read(&bad).unwrap()),
            [
                r#"addressType: Unsupported value: "IPv5": supported values: "FQDN", "IPv4", "IPv6""#,
                "ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                r#"ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP""#,
                "endpoints[0].addresses: Required value: must contain at least 1 address",
            ]
        );
        assert_eq!(errors(&read(&json!({"endpoints": []})).unwrap()), ["addressType: Required value"]);
    }
}
