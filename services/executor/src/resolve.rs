//! Path resolution as the account's user: relative paths against the workdir, symlinks and `..`
//! followed to the real target, and for paths that do not exist yet, the nearest existing parent.
//!
//! The result is the canonical subject the gate judges. Paths that cannot be judged honestly
//! (a dangling symlink, `..` through a missing directory, non-UTF-8 names) are refused.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::MAX_PATH_BYTES;

use crate::error::OpError;

/// A canonical absolute path and whether something exists there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub path: String,
    pub exists: bool,
}

/// Resolves `input` for the account whose canonical workdir is `workdir`.
pub fn resolve(input: &str, workdir: &Path) -> Result<Resolved, OpError> {
    let invalid = |m: &str| OpError::new(ErrorCode::InvalidParams, m);
    if input.is_empty() {
        return Err(invalid("path must not be empty"));
    }
    if input.contains('\0') {
        return Err(invalid("path must not contain NUL bytes"));
    }
    if input.len() > MAX_PATH_BYTES {
        return Err(invalid("path is too long"));
    }
    let absolute = if Path::new(input).is_absolute() {
        PathBuf::from(input)
    } else {
        workdir.join(input)
    };
    match std::fs::canonicalize(&absolute) {
        Ok(real) => Ok(Resolved {
            path: utf8(real)?,
            exists: true,
        }),
        Err(e) if e.kind() == ErrorKind::NotFound => resolve_missing(&absolute),
        Err(e) => Err(io_error(e, input)),
    }
}

/// Resolves `input` as an entry itself, for calls that remove or move it: the parent directory is
/// resolved like any path (links and `..` followed, and it must exist), the last component is kept
/// as named, so a symbolic link names the link, never its target.
pub fn resolve_entry(input: &str, workdir: &Path) -> Result<Resolved, OpError> {
    let invalid = |m: &str| OpError::new(ErrorCode::InvalidParams, m);
    if input.is_empty() || input.contains('\0') || input.len() > MAX_PATH_BYTES {
        return resolve(input, workdir);
    }
    let absolute = if Path::new(input).is_absolute() {
        PathBuf::from(input)
    } else {
        workdir.join(input)
    };
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
    if !base.exists {
        return Err(OpError::new(
            ErrorCode::NotFound,
            format!("{input}: not found"),
        ));
    }
    let path = utf8(Path::new(&base.path).join(name))?;
    let exists = match std::fs::symlink_metadata(&path) {
        Ok(_) => true,
        Err(e) if e.kind() == ErrorKind::NotFound => false,
        Err(e) => return Err(io_error(e, input)),
    };
    Ok(Resolved { path, exists })
}

/// `absolute` does not exist: find the nearest existing ancestor and append the missing tail.
fn resolve_missing(absolute: &Path) -> Result<Resolved, OpError> {
    let components: Vec<Component<'_>> = absolute.components().collect();
    for split in (1..components.len()).rev() {
        let prefix: PathBuf = components[..split].iter().collect();
        let base = match std::fs::canonicalize(&prefix) {
            Ok(base) => base,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(io_error(e, &absolute.to_string_lossy())),
        };
        let tail = &components[split..];
        let mut path = base.clone();
        for (i, c) in tail.iter().enumerate() {
            let Component::Normal(name) = c else {
                return Err(OpError::new(
                    ErrorCode::InvalidParams,
                    "path uses `..` through a directory that does not exist",
                ));
            };
            path.push(name);
            if i == 0 {
                // The first missing component must be truly absent: something that exists but
                // cannot be resolved is a dangling symbolic link.
                match std::fs::symlink_metadata(&path) {
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Ok(meta) if meta.file_type().is_symlink() => {
                        return Err(OpError::new(
                            ErrorCode::InvalidParams,
                            "path is a dangling symbolic link; refusing to follow it",
                        ));
                    }
                    Ok(_) => {
                        return Err(OpError::new(
                            ErrorCode::Changed,
                            "path changed while it was resolved",
                        ));
                    }
                    Err(e) => return Err(io_error(e, &absolute.to_string_lossy())),
                }
            }
        }
        return Ok(Resolved {
            path: utf8(path)?,
            exists: false,
        });
    }
    Err(OpError::new(
        ErrorCode::NotFound,
        "no part of the path exists",
    ))
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

/// Maps an IO error to a client-visible error without leaking more than the path the client gave.
pub fn io_error(e: std::io::Error, what: &str) -> OpError {
    let code = match e.kind() {
        ErrorKind::NotFound => ErrorCode::NotFound,
        ErrorKind::PermissionDenied => ErrorCode::Denied,
        ErrorKind::NotADirectory | ErrorKind::IsADirectory | ErrorKind::InvalidInput => {
            ErrorCode::InvalidParams
        }
        ErrorKind::InvalidFilename => ErrorCode::InvalidParams,
        _ => ErrorCode::Internal,
    };
    let message = match code {
        ErrorCode::NotFound => format!("{what}: not found"),
        ErrorCode::Denied => format!("{what}: the operating system refused access"),
        ErrorCode::Internal => {
            tracing::warn!(error = %e, "file system error");
            format!("{what}: file system error")
        }
        _ => format!("{what}: {e}"),
    };
    OpError::new(code, message)
}

#[cfg(test)]
mod tests {
    use super::*;
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
        Tree {
            _dir: dir,
            root,
            work,
        }
    }

    fn ok(t: &Tree, input: &str) -> Resolved {
        resolve(input, &t.work).unwrap_or_else(|e| panic!("{input}: {e:?}"))
    }

    fn err(t: &Tree, input: &str) -> OpError {
        resolve(input, &t.work).expect_err(input)
    }

    #[test]
    fn relative_paths_resolve_against_the_workdir() {
        let t = tree();
        let r = ok(&t, "a.txt");
        assert_eq!(
            (r.path, r.exists),
            (format!("{}/w/a.txt", t.root.display()), true)
        );
        assert_eq!(
            ok(&t, "./sub/../a.txt").path,
            format!("{}/w/a.txt", t.root.display())
        );
        assert_eq!(ok(&t, ".").path, format!("{}/w", t.root.display()));
    }

    #[test]
    fn symlinks_are_judged_by_their_real_target() {
        let t = tree();
        let secret = format!("{}/outside/secret.txt", t.root.display());
        assert_eq!(ok(&t, "link-to-file").path, secret);
        assert_eq!(ok(&t, "chain").path, secret);
        assert_eq!(ok(&t, "link-to-dir/secret.txt").path, secret);
    }

    #[test]
    fn dot_dot_after_a_symlink_is_physical() {
        let t = tree();
        // link-to-dir -> <root>/outside, so link-to-dir/.. is <root>, not the workdir.
        assert_eq!(
            ok(&t, "link-to-dir/../outside/secret.txt").path,
            format!("{}/outside/secret.txt", t.root.display())
        );
        assert_eq!(ok(&t, "link-to-dir/..").path, t.root.display().to_string());
    }

    #[test]
    fn escapes_resolve_to_where_they_land() {
        let t = tree();
        assert_eq!(
            ok(&t, "../outside/secret.txt").path,
            format!("{}/outside/secret.txt", t.root.display())
        );
        assert_eq!(
            ok(&t, "sub/../../outside").path,
            format!("{}/outside", t.root.display())
        );
    }

    #[test]
    fn new_files_use_the_nearest_existing_parent() {
        let t = tree();
        let r = ok(&t, "new/deeper/file.txt");
        assert_eq!(
            (r.path, r.exists),
            (format!("{}/w/new/deeper/file.txt", t.root.display()), false)
        );
        // a new file under a symlinked parent lands in the real directory
        let r = ok(&t, "link-to-dir/new.txt");
        assert_eq!(
            (r.path, r.exists),
            (format!("{}/outside/new.txt", t.root.display()), false)
        );
    }

    #[test]
    fn dangling_symlinks_are_refused() {
        let t = tree();
        let e = err(&t, "dangling");
        assert_eq!(e.code, ErrorCode::InvalidParams);
        assert!(e.message.contains("dangling"), "{}", e.message);
        assert!(err(&t, "dangling/x").message.contains("dangling"));
    }

    #[test]
    fn dot_dot_through_a_missing_directory_is_refused() {
        let t = tree();
        assert!(err(&t, "missing/../a.txt").message.contains("`..`"));
    }

    #[test]
    fn bad_inputs() {
        let t = tree();
        assert_eq!(err(&t, "").code, ErrorCode::InvalidParams);
        assert_eq!(err(&t, "a\0b").code, ErrorCode::InvalidParams);
        assert_eq!(err(&t, "a.txt/x").code, ErrorCode::InvalidParams);
        let long = "x/".repeat(3000);
        assert_eq!(err(&t, &long).message, "path is too long");
        // short input, long result: the workdir prefix pushes it over the limit
        let near = "y/".repeat(2047);
        assert_eq!(err(&t, &near).message, "path is too long");
    }

    #[test]
    fn trailing_slashes_and_double_slashes() {
        let t = tree();
        assert_eq!(ok(&t, "sub/").path, format!("{}/w/sub", t.root.display()));
        assert_eq!(
            ok(&t, "sub//..//a.txt").path,
            format!("{}/w/a.txt", t.root.display())
        );
    }

    #[test]
    fn entries_keep_their_last_component() {
        let t = tree();
        let r = resolve_entry("link-to-file", &t.work).unwrap();
        assert_eq!(r.path, format!("{}/w/link-to-file", t.root.display()));
        assert!(r.exists);
        let r = resolve_entry("link-to-dir/secret.txt", &t.work).unwrap();
        assert_eq!(r.path, format!("{}/outside/secret.txt", t.root.display()));
        let r = resolve_entry("dangling", &t.work).unwrap();
        assert!(r.exists, "a dangling link is an entry that exists");
        assert_eq!(
            resolve_entry("sub/..", &t.work).unwrap_err().code,
            ErrorCode::InvalidParams
        );
        assert_eq!(
            resolve_entry("missing/x", &t.work).unwrap_err().code,
            ErrorCode::NotFound
        );
    }

    #[test]
    fn proc_self_paths_resolve_to_real_paths() {
        let t = tree();
        let via_proc = format!("/proc/self/root{}/w/a.txt", t.root.display());
        assert_eq!(
            ok(&t, &via_proc).path,
            format!("{}/w/a.txt", t.root.display())
        );
    }
}
