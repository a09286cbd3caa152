//! The WebSocket contract under hostile input: authentication, malformed and oversized frames,
//! duplicate call ids, and roles.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures_util::{SinkExt, StreamExt};
use glovebox_e2e::{Auth, Client, Glovebox, expect_error, expect_ok, open};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

#[tokio::test]
async fn wrong_or_missing_token_is_401_before_the_upgrade() {
    let g = Glovebox::start();
    assert_eq!(
        open(&g.url, Auth::Header("not-a-token")).await.err(),
        Some(401)
    );
    assert_eq!(open(&g.url, Auth::None).await.err(), Some(401));
    assert_eq!(
        open(&g.url, Auth::Subprotocol("wrong")).await.err(),
        Some(401)
    );
    // a token with one character changed
    let mut almost = g.token.clone();
    let last = almost.pop().unwrap();
    almost.push(if last == '0' { '1' } else { '0' });
    assert_eq!(open(&g.url, Auth::Header(&almost)).await.err(), Some(401));
}

#[tokio::test]
async fn browsers_authenticate_by_subprotocol_and_only_the_app_protocol_is_echoed() {
    let g = Glovebox::start();
    let (_socket, response) = open(&g.url, Auth::Subprotocol(&g.token)).await.unwrap();
    let echoed = response
        .headers()
        .get("sec-websocket-protocol")
        .unwrap()
        .to_str()
        .unwrap();
    assert_eq!(echoed, "glovebox.v1");
    let client = Client::connect(&g.url, Auth::Subprotocol(&g.token), "agent").await;
    assert_eq!(client.hello_ok["account"], g.account);
}

#[tokio::test]
async fn malformed_frames_get_errors_and_the_connection_goes_on() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let mut agent = g.connect("agent").await;
    for (text, needle) in [
        ("{not json", "malformed JSON"),
        (r#"{"type":"format_disk"}"#, "unknown frame type"),
        ("[]", "JSON object"),
        (r#"{"type":"invoke","tool":"file_read"}"#, "call_id"),
        (
            r#"{"type":"invoke","call_id":"a b","tool":"file_read"}"#,
            "call_id must be",
        ),
    ] {
        agent.send_text(text).await;
        let frame = agent.next().await;
        assert_eq!(frame["type"], "error", "{text}: {frame}");
        assert_eq!(frame["code"], "invalid_params");
        assert!(
            frame["message"].as_str().unwrap().contains(needle),
            "{text}: {frame}"
        );
    }
    // still usable
    expect_ok(
        &agent
            .invoke("ok", "file_read", json!({"path": "a.txt"}))
            .await,
    );
}

#[tokio::test]
async fn params_that_fail_the_schema_are_invalid_params() {
    let g = Glovebox::start();
    let mut agent = g.connect("agent").await;
    for (i, params) in [
        json!({}),
        json!({"path": 7}),
        json!({"path": "a", "follow_symlinks": true}),
        json!("a.txt"),
        json!({"path": ""}),
    ]
    .into_iter()
    .enumerate()
    {
        let r = agent
            .invoke(&format!("p{i}"), "file_read", params.clone())
            .await;
        expect_error(&r, "invalid_params");
    }
    expect_error(&agent.invoke("u", "rm_rf", json!({})).await, "unknown_tool");
    expect_error(
        &agent.invoke("u2", "../file_read", json!({})).await,
        "unknown_tool",
    );
}

#[tokio::test]
async fn an_oversized_frame_closes_with_policy_violation_and_others_are_unaffected() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let mut bystander = g.connect("agent").await;
    let agent = g.connect("agent").await;
    let huge = "x".repeat(5 * 1024 * 1024);
    let text = format!(
        r#"{{"type":"invoke","call_id":"big","tool":"file_read","params":{{"path":"{huge}"}}}}"#
    );
    // Send and read at once: the server refuses the frame from its header, before the payload.
    let (mut sink, mut stream) = agent.socket.split();
    let sender = tokio::spawn(async move { sink.send(Message::Text(text.into())).await });
    let close = loop {
        match tokio::time::timeout(glovebox_e2e::WAIT, stream.next())
            .await
            .expect("no close frame")
        {
            Some(Ok(Message::Close(frame))) => break frame,
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(close.map(|f| f.code), Some(CloseCode::Policy));
    let _ = sender.await;
    expect_ok(
        &bystander
            .invoke("fine", "file_read", json!({"path": "a.txt"}))
            .await,
    );
}

#[tokio::test]
async fn a_call_id_already_in_flight_is_refused_without_disturbing_the_first() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let invoke = json!({"type": "invoke", "call_id": "dup", "tool": "file_write", "params": {"path": "d.txt", "content": "1"}});
    agent.send(invoke.clone()).await;
    let ask = approver.next_ask().await;
    agent.send(invoke).await;
    let refused = agent.result_for("dup").await;
    let e = expect_error(&refused, "invalid_params");
    assert!(
        e["message"].as_str().unwrap().contains("already in flight"),
        "{e}"
    );
    approver.answer(&ask, "once").await;
    expect_ok(&agent.result_for("dup").await);
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("d.txt")).unwrap(),
        "1"
    );
}

#[tokio::test]
async fn roles_are_enforced() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let r = approver.invoke("x", "file_list", json!({})).await;
    expect_error(&r, "denied");
    let mut agent = g.connect("agent").await;
    agent
        .send(json!({"type": "answer", "ask_id": "ask-1", "decision": "once"}))
        .await;
    let frame = agent.next().await;
    assert_eq!(
        (frame["type"].as_str(), frame["code"].as_str()),
        (Some("error"), Some("denied"))
    );
}

#[tokio::test]
async fn the_first_frame_must_be_hello() {
    let g = Glovebox::start();
    let (socket, _) = open(&g.url, Auth::Header(&g.token)).await.unwrap();
    let mut client = Client {
        socket,
        hello_ok: serde_json::Value::Null,
    };
    client
        .send(json!({"type": "invoke", "call_id": "early", "tool": "file_list", "params": {}}))
        .await;
    let frame = client.next().await;
    assert_eq!(frame["type"], "error");
    assert!(
        frame["message"].as_str().unwrap().contains("hello"),
        "{frame}"
    );
}

#[tokio::test]
async fn binary_frames_and_a_second_hello_are_refused_without_closing() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let mut agent = g.connect("agent").await;
    agent
        .socket
        .send(Message::Binary(vec![0xff, 0x00, 0x7b].into()))
        .await
        .unwrap();
    let frame = agent.next().await;
    assert_eq!(
        (frame["type"].as_str(), frame["code"].as_str()),
        (Some("error"), Some("invalid_params")),
        "{frame}"
    );
    agent
        .send(json!({"type": "hello", "role": "approver"}))
        .await;
    let frame = agent.next().await;
    assert!(
        frame["message"]
            .as_str()
            .unwrap()
            .contains("hello was already sent"),
        "{frame}"
    );
    // still an agent, still working: the second hello changed nothing
    expect_ok(
        &agent
            .invoke("after", "file_read", json!({"path": "a.txt"}))
            .await,
    );
    agent
        .send(json!({"type": "answer", "ask_id": "ask-1", "decision": "once"}))
        .await;
    assert_eq!(agent.next().await["code"], "denied");
}

/// `"tables": true` on an invoke: a listing's entries come as the table MCP clients are shown,
/// whether the listing was allowed at once (made ahead of its verdict) or approved first (made on
/// the approved ticket); without it, as JSON entries.
#[tokio::test]
async fn an_invoke_may_ask_for_its_collection_as_a_table_allowed_or_approved() {
    let g = Glovebox::start();
    for dir in ["open", "asked"] {
        std::fs::create_dir_all(g.workdir.join(dir)).unwrap();
        std::fs::write(g.workdir.join(dir).join("tab\tname.txt"), "").unwrap();
        std::fs::write(g.workdir.join(dir).join("plain.txt"), "").unwrap();
    }
    std::fs::write(
        g.permissions_file(),
        "paths:\n  read:\n    allow: ['./open/**']\n    deny: ['./probe']\n",
    )
    .unwrap();
    let mut agent = g.connect("agent").await;
    let mut approver = g.connect("approver").await;
    for i in 0.. {
        let r = agent
            .invoke(&format!("probe{i}"), "file_read", json!({"path": "probe"}))
            .await;
        if r["error"]["code"] == "denied" {
            break;
        }
        assert!(i < 200, "the gate never applied the policy: {r}");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let invoke = |id: &str, dir: &str, tables: bool| {
        json!({"type": "invoke", "call_id": id, "tool": "file_list", "tables": tables,
               "params": {"path": dir, "details": false}})
    };
    let table = "type\tname\nfile\tplain.txt\nfile\t\"tab\\tname.txt\"";

    agent.send(invoke("allowed", "open", true)).await;
    let listed = expect_ok(&agent.result_for("allowed").await);
    assert_eq!(listed["table"], table, "{listed}");
    assert!(listed.get("entries").is_none(), "{listed}");

    agent.send(invoke("json", "open", false)).await;
    let listed = expect_ok(&agent.result_for("json").await);
    assert_eq!(listed["entries"][1]["name"], "tab\tname.txt", "{listed}");
    assert!(listed.get("table").is_none(), "{listed}");

    agent.send(invoke("approved", "asked", true)).await;
    let ask = approver.next_ask().await;
    assert_eq!(ask["call_id"], "approved", "{ask}");
    approver.answer(&ask, "once").await;
    let listed = expect_ok(&agent.result_for("approved").await);
    assert_eq!(listed["table"], table, "{listed}");
    assert!(listed.get("entries").is_none(), "{listed}");
}
