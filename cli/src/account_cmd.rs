//! `glovebox account add|list|show|remove`: accounts while glovebox runs, through the gate's
//! admin socket (the state's owner in user mode, root in system mode). The gate checks, writes
//! and audits each change (with the caller's uid); the supervisor starts or stops the account's
//! executor and pack host and tells the broker (see `supervisor/accounts.rs`).

use std::path::PathBuf;
use std::process::ExitCode;

use glovebox_config::StateDir;
use glovebox_proto::v1 as pb;

use crate::outln;

#[derive(clap::Subcommand, Debug)]
pub enum AccountCommand {
    /// Add an account: its executor and pack host start at once, as --run-as; its agent token is
    /// written to <state>/accounts/ID/token (0600). Its tools are off unless --enabled.
    Add {
        id: String,
        /// The directory its agents work in (must exist).
        #[arg(long, value_name = "DIR")]
        workdir: PathBuf,
        /// A directory its executor and jobs may touch at all (default: the workdir); repeat.
        #[arg(long = "root", value_name = "DIR")]
        roots: Vec<PathBuf>,
        /// The OS user its executor, pack host and jobs run as (required in system mode).
        #[arg(long, value_name = "USER")]
        run_as: Option<String>,
        /// The OS user who approves its asks (required in system mode).
        #[arg(long, value_name = "USER")]
        owner: Option<String>,
        /// Switch its tools on now (`glovebox enable` later otherwise).
        #[arg(long)]
        enabled: bool,
    },
    /// Every account: glovebox.yaml's (changed only by an edit and a restart) and those added.
    List,
    /// One account.
    Show { id: String },
    /// Remove an account added with `account add`: its tokens are refused at once, its
    /// connections close and its executor and pack host stop. Its directory in the state is
    /// kept under removed/ for review, never reused.
    Remove { id: String },
}

/// Runs an account command against the gate of `state`.
pub async fn run(state: &StateDir, command: AccountCommand) -> anyhow::Result<ExitCode> {
    let mut gate = crate::policy_cmd::client(state)?;
    match command {
        AccountCommand::Add {
            id,
            workdir,
            roots,
            run_as,
            owner,
            enabled,
        } => {
            let absolute = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
            let request = pb::AddAccountRequest {
                id: id.clone(),
                workdir: absolute(workdir).display().to_string(),
                roots: roots
                    .into_iter()
                    .map(|r| absolute(r).display().to_string())
                    .collect(),
                run_as: run_as.unwrap_or_default(),
                owner: owner.unwrap_or_default(),
                enabled,
            };
            let r = gate
                .add_account(request)
                .await
                .map_err(crate::policy_cmd::gate_error)?
                .into_inner();
            outln!("added account {id:?}; glovebox starts its executor now");
            outln!("  token:    {} (agent)", r.token_file);
            outln!("  approver: {}", r.approver_token_file);
            if !enabled {
                outln!("  its tools are off: `glovebox enable --account {id}` switches them on");
            }
        }
        AccountCommand::List => {
            let r = list(&mut gate).await?;
            for a in &r.accounts {
                outln!("{}", line(a));
            }
        }
        AccountCommand::Show { id } => {
            let r = list(&mut gate).await?;
            let Some(a) = r.accounts.iter().find(|a| a.id == id) else {
                anyhow::bail!("no account {id:?}");
            };
            outln!("id:       {}", a.id);
            outln!("workdir:  {}", a.workdir);
            outln!("roots:    {}", a.roots.join(", "));
            outln!(
                "run_as:   {}",
                or_default(&a.run_as, "(the user glovebox runs as)")
            );
            outln!("owner:    {}", or_default(&a.owner, "(none)"));
            outln!("enabled:  {}", a.enabled);
            outln!("from:     {}", from(a));
            outln!("token:    {}", state.token_file(&a.id).display());
        }
        AccountCommand::Remove { id } => {
            gate.remove_account(pb::RemoveAccountRequest { id: id.clone() })
                .await
                .map_err(crate::policy_cmd::gate_error)?;
            outln!("removed account {id:?}: its tokens are refused and its executor stops");
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(
    gate: &mut pb::gate_admin_client::GateAdminClient<glovebox_proto::transport::Link>,
) -> anyhow::Result<pb::ListAccountsResponse> {
    Ok(gate
        .list_accounts(pb::ListAccountsRequest {})
        .await
        .map_err(crate::policy_cmd::gate_error)?
        .into_inner())
}

fn or_default<'a>(value: &'a str, default: &'a str) -> &'a str {
    if value.is_empty() { default } else { value }
}

fn from(a: &pb::AccountEntry) -> &'static str {
    if a.added {
        "added at run time (accounts.yaml)"
    } else {
        "glovebox.yaml"
    }
}

/// One line of `account list`.
fn line(a: &pb::AccountEntry) -> String {
    format!(
        "{}\t{}\trun_as={}\towner={}\t{}\t{}",
        a.id,
        a.workdir,
        or_default(&a.run_as, "-"),
        or_default(&a.owner, "-"),
        if a.enabled { "enabled" } else { "disabled" },
        if a.added { "added" } else { "config" },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_line_names_where_the_account_comes_from() {
        let a = pb::AccountEntry {
            id: "n".into(),
            workdir: "/w".into(),
            added: true,
            ..Default::default()
        };
        assert_eq!(line(&a), "n\t/w\trun_as=-\towner=-\tdisabled\tadded");
        let b = pb::AccountEntry {
            run_as: "agent".into(),
            enabled: true,
            ..a
        };
        assert!(line(&b).contains("run_as=agent") && line(&b).ends_with("enabled\tadded"));
    }
}
