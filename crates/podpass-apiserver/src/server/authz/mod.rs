//! Authorization as kube-apiserver chains it: `system:masters` first (the privileged-group
//! authorizer), then the `--authorization-mode` list (default `Node,RBAC`); the first Allow
//! or Deny wins, no opinion from all means forbidden. Also the upstream forbidden messages,
//! impersonation, and the bootstrap RBAC policy.

pub mod bootstrap;
mod controller_policy;
pub mod escalation;
pub mod node;
pub mod node_graph;
pub mod rbac;
pub mod rbac_index;
pub mod rules;

use crate::server::User;
use crate::server::status::StatusError;
use crate::store::{Store, StoreError};

/// What a request wants to do (`authorizer.Attributes`).
#[derive(Debug, Clone)]
pub struct Attributes {
    /// Who.
    pub user: User,
    /// Kubernetes verb (`get`, `list`, `create`, …, or a custom verb).
    pub verb: String,
    /// Namespace (empty: cluster scope).
    pub namespace: String,
    /// API group (`""` = core).
    pub api_group: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource.
    pub subresource: String,
    /// Object name.
    pub name: String,
    /// A resource request (else a non-resource path).
    pub resource_request: bool,
    /// Request path (non-resource requests).
    pub path: String,
    /// The `fieldSelector` of list/watch requests (the Node authorizer reads it).
    pub field_selector: String,
}

impl Attributes {
    /// A non-resource request by `user`: `verb` on `path`. Resource fields are empty until
    /// a caller fills them in.
    pub fn non_resource(user: User, verb: &str, path: &str) -> Self {
        Self {
            user,
            verb: verb.into(),
            namespace: String::new(),
            api_group: String::new(),
            resource: String::new(),
            subresource: String::new(),
            name: String::new(),
            resource_request: false,
            path: path.into(),
            field_selector: String::new(),
        }
    }

    /// A resource request by `user`: `verb` on `resource` (in `api_group`) named `name` in
    /// `namespace` (empty: cluster scope).
    pub fn resource(user: &User, verb: &str, api_group: &str, resource: &str, namespace: &str, name: &str) -> Self {
        Self {
            user: user.clone(),
            verb: verb.into(),
            namespace: namespace.into(),
            api_group: api_group.into(),
            resource: resource.into(),
            subresource: String::new(),
            name: name.into(),
            resource_request: true,
            path: String::new(),
            field_selector: String::new(),
        }
    }
}

/// What the authorizers read.
#[derive(Clone, Copy)]
pub struct Sources<'a> {
    /// The store (the Node authorizer's pods, roles named by a binding being written).
    pub store: &'a dyn Store,
    /// Roles and bindings, indexed by subject (RBAC).
    pub rbac: &'a rbac_index::RbacIndex,
    /// Pods → nodes and what they reference (Node).
    pub nodes: &'a node_graph::NodeGraph,
}

/// An authorizer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthorizationDecision {
    /// Allowed, with the reason.
    Allow(String),
    /// Refused outright.
    Deny(String),
    /// Not this authorizer's call; the reason is reported if nobody allows.
    NoOpinion(String),
}

/// An `--authorization-mode` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationMode {
    /// The Node authorizer.
    Node,
    /// RBAC.
    Rbac,
    /// Everything allowed (tests, development).
    AlwaysAllow,
    /// Everything refused.
    AlwaysDeny,
}

/// `--authorization-mode`: the authorizers in order (comma-separated, upstream names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizationModes(pub Vec<AuthorizationMode>);

impl std::str::FromStr for AuthorizationModes {
    type Err = ModeError;

    fn from_str(s: &str) -> Result<Self, ModeError> {
        parse_modes(s).map(Self)
    }
}

/// `--authorization-mode` refused, in kube-apiserver's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModeError {
    /// A mode podpass does not have.
    #[error("authorization-mode {0:?} is not a valid mode (supported: AlwaysAllow, AlwaysDeny, Node, RBAC)")]
    Unknown(String),
    /// The same mode twice.
    #[error("authorization-mode {0:?} has mode specified more than once")]
    Repeated(String),
    /// No mode.
    #[error("at least one authorization-mode must be passed")]
    None,
}

/// Parses `--authorization-mode` (comma-separated, upstream names).
pub fn parse_modes(text: &str) -> Result<Vec<AuthorizationMode>, ModeError> {
    let mut modes = Vec::new();
    for m in text.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        let mode = match m {
            "Node" => AuthorizationMode::Node,
            "RBAC" => AuthorizationMode::Rbac,
            "AlwaysAllow" => AuthorizationMode::AlwaysAllow,
            "AlwaysDeny" => AuthorizationMode::AlwaysDeny,
            other => return Err(ModeError::Unknown(other.to_owned())),
        };
        if modes.contains(&mode) {
            return Err(ModeError::Repeated(m.to_owned()));
        }
        modes.push(mode);
    }
    if modes.is_empty() {
        return Err(ModeError::None);
    }
    Ok(modes)
}

/// Runs the chain.
pub async fn authorize(
    src: Sources<'_>,
    modes: &[AuthorizationMode],
    attrs: &Attributes,
) -> Result<AuthorizationDecision, StoreError> {
    if attrs.user.groups.iter().any(|g| g == "system:masters") {
        return Ok(AuthorizationDecision::Allow(String::new()));
    }
    let mut reasons = Vec::new();
    for mode in modes {
        let decision = match mode {
            AuthorizationMode::Node => node::authorize(src.store, src.nodes, attrs).await?,
            AuthorizationMode::Rbac => rbac::authorize(src.rbac, attrs)?,
            AuthorizationMode::AlwaysAllow => AuthorizationDecision::Allow(String::new()),
            AuthorizationMode::AlwaysDeny => AuthorizationDecision::Deny("Everything is forbidden.".into()),
        };
        match decision {
            AuthorizationDecision::NoOpinion(reason) => {
                if !reason.is_empty() {
                    reasons.push(reason);
                }
            }
            decided => return Ok(decided),
        }
    }
    Ok(AuthorizationDecision::NoOpinion(reasons.join("\n")))
}

/// `forbiddenMessage` + the reason, as `responsewriters.Forbidden` words a refusal.
pub fn forbidden(attrs: &Attributes, reason: &str) -> StatusError {
    let user = &attrs.user.name;
    let suffix = if reason.is_empty() { String::new() } else { format!(": {reason}") };
    if !attrs.resource_request {
        return StatusError::forbidden_raw(format!(
            "forbidden: User {user:?} cannot {} path {:?}{suffix}",
            attrs.verb, attrs.path
        ));
    }
    let resource = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let what = if attrs.namespace.is_empty() {
        "at the cluster scope".to_owned()
    } else {
        format!("in the namespace {:?}", attrs.namespace)
    };
    let message = format!(
        "User {user:?} cannot {} resource {resource:?} in API group {:?} {what}{suffix}",
        attrs.verb, attrs.api_group
    );
    let group_resource = if attrs.api_group.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}.{}", attrs.resource, attrs.api_group)
    };
    StatusError::forbidden_raw(if attrs.name.is_empty() {
        format!("{group_resource} is forbidden: {message}")
    } else {
        format!("{group_resource} {:?} is forbidden: {message}", attrs.name)
    })
}

/// Applies `Impersonate-User`/`Impersonate-Group`/`Impersonate-Uid` headers: the requester
/// needs the `impersonate` verb on `users` (or `serviceaccounts`), `groups` and `uids`.
pub async fn impersonate(
    src: Sources<'_>,
    modes: &[AuthorizationMode],
    requester: &User,
    user: Option<&str>,
    groups: &[String],
    uid: Option<&str>,
) -> Result<Option<User>, StatusError> {
    let Some(name) = user else {
        if groups.is_empty() && uid.is_none() {
            return Ok(None);
        }
        return Err(StatusError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "requested impersonation of groups or uid without impersonating a user".to_owned(),
        ));
    };
    let mut checks: Vec<Attributes> = Vec::new();
    let base = |resource: &str, name: &str, namespace: &str| {
        Attributes::resource(requester, "impersonate", "", resource, namespace, name)
    };
    match name.strip_prefix("system:serviceaccount:").and_then(|r| r.split_once(':')) {
        Some((ns, sa)) => checks.push(base("serviceaccounts", sa, ns)),
        None => checks.push(base("users", name, "")),
    }
    for g in groups {
        checks.push(base("groups", g, ""));
    }
    if let Some(u) = uid {
        let mut a = base("uids", u, "");
        a.api_group = "authentication.k8s.io".into();
        checks.push(a);
    }
    for attrs in &checks {
        match authorize(src, modes, attrs).await? {
            AuthorizationDecision::Allow(_) => {}
            AuthorizationDecision::Deny(reason) | AuthorizationDecision::NoOpinion(reason) => {
                return Err(forbidden(attrs, &reason));
            }
        }
    }
    let mut all_groups: Vec<String> = groups.to_vec();
    if let Some((ns, _)) = name.strip_prefix("system:serviceaccount:").and_then(|r| r.split_once(':')) {
        // As upstream: an impersonated service account gets its groups.
        all_groups.push("system:serviceaccounts".into());
        all_groups.push(format!("system:serviceaccounts:{ns}"));
    }
    if name != "system:anonymous" && !all_groups.iter().any(|g| g == "system:authenticated") {
        all_groups.push("system:authenticated".into());
    }
    Ok(Some(User {
        name: name.into(),
        uid: uid.unwrap_or_default().into(),
        groups: all_groups,
        extra: Default::default(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(ns: &str, name: &str, group: &str, sub: &str) -> Attributes {
        Attributes {
            user: User { name: "system:node:n1".into(), uid: String::new(), groups: vec![], extra: Default::default() },
            verb: "create".into(),
            namespace: ns.into(),
            api_group: group.into(),
            resource: "serviceaccounts".into(),
            subresource: sub.into(),
            name: name.into(),
            resource_request: true,
            path: String::new(),
            field_selector: String::new(),
        }
    }

    #[test]
    fn forbidden_messages_as_upstream() {
        assert_eq!(
            forbidden(&attrs("ns", "sa", "", "token"), "no relationship found between node 'n1' and this object")
                .message,
            r#"serviceaccounts "sa" is forbidden: User "system:node:n1" cannot create resource "serviceaccounts/token" in API group "" in the namespace "ns": no relationship found between node 'n1' and this object"#
        );
        let mut cluster = attrs("", "", "rbac.authorization.k8s.io", "");
        cluster.resource = "clusterroles".into();
        cluster.verb = "list".into();
        assert_eq!(
            forbidden(&cluster, "").message,
            r#"clusterroles.rbac.authorization.k8s.io is forbidden: User "system:node:n1" cannot list resource "clusterroles" in API group "rbac.authorization.k8s.io" at the cluster scope"#
        );
        let mut path = cluster.clone();
        path.resource_request = false;
        path.verb = "get".into();
        path.path = "/metrics".into();
        assert_eq!(forbidden(&path, "").message, r#"forbidden: User "system:node:n1" cannot get path "/metrics""#);
    }

    #[test]
    fn modes() {
        assert_eq!(parse_modes("Node,RBAC"), Ok(vec![AuthorizationMode::Node, AuthorizationMode::Rbac]));
        assert!(parse_modes("RBAC,RBAC").is_err());
        assert!(parse_modes("ABAC").unwrap_err().to_string().contains("not a valid mode"));
        assert!(parse_modes("").is_err());
    }
}
