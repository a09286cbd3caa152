//! Audit ingest over gRPC: `Append` of broker `result` rows on the gate socket, as the broker does, against a
//! real `glovebox up`, each acknowledged only once its row is committed to SQLite and chained.
//! Measured at 64 and at 1 appends in flight, next to a reference from the same run: `Health` on
//! the gate socket at 64 in flight (a gRPC round trip that writes nothing). The 64-in-flight figure
//! is sustained ingest with group commit; the 1-in-flight one is what one lone row costs.
//!
//! Run: `cargo build --release -p glovebox && cargo run --release -p glovebox-e2e --bin glovebox-audit-bench`
//! (the first argument sets the rows per measurement, default 50,000).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use glovebox_e2e::Glovebox;
use glovebox_proto::v1::{self as pb, audit_client::AuditClient, gate_client::GateClient};

/// Rows per measurement; the first argument overrides it.
const ROWS: usize = 50_000;

fn rows() -> usize {
    std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(ROWS)
}

/// Runs `count` calls of `make` with `in_flight` of them outstanding; returns calls per second.
async fn run<F, Fut>(name: &str, count: usize, in_flight: usize, make: F) -> f64
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..in_flight {
        let make = make.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..count).step_by(in_flight) {
                make(i).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let rate = count as f64 / start.elapsed().as_secs_f64();
    println!("{name:<48} {count:>6} calls, {in_flight:>2} in flight: {rate:>9.0} /s");
    rate
}

#[tokio::main]
async fn main() {
    let g = Glovebox::start();
    // The broker writes its rows over the gate socket (executors have the audit socket).
    let audit = AuditClient::new(g.gate_channel());
    let account = g.account.clone();
    let append = move |i: usize| {
        let mut audit = audit.clone();
        let account = account.clone();
        async move {
            audit
                .append(pb::AuditEvent {
                    call_id: format!("call-bench-{i}"),
                    client_call_id: format!("{i}"),
                    account,
                    source: "broker".into(),
                    kind: "result".into(),
                    tool: "file_read".into(),
                    outcome: "ok".into(),
                    duration_ms: 1,
                    ..Default::default()
                })
                .await
                .unwrap();
        }
    };
    let gate = GateClient::new(g.gate_channel());
    let health = move |_i: usize| {
        let mut gate = gate.clone();
        async move {
            gate.health(pb::HealthRequest {}).await.unwrap();
        }
    };
    // Warm both paths up.
    run("warm-up", 2_000, 16, append.clone()).await;
    run("warm-up", 2_000, 16, health.clone()).await;

    let before = GateClient::new(g.gate_channel())
        .health(pb::HealthRequest {})
        .await
        .unwrap()
        .into_inner()
        .audit_rows;
    let n = rows();
    let many = run("Append (committed, chained row)", n, 64, append.clone()).await;
    let lone = run("Append, one at a time", n / 10, 1, append).await;
    let reference = run("reference: Health (round trip, no write)", n, 64, health).await;
    println!("sustained ingest: {many:.0} events/s");
    println!(
        "Append / Health throughput at 64 in flight = {:.2}",
        many / reference
    );
    println!("group commit gain (64 in flight / 1) = {:.1}", many / lone);

    let after = GateClient::new(g.gate_channel())
        .health(pb::HealthRequest {})
        .await
        .unwrap()
        .into_inner();
    let written = after.audit_rows - before;
    println!("rows the gate counts as written meanwhile: {written}");
    assert!(
        after.audit_healthy && after.audit_failures == 0,
        "the audit reported failures"
    );
}
