//! Durable file writes: nothing half-written, nothing silently replaced.

use std::io;
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

/// Writes `data` to `path` with `mode` atomically and durably (`podpass_serve::durable`).
/// Refuses to replace an existing file unless `overwrite`.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32, overwrite: bool) -> Result<(), WriteError> {
    let result = if overwrite {
        podpass_serve::durable::replace(path, data, mode)
    } else {
        podpass_serve::durable::create_new(path, data, mode)
    };
    result.map_err(|source| match source.kind() {
        io::ErrorKind::AlreadyExists if !overwrite => WriteError::Exists(path.to_path_buf()),
        _ => WriteError::Io { what: "writing", path: path.to_path_buf(), source },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
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
