//! The front door under hostile load, one defence a test: deadlines for a request's headers, for
//! hello and for a silent WebSocket; connection caps per account and per local user before
//! authentication, with a reserve of descriptors the broker keeps for itself; MCP sessions capped
//! per account and ended when unused; `/healthz` that tells strangers only up or down. Timeouts
//! are set short in `glovebox.yaml`'s `limits:` so nothing here waits long.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use glovebox_e2e::{Auth, Glovebox, Options, WAIT, expect_ok, http_request, open};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn addr(g: &Glovebox) -> String {
    g.url
        .trim_start_matches("ws://")
        .trim_end_matches("/v1/ws")
        .to_owned()
}

fn with_limits(accounts: &[&str], limits: &[&str]) -> Glovebox {
    Glovebox::start_with(Options {
        accounts: accounts.iter().map(|a| (a.to_string(), true)).collect(),
        limits: limits.iter().map(|l| l.to_string()).collect(),
        ..Options::default()
    })
}

/// Reads until the server closes the connection (or `WAIT` passes: then panics); returns what
/// arrived.
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(WAIT, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return all,
            Ok(Ok(n)) => all.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the broker kept the connection open"),
        }
    }
}

#[tokio::test]
async fn a_request_whose_headers_never_end_is_closed() {
    let g = with_limits(&["alpha"], &["header_timeout_secs: 1"]);
    let mut half = TcpStream::connect(addr(&g)).await.unwrap();
    half.write_all(b"GET /v1/ws HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    let mut silent = TcpStream::connect(addr(&g)).await.unwrap();
    // Both are closed at the deadline, with no response to a request that never arrived whole.
    read_until_closed(&mut half).await;
    assert!(read_until_closed(&mut silent).await.is_empty());
    // The broker still serves.
    expect_ok(
        &g.connect("agent")
            .await
            .invoke("r", "file_list", json!({"path": "."}))
            .await,
    );
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_its_response() {
    let g = with_limits(&["alpha"], &["header_timeout_secs: 1"]);
    let mut stream = TcpStream::connect(addr(&g)).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    // The response arrives, then nothing more is asked: the connection ends.
    let got = String::from_utf8_lossy(&read_until_closed(&mut stream).await).into_owned();
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
}

#[tokio::test]
async fn a_websocket_that_never_says_hello_is_closed() {
    let g = with_limits(&["alpha"], &["hello_timeout_secs: 1"]);
    let (mut socket, _) = open(&g.url, Auth::Header(&g.token)).await.unwrap();
    use futures_util::StreamExt;
    let mut saw_error = false;
    loop {
        match tokio::time::timeout(WAIT, socket.next()).await.unwrap() {
            Some(Ok(tokio_tungstenite::tungstenite::Message::Text(t))) => {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                assert_eq!(v["type"], "error", "{v}");
                assert!(v["message"].as_str().unwrap().contains("hello"), "{v}");
                saw_error = true;
            }
            Some(Ok(tokio_tungstenite::tungstenite::Message::Close(_))) | None | Some(Err(_)) => {
                break;
            }
            Some(Ok(_)) => {}
        }
    }
    assert!(saw_error);
}

/// A WebSocket client that upgrades and says hello by hand, then reads raw frames without ever
/// answering a ping (as a client that stopped reading would).
async fn silent_websocket(g: &Glovebox) -> TcpStream {
    let mut stream = TcpStream::connect(addr(g)).await.unwrap();
    let request = format!(
        "GET /v1/ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Authorization: Bearer {}\r\n\r\n",
        g.token
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{head:?}");
    // A masked text frame (the mask is zero, so the payload is sent as is).
    let hello = json!({"type": "hello", "role": "agent"}).to_string();
    let mut frame = vec![0x81, 0x80 | hello.len() as u8, 0, 0, 0, 0];
    frame.extend_from_slice(hello.as_bytes());
    stream.write_all(&frame).await.unwrap();
    stream
}

/// Reads raw server frames until a close frame; returns its code and the opcodes seen before.
async fn close_code(stream: &mut TcpStream) -> (u16, Vec<u8>) {
    let mut seen = Vec::new();
    loop {
        let mut head = [0u8; 2];
        tokio::time::timeout(WAIT, stream.read_exact(&mut head))
            .await
            .expect("the broker kept a silent WebSocket open")
            .unwrap();
        let opcode = head[0] & 0x0f;
        let len = match head[1] & 0x7f {
            126 => {
                let mut l = [0u8; 2];
                stream.read_exact(&mut l).await.unwrap();
                u16::from_be_bytes(l) as usize
            }
            127 => {
                let mut l = [0u8; 8];
                stream.read_exact(&mut l).await.unwrap();
                u64::from_be_bytes(l) as usize
            }
            n => n as usize,
        };
        let mut payload = vec![0u8; len];
        stream.read_exact(&mut payload).await.unwrap();
        if opcode == 0x8 {
            return (u16::from_be_bytes([payload[0], payload[1]]), seen);
        }
        seen.push(opcode);
    }
}

#[tokio::test]
async fn a_websocket_that_answers_no_ping_is_closed_as_idle() {
    let g = with_limits(&["alpha"], &["websocket_idle_secs: 2"]);
    let mut stream = silent_websocket(&g).await;
    let (code, seen) = close_code(&mut stream).await;
    assert_eq!(code, 1001, "going away: idle");
    assert_eq!(seen.first(), Some(&0x1), "hello_ok came first: {seen:?}");
    assert!(
        seen.contains(&0x9),
        "the broker pinged before giving up: {seen:?}"
    );
}

#[tokio::test]
async fn a_websocket_that_answers_pings_stays_open_while_idle() {
    let g = with_limits(&["alpha"], &["websocket_idle_secs: 1"]);
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let mut agent = g.connect("agent").await;
    // Three idle periods of reading (the client answers each ping), and the connection works.
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let quiet_until = tokio::time::Instant::now() + Duration::from_secs(3);
    let mut pings = 0;
    while let Ok(next) = tokio::time::timeout_at(quiet_until, agent.socket.next()).await {
        match next {
            Some(Ok(Message::Ping(_))) => pings += 1,
            // A notice the broker sends unasked (the account's tools changed as its pack host
            // started) is not a close.
            Some(Ok(Message::Text(_))) => {}
            other => panic!("the connection should stay open: {other:?}"),
        }
    }
    assert!(pings >= 3, "{pings} pings");
    expect_ok(
        &agent
            .invoke("r", "file_read", json!({"path": "a.txt"}))
            .await,
    );
}

#[tokio::test]
async fn an_account_at_its_connection_cap_is_refused_while_another_connects() {
    let g = with_limits(&["alpha", "beta"], &["connections_per_account: 3"]);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(g.connect_as("alpha", "agent").await);
    }
    let refused = open(&g.url, Auth::Header(&g.token_of("alpha"))).await;
    assert_eq!(refused.err(), Some(503));
    // MCP and the providers' endpoint count against the same cap.
    let mcp_url = g.url.replace("/v1/ws", "");
    let bearer = format!("Bearer {}", g.token_of("alpha"));
    let (status, _, body) = http_request(
        &mcp_url,
        "POST",
        "/mcp",
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
        ],
        "{}",
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("too many connections for this account"),
        "{body}"
    );
    // Another account is not locked out, and its approver connects too.
    let mut beta = g.connect_as("beta", "agent").await;
    let _beta_approver = g.connect_as("beta", "approver").await;
    expect_ok(&beta.invoke("l", "file_list", json!({"path": "."})).await);
    // A place is free again once a connection closes.
    drop(held.pop());
    let token = g.token_of("alpha");
    let deadline = std::time::Instant::now() + WAIT;
    while open(&g.url, Auth::Header(&token)).await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "no place for alpha again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn nobody() -> Option<u32> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: another local user needs root");
        return None;
    }
    Some(
        nix::unistd::User::from_name("nobody")
            .unwrap()
            .unwrap()
            .uid
            .as_raw(),
    )
}

/// Starts the load benchmark's attacker as `uid`: it opens `n` connections that send nothing and
/// reports each second how many are still open. Returns it and a reader of its reports.
fn silent_sockets(
    g: &Glovebox,
    uid: u32,
    n: usize,
) -> (std::process::Child, std::sync::mpsc::Receiver<Value>) {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_glovebox-load-bench"))
        .args(["attack", "idle", &addr(g), &n.to_string(), "60"])
        .uid(uid)
        .gid(uid)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if let Ok(v) = serde_json::from_str(&line) {
                let _ = tx.send(v);
            }
        }
    });
    (child, rx)
}

/// Waits until the attacker reports `open` sockets still open after it opened them all.
fn attacker_settles_at(reports: &std::sync::mpsc::Receiver<Value>, open: u64) -> Value {
    let mut last = Value::Null;
    for _ in 0..10 {
        last = reports.recv_timeout(WAIT).unwrap();
        if last["t"].as_u64() >= Some(1) && last["open"] == open {
            return last;
        }
    }
    panic!("the attacker still holds other than {open} sockets: {last}");
}

#[tokio::test]
async fn unauthenticated_connections_are_capped_per_local_user() {
    let Some(uid) = nobody() else { return };
    let g = with_limits(
        &["alpha"],
        &["connections_per_peer: 4", "header_timeout_secs: 60"],
    );
    let (mut attacker, reports) = silent_sockets(&g, uid, 10);
    let settled = attacker_settles_at(&reports, 4);
    assert_eq!(settled["opened"], 10, "{settled}");
    // Another user (this one) is not held to that user's cap.
    let mut extra = Vec::new();
    for _ in 0..3 {
        extra.push(TcpStream::connect(addr(&g)).await.unwrap());
    }
    let mut agent = g.connect("agent").await;
    expect_ok(&agent.invoke("l", "file_list", json!({"path": "."})).await);
    let _ = attacker.kill();
    let _ = attacker.wait();
}

#[tokio::test]
async fn silent_sockets_cannot_take_the_descriptors_the_broker_needs() {
    let Some(uid) = nobody() else { return };
    let g = Glovebox::start_with(Options {
        accounts: vec![("alpha".into(), true)],
        limits: vec!["header_timeout_secs: 60".into()],
        // 256 descriptors: 80 kept for the broker, 176 for clients, 44 of them unauthenticated,
        // 22 of those for one local user at most.
        open_files_limit: Some(256),
        ..Options::default()
    });
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let mut before = g.connect("agent").await;
    let (mut attacker, reports) = silent_sockets(&g, uid, 400);
    let settled = attacker_settles_at(&reports, 22);
    assert_eq!(settled["opened"], 400, "{settled}");
    // A connection made before goes on working, a new one is made, and the broker reaches the
    // gate and the executor (a call needs both) and answers health.
    expect_ok(
        &before
            .invoke("r1", "file_read", json!({"path": "a.txt"}))
            .await,
    );
    let mut after = g.connect("agent").await;
    expect_ok(
        &after
            .invoke("r2", "file_read", json!({"path": "a.txt"}))
            .await,
    );
    let (status, _, body) = http_request(&g.url, "GET", "/healthz", &[], "").await;
    assert_eq!(status, 200, "{body}");
    let _ = attacker.kill();
    let _ = attacker.wait();
}

/// An MCP `initialize` as `token`; returns the status and the session id, if one was created.
async fn initialize(g: &Glovebox, token: &str) -> (u16, Option<String>) {
    let bearer = format!("Bearer {token}");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "limits", "version": "0"}}})
    .to_string();
    let (status, headers, _) = http_request(
        &g.url,
        "POST",
        "/mcp",
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ],
        &body,
    )
    .await;
    let session = headers
        .into_iter()
        .find(|(k, _)| k == "mcp-session-id")
        .map(|(_, v)| v);
    (status, session)
}

#[tokio::test]
async fn an_mcp_session_past_its_account_cap_is_refused() {
    let g = with_limits(&["alpha", "beta"], &["mcp_sessions_per_account: 2"]);
    let alpha = g.token_of("alpha");
    let (_, first) = initialize(&g, &alpha).await;
    let (_, second) = initialize(&g, &alpha).await;
    let (first, _second) = (first.unwrap(), second.unwrap());
    assert_eq!(initialize(&g, &alpha).await, (503, None));
    // Another account's sessions are its own.
    assert!(initialize(&g, &g.token_of("beta")).await.1.is_some());
    // Ending a session gives its place back.
    let bearer = format!("Bearer {alpha}");
    let (status, _, _) = http_request(
        &g.url,
        "DELETE",
        "/mcp",
        &[("authorization", &bearer), ("mcp-session-id", &first)],
        "",
    )
    .await;
    assert!((200..300).contains(&status), "{status}");
    assert!(initialize(&g, &alpha).await.1.is_some());
}

#[tokio::test]
async fn an_unused_mcp_session_ends_and_gives_its_place_back() {
    let g = with_limits(
        &["alpha"],
        &["mcp_sessions_per_account: 1", "mcp_session_idle_secs: 1"],
    );
    let (_, session) = initialize(&g, &g.token).await;
    let session = session.unwrap();
    // Unused, it ends: its id is unknown again, and the account may open another.
    let bearer = format!("Bearer {}", g.token);
    let mut ended = false;
    for _ in 0..(WAIT.as_secs() * 4) {
        let (status, _, _) = http_request(
            &g.url,
            "GET",
            "/mcp",
            &[
                ("authorization", &bearer),
                ("mcp-session-id", &session),
                ("accept", "text/event-stream"),
            ],
            "",
        )
        .await;
        if status == 404 {
            ended = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(ended, "the session never ended");
    assert!(initialize(&g, &g.token).await.1.is_some());
}

#[tokio::test]
async fn healthz_tells_strangers_only_up_or_down() {
    let g = with_limits(&["alpha", "beta"], &[]);
    for auth in [None, Some(g.token_of("alpha"))] {
        let bearer = auth.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = bearer
            .iter()
            .map(|b| ("authorization", b.as_str()))
            .collect();
        let (status, _, body) = http_request(&g.url, "GET", "/healthz", &headers, "").await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            v,
            json!({"ok": true}),
            "an agent credential changes nothing"
        );
        assert!(!body.contains("alpha") && !body.contains("beta"), "{body}");
    }
    // The approver of an account sees the details of its own account and the global status.
    let bearer = format!("Bearer {}", g.credential_of("beta", "approver"));
    let (status, _, body) =
        http_request(&g.url, "GET", "/healthz", &[("authorization", &bearer)], "").await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["gate"], "reachable");
    assert_eq!(v["executors"]["beta"]["reachable"], true, "{v}");
    assert!(v["executors"].get("alpha").is_none(), "{v}");
    assert!(!body.contains("alpha"), "{body}");
}

#[tokio::test]
async fn an_account_past_its_running_calls_waits_and_another_account_does_not() {
    let g = with_limits(&["alpha", "beta"], &["calls_per_account: 1"]);
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let alpha_token = g.token_of("alpha");
    let mut provider = crate::client_tools::open_provider(&g, &alpha_token)
        .await
        .unwrap();
    provider.register(&["slow"]).await;
    let mut approver = g.connect_as("alpha", "approver").await;
    let mut alpha = g.connect_as("alpha", "agent").await;
    // A client tool the provider does not answer yet holds alpha's one running place.
    alpha
        .send(json!({"type": "invoke", "call_id": "slow", "tool": "client__slow", "params": {}}))
        .await;
    let ask = approver.next_ask().await;
    approver.answer(&ask, "once").await;
    let invoke = provider.next().await;
    assert_eq!(invoke["type"], "invoke", "{invoke}");
    alpha
        .send(
            json!({"type": "invoke", "call_id": "r", "tool": "file_read",
            "params": {"path": "a.txt"}}),
        )
        .await;
    // Another account's calls do not wait for alpha's.
    let mut beta = g.connect_as("beta", "agent").await;
    expect_ok(&beta.invoke("l", "file_list", json!({"path": "."})).await);
    // alpha's read has not run: nothing arrives until the provider answers.
    let early = tokio::time::timeout(Duration::from_millis(500), alpha.next()).await;
    assert!(
        early.is_err(),
        "alpha's second call ran past its cap: {early:?}"
    );
    provider
        .send(json!({"type": "result", "call_id": invoke["call_id"], "ok": true, "output": "done"}))
        .await;
    let mut results = std::collections::HashMap::new();
    while results.len() < 2 {
        let frame = alpha.next().await;
        if frame["type"] == "result" {
            results.insert(frame["call_id"].as_str().unwrap().to_owned(), frame);
        }
    }
    expect_ok(&results["slow"]);
    expect_ok(&results["r"]);
}

/// A call waiting for a person sets its place aside: with one running call allowed, the
/// account's other calls run while the approver thinks.
#[tokio::test]
async fn a_call_waiting_for_an_approver_does_not_hold_up_the_account() {
    let g = with_limits(&["alpha"], &["calls_per_account: 1"]);
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let mut approver = g.connect_as("alpha", "approver").await;
    let mut alpha = g.connect_as("alpha", "agent").await;
    alpha
        .send(
            json!({"type": "invoke", "call_id": "w", "tool": "file_write",
            "params": {"path": "b.txt", "content": "b"}}),
        )
        .await;
    let ask = approver.next_ask().await;
    // The ask is pending; a read of the same account runs now.
    expect_ok(
        &alpha
            .invoke("r", "file_read", json!({"path": "a.txt"}))
            .await,
    );
    approver.answer(&ask, "once").await;
    expect_ok(&alpha.result_for("w").await);
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("b.txt")).unwrap(),
        "b"
    );
}

/// A WebSocket upgrade over the broker's Unix socket with `token` (none: no credential).
async fn local_upgrade(
    g: &Glovebox,
    token: Option<&str>,
) -> Result<
    tokio_tungstenite::WebSocketStream<tokio::net::UnixStream>,
    tokio_tungstenite::tungstenite::Error,
> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let stream = tokio::net::UnixStream::connect(g.state.join("run/broker.sock"))
        .await
        .unwrap();
    let mut request = g.url.as_str().into_client_request().unwrap();
    if let Some(token) = token {
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    tokio_tungstenite::client_async(request, stream)
        .await
        .map(|(socket, _)| socket)
}

/// The broker's Unix socket is its front door for local clients: private to the user, the same
/// credentials, the same per-user caps as its TCP port (the peer's uid from the kernel), and what
/// `glovebox call` and `glovebox mcp` use when it is there.
#[tokio::test]
async fn the_local_socket_takes_the_same_credentials_and_caps_as_the_port() {
    use futures_util::{SinkExt, StreamExt};
    use std::os::unix::fs::PermissionsExt;
    use tokio_tungstenite::tungstenite::{Error, Message};
    let g = with_limits(
        &["alpha"],
        &["connections_per_peer: 4", "header_timeout_secs: 60"],
    );
    let socket = g.state.join("run/broker.sock");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(
        mode(&g.state.join("run")) & 0o077,
        0,
        "the run directory is private"
    );

    // No credential, or a wrong one: refused as on the port.
    for token in [None, Some("gbx_not-a-token")] {
        match local_upgrade(&g, token).await {
            Err(Error::Http(response)) => assert_eq!(response.status(), 401, "{token:?}"),
            other => panic!("{token:?}: {:?}", other.map(|_| ())),
        }
    }
    // The agent's token: an agent connection.
    let token = g.credential_of("alpha", "agent");
    let mut ws = local_upgrade(&g, Some(&token)).await.unwrap();
    let hello = json!({"type": "hello", "role": "agent"}).to_string();
    ws.send(Message::Text(hello.into())).await.unwrap();
    let Some(Ok(Message::Text(frame))) = ws.next().await else {
        panic!("no answer to hello");
    };
    assert!(frame.contains("hello_ok"), "{frame}");
    drop(ws);

    // This user's silent connections count against its cap whichever socket they come by: four
    // on the Unix socket take it; the next, on the socket or the port, sheds the oldest silent
    // one (closed by the broker, unanswered) and is served in its place.
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(tokio::net::UnixStream::connect(&socket).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut newcomer = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, silent[0].read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert!(answer.is_empty(), "shed without an answer");
    let mut tcp = TcpStream::connect(addr(&g)).await.unwrap();
    tokio::time::timeout(WAIT, silent[1].read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert!(answer.is_empty());
    // The newcomers hold their places: nothing is sent to them, nothing closes them.
    let mut byte = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_millis(300), newcomer.read(&mut byte))
            .await
            .is_err()
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), tcp.read(&mut byte))
            .await
            .is_err()
    );
    drop((silent, newcomer, tcp));

    // `glovebox call` goes by the socket: it works with the URL file naming a closed port, and
    // not once the socket is gone.
    let url_file = g.state.join("run/broker.url");
    std::fs::write(&url_file, "ws://127.0.0.1:1/v1/ws\n").unwrap();
    let (code, out, err) = g.run_cli(&["call", "file_list", r#"{"path":"."}"#]);
    assert_eq!(code, 0, "{out}{err}");
    std::fs::rename(&socket, g.state.join("run/moved.sock")).unwrap();
    let (code, _, err) = g.run_cli(&["call", "file_list", r#"{"path":"."}"#]);
    assert_ne!(code, 0);
    assert!(err.contains("cannot reach glovebox"), "{err}");
}
