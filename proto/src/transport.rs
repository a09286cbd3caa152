//! gRPC over Unix sockets between glovebox's own processes: private sockets, a peer-credential
//! check on every accepted connection, and lazily connecting clients.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use tokio::net::{UnixListener, UnixStream};
use tokio_stream::{Stream, StreamExt, wrappers::UnixListenerStream};
use tonic::transport::{Channel, Endpoint};

/// Binds a Unix socket readable and writable only by its owner, replacing a stale socket file.
pub fn bind_private_socket(path: &Path) -> std::io::Result<UnixListener> {
    bind_socket(path, 0o600)
}

/// Binds a Unix socket with `mode`, replacing a stale socket file. Access is decided by the peer
/// check on each connection; the mode only lets other users' processes reach it at all.
pub fn bind_socket(path: &Path, mode: u32) -> std::io::Result<UnixListener> {
    let listener = bind_std_socket(path, mode)?;
    listener.set_nonblocking(true)?;
    UnixListener::from_std(listener)
}

/// [`bind_socket`] without a runtime, for a process that binds before its threads start (the
/// executor, which confines itself first); hand it to tokio with `UnixListener::from_std`.
pub fn bind_std_socket(
    path: &Path,
    mode: u32,
) -> std::io::Result<std::os::unix::net::UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(listener)
}

/// The user ids allowed to connect to a glovebox service: its own, and root.
pub fn default_allowed_uids() -> Vec<u32> {
    let own = rustix::process::geteuid().as_raw();
    if own == 0 { vec![0] } else { vec![own, 0] }
}

/// Accepted connections whose peer's uid is in `allowed`; others are dropped and logged.
pub fn peer_checked_incoming(
    listener: UnixListener,
    allowed: Vec<u32>,
) -> impl Stream<Item = std::io::Result<UnixStream>> {
    UnixListenerStream::new(listener).filter(move |conn| match conn {
        Ok(stream) => match stream.peer_cred() {
            Ok(cred) if allowed.contains(&cred.uid()) => true,
            Ok(cred) => {
                tracing::warn!(
                    uid = cred.uid(),
                    "refused a connection from a peer that is not allowed"
                );
                false
            }
            Err(_) => false,
        },
        Err(_) => true,
    })
}

/// A channel to a service's Unix socket that connects on first use and reconnects after
/// failures, so callers see `Unavailable` while the service is down instead of hanging.
pub fn lazy_channel(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let endpoint = Endpoint::from_shared(format!("unix://{}", path.display()))?
        .connect_timeout(std::time::Duration::from_secs(2));
    Ok(endpoint.connect_lazy())
}
