//! Who may hold the broker's client sockets. Every accepted connection is counted, first against
//! the local user it comes from (its peer) while nothing on it has authenticated, then — from its
//! first request with a valid credential — against that account. The counting is pure (no I/O,
//! no clock; [`Counts`] is table-tested); [`Admission`] shares it and [`Slot`] gives a place back
//! when its connection's socket is dropped.
//!
//! The sizes ([`Pools`]) come from the open-files limit: the broker keeps descriptors for its own
//! sockets (the gate, the executors, files), so exhausting client connections never stops it
//! from talking to its backends. Of the client sockets, a share may be unauthenticated, each peer
//! holding at most its own cap of those (and never more than half of them), and a newcomer
//! refused for a peer's cap or the unauthenticated share sheds the oldest connection that has
//! sent nothing yet ([`Admission::shed_for`]); the rest belong to accounts: each known account is
//! guaranteed a reserve that no other account can take, and may go beyond it, up to its cap,
//! only in the pool the reserves leave over. One account's connections therefore never lock
//! another out, and no one peer's unauthenticated ones lock anyone out but that peer. (Several
//! local users acting together can fill the unauthenticated share, each only until the header
//! deadline closes its silent sockets.)

use std::collections::{HashMap, HashSet};

use glovebox_config::AccountId;
use std::sync::{Arc, Mutex};

/// Who is on the other end of a connection before it authenticates: the local user that owns
/// the client socket, when the kernel says (see `peer`), or nobody known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    Uid(u32),
    Unknown,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Uid(uid) => write!(f, "uid {uid}"),
            Peer::Unknown => f.write_str("an unknown peer"),
        }
    }
}

/// Why a connection was refused a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("too many connections")]
    Sockets,
    #[error("too many unauthenticated connections")]
    Unauthenticated,
    #[error("too many unauthenticated connections from this user")]
    Peer,
    #[error("too many connections for this account")]
    Account,
}

/// The sizes of the pools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pools {
    /// Client sockets at most, in every state.
    pub sockets: usize,
    /// Of those, unauthenticated at most.
    pub unauthenticated: usize,
    /// Unauthenticated sockets of one peer at most.
    pub per_peer: usize,
    /// Sockets of one account at most.
    pub per_account: usize,
    /// Sockets each known account can always have, whatever the others hold.
    pub reserved_per_account: usize,
    /// The accounts that have a reserve.
    pub accounts: HashSet<AccountId>,
}

impl Pools {
    /// The pool accounts share beyond their reserves.
    fn shared(&self) -> usize {
        let reserved = self.reserved_per_account * self.accounts.len();
        (self.sockets - self.unauthenticated).saturating_sub(reserved)
    }

    fn reserve_of(&self, account: &AccountId) -> usize {
        if self.accounts.contains(account) {
            self.reserved_per_account
        } else {
            0
        }
    }
}

/// The sockets held now: by peer (unauthenticated) and by account.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    by_peer: HashMap<Peer, usize>,
    unauthenticated: usize,
    by_account: HashMap<AccountId, usize>,
    /// Sockets accounts hold beyond their reserves.
    shared: usize,
}

impl Counts {
    /// Every socket held now.
    pub fn total(&self) -> usize {
        self.unauthenticated + self.by_account.values().sum::<usize>()
    }

    pub fn of_account(&self, account: &AccountId) -> usize {
        self.by_account.get(account).copied().unwrap_or(0)
    }

    pub fn unauthenticated(&self) -> usize {
        self.unauthenticated
    }

    /// A new connection from `peer`.
    pub fn admit(&mut self, pools: &Pools, peer: Peer) -> Result<(), Refusal> {
        if self.total() >= pools.sockets {
            return Err(Refusal::Sockets);
        }
        if self.unauthenticated >= pools.unauthenticated {
            return Err(Refusal::Unauthenticated);
        }
        let held = self.by_peer.entry(peer).or_insert(0);
        if *held >= pools.per_peer {
            return Err(Refusal::Peer);
        }
        *held += 1;
        self.unauthenticated += 1;
        Ok(())
    }

    /// An unauthenticated connection from `peer` authenticated as `account`: it moves to the
    /// account's reserve, or the shared pool; refused (and left where it was) when neither has
    /// room or the account is at its cap.
    pub fn claim(&mut self, pools: &Pools, peer: Peer, account: &AccountId) -> Result<(), Refusal> {
        let held = self.of_account(account);
        if held >= pools.per_account {
            return Err(Refusal::Account);
        }
        if held >= pools.reserve_of(account) {
            if self.shared >= pools.shared() {
                return Err(Refusal::Account);
            }
            self.shared += 1;
        }
        *self.by_account.entry(account.to_owned()).or_insert(0) += 1;
        self.release_peer(peer);
        Ok(())
    }

    /// An unauthenticated connection of `peer` closed.
    pub fn release_peer(&mut self, peer: Peer) {
        if let Some(held) = self.by_peer.get_mut(&peer) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                self.by_peer.remove(&peer);
            }
            self.unauthenticated = self.unauthenticated.saturating_sub(1);
        }
    }

    /// A connection of `account` closed.
    pub fn release_account(&mut self, pools: &Pools, account: &AccountId) {
        let Some(held) = self.by_account.get_mut(account) else {
            return;
        };
        if *held > pools.reserve_of(account) {
            self.shared = self.shared.saturating_sub(1);
        }
        *held -= 1;
        if *held == 0 {
            self.by_account.remove(account);
        }
    }
}

/// The broker's counts behind a lock, with the pools they are held to.
#[derive(Debug)]
pub struct Admission {
    pools: Pools,
    counts: Mutex<Counts>,
    /// Connections no credential has claimed yet, oldest first: the ones shed to make room.
    silent: Mutex<std::collections::VecDeque<(u64, Peer, Arc<tokio::sync::Notify>)>>,
    next_id: std::sync::atomic::AtomicU64,
    /// Told whenever a place is given back.
    released: tokio::sync::Notify,
}

impl Admission {
    pub fn new(pools: Pools) -> Arc<Admission> {
        Arc::new(Admission {
            pools,
            counts: Mutex::new(Counts::default()),
            silent: Mutex::new(std::collections::VecDeque::new()),
            next_id: std::sync::atomic::AtomicU64::new(0),
            released: tokio::sync::Notify::new(),
        })
    }

    /// Makes room for a connection from `peer` that was refused for `refusal`: tells the oldest
    /// unauthenticated connection of that peer (for its cap), or of anyone (for the
    /// unauthenticated share), to close. Returns whether one was told; its place comes back when
    /// it has closed ([`Admission::released`]). An authenticated connection is never shed: a
    /// real client (an approver, an agent) authenticates with its first request, so a flood of
    /// silent or anonymous sockets sheds only itself.
    pub fn shed_for(&self, peer: Peer, refusal: Refusal) -> bool {
        let mut silent = crate::sync::lock(&self.silent);
        let at = match refusal {
            Refusal::Peer => silent.iter().position(|(_, p, _)| *p == peer),
            Refusal::Unauthenticated => (!silent.is_empty()).then_some(0),
            Refusal::Sockets | Refusal::Account => None,
        };
        match at.and_then(|i| silent.remove(i)) {
            Some((_, _, shed)) => {
                shed.notify_one();
                true
            }
            None => false,
        }
    }

    /// Resolves when a place is given back next (create it before asking for one).
    pub fn released(&self) -> tokio::sync::futures::Notified<'_> {
        self.released.notified()
    }

    pub fn pools(&self) -> &Pools {
        &self.pools
    }

    /// A place for a new connection from `peer`, given back when the slot is dropped.
    pub fn admit(self: &Arc<Self>, peer: Peer) -> Result<Slot, Refusal> {
        self.counts().admit(&self.pools, peer)?;
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let shed = Arc::new(tokio::sync::Notify::new());
        crate::sync::lock(&self.silent).push_back((id, peer, shed.clone()));
        Ok(Slot {
            admission: self.clone(),
            held: Mutex::new(Held::Peer(peer)),
            id,
            shed,
        })
    }

    fn forget_silent(&self, id: u64) {
        crate::sync::lock(&self.silent).retain(|(i, _, _)| *i != id);
    }

    /// The counts now.
    pub fn snapshot(&self) -> Counts {
        self.counts().clone()
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        crate::sync::lock(&self.counts)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Held {
    Peer(Peer),
    Account(AccountId),
}

/// One connection's place; it lives as long as the connection's socket.
#[derive(Debug)]
pub struct Slot {
    admission: Arc<Admission>,
    held: Mutex<Held>,
    id: u64,
    /// Told when the connection is shed for another ([`Admission::shed_for`]).
    shed: Arc<tokio::sync::Notify>,
}

impl Slot {
    /// Resolves when the connection is to close to make room for another.
    pub async fn shed(&self) {
        self.shed.notified().await
    }

    /// Counts the connection against `account` from now on (a no-op once it is an account's:
    /// a connection is counted once, against the first account that authenticated on it).
    pub fn claim(&self, account: &AccountId) -> Result<(), Refusal> {
        let mut held = crate::sync::lock(&self.held);
        let Held::Peer(peer) = *held else {
            return Ok(());
        };
        let admission = &self.admission;
        admission.counts().claim(&admission.pools, peer, account)?;
        *held = Held::Account(account.clone());
        // An account's connection is never shed.
        admission.forget_silent(self.id);
        Ok(())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let held = crate::sync::lock(&self.held).clone();
        let admission = &self.admission;
        let mut counts = admission.counts();
        match held {
            Held::Peer(peer) => counts.release_peer(peer),
            Held::Account(account) => counts.release_account(&admission.pools, &account),
        }
        drop(counts);
        admission.forget_silent(self.id);
        admission.released.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools() -> Pools {
        Pools {
            sockets: 10,
            unauthenticated: 4,
            per_peer: 2,
            per_account: 5,
            reserved_per_account: 2,
            accounts: ["a", "b"]
                .iter()
                .map(|s| AccountId::parse(*s).unwrap())
                .collect(),
        }
    }

    /// Runs steps (`+uid` admit, `a@uid` claim, `-uid` release a peer's, `-a` release an
    /// account's), checking each outcome.
    fn check(steps: &[(&str, Result<(), Refusal>)]) -> Counts {
        let pools = pools();
        let mut counts = Counts::default();
        for (i, (step, expected)) in steps.iter().enumerate() {
            let got = if let Some(uid) = step.strip_prefix('+') {
                counts.admit(&pools, Peer::Uid(uid.parse().unwrap()))
            } else if let Some((account, uid)) = step.split_once('@') {
                counts.claim(
                    &pools,
                    Peer::Uid(uid.parse().unwrap()),
                    &account.parse().unwrap(),
                )
            } else if let Some(who) = step.strip_prefix('-') {
                match who.parse::<u32>() {
                    Ok(uid) => counts.release_peer(Peer::Uid(uid)),
                    Err(_) => counts.release_account(&pools, &who.parse().unwrap()),
                }
                Ok(())
            } else {
                panic!("bad step {step}")
            };
            assert_eq!(got, *expected, "step {i} ({step}): {counts:?}");
        }
        counts
    }

    #[test]
    fn a_peer_holds_at_most_its_cap_of_unauthenticated_sockets() {
        let counts = check(&[
            ("+1", Ok(())),
            ("+1", Ok(())),
            ("+1", Err(Refusal::Peer)),
            ("+2", Ok(())),
            ("+3", Ok(())),
            // The unauthenticated share is full: even a new peer waits.
            ("+4", Err(Refusal::Unauthenticated)),
            ("-1", Ok(())),
            ("+1", Ok(())),
        ]);
        assert_eq!(counts.unauthenticated(), 4);
    }

    #[test]
    fn authenticating_moves_a_socket_from_its_peer_to_its_account() {
        let counts = check(&[
            ("+1", Ok(())),
            ("+1", Ok(())),
            ("a@1", Ok(())),
            ("+1", Ok(())),
            ("+1", Err(Refusal::Peer)),
        ]);
        assert_eq!(
            (
                counts.unauthenticated(),
                counts.of_account(&"a".parse().unwrap())
            ),
            (2, 1)
        );
        assert_eq!(counts.total(), 3);
    }

    #[test]
    fn one_account_cannot_take_another_accounts_reserve() {
        // 10 sockets - 4 unauthenticated = 6 for accounts: 2 reserved for each of a and b, 2
        // shared. a takes its reserve and the shared pool (4 < its cap of 5), then is refused;
        // b still gets its reserve, and no more.
        let mut steps = Vec::new();
        for _ in 0..4 {
            steps.extend([("+1", Ok(())), ("a@1", Ok(()))]);
        }
        steps.extend([
            ("+1", Ok(())),
            ("a@1", Err(Refusal::Account)),
            ("-1", Ok(())),
        ]);
        for _ in 0..2 {
            steps.extend([("+2", Ok(())), ("b@2", Ok(()))]);
        }
        steps.extend([("+2", Ok(())), ("b@2", Err(Refusal::Account))]);
        // a gives back a shared place: b may take it.
        steps.extend([("-a", Ok(())), ("b@2", Ok(()))]);
        let counts = check(&steps);
        assert_eq!(
            (
                counts.of_account(&"a".parse().unwrap()),
                counts.of_account(&"b".parse().unwrap())
            ),
            (3, 3)
        );
        assert_eq!(counts.total(), 6);
    }

    #[test]
    fn an_account_stops_at_its_cap_and_an_unknown_one_has_no_reserve() {
        let mut pools = pools();
        pools.sockets = 100;
        let mut counts = Counts::default();
        for _ in 0..5 {
            counts.admit(&pools, Peer::Unknown).unwrap();
            counts
                .claim(&pools, Peer::Unknown, &"a".parse().unwrap())
                .unwrap();
        }
        counts.admit(&pools, Peer::Unknown).unwrap();
        assert_eq!(
            counts.claim(&pools, Peer::Unknown, &"a".parse().unwrap()),
            Err(Refusal::Account)
        );
        // "c" is not a known account: it only gets shared places.
        assert_eq!(
            counts.claim(&pools, Peer::Unknown, &"c".parse().unwrap()),
            Ok(())
        );
        assert_eq!(counts.shared, 4);
    }

    #[test]
    fn slots_give_their_place_back_wherever_it_is() {
        let admission = Admission::new(pools());
        let one = admission.admit(Peer::Uid(1)).unwrap();
        let two = admission.admit(Peer::Uid(1)).unwrap();
        assert_eq!(admission.admit(Peer::Uid(1)).unwrap_err(), Refusal::Peer);
        one.claim(&"a".parse().unwrap()).unwrap();
        one.claim(&"b".parse().unwrap()).unwrap(); // counted once, against the first account
        assert_eq!(admission.snapshot().of_account(&"b".parse().unwrap()), 0);
        let three = admission.admit(Peer::Uid(1)).unwrap();
        drop((one, two, three));
        assert_eq!(admission.snapshot(), Counts::default());
    }

    /// Whether `slot` was told to close (without waiting).
    fn told(slot: &Slot) -> bool {
        use std::future::Future as _;
        let shed = slot.shed();
        let mut shed = std::pin::pin!(shed);
        let waker = std::task::Waker::noop();
        shed.as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
            .is_ready()
    }

    #[test]
    fn a_newcomer_sheds_the_oldest_unauthenticated_connection_of_its_peer_never_an_accounts() {
        let admission = Admission::new(pools());
        let oldest = admission.admit(Peer::Uid(1)).unwrap();
        let newer = admission.admit(Peer::Uid(1)).unwrap();
        let other = admission.admit(Peer::Uid(2)).unwrap();
        let refusal = admission.admit(Peer::Uid(1)).unwrap_err();
        assert_eq!(refusal, Refusal::Peer);
        assert!(admission.shed_for(Peer::Uid(1), refusal));
        assert!(told(&oldest) && !told(&newer) && !told(&other));
        // Its place comes back when it closes, and the newcomer gets it.
        drop(oldest);
        let newcomer = admission.admit(Peer::Uid(1)).unwrap();
        // An authenticated connection is never shed; with none left to shed, a refusal stands.
        newer.claim(&"a".parse().unwrap()).unwrap();
        newcomer.claim(&"a".parse().unwrap()).unwrap();
        let _third = admission.admit(Peer::Uid(1)).unwrap();
        let _fourth = admission.admit(Peer::Uid(1)).unwrap();
        assert!(admission.shed_for(Peer::Uid(1), Refusal::Peer));
        assert!(!told(&newer) && !told(&newcomer));
        assert!(!admission.shed_for(Peer::Uid(3), Refusal::Peer));
        assert!(!admission.shed_for(Peer::Uid(1), Refusal::Account));
    }
}
