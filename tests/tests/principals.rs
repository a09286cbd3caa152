//! Principals that cannot become each other: what an agent's job (hostile code running as the
//! executor's user) can reach of glovebox's control plane, the other services and the state, and
//! which credential may do what. Every attack here runs from inside a real approved job.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use glovebox_e2e::{Glovebox, Options, attempts, plant_attack_binary};

fn two_accounts() -> Glovebox {
    Glovebox::start_with(Options {
        accounts: vec![("alice".into(), true), ("bob".into(), true)],
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
    // Resolve, SetEnabled, AddRule and SetSandbox for two accounts on two sockets, Append on two
    // sockets, Execute and Plan on two executors, two guessed handshakes.
    assert_eq!(tried.len(), 2 + 8 + 2 + 4 + 2, "{stdout}");
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
    std::fs::write(g.workdir.join("after.txt"), "fine").unwrap();
    let r = agent
        .invoke(
            "after",
            "file_read",
            serde_json::json!({"path": "after.txt"}),
        )
        .await;
    assert_eq!(r["ok"], true, "{r}");
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
