//! RBAC escalation prevention (pkg/registry/rbac: the policy-based storage of roles,
//! cluster roles and their bindings). Writing RBAC objects is how a user with a little
//! access would get more, so every create, update and patch of them passes here:
//!
//! - `system:masters` may write anything (`EscalationAllowed`);
//! - a Role or ClusterRole: the writer holds `escalate` on it (`RoleEscalationAuthorized`),
//!   or already holds every rule it grants (`ConfirmNoEscalation`); setting or changing a
//!   ClusterRole's `aggregationRule` needs full authority, since it can gather anything;
//! - a RoleBinding or ClusterRoleBinding: the writer holds `bind` on the referenced role
//!   (`BindingAuthorized`), or already holds every rule of that role in the binding's scope.
//!
//! An update that changes only what the garbage collector owns (owner references,
//! finalizers) is not a grant and is not checked (`IsOnlyMutatingGCFields`).

use serde_json::Value;

use super::Sources;
use super::rules::{self, PolicyRule, Uncovered};
use super::{Attributes, AuthorizationMode, authorize};
use crate::server::User;
use crate::server::status::StatusError;
use crate::store::StoreError;

/// The RBAC API group.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// A write to one RBAC object, as the escalation check sees it.
#[derive(Debug)]
pub struct RbacWrite<'a> {
    /// Who writes.
    pub user: &'a User,
    /// `roles`, `clusterroles`, `rolebindings` or `clusterrolebindings`.
    pub resource: &'a str,
    /// The object's namespace (empty for cluster-scoped kinds).
    pub namespace: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// The object as it would be stored.
    pub new: &'a Value,
    /// The object it replaces (updates and patches).
    pub old: Option<&'a Value>,
}

/// `EscalationAllowed`: the privileged group may grant anything.
fn escalation_allowed(user: &User) -> bool {
    user.groups.iter().any(|g| g == "system:masters")
}

/// `IsOnlyMutatingGCFields`: `new` equals `old` once owner references, finalizers and
/// server-maintained metadata are taken from `old`.
pub fn only_gc_fields_change(new: &Value, old: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in ["ownerReferences", "finalizers", "selfLink", "managedFields", "resourceVersion", "generation"]
            {
                meta.remove(field);
            }
        }
        v
    };
    strip(new) == strip(old)
}

fn attrs(user: &User, verb: &str, resource: &str, namespace: &str, name: &str) -> Attributes {
    Attributes::resource(user, verb, RBAC_GROUP, resource, namespace, name)
}

async fn allowed(src: Sources<'_>, modes: &[AuthorizationMode], a: &Attributes) -> Result<bool, StoreError> {
    Ok(matches!(authorize(src, modes, a).await?, super::AuthorizationDecision::Allow(_)))
}

fn forbidden(write: &RbacWrite<'_>, reason: &str) -> StatusError {
    StatusError::forbidden_raw(format!("{}.{RBAC_GROUP} {:?} is forbidden: {reason}", write.resource, write.name))
}

/// `ConfirmNoEscalation`: the user's own rules in `namespace` cover `wanted`, or the
/// refusal worded as upstream's (missing rules compacted, one per line, sorted).
pub async fn confirm_no_escalation(
    src: Sources<'_>,
    user: &User,
    namespace: &str,
    wanted: &[PolicyRule],
) -> Result<Result<(), Escalation>, StoreError> {
    let owner = super::rbac::rules_for(src.rbac, user, namespace)?;
    let missing = match rules::covers(&owner, wanted) {
        Ok(()) => return Ok(Ok(())),
        Err(Uncovered::Missing(missing)) => missing,
        Err(Uncovered::TooLarge(n)) => {
            return Ok(Err(Escalation(format!(
                "user {:?} (groups={}) is attempting to grant RBAC permissions that cannot be checked: the rules expand to {n} verb/resource/name combinations, more than {}",
                user.name,
                rules::go_quoted_list(&user.groups),
                rules::MAX_BREAKDOWN
            ))));
        }
    };
    let mut lines: Vec<String> = rules::compact(missing).iter().map(rules::compact_string).collect();
    lines.sort();
    lines.dedup();
    Ok(Err(Escalation(format!(
        "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        rules::go_quoted_list(&user.groups),
        lines.join("\n")
    ))))
}

/// A grant the writer does not hold: upstream's refusal, the missing rules compacted one a
/// line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Escalation(pub String);

/// Refuses `write` unless the writer may make it (the module's rules). `Ok` lets it through.
pub async fn check(src: Sources<'_>, modes: &[AuthorizationMode], write: &RbacWrite<'_>) -> Result<(), StatusError> {
    if escalation_allowed(write.user) {
        return Ok(());
    }
    if let Some(old) = write.old
        && only_gc_fields_change(write.new, old)
    {
        return Ok(());
    }
    match write.resource {
        "roles" | "clusterroles" => check_role(src, modes, write).await,
        "rolebindings" | "clusterrolebindings" => check_binding(src, modes, write).await,
        _ => Ok(()),
    }
}

async fn check_role(src: Sources<'_>, modes: &[AuthorizationMode], write: &RbacWrite<'_>) -> Result<(), StatusError> {
    // RoleEscalationAuthorized: the request's own name (empty on create, as upstream reads
    // it from the request path).
    let name = if write.old.is_some() { write.name } else { "" };
    if allowed(src, modes, &attrs(write.user, "escalate", write.resource, write.namespace, name)).await? {
        return Ok(());
    }
    if let Err(reason) = confirm_no_escalation(src, write.user, write.namespace, &rules::rules_of(write.new)).await? {
        return Err(forbidden(write, &reason.0));
    }
    if write.resource == "clusterroles" {
        let aggregation = |v: &Value| v.get("aggregationRule").filter(|a| !a.is_null()).cloned();
        let new_rule = aggregation(write.new);
        let changed = match write.old {
            None => new_rule.is_some(),
            Some(old) => new_rule.is_some() && new_rule != aggregation(old),
        };
        if changed && confirm_no_escalation(src, write.user, "", &rules::full_authority()).await?.is_err() {
            let message = if write.old.is_none() {
                "must have cluster-admin privileges to use the aggregationRule"
            } else {
                "must have cluster-admin privileges to use or change the aggregationRule"
            };
            return Err(forbidden(write, message));
        }
    }
    Ok(())
}

async fn check_binding(
    src: Sources<'_>,
    modes: &[AuthorizationMode],
    write: &RbacWrite<'_>,
) -> Result<(), StatusError> {
    let role_ref = write.new.get("roleRef").unwrap_or(&Value::Null);
    let kind = role_ref.get("kind").and_then(Value::as_str).unwrap_or("");
    let role_name = role_ref.get("name").and_then(Value::as_str).unwrap_or("");
    let role_resource = match kind {
        "ClusterRole" => "clusterroles",
        "Role" => "roles",
        _ => return Err(forbidden(write, "roleRef.kind must be Role or ClusterRole")),
    };
    // BindingAuthorized: `bind` checked in the binding's namespace (or cluster-wide).
    if allowed(src, modes, &attrs(write.user, "bind", role_resource, write.namespace, role_name)).await? {
        return Ok(());
    }
    // GetRoleReferenceRules: a missing role is the role's 404, as upstream.
    let Some(key) = super::rbac::role_ref_key(role_ref, write.namespace) else {
        return Err(forbidden(write, "roleRef.kind must be Role or ClusterRole"));
    };
    let role = src.store.get_shared(&key).await.map_err(|e| match e {
        StoreError::NotFound { .. } => StatusError::new(
            axum::http::StatusCode::NOT_FOUND,
            "NotFound",
            format!("{role_resource}.{RBAC_GROUP} {role_name:?} not found"),
        ),
        other => other.into(),
    })?;
    if let Err(reason) = confirm_no_escalation(src, write.user, write.namespace, &rules::rules_of(&role.object)).await?
    {
        return Err(forbidden(write, &reason.0));
    }
    Ok(())
}
