//! What the scheduler holds of the cluster, fed by its watches, and the choice it makes
//! from it (kube-scheduler's cache and `schedulePod`): nodes, node lease renewals, the
//! place each bound pod holds and what it takes there, and the pods waiting for a node.
//! Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use podpass_api::field::Field;
use serde_json::Value;

use crate::fit::{self, NodeState};
use crate::score::{self, Candidate, Spread};

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

/// A pod's place: its node, its requests there, and what spreading counts of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    pub node: String,
    pub cpu: i128,
    pub memory: i128,
    /// Its requests as scoring counts them (`NonZeroRequested`).
    pub nz_cpu: i128,
    pub nz_memory: i128,
    pub labels: BTreeMap<String, String>,
    /// Being deleted: it holds its place but spreading does not count it.
    pub terminating: bool,
}

/// A pod's labels.
fn labels_of(pod: &Value) -> BTreeMap<String, String> {
    pod.field("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
        .unwrap_or_default()
}

impl Place {
    /// `pod`'s place on `node`.
    pub(crate) fn of(pod: &Value, node: String) -> Self {
        let labels = labels_of(pod);
        Place {
            node,
            cpu: fit::pod_request(pod, "cpu"),
            memory: fit::pod_request(pod, "memory"),
            nz_cpu: score::non_zero_request(pod, "cpu"),
            nz_memory: score::non_zero_request(pod, "memory"),
            labels,
            terminating: pod.field("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()),
        }
    }
}

/// What a node's placed pods take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Taken {
    pub pods: usize,
    pub cpu: i128,
    pub memory: i128,
    pub nz_cpu: i128,
    pub nz_memory: i128,
}

/// A selector as metav1 holds one: pairs and expressions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Selector {
    pub pairs: BTreeMap<String, String>,
    pub expressions: Vec<(String, String, Vec<String>)>,
}

impl Selector {
    /// A `LabelSelector` object (`matchLabels`, `matchExpressions`), or a Service's map.
    pub(crate) fn from_value(selector: &Value, map_only: bool) -> Self {
        let pairs_at = if map_only { selector } else { &selector["matchLabels"] };
        let pairs = pairs_at
            .as_object()
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
            .unwrap_or_default();
        let expressions = if map_only {
            Vec::new()
        } else {
            selector["matchExpressions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| {
                    let values =
                        e["values"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned));
                    (text(e, "/key").to_owned(), text(e, "/operator").to_owned(), values.collect())
                })
                .collect()
        };
        Selector { pairs, expressions }
    }

    fn is_empty(&self) -> bool {
        self.pairs.is_empty() && self.expressions.is_empty()
    }

    pub(crate) fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        let requirements: Vec<podpass_api::label_selector::Requirement<'_>> = self
            .expressions
            .iter()
            .map(|(key, operator, values)| podpass_api::label_selector::Requirement { key, operator, values })
            .collect();
        podpass_api::label_selector::selects(&self.pairs, &requirements, labels)
    }
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
    /// Namespace → the names of its pods holding a place: spreading counts a namespace's
    /// pods only, without walking the cluster's.
    pub by_namespace: HashMap<String, BTreeSet<String>>,
    /// The selectors of Services and ReplicaSets, which spreading spreads by
    /// (`DefaultSelector`).
    pub selectors: HashMap<(String, String, &'static str), Selector>,
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
            self.place(&key, Some(Place::of(&pod, node)));
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

    /// A Service or ReplicaSet seen (or gone): `kind` is `Service` or `ReplicaSet`.
    pub(crate) fn selector_event(&mut self, kind: &'static str, change: Change, object: &Value) {
        let (ns, name) = pod_key(object);
        let key = (ns, name, kind);
        let selector = match kind {
            "Service" => Selector::from_value(&object["spec"]["selector"], true),
            _ => Selector::from_value(&object["spec"]["selector"], false),
        };
        if change == Change::Deleted || selector.is_empty() {
            self.selectors.remove(&key);
        } else {
            self.selectors.insert(key, selector);
        }
    }

    /// Forgets every Service or ReplicaSet selector of `kind` (a relist follows).
    pub(crate) fn forget_selectors(&mut self, kind: &'static str) {
        self.selectors.retain(|(_, _, k), _| *k != kind);
    }

    /// Forgets every pod (a relist of pods follows).
    pub(crate) fn forget_pods(&mut self) {
        self.placed.clear();
        self.counts.clear();
        self.pending.clear();
        self.by_namespace.clear();
    }

    /// `DefaultSelector`: the selectors of the pod's namespace's Services and ReplicaSets
    /// that select it (none: no spreading).
    fn default_selector(&self, pod: &Value) -> Vec<&Selector> {
        let (ns, _) = pod_key(pod);
        let labels = labels_of(pod);
        self.selectors.iter().filter(|((n, _, _), s)| *n == ns && s.selects(&labels)).map(|(_, s)| s).collect()
    }

    /// The pods of `ns` that every selector selects, per node (being deleted: not counted).
    fn matching(&self, ns: &str, selectors: &[&Selector]) -> HashMap<String, usize> {
        let mut matching = HashMap::new();
        for name in self.by_namespace.get(ns).into_iter().flatten() {
            let Some(place) = self.placed.get(&(ns.to_owned(), name.clone())) else { continue };
            if !place.terminating && selectors.iter().all(|s| s.selects(&place.labels)) {
                *matching.entry(place.node.clone()).or_default() += 1;
            }
        }
        matching
    }

    /// Records that pod `key` holds `place` (`None`: none), keeping the counts.
    pub(crate) fn place(&mut self, key: &(String, String), place: Option<Place>) {
        let old = match place {
            Some(place) => {
                let taken = self.counts.entry(place.node.clone()).or_default();
                taken.pods += 1;
                taken.cpu += place.cpu;
                taken.memory += place.memory;
                taken.nz_cpu += place.nz_cpu;
                taken.nz_memory += place.nz_memory;
                self.by_namespace.entry(key.0.clone()).or_default().insert(key.1.clone());
                self.placed.insert(key.clone(), place)
            }
            None => {
                if let Some(names) = self.by_namespace.get_mut(&key.0) {
                    names.remove(&key.1);
                    if names.is_empty() {
                        self.by_namespace.remove(&key.0);
                    }
                }
                self.placed.remove(key)
            }
        };
        if let Some(old) = old
            && let Some(taken) = self.counts.get_mut(&old.node)
        {
            taken.pods = taken.pods.saturating_sub(1);
            taken.cpu -= old.cpu;
            taken.memory -= old.memory;
            taken.nz_cpu -= old.nz_cpu;
            taken.nz_memory -= old.nz_memory;
            if taken.pods == 0 {
                self.counts.remove(&old.node);
            }
        }
    }

    /// The node `pod` should go to, or why none fits: the filters ([`fit`]), then the
    /// scores ([`score`]) when more than one node is left.
    pub(crate) fn choose(&self, pod: &Value, now: i64) -> Result<String, Unschedulable> {
        let mut reasons = Vec::new();
        let mut feasible = Vec::new();
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
            let state = NodeState {
                pods: taken.pods,
                cpu: taken.cpu,
                memory: taken.memory,
                nz_cpu: taken.nz_cpu,
                nz_memory: taken.nz_memory,
                reachable,
            };
            match fit::unfit(pod, node, state) {
                Some(reason) => reasons.push(reason),
                None => feasible.push(Candidate { name, node, state }),
            }
        }
        // One node left: no scoring (upstream's schedulePod).
        if feasible.len() == 1 {
            return Ok(feasible[0].name.to_owned());
        }
        let selectors = self.default_selector(pod);
        let spread = (!selectors.is_empty())
            .then(|| Spread { matching: self.matching(text(pod, "/metadata/namespace"), &selectors) });
        let holders = self.image_holders(pod);
        match score::pick(pod, &feasible, &self.nodes, spread.as_ref(), &holders) {
            Some(i) => Ok(feasible[i].name.to_owned()),
            None => Err(Unschedulable(fit::fit_error(self.nodes.len(), &reasons))),
        }
    }

    /// For each of the pod's images, how many nodes hold it (ImageLocality's spread).
    fn image_holders(&self, pod: &Value) -> HashMap<String, usize> {
        let mut holders = HashMap::new();
        for container in pod["spec"]["containers"].as_array().into_iter().flatten() {
            let Some(image) = container["image"].as_str() else { continue };
            let count = self
                .nodes
                .values()
                .filter(|n| {
                    n["status"]["images"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|i| i["names"].as_array().is_some_and(|names| names.iter().any(|x| x == image)))
                })
                .count();
            holders.insert(image.to_owned(), count);
        }
        holders
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
        json!({"metadata": {"name": name}, "status": {"allocatable": {"pods": "2", "cpu": "2", "memory": "4Gi"},
               "conditions": [{"type": "Ready", "status": "True"}]}})
    }

    fn pending_pod(name: &str) -> Value {
        json!({"metadata": {"namespace": "ns", "name": name}, "spec": {"schedulerName": SCHEDULER_NAME},
               "status": {"phase": "Pending"}})
    }

    fn pod_with_container(name: &str) -> Value {
        let mut pod = pending_pod(name);
        pod["spec"]["containers"] = json!([{"name": "c", "image": "app"}]);
        pod
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
            // No requests: each still counts 100m and 200 MiB, so the emptier node scores higher.
            let pod = pod_with_container(&format!("p{i}"));
            let node = c.choose(&pod, 1_010).unwrap();
            c.place(&pod_key(&pod), Some(Place::of(&pod, node.clone())));
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
    fn a_replica_set_spreads_its_pods_where_resources_alone_would_not() {
        let mut c = Cluster::default();
        for n in ["n1", "n2"] {
            let mut node = ready_node(n);
            node["metadata"]["labels"] = json!({"kubernetes.io/hostname": n});
            node["status"]["allocatable"]["pods"] = json!("10");
            c.nodes.insert(n.into(), node);
            c.renewed.insert(n.into(), 1_000);
        }
        let labelled = |name: &str, app: &str| {
            let mut pod = pod_with_container(name);
            pod["metadata"]["labels"] = json!({"app": app});
            pod
        };
        c.place(&("ns".into(), "web-0".into()), Some(Place::of(&labelled("web-0", "web"), "n1".into())));
        for i in 0..2 {
            let name = format!("db-{i}");
            c.place(&("ns".into(), name.clone()), Some(Place::of(&labelled(&name, "db"), "n2".into())));
        }
        // Resources alone: n1 holds less.
        assert_eq!(c.choose(&labelled("web-1", "web"), 1_010).as_deref(), Ok("n1"));
        // A ReplicaSet selects the web pods: its second replica goes beside the db pods
        // rather than onto its first's host. One in another namespace changes nothing.
        let rs = |ns: &str| json!({"metadata": {"namespace": ns, "name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}}});
        c.selector_event("ReplicaSet", Change::Applied, &rs("elsewhere"));
        assert_eq!(c.choose(&labelled("web-1", "web"), 1_010).as_deref(), Ok("n1"));
        c.selector_event("ReplicaSet", Change::Applied, &rs("ns"));
        assert_eq!(c.choose(&labelled("web-1", "web"), 1_010).as_deref(), Ok("n2"));
        // A terminating replica is not counted.
        let mut leaving = labelled("web-0", "web");
        leaving["metadata"]["deletionTimestamp"] = json!("2026-12-01T00:00:00Z");
        c.place(&("ns".into(), "web-0".into()), Some(Place::of(&leaving, "n1".into())));
        assert_eq!(c.choose(&labelled("web-1", "web"), 1_010).as_deref(), Ok("n1"));
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
            HashMap::from([("n1".to_owned(), Taken { pods: 1, cpu: 0, memory: 0, nz_cpu: 0, nz_memory: 0 })]),
            "an event again counts once"
        );
        bound["status"]["phase"] = json!("Succeeded");
        c.pod_event(Change::Applied, bound);
        assert!(c.placed.is_empty(), "a finished pod holds no place");
        assert!(c.counts.is_empty(), "{:?}", c.counts);
    }
}
