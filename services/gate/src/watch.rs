//! Hot reload: a file watcher (`glovebox_watch`) on the managed directories, each account's
//! directory, each workdir and its `.glovebox` directory, and `glovebox.yaml` (the accounts'
//! switches). A change reloads the policies that changed and audits the outcome, and tells pack
//! hosts of an account's changed `mcp.json`; a slow poll covers events the watcher missed. While
//! it watches every way to an account's policy files (or to `glovebox.yaml`), decisions need not
//! look at them (`policies::freshness`).

use std::sync::Arc;
use std::time::Duration;

use glovebox_watch::DirWatcher;

use crate::service::GateState;

/// How long to wait for an editor's burst of events to settle.
const DEBOUNCE: Duration = Duration::from_millis(50);
/// Reload check even without events (a watcher can miss some, e.g. on network file systems).
const POLL: Duration = Duration::from_secs(2);

/// Starts the watcher task; it runs until the runtime stops.
pub fn spawn(state: Arc<GateState>) {
    let mut watcher = match DirWatcher::start() {
        Ok(w) => Some(w),
        Err(error) => {
            tracing::warn!(%error, "no file watcher; policy changes are seen on the next call and every 2 s");
            None
        }
    };
    // Everything is watched again before every check: a directory removed and made again (a
    // project's `.glovebox`) is watched from then on; one already watched keeps its watch. The
    // policies then trust the watcher for the accounts whose files it covers.
    let add_watches = |state: &GateState, watcher: &mut Option<DirWatcher>| {
        if let Some(w) = watcher.as_mut() {
            state.policies.watch_files(w);
            state.enablement.watch_file(w);
        }
    };
    add_watches(&state, &mut watcher);
    tokio::spawn(async move {
        loop {
            if glovebox_watch::changed_within(watcher.as_ref(), POLL).await {
                tokio::time::sleep(DEBOUNCE).await;
            }
            add_watches(&state, &mut watcher);
            let s = state.clone();
            let _ = tokio::task::spawn_blocking(move || {
                s.policies.invalidate();
                s.packs.refresh();
            })
            .await;
            state.flush_policy_events().await;
        }
    });
}
