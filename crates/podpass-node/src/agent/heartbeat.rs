//! Node registration and heartbeats (pkg/kubelet/kubelet_node_status.go, pkg/kubelet/nodelease):
//! the agent creates (or adopts) its Node, posts its status, and renews
//! `kube-node-lease/<node>` every 10 s with a 40 s duration.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use thiserror::Error;

use super::machine::Machine;
use super::pressure::Pressure;
use crate::api::RequestError;

/// The namespace of node leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// `leaseDurationSeconds` (kubelet default `nodeLeaseDurationSeconds`).
pub const LEASE_DURATION_SECONDS: i32 = 40;
/// Renew interval: 25% of the lease duration, as the kubelet.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// Node status is posted at least this often (`nodeStatusReportFrequency`).
pub const STATUS_REPORT_INTERVAL: Duration = Duration::from_secs(300);

/// What the agent reports about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    /// The Node's name.
    pub name: String,
    /// `nodeInfo.kubeletVersion`.
    pub version: String,
    /// The machine: capacity, allocatable and the rest of `nodeInfo`.
    pub machine: Machine,
    /// `containerd://1.6.20` when the node runs containers; `None` when it only prepares
    /// pods.
    pub container_runtime: Option<String>,
    /// The node's address (`InternalIP`).
    pub address: std::net::IpAddr,
    /// The node's HTTPS port (`daemonEndpoints.kubeletEndpoint.Port`; 0: none).
    pub port: u16,
}

impl NodeIdentity {
    /// The address the Node reports as `InternalIP` and its pods as `hostIP`: the node's
    /// address, or loopback when it listens on every address.
    pub fn internal_ip(&self) -> String {
        if self.address.is_unspecified() { "127.0.0.1".into() } else { self.address.to_string() }
    }

    /// The Node's `status.addresses`: its `InternalIP` and its `Hostname` (its name), which
    /// its serving certificate names too.
    pub fn addresses(&self) -> Vec<NodeAddress> {
        vec![
            NodeAddress { type_: "InternalIP".into(), address: self.internal_ip() },
            NodeAddress { type_: "Hostname".into(), address: self.name.clone() },
        ]
    }
}

fn go_os() -> &'static str {
    std::env::consts::OS
}

/// Go's `GOARCH` for this machine.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The Node object the agent registers (`initialNode`): hostname/os/arch labels.
pub fn initial_node(id: &NodeIdentity) -> Node {
    let labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", id.name.as_str()),
        ("kubernetes.io/os", go_os()),
        ("kubernetes.io/arch", go_arch()),
        ("beta.kubernetes.io/os", go_os()),
        ("beta.kubernetes.io/arch", go_arch()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    Node {
        metadata: ObjectMeta { name: Some(id.name.clone()), labels: Some(labels), ..Default::default() },
        ..Default::default()
    }
}

/// The status the agent posts: capacity and allocatable, addresses, node info and the
/// kubelet's conditions (see [`conditions`]).
pub fn node_status(id: &NodeIdentity, now: Timestamp, pressure: Pressure, previous: &[NodeCondition]) -> NodeStatus {
    let m = &id.machine;
    NodeStatus {
        capacity: Some(m.capacity()),
        allocatable: Some(m.allocatable()),
        addresses: Some(id.addresses()),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: i32::from(id.port) }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: go_arch().into(),
            operating_system: go_os().into(),
            kubelet_version: id.version.clone(),
            kube_proxy_version: String::new(),
            container_runtime_version: id.container_runtime.clone().unwrap_or_default(),
            kernel_version: m.kernel_version.clone(),
            os_image: m.os_image.clone(),
            machine_id: m.machine_id.clone(),
            system_uuid: m.system_uuid.clone(),
            boot_id: m.boot_id.clone(),
            ..Default::default()
        }),
        conditions: Some(conditions(id, pressure, previous, now)),
        ..Default::default()
    }
}

/// The kubelet's conditions in its order — `MemoryPressure`, `DiskPressure`, `PIDPressure`
/// (upstream's reasons and messages) and a `Ready` that says what this node is: the
/// kubelet's, or one that prepares pods (identity, credentials, images, volumes) and runs
/// no containers. A condition whose status is what `previous` says keeps its
/// `lastTransitionTime`; `lastHeartbeatTime` is `now`.
pub fn conditions(
    id: &NodeIdentity,
    pressure: Pressure,
    previous: &[NodeCondition],
    now: Timestamp,
) -> Vec<NodeCondition> {
    let pressure_condition = |type_: &str, under: bool, yes: (&str, &str), no: (&str, &str)| {
        let (reason, message) = if under { yes } else { no };
        (type_.to_owned(), under, reason.to_owned(), message.to_owned())
    };
    let runs = id.container_runtime.is_some();
    let ready_message = if runs {
        "podpass node agent is posting ready status"
    } else {
        "podpass node agent is posting ready status; it prepares pods but runs no containers"
    };
    [
        pressure_condition(
            "MemoryPressure",
            pressure.memory,
            ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
            ("KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ),
        pressure_condition(
            "DiskPressure",
            pressure.disk,
            ("KubeletHasDiskPressure", "kubelet has disk pressure"),
            ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ),
        pressure_condition(
            "PIDPressure",
            pressure.pid,
            ("KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
            ("KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ),
        (
            "Ready".to_owned(),
            true,
            if runs { "KubeletReady" } else { "PodpassReady" }.to_owned(),
            ready_message.to_owned(),
        ),
    ]
    .into_iter()
    .map(|(type_, true_, reason, message)| {
        let status = if true_ { "True" } else { "False" }.to_owned();
        let kept = previous
            .iter()
            .find(|p| p.type_ == type_ && p.status == status)
            .and_then(|p| p.last_transition_time.clone());
        NodeCondition {
            type_,
            status,
            reason: Some(reason),
            message: Some(message),
            last_heartbeat_time: Some(Time(now)),
            last_transition_time: Some(kept.unwrap_or(Time(now))),
        }
    })
    .collect()
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// A heartbeat step failed: what it was doing, on which object, and the API's answer.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{action} {object}: {source}")]
pub struct HeartbeatError {
    /// `registering node`, `reading node`, `posting status of node`, `renewing lease`.
    pub action: &'static str,
    /// The node or lease.
    pub object: String,
    /// The API's answer.
    pub source: RequestError,
}

fn failed<'a>(action: &'static str, object: &'a str) -> impl FnOnce(kube::Error) -> HeartbeatError + 'a {
    move |e| HeartbeatError { action, object: object.to_owned(), source: RequestError::from(e) }
}

/// Creates the Node if it does not exist and posts its status (no pressure yet: the
/// eviction manager's first observation follows at once); returns the Node's UID.
pub async fn register_node(client: &kube::Client, id: &NodeIdentity) -> Result<String, HeartbeatError> {
    let nodes = Api::<Node>::all(client.clone());
    let node = match nodes.get(&id.name).await {
        Ok(n) => n,
        Err(e) if not_found(&e) => nodes
            .create(&PostParams::default(), &initial_node(id))
            .await
            .map_err(failed("registering node", &id.name))?,
        Err(e) => return Err(failed("reading node", &id.name)(e)),
    };
    post_status(client, id, Pressure::default()).await?;
    Ok(node.metadata.uid.unwrap_or_default())
}

/// Posts the node's status (merge patch of `nodes/<name>/status`), with the pressure the
/// eviction manager reports and the transition times of the conditions the Node holds.
pub async fn post_status(client: &kube::Client, id: &NodeIdentity, pressure: Pressure) -> Result<(), HeartbeatError> {
    let nodes = Api::<Node>::all(client.clone());
    let current = nodes.get(&id.name).await.map_err(failed("reading node", &id.name))?;
    let previous = current.status.and_then(|s| s.conditions).unwrap_or_default();
    let status = node_status(id, Timestamp::now(), pressure, &previous);
    let patch = serde_json::json!({"status": status});
    Api::<Node>::all(client.clone())
        .patch_status(&id.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(failed("posting status of node", &id.name))
}

/// The node's Lease as the kubelet writes it (holder = node, owned by the Node).
pub fn lease(id: &NodeIdentity, node_uid: &str, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(id.name.clone()),
            namespace: Some(NODE_LEASE_NAMESPACE.into()),
            owner_references: (!node_uid.is_empty()).then(|| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: id.name.clone(),
                    uid: node_uid.to_owned(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(id.name.clone()),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// Renews the lease once (creating it when missing).
pub async fn renew_lease(client: &kube::Client, id: &NodeIdentity, node_uid: &str) -> Result<(), HeartbeatError> {
    let leases = Api::<Lease>::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    let now = Timestamp::now();
    match leases.get(&id.name).await {
        Ok(mut current) => {
            let spec = current.spec.get_or_insert_with(Default::default);
            spec.holder_identity = Some(id.name.clone());
            spec.lease_duration_seconds = Some(LEASE_DURATION_SECONDS);
            spec.renew_time = Some(MicroTime(now));
            leases.replace(&id.name, &PostParams::default(), &current).await.map(|_| ())
        }
        Err(e) if not_found(&e) => leases.create(&PostParams::default(), &lease(id, node_uid, now)).await.map(|_| ()),
        Err(e) => Err(e),
    }
    .map_err(failed("renewing lease", &format!("{NODE_LEASE_NAMESPACE}/{}", id.name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_and_lease_look_as_the_kubelets() {
        let machine =
            Machine { cpus: 2, memory_bytes: 8 << 30, ephemeral_bytes: 100 << 30, max_pods: 110, ..Machine::default() };
        let id = NodeIdentity {
            name: "n1".into(),
            version: "v1.34.0".into(),
            machine,
            container_runtime: Some("containerd://1.6.20".into()),
            address: std::net::IpAddr::from([127, 0, 0, 1]),
            port: 10250,
        };
        let node = initial_node(&id);
        let labels = node.metadata.labels.unwrap_or_default();
        assert_eq!(labels.get("kubernetes.io/hostname").map(String::as_str), Some("n1"));
        assert!(labels.contains_key("kubernetes.io/os") && labels.contains_key("kubernetes.io/arch"));
        let now = Timestamp::from_second(1_700_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let status = node_status(&id, now, Pressure::default(), &[]);
        let allocatable = status.allocatable.clone().unwrap_or_default();
        assert_eq!(allocatable["pods"].0, "110");
        assert_eq!(status.capacity.clone().unwrap_or_default()["memory"].0, "8Gi");
        let endpoints = status.daemon_endpoints.clone().unwrap_or_default();
        assert_eq!(endpoints.kubelet_endpoint.map(|e| e.port), Some(10250));
        assert_eq!(status.addresses.clone().unwrap_or_default()[0].address, "127.0.0.1");
        let info = status.node_info.clone().unwrap_or_default();
        assert_eq!(info.container_runtime_version, "containerd://1.6.20");
        let first = status.conditions.unwrap_or_default();
        let kinds: Vec<(&str, &str)> = first.iter().map(|c| (c.type_.as_str(), c.status.as_str())).collect();
        assert_eq!(
            kinds,
            [("MemoryPressure", "False"), ("DiskPressure", "False"), ("PIDPressure", "False"), ("Ready", "True")]
        );
        assert_eq!(first[0].reason.as_deref(), Some("KubeletHasSufficientMemory"));
        assert_eq!(first[1].message.as_deref(), Some("kubelet has no disk pressure"));
        assert_eq!(first[3].reason.as_deref(), Some("KubeletReady"));
        // a later heartbeat keeps the transition time of what did not change
        let later = Timestamp::from_second(1_700_000_100).unwrap_or(Timestamp::UNIX_EPOCH);
        let under_memory = Pressure { memory: true, ..Pressure::default() };
        let next = conditions(&id, under_memory, &first, later);
        let time = |c: &NodeCondition| c.last_transition_time.clone().map(|t| t.0);
        assert_eq!((next[0].status.as_str(), time(&next[0])), ("True", Some(later)), "MemoryPressure changed");
        assert_eq!(next[0].reason.as_deref(), Some("KubeletHasInsufficientMemory"));
        assert_eq!((time(&next[1]), time(&next[3])), (Some(now), Some(now)), "the rest kept their time");
        assert!(next.iter().all(|c| c.last_heartbeat_time.clone().map(|t| t.0) == Some(later)));
        let l = lease(&id, "uid-1", now);
        let spec = l.spec.unwrap_or_default();
        assert_eq!(spec.holder_identity.as_deref(), Some("n1"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert_eq!(l.metadata.namespace.as_deref(), Some("kube-node-lease"));
        assert_eq!(l.metadata.owner_references.unwrap_or_default()[0].uid, "uid-1");
        assert_eq!(RENEW_INTERVAL.as_secs() * 4, 40);
    }
}
