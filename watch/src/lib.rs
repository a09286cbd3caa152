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
//! Watching a directory again is cheap and harmless (the kernel keeps one watch per directory,
//! and a watch asked for again keeps what it was asked for before: `MASK_ADD`), so callers re-add
//! their directories after every change: a directory removed and made again is watched again.
//!
//! [`Quiet`] answers, without touching the watched paths, whether anything changed since a moment:
//! the kernel queues a change's event before the system call that made it returns, so "no event
//! read since, none queued now" proves that nothing watched changed in between.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use inotify::{Inotify, WatchMask, Watches};
use tokio::io::unix::AsyncFd;
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
    .union(WatchMask::ONLYDIR)
    .union(WatchMask::MASK_ADD);

/// What a watched file is watched for, whichever of its names it is changed through (a hard link
/// elsewhere): written, modified, its metadata or link count changed (which a rename over it
/// does), removed or renamed. The file itself, never a symlink's target.
pub const FILE_CHANGES: WatchMask = WatchMask::CLOSE_WRITE
    .union(WatchMask::MODIFY)
    .union(WatchMask::ATTRIB)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::DONT_FOLLOW)
    .union(WatchMask::MASK_ADD);

/// What a directory above a watched one is watched for: itself renamed or removed (which moves
/// or removes everything below it, with no event in the directories below). Not its entries'
/// changes: a home directory's traffic wakes no one. The directory itself, never a symlink's
/// target.
pub const MOVES: WatchMask = WatchMask::DELETE_SELF
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::ONLYDIR)
    .union(WatchMask::DONT_FOLLOW)
    .union(WatchMask::MASK_ADD);

/// What a directory is watched for when only its names matter: an entry created, removed or
/// renamed in or out (a file replaced by a rename over it), and the directory itself removed or
/// renamed. Not writes to the files in it: a database's log written on every commit wakes no one.
pub const ENTRIES: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::ONLYDIR)
    .union(WatchMask::MASK_ADD);

/// The reads counter's value once the reader has stopped: odd, so never a moment again.
const STOPPED: u64 = u64::MAX;

/// Watches over directories, and what they saw since it was last asked ([`DirWatcher::changed`]).
/// Dropping it stops its reader; the watches end once no [`Quiet`] of it is left either (each holds
/// the queue open).
pub struct DirWatcher {
    watches: Watches,
    /// Holds one wake-up for every change seen since the last wait: changes coalesce, so a flood
    /// of them (a job making and removing files) costs one check, never a queue.
    seen: Arc<Notify>,
    quiet: Quiet,
    /// Dropped with the watcher: the reading task then ends and closes the descriptor.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl std::fmt::Debug for DirWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatcher").finish_non_exhaustive()
    }
}

/// Whether nothing a watcher watches changed since a [`Moment`]. Cheap to clone and to ask (one
/// `ioctl` and two atomic loads), from any thread.
#[derive(Clone)]
pub struct Quiet {
    inner: Arc<QuietInner>,
}

struct QuietInner {
    /// Bumped by the reader just before and just after each read of the event queue: odd while
    /// a read is under way, and different from any moment taken before the read began.
    reads: AtomicU64,
    /// The watcher's event queue (a duplicate of its descriptor, so asking stays safe after the
    /// reader has closed its own).
    queue: OwnedFd,
}

/// When the watcher had read nothing since: see [`Quiet::now`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moment(u64);

impl Quiet {
    /// This moment, unless the reader is reading (or has stopped): then there is none to compare
    /// with, and whoever asked must check the paths themselves.
    pub fn now(&self) -> Option<Moment> {
        let reads = self.inner.reads.load(Ordering::SeqCst);
        reads.is_multiple_of(2).then_some(Moment(reads))
    }

    /// Whether no event for anything watched was read since `moment` and none is queued now:
    /// then nothing watched changed between `moment` and this call (the kernel queues an event
    /// before the change's system call returns). False whenever it cannot tell.
    pub fn unchanged_since(&self, moment: Moment) -> bool {
        if self.inner.reads.load(Ordering::SeqCst) != moment.0 {
            return false;
        }
        if !matches!(rustix::io::ioctl_fionread(&self.inner.queue), Ok(0)) {
            return false;
        }
        // A read that began after the first load and emptied the queue before the `ioctl` bumped
        // the counter before it read: it shows here.
        self.inner.reads.load(Ordering::SeqCst) == moment.0
    }
}

impl DirWatcher {
    /// Starts a watcher with nothing watched yet, read on the current tokio runtime.
    pub fn start() -> io::Result<DirWatcher> {
        let inotify = Inotify::init()?;
        let watches = inotify.watches();
        let quiet = Quiet {
            inner: Arc::new(QuietInner {
                reads: AtomicU64::new(0),
                queue: inotify.as_fd().try_clone_to_owned()?,
            }),
        };
        // SAFETY: `Inotify` owns its descriptor (shared with `watches`, which only adds watches
        // through it) and always returns that one; it is closed only once every owner, the
        // `AsyncFd` among them, is dropped.
        #[allow(unsafe_code)]
        let queue =
            unsafe { AsyncFd::register_with_interest(inotify, tokio::io::Interest::READABLE) }?;
        let seen = Arc::new(Notify::new());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(read_events(
            queue,
            quiet.clone(),
            Arc::clone(&seen),
            stopped,
        ));
        Ok(DirWatcher {
            watches,
            seen,
            quiet,
            _stop: stop,
        })
    }

    /// Watches `dir` for [`CHANGES`] (again, if it already is: the same watch). An error if it is
    /// not a directory or cannot be watched.
    pub fn watch(&mut self, dir: &Path) -> io::Result<()> {
        self.watches.add(dir, CHANGES).map(|_| ())
    }

    /// Watches `dir` for [`CHANGES`] only if the path itself is a directory, not a symlink to one.
    pub fn watch_exact(&mut self, dir: &Path) -> io::Result<()> {
        self.watches
            .add(dir, CHANGES | WatchMask::DONT_FOLLOW)
            .map(|_| ())
    }

    /// Watches `dir` for [`ENTRIES`]: its names coming and going, not its files' writes.
    pub fn watch_entries(&mut self, dir: &Path) -> io::Result<()> {
        self.watches.add(dir, ENTRIES).map(|_| ())
    }

    /// Watches the file at `path` itself (not a symlink's target) for [`FILE_CHANGES`].
    pub fn watch_file(&mut self, path: &Path) -> io::Result<()> {
        self.watches.add(path, FILE_CHANGES).map(|_| ())
    }

    /// Watches the directory `dir` for [`MOVES`] of itself; an error if it is a symlink.
    pub fn watch_moves(&mut self, dir: &Path) -> io::Result<()> {
        self.watches.add(dir, MOVES).map(|_| ())
    }

    /// Returns at the next change, or at once if there were changes since the last call (as
    /// one).
    pub async fn changed(&self) {
        self.seen.notified().await
    }

    /// Asks whether anything watched changed since a moment, from anywhere.
    pub fn quiet(&self) -> Quiet {
        self.quiet.clone()
    }
}

/// The watcher's reader: reads whatever is queued whenever the queue is readable, counting each
/// read for [`Quiet`] and waking [`DirWatcher::changed`]. Ends when the watcher is dropped or the
/// queue fails; [`Quiet`] then never answers "unchanged" again.
async fn read_events(
    mut queue: AsyncFd<Inotify>,
    quiet: Quiet,
    seen: Arc<Notify>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let reads = &quiet.inner.reads;
    let mut buffer = [0u8; 4096];
    loop {
        let ready = tokio::select! {
            ready = queue.readable_mut() => ready,
            _ = &mut stopped => break,
        };
        let Ok(mut ready) = ready else { break };
        reads.fetch_add(1, Ordering::SeqCst);
        // Every event counts, whatever it is (the kernel's queue overflowing among them).
        let read = ready.get_inner_mut().read_events(&mut buffer).map(|_| ());
        reads.fetch_add(1, Ordering::SeqCst);
        // A read that found nothing still moved the counter: the caller checks again either way.
        match read {
            Ok(()) => seen.notify_one(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => seen.notify_one(),
            Err(_) => break,
        }
        // Readiness is cleared only once the queue is seen empty: an event queued after this
        // look makes the descriptor readable again.
        if matches!(rustix::io::ioctl_fionread(ready.get_inner()), Ok(0)) {
            ready.clear_ready();
        }
    }
    reads.store(STOPPED, Ordering::SeqCst);
}

/// File system kinds whose every change is made through this kernel, and whose reads and writes
/// wait on local storage alone: ext2/3/4, XFS, Btrfs, tmpfs, F2FS, overlayfs, ZFS.
const LOCAL_KINDS: [i64; 7] = [
    0xEF53,
    0x5846_5342,
    0x9123_683E,
    0x0102_1994,
    0xF2F5_2010,
    0x794C_7630,
    0x2FC1_2FC1,
];

/// Whether `path` is on a local file system: a watch there sees every change, and a read there
/// never waits on a network or another process (NFS, SMB, FUSE, 9p are not).
pub fn on_local_file_system(path: &Path) -> bool {
    // `f_type`'s integer type differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::statfs(path).is_ok_and(|s| LOCAL_KINDS.contains(&(s.f_type as i64)))
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
    async fn an_entries_watch_sees_names_come_and_go_and_not_writes() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.db-wal");
        std::fs::write(&log, "a").unwrap();
        let mut w = DirWatcher::start().unwrap();
        w.watch_entries(dir.path()).unwrap();
        // A file written in place, again and again, as a database's log is: no change.
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        for _ in 0..20 {
            std::io::Write::write_all(&mut f, b"frame").unwrap();
        }
        drop(f);
        assert!(!changed(&w).await, "writes were reported");
        // A file replaced by a rename over it, as `accounts.yaml` is written; one made; one
        // removed.
        let spare = dir.path().join(".accounts.yaml.tmp");
        std::fs::write(&spare, "accounts: []").unwrap();
        assert!(changed(&w).await, "a file made was not reported");
        std::fs::rename(&spare, dir.path().join("accounts.yaml")).unwrap();
        assert!(changed(&w).await, "a rename over a name was not reported");
        std::fs::remove_file(dir.path().join("accounts.yaml")).unwrap();
        assert!(changed(&w).await, "a removal was not reported");
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

    /// A moment once the reader has read what was queued.
    async fn settled(w: &DirWatcher) -> Moment {
        for _ in 0..200 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            if let Some(m) = w.quiet().now()
                && w.quiet().unchanged_since(m)
            {
                return m;
            }
        }
        panic!("the watcher never settled");
    }

    #[tokio::test]
    async fn a_change_is_known_before_the_call_that_made_it_returns() {
        let dir = tempfile::tempdir().unwrap();
        let watched = dir.path().join("watched");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(watched.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let file = watched.join("permissions.yaml");
        std::fs::write(&file, "a").unwrap();
        let mut w = DirWatcher::start().unwrap();
        w.watch_exact(&watched).unwrap();
        w.watch_file(&file).unwrap();
        w.watch_moves(dir.path()).unwrap();
        let q = w.quiet();
        let m = settled(&w).await;
        for _ in 0..20 {
            assert_eq!(std::fs::read_to_string(&file).unwrap(), "a");
        }
        assert!(q.unchanged_since(m), "reads are no change");
        std::fs::write(&file, "b").unwrap();
        assert!(!q.unchanged_since(m), "a write, asked at once");
        let m = settled(&w).await;
        assert!(
            q.unchanged_since(m),
            "a new moment after the reader read it"
        );

        // Through a hard link in a directory nobody watches.
        let link = outside.join("link.yaml");
        std::fs::hard_link(&file, &link).unwrap();
        let m = settled(&w).await;
        std::fs::write(&link, "c").unwrap();
        assert!(!q.unchanged_since(m), "a write through another name");

        // A rename over the file from a directory nobody watches (the file's own watch).
        let m = settled(&w).await;
        std::fs::write(outside.join("new.yaml"), "d").unwrap();
        assert!(q.unchanged_since(m), "a write outside is no change");
        std::fs::rename(outside.join("new.yaml"), &file).unwrap();
        assert!(!q.unchanged_since(m), "a rename over the file");

        // The watched directory's parent, renamed: nothing below it sees an event of its own.
        let m = settled(&w).await;
        let parent = dir.path().join("parent");
        std::fs::create_dir(&parent).unwrap();
        assert!(
            q.unchanged_since(m),
            "entries made in a directory watched for its moves are no change"
        );
        let inner = parent.join("inner");
        std::fs::create_dir(&inner).unwrap();
        w.watch_exact(&inner).unwrap();
        w.watch_moves(&parent).unwrap();
        let m = settled(&w).await;
        std::fs::rename(&parent, dir.path().join("moved")).unwrap();
        assert!(
            !q.unchanged_since(m),
            "a directory above a watched one renamed"
        );
    }

    #[tokio::test]
    async fn a_symlink_is_never_watched_as_what_it_points_to() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("f"), "").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("link")).unwrap();
        std::os::unix::fs::symlink(target.join("f"), dir.path().join("flink")).unwrap();
        let mut w = DirWatcher::start().unwrap();
        assert!(w.watch_exact(&dir.path().join("link")).is_err());
        w.watch_file(&dir.path().join("flink")).unwrap();
        let m = settled(&w).await;
        std::fs::write(target.join("f"), "x").unwrap();
        assert!(
            w.quiet().unchanged_since(m),
            "the link is watched, not its target"
        );
    }

    #[test]
    fn no_change_is_missed_while_the_reader_reads_at_the_same_time() {
        // Two workers: the reader drains the queue on one while this thread asks on another.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        let mut w = runtime.block_on(async { DirWatcher::start().unwrap() });
        w.watch(dir.path()).unwrap();
        let q = w.quiet();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        for i in 0..2_000 {
            // While the reader reads there is no moment; it reads briefly.
            let m = loop {
                if let Some(m) = q.now() {
                    break m;
                }
                assert!(std::time::Instant::now() < deadline, "never a moment");
                std::thread::yield_now();
            };
            std::fs::write(&file, i.to_string()).unwrap();
            assert!(!q.unchanged_since(m), "change {i} missed");
        }
        drop(w);
    }

    #[tokio::test]
    async fn a_watcher_gone_is_never_quiet_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = DirWatcher::start().unwrap();
        w.watch(dir.path()).unwrap();
        let q = w.quiet();
        let m = settled(&w).await;
        drop(w);
        for _ in 0..200 {
            if q.now().is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(q.now(), None);
        assert!(!q.unchanged_since(m));
    }

    #[test]
    fn only_local_file_systems_are_local() {
        assert!(
            on_local_file_system(&std::env::temp_dir()),
            "this machine's temp dir"
        );
        assert!(!on_local_file_system(Path::new("/proc")), "procfs");
        assert!(!on_local_file_system(Path::new("/no/such/path")));
    }

    #[tokio::test]
    async fn without_a_watcher_the_wait_is_the_poll_and_never_returns_early() {
        let started = std::time::Instant::now();
        assert!(!changed_within(None, Duration::from_millis(100)).await);
        assert!(started.elapsed() >= Duration::from_millis(100));
    }
}
