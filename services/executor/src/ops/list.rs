//! `file_list`: a directory's entries with type, size and modification time. Entries on the
//! secret floor are hidden (and counted); at most `MAX_LIST_ENTRIES` are returned.

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::{FileListParams, MAX_LIST_ENTRIES};
use glovebox_proto::v1::{Domain, Plan, TicketBody};
use rustix::fs::{AtFlags, FileType};
use serde_json::json;

use super::{Done, OpContext, subject};
use crate::error::OpError;
use crate::fsio;
use crate::resolve::resolve;

pub fn plan(ctx: &OpContext<'_>, p: &FileListParams) -> Result<Plan, OpError> {
    let r = resolve(&p.path, ctx.workdir)?;
    Ok(Plan {
        subjects: vec![subject(
            Domain::Read,
            r.path.clone(),
            super::read::observed(&r),
        )],
        content_tag: Vec::new(),
    })
}

fn type_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        _ => "other",
    }
}

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileListParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let (path, fd, stat) = super::open_approved_read(ctx, &p.path, ticket)?;
    if fsio::file_type(&stat) != FileType::Directory {
        return Err(OpError::new(
            ErrorCode::InvalidParams,
            format!("{} is not a directory", p.path),
        ));
    }
    let dir = rustix::fs::Dir::read_from(&fd).map_err(|e| fsio::errno_error(e, &p.path))?;
    let mut names = Vec::new();
    let mut hidden = 0u64;
    for entry in dir {
        let entry = entry.map_err(|e| fsio::errno_error(e, &p.path))?;
        let bytes = entry.file_name().to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        let Ok(name) = std::str::from_utf8(bytes) else {
            hidden += 1;
            continue;
        };
        let full = format!("{}/{name}", path.trim_end_matches('/'));
        if glovebox_policy::floor::check(&full, ctx.protected).is_some() {
            hidden += 1;
            continue;
        }
        names.push(name.to_owned());
    }
    names.sort_unstable();
    let total = names.len();
    let truncated = total > MAX_LIST_ENTRIES;
    names.truncate(MAX_LIST_ENTRIES);
    let entries: Vec<serde_json::Value> = names
        .iter()
        .filter_map(|name| {
            let st = rustix::fs::statat(&fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
            Some(json!({
                "name": name,
                "type": type_name(fsio::file_type(&st)),
                "size": st.st_size.max(0),
                "mtime": st.st_mtime,
            }))
        })
        .collect();
    Ok(Done {
        result: json!({ "path": path, "entries": entries, "total": total, "truncated": truncated, "hidden": hidden }),
        bytes: 0,
    })
}
