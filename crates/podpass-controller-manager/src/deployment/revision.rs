//! The annotations a Deployment and its ReplicaSets carry (`util/deployment_util.go`
//! `SetNewReplicaSetAnnotations`, `SetReplicasAnnotations`, `SetDeploymentRevision`): the
//! revision (only ever raised), the revisions a re-used set had before (`revision-history`,
//! what `kubectl rollout history` reads after an undo), the replica counts a set was sized
//! for, and the Deployment's own annotations copied down — `kubernetes.io/change-cause`
//! among them.

use std::collections::BTreeMap;

use super::plan::{DESIRED_REPLICAS, MAX_REPLICAS, REVISION, REVISION_HISTORY};

/// `revision-history` is front-trimmed to this many characters.
const MAX_HISTORY_CHARS: usize = 2000;

/// Annotations never copied from a Deployment to its sets (`annotationsToSkip`).
pub(crate) const SKIPPED: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// `copyDeploymentAnnotationsToReplicaSet`: whether any changed.
fn copy_down(deployment: &BTreeMap<String, String>, set: &mut BTreeMap<String, String>) -> bool {
    let mut changed = false;
    for (k, v) in deployment {
        if SKIPPED.contains(&k.as_str()) || set.get(k) == Some(v) {
            continue;
        }
        set.insert(k.clone(), v.clone());
        changed = true;
    }
    changed
}

/// `SetReplicasAnnotations`: whether any changed.
pub(crate) fn set_replicas(set: &mut BTreeMap<String, String>, desired: i32, max: i32) -> bool {
    let mut changed = false;
    for (key, value) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let value = value.to_string();
        if set.get(key) != Some(&value) {
            set.insert(key.to_owned(), value);
            changed = true;
        }
    }
    changed
}

/// `SetNewReplicaSetAnnotations`: the Deployment's annotations copied down, the revision
/// raised to `revision` (a set that had one — a rollback re-using it — keeps the old number
/// in `revision-history`), and for a set about to be created (`!exists`) its replica counts.
/// Whether anything changed.
pub(crate) fn set_new(
    deployment: &BTreeMap<String, String>,
    set: &mut BTreeMap<String, String>,
    revision: i64,
    exists: bool,
    replicas: (i32, i32),
) -> bool {
    let mut changed = copy_down(deployment, set);
    let old = set.get(REVISION).cloned();
    let old_number = match old.as_deref() {
        None | Some("") => 0,
        Some(s) => match s.parse::<i64>() {
            Ok(n) => n,
            // A revision that is not a number is left as it is, as upstream leaves it.
            Err(_) => return changed,
        },
    };
    if old_number < revision {
        set.insert(REVISION.to_owned(), revision.to_string());
        changed = true;
        if let Some(old) = old.filter(|o| !o.is_empty()) {
            let history = set.get(REVISION_HISTORY).cloned().unwrap_or_default();
            if history.is_empty() {
                set.insert(REVISION_HISTORY.to_owned(), old);
            } else {
                let mut revisions: Vec<&str> = history.split(',').collect();
                let mut total = history.len() + old.len() + 1;
                while total > MAX_HISTORY_CHARS && !revisions.is_empty() {
                    total -= revisions.remove(0).len() + 1;
                }
                if total <= MAX_HISTORY_CHARS {
                    revisions.push(&old);
                    let joined = revisions.join(",");
                    set.insert(REVISION_HISTORY.to_owned(), joined);
                }
            }
        }
    }
    if !exists && set_replicas(set, replicas.0, replicas.1) {
        changed = true;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_new_set_gets_the_next_revision_and_the_deployments_annotations() {
        let d = map(&[("kubernetes.io/change-cause", "set image v2"), (REVISION, "3"), ("team", "a")]);
        let mut set = BTreeMap::new();
        assert!(set_new(&d, &mut set, 4, false, (3, 4)));
        assert_eq!(set.get(REVISION).map(String::as_str), Some("4"));
        assert_eq!(set.get("kubernetes.io/change-cause").map(String::as_str), Some("set image v2"));
        assert_eq!(set.get(DESIRED_REPLICAS).map(String::as_str), Some("3"));
        assert_eq!(set.get(MAX_REPLICAS).map(String::as_str), Some("4"));
        assert!(!set.contains_key(REVISION_HISTORY));
        assert!(!set_new(&d, &mut set, 4, true, (3, 4)), "nothing moved");
        assert!(!set_new(&d, &mut set, 2, true, (3, 4)), "a revision is never lowered");
    }

    #[test]
    fn a_rolled_back_set_keeps_its_former_revisions() {
        let mut set = map(&[(REVISION, "1")]);
        assert!(set_new(&BTreeMap::new(), &mut set, 3, true, (1, 1)));
        assert_eq!(set.get(REVISION_HISTORY).map(String::as_str), Some("1"));
        assert!(set_new(&BTreeMap::new(), &mut set, 5, true, (1, 1)));
        assert_eq!(set.get(REVISION_HISTORY).map(String::as_str), Some("1,3"));
        let long: Vec<String> = (0..700).map(|i| i.to_string()).collect();
        let mut set = map(&[(REVISION, "9999"), (REVISION_HISTORY, &long.join(","))]);
        set_new(&BTreeMap::new(), &mut set, 10_000, true, (1, 1));
        let history = set.get(REVISION_HISTORY).cloned().unwrap_or_default();
        assert!(history.len() <= MAX_HISTORY_CHARS && history.ends_with(",9999"), "{}", history.len());
    }
}
