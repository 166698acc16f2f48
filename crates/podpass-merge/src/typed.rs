//! Walks of values against a schema (upstream `typed`): the field set a value sets
//! (`ToFieldSet`), merging a partial object into another (`Merge`), what changed between
//! two (`Compare`), and removing a set of paths (`RemoveItems`).

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

use crate::path::{Path, PathElement};
use crate::schema::{Atom, ListKind, MapType, Schema, TypeId, UNTYPED};
use crate::set::Set;
use crate::value;

/// Deepest value walked: past any object an API server accepts, short of the stack.
pub const MAX_DEPTH: usize = 128;

/// One way a value does not fit its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// Where, as upstream prints paths (`.spec.containers[name="a"].ports`).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// Every way a value does not fit its schema.
#[derive(Debug, Clone, Default, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<ValidationError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            if e.path.is_empty() {
                f.write_str(&e.message)?;
            } else {
                write!(f, "{}: {}", e.path, e.message)?;
            }
        }
        Ok(())
    }
}

impl ValidationErrors {
    fn push(&mut self, path: &[PathElement], message: impl Into<String>) {
        // A hostile value could produce one error per item; the first ones say enough.
        if self.0.len() < 100 {
            self.0.push(ValidationError { path: Path(path.to_vec()).to_string(), message: message.into() });
        }
    }

    fn into_result<T>(self, ok: T) -> Result<T, ValidationErrors> {
        if self.0.is_empty() { Ok(ok) } else { Err(self) }
    }
}

/// What changed from one value to another (upstream `typed.Comparison`); no path is in
/// more than one set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Paths the second value no longer has.
    pub removed: Set,
    /// Paths both have, with different values.
    pub modified: Set,
    /// Paths only the second value has.
    pub added: Set,
}

impl Comparison {
    /// Whether the two values were the same.
    pub fn is_same(&self) -> bool {
        self.removed.is_empty() && self.modified.is_empty() && self.added.is_empty()
    }
}

/// How a walk sees one value of a type.
enum Shape<'s> {
    /// A scalar, or an atomic list or map: owned whole.
    Leaf,
    /// A list whose items are owned one by one.
    List(TypeId, &'s ListKind),
    /// A map or struct whose fields are owned one by one (`None`: untyped).
    Map(Option<&'s MapType>),
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

/// The shape of `v` as `ty`, or why it does not fit.
fn shape<'s>(schema: &'s Schema, ty: TypeId, v: &Value) -> Result<Shape<'s>, String> {
    match schema.resolve(ty) {
        Atom::Scalar => match v {
            Value::Array(_) | Value::Object(_) => Err(format!("expected scalar, got {}", kind_name(v))),
            _ => Ok(Shape::Leaf),
        },
        Atom::List(l) => match v {
            Value::Array(_) | Value::Null if l.kind != ListKind::Atomic => Ok(Shape::List(l.element, &l.kind)),
            Value::Array(_) | Value::Null => Ok(Shape::Leaf),
            _ => Err(format!("expected list, got {}", kind_name(v))),
        },
        Atom::Map(m) => match v {
            Value::Object(_) | Value::Null if !m.atomic => Ok(Shape::Map(Some(m))),
            Value::Object(_) | Value::Null => Ok(Shape::Leaf),
            _ => Err(format!("expected map, got {}", kind_name(v))),
        },
        Atom::Untyped => Ok(match v {
            Value::Object(_) => Shape::Map(None),
            _ => Shape::Leaf,
        }),
    }
}

/// The path element of a list item (upstream `listItemToPathElement`).
fn item_element(kind: &ListKind, index: usize, item: &Value) -> Result<PathElement, String> {
    match kind {
        ListKind::Map(keys) => {
            let Value::Object(fields) = item else {
                return Err(format!("associative list with keys has an element that is a {}", kind_name(item)));
            };
            let mut key = Vec::with_capacity(keys.len());
            for k in keys {
                let v = match (fields.get(&k.name), &k.default) {
                    (Some(v), _) => v,
                    (None, Some(d)) => d,
                    (None, None) => {
                        return Err(format!(
                            "associative list with keys has an element that omits key field {:?} (and doesn't have default value)",
                            k.name
                        ));
                    }
                };
                if matches!(v, Value::Array(_) | Value::Object(_)) {
                    return Err(format!("key field {:?} must be a scalar, got {}", k.name, kind_name(v)));
                }
                key.push((k.name.clone(), v.clone()));
            }
            Ok(PathElement::key(key))
        }
        ListKind::Set => match item {
            Value::Array(_) | Value::Object(_) => {
                Err(format!("associative list without keys has an element that's a {} type", kind_name(item)))
            }
            v => Ok(PathElement::Value(v.clone())),
        },
        ListKind::Atomic => Ok(PathElement::Index(index)),
    }
}

/// Whether duplicate items of a keyed list or set are an error (a value being applied)
/// or tolerated (a stored object: the duplicate is owned whole, as upstream's
/// AllowDuplicates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Duplicates {
    /// An error.
    Refuse,
    /// Owned as a whole.
    Tolerate,
}

/// The paths `v` sets (upstream `ToFieldSet`): every scalar, every list item and map key,
/// struct fields that are null or empty; atomic lists and maps as one path. A value that
/// does not fit the schema (a field not declared, a list item missing its key, a duplicate
/// item when `duplicates` refuses them) is an error naming each path.
pub fn to_field_set(schema: &Schema, ty: TypeId, v: &Value, duplicates: Duplicates) -> Result<Set, ValidationErrors> {
    let mut set = Set::new();
    let mut errs = ValidationErrors::default();
    field_set_walk(schema, ty, v, &mut Vec::new(), &mut set, &mut errs, duplicates);
    errs.into_result(set)
}

fn field_set_walk(
    schema: &Schema,
    ty: TypeId,
    v: &Value,
    path: &mut Vec<PathElement>,
    set: &mut Set,
    errs: &mut ValidationErrors,
    duplicates: Duplicates,
) {
    if path.len() > MAX_DEPTH {
        errs.push(path, format!("nested deeper than {MAX_DEPTH} levels"));
        return;
    }
    match shape(schema, ty, v) {
        Err(e) => errs.push(path, e),
        Ok(Shape::Leaf) => set.insert_elements(path),
        Ok(Shape::List(element, kind)) => {
            let Value::Array(items) = v else { return };
            let mut seen = std::collections::BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                let pe = match item_element(kind, i, item) {
                    Ok(pe) => pe,
                    Err(e) => {
                        path.push(PathElement::Index(i));
                        errs.push(path, e);
                        path.pop();
                        continue;
                    }
                };
                path.push(pe.clone());
                if !seen.insert(pe) {
                    if duplicates == Duplicates::Refuse {
                        errs.push(path, "duplicate entries for key");
                    }
                } else {
                    field_set_walk(schema, element, item, path, set, errs, duplicates);
                }
                set.insert_elements(path);
                path.pop();
            }
        }
        Ok(Shape::Map(map)) => {
            let Value::Object(fields) = v else { return };
            for (k, val) in fields {
                path.push(PathElement::Field(k.clone()));
                let (ty, named) = match map {
                    None => (Some(UNTYPED), false),
                    Some(m) => match m.field(k) {
                        Some(t) => (Some(t), true),
                        None => (m.element, false),
                    },
                };
                match ty {
                    None => errs.push(path, "field not declared in schema"),
                    Some(t) => {
                        field_set_walk(schema, t, val, path, set, errs, duplicates);
                        let empty = match val {
                            Value::Null => true,
                            Value::Object(o) => o.is_empty(),
                            _ => false,
                        };
                        if empty || !named {
                            set.insert_elements(path);
                        }
                    }
                }
                path.pop();
            }
        }
    }
}

/// What a zip does at leaves and after containers.
trait Rule {
    /// Whether the walk builds the merged value.
    const BUILD: bool;
    fn leaf(&mut self, path: &[PathElement], lhs: Option<&Value>, rhs: Option<&Value>);
    fn post(&mut self, path: &[PathElement], lhs: Option<&Value>, rhs: Option<&Value>);
}

struct MergeRule;

impl Rule for MergeRule {
    const BUILD: bool = true;
    fn leaf(&mut self, _: &[PathElement], _: Option<&Value>, _: Option<&Value>) {}
    fn post(&mut self, _: &[PathElement], _: Option<&Value>, _: Option<&Value>) {}
}

impl Rule for Comparison {
    const BUILD: bool = false;
    fn leaf(&mut self, path: &[PathElement], lhs: Option<&Value>, rhs: Option<&Value>) {
        match (lhs, rhs) {
            (None, _) => self.added.insert_elements(path),
            (_, None) => self.removed.insert_elements(path),
            (Some(l), Some(r)) if !value::equals(l, r) => self.modified.insert_elements(path),
            _ => {}
        }
    }
    fn post(&mut self, path: &[PathElement], lhs: Option<&Value>, rhs: Option<&Value>) {
        match (lhs, rhs) {
            (None, _) => self.added.insert_elements(path),
            (_, None) => self.removed.insert_elements(path),
            _ => {}
        }
    }
}

struct Zip<'a, R> {
    schema: &'a Schema,
    rule: R,
    errs: ValidationErrors,
    duplicates: Duplicates,
}

fn is_empty_container(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.is_empty(),
        Some(_) => false,
    }
}

impl<R: Rule> Zip<'_, R> {
    fn leaf(&mut self, path: &[PathElement], lhs: Option<&Value>, rhs: Option<&Value>) -> Option<Value> {
        self.rule.leaf(path, lhs, rhs);
        if R::BUILD { rhs.or(lhs).cloned() } else { None }
    }

    fn zip(
        &mut self,
        ty: TypeId,
        path: &mut Vec<PathElement>,
        lhs: Option<&Value>,
        rhs: Option<&Value>,
    ) -> Option<Value> {
        if path.len() > MAX_DEPTH {
            self.errs.push(path, format!("nested deeper than {MAX_DEPTH} levels"));
            return None;
        }
        let lshape = lhs.map(|v| shape(self.schema, ty, v));
        let rshape = rhs.map(|v| shape(self.schema, ty, v));
        for (side, s) in [("lhs", &lshape), ("rhs", &rshape)] {
            if let Some(Err(e)) = s {
                self.errs.push(path, format!("{side}: {e}"));
                return None;
            }
        }
        let shape = match (rshape, lshape) {
            (Some(Ok(s)), _) | (None, Some(Ok(s))) => s,
            _ => return None,
        };
        // Untyped values of different kinds on each side: replaced whole.
        let same_kind = match (lhs, rhs) {
            (Some(l), Some(r)) => l.is_object() == r.is_object() || l.is_null() || r.is_null(),
            _ => true,
        };
        let both_empty = is_empty_container(lhs) && is_empty_container(rhs);
        let out = match shape {
            Shape::Leaf => return self.leaf(path, lhs, rhs),
            _ if both_empty || !same_kind => return self.leaf(path, lhs, rhs),
            Shape::List(element, kind) => self.zip_list(element, kind, path, lhs, rhs),
            Shape::Map(map) => self.zip_map(map, path, lhs, rhs),
        };
        self.rule.post(path, lhs, rhs);
        out
    }

    fn zip_map(
        &mut self,
        map: Option<&MapType>,
        path: &mut Vec<PathElement>,
        lhs: Option<&Value>,
        rhs: Option<&Value>,
    ) -> Option<Value> {
        let l = lhs.and_then(Value::as_object);
        let r = rhs.and_then(Value::as_object);
        let mut out = Map::new();
        let type_of = |k: &str| match map {
            None => UNTYPED,
            Some(m) => m.key_type(k).unwrap_or(UNTYPED),
        };
        for (k, lv) in l.into_iter().flatten() {
            path.push(PathElement::Field(k.clone()));
            let merged = self.zip(type_of(k), path, Some(lv), r.and_then(|r| r.get(k)));
            path.pop();
            if let Some(v) = merged {
                out.insert(k.clone(), v);
            }
        }
        for (k, rv) in r.into_iter().flatten() {
            if l.is_some_and(|l| l.contains_key(k)) {
                continue;
            }
            path.push(PathElement::Field(k.clone()));
            let merged = self.zip(type_of(k), path, None, Some(rv));
            path.pop();
            if let Some(v) = merged {
                out.insert(k.clone(), v);
            }
        }
        (R::BUILD && !out.is_empty()).then_some(Value::Object(out))
    }

    /// The items of one side in order, by path element; repeated elements after the
    /// first are ignored (upstream `indexListPathElements`), or an error on the side being
    /// applied when duplicates are refused.
    fn index<'v>(
        &mut self,
        kind: &ListKind,
        path: &mut Vec<PathElement>,
        list: Option<&'v Value>,
        refuse_duplicates: bool,
    ) -> (Vec<PathElement>, BTreeMap<PathElement, &'v Value>) {
        let mut order = Vec::new();
        let mut items = BTreeMap::new();
        let Some(Value::Array(list)) = list else { return (order, items) };
        for (i, item) in list.iter().enumerate() {
            match item_element(kind, i, item) {
                Ok(pe) => {
                    if items.contains_key(&pe) {
                        if refuse_duplicates {
                            path.push(pe);
                            self.errs.push(path, "duplicate entries for key");
                            path.pop();
                        }
                        continue;
                    }
                    items.insert(pe.clone(), item);
                    order.push(pe);
                }
                Err(e) => {
                    path.push(PathElement::Index(i));
                    self.errs.push(path, e);
                    path.pop();
                }
            }
        }
        (order, items)
    }

    /// Items in upstream's order (`compareWalker.visitListItems`): the right side's order
    /// for the items it has, the left side's items it lacks kept where they were.
    fn zip_list(
        &mut self,
        element: TypeId,
        kind: &ListKind,
        path: &mut Vec<PathElement>,
        lhs: Option<&Value>,
        rhs: Option<&Value>,
    ) -> Option<Value> {
        let refuse = self.duplicates == Duplicates::Refuse;
        let (rorder, ritems) = self.index(kind, path, rhs, refuse);
        let (lorder, litems) = self.index(kind, path, lhs, false);
        let mut shared = rorder.iter().filter(|pe| litems.contains_key(*pe));
        let mut next_shared = shared.next();
        let mut out = Vec::new();
        let (mut li, mut ri) = (0, 0);
        let mut item =
            |this: &mut Self, pe: &PathElement, l: Option<&Value>, r: Option<&Value>, out: &mut Vec<Value>| {
                path.push(pe.clone());
                if let Some(v) = this.zip(element, path, l, r) {
                    out.push(v);
                }
                path.pop();
            };
        while li < lorder.len() || ri < rorder.len() {
            if li < lorder.len() && ri < rorder.len() {
                let pe = &lorder[li];
                if *pe == rorder[ri] {
                    item(self, pe, litems.get(pe).copied(), ritems.get(pe).copied(), &mut out);
                    li += 1;
                    ri += 1;
                    next_shared = shared.next();
                    continue;
                }
                if ritems.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                    li += 1;
                    continue;
                }
            }
            if li < lorder.len() {
                let pe = &lorder[li];
                if !ritems.contains_key(pe) {
                    item(self, pe, litems.get(pe).copied(), None, &mut out);
                    li += 1;
                    continue;
                }
            }
            if ri < rorder.len() {
                let pe = &rorder[ri];
                item(self, pe, litems.get(pe).copied(), ritems.get(pe).copied(), &mut out);
                ri += 1;
                if next_shared == Some(pe) {
                    next_shared = shared.next();
                }
            }
        }
        (R::BUILD && !out.is_empty()).then_some(Value::Array(out))
    }
}

/// `lhs` with `rhs` merged in (upstream `Merge`): nothing is removed; where both set a
/// leaf, `rhs` wins; list items and map keys are merged one by one unless atomic.
/// Duplicate items in `rhs` are an error; in `lhs` only the first counts.
pub fn merge(schema: &Schema, ty: TypeId, lhs: &Value, rhs: &Value) -> Result<Value, ValidationErrors> {
    let mut zip = Zip { schema, rule: MergeRule, errs: ValidationErrors::default(), duplicates: Duplicates::Refuse };
    let out = zip.zip(ty, &mut Vec::new(), Some(lhs), Some(rhs)).unwrap_or_else(|| Value::Object(Map::new()));
    zip.errs.into_result(out)
}

/// What changed from `lhs` to `rhs` (upstream `Compare`).
pub fn compare(schema: &Schema, ty: TypeId, lhs: &Value, rhs: &Value) -> Result<Comparison, ValidationErrors> {
    let mut zip = Zip {
        schema,
        rule: Comparison::default(),
        errs: ValidationErrors::default(),
        duplicates: Duplicates::Tolerate,
    };
    zip.zip(ty, &mut Vec::new(), Some(lhs), Some(rhs));
    zip.errs.into_result(zip.rule)
}

/// `v` without the paths of `remove` (upstream `RemoveItems`): a member removes its key
/// or item and everything below it. A map or list left empty by the removal is dropped.
pub fn remove_items(schema: &Schema, ty: TypeId, v: &Value, remove: &Set) -> Value {
    remove_walk(schema, ty, v, remove, 0).unwrap_or_else(|| Value::Object(Map::new()))
}

fn remove_walk(schema: &Schema, ty: TypeId, v: &Value, remove: &Set, depth: usize) -> Option<Value> {
    if depth > MAX_DEPTH {
        return Some(v.clone());
    }
    match shape(schema, ty, v) {
        Ok(Shape::List(element, kind)) => {
            let Value::Array(items) = v else { return Some(v.clone()) };
            if items.is_empty() {
                return Some(v.clone());
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let Ok(pe) = item_element(kind, i, item) else {
                    out.push(item.clone());
                    continue;
                };
                if remove.has_member(&pe) {
                    continue;
                }
                match remove.with_prefix(&pe) {
                    Some(sub) => out.extend(remove_walk(schema, element, item, sub, depth + 1)),
                    None => out.push(item.clone()),
                }
            }
            (!out.is_empty()).then_some(Value::Array(out))
        }
        Ok(Shape::Map(map)) => {
            let Value::Object(fields) = v else { return Some(v.clone()) };
            if fields.is_empty() {
                return Some(v.clone());
            }
            let mut out = Map::new();
            for (k, val) in fields {
                let pe = PathElement::Field(k.clone());
                if remove.has_member(&pe) {
                    continue;
                }
                match remove.with_prefix(&pe) {
                    Some(sub) => {
                        let t = map.and_then(|m| m.key_type(k)).unwrap_or(UNTYPED);
                        if let Some(kept) = remove_walk(schema, t, val, sub, depth + 1) {
                            out.insert(k.clone(), kept);
                        }
                    }
                    None => {
                        out.insert(k.clone(), val.clone());
                    }
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        _ => Some(v.clone()),
    }
}
