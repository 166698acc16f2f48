//! Server-side apply and managed fields on every write (k8s.io/apiserver's field manager
//! over structured-merge-diff, here `podpass-merge`): create, update and patch record an
//! `Update` entry for their manager; `application/apply-patch+yaml` merges the applied
//! configuration, removes what the applier stopped applying, and conflicts with other
//! managers' fields unless forced.

mod list_types;
mod managed;
mod schema;

use axum::http::StatusCode;
use podpass_merge::{Conflicts, MergeError, Set, Updater, typed};
use serde_json::{Value, json};

use self::managed::{Managed, ManagerId};
use self::schema::schemas;
use super::resources::Resource;
use crate::server::status::StatusError;

/// The longest field manager name (upstream FieldManagerMaxLength).
const MAX_MANAGER_LENGTH: usize = 128;

/// The annotation kubectl's client-side apply keeps.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The name the write's changes are recorded under: `fieldManager`, else the User-Agent up
/// to its first `/` with unprintable characters dropped (upstream `managerOrUserAgent`).
/// A `fieldManager` too long or unprintable is a 422, as upstream's ValidateFieldManager.
pub(super) fn manager_name(
    options: &str,
    field_manager: Option<&str>,
    user_agent: &str,
) -> Result<String, StatusError> {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        let invalid = |detail: String| {
            StatusError::invalid(format!("{options}.meta.k8s.io \"\" is invalid: fieldManager: {detail}"))
        };
        if m.len() > MAX_MANAGER_LENGTH {
            return Err(invalid(format!("Too long: may not be more than {MAX_MANAGER_LENGTH} bytes")));
        }
        if m.chars().any(|c| c.is_control()) {
            return Err(invalid(format!("Invalid value: {m:?}: must only contain printable characters")));
        }
        return Ok(m.to_owned());
    }
    let mut name = String::new();
    for c in user_agent.split('/').next().unwrap_or_default().chars().filter(|c| !c.is_control()) {
        if name.len() + c.len_utf8() > MAX_MANAGER_LENGTH {
            break;
        }
        name.push(c);
    }
    Ok(name)
}

/// Decodes an apply body: YAML (JSON is YAML), one mapping, no deeper than the object
/// limit; a duplicate key is an error in Strict mode (checked by the caller).
pub(super) fn decode_apply_body(body: &[u8]) -> Result<Value, StatusError> {
    let value: Value =
        serde_yaml_ng::from_slice(body).map_err(|e| StatusError::bad_request(format!("error decoding YAML: {e}")))?;
    if !value.is_object() {
        return Err(StatusError::bad_request("error decoding YAML: the apply patch must be a mapping"));
    }
    super::check_depth(&value)?;
    Ok(value)
}

/// Server-side apply as the REST layer runs it before admission and storage, for fuzzing
/// and tools: `body` (an apply configuration, YAML or JSON) applied by `manager` to `live`
/// (`None`: created) as the resource `plural` of `group`, then recorded as an update by
/// `updater` on the result. Answers the object that would be written; `None` for a
/// resource the server does not serve.
#[cfg(any(test, feature = "fuzzing"))]
pub fn apply_configuration(
    group: &str,
    plural: &str,
    live: Option<&Value>,
    body: &[u8],
    manager: &str,
    force: bool,
) -> Option<Result<Value, StatusError>> {
    let res = super::resources::find(group, plural)?;
    Some((|| {
        let config = decode_apply_body(body)?;
        let mut object = match apply(res, false, live, &config, manager, force)? {
            Applied::Write(object) => object,
            Applied::Unchanged => live.cloned().unwrap_or(config),
        };
        let before = object.clone();
        track_update(res, false, &before, &mut object, "updater")?;
        Ok(object)
    })())
}

fn now() -> String {
    crate::time::format_rfc3339(podpass_token::now_unix())
}

fn set_managed_fields(object: &mut Value, managed: &Managed) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    match managed::encode(managed) {
        Some(entries) => {
            meta.insert("managedFields".into(), entries);
        }
        None => {
            meta.remove("managedFields");
        }
    }
}

/// Records a create, update or non-apply patch (upstream `FieldManager.Update`): `new`
/// (the object as the request made it, before defaults and admission) gets the managed
/// fields of `live` (`{}` for a create) plus an `Update` entry for `manager` owning what it
/// changed. managedFields sent in `new` replace the stored ones (an empty list resets
/// them); malformed ones are a 400 naming the field.
pub(super) fn track_update(
    res: &Resource,
    status_only: bool,
    live: &Value,
    new: &mut Value,
    manager: &str,
) -> Result<(), StatusError> {
    let s = schemas();
    let Some(kind) = s.kind(res.group, res.kind) else { return Ok(()) };
    let live_fields = live.pointer("/metadata/managedFields");
    let incoming = new.pointer("/metadata/managedFields");
    let mut managed = if status_only {
        managed::decode(live_fields).unwrap_or_default()
    } else if managed::is_reset(incoming) {
        Managed::default()
    } else {
        match managed::decode(incoming) {
            Err(e) => return Err(StatusError::bad_request(e.to_string())),
            Ok(m) if m.fields.is_empty() => managed::decode(live_fields).unwrap_or_default(),
            Ok(m) => m,
        }
    };
    if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    let updater = Updater::new(&s.schema, kind.root).ignoring(kind.reset(status_only));
    let version = res.api_version();
    const CURRENT: &str = "current-operation";
    if updater.update(live, new, &version, &mut managed.fields, CURRENT).is_err() {
        // UpdateNoErrors: a stored object the schema cannot walk keeps its entries.
        if let (Some(meta), Some(kept)) = (new.get_mut("metadata").and_then(Value::as_object_mut), live_fields) {
            meta.insert("managedFields".into(), kept.clone());
        }
        return Ok(());
    }
    managed::strip_meta(&mut managed);
    if let Some(vs) = managed.fields.remove(CURRENT) {
        let id = ManagerId {
            manager: manager.to_owned(),
            applied: false,
            api_version: version.clone(),
            subresource: sub(status_only),
        };
        let key = id.key();
        let set = match managed.fields.get(&key) {
            Some(previous) => vs.set.union(&previous.set),
            None => vs.set,
        };
        managed.fields.insert(key.clone(), podpass_merge::VersionedSet { set, api_version: version, applied: false });
        managed.times.insert(key, Some(now()));
    }
    managed::cap_update_managers(&mut managed);
    set_managed_fields(new, &managed);
    Ok(())
}

fn sub(status_only: bool) -> String {
    if status_only { "status".into() } else { String::new() }
}

/// The outcome of an apply.
pub(super) enum Applied {
    /// The object to store (changed, or only its managed fields changed).
    Write(Value),
    /// Nothing changed at all.
    Unchanged,
}

/// Applies `config` for `manager` to `live` (`None`: the object does not exist and is
/// created) as upstream's field manager does. A conflict is a 409 naming each field and
/// its manager, unless `force`; kubectl's first server-side apply of an object it applied
/// client-side takes the fields its last-applied annotation shows, without conflicts.
pub(super) fn apply(
    res: &Resource,
    status_only: bool,
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
) -> Result<Applied, StatusError> {
    let s = schemas();
    let version = res.api_version();
    let Some(kind) = s.kind(res.group, res.kind) else {
        return Err(StatusError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!("apply is not supported for {}", res.plural),
        ));
    };
    let sent = config.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    if sent != version {
        return Err(StatusError::bad_request(format!(
            "Incorrect version specified in apply patch. Specified patch version: {sent}, expected: {version}"
        )));
    }
    if config.get("kind").and_then(Value::as_str) != Some(res.kind) {
        return Err(StatusError::bad_request(format!(
            "Incorrect kind specified in apply patch. Specified patch kind: {}, expected: {}",
            config.get("kind").and_then(Value::as_str).unwrap_or_default(),
            res.kind
        )));
    }
    if config.pointer("/metadata/managedFields").is_some_and(|m| !m.is_null()) {
        return Err(StatusError::bad_request("metadata.managedFields must be nil"));
    }
    let empty = json!({"apiVersion": version, "kind": res.kind});
    let live = live.unwrap_or(&empty);
    let mut managed = managed::decode(live.pointer("/metadata/managedFields"))
        .map_err(|e| StatusError::internal(format!("failed to decode managed fields: {e}")))?;
    let key = ManagerId {
        manager: manager.to_owned(),
        applied: true,
        api_version: version.clone(),
        subresource: sub(status_only),
    }
    .key();
    let (root, updater) = (kind.root, Updater::new(&s.schema, kind.root).ignoring(kind.reset(status_only)));
    let mut fields = managed.fields.clone();
    let result = match updater.apply(live, config, &version, &mut fields, &key, force) {
        Err(MergeError::Conflicts(conflicts)) if manager == "kubectl" => {
            // lastAppliedManager: conflicts with what kubectl's client-side apply set are
            // the upgrade to server-side apply, not conflicts.
            let allowed = allowed_from_last_applied(live, &version, root);
            let rest = Conflicts(conflicts.0.into_iter().filter(|c| !allowed.has(&c.path)).collect());
            if !rest.0.is_empty() {
                return Err(conflict_error(&rest));
            }
            fields = managed.fields.clone();
            updater.apply(live, config, &version, &mut fields, &key, true)
        }
        other => other,
    };
    let merged = match result {
        Ok(merged) => merged,
        Err(MergeError::Conflicts(c)) => return Err(conflict_error(&c)),
        Err(MergeError::Invalid(e)) => {
            return Err(StatusError::bad_request(format!("failed to create typed patch object: {e}")));
        }
    };
    let changed = merged.is_some();
    let mut object = merged.unwrap_or_else(|| live.clone());
    managed.fields = fields;
    if changed {
        managed.times.insert(key, Some(now()));
    }
    managed::strip_meta(&mut managed);
    if manager == "kubectl" && last_applied(live).is_some() {
        // lastAppliedUpdater: the annotation follows what kubectl applies server-side.
        let mut applied = config.clone();
        if let Some(a) = applied.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
            a.remove(LAST_APPLIED);
        }
        let text = serde_json::to_string(&applied).unwrap_or_default();
        if let Some(a) = object.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
            a.insert(LAST_APPLIED.into(), Value::String(text));
        }
    }
    set_managed_fields(&mut object, &managed);
    if podpass_merge::values_equal(&object, live) {
        return Ok(Applied::Unchanged);
    }
    Ok(Applied::Write(object))
}

fn last_applied(live: &Value) -> Option<&str> {
    live.pointer("/metadata/annotations")?.get(LAST_APPLIED)?.as_str().filter(|s| !s.is_empty())
}

/// The fields kubectl's client-side apply owns (upstream `allowedConflictsFromLastApplied`):
/// those of the last-applied annotation whose values the live object still has.
fn allowed_from_last_applied(live: &Value, version: &str, root: usize) -> Set {
    let s = schemas();
    let Some(text) = last_applied(live) else { return Set::new() };
    let Ok(last) = serde_json::from_str::<Value>(text) else { return Set::new() };
    if last.get("apiVersion").and_then(Value::as_str) != Some(version) {
        return Set::new();
    }
    let (Ok(set), Ok(cmp)) = (
        typed::to_field_set(&s.schema, root, &last, typed::Duplicates::Tolerate),
        typed::compare(&s.schema, root, &last, live),
    ) else {
        return Set::new();
    };
    set.difference(&cmp.modified).difference(&cmp.added).difference(&cmp.removed)
}

/// 409 with upstream's message and one cause per field (upstream `NewConflictError`).
fn conflict_error(conflicts: &Conflicts) -> StatusError {
    let shown = |m: &str| ManagerId::parse(m).map_or_else(|| format!("{m:?}"), |id| id.display());
    let causes: Vec<Value> = conflicts
        .0
        .iter()
        .map(|c| json!({"type": "FieldManagerConflict", "message": format!("conflict with {}", shown(&c.manager)), "field": c.path.to_string()}))
        .collect();
    let message = match conflicts.0.as_slice() {
        [one] => format!("Apply failed with 1 conflict: conflict with {}: {}", shown(&one.manager), one.path),
        all => {
            let mut by_manager: std::collections::BTreeMap<String, Vec<String>> = Default::default();
            for c in all {
                by_manager.entry(shown(&c.manager)).or_default().push(format!("- {}", c.path));
            }
            let lines: Vec<String> = by_manager
                .into_iter()
                .flat_map(|(m, paths)| std::iter::once(format!("conflicts with {m}:")).chain(paths))
                .collect();
            format!("Apply failed with {} conflicts: {}", all.len(), lines.join("\n"))
        }
    };
    let mut e = StatusError::new(StatusCode::CONFLICT, "Conflict", message);
    e.details = Some(Box::new(json!({"causes": causes})));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_configuration_creates_conflicts_and_refuses_unknown_resources() {
        let body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: v\n";
        assert!(apply_configuration("", "nope", None, body, "m", false).is_none());
        let created = apply_configuration("", "configmaps", None, body, "a", false).unwrap().unwrap();
        assert_eq!(created["data"], json!({"k": "v"}));
        assert_eq!(created["metadata"]["managedFields"][0]["manager"], "a");
        let other = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: w\n";
        let err = apply_configuration("", "configmaps", Some(&created), other, "b", false).unwrap().unwrap_err();
        assert_eq!(
            (err.code.as_u16(), err.message.as_str()),
            (409, "Apply failed with 1 conflict: conflict with \"a\": .data.k")
        );
        let forced = apply_configuration("", "configmaps", Some(&created), other, "b", true).unwrap().unwrap();
        assert_eq!(forced["data"], json!({"k": "w"}));
        let broken = apply_configuration("", "configmaps", None, b"data: [", "a", false).unwrap().unwrap_err();
        assert_eq!(broken.code.as_u16(), 400, "{}", broken.message);
    }
}
