//! What becomes files on a node, validated as kube-apiserver does: ConfigMap and Secret keys
//! (`IsConfigMapKey`), and the volume sources that project them — item paths
//! (`ValidateLocalNonReservedPath`), file modes (`defaultMode`, item `mode`: 0 to 0777).
//! The node re-checks paths and masks modes whatever it is given; this keeps a tenant's
//! object from ever asking for a setuid file or a path outside its volume.

use serde_json::Value;

use super::invalid;
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

/// The keys of the maps `maps` of an object (ConfigMap: `data`, `binaryData`; Secret:
/// `data`, `stringData`); with `binary` set, a `binaryData` key also in `data` is refused.
pub(crate) fn key_errors(object: &Value, maps: &[&str], binary: bool) -> Vec<String> {
    let mut errors = Vec::new();
    for map in maps {
        for key in object.get(*map).and_then(Value::as_object).into_iter().flat_map(|m| m.keys()) {
            for problem in config_key_problems(key) {
                errors.push(format!("{map}[{key}]: Invalid value: {}: {problem}", quote(key)));
            }
        }
    }
    if binary
        && let (Some(data), Some(binary)) =
            (object.get("data").and_then(Value::as_object), object.get("binaryData").and_then(Value::as_object))
    {
        for key in binary.keys().filter(|k| data.contains_key(*k)) {
            errors.push(format!("data[{key}]: Invalid value: {}: duplicate of key present in binaryData", quote(key)));
        }
    }
    errors
}

/// `MaxSecretSize`: the most bytes of keys and values a Secret or ConfigMap holds (1 MiB).
pub(crate) const MAX_DATA_BYTES: usize = 1 << 20;

/// The bytes of keys and values in `maps` of `object` (`binary`: those maps' values are
/// base64, counted decoded, as upstream counts the `[]byte`).
fn data_bytes(object: &Value, maps: &[(&str, bool)]) -> usize {
    let mut total = 0usize;
    for (map, binary) in maps {
        for (key, value) in object.get(*map).and_then(Value::as_object).into_iter().flatten() {
            let text = value.as_str().unwrap_or_default();
            let len = if *binary {
                data_encoding::BASE64.decode_len(text.len()).unwrap_or(text.len())
                    - text.bytes().rev().take_while(|b| *b == b'=').count()
            } else {
                text.len()
            };
            total = total.saturating_add(key.len()).saturating_add(len);
        }
    }
    total
}

/// `ValidateSecret`'s size rule: `data` past [`MAX_DATA_BYTES`] is too long.
pub(crate) fn secret_size_errors(object: &Value) -> Vec<String> {
    // stringData is merged into data before validation; counted in case it is not yet.
    let total = data_bytes(object, &[("data", true), ("stringData", false)]);
    if total > MAX_DATA_BYTES {
        return vec![format!("data: Too long: may not be more than {MAX_DATA_BYTES} bytes")];
    }
    Vec::new()
}

/// `ValidateConfigMap`'s size rule: the whole object's data past [`MAX_DATA_BYTES`].
pub(crate) fn config_map_size_errors(object: &Value) -> Vec<String> {
    let total = data_bytes(object, &[("data", false), ("binaryData", true)]);
    if total > MAX_DATA_BYTES {
        return vec![format!("[]: Too long: may not be more than {MAX_DATA_BYTES} bytes")];
    }
    Vec::new()
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

/// Once `immutable` is true neither it nor the data fields `fields` may change
/// (ValidateConfigMapUpdate / ValidateSecretUpdate): the errors, upstream's words.
pub(crate) fn immutability_errors(new: &Value, old: &Value, fields: &[&str]) -> Vec<String> {
    // Absent, null and empty maps are the same data.
    let map = |v: &Value, field: &str| {
        v.get(field).filter(|d| !d.is_null() && d.as_object().is_none_or(|m| !m.is_empty())).cloned()
    };
    let mut errors = Vec::new();
    if old.get("immutable").and_then(Value::as_bool) == Some(true) {
        const FORBIDDEN: &str = "Forbidden: field is immutable when `immutable` is set";
        if new.get("immutable").and_then(Value::as_bool) != Some(true) {
            errors.push(format!("immutable: {FORBIDDEN}"));
        }
        for field in fields {
            if map(new, field) != map(old, field) {
                errors.push(format!("{field}: {FORBIDDEN}"));
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

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
