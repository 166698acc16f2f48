//! Label and field selectors as the API server evaluates them
//! (k8s.io/apimachinery `labels.Parse` and `fields.ParseSelector`).

use podpass_api::field::Field;
use std::collections::BTreeSet;

use serde_json::Value;
use thiserror::Error;

/// A selector string could not be parsed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("unable to parse requirement: {0}")]
pub struct SelectorError(pub String);

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelOp {
    Exists,
    NotExists,
    Equals(String),
    NotEquals(String),
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
}

/// A label selector: every requirement must hold (`a=b,c!=d,e in (f,g),!h`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<(String, LabelOp)>,
}

fn valid_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
    });
    name_ok && prefix_ok
}

fn valid_label_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

impl LabelSelector {
    /// Parses a label selector; the empty string selects everything.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self { requirements });
        }
        let err = |r: &str, why: &str| SelectorError(format!("{r:?}: {why}"));
        for raw in split_top_level(s) {
            let r = raw.trim();
            if r.is_empty() {
                return Err(err(raw, "empty requirement"));
            }
            let (key, op) = if let Some(k) = r.strip_prefix('!') {
                (k.trim(), LabelOp::NotExists)
            } else if let Some((k, v)) = r.split_once("!=") {
                (k.trim(), LabelOp::NotEquals(v.trim().to_owned()))
            } else if let Some((k, v)) = r.split_once("==") {
                (k.trim(), LabelOp::Equals(v.trim().to_owned()))
            } else if let Some((k, v)) = r.split_once('=') {
                (k.trim(), LabelOp::Equals(v.trim().to_owned()))
            } else if let Some((k, rest)) = r.split_once(" notin ").or_else(|| r.split_once(" in ")) {
                let negate = r.contains(" notin ");
                let list = rest
                    .trim()
                    .strip_prefix('(')
                    .and_then(|l| l.strip_suffix(')'))
                    .ok_or_else(|| err(r, "set must be in parentheses"))?;
                let values: BTreeSet<String> = list.split(',').map(|v| v.trim().to_owned()).collect();
                (k.trim(), if negate { LabelOp::NotIn(values) } else { LabelOp::In(values) })
            } else {
                (r, LabelOp::Exists)
            };
            if !valid_label_key(key) {
                return Err(err(r, "invalid label key"));
            }
            let values: Vec<&String> = match &op {
                LabelOp::Equals(v) | LabelOp::NotEquals(v) => vec![v],
                LabelOp::In(vs) | LabelOp::NotIn(vs) => vs.iter().collect(),
                _ => vec![],
            };
            if let Some(bad) = values.iter().find(|v| !valid_label_value(v)) {
                return Err(err(r, &format!("invalid label value {bad:?}")));
            }
            requirements.push((key.to_owned(), op));
        }
        Ok(Self { requirements })
    }

    /// True when it selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object (its `metadata.labels`) is selected.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.field("/metadata/labels");
        self.requirements.iter().all(|(key, op)| {
            let value = labels.and_then(|l| l.get(key)).and_then(Value::as_str);
            match op {
                LabelOp::Exists => value.is_some(),
                LabelOp::NotExists => value.is_none(),
                LabelOp::Equals(v) => value == Some(v.as_str()),
                LabelOp::NotEquals(v) => value != Some(v.as_str()),
                LabelOp::In(vs) => value.is_some_and(|x| vs.contains(x)),
                LabelOp::NotIn(vs) => value.is_none_or(|x| !vs.contains(x)),
            }
        })
    }
}

/// A field selector: `path=value`, `path==value`, `path!=value`, comma-separated, on dotted
/// field paths such as `metadata.name` or `spec.nodeName`. Which paths a resource supports
/// is the REST layer's decision; here a missing field reads as the empty string, as
/// upstream's field sets do.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    requirements: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses a field selector; the empty string selects everything.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self { requirements });
        }
        for raw in s.split(',') {
            let r = raw.trim();
            let (path, equal, value) = if let Some((k, v)) = r.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = r.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = r.split_once('=') {
                (k, true, v)
            } else {
                return Err(SelectorError(format!("{r:?}: invalid field selector, expected path=value")));
            };
            if path.trim().is_empty() {
                return Err(SelectorError(format!("{r:?}: empty field path")));
            }
            requirements.push((path.trim().to_owned(), equal, value.trim().to_owned()));
        }
        Ok(Self { requirements })
    }

    /// The field paths this selector reads, for the REST layer to validate.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.requirements.iter().map(|(p, _, _)| p.as_str())
    }

    /// The value required for `path` by an equality requirement, if any (lets the store
    /// answer `spec.nodeName=<node>` without reading other namespaces' objects in future).
    pub fn required_value(&self, path: &str) -> Option<&str> {
        self.requirements.iter().find(|(p, eq, _)| p == path && *eq).map(|(_, _, v)| v.as_str())
    }

    /// Reads `path` from the object at `actual` instead (a selectable field whose name is
    /// not its path, e.g. an Event's `source` is `source.component`).
    pub fn alias(mut self, path: &str, actual: &str) -> Self {
        for r in &mut self.requirements {
            if r.0 == path {
                actual.clone_into(&mut r.0);
            }
        }
        self
    }

    /// True when it selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object is selected.
    pub fn matches(&self, object: &Value) -> bool {
        self.requirements.iter().all(|(path, equal, value)| {
            let mut cur = Some(object);
            for part in path.split('.') {
                cur = cur.and_then(|c| c.get(part));
            }
            let actual = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => String::new(),
            };
            (actual == *value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({"metadata": {"name": "web", "namespace": "ns", "labels": {"app": "web", "tier": "front"}},
               "spec": {"nodeName": "n1"}})
    }

    #[test]
    fn label_selector_semantics() {
        let p = pod();
        for (sel, want) in [
            ("", true),
            ("app=web", true),
            ("app==web,tier=front", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("tier in (back, front)", true),
            ("tier notin (front)", false),
            ("missing notin (front)", true),
            ("app=web,tier in (back)", false),
        ] {
            assert_eq!(LabelSelector::parse(sel).unwrap().matches(&p), want, "{sel}");
        }
    }

    #[test]
    fn label_selector_refuses_bad_syntax() {
        for bad in ["a=b,", "a in b", "-a=b", "a=b c", "a=-x"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_selector_semantics() {
        let p = pod();
        assert!(FieldSelector::parse("spec.nodeName=n1").unwrap().matches(&p));
        assert!(!FieldSelector::parse("spec.nodeName=n2").unwrap().matches(&p));
        assert!(FieldSelector::parse("spec.nodeName!=n2,metadata.name==web").unwrap().matches(&p));
        // unset fields read as empty: unscheduled pods match spec.nodeName=
        assert!(FieldSelector::parse("spec.nodeName=").unwrap().matches(&json!({"spec": {}})));
        assert!(FieldSelector::parse("spec.nodeName").is_err());
        let s = FieldSelector::parse("spec.nodeName=n1").unwrap();
        assert_eq!(s.required_value("spec.nodeName"), Some("n1"));
        assert_eq!(s.paths().collect::<Vec<_>>(), ["spec.nodeName"]);
        // an Event's selectable `source` reads source.component
        let s =
            FieldSelector::parse("source=kubelet,involvedObject.name=web").unwrap().alias("source", "source.component");
        assert!(s.matches(&json!({"source": {"component": "kubelet"}, "involvedObject": {"name": "web"}})));
        assert!(!s.matches(&json!({"source": {"component": "other"}, "involvedObject": {"name": "web"}})));
    }
}
