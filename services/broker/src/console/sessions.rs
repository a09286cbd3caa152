//! The web console's one-time login links and its sessions, in the broker's memory.
//!
//! A login link is minted for an approver credential (over an approver connection that presented
//! it: `glovebox console`), works once, within [`LOGIN_TTL`], and turns into a session: a random
//! cookie value that stands for that same credential until logout, [`SESSION_TTL`], or the
//! credential's rotation (in system mode, where the credential is the owner's uid: the account
//! removed or given to another owner), whichever comes first. Links and sessions are counted per
//! account, so one account's approver cannot crowd out another's. Only SHA-256 hashes of link tokens and cookie
//! values are kept, so the table holds nothing that could be replayed. Everything is bounded, and
//! time is passed in, so the rules are unit-tested without a clock.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::watch;

use glovebox_proto::ws::Role;

use crate::auth::Authenticated;

/// How long a login link works.
pub const LOGIN_TTL: Duration = Duration::from_secs(60);
/// Login links of one account waiting to be used: one account's approver minting links never
/// blocks another account's.
pub const MAX_PENDING_LOGINS: usize = 16;
/// Login links waiting to be used, across all accounts.
pub const MAX_PENDING_LOGINS_TOTAL: usize = 1024;
/// How long a session lasts, however busy.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// Sessions of one account at once; its oldest goes when one more of it starts (never another
/// account's).
pub const MAX_SESSIONS: usize = 32;
/// Sessions at once, across all accounts; past it, a new one is refused.
pub const MAX_SESSIONS_TOTAL: usize = 2048;

type Hash = [u8; 32];

fn hash(secret: &str) -> Hash {
    Sha256::digest(secret.as_bytes()).into()
}

/// A random secret for a link or a cookie: 32 bytes, hex.
fn secret() -> Option<String> {
    glovebox_config::random_bytes::<32>().ok().map(hex::encode)
}

struct Login {
    who: Authenticated,
    expires: Instant,
}

struct Session {
    who: Authenticated,
    started: Instant,
    expires: Instant,
    /// Dropped when the session ends, which ends its WebSocket connections.
    alive: watch::Sender<()>,
}

#[derive(Default)]
struct Inner {
    logins: HashMap<Hash, Login>,
    sessions: HashMap<Hash, Session>,
}

/// A session, as a request presents it.
#[derive(Debug)]
pub struct Valid {
    pub who: Authenticated,
    /// Completes when the session ends (logout, expiry, eviction).
    pub ended: SessionEnd,
}

/// Completes when its session ends.
#[derive(Debug)]
pub struct SessionEnd {
    alive: watch::Receiver<()>,
    expires: Instant,
}

impl SessionEnd {
    pub async fn wait(mut self) {
        let expires = tokio::time::Instant::from_std(self.expires);
        tokio::select! {
            _ = self.alive.changed() => {}
            _ = tokio::time::sleep_until(expires) => {}
        }
    }
}

/// Every console login link and session of the broker.
#[derive(Default)]
pub struct Sessions {
    inner: Mutex<Inner>,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        crate::sync::lock(&self.inner)
    }

    /// A one-time login token for `who` (an approver credential), valid for [`LOGIN_TTL`];
    /// `None` when [`MAX_PENDING_LOGINS`] of its account (or [`MAX_PENDING_LOGINS_TOTAL`]) are
    /// already waiting (or no randomness).
    pub fn issue_login(&self, who: Authenticated, now: Instant) -> Option<String> {
        let mut inner = self.lock();
        inner.logins.retain(|_, l| l.expires > now);
        let of_account = inner
            .logins
            .values()
            .filter(|l| l.who.account == who.account)
            .count();
        if of_account >= MAX_PENDING_LOGINS || inner.logins.len() >= MAX_PENDING_LOGINS_TOTAL {
            return None;
        }
        let token = secret()?;
        inner.logins.insert(
            hash(&token),
            Login {
                who,
                expires: now + LOGIN_TTL,
            },
        );
        Some(token)
    }

    /// Uses a login token (once: it is gone whatever happens next) and starts a session for its
    /// credential, if the token is known, fresh, and its credential still authenticates. Returns
    /// the session's cookie value.
    pub fn redeem(
        &self,
        token: &str,
        still_authorized: impl Fn(&Authenticated) -> bool,
        now: Instant,
    ) -> Option<String> {
        let mut inner = self.lock();
        let login = inner.logins.remove(&hash(token))?;
        if login.expires <= now || !still_authorized(&login.who) {
            return None;
        }
        inner.sessions.retain(|_, s| s.expires > now);
        let account = login.who.account.clone();
        let of_account = |inner: &Inner| {
            inner
                .sessions
                .values()
                .filter(|s| s.who.account == account)
                .count()
        };
        while of_account(&inner) >= MAX_SESSIONS {
            let oldest = inner
                .sessions
                .iter()
                .filter(|(_, s)| s.who.account == account)
                .min_by_key(|(_, s)| s.started)
                .map(|(k, _)| *k)?;
            inner.sessions.remove(&oldest);
        }
        if inner.sessions.len() >= MAX_SESSIONS_TOTAL {
            return None;
        }
        let cookie = secret()?;
        inner.sessions.insert(
            hash(&cookie),
            Session {
                who: login.who,
                started: now,
                expires: now + SESSION_TTL,
                alive: watch::Sender::new(()),
            },
        );
        Some(cookie)
    }

    /// The session a cookie value stands for, if it is live and its credential still
    /// authenticates (a session whose token was rotated, or whose owner no longer owns the
    /// account, ends here).
    pub fn session(
        &self,
        cookie: &str,
        still_authorized: impl Fn(&Authenticated) -> bool,
        now: Instant,
    ) -> Option<Valid> {
        let mut inner = self.lock();
        let key = hash(cookie);
        let s = inner.sessions.get(&key)?;
        if s.expires <= now || !still_authorized(&s.who) {
            inner.sessions.remove(&key);
            return None;
        }
        Some(Valid {
            who: s.who.clone(),
            ended: SessionEnd {
                alive: s.alive.subscribe(),
                expires: s.expires,
            },
        })
    }

    /// Ends a session (its connections close). Returns whether there was one.
    pub fn end(&self, cookie: &str) -> bool {
        self.lock().sessions.remove(&hash(cookie)).is_some()
    }
}

/// The console's state: login links and sessions.
#[derive(Default)]
pub struct Console {
    pub(crate) sessions: Sessions,
}

impl Console {
    /// A one-time login link (its path on the broker) for an approver credential, and how long it
    /// works; `None` for any other credential, or when too many links are waiting.
    pub fn issue_login(&self, who: Authenticated) -> Option<(String, Duration)> {
        if who.role != Role::Approver {
            return None;
        }
        let token = self.sessions.issue_login(who, Instant::now())?;
        Some((format!("/console/login?t={token}"), LOGIN_TTL))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::TokenTable;
    use glovebox_proto::ws::Role;

    fn valid(table: &TokenTable) -> impl Fn(&Authenticated) -> bool + '_ {
        |who| table.still_valid(who)
    }

    fn approver(token: &str) -> (TokenTable, Authenticated) {
        let table = TokenTable::new(vec![(
            hash(token),
            "alice".parse().unwrap(),
            Role::Approver,
        )]);
        let who = table.authenticate(token).unwrap();
        (table, who)
    }

    #[test]
    fn a_login_link_works_once_and_only_while_fresh() {
        let (table, who) = approver("approver-token");
        let s = Sessions::default();
        let t0 = Instant::now();
        let link = s.issue_login(who.clone(), t0).unwrap();
        assert_ne!(link, "approver-token");
        let cookie = s.redeem(&link, valid(&table), t0).unwrap();
        assert_ne!(cookie, link);
        assert_eq!(
            s.redeem(&link, valid(&table), t0),
            None,
            "a second use fails"
        );
        assert_eq!(s.session(&cookie, valid(&table), t0).unwrap().who, who);

        let stale = s.issue_login(who.clone(), t0).unwrap();
        assert_eq!(s.redeem(&stale, valid(&table), t0 + LOGIN_TTL), None);
        assert_eq!(s.redeem("not-a-link", valid(&table), t0), None);
        assert_eq!(s.redeem("", valid(&table), t0), None);
        // the cookie is not a login link, nor the link a cookie
        assert_eq!(s.redeem(&cookie, valid(&table), t0), None);
        let fresh = s.issue_login(who, t0).unwrap();
        assert!(s.session(&fresh, valid(&table), t0).is_none());
    }

    #[test]
    fn a_session_ends_with_its_credential_its_time_or_logout() {
        let (table, who) = approver("approver-token");
        let s = Sessions::default();
        let t0 = Instant::now();
        let login = |s: &Sessions| {
            let link = s.issue_login(who.clone(), t0).unwrap();
            s.redeem(&link, valid(&table), t0).unwrap()
        };
        let cookie = login(&s);
        assert!(
            s.session(&cookie, valid(&table), t0 + SESSION_TTL / 2)
                .is_some()
        );
        assert!(
            s.session(&cookie, valid(&table), t0 + SESSION_TTL)
                .is_none()
        );
        assert!(
            s.session(&cookie, valid(&table), t0).is_none(),
            "it is gone"
        );

        let cookie = login(&s);
        let (rotated, _) = approver("new-approver-token");
        assert!(s.session(&cookie, valid(&rotated), t0).is_none());
        assert!(
            s.session(&cookie, valid(&table), t0).is_none(),
            "it is gone"
        );

        let cookie = login(&s);
        assert!(s.end(&cookie));
        assert!(!s.end(&cookie));
        assert!(s.session(&cookie, valid(&table), t0).is_none());

        // a link minted before the rotation does not start a session after it
        let link = s.issue_login(who.clone(), t0).unwrap();
        assert_eq!(s.redeem(&link, valid(&rotated), t0), None);
    }

    #[test]
    fn links_and_sessions_are_bounded() {
        let (table, who) = approver("approver-token");
        let s = Sessions::default();
        let t0 = Instant::now();
        let links: Vec<String> = (0..MAX_PENDING_LOGINS)
            .map(|_| s.issue_login(who.clone(), t0).unwrap())
            .collect();
        assert!(s.issue_login(who.clone(), t0).is_none());
        // expired links make room
        assert!(s.issue_login(who.clone(), t0 + LOGIN_TTL).is_some());
        drop(links);

        let s = Sessions::default();
        let mut cookies = Vec::new();
        for i in 0..=MAX_SESSIONS {
            let at = t0 + Duration::from_secs(i as u64);
            let link = s.issue_login(who.clone(), at).unwrap();
            cookies.push(s.redeem(&link, valid(&table), at).unwrap());
        }
        let at = t0 + Duration::from_secs(MAX_SESSIONS as u64);
        assert!(
            s.session(&cookies[0], valid(&table), at).is_none(),
            "the oldest went"
        );
        assert!(s.session(&cookies[1], valid(&table), at).is_some());
        assert!(
            s.session(&cookies[MAX_SESSIONS], valid(&table), at)
                .is_some()
        );
    }

    #[test]
    fn one_accounts_links_and_sessions_never_crowd_out_anothers() {
        let table = TokenTable::new(vec![
            (hash("a-token"), "a".parse().unwrap(), Role::Approver),
            (hash("b-token"), "b".parse().unwrap(), Role::Approver),
        ]);
        let a = table.authenticate("a-token").unwrap();
        let b = table.authenticate("b-token").unwrap();
        let s = Sessions::default();
        let t0 = Instant::now();
        // b signs in first
        let link = s.issue_login(b.clone(), t0).unwrap();
        let b_cookie = s.redeem(&link, valid(&table), t0).unwrap();
        // a mints every link it may and more sessions than it may hold
        for i in 0..=MAX_SESSIONS {
            let at = t0 + Duration::from_secs(i as u64 + 1);
            let link = s.issue_login(a.clone(), at).unwrap();
            s.redeem(&link, valid(&table), at).unwrap();
        }
        let at = t0 + Duration::from_secs(MAX_SESSIONS as u64 + 2);
        let _a_links: Vec<String> = (0..MAX_PENDING_LOGINS)
            .map(|_| s.issue_login(a.clone(), at).unwrap())
            .collect();
        assert!(s.issue_login(a.clone(), at).is_none(), "a is at its cap");
        // b's session stands and b can still mint a link and sign in again
        assert!(s.session(&b_cookie, valid(&table), at).is_some());
        let link = s.issue_login(b.clone(), at).unwrap();
        assert!(s.redeem(&link, valid(&table), at).is_some());
    }

    #[tokio::test]
    async fn connections_hear_when_their_session_ends() {
        let (table, who) = approver("approver-token");
        let s = Sessions::default();
        let t0 = Instant::now();
        let link = s.issue_login(who, t0).unwrap();
        let cookie = s.redeem(&link, valid(&table), t0).unwrap();
        let ended = s.session(&cookie, valid(&table), t0).unwrap().ended;
        let waiting = tokio::spawn(ended.wait());
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        s.end(&cookie);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
    }
}
