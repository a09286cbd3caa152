//! The process boundary: tickets at the executor, failures of children, the supervisor's lock,
//! and the audit rows all of this leaves behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures_util::StreamExt;
use glovebox_e2e::{Glovebox, expect_error, expect_ok};
use glovebox_proto::v1::{ExecuteRequest, Ticket, ToolCall, executor_client::ExecutorClient};
use serde_json::json;

async fn executor_client(g: &Glovebox) -> ExecutorClient<glovebox_proto::transport::Link> {
    let channel = g.executor_channel(&g.account);
    ExecutorClient::new(channel)
}

fn write_call(g: &Glovebox, path: &str) -> ToolCall {
    ToolCall {
        account: g.account.clone(),
        call_id: "direct".into(),
        tool: "file_write".into(),
        params_json: json!({"path": path, "content": "pwned"}).to_string(),
        client_call_id: String::new(),
    }
}

#[tokio::test]
async fn the_executor_refuses_calls_without_a_valid_ticket() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("target.txt"), "safe").unwrap();
    let mut exec = executor_client(&g).await;
    // no ticket
    let r = exec
        .execute(ExecuteRequest {
            call: Some(write_call(&g, "target.txt")),
            ticket: None,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.error.as_ref().unwrap().code, "denied", "{r:?}");
    // a forged ticket
    let forged = Ticket {
        body: vec![1, 2, 3],
        mac: vec![0; 32],
    };
    let r = exec
        .execute(ExecuteRequest {
            call: Some(write_call(&g, "target.txt")),
            ticket: Some(forged),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let e = r.error.unwrap();
    assert_eq!(e.code, "denied");
    assert!(e.message.contains("ticket refused"), "{}", e.message);
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("target.txt")).unwrap(),
        "safe"
    );
}

#[tokio::test]
async fn a_ticket_for_one_call_cannot_be_replayed_for_another_path_or_twice() {
    // The executor binds a ticket to the call's subjects: a ticket for a.txt (allowed read) does
    // not authorize reading b.txt under the same call id. And a ticket authorizes one execution.
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    std::fs::write(g.workdir.join("b.txt"), "b").unwrap();
    let mut exec = executor_client(&g).await;
    let call = |id: &str, path: &str| ToolCall {
        account: g.account.clone(),
        call_id: id.into(),
        tool: "file_read".into(),
        params_json: json!({ "path": path }).to_string(),
        client_call_id: String::new(),
    };
    let mut ticket_for = async |id: &str| {
        let plan = exec
            .plan(glovebox_proto::v1::PlanRequest {
                call: Some(call(id, "a.txt")),
            })
            .await
            .unwrap()
            .into_inner()
            .plan
            .unwrap();
        g.decide_as_broker(glovebox_proto::v1::DecideRequest {
            call: Some(call(id, "a.txt")),
            plan: Some(plan),
        })
        .await
        .unwrap()
        .ticket
        .expect("read inside the workdir is allowed")
    };
    let first = ticket_for("replay-1").await;
    let second = ticket_for("replay-2").await;
    let mut exec = executor_client(&g).await;
    let mut execute = async |call: ToolCall, ticket: &Ticket| {
        exec.execute(ExecuteRequest {
            call: Some(call),
            ticket: Some(ticket.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
    };
    let r = execute(call("replay-1", "b.txt"), &first).await;
    assert_eq!(r.error.unwrap().code, "changed");
    let r = execute(call("replay-2", "a.txt"), &second).await;
    assert!(r.error.is_none(), "{r:?}");
    assert!(r.result_json.contains("\"content\":\"a\""));
    // Replaying either ticket, even for the very call it names, is refused.
    for (id, ticket) in [("replay-2", &second), ("replay-1", &first)] {
        let r = execute(call(id, "a.txt"), ticket).await;
        let e = r.error.expect("a spent ticket is refused");
        assert_eq!(e.code, "denied", "{e:?}");
        assert!(e.message.contains("already used"), "{}", e.message);
    }
}

#[tokio::test]
async fn killing_the_executor_mid_call_fails_that_call_and_it_is_restarted() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "k", "tool": "file_write", "params": {"path": "k.txt", "content": "x"}})).await;
    let ask = approver.next_ask().await;
    let scratch_before = scratch_dirs_of(g.service_pids("executor")[0]);
    assert_eq!(scratch_before.len(), 1, "{scratch_before:?}");
    let old = g.kill_service("executor");
    approver.answer(&ask, "once").await;
    let e = expect_error(&agent.result_for("k").await, "unavailable");
    assert!(e["message"].as_str().unwrap().contains("executor"), "{e}");
    assert!(!g.workdir.join("k.txt").exists());
    let new = g.await_restart("executor", old).await;
    assert_ne!(new, old);
    // The killed executor could not remove its jobs' scratch directory; the new one did.
    assert!(!scratch_before[0].exists(), "{scratch_before:?}");
    assert_eq!(scratch_dirs_of(new).len(), 1);
    std::fs::write(g.workdir.join("r.txt"), "after restart").unwrap();
    let r = expect_ok(
        &agent
            .invoke("after", "file_read", json!({"path": "r.txt"}))
            .await,
    );
    assert_eq!(r["content"], "after restart");
    let pool = g.audit_pool().await;
    let restarts: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM events WHERE kind = 'service' AND outcome = 'restarted' AND detail LIKE 'executor%'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(restarts, 1);
}

#[tokio::test]
async fn gate_unreachable_means_unavailable_and_nothing_runs() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let mut agent = g.connect("agent").await;
    let old = g.kill_service("gate");
    let e = expect_error(
        &agent
            .invoke("g", "file_read", json!({"path": "a.txt"}))
            .await,
        "unavailable",
    );
    assert!(e["message"].as_str().unwrap().contains("gate"), "{e}");
    g.await_restart("gate", old).await;
    expect_ok(
        &agent
            .invoke("g2", "file_read", json!({"path": "a.txt"}))
            .await,
    );
}

#[tokio::test]
async fn running_up_twice_on_one_state_dir_fails_clearly() {
    let g = Glovebox::start();
    let (code, _, err) = g.run_cli(&["up", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("already running"), "{err}");
    // the first instance is unharmed
    let mut agent = g.connect("agent").await;
    expect_ok(&agent.invoke("l", "file_list", json!({})).await);
}

#[tokio::test]
async fn stopping_up_stops_every_child() {
    let mut g = Glovebox::start();
    let children: Vec<i32> = ["gate", "executor", "broker"]
        .iter()
        .flat_map(|s| g.service_pids(s))
        .collect();
    assert_eq!(children.len(), 3, "{children:?}");
    let status = g.stop().unwrap();
    assert!(status.success(), "{status:?}");
    for pid in children {
        assert!(!glovebox_e2e::alive(pid), "child {pid} outlived up");
    }
}

#[tokio::test]
async fn status_tools_and_stop_report_on_and_end_a_running_glovebox() {
    let g = Glovebox::start();
    let (code, out, err) = g.run_cli(&["status"]);
    assert_eq!(code, 0, "{out}{err}");
    let up = g.up_pid().unwrap();
    assert!(
        out.contains(&format!("glovebox is running (pid {up}")),
        "{out}"
    );
    for service in ["gate", "broker", &format!("executor[{}]", g.account)] {
        let pid = g.service_pids(service.split('[').next().unwrap())[0];
        assert!(
            out.lines()
                .any(|l| l.contains(service) && l.ends_with(&format!("pid {pid}"))),
            "{service}: {out}"
        );
    }
    let mcp = g.url.replace("ws://", "http://").replace("/v1/ws", "/mcp");
    assert!(out.contains(&g.url) && out.contains(&mcp), "{out}");
    assert!(
        out.contains("health:    ok") && out.contains("landlock"),
        "{out}"
    );

    let (code, out, err) = g.run_cli(&["status", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (&status["running"], &status["pid"], &status["healthy"]),
        (&json!(true), &json!(up), &json!(true)),
        "{status}"
    );
    assert_eq!(status["url"], g.url.as_str(), "{status}");
    assert_eq!(status["accounts"][0]["id"], g.account.as_str(), "{status}");
    assert_eq!(status["problems"], json!([]), "{status}");

    let (code, out, err) = g.run_cli(&["tools"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.lines().any(|l| l.starts_with("file_read ")), "{out}");
    let (code, out, _) = g.run_cli(&["tools", "--json"]);
    assert_eq!(code, 0);
    let tools: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(tools[0]["input_schema"]["type"], "object", "{out}");

    let (code, out, err) = g.run_cli(&["stop"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("glovebox stopped"), "{out}");
    assert!(!glovebox_e2e::alive(up));
    let (code, out, _) = g.run_cli(&["status"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not running"), "{out}");
    let (code, out, _) = g.run_cli(&["status", "--json"]);
    assert_eq!(code, 1, "{out}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["running"], false, "{status}");
}

/// Ctrl-C in a terminal signals the whole foreground process group: the services must not stop
/// on their own before `up` has audited the stop (and stopped the gate last).
#[tokio::test]
async fn ctrl_c_of_up_is_audited_every_time() {
    for _ in 0..3 {
        let mut g = Glovebox::start();
        let up = g.up_pid().unwrap();
        // What the terminal does: SIGINT to every process of up's group.
        let group = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(up))).unwrap();
        let mut members = vec![up];
        for service in ["gate", "executor", "broker"] {
            members.extend(g.service_pids(service));
        }
        for pid in members {
            if nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid))).ok() == Some(group) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGINT,
                );
            }
        }
        let status = g.stop().unwrap();
        assert!(status.success(), "{status:?}");
        let pool = g.audit_pool().await;
        let stopped: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM events WHERE kind = 'service' AND source = 'supervisor' AND outcome = 'stopped'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(stopped, 1, "{}", g.stderr());
    }
}

/// (call_id, verdict, approval, outcome, error_code, bytes) of a `tool_calls` row.
type CallRow = (
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i64>,
);

#[tokio::test]
async fn every_call_leaves_audit_rows_that_cannot_be_changed() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "secret content 12345").unwrap();
    std::fs::write(g.workdir.join(".env"), "TOKEN=x").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    expect_ok(
        &agent
            .invoke("read-ok", "file_read", json!({"path": "a.txt"}))
            .await,
    );
    expect_error(
        &agent
            .invoke("read-floor", "file_read", json!({"path": ".env"}))
            .await,
        "denied",
    );
    agent.send(json!({"type": "invoke", "call_id": "write-ok", "tool": "file_write", "params": {"path": "w.txt", "content": "written words"}})).await;
    let ask = approver.next_ask().await;
    approver.answer(&ask, "once").await;
    expect_ok(&agent.result_for("write-ok").await);
    agent.send(json!({"type": "invoke", "call_id": "write-no", "tool": "file_write", "params": {"path": "w.txt", "content": "nope"}})).await;
    let ask = approver.next_ask().await;
    approver.answer(&ask, "deny").await;
    expect_error(&agent.result_for("write-no").await, "denied");
    drop(approver);
    expect_error(
        &agent
            .invoke(
                "no-approver",
                "file_write",
                json!({"path": "z.txt", "content": "z"}),
            )
            .await,
        "denied",
    );
    expect_error(
        &agent
            .invoke("bad-params", "file_read", json!({"nope": 1}))
            .await,
        "invalid_params",
    );

    let pool = g.audit_pool().await;
    let rows: Vec<CallRow> = sqlx::query_as(
        "SELECT client_call_id, verdict, approval, outcome, error_code, bytes FROM tool_calls ORDER BY started_at, client_call_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let find = |id: &str| {
        rows.iter()
            .find(|r| r.0 == id)
            .unwrap_or_else(|| panic!("no tool_calls row for {id}: {rows:?}"))
            .clone()
    };
    let s = |v: &str| Some(v.to_owned());
    assert_eq!(
        find("read-ok"),
        (
            "read-ok".into(),
            s("allow"),
            s("auto"),
            s("ok"),
            None,
            Some(20)
        )
    );
    assert_eq!(
        find("read-floor"),
        (
            "read-floor".into(),
            s("deny"),
            None,
            s("denied"),
            s("denied"),
            None
        )
    );
    assert_eq!(
        find("write-ok"),
        (
            "write-ok".into(),
            s("ask"),
            s("approved"),
            s("ok"),
            None,
            Some(13)
        )
    );
    assert_eq!(
        find("write-no"),
        (
            "write-no".into(),
            s("ask"),
            s("denied"),
            s("denied"),
            s("denied"),
            None
        )
    );
    assert_eq!(
        find("no-approver"),
        (
            "no-approver".into(),
            s("ask"),
            s("no_approver"),
            s("denied"),
            s("denied"),
            None
        )
    );
    assert_eq!(
        find("bad-params"),
        (
            "bad-params".into(),
            None,
            None,
            s("error"),
            s("invalid_params"),
            None
        )
    );

    // the floor denial names its rule; the subject is the canonical path
    let (subject, rule): (String, String) =
        sqlx::query_as("SELECT subject, rule FROM tool_calls WHERE client_call_id = 'read-floor'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        subject,
        format!("read {}", g.workdir.join(".env").display())
    );
    assert_eq!(rule, "floor:.env*");

    // never file contents
    let dump: Vec<String> = sqlx::query_scalar(
        "SELECT COALESCE(subject,'')||COALESCE(reason,'')||COALESCE(detail,'')||COALESCE(rule,'') FROM events",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    for needle in ["secret content 12345", "written words", "TOKEN=x"] {
        assert!(
            !dump.iter().any(|d| d.contains(needle)),
            "audit contains file content {needle:?}"
        );
    }
    drop(pool);

    // append-only: a writer connection cannot change or remove rows
    let rw = sqlx::SqlitePool::connect(&format!("sqlite://{}", g.audit_db().display()))
        .await
        .unwrap();
    for sql in [
        "UPDATE events SET outcome = 'ok' WHERE client_call_id = 'write-no'",
        "DELETE FROM events WHERE client_call_id = 'read-floor'",
    ] {
        let err = sqlx::query(sql).execute(&rw).await.unwrap_err().to_string();
        assert!(err.contains("append-only"), "{sql}: {err}");
    }
    drop(rw);
    let (code, out, _) = g.run_cli(&["audit", "verify"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("audit chain verified"), "{out}");
}

/// An audit that cannot write (a full disk, here a trigger that refuses every insert) acknowledges
/// nothing: a call that ran is reported failed, saying its result could not be written, never as
/// a success without its rows; once rows are written again, so are calls answered.
#[tokio::test]
async fn a_call_whose_rows_cannot_be_written_is_not_reported_done() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "four").unwrap();
    let mut agent = g.connect("agent").await;
    expect_ok(
        &agent
            .invoke("before", "file_read", json!({"path": "a.txt"}))
            .await,
    );
    let full = g.fail_audit_writes().await;
    let read = agent
        .invoke("lost", "file_read", json!({"path": "a.txt"}))
        .await;
    expect_error(&read, "unavailable");
    assert!(
        read["error"]["message"]
            .as_str()
            .unwrap()
            .contains("could not be written to the audit"),
        "{read}"
    );
    full.lift().await;
    expect_ok(
        &agent
            .invoke("after", "file_read", json!({"path": "a.txt"}))
            .await,
    );
    let pool = g.audit_pool().await;
    let seen: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT client_call_id FROM events WHERE kind = 'result' AND outcome = 'ok' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        seen,
        ["after", "before"],
        "no ok result row for the lost call"
    );
}

/// `/healthz` with the account's approver credential (without one it says only up or down).
/// A built-in call that ran leaves its execute and result rows from its executor, committed
/// together (one append, consecutive rows, the result after the execute); a call that never
/// reached the executor keeps the broker's result row.
#[tokio::test]
async fn a_calls_execute_and_result_rows_are_committed_together() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "four").unwrap();
    std::fs::write(g.workdir.join(".env"), "TOKEN=x").unwrap();
    let mut agent = g.connect("agent").await;
    expect_ok(
        &agent
            .invoke("ok", "file_read", json!({"path": "a.txt"}))
            .await,
    );
    expect_error(
        &agent
            .invoke("missing", "file_read", json!({"path": "nothere.txt"}))
            .await,
        "not_found",
    );
    expect_error(
        &agent
            .invoke("floor", "file_read", json!({"path": ".env"}))
            .await,
        "denied",
    );
    let pool = g.audit_pool().await;
    type Row = (i64, String, String, Option<String>, Option<String>, i64);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, kind, source, outcome, error_code, COALESCE(duration_ms, 0) FROM events \
         WHERE client_call_id = ? ORDER BY id",
    )
    .bind("ok")
    .fetch_all(&pool)
    .await
    .unwrap();
    let shape = |rows: &[Row]| -> Vec<(String, String)> {
        rows.iter().map(|r| (r.1.clone(), r.2.clone())).collect()
    };
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        shape(&rows),
        pairs(&[
            ("decide", "gate"),
            ("execute", "executor"),
            ("result", "executor")
        ])
    );
    assert_eq!(
        rows[2].0,
        rows[1].0 + 1,
        "the two rows are one append: {rows:?}"
    );
    assert_eq!(rows[2].3.as_deref(), Some("ok"));
    // the result's duration is the whole call's, at least the execute's own
    assert!(rows[2].5 >= rows[1].5, "{rows:?}");
    let missing: Vec<Row> = sqlx::query_as(
        "SELECT id, kind, source, outcome, error_code, COALESCE(duration_ms, 0) FROM events \
         WHERE client_call_id = 'missing' AND kind IN ('execute', 'result') ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        shape(&missing),
        pairs(&[("execute", "executor"), ("result", "executor")])
    );
    assert_eq!(missing[1].0, missing[0].0 + 1);
    assert_eq!(
        (missing[1].3.as_deref(), missing[1].4.as_deref()),
        (Some("error"), Some("not_found"))
    );
    let floor: Vec<Row> = sqlx::query_as(
        "SELECT id, kind, source, outcome, error_code, 0 FROM events \
         WHERE client_call_id = 'floor' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        shape(&floor),
        pairs(&[("decide", "gate"), ("result", "broker")])
    );
    // the views read the same calls as before
    type ViewRow = (String, Option<String>, Option<String>, Option<i64>);
    let view: Vec<ViewRow> = sqlx::query_as(
        "SELECT client_call_id, outcome, error_code, bytes FROM tool_calls ORDER BY client_call_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        view,
        [
            (
                "floor".into(),
                Some("denied".into()),
                Some("denied".into()),
                None
            ),
            (
                "missing".into(),
                Some("error".into()),
                Some("not_found".into()),
                Some(0)
            ),
            ("ok".into(), Some("ok".into()), None, Some(4)),
        ]
    );
    let (code, out, _) = g.run_cli(&["audit", "verify"]);
    assert_eq!(code, 0, "{out}");
}

async fn healthz(g: &Glovebox) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = g
        .url
        .trim_start_matches("ws://")
        .trim_end_matches("/v1/ws")
        .to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let approver = g.credential_of(&g.account, "approver");
    let request = format!(
        "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {approver}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let code: u16 = response[9..12].parse().unwrap();
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    // the body may be chunked: take the JSON object inside it
    let start = body.find('{').unwrap();
    let end = body.rfind('}').unwrap();
    (code, serde_json::from_str(&body[start..=end]).unwrap())
}

#[tokio::test]
async fn health_reports_the_sandbox_of_each_executor_and_an_executor_down() {
    let g = Glovebox::start();
    let (code, body) = healthz(&g).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["ok"], true);
    assert_eq!(body["audit"]["healthy"], true);
    let executor = &body["executors"][g.account.as_str()];
    assert_eq!(executor["reachable"], true, "{body}");
    let sandbox = executor["sandbox"].as_str().unwrap_or_default();
    assert!(
        sandbox.starts_with("landlock=fully_enforced walls="),
        "{body}"
    );
    // This kernel has the Landlock scopes, so jobs are contained by them (not by the marker).
    assert!(
        executor["jobs"]
            .as_str()
            .unwrap()
            .starts_with("landlock_scopes(abi_"),
        "{executor}"
    );
    let old = g.kill_service("executor");
    let (code, body) = healthz(&g).await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["executors"][g.account.as_str()]["reachable"], false);
    g.await_restart("executor", old).await;
    let (code, _) = healthz(&g).await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn a_crashed_broker_comes_back_on_the_same_address() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let mut agent = g.connect("agent").await;
    let old = g.kill_service("broker");
    // the open connection ends with its broker
    let gone = tokio::time::timeout(glovebox_e2e::WAIT, agent.socket.next())
        .await
        .unwrap();
    assert!(
        !matches!(
            gone,
            Some(Ok(tokio_tungstenite::tungstenite::Message::Text(_)))
        ),
        "{gone:?}"
    );
    g.await_restart("broker", old).await;
    // the URL `up` printed (port 0 was asked for) still works
    let mut again = g.connect("agent").await;
    expect_ok(
        &again
            .invoke("r", "file_read", json!({"path": "a.txt"}))
            .await,
    );
    let url = std::fs::read_to_string(g.state.join("run/broker.url")).unwrap();
    assert_eq!(url.trim(), g.url);
}

#[tokio::test]
async fn a_gate_crash_while_an_ask_is_pending_fails_the_call_closed() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "w", "tool": "file_write", "params": {"path": "w.txt", "content": "x"}})).await;
    let ask = approver.next_ask().await;
    let old = g.kill_service("gate");
    approver.answer(&ask, "once").await;
    let e = expect_error(&agent.result_for("w").await, "unavailable");
    assert!(e["message"].as_str().unwrap().contains("gate"), "{e}");
    assert!(!g.workdir.join("w.txt").exists());
    g.await_restart("gate", old).await;
}

#[tokio::test]
async fn children_stop_by_themselves_when_up_is_killed() {
    let mut g = Glovebox::start();
    let children: Vec<i32> = ["gate", "executor", "broker"]
        .iter()
        .flat_map(|s| g.service_pids(s))
        .collect();
    assert_eq!(children.len(), 3, "{children:?}");
    g.kill_up();
    glovebox_e2e::eventually("every child to notice its closed lifeline and stop", || {
        children.iter().all(|pid| !glovebox_e2e::alive(*pid))
    })
    .await;
}

#[tokio::test]
async fn an_executor_refuses_a_ticket_signed_for_another_account() {
    let g = Glovebox::start_with(glovebox_e2e::Options {
        accounts: vec![("alice".into(), true), ("bob".into(), true)],
        ..Default::default()
    });
    std::fs::write(g.root().join("work-alice/a.txt"), "alice's").unwrap();
    let alice_file = g.root().join("work-alice/a.txt");
    let mut alice_exec = ExecutorClient::new(g.executor_channel("alice"));
    let mut bob_exec = ExecutorClient::new(g.executor_channel("bob"));
    let call = |account: &str| ToolCall {
        account: account.into(),
        call_id: "cross".into(),
        tool: "file_read".into(),
        params_json: json!({ "path": alice_file.to_str().unwrap() }).to_string(),
        client_call_id: String::new(),
    };
    // alice's read of her own file is allowed: the gate signs a ticket under alice's key
    let plan = alice_exec
        .plan(glovebox_proto::v1::PlanRequest {
            call: Some(call("alice")),
        })
        .await
        .unwrap()
        .into_inner()
        .plan
        .unwrap();
    let ticket = g
        .decide_as_broker(glovebox_proto::v1::DecideRequest {
            call: Some(call("alice")),
            plan: Some(plan),
        })
        .await
        .unwrap()
        .ticket
        .expect("alice may read her workdir");
    // bob's executor refuses it, whether the call names alice or bob
    for account in ["alice", "bob"] {
        let r = bob_exec
            .execute(ExecuteRequest {
                call: Some(call(account)),
                ticket: Some(ticket.clone()),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let e = r.error.expect("refused");
        assert_eq!(e.code, "denied", "{account}: {e:?}");
        assert!(r.result_json.is_empty());
    }
    // and the same ticket works where it belongs
    let r = alice_exec
        .execute(ExecuteRequest {
            call: Some(call("alice")),
            ticket: Some(ticket),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.error.is_none(), "{r:?}");
}

/// Runs a few real calls, stops glovebox, applies `sql` to the audit file as someone with write
/// access to it would (triggers dropped first), and returns what `glovebox audit verify` says.
async fn verify_after_tampering(sql: &[&str]) -> (i32, String) {
    let (g, rw) = stopped_with_writable_audit().await;
    for s in sql {
        sqlx::query(sqlx::AssertSqlSafe(*s))
            .execute(&rw)
            .await
            .unwrap();
    }
    rw.close().await;
    let (code, out, err) = g.run_cli(&["audit", "verify"]);
    (code, format!("{out}{err}"))
}

/// A glovebox that made a few real calls and stopped, and its audit file opened for writing by
/// someone without the key (the triggers that refuse changes dropped).
async fn stopped_with_writable_audit() -> (Glovebox, sqlx::SqlitePool) {
    let mut g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let mut agent = g.connect("agent").await;
    for i in 0..3 {
        expect_ok(
            &agent
                .invoke(&format!("r{i}"), "file_read", json!({"path": "a.txt"}))
                .await,
        );
    }
    drop(agent);
    g.stop();
    let rw = sqlx::SqlitePool::connect(&format!("sqlite://{}", g.audit_db().display()))
        .await
        .unwrap();
    for s in [
        "DROP TRIGGER events_refuse_update",
        "DROP TRIGGER events_refuse_delete",
    ] {
        sqlx::query(s).execute(&rw).await.unwrap();
    }
    (g, rw)
}

/// Without the key, the chain cannot be downgraded: every row rewritten with the unkeyed hash
/// anyone can compute, a row removed and the rest renumbered, the head deleted — verify refuses
/// it. A head deleted alone is not "verified" either: the rows are whole, but a cut tail or a
/// wipe cannot be ruled out (exit 3).
#[tokio::test]
async fn a_chain_downgraded_or_without_its_head_does_not_verify() {
    use glovebox_gate::audit::chain::{GENESIS, legacy_hash};
    use glovebox_gate::audit::row::{RawRow, column_list};
    // The head deleted, nothing else.
    let (g, rw) = stopped_with_writable_audit().await;
    rw.close().await;
    std::fs::remove_file(g.state.join("audit.head")).unwrap();
    let _ = std::fs::remove_file(g.state.join(".audit.head.next"));
    let (code, out, err) = g.run_cli(&["audit", "verify"]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("UNPROVEN") && out.contains("no head"), "{out}");
    // The downgrade.
    let (g, rw) = stopped_with_writable_audit().await;
    sqlx::query("DELETE FROM events WHERE id = 3")
        .execute(&rw)
        .await
        .unwrap();
    sqlx::query("UPDATE events SET id = id - 1 WHERE id > 3")
        .execute(&rw)
        .await
        .unwrap();
    let sql = format!("SELECT id, {} FROM events ORDER BY id", column_list());
    let rows: Vec<RawRow> = sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_all(&rw)
        .await
        .unwrap()
        .iter()
        .map(|r| RawRow::from_row(r).unwrap())
        .collect();
    let mut prev = GENESIS.to_owned();
    for row in &rows {
        let fields = row.stored().fields;
        let hash = legacy_hash(&prev, &fields);
        sqlx::query("UPDATE events SET prev_hash = ?1, hash = ?2, keyed = 0 WHERE id = ?3")
            .bind(&prev)
            .bind(&hash)
            .bind(row.id)
            .execute(&rw)
            .await
            .unwrap();
        prev = hash;
    }
    rw.close().await;
    std::fs::remove_file(g.state.join("audit.head")).unwrap();
    let _ = std::fs::remove_file(g.state.join(".audit.head.next"));
    let (code, out, err) = g.run_cli(&["audit", "verify"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("BROKEN") && out.contains("under the audit key"),
        "{out}"
    );
}

/// With only the public key (`audit.pub`), no audit key: the signed checkpoints prove every row
/// before the newest one, and an edit of such a row by someone who can write the file is named.
#[tokio::test]
async fn the_public_key_alone_proves_the_rows_under_signed_checkpoints() {
    let (g, rw) = stopped_with_writable_audit().await;
    let public = g.state.join("audit.pub");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&public).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o644, "the public key is for anyone to read");
    let (code, out, err) = g.run_cli(&["audit", "verify"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("signed checkpoints (public key"), "{out}");
    let args = ["audit", "verify", "--public-key", public.to_str().unwrap()];
    let (code, out, err) = g.run_cli(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("signed checkpoints verified for"), "{out}");
    // The stop checkpoint is the last row: every row before it is proven.
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
        .fetch_one(&rw)
        .await
        .unwrap();
    assert!(
        out.contains(&format!("{rows} rows, the first {} proven", rows - 1)),
        "{out}"
    );
    // A covered row edited (its MAC cannot be recomputed without the key; nor can the digest's
    // signature be redone).
    sqlx::query("UPDATE events SET subject = 'read /w/other' WHERE client_call_id = 'r1'")
        .execute(&rw)
        .await
        .unwrap();
    rw.close().await;
    let (code, out, _) = g.run_cli(&args);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("BROKEN") && out.contains("does not match the rows before it"),
        "{out}"
    );
    // A key that is not this machine's refuses its checkpoints.
    let other = "11".repeat(32);
    let (code, out, _) = g.run_cli(&["audit", "verify", "--public-key", &other]);
    assert_ne!(code, 0, "{out}");
}

#[tokio::test]
async fn audit_verify_catches_every_tampering_an_attacker_without_the_key_can_do() {
    let untouched = verify_after_tampering(&[]).await;
    assert_eq!(untouched.0, 0, "{}", untouched.1);
    for (name, sql, says) in [
        (
            "deleting the last rows",
            &["DELETE FROM events WHERE id > (SELECT MAX(id) - 3 FROM events)"][..],
            "the tail is missing",
        ),
        ("deleting every row", &["DELETE FROM events"][..], "wiped"),
        (
            "editing a row",
            &["UPDATE events SET verdict = 'deny' WHERE kind = 'decide' AND client_call_id = 'r1'"]
                [..],
            "its content was changed",
        ),
        (
            "inserting a forged approval",
            &[
                "INSERT INTO events (ts, source, kind, approval, subject, prev_hash, hash, keyed) \
               VALUES ('2026-12-01T00:00:00.000Z', 'gate', 'resolve', 'approved', 'write /etc/passwd', \
               (SELECT hash FROM events ORDER BY id DESC LIMIT 1), 'forged', 1)",
            ][..],
            "its content was changed",
        ),
    ] {
        let (code, out) = verify_after_tampering(sql).await;
        assert_eq!(code, 1, "{name}: {out}");
        assert!(
            out.contains("BROKEN") && out.contains(says),
            "{name}: {out}"
        );
    }
}

/// One agent that keeps calling `file_read`, each call labelled `w<worker>-<n>`, reconnecting
/// whenever its connection breaks; returns the labels of the calls it saw succeed.
async fn reading_agent(
    url: String,
    token: String,
    worker: usize,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<String> {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let mut succeeded = Vec::new();
    let mut n = 0;
    while !*stop.borrow() {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut request = url.as_str().into_client_request().unwrap();
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        // The broker may be restarting: a refused connection is tried again.
        let Ok((mut socket, _)) = tokio_tungstenite::connect_async(request).await else {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let hello = json!({"type": "hello", "role": "agent"}).to_string();
        if socket.send(Message::Text(hello.into())).await.is_err() {
            continue;
        }
        while !*stop.borrow() {
            n += 1;
            let label = format!("w{worker}-{n}");
            let invoke = json!({"type": "invoke", "call_id": label, "tool": "file_read", "params": {"path": "a.txt"}});
            if socket
                .send(Message::Text(invoke.to_string().into()))
                .await
                .is_err()
            {
                break;
            }
            // Read until this call's result, or until the connection breaks.
            let ok = loop {
                match tokio::time::timeout(std::time::Duration::from_secs(30), socket.next()).await
                {
                    Ok(Some(Ok(Message::Text(t)))) => {
                        let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                        if v["type"] == "result" && v["call_id"] == label.as_str() {
                            break Some(v["ok"] == true);
                        }
                    }
                    Ok(Some(Ok(_))) => continue,
                    _ => break None,
                }
            };
            match ok {
                Some(true) => succeeded.push(label),
                Some(false) => {}
                None => break,
            }
        }
    }
    succeeded
}

#[tokio::test]
async fn no_call_the_client_saw_succeed_lacks_its_rows_when_services_are_killed() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let agents: Vec<_> = (0..4)
        .map(|w| {
            tokio::spawn(reading_agent(
                g.url.clone(),
                g.token.clone(),
                w,
                stop.clone(),
            ))
        })
        .collect();
    let pause = || tokio::time::sleep(std::time::Duration::from_millis(400));
    pause().await;
    for service in ["gate", "broker", "executor"] {
        let old = g.kill_service(service);
        g.await_restart(service, old).await;
        pause().await;
    }
    let _ = stop_tx.send(true);
    let mut succeeded = Vec::new();
    for a in agents {
        succeeded.extend(a.await.unwrap());
    }
    assert!(
        succeeded.len() > 20,
        "only {} calls succeeded",
        succeeded.len()
    );
    let pool = g.audit_pool().await;
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT client_call_id, kind FROM events WHERE client_call_id LIKE 'w%'")
            .fetch_all(&pool)
            .await
            .unwrap();
    let mut kinds: std::collections::HashMap<String, Vec<String>> = Default::default();
    for (label, kind) in rows {
        kinds.entry(label).or_default().push(kind);
    }
    let lacking: Vec<String> = succeeded
        .iter()
        .filter(|label| {
            let k = kinds.get(*label).cloned().unwrap_or_default();
            !["decide", "execute", "result"]
                .iter()
                .all(|want| k.iter().any(|have| have == want))
        })
        .cloned()
        .collect();
    assert!(
        lacking.is_empty(),
        "{} of {} succeeded calls lack rows: {:?}",
        lacking.len(),
        succeeded.len(),
        &lacking[..lacking.len().min(10)]
    );
    // How often the gate died between answering a call and committing its decide row (the
    // row then came back from the call's ticket, with its execute and result rows).
    let restored: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM events WHERE kind = 'decide' AND detail LIKE 'restored from%'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    eprintln!(
        "figures: {} calls succeeded, {restored} decide rows restored from tickets",
        succeeded.len()
    );
    let (code, out, _) = g.run_cli(&["audit", "verify"]);
    assert_eq!(code, 0, "{out}");
}

/// Ctrl-C of a `glovebox call` waiting on an ask: the call is withdrawn, and still audited.
#[tokio::test]
async fn ctrl_c_of_a_waiting_call_leaves_its_audit_row() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut call = std::process::Command::new(glovebox_e2e::glovebox_bin())
        .args(["call", "--state-dir", g.state.to_str().unwrap()])
        .args(["file_write", r#"{"path": "x.txt", "content": "x"}"#])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ask = approver.next_ask().await;
    let call_id = ask["call_id"].as_str().unwrap().to_owned();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(call.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    call.wait().unwrap();
    let pool = g.audit_pool().await;
    let deadline = std::time::Instant::now() + glovebox_e2e::WAIT;
    loop {
        let outcome: Option<Option<String>> = sqlx::query_scalar(
            "SELECT outcome FROM tool_calls WHERE client_call_id = ?1 AND outcome IS NOT NULL",
        )
        .bind(&call_id)
        .fetch_optional(&pool)
        .await
        .unwrap();
        if let Some(outcome) = outcome {
            assert_ne!(outcome.as_deref(), Some("ok"), "{}", g.stderr());
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no audit row for the interrupted call {call_id}: {}",
            g.stderr()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!g.workdir.join("x.txt").exists());
}

/// The scratch directories (`/tmp/glovebox-jobs-<account>-<pid>-<random>`, or a pack host's
/// `glovebox-packs-…`) of service `pid`.
fn scratch_dirs_of(pid: i32) -> Vec<std::path::PathBuf> {
    let infix = format!("-{pid}-");
    std::fs::read_dir("/tmp")
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                (n.starts_with("glovebox-jobs-") || n.starts_with("glovebox-packs-"))
                    && n.contains(&infix)
            })
        })
        .collect()
}

/// Nothing of an executor or a pack host stays in /tmp once `up` stops: not what one stopped in
/// order leaves (its own directory, which lies outside an executor's Landlock domain), nor what
/// one killed with SIGKILL could not remove.
#[tokio::test]
async fn no_scratch_directory_outlives_a_stop_even_of_a_killed_service() {
    let mut g = Glovebox::start();
    let killed = g.service_pids("executor")[0];
    let packs = g.service_pids("pack-host")[0];
    assert_eq!(scratch_dirs_of(killed).len(), 1);
    assert_eq!(scratch_dirs_of(packs).len(), 1);
    let old = g.kill_service("executor");
    assert_eq!(old, killed);
    let restarted = g.await_restart("executor", old).await;
    // The restarted executor sweeps its killed predecessor's directory as it starts.
    glovebox_e2e::eventually("the killed executor's directory swept", || {
        scratch_dirs_of(killed).is_empty()
    })
    .await;
    let killed_packs = g.kill_service("pack-host");
    let restarted_packs = g.await_restart("pack-host", killed_packs).await;
    glovebox_e2e::eventually("the killed pack host's directory swept", || {
        scratch_dirs_of(killed_packs).is_empty()
    })
    .await;
    // A service killed again leaves its directory to `up`, which sweeps it when it stops.
    let last = g.kill_service("executor");
    g.stop();
    for pid in [restarted, restarted_packs, last] {
        assert_eq!(
            scratch_dirs_of(pid),
            Vec::<std::path::PathBuf>::new(),
            "{pid}"
        );
    }
}

/// The audit database deleted, or replaced by an older copy, under a running gate: the next call
/// is not acknowledged, health turns bad, and once glovebox stops, `verify` of the replaced
/// database says it was replaced (the gate kept the head it had).
#[tokio::test]
async fn an_audit_database_deleted_or_replaced_while_running_is_noticed_at_once() {
    for replace in [false, true] {
        let mut g = Glovebox::start();
        std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
        let mut agent = g.connect("agent").await;
        expect_ok(
            &agent
                .invoke("r0", "file_read", json!({"path": "a.txt"}))
                .await,
        );
        let db = g.audit_db();
        let copy = g.root().join("older.db");
        if replace {
            // An older copy, taken now, put back after more calls: a cut tail.
            let pool = g.audit_pool().await;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "VACUUM INTO '{}'",
                copy.display()
            )))
            .execute(&pool)
            .await
            .unwrap();
            pool.close().await;
            expect_ok(
                &agent
                    .invoke("r1", "file_read", json!({"path": "a.txt"}))
                    .await,
            );
            std::fs::rename(&copy, &db).unwrap();
        } else {
            std::fs::remove_file(&db).unwrap();
        }
        for suffix in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
        let r = agent
            .invoke("r2", "file_read", json!({"path": "a.txt"}))
            .await;
        assert_eq!(r["ok"], false, "{replace}: {r}");
        let (code, body) = healthz(&g).await;
        assert_eq!(code, 503, "{body}");
        assert_eq!(
            (&body["ok"], &body["audit"]["healthy"]),
            (&json!(false), &json!(false)),
            "{replace}: {body}"
        );
        drop(agent);
        g.stop();
        if replace {
            let (code, out, err) = g.run_cli(&["audit", "verify"]);
            assert_eq!(code, 1, "{out}{err}");
            // The chain against its head (when the head had moved past the copy), or the head
            // the gate kept when it noticed (when the copy was taken at the head): either way
            // a failure that says so.
            assert!(
                out.contains("BROKEN") || out.contains("REPLACED OR TRUNCATED"),
                "{out}"
            );
            // The gate kept the head it had when it noticed, for verify and people to see.
            let kept = std::fs::read_dir(&g.state).unwrap().flatten().any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("audit.head.mismatch-")
            });
            assert!(kept, "no kept head in {}", g.state.display());
        }
    }
}

/// `glovebox ARGS` with the environment `Glovebox` gives `up` (its own HOME), in `root`.
fn glovebox_in(root: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(glovebox_e2e::glovebox_bin())
        .args(args)
        .env("HOME", root.join("home"))
        .env("GLOVEBOX_LOG", "info")
        .env_remove("XDG_DATA_HOME")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// `glovebox status --json` of the state dir `state`.
fn status_json(root: &std::path::Path, state: &str) -> serde_json::Value {
    let out = glovebox_in(root, &["status", "--state-dir", state, "--json"]);
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn up_detach_returns_once_up_logs_follows_it_and_restart_starts_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (state, work) = (root.join("state"), root.join("work"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(root.join("home")).unwrap();
    let s = state.to_str().unwrap();
    /// Whatever runs on the state is stopped however the test ends.
    struct StopAtEnd(std::path::PathBuf);
    impl Drop for StopAtEnd {
        fn drop(&mut self) {
            let _ = glovebox_e2e::run_glovebox(&["stop", "--state-dir", self.0.to_str().unwrap()]);
        }
    }
    let _stop = StopAtEnd(state.clone());
    let up = glovebox_in(
        &root,
        &[
            "up",
            "--detach",
            "--state-dir",
            s,
            "--workdir",
            work.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
    );
    let said = String::from_utf8_lossy(&up.stdout).into_owned();
    assert!(
        up.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&up.stderr)
    );
    assert!(
        said.contains("glovebox is up") && said.contains("running in the background (pid "),
        "{said}"
    );
    // It runs on without this command, in a session of its own, and says so in status.
    let status = status_json(&root, s);
    assert_eq!(status["running"], true, "{status}");
    let pid = status["pid"].as_i64().unwrap() as i32;
    let sid = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid))).unwrap();
    assert_eq!(
        sid.as_raw(),
        pid,
        "up --detach is not the leader of its own session"
    );
    let log = state.join("glovebox.log");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&log).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    // logs: the banner; -n 1: one line.
    let logs = glovebox_in(&root, &["logs", "--state-dir", s]);
    assert!(logs.status.success());
    assert!(String::from_utf8_lossy(&logs.stdout).contains("glovebox is up"));
    let one = glovebox_in(&root, &["logs", "--state-dir", s, "-n", "1"]);
    assert_eq!(String::from_utf8_lossy(&one.stdout).lines().count(), 1);
    // logs -f prints what comes next: here, the stop and the start of restart.
    let follow = std::process::Command::new(glovebox_e2e::glovebox_bin())
        .args(["logs", "-f", "-n", "0", "--state-dir", s])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // It has taken the log's end before anything more is written.
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let restart = glovebox_in(&root, &["restart", "--state-dir", s]);
    let said = String::from_utf8_lossy(&restart.stdout).into_owned();
    assert!(
        restart.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&restart.stderr)
    );
    assert!(
        said.contains("glovebox stopped") && said.contains("glovebox is up"),
        "{said}"
    );
    // Started again as it ran: on the port it was given (0: a free one), not the config's.
    assert!(!said.contains(":7420/"), "{said}");
    let status = status_json(&root, s);
    assert_eq!(status["healthy"], true, "{status}");
    assert_ne!(status["pid"].as_i64().unwrap() as i32, pid, "{status}");
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(follow.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let followed = follow.wait_with_output().unwrap();
    assert!(followed.status.success());
    let followed = String::from_utf8_lossy(&followed.stdout);
    assert!(
        followed.contains("glovebox: stopping") && followed.contains("glovebox is up"),
        "{followed}"
    );
    // A second detached up on the same state is refused at once.
    let again = glovebox_in(&root, &["up", "--detach", "--state-dir", s]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already runs"));
    let stop = glovebox_in(&root, &["stop", "--state-dir", s]);
    assert!(stop.status.success());
    // Started again in a terminal (the foreground), its log is that terminal: `logs` says so
    // rather than showing the detached run's old file.
    let mut foreground = std::process::Command::new(glovebox_e2e::glovebox_bin())
        .args(["up", "--state-dir", s, "--listen", "127.0.0.1:0"])
        .env("HOME", root.join("home"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead;
        let out = foreground.stdout.take().unwrap();
        let mut lines = std::io::BufReader::new(out).lines();
        while let Some(Ok(line)) = lines.next() {
            if line.contains("glovebox is up") {
                break;
            }
        }
        std::mem::forget(lines);
    }
    let logs = glovebox_in(&root, &["logs", "--state-dir", s]);
    let _ = glovebox_in(&root, &["stop", "--state-dir", s]);
    let _ = foreground.wait();
    assert_eq!(logs.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&logs.stderr).contains("prints its log to the terminal"),
        "{}",
        String::from_utf8_lossy(&logs.stderr)
    );
}

#[tokio::test]
async fn up_detach_that_cannot_start_says_why_and_fails_as_a_foreground_up_does() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(root.join("home")).unwrap();
    let state = root.join("state");
    let up = glovebox_in(
        &root,
        &[
            "up",
            "--detach",
            "--state-dir",
            state.to_str().unwrap(),
            "--workdir",
            root.join("missing").to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&up.stderr);
    assert!(
        err.contains("did not start") && err.contains("missing"),
        "{err}"
    );
    // The same error as a foreground `up`'s, with the same exit code (an error: 2).
    let foreground = glovebox_in(
        &root,
        &[
            "up",
            "--state-dir",
            state.to_str().unwrap(),
            "--workdir",
            root.join("missing").to_str().unwrap(),
        ],
    );
    assert_eq!(foreground.status.code(), Some(2), "{foreground:?}");
    assert_eq!(up.status.code(), foreground.status.code(), "{err}");
}

/// The next `audit_health` frame saying `healthy` on an approver's connection (within 10 s).
async fn audit_health_frame(
    approver: &mut glovebox_e2e::Client,
    healthy: bool,
) -> serde_json::Value {
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            let frame = approver.next().await;
            if frame["type"] == "audit_health" && frame["healthy"] == healthy {
                break frame;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no audit_health {healthy}"))
}

/// An audit that cannot be written is said at once to the account's approvers (a frame on their
/// connection, a warning in `glovebox approve`), and so is its recovery.
#[tokio::test]
async fn approvers_are_told_when_the_audit_fails_and_when_it_recovers() {
    use glovebox_e2e::interactive::Interactive;
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "four").unwrap();
    let mut approver = g.connect("approver").await;
    let mut approve = {
        let mut command = std::process::Command::new(glovebox_e2e::glovebox_bin());
        command.arg("approve").arg("--state-dir").arg(&g.state);
        Interactive::start_in_terminal(command)
    };
    approve.expect("waiting for asks");
    let mut agent = g.connect("agent").await;
    let full = g.fail_audit_writes().await;
    expect_error(
        &agent
            .invoke("lost", "file_read", json!({"path": "a.txt"}))
            .await,
        "unavailable",
    );
    let failing = audit_health_frame(&mut approver, false).await;
    assert!(
        failing["message"]
            .as_str()
            .unwrap()
            .contains("every call is refused"),
        "{failing}"
    );
    approve.expect("WARNING: audit: the audit cannot be written");
    full.lift().await;
    expect_ok(
        &agent
            .invoke("after", "file_read", json!({"path": "a.txt"}))
            .await,
    );
    let recovered = audit_health_frame(&mut approver, true).await;
    assert!(
        recovered["message"]
            .as_str()
            .unwrap()
            .contains("written again"),
        "{recovered}"
    );
    approve.expect("(audit: the audit is written again");
}
