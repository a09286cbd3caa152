//! Finding and killing every process a job started: its process group, and any descendant that
//! left the group (`setsid`, double forks) but still carries the job's environment marker. The
//! executor is a child subreaper, so orphans stay its children and are reaped.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use glovebox_sandbox::procs::parent_and_zombie;
use rustix::process::{Pid, Signal};

/// The environment variable every job and its descendants carry.
pub const MARKER_VAR: &str = "GLOVEBOX_JOB";

/// `GLOVEBOX_JOB=<id>`, as it appears in `/proc/<pid>/environ`.
pub fn marker(job_id: &str) -> String {
    format!("{MARKER_VAR}={job_id}")
}

/// Living descendants of this process whose environment holds `marker`. Every process a job
/// starts stays a descendant (the executor is a child subreaper, so orphans are reparented to
/// it), so only descendants' environments are read, not those of every process on the machine.
pub fn marked_pids(marker: &str) -> Vec<i32> {
    let own = rustix::process::getpid().as_raw_nonzero().get();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    let mut living = HashSet::new();
    for pid in entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
    {
        if let Some((ppid, zombie)) = parent_and_zombie(pid) {
            children.entry(ppid).or_default().push(pid);
            if !zombie {
                living.insert(pid);
            }
        }
    }
    // A process whose parent died during the scan is listed under a pid the scan never saw; it
    // may be a job's child on its way to being reparented here, so its subtree is searched too.
    let seen: HashSet<i32> = children.values().flatten().copied().collect();
    let mut stack: Vec<i32> = children
        .keys()
        .copied()
        .filter(|ppid| *ppid != 0 && !seen.contains(ppid))
        .collect();
    stack.push(own);
    let mut marked = Vec::new();
    while let Some(parent) = stack.pop() {
        for &pid in children.get(&parent).into_iter().flatten() {
            stack.push(pid);
            if pid != own && living.contains(&pid) && carries(pid, marker) {
                marked.push(pid);
            }
        }
    }
    marked
}

fn carries(pid: i32, marker: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| {
            env.split(|b| *b == 0)
                .any(|entry| entry == marker.as_bytes())
        })
        .unwrap_or(false)
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::os::unix::process::CommandExt;

    use super::*;

    #[test]
    fn marked_descendants_are_found_and_killed() {
        let m = marker("job-tree-test");
        assert!(marked_pids(&m).is_empty());
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 30 & sleep 30"])
            .env(MARKER_VAR, "job-tree-test")
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id() as i32;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while marked_pids(&m).len() < 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}",
                marked_pids(&m)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(marked_pids(&marker("job-other")).is_empty());
        // The shell is this test's child: it stays a zombie until waited for, and is not counted.
        assert!(kill_all(pgid, &m));
        child.wait().unwrap();
    }
}
