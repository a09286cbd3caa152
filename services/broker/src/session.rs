//! One WebSocket session, the part the agent/approver endpoint (`connection`) and the providers'
//! endpoint (`client_tools`) share: the socket split in two, a writer task draining an outbox,
//! and a reader that turns the socket's events into text frames or the reason the session ended.
//!
//! The reader answers what no endpoint needs to see: a close frame ends the session; a frame over
//! the size cap closes it with 1008 (policy violation), any other read error with 1002 (protocol
//! error); the credential being revoked closes it with 1008; binary frames get the endpoint's
//! refusal (or nothing); pings and pongs are skipped. The writer pings the peer; a session from
//! which nothing at all arrives (no frame, no pong) for the idle timeout is closed with 1001
//! (going away), and a peer that stops reading cannot hold the writer: a write that does not
//! finish within [`WRITE_TIMEOUT`] ends the session.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Frames waiting to be written to one session.
pub const OUTBOX_DEPTH: usize = 256;
/// WebSocket close code for a policy violation (an oversized frame, a revoked credential).
pub const CLOSE_POLICY: u16 = 1008;
/// WebSocket close code for a protocol error.
pub const CLOSE_PROTOCOL: u16 = 1002;
/// WebSocket close code for a session closed as idle.
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// Longest one frame may take to be written before the session is given up.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// How a session checks that its peer is there: a ping every `ping`, and the session ends when
/// nothing has arrived for `idle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    pub ping: Duration,
    pub idle: Duration,
}

impl Liveness {
    pub fn of(limits: &crate::limits::Limits) -> Liveness {
        Liveness {
            ping: limits.ping_interval(),
            idle: limits.websocket_idle,
        }
    }
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The peer closed the socket (with a close frame or without).
    Closed,
    /// The peer sent a frame over the cap (closed with 1008).
    TooLarge,
    /// Reading failed otherwise (closed with 1002).
    Broken,
    /// The session's credential no longer authenticates (closed with 1008).
    Revoked,
    /// Nothing arrived for the idle timeout (closed with 1001).
    Idle,
}

/// Where an endpoint queues what it sends; frames go out in order, and a close after every frame
/// queued before it.
pub struct Outbox<T> {
    frames: mpsc::Sender<T>,
    close: mpsc::Sender<Option<CloseFrame>>,
}

impl<T> Clone for Outbox<T> {
    fn clone(&self) -> Self {
        Outbox {
            frames: self.frames.clone(),
            close: self.close.clone(),
        }
    }
}

impl<T> Outbox<T> {
    /// Queues a frame (waiting while the outbox is full); dropped if the session has ended.
    pub async fn send(&self, frame: T) {
        let _ = self.frames.send(frame).await;
    }

    /// The sending end of the frame queue, for whoever else sends on this session (the asks to
    /// an approver, the calls to a provider).
    pub fn frames(&self) -> mpsc::Sender<T> {
        self.frames.clone()
    }

    /// Closes the session with `code` once the frames queued before are written.
    pub fn close(&self, code: u16, reason: &str) {
        self.close_with(Some(CloseFrame {
            code,
            reason: reason.into(),
        }));
    }

    /// Closes the session (a close frame without a code) once the frames queued before are
    /// written.
    pub fn close_without_code(&self) {
        self.close_with(None);
    }

    fn close_with(&self, frame: Option<CloseFrame>) {
        // A full queue means a close is already on its way.
        let _ = self.close.try_send(frame);
    }
}

/// A live session: its reader, its outbox and its writer task.
pub struct Session<T> {
    stream: SplitStream<WebSocket>,
    outbox: Outbox<T>,
    writer: JoinHandle<()>,
    revoked: Pin<Box<dyn Future<Output = ()> + Send>>,
    binary_refusal: Option<T>,
    ended: Option<End>,
    idle: Duration,
    last_heard: tokio::time::Instant,
}

impl<T: Into<Message> + Clone + Send + 'static> Session<T> {
    /// Starts the writer. `revoked` completes when the session's credential is revoked;
    /// `binary_refusal` is what a binary frame is answered with (`None`: ignored).
    pub fn start(
        socket: WebSocket,
        revoked: impl Future<Output = ()> + Send + 'static,
        binary_refusal: Option<T>,
        liveness: Liveness,
    ) -> Session<T> {
        let (mut sink, stream) = socket.split();
        let (frames, mut frames_rx) = mpsc::channel::<T>(OUTBOX_DEPTH);
        let (close, mut close_rx) = mpsc::channel::<Option<CloseFrame>>(1);
        let writer = tokio::spawn(async move {
            let start = tokio::time::Instant::now() + liveness.ping;
            let mut ping = tokio::time::interval_at(start, liveness.ping);
            ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    // Frames queued before a close go out first.
                    biased;
                    frame = frames_rx.recv() => match frame {
                        Some(frame) => {
                            if !write(&mut sink, frame.into()).await {
                                break;
                            }
                        }
                        // Every sender is gone: the session is over, with the close queued last.
                        None => {
                            if let Ok(frame) = close_rx.try_recv() {
                                let _ = write(&mut sink, Message::Close(frame)).await;
                            }
                            break;
                        }
                    },
                    Some(frame) = close_rx.recv() => {
                        let _ = write(&mut sink, Message::Close(frame)).await;
                        break;
                    }
                    _ = ping.tick() => {
                        if !write(&mut sink, Message::Ping(Default::default())).await {
                            break;
                        }
                    }
                }
            }
            let _ = tokio::time::timeout(WRITE_TIMEOUT, sink.close()).await;
        });
        Session {
            stream,
            outbox: Outbox { frames, close },
            writer,
            revoked: Box::pin(revoked),
            binary_refusal,
            ended: None,
            idle: liveness.idle,
            last_heard: tokio::time::Instant::now(),
        }
    }

    pub fn outbox(&self) -> &Outbox<T> {
        &self.outbox
    }

    /// When the peer last sent anything: a text frame, a binary one, or a protocol ping or pong
    /// (a client whose library answers pings by itself is alive without a word of its own).
    pub fn last_heard(&self) -> tokio::time::Instant {
        self.last_heard
    }

    /// The next text frame, or why the session ended (the close frame, where one is due, is
    /// already queued; later calls return the same). Dropping the future loses no incoming frame.
    pub async fn next_text(&mut self) -> Result<Utf8Bytes, End> {
        if let Some(end) = self.ended {
            return Err(end);
        }
        let next = self.read().await;
        if let Err(end) = next {
            self.ended = Some(end);
        }
        next
    }

    async fn read(&mut self) -> Result<Utf8Bytes, End> {
        loop {
            let message = tokio::select! {
                m = self.stream.next() => m,
                _ = &mut self.revoked => {
                    self.outbox.close(CLOSE_POLICY, "credential revoked");
                    return Err(End::Revoked);
                }
                _ = tokio::time::sleep_until(self.last_heard + self.idle) => {
                    self.outbox.close(CLOSE_GOING_AWAY, "idle");
                    return Err(End::Idle);
                }
            };
            self.last_heard = tokio::time::Instant::now();
            match message {
                Some(Ok(Message::Text(text))) => return Ok(text),
                Some(Ok(Message::Binary(_))) => {
                    if let Some(refusal) = &self.binary_refusal {
                        self.outbox.send(refusal.clone()).await;
                    }
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_))) | None => return Err(End::Closed),
                Some(Err(e)) => {
                    let end = if is_oversized(&e) {
                        self.outbox.close(CLOSE_POLICY, "frame too large");
                        End::TooLarge
                    } else {
                        self.outbox.close(CLOSE_PROTOCOL, "protocol error");
                        End::Broken
                    };
                    return Err(end);
                }
            }
        }
    }

    /// Ends the session: once every other sender of its frames is gone too, the writer writes
    /// what is queued, closes the socket and exits; this waits for that.
    pub async fn finish(self) {
        let Session { outbox, writer, .. } = self;
        drop(outbox);
        let _ = writer.await;
    }
}

/// Writes one frame within [`WRITE_TIMEOUT`]; false if the socket failed or the peer does not
/// read.
async fn write(sink: &mut SplitSink<WebSocket, Message>, message: Message) -> bool {
    matches!(
        tokio::time::timeout(WRITE_TIMEOUT, sink.send(message)).await,
        Ok(Ok(()))
    )
}

/// Whether a read error is a message or frame over the size cap.
fn is_oversized(e: &axum::Error) -> bool {
    let text = e.to_string();
    text.contains("too long") || text.contains("Space limit")
}
