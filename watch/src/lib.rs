//! Directory watches that report changes to a directory's entries — created, removed, renamed,
//! written, their metadata changed — and never a file merely opened or read.
//!
//! The gate and each pack host watch every workdir (for its `.glovebox` and the files in it).
//! `notify` 8.2, the usual watcher, always asks the kernel for open events too, with no way to
//! leave them out: every file an agent, a build or an editor opened at a workdir's top queued a
//! kernel event in the opener and woke a watcher thread in both services, a few per cent of the
//! services' CPU on every such read. (`notify` 9 can leave them out, `EventKindMask`; it is not
//! released yet.) This is the `inotify` crate `notify` is built on on Linux, asked only for
//! changes, and read on the caller's tokio runtime instead of a thread of its own.
//!
//! Watching a directory again is cheap and harmless (the kernel keeps one watch per directory),
//! so callers re-add their directories after every change: a directory removed and made again
//! is watched again.

use std::io;
use std::path::Path;

use futures_util::StreamExt;
use inotify::{Inotify, WatchMask, Watches};

/// What is watched for: an entry created, removed, renamed in or out, written and closed,
/// modified or its metadata changed, and the directory itself removed or renamed. Not opens,
/// reads or closes without a write.
pub const CHANGES: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::CLOSE_WRITE)
    .union(WatchMask::MODIFY)
    .union(WatchMask::ATTRIB)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::ONLYDIR);

/// Watches over directories; `changed` is called for each change seen. Dropping it ends the
/// watches.
pub struct DirWatcher {
    watches: Watches,
    /// Dropped with the watcher: the reading task then ends and closes the descriptor.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl std::fmt::Debug for DirWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatcher").finish_non_exhaustive()
    }
}

impl DirWatcher {
    /// Starts a watcher with nothing watched yet, read on the current tokio runtime; `changed` is
    /// called from that runtime once per change (and once if the kernel's queue overflowed).
    pub fn start(changed: impl Fn() + Send + 'static) -> io::Result<DirWatcher> {
        let mut events = Inotify::init()?.into_event_stream([0u8; 4096])?;
        let watches = events.watches();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    event = events.next() => match event {
                        Some(Ok(_)) => changed(),
                        Some(Err(_)) | None => return,
                    },
                    _ = &mut stopped => return,
                }
            }
        });
        Ok(DirWatcher {
            watches,
            _stop: stop,
        })
    }

    /// Watches `dir` (again, if it already is: the same watch). An error if it is not a
    /// directory or cannot be watched.
    pub fn watch(&mut self, dir: &Path) -> io::Result<()> {
        self.watches.add(dir, CHANGES).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::sync::mpsc;

    fn watcher() -> (DirWatcher, mpsc::UnboundedReceiver<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let watcher = DirWatcher::start(move || {
            let _ = tx.send(());
        })
        .unwrap();
        (watcher, rx)
    }

    /// Whether a change is reported within a short while, then forgets whatever else was.
    async fn changed(rx: &mut mpsc::UnboundedReceiver<()>) -> bool {
        let seen = tokio::time::timeout(Duration::from_millis(300), rx.recv())
            .await
            .is_ok();
        tokio::time::sleep(Duration::from_millis(20)).await;
        while rx.try_recv().is_ok() {}
        seen
    }

    #[tokio::test]
    async fn opening_and_reading_is_no_change_and_each_kind_of_change_is() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "a").unwrap();
        let (mut w, mut rx) = watcher();
        w.watch(dir.path()).unwrap();
        for _ in 0..20 {
            assert_eq!(std::fs::read_to_string(&file).unwrap(), "a");
        }
        let _ = std::fs::read_dir(dir.path()).unwrap().count();
        assert!(!changed(&mut rx).await, "reads were reported");
        std::fs::write(&file, "b").unwrap();
        assert!(changed(&mut rx).await, "a write");
        std::fs::write(dir.path().join("new"), "").unwrap();
        assert!(changed(&mut rx).await, "a file made");
        std::fs::rename(dir.path().join("new"), dir.path().join("renamed")).unwrap();
        assert!(changed(&mut rx).await, "a rename");
        std::fs::remove_file(dir.path().join("renamed")).unwrap();
        assert!(changed(&mut rx).await, "a removal");
        std::fs::create_dir(dir.path().join(".glovebox")).unwrap();
        assert!(changed(&mut rx).await, "a directory made");
        let f = std::fs::File::open(&file).unwrap();
        f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        assert!(changed(&mut rx).await, "a mode changed");
    }

    #[tokio::test]
    async fn a_directory_removed_and_made_again_is_watched_again() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join(".glovebox");
        std::fs::create_dir(&dir).unwrap();
        let (mut w, mut rx) = watcher();
        w.watch(&dir).unwrap();
        w.watch(&dir).unwrap();
        std::fs::remove_dir(&dir).unwrap();
        assert!(changed(&mut rx).await, "the directory's removal");
        std::fs::create_dir(&dir).unwrap();
        w.watch(&dir).unwrap();
        std::fs::write(dir.join("permissions.yaml"), "").unwrap();
        assert!(changed(&mut rx).await, "a file in the new directory");
    }

    #[tokio::test]
    async fn a_file_or_a_missing_path_is_not_watched_and_a_dropped_watcher_reports_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "").unwrap();
        let (mut w, mut rx) = watcher();
        assert!(w.watch(&dir.path().join("f")).is_err());
        assert!(w.watch(&dir.path().join("missing")).is_err());
        w.watch(dir.path()).unwrap();
        drop(w);
        tokio::time::sleep(Duration::from_millis(20)).await;
        std::fs::write(dir.path().join("g"), "").unwrap();
        assert!(
            tokio::time::timeout(Duration::from_secs(2), rx.recv())
                .await
                .unwrap()
                .is_none(),
            "the task ended with its watcher"
        );
    }
}
