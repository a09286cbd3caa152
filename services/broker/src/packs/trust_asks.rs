//! The trust asks the broker has queued or shown ([`TrustAsks`], part of the broker's state):
//! one per (account, pack trust key) at a time, and the answers recorded lately.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use glovebox_config::AccountId;
use glovebox_proto::v1::TrustSubject;

use crate::sync::lock;

/// Trust asks waiting to be shown, at most.
pub const MAX_QUEUED_TRUST_ASKS: usize = 64;

pub(crate) type TrustJob = (AccountId, TrustSubject);

/// The trust asks the broker has queued or shown: one per (account, pack trust key) at a time.
/// A pack answered about is not asked about again on a listing made before the answer was
/// recorded: the pack host may have listed it untrusted just before, and the approver would be
/// asked the question just answered.
pub struct TrustAsks {
    queued: Mutex<HashSet<(AccountId, String)>>,
    /// When each question's answer was recorded at the gate, for as long as a listing made
    /// before it can still be coming back ([`ANSWER_REMEMBERED`]).
    answered: Mutex<HashMap<(AccountId, String), Instant>>,
    tx: tokio::sync::mpsc::Sender<TrustJob>,
    pub(crate) rx: Mutex<Option<tokio::sync::mpsc::Receiver<TrustJob>>>,
}

/// How long an answer is remembered against stale listings: longer than a listing can take.
const ANSWER_REMEMBERED: Duration = crate::backends::BACKEND_TIMEOUT;

impl Default for TrustAsks {
    fn default() -> TrustAsks {
        let (tx, rx) = tokio::sync::mpsc::channel(MAX_QUEUED_TRUST_ASKS);
        TrustAsks {
            queued: Mutex::new(HashSet::new()),
            answered: Mutex::new(HashMap::new()),
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }
}

fn trust_ask_key(account: &AccountId, subject: &TrustSubject) -> (AccountId, String) {
    (account.clone(), glovebox_proto::packs::trust_key(subject))
}

impl TrustAsks {
    /// Queues a trust ask for `subject`, which a listing begun at `listed_at` found untrusted;
    /// not if one is queued or shown, or if its answer was recorded since `listed_at`.
    pub(crate) fn request(&self, account: &AccountId, subject: TrustSubject, listed_at: Instant) {
        let key = trust_ask_key(account, &subject);
        if lock(&self.answered)
            .get(&key)
            .is_some_and(|at| *at >= listed_at)
        {
            return;
        }
        if !lock(&self.queued).insert(key.clone()) {
            return;
        }
        if self.tx.try_send((account.clone(), subject)).is_err() {
            lock(&self.queued).remove(&key);
        }
    }

    /// The ask for `subject` is over; `recorded`: its answer was recorded at the gate.
    pub(crate) fn done(&self, account: &AccountId, subject: &TrustSubject, recorded: bool) {
        let key = trust_ask_key(account, subject);
        if recorded {
            let now = Instant::now();
            let mut answered = lock(&self.answered);
            answered.retain(|_, at| now.duration_since(*at) < ANSWER_REMEMBERED);
            answered.insert(key.clone(), now);
        }
        lock(&self.queued).remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trust asks, what they queue, and a pack to ask about.
    fn trust_asks() -> (
        TrustAsks,
        tokio::sync::mpsc::Receiver<TrustJob>,
        TrustSubject,
    ) {
        let asks = TrustAsks::default();
        let rx = lock(&asks.rx).take().unwrap();
        let pack = TrustSubject {
            pack: "p".into(),
            ..Default::default()
        };
        (asks, rx, pack)
    }

    #[test]
    fn trust_asks_are_queued_once_per_pack_until_done() {
        let (asks, mut rx, s) = trust_asks();
        let listed = Instant::now();
        asks.request(&"a".parse().unwrap(), s.clone(), listed);
        asks.request(&"a".parse().unwrap(), s.clone(), listed);
        asks.request(&"b".parse().unwrap(), s.clone(), listed);
        assert_eq!(rx.try_recv().unwrap().0, "a");
        assert_eq!(rx.try_recv().unwrap().0, "b");
        assert!(rx.try_recv().is_err());
        // Over without an answer recorded (nobody to ask): asked about again at once.
        asks.done(&"a".parse().unwrap(), &s, false);
        asks.request(&"a".parse().unwrap(), s.clone(), listed);
        assert_eq!(rx.try_recv().unwrap().0, "a");
    }

    #[test]
    fn a_listing_made_before_an_answer_does_not_ask_the_question_again() {
        let (asks, mut rx, s) = trust_asks();
        let before = Instant::now();
        asks.request(&"a".parse().unwrap(), s.clone(), before);
        assert_eq!(rx.try_recv().unwrap().0, "a");
        asks.done(&"a".parse().unwrap(), &s, true);
        // The pack host listed it untrusted just before the answer was recorded.
        asks.request(&"a".parse().unwrap(), s.clone(), before);
        assert!(
            rx.try_recv().is_err(),
            "the question just answered was asked again"
        );
        // Another account's listing is its own.
        asks.request(&"b".parse().unwrap(), s.clone(), before);
        assert_eq!(rx.try_recv().unwrap().0, "b");
        // Listed untrusted after the answer (the trust was taken back): asked again.
        asks.request(&"a".parse().unwrap(), s, Instant::now());
        assert_eq!(rx.try_recv().unwrap().0, "a");
    }
}
