//! The tokens controller (`pkg/controller/serviceaccount` `TokensController`), on
//! kube-runtime's Controller: a Secret of type `kubernetes.io/service-account-token`
//! annotated `kubernetes.io/service-account.name` is filled with a legacy token of that
//! service account (`token`, signed with `--service-account-private-key-file`), the cluster
//! CA (`ca.crt`) and its namespace (`namespace`), and gets the account's UID annotation. A
//! Secret whose account does not exist — or exists with another UID than its annotation
//! says — is deleted, and so are an account's token Secrets when the account is deleted.
//!
//! As upstream it writes with the manager's own identity (the controller that makes
//! service-account credentials cannot wait for one), and it runs only when it has the key.
//! Those tokens are the predecessor of the bound tokens the rest of podpass is about; they
//! coexist as upstream. They never carry an audience or an expiry, so only the API server
//! accepts them: registry-auth refuses them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use podpass_token::{LegacyClaims, TokenGenerator};

use crate::credentials::Credentials;
pub use crate::sync_error::SyncError;

/// The controller's name (`--controllers`).
pub const NAME: &str = "serviceaccount-token-controller";
/// The Secret type the controller fills.
pub const SERVICE_ACCOUNT_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
/// The annotation naming the service account.
pub const SERVICE_ACCOUNT_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
/// The annotation holding the service account's UID.
pub const SERVICE_ACCOUNT_UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";
/// `--concurrent-serviceaccount-token-syncs`' default.
const CONCURRENCY: u16 = 5;

/// What the controller signs with and hands out.
pub struct TokenSigner {
    /// The legacy-token signer (`--service-account-private-key-file`).
    pub generator: TokenGenerator,
    /// The CA put in `ca.crt`.
    pub ca_pem: String,
}

struct Context {
    credentials: Credentials,
    accounts: Store<ServiceAccount>,
    signer: TokenSigner,
    ready: tokio::sync::OnceCell<bool>,
}

fn annotation<'a>(secret: &'a Secret, key: &str) -> &'a str {
    secret.metadata.annotations.as_ref().and_then(|a| a.get(key)).map_or("", String::as_str)
}

/// Runs the controller until its streams end.
pub async fn run(credentials: Credentials, signer: TokenSigner) {
    let root = credentials.root();
    let (accounts, writer) = reflector::store::<ServiceAccount>();
    let account_events = reflector::reflector(
        writer,
        watcher(Api::<ServiceAccount>::all(root.clone()), watcher::Config::default()).default_backoff(),
    )
    .touched_objects();
    let token_secrets = watcher::Config::default().fields(&format!("type={SERVICE_ACCOUNT_TOKEN_TYPE}"));
    let controller = Controller::new(Api::<Secret>::all(root), token_secrets)
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY));
    let secrets = controller.store();
    let context = Arc::new(Context { credentials, accounts, signer, ready: tokio::sync::OnceCell::new() });
    controller
        // An account's change (its deletion above all) wakes its token Secrets.
        .watches_stream(account_events, move |sa| {
            let (namespace, name) = (sa.namespace().unwrap_or_default(), sa.name_any());
            secrets
                .state()
                .into_iter()
                .filter(|s| {
                    s.namespace().as_deref() == Some(namespace.as_str())
                        && annotation(s, SERVICE_ACCOUNT_NAME_ANNOTATION) == name
                })
                .map(|s| ObjectRef::from_obj(s.as_ref()))
                .collect::<Vec<_>>()
        })
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "token secret sync");
            }
        })
        .await;
}

fn error_policy(_secret: Arc<Secret>, error: &SyncError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %error, "token secret sync failed; retrying");
    Action::requeue(if error.is_conflict() { Duration::from_millis(200) } else { Duration::from_secs(5) })
}

async fn reconcile(secret: Arc<Secret>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let span = tracing::info_span!("reconcile", controller = NAME, secret = %format!("{}/{}", secret.namespace().unwrap_or_default(), secret.name_any()));
    tracing::Instrument::instrument(sync(secret, ctx), span).await
}

/// What becomes of a token Secret.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// Nothing to do.
    Keep,
    /// Deleted, for this reason.
    Delete(&'static str),
    /// Filled with what it lacks.
    Fill,
}

/// `syncSecret`: a token Secret of an existing account is filled if anything is missing;
/// one of a missing (or replaced) account is deleted.
fn plan(secret: &Secret, account: Option<&ServiceAccount>, ca_pem: &str) -> Plan {
    if secret.type_.as_deref() != Some(SERVICE_ACCOUNT_TOKEN_TYPE)
        || annotation(secret, SERVICE_ACCOUNT_NAME_ANNOTATION).is_empty()
        || secret.metadata.deletion_timestamp.is_some()
    {
        return Plan::Keep;
    }
    let Some(account) = account else { return Plan::Delete("its service account does not exist") };
    let claimed_uid = annotation(secret, SERVICE_ACCOUNT_UID_ANNOTATION);
    if !claimed_uid.is_empty() && Some(claimed_uid) != account.metadata.uid.as_deref() {
        return Plan::Delete("its service account was replaced");
    }
    // `generateTokenIfNeeded`: the CA when it differs, the namespace, the token.
    let data = |key: &str| secret.data.as_ref().and_then(|d| d.get(key)).map(|b| b.0.as_slice());
    let namespace = secret.metadata.namespace.as_deref().unwrap_or_default();
    let complete = data("ca.crt") == Some(ca_pem.as_bytes())
        && data("namespace") == Some(namespace.as_bytes())
        && data("token").is_some_and(|t| !t.is_empty());
    if complete { Plan::Keep } else { Plan::Fill }
}

/// The Secret filled: the token only when it has none (as upstream), the CA, the namespace
/// and the account's annotations.
fn filled(secret: &Secret, account: &ServiceAccount, signer: &TokenSigner) -> Result<Secret, String> {
    let namespace = secret.metadata.namespace.clone().unwrap_or_default();
    let (name, uid) = (account.name_any(), account.metadata.uid.clone().unwrap_or_default());
    let mut out = secret.clone();
    let data = out.data.get_or_insert_with(BTreeMap::new);
    data.insert("ca.crt".into(), ByteString(signer.ca_pem.as_bytes().to_vec()));
    data.insert("namespace".into(), ByteString(namespace.as_bytes().to_vec()));
    if data.get("token").is_none_or(|t| t.0.is_empty()) {
        let claims = LegacyClaims::new(&namespace, &name, &uid, &secret.name_any());
        let token = signer.generator.mint_legacy(&claims).map_err(|e| format!("signing a legacy token: {e}"))?;
        data.insert("token".into(), ByteString(token.into_bytes()));
    }
    let annotations = out.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(SERVICE_ACCOUNT_NAME_ANNOTATION.into(), name);
    annotations.insert(SERVICE_ACCOUNT_UID_ANNOTATION.into(), uid);
    Ok(out)
}

async fn sync(secret: Arc<Secret>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let ready = ctx.ready.get_or_init(|| async { ctx.accounts.wait_until_ready().await.is_ok() }).await;
    if !*ready {
        return Err(SyncError::CacheGone("serviceaccounts"));
    }
    let namespace = secret.namespace().unwrap_or_default();
    let account_name = annotation(&secret, SERVICE_ACCOUNT_NAME_ANNOTATION).to_owned();
    let root = ctx.credentials.root();
    let mut account = ctx.accounts.get(&ObjectRef::new(&account_name).within(&namespace)).map(|a| (*a).clone());
    if account.is_none() && !account_name.is_empty() {
        // upstream `getServiceAccount(fetchOnCacheMiss)`: an account created a moment ago
        // is not taken for a missing one.
        account = Api::<ServiceAccount>::namespaced(root.clone(), &namespace).get_opt(&account_name).await?;
    }
    let secrets: Api<Secret> = Api::namespaced(root, &namespace);
    match plan(&secret, account.as_ref(), &ctx.signer.ca_pem) {
        Plan::Keep => {}
        Plan::Delete(why) => {
            // Only the Secret that was judged (its UID), through DELETE: a finalizer holds it.
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: secret.metadata.uid.clone(), resource_version: None }),
                ..DeleteParams::default()
            };
            match secrets.delete(&secret.name_any(), &params).await {
                Ok(_) => tracing::info!("token secret deleted: {why}"),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Plan::Fill => {
            let Some(account) = account else { return Ok(Action::await_change()) };
            let out = filled(&secret, &account, &ctx.signer).map_err(SyncError::Internal)?;
            secrets.replace(&secret.name_any(), &PostParams::default(), &out).await?;
            tracing::debug!("token secret filled");
        }
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n";

    fn secret(annotations: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("builder-token".into()),
                namespace: Some("team".into()),
                annotations: Some(annotations.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()),
                ..Default::default()
            },
            type_: Some(SERVICE_ACCOUNT_TOKEN_TYPE.into()),
            ..Default::default()
        }
    }

    fn account(uid: &str) -> ServiceAccount {
        ServiceAccount {
            metadata: ObjectMeta {
                name: Some("builder".into()),
                namespace: Some("team".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn signer() -> TokenSigner {
        let key =
            podpass_token::SigningKey::generate(podpass_token::Algorithm::ES256).unwrap_or_else(|e| panic!("{e}"));
        TokenSigner { generator: TokenGenerator::new("https://issuer", key), ca_pem: CA.into() }
    }

    #[test]
    fn secrets_of_missing_or_replaced_accounts_go_and_the_others_are_filled_once() {
        let named = secret(&[(SERVICE_ACCOUNT_NAME_ANNOTATION, "builder")]);
        assert_eq!(plan(&named, None, CA), Plan::Delete("its service account does not exist"));
        let claimed = secret(&[(SERVICE_ACCOUNT_NAME_ANNOTATION, "builder"), (SERVICE_ACCOUNT_UID_ANNOTATION, "old")]);
        assert_eq!(plan(&claimed, Some(&account("new")), CA), Plan::Delete("its service account was replaced"));
        assert_eq!(plan(&named, Some(&account("u1")), CA), Plan::Fill);
        let signer = signer();
        let full = filled(&named, &account("u1"), &signer).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan(&full, Some(&account("u1")), CA), Plan::Keep, "filled once");
        assert_eq!(annotation(&full, SERVICE_ACCOUNT_UID_ANNOTATION), "u1");
        // A token already there is kept; a changed CA is put right.
        let mut stale = full.clone();
        stale.data.get_or_insert_default().insert("ca.crt".into(), ByteString(b"old".to_vec()));
        assert_eq!(plan(&stale, Some(&account("u1")), CA), Plan::Fill);
        let refilled = filled(&stale, &account("u1"), &signer).unwrap_or_else(|e| panic!("{e}"));
        let token = |s: &Secret| s.data.as_ref().and_then(|d| d.get("token")).map(|t| t.0.clone());
        assert_eq!(token(&refilled), token(&full), "the token is not minted again");
        // Not a named token Secret: left alone.
        assert_eq!(plan(&secret(&[]), None, CA), Plan::Keep);
    }

    #[test]
    fn the_token_is_a_legacy_token_of_the_account_and_secret() {
        let full = filled(&secret(&[(SERVICE_ACCOUNT_NAME_ANNOTATION, "builder")]), &account("u1"), &signer())
            .unwrap_or_else(|e| panic!("{e}"));
        let token = full.data.as_ref().and_then(|d| d.get("token")).map(|t| t.0.clone()).unwrap_or_default();
        let text = String::from_utf8(token).unwrap_or_default();
        let payload = text.split('.').nth(1).unwrap_or_default();
        let claims: serde_json::Value = data_encoding::BASE64URL_NOPAD
            .decode(payload.as_bytes())
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        assert_eq!(claims["iss"], podpass_token::LEGACY_ISSUER);
        assert_eq!(claims["sub"], "system:serviceaccount:team:builder");
        assert_eq!(claims["kubernetes.io/serviceaccount/secret.name"], "builder-token");
        assert_eq!(claims["kubernetes.io/serviceaccount/service-account.uid"], "u1");
    }
}
