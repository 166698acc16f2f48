//! The scheduling loop (kube-scheduler's `scheduleOne`, on one goroutine): pods, nodes,
//! node leases, and the Services and ReplicaSets spreading counts by, watched into the
//! [`Cluster`]; after each batch of events every pending pod
//! is tried — bound through `pods/binding` with a `Scheduled` event, or marked
//! `PodScheduled=False` (`Unschedulable`, upstream's FitError message) with one
//! `FailedScheduling` event per new message — and pending pods are tried again every
//! [`RETRY_UNSCHEDULABLE`] even when nothing is seen to change. Nothing is decided while a
//! watch is (re)listing: a half-known cluster would overcommit a node.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DynamicObject, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use podpass_component::events::{Recorder, Regarding};
use serde::Serialize;
use serde_json::{Value, json};

use crate::cluster::{Change, Cluster, Place, SCHEDULER_NAME, Unschedulable, text, wants_scheduling};

/// Unschedulable pods are tried again this often even when nothing is seen to change.
pub const RETRY_UNSCHEDULABLE: Duration = Duration::from_secs(5);
/// The namespace of node leases.
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// Lost compare-and-swaps a status write retries on the latest pod.
const STATUS_RETRIES: usize = 5;

/// Which of the watches an event came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    Pods,
    Nodes,
    Leases,
    /// Services and ReplicaSets: the selectors spreading spreads by.
    Services,
    ReplicaSets,
}

/// A watch event as JSON, tagged with its watch.
type Tagged = (Source, Result<watcher::Event<Value>, watcher::Error>);

fn as_value<K: Serialize>(event: watcher::Event<K>) -> watcher::Event<Value> {
    let value = |k: K| serde_json::to_value(k).unwrap_or(Value::Null);
    match event {
        watcher::Event::Apply(k) => watcher::Event::Apply(value(k)),
        watcher::Event::Delete(k) => watcher::Event::Delete(value(k)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(k) => watcher::Event::InitApply(value(k)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// The watches, tagged and merged.
fn watches(client: &Client) -> impl futures::Stream<Item = Tagged> + Send + use<> {
    let config = watcher::Config::default;
    let pods =
        watcher(Api::<Pod>::all(client.clone()), config()).default_backoff().map(|e| (Source::Pods, e.map(as_value)));
    let nodes =
        watcher(Api::<Node>::all(client.clone()), config()).default_backoff().map(|e| (Source::Nodes, e.map(as_value)));
    let leases = watcher(Api::<Lease>::namespaced(client.clone(), NODE_LEASE_NAMESPACE), config())
        .default_backoff()
        .map(|e| (Source::Leases, e.map(as_value)));
    let services = watcher(Api::<Service>::all(client.clone()), config())
        .default_backoff()
        .map(|e| (Source::Services, e.map(as_value)));
    let replica_sets = watcher(Api::<ReplicaSet>::all(client.clone()), config())
        .default_backoff()
        .map(|e| (Source::ReplicaSets, e.map(as_value)));
    let selectors = futures::stream::select(services, replica_sets);
    futures::stream::select(futures::stream::select(futures::stream::select(pods, nodes), leases), selectors)
}

/// What the loop knows beyond the cluster: which watches are listed.
#[derive(Default)]
struct Listed {
    pods: bool,
    nodes: bool,
    leases: bool,
    services: bool,
    replica_sets: bool,
}

impl Listed {
    fn all(&self) -> bool {
        self.pods && self.nodes && self.leases && self.services && self.replica_sets
    }

    fn set(&mut self, source: Source, listed: bool) {
        match source {
            Source::Pods => self.pods = listed,
            Source::Nodes => self.nodes = listed,
            Source::Leases => self.leases = listed,
            Source::Services => self.services = listed,
            Source::ReplicaSets => self.replica_sets = listed,
        }
    }
}

fn take_in(cluster: &mut Cluster, listed: &mut Listed, (source, event): Tagged) {
    let event = match event {
        Ok(event) => event,
        Err(e) => {
            tracing::debug!(error = %e, "scheduler: watch error; it resumes with back-off");
            return;
        }
    };
    let apply = |cluster: &mut Cluster, change: Change, object: Value| match source {
        Source::Pods => cluster.pod_event(change, object),
        Source::Nodes => cluster.node_event(change, object),
        Source::Leases => cluster.lease_event(change, &object),
        Source::Services => cluster.selector_event("Service", change, &object),
        Source::ReplicaSets => cluster.selector_event("ReplicaSet", change, &object),
    };
    match event {
        watcher::Event::Init => {
            listed.set(source, false);
            match source {
                Source::Pods => cluster.forget_pods(),
                Source::Nodes => cluster.nodes.clear(),
                Source::Leases => cluster.renewed.clear(),
                Source::Services => cluster.forget_selectors("Service"),
                Source::ReplicaSets => cluster.forget_selectors("ReplicaSet"),
            }
        }
        watcher::Event::InitApply(o) | watcher::Event::Apply(o) => apply(cluster, Change::Applied, o),
        watcher::Event::Delete(o) => apply(cluster, Change::Deleted, o),
        watcher::Event::InitDone => listed.set(source, true),
    }
}

/// Schedules until the watches end (never, as they retry) or the task is dropped.
pub async fn run(client: Client) {
    let recorder = Recorder::new(client.clone(), SCHEDULER_NAME);
    let mut events = std::pin::pin!(watches(&client));
    let mut cluster = Cluster::default();
    let mut listed = Listed::default();
    let mut tick = tokio::time::interval(RETRY_UNSCHEDULABLE);
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(event) => take_in(&mut cluster, &mut listed, event),
                None => return,
            },
            _ = tick.tick() => {}
        }
        // Everything already delivered is taken in before deciding, so a burst of pods is
        // spread over the nodes as the placements accumulate.
        while let Some(Some(event)) = events.next().now_or_never_ready() {
            take_in(&mut cluster, &mut listed, event);
        }
        if listed.all() {
            schedule_pending(&client, &recorder, &mut cluster).await;
        }
    }
}

/// The value of a future that is ready now, without waiting.
trait NowOrNever: std::future::Future + Sized {
    fn now_or_never_ready(self) -> Option<Self::Output> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match std::pin::pin!(self).poll(&mut cx) {
            std::task::Poll::Ready(value) => Some(value),
            std::task::Poll::Pending => None,
        }
    }
}

impl<F: std::future::Future> NowOrNever for F {}

/// Tries every pending pod once. A pod still refused for the same reason costs one fit
/// check and no copy or write.
async fn schedule_pending(client: &Client, recorder: &Recorder, cluster: &mut Cluster) {
    let now = jiff::Timestamp::now().as_second();
    let keys: Vec<(String, String)> = cluster.pending.keys().cloned().collect();
    for key in keys {
        let Some(pod) = cluster.pending.get(&key) else { continue };
        let choice = cluster.choose(pod, now);
        if let Err(Unschedulable(message)) = &choice
            && cluster.reported.get(&key) == Some(message)
        {
            continue;
        }
        let pod = pod.clone();
        let regarding = |pod: &Value| (text(pod, "/metadata/uid").to_owned(), key.clone());
        let (uid, (ns, name)) = regarding(&pod);
        let about = Regarding { api_version: "v1", kind: "Pod", namespace: &ns, name: &name, uid: &uid };
        match choice {
            Ok(node) => match bind(client, &ns, &name, &uid, &node).await {
                Ok(()) => {
                    tracing::info!(pod = %format!("{ns}/{name}"), %node, "scheduled");
                    cluster.place(&key, Some(Place::of(&pod, node.clone())));
                    cluster.pending.remove(&key);
                    cluster.reported.remove(&key);
                    let message = format!("Successfully assigned {ns}/{name} to {node}");
                    recorder.normal(&about, "Scheduled", &message).await;
                }
                // Bound or changed meanwhile: the pod's next watch event says what it is now.
                Err(e) => {
                    tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "binding failed");
                    cluster.pending.remove(&key);
                }
            },
            Err(Unschedulable(message)) => {
                if mark_unschedulable(client, &ns, &name, &message).await {
                    recorder.warning(&about, "FailedScheduling", &message).await;
                }
                cluster.reported.insert(key, message);
            }
        }
    }
}

/// `pods/binding` of the pod (its UID a precondition, as kube-scheduler's binder sends it).
async fn bind(client: &Client, ns: &str, name: &str, uid: &str, node: &str) -> Result<(), kube::Error> {
    let binding = Binding {
        metadata: ObjectMeta { name: Some(name.to_owned()), uid: Some(uid.to_owned()), ..Default::default() },
        target: ObjectReference { kind: Some("Node".into()), name: Some(node.to_owned()), ..Default::default() },
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let _: Value = pods.create_subresource("binding", name, &PostParams::default(), &binding).await?;
    Ok(())
}

/// Sets `PodScheduled=False`, reason `Unschedulable`, on `pod`'s status, keeping the
/// transition time when the status stays False; whether anything changed.
fn set_unschedulable(pod: &mut Value, message: &str, now: &str) -> bool {
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    let Some(conditions) = pod["status"]["conditions"].as_array_mut() else { return false };
    let mut next = json!({"type": "PodScheduled", "status": "False", "lastProbeTime": null,
        "lastTransitionTime": now, "reason": "Unschedulable", "message": message});
    match conditions.iter_mut().find(|c| c["type"] == "PodScheduled") {
        None => {
            conditions.push(next);
            true
        }
        Some(existing) => {
            if existing["status"] == "False" {
                next["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            }
            let changed = *existing != next;
            *existing = next;
            changed
        }
    }
}

/// Writes `PodScheduled=False` (an update of `/status` on the latest pod, as
/// kube-scheduler's status update); true when the pod's status changed.
async fn mark_unschedulable(client: &Client, ns: &str, name: &str, message: &str) -> bool {
    let resource = kube::discovery::ApiResource::erase::<Pod>(&());
    let pods: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    for _ in 0..STATUS_RETRIES {
        let Ok(Ok(mut pod)) = pods.get(name).await.map(serde_json::to_value) else { return false };
        if !wants_scheduling(&pod) || !set_unschedulable(&mut pod, message, &now) {
            return false;
        }
        let Ok(pod) = serde_json::from_value::<DynamicObject>(pod) else { return false };
        match pods.replace_status(name, &PostParams::default(), &pod).await {
            Ok(_) => return true,
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => {
                tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "scheduler: status update failed");
                return false;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unschedulable_condition_keeps_its_transition_time_and_is_written_once_per_message() {
        let mut pod = json!({"status": {"phase": "Pending"}});
        assert!(set_unschedulable(&mut pod, "0/1 nodes are available: 1 Too many pods.", "2026-12-02T10:00:00Z"));
        assert!(!set_unschedulable(&mut pod, "0/1 nodes are available: 1 Too many pods.", "2026-12-02T10:00:05Z"));
        assert!(set_unschedulable(&mut pod, "0/2 nodes are available: 2 Too many pods.", "2026-12-02T10:00:09Z"));
        let condition = &pod["status"]["conditions"][0];
        assert_eq!(condition["lastTransitionTime"], "2026-12-02T10:00:00Z");
        assert_eq!(condition["reason"], "Unschedulable");
        assert_eq!(
            crate::cluster::pod_key(&json!({"metadata": {"namespace": "a", "name": "b"}})),
            ("a".to_owned(), "b".to_owned())
        );
    }
}
