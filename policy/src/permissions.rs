//! `permissions.yaml` as written: the raw schema shared by the account file, the project file and
//! the administrator's managed files, before any glob or regex is compiled.
//!
//! Unknown keys are refused, so a typo (`alow:`) is an error with a line number rather than a
//! rule that silently does nothing.

use serde::{Deserialize, Serialize};

use crate::decision::Domain;

/// The file as written, before validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    /// `false` lifts every check of the account's own layers and the secret floor. Managed denies
    /// and capability caps still apply. Shown as a warning everywhere.
    #[serde(default = "yes")]
    pub sandbox: bool,
    /// Outside the workdir, what would ask is denied instead.
    #[serde(default)]
    pub confine_to_workdir: bool,
    /// Managed files only: the accounts this file applies to (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accounts: Option<Vec<String>>,
    /// Managed files only: capability caps (`read-only`, `no-exec`, `no-delete`, `no-packs`,
    /// `no-network`, `local-network`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap: Vec<Capability>,
    #[serde(default)]
    pub paths: RawPaths,
    /// Regexes over the whole command line (anchored at both ends).
    #[serde(default)]
    pub commands: RawRules,
    /// Globs over canonical paths, for deleting. A `paths` deny also denies delete.
    #[serde(default)]
    pub delete: RawRules,
    /// Globs over tool names (`client__*`, `pack__github__*`).
    #[serde(default)]
    pub tools: RawRules,
}

impl Default for RawPolicy {
    fn default() -> RawPolicy {
        RawPolicy {
            sandbox: true,
            confine_to_workdir: false,
            accounts: None,
            cap: Vec::new(),
            paths: RawPaths::default(),
            commands: RawRules::default(),
            delete: RawRules::default(),
            tools: RawRules::default(),
        }
    }
}

fn yes() -> bool {
    true
}

/// A capability an administrator can take away from an account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Capability {
    /// No writes, no deletes, no commands (a command can write).
    ReadOnly,
    /// No commands.
    NoExec,
    /// No deletes.
    NoDelete,
    /// No MCP tool pack calls at all.
    NoPacks,
    /// Jobs have no network at all, whatever the account's `sandbox.network` says.
    NoNetwork,
    /// Jobs have a network of their own only (`loopback`) at most.
    LocalNetwork,
}

impl Capability {
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::ReadOnly => "read-only",
            Capability::NoExec => "no-exec",
            Capability::NoDelete => "no-delete",
            Capability::NoPacks => "no-packs",
            Capability::NoNetwork => "no-network",
            Capability::LocalNetwork => "local-network",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPaths {
    #[serde(default)]
    pub read: RawRules,
    #[serde(default)]
    pub write: RawRules,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRules {
    #[serde(default)]
    pub allow: Vec<RawRule>,
    #[serde(default)]
    pub deny: Vec<RawRule>,
}

/// One rule: a bare pattern, or a pattern with an expiry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RawRule {
    Pattern(String),
    Detailed(RawDetailedRule),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDetailedRule {
    pub rule: String,
    /// RFC 3339 time or a duration (`8h`, `7d`); after it the rule no longer applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
}

impl RawRule {
    pub fn pattern(&self) -> &str {
        match self {
            RawRule::Pattern(p) => p,
            RawRule::Detailed(d) => &d.rule,
        }
    }

    pub fn expires(&self) -> Option<&str> {
        match self {
            RawRule::Pattern(_) => None,
            RawRule::Detailed(d) => d.expires.as_deref(),
        }
    }

    pub fn new(pattern: impl Into<String>, expires: Option<String>) -> RawRule {
        match expires {
            None => RawRule::Pattern(pattern.into()),
            Some(e) => RawRule::Detailed(RawDetailedRule {
                rule: pattern.into(),
                expires: Some(e),
            }),
        }
    }
}

impl From<&str> for RawRule {
    fn from(p: &str) -> RawRule {
        RawRule::Pattern(p.to_owned())
    }
}

/// A rule list of the policy file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Section {
    PathsRead,
    PathsWrite,
    Commands,
    Delete,
    Tools,
}

impl Section {
    pub const ALL: [Section; 5] = [
        Section::PathsRead,
        Section::PathsWrite,
        Section::Commands,
        Section::Delete,
        Section::Tools,
    ];

    /// The YAML keys leading to the section, e.g. `["paths", "read"]`.
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            Section::PathsRead => &["paths", "read"],
            Section::PathsWrite => &["paths", "write"],
            Section::Commands => &["commands"],
            Section::Delete => &["delete"],
            Section::Tools => &["tools"],
        }
    }

    /// `paths.read`, `commands`, ...
    pub fn name(self) -> &'static str {
        match self {
            Section::PathsRead => "paths.read",
            Section::PathsWrite => "paths.write",
            Section::Commands => "commands",
            Section::Delete => "delete",
            Section::Tools => "tools",
        }
    }

    pub fn parse(name: &str) -> Option<Section> {
        Section::ALL.into_iter().find(|s| s.name() == name)
    }

    pub fn for_domain(domain: Domain) -> Section {
        match domain {
            Domain::Read => Section::PathsRead,
            Domain::Write => Section::PathsWrite,
            Domain::Delete => Section::Delete,
        }
    }
}

/// Allow or deny list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Allow,
    Deny,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Allow => "allow",
            Kind::Deny => "deny",
        }
    }

    pub fn parse(name: &str) -> Option<Kind> {
        match name {
            "allow" => Some(Kind::Allow),
            "deny" => Some(Kind::Deny),
            _ => None,
        }
    }
}

impl RawPolicy {
    /// The policy `glovebox up` writes for a new account: reads inside the workdir are allowed,
    /// writes ask, the floor denies, everything else asks.
    pub fn default_for_new_account() -> RawPolicy {
        let mut raw = RawPolicy::default();
        raw.paths.read.allow.push("./**".into());
        raw
    }

    /// Parses the YAML text of a policy file.
    pub fn parse(text: &str) -> Result<RawPolicy, PolicyError> {
        if text
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            return Ok(RawPolicy::default());
        }
        serde_yaml::from_str(text).map_err(|e| PolicyError::Yaml {
            line: e.location().map(|l| l.line()),
            message: e.to_string(),
        })
    }

    /// The YAML text of this policy, with a header explaining the file.
    pub fn to_yaml(&self) -> Result<String, PolicyError> {
        let body = serde_yaml::to_string(self).map_err(|e| PolicyError::Yaml {
            line: None,
            message: e.to_string(),
        })?;
        Ok(format!("{HEADER}{body}"))
    }

    pub fn rules(&self, section: Section, kind: Kind) -> &Vec<RawRule> {
        let r = match section {
            Section::PathsRead => &self.paths.read,
            Section::PathsWrite => &self.paths.write,
            Section::Commands => &self.commands,
            Section::Delete => &self.delete,
            Section::Tools => &self.tools,
        };
        match kind {
            Kind::Allow => &r.allow,
            Kind::Deny => &r.deny,
        }
    }

    pub fn rules_mut(&mut self, section: Section, kind: Kind) -> &mut Vec<RawRule> {
        let r = match section {
            Section::PathsRead => &mut self.paths.read,
            Section::PathsWrite => &mut self.paths.write,
            Section::Commands => &mut self.commands,
            Section::Delete => &mut self.delete,
            Section::Tools => &mut self.tools,
        };
        match kind {
            Kind::Allow => &mut r.allow,
            Kind::Deny => &mut r.deny,
        }
    }

    /// Every rule pattern in the file with its section and kind.
    pub fn all_rules(&self) -> impl Iterator<Item = (Section, Kind, usize, &RawRule)> {
        Section::ALL.into_iter().flat_map(move |s| {
            [Kind::Deny, Kind::Allow].into_iter().flat_map(move |k| {
                self.rules(s, k)
                    .iter()
                    .enumerate()
                    .map(move |(i, r)| (s, k, i, r))
            })
        })
    }
}

/// A glob that matches exactly `path` and nothing else: every glob metacharacter and the escape
/// character itself are escaped.
pub fn exact_path_rule(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 8);
    for c in path.chars() {
        match c {
            '?' | '*' | '[' | ']' | '{' | '}' | '\\' | '!' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// A regex that matches exactly `command` (commands are anchored when compiled).
pub fn exact_command_rule(command: &str) -> String {
    regex::escape(command)
}

/// The rule of `section` that matches exactly `subject` and nothing else: a canonical path or a
/// tool name with every glob metacharacter escaped, or a command line with every regex
/// metacharacter escaped. What "always" answers and `policy add --exact` write.
pub fn exact_rule(section: Section, subject: &str) -> String {
    match section {
        Section::Commands => exact_command_rule(subject),
        Section::PathsRead | Section::PathsWrite | Section::Delete | Section::Tools => {
            exact_path_rule(subject)
        }
    }
}

pub(crate) const HEADER: &str = "\
# glovebox permissions for one account.
# paths.read / paths.write / delete: `allow` and `deny` lists of globs over canonical paths.
#   Relative globs resolve against the account's workdir; `*` stays inside one directory,
#   `**` crosses directories, and `dir/**` covers `dir` itself.
# commands: regexes that must match the whole command line.
# tools: globs over tool names (client__*, pack__<pack>__*).
# A rule may be `{rule: PATTERN, expires: 2026-12-31T18:00:00Z}` or `expires: 8h`.
# Deny beats allow; a subject no rule matches asks the approver.
# The secret floor (.ssh, .env*, *.pem, ...) is always denied while `sandbox` is true.
# Edits are picked up at once; \"always\" answers append exact rules here.
";

/// Why a policy file could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("{}: {message}", line.map(|l| format!("line {l}")).unwrap_or_else(|| "yaml".into()))]
    Yaml {
        line: Option<usize>,
        message: String,
    },
    #[error("{rule}: {message}")]
    BadRule { rule: String, message: String },
    #[error("{key}: {message}")]
    NotAllowedHere { key: String, message: String },
}
