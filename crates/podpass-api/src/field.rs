//! Reading fields of JSON objects by constant slash-separated paths.
//!
//! `serde_json::Value::pointer` unescapes every segment (`~0`, `~1`) into a fresh `String`;
//! the paths the API server reads are constants without escapes, and reading them sits on
//! the TokenRequest and TokenReview hot paths, so this walks them without allocating.

use serde_json::Value;

/// Field access by a constant path like `/spec/boundObjectRef/uid`.
pub trait Field {
    /// The value at `path` (object keys and array indexes separated by `/`; no escapes).
    fn field(&self, path: &str) -> Option<&Value>;
}

impl Field for Value {
    fn field(&self, path: &str) -> Option<&Value> {
        let mut current = self;
        for segment in path.strip_prefix('/')?.split('/') {
            current = match current {
                Value::Object(map) => map.get(segment)?,
                Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn walks_objects_and_arrays_like_pointer() {
        let v = json!({"spec": {"a": [{"b": "x"}], "": 1}, "k": null});
        for path in [
            "/spec/a/0/b",
            "/spec/a/0",
            "/spec/a/1",
            "/spec",
            "/k",
            "/spec/a/x",
            "/spec/",
            "/missing/deep",
            "/spec/a/0/b/c",
        ] {
            assert_eq!(v.field(path), v.pointer(path), "{path}");
        }
        assert_eq!(v.field("no-slash"), None);
    }
}
