//! `glovebox account add|list|show|remove`: accounts while glovebox runs, through the gate's
//! admin socket (the state's owner in user mode, root in system mode). The gate checks, writes
//! and audits each change (with the caller's uid); the supervisor starts or stops the account's
//! executor and pack host and tells the broker (see `supervisor/src/accounts.rs`). An account's
//! credentials too: `glovebox token show|rotate` ([`token`]).

use std::path::PathBuf;
use std::process::ExitCode;

use glovebox_config::StateDir;
use glovebox_proto::v1 as pb;
use glovebox_proto::ws::Role;

use crate::shared_args::StateArgs;
use crate::{Env, outln};

/// `glovebox account`.
#[derive(clap::Args, Debug)]
pub(crate) struct AccountArgs {
    /// State directory (default: $XDG_STATE_HOME/glovebox, or ~/.local/state/glovebox;
    /// /var/lib/glovebox with --system).
    #[arg(long, value_name = "DIR", global = true)]
    pub(crate) state_dir: Option<PathBuf>,
    /// The system service's accounts (as root, on its admin socket).
    #[arg(long, global = true)]
    pub(crate) system: bool,
    /// With --system: where its sockets are (default: /run/glovebox).
    #[arg(long, value_name = "DIR", global = true, requires = "system")]
    pub(crate) runtime_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: AccountCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum AccountCommand {
    /// Add an account: its executor and pack host start at once, as --run-as; its agent token is
    /// written to <state>/accounts/ID/token (0600). Its tools are off unless --enabled.
    Add {
        /// Its id: 1-64 of [A-Za-z0-9_.-], not starting with '.' or '-'.
        id: String,
        /// The directory its agents work in (must exist).
        #[arg(long, value_name = "DIR")]
        workdir: PathBuf,
        /// A directory its executor and jobs may touch at all (default: the workdir); repeat.
        #[arg(long = "root", value_name = "DIR")]
        roots: Vec<PathBuf>,
        /// The OS user its executor, pack host and jobs run as (required in system mode).
        #[arg(long, value_name = "USER")]
        run_as: Option<String>,
        /// The OS user who approves its asks (required in system mode).
        #[arg(long, value_name = "USER")]
        owner: Option<String>,
        /// Switch its tools on now (`glovebox enable` later otherwise).
        #[arg(long)]
        enabled: bool,
    },
    /// Every account: where it comes from (glovebox.yaml, added, or glovebox.yaml's changed at
    /// run time), its workdir, users and switch.
    List {
        /// One JSON object per account, one per line.
        #[arg(long)]
        json: bool,
    },
    /// One account.
    Show {
        /// The account's id.
        id: String,
        /// As one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Move an account to another workdir (its executor and pack host restart there). An account
    /// of glovebox.yaml is taken over into accounts.yaml by its first change at run time, until
    /// its entry in glovebox.yaml is edited.
    SetWorkdir {
        /// The account's id.
        id: String,
        /// Its new workdir (an existing directory).
        workdir: PathBuf,
    },
    /// Let an account's executor and jobs touch one more directory (not a home directory, not
    /// one holding glovebox's state).
    AddRoot {
        /// The account's id.
        id: String,
        /// The directory.
        root: PathBuf,
    },
    /// Take a directory from an account's roots (one that holds its workdir stays).
    RemoveRoot {
        /// The account's id.
        id: String,
        /// One of its roots.
        root: PathBuf,
    },
    /// Give an account's asks to another approver: the OS user whose `glovebox approve
    /// --system` answers them (its executor and pack host restart).
    SetOwner {
        /// The account's id.
        id: String,
        /// The new owner's user name (not root, not the account's run_as user).
        owner: String,
    },
    /// Remove an account added with `account add`: its tokens are refused at once, its
    /// connections close and its executor and pack host stop. Its directory in the state is
    /// kept under removed/ for review, never reused.
    Remove {
        /// The account's id.
        id: String,
    },
}

/// `glovebox account ...`: on the user's state, or with `--system` the system service's.
pub async fn run(env: &Env, args: AccountArgs) -> anyhow::Result<ExitCode> {
    let state = if args.system {
        env.system_state(args.state_dir, args.runtime_dir)
    } else {
        StateDir::new(env.state_dir(&StateArgs {
            state_dir: args.state_dir,
        }))
    };
    run_on(&state, args.command).await
}

/// Runs an account command against the gate of `state`.
async fn run_on(state: &StateDir, command: AccountCommand) -> anyhow::Result<ExitCode> {
    let mut gate = crate::admin_socket::client(state)?;
    match command {
        AccountCommand::Add {
            id,
            workdir,
            roots,
            run_as,
            owner,
            enabled,
        } => {
            let request = pb::AddAccountRequest {
                id,
                workdir: absolute(workdir),
                roots: roots.into_iter().map(absolute).collect(),
                run_as: run_as.unwrap_or_default(),
                owner: owner.unwrap_or_default(),
                enabled,
            };
            add(state, &mut gate, request).await?;
        }
        AccountCommand::List { json: as_json } => list_all(&mut gate, as_json).await?,
        AccountCommand::Show { id, json: as_json } => show(state, &mut gate, &id, as_json).await?,
        AccountCommand::SetWorkdir { id, workdir } => {
            let request = pb::UpdateAccountRequest {
                id: id.clone(),
                workdir: absolute(workdir),
                ..Default::default()
            };
            update(state, &mut gate, request).await?;
        }
        AccountCommand::AddRoot { id, root } => {
            let request = pb::UpdateAccountRequest {
                id: id.clone(),
                add_roots: vec![absolute(root)],
                ..Default::default()
            };
            update(state, &mut gate, request).await?;
        }
        AccountCommand::RemoveRoot { id, root } => {
            let request = pb::UpdateAccountRequest {
                id: id.clone(),
                remove_roots: vec![absolute(root)],
                ..Default::default()
            };
            update(state, &mut gate, request).await?;
        }
        AccountCommand::SetOwner { id, owner } => {
            let request = pb::UpdateAccountRequest {
                id: id.clone(),
                owner,
                ..Default::default()
            };
            update(state, &mut gate, request).await?;
        }
        AccountCommand::Remove { id } => remove(state, &mut gate, id).await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Adds an account and says whether its executor and pack host run, where its tokens are and
/// whether its tools are on.
async fn add(
    state: &StateDir,
    gate: &mut Gate,
    request: pb::AddAccountRequest,
) -> anyhow::Result<()> {
    let id = request.id.clone();
    let enabled = request.enabled;
    let r = gate
        .add_account(request)
        .await
        .map_err(crate::admin_socket::gate_error)?
        .into_inner();
    if wait_applied(state, gate, &id, true).await {
        outln!("added account {id:?}; its executor and pack host are running");
    } else {
        outln!(
            "added account {id:?}, but its executor has not started within {}s: \
             see glovebox's log and the audit (kind 'service')",
            APPLY_WAIT.as_secs()
        );
    }
    outln!("  token:    {} (agent)", r.token_file);
    outln!("  approver: {}", r.approver_token_file);
    if !enabled {
        outln!("  its tools are off: `glovebox enable --account {id}` switches them on");
    }
    Ok(())
}

/// Prints every account, a line (or a JSON object) each.
async fn list_all(gate: &mut Gate, as_json: bool) -> anyhow::Result<()> {
    let r = list(gate).await?;
    for a in &r.accounts {
        if as_json {
            outln!("{}", json(a));
        } else {
            outln!("{}", line(a));
        }
    }
    Ok(())
}

/// Prints one account, a field a line (or as one JSON object).
async fn show(state: &StateDir, gate: &mut Gate, id: &str, as_json: bool) -> anyhow::Result<()> {
    let r = list(gate).await?;
    let Some(a) = r.accounts.iter().find(|a| a.id == id) else {
        anyhow::bail!("no account {id:?}");
    };
    if as_json {
        outln!("{}", json(a));
        return Ok(());
    }
    outln!("id:       {}", a.id);
    outln!("workdir:  {}", a.workdir);
    outln!("roots:    {}", a.roots.join(", "));
    outln!(
        "run_as:   {}",
        or_default(&a.run_as, "(the user glovebox runs as)")
    );
    outln!("owner:    {}", or_default(&a.owner, "(none)"));
    outln!("enabled:  {}", a.enabled);
    outln!("from:     {}", from(a));
    outln!("token:    {}", state.token_file(&a.id).display());
    Ok(())
}

/// Removes an account and waits until its executor has stopped.
async fn remove(state: &StateDir, gate: &mut Gate, id: String) -> anyhow::Result<()> {
    gate.remove_account(pb::RemoveAccountRequest { id: id.clone() })
        .await
        .map_err(crate::admin_socket::gate_error)?;
    wait_applied(state, gate, &id, false).await;
    outln!("removed account {id:?}: its tokens are refused and its executor stopped");
    Ok(())
}

fn absolute(p: PathBuf) -> String {
    std::path::absolute(&p).unwrap_or(p).display().to_string()
}

type Gate = pb::gate_admin_client::GateAdminClient<glovebox_proto::transport::Link>;

/// Sends a change of an added account and waits until its executor runs again (a new socket).
async fn update(
    state: &StateDir,
    gate: &mut Gate,
    request: pb::UpdateAccountRequest,
) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let socket = state.executor_socket(&request.id);
    // A new socket, not the same file: its inode alone is not enough, a file system reuses the
    // number of the one just removed; its change time (nanoseconds) tells them apart.
    let inode = |p: &std::path::Path| {
        std::fs::symlink_metadata(p)
            .map(|m| (m.ino(), m.ctime(), m.ctime_nsec()))
            .ok()
    };
    let before = inode(&socket);
    let id = request.id.clone();
    let r = gate
        .update_account(request)
        .await
        .map_err(crate::admin_socket::gate_error)?
        .into_inner();
    let deadline = tokio::time::Instant::now() + APPLY_WAIT;
    loop {
        let now = inode(&socket);
        if now.is_some() && now != before && wait_applied(state, gate, &id, true).await {
            outln!("changed account {id:?}: roots {}", r.roots.join(", "));
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            outln!(
                "changed account {id:?}, but its executor has not restarted within {}s: see \
                 glovebox's log and the audit (kind 'service')",
                APPLY_WAIT.as_secs()
            );
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// How long `add` and `remove` wait for glovebox to start or stop the account's services.
const APPLY_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits until the account's executor socket is there (`present`) or gone, and the gate (which
/// restarts for the change) answers again: a script's next command finds the change in effect.
async fn wait_applied(
    state: &StateDir,
    gate: &mut pb::gate_admin_client::GateAdminClient<glovebox_proto::transport::Link>,
    id: &str,
    present: bool,
) -> bool {
    let deadline = tokio::time::Instant::now() + APPLY_WAIT;
    let socket = state.executor_socket(id);
    while tokio::time::Instant::now() < deadline {
        if socket.exists() == present
            && gate.list_accounts(pb::ListAccountsRequest {}).await.is_ok()
        {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    false
}

#[derive(clap::Subcommand, Debug)]
pub(crate) enum TokenCommand {
    /// Replace an account's agent or approver token with a new one (takes effect at once: the
    /// old token is refused and connections that used it are closed).
    Rotate {
        #[command(flatten)]
        state: StateArgs,
        /// The account (default: the only one, or the one named after you).
        #[arg(long)]
        account: Option<String>,
        /// Which credential: `agent` (tools, MCP, client-tool providers) or `approver` (asks).
        #[arg(long, value_enum)]
        role: RoleArg,
        /// The system service's account (`glovebox up --system`; run as root): an account
        /// added with `glovebox account add`.
        #[arg(long)]
        system: bool,
        /// With --system: where its sockets are (default: /run/glovebox).
        #[arg(long, value_name = "DIR", requires = "system")]
        runtime_dir: Option<PathBuf>,
    },
    /// Print an account's agent token (for its agent's configuration). User mode: read from the
    /// state. With --system, run as the account's owner: the broker's approve socket knows you
    /// by your uid and hands you only the tokens of accounts you own.
    Show {
        #[command(flatten)]
        state: StateArgs,
        /// Default: the only account you own (system mode), or the one named after you.
        #[arg(long)]
        account: Option<String>,
        /// Ask the system service (`glovebox up --system`) as yourself.
        #[arg(long)]
        system: bool,
        /// With --system: where its sockets are (default: /run/glovebox).
        #[arg(long, value_name = "DIR", requires = "system")]
        runtime_dir: Option<PathBuf>,
    },
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoleArg {
    Agent,
    Approver,
}

/// `glovebox token show|rotate`, on the user's state or with `--system` the system service's.
pub async fn token(env: &Env, command: TokenCommand) -> anyhow::Result<ExitCode> {
    match command {
        TokenCommand::Show {
            account,
            system: true,
            runtime_dir,
            ..
        } => {
            let layout = env.system_runtime(runtime_dir);
            token_show_system(&layout.approve_socket(), account.as_deref()).await
        }
        TokenCommand::Show { state, account, .. } => {
            token_show(&StateDir::new(env.state_dir(&state)), account.as_deref())
        }
        TokenCommand::Rotate {
            state,
            account,
            role,
            system,
            runtime_dir,
        } => {
            let state = env.state_for(state, system, runtime_dir);
            let account = if system {
                crate::admin_socket::running_account(&state, account).await?
            } else {
                crate::admin_socket::account(&state, account)?
            };
            token_rotate(&state, &account, matches!(role, RoleArg::Approver)).await
        }
    }
}

/// `glovebox token rotate`: a `glovebox.yaml` account's token is rewritten here in user mode
/// (its hash is in that file, which the broker follows); any other by the gate, the only writer
/// of `accounts.yaml` (in system mode, a `glovebox.yaml` account is taken over into it). While glovebox runs, waits until the
/// broker takes the new token, so the next command can use it.
pub async fn token_rotate(state: &StateDir, id: &str, approver: bool) -> anyhow::Result<ExitCode> {
    let role = if approver {
        Role::Approver
    } else {
        Role::Agent
    };
    // A glovebox.yaml account not taken over at run time: its entry in effect is in that file.
    let in_config = state.system_paths().is_none()
        && state.account_source(id)? == Some(glovebox_config::added_accounts::Source::File);
    let file = if in_config {
        glovebox_supervisor::init::rotate_token(state, id, approver)?
    } else {
        let mut gate = crate::admin_socket::client(state)?;
        let request = pb::RotateTokenRequest {
            id: id.to_owned(),
            approver,
        };
        let r = gate.rotate_token(request).await.map_err(|status| {
            if status.code() == tonic::Code::Unavailable {
                anyhow::anyhow!(
                    "no account {id:?} in {}, and glovebox is not running (an account added \
                     with `glovebox account add` has its token rotated while glovebox runs)",
                    state.config_file().display()
                )
            } else {
                crate::admin_socket::gate_error(status)
            }
        })?;
        PathBuf::from(r.into_inner().token_file)
    };
    outln!(
        "new {} token for account {id} in {}",
        role.as_str(),
        file.display()
    );
    if let Ok(url) = std::fs::read_to_string(state.broker_url_file()) {
        let target = crate::client::Target::new(url.trim(), &file, role)?;
        if crate::client::wait_accepted(&target, APPLY_WAIT).await == Some(false) {
            outln!(
                "glovebox has not taken it within {}s: see glovebox's log and the audit \
                 (kind 'service')",
                APPLY_WAIT.as_secs()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Longest answer read from the approve socket.
const MAX_TOKEN_REPLY_BYTES: u64 = 16 * 1024;

/// `glovebox token show`: the agent token of an account of this state directory.
pub fn token_show(state: &StateDir, account: Option<&str>) -> anyhow::Result<ExitCode> {
    let id = match account {
        Some(a) => a.to_owned(),
        None => glovebox_supervisor::init::default_account_name(),
    };
    anyhow::ensure!(
        glovebox_config::is_valid_account_id(&id),
        "no account {id:?}"
    );
    let path = state.token_file(&id);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("no token for account {id:?} ({}: {e})", path.display()))?;
    outln!("{}", text.trim());
    Ok(ExitCode::SUCCESS)
}

/// `glovebox token show --system`: asks the broker's approve socket as this user.
pub async fn token_show_system(
    socket: &std::path::Path,
    account: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let query = match account {
        Some(a) => {
            anyhow::ensure!(glovebox_config::is_valid_account_id(a), "no account {a:?}");
            format!("?account={a}")
        }
        None => String::new(),
    };
    let (status, body) = crate::client::approve_socket_get(
        socket,
        &format!("/v1/token{query}"),
        MAX_TOKEN_REPLY_BYTES,
    )
    .await?;
    anyhow::ensure!(status == 200, "refused ({status}): {}", body.trim());
    outln!("{}", body.trim());
    Ok(ExitCode::SUCCESS)
}

async fn list(
    gate: &mut pb::gate_admin_client::GateAdminClient<glovebox_proto::transport::Link>,
) -> anyhow::Result<pb::ListAccountsResponse> {
    Ok(gate
        .list_accounts(pb::ListAccountsRequest {})
        .await
        .map_err(crate::admin_socket::gate_error)?
        .into_inner())
}

fn or_default<'a>(value: &'a str, default: &'a str) -> &'a str {
    if value.is_empty() { default } else { value }
}

fn from(a: &pb::AccountEntry) -> &'static str {
    if a.added {
        "added at run time (accounts.yaml)"
    } else if a.taken_over {
        "glovebox.yaml, changed at run time (accounts.yaml)"
    } else {
        "glovebox.yaml"
    }
}

/// The one-word kind of [`from`], for lines and JSON.
fn kind(a: &pb::AccountEntry) -> &'static str {
    if a.added {
        "added"
    } else if a.taken_over {
        "changed"
    } else {
        "config"
    }
}

/// An account as JSON (`--json`).
fn json(a: &pb::AccountEntry) -> serde_json::Value {
    serde_json::json!({
        "id": a.id,
        "workdir": a.workdir,
        "roots": a.roots,
        "run_as": (!a.run_as.is_empty()).then_some(&a.run_as),
        "owner": (!a.owner.is_empty()).then_some(&a.owner),
        "enabled": a.enabled,
        "from": kind(a),
    })
}

/// One line of `account list`.
fn line(a: &pb::AccountEntry) -> String {
    format!(
        "{}\t{}\trun_as={}\towner={}\t{}\t{}",
        a.id,
        a.workdir,
        or_default(&a.run_as, "-"),
        or_default(&a.owner, "-"),
        if a.enabled { "enabled" } else { "disabled" },
        kind(a),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_line_names_where_the_account_comes_from() {
        let a = pb::AccountEntry {
            id: "n".into(),
            workdir: "/w".into(),
            added: true,
            ..Default::default()
        };
        assert_eq!(line(&a), "n\t/w\trun_as=-\towner=-\tdisabled\tadded");
        let b = pb::AccountEntry {
            run_as: "agent".into(),
            enabled: true,
            ..a
        };
        assert!(line(&b).contains("run_as=agent") && line(&b).ends_with("enabled\tadded"));
    }
}
