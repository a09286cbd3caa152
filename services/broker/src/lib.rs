//! The broker: how the world reaches glovebox. It terminates client WebSockets, authenticates
//! them to an account, validates each call, and drives it through the account's executor (plan,
//! preview, execute) and the gate (decide, resolve), asking the account's approver when the gate
//! says ask. It decides nothing itself.
//!
//! Thin entry point: `glovebox broker --state-dir DIR --listen ADDR` builds a [`BrokerConfig`]
//! and calls [`run`] with a bound listener, which raises the open-files limit, sizes the
//! connection pools by it (`limits`, `admission`) and serves the front door (`front_door`).

pub mod added_accounts;
pub mod admission;
pub mod answer;
pub mod app;
pub mod approve_socket;
pub mod asks;
pub mod audit_health;
pub mod auth;
pub mod authorize;
pub mod backends;
pub mod call;
pub mod call_slots;
pub mod client_tools;
pub mod connection;
pub mod console;
pub mod decisions;
pub mod deliveries;
pub mod front_door;
pub mod health;
pub mod held;
pub mod input_check;
pub mod limits;
pub mod mcp;
pub mod metrics;
pub mod packs;
pub mod peer;
pub mod pipeline;
pub mod profiles;
pub mod registry;
pub mod road;
pub mod role_check;
pub mod runs;
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
    pub executors: Vec<(glovebox_config::AccountId, PathBuf)>,
    /// (account, pack host socket) pairs.
    pub packs: Vec<(glovebox_config::AccountId, PathBuf)>,
    pub ask_timeout: Duration,
    /// Reported in client context.
    pub shell: String,
    pub timezone: String,
    /// `glovebox.yaml`, which the broker follows for rotated credentials.
    pub config_file: Option<PathBuf>,
    /// The keys the broker calls the gate and the executors with (handed over by the supervisor).
    pub handover: glovebox_proto::transport::handover::Handover,
    /// Timeouts and caps of the front door.
    pub limits: limits::Limits,
    /// The knobs of `/v1/client-tools`.
    pub client_tools: glovebox_config::client_tools::ClientTools,
    /// The supervisor's updates of the accounts added at run time (see `added_accounts`).
    pub accounts_updates: Option<added_accounts::Updates>,
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
            ask_timeout: config.limits.ask_timeout.unwrap_or(DEFAULT_ASK_TIMEOUT),
            shell: "/bin/sh".to_owned(),
            timezone: "UTC".to_owned(),
            config_file: Some(state.config_file()),
            handover: Default::default(),
            limits: limits::Limits::from_config(&config.limits),
            client_tools: config.client_tools,
            accounts_updates: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("broker backends: {0}")]
    Backends(#[from] glovebox_proto::transport::handover::HandoverError),
    #[error("broker server: {0}")]
    Serve(#[from] std::io::Error),
    #[error("broker: {0}")]
    Files(#[from] limits::TooFewFiles),
}

/// Builds the HTTP router (WebSocket API, MCP, the web console and health) over a broker's
/// state. Connections served by [`front_door`] are counted against the account of their first
/// authenticated request.
pub fn router(app: Arc<app::App>) -> Router {
    let mcp = Router::new()
        .nest_service("/mcp", mcp::service(app.clone()))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            mcp::require_bearer,
        ));
    let console = console::router(app.clone());
    Router::new()
        .route("/v1/ws", get(connection::upgrade))
        .route("/v1/client-tools", get(client_tools::upgrade))
        .route(mcp::handover::PATH, get(mcp::handover::upgrade))
        .route("/healthz", get(health::health))
        .route("/metrics", get(metrics::metrics))
        .route(
            "/.well-known/{*discovery}",
            get(|| async { auth::no_oauth() }),
        )
        .with_state(app.clone())
        .merge(mcp)
        .merge(console)
        .layer(axum::middleware::from_fn_with_state(app, front_door::claim))
}

/// Serves the broker on `listener` until `shutdown` completes. Raises the open-files soft limit
/// first: the pools are sized by it.
pub async fn run(
    config: BrokerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), BrokerError> {
    run_with_sockets(config, listener, Sockets::default(), shutdown).await
}

/// The broker's Unix sockets, besides its TCP port.
#[derive(Default)]
pub struct Sockets {
    /// User mode: the front door for local clients (`StateDir::agent_socket`).
    pub local: Option<tokio::net::UnixListener>,
    /// System mode: the approve socket (`approve_socket`) with each account's owner uid.
    pub approve: Option<(tokio::net::UnixListener, auth::Owners)>,
}

/// [`run`], with the broker's Unix sockets.
pub async fn run_with_sockets(
    config: BrokerConfig,
    listener: TcpListener,
    sockets: Sockets,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), BrokerError> {
    let Sockets { local, approve } = sockets;
    let open_files = limits::raise_open_files();
    glovebox_telemetry::metrics::set_builtin_tools(
        glovebox_proto::tools::Tool::ALL
            .iter()
            .map(|t| t.name().to_owned()),
    );
    let mut app = app::App::new(config, open_files)?;
    let approve = approve.map(|(listener, owners)| {
        app.started_owners = owners;
        listener
    });
    let app = Arc::new(app);
    let pools = app.admission.pools();
    tracing::info!(
        open_files,
        sockets = pools.sockets,
        unauthenticated = pools.unauthenticated,
        per_peer = pools.per_peer,
        per_account = pools.per_account,
        reserved_per_account = pools.reserved_per_account,
        "client connections"
    );
    app.credentials.follow();
    if let Some(updates) = app.config.accounts_updates.clone() {
        tokio::spawn(added_accounts::follow(Arc::downgrade(&app), updates));
    }
    packs::spawn(app.clone());
    tokio::spawn(tool_changes::watch_gate(Arc::downgrade(&app)));
    tokio::spawn(audit_health::watch(
        Arc::downgrade(&app.audit_health),
        app.backends.gate.clone(),
    ));
    let header_timeout = app.config.limits.header_timeout;
    let admission = app.admission.clone();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    if let Some(approve_listener) = approve {
        tokio::spawn(approve_socket::serve(
            approve_listener,
            app.clone(),
            header_timeout,
            stopped(stop_rx.clone()),
        ));
    }
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    front_door::serve(
        listener,
        local,
        router(app),
        admission,
        header_timeout,
        stopped(stop_rx),
    )
    .await?;
    Ok(())
}
