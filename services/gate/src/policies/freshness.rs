//! When a decision may use an account's compiled policy without looking at its files again.
//!
//! An edit of a policy file applies to the next decision. Without a watcher that takes a `stat`
//! of the account and project files per decision. With one it takes none, as long as the watcher
//! can prove that nothing changed: every directory the files are reached through, and the files
//! themselves, are watched ([`watch_account`]); the compiled policy was checked against the files
//! after those watches were in place and at a moment since which the watcher read no event and
//! has none queued ([`glovebox_watch::Quiet`]). The kernel queues a change's event before the
//! call that made it returns, so an edit finished before a decision is either queued, or read
//! (which moved the moment on): the decision then checks the files as before.
//!
//! What counts as a change is wide on purpose — anything in the account's directory or at the
//! top of its workdir, the policy files through any of their names, a directory above them
//! renamed or removed. Each wakes the gate's reload (see `crate::watch`), which watches again and
//! grants trust afresh ([`AccountPolicies::watch_files`](super::AccountPolicies::watch_files)).
//!
//! Not proved by events, so the files are checked on every decision as before: a directory on a
//! file system whose changes can come from elsewhere (NFS, FUSE, …: only local kinds are
//! trusted), a symlink anywhere on the way, an account directory that does not exist, and any
//! account while the watcher is reading or gone. Not seen by any check, with or without events: a
//! file system mounted over a directory on the way, and a write through a shared memory map.

use std::io;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use glovebox_watch::{DirWatcher, Moment, Quiet, on_local_file_system};

/// When files were last looked at (or last found watched): the watches' epoch and the watcher's
/// moment, both taken before the look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checked {
    epoch: u64,
    moment: Moment,
}

/// The watcher's word on one kind of file (each account's policy files, `glovebox.yaml`): it ties
/// a [`DirWatcher`] to them, numbers each time they are watched again, counts the looks decisions
/// took, and says when a decision may skip its look. The files' owner keeps, per set of files,
/// when they were last found covered ([`Watched::covered`]) and last looked at
/// ([`Freshness::looking`]).
#[derive(Default)]
pub(crate) struct Freshness {
    /// The file watcher's word on whether anything changed, once it watches the files.
    quiet: OnceLock<Quiet>,
    /// Bumped each time the files are watched again.
    epoch: AtomicU64,
    /// Decisions that looked at the files (the rest trusted the watcher).
    looks: AtomicU64,
}

/// The watches of one [`Freshness::watch`]: since when they vouch for the files they cover.
pub(crate) struct Watched {
    epoch: u64,
    moment: Option<Moment>,
}

impl Freshness {
    /// Adds the watches with `add` (the first call ties `watcher` to these files for good) and
    /// returns what it returns, with [`Watched`] to say since when the watcher vouches for each
    /// set of files the watches cover.
    pub fn watch<R>(
        &self,
        watcher: &mut DirWatcher,
        add: impl FnOnce(&mut DirWatcher) -> R,
    ) -> (R, Watched) {
        let quiet = self.quiet.get_or_init(|| watcher.quiet());
        // Taken before any watch is added: an event read since then voids what is found here.
        let moment = quiet.now();
        let added = add(watcher);
        // Bumped after the watches are in place: a look counts only if it read this epoch, so
        // it looked at the files after.
        let epoch = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        (added, Watched { epoch, moment })
    }

    /// Before a decision looks at the files: the look is counted, and what the watcher will
    /// vouch for from then on (`None`: nothing).
    pub fn looking(&self) -> Option<Checked> {
        self.looks.fetch_add(1, Ordering::Relaxed);
        // Both before the files are looked at.
        let epoch = self.epoch.load(Ordering::SeqCst);
        let moment = self.quiet.get().and_then(Quiet::now)?;
        Some(Checked { epoch, moment })
    }

    /// Whether files last found covered at `covered` and last looked at at `checked` need no
    /// look now: they were looked at after their watches were in place, and the watcher has read
    /// no event since and has none queued.
    pub fn trusted(&self, covered: Option<Checked>, checked: Option<Checked>) -> bool {
        match (self.quiet.get(), covered) {
            (Some(quiet), Some(covered)) => {
                checked == Some(covered) && quiet.unchanged_since(covered.moment)
            }
            _ => false,
        }
    }

    /// How many times a decision looked at the files.
    pub fn looks(&self) -> u64 {
        self.looks.load(Ordering::SeqCst)
    }
}

impl Watched {
    /// Since when the watcher vouches for a set of files, if the watches cover it (`covered`):
    /// `None` when they do not, or the watcher cannot tell.
    pub fn covered(&self, covered: bool) -> Option<Checked> {
        let moment = self.moment.filter(|_| covered)?;
        Some(Checked {
            epoch: self.epoch,
            moment,
        })
    }
}

/// The paths of one account's policy files.
pub(super) struct AccountFiles<'a> {
    /// `<state>/accounts/<id>`, holding `file`.
    pub account_dir: &'a Path,
    pub file: &'a Path,
    pub workdir: &'a Path,
    /// `<workdir>/.glovebox`, holding `project_file`; it may not exist.
    pub project_dir: &'a Path,
    pub project_file: &'a Path,
}

/// Watches everything an edit of the account's policy files can come through, and says whether
/// that is all of it (the account's decisions may then trust the watcher).
pub(super) fn watch_account(watcher: &mut DirWatcher, files: &AccountFiles) -> bool {
    // A relative path goes through the current directory, whose ancestors are not watched.
    let mut covered = files.account_dir.is_absolute() && files.workdir.is_absolute();
    for dir in [files.account_dir, files.workdir] {
        // Each directory above: renaming one moves everything below without an event there.
        for above in dir.ancestors().skip(1) {
            if above.parent().is_some() && watcher.watch_moves(above).is_err() {
                covered = false;
            }
        }
        covered &= watch_dir(watcher, dir, false);
    }
    // The project directory may not exist: making it is a change at the top of the workdir.
    covered &= watch_dir(watcher, files.project_dir, true);
    for file in [files.file, files.project_file] {
        // Watched itself too: a write through another name of it is no change in its directory.
        match watcher.watch_file(file) {
            // Looked at after the watch: swapping it since is a change in its watched directory.
            Ok(()) => covered &= std::fs::symlink_metadata(file).is_ok_and(|m| m.is_file()),
            Err(e) => covered &= e.kind() == io::ErrorKind::NotFound,
        }
    }
    covered
}

/// Watches everything an edit of the one file `file` can come through (the gate's
/// `glovebox.yaml`, say, beside files that change all the time: only moves of its directory are
/// watched, and the file itself), and says whether that is all of it: an absolute path, a plain
/// file that is there, in a directory that is no symlink, on a local file system.
pub(crate) fn watch_lone_file(watcher: &mut DirWatcher, file: &Path) -> bool {
    let Some(dir) = file.parent().filter(|_| file.is_absolute()) else {
        return false;
    };
    let mut covered = true;
    // The file's own directory too: renaming it moves the file without an event on the file.
    for above in dir.ancestors() {
        if above.parent().is_some() && watcher.watch_moves(above).is_err() {
            covered = false;
        }
    }
    // A write, a rename over it or its removal changes the file itself (its link count, for the
    // last two): watched through whichever name, looked at after the watch.
    covered &= watcher.watch_file(file).is_ok()
        && std::fs::symlink_metadata(file).is_ok_and(|m| m.is_file());
    covered && on_local_file_system(dir)
}

/// Watches the directory `dir` itself and says whether that covers it: a directory, not a
/// symlink, on a local file system (or nothing there, if it `may_be_missing`). A symlink to a
/// directory is watched through all the same, so that a change there still wakes the reload.
fn watch_dir(watcher: &mut DirWatcher, dir: &Path, may_be_missing: bool) -> bool {
    match watcher.watch_exact(dir) {
        Ok(()) => on_local_file_system(dir),
        Err(e) if e.kind() == io::ErrorKind::NotFound => may_be_missing,
        Err(_) => {
            if dir.is_dir()
                && let Err(error) = watcher.watch(dir)
            {
                tracing::warn!(path = %dir.display(), %error, "cannot watch a policy directory");
            }
            false
        }
    }
}

/// The edits of one file that a decision trusting the watcher must still see, for the tests of
/// everything that trusts it.
#[cfg(test)]
pub(crate) mod edits {
    use std::path::Path;

    /// What the edit is, and the edit: writes its text to the file.
    pub(crate) type Edit<'a> = (&'a str, Box<dyn Fn(&str) + 'a>);

    /// `file` written in place, replaced by a rename and written through a hard link elsewhere
    /// (`outside`, a directory on the same file system).
    pub(crate) fn of_a_file<'a>(file: &'a Path, outside: &'a Path) -> Vec<Edit<'a>> {
        vec![
            (
                "written in place",
                Box::new(move |t| std::fs::write(file, t).unwrap()),
            ),
            (
                "replaced by a rename",
                Box::new(move |t| {
                    std::fs::write(outside.join("new.yaml"), t).unwrap();
                    std::fs::rename(outside.join("new.yaml"), file).unwrap();
                }),
            ),
            (
                "written through a hard link elsewhere",
                Box::new(move |t| {
                    let link = outside.join("link.yaml");
                    let _ = std::fs::remove_file(&link);
                    std::fs::hard_link(file, &link).unwrap();
                    std::fs::write(&link, t).unwrap();
                }),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tree {
        dir: tempfile::TempDir,
    }

    impl Tree {
        fn new() -> Tree {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join("state/accounts/a")).unwrap();
            std::fs::create_dir_all(dir.path().join("work")).unwrap();
            Tree { dir }
        }
        fn path(&self, p: &str) -> std::path::PathBuf {
            self.dir.path().join(p)
        }
        fn covered(&self) -> bool {
            self.watched_by(&mut DirWatcher::start().unwrap())
        }
        fn watched_by(&self, watcher: &mut DirWatcher) -> bool {
            let (account_dir, workdir) = (self.path("state/accounts/a"), self.path("work"));
            let project_dir = workdir.join(".glovebox");
            let files = AccountFiles {
                file: &account_dir.join("permissions.yaml"),
                account_dir: &account_dir,
                project_file: &project_dir.join("permissions.yaml"),
                project_dir: &project_dir,
                workdir: &workdir,
            };
            watch_account(watcher, &files)
        }
    }

    #[tokio::test]
    async fn an_account_is_covered_only_when_every_way_to_its_files_is_watched() {
        let t = Tree::new();
        assert!(t.covered(), "no files yet: their directories are watched");
        std::fs::create_dir(t.path("work/.glovebox")).unwrap();
        std::fs::write(t.path("work/.glovebox/permissions.yaml"), "").unwrap();
        std::fs::write(t.path("state/accounts/a/permissions.yaml"), "").unwrap();
        assert!(t.covered(), "plain files in plain directories");

        // A policy file that is a symlink.
        std::fs::remove_file(t.path("work/.glovebox/permissions.yaml")).unwrap();
        std::os::unix::fs::symlink(
            t.path("elsewhere.yaml"),
            t.path("work/.glovebox/permissions.yaml"),
        )
        .unwrap();
        assert!(!t.covered(), "a symlinked project file");
        std::fs::remove_file(t.path("work/.glovebox/permissions.yaml")).unwrap();
        assert!(t.covered());

        // A project directory that is a symlink.
        std::fs::remove_dir(t.path("work/.glovebox")).unwrap();
        std::fs::create_dir(t.path("other")).unwrap();
        std::os::unix::fs::symlink(t.path("other"), t.path("work/.glovebox")).unwrap();
        assert!(!t.covered(), "a symlinked project directory");
        std::fs::remove_file(t.path("work/.glovebox")).unwrap();

        // A directory above the account's that is a symlink.
        std::fs::rename(t.path("state"), t.path("real-state")).unwrap();
        std::os::unix::fs::symlink(t.path("real-state"), t.path("state")).unwrap();
        assert!(!t.covered(), "a symlink above the account directory");
        std::fs::remove_file(t.path("state")).unwrap();
        std::fs::rename(t.path("real-state"), t.path("state")).unwrap();
        assert!(t.covered());

        // No account directory.
        std::fs::remove_dir_all(t.path("state/accounts/a")).unwrap();
        assert!(!t.covered(), "a missing account directory");
    }

    #[tokio::test]
    async fn a_symlinked_project_directory_is_not_covered_but_still_wakes_the_reload() {
        let t = Tree::new();
        std::fs::create_dir(t.path("other")).unwrap();
        std::os::unix::fs::symlink(t.path("other"), t.path("work/.glovebox")).unwrap();
        let mut w = DirWatcher::start().unwrap();
        assert!(!t.watched_by(&mut w));
        let _ =
            glovebox_watch::changed_within(Some(&w), std::time::Duration::from_millis(50)).await;
        std::fs::write(t.path("other/permissions.yaml"), "").unwrap();
        assert!(
            glovebox_watch::changed_within(Some(&w), std::time::Duration::from_secs(5)).await,
            "a change in the directory it points to"
        );
    }
}
