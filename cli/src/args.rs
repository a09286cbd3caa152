//! The `glovebox` command line: the clap tree every command is parsed with (the binary, the
//! completions and the man page share it). Only definitions: `main.rs` dispatches them.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::walls_args::WallsArgs;
use crate::{account_cmd, background, docs, packs_cmd, policy_cmd, services};

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

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct StateArgs {
    /// State directory (default: $XDG_STATE_HOME/glovebox, or ~/.local/state/glovebox).
    #[arg(long, value_name = "DIR")]
    pub(crate) state_dir: Option<PathBuf>,
}

/// Which account `glovebox enable|disable` switches.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct SwitchArgs {
    #[command(flatten)]
    pub(crate) state: StateArgs,
    /// The account (default: the only one; required with --system).
    #[arg(long)]
    pub(crate) account: Option<String>,
    /// The system service's account (`glovebox up --system`; run as root).
    #[arg(long)]
    pub(crate) system: bool,
    /// With --system: where its sockets are (default: /run/glovebox).
    #[arg(long, value_name = "DIR", requires = "system")]
    pub(crate) runtime_dir: Option<PathBuf>,
}

/// System mode's layout, as `up --system` hands it to the gate and the broker.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct LayoutArgs {
    /// System mode: the runtime directory with the sockets (`/run/glovebox`).
    #[arg(long, value_name = "DIR", requires = "config")]
    pub(crate) runtime_dir: Option<PathBuf>,
    /// System mode: `glovebox.yaml` (`/etc/glovebox/glovebox.yaml`).
    #[arg(long, value_name = "FILE", requires = "runtime_dir")]
    pub(crate) config: Option<PathBuf>,
}

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ClientArgs {
    #[command(flatten)]
    pub(crate) state: StateArgs,
    /// Account to act as (default: the only account, or the one named after this user).
    #[arg(long)]
    pub(crate) account: Option<String>,
    /// Broker WebSocket URL (default: the one the running `glovebox up` wrote to the state dir).
    #[arg(long)]
    pub(crate) url: Option<String>,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Start the gate, one executor per account and the broker, and supervise them.
    Up {
        #[command(flatten)]
        state: StateArgs,
        /// Workdir of the account created for you on first start (default: the current
        /// directory); on later starts it must be that account's workdir.
        #[arg(long, value_name = "DIR")]
        workdir: Option<PathBuf>,
        /// Broker address (loopback only; port 0 picks a free port).
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        /// Seconds an approver has to answer an ask, 1 to 3600 (default: `limits.ask_timeout_secs`
        /// of glovebox.yaml, else 25).
        #[arg(long, value_name = "SECS")]
        ask_timeout_secs: Option<u64>,
        /// System mode (as root, what the system unit runs): the gate, the broker and each
        /// account's executor under their own OS users; config, managed policy, state and
        /// sockets in /etc/glovebox, /var/lib/glovebox and /run/glovebox.
        #[arg(long)]
        system: bool,
        /// System mode: the configuration file (default: /etc/glovebox/glovebox.yaml).
        #[arg(long, value_name = "FILE", requires = "system")]
        config: Option<PathBuf>,
        /// System mode: the runtime directory for sockets (default: /run/glovebox).
        #[arg(long, value_name = "DIR", requires = "system")]
        runtime_dir: Option<PathBuf>,
        /// System mode: the managed policy directory (default: /etc/glovebox/policy.d).
        #[arg(long, value_name = "DIR", requires = "system")]
        policy_dir: Option<PathBuf>,
        /// Run in the background: return once glovebox is up, its output appended to
        /// <state>/glovebox.log (`glovebox logs`); `glovebox stop` stops it.
        #[arg(long, conflicts_with = "system")]
        detach: bool,
        /// Set by `--detach` on the `up` it starts: leave the terminal's session first.
        #[arg(long, hide = true)]
        in_background: bool,
    },
    /// Stop the running glovebox and start it again: through systemd when a unit runs it,
    /// else in the background (`up --detach`) on the same state directory.
    Restart {
        #[command(flatten)]
        state: StateArgs,
        /// The system unit (`systemctl restart glovebox`).
        #[arg(long, conflicts_with = "state_dir")]
        system: bool,
    },
    /// Print glovebox's log: the unit's journal when systemd runs it, else the log of
    /// `up --detach` (<state>/glovebox.log).
    Logs {
        #[command(flatten)]
        state: StateArgs,
        /// The system unit's journal.
        #[arg(long, conflicts_with = "state_dir")]
        system: bool,
        /// Keep printing what is added, until Ctrl-C.
        #[arg(short, long)]
        follow: bool,
        /// How many lines from the end to print first.
        #[arg(short = 'n', long, value_name = "N", default_value_t = background::DEFAULT_LINES)]
        lines: usize,
    },
    /// Say whether glovebox runs: its processes, URLs, accounts, sandboxes and health.
    Status {
        #[command(flatten)]
        state: StateArgs,
        /// System mode: the system service, as you (an account's owner) see it, over its approve
        /// socket.
        #[arg(long, conflicts_with = "state_dir")]
        system: bool,
        /// System mode: the runtime directory (default: /run/glovebox).
        #[arg(long, value_name = "DIR", requires = "system")]
        runtime_dir: Option<PathBuf>,
        /// One JSON object: running, pid, services, URLs, accounts, healthy, problems,
        /// policy_errors, health.
        #[arg(long)]
        json: bool,
    },
    /// Stop the running `glovebox up` (as Ctrl-C in its terminal would) and wait until it has.
    Stop {
        #[command(flatten)]
        state: StateArgs,
    },
    /// List the tools the account's agents are offered: names and what each does.
    Tools {
        #[command(flatten)]
        client: ClientArgs,
        /// Every tool with its input schema, as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Invoke one tool as the account's agent and print the result.
    Call {
        #[command(flatten)]
        client: ClientArgs,
        /// Tool name, e.g. file_read.
        tool: String,
        /// Parameters as a JSON object.
        #[arg(default_value = "{}")]
        params: String,
    },
    /// Serve the account's tools as an MCP server on stdin/stdout, forwarding to the running broker.
    Mcp {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Answer the account's asks in this terminal: y (once), a (always), n (deny), ? (details).
    ///
    /// One key each, no Enter (a line each when stdin is not a terminal). Ctrl-C denies the ask on
    /// screen and exits 130; a closed stdin is an error (exit 2).
    Approve {
        #[command(flatten)]
        client: ClientArgs,
        /// System mode: connect to the system service's approve socket as yourself, the owner of
        /// the account (no token: the kernel tells glovebox who you are).
        #[arg(long)]
        system: bool,
        /// System mode: the runtime directory (default: /run/glovebox).
        #[arg(long, value_name = "DIR", requires = "system")]
        runtime_dir: Option<PathBuf>,
    },
    /// Print a one-time login link to the web console (approvals, activity, rules, switches).
    Console {
        #[command(flatten)]
        client: ClientArgs,
        /// Also open the link in the desktop's browser ($BROWSER, or xdg-open).
        #[arg(long)]
        open: bool,
        /// System mode: the link is for you, the account's owner, over the system service's
        /// approve socket (no token: the kernel tells glovebox who you are).
        #[arg(long)]
        system: bool,
        /// System mode: the runtime directory (default: /run/glovebox).
        #[arg(long, value_name = "DIR", requires = "system")]
        runtime_dir: Option<PathBuf>,
    },
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
    Policy {
        /// State directory (default: $XDG_STATE_HOME/glovebox, or ~/.local/state/glovebox).
        #[arg(long, value_name = "DIR", global = true)]
        state_dir: Option<PathBuf>,
        /// Account whose policy to manage (default: the only account).
        #[arg(long, global = true)]
        account: Option<String>,
        #[command(subcommand)]
        command: policy_cmd::PolicyCommand,
    },
    /// An account's MCP tool packs (talks to its running pack host).
    Packs {
        /// State directory (default: $XDG_STATE_HOME/glovebox, or ~/.local/state/glovebox).
        #[arg(long, value_name = "DIR", global = true)]
        state_dir: Option<PathBuf>,
        /// Account whose packs to show (default: the only account, or with --system the one you
        /// own).
        #[arg(long, global = true)]
        account: Option<String>,
        /// System mode: list, add and remove the packs of an account you own, over the system
        /// service's approve socket as yourself (no token: the kernel tells glovebox who you are).
        #[arg(long, global = true)]
        system: bool,
        /// System mode: the runtime directory (default: /run/glovebox).
        #[arg(long, value_name = "DIR", global = true, requires = "system")]
        runtime_dir: Option<PathBuf>,
        #[command(subcommand)]
        command: packs_cmd::PacksCommand,
    },
    /// Accounts while glovebox runs (add, list, show, remove), without a restart.
    Account {
        /// State directory (default: $XDG_STATE_HOME/glovebox, or ~/.local/state/glovebox;
        /// /var/lib/glovebox with --system).
        #[arg(long, value_name = "DIR", global = true)]
        state_dir: Option<PathBuf>,
        /// The system service's accounts (as root, on its admin socket).
        #[arg(long, global = true)]
        system: bool,
        /// With --system: where its sockets are (default: /run/glovebox).
        #[arg(long, value_name = "DIR", global = true, requires = "system")]
        runtime_dir: Option<PathBuf>,
        #[command(subcommand)]
        command: account_cmd::AccountCommand,
    },
    /// Secrets of an account's packs (`${secret:NAME}` in mcp.json), stored encrypted by the gate.
    Secret {
        /// State directory (default: $XDG_STATE_HOME/glovebox, or ~/.local/state/glovebox).
        #[arg(long, value_name = "DIR", global = true)]
        state_dir: Option<PathBuf>,
        /// System mode: manage the secrets of an account you own, over the system service's
        /// approve socket as yourself (no token: the kernel tells glovebox who you are).
        #[arg(long, global = true)]
        system: bool,
        /// System mode: the runtime directory (default: /run/glovebox).
        #[arg(long, value_name = "DIR", global = true, requires = "system")]
        runtime_dir: Option<PathBuf>,
        #[command(subcommand)]
        command: packs_cmd::SecretCommand,
    },
    /// Check this machine for glovebox: kernel features, identities, file and socket modes,
    /// managed policy, running services; each OK, or WARN/FAIL with the fix. Exits 1 on a FAIL.
    Doctor {
        /// Check the system service (`glovebox up --system`): its users, /etc/glovebox,
        /// /var/lib/glovebox and /run/glovebox.
        #[arg(long)]
        system: bool,
        /// State directory (default: /var/lib/glovebox with --system, else as for `up`).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// glovebox.yaml (default: /etc/glovebox/glovebox.yaml with --system, else the state
        /// dir's).
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Where the sockets are (default: /run/glovebox with --system, else the state dir's run/).
        #[arg(long, value_name = "DIR")]
        runtime_dir: Option<PathBuf>,
        /// Managed policy directory (default: /etc/glovebox/policy.d with --system, else the
        /// state dir's managed/).
        #[arg(long, value_name = "DIR")]
        policy_dir: Option<PathBuf>,
        /// One JSON object per check (level, check, finding, fix), one per line.
        #[arg(long)]
        json: bool,
    },
    /// Credentials of an account.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Audit store commands.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
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
    Gate {
        #[command(flatten)]
        state: StateArgs,
        #[command(flatten)]
        layout: LayoutArgs,
        /// The managed policy directory (default: `managed` in the state dir).
        #[arg(long, value_name = "DIR")]
        policy_dir: Option<PathBuf>,
        /// A user whose executor may append audit events (repeatable).
        #[arg(long = "audit-peer-uid", value_name = "UID")]
        audit_peer_uids: Vec<u32>,
        /// Stop when standard input closes (the supervisor's lifeline).
        #[arg(long)]
        exit_on_stdin_eof: bool,
    },
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
    JobShim {
        /// A root of the account (repeatable).
        #[arg(long = "root", value_name = "DIR")]
        roots: Vec<PathBuf>,
        /// The job's own temporary directory.
        #[arg(long, value_name = "DIR")]
        tmp: PathBuf,
        #[command(flatten)]
        walls: WallsArgs,
        /// Where to report a cap the job reached.
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
        /// An interactive job's input: a FIFO the executor holds open for writing.
        #[arg(long, value_name = "FIFO")]
        stdin_fifo: Option<PathBuf>,
        /// The command line, run by /bin/sh -c.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Run the broker (started by `up`).
    #[command(hide = true)]
    Broker {
        #[command(flatten)]
        state: StateArgs,
        #[command(flatten)]
        layout: LayoutArgs,
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        /// Overrides glovebox.yaml's `limits.ask_timeout_secs`.
        #[arg(long)]
        ask_timeout_secs: Option<u64>,
        #[arg(long)]
        exit_on_stdin_eof: bool,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum TokenCommand {
    /// Replace an account's agent or approver token with a new one (takes effect at once: the
    /// old token is refused and connections that used it are closed).
    Rotate {
        #[command(flatten)]
        state: StateArgs,
        /// The account (default: the only one; with --system it must be named).
        #[arg(long)]
        account: Option<String>,
        /// Which credential: `agent` (tools, MCP, client-tool providers) or `approver` (asks).
        #[arg(long, value_enum)]
        role: RoleArg,
        /// The system service's account (`glovebox up --system`; run as root): an account
        /// added with `glovebox account add`.
        #[arg(long)]
        system: bool,
        /// With --system: where its sockets are (default: /run/glovebox).
        #[arg(long, value_name = "DIR", requires = "system")]
        runtime_dir: Option<PathBuf>,
    },
    /// Print an account's agent token (for its agent's configuration). User mode: read from the
    /// state. With --system, run as the account's owner: the broker's approve socket knows you
    /// by your uid and hands you only the tokens of accounts you own.
    Show {
        #[command(flatten)]
        state: StateArgs,
        /// Default: the only account you own (system mode), or the one named after you.
        #[arg(long)]
        account: Option<String>,
        /// Ask the system service (`glovebox up --system`) as yourself.
        #[arg(long)]
        system: bool,
        /// With --system: where its sockets are (default: /run/glovebox).
        #[arg(long, value_name = "DIR", requires = "system")]
        runtime_dir: Option<PathBuf>,
    },
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoleArg {
    Agent,
    Approver,
}

#[derive(Subcommand, Debug)]
pub(crate) enum AuditCommand {
    /// Recompute the hash chain of every audit row and report the first broken one (with
    /// --postgres: of one machine's rows in the fleet database).
    Verify {
        #[command(flatten)]
        state: StateArgs,
        /// Verify a machine's rows in this fleet PostgreSQL database instead of the local file.
        #[arg(long, value_name = "URL")]
        postgres: Option<String>,
        /// The machine (default: this one).
        #[arg(long, value_name = "ID", requires = "postgres")]
        machine: Option<String>,
        /// That machine's audit key, to check its rows' MACs too (default: <state>/audit.key if
        /// readable).
        #[arg(long, value_name = "FILE", requires = "postgres")]
        audit_key: Option<PathBuf>,
        /// Check the signed checkpoints with this public key only (hex, or a file holding it:
        /// the machine's `audit.pub`), no audit key needed. With --postgres, it pins the key
        /// instead of trusting the one registered in the database.
        #[arg(long, value_name = "HEX|FILE")]
        public_key: Option<String>,
    },
    /// Copy the audit rows not yet shipped to a fleet PostgreSQL database (idempotent, resumable).
    Ship {
        #[command(flatten)]
        state: StateArgs,
        /// postgres://user@host/database (put the password in ~/.pgpass or PGPASSWORD, not here).
        #[arg(long, value_name = "URL")]
        postgres: String,
        /// This machine's fleet id (default: /etc/machine-id, else one kept in the state dir).
        #[arg(long, value_name = "ID")]
        machine: Option<String>,
        /// Rows per transaction.
        #[arg(long, value_name = "N", default_value_t = glovebox_config::audit_ship::DEFAULT_BATCH)]
        batch: u32,
    },
    /// Run one read-only SQL statement on the local audit (tables `events`, views `tool_calls`,
    /// `denials`, `approvals`, `commands`, `pack_calls`) and print the rows.
    Query {
        #[command(flatten)]
        state: StateArgs,
        /// One SELECT (or WITH, VALUES, EXPLAIN) statement.
        sql: String,
        /// Print {"columns", "rows", "truncated"} as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the last audit rows, then each new one as it is written, until Ctrl-C.
    Tail {
        #[command(flatten)]
        state: StateArgs,
        /// One JSON object per row instead of a line of text.
        #[arg(long)]
        json: bool,
        /// How many of the existing rows to show first.
        #[arg(long, short = 'n', default_value_t = 10)]
        lines: u32,
    },
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
