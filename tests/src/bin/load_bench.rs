//! Hostile load against a real `glovebox up` (a benchmark, not a test): what the front door holds
//! and what it costs. Two accounts, `canary` and `flood`; the canary's allowed 4 KiB `file_read`
//! is timed idle first (the reference), then during each attack:
//!
//! 1. connections: `flood` opens 5,000 WebSockets that say hello; can `canary` still connect?
//! 2. calls: `flood` keeps 8 connections × 32 calls in flight; the canary's median against idle;
//! 3. MCP sessions: `flood` creates 40,000 MCP sessions (64 at a time);
//! 4. slowloris: 1,500 connections that send half a request and trickle a header every 2 s;
//! 5. open files: a second `glovebox up` under `prlimit --nofile=1024:1024`, 1,100 connections
//!    that send nothing.
//!
//! For each: the canary's median and its ratio to idle, whether a new canary connection works,
//! and the broker's resident set before, at the peak and after (with the ratio after/before).
//! The unauthenticated attacks run as another OS user (`nobody`) when this runs as root, as an
//! attacker on a shared machine would; otherwise as the same user.
//!
//! Run: `cargo build --release -p glovebox -p glovebox-e2e --bins && target/release/glovebox-load-bench`
//! (`LOAD_BENCH_ONLY=calls,conn` runs only the attacks named: conn, calls, mcp, slowloris, fd)
//! (`GLOVEBOX_BIN=path/to/glovebox` measures another build of glovebox).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use glovebox_e2e::stats::median;
use glovebox_e2e::{Glovebox, Options};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// Canary calls per measurement.
const CANARY_CALLS: usize = 200;
/// Longest the canary waits for a connection or a call before counting it as failed.
const CANARY_WAIT: Duration = Duration::from_secs(5);
const FLOOD_CONNECTIONS: usize = 5000;
const FLOOD_CALL_CONNECTIONS: usize = 8;
const FLOOD_IN_FLIGHT: usize = 32;
const MCP_SESSIONS: usize = 40_000;
const MCP_CONCURRENCY: usize = 64;
const SLOWLORIS: usize = 1500;
/// How long the slowloris attack lasts (longer than any header timeout worth having).
const SLOWLORIS_SECS: u64 = 25;
const FD_LIMIT: u64 = 1024;
const FD_IDLE: usize = 1100;
const FD_SECS: u64 = 20;
/// The user unauthenticated attacks run as when this runs as root.
const ATTACKER_UID: u32 = 65534;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn addr_of(g: &Glovebox) -> String {
    g.url
        .trim_start_matches("ws://")
        .trim_end_matches("/v1/ws")
        .to_owned()
}

/// Opens a WebSocket and says hello, within [`CANARY_WAIT`].
async fn connect(url: &str, token: &str) -> Result<Socket, String> {
    let attempt = async {
        let mut request = url.into_client_request().map_err(|e| e.to_string())?;
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().map_err(|_| "token")?,
        );
        let (mut socket, _) =
            tokio_tungstenite::connect_async(request)
                .await
                .map_err(|e| match e {
                    tokio_tungstenite::tungstenite::Error::Http(r) => {
                        format!("HTTP {}", r.status())
                    }
                    other => other.to_string(),
                })?;
        let hello = json!({"type": "hello", "role": "agent"}).to_string();
        socket
            .send(Message::Text(hello.into()))
            .await
            .map_err(|e| e.to_string())?;
        loop {
            match socket.next().await {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(t.as_str()).map_err(|e| e.to_string())?;
                    if v["type"] == "hello_ok" {
                        return Ok(socket);
                    }
                    return Err(format!("answer to hello: {v}"));
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.to_string()),
                None => return Err("closed before hello_ok".into()),
            }
        }
    };
    tokio::time::timeout(CANARY_WAIT, attempt)
        .await
        .unwrap_or_else(|_| Err("no answer".into()))
}

/// One allowed read on `socket`, timed; an error or a timeout is a failure.
async fn read_call(socket: &mut Socket, call_id: &str) -> Result<Duration, String> {
    let frame = json!({"type": "invoke", "call_id": call_id, "tool": "file_read", "params": {"path": "4k.txt"}});
    let t = Instant::now();
    let exchange = async {
        socket
            .send(Message::Text(frame.to_string().into()))
            .await
            .map_err(|e| e.to_string())?;
        loop {
            match socket.next().await {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(t.as_str()).map_err(|e| e.to_string())?;
                    if v["type"] == "result" && v["call_id"] == call_id {
                        return if v["ok"] == true {
                            Ok(())
                        } else {
                            Err(v["error"]["code"].to_string())
                        };
                    }
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.to_string()),
                None => return Err("connection closed".into()),
            }
        }
    };
    match tokio::time::timeout(CANARY_WAIT, exchange).await {
        Ok(Ok(())) => Ok(t.elapsed()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err("timed out".into()),
    }
}

/// What the canary saw during one measurement.
struct Canary {
    median: Option<Duration>,
    failed: usize,
    first_error: Option<String>,
    /// Whether a new connection (upgrade and hello) worked during the attack.
    connects: Result<(), String>,
}

/// The canary's calls on its standing connection, then one new connection.
async fn measure_canary(socket: &mut Option<Socket>, url: &str, token: &str, tag: &str) -> Canary {
    let mut samples = Vec::new();
    let mut failed = 0;
    let mut first_error = None;
    for i in 0..CANARY_CALLS {
        let Some(s) = socket.as_mut() else {
            failed += CANARY_CALLS - i;
            first_error.get_or_insert_with(|| "no canary connection".to_owned());
            break;
        };
        match read_call(s, &format!("{tag}-{i}")).await {
            Ok(d) => samples.push(d),
            Err(e) => {
                failed += 1;
                first_error.get_or_insert(e);
                if failed > 3 {
                    failed += CANARY_CALLS - i - 1;
                    *socket = None;
                    break;
                }
            }
        }
    }
    let connects = connect(url, token).await.map(drop);
    Canary {
        median: (!samples.is_empty()).then(|| median(&samples)),
        failed,
        first_error,
        connects,
    }
}

/// One row of the final table.
struct Row {
    attack: String,
    canary: Canary,
    rss: (u64, u64, u64),
    notes: String,
}

fn print_rows(reference: Duration, rows: &[Row]) {
    println!();
    println!(
        "canary reference (idle): median {:.0} µs over {CANARY_CALLS} calls",
        reference.as_secs_f64() * 1e6
    );
    println!(
        "{:<34} {:>11} {:>7} {:>7} {:>14} {:>27} {:>7}  notes",
        "attack",
        "canary p50",
        "×idle",
        "failed",
        "new conn",
        "broker RSS KiB before/peak/after",
        "after/before"
    );
    for r in rows {
        let (p50, ratio) = match r.canary.median {
            Some(m) => (
                format!("{:.0} µs", m.as_secs_f64() * 1e6),
                format!("{:.2}", m.as_secs_f64() / reference.as_secs_f64()),
            ),
            None => ("—".to_owned(), "—".to_owned()),
        };
        let conn = match &r.canary.connects {
            Ok(()) => "ok".to_owned(),
            Err(e) => format!("FAIL ({})", e.chars().take(24).collect::<String>()),
        };
        let (before, peak, after) = r.rss;
        println!(
            "{:<34} {:>11} {:>7} {:>7} {:>14} {:>27} {:>7.2}  {}{}",
            r.attack,
            p50,
            ratio,
            r.canary.failed,
            conn,
            format!("{before}/{peak}/{after}"),
            after as f64 / before.max(1) as f64,
            r.notes,
            r.canary
                .first_error
                .as_ref()
                .map(|e| format!(" (first canary error: {e})"))
                .unwrap_or_default()
        );
    }
}

/// Samples the broker's RSS every 100 ms until stopped; returns the peak.
fn watch_peak(pid: i32) -> (Arc<AtomicBool>, tokio::task::JoinHandle<u64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let handle = tokio::spawn(async move {
        let mut peak = 0;
        while !s.load(Ordering::Relaxed) {
            peak = peak.max(rss_kib(pid));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        peak
    });
    (stop, handle)
}

async fn settle_rss(pid: i32) -> u64 {
    tokio::time::sleep(Duration::from_secs(3)).await;
    rss_kib(pid)
}

/// 1. One account's WebSockets, as many as it can open (up to [`FLOOD_CONNECTIONS`]).
async fn connection_flood(g: &Glovebox, canary: &mut Option<Socket>, pid: i32) -> Row {
    let token = g.token_of("flood");
    let before = rss_kib(pid);
    let (stop, peak) = watch_peak(pid);
    let mut held = Vec::new();
    let mut refused = 0;
    let mut first_refusal = None;
    let t = Instant::now();
    for _ in 0..FLOOD_CONNECTIONS {
        match connect(&g.url, &token).await {
            Ok(s) => held.push(s),
            Err(e) => {
                refused += 1;
                first_refusal.get_or_insert(e);
            }
        }
    }
    let took = t.elapsed();
    let canary_seen = measure_canary(canary, &g.url, &g.token_of("canary"), "conn").await;
    let opened = held.len();
    drop(held);
    stop.store(true, Ordering::Relaxed);
    let peak = peak.await.unwrap();
    Row {
        attack: format!("{FLOOD_CONNECTIONS} WebSockets of one account"),
        canary: canary_seen,
        rss: (before, peak, settle_rss(pid).await),
        notes: format!(
            "flood held {opened}, refused {refused} ({}) in {:.1} s",
            first_refusal.unwrap_or_default(),
            took.as_secs_f64()
        ),
    }
}

/// 2. One account's calls, [`FLOOD_CALL_CONNECTIONS`] × [`FLOOD_IN_FLIGHT`] in flight.
async fn call_flood(g: &Glovebox, canary: &mut Option<Socket>, pid: i32) -> Row {
    let token = g.token_of("flood");
    let before = rss_kib(pid);
    let (stop_peak, peak) = watch_peak(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let busy = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..FLOOD_CALL_CONNECTIONS {
        let Ok(socket) = connect(&g.url, &token).await else {
            continue;
        };
        let (stop, done, busy) = (stop.clone(), done.clone(), busy.clone());
        tasks.push(tokio::spawn(async move {
            let (mut tx, mut rx) = socket.split();
            let invoke = |n: usize| {
                let frame = json!({"type": "invoke", "call_id": format!("f{c}-{n}"), "tool": "file_read", "params": {"path": "4k.txt"}});
                Message::Text(frame.to_string().into())
            };
            let mut next = 0;
            for _ in 0..FLOOD_IN_FLIGHT {
                if tx.send(invoke(next)).await.is_err() {
                    return;
                }
                next += 1;
            }
            while !stop.load(Ordering::Relaxed) {
                match tokio::time::timeout(Duration::from_secs(5), rx.next()).await {
                    Ok(Some(Ok(Message::Text(t)))) => {
                        let v: Value = serde_json::from_str(t.as_str()).unwrap_or_default();
                        if v["type"] != "result" {
                            continue;
                        }
                        if v["ok"] == true {
                            done.fetch_add(1, Ordering::Relaxed);
                        } else {
                            busy.fetch_add(1, Ordering::Relaxed);
                        }
                        if tx.send(invoke(next)).await.is_err() {
                            return;
                        }
                        next += 1;
                    }
                    Ok(Some(Ok(_))) => {}
                    _ => return,
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t = Instant::now();
    let start = done.load(Ordering::Relaxed);
    let canary_seen = measure_canary(canary, &g.url, &g.token_of("canary"), "calls").await;
    let rate = (done.load(Ordering::Relaxed) - start) as f64 / t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    stop_peak.store(true, Ordering::Relaxed);
    let peak = peak.await.unwrap();
    Row {
        attack: format!(
            "calls of one account ({FLOOD_CALL_CONNECTIONS}×{FLOOD_IN_FLIGHT} in flight)"
        ),
        canary: canary_seen,
        rss: (before, peak, settle_rss(pid).await),
        notes: format!(
            "flood: {rate:.0} calls/s done, {} refused",
            busy.load(Ordering::Relaxed)
        ),
    }
}

/// One HTTP/1.1 connection to the broker for MCP requests.
async fn mcp_connection(
    addr: &str,
) -> Option<hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .ok()?;
    tokio::spawn(conn);
    Some(sender)
}

/// 3. One account's MCP sessions: [`MCP_SESSIONS`] initializes, [`MCP_CONCURRENCY`] at a time.
async fn mcp_flood(g: &Glovebox, canary: &mut Option<Socket>, pid: i32) -> Row {
    use http_body_util::BodyExt;
    let addr = addr_of(g);
    let token = g.token_of("flood");
    let before = rss_kib(pid);
    let (stop_peak, peak) = watch_peak(pid);
    let created = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let statuses = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    let next = Arc::new(AtomicUsize::new(0));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..MCP_CONCURRENCY {
        let (addr, token) = (addr.clone(), token.clone());
        let (created, refused, next, statuses) = (
            created.clone(),
            refused.clone(),
            next.clone(),
            statuses.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut sender = None;
            while next.fetch_add(1, Ordering::Relaxed) < MCP_SESSIONS {
                if sender.is_none() {
                    sender = mcp_connection(&addr).await;
                }
                let Some(s) = sender.as_mut() else {
                    refused.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "load", "version": "0"}}})
                .to_string();
                let request = http::Request::post("/mcp")
                    .header("host", "localhost")
                    .header("authorization", format!("Bearer {token}"))
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                    .unwrap();
                let outcome = tokio::time::timeout(Duration::from_secs(30), async {
                    let response = s.send_request(request).await.ok()?;
                    let status = response.status().as_u16();
                    let session = response.headers().contains_key("mcp-session-id");
                    let _ = response.into_body().collect().await;
                    Some((status, session))
                })
                .await
                .ok()
                .flatten();
                match outcome {
                    Some((status, session)) => {
                        *statuses.lock().unwrap().entry(status).or_insert(0usize) += 1;
                        if session {
                            created.fetch_add(1, Ordering::Relaxed);
                        } else {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    None => {
                        refused.fetch_add(1, Ordering::Relaxed);
                        sender = None;
                    }
                }
                if sender.as_ref().is_some_and(|s| s.is_closed()) {
                    sender = None;
                }
            }
        }));
    }
    // The canary measures while the flood runs.
    let canary_seen = measure_canary(canary, &g.url, &g.token_of("canary"), "mcp").await;
    for task in tasks {
        let _ = task.await;
    }
    let took = t.elapsed();
    stop_peak.store(true, Ordering::Relaxed);
    let peak = peak.await.unwrap();
    Row {
        attack: format!("{MCP_SESSIONS} MCP sessions of one account"),
        canary: canary_seen,
        rss: (before, peak, settle_rss(pid).await),
        notes: format!(
            "created {}, refused {} in {:.1} s; statuses {:?}",
            created.load(Ordering::Relaxed),
            refused.load(Ordering::Relaxed),
            took.as_secs_f64(),
            statuses.lock().unwrap()
        ),
    }
}

/// Starts this binary as an attacker (`attack MODE ADDR N SECS`), as `nobody` when root.
fn spawn_attacker(mode: &str, addr: &str, n: usize, secs: u64) -> (std::process::Child, String) {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["attack", mode, addr, &n.to_string(), &secs.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let who = if nix::unistd::geteuid().is_root() {
        command.uid(ATTACKER_UID).gid(ATTACKER_UID);
        "as nobody"
    } else {
        "as this user"
    };
    (command.spawn().unwrap(), who.to_owned())
}

/// Reads the attacker's reports (`{"t": s, "open": n, "opened": m}`) until it exits; calls
/// `during` once it has opened everything it could.
async fn attack_run<F, Fut>(
    mode: &str,
    addr: &str,
    n: usize,
    secs: u64,
    during: F,
) -> (String, Vec<Value>, Canary)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Canary>,
{
    let (mut child, who) = spawn_attacker(mode, addr, n, secs);
    let stdout = child.stdout.take().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                let _ = tx.send(v);
            }
        }
    });
    let mut reports = Vec::new();
    // Wait for the first report (everything opened), then let the canary measure.
    if let Some(first) = rx.recv().await {
        reports.push(first);
    }
    let canary = during().await;
    while let Some(v) = rx.recv().await {
        reports.push(v);
    }
    let _ = child.wait();
    (who, reports, canary)
}

fn open_at(reports: &[Value], secs: u64) -> String {
    reports
        .iter()
        .rfind(|r| r["t"].as_u64().is_some_and(|t| t <= secs))
        .map(|r| format!("{} open at {}s", r["open"], r["t"]))
        .unwrap_or_default()
}

/// 4. Slowloris: half-sent requests, a header line every 2 s.
async fn slowloris(g: &Glovebox, canary: &mut Option<Socket>, pid: i32) -> Row {
    let addr = addr_of(g);
    let before = rss_kib(pid);
    let (stop_peak, peak) = watch_peak(pid);
    let (url, token) = (g.url.clone(), g.token_of("canary"));
    let (who, reports, canary_seen) =
        attack_run("slowloris", &addr, SLOWLORIS, SLOWLORIS_SECS, || {
            measure_canary(canary, &url, &token, "slow")
        })
        .await;
    stop_peak.store(true, Ordering::Relaxed);
    let peak = peak.await.unwrap();
    let opened = reports
        .first()
        .map(|r| r["opened"].clone())
        .unwrap_or_default();
    Row {
        attack: format!("slowloris, {SLOWLORIS} connections"),
        canary: canary_seen,
        rss: (before, peak, settle_rss(pid).await),
        notes: format!(
            "{who}: {opened} opened; {}; {}",
            open_at(&reports, 5),
            open_at(&reports, SLOWLORIS_SECS - 1)
        ),
    }
}

/// 5. Open files: a broker limited to [`FD_LIMIT`] descriptors, [`FD_IDLE`] silent connections.
async fn fd_exhaustion() -> Row {
    let g = Glovebox::start_with(Options {
        accounts: vec![("canary".into(), true), ("flood".into(), true)],
        open_files_limit: Some(FD_LIMIT),
        ..Options::default()
    });
    std::fs::write(g.root().join("work-canary/4k.txt"), "x".repeat(4096)).unwrap();
    let pid = g.service_pids("broker")[0];
    let (url, token) = (g.url.clone(), g.token_of("canary"));
    let mut canary = connect(&url, &token).await.ok();
    // Warm the backends up.
    if let Some(s) = canary.as_mut() {
        for i in 0..20 {
            let _ = read_call(s, &format!("warm-{i}")).await;
        }
    }
    let before = rss_kib(pid);
    let (stop_peak, peak) = watch_peak(pid);
    let (who, reports, canary_seen) = attack_run("idle", &addr_of(&g), FD_IDLE, FD_SECS, || {
        measure_canary(&mut canary, &url, &token, "fd")
    })
    .await;
    stop_peak.store(true, Ordering::Relaxed);
    let peak = peak.await.unwrap();
    let opened = reports
        .first()
        .map(|r| r["opened"].clone())
        .unwrap_or_default();
    // After the attack: does a new connection work again?
    let again = connect(&url, &token).await.map(drop);
    Row {
        attack: format!("{FD_IDLE} silent sockets, {FD_LIMIT} fds"),
        canary: canary_seen,
        rss: (before, peak, settle_rss(pid).await),
        notes: format!(
            "{who}: {opened} opened; {}; new connection after the attack: {}",
            open_at(&reports, FD_SECS - 1),
            match again {
                Ok(()) => "ok".to_owned(),
                Err(e) => format!("FAIL ({e})"),
            }
        ),
    }
}

/// The attacker: opens `n` connections to `addr` and reports how many are still open each second.
async fn attack(mode: &str, addr: &str, n: usize, secs: u64) {
    use tokio::io::AsyncWriteExt;
    let _ = nix::sys::resource::setrlimit(
        nix::sys::resource::Resource::RLIMIT_NOFILE,
        (n as u64) * 2 + 64,
        (n as u64) * 2 + 64,
    );
    let mut sockets = Vec::with_capacity(n);
    for _ in 0..n {
        match tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
            .await
        {
            Ok(Ok(mut s)) => {
                if mode == "slowloris" {
                    let _ = s
                        .write_all(b"GET /v1/ws HTTP/1.1\r\nHost: localhost\r\n")
                        .await;
                }
                sockets.push(Some(s));
            }
            _ => break,
        }
    }
    let opened = sockets.len();
    let start = Instant::now();
    let mut buf = [0u8; 512];
    for t in 0.. {
        let mut open = 0;
        for slot in sockets.iter_mut() {
            let Some(s) = slot else { continue };
            let closed = loop {
                match s.try_read(&mut buf) {
                    Ok(0) => break true,
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
                    Err(_) => break true,
                }
            };
            if closed {
                *slot = None;
                continue;
            }
            if mode == "slowloris" && t % 2 == 0 && s.try_write(b"X-a: b\r\n").is_err() {
                *slot = None;
                continue;
            }
            open += 1;
        }
        println!("{}", json!({"t": t, "open": open, "opened": opened}));
        if start.elapsed() >= Duration::from_secs(secs) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("attack") {
        attack(
            &args[2],
            &args[3],
            args[4].parse().unwrap(),
            args[5].parse().unwrap(),
        )
        .await;
        return;
    }
    let _ =
        nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, 20_000, 20_000);
    let g = Glovebox::start_with(Options {
        accounts: vec![("canary".into(), true), ("flood".into(), true)],
        ..Options::default()
    });
    for account in ["canary", "flood"] {
        std::fs::write(
            g.root().join(format!("work-{account}/4k.txt")),
            "x".repeat(4096),
        )
        .unwrap();
    }
    let pid = g.service_pids("broker")[0];
    let (url, canary_token) = (g.url.clone(), g.token_of("canary"));
    let mut canary = connect(&url, &canary_token).await.ok();
    if let Some(s) = canary.as_mut() {
        for i in 0..50 {
            let _ = read_call(s, &format!("warm-{i}")).await;
        }
    }
    let idle = measure_canary(&mut canary, &url, &canary_token, "idle").await;
    let reference = idle.median.expect("the canary works when idle");
    let mut rows = vec![Row {
        attack: "none (reference)".into(),
        canary: idle,
        rss: (rss_kib(pid), rss_kib(pid), rss_kib(pid)),
        notes: String::new(),
    }];
    let reconnect = |canary: &mut Option<Socket>| canary.is_none();
    if wanted("conn") {
        rows.push(connection_flood(&g, &mut canary, pid).await);
        print_rows(reference, &rows);
    }
    if reconnect(&mut canary) {
        canary = connect(&url, &canary_token).await.ok();
    }
    if wanted("calls") {
        rows.push(call_flood(&g, &mut canary, pid).await);
        print_rows(reference, &rows);
    }
    if reconnect(&mut canary) {
        canary = connect(&url, &canary_token).await.ok();
    }
    if wanted("mcp") {
        rows.push(mcp_flood(&g, &mut canary, pid).await);
        print_rows(reference, &rows);
    }
    if reconnect(&mut canary) {
        canary = connect(&url, &canary_token).await.ok();
    }
    if wanted("slowloris") {
        rows.push(slowloris(&g, &mut canary, pid).await);
        print_rows(reference, &rows);
    }
    drop(canary);
    drop(g);
    if wanted("fd") {
        rows.push(fd_exhaustion().await);
        print_rows(reference, &rows);
    }
}

/// Whether `attack` runs: all of them unless `LOAD_BENCH_ONLY` names some
/// (`conn,calls,mcp,slowloris,fd`).
fn wanted(attack: &str) -> bool {
    match std::env::var("LOAD_BENCH_ONLY") {
        Ok(only) if !only.trim().is_empty() => only.split(',').any(|a| a.trim() == attack),
        _ => true,
    }
}
