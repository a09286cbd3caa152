//! `permissions.yaml`: the raw schema, its compiled form, and the decision over it.
//!
//! Two stages: [`RawPolicy`] is exactly what the file says (unknown keys refused); [`Policy`] has
//! every glob resolved against the account's workdir and compiled.

use globset::{Glob, GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};

use crate::decision::{Decision, Domain, Verdict};
use crate::floor;

/// The file as written, before validation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    /// `false` lifts every check, the secret floor too. Shown as a warning everywhere.
    #[serde(default = "yes")]
    pub sandbox: bool,
    #[serde(default)]
    pub paths: RawPaths,
}

fn yes() -> bool {
    true
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
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
}

impl RawPolicy {
    /// The policy `glovebox up` writes for a new account: reads inside the workdir are allowed,
    /// writes ask, the floor denies, everything else asks.
    pub fn default_for_new_account() -> RawPolicy {
        RawPolicy {
            sandbox: true,
            paths: RawPaths {
                read: RawRules {
                    allow: vec!["./**".to_owned()],
                    deny: Vec::new(),
                },
                write: RawRules::default(),
            },
        }
    }

    /// Parses the YAML text of a policy file.
    pub fn parse(text: &str) -> Result<RawPolicy, PolicyError> {
        if text.trim().is_empty() {
            return Ok(RawPolicy {
                sandbox: true,
                ..RawPolicy::default()
            });
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

    /// Adds an allow rule for exactly one canonical path (an "always" answer). Returns whether
    /// the rule was new.
    pub fn add_exact_allow(&mut self, domain: Domain, canonical_path: &str) -> bool {
        let rule = globset::escape(canonical_path);
        let rules = match domain {
            Domain::Read => &mut self.paths.read.allow,
            Domain::Write => &mut self.paths.write.allow,
        };
        if rules.contains(&rule) {
            return false;
        }
        rules.push(rule);
        true
    }
}

const HEADER: &str = "\
# glovebox permissions for one account.
# paths.read / paths.write: `allow` and `deny` lists of globs over canonical paths.
#   Relative globs resolve against the account's workdir; `*` stays inside one directory,
#   `**` crosses directories, and `dir/**` covers `dir` itself.
# Deny beats allow; a path no rule matches asks the approver.
# The secret floor (.ssh, .env*, *.pem, ...) is always denied while `sandbox` is true.
# Edits are picked up on the next call; \"always\" answers append exact rules here.
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
    BadGlob { rule: String, message: String },
}

#[derive(Debug, Clone)]
struct Rule {
    /// e.g. `paths.read.allow[0]: ./**`
    name: String,
    matchers: Vec<GlobMatcher>,
}

impl Rule {
    fn matches(&self, path: &str) -> bool {
        self.matchers.iter().any(|m| m.is_match(path))
    }
}

#[derive(Debug, Clone, Default)]
struct Rules {
    allow: Vec<Rule>,
    deny: Vec<Rule>,
}

/// A validated policy with compiled globs, ready to decide.
#[derive(Debug, Clone)]
pub struct Policy {
    sandbox: bool,
    read: Rules,
    write: Rules,
    /// Canonical directories on the floor with everything below (glovebox's own state).
    protected: Vec<String>,
}

impl Policy {
    /// Compiles `raw` for an account whose canonical workdir is `workdir`.
    pub fn compile(
        raw: &RawPolicy,
        workdir: &str,
        protected: Vec<String>,
    ) -> Result<Policy, PolicyError> {
        Ok(Policy {
            sandbox: raw.sandbox,
            read: compile_rules("paths.read", &raw.paths.read, workdir)?,
            write: compile_rules("paths.write", &raw.paths.write, workdir)?,
            protected,
        })
    }

    pub fn sandbox_enabled(&self) -> bool {
        self.sandbox
    }

    /// Judges one canonical absolute path for one domain.
    pub fn decide(&self, domain: Domain, path: &str) -> Verdict {
        if !self.sandbox {
            return Verdict::new(
                Decision::Allow,
                "sandbox: false",
                "the sandbox is off for this account: everything is allowed",
            );
        }
        if !path.starts_with('/') {
            return Verdict::new(
                Decision::Deny,
                "canonical",
                "subject is not an absolute path",
            );
        }
        if let Some(hit) = floor::check(path, &self.protected) {
            return Verdict::new(Decision::Deny, hit.rule(), hit.reason());
        }
        let rules = match domain {
            Domain::Read => &self.read,
            Domain::Write => &self.write,
        };
        if let Some(rule) = rules.deny.iter().find(|r| r.matches(path)) {
            return Verdict::new(
                Decision::Deny,
                rule.name.clone(),
                format!("{} is denied by {}", domain.as_str(), rule.name),
            );
        }
        if let Some(rule) = rules.allow.iter().find(|r| r.matches(path)) {
            return Verdict::new(
                Decision::Allow,
                rule.name.clone(),
                format!("{} is allowed by {}", domain.as_str(), rule.name),
            );
        }
        Verdict::new(
            Decision::Ask,
            "default",
            format!(
                "no rule matches this {}: the approver decides",
                domain.as_str()
            ),
        )
    }
}

fn compile_rules(prefix: &str, raw: &RawRules, workdir: &str) -> Result<Rules, PolicyError> {
    let compile_list = |kind: &str, list: &[String]| -> Result<Vec<Rule>, PolicyError> {
        list.iter()
            .enumerate()
            .map(|(i, pattern)| {
                let name = format!("{prefix}.{kind}[{i}]: {pattern}");
                compile_rule(pattern, workdir)
                    .map(|matchers| Rule {
                        name: name.clone(),
                        matchers,
                    })
                    .map_err(|message| PolicyError::BadGlob {
                        rule: name,
                        message,
                    })
            })
            .collect()
    };
    Ok(Rules {
        allow: compile_list("allow", &raw.allow)?,
        deny: compile_list("deny", &raw.deny)?,
    })
}

fn compile_rule(pattern: &str, workdir: &str) -> Result<Vec<GlobMatcher>, String> {
    if pattern.trim().is_empty() {
        return Err("empty glob".to_owned());
    }
    if pattern.starts_with('~') {
        return Err(
            "`~` is not expanded; write an absolute path or one relative to the workdir".to_owned(),
        );
    }
    let absolute = if pattern.starts_with('/') {
        normalize_glob(pattern)
    } else {
        normalize_glob(&format!("{}/{pattern}", workdir.trim_end_matches('/')))
    };
    let mut patterns = vec![absolute.clone()];
    // `dir/**` also covers `dir` itself.
    if let Some(dir) = absolute.strip_suffix("/**") {
        patterns.push(if dir.is_empty() {
            "/".to_owned()
        } else {
            dir.to_owned()
        });
    }
    patterns
        .iter()
        .map(|p| build_glob(p).map(|g| g.compile_matcher()))
        .collect()
}

fn build_glob(pattern: &str) -> Result<Glob, String> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| e.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;
    use Decision::*;
    use Domain::*;

    fn policy(yaml: &str) -> Policy {
        let raw = RawPolicy::parse(yaml).unwrap();
        Policy::compile(&raw, "/w", vec!["/state".to_owned()]).unwrap()
    }

    const DEFAULT: &str = "paths:\n  read:\n    allow: ['./**']\n";

    fn check(p: &Policy, cases: &[(Domain, &str, Decision, &str)]) {
        for (domain, path, want, rule_needle) in cases {
            let v = p.decide(*domain, path);
            assert_eq!(v.decision, *want, "{domain:?} {path}: {v:?}");
            assert!(
                v.rule.contains(rule_needle),
                "{domain:?} {path}: rule {:?} lacks {rule_needle:?}",
                v.rule
            );
        }
    }

    #[test]
    fn default_policy_table() {
        let p = policy(DEFAULT);
        check(
            &p,
            &[
                (Read, "/w", Allow, "paths.read.allow[0]"),
                (Read, "/w/a.txt", Allow, "paths.read.allow[0]"),
                (Read, "/w/deep/er/a.txt", Allow, "paths.read.allow[0]"),
                (Read, "/w/.env", Deny, "floor:.env*"),
                (Read, "/w/x/.ssh/id_rsa", Deny, "floor:.ssh"),
                (Read, "/w/key.pem", Deny, "floor:*.pem"),
                (Read, "/wx/a.txt", Ask, "default"),
                (Read, "/w_secret/a.txt", Ask, "default"),
                (Read, "/etc/passwd", Ask, "default"),
                (Read, "/state/audit.db", Deny, "floor:glovebox state"),
                (Write, "/w/a.txt", Ask, "default"),
                (Write, "/w/.env", Deny, "floor"),
                (Read, "relative/path", Deny, "canonical"),
                (Read, "", Deny, "canonical"),
            ],
        );
    }

    #[test]
    fn deny_beats_allow_and_star_stays_in_one_directory() {
        let p = policy(
            "paths:\n  read:\n    allow: ['./**']\n    deny: ['./private/**', '/w/*.log']\n  write:\n    allow: ['./out/*']\n",
        );
        check(
            &p,
            &[
                (Read, "/w/private", Deny, "paths.read.deny[0]"),
                (Read, "/w/private/a", Deny, "paths.read.deny[0]"),
                (Read, "/w/privateer/a", Allow, "allow"),
                (Read, "/w/x.log", Deny, "paths.read.deny[1]"),
                (Read, "/w/sub/x.log", Allow, "allow"),
                (Write, "/w/out/a", Allow, "paths.write.allow[0]"),
                (Write, "/w/out/sub/a", Ask, "default"),
                (Write, "/w/a", Ask, "default"),
            ],
        );
    }

    #[test]
    fn sandbox_off_allows_everything_including_the_floor() {
        let p = policy("sandbox: false\n");
        assert!(!p.sandbox_enabled());
        check(
            &p,
            &[
                (Read, "/w/.ssh/id_rsa", Allow, "sandbox: false"),
                (Write, "/etc/passwd", Allow, "sandbox"),
            ],
        );
    }

    #[test]
    fn exact_always_rules_match_one_path_only() {
        let mut raw = RawPolicy::parse(DEFAULT).unwrap();
        assert!(raw.add_exact_allow(Write, "/w/a[1]*.txt"));
        assert!(!raw.add_exact_allow(Write, "/w/a[1]*.txt"));
        let p = Policy::compile(&raw, "/w", vec![]).unwrap();
        check(
            &p,
            &[
                (Write, "/w/a[1]*.txt", Allow, "paths.write.allow[0]"),
                (Write, "/w/a1x.txt", Ask, "default"),
                (Write, "/w/a[1]zz.txt", Ask, "default"),
                (Read, "/w/a[1]*.txt", Allow, "paths.read"),
            ],
        );
        // and it survives a round trip through the file
        let text = raw.to_yaml().unwrap();
        assert!(text.starts_with("# glovebox permissions"));
        assert_eq!(RawPolicy::parse(&text).unwrap(), raw);
    }

    #[test]
    fn errors_name_the_line_and_the_rule() {
        let err = RawPolicy::parse("paths:\n  read:\n    alow: []\n").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("line 3") && msg.contains("unknown field `alow`"),
            "{msg}"
        );
        let raw = RawPolicy::parse("paths:\n  write:\n    deny: ['[unclosed']\n").unwrap();
        let err = Policy::compile(&raw, "/w", vec![]).unwrap_err().to_string();
        assert!(err.starts_with("paths.write.deny[0]: [unclosed"), "{err}");
        let raw = RawPolicy::parse("paths:\n  read:\n    allow: ['~/x']\n").unwrap();
        assert!(
            Policy::compile(&raw, "/w", vec![])
                .unwrap_err()
                .to_string()
                .contains("`~`")
        );
    }

    #[test]
    fn empty_file_is_an_empty_sandboxed_policy() {
        let p = policy("");
        assert!(p.sandbox_enabled());
        check(&p, &[(Read, "/w/a", Ask, "default")]);
    }

    #[test]
    fn relative_globs_normalize_dot_dot() {
        let p = policy("paths:\n  read:\n    allow: ['../shared/**']\n");
        check(
            &p,
            &[
                (Read, "/shared/x", Allow, "allow[0]"),
                (Read, "/w/shared/x", Ask, "default"),
            ],
        );
    }
}
