//! Roles and bindings held in memory, kept current from store watches (upstream's RBAC
//! authorizer reads informer listers), and indexed by subject: a decision looks only at the
//! bindings that name the user, one of its groups or its service account, so it costs the
//! same with 10 bindings as with 10 000, and does no store I/O.
//!
//! Eventually consistent as upstream's listers are: a grant or revocation made through
//! another API server applies when its watch event arrives (milliseconds). One made through
//! this server applies before the write is answered (`Informer::wait_applied`), so a
//! client may use a binding it has just created.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use serde_json::Value;

use crate::field::Field;
use crate::server::informer::View;
use crate::store::{EventType, ObjectKey, StoreError};

/// The four RBAC resources, as stored.
pub const RESOURCES: [&str; 4] = ["clusterroles", "roles", "clusterrolebindings", "rolebindings"];

/// Who a subject names: a user name (User subjects, and ServiceAccount subjects as the user
/// name they authenticate as) or a group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Subject {
    Name(String),
    Group(String),
}

/// What a subject of a binding in `namespace` ("" for a ClusterRoleBinding) matches
/// (rbac/validation `appliesToUser`).
fn subject_key(subject: &Value, namespace: &str) -> Option<Subject> {
    let kind = subject.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = subject.get("name").and_then(Value::as_str).unwrap_or("");
    match kind {
        "User" => Some(Subject::Name(name.to_owned())),
        "Group" => Some(Subject::Group(name.to_owned())),
        "ServiceAccount" => {
            let sa_ns = subject.get("namespace").and_then(Value::as_str).filter(|n| !n.is_empty()).unwrap_or(namespace);
            (!sa_ns.is_empty()).then(|| Subject::Name(format!("system:serviceaccount:{sa_ns}:{name}")))
        }
        _ => None,
    }
}

/// A binding's scope and name.
type BindingId = (String, String);

#[derive(Debug, Default)]
struct Index {
    /// Role rules by (namespace, name); ClusterRoles under namespace "".
    roles: HashMap<(String, String), Arc<Value>>,
    /// Bindings by (namespace, name); ClusterRoleBindings under namespace "".
    bindings: HashMap<BindingId, Arc<Value>>,
    /// (binding namespace, subject) → names of the bindings there naming it.
    by_subject: HashMap<(String, Subject), BTreeSet<String>>,
}

impl Index {
    fn subjects(binding: &Value, namespace: &str) -> Vec<Subject> {
        let mut keys: Vec<Subject> = binding
            .get("subjects")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|s| subject_key(s, namespace))
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    fn remove_binding(&mut self, id: &BindingId) {
        let Some(old) = self.bindings.remove(id) else { return };
        for subject in Self::subjects(&old, &id.0) {
            let slot = (id.0.clone(), subject);
            if let Some(names) = self.by_subject.get_mut(&slot) {
                names.remove(&id.1);
                if names.is_empty() {
                    self.by_subject.remove(&slot);
                }
            }
        }
    }

    fn put_binding(&mut self, id: BindingId, binding: Value) {
        self.remove_binding(&id);
        for subject in Self::subjects(&binding, &id.0) {
            self.by_subject.entry((id.0.clone(), subject)).or_default().insert(id.1.clone());
        }
        self.bindings.insert(id, Arc::new(binding));
    }

    fn apply(&mut self, resource: &str, kind: EventType, object: Value) {
        let namespace = object.field("/metadata/namespace").and_then(Value::as_str).unwrap_or("").to_owned();
        let name = object.field("/metadata/name").and_then(Value::as_str).unwrap_or("").to_owned();
        let id = (namespace, name);
        let is_binding = resource.ends_with("bindings");
        match (kind, is_binding) {
            (EventType::Deleted, true) => self.remove_binding(&id),
            (EventType::Deleted, false) => {
                self.roles.remove(&id);
            }
            (_, true) => self.put_binding(id, object),
            (_, false) => {
                let rules = object.get("rules").cloned().unwrap_or(Value::Null);
                self.roles.insert(id, Arc::new(rules));
            }
        }
    }

    /// Drops every entry of `resource` (before a relist).
    fn clear(&mut self, resource: &str) {
        let cluster = resource.starts_with("cluster");
        if resource.ends_with("bindings") {
            let ids: Vec<BindingId> =
                self.bindings.keys().filter(|(ns, _)| ns.is_empty() == cluster).cloned().collect();
            for id in ids {
                self.remove_binding(&id);
            }
        } else {
            self.roles.retain(|(ns, _), _| ns.is_empty() != cluster);
        }
    }
}

/// One binding that may grant the request: its kind, namespace, name and object.
pub struct Candidate {
    /// `ClusterRoleBinding` or `RoleBinding`.
    pub kind: &'static str,
    /// The binding's namespace ("" for a ClusterRoleBinding).
    pub namespace: String,
    /// The binding.
    pub binding: Arc<Value>,
    /// The rules of the role it names (`None`: a missing role, or one no binding of this
    /// kind may name).
    pub rules: Option<Arc<Value>>,
}

/// The RBAC objects in memory (see the module docs); fed by an
/// [`Informer`](crate::server::informer::Informer) over [`RESOURCES`].
#[derive(Default)]
pub struct RbacIndex {
    index: RwLock<Index>,
}

impl std::fmt::Debug for RbacIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RbacIndex").finish_non_exhaustive()
    }
}

impl View for RbacIndex {
    fn reset(&self, resource: &'static str, items: Vec<Value>) {
        // A poisoned lock (a panic mid-update) leaves the index as it is; decisions then
        // fail closed in `candidates`.
        if let Ok(mut index) = self.index.write() {
            index.clear(resource);
            for object in items {
                index.apply(resource, EventType::Added, object);
            }
        }
    }

    fn apply(&self, resource: &'static str, kind: EventType, object: Value) {
        if let Ok(mut index) = self.index.write() {
            index.apply(resource, kind, object);
        }
    }
}

impl RbacIndex {
    /// The bindings in scope of `namespace` (cluster-wide ones first, then the namespace's,
    /// each in name order) that name the user, one of its groups or its service account,
    /// with their roles' rules.
    pub fn candidates(&self, user: &crate::server::User, namespace: &str) -> Result<Vec<Candidate>, StoreError> {
        let index = self.index.read().map_err(|_| poisoned())?;
        let keys: Vec<Subject> = std::iter::once(Subject::Name(user.name.clone()))
            .chain(user.groups.iter().map(|g| Subject::Group(g.clone())))
            .collect();
        let mut scopes = vec![("", "ClusterRoleBinding")];
        if !namespace.is_empty() {
            scopes.push((namespace, "RoleBinding"));
        }
        let mut out = Vec::new();
        for (scope, kind) in scopes {
            let mut names = BTreeSet::new();
            for key in &keys {
                if let Some(found) = index.by_subject.get(&(scope.to_owned(), key.clone())) {
                    names.extend(found.iter().cloned());
                }
            }
            for name in names {
                let Some(binding) = index.bindings.get(&(scope.to_owned(), name)) else { continue };
                let role_ref = binding.get("roleRef").unwrap_or(&Value::Null);
                let rules = super::rbac::role_ref_key(role_ref, scope)
                    .and_then(|k: ObjectKey| index.roles.get(&(k.namespace, k.name)).cloned());
                out.push(Candidate { kind, namespace: scope.to_owned(), binding: Arc::clone(binding), rules });
            }
        }
        Ok(out)
    }
}

fn poisoned() -> StoreError {
    StoreError::Unavailable("RBAC index: lock poisoned".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn binding(ns: &str, name: &str, subjects: Value) -> Value {
        json!({"metadata": {"namespace": ns, "name": name}, "roleRef": {"kind": "ClusterRole", "name": "view"}, "subjects": subjects})
    }

    #[test]
    fn subjects_are_indexed_and_unindexed_with_their_binding() {
        let mut index = Index::default();
        let b = binding(
            "team",
            "b",
            json!([{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "app"}, {"kind": "Group", "name": "devs"}]),
        );
        index.apply("rolebindings", EventType::Added, b);
        let names =
            |index: &Index, s: Subject| index.by_subject.get(&("team".to_owned(), s)).cloned().unwrap_or_default();
        assert_eq!(names(&index, Subject::Name("alice".into())).len(), 1);
        assert_eq!(names(&index, Subject::Name("system:serviceaccount:team:app".into())).len(), 1);
        assert_eq!(names(&index, Subject::Group("devs".into())).len(), 1);
        // A modification that drops alice removes her entry.
        let b = binding("team", "b", json!([{"kind": "Group", "name": "devs"}]));
        index.apply("rolebindings", EventType::Modified, b.clone());
        assert!(names(&index, Subject::Name("alice".into())).is_empty());
        index.apply("rolebindings", EventType::Deleted, b);
        assert!(index.by_subject.is_empty() && index.bindings.is_empty());
    }

    #[test]
    fn a_cluster_binding_to_a_service_account_needs_its_namespace() {
        assert_eq!(subject_key(&json!({"kind": "ServiceAccount", "name": "app"}), ""), None);
        assert_eq!(
            subject_key(&json!({"kind": "ServiceAccount", "name": "app", "namespace": "x"}), ""),
            Some(Subject::Name("system:serviceaccount:x:app".into()))
        );
        assert_eq!(subject_key(&json!({"kind": "Robot", "name": "r"}), "ns"), None);
    }

    #[test]
    fn a_relist_replaces_only_its_own_resource() {
        let mut index = Index::default();
        index.apply("clusterrolebindings", EventType::Added, binding("", "c", json!([{"kind": "User", "name": "u"}])));
        index.apply("rolebindings", EventType::Added, binding("ns", "r", json!([{"kind": "User", "name": "u"}])));
        index.apply("roles", EventType::Added, json!({"metadata": {"namespace": "ns", "name": "r"}, "rules": []}));
        index.apply("clusterroles", EventType::Added, json!({"metadata": {"name": "view"}, "rules": []}));
        index.clear("rolebindings");
        assert_eq!(index.bindings.len(), 1);
        assert!(index.bindings.contains_key(&(String::new(), "c".to_owned())));
        index.clear("roles");
        assert_eq!(index.roles.len(), 1);
        assert!(index.roles.contains_key(&(String::new(), "view".to_owned())));
    }
}
