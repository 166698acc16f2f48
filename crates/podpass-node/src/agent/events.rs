//! Events about pods, posted as the kubelet's recorder posts them (core/v1 Events, source
//! `kubelet` on this node, `involvedObject` the pod with the container's `fieldPath`). A
//! repeat of the same event (same object, field, type, reason and message) bumps its
//! `count` and `lastTimestamp` instead of creating another (client-go's EventCorrelator).

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};

/// Longest message posted; longer ones are cut at a character boundary.
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// Distinct events remembered per pod for counting repeats.
const MAX_REMEMBERED: usize = 128;

/// The event's place in the pod: `spec.containers{name}` or `spec.initContainers{name}`.
pub fn field_path(container: &str, init: bool) -> String {
    if init { format!("spec.initContainers{{{container}}}") } else { format!("spec.containers{{{container}}}") }
}

fn truncate(message: &str) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message.to_owned();
    }
    let mut end = MAX_MESSAGE_BYTES - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

type Key = (String, &'static str, String, String);
/// Per pod UID: each distinct event posted, with its name and count.
type Seen = HashMap<String, HashMap<Key, (String, i32)>>;

/// Posts events for this node's pods.
pub struct EventRecorder {
    client: kube::Client,
    node: String,
    seen: Mutex<Seen>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder").field("node", &self.node).finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// Events from `node`, posted through `client`.
    pub fn new(client: kube::Client, node: &str) -> Self {
        Self { client, node: node.to_owned(), seen: Mutex::new(HashMap::new()) }
    }

    fn remembered(&self, uid: &str, key: &Key) -> Option<(String, i32)> {
        self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(uid)?.get(key).cloned()
    }

    fn remember(&self, uid: &str, key: Key, name: String, count: i32) {
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let per_pod = seen.entry(uid.to_owned()).or_default();
        if per_pod.len() >= MAX_REMEMBERED && !per_pod.contains_key(&key) {
            per_pod.clear();
        }
        per_pod.insert(key, (name, count));
    }

    /// Forgets the events of a pod that is gone.
    pub fn forget_pod(&self, uid: &str) {
        self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(uid);
    }

    /// Records an event about `pod`; failures are logged, never fatal (as the kubelet's
    /// recorder drops what it cannot post).
    pub async fn record(&self, pod: &Pod, field_path: &str, event_type: &'static str, reason: &str, message: &str) {
        let (Some(ns), Some(name), Some(uid)) =
            (pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref(), pod.metadata.uid.as_deref())
        else {
            return;
        };
        let message = truncate(message);
        let now = Timestamp::now();
        let api = Api::<Event>::namespaced(self.client.clone(), ns);
        let key: Key = (field_path.to_owned(), event_type, reason.to_owned(), message.clone());
        if let Some((event_name, count)) = self.remembered(uid, &key) {
            let patch = serde_json::json!({"count": count + 1, "lastTimestamp": Time(now)});
            match api.patch(&event_name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {
                    self.remember(uid, key, event_name, count + 1);
                    return;
                }
                Err(e) => {
                    tracing::debug!(event = %event_name, error = %e, "updating a repeated event failed; creating one")
                }
            }
        }
        let event_name = format!("{name}.{:x}", now.as_nanosecond());
        let event = Event {
            metadata: ObjectMeta {
                name: Some(event_name.clone()),
                namespace: Some(ns.to_owned()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                kind: Some("Pod".into()),
                api_version: Some("v1".into()),
                namespace: Some(ns.to_owned()),
                name: Some(name.to_owned()),
                uid: Some(uid.to_owned()),
                resource_version: pod.metadata.resource_version.clone(),
                field_path: (!field_path.is_empty()).then(|| field_path.to_owned()),
            },
            reason: Some(reason.to_owned()),
            message: Some(message.clone()),
            type_: Some(event_type.to_owned()),
            source: Some(EventSource { component: Some("kubelet".into()), host: Some(self.node.clone()) }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: None::<MicroTime>,
            count: Some(1),
            reporting_component: Some("kubelet".into()),
            reporting_instance: Some(self.node.clone()),
            ..Default::default()
        };
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => self.remember(uid, key, event_name, 1),
            Err(e) => tracing::warn!(pod = %format!("{ns}/{name}"), reason, error = %e, "posting an event failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_paths_and_long_messages() {
        assert_eq!(field_path("app", false), "spec.containers{app}");
        assert_eq!(field_path("setup", true), "spec.initContainers{setup}");
        let long = "é".repeat(2000);
        let cut = truncate(&long);
        assert!(cut.len() <= MAX_MESSAGE_BYTES && cut.ends_with("..."));
        assert_eq!(truncate("short"), "short");
    }
}
