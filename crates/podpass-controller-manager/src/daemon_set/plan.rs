//! What the DaemonSet controller decides, as pure functions of the DaemonSet, the nodes,
//! its pods and the clock (upstream `pkg/controller/daemon/daemon_controller.go`
//! `NodeShouldRunDaemonPod`, `podsShouldBeOnNode`, `updateDaemonSetStatus`; `update.go`
//! `rollingUpdate`, `constructHistory`, `cleanupHistory`; `util/daemonset_util.go`): which
//! nodes should run a daemon pod, which pods go, which nodes get one, what rolls, and the
//! status counts. `super` executes the plan.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec,
    PodTemplateSpec, Toleration,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use podpass_api::taint;

use crate::deployment::plan::int_or_percent;
use crate::replica_set::plan::{is_available, ready_since};

/// The label tying a pod and a ControllerRevision to one template
/// (`apps.DefaultDaemonSetUniqueLabelKey`).
pub(crate) const REVISION_HASH: &str = "controller-revision-hash";
/// The pod label carrying the template generation (`DaemonSetTemplateGenerationKey`).
pub(crate) const TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";
/// The DaemonSet annotation the API server keeps the template generation in.
pub(crate) const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

/// Whether a node should run the daemon pod, and whether one already there may stay
/// (`NodeShouldRunDaemonPod`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Eligibility {
    /// A daemon pod belongs here.
    pub should_run: bool,
    /// One already here may stay (it tolerates every NoExecute taint).
    pub should_continue_running: bool,
}

/// The tolerations every daemon pod gets (`AddOrUpdateDaemonPodTolerations`): it survives
/// the node lifecycle's NoExecute taints forever and schedules through the condition taints.
pub(crate) fn add_daemon_tolerations(spec: &mut PodSpec) {
    let exists = |key: &str, effect: &str| Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some(effect.into()),
        ..Default::default()
    };
    let mut wanted = vec![
        exists("node.kubernetes.io/not-ready", "NoExecute"),
        exists("node.kubernetes.io/unreachable", "NoExecute"),
        exists("node.kubernetes.io/disk-pressure", "NoSchedule"),
        exists("node.kubernetes.io/memory-pressure", "NoSchedule"),
        exists("node.kubernetes.io/pid-pressure", "NoSchedule"),
        exists("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if spec.host_network == Some(true) {
        wanted.push(exists("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    for t in wanted {
        // AddOrUpdateTolerationInPodSpec: unique by key, operator, value and effect; one
        // of the same four is replaced (a tolerationSeconds of its own goes).
        let same = |o: &Toleration| {
            o.key == t.key
                && o.operator.as_deref().unwrap_or("Equal") == t.operator.as_deref().unwrap_or("Equal")
                && o.value.as_deref().unwrap_or_default() == t.value.as_deref().unwrap_or_default()
                && o.effect == t.effect
        };
        match tolerations.iter_mut().find(|o| same(o)) {
            Some(existing) => *existing = t,
            None => tolerations.push(t),
        }
    }
}

/// `ReplaceDaemonSetPodNodeNameNodeAffinity`: the required node affinity becomes one term
/// naming the node by `metadata.name`, so the default scheduler binds the pod there.
pub(crate) fn pin_to_node(affinity: Option<Affinity>, node: &str) -> Affinity {
    let selector = NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![node.into()]),
            }]),
            match_expressions: None,
        }],
    };
    let mut affinity = affinity.unwrap_or_default();
    let node_affinity = affinity.node_affinity.get_or_insert_with(NodeAffinity::default);
    node_affinity.required_during_scheduling_ignored_during_execution = Some(selector);
    affinity
}

fn untolerated<'a>(node: &'a Node, tolerations: &[Toleration], effects: &[&str]) -> Option<&'a str> {
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    taints.into_iter().flatten().filter(|t| effects.contains(&t.effect.as_str())).find_map(|t| {
        let taint = taint::Taint { key: &t.key, value: t.value.as_deref().unwrap_or_default(), effect: &t.effect };
        let tolerated = tolerations.iter().any(|o| {
            taint::Toleration {
                key: o.key.as_deref().unwrap_or_default(),
                operator: o.operator.as_deref().unwrap_or_default(),
                value: o.value.as_deref().unwrap_or_default(),
                effect: o.effect.as_deref().unwrap_or_default(),
            }
            .tolerates(&taint)
        });
        (!tolerated).then_some(t.key.as_str())
    })
}

/// `NodeShouldRunDaemonPod`: the template's `nodeName` (if any) is this node, its
/// nodeSelector and required node affinity match the node, and its tolerations (with the
/// daemon ones) tolerate every NoSchedule and NoExecute taint; a pod already there may
/// stay while it tolerates every NoExecute one.
pub(crate) fn eligibility(ds: &DaemonSet, node: &Node) -> Eligibility {
    let never = Eligibility { should_run: false, should_continue_running: false };
    let Some(mut spec) = ds.spec.as_ref().and_then(|s| s.template.spec.clone()) else { return never };
    let node_name = node.metadata.name.as_deref().unwrap_or_default();
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty() && n != node_name) {
        return never;
    }
    let node_json = serde_json::to_value(node).unwrap_or_default();
    let spec_json = serde_json::to_value(&spec).unwrap_or_default();
    if !podpass_api::node_affinity::required_matches(&spec_json, &node_json) {
        return never;
    }
    add_daemon_tolerations(&mut spec);
    let tolerations = spec.tolerations.unwrap_or_default();
    if untolerated(node, &tolerations, &["NoSchedule", "NoExecute"]).is_none() {
        return Eligibility { should_run: true, should_continue_running: true };
    }
    Eligibility {
        should_run: false,
        should_continue_running: untolerated(node, &tolerations, &["NoExecute"]).is_none(),
    }
}

/// `GetTargetNodeName`: the node a daemon pod is bound to, or pinned to by its affinity.
pub(crate) fn target_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(name) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(name.to_owned());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().flat_map(|t| t.match_fields.iter().flatten()).find_map(|r| {
        let values = r.values.as_deref().unwrap_or_default();
        (r.key == "metadata.name" && r.operator == "In" && values.len() == 1).then(|| values[0].clone())
    })
}

/// The DaemonSet's template generation (its server-kept annotation), if it parses.
pub(crate) fn template_generation(ds: &DaemonSet) -> Option<i64> {
    ds.metadata.annotations.as_ref()?.get(TEMPLATE_GENERATION)?.parse().ok()
}

/// `IsPodUpdated`: the pod carries the current revision's hash, or the current template
/// generation.
pub(crate) fn is_updated(pod: &Pod, hash: &str, generation: Option<i64>) -> bool {
    let labels = pod.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    let hash_matches = !hash.is_empty() && label(REVISION_HASH) == Some(hash);
    let generation_matches =
        generation.is_some_and(|g| label(TEMPLATE_GENERATION_LABEL) == Some(g.to_string().as_str()));
    hash_matches || generation_matches
}

/// `CreatePodTemplate`: the template with the daemon tolerations and the generation and
/// revision labels.
pub(crate) fn pod_template(ds: &DaemonSet, hash: &str) -> PodTemplateSpec {
    let mut template = ds.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let spec = template.spec.get_or_insert_with(PodSpec::default);
    add_daemon_tolerations(spec);
    let labels = template.metadata.get_or_insert_with(Default::default).labels.get_or_insert_with(BTreeMap::new);
    if let Some(g) = template_generation(ds) {
        labels.insert(TEMPLATE_GENERATION_LABEL.into(), g.to_string());
    }
    if !hash.is_empty() {
        labels.insert(REVISION_HASH.into(), hash.into());
    }
    template
}

/// `podByCreationTimestampAndPhase`: scheduled pods first, then the oldest, then by name.
pub(crate) fn oldest_first(a: &Pod, b: &Pod) -> Ordering {
    let bound = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
    bound(b)
        .cmp(&bound(a))
        .then_with(|| {
            a.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0)
                .cmp(&b.metadata.creation_timestamp.as_ref().map(|t| t.0))
        })
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default()
}

fn is_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

fn hash_of(pod: &Pod) -> Option<&str> {
    pod.metadata.labels.as_ref()?.get(REVISION_HASH).map(String::as_str)
}

/// `AllowsSurge`: a rolling update whose maxSurge is not zero.
pub(crate) fn allows_surge(ds: &DaemonSet) -> bool {
    surge_and_unavailable(ds).is_some_and(|(s, _)| surge_nonzero(s))
}

fn surge_nonzero(s: Option<IntOrString>) -> bool {
    s.as_ref().is_some_and(|s| int_or_percent(s).value().is_ok_and(|n| n != 0))
}

type Bounds = (Option<IntOrString>, Option<IntOrString>);

fn surge_and_unavailable(ds: &DaemonSet) -> Option<Bounds> {
    let strategy = ds.spec.as_ref()?.update_strategy.as_ref()?;
    if strategy.type_.as_deref().unwrap_or("RollingUpdate") != "RollingUpdate" {
        return None;
    }
    let rolling = strategy.rolling_update.clone().unwrap_or_default();
    Some((rolling.max_surge, rolling.max_unavailable))
}

/// What `manage` does on the nodes: the pods that go and the nodes that get a pod.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct NodePlan {
    /// Nodes that need a daemon pod.
    pub create_on: Vec<String>,
    /// Pods to delete.
    pub delete: Vec<String>,
    /// Failed pods among `delete`, with their node (for `FailedDaemonPod`).
    pub failed: Vec<(String, String)>,
}

/// `podsShouldBeOnNode` over every node: a pod where one should run and none is; the
/// failed and succeeded ones deleted; of several running, the oldest kept (with surge,
/// the oldest new and — while the new one is not yet available and the old one is
/// ready — the oldest old); every one deleted where none may stay.
pub(crate) fn manage(
    ds: &DaemonSet,
    nodes: &[(String, Eligibility)],
    by_node: &BTreeMap<String, Vec<&Pod>>,
    hash: &str,
    now: jiff::Timestamp,
) -> NodePlan {
    let mut plan = NodePlan::default();
    let min_ready = i64::from(ds.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0));
    let surge = allows_surge(ds);
    for (node, e) in nodes {
        let pods = by_node.get(node).map_or(&[][..], Vec::as_slice);
        if e.should_run && pods.is_empty() {
            plan.create_on.push(node.clone());
        } else if e.should_continue_running {
            let mut running: Vec<&Pod> = Vec::new();
            for pod in pods.iter().copied().filter(|p| p.metadata.deletion_timestamp.is_none()) {
                match phase(pod) {
                    "Failed" => {
                        plan.delete.push(name(pod));
                        plan.failed.push((name(pod), node.clone()));
                    }
                    "Succeeded" => plan.delete.push(name(pod)),
                    _ => running.push(pod),
                }
            }
            if running.len() <= 1 {
                continue;
            }
            running.sort_by(|a, b| oldest_first(a, b));
            if !surge {
                plan.delete.extend(running[1..].iter().map(|p| name(p)));
                continue;
            }
            let (mut oldest_new, mut oldest_old): (Option<&Pod>, Option<&Pod>) = (None, None);
            for pod in running {
                let slot = if hash_of(pod) == Some(hash) { &mut oldest_new } else { &mut oldest_old };
                if slot.is_none() {
                    *slot = Some(pod);
                } else {
                    plan.delete.push(name(pod));
                }
            }
            if let (Some(new), Some(old)) = (oldest_new, oldest_old)
                && (!is_ready(old) || is_available(new, min_ready, now))
            {
                plan.delete.push(name(old));
            }
        } else {
            plan.delete.extend(pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).map(|p| name(p)));
        }
    }
    plan
}

/// `findUpdatedPodsOnNode`: the node's one new and one old pod (not being deleted);
/// `None` when it has two of either (the manage pass cleans that up first).
fn new_and_old<'a>(
    pods: &[&'a Pod],
    hash: &str,
    generation: Option<i64>,
) -> Option<(Option<&'a Pod>, Option<&'a Pod>)> {
    let (mut new, mut old) = (None, None);
    for pod in pods.iter().copied().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let slot = if is_updated(pod, hash, generation) { &mut new } else { &mut old };
        if slot.is_some() {
            return None;
        }
        *slot = Some(pod);
    }
    Some((new, old))
}

/// `updatedDesiredNodeCounts`: maxSurge and maxUnavailable scaled (rounding up) to the
/// nodes that should run the pod; both zero on a non-empty set means one unavailable.
fn desired_bounds(ds: &DaemonSet, desired: usize) -> (usize, usize) {
    let Some((surge, unavailable)) = surge_and_unavailable(ds) else { return (0, 1) };
    let total = i32::try_from(desired).unwrap_or(i32::MAX);
    let scaled = |v: Option<IntOrString>, default: i32| {
        let n = v.as_ref().map_or(default, |v| int_or_percent(v).scaled(total, true).unwrap_or(default));
        usize::try_from(n.max(0)).unwrap_or(0)
    };
    let (surge, mut unavailable) = (scaled(surge, 0), scaled(unavailable, 1));
    if desired > 0 && surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable)
}

/// What one rolling-update pass does: old pods to delete and nodes to surge onto.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Roll {
    /// Old pods deleted (their nodes get a new one through `manage`).
    pub delete: Vec<String>,
    /// Nodes that get a new pod beside their old one (surge).
    pub create_on: Vec<String>,
}

/// `rollingUpdate`. Without surge: old pods that are not available are replaced at once,
/// available ones while fewer than maxUnavailable nodes are unavailable. With surge: a new
/// pod beside an old one on up to maxSurge nodes at once (at once where the old one is
/// not available), the old one deleted when the new one is available.
pub(crate) fn rolling_update(
    ds: &DaemonSet,
    nodes: &[(String, Eligibility)],
    by_node: &BTreeMap<String, Vec<&Pod>>,
    hash: &str,
    now: jiff::Timestamp,
) -> Roll {
    let generation = template_generation(ds);
    let min_ready = i64::from(ds.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0));
    let desired: Vec<&String> = nodes.iter().filter(|(_, e)| e.should_run).map(|(n, _)| n).collect();
    let (max_surge, max_unavailable) = desired_bounds(ds, desired.len());
    // Every node with pods, and every node that should have one.
    let mut considered: BTreeMap<&String, &[&Pod]> = by_node.iter().map(|(n, p)| (n, p.as_slice())).collect();
    for n in &desired {
        considered.entry(n).or_insert(&[]);
    }
    let mut roll = Roll::default();
    if max_surge == 0 {
        let mut unavailable = 0usize;
        let (mut replace, mut candidates) = (Vec::new(), Vec::new());
        for pods in considered.values() {
            match new_and_old(pods, hash, generation) {
                None | Some((None, None) | (Some(_), Some(_))) => unavailable += 1,
                Some((Some(new), None)) => {
                    if !is_available(new, min_ready, now) {
                        unavailable += 1;
                    }
                }
                Some((None, Some(old))) => {
                    if !is_available(old, min_ready, now) {
                        replace.push(name(old));
                    } else if unavailable < max_unavailable {
                        candidates.push(name(old));
                    }
                }
            }
        }
        let room = max_unavailable.saturating_sub(unavailable).min(candidates.len());
        roll.delete = replace;
        roll.delete.extend(candidates.into_iter().take(room));
        return roll;
    }
    let should_run = |n: &String| nodes.iter().any(|(m, e)| m == n && e.should_run);
    let mut surged = 0usize;
    let (mut allowed, mut candidates) = (Vec::new(), Vec::new());
    for (node, pods) in &considered {
        let Some((new, old)) = new_and_old(pods, hash, generation) else {
            surged += 1;
            continue;
        };
        if !should_run(node) {
            continue;
        }
        match (new, old) {
            (_, None) => {}
            (None, Some(old)) => {
                if !is_available(old, min_ready, now) {
                    allowed.push((*node).clone());
                } else if surged < max_surge {
                    candidates.push((*node).clone());
                }
            }
            (Some(new), Some(old)) => {
                if is_available(new, min_ready, now) {
                    roll.delete.push(name(old));
                } else {
                    surged += 1;
                }
            }
        }
    }
    let room = max_surge.saturating_sub(surged).min(candidates.len());
    roll.create_on = allowed;
    roll.create_on.extend(candidates.into_iter().take(room));
    roll
}

/// `updateDaemonSetStatus`'s counts, per node that should run the pod its oldest pod
/// judged; misscheduled: nodes that should not and have one.
pub(crate) fn status(
    ds: &DaemonSet,
    nodes: &[(String, Eligibility)],
    by_node: &BTreeMap<String, Vec<&Pod>>,
    hash: &str,
    now: jiff::Timestamp,
) -> DaemonSetStatus {
    let generation = template_generation(ds);
    let min_ready = i64::from(ds.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0));
    let (mut desired, mut current, mut misscheduled, mut ready, mut available, mut updated) = (0, 0, 0, 0, 0, 0);
    for (node, e) in nodes {
        let mut pods: Vec<&Pod> = by_node.get(node).cloned().unwrap_or_default();
        if !e.should_run {
            if !pods.is_empty() {
                misscheduled += 1;
            }
            continue;
        }
        desired += 1;
        pods.sort_by(|a, b| oldest_first(a, b));
        let Some(pod) = pods.first() else { continue };
        current += 1;
        if is_ready(pod) {
            ready += 1;
            if is_available(pod, min_ready, now) {
                available += 1;
            }
        }
        if is_updated(pod, hash, generation) {
            updated += 1;
        }
    }
    let previous = ds.status.clone().unwrap_or_default();
    DaemonSetStatus {
        desired_number_scheduled: desired,
        current_number_scheduled: current,
        number_misscheduled: misscheduled,
        number_ready: ready,
        number_available: Some(available),
        number_unavailable: Some(desired - available),
        updated_number_scheduled: Some(updated),
        observed_generation: ds.metadata.generation,
        collision_count: previous.collision_count,
        conditions: previous.conditions,
    }
}

/// `getPatch`: the revision's data, the template to put back (`kubectl rollout undo`
/// applies it as a strategic merge patch).
pub(crate) fn revision_data(ds: &DaemonSet) -> serde_json::Value {
    let template = ds.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let mut template = serde_json::to_value(template).unwrap_or_default();
    if let Some(t) = template.as_object_mut() {
        t.insert("$patch".into(), "replace".into());
    }
    serde_json::json!({"spec": {"template": template}})
}

/// `Match`: the revision holds the DaemonSet's template.
pub(crate) fn matches(ds: &DaemonSet, revision: &ControllerRevision) -> bool {
    revision.data.as_ref().is_some_and(|d| d.0 == revision_data(ds))
}

/// `cleanupHistory`: old revisions beyond `revisionHistoryLimit`, the lowest first, none
/// whose hash a live pod carries.
pub(crate) fn history_to_delete(ds: &DaemonSet, old: &[&ControllerRevision], pods: &[&Pod]) -> Vec<String> {
    let keep =
        usize::try_from(ds.spec.as_ref().and_then(|s| s.revision_history_limit).unwrap_or(10).max(0)).unwrap_or(0);
    let mut excess = old.len().saturating_sub(keep);
    let live: Vec<&str> = pods.iter().filter_map(|p| hash_of(p)).collect();
    let mut sorted: Vec<&&ControllerRevision> = old.iter().collect();
    sorted.sort_by_key(|r| r.revision);
    let mut out = Vec::new();
    for r in sorted {
        if excess == 0 {
            break;
        }
        let hash = r.metadata.labels.as_ref().and_then(|l| l.get(REVISION_HASH)).map(String::as_str);
        if hash.is_some_and(|h| live.contains(&h)) {
            continue;
        }
        out.push(r.metadata.name.clone().unwrap_or_default());
        excess -= 1;
    }
    out
}

#[cfg(test)]
mod tests;
