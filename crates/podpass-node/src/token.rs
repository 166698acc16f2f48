//! The kubelet's service-account token manager (pkg/kubelet/token/token_manager.go): tokens
//! cached per request and refreshed when older than 80% of their lifetime or 24 hours
//! (with up to 10 s of jitter), or when the clock jumped back; a still-valid token keeps
//! being served when a refresh fails; expired entries are collected.

use std::collections::HashMap;
use std::sync::Mutex;

use thiserror::Error;

use futures::future::BoxFuture;

/// Tokens older than this are refreshed whatever their lifetime.
pub const MAX_TTL_SECONDS: i64 = 24 * 3600;
/// Upper bound (exclusive) of the refresh jitter.
pub const MAX_JITTER_SECONDS: i64 = 10;

/// What is asked for; also the cache key (no secret in it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TokenKey {
    /// Namespace.
    pub namespace: String,
    /// Service account name.
    pub service_account: String,
    /// `metadata.uid` guard (the SA UID when known; since 1.34 part of the key).
    pub service_account_uid: String,
    /// `spec.audiences`.
    pub audiences: Vec<String>,
    /// `spec.expirationSeconds` (0: the server's default).
    pub expiration_seconds: i64,
    /// `spec.boundObjectRef`.
    pub bound: Option<crate::BoundObjectRef>,
}

/// A token the API server issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestedToken {
    /// The JWT.
    pub token: String,
    /// `status.expirationTimestamp` (Unix seconds).
    pub expires_at: i64,
    /// `spec.expirationSeconds` of the answer (the server fills in its default).
    pub expiration_seconds: Option<i64>,
}

/// Requests tokens (TokenRequest) from the API server.
pub trait TokenFetcher: Send + Sync {
    /// Creates a token for `key`; the error is the API's message.
    fn fetch<'a>(
        &'a self,
        key: &'a TokenKey,
    ) -> BoxFuture<'a, Result<RequestedToken, crate::request_error::RequestError>>;
}

/// No token can be served (upstream messages).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TokenError {
    /// Nothing cached and the request failed.
    #[error("failed to fetch token: {0}")]
    Fetch(crate::request_error::RequestError),
    /// The cached token expired and its refresh failed.
    #[error("token {key} expired and refresh failed: {reason}")]
    ExpiredRefreshFailed {
        /// The key, printed.
        key: String,
        /// Why the refresh failed.
        reason: crate::request_error::RequestError,
    },
}

/// Caches tokens per [`TokenKey`].
pub struct TokenManager<F> {
    fetcher: F,
    cache: Mutex<HashMap<TokenKey, RequestedToken>>,
    jitter: fn() -> i64,
}

impl<F> std::fmt::Debug for TokenManager<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenManager").finish_non_exhaustive()
    }
}

/// Uniform whole seconds in [0, 10).
pub fn random_jitter() -> i64 {
    let mut b = [0u8; 1];
    let _ = aws_lc_rs::rand::fill(&mut b);
    i64::from(b[0]) % MAX_JITTER_SECONDS
}

/// The current Unix time in seconds.
pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// `requiresRefresh`.
pub fn requires_refresh(token: &RequestedToken, now: i64, jitter: i64) -> bool {
    let Some(lifetime) = token.expiration_seconds else {
        // Upstream logs and keeps it: it cannot tell how old the token is.
        return false;
    };
    let issued_at = token.expires_at - lifetime;
    now > issued_at + MAX_TTL_SECONDS - jitter
        || now > token.expires_at - lifetime * 20 / 100 - jitter
        || now < issued_at
}

/// The first Unix second at which [`requires_refresh`] holds for `token` (with `jitter`):
/// what a token's rewrite is scheduled for. `None` when the token's age is unknown (it is
/// never refreshed, as upstream).
pub fn refresh_due_at(token: &RequestedToken, jitter: i64) -> Option<i64> {
    let lifetime = token.expiration_seconds?;
    let issued_at = token.expires_at - lifetime;
    // `now > x` first holds at x + 1.
    Some((issued_at + MAX_TTL_SECONDS - jitter).min(token.expires_at - lifetime * 20 / 100 - jitter) + 1)
}

impl<F: TokenFetcher> TokenManager<F> {
    /// A manager requesting tokens through `fetcher`.
    pub fn new(fetcher: F) -> Self {
        Self { fetcher, cache: Mutex::new(HashMap::new()), jitter: random_jitter }
    }

    /// A manager with a fixed jitter (tests and benchmarks).
    pub fn with_jitter(fetcher: F, jitter: fn() -> i64) -> Self {
        Self { fetcher, cache: Mutex::new(HashMap::new()), jitter }
    }

    fn cached(&self, key: &TokenKey) -> Option<RequestedToken> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).get(key).cloned()
    }

    /// A token for `key` at Unix time `now`.
    pub async fn get(&self, key: &TokenKey, now: i64) -> Result<RequestedToken, TokenError> {
        let cached = self.cached(key);
        if let Some(c) = &cached
            && !requires_refresh(c, now, (self.jitter)())
        {
            return Ok(c.clone());
        }
        match self.fetcher.fetch(key).await {
            Ok(fresh) => {
                self.cache.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), fresh.clone());
                Ok(fresh)
            }
            Err(reason) => match cached {
                None => Err(TokenError::Fetch(reason)),
                Some(c) if now > c.expires_at => {
                    Err(TokenError::ExpiredRefreshFailed { key: format!("{key:?}"), reason })
                }
                Some(c) => {
                    tracing::warn!(namespace = %key.namespace, service_account = %key.service_account, reason = %reason, "token refresh failed; serving the cached token until it expires");
                    Ok(c)
                }
            },
        }
    }

    /// Drops expired tokens (the kubelet does this every minute).
    pub fn collect_garbage(&self, now: i64) {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, t| now <= t.expires_at);
    }

    /// Drops the tokens bound to a pod that went away.
    pub fn delete_for_pod(&self, pod_uid: &str) {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|k, _| k.bound.as_ref().is_none_or(|b| b.uid != pod_uid));
    }

    /// The cached tokens by freshness at `now`: (fresh, past their refresh time but not
    /// expired, expired). A token stays past its refresh time only while its refresh fails
    /// (the API server is away): what `/metrics` reports so that is seen.
    pub fn freshness(&self, now: i64) -> (usize, usize, usize) {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let mut counts = (0, 0, 0);
        for t in cache.values() {
            if now > t.expires_at {
                counts.2 += 1;
            } else if requires_refresh(t, now, 0) {
                counts.1 += 1;
            } else {
                counts.0 += 1;
            }
        }
        counts
    }

    /// Tokens cached.
    pub fn len(&self) -> usize {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Nothing cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

    /// Issues tokens valid for 3600 s from the shared clock, or fails when told to.
    struct Fake {
        now: AtomicI64,
        calls: AtomicUsize,
        fail: std::sync::atomic::AtomicBool,
    }

    impl TokenFetcher for &Fake {
        fn fetch<'a>(
            &'a self,
            _key: &'a TokenKey,
        ) -> BoxFuture<'a, Result<RequestedToken, crate::request_error::RequestError>> {
            Box::pin(async move {
                let n = self.calls.fetch_add(1, Ordering::SeqCst);
                if self.fail.load(Ordering::SeqCst) {
                    return Err("the server is down".into());
                }
                let now = self.now.load(Ordering::SeqCst);
                Ok(RequestedToken { token: format!("t{n}"), expires_at: now + 3600, expiration_seconds: Some(3600) })
            })
        }
    }

    fn key(pod_uid: &str) -> TokenKey {
        TokenKey {
            namespace: "ns".into(),
            service_account: "sa".into(),
            service_account_uid: "sa-uid".into(),
            audiences: vec!["registry".into()],
            expiration_seconds: 0,
            bound: Some(crate::BoundObjectRef::pod("p", pod_uid)),
        }
    }

    #[tokio::test]
    async fn refreshes_at_80_percent_and_keeps_a_valid_token_on_failure() {
        let fake = Fake { now: AtomicI64::new(1_000_000), calls: AtomicUsize::new(0), fail: false.into() };
        let m = TokenManager::with_jitter(&fake, || 0);
        let t0 = 1_000_000;
        assert_eq!(m.get(&key("u1"), t0).await.unwrap().token, "t0");
        assert_eq!(m.get(&key("u1"), t0 + 2880).await.unwrap().token, "t0", "exactly 80%: still fresh");
        assert_eq!(m.get(&key("u2"), t0).await.unwrap().token, "t1", "another pod, another token");
        fake.now.store(t0 + 2881, Ordering::SeqCst);
        assert_eq!(m.get(&key("u1"), t0 + 2881).await.unwrap().token, "t2", "past 80%: refreshed");
        fake.fail.store(true, Ordering::SeqCst);
        let later = t0 + 2881 + 3000;
        assert_eq!(m.get(&key("u1"), later).await.unwrap().token, "t2", "refresh failed, still valid");
        let err = m.get(&key("u1"), t0 + 2881 + 3601).await.unwrap_err();
        assert!(matches!(err, TokenError::ExpiredRefreshFailed { .. }), "{err}");
        assert_eq!(m.get(&key("new"), t0).await.unwrap_err().to_string(), "failed to fetch token: the server is down");
    }

    #[tokio::test]
    async fn freshness_counts_tokens_past_refresh_and_past_expiry() {
        let fake = Fake { now: AtomicI64::new(0), calls: AtomicUsize::new(0), fail: false.into() };
        let m = TokenManager::with_jitter(&fake, || 0);
        m.get(&key("a"), 0).await.unwrap();
        fake.now.store(1000, Ordering::SeqCst);
        m.get(&key("b"), 1000).await.unwrap();
        assert_eq!(m.freshness(1000), (2, 0, 0));
        assert_eq!(m.freshness(2881), (1, 1, 0), "a is past 80% of its hour");
        assert_eq!(m.freshness(3601), (1, 0, 1), "a expired, b still fresh");
        assert_eq!(m.freshness(3881), (0, 1, 1), "a expired, b past 80%");
        // A token whose issue time is in the future (the clock jumped back) needs a refresh.
        assert_eq!(m.freshness(500), (1, 1, 0));
    }

    #[test]
    fn refresh_rules() {
        let t = RequestedToken { token: String::new(), expires_at: 10_000 + 3600, expiration_seconds: Some(3600) };
        assert!(!requires_refresh(&t, 10_000, 0));
        assert!(requires_refresh(&t, 9_999, 0), "clock jumped back before iat");
        assert!(requires_refresh(&t, 10_000 + 2880 - 5 + 1, 5), "jitter brings the refresh forward");
        let long = RequestedToken {
            token: String::new(),
            expires_at: 10_000 + 7 * 86_400,
            expiration_seconds: Some(7 * 86_400),
        };
        assert!(!requires_refresh(&long, 10_000 + 86_400, 0));
        assert!(requires_refresh(&long, 10_000 + 86_401, 0), "older than 24h");
        let unknown = RequestedToken { token: String::new(), expires_at: 0, expiration_seconds: None };
        assert!(!requires_refresh(&unknown, i64::MAX, 0));
    }

    #[tokio::test]
    async fn garbage_collection_and_pod_deletion() {
        let fake = Fake { now: AtomicI64::new(0), calls: AtomicUsize::new(0), fail: false.into() };
        let m = TokenManager::with_jitter(&fake, || 0);
        m.get(&key("a"), 0).await.unwrap();
        m.get(&key("b"), 0).await.unwrap();
        m.delete_for_pod("a");
        assert_eq!(m.len(), 1);
        m.collect_garbage(3600);
        assert_eq!(m.len(), 1, "valid until its expiry instant");
        m.collect_garbage(3601);
        assert!(m.is_empty());
    }

    #[test]
    fn the_refresh_schedule_is_the_first_second_requires_refresh_holds() {
        for (lifetime, jitter) in [(600, 0), (3607, 7), (31_536_000, 3), (86_400 * 2, 9)] {
            let token = RequestedToken {
                token: String::new(),
                expires_at: 1_000_000 + lifetime,
                expiration_seconds: Some(lifetime),
            };
            let due = refresh_due_at(&token, jitter).unwrap_or_default();
            assert!(!requires_refresh(&token, due - 1, jitter), "{lifetime}/{jitter}: early at {}", due - 1);
            assert!(requires_refresh(&token, due, jitter), "{lifetime}/{jitter}: not due at {due}");
        }
        // 600 s tokens are rewritten after 480 s (80%)
        let t = RequestedToken { token: String::new(), expires_at: 600, expiration_seconds: Some(600) };
        assert_eq!(refresh_due_at(&t, 0), Some(481));
        assert_eq!(refresh_due_at(&RequestedToken { expiration_seconds: None, ..t }, 0), None);
    }
}
