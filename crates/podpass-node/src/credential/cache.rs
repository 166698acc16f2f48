//! The per-provider credential cache (plugin.go): binary keys encoded as cryptobyte does,
//! entries expiring strictly after their deadline, removed lazily on lookup and swept every
//! 15 minutes. Unlike upstream's it is bounded ([`MAX_ENTRIES`]), and an entry the registry
//! refused can be forgotten without touching the answer that replaced it (generations).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::docker_config::DockerConfig;

/// How often a lookup also sweeps every expired entry.
const PURGE_INTERVAL: Duration = Duration::from_secs(15 * 60);

/// Entries one provider holds at most. Upstream's cache is unbounded; with `cacheType:
/// Token` it holds an entry per pod token, so pods churning faster than `cacheDuration`
/// would grow it without end. Past the bound, expired entries go first, then the one
/// closest to its deadline.
pub const MAX_ENTRIES: usize = 8192;

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
    /// Which insertion this is: [`CredentialCache::forget`] removes only this one.
    pub generation: u64,
    expires_at: Instant,
}

#[derive(Debug)]
struct Entries {
    map: HashMap<Vec<u8>, CachedCredentials>,
    last_purge: Instant,
    next_generation: u64,
}

/// Cached answers of one provider.
#[derive(Debug)]
pub struct CredentialCache {
    entries: Mutex<Entries>,
    max_entries: usize,
}

impl Default for CredentialCache {
    fn default() -> Self {
        Self::with_capacity(MAX_ENTRIES)
    }
}

impl CredentialCache {
    /// An empty cache holding at most `max_entries` (at least one).
    pub fn with_capacity(max_entries: usize) -> Self {
        Self {
            entries: Mutex::new(Entries { map: HashMap::new(), last_purge: Instant::now(), next_generation: 0 }),
            max_entries: max_entries.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The entry under `key` if it has not expired (an expired one is removed); sweeps
    /// all expired entries when the last sweep is older than 15 minutes.
    pub fn get(&self, key: &[u8], now: Instant) -> Option<CachedCredentials> {
        let mut guard = self.lock();
        let entries = &mut *guard;
        if now > entries.last_purge + PURGE_INTERVAL {
            entries.map.retain(|_, e| now <= e.expires_at);
            entries.last_purge = now;
        }
        match entries.map.get(key) {
            Some(e) if now > e.expires_at => {
                entries.map.remove(key);
                None
            }
            Some(e) => Some(e.clone()),
            None => None,
        }
    }

    /// Removes the entry under `key` if it is still insertion `generation`: an answer the
    /// registry refused goes, one a concurrent lookup has put in its place stays. Returns
    /// whether it was removed.
    pub fn forget(&self, key: &[u8], generation: u64) -> bool {
        let mut guard = self.lock();
        if guard.map.get(key).is_some_and(|e| e.generation == generation) {
            guard.map.remove(key);
            return true;
        }
        false
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
        let mut guard = self.lock();
        let entries = &mut *guard;
        if entries.map.len() >= self.max_entries && !entries.map.contains_key(&key) {
            entries.map.retain(|_, e| now <= e.expires_at);
            entries.last_purge = now;
            if entries.map.len() >= self.max_entries
                && let Some(soonest) = entries.map.iter().min_by_key(|(_, e)| e.expires_at).map(|(k, _)| k.clone())
            {
                entries.map.remove(&soonest);
            }
        }
        let generation = entries.next_generation;
        entries.next_generation += 1;
        entries.map.insert(
            key,
            CachedCredentials { config, service_account, credential_id, generation, expires_at: now + ttl },
        );
    }

    /// Removes every expired entry now (the kubelet's cache purges on a 15-minute timer;
    /// the agent calls this from its housekeeping).
    pub fn purge_expired(&self, now: Instant) -> usize {
        let mut guard = self.lock();
        let entries = &mut *guard;
        let before = entries.map.len();
        entries.map.retain(|_, e| now <= e.expires_at);
        entries.last_purge = now;
        before - entries.map.len()
    }

    /// Entries held (expired ones included until swept).
    pub fn len(&self) -> usize {
        self.lock().map.len()
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
    fn forgetting_a_refused_answer_keeps_the_one_that_replaced_it() {
        let cache = CredentialCache::default();
        let t0 = Instant::now();
        let ttl = Duration::from_secs(60);
        cache.insert(b"k".to_vec(), DockerConfig::new(), None, Some("JTI=old".into()), t0, ttl);
        let stale = cache.get(b"k", t0).unwrap();
        cache.insert(b"k".to_vec(), DockerConfig::new(), None, Some("JTI=new".into()), t0, ttl);
        assert!(!cache.forget(b"k", stale.generation), "a newer answer is not the refused one");
        let fresh = cache.get(b"k", t0).unwrap();
        assert_eq!(fresh.credential_id.as_deref(), Some("JTI=new"));
        assert!(cache.forget(b"k", fresh.generation));
        assert!(cache.get(b"k", t0).is_none());
        assert!(!cache.forget(b"k", fresh.generation), "already gone");
    }

    #[test]
    fn past_its_bound_the_expired_then_the_soonest_to_expire_go() {
        let cache = CredentialCache::with_capacity(3);
        let t0 = Instant::now();
        let s = Duration::from_secs;
        cache.insert(b"expired".to_vec(), DockerConfig::new(), None, None, t0, s(1));
        cache.insert(b"soon".to_vec(), DockerConfig::new(), None, None, t0, s(100));
        cache.insert(b"late".to_vec(), DockerConfig::new(), None, None, t0, s(1000));
        let t1 = t0 + s(10);
        cache.insert(b"new1".to_vec(), DockerConfig::new(), None, None, t1, s(500));
        assert_eq!(cache.len(), 3);
        assert!(cache.get(b"soon", t1).is_some(), "the expired entry went first");
        cache.insert(b"new2".to_vec(), DockerConfig::new(), None, None, t1, s(500));
        assert_eq!(cache.len(), 3);
        assert!(cache.get(b"soon", t1).is_none(), "then the one closest to its deadline");
        assert!(
            cache.get(b"late", t1).is_some() && cache.get(b"new1", t1).is_some() && cache.get(b"new2", t1).is_some()
        );
        // Replacing a key at the bound evicts nothing.
        cache.insert(b"late".to_vec(), DockerConfig::new(), None, None, t1, s(5));
        assert_eq!(cache.len(), 3);
        assert!(cache.get(b"new1", t1).is_some() && cache.get(b"new2", t1).is_some());
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
