//! The node's pressure conditions (kubelet: the eviction manager's `MemoryPressure`,
//! `DiskPressure` and `PIDPressure`, set by `kubelet_node_status.go`'s setters), measured
//! against upstream's default hard eviction thresholds: `memory.available<100Mi`,
//! `nodefs.available<10%`, `nodefs.inodesFree<5%`. Upstream sets no `pid.available`
//! threshold by default, so `PIDPressure` is reported `False`, as a default kubelet does.
//!
//! `memory.available` is the kernel's `MemAvailable` (upstream subtracts the root cgroup's
//! working set from capacity; both answer "how much could still be allocated without
//! reclaiming what is in use"). The node filesystem is the one holding the node's data
//! directory.

use std::path::Path;

/// `memory.available<100Mi`.
const MEMORY_AVAILABLE_MIN: u64 = 100 << 20;
/// `nodefs.available<10%`.
const NODEFS_AVAILABLE_MIN_PERCENT: u64 = 10;
/// `nodefs.inodesFree<5%`.
const NODEFS_INODES_FREE_MIN_PERCENT: u64 = 5;

/// Which thresholds the node crosses now. A figure that cannot be read crosses none (the
/// node does not claim pressure it did not measure).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    /// `MemoryPressure`.
    pub memory: bool,
    /// `DiskPressure`.
    pub disk: bool,
    /// `PIDPressure`.
    pub pid: bool,
}

/// A filesystem's size and what is left of it, as statvfs reports it (unprivileged view).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct FsStats {
    bytes_total: u64,
    bytes_available: u64,
    inodes_total: u64,
    inodes_free: u64,
}

impl Pressure {
    /// Measures (on the blocking pool: /proc and statvfs reads).
    pub async fn read(root_dir: &Path) -> Self {
        let root = root_dir.to_owned();
        tokio::task::spawn_blocking(move || Self::read_now(&root)).await.unwrap_or_default()
    }

    fn read_now(root_dir: &Path) -> Self {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let fs = rustix::fs::statvfs(root_dir)
            .map(|s| FsStats {
                bytes_total: s.f_blocks.saturating_mul(s.f_frsize),
                bytes_available: s.f_bavail.saturating_mul(s.f_frsize),
                inodes_total: s.f_files,
                inodes_free: s.f_favail,
            })
            .unwrap_or_default();
        Self::from_figures(mem_available(&meminfo), fs)
    }

    fn from_figures(mem_available: Option<u64>, fs: FsStats) -> Self {
        let below =
            |left: u64, total: u64, percent: u64| total > 0 && left.saturating_mul(100) < total.saturating_mul(percent);
        Pressure {
            memory: mem_available.is_some_and(|m| m < MEMORY_AVAILABLE_MIN),
            disk: below(fs.bytes_available, fs.bytes_total, NODEFS_AVAILABLE_MIN_PERCENT)
                || below(fs.inodes_free, fs.inodes_total, NODEFS_INODES_FREE_MIN_PERCENT),
            pid: false,
        }
    }
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .map(|kib| kib.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn fs(total: u64, available: u64, inodes: u64, inodes_free: u64) -> FsStats {
        FsStats { bytes_total: total, bytes_available: available, inodes_total: inodes, inodes_free }
    }

    #[test]
    fn thresholds_are_upstreams_defaults() {
        let roomy = fs(100 * GIB, 50 * GIB, 1000, 900);
        assert_eq!(Pressure::from_figures(Some(4 * GIB), roomy), Pressure::default());
        assert!(Pressure::from_figures(Some((100 << 20) - 1), roomy).memory, "just under 100Mi");
        assert!(!Pressure::from_figures(Some(100 << 20), roomy).memory, "exactly 100Mi is enough");
        assert!(Pressure::from_figures(Some(4 * GIB), fs(100 * GIB, 9 * GIB, 1000, 900)).disk, "9% left");
        assert!(!Pressure::from_figures(Some(4 * GIB), fs(100 * GIB, 10 * GIB, 1000, 900)).disk, "10% left");
        assert!(Pressure::from_figures(Some(4 * GIB), fs(100 * GIB, 50 * GIB, 1000, 49)).disk, "4.9% inodes");
        assert!(!Pressure::from_figures(Some(4 * GIB), fs(100 * GIB, 50 * GIB, 1000, 50)).disk, "5% inodes");
    }

    #[test]
    fn what_cannot_be_measured_is_no_pressure() {
        assert_eq!(Pressure::from_figures(None, FsStats::default()), Pressure::default());
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
        assert_eq!(mem_available("MemAvailable:    2048 kB\n"), Some(2 << 20));
        assert_eq!(mem_available("MemAvailable: lots kB\n"), None);
    }

    #[test]
    fn this_machine_measures() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        assert!(mem_available(&meminfo).is_some_and(|m| m > 0), "MemAvailable read");
        // what the figures say is the machine's; reading them must not fail or panic
        let _ = Pressure::read_now(dir.path());
    }
}
