//! The `glovebox` command: `up` runs everything under a supervisor, `status` and `stop` report on
//! and end it; `call`, `approve` and `tools` speak the WebSocket API from a terminal; `console`
//! prints a login link to the web console; `audit verify` checks the audit chain, `audit query`
//! and `audit tail` read it; `packs` and
//! `secret` manage MCP tool packs; `gate`, `executor`, `pack-host` and `broker` (hidden from
//! `--help`) are the service entry points that `up` starts
//! as separate processes.
//!
//! The command line's definitions are in `args.rs`, the environment (read once, passed down as
//! plain values) in `env.rs`; this file starts the process and dispatches each command.

mod out;

mod account_cmd;
mod allocator;
mod args;
mod audit_cmd;
mod background;
mod client;
mod console_cmd;
mod docs;
mod doctor;
mod env;
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

use std::path::PathBuf;
use std::process::ExitCode;

use args::*;
use clap::{CommandFactory, Parser};
pub(crate) use env::Env;
use glovebox_proto::ws::Role;

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
