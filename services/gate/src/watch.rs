//! Hot reload: a file watcher (`notify`) on the managed directories, each account's directory,
//! each workdir and its `.glovebox` directory. A change reloads the policies that changed and
//! audits the outcome, and tells pack hosts of an account's changed `mcp.json`; a slow poll
//! covers events the watcher missed.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::service::GateState;

/// How long to wait for an editor's burst of events to settle.
const DEBOUNCE: Duration = Duration::from_millis(50);
/// Reload check even without events (a watcher can miss some, e.g. on network file systems).
const POLL: Duration = Duration::from_secs(2);

/// Whether an event only says a file was opened. The watcher is told of every open in a watched
/// directory (notify always asks for them), and each workdir is one: every file an agent, a
/// build or an editor opens there would start a reload check.
fn only_opened(kind: &notify::EventKind) -> bool {
    matches!(
        kind,
        notify::EventKind::Access(notify::event::AccessKind::Open(_))
    )
}

/// Starts the watcher task; it runs until the runtime stops.
pub fn spawn(state: Arc<GateState>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if res.is_ok_and(|event| !only_opened(&event.kind)) {
            let _ = tx.send(());
        }
    });
    let mut watcher = match watcher {
        Ok(w) => Some(w),
        Err(error) => {
            tracing::warn!(%error, "no file watcher; policy changes are seen on the next call and every 2 s");
            None
        }
    };
    let mut watched: HashSet<PathBuf> = HashSet::new();
    let mut add_watches =
        move |state: &GateState, watcher: &mut Option<notify::RecommendedWatcher>| {
            let Some(w) = watcher.as_mut() else { return };
            for path in state.policies.watched_paths() {
                if !watched.contains(&path) && path.is_dir() {
                    match w.watch(&path, RecursiveMode::NonRecursive) {
                        Ok(()) => {
                            watched.insert(path);
                        }
                        Err(error) => {
                            tracing::warn!(path = %path.display(), %error, "cannot watch a policy directory")
                        }
                    }
                }
            }
        };
    add_watches(&state, &mut watcher);
    tokio::spawn(async move {
        loop {
            let event = tokio::time::timeout(POLL, rx.recv()).await;
            if let Ok(None) = event {
                return;
            }
            if let Ok(Some(())) = event {
                tokio::time::sleep(DEBOUNCE).await;
                while rx.try_recv().is_ok() {}
            }
            let s = state.clone();
            let _ = tokio::task::spawn_blocking(move || {
                s.policies.invalidate();
                s.packs.refresh();
            })
            .await;
            add_watches(&state, &mut watcher);
            state.flush_policy_events().await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::EventKind;
    use notify::event::{
        AccessKind, AccessMode, CreateKind, DataChange, ModifyKind, RemoveKind, RenameMode,
    };

    #[test]
    fn opening_a_file_is_not_a_change_and_everything_else_is() {
        let cases = [
            (EventKind::Access(AccessKind::Open(AccessMode::Any)), true),
            (EventKind::Access(AccessKind::Open(AccessMode::Read)), true),
            (
                EventKind::Access(AccessKind::Close(AccessMode::Write)),
                false,
            ),
            (EventKind::Create(CreateKind::File), false),
            (EventKind::Modify(ModifyKind::Data(DataChange::Any)), false),
            (EventKind::Modify(ModifyKind::Name(RenameMode::To)), false),
            (EventKind::Remove(RemoveKind::File), false),
            (EventKind::Any, false),
            (EventKind::Other, false),
        ];
        for (kind, opened) in cases {
            assert_eq!(only_opened(&kind), opened, "{kind:?}");
        }
    }
}
