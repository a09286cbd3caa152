//! `glovebox-attack`: hostile code for the end-to-end tests to run *inside* an approved job, the
//! way an agent's job would: it tries to reach glovebox's control plane, the other services and
//! the state directory. Each attempt prints one JSON line `{"attack", "target", "outcome",
//! "detail"}` with outcome `refused` or `succeeded`; the tests assert that nothing succeeded and
//! that every attempt ran. It never changes anything when refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use glovebox_proto::v1::{
    self as pb, account_admin_client::AccountAdminClient, audit_client::AuditClient,
    executor_client::ExecutorClient, executor_gate_client::ExecutorGateClient,
    gate_admin_client::GateAdminClient, gate_client::GateClient,
    pack_support_client::PackSupportClient, packs_client::PacksClient,
};
use serde_json::json;

fn report(attack: &str, target: &str, succeeded: bool, detail: impl std::fmt::Display) {
    println!(
        "{}",
        json!({
            "attack": attack,
            "target": target,
            "outcome": if succeeded { "succeeded" } else { "refused" },
            "detail": detail.to_string(),
        })
    );
}

/// A gRPC channel over a Unix socket with no handshake: what any process of the same user can
/// open (the kernel does not mediate connecting to a socket path).
fn raw_channel(path: &Path) -> tonic::transport::Channel {
    let path = path.to_owned();
    tonic::transport::Endpoint::from_static("http://attack.local")
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .connect_with_connector_lazy(tower::service_fn(move |_: http::Uri| {
            let path = path.clone();
            async move {
                let s = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
            }
        }))
}

fn outcome<T>(r: Result<tonic::Response<T>, tonic::Status>) -> (bool, String) {
    match r {
        Ok(_) => (true, "the call was served".into()),
        Err(s) => (false, format!("{:?}: {}", s.code(), s.message())),
    }
}

/// The plan of writing `/tmp/pwned-by-<who>`.
fn write_plan(who: &str) -> pb::Plan {
    pb::Plan {
        subjects: vec![pb::Subject {
            domain: pb::Domain::Write as i32,
            path: format!("/tmp/pwned-by-{who}"),
            state: None,
        }],
        content_tag: Vec::new(),
        pack: None,
    }
}

/// A voucher the broker never signed.
fn forged_voucher() -> pb::Voucher {
    pb::Voucher {
        issued_at_ms: 0,
        mac: vec![0x42; 32],
    }
}

/// A write of `pwned` in `account`'s workdir, on a forged voucher.
fn forged_run(account: &str) -> pb::RunRequest {
    pb::RunRequest {
        call: Some(call(
            account,
            "file_write",
            json!({"path": "pwned", "content": "x"}),
        )),
        voucher: Some(forged_voucher()),
        ..Default::default()
    }
}

/// A write of `/tmp/x` as `victim`'s executor would have it judged, on a forged voucher.
fn forged_decide(victim: &str) -> pb::VouchedDecideRequest {
    pb::VouchedDecideRequest {
        call: Some(call(
            victim,
            "file_write",
            json!({"path": "/tmp/x", "content": "x"}),
        )),
        plan: Some(write_plan(victim)),
        voucher: Some(forged_voucher()),
        ..Default::default()
    }
}

fn call(account: &str, tool: &str, params: serde_json::Value) -> pb::ToolCall {
    pb::ToolCall {
        account: account.into(),
        call_id: "attack".into(),
        tool: tool.into(),
        params_json: params.to_string(),
        client_call_id: String::new(),
    }
}

/// Every gRPC method a job would want, on every control socket, without a key.
async fn grpc(state: &Path, account: &str, victim: &str) {
    let run = state.join("run");
    let gate_sock = run.join("gate.sock");
    let admin_sock = run.join("admin.sock");
    let audit_sock = run.join("audit.sock");
    let mut gate = GateClient::new(raw_channel(&gate_sock));
    let (ok, d) = outcome(
        gate.resolve(pb::ResolveRequest {
            call: Some(call(
                account,
                "file_write",
                json!({"path": "/tmp/x", "content": "x"}),
            )),
            plan: Some(write_plan(account)),
            answer: pb::Answer::Once as i32,
        })
        .await,
    );
    report("Gate/Resolve once (mint a ticket)", "gate.sock", ok, d);
    let (ok, d) = outcome(
        gate.set_enabled(pb::SetEnabledRequest {
            account: victim.into(),
            enabled: true,
            by: "approver".into(),
        })
        .await,
    );
    report("Gate/SetEnabled", "gate.sock", ok, d);
    // The stream the gate hands the broker the answers of reads on (what other calls read).
    let (ok, d) = outcome(gate.deliveries(tokio_stream::empty()).await);
    report("Gate/Deliveries (others' reads)", "gate.sock", ok, d);
    for sock in [&admin_sock, &gate_sock] {
        let name = sock.file_name().unwrap().to_string_lossy().into_owned();
        let mut admin = GateAdminClient::new(raw_channel(sock));
        for target in [account, victim] {
            let (ok, d) = outcome(
                admin
                    .add_rule(pb::AddRuleRequest {
                        account: target.into(),
                        section: "commands".into(),
                        kind: "allow".into(),
                        pattern: ".*".into(),
                        ..Default::default()
                    })
                    .await,
            );
            report(&format!("GateAdmin/AddRule for {target}"), &name, ok, d);
            let (ok, d) = outcome(
                admin
                    .set_sandbox(pb::SetSandboxRequest {
                        account: target.into(),
                        enabled: false,
                        confirm: true,
                    })
                    .await,
            );
            report(
                &format!("GateAdmin/SetSandbox off for {target}"),
                &name,
                ok,
                d,
            );
        }
    }
    for sock in [&audit_sock, &gate_sock] {
        let name = sock.file_name().unwrap().to_string_lossy().into_owned();
        let mut audit = AuditClient::new(raw_channel(sock));
        let (ok, d) = outcome(
            audit
                .append(pb::AuditEvent {
                    call_id: "forged".into(),
                    account: victim.into(),
                    source: "gate".into(),
                    kind: "resolve".into(),
                    approval: "approved".into(),
                    subject: "write /etc/passwd".into(),
                    ..Default::default()
                })
                .await,
        );
        report("Audit/Append forged approval", &name, ok, d);
        // Having a call judged as its executor would, with a voucher the broker never made: a
        // message on the executor's stream to the gate, served only if the stream opens and
        // answers with a verdict.
        let mut judge = ExecutorGateClient::new(raw_channel(sock));
        let message = pb::ExecutorGateCall {
            id: 1,
            body: Some(pb::executor_gate_call::Body::Decide(forged_decide(victim))),
            ..Default::default()
        };
        let opened = judge.calls(tokio_stream::iter([message])).await;
        let (ok, d) = match opened {
            Err(s) => (false, format!("{:?}: {}", s.code(), s.message())),
            Ok(answers) => match answers.into_inner().message().await {
                Ok(Some(pb::ExecutorGateAnswer {
                    body: Some(pb::executor_gate_answer::Body::Decided(_)),
                    ..
                })) => (true, "a verdict came back".into()),
                other => (false, format!("no verdict: {other:?}")),
            },
        };
        report("ExecutorGate/Calls with a forged voucher", &name, ok, d);
        // Having a write judged as the broker would (a verdict, an audit row, maybe a ticket), a
        // message on the broker's stream: served if a verdict comes back.
        let asked = pb::DecideRequest {
            call: Some(call(
                victim,
                "file_write",
                json!({"path": "/tmp/x", "content": "x"}),
            )),
            plan: Some(write_plan(victim)),
        };
        let mut gate = GateClient::new(raw_channel(sock));
        let message = pb::DecideCall {
            id: 1,
            decide: Some(asked),
            ..Default::default()
        };
        let (ok, d) = match gate.decisions(tokio_stream::iter([message])).await {
            Err(s) => (false, format!("{:?}: {}", s.code(), s.message())),
            Ok(answers) => match answers.into_inner().message().await {
                Ok(Some(pb::DecideAnswer {
                    body: Some(pb::decide_answer::Body::Decided(_)),
                    ..
                })) => (true, "a verdict came back".into()),
                other => (false, format!("no verdict: {other:?}")),
            },
        };
        report("Gate/Decisions as the broker", &name, ok, d);
    }
    for target in [account, victim] {
        let sock = run.join(format!("exec-{target}/executor.sock"));
        let mut exec = ExecutorClient::new(raw_channel(&sock));
        let (ok, d) = outcome(
            exec.execute(pb::ExecuteRequest {
                call: Some(call(
                    target,
                    "file_write",
                    json!({"path": "pwned", "content": "x"}),
                )),
                ticket: None,
                ..Default::default()
            })
            .await,
        );
        report(
            &format!("Executor/Execute of {target}"),
            &format!("exec-{target}"),
            ok,
            d,
        );
        // A write on a forged voucher, a message on the broker's stream of calls: served if it
        // was run.
        let message = pb::RunCall {
            id: 1,
            body: Some(pb::run_call::Body::Run(forged_run(target))),
            ..Default::default()
        };
        let (ok, d) = match exec.runs(tokio_stream::iter([message])).await {
            Err(s) => (false, format!("{:?}: {}", s.code(), s.message())),
            Ok(answers) => match answers.into_inner().message().await {
                Ok(Some(pb::RunAnswer {
                    body: Some(pb::run_answer::Body::Ran(pb::RunResponse { error: None, .. })),
                    ..
                })) => (true, "the call was run".into()),
                other => (false, format!("not run: {other:?}")),
            },
        };
        report(
            &format!("Executor/Runs of {target}"),
            &format!("exec-{target}"),
            ok,
            d,
        );
        let (ok, d) = outcome(
            exec.plan(pb::PlanRequest {
                call: Some(call(target, "file_read", json!({"path": "x"}))),
            })
            .await,
        );
        report(
            &format!("Executor/Plan of {target}"),
            &format!("exec-{target}"),
            ok,
            d,
        );
    }
    // Guessing a key: the handshake refuses it (and the server never proves itself to us).
    let guess = glovebox_proto::transport::SocketKey::from_bytes(&[0x42; 32]).unwrap();
    for (sock, peer) in [(&gate_sock, "broker"), (&admin_sock, "admin")] {
        let r = glovebox_proto::transport::connect_authenticated(sock, peer, &guess).await;
        report(
            &format!("handshake as {peer} with a guessed key"),
            &sock.file_name().unwrap().to_string_lossy(),
            r.is_ok(),
            r.err().map(|e| e.to_string()).unwrap_or_default(),
        );
    }
}

fn errno_outcome(r: nix::Result<()>) -> (bool, String) {
    match r {
        Ok(()) => (true, "done".into()),
        Err(e) => (false, e.to_string()),
    }
}

/// Signals (stop, continue, terminate, kill), ptrace and /proc reads against each pid.
fn processes(pids: &[i32]) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    for &pid in pids {
        let target = format!("pid {pid}");
        let p = Pid::from_raw(pid);
        for sig in [
            Signal::SIGSTOP,
            Signal::SIGCONT,
            Signal::SIGTERM,
            Signal::SIGKILL,
        ] {
            let (ok, d) = errno_outcome(kill(p, sig));
            report(&format!("kill {sig}"), &target, ok, d);
        }
        let (ok, d) = errno_outcome(nix::sys::ptrace::attach(p));
        if ok {
            let _ = nix::sys::ptrace::detach(p, None);
        }
        report("ptrace attach", &target, ok, d);
        for file in ["environ", "mem", "maps", "fd", "root/", "cwd/"] {
            let path = PathBuf::from(format!("/proc/{pid}/{file}"));
            let r = if file == "fd" {
                // What an open descriptor is (a socket, a key file): listing the numbers alone
                // says nothing, so only a link that can be read counts.
                std::fs::read_dir(&path).and_then(|entries| {
                    let mut read = None;
                    for e in entries.flatten() {
                        match std::fs::read_link(e.path()) {
                            Ok(target) => {
                                read = Some(target);
                                break;
                            }
                            Err(_) => continue,
                        }
                    }
                    read.map(|_| ()).ok_or_else(|| {
                        std::io::Error::new(
                            std::io::ErrorKind::PermissionDenied,
                            "no descriptor could be read",
                        )
                    })
                })
            } else if file.ends_with('/') {
                std::fs::read_dir(&path).map(|_| ())
            } else if file == "mem" {
                std::fs::File::open(&path).map(|_| ())
            } else {
                std::fs::read(&path).map(|_| ())
            };
            report(
                &format!("read /proc/<pid>/{file}"),
                &target,
                r.is_ok(),
                r.err().map(|e| e.to_string()).unwrap_or_default(),
            );
        }
    }
}

/// Reads each file (and lists each directory).
fn read(paths: &[String]) {
    for p in paths {
        let path = Path::new(p);
        let r = if path.is_dir() {
            std::fs::read_dir(path).map(|_| ())
        } else {
            std::fs::read(path).map(|_| ())
        };
        report(
            "read",
            p,
            r.is_ok(),
            r.err().map(|e| e.to_string()).unwrap_or_default(),
        );
    }
}

/// Opens each path for writing (creating it if missing, never truncating): the state is the
/// gate's alone, so a job must not be able to plant or change a file there.
fn write(paths: &[String]) {
    for p in paths {
        let r = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(p)
            .map(|_| ());
        report(
            "write",
            p,
            r.is_ok(),
            r.err().map(|e| e.to_string()).unwrap_or_default(),
        );
    }
}

/// Connects to each socket: in system mode the kernel (the socket directories' owners, groups
/// and modes) must refuse it before any handshake.
fn connect(paths: &[String]) {
    for p in paths {
        let r = std::os::unix::net::UnixStream::connect(p);
        report(
            "connect",
            p,
            r.is_ok(),
            r.err().map(|e| e.to_string()).unwrap_or_default(),
        );
    }
}

/// Opens up to `count` silent connections to each target (a Unix socket path, or `tcp:HOST:PORT`)
/// and holds them for `hold`: what starves a listener that gives every peer the same slots.
/// Reports, per target, how many it got (`hold connections`) and then how many of those the
/// server had closed by the end (`keep connections open`, when it got any: succeeded while none
/// was).
fn hold(count: usize, hold: Duration, targets: &[String]) {
    let mut held: Vec<(usize, std::os::fd::OwnedFd)> = Vec::new();
    for (t, target) in targets.iter().enumerate() {
        let mut got = 0;
        let mut last = String::new();
        for _ in 0..count {
            let opened: std::io::Result<std::os::fd::OwnedFd> = match target.strip_prefix("tcp:") {
                Some(addr) => std::net::TcpStream::connect(addr).map(Into::into),
                None => std::os::unix::net::UnixStream::connect(target).map(Into::into),
            };
            match opened {
                Ok(s) => {
                    got += 1;
                    held.push((t, s));
                }
                Err(e) => {
                    last = e.to_string();
                    break;
                }
            }
        }
        report(
            "hold connections",
            target,
            got > 0,
            format!("{got} held; {last}"),
        );
    }
    std::thread::sleep(hold);
    for (t, target) in targets.iter().enumerate() {
        let mine = held.iter().filter(|(i, _)| *i == t);
        if mine.clone().next().is_none() {
            continue;
        }
        let closed = mine.clone().filter(|(_, fd)| closed_by_peer(fd)).count();
        report(
            "keep connections open",
            target,
            closed == 0,
            format!("{closed} of {} closed by the server", mine.count()),
        );
    }
}

/// Whether the other end closed `fd` (a read would see its end), without blocking.
fn closed_by_peer(fd: &std::os::fd::OwnedFd) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        rustix::net::recv(
            fd,
            &mut byte,
            rustix::net::RecvFlags::DONTWAIT | rustix::net::RecvFlags::PEEK
        ),
        Ok((0, _)) | Err(rustix::io::Errno::CONNRESET)
    )
}

/// Replaces a socket with our own and waits for a connection: a process that can do this
/// captures the next call meant for the service.
async fn hijack(socket: &Path, wait: Duration) {
    let target = socket.display().to_string();
    if let Err(e) = std::fs::remove_file(socket) {
        report("unlink the socket", &target, false, e);
    } else {
        report("unlink the socket", &target, true, "removed");
    }
    match tokio::net::UnixListener::bind(socket) {
        Err(e) => report("bind our own socket", &target, false, e),
        Ok(listener) => {
            report("bind our own socket", &target, true, "bound");
            match tokio::time::timeout(wait, listener.accept()).await {
                Ok(Ok((mut s, _))) => {
                    use tokio::io::AsyncReadExt;
                    let mut buf = vec![0u8; 4096];
                    let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .unwrap_or(0);
                    report("capture a call", &target, n > 0, format!("{n} bytes"));
                }
                _ => report("capture a call", &target, false, "nobody connected"),
            }
        }
    }
}

/// Every pack method a job would want, without a key: the account's own pack host and another
/// account's (list, plan, call without a ticket, restart), the gate's pack support (another
/// account's `mcp.json`, sealed secrets, project trust) and the console's account administration.
async fn packs(state: &Path, account: &str, victim: &str, secret: &str) {
    let run = state.join("run");
    for target in [account, victim] {
        let sock = run.join(format!("exec-{target}/packs.sock"));
        let name = format!("packs-{target}");
        let mut host = PacksClient::new(raw_channel(&sock));
        let (ok, d) = outcome(host.list(pb::ListPacksRequest {}).await);
        report(&format!("Packs/List of {target}"), &name, ok, d);
        let (ok, d) = outcome(
            host.plan(pb::PackPlanRequest {
                call: Some(call(target, "fake__write_note", json!({"path": "pwned"}))),
            })
            .await,
        );
        report(&format!("Packs/Plan of {target}"), &name, ok, d);
        let (ok, d) = outcome(
            host.invoke(pb::PackInvokeRequest {
                call: Some(call(target, "fake__write_note", json!({"path": "pwned"}))),
                ticket: None,
                call_age_ms: 0,
            })
            .await,
        );
        report(
            &format!("Packs/Invoke of {target} without a ticket"),
            &name,
            ok,
            d,
        );
        let (ok, d) = outcome(host.reload(pb::ReloadPacksRequest::default()).await);
        report(&format!("Packs/Reload of {target}"), &name, ok, d);
    }
    for sock in [run.join("audit.sock"), run.join("gate.sock")] {
        let name = sock.file_name().unwrap().to_string_lossy().into_owned();
        let mut support = PackSupportClient::new(raw_channel(&sock));
        let (ok, d) = outcome(
            support
                .secrets(pb::PackSecretsRequest {
                    names: vec![secret.to_owned()],
                })
                .await,
        );
        report("PackSupport/Secrets", &name, ok, d);
        let r = support.watch_config(pb::PackConfigRequest {}).await;
        let (ok, d) = match r {
            Ok(mut stream) => match stream.get_mut().message().await {
                Ok(Some(config)) => (
                    true,
                    format!("{} bytes of {}", config.text.len(), config.path),
                ),
                Ok(None) => (false, "the stream ended empty".to_owned()),
                Err(s) => (false, format!("{:?}: {}", s.code(), s.message())),
            },
            Err(s) => (false, format!("{:?}: {}", s.code(), s.message())),
        };
        report("PackSupport/WatchConfig", &name, ok, d);
        let (ok, d) = outcome(
            AccountAdminClient::new(raw_channel(&sock))
                .add_rule(pb::AddRuleRequest {
                    account: victim.into(),
                    section: "commands".into(),
                    kind: "allow".into(),
                    pattern: ".*".into(),
                    ..Default::default()
                })
                .await,
        );
        report(&format!("AccountAdmin/AddRule for {victim}"), &name, ok, d);
    }
    let (ok, d) = outcome(
        GateClient::new(raw_channel(&run.join("gate.sock")))
            .metrics(pb::MetricsRequest {})
            .await,
    );
    report("Gate/Metrics", "gate.sock", ok, d);
    let guess = glovebox_proto::transport::SocketKey::from_bytes(&[0x42; 32]).unwrap();
    let sock = run.join(format!("exec-{account}/packs.sock"));
    let r = glovebox_proto::transport::connect_authenticated(&sock, "broker", &guess).await;
    report(
        "handshake as broker with a guessed key",
        &format!("packs-{account}"),
        r.is_ok(),
        r.err().map(|e| e.to_string()).unwrap_or_default(),
    );
}

/// Sends one HTTP/1.1 GET to the broker and returns the status line and whether it set a cookie.
async fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, bool)> {
    let s = tokio::net::TcpStream::connect(addr).await?;
    http_get_on(s, addr, path, CLOSE).await
}

/// The header of a request on a connection that ends after its answer.
const CLOSE: &str = "Connection: close\r\n";

/// [`http_get`] on an open stream to the broker at `addr`, with `more` headers (each ending in
/// CRLF; `Connection` among them).
async fn http_get_on(
    mut s: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    addr: &str,
    path: &str,
    more: &str,
) -> std::io::Result<(u16, bool)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://{addr}\r\n{more}\r\n");
    s.write_all(request.as_bytes()).await?;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .map_err(|_| std::io::Error::other("no answer"))??;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, head.contains("\r\nset-cookie:")))
}

/// What a job could try to get at the web console or an approver's credential: the approver
/// token file, a running `glovebox approve` (signals, ptrace, /proc), a guessed login link, the
/// console and `/metrics` without a credential, and `console_login` on a connection without one;
/// the same pages, a WebSocket upgrade and the stdio handover with no credential and with a
/// guessed one over the broker's Unix socket `local`, if given (reachable: it is the user's, as
/// the port is).
async fn console(ws_url: &str, token_file: &Path, approver_pid: i32, local: Option<&Path>) {
    let r = std::fs::read(token_file);
    report(
        "read the approver token",
        &token_file.display().to_string(),
        r.is_ok(),
        r.err().map(|e| e.to_string()).unwrap_or_default(),
    );
    processes(&[approver_pid]);
    let addr = ws_url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    for path in [
        format!("/console/login?t={}", "7".repeat(64)),
        "/console/".to_owned(),
        "/metrics".to_owned(),
    ] {
        let (ok, d) = match http_get(&addr, &path).await {
            Ok((status, cookie)) => (
                (200..400).contains(&status) || cookie,
                format!("HTTP {status}, cookie set: {cookie}"),
            ),
            Err(e) => (false, e.to_string()),
        };
        report("GET", &path, ok, d);
    }
    let (ok, d) = match tokio_tungstenite::connect_async(ws_url).await {
        Err(e) => (false, format!("upgrade refused: {e}")),
        Ok((mut ws, _)) => {
            use futures_util::{SinkExt, StreamExt};
            use tokio_tungstenite::tungstenite::Message;
            let hello = json!({"type": "hello", "role": "approver"}).to_string();
            let login = json!({"type": "console_login"}).to_string();
            let _ = ws.send(Message::text(hello)).await;
            let _ = ws.send(Message::text(login)).await;
            let mut minted = None;
            while let Ok(Some(Ok(m))) =
                tokio::time::timeout(Duration::from_secs(3), ws.next()).await
            {
                if let Message::Text(t) = m
                    && t.as_str().contains("console_login")
                {
                    minted = Some(t.as_str().to_owned());
                    break;
                }
            }
            match minted {
                Some(frame) => (true, frame),
                None => (false, "no login link".to_owned()),
            }
        }
    };
    report("console_login without a credential", ws_url, ok, d);
    let Some(local) = local else { return };
    let upgrade = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
                   Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let guessed = format!("{upgrade}Authorization: Bearer gbx_{}\r\n", "7".repeat(43));
    // The stdio handover, which would give a session on descriptors of our choosing.
    let stdio = "Upgrade: glovebox-stdio\r\nConnection: Upgrade\r\n";
    let stdio_guessed = format!("{stdio}Authorization: Bearer gbx_{}\r\n", "7".repeat(43));
    for (path, more) in [
        (
            format!("/console/login?t={}", "7".repeat(64)),
            CLOSE.to_owned(),
        ),
        ("/console/".to_owned(), CLOSE.to_owned()),
        ("/metrics".to_owned(), CLOSE.to_owned()),
        ("/v1/ws".to_owned(), upgrade.to_owned()),
        ("/v1/ws".to_owned(), guessed),
        ("/v1/stdio".to_owned(), stdio.to_owned()),
        ("/v1/stdio".to_owned(), stdio_guessed),
    ] {
        let got = match tokio::net::UnixStream::connect(local).await {
            Ok(s) => http_get_on(s, &addr, &path, &more).await,
            Err(e) => Err(e),
        };
        let (ok, d) = match got {
            Ok((status, cookie)) => (
                (100..400).contains(&status) || cookie,
                format!("HTTP {status}, cookie set: {cookie}"),
            ),
            Err(e) => (false, e.to_string()),
        };
        report("GET over the Unix socket", &path, ok, d);
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    match arg(1).as_str() {
        "grpc" => grpc(Path::new(&arg(2)), &arg(3), &arg(4)).await,
        "processes" => {
            let pids: Vec<i32> = args[2..].iter().filter_map(|p| p.parse().ok()).collect();
            processes(&pids);
        }
        "packs" => packs(Path::new(&arg(2)), &arg(3), &arg(4), &arg(5)).await,
        "console" => {
            let local = args.get(5).map(Path::new);
            console(
                &arg(2),
                Path::new(&arg(3)),
                arg(4).parse().unwrap_or(0),
                local,
            )
            .await
        }
        "read" => read(&args[2..]),
        "write" => write(&args[2..]),
        "connect" => connect(&args[2..]),
        "hold" => hold(
            arg(2).parse().unwrap_or(1),
            Duration::from_secs(arg(3).parse().unwrap_or(5)),
            &args[4..],
        ),
        "hijack" => {
            let secs = arg(3).parse().unwrap_or(5);
            hijack(Path::new(&arg(2)), Duration::from_secs(secs)).await;
        }
        other => {
            eprintln!(
                "usage: glovebox-attack grpc STATE ACCOUNT VICTIM | packs STATE ACCOUNT VICTIM SECRET | console WS_URL TOKEN_FILE PID [SOCKET] | processes PID... | read PATH... | write PATH... | connect SOCKET... | hold N SECS TARGET... | hijack SOCKET [SECS] (got {other:?})"
            );
            std::process::exit(2);
        }
    }
    println!("{}", json!({ "done": true }));
}
