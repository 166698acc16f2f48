//! Service and Endpoints (pkg/registry/core/service, core/endpoint): stored, defaulted,
//! validated and printed as upstream. The API server keeps `default/kubernetes` of each,
//! and of their discovery slice (`kubernetes_service`); podpass has no
//! kube-proxy, so other Services get no cluster IP and route nothing — they exist for the
//! clients that read them.

use podpass_api::validation::FieldError;
use serde_json::{Value, json};

use super::super::table::{age_column, column, name_column, name_middle_age, or_none, text};
use super::{Printer, Strategy, invalid};
use crate::field::Field;
use crate::server::status::StatusError;

/// The Service strategy.
pub(crate) struct Service;
/// Registered in the resource table.
pub(crate) static SERVICE: Service = Service;
/// The Endpoints strategy.
pub(crate) struct Endpoints;
/// Registered in the resource table.
pub(crate) static ENDPOINTS: Endpoints = Endpoints;

/// The Service resource.
pub(crate) const SERVICE_RESOURCE: super::Resource = super::Resource::stored(
    super::Names { group: "", kind: "Service", plural: "services", singular: "service" },
    &SERVICE,
    &super::types::TypeOf::<k8s_openapi::api::core::v1::Service>::NEW,
)
.with_short_names(&["svc"])
.in_categories(&["all"]);

/// The Endpoints resource.
pub(crate) const ENDPOINTS_RESOURCE: super::Resource = super::Resource::stored(
    super::Names { group: "", kind: "Endpoints", plural: "endpoints", singular: "endpoints" },
    &ENDPOINTS,
    &super::types::TypeOf::<k8s_openapi::api::core::v1::Endpoints>::NEW,
)
.with_short_names(&["ep"]);

const SERVICE_TYPES: [&str; 4] = ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";

/// A port number's rules (`ValidatePortNum`).
pub(super) fn port_errors(port: Option<i64>, path: &str, errors: &mut Vec<FieldError>) {
    match port {
        None => errors.push(FieldError::required(path, "")),
        Some(p) if !(1..=65535).contains(&p) => {
            errors.push(FieldError::invalid_rendered(path, p.to_string(), PORT_RANGE))
        }
        Some(_) => {}
    }
}

/// A port's protocol, one upstream supports.
pub(super) fn protocol_errors(protocol: Option<&str>, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(p) = protocol
        && !PROTOCOLS.contains(&p)
    {
        errors.push(FieldError::not_supported(path, p, &PROTOCOLS));
    }
}

/// `ValidateService`'s rules on type and ports.
fn service_errors(service: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let kind = service.field("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP");
    if !SERVICE_TYPES.contains(&kind) {
        errors.push(FieldError::not_supported("spec.type", kind, &SERVICE_TYPES));
    }
    let headless = service.field("/spec/clusterIP").and_then(Value::as_str) == Some("None");
    let ports = service.field("/spec/ports").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if kind == "ExternalName" {
        if service.field("/spec/externalName").and_then(Value::as_str).is_none_or(str::is_empty) {
            errors.push(FieldError::required("spec.externalName", ""));
        }
    } else if ports.is_empty() && !headless {
        errors.push(FieldError::required("spec.ports", ""));
    }
    let mut names = std::collections::HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        let name = port.get("name").and_then(Value::as_str).unwrap_or_default();
        if ports.len() > 1 && name.is_empty() {
            errors.push(FieldError::required(&format!("{at}.name"), ""));
        } else if !name.is_empty() && !names.insert(name) {
            errors.push(FieldError::duplicate(&format!("{at}.name"), name));
        }
        port_errors(port.get("port").and_then(Value::as_i64), &format!("{at}.port"), &mut errors);
        protocol_errors(port.get("protocol").and_then(Value::as_str), &format!("{at}.protocol"), &mut errors);
    }
    errors.into_iter().map(|e| e.to_string()).collect()
}

impl Strategy for Service {
    /// `SetDefaults_Service`: type ClusterIP, session affinity None, each port TCP with its
    /// own number as target.
    fn default(&self, _name: &str, object: &mut Value) -> Result<(), StatusError> {
        let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
        spec.entry("type").or_insert(json!("ClusterIP"));
        spec.entry("sessionAffinity").or_insert(json!("None"));
        for port in spec.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
            let Some(port) = port.as_object_mut() else { continue };
            port.entry("protocol").or_insert(json!("TCP"));
            if let Some(number) = port.get("port").cloned() {
                port.entry("targetPort").or_insert(number);
            }
        }
        Ok(())
    }

    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        invalid("Service", name, service_errors(object))
    }

    fn validate_update(&self, name: &str, object: &Value, old: &Value) -> Result<(), StatusError> {
        let mut errors = service_errors(object);
        let ip = |o: &Value| o.field("/spec/clusterIP").and_then(Value::as_str).unwrap_or_default().to_owned();
        if !ip(old).is_empty() && ip(object) != ip(old) {
            errors.push(FieldError::invalid("spec.clusterIP", &ip(object), "field is immutable").to_string());
        }
        invalid("Service", name, errors)
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                column("Type", "string", "", "type determines how the Service is exposed.", 0),
                column("Cluster-IP", "string", "", "clusterIP is the IP address of the service.", 0),
                column(
                    "External-IP",
                    "string",
                    "",
                    "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
                    0,
                ),
                column("Port(s)", "string", "", "The list of ports that are exposed by this service.", 0),
                age_column(),
                column(
                    "Selector",
                    "string",
                    "",
                    "Route service traffic to pods with label keys and values matching this selector.",
                    1,
                ),
            ],
            |o, now| {
                let mut cells = name_middle_age(
                    o,
                    vec![
                        json!(text(o, "/spec/type")),
                        json!(or_none(text(o, "/spec/clusterIP"))),
                        json!(external_ips(o)),
                        json!(or_none(&service_ports(o))),
                    ],
                    now,
                );
                cells.push(json!(or_none(&selector(o.field("/spec/selector")))));
                cells
            },
        ))
    }
}

/// printService's External-IP: the external IPs, `<pending>` for a LoadBalancer without
/// ingress, the external name for ExternalName, `<none>` otherwise.
fn external_ips(o: &Value) -> String {
    let listed: Vec<&str> = o
        .field("/spec/externalIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    match text(o, "/spec/type") {
        "ExternalName" => text(o, "/spec/externalName").to_owned(),
        "LoadBalancer" if listed.is_empty() => "<pending>".into(),
        _ if !listed.is_empty() => listed.join(","),
        _ => "<none>".into(),
    }
}

/// `443/TCP`, `80:30080/TCP` for a node port, joined by commas.
fn service_ports(o: &Value) -> String {
    let ports = o.field("/spec/ports").and_then(Value::as_array).into_iter().flatten();
    ports
        .map(|p| {
            let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            let port = p.get("port").and_then(Value::as_i64).unwrap_or_default();
            match p.get("nodePort").and_then(Value::as_i64) {
                Some(node) if node > 0 => format!("{port}:{node}/{protocol}"),
                _ => format!("{port}/{protocol}"),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn selector(map: Option<&Value>) -> String {
    let pairs = map.and_then(Value::as_object).into_iter().flatten();
    pairs.map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect::<Vec<_>>().join(",")
}

/// At most this many endpoints are printed, then `+ N more...` (upstream's printers).
const PRINTED_ENDPOINTS: usize = 3;

/// The first endpoints, then `+ N more...`; `<none>` for none.
pub(super) fn first_of(items: Vec<String>) -> String {
    if items.is_empty() {
        return "<none>".into();
    }
    let more = items.len().saturating_sub(PRINTED_ENDPOINTS);
    let shown = items.into_iter().take(PRINTED_ENDPOINTS).collect::<Vec<_>>().join(",");
    if more > 0 { format!("{shown} + {more} more...") } else { shown }
}

/// `ValidateEndpoints`' port and address rules.
fn endpoints_errors(endpoints: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let subsets = endpoints.get("subsets").and_then(Value::as_array).into_iter().flatten();
    for (i, subset) in subsets.enumerate() {
        for (j, port) in subset.get("ports").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let at = format!("subsets[{i}].ports[{j}]");
            port_errors(port.get("port").and_then(Value::as_i64), &format!("{at}.port"), &mut errors);
            protocol_errors(port.get("protocol").and_then(Value::as_str), &format!("{at}.protocol"), &mut errors);
        }
        for (j, address) in subset.get("addresses").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let ip = address.get("ip").and_then(Value::as_str).unwrap_or_default();
            if ip.parse::<std::net::IpAddr>().is_err() {
                errors.push(FieldError::invalid(
                    &format!("subsets[{i}].addresses[{j}].ip"),
                    ip,
                    "must be a valid IP address",
                ));
            }
        }
    }
    errors.into_iter().map(|e| e.to_string()).collect()
}

impl Strategy for Endpoints {
    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        invalid("Endpoints", name, endpoints_errors(object))
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![name_column(), column("Endpoints", "string", "", "Endpoints of the service", 0), age_column()],
            |o, now| {
                let mut shown = Vec::new();
                for subset in o.get("subsets").and_then(Value::as_array).into_iter().flatten() {
                    let ports: Vec<i64> = subset
                        .get("ports")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|p| p.get("port").and_then(Value::as_i64))
                        .collect();
                    for address in subset.get("addresses").and_then(Value::as_array).into_iter().flatten() {
                        let ip = address.get("ip").and_then(Value::as_str).unwrap_or_default();
                        if ports.is_empty() {
                            shown.push(ip.to_owned());
                        }
                        shown.extend(ports.iter().map(|p| format!("{ip}:{p}")));
                    }
                }
                name_middle_age(o, vec![json!(first_of(shown))], now)
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn services_are_defaulted_and_validated_as_upstream() {
        let mut svc = json!({"spec": {"ports": [{"port": 443, "name": "https"}]}});
        SERVICE.default("s", &mut svc).unwrap();
        assert_eq!(svc["spec"]["type"], "ClusterIP");
        assert_eq!(
            svc["spec"]["ports"][0],
            json!({"port": 443, "name": "https", "protocol": "TCP", "targetPort": 443})
        );
        assert!(SERVICE.validate("s", &svc).is_ok());
        let bad = json!({"spec": {"type": "Magic", "ports": [{"port": 0}, {"port": 80, "protocol": "ICMP"}]}});
        assert_eq!(
            service_errors(&bad),
            [
                r#"spec.type: Unsupported value: "Magic": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort""#,
                "spec.ports[0].name: Required value",
                "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.ports[1].name: Required value",
                r#"spec.ports[1].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP""#,
            ]
        );
        assert_eq!(service_errors(&json!({"spec": {}})), ["spec.ports: Required value"]);
        assert!(service_errors(&json!({"spec": {"clusterIP": "None"}})).is_empty(), "headless");
        let old = json!({"spec": {"clusterIP": "10.96.0.1", "ports": [{"port": 443}]}});
        let moved = json!({"spec": {"clusterIP": "10.96.0.2", "ports": [{"port": 443}]}});
        let e = SERVICE.validate_update("kubernetes", &moved, &old).unwrap_err();
        assert!(
            e.message.ends_with(r#"spec.clusterIP: Invalid value: "10.96.0.2": field is immutable"#),
            "{}",
            e.message
        );
    }

    #[test]
    fn rows_read_as_kubectl_prints_them() {
        let (_, cells) = SERVICE.printer().unwrap();
        let svc = json!({"metadata": {"name": "kubernetes"}, "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.1",
            "ports": [{"port": 443, "protocol": "TCP"}]}});
        assert_eq!(cells(&svc, 0)[1..5], [json!("ClusterIP"), json!("10.96.0.1"), json!("<none>"), json!("443/TCP")]);
        let (_, cells) = ENDPOINTS.printer().unwrap();
        let ep = json!({"metadata": {"name": "kubernetes"}, "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": 6443}]}]});
        assert_eq!(cells(&ep, 0)[1], json!("127.0.0.1:6443"));
    }
}
