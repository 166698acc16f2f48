//! Node (pkg/registry/core/node): a `/status` subresource the node writes, and upstream's
//! printer. What a node may write of its own Node object is NodeRestriction's (see
//! `admission`).

use serde_json::{Value, json};

use super::super::table::{age, age_column, column, name_column, or_none, text};
use super::{Printer, Strategy};
use crate::field::Field;

/// The node strategy.
pub(crate) struct Node;

/// Registered in the resource table.
pub(crate) static NODE: Node = Node;

/// The resource.
pub(crate) const RESOURCE: super::Resource = super::Resource::stored(
    super::Names { group: "", kind: "Node", plural: "nodes", singular: "node" },
    &NODE,
    &super::types::TypeOf::<k8s_openapi::api::core::v1::Node>::NEW,
)
.cluster_scoped()
.with_short_names(&["no"]);

impl Strategy for Node {
    fn prepare_for_update(&self, object: &mut Value, old: &Value) {
        super::namespace::keep_status(object, old);
    }

    fn subresources(&self) -> &'static [super::Subresource] {
        const SUBRESOURCES: [super::Subresource; 1] = [super::status("Node")];
        &SUBRESOURCES
    }

    fn printer(&self) -> Option<Printer> {
        Some((
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
        ))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
