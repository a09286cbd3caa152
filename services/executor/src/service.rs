//! The executor's gRPC service: plan, preview, execute for one account.
//!
//! Plan and preview only look; execute acts, and only on a ticket that verifies under this
//! account's key and names this call. Each execute that acted sends the gate its execute row and
//! the call's result row together (an `append_call` on `ExecutorGate.Calls`, with the ticket),
//! and answers only once they are committed; a refused ticket sends its execute row alone
//! (`Audit.Append`). A run (a message on the broker's `Runs` stream) is plan, decide and execute
//! in one call from the broker: the executor asks the gate for the verdict itself (a `decide` on
//! `ExecutorGate.Calls`, with the broker's voucher for the call) and executes on the ticket of an
//! allow. A whole-file read of a small file and a listing of a small directory's names are
//! made before the verdict instead ([`ExecutorService::read_ahead`]): their rows go with the
//! decide request and are committed with the decide row, and what was read is told only on the
//! ticket of that allow — one round trip to the gate per call instead of two. A whole-file
//! read's outcome goes with them when the broker asks (`deliver_via_gate`), and the gate hands
//! it to the broker itself once committed: this executor then only answers that it did. The
//! broker may
//! call every method; an administrator only Plan (what `glovebox policy explain` judges).

use std::sync::Arc;
use std::time::Instant;

use glovebox_proto::ErrorCode;
use glovebox_proto::audit_row::{Outcome, RowKind, Source};
use glovebox_proto::tools::{Tool, ToolParams};
use glovebox_proto::transport::Link as Channel;
use glovebox_proto::transport::handover::peer::{ADMIN, BROKER};
use glovebox_proto::transport::messages::{Answer as _, AnswerStream, answer_each};
use glovebox_proto::transport::{require_peer, required};
use glovebox_proto::v1::{
    self as pb, AuditEvent, ExecuteRequest, ExecuteResponse, PlanPathsRequest, PlanRequest,
    PlanResponse, PreviewRequest, PreviewResponse, ToolCall, audit_client::AuditClient,
};
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::ExecutorConfig;
use crate::context::{Done, OpContext, denied_set};
use crate::error::OpError;
use crate::ops;

#[derive(Clone)]
pub struct ExecutorService {
    config: Arc<ExecutorConfig>,
    jobs: Arc<crate::jobs::JobTable>,
    audit: AuditClient<Channel>,
    /// The gate's verdicts on the calls the broker hands over on `Runs`, and each call's last
    /// rows.
    gate: glovebox_proto::transport::gate_calls::GateCalls,
    used: Arc<crate::spent::SpentTickets>,
    /// Becomes true when the executor stops: the broker's `Runs` stream then takes no more
    /// calls, answers those it took and ends.
    stopping: tokio::sync::watch::Receiver<bool>,
    /// Whether the workdir and every root are on local file systems, where quick file work (see
    /// [`is_quick`]) may run on the async thread.
    local: bool,
}

impl ExecutorService {
    /// The service for `config`'s account, reaching the gate's audit socket over `gate`.
    pub fn new(
        config: Arc<ExecutorConfig>,
        jobs: Arc<crate::jobs::JobTable>,
        gate: Channel,
        stopping: tokio::sync::watch::Receiver<bool>,
    ) -> ExecutorService {
        ExecutorService {
            jobs,
            audit: AuditClient::new(gate.clone()),
            gate: glovebox_proto::transport::gate_calls::GateCalls::new(gate),
            used: Arc::new(crate::spent::SpentTickets::new(crate::spent::MAX_SPENT)),
            stopping,
            local: std::iter::once(&config.workdir)
                .chain(&config.jobs.roots)
                .all(|p| glovebox_watch::on_local_file_system(p)),
            config,
        }
    }

    /// Resolves a call's paths into its plan.
    async fn plan_call(&self, call: &ToolCall) -> Result<pb::Plan, OpError> {
        self.plan_params(self.parse(call)?)
            .await
            .map(|(plan, _)| plan)
    }

    /// The plan of parsed parameters, and the parameters back for acting on.
    async fn plan_params(&self, params: ToolParams) -> Result<(pb::Plan, ToolParams), OpError> {
        self.file_work(is_quick(&params), move |ctx| {
            ops::plan(ctx, &params).map(|plan| (plan, params))
        })
        .await
    }

    /// The gate's verdict on a call the broker vouched for (with the rows of a read made ahead
    /// of it, if one was: [`Self::read_ahead`], and its outcome for the gate to hand to the
    /// broker, if the broker waits for it there).
    async fn decide(
        &self,
        call: &ToolCall,
        plan: pb::Plan,
        voucher: pb::Voucher,
        done_ahead: Option<pb::CallRows>,
        deliver: Option<ExecuteResponse>,
    ) -> Result<pb::DecideResponse, OpError> {
        let request = pb::VouchedDecideRequest {
            call: Some(call.clone()),
            plan: Some(plan),
            voucher: Some(voucher),
            done_ahead,
            deliver,
        };
        let verdict = self.gate.verdict(request).await;
        verdict.map_err(|(code, why)| OpError::new(code, why))
    }

    /// [`Self::execute_ticketed`] carried to its end even if its caller stops waiting (the broker
    /// cancelled the call, or lost its connection): a call that starts acting on its ticket
    /// always sends its rows, so nothing done on a ticket goes unaudited because the call was
    /// withdrawn at the wrong moment.
    async fn execute_to_the_end(
        &self,
        call: ToolCall,
        parsed: Option<ToolParams>,
        ticket: Option<pb::Ticket>,
        call_age_ms: u64,
        tables: bool,
    ) -> ExecuteResponse {
        let service = self.clone();
        let executing = async move {
            service
                .execute_ticketed(&call, parsed, ticket, call_age_ms, tables)
                .await
        };
        let traced = glovebox_telemetry::propagation::in_current_trace(executing);
        crate::shield::to_the_end(traced.in_current_span()).await
    }

    /// Acts on `ticket` if it is this call's and sends the gate the call's last rows (the
    /// execute row alone for a refused ticket); the call is reported done only once they are
    /// committed. `call_age_ms`: how long the call had run before this; `tables`: the call
    /// asked for its result's collection as a table.
    async fn execute_ticketed(
        &self,
        call: &ToolCall,
        parsed: Option<ToolParams>,
        ticket: Option<pb::Ticket>,
        call_age_ms: u64,
        tables: bool,
    ) -> ExecuteResponse {
        let started = Instant::now();
        let mut event = self.execute_row(call);
        let (outcome, ticketed) = match self.verify(call, ticket.as_ref()) {
            Err(e) => {
                event.outcome = Outcome::Refused.into();
                (Err(e), false)
            }
            Ok(body) => {
                // The gate renders (and redacts) the subjects of the row itself.
                event.subjects = body.subjects.clone();
                event.approval = body.approval.clone();
                (self.act(call, parsed, body, tables, &mut event).await, true)
            }
        };
        let mut response = answer(outcome, &mut event);
        event.duration_ms = started.elapsed().as_millis() as u64;
        // The call is reported done only once its rows are in the audit (waiting for a gate that
        // is restarting); otherwise it is reported failed, though what it did stays done. A call
        // that ran on its ticket sends its result row too, in the same commit.
        let durable = glovebox_proto::transport::AUDIT_DURABLE_LIMIT;
        let written = if ticketed {
            let age = call_age_ms.saturating_add(event.duration_ms);
            let rows = pb::CallRows {
                result: Some(result_row(call, &response, age)),
                execute: Some(event),
                ticket,
            };
            let each = glovebox_proto::transport::AUDIT_ATTEMPT_LIMIT;
            glovebox_proto::transport::durably(durable, || {
                self.gate.append_call(rows.clone(), each)
            })
            .await
        } else {
            glovebox_proto::transport::append_durably(&self.audit, event, durable).await
        };
        match written {
            Ok(()) => response.result_audited = ticketed,
            Err(status) => {
                tracing::error!(error = %status.message(), "could not send the audit event to the gate");
                response = ExecuteResponse {
                    result_json: String::new(),
                    error: Some(
                        OpError::new(
                            ErrorCode::Unavailable,
                            "the call ran, but its audit row could not be written; it is reported as failed",
                        )
                        .to_proto(),
                    ),
                    result_audited: false,
                    table: None,
                };
            }
        }
        response
    }

    /// The start of a call's execute row.
    fn execute_row(&self, call: &ToolCall) -> AuditEvent {
        AuditEvent {
            call_id: call.call_id.clone(),
            client_call_id: call.client_call_id.clone(),
            account: self.config.account.clone(),
            source: Source::Executor.into(),
            kind: RowKind::Execute.into(),
            tool: call.tool.clone(),
            ..Default::default()
        }
    }

    /// Makes a call that only reads before the gate's verdict, so that the verdict and the
    /// call's rows take one round trip to the gate instead of two: its outcome, held back, and
    /// its execute and result rows, sent with the decide request (`done_ahead`). Only a
    /// whole-file read or a listing of one directory's names and types ([`ops::ahead`], on
    /// local file systems: it runs here, on the async thread) of one existing path of at most
    /// [`AHEAD_MAX_BYTES`] that is not on the floor. It opens and checks exactly what the plan
    /// names, as acting on a ticket for that plan would (`open_approved_read`: the identity the
    /// plan saw, no link followed; for a read, a regular file with one name), and reading
    /// changes nothing. What it read is told only if the gate allows the call and commits its
    /// rows ([`Self::release_ahead`]); otherwise it is dropped. `started`: when the call came
    /// in, `call_age_ms`: its age then, `tables`: the call asked for its result's collection as
    /// a table.
    async fn read_ahead(
        &self,
        call: &ToolCall,
        params: &ToolParams,
        plan: &pb::Plan,
        started: Instant,
        call_age_ms: u64,
        tables: bool,
    ) -> Option<(Result<ops::Ahead, OpError>, pb::CallRows)> {
        if !(self.local && is_quick(params)) {
            return None;
        }
        let [subject] = plan.subjects.as_slice() else {
            return None;
        };
        let state = subject.state.as_ref()?;
        if subject.domain != pb::Domain::Read as i32
            || !state.exists
            || state.size > AHEAD_MAX_BYTES
            || glovebox_policy::floor::check(&subject.path, &self.config.protected).is_some()
        {
            return None;
        }
        let body = pb::TicketBody {
            account: call.account.clone(),
            call_id: call.call_id.clone(),
            tool: call.tool.clone(),
            subjects: plan.subjects.clone(),
            approval: "auto".into(),
            ..Default::default()
        };
        let reading = Instant::now();
        let held = {
            let params = params.clone();
            self.file_work(true, move |ctx| {
                let ctx = OpContext {
                    tables,
                    ..ctx.clone()
                };
                Ok(ops::ahead(&ctx, &params, &body))
            })
            .await
            .ok()??
        };
        let mut event = self.execute_row(call);
        event.subjects = plan.subjects.clone();
        event.approval = "auto".into();
        event.detail = ops::audit_detail(params);
        note_outcome(held.as_ref().map(ops::Ahead::bytes), &mut event);
        event.duration_ms = reading.elapsed().as_millis() as u64;
        let told = ExecuteResponse {
            error: held.as_ref().err().map(OpError::to_proto),
            ..Default::default()
        };
        let age = call_age_ms.saturating_add(started.elapsed().as_millis() as u64);
        let rows = pb::CallRows {
            result: Some(result_row(call, &told, age)),
            execute: Some(event),
            ticket: None,
        };
        Some((held, rows))
    }

    /// The held-back outcome of a call made ahead of its verdict, once the gate has allowed the
    /// call and committed its rows: only on a ticket that verifies for this call (spent now) and
    /// names exactly what was read, cut by what the ticket hides from listings.
    fn release_ahead(
        &self,
        call: &ToolCall,
        plan: &pb::Plan,
        ticket: Option<&pb::Ticket>,
        held: Result<ops::Ahead, OpError>,
    ) -> ExecuteResponse {
        let outcome = match self.verify(call, ticket) {
            Ok(body) if body.subjects == plan.subjects => {
                held.map(|ahead| ahead.finish(&denied_set(&body.hidden_globs)))
            }
            Ok(_) => Err(OpError::new(
                ErrorCode::Denied,
                "the ticket names other subjects than the plan the call was made for",
            )),
            Err(e) => Err(e),
        };
        told_ahead(outcome)
    }

    fn parse(&self, call: &ToolCall) -> Result<ToolParams, OpError> {
        if call.account != self.config.account {
            return Err(OpError::new(
                ErrorCode::Denied,
                "this executor serves another account",
            ));
        }
        let tool = Tool::from_name(&call.tool).ok_or_else(|| {
            OpError::new(
                ErrorCode::UnknownTool,
                format!("unknown tool {:?}", call.tool),
            )
        })?;
        tool.parse_params_text(&call.params_json)
            .map_err(|e| OpError::new(ErrorCode::InvalidParams, e.0))
    }

    /// The body of `ticket` if it verifies under this account's key for this call and was not
    /// spent before (it is spent now).
    fn verify(
        &self,
        call: &ToolCall,
        ticket: Option<&pb::Ticket>,
    ) -> Result<pb::TicketBody, OpError> {
        let Some(t) = ticket else {
            return Err(OpError::new(
                ErrorCode::Denied,
                "no ticket: the gate has not allowed this call",
            ));
        };
        let expected = glovebox_ticket::Expected {
            account: &self.config.account,
            call_id: &call.call_id,
            tool: &call.tool,
            now_ms: now_ms(),
        };
        let body = self
            .config
            .key
            .verify(t, &expected)
            .map_err(|e| OpError::new(ErrorCode::Denied, format!("ticket refused: {e}")))?;
        self.used.spend(&t.mac, body.expires_at_ms, now_ms())?;
        Ok(body)
    }

    /// Performs a verified call, hiding from listings and searches what its ticket says to.
    /// (`parsed`: the call's parameters if they were read already; `tables`: the call asked for
    /// its result's collection as a table.)
    async fn act(
        &self,
        call: &ToolCall,
        parsed: Option<ToolParams>,
        body: pb::TicketBody,
        tables: bool,
        event: &mut AuditEvent,
    ) -> Result<Done, OpError> {
        let params = match parsed {
            Some(params) => params,
            None => self.parse(call)?,
        };
        event.detail = ops::audit_detail(&params);
        self.file_work(is_quick(&params), move |ctx| {
            let denied = denied_set(&body.hidden_globs);
            let ctx = OpContext {
                denied: Some(&denied),
                tables,
                ..ctx.clone()
            };
            ops::execute(&ctx, &params, &body)
        })
        .await
    }

    /// Runs blocking file system work off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&OpContext<'_>) -> Result<T, OpError> + Send + 'static,
    ) -> Result<T, OpError> {
        self.file_work(false, work).await
    }

    /// Runs file system work: `quick` work (see [`is_quick`]) here, on the async thread, if the
    /// account's files are on local file systems; the rest on a blocking thread.
    async fn file_work<T: Send + 'static>(
        &self,
        quick: bool,
        work: impl FnOnce(&OpContext<'_>) -> Result<T, OpError> + Send + 'static,
    ) -> Result<T, OpError> {
        let config = self.config.clone();
        let jobs = self.jobs.clone();
        let run = move || {
            let ctx = OpContext {
                workdir: &config.workdir,
                protected: &config.protected,
                key: &config.key,
                jobs: &jobs,
                trash_dir: &config.trash_dir,
                denied: None,
                tables: false,
            };
            work(&ctx)
        };
        if quick && self.local {
            return run();
        }
        tokio::task::spawn_blocking(run).await.unwrap_or_else(|_| {
            Err(OpError::new(
                ErrorCode::Internal,
                "the operation failed unexpectedly",
            ))
        })
    }
}

/// The largest file or directory (its size as `stat` gives it: about 2,000 names on ext4) read
/// before its verdict ([`ExecutorService::read_ahead`]): small enough that reading it costs
/// little against the gate's round trip, so how long a refused call takes hardly depends on what
/// is there.
const AHEAD_MAX_BYTES: u64 = 64 * 1024;

/// Whether a call's file system work is small and bounded enough to do on the async thread:
/// a whole-file read (one `read` of at most `MAX_READ_BYTES`) or a listing of one directory's
/// names and types (one `readdir` pass), and their plans (resolving one path). Handing work to a
/// blocking thread and back costs two thread switches, a large part of such a call. Everything
/// else — a listing with sizes and times (a `stat` per entry: up to 1,000 inodes read from disk
/// when they are not cached), line ranges, walks, writes (which sync), jobs — stays off the
/// async thread, where it would hold the account's other calls (the executor has one async
/// thread: see `runtime_for` in the CLI). Only on local file systems: an account with its
/// workdir or a root on NFS, FUSE or the like does all its file work on blocking threads, where a
/// server that stops answering holds one call and not the executor; pipes and other files that
/// could block an open or a read are opened non-blocking and refused by type.
fn is_quick(params: &ToolParams) -> bool {
    match params {
        ToolParams::FileRead(_) => params.reads_whole_file(),
        ToolParams::FileList(p) => p.depth.unwrap_or(1) <= 1 && p.details == Some(false),
        _ => false,
    }
}

/// The time tickets are checked at; a clock before 1970 fails closed (every ticket expired).
fn now_ms() -> u64 {
    glovebox_ticket::now_ms().unwrap_or(u64::MAX)
}

/// The reply to an execute, and its outcome in the audit event.
fn answer(outcome: Result<Done, OpError>, event: &mut AuditEvent) -> ExecuteResponse {
    note_outcome(outcome.as_ref().map(|done| done.bytes), event);
    match outcome {
        Ok(done) => ExecuteResponse {
            result_json: done.result,
            error: None,
            result_audited: false,
            table: done.table,
        },
        Err(e) => ExecuteResponse {
            result_json: String::new(),
            error: Some(e.to_proto()),
            result_audited: false,
            table: None,
        },
    }
}

/// An execute's outcome (the bytes it moved, or why it failed) in its audit event.
fn note_outcome(outcome: Result<u64, &OpError>, event: &mut AuditEvent) {
    match outcome {
        Ok(bytes) => {
            event.outcome = Outcome::Ok.into();
            event.bytes = bytes;
        }
        Err(e) => {
            if event.outcome.is_empty() {
                event.outcome = Outcome::Error.into();
            }
            event.error_code = e.code.as_str().into();
            event.reason = e.message.clone();
        }
    }
}

/// What a call made ahead of its verdict tells once it is allowed: `outcome`, its rows written
/// with the verdict.
fn told_ahead(outcome: Result<Done, OpError>) -> ExecuteResponse {
    let mut response = answer(outcome, &mut AuditEvent::default());
    response.result_audited = true;
    response
}

/// What a read made ahead of its verdict tells once it is allowed, for the gate to hand to the
/// broker (`RunRequest.deliver_via_gate`): a whole-file read's outcome, which no ticket changes
/// ([`ExecutorService::release_ahead`] tells the same); `None` for a listing, which the ticket cuts.
fn deliverable(held: &Result<ops::Ahead, OpError>) -> Option<ExecuteResponse> {
    let outcome = match held {
        Ok(ops::Ahead::Done(done)) => Ok(done.clone()),
        Ok(ops::Ahead::Listing(_)) => return None,
        Err(e) => Err(e.clone()),
    };
    Some(told_ahead(outcome))
}

/// The call's result row: what `response` tells the broker, which answers the client with it
/// (the same outcome, code and reason the broker's own result rows give a failure).
fn result_row(call: &ToolCall, response: &ExecuteResponse, duration_ms: u64) -> AuditEvent {
    let mut row = AuditEvent {
        call_id: call.call_id.clone(),
        client_call_id: call.client_call_id.clone(),
        account: call.account.clone(),
        source: Source::Executor.into(),
        kind: RowKind::Result.into(),
        tool: call.tool.clone(),
        duration_ms,
        ..Default::default()
    };
    match &response.error {
        None => row.outcome = Outcome::Ok.into(),
        Some(e) => glovebox_proto::audit_row::note_failure(&mut row, e),
    }
    row
}

impl ExecutorService {
    /// A run, one message of the broker's `Runs` stream: plans the call, has the gate judge it on
    /// the broker's voucher and, on an allow, executes it; any other verdict comes back with the
    /// plan.
    #[tracing::instrument(skip_all, fields(call_id))]
    async fn run_call(&self, request: pb::RunRequest) -> Result<pb::RunResponse, Status> {
        let started = Instant::now();
        let pb::RunRequest {
            call,
            voucher,
            call_age_ms,
            tables,
            deliver_via_gate,
        } = request;
        let (call, voucher) = (required(call, "call")?, required(voucher, "voucher")?);
        tracing::Span::current().record("call_id", call.call_id.as_str());
        let failed = |e: OpError| {
            Ok(pb::RunResponse {
                error: Some(e.to_proto()),
                ..Default::default()
            })
        };
        // The parameters are read once, for the plan and for acting on.
        let planned = match self.parse(&call) {
            Ok(params) => self.plan_params(params).await,
            Err(e) => Err(e),
        };
        let (plan, params) = match planned {
            Ok(planned) => planned,
            Err(e) => return failed(e),
        };
        let ahead = self
            .read_ahead(&call, &params, &plan, started, call_age_ms, tables)
            .await;
        let done_ahead = ahead.as_ref().map(|(_, rows)| rows.clone());
        let deliver = ahead
            .as_ref()
            .filter(|_| deliver_via_gate)
            .and_then(|(held, _)| deliverable(held));
        let decide = self.decide(&call, plan.clone(), voucher, done_ahead, deliver);
        let mut decision = match decide.await {
            Ok(decision) => decision,
            Err(e) => return failed(e),
        };
        if decision.delivered {
            // The gate handed the outcome, with the verdict, to the broker once the call was
            // allowed and audited: nothing else is told (on the broker's stream, this answer is
            // not even sent: `Answer::unsent`).
            return Ok(pb::RunResponse {
                delivered: true,
                ..Default::default()
            });
        }
        if pb::Verdict::try_from(decision.verdict) != Ok(pb::Verdict::Allow) {
            return Ok(pb::RunResponse {
                decision: Some(decision),
                plan: Some(plan),
                ..Default::default()
            });
        }
        let ticket = decision.ticket.take();
        let executed = match ahead.filter(|_| decision.rows_written) {
            Some((held, _)) => self.release_ahead(&call, &plan, ticket.as_ref(), held),
            // Not made ahead, or its rows not written: acted on as the ticket says, now.
            None => {
                let age = call_age_ms.saturating_add(started.elapsed().as_millis() as u64);
                self.execute_to_the_end(call, Some(params), ticket, age, tables)
                    .await
            }
        };
        Ok(pb::RunResponse {
            decision: Some(decision),
            executed: Some(executed),
            ..Default::default()
        })
    }

    /// The answer to one message on the broker's `Runs` stream: what its run came to, or the
    /// status it failed with.
    async fn run_message(&self, asked: pb::RunCall) -> pb::RunAnswer {
        use pb::run_answer::Body as Answer;
        let span = glovebox_telemetry::propagation::message_server_span(
            "glovebox.v1.Executor",
            "Run",
            &asked.trace,
        );
        let ran = match asked.body {
            Some(pb::run_call::Body::Run(request)) => self.run_call(request).instrument(span).await,
            _ => Err(Status::invalid_argument("a message with no call in it")),
        };
        match ran {
            Ok(ran) => pb::RunAnswer {
                id: asked.id,
                body: Some(Answer::Ran(ran)),
            },
            Err(status) => pb::RunAnswer::failed(asked.id, status),
        }
    }
}

#[tonic::async_trait]
impl pb::executor_server::Executor for ExecutorService {
    #[tracing::instrument(skip_all, fields(call_id))]
    async fn plan(&self, request: Request<PlanRequest>) -> Result<Response<PlanResponse>, Status> {
        require_peer(&request, &[BROKER, ADMIN])?;
        let call = required(request.into_inner().call, "call")?;
        tracing::Span::current().record("call_id", call.call_id.as_str());
        Ok(Response::new(match self.plan_call(&call).await {
            Ok(plan) => PlanResponse {
                plan: Some(plan),
                error: None,
            },
            Err(e) => PlanResponse {
                plan: None,
                error: Some(e.to_proto()),
            },
        }))
    }

    /// The path arguments of a call to a pack tool, resolved (for the broker; see
    /// `approved::pack_paths_plan`).
    #[tracing::instrument(skip_all, fields(call_id))]
    async fn plan_paths(
        &self,
        request: Request<PlanPathsRequest>,
    ) -> Result<Response<PlanResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let PlanPathsRequest { call, paths, base } = request.into_inner();
        let call = required(call, "call")?;
        tracing::Span::current().record("call_id", call.call_id.as_str());
        let outcome = if call.account != self.config.account {
            Err(OpError::new(
                ErrorCode::Denied,
                "this executor serves another account",
            ))
        } else if glovebox_proto::packs::split_name(&call.tool).is_none() {
            Err(OpError::new(
                ErrorCode::UnknownTool,
                "only the path arguments of pack tools are planned this way",
            ))
        } else {
            self.blocking(move |ctx| crate::approved::pack_paths_plan(ctx, &base, &paths))
                .await
        };
        Ok(Response::new(match outcome {
            Ok(plan) => PlanResponse {
                plan: Some(plan),
                error: None,
            },
            Err(e) => PlanResponse {
                plan: None,
                error: Some(e.to_proto()),
            },
        }))
    }

    #[tracing::instrument(skip_all, fields(call_id))]
    async fn preview(
        &self,
        request: Request<PreviewRequest>,
    ) -> Result<Response<PreviewResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let PreviewRequest { call, plan } = request.into_inner();
        let (call, plan) = (required(call, "call")?, required(plan, "plan")?);
        tracing::Span::current().record("call_id", call.call_id.as_str());
        let outcome = match self.parse(&call) {
            Ok(params) => {
                self.blocking(move |ctx| Ok(ops::preview(ctx, &params, &plan)))
                    .await
            }
            Err(e) => Err(e),
        };
        Ok(Response::new(match outcome {
            Ok((text, truncated)) => PreviewResponse {
                text,
                truncated,
                error: None,
            },
            Err(e) => PreviewResponse {
                text: String::new(),
                truncated: false,
                error: Some(e.to_proto()),
            },
        }))
    }

    #[tracing::instrument(skip_all, fields(call_id))]
    async fn execute(
        &self,
        request: Request<ExecuteRequest>,
    ) -> Result<Response<ExecuteResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let ExecuteRequest {
            call,
            ticket,
            call_age_ms,
            tables,
        } = request.into_inner();
        let call = required(call, "call")?;
        tracing::Span::current().record("call_id", call.call_id.as_str());
        Ok(Response::new(
            self.execute_to_the_end(call, None, ticket, call_age_ms, tables)
                .await,
        ))
    }

    type RunsStream = AnswerStream<pb::RunAnswer>;

    async fn runs(
        &self,
        request: Request<tonic::Streaming<pb::RunCall>>,
    ) -> Result<Response<Self::RunsStream>, Status> {
        require_peer(&request, &[BROKER])?;
        let service = self.clone();
        Ok(Response::new(answer_each(
            request.into_inner(),
            self.stopping.clone(),
            crate::MAX_CONCURRENT_CALLS,
            move |asked| {
                let service = service.clone();
                async move { service.run_message(asked).await }
            },
        )))
    }

    async fn status(
        &self,
        request: Request<pb::ExecutorStatusRequest>,
    ) -> Result<Response<pb::ExecutorStatusResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        Ok(Response::new(pb::ExecutorStatusResponse {
            sandbox: self.config.sandbox.clone(),
            uid: rustix::process::geteuid().as_raw(),
            running_jobs: self.jobs.running() as u32,
            jobs: self.config.containment.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_row_says_what_the_response_says() {
        let call = ToolCall {
            account: "alice".into(),
            call_id: "call-1".into(),
            tool: "file_read".into(),
            params_json: "{}".into(),
            client_call_id: "r1".into(),
        };
        let failed = |code: &str| ExecuteResponse {
            error: Some(pb::ToolError {
                code: code.into(),
                message: "why".into(),
            }),
            ..Default::default()
        };
        let cases = [
            (ExecuteResponse::default(), ("ok", "", "")),
            (failed("not_found"), ("error", "not_found", "why")),
            (failed("denied"), ("denied", "denied", "why")),
            // a code nobody knows is reported as the broker reports it: internal
            (failed("what"), ("error", "internal", "why")),
        ];
        for (response, (outcome, code, reason)) in cases {
            let row = result_row(&call, &response, 7);
            assert_eq!(
                (
                    row.outcome.as_str(),
                    row.error_code.as_str(),
                    row.reason.as_str()
                ),
                (outcome, code, reason),
                "{response:?}"
            );
            assert_eq!(
                (
                    row.kind.as_str(),
                    row.call_id.as_str(),
                    row.client_call_id.as_str(),
                    row.account.as_str(),
                    row.duration_ms
                ),
                ("result", "call-1", "r1", "alice", 7)
            );
        }
    }

    #[test]
    fn only_bounded_reads_and_one_directorys_names_run_on_the_async_thread() {
        let parse = |tool: &str, args: serde_json::Value| {
            Tool::from_name(tool).unwrap().parse_params(&args).unwrap()
        };
        let cases = [
            ("file_read", serde_json::json!({"path": "a"}), true),
            (
                "file_read",
                serde_json::json!({"path": "a", "offset": 2}),
                false,
            ),
            (
                "file_read",
                serde_json::json!({"path": "a", "limit": 2}),
                false,
            ),
            ("file_list", serde_json::json!({"path": "d"}), false),
            (
                "file_list",
                serde_json::json!({"path": "d", "details": false}),
                true,
            ),
            (
                "file_list",
                serde_json::json!({"path": "d", "details": true}),
                false,
            ),
            (
                "file_list",
                serde_json::json!({"path": "d", "depth": 1, "details": false}),
                true,
            ),
            (
                "file_list",
                serde_json::json!({"path": "d", "depth": 2, "details": false}),
                false,
            ),
            (
                "file_write",
                serde_json::json!({"path": "a", "content": "x"}),
                false,
            ),
            (
                "file_find",
                serde_json::json!({"path": "d", "names": ["*"]}),
                false,
            ),
            (
                "file_grep",
                serde_json::json!({"path": "d", "pattern": "x"}),
                false,
            ),
            ("exec_run", serde_json::json!({"command": "true"}), false),
        ];
        for (tool, args, quick) in cases {
            assert_eq!(is_quick(&parse(tool, args.clone())), quick, "{tool} {args}");
        }
    }

    /// How [`ScriptedGate`] answers a decide.
    #[derive(Clone, Copy, Debug)]
    enum Verdict {
        /// Allows with a ticket for the plan (`other_subjects`: for another path), saying the
        /// rows done ahead were written if there were any and `written`.
        Allow {
            written: bool,
            other_subjects: bool,
        },
        Deny,
    }

    /// What [`ScriptedGate`] was sent.
    #[derive(Debug)]
    enum Heard {
        Decide(Option<pb::CallRows>),
        AppendCall(pb::CallRows),
        /// A call's rows, answered `Unavailable`.
        AppendRefused,
    }

    /// A gate for one executor's stream that answers every decide as its script says and a
    /// call's rows `Unavailable` (a gate restarting) while `refuse_appends` counts down,
    /// acknowledging them after that, telling `heard` what it was sent.
    #[derive(Clone)]
    struct ScriptedGate {
        key: glovebox_ticket::AccountKey,
        script: Arc<std::sync::Mutex<Verdict>>,
        refuse_appends: Arc<std::sync::atomic::AtomicUsize>,
        /// What every ticket says to hide from listings.
        hidden_globs: Vec<String>,
        heard: tokio::sync::mpsc::UnboundedSender<Heard>,
    }

    impl ScriptedGate {
        /// A gate that answers every decide with `verdict`, and what it hears.
        fn new(
            key: &glovebox_ticket::AccountKey,
            verdict: Verdict,
        ) -> (ScriptedGate, tokio::sync::mpsc::UnboundedReceiver<Heard>) {
            let (heard, hearing) = tokio::sync::mpsc::unbounded_channel();
            let gate = ScriptedGate {
                key: key.clone(),
                script: Arc::new(std::sync::Mutex::new(verdict)),
                refuse_appends: Default::default(),
                hidden_globs: Vec::new(),
                heard,
            };
            (gate, hearing)
        }
    }

    #[tonic::async_trait]
    impl pb::executor_gate_server::ExecutorGate for ScriptedGate {
        type CallsStream = AnswerStream<pb::ExecutorGateAnswer>;

        async fn calls(
            &self,
            request: Request<tonic::Streaming<pb::ExecutorGateCall>>,
        ) -> Result<Response<Self::CallsStream>, Status> {
            use pb::executor_gate_answer::Body as Answer;
            use pb::executor_gate_call::Body as Asked;
            let gate = self.clone();
            let (_, stopping) = tokio::sync::watch::channel(false);
            let answers = answer_each(request.into_inner(), stopping, 8, move |asked| {
                let gate = gate.clone();
                async move {
                    let body = match asked.body {
                        Some(Asked::Decide(r)) => {
                            let _ = gate.heard.send(Heard::Decide(r.done_ahead.clone()));
                            let (call, mut plan) =
                                (r.call.unwrap_or_default(), r.plan.unwrap_or_default());
                            let script = *gate.script.lock().unwrap();
                            let decided = match script {
                                Verdict::Deny => pb::DecideResponse {
                                    verdict: pb::Verdict::Deny as i32,
                                    ..Default::default()
                                },
                                Verdict::Allow {
                                    written,
                                    other_subjects,
                                } => {
                                    if other_subjects {
                                        plan.subjects[0].path.push_str(".other");
                                    }
                                    let body = pb::TicketBody {
                                        account: call.account,
                                        call_id: call.call_id,
                                        tool: call.tool,
                                        subjects: plan.subjects,
                                        content_tag: plan.content_tag,
                                        expires_at_ms: now_ms() + 60_000,
                                        approval: "auto".into(),
                                        hidden_globs: gate.hidden_globs.clone(),
                                        ..Default::default()
                                    };
                                    pb::DecideResponse {
                                        verdict: pb::Verdict::Allow as i32,
                                        ticket: Some(gate.key.sign(&body)),
                                        rows_written: written && r.done_ahead.is_some(),
                                        ..Default::default()
                                    }
                                }
                            };
                            Answer::Decided(decided)
                        }
                        Some(Asked::AppendCall(rows)) => {
                            use std::sync::atomic::Ordering::SeqCst;
                            let refuse = gate
                                .refuse_appends
                                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1));
                            if refuse.is_ok() {
                                let _ = gate.heard.send(Heard::AppendRefused);
                                Answer::Error(glovebox_proto::transport::messages::call_status(
                                    &Status::unavailable("restarting"),
                                ))
                            } else {
                                let _ = gate.heard.send(Heard::AppendCall(rows));
                                Answer::Appended(pb::AppendAck::default())
                            }
                        }
                        None => Answer::Error(pb::CallStatus::default()),
                    };
                    pb::ExecutorGateAnswer {
                        id: asked.id,
                        body: Some(body),
                    }
                }
            });
            Ok(Response::new(answers))
        }
    }

    /// A temporary directory with a workdir, account `a`'s keys and where its gate listens.
    struct Place {
        _dir: tempfile::TempDir,
        root: std::path::PathBuf,
        work: std::path::PathBuf,
        key: glovebox_ticket::AccountKey,
        socket_key: glovebox_proto::transport::SocketKey,
        sock: std::path::PathBuf,
    }

    fn place() -> Place {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let work = root.join("work");
        std::fs::create_dir(&work).unwrap();
        Place {
            _dir: dir,
            key: glovebox_ticket::MasterKey::from_bytes(&[7; 32])
                .unwrap()
                .account_key("a"),
            socket_key: glovebox_proto::transport::SocketKey::derive(
                b"test control key",
                "audit",
                "executor:a",
            ),
            sock: root.join("gate.sock"),
            root,
            work,
        }
    }

    /// An executor's configuration for account `a` in `work`, its gate at `sock`.
    fn test_config(
        root: &std::path::Path,
        work: &std::path::Path,
        sock: &std::path::Path,
        key: glovebox_ticket::AccountKey,
        socket_key: &glovebox_proto::transport::SocketKey,
    ) -> ExecutorConfig {
        use glovebox_proto::transport::{ServerKeys, default_allowed_uids};
        ExecutorConfig {
            account: "a".into(),
            workdir: work.to_owned(),
            key,
            gate_socket: sock.to_owned(),
            audit_key: ("executor:a".into(), socket_key.clone()),
            serve_keys: ServerKeys::new([]),
            allowed_uids: default_allowed_uids(),
            protected: Vec::new(),
            jobs: crate::jobs::JobConfig {
                env: Vec::new(),
                shim: std::path::PathBuf::new(),
                roots: vec![work.to_owned()],
                scratch: root.join("scratch"),
                ..crate::jobs::JobConfig::default()
            },
            trash_dir: root.join("trash"),
            sandbox: String::new(),
            containment: String::new(),
        }
    }

    /// `gate` serving account `a`'s executor stream at `p.sock`, and an executor for `a` that
    /// calls it (running until the sender returned with it is dropped or sends true).
    fn with_gate(
        p: &Place,
        gate: impl pb::executor_gate_server::ExecutorGate,
    ) -> (ExecutorService, tokio::sync::watch::Sender<bool>) {
        use glovebox_proto::transport::{
            ServerKeys, authenticated_channel, authenticated_incoming, bind_private_socket,
            default_allowed_uids,
        };
        let listener = bind_private_socket(&p.sock).unwrap();
        let keys = ServerKeys::new([("executor:a".to_owned(), p.socket_key.clone())]);
        tokio::spawn(async move {
            let incoming = authenticated_incoming(listener, default_allowed_uids(), keys);
            let _ = tonic::transport::Server::builder()
                .add_service(pb::executor_gate_server::ExecutorGateServer::new(gate))
                .serve_with_incoming(incoming)
                .await;
        });
        let config = test_config(&p.root, &p.work, &p.sock, p.key.clone(), &p.socket_key);
        let jobs = Arc::new(crate::jobs::JobTable::new(config.jobs.clone()));
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let link = authenticated_channel(&p.sock, "executor:a", p.socket_key.clone());
        (
            ExecutorService::new(Arc::new(config), jobs, link, stopping),
            stop,
        )
    }

    #[tokio::test]
    async fn quick_work_runs_on_the_async_thread_only_on_local_file_systems() {
        use glovebox_proto::transport::authenticated_channel;
        let p = place();
        let here = std::thread::current().id();
        for (roots, local) in [
            (vec![p.work.clone()], true),
            (
                vec![p.work.clone(), std::path::PathBuf::from("/proc")],
                false,
            ),
        ] {
            let mut config = test_config(&p.root, &p.work, &p.sock, p.key.clone(), &p.socket_key);
            config.jobs.roots = roots;
            let jobs = Arc::new(crate::jobs::JobTable::new(config.jobs.clone()));
            let (_stop, stopping) = tokio::sync::watch::channel(false);
            let link = authenticated_channel(&p.sock, "executor:a", p.socket_key.clone());
            let service = ExecutorService::new(Arc::new(config), jobs, link, stopping);
            let thread = |quick| service.file_work(quick, |_| Ok(std::thread::current().id()));
            assert_eq!(thread(true).await.unwrap() == here, local, "local: {local}");
            assert_ne!(
                thread(false).await.unwrap(),
                here,
                "slow work, local: {local}"
            );
        }
    }

    async fn heard(seen: &mut tokio::sync::mpsc::UnboundedReceiver<Heard>) -> Heard {
        tokio::time::timeout(std::time::Duration::from_secs(10), seen.recv())
            .await
            .expect("the gate heard from the executor in time")
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_given_up_on_while_its_rows_are_retried_still_sends_them() {
        let p = place();
        let allow = Verdict::Allow {
            written: false,
            other_subjects: false,
        };
        let (gate, mut seen) = ScriptedGate::new(&p.key, allow);
        gate.refuse_appends
            .store(1, std::sync::atomic::Ordering::SeqCst);
        let (service, _stop) = with_gate(&p, gate);
        let work = p.work.clone();
        let call = ToolCall {
            account: "a".into(),
            call_id: "call-w".into(),
            tool: "file_write".into(),
            params_json: r#"{"path": "w.txt", "content": "written"}"#.into(),
            client_call_id: String::new(),
        };
        let running = tokio::spawn(async move {
            service
                .run_call(pb::RunRequest {
                    call: Some(call),
                    voucher: Some(pb::Voucher::default()),
                    ..Default::default()
                })
                .await
        });
        assert!(matches!(heard(&mut seen).await, Heard::Decide(None)));
        assert!(matches!(heard(&mut seen).await, Heard::AppendRefused));
        // The broker gives up on the call while its rows wait to be sent again.
        running.abort();
        assert!(running.await.unwrap_err().is_cancelled());
        assert!(matches!(heard(&mut seen).await, Heard::AppendCall(_)));
        assert_eq!(
            std::fs::read_to_string(work.join("w.txt")).unwrap(),
            "written"
        );
    }

    #[tokio::test]
    async fn a_read_made_ahead_of_its_verdict_is_told_only_once_allowed_and_audited() {
        let p = place();
        std::fs::write(p.work.join("a.txt"), "hello").unwrap();
        std::fs::write(p.work.join("secret.txt"), "do-not-tell").unwrap();
        std::fs::write(p.work.join(".env"), "TOKEN=floor").unwrap();
        std::fs::write(p.work.join("big.txt"), "b".repeat(70 * 1024)).unwrap();
        std::fs::write(p.work.join("x.secret"), "x").unwrap();
        let (mut gate, mut heard) = ScriptedGate::new(&p.key, Verdict::Deny);
        gate.hidden_globs = vec![format!("{}/*.secret", p.work.display())];
        let script = Arc::clone(&gate.script);
        let (service, _stop) = with_gate(&p, gate);
        let mut n = 0;
        // Runs `tool` with `params` under `verdict`: the answer, and what the gate was sent.
        // (`tables`: the call asks for its collection as a table.)
        let mut run = async |verdict: Verdict, tool: &str, params: serde_json::Value, tables| {
            *script.lock().unwrap() = verdict;
            n += 1;
            let call = ToolCall {
                account: "a".into(),
                call_id: format!("call-{n}"),
                tool: tool.into(),
                params_json: params.to_string(),
                client_call_id: String::new(),
            };
            let ran = service
                .run_call(pb::RunRequest {
                    call: Some(call),
                    voucher: Some(pb::Voucher::default()),
                    tables,
                    ..Default::default()
                })
                .await
                .unwrap();
            let mut sent = Vec::new();
            while let Ok(h) = heard.try_recv() {
                sent.push(h);
            }
            (ran, sent)
        };
        let read = |path: &str| serde_json::json!({ "path": path });
        let allowed = Verdict::Allow {
            written: true,
            other_subjects: false,
        };

        // Allowed, its rows written with the verdict: told, with no rows sent after.
        let (ran, sent) = run(allowed, "file_read", read("a.txt"), false).await;
        let executed = ran.executed.unwrap();
        assert!(executed.result_json.contains("hello"), "{executed:?}");
        assert!(executed.result_audited && executed.error.is_none());
        let [Heard::Decide(Some(rows))] = sent.as_slice() else {
            panic!("{sent:?}");
        };
        let (execute, result) = (rows.execute.clone().unwrap(), rows.result.clone().unwrap());
        assert_eq!(
            (
                execute.kind.as_str(),
                execute.outcome.as_str(),
                execute.bytes
            ),
            ("execute", "ok", 5)
        );
        assert_eq!(
            execute.subjects[0].path,
            p.work.join("a.txt").display().to_string()
        );
        assert_eq!(
            (result.kind.as_str(), result.outcome.as_str()),
            ("result", "ok")
        );
        assert!(rows.ticket.is_none());

        // Denied: what was read is in no answer.
        let (ran, sent) = run(Verdict::Deny, "file_read", read("secret.txt"), false).await;
        assert!(ran.executed.is_none());
        assert!(!format!("{ran:?}").contains("do-not-tell"), "{ran:?}");
        assert!(
            matches!(sent.as_slice(), [Heard::Decide(Some(_))]),
            "{sent:?}"
        );

        // Allowed with a ticket for another file: refused, untold.
        let other = Verdict::Allow {
            written: true,
            other_subjects: true,
        };
        let (ran, _) = run(other, "file_read", read("secret.txt"), false).await;
        let executed = ran.executed.unwrap();
        assert!(!format!("{executed:?}").contains("do-not-tell"));
        assert_eq!(executed.error.unwrap().code, "denied");

        // Allowed, but the rows were not written: read again on the ticket, its rows sent after.
        let unwritten = Verdict::Allow {
            written: false,
            other_subjects: false,
        };
        let (ran, sent) = run(unwritten, "file_read", read("a.txt"), false).await;
        let executed = ran.executed.unwrap();
        assert!(executed.result_json.contains("hello") && executed.result_audited);
        let [Heard::Decide(Some(_)), Heard::AppendCall(rows)] = sent.as_slice() else {
            panic!("{sent:?}");
        };
        assert!(rows.ticket.is_some(), "sent with the call's ticket");

        // A listing of names and types: made ahead, cut by the ticket's denies once allowed.
        let names = serde_json::json!({"path": ".", "details": false});
        let (ran, sent) = run(allowed, "file_list", names, false).await;
        let listed: serde_json::Value =
            serde_json::from_str(&ran.executed.unwrap().result_json).unwrap();
        let shown: Vec<&str> = listed["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(shown, ["a.txt", "big.txt", "secret.txt"], "{listed}");
        assert_eq!(
            listed["hidden"], 2,
            "the floor's .env and the denied x.secret"
        );
        assert!(
            matches!(sent.as_slice(), [Heard::Decide(Some(_))]),
            "{sent:?}"
        );
        // Asked for as a table (the MCP form): the same listing, made as the table, cut alike;
        // a listing made on the ticket after the verdict is made so too.
        for (params, ahead) in [
            (serde_json::json!({"path": ".", "details": false}), true),
            (
                serde_json::json!({"path": ".", "depth": 2, "details": false}),
                false,
            ),
        ] {
            let (ran, sent) = run(allowed, "file_list", params, true).await;
            let executed = ran.executed.unwrap();
            let listed: serde_json::Value = serde_json::from_str(&executed.result_json).unwrap();
            // The table comes apart from the other fields, as it is shown.
            assert_eq!(
                executed.table.as_deref(),
                Some("type\tname\nfile\ta.txt\nfile\tbig.txt\nfile\tsecret.txt"),
                "{listed}"
            );
            assert!(listed.get("table").is_none(), "{listed}");
            assert!(listed.get("entries").is_none(), "{listed}");
            assert_eq!(
                (listed["hidden"].clone(), listed["total"].clone()),
                (2.into(), 3.into())
            );
            assert_eq!(
                matches!(sent.as_slice(), [Heard::Decide(Some(_))]),
                ahead,
                "{sent:?}"
            );
        }

        // Never made ahead: a file on the floor, a bigger file, a range of lines, a listing
        // with sizes or deeper than one directory.
        let cases = [
            ("file_read", read(".env")),
            ("file_read", read("big.txt")),
            (
                "file_read",
                serde_json::json!({"path": "a.txt", "limit": 1}),
            ),
            ("file_list", serde_json::json!({"path": "."})),
            (
                "file_list",
                serde_json::json!({"path": ".", "depth": 2, "details": false}),
            ),
        ];
        for (tool, params) in cases {
            let (_, sent) = run(Verdict::Deny, tool, params.clone(), false).await;
            assert!(
                matches!(sent.as_slice(), [Heard::Decide(None)]),
                "{params}: {sent:?}"
            );
        }
        let (ran, sent) = run(allowed, "file_read", read("big.txt"), false).await;
        assert!(ran.executed.unwrap().result_audited);
        assert!(
            matches!(sent.as_slice(), [Heard::Decide(None), Heard::AppendCall(_)]),
            "{sent:?}"
        );
    }
}
