//! MCP sessions: rmcp's [`LocalSessionManager`] (with an idle timeout: a session nobody uses
//! ends, and its worker's memory is freed), wrapped to remember which account created each
//! session and to hold every account to its cap. A session id is not a credential: another
//! account's token that learned it still cannot use or end it.
//!
//! The owners follow rmcp's sessions exactly: rmcp closes every session through
//! [`SessionManager::close_session`] (a DELETE, the idle timeout, a failed handshake), which
//! forgets its owner too, and a session bound after it already closed is forgotten at once
//! ([`SessionOwners::bind`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::Stream;
use glovebox_config::AccountId;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::server_side_http::{ServerSseMessage, SessionId};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, SessionConfig,
};

/// Which account holds each session, and how many each account holds (sessions being created
/// included).
#[derive(Debug, Default)]
struct Owners {
    by_session: HashMap<String, AccountId>,
    held: HashMap<AccountId, usize>,
}

impl Owners {
    fn give_back(&mut self, account: &AccountId) {
        if let Some(n) = self.held.get_mut(account) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(account);
            }
        }
    }
}

/// The broker's MCP sessions and their owners.
pub struct SessionOwners {
    owners: Mutex<Owners>,
    per_account: usize,
    sessions: LocalSessionManager,
}

impl SessionOwners {
    /// Sessions of at most `per_account` per account, each ending after `idle` unused.
    pub fn new(per_account: usize, idle: Duration) -> SessionOwners {
        let mut sessions = LocalSessionManager::default();
        sessions.session_config = {
            let mut config = SessionConfig::default();
            config.keep_alive = Some(idle);
            config
        };
        SessionOwners {
            owners: Mutex::new(Owners::default()),
            per_account,
            sessions,
        }
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, Owners> {
        crate::sync::lock(&self.owners)
    }

    /// A place for a session `account` is about to create; `None` when it holds its cap.
    pub fn reserve(self: &Arc<Self>, account: &AccountId) -> Option<Reservation> {
        let mut owners = self.owners();
        let held = owners.held.entry(account.to_owned()).or_insert(0);
        if *held >= self.per_account {
            return None;
        }
        *held += 1;
        Some(Reservation {
            owners: self.clone(),
            account: account.to_owned(),
            held: true,
        })
    }

    /// The session created with `reservation` belongs to its account (and is forgotten at once
    /// if rmcp already closed it).
    pub async fn bind(&self, reservation: Reservation, session: &str) {
        // The place moves from the reservation to the session.
        let account = reservation.into_account();
        self.owners().by_session.insert(session.to_owned(), account);
        let open = self
            .sessions
            .has_session(&SessionId::from(session))
            .await
            .unwrap_or(false);
        if !open {
            self.forget(session);
        }
    }

    /// Whether `account` may use `session`: only the account that created it, and a session the
    /// broker never saw created belongs to nobody.
    pub fn belongs_to(&self, session: &str, account: &AccountId) -> bool {
        self.owners()
            .by_session
            .get(session)
            .is_some_and(|a| a == account)
    }

    /// The session ended: its owner holds one fewer.
    pub fn forget(&self, session: &str) {
        let mut owners = self.owners();
        if let Some(account) = owners.by_session.remove(session) {
            owners.give_back(&account);
        }
    }

    /// Sessions `account` holds (being created included).
    pub fn held_by(&self, account: &AccountId) -> usize {
        self.owners().held.get(account).copied().unwrap_or(0)
    }

    /// Sessions open in rmcp now.
    pub async fn open(&self) -> usize {
        self.sessions.sessions.read().await.len()
    }
}

/// A place taken for a session being created; given back if the session is never bound.
pub struct Reservation {
    owners: Arc<SessionOwners>,
    account: AccountId,
    /// Whether the place is still the reservation's to give back.
    held: bool,
}

impl Reservation {
    /// The account, the place now held by a session.
    fn into_account(mut self) -> AccountId {
        self.held = false;
        self.account.clone()
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.held {
            self.owners.owners().give_back(&self.account);
        }
    }
}

impl SessionManager for SessionOwners {
    type Error = LocalSessionManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.sessions.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.sessions.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.sessions.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let closed = self.sessions.close_session(id).await;
        self.forget(id);
        closed
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.sessions.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.sessions.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.sessions.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.sessions.resume(id, last_event_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_account_holds_at_most_its_cap_and_ended_sessions_give_places_back() {
        let owners = Arc::new(SessionOwners::new(2, Duration::from_secs(60)));
        let one = owners.reserve(&"a".parse().unwrap()).unwrap();
        let two = owners.reserve(&"a".parse().unwrap()).unwrap();
        assert!(
            owners.reserve(&"a".parse().unwrap()).is_none(),
            "a is at its cap"
        );
        assert!(owners.reserve(&"b".parse().unwrap()).is_some(), "b is not");
        assert_eq!(
            owners.held_by(&"b".parse().unwrap()),
            0,
            "an unused reservation is given back"
        );
        drop(two);
        assert_eq!(owners.held_by(&"a".parse().unwrap()), 1);
        // A session bound after rmcp closed it (or that rmcp never had) is forgotten at once.
        owners.bind(one, "gone").await;
        assert!(!owners.belongs_to("gone", &"a".parse().unwrap()));
        assert_eq!(owners.held_by(&"a".parse().unwrap()), 0);
    }

    #[tokio::test]
    async fn a_session_belongs_to_its_creator_until_rmcp_closes_it() {
        let owners = Arc::new(SessionOwners::new(2, Duration::from_secs(60)));
        let (id, _transport) = owners.create_session().await.unwrap();
        let place = owners.reserve(&"a".parse().unwrap()).unwrap();
        owners.bind(place, &id).await;
        assert!(
            owners.belongs_to(&id, &"a".parse().unwrap())
                && !owners.belongs_to(&id, &"b".parse().unwrap())
        );
        assert_eq!(
            (owners.held_by(&"a".parse().unwrap()), owners.open().await),
            (1, 1)
        );
        owners.close_session(&id).await.unwrap();
        assert!(!owners.belongs_to(&id, &"a".parse().unwrap()));
        assert_eq!(
            (owners.held_by(&"a".parse().unwrap()), owners.open().await),
            (0, 0)
        );
    }
}
