//! What every call carries whatever acts on it (the account's executor, its pack host, a client's
//! tool): who made it ([`Origin`]), its ids ([`CallIds`]), what is known of it while it runs
//! ([`CALL`]: its start, the gate's verdict, whether its result row is written), where its
//! progress goes ([`PROGRESS`], [`with_progress`]), and the errors a backend's failure becomes.

use std::future::Future;
use std::time::Instant;

use glovebox_config::AccountId;
use glovebox_proto::ErrorCode;
use glovebox_proto::call_id::ClientCallId;
use glovebox_proto::v1::{self as pb, ToolCall};
use glovebox_proto::ws::WireError;

tokio::task_local! {
    /// What is known of the call this task runs.
    pub(crate) static CALL: CallFacts;
}

/// What is known of a running call beyond its result.
pub(crate) struct CallFacts {
    pub(crate) started: Instant,
    /// The gate's verdict, for the call's metrics (`none` until decided).
    pub(crate) verdict: std::cell::Cell<&'static str>,
    /// The executor committed the call's result row with its execute row: the broker writes none.
    pub(crate) result_audited: std::cell::Cell<bool>,
}

/// Who made a call: the authenticated account and the connection it came on.
#[derive(Debug, Clone)]
pub struct Origin {
    pub account: AccountId,
    pub connection_id: String,
    pub profile: crate::profiles::Profile,
    /// The caller takes results' collections as tables, the MCP form (`mcp_form`): the
    /// executor makes them so, and nothing on the way reads and rewrites the rows.
    pub tables: bool,
}

/// A call's ids: the broker's (unique) and the agent's (a label).
pub struct CallIds {
    pub server: CallId,
    pub client: ClientCallId,
}

/// The broker's own id of a call, made for each call (`call-` and an ordered number): tickets and
/// audit rows name it, so two calls never merge however their agents label them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallId(String);

impl CallId {
    pub(crate) fn mint() -> CallId {
        CallId(glovebox_proto::ids::new_ordered_id("call"))
    }
}

impl std::fmt::Display for CallId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl CallIds {
    /// The call as its backend is sent it; `params_json` is the parameters' text (for a
    /// built-in tool, made from the parameters the broker checked: `ToolParams::to_json`).
    pub(crate) fn tool_call(
        &self,
        account: &AccountId,
        tool: &str,
        params_json: String,
    ) -> ToolCall {
        ToolCall {
            account: account.to_string(),
            call_id: self.server.to_string(),
            tool: tool.to_owned(),
            params_json,
            client_call_id: self.client.to_string(),
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

/// How long the running call has run so far, in milliseconds.
pub(crate) fn call_age_ms() -> u64 {
    CALL.try_with(|c| c.started.elapsed().as_millis() as u64)
        .unwrap_or(0)
}
