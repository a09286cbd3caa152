//! One call, end to end: validate → plan (executor) → decide (gate) → ask (approver) →
//! execute (executor) → result, with a final audit event. Fails closed at every step: a backend
//! that cannot be reached means the call is refused, never that a check is skipped.

use std::time::Instant;

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::Tool;
use glovebox_proto::v1::{
    self as pb, Answer, AuditEvent, DecideRequest, ExecuteRequest, Plan, PlanRequest,
    PreviewRequest, ResolveRequest, Ticket, ToolCall,
};
use glovebox_proto::ws::{AskSubject, Decision, ServerFrame, WireError};

use crate::App;
use crate::asks::AskOutcome;
use crate::backends::request;

/// Runs one call for `account` and returns the result frame.
#[tracing::instrument(skip(app, params), fields(account = %account))]
pub async fn run_call(
    app: &App,
    account: &str,
    call_id: &str,
    tool: &str,
    params: serde_json::Value,
) -> ServerFrame {
    let started = Instant::now();
    let outcome = steps(app, account, call_id, tool, params).await;
    let mut event = AuditEvent {
        call_id: call_id.to_owned(),
        account: account.to_owned(),
        source: "broker".into(),
        kind: "result".into(),
        tool: tool.chars().take(64).collect(),
        duration_ms: started.elapsed().as_millis() as u64,
        ..Default::default()
    };
    let frame = match outcome {
        Ok(result) => {
            event.outcome = "ok".into();
            ServerFrame::ok(call_id.to_owned(), result)
        }
        Err(error) => {
            event.outcome = if error.code == ErrorCode::Denied {
                "denied"
            } else {
                "error"
            }
            .into();
            event.error_code = error.code.as_str().into();
            event.reason = error
                .deny_reason
                .clone()
                .unwrap_or_else(|| error.message.clone());
            event.rule = error.rule.clone().unwrap_or_default();
            ServerFrame::failed(call_id.to_owned(), error)
        }
    };
    if let Err(status) = app.backends.audit.clone().append(request(event)).await {
        tracing::error!(error = %status.message(), "could not send the audit event to the gate");
    }
    frame
}

fn unavailable(what: &str) -> WireError {
    WireError::new(
        ErrorCode::Unavailable,
        format!("{what} is unavailable; the call was not run"),
    )
}

fn from_tool_error(e: pb::ToolError) -> WireError {
    let code = ErrorCode::parse(&e.code).unwrap_or(ErrorCode::Internal);
    WireError::new(code, e.message)
}

async fn steps(
    app: &App,
    account: &str,
    call_id: &str,
    tool_name: &str,
    params: serde_json::Value,
) -> Result<serde_json::Value, WireError> {
    let tool = Tool::from_name(tool_name).ok_or_else(|| {
        WireError::new(
            ErrorCode::UnknownTool,
            "unknown tool; hello_ok lists the tools",
        )
    })?;
    tool.parse_params(&params)
        .map_err(|e| WireError::new(ErrorCode::InvalidParams, e))?;
    let call = ToolCall {
        account: account.to_owned(),
        call_id: call_id.to_owned(),
        tool: tool_name.to_owned(),
        params_json: params.to_string(),
    };
    let mut executor = app
        .backends
        .executor(account)
        .ok_or_else(|| unavailable("the account's executor"))?;
    let mut gate = app.backends.gate.clone();

    let planned = executor
        .plan(request(PlanRequest {
            call: Some(call.clone()),
        }))
        .await
        .map_err(|_| unavailable("the account's executor"))?
        .into_inner();
    if let Some(e) = planned.error {
        return Err(from_tool_error(e));
    }
    let plan = planned
        .plan
        .ok_or_else(|| WireError::new(ErrorCode::Internal, "the executor returned no plan"))?;

    let decided = gate
        .decide(request(DecideRequest {
            call: Some(call.clone()),
            plan: Some(plan.clone()),
        }))
        .await
        .map_err(|_| unavailable("the gate"))?
        .into_inner();
    let ticket = match pb::Verdict::try_from(decided.verdict) {
        Ok(pb::Verdict::Allow) => decided.ticket,
        Ok(pb::Verdict::Ask) => Some(ask(app, &call, &plan).await?),
        _ => return Err(WireError::denied(decided.reason, decided.rule)),
    };
    let ticket = ticket.ok_or_else(|| {
        WireError::new(
            ErrorCode::Internal,
            "the gate allowed the call without a ticket",
        )
    })?;

    let executed = executor
        .execute(request(ExecuteRequest {
            call: Some(call),
            ticket: Some(ticket),
        }))
        .await
        .map_err(|_| {
            WireError::new(
                ErrorCode::Unavailable,
                "the account's executor failed during the call; it was not retried",
            )
        })?
        .into_inner();
    if let Some(e) = executed.error {
        return Err(from_tool_error(e));
    }
    serde_json::from_str(&executed.result_json).map_err(|_| {
        WireError::new(
            ErrorCode::Internal,
            "the executor returned a malformed result",
        )
    })
}

/// Shows the call to the account's approver and turns the answer into a ticket (or a denial).
async fn ask(app: &App, call: &ToolCall, plan: &Plan) -> Result<Ticket, WireError> {
    let mut executor = app
        .backends
        .executor(&call.account)
        .ok_or_else(|| unavailable("the account's executor"))?;
    let mut gate = app.backends.gate.clone();
    // Without an approver, deny at once: no preview, no waiting.
    let outcome = if app.asks.approver_count(&call.account) == 0 {
        AskOutcome::NoApprover
    } else {
        let preview = executor
            .preview(request(PreviewRequest {
                call: Some(call.clone()),
                plan: Some(plan.clone()),
            }))
            .await
            .map_err(|_| unavailable("the account's executor"))?
            .into_inner();
        if let Some(e) = preview.error {
            return Err(from_tool_error(e));
        }
        let subjects: Vec<AskSubject> = plan
            .subjects
            .iter()
            .map(|s| AskSubject {
                domain: match pb::Domain::try_from(s.domain) {
                    Ok(pb::Domain::Write) => "write",
                    Ok(pb::Domain::Delete) => "delete",
                    _ => "read",
                }
                .to_owned(),
                path: s.path.clone(),
            })
            .collect();
        app.asks
            .ask(&call.account, |ask_id, expires_in_ms| ServerFrame::Ask {
                ask_id: ask_id.to_owned(),
                call_id: call.call_id.clone(),
                account: call.account.clone(),
                tool: call.tool.clone(),
                subjects,
                preview: preview.text,
                expires_in_ms,
            })
            .await
    };
    let answer = match outcome {
        AskOutcome::Answered(Decision::Once) => Answer::Once,
        AskOutcome::Answered(Decision::Always) => Answer::Always,
        AskOutcome::Answered(Decision::Deny) => Answer::Deny,
        AskOutcome::Timeout => Answer::Timeout,
        AskOutcome::NoApprover => Answer::NoApprover,
        AskOutcome::ApproverGone => Answer::NoApprover,
        AskOutcome::Busy => {
            return Err(WireError::new(
                ErrorCode::Busy,
                "too many calls are waiting for approval on this account",
            ));
        }
    };
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
