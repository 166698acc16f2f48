//! What becomes files on a node, validated as kube-apiserver does: ConfigMap and Secret keys
//! (`IsConfigMapKey`), and the volume sources that project them — item paths
//! (`ValidateLocalNonReservedPath`), file modes (`defaultMode`, item `mode`: 0 to 0777).
//! The node re-checks paths and masks modes whatever it is given; this keeps a tenant's
//! object from ever asking for a setuid file or a path outside its volume.

use serde_json::Value;

use super::resources::Resource;
use crate::server::status::StatusError;

/// Upstream's `fileModeErrorMsg`.
const FILE_MODE_MSG: &str = "must be a number between 0 and 0777 (octal), both inclusive";
/// Longest key (`IsConfigMapKey`: `DNS1123SubdomainMaxLength`).
const MAX_KEY_LEN: usize = 253;

/// `IsConfigMapKey`: the problems with `key`, upstream's messages.
pub fn config_key_problems(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if key.len() > MAX_KEY_LEN {
        errs.push(format!("must be no more than {MAX_KEY_LEN} characters"));
    }
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)) {
        errs.push(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
                .to_owned(),
        );
    }
    if key == "." {
        errs.push("must not be '.'".to_owned());
    } else if key == ".." {
        errs.push("must not be '..'".to_owned());
    } else if key.starts_with("..") {
        errs.push("must not start with '..'".to_owned());
    }
    errs
}

/// A Go `%q`-quoted value for a message.
fn quote(s: &str) -> String {
    podpass_api::validation::quote(s)
}

/// The keys of a ConfigMap (`data`, `binaryData`) or Secret (`data`, `stringData`).
fn validate_keys(res: &Resource, object: &Value, errors: &mut Vec<String>) {
    let maps: &[&str] = if res.plural == "configmaps" { &["data", "binaryData"] } else { &["data", "stringData"] };
    for map in maps {
        for key in object.get(*map).and_then(Value::as_object).into_iter().flat_map(|m| m.keys()) {
            for problem in config_key_problems(key) {
                errors.push(format!("{map}[{key}]: Invalid value: {}: {problem}", quote(key)));
            }
        }
        if res.plural == "configmaps"
            && let (Some(data), Some(binary)) =
                (object.get("data").and_then(Value::as_object), object.get("binaryData").and_then(Value::as_object))
            && *map == "binaryData"
        {
            for key in binary.keys().filter(|k| data.contains_key(*k)) {
                errors.push(format!(
                    "data[{key}]: Invalid value: {}: duplicate of key present in binaryData",
                    quote(key)
                ));
            }
        }
    }
}

/// ConfigMap and Secret keys on create and update: 422 naming each bad key.
pub fn validate_config_object(res: &Resource, name: &str, object: &Value) -> Result<(), StatusError> {
    let mut errors = Vec::new();
    validate_keys(res, object, &mut errors);
    invalid(res.kind, name, errors)
}

fn invalid(kind: &str, name: &str, errors: Vec<String>) -> Result<(), StatusError> {
    match errors.as_slice() {
        [] => Ok(()),
        [one] => Err(StatusError::invalid(format!("{kind} {name:?} is invalid: {one}"))),
        many => Err(StatusError::invalid(format!("{kind} {name:?} is invalid: [{}]", many.join(", ")))),
    }
}

/// A mode field at `path`, if present: an integer between 0 and 0777.
fn check_mode(value: Option<&Value>, path: &str, errors: &mut Vec<String>) {
    let Some(v) = value.filter(|v| !v.is_null()) else { return };
    match v.as_i64() {
        Some(m) if (0..=0o777).contains(&m) => {}
        Some(m) => errors.push(format!("{path}: Invalid value: {m}: {FILE_MODE_MSG}")),
        None => errors.push(format!("{path}: Invalid value: {v}: {FILE_MODE_MSG}")),
    }
}

/// `ValidateLocalNonReservedPath`: relative, no `..` element, not starting with `..`.
fn check_path(value: Option<&Value>, path: &str, errors: &mut Vec<String>) {
    let target = value.and_then(Value::as_str).unwrap_or_default();
    if target.is_empty() {
        errors.push(format!("{path}: Required value"));
        return;
    }
    if target.starts_with('/') {
        errors.push(format!("{path}: Invalid value: {}: must be a relative path", quote(target)));
    }
    if target.split('/').any(|part| part == "..") {
        errors.push(format!("{path}: Invalid value: {}: must not contain '..'", quote(target)));
    }
    if target.starts_with("..") {
        errors.push(format!("{path}: Invalid value: {}: must not start with '..'", quote(target)));
    }
}

/// `validateKeyToPath` for each of `items` (`key` required when `with_key`).
fn check_items(items: Option<&Value>, at: &str, with_key: bool, errors: &mut Vec<String>) {
    for (i, item) in items.and_then(Value::as_array).into_iter().flatten().enumerate() {
        let at = format!("{at}.items[{i}]");
        if with_key && item.get("key").and_then(Value::as_str).is_none_or(str::is_empty) {
            errors.push(format!("{at}.key: Required value"));
        }
        check_path(item.get("path"), &format!("{at}.path"), errors);
        check_mode(item.get("mode"), &format!("{at}.mode"), errors);
    }
}

/// The file-producing volume sources of a pod spec: secret, configMap, downwardAPI and
/// projected — paths and modes.
pub fn validate_pod_volumes(name: &str, pod: &Value) -> Result<(), StatusError> {
    let mut errors = Vec::new();
    let volumes = pod.pointer("/spec/volumes").and_then(Value::as_array);
    for (i, volume) in volumes.into_iter().flatten().enumerate() {
        let at = format!("spec.volumes[{i}]");
        for (source, with_key) in [("secret", true), ("configMap", true), ("downwardAPI", false)] {
            if let Some(src) = volume.get(source) {
                check_mode(src.get("defaultMode"), &format!("{at}.{source}.defaultMode"), &mut errors);
                check_items(src.get("items"), &format!("{at}.{source}"), with_key, &mut errors);
            }
        }
        if let Some(projected) = volume.get("projected") {
            check_mode(projected.get("defaultMode"), &format!("{at}.projected.defaultMode"), &mut errors);
            let sources = projected.get("sources").and_then(Value::as_array);
            for (j, source) in sources.into_iter().flatten().enumerate() {
                let at = format!("{at}.projected.sources[{j}]");
                for (kind, with_key) in [("secret", true), ("configMap", true), ("downwardAPI", false)] {
                    if let Some(src) = source.get(kind) {
                        check_items(src.get("items"), &format!("{at}.{kind}"), with_key, &mut errors);
                    }
                }
                if let Some(token) = source.get("serviceAccountToken") {
                    check_path(token.get("path"), &format!("{at}.serviceAccountToken.path"), &mut errors);
                }
            }
        }
    }
    invalid("Pod", name, errors)
}

/// An update of a ConfigMap or Secret as upstream's ValidateConfigMapUpdate /
/// ValidateSecretUpdate allow it: a Secret's `type` never changes, and once `immutable` is
/// true neither it nor the data may change (422 naming each field).
pub fn validate_config_update(res: &Resource, name: &str, new: &Value, old: &Value) -> Result<(), StatusError> {
    // Absent, null and empty maps are the same data.
    let map = |v: &Value, field: &str| {
        v.get(field).filter(|d| !d.is_null() && d.as_object().is_none_or(|m| !m.is_empty())).cloned()
    };
    let mut errors = Vec::new();
    if res.plural == "secrets" && new.get("type") != old.get("type") {
        let shown = new.get("type").and_then(Value::as_str).unwrap_or_default();
        errors.push(format!("type: Invalid value: {shown:?}: field is immutable"));
    }
    if old.get("immutable").and_then(Value::as_bool) == Some(true) {
        const FORBIDDEN: &str = "Forbidden: field is immutable when `immutable` is set";
        if new.get("immutable").and_then(Value::as_bool) != Some(true) {
            errors.push(format!("immutable: {FORBIDDEN}"));
        }
        let fields: &[&str] = if res.plural == "secrets" { &["data"] } else { &["data", "binaryData"] };
        for field in fields {
            if map(new, field) != map(old, field) {
                errors.push(format!("{field}: {FORBIDDEN}"));
            }
        }
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(StatusError::invalid(format!("{} {name:?} is invalid: {}", res.kind, errors[0]))),
        _ => Err(StatusError::invalid(format!("{} {name:?} is invalid: [{}]", res.kind, errors.join(", ")))),
    }
}

/// A Secret's data as its `type` requires (upstream ValidateSecret): the docker config
/// types need their key holding JSON, basic-auth a username or password, ssh-auth a
/// private key, tls a certificate and key, a service-account token its account's name.
/// Secret contents never appear in a message.
pub fn validate_secret_type(name: &str, secret: &Value) -> Result<(), StatusError> {
    let data = secret.get("data").and_then(Value::as_object);
    let has = |key: &str| data.is_some_and(|d| d.contains_key(key));
    let decoded = |key: &str| -> Option<Vec<u8>> {
        data.and_then(|d| d.get(key))
            .and_then(Value::as_str)
            .and_then(|v| data_encoding::BASE64.decode(v.as_bytes()).ok())
    };
    let required = |path: String| format!("{path}: Required value");
    let mut errors = Vec::new();
    let json_key = |key: &str, errors: &mut Vec<String>| {
        if !has(key) {
            errors.push(required(format!("data[{key}]")));
        } else if let Err(e) =
            serde_json::from_slice::<serde_json::Map<String, Value>>(&decoded(key).unwrap_or_default())
        {
            errors.push(format!("data[{key}]: Invalid value: \"<secret contents redacted>\": {e}"));
        }
    };
    match secret.get("type").and_then(Value::as_str).unwrap_or("Opaque") {
        "kubernetes.io/dockerconfigjson" => json_key(".dockerconfigjson", &mut errors),
        "kubernetes.io/dockercfg" => json_key(".dockercfg", &mut errors),
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            errors.push(required("data[username]".into()));
            errors.push(required("data[password]".into()));
        }
        "kubernetes.io/ssh-auth" if decoded("ssh-privatekey").is_none_or(|k| k.is_empty()) => {
            errors.push(required("data[ssh-privatekey]".into()));
        }
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"] {
                if !has(key) {
                    errors.push(required(format!("data[{key}]")));
                }
            }
        }
        "kubernetes.io/service-account-token" => {
            let account =
                secret.pointer("/metadata/annotations/kubernetes.io~1service-account.name").and_then(Value::as_str);
            if account.is_none_or(str::is_empty) {
                errors.push(required("metadata.annotations[kubernetes.io/service-account.name]".into()));
            }
        }
        _ => {}
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(StatusError::invalid(format!("Secret {name:?} is invalid: {}", errors[0]))),
        _ => Err(StatusError::invalid(format!("Secret {name:?} is invalid: [{}]", errors.join(", ")))),
    }
}

/// A Secret as upstream's v1 defaulting and conversion leave it: `type` defaults to
/// `Opaque` (SetDefaults_Secret; kubectl sends it empty), and `stringData` is merged (see
/// [`merge_string_data`]).
pub fn secret_defaults(name: &str, secret: &mut Value) -> Result<(), StatusError> {
    if let Some(obj) = secret.as_object_mut() {
        let untyped = obj.get("type").is_none_or(|t| t.is_null() || t.as_str() == Some(""));
        if untyped {
            obj.insert("type".into(), Value::String("Opaque".into()));
        }
    }
    merge_string_data(name, secret)
}

/// A Secret's `stringData` merged into `data` (its values base64-encoded, overriding keys
/// `data` also has) and dropped: it is write-only and never stored, as upstream's v1
/// conversion does.
pub fn merge_string_data(name: &str, secret: &mut Value) -> Result<(), StatusError> {
    let Some(obj) = secret.as_object_mut() else { return Ok(()) };
    let Some(string_data) = obj.remove("stringData") else { return Ok(()) };
    let Value::Object(entries) = string_data else {
        if string_data.is_null() {
            return Ok(());
        }
        return Err(StatusError::invalid(format!(
            "Secret {name:?} is invalid: stringData: Invalid value: must be a map of strings"
        )));
    };
    let data = obj.entry("data").or_insert_with(|| Value::Object(serde_json::Map::new()));
    if data.is_null() {
        *data = Value::Object(serde_json::Map::new());
    }
    let Some(data) = data.as_object_mut() else {
        return Err(StatusError::invalid(format!("Secret {name:?} is invalid: data: Invalid value: must be a map")));
    };
    for (key, value) in entries {
        let Some(text) = value.as_str() else {
            return Err(StatusError::invalid(format!(
                "Secret {name:?} is invalid: stringData[{key}]: Invalid value: must be a string"
            )));
        };
        data.insert(key, Value::String(data_encoding::BASE64.encode(text.as_bytes())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn string_data_is_merged_into_data_overriding_and_never_kept() {
        let mut s = json!({"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "new", "c": "s3cr3t"}});
        merge_string_data("s", &mut s).unwrap();
        assert_eq!(s, json!({"data": {"a": "eA==", "b": "bmV3", "c": "czNjcjN0"}}));
        let mut only = json!({"stringData": {"k": "v"}});
        merge_string_data("s", &mut only).unwrap();
        assert_eq!(only, json!({"data": {"k": "dg=="}}));
        let mut untouched = json!({"data": {"a": "eA=="}});
        merge_string_data("s", &mut untouched).unwrap();
        assert_eq!(untouched, json!({"data": {"a": "eA=="}}));
        let err = merge_string_data("s", &mut json!({"stringData": {"k": 1}})).unwrap_err();
        assert!(err.message.contains("stringData[k]"), "{}", err.message);
    }

    #[test]
    fn secrets_hold_what_their_type_requires_and_contents_stay_out_of_messages() {
        let b64 = |s: &str| data_encoding::BASE64.encode(s.as_bytes());
        let ok =
            json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": b64(r#"{"auths":{}}"#)}});
        assert!(validate_secret_type("s", &ok).is_ok());
        let missing = json!({"type": "kubernetes.io/dockerconfigjson", "data": {}});
        assert_eq!(
            validate_secret_type("s", &missing).unwrap_err().message,
            "Secret \"s\" is invalid: data[.dockerconfigjson]: Required value"
        );
        let garbage =
            json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": b64("hunter2 {")}});
        let e = validate_secret_type("s", &garbage).unwrap_err();
        assert_eq!(e.code, axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        assert!(e.message.contains("<secret contents redacted>") && !e.message.contains("hunter2"), "{}", e.message);
        let tls = json!({"type": "kubernetes.io/tls", "data": {"tls.crt": b64("c")}});
        assert!(validate_secret_type("s", &tls).unwrap_err().message.contains("data[tls.key]: Required value"));
        let basic = json!({"type": "kubernetes.io/basic-auth", "data": {"password": ""}});
        assert!(validate_secret_type("s", &basic).is_ok(), "one of the two, even empty");
        let sa = json!({"type": "kubernetes.io/service-account-token", "metadata": {"annotations": {}}});
        assert!(
            validate_secret_type("s", &sa)
                .unwrap_err()
                .message
                .contains("metadata.annotations[kubernetes.io/service-account.name]: Required value")
        );
        assert!(validate_secret_type("s", &json!({"type": "Opaque"})).is_ok());
    }

    #[test]
    fn a_secret_without_a_type_is_opaque() {
        for mut s in [json!({}), json!({"type": ""}), json!({"type": null})] {
            secret_defaults("s", &mut s).unwrap();
            assert_eq!(s["type"], "Opaque");
        }
        let mut typed = json!({"type": "kubernetes.io/tls"});
        secret_defaults("s", &mut typed).unwrap();
        assert_eq!(typed["type"], "kubernetes.io/tls");
    }

    #[test]
    fn immutable_config_maps_and_secrets_keep_their_data_and_secrets_their_type() {
        let cms = super::super::resources::find("", "configmaps").unwrap();
        let secrets = super::super::resources::find("", "secrets").unwrap();
        let frozen = json!({"immutable": true, "data": {"a": "1"}});
        assert!(validate_config_update(cms, "c", &frozen, &frozen).is_ok(), "metadata-only changes pass");
        let changed = json!({"immutable": true, "data": {"a": "2"}});
        assert_eq!(
            validate_config_update(cms, "c", &changed, &frozen).unwrap_err().message,
            "ConfigMap \"c\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
        );
        let thawed = json!({"data": {"a": "2"}, "binaryData": {"b": "eA=="}});
        let e = validate_config_update(cms, "c", &thawed, &frozen).unwrap_err();
        assert_eq!(e.code, axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            e.message.contains("[immutable: Forbidden") && e.message.contains("binaryData: Forbidden"),
            "{}",
            e.message
        );
        let mutable = json!({"data": {"a": "1"}});
        assert!(validate_config_update(cms, "c", &thawed, &mutable).is_ok());
        let retyped = json!({"type": "kubernetes.io/tls", "data": {}});
        let opaque = json!({"type": "Opaque"});
        assert_eq!(
            validate_config_update(secrets, "s", &retyped, &opaque).unwrap_err().message,
            "Secret \"s\" is invalid: type: Invalid value: \"kubernetes.io/tls\": field is immutable"
        );
    }

    #[test]
    fn config_keys_as_upstream() {
        for ok in ["a", "key.name", "KEY_NAME", "key-name", ".hidden", "a..b"] {
            assert!(config_key_problems(ok).is_empty(), "{ok}");
        }
        for bad in ["../x", "a/b", "x y", ""] {
            assert!(config_key_problems(bad)[0].starts_with("a valid config key must consist of"), "{bad}");
        }
        assert_eq!(config_key_problems(".."), ["must not be '..'"]);
        assert_eq!(config_key_problems("."), ["must not be '.'"]);
        assert_eq!(config_key_problems("..hidden"), ["must not start with '..'"]);
        assert_eq!(config_key_problems(&"a".repeat(254)), ["must be no more than 253 characters"]);
    }

    #[test]
    fn setuid_modes_and_escaping_paths_are_refused_with_upstreams_messages() {
        let pod = json!({"spec": {"volumes": [
            {"name": "s", "secret": {"secretName": "x", "defaultMode": 3583,
                                      "items": [{"key": "k", "path": "../escape", "mode": 2541}]}},
            {"name": "p", "projected": {"defaultMode": 420, "sources": [
                {"configMap": {"name": "c", "items": [{"key": "k", "path": "/abs"}, {"key": "k", "path": "a/../../b"}]}},
                {"serviceAccountToken": {"path": "..token"}}]}}]}});
        let err = validate_pod_volumes("p", &pod).unwrap_err().message;
        for expected in [
            "spec.volumes[0].secret.defaultMode: Invalid value: 3583: must be a number between 0 and 0777 (octal), both inclusive",
            "spec.volumes[0].secret.items[0].path: Invalid value: \"../escape\": must not contain '..'",
            "spec.volumes[0].secret.items[0].mode: Invalid value: 2541: must be a number between 0 and 0777 (octal), both inclusive",
            "spec.volumes[1].projected.sources[0].configMap.items[0].path: Invalid value: \"/abs\": must be a relative path",
            "spec.volumes[1].projected.sources[0].configMap.items[1].path: Invalid value: \"a/../../b\": must not contain '..'",
            "spec.volumes[1].projected.sources[1].serviceAccountToken.path: Invalid value: \"..token\": must not start with '..'",
        ] {
            assert!(err.contains(expected), "missing {expected:?} in {err}");
        }
        let fine = json!({"spec": {"volumes": [{"name": "s", "secret": {"secretName": "x", "defaultMode": 511,
            "items": [{"key": "k", "path": "a/b", "mode": 0}]}}]}});
        assert!(validate_pod_volumes("p", &fine).is_ok());
    }
}
