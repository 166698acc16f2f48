//! Node-pressure eviction (kubelet: the eviction manager's `synchronize`): every
//! monitoring interval the node observes its signals against its hard thresholds
//! (`evictionHard`), reports `MemoryPressure`/`DiskPressure`/`PIDPressure` (held for the
//! `evictionPressureTransitionPeriod`), and while a threshold is met:
//!
//! 1. records `EvictionThresholdMet` ("Attempting to reclaim <resource>") on the Node;
//! 2. for disk signals, first reclaims what belongs to no pod — images no container uses
//!    that were first seen at least `imageMinimumGCAge` ago (never the runtime's sandbox
//!    image) — and stops there if that relieved the pressure;
//! 3. ranks the active pods (memory: usage over request first, then lower priority, then
//!    usage less request; disk and inodes: the same with the pod's disk use; pids: priority,
//!    then process count) and evicts the first one that is not critical, one pod per
//!    interval, with upstream's message ("The node was low on resource: …"); then waits
//!    (30 s at most) until that pod's containers and volumes are gone.
//!
//! The pod's own worker does the eviction (it owns the pod's status): this manager names
//! the pod and its message in [`Evictions`], and the pod loop wakes the worker.
//! Ranking and messages are pure functions of the pods and what was measured.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};

use super::pressure::{ConditionClock, Filesystems, Observation, Observations, Pressure};
use super::worker::Shared;
use crate::eviction_thresholds::{Signal, Threshold};
use crate::images::service::ImageService as _;
use podpass_api::quantity::{format_binary_si as binary_si, format_decimal_si as decimal_si};

/// The eviction manager's monitoring interval (kubelet `evictionMonitoringPeriod`, 10 s).
pub(crate) const MONITORING_INTERVAL: Duration = Duration::from_secs(10);
/// How long the manager waits for an evicted pod to be cleaned up (kubelet
/// `podCleanupTimeout`).
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
/// `scheduling.SystemCriticalPriority`: a pod at or above it is critical.
const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// Pods the manager has chosen to evict, by UID, with the message: the worker evicts the
/// pod, cleans it up and then forgets the entry.
#[derive(Debug, Default)]
pub(crate) struct Evictions {
    pending: Mutex<HashMap<String, String>>,
}

impl Evictions {
    /// The message of the pod's pending eviction.
    pub(crate) fn pending(&self, uid: &str) -> Option<String> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).get(uid).cloned()
    }

    fn insert(&self, uid: &str, message: String) {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).insert(uid.to_owned(), message);
    }

    /// The pod is evicted and cleaned up.
    pub(crate) fn done(&self, uid: &str) {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).remove(uid);
    }
}

/// The manager's settings (from the KubeletConfiguration).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// `evictionHard`.
    pub thresholds: Vec<Threshold>,
    /// `evictionPressureTransitionPeriod`.
    pub transition_period: Duration,
    /// `imageMinimumGCAge`.
    pub image_minimum_gc_age: Duration,
    /// The filesystems observed.
    pub filesystems: Filesystems,
}

/// What one pod uses, as ranking reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Memory working set (bytes).
    pub memory: u64,
    /// Node filesystem bytes: writable layers, logs, disk emptyDirs.
    pub disk: u64,
    /// Inodes of the same.
    pub inodes: u64,
}

/// A pod that may be evicted, and what it was measured to use (`None`: it could not be
/// measured; upstream ranks such a pod first).
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub pod: Arc<Pod>,
    pub usage: Option<Usage>,
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// kubelet `IsCriticalPod`: a static or mirror pod, or one at system-critical priority.
pub(crate) fn is_critical(pod: &Pod) -> bool {
    let annotations = pod.metadata.annotations.as_ref();
    let static_or_mirror = annotations.is_some_and(|a| {
        a.contains_key("kubernetes.io/config.mirror")
            || a.get("kubernetes.io/config.source").is_some_and(|s| s != "api")
    });
    static_or_mirror || priority(pod) >= SYSTEM_CRITICAL_PRIORITY
}

/// The amount a signal ranks by, and the pod's request of it.
fn used_and_requested(signal: Signal, c: &Candidate) -> Option<(u64, u64)> {
    let usage = c.usage?;
    let request = |name| c.pod.spec.as_ref().map_or(0, |spec| super::cgroups::pod_request(spec, name));
    Some(match signal.resource() {
        "memory" => (usage.memory, request("memory")),
        "ephemeral-storage" => (usage.disk, request("ephemeral-storage")),
        // Inodes have no request; pids rank by priority alone here.
        _ => (usage.inodes, 0),
    })
}

/// A candidate's place in the ranking, smallest first: measured or not, over its request
/// or not, its priority, then its use beyond its request (larger first).
fn rank_key(signal: Signal, c: &Candidate) -> (bool, bool, i32, std::cmp::Reverse<i128>) {
    let Some((used, requested)) = used_and_requested(signal, c) else {
        // The pod that could not be measured first; such pods keep their order.
        return (false, false, 0, std::cmp::Reverse(0));
    };
    if signal == Signal::PidAvailable {
        return (true, false, priority(&c.pod), std::cmp::Reverse(0));
    }
    let beyond = i128::from(used) - i128::from(requested);
    (true, used <= requested, priority(&c.pod), std::cmp::Reverse(beyond))
}

/// Orders `candidates` for eviction under `signal`, first to go first (kubelet
/// `rankMemoryPressure` / `rankDiskPressureFunc` / `rankPIDPressure`): a pod that could not
/// be measured, then one using more than it requested, then lower priority, then the larger
/// use beyond its request. Stable: pods that compare equal keep their order. Each pod's
/// key is computed once.
pub(crate) fn rank(signal: Signal, candidates: &mut [Candidate]) {
    candidates.sort_by_cached_key(|c| rank_key(signal, c));
}

/// How the kubelet prints an amount of a signal's resource (bytes BinarySI, counts
/// DecimalSI).
fn printed(signal: Signal, amount: u64) -> String {
    match signal.resource() {
        "memory" | "ephemeral-storage" => binary_si(amount),
        _ => decimal_si(amount),
    }
}

/// The eviction's message (kubelet `evictionMessage`): the starved resource, the threshold
/// and what was available, then each regular or init container using more than it
/// requests of memory or ephemeral storage (`per_container`: name → use).
pub(crate) fn message(
    threshold: &Threshold,
    observed: Option<Observation>,
    pod: &Pod,
    per_container: &HashMap<String, u64>,
) -> String {
    let resource = threshold.signal.resource();
    let mut out = format!("The node was low on resource: {resource}. ");
    if let Some(o) = observed {
        out.push_str(&format!(
            "Threshold quantity: {}, available: {}. ",
            threshold.printed(o.capacity),
            printed(threshold.signal, o.available)
        ));
    }
    if !matches!(resource, "memory" | "ephemeral-storage") {
        return out;
    }
    let spec = pod.spec.clone().unwrap_or_default();
    let containers = spec.containers.iter().chain(spec.init_containers.iter().flatten());
    for c in containers {
        let Some(used) = per_container.get(&c.name) else { continue };
        let request = c.resources.as_ref().and_then(|r| r.requests.as_ref()).and_then(|r| r.get(resource));
        let requested = request
            .and_then(|q| podpass_api::quantity::parse_milli(&q.0).ok())
            .map_or(0, |m| u64::try_from(m.div_euclid(1000)).unwrap_or(0));
        if *used > requested {
            let request_text = request.map_or_else(|| "0".to_owned(), |q| q.0.clone());
            out.push_str(&format!(
                "Container {} was using {}, request is {request_text}, has larger consumption of {resource}. ",
                c.name,
                binary_si(*used)
            ));
        }
    }
    out
}

/// The pods the manager may evict: known, not finished, not being deleted, not already
/// chosen.
fn active_pods(shared: &Shared) -> Vec<Arc<Pod>> {
    let mut pods: Vec<Arc<Pod>> = shared
        .pods
        .all()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && !super::admission::is_terminal(p))
        .filter(|p| p.metadata.uid.as_deref().is_some_and(|u| shared.evictions.pending(u).is_none()))
        .collect();
    // A stable order for equal ranks: the oldest first.
    pods.sort_by(|a, b| a.metadata.creation_timestamp.cmp(&b.metadata.creation_timestamp));
    pods
}

/// What each pod uses now, and per container the use an eviction message names (memory:
/// none per container here; disk: writable layer and logs).
async fn measure(shared: &Shared, pods: Vec<Arc<Pod>>, signal: Signal) -> Vec<(Candidate, HashMap<String, u64>)> {
    let Some(rt) = &shared.runtime else { return Vec::new() };
    let mut out = Vec::with_capacity(pods.len());
    for pod in pods {
        let (usage, containers) = if signal == Signal::MemoryAvailable {
            let cgroups = rt.cgroups.clone();
            let (spec, uid) = (pod.spec.clone().unwrap_or_default(), pod.metadata.uid.clone().unwrap_or_default());
            let memory = tokio::task::spawn_blocking(move || {
                cgroups.and_then(|c| c.cgroups.pod_working_set(super::cgroups::qos_class(&spec), &uid))
            })
            .await
            .ok()
            .flatten();
            (memory.map(|memory| Usage { memory, ..Usage::default() }), HashMap::new())
        } else {
            match super::eviction::measure(rt, &pod).await {
                Ok(s) => (Some(Usage { memory: 0, disk: s.disk_bytes(), inodes: s.inodes }), s.containers.clone()),
                Err(e) => {
                    tracing::warn!(pod = %crate::PodRef::of(&pod), error = %e, "measuring a pod for eviction failed");
                    (None, HashMap::new())
                }
            }
        };
        out.push((Candidate { pod, usage }, containers));
    }
    out
}

/// kubelet `byEvictionPriority`: memory first, then the others in their order.
fn to_reclaim(met: &[Threshold]) -> Option<Threshold> {
    met.iter().find(|t| t.signal == Signal::MemoryAvailable).or_else(|| met.first()).copied()
}

/// The node-level reclaim for disk signals (kubelet `DeleteUnusedImages` on a node whose
/// images and pods share a filesystem): every image no container of any pod uses, first
/// seen at least `min_age` ago, that is not the runtime's sandbox image. Answers how many
/// went.
async fn delete_unused_images(shared: &Shared, first_seen: &mut HashMap<String, Instant>, min_age: Duration) -> usize {
    let Some(rt) = &shared.runtime else { return 0 };
    let images = match shared.images.service().list_images().await {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(error = %e, "listing images to reclaim disk failed");
            return 0;
        }
    };
    // In use: by any container the runtime holds, running or exited (their image IDs and
    // the names they were created with).
    let containers = match rt.cri.list_containers(HashMap::new()).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "listing containers to reclaim disk failed");
            return 0;
        }
    };
    let mut in_use: std::collections::HashSet<String> = containers.iter().map(|c| c.image_ref.clone()).collect();
    in_use.extend(containers.iter().filter_map(|c| c.image.as_ref().map(|i| i.image.clone())));
    let now = Instant::now();
    first_seen.retain(|id, _| images.iter().any(|i| &i.id == id));
    let mut removed = 0;
    for image in images {
        let seen = *first_seen.entry(image.id.clone()).or_insert(now);
        let used = in_use.contains(&image.id)
            || image.repo_tags.iter().chain(&image.repo_digests).any(|n| in_use.contains(n))
            || image.repo_tags.iter().any(|t| t == crate::runtime::containerd::SANDBOX_IMAGE);
        if used || now.saturating_duration_since(seen) < min_age {
            continue;
        }
        match shared.images.service().remove_image(&image.id).await {
            Ok(()) => {
                tracing::info!(image = %image.id, tags = ?image.repo_tags, "unused image removed to reclaim disk");
                first_seen.remove(&image.id);
                removed += 1;
            }
            Err(e) => tracing::warn!(image = %image.id, error = %e, "removing an unused image failed"),
        }
    }
    removed
}

/// Node events for each condition that changed (kubelet `recordNodeStatusEvent`:
/// `NodeHasDiskPressure`, `NodeHasNoDiskPressure`, …).
fn record_changes(shared: &Shared, before: Pressure, now: Pressure) {
    for (name, was, is) in [
        ("MemoryPressure", before.memory, now.memory),
        ("DiskPressure", before.disk, now.disk),
        ("PIDPressure", before.pid, now.pid),
    ] {
        if was == is {
            continue;
        }
        let reason = match (name, is) {
            ("MemoryPressure", true) => "NodeHasInsufficientMemory",
            ("MemoryPressure", false) => "NodeHasSufficientMemory",
            ("DiskPressure", true) => "NodeHasDiskPressure",
            ("DiskPressure", false) => "NodeHasNoDiskPressure",
            ("PIDPressure", true) => "NodeHasInsufficientPID",
            _ => "NodeHasSufficientPID",
        };
        let message = format!("Node {} status is now: {reason}", shared.node);
        shared.events.record_node(&shared.node, "Normal", reason, &message);
    }
}

/// Runs until `shutdown`: observes, reports conditions on `conditions`, reclaims and
/// evicts; `wake` names a pod whose worker must act now.
pub(crate) async fn run(
    shared: Arc<Shared>,
    settings: Settings,
    conditions: watch::Sender<Pressure>,
    wake: mpsc::UnboundedSender<String>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut clock = ConditionClock::default();
    let mut first_seen: HashMap<String, Instant> = HashMap::new();
    let mut tick = tokio::time::interval(MONITORING_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = tick.tick() => {}
        }
        let observations = super::pressure::observe(&settings.filesystems).await;
        let met = super::pressure::thresholds_met(&settings.thresholds, &observations);
        let pressure = clock.update(&met, Instant::now(), settings.transition_period);
        let before = *conditions.borrow();
        if pressure != before {
            tracing::info!(conditions = ?pressure.names(), "node pressure conditions changed");
            record_changes(&shared, before, pressure);
            conditions.send_replace(pressure);
        }
        let Some(threshold) = to_reclaim(&met) else { continue };
        let evicted = reclaim(&shared, &settings, threshold, &observations, &mut first_seen, &wake).await;
        if let Some(uid) = evicted {
            // The next pod goes only once this one's resources are back (or 30 s passed:
            // then the choice is dropped, and the next round chooses again).
            let deadline = Instant::now() + CLEANUP_TIMEOUT;
            while shared.evictions.pending(&uid).is_some() {
                if Instant::now() >= deadline {
                    tracing::warn!(pod_uid = %uid, "timed out waiting for an evicted pod to be cleaned up");
                    shared.evictions.done(&uid);
                    break;
                }
                tokio::select! {
                    () = &mut shutdown => return,
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
        }
    }
}

/// One round under a met `threshold`: the event, the node-level reclaim, then one pod
/// chosen. Answers the UID of the pod chosen.
async fn reclaim(
    shared: &Shared,
    settings: &Settings,
    threshold: Threshold,
    observations: &Observations,
    first_seen: &mut HashMap<String, Instant>,
    wake: &mpsc::UnboundedSender<String>,
) -> Option<String> {
    let resource = threshold.signal.resource();
    tracing::info!(resource, signal = threshold.signal.name(), "eviction threshold met; attempting to reclaim");
    shared.events.record_node(
        &shared.node,
        "Warning",
        "EvictionThresholdMet",
        &format!("Attempting to reclaim {resource}"),
    );
    let mut observations = observations.clone();
    if resource != "memory" && resource != "pids" {
        let removed = delete_unused_images(shared, first_seen, settings.image_minimum_gc_age).await;
        if removed > 0 {
            observations = super::pressure::observe(&settings.filesystems).await;
            if !threshold_met(&threshold, &observations) {
                tracing::info!(resource, images = removed, "pressure relieved without evicting pods");
                return None;
            }
        }
    }
    let pods = active_pods(shared);
    if pods.is_empty() {
        tracing::warn!(resource, "eviction thresholds met, but no pods are active to evict");
        return None;
    }
    let measured = measure(shared, pods, threshold.signal).await;
    let mut per_container: HashMap<String, HashMap<String, u64>> = HashMap::new();
    let mut candidates = Vec::with_capacity(measured.len());
    for (candidate, containers) in measured {
        per_container.insert(candidate.pod.metadata.uid.clone().unwrap_or_default(), containers);
        candidates.push(candidate);
    }
    // Nothing measured (a node without pod cgroups under memory pressure): no ranking
    // would mean anything, and evicting the oldest pod would punish it for nothing.
    if candidates.iter().all(|c| c.usage.is_none()) {
        tracing::warn!(resource, "eviction thresholds met, but no pod could be measured; evicting none");
        return None;
    }
    rank(threshold.signal, &mut candidates);
    for c in candidates {
        let pod = &c.pod;
        if is_critical(pod) {
            tracing::info!(pod = %crate::PodRef::of(pod), "cannot evict a critical pod");
            continue;
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let containers = per_container.remove(&uid).unwrap_or_default();
        let message = message(&threshold, observations.get(&threshold.signal).copied(), pod, &containers);
        tracing::warn!(pod = %crate::PodRef::of(pod), message = %message, "evicting pod under node pressure");
        shared.evictions.insert(&uid, message);
        let _ = wake.send(uid.clone());
        return Some(uid);
    }
    tracing::warn!(resource, "unable to evict any pods from the node");
    None
}

fn threshold_met(threshold: &Threshold, observations: &Observations) -> bool {
    observations.get(&threshold.signal).is_some_and(|o| threshold.met(o.available, o.capacity))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction_thresholds::ThresholdValue;

    fn pod(name: &str, priority: i32, resources: serde_json::Value) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "uid": name},
                "spec": {"priority": priority, "containers": [{"name": "app", "resources": resources}]}}))
            .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    fn candidate(pod: Arc<Pod>, disk: Option<u64>) -> Candidate {
        Candidate { pod, usage: disk.map(|d| Usage { memory: d, disk: d, inodes: d }) }
    }

    fn names(c: &[Candidate]) -> Vec<String> {
        c.iter().map(|c| c.pod.metadata.name.clone().unwrap_or_default()).collect()
    }

    #[test]
    fn pods_rank_as_upstreams_unmeasured_then_over_request_then_priority_then_use_beyond_request() {
        let gi = 1u64 << 30;
        let mut c = vec![
            candidate(
                pod("within-request", 0, serde_json::json!({"requests": {"ephemeral-storage": "10Gi"}})),
                Some(5 * gi),
            ),
            candidate(pod("small", 0, serde_json::json!({})), Some(gi)),
            candidate(pod("big", 0, serde_json::json!({})), Some(3 * gi)),
            candidate(pod("important", 1000, serde_json::json!({})), Some(9 * gi)),
            candidate(pod("unmeasured", 1000, serde_json::json!({})), None),
        ];
        rank(Signal::NodeFsAvailable, &mut c);
        assert_eq!(names(&c), ["unmeasured", "big", "small", "important", "within-request"]);
        // Inodes have no request: every measured pod exceeds it, so priority, then the most
        // inodes.
        rank(Signal::NodeFsInodesFree, &mut c);
        assert_eq!(names(&c), ["unmeasured", "within-request", "big", "small", "important"]);
        // Memory: requests from the memory resource.
        let mut m = vec![
            candidate(
                pod("guaranteed", 0, serde_json::json!({"requests": {"memory": "8Gi"}, "limits": {"memory": "8Gi"}})),
                Some(4 * gi),
            ),
            candidate(pod("besteffort", 0, serde_json::json!({})), Some(gi)),
        ];
        rank(Signal::MemoryAvailable, &mut m);
        assert_eq!(names(&m), ["besteffort", "guaranteed"]);
    }

    #[test]
    fn messages_are_upstreams() {
        let inodes = Threshold { signal: Signal::NodeFsInodesFree, value: ThresholdValue::Quantity(50_000, false) };
        let p = pod("p", 0, serde_json::json!({}));
        let o = Some(Observation { available: 49_500, capacity: 1_000_000 });
        assert_eq!(
            message(&inodes, o, &p, &HashMap::from([("app".to_owned(), 10)])),
            "The node was low on resource: inodes. Threshold quantity: 50k, available: 49500. "
        );
        let disk = Threshold { signal: Signal::NodeFsAvailable, value: ThresholdValue::Percentage(100_000) };
        let p = pod("p", 0, serde_json::json!({"requests": {"ephemeral-storage": "1Mi"}}));
        let o = Some(Observation { available: 1 << 30, capacity: 100 << 30 });
        assert_eq!(
            message(&disk, o, &p, &HashMap::from([("app".to_owned(), 4 << 20)])),
            "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 1Gi. Container app was using 4Mi, request is 1Mi, has larger consumption of ephemeral-storage. "
        );
        assert_eq!(
            message(&disk, None, &p, &HashMap::from([("app".to_owned(), 1 << 20)])),
            "The node was low on resource: ephemeral-storage. ",
            "within its request: not named"
        );
    }

    #[test]
    fn critical_pods_and_memory_first() {
        let mut p = (*pod("p", 0, serde_json::json!({}))).clone();
        assert!(!is_critical(&p));
        p.spec.as_mut().unwrap_or_else(|| panic!("spec")).priority = Some(SYSTEM_CRITICAL_PRIORITY);
        assert!(is_critical(&p));
        let mut m = (*pod("m", 0, serde_json::json!({}))).clone();
        m.metadata.annotations = Some([("kubernetes.io/config.mirror".to_owned(), "x".to_owned())].into());
        assert!(is_critical(&m));
        let disk = Threshold { signal: Signal::NodeFsAvailable, value: ThresholdValue::Percentage(100_000) };
        let memory = Threshold { signal: Signal::MemoryAvailable, value: ThresholdValue::Quantity(1, true) };
        assert_eq!(to_reclaim(&[disk, memory]), Some(memory));
        assert_eq!(to_reclaim(&[disk]), Some(disk));
        assert_eq!(to_reclaim(&[]), None);
    }
}
