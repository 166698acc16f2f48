//! Event, core/v1 (pkg/registry/core/event): the fields `kubectl describe` selects a pod's
//! events by (EventToSelectableFields) and upstream's printer. Events expire after
//! `--event-ttl` (`server/event_ttl.rs`).

use serde_json::{Value, json};

use super::super::table::{column, human_duration, text};
use super::{Printer, Strategy};

/// The event strategy.
pub(crate) struct Event;

/// Registered in the resource table.
pub(crate) static EVENT: Event = Event;

/// The resource.
pub(crate) const RESOURCE: super::Resource = super::Resource::stored(
    super::Names { group: "", kind: "Event", plural: "events", singular: "event" },
    &EVENT,
    &super::types::TypeOf::<k8s_openapi::api::core::v1::Event>::NEW,
)
.with_short_names(&["ev"]);

impl Strategy for Event {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ]
    }

    fn field_aliases(&self) -> &'static [(&'static str, &'static str)] {
        &[("source", "source.component")]
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                column("Last Seen", "string", "", "Time when last occurrence of this event was recorded", 0),
                column(
                    "Type",
                    "string",
                    "",
                    "Type of this event (Normal, Warning), new types could be added in the future.",
                    0,
                ),
                column(
                    "Reason",
                    "string",
                    "",
                    "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
                    0,
                ),
                column("Object", "string", "", "The object that this event is about.", 0),
                column("Subobject", "string", "", "The field of the object that this event is about.", 1),
                column(
                    "Source",
                    "string",
                    "",
                    "The component reporting this event. Should be a short machine understandable string.",
                    1,
                ),
                column("Message", "string", "", "A human-readable description of the status of this operation.", 0),
                column(
                    "First Seen",
                    "string",
                    "",
                    "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
                    1,
                ),
                column("Count", "string", "", "The number of times this event has occurred.", 1),
                // Upstream's event printer shows the name with -o wide only.
                column("Name", "string", "name", "Name must be unique within a namespace.", 1),
            ],
            event_cells,
        ))
    }
}

/// printEvent.
fn event_cells(event: &Value, now: i64) -> Vec<Value> {
    let first = ["/firstTimestamp", "/eventTime", "/metadata/creationTimestamp"]
        .iter()
        .find_map(|p| crate::time::parse_rfc3339(text(event, p)));
    let last = ["/series/lastObservedTime", "/lastTimestamp", "/eventTime"]
        .iter()
        .find_map(|p| crate::time::parse_rfc3339(text(event, p)))
        .or(first);
    let since = |t: Option<i64>| t.map_or_else(|| "<unknown>".to_owned(), |t| human_duration(now - t));
    let mut source = text(event, "/source/component").to_owned();
    if source.is_empty() {
        source = text(event, "/reportingComponent").to_owned();
    }
    if !text(event, "/source/host").is_empty() {
        source = format!("{source}, {}", text(event, "/source/host"));
    }
    let count = event["series"]["count"].as_i64().or_else(|| event["count"].as_i64()).unwrap_or(1);
    let object =
        format!("{}/{}", text(event, "/involvedObject/kind").to_lowercase(), text(event, "/involvedObject/name"));
    let last_seen = if count > 1 { format!("{} (x{count} over {})", since(last), since(first)) } else { since(last) };
    vec![
        json!(last_seen),
        json!(text(event, "/type")),
        json!(text(event, "/reason")),
        json!(object),
        json!(text(event, "/involvedObject/fieldPath")),
        json!(source),
        json!(text(event, "/message").trim()),
        json!(since(first)),
        json!(count),
        json!(text(event, "/metadata/name")),
    ]
}
