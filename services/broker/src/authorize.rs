//! The step every call shares before anything acts, whatever acts on it (the account's executor,
//! its pack host, a client's tool): the gate's verdict on the planned call and, when it says
//! ask, the approver's answer, resolved by the gate into a ticket or a denial ([`authorize`]).
//! A ticket means go.

use std::time::Instant;

use glovebox_config::AccountId;
use glovebox_proto::ErrorCode;
use glovebox_proto::v1::{
    self as pb, Answer, DecideRequest, DecideResponse, Plan, PreviewRequest, ResolveRequest,
    Ticket, ToolCall,
};
use glovebox_proto::ws::{AskDisplay, AskSubject, Decision, ServerFrame, WireError};
use glovebox_telemetry::spans;
use tracing::Instrument;

use crate::asks::AskOutcome;
use crate::asks::Asks;
use crate::backends::Backends;
use crate::backends::request;
use crate::call::{CALL, Origin, from_tool_error, unavailable};

/// What deciding a call takes: the gate and the account's executor, and the account's approvers.
/// A handle, not the broker's `App`: this step sees only what it uses.
#[derive(Clone, Copy)]
pub(crate) struct Deciders<'a> {
    pub backends: &'a Backends,
    pub asks: &'a Asks,
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
    deciders: Deciders<'_>,
    origin: &Origin,
    call: &ToolCall,
    plan: &Plan,
    cancelled: tokio::sync::watch::Receiver<bool>,
    preview: Preview,
) -> Result<Ticket, WireError> {
    let deciding = deciders.backends.decisions.decide(DecideRequest {
        call: Some(call.clone()),
        plan: Some(plan.clone()),
    });
    let decided = tokio::time::timeout(crate::backends::BACKEND_TIMEOUT, deciding)
        .await
        .map_err(|_| unavailable("the gate"))?
        .map_err(|_| unavailable("the gate"))?;
    let verdict = note_verdict(&decided);
    settle(
        deciders,
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
pub(crate) fn note_verdict(decided: &DecideResponse) -> pb::Verdict {
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
pub(crate) async fn settle(
    deciders: Deciders<'_>,
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
                deciders,
                origin,
                call,
                plan,
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

/// Shows the call to the account's approver and turns the answer into a ticket (or a denial).
async fn ask(
    deciders: Deciders<'_>,
    origin: &Origin,
    call: &ToolCall,
    plan: &Plan,
    cancelled: tokio::sync::watch::Receiver<bool>,
    preview: Preview,
    gate_warnings: &[String],
) -> Result<Ticket, WireError> {
    let ask_span = spans::ask();
    let asked = Instant::now();
    // Without an approver, deny at once: no preview, no waiting.
    let outcome = if deciders.asks.approver_count(&origin.account) == 0 {
        AskOutcome::NoApprover
    } else {
        let shown = Shown {
            origin,
            call,
            plan,
            preview: preview_text(deciders, &origin.account, call, plan, preview).await?,
            gate_warnings,
        };
        let metrics = glovebox_telemetry::metrics::broker();
        metrics.asks_pending(1);
        // Waiting for a person holds none of the account's running places.
        let outcome = crate::call_slots::set_aside(
            show(deciders, shown, cancelled).instrument(ask_span.clone()),
        )
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
    let mut gate = deciders.backends.gate.clone();
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
    deciders: Deciders<'_>,
    account: &AccountId,
    call: &ToolCall,
    plan: &Plan,
    preview: Preview,
) -> Result<PreviewText, WireError> {
    match preview {
        Preview::Text(text) => Ok(text),
        Preview::Executor => {
            let mut executor = deciders
                .backends
                .executor(account)
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
    /// The account and the agent connection that made the call.
    origin: &'a Origin,
    call: &'a ToolCall,
    plan: &'a Plan,
    preview: PreviewText,
    gate_warnings: &'a [String],
}

/// Puts the ask before the account's approvers (in its turn) until it is answered, times out or
/// is withdrawn by `cancelled`.
async fn show(
    deciders: Deciders<'_>,
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
    deciders
        .asks
        .ask(
            &shown.origin.account,
            |ask_id, expires_in_ms| ServerFrame::Ask {
                ask_id: ask_id.to_owned(),
                call_id: call.client_call_id.clone(),
                account: shown.origin.account.to_string(),
                connection_id: shown.origin.connection_id.clone(),
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
