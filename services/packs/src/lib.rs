//! A pack host: one account's MCP tool packs. It runs as the account's executor identity (its
//! `run_as` user, or the user in dev mode), never reads the state directory (the gate serves it
//! the account's `mcp.json`, the project packs' trust and the pack secrets over its
//! handshake-protected audit socket), and starts each pack's server as its own child, lazily,
//! confined by `glovebox pack-shim` (Landlock: the account's roots, the pack's home and caches,
//! the command's installation, a private temporary directory; no TCP with `network: none`).
//!
//! It decides nothing: the broker asks it what a call is (`Plan`), the gate judges, and it calls
//! a tool only on a ticket the gate signed under the account's pack key (`Invoke`).
//!
//! Thin entry point: `glovebox pack-host --account ID ...` (the supervisor writes its keys to its
//! standard input) builds a [`PacksConfig`] and calls [`run`].

pub mod environment;
pub mod gate_link;
pub mod host;
pub mod http;
pub mod launch;
pub mod pack;
pub mod paths;
pub mod places;
pub mod progress;
pub mod service;
pub mod stderr;
pub mod toolchain;
pub mod watch;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use glovebox_proto::transport::{self, ServerKeys, SocketKey};
use glovebox_proto::v1::packs_server::PacksServer;
use glovebox_ticket::AccountKey;
use tokio::net::UnixListener;

/// How long a stopping pack host waits for open connections to finish their calls.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Everything a pack host needs, validated.
#[derive(Debug)]
pub struct PacksConfig {
    pub account: String,
    /// Canonical.
    pub workdir: PathBuf,
    /// Canonical: what pack servers may touch besides their own places.
    pub roots: Vec<PathBuf>,
    pub places: places::Places,
    /// Never granted to a pack server (glovebox's state).
    pub protected: Vec<PathBuf>,
    /// The account's pack ticket key (see `glovebox_ticket::MasterKey::packs_key`).
    pub key: AccountKey,
    /// The gate's audit socket, and this host's peer name and key on it.
    pub audit_socket: PathBuf,
    pub audit_key: (String, SocketKey),
    /// The peers this host serves (the broker, the administrator).
    pub serve_keys: ServerKeys,
    /// The uids whose connections the socket accepts (its own, root's, and in system mode the
    /// broker's).
    pub allowed_uids: Vec<u32>,
    /// The glovebox binary (`glovebox pack-shim` contains each server).
    pub shim: PathBuf,
    /// The owner's login shell (its `PATH` is the packs').
    pub shell: String,
    /// The host's own environment: the locale and user names a pack inherits, and the values of
    /// `${env:NAME}` references for the names in `pack_env`.
    pub environment: BTreeMap<String, String>,
    /// The variables the account's own `mcp.json` may read as `${env:NAME}` (the account's
    /// `pack_env`); a project's reads none.
    pub pack_env: Vec<String>,
    /// The account's walls beyond the file system (sockets granted by path, the private `/tmp`'s
    /// size, whether namespaces are tried); each pack's `network` is its own.
    pub walls: glovebox_sandbox::walls::Walls,
}

impl PacksConfig {
    /// The walls pack `def`'s server is raised in.
    pub fn walls_for(
        &self,
        def: &glovebox_config::mcp_json::PackDef,
    ) -> glovebox_sandbox::walls::Walls {
        glovebox_sandbox::walls::Walls {
            network: wall_network(def.network),
            ..self.walls.clone()
        }
    }
}

/// The configured network (a pack's in `mcp.json`, an account's jobs' in `sandbox:`) as the
/// sandbox enforces it.
pub fn wall_network(
    network: glovebox_config::mcp_json::Network,
) -> glovebox_sandbox::isolate::Network {
    use glovebox_config::mcp_json::Network;
    use glovebox_sandbox::isolate::Network as Wall;
    match network {
        Network::Any => Wall::Any,
        Network::Loopback => Wall::Loopback,
        Network::None => Wall::None,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PacksError {
    #[error("pack host server: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Serves the pack host on `listener` until `shutdown` completes, then stops every pack.
pub async fn run(
    config: PacksConfig,
    listener: UnixListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), PacksError> {
    let config = Arc::new(config);
    let (peer, key) = config.audit_key.clone();
    let gate = gate_link::GateLink::new(&config.audit_socket, &peer, key);
    let host = Arc::new(host::Host::new(launch::Launcher::new(config.clone(), gate)));
    watch::spawn(host.clone());
    let incoming = transport::authenticated_incoming(
        listener,
        config.allowed_uids.clone(),
        config.serve_keys.clone(),
    );
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let mut stopped = stop_rx.clone();
    let server = tonic::transport::Server::builder()
        .layer(glovebox_proto::transport::ServerLayer)
        .add_service(PacksServer::new(service::PacksService::new(
            host.clone(),
            stop_rx.clone(),
        )))
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = stopped.wait_for(|s| *s).await;
        });
    let grace = async move {
        let _ = stop_rx.wait_for(|s| *s).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let result = tokio::select! {
        r = server => r,
        _ = grace => Ok(()),
    };
    host.stop_all().await;
    let _ = std::fs::remove_dir_all(&config.places.tmp);
    result.map_err(PacksError::from)
}
