//! Admission, gathered in one place: the plugins kube-apiserver runs on a write, in its
//! order — mutating (ServiceAccount), then validating (NodeRestriction, PodSecurity, and
//! RBAC's escalation check, which upstream runs in the RBAC storage). Each plugin decides for
//! itself which resources it guards, as upstream's do. NamespaceLifecycle is
//! [`namespace_lifecycle`]; it runs first, on every create in a namespace.

mod certificates;
mod default_toleration_seconds;
pub(crate) mod limit_ranger;
mod node_restriction;
pub(crate) mod pod_security;
pub(crate) mod quota;
mod service_account;

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::Value;

use super::lifecycle;
use super::resources::Resource;
use crate::server::authz::escalation::{self, RBAC_GROUP, RbacWrite};
use crate::server::status::StatusError;
use crate::server::{AppState, User};

/// What is being done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    /// A new object.
    Create,
    /// A replacement or patch (the main resource or `/status`).
    Update,
    /// A removal.
    Delete,
}

/// Who writes what (upstream's `admission.Attributes`).
pub(crate) struct Attributes<'a> {
    /// The (possibly impersonated) user.
    pub user: &'a User,
    /// The resource written.
    pub res: &'a Resource,
    /// The subresource written (`token` of `serviceaccounts`; `""`: the object itself).
    pub subresource: &'a str,
    /// Its namespace (namespaced kinds).
    pub namespace: Option<&'a str>,
    /// The object's name.
    pub name: &'a str,
    /// What is done.
    pub operation: Operation,
    /// Where plugins leave warnings and audit annotations for the answer.
    pub notes: &'a Notes,
    /// `dryRun=All`: nothing is written, by admission either.
    pub dry_run: bool,
}

/// What admission plugins add to a request's answer besides allowing it: `Warning:`
/// headers and audit annotations (upstream: `AdmissionResponse.Warnings` and
/// `AuditAnnotations`).
#[derive(Debug, Default)]
pub(crate) struct Notes {
    warnings: Mutex<Vec<String>>,
    annotations: Mutex<BTreeMap<String, String>>,
    /// Locks a plugin holds until the request is answered (quota: the namespace's).
    held: Mutex<Vec<tokio::sync::OwnedMutexGuard<()>>>,
}

impl Notes {
    /// Adds a warning.
    pub(crate) fn warn(&self, warning: String) {
        self.warnings.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(warning);
    }

    /// Sets an audit annotation.
    pub(crate) fn annotate(&self, key: &str, value: &str) {
        self.annotations.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key.into(), value.into());
    }

    /// Keeps `guard` until the request is answered (its write stored).
    pub(crate) fn hold(&self, guard: tokio::sync::OwnedMutexGuard<()>) {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(guard);
    }

    /// The warnings and annotations gathered, leaving none.
    pub(crate) fn take(&self) -> (Vec<String>, BTreeMap<String, String>) {
        let w = std::mem::take(&mut *self.warnings.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        let a = std::mem::take(&mut *self.annotations.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        (w, a)
    }
}

/// NamespaceLifecycle for a create in `ns`: the namespace exists and is not terminating.
/// Returns its UID, checked again once the object is stored.
pub(crate) async fn namespace_lifecycle(
    state: &AppState,
    res: &Resource,
    ns: &str,
    name: &str,
) -> Result<String, StatusError> {
    lifecycle::admit_create(state, res, ns, name).await
}

/// Mutating admission: ServiceAccount on a new pod.
pub(crate) async fn mutate(state: &AppState, attrs: &Attributes<'_>, object: &mut Value) -> Result<(), StatusError> {
    if attrs.operation == Operation::Create && attrs.res.group.is_empty() && attrs.res.plural == "pods" {
        service_account::admit_pod(state, attrs.namespace.unwrap_or_default(), attrs.name, object).await?;
        limit_ranger::default_pod(state, attrs.namespace.unwrap_or_default(), object).await?;
        default_toleration_seconds::admit_pod(object);
    }
    quota::mutate(state, attrs, object).await
}

/// Validating admission of a write through a part subresource of a kind's object
/// (`/approval`, `/status`): the certificate plugins for CertificateSigningRequests.
pub(crate) async fn validate_part(
    state: &AppState,
    attrs: &Attributes<'_>,
    part: crate::server::rest::kinds::Part,
    object: &Value,
    old: &Value,
) -> Result<(), StatusError> {
    match (attrs.res.group, attrs.res.plural) {
        ("certificates.k8s.io", "certificatesigningrequests") => {
            certificates::admit_part(state, attrs.user, part, object, old).await
        }
        _ => Ok(()),
    }
}

/// Mutating admission of an update of an object itself (not through `/status`): the
/// plugins upstream runs on updates too (DefaultTolerationSeconds).
pub(crate) fn mutate_update(attrs: &Attributes<'_>, object: &mut Value) {
    if attrs.res.group.is_empty() && attrs.res.plural == "pods" {
        default_toleration_seconds::admit_pod(object);
    }
}

/// Validating admission of a write that would store `object` (replacing `old`), or of a
/// delete (`object` is `None`): NodeRestriction for nodes' Node and Lease objects,
/// PodSecurity for pods and namespaces' labels, and the RBAC escalation check.
pub(crate) async fn validate(
    state: &AppState,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<(), StatusError> {
    let ns = attrs.namespace.unwrap_or_default();
    if !attrs.subresource.is_empty() {
        return validate_subresource(state, attrs, object, ns).await;
    }
    validate_plugins(state, attrs, object, old, ns).await?;
    // Quota admission runs last, as upstream orders it: only what every other plugin
    // admitted is counted against a quota.
    match object {
        Some(object) => quota::admit(state, attrs, object).await,
        None => Ok(()),
    }
}

/// The validating plugins of a subresource create: NodeRestriction for a TokenRequest
/// (`serviceaccounts/token`); nothing of a subresource counts against a quota.
async fn validate_subresource(
    state: &AppState,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    ns: &str,
) -> Result<(), StatusError> {
    match (attrs.res.group, attrs.res.plural, attrs.subresource, object) {
        ("", "serviceaccounts", "token", Some(object)) => {
            node_restriction::admit_token_request(state, attrs.user, ns, attrs.name, object).await
        }
        _ => Ok(()),
    }
}

async fn validate_plugins(
    state: &AppState,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
    ns: &str,
) -> Result<(), StatusError> {
    match (attrs.res.group, attrs.res.plural, object) {
        ("", "nodes", Some(object)) => node_restriction::admit_node_write(attrs.user, attrs.name, object, old),
        ("coordination.k8s.io", "leases", _) => node_restriction::admit_lease_write(attrs.user, ns, attrs.name),
        ("", "pods", Some(object)) => {
            if attrs.operation == Operation::Create {
                limit_ranger::validate_pod(state, ns, attrs.name, object).await?;
            }
            pod_security::admit_pod(state, &state.pod_security, attrs, object, old).await
        }
        ("", "namespaces", Some(object)) => {
            pod_security::admit_namespace(state, &state.pod_security, attrs, object, old).await
        }
        (group, plural, Some(object)) if let Some(template) = pod_security::pod_template(group, plural, object) => {
            let old_template = old.and_then(|o| pod_security::pod_template(group, plural, o));
            pod_security::admit_pod_controller(state, &state.pod_security, attrs, (template, old_template)).await
        }
        ("certificates.k8s.io", "certificatesigningrequests", Some(object)) if attrs.operation == Operation::Create => {
            certificates::admit_create(attrs.name, object)
        }
        (RBAC_GROUP, plural, Some(new)) => {
            let write = RbacWrite { user: attrs.user, resource: plural, namespace: ns, name: attrs.name, new, old };
            escalation::check(state.authz(), &state.authorization_modes, &write).await
        }
        _ => Ok(()),
    }
}
