//! `metadata.managedFields` as the API carries it (upstream `internal/managedfields.go`,
//! `capmanagers.go`, `stripmeta.go`): entries decoded into the merge crate's managers keyed
//! by manager identifier, encoded back sorted, old update entries bucketed, server-owned
//! metadata never owned.

use podpass_api::validation::FieldError;
use std::collections::BTreeMap;

use podpass_merge::{ManagedFields, Path, Set, VersionedSet};
use serde_json::{Map, Value, json};

/// Update entries kept before the oldest are merged (upstream DefaultMaxUpdateManagers).
pub(super) const MAX_UPDATE_MANAGERS: usize = 10;

/// Entries one object may carry: far past real use (10 updaters plus appliers), short of a
/// body that makes every write walk thousands of sets.
pub(super) const MAX_ENTRIES: usize = 64;

/// Who changed what: a manager, its operation, the version (updates only) and the
/// subresource (upstream `BuildManagerIdentifier`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ManagerId {
    pub manager: String,
    pub applied: bool,
    pub api_version: String,
    pub subresource: String,
}

impl ManagerId {
    /// The identifier: the entry's JSON without fields, time or (for appliers) version, in
    /// Go's field order, as upstream keys managers.
    pub fn key(&self) -> String {
        let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
        let mut key = format!("{{\"manager\":{},\"operation\":{}", q(&self.manager), q(self.operation()));
        if !self.applied && !self.api_version.is_empty() {
            key.push_str(&format!(",\"apiVersion\":{}", q(&self.api_version)));
        }
        if !self.subresource.is_empty() {
            key.push_str(&format!(",\"subresource\":{}", q(&self.subresource)));
        }
        key.push('}');
        key
    }

    pub fn parse(key: &str) -> Option<Self> {
        let v: Value = serde_json::from_str(key).ok()?;
        let s = |f: &str| v.get(f).and_then(Value::as_str).unwrap_or_default().to_owned();
        Some(Self {
            manager: s("manager"),
            applied: s("operation") == "Apply",
            api_version: s("apiVersion"),
            subresource: s("subresource"),
        })
    }

    fn operation(&self) -> &'static str {
        if self.applied { "Apply" } else { "Update" }
    }

    /// As conflict messages name it (upstream `printManager`).
    pub fn display(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if !self.applied {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

/// Managers and the time each last changed the object.
#[derive(Debug, Clone, Default)]
pub(super) struct Managed {
    pub fields: ManagedFields,
    pub times: BTreeMap<String, Option<String>>,
}

/// Decodes `metadata.managedFields` (upstream `DecodeManagedFields`); what is wrong is
/// named by its field path.
pub(super) fn decode(entries: Option<&Value>) -> Result<Managed, FieldError> {
    let mut managed = Managed::default();
    let Some(entries) = entries.filter(|e| !e.is_null()) else { return Ok(managed) };
    let Value::Array(entries) = entries else {
        return Err(FieldError::invalid_unshown("metadata.managedFields", "must be a list"));
    };
    if entries.len() > MAX_ENTRIES {
        return Err(FieldError::too_many("metadata.managedFields", entries.len(), MAX_ENTRIES));
    }
    for (i, e) in entries.iter().enumerate() {
        let at = |f: &str| format!("metadata.managedFields[{i}].{f}");
        let s = |f: &str| e.get(f).and_then(Value::as_str).unwrap_or_default();
        let applied = match s("operation") {
            "Apply" => true,
            "Update" => false,
            other => return Err(FieldError::not_supported_in_order(&at("operation"), other, &["Apply", "Update"])),
        };
        if s("apiVersion").is_empty() {
            return Err(FieldError::required(&at("apiVersion"), "must not be empty"));
        }
        match s("fieldsType") {
            "FieldsV1" => {}
            "" => return Err(FieldError::required(&at("fieldsType"), "missing fieldsType")),
            other => return Err(FieldError::not_supported_in_order(&at("fieldsType"), other, &["FieldsV1"])),
        }
        let set = match e.get("fieldsV1") {
            None | Some(Value::Null) => Set::new(),
            Some(doc) => {
                Set::from_fields_v1(doc).map_err(|err| FieldError::invalid_unshown(&at("fieldsV1"), err.to_string()))?
            }
        };
        let id = ManagerId {
            manager: s("manager").to_owned(),
            applied,
            api_version: s("apiVersion").to_owned(),
            subresource: s("subresource").to_owned(),
        };
        let time = e.get("time").and_then(Value::as_str).map(str::to_owned);
        let key = id.key();
        managed.times.insert(key.clone(), time);
        managed.fields.insert(key, VersionedSet { set, api_version: id.api_version, applied });
    }
    Ok(managed)
}

/// Whether a request's managedFields ask to reset them (upstream `isResetManagedFields`):
/// an empty list, or one empty entry.
pub(super) fn is_reset(entries: Option<&Value>) -> bool {
    match entries {
        Some(Value::Array(a)) if a.is_empty() => true,
        Some(Value::Array(a)) if a.len() == 1 => a[0].as_object().is_some_and(Map::is_empty),
        _ => false,
    }
}

/// The entries to store, sorted as upstream (operation, time, manager, version,
/// subresource); `None` when no manager is left.
pub(super) fn encode(managed: &Managed) -> Option<Value> {
    let mut entries: Vec<(ManagerId, Option<&String>, Value)> = Vec::new();
    for (key, vs) in &managed.fields {
        let Some(mut id) = ManagerId::parse(key) else { continue };
        id.api_version = vs.api_version.clone();
        let time = managed.times.get(key).and_then(Option::as_ref);
        let mut e = Map::new();
        e.insert("manager".into(), json!(id.manager));
        e.insert("operation".into(), json!(id.operation()));
        e.insert("apiVersion".into(), json!(id.api_version));
        if let Some(t) = time {
            e.insert("time".into(), json!(t));
        }
        e.insert("fieldsType".into(), json!("FieldsV1"));
        e.insert("fieldsV1".into(), vs.set.to_fields_v1());
        if !id.subresource.is_empty() {
            e.insert("subresource".into(), json!(id.subresource));
        }
        entries.push((id, time, Value::Object(e)));
    }
    if entries.is_empty() {
        return None;
    }
    entries.sort_by(|(a, at, _), (b, bt, _)| {
        a.operation()
            .cmp(b.operation())
            .then_with(|| seconds(*at).cmp(&seconds(*bt)))
            .then_with(|| a.manager.cmp(&b.manager))
            .then_with(|| a.api_version.cmp(&b.api_version))
            .then_with(|| a.subresource.cmp(&b.subresource))
    });
    Some(Value::Array(entries.into_iter().map(|(_, _, e)| e).collect()))
}

fn seconds(t: Option<&String>) -> i64 {
    t.and_then(|t| crate::time::parse_rfc3339(t)).unwrap_or(0)
}

/// Paths the server owns, never a manager (upstream `stripMetaManager`).
fn strip_set() -> Set {
    let mut paths = vec![Path::fields(["apiVersion"]), Path::fields(["kind"]), Path::fields(["metadata"])];
    for f in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        paths.push(Path::fields(["metadata", f]));
    }
    Set::from_paths(paths)
}

/// Drops server-owned metadata from every manager, and managers left with nothing.
pub(super) fn strip_meta(managed: &mut Managed) {
    let strip = strip_set();
    for vs in managed.fields.values_mut() {
        vs.set = vs.set.difference(&strip);
    }
    managed.fields.retain(|_, vs| !vs.set.is_empty());
    managed.times.retain(|k, _| managed.fields.contains_key(k));
}

/// Merges the oldest update entries into per-version `ancient-changes` buckets until at
/// most [`MAX_UPDATE_MANAGERS`] remain (upstream `capUpdateManagers`).
pub(super) fn cap_update_managers(managed: &mut Managed) {
    let mut updaters: Vec<String> =
        managed.fields.iter().filter(|(_, vs)| !vs.applied).map(|(k, _)| k.clone()).collect();
    if updaters.len() <= MAX_UPDATE_MANAGERS {
        return;
    }
    updaters.sort_by(|a, b| {
        let (ta, tb) = (managed.times.get(a).and_then(Option::as_ref), managed.times.get(b).and_then(Option::as_ref));
        seconds(ta).cmp(&seconds(tb)).then_with(|| a.cmp(b))
    });
    let mut first_of_version: BTreeMap<String, String> = BTreeMap::new();
    let mut length = updaters.len();
    for manager in updaters {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let Some(vs) = managed.fields.get(&manager).cloned() else { continue };
        let time = managed.times.get(&manager).cloned().flatten();
        let bucket = ManagerId {
            manager: "ancient-changes".into(),
            applied: false,
            api_version: vs.api_version.clone(),
            subresource: String::new(),
        }
        .key();
        match first_of_version.get(&vs.api_version) {
            Some(first) => {
                if !managed.fields.contains_key(&bucket)
                    && let Some(s) = managed.fields.remove(first)
                {
                    managed.times.remove(first);
                    managed.fields.insert(bucket.clone(), s);
                }
                let merged = managed.fields.get(&bucket).map(|b| b.set.union(&vs.set)).unwrap_or(vs.set.clone());
                managed.fields.insert(bucket.clone(), VersionedSet { set: merged, ..vs });
                managed.fields.remove(&manager);
                managed.times.remove(&manager);
                managed.times.insert(bucket, time);
                length -= 1;
            }
            None => {
                first_of_version.insert(vs.api_version.clone(), manager);
            }
        }
    }
}
