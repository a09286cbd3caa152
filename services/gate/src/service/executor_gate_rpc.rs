//! The `ExecutorGate` service, on the audit socket: an executor's requests of every built-in call,
//! and a pack host's of the pack calls the broker hands it in one hop, as messages on one stream
//! (`Calls`), opened by an account's executor or pack host only, each request admitted again
//! while its account is served; the stream ends when the gate stops.
//!
//! A `decide` is the verdict on a call the executor (or pack host) was handed by the broker (on
//! `Executor.Runs`, `Packs.Runs`), judged exactly as the broker's `Gate.Decisions` are — only for
//! a call the broker vouched for, of that service's own account and kind (built-in or pack
//! tools), each voucher once; a pack host's plan names the tool alone (`pack_plan_fits`). Neither
//! can have the gate judge, sign or audit a call nobody made. The rows of a call that only reads,
//! made by the executor ahead of its verdict, come with the request and are committed before the
//! answer if the call is allowed without asking (`write_done_ahead`). An `append_call` is a
//! call's last rows, admitted with its ticket (`AuditService::append_call_rows`).

use glovebox_proto::transport::messages::{AnswerStream, MAX_IN_FLIGHT, answer_each, call_status};
use tracing::Instrument;

use super::prelude::*;

#[derive(Clone)]
pub struct ExecutorGateService {
    pub state: Arc<GateState>,
    /// Becomes true when the gate stops: each `Calls` stream then takes no more requests,
    /// answers those it took and ends.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

impl ExecutorGateService {
    pub fn new(state: Arc<GateState>, stopping: tokio::sync::watch::Receiver<bool>) -> Self {
        ExecutorGateService { state, stopping }
    }
}

/// A `decide` from `peer`, a message on its `Calls` stream.
#[tracing::instrument(skip_all, fields(call_id))]
async fn decide_vouched(
    state: &Arc<GateState>,
    peer: &str,
    request: pb::VouchedDecideRequest,
) -> Result<DecideResponse, Status> {
    let pb::VouchedDecideRequest {
        call,
        plan,
        voucher,
        done_ahead,
        deliver,
    } = request;
    let call = required(call, "call")?;
    let (plan, voucher) = (required(plan, "plan")?, required(voucher, "voucher")?);
    tracing::Span::current().record("call_id", call.call_id.as_str());
    let now_ms = glovebox_ticket::now_ms().unwrap_or(u64::MAX);
    let admitted = pack_plan_fits(
        peer,
        &call,
        &plan,
        done_ahead.is_some() || deliver.is_some(),
    )
    .and_then(|()| state.vouchers.admit(peer, &call, &voucher, now_ms));
    if let Err(why) = admitted {
        tracing::warn!(%peer, "refused to judge a call for an executor or pack host");
        return Err(Status::permission_denied(why));
    }
    let (mut decided, row) = state.decide_unwritten(&call, &plan).await;
    match done_ahead {
        Some(rows) => write_done_ahead(state, peer, &call, &plan, rows, &mut decided, row).await,
        None => state.write_decide_row(&call, &decided, row).await,
    }
    // What was read goes to the broker only once the call is allowed and its rows committed.
    if let Some(mut executed) = deliver.filter(|_| decided.rows_written) {
        executed.result_audited = true;
        // Handed over, the ticket is for nobody: the call was made with it already.
        let ticket = decided.ticket.take();
        decided.delivered = state.deliveries.hand_over(pb::Delivered {
            account: call.account.clone(),
            call_id: call.call_id.clone(),
            decision: Some(decided.clone()),
            executed: Some(executed),
        });
        if decided.delivered {
            // The call's answer is on the broker's stream, whose task was just woken; the
            // executor's answer, woken after it, would run first and write its own message
            // ahead of the one the client waits for. Stepping aside lets the broker's go first.
            tokio::task::yield_now().await;
        } else {
            decided.ticket = ticket;
        }
    }
    Ok(decided)
}

/// Why a pack host's plan of a call may not be judged (nothing for an executor's): a pack host
/// has only calls with no path arguments judged, whose plan names the tool alone, with the
/// tool's facts (a path is resolved by the executor, as the account's user, never by a pack
/// host), and makes nothing ahead of its verdict.
fn pack_plan_fits(peer: &str, call: &ToolCall, plan: &Plan, ahead: bool) -> Result<(), String> {
    if !peer.starts_with("packs:") {
        return Ok(());
    }
    let names_the_tool_alone = matches!(
        plan.subjects.as_slice(),
        [only] if only.domain == pb::Domain::Tool as i32 && only.path == call.tool
    );
    if !names_the_tool_alone || plan.pack.is_none() || ahead {
        return Err(format!(
            "{peer} may have judged only a plan naming its tool alone, with the tool's facts"
        ));
    }
    Ok(())
}

/// Commits the rows of a call the executor made ahead of its verdict (`done_ahead`) if the call
/// was allowed without asking and its plan only reads: admitted as an `append_call`'s rows are,
/// with the ticket just signed, after the decision's row `decide_row`, the three rows in
/// one commit before the answer. Otherwise they are dropped (the executor never tells what it
/// read), or, if the store cannot write them, left for the executor's `append_call`; the
/// decision's row is then written as any other's if the rows were refused before the write.
async fn write_done_ahead(
    state: &Arc<GateState>,
    peer: &str,
    call: &ToolCall,
    plan: &Plan,
    mut rows: pb::CallRows,
    decided: &mut DecideResponse,
    decide_row: AuditEvent,
) {
    let allowed = decided.verdict == pb::Verdict::Allow as i32;
    let only_reads = !plan.subjects.is_empty()
        && plan
            .subjects
            .iter()
            .all(|s| s.domain == pb::Domain::Read as i32);
    let Some(ticket) = decided.ticket.clone().filter(|_| allowed && only_reads) else {
        return state.write_decide_row(call, decided, decide_row).await;
    };
    rows.ticket = Some(ticket);
    let mut decide_row = Some(decide_row);
    match AuditService(Arc::clone(state))
        .append_call_rows_after(peer, rows, &mut decide_row)
        .await
    {
        Ok(_) => decided.rows_written = true,
        Err(status) => {
            tracing::warn!(error = %status.message(), "the rows of a call made ahead of its verdict were not written");
            // Refused before the write: the decision's row is written on its own. A write that
            // failed took it down with the call's rows, one commit, as a row queued before
            // them would have gone in their commit.
            if let Some(row) = decide_row {
                state.write_decide_row(call, decided, row).await;
            }
        }
    }
}

/// The answer to one request on a `Calls` stream from `peer`, the peer's standing checked again
/// for each (its account may have been removed meanwhile).
pub(super) async fn answer_call(
    state: &Arc<GateState>,
    peer: &str,
    call: pb::ExecutorGateCall,
) -> pb::ExecutorGateAnswer {
    use pb::executor_gate_answer::Body as Answer;
    use pb::executor_gate_call::Body as Asked;
    let (service, method) = match &call.body {
        Some(Asked::AppendCall(_)) => ("glovebox.v1.Audit", "AppendCall"),
        _ => ("glovebox.v1.ExecutorGate", "Decide"),
    };
    let span = glovebox_telemetry::propagation::message_server_span(service, method, &call.trace);
    let answered = async {
        if !state.account_peer_current(peer) {
            return Err(Status::permission_denied(format!(
                "{peer} is no longer served"
            )));
        }
        match call.body {
            Some(Asked::Decide(request)) => decide_vouched(state, peer, request)
                .await
                .map(Answer::Decided),
            Some(Asked::AppendCall(rows)) => AuditService(Arc::clone(state))
                .append_call_rows(peer, rows)
                .await
                .map(Answer::Appended),
            None => Err(Status::invalid_argument("a request with nothing in it")),
        }
    }
    .instrument(span)
    .await;
    pb::ExecutorGateAnswer {
        id: call.id,
        body: Some(answered.unwrap_or_else(|status| Answer::Error(call_status(&status)))),
    }
}

type CallsAnswers = AnswerStream<pb::ExecutorGateAnswer>;

#[tonic::async_trait]
impl pb::executor_gate_server::ExecutorGate for ExecutorGateService {
    type CallsStream = CallsAnswers;

    async fn calls(
        &self,
        request: Request<tonic::Streaming<pb::ExecutorGateCall>>,
    ) -> Result<Response<CallsAnswers>, Status> {
        let peer = served_peer(&self.state, &request)?;
        if !peer.starts_with("executor:") && !peer.starts_with("packs:") {
            return Err(Status::permission_denied(format!(
                "{peer} is not an executor or a pack host"
            )));
        }
        let state = Arc::clone(&self.state);
        Ok(Response::new(answer_each(
            request.into_inner(),
            self.stopping.clone(),
            MAX_IN_FLIGHT,
            move |call| {
                let (state, peer) = (Arc::clone(&state), peer.clone());
                async move { answer_call(&state, &peer, call).await }
            },
        )))
    }
}
