//! The executor's requests of every built-in call to the gate — its verdict (`Decide`) and the
//! call's last rows (`AppendCall`) — as messages on one stream it keeps open to the gate
//! (`ExecutorGate.Calls`), instead of an HTTP/2 stream (headers, a task on each side, trailers)
//! per request. A caller sends its request from its own task and waits for the answer with its
//! id, which the stream's one reader hands over. The stream is opened on first use and again
//! after it ends; a request it took down with it is `Unavailable`, as a lost connection is for
//! an RPC, so the callers' retries stay as they were.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use glovebox_proto::transport::Link;
use glovebox_proto::transport::link::{DuplexReceiver, DuplexSender};
use glovebox_proto::v1::{self as pb, executor_gate_answer::Body as Answer};
use tokio::sync::oneshot;
use tonic::Status;
use tracing::Instrument;

const CALLS_PATH: &str = "/glovebox.v1.ExecutorGate/Calls";

/// Requests waiting for their answers at most; one more waits for room (as an RPC would wait
/// for the connection's streams).
const MAX_WAITING: usize = 256;

/// The executor's stream of requests to the gate. Cheap to clone; clones share the stream.
#[derive(Clone)]
pub struct GateCalls {
    shared: Arc<Shared>,
}

struct Shared {
    link: Link,
    /// The stream open now, if any (or one that ended, to be replaced).
    open: tokio::sync::Mutex<Option<Arc<OpenStream>>>,
    next_id: AtomicU64,
    room: tokio::sync::Semaphore,
}

struct OpenStream {
    sender: std::sync::Mutex<DuplexSender>,
    waiting: std::sync::Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    /// Set when the stream ended: nothing more is sent on it.
    ended: bool,
    answers: HashMap<u64, oneshot::Sender<Result<Answer, Status>>>,
}

impl GateCalls {
    pub fn new(link: Link) -> GateCalls {
        GateCalls {
            shared: Arc::new(Shared {
                link,
                open: tokio::sync::Mutex::new(None),
                next_id: AtomicU64::new(1),
                room: tokio::sync::Semaphore::new(MAX_WAITING),
            }),
        }
    }

    /// `ExecutorGate.Decide`, as a message on the stream.
    pub async fn decide(
        &self,
        request: pb::VouchedDecideRequest,
    ) -> Result<pb::DecideResponse, Status> {
        let asked = pb::executor_gate_call::Body::Decide(request);
        match self
            .call("glovebox.v1.ExecutorGate", "Decide", asked, None)
            .await?
        {
            Answer::Decided(decided) => Ok(decided),
            other => Err(unexpected(&other)),
        }
    }

    /// `Audit.AppendCall`, as a message on the stream; `Cancelled` if no answer came within
    /// `limit` (as an RPC's deadline is).
    pub async fn append_call(&self, rows: pb::CallRows, limit: Duration) -> Result<(), Status> {
        let asked = pb::executor_gate_call::Body::AppendCall(rows);
        match self
            .call("glovebox.v1.Audit", "AppendCall", asked, Some(limit))
            .await?
        {
            Answer::Appended(_) => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    async fn call(
        &self,
        service: &str,
        method: &str,
        body: pb::executor_gate_call::Body,
        limit: Option<Duration>,
    ) -> Result<Answer, Status> {
        let (span, trace) = glovebox_telemetry::propagation::message_client_span(service, method);
        let exchange = async {
            let _room = self
                .shared
                .room
                .acquire()
                .await
                .map_err(|_| Status::unavailable("closed"))?;
            let stream = self.stream().await?;
            let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            {
                let mut waiting = lock(&stream.waiting);
                if waiting.ended {
                    return Err(ended());
                }
                waiting.answers.insert(id, tx);
            }
            // Whatever happens from here (an error, a timeout, the caller gone), the id is not
            // left waiting.
            let _forget = Forget(&stream, id);
            let message = pb::ExecutorGateCall {
                id,
                trace,
                body: Some(body),
            };
            if let Err(e) = lock(&stream.sender).send(&message) {
                end(&stream);
                return Err(e);
            }
            match rx.await {
                Ok(answer) => answer,
                Err(_) => Err(ended()),
            }
        };
        let answer = match limit {
            None => exchange.instrument(span).await,
            Some(limit) => tokio::time::timeout(limit, exchange.instrument(span))
                .await
                .unwrap_or_else(|_| Err(Status::cancelled("Timeout expired"))),
        };
        match answer? {
            Answer::Error(e) => Err(Status::new(tonic::Code::from(e.code), e.message)),
            answer => Ok(answer),
        }
    }

    /// The stream open now, opened (and its reader started) if there is none or it ended.
    async fn stream(&self) -> Result<Arc<OpenStream>, Status> {
        let mut open = self.shared.open.lock().await;
        if let Some(stream) = open.as_ref()
            && !lock(&stream.waiting).ended
        {
            return Ok(Arc::clone(stream));
        }
        *open = None;
        let (sender, receiver) = self.shared.link.untraced().open_duplex(CALLS_PATH).await?;
        let stream = Arc::new(OpenStream {
            sender: std::sync::Mutex::new(sender),
            waiting: std::sync::Mutex::new(Waiting::default()),
        });
        tokio::spawn(read_answers(Arc::clone(&stream), receiver));
        *open = Some(Arc::clone(&stream));
        Ok(stream)
    }
}

/// Hands each answer to its caller until the stream ends, then ends it for everyone waiting.
async fn read_answers(stream: Arc<OpenStream>, mut receiver: DuplexReceiver) {
    loop {
        match receiver.next::<pb::ExecutorGateAnswer>().await {
            Ok(Some(answer)) => {
                let waiter = lock(&stream.waiting).answers.remove(&answer.id);
                let result = answer
                    .body
                    .ok_or_else(|| Status::internal("the gate sent an empty answer"));
                if let Some(waiter) = waiter {
                    let _ = waiter.send(result);
                }
            }
            Ok(None) => break,
            Err(status) => {
                tracing::debug!(error = %status, "the stream of requests to the gate ended");
                break;
            }
        }
    }
    end(&stream);
}

/// Marks `stream` ended: each request still waiting on it is `Unavailable`.
fn end(stream: &OpenStream) {
    let answers = {
        let mut waiting = lock(&stream.waiting);
        waiting.ended = true;
        std::mem::take(&mut waiting.answers)
    };
    for (_, waiter) in answers {
        let _ = waiter.send(Err(ended()));
    }
}

fn ended() -> Status {
    Status::unavailable("the stream of requests to the gate ended")
}

fn unexpected(answer: &Answer) -> Status {
    let kind = match answer {
        Answer::Decided(_) => "a verdict",
        Answer::Appended(_) => "an acknowledgement",
        Answer::Error(_) => "an error",
    };
    Status::internal(format!("the gate answered with {kind}, not what was asked"))
}

/// Forgets a request's id when its caller stops waiting.
struct Forget<'a>(&'a OpenStream, u64);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        lock(&self.0.waiting).answers.remove(&self.1);
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
