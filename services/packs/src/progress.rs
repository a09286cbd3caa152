//! A pack server's `notifications/progress`, relayed to the call they belong to: the MCP client
//! side of every pack's session is a [`ProgressRelay`], which hands each notification to the
//! channel registered for its progress token (rmcp gives every request its own) and drops the
//! rest. Bounded: a slow reader loses progress, never blocks the session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use glovebox_proto::v1::PackProgress;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{NotificationContext, RoleClient};
use tokio::sync::mpsc;

/// Progress notifications queued for one call at most (more are dropped until it catches up).
pub const MAX_QUEUED: usize = 32;
/// Longest progress message passed on, in bytes.
const MAX_MESSAGE_BYTES: usize = 512;

/// The client handler of a pack's session: routes progress by token.
#[derive(Debug, Clone, Default)]
pub struct ProgressRelay(Arc<Mutex<HashMap<ProgressToken, mpsc::Sender<PackProgress>>>>);

impl ProgressRelay {
    /// Sends the progress of the request with `token` to `to` while the guard lives.
    pub fn following(&self, token: ProgressToken, to: mpsc::Sender<PackProgress>) -> Following {
        self.lock().insert(token.clone(), to);
        Following {
            relay: self.clone(),
            token,
        }
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<ProgressToken, mpsc::Sender<PackProgress>>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A call's progress followed; dropping it stops (and lets the call's channel close).
#[derive(Debug)]
pub struct Following {
    relay: ProgressRelay,
    token: ProgressToken,
}

/// How long progress a server sent just before its answer is still taken: rmcp hands each
/// notification to a task of its own, so one read before the answer may be handled after it.
pub const LATE_PROGRESS: std::time::Duration = std::time::Duration::from_millis(200);

impl Drop for Following {
    fn drop(&mut self) {
        let (relay, token) = (self.relay.clone(), self.token.clone());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    tokio::time::sleep(LATE_PROGRESS).await;
                    relay.lock().remove(&token);
                });
            }
            Err(_) => {
                relay.lock().remove(&token);
            }
        }
    }
}

/// One notification as it is passed on: finite numbers, a bounded message.
pub fn relayed(p: &ProgressNotificationParam) -> Option<PackProgress> {
    if !p.progress.is_finite() || p.total.is_some_and(|t| !t.is_finite()) {
        return None;
    }
    let mut message = p.message.clone().unwrap_or_default();
    glovebox_proto::display::truncate_at_char(&mut message, MAX_MESSAGE_BYTES);
    Some(PackProgress {
        progress: p.progress,
        total: p.total,
        message,
    })
}

impl rmcp::ClientHandler for ProgressRelay {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let to = self.lock().get(&params.progress_token).cloned();
        if let (Some(to), Some(progress)) = (to, relayed(&params)) {
            let _ = to.try_send(progress);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    #[test]
    fn only_finite_progress_passes_with_its_message_bounded() {
        let param = |progress: f64, total: Option<f64>, message: &str| {
            let mut p =
                ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(1)), progress)
                    .with_message(message);
            p.total = total;
            p
        };
        let p = relayed(&param(1.0, Some(4.0), "step 1")).unwrap();
        assert_eq!(
            (p.progress, p.total, p.message.as_str()),
            (1.0, Some(4.0), "step 1")
        );
        assert!(relayed(&param(f64::NAN, None, "")).is_none());
        assert!(relayed(&param(1.0, Some(f64::INFINITY), "")).is_none());
        let long = relayed(&param(1.0, None, &"x".repeat(10_000))).unwrap();
        assert_eq!(long.message.len(), MAX_MESSAGE_BYTES);
    }
}
