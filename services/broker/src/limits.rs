//! The front door's limits: the defaults (named constants), what `glovebox.yaml`'s `limits:`
//! overrides, and the sizes of the connection pools derived from the open-files limit
//! ([`pools`], pure). The broker raises its open-files soft limit to the hard limit when it
//! starts ([`raise_open_files`]).

use std::collections::HashSet;

use glovebox_config::AccountId;
use std::time::Duration;

use crate::admission::Pools;

/// A request's headers must arrive within this time from the connection's start (or, on a
/// keep-alive connection, from the end of the previous response): slowloris ends here, and so
/// does an HTTP connection left idle between requests.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A WebSocket must say hello within this time.
pub const DEFAULT_HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// A WebSocket from which nothing arrives, not even a pong to the broker's pings, for this long
/// is closed.
pub const DEFAULT_WEBSOCKET_IDLE: Duration = Duration::from_secs(300);
/// How often the broker pings a WebSocket, at most (a tenth of the idle timeout when that is
/// shorter).
pub const MAX_PING_INTERVAL: Duration = Duration::from_secs(30);
/// Connections (WebSockets, HTTP) one account holds at once.
pub const DEFAULT_CONNECTIONS_PER_ACCOUNT: usize = 256;
/// Connections one local user holds before any request on them authenticates.
pub const DEFAULT_CONNECTIONS_PER_PEER: usize = 64;
/// Calls one account has running at once (in the gate and its executor), across all its
/// connections; more wait in the broker.
pub const DEFAULT_CALLS_PER_ACCOUNT: usize = 8;
/// MCP sessions one account holds at once.
pub const DEFAULT_MCP_SESSIONS_PER_ACCOUNT: usize = 64;
/// An MCP session nobody uses for this long ends, and its memory with it.
pub const DEFAULT_MCP_SESSION_IDLE: Duration = Duration::from_secs(600);
/// Client sockets at most, however many descriptors the system allows.
pub const MAX_CLIENT_SOCKETS: usize = 4096;
/// Descriptors the broker keeps for itself whatever its clients do: the listener, the runtime,
/// standard streams, files it reads, the peer lookup.
pub const RESERVED_FDS: u64 = 64;
/// Descriptors kept for each backend (the gate, each executor): a channel and its reconnects.
pub const FDS_PER_BACKEND: u64 = 8;
/// Client sockets below which the broker refuses to start.
pub const MIN_CLIENT_SOCKETS: usize = 16;
/// One client socket in this many may be unauthenticated.
pub const UNAUTHENTICATED_SHARE: usize = 4;
/// One local user holds at most this share of the unauthenticated sockets, however high its
/// cap is set: a single user never fills the pool every other user authenticates through.
pub const PEER_SHARE: usize = 2;
/// Connections each account can always open, whatever the others hold.
pub const RESERVED_PER_ACCOUNT: usize = 16;

/// The limits in effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub header_timeout: Duration,
    pub hello_timeout: Duration,
    pub websocket_idle: Duration,
    pub connections_per_account: usize,
    pub connections_per_peer: usize,
    pub calls_per_account: usize,
    pub mcp_sessions_per_account: usize,
    pub mcp_session_idle: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::from_config(&glovebox_config::limits::Limits::default())
    }
}

impl Limits {
    /// The defaults, with what `glovebox.yaml` sets instead.
    pub fn from_config(config: &glovebox_config::limits::Limits) -> Limits {
        Limits {
            header_timeout: config.header_timeout.unwrap_or(DEFAULT_HEADER_TIMEOUT),
            hello_timeout: config.hello_timeout.unwrap_or(DEFAULT_HELLO_TIMEOUT),
            websocket_idle: config.websocket_idle.unwrap_or(DEFAULT_WEBSOCKET_IDLE),
            connections_per_account: config
                .connections_per_account
                .unwrap_or(DEFAULT_CONNECTIONS_PER_ACCOUNT),
            connections_per_peer: config
                .connections_per_peer
                .unwrap_or(DEFAULT_CONNECTIONS_PER_PEER),
            calls_per_account: config
                .calls_per_account
                .unwrap_or(DEFAULT_CALLS_PER_ACCOUNT),
            mcp_sessions_per_account: config
                .mcp_sessions_per_account
                .unwrap_or(DEFAULT_MCP_SESSIONS_PER_ACCOUNT),
            mcp_session_idle: config.mcp_session_idle.unwrap_or(DEFAULT_MCP_SESSION_IDLE),
        }
    }

    /// How often a WebSocket is pinged.
    pub fn ping_interval(&self) -> Duration {
        MAX_PING_INTERVAL.min(self.websocket_idle / 10)
    }
}

/// Why the broker cannot serve with the descriptors it has.
#[derive(Debug, thiserror::Error)]
#[error(
    "the open-files limit ({open_files}) leaves {sockets} descriptors for clients once the broker keeps {reserved} for itself; at least {MIN_CLIENT_SOCKETS} are needed (raise `ulimit -n`)"
)]
pub struct TooFewFiles {
    pub open_files: u64,
    pub reserved: u64,
    pub sockets: usize,
}

/// The pools for `open_files` descriptors, `backends` backend sockets and `accounts`.
pub fn pools(
    limits: &Limits,
    open_files: u64,
    backends: usize,
    accounts: HashSet<AccountId>,
) -> Result<Pools, TooFewFiles> {
    let reserved = RESERVED_FDS + FDS_PER_BACKEND * backends as u64;
    let sockets = usize::try_from(open_files.saturating_sub(reserved))
        .unwrap_or(usize::MAX)
        .min(MAX_CLIENT_SOCKETS);
    if sockets < MIN_CLIENT_SOCKETS {
        return Err(TooFewFiles {
            open_files,
            reserved,
            sockets,
        });
    }
    let unauthenticated = sockets / UNAUTHENTICATED_SHARE;
    let for_accounts = sockets - unauthenticated;
    Ok(Pools {
        sockets,
        unauthenticated,
        per_peer: limits
            .connections_per_peer
            .min(unauthenticated / PEER_SHARE),
        per_account: limits.connections_per_account.min(for_accounts),
        reserved_per_account: RESERVED_PER_ACCOUNT.min(for_accounts / accounts.len().max(1)),
        accounts,
    })
}

/// Raises the open-files soft limit to the hard limit; returns the soft limit now in effect.
pub fn raise_open_files() -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let Some(hard) = limit.maximum else {
        // Unlimited is not a value the kernel takes for open files: keep what there is.
        return limit.current.unwrap_or(u64::MAX);
    };
    if limit.current.is_some_and(|soft| soft >= hard) {
        return hard;
    }
    let raised = Rlimit {
        current: Some(hard),
        maximum: Some(hard),
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => hard,
        Err(e) => {
            tracing::warn!(error = %e, "could not raise the open-files limit");
            limit.current.unwrap_or(hard)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accounts(n: usize) -> HashSet<AccountId> {
        (0..n)
            .map(|i| AccountId::parse(format!("a{i}")).unwrap())
            .collect()
    }

    #[test]
    fn pools_follow_the_open_files_limit_and_keep_the_reserve() {
        let limits = Limits::default();
        // The common 1024: 64 + 8 × (gate + 2 executors) = 88 kept; 936 for clients.
        let p = pools(&limits, 1024, 3, accounts(2)).unwrap();
        assert_eq!(p.sockets, 936);
        assert_eq!(p.unauthenticated, 234);
        assert_eq!(p.per_peer, DEFAULT_CONNECTIONS_PER_PEER);
        assert_eq!(p.per_account, DEFAULT_CONNECTIONS_PER_ACCOUNT);
        assert_eq!(p.reserved_per_account, RESERVED_PER_ACCOUNT);
        // Plenty of descriptors: the fixed cap.
        let p = pools(&limits, 1 << 20, 3, accounts(2)).unwrap();
        assert_eq!(p.sockets, MAX_CLIENT_SOCKETS);
        // Few: caps shrink to fit, and reserves to share among many accounts.
        let p = pools(&limits, 200, 3, accounts(100)).unwrap();
        assert_eq!((p.sockets, p.unauthenticated), (112, 28));
        assert_eq!(
            (p.per_peer, p.per_account, p.reserved_per_account),
            (14, 84, 0)
        );
        let too_few = pools(&limits, 100, 3, accounts(1)).unwrap_err();
        assert_eq!(too_few.sockets, 12);
        assert!(too_few.to_string().contains("ulimit -n"), "{too_few}");
    }

    #[test]
    fn the_config_overrides_defaults_one_by_one() {
        let config = glovebox_config::limits::Limits {
            connections_per_account: Some(2),
            websocket_idle: Some(Duration::from_secs(20)),
            ..Default::default()
        };
        let limits = Limits::from_config(&config);
        assert_eq!(limits.connections_per_account, 2);
        assert_eq!(limits.hello_timeout, DEFAULT_HELLO_TIMEOUT);
        assert_eq!(limits.ping_interval(), Duration::from_secs(2));
        assert_eq!(Limits::default().ping_interval(), MAX_PING_INTERVAL);
    }
}
