//! The node lifecycle controller (`pkg/controller/nodelifecycle`, `monitorNodeHealth`),
//! every `--node-monitor-period` from the manager's caches of nodes, node Leases and pods:
//!
//! - a node silent past its grace period ([`health`]) has its conditions set `Unknown`
//!   (`NodeStatusUnknown`), its pods marked not Ready (a `NodeNotReady` event on each),
//!   and a `NodeNotReady` event;
//! - every node carries the NoSchedule taints of its conditions, and the NoExecute
//!   `not-ready`/`unreachable` taint while not Ready ([`taints`]), added at the zone's
//!   eviction rate and never while every zone is down ([`zones`]); the taint eviction
//!   controller evicts by them;
//! - `RegisteredNode` and `RemovingNode` events as nodes come and go.
//!
//! It decides a pass from the caches ([`Lifecycle::pass`]), then writes it as its own
//! identity (`system:serviceaccount:kube-system:node-controller`): status through
//! `nodes/<name>/status` conditioned on the resourceVersion it read, taints through a
//! patch carrying that resourceVersion (upstream `PatchNodeTaints`), so a node's own
//! concurrent write is never overwritten.

mod health;
mod taints;
mod zones;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::credentials::Credentials;
use crate::events::{Recorder, Regarding};
use crate::sync_error::SyncError;

pub(crate) use health::Grace;
pub(crate) use zones::Rates;

/// The controller's name (`--controllers`).
pub const NAME: &str = "node-lifecycle-controller";
/// Its service account (upstream's, `system:controller:node-controller`).
pub const ACCOUNT: &str = "node-controller";
/// Where the nodes' Leases live.
const LEASE_NAMESPACE: &str = "kube-node-lease";

/// The controller's settings (kube-controller-manager's `--node-monitor-*` and
/// `--*-eviction-rate` flags).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Settings {
    /// `--node-monitor-period`: how often a pass runs.
    pub period: Duration,
    pub grace: Grace,
    pub rates: Rates,
}

/// What the controller remembers between passes.
pub(crate) struct Lifecycle {
    settings: Settings,
    health: HashMap<String, health::Health>,
    zones: BTreeMap<String, zones::Zone>,
    /// Nodes seen, for `RegisteredNode`/`RemovingNode`: name → uid.
    known: HashMap<String, String>,
    /// Nodes whose pods could not all be marked not Ready: tried again while not Ready.
    retry_pods: HashSet<String>,
}

/// One node's new taints, conditioned on the resourceVersion they were computed from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaintWrite {
    pub node: String,
    pub resource_version: String,
    pub taints: Vec<Taint>,
    /// The zone whose queue gave this write its NoExecute taint: queued again if it fails.
    pub dequeued: Option<String>,
}

/// What one pass writes.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Plan {
    /// Nodes gone silent: their object with the conditions `Unknown`.
    pub statuses: Vec<Node>,
    pub taints: Vec<TaintWrite>,
    /// Nodes that just stopped being Ready: an event, and their pods marked not Ready.
    pub not_ready: Vec<(String, String)>,
    /// Nodes whose pods are to be marked not Ready again.
    pub retry_pods: Vec<String>,
    pub registered: Vec<(String, String)>,
    pub removed: Vec<(String, String)>,
}

impl Lifecycle {
    pub(crate) fn new(settings: Settings) -> Self {
        Self {
            settings,
            health: HashMap::new(),
            zones: BTreeMap::new(),
            known: HashMap::new(),
            retry_pods: HashSet::new(),
        }
    }

    /// `monitorNodeHealth` over `nodes`, whose Leases were last renewed at `leases`.
    pub(crate) fn pass(
        &mut self,
        nodes: &[Arc<Node>],
        leases: &HashMap<String, Timestamp>,
        now: Instant,
        wall: Timestamp,
    ) -> Plan {
        let mut plan = Plan::default();
        let names: HashSet<String> = nodes.iter().map(|n| n.name_any()).collect();
        for node in nodes {
            let (name, uid) = (node.name_any(), node.uid().unwrap_or_default());
            if self.known.get(&name) != Some(&uid) {
                self.known.insert(name.clone(), uid.clone());
                plan.registered.push((name, uid));
            }
        }
        let gone: Vec<String> = self.known.keys().filter(|n| !names.contains(*n)).cloned().collect();
        for name in gone {
            let uid = self.known.remove(&name).unwrap_or_default();
            self.health.remove(&name);
            self.retry_pods.remove(&name);
            plan.removed.push((name, uid));
        }
        // Health, and the Ready statuses by zone.
        let mut observed: HashMap<String, String> = HashMap::new();
        let mut written: HashSet<String> = HashSet::new();
        let mut ready_by_zone: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for node in nodes {
            let name = node.name_any();
            let mut saved = self.health.remove(&name);
            let a = health::assess(node, leases.get(&name).copied(), &mut saved, self.settings.grace, now, wall);
            if let Some(health) = saved {
                self.health.insert(name.clone(), health);
            }
            if let Some(conditions) = a.conditions {
                let mut updated = (**node).clone();
                updated.status.get_or_insert_default().conditions = Some(conditions);
                plan.statuses.push(updated);
                written.insert(name.clone());
            }
            if a.current != "True" && a.observed == "True" {
                plan.not_ready.push((name.clone(), node.uid().unwrap_or_default()));
            } else if a.observed != "True" && self.retry_pods.contains(&name) {
                plan.retry_pods.push(name.clone());
            }
            if a.observed == "True" {
                self.retry_pods.remove(&name);
            }
            ready_by_zone.entry(zones::key(node)).or_default().push(a.current);
            observed.insert(name, a.observed);
        }
        let ready: BTreeMap<String, Vec<&str>> =
            ready_by_zone.iter().map(|(k, v)| (k.clone(), v.iter().map(String::as_str).collect())).collect();
        let mode = zones::handle_disruption(&mut self.zones, &ready, &self.settings.rates, now);
        if mode == zones::Mode::LeftFullDisruption {
            for health in self.health.values_mut() {
                health.probe = now;
            }
        }
        // Taints: the condition ones, then the NoExecute one.
        let mut wanted: BTreeMap<String, (Arc<Node>, Vec<Taint>)> = BTreeMap::new();
        for node in nodes {
            let name = node.name_any();
            let zone_key = zones::key(node);
            let Some(zone) = self.zones.get_mut(&zone_key) else { continue };
            let mut next = taints::with_condition_taints(node, taints::of(node), wall);
            if mode == zones::Mode::EnteredFullDisruption {
                next = taints::with_no_execute(&next, None, wall);
                zone.cancel(&name);
            } else {
                match taints::no_execute(observed.get(&name).map_or("Unknown", String::as_str), &next) {
                    taints::NoExecute::Clear => {
                        next = taints::with_no_execute(&next, None, wall);
                        zone.cancel(&name);
                    }
                    taints::NoExecute::Swap(key) => next = taints::with_no_execute(&next, Some(key), wall),
                    taints::NoExecute::Queue(_) => zone.enqueue(&name),
                    taints::NoExecute::Keep => {}
                }
            }
            wanted.insert(name, (node.clone(), next));
        }
        // The queues, as far as each zone's rate allows (`doNoExecuteTaintingPass`).
        let mut dequeued: HashMap<String, String> = HashMap::new();
        for (zone_key, zone) in &mut self.zones {
            while let Some(name) = zone.queue.front().cloned() {
                let Some((_, next)) = wanted.get_mut(&name) else {
                    zone.queue.pop_front();
                    continue;
                };
                // Its status is being written: its taints wait for the next pass.
                if written.contains(&name) || !zone.limiter.try_accept(now) {
                    break;
                }
                zone.queue.pop_front();
                // Ready again meanwhile: nothing to taint.
                if let Some(key) = taints::no_execute_key(observed.get(&name).map_or("Unknown", String::as_str)) {
                    *next = taints::with_no_execute(next, Some(key), wall);
                    dequeued.insert(name, zone_key.clone());
                }
            }
        }
        for (name, (node, next)) in wanted {
            if written.contains(&name) || next.as_slice() == taints::of(&node) {
                continue;
            }
            plan.taints.push(TaintWrite {
                dequeued: dequeued.remove(&name),
                resource_version: node.resource_version().unwrap_or_default(),
                node: name,
                taints: next,
            });
        }
        plan
    }

    /// A taint write failed: a node it took from a queue goes back to its front.
    fn requeue(&mut self, write: &TaintWrite) {
        if let Some(zone) = write.dequeued.as_ref().and_then(|k| self.zones.get_mut(k)) {
            zone.queue.push_front(write.node.clone());
        }
    }
}

/// Runs the controller until the task is dropped.
pub(crate) async fn run(credentials: Credentials, settings: Settings) {
    let root = credentials.root();
    let (nodes, fill_nodes) = crate::cache::cached(Api::<Node>::all(root.clone()));
    let (leases, fill_leases) = crate::cache::cached(Api::<Lease>::namespaced(root.clone(), LEASE_NAMESPACE));
    let (pods, fill_pods) = crate::cache::cached(Api::<Pod>::all(root));
    let drive = futures::future::join3(fill_nodes, fill_leases, fill_pods);
    tokio::join!(drive, monitor(credentials, settings, nodes, leases, pods));
}

async fn monitor(
    credentials: Credentials,
    settings: Settings,
    nodes: Store<Node>,
    leases: Store<Lease>,
    pods: Store<Pod>,
) {
    if nodes.wait_until_ready().await.is_err()
        || leases.wait_until_ready().await.is_err()
        || pods.wait_until_ready().await.is_err()
    {
        return;
    }
    let mut lifecycle = Lifecycle::new(settings);
    let mut ticks = tokio::time::interval(settings.period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let renewed: HashMap<String, Timestamp> = leases
            .state()
            .iter()
            .filter_map(|l| Some((l.name_any(), l.spec.as_ref()?.renew_time.as_ref()?.0)))
            .collect();
        let plan = lifecycle.pass(&nodes.state(), &renewed, Instant::now(), Timestamp::now());
        let span = tracing::info_span!("reconcile", controller = NAME);
        let act = write(&credentials, &mut lifecycle, plan, &pods);
        if let Err(e) = tracing::Instrument::instrument(act, span).await {
            tracing::warn!(error = %e, "node lifecycle pass failed; trying again next period");
        }
    }
}

fn regarding<'a>(name: &'a str, uid: &'a str) -> Regarding<'a> {
    Regarding { api_version: "v1", kind: "Node", namespace: "", name, uid }
}

/// Whether an API error is a lost race (the object changed or went meanwhile): the next
/// pass decides again on the fresh object.
fn lost_race(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 || s.code == 404)
}

async fn write(
    credentials: &Credentials,
    lifecycle: &mut Lifecycle,
    plan: Plan,
    pods: &Store<Pod>,
) -> Result<(), SyncError> {
    if plan == Plan::default() {
        return Ok(());
    }
    let client = credentials.client(ACCOUNT).await?;
    let recorder = Recorder::new(client.clone(), NAME);
    let api: Api<Node> = Api::all(client.clone());
    for (name, uid) in &plan.registered {
        recorder
            .normal(
                &regarding(name, uid),
                "RegisteredNode",
                &format!("Node {name} event: Registered Node {name} in Controller"),
            )
            .await;
    }
    for (name, uid) in &plan.removed {
        recorder
            .normal(
                &regarding(name, uid),
                "RemovingNode",
                &format!("Node {name} event: Removing Node {name} from Controller"),
            )
            .await;
    }
    for node in &plan.statuses {
        let name = node.name_any();
        match api.replace_status(&name, &PostParams::default(), node).await {
            Ok(_) => tracing::info!(node = %name, "node stopped posting its status: its conditions are Unknown"),
            Err(e) if lost_race(&e) => tracing::debug!(node = %name, error = %e, "node changed meanwhile"),
            Err(e) => return Err(e.into()),
        }
    }
    for write in &plan.taints {
        let patch = json!({"metadata": {"resourceVersion": write.resource_version}, "spec": {"taints": write.taints}});
        match api.patch(&write.node, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                let keys: Vec<String> = write.taints.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect();
                tracing::info!(node = %write.node, taints = ?keys, "node taints set");
            }
            Err(e) if lost_race(&e) => {
                lifecycle.requeue(write);
                tracing::debug!(node = %write.node, error = %e, "node changed meanwhile");
            }
            Err(e) => {
                lifecycle.requeue(write);
                return Err(e.into());
            }
        }
    }
    for (name, uid) in &plan.not_ready {
        recorder
            .normal(&regarding(name, uid), "NodeNotReady", &format!("Node {name} status is now: NodeNotReady"))
            .await;
    }
    let all_pods = pods.state();
    for name in plan.not_ready.iter().map(|(n, _)| n).chain(&plan.retry_pods) {
        if let Err(e) = mark_pods_not_ready(&client, &recorder, &all_pods, name).await {
            lifecycle.retry_pods.insert(name.clone());
            tracing::warn!(node = %name, error = %e, "could not mark its pods not ready; trying again next period");
        } else {
            lifecycle.retry_pods.remove(name);
        }
    }
    Ok(())
}

/// `MarkPodsNotReady`: each Ready pod of the node turns `Ready=False`, with a
/// `NodeNotReady` warning on it.
async fn mark_pods_not_ready(
    client: &kube::Client,
    recorder: &Recorder,
    pods: &[Arc<Pod>],
    node: &str,
) -> Result<(), SyncError> {
    let on_node = pods.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node));
    for pod in on_node {
        let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
        if !conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True") {
            continue;
        }
        let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        let condition = json!({"type": "Ready", "status": "False", "lastTransitionTime": Timestamp::now().to_string()});
        let patch = json!({"status": {"conditions": [condition]}});
        match Api::<Pod>::namespaced(client.clone(), &ns)
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            Ok(_) => {}
            Err(e) if lost_race(&e) => continue,
            Err(e) => return Err(e.into()),
        }
        let uid = pod.uid().unwrap_or_default();
        let about = Regarding { api_version: "v1", kind: "Pod", namespace: &ns, name: &name, uid: &uid };
        recorder.warning(&about, "NodeNotReady", "Node is not ready").await;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
