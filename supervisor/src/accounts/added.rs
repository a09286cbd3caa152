//! What the supervisor holds of the accounts it follows ([`Added`]), and how one of their
//! children is stopped ([`stop_child`]): shared by following the files (`accounts.rs`) and
//! restarting the gate with their keys (`accounts/gate.rs`).

use glovebox_config::{Account, FileStamp, StateDir};
use glovebox_proto::transport::handover::ControlKeys;
use tokio::sync::mpsc;

use crate::{Exit, Running, SystemMode, UpOptions};

/// What the supervisor knows of the added accounts.
pub(crate) struct Added<'a> {
    pub state: &'a StateDir,
    pub o: &'a UpOptions,
    pub system_mode: Option<&'a SystemMode>,
    pub keys: &'a ControlKeys,
    pub master: &'a glovebox_ticket::MasterKey,
    /// The file's stamp when last applied.
    pub stamp: Option<FileStamp>,
    /// The accounts whose services run (glovebox.yaml's and those added), as last applied.
    pub running: Vec<Account>,
}

/// Stops child `index` (its lifeline closed, SIGTERM, SIGKILL after the grace) and waits for its
/// exit; other children's exits seen meanwhile are queued again for the supervisor.
pub(super) async fn stop_child(
    running: &mut [Running],
    index: usize,
    exits: &mut mpsc::Receiver<Exit>,
    exits_tx: &mpsc::Sender<Exit>,
) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let r = &mut running[index];
    r.stdin = None;
    let pid = Pid::from_raw(r.pid as i32);
    let _ = kill(pid, Signal::SIGTERM);
    let mut others = Vec::new();
    let mut exited = false;
    let deadline = tokio::time::Instant::now() + crate::STOP_GRACE;
    while !exited {
        match tokio::time::timeout_at(deadline, exits.recv()).await {
            Ok(Some((who, generation, _))) if who == index && generation == r.generation => {
                exited = true;
            }
            Ok(Some(other)) => others.push(other),
            Ok(None) => break,
            Err(_) => {
                tracing::warn!(child = %r.spec.name, "did not stop in time; killing it");
                let _ = kill(pid, Signal::SIGKILL);
                // Its exit is still reported; wait for it so the pid is not reused under us.
                let _ = tokio::time::timeout(crate::STOP_GRACE, async {
                    loop {
                        match exits.recv().await {
                            Some((who, g, _)) if who == index && g == r.generation => return,
                            Some(other) => others.push(other),
                            None => return,
                        }
                    }
                })
                .await;
                break;
            }
        }
    }
    for other in others {
        let _ = exits_tx.try_send(other);
    }
}
