//! The broker's costs, measured against a real `glovebox up`:
//! 1. memory: the broker's resident set before and after 1,000 idle WebSocket connections that
//!    said hello;
//! 2. overhead: an allowed 4 KiB `file_read` through the broker (WebSocket) against the same
//!    backend call made directly over gRPC (a run on the executor's `Runs` stream with the
//!    broker's voucher, as the broker sends it: the executor plans, asks the gate and executes),
//!    in the same run — the difference is what the broker adds; and the executor's Execute alone
//!    (with a ticket the gate signed for its call).
//!
//! 3. throughput: the same read through the broker with 8 calls in flight (8 connections), in
//!    calls per second, and the CPU each service spent per call (its `/proc` user and system
//!    time over the run; the pack host takes no part in a built-in call, but watches the workdir
//!    the calls read in).
//!
//! Run: `cargo build --release -p glovebox && cargo run --release -p glovebox-e2e --bin glovebox-broker-bench`
//! (`GLOVEBOX_BIN=path/to/glovebox` measures another build of the services with this bench;
//! `BROKER_BENCH_CALLS=N` makes the throughput run N calls per connection instead of 250, long
//! enough to profile).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use glovebox_e2e::stats::{median, p99};
use glovebox_e2e::{Auth, Client, Glovebox, expect_ok};
use glovebox_proto::transport::messages::{AnsweredElsewhere, Decisions, MessageClient, Runs};
use glovebox_proto::v1::{
    DecideRequest, ExecuteRequest, PlanRequest, RunRequest, ToolCall,
    executor_client::ExecutorClient,
};
use serde_json::json;

const CONNECTIONS: usize = 1000;
const CALLS: usize = 1000;
const WARMUP: usize = 200;

fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap()
}

/// CPU time (user + system) of the process `pid` and all its threads so far, in milliseconds.
fn cpu_ms(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command (which may hold spaces), from the state (field 3) on.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // USER_HZ is 100 on Linux.
    ticks as f64 * 10.0
}

fn raise_fd_limit() {
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, 8192, 8192);
}

#[tokio::main]
async fn main() {
    raise_fd_limit();
    // One account holds every connection: its cap is raised to fit them.
    let g = Glovebox::start_with(glovebox_e2e::Options {
        limits: vec![format!("connections_per_account: {CONNECTIONS}")],
        ..Default::default()
    });
    let broker = g.service_pids("broker")[0];
    std::fs::write(g.workdir.join("4k.txt"), "x".repeat(4096)).unwrap();

    // 1. memory of idle connections
    let before = rss_kib(broker);
    let mut idle = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        idle.push(Client::connect(&g.url, Auth::Header(&g.token), "agent").await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(broker);
    println!("broker-bench: {CONNECTIONS} idle WebSocket connections (each said hello)");
    println!(
        "  broker RSS {before} KiB -> {after} KiB: {:.1} KiB per connection",
        (after.saturating_sub(before)) as f64 / CONNECTIONS as f64
    );
    drop(idle);

    // 2. overhead per call
    let mut agent = g.connect("agent").await;
    let mut executor = ExecutorClient::new(g.executor_channel(&g.account));
    // The broker's streams to the executor and the gate, with its clients of them.
    let runs = MessageClient::<Runs>::new(g.executor_channel(&g.account));
    let decisions = MessageClient::<Decisions>::new(g.gate_channel());
    // The broker's voucher key, for the call it hands an executor (`Executor.Runs`).
    let vouchers = {
        use glovebox_proto::transport::handover::{peer, socket};
        glovebox_ticket::voucher::VoucherKey::of_broker(
            &g.control_keys().key(socket::GATE, peer::BROKER),
        )
    };
    let direct = |i: usize| ToolCall {
        account: g.account.clone(),
        call_id: format!("direct-{i}"),
        tool: "file_read".into(),
        params_json: json!({"path": "4k.txt"}).to_string(),
        client_call_id: String::new(),
    };
    let mut through = Vec::with_capacity(CALLS);
    let mut backend = Vec::with_capacity(CALLS);
    let mut execute_only = Vec::with_capacity(CALLS);
    for i in 0..WARMUP + CALLS {
        let t = Instant::now();
        let r = agent
            .invoke(&format!("b{i}"), "file_read", json!({"path": "4k.txt"}))
            .await;
        let d1 = t.elapsed();
        assert_eq!(expect_ok(&r)["bytes"], 4096);
        let call = direct(i);
        let t = Instant::now();
        let run = RunRequest {
            voucher: Some(vouchers.vouch(&call, glovebox_ticket::now_ms().unwrap())),
            call: Some(call),
            ..Default::default()
        };
        let ran = runs.run(run, &AnsweredElsewhere::default()).await.unwrap();
        let d2 = t.elapsed();
        let done = ran.executed.expect("an allowed call is executed");
        assert!(done.error.is_none(), "{done:?}");
        // The executor's Execute alone, on a ticket the gate signed for another call.
        let call = direct(WARMUP + CALLS + i);
        let plan = executor
            .plan(PlanRequest {
                call: Some(call.clone()),
            })
            .await
            .unwrap()
            .into_inner()
            .plan
            .unwrap();
        let decided = decisions
            .decide(DecideRequest {
                call: Some(call.clone()),
                plan: Some(plan),
            })
            .await
            .unwrap();
        let t_exec = Instant::now();
        let done = executor
            .execute(ExecuteRequest {
                call: Some(call),
                ticket: decided.ticket,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let d_exec = t_exec.elapsed();
        assert!(done.error.is_none(), "{done:?}");
        if i >= WARMUP {
            through.push(d1);
            backend.push(d2);
            execute_only.push(d_exec);
        }
    }
    let (m1, m2) = (median(&through), median(&backend));
    println!("allowed 4 KiB file_read, {CALLS} calls after {WARMUP} warm-up, interleaved:");
    println!(
        "  through the broker (WebSocket)        median {:>8.1} µs  p99 {:>8.1} µs",
        m1.as_secs_f64() * 1e6,
        p99(&through).as_secs_f64() * 1e6
    );
    println!(
        "  the backend call made directly (Runs) median {:>8.1} µs  p99 {:>8.1} µs",
        m2.as_secs_f64() * 1e6,
        p99(&backend).as_secs_f64() * 1e6
    );
    println!(
        "  executor Execute alone (gRPC, ticket)  median {:>8.1} µs  p99 {:>8.1} µs",
        median(&execute_only).as_secs_f64() * 1e6,
        p99(&execute_only).as_secs_f64() * 1e6
    );
    println!(
        "  the broker adds {:.1} µs per call (median difference; ratio {:.2}x)",
        (m1.as_secs_f64() - m2.as_secs_f64()) * 1e6,
        m1.as_secs_f64() / m2.as_secs_f64()
    );
    drop(agent);

    // 3. throughput and CPU per call, IN_FLIGHT calls at once
    const IN_FLIGHT: usize = 8;
    let per_connection: usize = std::env::var("BROKER_BENCH_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(250);
    let services: Vec<(&str, i32)> = ["gate", "broker", "executor", "pack-host"]
        .into_iter()
        .map(|name| (name, g.service_pids(name)[0]))
        .collect();
    let mut agents = Vec::new();
    for _ in 0..IN_FLIGHT {
        agents.push(g.connect("agent").await);
    }
    let cpu_before: Vec<f64> = services.iter().map(|(_, pid)| cpu_ms(*pid)).collect();
    let t = Instant::now();
    futures_util::future::join_all(agents.iter_mut().enumerate().map(|(w, agent)| async move {
        for i in 0..per_connection {
            let r = agent
                .invoke(&format!("t{w}-{i}"), "file_read", json!({"path": "4k.txt"}))
                .await;
            assert_eq!(expect_ok(&r)["bytes"], 4096);
        }
    }))
    .await;
    let wall = t.elapsed();
    let calls = (IN_FLIGHT * per_connection) as f64;
    println!(
        "{IN_FLIGHT} calls in flight through the broker, {} calls: {:.0} calls/s",
        IN_FLIGHT * per_connection,
        calls / wall.as_secs_f64()
    );
    let mut total = 0.0;
    for ((name, pid), before) in services.iter().zip(cpu_before) {
        let per_call = (cpu_ms(*pid) - before) / calls;
        total += per_call;
        println!("  {name:<9} CPU {per_call:>7.3} ms per call");
    }
    println!("  services  CPU {total:>7.3} ms per call");
}
