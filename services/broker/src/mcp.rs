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
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::app::App;
use crate::call::Origin;
use crate::pipeline::run_call;
use crate::tool_list::tools_for;

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

/// What an MCP client is told about glovebox at initialization (`/mcp` and `glovebox mcp`).
pub const INSTRUCTIONS: &str = "File and command tools on the user's machine. Every call passes \
    the user's permission gate; a denied call returns an error that says why. exec_run returns a \
    job_id at once: poll exec_status and exec_tail. The tool list changes when the user's client \
    tools come and go or the user switches tools off (notifications/tools/list_changed).";

/// What `/mcp` and `glovebox mcp` announce: tools, and that their list changes.
pub fn capabilities() -> ServerCapabilities {
    ServerCapabilities::builder()
        .enable_tools()
        .enable_tool_list_changed()
        .build()
}

/// One tool as MCP describes it; built-in tools carry read-only and destructive hints and an
/// output schema.
pub fn mcp_tool(
    name: &str,
    description: &str,
    input_schema: &serde_json::Value,
) -> rmcp::model::Tool {
    let schema = match input_schema {
        serde_json::Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    let mut tool =
        rmcp::model::Tool::new(name.to_owned(), description.to_owned(), Arc::new(schema));
    match Tool::from_name(name) {
        Some(t) => {
            if let serde_json::Value::Object(output) = mcp_form::output_schema(t) {
                tool.output_schema = Some(Arc::new(output));
            }
            tool.annotate(
                ToolAnnotations::new()
                    .read_only(t.is_read_only())
                    .destructive(t.is_destructive()),
            )
        }
        None => tool,
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

/// A tool as an MCP client lists it, from its spec: a built-in tool's own form (see
/// [`mcp_tool`]), or a pack tool with its server's hints, output schema, title and `_meta` (each
/// sanitized by the broker when it was listed). `/mcp` and `glovebox mcp` list through this.
pub fn tool_of(t: &glovebox_proto::ws::ToolSpec) -> rmcp::model::Tool {
    let mut tool = mcp_tool(&t.name, &t.description, &t.input_schema);
    if let Some(serde_json::Value::Object(output)) = &t.output_schema {
        tool.output_schema = Some(Arc::new(output.clone()));
    }
    if let Some(title) = &t.title {
        tool.title = Some(title.clone());
    }
    if let Some(serde_json::Value::Object(meta)) = &t.meta {
        tool.meta = Some(rmcp::model::MetaObject(meta.clone()));
    }
    match &t.annotations {
        // A pack tool: its server's hints.
        Some(a) => {
            let mut hints = ToolAnnotations::new()
                .read_only(a.read_only_hint)
                .destructive(a.destructive_hint);
            hints.idempotent_hint = a.idempotent_hint;
            hints.open_world_hint = a.open_world_hint;
            tool.annotate(hints)
        }
        None => tool,
    }
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

/// The end of a call of `tool` as an MCP tool result. A success is its JSON as text (a JSON
/// string, which is what client tools often return, is that text itself), and an object result
/// is also `structuredContent`; a built-in tool's collection goes as a table ([`mcp_form`], read
/// straight from the result's text). A denial or failure is a tool error whose text the model can
/// read: the code, what happened, and the rule that decided.
pub fn call_result(tool: &str, end: glovebox_proto::ws::CallEnd) -> CallToolResult {
    match end {
        glovebox_proto::ws::CallEnd {
            ok: true, result, ..
        } => {
            let text = result.as_deref().map_or("null", |r| r.get());
            match serde_json::from_str(text)
                .ok()
                .and_then(|v| pack_result(tool, &v))
            {
                Some(passed) => passed,
                None => success(tool, text),
            }
        }
        glovebox_proto::ws::CallEnd {
            error: Some(error), ..
        } => CallToolResult::error(vec![ContentBlock::text(error_text(&error))]),
        _ => CallToolResult::error(vec![ContentBlock::text(
            "internal: the call produced no result",
        )]),
    }
}

/// A pack tool's result as its server gave it (the pack host bounded its size): its content
/// blocks (text, image, audio, resource links, embedded resources), `isError`,
/// `structuredContent` and `_meta`, passed through rather than wrapped as JSON text. `None` for
/// another tool, or a value that is not an MCP tool result.
pub fn pack_result(tool: &str, value: &serde_json::Value) -> Option<CallToolResult> {
    glovebox_proto::packs::split_name(tool)?;
    value.get("content")?.as_array()?;
    serde_json::from_value(value.clone()).ok()
}

/// A successful result of `tool`, `result` its JSON text, as an MCP tool result.
fn success(tool: &str, result: &str) -> CallToolResult {
    media_result(tool, result)
        .unwrap_or_else(|| read_as(mcp_form::rows::present_text(Tool::from_name(tool), result)))
}

/// A `file_read_media` result as MCP clients show media: an image or audio block with its MIME
/// type, then the rest (path, kind, type, size) as text and as structured content.
fn media_result(tool: &str, result: &str) -> Option<CallToolResult> {
    if Tool::from_name(tool) != Some(Tool::FileReadMedia) {
        return None;
    }
    let mut value: serde_json::Value = serde_json::from_str(result).ok()?;
    let data = match value.as_object_mut()?.remove("data")? {
        serde_json::Value::String(data) => data,
        _ => return None,
    };
    let mime = value.get("mime_type")?.as_str()?.to_owned();
    let block = match value.get("kind")?.as_str()? {
        "image" => ContentBlock::image(data, mime),
        "audio" => ContentBlock::audio(data, mime),
        _ => return None,
    };
    let mut out = CallToolResult::success(vec![block, ContentBlock::text(value.to_string())]);
    out.structured_content = Some(value);
    Some(out)
}

/// A result read for showing as a successful MCP tool result, or the error of one unreadable.
fn read_as(presented: serde_json::Result<(String, Option<serde_json::Value>)>) -> CallToolResult {
    match presented {
        Ok(presented) => shown(presented),
        Err(_) => CallToolResult::error(vec![ContentBlock::text(
            "internal: the call's result could not be read",
        )]),
    }
}

/// A presented result (its text and structured content) as a successful MCP tool result.
fn shown((text, structured): (String, Option<serde_json::Value>)) -> CallToolResult {
    let mut out = CallToolResult::success(vec![ContentBlock::text(text)]);
    out.structured_content = structured;
    out
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

/// `code: message (rule: …)`, naming the code once.
pub fn error_text(error: &glovebox_proto::ws::WireError) -> String {
    let code = error.code.as_str();
    let message = error
        .deny_reason
        .as_deref()
        .unwrap_or(&error.message)
        .trim_start_matches(&format!("{code}: "));
    let mut text = format!("{code}: {message}");
    if let Some(rule) = &error.rule {
        text.push_str(&format!(" (rule: {rule})"));
    }
    text
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
