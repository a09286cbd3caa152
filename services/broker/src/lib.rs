//! The broker: how the world reaches glovebox. It terminates client WebSockets, authenticates
//! them to an account, validates each call, and drives it through the account's executor (plan,
//! preview, execute) and the gate (decide, resolve), asking the account's approver when the gate
//! says ask. It decides nothing itself.
//!
//! Thin entry point: `glovebox broker --state-dir DIR --listen ADDR` builds a [`BrokerConfig`]
//! and calls [`run`] with a bound listener.

pub mod app;
pub mod asks;
pub mod auth;
pub mod backends;
pub mod client_tools;
pub mod connection;
pub mod health;
pub mod mcp;
pub mod packs;
pub mod pipeline;
pub mod profiles;
pub mod registry;
pub mod session;
mod sync;
pub mod tool_changes;
pub mod tool_list;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tokio::net::TcpListener;

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
    /// (account, pack host socket) pairs.
    pub packs: Vec<(String, PathBuf)>,
    pub ask_timeout: Duration,
    /// Reported in client context.
    pub shell: String,
    pub timezone: String,
    /// `glovebox.yaml`, which the broker follows for rotated credentials.
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
            packs: config
                .accounts
                .iter()
                .map(|a| (a.id.clone(), state.packs_socket(&a.id)))
                .collect(),
            ask_timeout: DEFAULT_ASK_TIMEOUT,
            shell: "/bin/sh".to_owned(),
            timezone: "UTC".to_owned(),
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

/// Builds the HTTP router (WebSocket API and health).
pub fn router(config: BrokerConfig) -> Result<Router, BrokerError> {
    let app = Arc::new(app::App::new(config)?);
    app.credentials.follow();
    packs::spawn(app.clone());
    tokio::spawn(tool_changes::watch_gate(Arc::downgrade(&app)));
    let mcp = Router::new()
        .nest_service("/mcp", mcp::service(app.clone()))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            mcp::require_bearer,
        ));
    Ok(Router::new()
        .route("/v1/ws", get(connection::upgrade))
        .route("/v1/client-tools", get(client_tools::upgrade))
        .route("/healthz", get(health::health))
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
