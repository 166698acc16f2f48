//! The per-provider credential cache (plugin.go): binary keys encoded as cryptobyte does,
//! entries expiring strictly after their deadline, removed lazily on lookup and swept every
//! 15 minutes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::docker_config::DockerConfig;

/// How often a lookup also sweeps every expired entry.
const PURGE_INTERVAL: Duration = Duration::from_secs(15 * 60);

/// A key part longer than a 2-byte length can describe; upstream fails the lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cache key part longer than 65535 bytes")]
pub struct KeyTooLong;

/// cryptobyte `AddUint16LengthPrefixed`.
fn lp(out: &mut Vec<u8>, s: &[u8]) -> Result<(), KeyTooLong> {
    let len = u16::try_from(s.len()).map_err(|_| KeyTooLong)?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s);
    Ok(())
}

/// The annotations part: u32 count, then each key and value length-prefixed, keys sorted.
fn annotations(out: &mut Vec<u8>, annotations: &BTreeMap<String, String>) -> Result<(), KeyTooLong> {
    let count = u32::try_from(annotations.len()).map_err(|_| KeyTooLong)?;
    out.extend_from_slice(&count.to_be_bytes());
    for (k, v) in annotations {
        lp(out, k.as_bytes())?;
        lp(out, v.as_bytes())?;
    }
    Ok(())
}

/// `generateCacheKey(base, saKey)` = lp(base) ‖ lp(saKey).
pub fn cache_key(base: &str, sa_key: &[u8]) -> Result<Vec<u8>, KeyTooLong> {
    let mut out = Vec::with_capacity(base.len() + sa_key.len() + 4);
    lp(&mut out, base.as_bytes())?;
    lp(&mut out, sa_key)?;
    Ok(out)
}

/// The service-account part of a key; pod name and UID are never part of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccountKey<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
    /// UID.
    pub uid: &'a str,
    /// The opted-in annotations sent to the plugin.
    pub annotations: &'a BTreeMap<String, String>,
    /// `Some(token hash)` when `cacheType` is `Token`.
    pub token_hash: Option<&'a str>,
}

/// `generateServiceAccountCacheKey`.
pub fn service_account_key(k: &ServiceAccountKey<'_>) -> Result<Vec<u8>, KeyTooLong> {
    let mut out = Vec::new();
    lp(&mut out, k.namespace.as_bytes())?;
    lp(&mut out, k.name.as_bytes())?;
    lp(&mut out, k.uid.as_bytes())?;
    annotations(&mut out, k.annotations)?;
    if let Some(hash) = k.token_hash {
        lp(&mut out, b"token")?;
        lp(&mut out, hash.as_bytes())?;
    }
    Ok(out)
}

/// `generateSingleFlightKey(image, tokenHash, annotations)`.
pub fn single_flight_key(
    image: &str,
    token_hash: &str,
    sa_annotations: &BTreeMap<String, String>,
) -> Result<Vec<u8>, KeyTooLong> {
    let mut out = Vec::new();
    lp(&mut out, image.as_bytes())?;
    lp(&mut out, token_hash.as_bytes())?;
    annotations(&mut out, sa_annotations)?;
    Ok(out)
}

/// A cached answer.
#[derive(Debug, Clone)]
pub struct CachedCredentials {
    /// Credentials by pattern.
    pub config: DockerConfig,
    /// The service account it was obtained with.
    pub service_account: Option<crate::ServiceAccountRef>,
    /// The credential id (`JTI=…`) of the service-account token it was obtained with.
    pub credential_id: Option<String>,
    expires_at: Instant,
}

/// Cached answers of one provider.
#[derive(Debug)]
pub struct CredentialCache {
    entries: Mutex<(HashMap<Vec<u8>, CachedCredentials>, Instant)>,
}

impl Default for CredentialCache {
    fn default() -> Self {
        Self { entries: Mutex::new((HashMap::new(), Instant::now())) }
    }
}

impl CredentialCache {
    /// The entry under `key` if it has not expired (an expired one is removed); sweeps
    /// all expired entries when the last sweep is older than 15 minutes.
    pub fn get(&self, key: &[u8], now: Instant) -> Option<CachedCredentials> {
        let mut guard = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let (entries, last_purge) = &mut *guard;
        if now > *last_purge + PURGE_INTERVAL {
            entries.retain(|_, e| now <= e.expires_at);
            *last_purge = now;
        }
        match entries.get(key) {
            Some(e) if now > e.expires_at => {
                entries.remove(key);
                None
            }
            Some(e) => Some(e.clone()),
            None => None,
        }
    }

    /// Stores an answer until `now + ttl`.
    pub fn insert(
        &self,
        key: Vec<u8>,
        config: DockerConfig,
        service_account: Option<crate::ServiceAccountRef>,
        credential_id: Option<String>,
        now: Instant,
        ttl: Duration,
    ) {
        let mut guard = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        guard.0.insert(key, CachedCredentials { config, service_account, credential_id, expires_at: now + ttl });
    }

    /// Removes every expired entry now (the kubelet's cache purges on a 15-minute timer;
    /// the agent calls this from its housekeeping).
    pub fn purge_expired(&self, now: Instant) -> usize {
        let mut guard = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let (entries, last_purge) = &mut *guard;
        let before = entries.len();
        entries.retain(|_, e| now <= e.expires_at);
        *last_purge = now;
        before - entries.len()
    }

    /// Entries held (expired ones included until swept).
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).0.len()
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_length_prefixed_as_cryptobyte() {
        assert_eq!(cache_key("img", b"").unwrap(), b"\x00\x03img\x00\x00");
        let ann: BTreeMap<String, String> = [("b".into(), "2".into()), ("a".into(), "1".into())].into();
        let sa = ServiceAccountKey { namespace: "ns", name: "sa", uid: "u", annotations: &ann, token_hash: None };
        assert_eq!(
            service_account_key(&sa).unwrap(),
            b"\x00\x02ns\x00\x02sa\x00\x01u\x00\x00\x00\x02\x00\x01a\x00\x011\x00\x01b\x00\x012"
        );
        let tok = ServiceAccountKey { token_hash: Some("sha256:x"), ..sa.clone() };
        assert!(service_account_key(&tok).unwrap().ends_with(b"\x00\x05token\x00\x08sha256:x"));
        assert_eq!(single_flight_key("i", "", &BTreeMap::new()).unwrap(), b"\x00\x01i\x00\x00\x00\x00\x00\x00");
        assert_eq!(cache_key(&"x".repeat(70_000), b""), Err(KeyTooLong));
    }

    #[test]
    fn expires_strictly_after_the_deadline_and_sweeps() {
        let cache = CredentialCache::default();
        let t0 = Instant::now();
        cache.insert(b"k".to_vec(), DockerConfig::new(), None, None, t0, Duration::from_secs(10));
        assert!(cache.get(b"k", t0 + Duration::from_secs(10)).is_some(), "at the deadline still valid");
        assert!(cache.get(b"k", t0 + Duration::from_secs(11)).is_none());
        assert!(cache.is_empty(), "removed lazily");
        cache.insert(b"a".to_vec(), DockerConfig::new(), None, None, t0, Duration::from_secs(1));
        cache.insert(b"b".to_vec(), DockerConfig::new(), None, None, t0, Duration::from_secs(3600));
        assert!(cache.get(b"zzz", t0 + Duration::from_secs(16 * 60)).is_none());
        assert_eq!(cache.len(), 1, "the sweep removed the expired entry");
    }

    #[test]
    fn housekeeping_purges_only_expired_entries() {
        let cache = CredentialCache::default();
        let t0 = Instant::now();
        cache.insert(b"a".to_vec(), DockerConfig::new(), None, None, t0, Duration::from_secs(1));
        cache.insert(b"b".to_vec(), DockerConfig::new(), None, None, t0, Duration::from_secs(3600));
        assert_eq!(cache.purge_expired(t0), 0);
        assert_eq!(cache.purge_expired(t0 + Duration::from_secs(2)), 1);
        assert!(cache.get(b"b", t0 + Duration::from_secs(2)).is_some());
    }
}
