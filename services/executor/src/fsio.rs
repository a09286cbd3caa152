//! Opening what a ticket names, and nothing else: `openat2` with `RESOLVE_NO_SYMLINKS` and
//! `RESOLVE_NO_MAGICLINKS` on the canonical path, then a device and inode comparison against the
//! state the executor recorded when it planned the call.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use glovebox_proto::ErrorCode;
use glovebox_proto::v1::FileState;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};

use crate::error::OpError;
use crate::resolve::Resolved;

/// Refuse regular files bigger than this when hashing them for a write fingerprint.
pub const MAX_FINGERPRINT_BYTES: u64 = 64 * 1024 * 1024;

const NO_LINKS: ResolveFlags = ResolveFlags::NO_SYMLINKS.union(ResolveFlags::NO_MAGICLINKS);

/// Opens a canonical absolute path without following any symbolic link on the way.
/// `O_NONBLOCK` keeps a FIFO (or a device) put where a file was expected from blocking the open;
/// it changes nothing for regular files and directories, and callers check the type after.
pub fn open_no_links(path: &str, flags: OFlags) -> Result<OwnedFd, OpError> {
    openat2_no_links(
        rustix::fs::CWD,
        path,
        flags,
        Mode::empty(),
        ResolveFlags::empty(),
    )
    .map_err(|e| OpError::errno(e, path))
}

/// Opens `name` inside the directory `dir`, refusing symlinks and anything outside `dir`
/// (non-blocking like [`open_no_links`]).
pub fn open_beneath(
    dir: &OwnedFd,
    name: &str,
    flags: OFlags,
    mode: Mode,
) -> rustix::io::Result<OwnedFd> {
    openat2_no_links(dir, name, flags, mode, ResolveFlags::BENEATH)
}

fn openat2_no_links(
    dir: impl AsFd,
    path: &str,
    flags: OFlags,
    mode: Mode,
    resolve: ResolveFlags,
) -> rustix::io::Result<OwnedFd> {
    // `openat2` refuses `O_PATH` with anything but `O_CLOEXEC | O_DIRECTORY | O_NOFOLLOW`.
    let nonblock = if flags.contains(OFlags::PATH) {
        OFlags::empty()
    } else {
        OFlags::NONBLOCK
    };
    rustix::fs::openat2(
        dir,
        path,
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW | nonblock,
        mode,
        NO_LINKS | resolve,
    )
}

/// The device, inode, size and modification time of an open file (no content hash).
pub fn state_of(stat: &Stat) -> FileState {
    FileState {
        exists: true,
        dev: stat.st_dev,
        ino: stat.st_ino,
        size: stat.st_size.max(0) as u64,
        mtime_ns: stat
            .st_mtime
            .saturating_mul(1_000_000_000)
            .saturating_add(stat.st_mtime_nsec as i64),
        content_tag: Vec::new(),
        links: stat.st_nlink,
    }
}

/// What is at a resolved path now (identity only; `exists: false` if nothing is), as a plan
/// records it.
pub fn observed(r: &Resolved) -> FileState {
    match r.exists.then(|| stat_path(&r.path)) {
        Some(Ok(stat)) => state_of(&stat),
        _ => FileState::default(),
    }
}

pub fn fstat(fd: &OwnedFd, what: &str) -> Result<Stat, OpError> {
    rustix::fs::fstat(fd).map_err(|e| OpError::errno(e, what))
}

pub fn stat_path(path: &str) -> Result<Stat, OpError> {
    rustix::fs::statat(rustix::fs::CWD, path, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| OpError::errno(e, path))
}

pub fn file_type(stat: &Stat) -> FileType {
    FileType::from_raw_mode(stat.st_mode)
}

/// Refuses regular files with more than one name: their other names may lie outside the policy.
pub fn refuse_hard_links(stat: &Stat, path: &str) -> Result<(), OpError> {
    refuse_links(file_type(stat), stat.st_nlink, path)
}

/// [`refuse_hard_links`] for an opened regular file that had `looked_links` names when it was
/// looked at (planned): refused if it had other names then or has them now, as the count read
/// after opening may have dropped since it was opened through another name.
pub fn refuse_other_names(stat: &Stat, looked_links: u64, path: &str) -> Result<(), OpError> {
    refuse_hard_links(stat, path)?;
    refuse_links(file_type(stat), looked_links, path)
}

/// [`refuse_hard_links`] for an object of `kind` with `links` names.
fn refuse_links(kind: FileType, links: u64, path: &str) -> Result<(), OpError> {
    if kind == FileType::RegularFile && links > 1 {
        return Err(OpError::new(
            ErrorCode::Denied,
            format!("{path} has {links} hard links; refusing a file that has other names"),
        ));
    }
    Ok(())
}

/// Refuses to replace (write or edit) anything but a regular file with one name.
pub fn check_replaceable(stat: &Stat, path: &str) -> Result<(), OpError> {
    match file_type(stat) {
        FileType::RegularFile => refuse_hard_links(stat, path),
        FileType::Directory => Err(OpError::new(
            ErrorCode::InvalidParams,
            format!("{path} is a directory"),
        )),
        _ => Err(OpError::new(
            ErrorCode::InvalidParams,
            format!("{path} is not a regular file"),
        )),
    }
}

/// Checks that an opened object is the one recorded in `expected` (same device and inode).
pub fn check_identity(stat: &Stat, expected: &FileState, what: &str) -> Result<(), OpError> {
    if !expected.exists || stat.st_dev != expected.dev || stat.st_ino != expected.ino {
        return Err(OpError::changed(what));
    }
    Ok(())
}

/// Reads at most `limit` bytes from `fd`, whose `fstat` is `stat`; `Err(too_large)` if there is
/// more. The buffer is sized from the file's size up front (a size that changed since only costs
/// a regrowth), so a file is read in one call and its end seen in another, rather than in a
/// doubling series of small reads.
pub fn read_capped(fd: OwnedFd, stat: &Stat, limit: u64, what: &str) -> Result<Vec<u8>, OpError> {
    let expected = (stat.st_size.max(0) as u64).min(limit) as usize;
    let mut buf = Vec::with_capacity(expected + 1);
    std::fs::File::from(fd)
        .take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(|e| OpError::io(e, what))?;
    if buf.len() as u64 > limit {
        return Err(OpError::new(
            ErrorCode::TooLarge,
            format!("{what} is larger than {limit} bytes"),
        ));
    }
    Ok(buf)
}

/// The full fingerprint of an existing regular file (for writes): identity, size, mtime, and a
/// keyed tag of its content (never a plain hash).
pub fn fingerprint(path: &str, key: &glovebox_ticket::AccountKey) -> Result<FileState, OpError> {
    fingerprint_and_content(path, key).map(|(state, _)| state)
}

/// [`fingerprint`], and the content it was computed over.
pub fn fingerprint_and_content(
    path: &str,
    key: &glovebox_ticket::AccountKey,
) -> Result<(FileState, Vec<u8>), OpError> {
    fingerprint_looked_at(&stat_path(path)?, path, key)
}

/// [`fingerprint_and_content`] of the file `looked` at under `path` before opening it. A file
/// with other names when looked at is refused even if it has one once opened (a job could link
/// a denied file in under `path` and take its other name away between the two), and the file
/// opened must be the one looked at.
fn fingerprint_looked_at(
    looked: &Stat,
    path: &str,
    key: &glovebox_ticket::AccountKey,
) -> Result<(FileState, Vec<u8>), OpError> {
    check_replaceable(looked, path)?;
    let fd = open_no_links(path, OFlags::RDONLY)?;
    let stat = fstat(&fd, path)?;
    check_identity(&stat, &state_of(looked), path)?;
    check_replaceable(&stat, path)?;
    let content = read_capped(fd, &stat, MAX_FINGERPRINT_BYTES, path)?;
    let mut state = state_of(&stat);
    state.content_tag = key.tag(&content);
    Ok((state, content))
}

/// The parent directory and final name of a canonical path.
pub fn split_parent(path: &str) -> Result<(&str, &str), OpError> {
    let p = Path::new(path);
    match (
        p.parent().and_then(Path::to_str),
        p.file_name().and_then(|n| n.to_str()),
    ) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(OpError::new(
            ErrorCode::InvalidParams,
            format!("{path} has no parent directory"),
        )),
    }
}

/// Opens the directory at the canonical path `path`, first creating it and any missing parents
/// (0755): it walks up to the nearest existing directory, then makes each missing one beneath the
/// last, opened without following links, so nothing is made through a link planted on the way.
/// `shown` is the path as the client gave it, for errors.
pub fn make_dirs(path: &str, shown: &str) -> Result<OwnedFd, OpError> {
    let mut missing = Vec::new();
    let mut base = Path::new(path);
    loop {
        match base.to_str().map(stat_path) {
            Some(Ok(_)) => break,
            Some(Err(e)) if e.code == ErrorCode::NotFound => {}
            Some(Err(e)) => return Err(e),
            None => {
                return Err(OpError::new(
                    ErrorCode::InvalidParams,
                    "path is not valid UTF-8",
                ));
            }
        }
        let (Some(up), Some(dir_name)) = (base.parent(), base.file_name().and_then(|n| n.to_str()))
        else {
            return Err(OpError::new(
                ErrorCode::NotFound,
                "no part of the path exists",
            ));
        };
        missing.push(dir_name.to_owned());
        base = up;
    }
    let base = base.to_str().unwrap_or("/");
    let mut dir = open_no_links(base, OFlags::RDONLY | OFlags::DIRECTORY)?;
    for component in missing.iter().rev() {
        match rustix::fs::mkdirat(&dir, component.as_str(), Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(OpError::errno(e, shown)),
        }
        dir = open_beneath(
            &dir,
            component,
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .map_err(|e| OpError::errno(e, shown))?;
    }
    Ok(dir)
}

/// The content of a file as text: refused (`binary`) if it holds a NUL byte or is not UTF-8.
pub fn utf8_text(bytes: Vec<u8>, shown: &str) -> Result<String, OpError> {
    if bytes.contains(&0) {
        return Err(OpError::new(
            ErrorCode::Binary,
            format!("{shown} is a binary file"),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| OpError::new(ErrorCode::Binary, format!("{shown} is not UTF-8 text")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Fixture;

    /// The size read from `fstat` only sizes the buffer: a file that grew or shrank since is
    /// read as it is, and the limit holds whatever the size said.
    #[test]
    fn a_capped_read_reads_what_is_there_whatever_the_size_said() {
        let f = Fixture::new();
        let path = f.path("grows");
        std::fs::write(&path, "short").unwrap();
        let open = || open_no_links(&path, OFlags::RDONLY).unwrap();
        let short = rustix::fs::fstat(open()).unwrap();
        std::fs::write(&path, "longer than it was").unwrap();
        let long = rustix::fs::fstat(open()).unwrap();
        assert_eq!(
            read_capped(open(), &short, 100, "f").unwrap(),
            b"longer than it was"
        );
        std::fs::write(&path, "tiny").unwrap();
        assert_eq!(read_capped(open(), &long, 100, "f").unwrap(), b"tiny");
        std::fs::write(&path, "x".repeat(101)).unwrap();
        let e = read_capped(open(), &short, 100, "f").unwrap_err();
        assert_eq!(e.code, ErrorCode::TooLarge);
        assert_eq!(read_capped(open(), &short, 101, "f").unwrap().len(), 101);
    }

    /// The fingerprint of a write's plan (its content tag, a preview's diff, an edit's old text)
    /// is never taken of a file that had another name when looked at, nor of another file than
    /// the one looked at.
    #[test]
    fn a_fingerprint_covers_only_the_file_looked_at_with_one_name() {
        let f = Fixture::new();
        let path = f.path("allowed");
        std::fs::write(f.work.join("secret"), "denied content").unwrap();
        std::fs::hard_link(f.work.join("secret"), f.work.join("allowed")).unwrap();
        let looked = stat_path(&path).unwrap();
        std::fs::remove_file(f.work.join("secret")).unwrap();
        let e = fingerprint_looked_at(&looked, &path, &f.key).unwrap_err();
        assert_eq!(e.code, ErrorCode::Denied, "{e:?}");

        let looked = stat_path(&path).unwrap();
        std::fs::write(f.work.join("other"), "other content").unwrap();
        std::fs::rename(f.work.join("other"), &path).unwrap();
        let e = fingerprint_looked_at(&looked, &path, &f.key).unwrap_err();
        assert_eq!(e.code, ErrorCode::Changed, "{e:?}");

        let (state, content) = fingerprint_and_content(&path, &f.key).unwrap();
        assert_eq!(content, b"other content");
        assert_eq!(state.links, 1);
        assert_eq!(state.content_tag, f.key.tag(b"other content"));
    }
}
