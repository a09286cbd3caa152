//! gRPC over Unix sockets between glovebox's own processes. Every control socket is served only
//! to peers that pass two checks: the kernel's peer uid (its own user, root, or a listed user) and
//! the capability handshake of [`handshake`], which also proves the server to the client. Clients
//! are lazily connecting channels that run the handshake on every (re)connection.

pub mod connect;
pub mod gate_calls;
pub mod handover;
pub mod handshake;
pub mod link;
pub mod messages;
pub mod quiet;

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::Stream;

pub use connect::{CONNECT_TIMEOUT, connect_authenticated};
pub use handshake::SocketKey;

/// How long a connecting peer has to complete the handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Handshakes pending at once on one listener; a newcomer beyond sheds the oldest.
pub const MAX_PENDING_HANDSHAKES: usize = 64;
/// Handshakes one uid may have pending at once on one listener.
pub const MAX_PENDING_HANDSHAKES_PER_UID: usize = 16;

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

/// Who is on the other end of an authenticated connection: the peer name whose key it proved,
/// and the uid the kernel reported for it (`SO_PEERCRED`). Services read it from a request's
/// extensions ([`peer_of`], [`peer_uid_of`]); it never comes from a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer(pub String, pub u32);

/// The peer of the connection a request arrived on (`None` on a connection that was not
/// authenticated, which a glovebox server never accepts).
pub fn peer_of<T>(request: &tonic::Request<T>) -> Option<&str> {
    request.extensions().get::<Peer>().map(|p| p.0.as_str())
}

/// The authenticated peer of `request` if it is one of `allowed`: each service method serves
/// only the principals that need it, whatever socket the request reached. The one check every
/// glovebox service makes of its callers.
pub fn require_peer<'a, T>(
    request: &'a tonic::Request<T>,
    allowed: &[&str],
) -> Result<&'a str, tonic::Status> {
    match peer_of(request) {
        Some(peer) if allowed.contains(&peer) => Ok(peer),
        Some(peer) => Err(tonic::Status::permission_denied(format!(
            "{peer} may not call this method"
        ))),
        None => Err(tonic::Status::unauthenticated(
            "the connection was not authenticated",
        )),
    }
}

/// A field a request must have, or `invalid_argument` naming it.
pub fn required<T>(value: Option<T>, what: &str) -> Result<T, tonic::Status> {
    value.ok_or_else(|| tonic::Status::invalid_argument(format!("missing {what}")))
}

/// The kernel's uid of the peer of the connection a request arrived on.
pub fn peer_uid_of<T>(request: &tonic::Request<T>) -> Option<u32> {
    request.extensions().get::<Peer>().map(|p| p.1)
}

/// The keys a server accepts: peer name → key. Clones share one table, so a server that takes
/// peers at run time (the gate's audit socket, as accounts come and go) replaces it in place:
/// the next handshake sees the new table.
#[derive(Debug, Clone, Default)]
pub struct ServerKeys(Arc<RwLock<HashMap<String, SocketKey>>>);

impl ServerKeys {
    pub fn new(keys: impl IntoIterator<Item = (String, SocketKey)>) -> ServerKeys {
        ServerKeys(Arc::new(RwLock::new(keys.into_iter().collect())))
    }

    pub fn is_empty(&self) -> bool {
        read(&self.0).is_empty()
    }

    /// Whether `peer` has a key now.
    pub fn contains(&self, peer: &str) -> bool {
        read(&self.0).contains_key(peer)
    }

    /// The key of `peer`, if it has one now.
    pub fn get(&self, peer: &str) -> Option<SocketKey> {
        read(&self.0).get(peer).cloned()
    }

    /// Replaces every key with `keys` (for every clone).
    pub fn replace(&self, keys: ServerKeys) {
        let next = read(&keys.0).clone();
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = next;
    }
}

/// The peer uids a server admits. Clones share one list, replaced in place like [`ServerKeys`].
#[derive(Debug, Clone, Default)]
pub struct AllowedUids(Arc<RwLock<Vec<u32>>>);

impl AllowedUids {
    pub fn contains(&self, uid: u32) -> bool {
        read(&self.0).contains(&uid)
    }

    /// Replaces the list (for every clone).
    pub fn replace(&self, uids: Vec<u32>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = uids;
    }
}

impl From<Vec<u32>> for AllowedUids {
    fn from(uids: Vec<u32>) -> AllowedUids {
        AllowedUids(Arc::new(RwLock::new(uids)))
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|p| p.into_inner())
}

/// A connection that passed the peer-uid check and the handshake (watched for reading only:
/// [`quiet`]).
#[derive(Debug)]
pub struct AuthenticatedStream {
    inner: quiet::QuietStream,
    peer: Peer,
}

impl AuthenticatedStream {
    pub fn peer(&self) -> &Peer {
        &self.peer
    }
}

impl tonic::transport::server::Connected for AuthenticatedStream {
    type ConnectInfo = Peer;
    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

impl AsyncRead for AuthenticatedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for AuthenticatedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Why a connection was not served.
#[derive(Debug, thiserror::Error)]
pub enum RefusedConnection {
    #[error("peer uid {0} is not allowed")]
    Uid(u32),
    #[error("handshake: {0}")]
    Handshake(#[from] handshake::HelloError),
    #[error("unknown peer name {0:?}")]
    UnknownPeer(String),
    #[error("the peer did not prove the key of {0:?}")]
    BadProof(String),
    #[error("the handshake took too long")]
    Timeout,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Connections on `listener` whose peer uid is in `allowed_uids` and that prove one of `keys`;
/// others are closed and logged. Handshakes run concurrently, each within [`HANDSHAKE_TIMEOUT`],
/// and every connection is accepted at once: when one uid already has
/// [`MAX_PENDING_HANDSHAKES_PER_UID`] handshakes pending, or all have [`MAX_PENDING_HANDSHAKES`],
/// the oldest pending one (that uid's, else anyone's) is dropped for the newcomer. A real client
/// proves itself in a millisecond; connections held silent (a job of the same user flooding the
/// socket) are the ones that wait longest, so they are the ones shed, and nobody else waits.
pub fn authenticated_incoming(
    listener: UnixListener,
    allowed_uids: impl Into<AllowedUids>,
    keys: ServerKeys,
) -> impl Stream<Item = std::io::Result<AuthenticatedStream>> {
    let allowed_uids = allowed_uids.into();
    let (tx, rx) = tokio::sync::mpsc::channel(MAX_PENDING_HANDSHAKES);
    tokio::spawn(async move {
        let mut handshakes = tokio::task::JoinSet::new();
        let mut pending: Pending<tokio::task::AbortHandle> = Pending::default();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let stream = match accepted {
                        Ok((stream, _)) => stream,
                        Err(e) => {
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let uid = stream.peer_cred().map_or(u32::MAX, |c| c.uid());
                    if let Some(shed) = pending.make_room(uid) {
                        shed.abort();
                    }
                    let (tx, keys, allowed) = (tx.clone(), keys.clone(), allowed_uids.clone());
                    let handle = handshakes.spawn(async move {
                        match accept(stream, &allowed, &keys).await {
                            Ok(stream) => {
                                let _ = tx.send(Ok(stream)).await;
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "refused a connection to a control socket")
                            }
                        }
                    });
                    pending.push(handle.id(), uid, handle);
                }
                Some(done) = handshakes.join_next_with_id() => {
                    let id = match done {
                        Ok((id, ())) => id,
                        Err(e) => e.id(),
                    };
                    pending.remove(id);
                }
                _ = tx.closed() => return,
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// The handshakes under way on one listener, oldest first. Pure bookkeeping: which one to shed.
struct Pending<H> {
    queue: std::collections::VecDeque<(tokio::task::Id, u32, H)>,
}

impl<H> Default for Pending<H> {
    fn default() -> Self {
        Pending {
            queue: std::collections::VecDeque::new(),
        }
    }
}

impl<H> Pending<H> {
    fn push(&mut self, id: tokio::task::Id, uid: u32, handle: H) {
        self.queue.push_back((id, uid, handle));
    }

    fn remove(&mut self, id: tokio::task::Id) {
        self.queue.retain(|(i, _, _)| *i != id);
    }

    /// Makes room for one more handshake of `uid`: returns the one to drop, if any (that uid's
    /// oldest when it holds its share, else the oldest of all when all places are taken).
    fn make_room(&mut self, uid: u32) -> Option<H> {
        let of_uid = self.queue.iter().filter(|(_, u, _)| *u == uid).count();
        let at = if of_uid >= MAX_PENDING_HANDSHAKES_PER_UID {
            self.queue.iter().position(|(_, u, _)| *u == uid)
        } else if self.queue.len() >= MAX_PENDING_HANDSHAKES {
            Some(0)
        } else {
            None
        };
        at.and_then(|i| self.queue.remove(i)).map(|(_, _, h)| h)
    }
}

async fn accept(
    mut stream: UnixStream,
    allowed_uids: &AllowedUids,
    keys: &ServerKeys,
) -> Result<AuthenticatedStream, RefusedConnection> {
    let uid = stream.peer_cred()?.uid();
    if !allowed_uids.contains(uid) {
        return Err(RefusedConnection::Uid(uid));
    }
    let peer = tokio::time::timeout(HANDSHAKE_TIMEOUT, serve_handshake(&mut stream, keys))
        .await
        .map_err(|_| RefusedConnection::Timeout)??;
    Ok(AuthenticatedStream {
        inner: quiet::QuietStream::new(stream)?,
        peer: Peer(peer, uid),
    })
}

async fn serve_handshake(
    stream: &mut UnixStream,
    keys: &ServerKeys,
) -> Result<String, RefusedConnection> {
    use handshake::{ACCEPTED, Side, hello_rest_len, parse_hello_rest, proof, verify};
    let mut head = [0u8; 5];
    stream.read_exact(&mut head).await?;
    let mut rest = vec![0u8; hello_rest_len(&head)?];
    stream.read_exact(&mut rest).await?;
    let (peer, client_nonce) = parse_hello_rest(&rest)?;
    let key = keys
        .get(&peer)
        .ok_or_else(|| RefusedConnection::UnknownPeer(peer.clone()))?;
    let key = &key;
    let server_nonce = connect::nonce()?;
    let mut reply = server_nonce.to_vec();
    reply.extend_from_slice(&proof(
        key,
        Side::Server,
        &peer,
        &client_nonce,
        &server_nonce,
    ));
    stream.write_all(&reply).await?;
    let mut client_proof = [0u8; handshake::KEY_BYTES];
    stream.read_exact(&mut client_proof).await?;
    if !verify(
        key,
        Side::Client,
        &peer,
        &client_nonce,
        &server_nonce,
        &client_proof,
    ) {
        return Err(RefusedConnection::BadProof(peer));
    }
    stream.write_all(&[ACCEPTED]).await?;
    Ok(peer)
}

/// A client channel between glovebox's processes ([`link::Channel`]): requests carry the trace
/// context of the call they are part of (see `glovebox_trace::propagation`).
pub type Link = glovebox_trace::propagation::Traced<link::Channel>;
/// The tower layer every glovebox gRPC server carries: a server span per traced request.
pub use glovebox_trace::propagation::ServerLayer;

/// A channel to the control socket at `path`, as `peer` with `key`. It connects on first use and
/// reconnects after failures (running the handshake each time), so callers see `Unavailable`
/// while the service is down, or is not the service it claims to be, instead of hanging.
pub fn authenticated_channel(path: &Path, peer: &str, key: SocketKey) -> Link {
    glovebox_trace::propagation::Traced::new(link::Channel::new(
        path.to_owned(),
        peer.to_owned(),
        key,
    ))
}

/// How long a service waits for the gate to take an audit row before it gives up.
pub const AUDIT_DURABLE_LIMIT: Duration = Duration::from_secs(15);

/// Appends an audit row and returns once the gate has taken it, retrying while the gate cannot
/// be reached (under `up` a gate that died is back within a second or two), for at most `limit`.
/// A call whose rows were not taken is not reported as done: the caller turns an error here into
/// a failed call. A row retried after a reply was lost may be written twice (rows are never lost).
pub async fn append_durably(
    client: &crate::v1::audit_client::AuditClient<Link>,
    event: crate::v1::AuditEvent,
    limit: Duration,
) -> Result<(), tonic::Status> {
    durably(limit, || {
        let mut client = client.clone();
        let request = audit_request(event.clone());
        async move { client.append(request).await.map(|_| ()) }
    })
    .await
}

/// [`append_durably`] of a call's execute and result rows, committed together by the gate
/// (`Audit.AppendCall`, admitted with the ticket the call ran on).
pub async fn append_call_durably(
    client: &crate::v1::audit_client::AuditClient<Link>,
    rows: crate::v1::CallRows,
    limit: Duration,
) -> Result<(), tonic::Status> {
    durably(limit, || {
        let mut client = client.clone();
        let request = audit_request(rows.clone());
        async move { client.append_call(request).await.map(|_| ()) }
    })
    .await
}

/// How long one attempt to hand the gate audit rows may wait for its answer.
pub const AUDIT_ATTEMPT_LIMIT: Duration = Duration::from_secs(5);

fn audit_request<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(AUDIT_ATTEMPT_LIMIT);
    request
}

/// Runs `attempt` until it succeeds, retrying while the gate cannot be reached, for at most
/// `limit`; any other error is returned at once.
pub async fn durably<F, Fut>(limit: Duration, mut attempt: F) -> Result<(), tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), tonic::Status>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    let mut pause = Duration::from_millis(20);
    loop {
        match attempt().await {
            Ok(()) => return Ok(()),
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
                ) && tokio::time::Instant::now() + pause < deadline =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            Err(status) => return Err(status),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_serves_only_the_peers_it_names() {
        let request = |peer: Option<&str>| {
            let mut r = tonic::Request::new(());
            if let Some(p) = peer {
                r.extensions_mut().insert(Peer(p.to_owned(), 1000));
            }
            r
        };
        assert_eq!(
            require_peer(&request(Some("broker")), &["broker"]).unwrap(),
            "broker"
        );
        let denied = require_peer(&request(Some("executor:a")), &["broker"]).unwrap_err();
        assert_eq!(denied.code(), tonic::Code::PermissionDenied);
        assert!(denied.message().contains("executor:a"), "{denied}");
        let anonymous = require_peer(&request(None), &["broker"]).unwrap_err();
        assert_eq!(anonymous.code(), tonic::Code::Unauthenticated);
        assert_eq!(required(Some(3), "x").unwrap(), 3);
        assert_eq!(
            required::<u8>(None, "call").unwrap_err().message(),
            "missing call"
        );
    }
    use std::path::PathBuf;
    use tokio_stream::StreamExt;

    fn key(name: &str) -> SocketKey {
        SocketKey::derive(b"test control key", "test", name)
    }

    fn listener(dir: &Path) -> (PathBuf, UnixListener) {
        let path = dir.join("s.sock");
        let l = bind_private_socket(&path).unwrap();
        (path, l)
    }

    /// Floods of silent connections: 200 of one uid, then a real client, which is served at
    /// once because the flood's oldest are shed for it.
    #[tokio::test]
    async fn a_flood_of_silent_connections_does_not_keep_a_real_client_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let (path, l) = listener(dir.path());
        let keys = ServerKeys::new([("broker".to_owned(), key("broker"))]);
        let mut incoming = Box::pin(authenticated_incoming(l, default_allowed_uids(), keys));
        let mut silent = Vec::new();
        for _ in 0..200 {
            silent.push(UnixStream::connect(&path).await.unwrap());
        }
        let started = std::time::Instant::now();
        let client = tokio::spawn({
            let path = path.clone();
            async move { connect_authenticated(&path, "broker", &key("broker")).await }
        });
        let served = tokio::time::timeout(Duration::from_secs(2), incoming.next())
            .await
            .expect("served while the flood holds its connections")
            .unwrap()
            .unwrap();
        assert_eq!(served.peer().0, "broker");
        client.await.unwrap().unwrap();
        assert!(started.elapsed() < HANDSHAKE_TIMEOUT);
        // The flood's connections were shed (closed by the server), not left to time out.
        let mut closed = 0;
        for s in &mut silent {
            let mut buf = [0u8; 1];
            if let Ok(Ok(0)) | Ok(Err(_)) =
                tokio::time::timeout(Duration::from_millis(20), s.read(&mut buf)).await
            {
                closed += 1;
            }
        }
        assert!(closed >= 200 - MAX_PENDING_HANDSHAKES_PER_UID, "{closed}");
    }

    #[test]
    fn the_oldest_pending_handshake_of_a_uid_at_its_share_or_of_all_is_shed() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let ids: Vec<tokio::task::Id> = (0..MAX_PENDING_HANDSHAKES + 2)
            .map(|_| rt.block_on(async { tokio::spawn(async {}).id() }))
            .collect();
        let mut p: Pending<usize> = Pending::default();
        // One uid up to its share: nothing shed; the next sheds its oldest.
        for (i, id) in ids.iter().take(MAX_PENDING_HANDSHAKES_PER_UID).enumerate() {
            assert_eq!(p.make_room(7), None);
            p.push(*id, 7, i);
        }
        assert_eq!(p.make_room(7), Some(0));
        // Others fill the rest; past every place, the oldest of all goes.
        let mut n = MAX_PENDING_HANDSHAKES_PER_UID - 1;
        let mut uid = 100;
        while n < MAX_PENDING_HANDSHAKES {
            assert_eq!(p.make_room(uid), None);
            p.push(ids[n + 1], uid, n + 1);
            n += 1;
            uid += 1;
        }
        assert_eq!(p.make_room(9999), Some(1));
        p.remove(ids[2]);
        assert_eq!(p.queue.len(), MAX_PENDING_HANDSHAKES - 2);
    }

    #[tokio::test]
    async fn a_peer_with_its_key_is_served_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let (path, l) = listener(dir.path());
        let keys = ServerKeys::new([("broker".to_owned(), key("broker"))]);
        let mut incoming = Box::pin(authenticated_incoming(l, default_allowed_uids(), keys));
        let client = tokio::spawn({
            let path = path.clone();
            async move { connect_authenticated(&path, "broker", &key("broker")).await }
        });
        let served = incoming.next().await.unwrap().unwrap();
        assert_eq!(
            served.peer(),
            &Peer("broker".into(), rustix::process::geteuid().as_raw())
        );
        client.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_wrong_key_or_unknown_peer_is_refused_and_others_still_served() {
        let dir = tempfile::tempdir().unwrap();
        let (path, l) = listener(dir.path());
        let keys = ServerKeys::new([("broker".to_owned(), key("broker"))]);
        let mut incoming = Box::pin(authenticated_incoming(l, default_allowed_uids(), keys));
        // The wrong key: the client cannot even verify the server, and is never served.
        let e = connect_authenticated(&path, "broker", &key("other"))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        let e = connect_authenticated(&path, "admin", &key("admin"))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        // Raw HTTP/2 without a handshake is not served either.
        let mut raw = UnixStream::connect(&path).await.unwrap();
        raw.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1];
        match raw.read(&mut buf).await {
            Ok(n) => assert_eq!(n, 0, "closed without a reply"),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
        }
        // A silent peer does not hold up the next one.
        let _silent = UnixStream::connect(&path).await.unwrap();
        let ok = tokio::spawn({
            let path = path.clone();
            async move { connect_authenticated(&path, "broker", &key("broker")).await }
        });
        let served = tokio::time::timeout(Duration::from_secs(2), incoming.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(
            served.peer(),
            &Peer("broker".into(), rustix::process::geteuid().as_raw())
        );
        ok.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn keys_and_uids_replaced_at_run_time_apply_to_the_next_handshake() {
        let dir = tempfile::tempdir().unwrap();
        let (path, l) = listener(dir.path());
        let keys = ServerKeys::new([("executor:old".to_owned(), key("executor:old"))]);
        let uids = AllowedUids::from(default_allowed_uids());
        let mut incoming = Box::pin(authenticated_incoming(l, uids.clone(), keys.clone()));
        let connect = |peer: &'static str| {
            let path = path.clone();
            tokio::spawn(async move { connect_authenticated(&path, peer, &key(peer)).await })
        };
        let served = connect("executor:old");
        assert_eq!(
            incoming.next().await.unwrap().unwrap().peer().0,
            "executor:old"
        );
        served.await.unwrap().unwrap();
        // The old peer out, a new one in: through the clone the server holds.
        keys.replace(ServerKeys::new([(
            "executor:new".to_owned(),
            key("executor:new"),
        )]));
        assert!(keys.contains("executor:new") && !keys.contains("executor:old"));
        let e = connect("executor:old").await.unwrap().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        let served = connect("executor:new");
        assert_eq!(
            incoming.next().await.unwrap().unwrap().peer().0,
            "executor:new"
        );
        served.await.unwrap().unwrap();
        // No uid admitted: the kernel's check refuses before any handshake.
        uids.replace(Vec::new());
        assert!(connect("executor:new").await.unwrap().is_err());
    }

    #[tokio::test]
    async fn a_client_refuses_an_impostor_server_before_sending_anything_else() {
        // Something else bound the path and answers the hello with a made-up proof.
        let dir = tempfile::tempdir().unwrap();
        let (path, l) = listener(dir.path());
        let impostor = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut hello = vec![0u8; 5 + "broker".len() + 32];
            s.read_exact(&mut hello).await.unwrap();
            s.write_all(&[7u8; 64]).await.unwrap();
            // Whatever the client sends next is all an impostor could capture.
            let mut captured = Vec::new();
            let _ = s.read_to_end(&mut captured).await;
            captured
        });
        let e = connect_authenticated(&path, "broker", &key("broker"))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(e.to_string().contains("could not prove"), "{e}");
        assert!(
            impostor.await.unwrap().is_empty(),
            "the client sent nothing after the hello"
        );
    }

    #[tokio::test]
    async fn grpc_calls_carry_the_authenticated_peer() {
        use crate::v1::audit_server::{Audit, AuditServer};
        use crate::v1::{AppendAck, AuditEvent};
        struct Echo(tokio::sync::mpsc::UnboundedSender<Option<String>>);
        #[tonic::async_trait]
        impl Audit for Echo {
            async fn append(
                &self,
                request: tonic::Request<AuditEvent>,
            ) -> Result<tonic::Response<AppendAck>, tonic::Status> {
                let _ = self.0.send(peer_of(&request).map(str::to_owned));
                Ok(tonic::Response::new(AppendAck {}))
            }
            async fn append_call(
                &self,
                _: tonic::Request<crate::v1::CallRows>,
            ) -> Result<tonic::Response<AppendAck>, tonic::Status> {
                Err(tonic::Status::unimplemented("not in this test"))
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let (path, l) = listener(dir.path());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let keys = ServerKeys::new([("executor:a".to_owned(), key("executor:a"))]);
        let incoming = authenticated_incoming(l, default_allowed_uids(), keys);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(AuditServer::new(Echo(tx)))
                .serve_with_incoming(incoming),
        );
        let mut client = crate::v1::audit_client::AuditClient::new(authenticated_channel(
            &path,
            "executor:a",
            key("executor:a"),
        ));
        client.append(AuditEvent::default()).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().as_deref(), Some("executor:a"));
        let mut wrong = crate::v1::audit_client::AuditClient::new(authenticated_channel(
            &path,
            "executor:a",
            key("executor:b"),
        ));
        let status = wrong.append(AuditEvent::default()).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    }
}
