//! Container garbage collection for one pod (kubelet: `kuberuntime_gc.go`
//! `evictContainers` with `MaxPerPodContainer` 1): of each container of the pod, the
//! current instance and at most one dead one before it are kept (the one `kubectl logs
//! --previous` reads); every older dead instance is removed from the runtime with its log
//! files (kubelet: `removeContainerLog`). A kept dead instance's log larger than the
//! container's log budget (`containerLogMaxSize` × `containerLogMaxFiles`) keeps only its
//! last budget's worth of whole lines (beyond upstream, whose rotation only sees running
//! containers: a crash-looping container writing faster than rotation would otherwise hold
//! many times its budget), so a container's logs stay within twice its budget.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::containers::{CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL, PodRuntime};
use crate::runtime::{CONTAINER_EXITED, Container, RuntimeError};

/// The log file of a container instance, from its labels (as the agent made it), if it
/// lies inside the node's log directory.
fn log_path(rt: &PodRuntime, c: &Container) -> Option<PathBuf> {
    let label = |k: &str| c.labels.get(k).map(String::as_str).unwrap_or_default();
    let name = c.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or_default();
    let attempt = c.metadata.as_ref().map_or(0, |m| m.attempt);
    let path = super::containers::pod_log_dir(
        &rt.logs,
        label(POD_NAMESPACE_LABEL),
        label(POD_NAME_LABEL),
        label(POD_UID_LABEL),
    )
    .join(name)
    .join(format!("{attempt}.log"));
    let inside = !name.is_empty() && !path.components().any(|c| c.as_os_str() == "..") && path.starts_with(&rt.logs);
    inside.then_some(path)
}

/// Removes `log` and its rotated files (`<log>.*`). Blocking.
fn remove_logs(log: &Path) {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name().and_then(|n| n.to_str())) else { return };
    let rotated = format!("{name}.");
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_name().to_str().is_some_and(|n| n == name || n.starts_with(&rotated)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Keeps only the last `max` bytes of `log` (from a line start), through a temporary file
/// renamed over it; nothing is done to a file within the bound. Blocking.
pub(crate) fn trim_to_tail(log: &Path, max: u64) -> std::io::Result<bool> {
    let mut file = match std::fs::File::open(log) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    if len <= max {
        return Ok(false);
    }
    file.seek(SeekFrom::Start(len - max))?;
    let mut tail = Vec::new();
    file.take(max).read_to_end(&mut tail)?;
    // The first partial line goes: CRI log records are whole lines.
    let cut = tail.iter().position(|b| *b == b'\n').map_or(tail.len(), |i| i + 1);
    let tmp = log.with_extension("log.trim.tmp");
    let mut out = std::fs::File::create(&tmp)?;
    out.write_all(&tail[cut..])?;
    out.sync_all()?;
    std::fs::rename(&tmp, log)?;
    Ok(true)
}

/// One collection over the pod `uid`'s containers; how many instances were removed.
pub(crate) async fn collect_pod(rt: &PodRuntime, uid: &str) -> Result<usize, RuntimeError> {
    let all = rt.cri.list_containers(HashMap::from([(POD_UID_LABEL.to_owned(), uid.to_owned())])).await?;
    let mut by_name: HashMap<String, Vec<Container>> = HashMap::new();
    for c in all {
        let name = c.labels.get(CONTAINER_NAME_LABEL).cloned().unwrap_or_default();
        by_name.entry(name).or_default().push(c);
    }
    let mut removed = 0;
    let mut trim = Vec::new();
    for (_, mut instances) in by_name {
        instances.sort_by_key(|c| std::cmp::Reverse(c.metadata.as_ref().map_or(0, |m| m.attempt)));
        let mut dead_kept = 0;
        for (i, c) in instances.iter().enumerate() {
            if c.state != CONTAINER_EXITED {
                continue;
            }
            // The current instance (newest) and one dead instance are kept.
            if i == 0 || dead_kept == 0 {
                dead_kept += 1;
                trim.extend(log_path(rt, c));
                continue;
            }
            match rt.cri.remove_container(&c.id).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
            removed += 1;
            if let Some(log) = log_path(rt, c) {
                tokio::task::spawn_blocking(move || remove_logs(&log)).await.unwrap_or_default();
            }
        }
    }
    if rt.log_max_size > 0 && !trim.is_empty() {
        let files = u64::try_from(rt.log_max_files).unwrap_or(u64::MAX);
        let max = u64::try_from(rt.log_max_size).unwrap_or(u64::MAX).saturating_mul(files);
        tokio::task::spawn_blocking(move || {
            for log in trim {
                if let Err(e) = trim_to_tail(&log, max) {
                    tracing::warn!(path = %log.display(), error = %e, "trimming an exited container's log failed");
                }
            }
        })
        .await
        .unwrap_or_default();
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exited_containers_log_keeps_its_last_whole_lines_within_the_bound() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let log = dir.path().join("0.log");
        let line = |i: usize| format!("2026-11-27T00:00:00.000000000Z stdout F line {i:05}\n");
        let text: String = (0..1000).map(line).collect();
        std::fs::write(&log, &text).unwrap_or_else(|e| panic!("{e}"));
        assert!(trim_to_tail(&log, 4096).unwrap_or_else(|e| panic!("{e}")));
        let kept = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(kept.len() <= 4096 && kept.len() > 3900, "{}", kept.len());
        assert!(kept.starts_with("2026-") && kept.ends_with(&line(999)), "whole lines, the newest kept");
        assert!(!trim_to_tail(&log, 4096).unwrap_or_else(|e| panic!("{e}")), "within the bound: untouched");
        assert!(!trim_to_tail(&dir.path().join("gone.log"), 1).unwrap_or_else(|e| panic!("{e}")));
    }
}
