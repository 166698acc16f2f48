//! `ValidatePodSpec`'s rules on the fields a node acts on and a client reads back, beyond
//! names, mounts and volume files (in `pod.rs` and `projection.rs`): at least one container
//! and an image for each, exactly one source per volume, a projected token's lifetime, the
//! enumerations (`restartPolicy`, `dnsPolicy`, port protocols), the numeric ranges (ports,
//! user and group IDs, `activeDeadlineSeconds`) and the DNS names (`hostname`, `subdomain`,
//! `serviceAccountName`), each worded and pathed as upstream's `validation.go`.

use podpass_api::validation::{FieldError, is_dns1123_subdomain, quote};
use podpass_token::user::is_dns1123_label;
use serde_json::Value;

use crate::field::Field;

/// Every volume source `core/v1.VolumeSource` declares, in the order `validateVolumeSource`
/// looks at them: a volume names exactly one, and each past the first is the one refused.
const VOLUME_SOURCES: [&str; 30] = [
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "quobyte",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "storageos",
    "configMap",
    "scaleIO",
    "projected",
    "csi",
    "ephemeral",
    "image",
];

/// `validation.IsValidPortNum`'s message.
const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";
/// `validation.IsValidUserID` / `IsValidGroupID`'s message.
const ID_RANGE: &str = "must be between 0 and 2147483647, inclusive";
/// A projected token lives at least this long (`validateServiceAccountTokenProjection`).
const MIN_TOKEN_SECONDS: i64 = 10 * 60;
/// ... and at most this long.
const MAX_TOKEN_SECONDS: i64 = 1 << 32;
/// `RelaxedEnvironmentVariableValidation` (on by default since 1.32): the message.
const ENV_NAME: &str =
    "a valid environment variable name must consist only of printable ASCII characters other than '='";

const LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// The rules above, as rendered field errors.
pub(super) fn errors(pod: &Value) -> Vec<String> {
    let mut errors: Vec<FieldError> = Vec::new();
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    let containers = spec.get("containers").and_then(Value::as_array);
    if containers.is_none_or(Vec::is_empty) {
        errors.push(FieldError::required("spec.containers", ""));
    }
    for list in ["initContainers", "containers"] {
        for (i, c) in spec.get(list).and_then(Value::as_array).into_iter().flatten().enumerate() {
            let at = format!("spec.{list}[{i}]");
            container(c, &at, &mut errors);
            super::probe::container_errors(c, &at, list == "initContainers", &mut errors);
        }
    }
    for (i, volume) in spec.get("volumes").and_then(Value::as_array).into_iter().flatten().enumerate() {
        volume_source(volume, &format!("spec.volumes[{i}]"), &mut errors);
    }
    one_of(spec.get("restartPolicy"), "spec.restartPolicy", &["Always", "OnFailure", "Never"], &mut errors);
    let dns = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
    one_of(spec.get("dnsPolicy"), "spec.dnsPolicy", &dns, &mut errors);
    if let Some(deadline) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64)
        && !(1..=i64::from(i32::MAX)).contains(&deadline)
    {
        errors.push(FieldError::invalid_rendered(
            "spec.activeDeadlineSeconds",
            deadline.to_string(),
            "must be between 1 and 2147483647, inclusive",
        ));
    }
    for field in ["hostname", "subdomain"] {
        if let Some(name) = spec.get(field).and_then(Value::as_str).filter(|n| !n.is_empty())
            && !is_dns1123_label(name)
        {
            errors.push(FieldError::invalid(&format!("spec.{field}"), name, LABEL));
        }
    }
    if let Some(account) = spec.get("serviceAccountName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
        for message in is_dns1123_subdomain(account) {
            errors.push(FieldError::invalid("spec.serviceAccountName", account, message));
        }
    }
    ids(spec.get("securityContext"), "spec.securityContext", &["runAsUser", "runAsGroup", "fsGroup"], &mut errors);
    let groups = spec.field("/securityContext/supplementalGroups").and_then(Value::as_array);
    for (i, group) in groups.into_iter().flatten().enumerate() {
        id(group, &format!("spec.securityContext.supplementalGroups[{i}]"), &mut errors);
    }
    errors.into_iter().map(|e| e.to_string()).collect()
}

/// Fields an ephemeral container may not set (`validateEphemeralContainers`).
const NOT_FOR_EPHEMERAL: [&str; 8] = [
    "lifecycle",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
];
/// What `validateEphemeralContainers` says of them.
const EPHEMERAL_FORBIDDEN: &str = "cannot be set for an Ephemeral Container";

/// `ValidatePodEphemeralContainersUpdate` (with `validateEphemeralContainers` on the new
/// list), when the update changes `spec.ephemeralContainers`: existing ones stay as they
/// are, new ones are containers with a unique name, an image, no ports, probes, lifecycle
/// or resources, mounts of the pod's volumes without a subPath, and a target container
/// that exists.
pub(super) fn ephemeral_update_errors(new: &Value, old: &Value) -> Vec<String> {
    let list =
        |pod: &Value| pod.field("/spec/ephemeralContainers").and_then(Value::as_array).cloned().unwrap_or_default();
    let (new_list, old_list) = (list(new), list(old));
    if new_list == old_list {
        return Vec::new();
    }
    let mut errors = Vec::new();
    let name_of = |c: &Value| c.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
    for old_c in &old_list {
        let name = name_of(old_c);
        match new_list.iter().position(|c| name_of(c) == name) {
            None => errors.push(FieldError::forbidden(
                "spec.ephemeralContainers",
                format!("existing ephemeral containers {} may not be removed", quote(&name)),
            )),
            Some(i) if &new_list[i] != old_c => errors.push(FieldError::forbidden(
                &format!("spec.ephemeralContainers[{i}]"),
                format!("existing ephemeral containers {} may not be changed", quote(&name)),
            )),
            Some(_) => {}
        }
    }
    let spec = new.get("spec").unwrap_or(&Value::Null);
    let named = |list: &str| -> Vec<String> {
        spec.get(list).and_then(Value::as_array).into_iter().flatten().map(name_of).collect()
    };
    let (apps, inits) = (named("containers"), named("initContainers"));
    let volumes = named("volumes");
    let mut seen: std::collections::HashSet<String> = apps.iter().chain(&inits).cloned().collect();
    for (i, c) in new_list.iter().enumerate() {
        let at = format!("spec.ephemeralContainers[{i}]");
        let name = name_of(c);
        if name.is_empty() {
            errors.push(FieldError::required(&format!("{at}.name"), ""));
        } else if !is_dns1123_label(&name) {
            errors.push(FieldError::invalid(&format!("{at}.name"), &name, LABEL));
        } else if !seen.insert(name.clone()) {
            errors.push(FieldError::duplicate(&format!("{at}.name"), &name));
        }
        container(c, &at, &mut errors);
        for field in NOT_FOR_EPHEMERAL {
            // Go's zero value (kubectl sends `resources: {}`) is unset.
            let set = match c.get(field) {
                None | Some(Value::Null) => false,
                Some(Value::Object(m)) => !m.is_empty(),
                Some(Value::Array(a)) => !a.is_empty(),
                Some(Value::String(s)) => !s.is_empty(),
                Some(_) => true,
            };
            if set {
                errors.push(FieldError::forbidden(&format!("{at}.{field}"), EPHEMERAL_FORBIDDEN));
            }
        }
        for (j, m) in c.get("volumeMounts").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let mount = m.get("name").and_then(Value::as_str).unwrap_or_default();
            if !volumes.iter().any(|v| v == mount) {
                errors.push(FieldError::not_found(&format!("{at}.volumeMounts[{j}].name"), mount));
            }
            for field in ["subPath", "subPathExpr"] {
                if m.get(field).and_then(Value::as_str).is_some_and(|p| !p.is_empty()) {
                    errors.push(FieldError::forbidden(&format!("{at}.volumeMounts[{j}].{field}"), EPHEMERAL_FORBIDDEN));
                }
            }
        }
        if let Some(target) = c.get("targetContainerName").and_then(Value::as_str).filter(|t| !t.is_empty())
            && !apps.iter().chain(&inits).any(|n| n == target)
        {
            errors.push(FieldError::not_found(&format!("{at}.targetContainerName"), target));
        }
    }
    errors.into_iter().map(|e| e.to_string()).collect()
}

/// `validateContainers`/`validateContainerCommon`: an image, ports in range with a known
/// protocol, environment variable names, user and group IDs in range.
fn container(c: &Value, at: &str, errors: &mut Vec<FieldError>) {
    match c.get("image").and_then(Value::as_str) {
        None | Some("") => errors.push(FieldError::required(&format!("{at}.image"), "")),
        Some(image) if image.trim() != image => {
            errors.push(FieldError::invalid(
                &format!("{at}.image"),
                image,
                "must not have leading or trailing whitespace",
            ));
        }
        Some(_) => {}
    }
    for (j, port) in c.get("ports").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let at = format!("{at}.ports[{j}]");
        match port.get("containerPort").and_then(Value::as_i64) {
            None => errors.push(FieldError::required(&format!("{at}.containerPort"), "")),
            Some(p) if !(1..=65535).contains(&p) => {
                errors.push(FieldError::invalid_rendered(&format!("{at}.containerPort"), p.to_string(), PORT_RANGE));
            }
            Some(_) => {}
        }
        if let Some(p) = port.get("hostPort").and_then(Value::as_i64)
            && p != 0
            && !(1..=65535).contains(&p)
        {
            errors.push(FieldError::invalid_rendered(&format!("{at}.hostPort"), p.to_string(), PORT_RANGE));
        }
        one_of(port.get("protocol"), &format!("{at}.protocol"), &["SCTP", "TCP", "UDP"], errors);
    }
    for (j, env) in c.get("env").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let path = format!("{at}.env[{j}].name");
        match env.get("name").and_then(Value::as_str) {
            None | Some("") => errors.push(FieldError::required(&path, "")),
            Some(name) if !name.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'=') => {
                errors.push(FieldError::invalid(&path, name, ENV_NAME));
            }
            Some(_) => {}
        }
    }
    ids(c.get("securityContext"), &format!("{at}.securityContext"), &["runAsUser", "runAsGroup"], errors);
}

/// `validateVolumeSource`: exactly one source; a projected token lives 10 minutes to 2^32 s.
fn volume_source(volume: &Value, at: &str, errors: &mut Vec<FieldError>) {
    let named: Vec<&str> =
        VOLUME_SOURCES.iter().copied().filter(|s| volume.get(*s).is_some_and(|v| !v.is_null())).collect();
    match named.as_slice() {
        [] => errors.push(FieldError::required(at, "must specify a volume type")),
        [_] => {}
        [_, extra @ ..] => {
            for source in extra {
                errors
                    .push(FieldError::forbidden(&format!("{at}.{source}"), "may not specify more than 1 volume type"));
            }
        }
    }
    let sources = volume.field("/projected/sources").and_then(Value::as_array);
    for (j, source) in sources.into_iter().flatten().enumerate() {
        let Some(seconds) = source.field("/serviceAccountToken/expirationSeconds").and_then(Value::as_i64) else {
            continue;
        };
        let path = format!("{at}.projected.sources[{j}].serviceAccountToken.expirationSeconds");
        if seconds < MIN_TOKEN_SECONDS {
            errors.push(FieldError::invalid_rendered(
                &path,
                seconds.to_string(),
                "may not specify a duration less than 10 minutes",
            ));
        }
        if seconds > MAX_TOKEN_SECONDS {
            errors.push(FieldError::invalid_rendered(
                &path,
                seconds.to_string(),
                "may not specify a duration larger than 2^32 seconds",
            ));
        }
    }
}

/// `field.Required` when the value at `path` is empty, `field.NotSupported` when it is none
/// of `values`; absent is left to defaulting.
fn one_of(value: Option<&Value>, path: &str, values: &[&str], errors: &mut Vec<FieldError>) {
    let Some(value) = value.and_then(Value::as_str) else { return };
    if value.is_empty() {
        errors.push(FieldError::required(path, ""));
    } else if !values.contains(&value) {
        errors.push(FieldError::not_supported(path, value, values));
    }
}

fn ids(context: Option<&Value>, at: &str, fields: &[&str], errors: &mut Vec<FieldError>) {
    let Some(context) = context else { return };
    for field in fields {
        if let Some(value) = context.get(*field) {
            id(value, &format!("{at}.{field}"), errors);
        }
    }
}

fn id(value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(n) = value.as_i64()
        && !(0..=i64::from(i32::MAX)).contains(&n)
    {
        errors.push(FieldError::invalid_rendered(path, n.to_string(), ID_RANGE));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fine() -> Value {
        json!({"spec": {
            "containers": [{"name": "c", "image": "r.io/app:1", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                            "env": [{"name": "my.var-1", "value": "x"}], "securityContext": {"runAsUser": 0}}],
            "volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "expirationSeconds": 600}}]}}],
            "restartPolicy": "Never", "dnsPolicy": "ClusterFirst", "activeDeadlineSeconds": 5,
            "hostname": "web-0", "subdomain": "svc", "serviceAccountName": "builder.v2",
            "securityContext": {"runAsUser": 1000, "fsGroup": 2000, "supplementalGroups": [3000]}}})
    }

    #[test]
    fn ephemeral_containers_are_added_never_changed_and_limited_as_upstream() {
        let pod = |ephemeral: Value| {
            json!({"spec": {"containers": [{"name": "app", "image": "a"}], "volumes": [{"name": "data", "emptyDir": {}}],
                "ephemeralContainers": ephemeral}})
        };
        let debugger = json!({"name": "debugger", "image": "busybox", "targetContainerName": "app",
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]});
        let none = pod(json!([]));
        let one = pod(json!([debugger]));
        assert_eq!(ephemeral_update_errors(&one, &none), Vec::<String>::new());
        assert_eq!(ephemeral_update_errors(&one, &one), Vec::<String>::new());
        assert_eq!(
            ephemeral_update_errors(&none, &one),
            [r#"spec.ephemeralContainers: Forbidden: existing ephemeral containers "debugger" may not be removed"#]
        );
        let mut changed = debugger.clone();
        changed["image"] = json!("other");
        assert_eq!(
            ephemeral_update_errors(&pod(json!([changed])), &one),
            [r#"spec.ephemeralContainers[0]: Forbidden: existing ephemeral containers "debugger" may not be changed"#]
        );
        let bad = json!({"name": "app", "image": "", "ports": [{"containerPort": 80}], "targetContainerName": "nope", "resources": {},
            "volumeMounts": [{"name": "data", "mountPath": "/d", "subPath": "x"}, {"name": "gone", "mountPath": "/g"}]});
        assert_eq!(
            ephemeral_update_errors(&pod(json!([bad])), &none),
            [
                r#"spec.ephemeralContainers[0].name: Duplicate value: "app""#,
                "spec.ephemeralContainers[0].image: Required value",
                "spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container",
                "spec.ephemeralContainers[0].volumeMounts[0].subPath: Forbidden: cannot be set for an Ephemeral Container",
                r#"spec.ephemeralContainers[0].volumeMounts[1].name: Not found: "gone""#,
                r#"spec.ephemeralContainers[0].targetContainerName: Not found: "nope""#,
            ]
        );
    }

    #[test]
    fn a_valid_pod_passes() {
        assert_eq!(errors(&fine()), Vec::<String>::new());
    }

    #[test]
    fn each_rule_answers_with_upstreams_path_and_words() {
        let cases: Vec<(&str, Value, &str)> = vec![
            ("/spec/containers", json!([]), "spec.containers: Required value"),
            ("/spec/containers/0/image", json!(""), "spec.containers[0].image: Required value"),
            (
                "/spec/containers/0/image",
                json!(" app "),
                r#"spec.containers[0].image: Invalid value: " app ": must not have leading or trailing whitespace"#,
            ),
            (
                "/spec/containers/0/ports/0/containerPort",
                json!(70000),
                "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            ),
            (
                "/spec/containers/0/ports/0/protocol",
                json!("ICMP"),
                r#"spec.containers[0].ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP""#,
            ),
            (
                "/spec/containers/0/env/0/name",
                json!("A=B"),
                r#"spec.containers[0].env[0].name: Invalid value: "A=B": a valid environment variable name must consist only of printable ASCII characters other than '='"#,
            ),
            (
                "/spec/containers/0/securityContext/runAsUser",
                json!(-1),
                "spec.containers[0].securityContext.runAsUser: Invalid value: -1: must be between 0 and 2147483647, inclusive",
            ),
            (
                "/spec/volumes/0/emptyDir",
                json!({}),
                "spec.volumes[0].projected: Forbidden: may not specify more than 1 volume type",
            ),
            ("/spec/volumes/0", json!({"name": "t"}), "spec.volumes[0]: Required value: must specify a volume type"),
            (
                "/spec/volumes/0/projected/sources/0/serviceAccountToken/expirationSeconds",
                json!(599),
                "spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes",
            ),
            (
                "/spec/volumes/0/projected/sources/0/serviceAccountToken/expirationSeconds",
                json!(4_294_967_297_i64),
                "spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds: Invalid value: 4294967297: may not specify a duration larger than 2^32 seconds",
            ),
            (
                "/spec/restartPolicy",
                json!("Sometimes"),
                r#"spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "Never", "OnFailure""#,
            ),
            (
                "/spec/dnsPolicy",
                json!("Cluster"),
                r#"spec.dnsPolicy: Unsupported value: "Cluster": supported values: "ClusterFirst", "ClusterFirstWithHostNet", "Default", "None""#,
            ),
            (
                "/spec/activeDeadlineSeconds",
                json!(0),
                "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive",
            ),
            ("/spec/hostname", json!("Web_0"), r#"spec.hostname: Invalid value: "Web_0": a lowercase RFC 1123 label"#),
            (
                "/spec/serviceAccountName",
                json!("../admin"),
                r#"spec.serviceAccountName: Invalid value: "../admin": a lowercase RFC 1123 subdomain"#,
            ),
            (
                "/spec/securityContext/fsGroup",
                json!(2_147_483_648_i64),
                "spec.securityContext.fsGroup: Invalid value: 2147483648: must be between 0 and 2147483647, inclusive",
            ),
            (
                "/spec/securityContext/supplementalGroups/0",
                json!(-5),
                "spec.securityContext.supplementalGroups[0]: Invalid value: -5: must be between 0 and 2147483647, inclusive",
            ),
        ];
        for (pointer, value, expected) in cases {
            let mut pod = fine();
            let (parent, key) = pointer.rsplit_once('/').unwrap_or_else(|| panic!("{pointer}"));
            match pod.pointer_mut(parent).unwrap_or_else(|| panic!("{pointer}")) {
                Value::Array(items) => items[key.parse::<usize>().unwrap_or_else(|_| panic!("{pointer}"))] = value,
                Value::Object(fields) => drop(fields.insert(key.to_owned(), value)),
                _ => panic!("{pointer}"),
            }
            let got = errors(&pod);
            assert_eq!(got.len(), 1, "{pointer}: {got:?}");
            assert!(got[0].starts_with(expected), "{pointer}:\n got {}\nwant {expected}", got[0]);
        }
    }
}
