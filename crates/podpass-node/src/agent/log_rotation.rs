//! Container log rotation (kubelet: `pkg/kubelet/logs/container_log_manager.go`), so a
//! container that writes forever never fills the node's disk: every
//! `containerLogMonitorInterval`, each running container of this node whose log file has
//! reached `containerLogMaxSize` has it renamed to `<log>.<YYYYMMDD-hhmmss>` and the runtime
//! told to reopen it (`ReopenContainerLog`); older rotated files are gzipped and the oldest
//! removed, so at most `containerLogMaxFiles` files (the current one included) remain. A
//! failed reopen renames the file back, to be tried again next round. `kubectl logs` reads
//! the current file, as upstream. Between rounds, the current files found in the last one
//! are looked at every second (one `stat` each), so a container writing fast is rotated
//! within about a second of reaching the limit instead of growing for a whole interval.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::containers::{POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL, PodRuntime, pod_log_dir};
use crate::runtime::{CONTAINER_RUNNING, NODE_LABEL};

/// The kubelet's suffix of a compressed rotated log.
const COMPRESS_SUFFIX: &str = ".gz";
/// The kubelet's suffix of a file being compressed.
const TMP_SUFFIX: &str = ".tmp";
/// The kubelet's timestamp of a rotated log (Go layout `20060102-150405`).
const TIMESTAMP_FORMAT: &str = "%Y%m%d-%H%M%S";

/// `LogRotatePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RotatePolicy {
    /// Bytes a log file reaches before it is rotated; negative: never rotated.
    pub max_size: i64,
    /// Files kept per container log, the current one included (at least 2).
    pub max_files: usize,
}

/// Rotates this node's container logs every `interval` until `shutdown`.
pub(crate) async fn run(
    rt: Arc<PodRuntime>,
    policy: RotatePolicy,
    interval: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    if policy.max_size < 0 {
        return;
    }
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut fast = tokio::time::interval(FAST_CHECK);
    fast.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut current: Vec<(String, PathBuf)> = Vec::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = tick.tick() => current = rotate_all(&rt, policy).await,
            _ = fast.tick() => {
                for (id, log) in &current {
                    // A container gone since the round fails here until the next round
                    // forgets it: quietly.
                    if let Err(e) = rotate_one(&rt, id, log.clone(), policy).await {
                        tracing::debug!(container_id = %id, error = %e, "log rotation between rounds failed");
                    }
                }
            }
        }
    }
}

/// How often the current log files found in the last round are looked at between rounds.
const FAST_CHECK: Duration = Duration::from_secs(1);

/// One round over the node's running containers (kubelet: `rotateLogs`, `processContainer`);
/// their current log files.
async fn rotate_all(rt: &PodRuntime, policy: RotatePolicy) -> Vec<(String, PathBuf)> {
    let ours = HashMap::from([(NODE_LABEL.to_owned(), rt.node.clone())]);
    let containers = match rt.cri.list_containers(ours).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "log rotation: listing containers failed");
            return Vec::new();
        }
    };
    let mut current = Vec::new();
    for c in containers.into_iter().filter(|c| c.state == CONTAINER_RUNNING) {
        // The path the agent gave the container, from its labels (one listing per round,
        // no status call per container: idle pods stay cheap).
        let label = |k: &str| c.labels.get(k).map(String::as_str).unwrap_or_default();
        let name = c.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or_default();
        let attempt = c.metadata.as_ref().map_or(0, |m| m.attempt);
        let log = pod_log_dir(&rt.logs, label(POD_NAMESPACE_LABEL), label(POD_NAME_LABEL), label(POD_UID_LABEL))
            .join(name)
            .join(format!("{attempt}.log"));
        // Only files under the node's own log directory are ever renamed or removed.
        if name.is_empty() || log.components().any(|c| c.as_os_str() == "..") || !log.starts_with(&rt.logs) {
            continue;
        }
        if let Err(e) = rotate_one(rt, &c.id, log.clone(), policy).await {
            tracing::warn!(container_id = %c.id, path = %log.display(), error = %e, "log rotation failed");
        }
        current.push((c.id.clone(), log));
    }
    current
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> io::Result<T> + Send + 'static) -> io::Result<T> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| Err(io::Error::other(e)))
}

/// A log could not be rotated (tried again next round).
#[derive(Debug, thiserror::Error)]
enum RotateError {
    /// The runtime did not reopen the container's log.
    #[error("reopening the container log: {0}")]
    Reopen(crate::runtime::RuntimeError),
    /// Its file could not be read or renamed.
    #[error("{0}")]
    File(#[from] io::Error),
}

async fn rotate_one(rt: &PodRuntime, id: &str, log: PathBuf, policy: RotatePolicy) -> Result<(), RotateError> {
    let size = match blocking({
        let log = log.clone();
        move || std::fs::metadata(&log).map(|m| m.len())
    })
    .await
    {
        Ok(size) => size,
        // A log file removed behind the runtime's back: have it make a new one.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            rt.cri.reopen_container_log(id).await.map_err(RotateError::Reopen)?;
            return Ok(());
        }
        Err(e) => return Err(RotateError::File(e)),
    };
    if i64::try_from(size).unwrap_or(i64::MAX) < policy.max_size {
        return Ok(());
    }
    let rotated = blocking({
        let log = log.clone();
        move || {
            prepare(&log, policy.max_files)?;
            rotate_latest(&log, jiff::Timestamp::now())
        }
    })
    .await?;
    let Some(rotated) = rotated else { return Ok(()) };
    if let Err(e) = rt.cri.reopen_container_log(id).await {
        // Back where it was, to be rotated next round (kubelet: rotateLatestLog).
        if let Err(back) = std::fs::rename(&rotated, &log) {
            tracing::error!(path = %log.display(), error = %back, "renaming a rotated log back failed");
        }
        return Err(RotateError::Reopen(e));
    }
    tracing::debug!(container_id = %id, rotated = %rotated.display(), "container log rotated");
    Ok(())
}

/// The rotated files of `log` (`<log>.*`), sorted by name (oldest first).
fn rotated_files(log: &Path) -> io::Result<Vec<PathBuf>> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name().and_then(|n| n.to_str())) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{name}.");
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)))
        .map(|e| e.path())
        .collect();
    found.sort();
    Ok(found)
}

/// Before `log` is rotated: removes what an earlier failed round left (temporary files, an
/// uncompressed file whose `.gz` exists), the oldest rotated files beyond
/// `max_files - 2`, and compresses the rest (kubelet: `cleanupUnusedLogs`,
/// `removeExcessLogs`, `compressLog`).
fn prepare(log: &Path, max_files: usize) -> io::Result<()> {
    let all = rotated_files(log)?;
    let names: Vec<String> = all.iter().map(|p| p.display().to_string()).collect();
    let in_use = |p: &String| {
        !p.ends_with(TMP_SUFFIX) && (p.ends_with(COMPRESS_SUFFIX) || !names.contains(&format!("{p}{COMPRESS_SUFFIX}")))
    };
    let mut kept = Vec::new();
    for (path, name) in all.iter().zip(&names) {
        if in_use(name) {
            kept.push(path.clone());
        } else {
            remove(path)?;
        }
    }
    kept.sort();
    let excess = kept.len().saturating_sub(max_files.saturating_sub(2));
    for path in kept.drain(..excess) {
        remove(&path)?;
    }
    for path in kept.iter().filter(|p| !p.display().to_string().ends_with(COMPRESS_SUFFIX)) {
        compress(path)?;
    }
    Ok(())
}

fn remove(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// `path` → `path.gz` (through `path.gz.tmp`, so a crash leaves no half archive in use),
/// then `path` removed.
fn compress(path: &Path) -> io::Result<()> {
    let gz = PathBuf::from(format!("{}{COMPRESS_SUFFIX}", path.display()));
    let tmp = PathBuf::from(format!("{}{TMP_SUFFIX}", gz.display()));
    let result = (|| {
        let mut input = std::fs::File::open(path)?;
        // The archive keeps the log's mode, as the kubelet's.
        let mode = input.metadata()?.permissions().mode() & 0o7777;
        let out = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(&tmp)?;
        let mut encoder = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        io::copy(&mut input, &mut encoder)?;
        encoder.finish()?;
        std::fs::rename(&tmp, &gz)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    remove(path)
}

/// Moves `log`'s content to `<log>.<timestamp>` and leaves an empty `log` in its place;
/// `None` when that name is taken (a rotation in the same second: the next round rotates
/// it, nothing is overwritten). The current file is never absent for a reader (beyond the
/// kubelet, which renames then lets the runtime recreate it): the content gets its second
/// name by a hard link, then an empty file of the same mode replaces `log` in one rename.
/// The runtime writes into the rotated file until it reopens `log`.
fn rotate_latest(log: &Path, now: jiff::Timestamp) -> io::Result<Option<PathBuf>> {
    let rotated = PathBuf::from(format!("{}.{}", log.display(), now.strftime(TIMESTAMP_FORMAT)));
    if rotated.exists() || PathBuf::from(format!("{}{COMPRESS_SUFFIX}", rotated.display())).exists() {
        return Ok(None);
    }
    let mode = std::fs::metadata(log)?.permissions().mode() & 0o7777;
    std::fs::hard_link(log, &rotated)?;
    let fresh = PathBuf::from(format!("{}{TMP_SUFFIX}", log.display()));
    let replaced = (|| {
        let _ = std::fs::remove_file(&fresh);
        std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&fresh)?;
        std::fs::rename(&fresh, log)
    })();
    if let Err(e) = replaced {
        let _ = std::fs::remove_file(&fresh);
        let _ = std::fs::remove_file(&rotated);
        return Err(e);
    }
    Ok(Some(rotated))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{e}"))
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn rotation_keeps_max_files_compresses_the_older_and_clears_leftovers() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let log = dir.path().join("0.log");
        let write =
            |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap_or_else(|e| panic!("{e}"));
        write("0.log", "current\n");
        write("0.log.20261125-100000.gz", "old");
        write("0.log.20261125-100010", "second\n");
        write("0.log.20261125-100020", "third\n");
        // Left by a failed earlier round: a temporary file, and a file already compressed.
        write("0.log.20261125-100020.gz.tmp", "half");
        write("0.log.20261125-100030", "dup");
        write("0.log.20261125-100030.gz", "dup-gz");
        // Another container's log is never touched.
        write("1.log.20261125-100000", "other");
        prepare(&log, 4).unwrap_or_else(|e| panic!("{e}"));
        // max_files 4: the current file, the one about to be rotated, and two older ones.
        assert_eq!(
            names(dir.path()),
            ["0.log", "0.log.20261125-100020.gz", "0.log.20261125-100030.gz", "1.log.20261125-100000"]
        );
        let mut text = String::new();
        flate2::read::GzDecoder::new(
            std::fs::File::open(dir.path().join("0.log.20261125-100020.gz")).unwrap_or_else(|e| panic!("{e}")),
        )
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(text, "third\n");

        let now: jiff::Timestamp = "2026-11-25T10:01:00Z".parse().unwrap_or_else(|e| panic!("{e}"));
        let rotated = rotate_latest(&log, now).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rotated, Some(dir.path().join("0.log.20261125-100100")));
        // Never absent for a reader: an empty current file, of the same mode.
        assert_eq!(std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{e}")), "");
        assert_eq!(std::fs::read_to_string(dir.path().join("0.log.20261125-100100")).unwrap_or_default(), "current\n");
        // A second rotation within the same second overwrites nothing.
        write("0.log", "newer\n");
        assert_eq!(rotate_latest(&log, now).unwrap_or_else(|e| panic!("{e}")), None);
        assert_eq!(std::fs::read_to_string(dir.path().join("0.log.20261125-100100")).unwrap_or_default(), "current\n");

        // max_files 2: only the current file and the one being rotated.
        prepare(&log, 2).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(names(dir.path()), ["0.log", "1.log.20261125-100000"]);
    }
}
