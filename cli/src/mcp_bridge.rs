//! `glovebox mcp`: an MCP server on stdin/stdout for clients that only launch stdio servers, as
//! the account whose token it reads, so the gate, the approver and the audit see exactly what
//! they see for any agent. stdout carries only the MCP protocol; diagnostics go to stderr.
//!
//! When stdin and stdout are pipes or Unix stream sockets and the broker is this machine's
//! (user mode), the bridge hands them to the broker (`handover`), which then serves the session
//! on them itself: no call passes through this process. Otherwise, or when the broker cannot
//! take them, the bridge serves the session and forwards every call over the WebSocket API:
//!
//! One WebSocket carries every call at once, each matched to its result by call id (a slow call
//! holds up no other). When the broker goes away the bridge keeps serving MCP and reconnects with
//! backoff (calls in flight fail, saying they may or may not have run; calls made meanwhile wait
//! a little for the broker, then fail saying what to do). The tool list follows the broker's
//! `tools_changed` frames and each reconnection, and every change is forwarded to the MCP client
//! as `notifications/tools/list_changed`. An MCP cancellation is forwarded as a `cancel` frame.

use glovebox_proto::call_id::ClientCallId;
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use glovebox_proto::ws::{BridgeFrame, CallEnd, ClientFrame, Role, ServerFrame, ToolSpec};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::Message;

use crate::Env;
use crate::client::{Target, connect_with_hello};
use crate::shared_args::ClientArgs;

mod away;
mod handover;
mod stdio;

/// The first wait before reconnecting; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long a call or a tool listing waits for a broker that is not connected.
const CONNECT_WAIT: Duration = Duration::from_secs(10);
/// Frames waiting to be written to the broker.
const OUTGOING_DEPTH: usize = 256;

/// A connection to the broker is known by its number: a frame or a call belongs to one, and
/// never carries over to the next.
type Generation = u64;

/// What the calls and the connection task share.
struct Shared {
    /// The connection now up, if any.
    connected: watch::Sender<Option<Generation>>,
    /// The tools the broker last offered.
    tools: Mutex<Vec<ToolSpec>>,
    /// Calls waiting for their result, by call id, with the connection they were sent on.
    pending: Mutex<HashMap<String, (Generation, oneshot::Sender<CallEnd>)>>,
    /// Frames for the broker, each for the connection it was meant for.
    outgoing: mpsc::Sender<(Generation, ClientFrame)>,
    /// The MCP client, once it is initialized (to tell it the tool list changed).
    peer: OnceLock<Peer<RoleServer>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// Takes the broker's new tool list; tells the MCP client if it differs.
    async fn set_tools(&self, tools: Vec<ToolSpec>) {
        let changed = {
            let mut current = lock(&self.tools);
            let changed = *current != tools;
            *current = tools;
            changed
        };
        if changed && let Some(peer) = self.peer.get() {
            let _ = peer.notify_tool_list_changed().await;
        }
    }

    /// Fails the calls sent on connection `generation`, which ended before they did.
    fn fail_pending(&self, generation: Generation) {
        let mut pending = lock(&self.pending);
        let lost: Vec<String> = pending
            .iter()
            .filter(|(_, (g, _))| *g == generation)
            .map(|(id, _)| id.clone())
            .collect();
        for id in lost {
            if let Some((_, reply)) = pending.remove(&id) {
                let error = glovebox_proto::ws::WireError::new(
                    glovebox_proto::ErrorCode::Unavailable,
                    "the connection to glovebox broke during the call; it may or may not have run",
                );
                let _ = reply.send(CallEnd::failed(id, error));
            }
        }
    }

    /// The connection now up, waiting up to [`CONNECT_WAIT`] for one.
    async fn connection(&self) -> Option<Generation> {
        let mut connected = self.connected.subscribe();
        let up = tokio::time::timeout(CONNECT_WAIT, connected.wait_for(Option::is_some)).await;
        match up {
            Ok(Ok(generation)) => *generation,
            _ => None,
        }
    }
}

#[derive(Clone)]
struct Bridge {
    shared: Arc<Shared>,
}

/// `glovebox mcp`: serves the account's tools as its agent (the agent credential of `client`,
/// read again before each reconnection).
pub async fn run(env: Env, client: ClientArgs) -> anyhow::Result<ExitCode> {
    serve(move || env.target(client.clone(), Role::Agent)).await
}

/// Serves MCP on stdio until the client closes it. `target` says where the broker is and with
/// which credential; it is asked again before each reconnection (a restarted broker may have
/// written a new URL).
pub async fn serve(
    target: impl Fn() -> anyhow::Result<Target> + Send + 'static,
) -> anyhow::Result<ExitCode> {
    // What retrying cannot mend is said at once, and the bridge exits: an account that has no
    // token here (unknown), or a token the broker refuses. A broker not running yet is waited
    // for, as ever.
    let first = target()?;
    if let Err(e) = connect_with_hello(&first, Role::Agent).await
        && let Some(refused) = e.downcast_ref::<crate::client::CredentialRefused>()
    {
        anyhow::bail!("{refused}");
    }
    // The broker serves the session on our stdio itself when it can (`handover`).
    let target = if stdio::can_hand_over() {
        let (handed, target) =
            tokio::task::spawn_blocking(move || (handover::run(&target), target)).await?;
        match handed {
            Ok(()) => return Ok(ExitCode::SUCCESS),
            Err(e) => {
                eprintln!("glovebox mcp: serving the session through the WebSocket ({e:#})");
                target
            }
        }
    } else {
        target
    };
    let (outgoing, outgoing_rx) = mpsc::channel(OUTGOING_DEPTH);
    let shared = Arc::new(Shared {
        connected: watch::channel(None).0,
        tools: Mutex::new(Vec::new()),
        pending: Mutex::new(HashMap::new()),
        outgoing,
        peer: OnceLock::new(),
    });
    let link = tokio::spawn(keep_connected(shared.clone(), target, outgoing_rx));
    // The first listing should see the tools: give the first connection a moment.
    let _ = shared.connection().await;
    let bridge = Bridge { shared };
    let (modes, stdin, stdout) = stdio::take();
    let running = bridge.serve((stdin, stdout)).await?;
    running.waiting().await?;
    link.abort();
    drop(modes);
    Ok(ExitCode::SUCCESS)
}

/// Connects, serves the connection until it breaks, and reconnects with backoff, forever.
async fn keep_connected(
    shared: Arc<Shared>,
    target: impl Fn() -> anyhow::Result<Target>,
    mut outgoing: mpsc::Receiver<(Generation, ClientFrame)>,
) {
    let mut generation: Generation = 0;
    let mut backoff = FIRST_BACKOFF;
    let mut last_error = String::new();
    loop {
        let connected = match target() {
            Ok(target) => connect_with_hello(&target, Role::Agent).await,
            Err(e) => Err(e),
        };
        match connected {
            Ok((socket, ServerFrame::HelloOk { tools, account, .. })) => {
                generation += 1;
                backoff = FIRST_BACKOFF;
                last_error.clear();
                eprintln!(
                    "glovebox mcp: connected; serving {} tools of account {account}",
                    tools.len()
                );
                shared.set_tools(tools).await;
                shared.connected.send_replace(Some(generation));
                serve_connection(&shared, generation, socket, &mut outgoing).await;
                shared.connected.send_replace(None);
                shared.fail_pending(generation);
                eprintln!("glovebox mcp: the connection to glovebox broke; reconnecting");
            }
            Ok(_) => {}
            Err(e) => {
                let error = format!("{e:#}");
                if error != last_error {
                    eprintln!("glovebox mcp: cannot reach glovebox ({error}); retrying");
                    last_error = error;
                }
            }
        }
        // Frames for a connection that is gone are dropped, never sent on the next one.
        while outgoing.try_recv().is_ok() {}
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Carries frames both ways on one connection until it ends.
async fn serve_connection(
    shared: &Shared,
    generation: Generation,
    socket: crate::client::Socket,
    outgoing: &mut mpsc::Receiver<(Generation, ClientFrame)>,
) {
    let (mut sink, mut stream) = socket.split();
    loop {
        tokio::select! {
            frame = outgoing.recv() => {
                let Some((g, frame)) = frame else { return };
                if g != generation {
                    continue;
                }
                let Ok(text) = frame.to_json() else { continue };
                if sink.send(Message::Text(text.into())).await.is_err() {
                    return;
                }
            }
            message = stream.next() => match message {
                Some(Ok(Message::Text(text))) => {
                    match glovebox_proto::ws::parse_bridge_frame(text.as_str()) {
                        Ok(frame) => on_frame(shared, frame).await,
                        Err(e) => eprintln!("glovebox mcp: malformed frame from the broker: {e}"),
                    }
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(_)) => {}
            },
        }
    }
}

async fn on_frame(shared: &Shared, frame: BridgeFrame) {
    match frame {
        BridgeFrame::End(end) => {
            let waiting = lock(&shared.pending).remove(&end.call_id);
            if let Some((_, reply)) = waiting {
                let _ = reply.send(end);
            }
        }
        BridgeFrame::Other(ServerFrame::ToolsChanged { tools }) => shared.set_tools(tools).await,
        BridgeFrame::Other(ServerFrame::Error { code, message }) => {
            eprintln!("glovebox mcp: the broker said {code}: {message}");
        }
        _ => {}
    }
}

/// A tool error the MCP client's model can read.
fn tool_error(text: &str) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(text.to_owned())]).into()
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(glovebox_mcp_face::capabilities())
            .with_server_info(Implementation::new("glovebox", env!("CARGO_PKG_VERSION")))
            .with_instructions(glovebox_mcp_face::INSTRUCTIONS)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let _ = self.shared.peer.set(context.peer.clone());
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = lock(&self.shared.tools)
            .iter()
            .map(glovebox_mcp_face::tool_of)
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(generation) = self.shared.connection().await else {
            return Ok(tool_error(
                "unavailable: glovebox is not reachable (is `glovebox up` running?); the call was not run",
            ));
        };
        // In the order made, as the broker's own: the audit's index of client call ids then grows
        // at one end (a random id put each call's entry on a page of its own in every commit).
        let call_id = ClientCallId::ordered("stdio");
        let (reply, result) = oneshot::channel();
        lock(&self.shared.pending).insert(call_id.to_string(), (generation, reply));
        // The connection task marks a connection gone before failing its calls: checked after
        // the insert, a call is either failed by it or sees it gone here.
        if *self.shared.connected.borrow() != Some(generation) {
            lock(&self.shared.pending).remove(call_id.as_str());
            return Ok(tool_error(
                "unavailable: the connection to glovebox broke; the call was not run",
            ));
        }
        let invoke = ClientFrame::Invoke {
            call_id: call_id.clone(),
            tool: request.name.to_string(),
            params: serde_json::Value::Object(request.arguments.unwrap_or_default()),
            // Shown as MCP shows them: made as tables where they are made.
            tables: true,
            progress: false,
        };
        if self
            .shared
            .outgoing
            .send((generation, invoke))
            .await
            .is_err()
        {
            lock(&self.shared.pending).remove(call_id.as_str());
            return Ok(tool_error("internal: the bridge has stopped"));
        }
        let mut result = result;
        let frame = tokio::select! {
            frame = &mut result => frame,
            _ = context.ct.cancelled() => {
                let cancel = ClientFrame::Cancel { call_id: call_id.clone() };
                let _ = self.shared.outgoing.send((generation, cancel)).await;
                // The broker answers a withdrawn call at once; a call already running finishes.
                (&mut result).await
            }
        };
        match frame {
            Ok(frame) => Ok(glovebox_mcp_face::call_result(&request.name, frame).into()),
            Err(_) => Ok(tool_error(
                "unavailable: the connection to glovebox broke during the call; it may or may not have run",
            )),
        }
    }
}
