//! `glovebox mcp` handing its stdio to the broker (`GET /v1/stdio` on the broker's Unix socket):
//! the broker serves the session on the client's own pipes, a call in flight when the broker
//! dies is answered by the bridge, the session goes on with the next broker, a killed bridge
//! ends its session, a session acts for its token's account alone, and the endpoint refuses
//! every handover it should, reading nothing from a refused client's pipe. A bridge that cannot
//! hand over (here, given a URL) still forwards. (What a job can do to a running bridge is in
//! `principals`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Duration;

use glovebox_e2e::stdio_bridge::{Bridge, text_of};
use glovebox_e2e::{Glovebox, WAIT};
use serde_json::json;

#[tokio::test]
async fn the_broker_serves_a_handed_over_session_even_with_the_bridge_stopped() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("hello.txt"), "hello, handed over\n").unwrap();
    let mut bridge = Bridge::start(&g);
    // Stopped, the bridge can forward nothing: the broker answers on the client's pipes itself.
    bridge.signal(nix::sys::signal::Signal::SIGSTOP);
    bridge.call("read", "file_read", json!({"path": "hello.txt"}));
    let read = bridge.answer("read");
    assert_eq!(read["result"]["isError"], false, "{read}");
    assert_eq!(
        read["result"]["structuredContent"]["content"], "hello, handed over\n",
        "{read}"
    );
    bridge.send(json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"}));
    let list = bridge.answer("list");
    assert_eq!(
        list["result"]["tools"].as_array().unwrap().len(),
        glovebox_proto::tools::Tool::ALL.len(),
        "{list}"
    );
    bridge.signal(nix::sys::signal::Signal::SIGCONT);
    bridge.assert_said("the broker serves this session");
    // Closing stdin ends the session; the broker says so and the bridge exits cleanly.
    let Bridge { mut child, to, .. } = bridge;
    drop(to);
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn a_handed_over_session_acts_for_its_tokens_account_alone() {
    let g = Glovebox::start_with(glovebox_e2e::Options {
        accounts: vec![("alice".into(), true), ("bob".into(), false)],
        ..Default::default()
    });
    let list = |bridge: &mut Bridge| {
        bridge.send(json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"}));
        bridge.answer("list")["result"]["tools"]
            .as_array()
            .unwrap()
            .len()
    };
    let mut alice = Bridge::start_in(&g.state, &["--account", "alice"]);
    let mut bob = Bridge::start_in(&g.state, &["--account", "bob"]);
    for b in [&alice, &bob] {
        b.assert_said("the broker serves this session");
    }
    assert_eq!(list(&mut alice), glovebox_proto::tools::Tool::ALL.len());
    // Bob's tools are switched off: his session, on the same broker, neither lists nor calls.
    assert_eq!(list(&mut bob), 0);
    bob.call("read", "file_list", json!({"path": "."}));
    let refused = bob.answer("read");
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    alice.call("read", "file_list", json!({"path": "."}));
    let listed = alice.answer("read");
    assert_eq!(listed["result"]["isError"], false, "{listed}");
}

#[tokio::test]
async fn a_bridge_started_before_the_broker_hands_over_once_it_is_up() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("hello.txt"), "hello, late broker\n").unwrap();
    // No broker while the bridge starts: the supervisor is held and cannot restart it.
    let up = Pid::from_raw(g.up_pid().unwrap());
    kill(up, Signal::SIGSTOP).unwrap();
    let old = g.kill_service("broker");
    let started = std::thread::spawn({
        let state = g.state.clone();
        move || Bridge::start_in(&state, &[])
    });
    std::thread::sleep(Duration::from_millis(700));
    kill(up, Signal::SIGCONT).unwrap();
    g.await_restart("broker", old).await;
    let mut bridge = tokio::task::spawn_blocking(move || started.join().unwrap())
        .await
        .unwrap();
    // Handed over, not forwarding: it answers with the bridge stopped.
    bridge.signal(Signal::SIGSTOP);
    bridge.call("read", "file_read", json!({"path": "hello.txt"}));
    let read = bridge.answer("read");
    bridge.signal(Signal::SIGCONT);
    assert_eq!(read["result"]["isError"], false, "{read}");
    bridge.assert_said("the broker serves this session");
}

#[tokio::test]
async fn a_call_in_flight_when_the_broker_stops_is_answered_and_the_session_goes_on() {
    use nix::sys::signal::Signal;
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("hello.txt"), "hello again\n").unwrap();
    let mut bridge = Bridge::start(&g);
    bridge.wait_resumable();
    // Killed, or stopped gracefully (which drops its calls): either way the call is answered.
    for (round, signal) in [Signal::SIGKILL, Signal::SIGTERM].into_iter().enumerate() {
        let mut approver = g.connect("approver").await;
        let write = format!("write-{round}");
        bridge.hold_a_write(&write, &mut approver).await;
        let pids = g.service_pids("broker");
        assert_eq!(pids.len(), 1, "{pids:?}");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pids[0]), signal).unwrap();
        bridge.answered_lost(&write);
        // Made while no broker holds the session: it waits in the pipe for the next one.
        let read = format!("read-{round}");
        bridge.call(&read, "file_read", json!({"path": "hello.txt"}));
        g.await_restart("broker", pids[0]).await;
        let read = bridge.answer(&read);
        assert_eq!(read["result"]["isError"], false, "{signal}: {read}");
        assert_eq!(
            read["result"]["structuredContent"]["content"],
            "hello again\n"
        );
        // The next broker tells the client to list its tools again, and lists them.
        assert!(
            bridge
                .heard
                .iter()
                .any(|n| n["method"] == "notifications/tools/list_changed"),
            "{signal}: {:?}",
            bridge.heard
        );
        bridge.heard.clear();
        let list = format!("list-{round}");
        bridge.send(json!({"jsonrpc": "2.0", "id": list, "method": "tools/list"}));
        let tools = bridge.answer(&list)["result"]["tools"]
            .as_array()
            .unwrap()
            .len();
        assert_eq!(tools, glovebox_proto::tools::Tool::ALL.len(), "{signal}");
    }
    assert!(
        !g.workdir.join("new.txt").exists(),
        "the lost writes never ran"
    );
    bridge.assert_said("handed to the broker again");
}

#[tokio::test]
async fn while_glovebox_stays_away_the_bridge_answers_calls_saying_so_then_hands_over_again() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("hello.txt"), "hello, back\n").unwrap();
    let mut bridge = Bridge::start(&g);
    bridge.wait_resumable();
    // The supervisor is held: the broker stays away.
    let up = Pid::from_raw(g.up_pid().unwrap());
    kill(up, Signal::SIGSTOP).unwrap();
    let old = g.kill_service("broker");
    let asked = std::time::Instant::now();
    bridge.call("away", "file_read", json!({"path": "hello.txt"}));
    let away = bridge.answer("away");
    assert!(
        asked.elapsed() >= Duration::from_secs(9),
        "answered after {:?}, before the bridge's patience ran out",
        asked.elapsed()
    );
    assert_eq!(away["result"]["isError"], true, "{away}");
    assert!(text_of(&away).contains("not reachable"), "{away}");
    bridge.send(json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"}));
    assert_eq!(bridge.answer("list")["result"]["tools"], json!([]));
    kill(up, Signal::SIGCONT).unwrap();
    g.await_restart("broker", old).await;
    // Calls answered by the bridge until it has handed the session over again; then served.
    let deadline = std::time::Instant::now() + WAIT;
    for attempt in 0.. {
        let id = format!("read-{attempt}");
        bridge.call(&id, "file_read", json!({"path": "hello.txt"}));
        let read = bridge.answer(&id);
        if read["result"]["isError"] == false {
            assert_eq!(
                read["result"]["structuredContent"]["content"],
                "hello, back\n"
            );
            break;
        }
        assert!(text_of(&read).contains("not reachable"), "{read}");
        assert!(
            std::time::Instant::now() < deadline,
            "never handed over again"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bridge.assert_said("handed to the broker again");
}

#[tokio::test]
async fn a_bridge_given_a_url_forwards_and_fails_its_calls_in_flight_when_the_broker_dies() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("hello.txt"), "hello, forwarded\n").unwrap();
    // A URL of the caller's choosing has no Unix socket to hand stdio over on.
    let mut bridge = Bridge::start_in(&g.state, &["--url", &g.url]);
    let mut approver = g.connect("approver").await;
    bridge.hold_a_write("write", &mut approver).await;
    let old = g.kill_service("broker");
    bridge.answered_lost("write");
    g.await_restart("broker", old).await;
    bridge.call("read", "file_read", json!({"path": "hello.txt"}));
    let read = bridge.answer("read");
    assert_eq!(read["result"]["isError"], false, "{read}");
    assert_eq!(
        read["result"]["structuredContent"]["content"],
        "hello, forwarded\n"
    );
    let stderr = bridge.stderr();
    assert!(
        stderr.contains("serving the session through the WebSocket"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("the broker serves this session"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_client_initialization_too_long_to_hand_over_again_still_has_its_session_served() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("hello.txt"), "long name\n").unwrap();
    // Past the bound of a line the broker tells the bridge.
    let mut bridge = Bridge::start_uninitialized(&g.state, &[]);
    bridge.initialize(json!({"name": "x".repeat(100 * 1024), "version": "1"}));
    bridge.call("read", "file_read", json!({"path": "hello.txt"}));
    let read = bridge.answer("read");
    assert_eq!(read["result"]["isError"], false, "{read}");
    // The bridge did not take the line it could not read for the broker going away.
    let stderr = bridge.stderr();
    assert!(!stderr.contains("the broker stopped"), "{stderr}");
    assert!(g.stderr().contains("too long to hand over again"));
}

#[tokio::test]
async fn a_killed_bridge_ends_its_session() {
    let g = Glovebox::start();
    let mut bridge = Bridge::start(&g);
    bridge.signal(nix::sys::signal::Signal::SIGKILL);
    // The broker lets go of the client's stdout: the client reads its end.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        match bridge.from.recv_timeout(Duration::from_millis(100)) {
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            _ => assert!(
                std::time::Instant::now() < deadline,
                "the broker kept the session of a killed bridge"
            ),
        }
    }
    let _ = bridge.child.wait();
}

/// A handover to try, from the client's stdin and stdout.
type MakeOffer<'a> = Box<dyn Fn(OwnedFd, OwnedFd) -> Offer + 'a>;

/// What a handover sends: descriptors, and the line.
struct Offer {
    fds: Vec<OwnedFd>,
    line: Vec<u8>,
}

/// An upgrade request on the broker's Unix socket with `token`; the status line and the socket.
fn upgrade(g: &Glovebox, token: &str, protocol: Option<&str>) -> (String, UnixStream) {
    let mut socket = UnixStream::connect(g.state.join("run/broker.sock")).unwrap();
    socket.set_read_timeout(Some(WAIT)).unwrap();
    let upgrade = protocol
        .map(|p| format!("Connection: Upgrade\r\nUpgrade: {p}\r\n"))
        .unwrap_or_default();
    write!(
        socket,
        "GET /v1/stdio HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n{upgrade}\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(socket.read(&mut byte).unwrap(), 1, "{head:?}");
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    (head.lines().next().unwrap().to_owned(), socket)
}

/// Hands `offer` over after the broker's ready line; whether the broker then closed the
/// connection without taking the session.
fn hand(socket: &mut UnixStream, offer: Offer) -> bool {
    send_offer(socket, offer);
    let mut rest = Vec::new();
    // (Closed with bytes of ours unread, the socket is reset rather than ended.)
    match socket.read_to_end(&mut rest) {
        Ok(_) => rest.is_empty(),
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// Sends `offer` after the broker's ready line.
fn send_offer(socket: &mut UnixStream, offer: Offer) {
    let mut ready = Vec::new();
    let mut byte = [0u8];
    while !ready.ends_with(b"\n") {
        assert_eq!(socket.read(&mut byte).unwrap(), 1);
        ready.push(byte[0]);
    }
    assert_eq!(ready, b"\"ready\"\n");
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let fds: Vec<_> = offer.fds.iter().map(|fd| fd.as_fd()).collect();
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
    rustix::net::sendmsg(
        &*socket,
        &[std::io::IoSlice::new(&offer.line)],
        &mut control,
        SendFlags::NOSIGNAL,
    )
    .unwrap();
}

#[tokio::test]
async fn the_bridge_has_the_clients_initialization_before_the_client_has_its_answer() {
    // Whenever the broker dies after answering `initialize`, the bridge can hand the session to
    // the next one: the broker tells the bridge first.
    let g = Glovebox::start();
    let (stdin_r, mut stdin_w) = std::io::pipe().unwrap();
    let (stdout_r, stdout_w) = std::io::pipe().unwrap();
    let initialize = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "first-told", "version": "1"}}});
    stdin_w
        .write_all(format!("{initialize}\n").as_bytes())
        .unwrap();
    let (status, mut socket) = upgrade(&g, &g.token, Some("glovebox-stdio"));
    assert!(status.contains(" 101 "), "{status}");
    send_offer(
        &mut socket,
        Offer {
            fds: vec![stdin_r.into(), stdout_w.into(), record()],
            line: b"{\"resume\":null}\n".to_vec(),
        },
    );
    let mut answer = String::new();
    std::io::BufReader::new(stdout_r)
        .read_line(&mut answer)
        .unwrap();
    assert!(
        answer.contains("\"id\":1") && answer.contains("protocolVersion"),
        "{answer}"
    );
    // The client has its answer (and has not even said it is initialized): the bridge's line is
    // already there to read.
    socket.set_nonblocking(true).unwrap();
    let mut told = vec![0u8; 64 * 1024];
    let n = socket
        .read(&mut told)
        .expect("the bridge was not told the initialization before the client's answer");
    let told: serde_json::Value = serde_json::from_slice(&told[..n]).unwrap();
    assert_eq!(
        told["initialized"]["clientInfo"]["name"], "first-told",
        "{told}"
    );
    drop(stdin_w);
}

/// A sealed memory file the size of the in-flight record.
fn record() -> OwnedFd {
    use rustix::fs::{MemfdFlags, SealFlags, fcntl_add_seals, ftruncate, memfd_create};
    let fd = memfd_create("record", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
    ftruncate(&fd, 256 * 128).unwrap();
    fcntl_add_seals(&fd, SealFlags::GROW | SealFlags::SHRINK).unwrap();
    fd
}

#[tokio::test]
async fn the_handover_refuses_bad_credentials_sockets_and_descriptors_and_reads_nothing() {
    let g = Glovebox::start();
    let approver = g.credential_of(&g.account, "approver");
    let (status, _) = upgrade(&g, "not-a-token", Some("glovebox-stdio"));
    assert!(status.contains(" 401 "), "{status}");
    let (status, _) = upgrade(&g, &approver, Some("glovebox-stdio"));
    assert!(status.contains(" 403 "), "{status}");
    let (status, _) = upgrade(&g, &g.token, None);
    assert!(status.contains(" 400 "), "{status}");
    let (status, _) = upgrade(&g, &g.token, Some("websocket"));
    assert!(status.contains(" 400 "), "{status}");
    // Over TCP no descriptors can come: refused before any upgrade.
    let origin = g.url.trim_end_matches("/v1/ws").replace("ws://", "http://");
    let bearer = format!("Bearer {}", g.token);
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Connection", "Upgrade"),
        ("Upgrade", "glovebox-stdio"),
    ];
    let (status, _, _) =
        glovebox_e2e::http_request(&origin, "GET", "/v1/stdio", &headers, "").await;
    assert_eq!(status, 400);

    let line = b"{\"resume\":null}\n".to_vec();
    let pending = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "e2e", "version": "1"}}})
    .to_string()
        + "\n";
    let plain_file = || OwnedFd::from(tempfile::tempfile().unwrap());
    let cases: Vec<(&str, MakeOffer<'_>)> = vec![
        (
            "two descriptors",
            Box::new(|r, w| Offer {
                fds: vec![r, w],
                line: line.clone(),
            }),
        ),
        (
            "four descriptors",
            Box::new(|r, w| Offer {
                fds: vec![r, w, record(), record()],
                line: line.clone(),
            }),
        ),
        (
            "a plain file for the record",
            Box::new(|r, w| Offer {
                fds: vec![r, w, plain_file()],
                line: line.clone(),
            }),
        ),
        (
            "a file for stdout",
            Box::new(|r, _| Offer {
                fds: vec![r, plain_file(), record()],
                line: line.clone(),
            }),
        ),
        (
            "a malformed line",
            Box::new(|r, w| Offer {
                fds: vec![r, w, record()],
                line: b"{\"resume\":{\"not\":\"an initialization\"}}\n".to_vec(),
            }),
        ),
        (
            "a line too long",
            Box::new(|r, w| Offer {
                fds: vec![r, w, record()],
                line: vec![b' '; 80 * 1024],
            }),
        ),
        (
            "more than the line",
            Box::new(|r, w| Offer {
                fds: vec![r, w, record()],
                line: [&line[..], b"extra"].concat(),
            }),
        ),
    ];
    for (what, offer) in cases {
        // The client's pipes, a request already waiting in its stdin.
        let (stdin_r, mut stdin_w) = std::io::pipe().unwrap();
        let (stdout_r, stdout_w) = std::io::pipe().unwrap();
        stdin_w.write_all(pending.as_bytes()).unwrap();
        let ours = OwnedFd::from(stdin_r.try_clone().unwrap());
        let (status, mut socket) = upgrade(&g, &g.token, Some("glovebox-stdio"));
        assert!(status.contains(" 101 "), "{what}: {status}");
        let closed = hand(&mut socket, offer(stdin_r.into(), stdout_w.into()));
        assert!(closed, "{what}: the broker kept the connection");
        // Nothing was read from the refused client's stdin, nothing written to its stdout.
        rustix::fs::fcntl_setfl(&ours, rustix::fs::OFlags::NONBLOCK).unwrap();
        let mut left = vec![0u8; pending.len() + 1];
        let n = rustix::io::read(&ours, &mut left).unwrap();
        assert_eq!(&left[..n], pending.as_bytes(), "{what}");
        drop(stdin_w);
        let mut written = Vec::new();
        std::fs::File::from(OwnedFd::from(stdout_r))
            .read_to_end(&mut written)
            .unwrap();
        assert!(
            written.is_empty(),
            "{what}: {}",
            String::from_utf8_lossy(&written)
        );
    }
    assert!(g.stderr().contains("a stdio handover was refused"));
}
