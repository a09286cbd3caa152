//! Compiling a policy: each layer's lists of globs (paths, relative ones resolved against the
//! workdir) or anchored regexes (commands) built into one set per list, with the warnings a
//! reader should see (rules that can never take effect, project allows that are ignored).

use globset::{Glob, GlobBuilder, GlobSetBuilder};
use regex::RegexSet;

use super::lists::{LayerLists, List, Matcher, PROJECT_DIR, Policy, RuleInfo};
use crate::decision::Layer;
use crate::expiry::Expiry;
use crate::floor;
use crate::permissions::{Kind, PolicyError, RawPolicy, RawRule, Section};

/// One layer's file, as the caller loaded it.
#[derive(Debug, Clone)]
pub struct Source {
    /// Names the file in messages (its path).
    pub name: String,
    pub raw: RawPolicy,
    /// Unix seconds of the file's last modification: the anchor of duration expiries.
    pub modified: i64,
}

impl Source {
    pub fn new(name: impl Into<String>, raw: RawPolicy, modified: i64) -> Source {
        Source {
            name: name.into(),
            raw,
            modified,
        }
    }
}

/// Everything a policy is compiled from.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The account's canonical workdir.
    pub workdir: String,
    /// Canonical directories on the floor with everything below (glovebox's own state).
    pub protected: Vec<String>,
    /// The account's canonical roots: nothing outside them can be acted on (the executor's
    /// Landlock boundary), so a path outside is denied. Empty: not checked.
    pub roots: Vec<String>,
    /// Managed files that apply to this account (see [`applies_to`]).
    pub managed: Vec<Source>,
    pub account: Source,
    pub project: Option<Source>,
}

/// Compiles an account file's text on its own, exactly as it is compiled with the other layers
/// (`modified` anchors duration expiries). Every writer of an account file checks the new text
/// with this before writing it: a file that does not compile would leave the last good policy
/// deciding and every later change to the file silently ignored.
pub fn check_account_text(
    name: &str,
    text: &str,
    workdir: &str,
    modified: i64,
) -> Result<(), PolicyError> {
    let raw = RawPolicy::parse(text)?;
    Policy::compile_layers(&Inputs {
        workdir: workdir.to_owned(),
        protected: Vec::new(),
        roots: Vec::new(),
        managed: Vec::new(),
        account: Source::new(name, raw, modified),
        project: None,
    })
    .map(|_| ())
}

/// Whether a managed file applies to `account`.
pub fn applies_to(raw: &RawPolicy, account: &str) -> bool {
    raw.accounts
        .as_ref()
        .is_none_or(|ids| ids.iter().any(|a| a == account))
}

impl Policy {
    /// Compiles every layer. Managed files must already be filtered with [`applies_to`].
    pub fn compile_layers(inputs: &Inputs) -> Result<Policy, PolicyError> {
        let workdir = inputs.workdir.trim_end_matches('/').to_owned();
        let mut warnings = Vec::new();
        let mut layers = Vec::new();
        let mut caps = Vec::new();
        for m in &inputs.managed {
            if !m.raw.sandbox {
                warnings.push(format!(
                    "{}: `sandbox` in a managed file has no effect",
                    m.name
                ));
            }
            for c in &m.raw.cap {
                caps.push((*c, m.name.clone()));
            }
            layers.push(compile_layer(Layer::Managed, m, &workdir, &mut warnings)?);
        }
        let account = &inputs.account;
        for (key, set) in [
            ("accounts", account.raw.accounts.is_some()),
            ("cap", !account.raw.cap.is_empty()),
        ] {
            if set {
                return Err(PolicyError::NotAllowedHere {
                    key: key.to_owned(),
                    message: "only managed policy files may set this".to_owned(),
                });
            }
        }
        layers.push(compile_layer(
            Layer::Account,
            account,
            &workdir,
            &mut warnings,
        )?);
        let mut confine = account.raw.confine_to_workdir;
        let mut confine_layer = Layer::Account;
        if let Some(project) = &inputs.project {
            if project.raw.confine_to_workdir && !confine {
                confine = true;
                confine_layer = Layer::Project;
            }
            warn_of_project_loosening(project, &mut warnings);
            layers.push(compile_layer(
                Layer::Project,
                project,
                &workdir,
                &mut warnings,
            )?);
        }
        if !account.raw.sandbox {
            warnings.push(
                "the sandbox is off for this account: everything is allowed, the secret floor too"
                    .to_owned(),
            );
        }
        Ok(Policy {
            sandbox: account.raw.sandbox,
            confine,
            confine_layer,
            caps,
            project_dir: format!("{workdir}/{PROJECT_DIR}"),
            workdir,
            protected: inputs.protected.clone(),
            roots: inputs
                .roots
                .iter()
                .map(|r| r.trim_end_matches('/').to_owned())
                .collect(),
            layers,
            warnings,
        })
    }
}

/// What a project file says that it may not: it can only tighten (allows, the sandbox switch
/// and managed-only keys are ignored, each with a warning).
fn warn_of_project_loosening(project: &Source, warnings: &mut Vec<String>) {
    let p = &project.raw;
    if p.accounts.is_some() || !p.cap.is_empty() {
        warnings.push(format!(
            "{}: `accounts` and `cap` only apply in managed files; ignored",
            project.name
        ));
    }
    if !p.sandbox {
        warnings.push(format!(
            "{}: a project file cannot turn the sandbox off; ignored",
            project.name
        ));
    }
    for (section, kind, i, rule) in p.all_rules() {
        if kind == Kind::Allow {
            warnings.push(format!(
                "{}: {}.allow[{i}]: {} is ignored: a project file can only tighten",
                project.name,
                section.name(),
                rule.pattern()
            ));
        }
    }
}

fn compile_layer(
    layer: Layer,
    source: &Source,
    workdir: &str,
    warnings: &mut Vec<String>,
) -> Result<LayerLists, PolicyError> {
    let mut lists = Vec::new();
    for section in Section::ALL {
        for kind in [Kind::Deny, Kind::Allow] {
            if layer == Layer::Project && kind == Kind::Allow {
                continue;
            }
            let raw = source.raw.rules(section, kind);
            let list = compile_list(layer, source, section, kind, raw, workdir, warnings)?;
            lists.push(((section, kind), list));
        }
    }
    Ok(LayerLists { layer, lists })
}

fn compile_list(
    layer: Layer,
    source: &Source,
    section: Section,
    kind: Kind,
    raw: &[RawRule],
    workdir: &str,
    warnings: &mut Vec<String>,
) -> Result<List, PolicyError> {
    let mut rules = Vec::new();
    let mut owners = Vec::new();
    let mut globs = GlobSetBuilder::new();
    let mut regexes = Vec::new();
    let mut compiled_paths = Vec::new();
    for (index, rule) in raw.iter().enumerate() {
        let info = RuleInfo {
            layer,
            section,
            kind,
            index,
            pattern: rule.pattern().to_owned(),
            expires: None,
            file: source.name.clone(),
        };
        let bad = |message: String| PolicyError::BadRule {
            rule: format!("{}: {}", source.name, info.name()),
            message,
        };
        let expires = match rule.expires() {
            Some(e) => Some(
                Expiry::parse(e)
                    .map_err(|e| bad(e.to_string()))?
                    .resolve(source.modified),
            ),
            None => None,
        };
        let pattern = rule.pattern();
        match section {
            Section::Commands => {
                if pattern.trim().is_empty() {
                    return Err(bad("empty regex".to_owned()));
                }
                regexes.push(format!("^(?:{pattern})$"));
                owners.push(index);
            }
            Section::Tools => {
                let glob = tool_glob(pattern, &source.name, &info, warnings);
                globs.add(glob.map_err(|e| bad(e.to_string()))?);
                owners.push(index);
            }
            _ => {
                let where_ = format!("{}: {}", source.name, info.name());
                let paths = path_rule_globs(pattern, kind, workdir, &where_, warnings);
                for p in paths.map_err(|e| bad(e.to_string()))? {
                    globs.add(build_glob(&p).map_err(|e| bad(e.to_string()))?);
                    owners.push(index);
                    compiled_paths.push((p, index));
                }
            }
        }
        rules.push(RuleInfo { expires, ..info });
    }
    let matcher = if rules.is_empty() {
        Matcher::Empty
    } else if section == Section::Commands {
        Matcher::Regexes(compile_regexes(source, &rules, &regexes)?)
    } else {
        Matcher::Globs(globs.build().map_err(|e| PolicyError::BadRule {
            rule: format!("{}: {}", source.name, section.name()),
            message: e.to_string(),
        })?)
    };
    Ok(List {
        matcher,
        owners,
        rules,
        path_globs: compiled_paths,
    })
}

/// A tools rule's glob; a pattern that can never match a wire-safe tool name is warned about.
fn tool_glob(
    pattern: &str,
    file: &str,
    info: &RuleInfo,
    warnings: &mut Vec<String>,
) -> Result<Glob, globset::Error> {
    let g = GlobBuilder::new(pattern).build()?;
    if !pattern
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*' | '?' | '[' | ']'))
    {
        warnings.push(format!(
            "{file}: {}: tool names are [a-zA-Z0-9_-]: this pattern can never match",
            info.name()
        ));
    }
    Ok(g)
}

/// A path rule's absolute globs (relative ones resolved against the workdir); an allow whose
/// every match is on the secret floor is warned about. `where_` names the rule in warnings.
fn path_rule_globs(
    pattern: &str,
    kind: Kind,
    workdir: &str,
    where_: &str,
    warnings: &mut Vec<String>,
) -> Result<Vec<String>, BadPathPattern> {
    let (patterns, warning) = path_globs(pattern, workdir)?;
    if let Some(w) = warning {
        warnings.push(format!("{where_}: {w}"));
    }
    if kind == Kind::Allow
        && let Some(hit) = floor::check(&literal_prefix(&patterns[0]), &[])
    {
        warnings.push(format!(
            "{where_}: never applies: everything it matches is on the secret floor ({})",
            hit.entry
        ));
    }
    Ok(patterns)
}

/// Compiles a command list's anchored regexes (one per rule) into one set. Only when the set
/// does not compile is each regex compiled alone, to name the rule at fault.
fn compile_regexes(
    source: &Source,
    rules: &[RuleInfo],
    regexes: &[String],
) -> Result<RegexSet, PolicyError> {
    RegexSet::new(regexes).map_err(|set_error| {
        for (rule, regex) in rules.iter().zip(regexes) {
            if let Err(e) = regex::Regex::new(regex) {
                return PolicyError::BadRule {
                    rule: format!("{}: {}", source.name, rule.name()),
                    message: e.to_string(),
                };
            }
        }
        PolicyError::BadRule {
            rule: format!("{}: {}", source.name, Section::Commands.name()),
            message: set_error.to_string(),
        }
    })
}

/// Why a path rule's pattern is refused before it is compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum BadPathPattern {
    #[error("empty glob")]
    Empty,
    #[error("`~` is not expanded; write an absolute path or one relative to the workdir")]
    Tilde,
}

/// The absolute glob(s) a path rule compiles to, and a warning when the rule is likely not what
/// its author meant.
fn path_globs(
    pattern: &str,
    workdir: &str,
) -> Result<(Vec<String>, Option<String>), BadPathPattern> {
    if pattern.trim().is_empty() {
        return Err(BadPathPattern::Empty);
    }
    if pattern.starts_with('~') {
        return Err(BadPathPattern::Tilde);
    }
    let mut warning = None;
    if pattern.starts_with("**") {
        warning = Some(format!(
            "relative, so it only matches inside the workdir {workdir}; write `/{pattern}` to match everywhere"
        ));
    }
    let absolute = if pattern.starts_with('/') {
        normalize_glob(pattern)
    } else {
        normalize_glob(&format!("{workdir}/{pattern}"))
    };
    if pattern.ends_with('/') && !pattern.ends_with("**/") {
        warning = Some("a trailing `/` is ignored: canonical paths never end in one".to_owned());
    }
    let mut patterns = vec![absolute.clone()];
    // `dir/**` also covers `dir` itself.
    if let Some(dir) = absolute.strip_suffix("/**") {
        patterns.push(if dir.is_empty() {
            "/".to_owned()
        } else {
            dir.to_owned()
        });
    }
    Ok((patterns, warning))
}

/// The part of an absolute glob before its first metacharacter, cut back to a whole segment.
fn literal_prefix(glob: &str) -> String {
    let cut = glob.find(['*', '?', '[', '{', '\\']).unwrap_or(glob.len());
    let prefix = &glob[..cut];
    if cut == glob.len() {
        return prefix.to_owned();
    }
    match prefix.rfind('/') {
        Some(i) => prefix[..i].to_owned(),
        None => String::new(),
    }
}

/// Builds a path glob the way policies do (`*` stays in one segment, `\\` escapes). Executors use
/// it for the globs a ticket tells them to hide.
pub fn build_glob(pattern: &str) -> Result<Glob, globset::Error> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
}

/// Removes `.` and empty segments and applies `..` lexically to a glob's segments.
fn normalize_glob(pattern: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for seg in pattern.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}
