//! Protobuf request bodies: the Kubernetes envelope (`k8s\0` + `runtime.Unknown`) around an
//! object of any kind the server serves, decoded into the JSON form the handlers take as
//! upstream's protobuf serializer decodes into the Go types: fields by number from
//! k8s.io/api's generated.proto ([`messages`], generated), unknown fields skipped as
//! protobuf requires, Go's embedded structs flattened, `metav1.Time`, `MicroTime`,
//! `Quantity`, `IntOrString`, `RawExtension` and bytes written as their JSON forms.
//!
//! kubectl sends protobuf for what its typed clients create (namespaces, service accounts,
//! config maps, secrets, RBAC, tokens, access and rules reviews); client-go programs send it
//! for every kind, DeleteOptions included.

mod messages;
mod schema;
mod wire;

use serde_json::{Map, Value, json};

use schema::{Message, Ty};
use wire::{Wire, fields};

/// The body is not a protobuf object this server decodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

const MAGIC: &[u8] = b"k8s\0";

/// Deepest nesting of messages decoded (the schema's own is about 12).
const MAX_DEPTH: usize = 32;

/// DeleteOptions' message: registered in every group version, so matched by kind alone.
const DELETE_OPTIONS: &str = "apimachinery.pkg.apis.meta.v1.DeleteOptions";

/// The message of a body of `kind` in `api_version`: a served kind's (its declaration names
/// its type, whose package the proto package mirrors) or DeleteOptions; `None` for any
/// other, so no inner message (a PodSpec) is decoded as a body.
fn root(api_version: &str, kind: &str) -> Option<u16> {
    let message = if kind == "DeleteOptions" {
        DELETE_OPTIONS.to_owned()
    } else {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        if version != "v1" {
            return None;
        }
        super::kinds::type_of(group, kind)?.protobuf_message()
    };
    let index = messages::MESSAGES.iter().position(|m| m.name == message)?;
    u16::try_from(index).ok()
}

/// Decodes a protobuf request body into its JSON form, `apiVersion` and `kind` included.
pub fn decode(body: &[u8]) -> Result<Value, DecodeError> {
    let unknown = body.strip_prefix(MAGIC).ok_or_else(|| DecodeError("missing k8s protobuf magic".into()))?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), None);
    for field in fields(unknown) {
        match field? {
            (1, Wire::Bytes(type_meta)) => {
                for field in fields(type_meta) {
                    match field? {
                        (1, Wire::Bytes(b)) => api_version = utf8(b, "apiVersion")?,
                        (2, Wire::Bytes(b)) => kind = utf8(b, "kind")?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = Some(b),
            (3 | 4, Wire::Bytes(b)) if !b.is_empty() => {
                return Err(DecodeError("encoded or typed raw content is not supported".into()));
            }
            _ => {}
        }
    }
    let root = root(&api_version, &kind).ok_or_else(|| {
        DecodeError(format!("protobuf bodies of kind {kind:?} in {api_version:?} are not supported; send JSON"))
    })?;
    let mut object = Map::new();
    if !api_version.is_empty() {
        object.insert("apiVersion".into(), json!(api_version));
    }
    object.insert("kind".into(), json!(kind));
    message_into(&mut object, raw.unwrap_or_default(), root, "", 0)?;
    Ok(Value::Object(object))
}

fn utf8(bytes: &[u8], path: &str) -> Result<String, DecodeError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError(format!("{}: string is not UTF-8", name(path))))
}

/// A field path for errors (`spec.containers`), or the object itself.
fn name(path: &str) -> &str {
    if path.is_empty() { "the object" } else { path }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() { field.to_owned() } else { format!("{path}.{field}") }
}

/// Decodes message `index` from `bytes` into `object` (whose fields a repeated occurrence of
/// the same message merges into, as protobuf's merge semantics require).
fn message_into(
    object: &mut Map<String, Value>,
    bytes: &[u8],
    index: u16,
    path: &str,
    depth: usize,
) -> Result<(), DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError(format!("{}: messages nested deeper than {MAX_DEPTH}", name(path))));
    }
    let message: &Message = messages::MESSAGES
        .get(usize::from(index))
        .ok_or_else(|| DecodeError(format!("{}: no message {index} in the schema", name(path))))?;
    for field in fields(bytes) {
        let (number, wire) = field.map_err(|e| DecodeError(format!("{}: {}", name(path), e.0)))?;
        let Some(field) = message.field(number) else { continue };
        let path = &join(path, field.json);
        match field.ty {
            Ty::Inline(inner) => {
                let Wire::Bytes(b) = wire else { return Err(wrong_wire(path, message, wire)) };
                message_into(object, b, inner, path.trim_end_matches('.'), depth + 1)?;
            }
            Ty::Map(value_ty) => {
                let Wire::Bytes(entry) = wire else { return Err(wrong_wire(path, message, wire)) };
                let (key, value) = map_entry(entry, value_ty, path, depth)?;
                let map = object.entry(field.json).or_insert_with(|| json!({}));
                if let (Value::Object(map), Some(value)) = (map, value) {
                    map.insert(key, value);
                }
            }
            Ty::Message(inner) if !field.repeated => {
                let Wire::Bytes(b) = wire else { return Err(wrong_wire(path, message, wire)) };
                let entry = object.entry(field.json).or_insert_with(|| json!({}));
                if !entry.is_object() {
                    *entry = json!({});
                }
                if let Value::Object(inner_object) = entry {
                    message_into(inner_object, b, inner, path, depth + 1)?;
                }
            }
            ty if field.repeated => {
                let list = object.entry(field.json).or_insert_with(|| json!([]));
                let Value::Array(items) = list else { continue };
                match (ty, wire) {
                    // A packed repeated scalar: one length-delimited run of varints.
                    (Ty::Int32 | Ty::Int64 | Ty::Bool, Wire::Bytes(mut run)) => {
                        while !run.is_empty() {
                            let v = wire::varint(&mut run).map_err(|e| DecodeError(format!("{path}: {}", e.0)))?;
                            items.push(scalar(ty, Wire::Varint(v), path, depth, true)?.unwrap_or(Value::Null));
                        }
                    }
                    _ => items.push(scalar(ty, wire, path, depth, true)?.unwrap_or(Value::Null)),
                }
            }
            ty => match scalar(ty, wire, path, depth, false)? {
                Some(value) => {
                    object.insert(field.json.to_owned(), value);
                }
                None => {
                    object.remove(field.json);
                }
            },
        }
    }
    Ok(())
}

fn wrong_wire(path: &str, message: &Message, wire: Wire<'_>) -> DecodeError {
    DecodeError(format!("{path}: a {} value where {} expects a message", wire.name(), message.name))
}

/// One map entry: key = 1 (a string), value = 2.
fn map_entry(entry: &[u8], ty: &Ty, path: &str, depth: usize) -> Result<(String, Option<Value>), DecodeError> {
    let (mut key, mut value) = (String::new(), None);
    for field in fields(entry) {
        match field.map_err(|e| DecodeError(format!("{path}: {}", e.0)))? {
            (1, Wire::Bytes(b)) => key = utf8(b, path)?,
            (2, wire) => value = Some(wire),
            (1, wire) => return Err(DecodeError(format!("{path}: a {} map key", wire.name()))),
            _ => {}
        }
    }
    let path = &format!("{path}[{key}]");
    // An entry without a value holds the value type's zero, as Go's map decoding fills it.
    let value = scalar(*ty, value.unwrap_or(Wire::Bytes(&[])), path, depth, true)?;
    Ok((key, value))
}

/// The JSON form of one value; `None` for what Go's JSON leaves out (an empty singular
/// string, the zero time). `keep_empty` keeps an empty string (list items, map values).
fn scalar(ty: Ty, wire: Wire<'_>, path: &str, depth: usize, keep_empty: bool) -> Result<Option<Value>, DecodeError> {
    let mismatch = || DecodeError(format!("{path}: a {} value for a field of type {ty:?}", wire.name()));
    Ok(match (ty, wire) {
        (Ty::String, Wire::Bytes(b)) => {
            let s = utf8(b, path)?;
            (keep_empty || !s.is_empty()).then(|| json!(s))
        }
        (Ty::Bool, Wire::Varint(v)) => Some(json!(v != 0)),
        // Go's int32 decoding keeps the low 32 bits of the varint.
        (Ty::Int32, Wire::Varint(v)) => Some(json!(v as u32 as i32)),
        (Ty::Int64, Wire::Varint(v)) => Some(json!(v as i64)),
        (Ty::Bytes, Wire::Bytes(b)) => Some(json!(data_encoding::BASE64.encode(b))),
        (Ty::Message(index), Wire::Bytes(b)) => {
            let mut object = Map::new();
            message_into(&mut object, b, index, path, depth + 1)?;
            Some(Value::Object(object))
        }
        (Ty::Time | Ty::MicroTime, Wire::Bytes(b)) => time(ty, b, path)?,
        (Ty::Quantity, Wire::Bytes(b)) => {
            let mut s = String::new();
            for field in fields(b) {
                if let (1, Wire::Bytes(v)) = field.map_err(|e| DecodeError(format!("{path}: {}", e.0)))? {
                    s = utf8(v, path)?;
                }
            }
            Some(json!(s))
        }
        (Ty::IntOrString, Wire::Bytes(b)) => {
            let (mut is_string, mut int, mut string) = (false, 0i32, String::new());
            for field in fields(b) {
                match field.map_err(|e| DecodeError(format!("{path}: {}", e.0)))? {
                    (1, Wire::Varint(t)) => is_string = t == 1,
                    (2, Wire::Varint(v)) => int = v as u32 as i32,
                    (3, Wire::Bytes(v)) => string = utf8(v, path)?,
                    _ => {}
                }
            }
            Some(if is_string { json!(string) } else { json!(int) })
        }
        (Ty::RawJson, Wire::Bytes(b)) => {
            let mut raw: &[u8] = &[];
            for field in fields(b) {
                if let (1, Wire::Bytes(v)) = field.map_err(|e| DecodeError(format!("{path}: {}", e.0)))? {
                    raw = v;
                }
            }
            if raw.is_empty() {
                None
            } else {
                Some(serde_json::from_slice(raw).map_err(|e| DecodeError(format!("{path}: raw is not JSON: {e}")))?)
            }
        }
        (Ty::StringList, Wire::Bytes(b)) => {
            let mut items = Vec::new();
            for field in fields(b) {
                if let (1, Wire::Bytes(v)) = field.map_err(|e| DecodeError(format!("{path}: {}", e.0)))? {
                    items.push(json!(utf8(v, path)?));
                }
            }
            Some(Value::Array(items))
        }
        _ => return Err(mismatch()),
    })
}

/// `metav1.Time` (seconds) and `metav1.MicroTime` (to the microsecond) in UTC; an empty
/// message is the zero time, which JSON leaves out.
fn time(ty: Ty, bytes: &[u8], path: &str) -> Result<Option<Value>, DecodeError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let (mut seconds, mut nanos) = (0i64, 0i32);
    for field in fields(bytes) {
        match field.map_err(|e| DecodeError(format!("{path}: {}", e.0)))? {
            (1, Wire::Varint(v)) => seconds = v as i64,
            (2, Wire::Varint(v)) => nanos = v as u32 as i32,
            _ => {}
        }
    }
    let micros = if matches!(ty, Ty::MicroTime) { nanos / 1000 } else { 0 };
    let t = jiff::Timestamp::new(seconds, micros.saturating_mul(1000))
        .ok()
        .filter(|t| (1..=9999).contains(&t.to_zoned(jiff::tz::TimeZone::UTC).year()))
        .ok_or_else(|| DecodeError(format!("{path}: time {seconds}s {nanos}ns is outside the years 1 to 9999")))?;
    let format = if matches!(ty, Ty::MicroTime) { "%Y-%m-%dT%H:%M:%S.%6fZ" } else { "%Y-%m-%dT%H:%M:%SZ" };
    Ok(Some(json!(t.strftime(format).to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
        out
    }

    /// A length-delimited field.
    fn field_bytes(n: u64, b: &[u8]) -> Vec<u8> {
        [varint((n << 3) | 2), varint(b.len() as u64), b.to_vec()].concat()
    }

    /// A varint field.
    fn field_varint(n: u64, v: u64) -> Vec<u8> {
        [varint(n << 3), varint(v)].concat()
    }

    /// A body of `api_version`/`kind` whose object is `raw`.
    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [field_bytes(1, api_version.as_bytes()), field_bytes(2, kind.as_bytes())].concat();
        [MAGIC.to_vec(), field_bytes(1, &type_meta), field_bytes(2, raw)].concat()
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
        let unserved = envelope("apps/v1", "StatefulSet", &field_bytes(2, b"spec"));
        assert!(decode(&unserved).unwrap_err().0.contains("send JSON"));
        // a kind in another group version than the one served
        assert!(decode(&envelope("v2", "Pod", b"")).is_err());
    }

    /// A Pod as client-go's protobuf encoder writes one: every non-pointer field present,
    /// zero values included.
    #[test]
    fn decodes_a_pod_as_client_go_sends_it() {
        let meta = [
            field_bytes(1, b"web"),
            field_bytes(2, b""),
            field_bytes(3, b"team-a"),
            field_bytes(8, b""), // the zero creationTimestamp
            field_bytes(9, &field_varint(1, 1_795_344_902)),
            field_bytes(11, &[field_bytes(1, b"app"), field_bytes(2, b"web")].concat()),
            field_bytes(14, b"example.com/hold"),
        ]
        .concat();
        let quantity = |q: &[u8]| field_bytes(1, q);
        let resources = field_bytes(
            2,
            &[field_bytes(1, b"cpu"), field_bytes(2, &quantity(b"250m"))].concat(), // requests
        );
        let http_get =
            [field_bytes(1, b"/healthz"), field_bytes(2, &[field_varint(1, 1), field_bytes(3, b"http")].concat())]
                .concat();
        let probe = [field_bytes(1, &field_bytes(2, &http_get)), field_varint(2, 0), field_varint(3, 0)].concat();
        let env = [field_bytes(1, b"MODE"), field_bytes(2, b"")].concat();
        let container = [
            field_bytes(1, b"app"),
            field_bytes(2, b"registry.example/app:1"),
            field_bytes(3, b"serve"),
            field_bytes(6, &[field_bytes(1, b"http"), field_varint(3, 8080), field_bytes(4, b"TCP")].concat()),
            field_bytes(7, &env),
            field_bytes(8, &resources),
            field_bytes(9, &[field_bytes(1, b"token"), field_varint(2, 1), field_bytes(3, b"/var/run/t")].concat()),
            field_bytes(11, &probe),
            field_bytes(14, b""), // imagePullPolicy left empty
            field_bytes(15, &[field_varint(4, 1000), field_varint(5, 0)].concat()), // runAsUser, runAsNonRoot
            field_varint(16, 0),  // stdin
        ]
        .concat();
        let token_projection = [field_bytes(1, b"registry"), field_varint(2, 3600), field_bytes(3, b"token")].concat();
        let projected = field_bytes(26, &field_bytes(1, &field_bytes(4, &token_projection)));
        let volume = [field_bytes(1, b"token"), field_bytes(2, &projected)].concat();
        let spec = [
            field_bytes(1, &volume),
            field_bytes(2, &container),
            field_varint(4, 0), // terminationGracePeriodSeconds: 0 is not the default
            field_bytes(8, b"builder"),
            field_varint(21, 0), // automountServiceAccountToken: false is the tenant's opt-out
        ]
        .concat();
        let raw = [field_bytes(1, &meta), field_bytes(2, &spec), field_bytes(3, b"")].concat();
        let pod = decode(&envelope("v1", "Pod", &raw)).unwrap();
        assert_eq!(
            pod,
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "web",
                    "namespace": "team-a",
                    "deletionTimestamp": "2026-11-22T10:55:02Z",
                    "labels": {"app": "web"},
                    "finalizers": ["example.com/hold"],
                },
                "spec": {
                    "volumes": [{"name": "token", "projected": {"sources": [{"serviceAccountToken": {
                        "audience": "registry", "expirationSeconds": 3600, "path": "token"}}]}}],
                    "containers": [{
                        "name": "app",
                        "image": "registry.example/app:1",
                        "command": ["serve"],
                        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                        "env": [{"name": "MODE"}],
                        "resources": {"requests": {"cpu": "250m"}},
                        "volumeMounts": [{"name": "token", "readOnly": true, "mountPath": "/var/run/t"}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                            "initialDelaySeconds": 0, "timeoutSeconds": 0},
                        "securityContext": {"runAsUser": 1000, "runAsNonRoot": false},
                        "stdin": false,
                    }],
                    "terminationGracePeriodSeconds": 0,
                    "serviceAccountName": "builder",
                    "automountServiceAccountToken": false,
                },
                "status": {},
            })
        );
    }

    #[test]
    fn decodes_times_leases_events_and_review_extras() {
        let micro = [field_varint(1, 1_795_344_902), field_varint(2, 123_456_789)].concat();
        let spec = [field_bytes(1, b"node-1"), field_varint(2, 40), field_bytes(4, &micro)].concat();
        let lease = decode(&envelope("coordination.k8s.io/v1", "Lease", &field_bytes(2, &spec))).unwrap();
        assert_eq!(
            lease["spec"],
            json!({"holderIdentity": "node-1", "leaseDurationSeconds": 40, "renewTime": "2026-11-22T10:55:02.123456Z"})
        );
        let time = field_varint(1, 1_795_344_902);
        let event = [
            field_bytes(2, &[field_bytes(1, b"Pod"), field_bytes(3, b"web")].concat()),
            field_bytes(3, b"Pulled"),
            field_bytes(6, &time),
            field_varint(8, 1),
            field_bytes(10, &micro),
        ]
        .concat();
        let event = decode(&envelope("v1", "Event", &event)).unwrap();
        assert_eq!(event["involvedObject"], json!({"kind": "Pod", "name": "web"}));
        assert_eq!(event["firstTimestamp"], "2026-11-22T10:55:02Z");
        assert_eq!(event["eventTime"], "2026-11-22T10:55:02.123456Z");
        assert_eq!(event["count"], 1);
        let extra = [field_bytes(1, b"scopes"), field_bytes(2, &[field_bytes(1, b"a"), field_bytes(1, b"b")].concat())];
        let sar_spec = [
            field_bytes(1, &[field_bytes(2, b"get"), field_bytes(5, b"pods")].concat()),
            field_bytes(3, b"alice"),
            field_bytes(4, b"devs"),
            field_bytes(5, &extra.concat()),
        ]
        .concat();
        let sar = decode(&envelope("authorization.k8s.io/v1", "SubjectAccessReview", &field_bytes(2, &sar_spec)));
        let sar = sar.unwrap();
        assert_eq!(sar["spec"]["extra"], json!({"scopes": ["a", "b"]}));
        assert_eq!(sar["spec"]["groups"], json!(["devs"]));
        assert_eq!(sar["spec"]["resourceAttributes"], json!({"verb": "get", "resource": "pods"}));
        // a time RFC 3339 cannot write is refused, naming the field
        let far = field_bytes(2, &field_bytes(4, &field_varint(1, u64::MAX >> 1)));
        let err = decode(&envelope("coordination.k8s.io/v1", "Lease", &far)).unwrap_err();
        assert!(err.0.contains("spec.renewTime"), "{err:?}");
    }

    #[test]
    fn decodes_delete_options_of_any_group_version() {
        let options = [
            field_varint(1, 0),
            field_bytes(2, &field_bytes(1, b"uid-1")),
            field_bytes(4, b"Foreground"),
            field_bytes(5, b"All"),
        ]
        .concat();
        for api_version in ["v1", "rbac.authorization.k8s.io/v1", "meta.k8s.io/v1"] {
            let v = decode(&envelope(api_version, "DeleteOptions", &options)).unwrap();
            assert_eq!(v["dryRun"], json!(["All"]));
            assert_eq!(v["gracePeriodSeconds"], 0);
            assert_eq!(v["preconditions"], json!({"uid": "uid-1"}));
            assert_eq!(v["propagationPolicy"], "Foreground");
        }
    }

    #[test]
    fn hostile_bodies_are_refused_naming_the_field() {
        // a varint where a message belongs
        let err = decode(&envelope("v1", "Pod", &field_varint(2, 7))).unwrap_err();
        assert!(err.0.contains("spec"), "{err:?}");
        // a string that is not UTF-8, deep inside
        let container = field_bytes(2, &field_bytes(1, &[0xff, 0xfe]));
        let err = decode(&envelope("v1", "Pod", &field_bytes(2, &container))).unwrap_err();
        assert!(err.0.contains("spec.containers.name"), "{err:?}");
        // a truncated nested message
        let err = decode(&envelope("v1", "Pod", &[field_bytes(2, &[0x12, 0x05, 0x0a])].concat())).unwrap_err();
        assert!(err.0.contains("spec"), "{err:?}");
        // raw JSON that is not JSON
        let managed = field_bytes(17, &field_bytes(7, &field_bytes(1, b"{")));
        let err = decode(&envelope("v1", "ConfigMap", &field_bytes(1, &managed))).unwrap_err();
        assert!(err.0.contains("metadata.managedFields.fieldsV1"), "{err:?}");
        // unknown fields and wire types of unknown fields are skipped
        let v = decode(&envelope("v1", "ConfigMap", &[field_varint(99, 1), field_bytes(98, b"x")].concat())).unwrap();
        assert_eq!(v, json!({"apiVersion": "v1", "kind": "ConfigMap"}));
    }

    /// The fuzz target's protobuf seeds are bodies this decoder takes, so mutations of them
    /// reach deep into the schema.
    #[test]
    fn every_committed_fuzz_seed_decodes() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/api_body");
        let mut decoded = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "pb") {
                let v = decode(&std::fs::read(&path).unwrap()).unwrap_or_else(|e| panic!("{path:?}: {e:?}"));
                assert!(v["kind"].is_string(), "{path:?}");
                decoded += 1;
            }
        }
        assert!(decoded >= 7, "{decoded} seeds");
    }

    #[test]
    fn the_schema_is_sorted_closed_and_covers_every_served_kind() {
        for message in &messages::MESSAGES {
            assert!(message.fields.windows(2).all(|w| w[0].number < w[1].number), "{}", message.name);
            for field in message.fields {
                let mut ty = field.ty;
                while let Ty::Map(inner) = ty {
                    ty = *inner;
                }
                if let Ty::Message(i) | Ty::Inline(i) = ty {
                    assert!(usize::from(i) < messages::MESSAGES.len(), "{}.{}", message.name, field.json);
                }
            }
        }
        // podpass's own kinds have no protobuf schema, as upstream serves custom resources
        // in JSON only.
        let own = crate::server::rest::kinds::revoked_token::GROUP;
        for res in crate::server::rest::resources::RESOURCES.iter().filter(|r| r.group != own) {
            let api_version = res.api_version();
            assert!(root(&api_version, res.kind).is_some(), "no protobuf schema for {api_version} {}", res.kind);
        }
        for (api_version, kind) in
            [("authentication.k8s.io/v1", "TokenRequest"), ("v1", "Binding"), ("", "DeleteOptions")]
        {
            assert!(root(api_version, kind).is_some(), "{api_version} {kind}");
        }
        assert_eq!(root("v1", "PodSpec"), None, "an inner message is no body");
        assert_eq!(root("v2", "Pod"), None);
        assert_eq!(root("apps/v1", "Pod"), None);
    }
}
