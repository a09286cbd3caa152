//! Path resolution as the account's user: relative paths against the workdir, symlinks and `..`
//! followed to the real target, and for paths that do not exist yet, the nearest existing parent.
//!
//! The result is the canonical subject the gate judges. Resolution never fails because of what
//! is (or is not) on disk: only input that cannot be judged at all is refused (empty, NUL bytes,
//! too long, a name over 255 bytes), so a plan reveals nothing a denied call could use.
//!
//! The path is walked one component at a time from `/`. Existing components are followed
//! physically (a symbolic link to its real target, `..` to the real parent). From the first
//! component that does not exist on, the rest is applied lexically: a missing directory cannot
//! be a symbolic link, so `..` simply pops a missing component (`nothere/../x` is `x`), and once
//! every missing component is popped the walk is physical again.
//!
//! A component that exists but cannot be followed — a dangling symbolic link, a link loop, a name
//! below a file, a directory the user may not search, a link to a non-UTF-8 name — is treated
//! exactly like a missing one, so the gate judges the same path it would judge if nothing were
//! there, and the reason is recorded in [`Resolved::unfollowable`]. Execution refuses such a
//! path after the gate allowed it ([`Resolved::followable`]), so the refusal is never a probe.
//! A dangling link is therefore judged at its own name, never at its target, and never written
//! through.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::MAX_PATH_BYTES;

use crate::error::OpError;

/// Longest name of one path component (Linux `NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;

/// Why an existing component could not be followed. Such a path is judged as if that component
/// did not exist, and refused only when the call executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfollowable {
    /// A symbolic link whose target does not exist.
    DanglingLink,
    /// Symbolic links that loop (or too many of them).
    LinkLoop,
    /// A name below something that is not a directory (or a trailing `/` on a file).
    NotADirectory,
    /// A directory the account's user may not search.
    AccessDenied,
    /// A symbolic link to a name that is not valid UTF-8 or is too long.
    UnusableLink,
}

/// A canonical absolute path, whether something exists there, and why it could not be followed
/// to its end (if it could not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub path: String,
    pub exists: bool,
    pub unfollowable: Option<Unfollowable>,
}

impl Resolved {
    /// Refuses a path that could not be followed. Called when a call executes — after the gate
    /// allowed it — never when it is planned. `shown` is the path as the client gave it.
    pub fn followable(&self, shown: &str) -> Result<(), OpError> {
        let Some(why) = self.unfollowable else {
            return Ok(());
        };
        let (code, what) = match why {
            Unfollowable::DanglingLink => (
                ErrorCode::InvalidParams,
                "a symbolic link on the path is dangling; refusing to follow it",
            ),
            Unfollowable::LinkLoop => (
                ErrorCode::InvalidParams,
                "too many levels of symbolic links",
            ),
            Unfollowable::NotADirectory => (
                ErrorCode::InvalidParams,
                "a component of the path is not a directory",
            ),
            Unfollowable::AccessDenied => {
                (ErrorCode::Denied, "the operating system refused access")
            }
            Unfollowable::UnusableLink => (
                ErrorCode::InvalidParams,
                "a symbolic link on the path names something not valid UTF-8 or too long",
            ),
        };
        Err(OpError::new(code, format!("{shown}: {what}")))
    }
}

/// Resolves `input` for the account whose canonical workdir is `workdir`.
pub fn resolve(input: &str, workdir: &Path) -> Result<Resolved, OpError> {
    check_input(input)?;
    let absolute = absolute(input, workdir)?;
    if is_plain_and_present(&absolute) {
        return Ok(Resolved {
            path: absolute,
            exists: true,
            unfollowable: None,
        });
    }
    // Everything exists and can be followed, through symbolic links or `..`.
    if let Ok(real) = std::fs::canonicalize(&absolute)
        && let Ok(path) = real.into_os_string().into_string()
        && path.len() <= MAX_PATH_BYTES
    {
        return Ok(Resolved {
            path,
            exists: true,
            unfollowable: None,
        });
    }
    walk(&absolute)
}

/// The most common case, in one lookup (where `realpath` reads each component as a link): an
/// absolute path with no empty, `.` or `..` component and no symbolic link anywhere on it is
/// its own canonical form, and it exists if it opens with symbolic links refused.
fn is_plain_and_present(absolute: &str) -> bool {
    let plain = absolute.len() <= MAX_PATH_BYTES
        && absolute
            .strip_prefix('/')
            .is_some_and(|rest| rest.split('/').all(|n| !matches!(n, "" | "." | "..")));
    plain
        && rustix::fs::openat2(
            rustix::fs::CWD,
            absolute,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
            rustix::fs::ResolveFlags::NO_SYMLINKS,
        )
        .is_ok()
}

/// Resolves `input` as an entry itself, for calls that remove or move it: the parent directory is
/// resolved like any path (links and `..` followed), the last component is kept as named, so a
/// symbolic link names the link, never its target.
pub fn resolve_entry(input: &str, workdir: &Path) -> Result<Resolved, OpError> {
    check_input(input)?;
    let invalid = |m: &str| OpError::new(ErrorCode::InvalidParams, m);
    let absolute = PathBuf::from(absolute(input, workdir)?);
    let (Some(parent), Some(name)) = (absolute.parent(), absolute.file_name()) else {
        return Err(invalid("path must name an entry (not `/`, `.` or `..`)"));
    };
    let name = name
        .to_str()
        .ok_or_else(|| invalid("path is not valid UTF-8"))?;
    let parent = parent
        .to_str()
        .ok_or_else(|| invalid("path is not valid UTF-8"))?;
    let base = resolve(parent, workdir)?;
    let path = utf8(Path::new(&base.path).join(name))?;
    if !base.exists {
        return Ok(Resolved {
            path,
            exists: false,
            unfollowable: base.unfollowable,
        });
    }
    let (exists, unfollowable) = match std::fs::symlink_metadata(&path) {
        Ok(_) => (true, None),
        Err(e) => (false, stuck(e, &path)?),
    };
    Ok(Resolved {
        path,
        exists,
        unfollowable,
    })
}

/// Refuses input that cannot be judged whatever is on disk.
fn check_input(input: &str) -> Result<(), OpError> {
    let invalid = |m: &str| Err(OpError::new(ErrorCode::InvalidParams, m));
    if input.is_empty() {
        return invalid("path must not be empty");
    }
    if input.contains('\0') {
        return invalid("path must not contain NUL bytes");
    }
    if input.len() > MAX_PATH_BYTES {
        return invalid("path is too long");
    }
    if input.split('/').any(|name| name.len() > MAX_NAME_BYTES) {
        return invalid("a path component is longer than 255 bytes");
    }
    Ok(())
}

fn absolute(input: &str, workdir: &Path) -> Result<String, OpError> {
    if input.starts_with('/') {
        return Ok(input.to_owned());
    }
    let base = workdir
        .to_str()
        .ok_or_else(|| OpError::new(ErrorCode::Internal, "the workdir is not valid UTF-8"))?;
    Ok(format!("{}/{input}", base.trim_end_matches('/')))
}

/// One step of the walk: the next component exists (its canonical path, and whether it is a
/// directory), or it is missing (and why, if it exists but cannot be followed).
enum Step {
    Found(PathBuf, bool),
    Missing(Option<Unfollowable>),
}

/// Walks `absolute` from `/`: physically while components exist, lexically below the first one
/// that does not (see the module docs).
fn walk(absolute: &str) -> Result<Resolved, OpError> {
    let mut cur = PathBuf::from("/");
    let mut cur_is_dir = true;
    let mut missing: Vec<&str> = Vec::new();
    let mut unfollowable = None;
    for name in absolute.split('/') {
        match name {
            // `a//b`, `a/.` and a trailing `/` need `a` to be a directory.
            "" | "." => {
                if missing.is_empty() && !cur_is_dir {
                    unfollowable.get_or_insert(Unfollowable::NotADirectory);
                }
            }
            ".." => {
                if missing.pop().is_none() {
                    if !cur_is_dir {
                        unfollowable.get_or_insert(Unfollowable::NotADirectory);
                    }
                    // `cur` is canonical: its lexical parent is its real parent.
                    cur.pop();
                    cur_is_dir = true;
                }
            }
            name if !missing.is_empty() => missing.push(name),
            name => match step(&cur, name)? {
                Step::Found(next, is_dir) => {
                    cur = next;
                    cur_is_dir = is_dir;
                }
                Step::Missing(why) => {
                    if let Some(why) = why {
                        unfollowable.get_or_insert(why);
                    }
                    missing.push(name);
                }
            },
        }
    }
    let exists = missing.is_empty() && unfollowable.is_none();
    for name in missing {
        cur.push(name);
    }
    Ok(Resolved {
        path: utf8(cur)?,
        exists,
        unfollowable,
    })
}

fn step(cur: &Path, name: &str) -> Result<Step, OpError> {
    let next = cur.join(name);
    let shown = next.to_string_lossy();
    let meta = match std::fs::symlink_metadata(&next) {
        Ok(meta) => meta,
        Err(e) => return Ok(Step::Missing(stuck(e, &shown)?)),
    };
    if !meta.file_type().is_symlink() {
        return Ok(Step::Found(next, meta.is_dir()));
    }
    let real = match std::fs::canonicalize(&next) {
        Ok(real) => real,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Ok(Step::Missing(Some(Unfollowable::DanglingLink)));
        }
        Err(e) => return Ok(Step::Missing(stuck(e, &shown)?)),
    };
    if real.to_str().is_none_or(|r| r.len() > MAX_PATH_BYTES) {
        return Ok(Step::Missing(Some(Unfollowable::UnusableLink)));
    }
    match std::fs::metadata(&real) {
        Ok(meta) => Ok(Step::Found(real, meta.is_dir())),
        Err(e) => Ok(Step::Missing(stuck(e, &shown)?)),
    }
}

/// What an error looking up an existing prefix's next component means: `None` if the component
/// is simply missing, why it cannot be followed if it exists, or an error for anything else.
fn stuck(e: std::io::Error, what: &str) -> Result<Option<Unfollowable>, OpError> {
    if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
        return Ok(Some(Unfollowable::LinkLoop));
    }
    match e.kind() {
        ErrorKind::NotFound => Ok(None),
        ErrorKind::NotADirectory => Ok(Some(Unfollowable::NotADirectory)),
        ErrorKind::PermissionDenied => Ok(Some(Unfollowable::AccessDenied)),
        ErrorKind::InvalidFilename => Ok(Some(Unfollowable::UnusableLink)),
        _ => Err(OpError::io(e, what)),
    }
}

fn utf8(path: PathBuf) -> Result<String, OpError> {
    let path = path
        .into_os_string()
        .into_string()
        .map_err(|_| OpError::new(ErrorCode::InvalidParams, "path is not valid UTF-8"))?;
    if path.len() > MAX_PATH_BYTES {
        return Err(OpError::new(ErrorCode::InvalidParams, "path is too long"));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Unfollowable::*;
    use std::os::unix::fs::symlink;

    struct Tree {
        _dir: tempfile::TempDir,
        root: PathBuf,
        work: PathBuf,
    }

    fn tree() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let work = root.join("w");
        std::fs::create_dir_all(work.join("sub")).unwrap();
        std::fs::create_dir_all(root.join("outside")).unwrap();
        std::fs::write(work.join("a.txt"), "a").unwrap();
        std::fs::write(root.join("outside/secret.txt"), "s").unwrap();
        symlink(root.join("outside/secret.txt"), work.join("link-to-file")).unwrap();
        symlink(root.join("outside"), work.join("link-to-dir")).unwrap();
        symlink(work.join("link-to-file"), work.join("chain")).unwrap();
        symlink(root.join("outside/missing.txt"), work.join("dangling")).unwrap();
        symlink(work.join("loop-b"), work.join("loop-a")).unwrap();
        symlink(work.join("loop-a"), work.join("loop-b")).unwrap();
        Tree {
            _dir: dir,
            root,
            work,
        }
    }

    /// (input, path below the tree's root, exists, why it cannot be followed)
    type Case = (&'static str, &'static str, bool, Option<Unfollowable>);

    fn check(t: &Tree, cases: &[Case], resolver: fn(&str, &Path) -> Result<Resolved, OpError>) {
        for &(input, want, exists, unfollowable) in cases {
            let got = resolver(input, &t.work).unwrap_or_else(|e| panic!("{input}: {e:?}"));
            let want = Resolved {
                path: format!("{}/{want}", t.root.display())
                    .trim_end_matches('/')
                    .to_owned(),
                exists,
                unfollowable,
            };
            assert_eq!(got, want, "{input}");
        }
    }

    fn err(t: &Tree, input: &str) -> OpError {
        resolve(input, &t.work).expect_err(input)
    }

    /// The one-lookup case takes exactly the paths that are already canonical and exist; every
    /// other path goes the long way (the cases below then check where it ends).
    #[test]
    fn only_plain_existing_paths_take_the_one_lookup() {
        let t = tree();
        let at = |rel: &str| format!("{}/{rel}", t.work.display());
        assert!(is_plain_and_present(&at("a.txt")));
        assert!(is_plain_and_present(&at("sub")));
        // A FIFO is looked up, never opened: the one lookup does not wait for a writer.
        crate::testing::make_fifo(&t.work.join("fifo"));
        assert!(is_plain_and_present(&at("fifo")));
        assert_eq!(resolve("fifo", &t.work).unwrap().path, at("fifo"));
        for long_way in [
            at("link-to-file"),
            at("link-to-dir/secret.txt"),
            at("dangling"),
            at("missing"),
            at("sub/../a.txt"),
            at("./a.txt"),
            at("sub//a.txt"),
            at("sub/"),
            at("a.txt/x"),
            "/".to_owned(),
            "/proc/self/cwd".to_owned(),
            format!("/proc/self/fd/0/{}", "x"),
        ] {
            assert!(!is_plain_and_present(&long_way), "{long_way}");
        }
    }

    #[test]
    fn existing_paths_resolve_physically() {
        let t = tree();
        check(
            &t,
            &[
                ("a.txt", "w/a.txt", true, None),
                ("./sub/../a.txt", "w/a.txt", true, None),
                (".", "w", true, None),
                // symlinks are judged by their real target
                ("link-to-file", "outside/secret.txt", true, None),
                ("chain", "outside/secret.txt", true, None),
                ("link-to-dir/secret.txt", "outside/secret.txt", true, None),
                // `..` after a symlink is physical: link-to-dir/.. is the root, not the workdir
                (
                    "link-to-dir/../outside/secret.txt",
                    "outside/secret.txt",
                    true,
                    None,
                ),
                ("link-to-dir/..", "", true, None),
                // escapes resolve to where they land
                ("../outside/secret.txt", "outside/secret.txt", true, None),
                ("sub/../../outside", "outside", true, None),
                // trailing and double slashes
                ("sub/", "w/sub", true, None),
                ("sub//..//a.txt", "w/a.txt", true, None),
            ],
            resolve,
        );
    }

    #[test]
    fn missing_paths_resolve_below_their_nearest_existing_parent() {
        let t = tree();
        check(
            &t,
            &[
                ("new/deeper/file.txt", "w/new/deeper/file.txt", false, None),
                // a new file under a symlinked parent lands in the real directory
                ("link-to-dir/new.txt", "outside/new.txt", false, None),
                ("nothere/.ssh/id_rsa", "w/nothere/.ssh/id_rsa", false, None),
            ],
            resolve,
        );
    }

    #[test]
    fn dot_dot_through_a_missing_directory_pops_it_lexically() {
        let t = tree();
        check(
            &t,
            &[
                ("missing/../a.txt", "w/a.txt", true, None),
                ("missing/deeper/../../a.txt", "w/a.txt", true, None),
                ("nothere/.ssh/../x", "w/nothere/x", false, None),
                ("nothere/../../outside", "outside", true, None),
                // once every missing component is popped, links are followed again
                (
                    "missing/../link-to-dir/secret.txt",
                    "outside/secret.txt",
                    true,
                    None,
                ),
                ("missing/../link-to-dir/../w", "w", true, None),
            ],
            resolve,
        );
    }

    #[test]
    fn what_cannot_be_followed_is_judged_like_a_missing_path() {
        let t = tree();
        check(
            &t,
            &[
                // a dangling link is judged at its own name, never at its target
                ("dangling", "w/dangling", false, Some(DanglingLink)),
                ("dangling/x", "w/dangling/x", false, Some(DanglingLink)),
                ("dangling/../a.txt", "w/a.txt", false, Some(DanglingLink)),
                ("loop-a", "w/loop-a", false, Some(LinkLoop)),
                ("loop-a/x", "w/loop-a/x", false, Some(LinkLoop)),
                ("a.txt/x", "w/a.txt/x", false, Some(NotADirectory)),
                ("a.txt/", "w/a.txt", false, Some(NotADirectory)),
                ("a.txt/.", "w/a.txt", false, Some(NotADirectory)),
                ("a.txt/../sub", "w/sub", false, Some(NotADirectory)),
            ],
            resolve,
        );
    }

    #[test]
    fn only_execution_refuses_what_cannot_be_followed() {
        let t = tree();
        let r = resolve("dangling", &t.work).unwrap();
        let e = r.followable("dangling").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidParams);
        assert!(e.message.contains("dangling"), "{}", e.message);
        let e = resolve("a.txt/x", &t.work).unwrap().followable("a.txt/x");
        assert!(e.unwrap_err().message.contains("not a directory"));
        assert!(
            resolve("nothere/x", &t.work)
                .unwrap()
                .followable("x")
                .is_ok()
        );
        let denied = Resolved {
            path: "/x".into(),
            exists: false,
            unfollowable: Some(AccessDenied),
        };
        assert_eq!(denied.followable("x").unwrap_err().code, ErrorCode::Denied);
    }

    #[test]
    fn lookup_errors_are_classified_without_failing_the_plan() {
        let os = std::io::Error::from_raw_os_error;
        for (errno, want) in [
            (rustix::io::Errno::NOENT, None),
            (rustix::io::Errno::NOTDIR, Some(NotADirectory)),
            (rustix::io::Errno::ACCESS, Some(AccessDenied)),
            (rustix::io::Errno::LOOP, Some(LinkLoop)),
            (rustix::io::Errno::NAMETOOLONG, Some(UnusableLink)),
        ] {
            assert_eq!(
                stuck(os(errno.raw_os_error()), "p").unwrap(),
                want,
                "{errno}"
            );
        }
        let e = stuck(os(rustix::io::Errno::IO.raw_os_error()), "p").unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal);
    }

    #[test]
    fn bad_inputs_are_refused_whatever_exists() {
        let t = tree();
        assert_eq!(err(&t, "").code, ErrorCode::InvalidParams);
        assert_eq!(err(&t, "a\0b").code, ErrorCode::InvalidParams);
        let long = "x/".repeat(3000);
        assert_eq!(err(&t, &long).message, "path is too long");
        // short input, long result: the workdir prefix pushes it over the limit
        let near = "y/".repeat(2047);
        assert_eq!(err(&t, &near).message, "path is too long");
        // a long name is refused before anything is looked up, under an existing parent or not
        let name = "n".repeat(MAX_NAME_BYTES + 1);
        for input in [format!("sub/{name}"), format!("nothere/{name}")] {
            assert!(err(&t, &input).message.contains("255 bytes"), "{input}");
        }
    }

    #[test]
    fn entries_keep_their_last_component() {
        let t = tree();
        check(
            &t,
            &[
                ("link-to-file", "w/link-to-file", true, None),
                ("link-to-dir/secret.txt", "outside/secret.txt", true, None),
                // a dangling link is an entry that exists
                ("dangling", "w/dangling", true, None),
                // an entry under a missing directory is missing: reported when the call executes
                ("missing/x", "w/missing/x", false, None),
                ("nothere/.ssh/id_rsa", "w/nothere/.ssh/id_rsa", false, None),
                ("nothere/.ssh/../x", "w/nothere/x", false, None),
                ("a.txt/x", "w/a.txt/x", false, Some(NotADirectory)),
                ("dangling/x", "w/dangling/x", false, Some(DanglingLink)),
            ],
            resolve_entry,
        );
        assert_eq!(
            resolve_entry("sub/..", &t.work).unwrap_err().code,
            ErrorCode::InvalidParams
        );
    }

    #[test]
    fn proc_self_paths_resolve_to_real_paths() {
        let t = tree();
        let via_proc = format!("/proc/self/root{}/w/a.txt", t.root.display());
        assert_eq!(
            resolve(&via_proc, &t.work).unwrap().path,
            format!("{}/w/a.txt", t.root.display())
        );
    }
}
