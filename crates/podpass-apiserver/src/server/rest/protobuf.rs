//! The Kubernetes protobuf envelope (`k8s\0` + `runtime.Unknown`) for the kinds kubectl
//! sends as protobuf here — Namespace and ServiceAccount (`kubectl create`), ConfigMap and
//! Secret (`kubectl create configmap`, `kubectl create secret generic|docker-registry|tls`),
//! TokenRequest (`kubectl create token`), SelfSubjectAccessReview and SelfSubjectRulesReview
//! (`kubectl auth can-i [--list]`),
//! RBAC roles and bindings (`kubectl create clusterrolebinding` and friends) —
//! decoded into the JSON form the handlers take. Field numbers are those of
//! k8s.io/api's generated.proto; unknown fields are skipped as protobuf requires.

use serde_json::{Map, Value, json};

/// The body is not a protobuf object this server decodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

const MAGIC: &[u8] = b"k8s\0";

enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

/// Reads the (field, value) pairs of one message.
fn fields(mut buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>, DecodeError> {
    fn varint(buf: &mut &[u8]) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = buf.split_first().ok_or_else(|| DecodeError("truncated varint".into()))?;
            *buf = rest;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError("varint too long".into()))
    }
    let mut out = Vec::new();
    while !buf.is_empty() {
        let tag = varint(&mut buf)?;
        let (number, wire) = (tag >> 3, tag & 7);
        match wire {
            0 => out.push((number, Field::Varint(varint(&mut buf)?))),
            2 => {
                let len = usize::try_from(varint(&mut buf)?).map_err(|_| DecodeError("length overflow".into()))?;
                if buf.len() < len {
                    return Err(DecodeError("truncated field".into()));
                }
                let (value, rest) = buf.split_at(len);
                buf = rest;
                out.push((number, Field::Bytes(value)));
            }
            1 => buf = buf.get(8..).ok_or_else(|| DecodeError("truncated fixed64".into()))?,
            5 => buf = buf.get(4..).ok_or_else(|| DecodeError("truncated fixed32".into()))?,
            other => return Err(DecodeError(format!("unsupported wire type {other}"))),
        }
    }
    Ok(out)
}

fn string(bytes: &[u8]) -> Result<String, DecodeError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError("string is not UTF-8".into()))
}

/// A message's string fields by number, and its repeated/embedded fields.
fn strings(msg: &[u8], map: &[(u64, &str)]) -> Result<Map<String, Value>, DecodeError> {
    let mut out = Map::new();
    for (n, f) in fields(msg)? {
        if let (Some((_, name)), Field::Bytes(b)) = (map.iter().find(|(k, _)| *k == n), f) {
            out.insert((*name).to_owned(), json!(string(b)?));
        }
    }
    Ok(out)
}

fn string_map(entries: &[&[u8]]) -> Result<Value, DecodeError> {
    let mut out = Map::new();
    for entry in entries {
        let kv = strings(entry, &[(1, "k"), (2, "v")])?;
        let k = kv.get("k").and_then(Value::as_str).unwrap_or_default().to_owned();
        out.insert(k, kv.get("v").cloned().unwrap_or(json!("")));
    }
    Ok(Value::Object(out))
}

fn object_meta(msg: &[u8]) -> Result<Value, DecodeError> {
    let mut meta =
        strings(msg, &[(1, "name"), (2, "generateName"), (3, "namespace"), (5, "uid"), (6, "resourceVersion")])?;
    let (mut labels, mut annotations) = (Vec::new(), Vec::new());
    for (n, f) in fields(msg)? {
        match (n, f) {
            (11, Field::Bytes(b)) => labels.push(b),
            (12, Field::Bytes(b)) => annotations.push(b),
            _ => {}
        }
    }
    if !labels.is_empty() {
        meta.insert("labels".into(), string_map(&labels)?);
    }
    if !annotations.is_empty() {
        meta.insert("annotations".into(), string_map(&annotations)?);
    }
    Ok(Value::Object(meta))
}

fn token_request_spec(msg: &[u8]) -> Result<Value, DecodeError> {
    let mut spec = Map::new();
    let mut audiences = Vec::new();
    for (n, f) in fields(msg)? {
        match (n, f) {
            (1, Field::Bytes(b)) => audiences.push(json!(string(b)?)),
            (3, Field::Bytes(b)) => {
                let r = strings(b, &[(1, "kind"), (2, "apiVersion"), (3, "name"), (4, "uid")])?;
                spec.insert("boundObjectRef".into(), Value::Object(r));
            }
            (4, Field::Varint(v)) => {
                spec.insert("expirationSeconds".into(), json!(v as i64));
            }
            _ => {}
        }
    }
    if !audiences.is_empty() {
        spec.insert("audiences".into(), Value::Array(audiences));
    }
    Ok(Value::Object(spec))
}

/// A message's repeated string fields by number (rbac/v1 `PolicyRule`).
fn repeated_strings(msg: &[u8], map: &[(u64, &str)]) -> Result<Map<String, Value>, DecodeError> {
    let mut out = Map::new();
    for (n, f) in fields(msg)? {
        if let (Some((_, name)), Field::Bytes(b)) = (map.iter().find(|(k, _)| *k == n), f) {
            let entry = out.entry((*name).to_owned()).or_insert_with(|| json!([]));
            if let Value::Array(items) = entry {
                items.push(json!(string(b)?));
            }
        }
    }
    Ok(out)
}

/// rbac/v1 `PolicyRule`.
fn policy_rule(msg: &[u8]) -> Result<Value, DecodeError> {
    Ok(Value::Object(repeated_strings(
        msg,
        &[(1, "verbs"), (2, "apiGroups"), (3, "resources"), (4, "resourceNames"), (5, "nonResourceURLs")],
    )?))
}

/// rbac/v1 `Subject`.
fn subject(msg: &[u8]) -> Result<Value, DecodeError> {
    Ok(Value::Object(strings(msg, &[(1, "kind"), (2, "apiGroup"), (3, "name"), (4, "namespace")])?))
}

/// rbac/v1 `RoleRef`.
fn role_ref(msg: &[u8]) -> Result<Value, DecodeError> {
    Ok(Value::Object(strings(msg, &[(1, "apiGroup"), (2, "kind"), (3, "name")])?))
}

fn push(object: &mut Map<String, Value>, key: &str, value: Value) {
    if let Value::Array(items) = object.entry(key.to_owned()).or_insert_with(|| json!([])) {
        items.push(value);
    }
}

fn access_review_spec(msg: &[u8]) -> Result<Value, DecodeError> {
    let mut spec = Map::new();
    for (n, f) in fields(msg)? {
        match (n, f) {
            (1, Field::Bytes(b)) => {
                let attrs = strings(
                    b,
                    &[
                        (1, "namespace"),
                        (2, "verb"),
                        (3, "group"),
                        (4, "version"),
                        (5, "resource"),
                        (6, "subresource"),
                        (7, "name"),
                    ],
                )?;
                spec.insert("resourceAttributes".into(), Value::Object(attrs));
            }
            (2, Field::Bytes(b)) => {
                spec.insert("nonResourceAttributes".into(), Value::Object(strings(b, &[(1, "path"), (2, "verb")])?));
            }
            _ => {}
        }
    }
    Ok(Value::Object(spec))
}

/// Decodes a protobuf request body of a supported kind into its JSON form.
pub fn decode(body: &[u8]) -> Result<Value, DecodeError> {
    let unknown = body.strip_prefix(MAGIC).ok_or_else(|| DecodeError("missing k8s protobuf magic".into()))?;
    let (mut type_meta, mut raw) = (Map::new(), None);
    for (n, f) in fields(unknown)? {
        match (n, f) {
            (1, Field::Bytes(b)) => type_meta = strings(b, &[(1, "apiVersion"), (2, "kind")])?,
            (2, Field::Bytes(b)) => raw = Some(b),
            (3 | 4, Field::Bytes(b)) if !b.is_empty() => {
                return Err(DecodeError("encoded or typed raw content is not supported".into()));
            }
            _ => {}
        }
    }
    let raw = raw.unwrap_or_default();
    let kind = type_meta.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned();
    let mut object = Map::new();
    object.extend(type_meta);
    // Map fields arrive one entry at a time; they are gathered, then decoded.
    let (mut data, mut binary_data, mut string_data) = (Vec::new(), Vec::new(), Vec::new());
    for (n, f) in fields(raw)? {
        let Field::Bytes(b) = f else {
            match (kind.as_str(), n, &f) {
                ("ServiceAccount", 3, Field::Varint(v)) => {
                    object.insert("automountServiceAccountToken".into(), json!(*v != 0));
                }
                ("ConfigMap", 4, Field::Varint(v)) | ("Secret", 5, Field::Varint(v)) => {
                    object.insert("immutable".into(), json!(*v != 0));
                }
                _ => {}
            }
            continue;
        };
        match (kind.as_str(), n) {
            // ConfigMap: data = 2 (string values), binaryData = 3 (bytes).
            ("ConfigMap", 2) => data.push(b),
            ("ConfigMap", 3) => binary_data.push(b),
            // Secret: data = 2 (bytes), type = 3, stringData = 4 (string values).
            ("Secret", 2) => binary_data.push(b),
            ("Secret", 3) => {
                object.insert("type".into(), json!(string(b)?));
            }
            ("Secret", 4) => string_data.push(b),
            (_, 1) => {
                object.insert("metadata".into(), object_meta(b)?);
            }
            ("TokenRequest", 2) => {
                object.insert("spec".into(), token_request_spec(b)?);
            }
            ("SelfSubjectAccessReview", 2) => {
                object.insert("spec".into(), access_review_spec(b)?);
            }
            // SelfSubjectRulesReviewSpec: namespace = 1 (`kubectl auth can-i --list`).
            ("SelfSubjectRulesReview", 2) => {
                object.insert("spec".into(), Value::Object(strings(b, &[(1, "namespace")])?));
            }
            ("ClusterRole" | "Role", 2) => push(&mut object, "rules", policy_rule(b)?),
            ("ClusterRoleBinding" | "RoleBinding", 2) => push(&mut object, "subjects", subject(b)?),
            ("ClusterRoleBinding" | "RoleBinding", 3) => {
                object.insert("roleRef".into(), role_ref(b)?);
            }
            ("Namespace" | "ServiceAccount" | "ClusterRole" | "Role" | "ClusterRoleBinding" | "RoleBinding", _) => {}
            ("ConfigMap" | "Secret", _) => {}
            ("TokenRequest" | "SelfSubjectAccessReview" | "SelfSubjectReview" | "SelfSubjectRulesReview", _) => {}
            (other, _) => {
                return Err(DecodeError(format!("protobuf bodies of kind {other:?} are not supported; send JSON")));
            }
        }
    }
    if !data.is_empty() {
        object.insert("data".into(), string_map(&data)?);
    }
    if !binary_data.is_empty() {
        // JSON carries bytes as base64: a ConfigMap's binaryData, a Secret's data.
        let key = if kind == "Secret" { "data" } else { "binaryData" };
        object.insert(key.into(), bytes_map(&binary_data)?);
    }
    if !string_data.is_empty() {
        object.insert("stringData".into(), string_map(&string_data)?);
    }
    Ok(Value::Object(object))
}

/// A `map<string, bytes>`'s entries as JSON: values base64 (standard, padded), as the JSON
/// serializer writes `[]byte`.
fn bytes_map(entries: &[&[u8]]) -> Result<Value, DecodeError> {
    let mut out = Map::new();
    for entry in entries {
        let (mut key, mut value): (String, &[u8]) = (String::new(), &[]);
        for (n, f) in fields(entry)? {
            match (n, f) {
                (1, Field::Bytes(b)) => key = string(b)?,
                (2, Field::Bytes(b)) => value = b,
                _ => {}
            }
        }
        out.insert(key, json!(data_encoding::BASE64.encode(value)));
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_bytes(n: u64, b: &[u8]) -> Vec<u8> {
        let mut out = vec![((n << 3) | 2) as u8, b.len() as u8];
        out.extend_from_slice(b);
        out
    }

    #[test]
    fn decodes_a_kubectl_token_request() {
        let bound =
            [field_bytes(1, b"Pod"), field_bytes(2, b"v1"), field_bytes(3, b"p1"), field_bytes(4, b"X")].concat();
        let spec = [field_bytes(1, b"aud1"), field_bytes(1, b"aud2"), field_bytes(3, &bound), vec![4 << 3, 0xd8, 0x04]]
            .concat();
        let raw = [field_bytes(1, b""), field_bytes(2, &spec), field_bytes(3, b"")].concat();
        let type_meta = [field_bytes(1, b"authentication.k8s.io/v1"), field_bytes(2, b"TokenRequest")].concat();
        let body = [
            MAGIC.to_vec(),
            field_bytes(1, &type_meta),
            field_bytes(2, &raw),
            field_bytes(3, b""),
            field_bytes(4, b""),
        ]
        .concat();
        let v = decode(&body).unwrap();
        assert_eq!(v["kind"], "TokenRequest");
        assert_eq!(v["spec"]["audiences"], json!(["aud1", "aud2"]));
        assert_eq!(v["spec"]["expirationSeconds"], 600);
        assert_eq!(v["spec"]["boundObjectRef"], json!({"kind": "Pod", "apiVersion": "v1", "name": "p1", "uid": "X"}));
    }

    /// A map entry: key = 1, value = 2.
    fn entry(k: &[u8], v: &[u8]) -> Vec<u8> {
        [field_bytes(1, k), field_bytes(2, v)].concat()
    }

    #[test]
    fn decodes_config_maps_and_secrets_as_kubectl_create_sends_them() {
        let meta = field_bytes(1, &field_bytes(1, b"settings"));
        let raw = [
            meta.clone(),
            field_bytes(2, &entry(b"mode", b"blue")),
            field_bytes(2, &entry(b"size", b"3")),
            field_bytes(3, &entry(b"logo", &[0xff, 0x00, 0x01])),
            vec![4 << 3, 1],
        ]
        .concat();
        let type_meta = [field_bytes(1, b"v1"), field_bytes(2, b"ConfigMap")].concat();
        let v = decode(&[MAGIC.to_vec(), field_bytes(1, &type_meta), field_bytes(2, &raw)].concat()).unwrap();
        assert_eq!(v["data"], json!({"mode": "blue", "size": "3"}));
        assert_eq!(v["binaryData"], json!({"logo": "/wAB"}));
        assert_eq!(v["immutable"], true);

        let raw = [
            meta,
            field_bytes(2, &entry(b"password", b"s3cr3t")),
            field_bytes(3, b"kubernetes.io/basic-auth"),
            field_bytes(4, &entry(b"username", b"admin")),
            vec![5 << 3, 0],
        ]
        .concat();
        let type_meta = [field_bytes(1, b"v1"), field_bytes(2, b"Secret")].concat();
        let v = decode(&[MAGIC.to_vec(), field_bytes(1, &type_meta), field_bytes(2, &raw)].concat()).unwrap();
        assert_eq!(v["data"], json!({"password": "czNjcjN0"}), "bytes as base64");
        assert_eq!(v["stringData"], json!({"username": "admin"}));
        assert_eq!(v["type"], "kubernetes.io/basic-auth");
        assert_eq!(v["immutable"], false);
        // a map entry that is not a message is refused, not guessed at
        let raw = [field_bytes(1, &field_bytes(1, b"x")), field_bytes(2, &[0x0f])].concat();
        assert!(decode(&[MAGIC.to_vec(), field_bytes(1, &type_meta), field_bytes(2, &raw)].concat()).is_err());
    }

    #[test]
    fn decodes_rbac_objects_as_kubectl_create_sends_them() {
        let rule =
            [field_bytes(1, b"get"), field_bytes(1, b"list"), field_bytes(2, b""), field_bytes(3, b"pods")].concat();
        let raw = [field_bytes(1, &field_bytes(1, b"reader")), field_bytes(2, &rule)].concat();
        let type_meta = [field_bytes(1, b"rbac.authorization.k8s.io/v1"), field_bytes(2, b"ClusterRole")].concat();
        let body = [MAGIC.to_vec(), field_bytes(1, &type_meta), field_bytes(2, &raw)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(v["rules"], json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]));
        let subject =
            [field_bytes(1, b"User"), field_bytes(2, b"rbac.authorization.k8s.io"), field_bytes(3, b"system:node:n1")]
                .concat();
        let role_ref =
            [field_bytes(1, b"rbac.authorization.k8s.io"), field_bytes(2, b"ClusterRole"), field_bytes(3, b"reader")]
                .concat();
        let raw = [field_bytes(1, &field_bytes(1, b"b")), field_bytes(2, &subject), field_bytes(3, &role_ref)].concat();
        let type_meta =
            [field_bytes(1, b"rbac.authorization.k8s.io/v1"), field_bytes(2, b"ClusterRoleBinding")].concat();
        let body = [MAGIC.to_vec(), field_bytes(1, &type_meta), field_bytes(2, &raw)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v["subjects"],
            json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "system:node:n1"}])
        );
        assert_eq!(
            v["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"})
        );
    }

    #[test]
    fn decodes_object_meta_with_labels_and_refuses_garbage() {
        let label = [field_bytes(1, b"app"), field_bytes(2, b"web")].concat();
        let meta = [field_bytes(1, b"team-a"), field_bytes(11, &label)].concat();
        let raw = field_bytes(1, &meta);
        let type_meta = [field_bytes(1, b"v1"), field_bytes(2, b"Namespace")].concat();
        let body = [MAGIC.to_vec(), field_bytes(1, &type_meta), field_bytes(2, &raw)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(v["metadata"], json!({"name": "team-a", "labels": {"app": "web"}}));
        assert!(decode(b"{}").is_err());
        assert!(decode(&[MAGIC, &[0x0a, 0x05, 0x01]].concat()).is_err());
        let pod_meta = [field_bytes(1, b"v1"), field_bytes(2, b"Pod")].concat();
        let pod = [MAGIC.to_vec(), field_bytes(1, &pod_meta), field_bytes(2, &field_bytes(2, b"spec"))].concat();
        assert!(decode(&pod).unwrap_err().0.contains("send JSON"));
    }
}
