//! Structured merge and diff of Kubernetes objects: what Kubernetes' server-side apply
//! computes, after `sigs.k8s.io/structured-merge-diff` v4.
//!
//! - [`schema`]: the types values are merged against — structs, granular and atomic maps,
//!   lists that are atomic, sets, or maps keyed by some of their items' fields.
//! - [`Set`] and [`Path`]: sets of field paths, and their `fieldsV1` encoding
//!   ([`Set::to_fields_v1`], [`Set::from_fields_v1`]).
//! - [`typed`]: a value's field set, merge, comparison, removal of paths.
//! - [`Updater`]: ownership across managers — [`Updater::update`] for writes,
//!   [`Updater::apply`] for applies, with [`Conflicts`] and force.
//!
//! It knows nothing of HTTP or storage: a caller keeps `metadata.managedFields` itself
//! (manager identifiers, timestamps) and builds the [`Schema`] from its own type
//! descriptions.
//!
//! ```
//! use podpass_merge::schema::{Atom, KeyField, ListKind, ListType, MapType, SCALAR};
//! use podpass_merge::{ManagedFields, MergeError, Schema, Updater};
//! use serde_json::json;
//!
//! // A struct with a granular map `labels` and a list `items` keyed by `name`.
//! let mut schema = Schema::new();
//! let labels = schema.add(Atom::Map(MapType { element: Some(SCALAR), ..MapType::default() }));
//! let item = schema.add(Atom::Map(MapType {
//!     fields: [("name".into(), SCALAR), ("value".into(), SCALAR)].into(),
//!     ..MapType::default()
//! }));
//! let items = schema.add(Atom::List(ListType { element: item, kind: ListKind::Map(vec![KeyField::new("name")]) }));
//! let root = schema.add(Atom::Map(MapType {
//!     fields: [("labels".into(), labels), ("items".into(), items)].into(),
//!     ..MapType::default()
//! }));
//!
//! let updater = Updater::new(&schema, root);
//! let mut managers = ManagedFields::new();
//! let live = json!({});
//! let a = updater
//!     .apply(&live, &json!({"labels": {"team": "a"}, "items": [{"name": "x", "value": "1"}]}), "v1", &mut managers, "alice", false)?
//!     .expect("changed");
//! // bob applies another item: both coexist.
//! let b = updater
//!     .apply(&a, &json!({"items": [{"name": "y", "value": "2"}]}), "v1", &mut managers, "bob", false)?
//!     .expect("changed");
//! assert_eq!(b["items"].as_array().map(Vec::len), Some(2));
//! // bob changing alice's label is a conflict...
//! let err = updater.apply(&b, &json!({"labels": {"team": "b"}}), "v1", &mut managers, "bob", false).unwrap_err();
//! assert!(matches!(err, MergeError::Conflicts(c) if c.0[0].path.to_string() == ".labels.team"));
//! // ...and alice dropping her item removes it.
//! let c = updater.apply(&b, &json!({"labels": {"team": "a"}}), "v1", &mut managers, "alice", false)?.expect("changed");
//! assert_eq!(c["items"], json!([{"name": "y", "value": "2"}]));
//! # Ok::<(), MergeError>(())
//! ```

mod path;
pub mod schema;
mod set;
pub mod typed;
mod updater;
mod value;

pub use path::{Path, PathElement};
pub use schema::Schema;
pub use set::{FieldsError, MAX_FIELDS_DEPTH, Set, decode_element, encode_element};
pub use updater::{Conflict, Conflicts, ManagedFields, MergeError, Updater, VersionedSet};
pub use value::{compare as compare_values, equals as values_equal};
