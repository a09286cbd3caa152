//! Bearer authentication: the token from `Authorization: Bearer` or from the subprotocol list
//! (`glovebox.v1, bearer.<token>`, for browsers), compared by SHA-256 in constant time.
//! The account a connection acts for, and the role it may take, come from here and nowhere else:
//! each account has an agent credential (tools, `/mcp`, client-tool providers) and a separate
//! approver credential (asks, switching tools), and neither can stand in for the other.
//!
//! The table follows `glovebox.yaml` ([`Credentials`]): a rotated token stops authenticating at
//! once, and connections that used it are told to close.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use glovebox_config::AccountId;
use glovebox_proto::ws::{Role, bearer_from_subprotocols};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::watch;

/// How often the broker looks at `glovebox.yaml` for rotated credentials.
pub const FOLLOW_PERIOD: Duration = Duration::from_secs(1);

/// Who a valid credential says the caller is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub account: AccountId,
    /// The only role this credential may take.
    pub role: Role,
    /// How the caller proved it, to notice when that stops holding.
    pub proof: Proof,
}

/// How a caller proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// A bearer token (its hash): valid while the token table holds it.
    Token([u8; 32]),
    /// System mode: the kernel's word that the peer is this uid, the account's owner; valid while
    /// that uid owns the account (`App::still_authorized`).
    Owner(u32),
    /// System mode: the kernel's word that the peer is root, the machine's administrator, who
    /// named the account; valid while the account exists.
    Administrator,
}

/// Known token hashes, with the account and role each authenticates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenTable {
    entries: Vec<([u8; 32], AccountId, Role)>,
}

/// A request's credentials, as offered.
#[derive(Debug, PartialEq, Eq)]
pub struct Offered<'a> {
    pub token: Option<&'a str>,
    /// Whether the client offered the `glovebox.v1` subprotocol (to be echoed).
    pub wants_subprotocol: bool,
}

impl TokenTable {
    pub fn new(entries: Vec<([u8; 32], AccountId, Role)>) -> TokenTable {
        TokenTable { entries }
    }

    /// Every credential of a validated `glovebox.yaml`.
    pub fn from_config(config: &glovebox_config::Config) -> TokenTable {
        let mut entries = Vec::new();
        for a in &config.accounts {
            entries.extend(
                a.token_hashes
                    .iter()
                    .map(|h| (*h, a.id.clone(), Role::Agent)),
            );
            entries.extend(
                a.approver_token_hashes
                    .iter()
                    .map(|h| (*h, a.id.clone(), Role::Approver)),
            );
        }
        TokenTable { entries }
    }

    /// Who this token authenticates. Every entry is compared, so timing says nothing about which
    /// accounts exist.
    pub fn authenticate(&self, token: &str) -> Option<Authenticated> {
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (known, account, role) in &self.entries {
            if bool::from(known.ct_eq(&hash)) {
                found = Some(Authenticated {
                    account: account.clone(),
                    role: *role,
                    proof: Proof::Token(hash),
                });
            }
        }
        found
    }

    /// Whether a token credential (by its hash) still authenticates as `account` in `role`.
    /// An owner's proof is no token's: never in this table.
    pub fn still_valid(&self, who: &Authenticated) -> bool {
        let Proof::Token(hash) = who.proof else {
            return false;
        };
        self.entries
            .iter()
            .any(|(h, a, r)| *h == hash && *a == who.account && *r == who.role)
    }
}

/// The broker's credentials, following `glovebox.yaml`, and those of the accounts added at run
/// time (set by the supervisor's updates, [`Credentials::set_added`]).
pub struct Credentials {
    file: Option<PathBuf>,
    stamp: Mutex<Option<glovebox_config::FileStamp>>,
    /// The file's table and the added accounts' table, which the published table joins.
    /// And the accounts the update names (whose file entries it replaces).
    parts: Mutex<(TokenTable, TokenTable, Vec<AccountId>)>,
    table: watch::Sender<Arc<TokenTable>>,
}

impl TokenTable {
    /// The file's credentials and the added ones; an account the update names (added, or a
    /// `glovebox.yaml` account taken over at run time) has only the update's.
    fn joined(file: &TokenTable, added: &TokenTable, added_ids: &[AccountId]) -> TokenTable {
        let mut entries: Vec<_> = file
            .entries
            .iter()
            .filter(|(_, account, _)| !added_ids.contains(account))
            .cloned()
            .collect();
        entries.extend(added.entries.iter().cloned());
        TokenTable { entries }
    }
}

impl Credentials {
    /// `file` is the `glovebox.yaml` to follow (none: `initial` is final).
    pub fn new(file: Option<PathBuf>, initial: TokenTable) -> Credentials {
        let stamp = file.as_deref().and_then(glovebox_config::file_stamp);
        Credentials {
            file,
            stamp: Mutex::new(stamp),
            parts: Mutex::new((initial.clone(), TokenTable::default(), Vec::new())),
            table: watch::Sender::new(Arc::new(initial)),
        }
    }

    /// Replaces the credentials of the accounts added at run time. A credential no longer in
    /// `added` stops authenticating at once, and connections that used it are told to close.
    /// `ids` are the accounts the update names: their credentials in the file no longer count.
    pub fn set_added(&self, added: TokenTable, ids: Vec<AccountId>) {
        let mut parts = crate::sync::lock(&self.parts);
        parts.1 = added;
        parts.2 = ids;
        self.publish(TokenTable::joined(&parts.0, &parts.1, &parts.2));
    }

    fn publish(&self, table: TokenTable) {
        self.table.send_if_modified(|current| {
            if **current == table {
                false
            } else {
                *current = Arc::new(table);
                true
            }
        });
    }

    /// The current table (re-read first if the file changed).
    pub fn table(&self) -> Arc<TokenTable> {
        self.refresh();
        self.table.borrow().clone()
    }

    /// Changes of the table, for connections that must close when their credential goes.
    pub fn subscribe(&self) -> watch::Receiver<Arc<TokenTable>> {
        self.table.subscribe()
    }

    /// Re-reads the file if it changed. A file that does not parse keeps the last table (and is
    /// logged): a typo must not lock everyone out, nor let anyone in.
    pub fn refresh(&self) {
        let Some(file) = &self.file else { return };
        let stamp = glovebox_config::file_stamp(file);
        let mut last = crate::sync::lock(&self.stamp);
        if stamp == *last {
            return;
        }
        *last = stamp;
        match std::fs::read_to_string(file)
            .ok()
            .and_then(|t| glovebox_config::Config::parse(&t, file).ok())
        {
            Some(config) => {
                let mut parts = crate::sync::lock(&self.parts);
                parts.0 = TokenTable::from_config(&config);
                self.publish(TokenTable::joined(&parts.0, &parts.1, &parts.2));
            }
            None => {
                tracing::warn!(file = %file.display(), "could not re-read credentials; keeping the last known")
            }
        }
    }

    /// Looks at the file every [`FOLLOW_PERIOD`] for as long as the broker runs.
    pub fn follow(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(FOLLOW_PERIOD).await;
                let Some(me) = me.upgrade() else { return };
                me.refresh();
            }
        });
    }
}

/// Completes when `who`'s credential no longer authenticates (rotated or removed).
pub async fn revoked(mut tables: watch::Receiver<Arc<TokenTable>>, who: Authenticated) {
    let _ = tables.wait_for(|t| !t.still_valid(&who)).await;
}

/// Who a request's bearer token authenticates as.
pub fn credential_of(credentials: &Credentials, headers: &HeaderMap) -> Option<Authenticated> {
    let token = offered(headers).token?;
    credentials.table().authenticate(token)
}

/// What a client without a valid token is told it needs (RFC 6750's `WWW-Authenticate`): a
/// bearer token, in glovebox's realm. It names no `resource_metadata`, so an MCP client is not
/// invited to discover an OAuth server, which glovebox does not run.
pub const BEARER_CHALLENGE: &str = "Bearer realm=\"glovebox\", error=\"invalid_token\", error_description=\"send the account's agent token as Authorization: Bearer <token>\"";

/// What the body of a 401 says: which token, and where a person finds it. It says nothing about
/// which accounts exist.
pub const UNAUTHORIZED_BODY: &str = "missing or invalid bearer token: send the account's agent \
token as `Authorization: Bearer <token>`. Print it with `glovebox token show` (system mode: \
`glovebox token show --system`, as the account's owner). glovebox does not use OAuth.\n";

/// The answer to a request without a valid token: it says nothing about which accounts exist.
pub fn unauthorized() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::UNAUTHORIZED,
        [("www-authenticate", BEARER_CHALLENGE)],
        UNAUTHORIZED_BODY,
    )
        .into_response()
}

/// The answer to OAuth discovery (`/.well-known/oauth-*`): there is nothing to discover.
pub fn no_oauth() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::NOT_FOUND,
        "glovebox does not use OAuth: send the account's agent token as \
         `Authorization: Bearer <token>` (`glovebox token show`).\n",
    )
        .into_response()
}

/// The answer to a valid credential of the wrong role for this endpoint.
pub fn wrong_role(needed: Role) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::FORBIDDEN,
        format!(
            "this endpoint needs the account's {} credential\n",
            needed.as_str()
        ),
    )
        .into_response()
}

/// Reads the bearer token a WebSocket upgrade request offers.
pub fn offered(headers: &HeaderMap) -> Offered<'_> {
    let (proto_token, wants_subprotocol) = headers
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .map(bearer_from_subprotocols)
        .unwrap_or((None, false));
    let header_token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    Offered {
        token: header_token.or(proto_token),
        wants_subprotocol,
    }
}

/// System mode: each account and the uid of its owner (who approves for it on the approve
/// socket).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owners(pub Vec<(AccountId, u32)>);

impl Owners {
    /// The accounts `uid` owns, in config order.
    pub fn owned_by(&self, uid: u32) -> Vec<AccountId> {
        self.0
            .iter()
            .filter(|(_, owner)| *owner == uid)
            .map(|(account, _)| account.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> TokenTable {
        TokenTable::new(vec![
            (
                Sha256::digest(b"alice-token").into(),
                "alice".parse().unwrap(),
                Role::Agent,
            ),
            (
                Sha256::digest(b"alice-approver").into(),
                "alice".parse().unwrap(),
                Role::Approver,
            ),
            (
                Sha256::digest(b"bob-token").into(),
                "bob".parse().unwrap(),
                Role::Agent,
            ),
        ])
    }

    #[test]
    fn tokens_map_to_their_account_and_role_only() {
        let t = table();
        let who = |tok: &str| t.authenticate(tok).map(|a| (a.account, a.role));
        assert_eq!(
            who("alice-token"),
            Some(("alice".parse().unwrap(), Role::Agent))
        );
        assert_eq!(
            who("alice-approver"),
            Some(("alice".parse().unwrap(), Role::Approver))
        );
        assert_eq!(
            who("bob-token"),
            Some(("bob".parse().unwrap(), Role::Agent))
        );
        for bad in ["", "alice", "alice-token ", "ALICE-TOKEN", "bob-token\0"] {
            assert_eq!(who(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_credential_is_valid_only_while_its_entry_exists() {
        let t = table();
        let alice = t.authenticate("alice-approver").unwrap();
        assert!(t.still_valid(&alice));
        let rotated = TokenTable::new(vec![(
            Sha256::digest(b"new-approver").into(),
            "alice".parse().unwrap(),
            Role::Approver,
        )]);
        assert!(!rotated.still_valid(&alice));
        // The same token moved to another role or account is not the same credential.
        let Proof::Token(hash) = alice.proof else {
            panic!("a token's proof")
        };
        let moved = TokenTable::new(vec![(hash, "alice".parse().unwrap(), Role::Agent)]);
        assert!(!moved.still_valid(&alice));
        // An owner's proof is never a token's, whatever the table holds.
        let owner = Authenticated {
            proof: Proof::Owner(1000),
            ..alice
        };
        assert!(!t.still_valid(&owner));
    }

    #[tokio::test]
    async fn credentials_follow_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("glovebox.yaml");
        let yaml = |agent: &str| {
            format!(
                "accounts:\n  - id: alice\n    workdir: /w\n    token_sha256: [{}]\n",
                hex::encode(Sha256::digest(agent.as_bytes()))
            )
        };
        std::fs::write(&file, yaml("one")).unwrap();
        let config = glovebox_config::Config::parse(&yaml("one"), &file).unwrap();
        let creds = Credentials::new(Some(file.clone()), TokenTable::from_config(&config));
        let one = creds.table().authenticate("one").unwrap();
        let mut changes = creds.subscribe();
        // Rotation: a new file (by rename, as glovebox writes it).
        let tmp = dir.path().join("tmp.yaml");
        std::fs::write(&tmp, yaml("two")).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        assert!(creds.table().authenticate("one").is_none());
        assert!(creds.table().authenticate("two").is_some());
        assert!(changes.has_changed().unwrap());
        tokio::time::timeout(Duration::from_secs(1), revoked(creds.subscribe(), one))
            .await
            .unwrap();
        // A broken file keeps the last table.
        std::fs::write(&tmp, "accounts: [").unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        assert!(creds.table().authenticate("two").is_some());
        changes.mark_unchanged();
    }

    #[tokio::test]
    async fn added_credentials_join_the_file_and_go_when_removed() {
        let creds = Credentials::new(None, table());
        let added = |tok: &str| {
            TokenTable::new(vec![(
                Sha256::digest(tok.as_bytes()).into(),
                "new".parse().unwrap(),
                Role::Agent,
            )])
        };
        assert!(creds.table().authenticate("new-token").is_none());
        creds.set_added(added("new-token"), vec!["new".parse().unwrap()]);
        let who = creds.table().authenticate("new-token").unwrap();
        assert_eq!(who.account, "new");
        assert!(creds.table().authenticate("alice-token").is_some());
        let gone = revoked(creds.subscribe(), who);
        creds.set_added(TokenTable::default(), Vec::new());
        tokio::time::timeout(Duration::from_secs(1), gone)
            .await
            .unwrap();
        assert!(creds.table().authenticate("new-token").is_none());
        assert!(creds.table().authenticate("bob-token").is_some());
    }

    #[tokio::test]
    async fn an_account_the_update_names_has_only_the_updates_credentials() {
        // alice of glovebox.yaml, taken over at run time with a new agent token.
        let creds = Credentials::new(None, table());
        let alice = creds.table().authenticate("alice-token").unwrap();
        let gone = revoked(creds.subscribe(), alice);
        let update = TokenTable::new(vec![(
            Sha256::digest(b"alice-rotated").into(),
            "alice".parse().unwrap(),
            Role::Agent,
        )]);
        creds.set_added(update, vec!["alice".parse().unwrap()]);
        tokio::time::timeout(Duration::from_secs(1), gone)
            .await
            .unwrap();
        let table = creds.table();
        assert!(table.authenticate("alice-token").is_none());
        assert!(table.authenticate("alice-approver").is_none());
        assert_eq!(
            table.authenticate("alice-rotated").unwrap().account,
            "alice"
        );
        assert!(table.authenticate("bob-token").is_some());
        // The update no longer names it (the file's entry was edited since): the file's again.
        creds.set_added(TokenTable::default(), Vec::new());
        assert!(creds.table().authenticate("alice-token").is_some());
        assert!(creds.table().authenticate("alice-rotated").is_none());
    }

    #[test]
    fn header_beats_subprotocol() {
        let mut h = HeaderMap::new();
        h.insert(
            "sec-websocket-protocol",
            "glovebox.v1, bearer.p".parse().unwrap(),
        );
        assert_eq!(
            offered(&h),
            Offered {
                token: Some("p"),
                wants_subprotocol: true
            }
        );
        h.insert("authorization", "Bearer h".parse().unwrap());
        assert_eq!(offered(&h).token, Some("h"));
        let empty = HeaderMap::new();
        assert_eq!(
            offered(&empty),
            Offered {
                token: None,
                wants_subprotocol: false
            }
        );
        let mut basic = HeaderMap::new();
        basic.insert("authorization", "Basic YTpi".parse().unwrap());
        assert_eq!(offered(&basic).token, None);
    }
}
