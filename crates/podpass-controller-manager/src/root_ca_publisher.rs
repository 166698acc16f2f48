//! The root CA publisher (`pkg/controller/certificates/rootcacertpublisher`), on
//! kube-runtime's Controller: every `Active` namespace holds a ConfigMap
//! `kube-root-ca.crt` whose data is exactly `{"ca.crt": <cluster CA>}` and whose
//! `kubernetes.io/description` annotation says what it is for. A deleted one is created
//! again; an emptied or edited one is put back — pods mount it in every `kube-api-access-*`
//! volume, so a namespace without it cannot start pods.
//!
//! Woken as upstream: a namespace added or updated, the ConfigMap updated or deleted. A
//! namespace that is terminating or gone is left alone. Writes are the controller's own
//! (`system:serviceaccount:kube-system:root-ca-cert-publisher`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use crate::credentials::Credentials;
use crate::service_account::{is_active, namespace_went_away};
pub use crate::sync_error::SyncError;

/// The controller's name (`--controllers`).
pub const NAME: &str = "root-ca-certificate-publisher-controller";
/// Its service account (upstream's, `system:controller:root-ca-cert-publisher`).
pub const ACCOUNT: &str = "root-ca-cert-publisher";
/// The ConfigMap's name (`RootCACertConfigMapName`).
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";
/// The annotation the publisher keeps (`DescriptionAnnotation`).
pub const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
/// Its value, as upstream's `Description`.
pub const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";
/// The data key.
const CA_KEY: &str = "ca.crt";

struct Context {
    credentials: Credentials,
    config_maps: Store<ConfigMap>,
    ca_pem: String,
    ready: tokio::sync::OnceCell<bool>,
}

/// Runs the publisher of `ca_pem` until its streams end.
pub async fn run(credentials: Credentials, ca_pem: String) {
    let root = credentials.root();
    let ours = watcher::Config::default().fields(&format!("metadata.name={ROOT_CA_CONFIG_MAP}"));
    let (config_maps, writer) = reflector::store::<ConfigMap>();
    let events = reflector::reflector(writer, watcher(Api::<ConfigMap>::all(root.clone()), ours).default_backoff())
        .touched_objects();
    let controller = Controller::new(Api::<Namespace>::all(root), watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(1));
    let context = Arc::new(Context { credentials, config_maps, ca_pem, ready: tokio::sync::OnceCell::new() });
    controller
        .watches_stream(events, |cm| Some(ObjectRef::<Namespace>::new(&cm.namespace().unwrap_or_default())))
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "root CA publisher sync");
            }
        })
        .await;
}

/// Whether a ConfigMap already says what the publisher would write: data exactly
/// `{"ca.crt": ca}` (nothing else) and a non-empty description.
fn is_current(config_map: &ConfigMap, ca_pem: &str) -> bool {
    let data_ok =
        config_map.data.as_ref().is_some_and(|d| d.len() == 1 && d.get(CA_KEY).map(String::as_str) == Some(ca_pem));
    let described = config_map
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DESCRIPTION_ANNOTATION))
        .is_some_and(|d| !d.is_empty());
    data_ok && described
}

/// What the publisher makes of `current` (or of nothing): the whole data map replaced
/// (binaryData left as it is) and the description set; every other field kept.
fn published(current: Option<&ConfigMap>, ca_pem: &str) -> ConfigMap {
    let mut config_map = current.cloned().unwrap_or_else(|| ConfigMap {
        metadata: ObjectMeta { name: Some(ROOT_CA_CONFIG_MAP.to_owned()), ..Default::default() },
        ..Default::default()
    });
    config_map.data = Some(BTreeMap::from([(CA_KEY.to_owned(), ca_pem.to_owned())]));
    config_map.metadata.annotations.get_or_insert_default().insert(DESCRIPTION_ANNOTATION.into(), DESCRIPTION.into());
    config_map
}

fn error_policy(_ns: Arc<Namespace>, error: &SyncError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %error, "root CA publisher sync failed; retrying");
    Action::requeue(if error.is_conflict() { Duration::from_millis(200) } else { Duration::from_secs(1) })
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let span = tracing::info_span!("reconcile", controller = NAME, namespace = %ns.name_any());
    tracing::Instrument::instrument(sync(ns, ctx), span).await
}

async fn sync(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let ready = ctx.ready.get_or_init(|| async { ctx.config_maps.wait_until_ready().await.is_ok() }).await;
    if !*ready {
        return Err(SyncError::CacheGone("configmaps"));
    }
    let name = ns.name_any();
    if !is_active(&ns) {
        return Ok(Action::await_change());
    }
    let current = ctx.config_maps.get(&ObjectRef::new(ROOT_CA_CONFIG_MAP).within(&name));
    if current.as_deref().is_some_and(|c| is_current(c, &ctx.ca_pem) || c.metadata.deletion_timestamp.is_some()) {
        return Ok(Action::await_change());
    }
    let api: Api<ConfigMap> = Api::namespaced(ctx.credentials.client(ACCOUNT).await?, &name);
    let want = published(current.as_deref(), &ctx.ca_pem);
    let written = match current {
        Some(_) => api.replace(ROOT_CA_CONFIG_MAP, &PostParams::default(), &want).await.map(|_| "put back"),
        None => api.create(&PostParams::default(), &want).await.map(|_| "created"),
    };
    match written {
        Ok(what) => tracing::info!(namespace = %name, "kube-root-ca.crt {what}"),
        Err(e) if namespace_went_away(&e) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Action::await_change())
}

/// The CA a kubeconfig's client trusts, as PEM: what the publisher hands out when no
/// `--root-ca-file` is given (kube-controller-manager uses its client's `CAData`).
pub(crate) fn pem_of(der_certificates: &[Vec<u8>]) -> String {
    let mut pem = String::new();
    for der in der_certificates {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let body = data_encoding::BASE64.encode(der);
        for line in body.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    pem
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n";

    #[test]
    fn only_exact_data_with_a_description_is_current() {
        assert!(is_current(&published(None, CA), CA));
        let mut edited = published(None, CA);
        edited.data.get_or_insert_default().insert(CA_KEY.into(), "forged".into());
        assert!(!is_current(&edited, CA), "edited CA");
        let mut extra = published(None, CA);
        extra.data.get_or_insert_default().insert("other".into(), "x".into());
        assert!(!is_current(&extra, CA), "extra key");
        let mut emptied = published(None, CA);
        emptied.data = Some(BTreeMap::new());
        assert!(!is_current(&emptied, CA), "emptied");
        let mut undescribed = published(None, CA);
        undescribed.metadata.annotations = Some(BTreeMap::from([(DESCRIPTION_ANNOTATION.into(), String::new())]));
        assert!(!is_current(&undescribed, CA), "empty description");
    }

    #[test]
    fn putting_back_replaces_the_data_and_keeps_the_rest() {
        let edited = ConfigMap {
            metadata: ObjectMeta {
                name: Some(ROOT_CA_CONFIG_MAP.into()),
                labels: Some(BTreeMap::from([("team".into(), "a".into())])),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([("ca.crt".into(), "forged".into()), ("extra".into(), "x".into())])),
            ..Default::default()
        };
        let fixed = published(Some(&edited), CA);
        assert!(is_current(&fixed, CA));
        assert_eq!(fixed.metadata.labels, edited.metadata.labels);
        assert_eq!(fixed.metadata.resource_version.as_deref(), Some("7"), "the update is conditioned");
    }

    #[test]
    fn der_certificates_are_pem_encoded_in_64_column_lines() {
        let pem = pem_of(&[vec![0u8; 100]]);
        let lines: Vec<&str> = pem.lines().collect();
        assert_eq!(lines.first(), Some(&"-----BEGIN CERTIFICATE-----"));
        assert_eq!(lines.last(), Some(&"-----END CERTIFICATE-----"));
        assert!(lines[1..lines.len() - 1].iter().all(|l| l.len() <= 64));
        let body: String = lines[1..lines.len() - 1].concat();
        assert_eq!(data_encoding::BASE64.decode(body.as_bytes()).ok(), Some(vec![0u8; 100]));
    }
}
