//! The `glovebox` command: `up` runs everything under a supervisor; `call` and `approve` speak
//! the WebSocket API from a terminal; `audit verify` checks the audit chain; `gate`, `executor`
//! and `broker` are the service entry points that `up` starts as separate processes.
//!
//! The environment is read here, once, and passed down as plain values.

mod client;
mod init;
mod policy_cmd;
mod services;
mod supervisor;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
        /// Workdir of the default account created on first start (default: the current directory).
        #[arg(long, value_name = "DIR")]
        workdir: Option<PathBuf>,
        /// Broker address (loopback only; port 0 picks a free port).
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        /// Seconds an approver has to answer an ask.
        #[arg(long, default_value_t = 25)]
        ask_timeout_secs: u64,
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
    /// Answer the account's asks in this terminal: y (once), a (always), n (deny).
    Approve {
        #[command(flatten)]
        client: ClientArgs,
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
    /// Audit store commands.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Run the gate (normally started by `up`).
    Gate {
        #[command(flatten)]
        state: StateArgs,
        /// Stop when standard input closes (the supervisor's lifeline).
        #[arg(long)]
        exit_on_stdin_eof: bool,
    },
    /// Run one account's executor (normally started by `up`, which writes its key to stdin).
    Executor {
        #[command(flatten)]
        state: StateArgs,
        #[arg(long)]
        account: String,
    },
    /// Run the broker (normally started by `up`).
    Broker {
        #[command(flatten)]
        state: StateArgs,
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        #[arg(long, default_value_t = 25)]
        ask_timeout_secs: u64,
        #[arg(long)]
        exit_on_stdin_eof: bool,
    },
}

#[derive(Subcommand, Debug)]
enum AuditCommand {
    /// Recompute the hash chain of every audit row and report the first broken one.
    Verify {
        #[command(flatten)]
        state: StateArgs,
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
}

impl Env {
    fn read() -> Env {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/"));
        let state_home = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| home.join(".local/state"));
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
            log_filter: std::env::var("GLOVEBOX_LOG").unwrap_or_else(|_| "info".to_owned()),
        }
    }

    fn state_dir(&self, args: &StateArgs) -> PathBuf {
        let dir = args
            .state_dir
            .clone()
            .unwrap_or_else(|| self.default_state_dir.clone());
        if dir.is_absolute() {
            dir
        } else {
            self.cwd.join(dir)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let env = Env::read();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&env.log_filter))
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("glovebox: start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(dispatch(cli.command, env));
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("glovebox: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn dispatch(command: Command, env: Env) -> anyhow::Result<ExitCode> {
    match command {
        Command::Up {
            state,
            workdir,
            listen,
            ask_timeout_secs,
        } => {
            let options = supervisor::UpOptions {
                state_dir: env.state_dir(&state),
                workdir: workdir
                    .map(|w| if w.is_absolute() { w } else { env.cwd.join(w) })
                    .unwrap_or_else(|| env.cwd.clone()),
                listen,
                ask_timeout_secs,
            };
            supervisor::up(options).await
        }
        Command::Call {
            client,
            tool,
            params,
        } => {
            client::call(
                &client::target(&env.state_dir(&client.state), client.account, client.url)?,
                &tool,
                &params,
            )
            .await
        }
        Command::Approve { client } => {
            client::approve(&client::target(
                &env.state_dir(&client.state),
                client.account,
                client.url,
            )?)
            .await
        }
        Command::Policy {
            state_dir,
            account,
            command,
        } => policy_cmd::run(&env.state_dir(&StateArgs { state_dir }), account, command).await,
        Command::Audit {
            command: AuditCommand::Verify { state },
        } => services::audit_verify(&env.state_dir(&state)).await,
        Command::Gate {
            state,
            exit_on_stdin_eof,
        } => services::gate(&env.state_dir(&state), exit_on_stdin_eof).await,
        Command::Executor { state, account } => {
            services::executor(&env.state_dir(&state), &account).await
        }
        Command::Broker {
            state,
            listen,
            ask_timeout_secs,
            exit_on_stdin_eof,
        } => {
            services::broker(
                &env,
                &env.state_dir(&state),
                listen,
                ask_timeout_secs,
                exit_on_stdin_eof,
            )
            .await
        }
    }
}
