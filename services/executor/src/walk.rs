//! Walking a tree for `file_grep` and `file_find`: ripgrep's `ignore` walker (parallel, links
//! never followed), every entry checked against the floor before it is looked at, a deadline
//! checked between entries, and counters for what was left out.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use glovebox_proto::ErrorCode;
use ignore::{DirEntry, WalkBuilder, WalkState};

use crate::context::OpContext;
use crate::error::OpError;

/// A point in time after which a search stops and says so.
#[derive(Debug, Clone, Copy)]
pub struct Deadline(Instant);

impl Deadline {
    /// The deadline of a walk whose call asked for `timeout_ms` (at most, and by default,
    /// `MAX_SEARCH_MILLIS`).
    pub fn of_call(timeout_ms: Option<u64>) -> Deadline {
        let most = glovebox_proto::tools::MAX_SEARCH_MILLIS;
        Deadline::after(Duration::from_millis(timeout_ms.unwrap_or(most).min(most)))
    }

    pub fn after(d: Duration) -> Deadline {
        Deadline(Instant::now() + d)
    }

    pub fn passed(&self) -> bool {
        Instant::now() >= self.0
    }
}

/// Which entries a walk honours filters for (ripgrep's defaults unless the call says otherwise).
#[derive(Debug, Clone)]
pub struct WalkOptions<'a> {
    pub hidden: bool,
    pub no_ignore: bool,
    /// ripgrep-style globs on paths below the root; `!` excludes.
    pub globs: &'a [String],
    /// How deep below the root to go (`None`: all the way).
    pub max_depth: Option<usize>,
}

/// What a walk saw and left out.
#[derive(Debug, Default)]
pub struct WalkStats {
    /// Entries on the floor (or otherwise hidden from this account): never opened.
    pub hidden: AtomicU64,
    /// Symbolic links met in the tree: never followed.
    pub links: AtomicU64,
    pub timed_out: AtomicBool,
    /// Set by a visitor that has all the results it may return.
    pub full: AtomicBool,
}

impl WalkStats {
    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// One visible entry below the root: its canonical path and the walker's entry.
pub struct Visit<'e> {
    pub path: &'e str,
    pub entry: &'e DirEntry,
}

/// Walks the tree at the canonical directory `root`, calling a visitor made by `make` (one per
/// thread) for every entry that is not the root, not hidden and not a symbolic link. The
/// visitor returns whether to keep going.
pub fn walk<'s, F, V>(
    ctx: &'s OpContext<'s>,
    root: &str,
    options: &WalkOptions<'_>,
    deadline: Deadline,
    stats: &'s WalkStats,
    mut make: F,
) -> Result<(), OpError>
where
    F: FnMut() -> V,
    V: FnMut(Visit<'_>) -> bool + Send + 's,
{
    let unsafe_ignores = Arc::new(AtomicU64::new(0));
    let builder = builder(root, options, &unsafe_ignores)?;
    // Entries are checked for what their own name adds to a directory already checked: the
    // root once here (it is on the floor only when walked with the sandbox off, and then so is
    // everything in it), every deeper directory when the walk met it.
    let root_on_floor = ctx.on_floor(root);
    builder.build_parallel().run(|| {
        let mut visit = make();
        Box::new(move |entry| step(ctx, root_on_floor, entry, deadline, stats, &mut visit))
    });
    stats
        .hidden
        .fetch_add(unsafe_ignores.load(Ordering::Relaxed), Ordering::Relaxed);
    Ok(())
}

/// The walker for `root`: links never followed, ripgrep's filters as `options` say, ignore
/// files honoured only where they are plain (a directory whose ignore file is not is skipped
/// and counted in `unsafe_ignores`).
fn builder(
    root: &str,
    options: &WalkOptions<'_>,
    unsafe_ignores: &Arc<AtomicU64>,
) -> Result<WalkBuilder, OpError> {
    let mut builder = WalkBuilder::new(root);
    builder
        .follow_links(false)
        .same_file_system(false)
        .hidden(!options.hidden)
        .ignore(!options.no_ignore)
        .git_ignore(!options.no_ignore)
        .git_global(!options.no_ignore)
        .git_exclude(!options.no_ignore)
        .parents(!options.no_ignore)
        .max_depth(options.max_depth)
        .threads(threads());
    if !options.no_ignore {
        // The walker reads ignore files itself, by path. Only plain files are let through: a
        // directory whose ignore file is a link or has other names is not entered (and counted
        // as hidden), and ignore files above the root are honoured only if all are plain.
        if !ignore_files_are_plain(Path::new(root)) {
            return Err(OpError::new(
                ErrorCode::InvalidParams,
                format!(
                    "an ignore file in {root} is a link or has other names; search with no_ignore"
                ),
            ));
        }
        builder.parents(
            Path::new(root)
                .ancestors()
                .skip(1)
                .all(ignore_files_are_plain),
        );
        let counter = unsafe_ignores.clone();
        builder.filter_entry(move |e| {
            let plain =
                !e.file_type().is_some_and(|t| t.is_dir()) || ignore_files_are_plain(e.path());
            if !plain {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            plain
        });
    }
    if !options.globs.is_empty() {
        builder.overrides(overrides(root, options.globs)?);
    }
    Ok(builder)
}

/// ripgrep-style globs on paths below `root` (`!` excludes).
fn overrides(root: &str, globs: &[String]) -> Result<ignore::overrides::Override, OpError> {
    let mut overrides = ignore::overrides::OverrideBuilder::new(root);
    for g in globs {
        overrides
            .add(g)
            .map_err(|e| OpError::new(ErrorCode::InvalidParams, format!("glob {g:?}: {e}")))?;
    }
    overrides
        .build()
        .map_err(|e| OpError::new(ErrorCode::InvalidParams, format!("globs: {e}")))
}

/// One entry the walker met: stop when the visitor is full or time is up, skip the root,
/// hidden entries and links (counting them), and hand the rest to `visit`.
fn step(
    ctx: &OpContext<'_>,
    root_on_floor: bool,
    entry: Result<DirEntry, ignore::Error>,
    deadline: Deadline,
    stats: &WalkStats,
    visit: &mut impl FnMut(Visit<'_>) -> bool,
) -> WalkState {
    if stats.full.load(Ordering::Relaxed) {
        return WalkState::Quit;
    }
    if deadline.passed() {
        stats.timed_out.store(true, Ordering::Relaxed);
        return WalkState::Quit;
    }
    let entry = match entry {
        Ok(entry) => entry,
        // Unreadable directories and the like are skipped, as ripgrep does.
        Err(_) => return WalkState::Continue,
    };
    if entry.depth() == 0 {
        return WalkState::Continue;
    }
    let Some(path) = entry.path().to_str() else {
        WalkStats::count(&stats.hidden);
        return WalkState::Skip;
    };
    let hidden = match path.rsplit_once('/') {
        Some((parent, name)) => root_on_floor || ctx.hidden_entry(parent, name).is_some(),
        None => true,
    };
    if hidden {
        WalkStats::count(&stats.hidden);
        return WalkState::Skip;
    }
    if entry.path_is_symlink() {
        WalkStats::count(&stats.links);
        return WalkState::Skip;
    }
    if visit(Visit {
        path,
        entry: &entry,
    }) {
        WalkState::Continue
    } else {
        WalkState::Quit
    }
}

/// The entries below the canonical directory `root` whose names `keep` accepts, each with its
/// kind (`dir`, `file` or `other`), in path order: at most `max` (then `stats.full` is set), each
/// under a parent that is still no link (others are counted as links). What `file_find` and
/// `file_tree` return.
pub fn collect(
    ctx: &OpContext<'_>,
    root: &str,
    options: &WalkOptions<'_>,
    deadline: Deadline,
    stats: &WalkStats,
    max: usize,
    keep: &(dyn Fn(&str) -> bool + Sync),
) -> Result<Vec<(String, &'static str)>, OpError> {
    let found: std::sync::Mutex<Vec<(String, &'static str)>> = std::sync::Mutex::new(Vec::new());
    let found_ref = &found;
    walk(ctx, root, options, deadline, stats, || {
        move |visit| {
            let Some(name) = visit.entry.file_name().to_str() else {
                return true;
            };
            if !keep(name) {
                return true;
            }
            if !parent_has_no_links(visit.path) {
                WalkStats::count(&stats.links);
                return true;
            }
            let kind = match visit.entry.file_type() {
                Some(t) if t.is_dir() => "dir",
                Some(t) if t.is_file() => "file",
                _ => "other",
            };
            let Ok(mut found) = found_ref.lock() else {
                return false;
            };
            if found.len() >= max {
                stats.full.store(true, Ordering::Relaxed);
                return false;
            }
            found.push((visit.path.to_owned(), kind));
            true
        }
    })?;
    let mut found = found.into_inner().unwrap_or_default();
    found.sort_unstable();
    Ok(found)
}

/// Whether the ignore files the walker would read in `dir` are absent or plain files with one
/// name (never a link that could point at a floor entry).
pub fn ignore_files_are_plain(dir: &Path) -> bool {
    [".gitignore", ".ignore", ".git"].iter().all(|name| {
        match std::fs::symlink_metadata(dir.join(name)) {
            Err(_) => true,
            Ok(m) if m.file_type().is_dir() => *name == ".git",
            Ok(m) => m.file_type().is_file() && m.nlink() == 1,
        }
    })
}

/// Checks, after a walk, that the canonical root still is the directory that was opened (same
/// device and inode, not a link): a root swapped mid-walk fails the call instead of returning
/// what was found under something else.
pub fn check_root_unchanged(root: &str, opened: &rustix::fs::Stat) -> Result<(), OpError> {
    let now = crate::fsio::stat_path(root)?;
    if now.st_dev != opened.st_dev || now.st_ino != opened.st_ino {
        return Err(OpError::changed(root));
    }
    Ok(())
}

/// Whether every component of the canonical `path` is still a real directory, not a link
/// (one `openat2` with `RESOLVE_NO_SYMLINKS` on its parent). Names found by a walk are returned
/// only if this holds, so a directory swapped for a link mid-walk lends no names.
pub fn parent_has_no_links(path: &str) -> bool {
    match crate::fsio::split_parent(path) {
        Ok((parent, _)) => crate::fsio::open_no_links(
            parent,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
        )
        .is_ok(),
        Err(_) => false,
    }
}

fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get().min(8))
        .unwrap_or(2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_root_swapped_for_a_link_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let tree = root.join("tree");
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir_all(tree.join("sub")).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        let tree_s = tree.to_str().unwrap();
        let opened = crate::fsio::stat_path(tree_s).unwrap();
        check_root_unchanged(tree_s, &opened).unwrap();
        assert!(parent_has_no_links(tree.join("sub/x").to_str().unwrap()));
        std::fs::rename(&tree, root.join("moved")).unwrap();
        symlink(&elsewhere, &tree).unwrap();
        assert_eq!(
            check_root_unchanged(tree_s, &opened).unwrap_err().code,
            ErrorCode::Changed
        );
        assert!(!parent_has_no_links(tree.join("x").to_str().unwrap()));
    }

    #[test]
    fn ignore_files_must_be_plain() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert!(ignore_files_are_plain(d));
        std::fs::write(d.join(".gitignore"), "target\n").unwrap();
        std::fs::create_dir(d.join(".git")).unwrap();
        assert!(ignore_files_are_plain(d));
        std::fs::hard_link(d.join(".gitignore"), d.join("other")).unwrap();
        assert!(!ignore_files_are_plain(d));
        std::fs::remove_file(d.join("other")).unwrap();
        symlink(d.join("secret"), d.join(".ignore")).unwrap();
        assert!(!ignore_files_are_plain(d));
    }
}
