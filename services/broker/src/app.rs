//! The broker's shared state: one [`App`] per running broker, built from a [`BrokerConfig`] and
//! handed (behind an `Arc`) to every endpoint, with the count of open WebSocket connections.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::{
    BrokerConfig, BrokerError, asks, auth, backends, mcp, profiles, registry, tool_changes,
};

/// WebSocket connections served at once.
pub const MAX_CONNECTIONS: usize = 4096;

/// Shared state of a running broker.
pub struct App {
    pub config: BrokerConfig,
    pub credentials: Arc<auth::Credentials>,
    pub backends: backends::Backends,
    pub asks: asks::Asks,
    pub registry: registry::Registry,
    pub sessions: profiles::Sessions,
    pub mcp_sessions: mcp::SessionOwners,
    pub trust_asks: crate::packs::TrustAsks,
    pub tool_changes: tool_changes::ToolChanges,
    pub next_conn: AtomicU64,
    connections: AtomicUsize,
}

impl App {
    /// The state of a broker with this configuration; fails if the handover lacks a backend's
    /// key. Nothing is connected yet (backend channels connect lazily).
    pub fn new(config: BrokerConfig) -> Result<App, BrokerError> {
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
                registry::DEFAULT_MAX_PROVIDERS,
                registry::DEFAULT_CALL_TIMEOUT,
            ),
            sessions: profiles::Sessions::new(profiles::MAX_SESSIONS),
            mcp_sessions: mcp::SessionOwners::default(),
            trust_asks: crate::packs::TrustAsks::default(),
            tool_changes: tool_changes::ToolChanges::default(),
            next_conn: AtomicU64::new(1),
            connections: AtomicUsize::new(0),
            config,
        })
    }

    /// Takes one of the [`MAX_CONNECTIONS`] places; `None` if all are taken. The place is free
    /// again when the slot is dropped.
    pub fn open_connection(self: &Arc<App>) -> Option<ConnectionSlot> {
        if self.connections.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
            self.connections.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(ConnectionSlot(self.clone()))
    }

    /// WebSocket connections open now.
    pub fn open_connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }
}

/// One open WebSocket connection's place in the count.
pub struct ConnectionSlot(Arc<App>);

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}
