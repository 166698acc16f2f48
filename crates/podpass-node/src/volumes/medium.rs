//! Memory-backed volume directories. The kubelet's secret and projected volume plugins wrap
//! an emptyDir of medium Memory (pkg/volume/secret, pkg/volume/projected:
//! `wrappedVolumeSpec`), so the service-account tokens and secrets they hold are never
//! written to the node's disk; configMap and downwardAPI volumes wrap a plain one. An
//! emptyDir of `medium: Memory` is one too, bounded further by its `sizeLimit`.
//!
//! As emptyDir's `setupTmpfs`: an existing tmpfs mount is kept (setup is idempotent), else
//! one is mounted, sized as `SizeMemoryBackedVolumes` sizes it (the pod's memory limit, at
//! most the node's allocatable memory), with `noswap` where the kernel has it
//! (`IsTmpfsNoswapOptionSupported`). Beyond upstream the mount is also `nosuid,nodev`
//! (nothing in these volumes needs either), and a directory that held files on disk before
//! (written by an agent that could not mount) is emptied first, so no token stays on disk
//! under the mount.
//!
//! Blocking I/O: call from `spawn_blocking`.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use rustix::mount::{MountFlags, UnmountFlags};
use thiserror::Error;

use super::pod::PROJECTED_PLUGIN_DIR;

/// `TMPFS_MAGIC` of statfs(2).
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// The most of `/proc/self/mountinfo` read: a mount table past it is not read without
/// bound, and a mount it leaves unseen makes the removal that needed it fail as busy.
const MAX_MOUNTINFO_BYTES: u64 = 64 << 20;

/// Where secret and projected volumes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeMedium {
    /// tmpfs, as upstream. `node_allocatable_memory` caps each mount's size (0: unknown,
    /// the kernel's default of half the RAM).
    Memory {
        /// The node's allocatable memory in bytes.
        node_allocatable_memory: u64,
    },
    /// Plain directories on the root dir's file system (tests that may not mount, and
    /// hollow nodes, whose thousands of pods would otherwise be as many mounts).
    Disk,
}

/// Whether the kubelet keeps volumes of `plugin` (a `kubernetes.io~…` directory name) in
/// memory: secret and projected ones.
pub fn memory_backed(plugin: &str) -> bool {
    plugin == PROJECTED_PLUGIN_DIR || plugin == "kubernetes.io~secret"
}

/// A mount-related failure, naming the path.
#[derive(Debug, Error)]
#[error("{what} {path}: {source}")]
pub struct MountError {
    /// The step that failed.
    pub what: &'static str,
    /// The path it failed on.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

fn err(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> MountError {
    let path = path.to_owned();
    move |source| MountError { what, path, source }
}

/// What [`set_up_tmpfs`] found or did.
#[derive(Debug)]
pub enum TmpfsSetUp {
    /// A tmpfs was mounted on the directory.
    Mounted,
    /// The directory already was a tmpfs mount.
    AlreadyMounted,
    /// This process may not mount (not root, or no `CAP_SYS_ADMIN`): the directory is a
    /// plain one, on disk.
    NotPermitted(std::io::Error),
}

/// Makes `dir` a tmpfs mount of at most `size` bytes (`None`: the kernel's default), mode
/// 0777 as the kubelet's emptyDir (the files' own modes and owners decide who reads them).
pub fn set_up_tmpfs(dir: &Path, size: Option<u64>) -> Result<TmpfsSetUp, MountError> {
    std::fs::DirBuilder::new().recursive(true).mode(0o750).create(dir).map_err(err("creating", dir))?;
    if is_tmpfs_mount(dir)? {
        return Ok(TmpfsSetUp::AlreadyMounted);
    }
    // What an earlier, unprivileged run wrote here on disk: a mount would hide it, still
    // on disk, so it is removed once this process turns out to be allowed to mount.
    let on_disk = std::fs::read_dir(dir).map_err(err("listing", dir))?.next().is_some();
    let flags = MountFlags::NOSUID | MountFlags::NODEV;
    let size = size.map(|s| format!(",size={s}")).unwrap_or_default();
    let with_noswap = std::ffi::CString::new(format!("mode=0777,noswap{size}")).unwrap_or_default();
    let plain = std::ffi::CString::new(format!("mode=0777{size}")).unwrap_or_default();
    let mount = || match rustix::mount::mount("tmpfs", dir, "tmpfs", flags, with_noswap.as_c_str()) {
        // `noswap` is Linux 6.4+: older kernels refuse the option, not the mount.
        Err(rustix::io::Errno::INVAL) => rustix::mount::mount("tmpfs", dir, "tmpfs", flags, plain.as_c_str()),
        other => other,
    };
    match mount() {
        Ok(()) => {}
        Err(e @ (rustix::io::Errno::PERM | rustix::io::Errno::ACCESS)) => {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).map_err(err("setting mode", dir))?;
            return Ok(TmpfsSetUp::NotPermitted(e.into()));
        }
        Err(e) => return Err(err("mounting tmpfs on", dir)(e.into())),
    }
    if on_disk {
        rustix::mount::unmount(dir, UnmountFlags::DETACH).map_err(|e| err("unmounting", dir)(e.into()))?;
        for entry in std::fs::read_dir(dir).map_err(err("listing", dir))?.flatten() {
            let path = entry.path();
            let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(err("removing what was on disk", &path))?;
        }
        mount().map_err(|e| err("mounting tmpfs on", dir)(e.into()))?;
    }
    Ok(TmpfsSetUp::Mounted)
}

/// Set when a node first fails to mount a tmpfs: the warning is given once per process.
static NOT_PERMITTED_WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// [`set_up_tmpfs`] for a pod's volume: where this process may not mount, the directory
/// stays a plain one and the node's log says so, once.
pub fn set_up_memory_volume(dir: &Path, size: Option<u64>) -> Result<(), MountError> {
    if let TmpfsSetUp::NotPermitted(e) = set_up_tmpfs(dir, size)?
        && !NOT_PERMITTED_WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::warn!(error = %e, "this node may not mount tmpfs: secret, projected and memory emptyDir volumes \
            (tokens among them) are written to disk, under the root dir");
    }
    Ok(())
}

/// Whether `dir` is the root of a tmpfs mount: tmpfs, on another device than its parent.
fn is_tmpfs_mount(dir: &Path) -> Result<bool, MountError> {
    let fs = rustix::fs::statfs(dir).map_err(|e| err("statfs", dir)(e.into()))?;
    #[allow(clippy::useless_conversion, clippy::unnecessary_fallible_conversions)]
    let tmpfs = u64::try_from(fs.f_type).is_ok_and(|t| t == TMPFS_MAGIC);
    if !tmpfs {
        return Ok(false);
    }
    let parent = dir.parent().unwrap_or(dir);
    let dev = std::fs::metadata(dir).map_err(err("stat", dir))?.dev();
    let parent_dev = std::fs::metadata(parent).map_err(err("stat", parent))?.dev();
    Ok(dev != parent_dev)
}

/// The size of a pod's memory-backed volume (kubelet: `calculateEmptyDirMemorySize`): the
/// node's allocatable memory, bounded by the pod's memory limit (its containers' limits
/// summed, or its largest init container's if that is more) and by the volume's own
/// `sizeLimit` (an emptyDir's), each when set; `None` when none is known.
pub fn tmpfs_size(pod: &Pod, node_allocatable_memory: u64, size_limit: Option<&Quantity>) -> Option<u64> {
    let pod_bound = pod_tmpfs_size(pod, node_allocatable_memory);
    match (pod_bound, size_limit.and_then(bytes).filter(|l| *l > 0)) {
        (Some(bound), Some(limit)) => Some(bound.min(limit)),
        (bound, limit) => bound.or(limit),
    }
}

fn pod_tmpfs_size(pod: &Pod, node_allocatable_memory: u64) -> Option<u64> {
    let spec = pod.spec.as_ref();
    let limit = |c: &Container| -> u64 {
        let quantity = c.resources.as_ref().and_then(|r| r.limits.as_ref()).and_then(|l| l.get("memory"));
        quantity.and_then(bytes).unwrap_or(0)
    };
    let containers: u64 = spec.map(|s| s.containers.iter().map(limit).fold(0, u64::saturating_add)).unwrap_or(0);
    let init = spec.and_then(|s| s.init_containers.as_ref()).map(|c| c.iter().map(limit).max().unwrap_or(0));
    let pod_limit = containers.max(init.unwrap_or(0));
    match (pod_limit, node_allocatable_memory) {
        (0, 0) => None,
        (0, node) => Some(node),
        (pod, 0) => Some(pod),
        (pod, node) => Some(pod.min(node)),
    }
}

/// A quantity of bytes, rounded up; `None` for one that is not a quantity (the API server
/// validated it: such a limit counts as none) or is negative.
fn bytes(quantity: &Quantity) -> Option<u64> {
    let milli = podpass_api::quantity::parse_milli(&quantity.0).ok()?;
    u64::try_from((milli + 999) / 1000).ok()
}

/// Detaches the memory-backed volume mounts of the pod whose directory is `pod_dir`: each
/// secret, projected and emptyDir volume directory is unmounted (one syscall each; one that is not a
/// mount is left as it is), without reading the node's whole mount table for every pod.
pub fn detach_pod_volumes(pod_dir: &Path) -> Result<(), MountError> {
    for plugin in [PROJECTED_PLUGIN_DIR, "kubernetes.io~secret", "kubernetes.io~empty-dir"] {
        let plugin_dir = pod_dir.join("volumes").join(plugin);
        let entries = match std::fs::read_dir(&plugin_dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(err("listing", &plugin_dir)(e)),
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match rustix::mount::unmount(&path, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW) {
                // Not a mount point, or gone, or a process that may not mount (so had none).
                Ok(()) | Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOENT | rustix::io::Errno::PERM) => {}
                Err(e) => return Err(err("unmounting", &path)(e.into())),
            }
        }
    }
    Ok(())
}

/// Lazily detaches every mount at or below `root` (deepest first), as a pod's teardown and
/// anyone removing a node's root dir must before deleting it; how many were detached.
pub fn unmount_all_under(root: &Path) -> Result<usize, MountError> {
    let root = match std::fs::canonicalize(root) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(err("resolving", root)(e)),
    };
    let info = Path::new("/proc/self/mountinfo");
    let file = std::fs::File::open(info).map_err(err("opening", info))?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_MOUNTINFO_BYTES), &mut text)
        .map_err(err("reading", info))?;
    let mut points: Vec<PathBuf> = text
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_mountinfo(p)))
        .filter(|p| p.starts_with(&root))
        .collect();
    // Deepest first; a path mounted over several times is listed, and detached, as often.
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    let mut detached = 0;
    for point in points {
        match rustix::mount::unmount(&point, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW) {
            Ok(()) => detached += 1,
            // Already gone (another teardown got there first).
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(err("unmounting", &point)(e.into())),
        }
    }
    Ok(detached)
}

/// A mountinfo path field: the kernel writes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        // Three octal digits of at most \377 (one byte).
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| (b'0'..=b'3').contains(&d[0]) && d[1..].iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Detaches every mount under a directory when dropped, also by panic: for whoever removes
/// a node's root dir after its agent (tests, benches), which would otherwise find the
/// volume mounts busy and leave them mounted.
#[derive(Debug)]
pub struct UnmountOnDrop(pub PathBuf);

impl Drop for UnmountOnDrop {
    fn drop(&mut self) {
        let _ = unmount_all_under(&self.0);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// How many tmpfs mounts sit at `path` (this process's mount table).
    pub(crate) fn mounts_at(path: &Path) -> usize {
        let path = std::fs::canonicalize(path).unwrap_or_default();
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let at = |l: &&str| l.split(' ').nth(4).map(unescape_mountinfo).as_deref() == path.to_str();
        info.lines().filter(at).filter(|l| l.contains(" - tmpfs ")).count()
    }

    #[test]
    fn a_volume_directory_becomes_one_small_private_tmpfs_and_nothing_stays_on_disk() {
        let t = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let _cleanup = UnmountOnDrop(t.path().to_owned());
        let dir = t.path().join("pods/u1/volumes/kubernetes.io~projected/v");
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("token"), "written on disk by an unprivileged run").unwrap_or_else(|e| panic!("{e}"));
        let set_up = set_up_tmpfs(&dir, Some(1 << 20)).unwrap_or_else(|e| panic!("{e}"));
        let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode() & 0o7777).unwrap_or_default();
        if let TmpfsSetUp::NotPermitted(e) = set_up {
            // Not allowed to mount: a plain directory, what it holds left as it is.
            eprintln!("this test runs without the right to mount ({e}): checking the fallback only");
            assert!(!is_tmpfs_mount(&dir).unwrap_or(true));
            assert_eq!(mode(&dir), 0o777);
            assert!(dir.join("token").exists());
            return;
        }
        assert!(matches!(set_up, TmpfsSetUp::Mounted), "{set_up:?}");
        assert!(is_tmpfs_mount(&dir).unwrap_or(false));
        assert_eq!(mode(&dir), 0o777, "the kubelet's emptyDir mode");
        let flags = rustix::fs::statvfs(&dir).map(|s| s.f_flag).unwrap_or_else(|e| panic!("{e}"));
        assert!(flags.contains(rustix::fs::StatVfsMountFlags::NOSUID | rustix::fs::StatVfsMountFlags::NODEV));
        assert!(!dir.join("token").exists(), "the mount starts empty");
        // the size: a file past 1 MiB does not fit
        let big = std::fs::write(dir.join("big"), vec![0u8; 2 << 20]);
        assert_eq!(big.map_err(|e| e.raw_os_error()), Err(Some(28)), "ENOSPC");
        std::fs::remove_file(dir.join("big")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("fresh"), "in memory").unwrap_or_else(|e| panic!("{e}"));
        // idempotent: a second set-up keeps the mount and its files
        let again = set_up_tmpfs(&dir, Some(1 << 20)).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(again, TmpfsSetUp::AlreadyMounted), "{again:?}");
        assert_eq!(mounts_at(&dir), 1, "not mounted twice");
        assert!(dir.join("fresh").exists());

        // detached with the pod: what was under the mount is gone, and so is the file the
        // earlier run left on disk beneath it
        assert_eq!(unmount_all_under(&t.path().join("pods/u1")).unwrap_or_else(|e| panic!("{e}")), 1);
        assert_eq!(mounts_at(&dir), 0);
        assert!(!dir.join("fresh").exists());
        assert!(!dir.join("token").exists(), "the on-disk token was removed before mounting");
        std::fs::remove_dir_all(t.path().join("pods")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(unmount_all_under(&t.path().join("pods")).unwrap_or_else(|e| panic!("{e}")), 0, "absent root");
    }

    #[test]
    fn nested_mounts_are_detached_deepest_first_and_only_under_the_root() {
        let t = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let _cleanup = UnmountOnDrop(t.path().to_owned());
        let (outer, inner, beside) = (t.path().join("r/a"), t.path().join("r/a/b"), t.path().join("rb"));
        if let Ok(TmpfsSetUp::NotPermitted(_)) = set_up_tmpfs(&outer, None) {
            return eprintln!("this test needs the right to mount: skipped");
        }
        assert!(matches!(set_up_tmpfs(&inner, None), Ok(TmpfsSetUp::Mounted)));
        assert!(matches!(set_up_tmpfs(&beside, None), Ok(TmpfsSetUp::Mounted)));
        // "rb" shares a prefix with "r" but is not under it
        assert_eq!(unmount_all_under(&t.path().join("r")).unwrap_or_else(|e| panic!("{e}")), 2);
        assert_eq!((mounts_at(&outer), mounts_at(&inner), mounts_at(&beside)), (0, 0, 1));
        assert_eq!(unmount_all_under(t.path()).unwrap_or_else(|e| panic!("{e}")), 1);
    }

    #[test]
    fn the_size_is_the_pods_memory_limit_at_most_the_nodes_allocatable_memory() {
        let pod = |spec: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec})).unwrap_or_default()
        };
        let limited = |m: &str| serde_json::json!({"name": "c", "resources": {"limits": {"memory": m}}});
        let two = pod(serde_json::json!({"containers": [limited("64Mi"), limited("32Mi"), {"name": "free"}]}));
        assert_eq!(tmpfs_size(&two, 8 << 30, None), Some(96 << 20), "the limits summed");
        assert_eq!(tmpfs_size(&two, 80 << 20, None), Some(80 << 20), "at most allocatable");
        assert_eq!(tmpfs_size(&two, 0, None), Some(96 << 20), "allocatable unknown");
        let init = pod(serde_json::json!({"containers": [limited("64Mi")], "initContainers": [limited("1Gi")]}));
        assert_eq!(tmpfs_size(&init, 8 << 30, None), Some(1 << 30), "the largest init container, if more");
        let none = pod(serde_json::json!({"containers": [{"name": "c"}, limited("not a quantity")]}));
        assert_eq!(tmpfs_size(&none, 8 << 30, None), Some(8 << 30), "no limit: allocatable");
        assert_eq!(tmpfs_size(&none, 0, None), None, "neither: the kernel's default");
        assert_eq!(
            tmpfs_size(&pod(serde_json::json!({"containers": [limited("1.5")]})), 0, None),
            Some(2),
            "rounded up"
        );
        // an emptyDir's sizeLimit bounds it further, never raises it
        let q = |s: &str| Quantity(s.to_owned());
        assert_eq!(tmpfs_size(&two, 8 << 30, Some(&q("1Mi"))), Some(1 << 20));
        assert_eq!(tmpfs_size(&two, 8 << 30, Some(&q("1Gi"))), Some(96 << 20));
        assert_eq!(tmpfs_size(&none, 0, Some(&q("1Mi"))), Some(1 << 20));
        assert_eq!(tmpfs_size(&two, 8 << 30, Some(&q("0"))), Some(96 << 20), "a zero sizeLimit is none");
        assert_eq!(tmpfs_size(&two, 8 << 30, Some(&q("lots"))), Some(96 << 20), "one that is no quantity too");
    }

    #[test]
    fn mountinfo_paths_are_unescaped_as_the_kernel_escapes_them() {
        assert_eq!(unescape_mountinfo(r"/var/lib/a\040b\011c\012d\134e"), "/var/lib/a b\tc\nd\\e");
        assert_eq!(unescape_mountinfo(r"/x\777y"), r"/x\777y", "past one byte: kept as written");
        assert_eq!(unescape_mountinfo(r"/x\04"), r"/x\04", "short: kept");
        assert_eq!(unescape_mountinfo("/x\\"), "/x\\");
        assert!(!memory_backed("kubernetes.io~configmap") && !memory_backed("kubernetes.io~downward-api"));
        assert!(memory_backed("kubernetes.io~secret") && memory_backed(PROJECTED_PLUGIN_DIR));
    }
}
