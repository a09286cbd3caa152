//! MCP tool packs from the command line: the pack host service (`glovebox pack-host`, started by
//! `up` for each account), the shim that contains one pack server (`glovebox pack-shim`, started
//! by the pack host), and the administrator's commands — `glovebox packs list|reload` (on the
//! account's pack host socket) and `glovebox secret set|list|remove` (on the gate's admin
//! socket; a value is read from the terminal without echo, or from stdin, never from argv).
//!
//! Why one file past 800 lines: the four commands share the pack host's arguments, its socket and
//! the gate's admin link; the pack host's serving is `glovebox-packs`'.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use glovebox_config::StateDir;
use glovebox_proto::transport::handover::{Handover, peer, socket};
use glovebox_proto::v1::{self as pb, packs_client::PacksClient};

use crate::Env;
use crate::shared_args::StateArgs;

/// `glovebox packs`.
#[derive(clap::Args, Debug)]
pub(crate) struct PacksArgs {
    /// State directory (default: $XDG_STATE_HOME/glovebox, or ~/.local/state/glovebox).
    #[arg(long, value_name = "DIR", global = true)]
    pub(crate) state_dir: Option<PathBuf>,
    /// Account whose packs to show (default: the only account, or with --system the one you
    /// own).
    #[arg(long, global = true)]
    pub(crate) account: Option<String>,
    /// System mode: list, add and remove the packs of an account you own, over the system
    /// service's approve socket as yourself (no token: the kernel tells glovebox who you are).
    #[arg(long, global = true)]
    pub(crate) system: bool,
    /// System mode: the runtime directory (default: /run/glovebox).
    #[arg(long, value_name = "DIR", global = true, requires = "system")]
    pub(crate) runtime_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: PacksCommand,
}

/// `glovebox secret`.
#[derive(clap::Args, Debug)]
pub(crate) struct SecretArgs {
    /// State directory (default: $XDG_STATE_HOME/glovebox, or ~/.local/state/glovebox).
    #[arg(long, value_name = "DIR", global = true)]
    pub(crate) state_dir: Option<PathBuf>,
    /// System mode: manage the secrets of an account you own, over the system service's
    /// approve socket as yourself (no token: the kernel tells glovebox who you are).
    #[arg(long, global = true)]
    pub(crate) system: bool,
    /// System mode: the runtime directory (default: /run/glovebox).
    #[arg(long, value_name = "DIR", global = true, requires = "system")]
    pub(crate) runtime_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: SecretCommand,
}

/// How the supervisor starts an account's pack host. Like the executor, it reads nothing of the
/// state directory (it may run as the account's user): everything comes in its arguments, its
/// stdin (keys) and, at run time, from the gate.
#[derive(clap::Args, Debug, Clone)]
pub struct PackHostArgs {
    #[arg(long)]
    pub account: glovebox_config::AccountId,
    #[arg(long, value_name = "DIR")]
    pub workdir: PathBuf,
    /// A directory pack servers may touch (repeatable; default: the workdir).
    #[arg(long = "root", value_name = "DIR")]
    pub roots: Vec<PathBuf>,
    /// Where to listen.
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
    /// The gate's audit socket (Audit and PackSupport).
    #[arg(long, value_name = "PATH")]
    pub audit_socket: PathBuf,
    /// A directory never granted to a pack server (repeatable; glovebox's state).
    #[arg(long = "protected", value_name = "DIR")]
    pub protected: Vec<PathBuf>,
    /// The walls of its pack servers beyond their files (each pack's own `network` wins).
    #[command(flatten)]
    pub walls: glovebox_supervisor::walls_args::WallsArgs,
    /// A variable of this host's environment the account's own `mcp.json` may read as
    /// `${env:NAME}` (repeatable; none by default).
    #[arg(long = "pack-env", value_name = "NAME")]
    pub pack_env: Vec<String>,
    /// The directory of this account's pack homes and logs, made for it (system mode); default
    /// `<HOME>/.local/share/glovebox/pack-home/<account>-<state digest>`.
    #[arg(long, value_name = "DIR")]
    pub pack_home: Option<PathBuf>,
}

/// What `glovebox pack-shim` is told by the pack host.
#[derive(clap::Args, Debug, Clone)]
pub struct PackShimArgs {
    /// A directory the server may read and write (repeatable).
    #[arg(long = "full", value_name = "DIR")]
    pub full: Vec<PathBuf>,
    /// A file or directory the server may read and execute (repeatable).
    #[arg(long = "read", value_name = "PATH")]
    pub read: Vec<PathBuf>,
    #[command(flatten)]
    pub walls: glovebox_supervisor::walls_args::WallsArgs,
    /// The server's working directory.
    #[arg(long, value_name = "DIR")]
    pub cwd: PathBuf,
    /// The server's program and arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Runs `glovebox pack-shim`: the pack server, contained (see `glovebox_sandbox::shim`).
pub fn pack_shim(args: PackShimArgs) -> i32 {
    use glovebox_sandbox::shim::{Input, Lifeline, ShimConfig};
    let Some((program, rest)) = args.command.split_first() else {
        return glovebox_sandbox::shim::EXIT_SPAWN_FAILED;
    };
    // A pack server is raised in the same walls as a job, but runs for as long as it is used:
    // no cap on its CPU time.
    let mut walls = args.walls.into_walls();
    walls.caps.cpu_seconds = u64::MAX;
    glovebox_sandbox::shim::run(ShimConfig {
        plan: glovebox_sandbox::SandboxPlan::for_pack(
            &args.full,
            &args.read,
            walls.network == glovebox_sandbox::isolate::Network::Any,
        ),
        walls: Some(walls.clone()),
        report: None,
        env: Some(glovebox_sandbox::shim::program_env(std::env::vars())),
        program: PathBuf::from(program),
        args: rest.to_vec(),
        cwd: Some(args.cwd),
        input: Input::Inherit,
        lifeline: Lifeline::Parent,
    })
}

/// Runs `glovebox pack-host` until the supervisor's lifeline closes.
pub async fn pack_host(
    env: &Env,
    args: PackHostArgs,
    handover: Handover,
) -> anyhow::Result<ExitCode> {
    glovebox_supervisor::identity::verify_cannot_regain_root()?;
    let workdir = std::fs::canonicalize(&args.workdir)
        .with_context(|| format!("workdir {}", args.workdir.display()))?;
    let roots = if args.roots.is_empty() {
        vec![workdir.clone()]
    } else {
        args.roots
            .iter()
            .map(|r| std::fs::canonicalize(r).with_context(|| format!("root {}", r.display())))
            .collect::<anyhow::Result<Vec<_>>>()?
    };
    let key_hex = handover
        .ticket_key
        .as_deref()
        .context("the handover has no pack ticket key")?;
    let key = glovebox_ticket::AccountKey::from_bytes(
        &hex::decode(key_hex).context("the pack ticket key is not hex")?,
    )?;
    let audit_key = handover.calling(socket::AUDIT)?;
    let serve_keys = handover.served_on(&socket::packs(&args.account));
    anyhow::ensure!(
        !serve_keys.is_empty(),
        "the handover has no key for the broker on this pack host's socket"
    );
    let environment: BTreeMap<String, String> = env.environment.iter().cloned().collect();
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::effective())?
        .context("this user has no passwd entry")?;
    let user_home = environment
        .get("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| user.dir.clone());
    let xdg_cache = environment.get("XDG_CACHE_HOME").map(PathBuf::from);
    let places = glovebox_packs::places::Places::new(
        &args.account,
        &user_home,
        xdg_cache.as_deref(),
        &glovebox_supervisor::scratch::make(
            glovebox_supervisor::scratch::Kind::Packs,
            &args.account,
        )?,
    );
    // glovebox's state directory is the first protected one: the pack home is this instance's.
    let places = match (&args.pack_home, args.protected.first()) {
        (Some(dir), _) => places.in_pack_home(dir),
        (None, Some(state)) => places.of_state(&args.account, state),
        (None, None) => places,
    };
    let listener = glovebox_proto::transport::bind_socket(&args.socket, handover.socket_mode())
        .with_context(|| format!("bind {}", args.socket.display()))?;
    let config = glovebox_packs::PacksConfig {
        account: args.account.to_string(),
        workdir,
        roots,
        places,
        protected: args.protected.clone(),
        key,
        audit_socket: args.audit_socket.clone(),
        audit_key,
        serve_keys,
        allowed_uids: handover.allowed_uids(),
        shim: std::env::current_exe().context("locate the glovebox binary")?,
        shell: user.shell.display().to_string(),
        environment,
        pack_env: args.pack_env.clone(),
        walls: args.walls.clone().into_walls(),
    };
    // stdout belongs to the supervisor's readiness protocol.
    println!("READY {}", args.socket.display());
    glovebox_packs::run(config, listener, crate::services::shutdown_signal(true)).await?;
    let _ = std::fs::remove_file(&args.socket);
    Ok(ExitCode::SUCCESS)
}

/// `glovebox packs ...`.
#[derive(clap::Subcommand, Debug)]
pub enum PacksCommand {
    /// The account's pack tools and the packs that failed (starting packs not started yet).
    List {
        /// As one JSON object: the packs with their state, their tools, and the errors.
        #[arg(long)]
        json: bool,
    },
    /// Read the account's mcp.json files again, ask again about refused project packs, and
    /// restart every pack on its next use.
    Reload,
    /// Add (or replace) a pack in the account's own mcp.json; it starts on its next use.
    Add {
        /// The pack's name (its tools are offered as `<name>__<tool>`).
        name: String,
        /// An environment variable, `NAME=VALUE` (repeatable); write secrets as
        /// `${secret:NAME}` (see `glovebox secret set`), never as literals.
        #[arg(long = "env", value_name = "NAME=VALUE")]
        env: Vec<String>,
        /// `loopback`: only a network of the server's own; `none`: no TCP, UDP or DNS at all.
        #[arg(long, value_name = "any|loopback|none")]
        network: Option<String>,
        /// Seconds a call may take (default 30).
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<u64>,
        /// A server to reach over Streamable HTTP instead of one to start: `https://…`, or
        /// `http://` to this machine.
        #[arg(long, value_name = "URL", conflicts_with_all = ["env", "network", "command"])]
        url: Option<String>,
        /// A header sent to an HTTP pack, `Name: value` (repeatable); a token as
        /// `${secret:NAME}`.
        #[arg(long = "header", value_name = "NAME: VALUE", requires = "url")]
        headers: Vec<String>,
        /// The server's program and arguments.
        #[arg(last = true, required_unless_present = "url")]
        command: Vec<String>,
    },
    /// Remove a pack from the account's own mcp.json; its server stops.
    Remove {
        /// The pack's name, as mcp.json names it.
        name: String,
    },
}

/// The account's pack host, as the administrator.
fn packs_client(
    state: &StateDir,
    account: &str,
) -> anyhow::Result<PacksClient<glovebox_proto::transport::Link>> {
    let keys = crate::control_keys(state)?;
    let s = socket::packs(account);
    Ok(PacksClient::new(
        glovebox_proto::transport::authenticated_channel(
            &state.packs_socket(account),
            peer::ADMIN,
            keys.key(&s, peer::ADMIN),
        ),
    ))
}

fn unreachable(status: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!(
        "the account's pack host is not reachable (is glovebox up running?): {}",
        status.message()
    )
}

/// `glovebox packs ...`: the packs of an account of the user's state, or with `--system`
/// ([`packs_system`]) of an account this user owns.
pub async fn packs(env: &Env, args: PacksArgs) -> anyhow::Result<ExitCode> {
    if args.system {
        let layout = env.system_runtime(args.runtime_dir);
        return packs_system(&layout.approve_socket(), args.account, args.command).await;
    }
    let state_dir = env.state_dir(&StateArgs {
        state_dir: args.state_dir,
    });
    packs_user(&state_dir, args.account, args.command).await
}

/// `glovebox packs ...` in user mode: edits the account's `mcp.json`, or asks its pack host.
async fn packs_user(
    state_dir: &Path,
    account: Option<String>,
    command: PacksCommand,
) -> anyhow::Result<ExitCode> {
    let state = StateDir::new(state_dir);
    let account = crate::admin_socket::account(&state, account)?;
    if let PacksCommand::Add { .. } | PacksCommand::Remove { .. } = command {
        return edit_user_file(&state, &account, command);
    }
    let mut client = packs_client(&state, &account)?;
    match command {
        PacksCommand::Add { .. } | PacksCommand::Remove { .. } => Ok(ExitCode::SUCCESS),
        PacksCommand::List { json } => {
            let listed = client
                .list(pb::ListPacksRequest {})
                .await
                .map_err(unreachable)?
                .into_inner();
            if json {
                println!("{}", list_json(&listed));
            } else {
                print!("{}", render_list(&listed));
            }
            Ok(ExitCode::SUCCESS)
        }
        PacksCommand::Reload => {
            let r = client
                .reload(pb::ReloadPacksRequest::default())
                .await
                .map_err(unreachable)?
                .into_inner();
            println!(
                "reloaded the packs of account {account}{}",
                if r.restarted.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; stopped {} (they start again on their next use)",
                        r.restarted.join(", ")
                    )
                }
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// What the account's pack host lists now (it starts packs not started yet, briefly).
pub async fn list(state: &StateDir, account: &str) -> anyhow::Result<pb::ListPacksResponse> {
    let mut client = packs_client(state, account)?;
    Ok(client
        .list(pb::ListPacksRequest {})
        .await
        .map_err(unreachable)?
        .into_inner())
}

/// `glovebox packs add|remove`: edits the account's own mcp.json (validated the way the pack
/// host reads it); the gate sees the change and the pack host follows it, nothing to restart.
fn edit_user_file(
    state: &StateDir,
    account: &str,
    command: PacksCommand,
) -> anyhow::Result<ExitCode> {
    use glovebox_config::mcp_json;
    let path = state.mcp_json_file(account);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    };
    let (out, said) = match &command {
        PacksCommand::Add { name, .. } => {
            let def = definition_of(&command)?;
            let out = mcp_json::with_pack(&text, name, serde_json::Value::Object(def))
                .map_err(|why| anyhow::anyhow!("pack {name:?} not added: {why}"))?;
            (
                out,
                format!("added pack {name} to account {account}; it starts on its next use"),
            )
        }
        PacksCommand::Remove { name } => match mcp_json::without_pack(&text, name)
            .map_err(|why| anyhow::anyhow!("{}: {why}", path.display()))?
        {
            Some(out) => (out, format!("removed pack {name} from account {account}")),
            None => anyhow::bail!(
                "account {account} has no pack {name:?} in {}",
                path.display()
            ),
        },
        PacksCommand::List { .. } | PacksCommand::Reload => return Ok(ExitCode::SUCCESS),
    };
    glovebox_config::write_private_file(&path, out.as_bytes())
        .with_context(|| format!("write {}", path.display()))?;
    println!("{said}");
    Ok(ExitCode::SUCCESS)
}

/// The `mcpServers` entry `glovebox packs add` writes (an empty map for other commands).
fn definition_of(
    command: &PacksCommand,
) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    let PacksCommand::Add {
        env,
        network,
        timeout,
        url,
        headers,
        command,
        ..
    } = command
    else {
        return Ok(serde_json::Map::new());
    };
    let mut def = serde_json::Map::new();
    match url {
        Some(url) => {
            let mut sent = serde_json::Map::new();
            for header in headers {
                let (k, v) = header
                    .split_once(':')
                    .with_context(|| format!("--header {header:?}: expected `Name: value`"))?;
                sent.insert(k.trim().to_owned(), v.trim().into());
            }
            def.insert("url".into(), url.clone().into());
            def.insert("headers".into(), sent.into());
        }
        None => {
            let (program, args) = command.split_first().context("a pack needs a command")?;
            let mut vars = serde_json::Map::new();
            for pair in env {
                let (k, v) = pair
                    .split_once('=')
                    .with_context(|| format!("--env {pair:?}: expected NAME=VALUE"))?;
                vars.insert(k.to_owned(), v.into());
            }
            def.insert("command".into(), program.clone().into());
            def.insert("args".into(), args.to_vec().into());
            def.insert("env".into(), vars.into());
        }
    }
    if let Some(n) = network {
        def.insert("network".into(), n.clone().into());
    }
    if let Some(t) = timeout {
        def.insert("timeout".into(), (*t).into());
    }
    Ok(def)
}

/// `glovebox packs ... --system`: the account's owner lists, adds and removes its packs over the
/// system service's approve socket, as themselves; the gate, which keeps the account's
/// `mcp.json`, checks and audits each change.
pub async fn packs_system(
    socket: &Path,
    account: Option<String>,
    command: PacksCommand,
) -> anyhow::Result<ExitCode> {
    use glovebox_proto::ws::ManageOp;
    use glovebox_proto::ws::manage::{Changed, Packs};
    let op = match &command {
        PacksCommand::List { .. } => ManageOp::Packs {},
        PacksCommand::Add { name, .. } => ManageOp::SetPack {
            pack: name.clone(),
            definition: definition_of(&command)?,
        },
        PacksCommand::Remove { name } => ManageOp::RemovePack { pack: name.clone() },
        PacksCommand::Reload => anyhow::bail!(
            "the system service follows each account's mcp.json itself; `packs list --system` \
             shows its packs now"
        ),
    };
    let (_, result) = crate::client::manage_system(socket, account.as_deref(), op).await?;
    if let PacksCommand::List { json } = command {
        let packs: Packs = serde_json::from_value(result)?;
        if json {
            println!("{}", serde_json::to_string(&packs)?);
        } else {
            print!("{}", render_rows(&packs));
        }
    } else {
        let changed: Changed = serde_json::from_value(result)?;
        println!("{}", changed.summary);
    }
    Ok(ExitCode::SUCCESS)
}

/// What `glovebox packs list --system` prints: each pack, its state and tools or why not.
pub fn render_rows(packs: &glovebox_proto::ws::manage::Packs) -> String {
    let mut out = String::new();
    if !packs.enabled {
        out.push_str("the account's tools are off: no pack is listed\n");
    }
    for p in &packs.packs {
        let origin = if p.origin == "project" {
            "project"
        } else {
            "account"
        };
        out.push_str(&format!("{} ({origin}): {}", p.name, p.state));
        if !p.trust.is_empty() {
            out.push_str(&format!(", trust {}", p.trust));
        }
        if !p.tools.is_empty() {
            out.push_str(&format!(": {}", p.tools.join(" ")));
        }
        if !p.message.is_empty() {
            out.push_str(&format!(" — {}", p.message));
        }
        out.push('\n');
    }
    for e in &packs.errors {
        out.push_str(&format!("error: {e}\n"));
    }
    if packs.packs.is_empty() && packs.errors.is_empty() && packs.enabled {
        out.push_str("no pack is configured\n");
    }
    out
}

/// What `glovebox packs list` prints.
/// `packs list --json`: the packs, their tools and the errors, as the pack host lists them.
pub fn list_json(listed: &pb::ListPacksResponse) -> serde_json::Value {
    let packs: Vec<serde_json::Value> = listed
        .packs
        .iter()
        .map(|p| {
            serde_json::json!({
                "name": p.name, "origin": p.origin, "state": p.state,
                "message": p.message, "trust": p.trust,
            })
        })
        .collect();
    let tools: Vec<serde_json::Value> = listed
        .tools
        .iter()
        .map(|t| {
            serde_json::json!({
                "name": t.name, "pack": t.pack, "tool": t.tool, "origin": t.origin,
                "read_only": t.read_only, "description": t.description,
            })
        })
        .collect();
    let errors: Vec<serde_json::Value> = listed
        .errors
        .iter()
        .map(|e| serde_json::json!({"pack": e.pack, "origin": e.origin, "message": e.message}))
        .collect();
    serde_json::json!({"packs": packs, "tools": tools, "errors": errors})
}

pub fn render_list(listed: &pb::ListPacksResponse) -> String {
    let mut out = String::new();
    if listed.tools.is_empty() && listed.errors.is_empty() && listed.packs.is_empty() {
        out.push_str("no packs are configured\n");
    }
    // Each pack and its state first (starting, ready, failed and why, disabled, untrusted)...
    for p in &listed.packs {
        let tools = listed.tools.iter().filter(|t| t.pack == p.name).count();
        let state = match (p.state.as_str(), p.message.is_empty()) {
            ("ready", _) => format!("ready, {tools} tools"),
            (state, true) => state.to_owned(),
            (state, false) => format!("{state}: {}", p.message),
        };
        let trust = if p.trust.is_empty() {
            String::new()
        } else {
            format!(", {}", p.trust)
        };
        out.push_str(&format!("pack {} ({}{trust}): {state}\n", p.name, p.origin));
    }
    // ...then the tools, and what went wrong that no pack's state says.
    for t in &listed.tools {
        let hint = if t.read_only {
            "read-only"
        } else {
            "may change things"
        };
        out.push_str(&format!("{}  ({}, {hint}, {})\n", t.name, t.origin, t.pack));
    }
    let said = |e: &pb::PackError| {
        listed
            .packs
            .iter()
            .any(|p| p.name == e.pack && p.origin == e.origin && p.message == e.message)
    };
    for e in listed.errors.iter().filter(|e| !said(e)) {
        let pack = if e.pack.is_empty() {
            "-"
        } else {
            e.pack.as_str()
        };
        out.push_str(&format!("error: {pack} ({}): {}\n", e.origin, e.message));
    }
    out
}

/// The names of an account's secrets: one a line, or (`json`) one JSON array.
fn print_names(names: &[String], json: bool) {
    if json {
        println!("{}", serde_json::json!(names));
    } else {
        for name in names {
            println!("{name}");
        }
    }
}

/// `glovebox secret ...`.
#[derive(clap::Subcommand, Debug)]
pub enum SecretCommand {
    /// Store a secret for the account's packs (`${secret:NAME}` in mcp.json); the value is read
    /// from the terminal (not echoed) or from stdin. Packs that use it restart.
    Set {
        /// The account (default: the only one, or with --system the one you own).
        #[arg(long)]
        account: Option<String>,
        /// The secret's name, as mcp.json names it in `${secret:NAME}`.
        name: String,
    },
    /// The names of the account's secrets (never their values).
    List {
        /// The account (default: the only one, or with --system the one you own).
        #[arg(long)]
        account: Option<String>,
        /// As one JSON array of names.
        #[arg(long)]
        json: bool,
    },
    /// Remove a secret. Packs that use it restart (and then wait for it).
    Remove {
        /// The account (default: the only one, or with --system the one you own).
        #[arg(long)]
        account: Option<String>,
        /// The secret's name.
        name: String,
    },
}

impl SecretCommand {
    fn account(&self) -> Option<&str> {
        match self {
            SecretCommand::Set { account, .. }
            | SecretCommand::List { account, .. }
            | SecretCommand::Remove { account, .. } => account.as_deref(),
        }
    }
}

/// `glovebox secret ... --system`: the account's owner manages its secrets over the system
/// service's approve socket, as themselves (the kernel says who; the gate audits it as the
/// account's approver). Values are read as in user mode and never printed.
pub async fn secret_system(socket: &Path, command: SecretCommand) -> anyhow::Result<ExitCode> {
    use glovebox_proto::ws::ManageOp;
    use glovebox_proto::ws::manage::{SecretValue, Secrets};
    let op = match &command {
        SecretCommand::Set { name, .. } => ManageOp::SetSecret {
            secret: name.clone(),
            value: SecretValue(read_value(name)?),
        },
        SecretCommand::List { .. } => ManageOp::Secrets {},
        SecretCommand::Remove { name, .. } => ManageOp::RemoveSecret {
            secret: name.clone(),
        },
    };
    let (account, result) = crate::client::manage_system(socket, command.account(), op).await?;
    let secrets: Secrets = serde_json::from_value(result)?;
    match command {
        SecretCommand::List { json, .. } => print_names(&secrets.names, json),
        SecretCommand::Set { ref name, .. } | SecretCommand::Remove { ref name, .. } => {
            let changed = secrets.changed == Some(true);
            let what = match (&command, changed) {
                (SecretCommand::Set { .. }, true) => "stored",
                (SecretCommand::Set { .. }, false) => "unchanged",
                (_, true) => "removed",
                (_, false) => "was not there",
            };
            println!("secret {name} of account {account} {what}");
            if !secrets.restarted.is_empty() {
                println!(
                    "restarted {} (they start with it on their next use)",
                    secrets.restarted.join(", ")
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Largest secret read from stdin or the terminal.
const MAX_SECRET_INPUT: u64 = 16 * 1024 + 1;

/// Reads the secret's value: from the terminal without echo, or all of stdin (one trailing line
/// break removed).
fn read_value(name: &str) -> anyhow::Result<String> {
    use std::io::Read;
    let stdin = std::io::stdin();
    let tty = rustix::termios::isatty(&stdin);
    let mut value = String::new();
    if tty {
        eprint!("value of {name} (not shown): ");
        let saved = rustix::termios::tcgetattr(&stdin)?;
        let mut quiet = saved.clone();
        quiet.local_modes.remove(rustix::termios::LocalModes::ECHO);
        rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &quiet)?;
        let read = std::io::stdin().read_line(&mut value);
        let _ = rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &saved);
        eprintln!();
        read?;
    } else {
        std::io::stdin()
            .take(MAX_SECRET_INPUT)
            .read_to_string(&mut value)?;
    }
    let value = value
        .strip_suffix('\n')
        .map(|v| v.strip_suffix('\r').unwrap_or(v))
        .unwrap_or(&value)
        .to_owned();
    anyhow::ensure!(!value.is_empty(), "no value was given");
    Ok(value)
}

/// `glovebox secret ...`: the secrets of an account of the user's state, or with `--system`
/// ([`secret_system`]) of an account this user owns.
pub async fn secret(env: &Env, args: SecretArgs) -> anyhow::Result<ExitCode> {
    if args.system {
        let layout = env.system_runtime(args.runtime_dir);
        return secret_system(&layout.approve_socket(), args.command).await;
    }
    let state_dir = env.state_dir(&StateArgs {
        state_dir: args.state_dir,
    });
    secret_user(&state_dir, args.command).await
}

/// `glovebox secret ...` in user mode, on the gate's admin socket.
async fn secret_user(state_dir: &Path, command: SecretCommand) -> anyhow::Result<ExitCode> {
    let state = StateDir::new(state_dir);
    let mut gate = crate::admin_socket::client(&state)?;
    let status = |s: tonic::Status| anyhow::anyhow!("{}", s.message());
    match command {
        SecretCommand::Set { account, name } => {
            let account = crate::admin_socket::account(&state, account)?;
            anyhow::ensure!(
                glovebox_config::mcp_json::is_secret_name(&name),
                "secret names are 1 to 64 of [A-Za-z0-9._-]"
            );
            let value = read_value(&name)?;
            let r = gate
                .set_secret(pb::SetSecretRequest {
                    account: account.clone(),
                    name: name.clone(),
                    value,
                })
                .await
                .map_err(status)?
                .into_inner();
            println!(
                "secret {name} of account {account} {}",
                if r.changed { "stored" } else { "unchanged" }
            );
            restart_users(&state, &account, &name).await;
        }
        SecretCommand::List { account, json } => {
            let account = crate::admin_socket::account(&state, account)?;
            let r = gate
                .list_secrets(pb::ListSecretsRequest { account })
                .await
                .map_err(status)?
                .into_inner();
            print_names(&r.names, json);
        }
        SecretCommand::Remove { account, name } => {
            let account = crate::admin_socket::account(&state, account)?;
            let r = gate
                .remove_secret(pb::RemoveSecretRequest {
                    account: account.clone(),
                    name: name.clone(),
                })
                .await
                .map_err(status)?
                .into_inner();
            println!(
                "secret {name} of account {account} {}",
                if r.changed {
                    "removed"
                } else {
                    "was not there"
                }
            );
            restart_users(&state, &account, &name).await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Restarts the packs that use `secret` (best effort: with glovebox stopped, nothing runs).
async fn restart_users(state: &StateDir, account: &str, secret: &str) {
    let Ok(mut client) = packs_client(state, account) else {
        return;
    };
    if let Ok(r) = client
        .reload(pb::ReloadPacksRequest {
            secret: secret.to_owned(),
        })
        .await
        && !r.get_ref().restarted.is_empty()
    {
        println!(
            "restarted {} (they start with it on their next use)",
            r.into_inner().restarted.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_shows_tools_and_errors() {
        let listed = pb::ListPacksResponse {
            tools: vec![pb::PackTool {
                name: "e__echo".into(),
                pack: "e".into(),
                tool: "echo".into(),
                read_only: true,
                origin: "user".into(),
                ..Default::default()
            }],
            errors: vec![pb::PackError {
                pack: "gh".into(),
                origin: "project".into(),
                message: "waiting for the account's approver".into(),
            }],
            untrusted: vec![],
            packs: vec![],
        };
        assert_eq!(
            render_list(&listed),
            "e__echo  (user, read-only, e)\nerror: gh (project): waiting for the account's approver\n"
        );
        assert_eq!(
            render_list(&pb::ListPacksResponse::default()),
            "no packs are configured\n"
        );
    }

    #[test]
    fn each_packs_state_is_said_and_its_error_not_twice() {
        let status = |name: &str, state: &str, message: &str| pb::PackStatus {
            name: name.into(),
            origin: "user".into(),
            state: state.into(),
            message: message.into(),
            trust: String::new(),
        };
        let listed = pb::ListPacksResponse {
            tools: vec![pb::PackTool {
                name: "e__echo".into(),
                pack: "e".into(),
                tool: "echo".into(),
                origin: "user".into(),
                ..Default::default()
            }],
            errors: vec![
                pb::PackError {
                    pack: "slow".into(),
                    origin: "user".into(),
                    message: "still starting after 3 s".into(),
                },
                pb::PackError {
                    pack: String::new(),
                    origin: "user".into(),
                    message: "mcp.json: line 3: expected a string".into(),
                },
            ],
            untrusted: vec![],
            packs: vec![
                status("e", "ready", ""),
                status("slow", "starting", "still starting after 3 s"),
                status("gone", "failed", "spawn gone: not found"),
            ],
        };
        assert_eq!(
            render_list(&listed),
            "pack e (user): ready, 1 tools\n\
             pack slow (user): starting: still starting after 3 s\n\
             pack gone (user): failed: spawn gone: not found\n\
             e__echo  (user, may change things, e)\n\
             error: - (user): mcp.json: line 3: expected a string\n"
        );
    }
}
