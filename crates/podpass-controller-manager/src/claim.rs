//! Controller references (`pkg/controller/controller_ref_manager.go`): which objects a
//! controller owns, adopts and releases. ReplicaSets claim pods and Deployments claim
//! ReplicaSets by the same rules, so the rules are here once, over any object.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};

/// A selector without `matchLabels`.
static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// Whether `selector` selects `labels` (metav1's rules, [`podpass_api::label_selector`]).
/// An empty selector selects nothing here, as a workload's may not be empty.
pub(crate) fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    use podpass_api::label_selector::{Requirement, selects};
    let empty = selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty);
    let requirements: Vec<Requirement<'_>> = selector
        .match_expressions
        .iter()
        .flatten()
        .map(|e| Requirement { key: &e.key, operator: &e.operator, values: e.values.as_deref().unwrap_or_default() })
        .collect();
    !empty && selects(selector.match_labels.as_ref().unwrap_or(&NO_LABELS), &requirements, labels)
}

/// The controller reference of an object, if any.
pub(crate) fn controller_of(owners: Option<&Vec<OwnerReference>>) -> Option<&OwnerReference> {
    owners.into_iter().flatten().find(|o| o.controller == Some(true))
}

/// What `ClaimObjects` does with a namespace's objects for one controller.
#[derive(Debug)]
pub(crate) struct Claim<'a, T> {
    /// Owned and selected: the controller's.
    pub owned: Vec<&'a T>,
    /// Orphans it selects: adopted (a controller reference added).
    pub adopt: Vec<&'a T>,
    /// Owned but no longer selected: released (its reference removed).
    pub release: Vec<&'a T>,
}

/// `ClaimObjects` for the controller `uid` with `selector` over `objects` (its namespace's):
/// an orphan is adopted only when `adoptable` (ReplicaSets adopt active pods only) and the
/// controller is not being deleted (`deleting`).
pub(crate) fn claim<'a, T>(
    uid: &str,
    selector: &LabelSelector,
    deleting: bool,
    objects: &'a [T],
    meta: impl Fn(&T) -> &ObjectMeta,
    adoptable: impl Fn(&T) -> bool,
) -> Claim<'a, T> {
    let mut claim = Claim { owned: Vec::new(), adopt: Vec::new(), release: Vec::new() };
    for object in objects {
        let m = meta(object);
        let selected = selects(selector, m.labels.as_ref().unwrap_or(&NO_LABELS));
        match controller_of(m.owner_references.as_ref()) {
            Some(owner) if owner.uid == uid => {
                if selected {
                    claim.owned.push(object);
                } else if m.deletion_timestamp.is_none() {
                    claim.release.push(object);
                }
            }
            Some(_) => {}
            None if selected && !deleting && m.deletion_timestamp.is_none() && adoptable(object) => {
                claim.adopt.push(object);
            }
            None => {}
        }
    }
    claim
}
