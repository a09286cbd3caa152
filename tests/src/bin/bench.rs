//! Latency of one allowed `file_read` of a 4 KiB file through the whole path (broker → executor
//! plan → gate decide → executor execute → audit), from a real `glovebox up`, next to references
//! measured in the same run: a WebSocket round trip the broker answers alone (an unknown tool),
//! and a direct read of the same file.
//!
//! Run: `cargo build --release -p glovebox && cargo run --release -p glovebox-e2e --bin glovebox-bench`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use glovebox_e2e::stats::{median, p99};
use glovebox_e2e::{Glovebox, expect_ok};
use serde_json::json;

const WARMUP: usize = 200;
const CALLS: usize = 1000;

fn report(name: &str, samples: Vec<Duration>) -> Duration {
    let median = median(&samples);
    println!(
        "{name:<48} n={:<5} median {:>9.1} µs   p99 {:>9.1} µs",
        samples.len(),
        median.as_secs_f64() * 1e6,
        p99(&samples).as_secs_f64() * 1e6
    );
    median
}

#[tokio::main]
async fn main() {
    let g = Glovebox::start();
    let content: String = (0..4096).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    std::fs::write(g.workdir.join("4k.txt"), &content).unwrap();
    let mut agent = g.connect("agent").await;

    for i in 0..WARMUP {
        expect_ok(
            &agent
                .invoke(&format!("w{i}"), "file_read", json!({"path": "4k.txt"}))
                .await,
        );
        let _ = agent
            .invoke(&format!("u{i}"), "no_such_tool", json!({}))
            .await;
    }
    let mut full = Vec::with_capacity(CALLS);
    let mut ws_only = Vec::with_capacity(CALLS);
    for i in 0..CALLS {
        // Interleave so both see the same machine conditions.
        let t = Instant::now();
        let r = agent
            .invoke(&format!("r{i}"), "file_read", json!({"path": "4k.txt"}))
            .await;
        full.push(t.elapsed());
        assert_eq!(r["result"]["bytes"], 4096, "{r}");
        let t = Instant::now();
        let r = agent
            .invoke(&format!("n{i}"), "no_such_tool", json!({}))
            .await;
        ws_only.push(t.elapsed());
        assert_eq!(r["error"]["code"], "unknown_tool");
    }
    let path = g.workdir.join("4k.txt");
    let direct: Vec<Duration> = (0..CALLS)
        .map(|_| {
            let t = Instant::now();
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes.len(), 4096);
            t.elapsed()
        })
        .collect();

    println!(
        "glovebox-bench: allowed 4 KiB file_read, {CALLS} calls after {WARMUP} warm-up, one connection, sequential"
    );
    let m_full = report("file_read through broker, gate and executor", full);
    let m_ws = report("reference: WebSocket round trip (unknown_tool)", ws_only);
    let m_direct = report("reference: direct read of the same file", direct);
    println!(
        "ratios: full path / WebSocket round trip = {:.1}x; full path / direct read = {:.0}x",
        m_full.as_secs_f64() / m_ws.as_secs_f64(),
        m_full.as_secs_f64() / m_direct.as_secs_f64()
    );
    let pool = g.audit_pool().await;
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
        .fetch_one(&pool)
        .await
        .unwrap();
    println!("audit rows written: {rows}");
}
