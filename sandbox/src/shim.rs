//! The shim: a small process of glovebox's own between its parent (an executor, a pack host) and
//! one contained program (a job's shell, a pack server), and the reason nothing the program
//! starts outlives it.
//!
//! The parent starts `glovebox job-shim` or `glovebox pack-shim`, which call [`run`]. The shim:
//! 1. leaves its parent's session (`setsid`): the program has no controlling terminal;
//! 2. becomes a child subreaper, so every process the program starts stays its descendant;
//! 3. confines itself in the program's Landlock domain (its [`SandboxPlan`]) with the signal and
//!    abstract-socket scopes;
//! 4. starts the program in a further nested domain of scopes only, so nothing it runs can signal
//!    (or ptrace) the shim;
//! 5. waits. When the program exits, when the parent asks (SIGUSR1), or when the parent is gone
//!    (its lifeline: the end of the shim's stdin, or the shim being orphaned), it kills every
//!    process of the program with `kill(-1, SIGKILL)`: with the signal scope that reaches exactly
//!    the processes in the shim's domain and the domains nested in it — the program, whatever it
//!    did (`setsid`, double forks, dropping `GLOVEBOX_JOB`) — and nothing else. SIGTERM is
//!    forwarded the same way. Then it reaps until it has no children, and exits with the
//!    program's status.
//!
//! On a kernel without the scopes (Landlock ABI < 6) `kill(-1)` would reach every process of the
//! user, so the shim falls back to killing its descendants by walking `/proc` (the executor's
//! marker search covers a job that killed its shim), and `up` says which containment is in use.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use landlock::RulesetCreated;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, pthread_sigmask, raise};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::walls::{InForce, Walls};
use crate::{SandboxPlan, apply, scopes_only};

/// How long the shim waits for killed processes to be reaped before it exits anyway.
const REAP_LIMIT: Duration = Duration::from_secs(5);
/// How often an orphaned shim is noticed (see [`Lifeline::Parent`]).
const PARENT_POLL: Duration = Duration::from_millis(100);

/// What the contained program's standard input is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Nothing (a job).
    Null,
    /// The shim's own (a pack server speaks MCP on it).
    Inherit,
    /// A FIFO its parent holds open for writing (an interactive job's input, `exec_input`).
    Fifo(std::path::PathBuf),
}

/// How the shim notices that its parent is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifeline {
    /// The parent holds the other end of the shim's stdin (a job's executor).
    Stdin,
    /// The shim is orphaned (a pack host: the shim's stdin is the pack server's).
    Parent,
}

/// What a shim contains, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimConfig {
    pub plan: SandboxPlan,
    /// The walls beyond the file system: sockets, network, the private `/tmp` (`None`: Landlock
    /// alone, as for pack servers until their walls are raised too).
    pub walls: Option<Walls>,
    /// The program and its arguments (a job: `/bin/sh -c COMMAND`).
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The program's working directory (default: the shim's).
    pub cwd: Option<PathBuf>,
    pub input: Input,
    pub lifeline: Lifeline,
    /// Where the shim writes the cap a job reached ([`crate::caps::Hit::line`]), opened before
    /// the walls are raised (the file lies outside them).
    pub report: Option<PathBuf>,
    /// The program's whole environment, given only at its start (a pack's, so that nothing in
    /// it — a loader variable — acts on the shim itself); `None`: what the shim inherited.
    pub env: Option<Vec<(String, String)>>,
}

/// The prefix under which a pack host hands a pack's environment to its shim: inert for the
/// shim (no loader or runtime reads these names), given to the program without it.
pub const PROGRAM_ENV_PREFIX: &str = "GLOVEBOX_PROGRAM_ENV_";

/// The program's environment out of the shim's own: every `PROGRAM_ENV_PREFIX` variable, without
/// the prefix.
pub fn program_env(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    vars.filter_map(|(k, v)| Some((k.strip_prefix(PROGRAM_ENV_PREFIX)?.to_owned(), v)))
        .collect()
}

/// Exit codes of a shim that could not start its job.
pub const EXIT_SANDBOX_FAILED: i32 = 125;
pub const EXIT_SPAWN_FAILED: i32 = 127;

/// Runs the shim; returns the exit code the process ends with (after mirroring a shell killed
/// by a signal, which does not return).
pub fn run(config: ShimConfig) -> i32 {
    let report = open_report(&config);
    // An interactive job's input is opened where its parent made it, before the job's own
    // namespaces and domain hide that place.
    let input = match program_input(&config.input) {
        Ok(input) => input,
        Err(code) => return code,
    };
    let (scoped, inner, in_force) = match confine(&config) {
        Ok(confined) => confined,
        Err(code) => return code,
    };
    let watched = watched_signals();
    // Blocked here and taken with sigwait below; the shell starts with an empty mask (std clears
    // it in the child before exec).
    if pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&watched), None).is_err() {
        return EXIT_SANDBOX_FAILED;
    }
    let parent = nix::unistd::getppid();
    let shell = match spawn_program(&config, input, inner, &in_force) {
        Ok(pid) => pid,
        Err(code) => return code,
    };
    let watcher = if let Some(walls) = &config.walls {
        let tmp = tmp_watch(&config, walls, in_force.as_ref());
        Some(Watcher::start(walls.caps, tmp, report))
    } else {
        None
    };
    // The lifeline: when the parent is gone, so is the program.
    start_lifeline(config.lifeline, parent);
    let ended = wait_for_shell(&watched, shell, scoped);
    // A last look before the job's processes go: a job whose shell gave up when the kernel held
    // a cap (a fork refused) is over it now.
    if let Some(watcher) = &watcher {
        lock(watcher).look();
    }
    kill_job(scoped);
    exit_code(ended)
}

/// The file the shim reports a cap in, opened (truncated) before the walls hide it; `None` if
/// there is none or it cannot be opened.
fn open_report(config: &ShimConfig) -> Option<std::fs::File> {
    config.report.as_ref().and_then(|path| {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .ok()
    })
}

/// The program's standard input, opened; or the exit code of a shim whose job's input cannot be
/// opened.
fn program_input(input: &Input) -> Result<Stdio, i32> {
    Ok(match input {
        Input::Null => Stdio::null(),
        Input::Inherit => Stdio::inherit(),
        Input::Fifo(path) => match open_fifo(path) {
            Ok(file) => Stdio::from(file),
            Err(e) => {
                eprintln!("glovebox: the job's input {}: {e}", path.display());
                return Err(EXIT_SPAWN_FAILED);
            }
        },
    })
}

/// How the watcher sees the job's temporary space under `walls`: the private tmpfs when the
/// namespaces stand, else the job's scratch directory (if it has one), walked.
fn tmp_watch(config: &ShimConfig, walls: &Walls, in_force: Option<&InForce>) -> TmpWatch {
    match in_force {
        Some(InForce::Namespaces) => TmpWatch::Tmpfs(walls.tmp_size),
        _ => config
            .plan
            .scratch
            .clone()
            .map_or(TmpWatch::None, |dir| TmpWatch::Walk(dir, walls.tmp_size)),
    }
}

/// Starts the thread that asks the shim to stop the program (SIGUSR1) once its parent is gone:
/// the end of the shim's stdin, or the shim orphaned (no longer a child of `parent`).
fn start_lifeline(lifeline: Lifeline, parent: Pid) {
    match lifeline {
        Lifeline::Stdin => std::thread::spawn(|| {
            let mut sink = [0u8; 64];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            let _ = kill(Pid::this(), Signal::SIGUSR1);
        }),
        Lifeline::Parent => std::thread::spawn(move || {
            while nix::unistd::getppid() == parent {
                std::thread::sleep(PARENT_POLL);
            }
            let _ = kill(Pid::this(), Signal::SIGUSR1);
        }),
    };
}

/// Step 5: takes the `watched` signals until the shell has exited (its status) or the shim is
/// asked to stop (`None`); SIGTERM, SIGINT and SIGHUP are passed on to the job as SIGTERM.
fn wait_for_shell(watched: &SigSet, shell: Pid, scoped: bool) -> Option<WaitStatus> {
    let mut ended: Option<WaitStatus> = None;
    while ended.is_none() {
        match watched.wait() {
            Ok(Signal::SIGCHLD) => ended = reap_until_shell(shell),
            Ok(Signal::SIGUSR1) | Err(_) => break,
            Ok(_) => signal_job(scoped, Signal::SIGTERM),
        }
    }
    ended
}

/// The shim's exit code: the shell's own, or by the signal that killed it ([`mirror`]), or that
/// of SIGKILL when the shell was stopped before it ended.
fn exit_code(ended: Option<WaitStatus>) -> i32 {
    match ended {
        Some(WaitStatus::Exited(_, code)) => code,
        Some(WaitStatus::Signaled(_, signal, _)) => mirror(signal),
        _ => 128 + Signal::SIGKILL as i32,
    }
}

/// How the watcher sees the job's temporary space.
enum TmpWatch {
    /// The private `/tmp` tmpfs of this size, which the kernel caps: a full one is reported.
    Tmpfs(u64),
    /// A directory of the machine's `/tmp` and its cap: the job is stopped over it.
    Walk(PathBuf, u64),
    None,
}

/// How often the watcher samples a job whose use changed since the last look, and one whose use
/// stood still (an idle pack server, a job waiting). A job can start a burst at any moment, and
/// between two looks only the kernel's own limits hold it (`RLIMIT_NPROC`, a process's
/// `RLIMIT_DATA`, the tmpfs size), which are far above the job's caps: what it can take before
/// the next look is what its processes fault in meanwhile, a few GB a second per core. So the
/// idle pace stays close to the working one: it spares an idle job three looks in four, and
/// lets a job that wakes into a burst run at most a quarter of a second unwatched.
const WATCH_EVERY: Duration = Duration::from_millis(100);
const WATCH_IDLE: Duration = Duration::from_millis(250);

/// How long the watcher sleeps before its next look, given the job's use at the last two.
fn watch_pace(before: Option<&crate::caps::Usage>, now: &crate::caps::Usage) -> Duration {
    if before == Some(now) {
        WATCH_IDLE
    } else {
        WATCH_EVERY
    }
}

/// The job's caps, what it samples for them, and where it reports the one reached.
struct Watcher {
    caps: crate::caps::Caps,
    tmp: TmpWatch,
    report: Option<std::fs::File>,
    /// A cap was reached and reported: the job is being stopped.
    stopped: bool,
    tmpfs_reported: bool,
    /// The job's use at the last look, and how long to wait for the next.
    last: Option<crate::caps::Usage>,
    pace: Duration,
}

impl Watcher {
    /// Starts the thread that samples the job every [`WATCH_EVERY`] (every [`WATCH_IDLE`] while
    /// its use stands still) against its `caps` and its temporary space (`tmp`), reporting to
    /// `report`; it asks the shim to stop the job (SIGUSR1)
    /// once the job is over a cap.
    fn start(
        caps: crate::caps::Caps,
        tmp: TmpWatch,
        report: Option<std::fs::File>,
    ) -> Arc<Mutex<Watcher>> {
        let watcher = Arc::new(Mutex::new(Watcher {
            caps,
            tmp,
            report,
            stopped: false,
            tmpfs_reported: false,
            last: None,
            pace: WATCH_EVERY,
        }));
        let watching = watcher.clone();
        spawn_named("watcher", move || {
            loop {
                let pace = lock(&watching).pace;
                std::thread::sleep(pace);
                if lock(&watching).look() {
                    let _ = kill(Pid::this(), Signal::SIGUSR1);
                    return;
                }
            }
        });
        watcher
    }

    /// Samples the job once; reports a cap it is over (the report file and the job's stderr, once)
    /// and returns whether the job must be stopped. A full tmpfs is reported and the job goes
    /// on: its writes already fail with `ENOSPC`.
    fn look(&mut self) -> bool {
        use crate::caps::{Hit, TICKS_PER_SECOND, over, sample};
        if self.stopped {
            return false;
        }
        let (walk, walk_cap) = match &self.tmp {
            TmpWatch::Walk(dir, cap) => (Some(dir.as_path()), Some(*cap)),
            _ => (None, None),
        };
        let usage = sample(std::process::id() as i32, walk);
        self.pace = watch_pace(self.last.as_ref(), &usage);
        self.last = Some(usage);
        if let Some(hit) = over(&usage, &self.caps, TICKS_PER_SECOND, walk_cap) {
            self.say(hit);
            self.stopped = true;
            return true;
        }
        if let TmpWatch::Tmpfs(size) = self.tmp
            && !self.tmpfs_reported
            && rustix::fs::statvfs(crate::isolate::PRIVATE_TMP).is_ok_and(|s| s.f_bavail == 0)
        {
            self.tmpfs_reported = true;
            self.say(Hit::Tmp(size));
        }
        false
    }

    fn say(&mut self, hit: crate::caps::Hit) {
        use std::io::Write;
        eprintln!("glovebox: {}", hit.message());
        if let Some(file) = self.report.as_mut() {
            let _ = writeln!(file, "{}", hit.line());
        }
    }
}

/// Starts a thread of the shim named `name` (as `/proc/<pid>/task/<tid>/comm` shows it). A
/// shim that cannot start one of its threads cannot hold its job to its walls: it ends, and its
/// job with it.
fn spawn_named(name: &str, run: impl FnOnce() + Send + 'static) {
    if std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(run)
        .is_err()
    {
        eprintln!("glovebox: the shim could not start its {name} thread");
        std::process::exit(EXIT_SANDBOX_FAILED);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Steps 1 to 3: a session of its own, a child subreaper, its walls (namespaces, or the seccomp
/// fallback) and no capabilities, confined in the program's domain. Returns whether the signal
/// scopes are enforced and, if they are, the inner domain for the shell, and which walls stand;
/// or the exit code of a shim that cannot start its job.
fn confine(config: &ShimConfig) -> Result<(bool, Option<RulesetCreated>, Option<InForce>), i32> {
    let _ = nix::unistd::setsid();
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    let mut plan = config.plan.clone();
    let in_force = config.walls.as_ref().map(|w| (w.raise(&mut plan), w));
    let root = rustix::process::geteuid().is_root();
    if let Some((wall, walls)) = &in_force
        && !wall.starts(walls, root)
    {
        eprintln!(
            "glovebox: a job of root runs only as nobody, in namespaces, and this kernel refused \
             them ({}); set the account's run_as to an unprivileged user",
            wall.describe(walls, root)
        );
        return Err(EXIT_SANDBOX_FAILED);
    }
    let refusals = in_force
        .as_ref()
        .map(|(f, w)| f.refusals(w))
        .unwrap_or_default();
    let filter = match crate::seccomp::program(refusals) {
        Ok(filter) => filter,
        Err(e) => {
            eprintln!("glovebox: the job's system-call filter could not be built: {e}");
            return Err(EXIT_SANDBOX_FAILED);
        }
    };
    if let Err(e) = drop_capabilities() {
        eprintln!("glovebox: the job's capabilities could not be dropped: {e}");
        return Err(EXIT_SANDBOX_FAILED);
    }
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    let applied = match apply(&plan) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("glovebox: the sandbox could not be applied: {e}");
            return Err(EXIT_SANDBOX_FAILED);
        }
    };
    let walled = in_force.as_ref().is_some_and(|(f, w)| f.network_walled(w));
    let in_force = in_force.map(|(f, _)| f);
    if !applied.network_enforced && !walled {
        eprintln!(
            "glovebox: this kernel cannot take the network away (Landlock ABI 4); not starting"
        );
        return Err(EXIT_SANDBOX_FAILED);
    }
    if let Some(filter) = &filter {
        // Landlock set no_new_privs already, unless the kernel has no Landlock.
        let installed = rustix::thread::set_no_new_privs(true)
            .map_err(|e| e.to_string())
            .and_then(|()| crate::seccomp::install(filter).map_err(|e| e.to_string()));
        if let Err(e) = installed {
            eprintln!("glovebox: the job's system-call filter could not be installed: {e}");
            return Err(EXIT_SANDBOX_FAILED);
        }
    }
    // Only with the scopes does kill(-1) stay inside the job; without them, nest nothing.
    if !applied.scoped {
        return Ok((false, None, in_force));
    }
    match scopes_only() {
        Ok(inner) => Ok((true, Some(inner), in_force)),
        Err(e) => {
            eprintln!("glovebox: the job's inner domain could not be prepared: {e}");
            Err(EXIT_SANDBOX_FAILED)
        }
    }
}

/// The signals the shim waits for: its shell's end, and the requests to stop the job.
fn watched_signals() -> SigSet {
    let mut watched = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGUSR1,
    ] {
        watched.add(s);
    }
    watched
}

/// Opens the FIFO at `path` for reading, refusing a link or anything but a FIFO. Opened without
/// waiting for a writer (a parent that already closed its end gives the program an end of input
/// at once), then made blocking for the program.
fn open_fifo(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::OFlags;
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let stat = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::Fifo {
        return Err(std::io::Error::other("not a FIFO"));
    }
    rustix::fs::fcntl_setfl(&fd, OFlags::empty())?;
    Ok(std::fs::File::from(fd))
}

/// Step 4: starts the program, in the `inner` domain if there is one. Returns its pid, or the
/// exit code of a shim that could not start it.
fn spawn_program(
    config: &ShimConfig,
    input: Stdio,
    inner: Option<RulesetCreated>,
    in_force: &Option<InForce>,
) -> Result<Pid, i32> {
    let mut command = Command::new(&config.program);
    command.args(&config.args).stdin(input);
    if let Some(cwd) = &config.cwd {
        command.current_dir(cwd);
    }
    if let Some(env) = &config.env {
        command.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
    }
    if *in_force == Some(InForce::Namespaces) {
        // The private, size-capped /tmp is the program's temporary directory.
        command.env("TMPDIR", crate::isolate::PRIVATE_TMP);
    }
    let shim = nix::unistd::getpid();
    let rlimits = config
        .walls
        .as_ref()
        .map(|w| kernel_limits(&w.caps, in_force.as_ref()));
    let mut inner = inner;
    // SAFETY: runs in the forked child before exec. The shim is single-threaded when it spawns
    // (the lifeline thread starts afterwards), so the allocation `restrict_self` and the error
    // path may do cannot meet a lock held by another thread; the rest are plain system calls.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || {
            // The shim blocks the signals it waits for; the program starts with none blocked
            // (otherwise it could never be stopped with SIGTERM or SIGINT).
            pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
                .map_err(std::io::Error::from)?;
            // Should the shim itself be killed (it never is on purpose), the program goes too.
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)?;
            if nix::unistd::getppid() != shim {
                return Err(std::io::Error::other("the shim is gone"));
            }
            if let Some(limits) = &rlimits {
                for (resource, limit) in limits {
                    rustix::process::setrlimit(
                        *resource,
                        rustix::process::Rlimit {
                            current: Some(*limit),
                            maximum: Some(*limit),
                        },
                    )
                    .map_err(std::io::Error::from)?;
                }
            }
            match inner.take() {
                Some(ruleset) => ruleset
                    .restrict_self()
                    .map(|_| ())
                    .map_err(|e| std::io::Error::other(e.to_string())),
                None => Ok(()),
            }
        });
    }
    match command.spawn() {
        Ok(child) => Ok(Pid::from_raw(child.id() as i32)),
        Err(e) => {
            eprintln!(
                "glovebox: could not start {}: {e}",
                config.program.display()
            );
            Err(EXIT_SPAWN_FAILED)
        }
    }
}

/// What the kernel holds per process of the program: its CPU time and its data, at the job's
/// caps (a process over the memory cap could not be stopped in time by the watcher alone: a
/// single allocation fails instead); with a user namespace of the job's own, the count of its
/// processes too (`RLIMIT_NPROC` counts per user and user namespace, so it is the job's; the
/// shim's own threads are in the count).
fn kernel_limits(
    caps: &crate::caps::Caps,
    in_force: Option<&InForce>,
) -> Vec<(rustix::process::Resource, u64)> {
    use rustix::process::Resource;
    // The CPU limit leaves the watcher a moment to stop (and report) a job at its cap first.
    let mut limits = vec![
        (Resource::Cpu, caps.cpu_seconds.saturating_add(CPU_MARGIN_S)),
        (Resource::Data, caps.memory_bytes.saturating_mul(2)),
    ];
    if in_force == Some(&InForce::Namespaces) {
        // Past the cap by a margin, so that the watcher sees (and reports) the job over it.
        let margin = u64::from(caps.processes / 8).max(8);
        limits.push((
            Resource::Nproc,
            u64::from(caps.processes) + SHIM_TASKS + margin,
        ));
    }
    limits
}

/// Seconds of CPU time a process may use past the job's cap before the kernel stops it.
const CPU_MARGIN_S: u64 = 2;

/// The shim's own tasks (its threads), which share the program's process count.
const SHIM_TASKS: u64 = 4;

/// Leaves the job no capabilities at all, now or after any exec: a job of an executor running
/// as root (dev mode as root) would otherwise keep CAP_SYS_PTRACE, CAP_KILL, CAP_DAC_OVERRIDE and
/// the rest. Dropping the bounding set needs CAP_SETPCAP; a process without it has no
/// capabilities to lose there, and `no_new_privs` keeps it from gaining any.
fn drop_capabilities() -> std::io::Result<()> {
    use rustix::thread::{
        CapabilitySet, CapabilitySets, capabilities, capability_is_in_bounding_set,
        clear_ambient_capability_set, remove_capability_from_bounding_set, set_capabilities,
    };
    let held = capabilities(None)?;
    let can_drop_bounding = held.effective.contains(CapabilitySet::SETPCAP);
    for bit in 0..64u32 {
        let cap = CapabilitySet::from_bits_retain(1u64 << bit);
        if can_drop_bounding && capability_is_in_bounding_set(cap).unwrap_or(false) {
            remove_capability_from_bounding_set(cap)?;
        }
    }
    let _ = clear_ambient_capability_set();
    set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )?;
    Ok(())
}

/// Collects exited children; returns the shell's status once it has exited.
fn reap_until_shell(shell: Pid) -> Option<WaitStatus> {
    let mut found = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return found,
            Ok(status @ (WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _)))
                if pid == shell =>
            {
                found = Some(status)
            }
            Ok(_) => {}
        }
    }
}

/// Sends `signal` to every process of the job (and, without the scopes, to the shim's
/// descendants found in `/proc`).
fn signal_job(scoped: bool, signal: Signal) {
    if scoped {
        // With the signal scope, -1 means "every process in this domain and those nested in it".
        let _ = kill(Pid::from_raw(-1), signal);
    } else {
        for pid in crate::procs::descendants(std::process::id() as i32) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }
}

/// Kills every process of the job and reaps until the shim has no children left.
fn kill_job(scoped: bool) {
    let deadline = Instant::now() + REAP_LIMIT;
    loop {
        signal_job(scoped, Signal::SIGKILL);
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) => continue,
                // No child is left: as a subreaper, the shim had every process of the job as a
                // descendant, so none is left.
                Err(_) => return,
            }
        }
        if Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Ends the shim the way the shell ended: by the same signal (without a core dump), so the
/// executor reports `signaled` with the right number.
fn mirror(signal: Signal) -> i32 {
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
    let _ = raise(signal);
    // Still here: a signal whose disposition is to be ignored in this process (SIGPIPE).
    128 + signal as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::Usage;

    #[test]
    fn the_watcher_slows_only_while_the_jobs_use_stands_still() {
        let idle = Usage {
            processes: 2,
            memory_bytes: 1 << 20,
            cpu_ticks: 40,
            tmp_bytes: 0,
        };
        assert_eq!(watch_pace(None, &idle), WATCH_EVERY, "a first look");
        assert_eq!(watch_pace(Some(&idle), &idle), WATCH_IDLE);
        for busier in [
            Usage {
                cpu_ticks: 41,
                ..idle
            },
            Usage {
                processes: 3,
                ..idle
            },
            Usage {
                memory_bytes: 2 << 20,
                ..idle
            },
            Usage {
                tmp_bytes: 1,
                ..idle
            },
        ] {
            assert_eq!(watch_pace(Some(&idle), &busier), WATCH_EVERY, "{busier:?}");
        }
    }
}
