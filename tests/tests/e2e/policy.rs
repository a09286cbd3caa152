//! The policy end to end: hand edits picked up without a restart, invalid edits keeping the last
//! good policy, managed and project layers that cannot be loosened, expiring rules, rule
//! management over the gate's socket (and never from an agent connection), and `policy explain`,
//! which judges the subject the account's executor plans, as a real call is judged.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use glovebox_e2e::{Glovebox, WAIT, expect_error, expect_ok};
use glovebox_proto::v1::{self as pb, gate_admin_client::GateAdminClient, gate_client::GateClient};
use serde_json::{Value, json};

/// Rule management: the gate's admin socket, which the broker never connects to.
fn admin(g: &Glovebox) -> GateAdminClient<glovebox_proto::transport::Link> {
    GateAdminClient::new(g.admin_channel())
}

fn gate(g: &Glovebox) -> GateClient<glovebox_proto::transport::Link> {
    GateClient::new(g.gate_channel())
}

/// Polls `probe` until it returns `Some`, failing the test after `WAIT`.
async fn eventually<T, F, Fut>(what: &str, g: &Glovebox, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; stderr:\n{}",
            g.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn health(g: &Glovebox) -> pb::HealthResponse {
    gate(g)
        .health(pb::HealthRequest {})
        .await
        .unwrap()
        .into_inner()
}

async fn account_info(g: &Glovebox) -> pb::AccountInfoResponse {
    gate(g)
        .account_info(pb::AccountInfoRequest {
            account: g.account.clone(),
            tools: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner()
}

async fn list_rules(g: &Glovebox) -> pb::ListRulesResponse {
    admin(g)
        .list_rules(pb::ListRulesRequest {
            account: g.account.clone(),
        })
        .await
        .unwrap()
        .into_inner()
}

/// Reads `path` as the agent until the read is refused (a policy change took effect).
async fn read_until_refused(g: &Glovebox, what: &str, path: &str) -> Value {
    eventually(what, g, || async {
        let r = read(g, path).await;
        (r["ok"] == false).then_some(r)
    })
    .await
}

async fn read(g: &Glovebox, path: &str) -> Value {
    let mut agent = g.connect("agent").await;
    agent
        .invoke("r", "file_read", json!({ "path": path }))
        .await
}

/// What `glovebox policy explain ARGS` printed: the verdict, the canonical subject (as the
/// account's executor planned it), the layer and rule that decided, and the warnings.
#[derive(Debug, Default)]
struct Explained {
    verdict: String,
    subject: String,
    layer: String,
    rule: String,
    warnings: Vec<String>,
}

fn explain(g: &Glovebox, args: &[&str]) -> Explained {
    let mut argv = vec!["policy", "explain", "--account", g.account.as_str()];
    argv.extend(args);
    let (code, out, err) = g.run_cli(&argv);
    assert_eq!(code, 0, "explain {args:?}: {err}");
    let mut x = Explained::default();
    for line in out.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim().to_owned();
        match key {
            "verdict" => x.verdict = value,
            "subject" => x.subject = value,
            "layer" => x.layer = value,
            "rule" => x.rule = value,
            "warning" => x.warnings.push(value),
            _ => {}
        }
    }
    x
}

async fn policy_events(g: &Glovebox) -> Vec<(String, String)> {
    let pool = g.audit_pool().await;
    sqlx::query_as::<_, (String, String)>(
        "SELECT outcome, detail FROM events WHERE kind = 'policy' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_hand_edit_is_picked_up_without_a_restart_and_audited() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    expect_ok(&read(&g, "a.txt").await);
    let mut text = std::fs::read_to_string(g.permissions_file()).unwrap();
    text.push_str("# my own note\n");
    text = text.replace("    deny: []\n", "    deny: ['./a.txt']\n");
    assert!(text.contains("./a.txt"), "{text}");
    std::fs::write(g.permissions_file(), &text).unwrap();
    let e = read_until_refused(&g, "the edit to apply", "a.txt").await;
    let e = expect_error(&e, "denied");
    assert_eq!(e["rule"], "paths.read.deny[0]: ./a.txt", "{e}");
    let events = eventually("a policy audit event", &g, || async {
        let ev = policy_events(&g).await;
        ev.iter().any(|(o, _)| o == "reloaded").then_some(ev)
    })
    .await;
    assert!(
        events.iter().any(|(_, d)| d.contains("rule(s)")),
        "{events:?}"
    );
}

/// A small file is read before its verdict (the verdict and the call's rows then take one round
/// trip to the gate): a read the policy denies tells nothing of the file and leaves no row of
/// the executor's; an allowed one its execute and result rows with the decide row.
#[tokio::test]
async fn a_denied_read_tells_nothing_and_leaves_no_executor_row() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "open-content").unwrap();
    std::fs::write(g.workdir.join("secret.txt"), "secret-content").unwrap();
    let r = read(&g, "a.txt").await;
    expect_ok(&r);
    assert!(r.to_string().contains("open-content"), "{r}");
    let text = std::fs::read_to_string(g.permissions_file())
        .unwrap()
        .replace("    deny: []\n", "    deny: ['./secret.txt']\n");
    assert!(text.contains("./secret.txt"), "{text}");
    std::fs::write(g.permissions_file(), &text).unwrap();
    let e = read_until_refused(&g, "the deny to apply", "secret.txt").await;
    expect_error(&e, "denied");
    assert!(!e.to_string().contains("secret-content"), "{e}");

    let pool = g.audit_pool().await;
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT call_id, kind, source FROM events WHERE client_call_id = 'r' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let mut calls: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for (call, kind, source) in rows {
        match calls.last_mut() {
            Some((last, rows)) if *last == call => rows.push((kind, source)),
            _ => calls.push((call, vec![(kind, source)])),
        }
    }
    let (denied, allowed) = calls.split_last().unwrap();
    assert!(
        denied.1.iter().any(|(kind, _)| kind == "decide")
            && denied.1.iter().all(|(_, source)| source != "executor"),
        "{denied:?}"
    );
    let three = ["decide", "execute", "result"];
    for (call, rows) in allowed {
        let kinds: Vec<&str> = rows.iter().map(|(kind, _)| kind.as_str()).collect();
        assert_eq!(kinds, three, "{call}");
    }
}

#[tokio::test]
async fn an_invalid_edit_keeps_the_last_good_policy_and_reports_where() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    std::fs::write(
        g.permissions_file(),
        "paths:\n  read:\n    alow: ['./**']\n",
    )
    .unwrap();
    let h = eventually("health to report the error", &g, || async {
        let h = health(&g).await;
        (!h.policy_errors.is_empty()).then_some(h)
    })
    .await;
    let err = &h.policy_errors[0];
    assert!(
        err.contains("permissions.yaml")
            && err.contains("line 3")
            && err.contains("alow")
            && err.contains("expected"),
        "{err}"
    );
    // the last good policy still decides: reads in the workdir are allowed
    expect_ok(&read(&g, "a.txt").await);
    let info = account_info(&g).await;
    assert!(info.policy_error.contains("line 3"), "{info:?}");
    let (code, out, _) = g.run_cli(&["status"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("WARNING: policy:") && l.contains("line 3")),
        "{out}"
    );
    let events = eventually("the invalid edit in the audit", &g, || async {
        let ev = policy_events(&g).await;
        ev.iter().any(|(o, _)| o == "invalid").then_some(ev)
    })
    .await;
    assert!(
        events
            .iter()
            .any(|(o, d)| o == "invalid" && d.contains("line 3")),
        "{events:?}"
    );
    // fixing the file clears the error
    std::fs::write(
        g.permissions_file(),
        "paths:\n  read:\n    allow: ['./**']\n",
    )
    .unwrap();
    eventually("the error to clear", &g, || async {
        let h = health(&g).await;
        h.policy_errors.is_empty().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_managed_deny_cannot_be_loosened_by_the_account() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("secret.txt"), "s").unwrap();
    expect_ok(&read(&g, "secret.txt").await);
    let managed = g.state.join("managed");
    std::fs::create_dir_all(&managed).unwrap();
    std::fs::write(
        managed.join("corp.yaml"),
        format!(
            "paths:\n  read:\n    deny: ['{}/secret.txt']\n",
            g.workdir.display()
        ),
    )
    .unwrap();
    let e = read_until_refused(&g, "the managed deny", "secret.txt").await;
    let e = expect_error(&e, "denied");
    assert!(
        e["deny_reason"].as_str().unwrap().contains("managed"),
        "{e}"
    );
    // the audit row of the decision names the layer
    let pool = g.audit_pool().await;
    let details: Vec<Option<String>> = sqlx::query_scalar(
        "SELECT detail FROM events WHERE kind = 'decide' AND verdict = 'deny' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        details.last().cloned().flatten().as_deref(),
        Some("layer: managed"),
        "{details:?}"
    );
    // The account's own allow, added through rule management, does not loosen it.
    let r = admin(&g)
        .add_rule(pb::AddRuleRequest {
            account: g.account.clone(),
            section: "paths.read".into(),
            kind: "allow".into(),
            pattern: "./secret.txt".into(),
            expires: String::new(),
            exact: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.changed, "{r:?}");
    expect_error(&read(&g, "secret.txt").await, "denied");
    let x = explain(&g, &["--read", "secret.txt"]);
    assert_eq!(x.layer, "managed", "{x:?}");
    assert_eq!(x.verdict, "deny");
    // and the listing shows the managed rule as read-only
    let list = list_rules(&g).await;
    let m = list.rules.iter().find(|r| r.layer == "managed").unwrap();
    assert!(m.read_only && m.pattern.ends_with("/secret.txt"), "{m:?}");
    assert!(
        list.rules
            .iter()
            .any(|r| r.layer == "floor" && r.pattern == ".ssh" && r.read_only)
    );
}

#[tokio::test]
async fn a_project_file_can_only_tighten() {
    let g = Glovebox::start();
    std::fs::create_dir_all(g.workdir.join("vendor")).unwrap();
    std::fs::write(g.workdir.join("vendor/lib.txt"), "v").unwrap();
    std::fs::create_dir_all(g.workdir.join(".glovebox")).unwrap();
    std::fs::write(
        g.workdir.join(".glovebox/permissions.yaml"),
        "sandbox: false\npaths:\n  read:\n    deny: ['./vendor/**']\n  write:\n    allow: ['./**']\n",
    )
    .unwrap();
    let e = read_until_refused(&g, "the project deny", "vendor/lib.txt").await;
    assert_eq!(
        expect_error(&e, "denied")["rule"],
        "paths.read.deny[0]: ./vendor/**"
    );
    // its write allow is ignored: the write still asks (and with no approver, is denied)
    let x = explain(&g, &["--write", "new.txt"]);
    assert_eq!(x.verdict, "ask", "{x:?}");
    assert!(
        x.warnings.iter().any(|w| w.contains("can only tighten")),
        "{x:?}"
    );
    assert!(
        x.warnings
            .iter()
            .any(|w| w.contains("cannot turn the sandbox off")),
        "{x:?}"
    );
    // its sandbox: false is ignored: the floor still applies
    std::fs::write(g.workdir.join(".env"), "K=V").unwrap();
    expect_error(&read(&g, ".env").await, "denied");
    // and an agent cannot rewrite the project policy
    let mut agent = g.connect("agent").await;
    let r = agent
        .invoke(
            "w",
            "file_write",
            json!({"path": ".glovebox/permissions.yaml", "content": "paths: {}\n"}),
        )
        .await;
    assert_eq!(
        expect_error(&r, "denied")["rule"],
        "floor:project policy",
        "{r}"
    );
}

#[tokio::test]
async fn an_expired_rule_no_longer_applies() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("old.txt"), "o").unwrap();
    std::fs::write(g.workdir.join("new.txt"), "n").unwrap();
    std::fs::write(
        g.permissions_file(),
        "paths:\n  read:\n    allow:\n      - {rule: './old.txt', expires: '2020-01-01T00:00:00Z'}\n      - {rule: './new.txt', expires: '2999-01-01T00:00:00Z'}\n",
    )
    .unwrap();
    // The expired allow does not apply, so the read asks; no approver is connected: denied.
    let e = read_until_refused(&g, "the new policy", "old.txt").await;
    expect_error(&e, "denied");
    let x = explain(&g, &["--read", "old.txt"]);
    assert_eq!(
        (x.verdict.as_str(), x.rule.as_str()),
        ("ask", "default"),
        "{x:?}"
    );
    expect_ok(&read(&g, "new.txt").await);
    let x = explain(&g, &["--read", "new.txt"]);
    assert_eq!(
        (x.verdict.as_str(), x.rule.as_str()),
        ("allow", "paths.read.allow[1]: ./new.txt"),
        "{x:?}"
    );
    let list = list_rules(&g).await;
    let old = list
        .rules
        .iter()
        .find(|r| r.pattern == "./old.txt")
        .unwrap();
    assert!(
        old.expired && old.expires == "2020-01-01T00:00:00Z",
        "{old:?}"
    );
}

#[tokio::test]
async fn rule_management_keeps_comments_and_every_change_is_audited() {
    let g = Glovebox::with_extra_roots(&["outside", "elsewhere"]);
    let mut admin_client = admin(&g);
    let mut text = std::fs::read_to_string(g.permissions_file()).unwrap();
    text.push_str("# hand-written note\n");
    std::fs::write(g.permissions_file(), &text).unwrap();
    let add = |section: &str, kind: &str, pattern: &str, exact: bool| pb::AddRuleRequest {
        account: g.account.clone(),
        section: section.into(),
        kind: kind.into(),
        pattern: pattern.into(),
        expires: "8h".into(),
        exact,
    };
    let r = admin_client
        .add_rule(add("commands", "allow", "git status; ls", true))
        .await
        .unwrap()
        .into_inner();
    assert!(r.changed && r.summary.contains("expires"), "{r:?}");
    let text = std::fs::read_to_string(g.permissions_file()).unwrap();
    assert!(text.contains("# hand-written note"), "{text}");
    let x = explain(&g, &["--exec", "git status; ls"]);
    assert_eq!(x.verdict, "allow", "{x:?}");
    let x = explain(&g, &["--exec", "git status; ls; id"]);
    assert_eq!(x.verdict, "ask", "{x:?}");
    let r = admin_client
        .revoke_rule(pb::RevokeRuleRequest {
            account: g.account.clone(),
            section: "commands".into(),
            kind: "allow".into(),
            index: 0,
            pattern: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.changed, "{r:?}");
    let x = explain(&g, &["--exec", "git status; ls"]);
    assert_eq!(x.verdict, "ask", "{x:?}");
    admin_client
        .set_confinement(pb::SetConfinementRequest {
            account: g.account.clone(),
            enabled: true,
        })
        .await
        .unwrap();
    let elsewhere = g.root().join("elsewhere/x");
    let x = explain(&g, &["--read", elsewhere.to_str().unwrap()]);
    assert_eq!(
        (x.verdict.as_str(), x.rule.as_str()),
        ("deny", "confine_to_workdir"),
        "{x:?}"
    );
    let refused = admin_client
        .set_sandbox(pb::SetSandboxRequest {
            account: g.account.clone(),
            enabled: false,
            confirm: false,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    admin_client
        .set_sandbox(pb::SetSandboxRequest {
            account: g.account.clone(),
            enabled: false,
            confirm: true,
        })
        .await
        .unwrap();
    let info = account_info(&g).await;
    assert!(!info.sandbox_enabled && info.confined, "{info:?}");
    admin_client
        .reset_rules(pb::ResetRulesRequest {
            account: g.account.clone(),
        })
        .await
        .unwrap();
    let x = explain(&g, &["--read", "a.txt"]);
    assert_eq!(x.rule, "sandbox: false", "switches survive a reset: {x:?}");
    let outcomes: Vec<String> = policy_events(&g)
        .await
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    for want in [
        "rule_added",
        "rule_revoked",
        "confinement",
        "sandbox",
        "reset",
    ] {
        assert!(
            outcomes.iter().any(|o| o == want),
            "{want} missing from {outcomes:?}"
        );
    }
}

#[tokio::test]
async fn an_agent_connection_cannot_reach_rule_management() {
    let g = Glovebox::start();
    let mut agent = g.connect("agent").await;
    for tool in [
        "add_rule",
        "AddRule",
        "policy_add",
        "set_sandbox",
        "explain",
    ] {
        let r = agent
            .invoke(
                "m",
                tool,
                json!({"account": g.account, "enabled": false, "confirm": true}),
            )
            .await;
        expect_error(&r, "unknown_tool");
    }
    agent
        .send(json!({"type": "set_sandbox", "enabled": false, "confirm": true}))
        .await;
    let frame = agent.next().await;
    assert_eq!(frame["type"], "error", "{frame}");
    let info = account_info(&g).await;
    assert!(info.sandbox_enabled);
    // The socket the broker uses does not serve rule management at all.
    let mut on_gate_socket = GateAdminClient::new(g.gate_channel());
    let refused = on_gate_socket
        .list_rules(pb::ListRulesRequest {
            account: g.account.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unimplemented, "{refused:?}");
    // Nor through the approvers' `manage` frame.
    agent
        .send(json!({"type": "manage", "request_id": "m1",
                     "op": {"name": "set_sandbox", "enabled": false, "confirm": true}}))
        .await;
    let frame = agent.next().await;
    assert_eq!(frame["type"], "error", "{frame}");
    assert_eq!(frame["code"], "denied", "{frame}");
    assert!(account_info(&g).await.sandbox_enabled);
    // The broker reaches an account's rules only through `AccountAdmin` (for an approver's own
    // account, the web console): never the administrator's service, its socket, or a reset.
    let broker_src =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../services/broker/src");
    let files = walk(&broker_src);
    assert!(files.len() > 3, "{}", broker_src.display());
    for entry in files {
        let text = std::fs::read_to_string(&entry).unwrap();
        for method in [
            "reset_rules",
            "GateAdmin",
            "admin.sock",
            "admin_socket",
            "gate_admin",
        ] {
            assert!(!text.contains(method), "{} calls {method}", entry.display());
        }
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

#[tokio::test]
async fn the_policy_command_lists_adds_explains_and_guards_the_sandbox() {
    let g = Glovebox::start();
    let acct = g.account.clone();
    std::fs::create_dir_all(g.workdir.join("docs")).unwrap();
    let (code, out, err) = g.run_cli(&[
        "policy",
        "explain",
        "--account",
        &acct,
        "--read",
        "docs/../a.txt",
    ]);
    assert_eq!(code, 0, "{err}");
    let subject = format!("subject: {}/a.txt", g.workdir.display());
    assert!(
        out.contains("verdict: allow") && out.contains(&subject),
        "{out}"
    );
    assert!(
        out.contains("layer:   account") && out.contains("rule:    paths.read.allow[0]: ./**"),
        "{out}"
    );
    assert!(out.contains("why:"), "{out}");
    let (_, out, _) = g.run_cli(&[
        "policy",
        "explain",
        "--account",
        &acct,
        "--read",
        ".ssh/id_rsa",
    ]);
    assert!(
        out.contains("verdict: deny")
            && out.contains("layer:   floor")
            && out.contains("rule:    floor:.ssh"),
        "{out}"
    );
    let (code, out, err) = g.run_cli(&[
        "policy",
        "add",
        "--account",
        &acct,
        "commands",
        "allow",
        "cargo test",
        "--exact",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("changed: commands.allow: cargo test"), "{out}");
    let (_, out, _) = g.run_cli(&[
        "policy",
        "explain",
        "--exec",
        "cargo test; rm -rf ~",
        "--cwd",
        ".",
    ]);
    assert!(
        out.contains("verdict: ask") && out.contains("rule:    default"),
        "{out}"
    );
    let (_, out, _) = g.run_cli(&["policy", "explain", "--exec", "cargo test"]);
    assert!(
        out.contains("verdict: allow") && out.contains("commands.allow[0]"),
        "{out}"
    );
    let (_, out, _) = g.run_cli(&["policy", "list"]);
    assert!(
        out.contains("floor (read-only, always denied): .ssh"),
        "{out}"
    );
    assert!(
        out.contains("account:\n") && out.contains("  commands.allow[0]: cargo test"),
        "{out}"
    );
    assert!(out.contains("\nsandbox: on\n"), "{out}");
    let (code, out, _) = g.run_cli(&["policy", "revoke", "commands", "allow", "cargo test"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("revoked: commands.allow[0]: cargo test"),
        "{out}"
    );
    let (code, _, err) = g.run_cli(&["policy", "sandbox", "off"]);
    assert_eq!(code, 1);
    assert!(err.contains("--confirm"), "{err}");
    let (_, out, _) = g.run_cli(&["policy", "explain", "--read", ".env"]);
    assert!(
        out.contains("verdict: deny"),
        "the sandbox is still on: {out}"
    );
    let (code, out, _) = g.run_cli(&["policy", "confine", "on"]);
    assert_eq!(code, 0);
    assert!(out.contains("confine_to_workdir: true"), "{out}");
    let (code, _, err) = g.run_cli(&["policy", "explain", "--read", "a", "--write", "b"]);
    assert_ne!(code, 0, "one subject at a time: {err}");
}

/// How a real call was judged: the subject its decide row names and the verdict. The call is made
/// as the agent; with no approver connected, an ask is denied at once.
async fn judged(g: &Glovebox, call_id: &str, tool: &str, params: Value) -> (String, String) {
    let mut agent = g.connect("agent").await;
    agent.invoke(call_id, tool, params).await;
    let pool = g.audit_pool().await;
    eventually("the call's decide row", g, || async {
        sqlx::query_as::<_, (Option<String>, Option<String>)>(
            "SELECT subject, verdict FROM events WHERE kind = 'decide' AND client_call_id = ?",
        )
        .bind(call_id)
        .fetch_optional(&pool)
        .await
        .unwrap()
        .map(|(subject, verdict)| (subject.unwrap_or_default(), verdict.unwrap_or_default()))
    })
    .await
}

/// Explains `path` (`--read`, `--write` or `--delete`) and makes the real call: both judge the
/// same canonical subject, `want`, with the same verdict. Returns what explain said.
async fn explain_agrees(g: &Glovebox, flag: &str, path: &str, want: &std::path::Path) -> Explained {
    let x = explain(g, &[flag, path]);
    let (domain, tool, params) = match flag {
        "--read" => ("read", "file_read", json!({ "path": path })),
        "--write" => (
            "write",
            "file_write",
            json!({ "path": path, "content": "x" }),
        ),
        _ => ("delete", "file_delete", json!({ "path": path })),
    };
    let call_id: String = format!("real{flag}-{path}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let (subject, verdict) = judged(g, &call_id, tool, params).await;
    let want = want.to_str().unwrap();
    assert_eq!(x.subject, want, "explain {flag} {path}: {x:?}");
    assert_eq!(subject, format!("{domain} {want}"), "{tool} {path}");
    assert_eq!(x.verdict, verdict, "{flag} {path}: {x:?}");
    x
}

#[tokio::test]
async fn explain_judges_a_link_as_the_last_component_as_the_real_call_does() {
    let g = Glovebox::with_extra_roots(&["outside", "elsewhere"]);
    let outside = g.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "s").unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), g.workdir.join("l")).unwrap();
    let (code, _, err) = g.run_cli(&["policy", "add", "delete", "deny", "./l"]);
    assert_eq!(code, 0, "{err}");
    // A read follows the link to its target, outside the workdir: it asks.
    let x = explain_agrees(&g, "--read", "l", &outside.join("secret.txt")).await;
    assert_eq!((x.verdict.as_str(), x.rule.as_str()), ("ask", "default"));
    // A delete acts on the link itself, which the rule names.
    let x = explain_agrees(&g, "--delete", "l", &g.workdir.join("l")).await;
    assert_eq!(
        (x.verdict.as_str(), x.rule.as_str()),
        ("deny", "delete.deny[0]: ./l")
    );
    assert!(g.workdir.join("l").symlink_metadata().is_ok());
}

#[tokio::test]
async fn explain_takes_dotdot_after_a_link_to_the_targets_parent_as_the_real_call_does() {
    let g = Glovebox::with_extra_roots(&["outside", "elsewhere"]);
    let deep = g.root().join("elsewhere/deep");
    std::fs::create_dir_all(&deep).unwrap();
    std::os::unix::fs::symlink(&deep, g.workdir.join("up")).unwrap();
    let parent = g.root().join("elsewhere/x.txt");
    // `up/..` is the parent of the link's target, not the workdir: outside it, the read asks.
    for path in ["up/../x.txt", "nothere/../up/../x.txt"] {
        let x = explain_agrees(&g, "--read", path, &parent).await;
        assert_eq!(x.verdict, "ask", "{path}: {x:?}");
    }
}

#[tokio::test]
async fn explain_pops_a_missing_directory_as_the_real_call_does() {
    let g = Glovebox::with_extra_roots(&["outside", "elsewhere"]);
    let deep = g.root().join("elsewhere/deep");
    std::fs::create_dir_all(&deep).unwrap();
    std::os::unix::fs::symlink(&deep, g.workdir.join("up")).unwrap();
    // `..` pops a directory that does not exist; a link after it is still followed.
    let x = explain_agrees(&g, "--read", "nothere/../a.txt", &g.workdir.join("a.txt")).await;
    assert_eq!(x.verdict, "allow", "{x:?}");
    let x = explain_agrees(&g, "--read", "nothere/../up/x.txt", &deep.join("x.txt")).await;
    assert_eq!(x.verdict, "ask", "{x:?}");
    let x = explain_agrees(
        &g,
        "--write",
        "nothere/.ssh/../../new.txt",
        &g.workdir.join("new.txt"),
    )
    .await;
    assert_eq!(x.verdict, "ask", "{x:?}");
    assert!(!g.workdir.join("new.txt").exists());
}

#[tokio::test]
async fn explain_says_so_when_the_executor_is_not_reachable() {
    let mut g = Glovebox::start();
    g.stop();
    let (code, out, err) = g.run_cli(&["policy", "explain", "--read", "a.txt"]);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("the executor of account") && err.contains("not reachable"),
        "{err}"
    );
    assert!(!out.contains("verdict"), "{out}");
}

#[tokio::test]
async fn policy_add_of_a_pattern_that_does_not_compile_is_refused_and_the_file_unchanged() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("secret.txt"), "s").unwrap();
    let before = std::fs::read_to_string(g.permissions_file()).unwrap();
    for (section, pattern, rule) in [
        ("commands", "(", "commands.allow[0]: ("),
        ("paths.read", "a[", "paths.read.allow[1]: a["),
    ] {
        let (code, out, err) = g.run_cli(&["policy", "add", section, "allow", pattern]);
        assert_ne!(code, 0, "{section} {pattern}: {out}");
        assert!(
            err.contains("would not compile") && err.contains(rule),
            "{section} {pattern}: {err}"
        );
        assert!(!out.contains("changed"), "{out}");
        assert_eq!(
            std::fs::read_to_string(g.permissions_file()).unwrap(),
            before
        );
    }
    // the file still compiles, so a good rule added afterwards takes effect
    let (code, out, err) = g.run_cli(&["policy", "add", "paths.read", "deny", "./secret.txt"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("changed: paths.read.deny"), "{out}");
    let r = read_until_refused(&g, "the new deny", "secret.txt").await;
    let e = expect_error(&r, "denied");
    assert_eq!(e["rule"], "paths.read.deny[0]: ./secret.txt", "{e}");
    let events = policy_events(&g).await;
    assert_eq!(
        events.iter().filter(|(o, _)| o == "rule_added").count(),
        1,
        "{events:?}"
    );
    assert!(events.iter().all(|(o, _)| o != "invalid"), "{events:?}");
}

#[tokio::test]
async fn files_that_make_later_commands_run_code_always_ask_with_a_warning() {
    let g = Glovebox::start();
    std::fs::create_dir_all(g.workdir.join(".git/hooks")).unwrap();
    std::fs::write(g.workdir.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(g.workdir.join(".git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
    for (section, pattern) in [("paths.write", "./**"), ("delete", "./**")] {
        let (code, _, err) = g.run_cli(&["policy", "add", section, "allow", pattern]);
        assert_eq!(code, 0, "{err}");
    }
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    // an ordinary file: allowed by the rule, nobody asked
    let r = agent
        .invoke(
            "n",
            "file_write",
            json!({"path": "notes.txt", "content": "n"}),
        )
        .await;
    expect_ok(&r);
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("notes.txt")).unwrap(),
        "n"
    );
    // the same rule matches these, and they ask anyway, saying why
    for (id, tool, params, entry) in [
        (
            "c",
            "file_write",
            json!({"path": ".git/config", "content": "[core]\n\tfsmonitor = ./x\n"}),
            ".git/config",
        ),
        (
            "h",
            "file_delete",
            json!({"path": ".git/hooks/pre-commit"}),
            ".git/hooks",
        ),
    ] {
        let (ask, r) = agent
            .invoke_asked(&mut approver, id, tool, params, "deny")
            .await;
        let warning = ask["warning"].as_str().unwrap_or_default();
        assert!(
            warning.contains("makes later commands run code")
                && warning.contains(&format!("{}/{entry}", g.workdir.display())),
            "{tool}: {ask}"
        );
        expect_error(&r, "denied");
    }
    assert_eq!(
        std::fs::read_to_string(g.workdir.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(g.workdir.join(".git/hooks/pre-commit").exists());
    // "always" cannot make it stop asking: no rule is written, and the next write asks again
    let params = json!({"path": ".git/config", "content": "[core]\n"});
    let (_, r) = agent
        .invoke_asked(&mut approver, "a1", "file_write", params.clone(), "always")
        .await;
    expect_ok(&r);
    let (ask, r) = agent
        .invoke_asked(&mut approver, "a2", "file_write", params, "deny")
        .await;
    assert!(
        ask["warning"].as_str().unwrap().contains("run code"),
        "{ask}"
    );
    expect_error(&r, "denied");
    let file = std::fs::read_to_string(g.permissions_file()).unwrap();
    assert!(!file.contains(".git"), "{file}");
}

/// Reads `a.txt` as `agent` (each call with an id of its own).
async fn read_a(agent: &mut glovebox_e2e::Client, n: &mut u32) -> Value {
    *n += 1;
    agent
        .invoke(&format!("r{n}"), "file_read", json!({"path": "a.txt"}))
        .await
}

/// Waits for the gate to settle after an edit (its decisions then no longer look at the files)
/// and makes a few calls.
async fn settle(agent: &mut glovebox_e2e::Client, n: &mut u32) {
    tokio::time::sleep(Duration::from_millis(150)).await;
    for _ in 0..3 {
        read_a(agent, n).await;
    }
}

#[tokio::test]
async fn an_edit_applies_to_the_very_next_call_even_while_a_job_floods_the_watcher() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let mut agent = g.connect("agent").await;
    let mut approver = g.connect("approver").await;
    let original = std::fs::read_to_string(g.permissions_file()).unwrap();
    let denying = original.replace("    deny: []\n", "    deny: ['./a.txt']\n");
    assert_ne!(denying, original);
    let n = &mut 0;
    // Each edit is made once the gate has settled, and the very next call must see it.
    let mut edit_and_call = async |agent: &mut glovebox_e2e::Client, what: String| {
        settle(agent, n).await;
        std::fs::write(g.permissions_file(), &denying).unwrap();
        let r = read_a(agent, n).await;
        assert_eq!(r["ok"], false, "{what}, denying: {r}");
        settle(agent, n).await;
        std::fs::write(g.permissions_file(), &original).unwrap();
        let r = read_a(agent, n).await;
        assert_eq!(r["ok"], true, "{what}, allowing again: {r}");
    };
    for round in 0..3 {
        edit_and_call(&mut agent, format!("round {round}")).await;
    }

    // A job makes and removes files at the workdir's top as fast as it can, each an event for the
    // gate's watcher (its queue can fill and overflow), and still no edit is missed.
    let flood =
        "i=0; while [ $i -lt 1000000 ]; do : > f$((i % 64)); rm -f f$((i % 64)); i=$((i+1)); done";
    let (_, r) = agent
        .invoke_asked(
            &mut approver,
            "flood",
            "exec_run",
            json!({ "command": flood }),
            "once",
        )
        .await;
    let job = expect_ok(&r)["job_id"].as_str().unwrap().to_owned();
    for round in 0..5 {
        edit_and_call(&mut agent, format!("flooded round {round}")).await;
    }
    agent.kill_running_job(&job, "the flood").await;
}

/// The names every front door lists for a new agent connection of `g` (its `hello_ok`).
async fn listed(g: &Glovebox) -> Vec<String> {
    let agent = g.connect("agent").await;
    agent.hello_ok["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The names of the next `tools_changed` an agent is told (within 15 s) after `what`.
async fn told_tools(agent: &mut glovebox_e2e::Client, what: &str) -> Vec<String> {
    let changed = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let frame = agent.next().await;
            if frame["type"] == "tools_changed" {
                break frame;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no tools_changed after {what}"));
    changed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// A managed cap hides the tools it forbids outright from every listing (`hello_ok`, MCP
/// `tools/list`), and their calls are still refused: `no-exec` takes the commands, `read-only`
/// every tool that writes, deletes or runs.
#[tokio::test]
async fn managed_caps_hide_the_tools_they_forbid() {
    use glovebox_e2e::mcp_clients::{McpClient, Sdk, Transport};
    let g = Glovebox::start();
    let managed = g.state.join("managed");
    std::fs::create_dir_all(&managed).unwrap();
    assert!(listed(&g).await.contains(&"exec_run".to_owned()));
    // An agent connected before the cap is told its new list, without reconnecting.
    let mut early = g.connect("agent").await;
    std::fs::write(managed.join("corp.yaml"), "cap: [no-exec]\n").unwrap();
    let told = told_tools(&mut early, "a cap was added").await;
    let told: Vec<&str> = told.iter().map(String::as_str).collect();
    assert!(
        !told.contains(&"exec_run") && told.contains(&"file_read"),
        "{told:?}"
    );
    let deadline = std::time::Instant::now() + glovebox_e2e::WAIT;
    let names = loop {
        let names = listed(&g).await;
        if !names.contains(&"exec_run".to_owned()) {
            break names;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never hidden: {names:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(!names.contains(&"exec_input".to_owned()), "{names:?}");
    for kept in ["file_read", "file_write", "exec_status", "exec_stat"] {
        assert!(names.contains(&kept.to_owned()), "{kept}: {names:?}");
    }
    let mut mcp = McpClient::start(&g, Sdk::Python, Transport::Http, &g.token);
    let mcp_names = mcp.names().await;
    assert!(!mcp_names.contains(&"exec_run".to_owned()), "{mcp_names:?}");
    mcp.quit().await;
    // Hidden is not the defence: a call made anyway is refused by the cap.
    let mut agent = g.connect("agent").await;
    let e = expect_error(
        &agent
            .invoke("x", "exec_run", json!({"command": "true"}))
            .await,
        "denied",
    );
    assert!(
        e["deny_reason"].as_str().unwrap().contains("no-exec"),
        "{e}"
    );
    std::fs::write(managed.join("corp.yaml"), "cap: [read-only]\n").unwrap();
    let deadline = std::time::Instant::now() + glovebox_e2e::WAIT;
    let names = loop {
        let names = listed(&g).await;
        if !names.contains(&"file_write".to_owned()) {
            break names;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never hidden: {names:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    for gone in [
        "file_edit",
        "file_delete",
        "file_move",
        "file_mkdir",
        "exec_run",
    ] {
        assert!(!names.contains(&gone.to_owned()), "{gone}: {names:?}");
    }
    for kept in ["file_read", "file_info", "file_tree", "exec_tail"] {
        assert!(names.contains(&kept.to_owned()), "{kept}: {names:?}");
    }
}

/// A managed `tools` deny hides the pack tools it names from every listing, at once for the
/// agents already connected, and their calls are still refused; the pack's other tools stay. The
/// `no-packs` cap hides them all, and lifting it lists them again.
#[tokio::test]
async fn a_managed_tools_deny_hides_the_pack_tools_it_names() {
    let bin = glovebox_e2e::sibling_bin("glovebox-fake-pack");
    let g = Glovebox::start_with(glovebox_e2e::Options {
        accounts: vec![("test".into(), true)],
        mcp_json: Some(
            json!({"mcpServers": {"fake": {"command": bin, "args": ["good"]}}}).to_string(),
        ),
        ..Default::default()
    });
    let deadline = Instant::now() + WAIT;
    while !listed(&g).await.contains(&"fake__echo".to_owned()) {
        assert!(Instant::now() < deadline, "the pack's tools never came");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut early = g.connect("agent").await;
    let managed = g.state.join("managed");
    std::fs::create_dir_all(&managed).unwrap();
    std::fs::write(
        managed.join("corp.yaml"),
        "tools:\n  deny: ['fake__write_*', fake__echo]\n",
    )
    .unwrap();
    let told = told_tools(&mut early, "a managed deny").await;
    let told: Vec<&str> = told.iter().map(String::as_str).collect();
    for gone in ["fake__echo", "fake__write_note"] {
        assert!(!told.contains(&gone), "{gone}: {told:?}");
    }
    for kept in ["fake__pid", "file_read"] {
        assert!(told.contains(&kept), "{kept}: {told:?}");
    }
    let names = listed(&g).await;
    assert!(!names.contains(&"fake__echo".to_owned()), "{names:?}");
    assert!(names.contains(&"fake__pid".to_owned()), "{names:?}");
    // Hidden is not the defence: the call is refused by the managed rule.
    let e = expect_error(
        &early.invoke("x", "fake__echo", json!({"text": "hi"})).await,
        "denied",
    );
    assert!(
        e["deny_reason"].as_str().unwrap().contains("managed"),
        "{e}"
    );
    // The gate answers about a bounded number of names.
    for tools in [vec!["x".to_owned(); 4097], vec!["x".repeat(257)]] {
        let refused = gate(&g)
            .account_info(pb::AccountInfoRequest {
                account: g.account.clone(),
                tools,
            })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused}");
    }
    // The no-packs cap hides every pack tool; lifted, they are listed again.
    std::fs::write(managed.join("corp.yaml"), "cap: [no-packs]\n").unwrap();
    let told = told_tools(&mut early, "the no-packs cap").await;
    assert!(!told.iter().any(|t| t.starts_with("fake__")), "{told:?}");
    assert!(told.contains(&"file_read".to_owned()), "{told:?}");
    std::fs::remove_file(managed.join("corp.yaml")).unwrap();
    let told = told_tools(&mut early, "the cap lifted").await;
    for back in ["fake__echo", "fake__write_note", "fake__pid"] {
        assert!(told.contains(&back.to_owned()), "{back}: {told:?}");
    }
}
