//! `glovebox doctor [--system]`: checks what glovebox needs from this machine and prints one line
//! per check, `OK|WARN|FAIL <check>: <finding>`, with the fix under each that is not OK. It
//! exits 1 when any check fails.
//!
//! - kernel ([`kernel`]): the Landlock ABI and its scopes, `no_new_privs`, cgroups;
//! - identities ([`users`]): in system mode the service users and the audit group; each
//!   account's `run_as`;
//! - files ([`files`]): the state directory, its keys and the audit database, the sockets;
//! - managed policy ([`managed`]): the directory and each file, and that each compiles;
//! - services: whether the running glovebox answers health (as `glovebox status` asks it).
//!
//! Each check takes facts (modes, uids, the ABI, a passwd entry) and returns a [`Finding`]; this
//! module only gathers the facts and prints.

mod files;
mod finding;
mod kernel;
mod managed;
mod users;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use glovebox_config::system::{AUDIT_GROUP, BROKER_USER, GATE_USER};
use glovebox_config::{Config, StateDir};

use crate::{Env, outln};
use files::{AccountFacts, Facts, Kind, Layout, Who};
pub use finding::{Finding, Level};

/// `glovebox doctor`.
#[derive(clap::Args, Debug)]
pub(crate) struct DoctorArgs {
    /// Check the system service (`glovebox up --system`): its users, /etc/glovebox,
    /// /var/lib/glovebox and /run/glovebox.
    #[arg(long)]
    pub(crate) system: bool,
    /// State directory (default: /var/lib/glovebox with --system, else as for `up`).
    #[arg(long, value_name = "DIR")]
    pub(crate) state_dir: Option<PathBuf>,
    /// glovebox.yaml (default: /etc/glovebox/glovebox.yaml with --system, else the state
    /// dir's).
    #[arg(long, value_name = "PATH")]
    pub(crate) config: Option<PathBuf>,
    /// Where the sockets are (default: /run/glovebox with --system, else the state dir's run/).
    #[arg(long, value_name = "DIR")]
    pub(crate) runtime_dir: Option<PathBuf>,
    /// Managed policy directory (default: /etc/glovebox/policy.d with --system, else the
    /// state dir's managed/).
    #[arg(long, value_name = "DIR")]
    pub(crate) policy_dir: Option<PathBuf>,
    /// One JSON object per check (level, check, finding, fix), one per line.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Where to look. [`Options::new`] fills in each mode's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub system: bool,
    pub state_dir: PathBuf,
    pub config: PathBuf,
    pub runtime_dir: PathBuf,
    pub policy_dir: PathBuf,
}

impl Options {
    /// The places `glovebox doctor` was given, made absolute; each one left out is its mode's:
    /// system mode's fixed places with `--system`, else the state directory's.
    pub fn new(env: &Env, args: DoctorArgs) -> Options {
        use glovebox_config::system;
        let system = args.system;
        let state_dir = match args.state_dir {
            Some(dir) => env.absolute(dir),
            None if system => PathBuf::from(system::STATE_DIR),
            None => env.default_state_dir.clone(),
        };
        let state = StateDir::new(&state_dir);
        let pick = |given: Option<PathBuf>, system_default: &str, user_default: PathBuf| match given
        {
            Some(p) => env.absolute(p),
            None if system => PathBuf::from(system_default),
            None => user_default,
        };
        Options {
            system,
            config: pick(args.config, system::CONFIG_FILE, state.config_file()),
            runtime_dir: pick(args.runtime_dir, system::RUNTIME_DIR, state.run_dir()),
            policy_dir: pick(
                args.policy_dir,
                system::POLICY_DIR,
                state_dir.join("managed"),
            ),
            state_dir,
        }
    }
}

/// `glovebox doctor [--system]`: checks the places of [`Options::new`].
pub async fn run(env: &Env, args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let json = args.json;
    doctor(&Options::new(env, args), json).await
}

/// Runs every check and prints the findings (`json`: one object per line).
pub async fn doctor(options: &Options, json: bool) -> anyhow::Result<ExitCode> {
    let findings = checks(options).await;
    let count = |l: Level| findings.iter().filter(|f| f.level == l).count();
    let failed = count(Level::Fail);
    if json {
        for f in &findings {
            outln!("{}", f.to_json());
        }
    } else {
        for f in &findings {
            outln!("{f}");
        }
        outln!(
            "{} OK, {} WARN, {failed} FAIL",
            count(Level::Ok),
            count(Level::Warn)
        );
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn user(name: &str) -> Option<users::UserFacts> {
    let u = nix::unistd::User::from_name(name).ok()??;
    Some(users::UserFacts {
        name: u.name,
        uid: u.uid.as_raw(),
        gid: u.gid.as_raw(),
        shell: u.shell.to_string_lossy().into_owned(),
    })
}

fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| format!("uid {uid}"))
}

fn group(name: &str) -> Option<users::GroupFacts> {
    let g = nix::unistd::Group::from_name(name).ok()??;
    Some(users::GroupFacts {
        name: g.name,
        gid: g.gid.as_raw(),
        members: g.mem,
    })
}

/// A user that does not exist: owns nothing, so every ownership check names it.
fn absent(name: &str) -> Who {
    Who::new(u32::MAX, name)
}

/// Every account the service runs: `config`'s and those added at run time (`accounts.yaml`, in
/// the state), as the supervisor merges them; and what to say of them.
fn every_account(
    config: &Config,
    entries: &[glovebox_config::RawAccount],
    state: &StateDir,
    system: bool,
) -> (Vec<glovebox_config::Account>, Finding) {
    use glovebox_config::added_accounts::{Source, source};
    let mut merged = config.clone();
    let (raw, added) = match state.load_added_accounts() {
        Ok(loaded) => loaded,
        Err(e) => {
            let fix = if system {
                "run `glovebox doctor --system` as root; if the file is damaged, restore it from a \
                 backup (the gate is its only writer)"
            } else {
                "check the state directory's permissions; if the file is damaged, restore it from \
                 a backup (the gate is its only writer)"
            };
            return (
                config.accounts.clone(),
                Finding::fail("accounts", e.to_string(), fix),
            );
        }
    };
    if let Err(e) = glovebox_config::added_accounts::merge(
        &mut merged,
        entries,
        &raw,
        added,
        &state.added_accounts_file(),
    ) {
        return (
            config.accounts.clone(),
            Finding::fail(
                "accounts",
                e.to_string(),
                "remove the account from glovebox.yaml or from the running service \
                 (`glovebox account remove ID`), not both",
            ),
        );
    }
    let finding = if merged.accounts.is_empty() {
        Finding::warn(
            "accounts",
            "no accounts yet",
            if system {
                "glovebox account add ID --workdir DIR --run-as USER --owner USER --system"
            } else {
                "glovebox account add ID --workdir DIR"
            },
        )
    } else {
        let named: Vec<String> = merged
            .accounts
            .iter()
            .map(|a| match source(entries, &raw, &a.id) {
                Some(Source::Added) => format!("{} (added)", a.id),
                Some(Source::TakenOver) => format!("{} (changed at run time)", a.id),
                _ => a.id.to_string(),
            })
            .collect();
        Finding::ok("accounts", named.join(", "))
    };
    (merged.accounts, finding)
}

async fn checks(options: &Options) -> Vec<Finding> {
    let mut out = kernel_checks();
    let config_shown = options.config.display().to_string();
    let (finding, config) = read_config(options, &config_shown);
    out.push(finding);
    let state = StateDir::new(&options.state_dir);
    let accounts = match &config {
        Some((config, entries)) => {
            let (found, finding) = every_account(config, entries, &state, options.system);
            out.push(finding);
            found
        }
        None => Vec::new(),
    };
    let ids = ServiceIds::look_up();
    out.extend(ids.findings(options.system));
    let owner = state_owner(options, &ids, &state);
    let mut account_facts = Vec::new();
    for a in &accounts {
        let (finding, facts) = account_identity(a, options.system, &config_shown, &owner);
        out.push(finding);
        account_facts.push(facts);
    }
    let layout = ids.layout(options, &state, &owner, account_facts);
    out.extend(file_checks(options, &state, &layout));
    out.extend(managed_policy_checks(options, &owner, &accounts));
    out.extend(services(options, &state).await);
    out
}

/// The kernel: what the sandbox needs, and whether a job's walls go up here.
fn kernel_checks() -> Vec<Finding> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut out = kernel::checks(&glovebox_sandbox::probe::kernel_support(), &mounts);
    if let Ok(binary) = std::env::current_exe() {
        let walls = glovebox_sandbox::walls::Walls {
            namespaces: glovebox_supervisor::walls_args::namespaces_allowed(),
            ..Default::default()
        };
        out.push(kernel::walls(&glovebox_sandbox::walls::probe(
            &walls,
            &binary,
            |mut probe| probe.output(),
        )));
    }
    out
}

/// The configuration: in user mode `up` makes it; in system mode the package installs it.
fn read_config(
    options: &Options,
    shown: &str,
) -> (Finding, Option<(Config, Vec<glovebox_config::RawAccount>)>) {
    match std::fs::read_to_string(&options.config) {
        Ok(text) => match Config::parse_with_entries(&text, &options.config) {
            Ok((config, entries)) => (
                Finding::ok(
                    "config",
                    format!("{shown}: {} account(s)", config.accounts.len()),
                ),
                Some((config, entries)),
            ),
            Err(e) => (
                Finding::fail("config", e.to_string(), format!("fix {shown}")),
                None,
            ),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !options.system => (
            Finding::warn(
                "config",
                format!("{shown} does not exist"),
                "run `glovebox up` (it makes the state directory and the config)",
            ),
            None,
        ),
        Err(e) => {
            let fix = if options.system {
                "reinstall the glovebox package (it installs /etc/glovebox/glovebox.yaml)"
                    .to_owned()
            } else {
                format!("check the permissions of {shown}")
            };
            (Finding::fail("config", format!("{shown}: {e}"), fix), None)
        }
    }
}

/// The services' own identities: the gate's and the broker's users and the audit group.
struct ServiceIds {
    gate: Option<users::UserFacts>,
    broker: Option<users::UserFacts>,
    audit: Option<users::GroupFacts>,
}

impl ServiceIds {
    fn look_up() -> ServiceIds {
        ServiceIds {
            gate: user(GATE_USER),
            broker: user(BROKER_USER),
            audit: group(AUDIT_GROUP),
        }
    }

    /// In system mode, whether each is a system identity; in user mode, a warning for root.
    fn findings(&self, system: bool) -> Vec<Finding> {
        let (sys_uid_max, sys_gid_max) =
            users::system_id_max(&std::fs::read_to_string("/etc/login.defs").unwrap_or_default());
        if system {
            vec![
                users::service_user(GATE_USER, self.gate.as_ref(), sys_uid_max),
                users::service_user(BROKER_USER, self.broker.as_ref(), sys_uid_max),
                users::audit_group(self.audit.as_ref(), sys_gid_max),
            ]
        } else if nix::unistd::Uid::effective().is_root() {
            vec![Finding::warn(
                "identity",
                "running as root: an executor without run_as has root's reach, limited only by the policy",
                "run glovebox as your own user, or set run_as for each account",
            )]
        } else {
            Vec::new()
        }
    }

    /// Who should own what, for the file checks.
    fn layout(
        &self,
        options: &Options,
        state: &StateDir,
        owner: &Who,
        accounts: Vec<AccountFacts>,
    ) -> Layout {
        let mut socket_owners = vec![Who::new(0, "root")];
        for u in [&self.gate, &self.broker].into_iter().flatten() {
            socket_owners.push(Who::new(u.uid, &u.name));
        }
        socket_owners.extend(accounts.iter().map(|a| a.runs_as.clone()));
        Layout {
            system: options.system,
            state: state.clone(),
            runtime: options.runtime_dir.clone(),
            owner: owner.clone(),
            audit_group: options.system.then(|| {
                self.audit
                    .as_ref()
                    .map(|g| Who::new(g.gid, &g.name))
                    .unwrap_or_else(|| absent(AUDIT_GROUP))
            }),
            socket_owners,
            broker: self
                .broker
                .as_ref()
                .map(|u| (Who::new(u.uid, &u.name), Who::new(u.gid, &u.name))),
            accounts,
        }
    }
}

/// The state's owner: the gate's user in system mode; in user mode whoever owns the state
/// directory (or you, before it exists).
fn state_owner(options: &Options, ids: &ServiceIds, state: &StateDir) -> Who {
    if options.system {
        return ids
            .gate
            .as_ref()
            .map(|g| Who::new(g.uid, &g.name))
            .unwrap_or_else(|| absent(GATE_USER));
    }
    let facts = Facts::of(state.root());
    let uid = if facts.kind == Kind::Missing {
        nix::unistd::Uid::effective().as_raw()
    } else {
        facts.uid
    };
    Who::new(uid, user_name(uid))
}

/// An account's `run_as`, and who its executor runs as.
fn account_identity(
    account: &glovebox_config::Account,
    system: bool,
    config_shown: &str,
    owner: &Who,
) -> (Finding, AccountFacts) {
    let facts = account.run_as.as_deref().and_then(user);
    let finding = users::run_as(
        &account.id,
        account.run_as.as_deref(),
        facts.as_ref(),
        system,
        config_shown,
        owner.id,
    );
    let runs_as = match (&account.run_as, &facts) {
        (None, _) => owner.clone(),
        (Some(_), Some(u)) => Who::new(u.uid, &u.name),
        (Some(name), None) => absent(name),
    };
    let facts = AccountFacts {
        id: account.id.to_string(),
        runs_as,
        has_agent_token: !account.token_hashes.is_empty(),
    };
    (finding, facts)
}

/// The state directory's files and the sockets, each against its rule.
fn file_checks(options: &Options, state: &StateDir, layout: &Layout) -> Vec<Finding> {
    let mut out = Vec::new();
    let state_present = Facts::of(state.root()).kind != Kind::Missing;
    for (path, rule) in files::plan(layout) {
        // Under a state dir that does not exist yet, one finding says so.
        if !state_present && path.starts_with(state.root()) && path != state.root() {
            continue;
        }
        let path = rebase_runtime(&path, state, &options.runtime_dir);
        let facts = Facts::of(&path);
        if path == state.root() {
            let audit_db = Facts::of(&state.audit_db()).kind != Kind::Missing;
            if let Some(found) = files::not_set_up_yet(layout, &facts, audit_db) {
                out.push(found);
                continue;
            }
        }
        out.push(files::check(&path, &facts, &rule));
    }
    if options.system {
        for (path, facts) in runtime_entries(&options.runtime_dir) {
            let rel = path.strip_prefix(&options.runtime_dir).unwrap_or(&path);
            let rule = files::runtime_rule(layout, rel, facts.kind);
            out.push(files::check(&path, &facts, &rule));
        }
    }
    out
}

/// The managed policy directory and each file in it.
fn managed_policy_checks(
    options: &Options,
    owner: &Who,
    accounts: &[glovebox_config::Account],
) -> Vec<Finding> {
    let root = Who::new(0, "root");
    let policy_owners = if options.system {
        vec![root]
    } else {
        vec![owner.clone(), root]
    };
    let dir_missing = if options.system {
        (
            Level::Warn,
            "reinstall the glovebox package (it installs /etc/glovebox/policy.d), or: mkdir -m 755 /etc/glovebox/policy.d",
        )
    } else {
        (Level::Ok, "no managed policy")
    };
    let dir = &options.policy_dir;
    let dir_facts = Facts::of(dir);
    let mut out = vec![files::check(
        dir,
        &dir_facts,
        &managed::rule(Kind::Dir, &policy_owners, dir_missing),
    )];
    if dir_facts.kind != Kind::Dir {
        return out;
    }
    let workdir = accounts
        .first()
        .map(|a| a.workdir.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/home/user/project".to_owned());
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    paths.retain(|p| managed::is_policy_file(p));
    paths.sort();
    for path in paths {
        let facts = Facts::of(&path);
        let text = (facts.kind == Kind::File)
            .then(|| std::fs::read_to_string(&path).ok())
            .flatten();
        out.push(managed::file(
            &path,
            &facts,
            &policy_owners,
            text.as_deref(),
            &workdir,
        ));
    }
    out
}

/// `path` under the state's run dir, moved to `runtime` (which `--runtime-dir` may override).
fn rebase_runtime(path: &Path, state: &StateDir, runtime: &Path) -> PathBuf {
    match path.strip_prefix(state.run_dir()) {
        Ok(rest) if rest.as_os_str().is_empty() => runtime.to_owned(),
        Ok(rest) => runtime.join(rest),
        Err(_) => path.to_owned(),
    }
}

/// The sockets and directories in a system-mode runtime dir, two levels deep.
fn runtime_entries(runtime: &Path) -> Vec<(PathBuf, Facts)> {
    let mut out = Vec::new();
    let mut dirs = vec![(runtime.to_owned(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            let facts = Facts::of(&path);
            match facts.kind {
                Kind::Socket => out.push((path, facts)),
                Kind::Dir => {
                    out.push((path.clone(), facts));
                    if depth < 1 {
                        dirs.push((path, depth + 1));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Whether the running glovebox answers health, as `glovebox status` asks it.
async fn services(options: &Options, state: &StateDir) -> Vec<Finding> {
    let runtime = &options.runtime_dir;
    let start = if options.system {
        "systemctl enable --now glovebox"
    } else {
        "glovebox up (or: systemctl --user enable --now glovebox)"
    };
    let lock = rebase_runtime(&state.lock_file(), state, runtime);
    let pid = std::fs::read_to_string(&lock)
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
        .filter(|p| crate::status::alive(*p));
    let Some(pid) = pid else {
        return vec![Finding::fail(
            "services",
            format!("glovebox is not running (no live {})", lock.display()),
            start,
        )];
    };
    let running: Vec<String> = crate::status::services(pid)
        .into_iter()
        .map(|(name, pid)| format!("{name} (pid {pid})"))
        .collect();
    let url = std::fs::read_to_string(rebase_runtime(&state.broker_url_file(), state, runtime))
        .map(|u| u.trim().to_owned())
        .unwrap_or_default();
    if url.is_empty() {
        return vec![Finding::fail(
            "services",
            format!("glovebox (pid {pid}) runs but its broker has not written broker.url"),
            "wait for it to start, or restart it",
        )];
    }
    let mut out = Vec::new();
    match crate::status::health(&url, state).await {
        Ok((200, body)) => {
            out.push(Finding::ok(
                "services",
                format!("health ok at {url}: {}", running.join(", ")),
            ));
            for e in body["policy_errors"].as_array().into_iter().flatten() {
                out.push(Finding::warn(
                    "policy",
                    e.as_str().unwrap_or_default().to_owned(),
                    "fix the file named; the last good policy applies until then",
                ));
            }
        }
        Ok((code, body)) => out.push(Finding::fail(
            "services",
            format!("health at {url} is HTTP {code}: {body}"),
            "see `glovebox status` and the service's log",
        )),
        Err(e) => out.push(Finding::fail(
            "services",
            format!("glovebox (pid {pid}) runs but its broker at {url} did not answer: {e}"),
            "see the service's log; restart it",
        )),
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::args::{Cli, Command};

    fn options(line: &[&str]) -> Options {
        let env = Env::fixed("/work", "/home/u/.local/state/glovebox");
        let cli = Cli::try_parse_from(["glovebox", "doctor"].iter().chain(line));
        match cli.map(|c| c.command) {
            Ok(Command::Doctor(args)) => Options::new(&env, args),
            other => panic!("not a doctor: {other:?}"),
        }
    }

    #[test]
    fn user_mode_looks_in_the_state_directory() {
        let state = Path::new("/home/u/.local/state/glovebox");
        assert_eq!(
            options(&[]),
            Options {
                system: false,
                state_dir: state.to_owned(),
                config: state.join("glovebox.yaml"),
                runtime_dir: state.join("run"),
                policy_dir: state.join("managed"),
            }
        );
        let o = options(&["--state-dir", "s"]);
        assert_eq!(o.state_dir, Path::new("/work/s"));
        assert_eq!(o.policy_dir, Path::new("/work/s/managed"));
    }

    #[test]
    fn system_mode_looks_in_its_own_places_unless_named() {
        assert_eq!(
            options(&["--system"]),
            Options {
                system: true,
                state_dir: PathBuf::from("/var/lib/glovebox"),
                config: PathBuf::from("/etc/glovebox/glovebox.yaml"),
                runtime_dir: PathBuf::from("/run/glovebox"),
                policy_dir: PathBuf::from("/etc/glovebox/policy.d"),
            }
        );
        let o = options(&["--system", "--runtime-dir", "r", "--config", "/c.yaml"]);
        assert_eq!(o.runtime_dir, Path::new("/work/r"));
        assert_eq!(o.config, Path::new("/c.yaml"));
    }
}
