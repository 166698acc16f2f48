//! The root CA publisher (kube-controller-manager, pkg/controller/certificates/
//! rootcacertpublisher): every active namespace holds a ConfigMap `kube-root-ca.crt` whose
//! data is exactly `{"ca.crt": <cluster CA>}` and whose `kubernetes.io/description`
//! annotation says what it is for. A deleted one is created again; an emptied or edited
//! one is put back — pods mount it in every `kube-api-access-*` volume, so a namespace
//! without it cannot start pods.
//!
//! Triggers as upstream: a namespace added, a namespace updated while `Active`, the
//! ConfigMap updated or deleted. A namespace that is terminating or gone is left alone
//! (the create goes through NamespaceLifecycle, so nothing outlives its namespace). Of
//! several API server replicas only the elected one publishes (`leader`).

use super::status::OwnWriteError;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use super::AppState;
use super::rest::lifecycle;
use super::rest::objects::prepare_new;
use super::rest::resources::find;
use crate::field::Field;
use crate::store::{EventType, FieldSelector, ListOptions, ObjectKey, StoreError};

/// The ConfigMap's name (`RootCACertConfigMapName`).
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";
/// The annotation the publisher keeps (`DescriptionAnnotation`).
pub const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
/// Its value, as upstream's `Description`.
pub const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// Pause before watching again after a watch failed or ended.
const RETRY: Duration = Duration::from_secs(1);
/// Lost compare-and-swaps one sync retries on the latest ConfigMap.
const SYNC_RETRIES: usize = 5;

/// The ConfigMap as the publisher writes it (name, annotation, data), before server-set
/// metadata.
pub(crate) fn root_ca_config_map(ca_pem: &str) -> Value {
    json!({
        "metadata": {"name": ROOT_CA_CONFIG_MAP, "annotations": {DESCRIPTION_ANNOTATION: DESCRIPTION}},
        "data": {"ca.crt": ca_pem},
    })
}

/// Runs the publisher while this replica leads (see `leader`), until the task is dropped.
/// Each time it starts leading, every namespace is synced again.
pub async fn run(state: Arc<AppState>, mut leading: watch::Receiver<bool>) {
    loop {
        if leading.wait_for(|l| *l).await.is_err() {
            return;
        }
        tokio::select! {
            result = watch_and_sync(&state) => if let Err(e) = result {
                tracing::warn!(error = %e, "root CA publisher: watch failed; starting again");
            },
            _ = leading.wait_for(|l| !*l) => continue,
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Every namespace (the watch's initial ADDED events), then every change that can leave a
/// namespace without its ConfigMap.
async fn watch_and_sync(state: &AppState) -> Result<(), StoreError> {
    let by_name = FieldSelector::parse(&format!("metadata.name={ROOT_CA_CONFIG_MAP}"))
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let mut config_maps =
        state.store.watch("configmaps", None, ListOptions { fields: by_name, ..ListOptions::default() }, None).await?;
    let mut namespaces = state.store.watch("namespaces", None, ListOptions::default(), None).await?;
    loop {
        tokio::select! {
            event = namespaces.next() => match event {
                Some(Ok(e)) => {
                    let active = e.object.field("/status/phase").and_then(Value::as_str).is_none_or(|p| p == "Active");
                    let wanted = match e.kind {
                        EventType::Added => true,
                        EventType::Modified => active,
                        _ => false,
                    };
                    if wanted && let Some(ns) = e.object.field("/metadata/name").and_then(Value::as_str) {
                        sync_namespace(state, ns).await;
                    }
                }
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            },
            event = config_maps.next() => match event {
                Some(Ok(e)) if matches!(e.kind, EventType::Modified | EventType::Deleted) => {
                    if let Some(ns) = e.object.field("/metadata/namespace").and_then(Value::as_str) {
                        sync_namespace(state, ns).await;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            },
        }
    }
}

/// `syncNamespace`, logging what fails (the next event or restart of the watch retries).
async fn sync_namespace(state: &AppState, ns: &str) {
    if let Err(e) = sync(state, ns).await {
        tracing::warn!(namespace = ns, error = %e, "root CA publisher: sync failed");
    }
}

/// Whether a ConfigMap already says what the publisher would write: data exactly
/// `{"ca.crt": ca}` (nothing else) and a non-empty description.
fn is_current(config_map: &Value, ca_pem: &str) -> bool {
    let data_ok = config_map
        .get("data")
        .and_then(Value::as_object)
        .is_some_and(|d| d.len() == 1 && d.get("ca.crt").and_then(Value::as_str) == Some(ca_pem));
    let described = config_map
        .field("/metadata/annotations")
        .and_then(|a| a.get(DESCRIPTION_ANNOTATION))
        .and_then(Value::as_str)
        .is_some_and(|d| !d.is_empty());
    data_ok && described
}

async fn sync(state: &AppState, ns: &str) -> Result<(), OwnWriteError> {
    let key = ObjectKey::namespaced("configmaps", ns, ROOT_CA_CONFIG_MAP);
    for _ in 0..SYNC_RETRIES {
        let live = match state.store.get(&key).await {
            Ok(live) => live,
            Err(StoreError::NotFound { .. }) => return create(state, ns, &key).await,
            Err(e) => return Err(e.into()),
        };
        if is_current(&live.object, &state.ca_pem)
            || live.object.field("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
        {
            return Ok(());
        }
        // As upstream: the whole data map is replaced (binaryData is left as it is) and the
        // description set; every other field of the object is kept.
        let mut fixed = live.object.clone();
        fixed["data"] = json!({"ca.crt": state.ca_pem});
        if !fixed["metadata"]["annotations"].is_object() {
            fixed["metadata"]["annotations"] = json!({});
        }
        fixed["metadata"]["annotations"][DESCRIPTION_ANNOTATION] = json!(DESCRIPTION);
        match state.store.update(&key, fixed, Some(live.revision)).await {
            Ok(_) => {
                tracing::info!(namespace = ns, "root CA publisher: kube-root-ca.crt put back");
                return Ok(());
            }
            Err(StoreError::Conflict { .. }) => {}
            Err(StoreError::NotFound { .. }) => return create(state, ns, &key).await,
            Err(e) => return Err(e.into()),
        }
    }
    Err(OwnWriteError::KeptChanging(ROOT_CA_CONFIG_MAP, SYNC_RETRIES))
}

/// Creates the ConfigMap through NamespaceLifecycle: a namespace that is gone or
/// terminating gets none (and that is no error, as upstream).
async fn create(state: &AppState, ns: &str, key: &ObjectKey) -> Result<(), OwnWriteError> {
    let res = find("", "configmaps").ok_or(OwnWriteError::NotServed("configmaps"))?;
    let ns_uid = match lifecycle::admit_create(state, res, ns, ROOT_CA_CONFIG_MAP).await {
        Ok(uid) => uid,
        Err(_) => return Ok(()),
    };
    let mut object = root_ca_config_map(&state.ca_pem);
    prepare_new(res, Some(ns), &mut object, podpass_token::now_unix()).map_err(OwnWriteError::Invalid)?;
    let created = match state.store.create(key, object).await {
        Ok(created) => created,
        Err(StoreError::AlreadyExists { .. }) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if lifecycle::after_create(state, res, ns, &ns_uid, key, &created).await.is_ok() {
        tracing::info!(namespace = ns, "root CA publisher: kube-root-ca.crt created");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_data_with_a_description_is_current() {
        let ca = "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n";
        assert!(is_current(&root_ca_config_map(ca), ca));
        let mut edited = root_ca_config_map(ca);
        edited["data"]["ca.crt"] = json!("forged");
        assert!(!is_current(&edited, ca), "edited CA");
        let mut extra = root_ca_config_map(ca);
        extra["data"]["other"] = json!("x");
        assert!(!is_current(&extra, ca), "extra key");
        let mut emptied = root_ca_config_map(ca);
        emptied["data"] = json!({});
        assert!(!is_current(&emptied, ca), "emptied");
        let mut no_data = root_ca_config_map(ca);
        no_data.as_object_mut().map(|o| o.remove("data"));
        assert!(!is_current(&no_data, ca), "no data");
        let mut undescribed = root_ca_config_map(ca);
        undescribed["metadata"]["annotations"] = json!({DESCRIPTION_ANNOTATION: ""});
        assert!(!is_current(&undescribed, ca), "empty description");
    }
}
