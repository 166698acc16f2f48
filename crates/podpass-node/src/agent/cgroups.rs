//! The kubelet's cgroup manager (pkg/kubelet/cm, `cgroupDriver: cgroupfs`): the `kubepods`
//! cgroup sized to node allocatable (capacity less `kubeReserved` and `systemReserved`; the
//! eviction thresholds are left out of the cgroup, as upstream, so eviction acts before the
//! kernel's OOM killer), a cgroup per QoS class below it, and one per pod whose limits are
//! its containers' sums (`ResourceConfigForPod`). Every container of the pod, ephemeral ones
//! included, is created under its pod's cgroup (CRI `cgroup_parent`), so what a container
//! has no limit of its own for is still bounded by its pod's.
//!
//! The decisions are pure functions of the pod spec ([`qos_class`], [`pod_limits`],
//! [`pod_cgroup`]); [`Cgroups`] writes them, to cgroup v1 controllers or the v2 hierarchy,
//! whichever the machine mounts.

use std::io;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The node's cgroup for pods below its cgroup root (kubelet:
/// `defaultNodeAllocatableCgroupName`).
pub(crate) const KUBEPODS: &str = "/kubepods";
/// CFS period of every quota the kubelet sets (100 ms).
const CPU_PERIOD_US: u64 = 100_000;
/// The smallest CPU shares (kubelet `MinShares`).
const MIN_SHARES: u64 = 2;
/// The largest CPU shares (kubelet `MaxShares`).
const MAX_SHARES: u64 = 262_144;
/// The smallest CFS quota (kubelet `MinQuotaPeriod`, 1 ms).
const MIN_QUOTA_US: i64 = 1000;

/// A pod's QoS class (kubelet `GetPodQOS`), as `status.qosClass` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QosClass {
    /// Every container has cpu and memory limits equal to its requests.
    Guaranteed,
    /// Some request or limit, not Guaranteed.
    Burstable,
    /// No cpu or memory request or limit at all.
    BestEffort,
}

impl QosClass {
    /// `status.qosClass`.
    pub(crate) fn api_name(self) -> &'static str {
        match self {
            Self::Guaranteed => "Guaranteed",
            Self::Burstable => "Burstable",
            Self::BestEffort => "BestEffort",
        }
    }

    /// The class's cgroup below `kubepods` (Guaranteed pods sit in `kubepods` itself).
    fn dir(self) -> &'static str {
        match self {
            Self::Guaranteed => "",
            Self::Burstable => "/burstable",
            Self::BestEffort => "/besteffort",
        }
    }
}

/// Millicores or bytes of `name` in a resource list; a quantity that does not parse
/// counts as absent (the API server has validated it).
fn amount(list: Option<&std::collections::BTreeMap<String, Quantity>>, name: &str) -> Option<i128> {
    let q = list?.get(name)?;
    podpass_api::quantity::parse_milli(&q.0).ok()
}

/// kubelet `GetPodQOS`: only cpu and memory count; zero quantities are ignored; requests
/// default to limits (API defaulting).
pub(crate) fn qos_class(spec: &PodSpec) -> QosClass {
    let mut any = false;
    let mut guaranteed = true;
    for c in spec.init_containers.iter().flatten().chain(&spec.containers) {
        let r = c.resources.clone().unwrap_or_default();
        let mut limits_both = true;
        for name in ["cpu", "memory"] {
            let limit = amount(r.limits.as_ref(), name).filter(|v| *v != 0);
            let request = amount(r.requests.as_ref(), name).filter(|v| *v != 0).or(limit);
            any |= limit.is_some() || request.is_some();
            match limit {
                Some(l) if request == Some(l) => {}
                Some(_) => guaranteed = false,
                None => limits_both = false,
            }
        }
        guaranteed &= limits_both;
    }
    match (any, guaranteed) {
        (false, _) => QosClass::BestEffort,
        (true, true) => QosClass::Guaranteed,
        (true, false) => QosClass::Burstable,
    }
}

/// The limits of a cgroup (absent: not set, the kernel's default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CgroupLimits {
    /// cgroup v1 `cpu.shares` (v2 `cpu.weight` is derived).
    pub cpu_shares: Option<u64>,
    /// CFS quota per [`CPU_PERIOD_US`], in µs.
    pub cpu_quota_us: Option<i64>,
    /// Bytes.
    pub memory_bytes: Option<i64>,
    /// Processes.
    pub pids: Option<i64>,
}

/// kubelet `MilliCPUToShares`.
fn shares(milli: i128) -> u64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    u64::try_from(milli * 1024 / 1000).unwrap_or(MAX_SHARES).clamp(MIN_SHARES, MAX_SHARES)
}

/// kubelet `MilliCPUToQuota` for a 100 ms period.
fn quota(milli: i128) -> i64 {
    i64::try_from(milli * i128::from(CPU_PERIOD_US) / 1000).unwrap_or(i64::MAX).max(MIN_QUOTA_US)
}

/// The pod's effective request or limit of `name` (`resource.PodRequests`/`PodLimits`):
/// the app containers' and sidecars' sum, or, when larger, what an init container needs
/// beside the sidecars started before it; plus the pod's overhead. `None` when some
/// container declares none (for limits: the pod has no limit of that resource).
fn effective(spec: &PodSpec, name: &str, limits: bool) -> Option<i128> {
    let of = |c: &Container| {
        let r = c.resources.clone().unwrap_or_default();
        let limit = amount(r.limits.as_ref(), name);
        if limits { limit } else { amount(r.requests.as_ref(), name).or(limit).or(Some(0)) }
    };
    let mut sidecars: i128 = 0;
    let mut init_peak: i128 = 0;
    for c in spec.init_containers.iter().flatten() {
        let value = of(c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars = sidecars.saturating_add(value);
        } else {
            init_peak = init_peak.max(sidecars.saturating_add(value));
        }
    }
    let mut apps: i128 = 0;
    for c in &spec.containers {
        apps = apps.saturating_add(of(c)?);
    }
    let overhead = amount(spec.overhead.as_ref(), name).unwrap_or(0);
    Some(apps.saturating_add(sidecars).max(init_peak).saturating_add(overhead))
}

/// The pod's effective request of `name` in whole units (bytes for memory and
/// `ephemeral-storage`), as the eviction manager's `GetResourceRequestQuantity`: 0 when none.
pub(crate) fn pod_request(spec: &PodSpec, name: &str) -> u64 {
    effective(spec, name, false).map_or(0, |milli| u64::try_from(milli.div_euclid(1000)).unwrap_or(0))
}

/// kubelet `ResourceConfigForPod`: shares from the pod's cpu requests; a CFS quota and a
/// memory limit only where every container declares one (a Guaranteed pod always does);
/// BestEffort pods get the smallest shares and nothing else; `pids` when positive.
pub(crate) fn pod_limits(spec: &PodSpec, pod_pids_limit: i64) -> CgroupLimits {
    let pids = (pod_pids_limit > 0).then_some(pod_pids_limit);
    if qos_class(spec) == QosClass::BestEffort {
        return CgroupLimits { cpu_shares: Some(MIN_SHARES), pids, ..Default::default() };
    }
    CgroupLimits {
        cpu_shares: Some(shares(effective(spec, "cpu", false).unwrap_or(0))),
        cpu_quota_us: effective(spec, "cpu", true).map(quota),
        memory_bytes: effective(spec, "memory", true).map(|m| i64::try_from((m + 999) / 1000).unwrap_or(i64::MAX)),
        pids,
    }
}

/// The limits of `kubepods`: allocatable cpu and memory (capacity less what is reserved).
pub(crate) fn node_limits(cpus: u64, memory_bytes: u64, reserved: crate::kubelet_config::Reserved) -> CgroupLimits {
    let milli = i128::from(cpus.saturating_mul(1000).saturating_sub(reserved.cpu_milli));
    let memory = memory_bytes.saturating_sub(reserved.memory_bytes);
    CgroupLimits {
        cpu_shares: Some(shares(milli)),
        cpu_quota_us: None,
        memory_bytes: (memory > 0).then(|| i64::try_from(memory).unwrap_or(i64::MAX)),
        pids: None,
    }
}

/// The pod's cgroup below `kubepods` (`/kubepods/burstable/pod<uid>`), the CRI
/// `cgroup_parent` of its sandbox and containers.
pub(crate) fn pod_cgroup(kubepods: &str, qos: QosClass, uid: &str) -> String {
    format!("{kubepods}{}/pod{uid}", qos.dir())
}

/// The `kubepods` cgroup below `cgroupRoot` (kubelet `--cgroup-root`, `/` by default): `/kubepods`,
/// or `/<root>/kubepods`. `None` when the root is not an absolute path of plain segments (no
/// `.`, `..` or empty ones), so no root names a cgroup outside the hierarchy.
pub(crate) fn kubepods_under(cgroup_root: &str) -> Option<String> {
    let relative = cgroup_root.strip_prefix('/')?.trim_end_matches('/');
    if relative.is_empty() {
        return Some(KUBEPODS.to_owned());
    }
    let plain = |seg: &str| {
        !seg.is_empty()
            && seg != "."
            && seg != ".."
            && seg.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    if relative.len() > 512 || !relative.split('/').all(plain) {
        return None;
    }
    Some(format!("/{relative}{KUBEPODS}"))
}

/// How the machine mounts cgroups.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Layout {
    /// One hierarchy per controller under the mount (`memory/`, `cpu/`, `pids/`).
    V1,
    /// The unified hierarchy.
    V2,
}

/// Writes cgroups under a mount point (`/sys/fs/cgroup`).
#[derive(Debug, Clone)]
pub(crate) struct Cgroups {
    mount: PathBuf,
    layout: Layout,
    /// The node's `kubepods` ([`kubepods_under`] its cgroup root).
    kubepods: String,
}

/// v1 controllers podpass sets limits in, and the files of each.
const V1_CONTROLLERS: [&str; 3] = ["memory", "cpu", "pids"];

impl Cgroups {
    /// The cgroups mounted at `mount`: v2 when it holds `cgroup.controllers`, v1 when it
    /// holds a `memory` controller; `None` otherwise.
    pub(crate) fn detect(mount: &Path) -> Option<Self> {
        let layout = if mount.join("cgroup.controllers").is_file() {
            Layout::V2
        } else if mount.join("memory").join("memory.limit_in_bytes").is_file() {
            Layout::V1
        } else {
            return None;
        };
        Some(Self { mount: mount.to_owned(), layout, kubepods: KUBEPODS.to_owned() })
    }

    /// The same, with pods under `kubepods` (from [`kubepods_under`]).
    pub(crate) fn with_kubepods(mut self, kubepods: String) -> Self {
        self.kubepods = kubepods;
        self
    }

    /// The node's `kubepods` cgroup.
    pub(crate) fn kubepods(&self) -> &str {
        &self.kubepods
    }

    /// `v1` or `v2` (logs).
    pub(crate) fn version(&self) -> &'static str {
        match self.layout {
            Layout::V1 => "v1",
            Layout::V2 => "v2",
        }
    }

    /// Makes `kubepods` with `limits` and its QoS classes' cgroups (BestEffort with the
    /// smallest shares, as upstream's QoS container manager). Blocking.
    pub(crate) fn ensure_node(&self, limits: &CgroupLimits) -> io::Result<()> {
        let kubepods = &self.kubepods;
        self.ensure(kubepods, limits)?;
        self.ensure(&format!("{kubepods}/burstable"), &CgroupLimits::default())?;
        self.ensure(
            &format!("{kubepods}/besteffort"),
            &CgroupLimits { cpu_shares: Some(MIN_SHARES), ..Default::default() },
        )
    }

    /// Makes the cgroup `name` (`/kubepods/…`) if missing and writes `limits`. Blocking.
    pub(crate) fn ensure(&self, name: &str, limits: &CgroupLimits) -> io::Result<()> {
        let relative = name.trim_start_matches('/');
        match self.layout {
            Layout::V1 => {
                for controller in V1_CONTROLLERS {
                    let root = self.mount.join(controller);
                    if !root.is_dir() {
                        continue;
                    }
                    let dir = root.join(relative);
                    std::fs::create_dir_all(&dir)?;
                    for (file, value) in v1_files(controller, limits) {
                        write(&dir.join(file), &value)?;
                    }
                }
            }
            Layout::V2 => {
                // Each level enables the controllers for the one below it.
                let mut dir = self.mount.clone();
                for part in relative.split('/') {
                    enable_controllers(&dir);
                    dir.push(part);
                    if !dir.is_dir() {
                        std::fs::create_dir(&dir)?;
                    }
                }
                for (file, value) in v2_files(limits) {
                    write(&dir.join(file), &value)?;
                }
            }
        }
        Ok(())
    }

    /// Removes the pod's cgroup, whichever QoS class it was made under (the runtime has
    /// removed its containers first). What is already gone is fine; one still busy is an
    /// error (housekeeping tries again). Blocking.
    pub(crate) fn remove_pod(&self, uid: &str) -> io::Result<()> {
        // Nothing outside /kubepods is ever removed.
        if !crate::volumes::safe_segment(uid, true) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("pod UID {uid:?} names no cgroup")));
        }
        let mut first = None;
        for qos in [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort] {
            let relative = pod_cgroup(&self.kubepods, qos, uid);
            let relative = relative.trim_start_matches('/');
            let dirs: Vec<PathBuf> = match self.layout {
                Layout::V1 => V1_CONTROLLERS.iter().map(|c| self.mount.join(c).join(relative)).collect(),
                Layout::V2 => vec![self.mount.join(relative)],
            };
            for dir in dirs {
                if let Err(e) = remove_tree(&dir)
                    && e.kind() != io::ErrorKind::NotFound
                {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Cgroups {
    /// The pod's memory working set (kubelet: cadvisor's `workingSet`, what memory-pressure
    /// eviction ranks by): usage less the inactive file cache, from the pod's cgroup under
    /// its QoS class. `None`: no such cgroup or it cannot be read. Blocking.
    pub(crate) fn pod_working_set(&self, qos: QosClass, uid: &str) -> Option<u64> {
        if !crate::volumes::safe_segment(uid, true) {
            return None;
        }
        let relative = pod_cgroup(&self.kubepods, qos, uid);
        let relative = relative.trim_start_matches('/');
        let read = |p: PathBuf| std::fs::read_to_string(p).ok();
        let (usage, stat, inactive) = match self.layout {
            Layout::V1 => {
                let dir = self.mount.join("memory").join(relative);
                (read(dir.join("memory.usage_in_bytes"))?, read(dir.join("memory.stat"))?, "total_inactive_file")
            }
            Layout::V2 => {
                let dir = self.mount.join(relative);
                (read(dir.join("memory.current"))?, read(dir.join("memory.stat"))?, "inactive_file")
            }
        };
        let usage: u64 = usage.trim().parse().ok()?;
        let inactive: u64 = stat
            .lines()
            .find_map(|l| l.strip_prefix(inactive).and_then(|r| r.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        Some(usage.saturating_sub(inactive))
    }
}

/// A pod's cgroup could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PodCgroupError {
    /// The pod's UID is not one directory name.
    #[error("the pod's UID {0:?} cannot name a cgroup")]
    UnsafeUid(String),
    /// Writing it failed.
    #[error("the pod's cgroup {name}: {source}")]
    Write {
        /// The cgroup (`/kubepods/…`).
        name: String,
        /// Why.
        source: io::Error,
    },
}

/// The node's pod cgroups and the limit every pod gets.
#[derive(Debug, Clone)]
pub(crate) struct PodCgroups {
    /// Where they are written.
    pub cgroups: Cgroups,
    /// `podPidsLimit`.
    pub pod_pids_limit: i64,
}

impl PodCgroups {
    /// The pod's cgroup, made (or its limits written again) before its sandbox runs: the
    /// CRI `cgroup_parent` of the sandbox and every container.
    pub(crate) async fn ensure_pod(&self, pod: &k8s_openapi::api::core::v1::Pod) -> Result<String, PodCgroupError> {
        let spec = pod.spec.clone().unwrap_or_default();
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        // One directory name, whatever the API server sent: nothing is made outside /kubepods.
        if !crate::volumes::safe_segment(uid, true) {
            return Err(PodCgroupError::UnsafeUid(uid.to_owned()));
        }
        let name = pod_cgroup(self.cgroups.kubepods(), qos_class(&spec), uid);
        let limits = pod_limits(&spec, self.pod_pids_limit);
        let (cgroups, owned) = (self.cgroups.clone(), name.clone());
        let written = tokio::task::spawn_blocking(move || cgroups.ensure(&owned, &limits))
            .await
            .unwrap_or_else(|e| Err(io::Error::other(e)));
        written.map_err(|source| PodCgroupError::Write { name: name.clone(), source })?;
        Ok(name)
    }
}

/// Removes a cgroup and the empty cgroups below it (a runtime may leave its container's
/// directory behind), deepest first; cgroup directories are removed with `rmdir`.
fn remove_tree(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_tree(&entry.path())?;
        }
    }
    std::fs::remove_dir(dir)
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    std::fs::write(path, value)
        .map_err(|e| io::Error::new(e.kind(), format!("writing {value:?} to {}: {e}", path.display())))
}

/// Enables memory, cpu and pids for the children of `dir` (v2), where available.
fn enable_controllers(dir: &Path) {
    let available = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    for controller in ["memory", "cpu", "pids"] {
        let has = |list: &str| list.split_whitespace().any(|c| c == controller);
        if has(&available) && !has(&enabled) {
            // A controller the kernel refuses here stays off: its limits fail to write
            // below, which is reported.
            let _ = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{controller}"));
        }
    }
}

/// The files of `limits` in v1 `controller`, unset limits written as "no limit" (a pod's
/// cgroup made again must not keep an old value).
fn v1_files(controller: &str, limits: &CgroupLimits) -> Vec<(&'static str, String)> {
    match controller {
        "memory" => vec![("memory.limit_in_bytes", limits.memory_bytes.unwrap_or(-1).to_string())],
        "cpu" => {
            let mut files = vec![("cpu.cfs_period_us", CPU_PERIOD_US.to_string())];
            files.push(("cpu.cfs_quota_us", limits.cpu_quota_us.unwrap_or(-1).to_string()));
            if let Some(s) = limits.cpu_shares {
                files.push(("cpu.shares", s.to_string()));
            }
            files
        }
        "pids" => vec![("pids.max", limits.pids.map_or_else(|| "max".to_owned(), |p| p.to_string()))],
        _ => Vec::new(),
    }
}

/// kubelet `CpuSharesToCpuWeight`.
fn weight(shares: u64) -> u64 {
    1 + (shares.saturating_sub(2) * 9999) / 262_142
}

/// The files of `limits` in v2.
fn v2_files(limits: &CgroupLimits) -> Vec<(&'static str, String)> {
    let mut files = vec![
        ("memory.max", limits.memory_bytes.map_or_else(|| "max".to_owned(), |m| m.to_string())),
        (
            "cpu.max",
            limits.cpu_quota_us.map_or_else(|| format!("max {CPU_PERIOD_US}"), |q| format!("{q} {CPU_PERIOD_US}")),
        ),
        ("pids.max", limits.pids.map_or_else(|| "max".to_owned(), |p| p.to_string())),
    ];
    if let Some(s) = limits.cpu_shares {
        files.push(("cpu.weight", weight(s).to_string()));
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec of `containers` and `inits` (`{}`: no init containers).
    fn pod(containers: serde_json::Value, inits: serde_json::Value) -> PodSpec {
        let inits = if inits.is_array() { inits } else { serde_json::json!([]) };
        serde_json::from_value(serde_json::json!({"containers": containers, "initContainers": inits}))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn c(name: &str, requests: serde_json::Value, limits: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"name": name, "resources": {"requests": requests, "limits": limits}})
    }

    #[test]
    fn qos_classes_are_upstreams() {
        let none = serde_json::json!({});
        let both = serde_json::json!({"cpu": "500m", "memory": "64Mi"});
        assert_eq!(qos_class(&pod(serde_json::json!([{"name": "a"}]), none.clone())), QosClass::BestEffort);
        // Limits alone: requests default to them.
        assert_eq!(
            qos_class(&pod(serde_json::json!([c("a", none.clone(), both.clone())]), none.clone())),
            QosClass::Guaranteed
        );
        assert_eq!(
            qos_class(&pod(
                serde_json::json!([c("a", serde_json::json!({"cpu": "100m"}), both.clone())]),
                none.clone()
            )),
            QosClass::Burstable,
            "a request below its limit"
        );
        assert_eq!(
            qos_class(&pod(serde_json::json!([c("a", none.clone(), both.clone()), {"name": "b"}]), none.clone())),
            QosClass::Burstable,
            "one container without limits"
        );
        assert_eq!(
            qos_class(&pod(
                serde_json::json!([c("a", none.clone(), serde_json::json!({"memory": "64Mi"}))]),
                none.clone()
            )),
            QosClass::Burstable,
            "memory alone"
        );
        // An init container counts too.
        assert_eq!(
            qos_class(&pod(
                serde_json::json!([c("a", none.clone(), both.clone())]),
                serde_json::json!([{"name": "i"}])
            )),
            QosClass::Burstable
        );
        assert_eq!(
            qos_class(&pod(serde_json::json!([c("a", serde_json::json!({"cpu": "0"}), serde_json::json!({}))]), none)),
            QosClass::BestEffort,
            "zero quantities are ignored"
        );
    }

    #[test]
    fn a_pods_limits_are_its_containers_sums_or_its_largest_init() {
        let none = serde_json::json!({});
        let limits = |cpu: &str, mem: &str| serde_json::json!({"cpu": cpu, "memory": mem});
        let spec = pod(
            serde_json::json!([
                c("a", none.clone(), limits("500m", "64Mi")),
                c("b", none.clone(), limits("250m", "32Mi"))
            ]),
            serde_json::json!([c("init", none.clone(), limits("2", "512Mi"))]),
        );
        let l = pod_limits(&spec, 1024);
        // The init container needs more than the app containers together.
        assert_eq!(l.memory_bytes, Some(512 << 20));
        assert_eq!(l.cpu_quota_us, Some(200_000));
        assert_eq!(l.cpu_shares, Some(2048));
        assert_eq!(l.pids, Some(1024));
        // A sidecar adds to the app containers and to what follows it.
        let sidecar = serde_json::json!({"name": "s", "restartPolicy": "Always",
            "resources": {"limits": {"cpu": "100m", "memory": "16Mi"}}});
        let spec = pod(serde_json::json!([c("a", none.clone(), limits("500m", "64Mi"))]), serde_json::json!([sidecar]));
        assert_eq!(pod_limits(&spec, -1).memory_bytes, Some(80 << 20));
        assert_eq!(pod_limits(&spec, -1).pids, None);
        // One container without a memory limit: the pod has none (Burstable).
        let spec = pod(
            serde_json::json!([
                c("a", none.clone(), limits("500m", "64Mi")),
                c("b", serde_json::json!({"cpu": "1"}), none.clone())
            ]),
            none.clone(),
        );
        let l = pod_limits(&spec, -1);
        assert_eq!((l.memory_bytes, l.cpu_quota_us, l.cpu_shares), (None, None, Some(1536)));
        // BestEffort: the smallest shares only.
        let l = pod_limits(&pod(serde_json::json!([{"name": "a"}]), none), 10);
        assert_eq!(l, CgroupLimits { cpu_shares: Some(2), pids: Some(10), ..Default::default() });
    }

    #[test]
    fn names_and_node_limits() {
        assert_eq!(pod_cgroup(KUBEPODS, QosClass::Guaranteed, "u1"), "/kubepods/podu1");
        assert_eq!(pod_cgroup(KUBEPODS, QosClass::Burstable, "u1"), "/kubepods/burstable/podu1");
        assert_eq!(pod_cgroup(KUBEPODS, QosClass::BestEffort, "u1"), "/kubepods/besteffort/podu1");
        // kubelet --cgroup-root: the node's pods below it, never outside the hierarchy.
        assert_eq!(kubepods_under("/").as_deref(), Some("/kubepods"));
        assert_eq!(kubepods_under("/podpass/node-2/").as_deref(), Some("/podpass/node-2/kubepods"));
        assert_eq!(kubepods_under("/podpass.slice").as_deref(), Some("/podpass.slice/kubepods"));
        for bad in ["", "podpass", "/a/../b", "/a//b", "/./a", "/a\u{0}b"] {
            assert_eq!(kubepods_under(bad), None, "{bad:?}");
        }
        let reserved = crate::kubelet_config::Reserved { cpu_milli: 500, memory_bytes: 1 << 30 };
        let l = node_limits(2, 4 << 30, reserved);
        assert_eq!((l.cpu_shares, l.memory_bytes), (Some(1536), Some(3 << 30)));
        assert_eq!(weight(2), 1);
        assert_eq!(weight(1024), 39);
        assert_eq!(weight(262_144), 10_000);
    }

    /// Against a directory laid out as cgroup v1 or v2 (plain files: the kernel's checks
    /// are the e2e tests').
    #[test]
    fn a_pods_working_set_is_its_usage_less_inactive_file_in_either_layout() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let v1 = dir.path().join("v1");
        let pod = v1.join("memory/kubepods/burstable/podu1");
        std::fs::create_dir_all(&pod).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(v1.join("memory/memory.limit_in_bytes"), "1").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(pod.join("memory.usage_in_bytes"), "1000\n").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(pod.join("memory.stat"), "inactive_file 1\ntotal_inactive_file 300\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let cg = Cgroups::detect(&v1).unwrap_or_else(|| panic!("v1"));
        assert_eq!(cg.pod_working_set(QosClass::Burstable, "u1"), Some(700));
        assert_eq!(cg.pod_working_set(QosClass::BestEffort, "u1"), None, "another class's cgroup");
        assert_eq!(cg.pod_working_set(QosClass::Burstable, "../u1"), None);
        let v2 = dir.path().join("v2");
        let pod = v2.join("kubepods/podu2");
        std::fs::create_dir_all(&pod).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(v2.join("cgroup.controllers"), "memory").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(pod.join("memory.current"), "5000").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(pod.join("memory.stat"), "anon 10\ninactive_file 1000\n").unwrap_or_else(|e| panic!("{e}"));
        let cg = Cgroups::detect(&v2).unwrap_or_else(|| panic!("v2"));
        assert_eq!(cg.pod_working_set(QosClass::Guaranteed, "u2"), Some(4000));
    }

    #[test]
    fn limits_are_written_for_either_layout_and_the_pod_removed() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let v1 = dir.path().join("v1");
        for c in ["memory", "cpu", "pids"] {
            std::fs::create_dir_all(v1.join(c)).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(v1.join("memory/memory.limit_in_bytes"), "").unwrap_or_else(|e| panic!("{e}"));
        let cg = Cgroups::detect(&v1).unwrap_or_else(|| panic!("v1"));
        assert_eq!(cg.version(), "v1");
        let limits = CgroupLimits {
            cpu_shares: Some(512),
            cpu_quota_us: Some(50_000),
            memory_bytes: Some(64 << 20),
            pids: Some(100),
        };
        cg.ensure("/kubepods/burstable/podu1", &limits).unwrap_or_else(|e| panic!("{e}"));
        let read = |p: &str| std::fs::read_to_string(v1.join(p)).unwrap_or_default();
        assert_eq!(read("memory/kubepods/burstable/podu1/memory.limit_in_bytes"), (64u64 << 20).to_string());
        assert_eq!(read("cpu/kubepods/burstable/podu1/cpu.cfs_quota_us"), "50000");
        assert_eq!(read("cpu/kubepods/burstable/podu1/cpu.shares"), "512");
        assert_eq!(read("pids/kubepods/burstable/podu1/pids.max"), "100");
        // A leftover container directory below it goes with it.
        std::fs::create_dir_all(v1.join("memory/kubepods/burstable/podu1/abc")).unwrap_or_else(|e| panic!("{e}"));
        // (Plain directories hold the files written above: remove them as the kernel would.)
        for c in ["memory", "cpu", "pids"] {
            for f in std::fs::read_dir(v1.join(c).join("kubepods/burstable/podu1")).unwrap_or_else(|e| panic!("{e}")) {
                let f = f.unwrap_or_else(|e| panic!("{e}"));
                if f.file_type().is_ok_and(|t| t.is_file()) {
                    std::fs::remove_file(f.path()).unwrap_or_else(|e| panic!("{e}"));
                }
            }
        }
        assert!(cg.remove_pod("../../memory").is_err(), "a UID that is not one directory name");
        cg.remove_pod("u1").unwrap_or_else(|e| panic!("{e}"));
        assert!(!v1.join("memory/kubepods/burstable/podu1").exists());
        assert!(v1.join("memory/kubepods/burstable").exists(), "the QoS cgroup stays");

        let v2 = dir.path().join("v2");
        std::fs::create_dir_all(&v2).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(v2.join("cgroup.controllers"), "cpu memory pids").unwrap_or_else(|e| panic!("{e}"));
        let cg = Cgroups::detect(&v2).unwrap_or_else(|| panic!("v2"));
        assert_eq!(cg.version(), "v2");
        cg.ensure("/kubepods/podu2", &limits).unwrap_or_else(|e| panic!("{e}"));
        let read = |p: &str| std::fs::read_to_string(v2.join(p)).unwrap_or_default();
        assert_eq!(read("kubepods/podu2/memory.max"), (64u64 << 20).to_string());
        assert_eq!(read("kubepods/podu2/cpu.max"), "50000 100000");
        assert_eq!(read("kubepods/podu2/cpu.weight"), weight(512).to_string());
        assert!(read("cgroup.subtree_control").contains("+"), "the root enables controllers for kubepods");
        assert!(Cgroups::detect(dir.path()).is_none());
    }
}
