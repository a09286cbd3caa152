//! The MCP endpoint (`/mcp`, Streamable HTTP via rmcp): the same tools as the WebSocket API, for
//! any MCP client. `tools/call` goes through the same pipeline (plan → decide → ask → execute →
//! audit) as `/v1/ws`; a denial is a tool error whose text the model can read.
//!
//! Authentication happens before rmcp sees the request (`require_bearer`): the account is put in
//! the request's extensions, and rmcp hands the request parts to the handler. Sessions, their
//! owners, the cap per account and the idle timeout are `mcp/sessions.rs`.
//!
//! A session is told `notifications/tools/list_changed` when its account's tools change (see
//! `tool_changes`); `notifications/cancelled` withdraws the call (its ask, or the wait for a
//! client tool; a call not yet run is not run). Built-in tools declare an `outputSchema` and
//! return `structuredContent`.

pub mod handover;
pub use glovebox_proto::stdio::{fds, in_flight};
pub mod sessions;
mod to_bridge;

pub use sessions::{Reservation, SessionOwners};

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use glovebox_config::AccountId;
use glovebox_proto::call_id::ClientCallId;
use glovebox_proto::tools::{Tool, mcp_form};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::app::App;
use crate::call::Origin;
use crate::pipeline::run_call;
use crate::tool_list::tools_for;
use glovebox_mcp_face::{
    INSTRUCTIONS, capabilities, error_text, pack_result, read_as, shown, success, tool_of,
};

/// The account an MCP request authenticated as (set by `require_bearer`).
#[derive(Debug, Clone)]
pub struct AuthenticatedAccount(pub AccountId);

/// Refuses requests without a valid agent credential (401 without one, 403 with another role's),
/// refuses a session of another account (404, as if it did not exist), and records the account.
pub async fn require_bearer(
    State(app): State<Arc<App>>,
    mut request: Request,
    next: Next,
) -> Response {
    let agent = glovebox_proto::ws::Role::Agent;
    let who = match crate::role_check::credential_for(&app, request.headers(), agent, "MCP").await {
        Ok(who) => who,
        Err(refused) => return refused,
    };
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(session) = &session
        && !app.mcp_sessions.belongs_to(session, &who.account)
    {
        use axum::response::IntoResponse;
        return (axum::http::StatusCode::NOT_FOUND, "no such MCP session\n").into_response();
    }
    // A request without a session may create one: it needs a place under the account's cap.
    let reservation = match &session {
        Some(_) => None,
        None => match app.mcp_sessions.reserve(&who.account) {
            Some(r) => Some(r),
            None => {
                use axum::response::IntoResponse;
                let message = "too many MCP sessions for this account\n";
                return (axum::http::StatusCode::SERVICE_UNAVAILABLE, message).into_response();
            }
        },
    };
    let deleting = request.method() == axum::http::Method::DELETE;
    request
        .extensions_mut()
        .insert(AuthenticatedAccount(who.account.clone()));
    let mut response = next.run(request).await;
    if deleting && response.status() == axum::http::StatusCode::ACCEPTED {
        // The session is gone at once; the SDKs expect 200 and log 202 as a failure.
        *response.status_mut() = axum::http::StatusCode::OK;
    }
    match (&session, deleting) {
        (Some(s), true) if response.status().is_success() => app.mcp_sessions.forget(s),
        (None, _) => {
            // A new session: it belongs to the account that created it.
            if let (Some(created), Some(reservation)) = (
                response
                    .headers()
                    .get(SESSION_HEADER)
                    .and_then(|v| v.to_str().ok()),
                reservation,
            ) {
                app.mcp_sessions.bind(reservation, created).await;
            }
        }
        _ => {}
    }
    response
}

/// The header carrying an MCP session id (Streamable HTTP).
const SESSION_HEADER: &str = "mcp-session-id";

/// The rmcp service mounted at `/mcp`.
pub fn service(app: Arc<App>) -> StreamableHttpService<McpHandler, SessionOwners> {
    let config = StreamableHttpServerConfig::default();
    let sessions = app.mcp_sessions.clone();
    StreamableHttpService::new(
        move || {
            Ok(McpHandler {
                app: app.clone(),
                stdio: None,
            })
        },
        sessions,
        config,
    )
}

#[derive(Clone)]
pub struct McpHandler {
    app: Arc<App>,
    /// A session whose stdio `glovebox mcp` handed over (`handover`); `None` on `/mcp`, where
    /// each request carries its account.
    stdio: Option<Arc<StdioSession>>,
}

/// A handed-over stdio session: its account, fixed when the bridge authenticated, and the
/// record of its calls in flight.
pub struct StdioSession {
    account: AccountId,
    in_flight: in_flight::InFlight,
    /// The bridge's connection: told the client's initialization before the client is
    /// answered, and the session's end.
    to_bridge: tokio::sync::Mutex<to_bridge::ToBridge>,
}

impl McpHandler {
    /// The account a request of this session acts for.
    fn account(&self, extensions: &rmcp::model::Extensions) -> Option<AccountId> {
        match &self.stdio {
            Some(session) => Some(session.account.clone()),
            None => account_in(extensions),
        }
    }
}

/// The tools an MCP client of `account` may list: the same as a `desktop` connection's
/// `hello_ok` (see `tool_list`); none without an account.
pub async fn tools(app: &App, account: Option<&AccountId>) -> Vec<rmcp::model::Tool> {
    let Some(account) = account else {
        return Vec::new();
    };
    specs(app, account).await.iter().map(tool_of).collect()
}

/// The tools of `account` as a desktop connection is offered them.
async fn specs(app: &App, account: &AccountId) -> Vec<glovebox_proto::ws::ToolSpec> {
    let info = app.backends.account_info(account, Vec::new()).await;
    tools_for(
        app,
        account,
        crate::profiles::Profile::Desktop,
        info.as_ref(),
    )
    .await
}

/// A call's answer as an MCP tool result (see [`call_result`]).
fn answer_result(tool: &str, answer: crate::answer::CallAnswer) -> CallToolResult {
    match answer.outcome {
        Ok(crate::answer::CallValue::Text(text)) => match text.into_parts() {
            (fields, Some(table)) => read_as(mcp_form::rows::present_parts(
                Tool::from_name(tool),
                &fields,
                table,
            )),
            (text, None) => success(tool, &text),
        },
        Ok(crate::answer::CallValue::Tree(value)) => match pack_result(tool, &value) {
            Some(passed) => passed,
            None => shown(mcp_form::present(Tool::from_name(tool), value)),
        },
        Err(error) => CallToolResult::error(vec![ContentBlock::text(error_text(&error))]),
    }
}

fn account_in(extensions: &rmcp::model::Extensions) -> Option<AccountId> {
    let parts = extensions.get::<http::request::Parts>()?;
    parts
        .extensions
        .get::<AuthenticatedAccount>()
        .map(|a| a.0.clone())
}

/// Tells the session of `peer` when its account's tools change, in a task of its own.
fn watch_tool_changes(app: Arc<App>, account: AccountId, peer: rmcp::Peer<RoleServer>) {
    let changes = app.tool_changes.subscribe(&account);
    tokio::spawn(tell_tool_changes(app, account, changes, peer));
}

/// How often a session's change listener checks that its session still exists.
const SESSION_CHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// Tells one MCP session `notifications/tools/list_changed` whenever the tools its account is
/// offered change, until the session ends.
async fn tell_tool_changes(
    app: Arc<App>,
    account: AccountId,
    mut changes: tokio::sync::watch::Receiver<u64>,
    peer: rmcp::Peer<RoleServer>,
) {
    let mut listed = specs(&app, &account).await;
    loop {
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep(SESSION_CHECK) => {
                if peer.is_transport_closed() {
                    return;
                }
                continue;
            }
        }
        if peer.is_transport_closed() {
            return;
        }
        let now = specs(&app, &account).await;
        if now == listed {
            continue;
        }
        listed = now;
        if peer.notify_tool_list_changed().await.is_err() {
            return;
        }
    }
}

impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(capabilities())
            .with_server_info(Implementation::new("glovebox", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        if let Some(session) = &self.stdio {
            session.to_bridge.lock().await.initialized(&request).await;
        }
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let Some(account) = self.account(&context.extensions) else {
            return;
        };
        watch_tool_changes(self.app.clone(), account, context.peer.clone());
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let account = self.account(&context.extensions);
        Ok(ListToolsResult::with_all_items(
            tools(&self.app, account.as_ref()).await,
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(account) = self.account(&context.extensions) else {
            return Err(ErrorData::invalid_request("not authenticated", None));
        };
        // Answered by the bridge if the broker dies before the call ends.
        let in_flight = self.stdio.as_ref().and_then(|s| {
            let id = serde_json::to_string(&context.id).ok()?;
            s.in_flight.record(&id)
        });
        // Made per call: an ordered id, counted rather than random (no `getrandom` per call).
        let origin = Origin {
            account,
            connection_id: glovebox_proto::ids::new_ordered_id("mcp"),
            profile: crate::profiles::Profile::Desktop,
            tables: true,
        };
        let params = serde_json::Value::Object(request.arguments.unwrap_or_default());
        // notifications/cancelled (or the session ending) withdraws the call.
        let (cancel, cancelled) = tokio::sync::watch::channel(false);
        let ct = context.ct.clone();
        let forward = tokio::spawn(async move {
            ct.cancelled().await;
            let _ = cancel.send(true);
            // Keep the sender until the call is done, so the call sees the switch stay on.
            std::future::pending::<()>().await;
        });
        // A stdio session's ids are in the order made, as `glovebox mcp`'s own were: the
        // audit's index of client call ids then grows at one end.
        let call_id = match self.stdio {
            Some(_) => ClientCallId::ordered("stdio"),
            None => ClientCallId::random("mcp-call"),
        };
        let call = run_call(
            self.app.road(),
            &origin,
            &call_id,
            &request.name,
            params,
            cancelled,
        );
        // A client that gave a progress token gets the progress of a pack's server, in order.
        let answer = match context.meta.get_progress_token() {
            None => call.await,
            Some(token) => {
                let peer = context.peer.clone();
                crate::call::with_progress(call, move |mut progressed| async move {
                    while let Some(p) = progressed.recv().await {
                        let mut note =
                            rmcp::model::ProgressNotificationParam::new(token.clone(), p.progress);
                        note.total = p.total;
                        note.message = (!p.message.is_empty()).then_some(p.message);
                        if peer.notify_progress(note).await.is_err() {
                            return;
                        }
                    }
                })
                .await
            }
        };
        forward.abort();
        if let Some(recorded) = in_flight {
            recorded.answered();
        }
        Ok(answer_result(&request.name, answer).into())
    }
}
