//! Events about pods, posted as the kubelet's recorder posts them (core/v1 Events, source
//! `kubelet` on this node, `involvedObject` the pod with the container's `fieldPath`). A
//! repeat of the same event (same object, field, type, reason and message) bumps its
//! `count` and `lastTimestamp` instead of creating another (client-go's EventCorrelator).
//! Recording queues the event and returns: a sync never waits on the API server for it.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::mpsc;

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

/// Events waiting to be posted at most (client-go's broadcaster: `maxQueuedEvents`); past
/// it an event is dropped, as the kubelet's recorder drops rather than blocks.
pub const MAX_QUEUED: usize = 1000;

/// One event as recorded, waiting for the sink.
struct Recorded {
    /// `Pod`, or `Node` for an event about the node itself.
    kind: &'static str,
    namespace: String,
    name: String,
    uid: String,
    resource_version: Option<String>,
    field_path: String,
    event_type: &'static str,
    reason: String,
    message: String,
    at: Timestamp,
}

enum Message {
    Record(Box<Recorded>),
    /// The pod is gone: forget its events, after those queued before.
    Forget(String),
}

/// Records events for this node's pods. Recording never waits for the API server (as
/// client-go's broadcaster): events queue, and one task posts them in order. Clones share
/// the queue.
#[derive(Clone)]
pub struct EventRecorder {
    queue: mpsc::Sender<Message>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder").finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// Events from `node`, posted through `client` by a task spawned here (it ends once
    /// the recorder is dropped and its queue is drained). Must be called within a tokio
    /// runtime.
    pub fn new(client: kube::Client, node: &str) -> Self {
        let (queue, rx) = mpsc::channel(MAX_QUEUED);
        let sink = Sink { client, node: node.to_owned(), seen: HashMap::new() };
        podpass_serve::spawn_named("events", sink.run(rx));
        Self { queue }
    }

    /// Forgets the events of a pod that is gone (once those queued before are posted).
    pub fn forget_pod(&self, uid: &str) {
        // Not dropped even when the queue is full: it is what bounds the sink's memory.
        let queue = self.queue.clone();
        let uid = uid.to_owned();
        if let Err(mpsc::error::TrySendError::Full(m)) = self.queue.try_send(Message::Forget(uid)) {
            tokio::spawn(tracing::Instrument::in_current_span(async move { queue.send(m).await.ok() }));
        }
    }

    /// Records an event about `pod` and returns at once; it is posted in the background,
    /// and dropped with a warning when [`MAX_QUEUED`] events already wait or when the post
    /// fails (as the kubelet's recorder drops what it cannot post).
    pub fn record(&self, pod: &Pod, field_path: &str, event_type: &'static str, reason: &str, message: &str) {
        let (Some(ns), Some(name), Some(uid)) =
            (pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref(), pod.metadata.uid.as_deref())
        else {
            return;
        };
        let recorded = Recorded {
            kind: "Pod",
            namespace: ns.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            resource_version: pod.metadata.resource_version.clone(),
            field_path: field_path.to_owned(),
            event_type,
            reason: reason.to_owned(),
            message: truncate(message),
            at: Timestamp::now(),
        };
        self.send(recorded);
    }

    /// Records an event about the node itself (namespace `default`, the Node as its
    /// involved object with the node's name as UID, as the kubelet's node reference).
    pub fn record_node(&self, node: &str, event_type: &'static str, reason: &str, message: &str) {
        self.send(Recorded {
            kind: "Node",
            namespace: "default".into(),
            name: node.to_owned(),
            uid: node.to_owned(),
            resource_version: None,
            field_path: String::new(),
            event_type,
            reason: reason.to_owned(),
            message: truncate(message),
            at: Timestamp::now(),
        });
    }

    fn send(&self, recorded: Recorded) {
        let (name, reason) = (format!("{}/{}", recorded.namespace, recorded.name), recorded.reason.clone());
        if let Err(e) = self.queue.try_send(Message::Record(Box::new(recorded))) {
            let why = match e {
                mpsc::error::TrySendError::Full(_) => "the event queue is full",
                mpsc::error::TrySendError::Closed(_) => "the event sink has stopped",
            };
            tracing::warn!(object = %name, reason, "dropping an event: {why}");
        }
    }
}

/// Posts queued events one at a time, in the order recorded.
struct Sink {
    client: kube::Client,
    node: String,
    seen: Seen,
}

impl Sink {
    async fn run(mut self, mut rx: mpsc::Receiver<Message>) {
        while let Some(message) = rx.recv().await {
            match message {
                Message::Record(r) => self.post(*r).await,
                Message::Forget(uid) => {
                    self.seen.remove(&uid);
                }
            }
        }
    }

    fn remember(&mut self, uid: &str, key: Key, name: String, count: i32) {
        let per_pod = self.seen.entry(uid.to_owned()).or_default();
        if per_pod.len() >= MAX_REMEMBERED && !per_pod.contains_key(&key) {
            per_pod.clear();
        }
        per_pod.insert(key, (name, count));
    }

    /// Posts one event; a repeat of one already posted bumps its count instead.
    async fn post(&mut self, r: Recorded) {
        let api = Api::<Event>::namespaced(self.client.clone(), &r.namespace);
        let key: Key = (r.field_path.clone(), r.event_type, r.reason.clone(), r.message.clone());
        if let Some((event_name, count)) = self.seen.get(&r.uid).and_then(|p| p.get(&key)).cloned() {
            let patch = serde_json::json!({"count": count + 1, "lastTimestamp": Time(r.at)});
            match api.patch(&event_name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {
                    self.remember(&r.uid, key, event_name, count + 1);
                    return;
                }
                Err(e) => {
                    tracing::debug!(event = %event_name, error = %e, "updating a repeated event failed; creating one")
                }
            }
        }
        let event_name = format!("{}.{:x}", r.name, r.at.as_nanosecond());
        let event = Event {
            metadata: ObjectMeta {
                name: Some(event_name.clone()),
                namespace: Some(r.namespace.clone()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                kind: Some(r.kind.into()),
                api_version: Some("v1".into()),
                namespace: (r.kind == "Pod").then(|| r.namespace.clone()),
                name: Some(r.name.clone()),
                uid: Some(r.uid.clone()),
                resource_version: r.resource_version.clone(),
                field_path: (!r.field_path.is_empty()).then(|| r.field_path.clone()),
            },
            reason: Some(r.reason.clone()),
            message: Some(r.message.clone()),
            type_: Some(r.event_type.to_owned()),
            source: Some(EventSource { component: Some("kubelet".into()), host: Some(self.node.clone()) }),
            first_timestamp: Some(Time(r.at)),
            last_timestamp: Some(Time(r.at)),
            event_time: None::<MicroTime>,
            count: Some(1),
            reporting_component: Some("kubelet".into()),
            reporting_instance: Some(self.node.clone()),
            ..Default::default()
        };
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => self.remember(&r.uid, key, event_name, 1),
            Err(e) => {
                tracing::warn!(pod = %format!("{}/{}", r.namespace, r.name), reason = r.reason, error = %e, "posting an event failed")
            }
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
