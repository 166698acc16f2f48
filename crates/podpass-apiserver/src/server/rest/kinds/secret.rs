//! Secret (pkg/registry/core/secret): `type` defaults to `Opaque`, `stringData` is merged
//! into `data` and never stored, the data is validated by type (ValidateSecret), `type`
//! never changes and `immutable` freezes the data. Secret contents never appear in a
//! message.

use serde_json::{Value, json};

use super::super::table::{age_column, column, count, name_column, name_middle_age, text};
use super::projection::{immutability_errors, key_errors};
use super::{Printer, Strategy, invalid};
use crate::server::status::StatusError;

/// The secret strategy.
pub(crate) struct Secret;

/// Registered in the resource table.
pub(crate) static SECRET: Secret = Secret;

/// The resource.
pub(crate) const RESOURCE: super::Resource = super::Resource::stored(
    super::Names { group: "", kind: "Secret", plural: "secrets", singular: "secret" },
    &SECRET,
    &super::types::TypeOf::<k8s_openapi::api::core::v1::Secret>::NEW,
);

impl Strategy for Secret {
    fn default(&self, name: &str, object: &mut Value) -> Result<(), StatusError> {
        secret_defaults(name, object)
    }

    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        let mut errors = key_errors(object, &["data", "stringData"], false);
        errors.extend(type_errors(object));
        errors.extend(super::projection::secret_size_errors(object));
        invalid("Secret", name, errors)
    }

    fn validate_update(&self, name: &str, object: &Value, old: &Value) -> Result<(), StatusError> {
        let mut errors = key_errors(object, &["data", "stringData"], false);
        errors.extend(type_errors(object));
        errors.extend(super::projection::secret_size_errors(object));
        if object.get("type") != old.get("type") {
            let shown = object.get("type").and_then(Value::as_str).unwrap_or_default();
            errors.push(format!("type: Invalid value: {shown:?}: field is immutable"));
        }
        errors.extend(immutability_errors(object, old, &["data"]));
        invalid("Secret", name, errors)
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["type"]
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                column("Type", "string", "", "The type of data stored in the secret", 0),
                column("Data", "string", "", "The number of entries in the secret", 0),
                age_column(),
            ],
            |o, now| {
                let data = count(o, "/data") + count(o, "/stringData");
                name_middle_age(o, vec![json!(text(o, "/type")), json!(data)], now)
            },
        ))
    }
}

/// A Secret's data as its `type` requires (upstream ValidateSecret): the docker config
/// types need their key holding JSON, basic-auth a username or password, ssh-auth a
/// private key, tls a certificate and key, a service-account token its account's name.
/// Secret contents never appear in a message.
fn type_errors(secret: &Value) -> Vec<String> {
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
    errors
}

/// A Secret as upstream's v1 defaulting and conversion leave it: `type` defaults to
/// `Opaque` (SetDefaults_Secret; kubectl sends it empty), and `stringData` is merged (see
/// [`merge_string_data`]).
fn secret_defaults(name: &str, secret: &mut Value) -> Result<(), StatusError> {
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
fn merge_string_data(name: &str, secret: &mut Value) -> Result<(), StatusError> {
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
        assert!(SECRET.validate("s", &ok).is_ok());
        let missing = json!({"type": "kubernetes.io/dockerconfigjson", "data": {}});
        assert_eq!(
            SECRET.validate("s", &missing).unwrap_err().message,
            "Secret \"s\" is invalid: data[.dockerconfigjson]: Required value"
        );
        let garbage =
            json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": b64("hunter2 {")}});
        let e = SECRET.validate("s", &garbage).unwrap_err();
        assert_eq!(e.code, axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        assert!(e.message.contains("<secret contents redacted>") && !e.message.contains("hunter2"), "{}", e.message);
        let tls = json!({"type": "kubernetes.io/tls", "data": {"tls.crt": b64("c")}});
        assert!(SECRET.validate("s", &tls).unwrap_err().message.contains("data[tls.key]: Required value"));
        let basic = json!({"type": "kubernetes.io/basic-auth", "data": {"password": ""}});
        assert!(SECRET.validate("s", &basic).is_ok(), "one of the two, even empty");
        let sa = json!({"type": "kubernetes.io/service-account-token", "metadata": {"annotations": {}}});
        assert!(
            SECRET
                .validate("s", &sa)
                .unwrap_err()
                .message
                .contains("metadata.annotations[kubernetes.io/service-account.name]: Required value")
        );
        assert!(SECRET.validate("s", &json!({"type": "Opaque"})).is_ok());
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
    fn a_secrets_type_never_changes_and_immutable_freezes_its_data() {
        let opaque = json!({"type": "Opaque", "data": {}});
        let retyped = json!({"type": "kubernetes.io/basic-auth", "data": {"username": "eA=="}});
        assert_eq!(
            SECRET.validate_update("s", &retyped, &opaque).unwrap_err().message,
            "Secret \"s\" is invalid: type: Invalid value: \"kubernetes.io/basic-auth\": field is immutable"
        );
        let frozen = json!({"type": "Opaque", "immutable": true, "data": {"a": "eA=="}});
        let changed = json!({"type": "Opaque", "immutable": true, "data": {"a": "eQ=="}});
        assert!(SECRET.validate_update("s", &changed, &frozen).unwrap_err().message.contains("data: Forbidden"));
        assert!(SECRET.validate_update("s", &frozen, &frozen).is_ok());
    }
}
