//! `/v1/client-tools`: the WebSocket endpoint where providers (browser extensions, IDEs) register
//! their tools for agents of the same account (see `registry`). Authenticated like `/v1/ws`; the
//! frames are the loomcycle client-tools protocol v1.

use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::{WebSocket, WebSocketUpgrade};
use axum::http::HeaderMap;
use axum::response::Response;
use glovebox_proto::client_tools::{
    ProviderFrame, SUBPROTOCOLS, ToProviderFrame, accept_tools, parse_provider_frame,
};

use crate::app::App;
use crate::asks::new_id;
use crate::registry::RegistryError;
use crate::session::{CLOSE_POLICY, Outbox, Session};

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
    revoked: impl std::future::Future<Output = ()> + Send + 'static,
) {
    // A rotated credential ends the connection (and takes its tools away).
    let liveness = crate::session::Liveness::of(&app.config.limits);
    let mut session = Session::<String>::start(socket, revoked, None, liveness);
    let connection_id = new_id("provider");
    let key = match app
        .registry
        .connect(&account, &connection_id, session.outbox().frames())
    {
        Ok(key) => key,
        Err(RegistryError::TooManyConnections) | Err(_) => {
            let outbox = session.outbox();
            let message = "too many client-tools connections for this account".into();
            outbox
                .send(ToProviderFrame::Error { message }.to_json())
                .await;
            outbox.close(CLOSE_POLICY, "too many connections");
            session.finish().await;
            return;
        }
    };
    tracing::info!(%account, %connection_id, "client-tools provider connected");
    let provider = Provider {
        app: &app,
        account: &account,
        connection_id: &connection_id,
        key,
        outbox: session.outbox().clone(),
    };
    while let Ok(text) = session.next_text().await {
        provider.on_text(text.as_str()).await;
    }
    drop(provider);
    app.registry.disconnect(&account, key);
    tracing::info!(%account, %connection_id, "client-tools provider disconnected");
    session.finish().await;
}

/// One registered provider connection.
struct Provider<'a> {
    app: &'a App,
    account: &'a str,
    connection_id: &'a str,
    /// Its key in the registry.
    key: u64,
    outbox: Outbox<String>,
}

impl Provider<'_> {
    async fn send(&self, frame: ToProviderFrame) {
        self.outbox.send(frame.to_json()).await;
    }

    /// One text frame: a provider's hello (re)registers its tools, a result completes a call.
    async fn on_text(&self, text: &str) {
        let (app, account, key) = (self.app, self.account, self.key);
        match parse_provider_frame(text) {
            Ok(ProviderFrame::Hello { tools, client }) => {
                let accepted = accept_tools(tools);
                let names = accepted.iter().map(|t| t.name.clone()).collect();
                app.registry.set_tools(account, key, accepted);
                let connection_id = self.connection_id;
                tracing::info!(%account, %connection_id, client = client.as_deref().unwrap_or(""), "client tools registered");
                self.send(ToProviderFrame::HelloOk {
                    connection_id: connection_id.to_owned(),
                    accepted: names,
                })
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
                if !app.registry.complete(account, key, &call_id, result) {
                    let message = format!("no call {call_id} is pending on this connection");
                    self.send(ToProviderFrame::Error { message }).await;
                }
            }
            Ok(ProviderFrame::Ping) => self.send(ToProviderFrame::Pong).await,
            Ok(ProviderFrame::Pong) => {}
            Err(message) => self.send(ToProviderFrame::Error { message }).await,
        }
    }
}
