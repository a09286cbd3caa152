//! The process table as `/proc` shows it: who is whose parent, and who is still alive. What a
//! shim walks on a kernel without Landlock scopes, and what an executor searches for a job's
//! marked processes.

use std::collections::HashMap;

/// Living descendants of `ancestor` (a snapshot: processes may fork while it is taken).
pub fn descendants(ancestor: i32) -> Vec<i32> {
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
}
