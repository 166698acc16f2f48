//! ServiceAccount admission (plugin/pkg/admission/serviceaccount) for new pods:
//! `serviceAccountName` defaults to `default`, the account must exist (403 otherwise), and
//! the automounted token volume (`kube-api-access-<suffix>`) is added and mounted at
//! `/var/run/secrets/kubernetes.io/serviceaccount` unless automounting is off.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::field::Field;
use crate::server::AppState;
use crate::server::rest::objects::random_suffix;
use crate::server::status::StatusError;
use crate::store::{ObjectKey, StoreError};

/// Where the automounted token goes (`DefaultAPITokenMountPath`).
const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Admits a new pod named `name` in `ns`.
pub(super) async fn admit_pod(state: &AppState, ns: &str, name: &str, pod: &mut Value) -> Result<(), StatusError> {
    let sa_name = pod_service_account(pod);
    let key = ObjectKey::namespaced("serviceaccounts", ns, &sa_name);
    // upstream `getServiceAccount`: `default` is the service account controller's to
    // create, so a pod made right after its namespace waits for it a moment (10 lookups).
    let attempts = if sa_name == "default" { DEFAULT_ACCOUNT_LOOKUPS } else { 1 };
    let pause = Duration::from_millis(100 + u64::from(rand_byte()) * 100 / 255);
    for attempt in 0..attempts {
        if attempt > 0 {
            tokio::time::sleep(pause).await;
        }
        match state.store.get(&key).await {
            Ok(sa) => return mount_token(pod, &sa.object),
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(StatusError::new(
        StatusCode::FORBIDDEN,
        "Forbidden",
        format!(
            "pods {name:?} is forbidden: error looking up service account {ns}/{sa_name}: serviceaccount {sa_name:?} not found"
        ),
    ))
}

/// How often a missing `default` account is looked up before the pod is refused.
const DEFAULT_ACCOUNT_LOOKUPS: usize = 10;

/// A random byte: upstream spreads the lookups' pause over 100–200 ms so that many pods
/// waiting at once do not ask together.
fn rand_byte() -> u8 {
    let mut b = [0u8; 1];
    match aws_lc_rs::rand::fill(&mut b) {
        Ok(()) => b[0],
        Err(_) => 128,
    }
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
        // A container that already mounts something at the token's path keeps its own
        // (upstream: existing mounts at the default path prevent the API token's); the
        // volume is added only if some container needs it.
        let mut needed = false;
        for containers in ["initContainers", "containers"] {
            if let Some(list) = spec.get_mut(containers).and_then(Value::as_array_mut) {
                for c in list {
                    if let Some(obj) = c.as_object_mut() {
                        let mounts = obj.entry("volumeMounts").or_insert_with(|| json!([]));
                        if let Some(m) = mounts.as_array_mut() {
                            if m.iter().any(|mount| mount.get("mountPath").and_then(Value::as_str) == Some(TOKEN_PATH))
                            {
                                continue;
                            }
                            m.push(json!({"name": volume_name, "readOnly": true, "mountPath": TOKEN_PATH}));
                            needed = true;
                        }
                    }
                }
            }
        }
        if needed {
            let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
            if let Some(v) = volumes.as_array_mut() {
                v.push(api_access_volume(&volume_name));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_mounting_its_own_token_path_keeps_it() {
        let mut pod = json!({"spec": {
            "volumes": [{"name": "mine", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 600}}]}}],
            "containers": [
                {"name": "own", "volumeMounts": [{"name": "mine", "mountPath": TOKEN_PATH}]},
                {"name": "plain"}]}});
        mount_token(&mut pod, &json!({})).unwrap_or_else(|e| panic!("{e:?}"));
        let own = pod["spec"]["containers"][0]["volumeMounts"].as_array().cloned().unwrap_or_default();
        assert_eq!(own.len(), 1, "the container's own mount is not shadowed: {own:?}");
        let plain = &pod["spec"]["containers"][1]["volumeMounts"][0];
        assert!(plain["name"].as_str().unwrap_or_default().starts_with("kube-api-access-"));
        assert_eq!(pod["spec"]["volumes"].as_array().map(Vec::len), Some(2));
        // Every container mounting its own: no kube-api-access volume at all.
        let mut only_own = json!({"spec": {"containers": [{"name": "own", "volumeMounts": [{"name": "mine", "mountPath": TOKEN_PATH}]}]}});
        mount_token(&mut only_own, &json!({})).unwrap_or_else(|e| panic!("{e:?}"));
        assert!(only_own["spec"].get("volumes").is_none_or(|v| v.as_array().is_some_and(Vec::is_empty)), "{only_own}");
    }
}
