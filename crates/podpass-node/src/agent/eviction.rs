//! Local ephemeral storage eviction (the kubelet's eviction manager, `localStorageEviction`):
//! a pod whose emptyDir outgrows its `sizeLimit`, whose containers together outgrow the
//! sum of their `ephemeral-storage` limits, or one of whose containers (its writable layer
//! and logs) outgrows its own limit, is evicted — its containers killed with a one-second
//! grace, phase `Failed`, reason `Evicted`, upstream's message, a `DisruptionTarget`
//! condition and an `Evicted` event. Checked in that order, as upstream.
//!
//! The decision is a pure function of the spec and the measured usage
//! ([`local_storage_violation`]); measuring walks the pod's emptyDirs and logs without
//! following links and asks the runtime for each writable layer.

use std::collections::HashMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{Pod, PodSpec};

/// How often a pod with storage limits is measured (kubelet: `evictionMonitoringPeriod`
/// in effect, its housekeeping every 10 s).
pub(crate) const CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(10);
/// Grace of an evicted pod's containers (kubelet `immediateEvictionGracePeriodSeconds`).
pub(crate) const GRACE_SECONDS: i64 = 1;
/// Entries one walk visits at most: past it the walk stops and counts what it saw (a pod
/// cannot make its measurement cost the node without bound).
const MAX_WALK_ENTRIES: usize = 1_000_000;

/// What a pod uses of the node's disk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StorageUsage {
    /// emptyDir volume name → bytes.
    pub volumes: HashMap<String, u64>,
    /// Container name → bytes of its writable layer and logs.
    pub containers: HashMap<String, u64>,
    /// emptyDir volumes on the node's disk (not `medium: Memory`) → bytes: what the pod
    /// takes of the node's filesystem through its volumes.
    pub disk_volumes: u64,
    /// Inodes of its writable layers, logs and disk emptyDirs.
    pub inodes: u64,
}

impl StorageUsage {
    /// Bytes the pod takes of the node's filesystem: its containers' writable layers and
    /// logs, and its emptyDirs on disk (kubelet `podDiskUsage` on a node whose images and
    /// pods share a filesystem).
    pub(crate) fn disk_bytes(&self) -> u64 {
        self.containers.values().sum::<u64>().saturating_add(self.disk_volumes)
    }
}

/// Bytes of `name` (`ephemeral-storage`) in a quantity, whole.
fn bytes(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> Option<u64> {
    let milli = podpass_api::quantity::parse_milli(&q.0).ok()?;
    u64::try_from(milli.div_euclid(1000)).ok()
}

/// A container's `limits.ephemeral-storage` (zero: none, as upstream).
fn container_limit(c: &k8s_openapi::api::core::v1::Container) -> Option<(u64, String)> {
    let q = c.resources.as_ref()?.limits.as_ref()?.get("ephemeral-storage")?;
    bytes(q).filter(|b| *b > 0).map(|b| (b, q.0.clone()))
}

/// Whether the pod has anything [`local_storage_violation`] checks.
pub(crate) fn has_storage_limits(spec: &PodSpec) -> bool {
    spec.volumes.iter().flatten().any(|v| v.empty_dir.as_ref().is_some_and(|e| e.size_limit.is_some()))
        || spec.containers.iter().any(|c| container_limit(c).is_some())
}

use podpass_api::quantity::format_binary_si as binary_si;

/// Why the pod must be evicted, in upstream's words (`None`: it keeps within its limits).
pub(crate) fn local_storage_violation(spec: &PodSpec, usage: &StorageUsage) -> Option<String> {
    // emptyDirLimitEviction.
    for v in spec.volumes.iter().flatten() {
        let Some(limit) = v.empty_dir.as_ref().and_then(|e| e.size_limit.as_ref()) else { continue };
        let (Some(max), Some(used)) = (bytes(limit).filter(|b| *b > 0), usage.volumes.get(&v.name)) else { continue };
        if *used > max {
            return Some(format!("Usage of EmptyDir volume {:?} exceeds the limit {:?}. ", v.name, limit.0));
        }
    }
    // podEphemeralStorageLimitEviction: the sum of the limits the containers declare
    // (PodLimits), against everything the pod uses, as upstream.
    let limits: Vec<u64> = spec.containers.iter().filter_map(|c| container_limit(c).map(|(b, _)| b)).collect();
    if !limits.is_empty() {
        let total: u64 = limits.iter().sum();
        let used: u64 = usage.containers.values().sum::<u64>() + usage.volumes.values().sum::<u64>();
        if used > total {
            return Some(format!(
                "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
                binary_si(total)
            ));
        }
    }
    // containerEphemeralStorageLimitEviction.
    for c in &spec.containers {
        let (Some((max, text)), Some(used)) = (container_limit(c), usage.containers.get(&c.name)) else { continue };
        if *used > max {
            return Some(format!("Container {} exceeded its local ephemeral storage limit {text:?}. ", c.name));
        }
    }
    None
}

/// Bytes and entries (inodes) under `dir`, links not followed, other file systems' mounts
/// not entered; a missing dir is empty. Blocking.
pub(crate) fn dir_use(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(top) = std::fs::symlink_metadata(dir) else { return (0, 0) };
    let device = top.dev();
    let mut total = 0u64;
    let mut seen = 0usize;
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_WALK_ENTRIES {
                return (total, seen as u64);
            }
            let Ok(meta) = entry.metadata() else { continue };
            // Blocks in use, as du: a sparse file costs what it holds.
            total = total.saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() && meta.dev() == device {
                stack.push(entry.path());
            }
        }
    }
    (total, seen as u64)
}

/// The pod's emptyDir volumes (disk ones and memory ones alike, as upstream) measured:
/// name → (bytes, inodes). Blocking.
pub(crate) fn empty_dir_usage(root: &Path, pod: &Pod) -> HashMap<String, (u64, u64)> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    // Only directories of this pod's own: a UID or volume name that is not one directory
    // name is measured as nothing (the node never made such a volume).
    if !crate::volumes::safe_segment(uid, true) {
        return HashMap::new();
    }
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter(|v| v.empty_dir.is_some() && crate::volumes::safe_segment(&v.name, false))
        .map(|v| {
            let dir = crate::volumes::pod_dir(root, uid).join("volumes/kubernetes.io~empty-dir").join(&v.name);
            (v.name.clone(), dir_use(&dir))
        })
        .collect()
}

/// The status of an evicted pod (kubelet: `TerminatePodAbnormally` with `Evict`): phase
/// `Failed`, reason `Evicted`, the message; not ready; a `DisruptionTarget` condition
/// (`TerminationByKubelet`); each container killed now reported terminated as the runtime
/// saw it end (`ended`: container ID → its end).
pub(crate) fn evicted_status(
    base: &k8s_openapi::api::core::v1::PodStatus,
    message: &str,
    ended: &HashMap<String, k8s_openapi::api::core::v1::ContainerStateTerminated>,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> k8s_openapi::api::core::v1::PodStatus {
    use k8s_openapi::api::core::v1::{ContainerState, PodCondition};
    let mut status = base.clone();
    status.phase = Some("Failed".into());
    status.reason = Some("Evicted".into());
    status.message = Some(message.to_owned());
    let mut conditions = status.conditions.take().unwrap_or_default();
    conditions.retain(|c| c.type_ != "DisruptionTarget");
    for c in conditions.iter_mut().filter(|c| c.type_ == "Ready" || c.type_ == "ContainersReady") {
        if c.status != "False" {
            c.last_transition_time = Some(now.clone());
        }
        c.status = "False".into();
        c.reason = Some("PodFailed".into());
        c.message = None;
    }
    conditions.push(PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        reason: Some("TerminationByKubelet".into()),
        message: Some(message.to_owned()),
        last_transition_time: Some(now.clone()),
        ..Default::default()
    });
    status.conditions = Some(conditions);
    for list in
        [&mut status.container_statuses, &mut status.init_container_statuses, &mut status.ephemeral_container_statuses]
    {
        for c in list.iter_mut().flatten() {
            c.ready = false;
            c.started = Some(false);
            let id = c.container_id.clone().unwrap_or_default();
            if let Some(end) = ended.get(&id) {
                c.state = Some(ContainerState { terminated: Some(end.clone()), ..Default::default() });
            }
        }
    }
    status
}

/// What the pod uses now: its emptyDirs, and each container's writable layer (the runtime's
/// `ContainerStats`) with its logs.
pub(crate) async fn measure(
    rt: &super::containers::PodRuntime,
    pod: &Pod,
) -> Result<StorageUsage, crate::runtime::RuntimeError> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let listed = rt.cri.list_containers(HashMap::from([(super::containers::POD_UID_LABEL.to_owned(), uid)])).await?;
    let mut layers: HashMap<String, u64> = HashMap::new();
    let mut layer_inodes = 0u64;
    for c in listed {
        let name = c.labels.get(super::containers::CONTAINER_NAME_LABEL).cloned().unwrap_or_default();
        // A runtime that cannot say counts nothing: the logs and emptyDirs still count.
        let (used, inodes) = rt.cri.writable_layer(&c.id).await.ok().flatten().unwrap_or((0, 0));
        *layers.entry(name).or_default() += used;
        layer_inodes = layer_inodes.saturating_add(inodes);
    }
    let (root, logs, owned) = (rt.root.clone(), super::containers::log_dir(&rt.logs, pod), pod.clone());
    let memory_volumes: std::collections::HashSet<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter(|v| v.empty_dir.as_ref().is_some_and(|e| e.medium.as_deref() == Some("Memory")))
        .map(|v| v.name.clone())
        .collect();
    let measured = tokio::task::spawn_blocking(move || {
        let measured = empty_dir_usage(&root, &owned);
        let mut inodes = layer_inodes;
        let mut disk_volumes = 0u64;
        for (name, (bytes, entries)) in &measured {
            if !memory_volumes.contains(name) {
                disk_volumes = disk_volumes.saturating_add(*bytes);
                inodes = inodes.saturating_add(*entries);
            }
        }
        let volumes: HashMap<String, u64> = measured.into_iter().map(|(n, (bytes, _))| (n, bytes)).collect();
        let containers: HashMap<String, u64> = owned
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .map(|c| {
                let (log_bytes, log_inodes) = dir_use(&logs.join(&c.name));
                inodes = inodes.saturating_add(log_inodes);
                (c.name.clone(), layers.get(&c.name).copied().unwrap_or(0).saturating_add(log_bytes))
            })
            .collect();
        StorageUsage { volumes, containers, disk_volumes, inodes }
    })
    .await
    .unwrap_or_default();
    Ok(measured)
}

/// Kills the pod's containers (one second's grace) and stops its sandboxes, keeping them
/// (their logs stay readable); answers how each container ended, by container ID
/// (`containerd://…`).
pub(crate) async fn kill(
    rt: &super::containers::PodRuntime,
    pod: &Pod,
) -> HashMap<String, k8s_openapi::api::core::v1::ContainerStateTerminated> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let by_uid = HashMap::from([(super::containers::POD_UID_LABEL.to_owned(), uid)]);
    let mut ended = HashMap::new();
    let listed = rt.cri.list_containers(by_uid.clone()).await.unwrap_or_default();
    for c in &listed {
        if let Err(e) = rt.cri.stop_container(&c.id, GRACE_SECONDS).await {
            tracing::warn!(container = %c.id, error = %e, "stopping an evicted pod's container");
        }
    }
    for s in rt.cri.list_pod_sandboxes(by_uid).await.unwrap_or_default() {
        if let Err(e) = rt.cri.stop_pod_sandbox(&s.id).await {
            tracing::warn!(sandbox = %s.id, error = %e, "stopping an evicted pod's sandbox");
        }
    }
    for c in listed {
        if let Ok(Some(status)) = rt.cri.container_status(&c.id).await {
            let id = format!("containerd://{}", c.id);
            let end = super::containers::terminated(&status, &id);
            ended.insert(id, end.to_api());
        }
    }
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(value: serde_json::Value) -> PodSpec {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn messages_and_order_are_upstreams() {
        let s = spec(serde_json::json!({
            "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "10Mi"}}, {"name": "free", "emptyDir": {}}],
            "containers": [
                {"name": "app", "resources": {"limits": {"ephemeral-storage": "20Mi"}}},
                {"name": "side", "resources": {"limits": {"ephemeral-storage": "10Mi"}}}]}));
        assert!(has_storage_limits(&s));
        let usage = |scratch: u64, app: u64, side: u64| StorageUsage {
            volumes: [("scratch".to_owned(), scratch), ("free".to_owned(), 0)].into(),
            containers: [("app".to_owned(), app), ("side".to_owned(), side)].into(),
            ..Default::default()
        };
        let mi = 1 << 20;
        assert_eq!(local_storage_violation(&s, &usage(10 * mi, 20 * mi, 0)), None, "at the limits is within");
        assert_eq!(
            local_storage_violation(&s, &usage(10 * mi + 1, 25 * mi, 0)).as_deref(),
            Some("Usage of EmptyDir volume \"scratch\" exceeds the limit \"10Mi\". "),
            "the emptyDir first"
        );
        assert_eq!(
            local_storage_violation(&s, &usage(10 * mi, 21 * mi, 0)).as_deref(),
            Some("Pod ephemeral local storage usage exceeds the total limit of containers 30Mi. "),
            "then the pod's total"
        );
        assert_eq!(
            local_storage_violation(&s, &usage(0, 21 * mi, 0)).as_deref(),
            Some("Container app exceeded its local ephemeral storage limit \"20Mi\". "),
            "then each container"
        );
        // The pod's total is what its containers declare, against all it uses (upstream's
        // PodLimits): a container without a limit counts against its neighbour's.
        let partial = spec(serde_json::json!({"containers": [
            {"name": "app", "resources": {"limits": {"ephemeral-storage": "20Mi"}}}, {"name": "free"}]}));
        let heavy = StorageUsage { containers: [("free".to_owned(), 100 * mi)].into(), ..Default::default() };
        assert_eq!(
            local_storage_violation(&partial, &heavy).as_deref(),
            Some("Pod ephemeral local storage usage exceeds the total limit of containers 20Mi. ")
        );
        assert!(!has_storage_limits(&spec(serde_json::json!({"containers": [{"name": "a"}]}))));
    }

    #[test]
    fn an_evicted_pods_status_is_failed_not_ready_and_names_the_disruption() {
        use k8s_openapi::api::core::v1::{ContainerStateTerminated, PodStatus};
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let base: PodStatus = serde_json::from_value(serde_json::json!({"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "app", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                "containerID": "containerd://c1", "state": {"running": {}}}]}))
        .unwrap_or_else(|e| panic!("{e}"));
        let ended = HashMap::from([(
            "containerd://c1".to_owned(),
            ContainerStateTerminated { exit_code: 137, reason: Some("Error".into()), ..Default::default() },
        )]);
        let s = evicted_status(&base, "Usage of EmptyDir volume \"x\" exceeds the limit \"1Mi\". ", &ended, &now);
        assert_eq!((s.phase.as_deref(), s.reason.as_deref()), (Some("Failed"), Some("Evicted")));
        let conditions = s.conditions.unwrap_or_default();
        let of = |t: &str| conditions.iter().find(|c| c.type_ == t).map(|c| (c.status.clone(), c.reason.clone()));
        assert_eq!(of("Ready"), Some(("False".into(), Some("PodFailed".into()))));
        assert_eq!(of("DisruptionTarget"), Some(("True".into(), Some("TerminationByKubelet".into()))));
        assert_eq!(of("PodScheduled"), Some(("True".into(), None)), "others kept");
        let c = &s.container_statuses.unwrap_or_default()[0];
        assert!(!c.ready);
        assert_eq!(c.state.as_ref().and_then(|s| s.terminated.as_ref()).map(|t| t.exit_code), Some(137));
    }

    #[test]
    fn usage_counts_blocks_and_follows_no_link() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let d = dir.path().join("vol");
        std::fs::create_dir_all(d.join("sub")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(d.join("sub/a"), vec![1u8; 1 << 20]).unwrap_or_else(|e| panic!("{e}"));
        let outside = dir.path().join("outside");
        std::fs::write(&outside, vec![1u8; 4 << 20]).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(&outside, d.join("link")).unwrap_or_else(|e| panic!("{e}"));
        let (used, _) = dir_use(&d);
        assert!((1 << 20..2 << 20).contains(&used), "{used}");
        assert_eq!(dir_use(&dir.path().join("missing")), (0, 0));
        assert_eq!(binary_si(30 << 20), "30Mi");
        // Only the pod's own volume directories are measured.
        let pod = |uid: &str, volume: &str| -> Pod {
            serde_json::from_value(serde_json::json!({"metadata": {"uid": uid},
                "spec": {"containers": [], "volumes": [{"name": volume, "emptyDir": {}}]}}))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let vol = crate::volumes::pod_dir(dir.path(), "u1").join("volumes/kubernetes.io~empty-dir/scratch");
        std::fs::create_dir_all(&vol).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(vol.join("f"), vec![1u8; 1 << 20]).unwrap_or_else(|e| panic!("{e}"));
        let (bytes, inodes) = empty_dir_usage(dir.path(), &pod("u1", "scratch"))["scratch"];
        assert!(bytes >= 1 << 20 && inodes == 1, "{bytes} {inodes}");
        assert!(empty_dir_usage(dir.path(), &pod("u1", "../../../vol")).is_empty());
        assert!(empty_dir_usage(dir.path(), &pod("../u1", "scratch")).is_empty());
        assert_eq!(binary_si(1000), "1000");
    }
}
