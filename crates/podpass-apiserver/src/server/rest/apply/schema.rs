//! The merge schema of every served kind, built once from the OpenAPI documents the server
//! publishes (k8s-openapi's schemas) plus what those schemas lack: each field's list and
//! map type (`x-kubernetes-list-type`, `-list-map-keys`, `-map-type`, generated from
//! k8s-openapi into `list_types.rs`), the list-map keys k8s-openapi drops, key defaults,
//! and the structs upstream marks atomic.

use std::collections::HashMap;
use std::sync::OnceLock;

use podpass_merge::schema::{Atom, KeyField, ListKind, ListType, MapType, SCALAR, TypeId, UNTYPED};
use podpass_merge::{Path, Schema, Set};
use serde_json::{Map, Value};

use super::list_types::LIST_TYPES;
use crate::server::rest::resources::RESOURCES;

/// A field's list or map type, where it is not the default (atomic list, granular map).
#[derive(Debug, Clone, Copy)]
pub(super) enum FieldType {
    /// `x-kubernetes-list-type: map` with these keys.
    Map(&'static [&'static str]),
    /// `x-kubernetes-list-type: set`.
    Set,
    /// `x-kubernetes-map-type: atomic` on a map.
    AtomicMap,
}

/// Lists upstream keys by more than one field (k8s-openapi keeps the first only), with the
/// keys' defaults (upstream's schema `default`: a container port's protocol is TCP).
/// A list's key fields, each with its default.
type Keys = &'static [(&'static str, Option<&'static str>)];

const MORE_KEYS: &[(&str, &str, Keys)] = &[
    ("io.k8s.api.core.v1.Container", "ports", &[("containerPort", None), ("protocol", Some("TCP"))]),
    ("io.k8s.api.core.v1.EphemeralContainer", "ports", &[("containerPort", None), ("protocol", Some("TCP"))]),
    ("io.k8s.api.core.v1.PodSpec", "topologySpreadConstraints", &[("topologyKey", None), ("whenUnsatisfiable", None)]),
];

/// Structs upstream's OpenAPI marks `x-kubernetes-map-type: atomic`: owned and replaced
/// whole.
const ATOMIC_STRUCTS: &[&str] = &[
    "io.k8s.api.core.v1.ConfigMapKeySelector",
    "io.k8s.api.core.v1.LocalObjectReference",
    "io.k8s.api.core.v1.NodeSelector",
    "io.k8s.api.core.v1.NodeSelectorTerm",
    "io.k8s.api.core.v1.ObjectFieldSelector",
    "io.k8s.api.core.v1.ObjectReference",
    "io.k8s.api.core.v1.ResourceFieldSelector",
    "io.k8s.api.core.v1.SecretKeySelector",
    "io.k8s.api.core.v1.SecretReference",
    "io.k8s.api.core.v1.TypedLocalObjectReference",
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
];

fn field_type(owner: &str, field: &str) -> Option<FieldType> {
    let i = LIST_TYPES.binary_search_by(|(o, f, _)| (*o, *f).cmp(&(owner, field))).ok()?;
    Some(LIST_TYPES[i].2)
}

/// The schemas of every served kind.
pub(crate) struct Schemas {
    /// One arena for all kinds.
    pub schema: Schema,
    /// Each stored kind, by (group, kind).
    kinds: HashMap<(&'static str, &'static str), Kind>,
}

/// One stored kind: its root type and the fields its writes never own, computed once.
pub(crate) struct Kind {
    /// The root type.
    pub root: TypeId,
    /// What a write to the main resource never owns (upstream's strategies'
    /// GetResetFields): managedFields, and `status` for a kind with `/status`.
    pub reset_main: Set,
    /// What a write to `/status` never owns: everything but `status`.
    pub reset_status: Set,
}

impl Kind {
    /// The reset fields of a write to `/status` (`status_only`) or the main resource.
    pub fn reset(&self, status_only: bool) -> &Set {
        if status_only { &self.reset_status } else { &self.reset_main }
    }
}

impl Schemas {
    /// The stored kind `kind` of `group`.
    pub fn kind(&self, group: &'static str, kind: &'static str) -> Option<&Kind> {
        self.kinds.get(&(group, kind))
    }
}

/// The schemas, built on first use.
pub(crate) fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(build)
}

fn build() -> Schemas {
    let mut defs = Map::new();
    let mut gvs: Vec<(&str, &str)> = RESOURCES.iter().map(|r| (r.group, r.version)).collect();
    gvs.dedup();
    for (group, version) in gvs {
        let doc = crate::server::rest::openapi::v3_document(group, version);
        if let Some(Value::Object(schemas)) = doc.pointer("/components/schemas") {
            defs.extend(schemas.clone());
        }
    }
    let mut b = Builder { defs: &defs, schema: Schema::new(), ids: HashMap::new() };
    let mut kinds = HashMap::new();
    for r in RESOURCES.iter().filter(|r| r.stored) {
        let name = r.typed.schema_name();
        let root = b.named(&name);
        let top: Vec<&String> = match defs.get(&name).and_then(|d| d.get("properties")) {
            Some(Value::Object(props)) => props.keys().collect(),
            _ => Vec::new(),
        };
        let managed = Path::fields(["metadata", "managedFields"]);
        let status = r.subresource("status").is_some().then(|| Path::fields(["status"]));
        let reset_main = Set::from_paths([managed.clone()].into_iter().chain(status));
        let reset_status = Set::from_paths(
            [managed]
                .into_iter()
                .chain(top.iter().filter(|f| f.as_str() != "status").map(|f| Path::fields([f.as_str()]))),
        );
        kinds.insert((r.group, r.kind), Kind { root, reset_main, reset_status });
    }
    Schemas { schema: b.schema, kinds }
}

struct Builder<'a> {
    defs: &'a Map<String, Value>,
    schema: Schema,
    ids: HashMap<String, TypeId>,
}

impl Builder<'_> {
    fn named(&mut self, name: &str) -> TypeId {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        // Reserved first: recursive types refer to themselves.
        let id = self.schema.add(Atom::Untyped);
        self.ids.insert(name.to_owned(), id);
        if let Some(def) = self.defs.get(name) {
            let atom = self.atom(name, None, def, ATOMIC_STRUCTS.contains(&name));
            self.schema.set(id, atom);
        }
        id
    }

    fn type_of(&mut self, owner: &str, field: &str, s: &Value) -> TypeId {
        if let Some(name) = reference(s) {
            return self.named(name);
        }
        let atom = self.atom(owner, Some(field), s, false);
        match atom {
            Atom::Scalar => SCALAR,
            Atom::Untyped => UNTYPED,
            atom => self.schema.add(atom),
        }
    }

    /// The atom of schema `s`: a named definition (`field` None) or the inline schema of
    /// `owner`'s `field`.
    fn atom(&mut self, owner: &str, field: Option<&str>, s: &Value, atomic: bool) -> Atom {
        if let Some(name) = reference(s) {
            let id = self.named(name);
            return self.schema.resolve(id).clone();
        }
        let annotated = field.and_then(|f| field_type(owner, f));
        match s.get("type").and_then(Value::as_str) {
            Some("array") => {
                let element = s.get("items").map_or(UNTYPED, |items| self.type_of(owner, field.unwrap_or(""), items));
                let kind = match (annotated, field) {
                    (Some(FieldType::Map(keys)), Some(f)) => {
                        let more = MORE_KEYS.iter().find(|(o, mf, _)| *o == owner && *mf == f);
                        let keys = match more {
                            Some((_, _, keys)) => keys
                                .iter()
                                .map(|(k, d)| KeyField {
                                    name: (*k).into(),
                                    default: d.map(|d| Value::String(d.into())),
                                })
                                .collect(),
                            None => keys.iter().map(|k| KeyField::new(*k)).collect(),
                        };
                        ListKind::Map(keys)
                    }
                    (Some(FieldType::Set), _) => ListKind::Set,
                    _ => ListKind::Atomic,
                };
                Atom::List(ListType { element, kind })
            }
            Some("object") | None if s.get("properties").is_some() => {
                let mut fields = std::collections::BTreeMap::new();
                if let Some(Value::Object(props)) = s.get("properties") {
                    for (k, v) in props {
                        let t = self.type_of(owner, k, v);
                        fields.insert(k.clone(), t);
                    }
                }
                Atom::Map(MapType { fields, element: None, atomic })
            }
            Some("object") => match s.get("additionalProperties") {
                Some(ap @ Value::Object(_)) => {
                    let element = self.type_of(owner, field.unwrap_or(""), ap);
                    let atomic = matches!(annotated, Some(FieldType::AtomicMap));
                    Atom::Map(MapType { element: Some(element), atomic, ..MapType::default() })
                }
                _ => Atom::Untyped,
            },
            Some("string" | "integer" | "number" | "boolean") => Atom::Scalar,
            _ if s.get("x-kubernetes-int-or-string").is_some() => Atom::Scalar,
            _ => Atom::Untyped,
        }
    }
}

/// The definition a schema refers to (`$ref`, or a lone `allOf` of one).
fn reference(s: &Value) -> Option<&str> {
    let r = s.get("$ref").or_else(|| s.get("allOf")?.get(0)?.get("$ref"))?.as_str()?;
    Some(r.trim_start_matches("#/components/schemas/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_have_upstreams_list_types() {
        let s = schemas();
        let pod = s.kind("", "Pod").expect("pod").root;
        let Atom::Map(pod) = s.schema.resolve(pod) else { panic!("pod is a struct") };
        let Atom::Map(spec) = s.schema.resolve(pod.field("spec").expect("spec")) else { panic!() };
        let Atom::List(containers) = s.schema.resolve(spec.field("containers").expect("containers")) else { panic!() };
        assert_eq!(containers.kind, ListKind::Map(vec![KeyField::new("name")]));
        let Atom::Map(c) = s.schema.resolve(containers.element) else { panic!() };
        let Atom::List(ports) = s.schema.resolve(c.field("ports").expect("ports")) else { panic!() };
        let ListKind::Map(keys) = &ports.kind else { panic!("ports are keyed") };
        assert_eq!(keys.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["containerPort", "protocol"]);
        let Atom::List(args) = s.schema.resolve(c.field("args").expect("args")) else { panic!() };
        assert_eq!(args.kind, ListKind::Atomic);
        let Atom::Map(sel) = s.schema.resolve(spec.field("nodeSelector").expect("nodeSelector")) else { panic!() };
        assert!(sel.atomic);
        let Atom::Map(meta) = s.schema.resolve(pod.field("metadata").expect("metadata")) else { panic!() };
        let Atom::Map(labels) = s.schema.resolve(meta.field("labels").expect("labels")) else { panic!() };
        assert!(!labels.atomic && labels.element == Some(SCALAR));
        let Atom::List(finalizers) = s.schema.resolve(meta.field("finalizers").expect("finalizers")) else { panic!() };
        assert_eq!(finalizers.kind, ListKind::Set);
        for r in RESOURCES.iter().filter(|r| r.stored) {
            assert!(s.kind(r.group, r.kind).is_some(), "{} {}", r.group, r.kind);
        }
    }
}
