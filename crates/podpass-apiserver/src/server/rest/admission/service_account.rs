//! ServiceAccount admission (plugin/pkg/admission/serviceaccount) for new pods:
//! `serviceAccountName` defaults to `default`, the account must exist (403 otherwise), and
//! the automounted token volume (`kube-api-access-<suffix>`) is added and mounted at
//! `/var/run/secrets/kubernetes.io/serviceaccount` unless automounting is off.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::field::Field;
use crate::server::AppState;
use crate::server::rest::objects::random_suffix;
use crate::server::status::StatusError;
use crate::store::{ObjectKey, StoreError};

/// Admits a new pod named `name` in `ns`.
pub(super) async fn admit_pod(state: &AppState, ns: &str, name: &str, pod: &mut Value) -> Result<(), StatusError> {
    let sa_name = pod_service_account(pod);
    let sa = match state.store.get(&ObjectKey::namespaced("serviceaccounts", ns, &sa_name)).await {
        Ok(sa) => sa.object,
        Err(StoreError::NotFound { .. }) => {
            return Err(StatusError::new(
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!(
                    "pods {name:?} is forbidden: error looking up service account {ns}/{sa_name}: serviceaccount {sa_name:?} not found"
                ),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    mount_token(pod, &sa)
}

/// The automounted token volume upstream's ServiceAccount admission adds to pods
/// (`kube-api-access-<suffix>`): a bound token for the API audience (3607 s), the cluster
/// CA and the namespace.
pub(crate) fn api_access_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ]
        }
    })
}

/// The token volume added and mounted in every container unless automounting is off on
/// the pod or its service account.
fn mount_token(pod: &mut Value, service_account: &Value) -> Result<(), StatusError> {
    let automount = pod
        .field("/spec/automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| service_account.get("automountServiceAccountToken").and_then(Value::as_bool))
        .unwrap_or(true);
    let spec = pod
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| StatusError::invalid("Pod is invalid: spec: Required value"))?;
    if automount {
        let volume_name = format!("kube-api-access-{}", random_suffix(5)?);
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Some(v) = volumes.as_array_mut() {
            v.push(api_access_volume(&volume_name));
        }
        for containers in ["initContainers", "containers"] {
            if let Some(list) = spec.get_mut(containers).and_then(Value::as_array_mut) {
                for c in list {
                    if let Some(obj) = c.as_object_mut() {
                        let mounts = obj.entry("volumeMounts").or_insert_with(|| json!([]));
                        if let Some(m) = mounts.as_array_mut() {
                            m.push(json!({"name": volume_name, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// The service account a pod runs as (defaulting `spec.serviceAccountName` to `default`).
fn pod_service_account(pod: &mut Value) -> String {
    let name = pod
        .field("/spec/serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_owned();
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("serviceAccountName".into(), json!(name));
    }
    name
}
