//! The executor's gRPC service: plan, preview, execute for one account.
//!
//! Plan and preview only look; execute acts, and only on a ticket that verifies under this
//! account's key and names this call. Each execute that acted sends the gate its execute row and
//! the call's result row together (`Audit.AppendCall`, with the ticket), and answers only once
//! they are committed; a refused ticket sends its execute row alone. Run is plan, decide and
//! execute in one call from the broker: the executor asks the gate for the verdict itself
//! (`ExecutorGate.Decide`, with the broker's voucher for the call) and executes on the ticket of
//! an allow. The broker may call every method; an administrator only Plan (what `glovebox policy
//! explain` judges).

use std::sync::Arc;
use std::time::Instant;

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::{Tool, ToolParams};
use glovebox_proto::transport::Link as Channel;
use glovebox_proto::transport::handover::peer::{ADMIN, BROKER};
use glovebox_proto::transport::messages::{Answer as _, AnswerStream, answer_each};
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
    /// The gate's verdicts on the calls the broker hands over with `Run`, and each call's last
    /// rows.
    gate: crate::gate_calls::GateCalls,
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
            gate: crate::gate_calls::GateCalls::new(gate),
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

    /// The gate's verdict on a call the broker vouched for.
    async fn decide(
        &self,
        call: &ToolCall,
        plan: pb::Plan,
        voucher: pb::Voucher,
    ) -> Result<pb::DecideResponse, OpError> {
        let request = pb::VouchedDecideRequest {
            call: Some(call.clone()),
            plan: Some(plan),
            voucher: Some(voucher),
        };
        match self.gate.decide(request).await {
            Ok(decided) => Ok(decided),
            Err(status) if status.code() == tonic::Code::PermissionDenied => {
                tracing::error!(error = %status.message(), "the gate refused to judge a call");
                Err(OpError::new(
                    ErrorCode::Denied,
                    format!("the gate refused to judge the call: {}", status.message()),
                ))
            }
            Err(_) => Err(OpError::new(
                ErrorCode::Unavailable,
                "the gate is unavailable; the call was not run",
            )),
        }
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
    ) -> ExecuteResponse {
        let service = self.clone();
        let executing = async move {
            service
                .execute_ticketed(&call, parsed, ticket, call_age_ms)
                .await
        };
        let traced = glovebox_telemetry::propagation::in_current_trace(executing);
        crate::shield::to_the_end(traced.in_current_span()).await
    }

    /// Acts on `ticket` if it is this call's and sends the gate the call's last rows (the
    /// execute row alone for a refused ticket); the call is reported done only once they are
    /// committed. `call_age_ms`: how long the call had run before this.
    async fn execute_ticketed(
        &self,
        call: &ToolCall,
        parsed: Option<ToolParams>,
        ticket: Option<pb::Ticket>,
        call_age_ms: u64,
    ) -> ExecuteResponse {
        let started = Instant::now();
        let mut event = AuditEvent {
            call_id: call.call_id.clone(),
            client_call_id: call.client_call_id.clone(),
            account: self.config.account.clone(),
            source: "executor".into(),
            kind: "execute".into(),
            tool: call.tool.clone(),
            ..Default::default()
        };
        let (outcome, ticketed) = match self.verify(call, ticket.as_ref()) {
            Err(e) => {
                event.outcome = "refused".into();
                (Err(e), false)
            }
            Ok(body) => {
                // The gate renders (and redacts) the subjects of the row itself.
                event.subjects = body.subjects.clone();
                event.approval = body.approval.clone();
                (self.act(call, parsed, body, &mut event).await, true)
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
                };
            }
        }
        response
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
        let value: serde_json::Value = serde_json::from_str(&call.params_json).map_err(|e| {
            OpError::new(
                ErrorCode::InvalidParams,
                format!("params are not JSON: {e}"),
            )
        })?;
        tool.parse_params(&value)
            .map_err(|e| OpError::new(ErrorCode::InvalidParams, e))
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
    /// (`parsed`: the call's parameters if they were read already.)
    async fn act(
        &self,
        call: &ToolCall,
        parsed: Option<ToolParams>,
        body: pb::TicketBody,
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
        ToolParams::FileRead(p) => p.offset.is_none() && p.limit.is_none(),
        ToolParams::FileList(p) => p.depth.unwrap_or(1) <= 1 && p.details == Some(false),
        _ => false,
    }
}

/// Checks that `request` came from one of the `allowed` peers: the broker drives calls; an
/// administrator (`glovebox policy explain`) may only ask for a plan.
fn caller<T>(request: &Request<T>, allowed: &[&str]) -> Result<(), Status> {
    match glovebox_proto::transport::peer_of(request) {
        Some(peer) if allowed.contains(&peer) => Ok(()),
        Some(peer) => Err(Status::permission_denied(format!(
            "{peer} may not call this method"
        ))),
        None => Err(Status::unauthenticated(
            "the connection was not authenticated",
        )),
    }
}

fn required<T>(value: Option<T>, what: &str) -> Result<T, Status> {
    value.ok_or_else(|| Status::invalid_argument(format!("missing {what}")))
}

/// The time tickets are checked at; a clock before 1970 fails closed (every ticket expired).
fn now_ms() -> u64 {
    glovebox_ticket::now_ms().unwrap_or(u64::MAX)
}

/// The reply to an execute, and its outcome in the audit event.
fn answer(outcome: Result<Done, OpError>, event: &mut AuditEvent) -> ExecuteResponse {
    match outcome {
        Ok(done) => {
            event.outcome = "ok".into();
            event.bytes = done.bytes;
            ExecuteResponse {
                result_json: done.result,
                error: None,
                result_audited: false,
            }
        }
        Err(e) => {
            if event.outcome.is_empty() {
                event.outcome = "error".into();
            }
            event.error_code = e.code.as_str().into();
            event.reason = e.message.clone();
            ExecuteResponse {
                result_json: String::new(),
                error: Some(e.to_proto()),
                result_audited: false,
            }
        }
    }
}

/// The call's result row: what `response` tells the broker, which answers the client with it
/// (the same outcome, code and reason the broker's own result rows give a failure).
fn result_row(call: &ToolCall, response: &ExecuteResponse, duration_ms: u64) -> AuditEvent {
    let mut row = AuditEvent {
        call_id: call.call_id.clone(),
        client_call_id: call.client_call_id.clone(),
        account: call.account.clone(),
        source: "executor".into(),
        kind: "result".into(),
        tool: call.tool.clone(),
        duration_ms,
        ..Default::default()
    };
    match &response.error {
        None => row.outcome = "ok".into(),
        Some(e) => {
            let code = ErrorCode::parse(&e.code).unwrap_or(ErrorCode::Internal);
            row.outcome = code.result_outcome().into();
            row.error_code = code.as_str().into();
            row.reason = e.message.clone();
        }
    }
    row
}

impl ExecutorService {
    /// `Executor.Run`: plans the call, has the gate judge it on the broker's voucher and, on an
    /// allow, executes it; any other verdict comes back with the plan.
    #[tracing::instrument(skip_all, fields(call_id))]
    async fn run_call(&self, request: pb::RunRequest) -> Result<pb::RunResponse, Status> {
        let started = Instant::now();
        let pb::RunRequest {
            call,
            voucher,
            call_age_ms,
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
        let mut decision = match self.decide(&call, plan.clone(), voucher).await {
            Ok(decision) => decision,
            Err(e) => return failed(e),
        };
        if pb::Verdict::try_from(decision.verdict) != Ok(pb::Verdict::Allow) {
            return Ok(pb::RunResponse {
                decision: Some(decision),
                plan: Some(plan),
                ..Default::default()
            });
        }
        let ticket = decision.ticket.take();
        let age = call_age_ms.saturating_add(started.elapsed().as_millis() as u64);
        let executed = self
            .execute_to_the_end(call, Some(params), ticket, age)
            .await;
        Ok(pb::RunResponse {
            decision: Some(decision),
            executed: Some(executed),
            ..Default::default()
        })
    }

    /// The answer to one message on the broker's `Runs` stream: what `Run` would answer.
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
        caller(&request, &[BROKER, ADMIN])?;
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
        caller(&request, &[BROKER])?;
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
        caller(&request, &[BROKER])?;
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
        caller(&request, &[BROKER])?;
        let ExecuteRequest {
            call,
            ticket,
            call_age_ms,
        } = request.into_inner();
        let call = required(call, "call")?;
        tracing::Span::current().record("call_id", call.call_id.as_str());
        Ok(Response::new(
            self.execute_to_the_end(call, None, ticket, call_age_ms)
                .await,
        ))
    }

    async fn run(
        &self,
        request: Request<pb::RunRequest>,
    ) -> Result<Response<pb::RunResponse>, Status> {
        caller(&request, &[BROKER])?;
        self.run_call(request.into_inner()).await.map(Response::new)
    }

    type RunsStream = AnswerStream<pb::RunAnswer>;

    async fn runs(
        &self,
        request: Request<tonic::Streaming<pb::RunCall>>,
    ) -> Result<Response<Self::RunsStream>, Status> {
        caller(&request, &[BROKER])?;
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
        caller(&request, &[BROKER])?;
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

    /// A gate for one executor's stream: it allows every call (with a ticket signed by `key`),
    /// answers a call's first rows `Unavailable` (a gate restarting) and acknowledges them
    /// after that, saying which it did on `seen`.
    #[derive(Clone)]
    struct RestartingGate {
        key: glovebox_ticket::AccountKey,
        appends: Arc<std::sync::atomic::AtomicUsize>,
        seen: tokio::sync::mpsc::UnboundedSender<&'static str>,
    }

    #[tonic::async_trait]
    impl pb::executor_gate_server::ExecutorGate for RestartingGate {
        async fn decide(
            &self,
            _: Request<pb::VouchedDecideRequest>,
        ) -> Result<Response<pb::DecideResponse>, Status> {
            Err(Status::unimplemented("only the stream"))
        }

        type CallsStream = AnswerStream<pb::ExecutorGateAnswer>;

        async fn calls(
            &self,
            request: Request<tonic::Streaming<pb::ExecutorGateCall>>,
        ) -> Result<Response<Self::CallsStream>, Status> {
            use pb::executor_gate_answer::Body as Answer;
            use pb::executor_gate_call::Body as Asked;
            let gate = Arc::new(self.clone());
            let (_, stopping) = tokio::sync::watch::channel(false);
            let answers = answer_each(request.into_inner(), stopping, 8, move |asked| {
                let gate = Arc::clone(&gate);
                async move {
                    let id = asked.id;
                    match asked.body {
                        Some(Asked::Decide(r)) => {
                            let (call, plan) =
                                (r.call.unwrap_or_default(), r.plan.unwrap_or_default());
                            let body = pb::TicketBody {
                                account: call.account,
                                call_id: call.call_id,
                                tool: call.tool,
                                subjects: plan.subjects,
                                content_tag: plan.content_tag,
                                expires_at_ms: now_ms() + 60_000,
                                approval: "auto".into(),
                                ..Default::default()
                            };
                            let decided = pb::DecideResponse {
                                verdict: pb::Verdict::Allow as i32,
                                ticket: Some(gate.key.sign(&body)),
                                ..Default::default()
                            };
                            pb::ExecutorGateAnswer {
                                id,
                                body: Some(Answer::Decided(decided)),
                            }
                        }
                        _ => {
                            let n = gate
                                .appends
                                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            if n == 0 {
                                let _ = gate.seen.send("rows refused");
                                pb::ExecutorGateAnswer::failed(
                                    id,
                                    Status::unavailable("restarting"),
                                )
                            } else {
                                let _ = gate.seen.send("rows written");
                                pb::ExecutorGateAnswer {
                                    id,
                                    body: Some(Answer::Appended(pb::AppendAck::default())),
                                }
                            }
                        }
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
            },
            trash_dir: root.join("trash"),
            sandbox: String::new(),
            containment: String::new(),
        }
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

    async fn heard(
        seen: &mut tokio::sync::mpsc::UnboundedReceiver<&'static str>,
    ) -> Option<&'static str> {
        tokio::time::timeout(std::time::Duration::from_secs(10), seen.recv())
            .await
            .expect("the gate heard from the executor in time")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_given_up_on_while_its_rows_are_retried_still_sends_them() {
        use glovebox_proto::transport::{
            ServerKeys, authenticated_channel, authenticated_incoming, bind_private_socket,
            default_allowed_uids,
        };
        let Place {
            _dir,
            root,
            work,
            key,
            socket_key,
            sock,
        } = place();
        let listener = bind_private_socket(&sock).unwrap();
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let gate = RestartingGate {
            key: key.clone(),
            appends: Default::default(),
            seen: seen_tx,
        };
        let keys = ServerKeys::new([("executor:a".to_owned(), socket_key.clone())]);
        tokio::spawn(async move {
            let incoming = authenticated_incoming(listener, default_allowed_uids(), keys);
            let _ = tonic::transport::Server::builder()
                .add_service(pb::executor_gate_server::ExecutorGateServer::new(gate))
                .serve_with_incoming(incoming)
                .await;
        });
        let config = test_config(&root, &work, &sock, key, &socket_key);
        let jobs = Arc::new(crate::jobs::JobTable::new(config.jobs.clone()));
        let (_stop, stopping) = tokio::sync::watch::channel(false);
        let link = authenticated_channel(&sock, "executor:a", socket_key);
        let service = ExecutorService::new(Arc::new(config), jobs, link, stopping);
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
                    call_age_ms: 0,
                })
                .await
        });
        assert_eq!(heard(&mut seen).await, Some("rows refused"));
        // The broker gives up on the call while its rows wait to be sent again.
        running.abort();
        assert!(running.await.unwrap_err().is_cancelled());
        assert_eq!(heard(&mut seen).await, Some("rows written"));
        assert_eq!(
            std::fs::read_to_string(work.join("w.txt")).unwrap(),
            "written"
        );
    }
}
