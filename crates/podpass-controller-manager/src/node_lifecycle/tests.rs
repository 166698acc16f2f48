#![allow(clippy::unwrap_used)]
use super::*;
use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

const SETTINGS: Settings = Settings {
    period: Duration::from_secs(5),
    grace: Grace { monitor: Duration::from_secs(50), startup: Duration::from_secs(60) },
    rates: Rates { primary: 0.1, secondary: 0.01, large_zone: 50, unhealthy: 0.55 },
};

fn at(second: u64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + second as i64).unwrap()
}

fn node(name: &str) -> Arc<Node> {
    Arc::new(Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some("1".into()),
            creation_timestamp: Some(Time(at(0))),
            ..Default::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_heartbeat_time: Some(Time(at(0))),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    })
}

/// The cluster as the caches would hold it after `plan` was written.
fn apply(nodes: &mut [Arc<Node>], plan: &Plan) {
    for node in nodes.iter_mut() {
        let name = node.name_any();
        if let Some(written) = plan.statuses.iter().find(|n| n.name_any() == name) {
            *node = Arc::new(written.clone());
        }
        if let Some(write) = plan.taints.iter().find(|w| w.node == name) {
            Arc::make_mut(node).spec.get_or_insert_default().taints = Some(write.taints.clone());
        }
    }
}

fn taints_of(plan: &Plan, node: &str) -> Option<Vec<String>> {
    let write = plan.taints.iter().find(|w| w.node == node)?;
    Some(write.taints.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect())
}

fn leases(alive: &[&str], second: u64) -> HashMap<String, Timestamp> {
    alive.iter().map(|n| ((*n).to_owned(), at(second))).collect()
}

#[test]
fn a_silent_node_turns_unknown_then_is_tainted_and_recovers_cleanly() {
    let start = Instant::now();
    let secs = |s: u64| start + Duration::from_secs(s);
    let mut lifecycle = Lifecycle::new(SETTINGS);
    let mut nodes = vec![node("node-1"), node("node-2")];
    let first = lifecycle.pass(&nodes, &leases(&["node-1", "node-2"], 0), secs(0), at(0));
    assert_eq!(first.registered.len(), 2);
    assert!(first.statuses.is_empty() && first.taints.is_empty());
    // node-2 stops renewing; node-1 goes on.
    let quiet = lifecycle.pass(&nodes, &leases(&["node-1"], 40), secs(50), at(50));
    assert!(quiet.statuses.is_empty(), "not past the grace period");
    let silent = lifecycle.pass(&nodes, &leases(&["node-1"], 50), secs(51), at(51));
    assert_eq!(silent.statuses.iter().map(|n| n.name_any()).collect::<Vec<_>>(), ["node-2"]);
    assert_eq!(silent.not_ready, [("node-2".to_owned(), "uid-node-2".to_owned())]);
    assert!(silent.taints.is_empty(), "the taints wait for the status write to be seen");
    apply(&mut nodes, &silent);
    let tainted = lifecycle.pass(&nodes, &leases(&["node-1"], 55), secs(56), at(56));
    assert_eq!(
        taints_of(&tainted, "node-2").unwrap(),
        ["node.kubernetes.io/unreachable:NoSchedule", "node.kubernetes.io/unreachable:NoExecute"]
    );
    assert_eq!(tainted.taints[0].resource_version, "1", "conditioned on what was read");
    assert!(tainted.not_ready.is_empty(), "the event is for the transition only");
    apply(&mut nodes, &tainted);
    assert_eq!(lifecycle.pass(&nodes, &leases(&["node-1"], 60), secs(61), at(61)), Plan::default());
    // node-2 comes back: it posts Ready, every lifecycle taint comes off at once.
    let back = Arc::make_mut(&mut nodes[1]);
    back.status = node("node-2").status.clone();
    let recovered = lifecycle.pass(&nodes, &leases(&["node-1", "node-2"], 70), secs(71), at(71));
    assert_eq!(taints_of(&recovered, "node-2").unwrap(), Vec::<String>::new());
}

#[test]
fn the_only_node_down_is_a_full_disruption_without_eviction_taints() {
    let start = Instant::now();
    let mut lifecycle = Lifecycle::new(SETTINGS);
    let mut nodes = vec![node("node-1")];
    lifecycle.pass(&nodes, &leases(&["node-1"], 0), start, at(0));
    let silent = lifecycle.pass(&nodes, &HashMap::new(), start + Duration::from_secs(51), at(51));
    apply(&mut nodes, &silent);
    let later = lifecycle.pass(&nodes, &HashMap::new(), start + Duration::from_secs(56), at(56));
    assert_eq!(taints_of(&later, "node-1").unwrap(), ["node.kubernetes.io/unreachable:NoSchedule"]);
    apply(&mut nodes, &later);
    let much_later = lifecycle.pass(&nodes, &HashMap::new(), start + Duration::from_secs(600), at(600));
    assert!(much_later.taints.is_empty(), "no NoExecute taint while every zone is down");
}

#[test]
fn eviction_taints_are_added_at_the_zones_rate() {
    let start = Instant::now();
    let secs = |s: u64| start + Duration::from_secs(s);
    let mut lifecycle = Lifecycle::new(SETTINGS);
    let names = ["node-1", "node-2", "node-3", "node-4", "node-5"];
    let mut nodes: Vec<Arc<Node>> = names.iter().map(|n| node(n)).collect();
    lifecycle.pass(&nodes, &leases(&names, 0), secs(0), at(0));
    // Two of five stop (not a partial disruption: that takes more than two).
    let alive = ["node-1", "node-2", "node-3"];
    let silent = lifecycle.pass(&nodes, &leases(&alive, 50), secs(51), at(51));
    assert_eq!(silent.statuses.len(), 2);
    apply(&mut nodes, &silent);
    let no_execute = |plan: &Plan| -> Vec<String> {
        plan.taints
            .iter()
            .filter(|w| w.taints.iter().any(|t| t.effect == "NoExecute"))
            .map(|w| w.node.clone())
            .collect()
    };
    let one = lifecycle.pass(&nodes, &leases(&alive, 55), secs(56), at(56));
    assert_eq!(no_execute(&one), ["node-4"], "one node per token");
    assert_eq!(taints_of(&one, "node-5").unwrap(), ["node.kubernetes.io/unreachable:NoSchedule"]);
    apply(&mut nodes, &one);
    let none = lifecycle.pass(&nodes, &leases(&alive, 60), secs(61), at(61));
    assert!(no_execute(&none).is_empty(), "the next token comes 10 s later");
    let two = lifecycle.pass(&nodes, &leases(&alive, 65), secs(66), at(66));
    assert_eq!(no_execute(&two), ["node-5"]);
}

#[test]
fn a_failed_taint_write_keeps_its_place_and_a_removed_node_is_forgotten() {
    let start = Instant::now();
    let mut lifecycle = Lifecycle::new(SETTINGS);
    let mut nodes = vec![node("node-1"), node("node-2")];
    lifecycle.pass(&nodes, &leases(&["node-1", "node-2"], 0), start, at(0));
    let silent = lifecycle.pass(&nodes, &leases(&["node-1"], 50), start + Duration::from_secs(51), at(51));
    apply(&mut nodes, &silent);
    let tainted = lifecycle.pass(&nodes, &leases(&["node-1"], 55), start + Duration::from_secs(56), at(56));
    lifecycle.requeue(&tainted.taints[0]);
    // With the next token, the node whose write failed is first in line again.
    let again = lifecycle.pass(&nodes, &leases(&["node-1"], 65), start + Duration::from_secs(66), at(66));
    assert!(taints_of(&again, "node-2").is_some_and(|t| t.iter().any(|k| k.ends_with(":NoExecute"))));
    nodes.pop();
    let removed = lifecycle.pass(&nodes, &leases(&["node-1"], 70), start + Duration::from_secs(71), at(71));
    assert_eq!(removed.removed, [("node-2".to_owned(), "uid-node-2".to_owned())]);
}
