//! The answers of reads the executor made ahead of their verdicts, which the gate hands to the
//! broker itself once it has allowed and audited them (`Gate.Deliveries`): one hand-off fewer
//! than back through the executor. The broker keeps one stream open, sends nothing on it, and
//! hands each answer that comes to the call expecting it, if it is of that call's account
//! ([`GateDeliveries`]); a whole-file read takes its answer from whichever of the gate and the
//! executor tells it first ([`run_or_delivered`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use glovebox_config::AccountId;
use glovebox_proto::transport::Link;
use glovebox_proto::transport::link::{DuplexReceiver, DuplexSender};
use glovebox_proto::transport::messages::AnsweredElsewhere;
use glovebox_proto::v1 as pb;
use tokio::sync::oneshot;
use tonic::Status;

/// The answers of reads made ahead of their verdicts that the gate hands over itself once it has
/// allowed and audited them (`Gate.Deliveries`): one stream, opened on first use and again after
/// it ends, whose reader hands each answer to the call expecting it. Cheap to clone.
#[derive(Clone)]
pub struct GateDeliveries {
    shared: Arc<Shared>,
}

struct Shared {
    link: Link,
    /// The stream open now, if any (or one that ended, to be replaced).
    open: tokio::sync::Mutex<Option<Opened>>,
    expecting: Mutex<Expectations>,
    streams: AtomicU64,
}

/// The calls expecting their answers, by call id, and which streams have ended: checked under
/// one lock, so no call is left expecting an answer on a stream whose reader has already gone.
#[derive(Default)]
struct Expectations {
    by_call: HashMap<String, Expecting>,
    /// Every stream with a lower serial has ended.
    ended_below: u64,
}

impl Expectations {
    /// Expects `account`'s call `call_id` on stream `serial`; `None` if that stream has ended or
    /// the call is already expected.
    fn insert(
        &mut self,
        account: &AccountId,
        call_id: &str,
        serial: u64,
    ) -> Option<oneshot::Receiver<pb::Delivered>> {
        if serial < self.ended_below || self.by_call.contains_key(call_id) {
            return None;
        }
        let (answer, received) = oneshot::channel();
        let expecting = Expecting {
            account: account.to_owned(),
            stream: serial,
            answer,
        };
        self.by_call.insert(call_id.to_owned(), expecting);
        Some(received)
    }

    /// The call expecting `delivered`, come on stream `serial`, if it is of that call's account.
    fn take(&mut self, delivered: &pb::Delivered, serial: u64) -> Option<Expecting> {
        self.by_call
            .get(&delivered.call_id)
            .is_some_and(|e| e.account == delivered.account && e.stream == serial)
            .then(|| self.by_call.remove(&delivered.call_id))
            .flatten()
    }

    /// Stream `serial` ended: the calls expecting answers on it get none.
    fn end(&mut self, serial: u64) {
        self.ended_below = self.ended_below.max(serial + 1);
        self.by_call.retain(|_, e| e.stream != serial);
    }
}

struct Expecting {
    account: AccountId,
    /// The stream the answer is to come on.
    stream: u64,
    answer: oneshot::Sender<pb::Delivered>,
}

struct Opened {
    serial: u64,
    /// Ends with the stream.
    reader: tokio::task::JoinHandle<()>,
    /// Nothing is sent; dropped, it ends the stream.
    _sender: DuplexSender,
}

/// A call's expectation of its answer from the gate; dropped, it is forgotten.
pub struct Expected {
    shared: Arc<Shared>,
    call_id: String,
    answer: oneshot::Receiver<pb::Delivered>,
}

impl GateDeliveries {
    pub fn new(link: Link) -> GateDeliveries {
        GateDeliveries {
            shared: Arc::new(Shared {
                link,
                open: tokio::sync::Mutex::new(None),
                expecting: Mutex::new(Expectations::default()),
                streams: AtomicU64::new(0),
            }),
        }
    }

    /// Expects the answer of `account`'s call `call_id` from the gate; `None` when the gate's
    /// stream cannot be opened (the executor then answers the call).
    pub async fn expect(&self, account: &AccountId, call_id: &str) -> Option<Expected> {
        let serial = self.stream().await.ok()?;
        let answer = lock(&self.shared.expecting).insert(account, call_id, serial)?;
        Some(Expected {
            shared: Arc::clone(&self.shared),
            call_id: call_id.to_owned(),
            answer,
        })
    }

    /// The serial of the stream open now, opened (and its reader started) if there is none or
    /// it ended.
    async fn stream(&self) -> Result<u64, Status> {
        let mut open = self.shared.open.lock().await;
        if let Some(o) = open.as_ref()
            && !o.reader.is_finished()
        {
            return Ok(o.serial);
        }
        *open = None;
        let (sender, receiver) = self.shared.link.untraced().open_duplex(PATH).await?;
        let serial = self.shared.streams.fetch_add(1, Ordering::Relaxed);
        let reader = tokio::spawn(read_handed(Arc::clone(&self.shared), serial, receiver));
        *open = Some(Opened {
            serial,
            reader,
            _sender: sender,
        });
        Ok(serial)
    }
}

const PATH: &str = "/glovebox.v1.Gate/Deliveries";

/// Hands each answer to the call expecting it, if it is of that call's account, until the stream
/// ends; then the calls expecting answers on it get none.
async fn read_handed(shared: Arc<Shared>, serial: u64, mut receiver: DuplexReceiver) {
    while let Ok(Some(delivered)) = receiver.next::<pb::Delivered>().await {
        let expecting = lock(&shared.expecting).take(&delivered, serial);
        if let Some(e) = expecting {
            let _ = e.answer.send(delivered);
        }
    }
    lock(&shared.expecting).end(serial);
}

impl Expected {
    /// The answer, once the gate hands it over; `None` if it never will on this stream.
    pub async fn received(&mut self) -> Option<pb::Delivered> {
        (&mut self.answer).await.ok()
    }
}

impl Drop for Expected {
    fn drop(&mut self) {
        lock(&self.shared.expecting).by_call.remove(&self.call_id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The answer to a run (`Executor.Runs`) whose read the gate may hand over (`Gate.Deliveries`): whichever of the
/// executor's answer (`running`, made with `elsewhere`) and the gate's tells it first. Handed
/// over by the gate, the run is forgotten without a cancel: the executor, told by the gate, sends
/// no answer and stops nothing. If the gate's stream ends first, the call fails at once: whether
/// the gate had handed its answer to that stream cannot be told, and if it had, no answer comes
/// from the executor either (a read in flight then is `Unavailable`, to be made again).
pub async fn run_or_delivered(
    running: impl Future<Output = Result<pb::RunResponse, tonic::Status>>,
    mut expected: Expected,
    elsewhere: &AnsweredElsewhere,
) -> Result<pb::RunResponse, tonic::Status> {
    let from_gate = |d: pb::Delivered| pb::RunResponse {
        decision: d.decision,
        executed: d.executed,
        delivered: true,
        ..Default::default()
    };
    let lost = || {
        tonic::Status::unavailable(
            "the gate's stream of handed-over answers ended before this call's answer came",
        )
    };
    let mut running = std::pin::pin!(running);
    tokio::select! {
        biased;
        handed = expected.received() => match handed {
            Some(delivered) => {
                elsewhere.set();
                Ok(from_gate(delivered))
            }
            None => Err(lost()),
        },
        // The gate did not hand it over: an executor sends no answer to a call it did, and one
        // that claims the gate did, with nothing from the gate, is refused.
        ran = &mut running => match ran? {
            ran if ran.delivered => Err(tonic::Status::internal(
                "the executor said the gate handed over an answer the gate did not hand over",
            )),
            ran => Ok(ran),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glovebox_proto::transport::messages::AnswerStream;
    use glovebox_proto::transport::{
        ServerKeys, SocketKey, authenticated_channel, authenticated_incoming, bind_private_socket,
        default_allowed_uids,
    };
    use glovebox_proto::v1::gate_server::{Gate, GateServer};
    use std::time::Duration;
    use tokio::sync::mpsc;
    use tonic::{Request, Response};

    type Feed = mpsc::Sender<Result<pb::Delivered, Status>>;

    /// A gate that serves only `Deliveries`: the test writes what each stream opened carries.
    struct FakeGate {
        opened: mpsc::UnboundedSender<Feed>,
    }

    fn only_deliveries<T>() -> Result<Response<T>, Status> {
        Err(Status::unimplemented("only Deliveries"))
    }

    #[tonic::async_trait]
    impl Gate for FakeGate {
        type DecisionsStream = AnswerStream<pb::DecideAnswer>;
        async fn decisions(
            &self,
            _: Request<tonic::Streaming<pb::DecideCall>>,
        ) -> Result<Response<Self::DecisionsStream>, Status> {
            only_deliveries()
        }
        type DeliveriesStream = AnswerStream<pb::Delivered>;
        async fn deliveries(
            &self,
            _: Request<tonic::Streaming<pb::DeliveriesRequest>>,
        ) -> Result<Response<Self::DeliveriesStream>, Status> {
            let (feed, stream) = mpsc::channel(16);
            self.opened.send(feed).unwrap();
            Ok(Response::new(AnswerStream::new(stream)))
        }
        async fn resolve(
            &self,
            _: Request<pb::ResolveRequest>,
        ) -> Result<Response<pb::ResolveResponse>, Status> {
            only_deliveries()
        }
        async fn health(
            &self,
            _: Request<pb::HealthRequest>,
        ) -> Result<Response<pb::HealthResponse>, Status> {
            only_deliveries()
        }
        async fn metrics(
            &self,
            _: Request<pb::MetricsRequest>,
        ) -> Result<Response<pb::MetricsResponse>, Status> {
            only_deliveries()
        }
        async fn account_info(
            &self,
            _: Request<pb::AccountInfoRequest>,
        ) -> Result<Response<pb::AccountInfoResponse>, Status> {
            only_deliveries()
        }
        async fn set_enabled(
            &self,
            _: Request<pb::SetEnabledRequest>,
        ) -> Result<Response<pb::SetEnabledResponse>, Status> {
            only_deliveries()
        }
        async fn resolve_trust(
            &self,
            _: Request<pb::ResolveTrustRequest>,
        ) -> Result<Response<pb::ResolveTrustResponse>, Status> {
            only_deliveries()
        }
        async fn agent_token(
            &self,
            _: Request<pb::AgentTokenRequest>,
        ) -> Result<Response<pb::AgentTokenResponse>, Status> {
            only_deliveries()
        }
    }

    /// A fake gate's socket, the broker's deliveries from it, and each stream it opens.
    async fn fake_gate(dir: &std::path::Path) -> (GateDeliveries, mpsc::UnboundedReceiver<Feed>) {
        let path = dir.join("gate.sock");
        let listener = bind_private_socket(&path).unwrap();
        let key = SocketKey::derive(b"test control key", "gate", "broker");
        let keys = ServerKeys::new([("broker".to_owned(), key.clone())]);
        let (opened, streams) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let incoming = authenticated_incoming(listener, default_allowed_uids(), keys);
            let _ = tonic::transport::Server::builder()
                .add_service(GateServer::new(FakeGate { opened }))
                .serve_with_incoming(incoming)
                .await;
        });
        let link = authenticated_channel(&path, "broker", key);
        (GateDeliveries::new(link), streams)
    }

    fn handed(account: &AccountId, call_id: &str, text: &str) -> pb::Delivered {
        pb::Delivered {
            account: account.to_string(),
            call_id: call_id.into(),
            decision: Some(pb::DecideResponse {
                verdict: pb::Verdict::Allow as i32,
                ..Default::default()
            }),
            executed: Some(pb::ExecuteResponse {
                result_json: text.into(),
                ..Default::default()
            }),
        }
    }

    fn ran(text: &str) -> Result<pb::RunResponse, Status> {
        Ok(pb::RunResponse {
            executed: Some(pb::ExecuteResponse {
                result_json: text.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn text_of(answer: &pb::RunResponse) -> &str {
        &answer.executed.as_ref().unwrap().result_json
    }

    #[test]
    fn no_call_expects_an_answer_on_a_stream_that_has_ended() {
        let mut e = Expectations::default();
        let mut waiting = e.insert(&"alice".parse().unwrap(), "c1", 0).unwrap();
        // The reader of stream 0 ends between a call learning its serial and expecting on it.
        e.end(0);
        assert!(waiting.try_recv().is_err(), "told it gets nothing");
        assert!(e.insert(&"alice".parse().unwrap(), "c2", 0).is_none());
        assert!(e.by_call.is_empty());
        // The next stream takes expectations, one per call.
        assert!(e.insert(&"alice".parse().unwrap(), "c2", 1).is_some());
        assert!(e.insert(&"alice".parse().unwrap(), "c2", 1).is_none());
        // An answer is taken only from the stream and for the account expected.
        let answer = handed(&"bob".parse().unwrap(), "c2", "");
        assert!(e.take(&answer, 1).is_none());
        let answer = handed(&"alice".parse().unwrap(), "c2", "");
        assert!(e.take(&answer, 0).is_none());
        assert!(e.take(&answer, 1).is_some());
        assert!(e.take(&answer, 1).is_none());
    }

    #[tokio::test]
    async fn an_answer_goes_only_to_the_call_of_its_account_expecting_it() {
        let dir = tempfile::tempdir().unwrap();
        let (deliveries, mut streams) = fake_gate(dir.path()).await;
        let mut expected = deliveries
            .expect(&"alice".parse().unwrap(), "c1")
            .await
            .unwrap();
        let feed = streams.recv().await.unwrap();
        // One expectation per call.
        assert!(
            deliveries
                .expect(&"alice".parse().unwrap(), "c1")
                .await
                .is_none()
        );
        // Another account's answer for the call, and an answer nobody expects, are not taken.
        for other in [
            handed(&"bob".parse().unwrap(), "c1", "bob's"),
            handed(&"alice".parse().unwrap(), "c2", "c2"),
        ] {
            feed.send(Ok(other)).await.unwrap();
        }
        feed.send(Ok(handed(&"alice".parse().unwrap(), "c1", "mine")))
            .await
            .unwrap();
        let got = expected.received().await.unwrap();
        assert_eq!(got.executed.unwrap().result_json, "mine");
        // One stream serves every call.
        drop(expected);
        let _again = deliveries
            .expect(&"alice".parse().unwrap(), "c1")
            .await
            .unwrap();
        assert!(streams.try_recv().is_err());
    }

    #[tokio::test]
    async fn a_read_takes_the_first_answer_and_fails_if_a_handed_answer_is_lost() {
        let dir = tempfile::tempdir().unwrap();
        let (deliveries, mut streams) = fake_gate(dir.path()).await;

        // The gate hands the answer over; the executor, told so, never answers. The run is
        // marked answered elsewhere, so dropping it cancels nothing at the executor.
        let expected = deliveries
            .expect(&"alice".parse().unwrap(), "first")
            .await
            .unwrap();
        let feed = streams.recv().await.unwrap();
        feed.send(Ok(handed(
            &"alice".parse().unwrap(),
            "first",
            "from the gate",
        )))
        .await
        .unwrap();
        let elsewhere = AnsweredElsewhere::default();
        let silent = std::future::pending();
        let answer = run_or_delivered(silent, expected, &elsewhere)
            .await
            .unwrap();
        assert_eq!(
            (text_of(&answer), answer.delivered),
            ("from the gate", true)
        );
        assert!(elsewhere.is_set());

        // The executor answers itself: its answer is taken, the expectation forgotten, and the
        // run is not marked answered elsewhere.
        let expected = deliveries
            .expect(&"alice".parse().unwrap(), "second")
            .await
            .unwrap();
        let elsewhere = AnsweredElsewhere::default();
        let answer = run_or_delivered(async { ran("from the executor") }, expected, &elsewhere)
            .await
            .unwrap();
        assert_eq!(
            (text_of(&answer), answer.delivered),
            ("from the executor", false)
        );
        assert!(!elsewhere.is_set());
        assert!(
            deliveries
                .expect(&"alice".parse().unwrap(), "second")
                .await
                .is_some()
        );

        // A hostile executor claims the gate handed the answer over, which it did not: the call
        // fails rather than pass on an answer with no verdict.
        let expected = deliveries
            .expect(&"alice".parse().unwrap(), "claimed")
            .await
            .unwrap();
        let claim = async {
            Ok(pb::RunResponse {
                delivered: true,
                ..Default::default()
            })
        };
        let e = run_or_delivered(claim, expected, &Default::default())
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Internal, "{e:?}");

        // The gate's stream ends while a read waits, its executor silent: the call fails at
        // once rather than wait for an answer that will not come.
        let expected = deliveries
            .expect(&"alice".parse().unwrap(), "third")
            .await
            .unwrap();
        drop(feed);
        let e = tokio::time::timeout(
            Duration::from_secs(10),
            run_or_delivered(std::future::pending(), expected, &Default::default()),
        )
        .await
        .expect("failed at once")
        .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
        assert!(e.message().contains("ended before"), "{e:?}");
        // The next call opens the stream again.
        let _fourth = deliveries
            .expect(&"alice".parse().unwrap(), "fourth")
            .await
            .unwrap();
        assert!(streams.recv().await.is_some());
    }
}
