//! Search throughput through a real `glovebox up`: `file_grep` (a literal and a regex) and
//! `file_find` over a generated ~200 MB source-like tree, next to `rg` and `find -name` on the
//! same tree in the same run (medians of several runs, and the ratios), plus the latency of a
//! 4 KiB `file_read` through the whole path.
//!
//! An executor only acts on a gate-signed ticket, so nothing here talks to the executor alone:
//! every glovebox figure is the whole path (WebSocket → broker → executor plan → gate → executor
//! execute → audit).
//!
//! Run: `cargo build --release -p glovebox -p glovebox-e2e && target/release/glovebox-grep-bench`
//! (`GREP_BENCH_MB` sets the tree size, `GREP_BENCH_RUNS` the runs per measurement).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use glovebox_e2e::stats::median;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use glovebox_e2e::{Client, Glovebox, expect_ok};
use serde_json::{Value, json};

const WORDS: &[&str] = &[
    "config", "parse", "value", "error", "result", "buffer", "stream", "token", "handle",
    "request", "response", "state", "index", "cache", "entry", "node", "tree", "path", "socket",
    "frame",
];
const LITERAL: &str = "GLOVEBOX_BENCH_NEEDLE";
const REGEX: &str = r"fn [a-z]+_needle_[0-9]{3}\(";

/// A small deterministic generator (no dependency, same tree every run).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn word(&mut self) -> &'static str {
        WORDS[(self.next() as usize) % WORDS.len()]
    }
}

/// Writes about `mb` MB of Rust-like files (20–200 KB each, 3 directory levels). Returns
/// (files, bytes, literal hits, regex hits).
fn generate(root: &Path, mb: u64) -> (u64, u64, u64, u64) {
    let mut rng = Rng(42);
    let (mut files, mut bytes, mut lit, mut re) = (0u64, 0u64, 0u64, 0u64);
    while bytes < mb * 1_000_000 {
        let dir = root.join(format!("{}/{}/{}", rng.word(), rng.word(), rng.next() % 8));
        std::fs::create_dir_all(&dir).unwrap();
        let size = 20_000 + rng.next() % 180_000;
        let mut text = String::with_capacity(size as usize + 200);
        while (text.len() as u64) < size {
            let (a, b, c) = (rng.word(), rng.word(), rng.word());
            match rng.next() % 4000 {
                0 => {
                    text.push_str(&format!("    // {LITERAL} {a}\n"));
                    lit += 1;
                }
                1 => {
                    text.push_str(&format!(
                        "fn {a}_needle_{:03}(x: u32) {{}}\n",
                        rng.next() % 1000
                    ));
                    re += 1;
                }
                _ => text.push_str(&format!(
                    "    let {a}_{b} = {c}::new(&mut self.{b}, {}).map_err(Error::{a})?;\n",
                    rng.next() % 10_000
                )),
            }
        }
        std::fs::write(dir.join(format!("{}_{files}.rs", rng.word())), &text).unwrap();
        files += 1;
        bytes += text.len() as u64;
    }
    (files, bytes, lit, re)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn have(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs a command, returns its wall time and the number of output lines.
fn time_cmd(cmd: &mut Command) -> (Duration, usize) {
    let t = Instant::now();
    let out = cmd.stderr(Stdio::null()).output().unwrap();
    let elapsed = t.elapsed();
    assert!(
        out.status.success() || out.status.code() == Some(1),
        "{cmd:?}: {out:?}"
    );
    (
        elapsed,
        out.stdout
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count(),
    )
}

async fn time_call(agent: &mut Client, id: &str, tool: &str, params: &Value) -> (Duration, Value) {
    let t = Instant::now();
    let r = agent.invoke(id, tool, params.clone()).await;
    let elapsed = t.elapsed();
    (elapsed, expect_ok(&r))
}

fn line(name: &str, ours: Duration, theirs: Option<Duration>) {
    match theirs {
        Some(t) => println!(
            "{name:<34} glovebox {:>8.1} ms   reference {:>8.1} ms   ratio {:.2}",
            ms(ours),
            ms(t),
            ours.as_secs_f64() / t.as_secs_f64()
        ),
        None => println!(
            "{name:<34} glovebox {:>8.1} ms   reference skipped",
            ms(ours)
        ),
    }
}

#[tokio::main]
async fn main() {
    let mb: u64 = std::env::var("GREP_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let runs: usize = std::env::var("GREP_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let g = Glovebox::start();
    let tree = g.workdir.join("tree");
    let t = Instant::now();
    let (files, bytes, lit, re) = generate(&tree, mb);
    println!(
        "tree: {files} files, {:.1} MB in {:.1} s ({lit} literal lines, {re} regex lines); {runs} runs each, medians; {} cores",
        bytes as f64 / 1e6,
        t.elapsed().as_secs_f64(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let rg = have("rg");
    if !rg {
        println!("rg not found (Debian package ripgrep): the grep references are skipped");
    }
    let mut agent = g.connect("agent").await;
    let tree_s = tree.to_str().unwrap();
    let cases = [
        (
            "file_grep literal",
            json!({"path": "tree", "pattern": LITERAL, "literal": true, "max_results": 1000}),
            vec!["-F", LITERAL],
            lit,
        ),
        (
            "file_grep regex",
            json!({"path": "tree", "pattern": REGEX, "max_results": 1000}),
            vec![REGEX],
            re,
        ),
    ];
    for (name, params, rg_args, expected) in cases {
        // warm the page cache and both tools once
        let (_, r) = time_call(
            &mut agent,
            &format!("w{}", name.len()),
            "file_grep",
            &params,
        )
        .await;
        assert_eq!(
            r["count"].as_u64(),
            Some(expected),
            "{name}: {}",
            r["skipped"]
        );
        assert_eq!(r["truncated"], false, "{name}");
        assert_eq!(r["files_searched"].as_u64(), Some(files), "{name}: {r}");
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        for i in 0..runs {
            let (d, r) = time_call(
                &mut agent,
                &format!("g{}-{i}", name.len()),
                "file_grep",
                &params,
            )
            .await;
            assert_eq!(r["count"].as_u64(), Some(expected));
            ours.push(d);
            if rg {
                let (d, n) = time_cmd(
                    Command::new("rg")
                        .args(["--no-config", "-n", "--no-heading"])
                        .args(&rg_args)
                        .arg(tree_s),
                );
                assert_eq!(n as u64, expected, "rg {name}");
                theirs.push(d);
            }
        }
        line(name, median(&ours), rg.then(|| median(&theirs)));
    }
    let find_params = json!({"path": "tree", "names": ["*_1?.rs"], "max_results": 1000});
    let (_, r) = time_call(&mut agent, "fw", "file_find", &find_params).await;
    let found = r["count"].as_u64().unwrap();
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for i in 0..runs {
        let (d, r) = time_call(&mut agent, &format!("f{i}"), "file_find", &find_params).await;
        assert_eq!(r["count"].as_u64(), Some(found));
        ours.push(d);
        let (d, n) = time_cmd(Command::new("find").arg(tree_s).args(["-name", "*_1?.rs"]));
        assert_eq!(n as u64, found, "find");
        theirs.push(d);
    }
    line(
        &format!("file_find ({found} names)"),
        median(&ours),
        Some(median(&theirs)),
    );

    let content: String = (0..4096).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    std::fs::write(g.workdir.join("4k.txt"), &content).unwrap();
    let params = json!({"path": "4k.txt"});
    for i in 0..100 {
        time_call(&mut agent, &format!("rw{i}"), "file_read", &params).await;
    }
    let mut samples = Vec::new();
    for i in 0..1000 {
        samples.push(
            time_call(&mut agent, &format!("r{i}"), "file_read", &params)
                .await
                .0,
        );
    }
    samples.sort_unstable();
    println!(
        "file_read 4 KiB (whole path, 1000 calls) median {:.0} µs   p99 {:.0} µs",
        samples[500].as_secs_f64() * 1e6,
        samples[989].as_secs_f64() * 1e6
    );
}
