//! `glovebox mcp`: an MCP server on stdin/stdout for clients that only launch stdio servers. It
//! forwards every call to the running broker over the WebSocket API, as the account whose token
//! it reads, so the gate, the approver and the audit see exactly what they see for any agent.
//! stdout carries only the MCP protocol; diagnostics go to stderr.

use std::process::ExitCode;
use std::sync::Arc;

use glovebox_proto::ws::{ClientFrame, Role, ServerFrame, ToolSpec};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use tokio::sync::Mutex;

use crate::client::{Socket, Target, connect_with_hello, next_frame, send_frame};

#[derive(Clone)]
struct Bridge {
    socket: Arc<Mutex<Socket>>,
    tools: Arc<Vec<ToolSpec>>,
}

pub async fn serve(target: &Target) -> anyhow::Result<ExitCode> {
    let (socket, hello_ok) = connect_with_hello(target, Role::Agent).await?;
    let ServerFrame::HelloOk { tools, account, .. } = hello_ok else {
        anyhow::bail!("unexpected answer to hello");
    };
    eprintln!(
        "glovebox mcp: serving {} tools of account {account} on stdio",
        tools.len()
    );
    let bridge = Bridge {
        socket: Arc::new(Mutex::new(socket)),
        tools: Arc::new(tools),
    };
    answer_pings_while_idle(bridge.socket.clone());
    let running = bridge.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(ExitCode::SUCCESS)
}

/// How often an idle bridge reads its socket, so the broker's pings are answered (the broker
/// closes a WebSocket from which nothing arrives; see its `limits`).
const IDLE_READ_PERIOD: std::time::Duration = std::time::Duration::from_secs(10);

/// While no call holds the socket, takes what the broker sent without waiting: pings, which the
/// WebSocket layer answers on the next read.
fn answer_pings_while_idle(socket: Arc<Mutex<Socket>>) {
    use futures_util::{FutureExt, StreamExt};
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(IDLE_READ_PERIOD).await;
            let Ok(mut socket) = socket.try_lock() else {
                continue; // a call is reading it
            };
            while let Some(Some(Ok(_))) = socket.next().now_or_never() {}
        }
    });
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("glovebox", env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .tools
            .iter()
            .map(|t| glovebox_broker::mcp::mcp_tool(&t.name, &t.description, &t.input_schema))
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let call_id = format!(
            "stdio-{}",
            hex::encode(glovebox_config::random_bytes::<8>().unwrap_or_default())
        );
        let params = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let invoke = ClientFrame::Invoke {
            call_id: call_id.clone(),
            tool: request.name.to_string(),
            params,
        };
        let mut socket = self.socket.lock().await;
        let internal =
            |e: anyhow::Error| ErrorData::internal_error(format!("broker connection: {e}"), None);
        send_frame(&mut socket, &invoke).await.map_err(internal)?;
        loop {
            let frame = next_frame(&mut socket).await.map_err(internal)?;
            if matches!(&frame, ServerFrame::Result { call_id: id, .. } if *id == call_id) {
                return Ok(glovebox_broker::mcp::call_result(frame).into());
            }
        }
    }
}
