//! The tokens controller (kube-controller-manager, pkg/controller/serviceaccount
//! `TokensController`): a Secret of type `kubernetes.io/service-account-token` annotated
//! `kubernetes.io/service-account.name` is filled with a legacy token of that service
//! account (`token`), the cluster CA (`ca.crt`) and its namespace (`namespace`), and gets
//! the account's UID annotation. A Secret whose account does not exist — or exists with
//! another UID than its annotation says — is deleted, and so are an account's token
//! Secrets when the account is deleted.
//!
//! Those tokens are the predecessor of the bound tokens the rest of podpass is about; they
//! coexist as upstream. They never carry an audience or an expiry, so only the API server
//! accepts them (see `podpass_token::legacy`): registry-auth refuses them.

use std::sync::Arc;

use serde_json::{Value, json};

use super::AppState;
use super::rest::lifecycle;
use crate::field::Field;
use crate::store::{EventType, FieldSelector, ListOptions, ObjectKey, StoreError};
use podpass_token::LegacyClaims;

/// The Secret type the controller fills.
pub const SERVICE_ACCOUNT_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
/// The annotation naming the service account.
pub const SERVICE_ACCOUNT_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
/// The annotation holding the service account's UID.
pub const SERVICE_ACCOUNT_UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";

/// Lost compare-and-swaps a fill retries on the latest Secret.
const FILL_RETRIES: usize = 5;

/// Runs the controller until the task is dropped.
pub async fn run(state: Arc<AppState>) {
    super::informer::rewatch_forever("tokens controller", || watch_and_sync(&state)).await;
}

/// Every token Secret (the watch's initial ADDED events), then every change; every
/// deleted service account's token Secrets.
async fn watch_and_sync(state: &AppState) -> Result<(), StoreError> {
    let token_secrets = FieldSelector::parse(&format!("type={SERVICE_ACCOUNT_TOKEN_TYPE}"))
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let options = ListOptions { fields: token_secrets, ..ListOptions::default() };
    let mut secrets = state.store.watch("secrets", None, options, None).await?;
    let mut accounts = state.store.watch("serviceaccounts", None, ListOptions::default(), None).await?;
    loop {
        tokio::select! {
            event = secrets.next() => match event {
                Some(Ok(e)) if e.kind != EventType::Deleted => sync_secret(state, &e.object).await,
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            },
            event = accounts.next() => match event {
                Some(Ok(e)) if e.kind == EventType::Deleted => delete_tokens_of(state, &e.object).await,
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            },
        }
    }
}

fn text<'a>(object: &'a Value, path: &str) -> &'a str {
    object.field(path).and_then(Value::as_str).unwrap_or_default()
}

fn annotation<'a>(object: &'a Value, key: &str) -> &'a str {
    object.field("/metadata/annotations").and_then(|a| a.get(key)).and_then(Value::as_str).unwrap_or_default()
}

fn data(secret: &Value, key: &str) -> Option<Vec<u8>> {
    let encoded = secret.get("data").and_then(|d| d.get(key)).and_then(Value::as_str)?;
    data_encoding::BASE64.decode(encoded.as_bytes()).ok()
}

/// `syncSecret`: a token Secret of an existing account is filled if anything is missing;
/// one of a missing (or replaced) account is deleted.
async fn sync_secret(state: &AppState, secret: &Value) {
    if text(secret, "/type") != SERVICE_ACCOUNT_TOKEN_TYPE {
        return;
    }
    let (ns, name) = (text(secret, "/metadata/namespace"), text(secret, "/metadata/name"));
    let account = annotation(secret, SERVICE_ACCOUNT_NAME_ANNOTATION);
    if ns.is_empty() || name.is_empty() || account.is_empty() {
        return;
    }
    let sa = match state.store.get(&ObjectKey::namespaced("serviceaccounts", ns, account)).await {
        Ok(sa) => sa.object,
        Err(StoreError::NotFound { .. }) => {
            return delete_secret(state, ns, name, "its service account does not exist").await;
        }
        Err(e) => {
            return tracing::warn!(secret = %format!("{ns}/{name}"), error = %e, "tokens controller: reading the service account failed");
        }
    };
    let claimed_uid = annotation(secret, SERVICE_ACCOUNT_UID_ANNOTATION);
    if !claimed_uid.is_empty() && claimed_uid != text(&sa, "/metadata/uid") {
        return delete_secret(state, ns, name, "its service account was replaced").await;
    }
    if needs(state, secret).is_some()
        && let Err(e) = fill(state, ns, name, &sa).await
    {
        tracing::warn!(secret = %format!("{ns}/{name}"), error = %e, "tokens controller: filling the secret failed");
    }
}

/// What a token Secret lacks (`generateTokenIfNeeded`): the CA when it differs from the
/// cluster's, the namespace, the token. `None`: nothing.
fn needs(state: &AppState, secret: &Value) -> Option<()> {
    let ns = text(secret, "/metadata/namespace");
    let ca = data(secret, "ca.crt");
    let namespace = data(secret, "namespace");
    let token = data(secret, "token");
    let complete = ca.as_deref() == Some(state.ca_pem.as_bytes())
        && namespace.as_deref() == Some(ns.as_bytes())
        && token.is_some_and(|t| !t.is_empty());
    (!complete).then_some(())
}

/// Writes the token, CA, namespace and the account's annotations into the live Secret
/// (the token only when it has none, as upstream), retrying a lost compare-and-swap.
async fn fill(state: &AppState, ns: &str, name: &str, sa: &Value) -> Result<(), StoreError> {
    let key = ObjectKey::namespaced("secrets", ns, name);
    let (account, uid) = (text(sa, "/metadata/name"), text(sa, "/metadata/uid"));
    for _ in 0..FILL_RETRIES {
        let live = match state.store.get(&key).await {
            Ok(live) => live,
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        if text(&live.object, "/type") != SERVICE_ACCOUNT_TOKEN_TYPE
            || live.object.field("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
            || needs(state, &live.object).is_none()
        {
            return Ok(());
        }
        let mut filled = live.object.clone();
        if !filled["data"].is_object() {
            filled["data"] = json!({});
        }
        let b64 = |bytes: &[u8]| json!(data_encoding::BASE64.encode(bytes));
        filled["data"]["ca.crt"] = b64(state.ca_pem.as_bytes());
        filled["data"]["namespace"] = b64(ns.as_bytes());
        if data(&live.object, "token").is_none_or(|t| t.is_empty()) {
            let token = state
                .generator
                .mint_legacy(&LegacyClaims::new(ns, account, uid, name))
                .map_err(|e| StoreError::Invalid(format!("signing a legacy token: {e}")))?;
            filled["data"]["token"] = b64(token.as_bytes());
        }
        if !filled["metadata"]["annotations"].is_object() {
            filled["metadata"]["annotations"] = json!({});
        }
        filled["metadata"]["annotations"][SERVICE_ACCOUNT_NAME_ANNOTATION] = json!(account);
        filled["metadata"]["annotations"][SERVICE_ACCOUNT_UID_ANNOTATION] = json!(uid);
        match state.store.update(&key, filled, Some(live.revision)).await {
            Ok(_) => {
                tracing::debug!(secret = %format!("{ns}/{name}"), "tokens controller: secret filled");
                return Ok(());
            }
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `deleteTokens`: the token Secrets naming a deleted account (by name, and by UID when
/// they carry one).
async fn delete_tokens_of(state: &AppState, sa: &Value) {
    let (ns, account, uid) = (text(sa, "/metadata/namespace"), text(sa, "/metadata/name"), text(sa, "/metadata/uid"));
    let Ok(selector) = FieldSelector::parse(&format!("type={SERVICE_ACCOUNT_TOKEN_TYPE}")) else { return };
    let options = ListOptions { fields: selector, ..ListOptions::default() };
    let secrets = match state.store.list("secrets", Some(ns), &options).await {
        Ok(list) => list.items,
        Err(e) => return tracing::warn!(namespace = ns, error = %e, "tokens controller: listing token secrets failed"),
    };
    for secret in secrets {
        let claimed = annotation(&secret, SERVICE_ACCOUNT_UID_ANNOTATION);
        if annotation(&secret, SERVICE_ACCOUNT_NAME_ANNOTATION) == account && (claimed.is_empty() || claimed == uid) {
            delete_secret(state, ns, text(&secret, "/metadata/name"), "its service account was deleted").await;
        }
    }
}

/// Deletes a token Secret as a DELETE would (marked instead while finalizers hold it).
async fn delete_secret(state: &AppState, ns: &str, name: &str, why: &str) {
    let key = ObjectKey::namespaced("secrets", ns, name);
    let Ok(current) = state.store.get(&key).await else { return };
    let result = match lifecycle::mark_if_finalized(state, &key, &current).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => state.store.delete(&key, Some(current.revision)).await.map(drop).map_err(|e| e.to_string()),
        Err(e) => Err(e.message),
    };
    match result {
        Ok(()) => tracing::info!(secret = %format!("{ns}/{name}"), "tokens controller: token secret deleted: {why}"),
        Err(e) => {
            tracing::warn!(secret = %format!("{ns}/{name}"), error = %e, "tokens controller: deleting a token secret failed")
        }
    }
}
