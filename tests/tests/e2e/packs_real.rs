//! Real MCP servers as packs: `@modelcontextprotocol/server-everything` from npm (installed from
//! `tests/package-lock.json`) and a server written with the official Python SDK's high-level
//! server (`tests/packs/notes_server.py`), each run by the account's pack host the way a user's
//! `mcp.json` would run it, and each call gated, confined and audited like a built-in one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use glovebox_e2e::{Glovebox, Options, expect_error, expect_ok};
use serde_json::{Value, json};

use crate::packs::{names, packs_list, text_of, until_listed};

fn start_with_packs(servers: Value) -> Glovebox {
    Glovebox::start_with(Options {
        accounts: vec![("test".into(), true)],
        mcp_json: Some(json!({ "mcpServers": servers }).to_string()),
        ..Options::default()
    })
}

/// The npm server's launcher, as `npm ci` installed it.
fn server_everything() -> PathBuf {
    let bin = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("node_modules/.bin/mcp-server-everything");
    assert!(
        bin.exists(),
        "{} is missing: run `npm ci --prefix tests`",
        bin.display()
    );
    bin
}

/// The Python interpreter that has the `mcp` package (the README's `pip install`), by its real
/// path, so the pack host grants exactly its installation.
fn python() -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import mcp, sys; print(sys.executable)"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python3 with the mcp package: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn server_everything_from_npm_is_a_pack_with_its_tools_gated_and_timed() {
    let g = start_with_packs(json!({"everything": {
        "command": server_everything(), "args": ["stdio"], "timeout": 3
    }}));
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let list = packs_list(&mut agent).await;
    let listed = names(&list);
    for tool in ["everything__echo", "everything__get-sum"] {
        assert!(listed.contains(&tool.to_owned()), "{tool}: {list}");
    }
    let echoed = text_of(
        &agent
            .invoke("e1", "everything__echo", json!({"message": "hi there"}))
            .await,
    );
    assert!(echoed.contains("hi there"), "{echoed}");
    let sum = text_of(
        &agent
            .invoke("s1", "everything__get-sum", json!({"a": 2, "b": 40}))
            .await,
    );
    assert!(sum.contains("42"), "{sum}");
    // A long operation past the pack's time limit: a timeout, and the server is still there.
    let long = agent
        .invoke(
            "l1",
            "everything__trigger-long-running-operation",
            json!({"duration": 30, "steps": 3}),
        )
        .await;
    expect_error(&long, "timeout");
    let again = text_of(
        &agent
            .invoke("e2", "everything__echo", json!({"message": "still here"}))
            .await,
    );
    assert!(again.contains("still here"), "{again}");
    // A tool its server does not mark read-only asks; denied, it never reaches the server.
    let (ask, denied) = agent
        .invoke_asked(
            &mut approver,
            "t1",
            "everything__toggle-simulated-logging",
            json!({}),
            "deny",
        )
        .await;
    assert_eq!(ask["tool"], "everything__toggle-simulated-logging", "{ask}");
    expect_error(&denied, "denied");
    // Its environment holds none of glovebox's credentials or state.
    let env = text_of(&agent.invoke("v1", "everything__get-env", json!({})).await);
    for secret in [
        g.credential_of("test", "agent"),
        g.credential_of("test", "approver"),
        g.state.display().to_string(),
    ] {
        assert!(
            !env.contains(&secret),
            "the pack's environment holds {secret}"
        );
    }
    let pool = g.audit_pool().await;
    let rows: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT client_call_id, error_code FROM tool_calls WHERE tool LIKE 'everything__%' ORDER BY client_call_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let ids: Vec<&str> = rows.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["e1", "e2", "l1", "s1", "t1", "v1"], "{rows:?}");
}

#[tokio::test]
async fn a_python_sdk_server_is_a_pack_with_its_secret_its_paths_judged_and_no_network() {
    const VALUE: &str = "notes-secret-3c9e01";
    let g = start_with_packs(json!({"notes": {
        "command": python(), "args": ["notes_server.py"],
        "env": {"API_TOKEN": "${secret:API_TOKEN}"}, "network": "none"
    }}));
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packs/notes_server.py"),
        g.workdir.join("notes_server.py"),
    )
    .unwrap();
    std::fs::write(g.workdir.join("a.txt"), "a note").unwrap();
    std::fs::write(g.workdir.join(".env"), "KEY=1").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    // Until its secret is set the pack is listed with an error naming it.
    let list = packs_list(&mut agent).await;
    assert!(list["errors"].to_string().contains("API_TOKEN"), "{list}");
    let (code, _, stderr) = {
        use std::io::Write;
        let mut set = std::process::Command::new(glovebox_e2e::glovebox_bin())
            .args([
                "secret",
                "set",
                "--account",
                "test",
                "API_TOKEN",
                "--state-dir",
            ])
            .arg(&g.state)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        set.stdin
            .take()
            .unwrap()
            .write_all(VALUE.as_bytes())
            .unwrap();
        let out = set.wait_with_output().unwrap();
        (
            out.status.code(),
            String::new(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(0), "{stderr}");
    until_listed(&g, "the notes pack", |n| {
        n.contains(&"notes__read_note".to_owned())
    })
    .await;
    let token = text_of(&agent.invoke("k1", "notes__token_set", json!({})).await);
    assert_eq!(token, format!("set, {} characters", VALUE.len()));
    // Read-only, from the user's own file, inside the workdir: allowed.
    let note = agent
        .invoke("r1", "notes__read_note", json!({"path": "a.txt"}))
        .await;
    assert_eq!(text_of(&note), "a note");
    // A path argument on the secret floor is denied before the server sees it.
    let floor = agent
        .invoke("r2", "notes__read_note", json!({"path": ".env"}))
        .await;
    expect_error(&floor, "denied");
    // A writing tool asks; approved once, it writes.
    let (ask, wrote) = agent
        .invoke_asked(
            &mut approver,
            "w1",
            "notes__write_note",
            json!({"path": "out.txt", "text": "hello"}),
            "once",
        )
        .await;
    assert!(
        ask["preview"].as_str().unwrap().contains("out.txt"),
        "{ask}"
    );
    expect_ok(&wrote);
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("out.txt")).unwrap(),
        "hello"
    );
    // `network: none`: the kernel refuses its connection, even to loopback.
    let port = g
        .url
        .trim_start_matches("ws://")
        .split(['/', ':'])
        .nth(1)
        .unwrap()
        .parse::<u16>()
        .unwrap();
    let dialed = text_of(
        &agent
            .invoke("d1", "notes__dial", json!({"port": port}))
            .await,
    );
    assert!(dialed.starts_with("refused"), "{dialed}");
}
