//! Controller expectations (`pkg/controller/controller_utils.go` `ControllerExpectations`):
//! a controller's pod cache lags its own writes, so an owner whose last creates or deletes
//! the cache has not shown yet is not acted on again until it has (or five minutes passed)
//! — else it would create the same pods twice.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{ObjectRef, Store};

/// Expectations not met within this long are dropped (upstream `ExpectationsTimeout`).
const TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug)]
struct Expected {
    created: HashSet<String>,
    deleted: HashSet<String>,
    at: Instant,
}

/// What each owner's last sync asked for that the cache has not shown yet, by owner UID.
#[derive(Debug, Default)]
pub(crate) struct Expectations(Mutex<HashMap<String, Expected>>);

impl Expectations {
    /// Whether what the last sync of `uid` did is in `pods` (or expired).
    pub(crate) fn satisfied(&self, uid: &str, namespace: &str, pods: &Store<Pod>) -> bool {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(e) = all.get(uid) else { return true };
        let seen = |name: &String| pods.get(&ObjectRef::new(name).within(namespace));
        let created = e.created.iter().all(|n| seen(n).is_some());
        let deleted = e.deleted.iter().all(|n| seen(n).is_none_or(|p| p.metadata.deletion_timestamp.is_some()));
        if (created && deleted) || e.at.elapsed() > TIMEOUT {
            all.remove(uid);
            return true;
        }
        false
    }

    /// Records that `uid`'s sync created and deleted these pods.
    pub(crate) fn expect(&self, uid: &str, created: HashSet<String>, deleted: HashSet<String>) {
        if created.is_empty() && deleted.is_empty() {
            return;
        }
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.insert(uid.to_owned(), Expected { created, deleted, at: Instant::now() });
    }
}
