//! Which pods back a Service, and on which ports — what the Endpoints and EndpointSlice
//! controllers share (`pkg/controller/util/endpoint`, `podutil.FindPort`): a pod its
//! selector picks, with an IP, not finished for good; ready as its `Ready` condition says
//! (or always, with `publishNotReadyAddresses`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::runtime::reflector::{ObjectRef, Store};

/// One port of a backend, as both kinds carry it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct BackendPort {
    /// The Service port's name.
    pub name: Option<String>,
    /// The pod's port number it resolves to.
    pub port: i32,
    /// Its protocol.
    pub protocol: String,
    /// Its application protocol.
    pub app_protocol: Option<String>,
}

/// A pod backing a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Backend {
    /// The pod's name.
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// Its IP.
    pub ip: String,
    /// Its node.
    pub node: Option<String>,
    /// `hostname` when the pod names this Service as its subdomain.
    pub hostname: Option<String>,
    /// Ready (its `Ready` condition, or the Service publishes not-ready addresses), and
    /// not terminating.
    pub ready: bool,
    /// Ready whatever its termination (EndpointSlice `serving`).
    pub serving: bool,
    /// Being deleted.
    pub terminating: bool,
    /// The Service's ports this pod resolves, in the Service's order.
    pub ports: Vec<BackendPort>,
}

impl Backend {
    /// The reference to its pod (in `namespace`) both kinds carry as `targetRef`.
    pub(crate) fn pod_reference(&self, namespace: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some(namespace.to_owned()),
            name: Some(self.name.clone()),
            uid: Some(self.uid.clone()),
            ..Default::default()
        }
    }
}

/// The Services of `namespace` in `services`: those a pod there may concern (one whose
/// selector no longer picks a relabelled pod must drop it too, so all of them).
pub(crate) fn services_in(namespace: &str, services: &Store<Service>) -> Vec<ObjectRef<Service>> {
    let state = services.state();
    let matching = state.iter().filter(|s| s.metadata.namespace.as_deref() == Some(namespace));
    matching.map(|s| ObjectRef::from_obj(s.as_ref())).collect()
}

/// Whether the Service's selector picks the pod: every pair present. A Service without a
/// selector picks none (its endpoints are the user's).
pub(crate) fn selects(selector: Option<&BTreeMap<String, String>>, labels: Option<&BTreeMap<String, String>>) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else { return false };
    selector.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// `podutil.IsPodReady`.
fn pod_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref()).into_iter().flatten();
    conditions.into_iter().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// `ShouldPodBeInEndpoints`: an IP, and not finished for good under its restart policy;
/// a terminating pod only when `include_terminating`.
fn in_endpoints(pod: &Pod, include_terminating: bool) -> bool {
    let status = pod.status.as_ref();
    if status.and_then(|s| s.pod_ip.as_deref()).is_none_or(str::is_empty) {
        return false;
    }
    if !include_terminating && pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or_default();
    match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()).unwrap_or("Always") {
        "Never" => phase != "Failed" && phase != "Succeeded",
        "OnFailure" => phase != "Succeeded",
        _ => true,
    }
}

/// `podutil.FindPort`: a number as is; a name as the container port of that name and
/// protocol; `None` when the pod has no such port.
fn find_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    let protocol = port.protocol.as_deref().unwrap_or("TCP");
    match port.target_port.as_ref() {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
            let ports = containers.iter().flat_map(|c| c.ports.iter().flatten());
            let mut ports = ports;
            ports
                .find(|p| p.name.as_deref() == Some(name) && p.protocol.as_deref().unwrap_or("TCP") == protocol)
                .map(|p| p.container_port)
        }
    }
}

/// The pods backing `service`, sorted by name; terminating ones only when
/// `include_terminating` (the EndpointSlice controller includes them, marked).
pub(crate) fn backends(service: &Service, pods: &[&Pod], include_terminating: bool) -> Vec<Backend> {
    let spec = service.spec.clone().unwrap_or_default();
    let service_name = service.metadata.name.clone().unwrap_or_default();
    let publish = spec.publish_not_ready_addresses.unwrap_or(false);
    let mut backends: Vec<Backend> = pods
        .iter()
        .filter(|pod| selects(spec.selector.as_ref(), pod.metadata.labels.as_ref()))
        .filter(|pod| in_endpoints(pod, include_terminating))
        .map(|pod| {
            let pod_spec = pod.spec.clone().unwrap_or_default();
            let terminating = pod.metadata.deletion_timestamp.is_some();
            let serving = publish || pod_ready(pod);
            let ports = spec
                .ports
                .iter()
                .flatten()
                .filter_map(|p| {
                    Some(BackendPort {
                        name: p.name.clone(),
                        port: find_port(pod, p)?,
                        protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                        app_protocol: p.app_protocol.clone(),
                    })
                })
                .collect();
            let hostname = match (&pod_spec.hostname, &pod_spec.subdomain) {
                (Some(h), Some(sub)) if !h.is_empty() && *sub == service_name => Some(h.clone()),
                _ => None,
            };
            Backend {
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                ip: pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default(),
                node: pod_spec.node_name.clone(),
                hostname,
                ready: serving && (publish || !terminating),
                serving,
                terminating,
                ports,
            }
        })
        .collect();
    backends.sort_by(|a, b| a.name.cmp(&b.name));
    backends
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::{Value, json};

    pub(crate) fn pod(name: &str, labels: Value, ip: &str, ready: bool, extra: Value) -> Pod {
        let mut pod = json!({"metadata": {"name": name, "namespace": "team", "uid": format!("uid-{name}"), "labels": labels},
            "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "x",
                "ports": [{"name": "web", "containerPort": 9000}, {"name": "dns", "containerPort": 53, "protocol": "UDP"}]}]},
            "status": {"phase": "Running", "podIP": ip,
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
        crate::service_pods::tests::merge(&mut pod, extra);
        serde_json::from_value(pod).unwrap()
    }

    pub(crate) fn merge(into: &mut Value, extra: Value) {
        match (into, extra) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (slot, v) => *slot = v,
        }
    }

    pub(crate) fn service(spec: Value) -> Service {
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "team"}, "spec": spec})).unwrap()
    }

    #[test]
    fn backends_are_the_selected_running_pods_with_their_resolved_ports() {
        let svc = service(json!({"selector": {"app": "web"}, "ports": [
            {"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"},
            {"name": "num", "port": 81, "targetPort": 8081, "protocol": "TCP"},
            {"name": "dns", "port": 53, "targetPort": "dns", "protocol": "TCP"}]}));
        let pods = [
            pod("b", json!({"app": "web"}), "127.1.0.2", false, json!({})),
            pod("a", json!({"app": "web", "x": "y"}), "127.1.0.1", true, json!({})),
            pod("other", json!({"app": "db"}), "127.1.0.3", true, json!({})),
            pod("no-ip", json!({"app": "web"}), "", true, json!({})),
            pod(
                "done",
                json!({"app": "web"}),
                "127.1.0.4",
                false,
                json!({"spec": {"restartPolicy": "Never"}, "status": {"phase": "Succeeded"}}),
            ),
            pod(
                "going",
                json!({"app": "web"}),
                "127.1.0.5",
                true,
                json!({"metadata": {"deletionTimestamp": "2026-12-02T00:00:00Z"}}),
            ),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let found = backends(&svc, &refs, false);
        assert_eq!(found.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert!(found[0].ready && !found[1].ready);
        // `dns` names a UDP container port: no TCP port of that name, so not resolved.
        assert_eq!(
            found[0].ports.iter().map(|p| (p.name.as_deref().unwrap(), p.port)).collect::<Vec<_>>(),
            [("http", 9000), ("num", 8081)]
        );
        let with_terminating = backends(&svc, &refs, true);
        let going = with_terminating.iter().find(|b| b.name == "going").unwrap();
        assert!(going.terminating && going.serving && !going.ready);
        // No selector: none (the Service's endpoints are its user's).
        assert!(backends(&service(json!({"ports": [{"port": 80}]})), &refs, false).is_empty());
        let publish =
            service(json!({"selector": {"app": "web"}, "publishNotReadyAddresses": true, "ports": [{"port": 80}]}));
        assert!(backends(&publish, &refs, false).iter().all(|b| b.ready));
    }
}
