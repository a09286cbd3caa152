//! `/v1/client-tools`: the WebSocket endpoint where providers (browser extensions, IDEs) register
//! their tools for agents of the same account (see `registry`). Authenticated like `/v1/ws`; the
//! frames are the loomcycle client-tools protocol v1.

use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::HeaderMap;
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use glovebox_proto::client_tools::{
    ProviderFrame, SUBPROTOCOLS, ToProviderFrame, accept_tools, parse_provider_frame,
};

use crate::app::App;
use crate::asks::new_id;
use crate::registry::RegistryError;

/// Largest frame a provider may send.
pub const MAX_PROVIDER_FRAME_BYTES: usize = 1024 * 1024;

pub async fn upgrade(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let Some(who) = crate::auth::credential_of(&app.credentials, &headers) else {
        return crate::auth::unauthorized();
    };
    // Providers serve the account's agents: they need the agent credential.
    if who.role != glovebox_proto::ws::Role::Agent {
        crate::pipeline::audit_auth_refusal(&app, &who, "client-tool provider").await;
        return crate::auth::wrong_role(glovebox_proto::ws::Role::Agent);
    }
    let account = who.account.clone();
    let revoked = crate::auth::revoked(app.credentials.subscribe(), who);
    let protocol = headers
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.split(',')
                .map(str::trim)
                .find(|p| SUBPROTOCOLS.contains(p))
        })
        .map(str::to_owned);
    let ws = match protocol {
        Some(p) => ws.protocols([p]),
        None => ws,
    };
    ws.max_message_size(MAX_PROVIDER_FRAME_BYTES)
        .max_frame_size(MAX_PROVIDER_FRAME_BYTES)
        .on_upgrade(move |socket| serve(app, account, socket, revoked))
}

async fn serve(
    app: Arc<App>,
    account: String,
    socket: WebSocket,
    revoked: impl std::future::Future<Output = ()>,
) {
    let (mut sink, mut stream) = socket.split();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(256);
    let (close_tx, mut close_rx) = tokio::sync::mpsc::channel::<CloseFrame>(1);
    let writer = tokio::spawn(async move {
        loop {
            tokio::select! {
                // Frames queued before a close go out first.
                biased;
                Some(text) = rx.recv() => {
                    if sink.send(Message::Text(text.into())).await.is_err() {
                        break;
                    }
                }
                Some(frame) = close_rx.recv() => {
                    let _ = sink.send(Message::Close(Some(frame))).await;
                    break;
                }
                else => break,
            }
        }
        let _ = sink.close().await;
    });
    let connection_id = new_id("provider");
    let key = match app.registry.connect(&account, &connection_id, tx.clone()) {
        Ok(key) => key,
        Err(RegistryError::TooManyConnections) | Err(_) => {
            let _ = tx
                .send(
                    ToProviderFrame::Error {
                        message: "too many client-tools connections for this account".into(),
                    }
                    .to_json(),
                )
                .await;
            let _ = close_tx
                .send(CloseFrame {
                    code: 1008,
                    reason: "too many connections".into(),
                })
                .await;
            drop(tx);
            let _ = writer.await;
            return;
        }
    };
    tracing::info!(%account, %connection_id, "client-tools provider connected");
    let mut revoked = std::pin::pin!(revoked);
    // A rotated credential ends the connection (and takes its tools away).
    while let Some(message) = tokio::select! {
        m = stream.next() => m,
        _ = &mut revoked => {
            let _ = close_tx.send(CloseFrame { code: 1008, reason: "credential revoked".into() }).await;
            None
        }
    } {
        let text = match message {
            Ok(Message::Text(t)) => t,
            Ok(Message::Close(_)) => break,
            Ok(_) => continue,
            Err(e) => {
                let oversized =
                    e.to_string().contains("too long") || e.to_string().contains("Space limit");
                if oversized {
                    let _ = close_tx
                        .send(CloseFrame {
                            code: 1008,
                            reason: "frame too large".into(),
                        })
                        .await;
                }
                break;
            }
        };
        match parse_provider_frame(text.as_str()) {
            Ok(ProviderFrame::Hello { tools, client }) => {
                let accepted = accept_tools(tools);
                let names = accepted.iter().map(|t| t.name.clone()).collect();
                app.registry.set_tools(&account, key, accepted);
                tracing::info!(%account, %connection_id, client = client.as_deref().unwrap_or(""), "client tools registered");
                let _ = tx
                    .send(
                        ToProviderFrame::HelloOk {
                            connection_id: connection_id.clone(),
                            accepted: names,
                        }
                        .to_json(),
                    )
                    .await;
            }
            Ok(ProviderFrame::Result {
                call_id,
                ok,
                output,
                error,
            }) => {
                let result = if ok {
                    Ok(output.unwrap_or(serde_json::Value::Null))
                } else {
                    Err(error.unwrap_or_else(|| "the client tool failed".to_owned()))
                };
                if !app.registry.complete(&account, key, &call_id, result) {
                    let _ = tx
                        .send(
                            ToProviderFrame::Error {
                                message: format!("no call {call_id} is pending on this connection"),
                            }
                            .to_json(),
                        )
                        .await;
                }
            }
            Ok(ProviderFrame::Ping) => {
                let _ = tx.send(ToProviderFrame::Pong.to_json()).await;
            }
            Ok(ProviderFrame::Pong) => {}
            Err(message) => {
                let _ = tx.send(ToProviderFrame::Error { message }.to_json()).await;
            }
        }
    }
    app.registry.disconnect(&account, key);
    tracing::info!(%account, %connection_id, "client-tools provider disconnected");
    drop(tx);
    drop(close_tx);
    let _ = writer.await;
}
