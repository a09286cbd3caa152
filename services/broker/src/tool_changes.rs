//! When an account's tool list may have changed, so every front door can tell its clients: a
//! `/v1/ws` agent gets `tools_changed`, an MCP session `notifications/tools/list_changed`, and
//! `glovebox mcp` forwards the one as the other.
//!
//! A change is a provider registering or leaving (`client_tools`), an approver switching the
//! account's tools (`connection`), or the gate's answer about the account changing (an
//! administrator's `glovebox enable|disable`, a managed cap added or lifted in the policy
//! files, the gate going away or coming back), or the
//! account's pack tools changing (a pack added, removed or reconfigured in `mcp.json`, or one
//! that was still starting now offering its tools), which [`watch_gate`] polls for accounts that
//! someone is listening about. What the list now is, is
//! still `tool_list`'s to say; this only says when to look again.

use std::collections::HashMap;
use std::sync::Weak;
use std::time::Duration;

use crate::app::App;
use glovebox_config::AccountId;

pub mod versions;

pub use versions::ToolChanges;

/// How often the gate is asked whether a listened-to account's tools are on.
pub const GATE_POLL: Duration = Duration::from_secs(2);

/// What the gate last said of an account (nothing: unreachable): whether its tools are on, and
/// what managed caps and denies take out of its listings. Any change sends the front doors to
/// list again; each tells its clients only if their list differs.
type Seen = Option<glovebox_proto::v1::AccountInfoResponse>;

/// The names of an account's pack tools at the last look.
type PackNames = std::collections::BTreeSet<String>;

/// Whether going from `before` to `now` changes what clients are offered (the first look at an
/// account changes nothing: its listeners were given the list it had then).
pub fn differs(before: Option<&Seen>, now: &Seen) -> bool {
    before.is_some_and(|b| b != now)
}

/// Polls the gate every [`GATE_POLL`] for the accounts someone listens about, and reports each
/// change of what it says. Runs until the broker's state is gone.
pub async fn watch_gate(app: Weak<App>) {
    let mut seen: HashMap<AccountId, Seen> = HashMap::new();
    let mut packs: HashMap<AccountId, PackNames> = HashMap::new();
    let mut tick = tokio::time::interval(GATE_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(app) = app.upgrade() else { return };
        let listened = app.tool_changes.listened();
        seen.retain(|a, _| listened.contains(a));
        packs.retain(|a, _| listened.contains(a));
        for account in listened {
            let now = app.backends.account_info(&account, Vec::new()).await;
            let enabled = now.as_ref().is_some_and(|i| i.enabled);
            let before = seen.insert(account.clone(), now.clone());
            if differs(before.as_ref(), &now) {
                tracing::debug!(%account, enabled, "the account's tools changed at the gate");
                app.tool_changes.changed(&account);
                continue;
            }
            if !enabled {
                continue;
            }
            let names: PackNames = crate::packs::tool_specs(&app, &account)
                .await
                .into_iter()
                .map(|t| t.name)
                .collect();
            // A first look may already differ from what the listeners were given (a pack that
            // finished starting in between): it counts as a change, and each front door
            // compares with what it offered before telling its client.
            if packs
                .insert(account.clone(), names.clone())
                .is_none_or(|old| old != names)
            {
                tracing::debug!(%account, "the account's pack tools changed");
                app.tool_changes.changed(&account);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_counts_as_a_change_at_the_gate() {
        use glovebox_proto::v1::AccountInfoResponse as Info;
        let on = |capped: &[&str]| {
            Some(Info {
                enabled: true,
                capped_tools: capped.iter().map(|c| c.to_string()).collect(),
                ..Default::default()
            })
        };
        let off = Some(Info::default());
        let no_packs = Some(Info {
            enabled: true,
            packs_capped: true,
            ..Default::default()
        });
        let tools_denied = Some(Info {
            enabled: true,
            managed_tool_denies: vec!["tools.deny[0]: pack__*".into()],
            ..Default::default()
        });
        let cases = [
            (None, on(&[]), false),
            (None, None, false),
            (Some(on(&[])), on(&[]), false),
            (Some(on(&[])), off.clone(), true),
            (Some(off.clone()), on(&[]), true),
            (Some(on(&[])), None, true),
            (Some(None), on(&[]), true),
            (Some(None), None, false),
            // A managed cap added, or lifted.
            (Some(on(&[])), on(&["exec_run"]), true),
            (Some(on(&["exec_run"])), on(&[]), true),
            (Some(on(&[])), no_packs, true),
            // A managed tools deny added.
            (Some(on(&[])), tools_denied, true),
        ];
        for (before, now, want) in cases {
            assert_eq!(
                differs(before.as_ref(), &now),
                want,
                "{before:?} -> {now:?}"
            );
        }
    }

    #[tokio::test]
    async fn listeners_wake_on_their_own_account_only() {
        let changes = ToolChanges::default();
        let mut alice = changes.subscribe(&"alice".parse().unwrap());
        let bob = changes.subscribe(&"bob".parse().unwrap());
        assert_eq!(changes.listened().len(), 2);
        changes.changed(&"alice".parse().unwrap());
        assert!(alice.has_changed().unwrap());
        assert!(!bob.has_changed().unwrap());
        alice.mark_unchanged();
        drop(bob);
        assert_eq!(changes.listened(), ["alice"]);
        changes.changed(&"bob".parse().unwrap());
        assert!(!alice.has_changed().unwrap());
    }
}
