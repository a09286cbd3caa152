//! Throughput of the gate's decisions on its Unix socket with 16 calls in flight, against a real
//! `glovebox up`: messages on one stream the way the broker sends them (`Gate.Decisions`, with
//! the broker's client of it), next to a reference measured in the same run: `Health` (a gRPC
//! round trip on the same socket that decides and audits nothing). Every decision is judged
//! against the account's policy and written to the audit store.
//!
//! Run: `cargo build --release -p glovebox && cargo run --release -p glovebox-e2e --bin glovebox-decide-bench`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use glovebox_e2e::Glovebox;
use glovebox_proto::transport::messages::{Decisions, MessageClient};
use glovebox_proto::v1::{self as pb, gate_client::GateClient};

const IN_FLIGHT: usize = 16;
/// Calls per measurement; the first argument overrides it.
const CALLS: usize = 20_000;

fn calls() -> usize {
    std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(CALLS)
}

async fn run<F, Fut>(name: &str, make: F) -> f64
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let calls = calls();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..IN_FLIGHT {
        let make = make.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..calls).step_by(IN_FLIGHT) {
                make(i).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    let rate = calls as f64 / secs;
    println!("{name:<52} {calls} calls, {IN_FLIGHT} in flight: {rate:>9.0} /s");
    rate
}

#[tokio::main]
async fn main() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let path = g.workdir.join("a.txt").display().to_string();
    let account = g.account.clone();
    // Call `call_id` of the account reading a.txt, planned.
    let read = move |call_id: String| pb::DecideRequest {
        call: Some(pb::ToolCall {
            account: account.clone(),
            call_id,
            tool: "file_read".into(),
            params_json: "{}".into(),
            client_call_id: String::new(),
        }),
        plan: Some(pb::Plan {
            subjects: vec![pb::Subject {
                domain: pb::Domain::Read as i32,
                path: path.clone(),
                state: None,
            }],
            content_tag: Vec::new(),
            pack: None,
        }),
    };
    // As the broker decides: messages on one stream it keeps open (`Gate.Decisions`).
    let stream = MessageClient::<Decisions>::new(g.gate_channel());
    let streamed = move |i: usize| {
        let stream = stream.clone();
        let request = read(format!("stream-{i}"));
        async move {
            let r = stream.decide(request).await.unwrap();
            assert_eq!(r.verdict, pb::Verdict::Allow as i32);
        }
    };
    let channel = g.gate_channel();
    let gate2 = GateClient::new(channel);
    let health = move |_i: usize| {
        let mut gate = gate2.clone();
        async move {
            gate.health(pb::HealthRequest {}).await.unwrap();
        }
    };
    // warm up both
    let _ = tokio::time::timeout(Duration::from_secs(60), async {
        for i in 0..500 {
            streamed.clone()(i).await;
            health.clone()(i).await;
        }
    })
    .await;
    let s = run(
        "decide on the broker's stream (policy + ticket + audit row)",
        streamed,
    )
    .await;
    let h = run("reference: Health (gRPC round trip only)", health).await;
    println!("decide / Health throughput = {:.2}", s / h);
}
