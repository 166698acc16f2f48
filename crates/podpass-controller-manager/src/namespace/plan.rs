//! What the namespace controller says of a deletion in progress: the five conditions
//! upstream's deleter keeps on a terminating namespace (`status_condition_utils.go`), in its
//! words, pure over what one pass found.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NamespaceCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// What one pass of deletion found.
#[derive(Debug, Default)]
pub(crate) struct Pass {
    /// Groups discovery could not read (`group: error`).
    pub discovery_errors: Vec<String>,
    /// Resources whose content could not be deleted (`resource: error`).
    pub delete_errors: Vec<String>,
    /// Objects left, by `resource.group` (`pods.`, `deployments.apps`).
    pub remaining: BTreeMap<String, usize>,
    /// Objects left held by each finalizer.
    pub finalizers: BTreeMap<String, usize>,
}

impl Pass {
    /// Whether the namespace is empty and nothing failed: its finalizer may go.
    pub fn done(&self) -> bool {
        self.discovery_errors.is_empty() && self.delete_errors.is_empty() && self.remaining.is_empty()
    }
}

/// The condition types, with their reason and message when all is well.
const OK: [(&str, &str, &str); 5] = [
    ("NamespaceDeletionDiscoveryFailure", "ResourcesDiscovered", "All resources successfully discovered"),
    ("NamespaceDeletionGroupVersionParsingFailure", "ParsedGroupVersions", "All legacy kube types successfully parsed"),
    (
        "NamespaceDeletionContentFailure",
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
    ),
    ("NamespaceContentRemaining", "ContentRemoved", "All content successfully removed"),
    ("NamespaceFinalizersRemaining", "ContentHasNoFinalizers", "All content-preserving finalizers finished"),
];

/// The failure a condition type reports for `pass`, if any: its reason and message.
fn failure(kind: &str, pass: &Pass) -> Option<(&'static str, String)> {
    match kind {
        "NamespaceDeletionDiscoveryFailure" if !pass.discovery_errors.is_empty() => Some((
            "DiscoveryFailed",
            format!(
                "Discovery failed for some groups, {} failing: {}",
                pass.discovery_errors.len(),
                pass.discovery_errors.join(", ")
            ),
        )),
        "NamespaceDeletionContentFailure" if !pass.delete_errors.is_empty() => Some((
            "ContentDeletionFailed",
            format!(
                "Failed to delete all resource types, {} remaining: {}",
                pass.delete_errors.len(),
                pass.delete_errors.join(", ")
            ),
        )),
        "NamespaceContentRemaining" if !pass.remaining.is_empty() => {
            let each: Vec<String> =
                pass.remaining.iter().map(|(r, n)| format!("{r} has {n} resource instances")).collect();
            Some(("SomeResourcesRemain", format!("Some resources are remaining: {}", each.join(", "))))
        }
        "NamespaceFinalizersRemaining" if !pass.finalizers.is_empty() => {
            let each: Vec<String> =
                pass.finalizers.iter().map(|(f, n)| format!("{f} in {n} resource instances")).collect();
            Some((
                "SomeFinalizersRemain",
                format!("Some content in the namespace has finalizers remaining: {}", each.join(", ")),
            ))
        }
        _ => None,
    }
}

/// The namespace's conditions after `pass`: the five set (True with the failure, False
/// when well), a condition whose status did not change keeping its transition time, and
/// any other condition kept as it was.
pub(crate) fn conditions(current: &[NamespaceCondition], pass: &Pass, now: &Time) -> Vec<NamespaceCondition> {
    let mut out: Vec<NamespaceCondition> =
        current.iter().filter(|c| !OK.iter().any(|(t, _, _)| *t == c.type_)).cloned().collect();
    for (kind, ok_reason, ok_message) in OK {
        let (status, reason, message) = match failure(kind, pass) {
            Some((reason, message)) => ("True", reason, message),
            None => ("False", ok_reason, ok_message.to_owned()),
        };
        let before = current.iter().find(|c| c.type_ == kind);
        let since = match before {
            Some(b) if b.status == status => b.last_transition_time.clone(),
            _ => Some(now.clone()),
        };
        out.push(NamespaceCondition {
            type_: kind.to_owned(),
            status: status.to_owned(),
            reason: Some(reason.to_owned()),
            message: Some(message),
            last_transition_time: since,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH))
    }

    fn find<'a>(all: &'a [NamespaceCondition], kind: &str) -> &'a NamespaceCondition {
        all.iter().find(|c| c.type_ == kind).unwrap_or_else(|| panic!("no {kind}"))
    }

    #[test]
    fn remaining_content_and_finalizers_are_said_in_upstreams_words() {
        let pass = Pass {
            remaining: BTreeMap::from([("pods.".to_owned(), 2), ("deployments.apps".to_owned(), 1)]),
            finalizers: BTreeMap::from([("example.com/hold".to_owned(), 1)]),
            ..Pass::default()
        };
        assert!(!pass.done());
        let all = conditions(&[], &pass, &at(10));
        assert_eq!(all.len(), 5);
        let remaining = find(&all, "NamespaceContentRemaining");
        assert_eq!((remaining.status.as_str(), remaining.reason.as_deref()), ("True", Some("SomeResourcesRemain")));
        assert_eq!(
            remaining.message.as_deref(),
            Some(
                "Some resources are remaining: deployments.apps has 1 resource instances, pods. has 2 resource instances"
            )
        );
        assert_eq!(
            find(&all, "NamespaceFinalizersRemaining").message.as_deref(),
            Some("Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances")
        );
        let discovery = find(&all, "NamespaceDeletionDiscoveryFailure");
        assert_eq!((discovery.status.as_str(), discovery.reason.as_deref()), ("False", Some("ResourcesDiscovered")));
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let first =
            conditions(&[], &Pass { remaining: BTreeMap::from([("pods.".into(), 1)]), ..Pass::default() }, &at(10));
        let same =
            conditions(&first, &Pass { remaining: BTreeMap::from([("pods.".into(), 1)]), ..Pass::default() }, &at(20));
        assert_eq!(find(&same, "NamespaceContentRemaining").last_transition_time, Some(at(10)));
        let done = conditions(&same, &Pass::default(), &at(30));
        let remaining = find(&done, "NamespaceContentRemaining");
        assert_eq!((remaining.status.as_str(), remaining.reason.as_deref()), ("False", Some("ContentRemoved")));
        assert_eq!(remaining.last_transition_time, Some(at(30)));
        assert_eq!(find(&done, "NamespaceDeletionDiscoveryFailure").last_transition_time, Some(at(10)));
        assert!(Pass::default().done());
    }
}
