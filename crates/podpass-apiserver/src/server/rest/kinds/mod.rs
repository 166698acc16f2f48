//! One strategy per served kind (upstream: `pkg/registry/<group>/<kind>/strategy.go` over
//! `genericregistry.Store`): what a kind adds to the generic create/update/delete/list
//! path — defaulting, `PrepareForCreate`/`PrepareForUpdate`, validation, graceful
//! deletion, selectable fields, its table, and what runs after a write. Each strategy is
//! registered beside its kind in the resource table ([`super::resources::RESOURCES`]); the
//! generic layer (`rest/mod.rs`, `delete.rs`) calls it and never names a kind.
//!
//! The store keeps objects as JSON, so the hooks take the JSON object; by the time a hook
//! sees a write it has been decoded as the kind's k8s-openapi type ([`types`]: unknown
//! fields dropped, wrong types refused), so its shape is the type's.

mod certificate_signing_request;
mod config_map;
mod controller_revision;
mod cron_job;
mod daemon_set;
mod deployment;
mod endpoint_slice;
mod event;
mod events_v1;
mod ip_address;
mod job;
mod lease;
mod limit_range;
mod namespace;
mod node;
mod pod;
mod pod_spec;
mod pod_template;
mod probe;
pub(crate) mod projection;
mod rbac;
mod replica_set;
mod resource_quota;
mod reviews;
pub(crate) mod revoked_token;
mod secret;
mod service;
mod service_account;
pub(crate) mod types;

use serde_json::Value;

use super::table::Cells;
use crate::server::AppState;
use crate::server::status::StatusError;
use crate::store::BoxFuture;

pub(crate) use super::resources::{Names, Resource};
pub(crate) use namespace::ensure_system_namespaces;

/// Every served resource, in discovery's order: the one list of kinds. Each is declared in
/// its own file (names, scope, strategy, type, short names, categories); discovery, the
/// OpenAPI documents, the protobuf decoder, field validation, tables and errors read it
/// from here. To add a kind, write its file as `limit_range.rs` is written and add it here.
pub const RESOURCES: &[Resource] = &[
    namespace::RESOURCE,
    service_account::RESOURCE,
    pod::RESOURCE,
    node::RESOURCE,
    secret::RESOURCE,
    config_map::RESOURCE,
    resource_quota::RESOURCE,
    limit_range::RESOURCE,
    event::RESOURCE,
    service::SERVICE_RESOURCE,
    service::ENDPOINTS_RESOURCE,
    endpoint_slice::RESOURCE,
    ip_address::RESOURCE,
    certificate_signing_request::RESOURCE,
    events_v1::RESOURCE,
    lease::RESOURCE,
    revoked_token::RESOURCE,
    rbac::ROLE_RESOURCE,
    rbac::ROLE_BINDING_RESOURCE,
    rbac::CLUSTER_ROLE_RESOURCE,
    rbac::CLUSTER_ROLE_BINDING_RESOURCE,
    reviews::TOKEN_REVIEW,
    reviews::SELF_SUBJECT_REVIEW,
    reviews::SELF_SUBJECT_ACCESS_REVIEW,
    reviews::SUBJECT_ACCESS_REVIEW,
    reviews::SELF_SUBJECT_RULES_REVIEW,
    reviews::LOCAL_SUBJECT_ACCESS_REVIEW,
    deployment::RESOURCE,
    replica_set::RESOURCE,
    daemon_set::RESOURCE,
    controller_revision::RESOURCE,
    job::RESOURCE,
    cron_job::RESOURCE,
];

/// A kind that is only ever a subresource's body (`pods/binding`'s Binding).
pub(crate) struct Body {
    /// Its API group.
    pub group: &'static str,
    /// Its kind.
    pub kind: &'static str,
    /// Its type.
    pub typed: &'static dyn types::Typed,
}

/// The body of `<workload>/scale`.
const SCALE: Body = Body {
    group: "autoscaling",
    kind: "Scale",
    typed: &types::TypeOf::<k8s_openapi::api::autoscaling::v1::Scale>::NEW,
};

/// The subresource bodies that are kinds of their own.
const BODIES: [Body; 3] = [pod::BINDING, service_account::TOKEN_REQUEST, SCALE];

/// The type of `kind` in `group`: a served resource's, or a subresource body's; `None` when
/// no kind of that name is served.
pub(crate) fn type_of(group: &str, kind: &str) -> Option<&'static dyn types::Typed> {
    let resource = RESOURCES.iter().find(|r| r.group == group && r.kind == kind).map(|r| r.typed);
    resource.or_else(|| BODIES.iter().find(|b| b.group == group && b.kind == kind).map(|b| b.typed))
}

/// The part of an object a write addresses: the object (its main resource), or one of
/// the subresources that write a part of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The main resource.
    Main,
    /// `/status`.
    Status,
    /// `pods/ephemeralcontainers`.
    EphemeralContainers,
    /// `namespaces/finalize`: `spec.finalizers`, which the namespace controller empties.
    Finalize,
    /// `certificatesigningrequests/approval`: the Approved and Denied conditions.
    Approval,
}

/// What serves a subresource (upstream: the REST storage its path is registered with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Serves {
    /// A part of the object, read and written through it: get, update, patch.
    Part(Part),
    /// `pods/log`: get, proxied to the pod's node.
    Log,
    /// A stream (exec, attach, portforward): listed as upstream lists it, refused 405 here.
    Stream,
    /// `pods/binding`: create.
    Binding,
    /// `serviceaccounts/token` (TokenRequest): create.
    Token,
    /// `<workload>/scale` (autoscaling/v1 Scale): get, update, patch.
    Scale,
}

impl Serves {
    /// The verbs discovery lists for it.
    pub(crate) fn verbs(self) -> &'static [&'static str] {
        match self {
            // namespaceFinalizeStrategy's REST serves Update alone.
            Self::Part(Part::Finalize) => &["update"],
            Self::Part(_) | Self::Scale => &["get", "patch", "update"],
            Self::Log => &["get"],
            Self::Stream => &["create", "get"],
            Self::Binding | Self::Token => &["create"],
        }
    }
}

/// One subresource of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Subresource {
    /// Its path segment (`status`).
    pub name: &'static str,
    /// The kind of its bodies.
    pub kind: &'static str,
    /// What serves it.
    pub serves: Serves,
}

/// The `status` subresource of `kind`.
pub(crate) const fn status(kind: &'static str) -> Subresource {
    Subresource { name: "status", kind, serves: Serves::Part(Part::Status) }
}

/// The `scale` subresource of a workload.
pub(crate) const fn scale() -> Subresource {
    Subresource { name: "scale", kind: "Scale", serves: Serves::Scale }
}

/// A kind's table: its columns and how a row is made.
pub(crate) type Printer = (Vec<Value>, Cells);

/// What a write that was stored did, for [`Strategy::after_write`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// Created.
    Created,
    /// Replaced or patched.
    Updated,
    /// Removed.
    Deleted,
}

/// A stored write, as [`Strategy::after_write`] sees it.
pub(crate) struct AfterWrite<'a> {
    /// What happened.
    pub written: Written,
    /// The object's name.
    pub name: &'a str,
    /// The store's revision after the write.
    pub revision: u64,
    /// The object as stored (for a delete: as it was removed).
    pub object: &'a Value,
    /// For an update, the object it replaced.
    pub old: Option<&'a Value>,
}

/// A create or update about to be validated and stored, as [`Strategy::begin_write`] sees it.
pub(crate) struct BeginWrite<'a> {
    /// The object's namespace (namespaced kinds).
    pub namespace: Option<&'a str>,
    /// Its name.
    pub name: &'a str,
    /// For an update, the object it replaces.
    pub old: Option<&'a Value>,
    /// A dry run: nothing may be reserved.
    pub dry_run: bool,
    /// Who writes (a CSR records its requester).
    pub user: &'a crate::server::authn::User,
}

/// What [`Strategy::begin_write`] reserved in the store: the objects it created, removed
/// again if the write they were made for is not stored.
#[derive(Debug, Default)]
#[must_use = "a reservation is released when its write fails"]
pub(crate) struct Reserved(pub Vec<crate::store::ObjectKey>);

impl Reserved {
    /// Removes what was reserved (the write failed); a removal that fails is left to the
    /// kind's repair loop.
    pub(crate) async fn release(self, state: &AppState) {
        for key in self.0 {
            if let Err(e) = state.store.delete(&key, None).await {
                tracing::warn!(key = %key.storage_key(), error = %e, "a failed write's reservation stays for repair");
            }
        }
    }
}

/// How a kind departs from the generic registry. Every hook has upstream's generic
/// behaviour as its default, so a kind states only what it adds.
pub(crate) trait Strategy: Send + Sync {
    /// `metadata.name` as this kind requires it (default: a DNS-1123 subdomain); the
    /// problem in upstream's words, `None` when valid.
    fn name_problem(&self, name: &str) -> Option<String> {
        let problems = podpass_api::validation::is_dns1123_subdomain(name);
        (!problems.is_empty()).then(|| problems.join(", "))
    }

    /// The v1 scheme defaults (`SetDefaults_<Kind>`), applied to every written body, as
    /// upstream's decoder does.
    fn default(&self, _name: &str, _object: &mut Value) -> Result<(), StatusError> {
        Ok(())
    }

    /// `PrepareForCreate`: what the server sets on a new object whatever the body said.
    fn prepare_for_create(&self, _object: &mut Value) {}

    /// `PrepareForUpdate`: what a main-resource update may not change, taken from `old`.
    fn prepare_for_update(&self, _object: &mut Value, _old: &Value) {}

    /// What a write through a part subresource (`/status`, `/approval`) may not change
    /// beyond the part itself, after the part was taken from the request.
    fn prepare_for_part_update(&self, _part: Part, _object: &mut Value, _old: &Value) {}

    /// `Validate` of a new object: a 422 naming each bad field.
    fn validate(&self, _name: &str, _object: &Value) -> Result<(), StatusError> {
        Ok(())
    }

    /// `ValidateUpdate`: the object as validated on create, and what may not change.
    fn validate_update(&self, name: &str, object: &Value, _old: &Value) -> Result<(), StatusError> {
        self.validate(name, object)
    }

    /// Whether a DELETE that names no propagation orphans the dependents (upstream
    /// `DefaultGarbageCollectionPolicy`: batch/v1 Jobs do, for API clients that say
    /// nothing; kubectl always says). Default: background.
    fn orphans_by_default(&self) -> bool {
        false
    }

    /// The kind's subresources, each with the kind of its bodies and what serves it:
    /// `status` for kinds whose status only its own subresource writes (their
    /// `prepare_for_update` keeps it). Requests are routed, and discovery lists verbs, from
    /// this declaration alone.
    fn subresources(&self) -> &'static [Subresource] {
        &[]
    }

    /// For a create-only kind (a review), what answers it; `None` for a stored kind.
    fn answers(&self) -> Option<Answers> {
        None
    }

    /// Field-selector paths besides `metadata.name` and `metadata.namespace`
    /// (`<Kind>ToSelectableFields`).
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// Selector paths that name another field (`source` for an event's
    /// `source.component`).
    fn field_aliases(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// The kind's printer (default: upstream's Name and Created At table).
    fn printer(&self) -> Option<Printer> {
        None
    }

    /// `CheckGracefulDelete`: the grace period a delete of `object` gives it (marked,
    /// removed after), or `None` to delete at once. `requested` is the request's.
    fn graceful_delete(&self, _object: &Value, _requested: Option<i64>) -> Option<i64> {
        None
    }

    /// Whether a DELETE that removes the object answers with it (genericregistry
    /// `ReturnDeletedObject`: pods, services and service accounts among ours) rather than
    /// upstream's default `finalizeDelete` answer, a `Status` of Success naming it.
    fn returns_deleted_object(&self) -> bool {
        false
    }

    /// Whether a delete hands the object to a controller that finalizes it (namespaces:
    /// Terminating, emptied, then removed) instead of removing it.
    fn deleted_by_controller(&self) -> bool {
        false
    }

    /// `BeginCreate`/`BeginUpdate`: what a write reserves before it is validated and stored
    /// (a Service's cluster IP), set into `object`. The reservation is released if the write
    /// then fails.
    fn begin_write<'a>(
        &'a self,
        _state: &'a AppState,
        _write: BeginWrite<'a>,
        _object: &'a mut Value,
    ) -> BoxFuture<'a, Result<Reserved, StatusError>> {
        Box::pin(std::future::ready(Ok(Reserved::default())))
    }

    /// What runs once a write is stored, before it is answered (a new namespace's default
    /// objects, the RBAC index catching up).
    fn after_write<'a>(
        &'a self,
        _state: &'a AppState,
        _write: AfterWrite<'a>,
    ) -> BoxFuture<'a, Result<(), StatusError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// Another version of a stored kind, sharing its storage and strategy (upstream: one
/// internal type served in several group versions, converted on the way in and out).
pub(crate) trait Conversion: Send + Sync {
    /// The group of the resource whose storage and strategy this version shares (same
    /// plural).
    fn stored_group(&self) -> &'static str;
    /// This version's object (a request body) in the stored version's shape.
    fn to_stored(&self, object: Value) -> Value;
    /// A stored object in this version's shape (a response).
    fn to_served(&self, object: Value) -> Value;
    /// What writes through this version must satisfy beyond the stored kind's strategy.
    fn validate(&self, _name: &str, _served: &Value) -> Result<(), StatusError> {
        Ok(())
    }
    /// What updates through this version must satisfy, on the stored shapes of the new and
    /// the current object.
    fn validate_update(&self, _name: &str, _stored: &Value, _current: &Value) -> Result<(), StatusError> {
        Ok(())
    }
}

/// What answers a create-only kind (a review: answered, never stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answers {
    /// TokenReview: the token authenticators.
    TokenReview,
    /// The access and rules reviews (and SelfSubjectReview): the authorizers.
    Review,
}

/// Joins field errors into upstream's `Kind "name" is invalid: …` (a list when several),
/// with `details.causes` as `errors.NewInvalid` writes them (kubectl prints one line a cause).
pub(crate) fn invalid(kind: &str, name: &str, errors: Vec<String>) -> Result<(), StatusError> {
    let mut e = match errors.as_slice() {
        [] => return Ok(()),
        [one] => StatusError::invalid(format!("{kind} {name:?} is invalid: {one}")),
        many => StatusError::invalid(format!("{kind} {name:?} is invalid: [{}]", many.join(", "))),
    };
    let causes: Vec<Value> = errors.iter().map(|error| cause(error)).collect();
    let mut details = serde_json::json!({"name": name, "kind": kind, "causes": causes});
    if let Some(group) = group_of(kind) {
        details["group"] = group.into();
    }
    e.details = Some(Box::new(details));
    Err(e)
}

/// `field.ErrorType`s as they read in a rendered error, and their `metav1.CauseType`.
const CAUSE_TYPES: [(&str, &str); 9] = [
    ("Required value", "FieldValueRequired"),
    ("Invalid value", "FieldValueInvalid"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Forbidden", "FieldValueForbidden"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
    ("Not found", "FieldValueNotFound"),
    ("Internal error", "InternalError"),
];

/// One rendered `<field>: <type>[: …]` error as a `StatusCause` (`reason`, `message` — the
/// error without its field, as `ErrorBody` — and `field`).
fn cause(error: &str) -> Value {
    let split = CAUSE_TYPES
        .iter()
        .filter_map(|(text, reason)| error.find(&format!(": {text}")).map(|at| (at, *reason)))
        .min_by_key(|(at, _)| *at);
    match split {
        Some((at, reason)) => serde_json::json!({"reason": reason, "message": &error[at + 2..], "field": &error[..at]}),
        None => serde_json::json!({"reason": "FieldValueInvalid", "message": error}),
    }
}

/// The API group of a kind as errors name it: its stored resource's (the core group's
/// Event, not events.k8s.io's view of it).
fn group_of(kind: &str) -> Option<&'static str> {
    RESOURCES.iter().find(|r| r.kind == kind && r.conversion.is_none()).map(|r| r.group).filter(|g| !g.is_empty())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn invalid_objects_carry_one_cause_per_field_error_as_new_invalid_writes_them() {
        let e = invalid(
            "Role",
            "r",
            vec![
                "rules[0].verbs: Required value".into(),
                r#"metadata.labels: Invalid value: "a: b": name part must be short"#.into(),
            ],
        )
        .unwrap_err();
        assert_eq!(e.code.as_u16(), 422);
        assert_eq!(
            *e.details.unwrap(),
            serde_json::json!({"name": "r", "kind": "Role", "group": "rbac.authorization.k8s.io", "causes": [
                {"reason": "FieldValueRequired", "message": "Required value", "field": "rules[0].verbs"},
                {"reason": "FieldValueInvalid", "message": r#"Invalid value: "a: b": name part must be short"#,
                 "field": "metadata.labels"},
            ]})
        );
        assert_eq!(invalid("Pod", "p", vec![]), Ok(()));
    }
}

#[cfg(test)]
mod declared_subresources {
    use super::*;
    use crate::server::rest::resources::find;

    /// Discovery and routing read one declaration: each subresource's verbs follow from
    /// what serves it, as upstream registers them.
    #[test]
    fn subresources_are_routed_and_listed_from_their_kinds_declaration() {
        let listed = |group: &str, plural: &str| -> Vec<(String, Vec<&str>)> {
            let res = find(group, plural).unwrap_or_else(|| panic!("{plural}"));
            res.subresources().iter().map(|s| (s.name.to_owned(), s.serves.verbs().to_vec())).collect()
        };
        let pods = listed("", "pods");
        let expect = [
            ("status", vec!["get", "patch", "update"]),
            ("ephemeralcontainers", vec!["get", "patch", "update"]),
            ("binding", vec!["create"]),
            ("log", vec!["get"]),
            ("exec", vec!["create", "get"]),
            ("attach", vec!["create", "get"]),
            ("portforward", vec!["create", "get"]),
        ];
        assert_eq!(pods, expect.map(|(n, v)| (n.to_owned(), v)).to_vec());
        assert_eq!(listed("", "serviceaccounts"), [("token".to_owned(), vec!["create"])]);
        assert_eq!(listed("", "nodes"), [("status".to_owned(), vec!["get", "patch", "update"])]);
        let namespaces = [("status", vec!["get", "patch", "update"]), ("finalize", vec!["update"])];
        assert_eq!(listed("", "namespaces"), namespaces.map(|(n, v)| (n.to_owned(), v)).to_vec());
        assert!(listed("", "configmaps").is_empty());
        let reviews = find("authentication.k8s.io", "tokenreviews").map(|r| r.strategy.answers());
        assert_eq!(reviews, Some(Some(Answers::TokenReview)));
        let access = find("authorization.k8s.io", "subjectaccessreviews").map(|r| r.strategy.answers());
        assert_eq!(access, Some(Some(Answers::Review)));
        assert_eq!(find("", "pods").map(|r| r.strategy.answers()), Some(None));
    }
}
