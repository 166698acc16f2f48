//! Typed identities the node passes around: a service account and a pod by namespace, name
//! and UID (as pull records and credential sources name them), and the object a token is
//! bound to (TokenRequest `spec.boundObjectRef`).

use std::fmt;

use serde::Serialize;
use thiserror::Error;

/// A service account: what a pull record and a provider's credential are attributed to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize)]
pub struct ServiceAccountRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID (a service account deleted and re-created under the same name is another one).
    pub uid: String,
}

/// A pod, by namespace, name and UID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

impl PodRef {
    /// The pod `k8s_openapi` object names (empty fields where it has none).
    pub fn of(pod: &k8s_openapi::api::core::v1::Pod) -> Self {
        Self {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }
}

impl fmt::Display for PodRef {
    /// `namespace/name`, as the kubelet's logs name a pod.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl fmt::Display for ServiceAccountRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} (uid {})", self.namespace, self.name, self.uid)
    }
}

/// `NAMESPACE/NAME/UID` does not name a service account.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{0:?}: must be NAMESPACE/NAME/UID")]
pub struct ServiceAccountRefError(pub String);

impl std::str::FromStr for ServiceAccountRef {
    type Err = ServiceAccountRefError;

    /// Parses `NAMESPACE/NAME/UID` (no part empty).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('/').collect();
        match parts.as_slice() {
            [ns, name, uid] if !ns.is_empty() && !name.is_empty() && !uid.is_empty() => {
                Ok(Self { namespace: (*ns).to_owned(), name: (*name).to_owned(), uid: (*uid).to_owned() })
            }
            _ => Err(ServiceAccountRefError(s.to_owned())),
        }
    }
}

/// The object a token is bound to (`spec.boundObjectRef` of a TokenRequest).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BoundObjectRef {
    /// `Pod`, `Node` or `Secret`.
    pub kind: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

impl BoundObjectRef {
    /// A binding to the pod `name` with `uid`.
    pub fn pod(name: &str, uid: &str) -> Self {
        Self { kind: "Pod".into(), name: name.to_owned(), uid: uid.to_owned() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_account_refs_parse_with_every_part() {
        let sa: ServiceAccountRef = "team/builder/uid-1".parse().unwrap_or_default();
        assert_eq!((sa.namespace.as_str(), sa.name.as_str(), sa.uid.as_str()), ("team", "builder", "uid-1"));
        for bad in ["team/builder", "team//uid", "a/b/c/d", ""] {
            assert!(bad.parse::<ServiceAccountRef>().is_err(), "{bad}");
        }
        assert_eq!(sa.to_string(), "team/builder (uid uid-1)");
    }
}
