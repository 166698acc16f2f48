//! The one audit writer every podpass server uses: JSON lines, to a file rotated by size
//! (kube-apiserver's `--audit-log-path`, `--audit-log-maxsize`, `--audit-log-maxbackup`) or
//! to standard out (`-`, as upstream).
//!
//! Events are written by a dedicated thread, so no request waits on the disk; each event is
//! one line written whole, and rotation happens between lines, so a reader never sees half
//! an event. The queue is bounded: when the disk cannot keep up, further events are counted
//! as dropped and the operator is told on stderr, rather than memory growing without bound.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

/// Events queued at most before new ones are dropped (and counted).
const QUEUE: usize = 65_536;

/// The audit flags, as kube-apiserver names them; flattened into each daemon's config.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct AuditFlags {
    /// Write one audit event per line (JSON) to this file; `-` is standard out.
    #[arg(long)]
    pub audit_log_path: Option<PathBuf>,
    /// Megabytes an audit file may reach before it is rotated to `<path>.1` (0: never
    /// rotated, as upstream's default).
    #[arg(long, default_value_t = 100)]
    pub audit_log_maxsize: u64,
    /// Rotated audit files kept (`<path>.1` is the newest); older ones are removed.
    #[arg(long, default_value_t = 5)]
    pub audit_log_maxbackup: u32,
}

impl AuditFlags {
    /// The writer these flags describe (`None` when no path is set).
    pub fn open(&self) -> std::io::Result<Option<AuditWriter>> {
        let Some(path) = &self.audit_log_path else { return Ok(None) };
        let target = if path.as_os_str() == "-" {
            AuditTarget::Stdout
        } else {
            AuditTarget::File {
                path: path.clone(),
                max_bytes: self.audit_log_maxsize.saturating_mul(1024 * 1024),
                max_backups: self.audit_log_maxbackup,
            }
        };
        AuditWriter::open(target).map(Some)
    }
}

/// Where audit events go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditTarget {
    /// Standard out (`--audit-log-path -`).
    Stdout,
    /// A file, appended to (created 0600) and rotated by size.
    File {
        /// The file.
        path: PathBuf,
        /// Rotated past this many bytes (0: never).
        max_bytes: u64,
        /// Rotated files kept.
        max_backups: u32,
    },
}

/// Where the writer thread puts each line.
type LineSink = Box<dyn FnMut(&[Vec<u8>]) -> std::io::Result<()> + Send>;

/// Lines the writer thread takes from the queue at most per write.
const MAX_BATCH: usize = 1024;
/// How long the writer thread lets lines gather after a write that did not empty a full
/// batch: at thousands of events a second it writes (and is woken) a few hundred times a
/// second, not once per event. An event waits at most this long beyond its turn.
const GATHER: std::time::Duration = std::time::Duration::from_millis(2);

/// Queues audit events for the writer thread; cheap to clone.
#[derive(Debug, Clone)]
pub struct AuditWriter {
    tx: mpsc::SyncSender<Vec<u8>>,
    dropped: Arc<AtomicU64>,
}

impl AuditWriter {
    /// Opens `target` and starts its writer thread.
    pub fn open(target: AuditTarget) -> std::io::Result<Self> {
        let mut out: LineSink = match target {
            AuditTarget::Stdout => Box::new(|lines| {
                let mut stdout = std::io::stdout().lock();
                lines.iter().try_for_each(|line| stdout.write_all(line)).and_then(|()| stdout.flush())
            }),
            AuditTarget::File { path, max_bytes, max_backups } => {
                let mut file = RotatingFile::open(&path, max_bytes, max_backups)?;
                Box::new(move |lines| file.write_lines(lines))
            }
        };
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(QUEUE);
        std::thread::Builder::new().name("audit-log".into()).spawn(move || {
            let mut batch = Vec::with_capacity(MAX_BATCH);
            // Blocks for the first line; the others queued meanwhile go in the same write.
            while let Ok(first) = rx.recv() {
                batch.push(first);
                batch.extend(rx.try_iter().take(MAX_BATCH - 1));
                // An unwritable audit log must be visible to the operator, not fatal to
                // requests.
                if let Err(e) = out(&batch) {
                    eprintln!("audit log write failed: {e}");
                }
                let full = batch.len() == MAX_BATCH;
                batch.clear();
                if !full {
                    std::thread::sleep(GATHER);
                }
            }
        })?;
        Ok(Self { tx, dropped: Arc::new(AtomicU64::new(0)) })
    }

    /// Queues one event (serialized as one JSON line).
    pub fn record(&self, event: &impl serde::Serialize) {
        let Ok(mut line) = serde_json::to_vec(event) else { return };
        line.push(b'\n');
        if self.tx.try_send(line).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // Said once, then at every thousandth, so stderr is not flooded in turn.
            if dropped == 1 || dropped.is_multiple_of(1000) {
                eprintln!("audit log: {dropped} events dropped (the writer cannot keep up)");
            }
        }
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// An append-only file rotated by size: past `max_bytes` it becomes `<path>.1` (older ones
/// shift to `.2` … up to `max_backups`, the oldest removed) and a new one begins. Lines are
/// written whole; a line longer than the bound goes in whole, into a fresh file.
#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    file: File,
    size: u64,
    max_bytes: u64,
    max_backups: u32,
}

fn open_append(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path)
}

fn numbered(path: &Path, n: u32) -> PathBuf {
    let mut p = path.to_path_buf().into_os_string();
    p.push(format!(".{n}"));
    PathBuf::from(p)
}

impl RotatingFile {
    /// Opens `path` for appending (creating it, 0600); `max_bytes` 0 never rotates.
    pub fn open(path: &Path, max_bytes: u64, max_backups: u32) -> std::io::Result<Self> {
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        Ok(Self { path: path.to_path_buf(), file, size, max_bytes, max_backups })
    }

    /// The file written to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `line`, first rotating when it would take the file past the bound.
    pub fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.write_lines(std::slice::from_ref(&line))
    }

    /// Appends `lines` in order, each whole, rotating before a line that would take the file
    /// past the bound; the lines between rotations go in one write.
    pub fn write_lines(&mut self, lines: &[impl AsRef<[u8]>]) -> std::io::Result<()> {
        let mut pending: Vec<u8> = Vec::new();
        for line in lines.iter().map(AsRef::as_ref) {
            let size = self.size + pending.len() as u64;
            if self.max_bytes > 0 && size > 0 && size + line.len() as u64 > self.max_bytes {
                self.flush_pending(&mut pending)?;
                self.rotate()?;
            }
            pending.extend_from_slice(line);
        }
        self.flush_pending(&mut pending)
    }

    fn flush_pending(&mut self, pending: &mut Vec<u8>) -> std::io::Result<()> {
        if !pending.is_empty() {
            self.file.write_all(pending)?;
            self.size += pending.len() as u64;
            pending.clear();
        }
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        if self.max_backups == 0 {
            std::fs::remove_file(&self.path)?;
        } else {
            // The oldest goes; each other moves one up; the current becomes `.1`.
            match std::fs::remove_file(numbered(&self.path, self.max_backups)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            for n in (1..self.max_backups).rev() {
                match std::fs::rename(numbered(&self.path, n), numbered(&self.path, n + 1)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            std::fs::rename(&self.path, numbered(&self.path, 1))?;
        }
        self.file = open_append(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap_or_default()
    }

    /// A batch is written as its lines one by one would be: whole lines, rotating before
    /// the one that would pass the bound, a longer-than-bound line alone in a fresh file.
    #[test]
    fn a_batch_of_lines_rotates_exactly_as_the_lines_one_by_one() {
        let lines: Vec<Vec<u8>> =
            ["a\n", "bb\n", "ccc\n", "a line longer than twenty bytes\n", "dd\n", "eeee\n", "f\n"]
                .iter()
                .map(|l| l.as_bytes().to_vec())
                .collect();
        let (one, batch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut by_line = RotatingFile::open(&one.path().join("audit.log"), 8, 3).unwrap();
        for l in &lines {
            by_line.write_line(l).unwrap();
        }
        let mut batched = RotatingFile::open(&batch.path().join("audit.log"), 8, 3).unwrap();
        batched.write_lines(&lines[..4]).unwrap();
        batched.write_lines(&lines[4..]).unwrap();
        for name in ["audit.log", "audit.log.1", "audit.log.2", "audit.log.3"] {
            assert_eq!(read(&batch.path().join(name)), read(&one.path().join(name)), "{name}");
        }
        assert_eq!(read(&batch.path().join("audit.log")), "f\n");
        assert_eq!(read(&batch.path().join("audit.log.1")), "dd\neeee\n");
        assert_eq!(read(&batch.path().join("audit.log.2")), "a line longer than twenty bytes\n");
    }

    #[test]
    fn appends_across_opens_and_rotates_whole_lines_keeping_max_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut log = RotatingFile::open(&path, 20, 2).unwrap();
        log.write_line(b"first run\n").unwrap();
        drop(log);
        let mut log = RotatingFile::open(&path, 20, 2).unwrap();
        log.write_line(b"second\n").unwrap();
        assert_eq!(read(&path), "first run\nsecond\n", "appended, not truncated");
        log.write_line(b"third line\n").unwrap();
        assert_eq!(read(&numbered(&path, 1)), "first run\nsecond\n");
        assert_eq!(read(&path), "third line\n");
        log.write_line(b"fourth line\n").unwrap();
        log.write_line(b"fifth line!\n").unwrap();
        assert_eq!(read(&numbered(&path, 1)), "fourth line\n");
        assert_eq!(read(&numbered(&path, 2)), "third line\n");
        assert!(!numbered(&path, 3).exists(), "only max_backups files are kept");
        // a line longer than the bound still goes in whole, into a fresh file
        log.write_line(&[b'x'; 30]).unwrap();
        assert_eq!(std::fs::read(&path).unwrap().len(), 30);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn no_backups_means_the_file_starts_over_and_zero_size_never_rotates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let mut log = RotatingFile::open(&path, 10, 0).unwrap();
        log.write_line(b"12345678\n").unwrap();
        log.write_line(b"abc\n").unwrap();
        assert_eq!(read(&path), "abc\n");
        assert!(!numbered(&path, 1).exists());
        let path = dir.path().join("b.log");
        let mut log = RotatingFile::open(&path, 0, 3).unwrap();
        for _ in 0..100 {
            log.write_line(b"0123456789\n").unwrap();
        }
        assert_eq!(read(&path).len(), 1100);
    }

    #[test]
    fn events_are_written_as_json_lines_by_the_writer_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let flags = AuditFlags { audit_log_path: Some(path.clone()), audit_log_maxsize: 1, audit_log_maxbackup: 1 };
        let writer = flags.open().unwrap().unwrap();
        writer.record(&serde_json::json!({"decision": "granted", "n": 1}));
        writer.record(&serde_json::json!({"decision": "refused", "n": 2}));
        drop(writer);
        // The thread ends once every sender is gone; wait for its lines (bounded).
        let mut lines = Vec::new();
        for _ in 0..200 {
            lines = read(&path).lines().map(str::to_owned).collect::<Vec<_>>();
            if lines.len() == 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let decisions: Vec<serde_json::Value> = lines.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(decisions.len(), 2);
        assert_eq!((decisions[0]["decision"].as_str(), decisions[1]["n"].as_i64()), (Some("granted"), Some(2)));
        assert!(AuditFlags { audit_log_path: None, ..flags }.open().unwrap().is_none());
    }
}
