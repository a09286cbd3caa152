//! The answers of reads the executors made ahead of their verdicts, handed to the broker by the
//! gate (`Gate.Deliveries`). An executor sends such a read's outcome with its decide request
//! (`VouchedDecideRequest.deliver`) when the broker asked for it; once the gate has allowed the
//! call without asking and committed its rows, it hands the outcome to the broker itself,
//! instead of back through the executor: one hand-off fewer on the call's path. What was read
//! still goes to nobody before the gate's allow and the call's audit rows.
//!
//! The broker keeps one stream open and sends nothing on it; the gate writes each answer to the
//! latest stream opened ([`Outlet`]). An answer that cannot go (no stream, too many queued, or
//! one the broker's reader would refuse for its size, which would end the stream and every
//! other account's answers on it) is not handed over: the executor then answers the call as
//! before.

use std::sync::{Mutex, MutexGuard};

use glovebox_proto::transport::link::within_bound;
use glovebox_proto::transport::messages::MAX_IN_FLIGHT;
use glovebox_proto::v1 as pb;
use tokio::sync::mpsc;
use tonic::Status;

/// Answers queued for the broker at most (its calls in flight on one executor stream are
/// bounded alike).
pub const MAX_QUEUED: usize = MAX_IN_FLIGHT;

/// What the broker's stream reads.
pub type Handed = tokio_stream::wrappers::ReceiverStream<Result<pb::Delivered, Status>>;

/// Where answers go to the broker: its latest `Deliveries` stream, if one is open.
#[derive(Default)]
pub struct Outlet {
    open: Mutex<Option<Opened>>,
}

struct Opened {
    /// Tells this stream apart from a later one.
    serial: u64,
    sender: mpsc::Sender<Result<pb::Delivered, Status>>,
}

impl Outlet {
    /// A new stream to the broker, in place of the one before (which ends). Its serial is for
    /// [`Self::close`].
    pub fn open(&self) -> (u64, Handed) {
        let (sender, receiver) = mpsc::channel(MAX_QUEUED);
        let mut open = self.lock();
        let serial = open.as_ref().map_or(0, |o| o.serial + 1);
        *open = Some(Opened { serial, sender });
        (serial, Handed::new(receiver))
    }

    /// Ends stream `serial`, if it is still the open one (its broker went away, or the gate
    /// stops).
    pub fn close(&self, serial: u64) {
        let mut open = self.lock();
        if open.as_ref().map(|o| o.serial) == Some(serial) {
            *open = None;
        }
    }

    /// Hands `delivered` to the broker; whether it went (if not, the executor must tell it).
    pub fn hand_over(&self, delivered: pb::Delivered) -> bool {
        if within_bound(&delivered).is_err() {
            return false;
        }
        let went = self
            .lock()
            .as_ref()
            .is_some_and(|o| o.sender.try_send(Ok(delivered)).is_ok());
        if went {
            glovebox_telemetry::metrics::gate().answer_handed_over();
        }
        went
    }

    fn lock(&self) -> MutexGuard<'_, Option<Opened>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_stream::StreamExt;

    fn answer(call_id: &str) -> pb::Delivered {
        pb::Delivered {
            account: "alice".into(),
            call_id: call_id.into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn answers_go_to_the_latest_stream_and_none_without_one() {
        let outlet = Outlet::default();
        assert!(!outlet.hand_over(answer("before")));
        let (first, mut old) = outlet.open();
        assert!(outlet.hand_over(answer("c1")));
        assert_eq!(old.next().await.unwrap().unwrap().call_id, "c1");
        let (second, mut new) = outlet.open();
        // The stream before ends once replaced; answers go to the new one.
        assert!(old.next().await.is_none());
        assert!(outlet.hand_over(answer("c2")));
        assert_eq!(new.next().await.unwrap().unwrap().call_id, "c2");
        // Closing the old one again leaves the new one open.
        outlet.close(first);
        assert!(outlet.hand_over(answer("c3")));
        assert_eq!(new.next().await.unwrap().unwrap().call_id, "c3");
        outlet.close(second);
        assert!(!outlet.hand_over(answer("after")));
        assert!(new.next().await.is_none());
    }

    #[tokio::test]
    async fn a_broker_that_stopped_reading_gets_nothing_more_queued_than_the_bound() {
        let outlet = Outlet::default();
        let (_, stream) = outlet.open();
        for i in 0..MAX_QUEUED {
            assert!(outlet.hand_over(answer(&format!("c{i}"))), "{i}");
        }
        // Not handed over: the executor answers this call itself.
        assert!(!outlet.hand_over(answer("one more")));
        // A stream whose reader is gone takes nothing.
        drop(stream);
        assert!(!outlet.hand_over(answer("gone")));
    }

    #[tokio::test]
    async fn an_answer_the_broker_would_refuse_for_its_size_is_not_handed_over() {
        // An executor's answer as large as its own request may be: sent, it would end the
        // broker's stream, and every account's answers on it.
        let outlet = Outlet::default();
        let (_, mut stream) = outlet.open();
        let mut huge = answer("huge");
        huge.executed = Some(pb::ExecuteResponse {
            result_json: "x".repeat(glovebox_proto::transport::link::MAX_DUPLEX_MESSAGE),
            ..Default::default()
        });
        assert!(!outlet.hand_over(huge));
        // The stream goes on: the next answer is the first on it.
        assert!(outlet.hand_over(answer("next")));
        assert_eq!(stream.next().await.unwrap().unwrap().call_id, "next");
    }
}
