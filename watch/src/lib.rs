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
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use inotify::{Inotify, WatchMask, Watches};
use tokio::sync::Notify;

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

/// Watches over directories, and what they saw since it was last asked ([`DirWatcher::changed`]).
/// Dropping it ends the watches.
pub struct DirWatcher {
    watches: Watches,
    /// Holds one wake-up for every change seen since the last wait: changes coalesce, so a flood
    /// of them (a job making and removing files) costs one check, never a queue.
    seen: Arc<Notify>,
    /// Dropped with the watcher: the reading task then ends and closes the descriptor.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl std::fmt::Debug for DirWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatcher").finish_non_exhaustive()
    }
}

impl DirWatcher {
    /// Starts a watcher with nothing watched yet, read on the current tokio runtime.
    pub fn start() -> io::Result<DirWatcher> {
        let mut events = Inotify::init()?.into_event_stream([0u8; 4096])?;
        let watches = events.watches();
        let seen = Arc::new(Notify::new());
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let seeing = Arc::clone(&seen);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    event = events.next() => match event {
                        // A change, or the kernel's queue overflowed.
                        Some(Ok(_)) => seeing.notify_one(),
                        Some(Err(_)) | None => return,
                    },
                    _ = &mut stopped => return,
                }
            }
        });
        Ok(DirWatcher {
            watches,
            seen,
            _stop: stop,
        })
    }

    /// Watches `dir` (again, if it already is: the same watch). An error if it is not a
    /// directory or cannot be watched.
    pub fn watch(&mut self, dir: &Path) -> io::Result<()> {
        self.watches.add(dir, CHANGES).map(|_| ())
    }

    /// Returns at the next change, or at once if there were changes since the last call (as
    /// one).
    pub async fn changed(&self) {
        self.seen.notified().await
    }
}

/// Waits until `watcher` sees a change, at most `poll`: whether it did. Without a watcher (none
/// could be started: the user's inotify instances used up, say) it is the wait alone, so a
/// caller that checks after each wait polls every `poll` and never spins.
pub async fn changed_within(watcher: Option<&DirWatcher>, poll: Duration) -> bool {
    let changed = async {
        match watcher {
            Some(w) => w.changed().await,
            None => std::future::pending().await,
        }
    };
    tokio::time::timeout(poll, changed).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a change is seen within a short while; the changes seen before it count as one.
    async fn changed(w: &DirWatcher) -> bool {
        changed_within(Some(w), Duration::from_millis(300)).await
    }

    #[tokio::test]
    async fn opening_and_reading_is_no_change_and_each_kind_of_change_is() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "a").unwrap();
        let mut w = DirWatcher::start().unwrap();
        w.watch(dir.path()).unwrap();
        for _ in 0..20 {
            assert_eq!(std::fs::read_to_string(&file).unwrap(), "a");
        }
        let _ = std::fs::read_dir(dir.path()).unwrap().count();
        assert!(!changed(&w).await, "reads were reported");
        type Change<'a> = (&'a str, Box<dyn Fn() + 'a>);
        let changes: [Change; 6] = [
            ("a write", Box::new(|| std::fs::write(&file, "b").unwrap())),
            (
                "a file made",
                Box::new(|| std::fs::write(dir.path().join("new"), "").unwrap()),
            ),
            (
                "a rename",
                Box::new(|| {
                    std::fs::rename(dir.path().join("new"), dir.path().join("renamed")).unwrap()
                }),
            ),
            (
                "a removal",
                Box::new(|| std::fs::remove_file(dir.path().join("renamed")).unwrap()),
            ),
            (
                "a directory made",
                Box::new(|| std::fs::create_dir(dir.path().join(".glovebox")).unwrap()),
            ),
            (
                "a mode changed",
                Box::new(|| {
                    let f = std::fs::File::open(&file).unwrap();
                    f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
                        .unwrap()
                }),
            ),
        ];
        for (what, change) in changes {
            change();
            assert!(changed(&w).await, "{what}");
            // What that change queued besides counts with it.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = changed_within(Some(&w), Duration::ZERO).await;
        }
    }

    #[tokio::test]
    async fn a_flood_of_changes_is_one_wake_up() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = DirWatcher::start().unwrap();
        w.watch(dir.path()).unwrap();
        for i in 0..2_000 {
            let f = dir.path().join(format!("f{i}"));
            std::fs::write(&f, "").unwrap();
            std::fs::remove_file(&f).unwrap();
        }
        assert!(changed(&w).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            changed(&w).await,
            "what came while the caller was away counts once"
        );
        assert!(!changed(&w).await, "and only once");
    }

    #[tokio::test]
    async fn a_directory_removed_and_made_again_is_watched_again() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join(".glovebox");
        std::fs::create_dir(&dir).unwrap();
        let mut w = DirWatcher::start().unwrap();
        w.watch(&dir).unwrap();
        w.watch(&dir).unwrap();
        std::fs::remove_dir(&dir).unwrap();
        assert!(changed(&w).await, "the directory's removal");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let _ = changed_within(Some(&w), Duration::ZERO).await;
        std::fs::create_dir(&dir).unwrap();
        w.watch(&dir).unwrap();
        std::fs::write(dir.join("permissions.yaml"), "").unwrap();
        assert!(changed(&w).await, "a file in the new directory");
    }

    #[tokio::test]
    async fn a_file_or_a_missing_path_is_not_watched() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "").unwrap();
        let mut w = DirWatcher::start().unwrap();
        assert!(w.watch(&dir.path().join("f")).is_err());
        assert!(w.watch(&dir.path().join("missing")).is_err());
    }

    #[tokio::test]
    async fn without_a_watcher_the_wait_is_the_poll_and_never_returns_early() {
        let started = std::time::Instant::now();
        assert!(!changed_within(None, Duration::from_millis(100)).await);
        assert!(started.elapsed() >= Duration::from_millis(100));
    }
}
