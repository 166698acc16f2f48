//! Field paths (upstream `fieldpath.PathElement` and `fieldpath.Path`): a field name, a
//! list item by its key fields, a set item by its value, or (in sets read from elsewhere)
//! a list index.

use std::cmp::Ordering;
use std::fmt;

use serde_json::Value;

use crate::value;

/// One step of a path.
#[derive(Debug, Clone)]
pub enum PathElement {
    /// A field of a struct or a key of a map: `.name`, `f:name` in `fieldsV1`.
    Field(String),
    /// An item of an associative list by its key fields, sorted by name:
    /// `[name="app"]`, `k:{"name":"app"}`.
    Key(Vec<(String, Value)>),
    /// An item of a set by its value: `[="a"]`, `v:"a"`.
    Value(Value),
    /// A list item by position: `[0]`, `i:0`.
    Index(usize),
}

impl PathElement {
    /// A field element.
    pub fn field(name: impl Into<String>) -> Self {
        Self::Field(name.into())
    }

    /// A key element from its fields, in any order (stored sorted by name).
    pub fn key<I, S>(fields: I) -> Self
    where
        I: IntoIterator<Item = (S, Value)>,
        S: Into<String>,
    {
        let mut fields: Vec<(String, Value)> = fields.into_iter().map(|(k, v)| (k.into(), v)).collect();
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        Self::Key(fields)
    }

    fn rank(&self) -> u8 {
        match self {
            Self::Field(_) => 0,
            Self::Key(_) => 1,
            Self::Value(_) => 2,
            Self::Index(_) => 3,
        }
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Upstream's order (`PathElement.Compare`): fields, then keys, then values, then indexes.
impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Self::Field(a), Self::Field(b)) => a.cmp(b),
            (Self::Key(a), Self::Key(b)) => {
                for ((ka, va), (kb, vb)) in a.iter().zip(b) {
                    let c = ka.cmp(kb).then_with(|| value::compare(va, vb));
                    if c != Ordering::Equal {
                        return c;
                    }
                }
                a.len().cmp(&b.len())
            }
            (Self::Value(a), Self::Value(b)) => value::compare(a, b),
            (Self::Index(a), Self::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

/// As upstream prints a path element: `.name`, `[name="app",port=80]`, `[="a"]`, `[0]`.
impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Field(name) => write!(f, ".{name}"),
            Self::Key(fields) => {
                f.write_str("[")?;
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{k}={}", value::to_display(v))?;
                }
                f.write_str("]")
            }
            Self::Value(v) => write!(f, "[={}]", value::to_display(v)),
            Self::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path from the object's root.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Path(pub Vec<PathElement>);

impl Path {
    /// A path of field names: `Path::fields(["metadata", "labels"])`.
    pub fn fields<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        Self(names.into_iter().map(|n| PathElement::Field(n.into())).collect())
    }

    /// This path with `pe` appended.
    pub fn child(&self, pe: PathElement) -> Self {
        let mut elements = self.0.clone();
        elements.push(pe);
        Self(elements)
    }
}

/// As upstream prints a path: `.spec.containers[name="app"].image`.
impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|pe| write!(f, "{pe}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_print_as_upstreams() {
        let p = Path(vec![
            PathElement::field("spec"),
            PathElement::field("containers"),
            PathElement::key([("name", json!("app"))]),
            PathElement::field("ports"),
            PathElement::key([("protocol", json!("TCP")), ("containerPort", json!(80))]),
        ]);
        assert_eq!(p.to_string(), r#".spec.containers[name="app"].ports[containerPort=80,protocol="TCP"]"#);
        assert_eq!(PathElement::Value(json!("a")).to_string(), r#"[="a"]"#);
        assert_eq!(PathElement::Index(3).to_string(), "[3]");
    }

    #[test]
    fn elements_order_fields_keys_values_indexes() {
        let mut v = [
            PathElement::Index(0),
            PathElement::Value(json!("a")),
            PathElement::key([("name", json!("a"))]),
            PathElement::field("z"),
            PathElement::field("a"),
        ];
        v.sort();
        let shown: Vec<String> = v.iter().map(ToString::to_string).collect();
        assert_eq!(shown, [".a", ".z", r#"[name="a"]"#, r#"[="a"]"#, "[0]"]);
    }
}
