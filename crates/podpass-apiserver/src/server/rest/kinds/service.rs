//! Service and Endpoints (pkg/registry/core/service, core/endpoint): stored, defaulted,
//! validated and printed as upstream. A Service gets its cluster IP from
//! `--service-cluster-ip-range` as upstream's REST storage allocates it (`BeginCreate`:
//! the IP family fields, then a static or dynamic address, recorded as an `IPAddress`;
//! `service_ips`), and gives it back when deleted. The API server keeps `default/kubernetes`
//! of each, and of their discovery slice (`kubernetes_service`); the controller manager
//! fills other Services' endpoints from their ready pods. podpass has no kube-proxy: a
//! cluster IP routes nothing, it names the Service for the clients that read it.

use std::net::{IpAddr, Ipv4Addr};

use podpass_api::validation::FieldError;
use serde_json::{Value, json};

use super::super::table::{age_column, column, name_column, name_middle_age, or_none, text};
use super::{AfterWrite, BeginWrite, Printer, Reserved, Strategy, Written, invalid};
use crate::field::Field;
use crate::server::AppState;
use crate::server::service_ips::{self, AllocationError, Parent};
use crate::server::status::StatusError;
use crate::store::BoxFuture;

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
const FAMILIES: [&str; 2] = ["IPv4", "IPv6"];
const POLICIES: [&str; 3] = ["PreferDualStack", "RequireDualStack", "SingleStack"];
const NOT_AN_IP: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";
const EXTERNAL_NAME: &str = "ExternalName";

/// A list of strings of `object` at `pointer`.
fn strings(object: &Value, pointer: &str) -> Vec<String> {
    let listed = object.field(pointer).and_then(Value::as_array).into_iter().flatten();
    listed.map(|v| v.as_str().unwrap_or_default().to_owned()).collect()
}

/// `[]string{"a", "b"}`: a list value of a field error, as Go prints it.
fn go_strings(list: &[String]) -> String {
    format!("[]string{{{}}}", list.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", "))
}

fn service_type(service: &Value) -> &str {
    service.field("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP")
}

/// `isHeadlessService`: `clusterIPs` is `["None"]`.
fn headless(service: &Value) -> bool {
    strings(service, "/spec/clusterIPs") == ["None"]
}

/// `ValidateServiceClusterIPsRelatedFields` (single-stack IPv4 cluster): `clusterIP` and
/// `clusterIPs` agree, each address is one, families and policy are known values.
fn cluster_ip_errors(service: &Value, errors: &mut Vec<FieldError>) {
    let ips = strings(service, "/spec/clusterIPs");
    if service_type(service) == EXTERNAL_NAME {
        if !ips.is_empty() {
            errors.push(FieldError::forbidden("spec.clusterIPs", "may not be set for ExternalName services"));
        }
        return;
    }
    let ip = service.field("/spec/clusterIP").and_then(Value::as_str).unwrap_or_default();
    match ips.first() {
        None if !ip.is_empty() => errors.push(FieldError::required("spec.clusterIPs", "")),
        Some(first) if ip.is_empty() || first != ip => {
            let detail = if ip.is_empty() {
                "must be empty when `clusterIP` is not specified"
            } else {
                "first value must match `clusterIP`"
            };
            errors.push(FieldError::invalid_rendered("spec.clusterIPs", go_strings(&ips), detail));
        }
        _ => {}
    }
    let families = strings(service, "/spec/ipFamilies");
    for (i, family) in families.iter().enumerate() {
        let at = format!("spec.ipFamilies[{i}]");
        if !FAMILIES.contains(&family.as_str()) {
            errors.push(FieldError::not_supported(&at, family, &FAMILIES));
        }
        if families[..i].contains(family) {
            errors.push(FieldError::duplicate(&at, family));
        }
    }
    if let Some(policy) = service.field("/spec/ipFamilyPolicy").and_then(Value::as_str)
        && !POLICIES.contains(&policy)
    {
        errors.push(FieldError::not_supported("spec.ipFamilyPolicy", policy, &POLICIES));
    }
    let mut bad_ip = false;
    for (i, ip) in ips.iter().enumerate() {
        if i == 0 && ip == "None" {
            if ips.len() > 1 {
                bad_ip = true;
                errors.push(FieldError::invalid_rendered(
                    "spec.clusterIPs",
                    go_strings(&ips),
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        if ip.parse::<IpAddr>().is_err() {
            bad_ip = true;
            errors.push(FieldError::invalid(&format!("spec.clusterIPs[{i}]"), ip, NOT_AN_IP));
        }
    }
    if ips.len() > 2 {
        errors.push(FieldError::invalid_rendered("spec.clusterIPs", go_strings(&ips), "may only hold up to 2 values"));
    }
    if bad_ip || headless(service) {
        return;
    }
    let v6 = |ip: &str| ip.parse::<IpAddr>().is_ok_and(|ip| ip.is_ipv6());
    if ips.len() == 2 && v6(&ips[0]) == v6(&ips[1]) {
        let detail = "may specify no more than one IP for each IP family";
        errors.push(FieldError::invalid_rendered("spec.clusterIPs", go_strings(&ips), detail));
    }
    for (i, (ip, family)) in ips.iter().zip(&families).enumerate() {
        let expected = match family.as_str() {
            "IPv4" if v6(ip) => "IPv4",
            "IPv6" if !v6(ip) => "IPv6",
            _ => continue,
        };
        let detail = format!("expected an {expected} value as indicated by `ipFamilies[{i}]`");
        errors.push(FieldError::invalid(&format!("spec.clusterIPs[{i}]"), ip, detail));
    }
}

/// `initIPFamilyFields` on a single-stack IPv4 cluster: the policy (the old one on an
/// update; `RequireDualStack` for a headless Service without selector, else
/// `SingleStack`) and the families, refusing what the cluster cannot serve.
fn family_fields(service: &mut Value, old: Option<&Value>) -> Vec<FieldError> {
    if service_type(service) == EXTERNAL_NAME {
        return Vec::new();
    }
    let headless = headless(service);
    let selectorless = service.field("/spec/selector").and_then(Value::as_object).is_none_or(|s| s.is_empty());
    let policy = match service.field("/spec/ipFamilyPolicy").and_then(Value::as_str) {
        Some(policy) => policy.to_owned(),
        None => match old.and_then(|o| o.field("/spec/ipFamilyPolicy")).and_then(Value::as_str) {
            Some(policy) => policy.to_owned(),
            None if headless && selectorless => "RequireDualStack".to_owned(),
            None => "SingleStack".to_owned(),
        },
    };
    let ips = strings(service, "/spec/clusterIPs");
    let mut families = strings(service, "/spec/ipFamilies");
    let mut errors = Vec::new();
    for (i, ip) in ips.iter().enumerate().filter(|(_, ip)| *ip != "None") {
        if i < families.len() {
            continue;
        }
        match ip.parse::<IpAddr>() {
            Ok(IpAddr::V6(_)) => errors.push(FieldError::invalid_rendered(
                &format!("spec.clusterIPs[{i}]"),
                go_strings(&ips),
                "IPv6 is not configured on this cluster",
            )),
            _ => families.push("IPv4".into()),
        }
    }
    if errors.is_empty() {
        if headless && selectorless {
            // Headless and selectorless: any families, dual by default (upstream's one
            // exception on a single-stack cluster).
            if families.is_empty() {
                families.push("IPv4".into());
            }
            if families.len() < 2 && policy != "SingleStack" {
                families.push(if families[0] == "IPv4" { "IPv6" } else { "IPv4" }.into());
            }
        } else {
            if policy == "RequireDualStack" {
                errors.push(FieldError::invalid(
                    "spec.ipFamilyPolicy",
                    &policy,
                    "this cluster is not configured for dual-stack services",
                ));
            }
            for (i, family) in families.iter().enumerate().filter(|(_, f)| *f != "IPv4") {
                errors.push(FieldError::invalid(
                    &format!("spec.ipFamilies[{i}]"),
                    family,
                    "not configured on this cluster",
                ));
            }
            if families.is_empty() {
                families.push("IPv4".into());
            }
        }
    }
    if let Some(spec) = service.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("ipFamilyPolicy".into(), json!(policy));
        spec.insert("ipFamilies".into(), json!(families));
    }
    errors
}

/// What a write of `service` must allocate: `None` when it needs no address or keeps the
/// one it has; `Some(requested)` otherwise (`None` inside: any address).
fn to_allocate(service: &Value, old: Option<&Value>) -> Option<Option<Ipv4Addr>> {
    if service_type(service) == EXTERNAL_NAME || headless(service) {
        return None;
    }
    if old.is_some_and(|old| service_type(old) != EXTERNAL_NAME && !service_ips::held_by(old).is_empty()) {
        return None;
    }
    let ips = strings(service, "/spec/clusterIPs");
    Some(ips.first().and_then(|ip| ip.parse().ok()))
}

/// `BeginCreate`/`BeginUpdate`: the family fields, then the address.
async fn allocate(state: &AppState, write: BeginWrite<'_>, service: &mut Value) -> Result<Reserved, StatusError> {
    let name = write.name;
    let mut errors = Vec::new();
    cluster_ip_errors(service, &mut errors);
    if errors.is_empty() {
        errors = family_fields(service, write.old);
    }
    invalid("Service", name, errors.into_iter().map(|e| e.to_string()).collect())?;
    let Some(requested) = to_allocate(service, write.old) else { return Ok(Reserved::default()) };
    let parent = Parent { namespace: write.namespace.unwrap_or_default(), name };
    let (ip, held) = match service_ips::allocate(state, parent, requested, write.dry_run).await {
        Ok(allocated) => allocated,
        Err(e) => {
            let Some(ip) = requested else {
                return Err(StatusError::internal(format!("failed to allocate a serviceIP: {e}")));
            };
            if let AllocationError::Store(e) = &e {
                tracing::warn!(error = %e, "service IP allocation failed in the store");
            }
            let ips = strings(service, "/spec/clusterIPs");
            let error = FieldError::invalid_rendered(
                "spec.clusterIPs",
                go_strings(&ips),
                format!("failed to allocate IP {ip}: {e}"),
            );
            return invalid("Service", name, vec![error.to_string()]).map(|()| Reserved::default());
        }
    };
    if let Some(spec) = service.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("clusterIP".into(), json!(ip.to_string()));
        spec.insert("clusterIPs".into(), json!([ip.to_string()]));
    }
    Ok(Reserved(held.into_iter().collect()))
}

/// Gives back what `service` held and `kept` (its replacement) does not.
async fn release(state: &AppState, namespace: &str, name: &str, service: &Value, kept: Option<&Value>) {
    let kept = kept.map(service_ips::held_by).unwrap_or_default();
    for ip in service_ips::held_by(service).into_iter().filter(|ip| !kept.contains(ip)) {
        service_ips::release(state, Parent { namespace, name }, ip).await;
    }
}

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
    cluster_ip_errors(service, &mut errors);
    errors.into_iter().map(|e| e.to_string()).collect()
}

impl Strategy for Service {
    /// Upstream's storage sets `ReturnDeletedObject`.
    fn returns_deleted_object(&self) -> bool {
        true
    }

    /// `SetDefaults_Service`: type ClusterIP, session affinity None, each port TCP with its
    /// own number as target.
    fn default(&self, _name: &str, object: &mut Value) -> Result<(), StatusError> {
        let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
        spec.entry("type").or_insert(json!("ClusterIP"));
        spec.entry("sessionAffinity").or_insert(json!("None"));
        if spec.get("type").and_then(Value::as_str) != Some(EXTERNAL_NAME) {
            spec.entry("internalTrafficPolicy").or_insert(json!("Cluster"));
        }
        // The v1 conversion keeps `clusterIP` and `clusterIPs[0]` one value.
        let ip = spec.get("clusterIP").and_then(Value::as_str).filter(|ip| !ip.is_empty()).map(str::to_owned);
        let first = spec.get("clusterIPs").and_then(Value::as_array).and_then(|l| l.first()).cloned();
        match (ip, first) {
            (Some(ip), None) => {
                spec.insert("clusterIPs".into(), json!([ip]));
            }
            (None, Some(first)) => {
                spec.insert("clusterIP".into(), first);
            }
            _ => {}
        }
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

    /// `patchAllocatedValues`: an update that names no address keeps the one allocated;
    /// `dropTypeDependentFields`: one that turns the Service into ExternalName without
    /// touching its address drops it (released once stored).
    fn prepare_for_update(&self, object: &mut Value, old: &Value) {
        let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else { return };
        let external = spec.get("type").and_then(Value::as_str) == Some(EXTERNAL_NAME);
        let old_external = service_type(old) == EXTERNAL_NAME;
        let unset =
            |v: Option<&Value>| v.is_none_or(|v| v.as_str() == Some("") || v.as_array().is_some_and(Vec::is_empty));
        if !external && !old_external {
            if unset(spec.get("clusterIP")) && unset(spec.get("clusterIPs")) {
                for field in ["clusterIP", "clusterIPs"] {
                    if let Some(v) = old.field(&format!("/spec/{field}")) {
                        spec.insert(field.into(), v.clone());
                    }
                }
            }
            for field in ["ipFamilies", "ipFamilyPolicy"] {
                if unset(spec.get(field))
                    && let Some(v) = old.field(&format!("/spec/{field}"))
                {
                    spec.insert(field.into(), v.clone());
                }
            }
        } else if external && !old_external {
            let same = spec.get("clusterIP") == old.field("/spec/clusterIP") || unset(spec.get("clusterIP"));
            if same {
                for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
                    spec.remove(field);
                }
            }
        }
    }

    /// `ValidateServiceUpdate`: the primary address may not change once set (unless the
    /// Service turns to or from ExternalName).
    fn validate_update(&self, name: &str, object: &Value, old: &Value) -> Result<(), StatusError> {
        let mut errors = service_errors(object);
        let (new_ips, old_ips) = (strings(object, "/spec/clusterIPs"), strings(old, "/spec/clusterIPs"));
        let exempt = service_type(object) == EXTERNAL_NAME
            || service_type(old) == EXTERNAL_NAME
            || (headless(object) && headless(old))
            || old_ips.is_empty();
        if !exempt && new_ips.first() != old_ips.first() {
            let error = if new_ips.is_empty() {
                FieldError::invalid_rendered(
                    "spec.clusterIPs[0]",
                    go_strings(&new_ips),
                    "primary clusterIP can not be unset",
                )
            } else {
                FieldError::invalid_rendered("spec.clusterIPs[0]", go_strings(&new_ips), "may not change once set")
            };
            errors.push(error.to_string());
        }
        invalid("Service", name, errors)
    }

    fn begin_write<'a>(
        &'a self,
        state: &'a AppState,
        write: BeginWrite<'a>,
        object: &'a mut Value,
    ) -> BoxFuture<'a, Result<Reserved, StatusError>> {
        Box::pin(allocate(state, write, object))
    }

    /// A deleted Service's address is released, as is one an update dropped.
    fn after_write<'a>(&'a self, state: &'a AppState, write: AfterWrite<'a>) -> BoxFuture<'a, Result<(), StatusError>> {
        Box::pin(async move {
            let namespace = write.object.field("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
            match (write.written, write.old) {
                (Written::Deleted, _) => release(state, namespace, write.name, write.object, None).await,
                (Written::Updated, Some(old)) => release(state, namespace, write.name, old, Some(write.object)).await,
                _ => {}
            }
            Ok(())
        })
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
        let mut headless = json!({"spec": {"clusterIP": "None"}});
        SERVICE.default("h", &mut headless).unwrap();
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]), "clusterIPs follows clusterIP");
        assert!(service_errors(&headless).is_empty(), "headless");
        let old = json!({"spec": {"clusterIP": "10.96.0.1", "ports": [{"port": 443}]}});
        let moved = json!({"spec": {"clusterIP": "10.96.0.2", "ports": [{"port": 443}]}});
        let (mut old, mut moved) = (old, moved);
        SERVICE.default("kubernetes", &mut old).unwrap();
        SERVICE.default("kubernetes", &mut moved).unwrap();
        let e = SERVICE.validate_update("kubernetes", &moved, &old).unwrap_err();
        assert!(
            e.message.ends_with(r#"spec.clusterIPs[0]: Invalid value: []string{"10.96.0.2"}: may not change once set"#),
            "{}",
            e.message
        );
    }

    fn messages(errors: Vec<FieldError>) -> Vec<String> {
        errors.into_iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn cluster_ips_are_validated_as_upstreams_related_fields() {
        let check = |spec: Value| {
            let mut errors = Vec::new();
            cluster_ip_errors(&json!({"spec": spec}), &mut errors);
            messages(errors)
        };
        assert!(
            check(json!({"clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5"], "ipFamilies": ["IPv4"]})).is_empty()
        );
        assert_eq!(
            check(json!({"clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.6"]})),
            [r#"spec.clusterIPs: Invalid value: []string{"10.96.0.6"}: first value must match `clusterIP`"#]
        );
        assert_eq!(
            check(
                json!({"clusterIP": "nope", "clusterIPs": ["nope"], "ipFamilyPolicy": "Triple", "ipFamilies": ["IPv5"]})
            ),
            [
                r#"spec.ipFamilies[0]: Unsupported value: "IPv5": supported values: "IPv4", "IPv6""#,
                r#"spec.ipFamilyPolicy: Unsupported value: "Triple": supported values: "PreferDualStack", "RequireDualStack", "SingleStack""#,
                r#"spec.clusterIPs[0]: Invalid value: "nope": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"#,
            ]
        );
        assert_eq!(
            check(json!({"clusterIP": "None", "clusterIPs": ["None", "10.96.0.1"]})),
            [
                r#"spec.clusterIPs: Invalid value: []string{"None", "10.96.0.1"}: 'None' must be the first and only value"#
            ]
        );
        assert_eq!(
            check(json!({"clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5"], "ipFamilies": ["IPv6"]})),
            [
                "spec.clusterIPs[0]: Invalid value: \"10.96.0.5\": expected an IPv6 value as indicated by `ipFamilies[0]`"
            ]
        );
        assert_eq!(
            check(json!({"type": "ExternalName", "clusterIPs": ["10.96.0.5"]})),
            ["spec.clusterIPs: Forbidden: may not be set for ExternalName services"]
        );
    }

    #[test]
    fn family_fields_are_set_as_on_a_single_stack_cluster() {
        let fields = |spec: Value| {
            let mut service = json!({"spec": spec});
            SERVICE.default("s", &mut service).unwrap();
            let errors = messages(family_fields(&mut service, None));
            (service["spec"]["ipFamilyPolicy"].clone(), service["spec"]["ipFamilies"].clone(), errors)
        };
        let ports = json!([{"port": 80}]);
        assert_eq!(fields(json!({"ports": ports})), (json!("SingleStack"), json!(["IPv4"]), vec![]));
        // Headless without a selector: dual by default, the one exception.
        assert_eq!(fields(json!({"clusterIP": "None"})), (json!("RequireDualStack"), json!(["IPv4", "IPv6"]), vec![]));
        assert_eq!(
            fields(json!({"clusterIP": "None", "selector": {"app": "web"}})),
            (json!("SingleStack"), json!(["IPv4"]), vec![])
        );
        let (_, _, errors) =
            fields(json!({"ports": ports, "ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv6"]}));
        assert_eq!(
            errors,
            [
                r#"spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services"#,
                r#"spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster"#,
            ]
        );
        let (_, _, errors) = fields(json!({"ports": ports, "clusterIP": "fd00::10"}));
        assert_eq!(
            errors,
            [r#"spec.clusterIPs[0]: Invalid value: []string{"fd00::10"}: IPv6 is not configured on this cluster"#]
        );
        // An update keeps the policy it had.
        let mut service = json!({"spec": {"ports": ports}});
        family_fields(&mut service, Some(&json!({"spec": {"ipFamilyPolicy": "PreferDualStack"}})));
        assert_eq!(service["spec"]["ipFamilyPolicy"], "PreferDualStack");
    }

    #[test]
    fn updates_keep_the_allocated_address_and_external_name_drops_it() {
        let old = json!({"spec": {"type": "ClusterIP", "clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "ports": [{"port": 80}]}});
        // A PUT of the manifest as written (no address) keeps it.
        let mut put = json!({"spec": {"ports": [{"port": 81}]}});
        SERVICE.prepare_for_update(&mut put, &old);
        assert_eq!(put["spec"]["clusterIPs"], json!(["10.96.0.5"]));
        assert_eq!(put["spec"]["ipFamilyPolicy"], "SingleStack");
        assert!(to_allocate(&put, Some(&old)).is_none(), "kept, not allocated again");
        let mut external = json!({"spec": {"type": "ExternalName", "externalName": "example.com",
            "clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5"]}});
        SERVICE.prepare_for_update(&mut external, &old);
        assert!(external["spec"].get("clusterIP").is_none() && external["spec"].get("ipFamilies").is_none());
        assert!(SERVICE.validate_update("s", &external, &old).is_ok());
        // From ExternalName to ClusterIP: allocated then.
        let back = json!({"spec": {"type": "ClusterIP", "ports": [{"port": 80}]}});
        assert_eq!(to_allocate(&back, Some(&external)), Some(None));
        assert_eq!(
            to_allocate(&json!({"spec": {"clusterIP": "10.96.0.9", "clusterIPs": ["10.96.0.9"]}}), None),
            Some(Some(Ipv4Addr::new(10, 96, 0, 9)))
        );
        assert!(to_allocate(&json!({"spec": {"clusterIP": "None", "clusterIPs": ["None"]}}), None).is_none());
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
