//! glovebox without a terminal to hold it: `up --detach` (the same `up`, in a session of its
//! own, its output appended to `<state>/glovebox.log`), `restart`, and `logs [-f]` (that file,
//! or the journal when a systemd unit runs glovebox). Under a unit, `restart` and `logs` ask
//! systemd, which owns the process and its output.
//!
//! What to do is decided from facts ([`Runner`], [`log_source`]), pure; the rest is process
//! spawning and file reading.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use glovebox_config::StateDir;

use crate::shared_args::StateArgs;
use crate::{Env, outln};

/// `glovebox restart`.
#[derive(clap::Args, Debug)]
pub(crate) struct RestartArgs {
    #[command(flatten)]
    pub(crate) state: StateArgs,
    /// The system unit (`systemctl restart glovebox`).
    #[arg(long, conflicts_with = "state_dir")]
    pub(crate) system: bool,
}

/// `glovebox logs`.
#[derive(clap::Args, Debug)]
pub(crate) struct LogsArgs {
    #[command(flatten)]
    pub(crate) state: StateArgs,
    /// The system unit's journal.
    #[arg(long, conflicts_with = "state_dir")]
    pub(crate) system: bool,
    /// Keep printing what is added, until Ctrl-C.
    #[arg(short, long)]
    pub(crate) follow: bool,
    /// How many lines from the end to print first.
    #[arg(short = 'n', long, value_name = "N", default_value_t = DEFAULT_LINES)]
    pub(crate) lines: usize,
}

/// How long `up --detach` waits for glovebox to be up.
const START_WAIT: Duration = Duration::from_secs(60);
/// A log longer than this at a start is kept as `glovebox.log.1` (the one before is dropped).
const MAX_LOG_BYTES: u64 = 16 * 1024 * 1024;
/// Lines `logs` prints from the end by default.
pub const DEFAULT_LINES: usize = 50;

/// `<state>/glovebox.log.pid`: the pid of the `up` that `up --detach` started last.
fn detached_pid_file(state: &StateDir) -> PathBuf {
    state.root().join("glovebox.log.pid")
}

fn detached_pid(state: &StateDir) -> Option<i32> {
    std::fs::read_to_string(detached_pid_file(state))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The hidden flag of the `up` that `up --detach` starts.
pub const IN_BACKGROUND: &str = "--in-background";

/// Makes this process (the `up` started by `up --detach`) the leader of a session of its own.
pub fn leave_the_terminal() -> anyhow::Result<()> {
    rustix::process::setsid().context("start a session of its own")?;
    Ok(())
}

/// `<state>/glovebox.log`: what a detached `up` prints.
pub fn log_file(state: &StateDir) -> PathBuf {
    state.root().join("glovebox.log")
}

/// Who runs the glovebox of a state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runner {
    /// Nothing runs.
    Nobody,
    /// A systemd unit (its name), per the process's cgroup.
    Unit(String),
    /// A `glovebox up` of its own (a terminal, or `up --detach`).
    Process(i32),
}

/// The unit a process runs in, by its `/proc/<pid>/cgroup` text: the last `*.service` of its
/// path (`.../user@1000.service/app.slice/glovebox.service` → `glovebox.service`), if that is
/// glovebox's own unit.
pub fn unit_of(cgroup: &str) -> Option<String> {
    let path = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let unit = path.rsplit('/').find(|part| part.ends_with(".service"))?;
    unit.starts_with("glovebox").then(|| unit.to_owned())
}

/// Who runs the glovebox of `state` now.
pub fn runner(state: &StateDir) -> Runner {
    match crate::status::running_pid(state) {
        None => Runner::Nobody,
        Some(pid) => {
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            match unit_of(&cgroup) {
                Some(unit) => Runner::Unit(unit),
                None => Runner::Process(pid),
            }
        }
    }
}

/// Where `logs` reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogSource {
    /// The journal of a unit (`user`: the user's manager).
    Journal { unit: String, user: bool },
    /// The detached `up`'s file.
    File(PathBuf),
    /// Nowhere glovebox keeps: it prints to the terminal that started it.
    Terminal,
    /// Nothing runs, and no detached run left a log.
    None,
}

/// Where the log of `runner` is: a unit's journal; else the log file when there is one; else
/// the terminal of a `glovebox up` run in the foreground (`system`: the system unit's journal).
pub fn log_source(runner: &Runner, file: Option<PathBuf>, system: bool) -> LogSource {
    match (runner, file) {
        _ if system => LogSource::Journal {
            unit: "glovebox.service".to_owned(),
            user: false,
        },
        (Runner::Unit(unit), _) => LogSource::Journal {
            unit: unit.clone(),
            user: true,
        },
        (_, Some(file)) => LogSource::File(file),
        (Runner::Nobody, None) => LogSource::None,
        (Runner::Process(_), None) => LogSource::Terminal,
    }
}

/// `glovebox up --detach`: starts `up` with `args` (its own arguments, without `--detach`) in a
/// session of its own, its output appended to the log file, and returns once it is up (exit 0)
/// or has failed (exit 1, with the end of its log).
pub fn detach(state: &StateDir, args: &[String]) -> anyhow::Result<ExitCode> {
    if let Some(pid) = crate::status::running_pid(state) {
        anyhow::bail!(
            "glovebox already runs on {} (pid {pid}): `glovebox restart` starts it again",
            state.root().display()
        );
    }
    glovebox_config::create_private_dir(state.root())?;
    let log = log_file(state);
    keep_log_short(&log)?;
    let out = open_log(&log)?;
    let start = out.metadata()?.len();
    // `--in-background`: it leaves this terminal's session first (no Ctrl-C or hangup of the
    // terminal reaches it).
    let mut child = Command::new(std::env::current_exe()?)
        .arg("up")
        .arg(IN_BACKGROUND)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("start glovebox up")?;
    let pid = child.id() as i32;
    glovebox_config::write_private_file(&detached_pid_file(state), format!("{pid}\n").as_bytes())?;
    let deadline = Instant::now() + START_WAIT;
    loop {
        let said = read_from(&log, start)?;
        if crate::status::running_pid(state) == Some(pid) && said.contains("glovebox is up") {
            for line in said
                .lines()
                .filter(|l| l.starts_with("  ") || l.starts_with("glovebox"))
            {
                outln!("{line}");
            }
            outln!(
                "running in the background (pid {pid}); its log: {} (`glovebox logs -f`); \
                 `glovebox stop` stops it",
                log.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
        if let Some(status) = child.try_wait()? {
            eprintln!(
                "glovebox up did not start ({status}); the end of {}:",
                log.display()
            );
            for line in last_lines(&said, 20) {
                eprintln!("  {line}");
            }
            // As a foreground `up` that cannot start: an error (README, exit codes).
            return Ok(ExitCode::from(2));
        }
        if Instant::now() > deadline {
            eprintln!(
                "glovebox up (pid {pid}) is not up after {}s; it keeps trying: see {}",
                START_WAIT.as_secs(),
                log.display()
            );
            return Ok(ExitCode::from(1));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The arguments a running `up` was started with (its command line after `up`, without
/// `--in-background`), to start it again as it was.
pub fn up_arguments(command_line: &[String]) -> Vec<String> {
    command_line
        .iter()
        .skip_while(|a| a.as_str() != "up")
        .skip(1)
        .filter(|a| a.as_str() != IN_BACKGROUND)
        .cloned()
        .collect()
}

/// The state directory `restart` and `logs` act on: the system service's with `--system`, else
/// `--state-dir`'s or the default one.
fn state_of(env: &Env, state: &StateArgs, system: bool) -> StateDir {
    StateDir::new(match system {
        true => PathBuf::from(glovebox_config::system::STATE_DIR),
        false => env.state_dir(state),
    })
}

/// `glovebox restart`: a unit's through systemd; otherwise stops the running `up` (if any) and
/// starts it detached, with the arguments it ran with (on the same state directory).
pub async fn restart(env: &Env, args: RestartArgs) -> anyhow::Result<ExitCode> {
    let system = args.system;
    let state = &state_of(env, &args.state, system);
    let runner = runner(state);
    if system || matches!(runner, Runner::Unit(_)) {
        let unit = match &runner {
            Runner::Unit(unit) => unit.clone(),
            _ => "glovebox.service".to_owned(),
        };
        let mut systemctl = Command::new("systemctl");
        if !system {
            systemctl.arg("--user");
        }
        let status = systemctl
            .args(["restart", &unit])
            .status()
            .context("run systemctl")?;
        return Ok(if status.success() {
            outln!("restarted {unit}");
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let mut up_args = vec!["--state-dir".to_owned(), state.root().display().to_string()];
    if let Runner::Process(pid) = runner {
        let ran_with = up_arguments(&crate::status::command_line(pid));
        if ran_with.iter().any(|a| a == "--state-dir") {
            up_args = ran_with;
        } else {
            up_args.extend(ran_with);
        }
        let stopped = crate::status::stop(state.root()).await?;
        if stopped != ExitCode::SUCCESS {
            return Ok(stopped);
        }
    }
    detach(state, &up_args)
}

/// `glovebox logs [-f] [-n N]`.
pub async fn logs(env: &Env, args: LogsArgs) -> anyhow::Result<ExitCode> {
    let LogsArgs {
        state,
        system,
        follow,
        lines,
    } = args;
    let state = &state_of(env, &state, system);
    let runner = runner(state);
    let file = log_file(state);
    // A foreground `up` never writes the file: it is the running one's only if `up --detach`
    // started that process.
    let current = match &runner {
        Runner::Process(pid) => detached_pid(state) == Some(*pid),
        _ => file.exists(),
    };
    let file = current.then_some(file);
    match log_source(&runner, file, system) {
        LogSource::Journal { unit, user } => {
            let mut journal = Command::new("journalctl");
            if user {
                journal.arg("--user");
            }
            journal
                .args(["--unit", &unit, "--lines", &lines.to_string(), "--no-pager"])
                .args(follow.then_some("--follow"));
            let status = journal.status().context("run journalctl")?;
            Ok(if status.success() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        LogSource::Terminal => {
            anyhow::bail!(
                "this glovebox prints its log to the terminal that ran `glovebox up`; start it \
                 with `glovebox up --detach` (or the user unit) to keep a log"
            )
        }
        LogSource::None => {
            anyhow::bail!("no log yet: glovebox has not run detached here (`glovebox up --detach`)")
        }
        LogSource::File(path) => {
            let text = read_from(&path, 0)?;
            let mut stdout = std::io::stdout().lock();
            for line in last_lines(&text, lines) {
                writeln!(stdout, "{line}")?;
            }
            stdout.flush()?;
            if follow {
                follow_file(&path, text.len() as u64).await?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Prints what is appended to `path` from `offset` on, until interrupted (a file that shrank
/// was started again: read from its start).
async fn follow_file(path: &Path, mut offset: u64) -> anyhow::Result<()> {
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    loop {
        let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        if len < offset {
            offset = 0;
        }
        if len > offset {
            let text = read_from(path, offset)?;
            offset += text.len() as u64;
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(text.as_bytes())?;
            stdout.flush()?;
        }
        tokio::select! {
            _ = interrupt.recv() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

/// The last `n` lines of `text`.
pub fn last_lines(text: &str, n: usize) -> Vec<&str> {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(n)..].to_vec()
}

/// The text of `path` from byte `offset` on (at most the log's cap; invalid UTF-8 replaced).
fn read_from(path: &Path, offset: u64) -> anyhow::Result<String> {
    let mut file = std::fs::File::open(path).with_context(|| format!("read {}", path.display()))?;
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::new();
    file.take(MAX_LOG_BYTES).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The log for appending, private to its owner.
fn open_log(path: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .with_context(|| format!("open {}", path.display()))
}

/// Moves a log past its cap aside (`glovebox.log.1`), so it never grows without end.
fn keep_log_short(path: &Path) -> anyhow::Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() > MAX_LOG_BYTES) {
        let mut old = path.as_os_str().to_owned();
        old.push(".1");
        std::fs::rename(path, PathBuf::from(old))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_is_read_from_the_cgroup() {
        let cases = [
            (
                "0::/user.slice/user-1000.slice/user@1000.service/app.slice/glovebox.service\n",
                Some("glovebox.service"),
            ),
            (
                "0::/system.slice/glovebox.service\n",
                Some("glovebox.service"),
            ),
            // A terminal's session, or another program's unit.
            ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
            (
                "0::/user.slice/user-1000.slice/user@1000.service/app.slice/tmux.service\n",
                None,
            ),
            ("", None),
        ];
        for (cgroup, want) in cases {
            assert_eq!(unit_of(cgroup).as_deref(), want, "{cgroup}");
        }
    }

    #[test]
    fn the_log_is_where_the_runner_keeps_it() {
        let file = PathBuf::from("/s/glovebox.log");
        let unit = Runner::Unit("glovebox.service".into());
        let journal = |user| LogSource::Journal {
            unit: "glovebox.service".into(),
            user,
        };
        assert_eq!(log_source(&unit, Some(file.clone()), false), journal(true));
        assert_eq!(log_source(&Runner::Nobody, None, true), journal(false));
        assert_eq!(
            log_source(&Runner::Process(7), Some(file.clone()), false),
            LogSource::File(file.clone())
        );
        assert_eq!(
            log_source(&Runner::Nobody, Some(file.clone()), false),
            LogSource::File(file)
        );
        assert_eq!(
            log_source(&Runner::Process(7), None, false),
            LogSource::Terminal
        );
        assert_eq!(log_source(&Runner::Nobody, None, false), LogSource::None);
    }

    #[test]
    fn restart_starts_up_with_the_arguments_it_ran_with() {
        let line = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            up_arguments(&line(
                "/usr/bin/glovebox up --in-background --state-dir /s --listen 127.0.0.1:0"
            )),
            line("--state-dir /s --listen 127.0.0.1:0")
        );
        assert!(up_arguments(&line("/usr/bin/glovebox up")).is_empty());
        assert!(up_arguments(&line("/usr/bin/glovebox gate --state-dir /s")).is_empty());
    }

    #[test]
    fn the_last_lines_are_kept() {
        assert_eq!(last_lines("a\nb\nc\n", 2), ["b", "c"]);
        assert_eq!(last_lines("a\n", 5), ["a"]);
        assert!(last_lines("", 3).is_empty());
    }
}
