//! A version counter per account for its tool list ([`ToolChanges`], part of the broker's
//! state): each change bumps it, and every front door listening about the account wakes.

use std::collections::HashMap;
use std::sync::Mutex;

use glovebox_config::AccountId;
use tokio::sync::watch;

/// A version counter per account, bumped on every change.
#[derive(Default)]
pub struct ToolChanges {
    accounts: Mutex<HashMap<AccountId, watch::Sender<u64>>>,
}

impl ToolChanges {
    fn sender(&self, account: &AccountId) -> watch::Sender<u64> {
        crate::sync::lock(&self.accounts)
            .entry(account.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .clone()
    }

    /// Wakes on every later change of `account`'s tools.
    pub fn subscribe(&self, account: &AccountId) -> watch::Receiver<u64> {
        self.sender(account).subscribe()
    }

    /// Says that `account`'s tools may have changed.
    pub fn changed(&self, account: &AccountId) {
        self.sender(account).send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Accounts someone is listening about now.
    pub(crate) fn listened(&self) -> Vec<AccountId> {
        crate::sync::lock(&self.accounts)
            .iter()
            .filter(|(_, s)| s.receiver_count() > 0)
            .map(|(a, _)| a.clone())
            .collect()
    }
}
