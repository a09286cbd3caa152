//! The spans a call makes in the broker (its root) and what they record. Named and attributed
//! by the OpenTelemetry semantic conventions plus glovebox's own `glovebox.*` attributes.

use tracing::Span;
use tracing::field::Empty;

use crate::TARGET;

/// A call's root span in the broker: one trace per call. The verdict, the approval and the
/// outcome are recorded as the call goes ([`record_verdict`], [`record_approval`],
/// [`record_outcome`]). Not a child of whatever span is current: a call is a trace of its own.
pub fn call(account: &str, tool: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        parent: None,
        "call",
        otel.name = %format_args!("call {}", short(tool)),
        otel.kind = "server",
        glovebox.account = %short(account),
        glovebox.tool = %short(tool),
        glovebox.verdict = Empty,
        glovebox.approval = Empty,
        glovebox.outcome = Empty,
    )
}

/// An ask's span: the wait for the approver, a child of the call.
pub fn ask() -> Span {
    tracing::info_span!(
        target: TARGET,
        "ask",
        otel.name = "ask",
        otel.kind = "internal",
        glovebox.approval = Empty,
    )
}

/// The gate's verdict (`allow`, `ask`, `deny`) on the current span, if it is a call's.
pub fn record_verdict(verdict: &str) {
    Span::current().record("glovebox.verdict", verdict);
}

/// The approver's answer (`once`, `always`, `deny`, `timeout`, `no_approver`, …) on `span`.
pub fn record_approval(span: &Span, approval: &str) {
    span.record("glovebox.approval", approval);
}

/// How the call ended (`ok`, `denied`, `error`) on `span`.
pub fn record_outcome(span: &Span, outcome: &str) {
    span.record("glovebox.outcome", outcome);
}

/// Names and ids as attributes: at most 64 characters (a tool name is the agent's input).
fn short(s: &str) -> String {
    s.chars().take(64).collect()
}
