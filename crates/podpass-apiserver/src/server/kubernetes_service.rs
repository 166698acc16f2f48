//! The `kubernetes` Service of the `default` namespace, as kube-apiserver's controlplane
//! controller keeps it (pkg/controlplane/controller/kubernetesservice): the first address of
//! `--service-cluster-ip-range`, port 443 named `https` targeting the secure port, and its
//! Endpoints and EndpointSlice naming this server's address. In-cluster clients
//! (`rest.InClusterConfig()`, kubectl `cluster-info`) find the API server through it; the
//! node makes the address reachable inside every pod's network namespace.
//!
//! Created at start and put back every [`INTERVAL`] by the elected replica: a deleted one
//! comes back, one whose ports or addresses were edited is corrected. Only the fields the
//! controller owns are written; labels and annotations others added are kept.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use super::AppState;
use super::rest::objects::prepare_new;
use super::rest::resources::find;
use super::status::OwnWriteError;
use crate::store::{ObjectKey, StoreError};

/// The Service's (and its endpoints') name and namespace.
pub const NAME: &str = "kubernetes";
const NAMESPACE: &str = "default";
/// How often the objects are checked (upstream's `--endpoint-reconciler` interval, 10 s).
pub const INTERVAL: Duration = Duration::from_secs(10);
/// The Service's port, as upstream's (`--kubernetes-service-node-port` aside).
pub const SERVICE_PORT: u16 = 443;
/// The names the serving certificate carries for in-cluster clients (upstream's
/// `kubernetes.default.svc…` alternate names).
pub const SERVICE_DNS_NAMES: [&str; 4] =
    ["kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"];

/// What the controller writes, by resource.
fn desired(service_ip: Ipv4Addr, endpoint: SocketAddr) -> [(&'static str, &'static str, Value); 3] {
    let port = endpoint.port();
    let ip = endpoint.ip().to_string();
    [
        (
            "",
            "services",
            json!({
                "metadata": {"name": NAME, "labels": {"component": "apiserver", "provider": "kubernetes"}},
                "spec": {
                    "type": "ClusterIP",
                    "clusterIP": service_ip.to_string(),
                    "clusterIPs": [service_ip.to_string()],
                    "ipFamilies": ["IPv4"],
                    "ipFamilyPolicy": "SingleStack",
                    "internalTrafficPolicy": "Cluster",
                    "sessionAffinity": "None",
                    "ports": [{"name": "https", "port": SERVICE_PORT, "protocol": "TCP", "targetPort": port}],
                },
            }),
        ),
        (
            "",
            "endpoints",
            json!({
                "metadata": {"name": NAME, "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
                "subsets": [{"addresses": [{"ip": ip}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}],
            }),
        ),
        (
            "discovery.k8s.io",
            "endpointslices",
            json!({
                "metadata": {"name": NAME, "labels": {"kubernetes.io/service-name": NAME}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            }),
        ),
    ]
}

/// The fields the controller owns in each object.
const OWNED: [&str; 4] = ["spec", "subsets", "endpoints", "ports"];

/// Whether `live` already says what `want` does: the owned fields (the Service's spec
/// compared on what the controller sets, so fields defaulted by others do not count) and
/// the labels the controller sets.
fn is_current(live: &Value, want: &Value) -> bool {
    let fields_ok = OWNED.iter().all(|field| match (want.get(*field), live.get(*field)) {
        (None, _) => true,
        (Some(Value::Object(w)), Some(Value::Object(l))) => w.iter().all(|(k, v)| l.get(k) == Some(v)),
        (Some(w), l) => l == Some(w),
    });
    let labels = want.pointer("/metadata/labels").and_then(Value::as_object).into_iter().flatten();
    fields_ok && labels.into_iter().all(|(k, v)| live.pointer("/metadata/labels").and_then(|l| l.get(k)) == Some(v))
}

/// One pass: each object created when absent and corrected when it differs.
async fn reconcile(state: &AppState, service_ip: Ipv4Addr, endpoint: SocketAddr) -> Result<(), OwnWriteError> {
    for (group, plural, want) in desired(service_ip, endpoint) {
        let key = ObjectKey::namespaced(plural, NAMESPACE, NAME);
        match state.store.get(&key).await {
            Ok(live) if is_current(&live.object, &want) => {}
            Ok(live) => {
                let mut fixed = live.object.clone();
                for field in OWNED {
                    match (want.get(field), fixed.get_mut(field)) {
                        (Some(Value::Object(w)), Some(Value::Object(l))) => l.extend(w.clone()),
                        (Some(w), _) => fixed[field] = w.clone(),
                        (None, _) => {}
                    }
                }
                if !fixed["metadata"]["labels"].is_object() {
                    fixed["metadata"]["labels"] = json!({});
                }
                for (k, v) in want.pointer("/metadata/labels").and_then(Value::as_object).into_iter().flatten() {
                    fixed["metadata"]["labels"][k] = v.clone();
                }
                match state.store.update(&key, fixed, Some(live.revision)).await {
                    Ok(_) => tracing::info!(resource = plural, "kubernetes service: default/kubernetes put back"),
                    // Someone wrote meanwhile: the next pass looks again.
                    Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Err(StoreError::NotFound { .. }) => {
                if plural == "services" {
                    // Its address recorded first, as a static allocation through the REST
                    // storage would (held already, by this Service's previous life, is fine:
                    // the repair loop corrects an owner that differs).
                    let parent = super::service_ips::Parent { namespace: NAMESPACE, name: NAME };
                    match super::service_ips::allocate(state, parent, Some(service_ip), false).await {
                        Ok(_) | Err(super::service_ips::AllocationError::Allocated) => {}
                        Err(e) => tracing::warn!(error = %e, "kubernetes service: its address is not recorded yet"),
                    }
                }
                let res = find(group, plural).ok_or(OwnWriteError::NotServed(plural))?;
                let mut object = want;
                prepare_new(res, Some(NAMESPACE), &mut object, podpass_token::now_unix())
                    .map_err(OwnWriteError::Invalid)?;
                match state.store.create(&key, object).await {
                    Ok(_) => tracing::info!(resource = plural, "kubernetes service: default/kubernetes created"),
                    Err(StoreError::AlreadyExists { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Keeps the objects while this replica leads, until the task is dropped.
pub async fn run(state: Arc<AppState>, service_ip: Ipv4Addr, endpoint: SocketAddr, mut leading: watch::Receiver<bool>) {
    loop {
        if leading.wait_for(|l| *l).await.is_err() {
            return;
        }
        if let Err(e) = reconcile(&state, service_ip, endpoint).await {
            tracing::warn!(error = %e, "kubernetes service: reconcile failed; trying again");
        }
        tokio::select! {
            () = tokio::time::sleep(INTERVAL) => {}
            _ = leading.wait_for(|l| !*l) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_what_the_controller_owns_is_compared() {
        let [(_, _, svc), (_, _, ep), (_, _, slice)] =
            desired(Ipv4Addr::new(10, 96, 0, 1), "127.0.0.1:6443".parse().unwrap());
        let mut live = svc.clone();
        live["metadata"]["labels"]["team"] = json!("platform");
        live["spec"]["extra"] = json!("defaulted elsewhere");
        assert!(is_current(&live, &svc), "others' labels and fields are kept");
        live["spec"]["ports"][0]["targetPort"] = json!(1234);
        assert!(!is_current(&live, &svc), "a moved target port is put back");
        let mut moved = slice.clone();
        moved["endpoints"][0]["addresses"] = json!(["127.0.0.2"]);
        assert!(!is_current(&moved, &slice));
        let mut unlabelled = ep.clone();
        unlabelled["metadata"]["labels"] = json!({});
        assert!(!is_current(&unlabelled, &ep));
        assert_eq!(ep["subsets"][0]["ports"][0]["port"], 6443);
        assert_eq!(
            svc["spec"]["ports"][0],
            json!({"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443})
        );
    }
}
