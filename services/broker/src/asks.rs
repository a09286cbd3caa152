//! Asks: routing a call that needs approval to its account's approver connections.
//!
//! One ask at a time per account (later asks wait their turn, up to a queue cap); no approver
//! connected means an immediate "no approver"; no answer within the ask timeout means "timeout";
//! the last approver disconnecting ends the pending ask. Every approver of the account sees each
//! ask, and all but the one that answered are told when it closes. Routing is keyed by the account
//! the connections authenticated as, never by anything in a frame.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::Message;
use glovebox_config::AccountId;
use glovebox_proto::ids::new_id;
use glovebox_proto::ws::{Decision, ServerFrame};
use tokio::sync::{mpsc, oneshot};

/// Asks that may wait for their turn, per account.
pub const MAX_WAITING_ASKS: usize = 16;

/// How an ask ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskOutcome {
    Answered(Decision),
    Timeout,
    NoApprover,
    /// Every approver disconnected while the ask was pending.
    ApproverGone,
    /// Too many asks are already waiting for this account.
    Busy,
    /// The agent withdrew the call.
    Cancelled,
}

struct Pending {
    ask_id: String,
    /// Its preview was cut: allowing it needs the answer's `confirm_cut`.
    preview_cut: bool,
    /// The outcome, and the approver connection that answered (if one did).
    reply: oneshot::Sender<(AskOutcome, Option<u64>)>,
}

#[derive(Default)]
struct AccountAsks {
    approvers: HashMap<u64, mpsc::Sender<Message>>,
    turn: Arc<tokio::sync::Mutex<()>>,
    waiting: usize,
    pending: Option<Pending>,
    /// Calls of this account in flight, for activity events.
    in_flight: usize,
}

/// The ask state of every account.
pub struct Asks {
    accounts: Mutex<HashMap<AccountId, AccountAsks>>,
    timeout: Duration,
    max_waiting: usize,
}

impl Asks {
    pub fn new(timeout: Duration, max_waiting: usize) -> Asks {
        Asks {
            accounts: Mutex::new(HashMap::new()),
            timeout,
            max_waiting,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<AccountId, AccountAsks>> {
        crate::sync::lock(&self.accounts)
    }

    pub fn add_approver(&self, account: &AccountId, conn: u64, tx: mpsc::Sender<Message>) {
        let new = self
            .lock()
            .entry(account.to_owned())
            .or_default()
            .approvers
            .insert(conn, tx)
            .is_none();
        if new {
            glovebox_telemetry::metrics::broker().approver_connections(1);
        }
    }

    /// Removes an approver; if it was the last one, the pending ask ends as `ApproverGone`.
    pub fn remove_approver(&self, account: &AccountId, conn: u64) {
        let mut accounts = self.lock();
        if let Some(a) = accounts.get_mut(account) {
            if a.approvers.remove(&conn).is_some() {
                glovebox_telemetry::metrics::broker().approver_connections(-1);
            }
            if a.approvers.is_empty()
                && let Some(p) = a.pending.take()
            {
                let _ = p.reply.send((AskOutcome::ApproverGone, None));
            }
        }
    }

    /// Counts a call starting (`true`) or ending (`false`) and tells the account's approvers when
    /// the account goes from idle to busy or back.
    pub fn activity(&self, account: &AccountId, starting: bool) {
        let (changed, approvers) = {
            let mut accounts = self.lock();
            let a = accounts.entry(account.to_owned()).or_default();
            let before = a.in_flight;
            a.in_flight = if starting {
                before + 1
            } else {
                before.saturating_sub(1)
            };
            let changed = (before == 0) != (a.in_flight == 0);
            (
                changed.then_some(a.in_flight > 0),
                a.approvers.values().cloned().collect::<Vec<_>>(),
            )
        };
        if let Some(active) = changed {
            let frame = ServerFrame::Activity {
                account: account.to_string(),
                active,
            }
            .to_json();
            for tx in approvers {
                // Activity is advisory: a full outbox drops it rather than slowing calls.
                let _ = tx.try_send(Message::Text(frame.clone().into()));
            }
        }
    }

    pub fn approver_count(&self, account: &AccountId) -> usize {
        self.lock().get(account).map_or(0, |a| a.approvers.len())
    }

    /// Whether a call of the account is in flight.
    pub fn is_active(&self, account: &AccountId) -> bool {
        self.lock().get(account).is_some_and(|a| a.in_flight > 0)
    }

    /// Delivers the answer of approver connection `by`; the account's other approvers are told
    /// the ask closed (`answered`). Refused, with the ask left pending, when `ask_id` is not this
    /// account's pending ask or when it allows an ask whose preview was cut without
    /// `confirm_cut`.
    pub fn answer(
        &self,
        account: &AccountId,
        by: u64,
        ask_id: &str,
        decision: Decision,
        confirm_cut: bool,
    ) -> Result<(), AnswerRefused> {
        let mut accounts = self.lock();
        let a = accounts.get_mut(account).ok_or(AnswerRefused::NotPending)?;
        match &a.pending {
            Some(p) if p.ask_id == ask_id => {
                if p.preview_cut && decision != Decision::Deny && !confirm_cut {
                    return Err(AnswerRefused::CutNotConfirmed);
                }
            }
            _ => return Err(AnswerRefused::NotPending),
        }
        let pending = a.pending.take().ok_or(AnswerRefused::NotPending)?;
        pending
            .reply
            .send((AskOutcome::Answered(decision), Some(by)))
            .map_err(|_| AnswerRefused::NotPending)
    }

    /// Asks the account's approvers; `frame` builds the ask frame from the ask id. `cancelled`
    /// completes when the caller withdraws the call (waiting for its turn or for an answer).
    pub async fn ask(
        &self,
        account: &AccountId,
        frame: impl FnOnce(&str, u64) -> ServerFrame,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> AskOutcome {
        tokio::pin!(cancelled);
        let turn = {
            let mut accounts = self.lock();
            let a = accounts.entry(account.to_owned()).or_default();
            if a.approvers.is_empty() {
                return AskOutcome::NoApprover;
            }
            if a.waiting >= self.max_waiting {
                return AskOutcome::Busy;
            }
            a.waiting += 1;
            a.turn.clone()
        };
        let turn = tokio::select! {
            guard = turn.lock() => Some(guard),
            _ = &mut cancelled => None,
        };
        let ask_id = new_id("ask");
        let frame = frame(&ask_id, self.timeout.as_millis() as u64);
        let preview_cut = matches!(
            frame,
            ServerFrame::Ask {
                preview_cut: true,
                ..
            }
        );
        let (reply, wait) = oneshot::channel();
        let approvers: Vec<mpsc::Sender<Message>> = {
            let mut accounts = self.lock();
            let a = accounts.entry(account.to_owned()).or_default();
            a.waiting = a.waiting.saturating_sub(1);
            if turn.is_none() {
                return AskOutcome::Cancelled;
            }
            if a.approvers.is_empty() {
                return AskOutcome::NoApprover;
            }
            a.pending = Some(Pending {
                ask_id: ask_id.clone(),
                preview_cut,
                reply,
            });
            a.approvers.values().cloned().collect()
        };
        let text = frame.to_json();
        for tx in &approvers {
            let _ = tx.send(Message::Text(text.clone().into())).await;
        }
        let (outcome, answered_by) = tokio::select! {
            answered = tokio::time::timeout(self.timeout, wait) => match answered {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(_)) => (AskOutcome::ApproverGone, None),
                Err(_) => (AskOutcome::Timeout, None),
            },
            _ = &mut cancelled => (AskOutcome::Cancelled, None),
        };
        self.close_elsewhere(account, &ask_id, &outcome, answered_by)
            .await;
        drop(turn);
        outcome
    }

    /// Ends the ask `ask_id` of `account`: it is no longer pending, and every approver but the
    /// one that answered (`answered_by`) stops showing it, told why.
    async fn close_elsewhere(
        &self,
        account: &AccountId,
        ask_id: &str,
        outcome: &AskOutcome,
        answered_by: Option<u64>,
    ) {
        let remaining: Vec<(u64, mpsc::Sender<Message>)> = {
            let mut accounts = self.lock();
            match accounts.get_mut(account) {
                Some(a) => {
                    if a.pending.as_ref().is_some_and(|p| p.ask_id == ask_id) {
                        a.pending = None;
                    }
                    a.approvers.iter().map(|(k, tx)| (*k, tx.clone())).collect()
                }
                None => Vec::new(),
            }
        };
        let reason = match outcome {
            AskOutcome::Answered(_) => "answered",
            AskOutcome::Timeout => "timeout",
            AskOutcome::Cancelled => "withdrawn",
            _ => "closed",
        };
        let closed = ServerFrame::AskClosed {
            ask_id: ask_id.to_owned(),
            reason: reason.to_owned(),
        }
        .to_json();
        for (key, tx) in remaining {
            if Some(key) != answered_by {
                let _ = tx.send(Message::Text(closed.clone().into())).await;
            }
        }
    }
}

/// Why an answer was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerRefused {
    /// The ask is not this account's pending ask (answered, closed or never made).
    NotPending,
    /// It allows an ask whose preview was cut without saying the approver confirmed that.
    CutNotConfirmed,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ask_id: &str, ms: u64) -> ServerFrame {
        ServerFrame::Ask {
            ask_id: ask_id.to_owned(),
            call_id: "c".into(),
            account: "a".into(),
            connection_id: "conn".into(),
            tool: "file_write".into(),
            subjects: vec![],
            preview: String::new(),
            expires_in_ms: ms,
            display: glovebox_proto::ws::AskDisplay::of("file_write", &[], "").0,
            warning: None,
            preview_cut: false,
        }
    }

    /// An ask of account `a` on its own task, never withdrawn.
    fn spawn_ask(asks: &Arc<Asks>) -> tokio::task::JoinHandle<AskOutcome> {
        let asks = asks.clone();
        tokio::spawn(async move {
            asks.ask(&"a".parse().unwrap(), frame, std::future::pending())
                .await
        })
    }

    async fn next_ask_id(rx: &mut mpsc::Receiver<Message>) -> String {
        let Some(Message::Text(t)) = rx.recv().await else {
            panic!("no ask frame")
        };
        let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
        v["ask_id"].as_str().unwrap().to_owned()
    }

    #[tokio::test]
    async fn no_approver_is_immediate() {
        let asks = Asks::new(Duration::from_secs(25), 4);
        assert_eq!(
            asks.ask(&"a".parse().unwrap(), frame, std::future::pending())
                .await,
            AskOutcome::NoApprover
        );
    }

    #[tokio::test]
    async fn answer_reaches_the_pending_ask_only_for_its_account() {
        let asks = Arc::new(Asks::new(Duration::from_secs(25), 4));
        let (tx, mut rx) = mpsc::channel(8);
        asks.add_approver(&"a".parse().unwrap(), 1, tx);
        let task = spawn_ask(&asks);
        let id = next_ask_id(&mut rx).await;
        assert!(
            asks.answer(&"b".parse().unwrap(), 1, &id, Decision::Once, false)
                .is_err(),
            "another account cannot answer"
        );
        assert!(
            asks.answer(
                &"a".parse().unwrap(),
                1,
                "ask-unknown",
                Decision::Once,
                false
            )
            .is_err()
        );
        assert!(
            asks.answer(&"a".parse().unwrap(), 1, &id, Decision::Always, false)
                .is_ok()
        );
        assert_eq!(task.await.unwrap(), AskOutcome::Answered(Decision::Always));
        assert!(
            asks.answer(&"a".parse().unwrap(), 1, &id, Decision::Once, false)
                .is_err(),
            "an answered ask is gone"
        );
    }

    #[tokio::test]
    async fn allowing_a_cut_preview_needs_its_confirmation() {
        let asks = Arc::new(Asks::new(Duration::from_secs(25), 4));
        let (tx, mut rx) = mpsc::channel(8);
        asks.add_approver(&"a".parse().unwrap(), 1, tx);
        let cut = |id: &str, ms| {
            let mut f = frame(id, ms);
            if let ServerFrame::Ask { preview_cut, .. } = &mut f {
                *preview_cut = true;
            }
            f
        };
        let task = {
            let asks = asks.clone();
            tokio::spawn(async move {
                asks.ask(&"a".parse().unwrap(), cut, std::future::pending())
                    .await
            })
        };
        let id = next_ask_id(&mut rx).await;
        for decision in [Decision::Once, Decision::Always] {
            assert_eq!(
                asks.answer(&"a".parse().unwrap(), 1, &id, decision, false),
                Err(AnswerRefused::CutNotConfirmed)
            );
        }
        // still pending: the confirmed answer is taken
        assert_eq!(
            asks.answer(&"a".parse().unwrap(), 1, &id, Decision::Once, true),
            Ok(())
        );
        assert_eq!(task.await.unwrap(), AskOutcome::Answered(Decision::Once));
        // a deny needs no confirmation
        let task = {
            let asks = asks.clone();
            tokio::spawn(async move {
                asks.ask(&"a".parse().unwrap(), cut, std::future::pending())
                    .await
            })
        };
        let id = next_ask_id(&mut rx).await;
        assert_eq!(
            asks.answer(&"a".parse().unwrap(), 1, &id, Decision::Deny, false),
            Ok(())
        );
        assert_eq!(task.await.unwrap(), AskOutcome::Answered(Decision::Deny));
    }

    #[tokio::test(start_paused = true)]
    async fn unanswered_asks_time_out() {
        let asks = Asks::new(Duration::from_secs(25), 4);
        let (tx, _rx) = mpsc::channel(8);
        asks.add_approver(&"a".parse().unwrap(), 1, tx);
        assert_eq!(
            asks.ask(&"a".parse().unwrap(), frame, std::future::pending())
                .await,
            AskOutcome::Timeout
        );
    }

    #[tokio::test]
    async fn last_approver_leaving_ends_the_ask() {
        let asks = Arc::new(Asks::new(Duration::from_secs(25), 4));
        let (tx, mut rx) = mpsc::channel(8);
        asks.add_approver(&"a".parse().unwrap(), 1, tx);
        let task = spawn_ask(&asks);
        next_ask_id(&mut rx).await;
        asks.remove_approver(&"a".parse().unwrap(), 1);
        assert_eq!(task.await.unwrap(), AskOutcome::ApproverGone);
    }

    #[tokio::test]
    async fn one_ask_at_a_time_and_a_queue_cap() {
        let asks = Arc::new(Asks::new(Duration::from_secs(25), 1));
        let (tx, mut rx) = mpsc::channel(8);
        asks.add_approver(&"a".parse().unwrap(), 1, tx);
        let first = spawn_ask(&asks);
        let id1 = next_ask_id(&mut rx).await;
        let second = spawn_ask(&asks);
        tokio::task::yield_now().await;
        // the second waits its turn: no frame yet, and a third is refused as busy
        assert!(rx.try_recv().is_err());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            asks.ask(&"a".parse().unwrap(), frame, std::future::pending())
                .await,
            AskOutcome::Busy
        );
        assert!(
            asks.answer(&"a".parse().unwrap(), 1, &id1, Decision::Deny, false)
                .is_ok()
        );
        assert_eq!(first.await.unwrap(), AskOutcome::Answered(Decision::Deny));
        let id2 = next_ask_id(&mut rx).await;
        assert_ne!(id1, id2);
        assert!(
            asks.answer(&"a".parse().unwrap(), 1, &id2, Decision::Once, false)
                .is_ok()
        );
        assert_eq!(second.await.unwrap(), AskOutcome::Answered(Decision::Once));
    }

    #[tokio::test]
    async fn a_withdrawn_ask_frees_its_place_and_tells_the_approvers() {
        let asks = Arc::new(Asks::new(Duration::from_secs(25), 1));
        let (tx, mut rx) = mpsc::channel(8);
        asks.add_approver(&"a".parse().unwrap(), 1, tx);
        let first = spawn_ask(&asks);
        let id1 = next_ask_id(&mut rx).await;
        // a second ask waits its turn (the one waiting place), then is withdrawn while waiting
        let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
        let waiting = tokio::spawn({
            let asks = asks.clone();
            async move {
                asks.ask(&"a".parse().unwrap(), frame, async {
                    let _ = cancelled.await;
                })
                .await
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            asks.ask(&"a".parse().unwrap(), frame, std::future::pending())
                .await,
            AskOutcome::Busy
        );
        let _ = cancel.send(());
        assert_eq!(waiting.await.unwrap(), AskOutcome::Cancelled);
        // its waiting place is free again
        let third = spawn_ask(&asks);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            asks.answer(&"a".parse().unwrap(), 1, &id1, Decision::Deny, false)
                .is_ok()
        );
        assert_eq!(first.await.unwrap(), AskOutcome::Answered(Decision::Deny));
        let id3 = next_ask_id(&mut rx).await;
        assert!(
            asks.answer(&"a".parse().unwrap(), 1, &id3, Decision::Once, false)
                .is_ok()
        );
        assert_eq!(third.await.unwrap(), AskOutcome::Answered(Decision::Once));

        // withdrawn while shown: the approvers hear that it closed
        let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
        let shown = tokio::spawn({
            let asks = asks.clone();
            async move {
                asks.ask(&"a".parse().unwrap(), frame, async {
                    let _ = cancelled.await;
                })
                .await
            }
        });
        let id4 = next_ask_id(&mut rx).await;
        let _ = cancel.send(());
        assert_eq!(shown.await.unwrap(), AskOutcome::Cancelled);
        let Some(Message::Text(t)) = rx.recv().await else {
            panic!("no ask_closed frame")
        };
        let closed: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
        assert_eq!(closed["type"], "ask_closed");
        assert_eq!(closed["ask_id"], id4.as_str());
        assert_eq!(closed["reason"], "withdrawn");
        assert!(
            asks.answer(&"a".parse().unwrap(), 1, &id4, Decision::Once, false)
                .is_err(),
            "a withdrawn ask cannot be answered"
        );
    }

    #[tokio::test]
    async fn the_other_approvers_hear_that_an_ask_was_answered() {
        let asks = Arc::new(Asks::new(Duration::from_secs(25), 4));
        let (tx1, mut rx1) = mpsc::channel(8);
        let (tx2, mut rx2) = mpsc::channel(8);
        asks.add_approver(&"a".parse().unwrap(), 1, tx1);
        asks.add_approver(&"a".parse().unwrap(), 2, tx2);
        let task = spawn_ask(&asks);
        let id = next_ask_id(&mut rx1).await;
        assert_eq!(next_ask_id(&mut rx2).await, id);
        assert!(
            asks.answer(&"a".parse().unwrap(), 2, &id, Decision::Once, false)
                .is_ok()
        );
        assert_eq!(task.await.unwrap(), AskOutcome::Answered(Decision::Once));
        let Some(Message::Text(t)) = rx1.recv().await else {
            panic!("no ask_closed frame")
        };
        let closed: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
        assert_eq!(
            closed,
            serde_json::json!({"type": "ask_closed", "ask_id": id, "reason": "answered"})
        );
        assert!(
            rx2.try_recv().is_err(),
            "the approver that answered is not told"
        );
    }
}
