//! The packs of one account: which are configured now (the user's file, from the gate; the
//! project's, read from the workdir; merged with the trust the gate records), their servers, and
//! what the service asks of them — a listing, the facts and path arguments of a call, a call.
//!
//! The configuration is read again on every listing and call (the files are small, and trust
//! can change at any moment), and whenever a file changes: a pack whose definition changed is
//! stopped and starts again, with its new definition, on its next use; a pack no longer
//! configured is stopped.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use glovebox_config::mcp_json::{self, Origin, PackDef, Parsed};
use glovebox_proto::v1::{
    Domain, ListPacksResponse, PackError, PackFacts, PackPlanResponse, PackStatus, PackTool,
    PackTrustRequest, PathArgument, TrustSubject,
};
use glovebox_proto::{ErrorCode, error::tool_error};
use tokio::sync::watch;

use crate::gate_link::{Trust, UserFile};
use crate::launch::Launcher;
use crate::pack::Pack;

/// How long a listing waits for the gate to first say what the account's `mcp.json` holds.
const FIRST_CONFIG_WAIT: Duration = Duration::from_secs(3);
/// How long a listing waits for packs that are starting; the others are listed as starting, so
/// one slow or hanging server never holds up an agent's hello.
pub const LIST_WAIT: Duration = Duration::from_secs(3);

/// The packs in effect now, and what keeps the others out.
struct Resolved {
    defs: Vec<PackDef>,
    errors: Vec<PackError>,
    untrusted: Vec<TrustSubject>,
    /// The project packs kept out (not trusted, or their trust unknown), as listed.
    held: Vec<PackStatus>,
    /// How the approver trusts each project pack in effect: `always` or `once`.
    trust: BTreeMap<String, &'static str>,
}

/// The states a listing gives a pack (`PackStatus.state`).
pub mod state {
    pub const READY: &str = "ready";
    pub const STARTING: &str = "starting";
    pub const FAILED: &str = "failed";
    pub const DISABLED: &str = "disabled";
    pub const UNTRUSTED: &str = "untrusted";
}

fn pack_status(
    name: &str,
    origin: Origin,
    state: &str,
    message: String,
    trust: &str,
) -> PackStatus {
    PackStatus {
        name: name.to_owned(),
        origin: origin.as_str().to_owned(),
        state: state.to_owned(),
        message,
        trust: trust.to_owned(),
    }
}

/// A tool of a running pack, with the facts the gate judges it on.
pub struct Found {
    pub pack: Arc<Pack>,
    pub tool: rmcp::model::Tool,
    pub facts: PackFacts,
}

pub struct Host {
    pub launcher: Arc<Launcher>,
    user_file: watch::Receiver<UserFile>,
    packs: tokio::sync::Mutex<BTreeMap<String, Arc<Pack>>>,
}

fn pack_error(pack: &str, origin: Origin, message: String) -> PackError {
    PackError {
        pack: pack.to_owned(),
        origin: origin.as_str().to_owned(),
        message,
    }
}

/// What the approver is asked to trust, and what "always" is stored by: the pack's `read` and
/// `write` entries with where their links lead (a link retargeted is a new question).
pub fn trust_subject(def: &PackDef, workdir: &Path, user_home: &Path) -> TrustSubject {
    let shown = |entries: &[String]| -> Vec<String> {
        entries
            .iter()
            .map(|e| crate::places::shown_grant(e, user_home))
            .collect()
    };
    TrustSubject {
        workdir: workdir.display().to_string(),
        pack: def.name.clone(),
        command: def.command.clone(),
        args: def.args.clone(),
        env: def.env_as_written(),
        cwd: def.cwd.display().to_string(),
        network: def.network.as_str().to_owned(),
        url: def.url.clone().unwrap_or_default(),
        read: shown(&def.read),
        write: shown(&def.write),
    }
}

/// Whether the server marks `tool` read-only.
pub fn read_only(tool: &rmcp::model::Tool) -> bool {
    tool.annotations
        .as_ref()
        .and_then(|a| a.read_only_hint)
        .unwrap_or(false)
}

/// Offers a started pack's tools in `response`, but those the pack switches off; a tool listed
/// twice, or whose name cannot be exposed, is an error of the pack instead.
fn offer_tools(def: &PackDef, tools: &[rmcp::model::Tool], response: &mut ListPacksResponse) {
    let mut seen = std::collections::HashSet::new();
    for tool in tools {
        if def.disabled_tools.iter().any(|d| d.as_str() == tool.name) {
            continue;
        }
        if !seen.insert(tool.name.as_ref()) {
            response.errors.push(pack_error(
                &def.name,
                def.origin,
                format!(
                    "tool {:?} is listed more than once; only its first entry is offered",
                    tool.name
                ),
            ));
            continue;
        }
        match glovebox_proto::packs::exposed_name(&def.name, &tool.name) {
            Ok(name) => response.tools.push(pack_tool(def, tool, name)),
            Err(why) => response
                .errors
                .push(pack_error(&def.name, def.origin, why.to_string())),
        }
    }
}

/// A pack's tool as the broker lists it, under its exposed `name`: its schemas, hints, title
/// and `_meta` as the server gave them (the broker sanitizes them).
fn pack_tool(def: &PackDef, tool: &rmcp::model::Tool, name: String) -> PackTool {
    let hints = tool.annotations.as_ref();
    PackTool {
        name,
        pack: def.name.clone(),
        tool: tool.name.to_string(),
        description: tool.description.as_deref().unwrap_or("").to_owned(),
        input_schema_json: serde_json::Value::Object((*tool.input_schema).clone()).to_string(),
        read_only: read_only(tool),
        destructive: destructive(tool),
        origin: def.origin.as_str().to_owned(),
        output_schema_json: tool
            .output_schema
            .as_ref()
            .map(|s| serde_json::Value::Object((**s).clone()).to_string())
            .unwrap_or_default(),
        title: tool
            .title
            .clone()
            .or_else(|| hints.and_then(|a| a.title.clone()))
            .unwrap_or_default(),
        meta_json: tool
            .meta
            .as_ref()
            .and_then(|m| serde_json::to_string(m).ok())
            .unwrap_or_default(),
        idempotent: hints.and_then(|a| a.idempotent_hint),
        open_world: hints.and_then(|a| a.open_world_hint),
    }
}

fn destructive(tool: &rmcp::model::Tool) -> bool {
    !read_only(tool)
        && tool
            .annotations
            .as_ref()
            .and_then(|a| a.destructive_hint)
            .unwrap_or(true)
}

impl Host {
    pub fn new(launcher: Launcher) -> Host {
        let user_file = launcher.gate.follow_user_file();
        Host {
            launcher: Arc::new(launcher),
            user_file,
            packs: tokio::sync::Mutex::new(BTreeMap::new()),
        }
    }

    fn account(&self) -> &str {
        &self.launcher.config.account
    }

    fn workdir(&self) -> &Path {
        &self.launcher.config.workdir
    }

    /// A receiver that changes whenever the account's own file does.
    pub fn user_file_changes(&self) -> watch::Receiver<UserFile> {
        self.user_file.clone()
    }

    async fn user_packs(&self) -> Parsed {
        let mut rx = self.user_file.clone();
        let _ = tokio::time::timeout(
            FIRST_CONFIG_WAIT,
            rx.wait_for(|f| matches!(f, UserFile::Known(_))),
        )
        .await;
        let file = self.user_file.borrow().clone();
        match file {
            UserFile::Unknown => Parsed {
                packs: Vec::new(),
                errors: vec![mcp_json::FileError {
                    pack: None,
                    origin: Origin::User,
                    message: "the account's mcp.json is not known yet: the gate is unavailable"
                        .to_owned(),
                }],
            },
            UserFile::Known(c) if !c.error.is_empty() => Parsed {
                packs: Vec::new(),
                errors: vec![mcp_json::FileError {
                    pack: None,
                    origin: Origin::User,
                    message: format!("{}: {}", c.path, c.error),
                }],
            },
            UserFile::Known(c) if !c.exists => Parsed::default(),
            UserFile::Known(c) => {
                mcp_json::parse(&c.text, Path::new(&c.path), Origin::User, self.workdir())
            }
        }
    }

    fn project_packs(&self) -> Parsed {
        let path = self.workdir().join(mcp_json::PROJECT_FILE);
        let read = || -> std::io::Result<Option<String>> {
            use std::io::Read;
            let file = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            };
            let mut text = String::new();
            file.take(mcp_json::MAX_FILE_BYTES as u64 + 1)
                .read_to_string(&mut text)?;
            Ok(Some(text))
        };
        match read() {
            Ok(None) => Parsed::default(),
            Ok(Some(text)) => mcp_json::parse(&text, &path, Origin::Project, self.workdir()),
            Err(e) => Parsed {
                packs: Vec::new(),
                errors: vec![mcp_json::FileError {
                    pack: None,
                    origin: Origin::Project,
                    message: format!("{}: {e}", path.display()),
                }],
            },
        }
    }

    /// The packs configured now: the user's, and the project's the approver trusts.
    async fn resolve(&self, forget_refusals: bool) -> Resolved {
        let user = self.user_packs().await;
        let project = self.project_packs();
        let mut errors: Vec<PackError> = user
            .errors
            .iter()
            .chain(&project.errors)
            .map(|e| pack_error(e.pack.as_deref().unwrap_or(""), e.origin, e.message.clone()))
            .collect();
        let mut untrusted = Vec::new();
        let mut trusted = Vec::new();
        let mut held = Vec::new();
        let mut trust_of = BTreeMap::new();
        let mut forget = forget_refusals;
        for def in &project.packs {
            let subject =
                trust_subject(def, self.workdir(), &self.launcher.config.places.user_home);
            let trust = self.launcher.gate.trust(subject.clone(), forget).await;
            forget = false;
            let kept_out = |state: &str, message: String, trust: &str| {
                (
                    pack_error(&def.name, Origin::Project, message.clone()),
                    pack_status(&def.name, Origin::Project, state, message, trust),
                )
            };
            let (error, status) = match trust {
                Ok(t @ (Trust::Always | Trust::Once)) => {
                    trusted.push(def.name.clone());
                    let word = if matches!(t, Trust::Always) {
                        "always"
                    } else {
                        "once"
                    };
                    trust_of.insert(def.name.clone(), word);
                    continue;
                }
                Ok(Trust::No) => kept_out(
                    state::UNTRUSTED,
                    "not trusted: the account's approver refused this project pack (the console's Ask again, or `glovebox packs reload`, asks again)".to_owned(),
                    "refused",
                ),
                Ok(Trust::Unknown) => {
                    untrusted.push(subject);
                    kept_out(
                        state::UNTRUSTED,
                        "waiting for the account's approver to trust this project pack".to_owned(),
                        "waiting",
                    )
                }
                Err(why) => kept_out(state::FAILED, why, ""),
            };
            errors.push(error);
            held.push(status);
        }
        if forget {
            // No project pack to ask about: still forget the refusals.
            let _ = self
                .launcher
                .gate
                .trust(TrustSubject::default(), true)
                .await;
        }
        let defs = mcp_json::merge(&user.packs, &project.packs, |d| trusted.contains(&d.name));
        Resolved {
            defs,
            errors,
            untrusted,
            held,
            trust: trust_of,
        }
    }

    /// Brings the running packs in line with `defs`: a changed pack is replaced (and stopped),
    /// one no longer configured is stopped. Returns the enabled packs and the names stopped.
    async fn sync(&self, defs: &[PackDef]) -> (Vec<Arc<Pack>>, Vec<String>) {
        let mut packs = self.packs.lock().await;
        let mut stopping = Vec::new();
        let wanted: BTreeMap<&str, &PackDef> = defs.iter().map(|d| (d.name.as_str(), d)).collect();
        let names: Vec<String> = packs.keys().cloned().collect();
        for name in names {
            let keep = wanted
                .get(name.as_str())
                .is_some_and(|d| packs.get(&name).is_some_and(|p| p.def == **d && d.enabled));
            if !keep && let Some(old) = packs.remove(&name) {
                stopping.push(old);
            }
        }
        for def in defs.iter().filter(|d| d.enabled) {
            packs
                .entry(def.name.clone())
                .or_insert_with(|| Arc::new(Pack::new(def.clone())));
        }
        let enabled = packs.values().cloned().collect();
        drop(packs);
        let stopped = stopping.iter().map(|p| p.def.name.clone()).collect();
        for old in stopping {
            old.stop().await;
        }
        (enabled, stopped)
    }

    /// Every tool of every pack (starting those not started), and every pack that has none now.
    pub async fn list(&self) -> ListPacksResponse {
        let resolved = self.resolve(false).await;
        let (packs, _) = self.sync(&resolved.defs).await;
        let started = self.start_all(&packs).await;
        let mut response = ListPacksResponse {
            tools: Vec::new(),
            errors: resolved.errors,
            untrusted: resolved
                .untrusted
                .into_iter()
                .map(|s| PackTrustRequest { subject: Some(s) })
                .collect(),
            packs: resolved.held,
        };
        let trust_of = |def: &PackDef| match def.origin {
            Origin::Project => resolved.trust.get(&def.name).copied().unwrap_or(""),
            Origin::User => "",
        };
        for def in resolved.defs.iter().filter(|d| !d.enabled) {
            response.packs.push(pack_status(
                &def.name,
                def.origin,
                state::DISABLED,
                String::new(),
                trust_of(def),
            ));
        }
        for (pack, outcome) in packs.iter().zip(started) {
            let def = &pack.def;
            let (state, message) = match outcome {
                Ok(tools) => {
                    offer_tools(def, &tools, &mut response);
                    (state::READY, String::new())
                }
                Err((state, message)) => {
                    response
                        .errors
                        .push(pack_error(&def.name, def.origin, message.clone()));
                    (state, message)
                }
            };
            response.packs.push(pack_status(
                &def.name,
                def.origin,
                state,
                message,
                trust_of(def),
            ));
        }
        response
            .packs
            .sort_by(|a, b| (&a.name, &a.origin).cmp(&(&b.name, &b.origin)));
        response
    }

    /// Starts every pack at once and waits up to [`LIST_WAIT`] for each: its tools, or its state
    /// (failed, or still starting) and why. Each start runs on its own task, so a listing that
    /// stops waiting (or a caller that goes away) never abandons a server halfway through its
    /// initialize.
    async fn start_all(
        &self,
        packs: &[Arc<Pack>],
    ) -> Vec<Result<Arc<Vec<rmcp::model::Tool>>, (&'static str, String)>> {
        let starting = packs.iter().map(|p| {
            let (pack, launcher) = (p.clone(), self.launcher.clone());
            tokio::spawn(async move { pack.ensure(&launcher).await })
        });
        futures_util::future::join_all(starting.map(|task| async move {
            match tokio::time::timeout(LIST_WAIT, task).await {
                Ok(Ok(outcome)) => outcome
                    .map(|(_, tools)| tools)
                    .map_err(|m| (state::FAILED, m)),
                Ok(Err(_)) => Err((
                    state::FAILED,
                    "the pack's start failed inside the pack host".to_owned(),
                )),
                Err(_) => Err((
                    state::STARTING,
                    format!(
                        "still starting after {} s; its tools are listed once it is ready",
                        LIST_WAIT.as_secs()
                    ),
                )),
            }
        }))
        .await
    }

    /// The running pack and tool a call names, with its facts (starting the pack if needed).
    pub async fn find(
        &self,
        pack: &str,
        tool: &str,
    ) -> Result<Found, glovebox_proto::v1::ToolError> {
        let resolved = self.resolve(false).await;
        let (packs, _) = self.sync(&resolved.defs).await;
        let Some(p) = packs.into_iter().find(|p| p.def.name == pack) else {
            let why = resolved
                .errors
                .iter()
                .find(|e| e.pack == pack)
                .map(|e| format!(": {}", e.message))
                .unwrap_or_default();
            return Err(tool_error(
                ErrorCode::UnknownTool,
                format!("no pack {pack:?} is available{why} (packs_list shows the packs)"),
            ));
        };
        let (_, tools) = p
            .ensure(&self.launcher)
            .await
            .map_err(|why| tool_error(ErrorCode::Unavailable, format!("pack {pack}: {why}")))?;
        let found = tools
            .iter()
            .find(|t| t.name == tool && !p.def.disabled_tools.iter().any(|d| d == tool))
            .cloned()
            .ok_or_else(|| {
                tool_error(
                    ErrorCode::UnknownTool,
                    format!("pack {pack} has no tool {tool:?} (packs_list shows its tools)"),
                )
            })?;
        let facts = PackFacts {
            read_only: read_only(&found),
            origin: p.def.origin.as_str().to_owned(),
        };
        Ok(Found {
            pack: p,
            tool: found,
            facts,
        })
    }

    /// What the gate must know of a call of `tool` of `pack` with `params`.
    pub async fn plan(
        &self,
        pack: &str,
        tool: &str,
        params: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<(Found, Vec<PathArgument>, Vec<String>), glovebox_proto::v1::ToolError> {
        let found = self.find(pack, tool).await?;
        let def = &found.pack.def;
        let rules = crate::paths::PathRules {
            tool,
            declared: def.path_args.as_deref().unwrap_or_default(),
            exempt: &def.not_paths,
            roots: &self.launcher.config.roots,
        };
        let (paths, unjudged) =
            crate::paths::judged_and_unjudged(&rules, params, found.facts.read_only)
                .map_err(|why| tool_error(ErrorCode::InvalidParams, why))?;
        Ok((found, paths, unjudged))
    }

    /// The answer to a Plan: facts, path arguments, base directory, time limit, and the strings
    /// that look like paths but are not judged as such.
    pub fn plan_response(
        found: &Found,
        paths: Vec<PathArgument>,
        unjudged: Vec<String>,
    ) -> PackPlanResponse {
        PackPlanResponse {
            facts: Some(found.facts.clone()),
            paths,
            base: found.pack.def.cwd.display().to_string(),
            timeout_ms: found.pack.def.timeout_s * 1000,
            error: None,
            unjudged,
        }
    }

    /// Reads the configuration again: with `secret`, restarts the packs that name it; without,
    /// forgets refused trust and stops every pack (each starts again on its next use).
    pub async fn reload(&self, secret: &str) -> Vec<String> {
        if secret.is_empty() {
            let resolved = self.resolve(true).await;
            let all: Vec<Arc<Pack>> = self.packs.lock().await.values().cloned().collect();
            let mut names = Vec::new();
            for p in all {
                p.stop().await;
                names.push(p.def.name.clone());
            }
            let (_, stopped) = self.sync(&resolved.defs).await;
            names.extend(stopped);
            names.sort();
            names.dedup();
            return names;
        }
        let using: Vec<Arc<Pack>> = self
            .packs
            .lock()
            .await
            .values()
            .filter(|p| p.def.secrets().contains(&secret))
            .cloned()
            .collect();
        let mut names = Vec::new();
        for p in using {
            p.stop().await;
            names.push(p.def.name.clone());
        }
        names
    }

    /// Applies a change of a file: packs whose definition changed or that are gone are stopped.
    pub async fn on_change(&self) {
        let resolved = self.resolve(false).await;
        let (_, stopped) = self.sync(&resolved.defs).await;
        if !stopped.is_empty() {
            tracing::info!(account = %self.account(), packs = ?stopped, "mcp.json changed; stopped the packs it changed");
        }
    }

    /// Stops every pack (the host is stopping).
    pub async fn stop_all(&self) {
        let all: Vec<Arc<Pack>> = std::mem::take(&mut *self.packs.lock().await)
            .into_values()
            .collect();
        futures_util::future::join_all(all.iter().map(|p| p.stop())).await;
    }
}

/// The domain of a path argument's subject.
pub fn domain_of(a: &PathArgument) -> Domain {
    Domain::try_from(a.domain).unwrap_or(Domain::Unspecified)
}
