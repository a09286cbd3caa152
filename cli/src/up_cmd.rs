//! `glovebox up`: what the command line asks of the supervisor ([`supervisor::UpOptions`]), in
//! user or system mode, or with `--detach` the same `up` started in the background
//! (`background::detach`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::shared_args::StateArgs;
use crate::{Env, background};
use glovebox_supervisor as supervisor;

/// `glovebox up`.
#[derive(clap::Args, Debug)]
pub(crate) struct UpArgs {
    #[command(flatten)]
    pub(crate) state: StateArgs,
    /// Workdir of the account created for you on first start (default: the current
    /// directory); on later starts it must be that account's workdir.
    #[arg(long, value_name = "DIR")]
    pub(crate) workdir: Option<PathBuf>,
    /// Broker address (loopback only; port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<SocketAddr>,
    /// Seconds an approver has to answer an ask, 1 to 3600 (default: `limits.ask_timeout_secs`
    /// of glovebox.yaml, else 25).
    #[arg(long, value_name = "SECS")]
    pub(crate) ask_timeout_secs: Option<u64>,
    /// System mode (as root, what the system unit runs): the gate, the broker and each
    /// account's executor under their own OS users; config, managed policy, state and
    /// sockets in /etc/glovebox, /var/lib/glovebox and /run/glovebox.
    #[arg(long)]
    pub(crate) system: bool,
    /// System mode: the configuration file (default: /etc/glovebox/glovebox.yaml).
    #[arg(long, value_name = "FILE", requires = "system")]
    pub(crate) config: Option<PathBuf>,
    /// System mode: the runtime directory for sockets (default: /run/glovebox).
    #[arg(long, value_name = "DIR", requires = "system")]
    pub(crate) runtime_dir: Option<PathBuf>,
    /// System mode: the managed policy directory (default: /etc/glovebox/policy.d).
    #[arg(long, value_name = "DIR", requires = "system")]
    pub(crate) policy_dir: Option<PathBuf>,
    /// Run in the background: return once glovebox is up, its output appended to
    /// <state>/glovebox.log (`glovebox logs`); `glovebox stop` stops it.
    #[arg(long, conflicts_with = "system")]
    pub(crate) detach: bool,
    /// Set by `--detach` on the `up` it starts: leave the terminal's session first.
    #[arg(long, hide = true)]
    pub(crate) in_background: bool,
}

/// `glovebox up`: supervise in this process until stopped, or with `--detach` return once the
/// `up` started in the background is.
pub async fn run(env: &Env, args: UpArgs) -> anyhow::Result<ExitCode> {
    if args.in_background {
        background::leave_the_terminal()?;
    }
    if args.detach {
        let state = glovebox_config::StateDir::new(env.state_dir(&args.state));
        return background::detach(&state, &detach_arguments(env, &state, args));
    }
    supervisor::up(options(env, args), Box::new(crate::banner::announce)).await
}

/// The arguments the `up` started by `--detach` gets: the state directory, and the options
/// given here, made absolute (it runs from another directory).
fn detach_arguments(env: &Env, state: &glovebox_config::StateDir, args: UpArgs) -> Vec<String> {
    let mut arguments = vec!["--state-dir".to_owned(), state.root().display().to_string()];
    if let Some(w) = args.workdir {
        arguments.extend([
            "--workdir".to_owned(),
            env.absolute(w).display().to_string(),
        ]);
    }
    if let Some(l) = args.listen {
        arguments.extend(["--listen".to_owned(), l.to_string()]);
    }
    if let Some(s) = args.ask_timeout_secs {
        arguments.extend(["--ask-timeout-secs".to_owned(), s.to_string()]);
    }
    arguments
}

/// What the supervisor is to run: system mode's files with `--system` (each path as given, or
/// its default), the state directory (system mode's own unless `--state-dir` names one), and the
/// workdir of an account a first start creates.
fn options(env: &Env, args: UpArgs) -> supervisor::UpOptions {
    let workdir_option = args.workdir.map(|w| env.absolute(w));
    let system = args.system.then(|| {
        use glovebox_config::system as d;
        let or = |p: Option<PathBuf>, default: &str| {
            env.absolute(p.unwrap_or_else(|| PathBuf::from(default)))
        };
        supervisor::SystemPaths {
            config: or(args.config, d::CONFIG_FILE),
            runtime_dir: or(args.runtime_dir, d::RUNTIME_DIR),
            policy_dir: or(args.policy_dir, d::POLICY_DIR),
        }
    });
    let state_dir = match (&system, &args.state.state_dir) {
        (Some(_), None) => PathBuf::from(glovebox_config::system::STATE_DIR),
        _ => env.state_dir(&args.state),
    };
    supervisor::UpOptions {
        state_dir,
        system,
        workdir: workdir_option.clone().unwrap_or_else(|| env.cwd.clone()),
        workdir_option,
        listen: args.listen,
        ask_timeout_secs: args.ask_timeout_secs,
        trash_dir: env.trash_dir.clone(),
        home: env.home.clone(),
        otel_env: env.otel_env.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::Parser;

    use super::*;
    use crate::args::{Cli, Command};

    fn up(line: &[&str]) -> UpArgs {
        let cli = Cli::try_parse_from(["glovebox", "up"].iter().chain(line));
        match cli.map(|c| c.command) {
            Ok(Command::Up(args)) => args,
            other => panic!("not an up: {other:?}"),
        }
    }

    fn env() -> Env {
        Env::fixed("/work", "/home/u/.local/state/glovebox")
    }

    #[test]
    fn user_mode_runs_in_the_default_state_with_the_current_directory() {
        let o = options(&env(), up(&[]));
        assert_eq!(o.state_dir, Path::new("/home/u/.local/state/glovebox"));
        assert!(o.system.is_none());
        assert_eq!(o.workdir, Path::new("/work"));
        assert_eq!(o.workdir_option, None);
        assert_eq!(o.trash_dir, Path::new("/home/u/.local/share/Trash"));
    }

    #[test]
    fn relative_paths_are_made_absolute() {
        let o = options(&env(), up(&["--state-dir", "s", "--workdir", "w"]));
        assert_eq!(o.state_dir, Path::new("/work/s"));
        assert_eq!(o.workdir, Path::new("/work/w"));
        assert_eq!(o.workdir_option.as_deref(), Some(Path::new("/work/w")));
    }

    #[test]
    fn system_mode_uses_its_own_places_unless_named() {
        let o = options(&env(), up(&["--system"]));
        assert_eq!(o.state_dir, Path::new("/var/lib/glovebox"));
        let paths = o.system.expect("system mode");
        assert_eq!(paths.config, Path::new("/etc/glovebox/glovebox.yaml"));
        assert_eq!(paths.runtime_dir, Path::new("/run/glovebox"));
        assert_eq!(paths.policy_dir, Path::new("/etc/glovebox/policy.d"));
        let o = options(
            &env(),
            up(&["--system", "--state-dir", "/s", "--config", "c.yaml"]),
        );
        assert_eq!(o.state_dir, Path::new("/s"));
        let paths = o.system.expect("system mode");
        assert_eq!(paths.config, Path::new("/work/c.yaml"));
    }

    #[test]
    fn detached_up_gets_the_state_and_the_options_given() {
        let env = env();
        let args = up(&[
            "--detach",
            "--workdir",
            "w",
            "--listen",
            "127.0.0.1:0",
            "--ask-timeout-secs",
            "5",
        ]);
        let state = glovebox_config::StateDir::new(env.state_dir(&args.state));
        assert_eq!(
            detach_arguments(&env, &state, args),
            [
                "--state-dir",
                "/home/u/.local/state/glovebox",
                "--workdir",
                "/work/w",
                "--listen",
                "127.0.0.1:0",
                "--ask-timeout-secs",
                "5"
            ]
        );
    }

    #[test]
    fn system_options_need_system_and_detach_excludes_it() {
        assert!(Cli::try_parse_from(["glovebox", "up", "--config", "c"]).is_err());
        assert!(Cli::try_parse_from(["glovebox", "up", "--system", "--detach"]).is_err());
    }
}
