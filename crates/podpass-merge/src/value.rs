//! What structured-merge-diff needs of a JSON value that `serde_json` does not give: a
//! total order (upstream `value.Compare`), its text in paths (`value.ToString`) and its
//! encoding inside a `fieldsV1` key as Go's `encoding/json` writes it.

use std::cmp::Ordering;

use serde_json::Value;

/// Ranks of the kinds in upstream's total order: numbers (floats and integers compared
/// numerically), strings, booleans, lists, maps, null.
fn rank(v: &Value) -> u8 {
    match v {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Array(_) => 3,
        Value::Object(_) => 4,
        Value::Null => 5,
    }
}

/// Upstream's total order on values (`value.Compare`): a float and an integer compare
/// numerically; lists element-wise then by length; maps by their sorted keys and values.
pub fn compare(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => {
                let (x, y) = (x.as_f64().unwrap_or(f64::NAN), y.as_f64().unwrap_or(f64::NAN));
                x.partial_cmp(&y).unwrap_or(Ordering::Equal)
            }
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (l, r) in x.iter().zip(y) {
                let c = compare(l, r);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            let mut xs: Vec<_> = x.iter().collect();
            let mut ys: Vec<_> = y.iter().collect();
            xs.sort_by(|a, b| a.0.cmp(b.0));
            ys.sort_by(|a, b| a.0.cmp(b.0));
            for ((kl, vl), (kr, vr)) in xs.iter().zip(&ys) {
                let c = kl.cmp(kr).then_with(|| compare(vl, vr));
                if c != Ordering::Equal {
                    return c;
                }
            }
            xs.len().cmp(&ys.len())
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

/// Upstream's equality (`value.Equals`): what [`compare`] calls equal.
pub fn equals(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => compare(a, b) == Ordering::Equal,
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(l, r)| equals(l, r)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equals(v, w)))
        }
        _ => a == b,
    }
}

/// A value as a path shows it (upstream `value.ToString`): strings quoted as Go's `%q`.
pub fn to_display(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        other => go_json(other),
    }
}

/// Go's `%q` for the strings paths show: `\"` and `\\` escaped, control characters as
/// escapes.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A value encoded as Go's `encoding/json` (jsoniter's standard configuration, which
/// upstream writes `fieldsV1` keys with): maps with sorted keys, `<`, `>` and `&` escaped.
pub fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(v, &mut out);
    out
}

fn write_go_json(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => write_go_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_string(k, out);
                out.push(':');
                if let Some(value) = map.get(k) {
                    write_go_json(value, out);
                }
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A JSON string as Go escapes it (`HTMLEscape` on: `<`, `>`, `&`, U+2028 and U+2029 as
/// `\u` escapes).
fn write_go_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn order_is_upstreams() {
        let ordered =
            [json!(1), json!(2.5), json!("a"), json!(false), json!(true), json!([1]), json!({"a": 1}), json!(null)];
        for (i, a) in ordered.iter().enumerate() {
            for (j, b) in ordered.iter().enumerate() {
                assert_eq!(compare(a, b), i.cmp(&j), "{a} vs {b}");
            }
        }
        assert_eq!(compare(&json!(2), &json!(2.0)), Ordering::Equal);
        assert!(equals(&json!({"a": [1, 2.0]}), &json!({"a": [1.0, 2]})));
    }

    #[test]
    fn keys_are_encoded_as_go_does() {
        assert_eq!(go_json(&json!({"b": "<x>", "a": 1})), r#"{"a":1,"b":"\u003cx\u003e"}"#);
        assert_eq!(to_display(&json!("a\"b")), r#""a\"b""#);
        assert_eq!(to_display(&json!(80)), "80");
    }
}
