//! Identities: the service users and the audit group of system mode, and each account's
//! `run_as`. The facts are passwd and group entries; each check is pure.

use glovebox_config::system::{AUDIT_GROUP, BROKER_USER, GATE_USER};

use super::finding::Finding;

/// A passwd entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserFacts {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub shell: String,
}

/// A group entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupFacts {
    pub name: String,
    pub gid: u32,
    pub members: Vec<String>,
}

/// The highest system uid and gid (`SYS_UID_MAX`, `SYS_GID_MAX` of `/etc/login.defs`, else one
/// below `UID_MIN`/`GID_MIN`, else 999).
pub fn system_id_max(login_defs: &str) -> (u32, u32) {
    let value = |key: &str| {
        login_defs.lines().find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some(key))
                .then(|| words.next()?.parse::<u32>().ok())
                .flatten()
        })
    };
    let uid = value("SYS_UID_MAX")
        .or_else(|| value("UID_MIN").map(|m| m.saturating_sub(1)))
        .unwrap_or(999);
    let gid = value("SYS_GID_MAX")
        .or_else(|| value("GID_MIN").map(|m| m.saturating_sub(1)))
        .unwrap_or(999);
    (uid, gid)
}

fn no_login(shell: &str) -> bool {
    shell.ends_with("/nologin") || shell.ends_with("/false") || shell.is_empty()
}

const SYSUSERS_FIX: &str =
    "systemd-sysusers /usr/lib/sysusers.d/glovebox.conf (or reinstall the glovebox package)";

/// A service user of system mode: present, a system account, no login shell, not root.
pub fn service_user(name: &str, facts: Option<&UserFacts>, sys_uid_max: u32) -> Finding {
    let check = format!("user {name}");
    let Some(u) = facts else {
        return Finding::fail(check, "does not exist", SYSUSERS_FIX);
    };
    if u.uid == 0 {
        return Finding::fail(
            check,
            "has uid 0: the service would run as root",
            format!("userdel {name} && {SYSUSERS_FIX}"),
        );
    }
    if u.uid > sys_uid_max {
        return Finding::fail(
            check,
            format!("uid {} is not a system uid (<= {sys_uid_max})", u.uid),
            format!("userdel {name} && {SYSUSERS_FIX}"),
        );
    }
    if !no_login(&u.shell) {
        return Finding::fail(
            check,
            format!("has the login shell {}", u.shell),
            format!("usermod --shell /usr/sbin/nologin {name}"),
        );
    }
    Finding::ok(
        check,
        format!("system user uid {} without a login shell", u.uid),
    )
}

/// The audit group: present and a system group.
pub fn audit_group(facts: Option<&GroupFacts>, sys_gid_max: u32) -> Finding {
    let check = format!("group {AUDIT_GROUP}");
    let Some(g) = facts else {
        return Finding::fail(check, "does not exist", SYSUSERS_FIX);
    };
    if g.gid == 0 || g.gid > sys_gid_max {
        return Finding::fail(
            check,
            format!("gid {} is not a system gid (1..={sys_gid_max})", g.gid),
            format!("groupdel {AUDIT_GROUP} && {SYSUSERS_FIX}"),
        );
    }
    let members = if g.members.is_empty() {
        "no members yet (add an administrator: usermod -aG glovebox-audit NAME)".to_owned()
    } else {
        format!("members {}", g.members.join(", "))
    };
    Finding::ok(check, format!("system group gid {}; {members}", g.gid))
}

/// One account's `run_as`: `run_as` as configured, `facts` its passwd entry, `me` the uid that
/// runs `glovebox up` in user mode.
pub fn run_as(
    account: &str,
    run_as: Option<&str>,
    facts: Option<&UserFacts>,
    system: bool,
    config: &str,
    me: u32,
) -> Finding {
    let check = format!("run_as of account {account}");
    let Some(name) = run_as else {
        return if system {
            Finding::fail(
                check,
                "not set: system mode runs each account's executor as its own user",
                format!("set `run_as: USER` for account {account} in {config}"),
            )
        } else {
            Finding::ok(
                check,
                format!("not set: the executor runs as you (uid {me})"),
            )
        };
    };
    let Some(u) = facts else {
        return Finding::fail(
            check,
            format!("user {name} does not exist"),
            format!("useradd --create-home {name}, or set another run_as in {config}"),
        );
    };
    if u.uid == 0 {
        return Finding::fail(
            check,
            format!("{name} is root: the executor would have root's reach"),
            format!("set an unprivileged run_as for account {account} in {config}"),
        );
    }
    if [GATE_USER, BROKER_USER].contains(&name) {
        return Finding::fail(
            check,
            format!("{name} is one of glovebox's service users"),
            format!("set the account's own user as run_as for account {account} in {config}"),
        );
    }
    if !system && u.uid != me && me != 0 {
        return Finding::warn(
            check,
            format!(
                "{name} (uid {}) is another user: `glovebox up` must run as root to switch to it",
                u.uid
            ),
            format!(
                "run `glovebox up` as root, or remove run_as for account {account} in {config}"
            ),
        );
    }
    Finding::ok(check, format!("{name} (uid {})", u.uid))
}

#[cfg(test)]
mod tests {
    use super::super::finding::Level;
    use super::*;

    fn user(name: &str, uid: u32, shell: &str) -> UserFacts {
        UserFacts {
            name: name.to_owned(),
            uid,
            gid: uid,
            shell: shell.to_owned(),
        }
    }

    #[test]
    fn system_ids_come_from_login_defs() {
        assert_eq!(system_id_max(""), (999, 999));
        assert_eq!(system_id_max("UID_MIN\t\t 1000\nGID_MIN 500\n"), (999, 499));
        assert_eq!(
            system_id_max("# SYS_UID_MAX 1\nSYS_UID_MAX 499\nUID_MIN 1000\n"),
            (499, 999)
        );
    }

    #[test]
    fn service_users_are_system_accounts_without_a_login_shell() {
        let table = [
            (None, Level::Fail),
            (Some(user(GATE_USER, 998, "/usr/sbin/nologin")), Level::Ok),
            (Some(user(GATE_USER, 998, "/bin/false")), Level::Ok),
            (Some(user(GATE_USER, 998, "/bin/bash")), Level::Fail),
            (
                Some(user(GATE_USER, 1001, "/usr/sbin/nologin")),
                Level::Fail,
            ),
            (Some(user(GATE_USER, 0, "/usr/sbin/nologin")), Level::Fail),
        ];
        for (facts, level) in table {
            let got = service_user(GATE_USER, facts.as_ref(), 999);
            assert_eq!(got.level, level, "{facts:?}: {got}");
            assert!(got.check == "user glovebox-gate");
        }
        let got = service_user(GATE_USER, Some(&user(GATE_USER, 998, "/bin/bash")), 999);
        assert_eq!(
            got.fix.as_deref(),
            Some("usermod --shell /usr/sbin/nologin glovebox-gate")
        );
    }

    #[test]
    fn the_audit_group_is_a_system_group() {
        let group = |gid| GroupFacts {
            name: AUDIT_GROUP.to_owned(),
            gid,
            members: vec!["admin".to_owned()],
        };
        assert_eq!(audit_group(None, 999).level, Level::Fail);
        assert_eq!(audit_group(Some(&group(997)), 999).level, Level::Ok);
        assert!(
            audit_group(Some(&group(997)), 999)
                .finding
                .contains("admin")
        );
        assert_eq!(audit_group(Some(&group(1500)), 999).level, Level::Fail);
        assert_eq!(audit_group(Some(&group(0)), 999).level, Level::Fail);
    }

    #[test]
    fn run_as_is_an_existing_unprivileged_non_service_user() {
        let bob = user("bob", 1001, "/bin/bash");
        let root = user("root", 0, "/bin/bash");
        let gate = user(GATE_USER, 998, "/usr/sbin/nologin");
        let cfg = "/etc/glovebox/glovebox.yaml";
        let table = [
            (None, None, true, 0, Level::Fail),
            (None, None, false, 1000, Level::Ok),
            (Some("bob"), Some(&bob), true, 0, Level::Ok),
            (Some("bob"), None, true, 0, Level::Fail),
            (Some("root"), Some(&root), true, 0, Level::Fail),
            (Some(GATE_USER), Some(&gate), true, 0, Level::Fail),
            (Some("bob"), Some(&bob), false, 0, Level::Ok),
            (Some("bob"), Some(&bob), false, 1001, Level::Ok),
            (Some("bob"), Some(&bob), false, 1000, Level::Warn),
        ];
        for (name, facts, system, me, level) in table {
            let got = run_as("a", name, facts, system, cfg, me);
            assert_eq!(got.level, level, "{name:?} {system} {me}: {got}");
            assert_eq!(got.check, "run_as of account a");
        }
    }
}
