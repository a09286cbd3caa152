//! One call, end to end: validate → plan (executor) → decide (gate) → ask (approver) →
//! execute (executor) → result — for a built-in tool, plan, decide and an allowed execute in one
//! hop (a run on `Executor.Runs`, the executor asking the gate with the broker's voucher) — with a final audit event: the broker's own, unless the executor
//! already committed it with its execute row (a built-in call that ran on its ticket). Fails
//! closed at every step: a backend that cannot be reached means the call is refused, never that
//! a check is skipped.

use std::time::Instant;

use glovebox_config::AccountId;
use glovebox_proto::audit_row::{Outcome, RowKind, Source};
use glovebox_telemetry::spans;
use tracing::Instrument;

use glovebox_proto::ErrorCode;
use glovebox_proto::tool_name::ToolName;
use glovebox_proto::tools::Tool;
use glovebox_proto::transport::messages::AnsweredElsewhere;
use glovebox_proto::v1::{self as pb, AuditEvent, ExecuteRequest, Plan, RunRequest};
use glovebox_proto::ws::WireError;

use crate::answer::{CallAnswer, CallValue};
use crate::authorize::{Preview, authorize, input_preview, note_verdict, settle};
use crate::backends::request;
use crate::call::{CALL, CallFacts, CallId, CallIds, Origin, from_tool_error, unavailable};
use crate::road::CallRoad;
use glovebox_proto::call_id::ClientCallId;

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
    road: CallRoad<'_>,
    origin: &Origin,
    call_id: &ClientCallId,
    tool: &str,
    params: serde_json::Value,
    cancelled: tokio::sync::watch::Receiver<bool>,
) -> CallAnswer {
    let account = &origin.account;
    let started = Instant::now();
    // Which kind of tool the call names is read here, once, and carried on.
    let name = ToolName::parse(tool);
    // The call's own id, made here: tickets and audit rows name it, so two calls never merge
    // however the agent names them; the agent's id stays a label (and is what it is answered by).
    let ids = CallIds {
        server: CallId::mint(),
        client: call_id.clone(),
    };
    // The call's trace: its root span, current while the call runs so every backend request
    // carries its context.
    let span = spans::call(account, tool);
    road.asks.activity(account, true);
    let facts = CallFacts {
        started,
        verdict: std::cell::Cell::new("none"),
        result_audited: std::cell::Cell::new(false),
    };
    let (outcome, verdict, result_audited) = CALL
        .scope(facts, async {
            let outcome = async {
                match enter(road, account, cancelled.clone()).await {
                    Ok(place) => {
                        let call = steps(road, origin, &ids, (tool, name), params, cancelled);
                        crate::call_slots::holding(road.calls, place, call).await
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
    road.asks.activity(account, false);
    let event = result_row(origin, &ids, (tool, name), &outcome, started.elapsed());
    let answer = CallAnswer {
        call_id: call_id.to_string(),
        outcome,
    };
    note_call(&span, tool, verdict, &event.outcome, started);
    if result_audited {
        return answer;
    }
    audited_answer(road, event, answer).instrument(span).await
}

/// A finished call in its trace span and the broker's metrics.
fn note_call(
    span: &tracing::Span,
    tool: &str,
    verdict: &'static str,
    outcome: &str,
    started: Instant,
) {
    spans::record_outcome(span, outcome);
    glovebox_telemetry::metrics::broker().call(
        tool,
        verdict,
        outcome,
        started.elapsed().as_secs_f64(),
    );
    if tool == "exec_run" && outcome == Outcome::Ok.as_str() {
        glovebox_telemetry::metrics::broker().job_started();
    }
}

/// `answer`, once the call's result row (`event`) is in the audit, waiting for a gate that is
/// restarting; if it cannot be written, the call is reported failed. (An executor's result row,
/// when it wrote one, was committed before it answered.)
async fn audited_answer(road: CallRoad<'_>, event: AuditEvent, answer: CallAnswer) -> CallAnswer {
    let durable = glovebox_proto::transport::AUDIT_DURABLE_LIMIT;
    if let Err(status) =
        glovebox_proto::transport::append_durably(&road.backends.audit, event, durable).await
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

/// The broker's `result` row of a call that ended with `outcome` after `took`: `ok`, or the
/// error's outcome, code and reason (a pack server's own `isError` answer is an error too).
fn result_row(
    origin: &Origin,
    ids: &CallIds,
    (tool, name): (&str, ToolName),
    outcome: &Result<crate::answer::CallValue, WireError>,
    took: std::time::Duration,
) -> AuditEvent {
    let mut event = AuditEvent {
        call_id: ids.server.to_string(),
        client_call_id: ids.client.to_string(),
        account: origin.account.to_string(),
        source: Source::Broker.into(),
        kind: RowKind::Result.into(),
        tool: tool.chars().take(64).collect(),
        duration_ms: took.as_millis() as u64,
        ..Default::default()
    };
    match outcome {
        // A pack server's own error (`isError`) is answered as the server gave it, and audited
        // as an error.
        Ok(crate::answer::CallValue::Tree(value))
            if matches!(name, ToolName::Pack { .. })
                && glovebox_proto::packs::is_error_result(value) =>
        {
            event.outcome = Outcome::Error.into();
            event.error_code = glovebox_proto::packs::SERVER_ERROR_CODE.into();
            event.reason = glovebox_proto::packs::SERVER_ERROR_REASON.into();
        }
        Ok(_) => event.outcome = Outcome::Ok.into(),
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
    event
}

/// Waits for a place among the account's running calls (see `call_slots`), or for the call to
/// be cancelled.
async fn enter(
    road: CallRoad<'_>,
    account: &AccountId,
    mut cancelled: tokio::sync::watch::Receiver<bool>,
) -> Result<crate::call_slots::Permit, WireError> {
    let withdrawn = async {
        // A call whose canceller is gone can no longer be cancelled.
        if cancelled.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        permit = road.calls.enter(account) => permit.ok_or_else(|| unavailable("the broker")),
        () = withdrawn => Err(WireError::new(
            ErrorCode::Busy,
            "the call was cancelled while it waited for the account's running calls",
        )),
    }
}

async fn steps(
    road: CallRoad<'_>,
    origin: &Origin,
    ids: &CallIds,
    (tool_name, name): (&str, ToolName<'_>),
    params: serde_json::Value,
    cancelled: tokio::sync::watch::Receiver<bool>,
) -> Result<CallValue, WireError> {
    admit(origin, tool_name, name)?;
    // The one seam: where the call goes, by the kind of tool it names.
    match name {
        ToolName::Client { bare } => {
            client_tool(road, origin, ids, tool_name, bare, params, cancelled)
                .await
                .map(CallValue::Tree)
        }
        ToolName::Pack { pack, tool } => crate::packs::pack_call(
            road,
            origin,
            ids,
            tool_name,
            (pack, tool),
            params,
            cancelled,
        )
        .await
        .map(CallValue::Tree),
        ToolName::Builtin(tool) => builtin(road, origin, ids, tool, params, cancelled).await,
        ToolName::Unknown => Err(WireError::new(
            ErrorCode::UnknownTool,
            format!(
                "no tool is named {:?}; list the tools to see which exist",
                truncated(tool_name)
            ),
        )),
    }
}

/// Refuses a call before anything else when the tool is not for this connection's profile (a
/// `web` connection, a browser tab, gets client tools only). Whether the account's tools are on
/// is the gate's decision, like everything else about the call.
fn admit(origin: &Origin, tool_name: &str, name: ToolName<'_>) -> Result<(), WireError> {
    if !origin.profile.allows(name) {
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
    road: CallRoad<'_>,
    origin: &Origin,
    ids: &CallIds,
    tool: Tool,
    params: serde_json::Value,
    cancelled: tokio::sync::watch::Receiver<bool>,
) -> Result<CallValue, WireError> {
    let account = &origin.account;
    let tool_name = tool.name();
    let parsed = tool
        .parse_params(&params)
        .map_err(|e| WireError::new(ErrorCode::InvalidParams, e.0))?;
    // A whole-file read the executor may make ahead of its verdict: its answer is taken from
    // the gate, which hands it over once it has allowed and audited the call.
    let deliver_via_gate = parsed.reads_whole_file();
    // The executor is sent the parameters as checked, and reads them straight into their type.
    let checked = parsed
        .to_json()
        .map_err(|_| WireError::new(ErrorCode::Internal, "the parameters could not be sent"))?;
    let call = ids.tool_call(account, tool_name, checked);
    let crate::backends::ExecutorLink {
        runs,
        client: mut executor,
    } = road
        .backends
        .executor_link(account)
        .ok_or_else(|| unavailable("the account's executor"))?;
    let ran = run(road, &runs, origin, &call, deliver_via_gate).await?;
    let decided = ran
        .decision
        .ok_or_else(|| WireError::new(ErrorCode::Internal, "the executor returned no verdict"))?;
    let verdict = note_verdict(&decided);
    let executed = match (verdict, ran.executed, ran.plan) {
        (pb::Verdict::Allow, Some(executed), _) => executed,
        (_, None, Some(plan)) => {
            let ticket = settle(
                road.deciders(),
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
                    call_age_ms: crate::call::call_age_ms(),
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
    result_of(executed)
}

/// A built-in call run on the account's executor in one hop: it plans the call and asks the
/// gate itself, with the broker's voucher that this call was made, and on an allow executes it
/// (a whole-file read's answer, with `deliver_via_gate`, may come from the gate instead). Given
/// up after the same time as any backend request, cancelled on the executor then.
async fn run(
    road: CallRoad<'_>,
    runs: &crate::runs::ExecutorRuns,
    origin: &Origin,
    call: &pb::ToolCall,
    deliver_via_gate: bool,
) -> Result<pb::RunResponse, WireError> {
    let voucher = road
        .backends
        .vouchers
        .vouch(call, glovebox_ticket::now_ms().unwrap_or(0));
    let expected = match deliver_via_gate {
        true => {
            road.backends
                .deliveries
                .expect(&origin.account, &call.call_id)
                .await
        }
        false => None,
    };
    let run = RunRequest {
        call: Some(call.clone()),
        voucher: Some(voucher),
        call_age_ms: crate::call::call_age_ms(),
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
    match ran.error {
        Some(e) => Err(from_tool_error(e)),
        None => Ok(ran),
    }
}

/// What an executed built-in call answers. The executor's result row says what it answered; a
/// result the broker cannot pass on is a failure the executor's row does not know of, so the
/// broker writes its own row besides.
fn result_of(executed: pb::ExecuteResponse) -> Result<CallValue, WireError> {
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

fn executor_failed() -> WireError {
    WireError::new(
        ErrorCode::Unavailable,
        "the account's executor failed during the call; it was not retried",
    )
}

/// A call to a provider's tool (`client__<name>`): judged by the gate like any call, then routed
/// to the most recent provider of the caller's own account.
async fn client_tool(
    road: CallRoad<'_>,
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
    let Some(schema) = road.registry.input_schema(&origin.account, bare) else {
        return Err(WireError::new(
            ErrorCode::NoClient,
            "no connected client provides this tool",
        ));
    };
    // Held to what its provider said it takes, before anyone is asked.
    crate::input_check::check_input(&schema, &params)
        .map_err(|why| WireError::new(ErrorCode::InvalidParams, why))?;
    let call = ids.tool_call(&origin.account, exposed, params.to_string());
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
    authorize(
        road.deciders(),
        origin,
        &call,
        &plan,
        cancelled.clone(),
        preview,
    )
    .await?;
    if *cancelled.borrow() {
        return Err(withdrawn());
    }
    // Withdrawn while the provider works: stop waiting (the protocol has no way to tell it).
    tokio::select! {
        result = road.registry.invoke(&origin.account, bare, params, ids.client.as_str()) => result.map_err(registry_error),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::CallValue;

    fn origin() -> Origin {
        Origin {
            account: "alice".parse().unwrap(),
            connection_id: "conn-1".into(),
            profile: crate::profiles::Profile::Desktop,
            tables: false,
        }
    }

    fn ids() -> CallIds {
        CallIds {
            server: CallId::mint(),
            client: ClientCallId::parse("c1".into()).unwrap(),
        }
    }

    /// The result row says how the agent's call ended: its outcome, code, reason and rule, with
    /// a pack server's own error answer an error like any other.
    #[test]
    fn a_result_row_says_how_the_call_ended() {
        let took = std::time::Duration::from_millis(12);
        let pack = ToolName::parse("github__get_file");
        let server_error = Ok(CallValue::Tree(serde_json::json!({"isError": true})));
        let row = result_row(
            &origin(),
            &ids(),
            ("github__get_file", pack),
            &server_error,
            took,
        );
        assert_eq!(
            (
                row.outcome.as_str(),
                row.error_code.as_str(),
                row.kind.as_str(),
                row.source.as_str()
            ),
            ("error", "tool_error", "result", "broker")
        );
        let fine = Ok(CallValue::Tree(serde_json::json!({"isError": false})));
        let row = result_row(&origin(), &ids(), ("github__get_file", pack), &fine, took);
        assert_eq!((row.outcome.as_str(), row.duration_ms), ("ok", 12));
        // A built-in tool's result is never read as a server's error answer.
        let builtin = ToolName::parse("file_read");
        let row = result_row(
            &origin(),
            &ids(),
            ("file_read", builtin),
            &server_error,
            took,
        );
        assert_eq!(row.outcome, "ok");
        let denied = Err(WireError::denied(
            "outside the roots",
            "paths.read.deny[0]: /etc/**",
        ));
        let row = result_row(&origin(), &ids(), ("file_read", builtin), &denied, took);
        assert_eq!(
            (
                row.outcome.as_str(),
                row.error_code.as_str(),
                row.reason.as_str(),
                row.rule.as_str()
            ),
            (
                "denied",
                "denied",
                "outside the roots",
                "paths.read.deny[0]: /etc/**"
            )
        );
        assert_eq!(
            (row.account.as_str(), row.client_call_id.as_str()),
            ("alice", "c1")
        );
        assert!(row.call_id.starts_with("call-"), "{}", row.call_id);
    }
}
