//! The operations an executor performs. The set is closed: each tool is one file under `ops/`,
//! with the same three steps: plan (resolve subjects), preview (what the approver sees) and
//! execute (act on exactly what the ticket names).

pub mod exec;
pub mod list;
pub mod read;
pub mod write;

use std::path::Path;

use glovebox_proto::tools::ToolParams;
use glovebox_proto::v1::{Plan, TicketBody};

use crate::error::OpError;

/// What an operation needs to know about the account it runs for.
#[derive(Debug, Clone)]
pub struct OpContext<'a> {
    pub workdir: &'a Path,
    /// Canonical directories on the floor (hidden from listings).
    pub protected: &'a [String],
    /// This account's key: tags content so plans do not carry plain hashes.
    pub key: &'a glovebox_ticket::Key,
    /// This account's exec jobs.
    pub jobs: &'a crate::jobs::JobTable,
}

/// Resolves a call's subjects.
pub fn plan(ctx: &OpContext<'_>, params: &ToolParams) -> Result<Plan, OpError> {
    match params {
        ToolParams::FileRead(p) => read::plan(ctx, p),
        ToolParams::FileList(p) => list::plan(ctx, p),
        ToolParams::FileWrite(p) => write::plan(ctx, p),
        ToolParams::ExecRun(p) => exec::plan_run(ctx, p),
        ToolParams::ExecStatus(p) | ToolParams::ExecKill(p) => Ok(exec::plan_job(&p.job_id)),
        ToolParams::ExecTail(p) => Ok(exec::plan_job(&p.job_id)),
        ToolParams::ExecStat(_) => Ok(exec::plan_stat()),
    }
}

/// Renders what the approver sees for a planned call.
pub fn preview(
    ctx: &OpContext<'_>,
    params: &ToolParams,
    plan: &Plan,
) -> Result<(String, bool), OpError> {
    match params {
        ToolParams::FileWrite(p) => write::preview(ctx, p, plan),
        ToolParams::ExecRun(p) => Ok(exec::preview_run(p, plan)),
        _ => Ok((String::new(), false)),
    }
}

/// The outcome of an executed operation: its JSON result and the bytes it moved.
#[derive(Debug)]
pub struct Done {
    pub result: serde_json::Value,
    pub bytes: u64,
}

/// Acts on a verified ticket.
pub fn execute(
    ctx: &OpContext<'_>,
    params: &ToolParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    match params {
        ToolParams::FileRead(p) => read::execute(ctx, p, ticket),
        ToolParams::FileList(p) => list::execute(ctx, p, ticket),
        ToolParams::FileWrite(p) => write::execute(ctx, p, ticket),
        ToolParams::ExecRun(p) => exec::execute_run(ctx, p, ticket),
        ToolParams::ExecStatus(p) => exec::execute_status(ctx, p, ticket),
        ToolParams::ExecTail(p) => exec::execute_tail(ctx, p, ticket),
        ToolParams::ExecKill(p) => exec::execute_kill(ctx, p, ticket),
        ToolParams::ExecStat(_) => exec::execute_stat(ctx, ticket),
    }
}

/// The ticket's one subject, checked against the path this call resolves to now.
pub fn bound_subject<'t>(
    ticket: &'t TicketBody,
    domain: glovebox_proto::v1::Domain,
    resolved: &str,
) -> Result<&'t glovebox_proto::v1::Subject, OpError> {
    match ticket.subjects.as_slice() {
        [s] if s.domain == domain as i32 && s.path == resolved => Ok(s),
        _ => Err(OpError::new(
            glovebox_proto::ErrorCode::Changed,
            "the path no longer resolves to what was approved",
        )),
    }
}

/// A subject for `path` in `domain` with the given state.
pub fn subject(
    domain: glovebox_proto::v1::Domain,
    path: String,
    state: glovebox_proto::v1::FileState,
) -> glovebox_proto::v1::Subject {
    glovebox_proto::v1::Subject {
        domain: domain as i32,
        path,
        state: Some(state),
    }
}

/// Re-resolves `path`, checks it is the ticket's one read subject, and opens it without following
/// links; the opened object must be the one the ticket names. Returns (canonical path, fd, stat).
pub fn open_approved_read(
    ctx: &OpContext<'_>,
    path: &str,
    ticket: &TicketBody,
) -> Result<(String, std::os::fd::OwnedFd, rustix::fs::Stat), OpError> {
    let r = crate::resolve::resolve(path, ctx.workdir)?;
    let s = bound_subject(ticket, glovebox_proto::v1::Domain::Read, &r.path)?;
    let expected = s.state.clone().unwrap_or_default();
    if !expected.exists {
        return Err(OpError::new(
            glovebox_proto::ErrorCode::NotFound,
            format!("{path}: not found"),
        ));
    }
    let fd = crate::fsio::open_no_links(&s.path, rustix::fs::OFlags::RDONLY)?;
    let stat = crate::fsio::fstat(&fd, path)?;
    crate::fsio::check_identity(&stat, &expected, path)?;
    Ok((s.path.clone(), fd, stat))
}
