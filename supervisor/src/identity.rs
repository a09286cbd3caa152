//! Per-account OS identities: which user an account's executor runs as, and preparing what that
//! user must be able to reach (its own socket directory, and nothing else of the state).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Context;
use glovebox_config::{Account, StateDir};

/// The OS user an executor runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
    /// Whether this is another user than the supervisor's (a privilege drop happens).
    pub drops: bool,
}

/// Resolves the identity of `account`'s executor. Without `run_as` it is the supervisor's own user.
pub fn resolve(account: &Account) -> anyhow::Result<Identity> {
    let own = nix::unistd::Uid::effective();
    let user = match &account.run_as {
        None => nix::unistd::User::from_uid(own)?
            .with_context(|| format!("uid {own} has no passwd entry"))?,
        Some(name) => nix::unistd::User::from_name(name)?.with_context(|| {
            format!(
                "account {:?}: run_as user {name:?} does not exist",
                account.id
            )
        })?,
    };
    anyhow::ensure!(
        account.run_as.is_none() || !user.uid.is_root(),
        "account {:?}: run_as must not be root",
        account.id
    );
    let drops = user.uid != own;
    anyhow::ensure!(
        !drops || own.is_root(),
        "account {:?}: run_as {:?} needs `glovebox up` to run as root",
        account.id,
        user.name
    );
    Ok(Identity {
        name: user.name,
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        home: user.dir.to_string_lossy().into_owned(),
        drops,
    })
}

/// Creates the account's run directory owned by its executor's user (0700), and lets other users
/// traverse (not list) the state and run directories so they can reach it.
pub fn prepare_run_dir(state: &StateDir, account: &str, identity: &Identity) -> anyhow::Result<()> {
    if identity.drops
        && let Some(blocked) = unreachable_above(state.root(), identity)
    {
        anyhow::bail!(
            "account {account:?}: its executor runs as {}, who cannot pass through {} to reach \
             its socket under {}; put the state where {} may pass (--state-dir), or let it: \
             chmod o+x {}",
            identity.name,
            blocked.display(),
            state.run_dir().display(),
            identity.name,
            blocked.display()
        );
    }
    let dir = state.executor_run_dir(account);
    glovebox_config::create_private_dir(&dir)?;
    if identity.drops {
        let uid = nix::unistd::Uid::from_raw(identity.uid);
        let gid = nix::unistd::Gid::from_raw(identity.gid);
        nix::unistd::chown(&dir, Some(uid), Some(gid))
            .with_context(|| format!("chown {}", dir.display()))?;
        for traversable in [state.root(), &state.run_dir()] {
            set_mode(traversable, 0o711)?;
        }
    }
    Ok(())
}

/// One directory on the way to the state: its mode, owner and group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passage {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// Whether a user (`uid`, in `groups`) may search (pass through) a directory.
pub fn may_pass(dir: Passage, uid: u32, groups: &[u32]) -> bool {
    if uid == 0 {
        return true;
    }
    if dir.uid == uid {
        return dir.mode & 0o100 != 0;
    }
    if groups.contains(&dir.gid) {
        return dir.mode & 0o010 != 0;
    }
    dir.mode & 0o001 != 0
}

/// The first directory above `state` (outermost first) that `identity` may not pass through: its
/// executor could not reach its socket under the state, though the state itself is opened to it.
fn unreachable_above(state: &Path, identity: &Identity) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(identity.uid)).ok()??;
    let name = std::ffi::CString::new(user.name).ok()?;
    let groups: Vec<u32> =
        nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(identity.gid))
            .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
            .unwrap_or_else(|_| vec![identity.gid]);
    let mut above: Vec<&Path> = state.ancestors().skip(1).collect();
    above.reverse();
    above
        .into_iter()
        .find(|dir| {
            std::fs::metadata(dir).is_ok_and(|m| {
                let passage = Passage {
                    mode: m.mode(),
                    uid: m.uid(),
                    gid: m.gid(),
                };
                !may_pass(passage, identity.uid, &groups)
            })
        })
        .map(Path::to_path_buf)
}

fn set_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", path.display()))
}

/// Confirms, inside the executor, that a dropped privilege cannot be taken back.
pub fn verify_cannot_regain_root() -> anyhow::Result<()> {
    let (uid, euid) = (nix::unistd::getuid(), nix::unistd::geteuid());
    if uid.is_root() || euid.is_root() {
        return Ok(()); // not dropped: dev mode as root, reported by `up`
    }
    anyhow::ensure!(
        nix::unistd::setuid(nix::unistd::Uid::from_raw(0)).is_err(),
        "the executor could regain root after dropping privileges"
    );
    Ok(())
}

/// Switches the calling process to `uid`/`gid` for good, as the supervisor does in a child
/// between `fork` and `exec` (system mode): every capability out of the bounding and ambient sets
/// (while root still may), the supplementary groups set to exactly `gid`, the real, effective and
/// saved ids changed (which empties the effective and permitted sets), the inheritable set
/// emptied, and `no_new_privs`, so no later `exec` (of a set-uid program, or one with file
/// capabilities) gains anything. Only system calls: safe between `fork` and `exec`.
pub fn switch_for_good(uid: u32, gid: u32) -> std::io::Result<()> {
    use rustix::thread::{self as t, CapabilitySet};
    for bit in 0..64 {
        // Capabilities this kernel does not know answer EINVAL; without CAP_SETPCAP (a unit that
        // bounded it away) EPERM: the switch below still empties every other set, and
        // `no_new_privs` keeps the bounding set from ever granting anything.
        let _ = t::remove_capability_from_bounding_set(CapabilitySet::from_bits_retain(1 << bit));
    }
    t::clear_ambient_capability_set().map_err(std::io::Error::from)?;
    let (uid, gid) = (
        rustix::process::Uid::from_raw(uid),
        rustix::process::Gid::from_raw(gid),
    );
    t::set_thread_groups(&[gid]).map_err(std::io::Error::from)?;
    t::set_thread_res_gid(gid, gid, gid).map_err(std::io::Error::from)?;
    t::set_thread_res_uid(uid, uid, uid).map_err(std::io::Error::from)?;
    t::set_capabilities(
        None,
        t::CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(std::io::Error::from)?;
    t::set_no_new_privs(true).map_err(std::io::Error::from)?;
    Ok(())
}

/// What `/proc/self/status` says of a process's identity.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatusIdentity {
    /// Real, effective, saved and filesystem ids.
    pub uids: Vec<u32>,
    pub gids: Vec<u32>,
    pub groups: Vec<u32>,
    pub no_new_privs: Option<u32>,
    pub cap_inh: Option<u64>,
    pub cap_prm: Option<u64>,
    pub cap_eff: Option<u64>,
    pub cap_amb: Option<u64>,
}

/// Parses the identity lines of a `/proc/<pid>/status` text.
pub fn parse_status(text: &str) -> StatusIdentity {
    let mut s = StatusIdentity::default();
    let numbers = |v: &str| -> Vec<u32> {
        v.split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect()
    };
    let hex = |v: &str| u64::from_str_radix(v.trim(), 16).ok();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key {
            "Uid" => s.uids = numbers(value),
            "Gid" => s.gids = numbers(value),
            "Groups" => s.groups = numbers(value),
            "NoNewPrivs" => s.no_new_privs = value.trim().parse().ok(),
            "CapInh" => s.cap_inh = hex(value),
            "CapPrm" => s.cap_prm = hex(value),
            "CapEff" => s.cap_eff = hex(value),
            "CapAmb" => s.cap_amb = hex(value),
            _ => {}
        }
    }
    s
}

/// Why `status` is not exactly the identity the supervisor switched a service to: `uid` and
/// `gid` everywhere, no supplementary group but `gid`, `no_new_privs`, no capability.
pub fn check_switched(status: &StatusIdentity, uid: u32, gid: u32) -> Result<(), String> {
    let mut wrong = Vec::new();
    if status.uids.len() != 4 || status.uids.iter().any(|u| *u != uid) {
        wrong.push(format!("Uid {:?} (want {uid} four times)", status.uids));
    }
    if status.gids.len() != 4 || status.gids.iter().any(|g| *g != gid) {
        wrong.push(format!("Gid {:?} (want {gid} four times)", status.gids));
    }
    if !status.groups.iter().all(|g| *g == gid) {
        wrong.push(format!("Groups {:?} (want only {gid})", status.groups));
    }
    if status.no_new_privs != Some(1) {
        wrong.push(format!("NoNewPrivs {:?} (want 1)", status.no_new_privs));
    }
    for (name, set) in [
        ("CapInh", status.cap_inh),
        ("CapPrm", status.cap_prm),
        ("CapEff", status.cap_eff),
        ("CapAmb", status.cap_amb),
    ] {
        if set != Some(0) {
            wrong.push(format!("{name} {set:x?} (want 0)"));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join(", "))
    }
}

/// In a service started in system mode: confirms from `/proc/self/status` that the supervisor's
/// switch to `expect` took, before the service reads or binds anything; refuses to run otherwise.
pub fn verify_switched(
    expect: &glovebox_proto::transport::handover::ExpectedIdentity,
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string("/proc/self/status").context("read /proc/self/status")?;
    check_switched(&parse_status(&text), expect.uid, expect.gid).map_err(|wrong| {
        anyhow::anyhow!(
            "this service is not running as the identity it was started as (uid {}, gid {}): {wrong}; refusing to run",
            expect.uid,
            expect.gid
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCHED: &str = "Name:\tglovebox\nUid:\t998\t998\t998\t998\nGid:\t997\t997\t997\t997\n\
        Groups:\t997 \nNoNewPrivs:\t1\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
        CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\n";

    #[test]
    fn a_directory_is_passed_by_its_owner_group_or_others_as_its_mode_says() {
        let dir = |mode, uid, gid| Passage { mode, uid, gid };
        // (directory, user, groups, may pass)
        let cases = [
            (dir(0o700, 0, 0), 1001, vec![1001], false),
            (dir(0o711, 0, 0), 1001, vec![1001], true),
            (dir(0o750, 0, 50), 1001, vec![1001, 50], true),
            (dir(0o750, 0, 50), 1001, vec![1001], false),
            (dir(0o705, 1001, 0), 1001, vec![1001], true),
            // The owner's bits rule the owner, even when others may pass.
            (dir(0o001, 1001, 0), 1001, vec![1001], false),
            (dir(0o700, 5, 5), 0, vec![0], true),
        ];
        for (d, uid, groups, want) in cases {
            assert_eq!(may_pass(d, uid, &groups), want, "{d:?} {uid} {groups:?}");
        }
    }

    #[test]
    fn a_switched_status_passes_and_each_leftover_privilege_is_named() {
        assert_eq!(check_switched(&parse_status(SWITCHED), 998, 997), Ok(()));
        let no_groups = SWITCHED.replace("Groups:\t997 ", "Groups:\t");
        assert_eq!(check_switched(&parse_status(&no_groups), 998, 997), Ok(()));
        let cases = [
            ("Uid:\t998\t998\t998\t998", "Uid:\t998\t0\t998\t998", "Uid"),
            ("Gid:\t997\t997\t997\t997", "Gid:\t997\t997\t0\t997", "Gid"),
            ("Groups:\t997 ", "Groups:\t997 27 ", "Groups"),
            ("NoNewPrivs:\t1", "NoNewPrivs:\t0", "NoNewPrivs"),
            (
                "CapEff:\t0000000000000000",
                "CapEff:\t0000000000000040",
                "CapEff",
            ),
            (
                "CapPrm:\t0000000000000000",
                "CapPrm:\t00000000000000c0",
                "CapPrm",
            ),
            (
                "CapAmb:\t0000000000000000",
                "CapAmb:\t0000000000000001",
                "CapAmb",
            ),
            ("CapInh:\t0000000000000000", "", "CapInh"),
        ];
        for (from, to, needle) in cases {
            let text = SWITCHED.replace(from, to);
            let e = check_switched(&parse_status(&text), 998, 997).unwrap_err();
            assert!(e.contains(needle), "{needle}: {e}");
        }
        assert!(check_switched(&parse_status(SWITCHED), 999, 997).is_err());
    }
}
