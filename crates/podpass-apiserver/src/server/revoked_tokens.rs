//! Revocation by `jti` (beyond upstream): every replica keeps the set of revoked `jti`s
//! from the `revokedtokens` it lists and then watches, so a revocation is enforced by each
//! replica as soon as its watch delivers it — well within a second — at every use of the
//! token: a request's authentication and a TokenReview, cached or not
//! ([`super::AppState::authenticate_cached`]). The elected replica collects revocations
//! whose token has expired ([`collect`]): past its `exp` the token is refused anyway.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;

use super::AppState;
use super::rest::revocation_end as expires_at;
use crate::field::Field;
use crate::store::{EventType, ListOptions, StoreError};

/// The resource.
const RESOURCE: &str = "revokedtokens";
/// How often expired revocations are collected.
const COLLECT_EVERY: Duration = Duration::from_secs(10);
/// How long past its token's `exp` a revocation is kept: the authenticator's leeway for
/// clocks a little apart, so it is never collected while the token could still pass.
const KEEP_PAST_EXPIRY: i64 = podpass_token::authenticator::LEEWAY_SECONDS;

/// The revoked `jti`s and when each revocation ends.
#[derive(Debug, Default)]
pub struct Revocations {
    jtis: RwLock<HashMap<String, i64>>,
}

impl Revocations {
    /// Whether `jti` is revoked.
    pub fn contains(&self, jti: &str) -> bool {
        self.jtis.read().unwrap_or_else(std::sync::PoisonError::into_inner).contains_key(jti)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, i64>> {
        self.jtis.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Everything `items` revokes, replacing what was known (a fresh list).
    fn replace(&self, items: &[Value]) {
        let fresh: HashMap<String, i64> = items.iter().filter_map(entry).collect();
        *self.write() = fresh;
    }
}

/// A stored revocation's `jti` (its name) and end; one whose end is unreadable is kept for
/// ever rather than dropped.
fn entry(object: &Value) -> Option<(String, i64)> {
    let name = object.field("/metadata/name").and_then(Value::as_str)?;
    Some((name.to_owned(), expires_at(object).unwrap_or(i64::MAX)))
}

/// Keeps `state`'s revocations current until the task is dropped.
pub async fn run(state: Arc<AppState>) {
    super::informer::rewatch_forever("revoked tokens", || follow(&state)).await;
}

/// A list (the set replaced whole, so nothing revoked is ever forgotten in between), then
/// every change after it.
async fn follow(state: &AppState) -> Result<(), StoreError> {
    let listed = state.store.list(RESOURCE, None, &ListOptions::default()).await?;
    state.revoked.replace(&listed.items);
    let mut watch = state.store.watch(RESOURCE, None, ListOptions::default(), Some(listed.revision)).await?;
    while let Some(event) = watch.next().await {
        let event = event?;
        let Some((jti, until)) = entry(&event.object) else { continue };
        match event.kind {
            EventType::Added | EventType::Modified => {
                state.revoked.write().insert(jti, until);
            }
            EventType::Deleted => {
                state.revoked.write().remove(&jti);
            }
        }
    }
    Ok(())
}

/// Removes revocations whose token has expired, every 10 s, until the task is dropped
/// (run by the elected replica).
pub async fn collect(state: Arc<AppState>) {
    let mut tick = tokio::time::interval(COLLECT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match collect_once(&state, podpass_token::now_unix()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(revocations = n, "revocations of expired tokens collected"),
            Err(e) => tracing::warn!(error = %e, "collecting expired revocations failed; retrying"),
        }
    }
}

/// One pass at `now`: every revocation whose token is past its `exp` (and the leeway)
/// removed; one changed since it was listed is left for the next pass.
pub async fn collect_once(state: &AppState, now: i64) -> Result<usize, StoreError> {
    let listed = state.store.list(RESOURCE, None, &ListOptions::default()).await?;
    let expired = |o: &Value| entry(o).is_some_and(|(_, until)| until.saturating_add(KEEP_PAST_EXPIRY) <= now);
    crate::store::delete_listed(state.store.as_ref(), RESOURCE, &listed.items, expired).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_list_replaces_what_was_known_and_an_unreadable_end_keeps_it() {
        let r = Revocations::default();
        r.write().insert("gone".into(), 1);
        r.replace(&[
            serde_json::json!({"metadata": {"name": "a"}, "spec": {"expirationTimestamp": "2026-11-27T16:00:00Z"}}),
            serde_json::json!({"metadata": {"name": "b"}, "spec": {"expirationTimestamp": "soon"}}),
        ]);
        assert!(r.contains("a") && r.contains("b") && !r.contains("gone"));
        assert_eq!(r.write().get("b"), Some(&i64::MAX));
    }
}
