//! Durable file writes: nothing half-written, nothing silently replaced.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// A file could not be written.
#[derive(Debug, Error)]
pub enum WriteError {
    /// The target exists and replacing it was not asked for.
    #[error("{} already exists (use --force to replace it)", .0.display())]
    Exists(PathBuf),
    /// An I/O step failed.
    #[error("{what} {}: {source}", .path.display())]
    Io {
        /// The step.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> WriteError {
    let path = path.to_path_buf();
    move |source| WriteError::Io { what, path, source }
}

/// Writes `data` to `path` with `mode` atomically: a temporary file in the same directory
/// is written, fsynced and renamed over `path`, then the directory is fsynced. Refuses to
/// replace an existing file unless `overwrite`.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32, overwrite: bool) -> Result<(), WriteError> {
    if !overwrite && path.exists() {
        return Err(WriteError::Exists(path.to_path_buf()));
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| -> Result<(), WriteError> {
        let mut f =
            OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp).map_err(io_err("creating", &tmp))?;
        f.write_all(data).map_err(io_err("writing", &tmp))?;
        f.sync_all().map_err(io_err("syncing", &tmp))?;
        fs::rename(&tmp, path).map_err(io_err("renaming into", path))?;
        fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io_err("syncing", dir))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn writes_with_mode_and_refuses_to_clobber() {
        let dir = std::env::temp_dir().join(format!("podpass-fsutil-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("key.pem");
        write_atomic(&p, b"one", 0o600, false).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        let err = write_atomic(&p, b"two", 0o600, false).unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
        assert_eq!(fs::read(&p).unwrap(), b"one");
        write_atomic(&p, b"two", 0o600, true).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        // no temporary files are left behind
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }
}
