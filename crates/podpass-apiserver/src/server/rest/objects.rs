//! What the API server does to every object on its way in, whatever its kind: server-set
//! metadata (`rest.BeforeCreate`/`BeforeUpdate`), the type check and the name rule its
//! strategy gives.

use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use serde_json::{Value, json};

use super::resources::Resource;
use crate::server::status::StatusError;
use crate::time::format_rfc3339;

/// Characters upstream uses for generated name suffixes (no vowels, no look-alikes).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A random suffix of `n` characters.
pub fn random_suffix(n: usize) -> Result<String, StatusError> {
    let mut bytes = vec![0u8; n];
    SystemRandom::new().fill(&mut bytes).map_err(|_| StatusError::internal("random source failed"))?;
    Ok(bytes.iter().map(|b| char::from(SUFFIX_ALPHABET[usize::from(*b) % SUFFIX_ALPHABET.len()])).collect())
}

/// The `metadata` object of a request body, or 400.
fn metadata_mut(object: &mut Value) -> Result<&mut serde_json::Map<String, Value>, StatusError> {
    if !object.is_object() {
        return Err(StatusError::bad_request("the body of the request must be a JSON object"));
    }
    let meta = object.as_object_mut().map(|o| o.entry("metadata").or_insert_with(|| json!({})));
    meta.and_then(Value::as_object_mut).ok_or_else(|| StatusError::bad_request("metadata must be an object"))
}

/// Checks `kind`/`apiVersion` of a body against the resource, filling them when absent.
pub fn check_type(res: &Resource, object: &mut Value) -> Result<(), StatusError> {
    let api_version = res.api_version();
    let obj = object
        .as_object_mut()
        .ok_or_else(|| StatusError::bad_request("the body of the request must be a JSON object"))?;
    match obj.get("kind").and_then(Value::as_str) {
        None => {
            obj.insert("kind".into(), json!(res.kind));
        }
        Some(k) if k == res.kind => {}
        Some(k) => {
            return Err(StatusError::bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({api_version}) for kind {k:?}, expected {:?}",
                res.kind
            )));
        }
    }
    match obj.get("apiVersion").and_then(Value::as_str) {
        None => {
            obj.insert("apiVersion".into(), json!(api_version));
        }
        Some(v) if v == api_version => {}
        Some(v) => {
            return Err(StatusError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )));
        }
    }
    Ok(())
}

/// Validates a name as the resource's strategy requires (namespaces: DNS label; RBAC:
/// path segment; others: DNS subdomain), with upstream-shaped messages.
pub fn validate_name(res: &Resource, name: &str) -> Result<(), StatusError> {
    match res.strategy.name_problem(name) {
        None => Ok(()),
        Some(problem) => invalid_metadata(
            res,
            name,
            format!("metadata.name: Invalid value: {}: {problem}", podpass_api::validation::quote(name)),
        ),
    }
}

/// A 422 for one field error of an object's metadata, worded and with `details.causes` as
/// every other 422 (`errors.NewInvalid`).
fn invalid_metadata(res: &Resource, name: &str, error: String) -> Result<(), StatusError> {
    match super::kinds::invalid(res.kind, name, vec![error.clone()]) {
        Err(mut e) => {
            e.message = format!("{} {name:?} is invalid: {error}", res.qualified_kind());
            Err(e)
        }
        Ok(()) => Ok(()),
    }
}

/// Server-set metadata for a new object in `namespace` at `now`: name (or generateName),
/// namespace, uid, creationTimestamp, generation; resourceVersion and deletion fields
/// cleared. Returns the name.
pub fn prepare_new(
    res: &Resource,
    namespace: Option<&str>,
    object: &mut Value,
    now: i64,
) -> Result<String, StatusError> {
    check_type(res, object)?;
    let meta = metadata_mut(object)?;
    let name = match meta.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
        Some(n) => n.to_owned(),
        None => match meta.get("generateName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            Some(prefix) => format!("{prefix}{}", random_suffix(5)?),
            None => {
                let required = "metadata.name: Required value: name or generateName is required";
                invalid_metadata(res, "", required.to_owned())?;
                return Err(StatusError::invalid(required));
            }
        },
    };
    validate_name(res, &name)?;
    match (namespace, meta.get("namespace").and_then(Value::as_str)) {
        (Some(url), Some(body)) if !body.is_empty() && body != url => {
            return Err(StatusError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        _ => {}
    }
    meta.insert("name".into(), json!(name));
    match namespace {
        Some(ns) => meta.insert("namespace".into(), json!(ns)),
        None => meta.remove("namespace"),
    };
    meta.insert("uid".into(), json!(podpass_token::claims::new_uuid_v4().map_err(StatusError::internal)?));
    meta.insert("creationTimestamp".into(), json!(format_rfc3339(now)));
    meta.insert("generation".into(), json!(1));
    for server_owned in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
        meta.remove(server_owned);
    }
    Ok(name)
}

/// Carries server-owned metadata of `old` into a replacement `new` (uid, creation time,
/// generation bumped when the spec changed); refuses a rename.
pub fn prepare_update(res: &Resource, old: &Value, new: &mut Value, name: &str) -> Result<(), StatusError> {
    check_type(res, new)?;
    let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let spec_changed = old.get("spec") != new.get("spec");
    let meta = metadata_mut(new)?;
    match meta.get("name").and_then(Value::as_str) {
        Some(n) if n != name => {
            return Err(StatusError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        _ => {}
    }
    meta.insert("name".into(), json!(name));
    // rest.BeforeUpdate: a namespaced object's namespace in the body must be the request's
    // (an empty one is filled in); it is never silently ignored. Cluster-scoped objects
    // have none (it is cleared below).
    if let Some(old_ns) = old_meta.get("namespace").and_then(Value::as_str)
        && let Some(ns) = meta.get("namespace").and_then(Value::as_str).filter(|ns| !ns.is_empty())
        && ns != old_ns
    {
        return Err(StatusError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    // ValidateObjectMetaUpdate: a uid the body states must be the object's.
    if let (Some(sent), Some(old_uid)) =
        (meta.get("uid").and_then(Value::as_str).filter(|u| !u.is_empty()), old_meta.get("uid").and_then(Value::as_str))
        && sent != old_uid
    {
        return Err(StatusError::invalid(format!(
            "{} {name:?} is invalid: metadata.uid: Invalid value: {sent:?}: field is immutable",
            res.kind
        )));
    }
    for kept in ["namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"] {
        match old_meta.get(kept) {
            Some(v) => meta.insert(kept.into(), v.clone()),
            None => meta.remove(kept),
        };
    }
    let generation = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
    meta.insert("generation".into(), json!(if spec_changed { generation + 1 } else { generation }));
    Ok(())
}

#[cfg(test)]
mod name_tests {
    use super::*;
    use crate::server::rest::resources::find;

    #[test]
    fn a_bad_name_is_a_422_with_its_cause_as_every_other() {
        let (Some(cms), Some(roles)) = (find("", "configmaps"), find("rbac.authorization.k8s.io", "roles")) else {
            panic!("configmaps and roles are served")
        };
        let long = "a".repeat(254);
        let Err(e) = validate_name(cms, &long) else { panic!("254 characters taken") };
        assert_eq!(e.code, axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            e.message.starts_with(&format!("ConfigMap {long:?} is invalid: metadata.name: Invalid value:")),
            "{}",
            e.message
        );
        let details = e.details.as_deref().cloned().unwrap_or_default();
        assert_eq!(details["causes"][0]["reason"], "FieldValueInvalid", "{details}");
        assert_eq!(details["causes"][0]["field"], "metadata.name", "{details}");
        assert_eq!(details["kind"], "ConfigMap");
        let Err(e) = validate_name(roles, "a/b") else { panic!("a slash taken") };
        assert!(e.message.starts_with("Role.rbac.authorization.k8s.io \"a/b\" is invalid"), "{}", e.message);
        assert_eq!(e.details.as_deref().map(|d| d["group"].clone()), Some(json!("rbac.authorization.k8s.io")));
    }
}
