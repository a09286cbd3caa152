//! Replacing an existing file's content only while it is the file that was approved, for
//! `file_write` and `file_edit`: the fingerprint a plan binds ([`planned_state`]), the content a
//! preview diffs against ([`planned_content`]), and the atomic replacement ([`replace_with`]: a
//! temporary file in the same directory, then rename, keeping the mode).

use std::io::Write;
use std::os::fd::OwnedFd;

use glovebox_proto::ErrorCode;
use glovebox_proto::v1::FileState;
use rustix::fs::{Mode, OFlags};

use crate::context::OpContext;
use crate::error::OpError;
use crate::fsio;
use crate::resolve::Resolved;

/// The state a write or edit plan binds: the full fingerprint of an existing regular file, the
/// identity alone of anything else that exists (execution refuses it), or nothing.
pub fn planned_state(ctx: &OpContext<'_>, r: &Resolved) -> FileState {
    if !r.exists {
        return FileState::default();
    }
    fsio::fingerprint(&r.path, ctx.key).unwrap_or_else(|_| fsio::observed(r))
}

/// The content of the file a plan fingerprinted (empty if it did not exist), checked against the
/// plan's identity and content tag.
pub fn planned_content(
    ctx: &OpContext<'_>,
    canonical: &str,
    shown: &str,
    planned: &FileState,
) -> Result<Vec<u8>, OpError> {
    if !planned.exists {
        return Ok(Vec::new());
    }
    let fd = fsio::open_no_links(canonical, OFlags::RDONLY)?;
    let stat = fsio::fstat(&fd, shown)?;
    fsio::check_identity(&stat, planned, shown)?;
    fsio::check_replaceable(&stat, shown)?;
    let bytes = fsio::read_capped(fd, &stat, fsio::MAX_FINGERPRINT_BYTES, shown)?;
    if ctx.key.tag(&bytes) != planned.content_tag {
        return Err(OpError::changed(shown));
    }
    Ok(bytes)
}

/// Replaces an existing regular file atomically (temporary file in the same directory, then
/// rename, keeping the mode) with what `new_content` makes of its current content — but only
/// while the file is still the one approved: same device, inode, size, mtime and content tag,
/// one link, opened without following links. Returns the old content and the new.
pub fn replace_with(
    ctx: &OpContext<'_>,
    canonical: &str,
    shown: &str,
    expected: &FileState,
    new_content: impl FnOnce(&[u8]) -> Result<Vec<u8>, OpError>,
) -> Result<(Vec<u8>, Vec<u8>), OpError> {
    let (parent, name) = fsio::split_parent(canonical)?;
    let dir = fsio::open_no_links(parent, OFlags::RDONLY | OFlags::DIRECTORY)?;
    let current = fsio::open_beneath(&dir, name, OFlags::RDONLY, Mode::empty())
        .map_err(|e| OpError::errno(e, shown))?;
    let stat = fsio::fstat(&current, shown)?;
    fsio::check_identity(&stat, expected, shown)?;
    fsio::check_replaceable(&stat, shown)?;
    let now = fsio::state_of(&stat);
    if now.size != expected.size || now.mtime_ns != expected.mtime_ns {
        return Err(OpError::changed(shown));
    }
    let old = fsio::read_capped(current, &stat, fsio::MAX_FINGERPRINT_BYTES, shown)?;
    if ctx.key.tag(&old) != expected.content_tag {
        return Err(OpError::changed(shown));
    }
    let content = new_content(&old)?;
    let mode = Mode::from_raw_mode(stat.st_mode & 0o7777);
    let tmp = temp_name(name)?;
    let result = (|| {
        let fd = fsio::open_beneath(
            &dir,
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            mode,
        )
        .map_err(|e| OpError::errno(e, shown))?;
        rustix::fs::fchmod(&fd, mode).map_err(|e| OpError::errno(e, shown))?;
        write_all(fd, &content, shown)?;
        rustix::fs::renameat(&dir, tmp.as_str(), &dir, name).map_err(|e| OpError::errno(e, shown))
    })();
    if result.is_err() {
        let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), rustix::fs::AtFlags::empty());
    }
    result.map(|()| (old, content))
}

/// Writes all of `content` to `fd` and syncs it.
pub fn write_all(fd: OwnedFd, content: &[u8], shown: &str) -> Result<(), OpError> {
    let mut file = std::fs::File::from(fd);
    file.write_all(content)
        .and_then(|()| file.sync_all())
        .map_err(|e| OpError::io(e, shown))
}

fn temp_name(name: &str) -> Result<String, OpError> {
    let mut rand = [0u8; 8];
    getrandom::fill(&mut rand)
        .map_err(|_| OpError::new(ErrorCode::Internal, "no randomness for a temporary name"))?;
    Ok(format!(".{name}.glovebox-{}", hex::encode(rand)))
}
