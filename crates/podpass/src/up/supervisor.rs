//! The children of `podpass up`: each part a process of its own (the same command a user
//! would run by hand), its stdout and stderr appended to `<data-dir>/logs/<part>.log`, stopped in
//! reverse order with SIGTERM, then SIGKILL after a grace period.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use tokio::process::{Child, Command};

use super::logs::{MAX_LOG_BYTES, open, pump};

/// How long a part may take to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// One running part.
pub struct Part {
    /// What the checklist and errors call it (`control plane`, `node node-1`).
    pub name: String,
    /// Its log file.
    pub log: PathBuf,
    child: Child,
    /// The threads copying its stdout and stderr into the log.
    pumps: Vec<std::thread::JoinHandle<()>>,
}

/// The parts started so far, stopped together (in reverse order) by [`Supervisor::stop`]
/// or, failing that, killed when dropped.
pub struct Supervisor {
    parts: Vec<Part>,
    setpriv: Option<PathBuf>,
}

impl Supervisor {
    /// No parts yet; `setpriv` (util-linux), when given, ties each part's life to this
    /// process's.
    pub fn new(setpriv: Option<PathBuf>) -> Supervisor {
        Supervisor { parts: Vec::new(), setpriv }
    }

    /// Starts `program args` as the part `name`, appending its output to `log` (rotated by
    /// size, [`logs`](super::logs)) after a line marking this run's start.
    pub fn spawn(&mut self, name: &str, program: &Path, args: &[String], log: PathBuf) -> Result<()> {
        let mut file = open(&log, MAX_LOG_BYTES).with_context(|| format!("opening {}", log.display()))?;
        let now = jiff::Timestamp::now();
        file.write_line(format!("--- podpass up: {name} started {now} ---\n").as_bytes())
            .with_context(|| format!("writing {}", log.display()))?;
        let file = Arc::new(Mutex::new(file));
        // A supervisor killed outright (SIGKILL, OOM) cannot stop its children: util-linux's
        // setpriv asks the kernel to send them SIGTERM when it dies (PR_SET_PDEATHSIG), and
        // execs the part in place (the pid held is the part's).
        let mut command = match &self.setpriv {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "TERM", "--"]).arg(program);
                c
            }
            None => Command::new(program),
        };
        let child = command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        let mut child = child;
        let mut pumps = Vec::new();
        let pipes = [
            child.stdout.take().and_then(|p| p.into_owned_fd().ok()),
            child.stderr.take().and_then(|p| p.into_owned_fd().ok()),
        ];
        for fd in pipes.into_iter().flatten() {
            pumps.push(pump(std::fs::File::from(fd), Arc::clone(&file)).context("starting a log thread")?);
        }
        self.parts.push(Part { name: name.to_owned(), log, child, pumps });
        Ok(())
    }

    /// The first part that has exited, with its status and the last lines of its log.
    pub fn exited(&mut self) -> Option<String> {
        for part in &mut self.parts {
            if let Ok(Some(status)) = part.child.try_wait() {
                return Some(exit_report(part, status));
            }
        }
        None
    }

    /// Resolves when any part exits, with [`Supervisor::exited`]'s report.
    pub async fn any_exit(&mut self) -> String {
        loop {
            if let Some(report) = self.exited() {
                return report;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops every part, the last started first: SIGTERM, then SIGKILL after the grace
    /// period. Returns the parts that had to be killed.
    pub async fn stop(&mut self) -> Vec<String> {
        let mut killed = Vec::new();
        while let Some(mut part) = self.parts.pop() {
            if let Ok(Some(_)) = part.child.try_wait() {
                continue;
            }
            if let Some(pid) = part.child.id().and_then(|id| rustix::process::Pid::from_raw(id.cast_signed())) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            if tokio::time::timeout(STOP_GRACE, part.child.wait()).await.is_err() {
                let _ = part.child.kill().await;
                killed.push(part.name.clone());
            }
        }
        killed
    }
}

/// `<part> exited (<status>); last lines of <log>: …`.
fn exit_report(part: &Part, status: ExitStatus) -> String {
    // Its last lines may still be in the pipes: let the log threads reach the end (bounded,
    // since a grandchild may hold a pipe open).
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    while part.pumps.iter().any(|p| !p.is_finished()) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let tail = last_lines(&part.log, 5);
    format!("{} exited ({status}); its log {}:\n{tail}", part.name, part.log.display())
}

/// The last `n` lines of a log (at most 64 KiB read), indented.
pub fn last_lines(path: &Path, n: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
        let mut bytes = Vec::new();
        let _ = f.take(64 * 1024).read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].iter().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n")
}
