//! File and socket modes: the state directory and its keys private to their owner, the audit
//! database readable by the audit group (system mode), sockets owned by the service that listens
//! and connectable only by its intended peers. [`plan`] says what each path must be; [`check`]
//! compares one path's facts with that; both are pure.

use std::path::{Path, PathBuf};

use glovebox_config::StateDir;

use super::finding::{Finding, Level};

/// What is at a path (not following a final symlink).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Missing,
    File,
    Dir,
    Symlink,
    Socket,
    Other,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Kind::Missing => "nothing",
            Kind::File => "a regular file",
            Kind::Dir => "a directory",
            Kind::Symlink => "a symlink",
            Kind::Socket => "a socket",
            Kind::Other => "a special file",
        }
    }
    fn check_name(self) -> &'static str {
        match self {
            Kind::Dir => "dir",
            Kind::Socket => "socket",
            _ => "file",
        }
    }
}

/// The facts of one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    pub kind: Kind,
    /// Permission bits (`& 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Facts {
    pub const MISSING: Facts = Facts {
        kind: Kind::Missing,
        mode: 0,
        uid: 0,
        gid: 0,
    };

    /// Reads the facts of `path` (without following a final symlink).
    pub fn of(path: &Path) -> Facts {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return Facts::MISSING;
        };
        let t = meta.file_type();
        let kind = if t.is_symlink() {
            Kind::Symlink
        } else if t.is_dir() {
            Kind::Dir
        } else if t.is_file() {
            Kind::File
        } else if t.is_socket() {
            Kind::Socket
        } else {
            Kind::Other
        };
        Facts {
            kind,
            mode: meta.mode() & 0o7777,
            uid: meta.uid(),
            gid: meta.gid(),
        }
    }
}

/// A user or group: its id and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    pub id: u32,
    pub name: String,
}

impl Who {
    pub fn new(id: u32, name: impl Into<String>) -> Who {
        Who {
            id,
            name: name.into(),
        }
    }
}

/// What one path must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub kind: Kind,
    /// Who may own it (the first is the one a fix names); empty: anyone.
    pub owners: Vec<Who>,
    /// The group it must have, if any.
    pub group: Option<Who>,
    /// The permission bits that may be set.
    pub allowed: u32,
    /// The permission bits that must be set.
    pub required: u32,
    /// How it counts when absent, and why (the fix, when not OK).
    pub missing: (Level, String),
}

impl Rule {
    /// A file or directory private to `owner` (0600 / 0700), `missing` when absent.
    pub fn private(kind: Kind, owner: &Who, missing: (Level, &str)) -> Rule {
        Rule {
            kind,
            owners: vec![owner.clone()],
            group: None,
            allowed: if kind == Kind::Dir { 0o700 } else { 0o600 },
            required: 0,
            missing: (missing.0, missing.1.to_owned()),
        }
    }
    fn allowing(mut self, bits: u32) -> Rule {
        self.allowed |= bits;
        self
    }
    fn owned_by_any(mut self, more: &[Who]) -> Rule {
        for w in more {
            if !self.owners.contains(w) {
                self.owners.push(w.clone());
            }
        }
        self
    }
}

/// Who gets which of `bits` (group and other permissions), in words.
fn grants(bits: u32) -> String {
    let mut out = Vec::new();
    for (shift, who) in [(3, "group"), (0, "others")] {
        let b = (bits >> shift) & 0o7;
        let mut what = Vec::new();
        if b & 4 != 0 {
            what.push("read");
        }
        if b & 2 != 0 {
            what.push("write");
        }
        if b & 1 != 0 {
            what.push("enter/execute");
        }
        if !what.is_empty() {
            out.push(format!("{who} may {}", what.join(" and ")));
        }
    }
    if bits & 0o7000 != 0 {
        out.push("setuid/setgid/sticky bits are set".to_owned());
    }
    out.join(", ")
}

/// What is wrong with a file's mode under `rule`, if anything (the bits it grants beyond what
/// is allowed, and those it lacks), and the mode it should have.
fn mode_problem(facts: &Facts, rule: &Rule) -> Option<(String, u32)> {
    let extra = facts.mode & !rule.allowed;
    let lacking = rule.required & !facts.mode;
    if extra == 0 && lacking == 0 {
        return None;
    }
    let wanted = (facts.mode & rule.allowed) | rule.required;
    let mut why = format!("mode {:04o}", facts.mode);
    if extra != 0 {
        why.push_str(&format!(" ({})", grants(extra)));
    }
    if lacking != 0 {
        why.push_str(&format!(
            " (lacks {:04o}: {})",
            lacking,
            grants(lacking).replace("may", "must be able to")
        ));
    }
    why.push_str(&format!("; it must be at most {:04o}", rule.allowed));
    if rule.required != 0 {
        why.push_str(&format!(" and at least {:04o}", rule.required));
    }
    Some((why, wanted))
}

/// Compares `facts` of `path` with `rule`.
pub fn check(path: &Path, facts: &Facts, rule: &Rule) -> Finding {
    let name = format!("{} {}", rule.kind.check_name(), path.display());
    let shown = path.display();
    if facts.kind == Kind::Missing {
        let (level, why) = &rule.missing;
        return match level {
            Level::Ok => Finding::ok(name, format!("absent ({why})")),
            _ => Finding {
                level: *level,
                check: name,
                finding: "absent".to_owned(),
                fix: Some(why.clone()),
            },
        };
    }
    if facts.kind != rule.kind {
        return Finding::fail(
            name,
            format!("is {}; it must be {}", facts.kind.noun(), rule.kind.noun()),
            format!(
                "remove {shown} (`rm {shown}`) and let glovebox make it again, or put {} there",
                rule.kind.noun()
            ),
        );
    }
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    if let Some(first) = rule.owners.first()
        && !rule.owners.iter().any(|o| o.id == facts.uid)
    {
        let names: Vec<&str> = rule.owners.iter().map(|o| o.name.as_str()).collect();
        problems.push(format!(
            "owned by uid {}, not {}",
            facts.uid,
            names.join(" or ")
        ));
        fixes.push(format!("chown {} {shown}", first.name));
    }
    if let Some(group) = &rule.group
        && group.id != facts.gid
    {
        problems.push(format!("group is gid {}, not {}", facts.gid, group.name));
        fixes.push(format!("chgrp {} {shown}", group.name));
    }
    if let Some((why, wanted)) = mode_problem(facts, rule) {
        problems.push(why);
        fixes.push(format!("chmod {wanted:o} {shown}"));
    }
    if problems.is_empty() {
        let owner = rule
            .owners
            .iter()
            .find(|o| o.id == facts.uid)
            .map(|o| o.name.clone())
            .unwrap_or_else(|| format!("uid {}", facts.uid));
        let group = rule
            .group
            .as_ref()
            .map(|g| format!(" group {}", g.name))
            .unwrap_or_default();
        return Finding::ok(name, format!("{:04o} {owner}{group}", facts.mode));
    }
    Finding::fail(name, problems.join("; "), fixes.join(" && "))
}

/// One account as the file checks see it: its id and the user its executor runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountFacts {
    pub id: String,
    /// The executor's user (the state's owner when the account has no `run_as`).
    pub runs_as: Who,
    /// Whether the account's entry holds an agent token's hash: then the token file may be
    /// gone (handed to whoever uses it) and the account still works.
    pub has_agent_token: bool,
}

/// What the file checks need to know.
#[derive(Debug, Clone)]
pub struct Layout {
    pub system: bool,
    pub state: StateDir,
    /// Where the sockets are: `<state>/run` in user mode, `/run/glovebox` in system mode.
    pub runtime: PathBuf,
    /// Who owns the state: the user in user mode, the gate's user in system mode.
    pub owner: Who,
    /// The audit group (system mode).
    pub audit_group: Option<Who>,
    /// Users that may own sockets (system mode): root, the service users, each `run_as`.
    pub socket_owners: Vec<Who>,
    /// The broker's user and its primary group (system mode).
    pub broker: Option<(Who, Who)>,
    pub accounts: Vec<AccountFacts>,
}

/// What each fixed path of `layout` must be. Sockets of a system-mode runtime dir are listed by
/// [`runtime_rule`] as they are found.
pub fn plan(layout: &Layout) -> Vec<(PathBuf, Rule)> {
    let mut plan = if layout.system {
        system_dirs(layout)
    } else {
        user_dirs_and_sockets(layout)
    };
    plan.extend(keys_and_audit(layout));
    plan.extend(account_files(layout));
    plan
}

/// What is missing while glovebox does not run.
const NOT_RUNNING: (Level, &str) = (Level::Ok, "glovebox is not running");
/// What is made when first needed.
const OPTIONAL: (Level, &str) = (Level::Ok, "made when first needed");

/// What is made when glovebox first starts, and how to start it.
fn made_at_start(layout: &Layout) -> (Level, &'static str) {
    if layout.system {
        (
            Level::Warn,
            "made when glovebox starts: systemctl start glovebox",
        )
    } else {
        (Level::Warn, "made by the first `glovebox up`")
    }
}

/// System mode: the state and runtime directories, made by the package and tmpfiles.d (root
/// 0755); the supervisor sets everything inside.
fn system_dirs(layout: &Layout) -> Vec<(PathBuf, Rule)> {
    let owner = &layout.owner;
    let system_dir = |missing: &str| Rule {
        kind: Kind::Dir,
        owners: vec![Who::new(0, "root"), owner.clone()],
        group: None,
        allowed: 0o755,
        required: 0,
        missing: (
            Level::Fail,
            format!(
                "{missing}: systemd-tmpfiles --create /usr/lib/tmpfiles.d/glovebox.conf \
                 (or reinstall the glovebox package)"
            ),
        ),
    };
    vec![
        // The gate's, entered by the audit group only; setgid, so the gate's new files (audit.db's
        // -wal and -shm) take that group.
        (
            layout.state.root().to_owned(),
            Rule {
                kind: Kind::Dir,
                owners: vec![owner.clone()],
                group: layout.audit_group.clone(),
                allowed: 0o2710,
                required: 0o2000,
                missing: system_dir("the package makes it").missing,
            },
        ),
        (layout.runtime.clone(), system_dir("made at boot")),
    ]
}

/// User mode: the state and run directories, the services' sockets and the broker's address.
fn user_dirs_and_sockets(layout: &Layout) -> Vec<(PathBuf, Rule)> {
    let state = &layout.state;
    let owner = &layout.owner;
    // Executors running as another user must traverse (not list) the state and run dirs.
    let drops = layout.accounts.iter().any(|a| a.runs_as.id != owner.id);
    let traverse = if drops { 0o011 } else { 0 };
    let mut plan = vec![
        (
            state.root().to_owned(),
            Rule::private(
                Kind::Dir,
                owner,
                (
                    Level::Fail,
                    "run `glovebox up` (it makes the state directory)",
                ),
            )
            .allowing(traverse),
        ),
        (
            layout.runtime.clone(),
            Rule::private(Kind::Dir, owner, NOT_RUNNING).allowing(traverse),
        ),
    ];
    for socket in [state.gate_socket(), state.admin_socket()] {
        plan.push((socket, Rule::private(Kind::Socket, owner, NOT_RUNNING)));
    }
    plan.push((
        state.audit_socket(),
        Rule::private(Kind::Socket, owner, NOT_RUNNING).allowing(0o066),
    ));
    plan.push((
        state.broker_url_file(),
        Rule::private(Kind::File, owner, NOT_RUNNING),
    ));
    if let Some(socket) = state.agent_socket() {
        plan.push((socket, Rule::private(Kind::Socket, owner, NOT_RUNNING)));
    }
    for account in &layout.accounts {
        let runs_as = &account.runs_as;
        plan.push((
            state.executor_run_dir(&account.id),
            Rule::private(Kind::Dir, runs_as, NOT_RUNNING),
        ));
        for socket in [
            state.executor_socket(&account.id),
            state.packs_socket(&account.id),
        ] {
            plan.push((socket, Rule::private(Kind::Socket, runs_as, NOT_RUNNING)));
        }
    }
    plan
}

/// The keys, the config (user mode) and the audit database: private in user mode; the audit
/// readable by the audit group in system mode.
fn keys_and_audit(layout: &Layout) -> Vec<(PathBuf, Rule)> {
    let state = &layout.state;
    let owner = &layout.owner;
    let made = made_at_start(layout);
    let mut plan = Vec::new();
    for (path, missing) in [
        (state.ticket_key(), made),
        (state.control_key(), made),
        (state.audit_key(), made),
        (state.audit_head(), OPTIONAL),
        (state.secrets_key(), OPTIONAL),
    ] {
        plan.push((path, Rule::private(Kind::File, owner, missing)));
    }
    if !layout.system {
        plan.push((state.config_file(), Rule::private(Kind::File, owner, made)));
    }
    let audit = |missing: (Level, &str), required: u32| match &layout.audit_group {
        Some(group) if layout.system => Rule {
            kind: Kind::File,
            owners: vec![owner.clone()],
            group: Some(group.clone()),
            allowed: 0o640,
            required,
            missing: (missing.0, missing.1.to_owned()),
        },
        _ => Rule::private(Kind::File, owner, missing),
    };
    plan.push((state.audit_db(), audit(made, 0o640)));
    for suffix in ["-wal", "-shm"] {
        let mut path = state.audit_db().into_os_string();
        path.push(suffix);
        plan.push((PathBuf::from(path), audit(OPTIONAL, 0)));
    }
    plan
}

/// The accounts directory and each account's files: its tokens (in system mode one may be
/// handed to the account's user), its policy, packs, trust and secrets.
fn account_files(layout: &Layout) -> Vec<(PathBuf, Rule)> {
    let state = &layout.state;
    let owner = &layout.owner;
    let made = made_at_start(layout);
    let accounts_missing = if layout.accounts.is_empty() {
        (Level::Ok, "made when the first account is added")
    } else {
        made
    };
    let mut plan = vec![(
        state.root().join("accounts"),
        Rule::private(Kind::Dir, owner, accounts_missing),
    )];
    for account in &layout.accounts {
        let id = &account.id;
        let holders = if layout.system {
            vec![account.runs_as.clone()]
        } else {
            Vec::new()
        };
        plan.push((state.account_dir(id), Rule::private(Kind::Dir, owner, made)));
        let rotate = format!(
            "no agent token yet: glovebox token rotate --account {id}{}",
            if layout.system { " --system" } else { "" }
        );
        let token_missing = if account.has_agent_token {
            (
                Level::Ok,
                "its hash is in the account's entry: the token was handed out",
            )
        } else {
            (Level::Warn, rotate.as_str())
        };
        for (path, missing) in [
            (state.token_file(id), token_missing),
            (state.approver_token_file(id), OPTIONAL),
        ] {
            plan.push((
                path,
                Rule::private(Kind::File, owner, missing).owned_by_any(&holders),
            ));
        }
        for path in [
            state.permissions_file(id),
            state.mcp_json_file(id),
            state.trusted_packs_file(id),
            state.pack_secrets_file(id),
        ] {
            plan.push((path, Rule::private(Kind::File, owner, OPTIONAL)));
        }
    }
    plan
}

/// A system-mode state directory as the package left it (root's, 0755, no audit yet): glovebox
/// sets its owner and mode when it first starts, so this is a WARN with that fix, not a FAIL.
pub fn not_set_up_yet(layout: &Layout, facts: &Facts, audit_db_present: bool) -> Option<Finding> {
    let packaged = layout.system
        && facts.kind == Kind::Dir
        && facts.uid == 0
        && facts.mode & 0o7777 == 0o755
        && !audit_db_present;
    packaged.then(|| {
        Finding::warn(
            format!("dir {}", layout.state.root().display()),
            "as the package made it (root 0755): glovebox sets up its state when it first starts",
            "systemctl start glovebox",
        )
    })
}

/// What an entry of a system-mode runtime dir must be, by where it is (`rel`, relative to the
/// runtime dir) — the table `glovebox up --system` sets (see `supervisor/src/system.rs`): each service's
/// sockets in a directory of its own whose owner and group let exactly its peers in, so the
/// sockets themselves may be 0666 (the kernel's peer uid and the handshake authenticate behind
/// it); the administrators' socket is root's alone. Anything else found there is held to its
/// owner and group.
pub fn runtime_rule(layout: &Layout, rel: &Path, kind: Kind) -> Rule {
    let root = Who::new(0, "root");
    let gate = layout.owner.clone();
    let (broker, broker_group) = match layout.broker.clone() {
        Some((user, group)) => (Some(user), Some(group)),
        None => (None, None),
    };
    let rule = |owners: Vec<Who>, group: Option<Who>, allowed: u32| Rule {
        kind,
        owners,
        group,
        allowed,
        required: 0,
        missing: (Level::Ok, "gone".to_owned()),
    };
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let account = |dir: &str| {
        dir.strip_prefix("exec-")
            .and_then(|id| layout.accounts.iter().find(|a| a.id == id))
            .map(|a| a.runs_as.clone())
    };
    match (
        parts
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice(),
        kind,
    ) {
        (["gate"], Kind::Dir) => rule(vec![gate], broker_group, 0o750),
        (["admin"], Kind::Dir) => rule(vec![gate], Some(root), 0o700),
        (["audit"], Kind::Dir) => rule(vec![gate], None, 0o755),
        (["broker"], Kind::Dir) => rule(broker.into_iter().collect(), None, 0o755),
        ([dir], Kind::Dir) if account(dir).is_some() => {
            rule(account(dir).into_iter().collect(), broker_group, 0o750)
        }
        (["admin", _], Kind::Socket) => rule(vec![gate], None, 0o600),
        (["gate" | "audit", _], Kind::Socket) => rule(vec![gate], None, 0o666),
        (["broker", _], Kind::Socket) => rule(broker.into_iter().collect(), None, 0o666),
        ([dir, _], Kind::Socket) if account(dir).is_some() => {
            rule(account(dir).into_iter().collect(), None, 0o666)
        }
        _ => rule(
            layout.socket_owners.clone(),
            None,
            if kind == Kind::Dir { 0o750 } else { 0o660 },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(kind: Kind, mode: u32, uid: u32, gid: u32) -> Facts {
        Facts {
            kind,
            mode,
            uid,
            gid,
        }
    }

    #[test]
    fn a_private_file_is_checked_for_kind_owner_and_mode() {
        let alice = Who::new(1000, "alice");
        let rule = Rule::private(Kind::File, &alice, (Level::Warn, "start it"));
        let key = Path::new("/s/ticket.key");
        let table: &[(Facts, Level, &str, Option<&str>)] = &[
            (
                facts(Kind::File, 0o600, 1000, 1000),
                Level::Ok,
                "0600 alice",
                None,
            ),
            (
                facts(Kind::File, 0o400, 1000, 1000),
                Level::Ok,
                "0400 alice",
                None,
            ),
            (
                facts(Kind::File, 0o644, 1000, 1000),
                Level::Fail,
                "mode 0644 (group may read, others may read); it must be at most 0600",
                Some("chmod 600 /s/ticket.key"),
            ),
            (
                facts(Kind::File, 0o666, 1001, 1000),
                Level::Fail,
                "owned by uid 1001, not alice; mode 0666 (group may read and write, others may read and write); it must be at most 0600",
                Some("chown alice /s/ticket.key && chmod 600 /s/ticket.key"),
            ),
            (
                facts(Kind::Symlink, 0o777, 1000, 1000),
                Level::Fail,
                "is a symlink; it must be a regular file",
                Some(
                    "remove /s/ticket.key (`rm /s/ticket.key`) and let glovebox make it again, or put a regular file there",
                ),
            ),
            (Facts::MISSING, Level::Warn, "absent", Some("start it")),
            (
                facts(Kind::File, 0o4600, 1000, 1000),
                Level::Fail,
                "mode 4600 (setuid/setgid/sticky bits are set); it must be at most 0600",
                Some("chmod 600 /s/ticket.key"),
            ),
        ];
        for (f, level, finding, fix) in table {
            let got = check(key, f, &rule);
            assert_eq!(got.check, "file /s/ticket.key");
            assert_eq!(
                (got.level, got.finding.as_str(), got.fix.as_deref()),
                (*level, *finding, *fix),
                "{f:?}"
            );
        }
        let optional = Rule::private(Kind::File, &alice, (Level::Ok, "made when needed"));
        let got = check(key, &Facts::MISSING, &optional);
        assert_eq!(
            got.to_string(),
            "OK file /s/ticket.key: absent (made when needed)"
        );
    }

    #[test]
    fn the_audit_db_in_system_mode_is_0640_group_audit() {
        let layout = layout(true);
        let db = layout.state.audit_db();
        let rule = plan(&layout).into_iter().find(|(p, _)| *p == db).unwrap().1;
        let table = [
            (facts(Kind::File, 0o640, 998, 997), Level::Ok, None),
            (
                facts(Kind::File, 0o600, 998, 997),
                Level::Fail,
                Some("chmod 640 /var/lib/glovebox/audit.db"),
            ),
            (
                facts(Kind::File, 0o644, 998, 997),
                Level::Fail,
                Some("chmod 640 /var/lib/glovebox/audit.db"),
            ),
            (
                facts(Kind::File, 0o640, 998, 0),
                Level::Fail,
                Some("chgrp glovebox-audit /var/lib/glovebox/audit.db"),
            ),
            (
                facts(Kind::File, 0o640, 0, 997),
                Level::Fail,
                Some("chown glovebox-gate /var/lib/glovebox/audit.db"),
            ),
        ];
        for (f, level, fix) in table {
            let got = check(&db, &f, &rule);
            assert_eq!((got.level, got.fix.as_deref()), (level, fix), "{got}");
        }
        // In user mode the same file is private.
        let user = layout_user(false);
        let rule = plan(&user)
            .into_iter()
            .find(|(p, _)| *p == user.state.audit_db())
            .unwrap()
            .1;
        assert_eq!(
            check(&db, &facts(Kind::File, 0o640, 1000, 1000), &rule).level,
            Level::Fail
        );
        assert_eq!(
            check(&db, &facts(Kind::File, 0o600, 1000, 1000), &rule).level,
            Level::Ok
        );
    }

    fn layout(system: bool) -> Layout {
        let gate = Who::new(998, "glovebox-gate");
        Layout {
            system,
            state: StateDir::new("/var/lib/glovebox"),
            runtime: PathBuf::from("/run/glovebox"),
            owner: gate.clone(),
            audit_group: Some(Who::new(997, "glovebox-audit")),
            socket_owners: vec![Who::new(0, "root"), gate, Who::new(996, "glovebox-broker")],
            broker: Some((
                Who::new(996, "glovebox-broker"),
                Who::new(995, "glovebox-broker"),
            )),
            accounts: vec![AccountFacts {
                id: "a".to_owned(),
                runs_as: Who::new(1001, "bob"),
                has_agent_token: true,
            }],
        }
    }

    fn layout_user(drops: bool) -> Layout {
        let alice = Who::new(1000, "alice");
        Layout {
            system: false,
            state: StateDir::new("/home/alice/.local/state/glovebox"),
            runtime: PathBuf::from("/home/alice/.local/state/glovebox/run"),
            owner: alice.clone(),
            audit_group: None,
            socket_owners: Vec::new(),
            broker: None,
            accounts: vec![AccountFacts {
                id: "a".to_owned(),
                runs_as: if drops { Who::new(1001, "bob") } else { alice },
                has_agent_token: true,
            }],
        }
    }

    #[test]
    fn the_user_state_dir_is_0700_or_traversable_when_an_executor_runs_as_another_user() {
        for (drops, mode, level) in [
            (false, 0o700, Level::Ok),
            (false, 0o711, Level::Fail),
            (true, 0o711, Level::Ok),
            (true, 0o755, Level::Fail),
        ] {
            let layout = layout_user(drops);
            let (path, rule) = plan(&layout).into_iter().next().unwrap();
            assert_eq!(path, layout.state.root());
            let got = check(&path, &facts(Kind::Dir, mode, 1000, 1000), &rule);
            assert_eq!(got.level, level, "{drops} {mode:o}: {got}");
        }
        // The executor's own run dir belongs to its user.
        let layout = layout_user(true);
        let dir = layout.state.executor_run_dir("a");
        let rule = plan(&layout)
            .into_iter()
            .find(|(p, _)| *p == dir)
            .unwrap()
            .1;
        assert_eq!(
            check(&dir, &facts(Kind::Dir, 0o700, 1001, 1001), &rule).level,
            Level::Ok
        );
        assert_eq!(
            check(&dir, &facts(Kind::Dir, 0o700, 1000, 1000), &rule).level,
            Level::Fail
        );
    }

    #[test]
    fn the_system_runtime_dir_is_checked_against_the_table_up_system_sets() {
        let layout = layout(true);
        let (gate, broker, broker_gid, bob, root) = (998, 996, 995, 1001, 0);
        let table: &[(&str, Kind, u32, u32, u32, Level)] = &[
            ("gate", Kind::Dir, 0o750, gate, broker_gid, Level::Ok),
            ("gate", Kind::Dir, 0o750, gate, broker, Level::Fail),
            ("gate", Kind::Dir, 0o755, gate, broker_gid, Level::Fail),
            ("gate", Kind::Dir, 0o750, gate, 1234, Level::Fail),
            ("gate/gate.sock", Kind::Socket, 0o666, gate, gate, Level::Ok),
            ("gate/gate.sock", Kind::Socket, 0o666, bob, bob, Level::Fail),
            ("admin", Kind::Dir, 0o700, gate, root, Level::Ok),
            ("admin", Kind::Dir, 0o750, gate, root, Level::Fail),
            (
                "admin/admin.sock",
                Kind::Socket,
                0o600,
                gate,
                gate,
                Level::Ok,
            ),
            (
                "admin/admin.sock",
                Kind::Socket,
                0o666,
                gate,
                gate,
                Level::Fail,
            ),
            ("audit", Kind::Dir, 0o755, gate, root, Level::Ok),
            (
                "audit/audit.sock",
                Kind::Socket,
                0o666,
                gate,
                gate,
                Level::Ok,
            ),
            ("broker", Kind::Dir, 0o755, broker, root, Level::Ok),
            ("broker", Kind::Dir, 0o777, broker, root, Level::Fail),
            (
                "broker/approve.sock",
                Kind::Socket,
                0o666,
                broker,
                broker,
                Level::Ok,
            ),
            ("exec-a", Kind::Dir, 0o750, bob, broker_gid, Level::Ok),
            ("exec-a", Kind::Dir, 0o755, bob, broker_gid, Level::Fail),
            ("exec-a", Kind::Dir, 0o750, gate, broker_gid, Level::Fail),
            (
                "exec-a/executor.sock",
                Kind::Socket,
                0o666,
                bob,
                bob,
                Level::Ok,
            ),
            (
                "exec-a/packs.sock",
                Kind::Socket,
                0o666,
                gate,
                gate,
                Level::Fail,
            ),
            ("exec-zz", Kind::Dir, 0o777, bob, bob, Level::Fail),
            ("stray.sock", Kind::Socket, 0o666, root, root, Level::Fail),
        ];
        for (rel, kind, mode, uid, gid, level) in table {
            let rule = runtime_rule(&layout, Path::new(rel), *kind);
            let path = layout.runtime.join(rel);
            let got = check(&path, &facts(*kind, *mode, *uid, *gid), &rule);
            assert_eq!(got.level, *level, "{rel} {mode:o} {uid}:{gid}: {got}");
        }
    }

    #[test]
    fn a_state_dir_the_package_made_and_glovebox_never_used_is_a_warning() {
        let layout = layout(true);
        let packaged = facts(Kind::Dir, 0o755, 0, 0);
        let found = not_set_up_yet(&layout, &packaged, false).unwrap();
        assert_eq!(found.level, Level::Warn);
        assert!(not_set_up_yet(&layout, &packaged, true).is_none());
        assert!(not_set_up_yet(&layout, &facts(Kind::Dir, 0o777, 0, 0), false).is_none());
        assert!(not_set_up_yet(&layout_user(false), &packaged, false).is_none());
    }

    #[test]
    fn the_system_state_dir_is_the_gates_setgid_to_the_audit_group() {
        let layout = layout(true);
        let (path, rule) = plan(&layout).into_iter().next().unwrap();
        assert_eq!(path, layout.state.root());
        for (mode, uid, gid, level) in [
            (0o2710, 998, 997, Level::Ok),
            (0o0710, 998, 997, Level::Fail),
            (0o2750, 998, 997, Level::Fail),
            (0o2710, 0, 997, Level::Fail),
            (0o2710, 998, 998, Level::Fail),
        ] {
            let got = check(&path, &facts(Kind::Dir, mode, uid, gid), &rule);
            assert_eq!(got.level, level, "{mode:o} {uid}:{gid}: {got}");
        }
    }

    #[test]
    fn grants_say_who_may_do_what() {
        assert_eq!(grants(0o044), "group may read, others may read");
        assert_eq!(grants(0o002), "others may write");
        assert_eq!(
            grants(0o011),
            "group may enter/execute, others may enter/execute"
        );
    }
}
