//! Pod (pkg/registry/core/pod): v1 defaults, a new pod's status the server's, the name,
//! volume and update rules the node relies on (`nodeName`, `serviceAccountName` and
//! volumes fixed once created), graceful deletion of scheduled pods, the fields pods are
//! selected by, and the kubelet-style status `kubectl get pods` prints. ServiceAccount
//! admission (the token volume) is in `admission`.

use serde_json::{Value, json};

use super::super::table::{age, age_column, column, human_duration, name_column, or_none, text};
use super::projection::validate_pod_volumes;
use super::{Part, Printer, Serves, Strategy, Subresource, invalid};
use crate::field::Field;
use crate::server::status::StatusError;
use podpass_token::user::is_dns1123_label;

/// Default pod termination grace (upstream `terminationGracePeriodSeconds` default).
const DEFAULT_GRACE_SECONDS: i64 = 30;

/// Longest grace period honoured: a century. Larger values (up to `i64::MAX` from a client)
/// would overflow the deletion timestamp.
const MAX_GRACE_SECONDS: i64 = 100 * 365 * 24 * 3600;

/// The pod strategy.
pub(crate) struct Pod;

/// Registered in the resource table.
pub(crate) static POD: Pod = Pod;

/// The resource.
pub(crate) const RESOURCE: super::Resource = super::Resource::stored(
    super::Names { group: "", kind: "Pod", plural: "pods", singular: "pod" },
    &POD,
    &super::types::TypeOf::<k8s_openapi::api::core::v1::Pod>::NEW,
)
.with_short_names(&["po"])
.in_categories(&["all"]);

/// The body of `pods/binding`.
pub(crate) const BINDING: super::Body = super::Body {
    group: "",
    kind: "Binding",
    typed: &super::types::TypeOf::<k8s_openapi::api::core::v1::Binding>::NEW,
};

impl Strategy for Pod {
    /// Upstream's storage sets `ReturnDeletedObject`.
    fn returns_deleted_object(&self) -> bool {
        true
    }

    fn default(&self, _name: &str, object: &mut Value) -> Result<(), StatusError> {
        default_pod(object);
        Ok(())
    }

    fn prepare_for_create(&self, object: &mut Value) {
        // A new pod's status is the server's (Pending), never what the creator wrote: a pod
        // that never ran is not Succeeded, nor Ready.
        if let Some(obj) = object.as_object_mut() {
            obj.insert("status".into(), json!({"phase": "Pending"}));
        }
    }

    fn prepare_for_update(&self, object: &mut Value, old: &Value) {
        super::namespace::keep_status(object, old);
        // Ephemeral containers are added through `pods/ephemeralcontainers` only.
        let kept = old.field("/spec/ephemeralContainers").cloned();
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            match kept {
                Some(e) => spec.insert("ephemeralContainers".into(), e),
                None => spec.remove("ephemeralContainers"),
            };
        }
    }

    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        validate_names(name, object)?;
        let mut errors = spec_errors(object, true);
        errors.extend(super::pod_spec::errors(object));
        invalid("Pod", name, errors)?;
        validate_pod_volumes(name, object)
    }

    fn validate_update(&self, name: &str, object: &Value, old: &Value) -> Result<(), StatusError> {
        invalid("Pod", name, super::pod_spec::ephemeral_update_errors(object, old))?;
        validate_pod_update(name, old, object)
    }

    fn subresources(&self) -> &'static [Subresource] {
        const fn sub(name: &'static str, kind: &'static str, serves: Serves) -> Subresource {
            Subresource { name, kind, serves }
        }
        const SUBRESOURCES: [Subresource; 7] = [
            super::status("Pod"),
            sub("ephemeralcontainers", "Pod", Serves::Part(Part::EphemeralContainers)),
            sub("binding", "Binding", Serves::Binding),
            sub("log", "Pod", Serves::Log),
            sub("exec", "PodExecOptions", Serves::Stream),
            sub("attach", "PodAttachOptions", Serves::Stream),
            sub("portforward", "PodPortForwardOptions", Serves::Stream),
        ];
        &SUBRESOURCES
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["spec.nodeName", "spec.serviceAccountName", "status.phase"]
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                column("Ready", "string", "", "The aggregate readiness state of this pod for accepting traffic.", 0),
                column("Status", "string", "", "The aggregate status of the containers in this pod.", 0),
                column(
                    "Restarts",
                    "string",
                    "",
                    "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
                    0,
                ),
                age_column(),
                column(
                    "IP",
                    "string",
                    "",
                    "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
                    1,
                ),
                column("Node", "string", "", "NodeName is a request to schedule this pod onto a specific node.", 1),
                column(
                    "Nominated Node",
                    "string",
                    "",
                    "nominatedNodeName is set when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.",
                    1,
                ),
                column(
                    "Readiness Gates",
                    "string",
                    "",
                    "If specified, all readiness gates will be evaluated for pod readiness.",
                    1,
                ),
            ],
            pod_cells,
        ))
    }

    /// `CheckGracefulDelete`: a pod bound to a node is marked and removed after its grace
    /// (the request's, else the pod's, else 30 s; a negative one is 1 s); an unscheduled
    /// pod, or a zero grace, goes at once.
    fn graceful_delete(&self, pod: &Value, requested: Option<i64>) -> Option<i64> {
        let scheduled = pod.field("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
        let grace = requested
            .or_else(|| pod.field("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64))
            .unwrap_or(DEFAULT_GRACE_SECONDS);
        let grace = if grace < 0 { 1 } else { grace.min(MAX_GRACE_SECONDS) };
        (scheduled && grace > 0).then_some(grace)
    }
}

/// `ValidatePodSpec`'s name rules for what becomes a directory or file name on a node:
/// volume and container names are unique DNS-1123 labels.
fn validate_names(name: &str, pod: &Value) -> Result<(), StatusError> {
    const LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    let mut errors = Vec::new();
    for (list, what) in [("volumes", "volumes"), ("initContainers", "initContainers"), ("containers", "containers")] {
        let mut seen = std::collections::HashSet::new();
        for (i, item) in pod.field(&format!("/spec/{list}")).and_then(Value::as_array).into_iter().flatten().enumerate()
        {
            let n = item.get("name").and_then(Value::as_str).unwrap_or_default();
            let path = format!("spec.{what}[{i}].name");
            if n.is_empty() {
                errors.push(format!("{path}: Required value"));
            } else if !is_dns1123_label(n) {
                errors.push(format!("{path}: Invalid value: {}: {LABEL}", podpass_api::validation::quote(n)));
            } else if !seen.insert(n.to_owned()) {
                errors.push(format!("{path}: Duplicate value: {}", podpass_api::validation::quote(n)));
            }
        }
    }
    invalid("Pod", name, errors)
}

/// `ValidatePodCreate`/`ValidatePodSpec` rules on what a node acts on: `nodeName` a DNS
/// subdomain (`ValidateNodeName`), every `volumeMounts` entry naming a volume of the pod with
/// `subPath`/`subPathExpr` relative and without `..` (`validateLocalDescendingPath`) and not
/// both, and no `ephemeralContainers` on create (they come through their subresource).
fn spec_errors(pod: &Value, create: bool) -> Vec<String> {
    let quote = podpass_api::validation::quote;
    let mut errors = Vec::new();
    if let Some(node) = pod.field("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
        for message in podpass_api::validation::is_dns1123_subdomain(node) {
            errors.push(format!("spec.nodeName: Invalid value: {}: {message}", quote(node)));
        }
    }
    let volumes: std::collections::HashSet<&str> = pod
        .field("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("name").and_then(Value::as_str))
        .collect();
    for list in ["initContainers", "containers"] {
        for (i, c) in pod.field(&format!("/spec/{list}")).and_then(Value::as_array).into_iter().flatten().enumerate() {
            let mut mount_paths = std::collections::HashSet::new();
            for (j, m) in c.get("volumeMounts").and_then(Value::as_array).into_iter().flatten().enumerate() {
                let at = format!("spec.{list}[{i}].volumeMounts[{j}]");
                // ValidateVolumeMounts: one mount per path in a container.
                let path = m.get("mountPath").and_then(Value::as_str).unwrap_or_default();
                if !path.is_empty() && !mount_paths.insert(path) {
                    errors.push(format!("{at}.mountPath: Invalid value: {}: must be unique", quote(path)));
                }
                let mount = m.get("name").and_then(Value::as_str).unwrap_or_default();
                if !mount.is_empty() && !volumes.contains(mount) {
                    errors.push(format!("{at}.name: Not found: {}", quote(mount)));
                }
                let sub = m.get("subPath").and_then(Value::as_str).unwrap_or_default();
                let expr = m.get("subPathExpr").and_then(Value::as_str).unwrap_or_default();
                for (field, value) in [("subPath", sub), ("subPathExpr", expr)] {
                    if value.starts_with('/') {
                        errors.push(format!("{at}.{field}: Invalid value: {}: must be a relative path", quote(value)));
                    }
                    if value.split('/').any(|part| part == "..") {
                        errors.push(format!("{at}.{field}: Invalid value: {}: must not contain '..'", quote(value)));
                    }
                }
                if !sub.is_empty() && !expr.is_empty() {
                    errors.push(format!(
                        "{at}.subPathExpr: Invalid value: {}: subPathExpr and subPath are mutually exclusive",
                        quote(expr)
                    ));
                }
            }
        }
    }
    if create && pod.field("/spec/ephemeralContainers").and_then(Value::as_array).is_some_and(|e| !e.is_empty()) {
        errors.push("spec.ephemeralContainers: Forbidden: cannot be set on create".to_owned());
    }
    errors
}

/// The tag `parsers.ParseImageName` reports: the explicit tag, `latest` when the image has
/// neither tag nor digest, empty for a digest without a tag.
fn image_tag(image: &str) -> &str {
    let (name, digest) = match image.split_once('@') {
        Some((n, _)) => (n, true),
        None => (image, false),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.rsplit_once(':') {
        Some((_, tag)) => tag,
        None if digest => "",
        None => "latest",
    }
}

/// core/v1 defaulting of a new pod (`SetDefaults_Pod`, `_PodSpec`, `_Container`, and the
/// volume sources'): file modes 0644 on secret, configMap, downwardAPI and projected
/// volumes, one hour for projected service-account tokens, the pull policy from the tag
/// (`Always` for `latest`), and the spec-level defaults kubectl shows.
pub(super) fn default_pod(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return };
    for (key, value) in [
        ("restartPolicy", json!("Always")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("securityContext", json!({})),
        ("enableServiceLinks", json!(true)),
    ] {
        // An empty string is Go's zero value: unset, so defaulted too.
        let slot = spec.entry(key).or_insert(Value::Null);
        if slot.is_null() || slot.as_str() == Some("") {
            *slot = value;
        }
    }
    for volume in spec.get_mut("volumes").and_then(Value::as_array_mut).into_iter().flatten() {
        for source in ["secret", "configMap", "downwardAPI", "projected"] {
            if let Some(src) = volume.get_mut(source).and_then(Value::as_object_mut) {
                src.entry("defaultMode").or_insert(json!(420));
            }
        }
        let sources = volume.pointer_mut("/projected/sources").and_then(Value::as_array_mut);
        for source in sources.into_iter().flatten() {
            if let Some(token) = source.get_mut("serviceAccountToken").and_then(Value::as_object_mut) {
                token.entry("expirationSeconds").or_insert(json!(3600));
            }
        }
    }
    for list in ["initContainers", "containers"] {
        for c in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            let Some(c) = c.as_object_mut() else { continue };
            let policy = if image_tag(c.get("image").and_then(Value::as_str).unwrap_or_default()) == "latest" {
                "Always"
            } else {
                "IfNotPresent"
            };
            c.entry("imagePullPolicy").or_insert(json!(policy));
            c.entry("terminationMessagePath").or_insert(json!("/dev/termination-log"));
            c.entry("terminationMessagePolicy").or_insert(json!("File"));
            super::probe::default_container(c);
        }
    }
}

/// `ValidatePodUpdate`: after creation only container images, `activeDeadlineSeconds`,
/// added tolerations and a negative `terminationGracePeriodSeconds` set to 1 may change in a
/// pod's spec — in particular `nodeName`, `serviceAccountName` and volumes are fixed, which
/// the Node authorizer and NodeRestriction rely on.
fn validate_pod_update(name: &str, old: &Value, new: &Value) -> Result<(), StatusError> {
    let (Some(old_spec), Some(new_spec)) = (old.get("spec"), new.get("spec")) else {
        return if old.get("spec") == new.get("spec") {
            Ok(())
        } else {
            Err(StatusError::invalid(format!("Pod {name:?} is invalid: spec: Required value")))
        };
    };
    // The new spec with the mutable fields taken from the old one must equal the old one.
    let mut candidate = new_spec.clone();
    for list in ["containers", "initContainers"] {
        let old_list = old_spec.get(list).and_then(Value::as_array);
        if let (Some(items), Some(old_items)) = (candidate.get_mut(list).and_then(Value::as_array_mut), old_list)
            && items.len() == old_items.len()
        {
            for (item, old_item) in items.iter_mut().zip(old_items) {
                if let Some(obj) = item.as_object_mut() {
                    match old_item.get("image") {
                        Some(image) => obj.insert("image".into(), image.clone()),
                        None => obj.remove("image"),
                    };
                }
            }
        }
    }
    let Some(obj) = candidate.as_object_mut() else {
        return Err(StatusError::invalid(format!("Pod {name:?} is invalid: spec: Invalid value: must be an object")));
    };
    let mut copy_old = |field: &str| match old_spec.get(field) {
        Some(v) => obj.insert(field.into(), v.clone()),
        None => obj.remove(field),
    };
    copy_old("activeDeadlineSeconds");
    // Checked on their own (`pods/ephemeralcontainers`).
    copy_old("ephemeralContainers");
    // tolerations: additions only
    let old_tolerations = old_spec.get("tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    let new_tolerations = new_spec.get("tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    let only_added = old_tolerations.iter().all(|t| new_tolerations.contains(t));
    if only_added {
        copy_old("tolerations");
    }
    let old_grace = old_spec.get("terminationGracePeriodSeconds").and_then(Value::as_i64);
    let new_grace = new_spec.get("terminationGracePeriodSeconds").and_then(Value::as_i64);
    if old_grace.is_some_and(|g| g < 0) && new_grace == Some(1) {
        copy_old("terminationGracePeriodSeconds");
    }
    if &candidate == old_spec {
        return Ok(());
    }
    Err(StatusError::invalid(format!(
        "Pod {name:?} is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
    )))
}

/// The kubelet's pod status reasoning as `kubectl get pods` shows it (printPod).
fn pod_cells(pod: &Value, now: i64) -> Vec<Value> {
    let empty = Vec::new();
    let array = |path: &str| pod.field(path).and_then(Value::as_array).unwrap_or(&empty);
    let init_specs = array("/spec/initContainers");
    let restartable = |name: &str| init_specs.iter().any(|c| c["name"] == name && c["restartPolicy"] == "Always");
    let sidecars = init_specs.iter().filter(|c| c["restartPolicy"] == "Always").count();
    let total = array("/spec/containers").len() + sidecars;
    let mut ready = 0;
    let mut restarts: i64 = 0;
    let mut sidecar_restarts: i64 = 0;
    let mut reason = text(pod, "/status/phase").to_owned();
    if !text(pod, "/status/reason").is_empty() {
        reason = text(pod, "/status/reason").to_owned();
    }
    if array("/status/conditions").iter().any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated") {
        reason = "SchedulingGated".into();
    }
    let terminated_reason = |t: &Value, prefix: &str| -> String {
        let r = t["reason"].as_str().unwrap_or("");
        if !r.is_empty() {
            return format!("{prefix}{r}");
        }
        match t["signal"].as_i64().filter(|s| *s != 0) {
            Some(signal) => format!("{prefix}Signal:{signal}"),
            None => format!("{prefix}ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)),
        }
    };
    let mut initializing = false;
    let init_statuses = array("/status/initContainerStatuses");
    for (i, c) in init_statuses.iter().enumerate() {
        let count = c["restartCount"].as_i64().unwrap_or(0);
        restarts += count;
        let name = c["name"].as_str().unwrap_or("");
        let started = c["started"].as_bool().unwrap_or(false);
        if restartable(name) {
            sidecar_restarts += count;
        }
        let state = &c["state"];
        if state["terminated"].is_object() && state["terminated"]["exitCode"].as_i64().unwrap_or(0) == 0 {
            continue;
        }
        if restartable(name) && started {
            if c["ready"].as_bool().unwrap_or(false) {
                ready += 1;
            }
            continue;
        }
        if state["terminated"].is_object() {
            reason = terminated_reason(&state["terminated"], "Init:");
        } else if let Some(w) = state["waiting"]["reason"].as_str().filter(|r| !r.is_empty() && *r != "PodInitializing")
        {
            reason = format!("Init:{w}");
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }
    let initialized = array("/status/conditions").iter().any(|c| c["type"] == "Initialized" && c["status"] == "True");
    if !initializing || initialized {
        restarts = sidecar_restarts;
        let mut running = false;
        for c in array("/status/containerStatuses").iter().rev() {
            restarts += c["restartCount"].as_i64().unwrap_or(0);
            let state = &c["state"];
            if let Some(w) = state["waiting"]["reason"].as_str().filter(|r| !r.is_empty()) {
                reason = w.to_owned();
            } else if state["terminated"].is_object() {
                reason = terminated_reason(&state["terminated"], "");
            } else if c["ready"].as_bool().unwrap_or(false) && state["running"].is_object() {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            let pod_ready = array("/status/conditions").iter().any(|c| c["type"] == "Ready" && c["status"] == "True");
            reason = if pod_ready { "Running".into() } else { "NotReady".into() };
        }
    }
    let deleting = pod.field("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null());
    let phase = text(pod, "/status/phase");
    if deleting && text(pod, "/status/reason") == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }
    let last_restart = array("/status/containerStatuses")
        .iter()
        .chain(init_statuses)
        .filter_map(|c| crate::time::parse_rfc3339(c["lastState"]["terminated"]["finishedAt"].as_str().unwrap_or("")))
        .max();
    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", human_duration(now - t)),
        _ => restarts.to_string(),
    };
    let ip = pod.field("/status/podIPs/0/ip").and_then(Value::as_str).unwrap_or("");
    let gates = array("/spec/readinessGates");
    let gates_cell = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let conditions = array("/status/conditions");
        let met = gates
            .iter()
            .filter(|g| conditions.iter().any(|c| c["type"] == g["conditionType"] && c["status"] == "True"))
            .count();
        format!("{met}/{}", gates.len())
    };
    vec![
        json!(text(pod, "/metadata/name")),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        json!(age(pod, "/metadata/creationTimestamp", now)),
        json!(or_none(ip)),
        json!(or_none(text(pod, "/spec/nodeName"))),
        json!(or_none(text(pod, "/status/nominatedNodeName"))),
        json!(gates_cell),
    ]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn volume_and_container_names_are_dns_labels() {
        let pod = |volume: &str| json!({"spec": {"containers": [{"name": "c"}], "volumes": [{"name": volume}, {"name": "ok"}]}});
        assert_eq!(validate_names("web", &pod("data")), Ok(()));
        let err = validate_names("web", &pod("../../etc")).unwrap_err();
        assert!(
            err.message.starts_with(
                r#"Pod "web" is invalid: spec.volumes[0].name: Invalid value: "../../etc": a lowercase RFC 1123 label"#
            ),
            "{}",
            err.message
        );
        assert!(
            validate_names("web", &pod("ok"))
                .unwrap_err()
                .message
                .contains(r#"spec.volumes[1].name: Duplicate value: "ok""#)
        );
        assert!(
            validate_names("web", &json!({"spec": {"containers": [{"image": "x"}]}}))
                .unwrap_err()
                .message
                .contains("spec.containers[0].name: Required value")
        );
    }

    #[test]
    fn node_names_sub_paths_and_ephemeral_containers_are_refused_as_upstream() {
        let pod = json!({"spec": {"nodeName": "../node-1",
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [{"name": "c", "volumeMounts": [
                {"name": "data", "mountPath": "/a", "subPath": "../../etc"},
                {"name": "data", "mountPath": "/b", "subPath": "/etc"},
                {"name": "gone", "mountPath": "/c", "subPath": "x", "subPathExpr": "$(POD)"}]}],
            "ephemeralContainers": [{"name": "debug", "image": "busybox"}]}});
        let errors = spec_errors(&pod, true);
        assert!(
            errors[0].starts_with(r#"spec.nodeName: Invalid value: "../node-1": a lowercase RFC 1123 subdomain"#),
            "{errors:?}"
        );
        assert_eq!(
            errors[1..],
            [
                r#"spec.containers[0].volumeMounts[0].subPath: Invalid value: "../../etc": must not contain '..'"#,
                r#"spec.containers[0].volumeMounts[1].subPath: Invalid value: "/etc": must be a relative path"#,
                r#"spec.containers[0].volumeMounts[2].name: Not found: "gone""#,
                r#"spec.containers[0].volumeMounts[2].subPathExpr: Invalid value: "$(POD)": subPathExpr and subPath are mutually exclusive"#,
                "spec.ephemeralContainers: Forbidden: cannot be set on create",
            ]
        );
        assert!(spec_errors(&json!({"spec": {"nodeName": "NODE-1"}}), true)[0].contains("RFC 1123 subdomain"));
        let twice = json!({"spec": {"volumes": [{"name": "a"}, {"name": "b"}], "containers": [{"name": "c", "volumeMounts": [
            {"name": "a", "mountPath": "/x"}, {"name": "b", "mountPath": "/x"}]}]}});
        assert_eq!(
            spec_errors(&twice, true),
            [r#"spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/x": must be unique"#]
        );
        let fine = json!({"spec": {"nodeName": "node-1.example", "volumes": [{"name": "d"}],
            "containers": [{"name": "c", "volumeMounts": [{"name": "d", "mountPath": "/d", "subPath": "a/b..c"}]}]}});
        assert_eq!(spec_errors(&fine, true), Vec::<String>::new());
    }

    #[test]
    fn new_pods_get_upstreams_defaults() {
        let mut pod = json!({"spec": {
            "containers": [{"name": "a", "image": "r.io/app"}, {"name": "b", "image": "r.io:5000/app:1"},
                           {"name": "c", "image": format!("app@sha256:{}", "a".repeat(64))},
                           {"name": "d", "image": "app:latest", "imagePullPolicy": "Never"}],
            "volumes": [{"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}},
                                                                {"serviceAccountToken": {"path": "u", "expirationSeconds": 600}}]}},
                        {"name": "s", "secret": {"secretName": "x", "defaultMode": 256}}]}});
        default_pod(&mut pod);
        let policies: Vec<&str> =
            (0..4).map(|i| pod["spec"]["containers"][i]["imagePullPolicy"].as_str().unwrap()).collect();
        assert_eq!(policies, ["Always", "IfNotPresent", "IfNotPresent", "Never"]);
        assert_eq!(pod["spec"]["volumes"][0]["projected"]["defaultMode"], 420);
        assert_eq!(
            pod["spec"]["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3600
        );
        assert_eq!(
            pod["spec"]["volumes"][0]["projected"]["sources"][1]["serviceAccountToken"]["expirationSeconds"],
            600
        );
        assert_eq!(pod["spec"]["volumes"][1]["secret"]["defaultMode"], 256, "given values stay");
        assert_eq!(pod["spec"]["restartPolicy"], "Always");
        assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
    }

    #[test]
    fn only_upstreams_mutable_pod_fields_change() {
        let old = json!({"spec": {"nodeName": "n1", "serviceAccountName": "sa",
            "containers": [{"name": "c", "image": "a:1"}], "tolerations": [{"key": "a"}]}});
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = old.clone();
            f(&mut v);
            validate_pod_update("web", &old, &v)
        };
        assert_eq!(with(&|v| v["spec"]["containers"][0]["image"] = json!("a:2")), Ok(()));
        assert_eq!(with(&|v| v["spec"]["activeDeadlineSeconds"] = json!(5)), Ok(()));
        assert_eq!(with(&|v| v["spec"]["tolerations"] = json!([{"key": "a"}, {"key": "b"}])), Ok(()));
        let moved = with(&|v| v["spec"]["nodeName"] = json!("n2")).unwrap_err();
        assert!(
            moved.message.starts_with(r#"Pod "web" is invalid: spec: Forbidden: pod updates may not change fields"#)
        );
        assert!(with(&|v| v["spec"]["serviceAccountName"] = json!("admin")).is_err());
        assert!(with(&|v| v["spec"]["tolerations"] = json!([])).is_err());
        assert!(with(&|v| v["spec"]["containers"][0]["name"] = json!("d")).is_err());
        assert!(with(&|v| v["spec"]["volumes"] = json!([{"name": "x"}])).is_err());
    }

    #[test]
    fn pod_status_follows_the_kubelets_reasons() {
        let pod = |status: Value| json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}, "status": status});
        let cells = |p: &Value| pod_cells(p, 0);
        assert_eq!(cells(&pod(json!({"phase": "Pending"})))[1..3], [json!("0/2"), json!("Pending")]);
        let waiting = pod(json!({"phase": "Pending", "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ErrImagePull"}}},
            {"name": "b", "ready": true, "restartCount": 2, "state": {"running": {}}}]}));
        assert_eq!(cells(&waiting)[1..4], [json!("1/2"), json!("ErrImagePull"), json!("2")]);
        let crashed = pod(json!({"phase": "Running", "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 137, "signal": 9}}}]}));
        assert_eq!(cells(&crashed)[2], json!("Signal:9"));
        let init = json!({"metadata": {"name": "p"}, "spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "a"}]},
                          "status": {"phase": "Pending", "initContainerStatuses": [{"name": "i", "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]}});
        assert_eq!(cells(&init)[2], json!("Init:0/1"));
        let mut deleting = pod(json!({"phase": "Running"}));
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(cells(&deleting)[2], json!("Terminating"));
        assert_eq!(cells(&pod(json!({})))[5..7], [json!("<none>"), json!("<none>")]);
    }

    #[test]
    fn only_a_scheduled_pod_is_deleted_gracefully_and_its_grace_is_bounded() {
        let scheduled = json!({"spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 5}});
        assert_eq!(POD.graceful_delete(&scheduled, None), Some(5));
        assert_eq!(POD.graceful_delete(&scheduled, Some(0)), None, "a zero grace deletes at once");
        assert_eq!(POD.graceful_delete(&scheduled, Some(-3)), Some(1), "a negative grace is one second");
        assert_eq!(POD.graceful_delete(&scheduled, Some(i64::MAX)), Some(MAX_GRACE_SECONDS));
        assert_eq!(POD.graceful_delete(&json!({"spec": {}}), Some(30)), None, "unscheduled: at once");
        assert_eq!(POD.graceful_delete(&json!({"spec": {"nodeName": "n1"}}), None), Some(30));
    }
}
