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

mod config_map;
mod event;
mod events_v1;
mod lease;
mod limit_range;
mod namespace;
mod node;
mod pod;
pub(crate) mod projection;
mod rbac;
mod resource_quota;
mod secret;
mod service_account;
pub(crate) mod types;

use serde_json::Value;

use super::table::Cells;
use crate::server::AppState;
use crate::server::status::StatusError;
use crate::store::BoxFuture;

pub(crate) use config_map::CONFIG_MAP;
pub(crate) use event::EVENT;
pub(crate) use events_v1::EVENTS_V1;
pub(crate) use lease::LEASE;
pub(crate) use limit_range::LIMIT_RANGE;
pub(crate) use namespace::{NAMESPACE, ensure_system_namespaces};
pub(crate) use node::NODE;
pub(crate) use pod::POD;
pub(crate) use rbac::{CLUSTER_ROLE, CLUSTER_ROLE_BINDING, ROLE, ROLE_BINDING};
pub(crate) use resource_quota::RESOURCE_QUOTA;
pub(crate) use secret::SECRET;
pub(crate) use service_account::SERVICE_ACCOUNT;

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

    /// `Validate` of a new object: a 422 naming each bad field.
    fn validate(&self, _name: &str, _object: &Value) -> Result<(), StatusError> {
        Ok(())
    }

    /// `ValidateUpdate`: the object as validated on create, and what may not change.
    fn validate_update(&self, name: &str, object: &Value, _old: &Value) -> Result<(), StatusError> {
        self.validate(name, object)
    }

    /// The kind's subresources as (name, kind of their bodies): `status` for kinds whose
    /// status only its own subresource writes (their `prepare_for_update` keeps it).
    fn subresources(&self) -> &'static [(&'static str, &'static str)] {
        &[]
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

    /// Whether a delete hands the object to a controller that finalizes it (namespaces:
    /// Terminating, emptied, then removed) instead of removing it.
    fn deleted_by_controller(&self) -> bool {
        false
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

/// Create-only reviews and the token subresource: nothing is stored, so nothing to add.
pub(crate) struct Unstored;

impl Strategy for Unstored {}

/// The strategy of a kind with no behaviour of its own.
pub(crate) static UNSTORED: Unstored = Unstored;

/// Joins field errors into upstream's `Kind "name" is invalid: …` (a list when several).
pub(crate) fn invalid(kind: &str, name: &str, errors: Vec<String>) -> Result<(), StatusError> {
    match errors.as_slice() {
        [] => Ok(()),
        [one] => Err(StatusError::invalid(format!("{kind} {name:?} is invalid: {one}"))),
        many => Err(StatusError::invalid(format!("{kind} {name:?} is invalid: [{}]", many.join(", ")))),
    }
}
