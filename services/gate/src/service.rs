//! The gate's six gRPC services and the state they share ([`GateState`], in `state.rs`: policies,
//! enablement, audit, keys) and what they do with it: judge a planned call ([`crate::judge`] on
//! the swapped-in state), sign its ticket, switch enablement, and check who is calling. The
//! services themselves are `gate_rpc` (`Gate`, the broker's), `admin_rpc` (`GateAdmin`, on the
//! admin socket), `account_rpc` (`AccountAdmin`: an approver's own account, through the broker),
//! `audit_rpc` (`Audit`), `executor_gate_rpc` (`ExecutorGate`: an executor's vouched calls, on the
//! audit socket) and `packs_rpc` (`PackSupport`, for pack hosts on the audit socket).
//!
//! Every decision is queued to the audit store before it is returned. Anything the gate cannot
//! make sense of (unknown account, unknown tool, a plan that does not fit its tool) is denied.

mod account_rpc;
mod admin_rpc;
mod audit_rpc;
mod executor_gate_rpc;
mod gate_rpc;
mod packs_rpc;
mod prelude;
mod state;
mod vouchers;

pub use account_rpc::AccountAdminService;
pub use admin_rpc::AdminService;
pub use executor_gate_rpc::ExecutorGateService;
pub use packs_rpc::PackSupportService;
pub(crate) use state::wire_verdict;
pub use state::{AuditAccess, AuditService, GateService, GateState};
pub use vouchers::Vouchers;

#[cfg(test)]
mod tests {
    use super::prelude::*;
    use super::*;
    use crate::audit::AuditStore;
    use crate::policies::AccountPolicies;
    use glovebox_proto::v1::gate_server::Gate;
    use glovebox_proto::v1::{Subject, ToolCall};

    struct Setup {
        _dir: tempfile::TempDir,
        workdir: String,
        gate: GateService,
        master: MasterKey,
    }

    async fn setup() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let workdir = dir.path().join("work");
        std::fs::create_dir_all(&workdir).unwrap();
        let workdir = workdir.display().to_string();
        let state = glovebox_config::StateDir::new(dir.path().join("state"));
        std::fs::create_dir_all(state.root()).unwrap();
        let master = MasterKey::from_bytes(&[9u8; glovebox_ticket::KEY_BYTES]).unwrap();
        let policies = AccountPolicies::new(
            &state,
            vec![
                crate::policies::AccountPaths::in_workdir("alice", &workdir),
                crate::policies::AccountPaths::in_workdir("bob", &workdir),
            ],
            Vec::new(),
            Vec::new(),
        );
        std::fs::create_dir_all(state.permissions_file("alice").parent().unwrap()).unwrap();
        std::fs::write(
            state.permissions_file("alice"),
            "paths:\n  read:\n    allow: ['./**']\ntools:\n  allow: ['e__echo']\n",
        )
        .unwrap();
        let gate = GateService(
            Arc::new(GateState {
                policies,
                audit: AuditStore::open(&crate::audit::AuditFiles {
                    db: state.audit_db(),
                    head: state.audit_head(),
                    key: crate::audit::chain::AuditKey::from_bytes(&[1u8; 32]).unwrap(),
                })
                .await
                .unwrap(),
                master_key: master.clone(),
                enablement: crate::enablement::Enablement::new(
                    state.clone(),
                    [
                        ("alice".parse().unwrap(), true),
                        ("bob".parse().unwrap(), true),
                    ]
                    .into(),
                ),
                packs: crate::packs::PackState::new(
                    state.clone(),
                    ["alice".parse().unwrap(), "bob".parse().unwrap()],
                ),
                audit_access: Default::default(),
                vouchers: Vouchers::new(Some(broker_vouchers())),
                deliveries: Default::default(),
                account_changes: Default::default(),
                state_dir: state,
            }),
            tokio::sync::watch::channel(false).1,
        );
        Setup {
            _dir: dir,
            workdir,
            gate,
            master,
        }
    }

    /// The gate's verdict on `account` reading `path`, asked as the broker asks: a `decide` on its
    /// `Decisions` stream.
    async fn decide(s: &Setup, account: &str, path: &str) -> DecideResponse {
        let request = DecideRequest {
            call: Some(ToolCall {
                account: account.to_owned(),
                call_id: "c1".to_owned(),
                tool: "file_read".to_owned(),
                ..Default::default()
            }),
            plan: Some(Plan {
                subjects: vec![Subject {
                    domain: pb::Domain::Read as i32,
                    path: path.to_owned(),
                    state: None,
                }],
                content_tag: Vec::new(),
                pack: None,
            }),
        };
        let message = pb::DecideCall {
            id: 1,
            decide: Some(request),
            ..Default::default()
        };
        let answer = gate_rpc::answer_decision(&s.gate.0, message).await;
        match answer.body {
            Some(pb::decide_answer::Body::Decided(decided)) => decided,
            other => panic!("no verdict: {other:?}"),
        }
    }

    /// The answer to `body` from `peer`, a message on its `ExecutorGate.Calls` stream.
    async fn from_executor(
        s: &Setup,
        peer: &str,
        body: pb::executor_gate_call::Body,
    ) -> pb::executor_gate_answer::Body {
        let message = pb::ExecutorGateCall {
            id: 1,
            body: Some(body),
            ..Default::default()
        };
        let answer = executor_gate_rpc::answer_call(&s.gate.0, peer, message).await;
        assert_eq!(answer.id, 1);
        answer.body.expect("an answer with something in it")
    }

    /// A `decide` answer as a verdict, or the status it was refused with.
    fn verdict(answer: pb::executor_gate_answer::Body) -> Result<DecideResponse, Status> {
        use pb::executor_gate_answer::Body;
        match answer {
            Body::Decided(decided) => Ok(decided),
            Body::Error(e) => Err(glovebox_proto::transport::messages::status_of(e)),
            other => panic!("not a verdict: {other:?}"),
        }
    }

    /// Alice's executor sends `rows` (an `append_call` on its `Calls` stream): acknowledged, or
    /// the status they were refused with.
    async fn send_rows(s: &Setup, rows: pb::CallRows) -> Result<(), Status> {
        use pb::executor_gate_answer::Body;
        let body = pb::executor_gate_call::Body::AppendCall(rows);
        match from_executor(s, "executor:alice", body).await {
            Body::Appended(_) => Ok(()),
            Body::Error(e) => Err(glovebox_proto::transport::messages::status_of(e)),
            other => panic!("not an acknowledgement: {other:?}"),
        }
    }

    /// A request opening a stream from `peer` (none: a connection that was not authenticated),
    /// with nothing on it: what a stream method admits or refuses before any message.
    fn opening<T: Send + 'static>(peer: Option<&str>) -> Request<tonic::Streaming<T>> {
        struct Nothing<T>(std::marker::PhantomData<T>);
        impl<T: Send + 'static> tonic::codec::Decoder for Nothing<T> {
            type Item = T;
            type Error = Status;
            fn decode(&mut self, _: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<T>, Status> {
                Ok(None)
            }
        }
        let nothing = tonic::Streaming::new_request(
            Nothing(std::marker::PhantomData),
            tonic::body::Body::default(),
            None,
            None,
        );
        let mut r = Request::new(nothing);
        if let Some(p) = peer {
            r.extensions_mut()
                .insert(glovebox_proto::transport::Peer(p.into(), 0));
        }
        r
    }

    #[test]
    fn audit_rows_take_their_source_from_the_connection_and_kinds_are_per_principal() {
        let outcome = |row: AuditEvent, outcome: &str| AuditEvent {
            outcome: outcome.into(),
            ..row
        };
        let row = |kind: &str, account: &str, source: &str| AuditEvent {
            kind: kind.into(),
            account: account.into(),
            source: source.into(),
            outcome: "ok".into(),
            ..Default::default()
        };
        // An executor writes its own execute rows; the source claimed in the row is ignored.
        let mut e = row("execute", "", "gate");
        e.subject = "free text the executor chose".into();
        e.subjects = vec![pb::Subject {
            domain: pb::Domain::Exec as i32,
            path: "curl -H 'Authorization: Bearer sk-live-0123456789abcdef0123' x".into(),
            state: None,
        }];
        admit_audit_event("executor:alice", &mut e).unwrap();
        assert_eq!(
            (e.source.as_str(), e.account.as_str()),
            ("executor", "alice")
        );
        assert!(e.subject.starts_with("exec curl"), "{}", e.subject);
        assert!(
            !e.subject.contains("sk-live-0123456789abcdef0123"),
            "{}",
            e.subject
        );
        assert!(e.subjects.is_empty());
        for (peer, mut event) in [
            ("executor:alice", row("execute", "bob", "executor")),
            ("executor:alice", row("decide", "alice", "gate")),
            ("executor:alice", row("resolve", "alice", "gate")),
            ("executor:alice", row("service", "", "supervisor")),
            ("executor:alice", row("job", "bob", "executor")),
            ("packs:alice", row("execute", "bob", "packs")),
            ("packs:alice", row("decide", "alice", "gate")),
            ("packs:alice", row("job", "alice", "packs")),
            ("broker", row("job", "alice", "executor")),
            ("broker", row("decide", "alice", "gate")),
            ("broker", row("execute", "alice", "executor")),
            ("supervisor", row("result", "alice", "broker")),
            ("admin", row("service", "", "supervisor")),
            ("mallory", row("result", "alice", "broker")),
            // A kind is one of the audit's, spelled exactly.
            ("executor:alice", row("Execute", "alice", "executor")),
            ("executor:alice", row("execute ", "alice", "executor")),
            ("broker", row("", "alice", "broker")),
            ("broker", row("result\u{0}", "alice", "broker")),
            // So is an outcome.
            ("broker", outcome(row("result", "alice", "broker"), "")),
            ("broker", outcome(row("result", "alice", "broker"), "OK")),
            ("broker", outcome(row("result", "alice", "broker"), "ok ")),
            (
                "executor:alice",
                outcome(row("execute", "alice", "executor"), "probe"),
            ),
            (
                "supervisor",
                outcome(row("service", "", "supervisor"), "allow"),
            ),
        ] {
            assert!(
                admit_audit_event(peer, &mut event).is_err(),
                "{peer} wrote {event:?}"
            );
        }
        let mut j = row("job", "", "gate");
        admit_audit_event("executor:alice", &mut j).unwrap();
        assert_eq!(
            (j.source.as_str(), j.account.as_str()),
            ("executor", "alice")
        );
        let mut p = row("execute", "", "executor");
        admit_audit_event("packs:alice", &mut p).unwrap();
        assert_eq!((p.source.as_str(), p.account.as_str()), ("packs", "alice"));
        let mut r = row("result", "alice", "gate");
        admit_audit_event("broker", &mut r).unwrap();
        assert_eq!(r.source, "broker");
        let mut s = row("service", "", "gate");
        admit_audit_event("supervisor", &mut s).unwrap();
        assert_eq!(s.source, "supervisor");
    }

    /// The Audit service with alice's executor admitted.
    fn alices_audit(s: &Setup) -> AuditService {
        let keys = glovebox_proto::transport::handover::ControlKeys::from_bytes(&[2; 32]).unwrap();
        s.gate
            .0
            .set_audit_peers(&keys.audit_peers(["alice"], Vec::new()));
        AuditService(s.gate.0.clone())
    }

    /// The execute and result rows of alice's `file_read` call `call`.
    fn call_rows(call: &str, ticket: pb::Ticket) -> pb::CallRows {
        let row = |kind: &str| AuditEvent {
            call_id: call.into(),
            client_call_id: format!("client-{call}"),
            account: "alice".into(),
            kind: kind.into(),
            tool: "file_read".into(),
            outcome: "ok".into(),
            ..Default::default()
        };
        pb::CallRows {
            execute: Some(row("execute")),
            result: Some(row("result")),
            ticket: Some(ticket),
        }
    }

    #[tokio::test]
    async fn a_call_allowed_before_the_gate_restarted_gets_its_decide_row_back() {
        let s = setup().await;
        alices_audit(&s);
        let path = format!("{}/a.txt", s.workdir);
        let subjects = vec![Subject {
            domain: pb::Domain::Read as i32,
            path: path.clone(),
            state: None,
        }];
        let opened = s.gate.0.audit.opened_ms();
        // A ticket as an earlier run of the gate signed it (a second before this one opened).
        let earlier = |call: &str, approval: &str| {
            s.master.account_key("alice").sign(&TicketBody {
                account: "alice".into(),
                call_id: call.into(),
                tool: "file_read".into(),
                subjects: subjects.clone(),
                expires_at_ms: opened - 1000 + TICKET_TTL_MS,
                approval: approval.into(),
                ..Default::default()
            })
        };
        let append_call = |call: &str, ticket: pb::Ticket| send_rows(&s, call_rows(call, ticket));
        let reader = crate::audit::query::AuditReader::open(&s.gate.0.state_dir.audit_db())
            .await
            .unwrap();
        let kinds = |call: &'static str| {
            let reader = reader.clone();
            async move {
                reader
                    .call_events("alice", call)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|r| {
                        let e = r.event.unwrap();
                        (e.kind, e.detail.contains("restored"))
                    })
                    .collect::<Vec<_>>()
            }
        };
        let restored = [
            ("decide".to_owned(), true),
            ("execute".to_owned(), false),
            ("result".to_owned(), false),
        ];
        let kept = restored.clone().map(|(k, _)| (k, false));

        // Allowed by the earlier run, which died before writing the decide row: restored,
        // first, with the subjects the ticket names.
        append_call("lost", earlier("lost", "auto")).await.unwrap();
        assert_eq!(kinds("lost").await, restored);
        let row = reader.call_events("alice", "lost").await.unwrap()[0]
            .event
            .clone()
            .unwrap();
        assert_eq!(
            (
                row.source.as_str(),
                row.verdict.as_str(),
                row.client_call_id.as_str()
            ),
            ("gate", "allow", "client-lost")
        );
        assert!(row.subject.contains(&path), "{}", row.subject);
        // Its row was written before it died: not written twice.
        s.gate
            .0
            .audit
            .append(AuditEvent {
                call_id: "kept".into(),
                account: "alice".into(),
                source: "gate".into(),
                kind: "decide".into(),
                tool: "file_read".into(),
                ..Default::default()
            })
            .await;
        append_call("kept", earlier("kept", "auto")).await.unwrap();
        assert_eq!(kinds("kept").await, kept);
        // Decided by this run: its row is queued before the ticket is handed out, never
        // restored, and committed by the time the call's rows are acknowledged.
        let r = decide(&s, "alice", &path).await;
        assert_eq!(r.verdict, pb::Verdict::Allow as i32);
        append_call("c1", r.ticket.unwrap()).await.unwrap();
        assert_eq!(kinds("c1").await, kept);
        // An approved call's rows were awaited by the earlier run: nothing to restore.
        append_call("asked", earlier("asked", "approved_once"))
            .await
            .unwrap();
        assert_eq!(kinds("asked").await, kept[1..]);
    }

    #[tokio::test]
    async fn a_pack_host_has_only_its_pack_calls_with_no_paths_judged_and_commits_their_rows() {
        use pb::executor_gate_answer::Body;
        let s = setup().await;
        let keys = glovebox_proto::transport::handover::ControlKeys::from_bytes(&[2; 32]).unwrap();
        s.gate
            .0
            .set_audit_peers(&keys.audit_peers(["alice", "bob"], Vec::new()));
        let now = glovebox_ticket::now_ms().unwrap();
        let echo = |call_id: &str| ToolCall {
            account: "alice".into(),
            call_id: call_id.into(),
            tool: "e__echo".into(),
            params_json: r#"{"message":"hi"}"#.into(),
            client_call_id: format!("client-{call_id}"),
        };
        let facts = pb::PackFacts {
            read_only: true,
            origin: "user".into(),
        };
        let tool_alone = glovebox_proto::packs::plan_of("e__echo", facts.clone(), Vec::new());
        // `peer` has `call` judged on a fresh voucher, with `plan` and, when `ahead`, rows made
        // ahead of the verdict.
        let ask = async |peer: &str, call: ToolCall, plan: Plan, ahead: bool| {
            let voucher = broker_vouchers().vouch(&call, now);
            let done_ahead = ahead.then(|| call_rows(&call.call_id, pb::Ticket::default()));
            let asked = pb::executor_gate_call::Body::Decide(pb::VouchedDecideRequest {
                call: Some(call),
                plan: Some(plan),
                voucher: Some(voucher),
                done_ahead,
                deliver: None,
            });
            verdict(from_executor(&s, peer, asked).await)
        };
        // Alice's pack host has her pack call judged: an allow, with a ticket under her pack key
        // that binds the parameters.
        let judged = ask("packs:alice", echo("p1"), tool_alone.clone(), false)
            .await
            .unwrap();
        assert_eq!(judged.verdict, pb::Verdict::Allow as i32, "{judged:?}");
        let ticket = judged.ticket.unwrap();
        let body = s
            .master
            .packs_key("alice")
            .verify(
                &ticket,
                &glovebox_ticket::Expected {
                    account: "alice",
                    call_id: "p1",
                    tool: "e__echo",
                    now_ms: now,
                },
            )
            .unwrap();
        assert_eq!(body.pack, Some(facts.clone()));
        assert_eq!(
            body.content_tag,
            glovebox_proto::packs::params_digest(r#"{"message":"hi"}"#)
        );
        // The call's rows, from the pack host, with the ticket: the decide row (queued, not
        // awaited, when the call was allowed) comes first, in the same commit.
        let row = |kind: &str| AuditEvent {
            call_id: "p1".into(),
            account: "alice".into(),
            kind: kind.into(),
            tool: "e__echo".into(),
            outcome: "ok".into(),
            ..Default::default()
        };
        let rows = pb::CallRows {
            execute: Some(row("execute")),
            result: Some(row("result")),
            ticket: Some(ticket),
        };
        let sent = from_executor(
            &s,
            "packs:alice",
            pb::executor_gate_call::Body::AppendCall(rows),
        );
        assert!(matches!(sent.await, Body::Appended(_)));
        let reader = crate::audit::query::AuditReader::open(&s.gate.0.state_dir.audit_db())
            .await
            .unwrap();
        let written: Vec<(String, String)> = reader
            .call_events("alice", "p1")
            .await
            .unwrap()
            .into_iter()
            .map(|r| {
                let e = r.event.unwrap();
                (e.kind, e.source)
            })
            .collect();
        let expected = [
            ("decide", "gate"),
            ("execute", "packs"),
            ("result", "packs"),
        ];
        assert_eq!(written, expected.map(|(k, s)| (k.to_owned(), s.to_owned())));
        // A pack call allowed by an earlier run of the gate that died before committing its
        // decide row gets it back from the ticket, as a built-in call does.
        let earlier = s.master.packs_key("alice").sign(&TicketBody {
            account: "alice".into(),
            call_id: "lost".into(),
            tool: "e__echo".into(),
            subjects: tool_alone.subjects.clone(),
            expires_at_ms: s.gate.0.audit.opened_ms() - 1000 + TICKET_TTL_MS,
            approval: "auto".into(),
            pack: Some(facts.clone()),
            ..Default::default()
        });
        let lost = |kind: &str| AuditEvent {
            call_id: "lost".into(),
            ..row(kind)
        };
        let rows = pb::CallRows {
            execute: Some(lost("execute")),
            result: Some(lost("result")),
            ticket: Some(earlier),
        };
        let sent = from_executor(
            &s,
            "packs:alice",
            pb::executor_gate_call::Body::AppendCall(rows),
        );
        assert!(matches!(sent.await, Body::Appended(_)));
        let restored = reader.call_events("alice", "lost").await.unwrap();
        let first = restored[0].event.clone().unwrap();
        assert_eq!(restored.len(), 3);
        assert_eq!(
            (first.kind.as_str(), first.verdict.as_str()),
            ("decide", "allow")
        );
        assert!(
            first.detail.starts_with("restored from"),
            "{}",
            first.detail
        );

        // Refused: a plan with a path in it (the executor resolves paths, never a pack host), a
        // plan without the tool's facts or naming another tool, rows made ahead, and a call of
        // another account or kind.
        let refused = |r: Result<DecideResponse, Status>| {
            let e = r.unwrap_err();
            assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
            e.message().to_owned()
        };
        let path = Subject {
            domain: pb::Domain::Read as i32,
            path: format!("{}/a.txt", s.workdir),
            state: None,
        };
        let with_path = glovebox_proto::packs::plan_of("e__echo", facts.clone(), vec![path]);
        let why = refused(ask("packs:alice", echo("p2"), with_path, false).await);
        assert!(why.contains("naming its tool alone"), "{why}");
        let mut no_facts = tool_alone.clone();
        no_facts.pack = None;
        refused(ask("packs:alice", echo("p3"), no_facts, false).await);
        let other_tool = glovebox_proto::packs::plan_of("e__other", facts.clone(), Vec::new());
        refused(ask("packs:alice", echo("p4"), other_tool, false).await);
        refused(ask("packs:alice", echo("p5"), tool_alone.clone(), true).await);
        let why = refused(ask("packs:bob", echo("p6"), tool_alone.clone(), false).await);
        assert!(why.contains("may not"), "{why}");
        let why = refused(ask("executor:alice", echo("p7"), tool_alone.clone(), false).await);
        assert!(why.contains("built-in"), "{why}");
        let mut read = echo("p8");
        read.tool = "file_read".into();
        let why = refused(ask("packs:alice", read, read_plan(&s.workdir), false).await);
        assert!(
            why.contains("naming its tool alone") || why.contains("pack tools"),
            "{why}"
        );
        // Nothing refused was judged: no decide row for any of them.
        for call in ["p2", "p3", "p4", "p5", "p6", "p7", "p8"] {
            assert!(
                !s.gate
                    .0
                    .audit
                    .has_row("alice", call, "decide")
                    .await
                    .unwrap()
            );
        }
    }

    #[tokio::test]
    async fn rows_the_store_cannot_write_are_not_acknowledged() {
        use glovebox_proto::v1::audit_server::Audit;
        let s = setup().await;
        let audit = alices_audit(&s);
        let path = format!("{}/a.txt", s.workdir);
        let r = decide(&s, "alice", &path).await;
        assert_eq!(r.verdict, pb::Verdict::Allow as i32);
        let ticket = r.ticket.unwrap();
        let one_row = || {
            let mut r = Request::new(AuditEvent {
                call_id: "c2".into(),
                account: "alice".into(),
                kind: "result".into(),
                outcome: "ok".into(),
                ..Default::default()
            });
            r.extensions_mut()
                .insert(glovebox_proto::transport::Peer("broker".into(), 0));
            r
        };
        // The disk refuses every insert (as a full one would).
        let pool = sqlx::sqlite::SqlitePool::connect(&format!(
            "sqlite://{}",
            s.gate.0.state_dir.audit_db().display()
        ))
        .await
        .unwrap();
        sqlx::query(
            "CREATE TRIGGER events_fail BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'disk full'); END",
        )
        .execute(&pool)
        .await
        .unwrap();
        let e = send_rows(&s, call_rows("c1", ticket.clone()))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Internal, "{e:?}");
        let e = audit.append(one_row()).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Internal, "{e:?}");
        assert!(!s.gate.0.audit.health().healthy);
        // Once the disk takes rows again, so does the gate.
        sqlx::query("DROP TRIGGER events_fail")
            .execute(&pool)
            .await
            .unwrap();
        send_rows(&s, call_rows("c1", ticket.clone()))
            .await
            .unwrap();
        audit.append(one_row()).await.unwrap();
    }

    #[tokio::test]
    async fn only_the_broker_may_decide() {
        let s = setup().await;
        // No one else opens the stream of decisions.
        for peer in [
            None,
            Some("supervisor"),
            Some("admin"),
            Some("executor:alice"),
        ] {
            let e = s
                .gate
                .decisions(opening(peer))
                .await
                .expect_err("opened the stream of decisions");
            let refused = match peer {
                None => tonic::Code::Unauthenticated,
                Some(_) => tonic::Code::PermissionDenied,
            };
            assert_eq!(e.code(), refused, "{peer:?}: {e:?}");
        }
        // The broker does.
        assert!(s.gate.decisions(opening(Some(BROKER))).await.is_ok());
    }

    /// The voucher key of the test setup's broker.
    fn broker_vouchers() -> glovebox_ticket::voucher::VoucherKey {
        glovebox_ticket::voucher::VoucherKey::from_bytes(&[5u8; 32]).unwrap()
    }

    /// The plan of reading `a.txt` in `workdir`.
    fn read_plan(workdir: &str) -> Plan {
        Plan {
            subjects: vec![Subject {
                domain: pb::Domain::Read as i32,
                path: format!("{workdir}/a.txt"),
                state: None,
            }],
            content_tag: Vec::new(),
            pack: None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_executors_stream_is_judged_message_by_message_and_ends_when_the_gate_stops() {
        use glovebox_proto::transport::{self, SocketKey, link::Channel};
        use glovebox_proto::v1::executor_gate_answer::Body as Answer;
        use glovebox_proto::v1::executor_gate_call::Body as Asked;
        use glovebox_proto::v1::executor_gate_server::ExecutorGateServer;
        let s = setup().await;
        let keys = glovebox_proto::transport::handover::ControlKeys::from_bytes(&[2; 32]).unwrap();
        s.gate
            .0
            .set_audit_peers(&keys.audit_peers(["alice"], Vec::new()));
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let service = ExecutorGateService::new(s.gate.0.clone(), stopping);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.sock");
        let listener = transport::bind_private_socket(&path).unwrap();
        let key = |peer: &str| SocketKey::derive(b"test control key", "audit", peer);
        let served = transport::ServerKeys::new(
            ["executor:alice", "packs:alice"].map(|p| (p.to_owned(), key(p))),
        );
        let incoming =
            transport::authenticated_incoming(listener, transport::default_allowed_uids(), served);
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(ExecutorGateServer::new(service))
                .serve_with_incoming(incoming),
        );
        let open = |peer: &str| {
            let channel = Channel::new(path.clone(), peer.to_owned(), key(peer));
            async move { channel.open_duplex("/glovebox.v1.ExecutorGate/Calls").await }
        };
        // A pack host opens one too (who else may not: see the test of vouched calls).
        assert!(open("packs:alice").await.is_ok());
        let (mut tx, mut rx) = open("executor:alice").await.unwrap();
        let now = glovebox_ticket::now_ms().unwrap();
        let read = ToolCall {
            account: "alice".into(),
            call_id: "streamed".into(),
            tool: "file_read".into(),
            params_json: r#"{"path":"a.txt"}"#.into(),
            client_call_id: "r1".into(),
        };
        let asked = |id: u64| pb::ExecutorGateCall {
            id,
            body: Some(Asked::Decide(pb::VouchedDecideRequest {
                call: Some(read.clone()),
                plan: Some(read_plan(&s.workdir)),
                voucher: Some(broker_vouchers().vouch(&read, now)),
                done_ahead: None,
                deliver: None,
            })),
            ..Default::default()
        };
        // Judged: an allow with its ticket, then the same voucher refused.
        tx.send(&asked(7)).unwrap();
        let first: pb::ExecutorGateAnswer = rx.next().await.unwrap().unwrap();
        assert_eq!(first.id, 7);
        let Some(Answer::Decided(d)) = first.body else {
            panic!("{first:?}")
        };
        assert_eq!(d.verdict, pb::Verdict::Allow as i32, "{d:?}");
        assert!(d.ticket.is_some());
        tx.send(&asked(8)).unwrap();
        let again: pb::ExecutorGateAnswer = rx.next().await.unwrap().unwrap();
        assert_eq!(again.id, 8);
        let Some(Answer::Error(e)) = again.body else {
            panic!("{again:?}")
        };
        assert_eq!(e.code, tonic::Code::PermissionDenied as i32);
        assert!(e.message.contains("already used"), "{}", e.message);
        // The account no longer served: each later message is refused.
        s.gate.0.set_audit_peers(&keys.audit_peers([], Vec::new()));
        tx.send(&asked(9)).unwrap();
        let gone: pb::ExecutorGateAnswer = rx.next().await.unwrap().unwrap();
        assert!(
            matches!(&gone.body, Some(Answer::Error(e)) if e.message.contains("no longer served")),
            "{gone:?}"
        );
        // The gate stops: the stream ends, with nothing left unanswered.
        stop.send(true).unwrap();
        let end = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            rx.next::<pb::ExecutorGateAnswer>(),
        )
        .await
        .expect("the stream ended when the gate stopped");
        assert_eq!(end.unwrap(), None);
        server.abort();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_brokers_decisions_stream_decides_and_audits_and_ends_when_the_gate_stops() {
        use glovebox_proto::transport::{self, SocketKey, link::Channel};
        use glovebox_proto::v1::decide_answer::Body as Answer;
        use glovebox_proto::v1::gate_server::GateServer;
        let s = setup().await;
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let service = GateService(s.gate.0.clone(), stopping);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gate.sock");
        let listener = transport::bind_private_socket(&path).unwrap();
        let key = |peer: &str| SocketKey::derive(b"test control key", "gate", peer);
        let served =
            transport::ServerKeys::new([BROKER, SUPERVISOR].map(|p| (p.to_owned(), key(p))));
        let incoming =
            transport::authenticated_incoming(listener, transport::default_allowed_uids(), served);
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(GateServer::new(service))
                .serve_with_incoming(incoming),
        );
        let open = |peer: &str| {
            let channel = Channel::new(path.clone(), peer.to_owned(), key(peer));
            async move { channel.open_duplex("/glovebox.v1.Gate/Decisions").await }
        };
        // Only the broker opens one.
        let e = open(SUPERVISOR)
            .await
            .err()
            .expect("the supervisor opened it");
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
        let (mut tx, mut rx) = open(BROKER).await.unwrap();
        let call = |tool: &str, id: &str| ToolCall {
            account: "alice".into(),
            call_id: id.into(),
            tool: tool.into(),
            params_json: r#"{"path":"a.txt"}"#.into(),
            client_call_id: String::new(),
        };
        let asked = |id: u64, call: ToolCall, plan: Option<Plan>| pb::DecideCall {
            id,
            decide: Some(DecideRequest {
                call: Some(call),
                plan,
            }),
            ..Default::default()
        };
        // Answered with verdicts: an allow with its ticket, a deny without one; a request without
        // its plan is refused.
        let read = read_plan(&s.workdir);
        tx.send(&asked(1, call("file_read", "d1"), Some(read.clone())))
            .unwrap();
        let mut write = read.clone();
        write.subjects[0].domain = pb::Domain::Write as i32;
        tx.send(&asked(2, call("file_write", "d2"), Some(write)))
            .unwrap();
        tx.send(&asked(3, call("file_read", "d3"), None)).unwrap();
        let mut answers = std::collections::BTreeMap::new();
        for _ in 0..3 {
            let a: pb::DecideAnswer = rx.next().await.unwrap().unwrap();
            answers.insert(a.id, a.body.unwrap());
        }
        let Answer::Decided(allowed) = &answers[&1] else {
            panic!("{answers:?}")
        };
        assert_eq!(allowed.verdict, pb::Verdict::Allow as i32, "{allowed:?}");
        assert!(allowed.ticket.is_some());
        let Answer::Decided(other) = &answers[&2] else {
            panic!("{answers:?}")
        };
        assert_ne!(other.verdict, pb::Verdict::Allow as i32, "{other:?}");
        assert!(other.ticket.is_none());
        let Answer::Error(e) = &answers[&3] else {
            panic!("{answers:?}")
        };
        assert_eq!(e.code, tonic::Code::InvalidArgument as i32, "{e:?}");
        // Audited: the allowed call's decide row is written.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !s
            .gate
            .0
            .audit
            .has_row("alice", "d1", "decide")
            .await
            .unwrap()
        {
            assert!(std::time::Instant::now() < deadline, "no decide row");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        // The gate stops: the stream ends.
        stop.send(true).unwrap();
        let end = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            rx.next::<pb::DecideAnswer>(),
        )
        .await
        .expect("the stream ended when the gate stopped");
        assert_eq!(end.unwrap(), None);
        server.abort();
    }

    #[tokio::test]
    async fn an_executor_has_only_calls_the_broker_vouched_for_judged_and_each_once() {
        use glovebox_proto::v1::executor_gate_server::ExecutorGate;
        let s = setup().await;
        // Alice's and bob's executors are admitted on the audit socket.
        let keys = glovebox_proto::transport::handover::ControlKeys::from_bytes(&[2; 32]).unwrap();
        s.gate
            .0
            .set_audit_peers(&keys.audit_peers(["alice", "bob"], Vec::new()));
        let service =
            ExecutorGateService::new(s.gate.0.clone(), tokio::sync::watch::channel(false).1);
        let now = glovebox_ticket::now_ms().unwrap();
        let call = |tool: &str| ToolCall {
            account: "alice".into(),
            call_id: format!("call-{tool}"),
            tool: tool.into(),
            params_json: r#"{"path":"a.txt"}"#.into(),
            client_call_id: "r1".into(),
        };
        let plan = read_plan(&s.workdir);
        // `peer` has `call` judged on `voucher`: a `decide` on its `Calls` stream.
        let ask = async |peer: &str, call: ToolCall, voucher: pb::Voucher| {
            let asked = pb::executor_gate_call::Body::Decide(pb::VouchedDecideRequest {
                call: Some(call),
                plan: Some(plan.clone()),
                voucher: Some(voucher),
                done_ahead: None,
                deliver: None,
            });
            verdict(from_executor(&s, peer, asked).await)
        };
        let read = call("file_read");
        let voucher = broker_vouchers().vouch(&read, now);
        let judged = ask("executor:alice", read.clone(), voucher.clone())
            .await
            .unwrap();
        assert_eq!(judged.verdict, pb::Verdict::Allow as i32, "{judged:?}");
        let body = s
            .master
            .account_key("alice")
            .verify(
                judged.ticket.as_ref().unwrap(),
                &glovebox_ticket::Expected {
                    account: "alice",
                    call_id: "call-file_read",
                    tool: "file_read",
                    now_ms: now,
                },
            )
            .unwrap();
        assert_eq!(body.approval, "auto");

        let refused = |r: Result<DecideResponse, Status>| {
            let e = r.unwrap_err();
            assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
            e.message().to_owned()
        };
        // Once only: the same voucher again.
        let why = refused(ask("executor:alice", read.clone(), voucher.clone()).await);
        assert!(why.contains("already used"), "{why}");
        // Another account's executor, the broker itself or a pack host, with a good voucher.
        for peer in ["executor:bob", "broker", "packs:alice", "supervisor"] {
            let fresh = call("file_count");
            let v = broker_vouchers().vouch(&fresh, now);
            refused(ask(peer, fresh, v).await);
        }
        // Nor do any but an account's executor or pack host open the stream those requests
        // come on.
        for peer in [None, Some("broker"), Some("supervisor")] {
            let e = service
                .calls(opening(peer))
                .await
                .expect_err("opened an executor's stream to the gate");
            let refused = match peer {
                None => tonic::Code::Unauthenticated,
                Some(_) => tonic::Code::PermissionDenied,
            };
            assert_eq!(e.code(), refused, "{peer:?}: {e:?}");
        }
        assert!(service.calls(opening(Some("executor:bob"))).await.is_ok());
        assert!(service.calls(opening(Some("packs:bob"))).await.is_ok());
        // A call changed after it was vouched for, a voucher of another key, an old one, one
        // from the future.
        let mut changed = call("file_count");
        let v = broker_vouchers().vouch(&changed, now);
        changed.params_json = r#"{"path":"b.txt"}"#.into();
        let why = refused(ask("executor:alice", changed, v).await);
        assert!(why.contains("signature"), "{why}");
        let other_key = glovebox_ticket::voucher::VoucherKey::from_bytes(&[6u8; 32]).unwrap();
        let c = call("file_list");
        refused(ask("executor:alice", c.clone(), other_key.vouch(&c, now)).await);
        let c = call("file_find");
        let old = now - glovebox_ticket::voucher::VOUCHER_TTL_MS;
        let why = refused(
            ask(
                "executor:alice",
                c.clone(),
                broker_vouchers().vouch(&c, old),
            )
            .await,
        );
        assert!(why.contains("expired"), "{why}");
        let c = call("file_grep");
        refused(
            ask(
                "executor:alice",
                c.clone(),
                broker_vouchers().vouch(&c, now + 60_000),
            )
            .await,
        );
        // Only built-in tools: a pack's or a client's tool takes the broker's road.
        for tool in ["files__read", "client__pick"] {
            let c = call(tool);
            let why = refused(
                ask(
                    "executor:alice",
                    c.clone(),
                    broker_vouchers().vouch(&c, now),
                )
                .await,
            );
            assert!(why.contains("built-in"), "{why}");
        }
        // A gate without the broker's key judges nothing for an executor.
        let keyless = Vouchers::default();
        let c = call("file_count");
        let why = keyless
            .admit("executor:alice", &c, &broker_vouchers().vouch(&c, now), now)
            .unwrap_err();
        assert!(why.contains("no broker key"), "{why}");
    }

    #[tokio::test]
    async fn rows_done_ahead_are_committed_with_an_automatic_allow_and_dropped_otherwise() {
        // Each call's outcome goes with its rows, for the broker's wait for that call.
        let s = setup().await;
        alices_audit(&s);
        // Alice may read and write in her workdir without being asked.
        std::fs::write(
            s.gate.0.state_dir.permissions_file("alice"),
            "paths:\n  read:\n    allow: ['./**']\n  write:\n    allow: ['./**']\n",
        )
        .unwrap();
        let now = glovebox_ticket::now_ms().unwrap();
        let plan = |domain: pb::Domain, path: &str| Plan {
            subjects: vec![Subject {
                domain: domain as i32,
                path: path.to_owned(),
                state: None,
            }],
            content_tag: Vec::new(),
            pack: None,
        };
        // Alice's executor asks about call `call` with the rows of call `rows_of` done ahead (a
        // `decide` on its `Calls` stream).
        let ask = |call: &str, tool: &str, plan: Plan, rows_of: &str| {
            let asked = ToolCall {
                account: "alice".into(),
                call_id: call.into(),
                tool: tool.into(),
                params_json: r#"{"path":"a.txt"}"#.into(),
                client_call_id: format!("client-{call}"),
            };
            let row = |kind: &str| AuditEvent {
                call_id: rows_of.into(),
                account: "alice".into(),
                kind: kind.into(),
                tool: tool.into(),
                outcome: "ok".into(),
                bytes: if kind == "execute" { 5 } else { 0 },
                ..Default::default()
            };
            let r = pb::executor_gate_call::Body::Decide(pb::VouchedDecideRequest {
                voucher: Some(broker_vouchers().vouch(&asked, now)),
                call: Some(asked),
                plan: Some(plan),
                done_ahead: Some(pb::CallRows {
                    execute: Some(row("execute")),
                    result: Some(row("result")),
                    ticket: None,
                }),
                deliver: Some(pb::ExecuteResponse {
                    result_json: format!("read for {call}"),
                    ..Default::default()
                }),
            });
            let s = &s;
            async move { verdict(from_executor(s, "executor:alice", r).await).unwrap() }
        };
        let allow = pb::Verdict::Allow as i32;
        let inside = format!("{}/a.txt", s.workdir);
        // The broker's stream of answers handed over (`Gate.Deliveries`).
        let (serial, mut handed) = s.gate.0.deliveries.open();

        // Allowed, but the plan writes: nothing is done ahead of a write's verdict.
        let r = ask(
            "writes",
            "file_write",
            plan(pb::Domain::Write, &inside),
            "writes",
        )
        .await;
        assert_eq!((r.verdict, r.rows_written), (allow, false), "{r:?}");
        // Nothing handed over: the executor answers.
        assert!(!r.delivered);
        // Allowed, with the rows of another call.
        let r = ask(
            "mine",
            "file_read",
            plan(pb::Domain::Read, &inside),
            "theirs",
        )
        .await;
        assert_eq!((r.verdict, r.rows_written), (allow, false), "{r:?}");
        assert!(!r.delivered);
        // Denied: the rows are dropped, and what was read with them.
        let r = ask(
            "denied",
            "file_read",
            plan(pb::Domain::Read, "/etc/shadow"),
            "denied",
        )
        .await;
        assert_eq!(
            (r.verdict, r.rows_written),
            (pb::Verdict::Deny as i32, false),
            "{r:?}"
        );
        assert!(!r.delivered);
        // Allowed without asking: committed with the decide row before the answer, and the
        // outcome handed to the broker, with the verdict but not its ticket. The broker's
        // stream (a task of its own, as on a connection) has it before the executor has its
        // answer: the client waits for the one, not the other.
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let reader = tokio::spawn({
            let order = Arc::clone(&order);
            async move {
                let first = tokio_stream::StreamExt::next(&mut handed).await;
                order.lock().unwrap().push("handed over");
                (first, handed)
            }
        });
        let r = ask("read", "file_read", plan(pb::Domain::Read, &inside), "read").await;
        order.lock().unwrap().push("answered");
        assert_eq!(
            (r.verdict, r.rows_written, r.delivered),
            (allow, true, true),
            "{r:?}"
        );
        // Handed over, neither answer carries the ticket.
        assert_eq!(r.ticket, None);
        let (first, mut handed) = reader.await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["handed over", "answered"]);
        let handed_over = first.unwrap().unwrap();
        assert_eq!(
            (handed_over.account.as_str(), handed_over.call_id.as_str()),
            ("alice", "read")
        );
        let executed = handed_over.executed.unwrap();
        assert_eq!(executed.result_json, "read for read");
        assert!(executed.result_audited);
        let decision = handed_over.decision.unwrap();
        assert_eq!((decision.verdict, decision.ticket), (allow, None));
        // Nothing else was handed over: not the calls refused, nor the one whose rows were not
        // written.
        s.gate.0.deliveries.close(serial);
        assert!(tokio_stream::StreamExt::next(&mut handed).await.is_none());
        // With no stream to the broker, nothing is: the executor answers.
        let r = ask(
            "unread",
            "file_read",
            plan(pb::Domain::Read, &inside),
            "unread",
        )
        .await;
        assert_eq!((r.rows_written, r.delivered), (true, false), "{r:?}");
        // Not handed over, the executor tells it on the ticket.
        assert!(r.ticket.is_some());

        let reader = crate::audit::query::AuditReader::open(&s.gate.0.state_dir.audit_db())
            .await
            .unwrap();
        let rows = |call: &'static str| {
            let reader = reader.clone();
            async move {
                reader
                    .call_events("alice", call)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|r| r.event.unwrap())
                    .map(|e| (e.kind, e.source, e.bytes))
                    .collect::<Vec<_>>()
            }
        };
        let decided = |source: &str| ("decide".to_owned(), source.to_owned(), 0);
        assert_eq!(
            rows("read").await,
            [
                decided("gate"),
                ("execute".to_owned(), "executor".to_owned(), 5),
                ("result".to_owned(), "executor".to_owned(), 0),
            ]
        );
        // The others' decide rows were written on their own (the rows of "theirs" refused before
        // the write): committed by now, and nothing else.
        for call in ["writes", "mine", "denied"] {
            assert_eq!(rows(call).await, [decided("gate")], "{call}");
        }
        assert_eq!(rows("theirs").await, []);
    }

    #[tokio::test]
    async fn a_removed_accounts_executor_and_pack_host_are_refused_at_once() {
        use glovebox_proto::v1::audit_server::Audit;
        use glovebox_proto::v1::pack_support_server::PackSupport;
        let s = setup().await;
        let keys = glovebox_proto::transport::handover::ControlKeys::from_bytes(&[2; 32]).unwrap();
        s.gate
            .0
            .set_audit_peers(&keys.audit_peers(["alice", "bob"], Vec::new()));
        let as_peer = |peer: &str| {
            let mut r = Request::new(AuditEvent {
                kind: "execute".into(),
                outcome: "ok".into(),
                ..Default::default()
            });
            r.extensions_mut()
                .insert(glovebox_proto::transport::Peer(peer.into(), 0));
            r
        };
        let audit = AuditService(s.gate.0.clone());
        audit.append(as_peer("executor:bob")).await.unwrap();
        let packs = PackSupportService(s.gate.0.clone());
        let follow = |peer: &str| {
            let mut r = Request::new(pb::PackConfigRequest::default());
            r.extensions_mut()
                .insert(glovebox_proto::transport::Peer(peer.into(), 0));
            r
        };
        let mut stream = packs
            .watch_config(follow("packs:bob"))
            .await
            .unwrap()
            .into_inner();
        use tokio_stream::StreamExt;
        assert!(stream.next().await.unwrap().is_ok(), "bob's mcp.json first");
        // bob removed from the table: his executor's connection, still open, gets nothing more,
        // his pack host's stream ends, and his calls are denied as an unknown account's.
        s.gate
            .0
            .policies
            .set_accounts(vec![crate::policies::AccountPaths::in_workdir(
                "alice", &s.workdir,
            )]);
        s.gate.0.packs.set_accounts(&["alice".parse().unwrap()]);
        let e = audit.append(as_peer("executor:bob")).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
        assert!(packs.watch_config(follow("packs:bob")).await.is_err());
        assert!(
            tokio::time::timeout(std::time::Duration::from_secs(5), stream.next())
                .await
                .unwrap()
                .is_none(),
            "the stream ended"
        );
        let r = decide(&s, "bob", &format!("{}/a.txt", s.workdir)).await;
        assert_eq!(
            (r.verdict, r.rule.as_str()),
            (pb::Verdict::Deny as i32, "account")
        );
        // alice is served while her key is granted, and refused once the supervisor drops it.
        audit.append(as_peer("executor:alice")).await.unwrap();
        s.gate.0.set_audit_peers(&keys.audit_peers([], Vec::new()));
        let e = audit.append(as_peer("executor:alice")).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
        // The broker is no account's service: unaffected.
        let mut r = as_peer("broker");
        r.get_mut().kind = "result".into();
        audit.append(r).await.unwrap();
    }

    #[tokio::test]
    async fn an_unknown_account_is_denied_without_a_ticket() {
        let s = setup().await;
        let path = format!("{}/a.txt", s.workdir);
        for account in ["mallory", "", "alice ", "ALICE"] {
            let r = decide(&s, account, &path).await;
            assert_eq!(r.verdict, pb::Verdict::Deny as i32, "{account:?}: {r:?}");
            assert_eq!(r.rule, "account", "{account:?}");
            assert!(r.ticket.is_none(), "{account:?}");
        }
    }

    fn expect(account: &str) -> glovebox_ticket::Expected<'_> {
        glovebox_ticket::Expected {
            account,
            call_id: "c1",
            tool: "file_read",
            now_ms: 0,
        }
    }

    #[tokio::test]
    async fn a_ticket_is_for_its_own_account_only() {
        let s = setup().await;
        let path = format!("{}/a.txt", s.workdir);
        let r = decide(&s, "alice", &path).await;
        assert_eq!(r.verdict, pb::Verdict::Allow as i32, "{r:?}");
        let ticket = r.ticket.unwrap();
        let alice = s.master.account_key("alice");
        let bob = s.master.account_key("bob");
        let body = alice.verify(&ticket, &expect("alice")).unwrap();
        assert_eq!(body.subjects[0].path, path);
        // Another account's key does not verify it (the master key cannot even try: it only
        // derives account keys), nor does it name bob.
        assert_eq!(
            bob.verify(&ticket, &expect("alice")),
            Err(glovebox_ticket::TicketError::BadSignature)
        );
        assert!(alice.verify(&ticket, &expect("bob")).is_err());
        // bob's own policy (no file: everything asks) does not allow the same read.
        let r = decide(&s, "bob", &path).await;
        assert_eq!(r.verdict, pb::Verdict::Ask as i32, "{r:?}");
        assert!(r.ticket.is_none());
    }
}
