//! One call, end to end: validate → plan (executor) → decide (gate) → ask (approver) →
//! execute (executor) → result — for a built-in tool, plan, decide and an allowed execute in one
//! hop (`Executor.Run`, the executor asking the gate with the broker's voucher) — with a final audit event: the broker's own, unless the executor
//! already committed it with its execute row (a built-in call that ran on its ticket). Fails
//! closed at every step: a backend that cannot be reached means the call is refused, never that
//! a check is skipped.

use std::time::Instant;

use glovebox_telemetry::spans;
use tracing::Instrument;

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::Tool;
use glovebox_proto::transport::messages::AnsweredElsewhere;
use glovebox_proto::v1::{
    self as pb, Answer, AuditEvent, DecideRequest, DecideResponse, ExecuteRequest, Plan,
    PreviewRequest, ResolveRequest, RunRequest, Ticket, ToolCall,
};
use glovebox_proto::ws::{AskDisplay, AskSubject, Decision, ServerFrame, WireError};

use crate::answer::{CallAnswer, CallValue};
use crate::app::App;
use crate::asks::AskOutcome;
use crate::backends::request;

tokio::task_local! {
    /// What is known of the call this task runs.
    static CALL: CallFacts;
}

/// What is known of a running call beyond its result.
struct CallFacts {
    started: Instant,
    /// The gate's verdict, for the call's metrics (`none` until decided).
    verdict: std::cell::Cell<&'static str>,
    /// The executor committed the call's result row with its execute row: the broker writes none.
    result_audited: std::cell::Cell<bool>,
}

/// Who made a call: the authenticated account and the connection it came on.
#[derive(Debug, Clone)]
pub struct Origin {
    pub account: String,
    pub connection_id: String,
    pub profile: crate::profiles::Profile,
    /// The caller takes results' collections as tables, the MCP form (`mcp_form`): the
    /// executor makes them so, and nothing on the way reads and rewrites the rows.
    pub tables: bool,
}

/// The credential `headers` carry when it is `role`'s: otherwise the answer to send (401
/// without a valid one; 403 for another role's, audited as used for `wanted`).
pub async fn credential_for(
    app: &App,
    headers: &http::HeaderMap,
    role: glovebox_proto::ws::Role,
    wanted: &str,
) -> Result<crate::auth::Authenticated, axum::response::Response> {
    let Some(who) = crate::auth::credential_of(&app.credentials, headers) else {
        return Err(crate::auth::unauthorized());
    };
    if who.role != role {
        audit_auth_refusal(app, &who, wanted).await;
        return Err(crate::auth::wrong_role(role));
    }
    Ok(who)
}

/// Audits a valid credential used for a role it does not have (kind `auth`, outcome `refused`):
/// an agent token asking to approve is an attack worth an administrator's attention.
pub async fn audit_auth_refusal(app: &App, who: &crate::auth::Authenticated, wanted: &str) {
    let event = AuditEvent {
        account: who.account.clone(),
        source: "broker".into(),
        kind: "auth".into(),
        outcome: "refused".into(),
        reason: format!(
            "the account's {} credential was used for {wanted}",
            who.role.as_str()
        ),
        ..Default::default()
    };
    tracing::warn!(account = %who.account, role = who.role.as_str(), %wanted, "refused a credential used for another role");
    if let Err(status) = app.backends.audit.clone().append(request(event)).await {
        tracing::error!(error = %status.message(), "could not send the audit event to the gate");
    }
}

/// A call's ids: the broker's (unique) and the agent's (a label).
pub struct CallIds {
    pub server: String,
    pub client: String,
}

impl CallIds {
    pub(crate) fn tool_call(
        &self,
        account: &str,
        tool: &str,
        params: &serde_json::Value,
    ) -> ToolCall {
        ToolCall {
            account: account.to_owned(),
            call_id: self.server.clone(),
            tool: tool.to_owned(),
            params_json: params.to_string(),
            client_call_id: self.client.clone(),
        }
    }
}

tokio::task_local! {
    /// Where the progress of the call run in this scope goes, when its client asked for it (an
    /// MCP `progressToken`): a pack call then streams its server's progress here.
    pub static PROGRESS: tokio::sync::mpsc::Sender<pb::PackProgress>;
}

/// Progress reports queued for one call at most (more are dropped until its client catches up).
const PROGRESS_QUEUE: usize = 32;

/// Runs `call` with the progress of its pack's server going to `relay` (spawned with the
/// receiving end; it should return when the client is gone), and returns the call's answer once
/// `relay` has passed on every report made before it: a client sees progress, then the answer.
pub async fn with_progress<T, R>(
    call: impl Future<Output = T>,
    relay: impl FnOnce(tokio::sync::mpsc::Receiver<pb::PackProgress>) -> R,
) -> T
where
    R: Future<Output = ()> + Send + 'static,
{
    let (to, progressed) = tokio::sync::mpsc::channel(PROGRESS_QUEUE);
    let relay = tokio::spawn(relay(progressed));
    let answer = PROGRESS.scope(to, call).await;
    let _ = relay.await;
    answer
}

/// Runs one call and returns its answer.
/// Its span names the account, the connection and the call (the log lines of the call carry them).
#[tracing::instrument(
    skip_all,
    fields(
        account = %origin.account,
        connection = %origin.connection_id,
        call_id = %call_id,
        tool = %tool,
    )
)]
pub async fn run_call(
    app: &App,
    origin: &Origin,
    call_id: &str,
    tool: &str,
    params: serde_json::Value,
    cancelled: tokio::sync::watch::Receiver<bool>,
) -> CallAnswer {
    let account = origin.account.as_str();
    let started = Instant::now();
    // The call's own id, made here: tickets and audit rows name it, so two calls never merge
    // however the agent names them; the agent's id stays a label (and is what it is answered by).
    let ids = CallIds {
        server: crate::asks::new_ordered_id("call"),
        client: call_id.to_owned(),
    };
    // The call's trace: its root span, current while the call runs so every backend request
    // carries its context.
    let span = spans::call(account, tool);
    app.asks.activity(account, true);
    let facts = CallFacts {
        started,
        verdict: std::cell::Cell::new("none"),
        result_audited: std::cell::Cell::new(false),
    };
    let (outcome, verdict, result_audited) = CALL
        .scope(facts, async {
            let outcome = async {
                match enter(app, account, cancelled.clone()).await {
                    Ok(place) => {
                        let call = steps(app, origin, &ids, tool, params, cancelled);
                        crate::call_slots::holding(&app.calls, place, call).await
                    }
                    Err(error) => Err(error),
                }
            }
            .instrument(span.clone())
            .await;
            let (verdict, audited) = CALL.with(|c| (c.verdict.get(), c.result_audited.get()));
            (outcome, verdict, audited)
        })
        .await;
    app.asks.activity(account, false);
    let mut event = AuditEvent {
        call_id: ids.server.clone(),
        client_call_id: ids.client.clone(),
        account: account.to_owned(),
        source: "broker".into(),
        kind: "result".into(),
        tool: tool.chars().take(64).collect(),
        duration_ms: started.elapsed().as_millis() as u64,
        ..Default::default()
    };
    match &outcome {
        // A pack server's own error (`isError`) is answered as the server gave it, and audited
        // as an error.
        Ok(crate::answer::CallValue::Tree(value)) if crate::mcp::is_pack_error(tool, value) => {
            event.outcome = "error".into();
            event.error_code = "tool_error".into();
            event.reason = "the pack's server answered with an error (isError)".into();
        }
        Ok(_) => event.outcome = "ok".into(),
        Err(error) => {
            event.outcome = error.code.result_outcome().into();
            event.error_code = error.code.as_str().into();
            event.reason = error
                .deny_reason
                .clone()
                .unwrap_or_else(|| error.message.clone());
            event.rule = error.rule.clone().unwrap_or_default();
        }
    }
    let answer = CallAnswer {
        call_id: call_id.to_owned(),
        outcome,
    };
    // A result is answered only once its row is in the audit (waiting for a gate that is
    // restarting); if it cannot be written, the call is reported failed. The executor's row,
    // when it wrote one, was committed before it answered.
    spans::record_outcome(&span, &event.outcome);
    glovebox_telemetry::metrics::broker().call(
        tool,
        verdict,
        &event.outcome,
        started.elapsed().as_secs_f64(),
    );
    if tool == "exec_run" && event.outcome == "ok" {
        glovebox_telemetry::metrics::broker().job_started();
    }
    if result_audited {
        return answer;
    }
    let durable = glovebox_proto::transport::AUDIT_DURABLE_LIMIT;
    if let Err(status) =
        glovebox_proto::transport::append_durably(&app.backends.audit, event, durable)
            .instrument(span)
            .await
    {
        tracing::error!(error = %status.message(), "could not send the audit event to the gate");
        return CallAnswer {
            outcome: Err(WireError::new(
                ErrorCode::Unavailable,
                "the call's result could not be written to the audit; it is reported as failed",
            )),
            ..answer
        };
    }
    answer
}

/// Waits for a place among the account's running calls (see `call_slots`), or for the call to
/// be cancelled.
async fn enter(
    app: &App,
    account: &str,
    mut cancelled: tokio::sync::watch::Receiver<bool>,
) -> Result<crate::call_slots::Permit, WireError> {
    let withdrawn = async {
        // A call whose canceller is gone can no longer be cancelled.
        if cancelled.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        permit = app.calls.enter(account) => permit.ok_or_else(|| unavailable("the broker")),
        () = withdrawn => Err(WireError::new(
            ErrorCode::Busy,
            "the call was cancelled while it waited for the account's running calls",
        )),
    }
}

pub(crate) fn unavailable(what: &str) -> WireError {
    WireError::new(
        ErrorCode::Unavailable,
        format!("{what} is unavailable; the call was not run"),
    )
}

pub(crate) fn from_tool_error(e: pb::ToolError) -> WireError {
    let code = ErrorCode::parse(&e.code).unwrap_or(ErrorCode::Internal);
    WireError::new(code, e.message)
}

async fn steps(
    app: &App,
    origin: &Origin,
    ids: &CallIds,
    tool_name: &str,
    params: serde_json::Value,
    cancelled: tokio::sync::watch::Receiver<bool>,
) -> Result<CallValue, WireError> {
    admit(origin, tool_name)?;
    if let Some(bare) = glovebox_proto::client_tools::bare_name(tool_name) {
        return client_tool(app, origin, ids, tool_name, bare, params, cancelled)
            .await
            .map(CallValue::Tree);
    }
    if let Some(pack_tool) = glovebox_proto::packs::split_name(tool_name) {
        return crate::packs::pack_call(app, origin, ids, tool_name, pack_tool, params, cancelled)
            .await
            .map(CallValue::Tree);
    }
    builtin(app, origin, ids, tool_name, params, cancelled).await
}

/// Refuses a call before anything else when the tool is not for this connection's profile (a
/// `web` connection, a browser tab, gets client tools only). Whether the account's tools are on
/// is the gate's decision, like everything else about the call.
fn admit(origin: &Origin, tool_name: &str) -> Result<(), WireError> {
    if !origin.profile.allows(tool_name) {
        return Err(WireError::denied(
            format!(
                "{tool_name} is not available to {} connections",
                origin.profile.as_str()
            ),
            "profile",
        ));
    }
    Ok(())
}

/// A built-in tool: params checked against its type, planned and executed by the account's
/// executor, authorized by the gate in between.
async fn builtin(
    app: &App,
    origin: &Origin,
    ids: &CallIds,
    tool_name: &str,
    params: serde_json::Value,
    cancelled: tokio::sync::watch::Receiver<bool>,
) -> Result<CallValue, WireError> {
    let account = origin.account.as_str();
    let tool = Tool::from_name(tool_name).ok_or_else(|| {
        WireError::new(
            ErrorCode::UnknownTool,
            format!(
                "no tool is named {:?}; list the tools to see which exist",
                truncated(tool_name)
            ),
        )
    })?;
    let parsed = tool
        .parse_params(&params)
        .map_err(|e| WireError::new(ErrorCode::InvalidParams, e))?;
    // A whole-file read the executor may make ahead of its verdict: its answer is taken from
    // the gate, which hands it over once it has allowed and audited the call.
    let deliver_via_gate = parsed.reads_whole_file();
    let call = ids.tool_call(account, tool_name, &params);
    let crate::backends::ExecutorLink {
        runs,
        client: mut executor,
    } = app
        .backends
        .executor_link(account)
        .ok_or_else(|| unavailable("the account's executor"))?;
    // Plan, decide and (on an allow) execute in one hop: the executor asks the gate itself,
    // with the broker's voucher that this call was made.
    let voucher = app
        .backends
        .vouchers
        .vouch(&call, glovebox_ticket::now_ms().unwrap_or(0));
    // Given up after the same time as any backend request, cancelled on the executor then.
    let expected = match deliver_via_gate {
        true => app.backends.deliveries.expect(account, &call.call_id).await,
        false => None,
    };
    let run = RunRequest {
        call: Some(call.clone()),
        voucher: Some(voucher),
        call_age_ms: call_age_ms(),
        tables: origin.tables,
        deliver_via_gate: expected.is_some(),
    };
    let elsewhere = AnsweredElsewhere::default();
    let running = runs.run_unless_answered(run, &elsewhere);
    let answered = async {
        match expected {
            Some(expected) => {
                crate::deliveries::run_or_delivered(running, expected, &elsewhere).await
            }
            None => running.await,
        }
    };
    let ran = tokio::time::timeout(crate::backends::BACKEND_TIMEOUT, answered)
        .await
        .map_err(|_| executor_failed())?
        .map_err(|_| executor_failed())?;
    if let Some(e) = ran.error {
        return Err(from_tool_error(e));
    }
    let decided = ran
        .decision
        .ok_or_else(|| WireError::new(ErrorCode::Internal, "the executor returned no verdict"))?;
    let verdict = note_verdict(&decided);
    let executed = match (verdict, ran.executed, ran.plan) {
        (pb::Verdict::Allow, Some(executed), _) => executed,
        (_, None, Some(plan)) => {
            let ticket = settle(
                app,
                origin,
                &call,
                &plan,
                (verdict, decided),
                cancelled.clone(),
                Preview::Executor,
            )
            .await?;
            // A call withdrawn while it was being judged is not run.
            if *cancelled.borrow() {
                return Err(withdrawn());
            }
            executor
                .execute(request(ExecuteRequest {
                    call: Some(call),
                    ticket: Some(ticket),
                    call_age_ms: call_age_ms(),
                    tables: origin.tables,
                }))
                .await
                .map_err(|_| executor_failed())?
                .into_inner()
        }
        _ => {
            return Err(WireError::new(
                ErrorCode::Internal,
                "the executor's answer does not fit its verdict",
            ));
        }
    };
    // The executor's result row says what it answered. A result the broker cannot pass on is
    // a failure the executor's row does not know of: the broker writes its own row besides.
    let result_audited = executed.result_audited;
    let audited = move || {
        if result_audited {
            let _ = CALL.try_with(|c| c.result_audited.set(true));
        }
    };
    if let Some(e) = executed.error {
        audited();
        return Err(from_tool_error(e));
    }
    let value = CallValue::from_parts(executed.result_json, executed.table)
        .ok_or_else(crate::answer::malformed)?;
    audited();
    Ok(value)
}

/// How long the running call has run so far, in milliseconds.
fn call_age_ms() -> u64 {
    CALL.try_with(|c| c.started.elapsed().as_millis() as u64)
        .unwrap_or(0)
}

fn executor_failed() -> WireError {
    WireError::new(
        ErrorCode::Unavailable,
        "the account's executor failed during the call; it was not retried",
    )
}

/// What the approver is shown as the preview of an ask.
pub(crate) enum Preview {
    /// The executor renders it (a diff for writes; command, shell and cwd for exec).
    Executor,
    Text(PreviewText),
}

/// A preview's text, and whether it was cut at its limit (then allowing needs a confirmation).
pub(crate) struct PreviewText {
    pub text: String,
    pub cut: bool,
}

/// The warning of an ask whose preview was cut.
pub(crate) const PREVIEW_CUT_WARNING: &str =
    "the preview was cut at its limit: allowing allows what is not shown too (confirm to allow)";

/// Largest preview of a client tool's input, in bytes.
const MAX_INPUT_PREVIEW: usize = 16 * 1024;

/// The gate's verdict on a planned call, asking the approver when it says ask. A ticket means go.
pub(crate) async fn authorize(
    app: &App,
    origin: &Origin,
    call: &ToolCall,
    plan: &Plan,
    cancelled: tokio::sync::watch::Receiver<bool>,
    preview: Preview,
) -> Result<Ticket, WireError> {
    let deciding = app.backends.decisions.decide(DecideRequest {
        call: Some(call.clone()),
        plan: Some(plan.clone()),
    });
    let decided = tokio::time::timeout(crate::backends::BACKEND_TIMEOUT, deciding)
        .await
        .map_err(|_| unavailable("the gate"))?
        .map_err(|_| unavailable("the gate"))?;
    let verdict = note_verdict(&decided);
    settle(
        app,
        origin,
        call,
        plan,
        (verdict, decided),
        cancelled,
        preview,
    )
    .await
}

/// Records the gate's verdict on the running call (its span and metrics) and returns it; anything
/// the broker does not know is a deny.
fn note_verdict(decided: &DecideResponse) -> pb::Verdict {
    let verdict = match pb::Verdict::try_from(decided.verdict) {
        Ok(v @ (pb::Verdict::Allow | pb::Verdict::Ask)) => v,
        _ => pb::Verdict::Deny,
    };
    let said = match verdict {
        pb::Verdict::Allow => "allow",
        pb::Verdict::Ask => "ask",
        _ => "deny",
    };
    spans::record_verdict(said);
    let _ = CALL.try_with(|c| c.verdict.set(said));
    verdict
}

/// What the gate's verdict on a planned call (as [`note_verdict`] read it) comes to: its ticket
/// on an allow, the approver's answer on an ask, a refusal on a deny.
async fn settle(
    app: &App,
    origin: &Origin,
    call: &ToolCall,
    plan: &Plan,
    (verdict, decided): (pb::Verdict, DecideResponse),
    cancelled: tokio::sync::watch::Receiver<bool>,
    preview: Preview,
) -> Result<Ticket, WireError> {
    let ticket = match verdict {
        pb::Verdict::Allow => decided.ticket,
        pb::Verdict::Ask => Some(
            ask(
                app,
                call,
                plan,
                &origin.connection_id,
                cancelled,
                preview,
                &decided.warnings,
            )
            .await?,
        ),
        _ => return Err(WireError::denied(decided.reason, decided.rule)),
    };
    ticket.ok_or_else(|| {
        WireError::new(
            ErrorCode::Internal,
            "the gate allowed the call without a ticket",
        )
    })
}

/// A call to a provider's tool (`client__<name>`): judged by the gate like any call, then routed
/// to the most recent provider of the caller's own account.
async fn client_tool(
    app: &App,
    origin: &Origin,
    ids: &CallIds,
    exposed: &str,
    bare: &str,
    params: serde_json::Value,
    cancelled: tokio::sync::watch::Receiver<bool>,
) -> Result<serde_json::Value, WireError> {
    if !params.is_object() {
        return Err(WireError::new(
            ErrorCode::InvalidParams,
            "params must be a JSON object",
        ));
    }
    let Some(schema) = app.registry.input_schema(&origin.account, bare) else {
        return Err(WireError::new(
            ErrorCode::NoClient,
            "no connected client provides this tool",
        ));
    };
    // Held to what its provider said it takes, before anyone is asked.
    crate::input_check::check_input(&schema, &params)
        .map_err(|why| WireError::new(ErrorCode::InvalidParams, why))?;
    let call = ids.tool_call(&origin.account, exposed, &params);
    let plan = Plan {
        subjects: vec![pb::Subject {
            domain: pb::Domain::Tool as i32,
            path: exposed.to_owned(),
            state: None,
        }],
        content_tag: Vec::new(),
        pack: None,
    };
    let preview = Preview::Text(input_preview(&params, "input"));
    let mut cancelled = cancelled;
    authorize(app, origin, &call, &plan, cancelled.clone(), preview).await?;
    if *cancelled.borrow() {
        return Err(withdrawn());
    }
    // Withdrawn while the provider works: stop waiting (the protocol has no way to tell it).
    tokio::select! {
        result = app.registry.invoke(&origin.account, bare, params, &ids.client) => result.map_err(registry_error),
        _ = until_true(&mut cancelled) => Err(withdrawn()),
    }
}

/// The error of a call its client withdrew.
fn withdrawn() -> WireError {
    WireError::new(ErrorCode::Cancelled, "the call was cancelled by its client")
}

/// Completes when `flag` becomes true; never if its sender is gone first.
async fn until_true(flag: &mut tokio::sync::watch::Receiver<bool>) {
    if flag.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A name as error messages quote it: at most 64 characters.
fn truncated(name: &str) -> String {
    name.chars().take(64).collect()
}

/// What the approver is shown of a client tool's input: pretty JSON, cut at
/// [`MAX_INPUT_PREVIEW`] bytes (on a character boundary).
pub(crate) fn input_preview(params: &serde_json::Value, label: &str) -> PreviewText {
    let mut shown = serde_json::to_string_pretty(params).unwrap_or_default();
    let cut = glovebox_proto::display::truncate_at_char(&mut shown, MAX_INPUT_PREVIEW);
    if cut {
        shown.push_str(&format!("\n[{label} truncated]"));
    }
    PreviewText {
        text: format!("{label}:\n{shown}\n"),
        cut,
    }
}

fn registry_error(e: crate::registry::RegistryError) -> WireError {
    use crate::registry::RegistryError;
    match e {
        RegistryError::NoClient => WireError::new(
            ErrorCode::NoClient,
            "no connected client provides this tool",
        ),
        RegistryError::ClientDisconnected => WireError::new(
            ErrorCode::ClientDisconnected,
            "the client disconnected before it answered",
        ),
        RegistryError::Timeout => {
            WireError::new(ErrorCode::Timeout, "the client did not answer in time")
        }
        RegistryError::TooManyConnections => {
            WireError::new(ErrorCode::Busy, "too many client connections")
        }
        RegistryError::Failed(message) => WireError::new(
            ErrorCode::ClientError,
            format!("the client tool failed: {message}"),
        ),
    }
}

/// Shows the call to the account's approver and turns the answer into a ticket (or a denial).
async fn ask(
    app: &App,
    call: &ToolCall,
    plan: &Plan,
    connection_id: &str,
    cancelled: tokio::sync::watch::Receiver<bool>,
    preview: Preview,
    gate_warnings: &[String],
) -> Result<Ticket, WireError> {
    let ask_span = spans::ask();
    let asked = Instant::now();
    // Without an approver, deny at once: no preview, no waiting.
    let outcome = if app.asks.approver_count(&call.account) == 0 {
        AskOutcome::NoApprover
    } else {
        let shown = Shown {
            call,
            plan,
            connection_id,
            preview: preview_text(app, call, plan, preview).await?,
            gate_warnings,
        };
        let metrics = glovebox_telemetry::metrics::broker();
        metrics.asks_pending(1);
        // Waiting for a person holds none of the account's running places.
        let outcome =
            crate::call_slots::set_aside(show(app, shown, cancelled).instrument(ask_span.clone()))
                .await;
        metrics.asks_pending(-1);
        outcome
    };
    let approval = approval_of(&outcome);
    glovebox_telemetry::metrics::broker().ask(approval, asked.elapsed().as_secs_f64());
    spans::record_approval(&ask_span, approval);
    spans::record_approval(&tracing::Span::current(), approval);
    drop(ask_span);
    let answer = answer_of(outcome)?;
    let mut gate = app.backends.gate.clone();
    let resolved = gate
        .resolve(request(ResolveRequest {
            call: Some(call.clone()),
            plan: Some(plan.clone()),
            answer: answer as i32,
        }))
        .await
        .map_err(|_| unavailable("the gate"))?
        .into_inner();
    match (resolved.granted, resolved.ticket) {
        (true, Some(ticket)) => Ok(ticket),
        _ => Err(WireError::denied(resolved.reason, resolved.rule)),
    }
}

/// How an ask ended, as the `glovebox.approval` attribute says it.
fn approval_of(outcome: &AskOutcome) -> &'static str {
    match outcome {
        AskOutcome::Answered(Decision::Once) => "once",
        AskOutcome::Answered(Decision::Always) => "always",
        AskOutcome::Answered(Decision::Deny) => "deny",
        AskOutcome::Timeout => "timeout",
        AskOutcome::NoApprover => "no_approver",
        AskOutcome::ApproverGone => "approver_gone",
        AskOutcome::Busy => "busy",
        AskOutcome::Cancelled => "cancelled",
    }
}

/// The preview text of an ask: given, or rendered by the account's executor.
async fn preview_text(
    app: &App,
    call: &ToolCall,
    plan: &Plan,
    preview: Preview,
) -> Result<PreviewText, WireError> {
    match preview {
        Preview::Text(text) => Ok(text),
        Preview::Executor => {
            let mut executor = app
                .backends
                .executor(&call.account)
                .ok_or_else(|| unavailable("the account's executor"))?;
            let preview = executor
                .preview(request(PreviewRequest {
                    call: Some(call.clone()),
                    plan: Some(plan.clone()),
                }))
                .await
                .map_err(|_| unavailable("the account's executor"))?
                .into_inner();
            match preview.error {
                Some(e) => Err(from_tool_error(e)),
                None => Ok(PreviewText {
                    text: preview.text,
                    cut: preview.truncated,
                }),
            }
        }
    }
}

/// What an ask shows the approver.
struct Shown<'a> {
    call: &'a ToolCall,
    plan: &'a Plan,
    /// The agent connection that made the call.
    connection_id: &'a str,
    preview: PreviewText,
    gate_warnings: &'a [String],
}

/// Puts the ask before the account's approvers (in its turn) until it is answered, times out or
/// is withdrawn by `cancelled`.
async fn show(
    app: &App,
    shown: Shown<'_>,
    mut cancelled: tokio::sync::watch::Receiver<bool>,
) -> AskOutcome {
    let call = shown.call;
    let subjects = ask_subjects(shown.plan);
    let (display, mut warnings) = AskDisplay::of(&call.tool, &subjects, &shown.preview.text);
    let preview_cut = shown.preview.cut;
    if preview_cut {
        warnings.push(PREVIEW_CUT_WARNING.to_owned());
    }
    let warning = (!warnings.is_empty()).then(|| warnings.join("; "));
    let warning = with_gate_warnings(warning, shown.gate_warnings);
    app.asks
        .ask(
            &call.account,
            |ask_id, expires_in_ms| ServerFrame::Ask {
                ask_id: ask_id.to_owned(),
                call_id: call.client_call_id.clone(),
                account: call.account.clone(),
                connection_id: shown.connection_id.to_owned(),
                tool: call.tool.clone(),
                subjects,
                preview: shown.preview.text,
                expires_in_ms,
                display,
                warning,
                preview_cut,
            },
            async move {
                if cancelled.wait_for(|c| *c).await.is_err() {
                    // The connection's bookkeeping is gone; only an explicit cancel withdraws.
                    std::future::pending::<()>().await;
                }
            },
        )
        .await
}

/// A plan's subjects as the approver sees them: each with its domain's name.
fn ask_subjects(plan: &Plan) -> Vec<AskSubject> {
    plan.subjects
        .iter()
        .map(|s| AskSubject {
            domain: match pb::Domain::try_from(s.domain) {
                Ok(pb::Domain::Read) => "read",
                Ok(pb::Domain::Write) => "write",
                Ok(pb::Domain::Delete) => "delete",
                Ok(pb::Domain::Exec) => "exec",
                Ok(pb::Domain::Job) => "job",
                Ok(pb::Domain::Tool) => "tool",
                Ok(pb::Domain::Account) => "account",
                _ => "unknown",
            }
            .to_owned(),
            path: s.path.clone(),
        })
        .collect()
}

/// The answer the gate resolves for how an ask ended; a full ask queue fails the call as busy.
fn answer_of(outcome: AskOutcome) -> Result<Answer, WireError> {
    Ok(match outcome {
        AskOutcome::Answered(Decision::Once) => Answer::Once,
        AskOutcome::Answered(Decision::Always) => Answer::Always,
        AskOutcome::Answered(Decision::Deny) => Answer::Deny,
        AskOutcome::Timeout => Answer::Timeout,
        AskOutcome::NoApprover => Answer::NoApprover,
        AskOutcome::ApproverGone => Answer::NoApprover,
        AskOutcome::Cancelled => Answer::Cancelled,
        AskOutcome::Busy => {
            return Err(WireError::new(
                ErrorCode::Busy,
                "too many calls are waiting for approval on this account",
            ));
        }
    })
}

/// The ask's `warning`: what the display form flagged, then what the gate said (e.g. that the
/// file makes later commands run code), joined with "; ".
fn with_gate_warnings(display: Option<String>, gate: &[String]) -> Option<String> {
    let all: Vec<&str> = display
        .as_deref()
        .into_iter()
        .chain(gate.iter().map(String::as_str))
        .collect();
    (!all.is_empty()).then(|| all.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_tools_input_preview_is_cut_on_a_character_boundary() {
        let small = serde_json::json!({"q": "é"});
        let shown = input_preview(&small, "input");
        assert_eq!(shown.text, "input:\n{\n  \"q\": \"é\"\n}\n");
        assert!(!shown.cut);
        // `{\n  "qq": "` is 11 bytes, so the 2-byte characters after it straddle the cap
        let big = serde_json::json!({"qq": "é".repeat(MAX_INPUT_PREVIEW)});
        let shown = input_preview(&big, "input");
        assert!(shown.cut);
        let body = shown
            .text
            .strip_prefix("input:\n")
            .and_then(|s| s.strip_suffix("\n[input truncated]\n"))
            .unwrap();
        assert_eq!(body.len(), MAX_INPUT_PREVIEW - 1);
        assert!(body.ends_with('é'));
    }

    #[test]
    fn every_ask_outcome_has_an_answer_but_busy() {
        assert_eq!(
            answer_of(AskOutcome::Answered(Decision::Always)).unwrap(),
            Answer::Always
        );
        assert_eq!(
            answer_of(AskOutcome::ApproverGone).unwrap(),
            Answer::NoApprover
        );
        assert_eq!(answer_of(AskOutcome::Cancelled).unwrap(), Answer::Cancelled);
        assert_eq!(
            answer_of(AskOutcome::Busy).unwrap_err().code,
            ErrorCode::Busy
        );
    }

    #[test]
    fn gate_warnings_are_appended_to_the_display_warning() {
        let gate = ["changing /w/.git/config makes later commands run code".to_owned()];
        assert_eq!(with_gate_warnings(None, &[]), None);
        assert_eq!(
            with_gate_warnings(None, &gate).as_deref(),
            Some(gate[0].as_str())
        );
        assert_eq!(
            with_gate_warnings(Some("hidden characters".into()), &gate),
            Some(format!("hidden characters; {}", gate[0]))
        );
        assert_eq!(
            with_gate_warnings(Some("hidden characters".into()), &[]).as_deref(),
            Some("hidden characters")
        );
    }
}
