//! One WebSocket connection on `/v1/ws`: the hello handshake, then invokes (agents) or answers
//! (approvers). A bad frame gets an error frame and the connection goes on; an oversized frame
//! closes it with 1008 (policy violation). Nothing a frame says changes whose connection it is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use glovebox_proto::ErrorCode;
use glovebox_proto::ws::{
    ClientContext, ClientFrame, Role, SUBPROTOCOL, ServerFrame, WireError, parse_client_frame,
};
use tokio::sync::mpsc;

use crate::app::App;
use crate::asks::new_id;
use crate::sync::lock;

/// Largest WebSocket message or frame accepted, in bytes.
pub const MAX_FRAME_BYTES: usize = 4 * 1024 * 1024;
/// Read and write buffer of each WebSocket connection.
pub const WS_BUFFER_BYTES: usize = 8 * 1024;
/// A connection must say hello within this time.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Calls one agent connection may have in flight.
pub const MAX_IN_FLIGHT: usize = 32;
/// Frames waiting to be written to one connection.
const OUTBOX_DEPTH: usize = 256;
/// WebSocket close code for a policy violation (e.g. an oversized frame).
const CLOSE_POLICY: u16 = 1008;

fn text(frame: &ServerFrame) -> Message {
    Message::Text(frame.to_json().into())
}

fn frame_error(code: ErrorCode, message: impl Into<String>) -> Message {
    text(&ServerFrame::Error {
        code,
        message: message.into(),
    })
}

/// The calls in flight on one agent connection, each with the switch that withdraws it.
type InFlight = Arc<Mutex<HashMap<String, tokio::sync::watch::Sender<bool>>>>;

/// The upgrade of `/v1/ws`: authenticates the credential, reads the `profile` and `session`
/// query parameters, takes a connection place, and serves the connection.
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
        None => crate::profiles::Profile::Desktop,
        Some(p) => match crate::profiles::Profile::parse(p) {
            Some(p) => p,
            None => {
                return (StatusCode::BAD_REQUEST, "profile must be desktop or web\n")
                    .into_response();
            }
        },
    };
    if let Some(session) = query.get("session") {
        if !glovebox_proto::ws::is_valid_id(session) {
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
    let Some(slot) = app.open_connection() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "too many connections\n").into_response();
    };
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
        .on_upgrade(move |socket| async move {
            serve(app, who, profile, socket).await;
            drop(slot);
        })
}

/// Serves one authenticated connection until it closes (or its credential is revoked).
pub async fn serve(
    app: Arc<App>,
    who: crate::auth::Authenticated,
    profile: crate::profiles::Profile,
    socket: WebSocket,
) {
    let account = who.account.clone();
    let (mut sink, mut stream) = socket.split();
    let (tx, mut rx) = mpsc::channel::<Message>(OUTBOX_DEPTH);
    let writer = tokio::spawn(async move {
        while let Some(message) = rx.recv().await {
            let closing = matches!(message, Message::Close(_));
            if sink.send(message).await.is_err() || closing {
                break;
            }
        }
        let _ = sink.close().await;
    });

    let connection_id = new_id("conn");
    let role = match tokio::time::timeout(
        HELLO_TIMEOUT,
        hello(&app, &who, profile, &connection_id, &mut stream, &tx),
    )
    .await
    {
        Ok(Some(role)) => role,
        Ok(None) => {
            drop(tx);
            let _ = writer.await;
            return;
        }
        Err(_) => {
            let _ = tx
                .send(frame_error(
                    ErrorCode::InvalidParams,
                    "no hello frame within 10 seconds",
                ))
                .await;
            let _ = tx.send(Message::Close(None)).await;
            drop(tx);
            let _ = writer.await;
            return;
        }
    };
    tracing::info!(%account, %connection_id, ?role, "connection ready");
    let conn_key = app
        .next_conn
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if role == Role::Approver {
        app.asks.add_approver(&account, conn_key, tx.clone());
    }
    let in_flight: InFlight = Arc::default();
    let mut revoked = std::pin::pin!(crate::auth::revoked(app.credentials.subscribe(), who));

    while let Some(message) = tokio::select! {
        m = stream.next() => m,
        _ = &mut revoked => {
            tracing::info!(%account, %connection_id, "credential revoked; closing");
            let _ = tx.send(Message::Close(Some(CloseFrame { code: CLOSE_POLICY, reason: "credential revoked".into() }))).await;
            None
        }
    } {
        let message = match message {
            Ok(m) => m,
            Err(e) => {
                let oversized =
                    e.to_string().contains("too long") || e.to_string().contains("Space limit");
                let (code, reason) = if oversized {
                    (CLOSE_POLICY, "frame too large")
                } else {
                    (1002, "protocol error")
                };
                let _ = tx
                    .send(Message::Close(Some(CloseFrame {
                        code,
                        reason: reason.into(),
                    })))
                    .await;
                break;
            }
        };
        let text_frame = match message {
            Message::Text(t) => t,
            Message::Binary(_) => {
                let _ = tx
                    .send(frame_error(
                        ErrorCode::InvalidParams,
                        "binary frames are not accepted; send JSON text",
                    ))
                    .await;
                continue;
            }
            Message::Close(_) => break,
            Message::Ping(_) | Message::Pong(_) => continue,
        };
        let frame = match parse_client_frame(text_frame.as_str()) {
            Ok(f) => f,
            Err(e) => {
                let _ = tx
                    .send(frame_error(ErrorCode::InvalidParams, e.to_string()))
                    .await;
                continue;
            }
        };
        match (role, frame) {
            (_, ClientFrame::Hello { .. }) => {
                let _ = tx
                    .send(frame_error(
                        ErrorCode::InvalidParams,
                        "hello was already sent",
                    ))
                    .await;
            }
            (
                Role::Agent,
                ClientFrame::Invoke {
                    call_id,
                    tool,
                    params,
                },
            ) => {
                let origin = crate::pipeline::Origin {
                    account: account.clone(),
                    connection_id: connection_id.clone(),
                    profile,
                };
                start_call(&app, origin, &tx, &in_flight, call_id, tool, params).await;
            }
            (Role::Approver, ClientFrame::Answer { ask_id, decision }) => {
                if !app.asks.answer(&account, &ask_id, decision) {
                    let _ = tx
                        .send(frame_error(
                            ErrorCode::InvalidParams,
                            format!("no pending ask {ask_id} for this account"),
                        ))
                        .await;
                }
            }
            (Role::Agent, ClientFrame::Answer { .. }) => {
                let _ = tx
                    .send(frame_error(
                        ErrorCode::Denied,
                        "agent connections cannot answer asks",
                    ))
                    .await;
            }
            (Role::Agent, ClientFrame::Cancel { call_id }) => {
                let found = lock(&in_flight)
                    .get(&call_id)
                    .map(|cancel| cancel.send(true))
                    .is_some();
                if !found {
                    let _ = tx
                        .send(frame_error(
                            ErrorCode::InvalidParams,
                            format!("no call {call_id} is in flight on this connection"),
                        ))
                        .await;
                }
            }
            (Role::Approver, ClientFrame::SetEnabled { enabled }) => {
                let mut gate = app.backends.gate.clone();
                let request = crate::backends::request(glovebox_proto::v1::SetEnabledRequest {
                    account: account.clone(),
                    enabled,
                    by: "approver".into(),
                });
                let reply = match gate.set_enabled(request).await {
                    Ok(r) => text(&ServerFrame::Enabled {
                        account: account.clone(),
                        enabled: r.into_inner().enabled,
                    }),
                    Err(_) => frame_error(
                        ErrorCode::Unavailable,
                        "could not switch the account's tools; the gate is unavailable",
                    ),
                };
                let _ = tx.send(reply).await;
            }
            (Role::Agent, ClientFrame::SetEnabled { .. }) => {
                let _ = tx
                    .send(frame_error(
                        ErrorCode::Denied,
                        "agent connections cannot switch tools on or off",
                    ))
                    .await;
            }
            (Role::Approver, ClientFrame::Cancel { .. }) => {
                let _ = tx
                    .send(frame_error(
                        ErrorCode::Denied,
                        "approver connections have no calls to cancel",
                    ))
                    .await;
            }
            (Role::Approver, ClientFrame::Invoke { call_id, .. }) => {
                let error = WireError::new(
                    ErrorCode::Denied,
                    "approver connections cannot invoke tools",
                );
                let _ = tx.send(text(&ServerFrame::failed(call_id, error))).await;
            }
        }
    }
    if role == Role::Approver {
        app.asks.remove_approver(&account, conn_key);
    }
    // Nobody is left to receive the results: withdraw what is still waiting for approval.
    for cancel in lock(&in_flight).values() {
        let _ = cancel.send(true);
    }
    tracing::info!(%account, %connection_id, "connection closed");
    drop(tx);
    let _ = writer.await;
}

/// Waits for the hello frame and answers it. `None` if the connection ended first, or if the
/// hello asked for a role its credential does not have (then the connection is closed with a
/// policy-violation code and the attempt is audited).
async fn hello(
    app: &App,
    who: &crate::auth::Authenticated,
    profile: crate::profiles::Profile,
    connection_id: &str,
    stream: &mut futures_util::stream::SplitStream<WebSocket>,
    tx: &mpsc::Sender<Message>,
) -> Option<Role> {
    while let Some(Ok(message)) = stream.next().await {
        let Message::Text(t) = message else {
            if matches!(message, Message::Close(_)) {
                return None;
            }
            continue;
        };
        match parse_client_frame(t.as_str()) {
            Ok(ClientFrame::Hello { role }) if role != who.role => {
                crate::pipeline::audit_auth_refusal(
                    app,
                    who,
                    &format!("the {} role", role.as_str()),
                )
                .await;
                let _ = tx
                    .send(frame_error(
                        ErrorCode::Denied,
                        format!(
                            "this is the account's {} credential: it cannot take the {} role",
                            who.role.as_str(),
                            role.as_str()
                        ),
                    ))
                    .await;
                let _ = tx
                    .send(Message::Close(Some(CloseFrame {
                        code: CLOSE_POLICY,
                        reason: "credential not valid for this role".into(),
                    })))
                    .await;
                return None;
            }
            Ok(ClientFrame::Hello { role }) => {
                let account = who.account.as_str();
                let context = context(app, account).await;
                let tools = crate::tool_list::tools_for(app, account, profile);
                let ok = ServerFrame::HelloOk {
                    account: account.to_owned(),
                    connection_id: connection_id.to_owned(),
                    role,
                    profile: profile.as_str().to_owned(),
                    tools,
                    context,
                };
                let _ = tx.send(text(&ok)).await;
                return Some(role);
            }
            Ok(_) => {
                let _ = tx
                    .send(frame_error(
                        ErrorCode::InvalidParams,
                        "the first frame must be hello",
                    ))
                    .await;
            }
            Err(e) => {
                let _ = tx
                    .send(frame_error(ErrorCode::InvalidParams, e.to_string()))
                    .await;
            }
        }
    }
    None
}

async fn context(app: &App, account: &str) -> ClientContext {
    let mut gate = app.backends.gate.clone();
    let info = gate
        .account_info(crate::backends::request(
            glovebox_proto::v1::AccountInfoRequest {
                account: account.to_owned(),
            },
        ))
        .await
        .ok()
        .map(|r| r.into_inner());
    ClientContext {
        os: std::env::consts::OS.to_owned(),
        arch: std::env::consts::ARCH.to_owned(),
        shell: app.config.shell.clone(),
        cwd: info.as_ref().map(|i| i.workdir.clone()).unwrap_or_default(),
        // Unknown (gate unreachable) is reported as enabled: the gate, when back, still decides.
        sandbox_enabled: info.as_ref().is_none_or(|i| i.sandbox_enabled),
        timezone: app.config.timezone.clone(),
    }
}

async fn start_call(
    app: &Arc<App>,
    origin: crate::pipeline::Origin,
    tx: &mpsc::Sender<Message>,
    in_flight: &InFlight,
    call_id: String,
    tool: String,
    params: serde_json::Value,
) {
    let (cancel, cancelled) = tokio::sync::watch::channel(false);
    let refused = {
        let mut set = lock(in_flight);
        if set.contains_key(&call_id) {
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
            set.insert(call_id.clone(), cancel);
            None
        }
    };
    if let Some(error) = refused {
        let _ = tx.send(text(&ServerFrame::failed(call_id, error))).await;
        return;
    }
    let (app, tx, in_flight) = (app.clone(), tx.clone(), in_flight.clone());
    tokio::spawn(async move {
        let result =
            crate::pipeline::run_call(&app, &origin, &call_id, &tool, params, cancelled).await;
        lock(&in_flight).remove(&call_id);
        let _ = tx.send(text(&result)).await;
    });
}
