//! The broker's shared state: one [`App`] per running broker, built from a [`BrokerConfig`] and
//! handed (behind an `Arc`) to every endpoint, with the count of the connections it holds.

use std::collections::HashSet;

use glovebox_config::AccountId;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::admission::Admission;
use crate::{BrokerConfig, BrokerError, asks, auth, backends, profiles, registry};

/// Shared state of a running broker.
pub struct App {
    pub config: BrokerConfig,
    pub credentials: Arc<auth::Credentials>,
    pub backends: backends::Backends,
    pub asks: asks::Asks,
    pub registry: registry::Registry,
    pub sessions: profiles::Sessions,
    pub mcp_sessions: Arc<crate::mcp::sessions::SessionOwners>,
    /// Each account's calls running at once.
    pub calls: crate::call_slots::CallSlots,
    pub trust_asks: crate::packs::trust_asks::TrustAsks,
    pub tool_changes: crate::tool_changes::versions::ToolChanges,
    /// The web console's login links and sessions.
    pub console: crate::console::sessions::Console,
    pub next_conn: AtomicU64,
    /// Who holds the client sockets (see `admission`).
    pub admission: Arc<Admission>,
    pub health: crate::health::probe::Probes,
    /// Whether the audit can be written, as last polled (see `audit_health`).
    pub audit_health: Arc<crate::audit_health::Latest>,
    /// System mode: each account of `glovebox.yaml` and its owner's uid, as the broker started.
    pub started_owners: crate::auth::Owners,
    /// System mode: each account added at run time and its owner's uid (the approve socket's
    /// owners besides those it was started with).
    pub added_owners: std::sync::RwLock<Vec<(AccountId, u32)>>,
}

impl App {
    /// The state of a broker with this configuration, for `open_files` descriptors; fails if
    /// the handover lacks a backend's key or the descriptors are too few. Nothing is connected
    /// yet (backend channels connect lazily).
    pub fn new(config: BrokerConfig, open_files: u64) -> Result<App, BrokerError> {
        let limits = &config.limits;
        let accounts: HashSet<AccountId> =
            config.executors.iter().map(|(a, _)| a.clone()).collect();
        let pools = crate::limits::pools(limits, open_files, accounts.len() + 1, accounts)?;
        Ok(App {
            credentials: Arc::new(auth::Credentials::new(
                config.config_file.clone(),
                config.tokens.clone(),
            )),
            backends: backends::Backends::new(
                &config.gate_socket,
                &config.executors,
                &config.packs,
                &config.handover,
            )?,
            asks: asks::Asks::new(config.ask_timeout, asks::MAX_WAITING_ASKS),
            registry: registry::Registry::new(
                config.client_tools.max_connections,
                config.client_tools.timeout,
            ),
            sessions: profiles::Sessions::new(profiles::MAX_SESSIONS),
            mcp_sessions: Arc::new(crate::mcp::sessions::SessionOwners::new(
                limits.mcp_sessions_per_account,
                limits.mcp_session_idle,
            )),
            calls: crate::call_slots::CallSlots::new(
                limits.calls_per_account,
                std::thread::available_parallelism().map_or(2, usize::from),
            ),
            trust_asks: crate::packs::trust_asks::TrustAsks::default(),
            tool_changes: crate::tool_changes::versions::ToolChanges::default(),
            console: crate::console::sessions::Console::default(),
            next_conn: AtomicU64::new(1),
            admission: Admission::new(pools),
            health: crate::health::probe::Probes::default(),
            audit_health: Arc::new(tokio::sync::watch::Sender::new(None)),
            started_owners: Default::default(),
            added_owners: Default::default(),
            config,
        })
    }

    /// What a call may touch of the broker: the road it takes (`pipeline::run_call`).
    pub fn road(&self) -> crate::road::CallRoad<'_> {
        crate::road::CallRoad {
            backends: &self.backends,
            asks: &self.asks,
            calls: &self.calls,
            registry: &self.registry,
            trust_asks: &self.trust_asks,
        }
    }

    /// What listing an account's packs takes: the pack hosts and the trust asks.
    pub(crate) fn pack_hosts(&self) -> crate::packs::listing::PackHosts<'_> {
        self.road().pack_hosts()
    }

    /// System mode: every account with an owner and its owner's uid, those added since the start
    /// included (empty in user mode).
    pub fn owners(&self) -> crate::auth::Owners {
        let added = self
            .added_owners
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // An account of glovebox.yaml given another owner at run time has only the new one.
        let mut all: Vec<(AccountId, u32)> = self
            .started_owners
            .0
            .iter()
            .filter(|(id, _)| !added.iter().any(|(a, _)| a == id))
            .cloned()
            .collect();
        all.extend(added);
        crate::auth::Owners(all)
    }

    /// Whether `who` is still who it proved to be: its token is still in the table, or its uid
    /// still owns the account (an account removed or given to another owner ends it).
    pub fn still_authorized(&self, who: &auth::Authenticated) -> bool {
        self.authorized_by(&self.credentials.table(), who)
    }

    /// [`App::still_authorized`] against this token table.
    fn authorized_by(&self, table: &auth::TokenTable, who: &auth::Authenticated) -> bool {
        match who.proof {
            auth::Proof::Token(_) => table.still_valid(who),
            auth::Proof::Owner(uid) => self
                .owners()
                .0
                .iter()
                .any(|(account, owner)| *owner == uid && *account == who.account),
            auth::Proof::Administrator => self
                .owners()
                .0
                .iter()
                .any(|(account, _)| *account == who.account),
        }
    }

    /// Completes when `who` is no longer authorized ([`App::still_authorized`]). Every change of
    /// either tokens or owners publishes a new token table (an accounts update sets the owners
    /// first), so waiting on the table sees both.
    pub async fn unauthorized(self: Arc<Self>, who: auth::Authenticated) {
        let mut tables = self.credentials.subscribe();
        let _ = tables
            .wait_for(|table| !self.authorized_by(table, &who))
            .await;
    }
}
