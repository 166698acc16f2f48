//! The Endpoints object a Service should have (`syncService` of
//! pkg/controller/endpoint): its backends' addresses, ready or not, under the ports each
//! resolves, repacked so that addresses with the same ports share a subset
//! (`RepackSubsets`), capped at [`MAX_ADDRESSES`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset, Service};

use crate::service_pods::{Backend, BackendPort};

/// At most this many addresses are kept (`maxCapacity`); the rest are cut and the object
/// says so.
pub(crate) const MAX_ADDRESSES: usize = 1000;
/// The annotation saying addresses were cut.
pub(crate) const OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";
/// The label a headless Service's endpoints carry.
pub(crate) const HEADLESS: &str = "service.kubernetes.io/headless";

/// What the Endpoints object should say.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Desired {
    /// Its subsets.
    pub subsets: Vec<EndpointSubset>,
    /// Its labels: the Service's, and [`HEADLESS`] for a headless one.
    pub labels: BTreeMap<String, String>,
    /// Whether addresses were cut.
    pub truncated: bool,
}

fn address(namespace: &str, b: &Backend) -> EndpointAddress {
    EndpointAddress {
        ip: b.ip.clone(),
        hostname: b.hostname.clone(),
        node_name: b.node.clone(),
        target_ref: Some(b.pod_reference(namespace)),
    }
}

fn port(p: &BackendPort) -> EndpointPort {
    EndpointPort {
        name: p.name.clone().filter(|n| !n.is_empty()),
        port: p.port,
        protocol: Some(p.protocol.clone()),
        app_protocol: p.app_protocol.clone(),
    }
}

/// The Endpoints of `service` from its backends.
pub(crate) fn desired(service: &Service, backends: &[Backend]) -> Desired {
    let namespace = service.metadata.namespace.clone().unwrap_or_default();
    let spec = service.spec.clone().unwrap_or_default();
    let headless = spec.cluster_ip.as_deref() == Some("None");
    let portless = spec.ports.as_ref().is_none_or(Vec::is_empty);
    // Repacked: one subset per distinct port set, addresses sorted by IP.
    let mut by_ports: BTreeMap<Vec<BackendPort>, (Vec<EndpointAddress>, Vec<EndpointAddress>)> = BTreeMap::new();
    let mut kept = 0usize;
    let mut truncated = false;
    // Ready addresses are kept first when the cap cuts.
    let mut ordered: Vec<&Backend> = backends.iter().collect();
    ordered.sort_by_key(|b| !b.ready);
    for b in ordered {
        // A portless Service has endpoints only when headless; otherwise a backend counts
        // once it resolves at least one port.
        if (portless && !headless) || (!portless && b.ports.is_empty()) {
            continue;
        }
        if kept == MAX_ADDRESSES {
            truncated = true;
            break;
        }
        kept += 1;
        let (ready, not_ready) = by_ports.entry(b.ports.clone()).or_default();
        if b.ready { ready } else { not_ready }.push(address(&namespace, b));
    }
    let subsets = by_ports
        .into_iter()
        .map(|(ports, (mut ready, mut not_ready))| {
            ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            not_ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            EndpointSubset {
                addresses: (!ready.is_empty()).then_some(ready),
                not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
                ports: (!ports.is_empty()).then(|| ports.iter().map(port).collect()),
            }
        })
        .collect();
    let mut labels = service.metadata.labels.clone().unwrap_or_default();
    if headless {
        labels.insert(HEADLESS.into(), String::new());
    } else {
        labels.remove(HEADLESS);
    }
    Desired { subsets, labels, truncated }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::service_pods::backends;
    use crate::service_pods::tests::{pod, service};
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    #[test]
    fn ready_and_not_ready_addresses_are_repacked_by_their_ports() {
        let svc =
            service(json!({"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "web"}]}));
        let pods = [
            pod("b", json!({"app": "web"}), "127.1.0.2", true, json!({})),
            pod("a", json!({"app": "web"}), "127.1.0.9", true, json!({})),
            pod("c", json!({"app": "web"}), "127.1.0.3", false, json!({})),
            // Names no `web` port: not an endpoint.
            pod(
                "d",
                json!({"app": "web"}),
                "127.1.0.4",
                true,
                json!({"spec": {"containers": [{"name": "app", "image": "x"}]}}),
            ),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let want = desired(&svc, &backends(&svc, &refs, false));
        assert_eq!(want.subsets.len(), 1);
        let subset = serde_json::to_value(&want.subsets[0]).unwrap();
        assert_eq!(
            subset,
            json!({
                "addresses": [
                    {"ip": "127.1.0.2", "nodeName": "node-1", "targetRef": {"kind": "Pod", "namespace": "team", "name": "b", "uid": "uid-b"}},
                    {"ip": "127.1.0.9", "nodeName": "node-1", "targetRef": {"kind": "Pod", "namespace": "team", "name": "a", "uid": "uid-a"}},
                ],
                "notReadyAddresses": [
                    {"ip": "127.1.0.3", "nodeName": "node-1", "targetRef": {"kind": "Pod", "namespace": "team", "name": "c", "uid": "uid-c"}},
                ],
                "ports": [{"name": "http", "port": 9000, "protocol": "TCP"}],
            })
        );
        assert!(!want.truncated && want.labels.is_empty());
        // No pods: an Endpoints object with no subsets.
        assert!(desired(&svc, &[]).subsets.is_empty());
    }

    #[test]
    fn headless_services_without_ports_list_addresses_and_the_cap_cuts_not_ready_first() {
        let svc = service(json!({"selector": {"app": "web"}, "clusterIP": "None"}));
        let svc = Service {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                labels: Some([("team".to_owned(), "a".to_owned())].into()),
                ..svc.metadata
            },
            ..svc
        };
        let pods = [pod("a", json!({"app": "web"}), "127.1.0.1", true, json!({}))];
        let refs: Vec<&Pod> = pods.iter().collect();
        let want = desired(&svc, &backends(&svc, &refs, false));
        assert_eq!(want.subsets[0].addresses.as_ref().unwrap()[0].ip, "127.1.0.1");
        assert!(want.subsets[0].ports.is_none());
        assert_eq!(want.labels, [("team".to_owned(), "a".to_owned()), (HEADLESS.to_owned(), String::new())].into());

        let svc = service(json!({"selector": {"app": "web"}, "ports": [{"port": 80}]}));
        let many: Vec<Pod> = (0..MAX_ADDRESSES + 5)
            .map(|i| {
                pod(
                    &format!("p{i:04}"),
                    json!({"app": "web"}),
                    &format!("127.2.{}.{}", i / 250, i % 250),
                    i >= 5,
                    json!({}),
                )
            })
            .collect();
        let refs: Vec<&Pod> = many.iter().collect();
        let want = desired(&svc, &backends(&svc, &refs, false));
        assert!(want.truncated);
        assert_eq!(want.subsets[0].addresses.as_ref().unwrap().len(), MAX_ADDRESSES, "the ready ones kept");
        assert!(want.subsets[0].not_ready_addresses.is_none());
    }
}
