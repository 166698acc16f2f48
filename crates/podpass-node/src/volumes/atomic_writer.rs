//! The kubelet's AtomicWriter (pkg/volume/util/atomic_writer.go): a volume's files are
//! published all at once, so a reader never sees a partial or mixed payload.
//!
//! Layout of a target directory:
//! ```text
//! <dir>/..data -> ..2026_11_24_03_20_00.k3j9x2   (the current payload, swapped by rename)
//! <dir>/token  -> ..data/token                     (one link per top-level name)
//! ```
//! Readers are safe by the rename alone. As upstream, nothing is fsynced by default: a
//! pod's volumes are derived state, rewritten from the API at every agent start (a payload
//! that differs on disk, also one a power loss truncated, is written again), and secret
//! and projected volumes live on tmpfs (`super::medium`), as the kubelet's. [`AtomicWriter::durable`] fsyncs the files and the new
//! directory before the swap and the target directory after it, for callers that promise
//! durability. Beyond upstream, a `..data_tmp` link or timestamped directory left by a
//! process killed mid-write is removed on the next write.
//!
//! Blocking I/O: call from `spawn_blocking`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;

const DATA_DIR: &str = "..data";
const NEW_DATA_DIR: &str = "..data_tmp";
const MAX_FILE_NAME_LENGTH: usize = 255;
const MAX_PATH_LENGTH: usize = 4096;

/// One file of a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    /// Contents.
    pub data: Vec<u8>,
    /// Permission bits, applied exactly (the umask does not apply).
    pub mode: u32,
    /// The owner (`FsUser`: a token file of a pod whose containers all run as one user).
    pub owner: Option<u32>,
    /// The group (the pod's `fsGroup`).
    pub group: Option<u32>,
}

/// Writing a payload failed. Path messages are upstream's.
#[derive(Debug, Error)]
pub enum AtomicWriteError {
    /// A payload path is not allowed.
    #[error("invalid path: {0}")]
    InvalidPath(String),
    /// The file system refused.
    #[error("{what} {path}: {source}")]
    Io {
        /// The step.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> AtomicWriteError {
    let path = path.to_owned();
    move |source| AtomicWriteError::Io { what, path, source }
}

/// `validatePath`: relative, at most 4096 bytes, no `..` element, elements at most 255
/// bytes, and not starting with `..` (names the writer reserves).
pub fn validate_path(path: &str) -> Result<(), AtomicWriteError> {
    let invalid = |m: String| Err(AtomicWriteError::InvalidPath(m));
    if path.is_empty() {
        return invalid(format!("must not be empty: {path:?}"));
    }
    if path.starts_with('/') {
        return invalid(format!("must be relative path: {path}"));
    }
    if path.len() > MAX_PATH_LENGTH {
        return invalid(format!("must be less than or equal to {MAX_PATH_LENGTH} characters"));
    }
    let items: Vec<&str> = path.split('/').collect();
    for item in &items {
        if *item == ".." {
            return invalid(format!("must not contain '..': {path}"));
        }
        if item.len() > MAX_FILE_NAME_LENGTH {
            return invalid(format!("filenames must be less than or equal to {MAX_FILE_NAME_LENGTH} characters"));
        }
    }
    if items[0].starts_with("..") && items[0].len() > 2 {
        return invalid(format!("must not start with '..': {path}"));
    }
    Ok(())
}

/// `filepath.Clean` for the relative paths [`validate_path`] admits.
fn clean(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    if parts.is_empty() { ".".to_owned() } else { parts.join("/") }
}

/// Publishes payloads into one target directory. Not synchronised: one writer per
/// directory, as upstream.
#[derive(Debug, Clone)]
pub struct AtomicWriter {
    target: PathBuf,
    durable: bool,
}

impl AtomicWriter {
    /// A writer for `target`, created if missing with mode 0777 as the kubelet's emptyDir
    /// that holds secret, configMap and projected volumes: a container running as any user
    /// reaches the files, whose own modes and owners decide who reads them (the node's
    /// root dir, 0700, keeps other users of the node out).
    pub fn new(target: &Path) -> Result<Self, AtomicWriteError> {
        if !target.is_dir() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(target)
                .map_err(io("creating target directory", target))?;
            std::fs::set_permissions(target, std::fs::Permissions::from_mode(0o777))
                .map_err(io("setting mode", target))?;
        }
        Ok(Self { target: target.to_owned(), durable: false })
    }

    /// Makes every write durable: files and directories fsynced around the swap.
    pub fn durable(mut self) -> Self {
        self.durable = true;
        self
    }

    /// The target directory.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Publishes `payload` (paths relative to the target). Returns whether anything was
    /// written; an unchanged payload only repairs the user-visible links.
    pub fn write(&self, payload: &BTreeMap<String, FileProjection>) -> Result<bool, AtomicWriteError> {
        // (1) validate
        let mut cleaned = BTreeMap::new();
        for (path, file) in payload {
            validate_path(path)?;
            cleaned.insert(clean(path), file);
        }
        self.remove_leftovers()?;
        // (2) the current payload
        let data_link = self.target.join(DATA_DIR);
        let old = match std::fs::read_link(&data_link) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io("reading link", &data_link)(e)),
        };
        // (3)-(4) what goes, and whether anything changes
        let (to_remove, changed) = match &old {
            Some(old) => {
                let old_dir = self.target.join(old);
                let present = walk(&old_dir)?;
                let mut wanted = BTreeSet::new();
                for path in cleaned.keys() {
                    let mut sub = path.as_str();
                    loop {
                        wanted.insert(sub.to_owned());
                        match sub.rsplit_once('/') {
                            Some((parent, _)) => sub = parent,
                            None => break,
                        }
                    }
                }
                let to_remove: BTreeSet<String> = present.difference(&wanted).cloned().collect();
                let changed = cleaned.iter().any(|(p, f)| {
                    let on_disk = old_dir.join(p);
                    let same_mode = std::fs::symlink_metadata(&on_disk)
                        .is_ok_and(|m| m.permissions().mode() & 0o7777 == f.mode & 0o777);
                    !same_mode || std::fs::read(&on_disk).map_or(true, |d| d != f.data)
                });
                (to_remove, changed)
            }
            None => (BTreeSet::new(), true),
        };
        let write_needed = changed || !to_remove.is_empty();
        if write_needed {
            // (5)-(6) the new payload in a new timestamped directory, durable before it is
            // published
            let ts_dir = self.new_timestamp_dir()?;
            let publish = || -> Result<(), AtomicWriteError> {
                for (path, file) in &cleaned {
                    write_file(&ts_dir.join(path), file, self.durable)?;
                }
                if self.durable {
                    sync_dir(&ts_dir)?;
                }
                // (8)-(9) swap
                let name = ts_dir.file_name().map(PathBuf::from).unwrap_or_default();
                let tmp_link = self.target.join(NEW_DATA_DIR);
                std::os::unix::fs::symlink(&name, &tmp_link).map_err(io("linking", &tmp_link))?;
                if let Err(e) = std::fs::rename(&tmp_link, &data_link) {
                    let _ = std::fs::remove_file(&tmp_link);
                    return Err(io("publishing", &data_link)(e));
                }
                if self.durable { sync_dir(&self.target) } else { Ok(()) }
            };
            if let Err(e) = publish() {
                let _ = std::fs::remove_dir_all(&ts_dir);
                return Err(e);
            }
        }
        // (10) user-visible links for every top-level name, after the swap
        for path in cleaned.keys() {
            let top = path.split('/').next().unwrap_or(path);
            let visible = self.target.join(top);
            if std::fs::symlink_metadata(&visible).is_err() {
                std::os::unix::fs::symlink(Path::new(DATA_DIR).join(top), &visible).map_err(io("linking", &visible))?;
            }
        }
        if !write_needed {
            return Ok(false);
        }
        // (11) obsolete top-level links; (12) the old payload
        for path in to_remove.iter().filter(|p| !p.contains('/')) {
            let visible = self.target.join(path);
            match std::fs::remove_file(&visible) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("removing", &visible)(e)),
            }
        }
        if let Some(old) = old {
            let old_dir = self.target.join(old);
            match std::fs::remove_dir_all(&old_dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("removing old payload", &old_dir)(e)),
            }
        }
        Ok(true)
    }

    /// A `..data_tmp` link or a timestamped directory that `..data` does not point to is
    /// what a writer killed mid-write left behind.
    fn remove_leftovers(&self) -> Result<(), AtomicWriteError> {
        let current = std::fs::read_link(self.target.join(DATA_DIR)).ok();
        let entries = std::fs::read_dir(&self.target).map_err(io("listing", &self.target))?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let path = entry.path();
            if name == NEW_DATA_DIR {
                let _ = std::fs::remove_file(&path);
            } else if is_timestamp_dir(&name) && current.as_deref() != Some(Path::new(name.as_ref())) {
                let _ = std::fs::remove_dir_all(&path);
            }
        }
        Ok(())
    }

    fn new_timestamp_dir(&self) -> Result<PathBuf, AtomicWriteError> {
        let stamp = k8s_openapi::jiff::Timestamp::now().strftime("..%Y_%m_%d_%H_%M_%S.").to_string();
        for _ in 0..16 {
            let mut suffix = [0u8; 6];
            aws_lc_rs::rand::fill(&mut suffix).map_err(|_| AtomicWriteError::Io {
                what: "random",
                path: self.target.clone(),
                source: std::io::Error::other("random source failed"),
            })?;
            let dir =
                self.target.join(format!("{stamp}{}", data_encoding::BASE32_NOPAD.encode(&suffix).to_lowercase()));
            match std::fs::create_dir(&dir) {
                Ok(()) => {
                    // 0755 so that group and other can traverse, whatever the umask.
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
                        .map_err(io("setting mode", &dir))?;
                    return Ok(dir);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io("creating payload directory", &dir)(e)),
            }
        }
        Err(AtomicWriteError::Io {
            what: "creating payload directory",
            path: self.target.clone(),
            source: std::io::Error::other("no free name"),
        })
    }
}

/// `..YYYY_MM_DD_HH_MM_SS.<suffix>`.
fn is_timestamp_dir(name: &str) -> bool {
    name.strip_prefix("..").is_some_and(|rest| rest.as_bytes().first().is_some_and(u8::is_ascii_digit))
}

/// Every path under `dir`, relative, directories included (`filepath.Walk`).
fn walk(dir: &Path) -> Result<BTreeSet<String>, AtomicWriteError> {
    let mut out = BTreeSet::new();
    let mut stack = vec![(dir.to_owned(), String::new())];
    while let Some((path, rel)) = stack.pop() {
        let entries = match std::fs::read_dir(&path) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io("listing", &path)(e)),
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let child = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((entry.path(), child.clone()));
            }
            out.insert(child);
        }
    }
    Ok(out)
}

/// Writes one file of a payload. Its mode is masked to 0777: setuid, setgid and sticky bits
/// never come from an object, whatever the API server accepted.
fn write_file(path: &Path, file: &FileProjection, durable: bool) -> Result<(), AtomicWriteError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io("creating directory", parent))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(file.mode & 0o777)
        .open(path)
        .map_err(io("creating", path))?;
    f.write_all(&file.data).map_err(io("writing", path))?;
    // Ownership as the kubelet sets it; only root may give a file away, and a node that is
    // not root runs no containers that would read it.
    if (file.owner.is_some() || file.group.is_some()) && rustix::process::geteuid().is_root() {
        let uid = file.owner.filter(|u| *u != u32::MAX).map(rustix::fs::Uid::from_raw);
        let gid = file.group.filter(|g| *g != u32::MAX).map(rustix::fs::Gid::from_raw);
        rustix::fs::fchown(&f, uid, gid).map_err(|e| io("changing the owner of", path)(std::io::Error::from(e)))?;
    }
    // The exact mode, whatever the umask.
    f.set_permissions(std::fs::Permissions::from_mode(file.mode & 0o777)).map_err(io("setting mode", path))?;
    if durable {
        f.sync_all().map_err(io("syncing", path))?;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), AtomicWriteError> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io("syncing", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(files: &[(&str, &str, u32)]) -> BTreeMap<String, FileProjection> {
        files
            .iter()
            .map(|(p, d, m)| {
                ((*p).to_owned(), FileProjection { data: d.as_bytes().to_vec(), mode: *m, owner: None, group: None })
            })
            .collect()
    }

    fn read(dir: &Path, p: &str) -> String {
        std::fs::read_to_string(dir.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    #[test]
    fn paths_are_validated_with_upstreams_messages() {
        let msg = |p: &str| validate_path(p).err().map(|e| e.to_string());
        assert_eq!(msg(""), Some(r#"invalid path: must not be empty: """#.to_owned()));
        assert_eq!(msg("/etc/passwd"), Some("invalid path: must be relative path: /etc/passwd".to_owned()));
        assert_eq!(msg("a/../b"), Some("invalid path: must not contain '..': a/../b".to_owned()));
        assert_eq!(msg("..data"), Some("invalid path: must not start with '..': ..data".to_owned()));
        assert_eq!(
            msg(&"a".repeat(256)),
            Some("invalid path: filenames must be less than or equal to 255 characters".to_owned())
        );
        assert_eq!(
            msg(&"a/".repeat(2100)),
            Some("invalid path: must be less than or equal to 4096 characters".to_owned())
        );
        assert_eq!(msg("..."), Some("invalid path: must not start with '..': ...".to_owned()));
        assert!(validate_path("token").is_ok() && validate_path("a/b/c").is_ok() && validate_path(".hidden").is_ok());
    }

    #[test]
    fn payloads_are_published_through_the_data_link_with_exact_modes() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let w = AtomicWriter::new(&dir.path().join("vol")).unwrap_or_else(|e| panic!("{e}"));
        let t = w.target().to_owned();
        let first = payload(&[("token", "t1", 0o600), ("ca.crt", "ca", 0o644), ("labels/app", "web", 0o444)]);
        assert!(w.write(&first).unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(read(&t, "token"), "t1");
        assert_eq!(read(&t, "labels/app"), "web");
        assert_eq!(std::fs::read_link(t.join("token")).ok(), Some(PathBuf::from("..data/token")));
        let data = std::fs::read_link(t.join("..data")).unwrap_or_default();
        assert!(is_timestamp_dir(&data.to_string_lossy()), "{data:?}");
        let mode = |p: &str| std::fs::metadata(t.join(p)).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
        assert_eq!((mode("token"), mode("ca.crt"), mode("labels/app")), (0o600, 0o644, 0o444));
        // the same payload again: nothing written, links intact
        assert!(!w.write(&first).unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(std::fs::read_link(t.join("..data")).unwrap_or_default(), data);
        // a new token and a removed file: one swap, old payload and obsolete link gone
        let second = payload(&[("token", "t2", 0o600), ("labels/app", "web", 0o444)]);
        assert!(w.write(&second).unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(read(&t, "token"), "t2");
        assert!(std::fs::symlink_metadata(t.join("ca.crt")).is_err());
        assert!(!t.join(&data).exists(), "old payload removed");
        // a mode change alone is a change
        let third = payload(&[("token", "t2", 0o640), ("labels/app", "web", 0o444)]);
        assert!(w.write(&third).unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(mode("token"), 0o640);
        // setuid, setgid and sticky bits never come from an object: masked to 0777
        let setuid = payload(&[("token", "t2", 0o6777), ("labels/app", "web", 0o4444)]);
        assert!(w.write(&setuid).unwrap_or_else(|e| panic!("{e}")));
        let full = |p: &str| std::fs::metadata(t.join(p)).map(|m| m.permissions().mode() & 0o7777).unwrap_or(0);
        assert_eq!((full("token"), full("labels/app")), (0o777, 0o444));
        // an invalid path writes nothing
        assert!(w.write(&payload(&[("../escape", "x", 0o644)])).is_err());
        assert_eq!(read(&t, "token"), "t2");
    }

    #[test]
    fn what_a_killed_writer_left_is_removed_and_links_are_repaired() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        // (the durable writer: the same publication, with fsyncs around the swap)
        let w = AtomicWriter::new(dir.path()).unwrap_or_else(|e| panic!("{e}")).durable();
        let t = w.target().to_owned();
        let p = payload(&[("token", "t1", 0o644)]);
        w.write(&p).unwrap_or_else(|e| panic!("{e}"));
        // a half-written payload directory, a dangling tmp link and a lost user-visible link
        std::fs::create_dir(t.join("..2026_01_01_00_00_00.abc")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("..2026_01_01_00_00_00.abc", t.join("..data_tmp")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::remove_file(t.join("token")).unwrap_or_else(|e| panic!("{e}"));
        assert!(!w.write(&p).unwrap_or_else(|e| panic!("{e}")), "unchanged payload");
        assert_eq!(read(&t, "token"), "t1", "the link is repaired");
        let names: Vec<String> = std::fs::read_dir(&t)
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        assert_eq!(names.len(), 3, "{names:?}: ..data, its directory and token");
        assert!(!names.iter().any(|n| n == "..data_tmp" || n == "..2026_01_01_00_00_00.abc"), "{names:?}");
    }
}
