//! A contained program's caps: how many processes it may have, how much memory and CPU time it
//! may use, and how much temporary space it may fill. The kernel holds what it can per process
//! (`RLIMIT_NPROC` — per job where the job has its own user namespace, `RLIMIT_DATA`,
//! `RLIMIT_CPU`, and the private `/tmp`'s tmpfs size); the shim's watcher ([`Watcher`]) holds
//! the job as a whole, sampling its processes in `/proc`, and stops a job over a cap, saying
//! which in its report ([`Hit`]), which the executor puts in the job's status.
//!
//! [`over`] (usage against caps) is pure; [`sample`] reads `/proc`.

use std::path::{Path, PathBuf};

/// The caps of one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub processes: u32,
    pub memory_bytes: u64,
    pub cpu_seconds: u64,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            processes: 512,
            memory_bytes: 4 << 30,
            cpu_seconds: 3600,
        }
    }
}

/// What a job uses at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub processes: u32,
    /// Memory only its processes hold (anonymous resident pages), all of them together.
    pub memory_bytes: u64,
    /// CPU time of all its processes, living and ended.
    pub cpu_ticks: u64,
    /// Bytes in its temporary space.
    pub tmp_bytes: u64,
}

/// Which cap a job reached, and the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hit {
    Processes(u32),
    Memory(u64),
    Cpu(u64),
    Tmp(u64),
}

impl Hit {
    pub fn name(self) -> &'static str {
        match self {
            Hit::Processes(_) => "processes",
            Hit::Memory(_) => "memory",
            Hit::Cpu(_) => "cpu",
            Hit::Tmp(_) => "tmp",
        }
    }

    pub fn cap(self) -> u64 {
        match self {
            Hit::Processes(n) => u64::from(n),
            Hit::Memory(n) | Hit::Cpu(n) | Hit::Tmp(n) => n,
        }
    }

    /// The report line: `<name> <cap>`.
    pub fn line(self) -> String {
        format!("{} {}", self.name(), self.cap())
    }

    /// Reads a report line back.
    pub fn parse(line: &str) -> Option<Hit> {
        let (name, cap) = line.trim().split_once(' ')?;
        let cap: u64 = cap.parse().ok()?;
        Some(match name {
            "processes" => Hit::Processes(u32::try_from(cap).ok()?),
            "memory" => Hit::Memory(cap),
            "cpu" => Hit::Cpu(cap),
            "tmp" => Hit::Tmp(cap),
            _ => return None,
        })
    }

    /// What the job's output is told.
    pub fn message(self) -> String {
        match self {
            Hit::Processes(n) => format!("the job reached its cap of {n} processes"),
            Hit::Memory(n) => format!("the job reached its cap of {} MiB of memory", n >> 20),
            Hit::Cpu(n) => format!("the job reached its cap of {n} s of CPU time"),
            Hit::Tmp(n) => format!(
                "the job reached its cap of {} MiB of temporary space",
                n >> 20
            ),
        }
    }
}

/// The first cap `usage` is over (temporary space counts only when `tmp_cap` is given, where no
/// tmpfs holds it).
pub fn over(
    usage: &Usage,
    caps: &Caps,
    ticks_per_second: u64,
    tmp_cap: Option<u64>,
) -> Option<Hit> {
    if usage.processes > caps.processes {
        return Some(Hit::Processes(caps.processes));
    }
    if usage.memory_bytes > caps.memory_bytes {
        return Some(Hit::Memory(caps.memory_bytes));
    }
    if usage.cpu_ticks > caps.cpu_seconds.saturating_mul(ticks_per_second.max(1)) {
        return Some(Hit::Cpu(caps.cpu_seconds));
    }
    match tmp_cap {
        Some(cap) if usage.tmp_bytes > cap => Some(Hit::Tmp(cap)),
        _ => None,
    }
}

/// Samples the job of shim `shim`: its descendants' count, resident memory and CPU time (each
/// living process's own and that of the children it reaped, plus what the shim itself reaped),
/// and the bytes under `tmp` if given.
pub fn sample(shim: i32, tmp: Option<&Path>) -> Usage {
    let page = rustix::param::page_size() as u64;
    let mut usage = Usage::default();
    for pid in crate::procs::descendants(shim) {
        usage.processes += 1;
        usage.memory_bytes += anonymous_pages(pid) * page;
        usage.cpu_ticks += cpu_ticks(pid);
    }
    usage.cpu_ticks += reaped_ticks(shim);
    if let Some(tmp) = tmp {
        usage.tmp_bytes = bytes_under(tmp);
    }
    usage
}

/// The pages of `pid` that only it holds in memory (resident less file-backed and shared, from
/// `/proc/<pid>/statm`): what a job's processes cost the machine, without counting the libraries
/// they share once per process.
fn anonymous_pages(pid: i32) -> u64 {
    let Ok(statm) = std::fs::read_to_string(format!("/proc/{pid}/statm")) else {
        return 0;
    };
    let mut fields = statm
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse::<u64>().unwrap_or(0));
    let (resident, shared) = (fields.next().unwrap_or(0), fields.next().unwrap_or(0));
    resident.saturating_sub(shared)
}

/// utime + stime + cutime + cstime of `pid` (fields 14 to 17 of `/proc/<pid>/stat`).
fn cpu_ticks(pid: i32) -> u64 {
    stat_sum(pid, 14, 4)
}

/// The CPU time of the children the shim itself reaped (its cutime and cstime, fields 16, 17).
fn reaped_ticks(shim: i32) -> u64 {
    stat_sum(shim, 16, 2)
}

/// The sum of `count` numeric fields of `/proc/<pid>/stat` from field `first` (numbered from 1
/// as in proc(5); read after the command name, which may hold spaces and parentheses).
fn stat_sum(pid: i32, first: usize, count: usize) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    // What follows the name starts at field 3 (the state).
    rest.split_whitespace()
        .skip(first - 3)
        .take(count)
        .filter_map(|f| f.parse::<u64>().ok())
        .sum()
}

/// Bytes of the files under `dir` (allocated blocks, so sparse files count what they hold), not
/// following links; bounded to a million entries.
fn bytes_under(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    let mut stack: Vec<PathBuf> = vec![dir.to_owned()];
    let mut seen = 0usize;
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > 1_000_000 {
                return total;
            }
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            total += meta.blocks() * 512;
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`: 100 on Linux for every architecture).
pub const TICKS_PER_SECOND: u64 = 100;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const CAPS: Caps = Caps {
        processes: 10,
        memory_bytes: 1000,
        cpu_seconds: 2,
    };

    #[test]
    fn each_cap_is_told_and_usage_at_the_cap_is_within_it() {
        let at = Usage {
            processes: 10,
            memory_bytes: 1000,
            cpu_ticks: 200,
            tmp_bytes: 50,
        };
        assert_eq!(over(&at, &CAPS, 100, Some(50)), None);
        let over_by_one = |f: fn(&mut Usage)| {
            let mut u = at;
            f(&mut u);
            over(&u, &CAPS, 100, Some(50))
        };
        assert_eq!(over_by_one(|u| u.processes += 1), Some(Hit::Processes(10)));
        assert_eq!(
            over_by_one(|u| u.memory_bytes += 1),
            Some(Hit::Memory(1000))
        );
        assert_eq!(over_by_one(|u| u.cpu_ticks += 1), Some(Hit::Cpu(2)));
        assert_eq!(over_by_one(|u| u.tmp_bytes += 1), Some(Hit::Tmp(50)));
        // Where a tmpfs holds the temporary space, the watcher does not.
        let mut u = at;
        u.tmp_bytes = u64::MAX;
        assert_eq!(over(&u, &CAPS, 100, None), None);
    }

    #[test]
    fn a_report_line_reads_back_and_nothing_else_does() {
        for hit in [
            Hit::Processes(64),
            Hit::Memory(64 << 20),
            Hit::Cpu(3),
            Hit::Tmp(8 << 20),
        ] {
            assert_eq!(Hit::parse(&hit.line()), Some(hit));
        }
        for bad in [
            "",
            "processes",
            "processes x",
            "disk 5",
            "processes 99999999999",
        ] {
            assert_eq!(Hit::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_sample_counts_a_childs_processes_memory_and_time() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let own = std::process::id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let usage = loop {
            let usage = sample(own, None);
            if usage.processes >= 3 || std::time::Instant::now() > deadline {
                break usage;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let group = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::kill_process_group(group, rustix::process::Signal::KILL).unwrap();
        child.wait().unwrap();
        assert!(usage.processes >= 3, "{usage:?}");
        assert!(usage.memory_bytes > 0, "{usage:?}");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![1u8; 64 * 1024]).unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/b"), vec![1u8; 64 * 1024]).unwrap();
        assert!(sample(own, Some(dir.path())).tmp_bytes >= 128 * 1024);
    }
}
