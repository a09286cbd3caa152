//! `exec_run`, `exec_status`, `exec_tail`, `exec_kill`, `exec_stat`, `exec_input`: plan, preview
//! and execute for the job tools. `exec_run` has two subjects, the exact command (DOMAIN_EXEC)
//! and its working directory (judged as a read); the others name a job of the account
//! (DOMAIN_JOB). `exec_input` to a job that is a shell or an interpreter also has each line of
//! its input as a command, with the job's working directory: the job was approved for what it
//! runs, not for whatever it is told next. Input to anything else goes under the job's approval.
//! An interactive start and the exact input are bound to the ticket by their tag.

use std::time::Duration;

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::exec::{DEFAULT_TAIL_LINES, DEFAULT_TIMEOUT_S};
use glovebox_proto::tools::{ExecInputParams, ExecRunParams, ExecTailParams, JobParams};
use glovebox_proto::v1::{Domain, FileState, Plan, Subject, TicketBody};
use rustix::fs::FileType;
use serde_json::Value;

use crate::approved::bound_subjects;
use crate::context::{Done, OpContext};
use crate::error::OpError;
use crate::fsio;
use crate::jobs::SHELL;
use crate::resolve::resolve;

/// What an interactive start is bound by (nothing binds a plain one).
const INTERACTIVE: &[u8] = b"exec_run: interactive";

pub fn plan_run(ctx: &OpContext<'_>, p: &ExecRunParams) -> Result<Plan, OpError> {
    let cwd = resolve(p.cwd.as_deref().unwrap_or("."), ctx.workdir)?;
    Ok(Plan {
        subjects: vec![
            Subject::new(Domain::Exec, p.command.clone(), FileState::default()),
            Subject::new(Domain::Read, cwd.path.clone(), fsio::observed(&cwd)),
        ],
        content_tag: if p.interactive {
            ctx.key.tag(INTERACTIVE)
        } else {
            Vec::new()
        },
        pack: None,
    })
}

pub fn preview_run(p: &ExecRunParams, plan: &Plan) -> (String, bool) {
    let cwd = plan.subjects.get(1).map(|s| s.path.as_str()).unwrap_or("?");
    let timeout = p.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S);
    let input = if p.interactive {
        "input:   interactive: the agent may write to it (exec_input)\n"
    } else {
        ""
    };
    (
        format!(
            "command: {}\nshell:   {SHELL} -c\ncwd:     {cwd}\ntimeout: {timeout}s\n{input}",
            p.command
        ),
        false,
    )
}

/// Programs whose input is code or commands: input to a job that runs one is judged line by
/// line as commands.
const INTERPRETERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "fish", "busybox", "env", "sudo", "xargs", "python",
    "python2", "python3", "ipython", "pypy", "pypy3", "node", "nodejs", "deno", "bun", "ruby",
    "irb", "perl", "php", "lua", "luajit", "R", "Rscript", "julia", "ghci", "psql", "mysql",
    "sqlite3", "tclsh", "wish", "gdb", "lldb", "ssh", "nc", "socat", "expect",
];

/// Whether `command` (a job's, as approved) reads code or commands on its input: its program
/// (the first word, after any `VAR=value` assignments), or any program after a `|`, `;`, `&&`
/// or `||`, is a shell or an interpreter (`python3.12` counts as `python3`). When in doubt, yes.
pub fn reads_commands(command: &str) -> bool {
    let separators = ['|', ';', '&', '\n', '(', ')', '`', '$', '{', '}'];
    command.split(separators).any(|part| {
        let program = part
            .split_whitespace()
            .find(|w| !w.contains('=') || w.starts_with('='));
        let Some(program) = program else {
            return false;
        };
        let name = program.rsplit('/').next().unwrap_or(program);
        let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        INTERPRETERS.contains(&name) || INTERPRETERS.contains(&base)
    })
}

/// The lines of `input` as commands: each line, its end of line dropped (a last line without one
/// still counts).
fn lines_of(input: &str) -> Vec<&str> {
    input.lines().collect()
}

/// The job, then, to a shell or an interpreter, each line of the input with the job's working
/// directory; the input and whether it closes bound by their tag.
pub fn plan_input(ctx: &OpContext<'_>, p: &ExecInputParams) -> Result<Plan, OpError> {
    let mut subjects = vec![Subject::new(
        Domain::Job,
        p.job_id.clone(),
        FileState::default(),
    )];
    if let Ok((command, cwd, _)) = ctx.jobs.facts(&p.job_id)
        && reads_commands(&command)
    {
        let lines = lines_of(&p.input);
        if lines.len() > glovebox_proto::tools::exec::MAX_INPUT_LINES {
            return Err(OpError::new(
                ErrorCode::InvalidParams,
                format!(
                    "input to a shell or an interpreter is at most {} lines (each is judged)",
                    glovebox_proto::tools::exec::MAX_INPUT_LINES
                ),
            ));
        }
        for line in lines {
            subjects.push(Subject::new(
                Domain::Exec,
                line.to_owned(),
                FileState::default(),
            ));
            subjects.push(Subject::new(
                Domain::Read,
                cwd.clone(),
                FileState::default(),
            ));
        }
    }
    Ok(Plan {
        subjects,
        content_tag: ctx.key.tag(&input_tagged(p)),
        pack: None,
    })
}

/// What an input's tag covers: the job, the exact bytes, and whether it closes.
fn input_tagged(p: &ExecInputParams) -> Vec<u8> {
    let mut bound = format!("exec_input\0{}\0{}\0", p.job_id, p.close).into_bytes();
    bound.extend_from_slice(p.input.as_bytes());
    bound
}

pub fn preview_input(p: &ExecInputParams, plan: &Plan) -> (String, bool) {
    let judged = plan.subjects.len() > 1;
    let mut shown = format!(
        "input to job {}{}:\n{}",
        p.job_id,
        if judged {
            " (a shell or an interpreter: each line is a command)"
        } else {
            ""
        },
        p.input
    );
    if !p.input.is_empty() && !p.input.ends_with('\n') {
        shown.push_str("\n(no end of line)\n");
    }
    if p.close {
        shown.push_str("then its input is closed\n");
    }
    (shown, false)
}

pub fn execute_input(
    ctx: &OpContext<'_>,
    p: &ExecInputParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    match ticket.subjects.first() {
        Some(s) if s.domain == Domain::Job as i32 && s.path == p.job_id => {}
        _ => return Err(not_this_job()),
    }
    if ctx.key.tag(&input_tagged(p)) != ticket.content_tag {
        return Err(OpError::new(
            ErrorCode::Changed,
            "the input differs from what was approved",
        ));
    }
    // Judged as the job is now: a job that reads commands had its lines on the ticket.
    let (command, cwd, _) = ctx.jobs.facts(&p.job_id)?;
    if reads_commands(&command) {
        let wanted: Vec<(Domain, &str)> = std::iter::once((Domain::Job, p.job_id.as_str()))
            .chain(
                lines_of(&p.input)
                    .into_iter()
                    .flat_map(|line| [(Domain::Exec, line), (Domain::Read, cwd.as_str())]),
            )
            .collect();
        bound_subjects(ticket, &wanted)?;
    } else if ticket.subjects.len() != 1 {
        return Err(not_this_job());
    }
    let result = ctx.jobs.input(&p.job_id, p.input.as_bytes(), p.close)?;
    Ok(Done::new(&result, 0))
}

fn not_this_job() -> OpError {
    OpError::new(
        ErrorCode::Changed,
        "the ticket does not name this job's input",
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
    let interactive_tag = if p.interactive {
        ctx.key.tag(INTERACTIVE)
    } else {
        Vec::new()
    };
    if interactive_tag != ticket.content_tag {
        return Err(OpError::new(
            ErrorCode::Changed,
            "whether the job takes input differs from what was approved",
        ));
    }
    let result = ctx
        .jobs
        .start(&p.command, &cwd.path, timeout, cap, p.interactive)?;
    Ok(Done::new(&result, 0))
}

/// The plan of a call that addresses one job.
pub fn plan_job(job_id: &str) -> Plan {
    Plan {
        subjects: vec![Subject::new(
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

    #[test]
    fn a_job_reads_commands_when_any_program_in_it_is_a_shell_or_an_interpreter() {
        for command in [
            "python3 -i -q",
            "/usr/bin/python3.12",
            "FOO=1 node",
            "bash",
            "cat | sh",
            "make && psql db",
            "env python3",
            "xargs -n1 sh -c",
        ] {
            assert!(reads_commands(command), "{command}");
        }
        for command in [
            "cat",
            "npm init",
            "grep -v x",
            "tee out.txt",
            "sort | uniq -c",
        ] {
            assert!(!reads_commands(command), "{command}");
        }
    }

    #[test]
    fn an_inputs_lines_are_the_commands_judged_and_its_bytes_are_bound() {
        let p = |input: &str, close| ExecInputParams {
            job_id: "job-0123456789abcdef".into(),
            input: input.into(),
            close,
        };
        assert_eq!(lines_of("print(1)\nexit()\n"), ["print(1)", "exit()"]);
        assert_eq!(lines_of("no end of line"), ["no end of line"]);
        assert_ne!(
            input_tagged(&p("a\n", false)),
            input_tagged(&p("a\n", true))
        );
        assert_ne!(
            input_tagged(&p("a\n", false)),
            input_tagged(&p("b\n", false))
        );
        let (shown, _) = preview_input(&p("rm -rf /", true), &Plan::default());
        assert!(
            shown.contains("rm -rf /\n(no end of line)\nthen its input is closed"),
            "{shown}"
        );
    }
    use crate::testing::{Fixture, ticket_for};

    fn params(command: &str, cwd: Option<&str>) -> ExecRunParams {
        ExecRunParams {
            command: command.into(),
            cwd: cwd.map(Into::into),
            timeout_s: None,
            interactive: false,
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
