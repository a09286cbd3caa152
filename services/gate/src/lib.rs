//! The gate: the one process that decides. It judges every planned call against the account's
//! policy and the secret floor, signs tickets for what it allows or what an approver granted,
//! persists "always" answers as exact rules, and owns the append-only audit store.
//!
//! Thin entry point: `glovebox gate --state-dir DIR` (see the `glovebox` crate) loads a
//! [`GateConfig`], binds the socket and calls [`run`].

pub mod accounts;
pub mod admin;
pub mod audit;
pub mod deliveries;
pub mod enablement;
pub mod judge;
pub mod packs;
pub mod placement;
pub mod policies;
pub mod redact;
pub mod service;
pub mod watch;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use glovebox_config::{ConfigError, StateDir};
use glovebox_proto::audit_row::{Outcome, RowKind, Source};
use glovebox_proto::transport::handover::{AuditPeers, Handover, socket};
use glovebox_proto::transport::{self};
use glovebox_proto::v1::{
    account_admin_server::AccountAdminServer, audit_server::AuditServer,
    executor_gate_server::ExecutorGateServer, gate_admin_server::GateAdminServer,
    gate_server::GateServer, pack_support_server::PackSupportServer,
};
use glovebox_ticket::MasterKey;
use tokio::net::UnixListener;

pub use audit::AuditStore;

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{path}: {message}")]
    State { path: PathBuf, message: String },
    #[error(transparent)]
    Audit(#[from] audit::AuditError),
    #[error("gate server: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Everything the gate needs, validated.
#[derive(Debug)]
pub struct GateConfig {
    pub state: StateDir,
    /// Each account's canonical workdir and roots.
    pub accounts: Vec<policies::AccountPaths>,
    /// Whether each account's tools are on, as `glovebox.yaml` said at start.
    pub enabled: std::collections::HashMap<glovebox_config::AccountId, bool>,
    pub master_key: MasterKey,
    /// Canonical directories on the floor (glovebox's own state).
    pub protected: Vec<String>,
    /// Users (besides the gate's own and root) whose executors may append audit events.
    pub audit_peer_uids: Vec<u32>,
    /// Directories of the administrator's managed policy files (`*.yaml`): `<state>/managed`,
    /// and `/etc/glovebox/policy.d` in system mode ([`GateConfig::with_system_policy`]).
    pub managed_dirs: Vec<PathBuf>,
    /// System mode: every managed directory and file must be root's and writable by root alone
    /// (not a symlink); anything else fails the managed layer closed (see `policies`).
    pub managed_root_only: bool,
    /// The keys of the peers each of the gate's sockets accepts (handed over by the supervisor).
    pub handover: Handover,
    /// The audit chain's key (`<state>/audit.key`, made on the first start that lacks it).
    pub audit_key: audit::chain::AuditKey,
    /// `audit.ship` of `glovebox.yaml`: copy the audit to a fleet database in the background.
    pub ship: Option<glovebox_config::audit_ship::Ship>,
    /// The supervisor's updates of who may call the audit socket, as the accounts change
    /// (`accounts::live`); none: the handover's, for good.
    pub audit_peer_updates: Option<tokio::sync::watch::Receiver<Option<AuditPeers>>>,
}

/// The audit key of a state directory; a state directory from before the chain was keyed gets
/// one now (the gate owns the state directory).
pub fn load_or_create_audit_key(state: &StateDir) -> Result<audit::chain::AuditKey, GateError> {
    let path = state.audit_key();
    let bad = |message: String| GateError::State {
        path: path.clone(),
        message,
    };
    if !path.exists() {
        let bytes = glovebox_config::random_bytes::<{ audit::chain::KEY_BYTES }>()
            .map_err(|e| bad(format!("no randomness for the audit key: {e}")))?;
        glovebox_config::write_private_file(&path, &bytes)?;
    }
    let bytes = std::fs::read(&path).map_err(|e| bad(format!("read the audit key: {e}")))?;
    audit::chain::AuditKey::from_bytes(&bytes).ok_or_else(|| {
        bad(format!(
            "the audit key must be {} bytes",
            audit::chain::KEY_BYTES
        ))
    })
}

/// Where the administrator's managed policy lives when glovebox runs as a system service.
pub const SYSTEM_POLICY_DIR: &str = "/etc/glovebox/policy.d";

impl GateConfig {
    /// Loads `glovebox.yaml` (with the accounts added at run time) and the master ticket key
    /// from a state directory.
    pub fn load(state: StateDir) -> Result<GateConfig, GateError> {
        let config = state.load_merged_config()?;
        let key_path = state.ticket_key();
        let key_bytes = std::fs::read(&key_path).map_err(|e| GateError::State {
            path: key_path.clone(),
            message: format!("read ticket key: {e}"),
        })?;
        let master_key = MasterKey::from_bytes(&key_bytes).map_err(|e| GateError::State {
            path: key_path.clone(),
            message: e.to_string(),
        })?;
        let mut accounts = Vec::new();
        let enabled = config
            .accounts
            .iter()
            .map(|a| (a.id.clone(), a.enabled))
            .collect();
        for a in &config.accounts {
            accounts.push(
                accounts::live::canonical_paths(a)
                    .map_err(|(path, message)| GateError::State { path, message })?,
            );
        }
        let root = std::fs::canonicalize(state.root()).map_err(|e| GateError::State {
            path: state.root().to_owned(),
            message: e.to_string(),
        })?;
        let managed_dirs = vec![state.root().join("managed")];
        let audit_key = load_or_create_audit_key(&state)?;
        Ok(GateConfig {
            state,
            accounts,
            enabled,
            master_key,
            protected: vec![root.to_string_lossy().into_owned()],
            audit_peer_uids: Vec::new(),
            managed_dirs,
            managed_root_only: false,
            handover: Handover::default(),
            audit_key,
            ship: config.audit_ship.clone(),
            audit_peer_updates: None,
        })
    }

    /// Adds the system-wide managed policy directory (system mode).
    pub fn with_system_policy(mut self, dir: PathBuf) -> GateConfig {
        self.managed_dirs.push(dir);
        self
    }
}

/// Opens the audit store, loads every policy, starts the policy watcher, and records the start.
async fn start(config: GateConfig) -> Result<Arc<service::GateState>, GateError> {
    let mut audit_uids = transport::default_allowed_uids();
    audit_uids.extend(&config.audit_peer_uids);
    let audit_access = service::AuditAccess {
        keys: config.handover.served_on(socket::AUDIT),
        uids: audit_uids.into(),
    };
    let audit = AuditStore::open(&audit::AuditFiles {
        db: config.state.audit_db(),
        head: config.state.audit_head(),
        key: config.audit_key.clone(),
    })
    .await?;
    let packs = packs::PackState::new(
        config.state.clone(),
        config.accounts.iter().map(|a| a.id.clone()),
    );
    audit.mask_reasons_with(packs.known_secrets());
    let policies = policies::AccountPolicies::new(
        &config.state,
        config.accounts,
        config.protected,
        config.managed_dirs,
    )
    .managed_root_only(config.managed_root_only);
    let state = Arc::new(service::GateState {
        policies,
        audit: audit.clone(),
        master_key: config.master_key,
        enablement: enablement::Enablement::new(config.state.clone(), config.enabled),
        packs,
        audit_access,
        vouchers: service::Vouchers::new(
            config
                .handover
                .served_on(socket::GATE)
                .get(glovebox_proto::transport::handover::peer::BROKER)
                .map(|key| glovebox_ticket::voucher::VoucherKey::of_broker(&key)),
        ),
        deliveries: Default::default(),
        account_changes: Default::default(),
        state_dir: config.state.clone(),
    });
    audit
        .append(glovebox_proto::v1::AuditEvent {
            source: Source::Gate.into(),
            kind: RowKind::Service.into(),
            outcome: Outcome::Started.into(),
            detail: format!("pid {}", std::process::id()),
            ..Default::default()
        })
        .await;
    state.policies.load_all();
    state.flush_policy_events().await;
    watch::spawn(state.clone());
    Ok(state)
}

/// Resolves once the gate is told to stop.
async fn stopped(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// A server that may not be configured: done at once if not.
async fn serve_maybe(
    server: Option<impl Future<Output = Result<(), tonic::transport::Error>>>,
) -> Result<(), tonic::transport::Error> {
    match server {
        Some(server) => server.await,
        None => Ok(()),
    }
}

/// The audit socket's server, which the executors, the pack hosts and the supervisor reach with
/// their own keys: `Audit`, `ExecutorGate` and `PackSupport`.
fn serve_audit_socket(
    state: Arc<service::GateState>,
    listener: UnixListener,
    access: service::AuditAccess,
    stop: tokio::sync::watch::Receiver<bool>,
) -> impl Future<Output = Result<(), tonic::transport::Error>> {
    let incoming = transport::authenticated_incoming(listener, access.uids, access.keys);
    tonic::transport::Server::builder()
        .layer(glovebox_proto::transport::ServerLayer)
        .add_service(AuditServer::new(service::AuditService(state.clone())))
        .add_service(ExecutorGateServer::new(service::ExecutorGateService::new(
            state.clone(),
            stop.clone(),
        )))
        .add_service(PackSupportServer::new(service::PackSupportService(state)))
        .serve_with_incoming_shutdown(incoming, stopped(stop))
}

/// Serves the gate on `listener` (Gate, AccountAdmin and Audit, for the broker and the
/// supervisor) and, if given, the Audit and PackSupport services on `audit_listener` (for
/// executors and pack hosts running as other users) until `shutdown` completes.
pub async fn run(
    mut config: GateConfig,
    listener: UnixListener,
    audit_listener: Option<UnixListener>,
    admin_listener: Option<UnixListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), GateError> {
    let handover = config.handover.clone();
    let ship = config.ship.clone();
    let state_dir = config.state.clone();
    let updates = config.audit_peer_updates.take();
    let state = start(config).await?;
    if let Some(updates) = updates {
        tokio::spawn(accounts::live::follow(Arc::downgrade(&state), updates));
    }
    let audit_access = state.audit_access.clone();
    let stopping = state.audit.clone();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    if let Some(ship) = ship {
        audit::ship::spawn(state_dir, ship, stop_rx.clone());
    }
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let audit_only = serve_maybe(
        audit_listener.map(|l| serve_audit_socket(state.clone(), l, audit_access, stop_rx.clone())),
    );
    let admin = serve_maybe(admin_listener.map(|l| {
        let incoming = transport::authenticated_incoming(
            l,
            transport::default_allowed_uids(),
            handover.served_on(socket::ADMIN),
        );
        tonic::transport::Server::builder()
            .add_service(GateAdminServer::new(service::AdminService(state.clone())))
            .serve_with_incoming_shutdown(incoming, stopped(stop_rx.clone()))
    }));
    let incoming = transport::authenticated_incoming(
        listener,
        handover.allowed_uids(),
        handover.served_on(socket::GATE),
    );
    let main = tonic::transport::Server::builder()
        .layer(glovebox_proto::transport::ServerLayer)
        .add_service(GateServer::new(service::GateService(
            state.clone(),
            stop_rx.clone(),
        )))
        .add_service(AccountAdminServer::new(service::AccountAdminService::new(
            state.clone(),
        )))
        .add_service(AuditServer::new(service::AuditService(state)))
        .serve_with_incoming_shutdown(incoming, stopped(stop_rx));
    let (a, b, c) = tokio::join!(main, audit_only, admin);
    stopping
        .checkpoint(glovebox_proto::audit_row::Outcome::Stop)
        .await;
    a?;
    b?;
    c?;
    Ok(())
}
