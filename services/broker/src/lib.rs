//! The broker: how the world reaches glovebox. It terminates client WebSockets, authenticates
//! them to an account, validates each call, and drives it through the account's executor (plan,
//! preview, execute) and the gate (decide, resolve), asking the account's approver when the gate
//! says ask. It decides nothing itself.
//!
//! Thin entry point: `glovebox broker --state-dir DIR --listen ADDR` builds a [`BrokerConfig`]
//! and calls [`run`] with a bound listener.

pub mod asks;
pub mod auth;
pub mod backends;
pub mod client_tools;
pub mod connection;
pub mod enablement;
pub mod mcp;
pub mod pipeline;
pub mod profiles;
pub mod registry;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use glovebox_proto::ws::SUBPROTOCOL;
use tokio::net::TcpListener;

/// Largest WebSocket message or frame accepted, in bytes.
pub const MAX_FRAME_BYTES: usize = 4 * 1024 * 1024;
/// Read and write buffer of each WebSocket connection.
pub const WS_BUFFER_BYTES: usize = 8 * 1024;
/// WebSocket connections served at once.
pub const MAX_CONNECTIONS: usize = 4096;
/// Asks that may wait for their turn, per account.
pub const MAX_WAITING_ASKS: usize = 16;
/// The default time an approver has to answer.
pub const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(25);

/// Everything the broker needs, validated.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Every credential: token hash, account, role.
    pub tokens: auth::TokenTable,
    pub gate_socket: PathBuf,
    /// (account, executor socket) pairs.
    pub executors: Vec<(String, PathBuf)>,
    pub ask_timeout: Duration,
    /// Reported in client context.
    pub shell: String,
    pub timezone: String,
    /// Which accounts have tools switched on, and the file to follow for changes.
    pub enabled: Vec<(String, bool)>,
    pub config_file: Option<PathBuf>,
    /// The keys the broker calls the gate and the executors with (handed over by the supervisor).
    pub handover: glovebox_proto::transport::handover::Handover,
}

impl BrokerConfig {
    /// Builds the broker's configuration from a validated `glovebox.yaml`.
    pub fn from_state(
        state: &glovebox_config::StateDir,
        config: &glovebox_config::Config,
    ) -> BrokerConfig {
        BrokerConfig {
            tokens: auth::TokenTable::from_config(config),
            gate_socket: state.gate_socket(),
            executors: config
                .accounts
                .iter()
                .map(|a| (a.id.clone(), state.executor_socket(&a.id)))
                .collect(),
            ask_timeout: DEFAULT_ASK_TIMEOUT,
            shell: "/bin/sh".to_owned(),
            timezone: "UTC".to_owned(),
            enabled: config
                .accounts
                .iter()
                .map(|a| (a.id.clone(), a.enabled))
                .collect(),
            config_file: Some(state.config_file()),
            handover: Default::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("broker backends: {0}")]
    Backends(#[from] glovebox_proto::transport::handover::HandoverError),
    #[error("broker server: {0}")]
    Serve(#[from] std::io::Error),
}

/// Shared state of a running broker.
pub struct App {
    pub config: BrokerConfig,
    pub credentials: Arc<auth::Credentials>,
    pub backends: backends::Backends,
    pub asks: asks::Asks,
    pub registry: registry::Registry,
    pub enablement: enablement::Enablement,
    pub sessions: profiles::Sessions,
    pub mcp_sessions: mcp::SessionOwners,
    pub next_conn: AtomicU64,
    connections: AtomicUsize,
}

/// Builds the HTTP router (WebSocket API and health).
pub fn router(config: BrokerConfig) -> Result<Router, BrokerError> {
    let app = Arc::new(App {
        credentials: Arc::new(auth::Credentials::new(
            config.config_file.clone(),
            config.tokens.clone(),
        )),
        backends: backends::Backends::new(
            &config.gate_socket,
            &config.executors,
            &config.handover,
        )?,
        asks: asks::Asks::new(config.ask_timeout, MAX_WAITING_ASKS),
        registry: registry::Registry::new(
            registry::DEFAULT_MAX_PROVIDERS,
            registry::DEFAULT_CALL_TIMEOUT,
        ),
        enablement: enablement::Enablement::new(
            config.config_file.clone(),
            config.enabled.iter().cloned().collect(),
        ),
        sessions: profiles::Sessions::new(profiles::MAX_SESSIONS),
        mcp_sessions: mcp::SessionOwners::default(),
        next_conn: AtomicU64::new(1),
        connections: AtomicUsize::new(0),
        config,
    });
    app.credentials.follow();
    let mcp = Router::new()
        .nest_service("/mcp", mcp::service(app.clone()))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            mcp::require_bearer,
        ));
    Ok(Router::new()
        .route("/v1/ws", get(ws_upgrade))
        .route("/v1/client-tools", get(client_tools::upgrade))
        .route("/healthz", get(health))
        .with_state(app)
        .merge(mcp))
}

/// Serves the broker on `listener` until `shutdown` completes.
pub async fn run(
    config: BrokerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), BrokerError> {
    let router = router(config)?;
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

struct ConnectionSlot(Arc<App>);

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn ws_upgrade(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    let Some(who) = auth::credential_of(&app.credentials, &headers) else {
        return auth::unauthorized();
    };
    let account = who.account.clone();
    let profile = match query.get("profile").map(String::as_str) {
        None => profiles::Profile::Desktop,
        Some(p) => match profiles::Profile::parse(p) {
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
    if app.connections.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
        app.connections.fetch_sub(1, Ordering::Relaxed);
        return (StatusCode::SERVICE_UNAVAILABLE, "too many connections\n").into_response();
    }
    let slot = ConnectionSlot(app.clone());
    let ws = if auth::offered(&headers).wants_subprotocol {
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
            connection::serve(app, who, profile, socket).await;
            drop(slot);
        })
}

async fn health(State(app): State<Arc<App>>) -> Response {
    let mut gate = app.backends.gate.clone();
    let mut req = tonic::Request::new(glovebox_proto::v1::HealthRequest {});
    req.set_timeout(Duration::from_secs(2));
    let gate_health = gate.health(req).await.ok().map(|h| h.into_inner());
    let mut executors = serde_json::Map::new();
    let mut executors_ok = true;
    for account in app.backends.accounts() {
        let status = match app.backends.executor(&account) {
            Some(mut client) => {
                let mut req = tonic::Request::new(glovebox_proto::v1::ExecutorStatusRequest {});
                req.set_timeout(Duration::from_secs(2));
                client.status(req).await.ok().map(|s| s.into_inner())
            }
            None => None,
        };
        let entry = match status {
            Some(s) => {
                // Where the kernel has no Landlock, health says so rather than pretending.
                executors_ok &= s.sandbox != "landlock=not_available";
                serde_json::json!({ "reachable": true, "sandbox": s.sandbox, "jobs": s.jobs, "uid": s.uid, "running_jobs": s.running_jobs })
            }
            None => {
                executors_ok = false;
                serde_json::json!({ "reachable": false })
            }
        };
        executors.insert(account, entry);
    }
    let (status, body) = match gate_health {
        Some(h) => {
            let ok = h.audit_healthy && h.policy_errors.is_empty() && executors_ok;
            (
                if ok {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                },
                serde_json::json!({
                    "ok": ok,
                    "gate": "reachable",
                    "audit": { "healthy": h.audit_healthy, "failures": h.audit_failures, "rows": h.audit_rows },
                    "policy_errors": h.policy_errors,
                    "executors": executors,
                    "connections": app.connections.load(Ordering::Relaxed),
                }),
            )
        }
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({ "ok": false, "gate": "unreachable", "executors": executors }),
        ),
    };
    (status, axum::Json(body)).into_response()
}
