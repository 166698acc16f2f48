//! Container probes as core/v1 defaults and validates them: `SetDefaults_Probe` (1 s
//! timeout, 10 s period, thresholds 1 and 3), `SetDefaults_HTTPGetAction` (path `/`,
//! scheme `HTTP`) and gRPC's `service: ""`; `validateLivenessProbe`,
//! `validateReadinessProbe`, `validateStartupProbe`, `validateProbe` and `validateHandler`
//! (exactly one handler, its port a number or a port name), and the init-container rule
//! (no probes unless it is a sidecar, `restartPolicy: Always`).

use podpass_api::validation::FieldError;
use serde_json::{Map, Value, json};

/// The probes of a container, with how `validate…Probe` names them.
const PROBES: [(&str, ProbeKind); 3] = [
    ("livenessProbe", ProbeKind::Liveness),
    ("readinessProbe", ProbeKind::Readiness),
    ("startupProbe", ProbeKind::Startup),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

/// The handlers of a probe, in the order `validateHandler` counts them.
const HANDLERS: [&str; 4] = ["exec", "httpGet", "tcpSocket", "grpc"];
/// `validation.IsValidPortNum`'s message.
const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";
/// What `validateInitContainers` says of a probe on a plain init container.
const NOT_FOR_INIT: &str = "may not be set for init containers without restartPolicy=Always";

/// Defaults every probe of container `c` (a JSON object) as the scheme does.
pub(super) fn default_container(c: &mut Map<String, Value>) {
    for (field, _) in PROBES {
        let Some(probe) = c.get_mut(field).and_then(Value::as_object_mut) else { continue };
        for (key, value) in
            [("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)]
        {
            // 0 is Go's zero value: unset, so defaulted too.
            let slot = probe.entry(key).or_insert(Value::Null);
            if slot.is_null() || slot.as_i64() == Some(0) {
                *slot = json!(value);
            }
        }
        if let Some(http) = probe.get_mut("httpGet").and_then(Value::as_object_mut) {
            for (key, value) in [("path", "/"), ("scheme", "HTTP")] {
                let slot = http.entry(key).or_insert(Value::Null);
                if slot.is_null() || slot.as_str() == Some("") {
                    *slot = json!(value);
                }
            }
        }
        if let Some(grpc) = probe.get_mut("grpc").and_then(Value::as_object_mut) {
            grpc.entry("service").or_insert(json!(""));
        }
    }
}

/// The probe errors of container `c` at `at`; `init`: an init container.
pub(super) fn container_errors(c: &Value, at: &str, init: bool, errors: &mut Vec<FieldError>) {
    let sidecar = c.get("restartPolicy").and_then(Value::as_str) == Some("Always");
    for (field, kind) in PROBES {
        let Some(probe) = c.get(field).filter(|p| !p.is_null()) else { continue };
        let path = format!("{at}.{field}");
        if init && !sidecar {
            errors.push(FieldError::forbidden(&path, NOT_FOR_INIT));
            continue;
        }
        probe_errors(probe, &path, kind, errors);
    }
}

fn probe_errors(probe: &Value, at: &str, kind: ProbeKind, errors: &mut Vec<FieldError>) {
    let int = |key: &str| probe.get(key).and_then(Value::as_i64);
    match kind {
        ProbeKind::Readiness if probe.get("terminationGracePeriodSeconds").is_some_and(|v| !v.is_null()) => {
            let shown = probe.get("terminationGracePeriodSeconds").map(Value::to_string).unwrap_or_default();
            errors.push(FieldError::invalid_rendered(
                &format!("{at}.terminationGracePeriodSeconds"),
                shown,
                "must not be set for readinessProbes",
            ));
        }
        _ => {}
    }
    handler_errors(probe, at, errors);
    for key in ["initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"] {
        if let Some(n) = int(key).filter(|n| *n < 0) {
            errors.push(FieldError::invalid_rendered(
                &format!("{at}.{key}"),
                n.to_string(),
                "must be greater than or equal to 0",
            ));
        }
    }
    if let Some(n) = int("terminationGracePeriodSeconds").filter(|n| *n <= 0) {
        errors.push(FieldError::invalid_rendered(
            &format!("{at}.terminationGracePeriodSeconds"),
            n.to_string(),
            "must be greater than 0",
        ));
    }
    // validateLivenessProbe / validateStartupProbe: after the probe's own rules.
    if matches!(kind, ProbeKind::Liveness | ProbeKind::Startup)
        && let Some(n) = int("successThreshold").filter(|n| *n != 1)
    {
        errors.push(FieldError::invalid_rendered(&format!("{at}.successThreshold"), n.to_string(), "must be 1"));
    }
}

/// `validateHandler`: exactly one handler, each valid.
fn handler_errors(probe: &Value, at: &str, errors: &mut Vec<FieldError>) {
    let mut seen = 0;
    for name in HANDLERS {
        let Some(handler) = probe.get(name).filter(|h| !h.is_null()) else { continue };
        let path = format!("{at}.{name}");
        if seen > 0 {
            errors.push(FieldError::forbidden(&path, "may not specify more than 1 handler type"));
            continue;
        }
        seen += 1;
        match name {
            "exec" => {
                if handler.get("command").and_then(Value::as_array).is_none_or(Vec::is_empty) {
                    errors.push(FieldError::required(&format!("{path}.command"), ""));
                }
            }
            "httpGet" => {
                if handler.get("path").and_then(Value::as_str).is_none_or(str::is_empty) {
                    errors.push(FieldError::required(&format!("{path}.path"), ""));
                }
                port_errors(handler.get("port"), &format!("{path}.port"), errors);
                let scheme = handler.get("scheme").and_then(Value::as_str).unwrap_or_default();
                if !["HTTP", "HTTPS"].contains(&scheme) {
                    errors.push(FieldError::not_supported(&format!("{path}.scheme"), scheme, &["HTTP", "HTTPS"]));
                }
                for header in handler.get("httpHeaders").and_then(Value::as_array).into_iter().flatten() {
                    let name = header.get("name").and_then(Value::as_str).unwrap_or_default();
                    if !is_http_header_name(name) {
                        errors.push(FieldError::invalid(
                            &format!("{path}.httpHeaders"),
                            name,
                            "a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')",
                        ));
                    }
                }
            }
            "tcpSocket" => port_errors(handler.get("port"), &format!("{path}.port"), errors),
            _ => port_errors(handler.get("port"), &format!("{path}.port"), errors),
        }
    }
    if seen == 0 {
        errors.push(FieldError::required(at, "must specify a handler type"));
    }
}

/// `IsHTTPHeaderName`: `[-A-Za-z0-9]+`.
fn is_http_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// `ValidatePortNumOrName`.
fn port_errors(port: Option<&Value>, path: &str, errors: &mut Vec<FieldError>) {
    match port {
        Some(Value::Number(n)) => {
            if !n.as_i64().is_some_and(|p| (1..=65535).contains(&p)) {
                errors.push(FieldError::invalid_rendered(path, n.to_string(), PORT_RANGE));
            }
        }
        Some(Value::String(name)) if !name.is_empty() => {
            for message in port_name_errors(name) {
                errors.push(FieldError::invalid(path, name, message));
            }
        }
        _ => errors.push(FieldError::required(path, "")),
    }
}

/// `IsValidPortName`'s messages (an IANA_SVC_NAME).
pub(crate) fn port_name_errors(name: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    if name.len() > 15 {
        out.push("must be no more than 15 characters");
    }
    if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        out.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        out.push("must contain at least one letter (a-z)");
    }
    if name.contains("--") {
        out.push("must not contain consecutive hyphens");
    }
    if name.starts_with('-') || name.ends_with('-') {
        out.push("must not begin or end with a hyphen");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors_of(c: Value, init: bool) -> Vec<String> {
        let mut errors = Vec::new();
        container_errors(&c, "spec.containers[0]", init, &mut errors);
        errors.into_iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn probes_get_upstreams_defaults() {
        let mut c = json!({"name": "c", "livenessProbe": {"httpGet": {"port": 8080}, "periodSeconds": 0},
            "readinessProbe": {"grpc": {"port": 9000}, "failureThreshold": 5}, "startupProbe": {"exec": {"command": ["true"]}}});
        default_container(c.as_object_mut().unwrap());
        assert_eq!(
            c["livenessProbe"],
            json!({"httpGet": {"port": 8080, "path": "/", "scheme": "HTTP"}, "periodSeconds": 10,
                "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(c["readinessProbe"]["failureThreshold"], 5, "a set field is kept");
        assert_eq!(c["readinessProbe"]["grpc"]["service"], "");
        assert_eq!(c["startupProbe"]["periodSeconds"], 10);
    }

    #[test]
    fn a_probe_names_exactly_one_valid_handler() {
        assert_eq!(
            errors_of(json!({"readinessProbe": {"periodSeconds": 1}}), false),
            ["spec.containers[0].readinessProbe: Required value: must specify a handler type"]
        );
        assert_eq!(
            errors_of(json!({"readinessProbe": {"exec": {"command": ["x"]}, "tcpSocket": {"port": 1}}}), false),
            ["spec.containers[0].readinessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type"]
        );
        assert_eq!(
            errors_of(json!({"readinessProbe": {"exec": {}}}), false),
            ["spec.containers[0].readinessProbe.exec.command: Required value"]
        );
        assert_eq!(
            errors_of(
                json!({"livenessProbe": {"httpGet": {"path": "", "port": 0, "scheme": "FTP",
                "httpHeaders": [{"name": "X Bad", "value": "v"}]}}}),
                false
            ),
            [
                "spec.containers[0].livenessProbe.httpGet.path: Required value",
                "spec.containers[0].livenessProbe.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.containers[0].livenessProbe.httpGet.scheme: Unsupported value: \"FTP\": supported values: \"HTTP\", \"HTTPS\"",
                "spec.containers[0].livenessProbe.httpGet.httpHeaders: Invalid value: \"X Bad\": a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')",
            ]
        );
        assert_eq!(
            errors_of(json!({"startupProbe": {"tcpSocket": {"port": "HTTP--x"}}}), false),
            [
                "spec.containers[0].startupProbe.tcpSocket.port: Invalid value: \"HTTP--x\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                "spec.containers[0].startupProbe.tcpSocket.port: Invalid value: \"HTTP--x\": must not contain consecutive hyphens",
            ]
        );
        assert!(errors_of(json!({"startupProbe": {"tcpSocket": {"port": "http-alt"}}}), false).is_empty());
    }

    #[test]
    fn thresholds_and_grace_follow_the_probes_kind() {
        assert_eq!(
            errors_of(
                json!({"livenessProbe": {"exec": {"command": ["x"]}, "successThreshold": 2, "periodSeconds": -1,
                "terminationGracePeriodSeconds": 0}}),
                false
            ),
            [
                "spec.containers[0].livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0",
                "spec.containers[0].livenessProbe.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0",
                "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1",
            ]
        );
        assert_eq!(
            errors_of(
                json!({"readinessProbe": {"exec": {"command": ["x"]}, "successThreshold": 2,
                "terminationGracePeriodSeconds": 5}}),
                false
            ),
            [
                "spec.containers[0].readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: must not be set for readinessProbes"
            ]
        );
    }

    #[test]
    fn only_a_sidecar_init_container_may_be_probed() {
        let probe = json!({"exec": {"command": ["x"]}});
        assert_eq!(
            errors_of(json!({"readinessProbe": probe}), true),
            [
                "spec.containers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always"
            ]
        );
        assert!(errors_of(json!({"restartPolicy": "Always", "readinessProbe": probe}), true).is_empty());
    }
}
