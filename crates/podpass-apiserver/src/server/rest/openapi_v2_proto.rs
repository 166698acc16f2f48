//! The OpenAPI v2 document in gnostic's protobuf encoding (`openapi.v2.Document` of
//! gnostic-models' OpenAPIv2.proto), which kubectl asks `/openapi/v2` for. Only what a
//! definitions-only Swagger document uses is written: the document's `swagger`, `info`,
//! `paths` and `definitions`, and of each schema the fields below. Vendor extensions and
//! `default`/`enum` values are `Any { yaml }`; JSON text is YAML, so they are written as
//! JSON.

use serde_json::Value;

/// A protobuf message being written.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire_type: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire_type));
    }

    fn bytes(&mut self, field: u32, data: &[u8]) {
        self.key(field, 2);
        self.varint(data.len() as u64);
        self.0.extend_from_slice(data);
    }

    fn string(&mut self, field: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    fn message(&mut self, field: u32, m: Message) {
        self.bytes(field, &m.0);
    }

    fn boolean(&mut self, field: u32, b: bool) {
        if b {
            self.key(field, 0);
            self.varint(1);
        }
    }

    fn int64(&mut self, field: u32, v: i64) {
        self.key(field, 0);
        self.varint(v as u64);
    }

    fn double(&mut self, field: u32, v: f64) {
        self.key(field, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
}

/// `Any { yaml = 2 }`.
fn any(value: &Value) -> Message {
    let mut m = Message::default();
    m.string(2, &value.to_string());
    m
}

/// `NamedAny { name = 1; value = 2 }`.
fn named_any(name: &str, value: &Value) -> Message {
    let mut m = Message::default();
    m.string(1, name);
    m.message(2, any(value));
    m
}

/// `NamedSchema { name = 1; value = 2 }`.
fn named_schema(name: &str, schema: &Value) -> Message {
    let mut m = Message::default();
    m.string(1, name);
    m.message(2, schema_message(schema));
    m
}

/// `openapi.v2.Schema`.
fn schema_message(schema: &Value) -> Message {
    let mut m = Message::default();
    let Value::Object(map) = schema else { return m };
    let text = |k: &str| map.get(k).and_then(Value::as_str).unwrap_or("");
    m.string(1, text("$ref"));
    m.string(2, text("format"));
    m.string(3, text("title"));
    m.string(4, text("description"));
    if let Some(d) = map.get("default") {
        m.message(5, any(d));
    }
    if let Some(v) = map.get("multipleOf").and_then(Value::as_f64) {
        m.double(6, v);
    }
    if let Some(v) = map.get("maximum").and_then(Value::as_f64) {
        m.double(7, v);
    }
    if let Some(v) = map.get("minimum").and_then(Value::as_f64) {
        m.double(9, v);
    }
    for (field, key) in [(11, "maxLength"), (12, "minLength"), (14, "maxItems"), (15, "minItems")] {
        if let Some(v) = map.get(key).and_then(Value::as_i64) {
            m.int64(field, v);
        }
    }
    m.string(13, text("pattern"));
    for r in map.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        m.string(19, r);
    }
    for e in map.get("enum").and_then(Value::as_array).into_iter().flatten() {
        m.message(20, any(e));
    }
    match map.get("additionalProperties") {
        Some(Value::Bool(b)) => {
            // AdditionalPropertiesItem { boolean = 2 }: written even when false.
            let mut item = Message::default();
            item.key(2, 0);
            item.varint(u64::from(*b));
            m.message(21, item);
        }
        Some(s @ Value::Object(_)) => {
            let mut item = Message::default();
            item.message(1, schema_message(s));
            m.message(21, item);
        }
        _ => {}
    }
    let types: Vec<&str> = match map.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect(),
        _ => vec![],
    };
    if !types.is_empty() {
        let mut item = Message::default();
        for t in types {
            item.string(1, t);
        }
        m.message(22, item);
    }
    match map.get("items") {
        Some(s @ Value::Object(_)) => {
            let mut item = Message::default();
            item.message(1, schema_message(s));
            m.message(23, item);
        }
        Some(Value::Array(list)) => {
            let mut item = Message::default();
            for s in list {
                item.message(1, schema_message(s));
            }
            m.message(23, item);
        }
        _ => {}
    }
    for s in map.get("allOf").and_then(Value::as_array).into_iter().flatten() {
        m.message(24, schema_message(s));
    }
    if let Some(Value::Object(properties)) = map.get("properties") {
        let mut item = Message::default();
        for (name, s) in properties {
            item.message(1, named_schema(name, s));
        }
        m.message(25, item);
    }
    m.boolean(27, map.get("readOnly").and_then(Value::as_bool).unwrap_or(false));
    for (name, value) in map.iter().filter(|(k, _)| k.starts_with("x-")) {
        m.message(31, named_any(name, value));
    }
    m
}

/// `openapi.v2.Document` of a Swagger 2.0 JSON document (swagger, info, empty paths,
/// definitions).
pub fn encode_document(doc: &Value) -> Vec<u8> {
    let mut m = Message::default();
    m.string(1, doc["swagger"].as_str().unwrap_or("2.0"));
    let mut info = Message::default();
    info.string(1, doc["info"]["title"].as_str().unwrap_or(""));
    info.string(2, doc["info"]["version"].as_str().unwrap_or(""));
    m.message(2, info);
    m.message(8, Message::default());
    let mut definitions = Message::default();
    if let Some(Value::Object(defs)) = doc.get("definitions") {
        for (name, schema) in defs {
            definitions.message(1, named_schema(name, schema));
        }
    }
    m.message(9, definitions);
    m.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_are_written_with_gnostics_numbers() {
        let doc = json!({"swagger": "2.0", "info": {"title": "K", "version": "v1"},
                         "definitions": {"a.B": {"type": "object", "required": ["x"],
                            "properties": {"x": {"type": "string", "description": "d"}},
                            "x-kubernetes-group-version-kind": [{"group": "", "kind": "B", "version": "v1"}]}}});
        let bytes = encode_document(&doc);
        // swagger = 1, "2.0"
        assert_eq!(&bytes[..5], &[0x0a, 3, b'2', b'.', b'0']);
        // info = 2 { title = 1 "K", version = 2 "v1" }
        assert_eq!(&bytes[5..14], &[0x12, 7, 0x0a, 1, b'K', 0x12, 2, b'v', b'1']);
        // paths = 8, empty
        assert_eq!(&bytes[14..16], &[0x42, 0]);
        // definitions = 9 { NamedSchema = 1 { name = 1 "a.B", value = 2 Schema } }
        assert_eq!(bytes[16], 0x4a);
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("a.B") && text.contains("x-kubernetes-group-version-kind"));
        assert!(text.contains(r#"[{"group":"","kind":"B","version":"v1"}]"#));
    }
}
