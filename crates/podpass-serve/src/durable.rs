//! Atomic, durable file writes: the pull records, the embedded image store, keys, PKI and
//! kubeconfigs all go through [`replace`] or [`create_new`].

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// The sibling tmp name a write of `path` goes through: `<name>.<pid>.<seq>.tmp`.
fn tmp_path(path: &Path) -> PathBuf {
    let seq = TMP_SEQ.fetch_add(1, Ordering::Relaxed);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.{seq}.tmp", std::process::id()));
    PathBuf::from(tmp)
}

/// Writes `data` into a new tmp file beside `path` with `mode`, fsynced; then `publish`
/// moves it into place and the directory is fsynced. The tmp file never outlives a failure.
fn write_via_tmp(
    path: &Path,
    data: &[u8],
    mode: u32,
    publish: impl FnOnce(&Path, &Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = tmp_path(path);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        publish(&tmp, path)?;
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)?.sync_all()
    })();
    // After a rename the tmp name is gone; after a link (or a failure) it is removed here.
    let _ = std::fs::remove_file(&tmp);
    result
}

/// Replaces `path` with `data` atomically and durably: a sibling `.tmp` file created with
/// `mode`, written, fsynced, renamed over `path`, then the directory fsynced so the rename
/// survives a crash. The tmp file is removed on failure. Its name carries the process id and
/// a sequence number (the kubelet uses `<name>.tmp`): concurrent writers — threads or node
/// processes sharing a root dir — never rename each other's half-written files; readers skip
/// `.tmp` names.
pub fn replace(path: &Path, data: &[u8], mode: u32) -> std::io::Result<()> {
    write_via_tmp(path, data, mode, |tmp, path| std::fs::rename(tmp, path))
}

/// Creates `path` with `data` atomically and durably, failing with
/// [`std::io::ErrorKind::AlreadyExists`] when it exists — also when another writer creates
/// it at the same moment (the complete tmp file is hard-linked into place, which never
/// replaces). Readers see no file or the whole file.
pub fn create_new(path: &Path, data: &[u8], mode: u32) -> std::io::Result<()> {
    if path.symlink_metadata().is_ok() {
        return Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "file exists"));
    }
    write_via_tmp(path, data, mode, |tmp, path| std::fs::hard_link(tmp, path))
}

/// Whether the process `pid` that named a file in flight still runs (this one, or any
/// live process sharing the directory).
pub fn writer_alive(pid: u32) -> bool {
    pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes the tmp files [`replace`] left in `dir` when its process died mid-write (a
/// crash or kill -9): names `<name>.<pid>.<seq>.tmp` whose pid is not alive. A live
/// process's are left alone, since several node processes may share the directory.
/// Returns how many went.
pub fn remove_stale_tmp(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Some(stem) = name.strip_suffix(".tmp") else { continue };
        let mut parts = stem.rsplit('.');
        let (Some(_seq), Some(pid)) = (parts.next(), parts.next()) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if !writer_alive(pid) && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Creates `dir` (and missing parents) with mode 0700, as etcd its data dir: the objects,
/// keys and images under it are nobody else's to read. An existing directory is left as
/// it is; then the answer is a warning naming it when its group or others may enter it
/// (the operator's choice to keep, but never a silent one).
pub fn private_dir(dir: &Path) -> std::io::Result<Option<String>> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {
            let mode = m.permissions().mode() & 0o777;
            Ok((mode & 0o077 != 0).then(|| {
                format!(
                    "{} is mode {mode:04o}: other local users may read what podpass keeps there; chmod 700 it",
                    dir.display()
                )
            }))
        }
        Ok(_) => Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "exists and is not a directory")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn replaces_with_mode_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        replace(&path, b"one", 0o600).unwrap();
        replace(&path, b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // A failed write (the target is a directory) cleans up its tmp file.
        std::fs::create_dir(dir.path().join("d")).unwrap();
        assert!(replace(&dir.path().join("d"), b"x", 0o600).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn private_dirs_are_0700_and_looser_existing_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("a/b");
        assert_eq!(private_dir(&fresh).unwrap(), None);
        assert_eq!(std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(private_dir(&fresh).unwrap(), None, "an existing 0700 dir is fine");
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        let warning = private_dir(&open).unwrap().unwrap();
        assert!(warning.contains(&open.display().to_string()) && warning.contains("0755"), "{warning}");
        assert_eq!(std::fs::metadata(&open).unwrap().permissions().mode() & 0o777, 0o755, "left as it is");
        std::fs::write(dir.path().join("f"), b"").unwrap();
        assert!(private_dir(&dir.path().join("f")).is_err());
    }

    #[test]
    fn create_new_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key.pem");
        create_new(&path, b"one", 0o600).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let err = create_new(&path, b"two", 0o600).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no tmp file left");
    }

    #[test]
    fn a_dead_writers_tmp_files_are_removed_a_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        // pid 4194305 is above Linux's pid_max: never alive
        std::fs::write(dir.path().join("sha256-ab.4194305.0.tmp"), b"half").unwrap();
        let own = format!("sha256-cd.{}.7.tmp", std::process::id());
        std::fs::write(dir.path().join(&own), b"in flight").unwrap();
        std::fs::write(dir.path().join("sha256-ef"), b"a record").unwrap();
        assert_eq!(remove_stale_tmp(dir.path()), 1);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["sha256-cd.".to_owned() + &std::process::id().to_string() + ".7.tmp", "sha256-ef".into()]);
    }
}
