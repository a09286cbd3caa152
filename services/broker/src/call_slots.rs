//! Calls running at once per account, across all its connections and MCP sessions: a call past
//! the account's share waits in the broker (cheaply, cancellable, in the order it came) rather
//! than in the gate's and the executors' queues, where it would delay every other account's
//! calls.
//!
//! An account calling alone may run up to `calls_per_account` calls. While other accounts call
//! too (a call within [`ACTIVE_WINDOW`]), the machine is shared: each active account's share is
//! the machine's cores divided among them (at least one, at most `calls_per_account`), so one
//! account's flood leaves every other account a core's worth of the backends. Running calls are
//! never stopped; new ones wait for the share. A call waiting for a person (an ask) sets its
//! place aside while it waits ([`set_aside`]), so a pending approval never holds up the
//! account's other calls.
//!
//! The share is pure ([`share`]); [`CallSlots`] keeps the counts and the queues.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use glovebox_config::AccountId;
use tokio::sync::oneshot;

/// How long after its last call an account still counts as calling.
pub const ACTIVE_WINDOW: Duration = Duration::from_secs(5);

/// How many calls an account may run now: all `per_account` alone; with `active` accounts
/// calling, `contended_total` divided among them, at least one and at most `per_account`.
pub fn share(per_account: usize, contended_total: usize, active: usize) -> usize {
    if active <= 1 {
        per_account.max(1)
    } else {
        (contended_total / active).clamp(1, per_account.max(1))
    }
}

/// Each account's running calls and the calls waiting for a place.
#[derive(Debug)]
pub struct CallSlots {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    per_account: usize,
    contended_total: usize,
    accounts: Mutex<HashMap<AccountId, Account>>,
}

#[derive(Debug)]
struct Account {
    running: usize,
    waiting: VecDeque<oneshot::Sender<Permit>>,
    last_call: Instant,
}

/// One running call's place; given back (and the next waiting call let in) when dropped.
#[derive(Debug)]
pub struct Permit {
    inner: Arc<Inner>,
    account: AccountId,
}

impl CallSlots {
    /// `per_account` places per account alone; `contended_total` (the machine's cores) shared
    /// among the accounts calling at once.
    pub fn new(per_account: usize, contended_total: usize) -> CallSlots {
        CallSlots {
            inner: Arc::new(Inner {
                per_account: per_account.max(1),
                contended_total: contended_total.max(1),
                accounts: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Waits for one of `account`'s places; the call runs while the permit lives. (`None` only
    /// if the broker dropped the waiting call's place, which it does not: the call then fails
    /// closed.)
    pub async fn enter(&self, account: &AccountId) -> Option<Permit> {
        self.inner.enter(account).await
    }

    /// How many calls `account` runs now (for tests and health).
    pub fn running(&self, account: &AccountId) -> usize {
        crate::sync::lock(&self.inner.accounts)
            .get(account)
            .map_or(0, |a| a.running)
    }
}

impl Inner {
    async fn enter(self: &Arc<Self>, account: &AccountId) -> Option<Permit> {
        let now = Instant::now();
        let wait = {
            let mut accounts = crate::sync::lock(&self.accounts);
            let active = active_accounts(&accounts, account, now);
            let share = share(self.per_account, self.contended_total, active);
            let a = accounts.entry(account.to_owned()).or_insert(Account {
                running: 0,
                waiting: VecDeque::new(),
                last_call: now,
            });
            a.last_call = now;
            if a.waiting.is_empty() && a.running < share {
                a.running += 1;
                return Some(Permit {
                    inner: self.clone(),
                    account: account.to_owned(),
                });
            }
            let (tx, rx) = oneshot::channel();
            a.waiting.push_back(tx);
            rx
        };
        wait.await.ok()
    }

    /// Gives `account`'s place back and lets in every waiting call that now fits its share.
    fn release(self: &Arc<Self>, account: &AccountId) {
        // Places handed to calls that stopped waiting come back here, to be given back once
        // the lock is released (dropping a permit takes it).
        let mut unclaimed = Vec::new();
        {
            let mut accounts = crate::sync::lock(&self.accounts);
            let now = Instant::now();
            if let Some(a) = accounts.get_mut(account) {
                a.running = a.running.saturating_sub(1);
            }
            let active = count_active(&accounts, now);
            let share = share(self.per_account, self.contended_total, active);
            for (id, a) in accounts.iter_mut() {
                while a.running < share {
                    let Some(next) = a.waiting.pop_front() else {
                        break;
                    };
                    a.running += 1;
                    let permit = Permit {
                        inner: self.clone(),
                        account: id.clone(),
                    };
                    if let Err(permit) = next.send(permit) {
                        unclaimed.push(permit);
                    }
                }
            }
            // Forget accounts with nothing running, waiting or recent (bounded by the accounts
            // that called in the last window).
            accounts.retain(|_, a| {
                a.running > 0 || !a.waiting.is_empty() || now - a.last_call < ACTIVE_WINDOW
            });
        }
        drop(unclaimed);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.inner.release(&self.account);
    }
}

fn is_active(a: &Account, now: Instant) -> bool {
    a.running > 0 || !a.waiting.is_empty() || now.duration_since(a.last_call) < ACTIVE_WINDOW
}

fn count_active(accounts: &HashMap<AccountId, Account>, now: Instant) -> usize {
    accounts.values().filter(|a| is_active(a, now)).count()
}

/// Active accounts counting `account` itself (about to call).
fn active_accounts(
    accounts: &HashMap<AccountId, Account>,
    account: &AccountId,
    now: Instant,
) -> usize {
    let others = accounts
        .iter()
        .filter(|(id, a)| *id != account && is_active(a, now))
        .count();
    others + 1
}

tokio::task_local! {
    /// The running call's place, for [`set_aside`].
    static PLACE: std::cell::RefCell<Option<(Arc<CallSlotsHandle>, Permit)>>;
}

/// What [`set_aside`] needs to take a place again.
#[derive(Debug)]
struct CallSlotsHandle(Arc<Inner>);

/// Runs `call` holding `permit` as its place, so that [`set_aside`] inside it can give the place
/// back while the call waits for a person.
pub async fn holding<T>(slots: &CallSlots, permit: Permit, call: impl Future<Output = T>) -> T {
    let handle = Arc::new(CallSlotsHandle(slots.inner.clone()));
    PLACE
        .scope(std::cell::RefCell::new(Some((handle, permit))), call)
        .await
}

/// Awaits `wait` (a person's answer) without holding the call's place, then takes a place
/// again (waiting for the account's share like a new call). Outside [`holding`] it just awaits.
pub async fn set_aside<T>(wait: impl Future<Output = T>) -> T {
    let held = PLACE
        .try_with(|place| place.borrow_mut().take())
        .ok()
        .flatten();
    let Some((handle, permit)) = held else {
        return wait.await;
    };
    let account = permit.account.clone();
    drop(permit);
    let out = wait.await;
    if let Some(permit) = handle.0.enter(&account).await {
        let _ = PLACE.try_with(|place| *place.borrow_mut() = Some((handle, permit)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_alone_has_its_whole_share_and_several_split_the_cores() {
        for (per_account, cores, active, want) in [
            (8, 2, 1, 8),
            (8, 2, 0, 8),
            (8, 2, 2, 1),
            (8, 2, 5, 1),
            (8, 16, 2, 8),
            (8, 16, 4, 4),
            (8, 4, 3, 1),
            (1, 16, 1, 1),
            (0, 2, 1, 1),
        ] {
            assert_eq!(
                share(per_account, cores, active),
                want,
                "{per_account} per account, {cores} cores, {active} active"
            );
        }
    }

    fn within(d: u64) -> Duration {
        Duration::from_millis(d)
    }

    #[tokio::test]
    async fn an_account_past_its_share_waits_and_another_does_not() {
        let slots = CallSlots::new(2, 8);
        let one = slots.enter(&"a".parse().unwrap()).await;
        let _two = slots.enter(&"a".parse().unwrap()).await;
        let a = "a".parse().unwrap();
        let third = tokio::time::timeout(within(50), slots.enter(&a));
        assert!(third.await.is_err(), "a third call of a waits");
        let _other = tokio::time::timeout(within(50), slots.enter(&"b".parse().unwrap()))
            .await
            .expect("b does not wait for a");
        drop(one);
        let _third = tokio::time::timeout(within(50), slots.enter(&"a".parse().unwrap()))
            .await
            .expect("a place came free");
    }

    #[tokio::test]
    async fn while_another_account_calls_a_flooding_account_gets_only_its_share() {
        // Two cores: alone, a runs 8; once b calls, a's next call waits until a runs under 1.
        let slots = CallSlots::new(8, 2);
        let mut a = Vec::new();
        for _ in 0..8 {
            a.push(
                slots
                    .enter(&"a".parse().unwrap())
                    .await
                    .expect("alone, a runs 8"),
            );
        }
        let _b = slots
            .enter(&"b".parse().unwrap())
            .await
            .expect("b's first call runs at once");
        let waiting = tokio::spawn({
            let inner = slots.inner.clone();
            async move { inner.enter(&"a".parse().unwrap()).await }
        });
        tokio::time::sleep(within(50)).await;
        assert!(!waiting.is_finished(), "a is over its share while b calls");
        while a.len() > 1 {
            a.pop();
            tokio::time::sleep(within(5)).await;
            assert!(!waiting.is_finished(), "a still runs {} calls", a.len());
        }
        a.pop();
        let permit = tokio::time::timeout(within(500), waiting)
            .await
            .expect("a's waiting call ran once a ran none")
            .unwrap();
        assert!(permit.is_some());
        assert_eq!(slots.running(&"a".parse().unwrap()), 1);
    }

    #[tokio::test]
    async fn a_call_that_stops_waiting_gives_its_place_to_the_next() {
        let slots = CallSlots::new(1, 2);
        let first = slots.enter(&"a".parse().unwrap()).await.unwrap();
        let gave_up = tokio::time::timeout(within(20), slots.enter(&"a".parse().unwrap())).await;
        assert!(gave_up.is_err());
        let next = tokio::spawn({
            let inner = slots.inner.clone();
            async move { inner.enter(&"a".parse().unwrap()).await }
        });
        tokio::time::sleep(within(20)).await;
        drop(first);
        let got = tokio::time::timeout(within(500), next)
            .await
            .expect("the place of the call that gave up reached the next one")
            .unwrap();
        assert!(got.is_some());
        assert_eq!(slots.running(&"a".parse().unwrap()), 1);
    }

    #[tokio::test]
    async fn a_call_waiting_for_a_person_sets_its_place_aside() {
        let slots = CallSlots::new(1, 2);
        let permit = slots.enter(&"a".parse().unwrap()).await.unwrap();
        let (answer_tx, answer_rx) = oneshot::channel::<()>();
        let asking = tokio::spawn({
            let slots = CallSlots {
                inner: slots.inner.clone(),
            };
            async move {
                holding(&slots, permit, async {
                    set_aside(answer_rx).await.unwrap();
                    slots.running(&"a".parse().unwrap())
                })
                .await
            }
        });
        // While the ask waits, another call of a runs.
        let other = tokio::time::timeout(within(500), slots.enter(&"a".parse().unwrap()))
            .await
            .expect("the asking call set its place aside")
            .unwrap();
        answer_tx.send(()).unwrap();
        tokio::time::sleep(within(50)).await;
        assert!(!asking.is_finished(), "the answered call waits for a place");
        drop(other);
        let running_after = tokio::time::timeout(within(500), asking)
            .await
            .expect("the answered call took a place again")
            .unwrap();
        assert_eq!(running_after, 1);
    }
}
