//! `file_write`: create a file exclusively, or replace one atomically (a temporary file in the
//! same directory, then rename) keeping its mode. A replacement happens only while the file still
//! matches the fingerprint the approver saw (device, inode, size, mtime, SHA-256).

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::Path;

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::FileWriteParams;
use glovebox_proto::v1::{Domain, FileState, Plan, TicketBody};
use rustix::fs::{Mode, OFlags};
use serde_json::json;

use super::{Done, OpContext, bound_subject, subject};
use crate::error::OpError;
use crate::fsio;
use crate::resolve::resolve;

/// Diffs shown to approvers are cut at this many bytes.
pub const MAX_PREVIEW_BYTES: usize = 256 * 1024;

/// Fingerprints the file if it exists. What is wrong with it (not a regular file, hard links,
/// too big, unreadable) is not reported here: the plan then carries its identity alone, and the
/// preview and the executed call say why.
pub fn plan(ctx: &OpContext<'_>, p: &FileWriteParams) -> Result<Plan, OpError> {
    let r = resolve(&p.path, ctx.workdir)?;
    let state = planned_state(ctx, &r);
    Ok(Plan {
        subjects: vec![subject(Domain::Write, r.path, state)],
        content_tag: ctx.key.tag(p.content.as_bytes()),
    })
}

pub fn preview(
    ctx: &OpContext<'_>,
    p: &FileWriteParams,
    plan: &Plan,
) -> Result<(String, bool), OpError> {
    let s = super::planned_subject(plan)?;
    let planned = s.state.clone().unwrap_or_default();
    let old = planned_content(ctx, &s.path, &p.path, &planned)?;
    Ok(render_diff(
        &s.path,
        &old,
        p.content.as_bytes(),
        planned.exists,
    ))
}

/// The state a write or edit plan binds: the full fingerprint of an existing regular file, the
/// identity alone of anything else that exists (execution refuses it), or nothing.
pub fn planned_state(ctx: &OpContext<'_>, r: &crate::resolve::Resolved) -> FileState {
    if !r.exists {
        return FileState::default();
    }
    fsio::fingerprint(&r.path, ctx.key).unwrap_or_else(|_| super::read::observed(r))
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
    let bytes = fsio::read_capped(fd, fsio::MAX_FINGERPRINT_BYTES, shown)?;
    if ctx.key.tag(&bytes) != planned.content_tag {
        return Err(OpError::changed(shown));
    }
    Ok(bytes)
}

/// A unified diff of `old` → `new`, cut at `MAX_PREVIEW_BYTES`. Returns (text, truncated).
pub fn render_diff(path: &str, old: &[u8], new: &[u8], existed: bool) -> (String, bool) {
    let (Ok(old_text), Ok(new_text)) = (std::str::from_utf8(old), std::str::from_utf8(new)) else {
        return (
            format!(
                "binary content: {} bytes replaced by {} bytes\n",
                old.len(),
                new.len()
            ),
            false,
        );
    };
    let from = if existed {
        path.to_owned()
    } else {
        "/dev/null".to_owned()
    };
    let diff = similar::TextDiff::from_lines(old_text, new_text);
    let mut text = diff
        .unified_diff()
        .context_radius(3)
        .header(&from, path)
        .to_string();
    if text.is_empty() {
        text = "no changes\n".to_owned();
    }
    if text.len() <= MAX_PREVIEW_BYTES {
        return (text, false);
    }
    let mut cut = MAX_PREVIEW_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str("\n[diff truncated]\n");
    (text, true)
}

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileWriteParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let r = resolve(&p.path, ctx.workdir)?;
    let s = bound_subject(ticket, Domain::Write, &r.path)?;
    r.followable(&p.path)?;
    if ctx.key.tag(p.content.as_bytes()) != ticket.content_tag {
        return Err(OpError::new(
            ErrorCode::Changed,
            "the content differs from what was approved",
        ));
    }
    let expected = s.state.clone().unwrap_or_default();
    let created = if expected.exists {
        if !r.exists {
            return Err(OpError::changed(&p.path));
        }
        replace_with(ctx, &s.path, &p.path, &expected, |_old| {
            Ok(p.content.as_bytes().to_vec())
        })?;
        false
    } else {
        if r.exists {
            return Err(OpError::new(
                ErrorCode::Changed,
                format!("{} was created since it was approved", p.path),
            ));
        }
        create(&s.path, &p.path, p.content.as_bytes())?;
        true
    };
    let n = p.content.len() as u64;
    Ok(Done {
        result: json!({ "path": s.path, "bytes": n, "created": created }),
        bytes: n,
    })
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
        .map_err(|e| fsio::errno_error(e, shown))?;
    let stat = fsio::fstat(&current, shown)?;
    fsio::check_identity(&stat, expected, shown)?;
    fsio::check_replaceable(&stat, shown)?;
    let now = fsio::state_of(&stat);
    if now.size != expected.size || now.mtime_ns != expected.mtime_ns {
        return Err(OpError::changed(shown));
    }
    let old = fsio::read_capped(current, fsio::MAX_FINGERPRINT_BYTES, shown)?;
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
        .map_err(|e| fsio::errno_error(e, shown))?;
        rustix::fs::fchmod(&fd, mode).map_err(|e| fsio::errno_error(e, shown))?;
        write_all(fd, &content, shown)?;
        rustix::fs::renameat(&dir, tmp.as_str(), &dir, name)
            .map_err(|e| fsio::errno_error(e, shown))
    })();
    if result.is_err() {
        let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), rustix::fs::AtFlags::empty());
    }
    result.map(|()| (old, content))
}

fn create(canonical: &str, shown: &str, content: &[u8]) -> Result<(), OpError> {
    let (parent, name) = fsio::split_parent(canonical)?;
    // Walk up to the nearest existing directory, then create the missing ones one by one,
    // each opened beneath the last without following links.
    let mut missing = Vec::new();
    let mut base = Path::new(parent);
    loop {
        match base.to_str().map(fsio::stat_path) {
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
    let mut dir = fsio::open_no_links(base, OFlags::RDONLY | OFlags::DIRECTORY)?;
    for component in missing.iter().rev() {
        match rustix::fs::mkdirat(&dir, component.as_str(), Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(fsio::errno_error(e, shown)),
        }
        dir = fsio::open_beneath(
            &dir,
            component,
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .map_err(|e| fsio::errno_error(e, shown))?;
    }
    let fd = match fsio::open_beneath(
        &dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
        Mode::from_raw_mode(0o644),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::EXIST) => {
            return Err(OpError::new(
                ErrorCode::Changed,
                format!("{shown} was created since it was approved"),
            ));
        }
        Err(e) => return Err(fsio::errno_error(e, shown)),
    };
    write_all(fd, content, shown)
}

fn write_all(fd: OwnedFd, content: &[u8], shown: &str) -> Result<(), OpError> {
    let mut file = std::fs::File::from(fd);
    file.write_all(content)
        .and_then(|()| file.sync_all())
        .map_err(|e| crate::resolve::io_error(e, shown))
}

fn temp_name(name: &str) -> Result<String, OpError> {
    let mut rand = [0u8; 8];
    getrandom::fill(&mut rand)
        .map_err(|_| OpError::new(ErrorCode::Internal, "no randomness for a temporary name"))?;
    Ok(format!(".{name}.glovebox-{}", hex::encode(rand)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_of_a_new_file() {
        let (text, cut) = render_diff("/w/a.txt", b"", b"hello\n", false);
        assert!(!cut);
        assert!(text.starts_with("--- /dev/null\n+++ /w/a.txt\n"), "{text}");
        assert!(text.contains("+hello"), "{text}");
    }

    #[test]
    fn diff_of_a_change_and_of_binary() {
        let (text, _) = render_diff("/w/a", b"one\ntwo\n", b"one\n2\n", true);
        assert!(text.contains("-two\n+2\n"), "{text}");
        let (text, _) = render_diff("/w/a", b"\xff\xfe", b"x", true);
        assert_eq!(text, "binary content: 2 bytes replaced by 1 bytes\n");
        assert_eq!(
            render_diff("/w/a", b"same\n", b"same\n", true).0,
            "no changes\n"
        );
    }

    #[test]
    fn huge_diffs_are_cut() {
        let new = "é\n".repeat(200_000);
        let (text, cut) = render_diff("/w/a", b"", new.as_bytes(), false);
        assert!(cut);
        assert!(text.len() <= MAX_PREVIEW_BYTES + 32);
        assert!(text.ends_with("[diff truncated]\n"));
    }
}
