//! The process table as `/proc` shows it: who is whose parent, and who is still alive. What a
//! shim samples its job's caps over and, on a kernel without Landlock scopes, signals; what an
//! executor searches for a job's marked processes.

use std::collections::HashMap;

/// Living descendants of `ancestor` (a snapshot: processes may fork while it is taken). Found
/// through each process's own list of its children (`/proc/<pid>/task/<tid>/children`), which
/// reads only the family: a shim samples its job ten times a second for its whole life (a pack
/// server's, as long as glovebox runs), and a walk of every process of the machine made that
/// its main cost. On a kernel without those lists, the whole process table is walked.
pub fn descendants(ancestor: i32) -> Vec<i32> {
    static LISTS_CHILDREN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let lists_children =
        *LISTS_CHILDREN.get_or_init(|| std::path::Path::new("/proc/thread-self/children").exists());
    if lists_children {
        descendants_by_lists(ancestor)
    } else {
        descendants_by_walk(ancestor)
    }
}

/// [`descendants`] through the children lists of `ancestor`'s family.
fn descendants_by_lists(ancestor: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::from([ancestor]);
    let mut stack = vec![ancestor];
    while let Some(parent) = stack.pop() {
        for pid in children_of(parent) {
            // A zombie holds no memory and no children; a pid seen twice was reused mid-walk.
            let alive = matches!(parent_and_zombie(pid), Some((_, false)));
            if alive && seen.insert(pid) {
                out.push(pid);
                stack.push(pid);
            }
        }
    }
    out
}

/// The children of every thread of `pid` (none once it is gone).
fn children_of(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    out
}

/// [`descendants`] by a walk of the whole process table.
fn descendants_by_walk(ancestor: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for pid in entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
    {
        if let Some((ppid, zombie)) = parent_and_zombie(pid)
            && !zombie
        {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut stack = vec![ancestor];
    while let Some(parent) = stack.pop() {
        for &pid in children.get(&parent).into_iter().flatten() {
            out.push(pid);
            stack.push(pid);
        }
    }
    out
}

/// The parent pid and whether the process is a zombie, from `/proc/<pid>/stat` (the fields after
/// the command name, which may itself hold spaces and parentheses).
pub fn parent_and_zombie(pid: i32) -> Option<(i32, bool)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let zombie = fields.next()?.starts_with('Z');
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, zombie))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_child_is_a_descendant_with_this_process_as_its_parent() {
        let mut child = std::process::Command::new("/bin/sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let own = std::process::id() as i32;
        assert!(descendants(own).contains(&pid));
        assert_eq!(parent_and_zombie(pid), Some((own, false)));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!descendants(own).contains(&pid));
    }

    /// The children lists and the walk of the whole table agree on a family of three
    /// generations, a child of another thread's making included, and both leave out a zombie.
    #[test]
    fn the_children_lists_find_the_family_the_walk_finds() {
        let own = std::process::id() as i32;
        // A shell whose child sleeps: a grandchild of this process.
        let mut shell = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .unwrap();
        // A child made by another thread of this process.
        let mut other = std::thread::spawn(|| {
            std::process::Command::new("/bin/sleep")
                .arg("30")
                .spawn()
                .unwrap()
        })
        .join()
        .unwrap();
        // A zombie: exited, not yet reaped.
        let mut zombie = std::process::Command::new("/bin/true").spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let (by_lists, by_walk) = loop {
            // Seen a zombie before the lists are taken, so they are taken of a zombie.
            let exited = matches!(parent_and_zombie(zombie.id() as i32), Some((_, true)));
            let mut by_lists = descendants_by_lists(own);
            let mut by_walk = descendants_by_walk(own);
            by_lists.sort_unstable();
            by_walk.sort_unstable();
            let grandchild = by_walk
                .iter()
                .any(|p| parent_and_zombie(*p).map(|(pp, _)| pp) == Some(shell.id() as i32));
            if (grandchild && exited && by_lists == by_walk) || std::time::Instant::now() > deadline
            {
                break (by_lists, by_walk);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert_eq!(by_lists, by_walk);
        assert!(by_lists.contains(&(shell.id() as i32)), "{by_lists:?}");
        assert!(by_lists.contains(&(other.id() as i32)), "{by_lists:?}");
        assert!(!by_lists.contains(&(zombie.id() as i32)), "{by_lists:?}");
        assert!(
            by_lists.len() >= 3,
            "the shell's own child is found too: {by_lists:?}"
        );
        let shells_own = descendants_by_lists(shell.id() as i32);
        for pid in shells_own
            .into_iter()
            .chain([shell.id() as i32, other.id() as i32])
        {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(pid).unwrap(),
                rustix::process::Signal::KILL,
            );
        }
        for child in [&mut shell, &mut other, &mut zombie] {
            child.wait().unwrap();
        }
    }
}
