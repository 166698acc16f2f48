//! What the eviction manager observes and the conditions it reports (kubelet:
//! `makeSignalObservations`, `thresholdsMet`, `nodeConditions` and the
//! `evictionPressureTransitionPeriod`): each signal's availability and capacity, the hard
//! thresholds they meet, and the node's `MemoryPressure`, `DiskPressure` and `PIDPressure`.
//!
//! `memory.available` is the kernel's `MemAvailable` (upstream subtracts the root cgroup's
//! working set from capacity; both answer "how much could still be allocated without
//! reclaiming what is in use"). `nodefs` is the filesystem of the node's root directory,
//! `imagefs` the one the runtime says holds its images (the same one when they share a
//! device, as upstream's summary reports it then); `pid.available` is the kernel's
//! `pid_max` less the tasks that exist. A figure that cannot be read is not observed, and
//! a signal not observed meets no threshold: the node never claims pressure it did not
//! measure.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::eviction_thresholds::{Signal, Threshold};

/// What is left of a signal's resource, and its capacity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Observation {
    pub available: u64,
    pub capacity: u64,
}

/// The signals observed at one instant.
pub(crate) type Observations = BTreeMap<Signal, Observation>;

/// The node's pressure conditions as reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    /// `MemoryPressure`.
    pub memory: bool,
    /// `DiskPressure`.
    pub disk: bool,
    /// `PIDPressure`.
    pub pid: bool,
}

impl Pressure {
    /// The conditions that hold, in the kubelet's order (`[MemoryPressure DiskPressure]`).
    pub(crate) fn names(&self) -> Vec<&'static str> {
        [("MemoryPressure", self.memory), ("DiskPressure", self.disk), ("PIDPressure", self.pid)]
            .into_iter()
            .filter_map(|(n, on)| on.then_some(n))
            .collect()
    }

    fn of(conditions: &[&str]) -> Self {
        Pressure {
            memory: conditions.contains(&"MemoryPressure"),
            disk: conditions.contains(&"DiskPressure"),
            pid: conditions.contains(&"PIDPressure"),
        }
    }
}

/// statvfs of a filesystem: bytes and inodes (unprivileged view).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct FsStats {
    bytes_total: u64,
    bytes_available: u64,
    inodes_total: u64,
    inodes_free: u64,
}

fn fs_stats(path: &Path) -> Option<FsStats> {
    rustix::fs::statvfs(path).ok().map(|s| FsStats {
        bytes_total: s.f_blocks.saturating_mul(s.f_frsize),
        bytes_available: s.f_bavail.saturating_mul(s.f_frsize),
        inodes_total: s.f_files,
        inodes_free: s.f_favail,
    })
}

/// The filesystems the node watches.
#[derive(Debug, Clone)]
pub(crate) struct Filesystems {
    /// nodefs: the node's root directory.
    pub node: PathBuf,
    /// imagefs: where the runtime keeps images (`None`: the node's).
    pub image: Option<PathBuf>,
}

/// Observes every signal now (on the blocking pool: /proc and statvfs reads).
pub(crate) async fn observe(fs: &Filesystems) -> Observations {
    let fs = fs.clone();
    tokio::task::spawn_blocking(move || observe_now(&fs)).await.unwrap_or_default()
}

fn observe_now(fs: &Filesystems) -> Observations {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let node = fs_stats(&fs.node);
    let image = fs.image.as_deref().and_then(fs_stats).or(node);
    let pids = pid_observation(
        &std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap_or_default(),
        &std::fs::read_to_string("/proc/loadavg").unwrap_or_default(),
    );
    from_figures(meminfo_field(&meminfo, "MemAvailable:"), meminfo_field(&meminfo, "MemTotal:"), node, image, pids)
}

fn from_figures(
    mem_available: Option<u64>,
    mem_total: Option<u64>,
    node: Option<FsStats>,
    image: Option<FsStats>,
    pids: Option<Observation>,
) -> Observations {
    let mut out = Observations::new();
    if let (Some(available), Some(capacity)) = (mem_available, mem_total) {
        out.insert(Signal::MemoryAvailable, Observation { available, capacity });
    }
    for (stats, bytes, inodes) in [
        (node, Signal::NodeFsAvailable, Signal::NodeFsInodesFree),
        (image, Signal::ImageFsAvailable, Signal::ImageFsInodesFree),
    ] {
        let Some(s) = stats.filter(|s| s.bytes_total > 0) else { continue };
        out.insert(bytes, Observation { available: s.bytes_available, capacity: s.bytes_total });
        // A filesystem without inode accounting (some report 0 inodes) has no inode signal.
        if s.inodes_total > 0 {
            out.insert(inodes, Observation { available: s.inodes_free, capacity: s.inodes_total });
        }
    }
    if let Some(p) = pids {
        out.insert(Signal::PidAvailable, p);
    }
    out
}

/// `pid.available`: `pid_max` less the tasks `/proc/loadavg` counts (its fourth field,
/// `running/total`).
fn pid_observation(pid_max: &str, loadavg: &str) -> Option<Observation> {
    let capacity: u64 = pid_max.trim().parse().ok()?;
    let total: u64 = loadavg.split_whitespace().nth(3)?.split_once('/')?.1.parse().ok()?;
    Some(Observation { available: capacity.saturating_sub(total), capacity })
}

/// A `/proc/meminfo` field (`MemTotal:`), in bytes.
pub(super) fn meminfo_field(meminfo: &str, field: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .map(|kib| kib.saturating_mul(1024))
}

/// The thresholds the observations meet now (kubelet `thresholdsMet`), in their order.
pub(crate) fn thresholds_met(thresholds: &[Threshold], observations: &Observations) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|t| observations.get(&t.signal).is_some_and(|o| t.met(o.available, o.capacity)))
        .copied()
        .collect()
}

/// When each condition was last observed, so a condition holds for the transition period
/// after its threshold was last met (kubelet `nodeConditionsLastObservedAt` and
/// `nodeConditionsObservedSince`): a node hovering at a threshold does not flap.
#[derive(Debug, Default)]
pub(crate) struct ConditionClock {
    last_observed: HashMap<&'static str, Instant>,
}

impl ConditionClock {
    /// The conditions to report, given the thresholds met `now`.
    pub(crate) fn update(&mut self, met: &[Threshold], now: Instant, period: Duration) -> Pressure {
        for t in met {
            self.last_observed.insert(t.signal.condition(), now);
        }
        self.last_observed.retain(|_, at| now.saturating_duration_since(*at) < period || *at == now);
        let held: Vec<&str> = self.last_observed.keys().copied().collect();
        Pressure::of(&held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction_thresholds::{ThresholdValue, default_eviction_hard};

    const GIB: u64 = 1 << 30;

    fn fs(total: u64, available: u64, inodes: u64, inodes_free: u64) -> Option<FsStats> {
        Some(FsStats { bytes_total: total, bytes_available: available, inodes_total: inodes, inodes_free })
    }

    fn met(mem: u64, node: Option<FsStats>, image: Option<FsStats>) -> Vec<Signal> {
        let o = from_figures(Some(mem), Some(8 * GIB), node, image, None);
        thresholds_met(&default_eviction_hard(), &o).iter().map(|t| t.signal).collect()
    }

    #[test]
    fn default_thresholds_are_upstreams() {
        let roomy = fs(100 * GIB, 50 * GIB, 1000, 900);
        assert_eq!(met(4 * GIB, roomy, roomy), vec![]);
        assert_eq!(met((100 << 20) - 1, roomy, roomy), vec![Signal::MemoryAvailable], "just under 100Mi");
        assert_eq!(met(100 << 20, roomy, roomy), vec![], "exactly 100Mi is enough");
        // One filesystem for both: imagefs's 15% comes first.
        let f = fs(100 * GIB, 14 * GIB, 1000, 900);
        assert_eq!(met(4 * GIB, f, f), vec![Signal::ImageFsAvailable]);
        let f = fs(100 * GIB, 9 * GIB, 1000, 900);
        assert_eq!(met(4 * GIB, f, f), vec![Signal::NodeFsAvailable, Signal::ImageFsAvailable]);
        let f = fs(100 * GIB, 50 * GIB, 1000, 49);
        assert_eq!(met(4 * GIB, f, f), vec![Signal::NodeFsInodesFree, Signal::ImageFsInodesFree], "4.9% inodes");
        assert_eq!(met(4 * GIB, fs(100 * GIB, 50 * GIB, 1000, 50), roomy), vec![], "5% inodes");
        // A separate imagefs under pressure alone.
        assert_eq!(met(4 * GIB, roomy, fs(10 * GIB, GIB, 1000, 900)), vec![Signal::ImageFsAvailable]);
    }

    #[test]
    fn what_cannot_be_measured_meets_nothing() {
        let o = from_figures(None, None, None, None, None);
        assert!(o.is_empty());
        assert!(thresholds_met(&default_eviction_hard(), &o).is_empty());
        // No inode accounting: no inode signal.
        let o = from_figures(None, None, fs(GIB, GIB / 2, 0, 0), None, None);
        assert!(!o.contains_key(&Signal::NodeFsInodesFree) && o.contains_key(&Signal::NodeFsAvailable));
        assert_eq!(meminfo_field("MemTotal: 1 kB\n", "MemAvailable:"), None);
        assert_eq!(meminfo_field("MemAvailable:    2048 kB\n", "MemAvailable:"), Some(2 << 20));
        assert_eq!(meminfo_field("MemAvailable: lots kB\n", "MemAvailable:"), None);
        assert_eq!(
            pid_observation("4194304\n", "0.10 0.20 0.30 2/345 6789\n"),
            Some(Observation { available: 4193959, capacity: 4194304 })
        );
        assert_eq!(pid_observation("", "0.10 0.20 0.30 2/345 6789\n"), None);
    }

    #[test]
    fn a_condition_holds_for_the_transition_period_after_its_threshold_was_last_met() {
        let disk = Threshold { signal: Signal::NodeFsAvailable, value: ThresholdValue::Percentage(100_000) };
        let period = Duration::from_secs(300);
        let mut clock = ConditionClock::default();
        let t0 = Instant::now();
        assert_eq!(clock.update(&[disk], t0, period), Pressure { disk: true, ..Pressure::default() });
        assert!(clock.update(&[], t0 + Duration::from_secs(299), period).disk, "still within the period");
        assert!(!clock.update(&[], t0 + Duration::from_secs(300), period).disk, "the period passed");
        assert_eq!(
            clock.update(&[disk], t0, Duration::ZERO),
            Pressure { disk: true, ..Pressure::default() },
            "met now is reported even with no period"
        );
        assert_eq!(Pressure { memory: true, disk: true, pid: false }.names(), vec!["MemoryPressure", "DiskPressure"]);
    }

    #[test]
    fn this_machine_measures() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let o = observe_now(&Filesystems { node: dir.path().to_owned(), image: None });
        for s in [Signal::MemoryAvailable, Signal::NodeFsAvailable, Signal::ImageFsAvailable, Signal::PidAvailable] {
            assert!(o.get(&s).is_some_and(|v| v.capacity > 0 && v.available <= v.capacity), "{s:?}: {o:?}");
        }
    }
}
