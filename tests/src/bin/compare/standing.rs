//! What glovebox costs when it is not serving: its start, from `glovebox up` to a served call, and
//! its processes at rest (memory, and CPU per hour idle), each beside the MCP filesystem server
//! started and driven the same way (raw JSON-RPC lines over its stdio: the client's own start
//! would weigh more than the server's).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use glovebox_e2e::{Glovebox, Options, expect_ok};
use serde_json::{Value, json};

/// A reference server spoken to directly: newline-delimited JSON-RPC over its stdio.
pub struct Direct {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Direct {
    /// Starts `command` and completes the MCP handshake.
    pub fn start(command: &[String]) -> Direct {
        let mut child = Command::new(&command[0])
            .args(&command[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut direct = Direct {
            child,
            stdin,
            stdout,
            next_id: 0,
        };
        direct.ask(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "glovebox-compare", "version": "1"}}),
        );
        direct.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        direct
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn ask(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "the server left"
            );
            let mut reply: Value = serde_json::from_str(&line).unwrap();
            if reply["id"] == id {
                assert!(reply.get("error").is_none(), "{reply}");
                return reply["result"].take();
            }
        }
    }

    /// Calls a tool and returns its result, failing on an error result.
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let result = self.ask("tools/call", json!({"name": tool, "arguments": arguments}));
        assert_ne!(result["isError"], true, "{result}");
        result
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Direct {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Milliseconds from starting glovebox (first run: its state made) to a served `file_list`
/// through the broker, and from starting the filesystem server to a served `list_directory`,
/// `runs` times each, alternating.
pub fn cold_starts(fs_server: &Path, runs: usize) -> (Vec<f64>, Vec<f64>) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (mut fs, mut gb) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let empty = tempfile::tempdir().unwrap();
        let dir = empty.path().display().to_string();
        let started = Instant::now();
        let mut direct = Direct::start(&[fs_server.display().to_string(), dir.clone()]);
        direct.call("list_directory", json!({ "path": dir }));
        fs.push(started.elapsed().as_secs_f64() * 1000.0);
        drop(direct);

        let started = Instant::now();
        let g = Glovebox::start_with(Options::default());
        runtime.block_on(async {
            let mut agent = g.connect("agent").await;
            let listed = agent
                .invoke("first", "file_list", json!({ "path": g.workdir }))
                .await;
            expect_ok(&listed);
        });
        gb.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    (fs, gb)
}

/// A process's resident memory in KiB (0 once it is gone): `Rss`, every page it maps in memory,
/// or `Pss`, each page shared with other processes divided among them (glovebox's services are
/// one binary: its code is in memory once, and `Rss` counts it in every process).
pub fn memory_kib(pid: i32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|rollup| {
            rollup.lines().find_map(|l| {
                let value = l.strip_prefix(field)?.strip_prefix(':')?;
                value.trim().trim_end_matches("kB").trim().parse().ok()
            })
        })
        .unwrap_or(0)
}

/// CPU time (user + system) a process has used so far, in milliseconds.
pub fn cpu_ms(pid: i32) -> f64 {
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let fields: Vec<u64> = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|f| f.parse().ok())
                .collect();
            Some((fields.first()? + fields.get(1)?) as f64 * 1000.0 / ticks)
        })
        .unwrap_or(0.0)
}

/// Each process's CPU milliseconds per hour over `idle` with nothing asked of any of them.
pub fn idle_cpu_per_hour(processes: &[(String, i32)], idle: Duration) -> Vec<(String, f64)> {
    let before: Vec<f64> = processes.iter().map(|(_, pid)| cpu_ms(*pid)).collect();
    std::thread::sleep(idle);
    let per_hour = 3600.0 / idle.as_secs_f64();
    processes
        .iter()
        .zip(before)
        .map(|((name, pid), before)| (name.clone(), (cpu_ms(*pid) - before) * per_hour))
        .collect()
}

/// "name value, name value" of a process table, values as `format`s them.
pub fn describe(parts: &[(String, f64)], format: impl Fn(f64) -> String) -> String {
    parts
        .iter()
        .map(|(name, v)| format!("{name} {}", format(*v)))
        .collect::<Vec<_>>()
        .join(", ")
}
