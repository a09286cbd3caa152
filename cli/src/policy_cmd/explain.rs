//! `glovebox policy explain`: which layer and rule decide a subject, and why — judged on the
//! canonical subject a real call would be judged on. Paths and commands are not resolved here or
//! in the gate: the account's executor plans the equivalent call (a read as `file_read`, a write
//! as `file_write`, a delete as `file_delete`, a command as `exec_run`) exactly as it plans an
//! agent's, and the gate explains what it planned. Tool names need no plan.

use std::process::ExitCode;

use clap::Args;
use glovebox_config::StateDir;
use glovebox_proto::tools::Tool;
use glovebox_proto::transport::Link as Channel;
use glovebox_proto::v1::{
    self as pb, executor_client::ExecutorClient, explain_request::Subject,
    gate_admin_client::GateAdminClient,
};
use serde_json::Value;

#[derive(Args, Debug)]
#[group(skip)]
#[command(group(
    clap::ArgGroup::new("subject")
        .required(true)
        .multiple(false)
        .args(["read", "write", "delete", "exec", "tool"])
))]
pub struct ExplainArgs {
    /// A path an agent would read (relative: to the workdir).
    #[arg(long, value_name = "PATH")]
    read: Option<String>,
    /// A path an agent would write.
    #[arg(long, value_name = "PATH")]
    write: Option<String>,
    /// A path an agent would delete.
    #[arg(long, value_name = "PATH")]
    delete: Option<String>,
    /// A command line an agent would run (each command in it is judged).
    #[arg(long, value_name = "COMMAND")]
    exec: Option<String>,
    /// A tool's name (a built-in, a client tool, or a pack's `pack__tool`).
    #[arg(long, value_name = "NAME")]
    tool: Option<String>,
    /// Working directory of --exec (default: the account's workdir).
    #[arg(long, value_name = "DIR", requires = "exec")]
    cwd: Option<String>,
    /// As one JSON object: verdict, subject, layer, rule, why, warnings.
    #[arg(long)]
    json: bool,
}

pub async fn explain(
    state: &StateDir,
    gate: &mut GateAdminClient<Channel>,
    account: String,
    args: ExplainArgs,
) -> anyhow::Result<ExitCode> {
    let mut pack = None;
    let (subject, cwd) = match (equivalent_call(&args), args.tool) {
        (Some((tool, params)), _) => {
            let plan = plan(state, &account, tool, &params).await?;
            let (planned, cwd) = explained_subject(&plan)?;
            (Subject::Planned(planned), cwd)
        }
        (None, Some(name)) => {
            pack = pack_facts(state, &account, &name).await;
            (Subject::Tool(name), String::new())
        }
        (None, None) => {
            anyhow::bail!("name a subject: --read, --write, --delete, --exec or --tool")
        }
    };
    let r = gate
        .explain(pb::ExplainRequest {
            account,
            subject: Some(subject),
            cwd,
            pack,
        })
        .await
        .map_err(crate::admin_socket::gate_error)?
        .into_inner();
    if args.json {
        crate::outln!(
            "{}",
            serde_json::json!({
                "verdict": verdict_of(&r), "subject": r.subject, "layer": r.layer,
                "rule": r.rule, "why": r.reason, "warnings": r.warnings,
            })
        );
    } else {
        print_explained(&r);
    }
    Ok(ExitCode::SUCCESS)
}

/// A pack tool's facts as its pack host lists them now (its server's read-only hint, the file
/// that configured it), so the tool is explained as its call would be decided; `None` for any
/// other tool, or when the pack host cannot say (then it is explained as a plain tool name, and
/// that is said).
async fn pack_facts(state: &StateDir, account: &str, name: &str) -> Option<pb::PackFacts> {
    glovebox_proto::packs::split_name(name)?;
    let listed = match crate::packs_cmd::list(state, account).await {
        Ok(listed) => listed,
        Err(e) => {
            eprintln!(
                "(the pack host cannot say what {name} is: {e}; explained as a plain tool name)"
            );
            return None;
        }
    };
    let facts = glovebox_proto::packs::facts_of(&listed, name);
    if facts.is_none() {
        eprintln!("(no pack lists {name} now; explained as a plain tool name)");
    }
    facts
}

/// The call a real agent would make to touch the subject named, whose plan explain judges; `None`
/// for a tool name.
fn equivalent_call(args: &ExplainArgs) -> Option<(Tool, Value)> {
    use glovebox_proto::tools::explain::{ExplainDomain as D, equivalent_call};
    let (domain, subject) = [
        (D::Read, &args.read),
        (D::Write, &args.write),
        (D::Delete, &args.delete),
        (D::Exec, &args.exec),
    ]
    .into_iter()
    .find_map(|(d, s)| Some((d, s.as_deref()?)))?;
    equivalent_call(domain, subject, args.cwd.as_deref())
}

/// Asks the account's executor, as an administrator, to plan `tool` with `params`.
async fn plan(
    state: &StateDir,
    account: &str,
    tool: Tool,
    params: &Value,
) -> anyhow::Result<pb::Plan> {
    use glovebox_proto::transport::handover::{peer, socket};
    let keys = crate::control_keys(state)?;
    let path = state.executor_socket(account);
    let channel = glovebox_proto::transport::authenticated_channel(
        &path,
        peer::ADMIN,
        keys.key(&socket::executor(account), peer::ADMIN),
    );
    let r = ExecutorClient::new(channel)
        .plan(pb::PlanRequest {
            call: Some(pb::ToolCall {
                account: account.to_owned(),
                call_id: "policy-explain".into(),
                tool: tool.name().into(),
                params_json: params.to_string(),
                client_call_id: String::new(),
            }),
        })
        .await
        .map_err(|status| match status.code() {
            tonic::Code::Unavailable => anyhow::anyhow!(
                "is glovebox running? the executor of account {account} is not reachable ({}): \
                 explain judges paths and commands as it resolves them",
                path.display()
            ),
            _ => anyhow::anyhow!("the executor of account {account}: {}", status.message()),
        })?
        .into_inner();
    if let Some(e) = r.error {
        anyhow::bail!("the executor cannot plan this: {}: {}", e.code, e.message);
    }
    r.plan
        .ok_or_else(|| anyhow::anyhow!("the executor of account {account} returned no plan"))
}

/// What the gate is asked to explain from a plan (see `glovebox_proto::tools::explain`).
fn explained_subject(plan: &pb::Plan) -> anyhow::Result<(pb::Subject, String)> {
    glovebox_proto::tools::explain::explained_subject(plan).map_err(|e| anyhow::anyhow!(e))
}

fn verdict_of(r: &pb::ExplainResponse) -> &'static str {
    match pb::Verdict::try_from(r.verdict) {
        Ok(pb::Verdict::Allow) => "allow",
        Ok(pb::Verdict::Ask) => "ask",
        _ => "deny",
    }
}

fn print_explained(r: &pb::ExplainResponse) {
    crate::outln!("verdict: {}", verdict_of(r));
    crate::outln!("subject: {}", r.subject);
    crate::outln!("layer:   {}", r.layer);
    crate::outln!("rule:    {}", r.rule);
    crate::outln!("why:     {}", r.reason);
    for w in &r.warnings {
        crate::outln!("warning: {w}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::json;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ExplainArgs,
    }

    fn call(argv: &[&str]) -> Option<(Tool, Value)> {
        let cli = Cli::try_parse_from([&["explain"], argv].concat()).unwrap();
        equivalent_call(&cli.args)
    }

    #[test]
    fn each_subject_is_planned_as_the_call_that_would_touch_it() {
        assert_eq!(
            call(&["--read", "a/../b"]),
            Some((Tool::FileRead, json!({"path": "a/../b"})))
        );
        assert_eq!(
            call(&["--write", "new.txt"]),
            Some((Tool::FileWrite, json!({"path": "new.txt", "content": ""})))
        );
        assert_eq!(
            call(&["--delete", "link"]),
            Some((Tool::FileDelete, json!({"path": "link"})))
        );
        assert_eq!(
            call(&["--exec", "git status"]),
            Some((Tool::ExecRun, json!({"command": "git status"})))
        );
        assert_eq!(
            call(&["--exec", "ls", "--cwd", "sub"]),
            Some((Tool::ExecRun, json!({"command": "ls", "cwd": "sub"})))
        );
        assert_eq!(call(&["--tool", "client__x"]), None);
    }
}
