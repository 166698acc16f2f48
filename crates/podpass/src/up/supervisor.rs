//! The children of `podpass up`: each part a process of its own (the same command a user
//! would run by hand), its stdout and stderr appended to `<data-dir>/logs/<part>.log`, stopped in
//! reverse order with SIGTERM, then SIGKILL after a grace period.
//!
//! Once the cluster is up, a part that exits is started again by itself, as a process
//! supervisor does: after a back-off that doubles from 1 s to 30 s with each exit in the
//! last minute, giving up (and stopping everything) only when a part has exited
//! [`MAX_RECENT_EXITS`] times within [`RECENT`].

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use tokio::process::{Child, Command};

use super::logs::{MAX_LOG_BYTES, open, pump};
use super::part::Restart;

/// How long a part may take to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// The window in which exits count towards giving up and towards the back-off.
pub const RECENT: Duration = Duration::from_secs(60);
/// Exits within [`RECENT`] after which a part is given up on.
pub const MAX_RECENT_EXITS: usize = 5;
/// The first restart's delay, doubled for each further recent exit.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest delay before a restart.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// One running part.
pub struct Part {
    /// What the checklist and errors call it (`control plane`, `node node-1`).
    pub name: String,
    /// Its log file.
    pub log: PathBuf,
    program: PathBuf,
    args: Vec<String>,
    child: Child,
    /// The threads copying its stdout and stderr into the log.
    pumps: Vec<std::thread::JoinHandle<()>>,
    /// What to do when it exits.
    restart: Restart,
    /// When it exited lately (restarts only).
    exits: Vec<std::time::Instant>,
    /// Exited, to be started again at this instant.
    restart_at: Option<std::time::Instant>,
}

/// What [`Supervisor::supervise`] saw happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Supervision {
    /// A part exited and will be started again after `delay`.
    Restarting { report: String, delay: Duration },
    /// A part was started again.
    Restarted { name: String },
    /// A part exited too often: the cluster cannot go on.
    GaveUp { report: String },
}

/// The delay before restarting a part that exited `recent` times within [`RECENT`]:
/// `first`, doubled for each further exit, at most `max`.
pub fn backoff(recent: usize, first: Duration, max: Duration) -> Duration {
    let doublings = u32::try_from(recent.saturating_sub(1)).unwrap_or(u32::MAX).min(16);
    first.saturating_mul(1 << doublings).min(max)
}

/// The parts started so far, stopped together (in reverse order) by [`Supervisor::stop`]
/// or, failing that, killed when dropped.
pub struct Supervisor {
    parts: Vec<Part>,
    setpriv: Option<PathBuf>,
    /// [`FIRST_BACKOFF`] and [`MAX_BACKOFF`] (shorter in tests).
    backoff: (Duration, Duration),
}

impl Supervisor {
    /// No parts yet; `setpriv` (util-linux), when given, ties each part's life to this
    /// process's.
    pub fn new(setpriv: Option<PathBuf>) -> Supervisor {
        Supervisor { parts: Vec::new(), setpriv, backoff: (FIRST_BACKOFF, MAX_BACKOFF) }
    }

    /// Starts `program args` as the part `name`, appending its output to `log` (rotated by
    /// size, [`logs`](super::logs)) after a line marking this run's start; `restart` says
    /// what happens when it exits once the cluster is up.
    pub fn spawn_with(
        &mut self,
        name: &str,
        program: &Path,
        args: &[String],
        log: PathBuf,
        restart: Restart,
    ) -> Result<()> {
        let (child, pumps) = self.start(name, program, args, &log)?;
        self.parts.push(Part {
            name: name.to_owned(),
            log,
            program: program.to_owned(),
            args: args.to_vec(),
            child,
            pumps,
            restart,
            exits: Vec::new(),
            restart_at: None,
        });
        Ok(())
    }

    fn start(
        &self,
        name: &str,
        program: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<(Child, Vec<std::thread::JoinHandle<()>>)> {
        let mut file = open(log, MAX_LOG_BYTES).with_context(|| format!("opening {}", log.display()))?;
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
        let mut child = command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        let mut pumps = Vec::new();
        let pipes = [
            child.stdout.take().and_then(|p| p.into_owned_fd().ok()),
            child.stderr.take().and_then(|p| p.into_owned_fd().ok()),
        ];
        for fd in pipes.into_iter().flatten() {
            pumps.push(pump(std::fs::File::from(fd), Arc::clone(&file)).context("starting a log thread")?);
        }
        Ok((child, pumps))
    }

    /// Keeps the parts running: resolves at each restart scheduled or done, or when a part
    /// is given up on (the caller then stops everything).
    pub async fn supervise(&mut self) -> Supervision {
        loop {
            let now = std::time::Instant::now();
            for i in 0..self.parts.len() {
                let due = self.parts[i].restart_at.is_some_and(|at| at <= now);
                if due {
                    let (name, program, args, log) = {
                        let p = &self.parts[i];
                        (p.name.clone(), p.program.clone(), p.args.clone(), p.log.clone())
                    };
                    match self.start(&name, &program, &args, &log) {
                        Ok((child, pumps)) => {
                            let part = &mut self.parts[i];
                            part.child = child;
                            part.pumps = pumps;
                            part.restart_at = None;
                            return Supervision::Restarted { name };
                        }
                        Err(e) => return Supervision::GaveUp { report: format!("restarting {name}: {e:#}") },
                    }
                }
                let part = &mut self.parts[i];
                if part.restart_at.is_some() {
                    continue;
                }
                if let Ok(Some(status)) = part.child.try_wait() {
                    let report = exit_report(part, status);
                    if part.restart == Restart::Never {
                        return Supervision::GaveUp { report: format!("{report}\n{} is not restarted", part.name) };
                    }
                    part.exits.retain(|t| now.duration_since(*t) < RECENT);
                    part.exits.push(now);
                    if part.exits.len() >= MAX_RECENT_EXITS {
                        return Supervision::GaveUp {
                            report: format!(
                                "{report}\n{} exited {} times within {} s; giving up",
                                part.name,
                                part.exits.len(),
                                RECENT.as_secs()
                            ),
                        };
                    }
                    let delay = backoff(part.exits.len(), self.backoff.0, self.backoff.1);
                    part.restart_at = Some(now + delay);
                    return Supervision::Restarting { report, delay };
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether the part `name` was started and has not exited for good.
    pub fn runs(&mut self, name: &str) -> bool {
        self.parts
            .iter_mut()
            .any(|p| p.name == name && (p.restart_at.is_some() || matches!(p.child.try_wait(), Ok(None))))
    }

    /// The first part that has exited, with its status and the last lines of its log.
    pub fn exited(&mut self) -> Option<String> {
        for part in &mut self.parts {
            if part.restart_at.is_some() {
                continue;
            }
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
        while let Some(part) = self.parts.pop() {
            killed.extend(stop_part(part).await);
        }
        killed
    }

    /// Stops the part `name` alone (as [`Supervisor::stop`] does); its name when it had to
    /// be killed.
    pub async fn stop_one(&mut self, name: &str) -> Option<String> {
        let i = self.parts.iter().position(|p| p.name == name)?;
        stop_part(self.parts.remove(i)).await
    }
}

async fn stop_part(mut part: Part) -> Option<String> {
    if let Ok(Some(_)) = part.child.try_wait() {
        return None;
    }
    if let Some(pid) = part.child.id().and_then(|id| rustix::process::Pid::from_raw(id.cast_signed())) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    if tokio::time::timeout(STOP_GRACE, part.child.wait()).await.is_err() {
        let _ = part.child.kill().await;
        return Some(part.name.clone());
    }
    None
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_from_one_second_to_thirty() {
        let delays: Vec<u64> = (1..=7).map(|n| backoff(n, FIRST_BACKOFF, MAX_BACKOFF).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(backoff(0, FIRST_BACKOFF, MAX_BACKOFF), FIRST_BACKOFF);
        assert_eq!(backoff(usize::MAX, FIRST_BACKOFF, MAX_BACKOFF), MAX_BACKOFF);
    }

    /// A real child that exits is started again, and one that keeps exiting is given up on.
    #[tokio::test]
    async fn an_exited_part_is_started_again_until_it_exits_too_often() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut s = Supervisor::new(None);
        s.backoff = (Duration::from_millis(10), Duration::from_millis(50));
        let args = ["-c".to_owned(), "echo ran; exit 3".to_owned()];
        let log = dir.path().join("flaky.log");
        s.spawn_with("flaky", Path::new("/bin/sh"), &args, log, Restart::Always).unwrap_or_else(|e| panic!("{e}"));
        let mut restarted = 0;
        let report = loop {
            match s.supervise().await {
                Supervision::Restarting { report, delay } => {
                    assert!(report.contains("flaky exited"), "{report}");
                    assert_eq!(delay, backoff(restarted + 1, s.backoff.0, s.backoff.1));
                }
                Supervision::Restarted { name } => {
                    assert_eq!(name, "flaky");
                    restarted += 1;
                }
                Supervision::GaveUp { report } => break report,
            }
        };
        assert_eq!(restarted, MAX_RECENT_EXITS - 1);
        assert!(report.contains("exited 5 times within 60 s; giving up"), "{report}");
        let log = std::fs::read_to_string(dir.path().join("flaky.log")).unwrap_or_default();
        assert_eq!(log.matches("--- podpass up: flaky started").count(), MAX_RECENT_EXITS, "{log}");
    }

    /// A part declared never to restart stops the cluster at its first exit; until then
    /// it runs.
    #[tokio::test]
    async fn a_part_that_is_never_restarted_is_given_up_on_at_once() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut s = Supervisor::new(None);
        let args = ["-c".to_owned(), "exec sleep 60".to_owned()];
        let log = dir.path().join("once.log");
        s.spawn_with("once", Path::new("/bin/sh"), &args, log, Restart::Never).unwrap_or_else(|e| panic!("{e}"));
        assert!(s.runs("once") && !s.runs("other"));
        let stop =
            s.parts.first().and_then(|p| p.child.id()).and_then(|id| rustix::process::Pid::from_raw(id.cast_signed()));
        if let Some(pid) = stop {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        match s.supervise().await {
            Supervision::GaveUp { report } => assert!(report.ends_with("once is not restarted"), "{report}"),
            other => panic!("{other:?}"),
        }
        assert!(!s.runs("once"));
    }
}
