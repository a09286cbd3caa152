//! Reload on change: the project's `.glovebox/mcp.json` is watched (`glovebox_watch` on the workdir and
//! its `.glovebox` directory, and a stat every [`POLL`] for what the watcher misses), and the
//! account's own file is followed through the gate; either change applies at once (changed packs
//! stop, and start again with their new definition on their next use).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use glovebox_watch::DirWatcher;

use crate::host::Host;

/// How long an editor's burst of events may take to settle.
const DEBOUNCE: Duration = Duration::from_millis(50);
/// A change is noticed at the latest after this long, events or not.
const POLL: Duration = Duration::from_secs(2);

/// What identifies a version of a file: its length, change time and inode.
fn stamp(path: &std::path::Path) -> Option<(u64, i64, i64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.len(), m.mtime(), m.mtime_nsec(), m.ino()))
}

/// Starts the watcher; it runs until the runtime stops.
pub fn spawn(host: Arc<Host>) {
    let workdir = host.launcher.config.workdir.clone();
    let file: PathBuf = workdir.join(glovebox_config::mcp_json::PROJECT_FILE);
    let mut watcher = DirWatcher::start().ok();
    // Watched again after every check: a `.glovebox` removed and made again is watched anew.
    let add_watches = move |watcher: &mut Option<DirWatcher>| {
        let Some(w) = watcher.as_mut() else { return };
        for dir in [workdir.clone(), workdir.join(".glovebox")] {
            if dir.is_dir() {
                let _ = w.watch(&dir);
            }
        }
    };
    add_watches(&mut watcher);
    let mut user = host.user_file_changes();
    tokio::spawn(async move {
        let mut last = stamp(&file);
        loop {
            let user_changed = tokio::select! {
                seen = glovebox_watch::changed_within(watcher.as_ref(), POLL) => {
                    if seen {
                        tokio::time::sleep(DEBOUNCE).await;
                    }
                    false
                }
                changed = user.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    true
                }
            };
            add_watches(&mut watcher);
            let now = stamp(&file);
            if user_changed || now != last {
                last = now;
                host.on_change().await;
            }
        }
    });
}
