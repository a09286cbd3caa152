//! Several accounts on one glovebox: each account's calls, asks, approvers and client tools are
//! its own, and tools are switched on per account.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use glovebox_e2e::{Glovebox, Options, expect_error, expect_ok};
use serde_json::json;

fn two_accounts(bob_enabled: bool) -> Glovebox {
    Glovebox::start_with(Options {
        accounts: vec![("alice".into(), true), ("bob".into(), bob_enabled)],
        ..Default::default()
    })
}

#[tokio::test]
async fn accounts_cannot_see_or_answer_each_others_asks() {
    let g = two_accounts(true);
    let mut alice = g.connect_as("alice", "agent").await;
    let mut alice_approver = g.connect_as("alice", "approver").await;
    let mut bob_approver = g.connect_as("bob", "approver").await;
    assert_eq!(alice.hello_ok["account"], "alice");
    assert_eq!(bob_approver.hello_ok["account"], "bob");

    alice.send(json!({"type": "invoke", "call_id": "a1", "tool": "file_write", "params": {"path": "a.txt", "content": "x"}})).await;
    let ask = alice_approver.next_ask().await;
    assert_eq!(ask["account"], "alice");
    // bob's approver saw nothing, and cannot answer alice's ask by its id
    assert!(
        tokio::time::timeout(Duration::from_millis(300), bob_approver.next())
            .await
            .is_err()
    );
    bob_approver.answer(&ask, "once").await;
    assert_eq!(bob_approver.next().await["type"], "error");
    alice_approver.answer(&ask, "deny").await;
    expect_error(&alice.result_for("a1").await, "denied");
}

#[tokio::test]
async fn each_account_works_in_its_own_workdir() {
    let g = two_accounts(true);
    std::fs::write(g.root().join("work-alice/note.txt"), "alice's").unwrap();
    std::fs::write(g.root().join("work-bob/note.txt"), "bob's").unwrap();
    let mut alice = g.connect_as("alice", "agent").await;
    let mut bob = g.connect_as("bob", "agent").await;
    assert_eq!(
        expect_ok(
            &alice
                .invoke("r", "file_read", json!({"path": "note.txt"}))
                .await
        )["content"],
        "alice's"
    );
    assert_eq!(
        expect_ok(
            &bob.invoke("r", "file_read", json!({"path": "note.txt"}))
                .await
        )["content"],
        "bob's"
    );
    // bob reaching into alice's workdir is outside his rules: it asks, and with no approver of
    // bob's connected, it is denied
    let path = g.root().join("work-alice/note.txt");
    expect_error(
        &bob.invoke("x", "file_read", json!({"path": path.to_str().unwrap()}))
            .await,
        "denied",
    );
}

#[tokio::test]
async fn client_tools_belong_to_their_account() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let g = two_accounts(true);
    let mut request = g
        .url
        .replace("/v1/ws", "/v1/client-tools")
        .into_client_request()
        .unwrap();
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {}", g.token_of("alice")).parse().unwrap(),
    );
    let (mut provider, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    provider
        .send(Message::Text(
            json!({"type": "hello", "tools": [{"name": "secret_tab"}]})
                .to_string()
                .into(),
        ))
        .await
        .unwrap();
    // wait until alice's agents see it
    let mut seen = false;
    for _ in 0..100 {
        let alice = g.connect_as("alice", "agent").await;
        if alice.hello_ok["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "client__secret_tab")
        {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(seen, "alice's provider tool never appeared");
    let mut bob = g.connect_as("bob", "agent").await;
    assert!(
        !bob.hello_ok["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "client__secret_tab")
    );
    expect_error(
        &bob.invoke("c", "client__secret_tab", json!({})).await,
        "no_client",
    );
}

#[tokio::test]
async fn a_switched_off_account_gets_no_tools_until_enabled() {
    let g = two_accounts(false);
    let mut bob = g.connect_as("bob", "agent").await;
    assert_eq!(bob.hello_ok["tools"], json!([]));
    let e = expect_error(&bob.invoke("r", "file_list", json!({})).await, "denied");
    assert_eq!(e["rule"], "enablement");
    assert!(
        e["deny_reason"]
            .as_str()
            .unwrap()
            .contains("glovebox enable --account bob"),
        "{e}"
    );

    let (code, out, err) = g.run_cli(&["enable", "--account", "bob"]);
    assert_eq!(code, 0, "{out}{err}");
    let mut bob = g.connect_as("bob", "agent").await;
    assert!(!bob.hello_ok["tools"].as_array().unwrap().is_empty());
    expect_ok(&bob.invoke("r2", "file_list", json!({})).await);

    let (code, _, _) = g.run_cli(&["disable", "--account", "bob"]);
    assert_eq!(code, 0);
    // takes effect for the very next call, even on an open connection
    expect_error(&bob.invoke("r3", "file_list", json!({})).await, "denied");
    // the other account is unaffected
    let mut alice = g.connect_as("alice", "agent").await;
    expect_ok(&alice.invoke("a", "file_list", json!({})).await);
    // and an unknown account cannot be switched
    let (code, _, err) = g.run_cli(&["enable", "--account", "mallory"]);
    assert_eq!(code, 2);
    assert!(err.contains(r#"no account "mallory""#), "{err}");
    // The gate decided those refusals and audited them, and the switches say who made them.
    let pool = g.audit_pool().await;
    let refused: Vec<(String, String)> = sqlx::query_as(
        "SELECT source, client_call_id FROM events WHERE kind = 'decide' AND rule = 'enablement' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        refused,
        vec![("gate".into(), "r".into()), ("gate".into(), "r3".into())]
    );
    let switches: Vec<(String, String)> = sqlx::query_as(
        "SELECT outcome, detail FROM events WHERE kind = 'enablement' AND account = 'bob' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        switches,
        vec![
            ("enabled".into(), "switched by the admin".into()),
            ("disabled".into(), "switched by the admin".into())
        ]
    );
}

#[tokio::test]
async fn an_approver_can_switch_its_own_account_and_an_agent_cannot() {
    let g = two_accounts(true);
    let mut alice = g.connect_as("alice", "agent").await;
    let mut alice_approver = g.connect_as("alice", "approver").await;
    let mut bob = g.connect_as("bob", "agent").await;

    alice
        .send(json!({"type": "set_enabled", "enabled": false}))
        .await;
    let refused = alice.next().await;
    assert_eq!(
        (refused["type"].as_str(), refused["code"].as_str()),
        (Some("error"), Some("denied"))
    );
    expect_ok(&alice.invoke("still", "file_list", json!({})).await);

    alice_approver
        .send(json!({"type": "set_enabled", "enabled": false}))
        .await;
    let done = alice_approver.next().await;
    assert_eq!(
        done,
        json!({"type": "enabled", "account": "alice", "enabled": false})
    );
    let e = expect_error(&alice.invoke("off", "file_list", json!({})).await, "denied");
    assert_eq!(e["rule"], "enablement");
    // only alice's account was switched
    expect_ok(&bob.invoke("b", "file_list", json!({})).await);

    alice_approver
        .send(json!({"type": "set_enabled", "enabled": true}))
        .await;
    assert_eq!(alice_approver.next().await["enabled"], true);
    expect_ok(&alice.invoke("on", "file_list", json!({})).await);

    let pool = g.audit_pool().await;
    let switches: Vec<String> = sqlx::query_scalar(
        "SELECT outcome FROM events WHERE kind = 'enablement' AND account = 'alice' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(switches, ["disabled", "enabled"]);
}
