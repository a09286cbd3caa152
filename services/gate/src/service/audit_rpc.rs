//! The `Audit` service: rows from the broker, the supervisor, the executors and the pack hosts,
//! each admitted by who the connection proved to be (`admit_audit_event`); an account's executor
//! or pack host only while its account is served (`accounts::live`). Also the last two rows of a
//! call from the service that made it (a built-in call's from its executor, an `append_call` on
//! `ExecutorGate.Calls`; a pack call's from its pack host, `Audit.AppendCall`), admitted with the
//! ticket the call ran on (`admit_call_rows`; the call's decide row is restored from the ticket
//! if the gate died before writing it).

use super::prelude::*;
use glovebox_proto::audit_row::{RowKind, Source};

#[tonic::async_trait]
impl pb::audit_server::Audit for AuditService {
    async fn append(&self, request: Request<AuditEvent>) -> Result<Response<AppendAck>, Status> {
        let peer = served_peer(&self.0, &request)?;
        let mut event = request.into_inner();
        if let Err(why) = admit_audit_event(&peer, &mut event) {
            tracing::warn!(%peer, kind = %event.kind, "refused an audit row");
            return Err(Status::permission_denied(why.to_string()));
        }
        // A row that is not written is not acknowledged: the caller reports its call failed.
        if !self.0.audit.append(event).await {
            return Err(not_written());
        }
        Ok(Response::new(AppendAck {}))
    }

    /// A pack call's execute and result rows from its pack host, on the ticket it ran on.
    async fn append_call(
        &self,
        request: Request<pb::CallRows>,
    ) -> Result<Response<AppendAck>, Status> {
        let peer = served_peer(&self.0, &request)?;
        self.append_call_rows(&peer, request.into_inner())
            .await
            .map(Response::new)
    }
}

impl AuditService {
    /// An `append_call` from `peer`, a message on its `Calls` stream (`ExecutorGate.Calls`): the
    /// call's execute and result rows, chained and committed together.
    pub(crate) async fn append_call_rows(
        &self,
        peer: &str,
        rows: pb::CallRows,
    ) -> Result<AppendAck, Status> {
        self.append_call_rows_after(peer, rows, &mut None).await
    }

    /// [`Self::append_call_rows`], committed with `decide_row`, the row of the decision just made
    /// on the call, before them (none: the decision's row was written on its own, or by an
    /// earlier run of the gate, see [`Self::restore_decide_row`]). The row is taken once the
    /// call's rows are admitted; refused, they leave it to the caller.
    pub(crate) async fn append_call_rows_after(
        &self,
        peer: &str,
        rows: pb::CallRows,
        decide_row: &mut Option<AuditEvent>,
    ) -> Result<AppendAck, Status> {
        let (ticket, rows) = admit_call_rows(peer, rows, &self.0.master_key).map_err(|why| {
            tracing::warn!(%peer, "refused a call's rows");
            Status::permission_denied(why.to_string())
        })?;
        let mut rows = Vec::from(rows);
        let decide_row = match decide_row.take() {
            Some(row) => Some(row),
            None => self.restore_decide_row(&ticket, &rows[0]).await,
        };
        if let Some(decide) = decide_row {
            rows.insert(0, decide);
        }
        // One place in the writer's queue: the rows are chained and committed together, or
        // none is; then the call is not acknowledged (the executor reports it failed, saying it
        // ran) and the failure is counted and reported by Health.
        if !self.0.audit.append_all(rows).await {
            return Err(not_written());
        }
        Ok(AppendAck {})
    }

    /// The decide row of a call allowed by an earlier run of the gate, if that run died before
    /// committing it (an automatic allow's row is queued, not awaited: see `write_decide_row`). A
    /// call decided by this run needs none: its row was queued before the executor had the
    /// ticket. Restored from what the ticket says (the call's subjects and approval; the rule
    /// and reason died with the row) and marked as restored.
    async fn restore_decide_row(
        &self,
        ticket: &TicketBody,
        execute: &AuditEvent,
    ) -> Option<AuditEvent> {
        let issued_ms = ticket.expires_at_ms.saturating_sub(TICKET_TTL_MS);
        if ticket.approval != "auto" || issued_ms >= self.0.audit.opened_ms() {
            return None;
        }
        match self
            .0
            .audit
            .has_row(&ticket.account, &ticket.call_id, "decide")
            .await
        {
            Ok(true) => return None,
            Ok(false) => {}
            Err(e) => {
                // Written anyway: a second decide row is better than none.
                tracing::error!(error = %e, "could not look for a call's decide row");
            }
        }
        tracing::warn!(account = %ticket.account, "restored the decide row of a call allowed before the gate restarted");
        Some(restored_decide_row(ticket, execute))
    }
}

/// The answer to rows the store could not write. Not `unavailable`: the gate is there and the
/// rows are refused, so the caller does not retry them.
fn not_written() -> Status {
    Status::internal("the audit could not write the rows (see the gate's health)")
}

/// The decide row of an automatically allowed call, as its ticket and its execute row tell it.
pub(crate) fn restored_decide_row(ticket: &TicketBody, execute: &AuditEvent) -> AuditEvent {
    AuditEvent {
        call_id: ticket.call_id.clone(),
        client_call_id: execute.client_call_id.clone(),
        account: ticket.account.clone(),
        source: Source::Gate.into(),
        kind: RowKind::Decide.into(),
        tool: ticket.tool.clone(),
        subject: crate::redact::subjects_text(&ticket.subjects, true),
        verdict: Decision::Allow.as_str().into(),
        approval: ticket.approval.clone(),
        detail: "restored from the call's ticket: the gate stopped before writing this row".into(),
        ..Default::default()
    }
}

/// Admits the last two rows of a call from `peer`: only an account's executor (a built-in call)
/// or pack host (a pack call), for its own account, with a ticket the gate signed under that
/// peer's key (the account's executor key, or its pack key) for exactly that call and tool. The
/// execute row is admitted as [`admit_audit_event`] admits one; the result row's source is the
/// peer too (who wrote it), and it names no subject. Returns the rows in order, or why they are
/// refused.
pub(crate) fn admit_call_rows(
    peer: &str,
    rows: pb::CallRows,
    master: &MasterKey,
) -> Result<(TicketBody, [AuditEvent; 2]), RowRefused> {
    let (account, source) = match peer.split_once(':') {
        Some(("executor", account)) => (account, Source::Executor),
        Some(("packs", account)) => (account, Source::Packs),
        _ => return Err(RowRefused::NotACallRunner(peer.to_owned())),
    };
    let (Some(mut execute), Some(mut result), Some(ticket)) =
        (rows.execute, rows.result, rows.ticket)
    else {
        return Err(RowRefused::Incomplete);
    };
    admit_audit_event(peer, &mut execute)?;
    if execute.kind != RowKind::Execute.as_str() {
        return Err(RowRefused::OutOfPlace {
            which: "first",
            wanted: "execute row",
            kind: execute.kind,
        });
    }
    if result.kind != RowKind::Result.as_str() {
        return Err(RowRefused::OutOfPlace {
            which: "second",
            wanted: "result",
            kind: result.kind,
        });
    }
    known_outcome(&result)?;
    if result.account.is_empty() {
        result.account = account.to_owned();
    }
    if result.account != account || result.call_id != execute.call_id || result.tool != execute.tool
    {
        return Err(RowRefused::Mismatched);
    }
    let key = match source {
        Source::Packs => master.packs_key(account),
        _ => master.account_key(account),
    };
    let body = key
        .open(&ticket)
        .map_err(|e| RowRefused::Ticket(e.to_string()))?;
    if body.account != account || body.call_id != execute.call_id || body.tool != execute.tool {
        return Err(RowRefused::OtherCall);
    }
    result.source = source.into();
    result.subject.clear();
    result.subjects.clear();
    Ok((body, [execute, result]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use glovebox_proto::v1::{Subject, TicketBody};

    fn master() -> MasterKey {
        MasterKey::from_bytes(&[9u8; glovebox_ticket::KEY_BYTES]).unwrap()
    }

    fn ticket(
        key: &glovebox_ticket::AccountKey,
        account: &str,
        call: &str,
        tool: &str,
    ) -> pb::Ticket {
        key.sign(&TicketBody {
            account: account.into(),
            call_id: call.into(),
            tool: tool.into(),
            // long expired: the rows are written after the call ran
            expires_at_ms: 1,
            ..Default::default()
        })
    }

    fn row(kind: &str, account: &str, call: &str, tool: &str) -> AuditEvent {
        AuditEvent {
            call_id: call.into(),
            account: account.into(),
            source: "broker".into(),
            kind: kind.into(),
            tool: tool.into(),
            subject: "free text".into(),
            subjects: vec![Subject {
                domain: pb::Domain::Read as i32,
                path: "/w/a.txt".into(),
                state: None,
            }],
            outcome: "ok".into(),
            ..Default::default()
        }
    }

    fn rows(execute: AuditEvent, result: AuditEvent, ticket: pb::Ticket) -> pb::CallRows {
        pb::CallRows {
            execute: Some(execute),
            result: Some(result),
            ticket: Some(ticket),
        }
    }

    #[test]
    fn an_executor_writes_its_calls_rows_with_the_ticket() {
        let m = master();
        let t = ticket(&m.account_key("alice"), "alice", "c1", "file_read");
        let (_, [e, r]) = admit_call_rows(
            "executor:alice",
            rows(
                row("execute", "", "c1", "file_read"),
                row("result", "alice", "c1", "file_read"),
                t,
            ),
            &m,
        )
        .unwrap();
        assert_eq!(
            (e.kind.as_str(), e.source.as_str(), e.account.as_str()),
            ("execute", "executor", "alice")
        );
        // the gate renders the execute row's subject from the ticket's subjects
        assert_eq!(e.subject, "read /w/a.txt");
        assert_eq!(
            (r.kind.as_str(), r.source.as_str(), r.account.as_str()),
            ("result", "executor", "alice")
        );
        assert_eq!((r.subject.as_str(), r.subjects.len()), ("", 0));
        assert_eq!(r.outcome, "ok");
    }

    #[test]
    fn a_pack_host_writes_its_calls_rows_with_the_pack_ticket() {
        let m = master();
        let t = ticket(&m.packs_key("alice"), "alice", "c1", "fake__echo");
        let (_, [e, r]) = admit_call_rows(
            "packs:alice",
            rows(
                row("execute", "alice", "c1", "fake__echo"),
                row("result", "", "c1", "fake__echo"),
                t,
            ),
            &m,
        )
        .unwrap();
        assert_eq!((e.kind.as_str(), e.source.as_str()), ("execute", "packs"));
        assert_eq!(
            (r.kind.as_str(), r.source.as_str(), r.account.as_str()),
            ("result", "packs", "alice")
        );
        assert_eq!((r.subject.as_str(), r.subjects.len()), ("", 0));
    }

    #[test]
    fn a_calls_rows_are_refused_from_anyone_else_or_without_its_ticket() {
        let m = master();
        let alice = m.account_key("alice");
        let good = || ticket(&alice, "alice", "c1", "file_read");
        let pair = || {
            (
                row("execute", "alice", "c1", "file_read"),
                row("result", "alice", "c1", "file_read"),
            )
        };
        type Case = (&'static str, &'static str, pb::CallRows);
        let (e, r) = pair();
        let mut cases: Vec<Case> = vec![
            ("the broker", "broker", rows(e, r, good())),
            (
                "a pack host with an executor's ticket",
                "packs:alice",
                rows(pair().0, pair().1, good()),
            ),
            (
                "another account's pack host",
                "packs:bob",
                rows(
                    pair().0,
                    pair().1,
                    ticket(&m.packs_key("alice"), "alice", "c1", "file_read"),
                ),
            ),
            (
                "a pack host's ticket of another account",
                "packs:bob",
                rows(
                    row("execute", "bob", "c1", "file_read"),
                    row("result", "bob", "c1", "file_read"),
                    ticket(&m.packs_key("alice"), "bob", "c1", "file_read"),
                ),
            ),
            (
                "the supervisor",
                "supervisor",
                rows(pair().0, pair().1, good()),
            ),
            (
                "another account's executor",
                "executor:bob",
                rows(pair().0, pair().1, good()),
            ),
            (
                "a ticket of another account",
                "executor:bob",
                rows(
                    row("execute", "bob", "c1", "file_read"),
                    row("result", "bob", "c1", "file_read"),
                    ticket(&alice, "bob", "c1", "file_read"),
                ),
            ),
            (
                "a ticket for another call",
                "executor:alice",
                rows(
                    pair().0,
                    pair().1,
                    ticket(&alice, "alice", "c2", "file_read"),
                ),
            ),
            (
                "a ticket for another tool",
                "executor:alice",
                rows(
                    pair().0,
                    pair().1,
                    ticket(&alice, "alice", "c1", "file_write"),
                ),
            ),
            (
                "a pack host's ticket",
                "executor:alice",
                rows(
                    pair().0,
                    pair().1,
                    ticket(&m.packs_key("alice"), "alice", "c1", "file_read"),
                ),
            ),
            (
                "a job row in place of the execute row",
                "executor:alice",
                rows(row("job", "alice", "c1", "file_read"), pair().1, good()),
            ),
            (
                "a result for another call",
                "executor:alice",
                rows(pair().0, row("result", "alice", "c2", "file_read"), good()),
            ),
            (
                "a result of another account",
                "executor:alice",
                rows(pair().0, row("result", "bob", "c1", "file_read"), good()),
            ),
            (
                "a result whose outcome is not the audit's",
                "executor:alice",
                rows(
                    pair().0,
                    AuditEvent {
                        outcome: "fine".into(),
                        ..pair().1
                    },
                    good(),
                ),
            ),
            (
                "two execute rows",
                "executor:alice",
                rows(pair().0, pair().0, good()),
            ),
            (
                "a decide row first",
                "executor:alice",
                rows(row("decide", "alice", "c1", "file_read"), pair().1, good()),
            ),
            (
                "no ticket",
                "executor:alice",
                pb::CallRows {
                    ticket: None,
                    ..rows(pair().0, pair().1, good())
                },
            ),
            (
                "no result row",
                "executor:alice",
                pb::CallRows {
                    result: None,
                    ..rows(pair().0, pair().1, good())
                },
            ),
        ];
        let mut forged = good();
        forged.body[2] ^= 1;
        cases.push((
            "a forged ticket",
            "executor:alice",
            rows(pair().0, pair().1, forged),
        ));
        for (name, peer, call_rows) in cases {
            assert!(
                admit_call_rows(peer, call_rows, &m).is_err(),
                "{name} was admitted"
            );
        }
    }
}
