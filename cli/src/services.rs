//! The service entry points `glovebox up` starts as child processes: parse, validate, bind,
//! announce readiness on stdout (`READY ...`), then call the service's `run`. Also the executor's
//! job shim (`glovebox job-shim`), and `glovebox enable|disable` (through the gate).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use glovebox_config::StateDir;
use glovebox_proto::transport::bind_private_socket;
use glovebox_proto::transport::handover::{
    AccountsUpdate, AuditPeers, Handover, HandoverError, socket,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use crate::shared_args::{LayoutArgs, StateArgs, SwitchArgs};
use crate::{Env, outln};
use glovebox_supervisor::walls_args::WallsArgs;

/// `glovebox gate`, as `up` starts it.
#[derive(clap::Args, Debug)]
pub(crate) struct GateArgs {
    #[command(flatten)]
    pub(crate) state: StateArgs,
    #[command(flatten)]
    pub(crate) layout: LayoutArgs,
    /// The managed policy directory (default: `managed` in the state dir).
    #[arg(long, value_name = "DIR")]
    pub(crate) policy_dir: Option<PathBuf>,
    /// A user whose executor may append audit events (repeatable).
    #[arg(long = "audit-peer-uid", value_name = "UID")]
    pub(crate) audit_peer_uids: Vec<u32>,
    /// Stop when standard input closes (the supervisor's lifeline).
    #[arg(long)]
    pub(crate) exit_on_stdin_eof: bool,
}

/// `glovebox job-shim`, as an executor starts it.
#[derive(clap::Args, Debug)]
pub(crate) struct JobShimArgs {
    /// A root of the account (repeatable).
    #[arg(long = "root", value_name = "DIR")]
    pub(crate) roots: Vec<PathBuf>,
    /// The job's own temporary directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) tmp: PathBuf,
    #[command(flatten)]
    pub(crate) walls: WallsArgs,
    /// Where to report a cap the job reached.
    #[arg(long, value_name = "FILE")]
    pub(crate) report: Option<PathBuf>,
    /// An interactive job's input: a FIFO the executor holds open for writing.
    #[arg(long, value_name = "FIFO")]
    pub(crate) stdin_fifo: Option<PathBuf>,
    /// The command line, run by /bin/sh -c.
    #[arg(last = true, required = true)]
    pub(crate) command: Vec<String>,
}

/// `glovebox broker`, as `up` starts it.
#[derive(clap::Args, Debug)]
pub(crate) struct BrokerArgs {
    #[command(flatten)]
    pub(crate) state: StateArgs,
    #[command(flatten)]
    pub(crate) layout: LayoutArgs,
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<SocketAddr>,
    /// Overrides glovebox.yaml's `limits.ask_timeout_secs`.
    #[arg(long)]
    pub(crate) ask_timeout_secs: Option<u64>,
    #[arg(long)]
    pub(crate) exit_on_stdin_eof: bool,
}

/// Completes on Ctrl-C, SIGTERM, or (when `stdin_lifeline`) when standard input closes, which is
/// how a child notices that its supervisor is gone.
pub async fn shutdown_signal(stdin_lifeline: bool) {
    let lifeline = async move {
        if stdin_lifeline {
            let mut sink = [0u8; 256];
            let mut stdin = tokio::io::stdin();
            while let Ok(n) = stdin.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        } else {
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
        _ = lifeline => {}
    }
}

/// How long a stopping gate or broker waits for open connections to finish their calls.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Runs a server until `shutdown_signal` completes, then gives open connections
/// [`SHUTDOWN_GRACE`] to finish (a client that keeps an idle connection open cannot hold the
/// service up).
async fn serve_with_grace<E>(
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    serve: impl FnOnce(
        std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    )
        -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), E>> + Send>>,
) -> Result<(), E> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        stop.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let grace = {
        let rx = stop_rx.clone();
        async move {
            stopped(rx).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        }
    };
    tokio::select! {
        result = serve(Box::pin(stopped(stop_rx))) => result,
        _ = grace => {
            tracing::info!("connections still open after the shutdown grace; stopping anyway");
            Ok(())
        }
    }
}

fn ready(line: &str) {
    // stdout belongs to the supervisor's readiness protocol.
    println!("READY {line}");
}

/// `glovebox gate`: the gate on the state (system mode's layout when `up --system` names it).
pub async fn gate(env: &Env, args: GateArgs, handover: Handover) -> anyhow::Result<ExitCode> {
    let state = env.layout(&args.state, args.layout);
    let policy_dir = args.policy_dir.map(|p| env.absolute(p));
    let exit_on_stdin_eof = args.exit_on_stdin_eof;
    let mut config = glovebox_gate::GateConfig::load(state.clone())?;
    if let Some(dir) = policy_dir {
        // System mode's managed layer: root's directory, whose every file must be root's too.
        config.managed_dirs = vec![dir];
        config.managed_root_only = true;
    }
    if state.system_paths().is_some() {
        glovebox_gate::audit::share_with_group();
    }
    config.audit_peer_uids = args.audit_peer_uids;
    let socket_mode = handover.socket_mode();
    config.handover = handover;
    let socket = state.gate_socket();
    let listener = glovebox_proto::transport::bind_socket(&socket, socket_mode)
        .with_context(|| format!("bind {}", socket.display()))?;
    // Reachable by other users' executors; the gate checks each peer's uid.
    let audit_socket = state.audit_socket();
    let audit_listener = glovebox_proto::transport::bind_socket(&audit_socket, 0o666)
        .with_context(|| format!("bind {}", audit_socket.display()))?;
    let admin_socket = state.admin_socket();
    let admin_listener = bind_private_socket(&admin_socket)
        .with_context(|| format!("bind {}", admin_socket.display()))?;
    // After the handover, each line on stdin says who may call the audit socket now (as accounts
    // come and go); the end of stdin is the supervisor's end.
    let (updates_tx, updates) = tokio::sync::watch::channel(None);
    config.audit_peer_updates = Some(updates);
    let stop = stop_signal(exit_on_stdin_eof, updates_tx, AuditPeers::parse);
    ready(&socket.display().to_string());
    serve_with_grace(stop, |stopped| {
        Box::pin(glovebox_gate::run(
            config,
            listener,
            Some(audit_listener),
            Some(admin_listener),
            stopped,
        ))
    })
    .await?;
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(&audit_socket);
    let _ = std::fs::remove_file(&admin_socket);
    Ok(ExitCode::SUCCESS)
}

/// An executor ready to serve: configured, its key read, its sandbox applied.
pub struct PreparedExecutor {
    config: glovebox_executor::ExecutorConfig,
    socket: std::path::PathBuf,
    listener: std::os::unix::net::UnixListener,
    enforcement: glovebox_executor::sandbox::Enforcement,
}

/// How the supervisor starts an executor. The executor reads nothing of the state directory:
/// it may run as another user, so everything it needs comes in its arguments and its stdin.
#[derive(clap::Args, Debug, Clone)]
pub struct ExecutorArgs {
    #[arg(long)]
    pub account: glovebox_config::AccountId,
    #[arg(long, value_name = "DIR")]
    pub workdir: std::path::PathBuf,
    /// A directory the executor and its jobs may touch (repeatable; default: the workdir).
    #[arg(long = "root", value_name = "DIR")]
    pub roots: Vec<std::path::PathBuf>,
    /// Where to listen.
    #[arg(long, value_name = "PATH")]
    pub socket: std::path::PathBuf,
    /// The gate's audit socket.
    #[arg(long, value_name = "PATH")]
    pub audit_socket: std::path::PathBuf,
    /// A directory on the floor, hidden from listings (repeatable; glovebox's state).
    #[arg(long = "protected", value_name = "DIR")]
    pub protected: Vec<std::path::PathBuf>,
    /// The account user's trash (freedesktop layout), where `file_delete` moves things.
    #[arg(long, value_name = "DIR")]
    pub trash: std::path::PathBuf,
    /// A variable jobs may inherit (repeatable; default: PATH, HOME, LANG, LC_*, TERM, USER,
    /// LOGNAME, TZ).
    #[arg(long = "job-env", value_name = "NAME")]
    pub job_env: Vec<String>,
    /// The walls of its jobs beyond their files.
    #[command(flatten)]
    pub walls: glovebox_supervisor::walls_args::WallsArgs,
}

/// The environment jobs get: the allowlisted variables of `environment`, and a PATH. A name that
/// would let a job's start-up run code or redirect git is dropped even if it is allowlisted (the
/// configuration refuses it; this covers an executor started by hand).
fn allowlisted(environment: &[(String, String)], names: &[String]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = environment
        .iter()
        .filter(|(k, _)| names.contains(k) && glovebox_config::job_env::refusal(k).is_none())
        .cloned()
        .collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned()));
    }
    env
}

/// Everything the executor does before its first thread starts: check its identity, read the
/// key, bind its socket, then apply the Landlock sandbox (which every later thread and job
/// inherits).
pub fn prepare_executor(
    env: &Env,
    args: &ExecutorArgs,
    handover: &Handover,
) -> anyhow::Result<PreparedExecutor> {
    glovebox_supervisor::identity::verify_cannot_regain_root()?;
    let (workdir, roots) = canonical_places(args)?;
    let (key, audit_key, serve_keys) = executor_keys(args, handover)?;
    // Each job's temporary directory goes in a scratch directory of this executor's own (never
    // all of /tmp), made (and those of executors that died swept) before the socket answers; the
    // shim each job runs under is this binary.
    let scratch = glovebox_supervisor::scratch::make(
        glovebox_supervisor::scratch::Kind::Jobs,
        &args.account,
    )?;
    // Bound before any thread starts; handed to tokio once the runtime exists.
    let listener = glovebox_proto::transport::bind_std_socket(&args.socket, handover.socket_mode())
        .with_context(|| format!("bind {}", args.socket.display()))?;
    let binary = std::env::current_exe().context("locate the glovebox binary")?;
    let plan = executor_plan(args, &roots, &scratch, &binary);
    let confined = confine(args, &binary, &plan)?;
    Ok(PreparedExecutor {
        config: glovebox_executor::ExecutorConfig {
            account: args.account.to_string(),
            workdir,
            key,
            gate_socket: args.audit_socket.clone(),
            audit_key,
            serve_keys,
            allowed_uids: handover.allowed_uids(),
            protected: args
                .protected
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
            jobs: glovebox_executor::jobs::JobConfig {
                env: job_env(env, args),
                shim: binary,
                roots,
                scratch,
                walls: confined.walls,
                launcher: confined.launcher,
                // Set by the executor once it has a link to the gate.
                audit: None,
            },
            trash_dir: args.trash.clone(),
            sandbox: confined.sandbox,
            containment: confined.containment,
        },
        socket: args.socket.clone(),
        listener,
        enforcement: confined.enforcement,
    })
}

/// The executor's sandbox plan: its roots, its jobs' `scratch`, its socket directory, the
/// `binary` it starts shims from, and the account's trash, made first (as this user) so that it
/// can be granted. A user without a writable home has no trash: deletes then fail, nothing else
/// does.
fn executor_plan(
    args: &ExecutorArgs,
    roots: &[PathBuf],
    scratch: &Path,
    binary: &Path,
) -> glovebox_executor::sandbox::SandboxPlan {
    let runtime_dir = args.socket.parent().unwrap_or(Path::new("/nonexistent"));
    let mut plan =
        glovebox_executor::sandbox::SandboxPlan::for_executor(roots, scratch, runtime_dir, binary);
    match std::fs::create_dir_all(&args.trash) {
        Ok(()) => plan.full.push(args.trash.clone()),
        Err(e) => tracing::warn!(
            trash = %args.trash.display(),
            error = %e,
            "no trash for this account: file_delete will fail"
        ),
    }
    plan
}

/// An executor confined by its sandbox, with what its jobs are started with.
struct Confined {
    /// Starts the job shims, from outside the executor's domain.
    launcher: std::sync::Arc<glovebox_executor::jobs::launcher::Launcher>,
    /// The walls of its jobs.
    walls: glovebox_sandbox::walls::Walls,
    enforcement: glovebox_executor::sandbox::Enforcement,
    /// Its sandbox and its jobs' walls, as `/healthz`, `status` and `up` show them.
    sandbox: String,
    /// How its jobs are kept from outliving their shims: Landlock's scopes or a subreaper.
    containment: String,
}

/// Starts the job launcher, tries the jobs' walls for real, then applies `plan` to the executor.
fn confine(
    args: &ExecutorArgs,
    binary: &Path,
    plan: &glovebox_executor::sandbox::SandboxPlan,
) -> anyhow::Result<Confined> {
    // Shims are started from a thread outside the executor's domain (they make namespaces,
    // which Landlock forbids inside one); started before the executor confines itself.
    let launcher = std::sync::Arc::new(
        glovebox_executor::jobs::launcher::Launcher::start().context("start the job launcher")?,
    );
    let walls = args.walls.clone().into_walls();
    let walls_in_force = walls_probe(&launcher, binary, &walls);
    let applied = glovebox_executor::sandbox::apply(plan)?;
    let containment = if applied.scoped {
        format!("landlock_scopes(abi_{})", applied.abi)
    } else {
        "subreaper".to_owned()
    };
    Ok(Confined {
        launcher,
        walls,
        sandbox: format!("{} {walls_in_force}", applied.enforcement.describe()),
        enforcement: applied.enforcement,
        containment,
    })
}

/// The environment the executor's jobs get: the executor's own allowlist, or the variables
/// `--job-env` names.
fn job_env(env: &Env, args: &ExecutorArgs) -> Vec<(String, String)> {
    if args.job_env.is_empty() {
        env.job_env.clone()
    } else {
        allowlisted(&env.environment, &args.job_env)
    }
}

/// Which walls this executor's jobs get, tried for real by `glovebox walls-probe` started the
/// way shims are; one line for `/healthz`, `status` and `up`.
fn walls_probe(
    launcher: &glovebox_executor::jobs::launcher::Launcher,
    binary: &Path,
    walls: &glovebox_sandbox::walls::Walls,
) -> String {
    glovebox_sandbox::walls::probe(walls, binary, |probe| launcher.output(probe))
        .describe(walls, rustix::process::geteuid().is_root())
}

/// The account's canonical workdir and roots (the workdir when no roots are given).
fn canonical_places(
    args: &ExecutorArgs,
) -> anyhow::Result<(std::path::PathBuf, Vec<std::path::PathBuf>)> {
    let workdir = std::fs::canonicalize(&args.workdir).with_context(|| {
        format!(
            "workdir {} of account {:?}",
            args.workdir.display(),
            args.account
        )
    })?;
    let roots = if args.roots.is_empty() {
        vec![workdir.clone()]
    } else {
        args.roots.clone()
    };
    let roots = roots
        .iter()
        .map(|r| {
            std::fs::canonicalize(r)
                .with_context(|| format!("root {} of account {:?}", r.display(), args.account))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((workdir, roots))
}

/// The keys the supervisor handed this executor over stdin: its account's ticket key, its own key
/// on the gate's audit socket, and the keys of the peers it serves.
fn executor_keys(
    args: &ExecutorArgs,
    handover: &Handover,
) -> anyhow::Result<(
    glovebox_ticket::AccountKey,
    (String, glovebox_proto::transport::SocketKey),
    glovebox_proto::transport::ServerKeys,
)> {
    let key_hex = handover
        .ticket_key
        .as_deref()
        .context("the handover has no ticket key")?;
    let key_bytes = hex::decode(key_hex).context("the ticket key in the handover is not hex")?;
    let key = glovebox_ticket::AccountKey::from_bytes(&key_bytes)?;
    let audit_key = handover.calling(socket::AUDIT)?;
    let serve_keys = handover.served_on(&socket::executor(&args.account));
    anyhow::ensure!(
        !serve_keys.is_empty(),
        "the handover has no key for the broker on this executor's socket"
    );
    Ok((key, audit_key, serve_keys))
}

pub async fn executor(prepared: PreparedExecutor) -> anyhow::Result<ExitCode> {
    let PreparedExecutor {
        config,
        socket,
        listener,
        enforcement,
    } = prepared;
    listener.set_nonblocking(true)?;
    let listener = tokio::net::UnixListener::from_std(listener)?;
    ready(&format!(
        "{} {} jobs={}",
        socket.display(),
        config.sandbox,
        config.containment
    ));
    if config.containment == "subreaper" {
        tracing::warn!(
            "this kernel has no Landlock signal scopes (ABI 6): a job that kills its shim and drops its marker can outlive it"
        );
    }
    if enforcement == glovebox_executor::sandbox::Enforcement::None {
        tracing::warn!(
            "this kernel has no Landlock: the executor is confined by the gate and OS permissions only"
        );
    }
    // After the key, stdin stays open as the supervisor's lifeline, as for the other services.
    glovebox_executor::run(config, listener, shutdown_signal(true)).await?;
    let _ = std::fs::remove_file(&socket);
    Ok(ExitCode::SUCCESS)
}

/// `glovebox job-shim`, a process of its own started by the executor for each job: it confines
/// itself and runs the job (see the executor's `jobs::shim`), without logging to the job's output
/// or starting a runtime. Returns the job's exit code.
pub fn job_shim(args: JobShimArgs) -> i32 {
    glovebox_executor::jobs::shim::run(glovebox_executor::jobs::shim::ShimConfig {
        roots: args.roots,
        tmp: args.tmp,
        command: args.command.join(" "),
        walls: args.walls.into_walls(),
        report: args.report,
        stdin_fifo: args.stdin_fifo,
    })
}

/// `glovebox broker`: the broker on the state (system mode's layout when `up --system` names it).
pub async fn broker(env: &Env, args: BrokerArgs, handover: Handover) -> anyhow::Result<ExitCode> {
    let state = env.layout(&args.state, args.layout);
    let exit_on_stdin_eof = args.exit_on_stdin_eof;
    let config = state.load_config()?;
    let addr = args.listen.unwrap_or(config.listen);
    anyhow::ensure!(
        addr.ip().is_loopback(),
        "refusing to listen on {addr}: the broker has no TLS yet, so it serves loopback addresses only"
    );
    let mut broker_config =
        configure_broker(env, &state, &config, args.ask_timeout_secs, handover)?;
    let listener = listen_tcp(addr, &state).await?;
    let sockets = broker_sockets(&state, &config)?;
    // After the handover, each line on stdin is an update of the accounts added at run time;
    // the end of stdin is the supervisor's end.
    let (updates_tx, updates) = tokio::sync::watch::channel(None);
    broker_config.accounts_updates = Some(updates);
    let stop = stop_signal(exit_on_stdin_eof, updates_tx, AccountsUpdate::parse);
    let local = listener.local_addr()?;
    ready(&format!("ws://{local}/v1/ws"));
    serve_with_grace(stop, |stopped| {
        Box::pin(glovebox_broker::run_with_sockets(
            broker_config,
            listener,
            sockets,
            stopped,
        ))
    })
    .await?;
    Ok(ExitCode::SUCCESS)
}

/// The broker's configuration from the state, the environment and `handover`; the ask timeout is
/// glovebox.yaml's `limits.ask_timeout_secs` (or the default), unless `--ask-timeout-secs` was
/// given (`ask_timeout_secs`).
fn configure_broker(
    env: &Env,
    state: &StateDir,
    config: &glovebox_config::Config,
    ask_timeout_secs: Option<u64>,
    handover: Handover,
) -> anyhow::Result<glovebox_broker::BrokerConfig> {
    let mut broker_config = glovebox_broker::BrokerConfig::from_state(state, config);
    if let Some(secs) = ask_timeout_secs {
        use glovebox_config::limits::MAX_ASK_TIMEOUT_SECS;
        anyhow::ensure!(
            (1..=MAX_ASK_TIMEOUT_SECS).contains(&secs),
            "--ask-timeout-secs must be between 1 and {MAX_ASK_TIMEOUT_SECS}"
        );
        broker_config.ask_timeout = Duration::from_secs(secs);
    }
    broker_config.shell = env.shell.clone();
    broker_config.timezone = env.timezone.clone();
    broker_config.handover = handover;
    Ok(broker_config)
}

/// The broker's TCP listener on `addr`; an address in use is told with what to do instead.
async fn listen_tcp(addr: SocketAddr, state: &StateDir) -> anyhow::Result<tokio::net::TcpListener> {
    match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => Ok(listener),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => anyhow::bail!(
            "{addr} is already in use (another glovebox, or another program): start with \
             `glovebox up --listen 127.0.0.1:PORT` (port 0 picks a free one), or set `listen` in {}",
            state.config_file().display()
        ),
        Err(e) => Err(anyhow::Error::new(e).context(format!("listen on {addr}"))),
    }
}

/// The broker's Unix sockets, bound: in system mode the approve socket, in user mode the agent
/// socket.
fn broker_sockets(
    state: &StateDir,
    config: &glovebox_config::Config,
) -> anyhow::Result<glovebox_broker::Sockets> {
    // System mode: approvers connect to the approve socket as themselves, each the approver of
    // the accounts they own.
    let approve = match state.system_paths() {
        None => None,
        Some(_) => Some(approve_socket(state, config)?),
    };
    // User mode: local clients (`glovebox mcp`) reach the same front door over a Unix socket in
    // the private run directory, sparing them the loopback TCP stack.
    let local = match state.agent_socket() {
        Some(path) => Some(
            glovebox_proto::transport::bind_private_socket(&path)
                .with_context(|| format!("bind {}", path.display()))?,
        ),
        None => None,
    };
    Ok(glovebox_broker::Sockets { local, approve })
}

/// System mode's approve socket, bound, with each account's owner (who must exist) by uid.
fn approve_socket(
    state: &StateDir,
    config: &glovebox_config::Config,
) -> anyhow::Result<(
    tokio::net::UnixListener,
    glovebox_broker::approve_socket::Owners,
)> {
    let mut owners = Vec::new();
    for a in &config.accounts {
        let name = a.owner.as_deref().with_context(|| {
            format!("account {:?} has no owner (required in system mode)", a.id)
        })?;
        let user = nix::unistd::User::from_name(name)?
            .with_context(|| format!("owner {name:?} of account {:?} does not exist", a.id))?;
        owners.push((a.id.clone(), user.uid.as_raw()));
    }
    let path = state.approve_socket();
    let listener = glovebox_proto::transport::bind_socket(&path, 0o666)
        .with_context(|| format!("bind {}", path.display()))?;
    Ok((listener, glovebox_broker::approve_socket::Owners(owners)))
}

/// What stops the gate or the broker: Ctrl-C or SIGTERM, and with `exit_on_stdin_eof` the end of
/// stdin, whose lines until then are the supervisor's updates, parsed by `parse` into `updates`.
async fn stop_signal<T>(
    exit_on_stdin_eof: bool,
    updates: tokio::sync::watch::Sender<Option<T>>,
    parse: fn(&str) -> Result<T, HandoverError>,
) {
    if exit_on_stdin_eof {
        tokio::select! {
            _ = stdin_updates(updates, parse) => {}
            _ = shutdown_signal(false) => {}
        }
    } else {
        shutdown_signal(false).await;
    }
}

/// Reads the supervisor's updates from stdin (the broker's [`AccountsUpdate`]s, the gate's
/// [`AuditPeers`]), one line each, into `tx`, until stdin ends. A line that does not parse is
/// logged and ignored (the last good update stays; the supervisor, which checks that the gate
/// took its update, restarts a gate that did not).
async fn stdin_updates<T>(
    tx: tokio::sync::watch::Sender<Option<T>>,
    parse: fn(&str) -> Result<T, HandoverError>,
) {
    use glovebox_proto::transport::handover::MAX_HANDOVER_BYTES;
    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut limited = (&mut stdin).take(MAX_HANDOVER_BYTES as u64 + 1);
        match limited.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) if !line.ends_with(b"\n") => {
                // Too long, or cut by the end of stdin: the supervisor is gone or broken, and
                // the broker stops (it restarts the broker if it is still there).
                tracing::error!("an update on stdin is too long or cut; stopping");
                return;
            }
            Ok(_) => match std::str::from_utf8(&line)
                .map_err(|e| e.to_string())
                .and_then(|l| parse(l).map_err(|e| e.to_string()))
            {
                Ok(update) => {
                    let _ = tx.send(Some(update));
                }
                Err(e) => {
                    tracing::error!(error = %e, "an update on stdin is not valid; ignored")
                }
            },
        }
    }
}

/// `glovebox enable|disable`: [`set_enabled`] on the user's state, or with `--system` on the system
/// service's.
pub async fn switch(env: &Env, args: SwitchArgs, enabled: bool) -> anyhow::Result<ExitCode> {
    let state = env.state_for(args.state, args.system, args.runtime_dir);
    set_enabled(&state, args.account, enabled).await
}

/// Switches an account's tools through the running gate (which owns
/// `enabled` in `glovebox.yaml` and `accounts.yaml`, judges it and audits the switch). When
/// glovebox is stopped (no gate to ask, and its lock free), `glovebox.yaml` is edited directly
/// (the gate reads it at start); an account added at run time is switched only through the gate.
pub async fn set_enabled(
    state: &StateDir,
    account: Option<String>,
    enabled: bool,
) -> anyhow::Result<ExitCode> {
    use glovebox_proto::transport::handover::{peer, socket};
    use glovebox_proto::v1::{SetEnabledRequest, gate_admin_client::GateAdminClient};
    let system = state.system_paths().is_some();
    let account = if system {
        // The service's gate knows its accounts (and says so of an unknown one).
        account.context("--system needs --account")?
    } else {
        // glovebox.yaml's accounts and those added at run time (accounts.yaml), switched alike.
        crate::which_account::choose_in(state, account)?
    };
    let account = account.as_str();
    let keys = crate::control_keys(state)?;
    let mut admin = GateAdminClient::new(glovebox_proto::transport::authenticated_channel(
        &state.admin_socket(),
        peer::ADMIN,
        keys.key(socket::ADMIN, peer::ADMIN),
    ));
    let request = SetEnabledRequest {
        account: account.to_owned(),
        enabled,
        by: "admin".into(),
    };
    match admin.set_enabled(request).await {
        Ok(_) => {}
        Err(status) if status.code() == tonic::Code::Unavailable && system => anyhow::bail!(
            "the system service is not running: set `enabled` in its glovebox.yaml instead"
        ),
        Err(status) if status.code() == tonic::Code::Unavailable => {
            // Not running: hold its lock while editing, so it cannot start meanwhile.
            glovebox_config::create_private_dir(&state.run_dir())?;
            let _stopped = glovebox_supervisor::lock(state)
                .context("the gate is not reachable, yet glovebox seems to be running")?;
            let mut raw = state.load_raw_config()?;
            let Some(entry) = raw.accounts.iter_mut().find(|a| a.id == account) else {
                // accounts.yaml has one writer, the gate.
                anyhow::bail!(
                    "account {account:?} was added at run time: start glovebox to switch it"
                );
            };
            entry.enabled = enabled;
            state.save_raw_config(&raw)?;
        }
        Err(status) => anyhow::bail!("{}", status.message()),
    }
    outln!(
        "tools are {} for account {account}",
        if enabled { "on" } else { "off" }
    );
    Ok(ExitCode::SUCCESS)
}
