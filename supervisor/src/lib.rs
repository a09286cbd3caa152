//! `glovebox up` as a library: first-start setup ([`init`]), system mode's users and file modes
//! ([`system`], [`identity`]), then the gate, one executor and one pack host per account
//! (`packs_spec.rs`) and the broker as separate processes, each started as the `glovebox` binary
//! with its service's arguments ([`walls_args`]: a shim's walls; [`scratch`]: the services'
//! directories in `/tmp`). What was started is handed to the caller to announce ([`Report`]). Restarts a child that exits with backoff (logged and audited), and stops
//! every child on Ctrl-C or SIGTERM. A child also stops by itself when the supervisor's end of its
//! stdin closes, so none outlives a supervisor that was killed.
//!
//! Why one file past 800 lines: starting, restarting and stopping the children share the child
//! table and the exit channel that only `up` holds; the accounts it follows, the pack hosts'
//! specs, system mode and first start are modules of their own.

use std::future::Future;
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use glovebox_config::{StateDir, write_private_file};
use glovebox_proto::audit_row::{Outcome, RowKind, Source};
use glovebox_proto::transport::authenticated_channel;
use glovebox_proto::transport::handover::{ControlKeys, ExpectedIdentity, Handover, peer, socket};
use glovebox_proto::v1::{AuditEvent, audit_client::AuditClient};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::mpsc;

mod accounts;
pub mod identity;
pub mod init;
mod packs_spec;
pub mod scratch;
pub mod system;
pub mod walls_args;

/// How long a child has to report readiness.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a child has to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Restart backoff: first delay, and the most it grows to.
const BACKOFF_START: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A child that ran this long before exiting restarts with the first delay again.
const STABLE_AFTER: Duration = Duration::from_secs(60);

pub struct UpOptions {
    pub state_dir: PathBuf,
    /// `--system`: where system mode's files are (see `system`).
    pub system: Option<SystemPaths>,
    /// The workdir of the account a first start creates (the current directory by default).
    pub workdir: PathBuf,
    /// `--workdir`, if given: on a later start it must match the user's account's workdir.
    pub workdir_option: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    /// `--ask-timeout-secs`, if given: it wins over glovebox.yaml's `limits.ask_timeout_secs`.
    pub ask_timeout_secs: Option<u64>,
    /// The trash of the user running `up`, for accounts without `run_as`.
    pub trash_dir: PathBuf,
    /// The home directory of the user running `up` (`$HOME`).
    pub home: Option<PathBuf>,
    /// The `OTEL_*` variables `up` was started with; they override glovebox.yaml's `telemetry:`.
    pub otel_env: Vec<(String, String)>,
}

/// What `up` has started, for the command that ran it to announce (the banner is the binary's).
#[derive(Debug)]
pub struct Report {
    pub state: StateDir,
    pub config: glovebox_config::Config,
    /// The broker's WebSocket URL.
    pub url: String,
    /// The account a first start created.
    pub created: Option<String>,
    /// Each service's sandbox, as it reported it.
    pub sandboxes: Vec<(String, String)>,
    /// System mode: the managed policy and who the gate and the broker run as.
    pub system: Option<SystemReport>,
}

/// System mode's part of a [`Report`].
#[derive(Debug)]
pub struct SystemReport {
    pub policy_dir: PathBuf,
    pub gate_user: String,
    pub broker_user: String,
}

/// Announces a [`Report`] once everything runs (before `up` waits for a stop).
pub type Announce = Box<dyn FnOnce(Report) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// System mode's files besides the state directory.
#[derive(Debug, Clone)]
pub struct SystemPaths {
    pub config: PathBuf,
    pub runtime_dir: PathBuf,
    pub policy_dir: PathBuf,
}

/// System mode, set up: who each service runs as, and the managed policy the gate loads.
#[derive(Debug, Clone)]
struct SystemMode {
    users: system::ServiceUsers,
    policy_dir: PathBuf,
}

/// One kind of child process.
/// Not `Debug`: its handover line holds keys.
#[derive(Clone)]
struct Spec {
    name: String,
    args: Vec<String>,
    /// Written to the child's stdin first: its handover (keys), one line.
    stdin_line: Option<String>,
    /// (uid, gid) to run as, when it differs from the supervisor's.
    run_as: Option<(u32, u32)>,
    /// System mode: the switch to `run_as` also sets the supplementary groups to exactly its
    /// gid, empties every capability set and sets `no_new_privs` (`identity::switch_for_good`).
    harden: bool,
    /// Environment variables set for the child (on top of the supervisor's).
    env: Vec<(String, String)>,
}

struct Running {
    spec: Spec,
    pid: u32,
    generation: u64,
    started: Instant,
    /// Kept open: dropping it closes the child's lifeline.
    stdin: Option<ChildStdin>,
    ready: String,
    failures: u32,
    /// Stopped for good (its account was removed): its exits are not restarts.
    retired: bool,
}

/// (child index, generation, exit description)
type Exit = (usize, u64, String);

pub async fn up(o: UpOptions, announce: Announce) -> anyhow::Result<ExitCode> {
    // Take over SIGTERM and SIGINT before anything starts, so a stop during start-up still stops
    // every child that was started.
    let signal = stop_signal()?;
    tokio::pin!(signal);
    let (state, system_mode) = open_state(&o)?;
    let (exits_tx, mut exits) = mpsc::channel::<Exit>(64);
    // A first start that fails leaves nothing behind, so the next one starts afresh; a start
    // that fails after taking the lock leaves no sockets. One that finds another `up` running
    // touches nothing of it. (System mode's state is never removed.)
    let fresh = system_mode.is_none() && !state.root().exists();
    let (created, _lock) = set_up_state(&state, &o, system_mode.as_ref(), fresh)?;
    // Taken before the accounts are read: a change made during the start is applied after it.
    let started_stamp = glovebox_config::file_stamp(&state.added_accounts_file());
    let first_start = created.is_some();
    let mode = system_mode.as_ref();
    let mut started = match start_up(&state, &o, mode, first_start, &exits_tx, &mut exits).await {
        Ok(started) => started,
        Err(e) => {
            remove_sockets(&state);
            forget(&state, fresh);
            return Err(e);
        }
    };
    let audit = supervisor_audit(&state, &started.keys);
    let processes = format!("glovebox up: {} processes", started.running.len());
    audit_service(&audit, Outcome::Started, &processes).await;
    announce(started.report(&state, created, mode)).await;

    let children = Children {
        exe: &started.exe,
        exits_tx: &exits_tx,
        audit: &audit,
    };
    let master = glovebox_ticket::MasterKey::from_bytes(&std::fs::read(state.ticket_key())?)?;
    let mut added = accounts::Added {
        state: &state,
        o: &o,
        system_mode: mode,
        keys: &started.keys,
        master: &master,
        stamp: started_stamp,
        running: started.config.accounts.clone(),
    };
    children
        .supervise(
            &mut started.running,
            &mut exits,
            &mut added,
            signal.as_mut(),
        )
        .await;
    shut_down(&state, &audit, &mut started, &mut exits).await;
    Ok(ExitCode::SUCCESS)
}

/// Registers for SIGTERM and SIGINT now; the future completes at the first of them.
fn stop_signal() -> std::io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}

/// The state directory `up` runs on, and in system mode who each service runs as; system mode
/// first checks that it runs as root, the config file and the accounts, and prepares the
/// runtime directory.
fn open_state(o: &UpOptions) -> anyhow::Result<(StateDir, Option<SystemMode>)> {
    let Some(paths) = &o.system else {
        return Ok((StateDir::new(&o.state_dir), None));
    };
    system::require_root()?;
    let users = system::service_users()?;
    system::check_root_owned(&paths.config, "config file")?;
    let state = StateDir::system(&o.state_dir, &paths.runtime_dir, &paths.config);
    let config = state.load_merged_config()?;
    system::check_accounts(&config, &state.config_file(), &users)?;
    system::prepare_runtime(&paths.runtime_dir)?;
    let mode = SystemMode {
        users,
        policy_dir: paths.policy_dir.clone(),
    };
    Ok((state, Some(mode)))
}

/// Makes the state directory ready and locks it: a first start in user mode creates it (and
/// returns the account it created), system mode gives it its owners and modes once it is locked.
/// A first start that cannot set the directory up removes what it made (`fresh`, see [`forget`]).
fn set_up_state(
    state: &StateDir,
    o: &UpOptions,
    system_mode: Option<&SystemMode>,
    fresh: bool,
) -> anyhow::Result<(Option<String>, std::fs::File)> {
    let created = match system_mode {
        Some(_) => None,
        None => init::ensure_state(state, &o.workdir).inspect_err(|_| forget(state, fresh))?,
    };
    let lock = lock(state)?;
    if let Some(mode) = system_mode {
        prepare_system_state(state, mode)?;
    }
    Ok((created, lock))
}

/// Removes the state directory if this start made it (`fresh`), so that a failed first start
/// leaves nothing behind.
fn forget(state: &StateDir, fresh: bool) {
    if fresh {
        let _ = std::fs::remove_dir_all(state.root());
    }
}

/// System mode, once the state directory is locked: checks the accounts again and gives the
/// state, the sockets' directories and the pack hosts' homes their owners and modes.
fn prepare_system_state(state: &StateDir, mode: &SystemMode) -> anyhow::Result<()> {
    let config = state.load_merged_config()?;
    let identities = system::check_accounts(&config, &state.config_file(), &mode.users)?;
    system::prepare_state(state, &config, &mode.users)?;
    system::prepare_sockets(state, &config, &identities, &mode.users)?;
    let homes: Vec<(&str, &identity::Identity)> = config
        .accounts
        .iter()
        .map(|a| a.id.as_str())
        .zip(&identities)
        .collect();
    system::prepare_pack_homes(state, &homes)
}

/// The supervisor's client of the gate's audit socket.
fn supervisor_audit(
    state: &StateDir,
    keys: &ControlKeys,
) -> AuditClient<glovebox_proto::transport::Link> {
    AuditClient::new(authenticated_channel(
        &state.gate_socket(),
        peer::SUPERVISOR,
        keys.key(socket::GATE, peer::SUPERVISOR),
    ))
}

/// After a stop signal: audits the stop, stops every child, then removes what the services
/// leave behind (their scratch in `/tmp`, the URL file, the agent socket).
async fn shut_down(
    state: &StateDir,
    audit: &AuditClient<glovebox_proto::transport::Link>,
    started: &mut Started,
    exits: &mut mpsc::Receiver<Exit>,
) {
    eprintln!("glovebox: stopping");
    audit_service(audit, Outcome::Stopped, "glovebox up is stopping").await;
    stop_all(&mut started.running, exits).await;
    // What a service killed before it could clean up left in /tmp.
    for account in &started.config.accounts {
        for kind in [crate::scratch::Kind::Jobs, crate::scratch::Kind::Packs] {
            crate::scratch::sweep(std::path::Path::new(crate::scratch::TMP), kind, &account.id);
        }
    }
    let _ = std::fs::remove_file(state.broker_url_file());
    if let Some(socket) = state.agent_socket() {
        let _ = std::fs::remove_file(socket);
    }
}

/// A started glovebox: what `up` goes on with.
struct Started {
    config: glovebox_config::Config,
    keys: ControlKeys,
    exe: PathBuf,
    running: Vec<Running>,
    url: String,
}

impl Started {
    /// What was started, for the caller of `up` to announce.
    fn report(
        &self,
        state: &StateDir,
        created: Option<String>,
        system_mode: Option<&SystemMode>,
    ) -> Report {
        Report {
            state: state.clone(),
            config: self.config.clone(),
            url: self.url.clone(),
            created,
            sandboxes: sandboxes(&self.running),
            system: system_mode.map(|mode| SystemReport {
                policy_dir: mode.policy_dir.clone(),
                gate_user: mode.users.gate.name.clone(),
                broker_user: mode.users.broker.name.clone(),
            }),
        }
    }
}

/// Starts every child of a set-up, locked state dir; publishes the broker's URL.
async fn start_up(
    state: &StateDir,
    o: &UpOptions,
    system_mode: Option<&SystemMode>,
    first_start: bool,
    exits_tx: &mpsc::Sender<Exit>,
    exits: &mut mpsc::Receiver<Exit>,
) -> anyhow::Result<Started> {
    let config = state.load_merged_config()?;
    for a in &config.accounts {
        anyhow::ensure!(
            a.workdir.is_dir(),
            "workdir {} of account {:?} is not a directory",
            a.workdir.display(),
            a.id
        );
    }
    check_workdir_option(&config, first_start, o)?;
    let master = glovebox_ticket::MasterKey::from_bytes(&std::fs::read(state.ticket_key())?)?;
    let keys = init::control_keys(state)?;
    let exe = std::env::current_exe().context("locate the glovebox binary")?;
    let specs = child_specs(state, &config, &keys, &master, o, system_mode)?;
    let mut running = start_all(&exe, specs, exits_tx, exits).await?;
    let url = publish_url(state, &mut running)?;
    if system_mode.is_some() {
        system::publish_url_file(&state.broker_url_file())?;
    }
    Ok(Started {
        config,
        keys,
        exe,
        running,
        url,
    })
}

/// `--workdir` names the workdir of the account `up` creates for its user on a first start; on
/// a later start it must still be that account's workdir, or `up` says how to change it rather
/// than silently ignoring it.
fn check_workdir_option(
    config: &glovebox_config::Config,
    first_start: bool,
    o: &UpOptions,
) -> anyhow::Result<()> {
    let Some(wanted) = o.workdir_option.as_deref() else {
        return Ok(());
    };
    if first_start {
        return Ok(());
    }
    let me = init::default_account_name();
    let Some(account) = config.account(&me) else {
        return Ok(());
    };
    let canonical = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    anyhow::ensure!(
        canonical(wanted) == canonical(&account.workdir),
        "account {me:?} already has the workdir {} (set when it was created); --workdir {} would \
         be ignored: to change it, edit `workdir` and `roots` of {me:?} in the state dir's \
         glovebox.yaml, or start without --workdir",
        account.workdir.display(),
        wanted.display()
    );
    Ok(())
}

/// Removes the sockets and the URL file of services that are not running.
fn remove_sockets(state: &StateDir) {
    let mut files = vec![
        state.gate_socket(),
        state.admin_socket(),
        state.audit_socket(),
        state.broker_url_file(),
    ];
    if let Ok(config) = state.load_merged_config() {
        files.extend(config.accounts.iter().map(|a| state.executor_socket(&a.id)));
    }
    if state.system_paths().is_some() {
        files.push(state.approve_socket());
    }
    for file in files {
        let _ = std::fs::remove_file(file);
    }
}

/// What each child is started as, in start order: the gate, one executor per account (as its
/// account's user, with its identity prepared and the placement checked first), the broker.
/// Each is handed its keys on stdin.
fn child_specs(
    state: &StateDir,
    config: &glovebox_config::Config,
    keys: &ControlKeys,
    master: &glovebox_ticket::MasterKey,
    o: &UpOptions,
    system_mode: Option<&SystemMode>,
) -> anyhow::Result<Vec<Spec>> {
    let account_ids: Vec<&str> = config.accounts.iter().map(|a| a.id.as_str()).collect();
    let mut identities = Vec::new();
    for a in &config.accounts {
        let identity = identity::resolve(a)?;
        if system_mode.is_none() {
            // System mode made every socket directory already (`system::prepare_sockets`).
            identity::prepare_run_dir(state, &a.id, &identity)?;
        }
        identities.push(identity);
    }
    let trashes: Vec<PathBuf> = identities.iter().map(|i| trash_of(i, o)).collect();
    check_placement(state, config, &identities, &trashes, o.home.as_deref())?;
    let mut specs = vec![gate_spec(state, keys, &account_ids, &identities)];
    let protected = std::fs::canonicalize(state.root())?.display().to_string();
    for ((a, identity), trash) in config.accounts.iter().zip(&identities).zip(&trashes) {
        specs.extend(account_specs(
            state,
            a,
            identity,
            trash,
            &protected,
            keys,
            master,
            system_mode,
        ));
    }
    // The broker is handed glovebox.yaml's accounts, then (next line) those whose entry is in
    // accounts.yaml (added, or taken over).
    let added = accounts::from_store(state, &config.accounts);
    let base: Vec<&str> = account_ids
        .iter()
        .copied()
        .filter(|id| !added.iter().any(|a| a.id == *id))
        .collect();
    let mut broker = broker_spec(state, keys, &base, o);
    if let Some(line) = &mut broker.stdin_line {
        line.push_str(&accounts::broker_update(state, keys, &added).to_line());
    }
    specs.push(broker);
    finish_specs(&mut specs, state, config, o, system_mode)?;
    Ok(specs)
}

/// The trash of an account's jobs: its `run_as` user's, or that of the user running `up`.
fn trash_of(identity: &identity::Identity, o: &UpOptions) -> PathBuf {
    if identity.drops {
        PathBuf::from(&identity.home).join(".local/share/Trash")
    } else {
        o.trash_dir.clone()
    }
}

/// An account's executor and pack host, each handed its keys; in system mode each accepts the
/// broker's uid and checks it runs as its account's user with nothing left over.
#[allow(clippy::too_many_arguments)]
fn account_specs(
    state: &StateDir,
    a: &glovebox_config::Account,
    identity: &identity::Identity,
    trash: &std::path::Path,
    protected: &str,
    keys: &ControlKeys,
    master: &glovebox_ticket::MasterKey,
    system_mode: Option<&SystemMode>,
) -> [Spec; 2] {
    let system_handover = |mut h: Handover| -> String {
        if let Some(mode) = system_mode {
            h.peer_uids = vec![mode.users.broker.uid];
            h.expect = Some(ExpectedIdentity {
                uid: identity.uid,
                gid: identity.gid,
            });
        }
        h.to_line()
    };
    let key = hex::encode(master.account_key(&a.id).as_bytes());
    let handover = system_handover(keys.for_executor(&a.id, key));
    let executor = executor_spec(state, a, identity, trash, protected, handover);
    let packs_key = hex::encode(master.packs_key(&a.id).as_bytes());
    let handover = system_handover(keys.for_packs(&a.id, packs_key));
    let pack_home = system_mode.map(|_| state.pack_home_dir(&a.id));
    let packs = packs_spec::packs_spec(state, a, identity, protected, pack_home, handover);
    [executor, packs]
}

/// What every spec gets last: system mode's identities and layout, and the telemetry settings
/// as the standard variables (the executor and the pack host read nothing of the state).
fn finish_specs(
    specs: &mut [Spec],
    state: &StateDir,
    config: &glovebox_config::Config,
    o: &UpOptions,
    system_mode: Option<&SystemMode>,
) -> anyhow::Result<()> {
    let telemetry = glovebox_config::telemetry::Telemetry::validate(&config.telemetry, |k| {
        o.otel_env
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    })
    .map_err(|e| anyhow::anyhow!("{}: {e}", state.config_file().display()))?;
    for spec in specs {
        if let Some(mode) = system_mode {
            system_spec(spec, state, mode);
        }
        spec.env.extend(telemetry.to_env());
    }
    Ok(())
}

/// Turns a user-mode spec into system mode's: the gate and the broker as their service users,
/// told the layout (and the gate the managed policy); each child switched for good and told
/// which identity to verify.
fn system_spec(spec: &mut Spec, state: &StateDir, mode: &SystemMode) {
    let users = &mode.users;
    let layout = |args: &mut Vec<String>| {
        if let Some(paths) = state.system_paths() {
            args.extend([
                "--runtime-dir".into(),
                paths.runtime.display().to_string(),
                "--config".into(),
                paths.config.display().to_string(),
            ]);
        }
    };
    let service_user = match spec.name.as_str() {
        "gate" => {
            layout(&mut spec.args);
            spec.args
                .extend(["--policy-dir".into(), mode.policy_dir.display().to_string()]);
            Some((&users.gate, vec![users.broker.uid]))
        }
        "broker" => {
            layout(&mut spec.args);
            Some((&users.broker, Vec::new()))
        }
        _ => None,
    };
    if let Some((user, peer_uids)) = service_user {
        spec.run_as = Some((user.uid, user.gid));
        // The handover is the first line; the broker's accounts update may follow it.
        if let Some(text) = &spec.stdin_line
            && let Some((line, rest)) = text.split_once('\n')
            && let Ok(mut h) = Handover::parse(line)
        {
            h.peer_uids = peer_uids;
            h.expect = Some(ExpectedIdentity {
                uid: user.uid,
                gid: user.gid,
            });
            spec.stdin_line = Some(format!("{}{rest}", h.to_line()));
        }
        spec.env = vec![("HOME".into(), "/".into())];
    }
    spec.harden = true;
}

fn gate_spec(
    state: &StateDir,
    keys: &ControlKeys,
    account_ids: &[&str],
    identities: &[identity::Identity],
) -> Spec {
    let mut args: Vec<String> = vec![
        "gate".into(),
        "--state-dir".into(),
        state.root().display().to_string(),
        "--exit-on-stdin-eof".into(),
    ];
    for identity in identities.iter().filter(|i| i.drops) {
        args.extend(["--audit-peer-uid".into(), identity.uid.to_string()]);
    }
    Spec {
        name: "gate".into(),
        args,
        stdin_line: Some(keys.for_gate(account_ids.iter().copied()).to_line()),
        run_as: None,
        harden: false,
        env: Vec::new(),
    }
}

/// The executor of account `a`, handed `handover` (its keys) on stdin.
fn executor_spec(
    state: &StateDir,
    a: &glovebox_config::Account,
    identity: &identity::Identity,
    trash: &std::path::Path,
    protected: &str,
    handover: String,
) -> Spec {
    let mut extra = vec!["--trash".into(), trash.display().to_string()];
    for name in &a.job_env {
        extra.extend(["--job-env".into(), name.clone()]);
    }
    account_service_spec(
        AccountService {
            name: "executor",
            command: "executor",
            socket: &state.executor_socket(&a.id),
            extra,
        },
        state,
        a,
        identity,
        protected,
        handover,
    )
}

/// What differs between the services that run as an account's identity (its executor, its pack
/// host): the command, its socket, and arguments of its own.
struct AccountService<'a> {
    /// Its name in the supervisor's messages: `<name>[<account>]`.
    name: &'static str,
    command: &'static str,
    socket: &'a std::path::Path,
    extra: Vec<String>,
}

/// A service of account `a` run as the account's executor identity (its `run_as` user, with that
/// user's `HOME`), serving `service.socket`, writing to the audit socket, handed `handover` (its
/// keys) on stdin.
fn account_service_spec(
    service: AccountService<'_>,
    state: &StateDir,
    a: &glovebox_config::Account,
    identity: &identity::Identity,
    protected: &str,
    handover: String,
) -> Spec {
    let mut args: Vec<String> = vec![
        service.command.into(),
        "--account".into(),
        a.id.to_string(),
        "--workdir".into(),
        a.workdir.display().to_string(),
        "--socket".into(),
        service.socket.display().to_string(),
        "--audit-socket".into(),
        state.audit_socket().display().to_string(),
        "--protected".into(),
        protected.to_owned(),
    ];
    for root in &a.roots {
        args.extend(["--root".into(), root.display().to_string()]);
    }
    let walls = crate::walls_args::account_walls(a, crate::walls_args::namespaces_allowed());
    args.extend(
        walls
            .to_args()
            .into_iter()
            .map(|arg| arg.to_string_lossy().into_owned()),
    );
    args.extend(service.extra);
    let env = if identity.drops {
        vec![
            ("HOME".to_owned(), identity.home.clone()),
            ("USER".to_owned(), identity.name.clone()),
            ("LOGNAME".to_owned(), identity.name.clone()),
        ]
    } else {
        Vec::new()
    };
    Spec {
        name: format!("{}[{}]", service.name, a.id),
        args,
        stdin_line: Some(handover),
        run_as: identity.drops.then_some((identity.uid, identity.gid)),
        harden: false,
        env,
    }
}

fn broker_spec(state: &StateDir, keys: &ControlKeys, account_ids: &[&str], o: &UpOptions) -> Spec {
    let mut args = vec![
        "broker".into(),
        "--state-dir".into(),
        state.root().display().to_string(),
        "--exit-on-stdin-eof".into(),
    ];
    if let Some(secs) = o.ask_timeout_secs {
        args.extend(["--ask-timeout-secs".into(), secs.to_string()]);
    }
    if let Some(listen) = o.listen {
        args.extend(["--listen".into(), listen.to_string()]);
    }
    Spec {
        name: "broker".into(),
        args,
        stdin_line: Some(keys.for_broker(account_ids.iter().copied()).to_line()),
        run_as: None,
        harden: false,
        env: Vec::new(),
    }
}

/// Starts the children in order, each once the one before is ready; if one fails, stops those
/// already started.
async fn start_all(
    exe: &std::path::Path,
    specs: Vec<Spec>,
    exits_tx: &mpsc::Sender<Exit>,
    exits: &mut mpsc::Receiver<Exit>,
) -> anyhow::Result<Vec<Running>> {
    let mut running: Vec<Running> = Vec::new();
    for (index, spec) in specs.into_iter().enumerate() {
        match start(exe, &spec, index, 0, exits_tx).await {
            Ok(r) => running.push(r),
            Err(e) => {
                stop_all(&mut running, exits).await;
                return Err(e.context(format!("start {}", spec.name)));
            }
        }
    }
    Ok(running)
}

/// Writes the broker's URL (its readiness line; the broker starts last) for clients, and pins
/// the address a restarted broker listens on. Returns the URL.
fn publish_url(state: &StateDir, running: &mut [Running]) -> anyhow::Result<String> {
    let url = running.last().map(|r| r.ready.clone()).unwrap_or_default();
    write_private_file(&state.broker_url_file(), format!("{url}\n").as_bytes())?;
    // A restarted broker listens where the first one did (even when that was port 0), so the URL
    // clients were given stays right.
    if let (Some(broker), Some(addr)) = (running.last_mut(), listen_addr_of(&url)) {
        pin_listen(&mut broker.spec.args, &addr);
    }
    Ok(url)
}

/// Each executor's name and sandbox, as its readiness line reports it (after the first word).
fn sandboxes(running: &[Running]) -> Vec<(String, String)> {
    running
        .iter()
        .filter(|r| r.spec.name.starts_with("executor") && !r.retired)
        .map(|r| {
            (
                r.spec.name.clone(),
                r.ready
                    .split_whitespace()
                    .skip(1)
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        })
        .collect()
}

/// What restarting a child needs.
struct Children<'a> {
    exe: &'a std::path::Path,
    exits_tx: &'a mpsc::Sender<Exit>,
    audit: &'a AuditClient<glovebox_proto::transport::Link>,
}

impl Children<'_> {
    /// Restarts each child that exits, with backoff, until `signal` completes.
    async fn supervise(
        &self,
        running: &mut Vec<Running>,
        exits: &mut mpsc::Receiver<Exit>,
        added: &mut accounts::Added<'_>,
        mut signal: Pin<&mut impl Future<Output = ()>>,
    ) {
        let watcher = accounts::watch_state(added.state);
        let period = match watcher {
            Some(_) => accounts::FOLLOW_WATCHED_PERIOD,
            None => accounts::FOLLOW_PERIOD,
        };
        loop {
            tokio::select! {
                _ = &mut signal => break,
                _ = glovebox_watch::changed_within(watcher.as_ref(), period) => {
                    added.follow(self, running, exits).await
                }
                Some((index, generation, how)) = exits.recv() => {
                    let Some(r) = running.get_mut(index) else { continue };
                    if r.generation != generation || r.retired {
                        continue;
                    }
                    if self.restart(r, index, &how, signal.as_mut()).await.is_break() {
                        break;
                    }
                }
            }
        }
    }

    /// Restarts child `index`, which exited (`how`), after its backoff; `Break` if `signal`
    /// completed first. A failed start is retried as if the child had exited again.
    async fn restart(
        &self,
        r: &mut Running,
        index: usize,
        how: &str,
        signal: Pin<&mut impl Future<Output = ()>>,
    ) -> ControlFlow<()> {
        r.failures = if r.started.elapsed() > STABLE_AFTER {
            1
        } else {
            r.failures + 1
        };
        let delay = backoff(r.failures);
        tracing::warn!(child = %r.spec.name, pid = r.pid, exit = %how, restart_in_ms = delay.as_millis() as u64, "child exited; restarting");
        let restarted = tokio::select! {
            _ = signal => return ControlFlow::Break(()),
            _ = tokio::time::sleep(delay) => start(self.exe, &r.spec.clone(), index, r.generation + 1, self.exits_tx).await,
        };
        match restarted {
            Ok(mut new) => {
                new.failures = r.failures;
                let detail = format!(
                    "{} exited ({how}); restarted as pid {}",
                    r.spec.name, new.pid
                );
                tracing::info!(child = %new.spec.name, pid = new.pid, "child restarted");
                *r = new;
                audit_service(self.audit, Outcome::Restarted, &detail).await;
            }
            Err(e) => {
                tracing::error!(child = %r.spec.name, error = %format!("{e:#}"), "restart failed; will retry");
                r.generation += 1;
                r.started = Instant::now();
                let _ = self
                    .exits_tx
                    .send((index, r.generation, "failed to start".into()))
                    .await;
            }
        }
        ControlFlow::Continue(())
    }
}

/// Refuses a state directory that a job could reach and roots that give too much away (see
/// `placement`), with a message saying what to do instead.
fn check_placement(
    state: &StateDir,
    config: &glovebox_config::Config,
    identities: &[identity::Identity],
    trashes: &[PathBuf],
    home: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let canonical = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    let state_dir = std::fs::canonicalize(state.root())?;
    let mut places = Vec::new();
    for (a, trash) in config.accounts.iter().zip(trashes) {
        let mut roots = Vec::new();
        for r in &a.roots {
            roots.push(
                std::fs::canonicalize(r)
                    .with_context(|| format!("root {} of account {:?}", r.display(), a.id))?,
            );
        }
        places.push(glovebox_gate::placement::AccountPlaces {
            id: a.id.clone(),
            roots,
            trash: canonical(trash),
        });
    }
    let mut extra: Vec<PathBuf> = identities
        .iter()
        .map(|i| canonical(std::path::Path::new(&i.home)))
        .collect();
    extra.extend(home.map(canonical));
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let homes: Vec<PathBuf> = glovebox_gate::placement::homes(&passwd, &extra)
        .iter()
        .map(|h| canonical(h))
        .collect();
    glovebox_gate::placement::check(&state_dir, &places, &homes).map_err(|e| anyhow::anyhow!(e))
}

/// The `host:port` of a `ws://host:port/...` URL.
fn listen_addr_of(url: &str) -> Option<String> {
    let rest = url.strip_prefix("ws://")?;
    Some(rest.split('/').next()?.to_owned())
}

/// Sets `--listen ADDR` in a broker's arguments, replacing any earlier one.
fn pin_listen(args: &mut Vec<String>, addr: &str) {
    if let Some(i) = args.iter().position(|a| a == "--listen") {
        args.drain(i..(i + 2).min(args.len()));
    }
    args.extend(["--listen".to_owned(), addr.to_owned()]);
}

fn backoff(failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(10);
    (BACKOFF_START * factor).min(BACKOFF_MAX)
}

async fn start(
    exe: &std::path::Path,
    spec: &Spec,
    index: usize,
    generation: u64,
    exits: &mpsc::Sender<Exit>,
) -> anyhow::Result<Running> {
    let mut command = Command::new(exe);
    // A group of its own: Ctrl-C in the terminal reaches `up` alone, which audits the stop and
    // stops the children in order (the gate last).
    command.process_group(0);
    match spec.run_as {
        Some((uid, gid)) if spec.harden => {
            // SAFETY: the closure makes only system calls (no allocation, no lock), as is
            // required between fork and exec of a multi-threaded parent.
            #[allow(unsafe_code)]
            unsafe {
                command.pre_exec(move || identity::switch_for_good(uid, gid));
            }
        }
        // As root, std also drops every supplementary group before changing user.
        Some((uid, gid)) => {
            command.uid(uid).gid(gid);
        }
        None => {}
    }
    let mut child = command
        .args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("spawn {}", exe.display()))?;
    let pid = child.id().context("child has no pid")?;
    let mut stdin = child.stdin.take();
    if let (Some(line), Some(pipe)) = (&spec.stdin_line, stdin.as_mut()) {
        pipe.write_all(line.as_bytes()).await?;
        pipe.flush().await?;
    }
    let stdout = child.stdout.take().context("child has no stdout")?;
    let exits = exits.clone();
    tokio::spawn(async move {
        let how = match child.wait().await {
            Ok(status) => status.to_string(),
            Err(e) => format!("wait failed: {e}"),
        };
        let _ = exits.send((index, generation, how)).await;
    });
    let mut reader = BufReader::new(stdout);
    let ready = tokio::time::timeout(READY_TIMEOUT, await_ready(&mut reader))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "{} did not become ready within {READY_TIMEOUT:?}",
                spec.name
            )
        })?
        .with_context(|| spec.name.clone())?;
    let name = spec.name.clone();
    tokio::spawn(async move {
        let mut lines = reader.lines();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("[{name}] {line}");
        }
    });
    Ok(Running {
        spec: spec.clone(),
        pid,
        generation,
        started: Instant::now(),
        stdin,
        ready,
        failures: 0,
        retired: false,
    })
}

/// Stops children in reverse start order: SIGTERM, a grace period, then SIGKILL.
async fn stop_all(running: &mut [Running], exits: &mut mpsc::Receiver<Exit>) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    for (index, r) in running.iter_mut().enumerate().rev() {
        if r.retired {
            continue;
        }
        r.stdin = None;
        let pid = Pid::from_raw(r.pid as i32);
        let _ = kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + STOP_GRACE;
        let mut exited = false;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match tokio::time::timeout(left, exits.recv()).await {
                // This child's exit, not an earlier one of another child still queued (the broker
                // that failed to start, say): until it is seen, the child may still write.
                Ok(Some((who, generation, _))) if who == index && generation == r.generation => {
                    exited = true;
                    break;
                }
                Ok(Some(_)) => continue,
                _ => break,
            }
        }
        if !exited {
            tracing::warn!(child = %r.spec.name, "did not stop in time; killing it");
            let _ = kill(pid, Signal::SIGKILL);
        }
    }
}

async fn audit_service(
    audit: &AuditClient<glovebox_proto::transport::Link>,
    outcome: Outcome,
    detail: &str,
) {
    let event = AuditEvent {
        source: Source::Supervisor.into(),
        kind: RowKind::Service.into(),
        outcome: outcome.into(),
        detail: detail.into(),
        ..Default::default()
    };
    let mut request = tonic::Request::new(event);
    request.set_timeout(Duration::from_secs(5));
    if let Err(status) = audit.clone().append(request).await {
        tracing::error!(error = %status.message(), "could not audit a service event");
    }
}

/// Reads lines from a child's stdout until one starts with `READY `; returns the rest of it.
async fn await_ready<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
) -> anyhow::Result<String> {
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).await?;
        anyhow::ensure!(n > 0, "exited before it was ready");
        if let Some(rest) = line.trim_end().strip_prefix("READY ") {
            return Ok(rest.to_owned());
        }
    }
}

/// Takes the state directory's lock, so that a second `up` on it fails clearly.
pub fn lock(state: &StateDir) -> anyhow::Result<std::fs::File> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let path = state.lock_file();
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("open {}", path.display()))?;
    if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        let mut pid = String::new();
        let _ = file.read_to_string(&mut pid);
        anyhow::bail!(
            "glovebox is already running on state dir {} (pid {}); stop it first or use --state-dir",
            state.root().display(),
            pid.trim()
        );
    }
    file.set_len(0)?;
    file.rewind()?;
    writeln!(file, "{}", std::process::id())?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restarted_broker_keeps_the_address_it_first_bound() {
        assert_eq!(
            listen_addr_of("ws://127.0.0.1:41234/v1/ws").as_deref(),
            Some("127.0.0.1:41234")
        );
        assert_eq!(listen_addr_of("http://x/"), None);
        let mut args: Vec<String> = ["broker", "--listen", "127.0.0.1:0", "--exit-on-stdin-eof"]
            .map(String::from)
            .to_vec();
        pin_listen(&mut args, "127.0.0.1:41234");
        assert_eq!(
            args,
            [
                "broker",
                "--exit-on-stdin-eof",
                "--listen",
                "127.0.0.1:41234"
            ]
        );
        let mut args: Vec<String> = vec!["broker".into()];
        pin_listen(&mut args, "[::1]:7420");
        assert_eq!(args, ["broker", "--listen", "[::1]:7420"]);
    }

    #[test]
    fn each_child_is_handed_its_own_keys_on_stdin() {
        let keys =
            ControlKeys::from_bytes(&[7; glovebox_proto::transport::handshake::KEY_BYTES]).unwrap();
        let state = StateDir::new(std::path::Path::new("/s"));
        let options = UpOptions {
            state_dir: "/s".into(),
            system: None,
            workdir: "/w".into(),
            workdir_option: None,
            listen: Some("127.0.0.1:7420".parse().unwrap()),
            ask_timeout_secs: Some(9),
            trash_dir: "/t".into(),
            home: None,
            otel_env: Vec::new(),
        };
        let me = identity::Identity {
            name: "me".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/me".into(),
            drops: false,
        };
        let gate = gate_spec(&state, &keys, &["a", "b"], std::slice::from_ref(&me));
        assert_eq!(
            gate.stdin_line,
            Some(keys.for_gate(["a", "b"]).to_line()),
            "the gate's handover"
        );
        assert_eq!(
            gate.args,
            ["gate", "--state-dir", "/s", "--exit-on-stdin-eof"]
        );
        let broker = broker_spec(&state, &keys, &["a", "b"], &options);
        assert_eq!(
            broker.stdin_line,
            Some(keys.for_broker(["a", "b"]).to_line())
        );
        assert_eq!(
            broker.args,
            [
                "broker",
                "--state-dir",
                "/s",
                "--exit-on-stdin-eof",
                "--ask-timeout-secs",
                "9",
                "--listen",
                "127.0.0.1:7420"
            ]
        );
        // Without --ask-timeout-secs, the broker takes glovebox.yaml's (or its default).
        let from_config = UpOptions {
            ask_timeout_secs: None,
            ..options
        };
        let broker = broker_spec(&state, &keys, &["a", "b"], &from_config);
        assert!(!broker.args.iter().any(|a| a == "--ask-timeout-secs"));
        let account = glovebox_config::Account {
            id: glovebox_config::AccountId::parse("a").unwrap(),
            workdir: "/w".into(),
            roots: vec!["/w".into()],
            run_as: None,
            owner: None,
            job_env: vec![],
            pack_env: Vec::new(),
            sandbox: Default::default(),
            enabled: true,
            token_hashes: vec![],
            approver_token_hashes: vec![],
        };
        let executor = executor_spec(&state, &account, &me, "/t".as_ref(), "/s", "line\n".into());
        assert_eq!(executor.name, "executor[a]");
        assert_eq!(executor.stdin_line.as_deref(), Some("line\n"));
        assert_eq!((executor.run_as, executor.env.len()), (None, 0));
        let dropping = identity::Identity { drops: true, ..me };
        let executor = executor_spec(&state, &account, &dropping, "/t".as_ref(), "/s", "l".into());
        assert_eq!(executor.run_as, Some((1000, 1000)));
        assert!(
            executor
                .env
                .contains(&("HOME".to_owned(), "/home/me".to_owned()))
        );
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        assert_eq!(backoff(1), BACKOFF_START);
        assert_eq!(backoff(2), BACKOFF_START * 2);
        assert_eq!(backoff(40), BACKOFF_MAX);
    }
}
