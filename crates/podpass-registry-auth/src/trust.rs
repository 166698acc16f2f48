//! Trust in one cluster's service-account issuer: its OIDC discovery document and JWKS,
//! fetched from the configured issuer URL only (never from a URL a token names), kept
//! current in the background, refetched at most once per interval when a token names an
//! unknown `kid`, keys that left the JWKS honoured for a bounded grace, and nothing
//! accepted while no key set was ever fetched (fail closed).

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use podpass_token::{AuthError, Authenticator, Jwks, TokenFeatures, VerificationKey, VerifiedToken};
use serde::Deserialize;
use thiserror::Error;
use tokio::sync::Mutex;

use crate::fetch::{DocumentFetcher, FetchError, same_origin};
use crate::metrics::RegistryAuthMetrics;

/// Timings of issuer trust.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrustTimings {
    /// Background refresh period.
    pub refresh_interval: Duration,
    /// An unknown `kid` triggers a refetch at most this often (per issuer); also the retry
    /// period while no key set is known.
    pub min_refetch_interval: Duration,
    /// Keys that left the JWKS still verify for this long.
    pub retired_key_grace: Duration,
}

impl Default for TrustTimings {
    fn default() -> Self {
        Self {
            refresh_interval: Duration::from_secs(300),
            min_refetch_interval: Duration::from_secs(10),
            retired_key_grace: Duration::from_secs(600),
        }
    }
}

/// A token of this issuer could not be verified.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TrustError {
    /// No key set of the issuer was ever fetched: nothing can be verified.
    #[error("keys of issuer {issuer} are unavailable: {reason}")]
    Unavailable {
        /// The issuer.
        issuer: String,
        /// The last fetch error.
        reason: String,
    },
    /// The token failed verification (signature, audience, expiry, shape…).
    #[error("{0}")]
    Refused(AuthError),
}

/// Discovery or JWKS could not be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RefreshError {
    /// A fetch failed.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The discovery document is not usable.
    #[error("discovery document of {issuer}: {reason}")]
    Discovery {
        /// The issuer.
        issuer: String,
        /// What is wrong.
        reason: String,
    },
    /// The JWKS is not usable.
    #[error("JWKS of {issuer}: {reason}")]
    Jwks {
        /// The issuer.
        issuer: String,
        /// What is wrong.
        reason: String,
    },
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

#[derive(Default)]
struct KeyState {
    authenticator: Option<Arc<Authenticator>>,
    current: Vec<VerificationKey>,
    /// Keys that left the JWKS, with when they left.
    retired: Vec<(VerificationKey, Instant)>,
    last_error: Option<String>,
}

/// Trust in one issuer.
pub struct IssuerTrust {
    issuer: String,
    audience: String,
    fetcher: DocumentFetcher,
    timings: TrustTimings,
    metrics: Arc<RegistryAuthMetrics>,
    state: RwLock<KeyState>,
    /// When the last fetch started; held while a fetch runs (single flight).
    last_fetch: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for IssuerTrust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuerTrust").field("issuer", &self.issuer).finish_non_exhaustive()
    }
}

fn same_key(a: &VerificationKey, b: &VerificationKey) -> bool {
    a.key_id() == b.key_id() && a.spki_der() == b.spki_der()
}

impl IssuerTrust {
    /// Trust in `issuer` (its URL; discovery is read from `<issuer>/.well-known/openid-configuration`)
    /// for tokens with `audience`. Nothing is fetched until [`Self::refresh`] or a token.
    pub fn new(
        issuer: &str,
        audience: &str,
        fetcher: DocumentFetcher,
        timings: TrustTimings,
        metrics: Arc<RegistryAuthMetrics>,
    ) -> Self {
        Self {
            issuer: issuer.into(),
            audience: audience.into(),
            fetcher,
            timings,
            metrics,
            state: RwLock::new(KeyState::default()),
            last_fetch: Mutex::new(None),
        }
    }

    /// The issuer URL.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Keys that verify now (current plus those in their grace), and the last fetch error.
    pub fn status(&self) -> (usize, Option<String>) {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        (state.authenticator.as_ref().map_or(0, |a| a.keys().len()), state.last_error.clone())
    }

    fn authenticator(&self) -> Option<Arc<Authenticator>> {
        let expired = {
            let state = self.state.read().unwrap_or_else(|p| p.into_inner());
            state.retired.iter().any(|(_, left)| left.elapsed() > self.timings.retired_key_grace)
        };
        if expired {
            let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
            self.rebuild(&mut state);
        }
        self.state.read().unwrap_or_else(|p| p.into_inner()).authenticator.clone()
    }

    /// Drops retired keys past their grace and rebuilds the verifier.
    fn rebuild(&self, state: &mut KeyState) {
        let grace = self.timings.retired_key_grace;
        state.retired.retain(|(_, left)| left.elapsed() <= grace);
        let keys: Vec<VerificationKey> =
            state.current.iter().cloned().chain(state.retired.iter().map(|(k, _)| k.clone())).collect();
        state.authenticator = (!keys.is_empty()).then(|| {
            Arc::new(Authenticator::new(
                vec![self.issuer.clone()],
                keys,
                vec![self.audience.clone()],
                TokenFeatures::default(),
            ))
        });
    }

    /// Verifies a token of this issuer at `now` (signature, issuer, audience, times,
    /// claim shape). An unknown `kid` refetches the JWKS once, if none was fetched within
    /// [`TrustTimings::min_refetch_interval`].
    pub async fn verify(&self, token: &str, now: i64) -> Result<VerifiedToken, TrustError> {
        if let Some(auth) = self.authenticator() {
            match auth.verify(token, None, now) {
                Err(AuthError::NoKeys) => {}
                other => return other.map_err(TrustError::Refused),
            }
        }
        self.refresh_if_due().await;
        match self.authenticator() {
            Some(auth) => auth.verify(token, None, now).map_err(TrustError::Refused),
            None => {
                let reason = self.status().1.unwrap_or_else(|| "not fetched yet".into());
                Err(TrustError::Unavailable { issuer: self.issuer.clone(), reason })
            }
        }
    }

    /// Refetches unless a fetch started within the minimum interval; callers arriving while
    /// one runs wait for it and do not fetch again.
    async fn refresh_if_due(&self) {
        let mut last = self.last_fetch.lock().await;
        if last.is_some_and(|t| t.elapsed() < self.timings.min_refetch_interval) {
            return;
        }
        *last = Some(Instant::now());
        let _ = self.fetch_and_apply().await;
    }

    /// Fetches now (background refresh), whatever the interval.
    pub async fn refresh(&self) -> Result<usize, RefreshError> {
        let mut last = self.last_fetch.lock().await;
        *last = Some(Instant::now());
        self.fetch_and_apply().await
    }

    async fn fetch_and_apply(&self) -> Result<usize, RefreshError> {
        let result = self.fetch_keys().await;
        let outcome = if result.is_ok() { "success" } else { "error" };
        self.metrics.jwks_fetch(&self.issuer, outcome);
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(keys) => {
                let now = Instant::now();
                let old = std::mem::take(&mut state.current);
                for key in old.into_iter().filter(|o| !keys.iter().any(|k| same_key(k, o))) {
                    state.retired.push((key, now));
                }
                state.retired.retain(|(r, _)| !keys.iter().any(|k| same_key(k, r)));
                state.current = keys;
                state.last_error = None;
                self.rebuild(&mut state);
                let count = state.current.len();
                drop(state);
                self.metrics.issuer_keys(&self.issuer, count);
                tracing::debug!(issuer = %self.issuer, keys = count, "issuer keys refreshed");
                Ok(count)
            }
            Err(e) => {
                tracing::warn!(issuer = %self.issuer, error = %e, "issuer keys not refreshed");
                state.last_error = Some(e.to_string());
                Err(e)
            }
        }
    }

    async fn fetch_keys(&self) -> Result<Vec<VerificationKey>, RefreshError> {
        discover_keys(&self.fetcher, &self.issuer).await
    }

    /// Refreshes every [`TrustTimings::refresh_interval`] (every
    /// [`TrustTimings::min_refetch_interval`] while nothing is known) until dropped.
    pub async fn refresh_forever(self: Arc<Self>) {
        loop {
            let ok = self.refresh().await.is_ok();
            let known = self.status().0 > 0;
            let pause = if ok || known { self.timings.refresh_interval } else { self.timings.min_refetch_interval };
            tokio::time::sleep(pause).await;
        }
    }
}

/// An issuer's signing keys, as an OIDC relying party finds them: its discovery document
/// (`<issuer>/.well-known/openid-configuration`, naming exactly this issuer), then the JWKS
/// at its `jwks_uri`, which must be on the issuer's origin.
pub async fn discover_keys(fetcher: &DocumentFetcher, issuer: &str) -> Result<Vec<VerificationKey>, RefreshError> {
    let discovery_url = format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/'));
    let bad = |reason: String| RefreshError::Discovery { issuer: issuer.to_owned(), reason };
    let body = fetcher.get(&discovery_url).await?;
    let discovery: Discovery = serde_json::from_slice(&body).map_err(|e| bad(e.to_string()))?;
    if discovery.issuer != issuer {
        return Err(bad(format!("names issuer {:?}", discovery.issuer)));
    }
    let issuer_url = reqwest::Url::parse(issuer).map_err(|e| bad(e.to_string()))?;
    let jwks_url = reqwest::Url::parse(&discovery.jwks_uri).map_err(|e| bad(format!("jwks_uri: {e}")))?;
    if !same_origin(&issuer_url, &jwks_url) {
        return Err(bad(format!("jwks_uri {} is not on the issuer's origin", discovery.jwks_uri)));
    }
    let body = fetcher.get(jwks_url.as_str()).await?;
    let bad_jwks = |reason: String| RefreshError::Jwks { issuer: issuer.to_owned(), reason };
    let keys = Jwks::from_json(&body).and_then(|set| set.verification_keys()).map_err(|e| bad_jwks(e.to_string()))?;
    if keys.is_empty() {
        return Err(bad_jwks("no usable signing keys".into()));
    }
    Ok(keys)
}
