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
