//! Entries a call removes from where they are (`file_delete` to the trash, `file_move` to a new
//! name): opened through their parent without following links, bound to the approved device and
//! inode, and refused when they are a hard-linked file, the trash or what holds it, or a directory
//! holding a floor entry or a hard-linked file anywhere inside it.

use std::os::fd::OwnedFd;

use glovebox_proto::ErrorCode;
use glovebox_proto::v1::FileState;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use crate::context::OpContext;
use crate::error::OpError;
use crate::fsio;

/// Most entries a directory may hold (at any depth) to be deleted or moved.
pub const MAX_TREE_ENTRIES: u64 = 100_000;
/// Deepest directory nesting checked before a directory is deleted or moved.
const MAX_TREE_DEPTH: u32 = 64;

/// An entry opened for removal: its directory, its name there, and what it is.
pub struct Entry {
    pub dir: OwnedFd,
    pub name: String,
    pub kind: FileType,
}

/// Opens the parent of the canonical `path` without following links, checks that the entry is
/// the one the ticket names (device and inode, not followed), and refuses hard-linked files and
/// directories holding floor entries or hard-linked files.
pub fn open_movable(
    ctx: &OpContext<'_>,
    path: &str,
    shown: &str,
    expected: &FileState,
) -> Result<Entry, OpError> {
    if !expected.exists {
        return Err(OpError::new(
            ErrorCode::NotFound,
            format!("{shown}: not found"),
        ));
    }
    let (parent, name) = fsio::split_parent(path)?;
    let dir = fsio::open_no_links(parent, OFlags::RDONLY | OFlags::DIRECTORY)?;
    let stat = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| OpError::errno(e, shown))?;
    fsio::check_identity(&stat, expected, shown)?;
    let kind = fsio::file_type(&stat);
    match kind {
        FileType::RegularFile => fsio::refuse_hard_links(&stat, shown)?,
        FileType::Directory => {
            let fd = fsio::open_beneath(
                &dir,
                name,
                OFlags::RDONLY | OFlags::DIRECTORY,
                Mode::empty(),
            )
            .map_err(|e| OpError::errno(e, shown))?;
            let mut seen = 0;
            check_tree(ctx, fd, path, 0, &mut seen)?;
        }
        _ => {}
    }
    Ok(Entry {
        dir,
        name: name.to_owned(),
        kind,
    })
}

/// Refuses a tree that holds a floor entry or a hard-linked file, at any depth.
fn check_tree(
    ctx: &OpContext<'_>,
    dir: OwnedFd,
    path: &str,
    depth: u32,
    seen: &mut u64,
) -> Result<(), OpError> {
    if depth > MAX_TREE_DEPTH {
        return Err(OpError::new(
            ErrorCode::TooLarge,
            format!("{path} is nested more than {MAX_TREE_DEPTH} levels deep"),
        ));
    }
    let entries = rustix::fs::Dir::read_from(&dir).map_err(|e| OpError::errno(e, path))?;
    for entry in entries {
        let entry = entry.map_err(|e| OpError::errno(e, path))?;
        let bytes = entry.file_name().to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        *seen += 1;
        if *seen > MAX_TREE_ENTRIES {
            return Err(OpError::new(
                ErrorCode::TooLarge,
                format!("{path} holds more than {MAX_TREE_ENTRIES} entries"),
            ));
        }
        let name = String::from_utf8_lossy(bytes);
        let full = format!("{path}/{name}");
        if let Some(hit) = glovebox_policy::floor::check(&full, ctx.protected) {
            return Err(OpError::new(
                ErrorCode::Denied,
                format!(
                    "{path} contains {full}, which is on the secret floor ({})",
                    hit.entry
                ),
            ));
        }
        let stat = rustix::fs::statat(&dir, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| OpError::errno(e, &full))?;
        match fsio::file_type(&stat) {
            FileType::RegularFile => fsio::refuse_hard_links(&stat, &full)?,
            FileType::Directory => {
                let sub = rustix::fs::openat2(
                    &dir,
                    entry.file_name(),
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                    rustix::fs::ResolveFlags::NO_SYMLINKS
                        | rustix::fs::ResolveFlags::NO_MAGICLINKS
                        | rustix::fs::ResolveFlags::BENEATH,
                )
                .map_err(|e| OpError::errno(e, &full))?;
                check_tree(ctx, sub, &full, depth + 1, seen)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Refuses to act on the trash itself or anything that holds it.
pub fn refuse_trash_ancestor(ctx: &OpContext<'_>, path: &str) -> Result<(), OpError> {
    // Resolved without creating it: a preview only looks.
    let trash = ctx
        .trash_dir
        .to_str()
        .map(|t| crate::resolve::resolve(t, ctx.workdir))
        .ok_or_else(|| OpError::new(ErrorCode::Internal, "the trash path is not UTF-8"))??
        .path;
    if glovebox_policy::floor::is_same_or_below(&trash, path) {
        return Err(OpError::new(
            ErrorCode::InvalidParams,
            format!("{path} holds the trash; refusing to move it"),
        ));
    }
    Ok(())
}
