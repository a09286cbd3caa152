//! Reload on change: the project's `.glovebox/mcp.json` is watched (`notify` on the workdir and
//! its `.glovebox` directory, and a stat every [`POLL`] for what the watcher misses), and the
//! account's own file is followed through the gate; either change applies at once (changed packs
//! stop, and start again with their new definition on their next use).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};

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
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        // Not a file opened: notify reports every open in the workdir.
        if res.is_ok_and(|event| {
            !matches!(
                event.kind,
                notify::EventKind::Access(notify::event::AccessKind::Open(_))
            )
        }) {
            let _ = tx.send(());
        }
    });
    let mut watcher = watcher.ok();
    let mut watched = Vec::new();
    let mut add_watches = move |watcher: &mut Option<notify::RecommendedWatcher>| {
        let Some(w) = watcher.as_mut() else { return };
        for dir in [workdir.clone(), workdir.join(".glovebox")] {
            if !watched.contains(&dir)
                && dir.is_dir()
                && w.watch(&dir, RecursiveMode::NonRecursive).is_ok()
            {
                watched.push(dir);
            }
        }
    };
    add_watches(&mut watcher);
    let mut user = host.user_file_changes();
    tokio::spawn(async move {
        let mut last = stamp(&file);
        loop {
            let user_changed = tokio::select! {
                event = rx.recv() => {
                    if event.is_some() {
                        tokio::time::sleep(DEBOUNCE).await;
                        while rx.try_recv().is_ok() {}
                    }
                    false
                }
                changed = user.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    true
                }
                _ = tokio::time::sleep(POLL) => false,
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
