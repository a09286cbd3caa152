//! Real MCP servers as packs: `@modelcontextprotocol/server-everything` and `-filesystem` from
//! npm (installed from `tests/package-lock.json`) and a server written with the official Python
//! SDK's high-level server (`tests/packs/notes_server.py`), each run by the account's pack host
//! the way a user's `mcp.json` would run it, and each call gated, confined and audited like a
//! built-in one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use glovebox_e2e::{Glovebox, Options, expect_error, expect_ok};
use serde_json::{Value, json};

use crate::packs::{names, packs_list, text_of, until_listed, until_listed_within};

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
    // A call made on its ticket has one result row, the pack host's, committed with its execute
    // row; a call denied before it reached the pack host, the broker's.
    let results: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT client_call_id, source, outcome FROM events \
         WHERE kind = 'result' AND tool LIKE 'everything__%' ORDER BY client_call_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let said = |id: &str| -> Vec<(&str, &str)> {
        results
            .iter()
            .filter(|(c, ..)| c == id)
            .map(|(_, s, o)| (s.as_str(), o.as_str()))
            .collect()
    };
    assert_eq!(said("e1"), [("packs", "ok")], "{results:?}");
    assert_eq!(said("l1"), [("packs", "error")], "{results:?}");
    assert_eq!(said("t1"), [("broker", "denied")], "{results:?}");
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
    g.set_secret("test", "API_TOKEN", VALUE);
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

/// The notes server serving Streamable HTTP behind `token`; killed on drop.
struct HttpServer {
    child: std::process::Child,
    port: u16,
}

impl HttpServer {
    fn start(token: &str) -> HttpServer {
        use std::io::BufRead;
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packs/notes_server.py");
        let mut child = std::process::Command::new(python())
            .arg(script)
            .args(["--http", token])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the HTTP server said {line:?}"));
        HttpServer { child, port }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn an_http_pack_that_cannot_be_reached_is_listed_with_the_cause() {
    // A port nothing listens on: the connection is refused, and the listing says so.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let g = start_with_packs(json!({"gone": {"url": format!("http://127.0.0.1:{port}/mcp")}}));
    let list = packs_list(&mut g.connect("agent").await).await;
    let errors = list["errors"].to_string();
    assert!(errors.contains("gone"), "{list}");
    assert!(errors.to_lowercase().contains("refused"), "{list}");
}

#[tokio::test]
async fn an_http_pack_is_reached_with_its_secret_header_gated_and_timed() {
    const TOKEN: &str = "http-pack-token-8d2a41";
    let server = HttpServer::start(TOKEN);
    let g = start_with_packs(json!({"remote": {
        "url": format!("http://127.0.0.1:{}/mcp", server.port),
        "headers": {"Authorization": "Bearer ${secret:REMOTE_TOKEN}"},
        "timeout": 2
    }}));
    let mut agent = g.connect("agent").await;
    // Without its secret, nothing is sent: the pack is listed with the missing credential.
    let list = packs_list(&mut agent).await;
    assert!(
        list["errors"].to_string().contains("REMOTE_TOKEN"),
        "{list}"
    );
    // A wrong token: the server refuses it, and the listing says so.
    g.set_secret("test", "REMOTE_TOKEN", "not-the-token");
    let deadline = std::time::Instant::now() + glovebox_e2e::WAIT;
    loop {
        let list = packs_list(&mut g.connect("agent").await).await;
        let errors = list["errors"].to_string();
        if errors.contains("remote") && !errors.contains("REMOTE_TOKEN") {
            assert!(
                !names(&list).iter().any(|n| n.starts_with("remote__")),
                "{list}"
            );
            // The listing says why: the server refused the credential.
            assert!(errors.contains("HTTP 401"), "{list}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{list}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    g.set_secret("test", "REMOTE_TOKEN", TOKEN);
    until_listed(&g, "the HTTP pack", |n| {
        n.contains(&"remote__read_note".to_owned())
    })
    .await;
    let note = g.workdir.join("a.txt");
    std::fs::write(&note, "over http").unwrap();
    let r = agent
        .invoke("r1", "remote__read_note", json!({"path": note}))
        .await;
    assert_eq!(text_of(&r), "over http");
    // Path arguments are judged as for any pack: the secret floor holds.
    std::fs::write(g.workdir.join(".env"), "KEY=1").unwrap();
    let floor = agent
        .invoke(
            "r2",
            "remote__read_note",
            json!({"path": g.workdir.join(".env")}),
        )
        .await;
    expect_error(&floor, "denied");
    // The pack's time limit holds, and the server still answers after.
    let slow = agent
        .invoke("s1", "remote__slow", json!({"seconds": 30}))
        .await;
    expect_error(&slow, "timeout");
    let again = agent
        .invoke("r3", "remote__read_note", json!({"path": note}))
        .await;
    assert_eq!(text_of(&again), "over http");
    let pool = g.audit_pool().await;
    let calls: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM tool_calls WHERE tool LIKE 'remote__%'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(calls, 4);
}

/// The MCP filesystem server's own launcher, as `npm ci` installed it.
fn server_filesystem() -> PathBuf {
    let bin = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("node_modules/.bin/mcp-server-filesystem");
    assert!(
        bin.exists(),
        "{} is missing: run `npm ci --prefix tests`",
        bin.display()
    );
    bin
}

/// The unmodified filesystem server as a pack: `move_file`'s `source` and `destination` are
/// judged as paths, so moving `.env` (to read it under another name after one "once") is refused
/// by the secret floor before anyone is asked, and a move of ordinary files asks and works.
#[tokio::test]
async fn the_filesystem_servers_move_is_judged_on_both_paths() {
    let g = start_with_packs(json!({"fs": {"command": server_filesystem(), "args": ["."]}}));
    std::fs::write(g.workdir.join(".env"), "SECRET=hunter2\n").unwrap();
    std::fs::write(g.workdir.join("a.txt"), "a\n").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    until_listed(&g, "the filesystem server's tools", |names| {
        names.iter().any(|n| n == "fs__move_file")
    })
    .await;
    let r = agent
        .invoke(
            "m",
            "fs__move_file",
            json!({"source": ".env", "destination": "env-copy.txt"}),
        )
        .await;
    let e = expect_error(&r, "denied");
    assert!(e.to_string().contains(".env"), "{e}");
    assert!(g.workdir.join(".env").exists());
    assert!(!g.workdir.join("env-copy.txt").exists());
    // An ordinary move asks, and once approved is done.
    let (ask, r) = agent
        .invoke_asked(
            &mut approver,
            "m2",
            "fs__move_file",
            json!({"source": "a.txt", "destination": "b.txt"}),
            "once",
        )
        .await;
    assert!(ask.to_string().contains("a.txt"), "{ask}");
    expect_ok(&r);
    assert!(g.workdir.join("b.txt").exists() && !g.workdir.join("a.txt").exists());
}

/// A pack's results reach MCP clients as its server gave them: text as text (not a JSON dump of
/// the whole result), an image as an image block, `structuredContent` kept, and `isError` an
/// error for the client — and in the audit. Through `/mcp` and through `glovebox mcp`.
#[tokio::test]
async fn a_packs_results_pass_through_to_mcp_clients_as_the_server_gave_them() {
    use glovebox_e2e::mcp_clients::{McpClient, Sdk, Transport};
    let bin = glovebox_e2e::sibling_bin("glovebox-fake-pack");
    let g = start_with_packs(json!({"fake": {"command": bin, "args": ["good"]}}));
    until_listed(&g, "the fake pack's tools", |n| {
        n.iter().any(|t| t == "fake__picture")
    })
    .await;
    for transport in [Transport::Http, Transport::Stdio] {
        let mut client = McpClient::start(&g, Sdk::Python, transport, &g.token);
        // The listing keeps what the server said of its tool (sanitized), hints and all.
        let listed = client.list().await;
        let facts = &listed["tools"]["fake__picture"];
        assert_eq!(
            facts["output"],
            json!({"type": "object",
                   "properties": {"width": {"type": "number"}, "height": {"type": "number"}},
                   "required": ["width", "height"]}),
            "{transport:?}: {facts}"
        );
        assert_eq!(facts["title"], "One pixel", "{transport:?}: {facts}");
        assert_eq!(
            facts["meta"],
            json!({"example.com/kind": "image"}),
            "{facts}"
        );
        assert_eq!(
            (
                &facts["read_only"],
                &facts["idempotent"],
                &facts["open_world"]
            ),
            (&json!(true), &json!(true), &json!(false)),
            "{facts}"
        );
        let echo = client
            .call("e", "fake__echo", json!({"text": "hi there"}))
            .await;
        assert_eq!(echo["text"], "hi there", "{transport:?}: {echo}");
        assert_eq!(echo["is_error"], false);
        let picture = client.call("p", "fake__picture", json!({})).await;
        assert_eq!(
            picture["types"],
            json!(["text", "image"]),
            "{transport:?}: {picture}"
        );
        assert_eq!(picture["text"], "one pixel");
        assert_eq!(picture["structured"], json!({"width": 1, "height": 1}));
        let failed = client.call("f", "fake__fail", json!({})).await;
        assert_eq!(failed["is_error"], true, "{transport:?}: {failed}");
        assert_eq!(failed["text"], "it failed on purpose");
        client.quit().await;
    }
    let pool = g.audit_pool().await;
    let outcomes: Vec<(String, String)> = sqlx::query_as(
        "SELECT tool, outcome FROM events WHERE kind = 'result' AND tool LIKE 'fake__%' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let fails: Vec<&str> = outcomes
        .iter()
        .filter(|(t, _)| t == "fake__fail")
        .map(|(_, o)| o.as_str())
        .collect();
    assert_eq!(fails, ["error", "error"], "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .filter(|(t, _)| t != "fake__fail")
            .all(|(_, o)| o == "ok"),
        "{outcomes:?}"
    );
}

/// A pack run the way Python users run servers: a venv's `python`, made from an interpreter that
/// (on this machine, and wherever pyenv or uv put it) lives under a home directory, the venv's
/// `python` a link to it. The launch follows the link and `pyvenv.cfg` and grants that install.
#[tokio::test]
async fn a_venv_on_an_interpreter_under_a_home_directory_runs_as_a_pack() {
    let venv_dir = tempfile::tempdir().unwrap();
    let venv = std::fs::canonicalize(venv_dir.path()).unwrap().join("venv");
    let made = std::process::Command::new(python())
        .args(["-m", "venv", "--without-pip", "--system-site-packages"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let venv_python = venv.join("bin/python");
    assert!(
        std::fs::symlink_metadata(&venv_python)
            .unwrap()
            .file_type()
            .is_symlink(),
        "a venv's python is a link to its base interpreter"
    );
    let g = start_with_packs(json!({"notes": {
        "command": venv_python, "args": ["notes_server.py"], "network": "none"
    }}));
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packs/notes_server.py"),
        g.workdir.join("notes_server.py"),
    )
    .unwrap();
    std::fs::write(g.workdir.join("a.txt"), "a note").unwrap();
    g.set_secret("test", "API_TOKEN", "not-used-here");
    let note = listed_then_called(
        &g,
        glovebox_e2e::WAIT,
        "notes__read_note",
        json!({"path": "a.txt"}),
    )
    .await;
    assert_eq!(text_of(&note), "a note");
}

/// A server refused a path outside its grants fails to start with the path named and the line
/// to add; with that line (`read`) in its entry, it starts.
#[tokio::test]
async fn a_refused_path_is_named_with_the_line_to_add_and_read_grants_it() {
    // Outside every grant and outside what a pack's own namespaces hide (/tmp, the homes).
    let Ok(holder) = tempfile::Builder::new()
        .prefix("glovebox-e2e-")
        .tempdir_in("/var/lib")
    else {
        eprintln!("skipped: cannot make a directory in /var/lib (needs root, as CI has)");
        return;
    };
    let outside = std::fs::canonicalize(holder.path()).unwrap();
    std::fs::write(outside.join("model.bin"), "weights").unwrap();
    let script = format!(
        "cat {}/model.bin > /dev/null && exec ./glovebox-fake-pack good",
        outside.display()
    );
    let pack = |read: Option<&std::path::Path>| {
        let mut def = json!({"command": "/bin/sh", "args": ["-c", script]});
        if let Some(dir) = read {
            def["read"] = json!([dir]);
        }
        def
    };
    let g = start_with_packs(json!({"model": pack(None)}));
    let fake = g.workdir.join("glovebox-fake-pack");
    std::fs::copy(glovebox_e2e::sibling_bin("glovebox-fake-pack"), &fake).unwrap();
    let mut agent = g.connect("agent").await;
    let deadline = std::time::Instant::now() + glovebox_e2e::WAIT;
    let errors = loop {
        let list = packs_list(&mut agent).await;
        let errors = list["errors"].to_string();
        if errors.contains("Permission denied") {
            break errors;
        }
        assert!(std::time::Instant::now() < deadline, "{list}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(
        errors.contains(&format!(
            "add \\\"read\\\": [\\\"{}\\\"] (or \\\"write\\\") to pack model",
            outside.display()
        )),
        "{errors}"
    );
    // The line added: the pack starts (its mcp.json is followed).
    let file = json!({"mcpServers": {"model": pack(Some(&outside))}});
    std::fs::write(g.state.join("accounts/test/mcp.json"), file.to_string()).unwrap();
    until_listed(&g, "the model pack with its read grant", |n| {
        n.contains(&"model__echo".to_owned())
    })
    .await;
}

/// The matrix: unmodified servers from the registries (server-everything and server-filesystem
/// from npm) and the fake pack, each tool called directly and through glovebox by both official
/// SDKs — the Python SDK through `/mcp` and `glovebox mcp`, the TypeScript SDK through
/// `glovebox mcp` — each compared with the same SDK calling the server itself: the same content
/// blocks, `isError` and `structuredContent`. Prints the matrix (server × tool × SDK and front
/// door → identical or how it differs).
#[tokio::test]
async fn packs_answer_as_their_servers_do_when_called_directly() {
    use glovebox_e2e::mcp_clients::{McpClient, Sdk, Transport, node_modules};
    let fs_server = node_modules().join(".bin/mcp-server-filesystem");
    let fake = glovebox_e2e::sibling_bin("glovebox-fake-pack");
    let g = Glovebox::start_with(Options {
        accounts: vec![("test".into(), true)],
        mcp_json: Some(json!({"mcpServers": {}}).to_string()),
        ..Options::default()
    });
    std::fs::write(g.workdir.join("notes.txt"), "first line\nsecond line\n").unwrap();
    std::fs::create_dir_all(g.workdir.join("sub")).unwrap();
    std::fs::write(g.workdir.join("sub/a.md"), "# a\n").unwrap();
    let workdir = g.workdir.display().to_string();
    let servers: Vec<(&str, Vec<String>)> = vec![
        (
            "everything",
            vec![server_everything().display().to_string(), "stdio".into()],
        ),
        ("fs", vec![fs_server.display().to_string(), workdir.clone()]),
        ("fake", vec![fake.display().to_string(), "good".into()]),
    ];
    let defs: serde_json::Map<String, Value> = servers
        .iter()
        .map(|(name, cmd)| {
            (
                (*name).to_owned(),
                json!({"command": cmd[0], "args": cmd[1..]}),
            )
        })
        .collect();
    std::fs::write(
        g.state.join("accounts/test/mcp.json"),
        json!({ "mcpServers": defs }).to_string(),
    )
    .unwrap();
    let notes = g.workdir.join("notes.txt").display().to_string();
    let cases: Vec<(&str, &str, Value)> = vec![
        ("everything", "echo", json!({"message": "hi there"})),
        ("everything", "get-sum", json!({"a": 2, "b": 5})),
        ("everything", "get-sum", json!({"a": "two", "b": 5})),
        ("everything", "get-tiny-image", json!({})),
        (
            "everything",
            "get-annotated-message",
            json!({"messageType": "error", "includeImage": true}),
        ),
        ("everything", "get-resource-links", json!({"count": 2})),
        (
            "everything",
            "get-resource-reference",
            json!({"resourceType": "Text", "resourceId": 1}),
        ),
        (
            "everything",
            "get-structured-content",
            json!({"location": "New York"}),
        ),
        ("fs", "read_text_file", json!({"path": notes})),
        ("fs", "read_text_file", json!({"path": notes, "head": 1})),
        ("fs", "list_directory", json!({"path": workdir})),
        (
            "fs",
            "read_text_file",
            json!({"path": format!("{workdir}/missing.txt")}),
        ),
        ("fake", "picture", json!({})),
        ("fake", "fail", json!({})),
        ("fake", "echo", json!({"text": "through"})),
    ];
    until_listed(&g, "every server's tools", |n| {
        ["everything__echo", "fs__read_text_file", "fake__picture"]
            .iter()
            .all(|t| n.contains(&(*t).to_owned()))
    })
    .await;
    // Some results carry the time of day (server-everything's resources say when they were
    // made): two calls a second apart differ only there, which is no difference of glovebox's.
    let clock = regex::Regex::new(r"\b\d{1,2}:\d{2}:\d{2}(\s?[AP]M)?").unwrap();
    let compared = |v: &Value| {
        let text = json!([v["is_error"], v["content"], v["structured"]]).to_string();
        Value::String(clock.replace_all(&text, "<time of day>").into_owned())
    };
    let mut matrix = Vec::new();
    let mut differ = Vec::new();
    let (mut errors, mut kinds) = (0, std::collections::BTreeSet::new());
    let front_doors = [
        (Sdk::Python, vec![Transport::Http, Transport::Stdio]),
        (Sdk::TypeScript, vec![Transport::Stdio]),
    ];
    for ((server, cmd), (sdk, transports)) in servers
        .iter()
        .flat_map(|s| front_doors.iter().map(move |f| (s, f)))
    {
        let mut direct = McpClient::direct(*sdk, cmd, &g.workdir, &g.root());
        let mut through: Vec<(Transport, McpClient)> = transports
            .iter()
            .map(|t| (*t, McpClient::start(&g, *sdk, *t, &g.token)))
            .collect();
        for (i, (_, tool, args)) in cases.iter().enumerate().filter(|(_, c)| c.0 == *server) {
            let id = format!("c{i}");
            let want = direct.call(&id, tool, args.clone()).await;
            assert!(want.get("exception").is_none(), "{server} {tool}: {want}");
            errors += usize::from(want["is_error"] == true);
            kinds.extend(
                want["types"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|k| k.as_str().map(str::to_owned)),
            );
            for (transport, client) in &mut through {
                let got = client
                    .call(&id, &format!("{server}__{tool}"), args.clone())
                    .await;
                let same = compared(&got) == compared(&want);
                let door = format!("{sdk:?}/{transport:?}");
                matrix.push(format!(
                    "{server:<10} {tool:<24} {door:<17} {}",
                    if same { "identical" } else { "DIFFERS" }
                ));
                if !same {
                    differ.push(format!(
                        "{server} {tool} {door}:\n  direct  {}\n  through {}",
                        compared(&want),
                        compared(&got)
                    ));
                }
            }
        }
        direct.quit().await;
        for (_, client) in through {
            client.quit().await;
        }
    }
    println!("{}", matrix.join("\n"));
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    assert_eq!(matrix.len(), cases.len() * 3);
    // The matrix covers server errors and every kind of block the servers give.
    assert!(errors >= 3, "{errors} error results");
    for kind in ["text", "image", "resource_link", "resource"] {
        assert!(kinds.contains(kind), "no {kind} block: {kinds:?}");
    }
}

/// `npx -y` as users write it in every MCP client's config: npm under the system, its cache under
/// the user's home, the package's `node` found through `#!/usr/bin/env node`.
#[tokio::test]
async fn an_npx_pack_runs_from_the_users_npm_cache() {
    let g = start_with_packs(json!({"everything": {
        "command": "npx",
        "args": ["-y", "@modelcontextprotocol/server-everything@2026.8.31", "stdio"],
        "timeout": 60
    }}));
    let fetched = std::time::Duration::from_secs(90);
    let echoed = listed_then_called(
        &g,
        fetched,
        "everything__echo",
        json!({"message": "via npx"}),
    )
    .await;
    assert_eq!(text_of(&echoed), "Echo: via npx");
}

/// Each pack has a home of its own: its `HOME`, writable; another pack's home and the stderr
/// logs beside them (raw, the secrets of its server included) are out of its reach.
#[tokio::test]
async fn a_pack_cannot_reach_another_packs_home_or_its_stderr_log() {
    let fake = glovebox_e2e::sibling_bin("glovebox-fake-pack");
    let g = start_with_packs(json!({"first": {"command": fake, "args": ["good"]}}));
    until_listed(&g, "the first pack", |n| {
        n.contains(&"first__getenv".to_owned())
    })
    .await;
    let mut agent = g.connect("agent").await;
    let home = text_of(
        &agent
            .invoke("h", "first__getenv", json!({"name": "HOME"}))
            .await,
    );
    assert!(home.ends_with("/packs/first"), "{home}");
    let pack_home = std::path::Path::new(&home)
        .parent()
        .unwrap()
        .parent()
        .unwrap();
    let log = pack_home.join("logs/first.stderr.log");
    assert!(log.exists(), "{}", log.display());
    // A second pack that reads the first one's log, then serves.
    std::fs::copy(&fake, g.workdir.join("glovebox-fake-pack")).unwrap();
    let peek = format!(
        "cat {} > /dev/null && ls {home} > /dev/null && exec ./glovebox-fake-pack good",
        log.display()
    );
    let file = json!({"mcpServers": {
        "first": {"command": fake, "args": ["good"]},
        "peek": {"command": "/bin/sh", "args": ["-c", peek]},
    }});
    std::fs::write(g.state.join("accounts/test/mcp.json"), file.to_string()).unwrap();
    let deadline = std::time::Instant::now() + glovebox_e2e::WAIT;
    loop {
        let list = packs_list(&mut agent).await;
        let errors = list["errors"].to_string();
        assert!(
            !names(&list).iter().any(|n| n.starts_with("peek__")),
            "{list}"
        );
        // Refused by Landlock, or not even there (the pack's own mount namespace hides the
        // home but for what it was granted).
        if errors.contains("Permission denied") || errors.contains("No such file or directory") {
            assert!(errors.contains("first.stderr.log"), "{errors}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{list}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // Nor can the account's own jobs, which run whatever an agent was allowed to start.
    let mut approver = g.connect("approver").await;
    let (status, out, err) = agent
        .run_job(&mut approver, &format!("cat {} ; ls {home}", log.display()))
        .await;
    assert_ne!(status["exit_code"], 0, "{status}");
    assert!(out.is_empty(), "a job read a pack's home or log: {out}");
    assert!(
        err.contains("Permission denied") || err.contains("No such file"),
        "{err}"
    );
}

/// A pack server's progress reaches the MCP client that asked for it (a `progressToken`), in
/// order and before the answer, through `/mcp` and `glovebox mcp` alike — as the server gives it
/// to the same client called directly.
#[tokio::test]
async fn a_packs_progress_reaches_the_client_that_asked_for_it() {
    use glovebox_e2e::mcp_clients::{McpClient, Sdk, Transport};
    let g = start_with_packs(json!({"everything": {
        "command": server_everything(), "args": ["stdio"]
    }}));
    until_listed(&g, "the everything pack", |n| {
        n.contains(&"everything__trigger-long-running-operation".to_owned())
    })
    .await;
    let args = json!({"duration": 1, "steps": 4});
    let mut direct = McpClient::direct(
        Sdk::Python,
        &[server_everything().display().to_string(), "stdio".into()],
        &g.workdir,
        &g.root(),
    );
    direct
        .send(
            json!({"op": "call", "id": "d", "tool": "trigger-long-running-operation",
                     "args": args, "progress": true}),
        )
        .await;
    let want = direct.result("d").await;
    assert_eq!(want["progress"].as_array().unwrap().len(), 4, "{want}");
    for transport in [Transport::Http, Transport::Stdio] {
        let mut client = McpClient::start(&g, Sdk::Python, transport, &g.token);
        client
            .send(json!({"op": "call", "id": "p",
                         "tool": "everything__trigger-long-running-operation",
                         "args": args, "progress": true}))
            .await;
        let got = client.result("p").await;
        assert_eq!(got["is_error"], false, "{transport:?}: {got}");
        assert_eq!(got["progress"], want["progress"], "{transport:?}: {got}");
        assert_eq!(got["content"], want["content"], "{transport:?}");
        // Without a token: no progress, the same answer.
        let plain = client
            .call(
                "q",
                "everything__trigger-long-running-operation",
                args.clone(),
            )
            .await;
        assert!(plain.get("progress").is_none(), "{plain}");
        assert_eq!(plain["content"], want["content"]);
        client.quit().await;
    }
    direct.quit().await;
    // The WebSocket API: `progress` frames, in order and before the result, only when asked.
    let mut agent = g.connect("agent").await;
    for (call_id, asked) in [("w1", true), ("w2", false)] {
        agent
            .send(
                json!({"type": "pack_invoke", "call_id": call_id, "pack": "everything",
                         "tool": "trigger-long-running-operation", "args": args,
                         "progress": asked}),
            )
            .await;
        let mut progress = Vec::new();
        let result = loop {
            let frame = agent.next().await;
            match frame["type"].as_str() {
                Some("progress") => {
                    assert_eq!(frame["call_id"], call_id, "{frame}");
                    progress.push(json!([frame["progress"], frame["total"], frame["message"]]));
                }
                Some("result") if frame["call_id"] == call_id => break frame,
                _ => {}
            }
        };
        assert_eq!(result["ok"], true, "{result}");
        if asked {
            assert_eq!(json!(progress), want["progress"], "over the WebSocket");
        } else {
            assert!(
                progress.is_empty(),
                "progress nobody asked for: {progress:?}"
            );
        }
    }
}

/// `uvx` as Python users run servers: through pyenv's shim (uv installed on a pyenv interpreter,
/// as here), uv's cache under the home, a server fetched from PyPI. (uv moves what it downloads
/// between directories of its cache: the sandbox once refused that with EXDEV.)
#[tokio::test]
async fn a_uvx_pack_runs_a_server_from_pypi() {
    // Where this user's shell finds it (a pyenv shim here): the pack's PATH is the login
    // shell's of glovebox's own user, which in a test is not this shell's.
    let found = std::process::Command::new("sh")
        .args(["-c", "command -v uvx"])
        .output()
        .unwrap();
    let uvx = String::from_utf8_lossy(&found.stdout).trim().to_owned();
    if uvx.is_empty() {
        eprintln!("skipped: uvx is not installed (pip install uv, as tests/run does)");
        return;
    }
    // Behind a proxy with its own certificate authority (as this machine's registries are), a
    // user tells uv to trust the system's certificates, as here.
    let mut def = json!({
        "command": uvx,
        "args": ["--from", "mcp-server-time==2026.10.19", "mcp-server-time"],
        "env": {"UV_NATIVE_TLS": "1"},
        "timeout": 60
    });
    if let Ok(bundle) = std::env::var("SSL_CERT_FILE") {
        def["env"]["SSL_CERT_FILE"] = json!(bundle);
    }
    let g = start_with_packs(json!({ "time": def }));
    let fetched = std::time::Duration::from_secs(120);
    let now = listed_then_called(
        &g,
        fetched,
        "time__get_current_time",
        json!({"timezone": "UTC"}),
    )
    .await;
    let text = text_of(&now);
    assert!(text.contains("\"timezone\": \"UTC\""), "{text}");
}

/// Waits (up to `wait`) until `tool` is listed, then calls it once as the agent: its result.
async fn listed_then_called(
    g: &Glovebox,
    wait: std::time::Duration,
    tool: &str,
    args: Value,
) -> Value {
    until_listed_within(g, tool, wait, |n| n.iter().any(|t| t == tool)).await;
    let mut agent = g.connect("agent").await;
    agent.invoke("call", tool, args).await
}

/// The home of glovebox's own user in these tests (its `HOME`), where users' tools install.
fn home_of(g: &Glovebox) -> PathBuf {
    g.workdir.parent().unwrap().join("home")
}

/// Writes the account's own `mcp.json` with `servers`, once glovebox runs.
fn set_packs(g: &Glovebox, servers: Value) {
    std::fs::write(
        g.state.join("accounts/test/mcp.json"),
        json!({ "mcpServers": servers }).to_string(),
    )
    .unwrap();
}

/// `pipx install` as Python users install servers: a venv of its own under the home
/// (`~/.local/share/pipx/venvs`), made from the pyenv interpreter pipx runs on, the command a
/// link in `~/.local/bin` to the venv's script, whose shebang names the venv's `python`, itself a
/// link to the interpreter. The launch follows all of it.
#[tokio::test]
async fn a_pipx_installed_server_under_the_home_runs_as_a_pack() {
    let g = start_with_packs(json!({}));
    let home = home_of(&g);
    let local = home.join(".local");
    let installed = std::process::Command::new("pipx")
        .args(["install", "mcp-server-time==2026.10.19"])
        .env("HOME", &home)
        .env("PIPX_HOME", local.join("share/pipx"))
        .env("PIPX_BIN_DIR", local.join("bin"))
        .env("PIPX_MAN_DIR", local.join("share/man"))
        .output()
        .expect("pipx is missing: pip install -r tests/mcp/requirements.txt");
    assert!(
        installed.status.success(),
        "pipx install: {}",
        String::from_utf8_lossy(&installed.stderr)
    );
    let command = local.join("bin/mcp-server-time");
    assert!(
        std::fs::symlink_metadata(&command)
            .unwrap()
            .file_type()
            .is_symlink(),
        "pipx links the command into ~/.local/bin"
    );
    set_packs(&g, json!({"time": {"command": command, "network": "none"}}));
    let now = listed_then_called(
        &g,
        glovebox_e2e::WAIT,
        "time__get_current_time",
        json!({"timezone": "UTC"}),
    )
    .await;
    let text = text_of(&now);
    assert!(text.contains("\"timezone\": \"UTC\""), "{text}");
}

/// `cargo install` as Rust users install servers: the binary in `~/.cargo/bin` under the home
/// (built here offline from `tests/packs/cargo-hello`, a server with no dependencies).
#[tokio::test]
async fn a_cargo_installed_server_under_the_home_runs_as_a_pack() {
    let g = start_with_packs(json!({}));
    let home = home_of(&g);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packs/cargo-hello");
    let installed = std::process::Command::new(cargo)
        .args(["install", "--quiet", "--offline", "--path"])
        .arg(&crate_dir)
        .arg("--root")
        .arg(home.join(".cargo"))
        .env(
            "CARGO_TARGET_DIR",
            g.workdir.parent().unwrap().join("cargo-target"),
        )
        .output()
        .unwrap();
    assert!(
        installed.status.success(),
        "cargo install: {}",
        String::from_utf8_lossy(&installed.stderr)
    );
    let command = home.join(".cargo/bin/glovebox-cargo-hello");
    set_packs(
        &g,
        json!({"hello": {"command": command, "network": "none"}}),
    );
    let said = listed_then_called(&g, glovebox_e2e::WAIT, "hello__hello", json!({})).await;
    assert_eq!(text_of(&said), "hello from a cargo-installed server");
}

/// A server in `~/.local/bin` (where `pip install --user` puts scripts) gets that file, not all
/// of `~/.local`: the keyrings in `~/.local/share` stay out of its reach. (A command's install is
/// the parent of its `bin`; for `~/.local/bin` that was `~/.local` while glovebox's state lived
/// elsewhere.)
#[tokio::test]
async fn a_server_in_the_homes_local_bin_cannot_read_the_rest_of_local() {
    let g = start_with_packs(json!({}));
    let home = home_of(&g);
    let keyrings = home.join(".local/share/keyrings");
    std::fs::create_dir_all(&keyrings).unwrap();
    std::fs::write(keyrings.join("login.keyring"), "keyring-secret").unwrap();
    let bin = home.join(".local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = glovebox_e2e::sibling_bin("glovebox-fake-pack");
    let script = bin.join("peek-server");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat {} > /dev/null || exit 7\nexec {} good\n",
            keyrings.join("login.keyring").display(),
            fake.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    set_packs(&g, json!({"peek": {"command": script}}));
    let mut agent = g.connect("agent").await;
    let deadline = std::time::Instant::now() + glovebox_e2e::WAIT;
    loop {
        let list = packs_list(&mut agent).await;
        assert!(
            !names(&list).iter().any(|n| n.starts_with("peek__")),
            "the server read the keyring: {list}"
        );
        let errors = list["errors"].to_string();
        if errors.contains("Permission denied") || errors.contains("No such file or directory") {
            assert!(errors.contains("login.keyring"), "{errors}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{list}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
