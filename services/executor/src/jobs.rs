//! The account's exec jobs: each a `/bin/sh -c` under its own shim (`shim`: a session of its
//! own, a nested Landlock domain with signal scopes, its own temporary directory), with an
//! allowlisted environment (plus [`FIXED_ENV`]), output kept in capped buffers, a run-time limit, and nothing left
//! behind when a job ends or is killed. One reaper collects every exit, including orphans that
//! the executor adopts as a child subreaper.

pub mod launcher;
pub mod ring;
pub mod shim;
pub mod tree;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use glovebox_proto::ErrorCode;
use glovebox_proto::audit_row::{Outcome, RowKind};
use rustix::process::WaitOptions;
use serde_json::{Value, json};

use crate::error::OpError;
use crate::sync::lock;
use ring::Ring;

/// A job's stdout or stderr, its newest bytes kept.
type Output = Arc<Mutex<Ring>>;
use std::os::unix::fs::DirBuilderExt;

/// The shell every command runs under, by absolute path.
pub const SHELL: &str = "/bin/sh";
/// Set in every job's environment, over anything inherited: git reads no system-wide
/// configuration (the account's allowlist never carries `GIT_*` variables; `glovebox-config`
/// refuses them).
pub const FIXED_ENV: &[(&str, &str)] = &[("GIT_CONFIG_NOSYSTEM", "1")];
/// Jobs that may run at once per account.
pub const MAX_RUNNING: usize = 8;
/// Finished jobs kept for status and output; the oldest are forgotten first.
pub const MAX_KEPT: usize = 64;
/// Output kept per stream of a job.
pub const OUTPUT_CAP: usize = 1024 * 1024;
/// Time between TERM and KILL when a job is stopped.
pub const KILL_GRACE: Duration = Duration::from_secs(2);

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Running,
    Exited(i32),
    Signaled(i32),
    Killed,
    TimedOut,
}

impl JobState {
    fn name(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Exited(_) => "exited",
            JobState::Signaled(_) => "signaled",
            JobState::Killed => "killed",
            JobState::TimedOut => "timed_out",
        }
    }
}

struct Job {
    id: String,
    command: String,
    cwd: String,
    /// The shim's pid (the job's session and process group).
    pid: i32,
    /// The job's own temporary directory, removed when it ends.
    tmp: PathBuf,
    /// The executor's end of the shim's stdin: dropping it tells the shim to end the job.
    lifeline: Mutex<Option<ChildStdin>>,
    /// An interactive job's input: the executor's end of its FIFO (`None` once closed, and for
    /// a job that reads nothing).
    input: Mutex<Option<std::os::fd::OwnedFd>>,
    /// Whether it was started interactive.
    interactive: bool,
    started: Instant,
    started_at_ms: u64,
    deadline: Instant,
    state: Mutex<(JobState, Option<Instant>)>,
    stdout: Arc<Mutex<Ring>>,
    stderr: Arc<Mutex<Ring>>,
    /// The network the job was given.
    network: &'static str,
    /// Where its shim reports a cap it reached (beside its temporary directory, outside it).
    report: PathBuf,
    launcher: Arc<launcher::Launcher>,
}

impl Job {
    /// The cap the job reached, as its shim reported it.
    fn limit(&self) -> Option<glovebox_sandbox::caps::Hit> {
        let text = std::fs::read_to_string(&self.report).ok()?;
        glovebox_sandbox::caps::Hit::parse(text.lines().next()?)
    }

    fn state(&self) -> (JobState, Option<Instant>) {
        *lock(&self.state)
    }

    /// Records how the job ended, unless an earlier end (kill, timeout) was already recorded.
    fn finish(&self, how: JobState) {
        let mut s = lock(&self.state);
        if s.0 == JobState::Running {
            *s = (how, Some(Instant::now()));
        } else if s.1.is_none() {
            s.1 = Some(Instant::now());
        }
    }

    fn summary(&self) -> Value {
        let (state, ended) = self.state();
        let runtime = ended
            .unwrap_or_else(Instant::now)
            .duration_since(self.started);
        let mut v = json!({
            "job_id": self.id,
            "state": state.name(),
            "command": self.command,
            "cwd": self.cwd,
            "pid": self.pid,
            "started_at_ms": self.started_at_ms,
            "runtime_ms": runtime.as_millis() as u64,
            "stdout_bytes": lock(&self.stdout).total(),
            "stderr_bytes": lock(&self.stderr).total(),
            "network": self.network,
        });
        if let Some(hit) = self.limit() {
            v["limit"] = json!({ "cap": hit.name(), "at": hit.cap(), "message": hit.message() });
        }
        match state {
            JobState::Exited(code) => v["exit_code"] = json!(code),
            JobState::Signaled(sig) => v["signal"] = json!(sig),
            _ => {}
        }
        v
    }
}

/// How the executor starts jobs.
#[derive(Debug, Clone, Default)]
pub struct JobConfig {
    /// The complete environment jobs get (an allowlist chosen by the caller).
    pub env: Vec<(String, String)>,
    /// The glovebox binary, started as `glovebox job-shim` for each job.
    pub shim: PathBuf,
    /// The account's roots, the only directories (besides its temporary one) a job may change.
    pub roots: Vec<PathBuf>,
    /// Where each job's temporary directory is made (the executor's private scratch directory).
    pub scratch: PathBuf,
    /// The account's walls beyond the file system (sockets, network, the private `/tmp`).
    pub walls: glovebox_sandbox::walls::Walls,
    /// What starts and signals shims (from outside the executor's Landlock domain).
    pub launcher: Arc<launcher::Launcher>,
    /// Where a job that reached a cap is recorded (a `job` row of the audit, sent by the
    /// executor's audit task); `None`: not recorded (unit tests).
    pub audit: Option<tokio::sync::mpsc::Sender<glovebox_proto::v1::AuditEvent>>,
}

/// All jobs of one account.
pub struct JobTable {
    jobs: Mutex<Vec<Arc<Job>>>,
    /// Signalled when a job starts, waking the reaper from its idle pace.
    started: Condvar,
    config: JobConfig,
}

impl std::fmt::Debug for JobTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobTable")
            .field("jobs", &lock(&self.jobs).len())
            .finish()
    }
}

impl JobTable {
    pub fn new(config: JobConfig) -> JobTable {
        JobTable {
            jobs: Mutex::new(Vec::new()),
            started: Condvar::new(),
            config,
        }
    }

    /// The account's roots, as jobs are confined to them.
    pub fn roots(&self) -> &[PathBuf] {
        &self.config.roots
    }

    fn find(&self, job_id: &str) -> Result<Arc<Job>, OpError> {
        lock(&self.jobs)
            .iter()
            .find(|j| j.id == job_id)
            .cloned()
            .ok_or_else(|| {
                OpError::new(
                    ErrorCode::NotFound,
                    format!("no job {job_id:?} for this account"),
                )
            })
    }

    /// Starts `command` in `cwd` (canonical, already checked), with an input the executor
    /// writes to if `interactive`. Returns the job's summary.
    pub fn start(
        &self,
        command: &str,
        cwd: &str,
        timeout: Duration,
        network_cap: Option<glovebox_sandbox::isolate::Network>,
        interactive: bool,
    ) -> Result<Value, OpError> {
        let mut jobs = lock(&self.jobs);
        if running_in(&jobs) >= MAX_RUNNING {
            return Err(OpError::new(
                ErrorCode::Busy,
                format!("at most {MAX_RUNNING} jobs may run at once"),
            ));
        }
        let id = new_job_id()?;
        let tmp = self.config.scratch.join(&id);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&tmp)
            .map_err(|e| OpError::io(e, "the job's temporary directory"))?;
        // Managed policy may narrow the account's network for this job (its ticket says).
        let mut walls = self.config.walls.clone();
        if let Some(cap) = network_cap {
            walls.network = walls.network.at_most(cap);
        }
        let report = self.config.scratch.join(format!("{id}.limit"));
        let mut cmd = self.shim_command(&tmp, &walls, &report);
        let input = if interactive {
            let fifo = tmp.join(INPUT_FIFO);
            let writer = make_input(&fifo).inspect_err(|_| {
                let _ = std::fs::remove_dir_all(&tmp);
            })?;
            cmd.arg("--stdin-fifo").arg(&fifo);
            Some(writer)
        } else {
            None
        };
        self.run_in_shim(&mut cmd, command, cwd, &tmp, &id);
        let child = match self.config.launcher.spawn(cmd) {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(OpError::io(e, "the job shim"));
            }
        };
        let (pid, lifeline, stdout, stderr) = collect_output(child);
        let now = Instant::now();
        let job = Arc::new(Job {
            id,
            command: command.to_owned(),
            cwd: cwd.to_owned(),
            pid,
            tmp,
            lifeline: Mutex::new(lifeline),
            input: Mutex::new(input),
            interactive,
            started: now,
            started_at_ms: glovebox_ticket::now_ms().unwrap_or(0),
            deadline: now + timeout,
            state: Mutex::new((JobState::Running, None)),
            stdout,
            stderr,
            network: walls.network.name(),
            report,
            launcher: self.config.launcher.clone(),
        });
        let summary = job.summary();
        jobs.push(job);
        prune(&mut jobs);
        self.started.notify_one();
        Ok(summary)
    }

    /// The job shim's command line up to the job's own: its temporary directory, the account's
    /// roots, the walls and where it reports a cap reached.
    fn shim_command(
        &self,
        tmp: &Path,
        walls: &glovebox_sandbox::walls::Walls,
        report: &Path,
    ) -> Command {
        let mut cmd = Command::new(&self.config.shim);
        cmd.arg("job-shim").arg("--tmp").arg(tmp);
        for root in &self.config.roots {
            cmd.arg("--root").arg(root);
        }
        cmd.args(walls.to_args());
        cmd.arg("--report").arg(report);
        cmd
    }

    /// The job's own command, where it runs and its environment (the account's, the fixed
    /// variables, its `TMPDIR` and the marker its processes are found by), with piped stdio.
    fn run_in_shim(&self, cmd: &mut Command, command: &str, cwd: &str, tmp: &Path, id: &str) {
        cmd.arg("--")
            .arg(command)
            .current_dir(cwd)
            .env_clear()
            .envs(
                self.config
                    .env
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            )
            .envs(FIXED_ENV.iter().copied())
            .env("TMPDIR", tmp)
            .env(tree::MARKER_VAR, id)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }

    /// What an input to job `job_id` is judged by: its command, its working directory, and
    /// whether it takes input at all.
    pub fn facts(&self, job_id: &str) -> Result<(String, String, bool), OpError> {
        let job = self.find(job_id)?;
        Ok((job.command.clone(), job.cwd.clone(), job.interactive))
    }

    /// Writes `input` to an interactive job's input, then closes it if `close`. Never waits: a
    /// job that is not reading (its pipe full) is refused as busy, with what was written said.
    pub fn input(&self, job_id: &str, input: &[u8], close: bool) -> Result<Value, OpError> {
        let job = self.find(job_id)?;
        if !job.interactive {
            return Err(OpError::new(
                ErrorCode::InvalidParams,
                format!("job {job_id} was not started interactive; it reads no input"),
            ));
        }
        let mut held = lock(&job.input);
        let Some(fd) = held.as_ref() else {
            return Err(OpError::new(
                ErrorCode::InvalidParams,
                format!("job {job_id}'s input is closed"),
            ));
        };
        if job.state().0 != JobState::Running {
            return Err(OpError::new(
                ErrorCode::InvalidParams,
                format!("job {job_id} is not running"),
            ));
        }
        let mut written = 0;
        while written < input.len() {
            match rustix::io::write(fd, &input[written..]) {
                Ok(n) => written += n,
                Err(rustix::io::Errno::AGAIN) => {
                    return Err(OpError::new(
                        ErrorCode::Busy,
                        format!(
                            "job {job_id} is not reading its input: {written} of {} bytes written",
                            input.len()
                        ),
                    ));
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(OpError::errno(e, "the job's input")),
            }
        }
        if close {
            *held = None;
        }
        Ok(json!({
            "job_id": job.id,
            "state": job.state().0.name(),
            "written": written,
            "closed": held.is_none(),
        }))
    }

    pub fn status(&self, job_id: &str) -> Result<Value, OpError> {
        Ok(self.find(job_id)?.summary())
    }

    /// Jobs still running.
    pub fn running(&self) -> usize {
        running_in(&lock(&self.jobs))
    }

    pub fn list(&self) -> Value {
        let jobs: Vec<Value> = lock(&self.jobs).iter().map(|j| j.summary()).collect();
        json!({ "jobs": jobs })
    }

    /// Output of a job: the last `lines` lines, or everything since `since`.
    pub fn tail(
        &self,
        job_id: &str,
        stream: glovebox_proto::tools::Stream,
        lines: usize,
        since: Option<u64>,
    ) -> Result<Value, OpError> {
        use glovebox_proto::tools::Stream;
        let job = self.find(job_id)?;
        let read = |ring: &Mutex<Ring>| {
            let ring = lock(ring);
            let chunk = match since {
                Some(offset) => ring.since(offset),
                None => ring.last_lines(lines),
            };
            json!({ "text": chunk.text, "start": chunk.start, "end": ring.total(), "dropped": chunk.dropped })
        };
        let mut v = json!({ "job_id": job.id, "state": job.state().0.name() });
        if matches!(stream, Stream::Stdout | Stream::Both) {
            v["stdout"] = read(&job.stdout);
        }
        if matches!(stream, Stream::Stderr | Stream::Both) {
            v["stderr"] = read(&job.stderr);
        }
        Ok(v)
    }

    /// Stops a job and everything it started: TERM, a grace period, then KILL.
    pub fn kill(&self, job_id: &str) -> Result<Value, OpError> {
        let job = self.find(job_id)?;
        if job.state().0 == JobState::Running {
            {
                let mut s = lock(&job.state);
                *s = (JobState::Killed, None);
            }
            // The shim forwards TERM to every process of the job; after the grace, USR1 makes it
            // kill them all and exit.
            job.launcher.signal(job.pid, rustix::process::Signal::TERM);
            let deadline = Instant::now() + KILL_GRACE;
            while job.state().1.is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            end(&job);
            // Said only once the reaper collected it (KILL cannot be ignored; a process stuck in
            // the kernel can still outlast this).
            let deadline = Instant::now() + REAP_WAIT;
            while job.state().1.is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let mut summary = job.summary();
        let gone = job.state().1.is_some();
        summary["gone"] = gone.into();
        if !gone {
            summary["message"] =
                "the job was killed and has not ended yet; exec_status says when it has".into();
        }
        Ok(summary)
    }

    /// Records an exit the reaper collected; a job that ended takes its descendants with it.
    fn reaped(&self, pid: i32, status: rustix::process::WaitStatus) {
        let job = lock(&self.jobs).iter().find(|j| j.pid == pid).cloned();
        let Some(job) = job else { return };
        let how = match (status.exit_status(), status.terminating_signal()) {
            (Some(code), _) => JobState::Exited(code),
            (_, Some(sig)) => JobState::Signaled(sig),
            _ => return,
        };
        job.finish(how);
        if let (Some(hit), Some(audit)) = (job.limit(), &self.config.audit) {
            // Dropped (and said so) only if the audit task is hopelessly behind.
            if audit.try_send(limit_row(&job, hit)).is_err() {
                tracing::warn!(job = %job.id, "the audit row of a job's cap was dropped");
            }
        }
        // The shim took the job's processes with it; a job that killed its shim on a kernel
        // without signal scopes is found by its marker.
        job.launcher.kill_marked(job.pid, tree::marker(&job.id));
        *lock(&job.lifeline) = None;
        let _ = std::fs::remove_dir_all(&job.tmp);
    }

    /// Kills jobs that ran past their deadline.
    fn enforce_deadlines(&self) {
        let now = Instant::now();
        let late: Vec<Arc<Job>> = lock(&self.jobs)
            .iter()
            .filter(|j| j.state().0 == JobState::Running && now >= j.deadline)
            .cloned()
            .collect();
        for job in late {
            *lock(&job.state) = (JobState::TimedOut, None);
            std::thread::spawn(move || end(&job));
        }
    }

    /// Kills every job whose exit was not collected yet (the executor is stopping). A collected
    /// job took its descendants with it (`reaped`), and its process group id may since have been
    /// reused by processes that are none of its own.
    pub fn kill_everything(&self) {
        let jobs: Vec<Arc<Job>> = lock(&self.jobs).clone();
        for job in jobs {
            let (state, ended) = job.state();
            if ended.is_some() {
                continue;
            }
            if state == JobState::Running {
                *lock(&job.state) = (JobState::Killed, None);
            }
            end(&job);
        }
    }

    /// Collects every exited child (jobs and adopted orphans) and enforces deadlines. Runs on a
    /// dedicated thread for the executor's lifetime: every [`REAP_PACE`] while a job's exit is
    /// still to be collected, else every [`IDLE_REAP_PACE`] (an idle executor stays asleep), woken
    /// at once when a job starts.
    pub fn reap_forever(self: Arc<Self>) {
        loop {
            while let Ok(Some((pid, status))) = rustix::process::wait(WaitOptions::NOHANG) {
                self.reaped(pid.as_raw_nonzero().get(), status);
            }
            self.enforce_deadlines();
            let jobs = lock(&self.jobs);
            let pace = match jobs.iter().any(|j| j.state().1.is_none()) {
                true => REAP_PACE,
                false => IDLE_REAP_PACE,
            };
            let _ = self.started.wait_timeout(jobs, pace);
        }
    }
}

/// The audit row of a job stopped at a cap: the job's command as its subject (rendered and
/// redacted by the gate), `outcome = limit`, the cap in `reason`, the job and the cap in
/// `detail` (`job-… processes 512`). It has no call id: it is not a call, so the `tool_calls`
/// view does not list it.
fn limit_row(job: &Job, hit: glovebox_sandbox::caps::Hit) -> glovebox_proto::v1::AuditEvent {
    glovebox_proto::v1::AuditEvent {
        kind: RowKind::Job.into(),
        tool: "exec_run".into(),
        outcome: Outcome::Limit.into(),
        reason: hit.message(),
        detail: format!("{} {}", job.id, hit.line()),
        subjects: vec![glovebox_proto::v1::Subject::new(
            glovebox_proto::v1::Domain::Exec,
            job.command.clone(),
            glovebox_proto::v1::FileState::default(),
        )],
        duration_ms: job
            .state()
            .1
            .unwrap_or_else(Instant::now)
            .duration_since(job.started)
            .as_millis() as u64,
        ..Default::default()
    }
}

/// How often the reaper looks for exits while a job runs (and so how late a deadline may be
/// enforced), and while none does (an orphan adopted after its job ended is collected then).
const REAP_PACE: Duration = Duration::from_millis(25);
const IDLE_REAP_PACE: Duration = Duration::from_secs(1);

/// How long a shim told to end its job has before it is killed itself.
const SHIM_GRACE: Duration = Duration::from_secs(3);

/// Ends a job now: the shim kills every process of the job and exits (USR1, and its lifeline
/// closed); a shim that does not exit in time is killed, and the job's marked processes with it.
/// How long `kill` waits, after the last signal, for the reaper to collect the job.
const REAP_WAIT: Duration = Duration::from_secs(2);

fn end(job: &Job) {
    job.launcher.signal(job.pid, rustix::process::Signal::USR1);
    *lock(&job.lifeline) = None;
    let deadline = Instant::now() + SHIM_GRACE;
    while job.state().1.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if job.state().1.is_none() {
        job.launcher.signal(job.pid, rustix::process::Signal::KILL);
        job.launcher.kill_marked(job.pid, tree::marker(&job.id));
    }
}

/// Makes the executor the reaper of its jobs' orphans, so that they can be found and killed.
pub fn become_subreaper() -> std::io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(std::io::Error::from)
}

fn pump(mut source: impl Read + Send + 'static, ring: Arc<Mutex<Ring>>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = source.read(&mut buf) {
            if n == 0 {
                break;
            }
            lock(&ring).push(&buf[..n]);
        }
    });
}

/// The name of an interactive job's input FIFO in its temporary directory.
const INPUT_FIFO: &str = ".glovebox-input";

/// Makes the FIFO at `path` (0600) and opens it for writing without waiting for a reader
/// (`O_RDWR`, which a FIFO allows on Linux), non-blocking: what the executor writes an
/// interactive job's input to.
fn make_input(path: &Path) -> Result<std::os::fd::OwnedFd, OpError> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .map_err(|e| OpError::errno(e, "the job's input"))?;
    rustix::fs::open(
        path,
        OFlags::RDWR | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| OpError::errno(e, "the job's input"))
}

fn running_in(jobs: &[Arc<Job>]) -> usize {
    jobs.iter()
        .filter(|j| j.state().0 == JobState::Running)
        .count()
}

fn prune(jobs: &mut Vec<Arc<Job>>) {
    while jobs.len() > MAX_KEPT {
        match jobs.iter().position(|j| j.state().0 != JobState::Running) {
            Some(i) => {
                let forgotten = jobs.remove(i);
                let _ = std::fs::remove_file(&forgotten.report);
            }
            None => break,
        }
    }
}

fn new_job_id() -> Result<String, OpError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|_| OpError::new(ErrorCode::Internal, "no randomness for a job id"))?;
    Ok(format!("job-{}", hex::encode(bytes)))
}

/// A started job's pid, its lifeline (the shim's stdin: the job ends when it closes) and its
/// output, pumped into two rings. The reaper collects the exit status; the `Child` handle is not
/// waited on.
fn collect_output(mut child: std::process::Child) -> (i32, Option<ChildStdin>, Output, Output) {
    let pid = child.id() as i32;
    let lifeline = child.stdin.take();
    let stdout = Arc::new(Mutex::new(Ring::new(OUTPUT_CAP)));
    let stderr = Arc::new(Mutex::new(Ring::new(OUTPUT_CAP)));
    if let Some(out) = child.stdout.take() {
        pump(out, stdout.clone());
    }
    if let Some(err) = child.stderr.take() {
        pump(err, stderr.clone());
    }
    (pid, lifeline, stdout, stderr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_gets_the_fixed_environment_over_what_it_inherits() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // A stand-in for `glovebox job-shim` (tested end to end): runs what follows `--`.
        let shim = dir.path().join("shim");
        std::fs::write(
            &shim,
            "#!/bin/sh\nwhile [ \"$1\" != -- ]; do shift; done; shift; exec /bin/sh -c \"$1\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        let scratch = dir.path().join("scratch");
        std::fs::create_dir(&scratch).unwrap();
        let table = JobTable::new(JobConfig {
            env: vec![
                ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
                ("GIT_CONFIG_NOSYSTEM".to_owned(), "0".to_owned()),
            ],
            shim,
            roots: vec![dir.path().to_owned()],
            scratch,
            ..JobConfig::default()
        });
        table
            .start(
                "env > env.tmp && mv env.tmp env.txt",
                dir.path().to_str().unwrap(),
                Duration::from_secs(10),
                None,
                false,
            )
            .unwrap();
        let file = dir.path().join("env.txt");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !file.exists() {
            assert!(
                Instant::now() < deadline,
                "the job did not write its environment"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let env = std::fs::read_to_string(file).unwrap();
        let git: Vec<&str> = env.lines().filter(|l| l.starts_with("GIT_")).collect();
        assert_eq!(git, ["GIT_CONFIG_NOSYSTEM=1"], "{env}");
        table.kill_everything();
    }
}
