//! The pack host's gRPC service (`Packs`): the broker lists, plans and invokes, or hands a call
//! over in one hop (`Runs`: planned here, judged by the gate on the broker's voucher, invoked on
//! its ticket); an administrator (`glovebox packs list|reload`, `glovebox secret set`) lists and
//! reloads.
//!
//! Invoke acts only on a ticket that verifies under this account's pack key, names this call and
//! tool, is fresh and unused, carries the digest of exactly these parameters, the tool's facts as
//! they are now, and a subject for each path argument the parameters hold. Each invoke sends one
//! `execute` audit row to the gate: the pack, the tool, the arguments' names (those the tool's
//! schema declares) and sizes, never their values.

use std::sync::Arc;
use std::time::{Duration, Instant};

use glovebox_proto::audit_row::{Outcome, RowKind, Source};
use glovebox_proto::transport::handover::peer::{ADMIN, BROKER};
use glovebox_proto::transport::messages::{Answer as _, AnswerStream, answer_each};
use glovebox_proto::transport::{require_peer, required};
use glovebox_proto::v1::{
    self as pb, AuditEvent, ListPacksRequest, ListPacksResponse, PackInvokeRequest,
    PackInvokeResponse, PackPlanRequest, PackPlanResponse, ReloadPacksRequest, ReloadPacksResponse,
    ToolCall, ToolError,
};
use glovebox_proto::{ErrorCode, error::tool_error};
use glovebox_ticket::spent::SpentTickets;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::host::{Host, domain_of};
use crate::pack::CallError;

/// Largest result a pack tool may return, in bytes of JSON.
pub const MAX_RESULT_BYTES: usize = 2 * 1024 * 1024;
/// Most argument names an audit row lists.
const MAX_AUDITED_ARGUMENTS: usize = 32;
/// Calls on the broker's `Runs` stream running at once, over every pack (each pack makes
/// `pack::MAX_CONCURRENT_CALLS` of them at once; the stream is not read further meanwhile).
const MAX_RUNNING_CALLS: usize = 64;

#[derive(Clone)]
pub struct PacksService {
    host: Arc<Host>,
    spent: Arc<SpentTickets>,
    /// Becomes true when the pack host stops: the broker's `Runs` stream then takes no more
    /// calls, answers those it took and ends.
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl PacksService {
    pub fn new(host: Arc<Host>, stopping: tokio::sync::watch::Receiver<bool>) -> PacksService {
        PacksService {
            host,
            spent: Arc::new(SpentTickets::new(glovebox_ticket::spent::MAX_SPENT)),
            stopping,
        }
    }
}

/// A call's pack, tool and parameters, or why it names none.
fn parse_call(
    call: &ToolCall,
    account: &str,
) -> Result<(String, String, serde_json::Map<String, serde_json::Value>), ToolError> {
    if call.account != account {
        return Err(tool_error(
            ErrorCode::Denied,
            "this pack host serves another account",
        ));
    }
    let (pack, tool) = glovebox_proto::packs::split_name(&call.tool).ok_or_else(|| {
        tool_error(
            ErrorCode::UnknownTool,
            format!("{:?} is not a pack tool", call.tool),
        )
    })?;
    let params: serde_json::Value = serde_json::from_str(&call.params_json).map_err(|e| {
        tool_error(
            ErrorCode::InvalidParams,
            format!("params are not JSON: {e}"),
        )
    })?;
    let serde_json::Value::Object(params) = params else {
        return Err(tool_error(
            ErrorCode::InvalidParams,
            "params must be a JSON object",
        ));
    };
    Ok((pack.to_owned(), tool.to_owned(), params))
}

/// What the audit says of a call's arguments: the names the tool's schema declares and every
/// argument's size, never a value.
pub fn arguments_detail(
    params: &serde_json::Map<String, serde_json::Value>,
    schema: &serde_json::Map<String, serde_json::Value>,
) -> String {
    let declared = schema.get("properties").and_then(|p| p.as_object());
    let size = |v: &serde_json::Value| serde_json::to_string(v).map_or(0, |s| s.len());
    let mut named = Vec::new();
    let (mut others, mut other_bytes) = (0usize, 0usize);
    for (name, value) in params {
        if declared.is_some_and(|d| d.contains_key(name)) && named.len() < MAX_AUDITED_ARGUMENTS {
            named.push(format!(
                "{} ({} bytes)",
                name.chars().take(64).collect::<String>(),
                size(value)
            ));
        } else {
            others += 1;
            other_bytes += size(value);
        }
    }
    if others > 0 {
        named.push(format!("{others} other ({other_bytes} bytes)"));
    }
    if named.is_empty() {
        "none".to_owned()
    } else {
        named.join(", ")
    }
}

fn now_ms() -> u64 {
    glovebox_ticket::now_ms().unwrap_or(u64::MAX)
}

impl PacksService {
    fn account(&self) -> &str {
        &self.host.launcher.config.account
    }

    /// Checks `ticket` against this call, its parameters and the tool as it is now; returns the
    /// ticket's body.
    async fn verify(
        &self,
        call: &ToolCall,
        ticket: Option<pb::Ticket>,
    ) -> Result<
        (
            pb::TicketBody,
            crate::host::Found,
            serde_json::Map<String, serde_json::Value>,
        ),
        ToolError,
    > {
        let denied = |m: String| tool_error(ErrorCode::Denied, m);
        let (pack, tool, params) = parse_call(call, self.account())?;
        let ticket =
            ticket.ok_or_else(|| denied("no ticket: the gate has not allowed this call".into()))?;
        let body = self
            .host
            .launcher
            .config
            .key
            .verify(
                &ticket,
                &glovebox_ticket::Expected {
                    account: self.account(),
                    call_id: &call.call_id,
                    tool: &call.tool,
                    now_ms: now_ms(),
                },
            )
            .map_err(|e| denied(format!("ticket refused: {e}")))?;
        self.spent
            .spend(&ticket.mac, body.expires_at_ms, now_ms())
            .map_err(|e| match e {
                glovebox_ticket::spent::SpendError::Full => {
                    tool_error(ErrorCode::Busy, e.to_string())
                }
                glovebox_ticket::spent::SpendError::AlreadyUsed => denied(e.to_string()),
            })?;
        if body.content_tag != glovebox_proto::packs::params_digest(&call.params_json) {
            return Err(tool_error(
                ErrorCode::Changed,
                "the parameters differ from the ones the gate judged",
            ));
        }
        let (found, paths, _) = self.host.plan(&pack, &tool, &params).await?;
        if body.pack.as_ref() != Some(&found.facts) {
            return Err(tool_error(
                ErrorCode::Changed,
                "the pack's tool changed since the call was judged; call it again",
            ));
        }
        let named_tool = body
            .subjects
            .first()
            .is_some_and(|s| s.domain == pb::Domain::Tool as i32 && s.path == call.tool);
        let path_domains: Vec<i32> = body.subjects.iter().skip(1).map(|s| s.domain).collect();
        let wanted: Vec<i32> = paths.iter().map(|a| domain_of(a) as i32).collect();
        if !named_tool || path_domains != wanted {
            return Err(denied(
                "the ticket does not name this tool and each of its path arguments".into(),
            ));
        }
        Ok((body, found, params))
    }
}

/// A call's outcome as the agent sees it.
fn call_outcome(
    outcome: Result<rmcp::model::CallToolResult, CallError>,
) -> Result<String, ToolError> {
    match outcome {
        Ok(result) => {
            let json = serde_json::to_string(&result).map_err(|e| {
                tool_error(
                    ErrorCode::Internal,
                    format!("the result could not be encoded: {e}"),
                )
            })?;
            if json.len() > MAX_RESULT_BYTES {
                return Err(tool_error(
                    ErrorCode::TooLarge,
                    format!(
                        "the tool's result is {} bytes, more than the {MAX_RESULT_BYTES} allowed",
                        json.len()
                    ),
                ));
            }
            Ok(json)
        }
        Err(CallError::Unavailable(why)) => Err(tool_error(ErrorCode::Unavailable, why)),
        Err(CallError::Timeout(limit)) => Err(tool_error(
            ErrorCode::Timeout,
            format!(
                "the pack's server did not answer within {} s; it was told to cancel the call",
                limit.as_secs()
            ),
        )),
        Err(CallError::Exited) => Err(tool_error(
            ErrorCode::Unavailable,
            "the pack's server exited during the call; it starts again on the next call",
        )),
        Err(CallError::Busy) => Err(tool_error(
            ErrorCode::Busy,
            format!(
                "the pack already has {} calls in flight; try again when one ends",
                crate::pack::MAX_CONCURRENT_CALLS
            ),
        )),
        Err(CallError::Failed(why)) => Err(tool_error(
            ErrorCode::Internal,
            format!("the pack's server failed the call: {why}"),
        )),
    }
}

#[tonic::async_trait]
impl pb::packs_server::Packs for PacksService {
    async fn list(
        &self,
        request: Request<ListPacksRequest>,
    ) -> Result<Response<ListPacksResponse>, Status> {
        require_peer(&request, &[BROKER, ADMIN])?;
        Ok(Response::new(self.host.list().await))
    }

    #[tracing::instrument(skip_all, fields(call_id))]
    async fn plan(
        &self,
        request: Request<PackPlanRequest>,
    ) -> Result<Response<PackPlanResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let call = required(request.into_inner().call, "call")?;
        tracing::Span::current().record("call_id", call.call_id.as_str());
        let planned = match parse_call(&call, self.account()) {
            Err(e) => Err(e),
            Ok((pack, tool, params)) => self.host.plan(&pack, &tool, &params).await,
        };
        Ok(Response::new(match planned {
            Ok((found, paths, unjudged)) => Host::plan_response(&found, paths, unjudged),
            Err(e) => PackPlanResponse {
                error: Some(e),
                ..Default::default()
            },
        }))
    }

    #[tracing::instrument(skip_all, fields(call_id))]
    async fn invoke(
        &self,
        request: Request<PackInvokeRequest>,
    ) -> Result<Response<PackInvokeResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let PackInvokeRequest {
            call,
            ticket,
            call_age_ms,
        } = request.into_inner();
        let call = required(call, "call")?;
        tracing::Span::current().record("call_id", call.call_id.as_str());
        Ok(Response::new(
            self.invoke_to_the_end(call, ticket, call_age_ms).await,
        ))
    }

    type InvokeStreamStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<pb::PackInvokeEvent, Status>> + Send>,
    >;

    /// [`Invoke`](Self::invoke), with the server's progress for the call as it comes: the call
    /// runs on its own task as there; the broker dropping the stream withdraws it.
    async fn invoke_stream(
        &self,
        request: Request<PackInvokeRequest>,
    ) -> Result<Response<Self::InvokeStreamStream>, Status> {
        use pb::pack_invoke_event::Event;
        require_peer(&request, &[BROKER])?;
        let PackInvokeRequest {
            call,
            ticket,
            call_age_ms,
        } = request.into_inner();
        let call = required(call, "call")?;
        tracing::Span::current().record("call_id", call.call_id.as_str());
        let (progress, mut progressed) = tokio::sync::mpsc::channel(crate::progress::MAX_QUEUED);
        let (keep, withdrawn) = tokio::sync::oneshot::channel::<()>();
        let service = self.clone();
        let task = tokio::spawn(async move {
            service
                .run(call, (ticket, call_age_ms), withdrawn, Some(progress))
                .await
        });
        let (out, events) = tokio::sync::mpsc::channel(crate::progress::MAX_QUEUED);
        tokio::spawn(async move {
            // Progress until the call is done (its every sender dropped with it), then its end.
            while let Some(p) = progressed.recv().await {
                if out
                    .send(Ok(pb::PackInvokeEvent {
                        event: Some(Event::Progress(p)),
                    }))
                    .await
                    .is_err()
                {
                    // The broker went away: `keep` goes, and the call is withdrawn.
                    return;
                }
            }
            let done = match task.await {
                Ok(response) => Ok(pb::PackInvokeEvent {
                    event: Some(Event::Done(response)),
                }),
                Err(_) => Err(Status::internal("the call failed unexpectedly")),
            };
            let _ = out.send(done).await;
            drop(keep);
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(events),
        )))
    }

    type RunsStream = AnswerStream<pb::PackRunAnswer>;

    async fn runs(
        &self,
        request: Request<tonic::Streaming<pb::PackRunCall>>,
    ) -> Result<Response<Self::RunsStream>, Status> {
        require_peer(&request, &[BROKER])?;
        let service = self.clone();
        Ok(Response::new(answer_each(
            request.into_inner(),
            self.stopping.clone(),
            MAX_RUNNING_CALLS,
            move |asked| {
                let service = service.clone();
                async move { service.run_message(asked).await }
            },
        )))
    }

    async fn reload(
        &self,
        request: Request<ReloadPacksRequest>,
    ) -> Result<Response<ReloadPacksResponse>, Status> {
        require_peer(&request, &[BROKER, ADMIN])?;
        let secret = request.into_inner().secret;
        let restarted = self.host.reload(&secret).await;
        tracing::info!(account = %self.account(), ?restarted, "packs reloaded");
        Ok(Response::new(ReloadPacksResponse { restarted }))
    }
}

impl PacksService {
    /// [`Self::run`] on a task of its own: if the caller stops waiting (the broker withdrew the
    /// call, or its stream or connection ended), `withdrawn` fires, and the task tells the pack's
    /// server to cancel and still audits the call.
    async fn invoke_to_the_end(
        &self,
        call: ToolCall,
        ticket: Option<pb::Ticket>,
        call_age_ms: u64,
    ) -> PackInvokeResponse {
        let (keep, withdrawn) = tokio::sync::oneshot::channel::<()>();
        let service = self.clone();
        let task = tokio::spawn(async move {
            service
                .run(call, (ticket, call_age_ms), withdrawn, None)
                .await
        });
        let response = task.await.unwrap_or_else(|_| PackInvokeResponse {
            error: Some(tool_error(
                ErrorCode::Internal,
                "the call failed unexpectedly",
            )),
            ..Default::default()
        });
        drop(keep);
        response
    }

    /// One message of the broker's `Runs` stream, answered.
    async fn run_message(&self, asked: pb::PackRunCall) -> pb::PackRunAnswer {
        let span = glovebox_trace::propagation::message_server_span(
            "glovebox.v1.Packs",
            "Run",
            &asked.trace,
        );
        let ran = match asked.body {
            Some(pb::pack_run_call::Body::Run(request)) => {
                self.run_in_one_hop(request).instrument(span).await
            }
            _ => Err(Status::invalid_argument("a message with no call in it")),
        };
        match ran {
            Ok(ran) => pb::PackRunAnswer {
                id: asked.id,
                body: Some(pb::pack_run_answer::Body::Ran(ran)),
            },
            Err(status) => pb::PackRunAnswer::failed(asked.id, status),
        }
    }

    /// A pack call the broker handed over in one hop: planned; if it has no path arguments,
    /// judged by the gate on the broker's voucher; if allowed, made on the ticket (as `Invoke`
    /// makes it). Otherwise its plan (and verdict) go back for the broker to go on with.
    #[tracing::instrument(skip_all, fields(call_id))]
    async fn run_in_one_hop(
        &self,
        request: pb::PackRunRequest,
    ) -> Result<pb::PackRunResponse, Status> {
        let pb::PackRunRequest {
            call,
            voucher,
            call_age_ms,
        } = request;
        let (call, voucher) = (required(call, "call")?, required(voucher, "voucher")?);
        tracing::Span::current().record("call_id", call.call_id.as_str());
        let failed = |e: ToolError| {
            Ok(pb::PackRunResponse {
                error: Some(e),
                ..Default::default()
            })
        };
        let planned = match parse_call(&call, self.account()) {
            Ok((pack, tool, params)) => self.host.plan(&pack, &tool, &params).await,
            Err(e) => Err(e),
        };
        let (found, paths, unjudged) = match planned {
            Ok(planned) => planned,
            Err(e) => return failed(e),
        };
        let facts = found.facts.clone();
        let has_paths = !paths.is_empty();
        let planned = Host::plan_response(&found, paths, unjudged);
        if has_paths {
            // Its paths are the executor's to resolve: the broker goes on as after a `Plan`.
            return Ok(pb::PackRunResponse {
                planned: Some(planned),
                ..Default::default()
            });
        }
        let plan = glovebox_proto::packs::plan_of(&call.tool, facts, Vec::new());
        let mut decision = match self.decide(&call, plan, voucher).await {
            Ok(decision) => decision,
            Err(e) => return failed(e),
        };
        if pb::Verdict::try_from(decision.verdict) != Ok(pb::Verdict::Allow) {
            return Ok(pb::PackRunResponse {
                planned: Some(planned),
                decision: Some(decision),
                ..Default::default()
            });
        }
        let ticket = decision.ticket.take();
        let invoked = self.invoke_to_the_end(call, ticket, call_age_ms).await;
        Ok(pb::PackRunResponse {
            decision: Some(decision),
            invoked: Some(invoked),
            ..Default::default()
        })
    }

    /// The gate's verdict on a call the broker vouched for (a `decide` on `ExecutorGate.Calls`),
    /// or why there is none (the gate refused to judge it, is gone, or took longer than
    /// [`GATE_TIMEOUT`](crate::gate_link::GATE_TIMEOUT)).
    async fn decide(
        &self,
        call: &ToolCall,
        plan: pb::Plan,
        voucher: pb::Voucher,
    ) -> Result<pb::DecideResponse, ToolError> {
        let request = pb::VouchedDecideRequest {
            call: Some(call.clone()),
            plan: Some(plan),
            voucher: Some(voucher),
            done_ahead: None,
            deliver: None,
        };
        let asked = self.host.launcher.gate.calls.verdict(request);
        match tokio::time::timeout(crate::gate_link::GATE_TIMEOUT, asked).await {
            Ok(verdict) => verdict.map_err(|(code, why)| tool_error(code, why)),
            // Asked, and maybe judged: not made all the same, as if the gate were gone.
            Err(_) => Err(tool_error(
                ErrorCode::Unavailable,
                "the gate did not answer in time; the call was not run",
            )),
        }
    }

    /// Makes a call on its ticket (`ticket`, and how long the call had run in the broker) and
    /// audits it: a call made on a valid ticket has its execute and result rows committed
    /// together (the broker writes no result row of its own); one refused or withdrawn, its
    /// execute row alone (the broker writes the result).
    async fn run(
        &self,
        call: ToolCall,
        (ticket, call_age_ms): (Option<pb::Ticket>, u64),
        withdrawn: tokio::sync::oneshot::Receiver<()>,
        progress: Option<tokio::sync::mpsc::Sender<pb::PackProgress>>,
    ) -> PackInvokeResponse {
        let started = Instant::now();
        let mut event = AuditEvent {
            call_id: call.call_id.clone(),
            client_call_id: call.client_call_id.clone(),
            account: self.account().to_owned(),
            source: Source::Packs.into(),
            kind: RowKind::Execute.into(),
            tool: call.tool.clone(),
            ..Default::default()
        };
        // The ticket the call ran on, kept for its rows: none once it is refused or withdrawn.
        let mut ran_on = ticket.clone();
        let mut server_error = false;
        let outcome = match self.verify(&call, ticket).await {
            Err(e) => {
                event.outcome = Outcome::Refused.into();
                ran_on = None;
                Err(e)
            }
            Ok((body, found, params)) => {
                event.subjects = body.subjects.clone();
                event.approval = body.approval.clone();
                event.detail = format!(
                    "pack {}, tool {}; arguments: {}",
                    found.pack.def.name,
                    found.tool.name,
                    arguments_detail(&params, &found.tool.input_schema)
                );
                let limit = Duration::from_secs(found.pack.def.timeout_s);
                let call_tool = found.pack.call(
                    &self.host.launcher,
                    &found.tool.name,
                    params,
                    limit,
                    progress,
                );
                tokio::select! {
                    outcome = call_tool => {
                        if let Ok(r) = &outcome && r.is_error == Some(true) {
                            event.detail.push_str("; the tool reported an error");
                            server_error = true;
                        }
                        call_outcome(outcome)
                    }
                    _ = withdrawn => {
                        event.outcome = Outcome::Cancelled.into();
                        ran_on = None;
                        Err(tool_error(ErrorCode::Cancelled, "the call was withdrawn; the pack's server was told to cancel it"))
                    }
                }
            }
        };
        let mut response = answer(outcome, &mut event);
        event.duration_ms = started.elapsed().as_millis() as u64;
        let durable = glovebox_proto::transport::AUDIT_DURABLE_LIMIT;
        let gate = &self.host.launcher.gate;
        let written = match ran_on {
            Some(ticket) => {
                let age = call_age_ms.saturating_add(event.duration_ms);
                let rows = pb::CallRows {
                    result: Some(result_row(&event, &response, server_error, age)),
                    execute: Some(event),
                    ticket: Some(ticket),
                };
                let each = glovebox_proto::transport::AUDIT_ATTEMPT_LIMIT;
                let written = glovebox_proto::transport::durably(durable, || {
                    gate.calls.append_call(rows.clone(), each)
                })
                .await;
                response.result_audited = written.is_ok();
                written
            }
            None => glovebox_proto::transport::append_durably(&gate.audit, event, durable).await,
        };
        if let Err(status) = written {
            tracing::error!(error = %status.message(), "could not send the audit event to the gate");
            return PackInvokeResponse {
                result_json: String::new(),
                error: Some(tool_error(
                    ErrorCode::Unavailable,
                    "the call ran, but its audit row could not be written; it is reported as failed",
                )),
                result_audited: false,
            };
        }
        response
    }
}

/// A pack call's result row, as the broker answers it: `ok`; an error (`tool_error`) when the
/// pack's server answered with `isError`; or the call's error.
fn result_row(
    execute: &AuditEvent,
    response: &PackInvokeResponse,
    server_error: bool,
    duration_ms: u64,
) -> AuditEvent {
    let mut row = AuditEvent {
        call_id: execute.call_id.clone(),
        client_call_id: execute.client_call_id.clone(),
        account: execute.account.clone(),
        source: Source::Packs.into(),
        kind: RowKind::Result.into(),
        tool: execute.tool.clone(),
        duration_ms,
        ..Default::default()
    };
    match &response.error {
        None if server_error => {
            row.outcome = Outcome::Error.into();
            row.error_code = glovebox_proto::packs::SERVER_ERROR_CODE.into();
            row.reason = glovebox_proto::packs::SERVER_ERROR_REASON.into();
        }
        None => row.outcome = Outcome::Ok.into(),
        Some(e) => glovebox_proto::audit_row::note_failure(&mut row, e),
    }
    row
}

/// The reply to an invoke, and its outcome in the execute row: `ok` and the bytes returned, or
/// the error (`error` unless the row already says why, as `refused` or `cancelled`).
fn answer(outcome: Result<String, pb::ToolError>, event: &mut AuditEvent) -> PackInvokeResponse {
    match outcome {
        Ok(json) => {
            event.outcome = Outcome::Ok.into();
            event.bytes = json.len() as u64;
            PackInvokeResponse {
                result_json: json,
                error: None,
                result_audited: false,
            }
        }
        Err(e) => {
            if event.outcome.is_empty() {
                event.outcome = Outcome::Error.into();
            }
            event.error_code = e.code.clone();
            event.reason = e.message.clone();
            PackInvokeResponse {
                result_json: String::new(),
                error: Some(e),
                result_audited: false,
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_audit_names_declared_arguments_and_sizes_never_values() {
        let schema = json!({"type": "object", "properties": {"path": {}, "content": {}}});
        let params = json!({"path": "a.txt", "content": "hunter2", "sk-live-abcdef": "x"});
        let d = arguments_detail(params.as_object().unwrap(), schema.as_object().unwrap());
        assert_eq!(d, "content (9 bytes), path (7 bytes), 1 other (3 bytes)");
        assert!(!d.contains("hunter2") && !d.contains("sk-live"));
        assert_eq!(
            arguments_detail(&serde_json::Map::new(), schema.as_object().unwrap()),
            "none"
        );
    }

    #[test]
    fn calls_name_a_pack_tool_of_this_account_with_object_params() {
        let call = |account: &str, tool: &str, params: &str| ToolCall {
            account: account.into(),
            tool: tool.into(),
            params_json: params.into(),
            ..Default::default()
        };
        assert!(parse_call(&call("a", "e__echo", "{}"), "a").is_ok());
        for (c, code) in [
            (call("b", "e__echo", "{}"), "denied"),
            (call("a", "file_read", "{}"), "unknown_tool"),
            (call("a", "client__x", "{}"), "unknown_tool"),
            (call("a", "e__echo", "[]"), "invalid_params"),
            (call("a", "e__echo", "{"), "invalid_params"),
        ] {
            assert_eq!(parse_call(&c, "a").unwrap_err().code, code, "{c:?}");
        }
    }
}
