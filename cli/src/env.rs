//! The process's environment, read once at start (`Env::read`) and passed down as plain values:
//! the directories, the user, the variables a job may inherit.

use std::path::PathBuf;

use glovebox_proto::ws::Role;

use crate::client;
use crate::shared_args::{ClientArgs, LayoutArgs, StateArgs};

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
    pub(crate) fn read() -> Env {
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
    pub(crate) fn telemetry(
        &self,
        raw: &glovebox_config::telemetry::RawTelemetry,
    ) -> Result<glovebox_config::telemetry::Telemetry, glovebox_config::Invalid> {
        glovebox_config::telemetry::Telemetry::validate(raw, |k| {
            self.otel_env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        })
    }

    pub(crate) fn state_dir(&self, args: &StateArgs) -> PathBuf {
        self.absolute(
            args.state_dir
                .clone()
                .unwrap_or_else(|| self.default_state_dir.clone()),
        )
    }

    /// The layout of a service's state: user mode's, or system mode's when `layout` names it.
    pub(crate) fn layout(
        &self,
        state: &StateArgs,
        layout: LayoutArgs,
    ) -> glovebox_config::StateDir {
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
    pub(crate) fn absolute(&self, path: PathBuf) -> PathBuf {
        if path.is_absolute() {
            path
        } else {
            self.cwd.join(path)
        }
    }

    /// The state a command changes: the user's, or with `system` the system service's.
    pub(crate) fn state_for(
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
    pub(crate) fn system_state(
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
    pub(crate) fn system_runtime(&self, runtime_dir: Option<PathBuf>) -> glovebox_config::StateDir {
        let runtime = self.absolute(
            runtime_dir.unwrap_or_else(|| PathBuf::from(glovebox_config::system::RUNTIME_DIR)),
        );
        glovebox_config::StateDir::system("/", &runtime, "/")
    }

    /// Where a client command connects, and with the credential of `role`.
    pub(crate) fn target(&self, client: ClientArgs, role: Role) -> anyhow::Result<client::Target> {
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

#[cfg(test)]
impl Env {
    /// A user's environment for tests: the current directory `cwd`, the default state directory
    /// `state`, nothing else set.
    pub(crate) fn fixed(cwd: &str, state: &str) -> Env {
        Env {
            default_state_dir: PathBuf::from(state),
            cwd: PathBuf::from(cwd),
            shell: "/bin/sh".to_owned(),
            timezone: "UTC".to_owned(),
            log_filter: "info".to_owned(),
            job_env: Vec::new(),
            environment: Vec::new(),
            trash_dir: PathBuf::from("/home/u/.local/share/Trash"),
            home: Some(PathBuf::from("/home/u")),
            otel_env: Vec::new(),
        }
    }
}
