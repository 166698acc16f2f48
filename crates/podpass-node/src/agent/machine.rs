//! What the node reports about the machine (kubelet: cadvisor's `MachineInfo` and
//! `kubelet_node_status.go` setters): capacity (cpu, memory, ephemeral-storage, pods),
//! allocatable (capacity less `kubeReserved`, `systemReserved` and the hard eviction
//! thresholds of memory and nodefs, as the kubelet's `GetNodeAllocatableAbsolute`), and the
//! identifiers of `nodeInfo`.

use std::collections::BTreeMap;
use std::path::Path;

use podpass_api::quantity::format_binary_si as binary_si;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::eviction_thresholds::{HardThresholds, Signal};
/// Longest identifier file read (machine-id, boot_id, os-release).
const MAX_ID_FILE: u64 = 64 << 10;

/// The machine as read once at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Machine {
    /// Logical CPUs.
    pub cpus: u64,
    /// `MemTotal`, in bytes.
    pub memory_bytes: u64,
    /// Size of the filesystem holding the root dir, in bytes.
    pub ephemeral_bytes: u64,
    /// `uname -r`.
    pub kernel_version: String,
    /// `PRETTY_NAME` of /etc/os-release.
    pub os_image: String,
    /// /etc/machine-id.
    pub machine_id: String,
    /// /sys/class/dmi/id/product_uuid (readable by root only; empty otherwise).
    pub system_uuid: String,
    /// This boot's ID.
    pub boot_id: String,
    /// `maxPods` of the kubelet configuration: the `pods` capacity.
    pub max_pods: u32,
    /// `kubeReserved` + `systemReserved`: left out of allocatable.
    pub reserved: crate::kubelet_config::Reserved,
    /// `evictionHard`: its `memory.available` and `nodefs.available` are left out of
    /// allocatable too.
    pub eviction_hard: HardThresholds,
}

fn read_small(path: &str) -> String {
    use std::io::Read;
    let mut text = String::new();
    if let Ok(file) = std::fs::File::open(path) {
        let _ = file.take(MAX_ID_FILE).read_to_string(&mut text);
    }
    text.trim().to_owned()
}

/// `MemTotal` of /proc/meminfo, in bytes (0: unreadable).
fn mem_total(meminfo: &str) -> u64 {
    super::pressure::meminfo_field(meminfo, "MemTotal:").unwrap_or(0)
}

/// `PRETTY_NAME` of an os-release file, unquoted.
fn pretty_name(os_release: &str) -> String {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_owned())
        .unwrap_or_else(|| "Linux".to_owned())
}

impl Machine {
    /// Reads the machine (blocking file reads, on the blocking pool); what cannot be read
    /// is zero or empty.
    pub async fn read(root_dir: &Path) -> Self {
        let root = root_dir.to_owned();
        tokio::task::spawn_blocking(move || Self::read_now(&root)).await.unwrap_or_default()
    }

    fn read_now(root_dir: &Path) -> Self {
        let ephemeral_bytes =
            rustix::fs::statvfs(root_dir).map(|s| s.f_blocks.saturating_mul(s.f_frsize)).unwrap_or_default();
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
            memory_bytes: mem_total(&read_small("/proc/meminfo")),
            ephemeral_bytes,
            kernel_version: read_small("/proc/sys/kernel/osrelease"),
            os_image: pretty_name(&read_small("/etc/os-release")),
            machine_id: read_small("/etc/machine-id"),
            system_uuid: read_small("/sys/class/dmi/id/product_uuid"),
            boot_id: read_small("/proc/sys/kernel/random/boot_id"),
            max_pods: crate::kubelet_config::DEFAULT_MAX_PODS,
            reserved: Default::default(),
            eviction_hard: HardThresholds::default(),
        }
    }

    /// `status.capacity`.
    pub fn capacity(&self) -> BTreeMap<String, Quantity> {
        resources(self.cpus, self.memory_bytes, self.ephemeral_bytes, self.max_pods)
    }

    /// Allocatable memory in bytes: capacity less what is reserved and the
    /// `memory.available` threshold (default 100Mi; 0: unknown).
    pub fn allocatable_memory(&self) -> u64 {
        let held = self.eviction_hard.held(Signal::MemoryAvailable, self.memory_bytes);
        self.memory_bytes.saturating_sub(self.reserved.memory_bytes).saturating_sub(held)
    }

    /// `status.allocatable`: capacity less `kubeReserved`, `systemReserved`, and the
    /// `memory.available` and `nodefs.available` thresholds (default 100Mi and 10%).
    pub fn allocatable(&self) -> BTreeMap<String, Quantity> {
        let memory = self.allocatable_memory();
        let held = self.eviction_hard.held(Signal::NodeFsAvailable, self.ephemeral_bytes);
        let ephemeral = self.ephemeral_bytes.saturating_sub(held);
        let mut out = resources(self.cpus, memory, ephemeral, self.max_pods);
        if self.reserved.cpu_milli > 0 {
            let milli = self.cpus.saturating_mul(1000).saturating_sub(self.reserved.cpu_milli);
            let cpu = if milli.is_multiple_of(1000) { (milli / 1000).to_string() } else { format!("{milli}m") };
            out.insert("cpu".into(), Quantity(cpu));
        }
        out
    }
}

fn resources(cpus: u64, memory: u64, ephemeral: u64, pods: u32) -> BTreeMap<String, Quantity> {
    [
        ("cpu", cpus.to_string()),
        ("memory", binary_si(memory)),
        ("ephemeral-storage", binary_si(ephemeral)),
        ("pods", pods.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Quantity(v)))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_written_as_the_kubelets() {
        assert_eq!(binary_si(24 << 30), "24Gi");
        assert_eq!(binary_si(32_803_604 * 1024), "32803604Ki");
        assert_eq!(binary_si(48_294_789_041), "48294789041");
        assert_eq!(binary_si(0), "0");
        let m = Machine {
            cpus: 2,
            memory_bytes: 4 << 30,
            ephemeral_bytes: 1000 << 20,
            max_pods: 110,
            ..Machine::default()
        };
        let capacity = m.capacity();
        assert_eq!(capacity["cpu"].0, "2");
        assert_eq!(capacity["memory"].0, "4Gi");
        assert_eq!(capacity["pods"].0, "110");
        let allocatable = m.allocatable();
        assert_eq!(allocatable["memory"].0, "3996Mi", "100Mi held back");
        assert_eq!(allocatable["ephemeral-storage"].0, "900Mi", "10% held back");
        // kubeReserved + systemReserved come off allocatable too.
        let reserved = Machine {
            reserved: crate::kubelet_config::Reserved { cpu_milli: 500, memory_bytes: 1 << 30 },
            ..m.clone()
        };
        let allocatable = reserved.allocatable();
        assert_eq!((allocatable["cpu"].0.as_str(), allocatable["memory"].0.as_str()), ("1500m", "2972Mi"));
        assert_eq!(reserved.capacity(), m.capacity(), "capacity is the machine's");
        // Configured thresholds replace the defaults here too.
        let custom = Machine {
            eviction_hard: HardThresholds(vec![crate::eviction_thresholds::Threshold {
                signal: Signal::MemoryAvailable,
                value: crate::eviction_thresholds::ThresholdValue::Quantity(1 << 30, true),
            }]),
            ..m.clone()
        };
        let allocatable = custom.allocatable();
        assert_eq!((allocatable["memory"].0.as_str(), allocatable["ephemeral-storage"].0.as_str()), ("3Gi", "1000Mi"));
    }

    #[test]
    fn proc_and_os_release_are_parsed_and_this_machine_reads() {
        assert_eq!(mem_total("MemTotal:       16384 kB\nMemFree: 1 kB\n"), 16384 * 1024);
        assert_eq!(mem_total("garbage"), 0);
        assert_eq!(
            pretty_name("NAME=Debian\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"),
            "Debian GNU/Linux 12 (bookworm)"
        );
        let m = Machine::read_now(Path::new("/"));
        assert!(m.cpus >= 1 && m.memory_bytes > 0 && m.ephemeral_bytes > 0, "{m:?}");
        assert!(!m.kernel_version.is_empty());
    }
}
