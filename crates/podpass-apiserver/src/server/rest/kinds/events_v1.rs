//! `events.k8s.io/v1` Events: another version of the core Events, stored once (as
//! upstream, whose internal Event serves both groups). Reads convert the stored core/v1
//! object into the events.k8s.io/v1 shape; writes convert back, after the stricter
//! validation upstream applies to writes through this group (`ValidateEventCreate` for
//! events.k8s.io/v1: an event time, a reporting controller and instance, an action and a
//! reason, a type of Normal or Warning, none of the deprecated fields, and a series counted
//! from 2 with its last observed time); updates through it as `ValidateEventUpdate` for
//! events.k8s.io/v1: only the series (and metadata) may change.

use serde_json::{Map, Value, json};

use super::{Conversion, invalid};
use crate::server::status::StatusError;

/// Field names that differ: (events.k8s.io/v1, core/v1).
const RENAMED: [(&str, &str); 8] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    // The same name in both; listed so a stray core name in a body cannot slip through.
    ("reportingInstance", "reportingInstance"),
];

/// The events.k8s.io/v1 view of core Events.
pub(crate) struct EventsV1;

/// Registered in the resource table.
pub(crate) static EVENTS_V1: EventsV1 = EventsV1;

/// The resource: events.k8s.io/v1 Event, served from the core Events' storage.
pub(crate) const RESOURCE: super::Resource = super::Resource::stored(
    super::Names { group: "events.k8s.io", kind: "Event", plural: "events", singular: "event" },
    &super::event::EVENT,
    &super::types::TypeOf::<k8s_openapi::api::events::v1::Event>::NEW,
)
.with_short_names(&["ev"])
.converted(&EVENTS_V1);

fn rename(object: Value, from_served: bool, api_version: &str) -> Value {
    let Value::Object(map) = object else { return object };
    let mut out = Map::with_capacity(map.len());
    for (key, value) in map {
        let renamed = RENAMED.iter().find_map(|(served, stored)| {
            if from_served { (key == *served).then_some(*stored) } else { (key == *stored).then_some(*served) }
        });
        // A field of the other version's name has no place in this one: dropped, as a
        // typed decoder drops unknown fields.
        let foreign = RENAMED.iter().any(|(served, stored)| {
            if from_served { key == *stored && stored != served } else { key == *served && stored != served }
        });
        match renamed {
            Some(name) => {
                out.insert(name.to_owned(), value);
            }
            None if foreign => {}
            None => {
                out.insert(key, value);
            }
        }
    }
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    Value::Object(out)
}

fn text<'a>(object: &'a Value, key: &str) -> &'a str {
    object.get(key).and_then(Value::as_str).unwrap_or_default()
}

impl Conversion for EventsV1 {
    fn stored_group(&self) -> &'static str {
        ""
    }

    fn to_stored(&self, object: Value) -> Value {
        rename(object, true, "v1")
    }

    fn to_served(&self, object: Value) -> Value {
        rename(object, false, "events.k8s.io/v1")
    }

    fn validate(&self, name: &str, served: &Value) -> Result<(), StatusError> {
        let mut errors = Vec::new();
        let set = |key: &str| served.get(key).is_some_and(|v| !v.is_null());
        if !set("eventTime") {
            errors.push("eventTime: Required value".to_owned());
        }
        for key in ["reportingController", "reportingInstance", "action", "reason"] {
            let value = text(served, key);
            if value.is_empty() {
                errors.push(format!("{key}: Required value"));
            } else if key != "reportingController" && value.len() > 128 {
                errors.push(format!("{key}: Too long: may not be more than 128 bytes"));
            }
        }
        if text(served, "note").len() > 1024 {
            errors.push("note: Too long: may not be more than 1024 bytes".to_owned());
        }
        let kind = text(served, "type");
        if kind != "Normal" && kind != "Warning" {
            errors.push(format!("type: Invalid value: \"\": has invalid value: {kind}"));
        }
        for key in ["deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedSource"] {
            if set(key) && served.get(key) != Some(&json!({})) {
                errors.push(format!("{key}: Invalid value: \"\": needs to be unset"));
            }
        }
        if served.get("deprecatedCount").and_then(Value::as_i64).is_some_and(|c| c != 0) {
            errors.push("deprecatedCount: Invalid value: \"\": needs to be unset".to_owned());
        }
        errors.extend(series_errors(served));
        invalid("Event.events.k8s.io", name, errors)
    }

    fn validate_update(&self, name: &str, stored: &Value, current: &Value) -> Result<(), StatusError> {
        let mut errors = Vec::new();
        if stored.get("series") != current.get("series") {
            errors.extend(series_errors(stored));
        }
        // Upstream validates its internal (core-shaped) Event, so the paths are core names.
        for key in IMMUTABLE {
            let value = stored.get(key).filter(|v| !v.is_null());
            if value != current.get(key).filter(|v| !v.is_null()) {
                let shown = match value {
                    Some(Value::String(s)) => podpass_api::validation::quote(s),
                    Some(other) => other.to_string(),
                    None => "null".to_owned(),
                };
                errors.push(format!("{key}: Invalid value: {shown}: field is immutable"));
            }
        }
        invalid("Event.events.k8s.io", name, errors)
    }
}

/// What ValidateEventUpdate keeps as it was (core/v1 names), in upstream's order.
const IMMUTABLE: [&str; 13] = [
    "involvedObject",
    "reason",
    "message",
    "source",
    "firstTimestamp",
    "lastTimestamp",
    "count",
    "type",
    "eventTime",
    "action",
    "related",
    "reportingComponent",
    "reportingInstance",
];

/// validateV1EventSeries: a series has happened at least twice, and says when last.
fn series_errors(event: &Value) -> Vec<String> {
    let Some(series) = event.get("series").filter(|s| !s.is_null()) else { return Vec::new() };
    let mut errors = Vec::new();
    if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
        errors.push("series.count: Invalid value: \"\": should be at least 2".to_owned());
    }
    if series.get("lastObservedTime").is_none_or(Value::is_null) {
        errors.push("series.lastObservedTime: Required value".to_owned());
    }
    errors
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn served() -> Value {
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e", "namespace": "ns"},
               "eventTime": "2026-11-25T10:00:00.000000Z", "reportingController": "podpass.dev/scheduler",
               "reportingInstance": "scheduler-1", "action": "Binding", "reason": "Scheduled", "type": "Normal",
               "regarding": {"kind": "Pod", "name": "web", "namespace": "ns"}, "note": "assigned ns/web to n1",
               "series": {"count": 2, "lastObservedTime": "2026-11-25T10:01:00.000000Z"}})
    }

    #[test]
    fn an_event_round_trips_through_its_stored_core_form() {
        let stored = EVENTS_V1.to_stored(served());
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(stored["involvedObject"]["name"], "web");
        assert_eq!(stored["message"], "assigned ns/web to n1");
        assert_eq!(stored["reportingComponent"], "podpass.dev/scheduler");
        assert!(stored.get("regarding").is_none() && stored.get("note").is_none());
        assert_eq!(EVENTS_V1.to_served(stored), served());
        // a core event's deprecated fields show under their events.k8s.io names
        let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "k"}, "count": 3,
                          "source": {"component": "kubelet"}, "firstTimestamp": "2026-11-25T10:00:00Z"});
        let seen = EVENTS_V1.to_served(core);
        assert_eq!(seen["deprecatedCount"], 3);
        assert_eq!(seen["deprecatedSource"]["component"], "kubelet");
        assert_eq!(seen["deprecatedFirstTimestamp"], "2026-11-25T10:00:00Z");
    }

    #[test]
    fn writes_through_events_k8s_io_are_validated_strictly() {
        assert!(EVENTS_V1.validate("e", &served()).is_ok());
        let bare = json!({"metadata": {"name": "e"}, "type": "Info", "deprecatedCount": 4});
        let message = EVENTS_V1.validate("e", &bare).unwrap_err().message;
        for expected in [
            "eventTime: Required value",
            "reportingController: Required value",
            "action: Required value",
            "type: Invalid value: \"\": has invalid value: Info",
            "deprecatedCount: Invalid value: \"\": needs to be unset",
        ] {
            assert!(message.contains(expected), "{expected} missing from {message}");
        }
        assert!(message.starts_with("Event.events.k8s.io \"e\" is invalid: ["), "{message}");
        let mut once = served();
        once["series"] = json!({"count": 1});
        let message = EVENTS_V1.validate("e", &once).unwrap_err().message;
        assert!(message.contains("series.count: Invalid value: \"\": should be at least 2"), "{message}");
        assert!(message.contains("series.lastObservedTime: Required value"), "{message}");
    }

    #[test]
    fn updates_through_events_k8s_io_may_only_move_the_series() {
        let current = EVENTS_V1.to_stored(served());
        let mut next = served();
        next["series"] = json!({"count": 3, "lastObservedTime": "2026-11-25T10:02:00.000000Z"});
        next["metadata"]["labels"] = json!({"seen": "again"});
        assert!(EVENTS_V1.validate_update("e", &EVENTS_V1.to_stored(next.clone()), &current).is_ok());
        next["note"] = json!("rewritten");
        next["regarding"]["name"] = json!("other");
        next["series"] = json!({"count": 1, "lastObservedTime": "2026-11-25T10:02:00.000000Z"});
        let message = EVENTS_V1.validate_update("e", &EVENTS_V1.to_stored(next), &current).unwrap_err().message;
        assert!(message.contains(r#"message: Invalid value: "rewritten": field is immutable"#), "{message}");
        assert!(message.contains("involvedObject: Invalid value: {"), "{message}");
        assert!(message.contains("series.count"), "{message}");
        assert!(!message.contains("reason:"), "{message}");
    }
}
