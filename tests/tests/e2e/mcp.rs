//! The MCP endpoint with a real MCP client: the official Python SDK (`tests/mcp/requirements.txt`,
//! installed by `.ci/run`) lists the tools, reads a file, gets a denial it can read, and makes a
//! write that the approver allows — all through the same gate and audit as the WebSocket API.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;

use glovebox_e2e::{Glovebox, Options, WAIT};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

type Lines = tokio::io::Lines<BufReader<tokio::process::ChildStdout>>;

/// The client's next step, as JSON (`null` once it has printed everything).
async fn next(lines: &mut Lines) -> Value {
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("MCP client step")
        .unwrap();
    match line {
        Some(l) => serde_json::from_str::<Value>(&l).unwrap(),
        None => Value::Null,
    }
}

fn mcp_url(g: &Glovebox) -> String {
    g.url.replace("ws://", "http://").replace("/v1/ws", "/mcp")
}

/// Runs the Python MCP client session (`mode` http or stdio) and checks every step.
async fn real_client_session(mode: &str, expect_http_origin: bool) {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("hello.txt"), "hello from glovebox\n").unwrap();
    std::fs::write(g.workdir.join(".env"), "SECRET=1\n").unwrap();
    let mut approver = g.connect("approver").await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp/client_session.py");
    let (a, b) = match mode {
        "http" => (mcp_url(&g), g.token.clone()),
        _ => (
            glovebox_e2e::glovebox_bin().display().to_string(),
            g.state.display().to_string(),
        ),
    };
    let mut child = tokio::process::Command::new("python3")
        .arg(&script)
        .arg(mode)
        .arg(a)
        .arg(b)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 with the `mcp` package (pip install -r tests/mcp/requirements.txt)");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();

    let tools = next(&mut lines).await;
    assert_eq!(tools["step"], "tools", "{tools}");
    let names: Vec<&str> = tools["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"file_read") && names.contains(&"exec_run"),
        "{names:?}"
    );
    // hints come from the same source over HTTP and over the stdio bridge
    for (tool, read_only) in [
        ("file_read", true),
        ("file_grep", true),
        ("exec_status", true),
        ("file_write", false),
        ("file_delete", false),
        ("exec_run", false),
    ] {
        assert_eq!(tools["read_only"][tool], read_only, "{tool}: {tools}");
    }

    let read = next(&mut lines).await;
    assert_eq!(read["is_error"], false, "{read}");
    assert!(
        read["text"]
            .as_str()
            .unwrap()
            .contains("hello from glovebox"),
        "{read}"
    );

    let denied = next(&mut lines).await;
    assert_eq!(denied["is_error"], true, "{denied}");
    let text = denied["text"].as_str().unwrap();
    assert!(
        text.contains("denied") && text.contains("floor:.env*"),
        "{text}"
    );

    let ask = approver.next_ask().await;
    assert_eq!(ask["tool"], "file_write");
    if expect_http_origin {
        assert!(
            ask["connection_id"].as_str().unwrap().starts_with("mcp-"),
            "{ask}"
        );
    }
    approver.answer(&ask, "once").await;
    let write = next(&mut lines).await;
    assert_eq!(write["is_error"], false, "{write}");
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("from-mcp.txt")).unwrap(),
        "written over MCP\n"
    );

    let output = child.wait_with_output().await.unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let pool = g.audit_pool().await;
    let rows: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM tool_calls WHERE tool IN ('file_read', 'file_write')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(rows, 3);
}

/// The tool names a real MCP client of the account with `token` lists over HTTP.
async fn listed_tools(g: &Glovebox, token: &str) -> Vec<String> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp/client_session.py");
    let mut child = tokio::process::Command::new("python3")
        .arg(&script)
        .args(["list", &mcp_url(g), token])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 with the `mcp` package (pip install -r tests/mcp/requirements.txt)");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let tools = next(&mut lines).await;
    assert_eq!(tools["step"], "tools", "{tools}");
    let output = child.wait_with_output().await.unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    tools["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_switched_off_accounts_mcp_client_lists_no_tools() {
    let g = Glovebox::start_with(Options {
        accounts: vec![("alice".into(), true), ("bob".into(), false)],
        ..Default::default()
    });
    assert_eq!(
        listed_tools(&g, &g.token_of("bob")).await,
        Vec::<String>::new()
    );
    let alice = listed_tools(&g, &g.token_of("alice")).await;
    assert!(alice.iter().any(|t| t == "file_read"), "{alice:?}");

    let (code, out, err) = g.run_cli(&["enable", "--account", "bob"]);
    assert_eq!(code, 0, "{out}{err}");
    let bob = listed_tools(&g, &g.token_of("bob")).await;
    assert_eq!(
        bob, alice,
        "an enabled account lists what a desktop hello_ok does"
    );
}

#[tokio::test]
async fn a_real_mcp_client_over_http_lists_reads_is_denied_and_writes_with_approval() {
    real_client_session("http", true).await;
}

#[tokio::test]
async fn a_real_mcp_client_over_the_stdio_bridge_does_the_same() {
    real_client_session("stdio", false).await;
}

#[tokio::test]
async fn the_mcp_endpoint_requires_a_valid_token() {
    let g = Glovebox::start();
    let url = mcp_url(&g);
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    for auth in ["", "Authorization: Bearer wrong\r\n"] {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with("HTTP/1.1 401"), "{auth:?}: {response}");
    }
}
