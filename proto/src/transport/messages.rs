//! Requests as messages on one long-lived gRPC stream between two services, instead of an HTTP/2
//! stream (headers, a task on each side, trailers) per request: the executor's requests to the
//! gate (`ExecutorGate.Calls`, and a pack host's), the broker's calls to an executor
//! (`Executor.Runs`) and to a pack host (`Packs.Runs`), and its decisions (`Gate.Decisions`).
//!
//! The client ([`MessageClient`]) keeps one stream open: a caller sends its request from its own
//! task with an id and waits for the answer with that id, which the stream's one reader hands
//! over. The stream is opened on first use and again after it ends; a request it took down with
//! it is `Unavailable`, as a lost connection is for an RPC, so callers' retries stay as they
//! were. A caller that gives up (a timeout, its own caller gone) is forgotten, and where the
//! exchange can say so the server is told, as resetting an RPC's stream would. The broker's
//! kinds are here, each with its one-request call ([`Decisions`] and [`MessageClient::decide`],
//! [`Runs`] and [`PackRuns`] with their `run`): the broker's clients, the end-to-end tests and
//! the benchmarks share them. So is the executors' and pack hosts' kind
//! (`super::gate_calls::GateCalls`).
//!
//! The server ([`answer_each`]) answers each request in a task of its own, at most a bound at
//! once (the stream is not read further until one is answered); when the service stops it takes
//! no more, answers those it took and ends the stream.
//!
//! A request can be answered another way: a read the gate hands to the broker itself
//! (`Gate.Deliveries`). The server then sends nothing ([`Answer::unsent`]), and the client, which
//! has its answer, forgets the request without telling the server ([`AnsweredElsewhere`]): no
//! message and no wake-up on either side for an answer nobody needs.
//!
//! A message over the stream's bound (`link::MAX_DUPLEX_MESSAGE`, the size the other end takes)
//! fails alone, as an RPC's would: a client refuses such a request before sending it, a server
//! answers such an answer's request `ResourceExhausted`. Sent, it would end the stream and every
//! request on it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use glovebox_trace::propagation::message_client_span;
use tokio::sync::oneshot;
use tonic::Status;
use tracing::Instrument;

use super::Link;
use super::link::{DuplexReceiver, DuplexSender, within_bound};
use crate::v1 as pb;

/// Requests a client has waiting for their answers at most; one more waits for room (as an RPC
/// would wait for the connection's streams).
pub const MAX_WAITING: usize = 256;

/// Requests a server has in flight on one stream at most.
pub const MAX_IN_FLIGHT: usize = 256;

/// A request on such a stream, as the server reads it.
pub trait Request: prost::Message + Default + Send + 'static {
    /// Its id, chosen by the client.
    fn id(&self) -> u64;
    /// The id of the request this message gives up on, when it is a cancel (none, for a kind of
    /// stream that has no cancels).
    fn cancels(&self) -> Option<u64> {
        None
    }
    /// Whether what still runs is stopped when the client's side of the stream ends (its calls
    /// are given up on with it, as a lost connection's RPCs are).
    const STOPPED_WITH_STREAM: bool;
}

/// An answer on such a stream.
pub trait Answer: prost::Message + Default + Send + 'static {
    /// The id of the request it answers.
    fn id(&self) -> u64;
    /// The answer saying request `id` failed with `status`.
    fn failed(id: u64, status: Status) -> Self;
    /// Whether the client has this answer from elsewhere and does not wait for it: it is not
    /// sent.
    fn unsent(&self) -> bool {
        false
    }
}

/// One kind of stream, as a client opens it.
pub trait Exchange: Send + Sync + 'static {
    type Request: Request;
    type Answer: Answer;
    /// The stream's method, `/package.Service/Method`.
    const PATH: &'static str;
    /// Who answers, for errors ("the gate").
    const SERVER: &'static str;
    /// The message that gives up on request `id`, when the server is to be told (never, for a
    /// kind of stream whose requests are made all the same once sent).
    fn cancel(_id: u64) -> Option<Self::Request> {
        None
    }
}

impl Request for pb::ExecutorGateCall {
    fn id(&self) -> u64 {
        self.id
    }
    /// A call's verdict and rows are quick, and rows sent are to be written.
    const STOPPED_WITH_STREAM: bool = false;
}

impl Answer for pb::ExecutorGateAnswer {
    fn id(&self) -> u64 {
        self.id
    }
    fn failed(id: u64, status: Status) -> Self {
        pb::ExecutorGateAnswer {
            id,
            body: Some(pb::executor_gate_answer::Body::Error(call_status(&status))),
        }
    }
}

impl Request for pb::RunCall {
    fn id(&self) -> u64 {
        self.id
    }
    fn cancels(&self) -> Option<u64> {
        match self.body {
            Some(pb::run_call::Body::Cancel(id)) => Some(id),
            _ => None,
        }
    }
    const STOPPED_WITH_STREAM: bool = true;
}

impl Answer for pb::RunAnswer {
    fn id(&self) -> u64 {
        self.id
    }
    /// A run whose answer the gate handed to the broker (`Gate.Deliveries`): the broker took it
    /// from there and forgot the run.
    fn unsent(&self) -> bool {
        matches!(&self.body, Some(pb::run_answer::Body::Ran(ran)) if ran.delivered)
    }
    fn failed(id: u64, status: Status) -> Self {
        pb::RunAnswer {
            id,
            body: Some(pb::run_answer::Body::Error(call_status(&status))),
        }
    }
}

impl Request for pb::DecideCall {
    fn id(&self) -> u64 {
        self.id
    }
    /// A decision is quick, and its audit row is written once it is made.
    const STOPPED_WITH_STREAM: bool = false;
}

impl Answer for pb::DecideAnswer {
    fn id(&self) -> u64 {
        self.id
    }
    fn failed(id: u64, status: Status) -> Self {
        pb::DecideAnswer {
            id,
            body: Some(pb::decide_answer::Body::Error(call_status(&status))),
        }
    }
}

/// The broker's decisions (`Gate.Decisions`). A decision given up on is not cancelled: the gate
/// makes and audits it all the same.
pub struct Decisions;

impl Exchange for Decisions {
    type Request = pb::DecideCall;
    type Answer = pb::DecideAnswer;
    const PATH: &'static str = "/glovebox.v1.Gate/Decisions";
    const SERVER: &'static str = "the gate";
}

impl MessageClient<Decisions> {
    /// The gate's verdict on `request`, one message on the stream (traced as the gate's
    /// `Decide`), or the status it failed with.
    pub async fn decide(&self, request: pb::DecideRequest) -> Result<pb::DecideResponse, Status> {
        use pb::decide_answer::Body;
        let (span, trace) = message_client_span("glovebox.v1.Gate", "Decide");
        let answer = self
            .call(|id| pb::DecideCall {
                id,
                trace,
                decide: Some(request),
            })
            .instrument(span)
            .await?;
        match answer.body {
            Some(Body::Decided(decided)) => Ok(decided),
            Some(Body::Error(status)) => Err(status_of(status)),
            None => Err(Status::internal("the gate sent an empty answer")),
        }
    }
}

/// The broker's built-in calls to an executor (`Executor.Runs`). A call given up on is cancelled:
/// the executor stops it.
pub struct Runs;

impl Exchange for Runs {
    type Request = pb::RunCall;
    type Answer = pb::RunAnswer;
    const PATH: &'static str = "/glovebox.v1.Executor/Runs";
    const SERVER: &'static str = "the executor";
    fn cancel(id: u64) -> Option<pb::RunCall> {
        Some(pb::RunCall {
            id,
            trace: Default::default(),
            body: Some(pb::run_call::Body::Cancel(id)),
        })
    }
}

impl MessageClient<Runs> {
    /// What the executor's run of `request` came to, one message on the stream (traced as the
    /// executor's `Run`), or the status it failed with. Dropping the future cancels the call,
    /// unless `elsewhere` is set by then ([`MessageClient::call_unless_answered`]).
    pub async fn run(
        &self,
        request: pb::RunRequest,
        elsewhere: &AnsweredElsewhere,
    ) -> Result<pb::RunResponse, Status> {
        use pb::run_answer::Body;
        let (span, trace) = message_client_span("glovebox.v1.Executor", "Run");
        let answer = self
            .call_unless_answered(
                |id| pb::RunCall {
                    id,
                    trace,
                    body: Some(pb::run_call::Body::Run(request)),
                },
                elsewhere,
            )
            .instrument(span)
            .await?;
        match answer.body {
            Some(Body::Ran(ran)) => Ok(ran),
            Some(Body::Error(status)) => Err(status_of(status)),
            None => Err(Status::internal("the executor sent an empty answer")),
        }
    }
}

impl Request for pb::PackRunCall {
    fn id(&self) -> u64 {
        self.id
    }
    fn cancels(&self) -> Option<u64> {
        match self.body {
            Some(pb::pack_run_call::Body::Cancel(id)) => Some(id),
            _ => None,
        }
    }
    const STOPPED_WITH_STREAM: bool = true;
}

impl Answer for pb::PackRunAnswer {
    fn id(&self) -> u64 {
        self.id
    }
    fn failed(id: u64, status: Status) -> Self {
        pb::PackRunAnswer {
            id,
            body: Some(pb::pack_run_answer::Body::Error(call_status(&status))),
        }
    }
}

/// The broker's pack calls to a pack host (`Packs.Runs`). A call given up on is withdrawn: the
/// pack's server is told to cancel it.
pub struct PackRuns;

impl Exchange for PackRuns {
    type Request = pb::PackRunCall;
    type Answer = pb::PackRunAnswer;
    const PATH: &'static str = "/glovebox.v1.Packs/Runs";
    const SERVER: &'static str = "the pack host";
    fn cancel(id: u64) -> Option<pb::PackRunCall> {
        Some(pb::PackRunCall {
            id,
            trace: Default::default(),
            body: Some(pb::pack_run_call::Body::Cancel(id)),
        })
    }
}

impl MessageClient<PackRuns> {
    /// What the pack host's run of `request` came to, one message on the stream (traced as the
    /// pack host's `Run`), or the status it failed with. Dropping the future withdraws the call.
    pub async fn run(&self, request: pb::PackRunRequest) -> Result<pb::PackRunResponse, Status> {
        use pb::pack_run_answer::Body;
        let (span, trace) = message_client_span("glovebox.v1.Packs", "Run");
        let answer = self
            .call(|id| pb::PackRunCall {
                id,
                trace,
                body: Some(pb::pack_run_call::Body::Run(request)),
            })
            .instrument(span)
            .await?;
        match answer.body {
            Some(Body::Ran(ran)) => Ok(ran),
            Some(Body::Error(status)) => Err(status_of(status)),
            None => Err(Status::internal("the pack host sent an empty answer")),
        }
    }
}

/// `status` as a message field.
pub fn call_status(status: &Status) -> pb::CallStatus {
    pb::CallStatus {
        code: status.code() as i32,
        message: status.message().to_owned(),
    }
}

/// A [`pb::CallStatus`] back as the status it was.
pub fn status_of(status: pb::CallStatus) -> Status {
    Status::new(tonic::Code::from(status.code), status.message)
}

/// A client's stream of requests of one kind. Cheap to clone; clones share the stream.
pub struct MessageClient<E: Exchange> {
    shared: Arc<Shared<E>>,
}

impl<E: Exchange> Clone for MessageClient<E> {
    fn clone(&self) -> Self {
        MessageClient {
            shared: Arc::clone(&self.shared),
        }
    }
}

struct Shared<E: Exchange> {
    link: Link,
    /// The stream open now, if any (or one that ended, to be replaced).
    open: tokio::sync::Mutex<Option<Arc<OpenStream<E>>>>,
    next_id: AtomicU64,
    room: tokio::sync::Semaphore,
}

struct OpenStream<E: Exchange> {
    sender: Mutex<DuplexSender>,
    waiting: Mutex<Waiting<E::Answer>>,
}

struct Waiting<A> {
    /// Set when the stream ended: nothing more is sent on it.
    ended: bool,
    answers: HashMap<u64, oneshot::Sender<Result<A, Status>>>,
}

impl<E: Exchange> MessageClient<E> {
    pub fn new(link: Link) -> MessageClient<E> {
        MessageClient {
            shared: Arc::new(Shared {
                link,
                open: tokio::sync::Mutex::new(None),
                next_id: AtomicU64::new(1),
                room: tokio::sync::Semaphore::new(MAX_WAITING),
            }),
        }
    }

    /// Sends the request `build` makes of its id and waits for its answer. Dropping the future
    /// gives up on the request: it is forgotten, and the server told when the exchange can.
    pub async fn call(&self, build: impl FnOnce(u64) -> E::Request) -> Result<E::Answer, Status> {
        self.call_unless_answered(build, &AnsweredElsewhere::default())
            .await
    }

    /// [`MessageClient::call`] of a request that may be answered another way: once `elsewhere`
    /// is set, dropping the future forgets the request without telling the server, which sends
    /// no answer to it either ([`Answer::unsent`]).
    pub async fn call_unless_answered(
        &self,
        build: impl FnOnce(u64) -> E::Request,
        elsewhere: &AnsweredElsewhere,
    ) -> Result<E::Answer, Status> {
        let _room = self
            .shared
            .room
            .acquire()
            .await
            .map_err(|_| Status::unavailable("closed"))?;
        let stream = self.stream().await?;
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let request = build(id);
        // Refused here, this request alone fails: sent, the server would end the stream.
        within_bound(&request)?;
        let (tx, rx) = oneshot::channel();
        {
            let mut waiting = lock(&stream.waiting);
            if waiting.ended {
                return Err(ended::<E>());
            }
            waiting.answers.insert(id, tx);
        }
        // Whatever happens from here (an error, a timeout, the caller gone), the id is not left
        // waiting.
        let forget = Forget(&stream, id, elsewhere);
        if let Err(e) = lock(&stream.sender).send(&request) {
            end(&stream);
            return Err(e);
        }
        let answer = rx.await;
        // Answered or ended, the id was taken off the waiting by whoever answered.
        std::mem::forget(forget);
        answer.unwrap_or_else(|_| Err(ended::<E>()))
    }

    /// How many requests wait for their answers now (0 while a stream is being opened).
    pub fn waiting(&self) -> usize {
        let Ok(open) = self.shared.open.try_lock() else {
            return 0;
        };
        open.as_ref().map_or(0, |s| lock(&s.waiting).answers.len())
    }

    /// The stream open now, opened (and its reader started) if there is none or it ended.
    async fn stream(&self) -> Result<Arc<OpenStream<E>>, Status> {
        let mut open = self.shared.open.lock().await;
        if let Some(stream) = open.as_ref()
            && !lock(&stream.waiting).ended
        {
            return Ok(Arc::clone(stream));
        }
        *open = None;
        let (sender, receiver) = self.shared.link.untraced().open_duplex(E::PATH).await?;
        let stream = Arc::new(OpenStream {
            sender: Mutex::new(sender),
            waiting: Mutex::new(Waiting {
                ended: false,
                answers: HashMap::new(),
            }),
        });
        tokio::spawn(read_answers(Arc::clone(&stream), receiver));
        *open = Some(Arc::clone(&stream));
        Ok(stream)
    }
}

/// Hands each answer to its caller until the stream ends, then ends it for everyone waiting.
async fn read_answers<E: Exchange>(stream: Arc<OpenStream<E>>, mut receiver: DuplexReceiver) {
    loop {
        match receiver.next::<E::Answer>().await {
            Ok(Some(answer)) => {
                let waiter = lock(&stream.waiting).answers.remove(&answer.id());
                if let Some(waiter) = waiter {
                    let _ = waiter.send(Ok(answer));
                }
            }
            Ok(None) => break,
            Err(status) => {
                tracing::debug!(error = %status, server = E::SERVER, "a stream of requests ended");
                break;
            }
        }
    }
    end(&stream);
}

/// Marks `stream` ended: each request still waiting on it is `Unavailable`.
fn end<E: Exchange>(stream: &OpenStream<E>) {
    let answers = {
        let mut waiting = lock(&stream.waiting);
        waiting.ended = true;
        std::mem::take(&mut waiting.answers)
    };
    for (_, waiter) in answers {
        let _ = waiter.send(Err(ended::<E>()));
    }
}

fn ended<E: Exchange>() -> Status {
    Status::unavailable(format!("the stream of requests to {} ended", E::SERVER))
}

/// Set once a request's answer came another way ([`MessageClient::call_unless_answered`]), by
/// the caller that holds both the call and the other answer (a flag on its stack: no allocation
/// on the call's path).
#[derive(Debug, Default)]
pub struct AnsweredElsewhere(AtomicBool);

impl AnsweredElsewhere {
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Forgets a request's id when its caller stops waiting before it is answered, and tells the
/// server when the exchange can, unless the answer came another way.
struct Forget<'a, E: Exchange>(&'a OpenStream<E>, u64, &'a AnsweredElsewhere);

impl<E: Exchange> Drop for Forget<'_, E> {
    fn drop(&mut self) {
        let was_waiting = lock(&self.0.waiting).answers.remove(&self.1).is_some();
        if was_waiting
            && !self.2.is_set()
            && let Some(cancel) = E::cancel(self.1)
        {
            let _ = lock(&self.0.sender).send(&cancel);
        }
    }
}

/// What a server sends back on a stream: its answers, ending when it has answered all it took.
pub type AnswerStream<A> = tokio_stream::wrappers::ReceiverStream<Result<A, Status>>;

/// Answers each request read from `incoming` with `answer`, each in a task of its own: at most
/// `running` answered at once and [`MAX_IN_FLIGHT`] taken (the stream is not read further until
/// one is answered). A cancel stops the request it names, unanswered, whether it was running or
/// waiting for its turn (so one is read even while every turn is taken). An answer the client
/// has from elsewhere ([`Answer::unsent`]) is not sent. When `stopping`
/// becomes true no more is read, and the stream ends once those taken are answered; when the
/// client's side ends, what still runs is stopped if the requests say so
/// ([`Request::STOPPED_WITH_STREAM`]) and answered otherwise. A stop signal that is gone is no
/// stop.
pub fn answer_each<R, A, F, Fut>(
    mut incoming: tonic::Streaming<R>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    running: usize,
    answer: F,
) -> AnswerStream<A>
where
    R: Request,
    A: Answer,
    F: Fn(R) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = A> + Send + 'static,
{
    let (answers, answer_stream) = tokio::sync::mpsc::channel(MAX_IN_FLIGHT);
    tokio::spawn(async move {
        let room = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
        let turns = Arc::new(tokio::sync::Semaphore::new(running.max(1)));
        let running: Arc<Mutex<HashMap<u64, tokio::task::AbortHandle>>> = Arc::default();
        let stopped = async move {
            if stopping.wait_for(|stop| *stop).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::pin!(stopped);
        let client_ended = loop {
            let Ok(slot) = Arc::clone(&room).acquire_owned().await else {
                break false;
            };
            let next = tokio::select! {
                next = incoming.message() => next,
                () = &mut stopped => break false,
            };
            let request = match next {
                Ok(Some(request)) => request,
                Ok(None) => break true,
                Err(status) => {
                    tracing::debug!(error = %status, "a stream of requests ended");
                    break true;
                }
            };
            if let Some(id) = request.cancels() {
                if let Some(task) = lock(&running).remove(&id) {
                    task.abort();
                }
                continue;
            }
            let id = request.id();
            let started = {
                let mut in_flight = lock(&running);
                let fresh = !in_flight.contains_key(&id);
                if fresh {
                    let (answers, running_now, turns, answering) = (
                        answers.clone(),
                        Arc::clone(&running),
                        Arc::clone(&turns),
                        answer(request),
                    );
                    let task = tokio::spawn(async move {
                        let turn = turns.acquire().await.ok();
                        let answered = answering.await;
                        drop(turn);
                        lock(&running_now).remove(&id);
                        // An answer the client would refuse (ending the stream) fails alone.
                        let answered = match within_bound(&answered) {
                            Ok(()) => answered,
                            Err(too_big) => A::failed(id, too_big),
                        };
                        if !answered.unsent() {
                            let _ = answers.send(Ok(answered)).await;
                        }
                        drop(slot);
                    });
                    // The task takes itself off `running` under this same lock, so after this.
                    in_flight.insert(id, task.abort_handle());
                }
                fresh
            };
            if !started {
                let refused = Status::invalid_argument("a request id already in flight");
                let _ = answers.send(Ok(A::failed(id, refused))).await;
            }
        };
        if client_ended && R::STOPPED_WITH_STREAM {
            for (_, task) in lock(&running).drain() {
                task.abort();
            }
        }
        // The answer stream ends once the tasks still running have answered.
    });
    AnswerStream::new(answer_stream)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, Bytes, BytesMut};
    use std::time::Duration;
    use tokio::sync::mpsc;
    use tokio_stream::StreamExt;
    use tonic::codec::Codec;

    /// The client's side of a stream, as the server reads it: what is sent on the returned sender
    /// arrives as gRPC frames; dropping the sender ends the client's side.
    fn client_side<R: Request>() -> (mpsc::UnboundedSender<R>, tonic::Streaming<R>) {
        let (tx, rx) = mpsc::unbounded_channel::<R>();
        let frames = tokio_stream::wrappers::UnboundedReceiverStream::new(rx).map(|m: R| {
            let mut frame = BytesMut::new();
            frame.put_u8(0);
            frame.put_u32(m.encoded_len() as u32);
            m.encode(&mut frame).unwrap();
            Ok::<_, Status>(http_body::Frame::data(Bytes::from(frame)))
        });
        let decoder = tonic_prost::ProstCodec::<pb::RunAnswer, R>::default().decoder();
        let body = http_body_util::StreamBody::new(frames);
        (tx, tonic::Streaming::new_request(decoder, body, None, None))
    }

    fn run(id: u64, what: &str) -> pb::RunCall {
        pb::RunCall {
            id,
            trace: Default::default(),
            body: Some(pb::run_call::Body::Run(pb::RunRequest {
                call: Some(pb::ToolCall {
                    call_id: what.to_owned(),
                    ..Default::default()
                }),
                ..Default::default()
            })),
        }
    }

    fn cancel(id: u64) -> pb::RunCall {
        pb::RunCall {
            id,
            trace: Default::default(),
            body: Some(pb::run_call::Body::Cancel(id)),
        }
    }

    /// Sends its id on the channel when dropped: a request's work stopped or ended.
    struct Dropped(u64, mpsc::UnboundedSender<u64>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            let _ = self.1.send(self.0);
        }
    }

    /// A server answering each run by its call id: `hold` never answers, `slow` answers after
    /// 200 ms, `huge` with an answer over the stream's bound, `delivered` that the gate handed
    /// its answer over, anything else at once, as a status naming it. Returns its answers and the
    /// ids whose work was dropped.
    fn serve(
        incoming: tonic::Streaming<pb::RunCall>,
        stopping: tokio::sync::watch::Receiver<bool>,
        running: usize,
    ) -> (AnswerStream<pb::RunAnswer>, mpsc::UnboundedReceiver<u64>) {
        let (dropped_tx, dropped) = mpsc::unbounded_channel();
        let answers = answer_each(incoming, stopping, running, move |asked: pb::RunCall| {
            // Made before the work is first polled, so a request stopped while it waits for its
            // turn is seen too.
            let guard = Dropped(asked.id, dropped_tx.clone());
            async move {
                let _guard = guard;
                let Some(pb::run_call::Body::Run(run)) = asked.body else {
                    unreachable!("a cancel is not answered");
                };
                let what = run.call.unwrap_or_default().call_id;
                match what.as_str() {
                    "hold" => std::future::pending::<()>().await,
                    "slow" => tokio::time::sleep(Duration::from_millis(200)).await,
                    "huge" => {
                        let text = "x".repeat(super::super::link::MAX_DUPLEX_MESSAGE);
                        return pb::RunAnswer::failed(asked.id, Status::aborted(text));
                    }
                    "delivered" => {
                        return pb::RunAnswer {
                            id: asked.id,
                            body: Some(pb::run_answer::Body::Ran(pb::RunResponse {
                                delivered: true,
                                ..Default::default()
                            })),
                        };
                    }
                    _ => {}
                }
                pb::RunAnswer::failed(asked.id, Status::aborted(what))
            }
        });
        (answers, dropped)
    }

    async fn next_answer(answers: &mut AnswerStream<pb::RunAnswer>) -> Option<(u64, String)> {
        let answer = tokio::time::timeout(Duration::from_secs(10), answers.next())
            .await
            .expect("an answer or the end in time")?
            .unwrap();
        let Some(pb::run_answer::Body::Error(status)) = answer.body else {
            panic!("{answer:?}");
        };
        Some((answer.id, status.message))
    }

    async fn next_dropped(dropped: &mut mpsc::UnboundedReceiver<u64>) -> u64 {
        tokio::time::timeout(Duration::from_secs(10), dropped.recv())
            .await
            .expect("work dropped in time")
            .unwrap()
    }

    fn not_stopping() -> tokio::sync::watch::Receiver<bool> {
        tokio::sync::watch::channel(false).1
    }

    #[tokio::test]
    async fn answers_name_their_requests_and_a_cancel_stops_its_request_unanswered() {
        let (client, incoming) = client_side();
        let (mut answers, mut dropped) = serve(incoming, not_stopping(), 4);
        client.send(run(1, "hold")).unwrap();
        client.send(run(2, "slow")).unwrap();
        client.send(run(3, "quick")).unwrap();
        assert_eq!(next_answer(&mut answers).await, Some((3, "quick".into())));
        assert_eq!(next_dropped(&mut dropped).await, 3);
        assert_eq!(next_answer(&mut answers).await, Some((2, "slow".into())));
        assert_eq!(next_dropped(&mut dropped).await, 2);
        client.send(cancel(1)).unwrap();
        assert_eq!(next_dropped(&mut dropped).await, 1);
        // A cancel of what is not running is nothing; the stream goes on.
        client.send(cancel(9)).unwrap();
        client.send(run(4, "after")).unwrap();
        assert_eq!(next_answer(&mut answers).await, Some((4, "after".into())));
        drop(client);
        assert_eq!(
            next_answer(&mut answers).await,
            None,
            "1 was never answered"
        );
    }

    #[tokio::test]
    async fn an_answer_the_client_has_from_elsewhere_is_not_sent() {
        let (client, incoming) = client_side();
        let (mut answers, mut dropped) = serve(incoming, not_stopping(), 4);
        client.send(run(1, "delivered")).unwrap();
        assert_eq!(next_dropped(&mut dropped).await, 1);
        client.send(run(2, "after")).unwrap();
        // The next answer on the stream is the next request's.
        assert_eq!(next_answer(&mut answers).await, Some((2, "after".into())));
        drop(client);
        assert_eq!(next_answer(&mut answers).await, None);
    }

    #[tokio::test]
    async fn an_answer_over_the_bound_fails_its_request_alone() {
        let (client, incoming) = client_side();
        let (mut answers, _dropped) = serve(incoming, not_stopping(), 4);
        client.send(run(1, "slow")).unwrap();
        client.send(run(2, "huge")).unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(10), answers.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(answer.id, 2);
        let Some(pb::run_answer::Body::Error(e)) = answer.body else {
            panic!("{answer:?}")
        };
        assert_eq!(tonic::Code::from(e.code), tonic::Code::ResourceExhausted);
        assert!(e.message.contains("over the limit"), "{}", e.message);
        assert_eq!(next_answer(&mut answers).await, Some((1, "slow".into())));
        client.send(run(3, "after")).unwrap();
        assert_eq!(next_answer(&mut answers).await, Some((3, "after".into())));
    }

    #[tokio::test]
    async fn a_cancel_is_read_while_every_turn_is_taken() {
        let (client, incoming) = client_side();
        let (mut answers, mut dropped) = serve(incoming, not_stopping(), 1);
        client.send(run(1, "hold")).unwrap();
        client.send(run(2, "hold")).unwrap();
        client.send(run(3, "waits")).unwrap();
        // 2 waits for the one turn 1 holds; cancelling it does not need the turn.
        client.send(cancel(2)).unwrap();
        assert_eq!(next_dropped(&mut dropped).await, 2);
        client.send(cancel(1)).unwrap();
        assert_eq!(next_dropped(&mut dropped).await, 1);
        // The turn 1 held goes to 3.
        assert_eq!(next_answer(&mut answers).await, Some((3, "waits".into())));
    }

    #[tokio::test]
    async fn an_id_already_in_flight_is_refused_and_the_first_runs_on() {
        let (client, incoming) = client_side();
        let (mut answers, mut dropped) = serve(incoming, not_stopping(), 4);
        client.send(run(1, "slow")).unwrap();
        client.send(run(1, "again")).unwrap();
        let (id, refused) = next_answer(&mut answers).await.unwrap();
        assert_eq!(
            (id, refused.as_str()),
            (1, "a request id already in flight")
        );
        assert_eq!(
            next_dropped(&mut dropped).await,
            1,
            "the refused one's work"
        );
        assert_eq!(next_answer(&mut answers).await, Some((1, "slow".into())));
    }

    #[tokio::test]
    async fn runs_still_going_stop_when_the_client_ends_its_side() {
        let (client, incoming) = client_side();
        let (mut answers, mut dropped) = serve(incoming, not_stopping(), 4);
        client.send(run(1, "hold")).unwrap();
        client.send(run(2, "quick")).unwrap();
        assert_eq!(next_answer(&mut answers).await, Some((2, "quick".into())));
        assert_eq!(next_dropped(&mut dropped).await, 2);
        drop(client);
        assert_eq!(next_dropped(&mut dropped).await, 1);
        assert_eq!(next_answer(&mut answers).await, None);
    }

    #[tokio::test]
    async fn a_stopping_service_answers_what_it_took_and_ends_the_stream() {
        let (client, incoming) = client_side();
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let (mut answers, _dropped) = serve(incoming, stopping, 4);
        client.send(run(1, "slow")).unwrap();
        client.send(run(2, "quick")).unwrap();
        assert_eq!(next_answer(&mut answers).await, Some((2, "quick".into())));
        stop.send(true).unwrap();
        assert_eq!(next_answer(&mut answers).await, Some((1, "slow".into())));
        // Ended with the client's side still open: nothing more is read.
        assert_eq!(next_answer(&mut answers).await, None);
        drop(client);
    }

    #[tokio::test]
    async fn an_executors_requests_to_the_gate_are_answered_after_its_side_ends() {
        let (client, incoming) = client_side::<pb::ExecutorGateCall>();
        let answers = answer_each(
            incoming,
            not_stopping(),
            4,
            |asked: pb::ExecutorGateCall| async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                pb::ExecutorGateAnswer::failed(asked.id, Status::aborted("rows written"))
            },
        );
        client
            .send(pb::ExecutorGateCall {
                id: 7,
                ..Default::default()
            })
            .unwrap();
        drop(client);
        let answers: Vec<_> = tokio::time::timeout(Duration::from_secs(10), answers.collect())
            .await
            .unwrap();
        let ids: Vec<u64> = answers.iter().map(|a| a.as_ref().unwrap().id).collect();
        assert_eq!(
            ids,
            [7],
            "the request taken is answered, then the stream ends"
        );
    }
}
