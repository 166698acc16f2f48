//! Service-account token authentication as kube-apiserver wires it: bound tokens of the
//! configured issuers first, then — for a token of the legacy issuer only — the legacy,
//! Secret-based validator, with legacy token tracking (the Secret's
//! `kubernetes.io/legacy-token-last-used` label, at most one write a day).

use std::sync::Arc;

use serde_json::{Value, json};

use super::{AppState, StoreLookup};
use crate::field::Field;
use crate::store::{ObjectKey, StoreError};
use podpass_token::{AuthError, Authenticated, LAST_USED_LABEL, LEGACY_ISSUER, NotMine};

impl AppState {
    /// Authenticates a service-account token for `requested` audiences through the success
    /// cache, as requests and TokenReview both do, and refuses it when its `jti` is revoked
    /// — cached or not, so a revocation holds from the moment this replica knows it.
    pub(crate) async fn authenticate_cached(
        &self,
        token: &str,
        requested: Option<&[String]>,
    ) -> Result<Arc<Authenticated>, AuthError> {
        let a = match self.token_cache.get(token, requested) {
            Some(a) => a,
            None => {
                let now = podpass_token::now_unix();
                let fresh = self.authenticate_token(token, requested, now).await?;
                self.token_cache.insert(token, requested, fresh, now)
            }
        };
        if let Some(jti) = a.info.credential_id.strip_prefix("JTI=")
            && self.revoked.contains(jti)
        {
            self.metrics.revoked_token_uses.inc();
            return Err(AuthError::Revoked { jti: jti.to_owned() });
        }
        Ok(a)
    }

    /// Authenticates a service-account token for `requested` audiences (`None`: the API
    /// audiences) at `now`, counting its use.
    pub(crate) async fn authenticate_token(
        &self,
        token: &str,
        requested: Option<&[String]>,
        now: i64,
    ) -> Result<Authenticated, AuthError> {
        let lookup = StoreLookup { store: self.store.as_ref() };
        let bound = self.authenticator.authenticate(token, requested, &lookup, now).await;
        let a = match bound {
            Err(AuthError::NotMine(NotMine::Issuer(iss))) if iss == LEGACY_ISSUER => {
                let legacy = self.legacy_authenticator.authenticate(token, requested, &lookup).await?;
                if legacy.auto_generated {
                    self.metrics.legacy_auto_token_uses.inc();
                } else {
                    self.metrics.legacy_manual_token_uses.inc();
                }
                let ns = legacy.authenticated.info.namespace.clone();
                self.track_legacy_use(&ns, &legacy.secret_name, now).await;
                legacy.authenticated
            }
            other => other?,
        };
        self.count_token_use(&a);
        Ok(a)
    }

    /// Legacy token tracking: labels the Secret with today's date (UTC) unless it already
    /// says today or tomorrow (a clock a little ahead elsewhere). A failure is logged,
    /// never the request's: the token was valid.
    async fn track_legacy_use(&self, namespace: &str, secret: &str, now: i64) {
        let key = ObjectKey::namespaced("secrets", namespace, secret);
        let today = day(now);
        let tomorrow = day(now + 86_400);
        let Ok(current) = self.store.get(&key).await else { return };
        let last =
            current.object.field("/metadata/labels").and_then(|l| l.get(LAST_USED_LABEL)).and_then(Value::as_str);
        if last == Some(today.as_str()) || last == Some(tomorrow.as_str()) {
            return;
        }
        let mut labelled = current.object.clone();
        if !labelled["metadata"]["labels"].is_object() {
            labelled["metadata"]["labels"] = json!({});
        }
        labelled["metadata"]["labels"][LAST_USED_LABEL] = json!(today);
        match self.store.update(&key, labelled, Some(current.revision)).await {
            // Someone else wrote it meanwhile: the next use labels it.
            Ok(_) | Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => {}
            Err(e) => {
                tracing::warn!(secret = %format!("{namespace}/{secret}"), error = %e, "labelling a legacy token's last use failed")
            }
        }
    }
}

/// The UTC day of `now` as `YYYY-MM-DD` (Go's "2006-01-02").
fn day(now: i64) -> String {
    let stamp = crate::time::format_rfc3339(now);
    stamp.get(..10).unwrap_or(&stamp).to_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn days_are_utc_dates() {
        assert_eq!(super::day(0), "1970-01-01");
        assert_eq!(super::day(1_795_000_000), "2026-11-18");
    }
}
