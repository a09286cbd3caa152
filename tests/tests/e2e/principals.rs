//! Principals that cannot become each other: what an agent's job (hostile code running as the
//! executor's user) can reach of glovebox's control plane, the other services and the state, and
//! which credential may do what. Every attack here runs from inside a real approved job.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use glovebox_e2e::{Glovebox, Options, attempts, plant_attack_binary};

/// Two accounts whose jobs' outer walls are open (the network, and every Unix socket: the
/// seccomp wall with a socket granted), so that these tests reach the control plane and show that
/// its own defences hold behind them (`walls.rs` tests the walls).
fn two_accounts() -> Glovebox {
    Glovebox::start_with(Options {
        accounts: vec![("alice".into(), true), ("bob".into(), true)],
        sandbox: vec![
            "network: any".into(),
            "unix_sockets: [/run/glovebox-tests-walls-open.sock]".into(),
        ],
        env: vec![("GLOVEBOX_NAMESPACES".into(), "off".into())],
        ..Default::default()
    })
}

#[tokio::test]
async fn a_job_cannot_use_any_control_socket() {
    let g = two_accounts();
    let attack = plant_attack_binary(&g.workdir);
    let mut approver = g.connect_as("alice", "approver").await;
    let mut agent = g.connect_as("alice", "agent").await;
    let before = std::fs::read_to_string(g.state.join("accounts/alice/permissions.yaml")).unwrap();
    let (status, stdout, stderr) = agent
        .run_job(
            &mut approver,
            &format!("{} grpc {} alice bob", attack.display(), g.state.display()),
        )
        .await;
    assert_eq!(status["exit_code"], 0, "{status} {stderr}");
    let tried = attempts(&stdout);
    // Resolve, SetEnabled and the broker's stream of handed-over answers; AddRule and
    // SetSandbox for two accounts on two sockets; Append, a vouched decide on the executor's
    // stream and a decide on the broker's stream on two sockets; Execute, a run on the broker's
    // stream, and Plan on two executors; two guessed handshakes.
    assert_eq!(tried.len(), 3 + 8 + 6 + 6 + 2, "{stdout}");
    for t in &tried {
        eprintln!("{} on {}: {}", t.attack, t.target, t.detail);
        assert!(
            !t.succeeded,
            "{} on {} succeeded: {}",
            t.attack, t.target, t.detail
        );
    }
    // Nothing changed: no rule, no sandbox switch, no forged audit row, no file.
    for account in ["alice", "bob"] {
        let text =
            std::fs::read_to_string(g.state.join(format!("accounts/{account}/permissions.yaml")))
                .unwrap();
        assert!(
            !text.contains(".*") && !text.contains("sandbox: false"),
            "{text}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(g.state.join("accounts/alice/permissions.yaml")).unwrap(),
        before
    );
    let pool = g.audit_pool().await;
    let forged: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE call_id = 'forged'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(forged, 0);
    assert!(!std::path::Path::new("/tmp/pwned-by-alice").exists());
    assert!(!g.root().join("work-alice/pwned").exists());
    assert!(!g.root().join("work-bob/pwned").exists());
    // The services are unharmed: the next call works.
    the_next_read_works(&g, &mut agent).await;
}

#[tokio::test]
async fn an_executor_key_writes_only_its_own_execute_rows() {
    use glovebox_proto::transport::handover::{peer, socket};
    use glovebox_proto::v1::{AuditEvent, audit_client::AuditClient};
    let g = two_accounts();
    let mut audit =
        AuditClient::new(g.channel_as("audit.sock", socket::AUDIT, &peer::executor("alice")));
    let forged = |kind: &str, account: &str| AuditEvent {
        call_id: format!("forged-{kind}-{account}"),
        account: account.into(),
        source: "gate".into(),
        kind: kind.into(),
        approval: "approved".into(),
        outcome: "ok".into(),
        ..Default::default()
    };
    for (kind, account) in [
        ("resolve", "alice"),
        ("decide", "alice"),
        ("execute", "bob"),
        ("service", ""),
    ] {
        let e = audit.append(forged(kind, account)).await.unwrap_err();
        assert_eq!(
            e.code(),
            tonic::Code::PermissionDenied,
            "{kind} {account}: {e:?}"
        );
    }
    audit.append(forged("execute", "alice")).await.unwrap();
    let pool = g.audit_pool().await;
    let rows: Vec<(String, String, String)> =
        sqlx::query_as("SELECT call_id, source, account FROM events WHERE call_id LIKE 'forged-%'")
            .fetch_all(&pool)
            .await
            .unwrap();
    // The one row admitted says who really wrote it, whatever the event claimed.
    assert_eq!(
        rows,
        vec![(
            "forged-execute-alice".into(),
            "executor".into(),
            "alice".into()
        )]
    );
    // And the executor's key is worth nothing on the gate's main socket.
    let mut main =
        AuditClient::new(g.channel_as("gate.sock", socket::GATE, &peer::executor("alice")));
    let e = main.append(forged("execute", "alice")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
}

/// Sends each of `forgeries` as a message on the gate's `ExecutorGate.Calls` stream, opened on
/// `channel`, and returns how the gate refused each, by its request's id (one answered is a
/// failure of the test).
async fn refusals(
    channel: &glovebox_proto::transport::Link,
    forgeries: Vec<glovebox_proto::v1::executor_gate_call::Body>,
) -> std::collections::BTreeMap<u64, tonic::Code> {
    use glovebox_proto::v1::executor_gate_answer::Body as Answer;
    use glovebox_proto::v1::{ExecutorGateAnswer, ExecutorGateCall};
    let (mut to_gate, mut from_gate) = channel
        .untraced()
        .open_duplex("/glovebox.v1.ExecutorGate/Calls")
        .await
        .unwrap();
    let sent = forgeries.len();
    for (id, body) in (1..).zip(forgeries) {
        let call = ExecutorGateCall {
            id,
            body: Some(body),
            ..Default::default()
        };
        to_gate.send(&call).unwrap();
    }
    let mut refused = std::collections::BTreeMap::new();
    for _ in 0..sent {
        let answer: ExecutorGateAnswer = from_gate.next().await.unwrap().unwrap();
        let Some(Answer::Error(e)) = answer.body else {
            panic!("a forged request was answered: {answer:?}")
        };
        refused.insert(answer.id, tonic::Code::from(e.code));
    }
    refused
}

#[tokio::test]
async fn an_executor_key_has_the_gate_judge_only_calls_the_broker_vouched_for() {
    use glovebox_proto::transport::handover::{peer, socket};
    use glovebox_proto::v1::executor_gate_call::Body;
    use glovebox_proto::v1::{
        AuditEvent, CallRows, Domain, Plan, Subject, Ticket, ToolCall, VouchedDecideRequest,
        Voucher,
    };
    let g = two_accounts();
    let as_executor = g.channel_as("audit.sock", socket::AUDIT, &peer::executor("alice"));
    let mut forgeries = Vec::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for account in ["alice", "bob"] {
        let request = VouchedDecideRequest {
            call: Some(ToolCall {
                account: account.into(),
                call_id: format!("forged-{account}"),
                tool: "file_read".into(),
                params_json: r#"{"path":"a.txt"}"#.into(),
                client_call_id: "r1".into(),
            }),
            plan: Some(Plan {
                subjects: vec![Subject {
                    domain: Domain::Read as i32,
                    path: g.workdir.join("a.txt").display().to_string(),
                    state: None,
                }],
                content_tag: Vec::new(),
                pack: None,
            }),
            voucher: Some(Voucher {
                issued_at_ms: now,
                mac: vec![0x42; 32],
            }),
            done_ahead: None,
            // An answer for the broker's wait for this call, were it let through.
            deliver: Some(glovebox_proto::v1::ExecuteResponse {
                result_json: r#"{"content":"forged"}"#.into(),
                ..Default::default()
            }),
        };
        forgeries.push(Body::Decide(request));
    }
    // Those requests, as messages on the executor's stream to the gate, are each refused, each
    // answer naming its request; and so is a call's rows with a ticket the gate never signed.
    let row = |kind: &str| AuditEvent {
        call_id: "forged-rows".into(),
        account: "alice".into(),
        kind: kind.into(),
        tool: "file_read".into(),
        outcome: "ok".into(),
        ..Default::default()
    };
    forgeries.push(Body::AppendCall(CallRows {
        execute: Some(row("execute")),
        result: Some(row("result")),
        ticket: Some(Ticket {
            body: b"not a ticket".to_vec(),
            mac: vec![0x42; 32],
        }),
    }));
    // The broker's stream of answers the gate hands over (opened here as the broker would):
    // forged decides, which carry answers to hand over, put nothing on it.
    let (_keep_open, mut handed) = g
        .gate_channel()
        .untraced()
        .open_duplex("/glovebox.v1.Gate/Deliveries")
        .await
        .unwrap();
    let sent = forgeries.len() as u64;
    let refused = refusals(&as_executor, forgeries).await;
    let denied = (1..=sent).map(|id| (id, tonic::Code::PermissionDenied));
    assert_eq!(refused, denied.collect());
    let nothing = tokio::time::timeout(
        std::time::Duration::from_millis(300),
        handed.next::<glovebox_proto::v1::Delivered>(),
    )
    .await;
    assert!(nothing.is_err(), "an answer was handed over: {nothing:?}");
    // Only the broker opens that stream: not an executor's key, on either gate socket.
    for (file, socket_name, code) in [
        ("audit.sock", socket::AUDIT, tonic::Code::Unimplemented),
        ("gate.sock", socket::GATE, tonic::Code::Unavailable),
    ] {
        let e = g
            .channel_as(file, socket_name, &peer::executor("alice"))
            .untraced()
            .open_duplex("/glovebox.v1.Gate/Deliveries")
            .await
            .err()
            .expect("an executor opened the broker's stream of answers");
        assert_eq!(e.code(), code, "{file}: {e:?}");
    }
    // A pack host's key opens that stream too (it asks for its pack calls' verdicts), and has
    // judged nothing the broker did not vouch for: not a built-in call, not another account's
    // pack call, not its own with a forged voucher, nor rows on a forged ticket.
    let as_packs = g.channel_as("audit.sock", socket::AUDIT, &peer::packs("alice"));
    let forged_voucher = Voucher {
        issued_at_ms: now,
        mac: vec![0x42; 32],
    };
    let pack_call = |account: &str, call_id: &str| VouchedDecideRequest {
        call: Some(ToolCall {
            account: account.into(),
            call_id: call_id.into(),
            tool: "everything__echo".into(),
            params_json: r#"{"message":"hi"}"#.into(),
            client_call_id: "r1".into(),
        }),
        plan: Some(glovebox_proto::packs::plan_of(
            "everything__echo",
            glovebox_proto::v1::PackFacts {
                read_only: true,
                origin: "user".into(),
            },
            Vec::new(),
        )),
        voucher: Some(forged_voucher.clone()),
        done_ahead: None,
        deliver: None,
    };
    let mut built_in = pack_call("alice", "forged-packs-read");
    built_in.call.as_mut().unwrap().tool = "file_read".into();
    let forgeries = [
        Body::Decide(built_in),
        Body::Decide(pack_call("bob", "forged-packs-bob")),
        Body::Decide(pack_call("alice", "forged-packs-alice")),
        Body::AppendCall(CallRows {
            execute: Some(row("execute")),
            result: Some(row("result")),
            ticket: Some(Ticket {
                body: b"not a ticket".to_vec(),
                mac: vec![0x42; 32],
            }),
        }),
    ];
    let sent = forgeries.len() as u64;
    let refused = refusals(&as_packs, Vec::from(forgeries)).await;
    let denied = (1..=sent).map(|id| (id, tonic::Code::PermissionDenied));
    assert_eq!(refused, denied.collect());
    // Nothing was judged, signed or audited for either.
    let pool = g.audit_pool().await;
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE call_id LIKE 'forged-%'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

#[tokio::test]
async fn an_administrator_key_may_only_ask_an_executor_to_plan() {
    use glovebox_proto::transport::handover::{peer, socket};
    use glovebox_proto::v1::{
        ExecuteRequest, ExecutorStatusRequest, PlanRequest, PreviewRequest, ToolCall,
        executor_client::ExecutorClient,
    };
    let g = Glovebox::start();
    let mut as_admin = ExecutorClient::new(g.channel_as(
        &format!("exec-{}/executor.sock", g.account),
        &socket::executor(&g.account),
        peer::ADMIN,
    ));
    let call = ToolCall {
        account: g.account.clone(),
        call_id: "admin-plan".into(),
        tool: "file_read".into(),
        params_json: r#"{"path": "a.txt"}"#.into(),
        client_call_id: String::new(),
    };
    // What `glovebox policy explain` needs: the executor's plan of the call.
    let planned = as_admin
        .plan(PlanRequest {
            call: Some(call.clone()),
        })
        .await
        .unwrap()
        .into_inner();
    let plan = planned.plan.expect("a plan");
    assert_eq!(
        plan.subjects[0].path,
        g.workdir.join("a.txt").to_str().unwrap()
    );
    // Nothing else: no preview, no execute, not even the status.
    let refused = [
        as_admin
            .preview(PreviewRequest {
                call: Some(call.clone()),
                plan: Some(plan),
            })
            .await
            .map(|_| ()),
        as_admin
            .execute(ExecuteRequest {
                call: Some(call),
                ticket: None,
                ..Default::default()
            })
            .await
            .map(|_| ()),
        as_admin.status(ExecutorStatusRequest {}).await.map(|_| ()),
    ];
    for r in refused {
        assert_eq!(r.unwrap_err().code(), tonic::Code::PermissionDenied);
    }
    // Nor the broker's stream of calls.
    let e = g
        .channel_as(
            &format!("exec-{}/executor.sock", g.account),
            &socket::executor(&g.account),
            peer::ADMIN,
        )
        .untraced()
        .open_duplex("/glovebox.v1.Executor/Runs")
        .await
        .err()
        .expect("an administrator opened the broker's stream of calls");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    // The administrator's key of the gate's admin socket is worth nothing on the executor's.
    let mut wrong = ExecutorClient::new(g.channel_as(
        &format!("exec-{}/executor.sock", g.account),
        socket::ADMIN,
        peer::ADMIN,
    ));
    let e = wrong.status(ExecutorStatusRequest {}).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
}

/// Opens a WebSocket with `token` and says hello as `role`; returns the frames until the server
/// closed, and the close code.
async fn hello_with(
    g: &Glovebox,
    token: &str,
    role: &str,
) -> (Vec<serde_json::Value>, Option<u16>) {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let (socket, _) = glovebox_e2e::open(&g.url, glovebox_e2e::Auth::Header(token))
        .await
        .expect("upgrade");
    let mut client = glovebox_e2e::Client {
        socket,
        hello_ok: serde_json::Value::Null,
    };
    client
        .send(serde_json::json!({"type": "hello", "role": role}))
        .await;
    let mut frames = Vec::new();
    loop {
        match tokio::time::timeout(glovebox_e2e::WAIT, client.socket.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                frames.push(serde_json::from_str(t.as_str()).unwrap())
            }
            Ok(Some(Ok(Message::Close(c)))) => return (frames, c.map(|c| u16::from(c.code))),
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(_))) | Ok(None) => return (frames, None),
            Err(_) => panic!("the server neither answered nor closed: {frames:?}"),
        }
    }
}

async fn auth_rows(g: &Glovebox) -> Vec<(String, String, String)> {
    sqlx::query_as("SELECT account, outcome, reason FROM events WHERE kind = 'auth' ORDER BY id")
        .fetch_all(&g.audit_pool().await)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_agent_token_cannot_approve_and_the_attempt_is_audited() {
    let g = Glovebox::start();
    let (frames, close) = hello_with(&g, &g.credential_of(&g.account, "agent"), "approver").await;
    assert_eq!(close, Some(1008), "{frames:?}");
    assert!(frames.iter().all(|f| f["type"] != "hello_ok"), "{frames:?}");
    assert_eq!(frames[0]["code"], "denied", "{frames:?}");
    let rows = auth_rows(&g).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].0.as_str(), rows[0].1.as_str()),
        (g.account.as_str(), "refused")
    );
    assert!(rows[0].2.contains("agent credential"), "{rows:?}");
    // So an agent cannot answer its own ask: with no approver it is denied at once.
    let mut agent = g.connect("agent").await;
    let r = agent
        .invoke(
            "w",
            "file_write",
            serde_json::json!({"path": "x.txt", "content": "x"}),
        )
        .await;
    assert_eq!(r["error"]["code"], "denied", "{r}");
    assert!(!g.workdir.join("x.txt").exists());
}

#[tokio::test]
async fn an_approver_token_cannot_invoke_tools_anywhere() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let approver_token = g.credential_of(&g.account, "approver");
    let (frames, close) = hello_with(&g, &approver_token, "agent").await;
    assert_eq!(close, Some(1008), "{frames:?}");
    assert!(frames.iter().all(|f| f["type"] != "hello_ok"), "{frames:?}");
    // Not on MCP, nor as a client-tool provider.
    let mcp_url = g.url.replace("/v1/ws", "");
    let bearer = format!("Bearer {approver_token}");
    let (status, _, _) = glovebox_e2e::http_request(
        &mcp_url,
        "POST",
        "/mcp",
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ],
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    )
    .await;
    assert_eq!(status, 403);
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
            g.url.replace("/v1/ws", "/v1/client-tools"),
        )
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", bearer.parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status().as_u16(), 403),
        other => panic!(
            "a provider with the approver token was accepted: {:?}",
            other.map(|_| ())
        ),
    }
    assert_eq!(auth_rows(&g).await.len(), 3);
}

#[tokio::test]
async fn a_rotated_token_is_refused_at_once_and_its_connections_close() {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let g = Glovebox::start();
    for role in ["agent", "approver"] {
        let old = g.credential_of(&g.account, role);
        let mut connected = g.connect(role).await;
        // The only account is the default, as for every other command; naming it works too.
        let (code, out, err) = if role == "agent" {
            g.run_cli(&["token", "rotate", "--role", role])
        } else {
            g.run_cli(&["token", "rotate", "--account", &g.account, "--role", role])
        };
        assert_eq!(code, 0, "{out} {err}");
        let new = g.credential_of(&g.account, role);
        assert_ne!(old, new);
        // The connection that used the old token is closed by the broker.
        let closed = loop {
            match tokio::time::timeout(glovebox_e2e::WAIT, connected.socket.next())
                .await
                .expect("the old connection was not closed")
            {
                Some(Ok(Message::Close(c))) => break c.map(|c| u16::from(c.code)),
                Some(Ok(_)) => continue,
                _ => break None,
            }
        };
        assert_eq!(closed, Some(1008), "{role}");
        // The old token no longer opens anything; the new one does.
        let refused = glovebox_e2e::open(&g.url, glovebox_e2e::Auth::Header(&old)).await;
        assert_eq!(refused.err(), Some(401), "{role}");
        let fresh =
            glovebox_e2e::Client::connect(&g.url, glovebox_e2e::Auth::Header(&new), role).await;
        assert_eq!(fresh.hello_ok["role"], role);
    }
}

#[tokio::test]
async fn an_mcp_session_belongs_to_the_account_that_created_it() {
    let g = Glovebox::start_with(Options {
        accounts: vec![("alice".into(), true), ("bob".into(), true)],
        ..Default::default()
    });
    let base = g.url.replace("/v1/ws", "");
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let bearer = |account: &str| format!("Bearer {}", g.token_of(account));
    let alice = bearer("alice");
    let accept = ("accept", "application/json, text/event-stream");
    let (status, headers, _) = glovebox_e2e::http_request(
        &base,
        "POST",
        "/mcp",
        &[
            ("authorization", &alice),
            ("content-type", "application/json"),
            accept,
        ],
        initialize,
    )
    .await;
    assert_eq!(status, 200);
    let session = headers
        .iter()
        .find(|(k, _)| k == "mcp-session-id")
        .map(|(_, v)| v.clone())
        .expect("a session id");
    // bob's token cannot end (or use) alice's session.
    let bob = bearer("bob");
    let (status, _, _) = glovebox_e2e::http_request(
        &base,
        "DELETE",
        "/mcp",
        &[("authorization", &bob), ("mcp-session-id", &session)],
        "",
    )
    .await;
    assert_eq!(status, 404);
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#;
    let (status, _, _) = glovebox_e2e::http_request(
        &base,
        "POST",
        "/mcp",
        &[
            ("authorization", &bob),
            ("mcp-session-id", &session),
            ("content-type", "application/json"),
            accept,
        ],
        list,
    )
    .await;
    assert_eq!(status, 404);
    // alice's session is still hers: she can end it.
    let (status, _, _) = glovebox_e2e::http_request(
        &base,
        "DELETE",
        "/mcp",
        &[("authorization", &alice), ("mcp-session-id", &session)],
        "",
    )
    .await;
    assert!((200..300).contains(&status), "{status}");
}

/// Starts two accounts and connects alice's agent and approver.
async fn alice_session() -> (Glovebox, glovebox_e2e::Client, glovebox_e2e::Client) {
    let g = two_accounts();
    let approver = g.connect_as("alice", "approver").await;
    let agent = g.connect_as("alice", "agent").await;
    (g, agent, approver)
}

fn state_of(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[tokio::test]
async fn a_job_cannot_signal_trace_or_read_any_service_nor_its_own_shim() {
    let (g, mut agent, mut approver) = alice_session().await;
    let attack = plant_attack_binary(&g.workdir);
    let mut pids = vec![g.up_pid().unwrap()];
    for service in ["gate", "broker", "executor"] {
        pids.extend(g.service_pids(service));
    }
    assert_eq!(
        pids.len(),
        5,
        "up, gate, broker and two executors: {pids:?}"
    );
    let list: Vec<String> = pids.iter().map(i32::to_string).collect();
    // $PPID is the job's own shim, which must survive whatever the job does.
    let command = format!("{} processes $PPID {}", attack.display(), list.join(" "));
    let (status, stdout, stderr) = agent.run_job(&mut approver, &command).await;
    assert_eq!(status["exit_code"], 0, "{status} {stderr}");
    let tried = attempts(&stdout);
    // Per process: STOP, CONT, TERM, KILL, ptrace, and six /proc reads.
    assert_eq!(tried.len(), 6 * 11, "{stdout}");
    let won: Vec<String> = tried
        .iter()
        .filter(|t| t.succeeded)
        .map(|t| format!("{} on {}", t.attack, t.target))
        .collect();
    assert!(won.is_empty(), "succeeded: {won:?} (pids {pids:?})");
    for t in &tried {
        assert!(
            !t.succeeded,
            "{} on {} succeeded: {}",
            t.attack, t.target, t.detail
        );
    }
    for pid in &pids {
        assert!(glovebox_e2e::alive(*pid), "pid {pid} is gone");
        assert_ne!(state_of(*pid), Some('T'), "pid {pid} was stopped");
    }
    the_next_read_works(&g, &mut agent).await;
}

/// A running `glovebox mcp` has handed its stdio to the broker and holds the in-flight record,
/// the session's pipes and the agent token: a job of the same account must not stop it, kill
/// it (which would end the session), trace it or read its descriptors and memory.
#[tokio::test]
async fn a_job_cannot_signal_trace_or_read_a_running_glovebox_mcp() {
    use glovebox_e2e::stdio_bridge::Bridge;
    let (g, mut agent, mut approver) = alice_session().await;
    std::fs::write(g.workdir.join("hello.txt"), "still served\n").unwrap();
    let mut bridge = Bridge::start_in(&g.state, &["--account", "alice"]);
    bridge.assert_said("the broker serves this session");
    let pid = bridge.child.id() as i32;
    let attack = plant_attack_binary(&g.workdir);
    let command = format!("{} processes {pid}", attack.display());
    let (status, stdout, stderr) = agent.run_job(&mut approver, &command).await;
    assert_eq!(status["exit_code"], 0, "{status} {stderr}");
    let tried = attempts(&stdout);
    // STOP, CONT, TERM, KILL, ptrace, and six /proc reads.
    assert_eq!(tried.len(), 11, "{stdout}");
    for t in &tried {
        assert!(
            !t.succeeded,
            "{} on {} succeeded: {}",
            t.attack, t.target, t.detail
        );
    }
    assert!(glovebox_e2e::alive(pid), "the bridge is gone");
    assert_ne!(state_of(pid), Some('T'), "the bridge was stopped");
    // Its session goes on.
    bridge.call(
        "read",
        "file_read",
        serde_json::json!({"path": "hello.txt"}),
    );
    let read = bridge.answer("read");
    assert_eq!(read["result"]["isError"], false, "{read}");
    assert_eq!(
        read["result"]["structuredContent"]["content"],
        "still served\n"
    );
}

#[tokio::test]
async fn a_job_cannot_replace_an_executor_socket_nor_the_brokers() {
    let (g, mut agent, mut approver) = alice_session().await;
    let attack = plant_attack_binary(&g.workdir);
    // The broker's Unix socket too: a job that put its own in its place would be handed the
    // bearer token of the next `glovebox mcp` that connects.
    let sockets = [
        "run/exec-alice/executor.sock",
        "run/exec-bob/executor.sock",
        "run/broker.sock",
    ];
    for socket in sockets {
        let socket = g.state.join(socket);
        let command = format!("{} hijack {} 2", attack.display(), socket.display());
        let (_, stdout, stderr) = agent.run_job(&mut approver, &command).await;
        let tried = attempts(&stdout);
        assert!(tried.len() >= 2, "{stdout} {stderr}");
        for t in &tried {
            assert!(
                !t.succeeded,
                "{} on {} succeeded: {}",
                t.attack, t.target, t.detail
            );
        }
        // Refused by Landlock, or not even there: the state is out of sight under namespaces.
        assert!(
            tried[0].detail.contains("Permission denied")
                || tried[0].detail.contains("No such file or directory"),
            "{tried:?}"
        );
        assert!(socket.exists());
    }
    // Both executors still answer through the broker.
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let r = agent
        .invoke("after", "file_read", serde_json::json!({"path": "a.txt"}))
        .await;
    assert_eq!(r["ok"], true, "{r}");
    let mut bob = g.connect_as("bob", "agent").await;
    let r = bob
        .invoke("bob", "file_list", serde_json::json!({"path": "."}))
        .await;
    assert_eq!(r["ok"], true, "{r}");
}

#[tokio::test]
async fn a_job_cannot_read_the_state_directory_even_under_tmp() {
    let (g, mut agent, mut approver) = alice_session().await;
    // The harness keeps the state directory under /tmp, next to the workdirs.
    assert!(g.state.starts_with("/tmp"), "{}", g.state.display());
    let attack = plant_attack_binary(&g.workdir);
    // What `up --detach` keeps there too: its log and its pid.
    std::fs::write(g.state.join("glovebox.log"), "glovebox is up\n").unwrap();
    std::fs::write(g.state.join("glovebox.log.pid"), "1\n").unwrap();
    let files = [
        "glovebox.log",
        "glovebox.log.pid",
        "glovebox.yaml",
        "control.key",
        "ticket.key",
        "audit.db",
        "accounts/alice/token",
        "accounts/alice/approver.token",
        "accounts/alice/permissions.yaml",
        "accounts/bob/token",
        "run",
        ".",
    ];
    let paths: Vec<String> = files
        .iter()
        .map(|f| g.state.join(f).display().to_string())
        .collect();
    let command = format!("{} read {}", attack.display(), paths.join(" "));
    let (_, stdout, stderr) = agent.run_job(&mut approver, &command).await;
    let tried = attempts(&stdout);
    assert_eq!(tried.len(), files.len(), "{stdout} {stderr}");
    for t in &tried {
        assert!(!t.succeeded, "{} of {} succeeded", t.attack, t.target);
        assert!(
            t.detail.contains("Permission denied")
                || t.detail.contains("No such file or directory"),
            "{t:?}"
        );
        if t.target.contains("glovebox.log") {
            assert!(t.detail.contains("Permission denied"), "{t:?}");
        }
    }
}

#[tokio::test]
async fn a_job_gets_a_private_tmp_no_terminal_and_harmless_devices_only() {
    let (g, mut agent, mut approver) = alice_session().await;
    let trash = g.trash_dir();
    assert!(trash.exists(), "the executor makes the trash at start");
    let command = format!(
        "echo \"tmp=$TMPDIR\"; touch \"$TMPDIR/x\" && echo tmp-writable; \
         ls /tmp >/dev/null 2>&1 && echo TMP-LISTED; \
         touch /tmp/glovebox-escape-$$ 2>/dev/null && echo TMP-WRITTEN; \
         tty; (: < /dev/tty) 2>/dev/null && echo TTY-OPENED; \
         ls /dev/pts >/dev/null 2>&1 && echo PTS-LISTED; \
         ls /dev >/dev/null 2>&1 && echo DEV-LISTED; \
         head -c1 /dev/urandom >/dev/null && echo > /dev/null && echo devices-ok; \
         ls {} >/dev/null 2>&1 && echo TRASH-LISTED; true",
        trash.display()
    );
    let (status, stdout, stderr) = agent.run_job(&mut approver, &command).await;
    assert_eq!(status["exit_code"], 0, "{status} {stderr}");
    let tmp = stdout
        .lines()
        .find_map(|l| l.strip_prefix("tmp="))
        .expect("TMPDIR")
        .to_owned();
    // The private /tmp of its namespaces, or (without them) a directory of its own.
    assert!(
        tmp == "/tmp" || tmp.starts_with("/tmp/glovebox-jobs-alice-"),
        "{tmp}"
    );
    for want in ["tmp-writable", "not a tty", "devices-ok"] {
        assert!(stdout.contains(want), "{want}: {stdout}");
    }
    for never in [
        "TMP-LISTED",
        "TMP-WRITTEN",
        "TTY-OPENED",
        "PTS-LISTED",
        "DEV-LISTED",
        "TRASH-LISTED",
    ] {
        // Under namespaces /tmp is the job's own: listing and writing it is fine, and nothing
        // written there reaches the machine's /tmp.
        if tmp == "/tmp" && never.starts_with("TMP-") {
            continue;
        }
        assert!(!stdout.contains(never), "{never}: {stdout}");
    }
    let escaped = std::fs::read_dir("/tmp").unwrap().flatten().any(|e| {
        e.file_name()
            .to_string_lossy()
            .starts_with("glovebox-escape-")
    });
    assert!(!escaped, "a job wrote the machine's /tmp");
    // The job's temporary directory goes with it.
    if tmp != "/tmp" {
        glovebox_e2e::eventually("the job's TMPDIR to be removed", || {
            !std::path::Path::new(&tmp).exists()
        })
        .await;
    }
}

#[tokio::test]
async fn pipes_a_job_leaves_for_the_agent_to_read_stall_no_executor_thread() {
    let (g, mut agent, mut approver) = alice_session().await;
    // Pipes nobody writes to: opening one to read would wait for a writer for ever, and a
    // whole-file read runs on one of the executor's two async worker threads.
    let (status, _, stderr) = agent
        .run_job(
            &mut approver,
            "mkfifo p0 p1 p2 p3 && mkdir -p fifos && mkfifo fifos/p",
        )
        .await;
    assert_eq!(status["exit_code"], 0, "{status} {stderr}");
    // More reads at once than the executor has worker threads.
    for i in 0..4 {
        agent
            .send(
                serde_json::json!({"type": "invoke", "call_id": format!("p{i}"),
                "tool": "file_read", "params": {"path": format!("p{i}")}}),
            )
            .await;
    }
    // Their results, in whatever order they finish.
    let mut results = std::collections::BTreeMap::new();
    while results.len() < 4 {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(20), agent.next())
            .await
            .expect("a read of a pipe must not wait for a writer");
        if frame["type"] == "result" {
            results.insert(frame["call_id"].as_str().unwrap().to_owned(), frame);
        }
    }
    assert_eq!(results.keys().collect::<Vec<_>>(), ["p0", "p1", "p2", "p3"]);
    for r in results.values() {
        glovebox_e2e::expect_error(r, "invalid_params");
    }
    // A listing shows the pipe without opening it, with and without details.
    for details in [false, true] {
        let r = agent
            .invoke(
                &format!("ls-{details}"),
                "file_list",
                serde_json::json!({"path": "fifos", "details": details}),
            )
            .await;
        let listed = glovebox_e2e::expect_ok(&r);
        let entries = listed["entries"].as_array().unwrap();
        assert_eq!(entries.len(), 1, "{listed}");
        assert_eq!(
            (&entries[0]["name"], &entries[0]["type"]),
            (&"p".into(), &"other".into())
        );
    }
    // The executor still answers.
    the_next_read_works(&g, &mut agent).await;
}

/// The services still answer the agent: a read of a file written now gives its content.
async fn the_next_read_works(g: &Glovebox, agent: &mut glovebox_e2e::Client) {
    std::fs::write(g.workdir.join("after.txt"), "fine").unwrap();
    let r = agent
        .invoke(
            "after",
            "file_read",
            serde_json::json!({"path": "after.txt"}),
        )
        .await;
    assert_eq!(glovebox_e2e::expect_ok(&r)["content"], "fine");
}

/// Starts a job that leaves behind a `setsid` child without the job marker, writing its pid to
/// `escaped.pid` in the workdir; returns the pid and the job's id.
async fn job_with_an_escapee(
    g: &Glovebox,
    agent: &mut glovebox_e2e::Client,
    approver: &mut glovebox_e2e::Client,
    then: &str,
) -> (i32, String) {
    let command = format!(
        "env -u GLOVEBOX_JOB setsid sh -c 'echo $$ > escaped.pid.tmp; mv escaped.pid.tmp escaped.pid; exec sleep 1000' \
         </dev/null >/dev/null 2>&1 & {then}"
    );
    let (_, r) = agent
        .invoke_asked(
            approver,
            "escape",
            "exec_run",
            serde_json::json!({ "command": command }),
            "once",
        )
        .await;
    let job = glovebox_e2e::expect_ok(&r)["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let pid_file = g.workdir.join("escaped.pid");
    glovebox_e2e::eventually("the escapee's pid", || pid_file.exists()).await;
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    glovebox_e2e::eventually("the escapee to run", || glovebox_e2e::alive(pid)).await;
    (pid, job)
}

#[tokio::test]
async fn a_setsid_child_without_the_marker_dies_when_its_job_ends() {
    let (g, mut agent, mut approver) = alice_session().await;
    let (pid, job) = job_with_an_escapee(&g, &mut agent, &mut approver, "sleep 0.5").await;
    let status = agent.wait_job(&job).await;
    assert_eq!(status["state"], "exited", "{status}");
    glovebox_e2e::eventually("the escapee to die with its job", || {
        !glovebox_e2e::alive(pid)
    })
    .await;
}

#[tokio::test]
async fn a_setsid_child_without_the_marker_dies_when_its_job_is_killed() {
    let (g, mut agent, mut approver) = alice_session().await;
    let (pid, job) = job_with_an_escapee(&g, &mut agent, &mut approver, "sleep 1000").await;
    let r = agent
        .invoke("kill", "exec_kill", serde_json::json!({ "job_id": job }))
        .await;
    assert_eq!(glovebox_e2e::expect_ok(&r)["state"], "killed", "{r}");
    glovebox_e2e::eventually("the escapee to die with its job", || {
        !glovebox_e2e::alive(pid)
    })
    .await;
}

#[tokio::test]
async fn a_setsid_child_without_the_marker_dies_when_glovebox_stops() {
    let (mut g, mut agent, mut approver) = alice_session().await;
    let (pid, _) = job_with_an_escapee(&g, &mut agent, &mut approver, "sleep 1000").await;
    drop(agent);
    drop(approver);
    g.stop();
    glovebox_e2e::eventually("the escapee to die with glovebox", || {
        !glovebox_e2e::alive(pid)
    })
    .await;
}

#[tokio::test]
async fn a_state_dir_inside_a_workdir_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let out = std::process::Command::new(glovebox_e2e::glovebox_bin())
        .args(["up", "--listen", "127.0.0.1:0", "--workdir"])
        .arg(&work)
        .arg("--state-dir")
        .arg(work.join(".glovebox-state"))
        .env("HOME", dir.path().join("home"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("lies inside root"), "{stderr}");
    // Nothing was started.
    assert!(!work.join(".glovebox-state/run/gate.sock").exists());
}

#[tokio::test]
async fn every_audit_row_of_an_approved_command_masks_its_secrets() {
    let (g, mut agent, mut approver) = alice_session().await;
    let secret = "ghp_0123456789abcdefABCDEF0123456789abcd";
    let command = format!("echo --token {secret} > /dev/null");
    let (status, _, _) = agent.run_job(&mut approver, &command).await;
    assert_eq!(status["state"], "exited", "{status}");
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT source, kind, subject FROM events WHERE tool = 'exec_run' ORDER BY id",
    )
    .fetch_all(&g.audit_pool().await)
    .await
    .unwrap();
    let kinds: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    for kind in ["decide", "resolve", "execute"] {
        assert!(kinds.contains(&kind), "{kind} row missing: {rows:?}");
    }
    for (source, kind, subject) in &rows {
        assert!(!subject.contains(secret), "{source} {kind} row: {subject}");
    }
    let execute = rows.iter().find(|r| r.1 == "execute").unwrap();
    assert_eq!(execute.0, "executor");
    assert!(execute.2.contains("exec echo --token ****"), "{execute:?}");
}

#[tokio::test]
async fn a_job_cannot_use_a_pack_host_nor_read_pack_secrets_or_config() {
    const VALUE: &str = "pack-secret-5b0e27a1";
    let fake = glovebox_e2e::sibling_bin("glovebox-fake-pack");
    let g = Glovebox::start_with(Options {
        accounts: vec![("alice".into(), true), ("bob".into(), true)],
        mcp_json: Some(
            serde_json::json!({"mcpServers": {"fake": {
                "command": fake, "args": ["good"],
                "env": {"API_TOKEN": "${secret:API_TOKEN}"}
            }}})
            .to_string(),
        ),
        ..Default::default()
    });
    for account in ["alice", "bob"] {
        g.set_secret(account, "API_TOKEN", VALUE);
    }
    let attack = plant_attack_binary(&g.workdir);
    let mut approver = g.connect_as("alice", "approver").await;
    let mut agent = g.connect_as("alice", "agent").await;
    let (status, stdout, stderr) = agent
        .run_job(
            &mut approver,
            &format!(
                "{} packs {} alice bob API_TOKEN",
                attack.display(),
                g.state.display()
            ),
        )
        .await;
    assert_eq!(status["exit_code"], 0, "{status} {stderr}");
    let tried = attempts(&stdout);
    // List, Plan, Invoke and Reload on two pack hosts; Secrets, WatchConfig and AccountAdmin on
    // two gate sockets; the gate's Metrics; one guessed handshake.
    assert_eq!(tried.len(), 4 * 2 + 3 * 2 + 1 + 1, "{stdout}");
    for account in ["alice", "bob"] {
        let sock = g.state.join(format!("run/exec-{account}/packs.sock"));
        assert!(sock.exists(), "{} is not there to attack", sock.display());
    }
    for t in &tried {
        eprintln!("{} on {}: {}", t.attack, t.target, t.detail);
        assert!(
            !t.succeeded,
            "{} on {} succeeded: {}",
            t.attack, t.target, t.detail
        );
    }
    assert!(!stdout.contains(VALUE), "{stdout}");
    assert!(!g.workdir.join("pwned").exists());
    assert!(!g.root().join("work-bob/pwned").exists());
    // The pack host is unharmed and still serves its own agent.
    let r = agent
        .invoke("after", "fake__echo", serde_json::json!({"text": "fine"}))
        .await;
    assert_eq!(r["ok"], true, "{r}");
}

#[tokio::test]
async fn a_job_cannot_take_the_approvers_credential_nor_mint_a_console_login() {
    let (g, mut agent, mut approver) = alice_session().await;
    let attack = plant_attack_binary(&g.workdir);
    // A person's `glovebox approve`, running as the same user as the job, holding the credential.
    let mut person = std::process::Command::new(glovebox_e2e::glovebox_bin())
        .args(["approve", "--account", "alice", "--state-dir"])
        .arg(&g.state)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = person.id() as i32;
    let token_file = g.state.join("accounts/alice/approver.token");
    let command = format!(
        "{} console {} {} {pid} {}",
        attack.display(),
        g.url,
        token_file.display(),
        g.state.join("run/broker.sock").display()
    );
    let (status, stdout, stderr) = agent.run_job(&mut approver, &command).await;
    assert_eq!(status["exit_code"], 0, "{status} {stderr}");
    let tried = attempts(&stdout);
    // The token file, eleven process attacks, two console pages and /metrics, one
    // unauthenticated login; over the Unix socket the pages again, two WebSocket upgrades and
    // two stdio handovers.
    assert_eq!(tried.len(), 1 + 11 + 3 + 1 + 7, "{stdout}");
    for t in &tried {
        eprintln!("{} on {}: {}", t.attack, t.target, t.detail);
        assert!(
            !t.succeeded,
            "{} on {} succeeded: {}",
            t.attack, t.target, t.detail
        );
    }
    // The console pages, /metrics and the upgrades were refused by the broker itself, not by an
    // unreachable network or socket.
    for t in tried
        .iter()
        .filter(|t| t.attack == "GET" || t.attack == "GET over the Unix socket")
    {
        assert!(
            t.detail.starts_with("HTTP 401"),
            "{}: {}",
            t.target,
            t.detail
        );
    }
    assert!(glovebox_e2e::alive(pid), "the approve client is gone");
    assert_ne!(state_of(pid), Some('T'), "the approve client was stopped");
    let _ = person.kill();
    let _ = person.wait();
}
