//! What the scheduler holds of the cluster, fed by its watches, and the choice it makes
//! from it (kube-scheduler's cache and `schedulePod`): nodes, node lease renewals, the
//! place each bound pod holds and what it takes there, and the pods waiting for a node.
//! Pure: no I/O.

use std::collections::{BTreeMap, HashMap};

use podpass_api::field::Field;
use serde_json::Value;

use crate::fit::{self, NodeState};

/// The scheduler's name: pods naming another are left to it.
pub const SCHEDULER_NAME: &str = "default-scheduler";
/// A node whose lease is older than this is unreachable (`--node-monitor-grace-period`,
/// 50 s since Kubernetes 1.32).
const NODE_MONITOR_GRACE_SECONDS: i64 = 50;

/// A change a watch delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Added or modified.
    Applied,
    /// Deleted.
    Deleted,
}

/// An RFC 3339 time as Unix seconds.
pub(crate) fn unix(text: &str) -> Option<i64> {
    text.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

/// A pod's place: its node and its requests there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    pub node: String,
    pub cpu: i128,
    pub memory: i128,
}

/// What a node's placed pods take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Taken {
    pub pods: usize,
    pub cpu: i128,
    pub memory: i128,
}

/// What the scheduler holds of the cluster, fed by its watches.
#[derive(Default)]
pub(crate) struct Cluster {
    pub nodes: BTreeMap<String, Value>,
    /// Node name → the lease's last renewal (Unix seconds).
    pub renewed: HashMap<String, i64>,
    /// (namespace, name) → the node a pod holds a place on, and what it requests there.
    pub placed: HashMap<(String, String), Place>,
    /// What the pods holding a place take, per node: kept with `placed`, so a decision
    /// never walks every pod of the cluster.
    pub counts: HashMap<String, Taken>,
    /// Pods waiting for a node, with the object last seen.
    pub pending: BTreeMap<(String, String), Value>,
    /// The Unschedulable message last written per pending pod (none written twice).
    pub reported: HashMap<(String, String), String>,
}

pub(crate) fn text<'a>(object: &'a Value, path: &str) -> &'a str {
    object.field(path).and_then(Value::as_str).unwrap_or_default()
}

pub(crate) fn pod_key(pod: &Value) -> (String, String) {
    (text(pod, "/metadata/namespace").to_owned(), text(pod, "/metadata/name").to_owned())
}

/// A pod this scheduler must place: no node, its scheduler, not being deleted, not
/// finished, not gated.
pub(crate) fn wants_scheduling(pod: &Value) -> bool {
    let scheduler = text(pod, "/spec/schedulerName");
    text(pod, "/spec/nodeName").is_empty()
        && (scheduler.is_empty() || scheduler == SCHEDULER_NAME)
        && pod.field("/metadata/deletionTimestamp").is_none_or(Value::is_null)
        && !matches!(text(pod, "/status/phase"), "Succeeded" | "Failed")
        && pod.field("/spec/schedulingGates").and_then(Value::as_array).is_none_or(Vec::is_empty)
}

impl Cluster {
    /// A pod seen (or gone).
    pub(crate) fn pod_event(&mut self, kind: Change, pod: Value) {
        let key = pod_key(&pod);
        let node = text(&pod, "/spec/nodeName").to_owned();
        let finished = matches!(text(&pod, "/status/phase"), "Succeeded" | "Failed");
        if kind == Change::Deleted || node.is_empty() || finished {
            self.place(&key, None);
        } else {
            let (cpu, memory) = (fit::pod_request(&pod, "cpu"), fit::pod_request(&pod, "memory"));
            self.place(&key, Some(Place { node, cpu, memory }));
        }
        if kind != Change::Deleted && wants_scheduling(&pod) {
            self.pending.insert(key, pod);
        } else {
            self.pending.remove(&key);
            self.reported.remove(&key);
        }
    }

    /// A node seen (or gone).
    pub(crate) fn node_event(&mut self, kind: Change, node: Value) {
        let name = text(&node, "/metadata/name").to_owned();
        if kind == Change::Deleted {
            self.nodes.remove(&name);
        } else {
            self.nodes.insert(name, node);
        }
    }

    /// A node lease seen (or gone).
    pub(crate) fn lease_event(&mut self, kind: Change, lease: &Value) {
        let name = text(lease, "/metadata/name").to_owned();
        match (kind, unix(text(lease, "/spec/renewTime"))) {
            (Change::Deleted, _) | (_, None) => self.renewed.remove(&name),
            (_, Some(t)) => self.renewed.insert(name, t),
        };
    }

    /// Forgets every pod (a relist of pods follows).
    pub(crate) fn forget_pods(&mut self) {
        self.placed.clear();
        self.counts.clear();
        self.pending.clear();
    }

    /// Records that pod `key` holds `place` (`None`: none), keeping the counts.
    pub(crate) fn place(&mut self, key: &(String, String), place: Option<Place>) {
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
    pub(crate) fn choose(&self, pod: &Value, now: i64) -> Result<String, Unschedulable> {
        let mut reasons = Vec::new();
        let mut best: Option<(usize, &str)> = None;
        for (name, node) in &self.nodes {
            // The node lifecycle controller's health: a lease renewed, or a Ready
            // heartbeat posted, within the grace period.
            let heartbeat = node
                .field("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .and_then(|c| unix(text(c, "/lastHeartbeatTime")));
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
pub(crate) struct Unschedulable(pub String);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

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
            n1["status"]["conditions"][0]["lastHeartbeatTime"] =
                json!(jiff::Timestamp::from_second(late - 5).unwrap().to_string());
            n1["status"]["allocatable"]["pods"] = json!("5");
        }
        assert_eq!(c.choose(&pending_pod("p7"), late).as_deref(), Ok("n1"));
    }

    #[test]
    fn only_unplaced_live_pods_of_this_scheduler_are_pending() {
        let mut c = Cluster::default();
        c.pod_event(Change::Applied, pending_pod("a"));
        let mut other = pending_pod("b");
        other["spec"]["schedulerName"] = json!("custom");
        c.pod_event(Change::Applied, other);
        let mut deleting = pending_pod("c");
        deleting["metadata"]["deletionTimestamp"] = json!("2026-11-25T10:00:00Z");
        c.pod_event(Change::Applied, deleting);
        let mut gated = pending_pod("d");
        gated["spec"]["schedulingGates"] = json!([{"name": "wait"}]);
        c.pod_event(Change::Applied, gated);
        assert_eq!(c.pending.keys().map(|(_, n)| n.as_str()).collect::<Vec<_>>(), ["a"]);
        let mut bound = pending_pod("a");
        bound["spec"]["nodeName"] = json!("n1");
        c.pod_event(Change::Applied, bound.clone());
        assert!(c.pending.is_empty());
        assert_eq!(c.placed.get(&pod_key(&bound)).map(|p| p.node.as_str()), Some("n1"));
        c.pod_event(Change::Applied, bound.clone());
        assert_eq!(
            c.counts,
            HashMap::from([("n1".to_owned(), Taken { pods: 1, cpu: 0, memory: 0 })]),
            "an event again counts once"
        );
        bound["status"]["phase"] = json!("Succeeded");
        c.pod_event(Change::Applied, bound);
        assert!(c.placed.is_empty(), "a finished pod holds no place");
        assert!(c.counts.is_empty(), "{:?}", c.counts);
    }
}
