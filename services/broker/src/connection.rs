//! One WebSocket connection on `/v1/ws`: the upgrade, the hello handshake (`connection/hello.rs`),
//! then invokes (agents) or answers and account management (approvers; `connection/manage.rs`).
//! The web console's connections are served here too, by the same code: they reach it through
//! `/console/ws` with a session cookie instead of the credential ([`Entry::Console`]). A bad frame
//! gets an error frame and the connection goes on; an oversized frame closes it with 1008 (policy
//! violation; see `session`). Nothing a frame says changes whose connection it is.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use glovebox_config::AccountId;
use glovebox_proto::ErrorCode;
use glovebox_proto::call_id::ClientCallId;
use glovebox_proto::ws::{
    ClientFrame, Role, SUBPROTOCOL, ServerFrame, WireError, parse_client_frame,
};

use crate::app::App;
use crate::profiles::Profile;
use crate::session::{End, Liveness, Outbox, Session};
use crate::sync::lock;
use glovebox_proto::ids::new_id;

mod frames;
use frames::{frame_error, frame_error_frame, text};
mod hello;
mod manage;

/// Largest WebSocket message or frame accepted, in bytes.
pub const MAX_FRAME_BYTES: usize = 4 * 1024 * 1024;
/// Read and write buffer of each WebSocket connection.
pub const WS_BUFFER_BYTES: usize = 8 * 1024;
/// Calls one agent connection may have in flight.
pub const MAX_IN_FLIGHT: usize = 32;

/// The calls in flight on one agent connection, each with the switch that withdraws it.
type InFlight = Arc<Mutex<HashMap<String, tokio::sync::watch::Sender<bool>>>>;

/// How a connection's credential reached the broker.
pub enum Entry {
    /// The credential itself: a bearer token, or on system mode's approve socket the kernel's
    /// word that the peer is the account's owner. The connection ends when the token is rotated
    /// or the owner no longer owns the account.
    Credential,
    /// A web console session standing for an approver credential; the connection ends when the
    /// session does (logout, expiry), as when the credential is rotated.
    Console(Pin<Box<dyn Future<Output = ()> + Send>>),
}

/// The upgrade of `/v1/ws`: authenticates the credential, reads the `profile` and `session`
/// query parameters, and serves the connection (its place among the account's connections was
/// taken when the request authenticated; see `front_door`).
pub async fn upgrade(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    axum::extract::Query(query): axum::extract::Query<HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    let Some(who) = crate::auth::credential_of(&app.credentials, &headers) else {
        return crate::auth::unauthorized();
    };
    let account = who.account.clone();
    let profile = match query.get("profile").map(String::as_str) {
        None => Profile::Desktop,
        Some(p) => match Profile::parse(p) {
            Some(p) => p,
            None => {
                return (StatusCode::BAD_REQUEST, "profile must be desktop or web\n")
                    .into_response();
            }
        },
    };
    if let Some(session) = query.get("session") {
        if !glovebox_proto::call_id::is_valid_id(session) {
            return (
                StatusCode::BAD_REQUEST,
                "session must be 1 to 128 characters of [A-Za-z0-9._:-]\n",
            )
                .into_response();
        }
        if let Err(bound) = app.sessions.bind(&account, session, profile) {
            return (
                StatusCode::CONFLICT,
                format!(
                    "profile mismatch: session {session} is a {} session\n",
                    bound.as_str()
                ),
            )
                .into_response();
        }
    }
    let ws = if crate::auth::offered(&headers).wants_subprotocol {
        ws.protocols([SUBPROTOCOL])
    } else {
        ws
    };
    // Small I/O buffers: most connections are idle most of the time (frames still go up to the cap).
    ws.read_buffer_size(WS_BUFFER_BYTES)
        .write_buffer_size(WS_BUFFER_BYTES)
        .max_message_size(MAX_FRAME_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .on_upgrade(move |socket| serve(app, who, profile, socket, Entry::Credential))
}

/// Serves one authenticated connection until it closes (or its credential is revoked).
pub async fn serve(
    app: Arc<App>,
    who: crate::auth::Authenticated,
    profile: Profile,
    socket: WebSocket,
    entry: Entry,
) {
    let console = matches!(entry, Entry::Console(_));
    let revoked = revocation(&app, &who, entry);
    let binary_refusal = frame_error(
        ErrorCode::InvalidParams,
        "binary frames are not accepted; send JSON text",
    );
    let mut session = Session::start(
        socket,
        revoked,
        Some(binary_refusal),
        Liveness::of(&app.config.limits),
    );
    let connection_id = new_id("conn");
    // Listening from before hello_ok, so no change after it is missed.
    let changes = app.tool_changes.subscribe(&who.account);
    let Some((role, offered)) =
        hello::hello(&app, &who, profile, &connection_id, &mut session).await
    else {
        session.finish().await;
        return;
    };
    let connection = Connection {
        credential: who.clone(),
        key: app
            .next_conn
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        app,
        account: who.account,
        connection_id,
        profile,
        role,
        console,
        outbox: session.outbox().clone(),
        in_flight: InFlight::default(),
    };
    connection.open();
    let watchers = connection.watch(changes, offered);
    loop {
        match session.next_text().await {
            Ok(text) => connection.on_text(text.as_str()).await,
            Err(End::Revoked) => {
                let (account, connection_id) = (&connection.account, &connection.connection_id);
                tracing::info!(%account, %connection_id, "credential revoked; closing");
                break;
            }
            Err(_) => break,
        }
    }
    watchers.abort();
    connection.close();
    drop(connection);
    session.finish().await;
}

/// The tasks that tell a connection of changes while it is open.
struct Watchers(Vec<tokio::task::JoinHandle<()>>);

impl Watchers {
    fn abort(self) {
        for task in self.0 {
            task.abort();
        }
    }
}

/// What ends a connection from outside: its token rotated or removed, or (on the approve
/// socket) its owner no longer the account's; for a console connection, also its session's end.
fn revocation(
    app: &Arc<App>,
    who: &crate::auth::Authenticated,
    entry: Entry,
) -> impl Future<Output = ()> + use<> {
    let credential_revoked = app.clone().unauthorized(who.clone());
    async move {
        match entry {
            Entry::Credential => credential_revoked.await,
            Entry::Console(ended) => {
                tokio::select! {
                    _ = credential_revoked => {}
                    _ = ended => {}
                }
            }
        }
    }
}

/// Tells an approver connection each change of the audit's health, an unhealthy audit at once.
async fn tell_audit_health(
    mut health: tokio::sync::watch::Receiver<Option<crate::audit_health::AuditState>>,
    outbox: Outbox<Message>,
) {
    let mut healthy = true;
    loop {
        let now = *health.borrow_and_update();
        if let Some(frame) = crate::audit_health::told(healthy, now) {
            healthy = !healthy;
            outbox.send(text(&frame)).await;
        }
        if health.changed().await.is_err() {
            return;
        }
    }
}

/// What an agent connection was last told about its tools.
struct Told {
    account: AccountId,
    profile: Profile,
    offered: Vec<glovebox_proto::ws::ToolSpec>,
}

/// Sends an agent connection `tools_changed` with its new list whenever the account's tools
/// change and the list it would be offered differs from the last one it got.
async fn tell_tool_changes(
    app: Arc<App>,
    mut told: Told,
    mut changes: tokio::sync::watch::Receiver<u64>,
    outbox: Outbox<Message>,
) {
    let account = &told.account;
    while changes.changed().await.is_ok() {
        let info = app.backends.account_info(account, Vec::new()).await;
        let tools = crate::tool_list::tools_for(&app, account, told.profile, info.as_ref()).await;
        if tools != told.offered {
            told.offered = tools.clone();
            outbox
                .send(text(&ServerFrame::ToolsChanged { tools }))
                .await;
        }
    }
}

/// One connection after its hello: whose it is, as what, and what it has in flight.
struct Connection {
    app: Arc<App>,
    account: AccountId,
    connection_id: String,
    profile: Profile,
    role: Role,
    /// Whether it came through a console session rather than with the credential itself.
    console: bool,
    /// The credential it authenticated with (a console session's stands for it).
    credential: crate::auth::Authenticated,
    /// Its number among the broker's connections (the approver registration's key).
    key: u64,
    outbox: Outbox<Message>,
    in_flight: InFlight,
}

impl Connection {
    /// What the connection is told as it happens: an agent, its tools' changes; an approver,
    /// the audit's health. The tasks end with the connection (`Watchers::abort`).
    fn watch(
        &self,
        changes: tokio::sync::watch::Receiver<u64>,
        offered: Vec<glovebox_proto::ws::ToolSpec>,
    ) -> Watchers {
        let tools_changed = (self.role == Role::Agent).then(|| {
            let told = Told {
                account: self.account.clone(),
                profile: self.profile,
                offered,
            };
            tokio::spawn(tell_tool_changes(
                self.app.clone(),
                told,
                changes,
                self.outbox.clone(),
            ))
        });
        let audit_health = (self.role == Role::Approver).then(|| {
            tokio::spawn(tell_audit_health(
                self.app.audit_health.subscribe(),
                self.outbox.clone(),
            ))
        });
        Watchers(tools_changed.into_iter().chain(audit_health).collect())
    }

    /// Announces the connection (an approver starts receiving the account's asks).
    fn open(&self) {
        let (account, connection_id) = (&self.account, &self.connection_id);
        tracing::info!(%account, %connection_id, role = ?self.role, "connection ready");
        if self.role == Role::Approver {
            self.app
                .asks
                .add_approver(account, self.key, self.outbox.frames());
        }
    }

    /// Undoes what the connection holds: its approver registration and its calls' asks.
    fn close(&self) {
        if self.role == Role::Approver {
            self.app.asks.remove_approver(&self.account, self.key);
        }
        // Nobody is left to receive the results: withdraw what is still waiting for approval.
        for cancel in lock(&self.in_flight).values() {
            let _ = cancel.send(true);
        }
        let (account, connection_id) = (&self.account, &self.connection_id);
        tracing::info!(%account, %connection_id, "connection closed");
    }

    async fn error(&self, code: ErrorCode, message: impl Into<String>) {
        self.outbox.send(frame_error(code, message)).await;
    }

    /// One text frame after hello: a bad one gets an error frame; a good one goes to its role's
    /// handler.
    async fn on_text(&self, text: &str) {
        match parse_client_frame(text) {
            Err(e) => self.error(ErrorCode::InvalidParams, e.to_string()).await,
            Ok(frame) => match self.role {
                Role::Agent => self.agent_frame(frame).await,
                Role::Approver => self.approver_frame(frame).await,
            },
        }
    }

    /// An agent invokes and cancels its own calls; it cannot answer or switch tools.
    async fn agent_frame(&self, frame: ClientFrame) {
        match frame {
            ClientFrame::Invoke {
                call_id,
                tool,
                params,
                tables,
                progress,
            } => {
                self.start_call(call_id, tool, params, tables, progress)
                    .await
            }
            ClientFrame::PackInvoke {
                call_id,
                pack,
                tool,
                args,
                progress,
            } => {
                let name = format!("{pack}{}{tool}", glovebox_proto::packs::SEPARATOR);
                self.start_call(call_id, name, args, false, progress).await
            }
            ClientFrame::PacksList {} => {
                let frame = if self.profile == Profile::Desktop {
                    crate::packs::packs_frame(&self.app, &self.account).await
                } else {
                    frame_error_frame(
                        ErrorCode::Denied,
                        "pack tools are not available to web connections",
                    )
                };
                self.outbox.send(text(&frame)).await;
            }
            ClientFrame::Cancel { call_id } => {
                let found = lock(&self.in_flight)
                    .get(call_id.as_str())
                    .map(|cancel| cancel.send(true))
                    .is_some();
                if !found {
                    let message = format!("no call {call_id} is in flight on this connection");
                    self.error(ErrorCode::InvalidParams, message).await;
                }
            }
            ClientFrame::Answer { .. } => {
                self.error(ErrorCode::Denied, "agent connections cannot answer asks")
                    .await
            }
            ClientFrame::SetEnabled { .. } => {
                let message = "agent connections cannot switch tools on or off";
                self.error(ErrorCode::Denied, message).await
            }
            ClientFrame::ConsoleLogin {} | ClientFrame::Manage { .. } => {
                let message = "agent connections cannot manage the account";
                self.error(ErrorCode::Denied, message).await
            }
            ClientFrame::Hello { .. } => {
                self.error(ErrorCode::InvalidParams, "hello was already sent")
                    .await
            }
        }
    }

    /// An approver answers its account's asks and switches its tools; it cannot call tools.
    async fn approver_frame(&self, frame: ClientFrame) {
        match frame {
            ClientFrame::Answer {
                ask_id,
                decision,
                confirm_cut,
            } => {
                use crate::asks::AnswerRefused;
                let taken =
                    self.app
                        .asks
                        .answer(&self.account, self.key, &ask_id, decision, confirm_cut);
                let message = match taken {
                    Ok(()) => return,
                    Err(AnswerRefused::NotPending) => {
                        format!("no pending ask {ask_id} for this account")
                    }
                    Err(AnswerRefused::CutNotConfirmed) => format!(
                        "ask {ask_id}'s preview was cut: allowing it needs confirm_cut (the \
                         approver saw that not all of it was shown); it is still pending"
                    ),
                };
                self.error(ErrorCode::InvalidParams, message).await;
            }
            ClientFrame::SetEnabled { enabled } => self.set_enabled(enabled).await,
            ClientFrame::ConsoleLogin {} => self.console_login().await,
            ClientFrame::Manage { request_id, op } => {
                // Management can take a while (a plan, the audit): it runs beside the asks.
                let (app, outbox) = (self.app.clone(), self.outbox.clone());
                let (account, connection_id) = (self.account.clone(), self.connection_id.clone());
                tokio::spawn(async move {
                    let at = manage::Caller {
                        app: &app,
                        account: &account,
                        connection_id: &connection_id,
                    };
                    let reply = manage::run(&at, request_id, op).await;
                    outbox.send(text(&reply)).await;
                });
            }
            ClientFrame::Cancel { .. } => {
                let message = "approver connections have no calls to cancel";
                self.error(ErrorCode::Denied, message).await
            }
            ClientFrame::PackInvoke { call_id, .. } => {
                let error = WireError::new(
                    ErrorCode::Denied,
                    "approver connections cannot invoke tools",
                );
                self.outbox
                    .send(text(&ServerFrame::failed(call_id.into_string(), error)))
                    .await;
            }
            ClientFrame::PacksList {} => {
                self.error(ErrorCode::Denied, "approver connections cannot list tools")
                    .await
            }
            ClientFrame::Invoke { call_id, .. } => {
                let error = WireError::new(
                    ErrorCode::Denied,
                    "approver connections cannot invoke tools",
                );
                self.outbox
                    .send(text(&ServerFrame::failed(call_id.into_string(), error)))
                    .await;
            }
            ClientFrame::Hello { .. } => {
                self.error(ErrorCode::InvalidParams, "hello was already sent")
                    .await
            }
        }
    }

    /// Switches the account's tools on or off through the gate, and says what they are now.
    async fn set_enabled(&self, enabled: bool) {
        let mut gate = self.app.backends.gate.clone();
        let request = crate::backends::request(glovebox_proto::v1::SetEnabledRequest {
            account: self.account.to_string(),
            enabled,
            by: "approver".into(),
        });
        let reply = match gate.set_enabled(request).await {
            Ok(r) => {
                self.app.tool_changes.changed(&self.account);
                text(&ServerFrame::Enabled {
                    account: self.account.to_string(),
                    enabled: r.into_inner().enabled,
                })
            }
            Err(_) => frame_error(
                ErrorCode::Unavailable,
                "could not switch the account's tools; the gate is unavailable",
            ),
        };
        self.outbox.send(reply).await;
    }

    /// Answers a request for a one-time console login link. Only a connection that presented the
    /// approver credential itself may mint one: a console session cannot extend itself.
    async fn console_login(&self) {
        if self.console {
            let message = "a console session cannot make login links; use `glovebox console`";
            return self.error(ErrorCode::Denied, message).await;
        }
        let reply = match self.app.console.issue_login(self.credential.clone()) {
            Some((path, ttl)) => text(&ServerFrame::ConsoleLogin {
                path,
                expires_in_ms: ttl.as_millis() as u64,
            }),
            None => frame_error(
                ErrorCode::Busy,
                "too many console login links are waiting; try again in a minute",
            ),
        };
        self.outbox.send(reply).await;
    }

    /// Starts a call on its own task, unless its id is already in flight or too many are; with
    /// `progress`, its pack's progress goes out as `progress` frames before its result.
    async fn start_call(
        &self,
        call_id: ClientCallId,
        tool: String,
        params: serde_json::Value,
        tables: bool,
        progress: bool,
    ) {
        let (cancel, cancelled) = tokio::sync::watch::channel(false);
        let refused = {
            let mut set = lock(&self.in_flight);
            if set.contains_key(call_id.as_str()) {
                Some(WireError::new(
                    ErrorCode::InvalidParams,
                    "call_id is already in flight on this connection",
                ))
            } else if set.len() >= MAX_IN_FLIGHT {
                Some(WireError::new(
                    ErrorCode::Busy,
                    format!("at most {MAX_IN_FLIGHT} calls may be in flight per connection"),
                ))
            } else {
                set.insert(call_id.to_string(), cancel);
                None
            }
        };
        if let Some(error) = refused {
            self.outbox
                .send(text(&ServerFrame::failed(call_id.into_string(), error)))
                .await;
            return;
        }
        let origin = crate::call::Origin {
            account: self.account.clone(),
            connection_id: self.connection_id.clone(),
            profile: self.profile,
            tables,
        };
        let (app, outbox, in_flight) = (
            self.app.clone(),
            self.outbox.clone(),
            self.in_flight.clone(),
        );
        tokio::spawn(async move {
            let call =
                crate::pipeline::run_call(app.road(), &origin, &call_id, &tool, params, cancelled);
            let result = if progress {
                let (outbox, call_id) = (outbox.clone(), call_id.clone());
                crate::call::with_progress(call, move |mut progressed| async move {
                    while let Some(p) = progressed.recv().await {
                        let frame = ServerFrame::Progress {
                            call_id: call_id.to_string(),
                            progress: p.progress,
                            total: p.total,
                            message: (!p.message.is_empty()).then_some(p.message),
                        };
                        outbox.send(text(&frame)).await;
                    }
                })
                .await
            } else {
                call.await
            };
            lock(&in_flight).remove(call_id.as_str());
            outbox.send(Message::Text(result.into_json().into())).await;
        });
    }
}
