//! Sets of field paths (upstream `fieldpath.Set`) and their `fieldsV1` encoding, the form
//! `metadata.managedFields[].fieldsV1` stores.
//!
//! A set is a tree: `members` are paths ending here, `children` the subtrees below. A path
//! can be both a member and have children (`"f:labels": {".": {}, "f:a": {}}`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::path::{Path, PathElement};
use crate::schema::{Atom, Schema, TypeId};
use crate::value;

/// Deepest `fieldsV1` tree read: far past any real object (each object level is at most
/// two levels here), short of a stack a hostile entry could exhaust.
pub const MAX_FIELDS_DEPTH: usize = 256;

/// A set of field paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Set {
    members: BTreeSet<PathElement>,
    /// Never holds an empty set.
    children: BTreeMap<PathElement, Set>,
}

/// A `fieldsV1` document that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FieldsError {
    /// Where in the document, as upstream prints paths (empty: the root).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl Set {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// A set of the given paths.
    pub fn from_paths<I: IntoIterator<Item = Path>>(paths: I) -> Self {
        let mut s = Self::new();
        paths.into_iter().for_each(|p| s.insert(&p));
        s
    }

    /// Whether no path is in the set.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Adds a path. The empty path (the whole object) is never tracked, as upstream.
    pub fn insert(&mut self, path: &Path) {
        self.insert_elements(&path.0);
    }

    pub(crate) fn insert_elements(&mut self, elements: &[PathElement]) {
        match elements {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => match self.children.get_mut(first) {
                Some(child) => child.insert_elements(rest),
                None => {
                    let mut child = Set::new();
                    child.insert_elements(rest);
                    self.children.insert(first.clone(), child);
                }
            },
        }
    }

    /// Whether `path` is a member.
    pub fn has(&self, path: &Path) -> bool {
        let mut set = self;
        let Some((last, init)) = path.0.split_last() else { return false };
        for pe in init {
            match set.children.get(pe) {
                Some(child) => set = child,
                None => return false,
            }
        }
        set.members.contains(last)
    }

    /// Whether the single-element path `pe` is a member.
    pub fn has_member(&self, pe: &PathElement) -> bool {
        self.members.contains(pe)
    }

    /// The paths below `pe`, relative to it (upstream `WithPrefix`).
    pub fn with_prefix(&self, pe: &PathElement) -> Option<&Set> {
        self.children.get(pe)
    }

    /// Paths in either set.
    pub fn union(&self, other: &Set) -> Set {
        let mut out = self.clone();
        out.union_in_place(other);
        out
    }

    fn union_in_place(&mut self, other: &Set) {
        self.members.extend(other.members.iter().cloned());
        for (pe, child) in &other.children {
            self.children.entry(pe.clone()).or_default().union_in_place(child);
        }
    }

    /// Paths in both sets.
    pub fn intersection(&self, other: &Set) -> Set {
        let members = self.members.intersection(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if let Some(theirs) = other.children.get(pe) {
                let both = child.intersection(theirs);
                if !both.is_empty() {
                    children.insert(pe.clone(), both);
                }
            }
        }
        Set { members, children }
    }

    /// Paths of this set not in `other`; a member of `other` removes only itself, not the
    /// paths below it.
    pub fn difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            let rest = match other.children.get(pe) {
                Some(theirs) => child.difference(theirs),
                None => child.clone(),
            };
            if !rest.is_empty() {
                children.insert(pe.clone(), rest);
            }
        }
        Set { members, children }
    }

    /// Paths of this set not in `other`; a member of `other` removes itself and every path
    /// below it (upstream `RecursiveDifference`).
    pub fn recursive_difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if other.members.contains(pe) {
                continue;
            }
            let rest = match other.children.get(pe) {
                Some(theirs) => child.recursive_difference(theirs),
                None => child.clone(),
            };
            if !rest.is_empty() {
                children.insert(pe.clone(), rest);
            }
        }
        Set { members, children }
    }

    /// Every member path, members of a level before its children, each in order
    /// (upstream `Iterate`).
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Path>) {
        for pe in &self.members {
            let mut p = prefix.clone();
            p.push(pe.clone());
            out.push(Path(p));
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    /// This set plus, as members, the struct fields its paths pass through (upstream
    /// `EnsureNamedFieldsAreMembers`): owning `.spec.a.b` then owns `.spec` and `.spec.a`
    /// when those are named fields, never a map's keys or a list's items.
    pub fn ensure_named_fields_are_members(&self, schema: &Schema, ty: TypeId) -> Set {
        let atom = schema.resolve(ty);
        let mut members = self.members.clone();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            let child_ty = match (atom, pe) {
                (Atom::Map(m), PathElement::Field(name)) => match m.field(name) {
                    Some(t) => {
                        members.insert(pe.clone());
                        Some(t)
                    }
                    None => m.element,
                },
                (Atom::List(l), _) => Some(l.element),
                (Atom::Untyped, _) => Some(schema.untyped()),
                _ => None,
            };
            let child = match child_ty {
                Some(t) => child.ensure_named_fields_are_members(schema, t),
                None => child.clone(),
            };
            children.insert(pe.clone(), child);
        }
        Set { members, children }
    }

    /// The `fieldsV1` document of this set.
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.fields_v1_map(false))
    }

    fn fields_v1_map(&self, include_self: bool) -> Map<String, Value> {
        let mut out = Map::new();
        for pe in &self.members {
            if !self.children.contains_key(pe) {
                out.insert(encode_element(pe), Value::Object(Map::new()));
            }
        }
        for (pe, child) in &self.children {
            out.insert(encode_element(pe), Value::Object(child.fields_v1_map(self.members.contains(pe))));
        }
        if include_self && !out.is_empty() {
            out.insert(".".into(), Value::Object(Map::new()));
        }
        out
    }

    /// Reads a `fieldsV1` document (upstream `Set.FromJSON`). Keys of an unknown kind are
    /// dropped, as upstream does; a malformed key, a value that is not an object, or a
    /// tree deeper than [`MAX_FIELDS_DEPTH`] is an error naming where.
    pub fn from_fields_v1(doc: &Value) -> Result<Set, FieldsError> {
        let (children, _) = read_level(doc, &mut Vec::new())?;
        Ok(children.unwrap_or_default())
    }
}

/// One level of a `fieldsV1` tree: the set below it (if any) and whether the level is
/// itself a member.
fn read_level(doc: &Value, at: &mut Vec<PathElement>) -> Result<(Option<Set>, bool), FieldsError> {
    let err = |at: &[PathElement], message: String| FieldsError { path: Path(at.to_vec()).to_string(), message };
    if at.len() > MAX_FIELDS_DEPTH {
        return Err(err(at, format!("nested deeper than {MAX_FIELDS_DEPTH} levels")));
    }
    let Value::Object(map) = doc else {
        return Err(err(at, format!("expected an object, got {}", kind_of(doc))));
    };
    let mut set: Option<Set> = None;
    let mut is_member = false;
    for (key, child) in map {
        if key == "." {
            is_member = true;
            continue;
        }
        let pe = match decode_element(key) {
            Ok(Some(pe)) => pe,
            Ok(None) => continue,
            Err(message) => return Err(err(at, format!("parsing key {key:?} as a path element: {message}"))),
        };
        at.push(pe.clone());
        let (grandchildren, child_is_member) = read_level(child, at)?;
        at.pop();
        let s = set.get_or_insert_with(Set::new);
        if child_is_member {
            s.members.insert(pe.clone());
        }
        if let Some(g) = grandchildren.filter(|g| !g.is_empty()) {
            s.children.insert(pe, g);
        }
    }
    if set.is_none() {
        is_member = true;
    }
    Ok((set, is_member))
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// `f:name`, `k:{...}`, `v:value`, `i:index` (upstream `SerializePathElement`).
pub fn encode_element(pe: &PathElement) -> String {
    match pe {
        PathElement::Field(name) => format!("f:{name}"),
        PathElement::Key(fields) => {
            let mut out = String::from("k:{");
            for (i, (k, v)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&value::go_json(&Value::String(k.clone())));
                out.push(':');
                out.push_str(&value::go_json(v));
            }
            out.push('}');
            out
        }
        PathElement::Value(v) => format!("v:{}", value::go_json(v)),
        PathElement::Index(i) => format!("i:{i}"),
    }
}

/// Parses one key (upstream `DeserializePathElement`); `Ok(None)` for a kind this version
/// does not know (upstream drops those).
pub fn decode_element(s: &str) -> Result<Option<PathElement>, String> {
    let b = s.as_bytes();
    if b.len() < 2 {
        return Err("key must be 2 characters long".into());
    }
    if b[1] != b':' {
        return Err("missing colon".into());
    }
    let rest = &s[2..];
    Ok(Some(match b[0] {
        b'f' => PathElement::Field(rest.to_owned()),
        b'v' => PathElement::Value(serde_json::from_str(rest).map_err(|e| e.to_string())?),
        b'k' => {
            let fields: Map<String, Value> = serde_json::from_str(rest).map_err(|e| e.to_string())?;
            PathElement::key(fields)
        }
        b'i' => PathElement::Index(rest.parse().map_err(|e: std::num::ParseIntError| e.to_string())?),
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(s: &[&str]) -> Path {
        Path::fields(s.iter().copied())
    }

    #[test]
    fn fields_v1_round_trips_with_self_markers() {
        let mut s = Set::new();
        s.insert(&p(&["metadata", "labels"]));
        s.insert(&p(&["metadata", "labels", "a"]));
        s.insert(&Path(vec![
            PathElement::field("spec"),
            PathElement::field("containers"),
            PathElement::key([("name", json!("app"))]),
        ]));
        s.insert(&Path(vec![
            PathElement::field("spec"),
            PathElement::field("containers"),
            PathElement::key([("name", json!("app"))]),
            PathElement::field("image"),
        ]));
        let doc = s.to_fields_v1();
        assert_eq!(
            doc,
            json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}},
                   "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}})
        );
        assert_eq!(Set::from_fields_v1(&doc).unwrap(), s);
    }

    #[test]
    fn hostile_fields_v1_is_an_error_naming_where() {
        let e = Set::from_fields_v1(&json!({"f:a": {"k:notjson": {}}})).unwrap_err();
        assert_eq!(e.path, ".a");
        assert!(e.message.contains("k:notjson"), "{e}");
        let e = Set::from_fields_v1(&json!({"f:a": "x"})).unwrap_err();
        assert_eq!(e.to_string(), ".a: expected an object, got a string");
        assert!(Set::from_fields_v1(&json!({"x": {}})).is_err());
        // unknown kinds are dropped, as upstream
        assert!(Set::from_fields_v1(&json!({"z:a": {}})).unwrap().is_empty());
        let mut deep = json!({});
        for _ in 0..MAX_FIELDS_DEPTH + 2 {
            deep = json!({ "f:a": deep });
        }
        assert!(Set::from_fields_v1(&deep).unwrap_err().message.contains("deeper"));
    }

    #[test]
    fn set_algebra_is_upstreams() {
        let ab = Set::from_paths([p(&["a", "b"]), p(&["a", "c"]), p(&["a"])]);
        let a = Set::from_paths([p(&["a"])]);
        assert_eq!(ab.difference(&a), Set::from_paths([p(&["a", "b"]), p(&["a", "c"])]));
        assert!(ab.recursive_difference(&a).is_empty());
        assert_eq!(ab.intersection(&Set::from_paths([p(&["a", "c"]), p(&["x"])])), Set::from_paths([p(&["a", "c"])]));
        assert!(ab.has(&p(&["a", "b"])) && !ab.has(&p(&["a", "d"])));
        let shown: Vec<String> = ab.paths().iter().map(ToString::to_string).collect();
        assert_eq!(shown, [".a", ".a.b", ".a.c"]);
    }
}
