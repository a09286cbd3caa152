//! Reading one policy file, or checking a managed directory, as the gate may: a regular file of
//! at most [`MAX_POLICY_BYTES`], never through a symlink, and in system mode (managed policy)
//! root's alone. What goes wrong is a [`FileError`], whose text names the file and is shown to
//! the administrator as the account's policy error.

use std::path::Path;
use std::time::UNIX_EPOCH;

use glovebox_policy::{RawPolicy, Source};

/// The largest policy file the gate reads: a bigger one is refused rather than held in memory.
pub(super) const MAX_POLICY_BYTES: u64 = 1 << 20;

/// Why a policy file or a managed directory was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// It could not be read (the reason never quotes the file's contents).
    #[error("{path}: {why}")]
    Unreadable { path: String, why: String },
    #[error(
        "{0}: managed policy directory is not a directory (a symlink is refused); refusing the managed policy"
    )]
    NotADirectory(String),
    #[error(
        "{path}: managed policy {what} is owned by uid {uid}, not root; refusing the managed policy (chown root: it)"
    )]
    NotRoots {
        path: String,
        what: &'static str,
        uid: u32,
    },
    #[error(
        "{path}: managed policy {what} is writable by group or others (mode {mode:o}); refusing the managed policy (chmod go-w it)"
    )]
    Writable {
        path: String,
        what: &'static str,
        mode: u32,
    },
    /// It is not a policy (the parser's message, which names the line).
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

/// Why a file could not be read, without its name (the caller names it).
#[derive(Debug, thiserror::Error)]
pub(super) enum Unread {
    #[error("is a symlink; a policy file must be a regular file")]
    Symlink,
    #[error("is not a regular file")]
    NotRegular,
    #[error("is larger than {MAX_POLICY_BYTES} bytes")]
    TooLarge,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

fn unreadable(path: &Path, why: impl std::fmt::Display) -> FileError {
    FileError::Unreadable {
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

/// Why a managed directory may not be read in system mode: it must be a directory (not a
/// symlink) owned by root and writable by root alone. A missing one is an empty layer.
pub(super) fn root_only_dir(dir: &Path) -> Result<(), FileError> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(unreadable(dir, e)),
        Ok(meta) if !meta.is_dir() => Err(FileError::NotADirectory(dir.display().to_string())),
        Ok(meta) => root_only(dir, &meta, "directory"),
    }
}

/// Why a managed file or directory (by its metadata) is not root's alone.
fn root_only(path: &Path, meta: &std::fs::Metadata, what: &'static str) -> Result<(), FileError> {
    use std::os::unix::fs::MetadataExt;
    if meta.uid() != 0 {
        return Err(FileError::NotRoots {
            path: path.display().to_string(),
            what,
            uid: meta.uid(),
        });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(FileError::Writable {
            path: path.display().to_string(),
            what,
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}

/// [`read_source`] for system mode's managed files: the open file must be root's alone.
pub(super) fn read_root_only_source(path: &Path) -> Result<Option<Source>, FileError> {
    read_source_checked(path, |meta| root_only(path, meta, "file"))
}

/// Reads and parses one policy file; `None` when it does not exist.
pub(super) fn read_source(path: &Path) -> Result<Option<Source>, FileError> {
    read_source_checked(path, |_| Ok(()))
}

/// [`read_source`], refusing a file whose metadata (of the opened file) `check` refuses.
fn read_source_checked(
    path: &Path,
    check: impl Fn(&std::fs::Metadata) -> Result<(), FileError>,
) -> Result<Option<Source>, FileError> {
    let read = read_policy_text(path).map_err(|why| unreadable(path, why))?;
    let Some((text, meta)) = read else {
        return Ok(None);
    };
    check(&meta)?;
    let raw = RawPolicy::parse(&text).map_err(|e| FileError::Invalid {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Ok(Some(Source::new(path.display().to_string(), raw, modified)))
}

/// The text of a policy file and its metadata; `None` when it does not exist; the error does not
/// name the file. The file must be a regular file of at most [`MAX_POLICY_BYTES`], and not a
/// symlink: the project file lives where an agent's commands can write, and a link could point
/// the gate (which may read more than the agent) at a secret that a parse error would then quote;
/// a FIFO or a device would block the gate or never end. It is opened non-blocking and checked on
/// the open descriptor.
pub(super) fn read_policy_text(path: &Path) -> Result<Option<(String, std::fs::Metadata)>, Unread> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read;
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => return Err(Unread::Symlink),
        Err(e) => return Err(std::io::Error::from(e).into()),
    };
    let mut file = std::fs::File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Unread::NotRegular);
    }
    if meta.len() > MAX_POLICY_BYTES {
        return Err(Unread::TooLarge);
    }
    let mut text = String::new();
    (&mut file)
        .take(MAX_POLICY_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_POLICY_BYTES {
        return Err(Unread::TooLarge);
    }
    Ok(Some((text, meta)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_policy_file_is_read_only_as_a_small_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.yaml");
        assert!(
            matches!(read_source(&file), Ok(None)),
            "a missing file is no layer"
        );
        std::fs::write(&file, "commands:\n  allow: [\"ls\"]\n").unwrap();
        assert!(read_source(&file).unwrap().is_some());
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let refused = read_source(&link).unwrap_err().to_string();
        assert!(
            refused.ends_with("link.yaml: is a symlink; a policy file must be a regular file"),
            "{refused}"
        );
        // A FIFO an agent left in the policy's place is refused at once, never read (it would
        // block the gate).
        let fifo = dir.path().join("fifo.yaml");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let refused = read_source(&fifo).unwrap_err().to_string();
        assert!(
            refused.ends_with("fifo.yaml: is not a regular file"),
            "{refused}"
        );
        std::fs::write(&file, "x".repeat(MAX_POLICY_BYTES as usize + 1)).unwrap();
        let big = read_source(&file).unwrap_err().to_string();
        assert!(
            big.ends_with(&format!("is larger than {MAX_POLICY_BYTES} bytes")),
            "{big}"
        );
        std::fs::write(&file, "commands: [").unwrap();
        assert!(matches!(read_source(&file), Err(FileError::Invalid { .. })));
    }

    #[test]
    fn a_managed_file_others_may_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m.yaml");
        std::fs::write(&file, "{}\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let refused = read_root_only_source(&file).unwrap_err();
        let owner_ok = rustix::process::geteuid().is_root();
        match refused {
            FileError::Writable { what, mode, .. } if owner_ok => {
                assert_eq!((what, mode), ("file", 0o666));
            }
            FileError::NotRoots { what, .. } if !owner_ok => assert_eq!(what, "file"),
            other => panic!("{other:?}"),
        }
        let not_a_dir = root_only_dir(&file).unwrap_err();
        assert!(
            matches!(not_a_dir, FileError::NotADirectory(_)),
            "{not_a_dir}"
        );
        assert_eq!(root_only_dir(&dir.path().join("absent")), Ok(()));
    }
}
