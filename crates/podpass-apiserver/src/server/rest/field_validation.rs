//! Server-side field validation (`fieldValidation=Ignore|Warn|Strict`, apiserver
//! `FieldValidationDirective`): unknown fields — those the kind's type does not have,
//! found by decoding into k8s-openapi's type — and duplicate fields of a JSON or YAML body.
//! `Strict` refuses them (400, `strict decoding error: unknown field "spec.foo"`); `Warn`
//! (the default, as upstream since 1.27) answers a `Warning` header per field; both `Warn`
//! and `Ignore` drop unknown fields, as a typed upstream server would not keep them.

use serde::de::DeserializeOwned;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::server::status::StatusError;

/// Fields reported per request, at most (the rest are summed up in one line).
const MAX_REPORTED: usize = 100;

/// `fieldValidation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Drop unknown fields silently.
    Ignore,
    /// Drop them with a warning each (upstream's default).
    #[default]
    Warn,
    /// Refuse the request.
    Strict,
}

impl FieldValidation {
    /// From the query parameter; an unknown value is a 400 naming the accepted ones.
    pub fn from_query(value: Option<&str>) -> Result<Self, StatusError> {
        match value {
            None | Some("") | Some("Warn") => Ok(Self::Warn),
            Some("Ignore") => Ok(Self::Ignore),
            Some("Strict") => Ok(Self::Strict),
            Some(other) => Err(StatusError::bad_request(format!(
                "fieldValidation: Invalid value: {other:?}: fieldValidation must be one of \"Ignore\", \"Warn\", or \"Strict\""
            ))),
        }
    }
}

/// A JSON path as upstream prints it: `spec.containers[0].foo`.
fn push_key(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

fn ignored_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        Path::Map { parent, key } => push_key(&ignored_path(parent), key),
        Path::Some { parent } | Path::NewtypeStruct { parent } | Path::NewtypeVariant { parent } => {
            ignored_path(parent)
        }
    }
}

/// The unknown fields of `object` as a `T`, or the decoding error.
pub(crate) fn unknown_as<T: DeserializeOwned>(object: &Value) -> Result<Vec<String>, serde_json::Error> {
    let mut unknown = Vec::new();
    let _: T = serde_ignored::deserialize(object, |p| unknown.push(ignored_path(&p)))?;
    Ok(unknown)
}

/// The unknown fields of `object` of `kind` in `group`; `None` for a kind without a type.
fn unknown_fields(group: &str, kind: &str, object: &Value) -> Option<Result<Vec<String>, serde_json::Error>> {
    super::kinds::type_of(group, kind).map(|typed| typed.unknown_fields(object))
}

/// Keys of one object compared one by one before they are hashed.
const SMALL_OBJECT: usize = 16;

/// Where a [`Duplicates`] walk is: its path is only written out for a duplicate found, so
/// a body without one costs no string per key.
enum Segment<'p> {
    Root,
    Key(&'p Segment<'p>, &'p str),
    Index(&'p Segment<'p>, usize),
}

impl Segment<'_> {
    /// The path as upstream prints it: `spec.containers[0].foo`.
    fn render(&self) -> String {
        match self {
            Segment::Root => String::new(),
            Segment::Key(parent, key) => push_key(&parent.render(), key),
            Segment::Index(parent, index) => format!("{}[{index}]", parent.render()),
        }
    }
}

/// Walks a document and records the path of every key given twice in one object.
struct Duplicates<'a, 'p> {
    at: &'p Segment<'p>,
    found: &'a mut Vec<String>,
}

impl<'de> de::DeserializeSeed<'de> for Duplicates<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// A map key, borrowed from the body when it has no escapes.
struct Key;

impl<'de> de::DeserializeSeed<'de> for Key {
    type Value = std::borrow::Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = std::borrow::Cow<'de, str>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a key")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Owned(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Owned(v))
    }
    // YAML keys may be numbers or booleans: a duplicate of those is one too.
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Owned(v.to_string()))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Owned(v.to_string()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Owned(v.to_string()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Owned(v.to_string()))
    }
}

impl<'de> Visitor<'de> for Duplicates<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        loop {
            let at = Segment::Index(self.at, index);
            if seq.next_element_seed(Duplicates { at: &at, found: self.found })?.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Most objects are small: a list searched in order beats hashing each key; past
        // [`SMALL_OBJECT`] keys (a config map's data, say) they are hashed.
        let mut few: Vec<std::borrow::Cow<'de, str>> = Vec::new();
        let mut many: std::collections::HashSet<std::borrow::Cow<'de, str>> = std::collections::HashSet::new();
        while let Some(key) = map.next_key_seed(Key)? {
            let at = Segment::Key(self.at, &key);
            if few.contains(&key) || many.contains(&key) {
                self.found.push(at.render());
            }
            map.next_value_seed(Duplicates { at: &at, found: self.found })?;
            if few.len() < SMALL_OBJECT {
                few.push(key);
            } else {
                many.insert(key);
            }
        }
        Ok(())
    }
}

/// The paths of keys given twice in one document read by `d` (those found before any
/// syntax error; the decoder proper reports that error).
fn duplicates_in<'de, D: Deserializer<'de>>(d: D) -> Vec<String> {
    let mut found = Vec::new();
    let _ = de::DeserializeSeed::deserialize(Duplicates { at: &Segment::Root, found: &mut found }, d);
    found
}

/// The paths of keys given twice in a JSON body (nothing for a body that is not JSON).
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    duplicates_in(&mut serde_json::Deserializer::from_slice(body))
}

/// The paths of keys given twice in a YAML body — an apply configuration, which upstream
/// decodes leniently (the last one wins) and then checks with `yaml.UnmarshalStrict`.
pub fn duplicate_yaml_fields(body: &[u8]) -> Vec<String> {
    duplicates_in(serde_yaml_ng::Deserializer::from_slice(body))
}

/// Removes the field at `path` (as [`unknown_fields`] prints it) from `object`.
fn remove_path(object: &mut Value, path: &str) {
    let mut segments: Vec<(&str, Option<usize>)> = Vec::new();
    for part in path.split('.') {
        let mut rest = part;
        let name_end = rest.find('[').unwrap_or(rest.len());
        segments.push((&rest[..name_end], None));
        rest = &rest[name_end..];
        while let Some(close) = rest.find(']') {
            let index = rest[1..close].parse().ok();
            segments.push(("", index));
            rest = &rest[close + 1..];
        }
    }
    let Some((last, parents)) = segments.split_last() else { return };
    let mut current = object;
    for (name, index) in parents {
        let next = match (index, current) {
            (Some(i), Value::Array(items)) => items.get_mut(*i),
            (None, Value::Object(map)) => map.get_mut(*name),
            _ => None,
        };
        match next {
            Some(n) => current = n,
            None => return,
        }
    }
    if let (None, Value::Object(map)) = (last.1, current) {
        map.remove(last.0);
    }
}

/// Nesting depth of a JSON text (arrays and objects; what is inside strings does not
/// count): the depth limit of a body decoded straight into its type, with no tree to
/// measure. Bytes past a syntax error count as they come; the decoder reports the error.
pub fn json_depth(body: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Decodes a JSON `body` straight into `T`, the type of `kind` in `group`/`version`, under
/// `mode`: what [`validate`] finds on a decoded tree (unknown fields, as the type decodes;
/// duplicate fields; nesting past [`crate::store::MAX_OBJECT_DEPTH`]) with no tree built.
/// Unknown fields are dropped by the decoding itself. Returns the value and the warnings.
pub fn decode_json<T: DeserializeOwned>(
    mode: FieldValidation,
    group: &str,
    version: &str,
    kind: &str,
    body: &[u8],
) -> Result<(T, Vec<String>), StatusError> {
    let depth = json_depth(body);
    if depth > crate::store::MAX_OBJECT_DEPTH {
        return Err(StatusError::bad_request(format!(
            "error decoding request body: object nesting depth {depth} exceeds the limit of {}",
            crate::store::MAX_OBJECT_DEPTH
        )));
    }
    let gv = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    let mut unknown = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let decoded = serde_ignored::deserialize(&mut de, |p| unknown.push(ignored_path(&p))).and_then(|v| {
        de.end()?;
        Ok(v)
    });
    let value = match decoded {
        Ok(v) => v,
        // Not JSON at all is the decoder's 400, as for a tree; JSON of the wrong shape is
        // the kind's.
        Err(e) if e.is_syntax() || e.is_eof() => {
            return Err(StatusError::bad_request(format!("error decoding request body: {e}")));
        }
        Err(e) => return Err(cannot_handle(kind, &gv, e.to_string())),
    };
    let duplicates = if mode == FieldValidation::Ignore { Vec::new() } else { duplicate_fields(body) };
    let warnings = report(mode, kind, &gv, &unknown, &duplicates)?;
    Ok((value, warnings))
}

fn cannot_handle(kind: &str, gv: &str, why: String) -> StatusError {
    StatusError::bad_request(format!("{kind} in version {gv:?} cannot be handled as a {kind}: {why}"))
}

/// The unknown and duplicate fields under `mode`: a 400 (Strict), the warnings (Warn) or
/// nothing (Ignore); at most [`MAX_REPORTED`] are named.
fn report(
    mode: FieldValidation,
    kind: &str,
    gv: &str,
    unknown: &[String],
    duplicates: &[String],
) -> Result<Vec<String>, StatusError> {
    let mut problems: Vec<String> = unknown
        .iter()
        .map(|p| format!("unknown field {p:?}"))
        .chain(duplicates.iter().map(|p| format!("duplicate field {p:?}")))
        .collect();
    if problems.len() > MAX_REPORTED {
        let more = problems.len() - MAX_REPORTED;
        problems.truncate(MAX_REPORTED);
        problems.push(format!("and {more} more"));
    }
    if mode == FieldValidation::Strict && !problems.is_empty() {
        return Err(cannot_handle(kind, gv, format!("strict decoding error: {}", problems.join(", "))));
    }
    Ok(if mode == FieldValidation::Warn { problems } else { Vec::new() })
}

/// Validates `object` (decoded from `body`) as `kind` of `group`/`version` under `mode`:
/// the warnings to send, or a 400. Unknown fields are removed from `object` unless refused.
pub fn validate(
    mode: FieldValidation,
    group: &str,
    version: &str,
    kind: &str,
    body: Option<&[u8]>,
    object: &mut Value,
) -> Result<Vec<String>, StatusError> {
    let gv = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    let unknown = match unknown_fields(group, kind, object) {
        Some(Ok(u)) => u,
        Some(Err(e)) => return Err(cannot_handle(kind, &gv, e.to_string())),
        None => Vec::new(),
    };
    // Ignore never reports them: the body is not read a second time for nothing.
    let duplicates = body.filter(|_| mode != FieldValidation::Ignore).map(duplicate_fields).unwrap_or_default();
    let warnings = report(mode, kind, &gv, &unknown, &duplicates)?;
    for path in &unknown {
        remove_path(object, path);
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn duplicate_keys_of_a_yaml_body_are_found_at_every_depth() {
        let body = b"metadata:\n  name: a\n  name: b\ndata:\n  k: 1\nlist:\n- x: 1\n  x: 2\ndata: {}\n";
        assert_eq!(duplicate_yaml_fields(body), ["metadata.name", "list[0].x", "data"]);
        assert!(duplicate_yaml_fields(b"a: 1\nb: {c: 2}\n").is_empty());
        // broken YAML: what was read before the error, no panic
        assert_eq!(duplicate_yaml_fields(b"a: 1\na: 2\nb: [\n"), ["a"]);
    }

    #[test]
    fn duplicate_keys_of_a_json_body_are_found_in_small_and_large_objects() {
        let mut data: Vec<String> = (0..40).map(|i| format!("\"k{i}\":\"v\"")).collect();
        data.push("\"k3\":\"again\"".into()); // among the first 16, compared in order
        data.push("\"k30\":\"again\"".into()); // past them, hashed
        data.push("\"k\\u0033\":\"escaped\"".into()); // "k3" written with an escape
        let body = format!(r#"{{"data":{{{}}},"items":[{{"a":1}},{{"a":1,"a":2}}]}}"#, data.join(","));
        assert_eq!(duplicate_fields(body.as_bytes()), ["data.k3", "data.k30", "data.k3", "items[1].a"]);
        assert!(
            duplicate_fields(br#"{"a":{"a":{"a":1}},"b":[{"a":1},{"a":1}]}"#).is_empty(),
            "same key, other objects"
        );
        // broken JSON: what was read before the error
        assert_eq!(duplicate_fields(br#"{"a":1,"a":2,"b":"#), ["a"]);
    }

    #[test]
    fn yaml_alias_bombs_are_refused_by_the_decoder() {
        let mut body = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            body.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        assert!(serde_yaml_ng::from_slice::<Value>(body.as_bytes()).is_err());
        let _ = duplicate_yaml_fields(body.as_bytes());
    }

    #[test]
    fn unknown_and_duplicate_fields_are_named_by_path() {
        let body = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","name":"q"},
            "spec":{"containers":[{"name":"c","image":"i","imagePolicy":"x"}],"bogus":1},"extra":true}"#;
        let mut object: Value = serde_json::from_slice(body).unwrap();
        let err = validate(FieldValidation::Strict, "", "v1", "Pod", Some(body), &mut object).unwrap_err();
        assert_eq!(err.code, axum::http::StatusCode::BAD_REQUEST);
        assert_eq!(
            err.message,
            "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: \
             unknown field \"extra\", unknown field \"spec.bogus\", unknown field \"spec.containers[0].imagePolicy\", \
             duplicate field \"metadata.name\""
        );
        let warnings = validate(FieldValidation::Warn, "", "v1", "Pod", Some(body), &mut object).unwrap();
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        assert!(object.get("extra").is_none() && object["spec"].get("bogus").is_none());
        assert!(object["spec"]["containers"][0].get("imagePolicy").is_none());
        assert_eq!(object["spec"]["containers"][0]["image"], "i", "known fields stay");
        let mut again = serde_json::from_slice(body).unwrap();
        assert!(validate(FieldValidation::Ignore, "", "v1", "Pod", Some(body), &mut again).unwrap().is_empty());
    }

    #[test]
    fn a_field_of_the_wrong_type_is_refused_in_every_mode() {
        let mut object = json!({"metadata": {"name": "cm"}, "data": {"k": 1}});
        let err = validate(FieldValidation::Ignore, "", "v1", "ConfigMap", None, &mut object).unwrap_err();
        assert!(
            err.message.starts_with("ConfigMap in version \"v1\" cannot be handled as a ConfigMap: "),
            "{}",
            err.message
        );
    }

    #[test]
    fn the_directive_is_one_of_three() {
        assert_eq!(FieldValidation::from_query(None).unwrap(), FieldValidation::Warn);
        assert_eq!(FieldValidation::from_query(Some("Strict")).unwrap(), FieldValidation::Strict);
        assert!(FieldValidation::from_query(Some("strict")).unwrap_err().message.contains("must be one of"));
    }
}
