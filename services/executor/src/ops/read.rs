//! `file_read`: a UTF-8 text file of at most `MAX_READ_BYTES`.

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::{FileReadParams, MAX_READ_BYTES};
use glovebox_proto::v1::{Domain, Plan, TicketBody};
use rustix::fs::FileType;
use serde_json::json;

use super::{Done, OpContext, subject};
use crate::error::OpError;
use crate::fsio;
use crate::resolve::resolve;

/// Only resolves: whether the file exists and what it is are reported after the gate decided,
/// so a denied path cannot be probed for existence.
pub fn plan(ctx: &OpContext<'_>, p: &FileReadParams) -> Result<Plan, OpError> {
    let r = resolve(&p.path, ctx.workdir)?;
    Ok(Plan {
        subjects: vec![subject(Domain::Read, r.path.clone(), observed(&r))],
        content_tag: Vec::new(),
    })
}

/// What is at a resolved path now (identity only; `exists: false` if nothing is).
pub fn observed(r: &crate::resolve::Resolved) -> glovebox_proto::v1::FileState {
    match r.exists.then(|| fsio::stat_path(&r.path)) {
        Some(Ok(stat)) => fsio::state_of(&stat),
        _ => glovebox_proto::v1::FileState::default(),
    }
}

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileReadParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let (path, fd, stat) = super::open_approved_read(ctx, &p.path, ticket)?;
    match fsio::file_type(&stat) {
        FileType::RegularFile => {}
        FileType::Directory => {
            return Err(OpError::new(
                ErrorCode::InvalidParams,
                format!("{} is a directory; use file_list", p.path),
            ));
        }
        _ => {
            return Err(OpError::new(
                ErrorCode::InvalidParams,
                format!("{} is not a regular file", p.path),
            ));
        }
    }
    fsio::refuse_hard_links(&stat, &p.path)?;
    let bytes = fsio::read_capped(fd, MAX_READ_BYTES, &p.path)?;
    if bytes.contains(&0) {
        return Err(OpError::new(
            ErrorCode::Binary,
            format!("{} is a binary file", p.path),
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| OpError::new(ErrorCode::Binary, format!("{} is not UTF-8 text", p.path)))?;
    let n = text.len() as u64;
    let lines = text.lines().count();
    Ok(Done {
        result: json!({ "path": path, "content": text, "bytes": n, "lines": lines }),
        bytes: n,
    })
}
