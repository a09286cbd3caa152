//! A client tool's round trip (agent → broker → gate → the provider's socket → back), beside a
//! built-in 4 KiB `file_read` on the same agent connection, in alternating turns: what a browser
//! extension's or an IDE's tool costs an agent next to a file read.

use std::path::Path;
use std::time::Instant;

use glovebox_e2e::client_tools::{Provider, open_provider};
use glovebox_e2e::{Glovebox, expect_ok};
use serde_json::json;

const TURNS: usize = 10;
const PER_TURN: usize = 20;

/// (the file reads' milliseconds, the client tool's), `TURNS × PER_TURN` of each.
pub fn round_trips(g: &Glovebox, file: &Path) -> (Vec<f64>, Vec<f64>) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut provider = open_provider(g, &g.token).await.unwrap();
        provider.register(&["echo"]).await;
        let mut approver = g.connect("approver").await;
        let mut agent = g.connect("agent").await;
        // The first call asks; answered "always", the rest are allowed by the rule it adds.
        agent
            .send(json!({"type": "invoke", "call_id": "first", "tool": "client__echo", "params": {"n": 0}}))
            .await;
        let ask = approver.next_ask().await;
        approver.answer(&ask, "always").await;
        answer(&mut provider).await;
        expect_ok(&agent.result_for("first").await);
        let (mut reads, mut tools) = (Vec::new(), Vec::new());
        for turn in 0..TURNS {
            for n in 0..PER_TURN {
                let id = format!("r{turn}-{n}");
                let started = Instant::now();
                expect_ok(&agent.invoke(&id, "file_read", json!({ "path": file })).await);
                reads.push(started.elapsed().as_secs_f64() * 1000.0);
            }
            for n in 0..PER_TURN {
                let id = format!("t{turn}-{n}");
                let started = Instant::now();
                agent
                    .send(json!({"type": "invoke", "call_id": id, "tool": "client__echo", "params": {"n": n}}))
                    .await;
                answer(&mut provider).await;
                let echoed = expect_ok(&agent.result_for(&id).await);
                tools.push(started.elapsed().as_secs_f64() * 1000.0);
                assert_eq!(echoed, json!({ "n": n }));
            }
        }
        (reads, tools)
    })
}

/// The provider's answer to the call it is sent: its own input, echoed.
async fn answer(provider: &mut Provider) {
    let invoke = provider.next().await;
    assert_eq!(invoke["type"], "invoke", "{invoke}");
    provider
        .send(
            json!({"type": "result", "call_id": invoke["call_id"], "ok": true,
                     "output": invoke["input"]}),
        )
        .await;
}
