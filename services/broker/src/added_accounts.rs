//! The accounts added at run time, as the supervisor tells the broker of them (one
//! [`AccountsUpdate`] line on the broker's stdin per change): their credentials join the
//! table `auth` authenticates with, and their executors and pack hosts the backends. An account
//! an update no longer names is gone at once: its tokens are refused, its connections close (they
//! wait on `App::unauthorized`: its owner's approve-socket and console connections too), and no
//! call reaches its executor.

use std::sync::Weak;

use glovebox_config::AccountId;
use glovebox_proto::transport::handover::AccountsUpdate;
use glovebox_proto::ws::Role;
use tokio::sync::watch;

use crate::app::App;
use crate::auth::TokenTable;

/// The latest update (none before the first).
pub type Updates = watch::Receiver<Option<AccountsUpdate>>;

/// The credentials an update grants. An entry whose hash is not 64 hex digits is left out (and
/// logged): it authenticates no one.
pub fn token_table(update: &AccountsUpdate) -> TokenTable {
    let mut entries = Vec::new();
    for a in &update.accounts {
        let Ok(id) = AccountId::parse(&a.id) else {
            tracing::warn!("an added account's id cannot name an account; ignored");
            continue;
        };
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
    let ids: Vec<AccountId> = update
        .accounts
        .iter()
        .filter_map(|a| AccountId::parse(&a.id).ok())
        .collect();
    if let Err(e) = app.backends.set_added(update) {
        // Fail closed: without a backend, its credentials are not accepted either.
        tracing::error!(error = %e, "an accounts update lacks a key; its accounts are refused");
        app.credentials.set_added(TokenTable::default(), ids);
        return;
    }
    *app.added_owners.write().unwrap_or_else(|p| p.into_inner()) = update
        .accounts
        .iter()
        .filter_map(|a| Some((AccountId::parse(&a.id).ok()?, a.owner_uid?)))
        .collect();
    app.credentials.set_added(token_table(update), ids.clone());
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
    use glovebox_proto::transport::handover::AddedAccount;

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
        let table = token_table(&update);
        let who = |t: &str| table.authenticate(t).map(|a| (a.account, a.role));
        assert_eq!(who("agent"), Some(("new".parse().unwrap(), Role::Agent)));
        assert_eq!(
            who("approver"),
            Some(("new".parse().unwrap(), Role::Approver))
        );
        assert_eq!(who("not hex"), None);
        assert!(
            token_table(&AccountsUpdate::default())
                .authenticate("agent")
                .is_none()
        );
    }
}
