//! `mcp.json`, the tool packs of an account (`<state>/accounts/<id>/mcp.json`, the user's own)
//! and of a project (`<workdir>/.glovebox/mcp.json`, which comes with a repository), in two
//! stages: the file as written (strict: an unknown field is an error, so a misspelt `network`
//! cannot quietly leave a pack on the network), and validated pack definitions. Pure.
//!
//! ```json
//! { "mcpServers": {
//!     "github": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
//!                 "env": { "GITHUB_TOKEN": "${secret:github}" },
//!                 "network": "any", "timeout": 30, "disabledTools": ["delete_repo"] } } }
//! ```
//!
//! A pack is a server glovebox starts (`command`, `args`, `env`, `cwd`: stdio) or one already
//! running that it reaches over Streamable HTTP (`url`, `headers`): `https://` anywhere, plain
//! `http://` only on the loopback interface (a header may carry a token, which must not cross a
//! network in the clear).
//!
//! A bad entry is an error of that pack only (with the file and the line its entry starts on);
//! a file that is not JSON is an error of the whole file. Neither stops the other packs.
//!
//! Environment and header values are templates: literal text and references `${secret:NAME}` (a secret of
//! the account, see `glovebox secret set`) and `${env:NAME}` (a variable of the pack host's own
//! environment). A literal that looks like a credential is refused: the file may be shared or
//! committed, so a token belongs in a secret.
//!
//! Why one file past 800 lines: one file format, read, checked and edited as one (each field's
//! check beside the rule it enforces).

use crate::Invalid;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Largest `mcp.json` read, in bytes.
pub const MAX_FILE_BYTES: usize = 256 * 1024;
/// Most packs one file may configure.
pub const MAX_PACKS: usize = 64;
/// Most arguments of a pack's command, environment variables, disabled tools, labels or path
/// arguments.
pub const MAX_LIST: usize = 256;
/// Longest command, argument, environment value, label or name, in bytes.
pub const MAX_STRING_BYTES: usize = 4096;
/// A call's default time limit, and the longest a pack may set.
pub const DEFAULT_TIMEOUT_S: u64 = 30;
pub const MAX_TIMEOUT_S: u64 = 600;
/// Longest secret name.
pub const MAX_SECRET_NAME: usize = 64;
/// The project's file, relative to the workdir.
pub const PROJECT_FILE: &str = ".glovebox/mcp.json";

/// Which file configured a pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The account's own `mcp.json`: the user's, never asks for trust.
    User,
    /// The workdir's `.glovebox/mcp.json`: its packs start only once the approver trusted them.
    Project,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::User => "user",
            Origin::Project => "project",
        }
    }
}

/// Whether a pack's server may use the network, enforced by the kernel: `loopback` is a network
/// namespace of its own with only `lo` (servers it starts itself), `none` is no socket of any
/// network family (no TCP, UDP or DNS) — see `glovebox_sandbox::walls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    #[default]
    Any,
    Loopback,
    None,
}

impl Network {
    pub fn as_str(self) -> &'static str {
        match self {
            Network::Any => "any",
            Network::Loopback => "loopback",
            Network::None => "none",
        }
    }
}

/// The file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(rename = "mcpServers", default)]
    mcp_servers: BTreeMap<String, serde_json::Value>,
}

/// One pack as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPack {
    /// `stdio` or `http` (as other MCP clients write it); implied by `command` or `url`.
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default = "yes")]
    enabled: bool,
    #[serde(rename = "disabledTools", default)]
    disabled_tools: Vec<String>,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    network: Network,
    /// Seconds a call may take.
    #[serde(default)]
    timeout: Option<u64>,
    /// Argument names that are paths (`name`, or `tool:name` for one tool), besides those named
    /// like paths.
    #[serde(default)]
    path_args: Option<Vec<String>>,
    /// Argument names named like paths that are not (`name`, or `tool:name`).
    #[serde(default)]
    not_paths: Vec<String>,
    /// Directories or files the server may also read and execute (absolute, or `~/…` in the
    /// home of the account's executor user).
    #[serde(default)]
    read: Vec<String>,
    /// Directories the server may also write (the same forms).
    #[serde(default)]
    write: Vec<String>,
}

fn yes() -> bool {
    true
}

/// One piece of an environment value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Piece {
    Literal(String),
    Secret(String),
    Env(String),
}

/// An environment value: literal text and references, resolved when the pack starts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Template {
    /// As written (references, never a secret's value): what a trust ask shows.
    pub raw: String,
    pub pieces: Vec<Piece>,
}

impl Template {
    /// The secrets it names.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Secret(n) => Some(n.as_str()),
            _ => None,
        })
    }
}

/// Longest `url`, in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// A validated pack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackDef {
    pub name: String,
    pub origin: Origin,
    /// A Streamable HTTP server's endpoint; `None` for a stdio server (`command`).
    pub url: Option<String>,
    /// HTTP headers sent with every request to `url`, in name order.
    pub headers: Vec<(String, Template)>,
    /// Empty for an HTTP pack.
    pub command: String,
    pub args: Vec<String>,
    /// Name and value, in name order.
    pub env: Vec<(String, Template)>,
    /// Absolute: the working directory of the server (default: the workdir).
    pub cwd: PathBuf,
    pub network: Network,
    pub timeout_s: u64,
    pub enabled: bool,
    pub disabled_tools: Vec<String>,
    pub labels: Vec<String>,
    /// Argument names that are paths besides those named like paths (`None`: none declared).
    pub path_args: Option<Vec<String>>,
    /// Argument names named like paths that are not.
    pub not_paths: Vec<String>,
    /// What the server may also read and execute, and write: absolute paths, or `~/…` for the
    /// pack host to place in its user's home ([`check_grant`]).
    pub read: Vec<String>,
    pub write: Vec<String>,
}

impl PackDef {
    /// Every secret its environment or its headers name.
    pub fn secrets(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .env
            .iter()
            .chain(&self.headers)
            .flat_map(|(_, t)| t.secrets())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The environment as written (`NAME=raw value`), and an HTTP pack's headers (`NAME: raw
    /// value`): what a trust ask shows and keys on.
    pub fn env_as_written(&self) -> Vec<String> {
        self.env
            .iter()
            .map(|(k, t)| format!("{k}={}", t.raw))
            .chain(self.headers.iter().map(|(k, t)| format!("{k}: {}", t.raw)))
            .collect()
    }
}

/// A problem with a file or one of its packs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    /// The pack (`None` for the whole file).
    pub pack: Option<String>,
    pub origin: Origin,
    /// `<file>: line N: what was expected`.
    pub message: String,
}

/// What one file configures: its valid packs and its errors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    pub packs: Vec<PackDef>,
    pub errors: Vec<FileError>,
}

/// Parses `text`, the `mcp.json` at `path`, for an account whose canonical workdir is `workdir`.
pub fn parse(text: &str, path: &Path, origin: Origin, workdir: &Path) -> Parsed {
    let file = path.display();
    let whole = |message: String| Parsed {
        packs: Vec::new(),
        errors: vec![FileError {
            pack: None,
            origin,
            message,
        }],
    };
    if text.len() > MAX_FILE_BYTES {
        return whole(format!(
            "{file}: larger than {MAX_FILE_BYTES} bytes; not read"
        ));
    }
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return whole(format!("{file}: line {}: {e}", e.line())),
    };
    if !value.is_object() {
        return whole(format!(
            "{file}: line 1: expected an object with `mcpServers`"
        ));
    }
    let raw: RawFile = match serde_json::from_value(value) {
        Ok(r) => r,
        Err(e) => return whole(format!("{file}: line 1: {e}")),
    };
    if raw.mcp_servers.len() > MAX_PACKS {
        return whole(format!(
            "{file}: more than {MAX_PACKS} packs; none of them was started"
        ));
    }
    let mut parsed = Parsed::default();
    for (name, value) in raw.mcp_servers {
        let line = line_of(text, &name);
        match validate(&name, value, origin, workdir) {
            Ok(def) => parsed.packs.push(def),
            Err(why) => parsed.errors.push(FileError {
                pack: Some(name.clone()),
                origin,
                message: format!("{file}: line {line}: pack {name:?}: {why}"),
            }),
        }
    }
    parsed
}

/// `text` (an account's own `mcp.json`, empty if it has none) with pack `name` set to `def`
/// (replacing one of that name), everything else kept as written. Refused, with the reason a
/// listing would show, unless the pack is valid.
pub fn with_pack(text: &str, name: &str, def: serde_json::Value) -> Result<String, Invalid> {
    let mut file = edited_file(text)?;
    file.insert(name.to_owned(), def);
    let out = render(file)?;
    let check = parse(&out, Path::new("mcp.json"), Origin::User, Path::new("/"));
    match check.errors.into_iter().next() {
        Some(e) => Err(Invalid(e.message)),
        None => Ok(out),
    }
}

/// `text` without pack `name`; `None` if it has no such pack.
pub fn without_pack(text: &str, name: &str) -> Result<Option<String>, Invalid> {
    let mut file = edited_file(text)?;
    if file.remove(name).is_none() {
        return Ok(None);
    }
    render(file).map(Some)
}

fn edited_file(text: &str) -> Result<serde_json::Map<String, serde_json::Value>, Invalid> {
    if text.trim().is_empty() {
        return Ok(serde_json::Map::new());
    }
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("line {}: {e}", e.line()))?;
    match value.get("mcpServers") {
        None => Ok(serde_json::Map::new()),
        Some(serde_json::Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err("`mcpServers` is not an object".into()),
    }
}

fn render(servers: serde_json::Map<String, serde_json::Value>) -> Result<String, Invalid> {
    let file = serde_json::json!({ "mcpServers": servers });
    serde_json::to_string_pretty(&file)
        .map(|t| t + "\n")
        .map_err(|e| Invalid(e.to_string()))
}

/// The line a pack's entry starts on (its key's first occurrence, as a JSON string).
fn line_of(text: &str, name: &str) -> usize {
    let key = serde_json::to_string(name).unwrap_or_default();
    text.find(&key)
        .map_or(1, |at| text[..at].matches('\n').count() + 1)
}

fn validate(
    name: &str,
    value: serde_json::Value,
    origin: Origin,
    workdir: &Path,
) -> Result<PackDef, Invalid> {
    check_pack_name(name)?;
    let raw = RawPack::deserialize(value).map_err(|e| e.to_string())?;
    let http = raw.url.is_some() || raw.kind.as_deref() == Some("http");
    match raw.kind.as_deref() {
        None | Some("stdio") | Some("http") => {}
        Some(kind) => {
            return Err(crate::invalid::invalid!(
                "type must be \"stdio\" or \"http\", not {kind:?}"
            ));
        }
    }
    if http {
        return validate_http(name, raw, origin, workdir);
    }
    if !raw.headers.is_empty() {
        return Err("`headers` are for HTTP packs (`url`)".into());
    }
    let command = raw
        .command
        .clone()
        .ok_or("a pack needs a `command` (the server to start) or a `url` (a server to reach)")?;
    check_string("command", &command)?;
    if command.trim().is_empty() {
        return Err("the command is empty".into());
    }
    check_list("args", &raw.args)?;
    let timeout_s = check_common(&raw)?;
    if raw.env.len() > MAX_LIST {
        return Err(crate::invalid::invalid!(
            "more than {MAX_LIST} environment variables"
        ));
    }
    let mut env = Vec::new();
    for (key, value) in raw.env {
        if !is_env_name(&key) {
            return Err(crate::invalid::invalid!(
                "environment variable name {key:?} must be [A-Za-z_][A-Za-z0-9_]*"
            ));
        }
        check_string("an environment value", &value)?;
        let template = parse_template(&value).map_err(|why| format!("env {key}: {why}"))?;
        env.push((key, template));
    }
    let cwd = match &raw.cwd {
        None => workdir.to_owned(),
        Some(c) => {
            check_string("cwd", c)?;
            lexical_join(workdir, c)
        }
    };
    Ok(PackDef {
        name: name.to_owned(),
        origin,
        url: None,
        headers: Vec::new(),
        command,
        args: raw.args,
        env,
        cwd,
        network: raw.network,
        timeout_s,
        enabled: raw.enabled,
        disabled_tools: raw.disabled_tools,
        labels: raw.labels,
        path_args: raw.path_args,
        not_paths: raw.not_paths,
        read: raw.read,
        write: raw.write,
    })
}

/// Checks one `read` or `write` entry: an absolute path or `~/…`, with no `..`, and never `/` or
/// the home itself (a pack gets what it needs, not everything).
pub fn check_grant(entry: &str) -> Result<(), Invalid> {
    check_string("a read or write entry", entry)?;
    let rest = entry
        .strip_prefix("~/")
        .or_else(|| entry.strip_prefix('/'))
        .ok_or_else(|| format!("{entry:?} must be an absolute path or start with ~/"))?;
    let parts: Vec<&str> = rest
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(crate::invalid::invalid!("{entry:?} must not contain .."));
    }
    if parts.is_empty() {
        return Err(crate::invalid::invalid!(
            "{entry:?} would grant the whole {}: name the directory the pack needs",
            if entry.starts_with('~') {
                "home"
            } else {
                "file system"
            }
        ));
    }
    Ok(())
}

/// What every pack may set, checked the same way: its lists and its time limit (returned).
fn check_common(raw: &RawPack) -> Result<u64, Invalid> {
    check_list("disabledTools", &raw.disabled_tools)?;
    check_list("labels", &raw.labels)?;
    if let Some(p) = &raw.path_args {
        check_list("path_args", p)?;
    }
    check_list("not_paths", &raw.not_paths)?;
    check_list("read", &raw.read)?;
    check_list("write", &raw.write)?;
    for entry in raw.read.iter().chain(&raw.write) {
        check_grant(entry)?;
    }
    let timeout_s = raw.timeout.unwrap_or(DEFAULT_TIMEOUT_S);
    if !(1..=MAX_TIMEOUT_S).contains(&timeout_s) {
        return Err(crate::invalid::invalid!(
            "timeout must be 1 to {MAX_TIMEOUT_S} seconds"
        ));
    }
    Ok(timeout_s)
}

/// An HTTP pack: a `url` (see [`check_url`]) and `headers`; nothing of a started server.
fn validate_http(
    name: &str,
    raw: RawPack,
    origin: Origin,
    workdir: &Path,
) -> Result<PackDef, Invalid> {
    let url = raw.url.clone().ok_or("an HTTP pack needs a `url`")?;
    check_url(&url)?;
    if raw.command.is_some() || !raw.args.is_empty() || !raw.env.is_empty() || raw.cwd.is_some() {
        return Err(
            "an HTTP pack (`url`) starts nothing: `command`, `args`, `env` and `cwd` are for stdio packs"
                .into(),
        );
    }
    if !raw.read.is_empty() || !raw.write.is_empty() {
        return Err(
            "an HTTP pack (`url`) runs nothing here: `read` and `write` are for stdio packs".into(),
        );
    }
    if raw.network != Network::Any {
        return Err(crate::invalid::invalid!(
            "`network: {}` cannot hold for an HTTP pack, which is reached over the network",
            raw.network.as_str()
        ));
    }
    let timeout_s = check_common(&raw)?;
    if raw.headers.len() > MAX_LIST {
        return Err(crate::invalid::invalid!("more than {MAX_LIST} headers"));
    }
    let mut headers = Vec::new();
    for (key, value) in raw.headers {
        if !is_header_name(&key) {
            return Err(crate::invalid::invalid!(
                "header name {key:?} must be 1 to 128 of [A-Za-z0-9-]"
            ));
        }
        if RESERVED_HEADERS.iter().any(|r| key.eq_ignore_ascii_case(r)) {
            return Err(crate::invalid::invalid!(
                "header {key} is set by the MCP transport itself"
            ));
        }
        check_string("a header value", &value)?;
        if value.chars().any(char::is_control) {
            return Err(crate::invalid::invalid!(
                "header {key}: the value holds a control character"
            ));
        }
        let template = parse_template(&value).map_err(|why| format!("header {key}: {why}"))?;
        headers.push((key, template));
    }
    Ok(PackDef {
        name: name.to_owned(),
        origin,
        url: Some(url),
        headers,
        command: String::new(),
        args: Vec::new(),
        env: Vec::new(),
        cwd: workdir.to_owned(),
        network: Network::Any,
        timeout_s,
        enabled: raw.enabled,
        disabled_tools: raw.disabled_tools,
        labels: raw.labels,
        path_args: raw.path_args,
        not_paths: raw.not_paths,
        read: Vec::new(),
        write: Vec::new(),
    })
}

/// An HTTP pack's endpoint: `https://HOST[:PORT]/...`, or `http://` to a loopback host only
/// (`localhost`, `127.0.0.0/8`, `[::1]`); no user or password in it, no whitespace or control
/// characters, at most [`MAX_URL_BYTES`].
pub fn check_url(url: &str) -> Result<(), Invalid> {
    if url.len() > MAX_URL_BYTES {
        return Err(crate::invalid::invalid!(
            "the url is longer than {MAX_URL_BYTES} bytes"
        ));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the url holds whitespace or a control character".into());
    }
    let (scheme, rest) = url
        .split_once("://")
        .ok_or("the url must start with https:// (or http:// to this machine)")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(
            "the url holds a user or password: send credentials in `headers` with ${secret:NAME}"
                .into(),
        );
    }
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    if host.is_empty() {
        return Err("the url has no host".into());
    }
    match scheme.to_ascii_lowercase().as_str() {
        "https" => Ok(()),
        "http" if is_loopback_host(host) => Ok(()),
        "http" => Err(crate::invalid::invalid!(
            "plain http:// is allowed to this machine only (got host {host:?}): use https://"
        )),
        other => Err(crate::invalid::invalid!(
            "the url's scheme must be https or http, not {other:?}"
        )),
    }
}

fn is_loopback_host(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// Headers an HTTP pack's file may not set: the transport's and the protocol's own.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "connection",
    "content-length",
    "content-type",
    "host",
    "last-event-id",
    "mcp-protocol-version",
    "mcp-session-id",
    "te",
    "transfer-encoding",
    "upgrade",
];

fn is_header_name(name: &str) -> bool {
    (1..=128).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The same rule as `glovebox_proto::packs::check_pack_name` (this crate knows no wire
/// formats): 1 to 32 of `[A-Za-z0-9_-]`, no leading, trailing or double `_`, not `client`.
fn check_pack_name(name: &str) -> Result<(), Invalid> {
    let ok = (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !name.starts_with('_')
        && !name.ends_with('_')
        && !name.contains("__")
        && name != "client";
    if ok {
        Ok(())
    } else {
        Err("a pack name must be 1 to 32 of [A-Za-z0-9_-], not start or end with `_` or hold `__`, and not be `client`".into())
    }
}

fn check_string(what: &str, s: &str) -> Result<(), Invalid> {
    if s.len() > MAX_STRING_BYTES {
        return Err(crate::invalid::invalid!(
            "{what} is longer than {MAX_STRING_BYTES} bytes"
        ));
    }
    if s.contains('\0') {
        return Err(crate::invalid::invalid!("{what} holds a NUL byte"));
    }
    Ok(())
}

fn check_list(what: &str, items: &[String]) -> Result<(), Invalid> {
    if items.len() > MAX_LIST {
        return Err(crate::invalid::invalid!(
            "{what} has more than {MAX_LIST} entries"
        ));
    }
    items.iter().try_for_each(|i| check_string(what, i))
}

/// Whether `name` can name an environment variable: a letter or `_`, then letters, digits and
/// `_`, at most 128 bytes.
pub fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.len() <= 128
}

/// Whether `name` can name a secret: 1 to 64 of `[A-Za-z0-9._-]`.
pub fn is_secret_name(name: &str) -> bool {
    (1..=MAX_SECRET_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Splits an environment value into literal text and references, refusing a literal that looks
/// like a credential and a malformed reference.
pub fn parse_template(value: &str) -> Result<Template, Invalid> {
    let mut pieces = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        if start > 0 {
            pieces.push(Piece::Literal(rest[..start].to_owned()));
        }
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or("`${` without a closing `}` (write ${secret:NAME} or ${env:NAME})")?;
        let reference = &after[..end];
        let piece = match reference.split_once(':') {
            Some(("secret", n)) if is_secret_name(n) => Piece::Secret(n.to_owned()),
            Some(("env", n)) if is_env_name(n) => Piece::Env(n.to_owned()),
            _ => {
                return Err(crate::invalid::invalid!(
                    "${{{reference}}} is not a reference: write ${{secret:NAME}} or ${{env:NAME}}"
                ));
            }
        };
        pieces.push(piece);
        rest = &after[end + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Literal(rest.to_owned()));
    }
    for p in &pieces {
        if let Piece::Literal(text) = p
            && let Some(why) = looks_like_credential(text)
        {
            return Err(crate::invalid::invalid!(
                "the literal value looks like a credential ({why}); store it with `glovebox secret set` and write ${{secret:NAME}}"
            ));
        }
    }
    Ok(Template {
        raw: value.to_owned(),
        pieces,
    })
}

/// Why `text` looks like a credential, if it does: a known token prefix, a private key, a
/// password in a URL, a JWT, or a long run of letters and digits mixed like a generated token.
pub fn looks_like_credential(text: &str) -> Option<&'static str> {
    const PREFIXES: &[(&str, &str)] = &[
        ("ghp_", "a GitHub token"),
        ("gho_", "a GitHub token"),
        ("ghs_", "a GitHub token"),
        ("ghu_", "a GitHub token"),
        ("github_pat_", "a GitHub token"),
        ("glpat-", "a GitLab token"),
        ("xoxb-", "a Slack token"),
        ("xoxp-", "a Slack token"),
        ("sk-", "an API key"),
        ("sk_live_", "an API key"),
        ("AKIA", "an AWS key id"),
        ("AIza", "a Google API key"),
        ("eyJ", "a JWT"),
    ];
    if text.contains("PRIVATE KEY") {
        return Some("a private key");
    }
    for word in text.split(|c: char| c.is_whitespace() || c == '"' || c == '\'') {
        for (prefix, what) in PREFIXES {
            if word.starts_with(prefix) && word.len() >= prefix.len() + 8 {
                return Some(what);
            }
        }
        if let Some((scheme, rest)) = word.split_once("://")
            && !scheme.is_empty()
            && let Some((userinfo, _)) = rest.split_once('@')
            && userinfo.contains(':')
        {
            return Some("a password in a URL");
        }
        if is_token_like(word) {
            return Some("a long random-looking token");
        }
    }
    None
}

/// 24 or more characters of letters, digits and `-_+/=.`, with at least one letter, at least
/// one digit, and at most a few separators: what generated tokens look like, and what paths,
/// words and version numbers do not.
fn is_token_like(word: &str) -> bool {
    if word.len() < 24 || word.contains('/') && word.matches('/').count() > 2 {
        return false;
    }
    let tokenish = word
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'+' | b'/' | b'=' | b'.'));
    let digits = word.bytes().filter(u8::is_ascii_digit).count();
    let letters = word.bytes().filter(u8::is_ascii_alphabetic).count();
    let separators = word.len() - digits - letters;
    tokenish && digits >= 4 && letters >= 4 && separators <= 3
}

/// `base` joined with `rel` (absolute `rel` wins), `.` and `..` applied without touching the
/// file system.
fn lexical_join(base: &Path, rel: &str) -> PathBuf {
    let mut out = PathBuf::new();
    let joined = base.join(rel);
    for part in joined.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The packs in effect: the user's, then the project's that are trusted (a trusted project
/// pack replaces the user's pack of the same name; an untrusted one does not). `trusted` says
/// whether a project pack is trusted now.
pub fn merge(
    user: &[PackDef],
    project: &[PackDef],
    trusted: impl Fn(&PackDef) -> bool,
) -> Vec<PackDef> {
    let mut merged: BTreeMap<String, PackDef> =
        user.iter().map(|p| (p.name.clone(), p.clone())).collect();
    for p in project {
        if trusted(p) {
            merged.insert(p.name.clone(), p.clone());
        }
    }
    merged.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_user(text: &str) -> Parsed {
        parse(
            text,
            Path::new("/s/accounts/a/mcp.json"),
            Origin::User,
            Path::new("/w"),
        )
    }

    #[test]
    fn a_full_pack_is_validated() {
        let p = parse_user(
            r#"{"mcpServers": {"github": {
                "type": "stdio", "command": "npx", "args": ["-y", "srv"],
                "env": {"GITHUB_TOKEN": "${secret:github}", "MODE": "ro", "HOME_DIR": "${env:HOME}/x"},
                "cwd": "sub/../tools", "network": "none", "timeout": 5,
                "disabledTools": ["delete_repo"], "labels": ["vcs"], "path_args": ["path", "get:file"]
            }}}"#,
        );
        assert_eq!(p.errors, []);
        let g = &p.packs[0];
        assert_eq!(
            (g.name.as_str(), g.command.as_str(), g.args.len()),
            ("github", "npx", 2)
        );
        assert_eq!(g.cwd, Path::new("/w/tools"));
        assert_eq!(
            (g.network, g.timeout_s, g.enabled),
            (Network::None, 5, true)
        );
        assert_eq!(g.secrets(), ["github"]);
        assert_eq!(
            g.env_as_written(),
            [
                "GITHUB_TOKEN=${secret:github}",
                "HOME_DIR=${env:HOME}/x",
                "MODE=ro"
            ]
        );
        assert_eq!(
            g.env[1].1.pieces,
            [Piece::Env("HOME".into()), Piece::Literal("/x".into())]
        );
        assert_eq!(
            g.path_args.as_deref(),
            Some(&["path".into(), "get:file".into()][..])
        );
        let d = &parse_user(r#"{"mcpServers": {"e": {"command": "x"}}}"#).packs[0];
        assert_eq!(
            (d.network, d.timeout_s, d.cwd.as_path()),
            (Network::Any, 30, Path::new("/w"))
        );
        assert!(d.path_args.is_none());
    }

    #[test]
    fn each_bad_pack_is_its_own_error_and_the_others_stay() {
        let text = r#"{"mcpServers": {
  "good": {"command": "ok"},
  "typo": {"command": "x", "netwrok": "none"},
  "nocmd": {"args": ["a"]},
  "http": {"url": "http://example.com/mcp"},
  "bad__name": {"command": "x"},
  "slow": {"command": "x", "timeout": 601},
  "net": {"command": "x", "network": "some"},
  "leak": {"command": "x", "env": {"TOKEN": "ghp_0123456789abcdefghij0123456789abcdef"}},
  "ref": {"command": "x", "env": {"T": "${secret:}"}},
  "envname": {"command": "x", "env": {"1X": "a"}}
}}"#;
        let p = parse_user(text);
        assert_eq!(
            p.packs.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["good"]
        );
        let says = |pack: &str, needle: &str| {
            let e = p
                .errors
                .iter()
                .find(|e| e.pack.as_deref() == Some(pack))
                .unwrap_or_else(|| panic!("no error for {pack}: {:?}", p.errors));
            assert!(e.message.contains(needle), "{pack}: {}", e.message);
            assert!(
                e.message.starts_with("/s/accounts/a/mcp.json: line "),
                "{}",
                e.message
            );
        };
        says("typo", "unknown field `netwrok`");
        says("typo", "line 3:");
        says("nocmd", "needs a `command`");
        says("http", "use https://");
        says("bad__name", "pack name");
        says("slow", "timeout");
        says("net", "unknown variant `some`");
        says("leak", "looks like a credential (a GitHub token)");
        says("ref", "is not a reference");
        says("envname", "environment variable name");
        assert_eq!(p.errors.len(), 9);
    }

    #[test]
    fn urls_are_https_or_plain_http_to_this_machine_only() {
        for ok in [
            "https://example.com/mcp",
            "https://example.com:8443/a?b=c",
            "HTTPS://[2001:db8::1]/mcp",
            "http://localhost:8080/mcp",
            "http://127.0.0.1:3000/mcp",
            "http://127.8.9.10/mcp",
            "http://[::1]:9000/mcp",
        ] {
            assert_eq!(check_url(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("http://example.com/mcp", "use https://"),
            ("http://10.0.0.1/mcp", "use https://"),
            ("http://localhost.evil.com/mcp", "use https://"),
            ("http://[::2]/mcp", "use https://"),
            ("ftp://example.com/", "scheme"),
            ("example.com/mcp", "must start with"),
            ("https:///mcp", "no host"),
            ("https://user:pw@example.com/", "user or password"),
            ("https://example.com/a b", "whitespace"),
            ("https://example.com/\u{7}", "control"),
        ] {
            let e = check_url(bad).unwrap_err();
            assert!(e.0.contains(why), "{bad}: {e}");
        }
        assert!(check_url(&format!("https://e.com/{}", "a".repeat(MAX_URL_BYTES))).is_err());
    }

    #[test]
    fn read_and_write_grants_name_a_place_never_everything() {
        let p = parse_user(
            r#"{"mcpServers": {"m": {"command": "x", "read": ["/opt/models", "~/.local/share/m"],
                "write": ["~/notes"]}}}"#,
        );
        assert_eq!(p.errors, vec![]);
        assert_eq!(p.packs[0].read, ["/opt/models", "~/.local/share/m"]);
        assert_eq!(p.packs[0].write, ["~/notes"]);
        for (bad, why) in [
            ("/", "whole file system"),
            ("~/", "whole home"),
            ("~", "absolute path or start with ~/"),
            ("relative/dir", "absolute path or start with ~/"),
            ("/opt/../etc", "must not contain .."),
            ("//", "whole file system"),
        ] {
            let e = check_grant(bad).unwrap_err();
            assert!(e.0.contains(why), "{bad}: {e}");
        }
        let p =
            parse_user(r#"{"mcpServers": {"r": {"url": "https://e.com/mcp", "read": ["/opt"]}}}"#);
        assert!(
            p.errors[0].message.contains("for stdio packs"),
            "{:?}",
            p.errors
        );
    }

    #[test]
    fn an_http_pack_has_a_url_and_headers_and_nothing_of_a_started_server() {
        let p = parse_user(
            r#"{"mcpServers": {"remote": {"type": "http", "url": "https://mcp.example.com/mcp",
                "headers": {"Authorization": "Bearer ${secret:REMOTE}", "X-Team": "blue"}, "timeout": 60}}}"#,
        );
        assert_eq!(p.errors, vec![]);
        let d = &p.packs[0];
        assert_eq!(d.url.as_deref(), Some("https://mcp.example.com/mcp"));
        assert_eq!(d.secrets(), ["REMOTE"]);
        assert_eq!(
            d.env_as_written(),
            ["Authorization: Bearer ${secret:REMOTE}", "X-Team: blue"]
        );
        assert_eq!((d.command.as_str(), d.timeout_s), ("", 60));
        let text = r#"{"mcpServers": {
  "both": {"url": "https://e.com/", "command": "x"},
  "net": {"url": "https://e.com/", "network": "none"},
  "leak": {"url": "https://e.com/", "headers": {"Authorization": "Bearer ghp_0123456789abcdefghij0123456789"}},
  "hname": {"url": "https://e.com/", "headers": {"Bad Name": "x"}},
  "crlf": {"url": "https://e.com/", "headers": {"X": "a\r\nInjected: yes"}},
  "nourl": {"type": "http"},
  "stdioheaders": {"command": "x", "headers": {"X": "y"}},
  "kind": {"type": "sse", "url": "https://e.com/"},
  "session": {"url": "https://e.com/", "headers": {"Mcp-Session-Id": "x"}}
}}"#;
        let p = parse_user(text);
        assert!(p.packs.is_empty(), "{:?}", p.packs);
        let says = |pack: &str, needle: &str| {
            let e = p
                .errors
                .iter()
                .find(|e| e.pack.as_deref() == Some(pack))
                .unwrap_or_else(|| panic!("no error for {pack}: {:?}", p.errors));
            assert!(e.message.contains(needle), "{pack}: {}", e.message);
        };
        says("both", "starts nothing");
        says("net", "network: none");
        says("leak", "credential");
        says("hname", "header name");
        says("crlf", "control character");
        says("nourl", "needs a `url`");
        says("stdioheaders", "for HTTP packs");
        says("kind", "type must be");
        says("session", "set by the MCP transport");
    }

    #[test]
    fn packs_are_added_and_removed_keeping_the_others() {
        let one = with_pack("", "a", json!({"command": "x", "args": ["1"]})).unwrap();
        let two = with_pack(&one, "b", json!({"command": "y"})).unwrap();
        let p = parse_user(&two);
        assert_eq!(p.errors, vec![]);
        assert_eq!(p.packs.len(), 2);
        let err = with_pack(&two, "c", json!({"command": "z", "netwrok": "none"})).unwrap_err();
        assert!(err.0.contains("netwrok"), "{err}");
        let leak = with_pack(
            &two,
            "c",
            json!({"command": "z", "env": {"T": "ghp_0123456789abcdefghij0123"}}),
        );
        assert!(leak.unwrap_err().0.contains("credential"));
        let gone = without_pack(&two, "a").unwrap().unwrap();
        let p = parse_user(&gone);
        assert_eq!(p.packs.len(), 1);
        assert_eq!(p.packs[0].name, "b");
        assert_eq!(without_pack(&gone, "a").unwrap(), None);
    }

    #[test]
    fn a_file_that_is_not_json_is_one_error() {
        for text in ["{", "[]", r#"{"servers": {}}"#] {
            let p = parse_user(text);
            assert!(p.packs.is_empty());
            assert_eq!(p.errors.len(), 1, "{text}");
            assert_eq!(p.errors[0].pack, None);
            assert!(
                p.errors[0].message.contains("line 1"),
                "{}",
                p.errors[0].message
            );
        }
        assert_eq!(parse_user("{}"), Parsed::default());
    }

    #[test]
    fn credential_looking_literals() {
        #[rustfmt::skip]
        let cases: &[(&str, bool)] = &[
            ("ghp_0123456789abcdefghij0123",            true),
            ("Bearer sk-abcdefgh12345678",              true),
            ("AKIAABCDEFGHIJKLMNOP",                    true),
            ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.x",  true),
            ("https://user:hunter2@example.com/x",      true),
            ("-----BEGIN RSA PRIVATE KEY-----",         true),
            ("a8f5f167f44f4964e6c998dee827110c",        true),
            ("https://api.example.com/v1",              false),
            ("/usr/local/lib/node_modules/x",           false),
            ("production",                              false),
            ("1.2.3",                                   false),
            ("info,glovebox=debug",                     false),
            ("sk-",                                     false),
            ("my-very-long-but-harmless-setting-name",  false),
        ];
        for (text, flagged) in cases {
            assert_eq!(looks_like_credential(text).is_some(), *flagged, "{text}");
        }
    }

    #[test]
    fn templates() {
        let t = parse_template("a ${secret:x.y} b ${env:HOME}").unwrap();
        assert_eq!(
            t.pieces,
            [
                Piece::Literal("a ".into()),
                Piece::Secret("x.y".into()),
                Piece::Literal(" b ".into()),
                Piece::Env("HOME".into())
            ]
        );
        for bad in [
            "${secret:a",
            "${vault:x}",
            "${env:1A}",
            "${secret:a b}",
            "${}",
        ] {
            assert!(parse_template(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn trusted_project_packs_replace_the_users_and_untrusted_ones_do_not() {
        let user =
            parse_user(r#"{"mcpServers": {"a": {"command": "u"}, "b": {"command": "u"}}}"#).packs;
        let project = parse(
            r#"{"mcpServers": {"a": {"command": "p"}, "c": {"command": "p"}, "d": {"command": "p"}}}"#,
            Path::new("/w/.glovebox/mcp.json"),
            Origin::Project,
            Path::new("/w"),
        )
        .packs;
        let merged = merge(&user, &project, |p| p.name != "d");
        let got: Vec<(&str, &str)> = merged
            .iter()
            .map(|p| (p.name.as_str(), p.command.as_str()))
            .collect();
        assert_eq!(got, [("a", "p"), ("b", "u"), ("c", "p")]);
        let merged = merge(&user, &project, |_| false);
        assert!(merged.iter().all(|p| p.origin == Origin::User));
    }
}
