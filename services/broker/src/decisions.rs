//! The broker's `Gate.Decide` calls as messages on one stream it keeps open to the gate
//! (`Gate.Decisions`, see `glovebox_proto::transport::messages`), instead of an HTTP/2 stream per
//! decision: a client tool's or a pack tool's (a built-in tool's call is decided by its executor,
//! which asks the gate itself). A decision the broker gives up on is forgotten; the gate makes
//! and audits it all the same, as it would a `Decide` whose caller went away. The broker's waits
//! for answers the gate hands over (`Gate.Deliveries`) are messages on a stream of their own.

use glovebox_proto::transport::Link;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use glovebox_proto::transport::link::{DuplexReceiver, DuplexSender};
use glovebox_proto::transport::messages::{Decisions, MessageClient, status_of};
use glovebox_proto::v1::{self as pb, decide_answer::Body as Answer};
use tokio::sync::oneshot;
use tonic::Status;
use tracing::Instrument;

/// The stream of decisions to the gate. Cheap to clone; clones share the stream.
#[derive(Clone)]
pub struct GateDecisions {
    stream: MessageClient<Decisions>,
}

impl GateDecisions {
    pub fn new(link: Link) -> GateDecisions {
        GateDecisions {
            stream: MessageClient::new(link),
        }
    }

    /// `Gate.Decide`, as a message on the stream.
    pub async fn decide(&self, request: pb::DecideRequest) -> Result<pb::DecideResponse, Status> {
        let (span, trace) =
            glovebox_telemetry::propagation::message_client_span("glovebox.v1.Gate", "Decide");
        let answer = self
            .stream
            .call(|id| pb::DecideCall {
                id,
                trace,
                decide: Some(request),
            })
            .instrument(span)
            .await?;
        match answer.body {
            Some(Answer::Decided(decided)) => Ok(decided),
            Some(Answer::Error(status)) => Err(status_of(status)),
            None => Err(Status::internal("the gate sent an empty answer")),
        }
    }
}

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
    /// The calls expecting their answers, by call id.
    expecting: Mutex<HashMap<String, Expecting>>,
    streams: AtomicU64,
}

struct Expecting {
    account: String,
    /// The stream the answer is to come on.
    stream: u64,
    answer: oneshot::Sender<pb::Delivered>,
}

struct Opened {
    serial: u64,
    ended: Arc<AtomicBool>,
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
                expecting: Mutex::new(HashMap::new()),
                streams: AtomicU64::new(0),
            }),
        }
    }

    /// Expects the answer of `account`'s call `call_id` from the gate; `None` when the gate's
    /// stream cannot be opened (the executor then answers the call).
    pub async fn expect(&self, account: &str, call_id: &str) -> Option<Expected> {
        let serial = self.stream().await.ok()?;
        let (tx, answer) = oneshot::channel();
        let mut expecting = lock(&self.shared.expecting);
        if expecting.contains_key(call_id) {
            return None;
        }
        expecting.insert(
            call_id.to_owned(),
            Expecting {
                account: account.to_owned(),
                stream: serial,
                answer: tx,
            },
        );
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
            && !o.ended.load(Ordering::Acquire)
        {
            return Ok(o.serial);
        }
        *open = None;
        let (sender, receiver) = self.shared.link.untraced().open_duplex(PATH).await?;
        let serial = self.shared.streams.fetch_add(1, Ordering::Relaxed);
        let ended = Arc::new(AtomicBool::new(false));
        tokio::spawn(read_handed(
            Arc::clone(&self.shared),
            serial,
            Arc::clone(&ended),
            receiver,
        ));
        *open = Some(Opened {
            serial,
            ended,
            _sender: sender,
        });
        Ok(serial)
    }
}

const PATH: &str = "/glovebox.v1.Gate/Deliveries";

/// Hands each answer to the call expecting it, if it is of that call's account, until the stream
/// ends; then the calls expecting answers on it get none.
async fn read_handed(
    shared: Arc<Shared>,
    serial: u64,
    ended: Arc<AtomicBool>,
    mut receiver: DuplexReceiver,
) {
    while let Ok(Some(delivered)) = receiver.next::<pb::Delivered>().await {
        let mut expecting = lock(&shared.expecting);
        if expecting
            .get(&delivered.call_id)
            .is_some_and(|e| e.account == delivered.account && e.stream == serial)
            && let Some(e) = expecting.remove(&delivered.call_id)
        {
            let _ = e.answer.send(delivered);
        }
    }
    ended.store(true, Ordering::Release);
    lock(&shared.expecting).retain(|_, e| e.stream != serial);
}

impl Expected {
    /// The answer, once the gate hands it over; `None` if it never will on this stream.
    pub async fn received(&mut self) -> Option<pb::Delivered> {
        (&mut self.answer).await.ok()
    }
}

impl Drop for Expected {
    fn drop(&mut self) {
        lock(&self.shared.expecting).remove(&self.call_id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
