//! Client tools (`/v1/client-tools`, the loomcycle client-tools protocol v1): providers register
//! tools, agents of the same account call them as `client__<name>` through the gate, and every
//! failure path (no provider, disconnect mid-call, too many connections) is a clear error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures_util::{SinkExt, StreamExt};
use glovebox_e2e::{Glovebox, WAIT, expect_error, expect_ok};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

pub(crate) use glovebox_e2e::client_tools::{Provider, open_provider};

#[tokio::test]
async fn a_provider_registers_and_an_agent_calls_its_tool_through_the_gate() {
    let g = Glovebox::start();
    let mut provider = open_provider(&g, &g.token).await.unwrap();
    assert_eq!(
        provider.protocol.as_deref(),
        Some("loomcycle.client-tools.v1"),
        "only the app protocol is echoed"
    );
    let ok = provider
        .register(&["browser_read_page", "browser.bad", "click", &"x".repeat(60)])
        .await;
    assert_eq!(ok["accepted"], json!(["browser_read_page", "click"]));

    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let names: Vec<&str> = agent.hello_ok["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"client__browser_read_page") && names.contains(&"client__click"),
        "{names:?}"
    );

    agent.send(json!({"type": "invoke", "call_id": "c1", "tool": "client__browser_read_page", "params": {"tab": 1}})).await;
    let ask = approver.next_ask().await;
    assert_eq!(
        ask["subjects"][0],
        json!({"domain": "tool", "path": "client__browser_read_page"})
    );
    assert!(
        ask["preview"].as_str().unwrap().contains("\"tab\": 1"),
        "{ask}"
    );
    approver.answer(&ask, "once").await;
    let invoke = provider.next().await;
    assert_eq!(invoke["type"], "invoke");
    assert_eq!(invoke["tool"], "browser_read_page");
    assert_eq!(invoke["input"], json!({"tab": 1}));
    provider.send(json!({"type": "result", "call_id": invoke["call_id"], "ok": true, "output": "page text"})).await;
    let r = expect_ok(&agent.result_for("c1").await);
    assert_eq!(r, json!("page text"));

    // a provider-side failure reaches the agent as an error with the provider's message
    agent
        .send(json!({"type": "invoke", "call_id": "c2", "tool": "client__click", "params": {}}))
        .await;
    let ask = approver.next_ask().await;
    approver.answer(&ask, "once").await;
    let invoke = provider.next().await;
    provider.send(json!({"type": "result", "call_id": invoke["call_id"], "ok": false, "error": "no such element"})).await;
    let e = agent.result_for("c2").await;
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no such element"),
        "{e}"
    );

    // ping frames are answered
    provider.send(json!({"type": "ping"})).await;
    assert_eq!(provider.next().await["type"], "pong");
}

/// A call whose input does not fit the schema its provider registered is refused with the schema's
/// error before anyone is asked, and never reaches the provider; one that fits goes through.
#[tokio::test]
async fn a_client_tools_input_is_held_to_the_providers_schema() {
    let g = Glovebox::start();
    let mut provider = open_provider(&g, &g.token).await.unwrap();
    let schema = json!({
        "type": "object",
        "properties": {"url": {"type": "string"}, "tab": {"type": "integer", "minimum": 0}},
        "required": ["url"],
        "additionalProperties": false
    });
    provider
        .send(json!({"type": "hello", "client": "test-extension",
                     "tools": [{"name": "open_tab", "description": "opens", "input_schema": schema},
                               {"name": "remote", "description": "fetches its schema",
                                "input_schema": {"$ref": "https://example.com/s.json"}}]}))
        .await;
    let ok = provider.next().await;
    assert_eq!(ok["type"], "hello_ok");
    // A schema that cannot check anything is refused at registration, not at every call.
    assert_eq!(ok["accepted"], json!(["open_tab"]), "{ok}");
    assert_eq!(ok["rejected"][0]["name"], "remote", "{ok}");
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    for (id, bad, says) in [
        ("b1", json!({"tab": 1}), "\"url\" is a required property"),
        ("b2", json!({"url": "x", "tab": -1}), "input/tab"),
        (
            "b3",
            json!({"url": "x", "script": "evil()"}),
            "Additional properties",
        ),
    ] {
        let r = agent.invoke(id, "client__open_tab", bad).await;
        let e = expect_error(&r, "invalid_params");
        assert!(e["message"].as_str().unwrap().contains(says), "{id}: {e}");
    }
    // nothing was asked or sent: the next thing the provider sees is the good call
    let (ask, _) = tokio::join!(approver.next_ask(), async {
        agent
            .send(
                json!({"type": "invoke", "call_id": "g1", "tool": "client__open_tab",
                         "params": {"url": "https://example.com", "tab": 2}}),
            )
            .await;
    });
    assert_eq!(ask["call_id"], "g1", "{ask}");
    approver.answer(&ask, "once").await;
    let invoke = provider.next().await;
    assert_eq!(
        invoke["input"],
        json!({"url": "https://example.com", "tab": 2})
    );
    provider
        .send(
            json!({"type": "result", "call_id": invoke["call_id"], "ok": true, "output": "opened"}),
        )
        .await;
    assert_eq!(expect_ok(&agent.result_for("g1").await), json!("opened"));
}

/// Client tool call `n`: the agent asks, the approver allows it once, the provider makes it
/// (the first call the provider is asked to make since the last) and the agent gets its result.
async fn approved_click(
    n: u32,
    agent: &mut glovebox_e2e::Client,
    approver: &mut glovebox_e2e::Client,
    provider: &mut Provider,
) {
    let id = format!("c{n}");
    agent
        .send(json!({"type": "invoke", "call_id": id, "tool": "client__click", "params": {"n": n}}))
        .await;
    let ask = approver.next_ask().await;
    approver.answer(&ask, "once").await;
    let invoke = provider.next().await;
    assert_eq!(invoke["input"], json!({"n": n}), "{invoke}");
    provider
        .send(json!({"type": "result", "call_id": invoke["call_id"], "ok": true, "output": n}))
        .await;
    assert_eq!(expect_ok(&agent.result_for(&id).await), json!(n));
}

#[tokio::test]
async fn a_client_tool_call_fails_closed_while_the_gate_is_down_and_is_decided_once_it_is_back() {
    // The broker's decisions go as messages on one stream it keeps to the gate: a gate that
    // dies takes the stream down, and the next decision opens it again.
    let g = Glovebox::start();
    let mut provider = open_provider(&g, &g.token).await.unwrap();
    provider.register(&["click"]).await;
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    approved_click(1, &mut agent, &mut approver, &mut provider).await;
    let old = g.kill_service("gate");
    let e = expect_error(
        &agent.invoke("c2", "client__click", json!({"n": 2})).await,
        "unavailable",
    );
    assert!(e["message"].as_str().unwrap().contains("gate"), "{e}");
    g.await_restart("gate", old).await;
    // Call 2 was never made, and the stream to the new gate serves call 3.
    approved_click(3, &mut agent, &mut approver, &mut provider).await;
}

#[tokio::test]
async fn without_a_provider_the_call_fails_with_no_client() {
    let g = Glovebox::start();
    let mut agent = g.connect("agent").await;
    expect_error(
        &agent.invoke("n", "client__click", json!({})).await,
        "no_client",
    );
    expect_error(
        &agent.invoke("bad", "client__a.b", json!({})).await,
        "unknown_tool",
    );
}

#[tokio::test]
async fn a_provider_disconnecting_mid_call_fails_that_call() {
    let g = Glovebox::start();
    let mut provider = open_provider(&g, &g.token).await.unwrap();
    provider.register(&["slow"]).await;
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent
        .send(json!({"type": "invoke", "call_id": "d", "tool": "client__slow", "params": {}}))
        .await;
    let ask = approver.next_ask().await;
    approver.answer(&ask, "once").await;
    assert_eq!(provider.next().await["type"], "invoke");
    drop(provider);
    expect_error(&agent.result_for("d").await, "client_disconnected");
    // and the tool is gone with its provider
    expect_error(
        &agent.invoke("after", "client__slow", json!({})).await,
        "no_client",
    );
}

#[tokio::test]
async fn the_most_recently_registered_provider_wins() {
    let g = Glovebox::start();
    let mut old = open_provider(&g, &g.token).await.unwrap();
    old.register(&["read_page"]).await;
    let mut new = open_provider(&g, &g.token).await.unwrap();
    new.register(&["read_page"]).await;
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent
        .send(json!({"type": "invoke", "call_id": "m", "tool": "client__read_page", "params": {}}))
        .await;
    let ask = approver.next_ask().await;
    approver.answer(&ask, "once").await;
    let invoke = new.next().await;
    new.send(
        json!({"type": "result", "call_id": invoke["call_id"], "ok": true, "output": "newest"}),
    )
    .await;
    assert_eq!(expect_ok(&agent.result_for("m").await), json!("newest"));
    // the older one received nothing
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(200), old.socket.next())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn two_agents_using_the_same_call_id_each_get_their_own_result() {
    let g = Glovebox::start();
    let mut provider = open_provider(&g, &g.token).await.unwrap();
    provider.register(&["read_page"]).await;
    let mut approver = g.connect("approver").await;
    let mut first = g.connect("agent").await;
    let mut second = g.connect("agent").await;
    // both calls reach the provider before either is answered
    let mut invokes = Vec::new();
    for (agent, tab) in [(&mut first, 1), (&mut second, 2)] {
        agent.send(json!({"type": "invoke", "call_id": "same", "tool": "client__read_page", "params": {"tab": tab}})).await;
        let ask = approver.next_ask().await;
        approver.answer(&ask, "once").await;
        let invoke = provider.next().await;
        assert_eq!(invoke["input"], json!({"tab": tab}), "{invoke}");
        invokes.push(invoke);
    }
    assert_ne!(
        invokes[0]["call_id"], invokes[1]["call_id"],
        "the provider tells the two calls apart"
    );
    assert_ne!(
        invokes[0]["call_id"], "same",
        "the provider sees the broker's id"
    );
    // answered in the other order, each agent gets the result of its own call
    for invoke in invokes.iter().rev() {
        let output = format!("tab {}", invoke["input"]["tab"]);
        provider
            .send(json!({"type": "result", "call_id": invoke["call_id"], "ok": true, "output": output}))
            .await;
    }
    assert_eq!(expect_ok(&first.result_for("same").await), json!("tab 1"));
    assert_eq!(expect_ok(&second.result_for("same").await), json!("tab 2"));
}

#[tokio::test]
async fn the_ninth_provider_connection_is_refused_and_a_slot_is_reused() {
    let g = Glovebox::start();
    // sockets that never said hello hold no provider place
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(open_provider(&g, &g.token).await.unwrap());
    }
    let mut providers = Vec::new();
    for _ in 0..8 {
        let mut p = open_provider(&g, &g.token).await.unwrap();
        p.register(&["t"]).await;
        providers.push(p);
    }
    let mut ninth = open_provider(&g, &g.token).await.unwrap();
    ninth.send(json!({"type": "hello", "tools": []})).await;
    let refused = ninth.next().await;
    assert_eq!(refused["type"], "error", "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("too many"),
        "{refused}"
    );
    assert_eq!(ninth.next().await, json!({"type": "closed", "code": 1008}));
    drop(providers.pop());
    // the slot frees once the server sees the close; retry until it does
    let mut reused = None;
    for _ in 0..100 {
        let mut p = open_provider(&g, &g.token).await.unwrap();
        p.send(json!({"type": "hello", "tools": [{"name": "t"}]}))
            .await;
        if p.next().await["type"] == "hello_ok" {
            reused = Some(p);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(reused.is_some(), "a slot was not reused after a disconnect");
}

#[tokio::test]
async fn a_wrong_token_is_refused_before_the_upgrade() {
    let g = Glovebox::start();
    assert_eq!(open_provider(&g, "wrong").await.err(), Some(401));
}

#[tokio::test]
async fn always_on_a_client_tool_persists_a_tool_rule() {
    let g = Glovebox::start();
    let mut provider = open_provider(&g, &g.token).await.unwrap();
    provider.register(&["read_page", "click"]).await;
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent
        .send(json!({"type": "invoke", "call_id": "a", "tool": "client__read_page", "params": {}}))
        .await;
    let ask = approver.next_ask().await;
    approver.answer(&ask, "always").await;
    let invoke = provider.next().await;
    provider
        .send(json!({"type": "result", "call_id": invoke["call_id"], "ok": true, "output": 1}))
        .await;
    expect_ok(&agent.result_for("a").await);
    drop(approver);
    agent
        .send(json!({"type": "invoke", "call_id": "b", "tool": "client__read_page", "params": {}}))
        .await;
    let invoke = provider.next().await;
    assert_eq!(
        invoke["tool"], "read_page",
        "no ask: the tool rule allowed it"
    );
    provider
        .send(json!({"type": "result", "call_id": invoke["call_id"], "ok": true, "output": 2}))
        .await;
    assert_eq!(expect_ok(&agent.result_for("b").await), json!(2));
    // another tool of the same provider still asks (and no approver is connected)
    expect_error(
        &agent.invoke("c", "client__click", json!({})).await,
        "denied",
    );
}

#[tokio::test]
async fn malformed_and_oversized_provider_frames() {
    let g = Glovebox::start();
    let mut provider = open_provider(&g, &g.token).await.unwrap();
    provider
        .socket
        .send(Message::Text("{not json".into()))
        .await
        .unwrap();
    let e = provider.next().await;
    assert_eq!(e["type"], "error", "{e}");
    // before its hello, a provider can only say hello (or ping)
    provider
        .send(json!({"type": "result", "call_id": "c", "ok": true}))
        .await;
    let e = provider.next().await;
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("first frame must be hello"),
        "{e}"
    );
    provider.register(&[]).await;
    // a result for a call that was never sent to this provider is refused, not delivered anywhere
    provider
        .send(json!({"type": "result", "call_id": "mcp-call-forged", "ok": true, "output": 1}))
        .await;
    let e = provider.next().await;
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("no call mcp-call-forged"),
        "{e}"
    );
    // a frame over the 1 MiB cap closes the connection with a policy violation
    let huge = json!({"type": "hello", "tools": [{"name": "x", "description": "d".repeat(2 * 1024 * 1024)}]}).to_string();
    let (mut sink, mut stream) = provider.socket.split();
    let sender = tokio::spawn(async move { sink.send(Message::Text(huge.into())).await });
    let closed = loop {
        match tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("no close frame")
        {
            Some(Ok(Message::Close(frame))) => break frame,
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(closed.map(|f| u16::from(f.code)), Some(1008));
    let _ = sender.await;
    // and nothing it sent was registered
    let agent = g.connect("agent").await;
    assert!(
        !agent.hello_ok["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "client__x")
    );
}

#[tokio::test]
async fn agents_are_told_when_client_tools_come_and_go() {
    let g = Glovebox::start();
    let mut agent = g.connect("agent").await;
    assert_eq!(agent.hello_ok["protocol_version"], 1);
    let mut provider = open_provider(&g, &g.token).await.unwrap();
    provider.register(&["click"]).await;
    let changed = agent.next().await;
    assert_eq!(changed["type"], "tools_changed", "{changed}");
    let names: Vec<&str> = changed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"client__click") && names.contains(&"file_read"),
        "{names:?}"
    );
    drop(provider);
    let changed = agent.next().await;
    assert_eq!(changed["type"], "tools_changed", "{changed}");
    assert!(
        !changed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "client__click"),
        "{changed}"
    );
}

#[tokio::test]
async fn a_providers_failure_is_a_client_error() {
    let g = Glovebox::start();
    let mut provider = open_provider(&g, &g.token).await.unwrap();
    provider.register(&["click"]).await;
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent
        .send(json!({"type": "invoke", "call_id": "c", "tool": "client__click", "params": {}}))
        .await;
    let ask = approver.next_ask().await;
    approver.answer(&ask, "once").await;
    let invoke = provider.next().await;
    provider
        .send(json!({"type": "result", "call_id": invoke["call_id"], "ok": false, "error": "no such button"}))
        .await;
    let error = expect_error(&agent.result_for("c").await, "client_error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("no such button"),
        "{error}"
    );
}

#[tokio::test]
async fn switched_off_client_tools_answer_503_at_the_upgrade() {
    let g = Glovebox::start_with(glovebox_e2e::Options {
        client_tools: vec!["enabled: false".into()],
        ..Default::default()
    });
    assert_eq!(open_provider(&g, &g.token).await.err(), Some(503));
    // the rest of glovebox is unaffected
    let mut agent = g.connect("agent").await;
    expect_ok(&agent.invoke("l", "file_list", json!({"path": "."})).await);
}

#[tokio::test]
async fn the_operator_s_client_tools_knobs_take_effect() {
    let g = Glovebox::start_with(glovebox_e2e::Options {
        client_tools: vec![
            "max_connections: 1".into(),
            "max_frame_bytes: 4096".into(),
            "timeout_ms: 300".into(),
        ],
        ..Default::default()
    });
    let mut first = open_provider(&g, &g.token).await.unwrap();
    first.register(&["slow"]).await;
    // one provider per account: a second is told so and closed
    let mut second = open_provider(&g, &g.token).await.unwrap();
    second
        .send(json!({"type": "hello", "client": "second", "tools": []}))
        .await;
    let e = second.next().await;
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("too many client-tools connections"),
        "{e}"
    );
    // a call the provider never answers fails after 300 ms, not the default 30 s
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent
        .send(json!({"type": "invoke", "call_id": "c", "tool": "client__slow", "params": {}}))
        .await;
    let ask = approver.next_ask().await;
    approver.answer(&ask, "once").await;
    let started = std::time::Instant::now();
    let invoke = first.next().await;
    assert_eq!(invoke["type"], "invoke", "{invoke}");
    let r = agent.result_for("c").await;
    expect_error(&r, "timeout");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // a frame over 4 KiB closes the provider's socket
    let big = json!({"type": "result", "call_id": "x", "ok": true, "output": "o".repeat(8192)});
    first.send(big).await;
    let closed = first.next().await;
    assert_eq!(closed["type"], "closed", "{closed}");
}

/// A provider whose WebSocket library answers the broker's protocol pings (as `ws` does) but that
/// never answers a `ping` frame of its own is alive: it keeps its place and its tools for many
/// ping intervals.
#[tokio::test]
async fn a_provider_answering_only_protocol_pings_is_not_dropped() {
    let g = Glovebox::start_with(glovebox_e2e::Options {
        limits: vec!["websocket_idle_secs: 2".into()],
        ..Default::default()
    });
    let mut provider = open_provider(&g, &g.token).await.unwrap();
    provider.register(&["click"]).await;
    // Pinged every 0.2 s: read for 2 s, answering the protocol's pings (tungstenite does it as it
    // reads) and nothing else.
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    let mut app_pings = 0;
    while let Ok(Some(frame)) = tokio::time::timeout_at(until, provider.socket.next()).await {
        match frame.unwrap() {
            Message::Close(c) => panic!("dropped: {c:?}"),
            Message::Text(t) if t.contains("\"ping\"") => app_pings += 1,
            _ => {}
        }
    }
    assert!(app_pings >= 3, "{app_pings}");
    let agent = g.connect("agent").await;
    let tools = agent.hello_ok["tools"].to_string();
    assert!(tools.contains("click"), "{tools}");
    // One that reads nothing (so answers nothing, not even in the protocol) is dropped.
    drop(provider);
    let mut frozen = open_provider(&g, &g.token).await.unwrap();
    frozen.register(&["freeze"]).await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    // Dropped before the idle timeout (2 s): a close frame 1008, or the socket already gone.
    loop {
        match tokio::time::timeout(WAIT, frozen.socket.next())
            .await
            .unwrap()
        {
            Some(Ok(Message::Close(c))) => {
                assert_eq!(c.map(|c| u16::from(c.code)), Some(1008));
                break;
            }
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => break,
        }
    }
    let agent = g.connect("agent").await;
    let tools = agent.hello_ok["tools"].to_string();
    assert!(!tools.contains("freeze"), "{tools}");
}

/// loomcycle's unmodified host (the Node `ws` package, which answers the protocol's pings by
/// itself, and no `ping` frame of glovebox's): idle for three idle timeouts and many ping
/// intervals, it is never dropped, and its tools still answer.
#[tokio::test]
async fn a_ws_host_answering_only_protocol_pings_stays_through_long_idle() {
    use glovebox_e2e::mcp_clients::NodeProvider;
    let g = Glovebox::start_with(glovebox_e2e::Options {
        limits: vec!["websocket_idle_secs: 2".into()],
        ..Default::default()
    });
    let mut provider = NodeProvider::start_with(&g, &g.token, false);
    provider.next("hello_ok").await;
    let idle = provider
        .frames_within(std::time::Duration::from_secs(6))
        .await;
    assert!(
        !idle.iter().any(|f| f["type"] == "closed"),
        "dropped while idle: {idle:?}"
    );
    let pings = idle.iter().filter(|f| f["type"] == "ping").count();
    assert!(
        pings >= 6,
        "it was pinged and never answered: {pings} pings"
    );
    let mut agent = g.connect("agent").await;
    let mut approver = g.connect("approver").await;
    let (_, result) = agent
        .invoke_asked(
            &mut approver,
            "e",
            "client__echo",
            json!({"text": "still here"}),
            "once",
        )
        .await;
    assert_eq!(expect_ok(&result), "still here", "{result}");
}
