//! The `glovebox` command: `up` runs everything under a supervisor, `status` and `stop` report on
//! and end it; `call`, `approve` and `tools` speak the WebSocket API from a terminal; `console`
//! prints a login link to the web console; `audit verify` checks the audit chain, `audit query`
//! and `audit tail` read it; `packs` and
//! `secret` manage MCP tool packs; `gate`, `executor`, `pack-host` and `broker` (hidden from
//! `--help`) are the service entry points that `up` starts
//! as separate processes.
//!
//! The environment is read here, once, and passed down as plain values.

mod out;

mod account_cmd;
mod allocator;
mod audit_cmd;
mod background;
mod client;
mod console_cmd;
mod docs;
mod doctor;
mod identity;
mod init;
mod mcp_bridge;
mod packs_cmd;
mod policy_cmd;
mod scratch;
mod services;
mod status;
mod supervisor;
mod system;
mod walls_args;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use glovebox_proto::ws::Role;
use walls_args::WallsArgs;

#[derive(Parser, Debug)]
#[command(
    name = "glovebox",
    version,
    about = "Give AI agents hands on this machine, through a permission gate and an audit log"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Debug, Clone)]
struct StateArgs {
    /// State directory (default: $XDG_STATE_HOME/glovebox, or ~/.local/state/glovebox).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

/// Which account `glovebox enable|disable` switches.
#[derive(clap::Args, Debug, Clone)]
struct SwitchArgs {
    #[command(flatten)]
    state: StateArgs,
    /// The account (default: the only one; required with --system).
    #[arg(long)]
    account: Option<String>,
    /// The system service's account (`glovebox up --system`; run as root).
    #[arg(long)]
    system: bool,
    /// With --system: where its sockets are (default: /run/glovebox).
    #[arg(long, value_name = "DIR", requires = "system")]
    runtime_dir: Option<PathBuf>,
}

/// System mode's layout, as `up --system` hands it to the gate and the broker.
#[derive(clap::Args, Debug, Clone)]
struct LayoutArgs {
    /// System mode: the runtime directory with the sockets (`/run/glovebox`).
    #[arg(long, value_name = "DIR", requires = "config")]
    runtime_dir: Option<PathBuf>,
    /// System mode: `glovebox.yaml` (`/etc/glovebox/glovebox.yaml`).
    #[arg(long, value_name = "FILE", requires = "runtime_dir")]
    config: Option<PathBuf>,
}

#[derive(clap::Args, Debug, Clone)]
struct ClientArgs {
    #[command(flatten)]
    state: StateArgs,
    /// Account to act as (default: the only account, or the one named after this user).
    #[arg(long)]
    account: Option<String>,
    /// Broker WebSocket URL (default: the one the running `glovebox up` wrote to the state dir).
    #[arg(long)]
    url: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
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
        /// One JSON object: running, pid, services, URLs, accounts, healthy, problems, health.
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
enum TokenCommand {
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
enum RoleArg {
    Agent,
    Approver,
}

#[derive(Subcommand, Debug)]
enum AuditCommand {
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

/// What `main` read from the environment.
#[derive(Debug, Clone)]
pub struct Env {
    pub default_state_dir: PathBuf,
    pub cwd: PathBuf,
    pub shell: String,
    pub timezone: String,
    pub log_filter: String,
    /// The environment exec jobs get: an allowlist of this process's variables.
    pub job_env: Vec<(String, String)>,
    /// This process's whole environment, for an account's own job allowlist (`job_env`).
    pub environment: Vec<(String, String)>,
    /// The user's trash (freedesktop layout): `$XDG_DATA_HOME/Trash`, by default
    /// `$HOME/.local/share/Trash`.
    pub trash_dir: PathBuf,
    /// `$HOME`, if set.
    pub home: Option<PathBuf>,
    /// The standard OpenTelemetry variables that were set (see `glovebox_config::telemetry`).
    pub otel_env: Vec<(String, String)>,
}

/// Variables passed from the service's environment to exec jobs; nothing else is.
const JOB_ENV_ALLOWLIST: &[&str] = &[
    "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "USER", "LOGNAME", "TZ",
];

impl Env {
    fn read() -> Env {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/"));
        let state_home = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| home.join(".local/state"));
        let data_home = std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| home.join(".local/share"));
        let timezone = std::env::var("TZ")
            .ok()
            .filter(|t| !t.is_empty())
            .or_else(|| {
                std::fs::read_to_string("/etc/timezone")
                    .ok()
                    .map(|t| t.trim().to_owned())
            })
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| "UTC".to_owned());
        Env {
            default_state_dir: state_home.join("glovebox"),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            shell: "/bin/sh".to_owned(),
            timezone,
            // rmcp reports every MCP session at info: glovebox's own lines are what matter.
            log_filter: std::env::var("GLOVEBOX_LOG")
                .unwrap_or_else(|_| "info,rmcp=warn".to_owned()),
            job_env: job_env(JOB_ENV_ALLOWLIST),
            environment: std::env::vars().collect(),
            trash_dir: data_home.join("Trash"),
            home: std::env::var_os("HOME").map(PathBuf::from),
            otel_env: glovebox_config::telemetry::ENV_NAMES
                .iter()
                .filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v)))
                .collect(),
        }
    }

    /// The telemetry settings: the file's section `raw` under the `OTEL_*` variables.
    fn telemetry(
        &self,
        raw: &glovebox_config::telemetry::RawTelemetry,
    ) -> Result<glovebox_config::telemetry::Telemetry, String> {
        glovebox_config::telemetry::Telemetry::validate(raw, |k| {
            self.otel_env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        })
    }

    fn state_dir(&self, args: &StateArgs) -> PathBuf {
        self.absolute(
            args.state_dir
                .clone()
                .unwrap_or_else(|| self.default_state_dir.clone()),
        )
    }

    /// The layout of a service's state: user mode's, or system mode's when `layout` names it.
    fn layout(&self, state: &StateArgs, layout: LayoutArgs) -> glovebox_config::StateDir {
        let root = self.state_dir(state);
        match (layout.runtime_dir, layout.config) {
            (Some(runtime), Some(config)) => glovebox_config::StateDir::system(
                root,
                self.absolute(runtime),
                self.absolute(config),
            ),
            _ => glovebox_config::StateDir::new(root),
        }
    }

    /// `path`, relative to the current directory when it is not absolute.
    fn absolute(&self, path: PathBuf) -> PathBuf {
        if path.is_absolute() {
            path
        } else {
            self.cwd.join(path)
        }
    }

    /// `glovebox enable|disable`.
    async fn switch(&self, args: SwitchArgs, enabled: bool) -> anyhow::Result<ExitCode> {
        let state = self.state_for(args.state, args.system, args.runtime_dir);
        services::set_enabled(&state, args.account, enabled).await
    }

    /// The state a command changes: the user's, or with `system` the system service's.
    fn state_for(
        &self,
        state: StateArgs,
        system: bool,
        runtime_dir: Option<PathBuf>,
    ) -> glovebox_config::StateDir {
        if system {
            self.system_state(state.state_dir, runtime_dir)
        } else {
            glovebox_config::StateDir::new(self.state_dir(&state))
        }
    }

    /// System mode's state as root reaches it (`--state-dir`, or /var/lib/glovebox; sockets in
    /// `--runtime-dir`, or /run/glovebox), for commands that change the system service.
    fn system_state(
        &self,
        state_dir: Option<PathBuf>,
        runtime_dir: Option<PathBuf>,
    ) -> glovebox_config::StateDir {
        use glovebox_config::system as d;
        glovebox_config::StateDir::system(
            self.absolute(state_dir.unwrap_or_else(|| PathBuf::from(d::STATE_DIR))),
            self.absolute(runtime_dir.unwrap_or_else(|| PathBuf::from(d::RUNTIME_DIR))),
            d::CONFIG_FILE,
        )
    }

    /// System mode's runtime layout (`--runtime-dir`, or /run/glovebox), for commands a user runs
    /// against the system service: only its sockets and `broker.url` matter, the state is the
    /// service's.
    fn system_runtime(&self, runtime_dir: Option<PathBuf>) -> glovebox_config::StateDir {
        let runtime = self.absolute(
            runtime_dir.unwrap_or_else(|| PathBuf::from(glovebox_config::system::RUNTIME_DIR)),
        );
        glovebox_config::StateDir::system("/", &runtime, "/")
    }

    /// Where a client command connects, and with the credential of `role`.
    fn target(&self, client: ClientArgs, role: Role) -> anyhow::Result<client::Target> {
        client::target(
            &self.state_dir(&client.state),
            client.account,
            client.url,
            role,
        )
    }
}

fn job_env(names: &[&str]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = names
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v)))
        .collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned()));
    }
    env
}

/// Every glovebox process allocates with mimalloc (see `allocator`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long the runtime's blocking threads get to finish once the command is done.
const RUNTIME_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(2);

fn main() -> ExitCode {
    allocator::configure();
    let cli = Cli::parse();
    // A job's shim is a process of its own that must not log to the job's output or start a
    // runtime: it confines itself and runs the job.
    if let Command::JobShim {
        roots,
        tmp,
        walls,
        report,
        stdin_fifo,
        command,
    } = cli.command
    {
        let code = glovebox_executor::jobs::shim::run(glovebox_executor::jobs::shim::ShimConfig {
            roots,
            tmp,
            command: command.join(" "),
            walls: walls.into_walls(),
            report,
            stdin_fifo,
        });
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    // Which walls a shim can raise here (see `glovebox_sandbox::walls::probe`).
    if let Command::WallsProbe = cli.command {
        return ExitCode::from(
            u8::try_from(glovebox_sandbox::walls::probe_in_child()).unwrap_or(1),
        );
    }
    // A pack server's shim, likewise: its stdout is the server's MCP channel.
    if let Command::PackShim(args) = cli.command {
        let code = packs_cmd::pack_shim(args);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let env = Env::read();
    // glovebox's own processes cannot be read through /proc (environ, fd, maps, mem) or traced by
    // anything without CAP_SYS_PTRACE, such as a job running as the same user.
    if matches!(
        cli.command,
        Command::Up { .. }
            | Command::Gate { .. }
            | Command::Broker { .. }
            | Command::Executor(_)
            | Command::PackHost(_)
    ) && let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        eprintln!("glovebox: could not make this process non-dumpable: {e}");
        return ExitCode::from(2);
    }
    let telemetry_slot = glovebox_telemetry::install::init(
        &env.log_filter,
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
    );
    // A service exports traces when its environment says so (`up` sets the variables from
    // glovebox.yaml for each service it starts).
    let service_name = match &cli.command {
        Command::Gate { .. } => Some("glovebox-gate"),
        Command::Broker { .. } => Some("glovebox-broker"),
        Command::Executor(_) => Some("glovebox-executor"),
        Command::PackHost(_) => Some("glovebox-pack-host"),
        _ => None,
    };
    let telemetry = match service_name {
        Some(_) => match env.telemetry(&Default::default()) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("glovebox: {e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    // The services read their handover (keys) from stdin before anything else; the rest of stdin
    // is the supervisor's lifeline.
    let handover = match &cli.command {
        Command::Gate { .. }
        | Command::Broker { .. }
        | Command::Executor(_)
        | Command::PackHost(_) => {
            // Unbuffered (std's stdin buffers): what follows the line stays in the pipe for
            // the service (the broker reads the supervisor's accounts updates from it).
            let raw = {
                use std::os::fd::AsFd;
                std::io::stdin()
                    .as_fd()
                    .try_clone_to_owned()
                    .map(std::fs::File::from)
            };
            let read = raw
                .map_err(glovebox_proto::transport::handover::HandoverError::from)
                .and_then(glovebox_proto::transport::handover::Handover::read_from);
            match read {
                Ok(h) => h,
                Err(e) => {
                    eprintln!("glovebox: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        _ => Default::default(),
    };
    // A service started in system mode checks, before anything else, that it is exactly the
    // identity the supervisor switched it to (no group, capability or way back left over).
    if let Some(expect) = &handover.expect
        && let Err(e) = identity::verify_switched(expect)
    {
        eprintln!("glovebox: {}", out::error_chain(&e));
        return ExitCode::from(2);
    }
    // The executor confines itself before any thread exists, so every thread and job inherits it.
    let prepared = match &cli.command {
        Command::Executor(args) => match services::prepare_executor(&env, args, &handover) {
            Ok(prepared) => Some(prepared),
            Err(e) => {
                eprintln!("glovebox: {}", out::error_chain(&e));
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    let runtime = match runtime_for(&cli.command) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("glovebox: start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    // Started inside the runtime (the exporter's channel lives on it), stopped before it ends.
    let telemetry_guard = match (service_name, &telemetry) {
        (Some(name), Some(settings)) => {
            let _runtime = runtime.enter();
            if let Err(e) = glovebox_telemetry::metrics::init(Some(settings), name) {
                eprintln!("glovebox: telemetry: {e}");
                return ExitCode::from(2);
            }
            match telemetry_slot.start(settings, name) {
                Ok(guard) => guard,
                Err(e) => {
                    eprintln!("glovebox: telemetry: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        _ => None,
    };
    let result = match prepared {
        Some(prepared) => runtime.block_on(services::executor(prepared)),
        None => runtime.block_on(dispatch(cli.command, env, handover)),
    };
    drop(telemetry_guard);
    if service_name.is_some() {
        glovebox_telemetry::metrics::shutdown();
    }
    // A read of stdin (the supervisor's updates, a service's lifeline) runs on a blocking thread
    // that nothing can interrupt: a service stopped by a signal while its stdin stays open would
    // wait for it forever.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("glovebox: {}", out::error_chain(&e));
            ExitCode::from(2)
        }
    }
}

/// The control keys of a state directory (for the supervisor and administrators' commands).
pub fn control_keys(
    state: &glovebox_config::StateDir,
) -> anyhow::Result<glovebox_proto::transport::handover::ControlKeys> {
    use anyhow::Context;
    let path = state.control_key();
    let bytes = std::fs::read(&path).with_context(|| {
        format!(
            "read {} (is glovebox set up in this state dir, and may you administer it?)",
            path.display()
        )
    })?;
    glovebox_proto::transport::handover::ControlKeys::from_bytes(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

async fn dispatch(
    command: Command,
    env: Env,
    handover: glovebox_proto::transport::handover::Handover,
) -> anyhow::Result<ExitCode> {
    match command {
        Command::Up {
            state,
            workdir,
            listen,
            ask_timeout_secs,
            system,
            config,
            runtime_dir,
            policy_dir,
            detach,
            in_background,
        } => {
            if in_background {
                background::leave_the_terminal()?;
            }
            if detach {
                let state = glovebox_config::StateDir::new(env.state_dir(&state));
                let mut args = vec!["--state-dir".to_owned(), state.root().display().to_string()];
                if let Some(w) = workdir {
                    args.extend([
                        "--workdir".to_owned(),
                        env.absolute(w).display().to_string(),
                    ]);
                }
                if let Some(l) = listen {
                    args.extend(["--listen".to_owned(), l.to_string()]);
                }
                if let Some(s) = ask_timeout_secs {
                    args.extend(["--ask-timeout-secs".to_owned(), s.to_string()]);
                }
                return background::detach(&state, &args);
            }
            let workdir_option = workdir.map(|w| env.absolute(w));
            let system = system.then(|| {
                use glovebox_config::system as d;
                let or = |p: Option<PathBuf>, default: &str| {
                    env.absolute(p.unwrap_or_else(|| PathBuf::from(default)))
                };
                supervisor::SystemPaths {
                    config: or(config, d::CONFIG_FILE),
                    runtime_dir: or(runtime_dir, d::RUNTIME_DIR),
                    policy_dir: or(policy_dir, d::POLICY_DIR),
                }
            });
            let state_dir = match (&system, &state.state_dir) {
                (Some(_), None) => PathBuf::from(glovebox_config::system::STATE_DIR),
                _ => env.state_dir(&state),
            };
            let options = supervisor::UpOptions {
                state_dir,
                system,
                workdir: workdir_option.clone().unwrap_or_else(|| env.cwd.clone()),
                workdir_option,
                listen,
                ask_timeout_secs,
                trash_dir: env.trash_dir.clone(),
                home: env.home.clone(),
                otel_env: env.otel_env.clone(),
            };
            supervisor::up(options).await
        }
        Command::Call {
            client,
            tool,
            params,
        } => client::call(&env.target(client, Role::Agent)?, &tool, &params).await,
        Command::Status {
            system: true,
            runtime_dir,
            json,
            ..
        } => status::status_system(&env.system_runtime(runtime_dir), json).await,
        Command::Status { state, json, .. } => status::status(&env.state_dir(&state), json).await,
        Command::Stop { state } => status::stop(&env.state_dir(&state)).await,
        Command::Restart { state, system } => {
            let dir = match system {
                true => PathBuf::from(glovebox_config::system::STATE_DIR),
                false => env.state_dir(&state),
            };
            background::restart(&glovebox_config::StateDir::new(dir), system).await
        }
        Command::Logs {
            state,
            system,
            follow,
            lines,
        } => {
            let dir = match system {
                true => PathBuf::from(glovebox_config::system::STATE_DIR),
                false => env.state_dir(&state),
            };
            background::logs(&glovebox_config::StateDir::new(dir), system, follow, lines).await
        }
        Command::Tools { client, json } => {
            status::tools(env.target(client, Role::Agent), json).await
        }
        Command::Enable { switch } => env.switch(switch, true).await,
        Command::Disable { switch } => env.switch(switch, false).await,
        Command::Mcp { client } => {
            mcp_bridge::serve(move || env.target(client.clone(), Role::Agent)).await
        }
        Command::Approve {
            client,
            system: true,
            runtime_dir,
        } => {
            let layout = env.system_runtime(runtime_dir);
            client::approve_system(&layout.approve_socket(), client.account.as_deref()).await
        }
        Command::Approve { client, .. } => {
            client::approve(&env.target(client, Role::Approver)?).await
        }
        Command::Console {
            client,
            open,
            system: true,
            runtime_dir,
        } => {
            let layout = env.system_runtime(runtime_dir);
            let browser = env.environment.iter().find(|(k, _)| k == "BROWSER");
            console_cmd::console_system(
                &layout,
                client.account.as_deref(),
                open,
                browser.map(|(_, v)| v.as_str()),
            )
            .await
        }
        Command::Console { client, open, .. } => {
            let target = env.target(client, Role::Approver)?;
            let browser = env.environment.iter().find(|(k, _)| k == "BROWSER");
            console_cmd::console(&target, open, browser.map(|(_, v)| v.as_str())).await
        }
        Command::Account {
            state_dir,
            system,
            runtime_dir,
            command,
        } => {
            let state = if system {
                env.system_state(state_dir, runtime_dir)
            } else {
                glovebox_config::StateDir::new(env.state_dir(&StateArgs { state_dir }))
            };
            account_cmd::run(&state, command).await
        }
        Command::Policy {
            state_dir,
            account,
            command,
        } => policy_cmd::run(&env.state_dir(&StateArgs { state_dir }), account, command).await,
        Command::Token {
            command:
                TokenCommand::Show {
                    state,
                    account,
                    system,
                    runtime_dir,
                },
        } => {
            if system {
                let layout = env.system_runtime(runtime_dir);
                account_cmd::token_show_system(&layout.approve_socket(), account.as_deref()).await
            } else {
                let state = glovebox_config::StateDir::new(env.state_dir(&state));
                account_cmd::token_show(&state, account.as_deref())
            }
        }
        Command::Token {
            command:
                TokenCommand::Rotate {
                    state,
                    account,
                    role,
                    system,
                    runtime_dir,
                },
        } => {
            let state = env.state_for(state, system, runtime_dir);
            let account = match (account, system) {
                (Some(id), _) => id,
                (None, true) => anyhow::bail!(
                    "name the account whose token to rotate: glovebox token rotate --system --account ID"
                ),
                (None, false) => policy_cmd::account(&state, None)?,
            };
            account_cmd::token_rotate(&state, &account, matches!(role, RoleArg::Approver)).await
        }
        Command::Doctor {
            system,
            state_dir,
            config,
            runtime_dir,
            policy_dir,
            json,
        } => {
            use glovebox_config::system;
            let state_dir = match state_dir {
                Some(dir) => env.absolute(dir),
                None if system => PathBuf::from(system::STATE_DIR),
                None => env.default_state_dir.clone(),
            };
            let state = glovebox_config::StateDir::new(&state_dir);
            let pick =
                |given: Option<PathBuf>, system_default: &str, user_default: PathBuf| match given {
                    Some(p) => env.absolute(p),
                    None if system => PathBuf::from(system_default),
                    None => user_default,
                };
            let options = doctor::Options {
                system,
                config: pick(config, system::CONFIG_FILE, state.config_file()),
                runtime_dir: pick(runtime_dir, system::RUNTIME_DIR, state.run_dir()),
                policy_dir: pick(policy_dir, system::POLICY_DIR, state_dir.join("managed")),
                state_dir,
            };
            doctor::doctor(&options, json).await
        }
        Command::Completions { shell } => docs::completions(Cli::command(), shell),
        Command::Man => docs::man(Cli::command()),
        Command::Audit {
            command:
                AuditCommand::Verify {
                    state,
                    postgres: None,
                    public_key: Some(public_key),
                    ..
                },
        } => audit_cmd::signed::verify_local(&env.state_dir(&state), &public_key).await,
        Command::Audit {
            command:
                AuditCommand::Verify {
                    state,
                    postgres: None,
                    ..
                },
        } => services::audit_verify(&env.state_dir(&state)).await,
        Command::Audit {
            command:
                AuditCommand::Verify {
                    state,
                    postgres: Some(url),
                    machine,
                    audit_key,
                    public_key,
                },
        } => {
            audit_cmd::fleet::verify_postgres(
                &env.state_dir(&state),
                &url,
                machine,
                audit_key.map(|k| env.absolute(k)),
                public_key.as_deref(),
            )
            .await
        }
        Command::Audit {
            command:
                AuditCommand::Ship {
                    state,
                    postgres,
                    machine,
                    batch,
                },
        } => audit_cmd::fleet::ship_once(&env.state_dir(&state), &postgres, machine, batch).await,
        Command::Audit {
            command: AuditCommand::Query { state, sql, json },
        } => audit_cmd::query(&env.state_dir(&state), &sql, json).await,
        Command::Audit {
            command: AuditCommand::Tail { state, json, lines },
        } => audit_cmd::tail(&env.state_dir(&state), json, lines).await,
        Command::Gate {
            state,
            layout,
            policy_dir,
            audit_peer_uids,
            exit_on_stdin_eof,
        } => {
            services::gate(
                env.layout(&state, layout),
                policy_dir.map(|p| env.absolute(p)),
                audit_peer_uids,
                exit_on_stdin_eof,
                handover,
            )
            .await
        }
        Command::Executor(_)
        | Command::JobShim { .. }
        | Command::PackShim(_)
        | Command::WallsProbe => {
            anyhow::bail!("internal error: this command runs from main")
        }
        Command::PackHost(args) => packs_cmd::pack_host(&env, args, handover).await,
        Command::Packs {
            system: true,
            runtime_dir,
            account,
            command,
            ..
        } => {
            let layout = env.system_runtime(runtime_dir);
            packs_cmd::packs_system(&layout.approve_socket(), account, command).await
        }
        Command::Packs {
            state_dir,
            account,
            command,
            ..
        } => packs_cmd::packs(&env.state_dir(&StateArgs { state_dir }), account, command).await,
        Command::Secret {
            system: true,
            runtime_dir,
            command,
            ..
        } => {
            let layout = env.system_runtime(runtime_dir);
            packs_cmd::secret_system(&layout.approve_socket(), command).await
        }
        Command::Secret {
            state_dir, command, ..
        } => packs_cmd::secret(&env.state_dir(&StateArgs { state_dir }), command).await,
        Command::Broker {
            state,
            layout,
            listen,
            ask_timeout_secs,
            exit_on_stdin_eof,
        } => {
            services::broker(
                &env,
                env.layout(&state, layout),
                listen,
                ask_timeout_secs,
                exit_on_stdin_eof,
                handover,
            )
            .await
        }
    }
}

/// The async runtime a command runs on. The gate, the broker, the executor and the MCP bridge run
/// on one worker: their work is many small messages, each a few microseconds, that two workers
/// kept handing to each other — a thread switch each time (with 8 calls in flight the broker
/// switched 3.5 times a call on two workers, 1.2 on one; the bridge 2.8 and 1.4; the executor
/// spent 12–20 % less CPU per call on one), which cost more than a second core gave. None of them
/// does blocking work on it (the gate moves its own off with `block_in_place`; the audit writer
/// has its own thread; the executor does on it only a whole-file read or one directory's names
/// and types on a local file system, and everything else on blocking threads).
fn runtime_for(command: &Command) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if matches!(
        command,
        Command::Gate { .. } | Command::Broker { .. } | Command::Executor(_) | Command::Mcp { .. }
    ) {
        builder.worker_threads(1);
    }
    builder.enable_all().build()
}

#[cfg(test)]
mod tests {
    use super::*;

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
