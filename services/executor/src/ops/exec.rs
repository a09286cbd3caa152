//! `exec_run`, `exec_status`, `exec_tail`, `exec_kill`, `exec_stat`: plan, preview and execute
//! for the job tools. `exec_run` has two subjects, the exact command (DOMAIN_EXEC) and its
//! working directory (judged as a read); the others name a job of the account (DOMAIN_JOB).

use std::time::Duration;

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::exec::{DEFAULT_TAIL_LINES, DEFAULT_TIMEOUT_S};
use glovebox_proto::tools::{ExecRunParams, ExecTailParams, JobParams};
use glovebox_proto::v1::{Domain, FileState, Plan, TicketBody};
use rustix::fs::FileType;
use serde_json::Value;

use crate::approved::{bound_subjects, subject};
use crate::context::{Done, OpContext};
use crate::error::OpError;
use crate::fsio;
use crate::jobs::SHELL;
use crate::resolve::resolve;

pub fn plan_run(ctx: &OpContext<'_>, p: &ExecRunParams) -> Result<Plan, OpError> {
    let cwd = resolve(p.cwd.as_deref().unwrap_or("."), ctx.workdir)?;
    Ok(Plan {
        subjects: vec![
            subject(Domain::Exec, p.command.clone(), FileState::default()),
            subject(Domain::Read, cwd.path.clone(), fsio::observed(&cwd)),
        ],
        content_tag: Vec::new(),
        pack: None,
    })
}

pub fn preview_run(p: &ExecRunParams, plan: &Plan) -> (String, bool) {
    let cwd = plan.subjects.get(1).map(|s| s.path.as_str()).unwrap_or("?");
    let timeout = p.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S);
    (
        format!(
            "command: {}\nshell:   {SHELL} -c\ncwd:     {cwd}\ntimeout: {timeout}s\n",
            p.command
        ),
        false,
    )
}

pub fn execute_run(
    ctx: &OpContext<'_>,
    p: &ExecRunParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let cwd = resolve(p.cwd.as_deref().unwrap_or("."), ctx.workdir)?;
    let bound = bound_subjects(
        ticket,
        &[(Domain::Exec, &p.command), (Domain::Read, &cwd.path)],
    )?;
    cwd.followable("the working directory")?;
    let expected = bound[1].state.clone().unwrap_or_default();
    if !expected.exists {
        return Err(OpError::new(
            ErrorCode::NotFound,
            "the working directory does not exist",
        ));
    }
    let stat = fsio::stat_path(&cwd.path)?;
    fsio::check_identity(&stat, &expected, "the working directory")?;
    if fsio::file_type(&stat) != FileType::Directory {
        return Err(OpError::new(
            ErrorCode::InvalidParams,
            "cwd is not a directory",
        ));
    }
    let timeout = Duration::from_secs(p.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S));
    let cap = glovebox_sandbox::isolate::Network::parse(&ticket.job_network);
    let result = ctx.jobs.start(&p.command, &cwd.path, timeout, cap)?;
    Ok(Done::new(&result, 0))
}

/// The plan of a call that addresses one job.
pub fn plan_job(job_id: &str) -> Plan {
    Plan {
        subjects: vec![subject(
            Domain::Job,
            job_id.to_owned(),
            FileState::default(),
        )],
        content_tag: Vec::new(),
        pack: None,
    }
}

/// The plan of `exec_stat` (the account's job list).
pub fn plan_stat() -> Plan {
    plan_job("*")
}

fn bound_job(ticket: &TicketBody, job_id: &str) -> Result<(), OpError> {
    match ticket.subjects.as_slice() {
        [s] if s.domain == Domain::Job as i32 && s.path == job_id => Ok(()),
        _ => Err(OpError::new(
            ErrorCode::Changed,
            "the ticket does not name this job",
        )),
    }
}

fn done(result: Value) -> Done {
    Done::new(&result, 0)
}

pub fn execute_status(
    ctx: &OpContext<'_>,
    p: &JobParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    bound_job(ticket, &p.job_id)?;
    ctx.jobs.status(&p.job_id).map(done)
}

pub fn execute_kill(
    ctx: &OpContext<'_>,
    p: &JobParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    bound_job(ticket, &p.job_id)?;
    ctx.jobs.kill(&p.job_id).map(done)
}

pub fn execute_tail(
    ctx: &OpContext<'_>,
    p: &ExecTailParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    bound_job(ticket, &p.job_id)?;
    let lines = p.lines.unwrap_or(DEFAULT_TAIL_LINES);
    ctx.jobs.tail(&p.job_id, p.stream, lines, p.since).map(done)
}

pub fn execute_stat(ctx: &OpContext<'_>, ticket: &TicketBody) -> Result<Done, OpError> {
    bound_job(ticket, "*")?;
    Ok(done(ctx.jobs.list()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::testing::{Fixture, ticket_for};

    fn params(command: &str, cwd: Option<&str>) -> ExecRunParams {
        ExecRunParams {
            command: command.into(),
            cwd: cwd.map(Into::into),
            timeout_s: None,
        }
    }

    #[test]
    fn a_ticket_runs_only_the_command_and_directory_it_names() {
        let f = Fixture::new();
        std::fs::create_dir_all(f.work.join("sub")).unwrap();
        let approved = params("true", None);
        let ticket = ticket_for(&plan_run(&f.ctx(), &approved).unwrap());
        for (what, p) in [
            ("another command", params("rm -rf ~", None)),
            ("another directory", params("true", Some("sub"))),
        ] {
            let e = execute_run(&f.ctx(), &p, &ticket).unwrap_err();
            assert_eq!(e.code, ErrorCode::Changed, "{what}");
        }
        let mut swapped = ticket.clone();
        swapped.subjects.reverse();
        let mut short = ticket.clone();
        short.subjects.pop();
        for (what, t) in [("swapped subjects", swapped), ("one subject", short)] {
            let e = execute_run(&f.ctx(), &approved, &t).unwrap_err();
            assert_eq!(e.code, ErrorCode::Changed, "{what}");
        }
        assert_eq!(f.jobs.running(), 0);
        execute_run(&f.ctx(), &approved, &ticket).unwrap();
    }
}
