//! The gate's accounts while it runs. What the gate holds per account (its paths and compiled
//! policy, its switch, its followed `mcp.json`) is rebuilt from `glovebox.yaml` and
//! `accounts.yaml` ([`load`]) whenever the accounts change: right after the gate's own write of
//! `accounts.yaml` (it is the file's only writer), and on each update from the supervisor. Who
//! may call the audit socket (each account's executor and pack host: their keys, and in system
//! mode their uids) comes only from the supervisor, which derives those keys, over the gate's
//! stdin ([`AuditPeers`]): a job cannot write there.
//!
//! An executor or pack host is served only while both agree: its key is granted (checked at the
//! handshake) and its account is in the table (checked on every call, so a connection opened
//! before its account was removed gets nothing more). An account the gate cannot resolve, or a
//! change it cannot apply, leaves the account out: it is unknown, and denied.
//!
//! [`diff`] is the pure comparison of two tables, for the log and the audit.

use std::collections::HashMap;
use std::path::PathBuf;

use glovebox_config::{Account, AccountId, ConfigError, StateDir};
use glovebox_proto::audit_row::{Outcome, RowKind, Source};
use glovebox_proto::transport::handover::AuditPeers;
use glovebox_proto::v1 as pb;

use crate::policies::AccountPaths;
use crate::service::GateState;

/// One reload at a time: each reads the files and applies what it read, so a reload that read
/// an older file never lands after one that read a newer (a removed account never comes back).
static RELOAD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What changed between two account tables.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Diff {
    pub added: Vec<AccountId>,
    pub removed: Vec<AccountId>,
    /// Accounts whose workdir or roots changed.
    pub moved: Vec<AccountId>,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.moved.is_empty()
    }
}

/// Compares the accounts the gate holds (`old`) with those it is to hold (`new`).
pub fn diff(old: &[AccountPaths], new: &[AccountPaths]) -> Diff {
    let before: HashMap<&str, &AccountPaths> = old.iter().map(|a| (a.id.as_str(), a)).collect();
    let after: HashMap<&str, &AccountPaths> = new.iter().map(|a| (a.id.as_str(), a)).collect();
    let mut d = Diff::default();
    for a in new {
        match before.get(a.id.as_str()) {
            None => d.added.push(a.id.clone()),
            Some(b) if *b != a => d.moved.push(a.id.clone()),
            Some(_) => {}
        }
    }
    d.removed = old
        .iter()
        .filter(|a| !after.contains_key(a.id.as_str()))
        .map(|a| a.id.clone())
        .collect();
    for list in [&mut d.added, &mut d.removed, &mut d.moved] {
        list.sort();
    }
    d
}

/// An account's canonical workdir and roots; the path that could not be resolved, and why.
pub fn canonical_paths(a: &Account) -> Result<AccountPaths, (PathBuf, String)> {
    let canonical = |path: &std::path::Path, what: &str| {
        std::fs::canonicalize(path)
            .map(|p| p.to_string_lossy().into_owned())
            .map_err(|e| {
                (
                    path.to_owned(),
                    format!("{what} of account {:?}: {e}", a.id),
                )
            })
    };
    Ok(AccountPaths {
        id: a.id.clone(),
        workdir: canonical(&a.workdir, "workdir")?,
        roots: a
            .roots
            .iter()
            .map(|r| canonical(r, "root"))
            .collect::<Result<_, _>>()?,
    })
}

/// The accounts as the files say now.
pub struct Table {
    pub paths: Vec<AccountPaths>,
    pub enabled: HashMap<AccountId, bool>,
    /// Accounts left out (their paths do not resolve), with why.
    pub left_out: Vec<(AccountId, String)>,
}

/// Reads `glovebox.yaml` and `accounts.yaml` into a [`Table`].
pub fn load(state: &StateDir) -> Result<Table, ConfigError> {
    let config = state.load_merged_config()?;
    let mut table = Table {
        paths: Vec::new(),
        enabled: HashMap::new(),
        left_out: Vec::new(),
    };
    for a in &config.accounts {
        match canonical_paths(a) {
            Ok(paths) => {
                table.paths.push(paths);
                table.enabled.insert(a.id.clone(), a.enabled);
            }
            Err((_, why)) => table.left_out.push((a.id.clone(), why)),
        }
    }
    Ok(table)
}

impl GateState {
    /// Re-reads the accounts and applies them (policies, switches, followed `mcp.json`); a
    /// change is logged. If the files cannot be read, `changed` (the account an admin call just
    /// wrote, if any) is left out until they can: unknown, so denied.
    pub(crate) async fn reload_accounts(&self, changed: Option<&str>) {
        let _one = RELOAD.lock().await;
        let state = self.state_dir.clone();
        let loaded = tokio::task::spawn_blocking(move || load(&state)).await;
        let table = match loaded {
            Ok(Ok(table)) => table,
            Ok(Err(e)) => return self.forget(changed, &e.to_string()).await,
            Err(e) => return self.forget(changed, &e.to_string()).await,
        };
        for (id, why) in &table.left_out {
            tracing::error!(account = %id, error = %why, "an account is left out: its paths do not resolve");
            self.audit_left_out(id, why).await;
        }
        let d = diff(&self.policies.accounts(), &table.paths);
        let ids: Vec<AccountId> = table.paths.iter().map(|a| a.id.clone()).collect();
        // The table first: from here a removed account's calls are refused.
        self.policies.set_accounts(table.paths);
        self.enablement.replace(table.enabled);
        self.packs.set_accounts(&ids);
        if !d.is_empty() {
            tracing::info!(added = ?d.added, removed = ?d.removed, moved = ?d.moved, "accounts applied");
            self.policies.load_all();
            self.flush_policy_events().await;
        }
    }

    /// Leaves `id` out of the table (fail closed when a change could not be applied).
    async fn forget(&self, id: Option<&str>, why: &str) {
        tracing::error!(error = %why, account = ?id, "could not re-read the accounts");
        let Some(id) = id else { return };
        let paths: Vec<AccountPaths> = self
            .policies
            .accounts()
            .into_iter()
            .filter(|a| a.id != id)
            .collect();
        let ids: Vec<AccountId> = paths.iter().map(|a| a.id.clone()).collect();
        self.policies.set_accounts(paths);
        self.packs.set_accounts(&ids);
        self.audit_left_out(id, why).await;
    }

    async fn audit_left_out(&self, id: &str, why: &str) {
        self.audit(pb::AuditEvent {
            source: Source::Gate.into(),
            kind: RowKind::Account.into(),
            account: id.to_owned(),
            outcome: Outcome::Unavailable.into(),
            detail: format!("left out until it can be applied: {why}"),
            ..Default::default()
        })
        .await;
    }

    /// Takes the supervisor's update of who may call the audit socket.
    pub(crate) fn set_audit_peers(&self, update: &AuditPeers) {
        let mut uids = glovebox_proto::transport::default_allowed_uids();
        for uid in &update.peer_uids {
            if !uids.contains(uid) {
                uids.push(*uid);
            }
        }
        self.audit_access.keys.replace(update.server_keys());
        self.audit_access.uids.replace(uids);
    }

    /// Whether `peer`, an account's executor or pack host, may be served now: its key still
    /// granted and its account still known. Other peers are not an account's and pass.
    pub(crate) fn account_peer_current(&self, peer: &str) -> bool {
        let account = peer
            .strip_prefix("executor:")
            .or_else(|| peer.strip_prefix("packs:"));
        match account {
            None => true,
            Some(id) => {
                self.audit_access.keys.contains(peer) && self.policies.workdir(id).is_some()
            }
        }
    }
}

/// Applies each update from the supervisor (who may call the audit socket, then the accounts
/// re-read) until the updates end.
pub async fn follow(
    state: std::sync::Weak<GateState>,
    mut updates: tokio::sync::watch::Receiver<Option<AuditPeers>>,
) {
    loop {
        let update = updates.borrow_and_update().clone();
        if let Some(update) = update {
            let Some(state) = state.upgrade() else { return };
            state.set_audit_peers(&update);
            state.reload_accounts(None).await;
            tracing::info!(peers = ?update, "audit socket peers updated");
        }
        if updates.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(id: &str, workdir: &str, roots: &[&str]) -> AccountPaths {
        AccountPaths {
            id: id.parse().unwrap(),
            workdir: workdir.into(),
            roots: roots.iter().map(|r| (*r).to_owned()).collect(),
        }
    }

    #[test]
    fn diffs() {
        let a = paths("a", "/a", &["/a"]);
        let b = paths("b", "/b", &["/b"]);
        let ids = |v: &[&str]| {
            v.iter()
                .map(|s| s.parse().unwrap())
                .collect::<Vec<AccountId>>()
        };
        let cases: Vec<(&str, Vec<AccountPaths>, Vec<AccountPaths>, Diff)> = vec![
            ("same", vec![a.clone()], vec![a.clone()], Diff::default()),
            (
                "added",
                vec![a.clone()],
                vec![b.clone(), a.clone()],
                Diff {
                    added: ids(&["b"]),
                    ..Diff::default()
                },
            ),
            (
                "removed",
                vec![a.clone(), b.clone()],
                vec![b.clone()],
                Diff {
                    removed: ids(&["a"]),
                    ..Diff::default()
                },
            ),
            (
                "moved",
                vec![a.clone()],
                vec![paths("a", "/elsewhere", &["/elsewhere"])],
                Diff {
                    moved: ids(&["a"]),
                    ..Diff::default()
                },
            ),
            (
                "a root added",
                vec![a.clone()],
                vec![paths("a", "/a", &["/a", "/data"])],
                Diff {
                    moved: ids(&["a"]),
                    ..Diff::default()
                },
            ),
            (
                "all at once",
                vec![a.clone(), b.clone()],
                vec![paths("b", "/b2", &["/b2"]), paths("c", "/c", &["/c"])],
                Diff {
                    added: ids(&["c"]),
                    removed: ids(&["a"]),
                    moved: ids(&["b"]),
                },
            ),
        ];
        for (name, old, new, wanted) in cases {
            assert_eq!(diff(&old, &new), wanted, "{name}");
        }
        assert!(diff(std::slice::from_ref(&a), std::slice::from_ref(&a)).is_empty());
    }
}
