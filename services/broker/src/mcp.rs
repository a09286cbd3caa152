//! The MCP endpoint (`/mcp`, Streamable HTTP via rmcp): the same tools as the WebSocket API, for
//! any MCP client. `tools/call` goes through the same pipeline (plan → decide → ask → execute →
//! audit) as `/v1/ws`; a denial is a tool error whose text the model can read.
//!
//! Authentication happens before rmcp sees the request (`require_bearer`): the account is put in
//! the request's extensions, and rmcp hands the request parts to the handler.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use glovebox_proto::tools::Tool;
use glovebox_proto::ws::ServerFrame;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::App;
use crate::asks::new_id;
use crate::pipeline::{Origin, run_call};

/// The account an MCP request authenticated as (set by `require_bearer`).
#[derive(Debug, Clone)]
pub struct AuthenticatedAccount(pub String);

/// Refuses requests without a valid bearer token (401) and records the account otherwise.
pub async fn require_bearer(
    State(app): State<Arc<App>>,
    mut request: Request,
    next: Next,
) -> Response {
    match crate::auth::account_of(&app.tokens, request.headers()) {
        Some(account) => {
            request
                .extensions_mut()
                .insert(AuthenticatedAccount(account));
            next.run(request).await
        }
        None => crate::auth::unauthorized(),
    }
}

/// The rmcp service mounted at `/mcp`.
pub fn service(app: Arc<App>) -> StreamableHttpService<McpHandler, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default();
    StreamableHttpService::new(
        move || Ok(McpHandler { app: app.clone() }),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

#[derive(Clone)]
pub struct McpHandler {
    app: Arc<App>,
}

/// One tool as MCP describes it; built-in tools carry read-only and destructive hints.
pub fn mcp_tool(
    name: &str,
    description: &str,
    input_schema: &serde_json::Value,
) -> rmcp::model::Tool {
    let schema = match input_schema {
        serde_json::Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    let tool = rmcp::model::Tool::new(name.to_owned(), description.to_owned(), Arc::new(schema));
    match Tool::from_name(name) {
        Some(t) => tool.annotate(
            ToolAnnotations::new()
                .read_only(t.is_read_only())
                .destructive(t.is_destructive()),
        ),
        None => tool,
    }
}

/// The built-in tools and the account's client tools as MCP tools.
pub fn tools(app: &App, account: Option<&str>) -> Vec<rmcp::model::Tool> {
    let client_tools = account.map(|a| app.registry.tools(a)).unwrap_or_default();
    Tool::ALL
        .iter()
        .map(|t| mcp_tool(t.name(), t.description(), &t.input_schema()))
        .chain(client_tools.iter().map(|t| {
            mcp_tool(
                &glovebox_proto::client_tools::exposed_name(&t.name),
                &t.description,
                &t.input_schema,
            )
        }))
        .collect()
}

/// A call's result frame as an MCP tool result: a denial or failure is a tool error whose text
/// the model can read (code, message, and the rule that decided).
pub fn call_result(frame: ServerFrame) -> CallToolResult {
    match frame {
        ServerFrame::Result {
            ok: true, result, ..
        } => CallToolResult::success(vec![ContentBlock::text(
            result.unwrap_or_default().to_string(),
        )]),
        ServerFrame::Result {
            error: Some(error), ..
        } => {
            let mut text = format!("{}: {}", error.code, error.message);
            if let Some(rule) = &error.rule {
                text.push_str(&format!(" (rule: {rule})"));
            }
            CallToolResult::error(vec![ContentBlock::text(text)])
        }
        _ => CallToolResult::error(vec![ContentBlock::text(
            "internal: the call produced no result",
        )]),
    }
}

fn account_of(context: &RequestContext<RoleServer>) -> Option<String> {
    let parts = context.extensions.get::<http::request::Parts>()?;
    parts
        .extensions
        .get::<AuthenticatedAccount>()
        .map(|a| a.0.clone())
}

impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("glovebox", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "File and command tools on the user's machine. Every call passes the user's permission \
                 gate; a denied call returns an error that says why. exec_run returns a job_id at once: \
                 poll exec_status and exec_tail.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let account = account_of(&context);
        Ok(ListToolsResult::with_all_items(tools(
            &self.app,
            account.as_deref(),
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(account) = account_of(&context) else {
            return Err(ErrorData::invalid_request("not authenticated", None));
        };
        let origin = Origin {
            account,
            connection_id: new_id("mcp"),
            profile: crate::profiles::Profile::Desktop,
        };
        let params = serde_json::Value::Object(request.arguments.unwrap_or_default());
        // MCP cancellation is not wired to asks yet: an ask ends by answer or timeout.
        let (_keep, never) = tokio::sync::watch::channel(false);
        let frame = run_call(
            &self.app,
            &origin,
            &new_id("mcp-call"),
            &request.name,
            params,
            never,
        )
        .await;
        let result = call_result(frame);
        Ok(result.into())
    }
}
