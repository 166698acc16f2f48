//! The kubelet's image pull back-off (client-go `flowcontrol.Backoff` as the kubelet builds
//! it: 10 s initial, doubling to 300 s, no jitter), keyed `<podUID>_<image>`, together with
//! the previous pull error that a back-off message repeats (kubelet: `prevPullErrMsg`).

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// The kubelet's `backOffPeriod`: the first back-off after a failed pull.
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(10);
/// The kubelet's `MaxImageBackOff`.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
struct Entry {
    backoff: Duration,
    last_update: Instant,
    previous_error: Option<String>,
}

/// Per-key exponential back-off.
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(INITIAL_BACKOFF, MAX_BACKOFF)
    }
}

impl Backoff {
    /// A back-off starting at `initial`, doubling up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self { initial, max, entries: HashMap::new() }
    }

    /// flowcontrol `hasExpired`: an entry untouched for more than twice the maximum starts over.
    fn expired(&self, entry: &Entry, now: Instant) -> bool {
        now.saturating_duration_since(entry.last_update) > self.max * 2
    }

    /// flowcontrol `Next`: a failure at `now` — the first (or the first after expiry) backs
    /// off `initial`, each further one doubles it up to `max`.
    pub fn next(&mut self, key: &str, now: Instant, error: String) {
        let fresh = match self.entries.get(key) {
            Some(e) => self.expired(e, now),
            None => true,
        };
        let backoff = if fresh {
            self.initial
        } else {
            self.entries.get(key).map_or(self.initial, |e| (e.backoff * 2).min(self.max))
        };
        self.entries.insert(key.to_owned(), Entry { backoff, last_update: now, previous_error: Some(error) });
    }

    /// flowcontrol `IsInBackOffSinceUpdate`: whether `now` is within the back-off that the
    /// last failure started. When it is, the previous failure's message comes with it.
    pub fn in_backoff(&self, key: &str, now: Instant) -> Option<Option<&str>> {
        let entry = self.entries.get(key)?;
        if self.expired(entry, now) {
            return None;
        }
        (now.saturating_duration_since(entry.last_update) < entry.backoff).then_some(entry.previous_error.as_deref())
    }

    /// When the back-off for `key` ends (`None`: not backing off).
    pub fn until(&self, key: &str, now: Instant) -> Option<Instant> {
        self.in_backoff(key, now)?;
        self.entries.get(key).map(|e| e.last_update + e.backoff)
    }

    /// Forgets the previous error of `key` before a new attempt (so the map cannot grow
    /// with messages of keys that no longer fail).
    pub fn clear_error(&mut self, key: &str) {
        if let Some(e) = self.entries.get_mut(key) {
            e.previous_error = None;
        }
    }

    /// flowcontrol `GC`: drops entries untouched for more than twice the maximum.
    pub fn collect_garbage(&mut self, now: Instant) {
        let max2 = self.max * 2;
        self.entries.retain(|_, e| now.saturating_duration_since(e.last_update) <= max2);
    }

    /// Drops every entry whose key starts with `prefix` (a pod that is gone).
    pub fn forget_prefix(&mut self, prefix: &str) {
        self.entries.retain(|k, _| !k.starts_with(prefix));
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_ten_seconds_to_five_minutes() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        assert_eq!(b.in_backoff("k", t0), None);
        let mut now = t0;
        let mut seen = Vec::new();
        for _ in 0..8 {
            b.next("k", now, "ErrImagePull: nope".into());
            let until = b.until("k", now).unwrap_or(now);
            seen.push((until - now).as_secs());
            // Still backing off just before the end, no longer at the end.
            assert!(b.in_backoff("k", until - Duration::from_millis(1)).is_some());
            assert_eq!(b.in_backoff("k", until), None);
            now = until;
        }
        assert_eq!(seen, [10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn the_previous_error_is_repeated_until_cleared() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        b.next("uid_img", t0, "ErrImagePull: unauthorized".into());
        assert_eq!(b.in_backoff("uid_img", t0 + Duration::from_secs(1)), Some(Some("ErrImagePull: unauthorized")));
        b.clear_error("uid_img");
        assert_eq!(b.in_backoff("uid_img", t0 + Duration::from_secs(1)), Some(None));
        assert_eq!(b.in_backoff("other_img", t0), None);
    }

    #[test]
    fn an_entry_idle_for_twice_the_maximum_starts_over_and_is_collected() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        b.next("k", t0, "e".into());
        b.next("k", t0 + Duration::from_secs(10), "e".into());
        let late = t0 + Duration::from_secs(10) + MAX_BACKOFF * 2 + Duration::from_secs(1);
        assert_eq!(b.in_backoff("k", late), None);
        b.next("k", late, "e".into());
        assert_eq!(b.until("k", late), Some(late + INITIAL_BACKOFF));
        b.collect_garbage(late + MAX_BACKOFF * 2 + Duration::from_secs(1));
        assert!(b.is_empty());
    }

    #[test]
    fn a_gone_pod_takes_its_keys_with_it() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        b.next("uid-1_a:1", t0, "e".into());
        b.next("uid-1_b:1", t0, "e".into());
        b.next("uid-2_a:1", t0, "e".into());
        b.forget_prefix("uid-1_");
        assert_eq!(b.len(), 1);
        assert!(b.in_backoff("uid-2_a:1", t0).is_some());
    }
}
