//! `glovebox status` (what runs, its processes, where it listens, the accounts, their sandboxes
//! and health; with `--system`, the system service as an account's owner sees it), `glovebox
//! stop`, and `glovebox tools` (what the account's agents are offered).
//! They read the state directory and ask the running broker; they change nothing but `stop`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use glovebox_config::StateDir;
use glovebox_proto::ws::{Role, ServerFrame, ToolSpec};

use crate::shared_args::{ClientArgs, StateArgs};
use crate::{Env, outln};

/// `glovebox status`.
#[derive(clap::Args, Debug)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) state: StateArgs,
    /// System mode: the system service, as you (an account's owner) see it, over its approve
    /// socket.
    #[arg(long, conflicts_with = "state_dir")]
    pub(crate) system: bool,
    /// System mode: the runtime directory (default: /run/glovebox).
    #[arg(long, value_name = "DIR", requires = "system")]
    pub(crate) runtime_dir: Option<PathBuf>,
    /// One JSON object: running, pid, services, URLs, accounts, healthy, problems,
    /// policy_errors, health.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `glovebox tools`.
#[derive(clap::Args, Debug)]
pub(crate) struct ToolsArgs {
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// Every tool with its input schema, as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// How long `stop` waits for `up` to finish stopping.
const STOP_WAIT: Duration = Duration::from_secs(20);

/// The pid of the running `glovebox up` on this state dir, if one runs.
pub fn running_pid(state: &StateDir) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(state.lock_file())
        .ok()?
        .trim()
        .parse()
        .ok()?;
    alive(pid).then_some(pid)
}

/// Whether process `pid` exists and is a glovebox (not a zombie, not a reused pid).
pub(crate) fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let running = stat
        .rsplit_once(')')
        .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'));
    running
        && command_line(pid)
            .first()
            .is_some_and(|a| a.ends_with("glovebox"))
}

/// Whether process `pid` has exited: gone, or a zombie waiting for its parent.
fn exited(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

pub(crate) fn command_line(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// `up`'s services: (name, pid), from its children's command lines.
pub(crate) fn services(up: i32) -> Vec<(String, i32)> {
    let children =
        std::fs::read_to_string(format!("/proc/{up}/task/{up}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .filter_map(|pid| {
            let args = command_line(pid);
            let name = match args.get(1).map(String::as_str) {
                Some("executor") => {
                    let account = args
                        .iter()
                        .position(|a| a == "--account")
                        .and_then(|i| args.get(i + 1))
                        .cloned()
                        .unwrap_or_default();
                    format!("executor[{account}]")
                }
                Some(service @ ("gate" | "broker")) => service.to_owned(),
                _ => return None,
            };
            Some((name, pid))
        })
        .collect()
}

/// The broker's `/healthz` answer with the details each account's approver may see, merged:
/// (HTTP status, body), or why it could not be asked. Without an approver credential the broker
/// says only up or down.
pub(crate) async fn health(
    url: &str,
    state: &StateDir,
) -> Result<(u16, serde_json::Value), String> {
    let accounts = state
        .load_config()
        .map(|c| c.accounts.into_iter().map(|a| a.id).collect::<Vec<_>>())
        .unwrap_or_default();
    let credentials: Vec<String> = accounts
        .iter()
        .filter_map(|a| std::fs::read_to_string(state.approver_token_file(a)).ok())
        .map(|t| t.trim().to_owned())
        .collect();
    if credentials.is_empty() {
        return health_as(url, None).await;
    }
    let mut merged: Option<(u16, serde_json::Value)> = None;
    for credential in &credentials {
        let (status, body) = health_as(url, Some(credential)).await?;
        match &mut merged {
            None => merged = Some((status, body)),
            Some((_, all)) => {
                if let (Some(into), Some(from)) = (
                    all["executors"].as_object_mut().cloned(),
                    body["executors"].as_object(),
                ) {
                    let mut into = into;
                    into.extend(from.clone());
                    all["executors"] = into.into();
                }
                if let (Some(into), Some(from)) = (
                    all["policy_errors"].as_array().cloned(),
                    body["policy_errors"].as_array(),
                ) {
                    let mut into = into;
                    into.extend(from.iter().cloned());
                    all["policy_errors"] = into.into();
                }
            }
        }
    }
    merged.ok_or_else(|| "no answer".to_owned())
}

/// `/healthz` asked with `credential` (an approver's) or none.
async fn health_as(
    url: &str,
    credential: Option<&str>,
) -> Result<(u16, serde_json::Value), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(&addr).await?;
        let authorization = credential
            .map(|c| format!("Authorization: Bearer {c}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "GET /healthz HTTP/1.1\r\nHost: {addr}\r\n{authorization}Connection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(Duration::from_secs(5), ask)
        .await
        .map_err(|_| "no answer within 5 s".to_owned())?
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, serde_json::from_str(body).unwrap_or_default()))
}

/// The policy files that failed to load, as the broker's health reports them.
pub async fn policy_errors(url: &str, state: &StateDir) -> Vec<String> {
    let body = health(url, state).await.map(|(_, b)| b).unwrap_or_default();
    policy_errors_of(&body)
}

fn policy_errors_of(health: &serde_json::Value) -> Vec<String> {
    health["policy_errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .filter_map(|e| e.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Largest `/healthz` answer `status --system` reads.
const MAX_HEALTH_REPLY_BYTES: u64 = 256 * 1024;

/// `glovebox status --system`, for whoever runs it: whether the system service runs, where it
/// listens, and the accounts this user owns with their executors — asked on the approve socket,
/// where the broker knows the user by uid (nothing of the root-owned state is read). Exits 0 when
/// the service runs and is healthy, 1 otherwise.
pub async fn status_system(runtime: &StateDir, json: bool) -> anyhow::Result<ExitCode> {
    let socket = runtime.approve_socket();
    let (code, body) = match crate::client::approve_socket_get(
        &socket,
        "/healthz",
        MAX_HEALTH_REPLY_BYTES,
    )
    .await
    {
        Ok(answer) => answer,
        Err(e) => {
            let why = format!("glovebox is not running as a system service: {e:#}");
            if json {
                outln!("{}", serde_json::json!({"running": false, "why": why}));
            } else {
                outln!("{why}");
            }
            return Ok(ExitCode::from(1));
        }
    };
    let body: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let url = std::fs::read_to_string(runtime.broker_url_file())
        .map(|u| u.trim().to_owned())
        .unwrap_or_default();
    let healthy = code == 200;
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "running": true,
                "runtime_dir": runtime.run_dir(),
                "url": url,
                "mcp": mcp_url(&url),
                "healthy": healthy,
                "problems": problems(&body),
                "policy_errors": policy_errors_of(&body),
                "health": body,
            })
        );
        return Ok(exit_code(healthy));
    }
    outln!(
        "glovebox is running as a system service (runtime dir {})",
        runtime.run_dir().display()
    );
    if !url.is_empty() {
        outln!("  WebSocket: {url}");
        outln!("  MCP:       {}", mcp_url(&url));
    }
    let mut mine: Vec<(&String, &serde_json::Value)> = body["executors"]
        .as_object()
        .map(|e| e.iter().collect())
        .unwrap_or_default();
    mine.sort_by(|a, b| a.0.cmp(b.0));
    if mine.is_empty() {
        outln!(
            "  accounts:  none owned by you (an administrator adds one: `glovebox account add ID --owner YOU ...`)"
        );
    }
    for (account, executor) in mine {
        if executor["reachable"].as_bool() == Some(true) {
            outln!(
                "  account:   {account} (yours): executor uid {}, {}, {} jobs running",
                executor["uid"],
                executor["sandbox"].as_str().unwrap_or("?"),
                executor["running_jobs"].as_u64().unwrap_or(0)
            );
        } else {
            outln!("  account:   {account} (yours): its executor does not answer");
        }
    }
    health_line(Ok((code, body.clone())));
    Ok(closing(healthy, &body))
}

/// What is wrong, in words, by the broker's `/healthz` body (the parts this credential sees);
/// the policy files that failed to load are said apart ([`policy_errors_of`]).
pub fn problems(health: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    if health["gate"] == "unreachable" {
        out.push("the gate does not answer".to_owned());
    }
    if health["audit"]["healthy"] == false {
        out.push(format!(
            "the audit is failing ({} failed writes): calls are refused until it recovers",
            health["audit"]["failures"]
        ));
    }
    if let Some(executors) = health["executors"].as_object() {
        for (account, e) in executors {
            if e["reachable"] == false {
                out.push(format!("account {account}: its executor does not answer"));
            } else if let Some(sandbox) = e["sandbox"].as_str()
                && sandbox.starts_with("landlock=not_available")
            {
                out.push(format!("account {account}: no sandbox ({sandbox})"));
            }
        }
    }
    out
}

/// Prints the health line: ok, or what is wrong.
fn health_line(health: Result<(u16, serde_json::Value), String>) {
    match health {
        Ok((200, _)) => outln!("  health:    ok"),
        Ok((code, body)) => {
            let problems = problems(&body);
            if problems.is_empty() {
                outln!("  health:    not ok (HTTP {code}; `glovebox doctor` may say more)");
            } else {
                outln!("  health:    not ok (HTTP {code}):");
                for p in problems {
                    outln!("    - {p}");
                }
            }
        }
        Err(e) => outln!("  health:    the broker did not answer ({e})"),
    }
}

fn exit_code(healthy: bool) -> ExitCode {
    if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `glovebox status`: the user's glovebox, or with `--system` the system service as this user
/// sees it ([`status_system`]).
pub async fn status(env: &Env, args: StatusArgs) -> anyhow::Result<ExitCode> {
    if args.system {
        status_system(&env.system_runtime(args.runtime_dir), args.json).await
    } else {
        status_user(&env.state_dir(&args.state), args.json).await
    }
}

/// `glovebox status` in user mode. Exits 0 when glovebox runs and is healthy, 1 otherwise.
async fn status_user(state_dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let state = StateDir::new(state_dir);
    if !state.config_file().exists() {
        return Ok(not_running(
            json,
            format!(
                "glovebox is not set up in {}: run `glovebox up` to start it",
                state.root().display()
            ),
        ));
    }
    // glovebox.yaml's accounts and those of accounts.yaml, as in effect.
    let config = state.load_merged_config()?;
    let Some(up) = running_pid(&state) else {
        return Ok(not_running(
            json,
            format!(
                "glovebox is not running (state dir {}): run `glovebox up`",
                state.root().display()
            ),
        ));
    };
    let status = UserStatus::ask(&state, config, up).await;
    if json {
        status.print_json();
        return Ok(exit_code(status.healthy));
    }
    Ok(status.print_text())
}

/// Says why there is no glovebox to report on (as JSON with `json`); exits 1.
fn not_running(json: bool, why: String) -> ExitCode {
    if json {
        outln!("{}", serde_json::json!({"running": false, "why": why}));
    } else {
        outln!("{why}");
    }
    ExitCode::from(1)
}

/// A running glovebox in user mode, as `status` reports it.
struct UserStatus<'a> {
    state: &'a StateDir,
    /// The accounts in effect.
    config: glovebox_config::Config,
    /// The pid of `up`.
    up: i32,
    /// The broker's WebSocket URL.
    url: String,
    /// The broker's `/healthz` answer, or why there was none.
    health: Result<(u16, serde_json::Value), String>,
    /// Its body (null without an answer).
    body: serde_json::Value,
    healthy: bool,
    /// `up`'s services: (name, pid).
    services: Vec<(String, i32)>,
}

impl<'a> UserStatus<'a> {
    /// Reads the broker's URL and asks it for its health; lists the services of `up` (its pid).
    async fn ask(state: &'a StateDir, config: glovebox_config::Config, up: i32) -> Self {
        let url = std::fs::read_to_string(state.broker_url_file())
            .map(|u| u.trim().to_owned())
            .unwrap_or_default();
        let health = health(&url, state).await;
        let body = health.as_ref().map(|(_, b)| b.clone()).unwrap_or_default();
        let healthy = matches!(health, Ok((200, _)));
        let services = services(up);
        Self {
            state,
            config,
            up,
            url,
            health,
            body,
            healthy,
            services,
        }
    }

    /// Prints the status as one JSON object.
    fn print_json(&self) {
        let body = &self.body;
        let accounts: Vec<serde_json::Value> = self
            .config
            .accounts
            .iter()
            .map(|a| {
                serde_json::json!({
                    "id": a.id,
                    "workdir": a.workdir,
                    "tools": a.enabled,
                    "executor": body["executors"][a.id.as_str()],
                })
            })
            .collect();
        let services: Vec<serde_json::Value> = self
            .services
            .iter()
            .map(|(name, pid)| serde_json::json!({"name": name, "pid": pid}))
            .collect();
        let mut problems = problems(body);
        if let Err(e) = &self.health {
            problems.push(format!("the broker did not answer ({e})"));
        }
        outln!(
            "{}",
            serde_json::json!({
                "running": true,
                "pid": self.up,
                "state_dir": self.state.root(),
                "services": services,
                "url": self.url,
                "mcp": mcp_url(&self.url),
                "accounts": accounts,
                "healthy": self.healthy,
                "problems": problems,
                "policy_errors": policy_errors_of(body),
                "health": body,
            })
        );
    }

    /// Prints the status as text: the process and its services, the URLs, each account with
    /// its sandbox, the health and the policy files that failed to load. Returns the exit code.
    fn print_text(self) -> ExitCode {
        outln!(
            "glovebox is running (pid {}, state dir {})",
            self.up,
            self.state.root().display()
        );
        for (name, pid) in &self.services {
            outln!("  {name:<20} pid {pid}");
        }
        outln!("  WebSocket: {}", self.url);
        outln!("  MCP:       {}", mcp_url(&self.url));
        if self.config.accounts.is_empty() {
            outln!("  accounts:  {}", crate::which_account::NO_ACCOUNTS_YET);
        }
        for a in &self.config.accounts {
            let on = if a.enabled { "on" } else { "off" };
            outln!(
                "  account:   {} (workdir {}, tools {on})",
                a.id,
                a.workdir.display()
            );
            let executor = &self.body["executors"][a.id.as_str()];
            if let Some(sandbox) = executor["sandbox"].as_str() {
                let jobs = executor["running_jobs"].as_u64().unwrap_or(0);
                outln!(
                    "  sandbox:   executor[{}] {sandbox}, {jobs} jobs running",
                    a.id
                );
            }
        }
        health_line(self.health);
        closing(self.healthy, &self.body)
    }
}

/// The end of both statuses: the policy files that failed to load, and the exit code.
fn closing(healthy: bool, health: &serde_json::Value) -> ExitCode {
    for e in policy_errors_of(health) {
        outln!("  WARNING: policy: {e}");
    }
    exit_code(healthy)
}

/// The MCP endpoint beside a broker's WebSocket URL.
pub fn mcp_url(ws_url: &str) -> String {
    ws_url
        .replacen("ws://", "http://", 1)
        .replace("/v1/ws", "/mcp")
}

/// `glovebox stop`: asks the running `up` to stop (as Ctrl-C does) and waits until it has.
pub async fn stop(state_dir: &Path) -> anyhow::Result<ExitCode> {
    let state = StateDir::new(state_dir);
    let Some(pid) = running_pid(&state) else {
        outln!(
            "glovebox is not running (state dir {})",
            state.root().display()
        );
        return Ok(ExitCode::SUCCESS);
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .map_err(|e| anyhow::anyhow!("stop glovebox (pid {pid}): {e}"))?;
    let deadline = Instant::now() + STOP_WAIT;
    // Not `alive`: an exiting process has no command line a moment before it is a zombie, and
    // "stopped" must mean it has exited.
    while !exited(pid) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "glovebox (pid {pid}) did not stop within {} s",
            STOP_WAIT.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    outln!("glovebox stopped");
    Ok(ExitCode::SUCCESS)
}

/// `glovebox tools`: the tools the account's agents are offered now (client tools and
/// enablement included), one a line with the first sentence of its description, or with
/// `--json` every tool with its schema. Without a running glovebox: the built-in tools.
pub async fn tools(env: &Env, args: ToolsArgs) -> anyhow::Result<ExitCode> {
    let json = args.json;
    let offered = match env.target(args.client, Role::Agent) {
        Ok(target) => match crate::client::connect_with_hello(&target, Role::Agent).await {
            Ok((_, ServerFrame::HelloOk { tools, .. })) => Some(tools),
            _ => None,
        },
        Err(_) => None,
    };
    let tools = match offered {
        Some(tools) => tools,
        None => {
            eprintln!(
                "glovebox is not running: these are the built-in tools (run `glovebox up` for the account's own list)"
            );
            glovebox_proto::tools::Tool::ALL
                .iter()
                .map(|t| ToolSpec {
                    name: t.name().to_owned(),
                    description: t.description().to_owned(),
                    input_schema: t.input_schema(),
                    annotations: None,
                    output_schema: None,
                    title: None,
                    meta: None,
                })
                .collect()
        }
    };
    if json {
        outln!("{}", serde_json::to_string_pretty(&tools)?);
        return Ok(ExitCode::SUCCESS);
    }
    if tools.is_empty() {
        outln!("no tools: the account's tools are switched off (`glovebox enable`)");
    }
    let width = tools.iter().map(|t| t.name.len()).max().unwrap_or(0);
    for t in &tools {
        outln!("{:<width$}  {}", t.name, first_sentence(&t.description));
    }
    Ok(ExitCode::SUCCESS)
}

/// A description's first sentence (up to the first ". " or the end).
fn first_sentence(text: &str) -> &str {
    let line = text.lines().next().unwrap_or_default();
    match line.find(". ") {
        Some(i) => &line[..=i],
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unhealthy_answer_is_said_in_words() {
        let body = serde_json::json!({
            "ok": false,
            "gate": "reachable",
            "audit": {"healthy": false, "failures": 3},
            "executors": {
                "a": {"reachable": false},
                "b": {"reachable": true, "sandbox": "landlock=not_available"},
                "c": {"reachable": true, "sandbox": "landlock=v7"},
            },
            "policy_errors": ["a: line 3: unknown field"],
        });
        assert_eq!(
            problems(&body),
            [
                "the audit is failing (3 failed writes): calls are refused until it recovers",
                "account a: its executor does not answer",
                "account b: no sandbox (landlock=not_available)",
            ]
        );
        assert_eq!(policy_errors_of(&body), ["a: line 3: unknown field"]);
        assert_eq!(
            problems(&serde_json::json!({"gate": "unreachable"})),
            ["the gate does not answer"]
        );
        assert!(problems(&serde_json::json!({"ok": true})).is_empty());
    }

    #[test]
    fn descriptions_are_cut_at_their_first_sentence() {
        assert_eq!(
            first_sentence("Count the lines. And more."),
            "Count the lines."
        );
        assert_eq!(first_sentence("One line\nanother"), "One line");
        assert_eq!(first_sentence(""), "");
        assert_eq!(
            mcp_url("ws://127.0.0.1:7420/v1/ws"),
            "http://127.0.0.1:7420/mcp"
        );
    }
}
