//! Whether the audit can be written, pushed to the approvers as it changes: a gate whose audit
//! fails refuses every call (a call is never done without its rows), so the people who answer
//! asks are told at once — `audit_health` frames on their connections (`glovebox approve`
//! prints them, the console shows a banner) — rather than finding out from failed calls.
//!
//! [`watch`] polls the gate's health every [`POLL`]; [`told`] decides what an approver
//! connection is told, pure.

use std::sync::Weak;
use std::time::Duration;

use glovebox_proto::ws::ServerFrame;
use tokio::sync::watch;

use glovebox_proto::transport::Link;
use glovebox_proto::v1::gate_client::GateClient;

/// How often the gate is asked whether its audit can be written.
pub const POLL: Duration = Duration::from_secs(2);

/// What the gate said of its audit: healthy or not, and its failed writes (`None`: the gate did
/// not answer, which the calls themselves report).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditState {
    pub healthy: bool,
    pub failures: u64,
}

/// The audit's state as last polled, shared by every approver connection.
pub type Latest = watch::Sender<Option<AuditState>>;

/// The frame an approver connection that was last told `before` gets for `now`: on a change of
/// health only (a connection starts as told "healthy", so an unhealthy audit is said at once).
pub fn told(before: bool, now: Option<AuditState>) -> Option<ServerFrame> {
    let now = now?;
    (now.healthy != before).then(|| ServerFrame::AuditHealth {
        healthy: now.healthy,
        failures: now.failures,
        message: if now.healthy {
            "the audit is written again: calls run again".to_owned()
        } else {
            format!(
                "the audit cannot be written ({} failed writes): every call is refused until it \
                 can (see `glovebox status` and the gate's log)",
                now.failures
            )
        },
    })
}

/// Polls `gate` every [`POLL`] while an approver listens, and publishes each change to `latest`;
/// with nobody listening it asks nothing and forgets what it knew (a connection never starts
/// from a stale word). Runs until the broker's state (which holds `latest`) is gone.
pub async fn watch(latest: Weak<Latest>, gate: GateClient<Link>) {
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(latest) = latest.upgrade() else {
            return;
        };
        if latest.receiver_count() == 0 {
            latest.send_replace(None);
            continue;
        }
        let answer = gate
            .clone()
            .health(crate::backends::request(
                glovebox_proto::v1::HealthRequest {},
            ))
            .await;
        if let Ok(h) = answer {
            let h = h.into_inner();
            let now = Some(AuditState {
                healthy: h.audit_healthy,
                failures: h.audit_failures,
            });
            latest.send_if_modified(|latest| {
                let changed = latest.map(|l| l.healthy) != now.map(|n| n.healthy);
                *latest = now;
                changed
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_approver_is_told_each_change_of_health_once() {
        let state = |healthy, failures| Some(AuditState { healthy, failures });
        assert!(told(true, None).is_none());
        assert!(told(true, state(true, 0)).is_none());
        assert!(told(false, state(false, 3)).is_none());
        let Some(ServerFrame::AuditHealth {
            healthy, message, ..
        }) = told(true, state(false, 3))
        else {
            panic!("no frame");
        };
        assert!(!healthy && message.contains("3 failed writes"), "{message}");
        let Some(ServerFrame::AuditHealth { healthy, .. }) = told(false, state(true, 3)) else {
            panic!("no frame");
        };
        assert!(healthy);
    }
}
