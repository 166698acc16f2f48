//! The bootstrap token controllers, off unless named (`--controllers=*,bootstrapsigner,
//! tokencleaner`, as kubeadm runs kube-controller-manager):
//!
//! - the token cleaner (`pkg/controller/bootstrap/tokencleaner.go`): a bootstrap token
//!   Secret past its expiry is deleted (that Secret only: its UID), one not yet is looked
//!   at again when it expires;
//! - the bootstrap signer (`bootstrapsigner.go`): `kube-public/cluster-info` carries, for
//!   each token in force that may sign, `jws-kubeconfig-<id>`, the detached HS256 JWS of its
//!   `kubeconfig` keyed by the token's secret — what a joining node checks the cluster's CA
//!   against before it trusts it — and no signature of a token gone.
//!
//! Writes are the controllers' own (`system:serviceaccount:kube-system:token-cleaner`,
//! `…:bootstrap-signer`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, ResourceExt};
use podpass_api::bootstrap_token::{
    CLUSTER_INFO, KUBECONFIG_KEY, NAMESPACE, PUBLIC_NAMESPACE, SECRET_TYPE, SIGNATURE_PREFIX, TOKEN_ID, TOKEN_SECRET,
    TokenSecret, detached_signature,
};

use crate::credentials::Credentials;
pub use crate::sync_error::SyncError;

/// The token cleaner's name (`--controllers`; alias `tokencleaner`).
pub const CLEANER: &str = "token-cleaner-controller";
/// Its service account (upstream's, `system:controller:token-cleaner`).
pub const CLEANER_ACCOUNT: &str = "token-cleaner";
/// The bootstrap signer's name (`--controllers`; alias `bootstrapsigner`).
pub const SIGNER: &str = "bootstrap-signer-controller";
/// Its service account (upstream's, `system:controller:bootstrap-signer`).
pub const SIGNER_ACCOUNT: &str = "bootstrap-signer";

fn token_secrets() -> watcher::Config {
    watcher::Config::default().fields(&format!("type={SECRET_TYPE}"))
}

fn now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

fn decoded(secret: &Secret) -> Result<TokenSecret, SyncError> {
    serde_json::to_value(secret).map(|v| TokenSecret::from_secret(&v)).map_err(|e| SyncError::Internal(e.to_string()))
}

/// Runs the token cleaner until its stream ends.
pub async fn run_cleaner(credentials: Credentials) {
    let root = credentials.root();
    let controller = Controller::new(Api::<Secret>::namespaced(root, NAMESPACE), token_secrets());
    let context = Arc::new(credentials);
    controller
        .run(
            clean,
            |_, e: &SyncError, _| {
                tracing::warn!(error = %e, "token cleaner sync failed; retrying");
                Action::requeue(Duration::from_secs(5))
            },
            context,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "token cleaner sync");
            }
        })
        .await;
}

/// `evalSecret`: deleted when expired, else looked at again at its expiry.
async fn clean(secret: Arc<Secret>, credentials: Arc<Credentials>) -> Result<Action, SyncError> {
    let span = tracing::info_span!("reconcile", controller = CLEANER, secret = %secret.name_any());
    let work = async {
        let token = decoded(&secret)?;
        let now = now();
        if !token.expired(now) {
            return Ok(match token.expires_at() {
                Ok(Some(at)) => Action::requeue(Duration::from_secs(u64::try_from(at - now).unwrap_or(0) + 1)),
                _ => Action::await_change(),
            });
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: secret.uid(), resource_version: None }),
            ..DeleteParams::default()
        };
        let api: Api<Secret> = Api::namespaced(credentials.client(CLEANER_ACCOUNT).await?, NAMESPACE);
        match api.delete(&secret.name_any(), &params).await {
            Ok(_) => tracing::info!("expired bootstrap token deleted"),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        Ok(Action::await_change())
    };
    tracing::Instrument::instrument(work, span).await
}

struct SignerContext {
    credentials: Credentials,
    tokens: Store<Secret>,
}

/// Runs the bootstrap signer until its streams end.
pub async fn run_signer(credentials: Credentials) {
    let root = credentials.root();
    let (tokens, writer) = reflector::store::<Secret>();
    let token_events = reflector(writer, watcher(Api::<Secret>::namespaced(root.clone(), NAMESPACE), token_secrets()))
        .default_backoff()
        .touched_objects();
    let info = watcher::Config::default().fields(&format!("metadata.name={CLUSTER_INFO}"));
    let controller = Controller::new(Api::<ConfigMap>::namespaced(root, PUBLIC_NAMESPACE), info);
    let context = Arc::new(SignerContext { credentials, tokens });
    controller
        // Any token's change may change the signatures.
        .watches_stream(token_events, |_| Some(ObjectRef::<ConfigMap>::new(CLUSTER_INFO).within(PUBLIC_NAMESPACE)))
        .run(
            sign,
            |_, e: &SyncError, _| {
                tracing::warn!(error = %e, "bootstrap signer sync failed; retrying");
                Action::requeue(if e.is_conflict() { Duration::from_millis(200) } else { Duration::from_secs(5) })
            },
            context,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "bootstrap signer sync");
            }
        })
        .await;
}

/// The signatures `cluster-info` should carry for `kubeconfig`: one per token in force that
/// signs, keyed `jws-kubeconfig-<id>`.
fn signatures(kubeconfig: &str, tokens: &[TokenSecret], now: i64) -> BTreeMap<String, String> {
    tokens
        .iter()
        .filter(|t| t.signs(now))
        .filter_map(|t| {
            let (id, secret) = (t.get(TOKEN_ID)?, t.get(TOKEN_SECRET)?);
            Some((format!("{SIGNATURE_PREFIX}{id}"), detached_signature(kubeconfig, id, secret)))
        })
        .collect()
}

/// `signConfigMap`: the signatures put right, other keys kept.
fn signed(current: &BTreeMap<String, String>, want: BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut data: BTreeMap<String, String> =
        current.iter().filter(|(k, _)| !k.starts_with(SIGNATURE_PREFIX)).map(|(k, v)| (k.clone(), v.clone())).collect();
    data.extend(want);
    data
}

async fn sign(info: Arc<ConfigMap>, ctx: Arc<SignerContext>) -> Result<Action, SyncError> {
    let span = tracing::info_span!("reconcile", controller = SIGNER, configmap = %format!("{PUBLIC_NAMESPACE}/{CLUSTER_INFO}"));
    let work = async {
        if ctx.tokens.wait_until_ready().await.is_err() {
            return Err(SyncError::CacheGone("secrets"));
        }
        let current = info.data.clone().unwrap_or_default();
        let Some(kubeconfig) = current.get(KUBECONFIG_KEY) else { return Ok(Action::await_change()) };
        let tokens = ctx.tokens.state().iter().map(|s| decoded(s)).collect::<Result<Vec<_>, _>>()?;
        let now = now();
        let data = signed(&current, signatures(kubeconfig, &tokens, now));
        // Signing stops at a token's expiry: look again then.
        let next = tokens.iter().filter(|t| t.signs(now)).filter_map(|t| t.expires_at().ok().flatten()).min();
        let again = next.map_or(Action::await_change(), |at| {
            Action::requeue(Duration::from_secs(u64::try_from(at - now).unwrap_or(0) + 1))
        });
        if data == current {
            return Ok(again);
        }
        let mut updated = (*info).clone();
        updated.data = Some(data);
        let api: Api<ConfigMap> = Api::namespaced(ctx.credentials.client(SIGNER_ACCOUNT).await?, PUBLIC_NAMESPACE);
        api.replace(CLUSTER_INFO, &PostParams::default(), &updated).await?;
        tracing::info!("cluster-info signatures written");
        Ok(again)
    };
    tracing::Instrument::instrument(work, span).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn token(id: &str, usages: &[&str], expires: Option<&str>) -> TokenSecret {
        let secret =
            podpass_api::bootstrap_token::secret(&format!("{id}.0123456789abcdef"), expires, None, usages, &[])
                .unwrap_or_else(|| json!({}));
        TokenSecret::from_secret(&secret)
    }

    #[test]
    fn each_signing_token_in_force_signs_and_stale_signatures_go() {
        let now = 1_800_000_000;
        let tokens = [
            token("aaaaaa", &["signing", "authentication"], None),
            token("bbbbbb", &["authentication"], None),
            token("cccccc", &["signing"], Some("2020-01-01T00:00:00Z")),
        ];
        let want = signatures("kubeconfig text", &tokens, now);
        assert_eq!(want.keys().collect::<Vec<_>>(), ["jws-kubeconfig-aaaaaa"]);
        assert_eq!(want["jws-kubeconfig-aaaaaa"], detached_signature("kubeconfig text", "aaaaaa", "0123456789abcdef"));
        let current = BTreeMap::from([
            ("kubeconfig".to_owned(), "kubeconfig text".to_owned()),
            ("jws-kubeconfig-cccccc".to_owned(), "stale".to_owned()),
        ]);
        let data = signed(&current, want);
        assert_eq!(data.keys().collect::<Vec<_>>(), ["jws-kubeconfig-aaaaaa", "kubeconfig"]);
    }
}
