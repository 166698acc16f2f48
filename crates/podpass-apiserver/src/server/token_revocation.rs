//! Revocation by deletion, pushed rather than waited out: the API server watches pods,
//! service accounts, nodes and secrets, and when one is deleted it drops every cached authentication
//! of a token bound to it or speaking for it ([`super::token_cache::TokenCache::forget_bound`]),
//! so the token's next use — a request or a TokenReview — is verified afresh and refused
//! (its bound object is gone). Upstream keeps such a token passing for up to the 10 s of
//! its success cache. Every replica runs this for its own cache.

use std::sync::Arc;

use serde_json::Value;

use super::AppState;
use crate::field::Field;
use crate::store::{EventType, ListOptions, StoreError};

/// What tokens can be bound to, speak for or be held in, as stored.
const WATCHED: [&str; 4] = ["pods", "serviceaccounts", "nodes", "secrets"];

/// Runs until the task is dropped.
pub async fn run(state: Arc<AppState>) {
    super::informer::rewatch_forever("token revocation", || watch(&state)).await;
}

async fn watch(state: &AppState) -> Result<(), StoreError> {
    let [pods, accounts, nodes, secrets] = WATCHED;
    let mut pods = state.store.watch(pods, None, ListOptions::default(), None).await?;
    let mut accounts = state.store.watch(accounts, None, ListOptions::default(), None).await?;
    let mut nodes = state.store.watch(nodes, None, ListOptions::default(), None).await?;
    let mut secrets = state.store.watch(secrets, None, ListOptions::default(), None).await?;
    loop {
        let event = tokio::select! {
            e = pods.next() => e,
            e = accounts.next() => e,
            e = nodes.next() => e,
            e = secrets.next() => e,
        };
        // A watch that ends (the store closing) ends this one; the caller starts again.
        let Some(event) = event else { return Ok(()) };
        let event = event?;
        if event.kind != EventType::Deleted {
            continue;
        }
        let uid = event.object.field("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
        let dropped = state.token_cache.forget_bound(uid);
        if dropped > 0 {
            tracing::debug!(uid, dropped, "cached authentications of a deleted object's tokens dropped");
        }
    }
}
