//! The scheduler (kube-scheduler's `default-scheduler`, run in the control plane): every pod
//! without a node whose `schedulerName` is `default-scheduler` is bound through
//! `pods/binding` to a node it fits (see [`fit`]), preferring the node with the fewest pods,
//! and gets a `Scheduled` event; a pod no node takes gets `PodScheduled=False` with reason
//! `Unschedulable`, upstream's FitError message and one `FailedScheduling` event per new
//! message, and is tried again when nodes change and every few seconds.
//!
//! It watches pods, nodes and the node leases (a node that neither renewed its lease nor
//! posted a Ready heartbeat within 50 s is unreachable, as the node lifecycle controller
//! taints it).

mod fit;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::AppState;
use super::rest::binding::{assign, set_condition};
use crate::field::Field;
use crate::store::{EventType, ListOptions, ObjectKey, StoreError, WatchEvent, WatchStream};
use fit::NodeState;

/// The scheduler's name: pods naming another are left to it.
pub const SCHEDULER_NAME: &str = "default-scheduler";
/// The namespace of node leases.
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// A node whose lease is older than this is unreachable (`--node-monitor-grace-period`,
/// 50 s since Kubernetes 1.32).
const NODE_MONITOR_GRACE_SECONDS: i64 = 50;
/// Unschedulable pods are tried again this often even when nothing is seen to change.
const RETRY_UNSCHEDULABLE: Duration = Duration::from_secs(5);
/// Lost compare-and-swaps a status write retries on the latest pod.
const STATUS_RETRIES: usize = 5;

/// Runs the scheduler until the task is dropped.
pub async fn run(state: Arc<AppState>) {
    super::informer::rewatch_forever("scheduler", || watch_and_schedule(&state)).await;
}

/// A pod's place: its node and its requests there.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Place {
    node: String,
    cpu: i128,
    memory: i128,
}

/// What a node's placed pods take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Taken {
    pods: usize,
    cpu: i128,
    memory: i128,
}

/// What the scheduler holds of the cluster, fed by its watches.
#[derive(Default)]
struct Cluster {
    nodes: BTreeMap<String, Value>,
    /// Node name → the lease's last renewal (Unix seconds).
    renewed: HashMap<String, i64>,
    /// (namespace, name) → the node a pod holds a place on, and what it requests there.
    placed: HashMap<(String, String), Place>,
    /// What the pods holding a place take, per node: kept with `placed`, so a decision
    /// never walks every pod of the cluster.
    counts: HashMap<String, Taken>,
    /// Pods waiting for a node, with the object last seen.
    pending: BTreeMap<(String, String), Value>,
    /// The Unschedulable message last written per pending pod (none written twice).
    reported: HashMap<(String, String), String>,
}

fn text<'a>(object: &'a Value, path: &str) -> &'a str {
    object.field(path).and_then(Value::as_str).unwrap_or_default()
}

fn pod_key(pod: &Value) -> (String, String) {
    (text(pod, "/metadata/namespace").to_owned(), text(pod, "/metadata/name").to_owned())
}

/// A pod this scheduler must place: no node, its scheduler, not being deleted, not
/// finished, not gated.
fn wants_scheduling(pod: &Value) -> bool {
    let scheduler = text(pod, "/spec/schedulerName");
    text(pod, "/spec/nodeName").is_empty()
        && (scheduler.is_empty() || scheduler == SCHEDULER_NAME)
        && pod.field("/metadata/deletionTimestamp").is_none_or(Value::is_null)
        && !matches!(text(pod, "/status/phase"), "Succeeded" | "Failed")
        && pod.field("/spec/schedulingGates").and_then(Value::as_array).is_none_or(Vec::is_empty)
}

impl Cluster {
    fn pod_event(&mut self, kind: EventType, pod: Value) {
        let key = pod_key(&pod);
        let node = text(&pod, "/spec/nodeName").to_owned();
        let finished = matches!(text(&pod, "/status/phase"), "Succeeded" | "Failed");
        if kind == EventType::Deleted || node.is_empty() || finished {
            self.place(&key, None);
        } else {
            let (cpu, memory) = (fit::pod_request(&pod, "cpu"), fit::pod_request(&pod, "memory"));
            self.place(&key, Some(Place { node, cpu, memory }));
        }
        if kind != EventType::Deleted && wants_scheduling(&pod) {
            self.pending.insert(key, pod);
        } else {
            self.pending.remove(&key);
            self.reported.remove(&key);
        }
    }

    fn node_event(&mut self, e: WatchEvent) {
        let name = text(&e.object, "/metadata/name").to_owned();
        if e.kind == EventType::Deleted {
            self.nodes.remove(&name);
        } else {
            self.nodes.insert(name, e.object);
        }
    }

    fn lease_event(&mut self, e: WatchEvent) {
        let name = text(&e.object, "/metadata/name").to_owned();
        match (e.kind, crate::time::parse_rfc3339(text(&e.object, "/spec/renewTime"))) {
            (EventType::Deleted, _) | (_, None) => self.renewed.remove(&name),
            (_, Some(t)) => self.renewed.insert(name, t),
        };
    }

    /// Records that pod `key` holds `place` (`None`: none), keeping the counts.
    fn place(&mut self, key: &(String, String), place: Option<Place>) {
        let old = match place {
            Some(place) => {
                let taken = self.counts.entry(place.node.clone()).or_default();
                taken.pods += 1;
                taken.cpu += place.cpu;
                taken.memory += place.memory;
                self.placed.insert(key.clone(), place)
            }
            None => self.placed.remove(key),
        };
        if let Some(old) = old
            && let Some(taken) = self.counts.get_mut(&old.node)
        {
            taken.pods = taken.pods.saturating_sub(1);
            taken.cpu -= old.cpu;
            taken.memory -= old.memory;
            if taken.pods == 0 {
                self.counts.remove(&old.node);
            }
        }
    }

    /// The node `pod` should go to, or why none fits.
    fn choose(&self, pod: &Value, now: i64) -> Result<String, Unschedulable> {
        let mut reasons = Vec::new();
        let mut best: Option<(usize, &str)> = None;
        for (name, node) in &self.nodes {
            // The node lifecycle controller's health: a lease renewed, or a Ready
            // heartbeat posted, within the grace period.
            let heartbeat = node
                .field("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .and_then(|c| crate::time::parse_rfc3339(text(c, "/lastHeartbeatTime")));
            let fresh = |t: &i64| now - t <= NODE_MONITOR_GRACE_SECONDS;
            let reachable = self.renewed.get(name).is_some_and(fresh) || heartbeat.as_ref().is_some_and(fresh);
            let taken = self.counts.get(name).copied().unwrap_or_default();
            let state = NodeState { pods: taken.pods, cpu: taken.cpu, memory: taken.memory, reachable };
            match fit::unfit(pod, node, state) {
                Some(reason) => reasons.push(reason),
                None if best.is_none_or(|(pods, _)| state.pods < pods) => best = Some((state.pods, name)),
                None => {}
            }
        }
        best.map(|(_, name)| name.to_owned()).ok_or_else(|| Unschedulable(fit::fit_error(self.nodes.len(), &reasons)))
    }
}

/// No node fits a pod: the FitError message (`0/2 nodes are available: …`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
struct Unschedulable(String);

async fn watch_and_schedule(state: &AppState) -> Result<(), StoreError> {
    let mut pods = state.store.watch("pods", None, ListOptions::default(), None).await?;
    let mut nodes = state.store.watch("nodes", None, ListOptions::default(), None).await?;
    let mut leases = state.store.watch("leases", Some(NODE_LEASE_NAMESPACE), ListOptions::default(), None).await?;
    let mut cluster = Cluster::default();
    let mut tick = tokio::time::interval(RETRY_UNSCHEDULABLE);
    loop {
        tokio::select! {
            event = pods.next() => {
                let e = ended(event)?;
                cluster.pod_event(e.kind, e.object);
            }
            event = nodes.next() => cluster.node_event(ended(event)?),
            event = leases.next() => cluster.lease_event(ended(event)?),
            _ = tick.tick() => {}
        }
        // Everything already delivered is taken in before deciding, so a burst of pods is
        // spread over the nodes as the placements accumulate.
        drain(&mut pods, &mut nodes, &mut leases, &mut cluster)?;
        schedule_pending(state, &mut cluster).await;
    }
}

/// An event of a watch that must go on, or why it cannot.
fn ended(event: Option<Result<WatchEvent, StoreError>>) -> Result<WatchEvent, StoreError> {
    event.unwrap_or_else(|| Err(StoreError::Invalid("the store closed the watch".into())))
}

/// The value of a future that is ready now, without waiting.
fn now_or_never<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(future).poll(&mut cx) {
        std::task::Poll::Ready(value) => Some(value),
        std::task::Poll::Pending => None,
    }
}

fn drain(
    pods: &mut WatchStream,
    nodes: &mut WatchStream,
    leases: &mut WatchStream,
    cluster: &mut Cluster,
) -> Result<(), StoreError> {
    while let Some(event) = now_or_never(pods.next()) {
        let e = ended(event)?;
        cluster.pod_event(e.kind, e.object);
    }
    while let Some(event) = now_or_never(nodes.next()) {
        cluster.node_event(ended(event)?);
    }
    while let Some(event) = now_or_never(leases.next()) {
        cluster.lease_event(ended(event)?);
    }
    Ok(())
}

/// Tries every pending pod once. A pod still refused for the same reason costs one fit
/// check and no copy or write.
async fn schedule_pending(state: &AppState, cluster: &mut Cluster) {
    let now = podpass_token::now_unix();
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
        match choice {
            Ok(node) => match assign(state, &key.0, &key.1, &node, &Map::new(), false).await {
                Ok(()) => {
                    tracing::info!(pod = %format!("{}/{}", key.0, key.1), %node, "scheduled");
                    let (cpu, memory) = (fit::pod_request(&pod, "cpu"), fit::pod_request(&pod, "memory"));
                    cluster.place(&key, Some(Place { node: node.clone(), cpu, memory }));
                    cluster.pending.remove(&key);
                    cluster.reported.remove(&key);
                    let message = format!("Successfully assigned {}/{} to {node}", key.0, key.1);
                    record_event(state, &pod, "Normal", "Scheduled", "Binding", &message).await;
                }
                // Bound or changed meanwhile: the pod's next watch event says what it is now.
                Err(e) => {
                    tracing::debug!(pod = %format!("{}/{}", key.0, key.1), error = %e.message, "binding failed");
                    cluster.pending.remove(&key);
                }
            },
            Err(Unschedulable(message)) => {
                if mark_unschedulable(state, &key, &message).await {
                    record_event(state, &pod, "Warning", "FailedScheduling", "Scheduling", &message).await;
                }
                cluster.reported.insert(key, message);
            }
        }
    }
}

/// Writes `PodScheduled=False`, reason `Unschedulable` (as kube-scheduler's status
/// update); true when the pod's status changed.
async fn mark_unschedulable(state: &AppState, (ns, name): &(String, String), message: &str) -> bool {
    let k = ObjectKey::namespaced("pods", ns, name);
    for _ in 0..STATUS_RETRIES {
        let Ok(current) = state.store.get(&k).await else { return false };
        let mut pod = current.object;
        if !wants_scheduling(&pod) {
            return false;
        }
        if !set_condition(
            &mut pod,
            "PodScheduled",
            "False",
            Some(("Unschedulable", message)),
            podpass_token::now_unix(),
        ) {
            return false;
        }
        match state.store.update(&k, pod, Some(current.revision)).await {
            Ok(_) => return true,
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => {
                tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "scheduler: status update failed");
                return false;
            }
        }
    }
    false
}

/// An Event about `pod` as kube-scheduler reports through events.k8s.io/v1 (stored in the
/// core shape: `reportingComponent`, `eventTime`, no deprecated counters).
async fn record_event(state: &AppState, pod: &Value, kind: &str, reason: &str, action: &str, message: &str) {
    let Some(res) = super::rest::resources::find("", "events") else { return };
    let (ns, name) = pod_key(pod);
    let now = jiff::Timestamp::now();
    let mut event = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("{name}.{:x}", now.as_nanosecond()), "namespace": ns},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name,
                           "uid": text(pod, "/metadata/uid"), "resourceVersion": text(pod, "/metadata/resourceVersion")},
        "reason": reason, "message": message, "type": kind, "action": action,
        "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string(),
        "reportingComponent": SCHEDULER_NAME, "reportingInstance": format!("{SCHEDULER_NAME}-podpass"),
        "source": {},
    });
    let created = match super::rest::objects::prepare_new(res, Some(&ns), &mut event, now.as_second()) {
        Ok(event_name) => state.store.create(&ObjectKey::namespaced("events", &ns, &event_name), event).await.err(),
        Err(e) => Some(StoreError::Invalid(e.message)),
    };
    if let Some(e) = created {
        tracing::debug!(error = %e, "scheduler: recording an event failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready_node(name: &str) -> Value {
        json!({"metadata": {"name": name}, "status": {"allocatable": {"pods": "2"},
               "conditions": [{"type": "Ready", "status": "True"}]}})
    }

    fn pending_pod(name: &str) -> Value {
        json!({"metadata": {"namespace": "ns", "name": name}, "spec": {"schedulerName": SCHEDULER_NAME},
               "status": {"phase": "Pending"}})
    }

    #[test]
    fn pods_spread_over_the_emptiest_fitting_nodes_and_overflow_is_explained() {
        let mut c = Cluster::default();
        for n in ["n1", "n2"] {
            c.nodes.insert(n.into(), ready_node(n));
            c.renewed.insert(n.into(), 1_000);
        }
        let mut placed = Vec::new();
        for i in 0..4 {
            let pod = pending_pod(&format!("p{i}"));
            let node = c.choose(&pod, 1_010).unwrap();
            c.place(&pod_key(&pod), Some(Place { node: node.clone(), cpu: 0, memory: 0 }));
            placed.push(node);
        }
        assert_eq!(placed, ["n1", "n2", "n1", "n2"]);
        let overflow = c.choose(&pending_pod("p5"), 1_010).unwrap_err().to_string();
        assert!(overflow.starts_with("0/2 nodes are available: 2 Too many pods."), "{overflow}");
        // a node whose lease stopped is unreachable
        let late = 1_000 + NODE_MONITOR_GRACE_SECONDS + 1;
        let stale = c.choose(&pending_pod("p6"), late).unwrap_err().to_string();
        assert!(stale.contains("2 node(s) had untolerated taint {node.kubernetes.io/unreachable: }"), "{stale}");
        // ... unless it posted a Ready heartbeat lately (a node before its first lease)
        if let Some(n1) = c.nodes.get_mut("n1") {
            n1["status"]["conditions"][0]["lastHeartbeatTime"] = json!(crate::time::format_rfc3339(late - 5));
            n1["status"]["allocatable"]["pods"] = json!("5");
        }
        assert_eq!(c.choose(&pending_pod("p7"), late).as_deref(), Ok("n1"));
    }

    #[test]
    fn only_unplaced_live_pods_of_this_scheduler_are_pending() {
        let mut c = Cluster::default();
        c.pod_event(EventType::Added, pending_pod("a"));
        let mut other = pending_pod("b");
        other["spec"]["schedulerName"] = json!("custom");
        c.pod_event(EventType::Added, other);
        let mut deleting = pending_pod("c");
        deleting["metadata"]["deletionTimestamp"] = json!("2026-11-25T10:00:00Z");
        c.pod_event(EventType::Added, deleting);
        let mut gated = pending_pod("d");
        gated["spec"]["schedulingGates"] = json!([{"name": "wait"}]);
        c.pod_event(EventType::Added, gated);
        assert_eq!(c.pending.keys().map(|(_, n)| n.as_str()).collect::<Vec<_>>(), ["a"]);
        let mut bound = pending_pod("a");
        bound["spec"]["nodeName"] = json!("n1");
        c.pod_event(EventType::Modified, bound.clone());
        assert!(c.pending.is_empty());
        assert_eq!(c.placed.get(&pod_key(&bound)).map(|p| p.node.as_str()), Some("n1"));
        c.pod_event(EventType::Modified, bound.clone());
        assert_eq!(
            c.counts,
            HashMap::from([("n1".to_owned(), Taken { pods: 1, cpu: 0, memory: 0 })]),
            "an event again counts once"
        );
        bound["status"]["phase"] = json!("Succeeded");
        c.pod_event(EventType::Modified, bound);
        assert!(c.placed.is_empty(), "a finished pod holds no place");
        assert!(c.counts.is_empty(), "{:?}", c.counts);
    }
}
