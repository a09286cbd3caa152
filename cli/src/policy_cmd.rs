//! `glovebox policy ...`: list, add, revoke and reset an account's rules, toggle confinement and
//! the sandbox, and explain a decision (`policy_cmd/explain.rs`), by talking to the running gate
//! over its admin socket (and, to explain, to the account's executor, which plans the subject).
//!
//! The gate's socket accepts only this user (and root); agent connections go through the broker,
//! which has no path to these methods.

mod explain;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use glovebox_config::StateDir;
use glovebox_proto::transport::Link as Channel;
use glovebox_proto::v1::{self as pb, gate_admin_client::GateAdminClient};

use crate::Env;
use crate::admin_socket::{account, client, gate_error};
use crate::shared_args::StateArgs;

pub use explain::ExplainArgs;

/// `glovebox policy`.
#[derive(clap::Args, Debug)]
pub(crate) struct PolicyArgs {
    /// State directory (default: $XDG_STATE_HOME/glovebox, or ~/.local/state/glovebox).
    #[arg(long, value_name = "DIR", global = true)]
    pub(crate) state_dir: Option<PathBuf>,
    /// Account whose policy to manage (default: the only account).
    #[arg(long, global = true)]
    pub(crate) account: Option<String>,
    #[command(subcommand)]
    pub(crate) command: PolicyCommand,
}

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// List every rule by layer: the floor and managed rules are read-only.
    List {
        /// As one JSON object: the switches, caps, every rule with its layer, and warnings.
        #[arg(long)]
        json: bool,
    },
    /// Add a rule to the account's own file, e.g. `add paths.read allow './docs/**'`.
    Add(AddArgs),
    /// Remove one rule of the account's own file, named by its pattern or its index.
    Revoke(RevokeArgs),
    /// Remove every rule of the account's own file: everything asks again.
    Reset,
    /// Explain which layer and rule decide a subject, and why.
    Explain(ExplainArgs),
    /// Confine the account to its workdir (outside it, what would ask is denied).
    Confine {
        /// on: confined; off: what is outside the workdir asks as anything else.
        state: Switch,
    },
    /// Turn the sandbox on or off. Off allows everything, the secret floor too.
    Sandbox {
        /// on | off (off needs --confirm).
        state: Switch,
        /// Required to turn the sandbox off.
        #[arg(long)]
        confirm: bool,
    },
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    On,
    Off,
}

#[derive(Args, Debug)]
pub struct AddArgs {
    /// paths.read | paths.write | commands | delete | tools
    section: String,
    /// allow | deny
    kind: String,
    /// A glob for paths (relative ones resolve against the workdir), a regex for commands, a
    /// tool name (or `pack__*`) for tools.
    pattern: String,
    /// Match exactly this path or command (escape every glob or regex character).
    #[arg(long)]
    exact: bool,
    /// RFC 3339 time or a duration (8h, 7d) after which the rule no longer applies.
    #[arg(long)]
    expires: Option<String>,
}

#[derive(Args, Debug)]
pub struct RevokeArgs {
    /// paths.read | paths.write | commands | delete | tools
    section: String,
    /// allow | deny
    kind: String,
    /// The rule's pattern as listed.
    pattern: Option<String>,
    /// The rule's index as `policy list` shows it (`section.kind[N]`), instead of its pattern.
    #[arg(long, conflicts_with = "pattern")]
    index: Option<u32>,
}

/// Prints what a rule change did.
fn changed(
    response: Result<tonic::Response<pb::PolicyChangeResponse>, tonic::Status>,
) -> anyhow::Result<ExitCode> {
    let r = response.map_err(gate_error)?.into_inner();
    if r.changed {
        crate::outln!("changed: {}", r.summary);
    } else {
        crate::outln!("unchanged: the rule is already there");
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints what a revoke did.
fn revoked(
    response: Result<tonic::Response<pb::PolicyChangeResponse>, tonic::Status>,
) -> anyhow::Result<ExitCode> {
    let r = response.map_err(gate_error)?.into_inner();
    if r.changed {
        crate::outln!("revoked: {}", r.summary);
    } else {
        crate::outln!("unchanged: no such rule");
    }
    Ok(ExitCode::SUCCESS)
}

/// `glovebox policy ...`, on the account's policy in the user's state.
pub async fn run(env: &Env, args: PolicyArgs) -> anyhow::Result<ExitCode> {
    let state = StateDir::new(env.state_dir(&StateArgs {
        state_dir: args.state_dir,
    }));
    let account = account(&state, args.account)?;
    let mut gate = client(&state)?;
    match args.command {
        PolicyCommand::List { json } => list(&mut gate, account, json).await,
        PolicyCommand::Add(args) => add(&mut gate, account, args).await,
        PolicyCommand::Revoke(args) => revoke(&mut gate, account, args).await,
        PolicyCommand::Reset => changed(gate.reset_rules(pb::ResetRulesRequest { account }).await),
        PolicyCommand::Confine { state } => confine(&mut gate, account, state).await,
        PolicyCommand::Sandbox { state, confirm } => {
            sandbox(&mut gate, account, state, confirm).await
        }
        PolicyCommand::Explain(args) => explain::explain(&state, &mut gate, account, args).await,
    }
}

async fn list(
    gate: &mut GateAdminClient<Channel>,
    account: String,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let r = gate
        .list_rules(pb::ListRulesRequest {
            account: account.clone(),
        })
        .await
        .map_err(gate_error)?
        .into_inner();
    if json {
        crate::outln!("{}", list_json(&account, &r));
    } else {
        print_list(&account, &r);
    }
    Ok(ExitCode::SUCCESS)
}

/// `policy list --json`.
fn list_json(account: &str, r: &pb::ListRulesResponse) -> serde_json::Value {
    let rules: Vec<serde_json::Value> = r
        .rules
        .iter()
        .map(|x| {
            serde_json::json!({
                "layer": x.layer, "section": x.section, "kind": x.kind, "index": x.index,
                "pattern": x.pattern, "expires": (!x.expires.is_empty()).then_some(&x.expires),
                "expired": x.expired, "file": x.file,
            })
        })
        .collect();
    serde_json::json!({
        "account": account,
        "workdir": r.workdir,
        "sandbox": r.sandbox_enabled,
        "confined": r.confined,
        "caps": r.caps,
        "error": (!r.error.is_empty()).then_some(&r.error),
        "rules": rules,
        "warnings": r.warnings,
    })
}

async fn add(
    gate: &mut GateAdminClient<Channel>,
    account: String,
    args: AddArgs,
) -> anyhow::Result<ExitCode> {
    let AddArgs {
        section,
        kind,
        pattern,
        exact,
        expires,
    } = args;
    changed(
        gate.add_rule(pb::AddRuleRequest {
            account,
            section,
            kind,
            pattern,
            expires: expires.unwrap_or_default(),
            exact,
        })
        .await,
    )
}

async fn revoke(
    gate: &mut GateAdminClient<Channel>,
    account: String,
    args: RevokeArgs,
) -> anyhow::Result<ExitCode> {
    let RevokeArgs {
        section,
        kind,
        pattern,
        index,
    } = args;
    anyhow::ensure!(
        pattern.is_some() || index.is_some(),
        "name the rule to revoke by its pattern or with --index"
    );
    revoked(
        gate.revoke_rule(pb::RevokeRuleRequest {
            account,
            section,
            kind,
            index: index.unwrap_or(0),
            pattern: pattern.unwrap_or_default(),
        })
        .await,
    )
}

async fn confine(
    gate: &mut GateAdminClient<Channel>,
    account: String,
    state: Switch,
) -> anyhow::Result<ExitCode> {
    changed(
        gate.set_confinement(pb::SetConfinementRequest {
            account,
            enabled: state == Switch::On,
        })
        .await,
    )
}

async fn sandbox(
    gate: &mut GateAdminClient<Channel>,
    account: String,
    state: Switch,
    confirm: bool,
) -> anyhow::Result<ExitCode> {
    if state == Switch::Off && !confirm {
        eprintln!(
            "glovebox: turning the sandbox off lets agents do anything this account can, \
             secrets included; run again with --confirm to do it"
        );
        return Ok(ExitCode::from(1));
    }
    changed(
        gate.set_sandbox(pb::SetSandboxRequest {
            account,
            enabled: state == Switch::On,
            confirm,
        })
        .await,
    )
}

fn print_list(account: &str, r: &pb::ListRulesResponse) {
    crate::outln!("account {account} (workdir {})", r.workdir);
    crate::outln!("sandbox: {}", if r.sandbox_enabled { "on" } else { "off" });
    if !r.sandbox_enabled {
        crate::outln!("WARNING: the sandbox is OFF: everything is allowed, the secret floor too");
    }
    crate::outln!(
        "confined to workdir: {}",
        if r.confined { "yes" } else { "no" }
    );
    for c in &r.caps {
        crate::outln!("capped: {c}");
    }
    if !r.error.is_empty() {
        crate::outln!("ERROR (the last good policy applies): {}", r.error);
    }
    let floor: Vec<&str> = r
        .rules
        .iter()
        .filter(|x| x.layer == "floor")
        .map(|x| x.pattern.as_str())
        .collect();
    crate::outln!("floor (read-only, always denied): {}", floor.join(" "));
    for layer in ["managed", "account", "project"] {
        let rules: Vec<&pb::PolicyRule> = r.rules.iter().filter(|x| x.layer == layer).collect();
        if rules.is_empty() {
            continue;
        }
        let note = match layer {
            "managed" => " (read-only)",
            "project" => " (can only tighten)",
            _ => "",
        };
        crate::outln!("{layer}{note}:");
        for x in rules {
            let mut line = format!("  {}.{}[{}]: {}", x.section, x.kind, x.index, x.pattern);
            if !x.expires.is_empty() {
                line.push_str(&format!(
                    "  ({} {})",
                    if x.expired { "expired" } else { "expires" },
                    x.expires
                ));
            }
            if layer != "account" {
                line.push_str(&format!("  [{}]", x.file));
            }
            crate::outln!("{line}");
        }
    }
    for w in &r.warnings {
        crate::outln!("warning: {w}");
    }
}
