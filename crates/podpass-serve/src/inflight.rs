//! Work in flight, bounded per identity and in total (kube-apiserver's
//! `--max-requests-inflight` and API Priority and Fairness by user, in their simplest
//! form): work in flight is the unit of fairness, not connections. Each identity (a user
//! once authenticated; a peer address or client certificate before) holds at most its
//! share at once, and all identities together at most the total; past either, the work is
//! refused at once, never queued, so a flood costs its sender and nobody else.
//!
//! Under contention, first come is not first served for ever: part of the total is a
//! reserve ([`FairShare::with_reserve`]) that only an identity holding fewer than its floor
//! may take, so however many heavy identities fill the rest, a light one still gets work
//! in flight (API Priority and Fairness gives each flow its fair share of its level's
//! seats; this is the same guarantee without queues: a floor per identity, at once).
//!
//! What is exempt (the cluster's own identities) is the caller's to say: exempt work is
//! still held to its own identity's share when the caller asks (`counted_in_total: false`),
//! or passes uncounted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Identities remembered with nothing in flight, before they are forgotten.
const FORGET_IDLE_PAST: usize = 1024;

/// Why work was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InFlightRefusal {
    /// This identity already has its share in flight.
    #[error("too many requests of this identity in flight")]
    Identity,
    /// All identities together have the total in flight.
    #[error("too many requests in flight")]
    Total,
}

/// The in-flight bounds of one server.
#[derive(Debug)]
pub struct FairShare {
    /// The total but the reserve: anyone's, first come.
    total: Arc<Semaphore>,
    /// Taken only by an identity below `floor` when the rest is full.
    reserve: Arc<Semaphore>,
    floor: usize,
    per_identity: Mutex<HashMap<String, Arc<Semaphore>>>,
    share: usize,
}

/// Work counted in flight until dropped.
#[derive(Debug)]
#[must_use = "the work is counted in flight only while this is held"]
pub struct InFlightPermit {
    _own: Option<OwnedSemaphorePermit>,
    _total: Option<OwnedSemaphorePermit>,
}

impl InFlightPermit {
    /// A permit for work that is not counted (exempt, or long-running).
    pub fn uncounted() -> Self {
        Self { _own: None, _total: None }
    }
}

impl FairShare {
    /// At most `total` in flight, at most `share` of them one identity's.
    pub fn new(total: usize, share: usize) -> Self {
        Self {
            total: Arc::new(Semaphore::new(total)),
            reserve: Arc::new(Semaphore::new(0)),
            floor: 0,
            per_identity: Mutex::default(),
            share,
        }
    }

    /// Keeps `reserve` of the total for identities holding fewer than `floor` each: when
    /// the rest is full, such an identity's work still gets in (`reserve / floor`
    /// identities at their floor at once), an identity at or past its floor is refused.
    #[must_use]
    pub fn with_reserve(self, reserve: usize, floor: usize) -> Self {
        let total = self.total.available_permits();
        let reserve = reserve.min(total);
        Self {
            total: Arc::new(Semaphore::new(total - reserve)),
            reserve: Arc::new(Semaphore::new(reserve)),
            floor,
            ..self
        }
    }

    /// Counts work of `identity` in flight, or refuses it when its identity is at its share
    /// or (when `counted_in_total`) all identities are at the total.
    pub fn admit(&self, identity: &str, counted_in_total: bool) -> Result<InFlightPermit, InFlightRefusal> {
        let mine = {
            let mut all = self.per_identity.lock().unwrap_or_else(PoisonError::into_inner);
            // Identities with nothing in flight are forgotten, so the map is bounded by
            // what is in flight, not by how many identities ever came.
            if all.len() > FORGET_IDLE_PAST {
                all.retain(|_, s| s.available_permits() < self.share);
            }
            Arc::clone(all.entry(identity.to_owned()).or_insert_with(|| Arc::new(Semaphore::new(self.share))))
        };
        let own = Arc::clone(&mine).try_acquire_owned().map_err(|_| InFlightRefusal::Identity)?;
        let total = if counted_in_total {
            let held = self.share - mine.available_permits();
            let shared = Arc::clone(&self.total).try_acquire_owned();
            Some(match shared {
                Ok(p) => p,
                // `held` counts this work: below the floor means fewer than `floor` before.
                Err(_) if held <= self.floor => {
                    Arc::clone(&self.reserve).try_acquire_owned().map_err(|_| InFlightRefusal::Total)?
                }
                Err(_) => return Err(InFlightRefusal::Total),
            })
        } else {
            None
        };
        Ok(InFlightPermit { _own: Some(own), _total: total })
    }

    /// Work of `identity` in flight now.
    pub fn in_flight(&self, identity: &str) -> usize {
        let all = self.per_identity.lock().unwrap_or_else(PoisonError::into_inner);
        all.get(identity).map_or(0, |s| self.share - s.available_permits())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn one_identity_gets_its_share_and_the_total_bounds_them_all() {
        let bounds = FairShare::new(3, 2);
        let held = [bounds.admit("tenant", true).unwrap(), bounds.admit("tenant", true).unwrap()];
        assert_eq!(bounds.admit("tenant", true).unwrap_err(), InFlightRefusal::Identity);
        assert_eq!(bounds.in_flight("tenant"), 2);
        let _third = bounds.admit("other", true).unwrap();
        assert_eq!(bounds.admit("other", true).unwrap_err(), InFlightRefusal::Total);
        // Work outside the total is still held to its own share.
        let outside = [bounds.admit("node", false).unwrap(), bounds.admit("node", false).unwrap()];
        assert_eq!(bounds.admit("node", false).unwrap_err(), InFlightRefusal::Identity);
        drop(held);
        assert_eq!(bounds.in_flight("tenant"), 0);
        assert!(bounds.admit("tenant", true).is_ok(), "given back when the work ends");
        drop(outside);
    }

    #[test]
    fn heavy_identities_filling_the_total_leave_the_reserve_to_light_ones() {
        // 10 in all, 2 of them a reserve for identities holding fewer than 1.
        let bounds = FairShare::new(10, 5).with_reserve(2, 1);
        let heavy: Vec<_> = (0..8).map(|i| bounds.admit(["a", "b"][i % 2], true).unwrap()).collect();
        // The first come filled the shared 8: a heavy identity is refused, though below
        // its share...
        assert_eq!(bounds.admit("a", true).unwrap_err(), InFlightRefusal::Total);
        // ...while a light one still gets in, up to its floor...
        let _c = bounds.admit("c", true).unwrap();
        assert_eq!(bounds.admit("c", true).unwrap_err(), InFlightRefusal::Total, "c is at its floor");
        // ...and another, until the reserve is spent.
        let _d = bounds.admit("d", true).unwrap();
        assert_eq!(bounds.admit("e", true).unwrap_err(), InFlightRefusal::Total, "the reserve is spent");
        drop(heavy);
        assert!(bounds.admit("e", true).is_ok());
        assert_eq!(bounds.in_flight("a"), 0, "a refused work holds nothing");
    }

    #[test]
    fn identities_with_nothing_in_flight_are_forgotten() {
        let bounds = FairShare::new(10, 1);
        for i in 0..(FORGET_IDLE_PAST * 3) {
            drop(bounds.admit(&format!("id-{i}"), true).unwrap());
        }
        let held = bounds.admit("busy", true).unwrap();
        assert!(bounds.per_identity.lock().unwrap().len() <= FORGET_IDLE_PAST + 1);
        assert_eq!(bounds.in_flight("busy"), 1);
        drop(held);
    }
}
