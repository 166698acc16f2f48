//! The processes an exec stream started, found from the host, so a stream whose client
//! vanished leaves nothing running: containerd's stream server (1.6) does not kill an exec'd
//! process when its connection closes, and one that neither reads its input nor writes
//! (`sleep`) would run on. A container's processes are those whose cgroup names its ID; its
//! roots are those whose parent is outside it (the shim's children): its own first process
//! and one per exec. The exec's root is the new root that appears once its streams are open;
//! killing it kills what it started too (its descendants in the container).

use std::collections::HashSet;
use std::time::Duration;

/// A process, by PID and start time (so a reused PID is never taken for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Process {
    pid: i32,
    start: u64,
}

/// `/proc/<pid>/stat`'s parent and start time (fields 4 and 22).
fn stat(pid: i32) -> Option<(i32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields follow the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some((fields.get(1)?.parse().ok()?, fields.get(19)?.parse().ok()?))
}

fn in_container(pid: i32, container: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| c.lines().any(|l| l.contains(container)))
}

/// The container's processes: (process, parent).
fn members(container: &str) -> Vec<(Process, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| in_container(*pid, container))
        .filter_map(|pid| stat(pid).map(|(ppid, start)| (Process { pid, start }, ppid)))
        .collect()
}

/// The container's root processes (its first, and one per exec).
pub(super) fn roots(container: &str) -> HashSet<Process> {
    let all = members(container);
    let pids: HashSet<i32> = all.iter().map(|(p, _)| p.pid).collect();
    all.into_iter().filter(|(_, ppid)| !pids.contains(ppid)).map(|(p, _)| p).collect()
}

/// Waits (at most `limit`, and no longer once `done` is set) for a root that was not there
/// `before` and is not `claimed`; the newest such, claimed.
pub(super) fn new_root(
    container: &str,
    before: &HashSet<Process>,
    claimed: &std::sync::Mutex<HashSet<Process>>,
    done: &std::sync::atomic::AtomicBool,
    limit: Duration,
) -> Option<Process> {
    let deadline = std::time::Instant::now() + limit;
    // Quick at first (the process usually appears within milliseconds), then sparing: a
    // loaded runtime may take seconds, and each look reads every process's cgroup.
    let mut pause = Duration::from_millis(10);
    loop {
        let mut claimed = claimed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let fresh = roots(container)
            .into_iter()
            .filter(|p| !before.contains(p) && !claimed.contains(p))
            .max_by_key(|p| p.start);
        if let Some(p) = fresh {
            claimed.insert(p);
            return Some(p);
        }
        drop(claimed);
        if std::time::Instant::now() >= deadline || done.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// Kills `root` and its descendants in the container, if `root` is still that process.
pub(super) fn kill_tree(container: &str, root: Process) {
    let all = members(container);
    if !all.iter().any(|(p, _)| *p == root) {
        return;
    }
    let mut doomed = vec![root];
    let mut i = 0;
    while i < doomed.len() {
        let parent = doomed[i].pid;
        doomed.extend(all.iter().filter(|(_, ppid)| *ppid == parent).map(|(p, _)| *p));
        i += 1;
    }
    for p in doomed {
        // Checked again just before: a PID that has since been reused is left alone.
        if stat(p.pid).is_some_and(|(_, start)| start == p.start)
            && let Some(pid) = rustix::process::Pid::from_raw(p.pid)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_known_by_its_parent_and_start_time() {
        let me = i32::try_from(std::process::id()).unwrap_or_default();
        let (ppid, start) = stat(me).unwrap_or_default();
        assert!(ppid > 0 && start > 0);
        assert_eq!(stat(-1), None);
        // Nothing is in a container of no such ID.
        assert!(roots("0000000000000000000000000000000000000000000000000000000000000000").is_empty());
    }
}
