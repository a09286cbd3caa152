//! Table tests of the pure decision: every case is named and judged through one `check` helper
//! against a small set of named policy fixtures (account, managed and project layers).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use glovebox_policy::edit;
use glovebox_policy::{
    Decision, Decision::*, Inputs, Kind, Layer, Layer::*, Policy, RawPolicy, RawRule, Section,
    Source, exact_command_rule, exact_path_rule, exact_rule,
};

/// 2026-11-30T00:00:00Z
const NOW: i64 = 1_795_996_800;
const WORKDIR: &str = "/w";

#[derive(Debug, Clone, Copy)]
enum Q {
    R(&'static str),
    W(&'static str),
    D(&'static str),
    /// command, cwd
    X(&'static str, &'static str),
    T(&'static str),
    /// A pack tool's name, and whether its server marks it read-only.
    P(&'static str, bool),
}
use Q::*;

struct Case {
    name: &'static str,
    fixture: &'static str,
    q: Q,
    want: Decision,
    layer: Layer,
    /// A substring of the deciding rule.
    rule: &'static str,
}

fn c(
    name: &'static str,
    fixture: &'static str,
    q: Q,
    want: Decision,
    layer: Layer,
    rule: &'static str,
) -> Case {
    Case {
        name,
        fixture,
        q,
        want,
        layer,
        rule,
    }
}

const DEFAULT: &str = "paths:\n  read:\n    allow: ['./**']\n";

const RULES: &str = r#"
paths:
  read:
    allow: ['/w/allowed/**', './docs/*.md', '../sibling/**', '/opt/**/*.txt']
    deny: ['./private/**', '/w/*.log']
  write:
    allow: ['./out/**', '/w/f\[1\]*.txt']
    deny: ['./out/locked/**']
delete:
  allow: ['./tmp/**', './private/x']
  deny: ['./tmp/keep/**']
commands:
  allow: ['git status', 'ls( -la)?', 'cargo (build|test)( [a-z-]+)*', '^echo hi$']
  deny: ['rm .*', 'sudo( .*)?']
tools:
  allow: ['client__*', 'pack__github__get_*', 'github__get_*']
  deny: ['client__shell*', 'github__delete_*']
"#;

const MANAGED: &str = r#"
paths:
  read:
    deny: ['/w/allowed/secret/**']
  write:
    deny: ['/etc/**']
commands:
  deny: ['curl .*']
tools:
  deny: ['pack__evil__*']
"#;

const MANAGED_ALLOWS: &str = r#"
paths:
  read:
    allow: ['/w/allowed/secret/**', '/etc/**']
  write:
    allow: ['/etc/**']
commands:
  allow: ['curl .*']
tools:
  allow: ['pack__evil__*']
"#;

const PROJECT_ACCOUNT: &str = "paths:\n  read:\n    allow: ['./**']\n  write:\n    allow: ['./**']\ncommands:\n  allow: ['make( .*)?']\n";

const PROJECT: &str = r#"
sandbox: false
confine_to_workdir: true
paths:
  read:
    allow: ['/etc/**']
    deny: ['./vendor/**']
  write:
    allow: ['/**']
    deny: ['./generated/**']
commands:
  allow: ['.*']
  deny: ['make deploy']
tools:
  allow: ['*']
"#;

const EXPIRY: &str = r#"
paths:
  read:
    allow:
      - {rule: './old/**', expires: '2026-11-01T00:00:00Z'}
      - {rule: './new/**', expires: '2026-12-31T00:00:00+01:00'}
      - {rule: './short/**', expires: 1h}
      - {rule: './long/**', expires: 3h}
    deny:
      - {rule: './was-denied/**', expires: '2026-11-29T23:59:59Z'}
  write:
    allow: ['./**']
commands:
  allow:
    - {rule: 'npm test', expires: 30m}
"#;

const CONFINED: &str = r#"
confine_to_workdir: true
paths:
  read:
    allow: ['./**', '/opt/tools/**']
    deny: ['./secret/**']
  write:
    allow: ['/tmp/out/**']
delete:
  allow: ['/tmp/out/**']
"#;

/// Writes and deletes allowed in the workdir and the home directory.
const WRITES: &str = r#"
paths:
  read:
    allow: ['./**']
  write:
    allow: ['./**', '/home/u/**']
    deny: ['./locked/**']
delete:
  allow: ['./**']
"#;

const SANDBOX_OFF: &str = "sandbox: false\npaths:\n  read:\n    deny: ['./x/**']\n";

fn source(name: &str, yaml: &str, modified: i64) -> Source {
    Source::new(name, RawPolicy::parse(yaml).unwrap(), modified)
}

fn inputs(account: &str) -> Inputs {
    Inputs {
        workdir: WORKDIR.to_owned(),
        protected: vec!["/state".to_owned()],
        roots: Vec::new(),
        managed: Vec::new(),
        account: source("account.yaml", account, NOW - 7200),
        project: None,
    }
}

fn exact_fixture() -> String {
    let mut text = DEFAULT.to_owned();
    for (section, rule) in [
        (Section::PathsWrite, exact_path_rule("/w/a[1]*.txt")),
        (Section::PathsWrite, exact_path_rule("/w/back\\slash")),
        (Section::PathsWrite, exact_path_rule("/w/{a,b}?")),
        (Section::Delete, exact_path_rule("/w/old.txt")),
        (Section::Commands, exact_command_rule("git status")),
        (
            Section::Commands,
            exact_command_rule("echo $(whoami) | tr a-z A-Z"),
        ),
        (Section::Tools, exact_rule(Section::Tools, "client__a*")),
    ] {
        text = edit::add_rule(&text, section, Kind::Allow, &RawRule::Pattern(rule))
            .unwrap()
            .unwrap()
            .text;
    }
    text
}

fn fixtures() -> HashMap<&'static str, Policy> {
    let mut m = HashMap::new();
    let mut add = |name: &'static str, inputs: Inputs| {
        m.insert(name, Policy::compile_layers(&inputs).unwrap());
    };
    add("default", inputs(DEFAULT));
    add("writes", inputs(WRITES));
    add("empty", inputs(""));
    add("rules", inputs(RULES));
    let mut i = inputs(RULES);
    i.managed
        .push(source("/state/managed/corp.yaml", MANAGED, 0));
    add("managed", i);
    let mut i = inputs(DEFAULT);
    i.managed
        .push(source("/state/managed/allow.yaml", MANAGED_ALLOWS, 0));
    add("managed_allows", i);
    for (name, cap) in [
        ("read_only", "read-only"),
        ("no_exec", "no-exec"),
        ("no_delete", "no-delete"),
        ("no_packs", "no-packs"),
    ] {
        let mut i = inputs(
            "paths:\n  read:\n    allow: ['./**']\n  write:\n    allow: ['./**']\ndelete:\n  allow: ['./**']\ncommands:\n  allow: ['.*']\n",
        );
        i.managed.push(source(
            "/state/managed/cap.yaml",
            &format!("cap: [{cap}]\n"),
            0,
        ));
        add(name, i);
    }
    let mut i = inputs(PROJECT_ACCOUNT);
    i.project = Some(source("/w/.glovebox/permissions.yaml", PROJECT, 0));
    add("project", i);
    add("expiry", inputs(EXPIRY));
    add("confined", inputs(CONFINED));
    let mut i = inputs(SANDBOX_OFF);
    i.managed
        .push(source("/state/managed/corp.yaml", MANAGED, 0));
    add("sandbox_off", i);
    let mut i = inputs(SANDBOX_OFF);
    i.managed
        .push(source("/state/managed/cap.yaml", "cap: [no-exec]\n", 0));
    add("sandbox_off_capped", i);
    add("exact", inputs(&exact_fixture()));
    m
}

fn check(cases: &[Case]) {
    let fixtures = fixtures();
    let mut failures = Vec::new();
    let mut names = std::collections::HashSet::new();
    for case in cases {
        assert!(names.insert(case.name), "duplicate case name {}", case.name);
        let p = &fixtures[case.fixture];
        let now = Some(NOW);
        let v = match case.q {
            R(path) => p.decide_at(glovebox_policy::Domain::Read, path, now),
            W(path) => p.decide_at(glovebox_policy::Domain::Write, path, now),
            D(path) => p.decide_at(glovebox_policy::Domain::Delete, path, now),
            X(cmd, cwd) => p.decide_command_at(cmd, cwd, now),
            T(name) => p.decide_tool_at(name, now),
            P(name, read_only) => p.decide_pack_tool_at(name, read_only, now),
        };
        if v.decision != case.want || v.layer != case.layer || !v.rule.contains(case.rule) {
            failures.push(format!(
                "{}: {:?} want {:?} in {:?} by ~{:?}, got {:?} in {:?} by {:?} ({})",
                case.name,
                case.q,
                case.want,
                case.layer,
                case.rule,
                v.decision,
                v.layer,
                v.rule,
                v.reason
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn decision_table() {
    let cases = cases();
    assert!(cases.len() >= 150, "only {} cases", cases.len());
    check(&cases);
}

#[rustfmt::skip]
fn cases() -> Vec<Case> {
    vec![
        // --- the default policy of a new account
        c("default read in workdir", "default", R("/w/a.txt"), Allow, Account, "paths.read.allow[0]"),
        c("default read workdir itself", "default", R("/w"), Allow, Account, "allow[0]"),
        c("default read deep", "default", R("/w/a/b/c/d.rs"), Allow, Account, "allow[0]"),
        c("default read outside asks", "default", R("/etc/passwd"), Ask, Default, "default"),
        c("default sibling prefix dir asks", "default", R("/wx/a.txt"), Ask, Default, "default"),
        c("default sibling underscore asks", "default", R("/w_secret/a"), Ask, Default, "default"),
        c("default write asks", "default", W("/w/a.txt"), Ask, Default, "default"),
        c("default delete asks", "default", D("/w/a.txt"), Ask, Default, "default"),
        c("default command asks", "default", X("ls", "/w"), Ask, Default, "default"),
        c("default tool asks", "default", T("client__open"), Ask, Default, "default"),
        c("relative subject denied", "default", R("relative/path"), Deny, Default, "canonical"),
        c("empty subject denied", "default", R(""), Deny, Default, "canonical"),
        c("nul in subject denied", "default", R("/w/a\0b"), Deny, Default, "canonical"),
        c("empty file asks", "empty", R("/w/a"), Ask, Default, "default"),
        c("empty file floor", "empty", R("/w/.env"), Deny, Floor, "floor:.env*"),
        // --- the floor
        c("floor .ssh dir", "default", R("/w/.ssh"), Deny, Floor, "floor:.ssh"),
        c("floor .ssh below", "default", R("/w/.ssh/id_rsa"), Deny, Floor, "floor:.ssh"),
        c("floor .ssh deep", "default", R("/w/x/.ssh/config"), Deny, Floor, "floor:.ssh"),
        c("floor .SSH upper", "default", R("/w/.SSH/config"), Deny, Floor, "floor:.ssh"),
        c("floor .Ssh mixed", "default", R("/w/.Ssh"), Deny, Floor, "floor:.ssh"),
        c("floor fullwidth .ssh", "default", R("/w/\u{ff0e}\u{ff53}\u{ff53}\u{ff48}/k"), Deny, Floor, "floor:.ssh"),
        c("floor fullwidth upper SSH", "default", R("/w/.\u{ff33}\u{ff33}\u{ff28}"), Deny, Floor, "floor:.ssh"),
        c("floor zero width inside", "default", R("/w/.s\u{200b}sh/k"), Deny, Floor, "floor:.ssh"),
        c("floor soft hyphen inside", "default", R("/w/.gnu\u{ad}pg"), Deny, Floor, "floor:.gnupg"),
        c("floor trailing dot", "default", R("/w/.ssh./k"), Deny, Floor, "floor:.ssh"),
        c("floor long s", "default", R("/w/.\u{17f}sh"), Deny, Floor, "floor:.ssh"),
        c("floor kelvin sign key", "default", R("/w/tls.\u{212a}EY"), Deny, Floor, "floor:*.key"),
        c("floor combining accent", "default", R("/w/.e\u{301}nv"), Deny, Floor, "floor:.env*"),
        c("floor .env", "default", R("/w/.env"), Deny, Floor, "floor:.env*"),
        c("floor .env.local", "default", R("/w/.env.local"), Deny, Floor, "floor:.env*"),
        c("floor .ENV upper", "default", R("/w/.ENV"), Deny, Floor, "floor:.env*"),
        c("floor pem", "default", R("/w/key.pem"), Deny, Floor, "floor:*.pem"),
        c("floor PEM upper", "default", R("/w/KEY.PEM"), Deny, Floor, "floor:*.pem"),
        c("floor p12", "default", R("/w/a.p12"), Deny, Floor, "floor:*.p12"),
        c("floor pfx", "default", R("/w/a.pfx"), Deny, Floor, "floor:*.pfx"),
        c("floor kdbx", "default", R("/w/v.kdbx"), Deny, Floor, "floor:*.kdbx"),
        c("floor id_rsa", "default", R("/w/id_rsa"), Deny, Floor, "floor:id_rsa*"),
        c("floor id_ed25519.pub", "default", R("/w/id_ed25519.pub"), Deny, Floor, "floor:id_ed25519*"),
        c("floor aws", "default", R("/home/u/.aws/credentials"), Deny, Floor, "floor:.aws"),
        c("floor docker config", "default", R("/home/u/.docker/config.json"), Deny, Floor, "floor:.docker/config.json"),
        c("floor docker other ok", "default", R("/w/.docker/other.json"), Allow, Account, "allow[0]"),
        c("floor chrome profile", "default", R("/home/u/.config/google-chrome/Default"), Deny, Floor, "google-chrome"),
        c("floor netrc", "default", R("/w/.netrc"), Deny, Floor, "floor:.netrc"),
        c("floor _netrc", "default", R("/w/_netrc"), Deny, Floor, "floor:_netrc"),
        c("floor git-credentials", "default", R("/w/.git-credentials"), Deny, Floor, "floor:.git-credentials"),
        c("floor glovebox state", "default", R("/state/audit.db"), Deny, Floor, "glovebox state"),
        c("floor glovebox state dir", "default", R("/state"), Deny, Floor, "glovebox state"),
        c("floor state sibling not", "default", R("/state-other/x"), Ask, Default, "default"),
        c("floor write", "default", W("/w/.env"), Deny, Floor, "floor:.env*"),
        c("floor delete", "default", D("/w/.ssh"), Deny, Floor, "floor:.ssh"),
        c("floor beats allow", "rules", R("/w/allowed/.env"), Deny, Floor, "floor:.env*"),
        c("not floor environment.md", "default", R("/w/environment.md"), Allow, Account, "allow[0]"),
        c("not floor monkey", "default", R("/w/monkey"), Allow, Account, "allow[0]"),
        c("not floor ssh without dot", "default", R("/w/ssh/config"), Allow, Account, "allow[0]"),
        c("not floor keys dir", "default", R("/w/keys/readme"), Allow, Account, "allow[0]"),
        c("command cwd on floor", "rules", X("git status", "/w/.ssh"), Deny, Floor, "floor:.ssh"),
        // --- globs, sibling prefixes, relative globs
        c("allowed dir itself", "rules", R("/w/allowed"), Allow, Account, "paths.read.allow[0]"),
        c("allowed dir child", "rules", R("/w/allowed/a"), Allow, Account, "paths.read.allow[0]"),
        c("allowed_secret sibling asks", "rules", R("/w/allowed_secret/a"), Ask, Default, "default"),
        c("allowed-x sibling asks", "rules", R("/w/allowed-x"), Ask, Default, "default"),
        c("allowedX sibling asks", "rules", R("/w/allowedX/a"), Ask, Default, "default"),
        c("relative glob docs md", "rules", R("/w/docs/a.md"), Allow, Account, "./docs/*.md"),
        c("relative star stays in dir", "rules", R("/w/docs/sub/a.md"), Ask, Default, "default"),
        c("relative glob other ext", "rules", R("/w/docs/a.txt"), Ask, Default, "default"),
        c("relative dotdot glob", "rules", R("/sibling/x"), Allow, Account, "../sibling/**"),
        c("relative dotdot not under workdir", "rules", R("/w/sibling/x"), Ask, Default, "default"),
        c("relative glob not process cwd", "rules", R("/docs/a.md"), Ask, Default, "default"),
        c("doublestar middle", "rules", R("/opt/a/b/c.txt"), Allow, Account, "/opt/**/*.txt"),
        c("doublestar middle zero dirs", "rules", R("/opt/c.txt"), Allow, Account, "/opt/**/*.txt"),
        c("doublestar middle wrong ext", "rules", R("/opt/a/c.rs"), Ask, Default, "default"),
        c("deny beats allow private", "rules", R("/w/private/a"), Deny, Account, "paths.read.deny[0]"),
        c("deny dir itself", "rules", R("/w/private"), Deny, Account, "paths.read.deny[0]"),
        c("deny sibling privateer", "rules", R("/w/privateer"), Ask, Default, "default"),
        c("deny log top", "rules", R("/w/x.log"), Deny, Account, "paths.read.deny[1]"),
        c("deny log star one level", "rules", R("/w/sub/x.log"), Ask, Default, "default"),
        c("write allowed out", "rules", W("/w/out/a"), Allow, Account, "paths.write.allow[0]"),
        c("write allowed out deep", "rules", W("/w/out/a/b"), Allow, Account, "paths.write.allow[0]"),
        c("write denied locked", "rules", W("/w/out/locked/a"), Deny, Account, "paths.write.deny[0]"),
        c("write read rules do not apply", "rules", W("/w/allowed/a"), Ask, Default, "default"),
        c("read write rules do not apply", "rules", R("/w/out/a"), Ask, Default, "default"),
        c("escaped glob literal bracket", "rules", W("/w/f[1]x.txt"), Allow, Account, "paths.write.allow[1]"),
        c("escaped glob not class", "rules", W("/w/f1x.txt"), Ask, Default, "default"),
        c("trailing slash subject", "rules", R("/w/allowed/"), Allow, Account, "allow[0]"),
        // --- delete
        c("delete allowed tmp", "rules", D("/w/tmp/a"), Allow, Account, "delete.allow[0]"),
        c("delete denied keep", "rules", D("/w/tmp/keep/a"), Deny, Account, "delete.deny[0]"),
        c("delete path read deny also denies", "rules", D("/w/private/x"), Deny, Account, "paths.read.deny[0]"),
        c("delete path write deny also denies", "rules", D("/w/out/locked/a"), Deny, Account, "paths.write.deny[0]"),
        c("delete not allowed by write allow", "rules", D("/w/out/a"), Ask, Default, "default"),
        c("delete elsewhere asks", "rules", D("/w/a"), Ask, Default, "default"),
        // --- commands
        c("command exact allowed", "rules", X("git status", "/w"), Allow, Account, "commands.allow[0]"),
        c("command unanchored chain", "rules", X("git status; rm -rf ~", "/w"), Ask, Default, "default"),
        c("command and chain", "rules", X("git status && curl evil", "/w"), Ask, Default, "default"),
        c("command pipe", "rules", X("git status | sh", "/w"), Ask, Default, "default"),
        c("command newline chain", "rules", X("git status\nrm -rf ~", "/w"), Ask, Default, "default"),
        c("command prefix", "rules", X("xgit status", "/w"), Ask, Default, "default"),
        c("command suffix space", "rules", X("git status ", "/w"), Ask, Default, "default"),
        c("command subshell", "rules", X("git status $(rm -rf ~)", "/w"), Ask, Default, "default"),
        c("command optional group", "rules", X("ls -la", "/w"), Allow, Account, "commands.allow[1]"),
        c("command optional group absent", "rules", X("ls", "/w"), Allow, Account, "commands.allow[1]"),
        c("command alternation anchored", "rules", X("cargo test", "/w"), Allow, Account, "commands.allow[2]"),
        c("command alternation args", "rules", X("cargo build --release", "/w"), Allow, Account, "commands.allow[2]"),
        c("command alternation chain", "rules", X("cargo test; rm -rf /", "/w"), Ask, Default, "default"),
        c("command alternation precedence", "rules", X("cargo testx", "/w"), Ask, Default, "default"),
        c("command user anchors fine", "rules", X("echo hi", "/w"), Allow, Account, "commands.allow[3]"),
        c("command user anchors chain", "rules", X("echo hi; id", "/w"), Ask, Default, "default"),
        c("command deny rm", "rules", X("rm -rf /", "/w"), Deny, Account, "commands.deny[0]"),
        c("command deny sudo bare", "rules", X("sudo", "/w"), Deny, Account, "commands.deny[1]"),
        c("command deny anchored too", "rules", X("echo; rm -rf /", "/w"), Ask, Default, "default"),
        c("command empty denied", "rules", X("", "/w"), Deny, Default, "command"),
        c("command whitespace denied", "rules", X("  \t\n", "/w"), Deny, Default, "command"),
        c("command nul denied", "rules", X("ls\0-la", "/w"), Deny, Default, "command"),
        c("command relative cwd denied", "rules", X("ls", "w"), Deny, Default, "canonical"),
        c("command not confinable", "confined", X("ls /etc", "/etc"), Ask, Default, "default"),
        // --- tools
        c("tool client allowed", "rules", T("client__open_tab"), Allow, Account, "tools.allow[0]"),
        c("tool client shell denied", "rules", T("client__shell_exec"), Deny, Account, "tools.deny[0]"),
        c("tool pack get allowed", "rules", T("pack__github__get_issue"), Allow, Account, "tools.allow[1]"),
        c("pack tool allowed by glob", "rules", P("github__get_issue", false), Allow, Account, "tools.allow[2]"),
        c("pack tool denied by glob", "rules", P("github__delete_repo", true), Deny, Account, "tools.deny[1]"),
        c("pack tool without rule asks", "rules", P("jira__create", false), Ask, Default, "default"),
        c("read-only pack tool still asks here", "rules", P("jira__search", true), Ask, Default, "default"),
        c("no-packs denies a read-only pack tool", "no_packs", P("github__get_issue", true), Deny, Managed, "cap: no-packs"),
        c("no-packs leaves client tools", "no_packs", T("client__open"), Ask, Default, "default"),
        c("no-packs leaves writes", "no_packs", W("/w/a"), Allow, Account, "paths.write.allow[0]"),
        c("read-only cap denies a pack tool that writes", "read_only", P("github__create_issue", false), Deny, Managed, "cap: read-only"),
        c("read-only cap leaves a read-only pack tool", "read_only", P("github__get_issue", true), Ask, Default, "default"),
        c("tool pack create asks", "rules", T("pack__github__create_issue"), Ask, Default, "default"),
        c("tool other pack asks", "rules", T("pack__gitlab__get_issue"), Ask, Default, "default"),
        c("tool empty denied", "rules", T(""), Deny, Default, "tool"),
        // --- managed layer
        c("managed deny beats account allow", "managed", R("/w/allowed/secret/x"), Deny, Managed, "paths.read.deny[0]"),
        c("managed deny dir itself", "managed", R("/w/allowed/secret"), Deny, Managed, "deny[0]"),
        c("managed leaves other allows", "managed", R("/w/allowed/public"), Allow, Account, "allow[0]"),
        c("managed write deny", "managed", W("/etc/hosts"), Deny, Managed, "paths.write.deny[0]"),
        c("managed read deny also denies delete", "managed", D("/w/allowed/secret/a"), Deny, Managed, "paths.read.deny[0]"),
        c("managed command deny", "managed", X("curl http://x", "/w"), Deny, Managed, "commands.deny[0]"),
        c("managed tool deny", "managed", T("pack__evil__steal"), Deny, Managed, "tools.deny[0]"),
        c("managed account deny still", "managed", R("/w/private/a"), Deny, Account, "paths.read.deny[0]"),
        c("managed allow applies", "managed_allows", R("/etc/hosts"), Allow, Managed, "paths.read.allow[1]"),
        c("managed allow not over floor", "managed_allows", R("/etc/.ssh/k"), Deny, Floor, "floor:.ssh"),
        c("managed allow command", "managed_allows", X("curl x", "/w"), Allow, Managed, "commands.allow[0]"),
        c("managed allow tool", "managed_allows", T("pack__evil__x"), Allow, Managed, "tools.allow[0]"),
        // --- capability caps
        c("read-only read ok", "read_only", R("/w/a"), Allow, Account, "allow[0]"),
        c("read-only write denied", "read_only", W("/w/a"), Deny, Managed, "cap: read-only"),
        c("read-only delete denied", "read_only", D("/w/a"), Deny, Managed, "cap: read-only"),
        c("read-only exec denied", "read_only", X("ls", "/w"), Deny, Managed, "cap: read-only"),
        c("no-exec exec denied", "no_exec", X("ls", "/w"), Deny, Managed, "cap: no-exec"),
        c("no-exec write ok", "no_exec", W("/w/a"), Allow, Account, "paths.write.allow[0]"),
        c("no-exec delete ok", "no_exec", D("/w/a"), Allow, Account, "delete.allow[0]"),
        c("no-delete delete denied", "no_delete", D("/w/a"), Deny, Managed, "cap: no-delete"),
        c("no-delete write ok", "no_delete", W("/w/a"), Allow, Account, "paths.write.allow[0]"),
        c("no-delete exec ok", "no_delete", X("ls", "/w"), Allow, Account, "commands.allow[0]"),
        // --- project layer: can only tighten
        c("project deny applies", "project", R("/w/vendor/x"), Deny, Project, "paths.read.deny[0]"),
        c("project write deny applies", "project", W("/w/generated/a"), Deny, Project, "paths.write.deny[0]"),
        c("project allow ignored read", "project", R("/etc/hosts"), Deny, Project, "confine_to_workdir"),
        c("project allow ignored write", "project", W("/tmp/x"), Deny, Project, "confine_to_workdir"),
        c("project sandbox off ignored", "project", R("/w/.env"), Deny, Floor, "floor:.env*"),
        c("project confinement tightens", "project", R("/srv/x"), Deny, Project, "confine_to_workdir"),
        c("project account allow remains", "project", R("/w/src/a"), Allow, Account, "paths.read.allow[0]"),
        c("project command deny", "project", X("make deploy", "/w"), Deny, Project, "commands.deny[0]"),
        c("project command account allow", "project", X("make test", "/w"), Allow, Account, "commands.allow[0]"),
        c("project command allow ignored", "project", X("id", "/w"), Ask, Default, "default"),
        c("project tool allow ignored", "project", T("client__x"), Ask, Default, "default"),
        c("project policy file not writable", "project", W("/w/.glovebox/permissions.yaml"), Deny, Floor, "project policy"),
        c("project policy dir not deletable", "project", D("/w/.glovebox"), Deny, Floor, "project policy"),
        c("project policy file readable", "default", R("/w/.glovebox/permissions.yaml"), Allow, Account, "allow[0]"),
        // --- expiry
        c("expired allow no longer applies", "expiry", R("/w/old/a"), Ask, Default, "default"),
        c("future allow applies", "expiry", R("/w/new/a"), Allow, Account, "paths.read.allow[1]"),
        c("duration expired since file change", "expiry", R("/w/short/a"), Ask, Default, "default"),
        c("duration still live", "expiry", R("/w/long/a"), Allow, Account, "paths.read.allow[3]"),
        c("expired deny no longer applies", "expiry", R("/w/was-denied/a"), Ask, Default, "default"),
        c("expired command allow", "expiry", X("npm test", "/w"), Ask, Default, "default"),
        c("unexpiring rule unaffected", "expiry", W("/w/a"), Allow, Account, "paths.write.allow[0]"),
        // --- confinement
        c("confined inside allowed", "confined", R("/w/a"), Allow, Account, "paths.read.allow[0]"),
        c("confined outside denied", "confined", R("/etc/passwd"), Deny, Account, "confine_to_workdir"),
        c("confined sibling prefix denied", "confined", R("/wx/a"), Deny, Account, "confine_to_workdir"),
        c("confined explicit allow outside", "confined", R("/opt/tools/bin"), Allow, Account, "paths.read.allow[1]"),
        c("confined explicit deny inside", "confined", R("/w/secret/a"), Deny, Account, "paths.read.deny[0]"),
        c("confined write inside asks", "confined", W("/w/a"), Ask, Default, "default"),
        c("confined write outside denied", "confined", W("/tmp/a"), Deny, Account, "confine_to_workdir"),
        c("confined write explicit allow", "confined", W("/tmp/out/a"), Allow, Account, "paths.write.allow[0]"),
        c("confined delete inside asks", "confined", D("/w/a"), Ask, Default, "default"),
        c("confined delete outside denied", "confined", D("/tmp/a"), Deny, Account, "confine_to_workdir"),
        c("confined delete explicit allow", "confined", D("/tmp/out/a"), Allow, Account, "delete.allow[0]"),
        c("confined delete follows read deny", "confined", D("/w/secret/a"), Deny, Account, "paths.read.deny[0]"),
        c("confined floor still", "confined", R("/w/.aws/x"), Deny, Floor, "floor:.aws"),
        c("confined workdir itself", "confined", W("/w"), Ask, Default, "default"),
        c("confined root denied", "confined", R("/"), Deny, Account, "confine_to_workdir"),
        // --- sandbox off
        c("sandbox off floor allowed", "sandbox_off", R("/w/.ssh/id_rsa"), Allow, Account, "sandbox: false"),
        c("sandbox off account deny lifted", "sandbox_off", R("/w/x/a"), Allow, Account, "sandbox: false"),
        c("sandbox off write anywhere", "sandbox_off", W("/usr/bin/x"), Allow, Account, "sandbox: false"),
        c("sandbox off command", "sandbox_off", X("rm -rf /tmp/x", "/w"), Allow, Account, "sandbox: false"),
        c("sandbox off tool", "sandbox_off", T("client__shell"), Allow, Account, "sandbox: false"),
        c("sandbox off state", "sandbox_off", R("/state/audit.db"), Allow, Account, "sandbox: false"),
        c("sandbox off managed deny stays", "sandbox_off", R("/w/allowed/secret/a"), Deny, Managed, "paths.read.deny[0]"),
        c("sandbox off managed command deny", "sandbox_off", X("curl x", "/w"), Deny, Managed, "commands.deny[0]"),
        c("sandbox off managed tool deny", "sandbox_off", T("pack__evil__x"), Deny, Managed, "tools.deny[0]"),
        c("sandbox off cap stays", "sandbox_off_capped", X("ls", "/w"), Deny, Managed, "cap: no-exec"),
        c("sandbox off empty command still denied", "sandbox_off", X(" ", "/w"), Deny, Default, "command"),
        c("sandbox off relative still denied", "sandbox_off", R("a"), Deny, Default, "canonical"),
        // --- exact "always" rules
        c("exact brackets star", "exact", W("/w/a[1]*.txt"), Allow, Account, "paths.write.allow[0]"),
        c("exact not glob class", "exact", W("/w/a1x.txt"), Ask, Default, "default"),
        c("exact not star", "exact", W("/w/a[1]zz.txt"), Ask, Default, "default"),
        c("exact backslash", "exact", W("/w/back\\slash"), Allow, Account, "paths.write.allow[1]"),
        c("exact backslash not escape", "exact", W("/w/backslash"), Ask, Default, "default"),
        c("exact braces question", "exact", W("/w/{a,b}?"), Allow, Account, "paths.write.allow[2]"),
        c("exact braces not alternation", "exact", W("/w/a?"), Ask, Default, "default"),
        c("exact braces not alternation 2", "exact", W("/w/{a,b}x"), Ask, Default, "default"),
        c("exact delete rule", "exact", D("/w/old.txt"), Allow, Account, "delete.allow[0]"),
        c("exact delete not below", "exact", D("/w/old.txt/x"), Ask, Default, "default"),
        c("exact command", "exact", X("git status", "/w"), Allow, Account, "commands.allow[0]"),
        c("exact command no chain", "exact", X("git status; id", "/w"), Ask, Default, "default"),
        c("exact command metachars", "exact", X("echo $(whoami) | tr a-z A-Z", "/w"), Allow, Account, "commands.allow[1]"),
        c("exact command metachars differ", "exact", X("echo $(whoami) | tr a-z B-Z", "/w"), Ask, Default, "default"),
        c("exact tool rule matches its name", "exact", T("client__a*"), Allow, Account, "tools.allow[0]"),
        c("exact tool rule is not a glob", "exact", T("client__ab"), Ask, Default, "default"),
        c("exact keeps hand rules", "exact", R("/w/a"), Allow, Account, "paths.read.allow[0]"),
        // --- files that make later commands run code: writes and deletes always ask
        c("code-carrying write of .git/config asks despite an allow", "writes", W("/w/.git/config"), Ask, Default, "code-carrying:.git/config"),
        c("code-carrying delete of a git hook asks despite an allow", "writes", D("/w/.git/hooks/pre-commit"), Ask, Default, "code-carrying:.git/hooks"),
        c("code-carrying write of a new hook asks", "writes", W("/w/.git/hooks/post-checkout"), Ask, Default, "code-carrying:.git/hooks"),
        c("code-carrying write of a gitdir pointer asks", "writes", W("/w/sub/.git"), Ask, Default, "code-carrying:.git"),
        c("code-carrying delete of the git directory asks", "writes", D("/w/.git"), Ask, Default, "code-carrying:.git"),
        c("code-carrying write of info attributes asks", "writes", W("/w/.git/info/attributes"), Ask, Default, "code-carrying:.git"),
        c("code-carrying write into a submodule's git directory asks", "writes", W("/w/.git/modules/lib/config"), Ask, Default, "code-carrying:.git/config"),
        c("code-carrying matches case-insensitively", "writes", W("/w/.GIT/Config"), Ask, Default, "code-carrying:.git/config"),
        c("code-carrying matches look-alike letters", "writes", W("/w/．git/hooks/pre-push"), Ask, Default, "code-carrying:.git/hooks"),
        c("code-carrying write of a shell startup file asks", "writes", W("/home/u/.bashrc"), Ask, Default, "code-carrying:.bashrc"),
        c("code-carrying write of .profile asks", "writes", W("/home/u/.profile"), Ask, Default, "code-carrying:.profile"),
        c("code-carrying write of the user's gitconfig asks", "writes", W("/home/u/.gitconfig"), Ask, Default, "code-carrying:.gitconfig"),
        c("code-carrying write of the user's xdg git config asks", "writes", W("/home/u/.config/git/config"), Ask, Default, "code-carrying:.config/git"),
        c("code-carrying write of an ordinary file is allowed", "writes", W("/w/notes.txt"), Allow, Account, "paths.write.allow[0]"),
        c("code-carrying write of .gitignore is allowed", "writes", W("/w/.gitignore"), Allow, Account, "paths.write.allow[0]"),
        c("code-carrying delete of an ordinary file is allowed", "writes", D("/w/notes.txt"), Allow, Account, "delete.allow[0]"),
        c("code-carrying read of .git/config is allowed", "writes", R("/w/.git/config"), Allow, Account, "paths.read.allow[0]"),
        c("code-carrying does not lift a deny", "writes", W("/w/locked/.git/config"), Deny, Account, "paths.write.deny[0]"),
        c("code-carrying does not lift the floor", "writes", W("/w/.envrc"), Deny, Floor, "floor:.env*"),
        c("code-carrying names itself when nothing allowed", "default", W("/w/.git/config"), Ask, Default, "code-carrying:.git/config"),
        c("code-carrying still asks with the sandbox off", "sandbox_off", W("/w/.git/config"), Ask, Default, "code-carrying:.git/config"),
        c("code-carrying with the sandbox off keeps managed denies", "sandbox_off", W("/etc/.git/config"), Deny, Managed, "paths.write.deny[0]"),
        c("code-carrying asks despite a managed allow", "managed_allows", W("/etc/.git/config"), Ask, Default, "code-carrying:.git/config"),
        c("code-carrying capped read-only still denies", "read_only", W("/w/.git/config"), Deny, Managed, "cap: read-only"),
    ]
}

#[test]
fn a_code_carrying_ask_warns_the_approver_and_says_what_it_overrides() {
    let p = Policy::compile_layers(&inputs(WRITES)).unwrap();
    let v = p.decide_at(glovebox_policy::Domain::Write, "/w/.git/config", Some(NOW));
    assert_eq!(v.warnings.len(), 1, "{v:?}");
    assert!(
        v.warnings[0].contains("/w/.git/config") && v.warnings[0].contains("run code"),
        "{v:?}"
    );
    assert!(
        v.reason
            .starts_with("changing this file makes later commands run code")
            && v.reason.contains("paths.write.allow[0]: ./**"),
        "{}",
        v.reason
    );
    // nothing to warn about on an ordinary file, or on a read
    let ok = p.decide_at(glovebox_policy::Domain::Write, "/w/notes.txt", Some(NOW));
    assert!(ok.warnings.is_empty());
    let read = p.decide_at(glovebox_policy::Domain::Read, "/w/.git/config", Some(NOW));
    assert!(read.warnings.is_empty());
}

#[test]
fn no_clock_is_conservative() {
    let p = Policy::compile_layers(&inputs(EXPIRY)).unwrap();
    // Without a clock an expiring allow does not apply and an expiring deny does.
    assert_eq!(
        p.decide_at(glovebox_policy::Domain::Read, "/w/new/a", None)
            .decision,
        Ask
    );
    assert_eq!(
        p.decide_at(glovebox_policy::Domain::Read, "/w/was-denied/a", None)
            .decision,
        Deny
    );
    // A duration expiry still live at NOW: allowed with the clock, not without it.
    let long = |now| p.decide_at(glovebox_policy::Domain::Read, "/w/long/a", now);
    assert_eq!(
        (long(Some(NOW)).decision, long(None).decision),
        (Allow, Ask)
    );
}

#[test]
fn managed_files_scope_by_account() {
    let raw = RawPolicy::parse("accounts: [alice]\ncap: [no-exec]\n").unwrap();
    assert!(glovebox_policy::applies_to(&raw, "alice"));
    assert!(!glovebox_policy::applies_to(&raw, "bob"));
    assert!(glovebox_policy::applies_to(&RawPolicy::default(), "bob"));
}

#[test]
fn caps_and_accounts_are_refused_in_an_account_file() {
    let err = Policy::compile_layers(&inputs("cap: [read-only]\n")).unwrap_err();
    assert!(err.to_string().contains("only managed"), "{err}");
}

#[test]
fn warnings_report_rules_that_cannot_do_what_they_say() {
    let mut i = inputs(
        "paths:\n  read:\n    allow: ['**/*.rs', '/home/u/.ssh/**', './ok/**']\ntools:\n  allow: ['client.open']\n",
    );
    i.project = Some(source("project.yaml", PROJECT, 0));
    let p = Policy::compile_layers(&i).unwrap();
    let w = p.warnings().join("\n");
    assert!(w.contains("allow[0]: **/*.rs: relative"), "{w}");
    assert!(
        w.contains("allow[1]: /home/u/.ssh/**: never applies"),
        "{w}"
    );
    assert!(!w.contains("./ok/**"), "{w}");
    assert!(w.contains("tools.allow[0]: client.open: tool names"), "{w}");
    assert!(
        w.contains("paths.write.allow[0]: /** is ignored: a project file can only tighten"),
        "{w}"
    );
    assert!(w.contains("cannot turn the sandbox off"), "{w}");
}

#[test]
fn errors_name_the_file_the_line_and_the_rule() {
    let err = RawPolicy::parse("paths:\n  read:\n    alow: []\n").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("line 3") && msg.contains("alow"), "{msg}");
    for (yaml, needle) in [
        (
            "paths:\n  write:\n    deny: ['[unclosed']\n",
            "paths.write.deny[0]: [unclosed",
        ),
        ("paths:\n  read:\n    allow: ['~/x']\n", "`~`"),
        ("commands:\n  allow: ['(unclosed']\n", "commands.allow[0]"),
        ("commands:\n  allow: ['']\n", "empty regex"),
        (
            "paths:\n  read:\n    allow: [{rule: x, expires: soon}]\n",
            "RFC 3339",
        ),
    ] {
        let raw = RawPolicy::parse(yaml).unwrap();
        let err = Policy::compile_layers(&inputs_raw(raw))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("account.yaml") && err.contains(needle),
            "{yaml}: {err}"
        );
    }
}

#[test]
fn an_edit_that_would_not_compile_is_caught_before_it_is_written() {
    let check = |text: &str| {
        glovebox_policy::check_account_text("account.yaml", text, WORKDIR, NOW)
            .map_err(|e| e.to_string())
    };
    // The text edits only parse; compiling is what catches a bad pattern.
    for (section, pattern, needle) in [
        (Section::Commands, "(", "commands.allow[1]: ("),
        (Section::PathsRead, "a[", "paths.read.allow[1]: a["),
        (Section::PathsWrite, "./b[", "paths.write.allow[0]: ./b["),
        (Section::Delete, "", "empty glob"),
        (Section::Tools, "x[", "tools.allow[0]: x["),
    ] {
        let base = "paths:\n  read:\n    allow: ['./**']\ncommands:\n  allow: ['ls']\n";
        let rule = RawRule::Pattern(pattern.to_owned());
        let edited = edit::add_rule(base, section, Kind::Allow, &rule)
            .unwrap()
            .unwrap();
        let err = check(&edited.text).unwrap_err();
        assert!(
            err.contains("account.yaml") && err.contains(needle),
            "{err}"
        );
        assert!(check(base).is_ok());
    }
    let expiring = RawRule::new("./x/**".to_owned(), Some("soon".to_owned()));
    let edited = edit::add_rule(DEFAULT, Section::PathsRead, Kind::Allow, &expiring)
        .unwrap()
        .unwrap();
    assert!(check(&edited.text).unwrap_err().contains("RFC 3339"));
    assert!(
        check("cap: [read-only]\n")
            .unwrap_err()
            .contains("only managed")
    );
    assert!(check("paths: [\n").is_err());
    // what the gate writes itself compiles
    for text in [
        DEFAULT.to_owned(),
        exact_fixture(),
        edit::set_flag(DEFAULT, "sandbox", false).unwrap().text,
        edit::reset(RULES).unwrap(),
        RawPolicy::default_for_new_account().to_yaml().unwrap(),
    ] {
        assert_eq!(check(&text), Ok(()), "{text}");
    }
}

fn inputs_raw(raw: RawPolicy) -> Inputs {
    let mut i = inputs("");
    i.account.raw = raw;
    i
}

#[test]
fn the_default_file_round_trips() {
    let raw = RawPolicy::default_for_new_account();
    let text = raw.to_yaml().unwrap();
    assert!(text.starts_with("# glovebox permissions"));
    assert_eq!(RawPolicy::parse(&text).unwrap(), raw);
}

#[test]
fn a_yaml_alias_bomb_is_refused_quickly() {
    // One rule that is a list of lists, each repeating the one before nine times: 9^9 strings if
    // every alias were expanded while the rule is buffered to try its variants.
    let mut levels = vec![format!("&l0 [{}]", ["\"x\""; 9].join(","))];
    for i in 1..10 {
        levels.push(format!(
            "&l{i} [{}]",
            vec![format!("*l{}", i - 1); 9].join(",")
        ));
    }
    let yaml = format!("commands:\n  allow:\n    - [{}]\n", levels.join(", "));
    let started = std::time::Instant::now();
    let err = RawPolicy::parse(&yaml).unwrap_err().to_string();
    assert!(err.contains("repetition limit"), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "took {:?}: {err}",
        started.elapsed()
    );
}

#[test]
fn a_regex_that_would_compile_huge_is_an_error_naming_the_rule() {
    let raw = RawPolicy::parse("commands:\n  allow: ['ok', '((a{100}){100}){100}']\n").unwrap();
    let err = Policy::compile_layers(&inputs_raw(raw))
        .unwrap_err()
        .to_string();
    assert!(err.contains("commands.allow[1]"), "{err}");
}

#[test]
fn a_backtracking_regex_decides_in_linear_time() {
    let p = Policy::compile_layers(&inputs(
        "commands:\n  allow: ['(a+)+b', '(x|x)*y', '(.*a){12}']\n",
    ))
    .unwrap();
    let subject = "a".repeat(20_000) + "!";
    let started = std::time::Instant::now();
    let v = p.decide_command_at(&subject, "/w", Some(NOW));
    assert_eq!(v.decision, Ask);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn ten_thousand_rules_compile_and_decide() {
    let mut yaml = String::from("paths:\n  read:\n    deny:\n");
    for i in 0..10_000 {
        yaml.push_str(&format!("      - './d{i}/**'\n"));
    }
    yaml.push_str("commands:\n  allow:\n");
    for i in 0..2_000 {
        yaml.push_str(&format!("    - 'tool{i} --flag( [a-z]+)*'\n"));
    }
    let p = Policy::compile_layers(&inputs(&yaml)).unwrap();
    let v = p.decide_at(glovebox_policy::Domain::Read, "/w/d9999/x", Some(NOW));
    assert_eq!(
        (v.decision, v.rule.as_str()),
        (Deny, "paths.read.deny[9999]: ./d9999/**")
    );
    let v = p.decide_command_at("tool1999 --flag a b", "/w", Some(NOW));
    assert_eq!((v.decision, v.layer), (Allow, Account));
}

/// A path outside every root can never be acted on (Landlock refuses it after an approval):
/// denied at once, naming the roots, whatever the rules and the sandbox switch say.
#[test]
fn a_path_outside_every_root_is_denied_naming_the_roots() {
    let mut i = inputs("sandbox: false\npaths:\n  read:\n    allow: ['/**']\n");
    i.roots = vec!["/w".to_owned(), "/data/".to_owned()];
    let p = Policy::compile_layers(&i).unwrap();
    for (domain, path) in [
        (glovebox_policy::Domain::Read, "/etc/shadow"),
        (glovebox_policy::Domain::Write, "/wx/a"),
        (glovebox_policy::Domain::Delete, "/"),
    ] {
        let v = p.decide_at(domain, path, Some(NOW));
        assert_eq!(v.decision, Deny, "{path}");
        assert_eq!(v.rule, "roots", "{path}");
        assert!(
            v.reason.contains("outside the account's roots (/w, /data)"),
            "{path}: {}",
            v.reason
        );
    }
    // the secret floor still names itself
    let mut on = inputs("");
    on.roots = vec!["/w".to_owned()];
    let v = Policy::compile_layers(&on).unwrap().decide_at(
        glovebox_policy::Domain::Read,
        "/home/u/.ssh/id_rsa",
        Some(NOW),
    );
    assert_eq!((v.decision, v.rule.as_str()), (Deny, "floor:.ssh"), "{v:?}");
    for path in ["/w", "/w/a", "/data/x/y"] {
        let v = p.decide_at(glovebox_policy::Domain::Read, path, Some(NOW));
        assert_ne!(v.rule, "roots", "{path}");
    }
}
