//! The resources the control plane serves, and how request paths name them.

use super::kinds::types::Typed;
use super::kinds::{self, Conversion, Strategy};

/// One served resource.
#[derive(Clone, Copy)]
pub struct Resource {
    /// API group (`""` = core).
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Plural name, also the storage prefix (`/registry/<plural>/…`).
    pub plural: &'static str,
    /// Singular name (discovery).
    pub singular: &'static str,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Short names (discovery, so `kubectl get sa` works).
    pub short_names: &'static [&'static str],
    /// Categories (discovery, so `kubectl get all` finds what upstream's does).
    pub categories: &'static [&'static str],
    /// Whether it is stored (false: create-only reviews such as TokenReview).
    pub stored: bool,
    /// What the kind adds to the generic registry.
    pub(crate) strategy: &'static dyn Strategy,
    /// Its k8s-openapi type.
    pub(crate) typed: &'static dyn Typed,
    /// For a version served from another resource's storage (same plural, another
    /// group): how objects convert. Such a resource is a view: loops over every stored
    /// resource skip it.
    pub(crate) conversion: Option<&'static dyn Conversion>,
}

impl std::fmt::Debug for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resource").field("group", &self.group).field("plural", &self.plural).finish_non_exhaustive()
    }
}

/// A resource is named by its group, version and plural.
impl PartialEq for Resource {
    fn eq(&self, other: &Self) -> bool {
        (self.group, self.version, self.plural) == (other.group, other.version, other.plural)
    }
}

impl Eq for Resource {}

const CRUD: [&str; 8] = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

impl Resource {
    /// `apiVersion` of its objects.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_owned() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The kind as upstream's errors name it: `Kind` for the core group, `Kind.group`
    /// otherwise.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() { self.kind.to_owned() } else { format!("{}.{}", self.kind, self.group) }
    }

    /// The subresource `name` of this resource, as its kind declares it.
    pub(crate) fn subresource(&self, name: &str) -> Option<kinds::Subresource> {
        self.strategy.subresources().iter().find(|sub| sub.name == name).copied()
    }

    /// Its subresources, as its kind declares them.
    pub(crate) fn subresources(&self) -> &'static [kinds::Subresource] {
        self.strategy.subresources()
    }

    /// Whether objects are stored under it (not a view of another resource's storage).
    pub fn owns_storage(&self) -> bool {
        self.stored && self.conversion.is_none()
    }

    /// Whether DELETE of its collection is served: every stored kind but namespaces, whose
    /// upstream storage has no DeleteCollection.
    pub fn serves_delete_collection(&self) -> bool {
        self.stored && !(self.group.is_empty() && self.plural == "namespaces")
    }

    /// Verbs listed in discovery.
    pub fn verbs(&self) -> Vec<&'static str> {
        match (self.stored, self.serves_delete_collection()) {
            (true, true) => CRUD.to_vec(),
            (true, false) => CRUD.into_iter().filter(|v| *v != "deletecollection").collect(),
            (false, _) => vec!["create"],
        }
    }
}

/// A resource's names: group, kind, plural (also the storage prefix) and singular.
#[derive(Clone, Copy)]
pub(crate) struct Names {
    /// API group (`""` = core).
    pub group: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Plural.
    pub plural: &'static str,
    /// Singular (discovery).
    pub singular: &'static str,
}

/// How a kind declares its resource (in its own file under `kinds/`): a stored,
/// namespaced v1 resource, then what departs from that.
impl Resource {
    /// A stored, namespaced v1 resource with its strategy and type.
    pub(crate) const fn stored(names: Names, strategy: &'static dyn Strategy, typed: &'static dyn Typed) -> Self {
        let Names { group, kind, plural, singular } = names;
        Resource {
            group,
            version: "v1",
            kind,
            plural,
            singular,
            namespaced: true,
            short_names: &[],
            categories: &[],
            stored: true,
            strategy,
            typed,
            conversion: None,
        }
    }

    /// A create-only review (answered, never stored), cluster-scoped.
    pub(crate) const fn review(names: Names, strategy: &'static dyn Strategy, typed: &'static dyn Typed) -> Self {
        Resource { stored: false, namespaced: false, ..Self::stored(names, strategy, typed) }
    }

    /// Cluster-scoped.
    pub(crate) const fn cluster_scoped(self) -> Self {
        Resource { namespaced: false, ..self }
    }

    /// Namespaced (for a review: LocalSubjectAccessReview).
    pub(crate) const fn in_namespaces(self) -> Self {
        Resource { namespaced: true, ..self }
    }

    /// With short names (`kubectl get quota`).
    pub(crate) const fn with_short_names(self, short_names: &'static [&'static str]) -> Self {
        Resource { short_names, ..self }
    }

    /// In categories (upstream: the strategy's `Categories()`; `all` for `kubectl get all`).
    pub(crate) const fn in_categories(self, categories: &'static [&'static str]) -> Self {
        Resource { categories, ..self }
    }

    /// A version served from another group's storage of the same plural, converted.
    pub(crate) const fn converted(self, conversion: &'static dyn Conversion) -> Self {
        Resource { conversion: Some(conversion), ..self }
    }
}

/// Every served resource: the list of kinds (`kinds/mod.rs`), each declared in its own file.
pub use super::kinds::RESOURCES;

/// The API groups served, with their single version.
pub fn groups() -> Vec<&'static str> {
    let mut g: Vec<&str> = RESOURCES.iter().map(|r| r.group).filter(|g| !g.is_empty()).collect();
    g.dedup();
    g
}

/// The API group of a stored resource (its plural, as in storage keys); `None` for one the
/// API does not serve.
pub fn group_of(plural: &str) -> Option<&'static str> {
    RESOURCES.iter().find(|r| r.plural == plural && r.owns_storage()).map(|r| r.group)
}

/// Looks up a resource by group and plural.
pub fn find(group: &str, plural: &str) -> Option<&'static Resource> {
    RESOURCES.iter().find(|r| r.group == group && r.plural == plural)
}

/// A parsed resource path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiPath {
    /// Group (`""` = core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Namespace from `/namespaces/<ns>/…`, if any.
    pub namespace: Option<String>,
    /// Plural resource.
    pub resource: String,
    /// Object name.
    pub name: Option<String>,
    /// Subresource.
    pub subresource: Option<String>,
}

/// What a path under `/api` or `/apis` addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `/api/v1` or `/apis/<g>/<v>`: the resource list.
    GroupVersion {
        /// Group.
        group: String,
        /// Version.
        version: String,
    },
    /// `/apis/<g>`: one group.
    Group(String),
    /// A resource path.
    Resource(ApiPath),
}

/// Decodes a request path's percent-escapes, as Go's `url.URL.Path` holds it (so
/// `/api/v1/namespaces/ns/roles/a%20b` names the role `a b`, and `%2F` becomes a
/// separator). `None` for a malformed escape or bytes that are not UTF-8.
pub fn decode_path(raw: &str) -> Option<String> {
    if !raw.contains('%') {
        return Some(raw.to_owned());
    }
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Parses `/api/v1/…` and `/apis/<group>/<version>/…`.
pub fn parse(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group] => return Some(Target::Group((*group).to_owned())),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    if segs.iter().any(|s| s.is_empty()) {
        return None;
    }
    let (group, version) = (group.to_owned(), version.to_owned());
    let path = |namespace: Option<&str>, resource: &str, name: Option<&str>, sub: Option<&str>| {
        Some(Target::Resource(ApiPath {
            group: group.clone(),
            version: version.clone(),
            namespace: namespace.map(str::to_owned),
            resource: resource.to_owned(),
            name: name.map(str::to_owned),
            subresource: sub.map(str::to_owned),
        }))
    };
    match rest {
        [] => Some(Target::GroupVersion { group: group.clone(), version: version.clone() }),
        // /namespaces/<ns>/<resource>… unless <resource> is a subresource of the namespace
        ["namespaces", ns, res, tail @ ..]
            if find(&group, res).is_some_and(|r| r.namespaced)
                || (group == super::metrics_api::GROUP && *res == "pods") =>
        {
            match tail {
                [] => path(Some(ns), res, None, None),
                [name] => path(Some(ns), res, Some(name), None),
                [name, sub] => path(Some(ns), res, Some(name), Some(sub)),
                _ => None,
            }
        }
        [res] => path(None, res, None, None),
        [res, name] => path(None, res, Some(name), None),
        [res, name, sub] => path(None, res, Some(name), Some(sub)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(p: &str) -> ApiPath {
        match parse(p) {
            Some(Target::Resource(r)) => r,
            other => panic!("{p}: {other:?}"),
        }
    }

    #[test]
    fn parses_every_shape() {
        assert_eq!(parse("/api/v1"), Some(Target::GroupVersion { group: "".into(), version: "v1".into() }));
        assert_eq!(parse("/apis/rbac.authorization.k8s.io"), Some(Target::Group("rbac.authorization.k8s.io".into())));
        let p = res("/api/v1/namespaces/ns/serviceaccounts/sa/token");
        assert_eq!(
            (p.namespace.as_deref(), p.resource.as_str(), p.name.as_deref(), p.subresource.as_deref()),
            (Some("ns"), "serviceaccounts", Some("sa"), Some("token"))
        );
        let p = res("/api/v1/namespaces/ns");
        assert_eq!((p.resource.as_str(), p.name.as_deref(), p.namespace), ("namespaces", Some("ns"), None));
        let p = res("/api/v1/namespaces/ns/status");
        assert_eq!((p.resource.as_str(), p.subresource.as_deref()), ("namespaces", Some("status")));
        let p = res("/api/v1/pods");
        assert_eq!((p.resource.as_str(), p.namespace), ("pods", None));
        let p = res("/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles/r");
        assert_eq!((p.group.as_str(), p.name.as_deref()), ("rbac.authorization.k8s.io", Some("r")));
        assert_eq!(parse("/api//v1"), None);
        assert_eq!(
            decode_path("/api/v1/namespaces/ns/roles/a%20b").as_deref(),
            Some("/api/v1/namespaces/ns/roles/a b")
        );
        assert_eq!(decode_path("/x/%2Fy").as_deref(), Some("/x//y"));
        assert_eq!(decode_path("/x/%zz"), None);
        assert_eq!(decode_path("/x/%2"), None);
        assert_eq!(decode_path("/x/%ff"), None, "not UTF-8");
        assert_eq!(decode_path("/x/%C3%A9").as_deref(), Some("/x/é"));
        assert_eq!(parse("/healthz"), None);
    }
}
