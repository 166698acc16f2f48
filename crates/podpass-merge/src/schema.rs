//! The type model merges are computed against (upstream `schema.Schema`): scalars, lists
//! (atomic, sets, or maps keyed by some of their items' fields), maps (structs with named
//! fields, granular or atomic maps) and untyped values (deduced from the value itself).
//!
//! A schema is an arena of [`Atom`]s addressed by [`TypeId`]; recursive types refer to
//! themselves by id. Callers build one from whatever describes their types (the API server
//! builds it from its OpenAPI documents).

use std::collections::BTreeMap;

use serde_json::Value;

/// A type in a [`Schema`].
pub type TypeId = usize;

/// A type's shape.
#[derive(Debug, Clone, PartialEq)]
pub enum Atom {
    /// A leaf: string, number, boolean (or null).
    Scalar,
    /// A list.
    List(ListType),
    /// A map or struct.
    Map(MapType),
    /// Anything, deduced from the value (upstream `__untyped_deduced_`): maps are granular
    /// with untyped values, lists atomic, everything else a scalar.
    Untyped,
}

/// How a list's items relate (`x-kubernetes-list-type`).
#[derive(Debug, Clone, PartialEq)]
pub enum ListKind {
    /// Replaced as a whole; one owner (`atomic`, the default).
    Atomic,
    /// Scalars, each item owned by value (`set`).
    Set,
    /// Items owned by their key fields (`map` with `x-kubernetes-list-map-keys`).
    Map(Vec<KeyField>),
}

/// A key field of an associative list.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyField {
    /// The field's name.
    pub name: String,
    /// Its default, used when an item omits it (upstream reads the schema's `default`:
    /// `protocol: TCP` for container ports).
    pub default: Option<Value>,
}

impl KeyField {
    /// A key field without a default.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), default: None }
    }
}

/// A list type.
#[derive(Debug, Clone, PartialEq)]
pub struct ListType {
    /// The items' type.
    pub element: TypeId,
    /// How items relate.
    pub kind: ListKind,
}

/// A map or struct type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MapType {
    /// Named fields (a struct's properties).
    pub fields: BTreeMap<String, TypeId>,
    /// The type of keys not among `fields` (a map's values); `None`: such keys are not
    /// allowed ("field not declared in schema").
    pub element: Option<TypeId>,
    /// Replaced as a whole, one owner (`x-kubernetes-map-type: atomic`).
    pub atomic: bool,
}

impl MapType {
    /// The type of field `name`: a named field's, else the element type.
    pub fn field(&self, name: &str) -> Option<TypeId> {
        self.fields.get(name).copied()
    }

    /// The type of key `name`, named or not.
    pub fn key_type(&self, name: &str) -> Option<TypeId> {
        self.field(name).or(self.element)
    }
}

/// An arena of types.
#[derive(Debug, Clone)]
pub struct Schema {
    atoms: Vec<Atom>,
}

/// The id of [`Atom::Scalar`] in every schema.
pub const SCALAR: TypeId = 0;
/// The id of [`Atom::Untyped`] in every schema.
pub const UNTYPED: TypeId = 1;

impl Default for Schema {
    fn default() -> Self {
        Self::new()
    }
}

impl Schema {
    /// A schema holding the scalar ([`SCALAR`]) and untyped ([`UNTYPED`]) types.
    pub fn new() -> Self {
        Self { atoms: vec![Atom::Scalar, Atom::Untyped] }
    }

    /// Adds a type; its id.
    pub fn add(&mut self, atom: Atom) -> TypeId {
        self.atoms.push(atom);
        self.atoms.len() - 1
    }

    /// Replaces type `id` (for types defined after they are referred to).
    pub fn set(&mut self, id: TypeId, atom: Atom) {
        if let Some(slot) = self.atoms.get_mut(id) {
            *slot = atom;
        }
    }

    /// Type `id`; an unknown id is untyped.
    pub fn resolve(&self, id: TypeId) -> &Atom {
        self.atoms.get(id).unwrap_or(&Atom::Untyped)
    }

    /// The untyped type's id.
    pub fn untyped(&self) -> TypeId {
        UNTYPED
    }

    /// How many types the schema holds.
    pub fn len(&self) -> usize {
        self.atoms.len()
    }

    /// Whether it holds only the built-in two.
    pub fn is_empty(&self) -> bool {
        self.atoms.len() <= 2
    }
}
