//! The decision layer above the pure policy: may a planned call proceed? It checks, in order,
//! that the account exists, that its tools are switched on, that the tool is in the catalog, that
//! its policy compiled, and that the plan has the shape the catalog gives the tool (a pack tool's:
//! its name, then its path arguments as reads or writes, with the pack host's facts); then each
//! subject is judged by its domain's rules (a command with its working directory, the plan's next
//! subject; a pack tool's name by the `tools` rules and the managed caps, allowed with no rule
//! when its server marks it read-only and the pack is the account's own) and the verdicts
//! combine, strictest first.
//!
//! Pure: the gate's service passes in the account's state (its swapped-in policy and
//! enablement), the call, the plan and the time. Anything it cannot make sense of is denied.

use std::sync::Arc;

use glovebox_policy::permissions::Section;
use glovebox_policy::{Decision, Domain, Layer, Policy, Verdict};
use glovebox_proto::tools::catalog::{PlanShape, plan_shape};
use glovebox_proto::v1::{self as pb, PackFacts, Plan};

/// What the gate knows of an account when it judges.
#[derive(Debug, Clone, Copy)]
pub enum Account<'a> {
    /// Not configured.
    Unknown,
    Known {
        /// Its id (for messages).
        id: &'a str,
        /// The account's compiled policy, or why there is none.
        policy: Result<&'a Arc<Policy>, &'a str>,
        /// Whether its tools are switched on.
        enabled: bool,
    },
}

/// A judged call: the combined verdict, each subject's own (by its index in the plan), and the
/// policy that judged it (none when the call was refused before any policy applied).
#[derive(Debug, Clone)]
pub struct Judged {
    pub verdict: Verdict,
    pub per_subject: Vec<(usize, Section, Decision)>,
    pub policy: Option<Arc<Policy>>,
    pub now: i64,
}

impl Judged {
    fn deny(rule: &str, reason: String, now: i64) -> Judged {
        Judged {
            verdict: Verdict::new(Decision::Deny, rule, reason),
            per_subject: Vec::new(),
            policy: None,
            now,
        }
    }
}

/// Judges the call of `tool` planned as `plan` for `account` at `now` (seconds since the epoch).
pub fn judge(account: Account<'_>, tool: &str, plan: &Plan, now: i64) -> Judged {
    let deny = |rule: &str, reason: String| Judged::deny(rule, reason, now);
    let Account::Known {
        id,
        policy,
        enabled,
    } = account
    else {
        return deny("account", "unknown account".to_owned());
    };
    if !enabled {
        return deny(
            "enablement",
            format!(
                "tools are switched off for account {id}; an administrator can run `glovebox enable --account {id}`"
            ),
        );
    }
    let Some(shape) = plan_shape(tool) else {
        return deny("tool", format!("unknown tool {tool:?}"));
    };
    let policy = match policy {
        Ok(p) => p,
        Err(why) => {
            return deny(
                "policy",
                format!(
                    "the account's policy file is invalid: {}",
                    without_host_dir(why)
                ),
            );
        }
    };
    if plan.subjects.is_empty() {
        return deny("plan", "the call names no subject".to_owned());
    }
    let domains: Vec<pb::Domain> = plan
        .subjects
        .iter()
        .map(|s| pb::Domain::try_from(s.domain).unwrap_or(pb::Domain::Unspecified))
        .collect();
    if !shape.fits(&domains) {
        return deny("plan", format!("the plan does not fit {tool}"));
    }
    let pack = match (shape, &plan.pack) {
        (PlanShape::ToolThenPaths, Some(facts)) => Some(facts),
        (PlanShape::ToolThenPaths, None) => {
            return deny(
                "plan",
                format!("the plan of {tool} says nothing of its pack"),
            );
        }
        (_, _) => None,
    };
    let mut per_subject = Vec::new();
    let mut verdicts = Vec::new();
    for (i, subject) in plan.subjects.iter().enumerate() {
        // The command's working directory is the plan's next subject.
        let next = plan.subjects.get(i + 1).map(|s| s.path.as_str());
        let Some((v, section)) = judge_subject(policy, tool, subject, next, pack, now) else {
            return deny("plan", "a subject does not name what it is".to_owned());
        };
        if let Some(section) = section {
            per_subject.push((i, section, v.decision));
        }
        verdicts.push(v);
    }
    let verdict = Verdict::combine(verdicts)
        .unwrap_or_else(|| Verdict::new(Decision::Deny, "plan", "the call names no subject"));
    Judged {
        verdict,
        per_subject,
        policy: Some(policy.clone()),
        now,
    }
}

/// One subject's verdict by its domain's rules, and the policy section that decided it (none for
/// the account's own jobs). `None` for a subject whose domain does not fit.
fn judge_subject(
    policy: &Policy,
    tool: &str,
    subject: &pb::Subject,
    next: Option<&str>,
    pack: Option<&PackFacts>,
    now: i64,
) -> Option<(Verdict, Option<Section>)> {
    let at = Some(now);
    Some(match pb::Domain::try_from(subject.domain) {
        Ok(pb::Domain::Read) => (
            policy.decide_at(Domain::Read, &subject.path, at),
            Some(Section::PathsRead),
        ),
        Ok(pb::Domain::Write) => (
            policy.decide_at(Domain::Write, &subject.path, at),
            Some(Section::PathsWrite),
        ),
        Ok(pb::Domain::Delete) => (
            policy.decide_at(Domain::Delete, &subject.path, at),
            Some(Section::Delete),
        ),
        Ok(pb::Domain::Exec) => (
            policy.decide_command_at(&subject.path, next.unwrap_or_default(), at),
            Some(Section::Commands),
        ),
        Ok(pb::Domain::Job) => (
            Verdict::new(
                Decision::Allow,
                "jobs",
                "an account may see and stop its own jobs",
            ),
            None,
        ),
        Ok(pb::Domain::Account) if subject.path == "roots" => (
            Verdict::new(
                Decision::Allow,
                "account",
                "an account may know its own roots",
            ),
            None,
        ),
        Ok(pb::Domain::Tool) if subject.path == tool => (
            decide_tool(policy, &subject.path, pack, at),
            Some(Section::Tools),
        ),
        _ => return None,
    })
}

/// The verdict on calling tool `name`: with `pack` facts, as a pack tool (the caps on packs,
/// then [`read_only_default`]); without, as any tool. A call and `policy explain` alike.
pub(crate) fn decide_tool(
    policy: &Policy,
    name: &str,
    pack: Option<&PackFacts>,
    at: Option<i64>,
) -> Verdict {
    match pack {
        Some(facts) => {
            read_only_default(policy.decide_pack_tool_at(name, facts.read_only, at), facts)
        }
        None => policy.decide_tool_at(name, at),
    }
}

/// With no rule for a pack tool (the default ask), a tool whose server marks it read-only, of a
/// pack from the account's own `mcp.json`, is allowed; a project's pack asks (its server's hints
/// came with the repository).
fn read_only_default(v: Verdict, facts: &PackFacts) -> Verdict {
    if v.decision == Decision::Ask
        && v.layer == Layer::Default
        && facts.read_only
        && facts.origin == "user"
    {
        return Verdict::in_layer(
            Layer::Default,
            Decision::Allow,
            "pack:read-only",
            "no rule matches this tool, which its server marks read-only in a pack of the account's own mcp.json",
        );
    }
    v
}

/// What a listing or search must hide: the read denies of the policy that judged the call, for
/// tools that walk trees (per the catalog); nothing for the others.
pub fn hidden_globs(tool: &str, judged: &Judged) -> Vec<String> {
    let walks = glovebox_proto::tools::Tool::from_name(tool).is_some_and(|t| t.entry().walks);
    match &judged.policy {
        Some(p) if walks => p.read_deny_globs(Some(judged.now)),
        _ => Vec::new(),
    }
}

/// The network managed policy leaves a job `exec_run` starts (`none`, `loopback`), or `""` (the
/// account's own, and for every other tool).
pub fn job_network(tool: &str, judged: &Judged) -> &'static str {
    match &judged.policy {
        Some(p) if tool == "exec_run" => p.job_network_cap().unwrap_or(""),
        _ => "",
    }
}

/// Whether a subject asks whatever rule matches it (writes and deletes of files that make later
/// commands run code), so an "always" answer stores no rule for it.
pub fn always_asks(section: Section, path: &str) -> bool {
    matches!(section, Section::PathsWrite | Section::Delete)
        && glovebox_policy::code_carrying::check(path).is_some()
}

/// A policy error as an agent may read it: a leading absolute path (`/home/…/state/accounts/a/
/// permissions.yaml: line 3: …`) is cut to its file name, so no deny reason shows where the
/// state dir lives.
fn without_host_dir(why: &str) -> String {
    match why.split_once(": ") {
        Some((path, rest)) if path.starts_with('/') => {
            let name = path.rsplit('/').next().unwrap_or_default();
            format!("{name}: {rest}")
        }
        _ => why.to_owned(),
    }
}

/// The built-in tools whose every call a managed cap of `policy` refuses, by name: what the
/// front doors leave out of their listings. A tool is capped when a cap takes away what its plan
/// always holds (a write, a delete, a command), or, for `exec_input`, commands.
pub fn capped_tools(policy: &Policy) -> Vec<String> {
    use glovebox_policy::permissions::Capability;
    use glovebox_proto::tools::Tool;
    let takes = |domain: &pb::Domain| match domain {
        pb::Domain::Write => policy.capped(Capability::ReadOnly),
        pb::Domain::Delete => policy.capped(Capability::NoDelete),
        pb::Domain::Exec => policy.capped(Capability::NoExec),
        _ => false,
    };
    Tool::ALL
        .iter()
        .filter(|t| match t {
            Tool::ExecInput => policy.capped(Capability::NoExec),
            _ => t.entry().domains.iter().any(takes),
        })
        .map(|t| t.name().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use glovebox_policy::{Inputs, RawPolicy, Source};
    use pb::Domain as D;

    const WORK: &str = "/w";
    const NOW: i64 = 1_800_000_000;

    fn policy(yaml: &str) -> Arc<Policy> {
        Arc::new(
            Policy::compile_layers(&Inputs {
                workdir: WORK.into(),
                protected: vec!["/state".into()],
                roots: Vec::new(),
                managed: Vec::new(),
                account: Source::new("account.yaml", RawPolicy::parse(yaml).unwrap(), 0),
                project: None,
            })
            .unwrap(),
        )
    }

    #[test]
    fn a_cap_hides_exactly_the_built_in_tools_it_forbids_every_call_of() {
        let capped = |caps: &str| {
            let p = Policy::compile_layers(&Inputs {
                workdir: WORK.into(),
                protected: vec!["/state".into()],
                roots: Vec::new(),
                managed: vec![Source::new("corp.yaml", RawPolicy::parse(caps).unwrap(), 0)],
                account: Source::new("account.yaml", RawPolicy::parse("{}").unwrap(), 0),
                project: None,
            })
            .unwrap();
            capped_tools(&p)
        };
        assert_eq!(capped("{}"), Vec::<String>::new());
        assert_eq!(capped("cap: [no-exec]"), ["exec_run", "exec_input"]);
        assert_eq!(capped("cap: [no-delete]"), ["file_delete", "file_move"]);
        assert_eq!(
            capped("cap: [read-only]"),
            [
                "file_write",
                "file_edit",
                "file_delete",
                "file_move",
                "file_mkdir",
                "exec_run",
                "exec_input"
            ]
        );
        assert_eq!(capped("cap: [no-packs]"), Vec::<String>::new());
    }

    fn pack_plan(subjects: &[(D, &str)], read_only: bool, origin: &str) -> Plan {
        Plan {
            pack: Some(PackFacts {
                read_only,
                origin: origin.into(),
            }),
            ..plan(subjects)
        }
    }

    fn plan(subjects: &[(D, &str)]) -> Plan {
        Plan {
            subjects: subjects
                .iter()
                .map(|(d, p)| pb::Subject {
                    domain: *d as i32,
                    path: (*p).into(),
                    state: None,
                })
                .collect(),
            content_tag: Vec::new(),
            pack: None,
        }
    }

    const POLICY: &str = "paths:\n  read:\n    allow: ['./**']\n  write:\n    deny: ['./locked/**']\ncommands:\n  allow: ['cargo test']\ntools:\n  allow: ['client__shot', 'gh__get_*']\n  deny: ['gh__delete_*']\n";

    #[test]
    fn policy_errors_reach_agents_without_the_state_dir() {
        for (why, shown) in [
            (
                "/home/a/.local/state/glovebox/accounts/a/permissions.yaml: line 3: expected a list",
                "permissions.yaml: line 3: expected a list",
            ),
            ("permissions.yaml: line 3: x", "permissions.yaml: line 3: x"),
            ("not a path", "not a path"),
        ] {
            assert_eq!(without_host_dir(why), shown, "{why}");
        }
        let broken = Account::Known {
            id: "alice",
            policy: Err("/s/accounts/alice/permissions.yaml: line 3: expected a list"),
            enabled: true,
        };
        let j = judge(broken, "file_read", &plan(&[(D::Read, "/w/a")]), NOW);
        assert!(!j.verdict.reason.contains("/s/"), "{}", j.verdict.reason);
        assert!(
            j.verdict.reason.contains("permissions.yaml: line 3"),
            "{}",
            j.verdict.reason
        );
    }

    #[test]
    fn table() {
        let p = policy(POLICY);
        let on = Account::Known {
            id: "alice",
            policy: Ok(&p),
            enabled: true,
        };
        let off = Account::Known {
            id: "alice",
            policy: Ok(&p),
            enabled: false,
        };
        let broken = Account::Known {
            id: "alice",
            policy: Err("permissions.yaml: line 3: expected a list"),
            enabled: true,
        };
        #[rustfmt::skip]
        let cases: &[(&str, Account<'_>, &str, Plan, Decision, &str)] = &[
            ("read in the workdir",       on,      "file_read",  plan(&[(D::Read, "/w/a")]),                     Decision::Allow, "paths.read.allow[0]"),
            ("write asks",                on,      "file_write", plan(&[(D::Write, "/w/a")]),                    Decision::Ask,   "default"),
            ("write denied",              on,      "file_write", plan(&[(D::Write, "/w/locked/a")]),             Decision::Deny,  "paths.write.deny[0]"),
            ("the floor",                 on,      "file_read",  plan(&[(D::Read, "/w/.ssh/id_rsa")]),           Decision::Deny,  "floor:.ssh"),
            ("unknown account",           Account::Unknown, "file_read", plan(&[(D::Read, "/w/a")]),            Decision::Deny,  "account"),
            ("switched off",              off,     "file_read",  plan(&[(D::Read, "/w/a")]),                     Decision::Deny,  "enablement"),
            ("policy never compiled",     broken,  "file_read",  plan(&[(D::Read, "/w/a")]),                     Decision::Deny,  "policy"),
            ("unknown tool",              on,      "rm_rf",      plan(&[(D::Read, "/w/a")]),                     Decision::Deny,  "tool"),
            ("no subject",                on,      "file_read",  plan(&[]),                                      Decision::Deny,  "plan"),
            ("a write planned as a read", on,      "file_write", plan(&[(D::Read, "/w/a")]),                     Decision::Deny,  "plan"),
            ("a move with two subjects",  on,      "file_move",  plan(&[(D::Delete, "/w/a"), (D::Write, "/w/b")]), Decision::Deny, "plan"),
            ("a move, every subject",     on,      "file_move",  plan(&[(D::Delete, "/w/a"), (D::Read, "/w/a"), (D::Write, "/w/b")]), Decision::Ask, "default"),
            ("an allowed command",        on,      "exec_run",   plan(&[(D::Exec, "cargo test"), (D::Read, "/w")]), Decision::Allow, "commands.allow[0]"),
            ("a command from outside",    on,      "exec_run",   plan(&[(D::Exec, "cargo test"), (D::Read, "/etc")]), Decision::Ask, "default"),
            ("another command",           on,      "exec_run",   plan(&[(D::Exec, "cargo test; rm -rf ~"), (D::Read, "/w")]), Decision::Ask, "default"),
            ("own jobs",                  on,      "exec_kill",  plan(&[(D::Job, "job-1")]),                     Decision::Allow, "jobs"),
            ("a client tool",             on,      "client__shot", plan(&[(D::Tool, "client__shot")]),          Decision::Allow, "tools.allow[0]"),
            ("a client tool, other name", on,      "client__shot", plan(&[(D::Tool, "client__other")]),         Decision::Deny,  "plan"),
            ("an unlisted client tool",   on,      "client__cam", plan(&[(D::Tool, "client__cam")]),            Decision::Ask,   "default"),
            ("no domain",                 on,      "file_read",  plan(&[(D::Unspecified, "/w/a")]),              Decision::Deny,  "plan"),
            ("a pack tool allowed",       on,      "gh__get_x",  pack_plan(&[(D::Tool, "gh__get_x")], false, "user"), Decision::Allow, "tools.allow[1]"),
            ("a pack tool denied",        on,      "gh__delete_x", pack_plan(&[(D::Tool, "gh__delete_x")], true, "user"), Decision::Deny, "tools.deny[0]"),
            ("a pack tool asks",          on,      "db__query",  pack_plan(&[(D::Tool, "db__query")], false, "user"), Decision::Ask,   "default"),
            ("read-only, user's pack",    on,      "db__query",  pack_plan(&[(D::Tool, "db__query")], true, "user"), Decision::Allow,  "pack:read-only"),
            ("read-only, project's pack", on,      "db__query",  pack_plan(&[(D::Tool, "db__query")], true, "project"), Decision::Ask, "default"),
            ("read-only, reads the workdir", on,   "db__query",  pack_plan(&[(D::Tool, "db__query"), (D::Read, "/w/a")], true, "user"), Decision::Allow, "pack:read-only"),
            ("read-only, reads outside",  on,      "db__query",  pack_plan(&[(D::Tool, "db__query"), (D::Read, "/etc/x")], true, "user"), Decision::Ask, "default"),
            ("a pack path on the floor",  on,      "gh__get_x",  pack_plan(&[(D::Tool, "gh__get_x"), (D::Write, "/w/.env")], false, "user"), Decision::Deny, "floor:.env*"),
            ("a pack plan without facts", on,      "gh__get_x",  plan(&[(D::Tool, "gh__get_x")]),               Decision::Deny,  "plan"),
            ("a pack plan naming another tool", on, "gh__get_x", pack_plan(&[(D::Tool, "gh__get_y")], true, "user"), Decision::Deny, "plan"),
            ("a pack plan with an exec",  on,      "gh__get_x",  pack_plan(&[(D::Tool, "gh__get_x"), (D::Exec, "ls")], true, "user"), Decision::Deny, "plan"),
            ("a pack plan paths first",   on,      "gh__get_x",  pack_plan(&[(D::Read, "/w/a"), (D::Tool, "gh__get_x")], true, "user"), Decision::Deny, "plan"),
            ("a client tool with facts",  on,      "client__shot", pack_plan(&[(D::Tool, "client__shot")], true, "user"), Decision::Allow, "tools.allow[0]"),
        ];
        for (name, account, tool, plan, decision, rule) in cases {
            let j = judge(*account, tool, plan, NOW);
            assert_eq!(j.verdict.decision, *decision, "{name}: {:?}", j.verdict);
            assert!(j.verdict.rule.starts_with(rule), "{name}: {:?}", j.verdict);
            // A call refused before any policy applied carries no policy (and so hides nothing).
            assert_eq!(
                j.policy.is_some(),
                !["account", "enablement", "policy", "tool", "plan"].contains(rule),
                "{name}"
            );
        }
    }

    #[test]
    fn per_subject_verdicts_name_their_section_and_index() {
        let p = policy(POLICY);
        let on = Account::Known {
            id: "alice",
            policy: Ok(&p),
            enabled: true,
        };
        let j = judge(
            on,
            "file_move",
            &plan(&[(D::Delete, "/w/a"), (D::Read, "/w/a"), (D::Write, "/w/b")]),
            NOW,
        );
        assert_eq!(
            j.per_subject,
            vec![
                (0, Section::Delete, Decision::Ask),
                (1, Section::PathsRead, Decision::Allow),
                (2, Section::PathsWrite, Decision::Ask),
            ]
        );
    }

    #[test]
    fn only_walking_tools_are_told_what_to_hide() {
        let p = policy("paths:\n  read:\n    allow: ['./**']\n    deny: ['./private/**']\n");
        let on = Account::Known {
            id: "alice",
            policy: Ok(&p),
            enabled: true,
        };
        for (tool, hides) in [
            ("file_list", true),
            ("file_grep", true),
            ("file_find", true),
            ("file_read", false),
        ] {
            let j = judge(on, tool, &plan(&[(D::Read, "/w")]), NOW);
            assert_eq!(!hidden_globs(tool, &j).is_empty(), hides, "{tool}");
        }
    }
}
