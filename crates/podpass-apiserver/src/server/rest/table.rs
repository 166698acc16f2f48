//! Server-side printing (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`): the
//! columns kube-apiserver's printers give each kind (pkg/printers/internalversion), so
//! `kubectl get` looks as it does against any cluster. Every column is sent, the `-o wide`
//! ones with priority 1 (kubectl hides them otherwise); each row carries the object's
//! metadata as a PartialObjectMetadata (`includeObject=Metadata`, the default), the whole
//! object (`Object`) or nothing (`None`).

use serde_json::{Value, json};

use super::resources::Resource;
use crate::field::Field;

/// Whether `accept` asks for a Table (meta.k8s.io v1 or v1beta1) before plain JSON.
pub fn wants_table(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    for media in accept.split(',') {
        let mut parts = media.split(';').map(str::trim);
        let base = parts.next().unwrap_or("");
        let params: Vec<&str> = parts.collect();
        let table = params.contains(&"as=Table") && params.contains(&"g=meta.k8s.io");
        if base == "application/json" && table {
            return true;
        }
        if base == "application/json" || base == "*/*" {
            // Plain JSON comes first: the client prefers it.
            return false;
        }
    }
    false
}

/// `includeObject`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object in the rows.
    None,
    /// PartialObjectMetadata (the default).
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// From the query parameter (unknown values are upstream's 400).
    pub fn parse(value: Option<&str>) -> Result<Self, podpass_api::validation::FieldError> {
        match value {
            None | Some("" | "Metadata") => Ok(Self::Metadata),
            Some("None") => Ok(Self::None),
            Some("Object") => Ok(Self::Object),
            Some(other) => Err(podpass_api::validation::FieldError::not_supported_in_order(
                "includeObject",
                other,
                &["None", "Metadata", "Object"],
            )),
        }
    }
}

/// kube's duration.HumanDuration: how kubectl shows an age.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{days}d", hours / 24 / 365) };
    }
    format!("{}y", hours / 24 / 365)
}

pub(super) fn text<'a>(object: &'a Value, path: &str) -> &'a str {
    object.field(path).and_then(Value::as_str).unwrap_or("")
}

pub(super) fn or_none(s: &str) -> String {
    if s.is_empty() { "<none>".into() } else { s.to_owned() }
}

/// translateTimestampSince: the age of an RFC 3339 time, `<unknown>` when unset.
pub(super) fn age(object: &Value, path: &str, now: i64) -> String {
    match crate::time::parse_rfc3339(text(object, path)) {
        Some(t) => human_duration(now - t),
        None => "<unknown>".into(),
    }
}

pub(super) fn column(name: &str, kind: &str, format: &str, description: &str, priority: u8) -> Value {
    json!({"name": name, "type": kind, "format": format, "description": description, "priority": priority})
}

pub(super) fn name_column() -> Value {
    column("Name", "string", "name", "Name must be unique within a namespace.", 0)
}

pub(super) fn age_column() -> Value {
    column(
        "Age",
        "string",
        "",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
        0,
    )
}

/// `[name, middle…, age]`: the shape of most kinds' rows.
pub(super) fn name_middle_age(o: &Value, middle: Vec<Value>, now: i64) -> Vec<Value> {
    let mut cells = vec![json!(text(o, "/metadata/name"))];
    cells.extend(middle);
    cells.push(json!(age(o, "/metadata/creationTimestamp", now)));
    cells
}

pub(super) fn count(object: &Value, path: &str) -> usize {
    match object.field(path) {
        Some(Value::Array(a)) => a.len(),
        Some(Value::Object(m)) => m.len(),
        _ => 0,
    }
}

/// Columns and cells of `plural` (kube-apiserver's printers); `None`: the default table.
/// Name and Created At: roles' columns, and the default table of upstream's
/// TableConvertor for kinds without a printer.
pub(super) fn name_created_at() -> (Vec<Value>, Cells) {
    (
        vec![
            name_column(),
            column(
                "Created At",
                "date",
                "",
                "CreationTimestamp is a timestamp representing the server time when this object was created.",
                0,
            ),
        ],
        |o, _| vec![json!(text(o, "/metadata/name")), json!(text(o, "/metadata/creationTimestamp"))],
    )
}

/// The cells of one object's row at a time (Unix seconds).
pub(super) type Cells = fn(&Value, i64) -> Vec<Value>;

fn row_object(object: &Value, include: IncludeObject) -> Value {
    match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Object => object.clone(),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
    }
}

/// The Table of `objects` of `plural`, at `resource_version`.
pub fn table(res: &Resource, objects: &[Value], resource_version: &str, include: IncludeObject, now: i64) -> Value {
    let (columns, cells) = res.strategy.printer().unwrap_or_else(name_created_at);
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut row = json!({"cells": cells(o, now)});
            if include != IncludeObject::None {
                row["object"] = row_object(o, include);
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn events_show_their_name_only_wide_as_upstreams_printer() {
        let events = super::super::resources::find("", "events").unwrap();
        let t = table(events, &[], "1", IncludeObject::None, 0);
        let default: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["priority"] == 0)
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(default, ["Last Seen", "Type", "Reason", "Object", "Message"]);
    }

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        for (s, expected) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (8 * 3600, "8h"),
            (49 * 3600, "2d1h"),
            (10 * 86400, "10d"),
            (800 * 86400, "2y70d"),
            (3000 * 86400, "8y"),
        ] {
            assert_eq!(human_duration(s), expected, "{s}");
        }
    }

    #[test]
    fn table_is_asked_only_before_plain_json() {
        assert!(wants_table(Some(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        )));
        assert!(!wants_table(Some("application/json")));
        assert!(!wants_table(Some("application/json, application/json;as=Table;v=v1;g=meta.k8s.io")));
        assert!(!wants_table(None));
    }
}
