//! `/v1/client-tools`: the WebSocket endpoint where providers (browser extensions, IDEs) register
//! their tools for agents of the same account (see `registry`). Authenticated like `/v1/ws`; the
//! frames are the loomcycle client-tools protocol v1.

use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::{WebSocket, WebSocketUpgrade};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use glovebox_config::AccountId;
use glovebox_proto::client_tools::{
    PROTOCOL_VERSION, ProviderFrame, SUBPROTOCOLS, ToProviderFrame, accept_tools,
    parse_provider_frame,
};

use crate::app::App;
use crate::registry::RegistryError;
use crate::session::{CLOSE_POLICY, Outbox, Session};
use glovebox_proto::ids::new_id;

pub async fn upgrade(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    if !app.config.client_tools.enabled {
        return (
            http::StatusCode::SERVICE_UNAVAILABLE,
            "client tools are switched off on this glovebox (client_tools.enabled in glovebox.yaml)\n",
        )
            .into_response();
    }
    // Providers serve the account's agents: they need the agent credential.
    let agent = glovebox_proto::ws::Role::Agent;
    let who = match crate::role_check::credential_for(&app, &headers, agent, "client-tool provider")
        .await
    {
        Ok(who) => who,
        Err(refused) => return refused,
    };
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
    let max_frame = app.config.client_tools.max_frame_bytes;
    ws.max_message_size(max_frame)
        .max_frame_size(max_frame)
        .on_upgrade(move |socket| serve(app, account, socket, revoked))
}

async fn serve(
    app: Arc<App>,
    account: AccountId,
    socket: WebSocket,
    revoked: impl std::future::Future<Output = ()> + Send + 'static,
) {
    // A rotated credential ends the connection (and takes its tools away).
    let liveness = crate::session::Liveness::of(&app.config.limits);
    let mut session = Session::<String>::start(socket, revoked, None, liveness);
    let connection_id = new_id("provider");
    // A socket takes one of the account's provider places only with its hello.
    let Some((tools, client)) = await_hello(&mut session, app.config.limits.hello_timeout).await
    else {
        session.finish().await;
        return;
    };
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
    provider.register(tools, client).await;
    // The provider is pinged as often as every WebSocket (`limits::Limits::ping_interval`), in
    // the protocol and with a `ping` frame; one that has sent nothing for two intervals — no
    // frame, not even a protocol pong (what `ws` and other libraries answer by themselves) — is
    // dropped (its tools leave with it, so a frozen provider stops being "most recent").
    let every = liveness.ping;
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            text = session.next_text() => match text {
                Ok(text) => provider.on_text(text.as_str()).await,
                Err(_) => break,
            },
            _ = ping.tick() => {
                if session.last_heard().elapsed() > every * 2 {
                    tracing::info!(%account, %connection_id, "client-tools provider did not answer a ping; dropping it");
                    session.outbox().close(CLOSE_POLICY, "no answer to ping");
                    break;
                }
                provider.send(ToProviderFrame::Ping).await;
            }
        }
    }
    drop(provider);
    app.registry.disconnect(&account, key);
    app.tool_changes.changed(&account);
    tracing::info!(%account, %connection_id, "client-tools provider disconnected");
    session.finish().await;
}

/// Reads frames until the provider's hello (answering pings, refusing the rest), for at most
/// `timeout` (the hello timeout, see `limits`). `None` if the connection ended first or took too long.
async fn await_hello(
    session: &mut Session<String>,
    timeout: std::time::Duration,
) -> Option<(
    Vec<glovebox_proto::client_tools::ClientToolSpec>,
    Option<String>,
)> {
    let hello = async {
        loop {
            let text = session.next_text().await.ok()?;
            let outbox = session.outbox();
            let refusal = match parse_provider_frame(text.as_str()) {
                Ok(ProviderFrame::Hello { tools, client }) => return Some((tools, client)),
                Ok(ProviderFrame::Ping) => {
                    outbox.send(ToProviderFrame::Pong.to_json()).await;
                    continue;
                }
                Ok(ProviderFrame::Pong) => continue,
                Ok(ProviderFrame::Result { .. }) => "the first frame must be hello".to_owned(),
                Err(message) => message,
            };
            outbox
                .send(ToProviderFrame::Error { message: refusal }.to_json())
                .await;
        }
    };
    match tokio::time::timeout(timeout, hello).await {
        Ok(hello) => hello,
        Err(_) => {
            let outbox = session.outbox();
            let message = format!("no hello frame within {} seconds", timeout.as_secs());
            outbox
                .send(ToProviderFrame::Error { message }.to_json())
                .await;
            outbox.close(CLOSE_POLICY, "no hello");
            None
        }
    }
}

/// One registered provider connection.
struct Provider<'a> {
    app: &'a App,
    account: &'a AccountId,
    connection_id: &'a str,
    /// Its key in the registry.
    key: u64,
    outbox: Outbox<String>,
}

impl Provider<'_> {
    async fn send(&self, frame: ToProviderFrame) {
        self.outbox.send(frame.to_json()).await;
    }

    /// Registers (replaces) the connection's tools, tells the account's agents, and answers
    /// with what was accepted and what was not.
    async fn register(
        &self,
        tools: Vec<glovebox_proto::client_tools::ClientToolSpec>,
        client: Option<String>,
    ) {
        let (app, account, connection_id) = (self.app, self.account, self.connection_id);
        let (offered, mut rejected) = accept_tools(tools);
        // A schema that cannot check input would refuse every call: refused here, once.
        let mut accepted = Vec::new();
        for tool in offered {
            match crate::input_check::usable_schema(&tool.input_schema) {
                Ok(()) => accepted.push(tool),
                Err(reason) => rejected.push(glovebox_proto::client_tools::Rejected {
                    name: tool.name,
                    reason,
                }),
            }
        }
        let names = accepted.iter().map(|t| t.name.clone()).collect();
        app.registry.set_tools(account, self.key, accepted);
        app.tool_changes.changed(account);
        for r in &rejected {
            tracing::info!(%account, %connection_id, tool = %r.name, reason = %r.reason, "client tool not registered");
        }
        tracing::info!(%account, %connection_id, client = client.as_deref().unwrap_or(""), "client tools registered");
        self.send(ToProviderFrame::HelloOk {
            connection_id: connection_id.to_owned(),
            accepted: names,
            rejected,
            protocol_version: PROTOCOL_VERSION,
        })
        .await;
    }

    /// One text frame: a provider's hello (re)registers its tools, a result completes a call.
    async fn on_text(&self, text: &str) {
        let (app, account, key) = (self.app, self.account, self.key);
        match parse_provider_frame(text) {
            Ok(ProviderFrame::Hello { tools, client }) => self.register(tools, client).await,
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
