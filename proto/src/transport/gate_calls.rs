//! The requests an executor (of every built-in call) and a pack host (of every pack call the
//! broker handed it in one hop) make of the gate — a call's verdict (`decide`) and its last rows
//! (`append_call`) — as messages on one stream each keeps open to the gate
//! (`ExecutorGate.Calls`, see [`super::messages`]), instead of an HTTP/2 stream per request. A request the stream took down with it is `Unavailable`, as a lost
//! connection is for an RPC, so the callers' retries stay as they were.

use std::time::Duration;

use super::Link;
use super::messages::{Exchange, MessageClient, status_of};
use crate::v1::{self as pb, executor_gate_answer::Body as Answer};
use tonic::Status;
use tracing::Instrument;

/// An executor's or pack host's stream of requests to the gate. Cheap to clone; clones share the stream.
#[derive(Clone)]
pub struct GateCalls {
    stream: MessageClient<ToGate>,
}

/// `ExecutorGate.Calls`: nothing is cancelled (a verdict and rows are quick; rows sent are to
/// be written).
struct ToGate;

impl Exchange for ToGate {
    type Request = pb::ExecutorGateCall;
    type Answer = pb::ExecutorGateAnswer;
    const PATH: &'static str = "/glovebox.v1.ExecutorGate/Calls";
    const SERVER: &'static str = "the gate";
}

impl GateCalls {
    pub fn new(link: Link) -> GateCalls {
        GateCalls {
            stream: MessageClient::new(link),
        }
    }

    /// The gate's verdict on a call the broker vouched for, as a message on the stream.
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

    /// [`GateCalls::decide`], or what the agent is told when there is no verdict: `Denied` when
    /// the gate refused to judge the call, `Unavailable` when it could not be asked. Either way
    /// nothing was decided, and the call is not made.
    pub async fn verdict(
        &self,
        request: pb::VouchedDecideRequest,
    ) -> Result<pb::DecideResponse, (crate::ErrorCode, String)> {
        match self.decide(request).await {
            Ok(decided) => Ok(decided),
            Err(status) if status.code() == tonic::Code::PermissionDenied => {
                tracing::error!(error = %status.message(), "the gate refused to judge a call");
                Err((
                    crate::ErrorCode::Denied,
                    format!("the gate refused to judge the call: {}", status.message()),
                ))
            }
            Err(_) => Err((
                crate::ErrorCode::Unavailable,
                "the gate is unavailable; the call was not run".to_owned(),
            )),
        }
    }

    /// A call's execute and result rows, with its ticket, as a message on the stream;
    /// `Cancelled` if no answer came within `limit` (as an RPC's deadline is).
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
        let (span, trace) = glovebox_trace::propagation::message_client_span(service, method);
        let exchange = self
            .stream
            .call(|id| pb::ExecutorGateCall {
                id,
                trace,
                body: Some(body),
            })
            .instrument(span);
        let answer = match limit {
            None => exchange.await,
            Some(limit) => tokio::time::timeout(limit, exchange)
                .await
                .unwrap_or_else(|_| Err(Status::cancelled("Timeout expired"))),
        };
        match answer?.body {
            Some(Answer::Error(e)) => Err(status_of(e)),
            Some(answer) => Ok(answer),
            None => Err(Status::internal("the gate sent an empty answer")),
        }
    }
}

fn unexpected(answer: &Answer) -> Status {
    let kind = match answer {
        Answer::Decided(_) => "a verdict",
        Answer::Appended(_) => "an acknowledgement",
        Answer::Error(_) => "an error",
    };
    Status::internal(format!("the gate answered with {kind}, not what was asked"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{
        ServerKeys, SocketKey, authenticated_channel, authenticated_incoming, bind_private_socket,
        default_allowed_uids,
    };
    use crate::v1::executor_gate_server::{ExecutorGate, ExecutorGateServer};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A gate that answers a verdict request with its call id as the reason: after 300 ms for
    /// tool `slow`; by ending the whole stream (with an error) for tool `end`; never, for a
    /// call's rows.
    #[derive(Default)]
    struct FakeGate {
        streams: Arc<AtomicUsize>,
    }

    #[tonic::async_trait]
    impl ExecutorGate for FakeGate {
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
        calls.stream.waiting()
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
        let callers: Vec<_> = (0..crate::transport::messages::MAX_WAITING + 150)
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
