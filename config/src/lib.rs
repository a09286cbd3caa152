//! glovebox's on-disk state: where each file lives in the state directory, and `glovebox.yaml`
//! in two stages (raw, as written; validated, with typed addresses and absolute paths).
//!
//! ```text
//! <state>/glovebox.yaml                      listen address, accounts, token hashes
//! <state>/accounts/<id>/permissions.yaml     the account's policy (read by the gate)
//! <state>/accounts/<id>/token                the account's agent token (0600; the user's copy)
//! <state>/accounts/<id>/approver.token       the account's approver token (0600)
//! <state>/accounts/<id>/mcp.json             the account's tool packs (read by the gate)
//! <state>/accounts/<id>/trusted-packs.yaml   project packs trusted "always" (written by the gate)
//! <state>/accounts/<id>/pack-secrets.json    the account's pack secrets, encrypted
//! <state>/secrets.key                        the key pack secrets are encrypted with (0600)
//! <state>/audit.db                           the audit store (owned by the gate)
//! <state>/ticket.key                         the gate's master ticket key (0600)
//! <state>/control.key                        the key every control-socket key derives from (0600)
//! <state>/audit.key, audit.head              the audit chain's key (0600) and its signed head
//! <state>/machine-id                         this machine's fleet id when /etc/machine-id is unreadable
//! <state>/audit-ship/<target>.cursor         the last row shipped to each fleet database
//! <state>/run/                               sockets and the lock of a running `glovebox up`
//! <state>/run/exec-<id>/                      the account's executor and pack host sockets (owned by its run_as user)
//! ```
//!
//! In system mode ([`StateDir::system`], `glovebox up --system`) `glovebox.yaml` is a file of its
//! own (`/etc/glovebox/glovebox.yaml`) and the sockets live in a runtime directory
//! (`/run/glovebox`), one directory per service so that each directory's owner, group and mode
//! say exactly who may reach the sockets in it:
//!
//! ```text
//! <runtime>/glovebox.lock, broker.url        the supervisor's lock (root) and the broker's URL
//! <runtime>/gate/gate.sock                   the gate's main socket (the broker, the supervisor)
//! <runtime>/admin/admin.sock                 the gate's rule-management socket (root)
//! <runtime>/audit/audit.sock                 the gate's audit-only socket (executors, pack hosts)
//! <runtime>/exec-<id>/                       the account's executor and pack host sockets (the broker)
//! <runtime>/broker/approve.sock              approvers, authenticated by their uid (everyone may connect)
//! ```

mod account_id;
pub mod added_accounts;
pub mod audit_ship;
pub mod client_tools;
mod invalid;
pub mod job_env;
pub mod limits;
pub mod mcp_json;
pub mod sandbox;
pub mod system;
pub mod telemetry;

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub use account_id::{AccountId, NotAnAccountId, is_valid_account_id};
pub use invalid::Invalid;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The broker's default listen address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7420";

/// Why the state or config could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {}{message}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
    Invalid {
        path: PathBuf,
        line: Option<usize>,
        message: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl ConfigError {
    fn io(path: &Path, source: std::io::Error) -> ConfigError {
        ConfigError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// The layout of one state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
    /// System mode: the runtime directory and the config file, apart from the state.
    system: Option<SystemPaths>,
}

/// Where system mode keeps what user mode keeps in the state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemPaths {
    pub runtime: PathBuf,
    pub config: PathBuf,
}

impl StateDir {
    pub fn new(root: impl Into<PathBuf>) -> StateDir {
        StateDir {
            root: root.into(),
            system: None,
        }
    }

    /// System mode's layout: state in `root`, sockets in `runtime`, the config in `config`.
    pub fn system(
        root: impl Into<PathBuf>,
        runtime: impl Into<PathBuf>,
        config: impl Into<PathBuf>,
    ) -> StateDir {
        StateDir {
            root: root.into(),
            system: Some(SystemPaths {
                runtime: runtime.into(),
                config: config.into(),
            }),
        }
    }

    /// System mode's paths, if this is a system layout.
    pub fn system_paths(&self) -> Option<&SystemPaths> {
        self.system.as_ref()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn config_file(&self) -> PathBuf {
        match &self.system {
            Some(s) => s.config.clone(),
            None => self.root.join("glovebox.yaml"),
        }
    }
    /// System mode: the directory of one service's sockets in the runtime directory (`gate`,
    /// `admin`, `audit`, `broker`, `exec-<id>`); user mode: the run directory.
    fn socket_dir(&self, service: &str) -> PathBuf {
        match &self.system {
            Some(s) => s.runtime.join(service),
            None => self.run_dir(),
        }
    }
    /// System mode: the directory of the gate's main socket (the broker's group may enter).
    pub fn gate_socket_dir(&self) -> PathBuf {
        self.socket_dir("gate")
    }
    /// System mode: the directory of the admin socket (root only).
    pub fn admin_socket_dir(&self) -> PathBuf {
        self.socket_dir("admin")
    }
    /// System mode: the directory of the audit socket (everyone may enter; the gate checks uids).
    pub fn audit_socket_dir(&self) -> PathBuf {
        self.socket_dir("audit")
    }
    /// System mode: the broker's directory (its approve socket).
    pub fn broker_socket_dir(&self) -> PathBuf {
        self.socket_dir("broker")
    }
    /// System mode: where approvers connect, authenticated by their uid.
    pub fn approve_socket(&self) -> PathBuf {
        self.broker_socket_dir().join("approve.sock")
    }
    pub fn account_dir(&self, account: &str) -> PathBuf {
        self.root.join("accounts").join(account)
    }
    /// System mode: the pack homes, beside the state directory (`/var/lib/glovebox-packs`): the
    /// accounts' `run_as` users reach none of the state, and need not have a home of their own.
    pub fn pack_homes_dir(&self) -> PathBuf {
        let mut name = self.root.file_name().unwrap_or_default().to_owned();
        name.push("-packs");
        self.root.with_file_name(name)
    }
    /// System mode: the pack home of one account (its `run_as` user's, 0700).
    pub fn pack_home_dir(&self, account: &str) -> PathBuf {
        self.pack_homes_dir().join(account)
    }
    pub fn permissions_file(&self, account: &str) -> PathBuf {
        self.account_dir(account).join("permissions.yaml")
    }
    /// The account's agent credential: tools, `/mcp`, client-tool providers.
    pub fn token_file(&self, account: &str) -> PathBuf {
        self.account_dir(account).join("token")
    }
    /// The account's approver credential: answering asks and switching the account's tools.
    pub fn approver_token_file(&self, account: &str) -> PathBuf {
        self.account_dir(account).join("approver.token")
    }
    pub fn audit_db(&self) -> PathBuf {
        self.root.join("audit.db")
    }
    pub fn ticket_key(&self) -> PathBuf {
        self.root.join("ticket.key")
    }
    /// The gate's audit key: the audit chain's MACs are made under it.
    pub fn audit_key(&self) -> PathBuf {
        self.root.join("audit.key")
    }
    /// The signed head of the audit chain, rewritten after every write.
    pub fn audit_head(&self) -> PathBuf {
        self.root.join("audit.head")
    }
    /// This machine's fleet id, made here when `/etc/machine-id` cannot be read.
    pub fn machine_id_file(&self) -> PathBuf {
        self.root.join("machine-id")
    }
    /// The shipping cursors: one file per fleet database (not in `audit.db`, which only the
    /// gate writes and never changes).
    pub fn audit_ship_dir(&self) -> PathBuf {
        self.root.join("audit-ship")
    }
    /// The secret every control socket's keys are derived from (see `glovebox_proto::transport`).
    pub fn control_key(&self) -> PathBuf {
        self.root.join("control.key")
    }
    /// Sockets, the lock and the broker's URL: `<state>/run`, or system mode's runtime directory.
    pub fn run_dir(&self) -> PathBuf {
        match &self.system {
            Some(s) => s.runtime.clone(),
            None => self.root.join("run"),
        }
    }
    pub fn lock_file(&self) -> PathBuf {
        self.run_dir().join("glovebox.lock")
    }
    pub fn gate_socket(&self) -> PathBuf {
        self.gate_socket_dir().join("gate.sock")
    }
    /// A directory of the account's own (its executor may run as another OS user).
    pub fn executor_run_dir(&self, account: &str) -> PathBuf {
        self.run_dir().join(format!("exec-{account}"))
    }
    pub fn executor_socket(&self, account: &str) -> PathBuf {
        self.executor_run_dir(account).join("executor.sock")
    }
    /// The account's pack host socket (the pack host runs as the executor's user).
    pub fn packs_socket(&self, account: &str) -> PathBuf {
        self.executor_run_dir(account).join("packs.sock")
    }
    /// The account's own tool packs (see [`mcp_json`]).
    pub fn mcp_json_file(&self, account: &str) -> PathBuf {
        self.account_dir(account).join("mcp.json")
    }
    /// Project packs the account's approver trusted "always" (never stored in the workdir).
    pub fn trusted_packs_file(&self, account: &str) -> PathBuf {
        self.account_dir(account).join("trusted-packs.yaml")
    }
    /// The account's pack secrets, each encrypted under [`StateDir::secrets_key`].
    pub fn pack_secrets_file(&self, account: &str) -> PathBuf {
        self.account_dir(account).join("pack-secrets.json")
    }
    /// The key pack secrets are encrypted with (the gate's).
    pub fn secrets_key(&self) -> PathBuf {
        self.root.join("secrets.key")
    }
    /// The gate's rule-management socket (`glovebox policy ...`); the broker never connects to it.
    pub fn admin_socket(&self) -> PathBuf {
        self.admin_socket_dir().join("admin.sock")
    }
    /// The gate's audit-only socket, which executors running as other users connect to.
    pub fn audit_socket(&self) -> PathBuf {
        self.audit_socket_dir().join("audit.sock")
    }
    /// User mode: the broker's front door as a Unix socket (`/v1/ws` and the rest, with the same
    /// credentials), in the private run directory, for local clients such as `glovebox mcp`;
    /// none in system mode, whose clients are other users.
    pub fn agent_socket(&self) -> Option<PathBuf> {
        self.system
            .is_none()
            .then(|| self.run_dir().join("broker.sock"))
    }
    /// Written by `glovebox up` once the broker listens: its WebSocket URL.
    pub fn broker_url_file(&self) -> PathBuf {
        self.run_dir().join("broker.url")
    }

    /// Reads `glovebox.yaml` as written (for commands that edit it).
    pub fn load_raw_config(&self) -> Result<RawConfig, ConfigError> {
        let path = self.config_file();
        let text = std::fs::read_to_string(&path).map_err(|e| ConfigError::io(&path, e))?;
        Config::parse(&text, &path)?;
        serde_yaml::from_str(&text).map_err(|e| ConfigError::Invalid {
            path: path.clone(),
            line: e.location().map(|l| l.line()),
            message: e.to_string(),
        })
    }

    /// Validates and writes `glovebox.yaml` atomically.
    pub fn save_raw_config(&self, raw: &RawConfig) -> Result<(), ConfigError> {
        let path = self.config_file();
        let text = raw.to_yaml().map_err(|e| ConfigError::Invalid {
            path: path.clone(),
            line: None,
            message: e.to_string(),
        })?;
        Config::parse(&text, &path)?;
        write_private_file(&path, text.as_bytes())
    }

    /// Loads and validates `glovebox.yaml`.
    pub fn load_config(&self) -> Result<Config, ConfigError> {
        let path = self.config_file();
        let text = std::fs::read_to_string(&path).map_err(|e| ConfigError::io(&path, e))?;
        Config::parse(&text, &path)
    }

    /// `glovebox.yaml` validated, and its accounts as written (one read of the file).
    pub fn load_config_and_entries(&self) -> Result<(Config, Vec<RawAccount>), ConfigError> {
        let path = self.config_file();
        let text = std::fs::read_to_string(&path).map_err(|e| ConfigError::io(&path, e))?;
        Config::parse_with_entries(&text, &path)
    }
}

/// `glovebox.yaml` as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default = "default_listen")]
    pub listen: String,
    /// None is a valid start: system mode adds accounts at run time (`glovebox account add`).
    #[serde(default)]
    pub accounts: Vec<RawAccount>,
    /// The front door's limits (see [`limits`]); absent: the broker's defaults.
    #[serde(default, skip_serializing_if = "limits::RawLimits::is_empty")]
    pub limits: limits::RawLimits,
    /// `/v1/client-tools` (see [`client_tools`]); absent: its defaults.
    #[serde(
        default,
        skip_serializing_if = "client_tools::RawClientTools::is_empty"
    )]
    pub client_tools: client_tools::RawClientTools,
    /// The audit's shipping to a fleet database (see [`audit_ship`]); absent: not shipped.
    #[serde(default, skip_serializing_if = "audit_ship::RawAudit::is_empty")]
    pub audit: audit_ship::RawAudit,
    /// Traces and metrics over OTLP (see [`telemetry`]); absent: off.
    #[serde(default, skip_serializing_if = "telemetry::RawTelemetry::is_empty")]
    pub telemetry: telemetry::RawTelemetry,
}

impl RawConfig {
    /// The YAML text of this config, with a header explaining the file.
    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        Ok(format!(
            "# glovebox configuration. Tokens are stored as SHA-256 hashes; each account's token is\n\
             # in accounts/<id>/token. glovebox refuses to start on an invalid file.\n{}",
            serde_yaml::to_string(self)?
        ))
    }
}

fn default_listen() -> String {
    DEFAULT_LISTEN.to_owned()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccount {
    pub id: String,
    pub workdir: String,
    /// The OS user the account's executor and jobs run as (needs `glovebox up` as root); default:
    /// the user who runs glovebox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<String>,
    /// The OS user who approves this account's asks (system mode, where it is required): their
    /// `glovebox approve` is the account's approver by the uid the kernel reports for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Directories the account's executor and jobs may touch at all (Landlock); default: the workdir.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roots: Vec<String>,
    /// Environment variables the account's jobs inherit from the service (names only; default:
    /// PATH, HOME, LANG, LC_ALL, LC_CTYPE, TERM, USER, LOGNAME, TZ). Nothing else ever reaches a job;
    /// names that would let a job's start-up run code or redirect git are refused ([`job_env`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub job_env: Vec<String>,
    /// Environment variables of the service the account's own `mcp.json` may read as
    /// `${env:NAME}` (names only; default none). A project's `.glovebox/mcp.json` reads none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pack_env: Vec<String>,
    /// What its jobs and pack servers reach beyond their files ([`sandbox`]).
    #[serde(default, skip_serializing_if = "sandbox::RawSandbox::is_empty")]
    pub sandbox: sandbox::RawSandbox,
    /// Whether the account's agents get tools at all. Off unless switched on
    /// (`glovebox enable --account ID`); the account `up` creates for its user is on.
    #[serde(default)]
    pub enabled: bool,
    /// SHA-256 (hex) of each agent token of this account (tools, `/mcp`, client-tool providers).
    #[serde(default)]
    pub token_sha256: Vec<String>,
    /// SHA-256 (hex) of each approver token of this account (asks, switching tools on and off).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approver_token_sha256: Vec<String>,
}

/// A validated account.
#[derive(Debug, Clone, PartialEq)]
pub struct Account {
    pub id: AccountId,
    pub workdir: PathBuf,
    /// Absolute; never empty (the workdir when none are configured).
    pub roots: Vec<PathBuf>,
    pub run_as: Option<String>,
    /// The OS user who approves the account's asks (system mode).
    pub owner: Option<String>,
    pub job_env: Vec<String>,
    /// The names `${env:NAME}` of the account's own `mcp.json` may read.
    pub pack_env: Vec<String>,
    pub sandbox: sandbox::Sandbox,
    pub enabled: bool,
    /// Agent credentials.
    pub token_hashes: Vec<[u8; 32]>,
    /// Approver credentials.
    pub approver_token_hashes: Vec<[u8; 32]>,
}

/// A validated `glovebox.yaml`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub listen: SocketAddr,
    pub accounts: Vec<Account>,
    pub limits: limits::Limits,
    /// With the environment's overrides applied.
    pub client_tools: client_tools::ClientTools,
    /// `audit.ship`, if configured.
    pub audit_ship: Option<audit_ship::Ship>,
    /// The file's `telemetry:` section, validated; `glovebox up` applies the `OTEL_*` variables
    /// over it (see [`telemetry::Telemetry::validate`]).
    pub telemetry: telemetry::RawTelemetry,
}

impl Config {
    /// [`Config::parse`], and the file's accounts as written.
    pub fn parse_with_entries(
        text: &str,
        path: &Path,
    ) -> Result<(Config, Vec<RawAccount>), ConfigError> {
        let config = Config::parse(text, path)?;
        let raw: RawConfig = serde_yaml::from_str(text).map_err(|e| ConfigError::Invalid {
            path: path.to_owned(),
            line: e.location().map(|l| l.line()),
            message: e.to_string(),
        })?;
        Ok((config, raw.accounts))
    }

    /// Parses and validates the text of `glovebox.yaml` read from `path`.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let invalid = |line: Option<usize>, message: String| ConfigError::Invalid {
            path: path.to_owned(),
            line,
            message,
        };
        let raw: RawConfig = serde_yaml::from_str(text)
            .map_err(|e| invalid(e.location().map(|l| l.line()), e.to_string()))?;
        let listen: SocketAddr = raw.listen.parse().map_err(|_| {
            invalid(
                None,
                format!(
                    "listen: expected an address like {DEFAULT_LISTEN}, got {:?}",
                    raw.listen
                ),
            )
        })?;
        let mut accounts: Vec<Account> = Vec::new();
        for (i, a) in raw.accounts.iter().enumerate() {
            let account = validate_account(&format!("accounts[{i}]"), a)
                .map_err(|message| invalid(account_line(text, i), message.0))?;
            if accounts.iter().any(|b| b.id == account.id) {
                return Err(invalid(
                    account_line(text, i),
                    format!("accounts[{i}].id: duplicate account {:?}", a.id),
                ));
            }
            accounts.push(account);
        }
        let limits = limits::Limits::validate(&raw.limits).map_err(|m| invalid(None, m.0))?;
        let client_tools =
            client_tools::ClientTools::validate(&raw.client_tools, |k| std::env::var(k).ok())
                .map_err(|m| invalid(None, m.0))?;
        let audit_ship = audit_ship::Ship::validate(&raw.audit).map_err(|m| invalid(None, m.0))?;
        telemetry::Telemetry::validate(&raw.telemetry, |_| None).map_err(|m| invalid(None, m.0))?;
        Ok(Config {
            listen,
            accounts,
            limits,
            client_tools,
            audit_ship,
            telemetry: raw.telemetry,
        })
    }

    pub fn account(&self, id: &str) -> Option<&Account> {
        self.accounts.iter().find(|a| a.id == id)
    }
}

/// The line (1-based) where the `index`-th entry of the `accounts:` list starts, for messages:
/// found in the usual block style (`accounts:` then `- ` items); `None` for other layouts.
fn account_line(text: &str, index: usize) -> Option<usize> {
    let mut lines = text.lines().enumerate();
    lines.find(|(_, l)| l.trim_end() == "accounts:")?;
    let mut item_indent = None;
    let mut seen = 0;
    for (n, line) in lines {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        if indent == 0 && !trimmed.starts_with('-') {
            return None; // the next top-level key: the list ended
        }
        if trimmed.starts_with("- ") || trimmed == "-" {
            let at = *item_indent.get_or_insert(indent);
            if indent == at {
                if seen == index {
                    return Some(n + 1);
                }
                seen += 1;
            }
        }
    }
    None
}

/// SHA-256 hashes of an account's tokens.
type TokenHashes = Vec<[u8; 32]>;

/// The hashes of an account's agent and approver tokens; no token may be both.
fn credential_hashes(at: &str, a: &RawAccount) -> Result<(TokenHashes, TokenHashes), Invalid> {
    let hashes = |field: &str, list: &[String]| {
        list.iter()
            .map(|h| {
                let mut out = [0u8; 32];
                hex::decode_to_slice(h, &mut out)
                    .map(|_| out)
                    .map_err(|_| format!("{at}.{field}: expected 64 hex digits"))
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let token_hashes = hashes("token_sha256", &a.token_sha256)?;
    let approver_token_hashes = hashes("approver_token_sha256", &a.approver_token_sha256)?;
    if token_hashes
        .iter()
        .any(|h| approver_token_hashes.contains(h))
    {
        return Err(crate::invalid::invalid!(
            "{at}: the same token is both an agent and an approver credential; they must differ"
        ));
    }
    Ok((token_hashes, approver_token_hashes))
}

/// An account's roots: absolute, never `/`; the workdir when none is listed.
fn roots_of(at: &str, a: &RawAccount, workdir: &Path) -> Result<Vec<PathBuf>, Invalid> {
    let mut roots = Vec::new();
    for r in &a.roots {
        let root = PathBuf::from(r);
        if root
            .components()
            .all(|c| matches!(c, std::path::Component::RootDir))
        {
            return Err(crate::invalid::invalid!(
                "{at}.roots: / would give the account's agents the whole machine; list the directories it needs"
            ));
        }
        if !root.is_absolute() {
            return Err(crate::invalid::invalid!(
                "{at}.roots: expected absolute paths, got {r:?}"
            ));
        }
        roots.push(root);
    }
    if roots.is_empty() {
        roots.push(workdir.to_owned());
    }
    Ok(roots)
}

/// The variables an account passes to jobs and packs, and its `run_as` and `owner` names.
fn check_env_and_users(at: &str, a: &RawAccount) -> Result<(), Invalid> {
    for name in &a.job_env {
        if let Some(why) = job_env::refusal(name) {
            return Err(crate::invalid::invalid!(
                "{at}.job_env: {name} cannot be passed to jobs: it {why}"
            ));
        }
    }
    for name in &a.pack_env {
        if !mcp_json::is_env_name(name) {
            return Err(crate::invalid::invalid!(
                "{at}.pack_env: expected environment variable names, got {name:?}"
            ));
        }
    }
    for (field, user) in [("run_as", &a.run_as), ("owner", &a.owner)] {
        if let Some(user) = user
            && (user.is_empty() || user == "root" || user.contains(['/', ':', '\0']))
        {
            return Err(crate::invalid::invalid!(
                "{at}.{field}: expected an unprivileged user name, got {user:?}"
            ));
        }
    }
    Ok(())
}

/// Validates one account entry (`at` names it in messages, e.g. `accounts[2]`).
fn validate_account(at: &str, a: &RawAccount) -> Result<Account, Invalid> {
    let Ok(id) = AccountId::parse(&a.id) else {
        return Err(crate::invalid::invalid!(
            "{at}.id: expected 1-64 characters of [A-Za-z0-9_.-] not starting with '.' or '-', got {:?}",
            a.id
        ));
    };
    let workdir = PathBuf::from(&a.workdir);
    if !workdir.is_absolute() {
        return Err(crate::invalid::invalid!(
            "{at}.workdir: expected an absolute path, got {:?}",
            a.workdir
        ));
    }
    let (token_hashes, approver_token_hashes) = credential_hashes(at, a)?;
    let roots = roots_of(at, a, &workdir)?;
    check_env_and_users(at, a)?;
    Ok(Account {
        id,
        workdir,
        roots,
        run_as: a.run_as.clone(),
        owner: a.owner.clone(),
        job_env: a.job_env.clone(),
        pack_env: a.pack_env.clone(),
        sandbox: sandbox::Sandbox::validate(at, &a.sandbox)?,
        enabled: a.enabled,
        token_hashes,
        approver_token_hashes,
    })
}

/// `N` bytes from the operating system's random source.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], std::io::Error> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(bytes)
}

/// A new random bearer token (256 bits, hex).
pub fn new_token() -> Result<String, std::io::Error> {
    Ok(hex::encode(random_bytes::<32>()?))
}

/// The SHA-256 of a token, as stored in `glovebox.yaml`.
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// What identifies one version of a file that is replaced by rename (modification time, length,
/// inode), taken from the directory entry itself so that a file swapped for a link is noticed.
pub type FileStamp = (std::time::SystemTime, u64, u64);

/// The [`FileStamp`] of `path`, or `None` if there is nothing there.
pub fn file_stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len(), meta.ino()))
}

/// Takes group and other permissions away from everything in the state directory (its files and
/// directories, not following links), so that no credential, key, policy or audit row is readable
/// by another user even when a file was written by hand with a wide mode. Returns what changed.
pub fn tighten_state(state: &StateDir) -> Result<Vec<PathBuf>, ConfigError> {
    use std::os::unix::fs::PermissionsExt;
    fn walk(dir: &Path, depth: usize, changed: &mut Vec<PathBuf>) -> Result<(), ConfigError> {
        let meta = std::fs::symlink_metadata(dir).map_err(|e| ConfigError::io(dir, e))?;
        tighten(dir, &meta, changed)?;
        if depth == 0 || !meta.is_dir() {
            return Ok(());
        }
        for entry in std::fs::read_dir(dir).map_err(|e| ConfigError::io(dir, e))? {
            let entry = entry.map_err(|e| ConfigError::io(dir, e))?;
            let kind = entry
                .file_type()
                .map_err(|e| ConfigError::io(&entry.path(), e))?;
            if kind.is_dir() {
                walk(&entry.path(), depth - 1, changed)?;
            } else if kind.is_file() {
                let path = entry.path();
                let meta =
                    std::fs::symlink_metadata(&path).map_err(|e| ConfigError::io(&path, e))?;
                tighten(&path, &meta, changed)?;
            }
        }
        Ok(())
    }
    fn tighten(
        path: &Path,
        meta: &std::fs::Metadata,
        changed: &mut Vec<PathBuf>,
    ) -> Result<(), ConfigError> {
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o700))
                .map_err(|e| ConfigError::io(path, e))?;
            changed.push(path.to_owned());
        }
        Ok(())
    }
    let mut changed = Vec::new();
    walk(state.root(), 4, &mut changed)?;
    Ok(changed)
}

/// Creates a directory (and parents) readable only by its owner.
pub fn create_private_dir(path: &Path) -> Result<(), ConfigError> {
    use std::os::unix::fs::PermissionsExt;
    // The directories this makes, outermost first.
    let missing: Vec<&Path> = path
        .ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && std::fs::symlink_metadata(p).is_err())
        .collect();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| ConfigError::io(path, e))?;
    // Each new directory exactly 0700: under a setgid parent (the system state dir, 2710) the
    // kernel would otherwise pass the setgid bit on.
    for dir in missing.into_iter().rev() {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| ConfigError::io(dir, e))?;
    }
    Ok(())
}

/// Writes a file readable only by its owner, atomically (temporary file, then rename), and
/// flushed to disk before it replaces the old one.
pub fn write_private_file(path: &Path, bytes: &[u8]) -> Result<(), ConfigError> {
    write_private(path, bytes, true)
}

/// [`write_private_file`] without flushing to disk: the new content replaces the old atomically
/// and survives the death of any process, but a power loss may leave the old one. For files
/// rewritten often, like the audit's head.
pub fn write_file_unsynced(path: &Path, bytes: &[u8]) -> Result<(), ConfigError> {
    write_private(path, bytes, false)
}

fn write_private(path: &Path, bytes: &[u8], sync: bool) -> Result<(), ConfigError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        if sync {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(|e| ConfigError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("/s/glovebox.yaml")).map_err(|e| e.to_string())
    }

    #[test]
    fn the_ask_timeout_is_a_limit_and_out_of_range_is_named() {
        let base = "accounts:\n  - id: alice\n    workdir: /home/alice\n";
        let c = parse(&format!("{base}limits:\n  ask_timeout_secs: 90\n")).unwrap();
        assert_eq!(
            c.limits.ask_timeout,
            Some(std::time::Duration::from_secs(90))
        );
        assert_eq!(parse(base).unwrap().limits.ask_timeout, None, "the default");
        let e = parse(&format!("{base}limits:\n  ask_timeout_secs: 0\n")).unwrap_err();
        assert!(
            e.contains("limits.ask_timeout_secs: expected 1 to 3600 seconds, got 0"),
            "{e}"
        );
    }

    #[test]
    fn valid_config() {
        let hash = hex::encode(token_hash("t"));
        let c = parse(&format!(
            "listen: 127.0.0.1:9000\naccounts:\n  - id: alice\n    workdir: /home/alice\n    token_sha256: [{hash}]\n"
        ))
        .unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(
            c.account("alice").unwrap().token_hashes,
            vec![token_hash("t")]
        );
        assert!(c.account("bob").is_none());
        assert_eq!(
            c.account("alice").unwrap().roots,
            vec![PathBuf::from("/home/alice")]
        );
    }

    #[test]
    fn a_config_may_start_with_no_accounts() {
        for text in [
            "accounts: []\n",
            "listen: 127.0.0.1:7420\n",
            "# nothing yet\n{}\n",
        ] {
            let c = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert!(c.accounts.is_empty(), "{text:?}");
        }
    }

    #[test]
    fn errors_name_file_line_and_expectation() {
        let cases = [
            (
                "accounts:\n  - id: a\n    workdir: /w\n    shell: zsh\n",
                "line 4: accounts[0]: unknown field `shell`",
            ),
            (
                "listen: nowhere\naccounts: [{id: a, workdir: /w}]\n",
                "listen: expected an address",
            ),
            (
                "accounts:\n  - id: a\n    workdir: /w\n  # bob\n  - id: b\n    workdir: relative\n",
                "line 5: accounts[1].workdir: expected an absolute path",
            ),
            ("accounts: [{id: ../x, workdir: /w}]\n", "accounts[0].id"),
            (
                "accounts: [{id: a, workdir: w}]\n",
                "expected an absolute path",
            ),
            (
                "accounts: [{id: a, workdir: /w}, {id: a, workdir: /v}]\n",
                "duplicate account",
            ),
            (
                "accounts: [{id: a, workdir: /w, token_sha256: [zz]}]\n",
                "64 hex digits",
            ),
            (
                "accounts: [{id: a, workdir: /w, roots: [/]}]\n",
                "the whole machine",
            ),
            (
                "accounts: [{id: a, workdir: /w, roots: [//]}]\n",
                "the whole machine",
            ),
            (
                "accounts: [{id: a, workdir: /w, job_env: [PATH, GIT_DIR]}]\n",
                "accounts[0].job_env: GIT_DIR cannot be passed to jobs: it redirects git",
            ),
            (
                "accounts: [{id: a, workdir: /w, job_env: [LD_PRELOAD]}]\n",
                "LD_PRELOAD cannot be passed to jobs",
            ),
            (
                "accounts: [{id: a, workdir: /w, job_env: [BASH_ENV]}]\n",
                "BASH_ENV cannot be passed to jobs: it names a file the shell runs",
            ),
        ];
        for (text, needle) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.starts_with("/s/glovebox.yaml: "), "{err}");
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_state_dir_written_with_wide_modes_is_tightened() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path().join("state"));
        std::fs::create_dir_all(state.account_dir("a")).unwrap();
        std::fs::write(state.token_file("a"), "t").unwrap();
        std::fs::write(state.config_file(), "x").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        std::fs::set_permissions(
            state.token_file("a"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        std::fs::set_permissions(state.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let changed = tighten_state(&state).unwrap();
        assert!(changed.contains(&state.token_file("a")), "{changed:?}");
        assert_eq!(mode(&state.token_file("a")), 0o600);
        assert_eq!(mode(state.root()), 0o700);
        assert!(tighten_state(&state).unwrap().is_empty());
    }

    #[test]
    fn private_files_are_0600_and_tokens_are_random() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub");
        create_private_dir(&p).unwrap();
        let f = p.join("token");
        write_private_file(&f, b"secret").unwrap();
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o700
        );
        // Under a setgid directory (the system state dir), new directories are still 0700.
        let setgid = dir.path().join("setgid");
        std::fs::create_dir(&setgid).unwrap();
        std::fs::set_permissions(&setgid, std::fs::Permissions::from_mode(0o2710)).unwrap();
        let inner = setgid.join("accounts/a");
        create_private_dir(&inner).unwrap();
        for d in [setgid.join("accounts"), inner] {
            let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o700, "{}", d.display());
        }
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
    }
}
