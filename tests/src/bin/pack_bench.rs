//! What glovebox adds to a pack tool call: the same MCP server (`glovebox-fake-pack`, its `echo`
//! tool) called directly over stdio, and as a pack through a real `glovebox up` (WebSocket →
//! broker → pack host Plan → gate Decide → pack host Invoke → the server, audited), in one run;
//! and a built-in `file_read` through the same road for scale.
//!
//! Run: `cargo build --release -p glovebox -p glovebox-e2e && cargo run --release -p glovebox-e2e --bin glovebox-pack-bench`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use glovebox_e2e::stats::{median, p99};
use glovebox_e2e::{Glovebox, Options, expect_ok, sibling_bin};
use serde_json::{Value, json};

const CALLS: usize = 500;
const WARMUP: usize = 50;

fn direct() -> Vec<Duration> {
    let mut child = Command::new(sibling_bin("glovebox-fake-pack"))
        .arg("good")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut ask = |id: usize, method: &str, params: Value| {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        let mut reply = String::new();
        stdout.read_line(&mut reply).unwrap();
        serde_json::from_str::<Value>(&reply).unwrap()
    };
    ask(
        0,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}),
    );
    let mut samples = Vec::new();
    for i in 0..WARMUP + CALLS {
        let t = Instant::now();
        let r = ask(
            i + 1,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "ping"}}),
        );
        let d = t.elapsed();
        assert_eq!(r["result"]["content"][0]["text"], "ping");
        if i >= WARMUP {
            samples.push(d);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    samples
}

#[tokio::main]
async fn main() {
    let bin = sibling_bin("glovebox-fake-pack");
    let g = Glovebox::start_with(Options {
        accounts: vec![("bench".into(), true)],
        mcp_json: Some(
            json!({"mcpServers": {"fake": {"command": bin, "args": ["good"]}}}).to_string(),
        ),
        ..Options::default()
    });
    let mut agent = g.connect("agent").await;
    let mut through = Vec::new();
    for i in 0..WARMUP + CALLS {
        let t = Instant::now();
        let r = agent
            .invoke(&format!("c{i}"), "fake__echo", json!({"text": "ping"}))
            .await;
        let d = t.elapsed();
        expect_ok(&r);
        if i >= WARMUP {
            through.push(d);
        }
    }
    std::fs::write(g.workdir.join("small.txt"), "ping").unwrap();
    let mut builtin = Vec::new();
    for i in 0..WARMUP + CALLS {
        let t = Instant::now();
        let r = agent
            .invoke(&format!("r{i}"), "file_read", json!({"path": "small.txt"}))
            .await;
        let d = t.elapsed();
        expect_ok(&r);
        if i >= WARMUP {
            builtin.push(d);
        }
    }
    let direct = direct();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("pack tool call (echo), {CALLS} calls after {WARMUP} warm-up, one run:");
    println!(
        "  direct over stdio:      median {:>7.3} ms   p99 {:>7.3} ms",
        ms(median(&direct)),
        ms(p99(&direct))
    );
    println!(
        "  through glovebox (WS):  median {:>7.3} ms   p99 {:>7.3} ms",
        ms(median(&through)),
        ms(p99(&through))
    );
    println!(
        "  built-in file_read (WS): median {:>7.3} ms   p99 {:>7.3} ms   (same road, executor instead of pack)",
        ms(median(&builtin)),
        ms(p99(&builtin))
    );
    println!(
        "  median overhead:        {:>7.3} ms",
        ms(median(&through)) - ms(median(&direct))
    );
}
