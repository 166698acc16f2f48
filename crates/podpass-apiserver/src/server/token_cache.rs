//! The success cache in front of service-account token authentication
//! (k8s.io/apiserver cached_token_authenticator, wired by kube-apiserver with
//! `TokenSuccessCacheTTL` = 10 s and `TokenFailureCacheTTL` = 0).
//!
//! It serves both bearer-token authentication of requests and TokenReview, as upstream's
//! does: a token that passed is not re-verified (signature, bound-object lookups) for up to
//! the TTL. Upstream lets a token bound to a pod that was just deleted keep passing for up
//! to those 10 s; here the deletion of a pod, service account or node drops every entry
//! bound to it as the deletion is watched ([`TokenCache::forget_bound`],
//! `token_revocation`), so the next use is verified afresh and refused. Failures are never
//! cached, so a token that becomes valid (a pod created late) passes at once.
//!
//! Entries are keyed by an HMAC-SHA256 of the requested audiences and the token under a
//! per-process random key, so the cache holds no bearer tokens. An entry never outlives the
//! token's `exp`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_lc_rs::hmac;
use aws_lc_rs::rand::SystemRandom;
use podpass_token::Authenticated;

/// Upstream's `TokenSuccessCacheTTL`.
pub const DEFAULT_SUCCESS_TTL: Duration = Duration::from_secs(10);

/// Entries kept at most; when full, expired entries go first, then everything (the cache is
/// an optimisation: dropping it costs re-verification, never correctness).
const MAX_ENTRIES: usize = 32 * 1024;

struct Entry {
    result: Arc<Authenticated>,
    until: Instant,
}

/// Successful token authentications, for a short time.
pub struct TokenCache {
    ttl: Duration,
    key: hmac::Key,
    entries: Mutex<HashMap<[u8; 32], Entry>>,
}

impl std::fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCache").field("ttl", &self.ttl).finish_non_exhaustive()
    }
}

impl TokenCache {
    /// A cache remembering successes for `ttl` (zero disables it).
    pub fn new(ttl: Duration) -> Result<Self, aws_lc_rs::error::Unspecified> {
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &SystemRandom::new())?;
        Ok(Self { ttl, key, entries: Mutex::new(HashMap::new()) })
    }

    fn cache_key(&self, token: &str, audiences: Option<&[String]>) -> [u8; 32] {
        let mut ctx = hmac::Context::with_key(&self.key);
        // Length-prefixed so that no two (audiences, token) pairs share an input.
        for aud in audiences.unwrap_or_default() {
            ctx.update(&(aud.len() as u64).to_be_bytes());
            ctx.update(aud.as_bytes());
        }
        ctx.update(&[u8::from(audiences.is_some())]);
        ctx.update(token.as_bytes());
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.sign().as_ref());
        out
    }

    /// The remembered result for this token and audience request, if still fresh.
    pub fn get(&self, token: &str, audiences: Option<&[String]>) -> Option<Arc<Authenticated>> {
        if self.ttl.is_zero() {
            return None;
        }
        let key = self.cache_key(token, audiences);
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.get(&key).filter(|e| e.until > Instant::now()).map(|e| Arc::clone(&e.result))
    }

    /// Remembers a success (until the TTL or the token's expiry, whichever is first) and
    /// returns it shared.
    pub fn insert(
        &self,
        token: &str,
        audiences: Option<&[String]>,
        result: Authenticated,
        now_unix: i64,
    ) -> Arc<Authenticated> {
        let result = Arc::new(result);
        let mut ttl = self.ttl;
        if let Some(exp) = result.expires_at {
            let left = u64::try_from(exp.saturating_sub(now_unix)).unwrap_or(0);
            ttl = ttl.min(Duration::from_secs(left));
        }
        if ttl.is_zero() {
            return result;
        }
        let key = self.cache_key(token, audiences);
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, e| e.until > now);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(key, Entry { result: Arc::clone(&result), until: now + ttl });
        result
    }
}

impl TokenCache {
    /// Drops every remembered success of a token bound to, or speaking for, the object with
    /// `uid` (a pod, a service account, a node, or the Secret it is bound to or held in): the object is gone, so its tokens are
    /// verified afresh at their next use. Answers how many entries went.
    pub fn forget_bound(&self, uid: &str) -> usize {
        if uid.is_empty() {
            return 0;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let before = entries.len();
        entries.retain(|_, e| {
            let info = &e.result.info;
            info.uid != uid && info.pod_uid != uid && info.node_uid != uid && e.result.secret_uid != uid
        });
        before - entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use podpass_token::{Freshness, ServiceAccountInfo, UserInfo};

    #[test]
    fn a_deleted_objects_tokens_are_forgotten_and_no_others() {
        let cache = TokenCache::new(DEFAULT_SUCCESS_TTL).unwrap();
        let bound = |sa: &str, pod: &str, node: &str| {
            let mut r = result(None);
            r.info.uid = sa.into();
            r.info.pod_uid = pod.into();
            r.info.node_uid = node.into();
            r
        };
        cache.insert("a", None, bound("sa-1", "pod-1", "node-1"), 0);
        cache.insert("b", None, bound("sa-1", "pod-2", "node-1"), 0);
        cache.insert("c", None, bound("sa-2", "", "node-2"), 0);
        let mut in_secret = bound("sa-3", "", "");
        in_secret.secret_uid = "secret-1".into();
        cache.insert("d", None, in_secret, 0);
        assert_eq!(cache.forget_bound("secret-1"), 1);
        assert_eq!(cache.forget_bound("pod-1"), 1);
        assert!(cache.get("a", None).is_none() && cache.get("b", None).is_some());
        assert_eq!(cache.forget_bound("node-2"), 1);
        assert_eq!(cache.forget_bound("sa-1"), 1);
        assert_eq!(cache.forget_bound(""), 0, "an object without a uid names nothing");
        assert!(cache.get("b", None).is_none());
    }

    fn result(expires_at: Option<i64>) -> Authenticated {
        let info =
            ServiceAccountInfo { namespace: "ns".into(), name: "sa".into(), uid: "u".into(), ..Default::default() };
        Authenticated {
            user: UserInfo::default(),
            info,
            audiences: vec!["a".into()],
            audit_annotations: vec![],
            freshness: Freshness::NotTracked,
            legacy: false,
            expires_at,
            verified_bound: None,
            pod_node_ref: false,
            secret_uid: String::new(),
        }
    }

    #[test]
    fn remembers_by_token_and_audiences() {
        let cache = TokenCache::new(DEFAULT_SUCCESS_TTL).unwrap();
        let aud = vec!["a".to_owned()];
        cache.insert("tok", Some(&aud), result(Some(2_000_000_000)), 1_000_000_000);
        assert!(cache.get("tok", Some(&aud)).is_some());
        assert!(cache.get("tok", None).is_none(), "other audience request");
        assert!(cache.get("tok", Some(&["b".to_owned()])).is_none());
        assert!(cache.get("tok2", Some(&aud)).is_none());
        // ["ab"] and ["a","b"] must not collide.
        cache.insert("t", Some(&["ab".to_owned()]), result(None), 0);
        assert!(cache.get("t", Some(&["a".to_owned(), "b".to_owned()])).is_none());
    }

    #[test]
    fn never_outlives_the_token_and_zero_disables() {
        let cache = TokenCache::new(DEFAULT_SUCCESS_TTL).unwrap();
        cache.insert("expired", None, result(Some(100)), 100);
        assert!(cache.get("expired", None).is_none());
        let off = TokenCache::new(Duration::ZERO).unwrap();
        off.insert("tok", None, result(None), 0);
        assert!(off.get("tok", None).is_none());
    }

    #[test]
    fn entries_expire() {
        let cache = TokenCache::new(Duration::from_millis(30)).unwrap();
        cache.insert("tok", None, result(None), 0);
        assert!(cache.get("tok", None).is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert!(cache.get("tok", None).is_none());
    }
}
