//! MCP with real clients: the official Python and TypeScript SDKs, each over Streamable HTTP
//! (`/mcp`) and through the stdio bridge (`glovebox mcp`), the MCP Inspector's CLI, and a
//! loomcycle-style provider in Node (see `glovebox_e2e::mcp_clients`). Each check runs for every
//! client it applies to, through the same gate, approvals and audit as the WebSocket API.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use glovebox_e2e::mcp_clients::{
    CLIENTS, McpClient, NodeProvider, Sdk, Transport, inspector, mcp_url,
};
use glovebox_e2e::{Glovebox, Options};
use serde_json::{Value, json};

use crate::client_tools::open_provider;

/// The built-in tools every front door lists.
const BUILT_IN: usize = glovebox_proto::tools::Tool::ALL.len();

fn names_of(list: &Value) -> Vec<&str> {
    list["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn every_client_lists_reads_is_denied_and_writes_with_approval() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("hello.txt"), "hello from glovebox\n").unwrap();
    std::fs::write(g.workdir.join(".env"), "SECRET=1\n").unwrap();
    std::fs::write(g.workdir.join("forged\nfile\t0\t.env"), "").unwrap();
    let mut approver = g.connect("approver").await;
    for (n, (sdk, transport)) in CLIENTS.into_iter().enumerate() {
        let mut c = McpClient::start(&g, sdk, transport, &g.token);
        let label = c.label.clone();

        let list = c.list().await;
        let names = names_of(&list);
        assert_eq!(names.len(), BUILT_IN, "{label}: {names:?}");
        // hints and output schemas come from the one catalog, over HTTP and the bridge alike
        for (tool, read_only) in [
            ("file_read", true),
            ("file_grep", true),
            ("exec_status", true),
            ("file_write", false),
            ("file_delete", false),
            ("exec_run", false),
        ] {
            assert_eq!(
                list["tools"][tool]["read_only"], read_only,
                "{label}: {tool}"
            );
            assert_eq!(
                list["tools"][tool]["output_schema"], true,
                "{label}: {tool}"
            );
        }
        c.send(json!({"op": "instructions"})).await;
        let instructions = c
            .next_where("instructions", |v| v["op"] == "instructions")
            .await;
        assert!(
            instructions["text"]
                .as_str()
                .unwrap()
                .contains("permission gate"),
            "{label}: {instructions}"
        );

        // the SDKs check structuredContent against the tool's outputSchema
        let read = c
            .call("read", "file_read", json!({"path": "hello.txt"}))
            .await;
        assert_eq!(read["is_error"], false, "{label}: {read}");
        assert_eq!(
            read["structured"]["content"], "hello from glovebox\n",
            "{label}"
        );
        // The text block: the other fields on the first line, then the file's text as it is.
        let (fields, rest) = read["text"].as_str().unwrap().split_once('\n').unwrap();
        assert_eq!(rest, "hello from glovebox\n", "{label}: {read}");
        let fields: serde_json::Value = serde_json::from_str(fields).unwrap();
        assert_eq!(
            (fields["bytes"].as_u64(), fields.get("content")),
            (Some(20), None),
            "{label}: {read}"
        );

        // A listing is a table (checked by each SDK against the declared schema), and a file
        // name cannot forge a line of it.
        let list = c.call("list", "file_list", json!({"path": "."})).await;
        assert_eq!(list["is_error"], false, "{label}: {list}");
        let table = list["structured"]["table"].as_str().unwrap_or_default();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0], "type\tsize\tmodified (UTC)\tname",
            "{label}: {table}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("file\t20\t") && l.ends_with("\thello.txt")),
            "{label}: {table}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.ends_with("\t\"forged\\nfile\\t0\\t.env\"")),
            "{label}: the name is quoted: {table}"
        );
        assert!(
            !table.contains("\n.env") && !lines.iter().any(|l| l.ends_with("\t.env")),
            "{label}: {table}"
        );
        assert!(
            list["structured"]["hidden"].as_u64().unwrap() >= 1,
            "{label}: {list}"
        );
        assert!(
            list["structured"].get("entries").is_none(),
            "{label}: {list}"
        );
        let text = list["text"].as_str().unwrap();
        let (fields, rest) = text.split_once('\n').unwrap();
        assert_eq!(rest, table, "{label}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(fields).unwrap()["total"],
            list["structured"]["total"],
            "{label}: {text}"
        );

        // A search's matches are a table as well, made by the executor (the MCP surfaces ask
        // for tables), and a matched line cannot forge a row either.
        let grep = c
            .call(
                "grep",
                "file_grep",
                json!({"pattern": "hello", "path": "."}),
            )
            .await;
        assert_eq!(grep["is_error"], false, "{label}: {grep}");
        let table = grep["structured"]["table"].as_str().unwrap_or_default();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "path\tline\ttext", "{label}: {table}");
        assert!(
            lines
                .iter()
                .any(|l| l.ends_with("/hello.txt\t1\thello from glovebox")),
            "{label}: {table}"
        );
        assert_eq!(
            lines.len() as u64,
            grep["structured"]["count"].as_u64().unwrap() + 1,
            "{label}: {grep}"
        );
        assert!(grep["structured"].get("matches").is_none(), "{label}");

        let denied = c.call("denied", "file_read", json!({"path": ".env"})).await;
        assert_eq!(denied["is_error"], true, "{label}: {denied}");
        let text = denied["text"].as_str().unwrap();
        assert!(text.starts_with("denied: secret floor"), "{label}: {text}");
        assert_eq!(
            text.matches("denied").count(),
            1,
            "{label}: the code once: {text}"
        );
        assert!(text.contains("(rule: floor:.env*)"), "{label}: {text}");

        let unknown = c.call("unknown", "file_reed", json!({})).await;
        let text = unknown["text"].as_str().unwrap_or_default();
        assert!(
            text.starts_with("unknown_tool: ") && !text.contains("hello_ok"),
            "{label}: {unknown}"
        );

        let file = format!("from-mcp-{n}.txt");
        c.start_call(
            "write",
            "file_write",
            json!({"path": file, "content": "written over MCP\n"}),
        )
        .await;
        let ask = approver.next_ask().await;
        assert_eq!(ask["tool"], "file_write", "{label}");
        if transport == Transport::Http {
            assert!(
                ask["connection_id"].as_str().unwrap().starts_with("mcp-"),
                "{label}: {ask}"
            );
        }
        approver.answer(&ask, "once").await;
        let write = c.result("write").await;
        assert_eq!(write["is_error"], false, "{label}: {write}");
        assert_eq!(write["structured"]["created"], true, "{label}: {write}");
        assert_eq!(
            std::fs::read_to_string(g.workdir.join(&file)).unwrap(),
            "written over MCP\n"
        );

        let stderr = c.stderr();
        let after = c.quit().await;
        if transport == Transport::Http {
            // The TypeScript SDK reports a failed DELETE; the Python SDK logs one.
            if sdk == Sdk::TypeScript {
                let terminated = after.iter().find(|v| v["op"] == "terminated").unwrap();
                assert!(terminated.get("error").is_none(), "{label}: {terminated}");
            }
            assert!(
                !stderr.contains("Session termination failed"),
                "{label}: {stderr}"
            );
        }
    }
    let pool = g.audit_pool().await;
    let rows: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM tool_calls WHERE tool IN ('file_read', 'file_write')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(rows, 3 * CLIENTS.len() as i64);
    // The stdio bridges label their calls in the order made (by the millisecond), so the
    // audit's index of client call ids grows at one end.
    let labels: Vec<String> = sqlx::query_scalar(
        "SELECT client_call_id FROM events WHERE client_call_id LIKE 'stdio-%' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(labels.len() >= 6, "{labels:?}");
    assert!(
        labels.iter().all(|l| l.len() == "stdio-".len() + 28),
        "{labels:?}"
    );
    let ms = |id: &String| id["stdio-".len().."stdio-".len() + 12].to_owned();
    for pair in labels.windows(2) {
        assert!(ms(&pair[0]) <= ms(&pair[1]), "{pair:?}");
    }
}

#[tokio::test]
async fn every_client_hears_tool_changes_and_lists_odd_provider_schemas() {
    let g = Glovebox::start();
    let mut clients = Vec::new();
    for (sdk, transport) in CLIENTS {
        let mut c = McpClient::start(&g, sdk, transport, &g.token);
        assert!(!c.names().await.iter().any(|n| n.starts_with("client__")));
        clients.push(c);
    }
    // A loomcycle-style provider registers tools whose schemas broke SDKs' tools/list.
    let mut provider = NodeProvider::start(&g, &g.token);
    let hello_ok = provider.next("hello_ok").await;
    assert_eq!(hello_ok["protocol_version"], 1, "{hello_ok}");
    assert_eq!(
        hello_ok["accepted"],
        json!(["empty", "props", "echo", "fail", "slow"])
    );
    assert_eq!(hello_ok["rejected"][0]["name"], "stringly", "{hello_ok}");
    assert!(
        hello_ok["rejected"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("object"),
        "{hello_ok}"
    );
    let mut approver = g.connect("approver").await;
    for c in &mut clients {
        let label = c.label.clone();
        c.wait_change().await;
        let list = c.list().await;
        let names = names_of(&list);
        for tool in ["client__empty", "client__props", "client__echo"] {
            assert!(names.contains(&tool), "{label}: {names:?}");
            assert_eq!(
                list["tools"][tool]["input_schema"]["type"], "object",
                "{label}"
            );
        }
        assert!(!names.contains(&"client__stringly"), "{label}: {names:?}");
        assert_eq!(
            names.len(),
            BUILT_IN + 5,
            "{label}: the built-in tools are still there"
        );

        // a client tool's string output is the text itself
        c.start_call("echo", "client__echo", json!({"text": "hi there"}))
            .await;
        let ask = approver.next_ask().await;
        approver.answer(&ask, "once").await;
        let echo = c.result("echo").await;
        assert_eq!(echo["is_error"], false, "{label}: {echo}");
        assert_eq!(echo["text"], "hi there", "{label}: {echo}");
        // and a provider's failure is the client's error, not glovebox's
        c.start_call("fail", "client__fail", json!({})).await;
        let ask = approver.next_ask().await;
        approver.answer(&ask, "once").await;
        let fail = c.result("fail").await;
        assert_eq!(fail["is_error"], true, "{label}: {fail}");
        assert!(
            fail["text"]
                .as_str()
                .unwrap()
                .starts_with("client_error: the client tool failed: element not found"),
            "{label}: {fail}"
        );
    }
    // the provider leaves: every client hears it and lists the built-in tools only
    drop(provider);
    for c in &mut clients {
        c.wait_change().await;
        assert_eq!(c.names().await.len(), BUILT_IN, "{}", c.label);
    }
}

#[tokio::test]
async fn a_slow_call_holds_up_no_other_call_on_any_client() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("hello.txt"), "hello\n").unwrap();
    let mut provider = open_provider(&g, &g.token).await.unwrap();
    provider.register(&["slow"]).await;
    let mut approver = g.connect("approver").await;
    for (n, (sdk, transport)) in CLIENTS.into_iter().enumerate() {
        let mut c = McpClient::start(&g, sdk, transport, &g.token);
        let label = c.label.clone();
        c.start_call("slow", "client__slow", json!({})).await;
        if n == 0 {
            // after this, client__slow no longer asks
            let ask = approver.next_ask().await;
            approver.answer(&ask, "always").await;
        }
        let invoke = provider.next().await;
        assert_eq!(invoke["type"], "invoke", "{label}: {invoke}");
        // the provider has not answered; a read still goes through at once
        let read = c
            .call("read", "file_read", json!({"path": "hello.txt"}))
            .await;
        assert_eq!(read["is_error"], false, "{label}: {read}");
        provider
            .send(json!({"type": "result", "call_id": invoke["call_id"], "ok": true, "output": {"done": n}}))
            .await;
        let slow = c.result("slow").await;
        assert_eq!(slow["is_error"], false, "{label}: {slow}");
        assert_eq!(slow["structured"], json!({"done": n}), "{label}: {slow}");
        c.quit().await;
    }
}

#[tokio::test]
async fn cancelling_a_call_withdraws_its_ask() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    for transport in [Transport::Http, Transport::Stdio] {
        let mut c = McpClient::start(&g, Sdk::TypeScript, transport, &g.token);
        let label = c.label.clone();
        c.start_call(
            "w",
            "file_write",
            json!({"path": "never.txt", "content": "x"}),
        )
        .await;
        let ask = approver.next_ask().await;
        c.send(json!({"op": "cancel", "id": "w"})).await;
        let closed = approver.next().await;
        assert_eq!(closed["type"], "ask_closed", "{label}: {closed}");
        assert_eq!(closed["ask_id"], ask["ask_id"], "{label}");
        assert_eq!(closed["reason"], "withdrawn", "{label}: {closed}");
        let result = c.result("w").await;
        assert!(result.get("exception").is_some(), "{label}: {result}");
        assert!(!g.workdir.join("never.txt").exists(), "{label}");
        c.quit().await;
    }
}

#[tokio::test]
async fn the_stdio_bridge_reconnects_after_the_broker_restarts() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("hello.txt"), "hello\n").unwrap();
    for sdk in [Sdk::Python, Sdk::TypeScript] {
        let mut c = McpClient::start(&g, sdk, Transport::Stdio, &g.token);
        let label = c.label.clone();
        let read = c
            .call("before", "file_read", json!({"path": "hello.txt"}))
            .await;
        assert_eq!(read["is_error"], false, "{label}: {read}");
        let old = g.kill_service("broker");
        g.await_restart("broker", old).await;
        // the bridge reconnects by itself; a call made meanwhile waits for it
        let read = c
            .call("after", "file_read", json!({"path": "hello.txt"}))
            .await;
        assert_eq!(read["is_error"], false, "{label}: {read}");
        assert_eq!(c.names().await.len(), BUILT_IN, "{label}");
        c.quit().await;
    }
}

#[tokio::test]
async fn the_inspector_cli_lists_and_calls_with_a_bearer_header() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("hello.txt"), "hello inspector\n").unwrap();
    let (code, out, err) = inspector(&g, &g.token, &["--method", "tools/list"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let list: Value = serde_json::from_str(&out).unwrap();
    let tools = list["tools"].as_array().unwrap();
    assert_eq!(tools.len(), BUILT_IN, "{out}");
    assert!(tools.iter().all(|t| t["inputSchema"]["type"] == "object"));

    let args = [
        "--method",
        "tools/call",
        "--tool-name",
        "file_read",
        "--tool-arg",
        "path=hello.txt",
    ];
    let (code, out, err) = inspector(&g, &g.token, &args).await;
    assert_eq!(code, 0, "{out}{err}");
    let result: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result["isError"], false, "{out}");
    assert_eq!(
        result["structuredContent"]["content"], "hello inspector\n",
        "{out}"
    );

    // without the header, or with a wrong token: refused with a Bearer challenge, not an OAuth
    // dance
    for token in ["", "not-a-token"] {
        let (code, out, err) = inspector(&g, token, &["--method", "tools/list"]).await;
        assert_ne!(code, 0, "{out}");
        assert!(err.contains("bearer"), "{token:?}: {err}");
        assert!(
            !err.contains("TTY"),
            "{token:?}: the client went into OAuth: {err}"
        );
    }
    // What a client and a person are told, and that there is no OAuth to discover.
    let (status, headers, body) = glovebox_e2e::http_request(
        &g.url,
        "POST",
        "/mcp",
        &[
            ("authorization", "Bearer wrong"),
            ("content-type", "application/json"),
        ],
        "{}",
    )
    .await;
    assert_eq!(status, 401);
    let challenge = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("www-authenticate"))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    assert!(
        challenge.starts_with("Bearer realm=\"glovebox\""),
        "{challenge}"
    );
    assert!(!challenge.contains("resource_metadata"), "{challenge}");
    assert!(body.contains("glovebox token show"), "{body}");
    for discovery in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-authorization-server",
    ] {
        let (status, _, body) = glovebox_e2e::http_request(&g.url, "GET", discovery, &[], "").await;
        assert_eq!(status, 404, "{discovery}");
        assert!(body.contains("does not use OAuth"), "{discovery}: {body}");
    }
}

#[tokio::test]
async fn a_switched_off_accounts_mcp_client_lists_no_tools_until_it_is_enabled() {
    let g = Glovebox::start_with(Options {
        accounts: vec![("alice".into(), true), ("bob".into(), false)],
        ..Default::default()
    });
    let mut bob = McpClient::start(&g, Sdk::Python, Transport::Http, &g.token_of("bob"));
    assert_eq!(bob.names().await, Vec::<String>::new());
    let mut alice = McpClient::start(&g, Sdk::Python, Transport::Http, &g.token_of("alice"));
    let alices = alice.names().await;
    assert!(alices.iter().any(|t| t == "file_read"), "{alices:?}");

    // switched on by the administrator (at the gate): bob's session hears it
    let (code, out, err) = g.run_cli(&["enable", "--account", "bob"]);
    assert_eq!(code, 0, "{out}{err}");
    bob.wait_change().await;
    assert_eq!(
        bob.names().await,
        alices,
        "an enabled account lists what a desktop hello_ok does"
    );
}

#[tokio::test]
async fn the_mcp_endpoint_requires_a_valid_token() {
    let g = Glovebox::start();
    let url = mcp_url(&g);
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    for auth in [vec![], vec![("Authorization", "Bearer wrong")]] {
        let mut headers = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        headers.extend(auth.iter().copied());
        let (status, response_headers, _) =
            glovebox_e2e::http_request(&url, "POST", "/mcp", &headers, body).await;
        assert_eq!(status, 401, "{auth:?}");
        assert!(
            response_headers
                .iter()
                .any(|(k, v)| k == "www-authenticate" && v.starts_with("Bearer")),
            "{response_headers:?}"
        );
    }
}

/// The stdio bridge drives pipe and socket stdio from its event loop (non-blocking), and puts
/// the descriptors back as it found them when it exits: the launching shell shares them.
#[tokio::test]
async fn the_stdio_bridge_answers_over_pipes_and_sockets_and_leaves_them_blocking() {
    use std::io::{BufRead, Write};
    use std::os::fd::{AsFd, OwnedFd};
    use std::process::{Command, Stdio};

    use nix::fcntl::{FcntlArg, OFlag, fcntl};

    let g = Glovebox::start();
    std::fs::write(g.workdir.join("hello.txt"), "hello over stdio\n").unwrap();
    let nonblocking = |fd: &OwnedFd| {
        OFlag::from_bits_truncate(fcntl(fd.as_fd(), FcntlArg::F_GETFL).unwrap())
            .contains(OFlag::O_NONBLOCK)
    };
    let requests = [
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "e2e", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "file_read", "arguments": {"path": "hello.txt"}}}),
    ];
    // (`2>&1`: stderr is the stdout pipe, which then keeps the blocking way, diagnostics and all)
    for kind in ["pipes", "sockets", "pipes, 2>&1"] {
        // One channel each way: (the bridge's end, ours), as pipes or socket pairs.
        let channel = |bridge_reads: bool| -> (OwnedFd, OwnedFd) {
            if kind.starts_with("pipes") {
                let (r, w) = std::io::pipe().unwrap();
                let (r, w) = (OwnedFd::from(r), OwnedFd::from(w));
                if bridge_reads { (r, w) } else { (w, r) }
            } else {
                let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
                (b.into(), a.into())
            }
        };
        let (child_in, ours_in) = channel(true);
        let (child_out, ours_out) = channel(false);
        let (mut ours_in, ours_out) = (std::fs::File::from(ours_in), std::fs::File::from(ours_out));
        // A copy of the bridge's ends, to see their modes.
        let theirs: Vec<OwnedFd> = [&child_in, &child_out]
            .map(|fd| fd.try_clone().unwrap())
            .into();
        assert!(theirs.iter().all(|fd| !nonblocking(fd)), "{kind}");
        let stderr = if kind == "pipes, 2>&1" {
            Stdio::from(child_out.try_clone().unwrap())
        } else {
            Stdio::null()
        };
        let mut bridge = Command::new(glovebox_e2e::glovebox_bin())
            .args(["mcp", "--state-dir"])
            .arg(&g.state)
            .stdin(Stdio::from(child_in))
            .stdout(Stdio::from(child_out))
            .stderr(stderr)
            .spawn()
            .unwrap();
        let requests = requests.clone();
        let answers = tokio::task::spawn_blocking(move || {
            for request in &requests {
                writeln!(ours_in, "{request}").unwrap();
            }
            let mut lines = std::io::BufReader::new(ours_out).lines();
            let mut answers = Vec::new();
            while answers.len() < 2 {
                let line = lines.next().expect("the bridge answers").unwrap();
                if !line.starts_with("glovebox mcp:") {
                    answers.push(serde_json::from_str::<Value>(&line).unwrap());
                }
            }
            // While it serves, its ends are non-blocking (the event loop drives them).
            let serving: Vec<bool> = theirs.iter().map(nonblocking).collect();
            drop(ours_in);
            (answers, serving, theirs)
        })
        .await
        .unwrap();
        let (answers, serving, theirs) = answers;
        let status = tokio::task::spawn_blocking(move || bridge.wait().unwrap())
            .await
            .unwrap();
        assert!(status.success(), "{kind}: {status}");
        let read = answers
            .iter()
            .find(|a| a["id"] == 1)
            .expect("the call's answer");
        assert_eq!(read["result"]["isError"], false, "{kind}: {read}");
        assert_eq!(
            read["result"]["structuredContent"]["content"], "hello over stdio\n",
            "{kind}: {read}"
        );
        let driven = if kind == "pipes, 2>&1" {
            [true, false]
        } else {
            [true, true]
        };
        assert_eq!(serving, driven, "{kind}: driven by the event loop");
        assert!(
            theirs.iter().all(|fd| !nonblocking(fd)),
            "{kind}: left non-blocking after the bridge exited"
        );
    }
}

/// A 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE,
    0x42, 0x60, 0x82,
];

/// `file_read_media` reaches every MCP client as a real image block (its bytes and the type read
/// from them, whatever the name says), and a file named like a picture that is not one is an
/// error; on the floor it is refused like any read.
#[tokio::test]
async fn a_media_read_is_an_image_block_for_every_client_and_the_name_decides_nothing() {
    use base64::Engine;
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("pixel.png"), PNG).unwrap();
    std::fs::write(g.workdir.join("really-a-png.jpg"), PNG).unwrap();
    std::fs::write(g.workdir.join("fake.png"), "text in disguise").unwrap();
    std::fs::create_dir_all(g.workdir.join(".ssh")).unwrap();
    std::fs::write(g.workdir.join(".ssh/face.png"), PNG).unwrap();
    let want = base64::engine::general_purpose::STANDARD.encode(PNG);
    for (sdk, transport) in CLIENTS {
        let mut c = McpClient::start(&g, sdk, transport, &g.token);
        let label = c.label.clone();
        let r = c
            .call("m", "file_read_media", json!({"path": "pixel.png"}))
            .await;
        assert_eq!(r["is_error"], false, "{label}: {r}");
        assert_eq!(r["types"][0], "image", "{label}: {r}");
        assert_eq!(r["content"][0]["data"], want, "{label}");
        assert_eq!(r["content"][0]["mimeType"], "image/png", "{label}");
        assert_eq!(r["structured"]["bytes"], PNG.len(), "{label}: {r}");
        let jpg = c
            .call("j", "file_read_media", json!({"path": "really-a-png.jpg"}))
            .await;
        assert_eq!(jpg["content"][0]["mimeType"], "image/png", "{label}: {jpg}");
        let fake = c
            .call("f", "file_read_media", json!({"path": "fake.png"}))
            .await;
        assert_eq!(fake["is_error"], true, "{label}: {fake}");
        assert!(
            fake["text"].as_str().unwrap().contains("no type it knows"),
            "{label}: {fake}"
        );
        let floor = c
            .call("s", "file_read_media", json!({"path": ".ssh/face.png"}))
            .await;
        assert_eq!(floor["is_error"], true, "{label}: {floor}");
        assert!(
            floor["text"].as_str().unwrap().contains("floor:.ssh"),
            "{label}: {floor}"
        );
        c.quit().await;
    }
}

/// The tools agents expect from other servers, called by both SDKs over both transports: each
/// result passes the SDK's check against the tool's outputSchema and says what it should.
#[tokio::test]
async fn the_newer_file_tools_answer_every_client_within_their_output_schemas() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::create_dir_all(g.workdir.join("src")).unwrap();
    std::fs::write(g.workdir.join("src/lib.rs"), "").unwrap();
    let mut approver = g.connect("approver").await;
    for (i, (sdk, transport)) in CLIENTS.into_iter().enumerate() {
        let mut c = McpClient::start(&g, sdk, transport, &g.token);
        let label = c.label.clone();
        let ok = |r: &Value, what: &str| {
            assert!(r.get("exception").is_none(), "{label} {what}: {r}");
            assert_eq!(r["is_error"], false, "{label} {what}: {r}");
        };
        let info = c.call("i", "file_info", json!({"path": "a.txt"})).await;
        ok(&info, "file_info");
        assert_eq!(info["structured"]["size"], 8, "{label}: {info}");
        let roots = c.call("r", "file_roots", json!({})).await;
        ok(&roots, "file_roots");
        assert_eq!(roots["structured"]["workdir"], json!(g.workdir), "{label}");
        let many = c
            .call(
                "m",
                "file_read_many",
                json!({"paths": ["a.txt", "src/lib.rs"]}),
            )
            .await;
        ok(&many, "file_read_many");
        assert_eq!(
            many["structured"]["files"][0]["content"], "one\ntwo\n",
            "{label}"
        );
        let tree = c.call("t", "file_tree", json!({})).await;
        ok(&tree, "file_tree");
        assert!(
            tree["text"].as_str().unwrap().contains("lib.rs"),
            "{label}: {tree}"
        );
        // The ones that change something ask.
        c.start_call(
            "d",
            "file_edit",
            json!({"path": "a.txt", "dry_run": true,
                   "edits": [{"old_string": "two", "new_string": "2"}]}),
        )
        .await;
        let ask = approver.next_ask().await;
        approver.answer(&ask, "once").await;
        let dry = c.result("d").await;
        ok(&dry, "file_edit dry run");
        assert_eq!(dry["structured"]["dry_run"], true, "{label}: {dry}");
        let dir = format!("made-{i}/sub");
        c.start_call("k", "file_mkdir", json!({ "path": dir }))
            .await;
        let ask = approver.next_ask().await;
        approver.answer(&ask, "once").await;
        let made = c.result("k").await;
        ok(&made, "file_mkdir");
        assert_eq!(made["structured"]["created"], true, "{label}: {made}");
        c.quit().await;
    }
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("a.txt")).unwrap(),
        "one\ntwo\n",
        "dry runs wrote nothing"
    );
}

/// `glovebox mcp` with an account it has no token for, or a token the broker refuses, exits at
/// once saying so, rather than serving an empty tool list and "not reachable" forever.
#[tokio::test]
async fn the_bridge_fails_fast_on_an_unknown_account_or_a_refused_token() {
    let g = Glovebox::start();
    let state = g.state.display().to_string();
    let started = std::time::Instant::now();
    let (code, _, err) =
        glovebox_e2e::run_glovebox(&["mcp", "--state-dir", &state, "--account", "nobody"]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("nobody"), "{err}");
    // A token the broker does not know (as after a rotation elsewhere).
    let token_file = g.state.join(format!("accounts/{}/token", g.account));
    std::fs::write(&token_file, "0".repeat(64)).unwrap();
    let (code, _, err) = glovebox_e2e::run_glovebox(&["mcp", "--state-dir", &state]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("refused"), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "failing took {:?}",
        started.elapsed()
    );
}
