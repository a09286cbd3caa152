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
            let forget = Forget(&stream, id);
            let message = pb::ExecutorGateCall {
                id,
                trace,
                body: Some(body),
            };
            if let Err(e) = lock(&stream.sender).send(&message) {
                end(&stream);
                return Err(e);
            }
            let answer = rx.await;
            // Answered or ended, the id was taken off the waiting by whoever answered.
            std::mem::forget(forget);
            answer.unwrap_or_else(|_| Err(ended()))
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

/// Forgets a request's id when its caller stops waiting before it is answered.
struct Forget<'a>(&'a OpenStream, u64);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        lock(&self.0.waiting).answers.remove(&self.1);
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use glovebox_proto::transport::{
        ServerKeys, SocketKey, authenticated_channel, authenticated_incoming, bind_private_socket,
        default_allowed_uids,
    };
    use glovebox_proto::v1::executor_gate_server::{ExecutorGate, ExecutorGateServer};
    use std::sync::atomic::AtomicUsize;

    /// A gate that answers a verdict request with its call id as the reason: after 300 ms for
    /// tool `slow`; by ending the whole stream (with an error) for tool `end`; never, for a
    /// call's rows.
    #[derive(Default)]
    struct FakeGate {
        streams: Arc<AtomicUsize>,
    }

    #[tonic::async_trait]
    impl ExecutorGate for FakeGate {
        async fn decide(
            &self,
            _: tonic::Request<pb::VouchedDecideRequest>,
        ) -> Result<tonic::Response<pb::DecideResponse>, Status> {
            Err(Status::unimplemented("only the stream"))
        }

        type CallsStream =
            tokio_stream::wrappers::ReceiverStream<Result<pb::ExecutorGateAnswer, Status>>;

        async fn calls(
            &self,
            request: tonic::Request<tonic::Streaming<pb::ExecutorGateCall>>,
        ) -> Result<tonic::Response<Self::CallsStream>, Status> {
            self.streams.fetch_add(1, Ordering::SeqCst);
            let mut incoming = request.into_inner();
            let (answers, stream) = tokio::sync::mpsc::channel(16);
            tokio::spawn(async move {
                let mut held = Vec::new();
                while let Ok(Some(asked)) = incoming.message().await {
                    let Some(pb::executor_gate_call::Body::Decide(r)) = asked.body else {
                        held.push(asked);
                        continue;
                    };
                    let call = r.call.unwrap_or_default();
                    if call.tool == "end" {
                        // Ends the stream with an error status, whatever else is waiting.
                        let _ = answers.send(Err(Status::internal("ended"))).await;
                        return;
                    }
                    let answers = answers.clone();
                    tokio::spawn(async move {
                        if call.tool == "slow" {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                        }
                        let decided = pb::DecideResponse {
                            reason: call.call_id,
                            ..Default::default()
                        };
                        let answer = pb::ExecutorGateAnswer {
                            id: asked.id,
                            body: Some(Answer::Decided(decided)),
                        };
                        let _ = answers.send(Ok(answer)).await;
                    });
                }
            });
            Ok(tonic::Response::new(Self::CallsStream::new(stream)))
        }
    }

    fn key() -> SocketKey {
        SocketKey::derive(b"test control key", "test", "executor:a")
    }

    /// A [`FakeGate`] served on a runtime of its own, until stopped or dropped.
    struct Served(Option<tokio::runtime::Runtime>);

    impl Served {
        fn stop(&mut self) {
            if let Some(runtime) = self.0.take() {
                runtime.shutdown_background();
            }
        }
    }

    impl Drop for Served {
        fn drop(&mut self) {
            self.stop();
        }
    }

    /// Serves a [`FakeGate`]; returns it and the count of streams opened.
    fn serve(path: &std::path::Path) -> (Served, Arc<AtomicUsize>) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = {
            let _in = runtime.enter();
            bind_private_socket(path).unwrap()
        };
        let gate = FakeGate::default();
        let streams = Arc::clone(&gate.streams);
        let keys = ServerKeys::new([("executor:a".to_owned(), key())]);
        runtime.spawn(async move {
            let incoming = authenticated_incoming(listener, default_allowed_uids(), keys);
            let _ = tonic::transport::Server::builder()
                .add_service(ExecutorGateServer::new(gate))
                .serve_with_incoming(incoming)
                .await;
        });
        (Served(Some(runtime)), streams)
    }

    fn asked(tool: &str, call_id: &str) -> pb::VouchedDecideRequest {
        pb::VouchedDecideRequest {
            call: Some(pb::ToolCall {
                tool: tool.into(),
                call_id: call_id.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn waiting(calls: &GateCalls) -> usize {
        let Ok(open) = calls.shared.open.try_lock() else {
            return 0;
        };
        open.as_ref().map_or(0, |s| lock(&s.waiting).answers.len())
    }

    /// Returns once `n` requests wait for their answers.
    async fn until_waiting(calls: &GateCalls, n: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while waiting(calls) != n {
            assert!(std::time::Instant::now() < deadline, "{}", waiting(calls));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_callers_share_one_stream_and_each_gets_its_own_answer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gate.sock");
        let (_gate, streams) = serve(&path);
        let calls = GateCalls::new(authenticated_channel(&path, "executor:a", key()));
        // More than may wait at once: the rest wait for room, none is refused.
        let callers: Vec<_> = (0..MAX_WAITING + 150)
            .map(|i| {
                let calls = calls.clone();
                tokio::spawn(async move {
                    let id = format!("call-{i}");
                    let tool = if i % 50 == 0 { "slow" } else { "fast" };
                    let decided = calls.decide(asked(tool, &id)).await.unwrap();
                    assert_eq!(decided.reason, id);
                })
            })
            .collect();
        for caller in callers {
            caller.await.unwrap();
        }
        assert_eq!(streams.load(Ordering::SeqCst), 1);
        assert_eq!(waiting(&calls), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stream_that_ends_fails_its_waiting_callers_and_the_next_call_opens_another() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gate.sock");
        let (_gate, streams) = serve(&path);
        let calls = GateCalls::new(authenticated_channel(&path, "executor:a", key()));
        let slow = tokio::spawn({
            let calls = calls.clone();
            async move { calls.decide(asked("slow", "waiting")).await }
        });
        until_waiting(&calls, 1).await;
        let ended = calls.decide(asked("end", "ender")).await.unwrap_err();
        assert_eq!(ended.code(), tonic::Code::Unavailable, "{ended:?}");
        let waited = slow.await.unwrap().unwrap_err();
        assert_eq!(waited.code(), tonic::Code::Unavailable, "{waited:?}");
        let next = calls.decide(asked("fast", "next")).await.unwrap();
        assert_eq!(next.reason, "next");
        assert_eq!(streams.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rows_unanswered_in_time_are_cancelled_and_forgotten_and_a_gate_gone_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gate.sock");
        let (mut gate, _) = serve(&path);
        let calls = GateCalls::new(authenticated_channel(&path, "executor:a", key()));
        let limit = Duration::from_millis(100);
        let e = calls
            .append_call(pb::CallRows::default(), limit)
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Cancelled, "{e:?}");
        assert_eq!(waiting(&calls), 0, "the cancelled request is forgotten");
        // The gate gone mid-wait: the waiting caller learns it at once, as Unavailable.
        let slow = tokio::spawn({
            let calls = calls.clone();
            async move { calls.decide(asked("slow", "cut")).await }
        });
        until_waiting(&calls, 1).await;
        gate.stop();
        let cut = tokio::time::timeout(Duration::from_secs(10), slow)
            .await
            .expect("the lost gate was noticed")
            .unwrap()
            .unwrap_err();
        assert_eq!(cut.code(), tonic::Code::Unavailable, "{cut:?}");
        let down = calls.decide(asked("fast", "after")).await.unwrap_err();
        assert_eq!(down.code(), tonic::Code::Unavailable, "{down:?}");
    }
}
