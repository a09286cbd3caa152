//! The `glovebox` binary. This file only starts the process and hands each command to the module
//! that runs it ([`dispatch`]); the command line is defined in `args.rs`, the environment (read
//! once, passed down as plain values) in `env.rs`.
//!
//! - `up` (`up_cmd`) runs everything under a supervisor (`supervisor`); `status`, `stop` and
//!   `tools` (`status`), `restart` and `logs` (`background`) report on it and control it;
//! - `call` and `approve` (`client`), `mcp` (`mcp_bridge`) and `console` (`console_cmd`) speak
//!   the broker's API as an account;
//! - `account` and `token` (`account_cmd`), `policy` (`policy_cmd`), `packs` and `secret`
//!   (`packs_cmd`), `enable` and `disable` (`services`), `audit` (`audit_cmd`) and `doctor`
//!   administer it;
//! - hidden from `--help`: the service entry points `up` starts as separate processes (`gate`,
//!   `broker` and `executor` in `services`, `pack-host` in `packs_cmd`), the shims they start
//!   (`job-shim`, `pack-shim`, `walls-probe`), and `completions` and `man` (`docs`) for packages.
//!
//! A shim runs before anything else is set up ([`run_shim`]); a service reads and checks what the
//! supervisor handed it before its runtime starts ([`Service::start`]); then the command runs on
//! an async runtime ([`run`]).

mod out;

mod account_cmd;
mod admin_socket;
mod allocator;
mod args;
mod audit_cmd;
mod background;
mod banner;
mod client;
mod console_cmd;
mod docs;
mod doctor;
mod env;
mod mcp_bridge;
mod packs_cmd;
mod policy_cmd;
mod services;
mod shared_args;
mod status;
mod up_cmd;
mod which_account;

use std::ops::ControlFlow;
use std::process::ExitCode;

use args::{Cli, Command};
use clap::{CommandFactory, Parser};
pub(crate) use env::Env;
use glovebox_proto::transport::handover::{Handover, HandoverError};
// `crate::control_keys`, as the supervisor and the administrators' commands name it.
pub(crate) use glovebox_supervisor::init::control_keys;

/// How long the runtime's blocking threads get to finish once the command is done.
const RUNTIME_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(2);

/// Parses the command line; runs a shim at once, any other command once the environment is read.
fn main() -> ExitCode {
    allocator::configure();
    let cli = Cli::parse();
    let command = match run_shim(cli.command) {
        ControlFlow::Break(code) => return code,
        ControlFlow::Continue(command) => command,
    };
    let env = Env::read();
    match run(command, env) {
        Ok(code) | Err(code) => code,
    }
}

/// Runs a shim: a process of its own that a service starts to contain one thing, which must not
/// log to that thing's output or start a runtime. The job shim confines itself and runs the job;
/// the pack shim, likewise, one pack server (its stdout is the server's MCP channel); the walls
/// probe tries which walls a shim can raise here (see `glovebox_sandbox::walls::probe`). Exits
/// with the code of what it ran; any other command is handed back.
fn run_shim(command: Command) -> ControlFlow<ExitCode, Command> {
    let code = match command {
        Command::JobShim(args) => services::job_shim(args),
        Command::WallsProbe => glovebox_sandbox::walls::probe_in_child(),
        Command::PackShim(args) => packs_cmd::pack_shim(args),
        command => return ControlFlow::Continue(command),
    };
    ControlFlow::Break(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// Runs `command` on its async runtime ([`runtime_for`]), after what glovebox's own processes do
/// first: `up` and the services make themselves non-dumpable, before anything else; then logging
/// starts; a service reads and checks its handover ([`Service::start`]) and starts its telemetry
/// inside the runtime. The `Err` is exit code 2, its reason said on stderr: a start that failed,
/// or the command's error.
fn run(command: Command, env: Env) -> Result<ExitCode, ExitCode> {
    if matches!(
        command,
        Command::Up(_)
            | Command::Gate(_)
            | Command::Broker(_)
            | Command::Executor(_)
            | Command::PackHost(_)
    ) {
        make_non_dumpable()?;
    }
    let telemetry_slot = glovebox_telemetry::install::init(
        &env.log_filter,
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
    );
    let service = Service::start(&command, &env)?;
    let runtime =
        runtime_for(&command).map_err(|e| fail(format!("start the async runtime: {e}")))?;
    let telemetry_guard = match &service {
        Some(service) => service.start_telemetry(&runtime, &telemetry_slot)?,
        None => None,
    };
    let is_service = service.is_some();
    let result = match service {
        Some(Service {
            executor: Some(executor),
            ..
        }) => runtime.block_on(services::executor(executor)),
        service => {
            let handover = service.map(|s| s.handover).unwrap_or_default();
            runtime.block_on(dispatch(command, env, handover))
        }
    };
    drop(telemetry_guard);
    if is_service {
        glovebox_telemetry::metrics::shutdown();
    }
    // A read of stdin (the supervisor's updates, a service's lifeline) runs on a blocking thread
    // that nothing can interrupt: a service stopped by a signal while its stdin stays open would
    // wait for it forever.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    result.map_err(|e| fail(out::error_chain(&e)))
}

/// Says on stderr why glovebox cannot go on, and returns its exit code, 2.
fn fail(why: impl std::fmt::Display) -> ExitCode {
    eprintln!("glovebox: {why}");
    ExitCode::from(2)
}

/// glovebox's own processes cannot be read through /proc (environ, fd, maps, mem) or traced by
/// anything without CAP_SYS_PTRACE, such as a job running as the same user.
fn make_non_dumpable() -> Result<(), ExitCode> {
    use rustix::process::{DumpableBehavior, set_dumpable_behavior};
    set_dumpable_behavior(DumpableBehavior::NotDumpable)
        .map_err(|e| fail(format!("could not make this process non-dumpable: {e}")))
}

/// A service entry point (the gate, the broker, an executor, a pack host), as it is before its
/// runtime starts.
struct Service {
    /// What it exports telemetry as (`glovebox-gate`, …).
    name: &'static str,
    /// Its telemetry settings, from its environment.
    telemetry: glovebox_config::telemetry::Telemetry,
    /// What the supervisor handed it on stdin (its keys).
    handover: Handover,
    /// The executor, ready and confined already.
    executor: Option<services::PreparedExecutor>,
}

impl Service {
    /// `command`'s service, if it is one, in this order: its telemetry settings, its handover,
    /// the check of its identity, and (an executor) its confinement.
    fn start(command: &Command, env: &Env) -> Result<Option<Service>, ExitCode> {
        let name = match command {
            Command::Gate(_) => "glovebox-gate",
            Command::Broker(_) => "glovebox-broker",
            Command::Executor(_) => "glovebox-executor",
            Command::PackHost(_) => "glovebox-pack-host",
            _ => return Ok(None),
        };
        // A service exports traces when its environment says so (`up` sets the variables from
        // glovebox.yaml for each service it starts).
        let telemetry = env.telemetry(&Default::default()).map_err(fail)?;
        let handover = read_handover().map_err(fail)?;
        // A service started in system mode checks, before anything else, that it is exactly the
        // identity the supervisor switched it to (no group, capability or way back left over).
        if let Some(expect) = &handover.expect {
            glovebox_supervisor::identity::verify_switched(expect)
                .map_err(|e| fail(out::error_chain(&e)))?;
        }
        // The executor confines itself before any thread exists, so every thread and job
        // inherits it.
        let executor = match command {
            Command::Executor(args) => Some(
                services::prepare_executor(env, args, &handover)
                    .map_err(|e| fail(out::error_chain(&e)))?,
            ),
            _ => None,
        };
        Ok(Some(Service {
            name,
            telemetry,
            handover,
            executor,
        }))
    }

    /// Starts its telemetry: inside the runtime (the exporter's channel lives on it). The guard
    /// is to be dropped before the runtime ends.
    fn start_telemetry(
        &self,
        runtime: &tokio::runtime::Runtime,
        slot: &glovebox_telemetry::install::Slot,
    ) -> Result<Option<glovebox_telemetry::install::Guard>, ExitCode> {
        let _runtime = runtime.enter();
        glovebox_telemetry::metrics::init(Some(&self.telemetry), self.name)
            .map_err(|e| fail(format!("telemetry: {e}")))?;
        slot.start(&self.telemetry, self.name)
            .map_err(|e| fail(format!("telemetry: {e}")))
    }
}

/// A service's handover, read from stdin before anything else: the rest of stdin is the
/// supervisor's lifeline. Unbuffered (std's stdin buffers): what follows the line stays in the
/// pipe for the service (the broker reads the supervisor's accounts updates from it).
fn read_handover() -> Result<Handover, HandoverError> {
    use std::os::fd::AsFd;
    let raw = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from);
    raw.map_err(HandoverError::from)
        .and_then(Handover::read_from)
}

/// Hands `command` to the module that runs it (a service gets its `handover`).
async fn dispatch(command: Command, env: Env, handover: Handover) -> anyhow::Result<ExitCode> {
    match command {
        Command::Up(args) => up_cmd::run(&env, args).await,
        Command::Restart(args) => background::restart(&env, args).await,
        Command::Logs(args) => background::logs(&env, args).await,
        Command::Status(args) => status::status(&env, args).await,
        Command::Stop { state } => status::stop(&env.state_dir(&state)).await,
        Command::Tools(args) => status::tools(&env, args).await,
        Command::Call(args) => client::call(&env, args).await,
        Command::Mcp { client } => mcp_bridge::run(env, client).await,
        Command::Approve(args) => client::approve(&env, args).await,
        Command::Console(args) => console_cmd::run(&env, args).await,
        Command::Enable { switch } => services::switch(&env, switch, true).await,
        Command::Disable { switch } => services::switch(&env, switch, false).await,
        Command::Policy(args) => policy_cmd::run(&env, args).await,
        Command::Packs(args) => packs_cmd::packs(&env, args).await,
        Command::Account(args) => account_cmd::run(&env, args).await,
        Command::Secret(args) => packs_cmd::secret(&env, args).await,
        Command::Doctor(args) => doctor::run(&env, args).await,
        Command::Token { command } => account_cmd::token(&env, command).await,
        Command::Audit { command } => audit_cmd::run(&env, command).await,
        Command::Completions { shell } => docs::completions(Cli::command(), shell),
        Command::Man => docs::man(Cli::command()),
        Command::Gate(args) => services::gate(&env, args, handover).await,
        Command::Broker(args) => services::broker(&env, args, handover).await,
        Command::PackHost(args) => packs_cmd::pack_host(&env, args, handover).await,
        Command::Executor(_) | Command::JobShim(_) | Command::PackShim(_) | Command::WallsProbe => {
            anyhow::bail!("internal error: this command runs from main")
        }
    }
}

/// The async runtime a command runs on. The gate, the broker, the executor, the pack host and the
/// MCP bridge run on one worker: their work is many small messages, each a few microseconds, that
/// two workers kept handing to each other — a thread switch each time (with 8 calls in flight the
/// broker switched 3.5 times a call on two workers, 1.2 on one; the bridge 2.8 and 1.4; the
/// executor spent 12–20 % less CPU per call on one; a pack call's round trip through the pack
/// host, its task and its server's reader task, was about 4 % quicker on one), which cost more
/// than a second core gave. None of them does blocking work on it (the gate moves its own off
/// with `block_in_place`; the audit writer has its own thread; the executor does on it only a
/// whole-file read or one directory's names and types on a local file system, and everything
/// else on blocking threads; the pack host only small reads of its own configuration and a
/// server's start).
fn runtime_for(command: &Command) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if matches!(
        command,
        Command::Gate(_)
            | Command::Broker(_)
            | Command::Executor(_)
            | Command::PackHost(_)
            | Command::Mcp { .. }
    ) {
        builder.worker_threads(1);
    }
    builder.enable_all().build()
}
