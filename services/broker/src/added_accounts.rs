//! The accounts added at run time, as the supervisor tells the broker of them (one
//! [`AccountsUpdate`] line on the broker's stdin per change): their credentials join the
//! table `auth` authenticates with, and their executors and pack hosts the backends. An account
//! an update no longer names is gone at once: its tokens are refused, its connections close (they
//! wait on `App::unauthorized`: its owner's approve-socket and console connections too), and no
//! call reaches its executor.

use std::sync::Weak;

use glovebox_config::AccountId;
use glovebox_proto::transport::handover::{AccountsUpdate, AddedAccount};
use glovebox_proto::ws::Role;
use tokio::sync::watch;

use crate::app::App;
use crate::auth::TokenTable;

/// The latest update (none before the first).
pub type Updates = watch::Receiver<Option<AccountsUpdate>>;

/// The accounts of an update, each with its id checked once here; an entry whose id cannot name
/// an account is left out (and logged): it gets no backend, credential or owner.
pub fn accepted(update: &AccountsUpdate) -> Vec<(AccountId, &AddedAccount)> {
    let mut accepted = Vec::new();
    for a in &update.accounts {
        match AccountId::parse(&a.id) {
            Ok(id) => accepted.push((id, a)),
            Err(_) => tracing::warn!("an added account's id cannot name an account; ignored"),
        }
    }
    accepted
}

/// The credentials the `accepted` accounts of an update are granted. An entry whose hash is not
/// 64 hex digits is left out (and logged): it authenticates no one.
pub fn token_table(accepted: &[(AccountId, &AddedAccount)]) -> TokenTable {
    let mut entries = Vec::new();
    for (id, a) in accepted {
        for (hashes, role) in [
            (&a.token_sha256, Role::Agent),
            (&a.approver_token_sha256, Role::Approver),
        ] {
            for h in hashes {
                let mut hash = [0u8; 32];
                match hex::decode_to_slice(h, &mut hash) {
                    Ok(()) => entries.push((hash, id.clone(), role)),
                    Err(_) => {
                        tracing::warn!(account = %a.id, "an added account's credential is not a SHA-256; ignored")
                    }
                }
            }
        }
    }
    TokenTable::new(entries)
}

/// Applies one update: the backends first, so a credential is never accepted before its
/// account's executor can be reached.
pub fn apply(app: &App, update: &AccountsUpdate) {
    let accepted = accepted(update);
    let ids: Vec<AccountId> = accepted.iter().map(|(id, _)| id.clone()).collect();
    if let Err(e) = app.backends.set_added(update, &accepted) {
        // Fail closed: without a backend, its credentials are not accepted either.
        tracing::error!(error = %e, "an accounts update lacks a key; its accounts are refused");
        app.credentials.set_added(TokenTable::default(), ids);
        return;
    }
    *app.added_owners.write().unwrap_or_else(|p| p.into_inner()) = accepted
        .iter()
        .filter_map(|(id, a)| Some((id.clone(), a.owner_uid?)))
        .collect();
    app.credentials
        .set_added(token_table(&accepted), ids.clone());
    tracing::info!(accounts = ?ids, "accounts added at run time");
}

/// Applies each update until the broker or the updates end.
pub async fn follow(app: Weak<App>, mut updates: Updates) {
    loop {
        let update = updates.borrow_and_update().clone();
        if let Some(update) = update {
            let Some(app) = app.upgrade() else { return };
            apply(&app, &update);
        }
        if updates.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry whose id could name a path or an option grants nothing: no credential, and it is
    /// not among the accounts the backends and owners are made for.
    #[test]
    fn an_entry_whose_id_cannot_name_an_account_is_left_out() {
        let entry = |id: &str| AddedAccount {
            id: id.into(),
            token_sha256: vec![hex::encode(glovebox_config::token_hash(id))],
            owner_uid: Some(1000),
            ..Default::default()
        };
        let update = AccountsUpdate {
            accounts: vec![entry("../etc"), entry("-x"), entry(""), entry("ok")],
            call: vec![],
        };
        let accepted = accepted(&update);
        let ids: Vec<&str> = accepted.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["ok"]);
        let table = token_table(&accepted);
        for bad in ["../etc", "-x", ""] {
            assert!(table.authenticate(bad).is_none(), "{bad:?}");
        }
        assert_eq!(
            table.authenticate("ok").map(|a| a.account),
            Some("ok".parse().unwrap())
        );
    }

    #[test]
    fn an_update_grants_each_role_its_own_credentials() {
        let update = AccountsUpdate {
            accounts: vec![AddedAccount {
                id: "new".into(),
                token_sha256: vec![hex::encode(glovebox_config::token_hash("agent"))],
                approver_token_sha256: vec![
                    hex::encode(glovebox_config::token_hash("approver")),
                    "not hex".into(),
                ],
                ..Default::default()
            }],
            call: vec![],
        };
        let table = token_table(&accepted(&update));
        let who = |t: &str| table.authenticate(t).map(|a| (a.account, a.role));
        assert_eq!(who("agent"), Some(("new".parse().unwrap(), Role::Agent)));
        assert_eq!(
            who("approver"),
            Some(("new".parse().unwrap(), Role::Approver))
        );
        assert_eq!(who("not hex"), None);
        assert!(
            token_table(&accepted(&AccountsUpdate::default()))
                .authenticate("agent")
                .is_none()
        );
    }
}
