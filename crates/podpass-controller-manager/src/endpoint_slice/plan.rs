//! The EndpointSlices a Service should have (pkg/controller/endpointslice `reconciler`):
//! its backends grouped by the ports they resolve, at most [`MAX_PER_SLICE`] to a slice,
//! terminating ones included with their conditions; one empty placeholder slice when
//! there are none. Existing slices are reused in name order, rewritten only when they
//! differ, extras deleted.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::service_pods::{Backend, BackendPort};

/// `--max-endpoints-per-slice`' default.
pub(crate) const MAX_PER_SLICE: usize = 100;
/// The label naming a slice's Service.
pub(crate) const SERVICE_NAME: &str = "kubernetes.io/service-name";
/// The label naming who manages a slice, and this controller's value of it.
pub(crate) const MANAGED_BY: (&str, &str) =
    ("endpointslice.kubernetes.io/managed-by", "endpointslice-controller.k8s.io");
const HEADLESS: &str = "service.kubernetes.io/headless";

/// What one slice should hold.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Content {
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its endpoints.
    pub endpoints: Vec<Endpoint>,
    /// Its ports.
    pub ports: Vec<EndpointPort>,
}

/// What to write.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    /// New slices.
    pub create: Vec<EndpointSlice>,
    /// Existing slices rewritten.
    pub update: Vec<EndpointSlice>,
    /// Existing slices no longer needed.
    pub delete: Vec<String>,
}

fn endpoint(namespace: &str, b: &Backend) -> Endpoint {
    Endpoint {
        addresses: vec![b.ip.clone()],
        conditions: Some(EndpointConditions {
            ready: Some(b.ready),
            serving: Some(b.serving),
            terminating: Some(b.terminating),
        }),
        hostname: b.hostname.clone(),
        node_name: b.node.clone(),
        target_ref: Some(b.pod_reference(namespace)),
        ..Default::default()
    }
}

fn port(p: &BackendPort) -> EndpointPort {
    EndpointPort {
        name: Some(p.name.clone().unwrap_or_default()),
        port: Some(p.port),
        protocol: Some(p.protocol.clone()),
        app_protocol: p.app_protocol.clone(),
    }
}

/// The labels of `service`'s slices: its own (but the reserved ones), the Service's name,
/// the manager, and the headless mark.
fn labels(service: &Service) -> BTreeMap<String, String> {
    let mut labels = service.metadata.labels.clone().unwrap_or_default();
    labels.retain(|k, _| k != SERVICE_NAME && k != MANAGED_BY.0);
    labels.insert(SERVICE_NAME.into(), service.metadata.name.clone().unwrap_or_default());
    labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    if service.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None") {
        labels.insert(HEADLESS.into(), String::new());
    } else {
        labels.remove(HEADLESS);
    }
    labels
}

/// The slices `service` should have, from its backends.
pub(crate) fn desired(service: &Service, backends: &[Backend]) -> Vec<Content> {
    let namespace = service.metadata.namespace.clone().unwrap_or_default();
    let labels = labels(service);
    let mut by_ports: BTreeMap<Vec<BackendPort>, Vec<&Backend>> = BTreeMap::new();
    for b in backends {
        by_ports.entry(b.ports.clone()).or_default().push(b);
    }
    let mut slices: Vec<Content> = Vec::new();
    for (ports, group) in by_ports {
        for chunk in group.chunks(MAX_PER_SLICE) {
            slices.push(Content {
                labels: labels.clone(),
                endpoints: chunk.iter().map(|b| endpoint(&namespace, b)).collect(),
                ports: ports.iter().map(port).collect(),
            });
        }
    }
    if slices.is_empty() {
        slices.push(Content { labels, endpoints: Vec::new(), ports: Vec::new() });
    }
    slices
}

/// The controller reference each slice carries.
fn owner(service: &Service) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: service.metadata.name.clone().unwrap_or_default(),
        uid: service.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn content_of(slice: &EndpointSlice) -> Content {
    Content {
        labels: slice.metadata.labels.clone().unwrap_or_default(),
        endpoints: slice.endpoints.clone(),
        ports: slice.ports.clone().unwrap_or_default(),
    }
}

fn with_content(mut slice: EndpointSlice, content: Content) -> EndpointSlice {
    slice.metadata.labels = Some(content.labels);
    slice.endpoints = content.endpoints;
    slice.ports = Some(content.ports);
    slice
}

/// The writes that turn `existing` (the Service's managed slices) into `desired`.
pub(crate) fn changes(service: &Service, mut existing: Vec<EndpointSlice>, desired: Vec<Content>) -> Changes {
    existing.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut changes = Changes::default();
    let mut existing = existing.into_iter();
    for want in desired {
        match existing.next() {
            Some(slice) if content_of(&slice) == want && slice.address_type == "IPv4" => {}
            Some(slice) => changes.update.push(with_content(slice, want)),
            None => {
                let new = EndpointSlice {
                    metadata: ObjectMeta {
                        generate_name: Some(format!("{}-", service.metadata.name.clone().unwrap_or_default())),
                        namespace: service.metadata.namespace.clone(),
                        owner_references: Some(vec![owner(service)]),
                        ..Default::default()
                    },
                    address_type: "IPv4".into(),
                    endpoints: Vec::new(),
                    ports: None,
                };
                changes.create.push(with_content(new, want));
            }
        }
    }
    changes.delete = existing.filter_map(|s| s.metadata.name).collect();
    changes
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::service_pods::backends;
    use crate::service_pods::tests::{pod, service};
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn svc() -> Service {
        let mut s =
            service(json!({"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "web"}]}));
        s.metadata.uid = Some("svc-uid".into());
        s.metadata.labels = Some([("team".to_owned(), "a".to_owned())].into());
        s
    }

    #[test]
    fn backends_are_sliced_by_their_ports_with_their_conditions() {
        let pods = [
            pod("a", json!({"app": "web"}), "127.1.0.1", true, json!({})),
            pod("b", json!({"app": "web"}), "127.1.0.2", false, json!({})),
            pod(
                "c",
                json!({"app": "web"}),
                "127.1.0.3",
                true,
                json!({"metadata": {"deletionTimestamp": "2026-12-02T00:00:00Z"}}),
            ),
            // Resolves no port: a slice of its own, without ports.
            pod(
                "d",
                json!({"app": "web"}),
                "127.1.0.4",
                true,
                json!({"spec": {"containers": [{"name": "app", "image": "x"}]}}),
            ),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let slices = desired(&svc(), &backends(&svc(), &refs, true));
        assert_eq!(slices.len(), 2);
        let with_ports = slices.iter().find(|s| !s.ports.is_empty()).unwrap();
        assert_eq!(
            serde_json::to_value(&with_ports.ports).unwrap(),
            json!([{"name": "http", "port": 9000, "protocol": "TCP"}])
        );
        let conditions: Vec<Value> = with_ports
            .endpoints
            .iter()
            .map(|e| serde_json::to_value(e.conditions.as_ref().unwrap()).unwrap())
            .collect();
        assert_eq!(
            conditions,
            [
                json!({"ready": true, "serving": true, "terminating": false}),
                json!({"ready": false, "serving": false, "terminating": false}),
                json!({"ready": false, "serving": true, "terminating": true}),
            ]
        );
        assert_eq!(with_ports.endpoints[0].target_ref.as_ref().unwrap().name.as_deref(), Some("a"));
        assert_eq!(
            with_ports.labels,
            [
                ("team".to_owned(), "a".to_owned()),
                (SERVICE_NAME.to_owned(), "web".to_owned()),
                (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
            ]
            .into()
        );
        // None at all: one empty placeholder.
        let none = desired(&svc(), &[]);
        assert_eq!(none.len(), 1);
        assert!(none[0].endpoints.is_empty() && none[0].ports.is_empty());
    }

    use serde_json::Value;

    #[test]
    fn existing_slices_are_reused_in_order_rewritten_when_they_differ_and_extras_deleted() {
        let many: Vec<Pod> = (0..MAX_PER_SLICE + 1)
            .map(|i| pod(&format!("p{i:03}"), json!({"app": "web"}), &format!("127.3.0.{}", i + 1), true, json!({})))
            .collect();
        let refs: Vec<&Pod> = many.iter().collect();
        let want = desired(&svc(), &backends(&svc(), &refs, true));
        assert_eq!(want.iter().map(|s| s.endpoints.len()).collect::<Vec<_>>(), [MAX_PER_SLICE, 1]);
        let first = changes(&svc(), Vec::new(), want.clone());
        assert_eq!((first.create.len(), first.update.len(), first.delete.len()), (2, 0, 0));
        let created = &first.create[0];
        assert_eq!(created.metadata.generate_name.as_deref(), Some("web-"));
        assert_eq!(created.metadata.owner_references.as_ref().unwrap()[0].uid, "svc-uid");
        // As stored: named; a second pass changes nothing.
        let stored: Vec<EndpointSlice> = first
            .create
            .into_iter()
            .enumerate()
            .map(|(i, mut s)| {
                s.metadata.name = Some(format!("web-{i}"));
                s
            })
            .collect();
        let again = changes(&svc(), stored.clone(), want);
        assert!(again.create.is_empty() && again.update.is_empty() && again.delete.is_empty());
        // Down to none: the first becomes the placeholder, the second goes.
        let emptied = changes(&svc(), stored, desired(&svc(), &[]));
        assert_eq!(emptied.update.len(), 1);
        assert!(emptied.update[0].endpoints.is_empty());
        assert_eq!(emptied.delete, ["web-1"]);
    }
}
