//! Accounts changed at run time, on the supervisor's side. The gate writes
//! `<state>/accounts.yaml` (`glovebox account add|remove|set-workdir|...`, on its admin socket:
//! accounts added, and accounts of `glovebox.yaml` taken over by a change); the supervisor
//! follows the file (woken by a watch on the state directory's names, [`watch_state`], else
//! every [`FOLLOW_PERIOD`]), compares every account in effect with those whose
//! services run, and for each change, in this order:
//!
//! 1. tells the broker which accounts of `accounts.yaml` remain, with their credentials and
//!    owners (a removed account's tokens are refused at once and its connections close; a
//!    taken-over account's entry replaces what the broker read of it in `glovebox.yaml`);
//! 2. checks a new account as `up` does (its identity, workdir, roots, socket directory);
//! 3. tells the running gate who may call its audit socket (the keys of every account's executor
//!    and pack host, over its stdin) and checks that it took them ([`gate`]); the gate itself
//!    applied the accounts when it wrote the file, so no call is interrupted. Only a gate that
//!    does not take the change is restarted (fail closed, logged and audited);
//! 4. stops a removed account's executor and pack host and removes its socket directory;
//! 5. starts a new account's executor and pack host, under its identity;
//! 6. tells the broker of the new accounts' credentials and sockets.
//!
//! So an account's executor socket appears (or goes) only once the gate accepts (or refuses)
//! its keys: `glovebox account add|remove` waits for that.
//!
//! What to start and stop is [`plan`], pure. An account the supervisor refuses (its user gone,
//! its workdir missing, its roots holding the state) is logged and audited and stays stopped;
//! its tokens authenticate no one.

use glovebox_proto::audit_row::Outcome;
use std::collections::BTreeMap;
use std::time::Duration;

use glovebox_config::{Account, AccountId, StateDir, file_stamp};
use glovebox_proto::transport::handover::{AccountsUpdate, AddedAccount, ControlKeys};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::{Children, Exit, Running, Spec};
use crate::identity;

mod added;
mod gate;

pub(super) use added::Added;
use added::stop_child;

/// How often the supervisor looks at `accounts.yaml` when it cannot watch the state directory.
pub const FOLLOW_PERIOD: Duration = Duration::from_millis(300);
/// How often it looks all the same while it watches: the gate's every write of the file (a rename
/// into the directory) wakes it at once, so this only bounds how long a change made another way
/// (the file edited in place) waits.
pub const FOLLOW_WATCHED_PERIOD: Duration = Duration::from_secs(10);

/// A watch on the names in the state directory, through which the gate's writes of
/// `accounts.yaml` wake the supervisor at once, and nothing else wakes it while glovebox is idle
/// (the audit's log, written on every call, is written in place; its head, replaced at most 20
/// times a second under load, costs a look at one file's stamp). None where a watch could miss a
/// change (not a local file system) or none can be made: then the supervisor looks every
/// [`FOLLOW_PERIOD`].
pub fn watch_state(state: &StateDir) -> Option<glovebox_watch::DirWatcher> {
    if !glovebox_watch::on_local_file_system(state.root()) {
        return None;
    }
    let mut watcher = glovebox_watch::DirWatcher::start().ok()?;
    watcher.watch_entries(state.root()).ok()?;
    Some(watcher)
}

/// What one change asks of the supervisor.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Accounts whose services stop (removed, or changed in what their services are started with).
    pub stop: Vec<AccountId>,
    /// Accounts whose services start (new, or changed).
    pub start: Vec<AccountId>,
    /// Whether the broker must be told (any credential changed, or anything above).
    pub tell_broker: bool,
}

/// What an account's services are started with: a change in any of it restarts them.
fn started_with(a: &Account) -> impl PartialEq + '_ {
    (&a.workdir, &a.roots, &a.run_as, &a.owner, &a.job_env)
}

/// Compares the accounts running now with those the files name.
pub fn plan(running: &[Account], wanted: &[Account]) -> Plan {
    let now: BTreeMap<&AccountId, &Account> = running.iter().map(|a| (&a.id, a)).collect();
    let next: BTreeMap<&AccountId, &Account> = wanted.iter().map(|a| (&a.id, a)).collect();
    let mut p = Plan::default();
    for (id, a) in &now {
        match next.get(id) {
            None => p.stop.push((*id).clone()),
            Some(b) if started_with(a) != started_with(b) => {
                p.stop.push((*id).clone());
                p.start.push((*id).clone());
            }
            Some(b) => {
                if (&a.token_hashes, &a.approver_token_hashes)
                    != (&b.token_hashes, &b.approver_token_hashes)
                {
                    p.tell_broker = true;
                }
            }
        }
    }
    for id in next.keys() {
        if !now.contains_key(id) {
            p.start.push((*id).clone());
        }
    }
    p.tell_broker |= !p.stop.is_empty() || !p.start.is_empty();
    p
}

/// The broker's view of `accounts`.
pub(super) fn broker_update(
    state: &StateDir,
    keys: &ControlKeys,
    accounts: &[Account],
) -> AccountsUpdate {
    keys.accounts_update(
        accounts
            .iter()
            .map(|a| AddedAccount {
                id: a.id.to_string(),
                token_sha256: a.token_hashes.iter().map(hex::encode).collect(),
                approver_token_sha256: a.approver_token_hashes.iter().map(hex::encode).collect(),
                executor_socket: state.executor_socket(&a.id).display().to_string(),
                packs_socket: state.packs_socket(&a.id).display().to_string(),
                owner_uid: a
                    .owner
                    .as_deref()
                    .and_then(|n| nix::unistd::User::from_name(n).ok().flatten())
                    .map(|u| u.uid.as_raw()),
            })
            .collect(),
    )
}

/// The accounts of `accounts` whose entry in effect is in `accounts.yaml` (added at run time,
/// or taken over from `glovebox.yaml`): those the broker learns of from the supervisor, not from
/// the file it reads itself.
pub(super) fn from_store(state: &StateDir, accounts: &[Account]) -> Vec<Account> {
    use glovebox_config::added_accounts::{Source, source};
    let file = state
        .load_config_and_entries()
        .map(|(_, file)| file)
        .unwrap_or_default();
    let Ok((raw, _)) = state.load_added_accounts() else {
        return Vec::new();
    };
    accounts
        .iter()
        .filter(|a| {
            matches!(
                source(&file, &raw, &a.id),
                Some(Source::Added | Source::TakenOver)
            )
        })
        .cloned()
        .collect()
}

impl Added<'_> {
    /// Applies a change of `accounts.yaml`, if there is one.
    pub(super) async fn follow(
        &mut self,
        children: &Children<'_>,
        running: &mut Vec<Running>,
        exits: &mut mpsc::Receiver<Exit>,
    ) {
        let Some(merged) = self.changed_config(children).await else {
            return;
        };
        // Every account: one of glovebox.yaml changed at run time restarts like an added one.
        let wanted = merged.accounts.clone();
        let p = plan(&self.running, &wanted);
        if !p.tell_broker {
            return;
        }
        // 1. The broker first: a removed account's credentials stop at once (a changed account
        //    keeps its own, and its connections, while its services restart).
        let removed = self.forget_removed(&p, &wanted);
        self.tell_broker(running).await;
        // 2. The new accounts, checked as `up` checks them; 3. the gate, told.
        let accepted = self.check_new(&p.start, &wanted, &merged, children).await;
        if !p.stop.is_empty() || !accepted.is_empty() {
            let ids = self.gate_accounts(&merged, &wanted, &accepted);
            let new: Vec<AccountId> = accepted.iter().map(|(a, _)| a.id.clone()).collect();
            let change = gate::GateChange {
                ids: &ids,
                new: &new,
                removed: &removed,
            };
            self.update_gate(&merged, change, children, running, exits)
                .await;
        }
        // 4. The removed accounts' services (after the gate forgot them: once their socket is
        //    gone, the change is in effect).
        self.stop_accounts(&p.stop, children, running, exits).await;
        // 5. The new accounts' services.
        self.start_accounts(accepted, &merged, children, running)
            .await;
        // 6.
        self.tell_broker(running).await;
    }

    /// The accounts in effect if `accounts.yaml` changed since it was last applied (its stamp
    /// noted either way); `None` if it did not, or if they cannot be read (logged and audited).
    async fn changed_config(&mut self, children: &Children<'_>) -> Option<glovebox_config::Config> {
        let stamp = file_stamp(&self.state.added_accounts_file());
        if stamp == self.stamp {
            return None;
        }
        self.stamp = stamp;
        match self.state.load_merged_config() {
            Ok(c) => Some(c),
            Err(e) => {
                let why = format!("accounts not changed: {e}");
                tracing::error!(error = %why, "could not apply accounts.yaml");
                super::audit_service(children.audit, Outcome::Refused, &why).await;
                None
            }
        }
    }

    /// Drops the accounts `p` removes from those running and takes the entries in effect of the
    /// others; returns the removed accounts (stopped, not restarted).
    fn forget_removed(&mut self, p: &Plan, wanted: &[Account]) -> Vec<AccountId> {
        let removed: Vec<&AccountId> = p.stop.iter().filter(|id| !p.start.contains(id)).collect();
        self.running.retain(|a| !removed.contains(&&a.id));
        for a in &mut self.running {
            if let Some(b) = wanted.iter().find(|b| b.id == a.id) {
                *a = b.clone();
            }
        }
        removed.into_iter().cloned().collect()
    }

    /// The accounts of `start` that pass the checks `up` makes, each with its identity; one
    /// refused is logged, audited and no longer counted as running.
    async fn check_new(
        &mut self,
        start: &[AccountId],
        wanted: &[Account],
        merged: &glovebox_config::Config,
        children: &Children<'_>,
    ) -> Vec<(Account, identity::Identity)> {
        let mut accepted = Vec::new();
        for id in start {
            let Some(a) = wanted.iter().find(|a| &a.id == id) else {
                continue;
            };
            match self.check(a, merged) {
                Ok(identity) => accepted.push((a.clone(), identity)),
                Err(e) => {
                    let why = format!("account {id:?} not started: {e:#}");
                    tracing::error!(error = %why, "refused an added account");
                    super::audit_service(children.audit, Outcome::Refused, &why).await;
                    self.running.retain(|r| &r.id != id);
                }
            }
        }
        accepted
    }

    /// Every account whose executor and pack host may call the gate's audit socket: those not
    /// wanted any more (until they are stopped), those running and those just accepted.
    fn gate_accounts(
        &self,
        merged: &glovebox_config::Config,
        wanted: &[Account],
        accepted: &[(Account, identity::Identity)],
    ) -> Vec<AccountId> {
        merged
            .accounts
            .iter()
            .filter(|a| {
                !wanted.iter().any(|w| w.id == a.id)
                    || self.running.iter().any(|r| r.id == a.id)
                    || accepted.iter().any(|(r, _)| r.id == a.id)
            })
            .map(|a| a.id.clone())
            .collect()
    }

    /// Stops the executor and pack host of each account of `stop`, removes its socket directory
    /// and audits it.
    async fn stop_accounts(
        &self,
        stop: &[AccountId],
        children: &Children<'_>,
        running: &mut [Running],
        exits: &mut mpsc::Receiver<Exit>,
    ) {
        for id in stop {
            for name in [format!("executor[{id}]"), format!("packs[{id}]")] {
                stop_named(running, &name, exits, children.exits_tx).await;
            }
            let _ = std::fs::remove_dir_all(self.state.executor_run_dir(id));
            let detail = format!("account {id:?}: its executor and pack host stopped");
            super::audit_service(children.audit, Outcome::AccountStopped, &detail).await;
        }
    }

    /// Starts the services of each accepted account; those that start count as running.
    async fn start_accounts(
        &mut self,
        accepted: Vec<(Account, identity::Identity)>,
        merged: &glovebox_config::Config,
        children: &Children<'_>,
        running: &mut Vec<Running>,
    ) {
        for (a, identity) in accepted {
            let started = self
                .start_account(&a, &identity, merged, children, running)
                .await;
            self.running.retain(|r| r.id != a.id);
            if started {
                self.running.push(a);
            }
        }
    }

    /// The checks `up` makes of an account before starting it: its identity (system mode: its
    /// owner and run_as real, unprivileged users), its workdir a directory, its roots apart from
    /// the state.
    fn check(
        &self,
        a: &Account,
        merged: &glovebox_config::Config,
    ) -> anyhow::Result<identity::Identity> {
        anyhow::ensure!(
            a.workdir.is_dir(),
            "workdir {} is not a directory",
            a.workdir.display()
        );
        let one = glovebox_config::Config {
            accounts: vec![a.clone()],
            ..merged.clone()
        };
        let identity = match self.system_mode {
            Some(mode) => {
                crate::system::check_accounts(&one, &self.state.added_accounts_file(), &mode.users)?
                    .pop()
                    .ok_or_else(|| anyhow::anyhow!("no identity"))?
            }
            None => identity::resolve(a)?,
        };
        let trash = super::trash_of(&identity, self.o);
        super::check_placement(
            self.state,
            &one,
            std::slice::from_ref(&identity),
            std::slice::from_ref(&trash),
            self.o.home.as_deref(),
        )?;
        Ok(identity)
    }

    /// Makes the account's socket directory afresh, as `up` makes each.
    fn prepare_run_dir(&self, a: &Account, identity: &identity::Identity) -> anyhow::Result<()> {
        match self.system_mode {
            Some(mode) => {
                crate::system::prepare_account_sockets(self.state, &a.id, identity, &mode.users)?;
                crate::system::prepare_pack_homes(self.state, &[(a.id.as_str(), identity)])
            }
            None => identity::prepare_run_dir(self.state, &a.id, identity),
        }
    }

    /// Starts an account's executor and pack host; false (and nothing left running) if either
    /// does not start.
    async fn start_account(
        &self,
        a: &Account,
        identity: &identity::Identity,
        merged: &glovebox_config::Config,
        children: &Children<'_>,
        running: &mut Vec<Running>,
    ) -> bool {
        let protected = match std::fs::canonicalize(self.state.root()) {
            Ok(p) => p.display().to_string(),
            Err(_) => return false,
        };
        if let Err(e) = self.prepare_run_dir(a, identity) {
            let why = format!("account {:?} not started: {e:#}", a.id);
            tracing::error!(error = %why, "could not start an added account");
            super::audit_service(children.audit, Outcome::Refused, &why).await;
            return false;
        }
        let trash = super::trash_of(identity, self.o);
        let mut specs: Vec<Spec> = super::account_specs(
            self.state,
            a,
            identity,
            &trash,
            &protected,
            self.keys,
            self.master,
            self.system_mode,
        )
        .into();
        if let Err(e) =
            super::finish_specs(&mut specs, self.state, merged, self.o, self.system_mode)
        {
            tracing::error!(error = %format!("{e:#}"), "could not start an added account");
            return false;
        }
        for spec in specs {
            let index = running.len();
            match super::start(children.exe, &spec, index, 0, children.exits_tx).await {
                Ok(r) => running.push(r),
                Err(e) => {
                    let why = format!("account {:?}: {} did not start: {e:#}", a.id, spec.name);
                    tracing::error!(error = %why, "could not start an added account");
                    super::audit_service(children.audit, Outcome::Refused, &why).await;
                    for name in [format!("executor[{}]", a.id), format!("packs[{}]", a.id)] {
                        retire_named(running, &name);
                    }
                    return false;
                }
            }
        }
        let detail = format!(
            "account {:?}: its executor and pack host started (workdir {})",
            a.id,
            a.workdir.display()
        );
        super::audit_service(children.audit, Outcome::AccountStarted, &detail).await;
        true
    }

    /// Tells the running broker of the added accounts, and makes it what a restarted broker is
    /// told after its handover.
    async fn tell_broker(&self, running: &mut [Running]) {
        let update = broker_update(
            self.state,
            self.keys,
            &from_store(self.state, &self.running),
        );
        let Some(broker) = running.iter_mut().find(|r| r.spec.name == "broker") else {
            return;
        };
        if let Some(line) = &broker.spec.stdin_line {
            let handover = line.lines().next().unwrap_or_default();
            broker.spec.stdin_line = Some(format!("{handover}\n{}", update.to_line()));
        }
        if let Some(stdin) = broker.stdin.as_mut() {
            let line = update.to_line();
            if let Err(e) = async {
                stdin.write_all(line.as_bytes()).await?;
                stdin.flush().await
            }
            .await
            {
                tracing::warn!(error = %e, "could not tell the broker of the accounts; it restarts with them");
            }
        }
    }
}

/// Stops the running child named `name` without waiting (its lifeline closed, SIGTERM) and
/// marks it gone for good: its exit is not a restart.
fn retire_named(running: &mut [Running], name: &str) {
    for r in running
        .iter_mut()
        .filter(|r| r.spec.name == name && !r.retired)
    {
        r.retired = true;
        r.stdin = None;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(r.pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
}

/// Stops the child named `name` and retires it.
async fn stop_named(
    running: &mut [Running],
    name: &str,
    exits: &mut mpsc::Receiver<Exit>,
    exits_tx: &mpsc::Sender<Exit>,
) {
    if let Some(index) = running
        .iter()
        .position(|r| r.spec.name == name && !r.retired)
    {
        stop_child(running, index, exits, exits_tx).await;
        running[index].retired = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(id: &str) -> AccountId {
        AccountId::parse(id).unwrap()
    }

    fn account(id_: &str, workdir: &str, token: u8) -> Account {
        Account {
            id: id(id_),
            workdir: workdir.into(),
            roots: vec![workdir.into()],
            run_as: None,
            owner: None,
            job_env: vec![],
            pack_env: Vec::new(),
            sandbox: Default::default(),
            enabled: true,
            token_hashes: vec![[token; 32]],
            approver_token_hashes: vec![],
        }
    }

    #[test]
    fn plans() {
        let a = account("a", "/a", 1);
        let b = account("b", "/b", 2);
        let cases: Vec<(&str, Vec<Account>, Vec<Account>, Plan)> = vec![
            (
                "nothing changed",
                vec![a.clone()],
                vec![a.clone()],
                Plan::default(),
            ),
            (
                "added",
                vec![a.clone()],
                vec![a.clone(), b.clone()],
                Plan {
                    start: vec![id("b")],
                    tell_broker: true,
                    ..Plan::default()
                },
            ),
            (
                "removed",
                vec![a.clone(), b.clone()],
                vec![b.clone()],
                Plan {
                    stop: vec![id("a")],
                    tell_broker: true,
                    ..Plan::default()
                },
            ),
            (
                "moved to another workdir: restarted",
                vec![a.clone()],
                vec![account("a", "/elsewhere", 1)],
                Plan {
                    stop: vec![id("a")],
                    start: vec![id("a")],
                    tell_broker: true,
                },
            ),
            (
                "a new token: only the broker",
                vec![a.clone()],
                vec![account("a", "/a", 9)],
                Plan {
                    tell_broker: true,
                    ..Plan::default()
                },
            ),
            (
                "switched off: nothing to restart",
                vec![a.clone()],
                vec![Account {
                    enabled: false,
                    ..a.clone()
                }],
                Plan::default(),
            ),
        ];
        for (name, now, next, wanted) in cases {
            assert_eq!(plan(&now, &next), wanted, "{name}");
        }
    }

    #[test]
    fn the_broker_hears_of_each_added_account_with_its_sockets_and_hashes() {
        let state = StateDir::new("/s");
        let keys = ControlKeys::from_bytes(&[4; 32]).unwrap();
        let update = broker_update(&state, &keys, &[account("n", "/n", 7)]);
        assert_eq!(update.accounts.len(), 1);
        let n = &update.accounts[0];
        assert_eq!(n.token_sha256, vec!["07".repeat(32)]);
        assert_eq!(
            n.executor_socket,
            state.executor_socket("n").display().to_string()
        );
        assert!(update.calling("executor:n").is_ok() && update.calling("packs:n").is_ok());
    }
}
