//! Finding and killing every process a job started: its process group, and any descendant that
//! left the group (`setsid`, double forks) but still carries the job's environment marker. The
//! executor is a child subreaper, so orphans stay its children and are reaped.

use std::time::Duration;

use rustix::process::{Pid, Signal};

/// The environment variable every job and its descendants carry.
pub const MARKER_VAR: &str = "GLOVEBOX_JOB";

/// `GLOVEBOX_JOB=<id>`, as it appears in `/proc/<pid>/environ`.
pub fn marker(job_id: &str) -> String {
    format!("{MARKER_VAR}={job_id}")
}

/// Pids (other than this process) whose environment holds `marker`.
pub fn marked_pids(marker: &str) -> Vec<i32> {
    let own = rustix::process::getpid().as_raw_nonzero().get();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| *pid != own)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| {
                    env.split(|b| *b == 0)
                        .any(|entry| entry == marker.as_bytes())
                })
                .unwrap_or(false)
        })
        .filter(|pid| !is_zombie(*pid))
        .collect()
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

fn signal_all(pgid: i32, marker: &str, signal: Signal) -> usize {
    if let Some(pgid) = Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(pgid, signal);
    }
    let marked = marked_pids(marker);
    for pid in &marked {
        if let Some(pid) = Pid::from_raw(*pid) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
    marked.len()
}

/// Sends TERM to the job's group and marked descendants.
pub fn terminate(pgid: i32, marker: &str) {
    signal_all(pgid, marker, Signal::TERM);
}

/// Kills the job's group and every marked descendant, repeating until none is left (a process
/// may fork while it is being killed). Returns whether none is left.
pub fn kill_all(pgid: i32, marker: &str) -> bool {
    for _ in 0..50 {
        if signal_all(pgid, marker, Signal::KILL) == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    marked_pids(marker).is_empty()
}
