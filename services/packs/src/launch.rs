//! Starting one pack server: its secrets from the gate, its environment, its command found on
//! the owner's `PATH`, then `glovebox pack-shim` (which confines it, see `glovebox_sandbox::shim`)
//! spawned as an MCP stdio server through rmcp's child-process transport — or, for an HTTP pack,
//! its headers resolved and its endpoint reached (`http.rs`) — initialized, and its tools listed,
//! all within [`START_TIMEOUT`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use glovebox_config::mcp_json::PackDef;
use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use tokio::sync::OnceCell;

use crate::PacksConfig;
use crate::environment::{HostEnv, describe_missing, login_path, pack_env, pack_headers};
use crate::gate_link::GateLink;
use crate::places::{find_command, install_grant};
use crate::progress::ProgressRelay;
use crate::stderr::{Tail, spawn_copy};

/// How long a pack has to start: spawn, initialize and list its tools.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Most tools one pack may offer (more are not listed, and the pack says so).
pub const MAX_TOOLS: usize = 512;

/// Initializes the MCP session over `transport` and lists the server's tools (at most
/// [`MAX_TOOLS`]), each step within [`START_TIMEOUT`]; `explain` adds what is known of the
/// server to a failure.
async fn initialize<T, E, A>(
    transport: T,
    explain: &(dyn Fn(String) -> String + Sync),
) -> Result<
    (
        RunningService<RoleClient, ProgressRelay>,
        Arc<Vec<rmcp::model::Tool>>,
    ),
    String,
>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let relay = ProgressRelay::default();
    let service = match tokio::time::timeout(START_TIMEOUT, relay.serve(transport)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            // Give the stderr copy a moment to catch the server's last words.
            tokio::time::sleep(Duration::from_millis(100)).await;
            return Err(explain(format!("initialize failed: {}", with_causes(&e))));
        }
        Err(_) => {
            return Err(explain(format!(
                "did not initialize within {} s",
                START_TIMEOUT.as_secs()
            )));
        }
    };
    let tools = match tokio::time::timeout(START_TIMEOUT, service.peer().list_all_tools()).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => return Err(explain(format!("tools/list failed: {e}"))),
        Err(_) => {
            return Err(format!(
                "did not list its tools within {} s",
                START_TIMEOUT.as_secs()
            ));
        }
    };
    Ok((
        service,
        Arc::new(tools.into_iter().take(MAX_TOOLS).collect()),
    ))
}

/// A failed start's message, with what the pack's confinement had to do with it: a refused path
/// and the line that would allow it, or a network it does not have.
fn explain_confinement(def: &PackDef, message: String) -> String {
    use glovebox_config::mcp_json::Network;
    let mut said = message;
    if let Some(hint) = crate::toolchain::refusal_hint(&said, &def.name) {
        said = format!("{said}; {hint}");
    }
    match def.network {
        Network::None => said.push_str(
            "; its network is `none`: every connection it tried was refused (set `network` in \
             its mcp.json entry if it needs one)",
        ),
        Network::Loopback => said.push_str(
            "; its network is `loopback`: only its own, connections elsewhere were refused",
        ),
        _ => {}
    }
    said
}

/// `e` and what caused it (a TLS or connection failure is the last cause, not the first).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    text
}

/// A started pack server.
pub struct Started {
    /// The session; its client side relays the server's progress ([`ProgressRelay`]).
    pub service: RunningService<RoleClient, ProgressRelay>,
    pub tools: Arc<Vec<rmcp::model::Tool>>,
    /// The shim's pid (its process group and Landlock domain hold the server); `None` for an
    /// HTTP pack.
    pub shim: Option<u32>,
    pub started: Instant,
    pub tail: Tail,
}

/// Why a pack did not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartError {
    pub message: String,
    /// Whether a process ran (and so a restart backs off); a missing secret or command does not.
    pub spawned: bool,
}

impl StartError {
    fn before_spawn(message: String) -> StartError {
        StartError {
            message,
            spawned: false,
        }
    }
}

/// What starting packs needs, shared by every pack of the host.
pub struct Launcher {
    pub config: Arc<PacksConfig>,
    pub gate: GateLink,
    login_path: OnceCell<String>,
}

impl Launcher {
    pub fn new(config: Arc<PacksConfig>, gate: GateLink) -> Launcher {
        Launcher {
            config,
            gate,
            login_path: OnceCell::new(),
        }
    }

    async fn login_path(&self) -> &str {
        self.login_path
            .get_or_init(|| login_path(&self.config.shell, &self.config.places.user_home))
            .await
    }

    /// Starts `def`'s server and lists its tools.
    pub async fn start(&self, def: &PackDef) -> Result<Started, StartError> {
        let config = &self.config;
        let names: Vec<String> = def.secrets().iter().map(|s| (*s).to_owned()).collect();
        let secrets = if names.is_empty() {
            BTreeMap::new()
        } else {
            self.gate
                .secrets(&names)
                .await
                .map_err(StartError::before_spawn)?
        };
        if let Some(url) = &def.url {
            return self.reach(def, url, &secrets).await;
        }
        let login = self.login_path().await.to_owned();
        let host_env = HostEnv {
            all: &config.environment,
            readable: &config.pack_env,
        };
        let env = pack_env(def, &config.places, &login, &host_env, &secrets)
            .map_err(|m| StartError::before_spawn(describe_missing(&m, &config.account)))?;
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map_or(login.as_str(), |(_, v)| v.as_str());
        let found = find_command(&def.command, path, &def.cwd).ok_or_else(|| {
            StartError::before_spawn(format!(
                "spawn {}: not found (ENOENT) on PATH {path}",
                def.command
            ))
        })?;
        self.make_dirs(def).map_err(|e| {
            StartError::before_spawn(format!("prepare the pack's directories: {e}"))
        })?;
        let command = self.shim_command(def, &found, env);
        // Whatever the server prints, the values of its secrets are not shown.
        let tail = Tail::masking(secrets.values().cloned());
        let spawned = |message: String| StartError {
            message,
            spawned: true,
        };
        let (transport, stderr) = TokioChildProcess::builder(command)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| spawned(format!("spawn {}: {e}", config.shim.display())))?;
        let shim = transport.id();
        if let Some(stderr) = stderr {
            spawn_copy(stderr, config.places.log(&def.name), tail.clone());
        }
        let with_tail = |what: String| {
            let t = tail.text();
            let said = if t.is_empty() {
                what
            } else {
                format!("{what}; its stderr ends: {t}")
            };
            explain_confinement(def, said)
        };
        let (service, tools) = initialize(transport, &with_tail).await.map_err(spawned)?;
        tracing::info!(account = %config.account, pack = %def.name, tools = tools.len(), "pack started");
        Ok(Started {
            service,
            tools,
            shim,
            started: Instant::now(),
            tail,
        })
    }

    /// Reaches HTTP pack `def` at `url`.
    async fn reach(
        &self,
        def: &PackDef,
        url: &str,
        secrets: &BTreeMap<String, String>,
    ) -> Result<Started, StartError> {
        let config = &self.config;
        let host_env = HostEnv {
            all: &config.environment,
            readable: &config.pack_env,
        };
        let headers = pack_headers(def, &host_env, secrets)
            .map_err(|m| StartError::before_spawn(describe_missing(&m, &config.account)))?;
        let (transport, client) =
            crate::http::transport(url, headers).map_err(StartError::before_spawn)?;
        let (service, tools) = match initialize(transport, &|what| what).await {
            Ok(started) => started,
            Err(message) => {
                let message = match crate::http::why_unreachable(&client, url).await {
                    Some(cause) => format!("{url}: {cause} ({message})"),
                    None => message,
                };
                // Nothing ran here, but a server that fails keeps being retried with a backoff.
                return Err(StartError {
                    message,
                    spawned: true,
                });
            }
        };
        tracing::info!(account = %config.account, pack = %def.name, tools = tools.len(), "pack reached");
        Ok(Started {
            service,
            tools,
            shim: None,
            started: Instant::now(),
            tail: Tail::default(),
        })
    }

    fn make_dirs(&self, def: &PackDef) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        let p = &self.config.places;
        for dir in [&p.pack_home, &p.logs, &p.npm_cache, &p.xdg_cache, &p.tmp] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(p.pack_data(&def.name))?;
        let tmp = p.pack_tmp(&def.name);
        match std::fs::DirBuilder::new().mode(0o700).create(&tmp) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
            _ => Ok(()),
        }
    }

    /// A pack's `read` or `write` entries as the paths they lead to (`~/…` in the user's home,
    /// links followed), less any that would reach glovebox's state or the pack homes (left out,
    /// and logged).
    fn granted(&self, def: &PackDef, entries: &[String]) -> Vec<PathBuf> {
        let config = &self.config;
        let p = &config.places;
        // Compared where links lead, as Landlock grants: a link in the project named
        // `innocent` that leads into the state is the state.
        let protected: Vec<PathBuf> = config
            .protected
            .iter()
            .cloned()
            .chain(p.pack_home.parent().map(std::path::Path::to_owned))
            .map(|d| std::fs::canonicalize(&d).unwrap_or(d))
            .collect();
        entries
            .iter()
            .map(|e| crate::places::grant_target(e, &p.user_home))
            .filter(|g| {
                let reaches = protected
                    .iter()
                    .any(|p| p.starts_with(g) || g.starts_with(p));
                if reaches {
                    tracing::warn!(account = %config.account, pack = %def.name, path = %g.display(), "a pack's read or write entry reaches glovebox's state or the pack homes: left out");
                }
                !reaches
            })
            .collect()
    }

    /// `glovebox pack-shim` with the pack's domain, its working directory, then its command.
    fn shim_command(
        &self,
        def: &PackDef,
        found: &std::path::Path,
        env: Vec<(String, String)>,
    ) -> tokio::process::Command {
        let config = &self.config;
        let p = &config.places;
        let mut full: Vec<PathBuf> = config.roots.clone();
        full.extend([
            p.pack_data(&def.name),
            p.npm_cache.clone(),
            p.xdg_cache.clone(),
            p.pack_tmp(&def.name),
        ]);
        let homes = [p.user_home.clone()];
        // An install is never granted if it holds the state or the pack homes (this account's
        // and those beside it).
        let mut protected = config.protected.clone();
        protected.extend(p.pack_home.parent().map(std::path::Path::to_owned));
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map_or("", |(_, v)| v.as_str());
        // The installs of every file running the command takes, the home's toolchains, and
        // what the pack's entry adds.
        let mut read: Vec<PathBuf> = crate::toolchain::command_chain(found, path, &def.cwd)
            .iter()
            .map(|file| install_grant(file, &protected, &homes))
            .collect();
        read.extend(crate::toolchain::home_toolchains(&p.user_home));
        read.extend(self.granted(def, &def.read));
        full.extend(self.granted(def, &def.write));
        read.sort();
        read.dedup();
        let mut command = tokio::process::Command::new(&config.shim);
        command.arg("pack-shim");
        for dir in &full {
            command.arg("--full").arg(dir);
        }
        for grant in &read {
            command.arg("--read").arg(grant);
        }
        command.args(config.walls_for(def).to_args());
        // The server's environment reaches it only at its start, through the shim: nothing in
        // it (LD_PRELOAD) acts on the shim before it is confined.
        let prefixed = env.into_iter().map(|(k, v)| {
            (
                format!("{}{k}", glovebox_sandbox::shim::PROGRAM_ENV_PREFIX),
                v,
            )
        });
        command
            .arg("--cwd")
            .arg(&def.cwd)
            .arg("--")
            .arg(found)
            .args(&def.args)
            .env_clear()
            .envs(prefixed)
            .current_dir(&def.cwd)
            .kill_on_drop(true);
        command
    }
}
