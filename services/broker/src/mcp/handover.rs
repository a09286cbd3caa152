//! `GET /v1/stdio` on the broker's Unix socket: `glovebox mcp` hands its stdin and stdout to
//! the broker, and the broker serves the MCP session on them itself, as `/mcp` serves one. The
//! bridge process is then off every call's path: a call goes from the MCP client's pipe to the
//! broker and back, two hand-offs between processes fewer than through a forwarding bridge.
//!
//! The exchange, after an agent token's request is upgraded (`Upgrade: glovebox-stdio`):
//! 1. the broker says [`Told::Ready`] (so the upgrade is done before anything is sent);
//! 2. the bridge sends one message with three descriptors (`SCM_RIGHTS`): its stdin, its
//!    stdout and the in-flight record (`in_flight`), and a [`Handover`] line: the session's
//!    initialization when it is handed over again after a broker restart;
//! 3. the broker tells the bridge the client's initialization ([`Told::Initialized`]), for
//!    handing the session to the next broker, before it answers the client's `initialize`
//!    (so there is no moment when the client is initialized and the bridge does not know it),
//!    and [`Told::Ended`] when the client closes its side.
//!
//! The bridge's connection stays open for the session: when it closes (the bridge was killed)
//! the session ends, and when the broker dies the bridge sees it close, answers the calls the
//! record holds with an error, and hands the session over again once the broker is back. A
//! session counts against its account as any connection does, and ends when its token is
//! rotated or removed.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use glovebox_config::AccountId;
use rmcp::ServiceExt;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::UnixStream;

use super::McpHandler;
use super::in_flight::{self, InFlight};
use super::to_bridge::ToBridge;
use crate::app::App;
use crate::held::LocalConnection;

pub use glovebox_proto::stdio::{Handover, MAX_LINE, PATH, PROTOCOL, Told};

/// How long the broker waits for the descriptors after the upgrade.
const HANDOVER_WAIT: Duration = Duration::from_secs(10);

/// Upgrades an agent's request to a handover; the session runs in a task of its own.
pub async fn upgrade(State(app): State<Arc<App>>, mut request: Request) -> Response {
    let agent = glovebox_proto::ws::Role::Agent;
    let who = match crate::role_check::credential_for(
        &app,
        request.headers(),
        agent,
        "the stdio handover",
    )
    .await
    {
        Ok(who) => who,
        Err(refused) => return refused,
    };
    let asked = request
        .headers()
        .get(http::header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(PROTOCOL.as_bytes()));
    if !asked || request.extensions().get::<LocalConnection>().is_none() {
        return (
            http::StatusCode::BAD_REQUEST,
            "the stdio handover is an upgrade to glovebox-stdio on the broker's Unix socket\n",
        )
            .into_response();
    }
    let upgrading = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrading.await else {
            return;
        };
        let Some((stream, slot)) = crate::held::local_stream(upgraded) else {
            tracing::warn!("a stdio handover's connection could not be taken over");
            return;
        };
        let revoked = app.clone().unauthorized(who.clone());
        tokio::select! {
            () = serve(app.clone(), who.account.clone(), stream) => {}
            () = revoked => tracing::info!(account = %who.account, "stdio session ended: its credential was revoked"),
        }
        drop(slot);
    });
    (
        http::StatusCode::SWITCHING_PROTOCOLS,
        [
            (http::header::CONNECTION, "upgrade"),
            (http::header::UPGRADE, PROTOCOL),
        ],
    )
        .into_response()
}

/// The descriptors and line a bridge handed over.
struct Handed {
    stdin: OwnedFd,
    stdout: OwnedFd,
    record: OwnedFd,
    handover: Handover,
}

/// Serves one handed-over session until the client or the bridge ends it.
async fn serve(app: Arc<App>, account: AccountId, mut stream: UnixStream) {
    if stream.write_all(&Told::Ready.line()).await.is_err() {
        return;
    }
    let handed = tokio::time::timeout(HANDOVER_WAIT, receive(&mut stream)).await;
    let handed = match handed {
        Ok(Ok(handed)) => handed,
        Ok(Err(why)) => {
            tracing::warn!(account = %account, why, "a stdio handover was refused");
            return;
        }
        Err(_) => {
            tracing::warn!(account = %account, "a stdio handover sent no descriptors in time");
            return;
        }
    };
    let (mut control, write_half) = stream.into_split();
    // Nothing is read from the client's pipes before all of the handover is accepted.
    let resume = match handed
        .handover
        .resume
        .as_deref()
        .map(|r| serde_json::from_str(r.get()))
    {
        None => None,
        Some(Ok(info)) => Some(info),
        Some(Err(e)) => {
            tracing::warn!(account = %account, error = %e, "a stdio handover's initialization is malformed");
            return;
        }
    };
    let (Some(reader), Some(writer)) = (
        super::fds::reader(handed.stdin),
        super::fds::writer(handed.stdout),
    ) else {
        return;
    };
    let session = Arc::new(super::StdioSession {
        account: account.clone(),
        in_flight: InFlight::new(handed.record),
        to_bridge: tokio::sync::Mutex::new(ToBridge::new(
            write_half,
            resume.is_some(),
            account.clone(),
        )),
    });
    let handler = McpHandler {
        app: app.clone(),
        stdio: Some(Arc::clone(&session)),
    };
    let gone = bridge_gone(&mut control);
    tokio::pin!(gone);
    let running = match resume {
        Some(info) => {
            // A session handed over again: its client initialized with the last broker.
            let running = rmcp::service::serve_directly(handler, (reader, writer), Some(info));
            let peer = running.peer().clone();
            super::watch_tool_changes(app.clone(), account.clone(), peer.clone());
            // Its tools may have changed meanwhile.
            let _ = peer.notify_tool_list_changed().await;
            running
        }
        None => {
            // The client's `initialize` is told to the bridge before it is answered
            // (`McpHandler::initialize`, [`ToBridge::initialized`]).
            let initialized = tokio::select! {
                initialized = handler.serve((reader, writer)) => initialized,
                () = &mut gone => return,
            };
            let Ok(running) = initialized else {
                return;
            };
            running
        }
    };
    let cancel = running.cancellation_token();
    tokio::select! {
        _ = running.waiting() => session.to_bridge.lock().await.ended().await,
        () = &mut gone => cancel.cancel(),
    }
}

/// Completes when the bridge's connection closes (or sends anything: it has nothing to say).
async fn bridge_gone(control: &mut tokio::net::unix::OwnedReadHalf) {
    let mut byte = [0u8; 1];
    let _ = tokio::io::AsyncReadExt::read(control, &mut byte).await;
}

/// Receives the descriptors and the [`Handover`] line.
async fn receive(stream: &mut UnixStream) -> Result<Handed, String> {
    // The descriptors come with the message's first bytes, read with the ancillary data.
    let mut line = vec![0u8; 4096];
    let (n, fds) = loop {
        stream.readable().await.map_err(|e| e.to_string())?;
        match stream.try_io(Interest::READABLE, || receive_with_fds(stream, &mut line)) {
            Ok(got) => break got,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e.to_string()),
        }
    };
    let [stdin, stdout, record]: [OwnedFd; 3] = fds
        .try_into()
        .map_err(|fds: Vec<OwnedFd>| format!("{} descriptors instead of 3", fds.len()))?;
    if !in_flight::is_sealed_record(&record) {
        return Err("the in-flight record is not a sealed memory file of its size".to_owned());
    }
    use std::os::fd::AsFd;
    let streams = [&stdin, &stdout].map(|fd| super::fds::kind(fd.as_fd()));
    if streams.contains(&super::fds::Kind::Other) {
        return Err("stdin and stdout must be pipes or Unix stream sockets".to_owned());
    }
    line.truncate(n);
    while !line.contains(&b'\n') {
        if line.len() >= MAX_LINE {
            return Err("the handover line is too long".to_owned());
        }
        let mut more = [0u8; 4096];
        let room = more.len().min(MAX_LINE - line.len());
        let n = tokio::io::AsyncReadExt::read(stream, &mut more[..room])
            .await
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the bridge closed the connection mid-line".to_owned());
        }
        line.extend_from_slice(&more[..n]);
    }
    if line.last() != Some(&b'\n') {
        return Err("the bridge sent more than its handover line".to_owned());
    }
    let handover: Handover = serde_json::from_slice(&line[..line.len() - 1])
        .map_err(|e| format!("the handover line: {e}"))?;
    Ok(Handed {
        stdin,
        stdout,
        record,
        handover,
    })
}

/// One `recvmsg` into `buf`: how many bytes, and the descriptors that came with them. A
/// message whose descriptors did not all fit is refused (the kernel closed the rest).
fn receive_with_fds(socket: &UnixStream, buf: &mut [u8]) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags};
    use std::mem::MaybeUninit;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [rustix::io::IoSliceMut::new(buf)];
    let message = rustix::net::recvmsg(socket, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)?;
    let mut fds = Vec::new();
    for ancillary in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = ancillary {
            fds.extend(received);
        }
    }
    if message.flags.contains(ReturnFlags::CTRUNC) {
        return Err(std::io::Error::other(
            "more descriptors than the handover's three",
        ));
    }
    if message.bytes == 0 {
        return Err(std::io::Error::other("the bridge closed the connection"));
    }
    Ok((message.bytes, fds))
}
