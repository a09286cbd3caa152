//! The compiled policy: every layer's globs and regexes built into sets, and the decision.
//!
//! Order of a path decision (the first that applies wins):
//! 1. not an absolute path → deny;
//! 2. a managed deny or a managed capability cap → deny (even with the sandbox off);
//! 3. `sandbox: false` in the account file → allow, unless the path is outside the roots (4a);
//! 4. the secret floor, glovebox's own state and the project policy file → deny;
//!    4a. outside every one of the account's roots → deny (nothing there can be acted on: the
//!    executor's Landlock boundary would refuse it after an approval, so nobody is asked);
//! 5. any deny of the account or project layer (for delete: also any `paths` deny) → deny;
//! 6. an allow of the managed or account layer → allow (project allows never apply);
//! 7. confinement on and the path outside the workdir → deny;
//! 8. ask.
//!
//! Then, for writes and deletes only: an allow or an ask of a path that makes later commands run
//! code ([`crate::code_carrying`]) becomes an ask naming that rule, with a warning for the
//! approver — whatever allowed it, `sandbox: false` included. A deny is never changed.
//!
//! Rules past their expiry are skipped. Without a clock (`now` is `None`) a rule that has an
//! expiry is treated as expired when it would allow and as live when it would deny.

mod compile;
mod lists;

pub use compile::{Inputs, Source, applies_to, build_glob, check_account_text};
pub use lists::{PROJECT_DIR, Policy, RuleInfo};

use crate::code_carrying;
use crate::decision::{Decision, Domain, Layer, Verdict};
use crate::floor;
use crate::permissions::{Capability, Kind, Section};

impl Policy {
    pub fn sandbox_enabled(&self) -> bool {
        self.sandbox
    }

    pub fn confined(&self) -> bool {
        self.confine
    }

    pub fn workdir(&self) -> &str {
        &self.workdir
    }

    /// Rules that can never take effect, ignored project allows, and other things to report.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Every compiled rule, managed first, then the account's, then the project's.
    pub fn rules(&self) -> impl Iterator<Item = &RuleInfo> {
        self.layers
            .iter()
            .flat_map(|l| l.lists.iter().flat_map(|(_, list)| list.rules.iter()))
    }

    /// Capability caps set by managed files, with the file that set each.
    pub fn caps(&self) -> &[(Capability, String)] {
        &self.caps
    }

    /// The network managed files leave the account's jobs: `Some("none")` (`no-network`),
    /// `Some("loopback")` (`local-network`), or `None` (what the account says).
    pub fn job_network_cap(&self) -> Option<&'static str> {
        let has = |cap| self.caps.iter().any(|(c, _)| *c == cap);
        if has(Capability::NoNetwork) {
            Some("none")
        } else if has(Capability::LocalNetwork) {
            Some("loopback")
        } else {
            None
        }
    }

    /// The absolute globs of every live read deny (managed, account and project layers; with the
    /// sandbox off, managed only): what a listing or a search must hide besides the floor.
    pub fn read_deny_globs(&self, now: Option<i64>) -> Vec<String> {
        let mut out = Vec::new();
        for l in &self.layers {
            if !self.sandbox && l.layer != Layer::Managed {
                continue;
            }
            if let Some(list) = l.list(Section::PathsRead, Kind::Deny) {
                for (glob, rule) in &list.path_globs {
                    if list.rules.get(*rule).is_some_and(|r| r.live(now)) && !out.contains(glob) {
                        out.push(glob.clone());
                    }
                }
            }
        }
        out
    }

    /// Judges one canonical absolute path at `now` (Unix seconds; `None`: no clock, see the
    /// module docs).
    pub fn decide_at(&self, domain: Domain, path: &str, now: Option<i64>) -> Verdict {
        let v = self.decide_rules_at(domain, path, now);
        if domain == Domain::Read || v.decision == Decision::Deny {
            return v;
        }
        let Some(hit) = code_carrying::check(path) else {
            return v;
        };
        let reason = match v.decision {
            Decision::Allow => format!("{} (it would be allowed by {})", hit.reason(), v.rule),
            _ => hit.reason(),
        };
        Verdict::in_layer(Layer::Default, Decision::Ask, hit.rule(), reason)
            .with_warning(hit.warning(path))
    }

    /// Step 4a: a path below none of the account's roots.
    fn outside_roots(&self, path: &str) -> Option<Verdict> {
        if self.roots.is_empty() || self.roots.iter().any(|r| floor::is_same_or_below(path, r)) {
            return None;
        }
        Some(Verdict::in_layer(
            Layer::Default,
            Decision::Deny,
            "roots",
            format!(
                "{path} is outside the account's roots ({}): glovebox cannot reach it",
                self.roots.join(", ")
            ),
        ))
    }

    /// Steps 1–8 of the path decision (see the module docs).
    fn decide_rules_at(&self, domain: Domain, path: &str, now: Option<i64>) -> Verdict {
        if !path.starts_with('/') || path.contains('\0') {
            return Verdict::new(
                Decision::Deny,
                "canonical",
                "subject is not a canonical absolute path",
            );
        }
        if let Some(v) = self.cap_verdict(domain_cap(domain)) {
            return v;
        }
        let section = Section::for_domain(domain);
        let deny_sections: &[Section] = match domain {
            Domain::Delete => &[Section::Delete, Section::PathsWrite, Section::PathsRead],
            _ => std::slice::from_ref(&section),
        };
        let verb = domain.as_str();
        if let Some(v) = self.deny_in(&[Layer::Managed], deny_sections, path, now, verb) {
            return v;
        }
        if !self.sandbox {
            return self.outside_roots(path).unwrap_or_else(sandbox_off);
        }
        if let Some(hit) = floor::check(path, &self.protected) {
            return Verdict::in_layer(Layer::Floor, Decision::Deny, hit.rule(), hit.reason());
        }
        if let Some(v) = self.outside_roots(path) {
            return v;
        }
        if domain != Domain::Read && floor::is_same_or_below(path, &self.project_dir) {
            return Verdict::in_layer(
                Layer::Floor,
                Decision::Deny,
                "floor:project policy",
                format!(
                    "{} holds the project's policy: agents cannot change it",
                    self.project_dir
                ),
            );
        }
        if let Some(v) = self.deny_in(
            &[Layer::Account, Layer::Project],
            deny_sections,
            path,
            now,
            verb,
        ) {
            return v;
        }
        if let Some(v) = self.allow_in(section, path, now, verb) {
            return v;
        }
        if self.confine && !floor::is_same_or_below(path, &self.workdir) {
            return Verdict::in_layer(
                self.confine_layer,
                Decision::Deny,
                "confine_to_workdir",
                format!(
                    "{verb} outside the workdir {} is denied: the account is confined to it",
                    self.workdir
                ),
            );
        }
        ask(verb)
    }

    /// Judges a command line run in `cwd` at `now`. Commands are matched whole; confinement
    /// does not apply to them, but the floor applies to their working directory.
    pub fn decide_command_at(&self, command: &str, cwd: &str, now: Option<i64>) -> Verdict {
        if command.trim().is_empty() {
            return Verdict::new(Decision::Deny, "command", "the command is empty");
        }
        if command.contains('\0') {
            return Verdict::new(Decision::Deny, "command", "the command contains a NUL byte");
        }
        if let Some(v) = self.cap_verdict(Some(Capability::NoExec)) {
            return v;
        }
        let s = [Section::Commands];
        if let Some(v) = self.deny_in(&[Layer::Managed], &s, command, now, "the command") {
            return v;
        }
        if !self.sandbox {
            return sandbox_off();
        }
        if !cwd.starts_with('/') {
            return Verdict::new(
                Decision::Deny,
                "canonical",
                "the working directory is not a canonical absolute path",
            );
        }
        if let Some(hit) = floor::check(cwd, &self.protected) {
            return Verdict::in_layer(Layer::Floor, Decision::Deny, hit.rule(), hit.reason());
        }
        let layers = [Layer::Account, Layer::Project];
        if let Some(v) = self.deny_in(&layers, &s, command, now, "the command") {
            return v;
        }
        if let Some(v) = self.allow_in(Section::Commands, command, now, "the command") {
            return v;
        }
        ask("command")
    }

    /// Judges a tool name (client tools and pack tools) at `now`.
    pub fn decide_tool_at(&self, name: &str, now: Option<i64>) -> Verdict {
        if name.is_empty() {
            return Verdict::new(Decision::Deny, "tool", "the tool name is empty");
        }
        let s = [Section::Tools];
        if let Some(v) = self.deny_in(&[Layer::Managed], &s, name, now, "the tool") {
            return v;
        }
        if !self.sandbox {
            return sandbox_off();
        }
        let layers = [Layer::Account, Layer::Project];
        if let Some(v) = self.deny_in(&layers, &s, name, now, "the tool") {
            return v;
        }
        if let Some(v) = self.allow_in(Section::Tools, name, now, "the tool") {
            return v;
        }
        ask("tool")
    }

    /// Whether a managed rule denies calling tool `name` at `now`, whatever else applies: the
    /// front doors leave such a tool out of their listings.
    pub fn managed_denies_tool(&self, name: &str, now: Option<i64>) -> bool {
        self.deny_in(&[Layer::Managed], &[Section::Tools], name, now, "the tool")
            .is_some()
    }

    /// The managed layer's `tools` deny rules, by name: what a change of those listings follows.
    pub fn managed_tool_denies(&self) -> Vec<String> {
        self.layers
            .iter()
            .filter(|l| l.layer == Layer::Managed)
            .filter_map(|l| l.list(Section::Tools, Kind::Deny))
            .flat_map(|list| {
                list.rules
                    .iter()
                    .map(|r| format!("{} ({})", r.name(), r.file))
            })
            .collect()
    }

    /// Judges a pack tool's name at `now`: like [`Policy::decide_tool_at`], after the managed
    /// caps — `no-packs` denies every pack tool, `read-only` every one its server does not mark
    /// read-only (`read_only`).
    pub fn decide_pack_tool_at(&self, name: &str, read_only: bool, now: Option<i64>) -> Verdict {
        if let Some((_, file)) = self.caps.iter().find(|(c, _)| *c == Capability::NoPacks) {
            return Verdict::in_layer(
                Layer::Managed,
                Decision::Deny,
                format!("cap: {}", Capability::NoPacks.as_str()),
                format!("the administrator capped this account to no-packs ({file})"),
            );
        }
        if !read_only && let Some(v) = self.cap_verdict(Some(Capability::ReadOnly)) {
            return v;
        }
        self.decide_tool_at(name, now)
    }

    /// Whether a managed cap takes `needed` away (`read-only` takes writes, deletes, commands
    /// and network choices too).
    pub fn capped(&self, needed: Capability) -> bool {
        self.cap_verdict(Some(needed)).is_some()
    }

    fn cap_verdict(&self, needed: Option<Capability>) -> Option<Verdict> {
        let needed = needed?;
        let (cap, file) = self.caps.iter().find(|(c, _)| {
            *c == needed
                || (*c == Capability::ReadOnly
                    && !matches!(needed, Capability::ReadOnly | Capability::NoPacks))
        })?;
        Some(Verdict::in_layer(
            Layer::Managed,
            Decision::Deny,
            format!("cap: {}", cap.as_str()),
            format!(
                "the administrator capped this account to {} ({file})",
                cap.as_str()
            ),
        ))
    }

    fn deny_in(
        &self,
        layers: &[Layer],
        sections: &[Section],
        subject: &str,
        now: Option<i64>,
        verb: &str,
    ) -> Option<Verdict> {
        for l in self.layers.iter().filter(|l| layers.contains(&l.layer)) {
            for section in sections {
                if let Some(rule) = l
                    .list(*section, Kind::Deny)
                    .and_then(|list| list.first_match(subject, now))
                {
                    return Some(Verdict::in_layer(
                        l.layer,
                        Decision::Deny,
                        rule.name(),
                        format!(
                            "{verb} is denied by the {} rule {} ({})",
                            l.layer.as_str(),
                            rule.name(),
                            rule.file
                        ),
                    ));
                }
            }
        }
        None
    }

    fn allow_in(
        &self,
        section: Section,
        subject: &str,
        now: Option<i64>,
        verb: &str,
    ) -> Option<Verdict> {
        for l in self
            .layers
            .iter()
            .filter(|l| matches!(l.layer, Layer::Managed | Layer::Account))
        {
            if let Some(rule) = l
                .list(section, Kind::Allow)
                .and_then(|list| list.first_match(subject, now))
            {
                return Some(Verdict::in_layer(
                    l.layer,
                    Decision::Allow,
                    rule.name(),
                    format!(
                        "{verb} is allowed by the {} rule {} ({})",
                        l.layer.as_str(),
                        rule.name(),
                        rule.file
                    ),
                ));
            }
        }
        None
    }
}

fn domain_cap(domain: Domain) -> Option<Capability> {
    match domain {
        Domain::Read => None,
        Domain::Write => Some(Capability::ReadOnly),
        Domain::Delete => Some(Capability::NoDelete),
    }
}

fn sandbox_off() -> Verdict {
    Verdict::in_layer(
        Layer::Account,
        Decision::Allow,
        "sandbox: false",
        "the sandbox is off for this account: everything is allowed",
    )
}

fn ask(what: &str) -> Verdict {
    Verdict::new(
        Decision::Ask,
        "default",
        format!("no rule matches this {what}: the approver decides"),
    )
}
