//! glovebox against unguarded MCP servers, side by side, all driven by the same official MCP
//! Python SDK client (`tests/bench/compare_client.py`) over stdio with every session open, each
//! measure taken in short turns alternating between glovebox (through `glovebox mcp`) and its
//! reference:
//!
//! - the MCP filesystem server (`@modelcontextprotocol/server-filesystem`, from
//!   `tests/bench/package.json`) on the same fixture: a 4 KiB file read (back to back, and each
//!   after 1.1 s idle, as an agent's calls come), a directory of 1,000 files listed like for like
//!   (names and types: `list_directory` and `file_list` with `details: false`; with sizes:
//!   `list_directory_with_sizes` and `file_list`), 400 names found among 20,000, reads/s with 8
//!   in flight, and CPU per call process by process;
//! - `@modelcontextprotocol/server-everything` called directly, and the same server as a pack
//!   glovebox runs (`everything__echo`): a short echo and a 4 KiB one.
//!
//! Then, outside the client: a client tool's round trip beside a built-in read
//! ([`client_tool`]); glovebox's processes at rest, memory and CPU per hour idle, and its start
//! from `glovebox up` to a served call, each beside the filesystem server's ([`standing`]). Last,
//! the performance goals round by round ([`goals`]).
//!
//! Run: `(cd tests/bench && npm ci) && cargo build --release -p glovebox -p glovebox-e2e --bins &&
//! target/release/glovebox-compare` (`COMPARE_ROUNDS` sets the rounds, default 3;
//! `COMPARE_IDLE_SECS` the idle window, default 30).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use glovebox_e2e::{Glovebox, Options};
use serde_json::{Value, json};

mod client_tool;
mod goals;
mod standing;

fn bench_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bench")
}

/// The fixture both servers read.
fn fixture(root: &Path) {
    let content: String = (0..4096).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    std::fs::write(root.join("read4k.txt"), content).unwrap();
    let dir = root.join("dir1000");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..1000 {
        std::fs::write(dir.join(format!("file-{i:04}.txt")), "x\n").unwrap();
    }
    let tree = root.join("tree");
    for i in 0..20_000 {
        let sub = tree.join(format!("d{:02}/e{:02}", i % 50, (i / 50) % 20));
        std::fs::create_dir_all(&sub).unwrap();
        let name = if i % 50 == 7 {
            format!("match-{i:05}.txt")
        } else {
            format!("file-{i:05}.txt")
        };
        std::fs::write(sub.join(name), "y\n").unwrap();
    }
}

/// One round: every server driven by one client, each measure in alternating turns; returns the
/// client's results, {"fs": …, "gb": …, "ev": …}.
fn run_round(fixture: &Path, commands: [&[String]; 3], service_pids: &str) -> Value {
    let mut client = Command::new("python3");
    client
        .env("GB_SERVICE_PIDS", service_pids)
        .arg(bench_dir().join("compare_client.py"))
        .arg(fixture);
    for command in commands {
        client.arg(serde_json::to_string(command).unwrap());
    }
    let out = client
        .output()
        .expect("python3 with the mcp package (pip install -r tests/mcp/requirements.txt)");
    assert!(
        out.status.success(),
        "the client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(line.lines().last().unwrap()).unwrap()
}

pub(crate) fn quantile(samples: &[f64], q: f64) -> f64 {
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s[((s.len() as f64 - 1.0) * q).round() as usize]
}

pub(crate) fn samples(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// A launcher `npm ci` put in `tests/bench/node_modules/.bin`.
fn npm_bin(name: &str) -> PathBuf {
    let bin = bench_dir().join("node_modules/.bin").join(name);
    assert!(
        bin.exists(),
        "{} is missing: run `npm ci` in tests/bench",
        bin.display()
    );
    bin
}

fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let fs_server = npm_bin("mcp-server-filesystem");
    let everything = npm_bin("mcp-server-everything");
    let pack = json!({"mcpServers": {"everything": {"command": everything, "args": ["stdio"]}}});
    let g = Glovebox::start_with(Options {
        accounts: vec![("bench".into(), true)],
        mcp_json: Some(pack.to_string()),
        ..Options::default()
    });
    let root = std::fs::canonicalize(&g.workdir).unwrap().join("fixture");
    std::fs::create_dir_all(&root).unwrap();
    eprintln!("building the fixture in {} ...", root.display());
    fixture(&root);
    let fs_cmd = vec![fs_server.display().to_string(), root.display().to_string()];
    let ev_cmd = vec![everything.display().to_string(), "stdio".into()];
    let gb_cmd = vec![
        glovebox_e2e::glovebox_bin().display().to_string(),
        "mcp".into(),
        "--state-dir".into(),
        g.state.display().to_string(),
    ];
    let rounds: usize = env_number("COMPARE_ROUNDS", 3);
    let processes = glovebox_processes(&g);
    let service_pids: Vec<String> = processes
        .iter()
        .filter(|(name, _)| name != "up")
        .map(|(name, pid)| format!("{name}={pid}"))
        .collect();
    let service_pids = service_pids.join(",");
    let mut results = Vec::new();
    for round in 0..rounds {
        eprintln!("round {} of {rounds} ...", round + 1);
        results.push(run_round(&root, [&fs_cmd, &gb_cmd, &ev_cmd], &service_pids));
    }
    print_rounds(&results);
    eprintln!("a client tool's round trips ...");
    let (reads, tools) = client_tool::round_trips(&g, &root.join("read4k.txt"));
    print_row(
        "client tool vs file_read (WS)",
        (quantile(&reads, 0.5), quantile(&tools, 0.5)),
        (quantile(&reads, 0.99), quantile(&tools, 0.99)),
    );
    print_at_rest(&g, &fs_server, &root);
    goals::print_goals(&results);
}

/// glovebox's processes for its one account: `up` itself, the broker, the gate, the executor,
/// the pack host, the shim of the pack's server, and the pack's own server (once it has
/// started).
fn glovebox_processes(g: &Glovebox) -> Vec<(String, i32)> {
    let mut processes = vec![("up".to_owned(), g.up_pid().unwrap())];
    for (name, service) in [
        ("broker", "broker"),
        ("gate", "gate"),
        ("executor", "executor"),
        ("packs", "pack-host"),
    ] {
        for pid in g.service_pids(service) {
            processes.push((name.to_owned(), pid));
        }
    }
    until_pack_listed(g);
    // The shim that confines the pack's server and watches its caps for as long as it runs.
    let root = g.root().display().to_string();
    let shims = g.pids_near(&root, |args| {
        args.get(1).map(String::as_str) == Some("pack-shim")
    });
    for pid in shims {
        processes.push(("pack_shim".to_owned(), pid));
    }
    let pid = pack_server_pid().expect("the pack's server runs once its tools are listed");
    processes.push(("pack_server".to_owned(), pid));
    processes
}

/// Waits until glovebox lists the pack's `echo` (its server starts at the first listing).
fn until_pack_listed(g: &Glovebox) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
        let mut agent = g.connect("agent").await;
        loop {
            agent.send(json!({"type": "packs_list"})).await;
            let listed = loop {
                let frame = agent.next().await;
                if frame["type"] == "packs" {
                    break frame;
                }
            };
            if listed.to_string().contains("\"everything__echo\"") {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the pack was never listed: {listed}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    });
}

/// The process running server-everything's script (the only one before the client starts its
/// own): the pack's server under glovebox.
fn pack_server_pid() -> Option<i32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: i32 = entry.file_name().to_string_lossy().parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let mut args = cmdline.split(|b| *b == 0);
            let program = args.next()?;
            let runs_it =
                args.any(|a| String::from_utf8_lossy(a).contains("mcp-server-everything"));
            (program.ends_with(b"node") && runs_it).then_some(pid)
        })
}

fn print_row(label: &str, (f50, g50): (f64, f64), (f99, g99): (f64, f64)) {
    println!(
        "{label:<34} {f50:>10.3} {g50:>10.3} {f99:>10.3} {g99:>10.3} {:>7.2}x",
        g50 / f50
    );
}

/// Each round's measures: p50, p99 and glovebox ÷ its reference; then CPU per call.
fn print_rounds(results: &[Value]) {
    println!(
        "{:<34} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "measure (ms)", "ref p50", "gb p50", "ref p99", "gb p99", "ratio"
    );
    for (round, both) in results.iter().enumerate() {
        let b = &both["gb"];
        for (measure, reference, label) in [
            ("read", "fs", "read 4 KiB"),
            ("read_spaced", "fs", "read 4 KiB, each 1.1 s after"),
            ("list", "fs", "list 1,000 names and types"),
            ("list_sizes", "fs", "list 1,000 with sizes"),
            ("find", "fs", "find 400 of 20,000 names"),
            ("ping", "fs", "a bare round trip (ping)"),
            ("echo", "ev", "pack echo (vs the server direct)"),
            ("echo4k", "ev", "pack echo 4 KiB"),
        ] {
            let (r, g) = (samples(&both[reference][measure]), samples(&b[measure]));
            print_row(
                &format!("r{} {label}", round + 1),
                (quantile(&r, 0.5), quantile(&g, 0.5)),
                (quantile(&r, 0.99), quantile(&g, 0.99)),
            );
        }
        let f = &both["fs"];
        let (fr, gr) = (
            f["reads_per_s"].as_f64().unwrap(),
            b["reads_per_s"].as_f64().unwrap(),
        );
        println!(
            "{:<34} {:>10.0} {:>10.0} {:>10} {:>10} {:>7.2}x",
            format!("r{} reads/s, 8 in flight", round + 1),
            fr,
            gr,
            "",
            "",
            gr / fr
        );
        for (key, reference, what) in [
            ("cpu_ms_per_read", "fs", "per read, 8 in flight"),
            ("read_cpu_ms", "fs", "per read, one at a time"),
            ("list_cpu_ms", "fs", "per list, one at a time"),
            ("list_sizes_cpu_ms", "fs", "per list with sizes"),
            ("echo_cpu_ms", "ev", "per pack echo"),
        ] {
            print_cpu(round, what, &both[reference][key], &b[key]);
        }
        assert_eq!(
            f["find_size"], b["find_size"],
            "both servers must find the same 400 names"
        );
    }
}

/// glovebox's processes at rest (memory, CPU per hour idle), then its start to a served call,
/// each beside the filesystem server's.
fn print_at_rest(g: &Glovebox, fs_server: &Path, root: &Path) {
    let processes = glovebox_processes(g);
    let mut direct =
        standing::Direct::start(&[fs_server.display().to_string(), root.display().to_string()]);
    direct.call("read_text_file", json!({"path": root.join("read4k.txt")}));
    println!();
    for field in ["Rss", "Pss"] {
        let each: Vec<(String, f64)> = processes
            .iter()
            .map(|(name, pid)| {
                (
                    name.clone(),
                    standing::memory_kib(*pid, field) as f64 / 1024.0,
                )
            })
            .collect();
        let services: f64 = each
            .iter()
            .filter(|(name, _)| name != "pack_server")
            .map(|(_, mb)| mb)
            .sum();
        let reference = standing::memory_kib(direct.pid(), field) as f64 / 1024.0;
        println!(
            "{field} MiB at rest: glovebox's services {services:.1} ({}; the pack's own server \
             apart); the filesystem server {reference:.1}; ratio {:.2}x",
            standing::describe(&each, |v| format!("{v:.1}")),
            services / reference
        );
    }
    let idle = std::time::Duration::from_secs(env_number("COMPARE_IDLE_SECS", 30));
    eprintln!("{} s idle ...", idle.as_secs());
    let mut watched = processes.clone();
    watched.push(("fs_server".to_owned(), direct.pid()));
    let per_hour = standing::idle_cpu_per_hour(&watched, idle);
    let services: f64 = per_hour
        .iter()
        .filter(|(name, _)| !name.ends_with("server"))
        .map(|(_, ms)| ms)
        .sum();
    println!(
        "CPU ms per hour idle ({} s measured): glovebox's services {services:.0} ({})",
        idle.as_secs(),
        standing::describe(&per_hour, |v| format!("{v:.0}"))
    );
    drop(direct);
    eprintln!("cold starts ...");
    let (fs, gb) = standing::cold_starts(fs_server, env_number("COMPARE_STARTS", 3));
    print_row(
        "start to a served call (first run)",
        (quantile(&fs, 0.5), quantile(&gb, 0.5)),
        (quantile(&fs, 1.0), quantile(&gb, 1.0)),
    );
}

/// CPU per call of a measure, process by process: where the gated path spends the machine (on
/// 2 cores, throughput with calls in flight is bounded by the sum; one at a time, it is most of
/// the latency).
fn print_cpu(round: usize, what: &str, fs: &Value, gb: &Value) {
    let total = |v: &Value| {
        v.as_object()
            .unwrap()
            .values()
            .map(|x| x.as_f64().unwrap())
            .sum::<f64>()
    };
    let part = |v: &Value, name: &str| v.get(name).and_then(Value::as_f64).unwrap_or(0.0);
    let names = [
        "client",
        "server",
        "broker",
        "gate",
        "executor",
        "packs",
        "pack_shim",
        "pack_server",
    ];
    let describe = |v: &Value| {
        names
            .iter()
            .map(|n| format!("{n} {:.3}", part(v, n)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "r{} CPU ms {what}: fs {:.3} ({}); gb {:.3} ({}); ratio {:.2}x",
        round + 1,
        total(fs),
        describe(fs),
        total(gb),
        describe(gb),
        total(gb) / total(fs)
    );
}
