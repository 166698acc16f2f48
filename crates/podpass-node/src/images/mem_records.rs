//! The in-memory layer over the record files (pullmanager/mem_pullrecords.go): a
//! write-through LRU per record kind, "authoritative" only after a complete, error-free
//! listing that fit — then a miss means "no such record" without touching the disk. Any
//! eviction ends that (the cache no longer holds everything).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use super::records::{ImagePullIntent, ImagePulledRecord, RecordError, RecordStore};

/// Upstream's cap on cached intents.
pub const MAX_INTENTS: usize = 1024;
/// Upstream's cap on cached pulled records.
pub const MAX_PULLED: usize = 2000;

/// A small LRU: values by key, keys by last use.
#[derive(Debug)]
struct Lru<T> {
    // One shared copy of each key for both indexes.
    entries: HashMap<Arc<str>, (T, u64)>,
    by_use: BTreeMap<u64, Arc<str>>,
    tick: u64,
    max: usize,
    authoritative: bool,
    /// Bumped by every write or delete on disk (after it, under this lock): a listing
    /// read while it moved may have missed that change and must not become authoritative.
    generation: u64,
}

impl<T: Clone> Lru<T> {
    fn new(max: usize) -> Self {
        Self {
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
            tick: 0,
            max: max.max(1),
            authoritative: false,
            generation: 0,
        }
    }

    fn get(&mut self, key: &str) -> Option<T> {
        self.tick += 1;
        let tick = self.tick;
        let (value, used) = self.entries.get_mut(key)?;
        if let Some(k) = self.by_use.remove(used) {
            self.by_use.insert(tick, k);
        }
        *used = tick;
        Some(value.clone())
    }

    fn insert(&mut self, key: String, value: T) {
        self.tick += 1;
        if let Some((_, used)) = self.entries.remove(key.as_str()) {
            self.by_use.remove(&used);
        }
        let key: Arc<str> = Arc::from(key);
        self.by_use.insert(self.tick, key.clone());
        self.entries.insert(key, (value, self.tick));
        while self.entries.len() > self.max {
            let Some((_, oldest)) = self.by_use.pop_first() else { break };
            self.entries.remove(&oldest);
            // An eviction means the cache no longer holds every record.
            self.authoritative = false;
        }
    }

    fn remove(&mut self, key: &str) {
        if let Some((_, used)) = self.entries.remove(key) {
            self.by_use.remove(&used);
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.by_use.clear();
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The record files with the in-memory layer in front.
#[derive(Debug)]
pub struct CachedRecords {
    store: RecordStore,
    intents: Mutex<Lru<()>>,
    pulled: Mutex<Lru<Arc<ImagePulledRecord>>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl CachedRecords {
    /// The layer over `store`, with upstream's caps applied to the requested sizes.
    pub fn new(store: RecordStore, intents: usize, pulled: usize) -> Self {
        Self {
            store,
            intents: Mutex::new(Lru::new(intents.min(MAX_INTENTS))),
            pulled: Mutex::new(Lru::new(pulled.min(MAX_PULLED))),
        }
    }

    /// The files underneath.
    pub fn store(&self) -> &RecordStore {
        &self.store
    }

    /// Cache use as `(intents, pulled)` percentages of their caps
    /// (`kubelet_imagemanager_inmemory_*_usage_percent`).
    pub fn usage_percent(&self) -> (f64, f64) {
        let pct = |len: usize, max: usize| {
            #[allow(clippy::cast_precision_loss)]
            let p = len as f64 * 100.0 / max as f64;
            p
        };
        let i = locked(&self.intents);
        let p = locked(&self.pulled);
        (pct(i.len(), i.max), pct(p.len(), p.max))
    }

    /// Whether a complete listing of pulled records is in memory.
    #[cfg(test)]
    pub fn pulled_authoritative(&self) -> bool {
        locked(&self.pulled).authoritative
    }

    /// Writes the intent (disk first), then caches it.
    pub fn write_intent(&self, image: &str) -> Result<(), RecordError> {
        self.store.write_intent(image)?;
        let mut cache = locked(&self.intents);
        cache.generation += 1;
        cache.insert(image.to_owned(), ());
        Ok(())
    }

    /// Whether an intent for `image` exists.
    pub fn intent_exists(&self, image: &str) -> Result<bool, RecordError> {
        {
            let mut cache = locked(&self.intents);
            if cache.get(image).is_some() {
                return Ok(true);
            }
            if cache.authoritative {
                return Ok(false);
            }
        }
        let exists = self.store.intent_exists(image)?;
        if exists {
            locked(&self.intents).insert(image.to_owned(), ());
        }
        Ok(exists)
    }

    /// Deletes the intent (disk first).
    pub fn delete_intent(&self, image: &str) -> Result<(), RecordError> {
        self.store.delete_intent(image)?;
        let mut cache = locked(&self.intents);
        cache.generation += 1;
        cache.remove(image);
        Ok(())
    }

    /// Writes the record (disk first), then caches it.
    pub fn write_pulled(&self, record: &ImagePulledRecord) -> Result<(), RecordError> {
        self.store.write_pulled(record)?;
        let mut cache = locked(&self.pulled);
        cache.generation += 1;
        cache.insert(record.image_ref.clone(), Arc::new(record.clone()));
        Ok(())
    }

    /// The record for `image_ref` (shared with the cache).
    pub fn get_pulled(&self, image_ref: &str) -> Result<Option<Arc<ImagePulledRecord>>, RecordError> {
        {
            let mut cache = locked(&self.pulled);
            if let Some(r) = cache.get(image_ref) {
                return Ok(Some(r));
            }
            if cache.authoritative {
                return Ok(None);
            }
        }
        let record = self.store.get_pulled(image_ref)?.map(Arc::new);
        if let Some(r) = &record {
            locked(&self.pulled).insert(image_ref.to_owned(), r.clone());
        }
        Ok(record)
    }

    /// The record for `image_ref`, read from disk (another node process may have merged
    /// into it), refreshing the cache.
    pub fn reread_pulled(&self, image_ref: &str) -> Result<Option<ImagePulledRecord>, RecordError> {
        let record = self.store.get_pulled(image_ref)?;
        match &record {
            Some(r) => locked(&self.pulled).insert(image_ref.to_owned(), Arc::new(r.clone())),
            None => locked(&self.pulled).remove(image_ref),
        }
        Ok(record)
    }

    /// Deletes the record (disk first); an explicit delete keeps the cache authoritative.
    pub fn delete_pulled(&self, image_ref: &str) -> Result<(), RecordError> {
        self.store.delete_pulled(image_ref)?;
        let mut cache = locked(&self.pulled);
        cache.generation += 1;
        cache.remove(image_ref);
        Ok(())
    }

    /// Every intent (from memory when authoritative).
    pub fn list_intents(&self) -> (Vec<ImagePullIntent>, Vec<RecordError>) {
        let generation = {
            let cache = locked(&self.intents);
            if cache.authoritative {
                let mut out: Vec<ImagePullIntent> = cache
                    .entries
                    .keys()
                    .map(|image| ImagePullIntent {
                        kind: "ImagePullIntent".into(),
                        api_version: super::records::API_VERSION.into(),
                        image: image.to_string(),
                    })
                    .collect();
                out.sort_by(|a, b| a.image.cmp(&b.image));
                return (out, Vec::new());
            }
            cache.generation
        };
        let (items, errors) = self.store.list_intents();
        let mut cache = locked(&self.intents);
        refill(&mut cache, generation, errors.is_empty(), items.iter().map(|i| (i.image.clone(), ())));
        (items, errors)
    }

    /// Every pulled record (from memory when authoritative).
    pub fn list_pulled(&self) -> (Vec<ImagePulledRecord>, Vec<RecordError>) {
        self.list_pulled_between(|| {})
    }

    /// [`Self::list_pulled`], running `between` after reading the disk and before filling
    /// the cache (where a concurrent write can land; tests put one there).
    fn list_pulled_between(&self, between: impl FnOnce()) -> (Vec<ImagePulledRecord>, Vec<RecordError>) {
        let generation = {
            let cache = locked(&self.pulled);
            if cache.authoritative {
                let mut out: Vec<ImagePulledRecord> =
                    cache.entries.values().map(|(r, _)| ImagePulledRecord::clone(r)).collect();
                out.sort_by(|a, b| a.image_ref.cmp(&b.image_ref));
                return (out, Vec::new());
            }
            cache.generation
        };
        let (items, errors) = self.store.list_pulled();
        between();
        let mut cache = locked(&self.pulled);
        refill(
            &mut cache,
            generation,
            errors.is_empty(),
            items.iter().map(|r| (r.image_ref.clone(), Arc::new(r.clone()))),
        );
        (items, errors)
    }
}

/// After a listing from disk begun at `generation`: a complete one that fits (strictly
/// fewer than the cap) and saw no concurrent write makes the cache authoritative;
/// otherwise an empty cache takes what fits. A listing a write overtook changes nothing:
/// it may hold a record older than the cache's, or miss a new one.
fn refill<T: Clone>(
    cache: &mut Lru<T>,
    generation: u64,
    complete: bool,
    items: impl ExactSizeIterator<Item = (String, T)>,
) {
    if cache.generation != generation {
        return;
    }
    let fits = items.len() < cache.max;
    if complete && fits {
        cache.clear();
        for (k, v) in items {
            cache.insert(k, v);
        }
        cache.authoritative = true;
    } else if cache.len() == 0 {
        for (k, v) in items.take(cache.max) {
            cache.insert(k, v);
        }
        cache.authoritative = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::records::API_VERSION;

    fn record(r: &str) -> ImagePulledRecord {
        ImagePulledRecord {
            kind: "ImagePulledRecord".into(),
            api_version: API_VERSION.into(),
            last_updated_time: "2026-01-01T00:00:00Z".into(),
            image_ref: r.into(),
            credential_mapping: Default::default(),
        }
    }

    #[test]
    fn lru_evicts_least_recently_used_and_loses_authority() {
        let mut l = Lru::new(2);
        l.authoritative = true;
        l.insert("a".into(), 1);
        l.insert("b".into(), 2);
        assert_eq!(l.get("a"), Some(1));
        l.insert("c".into(), 3);
        assert_eq!(l.get("b"), None, "b was least recently used");
        assert_eq!(l.get("a"), Some(1));
        assert!(!l.authoritative);
        l.authoritative = true;
        l.remove("a");
        assert!(l.authoritative, "an explicit delete keeps authority");
    }

    #[test]
    fn a_listing_overtaken_by_a_write_never_becomes_authoritative() {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::open(dir.path()).unwrap();
        let cached = CachedRecords::new(store, 10, 10);
        cached.write_pulled(&record("sha256:a")).unwrap();
        cached.delete_pulled("sha256:a").unwrap();
        // A pull records sha256:b while start-up warming lists the disk (without it).
        let (listed, _) = cached.list_pulled_between(|| cached.write_pulled(&record("sha256:b")).unwrap());
        assert!(listed.is_empty(), "the listing was read before the write");
        assert!(!cached.pulled_authoritative(), "it must not say sha256:b does not exist");
        assert!(cached.get_pulled("sha256:b").unwrap().is_some());
        // The next quiet listing may.
        cached.list_pulled();
        assert!(cached.pulled_authoritative());
    }

    #[test]
    fn authoritative_misses_skip_the_disk_and_others_read_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::open(dir.path()).unwrap();
        let cached = CachedRecords::new(store.clone(), 10, 10);
        // Written behind the cache's back (another process): a non-authoritative miss reads it.
        store.write_pulled(&record("sha256:a")).unwrap();
        assert!(cached.get_pulled("sha256:a").unwrap().is_some());
        // A complete listing that fits makes misses final.
        let (all, errors) = cached.list_pulled();
        assert_eq!((all.len(), errors.len()), (1, 0));
        assert!(cached.pulled_authoritative());
        store.write_pulled(&record("sha256:b")).unwrap();
        assert!(cached.get_pulled("sha256:b").unwrap().is_none(), "authoritative: no disk read");
        assert!(cached.reread_pulled("sha256:b").unwrap().is_some());
        assert!(cached.get_pulled("sha256:b").unwrap().is_some());
        cached.delete_pulled("sha256:a").unwrap();
        assert!(cached.pulled_authoritative());
        assert!(cached.get_pulled("sha256:a").unwrap().is_none());
        assert!(!dir.path().join("image_manager/pulled").join(crate::images::records::file_name("sha256:a")).exists());
    }

    #[test]
    fn a_listing_that_does_not_fit_or_has_errors_is_not_authoritative() {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::open(dir.path()).unwrap();
        for i in 0..3 {
            store.write_pulled(&record(&format!("sha256:{i}"))).unwrap();
        }
        let cached = CachedRecords::new(store.clone(), 3, 3);
        assert_eq!(cached.list_pulled().0.len(), 3);
        assert!(!cached.pulled_authoritative(), "3 records do not fit strictly under a cap of 3");
        let (_, pulled_pct) = cached.usage_percent();
        assert!((pulled_pct - 100.0).abs() < f64::EPSILON);
        let cached = CachedRecords::new(store.clone(), 10, 10);
        std::fs::write(dir.path().join("image_manager/pulled/sha256-broken"), b"{").unwrap();
        let (items, errors) = cached.list_pulled();
        assert_eq!((items.len(), errors.len()), (3, 1));
        assert!(!cached.pulled_authoritative());
        // Caps are upstream's whatever is asked.
        let big = CachedRecords::new(store, 1 << 20, 1 << 20);
        assert_eq!(locked(&big.intents).max, MAX_INTENTS);
        assert_eq!(locked(&big.pulled).max, MAX_PULLED);
    }
}
