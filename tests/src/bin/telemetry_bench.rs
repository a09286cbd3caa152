//! What tracing costs a call: the p50 of an allowed 4 KiB `file_read` through the whole path
//! (WebSocket → broker → executor plan → gate decide → executor execute → audit) with telemetry
//! off, on (sampled at 1.0, exporting to a live in-bench OTLP collector), and on with the
//! collector down (an endpoint where nothing listens), as ratios against off. The three
//! `glovebox up`s run at once and are called in turns, so drift on the machine falls on all
//! three alike.
//!
//! Run: `cargo build --release -p glovebox && cargo run --release -p glovebox-e2e --bin glovebox-telemetry-bench`
//! (or both in debug: the ratios are what to read).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use glovebox_e2e::stats::{median, p99};
use glovebox_e2e::{Glovebox, Options, expect_ok, otlp};
use serde_json::json;

const CALLS: usize = 600;
const WARMUP: usize = 100;
const TURN: usize = 20;

fn with_endpoint(endpoint: Option<&str>) -> Options {
    Options {
        env: match endpoint {
            Some(e) => vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), e.to_owned()),
                ("OTEL_TRACES_SAMPLER_ARG".into(), "1.0".into()),
            ],
            None => Vec::new(),
        },
        ..Default::default()
    }
}

#[tokio::main]
async fn main() {
    let (collector, live) = otlp::start().await;
    let down = otlp::down().await;
    let setups = [
        ("off", with_endpoint(None)),
        ("on, collector up", with_endpoint(Some(&live))),
        ("on, collector down", with_endpoint(Some(&down))),
    ];
    let mut runs = Vec::new();
    for (name, options) in setups {
        let g = Glovebox::start_with(options);
        std::fs::write(g.workdir.join("4k.txt"), "x".repeat(4096)).unwrap();
        let agent = g.connect("agent").await;
        runs.push((name, g, agent, Vec::with_capacity(CALLS)));
    }
    let params = json!({"path": "4k.txt"});
    for (_, _, agent, _) in runs.iter_mut() {
        for i in 0..WARMUP {
            expect_ok(
                &agent
                    .invoke(&format!("w{i}"), "file_read", params.clone())
                    .await,
            );
        }
    }
    let mut done = 0;
    while done < CALLS {
        for (_, _, agent, samples) in runs.iter_mut() {
            for i in done..done + TURN {
                let t = Instant::now();
                expect_ok(
                    &agent
                        .invoke(&format!("c{i}"), "file_read", params.clone())
                        .await,
                );
                samples.push(t.elapsed());
            }
        }
        done += TURN;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spans: usize = collector
        .traces
        .lock()
        .unwrap()
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .map(|ss| ss.spans.len())
        .sum();
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!(
        "telemetry-bench ({build} bench binary; {CALLS} allowed 4 KiB file_read per setup, in turns of {TURN}):"
    );
    let off = median(&runs[0].3);
    for (name, _, _, samples) in &runs {
        let p50 = median(samples);
        println!(
            "  {name:<20} p50 {:>8.1} µs  p99 {:>8.1} µs  p50 vs off {:.3}x ({:+.1} µs)",
            p50.as_secs_f64() * 1e6,
            p99(samples).as_secs_f64() * 1e6,
            p50.as_secs_f64() / off.as_secs_f64(),
            (p50.as_secs_f64() - off.as_secs_f64()) * 1e6
        );
    }
    println!("  spans received by the live collector: {spans}");
}
