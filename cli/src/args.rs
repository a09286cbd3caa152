//! The `glovebox` command line: the clap tree every command is parsed with (the binary, the
//! completions and the man page share it). Only definitions: `main.rs` dispatches them. Each
//! command's doc comment here is its `--help`; its arguments are defined beside the code that
//! runs it (`up_cmd::UpArgs`, …), those several commands share in `shared_args`.

use clap::{Parser, Subcommand};

use crate::shared_args::{ClientArgs, StateArgs, SwitchArgs};
use crate::{
    account_cmd, audit_cmd, background, client, console_cmd, docs, doctor, packs_cmd, policy_cmd,
    services, status, up_cmd,
};

#[derive(Parser, Debug)]
#[command(
    name = "glovebox",
    version,
    about = "Give AI agents hands on this machine, through a permission gate and an audit log"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Start the gate, one executor per account and the broker, and supervise them.
    Up(up_cmd::UpArgs),
    /// Stop the running glovebox and start it again: through systemd when a unit runs it,
    /// else in the background (`up --detach`) on the same state directory.
    Restart(background::RestartArgs),
    /// Print glovebox's log: the unit's journal when systemd runs it, else the log of
    /// `up --detach` (<state>/glovebox.log).
    Logs(background::LogsArgs),
    /// Say whether glovebox runs: its processes, URLs, accounts, sandboxes and health.
    Status(status::StatusArgs),
    /// Stop the running `glovebox up` (as Ctrl-C in its terminal would) and wait until it has.
    Stop {
        #[command(flatten)]
        state: StateArgs,
    },
    /// List the tools the account's agents are offered: names and what each does.
    Tools(status::ToolsArgs),
    /// Invoke one tool as the account's agent and print the result.
    Call(client::CallArgs),
    /// Serve the account's tools as an MCP server on stdin/stdout, forwarding to the running broker.
    Mcp {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Answer the account's asks in this terminal: y (once), a (always), n (deny), ? (details).
    ///
    /// One key each, no Enter (a line each when stdin is not a terminal). Ctrl-C denies the ask on
    /// screen and exits 130; a closed stdin is an error (exit 2).
    Approve(client::ApproveArgs),
    /// Print a one-time login link to the web console (approvals, activity, rules, switches).
    Console(console_cmd::ConsoleArgs),
    /// Switch an account's tools on (its agents see and may call them, through the gate).
    Enable {
        #[command(flatten)]
        switch: SwitchArgs,
    },
    /// Switch an account's tools off: its agents see no tools and every call is refused.
    Disable {
        #[command(flatten)]
        switch: SwitchArgs,
    },
    /// Manage and explain an account's policy (talks to the running gate).
    Policy(policy_cmd::PolicyArgs),
    /// An account's MCP tool packs (talks to its running pack host).
    Packs(packs_cmd::PacksArgs),
    /// Accounts while glovebox runs (add, list, show, remove), without a restart.
    Account(account_cmd::AccountArgs),
    /// Secrets of an account's packs (`${secret:NAME}` in mcp.json), stored encrypted by the gate.
    Secret(packs_cmd::SecretArgs),
    /// Check this machine for glovebox: kernel features, identities, file and socket modes,
    /// managed policy, running services; each OK, or WARN/FAIL with the fix. Exits 1 on a FAIL.
    Doctor(doctor::DoctorArgs),
    /// Credentials of an account.
    Token {
        #[command(subcommand)]
        command: account_cmd::TokenCommand,
    },
    /// Audit store commands.
    Audit {
        #[command(subcommand)]
        command: audit_cmd::AuditCommand,
    },
    /// Print the shell completion script for SHELL (packages install it).
    #[command(hide = true)]
    Completions {
        #[arg(value_enum)]
        shell: docs::Shell,
    },
    /// Print the man page, in roff (packages install it).
    #[command(hide = true)]
    Man,
    /// Run the gate (started by `up`).
    #[command(hide = true)]
    Gate(services::GateArgs),
    /// Run one account's executor (started by `up`, which writes its keys to stdin).
    #[command(hide = true)]
    Executor(services::ExecutorArgs),
    /// Run one account's pack host (started by `up`, which writes its keys to stdin).
    #[command(hide = true)]
    PackHost(packs_cmd::PackHostArgs),
    /// Contain one pack server (started by a pack host for each pack; see `glovebox_sandbox::shim`).
    #[command(hide = true)]
    PackShim(packs_cmd::PackShimArgs),
    /// Try the namespaces a shim would make, in this process, and say why not (started by
    /// executors, pack hosts and `doctor`; see `glovebox_sandbox::walls::probe`).
    #[command(hide = true)]
    WallsProbe,
    /// Contain one job (started by an executor for each exec_run; see the executor's `jobs::shim`).
    #[command(hide = true)]
    JobShim(services::JobShimArgs),
    /// Run the broker (started by `up`).
    #[command(hide = true)]
    Broker(services::BrokerArgs),
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every argument of every public command says what it is for in `--help`.
    #[test]
    fn every_argument_has_help() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in command.get_arguments() {
                let id = a.get_id().as_str();
                if a.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} <{id}>"));
                }
            }
            for sub in command.get_subcommands() {
                if !sub.is_hide_set() {
                    walk(sub, &format!("{path} {}", sub.get_name()), missing);
                }
            }
        }
        let mut command = Cli::command();
        command.build();
        let mut missing = Vec::new();
        walk(&command, "glovebox", &mut missing);
        assert!(missing.is_empty(), "arguments without help: {missing:#?}");
    }
}
