//! When an account's pack tools change (a pack finished starting, was added, removed or
//! reconfigured, or stopped offering a tool), MCP clients of that account are told with
//! `notifications/tools/list_changed`, so a pack's tools enter the one tool list at run time.
//!
//! Every listing of an account's pack tools records their names here; a listing that differs
//! from the last one bumps the account's generation. While an MCP session of the account is
//! open, the account's packs are listed again every [`POLL_EVERY`], so a pack that was still
//! starting at `initialize` reaches the client without the client asking.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::app::App;
use crate::sync::lock;

/// How often an account with an open MCP session has its pack tools listed again.
pub const POLL_EVERY: Duration = Duration::from_secs(2);

struct Account {
    names: Option<BTreeSet<String>>,
    generation: watch::Sender<u64>,
    polling: bool,
}

/// Each account's last listed pack tool names and the generation that changes with them.
#[derive(Default)]
pub struct ToolChanges {
    accounts: Mutex<HashMap<String, Account>>,
}

impl ToolChanges {
    fn with<T>(&self, account: &str, f: impl FnOnce(&mut Account) -> T) -> T {
        let mut accounts = lock(&self.accounts);
        let entry = accounts
            .entry(account.to_owned())
            .or_insert_with(|| Account {
                names: None,
                generation: watch::channel(0).0,
                polling: false,
            });
        f(entry)
    }

    /// Records what a listing of `account`'s pack tools found; returns whether it changed.
    pub fn saw(&self, account: &str, names: BTreeSet<String>) -> bool {
        self.with(account, |a| {
            let changed = a.names.as_ref().is_some_and(|old| *old != names);
            a.names = Some(names);
            if changed {
                a.generation.send_modify(|g| *g += 1);
            }
            changed
        })
    }

    /// The account's generation, to wait on.
    pub fn subscribe(&self, account: &str) -> watch::Receiver<u64> {
        self.with(account, |a| a.generation.subscribe())
    }

    /// Whether the caller should start polling `account` (nobody polls it yet).
    fn start_polling(&self, account: &str) -> bool {
        self.with(account, |a| !std::mem::replace(&mut a.polling, true))
    }

    /// Stops polling `account` if nobody is subscribed any more; returns whether it stopped.
    fn stop_polling_if_unwatched(&self, account: &str) -> bool {
        self.with(account, |a| {
            if a.generation.receiver_count() == 0 {
                a.polling = false;
                true
            } else {
                false
            }
        })
    }
}

/// Tells `peer` whenever `account`'s tools change, until it goes away; keeps the account's
/// packs listed while anyone watches.
pub fn watch_for(app: Arc<App>, account: String, peer: rmcp::Peer<rmcp::RoleServer>) {
    let mut generation = app.tool_changes.subscribe(&account);
    if app.tool_changes.start_polling(&account) {
        let (app, account) = (app.clone(), account.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(POLL_EVERY).await;
                if app.tool_changes.stop_polling_if_unwatched(&account) {
                    return;
                }
                // Records the names (and bumps the generation) as a side effect.
                let _ = crate::packs::tool_specs(&app, &account).await;
            }
        });
    }
    tokio::spawn(async move {
        while generation.changed().await.is_ok() {
            if peer.notify_tool_list_changed().await.is_err() || peer.is_transport_closed() {
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn the_generation_moves_only_when_the_names_change() {
        let changes = ToolChanges::default();
        let rx = changes.subscribe("a");
        assert!(
            !changes.saw("a", set(&[])),
            "the first listing is no change"
        );
        assert!(!changes.saw("a", set(&[])));
        assert!(changes.saw("a", set(&["p__x"])));
        assert!(!changes.saw("a", set(&["p__x"])));
        assert!(
            !changes.saw("b", set(&["p__y"])),
            "another account's first listing"
        );
        assert!(changes.saw("a", set(&[])));
        assert_eq!(*rx.borrow(), 2);
    }

    #[test]
    fn polling_stops_when_nobody_watches() {
        let changes = ToolChanges::default();
        let rx = changes.subscribe("a");
        assert!(changes.start_polling("a"));
        assert!(!changes.start_polling("a"));
        assert!(!changes.stop_polling_if_unwatched("a"));
        drop(rx);
        assert!(changes.stop_polling_if_unwatched("a"));
        assert!(changes.start_polling("a"));
    }
}
