//! `events.k8s.io/v1` Events: another version of the core Events, stored once (as
//! upstream, whose internal Event serves both groups). Reads convert the stored core/v1
//! object into the events.k8s.io/v1 shape; writes convert back, after the stricter
//! validation upstream applies to writes through this group (`ValidateEventCreate` for
//! events.k8s.io/v1: an event time, a reporting controller and instance, an action and a
//! reason, a type of Normal or Warning, and none of the deprecated fields).

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
        invalid("Event.events.k8s.io", name, errors)
    }
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
    }
}
