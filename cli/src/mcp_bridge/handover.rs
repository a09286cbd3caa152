//! `glovebox mcp` handing its stdin and stdout to the broker (the broker's side is
//! `glovebox_broker::mcp::handover`, which describes the exchange; its wire format is
//! `glovebox_proto::stdio`). Once handed over, the bridge
//! only waits: the broker serves the MCP session on the client's own pipes, and every call skips
//! the bridge process.
//!
//! When the broker dies, the bridge answers each call the in-flight record holds with an error
//! (the call may or may not have run), waits for the broker to be back, and hands the session
//! over again with the client's initialization, so the client carries on without noticing more
//! than those errors. Requests the client makes meanwhile wait in its pipe for the next broker,
//! for up to 10 s; after that the bridge answers them itself, saying glovebox is not reachable
//! (`away`), until a broker takes the session again.
//! The bridge exits when the broker says the client ended the session, or when the client has
//! gone while no broker holds the session.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use anyhow::Context;
use glovebox_proto::stdio::in_flight;
use glovebox_proto::stdio::{Handover, MAX_LINE, PATH, PROTOCOL, Told};
use serde_json::value::RawValue;

use super::away::Waited;
use super::stdio::{ModesBack, write_blocking};
use crate::client::Target;

/// How long the broker has to answer each step of a handover.
const STEP_WAIT: Duration = Duration::from_secs(10);
/// How long the first handover waits for a broker that cannot be reached yet.
const FIRST_WAIT: Duration = Duration::from_secs(10);
/// How long requests wait in the pipe for a broker that went away before they are answered
/// here (`away`).
const AWAY_PATIENCE: Duration = Duration::from_secs(10);
/// The first wait before handing over again; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// What a call lost with the broker is answered.
const LOST: &str =
    "unavailable: glovebox's broker stopped during the call; it may or may not have run";

/// Hands stdio to the broker and to every broker after it until the session ends. `Err` when
/// the first handover could not be made (no broker reachable within [`FIRST_WAIT`], none with
/// a Unix socket, or one that refuses): nothing was handed over and the caller serves the
/// session itself.
pub fn run(target: &dyn Fn() -> anyhow::Result<Target>) -> anyhow::Result<()> {
    let record = in_flight::new_file().context("make the in-flight record")?;
    let modes = ModesBack::of_both();
    let mut control = first_hand(target, &record)?;
    eprintln!("glovebox mcp: the broker serves this session on our stdio");
    let mut resume: Option<Box<RawValue>> = None;
    loop {
        if follow(&mut control, &mut resume) == Followed::Ended {
            return Ok(());
        }
        // Our own writes block; the next broker makes them non-blocking again.
        modes.put_back();
        answer_lost(&record);
        eprintln!(
            "glovebox mcp: the broker stopped; handing the session to it again when it is back"
        );
        match hand_again(target, &record, resume.as_deref()) {
            Some(next) => control = next,
            None => return Ok(()),
        }
    }
}

/// The first handover, waiting up to [`FIRST_WAIT`] for a broker that is not reachable yet (a
/// client started with glovebox); a broker that answers and refuses is not asked again.
fn first_hand(
    target: &dyn Fn() -> anyhow::Result<Target>,
    record: &OwnedFd,
) -> anyhow::Result<BufReader<UnixStream>> {
    let deadline = std::time::Instant::now() + FIRST_WAIT;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let reached = match target() {
            Ok(t) if t.local_socket().is_none() => {
                anyhow::bail!("the broker has no Unix socket to hand stdio over")
            }
            Ok(t) => reach(&t).map(|stream| (stream, t)),
            Err(e) => Err(e),
        };
        match reached {
            Ok((stream, t)) => return hand(stream, &t, record, None),
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(backoff),
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// A connection to the broker's Unix socket.
fn reach(target: &Target) -> anyhow::Result<UnixStream> {
    let path = target
        .local_socket()
        .context("the broker has no Unix socket to hand stdio over")?;
    UnixStream::connect(path)
        .with_context(|| format!("cannot reach glovebox at {}", path.display()))
}

/// Hands stdin, stdout and `record` to the broker on `stream`; the connection to follow.
fn hand(
    stream: UnixStream,
    target: &Target,
    record: &OwnedFd,
    resume: Option<&RawValue>,
) -> anyhow::Result<BufReader<UnixStream>> {
    stream.set_read_timeout(Some(STEP_WAIT))?;
    stream.set_write_timeout(Some(STEP_WAIT))?;
    (&stream).write_all(
        format!(
            "GET {PATH} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n\
             Connection: Upgrade\r\nUpgrade: {PROTOCOL}\r\n\r\n",
            target.token()
        )
        .as_bytes(),
    )?;
    let mut control = BufReader::new(stream);
    let status = line(&mut control)?;
    let status = String::from_utf8_lossy(&status);
    match status.split_whitespace().nth(1) {
        Some("101") => {}
        Some("401") => anyhow::bail!(
            "the broker refused the agent token in {} (it may have been rotated: `glovebox token rotate`)",
            target.token_file().display()
        ),
        _ => anyhow::bail!(
            "the broker answered the handover with {}",
            status.trim_end()
        ),
    }
    while line(&mut control)? != b"\r\n" {}
    match serde_json::from_slice(&line(&mut control)?) {
        Ok(Told::Ready) => {}
        _ => anyhow::bail!("the broker did not say it was ready for the handover"),
    }
    let resume = resume.map(ToOwned::to_owned);
    let mut message = serde_json::to_vec(&Handover { resume })?;
    message.push(b'\n');
    send_with_fds(control.get_ref(), &message, record)?;
    control.get_ref().set_read_timeout(None)?;
    Ok(control)
}

/// Sends `message` with stdin, stdout and `record` attached.
fn send_with_fds(socket: &UnixStream, message: &[u8], record: &OwnedFd) -> std::io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::mem::MaybeUninit;
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let fds = [stdin.as_fd(), stdout.as_fd(), record.as_fd()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    control.push(SendAncillaryMessage::ScmRights(&fds));
    let sent = rustix::net::sendmsg(
        socket,
        &[std::io::IoSlice::new(message)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    // The descriptors went with the first byte; the rest of the line follows plainly.
    let mut socket = socket;
    socket.write_all(&message[sent..])
}

/// One line of at most [`MAX_LINE`] bytes, with its newline.
fn line(control: &mut BufReader<UnixStream>) -> anyhow::Result<Vec<u8>> {
    let mut line = Vec::new();
    control
        .by_ref()
        .take(MAX_LINE as u64)
        .read_until(b'\n', &mut line)?;
    anyhow::ensure!(
        line.last() == Some(&b'\n'),
        "the broker closed the handover or sent a line too long"
    );
    Ok(line)
}

#[derive(Debug, PartialEq, Eq)]
enum Followed {
    /// The client ended the session.
    Ended,
    /// The broker's end closed without saying so: it stopped.
    BrokerGone,
}

/// Reads what the broker tells until the session ends or the broker goes, keeping the client's
/// initialization in `resume`.
fn follow(control: &mut BufReader<UnixStream>, resume: &mut Option<Box<RawValue>>) -> Followed {
    loop {
        let Ok(told) = line(control) else {
            return Followed::BrokerGone;
        };
        match serde_json::from_slice(&told) {
            Ok(Told::Initialized(info)) => {
                let version = serde_json::from_str::<serde_json::Value>(info.get())
                    .ok()
                    .and_then(|i| i["protocolVersion"].as_str().map(str::to_owned));
                eprintln!(
                    "glovebox mcp: the client initialized (protocol {}); the session can move to a restarted broker",
                    version.as_deref().unwrap_or("unknown")
                );
                *resume = Some(info);
            }
            Ok(Told::Ended) => return Followed::Ended,
            Ok(Told::Ready) | Err(_) => {}
        }
    }
}

/// Answers every call the record holds with an error, and clears the record.
fn answer_lost(record: &OwnedFd) {
    let file = std::fs::File::from(match record.try_clone() {
        Ok(fd) => fd,
        Err(_) => return,
    });
    let mut bytes = vec![0; in_flight::FILE_BYTES];
    if file.read_exact_at(&mut bytes, 0).is_err() {
        return;
    }
    let lost = in_flight::recorded(&bytes);
    let out: Vec<u8> = lost
        .iter()
        .flat_map(|id| super::away::tool_error(id, LOST))
        .collect();
    let _ = file.write_all_at(&vec![0; in_flight::FILE_BYTES], 0);
    if !out.is_empty() {
        eprintln!(
            "glovebox mcp: {} calls in flight were lost with the broker",
            lost.len()
        );
        write_blocking(&out);
    }
}

/// Hands the session over again once a broker is back, backing off meanwhile; `None` when the
/// client went away first. After [`AWAY_PATIENCE`] without a broker, the client's requests are
/// answered here meanwhile (`away`), so that its calls fail saying why instead of waiting.
fn hand_again(
    target: &dyn Fn() -> anyhow::Result<Target>,
    record: &OwnedFd,
    resume: Option<&RawValue>,
) -> Option<BufReader<UnixStream>> {
    let mut backoff = FIRST_BACKOFF;
    let mut last_error = String::new();
    let patient_until = std::time::Instant::now() + AWAY_PATIENCE;
    let mut away = super::away::Away::default();
    loop {
        let waited = away.wait(backoff, std::time::Instant::now() >= patient_until);
        if waited == Waited::ClientGone || away.settle() == Waited::ClientGone {
            return None;
        }
        match target().and_then(|t| hand(reach(&t)?, &t, record, resume)) {
            Ok(control) => {
                eprintln!("glovebox mcp: the session is handed to the broker again");
                return Some(control);
            }
            Err(e) => {
                let error = format!("{e:#}");
                if error != last_error {
                    eprintln!("glovebox mcp: cannot hand the session over ({error}); retrying");
                    last_error = error;
                }
            }
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
