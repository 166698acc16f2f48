//! Which of the nodes a pod fits it goes to: kube-scheduler's default score plugins with
//! their default weights (`getDefaultPlugins`), each scoring 0–100 and normalized as
//! upstream's, summed weighted:
//!
//! | plugin | weight | |
//! |---|---|---|
//! | TaintToleration | 3 | fewer untolerated `PreferNoSchedule` taints |
//! | NodeAffinity | 2 | the weights of the preferred terms a node matches |
//! | PodTopologySpread | 2 | the system-default constraints: hostname (maxSkew 3) and zone (maxSkew 5), over the pods the pod's Services and ReplicaSets select |
//! | NodeResourcesFit | 1 | `LeastAllocated` on cpu and memory, a container without requests counting 100m and 200 MiB |
//! | BalancedAllocation | 1 | cpu and memory used in like shares |
//! | ImageLocality | 1 | the pod's images already on the node (`status.images`) |
//!
//! Among equal scores the first node by name wins, where upstream picks one at random: a
//! placement is then reproducible. Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use podpass_api::field::Field;
use serde_json::Value;

use crate::fit::{self, NodeState};

const MAX: i64 = 100;
/// `NonZeroRequested`: what a container without a request counts for scoring.
const DEFAULT_MILLI_CPU: i128 = 100;
const DEFAULT_MEMORY_BYTES: i128 = 200 * 1024 * 1024;
/// ImageLocality's thresholds (`minThreshold` 23 MB, `maxContainerThreshold` 1000 MB).
const IMAGE_MIN: i128 = 23 * 1024 * 1024;
const IMAGE_MAX_PER_CONTAINER: i128 = 1000 * 1024 * 1024;
const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";
/// The system-default spreading constraints (`systemDefaultConstraints`).
const DEFAULT_CONSTRAINTS: [(&str, i64); 2] = [(HOSTNAME, 3), (ZONE, 5)];

/// A node the pod fits, with what is placed on it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate<'a> {
    pub name: &'a str,
    pub node: &'a Value,
    pub state: NodeState,
}

/// A pod's request of `resource` for scoring (`NonZeroRequested`): as [`fit::pod_request`]
/// but a container that asks nothing of cpu or memory counts the defaults.
pub(crate) fn non_zero_request(pod: &Value, resource: &str) -> i128 {
    let default = match resource {
        "cpu" => DEFAULT_MILLI_CPU,
        "memory" => DEFAULT_MEMORY_BYTES * 1000,
        _ => 0,
    };
    fit::pod_request_or(pod, resource, default)
}

/// NodeResourcesFit's `LeastAllocated`: the free share of each resource after the pod,
/// averaged (cpu and memory weigh 1 each).
pub(crate) fn least_allocated(pod: &Value, c: &Candidate<'_>) -> i64 {
    let score = |resource: &str, placed: i128| {
        let capacity = fit::allocatable(c.node, resource);
        let requested = placed + non_zero_request(pod, resource);
        if capacity == 0 || requested > capacity {
            0
        } else {
            ((capacity - requested) * i128::from(MAX) / capacity) as i64
        }
    };
    (score("cpu", c.state.nz_cpu) + score("memory", c.state.nz_memory)) / 2
}

/// BalancedAllocation: 100 × (1 − the standard deviation of the cpu and memory shares
/// the node would have in use, each at most 1), on the requests as asked.
pub(crate) fn balanced_allocation(pod: &Value, c: &Candidate<'_>) -> i64 {
    let share = |resource: &str, placed: i128| {
        let capacity = fit::allocatable(c.node, resource);
        if capacity == 0 {
            return 1.0;
        }
        ((placed + fit::pod_request(pod, resource)) as f64 / capacity as f64).min(1.0)
    };
    let (cpu, memory) = (share("cpu", c.state.cpu), share("memory", c.state.memory));
    let deviation = (cpu - memory).abs() / 2.0;
    ((1.0 - deviation) * MAX as f64) as i64
}

/// TaintToleration's raw score: the node's `PreferNoSchedule` taints the pod does not
/// tolerate with a toleration of that effect (or of none).
fn intolerable_preferences(pod: &Value, node: &Value) -> i64 {
    let tolerations = pod.field("/spec/tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    let text = |v: &Value, p: &str| v.field(p).and_then(Value::as_str).unwrap_or_default().to_owned();
    let preferred: Vec<&Value> = tolerations
        .iter()
        .filter(|t| matches!(t.field("/effect").and_then(Value::as_str), None | Some("") | Some("PreferNoSchedule")))
        .collect();
    let taints = node.field("/spec/taints").and_then(Value::as_array).cloned().unwrap_or_default();
    taints
        .iter()
        .filter(|t| text(t, "/effect") == "PreferNoSchedule")
        .filter(|taint| {
            let (key, value) = (text(taint, "/key"), text(taint, "/value"));
            !preferred.iter().any(|t| {
                let (k, o, v, e) = (text(t, "/key"), text(t, "/operator"), text(t, "/value"), text(t, "/effect"));
                podpass_api::taint::Toleration { key: &k, operator: &o, value: &v, effect: &e }
                    .tolerates(&podpass_api::taint::Taint { key: &key, value: &value, effect: "PreferNoSchedule" })
            })
        })
        .count() as i64
}

/// NodeAffinity's raw score: the summed weights of the preferred terms the node matches.
fn preferred_affinity(pod: &Value, node: &Value) -> i64 {
    let terms = pod
        .field("/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    terms
        .iter()
        .filter(|t| t.field("/preference").is_some_and(|p| fit::term_matches(p, node)))
        .map(|t| t.field("/weight").and_then(Value::as_i64).unwrap_or(0))
        .sum()
}

/// `DefaultNormalizeScore`: scaled so the highest is 100, reversed when fewer is better.
fn normalize(raw: &[i64], reverse: bool) -> Vec<i64> {
    let max = raw.iter().copied().max().unwrap_or(0);
    if max == 0 {
        return raw.iter().map(|_| if reverse { MAX } else { 0 }).collect();
    }
    raw.iter()
        .map(|s| {
            let scaled = MAX * s / max;
            if reverse { MAX - scaled } else { scaled }
        })
        .collect()
}

/// ImageLocality: the sizes of the pod's images the node holds, each scaled by the share
/// of nodes holding it, between the thresholds.
fn image_locality(pod: &Value, c: &Candidate<'_>, holders: &HashMap<String, usize>, nodes: usize) -> i64 {
    let containers = pod.field("/spec/containers").and_then(Value::as_array).cloned().unwrap_or_default();
    let images = c.node.field("/status/images").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut sum: i128 = 0;
    for container in &containers {
        let Some(image) = container.field("/image").and_then(Value::as_str) else { continue };
        let held = images.iter().find(|i| {
            i.field("/names").and_then(Value::as_array).is_some_and(|names| names.iter().any(|n| n == image))
        });
        if let Some(held) = held {
            let size = i128::from(held.field("/sizeBytes").and_then(Value::as_i64).unwrap_or(0));
            let holding = holders.get(image).copied().unwrap_or(1) as i128;
            sum += size * holding / nodes.max(1) as i128;
        }
    }
    let max = IMAGE_MAX_PER_CONTAINER * containers.len().max(1) as i128;
    let clamped = sum.clamp(IMAGE_MIN, max);
    ((clamped - IMAGE_MIN) * i128::from(MAX) / (max - IMAGE_MIN)) as i64
}

/// What PodTopologySpread scores by: the pods that select like the pod, per node.
#[derive(Debug, Default, Clone)]
pub(crate) struct Spread {
    /// Node name → pods there matching the pod's default selector.
    pub matching: HashMap<String, usize>,
}

/// PodTopologySpread with the system-default constraints (`Score`, `NormalizeScore`): a
/// node scores its domain's matching pods weighted by log(domains + 2) plus maxSkew − 1,
/// per constraint whose key it has; fewer is better.
fn topology_spread(candidates: &[Candidate<'_>], all_nodes: &BTreeMap<String, Value>, spread: &Spread) -> Vec<i64> {
    let label = |node: &Value, key: &str| node["metadata"]["labels"][key].as_str().map(str::to_owned);
    let mut raw = Vec::with_capacity(candidates.len());
    // Domains and their counts among the candidate nodes, as PreScore counts them.
    let mut weights = Vec::new();
    let mut counts: Vec<HashMap<String, usize>> = Vec::new();
    for (key, _) in DEFAULT_CONSTRAINTS {
        let mut domains: BTreeSet<String> = BTreeSet::new();
        let mut per_domain: HashMap<String, usize> = HashMap::new();
        for c in candidates {
            if let Some(value) = label(c.node, key) {
                domains.insert(value.clone());
                per_domain.entry(value).or_default();
            }
        }
        for (name, n) in &spread.matching {
            if let Some(value) = all_nodes.get(name).and_then(|node| label(node, key))
                && let Some(count) = per_domain.get_mut(&value)
            {
                *count += n;
            }
        }
        let size = if key == HOSTNAME { candidates.len() } else { domains.len() };
        weights.push(((size + 2) as f64).ln());
        counts.push(per_domain);
    }
    for c in candidates {
        let mut score = 0.0;
        for (i, (key, max_skew)) in DEFAULT_CONSTRAINTS.iter().enumerate() {
            let Some(value) = label(c.node, key) else { continue };
            let count = if *key == HOSTNAME {
                spread.matching.get(c.name).copied().unwrap_or(0)
            } else {
                counts[i].get(&value).copied().unwrap_or(0)
            };
            score += count as f64 * weights[i] + (*max_skew - 1) as f64;
        }
        raw.push(score.round() as i64);
    }
    let (min, max) = (raw.iter().copied().min().unwrap_or(0), raw.iter().copied().max().unwrap_or(0));
    raw.iter().map(|s| if max == 0 { MAX } else { MAX * (max + min - s) / max }).collect()
}

/// The index of the candidate `pod` goes to: the highest weighted sum, the first by name
/// among equals. `spread` is `None` when no Service or ReplicaSet selects the pod (the
/// system-default constraints then do not apply, as upstream's PreScore skips).
pub(crate) fn pick(
    pod: &Value,
    candidates: &[Candidate<'_>],
    all_nodes: &BTreeMap<String, Value>,
    spread: Option<&Spread>,
    image_holders: &HashMap<String, usize>,
) -> Option<usize> {
    let taints = normalize(&candidates.iter().map(|c| intolerable_preferences(pod, c.node)).collect::<Vec<_>>(), true);
    let affinity = normalize(&candidates.iter().map(|c| preferred_affinity(pod, c.node)).collect::<Vec<_>>(), false);
    let topology = spread.map(|s| topology_spread(candidates, all_nodes, s));
    let totals = candidates.iter().enumerate().map(|(i, c)| {
        3 * taints[i]
            + 2 * affinity[i]
            + 2 * topology.as_ref().map_or(0, |t| t[i])
            + least_allocated(pod, c)
            + balanced_allocation(pod, c)
            + image_locality(pod, c, image_holders, all_nodes.len())
    });
    let mut best: Option<(i64, usize)> = None;
    for (i, total) in totals.enumerate() {
        let better = match best {
            None => true,
            Some((score, at)) => total > score || (total == score && candidates[i].name < candidates[at].name),
        };
        if better {
            best = Some((total, i));
        }
    }
    best.map(|(_, i)| i)
}

#[cfg(test)]
mod tests;
