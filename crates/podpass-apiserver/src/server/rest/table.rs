//! Server-side printing (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`): the
//! columns kube-apiserver's printers give each kind (pkg/printers/internalversion), so
//! `kubectl get` looks as it does against any cluster. Every column is sent, the `-o wide`
//! ones with priority 1 (kubectl hides them otherwise); each row carries the object's
//! metadata as a PartialObjectMetadata (`includeObject=Metadata`, the default), the whole
//! object (`Object`) or nothing (`None`).

use serde_json::{Value, json};

use crate::field::Field;

/// Whether `accept` asks for a Table (meta.k8s.io v1 or v1beta1) before plain JSON.
pub fn wants_table(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    for media in accept.split(',') {
        let mut parts = media.split(';').map(str::trim);
        let base = parts.next().unwrap_or("");
        let params: Vec<&str> = parts.collect();
        let table = params.contains(&"as=Table") && params.contains(&"g=meta.k8s.io");
        if base == "application/json" && table {
            return true;
        }
        if base == "application/json" || base == "*/*" {
            // Plain JSON comes first: the client prefers it.
            return false;
        }
    }
    false
}

/// `includeObject`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object in the rows.
    None,
    /// PartialObjectMetadata (the default).
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// From the query parameter (unknown values are upstream's 400).
    pub fn parse(value: Option<&str>) -> Result<Self, String> {
        match value {
            None | Some("" | "Metadata") => Ok(Self::Metadata),
            Some("None") => Ok(Self::None),
            Some("Object") => Ok(Self::Object),
            Some(other) => Err(format!(
                "includeObject: Unsupported value: {other:?}: supported values: \"None\", \"Metadata\", \"Object\""
            )),
        }
    }
}

/// kube's duration.HumanDuration: how kubectl shows an age.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{days}d", hours / 24 / 365) };
    }
    format!("{}y", hours / 24 / 365)
}

fn text<'a>(object: &'a Value, path: &str) -> &'a str {
    object.field(path).and_then(Value::as_str).unwrap_or("")
}

fn or_none(s: &str) -> String {
    if s.is_empty() { "<none>".into() } else { s.to_owned() }
}

/// translateTimestampSince: the age of an RFC 3339 time, `<unknown>` when unset.
fn age(object: &Value, path: &str, now: i64) -> String {
    match crate::time::parse_rfc3339(text(object, path)) {
        Some(t) => human_duration(now - t),
        None => "<unknown>".into(),
    }
}

fn column(name: &str, kind: &str, format: &str, description: &str, priority: u8) -> Value {
    json!({"name": name, "type": kind, "format": format, "description": description, "priority": priority})
}

fn name_column() -> Value {
    column("Name", "string", "name", "Name must be unique within a namespace.", 0)
}

fn age_column() -> Value {
    column(
        "Age",
        "string",
        "",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
        0,
    )
}

/// `[name, middle…, age]`: the shape of most kinds' rows.
fn name_middle_age(o: &Value, middle: Vec<Value>, now: i64) -> Vec<Value> {
    let mut cells = vec![json!(text(o, "/metadata/name"))];
    cells.extend(middle);
    cells.push(json!(age(o, "/metadata/creationTimestamp", now)));
    cells
}

fn count(object: &Value, path: &str) -> usize {
    match object.field(path) {
        Some(Value::Array(a)) => a.len(),
        Some(Value::Object(m)) => m.len(),
        _ => 0,
    }
}

/// Columns and cells of `plural` (kube-apiserver's printers); `None`: the default table.
/// Name and Created At: roles' columns, and the default table of upstream's
/// TableConvertor for kinds without a printer.
fn name_created_at() -> (Vec<Value>, Cells) {
    (
        vec![
            name_column(),
            column(
                "Created At",
                "date",
                "",
                "CreationTimestamp is a timestamp representing the server time when this object was created.",
                0,
            ),
        ],
        |o, _| vec![json!(text(o, "/metadata/name")), json!(text(o, "/metadata/creationTimestamp"))],
    )
}

/// The cells of one object's row at a time (Unix seconds).
type Cells = fn(&Value, i64) -> Vec<Value>;

fn printer(plural: &str) -> Option<(Vec<Value>, Cells)> {
    Some(match plural {
        "pods" => (
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
        ),
        "nodes" => (
            vec![
                name_column(),
                column("Status", "string", "", "The status of the node", 0),
                column("Roles", "string", "", "The roles of the node", 0),
                age_column(),
                column("Version", "string", "", "Kubelet Version reported by the node.", 0),
                column(
                    "Internal-IP",
                    "string",
                    "",
                    "List of addresses reachable to the node. Queried from cloud provider, if available.",
                    1,
                ),
                column(
                    "External-IP",
                    "string",
                    "",
                    "List of addresses reachable to the node. Queried from cloud provider, if available.",
                    1,
                ),
                column(
                    "OS-Image",
                    "string",
                    "",
                    "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
                    1,
                ),
                column(
                    "Kernel-Version",
                    "string",
                    "",
                    "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
                    1,
                ),
                column(
                    "Container-Runtime",
                    "string",
                    "",
                    "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
                    1,
                ),
            ],
            node_cells,
        ),
        "namespaces" => (
            vec![name_column(), column("Status", "string", "", "The status of the namespace", 0), age_column()],
            |o, now| name_middle_age(o, vec![json!(text(o, "/status/phase"))], now),
        ),
        "serviceaccounts" => (
            vec![
                name_column(),
                column(
                    "Secrets",
                    "string",
                    "",
                    "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
                    0,
                ),
                age_column(),
            ],
            |o, now| name_middle_age(o, vec![json!(count(o, "/secrets"))], now),
        ),
        "secrets" => (
            vec![
                name_column(),
                column("Type", "string", "", "The type of data stored in the secret", 0),
                column("Data", "string", "", "The number of entries in the secret", 0),
                age_column(),
            ],
            |o, now| {
                let data = count(o, "/data") + count(o, "/stringData");
                name_middle_age(o, vec![json!(text(o, "/type")), json!(data)], now)
            },
        ),
        "configmaps" => (
            vec![
                name_column(),
                column("Data", "string", "", "The number of entries in the configmap", 0),
                age_column(),
            ],
            |o, now| {
                let data = count(o, "/data") + count(o, "/binaryData");
                vec![json!(text(o, "/metadata/name")), json!(data), json!(age(o, "/metadata/creationTimestamp", now))]
            },
        ),
        "leases" => (
            vec![name_column(), column("Holder", "string", "", "The holder of the lease", 0), age_column()],
            |o, now| name_middle_age(o, vec![json!(or_none(text(o, "/spec/holderIdentity")))], now),
        ),
        "roles" | "clusterroles" => name_created_at(),
        "rolebindings" | "clusterrolebindings" => (
            vec![
                name_column(),
                column("Role", "string", "", "Role of the binding", 0),
                age_column(),
                column("Users", "string", "", "Users in the binding", 1),
                column("Groups", "string", "", "Groups in the binding", 1),
                column("ServiceAccounts", "string", "", "ServiceAccounts in the binding", 1),
            ],
            binding_cells,
        ),
        "events" => (
            vec![
                column("Last Seen", "string", "", "Time when last occurrence of this event was recorded", 0),
                column(
                    "Type",
                    "string",
                    "",
                    "Type of this event (Normal, Warning), new types could be added in the future.",
                    0,
                ),
                column(
                    "Reason",
                    "string",
                    "",
                    "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
                    0,
                ),
                column("Object", "string", "", "The object that this event is about.", 0),
                column("Subobject", "string", "", "The field of the object that this event is about.", 1),
                column(
                    "Source",
                    "string",
                    "",
                    "The component reporting this event. Should be a short machine understandable string.",
                    1,
                ),
                column("Message", "string", "", "A human-readable description of the status of this operation.", 0),
                column(
                    "First Seen",
                    "string",
                    "",
                    "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
                    1,
                ),
                column("Count", "string", "", "The number of times this event has occurred.", 1),
                // Upstream's event printer shows the name with -o wide only.
                column("Name", "string", "name", "Name must be unique within a namespace.", 1),
            ],
            event_cells,
        ),
        _ => return None,
    })
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

/// printNode: Ready / NotReady / Unknown, SchedulingDisabled; roles from labels.
fn node_cells(node: &Value, now: i64) -> Vec<Value> {
    let mut status: Vec<String> = Vec::new();
    if let Some(ready) =
        node.field("/status/conditions").and_then(Value::as_array).and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
    {
        status.push(if ready["status"] == "True" { "Ready".into() } else { "NotReady".into() });
    }
    if status.is_empty() {
        status.push("Unknown".into());
    }
    if node.field("/spec/unschedulable").and_then(Value::as_bool).unwrap_or(false) {
        status.push("SchedulingDisabled".into());
    }
    let mut roles: Vec<String> = Vec::new();
    if let Some(Value::Object(labels)) = node.field("/metadata/labels") {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/").filter(|r| !r.is_empty()) {
                roles.push(role.to_owned());
            } else if k == "kubernetes.io/role"
                && let Some(v) = v.as_str().filter(|v| !v.is_empty())
            {
                roles.push(v.to_owned());
            }
        }
    }
    roles.sort();
    roles.dedup();
    let address = |kind: &str| {
        node.field("/status/addresses")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|a| a["type"] == kind))
            .and_then(|a| a["address"].as_str())
            .unwrap_or("")
            .to_owned()
    };
    vec![
        json!(text(node, "/metadata/name")),
        json!(status.join(",")),
        json!(if roles.is_empty() { "<none>".into() } else { roles.join(",") }),
        json!(age(node, "/metadata/creationTimestamp", now)),
        json!(text(node, "/status/nodeInfo/kubeletVersion")),
        json!(or_none(&address("InternalIP"))),
        json!(or_none(&address("ExternalIP"))),
        json!(if text(node, "/status/nodeInfo/osImage").is_empty() {
            "<unknown>"
        } else {
            text(node, "/status/nodeInfo/osImage")
        }),
        json!(if text(node, "/status/nodeInfo/kernelVersion").is_empty() {
            "<unknown>"
        } else {
            text(node, "/status/nodeInfo/kernelVersion")
        }),
        json!(if text(node, "/status/nodeInfo/containerRuntimeVersion").is_empty() {
            "<unknown>"
        } else {
            text(node, "/status/nodeInfo/containerRuntimeVersion")
        }),
    ]
}

fn binding_cells(binding: &Value, now: i64) -> Vec<Value> {
    let empty = Vec::new();
    let subjects = binding["subjects"].as_array().unwrap_or(&empty);
    let of = |kind: &str| -> String {
        let names: Vec<String> = subjects
            .iter()
            .filter(|s| s["kind"] == kind)
            .map(|s| match (kind, s["namespace"].as_str()) {
                ("ServiceAccount", Some(ns)) => format!("{ns}/{}", s["name"].as_str().unwrap_or("")),
                _ => s["name"].as_str().unwrap_or("").to_owned(),
            })
            .collect();
        names.join(", ")
    };
    vec![
        json!(text(binding, "/metadata/name")),
        json!(format!("{}/{}", text(binding, "/roleRef/kind"), text(binding, "/roleRef/name"))),
        json!(age(binding, "/metadata/creationTimestamp", now)),
        json!(of("User")),
        json!(of("Group")),
        json!(of("ServiceAccount")),
    ]
}

/// printEvent.
fn event_cells(event: &Value, now: i64) -> Vec<Value> {
    let first = ["/firstTimestamp", "/eventTime", "/metadata/creationTimestamp"]
        .iter()
        .find_map(|p| crate::time::parse_rfc3339(text(event, p)));
    let last = ["/series/lastObservedTime", "/lastTimestamp", "/eventTime"]
        .iter()
        .find_map(|p| crate::time::parse_rfc3339(text(event, p)))
        .or(first);
    let since = |t: Option<i64>| t.map_or_else(|| "<unknown>".to_owned(), |t| human_duration(now - t));
    let mut source = text(event, "/source/component").to_owned();
    if source.is_empty() {
        source = text(event, "/reportingComponent").to_owned();
    }
    if !text(event, "/source/host").is_empty() {
        source = format!("{source}, {}", text(event, "/source/host"));
    }
    let count = event["series"]["count"].as_i64().or_else(|| event["count"].as_i64()).unwrap_or(1);
    let object =
        format!("{}/{}", text(event, "/involvedObject/kind").to_lowercase(), text(event, "/involvedObject/name"));
    let last_seen = if count > 1 { format!("{} (x{count} over {})", since(last), since(first)) } else { since(last) };
    vec![
        json!(last_seen),
        json!(text(event, "/type")),
        json!(text(event, "/reason")),
        json!(object),
        json!(text(event, "/involvedObject/fieldPath")),
        json!(source),
        json!(text(event, "/message").trim()),
        json!(since(first)),
        json!(count),
        json!(text(event, "/metadata/name")),
    ]
}

fn row_object(object: &Value, include: IncludeObject) -> Value {
    match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Object => object.clone(),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
    }
}

/// The Table of `objects` of `plural`, at `resource_version`.
pub fn table(plural: &str, objects: &[Value], resource_version: &str, include: IncludeObject, now: i64) -> Value {
    let (columns, cells) = printer(plural).unwrap_or_else(name_created_at);
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut row = json!({"cells": cells(o, now)});
            if include != IncludeObject::None {
                row["object"] = row_object(o, include);
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_show_their_name_only_wide_as_upstreams_printer() {
        let t = table("events", &[], "1", IncludeObject::None, 0);
        let default: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["priority"] == 0)
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(default, ["Last Seen", "Type", "Reason", "Object", "Message"]);
    }

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        for (s, expected) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (8 * 3600, "8h"),
            (49 * 3600, "2d1h"),
            (10 * 86400, "10d"),
            (800 * 86400, "2y70d"),
            (3000 * 86400, "8y"),
        ] {
            assert_eq!(human_duration(s), expected, "{s}");
        }
    }

    #[test]
    fn table_is_asked_only_before_plain_json() {
        assert!(wants_table(Some(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        )));
        assert!(!wants_table(Some("application/json")));
        assert!(!wants_table(Some("application/json, application/json;as=Table;v=v1;g=meta.k8s.io")));
        assert!(!wants_table(None));
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
    fn nodes_show_readiness_roles_and_version() {
        let node = json!({"metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
                          "spec": {"unschedulable": true},
                          "status": {"conditions": [{"type": "Ready", "status": "False"}], "nodeInfo": {"kubeletVersion": "v1.34.0"}}});
        assert_eq!(
            node_cells(&node, 0)[1..5],
            [json!("NotReady,SchedulingDisabled"), json!("control-plane"), json!("<unknown>"), json!("v1.34.0")]
        );
    }
}
