//! `subPath` mounts as the kubelet makes them since CVE-2021-25741 (kubelet: `doBindSubPath`,
//! `doSafeOpen`, `SafeMakeDir`): the path a pod names is *opened* beneath its volume — never
//! checked as a string and handed on — and the opened file is bind-mounted, by its
//! descriptor, at a path only the node writes:
//! `<root>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>`. The runtime is given
//! that path, so whatever a container does to the volume's tree afterwards (swapping a
//! directory for a symlink to `/`, say) cannot change what is mounted.
//!
//! The open is one `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` from the volume's
//! root: the kernel refuses, atomically, any resolution that leaves the root (an absolute
//! symlink, a `..` past it), even while the tree is being renamed under it. Symlinks that
//! stay inside the volume resolve, as upstream allows them (a configMap key's file is one).
//! On a kernel without `openat2` (before 5.6) every component is opened with `O_NOFOLLOW`
//! and any symlink is refused, as upstream's `doSafeOpen` does.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use rustix::mount::UnmountFlags;
use thiserror::Error;

use super::pod::{pod_dir, safe_segment};

/// The kubelet's directory, under a pod's, of its subPath bind mounts.
pub const SUBPATHS_DIR: &str = "volume-subpaths";

/// The most path components a subPath may have: the tree a tenant can make is bounded by
/// its volume, the work done for one mount by this.
const MAX_COMPONENTS: usize = 128;

/// Why a subPath could not be prepared (`CreateContainerConfigError`).
#[derive(Debug, Error)]
pub enum SubPathError {
    /// The subPath is absolute or holds `..` (the API server refuses those too).
    #[error("subPath {sub_path:?} must be a relative path without '..'")]
    NotRelative {
        /// The subPath as the pod wrote it.
        sub_path: String,
    },
    /// Resolving the subPath would leave its volume (a symlink out of it).
    #[error("subpath {sub_path:?} not within volume path {volume:?}")]
    Outside {
        /// The subPath as the pod wrote it.
        sub_path: String,
        /// The volume's name.
        volume: String,
    },
    /// A name used in the bind mount's path is not a safe path segment.
    #[error("{what} {value:?} cannot name a subPath mount")]
    UnsafeName {
        /// Which name.
        what: &'static str,
        /// Its value.
        value: String,
    },
    /// A system call failed.
    #[error("subPath {sub_path:?} of volume {volume:?}: {what}: {source}")]
    Io {
        /// The subPath as the pod wrote it.
        sub_path: String,
        /// The volume's name.
        volume: String,
        /// What was being done.
        what: &'static str,
        /// The failure.
        source: std::io::Error,
    },
}

/// One subPath mount to prepare.
#[derive(Debug, Clone, Copy)]
pub struct SubPath<'a> {
    /// The volume's directory on the node (made by the node, not the pod).
    pub volume_dir: &'a Path,
    /// The volume's name.
    pub volume: &'a str,
    /// The container's name.
    pub container: &'a str,
    /// The mount's index in the container's `volumeMounts`.
    pub index: usize,
    /// The subPath as the pod wrote it.
    pub sub_path: &'a str,
}

/// The bind mount's path for `s`: `<root>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>`.
pub fn sub_path_target(root: &Path, pod_uid: &str, volume: &str, container: &str, index: usize) -> PathBuf {
    pod_dir(root, pod_uid).join(SUBPATHS_DIR).join(volume).join(container).join(index.to_string())
}

/// Opens `s.sub_path` beneath its volume (making missing directories with the volume root's
/// mode, as `SafeMakeDir`), and bind-mounts the opened file or directory at
/// [`sub_path_target`]; returns that path, the one to give the runtime. A mount left there by
/// an earlier start of the container is replaced. Blocking: file system calls and a mount.
pub fn prepare_sub_path(root: &Path, pod_uid: &str, s: SubPath<'_>) -> Result<PathBuf, SubPathError> {
    for (what, value) in [("pod uid", pod_uid), ("volume", s.volume), ("container", s.container)] {
        if !safe_segment(value, what == "pod uid") {
            return Err(SubPathError::UnsafeName { what, value: value.to_owned() });
        }
    }
    let io = |what: &'static str| {
        move |e: Errno| SubPathError::Io {
            sub_path: s.sub_path.to_owned(),
            volume: s.volume.to_owned(),
            what,
            source: e.into(),
        }
    };
    let opened = open_beneath_creating(s)?;
    let is_dir =
        FileType::from_raw_mode(rustix::fs::fstat(&opened).map_err(io("examining the opened path"))?.st_mode).is_dir();

    let target = sub_path_target(root, pod_uid, s.volume, s.container, s.index);
    let parent = target.parent().unwrap_or(&target);
    std::fs::create_dir_all(parent).map_err(|source| SubPathError::Io {
        sub_path: s.sub_path.to_owned(),
        volume: s.volume.to_owned(),
        what: "making the mount's directory",
        source,
    })?;
    unmount_and_remove(&target).map_err(io("replacing the earlier mount"))?;
    if is_dir {
        rustix::fs::mkdir(&target, Mode::from_raw_mode(0o750)).map_err(io("making the mount point"))?;
    } else {
        let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        drop(rustix::fs::open(&target, flags, Mode::from_raw_mode(0o600)).map_err(io("making the mount point"))?);
    }
    // The magic link names the opened file itself: nothing is resolved again.
    let source = format!("/proc/self/fd/{}", opened.as_raw_fd());
    rustix::mount::mount_bind(source.as_str(), &target).map_err(io("bind-mounting the opened path"))?;
    Ok(target)
}

/// Detaches and removes every subPath mount of the pod whose directory is `pod_dir`
/// (`<volume>/<container>/<index>` entries; bounded by what the node made).
pub fn clean_sub_paths(pod_dir: &Path) -> std::io::Result<()> {
    let base = pod_dir.join(SUBPATHS_DIR);
    let volumes = match std::fs::read_dir(&base) {
        Ok(v) => v,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for volume in volumes {
        let volume = volume?.path();
        for container in std::fs::read_dir(&volume)? {
            let container = container?.path();
            for mount in std::fs::read_dir(&container)? {
                unmount_and_remove(&mount?.path())?;
            }
            std::fs::remove_dir(&container)?;
        }
        std::fs::remove_dir(&volume)?;
    }
    std::fs::remove_dir(&base)
}

/// Detaches whatever is mounted at `path` (a path can hold a stack of mounts) and removes
/// the mount point, file or directory; absent is fine.
fn unmount_and_remove(path: &Path) -> Result<(), Errno> {
    // Each detach removes one mount of the stack; the node makes one per start, so a short
    // stack. Bounded all the same.
    for _ in 0..64 {
        match rustix::mount::unmount(path, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW) {
            Ok(()) => continue,
            Err(Errno::INVAL | Errno::NOENT) => break,
            Err(e) => return Err(e),
        }
    }
    match rustix::fs::unlink(path) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(Errno::ISDIR | Errno::PERM) => match rustix::fs::rmdir(path) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// The components of a relative subPath without `.`; `None` if it is absolute, holds `..`
/// or is too deep.
fn components(sub_path: &str) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    for c in Path::new(sub_path).components() {
        match c {
            Component::Normal(n) => out.push(n.to_str()?),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (out.len() <= MAX_COMPONENTS).then_some(out)
}

/// Opens `s.sub_path` beneath the volume root (`O_PATH`), making each missing directory on
/// the way beneath the root too.
fn open_beneath_creating(s: SubPath<'_>) -> Result<OwnedFd, SubPathError> {
    let outside = || SubPathError::Outside { sub_path: s.sub_path.to_owned(), volume: s.volume.to_owned() };
    let io = |what: &'static str| {
        move |e: Errno| SubPathError::Io {
            sub_path: s.sub_path.to_owned(),
            volume: s.volume.to_owned(),
            what,
            source: e.into(),
        }
    };
    let parts = components(s.sub_path).ok_or_else(|| SubPathError::NotRelative { sub_path: s.sub_path.to_owned() })?;
    // The volume's directory is the node's own path: it is opened without following a
    // symlink in its last component all the same.
    let root = rustix::fs::open(
        s.volume_dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io("opening the volume"))?;
    let mode = Mode::from_raw_mode(rustix::fs::fstat(&root).map_err(io("examining the volume"))?.st_mode & 0o7777);
    // The common case, one open: the path exists.
    match open_beneath(&root, &parts.join("/"), OFlags::PATH) {
        Ok(fd) => return Ok(fd),
        Err(Errno::NOENT) => {}
        Err(Errno::XDEV | Errno::LOOP) => return Err(outside()),
        Err(e) => return Err(io("opening the subPath")(e)),
    }
    let mut current = rustix::io::dup(&root).map_err(io("opening the volume"))?;
    for i in 1..=parts.len() {
        let prefix = parts[..i].join("/");
        match open_beneath(&root, &prefix, OFlags::PATH) {
            Ok(fd) => current = fd,
            Err(Errno::NOENT) => {
                // SafeMakeDir: made in the directory already opened beneath the root, then
                // opened beneath the root again (a symlink swapped in since is refused by
                // that open) and given the volume root's mode through its descriptor.
                match rustix::fs::mkdirat(&current, parts[i - 1], Mode::from_raw_mode(0o700)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(io("making a missing directory")(e)),
                }
                let made = open_beneath(&root, &prefix, OFlags::RDONLY | OFlags::DIRECTORY).map_err(|e| match e {
                    Errno::XDEV | Errno::LOOP => outside(),
                    e => io("opening a directory it made")(e),
                })?;
                rustix::fs::fchmod(&made, mode).map_err(io("setting a made directory's mode"))?;
                current = made;
            }
            // EXDEV: the resolution would leave the root; ELOOP: a symlink where none may be.
            Err(Errno::XDEV | Errno::LOOP) => return Err(outside()),
            Err(e) => return Err(io("opening the subPath")(e)),
        }
    }
    Ok(current)
}

/// `openat2(root, path, flags, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`; without `openat2`,
/// a walk that opens each component with `O_NOFOLLOW` and refuses symlinks (`ELOOP`).
fn open_beneath(root: &impl AsFd, path: &str, flags: OFlags) -> Result<OwnedFd, Errno> {
    let flags = flags | OFlags::CLOEXEC;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    // openat2 answers EAGAIN when a rename raced a `..` it resolved: asked again, a few
    // times, then the caller hears it.
    let mut result = Err(Errno::AGAIN);
    for _ in 0..8 {
        result = rustix::fs::openat2(root, path, flags, Mode::empty(), resolve);
        if !matches!(result, Err(Errno::AGAIN)) {
            break;
        }
    }
    if !matches!(result, Err(Errno::NOSYS)) {
        return result;
    }
    let mut current = rustix::io::dup(root)?;
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    for (i, part) in parts.iter().enumerate() {
        if *part == ".." {
            return Err(Errno::XDEV);
        }
        let last = i + 1 == parts.len();
        let step = if last { flags } else { OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC };
        let fd = rustix::fs::openat(&current, *part, step | OFlags::NOFOLLOW, Mode::empty())?;
        // O_PATH | O_NOFOLLOW opens a symlink itself rather than failing on it.
        if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) == FileType::Symlink {
            return Err(Errno::LOOP);
        }
        current = fd;
    }
    Ok(current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Whether bind mounts may be made (root). Without: under CI (`CI` set, as `.ci/run`
    /// sets it) the test fails, for a security test that passes without checking is one
    /// that cannot fail; elsewhere it says it skipped.
    fn may_mount() -> bool {
        if rustix::process::geteuid().is_root() {
            return true;
        }
        assert!(std::env::var_os("CI").is_none(), "this subPath security test needs root (bind mounts), and CI is set");
        eprintln!("skipped: needs root (bind mounts)");
        false
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        root: PathBuf,
        volume: PathBuf,
        outside: PathBuf,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = clean_sub_paths(&pod_dir(&self.root, "u1"));
        }
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = dir.path().join("root");
        let volume = pod_dir(&root, "u1").join("volumes/kubernetes.io~empty-dir/scratch");
        std::fs::create_dir_all(&volume).unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&volume, std::fs::Permissions::from_mode(0o777)).unwrap_or_else(|e| panic!("{e}"));
        // What a container must never reach: the node's own files.
        let outside = dir.path().join("node-secrets");
        std::fs::create_dir_all(&outside).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(outside.join("signing.key"), "the node's secret").unwrap_or_else(|e| panic!("{e}"));
        Fixture { _dir: dir, root, volume, outside }
    }

    fn prepare(f: &Fixture, sub: &str) -> Result<PathBuf, SubPathError> {
        let s = SubPath { volume_dir: &f.volume, volume: "scratch", container: "app", index: 0, sub_path: sub };
        prepare_sub_path(&f.root, "u1", s)
    }

    #[test]
    fn sub_paths_that_leave_their_volume_are_refused() {
        if !may_mount() {
            return;
        }
        let f = fixture();
        std::os::unix::fs::symlink(&f.outside, f.volume.join("absolute")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("../../../../../../../..", f.volume.join("up")).unwrap_or_else(|e| panic!("{e}"));
        for sub in ["absolute", "absolute/signing.key", "up", "up/tmp"] {
            let e = prepare(&f, sub).unwrap_err();
            assert!(matches!(e, SubPathError::Outside { .. }), "{sub}: {e}");
        }
        for sub in ["../x", "/etc", "a/../../b"] {
            assert!(matches!(prepare(&f, sub), Err(SubPathError::NotRelative { .. })), "{sub}");
        }
        // Nothing was made outside the volume on the way.
        assert!(!f.outside.join("tmp").exists());
    }

    #[test]
    fn a_sub_path_is_the_opened_file_bind_mounted_where_only_the_node_writes() {
        if !may_mount() {
            return;
        }
        let f = fixture();
        std::fs::create_dir_all(f.volume.join("data")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(f.volume.join("data/config"), "mine").unwrap_or_else(|e| panic!("{e}"));
        // A symlink that stays inside the volume resolves, as upstream allows.
        std::os::unix::fs::symlink("data/config", f.volume.join("link")).unwrap_or_else(|e| panic!("{e}"));
        let target = prepare(&f, "link").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(target, pod_dir(&f.root, "u1").join("volume-subpaths/scratch/app/0"));
        assert_eq!(std::fs::read_to_string(&target).unwrap_or_default(), "mine");
        // Replaced on the container's next start, not stacked.
        std::fs::write(f.volume.join("data/other"), "other").unwrap_or_else(|e| panic!("{e}"));
        let again = prepare(&f, "data").unwrap_or_else(|e| panic!("{e}"));
        assert!(again.join("other").exists(), "now the directory");
        // Missing directories are made beneath the volume, with the volume's mode.
        let made = prepare(&f, "new/deeper").unwrap_or_else(|e| panic!("{e}"));
        assert!(f.volume.join("new/deeper").is_dir());
        let mode = std::fs::metadata(f.volume.join("new/deeper")).map(|m| m.permissions().mode() & 0o7777);
        assert_eq!(mode.unwrap_or_default(), 0o777);
        std::fs::write(made.join("x"), "through the mount").unwrap_or_else(|e| panic!("{e}"));
        assert!(f.volume.join("new/deeper/x").exists());
        // Cleaned with the pod: no mount, no mount point left.
        clean_sub_paths(&pod_dir(&f.root, "u1")).unwrap_or_else(|e| panic!("{e}"));
        assert!(!pod_dir(&f.root, "u1").join(SUBPATHS_DIR).exists());
        assert!(f.volume.join("new/deeper/x").exists(), "the volume keeps its files");
    }

    /// CVE-2021-25741: a container swaps a directory of the volume with a symlink to the
    /// node's files (`renameat2(RENAME_EXCHANGE)`) in a loop while the node prepares its
    /// subPath. Every prepared mount is inside the volume, whichever way each race fell.
    #[test]
    fn a_symlink_swapped_in_during_preparation_never_mounts_the_node() {
        if !may_mount() {
            return;
        }
        let f = fixture();
        // `a` is a real directory holding the same path as the node's: a string check
        // passes on it, and then `a` becomes a symlink to `/`.
        let deep = f.outside.strip_prefix("/").unwrap_or(&f.outside).to_owned();
        std::fs::create_dir_all(f.volume.join("a").join(&deep)).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("/", f.volume.join("b")).unwrap_or_else(|e| panic!("{e}"));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (stop, volume) = (stop.clone(), f.volume.clone());
            std::thread::spawn(move || {
                let dir = rustix::fs::open(&volume, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
                    .unwrap_or_else(|e| panic!("{e}"));
                let mut swaps = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    rustix::fs::renameat_with(&dir, "a", &dir, "b", rustix::fs::RenameFlags::EXCHANGE)
                        .unwrap_or_else(|e| panic!("{e}"));
                    swaps += 1;
                }
                swaps
            })
        };
        let sub = format!("a/{}", deep.display());
        let (mut mounted, mut refused) = (0, 0);
        // Until both sides of the race were seen many times (bounded).
        for _ in 0..20_000 {
            if mounted >= 100 && refused >= 100 {
                break;
            }
            match prepare(&f, &sub) {
                Ok(target) => {
                    mounted += 1;
                    assert!(
                        !target.join("signing.key").exists(),
                        "the node's directory was mounted into the pod's subPath"
                    );
                }
                Err(SubPathError::Outside { .. }) => refused += 1,
                Err(e) => panic!("{e}"),
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let swaps = swapper.join().unwrap_or_default();
        assert!(mounted > 0 && refused > 0, "the race was run both ways: {mounted} mounted, {refused} refused");
        eprintln!("{mounted} mounted inside the volume, {refused} refused, {swaps} swaps");
    }
}
