//! The parts' logs: `<data-dir>/logs/<part>.log`, appended across runs (a restart keeps the
//! previous run's lines — registry-auth's audit among them) and bounded in size: past
//! [`MAX_LOG_BYTES`] the file becomes `<part>.log.1` (replacing an older one) and a new
//! one begins, so a part keeps at most twice that on disk. Each part's stdout and stderr
//! come through pipes, whole lines at a time, so rotation never splits a line and never
//! loses one.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A log file is rotated past this size.
pub const MAX_LOG_BYTES: u64 = 32 * 1024 * 1024;
/// Longest line kept whole; a longer one is written in pieces of this size.
const MAX_LINE_BYTES: u64 = 1024 * 1024;

/// A part's log: the shared size-rotated file with one old file kept (`<part>.log.1`).
pub type RotatingLog = podpass_serve::RotatingFile;

/// Opens a part's log for appending (creating it, 0600), rotating at `max` bytes.
pub fn open(path: &Path, max: u64) -> std::io::Result<RotatingLog> {
    RotatingLog::open(path, max, 1)
}

/// Copies `from` into `log` line by line until end of file, on a thread of its own (the
/// part's pipes are blocking file descriptors).
pub fn pump(from: impl Read + Send + 'static, log: Arc<Mutex<RotatingLog>>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("podpass-up-log".into()).spawn(move || {
        let mut reader = BufReader::new(from);
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut reader).take(MAX_LINE_BYTES).read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let mut log = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if let Err(e) = log.write_line(&line) {
                        eprintln!("podpass up: writing {}: {e}", log.path().display());
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn appends_across_opens_and_rotates_whole_lines_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("part.log");
        let mut log = open(&path, 20).unwrap();
        log.write_line(b"first run\n").unwrap();
        drop(log);
        let mut log = open(&path, 20).unwrap();
        log.write_line(b"second\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "first run\nsecond\n", "appended, not truncated");
        log.write_line(b"third line\n").unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("part.log.1")).unwrap(), "first run\nsecond\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "third line\n");
        log.write_line(b"fourth line\n").unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("part.log.1")).unwrap(), "third line\n", "one old file");
        // a line longer than the bound still goes in whole, into a fresh file
        log.write_line(&[b'x'; 30]).unwrap();
        assert_eq!(std::fs::read(&path).unwrap().len(), 30);
    }

    #[test]
    fn pump_copies_every_line_until_the_writer_closes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.log");
        let log = Arc::new(Mutex::new(open(&path, MAX_LOG_BYTES).unwrap()));
        let data: &[u8] = b"a\nb\nno newline at the end";
        pump(data, log).unwrap().join().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a\nb\nno newline at the end");
    }
}
