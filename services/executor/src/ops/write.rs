//! `file_write`: create a file exclusively, or replace one atomically (a temporary file in the
//! same directory, then rename) keeping its mode. A replacement happens only while the file still
//! matches the fingerprint the approver saw (device, inode, size, mtime, SHA-256).

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::FileWriteParams;
use glovebox_proto::v1::{Domain, Plan, Subject, TicketBody};
use rustix::fs::{Mode, OFlags};
use serde_json::json;

use crate::approved::{bound_subject, planned_subject};
use crate::context::{Done, OpContext};
use crate::diff::render_diff;
use crate::error::OpError;
use crate::fsio;
use crate::replace::{planned_content, planned_state, replace_with, write_all};
use crate::resolve::resolve;

/// Fingerprints the file if it exists. What is wrong with it (not a regular file, hard links,
/// too big, unreadable) is not reported here: the plan then carries its identity alone, and the
/// preview and the executed call say why.
pub fn plan(ctx: &OpContext<'_>, p: &FileWriteParams) -> Result<Plan, OpError> {
    let r = resolve(&p.path, ctx.workdir)?;
    let state = planned_state(ctx, &r);
    Ok(Plan {
        subjects: vec![Subject::new(Domain::Write, r.path, state)],
        content_tag: ctx.key.tag(p.content.as_bytes()),
        pack: None,
    })
}

pub fn preview(
    ctx: &OpContext<'_>,
    p: &FileWriteParams,
    plan: &Plan,
) -> Result<(String, bool), OpError> {
    let s = planned_subject(plan)?;
    let planned = s.state.clone().unwrap_or_default();
    let old = planned_content(ctx, &s.path, &p.path, &planned)?;
    Ok(render_diff(
        &s.path,
        &old,
        p.content.as_bytes(),
        planned.exists,
    ))
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
    Ok(Done::new(
        &json!({ "path": s.path, "bytes": n, "created": created }),
        n,
    ))
}

fn create(canonical: &str, shown: &str, content: &[u8]) -> Result<(), OpError> {
    let (parent, name) = fsio::split_parent(canonical)?;
    let dir = fsio::make_dirs(parent, shown)?;
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
        Err(e) => return Err(OpError::errno(e, shown)),
    };
    write_all(fd, content, shown)
}
