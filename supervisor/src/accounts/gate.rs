//! Telling the running gate of an account change. The gate applies the accounts to itself when
//! it writes `accounts.yaml`; what only the supervisor can give it is who may call its audit
//! socket (the keys it derives for each account's executor and pack host, and the uids they run
//! as). That goes over the gate's stdin as one [`AuditPeers`] line, and the supervisor then
//! checks that the gate took it: each new account's executor key is accepted at a handshake on
//! the audit socket, each removed account's refused ([`APPLY_TIMEOUT`]). If the line cannot be
//! written or the check fails, the gate is restarted with every key in its handover: the
//! fail-closed fallback, logged and audited.

use glovebox_proto::audit_row::Outcome;
use std::time::Duration;

use glovebox_config::AccountId;
use glovebox_proto::transport::handover::{AuditPeers, peer, socket};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::super::{Children, Exit, Running};
use super::added::{Added, stop_child};
use crate::identity;

/// How long the gate has to take an update before it is restarted instead.
pub const APPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the supervisor checks whether the gate took an update.
const CHECK_EVERY: Duration = Duration::from_millis(20);

/// The accounts the gate serves after a change, and what the change was.
pub(super) struct GateChange<'a> {
    /// Every account whose executor and pack host may call the audit socket.
    pub ids: &'a [AccountId],
    /// Accounts whose keys are new to the gate (added, or restarted with a change).
    pub new: &'a [AccountId],
    /// Accounts whose keys the gate must refuse from now on.
    pub removed: &'a [AccountId],
}

impl Added<'_> {
    /// Tells the gate of `change`, restarting it only if it does not take it.
    pub(super) async fn update_gate(
        &self,
        merged: &glovebox_config::Config,
        change: GateChange<'_>,
        children: &Children<'_>,
        running: &mut [Running],
        exits: &mut mpsc::Receiver<Exit>,
    ) {
        let Some(spec) = self.gate_spec_for(merged, change.ids) else {
            return;
        };
        let Some(index) = running.iter().position(|r| r.spec.name == "gate") else {
            return;
        };
        let uids: Vec<u32> = self
            .identities_of(merged, change.ids)
            .iter()
            .filter(|i| i.drops)
            .map(|i| i.uid)
            .collect();
        let update = self
            .keys
            .audit_peers(change.ids.iter().map(AccountId::as_str), uids);
        // A gate that restarts from here on (a crash) starts with these keys.
        running[index].spec = spec.clone();
        let told = match running[index].stdin.as_mut() {
            Some(stdin) => write_line(stdin, &update).await,
            None => Err("its stdin is closed".to_owned()),
        };
        let checked = match told {
            Ok(()) => self.check_applied(&change).await,
            Err(e) => Err(format!("could not tell the gate: {e}")),
        };
        if let Err(why) = checked {
            let why = format!("the gate did not take the account change ({why}); restarting it");
            tracing::error!(error = %why, "restarting the gate");
            super::super::audit_service(children.audit, Outcome::Restarted, &why).await;
            restart(spec, index, children, running, exits).await;
        }
    }

    /// Waits until a handshake on the audit socket accepts each new account's executor key and
    /// refuses each removed one's.
    async fn check_applied(&self, change: &GateChange<'_>) -> Result<(), String> {
        let audit = self.state.audit_socket();
        let deadline = tokio::time::Instant::now() + APPLY_TIMEOUT;
        let wanted = change
            .new
            .iter()
            .map(|id| (id, true))
            .chain(change.removed.iter().map(|id| (id, false)));
        for (id, served) in wanted {
            let name = peer::executor(id);
            let key = self.keys.key(socket::AUDIT, &name);
            loop {
                let accepted =
                    glovebox_proto::transport::connect_authenticated(&audit, &name, &key)
                        .await
                        .is_ok();
                if accepted == served {
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    let state = if served { "refused" } else { "still accepted" };
                    return Err(format!("{name} {state} after {APPLY_TIMEOUT:?}"));
                }
                tokio::time::sleep(CHECK_EVERY).await;
            }
        }
        Ok(())
    }

    /// The identities of the accounts `ids` (those that resolve).
    fn identities_of(
        &self,
        merged: &glovebox_config::Config,
        ids: &[AccountId],
    ) -> Vec<identity::Identity> {
        let mut identities = Vec::new();
        for a in merged.accounts.iter().filter(|a| ids.contains(&a.id)) {
            match identity::resolve(a) {
                Ok(i) => identities.push(i),
                Err(e) => tracing::warn!(error = %format!("{e:#}"), "an account's identity"),
            }
        }
        identities
    }

    /// The gate's spec with the audit keys of `ids`' executors and pack hosts.
    fn gate_spec_for(
        &self,
        merged: &glovebox_config::Config,
        ids: &[AccountId],
    ) -> Option<super::super::Spec> {
        let identities = self.identities_of(merged, ids);
        let names: Vec<&str> = ids.iter().map(AccountId::as_str).collect();
        let mut spec = super::super::gate_spec(self.state, self.keys, &names, &identities);
        if let Err(e) = super::super::finish_specs(
            std::slice::from_mut(&mut spec),
            self.state,
            merged,
            self.o,
            self.system_mode,
        ) {
            tracing::error!(error = %format!("{e:#}"), "could not make the gate's spec");
            return None;
        }
        Some(spec)
    }
}

async fn write_line(
    stdin: &mut tokio::process::ChildStdin,
    update: &AuditPeers,
) -> Result<(), String> {
    async {
        stdin.write_all(update.to_line().as_bytes()).await?;
        stdin.flush().await
    }
    .await
    .map_err(|e| e.to_string())
}

/// Restarts the gate (child `index`) with `spec`.
async fn restart(
    spec: super::super::Spec,
    index: usize,
    children: &Children<'_>,
    running: &mut [Running],
    exits: &mut mpsc::Receiver<Exit>,
) {
    stop_child(running, index, exits, children.exits_tx).await;
    let generation = running[index].generation + 1;
    match super::super::start(children.exe, &spec, index, generation, children.exits_tx).await {
        Ok(r) => running[index] = r,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "the gate did not restart; retrying");
            running[index].spec = spec;
            running[index].generation = generation;
            let _ = children
                .exits_tx
                .try_send((index, generation, "failed to start".into()));
        }
    }
}
