//! An executor: one account's hands. It resolves paths as the account's user, previews writes,
//! and performs file operations only on a gate-signed ticket, opening exactly what the ticket
//! names (no symlinks followed, device and inode compared). It never decides policy.
//!
//! Thin entry point: `glovebox executor --account ID ...` (the supervisor writes the account's
//! ticket key and socket keys to its standard input) builds an [`ExecutorConfig`] and calls [`run`].

pub mod approved;
pub mod context;
pub mod diff;
pub mod error;
pub mod fsio;
pub mod jobs;
pub mod movable;
pub mod ops;
pub mod replace;
pub mod resolve;
pub use glovebox_sandbox as sandbox;
pub mod service;
mod shield;
pub mod spent;
mod sync;
pub mod trash;
pub mod walk;

#[cfg(test)]
mod testing;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use glovebox_proto::transport;
use glovebox_proto::v1::executor_server::ExecutorServer;
use glovebox_ticket::AccountKey;
use tokio::net::UnixListener;

/// How long a stopping executor waits for open connections to finish their calls.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Calls one executor handles at once, per connection.
pub const MAX_CONCURRENT_CALLS: usize = 64;

/// Everything one executor needs.
#[derive(Debug)]
pub struct ExecutorConfig {
    pub account: String,
    /// Canonical workdir: relative paths resolve against it.
    pub workdir: PathBuf,
    /// This account's ticket key (derived by the supervisor).
    pub key: AccountKey,
    /// Where the gate's audit service listens.
    pub gate_socket: PathBuf,
    /// The peer name and key this executor proves on the gate's audit socket.
    pub audit_key: (String, transport::SocketKey),
    /// The keys of the peers this executor serves (the broker's).
    pub serve_keys: transport::ServerKeys,
    /// The uids whose connections the socket accepts (its own, root's, and in system mode the
    /// broker's).
    pub allowed_uids: Vec<u32>,
    /// Canonical directories on the floor (glovebox's own state), hidden from listings.
    pub protected: Vec<String>,
    /// How jobs start: their environment (an allowlist; never the service's own), the shim
    /// binary, the roots and the scratch directory their temporary directories go in.
    pub jobs: jobs::JobConfig,
    /// The account's trash directory (freedesktop layout), where `file_delete` moves things.
    pub trash_dir: PathBuf,
    /// How the OS boundary was applied (reported by `Status`), e.g. `landlock=fully_enforced`.
    pub sandbox: String,
    /// How jobs are contained (reported by `Status`): `landlock_scopes(abi_N)` or `subreaper`.
    pub containment: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("executor server: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error("start the job reaper: {0}")]
    Reaper(std::io::Error),
}

/// How many `job` rows may wait for the gate.
const JOB_AUDIT_QUEUE: usize = 64;

/// The task that writes the `job` rows the job table sends (`Audit.Append` on the gate's audit
/// socket), and its sender.
fn job_audit(gate: transport::Link) -> tokio::sync::mpsc::Sender<glovebox_proto::v1::AuditEvent> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(JOB_AUDIT_QUEUE);
    tokio::spawn(async move {
        let mut client = glovebox_proto::v1::audit_client::AuditClient::new(gate);
        while let Some(event) = rx.recv().await {
            if let Err(status) = client.append(event).await {
                tracing::warn!(%status, "the gate refused a job's audit row");
            }
        }
    });
    tx
}

/// Serves the executor on `listener` until `shutdown` completes.
pub async fn run(
    config: ExecutorConfig,
    listener: UnixListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ExecutorError> {
    let gate = transport::authenticated_channel(
        &config.gate_socket,
        &config.audit_key.0,
        config.audit_key.1.clone(),
    );
    if let Err(e) = jobs::become_subreaper() {
        tracing::warn!(error = %e, "cannot become a child subreaper: orphaned job processes may escape");
    }
    let mut job_config = config.jobs.clone();
    job_config.audit = Some(job_audit(gate.clone()));
    let jobs = Arc::new(jobs::JobTable::new(job_config));
    let reaper = jobs.clone();
    std::thread::Builder::new()
        .name("job-reaper".into())
        .spawn(move || reaper.reap_forever())
        .map_err(ExecutorError::Reaper)?;
    let incoming = transport::authenticated_incoming(
        listener,
        config.allowed_uids.clone(),
        config.serve_keys.clone(),
    );
    let (config_scratch, launcher) = (config.jobs.scratch.clone(), config.jobs.launcher.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let service =
        service::ExecutorService::new(Arc::new(config), jobs.clone(), gate, stop_rx.clone());
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let serve = tonic::transport::Server::builder()
        .layer(glovebox_proto::transport::ServerLayer)
        .concurrency_limit_per_connection(MAX_CONCURRENT_CALLS)
        .add_service(ExecutorServer::new(service))
        .serve_with_incoming_shutdown(incoming, stopped(stop_rx.clone()));
    let grace = async {
        stopped(stop_rx.clone()).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let served = tokio::select! {
        served = serve => served,
        _ = grace => Ok(()),
        _ = async { shutdown.await; let _ = stop_tx.send(true); std::future::pending::<()>().await } => Ok(()),
    };
    // Nothing outlives the executor: stop every job and what it started.
    jobs.kill_everything();
    if let Err(error) = launcher.remove_scratch(config_scratch.clone()) {
        tracing::warn!(dir = %config_scratch.display(), %error, "could not remove the scratch directory");
    }
    served?;
    Ok(())
}
