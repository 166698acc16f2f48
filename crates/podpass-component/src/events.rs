//! Events as client-go's recorder writes them (core/v1 Event: `involvedObject`, reason,
//! message, type, `source.component`, first and last timestamps, count 1), through the
//! controller's own client: an event is a write like any other, authorized and audited.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Api;
use kube::api::PostParams;

/// The object an event is about.
#[derive(Debug, Clone, Copy)]
pub struct Regarding<'a> {
    /// Its apiVersion.
    pub api_version: &'a str,
    /// Its kind.
    pub kind: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its UID (empty when not known).
    pub uid: &'a str,
}

/// Writes events for one component.
#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    component: String,
}

impl Recorder {
    /// A recorder writing as `component` (`replicaset-controller`) through `client`.
    pub fn new(client: kube::Client, component: &str) -> Self {
        Self { client, component: component.to_owned() }
    }

    /// A `Normal` event.
    pub async fn normal(&self, regarding: &Regarding<'_>, reason: &str, message: &str) {
        self.record(regarding, "Normal", reason, message).await;
    }

    /// A `Warning` event.
    pub async fn warning(&self, regarding: &Regarding<'_>, reason: &str, message: &str) {
        self.record(regarding, "Warning", reason, message).await;
    }

    /// Best effort, as client-go's: an event that cannot be written is logged, never an error
    /// of the work it reports.
    async fn record(&self, regarding: &Regarding<'_>, kind: &str, reason: &str, message: &str) {
        let now = jiff::Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                // client-go: `<object>.<unix nanos in hex>`.
                name: Some(format!("{}.{:x}", regarding.name, now.as_nanosecond())),
                // client-go: a cluster-scoped object's events live in `default`.
                namespace: Some(
                    if regarding.namespace.is_empty() { "default" } else { regarding.namespace }.to_owned(),
                ),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some(regarding.api_version.to_owned()),
                kind: Some(regarding.kind.to_owned()),
                namespace: (!regarding.namespace.is_empty()).then(|| regarding.namespace.to_owned()),
                name: Some(regarding.name.to_owned()),
                uid: (!regarding.uid.is_empty()).then(|| regarding.uid.to_owned()),
                ..Default::default()
            },
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            type_: Some(kind.to_owned()),
            source: Some(EventSource { component: Some(self.component.clone()), host: None }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            reporting_component: Some(self.component.clone()),
            ..Default::default()
        };
        let namespace = event.metadata.namespace.as_deref().unwrap_or("default");
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            tracing::warn!(reason, error = %e, "could not record an event");
        }
    }
}
