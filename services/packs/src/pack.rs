//! One pack: its definition and its server's state. The server starts on first use (a list or a
//! call); its initialize and tools/list are cached while it runs; one that exited (or never
//! started, a command not found too) is started again on the next use, at once the first time
//! and then after a backoff that doubles up to [`MAX_BACKOFF`] (a server that ran
//! [`STABLE_AFTER`] starts over; a changed definition starts afresh). A failure is logged once
//! for each new reason, not at every retry. A call
//! has the pack's time limit; a call that times out or is dropped tells the server with
//! `notifications/cancelled` (rmcp sends it for an abandoned request). After a timeout the server
//! is sent a `ping`: one that does not answer within [`HUNG_PROBE`] is hung, and is stopped so the
//! next use starts it again (a server that is only slow at one tool keeps running). Stopping a
//! pack stops its shim, which takes every process the server started with it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use glovebox_config::mcp_json::PackDef;
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::ServiceError;

use crate::launch::{Launcher, Started};
use crate::progress::ProgressRelay;

/// The longest a failing pack waits before it is started again.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// A server that ran this long before it exited restarts without delay.
pub const STABLE_AFTER: Duration = Duration::from_secs(60);
/// Calls one pack's server may have in flight; more are refused as `busy` at once.
pub const MAX_CONCURRENT_CALLS: usize = 8;
/// How long a server has to answer a `ping` after one of its calls timed out before it is
/// taken for hung and stopped.
pub const HUNG_PROBE: Duration = Duration::from_secs(2);
/// How long a stopping server has to exit after SIGTERM before its shim kills it, and the shim
/// to exit after that.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// How long to wait before the next start, after `failures` failures in a row: none after the
/// first, then 1 s, doubling up to [`MAX_BACKOFF`].
pub fn restart_delay(failures: u32) -> Duration {
    match failures {
        0 | 1 => Duration::ZERO,
        n => (Duration::from_secs(1) * (1u32 << (n - 2).min(10))).min(MAX_BACKOFF),
    }
}

enum State {
    Idle,
    Running { started: Started, failures: u32 },
    Failed(Failure),
}

struct Failure {
    message: String,
    at: Instant,
    failures: u32,
}

/// Sends `notifications/cancelled` for request `id` when dropped while still set: the request
/// was abandoned (timed out, withdrawn) before its answer.
struct CancelOnDrop {
    peer: rmcp::Peer<rmcp::RoleClient>,
    id: Option<rmcp::model::RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let params = rmcp::model::CancelledNotificationParam::new(
                    Some(id),
                    Some("the call was withdrawn or timed out".to_owned()),
                );
                let _ = peer.notify_cancelled(params).await;
            });
        }
    }
}

/// Why a call did not return a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The pack could not be started (or is backing off).
    Unavailable(String),
    /// The server did not answer within the pack's time limit (it was told to cancel).
    Timeout(Duration),
    /// The server exited during the call; it is started again on the next use.
    Exited,
    Failed(String),
    /// [`MAX_CONCURRENT_CALLS`] calls of this pack are in flight.
    Busy,
}

/// One configured pack.
pub struct Pack {
    pub def: PackDef,
    state: tokio::sync::Mutex<State>,
    calls: tokio::sync::Semaphore,
}

impl Pack {
    pub fn new(def: PackDef) -> Pack {
        Pack {
            def,
            state: tokio::sync::Mutex::new(State::Idle),
            calls: tokio::sync::Semaphore::new(MAX_CONCURRENT_CALLS),
        }
    }

    /// The running server's peer and tools, starting it first if it is not running (and may be
    /// started now).
    pub async fn ensure(
        &self,
        launcher: &Launcher,
    ) -> Result<(rmcp::Peer<rmcp::RoleClient>, Arc<Vec<Tool>>), String> {
        let (peer, tools, _) = self.ensure_with_relay(launcher).await?;
        Ok((peer, tools))
    }

    /// [`Pack::ensure`], with the session's progress relay.
    async fn ensure_with_relay(
        &self,
        launcher: &Launcher,
    ) -> Result<(rmcp::Peer<rmcp::RoleClient>, Arc<Vec<Tool>>, ProgressRelay), String> {
        let mut state = self.state.lock().await;
        if let State::Running { started, failures } = &*state {
            if !started.service.is_transport_closed() && !started.service.is_closed() {
                return Ok((
                    started.service.peer().clone(),
                    started.tools.clone(),
                    started.service.service().clone(),
                ));
            }
            let failures = if started.started.elapsed() > STABLE_AFTER {
                1
            } else {
                failures + 1
            };
            let tail = started.tail.text();
            let message = if tail.is_empty() {
                "the server exited".to_owned()
            } else {
                format!("the server exited; its stderr ends: {tail}")
            };
            tracing::warn!(pack = %self.def.name, failures, "pack server exited");
            *state = State::Failed(Failure {
                message,
                at: Instant::now(),
                failures,
            });
        }
        let failures = match &*state {
            State::Failed(f) => {
                let wait = restart_delay(f.failures);
                if f.at.elapsed() < wait {
                    let left = wait.saturating_sub(f.at.elapsed());
                    return Err(format!(
                        "{}; starting it again in {} s",
                        f.message,
                        left.as_secs().max(1)
                    ));
                }
                f.failures
            }
            _ => 0,
        };
        match launcher.start(&self.def).await {
            Ok(started) => {
                let ok = (
                    started.service.peer().clone(),
                    started.tools.clone(),
                    started.service.service().clone(),
                );
                *state = State::Running { started, failures };
                Ok(ok)
            }
            Err(e) => {
                // Said once for each new reason, not at every retry of the same one.
                let repeated = matches!(&*state, State::Failed(f) if f.message == e.message);
                if repeated {
                    tracing::debug!(pack = %self.def.name, error = %e.message, "pack did not start again");
                } else {
                    tracing::warn!(pack = %self.def.name, error = %e.message, "pack did not start");
                }
                // Every failure backs off, one that started nothing (a command not found) too: a
                // change of the pack's definition starts it afresh at once.
                *state = State::Failed(Failure {
                    message: e.message.clone(),
                    at: Instant::now(),
                    failures: failures + 1,
                });
                Err(e.message)
            }
        }
    }

    /// Calls `tool` with `arguments`, within `limit`; the server's progress notifications for
    /// the call go to `progress`, if given.
    pub async fn call(
        &self,
        launcher: &Launcher,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        limit: Duration,
        progress: Option<tokio::sync::mpsc::Sender<glovebox_proto::v1::PackProgress>>,
    ) -> Result<CallToolResult, CallError> {
        let _slot = self.calls.try_acquire().map_err(|_| CallError::Busy)?;
        let (peer, _, relay) = self
            .ensure_with_relay(launcher)
            .await
            .map_err(CallError::Unavailable)?;
        let shim = self.shim_pid().await;
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let answered = async {
            let request =
                rmcp::model::ClientRequest::CallToolRequest(rmcp::model::Request::new(params));
            let handle = peer
                .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
                .await?;
            // Followed until the answer, a timeout or a withdrawal drops this.
            let _following = progress.map(|to| relay.following(handle.progress_token.clone(), to));
            // A call given up (a timeout, a withdrawal) is cancelled at the server.
            let mut abandoned = CancelOnDrop {
                peer: peer.clone(),
                id: Some(handle.id.clone()),
            };
            let answer = handle.await_response().await;
            abandoned.id = None;
            match answer? {
                rmcp::model::ServerResult::CallToolResult(result) => Ok(result),
                _ => Err(ServiceError::UnexpectedResponse),
            }
        };
        match tokio::time::timeout(limit, answered).await {
            Err(_) => {
                if !answers_ping(&peer).await {
                    tracing::warn!(pack = %self.def.name, "pack server hung: no answer to ping after a call timed out");
                    self.stop_hung(shim).await;
                }
                Err(CallError::Timeout(limit))
            }
            Ok(Ok(result)) => Ok(result),
            Ok(Err(ServiceError::TransportClosed)) => Err(CallError::Exited),
            Ok(Err(e)) => Err(CallError::Failed(e.to_string())),
        }
    }

    /// Stops the server (if it runs): see [`shut_down`].
    pub async fn stop(&self) {
        let previous = std::mem::replace(&mut *self.state.lock().await, State::Idle);
        if let State::Running { started, .. } = previous {
            shut_down(started).await;
        }
    }

    /// Stops the server started as `shim` if it still runs, recording why: the next use starts it
    /// again (a server started since is left alone).
    async fn stop_hung(&self, shim: Option<u32>) {
        let mut state = self.state.lock().await;
        let failures = match &*state {
            State::Running { started, failures } if shim.is_some() && started.shim == shim => {
                failures + 1
            }
            _ => return,
        };
        let previous = std::mem::replace(
            &mut *state,
            State::Failed(Failure {
                message: "the server stopped answering (not even a ping) after a call timed out"
                    .to_owned(),
                at: Instant::now(),
                failures,
            }),
        );
        drop(state);
        if let State::Running { started, .. } = previous {
            // The caller's timeout is answered now; the server gets its grace in the background.
            tokio::spawn(shut_down(started));
        }
    }

    /// The shim's pid, while the server runs.
    pub async fn shim_pid(&self) -> Option<u32> {
        match &*self.state.lock().await {
            State::Running { started, .. } => started.shim,
            _ => None,
        }
    }
}

/// Whether the server answers a `ping` within [`HUNG_PROBE`].
async fn answers_ping(peer: &rmcp::Peer<rmcp::RoleClient>) -> bool {
    let ping = rmcp::model::ClientRequest::PingRequest(rmcp::model::PingRequest::default());
    matches!(
        tokio::time::timeout(HUNG_PROBE, peer.send_request(ping)).await,
        Ok(Ok(_))
    )
}

/// Stops a server through its shim, which alone can take every process the server started: the
/// shim forwards SIGTERM to the server; a server still running after [`STOP_GRACE`] (it ignores
/// SIGTERM, or is hung) is ended by SIGUSR1, on which the shim kills all of it and exits. Only
/// then is the transport closed — killing the shim itself would leave the server's descendants
/// behind.
async fn shut_down(mut started: Started) {
    let Some(pid) = started.shim.and_then(|p| i32::try_from(p).ok()) else {
        let _ = started.service.close_with_timeout(STOP_GRACE).await;
        return;
    };
    let shim = nix::unistd::Pid::from_raw(pid);
    let _ = nix::sys::signal::kill(shim, nix::sys::signal::Signal::SIGTERM);
    if !ended_within(pid, STOP_GRACE).await {
        let _ = nix::sys::signal::kill(shim, nix::sys::signal::Signal::SIGUSR1);
        ended_within(pid, STOP_GRACE).await;
    }
    let _ = started.service.close_with_timeout(STOP_GRACE).await;
}

/// Waits until process `pid` has exited (gone, or a zombie awaiting its parent), up to `limit`.
async fn ended_within(pid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let ended = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        };
        if ended {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_after_the_first() {
        assert_eq!(restart_delay(0), Duration::ZERO);
        assert_eq!(restart_delay(1), Duration::ZERO);
        assert_eq!(restart_delay(2), Duration::from_secs(1));
        assert_eq!(restart_delay(3), Duration::from_secs(2));
        assert_eq!(restart_delay(7), Duration::from_secs(32));
        assert_eq!(restart_delay(10), Duration::from_secs(256));
        assert_eq!(restart_delay(11), MAX_BACKOFF);
        assert_eq!(MAX_BACKOFF, Duration::from_secs(300));
        assert_eq!(restart_delay(u32::MAX), MAX_BACKOFF);
    }
}
