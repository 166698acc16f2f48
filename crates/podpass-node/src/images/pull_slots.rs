//! The node's parallel pulls (kubelet: `serializeImagePulls`, `maxParallelImagePulls`), with
//! shares: beyond upstream, no one registry and no one namespace may hold more than half of
//! the slots, so a registry that accepts and never answers, or a tenant pulling many such
//! images, leaves the other half to everyone else. Upstream's serialized default (one
//! slot) keeps its meaning: one pull at a time, each bounded by the pull timeout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The slots of one node.
#[derive(Debug)]
pub struct PullSlots {
    total: Arc<Semaphore>,
    #[cfg(test)]
    total_slots: usize,
    /// Slots one registry or one namespace may hold (`None`: no share, a single slot or
    /// no bound at all).
    share: Option<usize>,
    shares: Mutex<HashMap<Share, Arc<Semaphore>>>,
}

/// Whose share a pull counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Share {
    Registry(String),
    Namespace(String),
}

/// A pull's slot: its share's permits and one of the node's, released on drop.
#[derive(Debug)]
pub struct PullSlot {
    _permits: Vec<OwnedSemaphorePermit>,
}

impl PullSlots {
    /// `total` slots (at least one); [`Semaphore::MAX_PERMITS`] or more is unbounded.
    pub fn new(total: usize) -> Self {
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        let share = (total > 1 && total < Semaphore::MAX_PERMITS).then_some(total.div_ceil(2));
        Self {
            total: Arc::new(Semaphore::new(total)),
            #[cfg(test)]
            total_slots: total,
            share,
            shares: Mutex::new(HashMap::new()),
        }
    }

    /// Slots a registry or namespace may hold at once.
    #[cfg(test)]
    fn share(&self) -> Option<usize> {
        self.share
    }

    /// Waits for a slot for a pull from `registry` (host[:port]) for a pod in `namespace`
    /// (`None`: a node-level pull). The shares are taken before the node's slot, so a pull
    /// waiting behind its own registry or namespace holds none of the node's.
    pub async fn acquire(&self, registry: &str, namespace: Option<&str>) -> PullSlot {
        let mut permits = Vec::with_capacity(3);
        if let Some(share) = self.share {
            let mut keys = vec![Share::Registry(registry.to_owned())];
            keys.extend(namespace.map(|n| Share::Namespace(n.to_owned())));
            for key in keys {
                let semaphore = self.share_of(key, share);
                if let Ok(p) = semaphore.acquire_owned().await {
                    permits.push(p);
                }
            }
        }
        if let Ok(p) = self.total.clone().acquire_owned().await {
            permits.push(p);
        }
        PullSlot { _permits: permits }
    }

    /// The semaphore of `key`, made on first use; shares nobody holds or waits for are
    /// dropped here, so their number follows the pulls in flight, not every registry ever
    /// named.
    fn share_of(&self, key: Share, share: usize) -> Arc<Semaphore> {
        let mut shares = self.shares.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        shares.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < share);
        shares.entry(key).or_insert_with(|| Arc::new(Semaphore::new(share))).clone()
    }

    /// The node's slots held (tests).
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        self.total_slots - self.total.available_permits()
    }

    /// Shares in use (tests).
    #[cfg(test)]
    fn shares_held(&self) -> usize {
        self.shares.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn blocked(f: impl std::future::Future) -> bool {
        tokio::time::timeout(Duration::from_millis(50), f).await.is_err()
    }

    #[tokio::test]
    async fn a_registry_or_a_namespace_holds_at_most_half_the_slots() {
        let slots = PullSlots::new(4);
        assert_eq!(slots.share(), Some(2));
        let hung1 = slots.acquire("hang.example", Some("team-b")).await;
        let hung2 = slots.acquire("hang.example", Some("team-b")).await;
        // A third pull from the hanging registry waits, whoever asks...
        assert!(blocked(slots.acquire("hang.example", Some("team-a"))).await);
        // ...and so does a third of team-b's, from any registry.
        assert!(blocked(slots.acquire("other.example", Some("team-b"))).await);
        // The other half is everyone else's.
        let a1 = slots.acquire("registry.example", Some("team-a")).await;
        let a2 = slots.acquire("registry.example", Some("team-c")).await;
        // Now the node's slots are all held.
        assert!(blocked(slots.acquire("third.example", Some("team-d"))).await);
        drop(hung1);
        let _d = slots.acquire("third.example", Some("team-d")).await;
        drop((hung2, a1, a2));
    }

    #[tokio::test]
    async fn serialized_pulls_are_one_at_a_time_and_unbounded_ones_are_not_shared() {
        let one = PullSlots::new(1);
        assert_eq!(one.share(), None);
        let held = one.acquire("a.example", Some("ns")).await;
        assert!(blocked(one.acquire("b.example", Some("other"))).await);
        drop(held);
        let _next = one.acquire("b.example", Some("other")).await;
        let unbounded = PullSlots::new(usize::MAX);
        assert_eq!(unbounded.share(), None);
        let _held: Vec<_> = futures::future::join_all((0..10).map(|_| unbounded.acquire("a.example", None))).await;
    }

    #[tokio::test]
    async fn shares_nobody_holds_are_dropped() {
        let slots = PullSlots::new(4);
        for i in 0..100 {
            drop(slots.acquire(&format!("r{i}.example"), Some(&format!("ns{i}"))).await);
        }
        let _held = slots.acquire("last.example", Some("ns")).await;
        assert!(slots.shares_held() <= 2, "{} shares kept", slots.shares_held());
    }
}
