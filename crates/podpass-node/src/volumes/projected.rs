//! The projected volume plugin's payload (pkg/volume/projected/projected.go `collectData`):
//! serviceAccountToken, configMap, secret and downwardAPI sources of one volume, combined
//! into the files an [`AtomicWriter`](super::AtomicWriter) publishes. The errors of all
//! sources are aggregated, as upstream.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, KeyToPath, Pod, ProjectedVolumeSource, Secret, ServiceAccountTokenProjection,
};
use thiserror::Error;

use super::atomic_writer::FileProjection;
use crate::token::{RequestedToken, TokenKey};
use futures::future::BoxFuture;

/// The API default of `serviceAccountToken.expirationSeconds`.
pub const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3600;

/// What a projected volume reads from the API (the agent's informers and token manager).
pub trait ProjectionSources: Send + Sync {
    /// A ConfigMap (`Ok(None)`: it does not exist).
    fn config_map<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<ConfigMap>, crate::api::RequestError>>;
    /// A Secret (`Ok(None)`: it does not exist).
    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Secret>, crate::api::RequestError>>;
    /// A service-account token (through the token manager, which caches and refreshes).
    fn token<'a>(&'a self, key: &'a TokenKey) -> BoxFuture<'a, Result<RequestedToken, crate::token::TokenError>>;
}

/// The payload could not be assembled; every source's problem is listed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{}", aggregate(.0))]
pub struct ProjectionError(pub Vec<String>);

/// `utilerrors.NewAggregate`'s text: one error bare, several as `[a, b]`.
fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// A projected volume's files, and the token (if any) each serviceAccountToken source got,
/// so the caller can schedule the rewrite when it is refreshed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Projection {
    /// Path → contents and mode.
    pub payload: BTreeMap<String, FileProjection>,
    /// The tokens written, by their request.
    pub tokens: Vec<(TokenKey, RequestedToken)>,
}

/// `FsUserFrom`: the pod's `runAsUser` when no container overrides it with another.
fn fs_user(pod: &Pod) -> Option<i64> {
    let spec = pod.spec.as_ref()?;
    let pod_user = spec.security_context.as_ref().and_then(|s| s.run_as_user);
    let mut users = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| c.security_context.as_ref().and_then(|s| s.run_as_user).or(pod_user));
    let first = users.next().flatten();
    users.all(|u| u == first).then_some(first).flatten()
}

/// `fieldpath.FormatMap`: `key="value"` lines, keys sorted, values quoted as Go's `%q`.
fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", podpass_api::validation::quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A downward API `fieldPath` a volume may not project.
#[derive(Debug, thiserror::Error)]
#[error("unsupported fieldPath: {0}")]
struct UnsupportedFieldPath(String);

/// A key a secret or config map source lists that the object does not have.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {key}")]
struct MissingKey {
    /// Upstream's words for the source (`references non-existent secret key`).
    what: &'static str,
    /// The key.
    key: String,
}

/// `metadata.labels['k']` or `metadata.annotations['k']` of `meta` (`fieldpath`'s
/// subscripted paths, which volumes and env both take): the value, empty when the key is
/// absent; `None` when `path` is neither.
pub(crate) fn subscripted(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    path: &str,
) -> Option<String> {
    let subscript =
        |prefix: &str| path.strip_prefix(prefix).and_then(|r| r.strip_prefix("['")).and_then(|r| r.strip_suffix("']"));
    if let Some(key) = subscript("metadata.labels") {
        return Some(meta.labels.as_ref().and_then(|l| l.get(key)).cloned().unwrap_or_default());
    }
    let key = subscript("metadata.annotations")?;
    Some(meta.annotations.as_ref().and_then(|a| a.get(key)).cloned().unwrap_or_default())
}

/// `fieldpath.ExtractFieldPathAsString` for the metadata fields a volume may project.
fn field_value(pod: &Pod, path: &str) -> Result<String, UnsupportedFieldPath> {
    let meta = &pod.metadata;
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    Ok(match path {
        "metadata.name" => text(&meta.name),
        "metadata.namespace" => text(&meta.namespace),
        "metadata.uid" => text(&meta.uid),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        _ => subscripted(meta, path).ok_or_else(|| UnsupportedFieldPath(path.to_owned()))?,
    })
}

/// `MakePayload` of configmap.go / secret.go: every key (default mode) or the listed items.
fn key_payload(
    missing_key: &'static str,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: u32,
    optional: bool,
    out: &mut BTreeMap<String, FileProjection>,
) -> Result<(), MissingKey> {
    let Some(items) = items.filter(|i| !i.is_empty()) else {
        for (key, value) in data {
            out.insert(
                key.clone(),
                FileProjection { data: value.clone(), mode: default_mode, owner: None, group: None },
            );
        }
        return Ok(());
    };
    for item in items {
        let Some(value) = data.get(&item.key) else {
            if optional {
                continue;
            }
            return Err(MissingKey { what: missing_key, key: item.key.clone() });
        };
        let mode = item.mode.and_then(|m| u32::try_from(m).ok()).unwrap_or(default_mode);
        out.insert(item.path.clone(), FileProjection { data: value.clone(), mode, owner: None, group: None });
    }
    Ok(())
}

/// The files of projected volume `volume` of `pod`, all sources tried, all errors reported.
pub async fn project(
    pod: &Pod,
    volume: &ProjectedVolumeSource,
    sources: &dyn ProjectionSources,
) -> Result<Projection, ProjectionError> {
    let Some(default_mode) = volume.default_mode.and_then(|m| u32::try_from(m).ok()) else {
        return Err(ProjectionError(vec!["no defaultMode used, not even the default value for it".into()]));
    };
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let service_account = spec.and_then(|s| s.service_account_name.clone()).unwrap_or_else(|| "default".into());
    let token_key = |t: &ServiceAccountTokenProjection| TokenKey {
        namespace: namespace.clone(),
        service_account: service_account.clone(),
        // The projected path sends no metadata.uid, as upstream.
        service_account_uid: String::new(),
        audiences: t.audience.clone().filter(|a| !a.is_empty()).into_iter().collect(),
        expiration_seconds: t.expiration_seconds.unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS),
        bound: Some(crate::BoundObjectRef::pod(
            pod.metadata.name.as_deref().unwrap_or_default(),
            pod.metadata.uid.as_deref().unwrap_or_default(),
        )),
    };
    // Every object the sources name is fetched at once (a token request and the CA config
    // map of the automounted volume overlap); the payload is then assembled in source
    // order, so a later source still wins a path as upstream.
    let fetches = volume.sources.iter().flatten().map(|source| {
        let token = source.service_account_token.as_ref().map(&token_key);
        let namespace = namespace.as_str();
        async move {
            let secret = match &source.secret {
                Some(s) => Some(sources.secret(namespace, &s.name).await),
                None => None,
            };
            let config_map = match &source.config_map {
                Some(c) => Some(sources.config_map(namespace, &c.name).await),
                None => None,
            };
            let token = match token {
                Some(key) => {
                    let issued = sources.token(&key).await;
                    Some((key, issued))
                }
                None => None,
            };
            (secret, config_map, token)
        }
    });
    let fetched = futures::future::join_all(fetches).await;
    let mut errors = Vec::new();
    let mut out = Projection::default();
    for (source, (secret, config_map, token)) in volume.sources.iter().flatten().zip(fetched) {
        if let (Some(s), Some(result)) = (&source.secret, secret) {
            let optional = s.optional.unwrap_or(false);
            match result {
                Ok(found) => {
                    if found.is_none() && !optional {
                        errors.push(format!("secrets \"{}\" not found", s.name));
                        continue;
                    }
                    let data: BTreeMap<String, Vec<u8>> =
                        found.and_then(|sec| sec.data).into_iter().flatten().map(|(k, v)| (k, v.0)).collect();
                    if let Err(e) = key_payload(
                        "references non-existent secret key",
                        &data,
                        s.items.as_ref(),
                        default_mode,
                        optional,
                        &mut out.payload,
                    ) {
                        errors.push(e.to_string());
                    }
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        if let (Some(c), Some(result)) = (&source.config_map, config_map) {
            let optional = c.optional.unwrap_or(false);
            match result {
                Ok(found) => {
                    if found.is_none() && !optional {
                        errors.push(format!("configmaps \"{}\" not found", c.name));
                        continue;
                    }
                    let mut data: BTreeMap<String, Vec<u8>> = BTreeMap::new();
                    if let Some(cm) = found {
                        data.extend(cm.data.into_iter().flatten().map(|(k, v)| (k, v.into_bytes())));
                        data.extend(cm.binary_data.into_iter().flatten().map(|(k, v)| (k, v.0)));
                    }
                    if let Err(e) = key_payload(
                        "configmap references non-existent config key",
                        &data,
                        c.items.as_ref(),
                        default_mode,
                        optional,
                        &mut out.payload,
                    ) {
                        errors.push(e.to_string());
                    }
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        if let Some(d) = &source.downward_api {
            for item in d.items.iter().flatten() {
                let mode = item.mode.and_then(|m| u32::try_from(m).ok()).unwrap_or(default_mode);
                match (&item.field_ref, &item.resource_field_ref) {
                    (Some(f), _) => match field_value(pod, &f.field_path) {
                        Ok(v) => {
                            out.payload.insert(
                                item.path.clone(),
                                FileProjection { data: v.into_bytes(), mode, owner: None, group: None },
                            );
                        }
                        Err(e) => errors.push(e.to_string()),
                    },
                    // podpass runs no containers: there are no resource values to project.
                    (None, Some(r)) => {
                        errors.push(format!("resourceFieldRef {} is not supported by podpass", r.resource))
                    }
                    (None, None) => {}
                }
            }
        }
        if let (Some(t), Some((key, result))) = (&source.service_account_token, token) {
            let fs_group = spec.and_then(|s| s.security_context.as_ref()).and_then(|s| s.fs_group);
            let mode = if fs_group.is_some() || fs_user(pod).is_some() { 0o600 } else { default_mode };
            match result {
                Ok(issued) => {
                    // The token is its containers' user's, when they all run as one.
                    let owner = fs_user(pod).and_then(|u| u32::try_from(u).ok());
                    let file = FileProjection { data: issued.token.clone().into_bytes(), mode, owner, group: None };
                    out.payload.insert(t.path.clone(), file);
                    out.tokens.push((key, issued));
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        if source.cluster_trust_bundle.is_some() || source.pod_certificate.is_some() {
            errors.push("clusterTrustBundle and podCertificate projections are not supported by podpass".into());
        }
    }
    if errors.is_empty() { Ok(out) } else { Err(ProjectionError(errors)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subscripted_field_paths_read_one_label_or_annotation() {
        let meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta =
            serde_json::from_value(serde_json::json!({
            "labels": {"app": "web"}, "annotations": {"batch.kubernetes.io/job-completion-index": "2"}}))
            .unwrap_or_default();
        assert_eq!(subscripted(&meta, "metadata.labels['app']").as_deref(), Some("web"));
        assert_eq!(
            subscripted(&meta, "metadata.annotations['batch.kubernetes.io/job-completion-index']").as_deref(),
            Some("2")
        );
        assert_eq!(subscripted(&meta, "metadata.labels['missing']").as_deref(), Some(""));
        assert_eq!(subscripted(&meta, "metadata.labels"), None);
        assert_eq!(subscripted(&meta, "spec.nodeName"), None);
    }

    struct Fake;

    impl ProjectionSources for Fake {
        fn config_map<'a>(
            &'a self,
            _: &'a str,
            name: &'a str,
        ) -> BoxFuture<'a, Result<Option<ConfigMap>, crate::api::RequestError>> {
            Box::pin(async move {
                Ok((name == "kube-root-ca.crt").then(|| {
                    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"ca.crt": "CA"}}))
                        .unwrap_or_default()
                }))
            })
        }
        fn secret<'a>(
            &'a self,
            _: &'a str,
            name: &'a str,
        ) -> BoxFuture<'a, Result<Option<Secret>, crate::api::RequestError>> {
            Box::pin(async move {
                Ok((name == "db").then(|| {
                    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"password": "aHVudGVyMg=="}}))
                        .unwrap_or_default()
                }))
            })
        }
        fn token<'a>(&'a self, key: &'a TokenKey) -> BoxFuture<'a, Result<RequestedToken, crate::token::TokenError>> {
            Box::pin(async move {
                if key.audiences.iter().any(|a| a == "refused") {
                    return Err(crate::token::TokenError::Fetch("forbidden".into()));
                }
                Ok(RequestedToken {
                    token: format!("jwt-for-{}", key.audiences.join(",")),
                    expires_at: 1000,
                    expiration_seconds: Some(key.expiration_seconds),
                })
            })
        }
    }

    fn pod(extra_spec: serde_json::Value) -> Pod {
        let mut spec = json!({"serviceAccountName": "builder", "containers": [{"name": "c", "image": "i"}]});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
            s.extend(e.clone());
        }
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "team", "uid": "pod-uid",
            "labels": {"app": "web", "tier": "a \"b\""}}, "spec": spec}))
        .unwrap_or_default()
    }

    fn volume(v: serde_json::Value) -> ProjectedVolumeSource {
        serde_json::from_value(v).unwrap_or_default()
    }

    #[tokio::test]
    async fn the_automounted_volume_projects_token_ca_and_namespace() {
        let v = volume(json!({"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}));
        let p = project(&pod(json!({})), &v, &Fake).await.unwrap_or_else(|e| panic!("{e}"));
        let file = |k: &str| p.payload.get(k).map(|f| (String::from_utf8_lossy(&f.data).into_owned(), f.mode));
        assert_eq!(file("token"), Some(("jwt-for-".into(), 0o644)));
        assert_eq!(file("ca.crt"), Some(("CA".into(), 0o644)));
        assert_eq!(file("namespace"), Some(("team".into(), 0o644)));
        let (key, _) = &p.tokens[0];
        assert_eq!(key.bound, Some(crate::BoundObjectRef::pod("web", "pod-uid")));
        assert_eq!((key.service_account.as_str(), key.expiration_seconds), ("builder", 3607));
        assert!(key.audiences.is_empty() && key.service_account_uid.is_empty());
    }

    #[tokio::test]
    async fn items_modes_labels_and_fs_group() {
        let v = volume(json!({"defaultMode": 292, "sources": [
            {"serviceAccountToken": {"audience": "registry.example", "path": "registry/token"}},
            {"secret": {"name": "db", "items": [{"key": "password", "path": "db/pw", "mode": 256}]}},
            {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                                       {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}}]}}]}));
        let p = project(&pod(json!({"securityContext": {"fsGroup": 2000}})), &v, &Fake)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.payload["registry/token"].mode, 0o600, "fsGroup makes the token private");
        assert_eq!(p.payload["registry/token"].data, b"jwt-for-registry.example");
        assert_eq!((p.payload["db/pw"].data.as_slice(), p.payload["db/pw"].mode), (&b"hunter2"[..], 0o400));
        assert_eq!(String::from_utf8_lossy(&p.payload["labels"].data), "app=\"web\"\ntier=\"a \\\"b\\\"\"");
        assert_eq!(p.payload["app"].data, b"web");
        assert_eq!(p.payload["app"].mode, 0o444);
    }

    #[tokio::test]
    async fn every_sources_error_is_reported_and_optional_sources_may_be_missing() {
        let v = volume(json!({"defaultMode": 420, "sources": [
            {"secret": {"name": "missing"}},
            {"secret": {"name": "maybe", "optional": true}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "nope", "path": "x"}]}},
            {"serviceAccountToken": {"audience": "refused", "path": "t"}},
            {"downwardAPI": {"items": [{"path": "ip", "fieldRef": {"fieldPath": "status.podIP"}}]}}]}));
        let err = project(&pod(json!({})), &v, &Fake).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "[secrets \"missing\" not found, configmap references non-existent config key: nope, failed to fetch token: forbidden, unsupported fieldPath: status.podIP]"
        );
        assert_eq!(
            project(&pod(json!({})), &volume(json!({"sources": []})), &Fake).await.unwrap_err().to_string(),
            "no defaultMode used, not even the default value for it"
        );
    }
}
