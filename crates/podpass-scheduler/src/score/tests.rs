#![allow(clippy::unwrap_used)]
use super::*;
use serde_json::json;

fn node(name: &str, cpu: &str, memory: &str, extra: Value) -> Value {
    let mut n = json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}});
    if let (Some(n), Some(extra)) = (n.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            if k == "labels" {
                for (lk, lv) in v.as_object().unwrap() {
                    n["metadata"].as_object_mut().unwrap()["labels"][lk] = lv.clone();
                }
            } else {
                n.insert(k.clone(), v.clone());
            }
        }
    }
    n
}

fn pod(spec: Value) -> Value {
    json!({"metadata": {"namespace": "team-a", "name": "p", "labels": {"app": "web"}}, "spec": spec})
}

fn state(nz_cpu: i128, nz_memory: i128) -> NodeState {
    NodeState { pods: 0, cpu: nz_cpu, memory: nz_memory, nz_cpu, nz_memory, reachable: true }
}

const GI: i128 = (1 << 30) * 1000;

#[test]
fn resource_scores_are_least_allocated_and_balanced_as_upstreams() {
    let n = node("n1", "4", "8Gi", json!({}));
    let plain = pod(json!({"containers": [{"name": "c", "image": "app"}]}));
    // A container without requests counts 100m and 200 MiB.
    assert_eq!(non_zero_request(&plain, "cpu"), 100);
    assert_eq!(non_zero_request(&plain, "memory"), 200 * 1024 * 1024 * 1000);
    let empty = Candidate { name: "n1", node: &n, state: state(0, 0) };
    // cpu: (4000 - 100) * 100 / 4000 = 97; memory: (8192 - 200) * 100 / 8192 = 97.
    assert_eq!(least_allocated(&plain, &empty), 97);
    let half = Candidate { name: "n1", node: &n, state: state(2000, 4 * GI) };
    assert_eq!(least_allocated(&plain, &half), 47);
    // Balanced: cpu half used, memory a quarter: 100 × (1 − 0.125) = 87.
    let skewed = Candidate { name: "n1", node: &n, state: state(2000, 2 * GI) };
    assert_eq!(balanced_allocation(&plain, &skewed), 87);
    assert_eq!(balanced_allocation(&plain, &half), 100);
}

#[test]
fn the_emptier_node_wins_and_equals_go_by_name() {
    let nodes: BTreeMap<String, Value> =
        ["n1", "n2"].iter().map(|n| ((*n).to_owned(), node(n, "4", "8Gi", json!({})))).collect();
    let plain = pod(json!({"containers": [{"name": "c", "image": "app"}]}));
    let candidates = |busy: NodeState| {
        vec![
            Candidate { name: "n1", node: &nodes["n1"], state: busy },
            Candidate { name: "n2", node: &nodes["n2"], state: state(0, 0) },
        ]
    };
    let none = HashMap::new();
    assert_eq!(pick(&plain, &candidates(state(0, 0)), &nodes, None, &none), Some(0), "equal: by name");
    assert_eq!(pick(&plain, &candidates(state(1000, 2 * GI)), &nodes, None, &none), Some(1));
}

#[test]
fn taints_affinity_and_images_weigh_in() {
    let tainted = node("n1", "4", "8Gi", json!({"spec": {"taints": [{"key": "spot", "effect": "PreferNoSchedule"}]}}));
    let nodes: BTreeMap<String, Value> =
        [("n1".to_owned(), tainted), ("n2".to_owned(), node("n2", "4", "8Gi", json!({"labels": {"disk": "ssd"}})))]
            .into();
    let c = |i: usize| Candidate {
        name: if i == 0 { "n1" } else { "n2" },
        node: &nodes[if i == 0 { "n1" } else { "n2" }],
        state: state(0, 0),
    };
    let candidates = [c(0), c(1)];
    let none = HashMap::new();
    let plain = pod(json!({"containers": [{"name": "c", "image": "app"}]}));
    assert_eq!(pick(&plain, &candidates, &nodes, None, &none), Some(1), "an untolerated preference repels");
    let tolerant = pod(json!({"containers": [{"name": "c", "image": "app"}],
        "tolerations": [{"key": "spot", "operator": "Exists"}]}));
    assert_eq!(pick(&tolerant, &candidates, &nodes, None, &none), Some(0), "tolerated: equal, by name");
    assert_eq!(intolerable_preferences(&tolerant, &nodes["n1"]), 0);
    let prefers = pod(json!({"containers": [{"name": "c", "image": "app"}],
        "tolerations": [{"key": "spot", "operator": "Exists"}],
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}}));
    assert_eq!(preferred_affinity(&prefers, &nodes["n2"]), 10);
    assert_eq!(pick(&prefers, &candidates, &nodes, None, &none), Some(1));
    // A 500 MB image on one node of two: scaled to 250 MB, (250 − 23) / (1000 − 23) of 100.
    let with_image = node(
        "n1",
        "4",
        "8Gi",
        json!({"status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "images": [{"names": ["app"], "sizeBytes": 500 * 1024 * 1024}]}}),
    );
    let holder = Candidate { name: "n1", node: &with_image, state: state(0, 0) };
    assert_eq!(image_locality(&plain, &holder, &HashMap::from([("app".to_owned(), 1)]), 2), 23);
}

#[test]
fn replicas_spread_over_hosts_and_zones() {
    let zone = |z: &str| json!({"labels": {"topology.kubernetes.io/zone": z}});
    let nodes: BTreeMap<String, Value> = [("n1", "a"), ("n2", "a"), ("n3", "b")]
        .iter()
        .map(|(n, z)| ((*n).to_owned(), node(n, "4", "8Gi", zone(z))))
        .collect();
    let candidates: Vec<Candidate<'_>> =
        nodes.iter().map(|(name, node)| Candidate { name, node, state: state(0, 0) }).collect();
    let plain = pod(json!({"containers": [{"name": "c", "image": "app"}]}));
    let none = HashMap::new();
    // One replica on n1: zone a holds it, so zone b's n3 is preferred over n2.
    let spread = Spread { matching: HashMap::from([("n1".to_owned(), 1)]) };
    assert_eq!(pick(&plain, &candidates, &nodes, Some(&spread), &none), Some(2));
    // Two on n1 and one on n3: n2's empty host weighs as much as n3's emptier zone.
    // Raw: n1 2·ln 5 + 2 + 2·ln 4 + 4 ≈ 12, n2 and n3 ≈ 9; normalized 100·(12 + 9 − s)/12.
    let spread = Spread { matching: HashMap::from([("n1".to_owned(), 2), ("n3".to_owned(), 1)]) };
    assert_eq!(topology_spread(&candidates, &nodes, &spread), [75, 100, 100]);
}
