//! Durable file writes: nothing half-written, nothing silently replaced.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// Writes `data` to `path` with `mode` atomically: a temporary file in the same directory
/// is written, fsynced and renamed over `path`, then the directory is fsynced. Refuses to
/// replace an existing file unless `overwrite`.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32, overwrite: bool) -> Result<()> {
    if !overwrite && path.exists() {
        bail!("{} already exists (use --force to replace it)", path.display());
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().with_context(|| format!("{} is not a file path", path.display()))?;
    let tmp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
    let result = (|| -> Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(data).with_context(|| format!("writing {}", tmp.display()))?;
        f.sync_all().with_context(|| format!("syncing {}", tmp.display()))?;
        fs::rename(&tmp, path).with_context(|| format!("renaming into {}", path.display()))?;
        fs::File::open(dir).and_then(|d| d.sync_all()).with_context(|| format!("syncing {}", dir.display()))
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
