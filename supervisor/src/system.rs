//! `glovebox up --system`: what root sets up before the services start, each as its own user.
//!
//! Root only sets up and supervises. The gate runs as `glovebox-gate`, the state's only owner and
//! writer; the broker as `glovebox-broker`, which reads nothing of the state; each account's
//! executor and pack host as the account's `run_as` user. Every owner and mode in the state and
//! runtime directories is set here at each start, and anything unexpected there (a symlink, a
//! file of another user) stops the start with an error rather than being used or followed.
//!
//! | path | owner:group | mode | who gets in |
//! | --- | --- | --- | --- |
//! | `<state>` | gate:`glovebox-audit` | 2710 | the gate; the audit group may only traverse (new files get its group) |
//! | `<state>/audit.db` (and `-wal`, `-shm`) | gate:`glovebox-audit` | 0640 | the gate writes, the audit group reads |
//! | everything else in `<state>` | gate:gate | 0600 / 0700 | the gate |
//! | `<runtime>` | root:root | 0755 | |
//! | `<runtime>/glovebox.lock` | root:root | 0600 | the supervisor |
//! | `<runtime>/broker.url` | root:root | 0644 | everyone (an address, no secret) |
//! | `<runtime>/gate/` (`gate.sock` 0666) | gate:broker | 0750 | the broker (and root) |
//! | `<runtime>/admin/` (`admin.sock` 0600) | gate:root | 0700 | root |
//! | `<runtime>/audit/` (`audit.sock` 0666) | gate:root | 0755 | everyone reaches it; the gate admits the `run_as` uids |
//! | `<runtime>/exec-<id>/` (`executor.sock`, `packs.sock` 0666) | run_as:broker | 0750 | the broker (and root) |
//! | `<runtime>/broker/` (`approve.sock` 0666) | broker:root | 0755 | everyone; the broker admits the accounts' owners by uid |
//! | `<state>-packs/` | root:root | 0755 | |
//! | `<state>-packs/<id>/` | run_as:run_as | 0700 | the account's pack host: its packs' homes and logs (kept across starts) |

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use glovebox_config::system::{AUDIT_GROUP, BROKER_USER, GATE_USER};
use glovebox_config::{Config, StateDir, create_private_dir, write_private_file};

/// One system user: its name and ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// The identities system mode runs under.
#[derive(Debug, Clone)]
pub struct ServiceUsers {
    pub gate: ServiceUser,
    pub broker: ServiceUser,
    /// The group whose members may read `audit.db`.
    pub audit_gid: u32,
}

/// System mode starts as root, or not at all.
pub fn require_root() -> anyhow::Result<()> {
    anyhow::ensure!(
        nix::unistd::geteuid().is_root(),
        "glovebox up --system must run as root: it sets up /var/lib/glovebox and /run/glovebox and \
         starts each service as its own user (run it through `systemctl start glovebox`, or with \
         sudo); for a single user, run `glovebox up` without --system"
    );
    Ok(())
}

/// Looks up the service users and the audit group; names every one that is missing and says
/// how to create them.
pub fn service_users() -> anyhow::Result<ServiceUsers> {
    let user = |name: &str| -> anyhow::Result<Option<ServiceUser>> {
        Ok(nix::unistd::User::from_name(name)?.map(|u| ServiceUser {
            name: u.name,
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
        }))
    };
    let gate = user(GATE_USER)?;
    let broker = user(BROKER_USER)?;
    let audit = nix::unistd::Group::from_name(AUDIT_GROUP)?;
    let mut missing = Vec::new();
    if gate.is_none() {
        missing.push(format!("user {GATE_USER}"));
    }
    if broker.is_none() {
        missing.push(format!("user {BROKER_USER}"));
    }
    if audit.is_none() {
        missing.push(format!("group {AUDIT_GROUP}"));
    }
    let (Some(gate), Some(broker), Some(audit)) = (gate, broker, audit) else {
        anyhow::bail!(
            "system mode needs its service accounts, and these are missing: {}. The package \
             creates them (systemd-sysusers); by hand: `useradd --system --no-create-home --shell \
             /usr/sbin/nologin {GATE_USER}`, the same for {BROKER_USER}, and `groupadd --system \
             {AUDIT_GROUP}`",
            missing.join(", ")
        );
    };
    for u in [&gate, &broker] {
        anyhow::ensure!(
            u.uid != 0 && u.gid != 0,
            "the service user {} must not be root (uid {}, gid {})",
            u.name,
            u.uid,
            u.gid
        );
    }
    anyhow::ensure!(
        gate.uid != broker.uid,
        "{GATE_USER} and {BROKER_USER} must be different users"
    );
    Ok(ServiceUsers {
        gate,
        broker,
        audit_gid: audit.gid.as_raw(),
    })
}

/// Why a file or directory root relies on could be changed by someone else: it must be root's,
/// not writable by group or others, and not a symlink.
pub fn check_root_owned(path: &Path, what: &str) -> anyhow::Result<()> {
    let meta =
        std::fs::symlink_metadata(path).with_context(|| format!("{what} {}", path.display()))?;
    anyhow::ensure!(
        !meta.file_type().is_symlink(),
        "{what} {} is a symlink; system mode reads only root's own files there",
        path.display()
    );
    anyhow::ensure!(
        meta.uid() == 0 && meta.mode() & 0o022 == 0,
        "{what} {} must be owned by root and writable by root alone (it is uid {}, mode {:o}): \
         `chown root: {}; chmod go-w {}`",
        path.display(),
        meta.uid(),
        meta.mode() & 0o7777,
        path.display(),
        path.display()
    );
    Ok(())
}

/// The config of system mode: each account has an `owner` and a `run_as`, both existing people
/// (not root, not a service user). Returns each account's executor identity, in config order.
pub fn check_accounts(
    config: &Config,
    path: &Path,
    users: &ServiceUsers,
) -> anyhow::Result<Vec<crate::identity::Identity>> {
    let mut identities = Vec::new();
    for a in &config.accounts {
        let invalid =
            |what: String| anyhow::anyhow!("{}: account {:?}: {what}", path.display(), a.id);
        let run_as = a.run_as.as_deref().ok_or_else(|| {
            invalid(
                "run_as is required in system mode (the OS user its executor and jobs run as)"
                    .into(),
            )
        })?;
        let owner = a.owner.as_deref().ok_or_else(|| {
            invalid("owner is required in system mode (the OS user who approves its asks)".into())
        })?;
        let mut uids = [0; 2];
        for (i, (field, name)) in [("run_as", run_as), ("owner", owner)]
            .into_iter()
            .enumerate()
        {
            let user = nix::unistd::User::from_name(name)?
                .ok_or_else(|| invalid(format!("{field} user {name:?} does not exist")))?;
            if user.uid.is_root() || user.gid.as_raw() == 0 {
                return Err(invalid(format!("{field} {name:?} must not be root")));
            }
            if [users.gate.uid, users.broker.uid].contains(&user.uid.as_raw()) {
                return Err(invalid(format!(
                    "{field} {name:?} is one of glovebox's own service users; name a person's or an agent's user"
                )));
            }
            uids[i] = user.uid.as_raw();
        }
        if let Some(why) =
            glovebox_config::system::own_approver_refusal(run_as, uids[0], owner, uids[1])
        {
            return Err(invalid(why));
        }
        identities.push(crate::identity::resolve(a)?);
    }
    Ok(identities)
}

/// Makes what is missing of the state directory (the keys, each account's directory and default
/// policy) and sets every owner and mode in it: the gate's alone, but `audit.db`, which the
/// audit group may read. A symlink, or a file owned by anyone but root and the gate, stops the
/// start.
pub fn prepare_state(
    state: &StateDir,
    config: &Config,
    users: &ServiceUsers,
) -> anyhow::Result<()> {
    let root = state.root();
    match std::fs::symlink_metadata(root) {
        Ok(meta) => anyhow::ensure!(
            meta.is_dir(),
            "state directory {} is not a directory (a symlink is refused)",
            root.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_private_dir(root)?,
        Err(e) => return Err(e).with_context(|| format!("state directory {}", root.display())),
    }
    // Checked before root writes anything in it, so nothing is written through a planted link.
    walk_state(root, users, &mut |_, _| Ok(()))?;
    crate::init::ensure_keys(state)?;
    for a in &config.accounts {
        create_private_dir(&state.account_dir(&a.id))?;
        let policy = state.permissions_file(&a.id);
        if !policy.exists() {
            let text = glovebox_policy::RawPolicy::default_for_new_account().to_yaml()?;
            write_private_file(&policy, text.as_bytes())?;
        }
    }
    // The audit store exists before the gate first opens it, so that it is made with the audit
    // group's read access (SQLite gives its -wal and -shm files the same mode).
    let db = state.audit_db();
    if !db.exists() {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&db)
            .with_context(|| format!("create {}", db.display()))?;
    }
    let gate = (users.gate.uid, users.gate.gid);
    walk_state(root, users, &mut |path, meta| {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let (owner, mode) = if path == root {
            // setgid: files the gate makes later take the audit group, so audit.db's -wal and
            // -shm stay readable by it; every other file is 0600 anyway.
            ((gate.0, users.audit_gid), 0o2710)
        } else if meta.is_dir() {
            (gate, 0o700)
        } else if ["audit.db", "audit.db-wal", "audit.db-shm"].contains(&name)
            && path.parent() == Some(root)
        {
            ((gate.0, users.audit_gid), 0o640)
        } else {
            (gate, 0o600)
        };
        set_owner_mode(path, owner, mode)
    })
}

/// Visits `dir` and everything under it (not following links), refusing symlinks and entries
/// owned by anyone but root and the gate.
fn walk_state(
    dir: &Path,
    users: &ServiceUsers,
    visit: &mut dyn FnMut(&Path, &std::fs::Metadata) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(dir).with_context(|| format!("{}", dir.display()))?;
    check_state_entry(dir, &meta, users)?;
    visit(dir, &meta)?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
            walk_state(&entry?.path(), users, visit)?;
        }
    }
    Ok(())
}

fn check_state_entry(
    path: &Path,
    meta: &std::fs::Metadata,
    users: &ServiceUsers,
) -> anyhow::Result<()> {
    let kind = meta.file_type();
    anyhow::ensure!(
        !kind.is_symlink(),
        "{} is a symlink: nothing in glovebox's state directory may be one; remove it",
        path.display()
    );
    anyhow::ensure!(
        kind.is_dir() || kind.is_file(),
        "{} is neither a file nor a directory; remove it from glovebox's state directory",
        path.display()
    );
    anyhow::ensure!(
        meta.uid() == 0 || meta.uid() == users.gate.uid,
        "{} is owned by uid {}, neither root nor {}: refusing to take it over; remove it or chown it",
        path.display(),
        meta.uid(),
        users.gate.name
    );
    Ok(())
}

/// Sets the owner and mode of the file or directory at `path` through a descriptor opened without
/// following a link: the state belongs to the gate's user, which could swap an entry for a
/// symlink between the walk's check and this change, and root must never chown or chmod what such
/// a link points to.
fn set_owner_mode(path: &Path, (uid, gid): (u32, u32), mode: u32) -> anyhow::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .with_context(|| format!("open {} (a symlink is refused)", path.display()))?;
    let stat = rustix::fs::fstat(&fd).with_context(|| format!("stat {}", path.display()))?;
    let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
    anyhow::ensure!(
        matches!(
            kind,
            rustix::fs::FileType::RegularFile | rustix::fs::FileType::Directory
        ),
        "{} is neither a file nor a directory",
        path.display()
    );
    rustix::fs::fchown(
        &fd,
        Some(rustix::process::Uid::from_raw(uid)),
        Some(rustix::process::Gid::from_raw(gid)),
    )
    .with_context(|| format!("chown {}", path.display()))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
        .with_context(|| format!("chmod {}", path.display()))
}

/// Makes the runtime directory root's (0755), refusing a symlink or another owner's directory.
/// Called before the lock is taken; [`prepare_sockets`] after.
pub fn prepare_runtime(runtime: &Path) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(runtime) {
        Ok(meta) => {
            anyhow::ensure!(
                meta.is_dir(),
                "runtime directory {} is not a directory (a symlink is refused)",
                runtime.display()
            );
            anyhow::ensure!(
                meta.uid() == 0,
                "runtime directory {} is owned by uid {}, not root; refusing it",
                runtime.display(),
                meta.uid()
            );
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(runtime)
                .with_context(|| format!("create {}", runtime.display()))?;
        }
        Err(e) => return Err(e).with_context(|| format!("{}", runtime.display())),
    }
    set_owner_mode(runtime, (0, 0), 0o755)
}

/// (Re)makes each service's socket directory in the runtime directory, fresh, with the owner,
/// group and mode that let exactly its peers in (see the table above).
pub fn prepare_sockets(
    state: &StateDir,
    config: &Config,
    identities: &[crate::identity::Identity],
    users: &ServiceUsers,
) -> anyhow::Result<()> {
    let (gate, broker) = (&users.gate, &users.broker);
    let mut dirs: Vec<(PathBuf, (u32, u32), u32)> = vec![
        (state.gate_socket_dir(), (gate.uid, broker.gid), 0o750),
        (state.admin_socket_dir(), (gate.uid, 0), 0o700),
        (state.audit_socket_dir(), (gate.uid, 0), 0o755),
        (state.broker_socket_dir(), (broker.uid, 0), 0o755),
    ];
    for (a, identity) in config.accounts.iter().zip(identities) {
        dirs.push((
            state.executor_run_dir(&a.id),
            (identity.uid, broker.gid),
            0o750,
        ));
    }
    // Directories of accounts no longer configured go too: the runtime directory holds only
    // what this start made.
    let runtime = state.run_dir();
    for entry in std::fs::read_dir(&runtime)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("exec-") || ["gate", "admin", "audit", "broker"].contains(&name) {
            remove_fresh(&path)?;
        }
    }
    for (dir, owner, mode) in dirs {
        remove_fresh(&dir)?;
        std::fs::create_dir(&dir).with_context(|| format!("create {}", dir.display()))?;
        set_owner_mode(&dir, owner, mode)?;
    }
    Ok(())
}

/// Makes `<state>-packs` root's (0755) and each account's pack home in it its `run_as` user's
/// (0700), creating what is missing and keeping what is there: the packs' data lives on across
/// starts. Root never enters an account's pack home (its user owns what is inside).
pub fn prepare_pack_homes(
    state: &StateDir,
    accounts: &[(&str, &crate::identity::Identity)],
) -> anyhow::Result<()> {
    let homes = state.pack_homes_dir();
    match std::fs::symlink_metadata(&homes) {
        Ok(meta) => anyhow::ensure!(
            meta.is_dir() && meta.uid() == 0,
            "{} is not a directory of root's (a symlink is refused); remove it",
            homes.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir(&homes).with_context(|| format!("create {}", homes.display()))?
        }
        Err(e) => return Err(e).with_context(|| format!("{}", homes.display())),
    }
    set_owner_mode(&homes, (0, 0), 0o755)?;
    for (account, identity) in accounts {
        let home = state.pack_home_dir(account);
        match std::fs::create_dir(&home) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("create {}", home.display())),
        }
        // Only root writes `<state>-packs`, so nobody can swap this entry; a link is refused.
        set_owner_mode(&home, (identity.uid, identity.gid), 0o700)?;
    }
    Ok(())
}

/// The socket directory of one account added while glovebox runs, as [`prepare_sockets`] makes
/// each at the start: `<runtime>/exec-<id>`, the account's user's, the broker's group, 0750.
pub fn prepare_account_sockets(
    state: &StateDir,
    account: &str,
    identity: &crate::identity::Identity,
    users: &ServiceUsers,
) -> anyhow::Result<()> {
    let dir = state.executor_run_dir(account);
    remove_fresh(&dir)?;
    std::fs::create_dir(&dir).with_context(|| format!("create {}", dir.display()))?;
    set_owner_mode(&dir, (identity.uid, users.broker.gid), 0o750)
}

/// Removes a socket directory of an earlier start (never following a link out of the runtime
/// directory: a link is removed, not followed).
fn remove_fresh(path: &Path) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {
            std::fs::remove_dir_all(path).with_context(|| format!("remove {}", path.display()))
        }
        Ok(_) => std::fs::remove_file(path).with_context(|| format!("remove {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("{}", path.display())),
    }
}

/// Lets everyone read the broker's URL (an address, no secret): the owners' `approve` and the
/// agents' clients find the broker by it.
pub fn publish_url_file(path: &Path) -> anyhow::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
        .with_context(|| format!("chmod {}", path.display()))
}
