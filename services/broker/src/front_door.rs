//! The broker's listening sockets: accepts loopback TCP connections and, in user mode, local
//! connections on its Unix socket (`StateDir::agent_socket`, in the private run directory), gives
//! each a place by the local user it comes from (`peer` for TCP, the kernel's `SO_PEERCRED` for
//! the Unix socket; `admission`) or refuses it at once with a 503, and serves HTTP/1.1 on it
//! (upgrades to WebSocket included) with a deadline for each request's headers — from the
//! connection's start, and again from the end of each response, so a half-sent request and an
//! idle keep-alive connection both end there. Both sockets serve the same routes with the same
//! credentials; the Unix socket spares a local client the loopback TCP stack.
//!
//! Every request carries its connection's [`Slot`] in its extensions, for the first request
//! that authenticates to count the connection against its account (see `lib.rs`). The slot
//! lives as long as the socket: an upgraded WebSocket keeps it until it closes.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tower::ServiceExt;

use crate::admission::{Admission, Peer, Refusal, Slot};
use crate::held::Held;
use crate::peer::PeerLookup;

/// How long the broker waits before accepting again when accepting fails for want of
/// descriptors (the reserve should make this rare).
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Refusals are logged at most once per this period, with how many there were.
pub const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` (and `local`, the Unix socket, if there is one) until
/// `shutdown` completes, then lets open HTTP connections finish their requests (WebSockets end
/// with their own sessions).
pub async fn serve(
    listener: TcpListener,
    local_socket: Option<UnixListener>,
    router: Router,
    admission: Arc<Admission>,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    let mut lookup = PeerLookup::open();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let (stopping, stop) = watch::channel(false);
    let (open_tx, open_rx) = watch::channel(());
    let mut refusals = Throttle::default();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted.map(|(stream, remote)| {
                let peer = match lookup.uid_of(remote, local) {
                    Some(uid) => Peer::Uid(uid),
                    None => Peer::Unknown,
                };
                (Accepted::Tcp(stream), peer)
            }),
            accepted = accept_local(local_socket.as_ref()) => accepted.map(|stream| {
                let peer = match stream.peer_cred() {
                    Ok(cred) => Peer::Uid(cred.uid()),
                    Err(_) => Peer::Unknown,
                };
                (Accepted::Unix(stream), peer)
            }),
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                if let Some(n) = refusals.note(Instant::now()) {
                    tracing::error!(error = %e, refused = n, "could not accept connections");
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let slot = match admit_shedding(&admission, peer).await {
            Ok(slot) => Arc::new(slot),
            Err(refusal) => {
                refuse(&stream, refusal);
                if let Some(n) = refusals.note(Instant::now()) {
                    tracing::warn!(%peer, %refusal, refused = n, "refused connections");
                }
                continue;
            }
        };
        let serving = Serving {
            builder: &builder,
            router: &router,
            stop: &stop,
            open: &open_rx,
        };
        match stream {
            Accepted::Tcp(io) => {
                // Frames go out as they are written: with Nagle's algorithm a small frame written
                // while another is unacknowledged waited for the client's (possibly delayed) ACK.
                let _ = io.set_nodelay(true);
                serving.spawn(io, slot, false)
            }
            Accepted::Unix(io) => serving.spawn(io, slot, true),
        }
    }
    let _ = stopping.send(true);
    drop(open_rx);
    open_tx.closed().await;
    Ok(())
}

/// How long a newcomer waits for a shed connection to give its place back.
const SHED_WAIT: Duration = Duration::from_millis(100);

/// A place for a connection from `peer`; when its peer's cap or the unauthenticated share is
/// full, the oldest silent connection is shed for it and the place taken once given back.
pub(crate) async fn admit_shedding(
    admission: &Arc<Admission>,
    peer: Peer,
) -> Result<Slot, Refusal> {
    match admission.admit(peer) {
        Err(refusal @ (Refusal::Peer | Refusal::Unauthenticated)) => {
            let released = admission.released();
            tokio::pin!(released);
            released.as_mut().enable();
            if !admission.shed_for(peer, refusal) {
                return Err(refusal);
            }
            let _ = tokio::time::timeout(SHED_WAIT, released).await;
            admission.admit(peer)
        }
        other => other,
    }
}

/// Counts a connection against the account of the first request on it that authenticates
/// (the endpoint still checks the credential's role); refused with 503, and the connection
/// closed, when that account holds its cap.
pub async fn claim(
    axum::extract::State(app): axum::extract::State<Arc<crate::app::App>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if let Some(slot) = request.extensions().get::<Arc<Slot>>()
        && let Some(who) = crate::auth::credential_of(&app.credentials, request.headers())
        && let Err(refusal) = slot.claim(&who.account)
    {
        return (
            http::StatusCode::SERVICE_UNAVAILABLE,
            [(http::header::CONNECTION, "close")],
            format!("{refusal}\n"),
        )
            .into_response();
    }
    next.run(request).await
}

/// A connection accepted on one of the front door's sockets.
enum Accepted {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

/// The next connection on the Unix socket; never, without one.
async fn accept_local(listener: Option<&UnixListener>) -> std::io::Result<tokio::net::UnixStream> {
    match listener {
        Some(listener) => listener.accept().await.map(|(stream, _)| stream),
        None => std::future::pending().await,
    }
}

/// What serving an admitted connection needs from the accept loop.
struct Serving<'a> {
    builder: &'a hyper::server::conn::http1::Builder,
    router: &'a Router,
    stop: &'a watch::Receiver<bool>,
    /// Held by each connection's task while it runs.
    open: &'a watch::Receiver<()>,
}

impl Serving<'_> {
    /// Serves HTTP on `io` in a task of its own, holding `slot` as long as the socket; `local`:
    /// it is the Unix socket (told to each request, for the stdio handover).
    fn spawn<S>(&self, io: S, slot: Arc<Slot>, local: bool)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let router = self.router.clone();
        let shed = slot.clone();
        let connection = self.builder.serve_connection(
            TokioIo::new(Held::new(io, slot.clone())),
            hyper_util::service::TowerToHyperService::new(tower::service_fn(
                move |mut request: http::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(slot.clone());
                    if local {
                        request
                            .extensions_mut()
                            .insert(crate::held::LocalConnection);
                    }
                    router.clone().oneshot(request.map(axum::body::Body::new))
                },
            )),
        );
        let (mut stop, open) = (self.stop.clone(), self.open.clone());
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection.with_upgrades());
            tokio::select! {
                _ = connection.as_mut() => {}
                // Shed for a newcomer while no credential claimed it.
                () = shed.shed() => {}
                () = async { let _ = stop.wait_for(|stopping| *stopping).await; } => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(open);
        });
    }
}

/// Answers a connection refused a place, without reading it, and closes it.
fn refuse(stream: &Accepted, refusal: Refusal) {
    let response = refusal_response(refusal);
    // A fresh socket's send buffer is empty: this does not block, and a failure changes nothing.
    let _ = match stream {
        Accepted::Tcp(s) => s.try_write(response.as_bytes()),
        Accepted::Unix(s) => s.try_write(response.as_bytes()),
    };
}

/// The 503 a connection refused a place is answered with, unread.
pub(crate) fn refusal_response(refusal: Refusal) -> String {
    let body = format!("{refusal}\n");
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// Counts events and says when to log them: the first at once, then at most once per
/// [`REFUSAL_LOG_PERIOD`] with how many there were since the last log.
#[derive(Debug, Default)]
struct Throttle {
    last: Option<Instant>,
    since: u64,
}

impl Throttle {
    fn note(&mut self, now: Instant) -> Option<u64> {
        self.since += 1;
        match self.last {
            Some(last) if now.duration_since(last) < REFUSAL_LOG_PERIOD => None,
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.since))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_logged_once_per_period_with_their_count() {
        let mut t = Throttle::default();
        let start = Instant::now();
        assert_eq!(t.note(start), Some(1));
        assert_eq!(t.note(start + Duration::from_secs(1)), None);
        assert_eq!(t.note(start + Duration::from_secs(2)), None);
        assert_eq!(t.note(start + REFUSAL_LOG_PERIOD), Some(3));
        assert_eq!(t.note(start + REFUSAL_LOG_PERIOD * 3), Some(1));
    }
}
