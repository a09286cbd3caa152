//! Accounts at run time: what `glovebox account add|list|show|remove` asks of the gate on the
//! admin socket. Added accounts live in `<state>/accounts.yaml` (the gate is its only writer,
//! `glovebox_config::added_accounts`); after each write the gate applies the accounts to itself
//! ([`live`]), and the supervisor follows the file: it starts or stops the account's executor
//! and pack host, tells the gate who may call its audit socket and tells the broker (see the
//! `glovebox` crate).
//!
//! [`check_add`] is the decision, pure and table-tested: it sees the facts (users looked up,
//! the workdir stat'ed) that [`GateState::add_account`] gathers. Every change and every refusal
//! is an audit row (kind `account`) naming the administrator by peer uid; a token never is.

use std::path::Path;

use glovebox_config::{AccountId, RawAccount, StateDir, is_valid_account_id};
use glovebox_proto::audit_row::{Outcome, RowKind, Source};
use glovebox_proto::v1 as pb;
use tonic::Status;

use crate::service::GateState;

pub mod live;
pub mod token;
pub mod update;

/// What the OS says of a user a request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserFacts {
    pub uid: u32,
    pub gid: u32,
}

/// Everything [`check_add`] decides on, gathered beforehand.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// System mode: `run_as` and `owner` required, service users refused.
    pub system: bool,
    /// The gate's own uid (user mode: an account may run as another user only under root).
    pub own_uid: u32,
    /// Accounts of `glovebox.yaml`, and those added before.
    pub config_ids: Vec<AccountId>,
    pub added_ids: Vec<AccountId>,
    /// The uids of glovebox's own service users, where they exist.
    pub service_uids: Vec<u32>,
    /// `run_as` and `owner`, looked up (`None`: no such user).
    pub run_as: Option<UserFacts>,
    pub owner: Option<UserFacts>,
    /// Whether the workdir and each root is a directory (following links, as the executor will).
    pub workdir_is_dir: bool,
    /// Whether the gate may search the workdir (it reads the project's
    /// `.glovebox/permissions.yaml` there).
    pub workdir_searchable: bool,
    pub roots_are_dirs: Vec<bool>,
}

/// Why an account was not added: said to the administrator and audited.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl Facts {
    /// What the machine and the state say about `request`, for [`check_add`].
    fn gather(
        state: &StateDir,
        request: &pb::AddAccountRequest,
        config: &glovebox_config::Config,
        added: &[glovebox_config::Account],
    ) -> Facts {
        Facts {
            system: state.system_paths().is_some(),
            own_uid: rustix::process::geteuid().as_raw(),
            config_ids: config.accounts.iter().map(|a| a.id.clone()).collect(),
            added_ids: added.iter().map(|a| a.id.clone()).collect(),
            service_uids: service_uids(),
            run_as: lookup(&request.run_as),
            owner: lookup(&request.owner),
            workdir_is_dir: Path::new(&request.workdir).is_dir(),
            workdir_searchable: searchable(&request.workdir),
            roots_are_dirs: request
                .roots
                .iter()
                .map(|r| Path::new(r).is_dir())
                .collect(),
        }
    }
}

/// Makes a new account's directory with its two credentials (their hashes go in `entry`) and
/// the default policy; a directory left by an account of this id from before (a hand-made
/// one) is moved aside first. Returns the directory.
fn write_new_account_files(
    state: &StateDir,
    entry: &mut RawAccount,
) -> Result<std::path::PathBuf, Status> {
    let id = entry.id.clone();
    let token = glovebox_config::new_token().map_err(internal)?;
    let approver = glovebox_config::new_token().map_err(internal)?;
    entry.token_sha256 = vec![hex::encode(glovebox_config::token_hash(&token))];
    entry.approver_token_sha256 = vec![hex::encode(glovebox_config::token_hash(&approver))];
    let dir = state.account_dir(&id);
    if dir.exists() {
        let aside = removed_dir(state, &id);
        glovebox_config::create_private_dir(aside.parent().unwrap_or(state.root()))
            .map_err(internal)?;
        std::fs::rename(&dir, &aside).map_err(internal)?;
    }
    glovebox_config::create_private_dir(&dir).map_err(internal)?;
    let write = |path: &Path, text: &str| {
        glovebox_config::write_private_file(path, text.as_bytes()).map_err(internal)
    };
    write(&state.token_file(&id), &format!("{token}\n"))?;
    write(&state.approver_token_file(&id), &format!("{approver}\n"))?;
    let policy = glovebox_policy::RawPolicy::default_for_new_account()
        .to_yaml()
        .map_err(internal)?;
    write(&state.permissions_file(&id), &policy)?;
    Ok(dir)
}

/// Decides whether `request` may become an added account, given `facts`; the entry to write.
pub fn check_add(request: &pb::AddAccountRequest, facts: &Facts) -> Result<RawAccount, Refused> {
    check_new_id(&request.id, facts)?;
    check_dirs(request, facts)?;
    check_users(request, facts)?;
    let some = |s: &String| (!s.is_empty()).then(|| s.clone());
    Ok(RawAccount {
        id: request.id.clone(),
        workdir: request.workdir.clone(),
        run_as: some(&request.run_as),
        owner: some(&request.owner),
        roots: request.roots.clone(),
        job_env: Vec::new(),
        pack_env: Vec::new(),
        sandbox: Default::default(),
        enabled: request.enabled,
        token_sha256: Vec::new(),
        approver_token_sha256: Vec::new(),
    })
}

/// An added account's id: well-formed, not taken, and within the cap on added accounts.
fn check_new_id(id: &str, facts: &Facts) -> Result<(), Refused> {
    let no = |m: String| Err(Refused(m));
    if !is_valid_account_id(id) {
        return no(format!(
            "account id {id:?}: expected 1-64 characters of [A-Za-z0-9_.-] not starting with '.' or '-'"
        ));
    }
    if facts.config_ids.iter().any(|c| c == id) {
        return no(format!("account {id:?} already exists (in glovebox.yaml)"));
    }
    if facts.added_ids.iter().any(|c| c == id) {
        return no(format!("account {id:?} already exists"));
    }
    if facts.added_ids.len() >= glovebox_config::added_accounts::MAX_ADDED_ACCOUNTS {
        return no(format!(
            "at most {} accounts may be added at run time",
            glovebox_config::added_accounts::MAX_ADDED_ACCOUNTS
        ));
    }
    Ok(())
}

/// An added account's workdir and roots: absolute, directories the gate reaches, the workdir
/// searchable.
fn check_dirs(request: &pb::AddAccountRequest, facts: &Facts) -> Result<(), Refused> {
    let no = |m: String| Err(Refused(m));
    if !Path::new(&request.workdir).is_absolute() {
        return no(format!(
            "workdir {:?}: expected an absolute path",
            request.workdir
        ));
    }
    if !facts.workdir_is_dir {
        return no(format!(
            "workdir {:?} is not a directory (or the gate cannot reach it)",
            request.workdir
        ));
    }
    if !facts.workdir_searchable {
        return no(unsearchable(&request.workdir));
    }
    for (root, is_dir) in request.roots.iter().zip(&facts.roots_are_dirs) {
        if !is_dir {
            return no(format!(
                "root {root:?} is not a directory (or the gate cannot reach it)"
            ));
        }
    }
    Ok(())
}

/// An added account's `run_as` and `owner`: both required in system mode, each a real user who
/// is neither root nor glovebox's own, never the same person as agent and approver, and in user
/// mode another user only when glovebox runs as root.
fn check_users(request: &pb::AddAccountRequest, facts: &Facts) -> Result<(), Refused> {
    let no = |m: String| Err(Refused(m));
    if facts.system {
        if request.run_as.is_empty() {
            return no(
                "run_as is required in system mode (the OS user its executor and jobs run as)"
                    .into(),
            );
        }
        if request.owner.is_empty() {
            return no(
                "owner is required in system mode (the OS user who approves its asks)".into(),
            );
        }
    }
    for (field, name, user) in [
        ("run_as", &request.run_as, &facts.run_as),
        ("owner", &request.owner, &facts.owner),
    ] {
        if !name.is_empty() {
            check_user(field, name, user.as_ref(), &facts.service_uids)?;
        }
    }
    // The owner approves what the agent asks; an agent running as its own approver could answer
    // its own asks (its jobs reach the approve socket as the owner's uid).
    if facts.system
        && let (Some(run_as), Some(owner)) = (&facts.run_as, &facts.owner)
        && let Some(why) = glovebox_config::system::own_approver_refusal(
            &request.run_as,
            run_as.uid,
            &request.owner,
            owner.uid,
        )
    {
        return no(why);
    }
    if !facts.system
        && facts.own_uid != 0
        && let Some(user) = &facts.run_as
        && user.uid != facts.own_uid
    {
        return no(format!(
            "run_as {:?}: only glovebox run as root can run an account as another user",
            request.run_as
        ));
    }
    Ok(())
}

/// Refuses `name` (`run_as` or `owner`, per `field`) if it is no user, root, or one of glovebox's
/// own service users.
pub fn check_user(
    field: &str,
    name: &str,
    user: Option<&UserFacts>,
    service_uids: &[u32],
) -> Result<(), Refused> {
    let Some(user) = user else {
        return Err(Refused(format!("{field} user {name:?} does not exist")));
    };
    if user.uid == 0 || user.gid == 0 {
        return Err(Refused(format!("{field} {name:?} must not be root")));
    }
    if service_uids.contains(&user.uid) {
        return Err(Refused(format!(
            "{field} {name:?} is one of glovebox's own service users; name a person's or an agent's user"
        )));
    }
    Ok(())
}

/// The uids of glovebox's own service users on this machine.
fn service_uids() -> Vec<u32> {
    [
        glovebox_config::system::GATE_USER,
        glovebox_config::system::BROKER_USER,
    ]
    .iter()
    .filter_map(|n| lookup(n).map(|u| u.uid))
    .collect()
}

/// Why a workdir the gate cannot search is refused: the project's policy there would be out of
/// its reach, and every call of the account denied for it.
pub(crate) fn unsearchable(workdir: &str) -> String {
    format!(
        "workdir {workdir:?}: the gate cannot look inside it (it reads the project's \
         .glovebox/permissions.yaml there); give glovebox's gate user search permission on it \
         (o+x, or a group it is in)"
    )
}

/// Refuses roots the supervisor would refuse to start the account with (a home directory, the
/// secret floor, the state on either side): said before anything is written, not after.
pub(crate) fn placed(state: &StateDir, entry: &RawAccount) -> Result<(), Refused> {
    let roots = if entry.roots.is_empty() {
        std::slice::from_ref(&entry.workdir)
    } else {
        &entry.roots[..]
    };
    crate::placement::check_roots_here(state.root(), &entry.id, roots, entry.run_as.as_deref())
        .map_err(Refused)
}

/// Whether this process may search directory `path` (`access(X_OK)`, as the gate's user).
pub(crate) fn searchable(path: &str) -> bool {
    rustix::fs::access(path, rustix::fs::Access::EXEC_OK).is_ok()
}

/// Decides whether account `id` may be removed at run time.
pub fn check_remove(
    id: &str,
    config_ids: &[AccountId],
    added_ids: &[AccountId],
) -> Result<(), Refused> {
    if config_ids.iter().any(|c| c == id) {
        return Err(Refused(format!(
            "account {id:?} is in glovebox.yaml: it cannot be removed at run time; remove it \
             from the file and restart glovebox"
        )));
    }
    if !added_ids.iter().any(|c| c == id) {
        return Err(Refused(format!("no account {id:?}")));
    }
    Ok(())
}

fn lookup(name: &str) -> Option<UserFacts> {
    if name.is_empty() {
        return None;
    }
    let user = nix::unistd::User::from_name(name).ok()??;
    Some(UserFacts {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
    })
}

fn internal(e: impl std::fmt::Display) -> Status {
    tracing::error!(error = %e, "account change failed");
    Status::internal(format!("account change failed: {e}"))
}

/// Where a removed account's directory goes, so a later account of the same id starts afresh
/// (no rules, no secrets, no credentials of the old one) while the old files stay for review.
fn removed_dir(state: &StateDir, id: &str) -> std::path::PathBuf {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    state.root().join("removed").join(format!("{id}-{stamp}"))
}

impl GateState {
    /// Refuses `owner` as the new owner of `entry`: no such user, root, a service user, or (in
    /// system mode) the account's own agent user.
    pub(crate) fn check_new_owner(&self, entry: &RawAccount, owner: &str) -> Result<(), Refused> {
        let facts = lookup(owner);
        check_user("owner", owner, facts.as_ref(), &service_uids())?;
        if self.state_dir.system_paths().is_some()
            && let (Some(run_as), Some(owner_facts)) = (&entry.run_as, &facts)
            && let Some(run_as_facts) = lookup(run_as)
            && let Some(why) = glovebox_config::system::own_approver_refusal(
                run_as,
                run_as_facts.uid,
                owner,
                owner_facts.uid,
            )
        {
            return Err(Refused(why));
        }
        Ok(())
    }

    /// Puts `next` into `raw` as the account's entry in effect (see `RawAddedAccounts::put`).
    /// Taking over an account of `glovebox.yaml` keeps its tools' switch as it is now (once
    /// `raw` is written, `Enablement::taken_over` drops a system-mode switch the entry now
    /// holds). Returns whether it took over.
    pub(crate) fn put_entry(
        &self,
        raw: &mut glovebox_config::added_accounts::RawAddedAccounts,
        file: &[RawAccount],
        mut next: RawAccount,
    ) -> bool {
        use glovebox_config::added_accounts::{Source, source};
        if source(file, raw, &next.id) == Some(Source::File) {
            next.enabled = self.enablement.is_enabled(&next.id);
        }
        raw.put(file, next)
    }

    pub(crate) async fn audit_account(
        &self,
        account: &str,
        outcome: Outcome,
        uid: u32,
        detail: String,
    ) {
        self.audit
            .append(pb::AuditEvent {
                source: Source::Gate.into(),
                kind: RowKind::Account.into(),
                account: account.to_owned(),
                outcome: outcome.into(),
                detail: format!("by uid {uid}: {detail}"),
                ..Default::default()
            })
            .await;
    }

    /// `AddAccount`: checks, writes the credentials and the default policy, then the entry.
    pub(crate) async fn add_account(
        &self,
        request: pb::AddAccountRequest,
        uid: u32,
    ) -> Result<pb::AddAccountResponse, Status> {
        let _one = self.account_changes.lock().await;
        let state = &self.state_dir;
        let config = state.load_config().map_err(internal)?;
        let (mut raw, added) = state.load_added_accounts().map_err(internal)?;
        let facts = Facts::gather(state, &request, &config, &added);
        let summary = format!(
            "add: workdir {:?}, run_as {:?}, owner {:?}",
            request.workdir, request.run_as, request.owner
        );
        let decided = check_add(&request, &facts).and_then(|entry| {
            placed(state, &entry)?;
            Ok(entry)
        });
        let mut entry = match decided {
            Ok(entry) => entry,
            Err(why) => {
                let id = if is_valid_account_id(&request.id) {
                    request.id.as_str()
                } else {
                    ""
                };
                self.audit_account(id, Outcome::Refused, uid, format!("{summary}: {why}"))
                    .await;
                return Err(Status::failed_precondition(why.0));
            }
        };
        let id = entry.id.clone();
        let dir = write_new_account_files(state, &mut entry)?;
        raw.accounts.push(entry);
        if let Err(e) = state.save_added_accounts(&raw) {
            let _ = std::fs::remove_dir_all(&dir);
            self.audit_account(&id, Outcome::Refused, uid, format!("{summary}: {e}"))
                .await;
            return Err(Status::failed_precondition(e.to_string()));
        }
        self.audit_account(&id, Outcome::Added, uid, summary).await;
        self.reload_accounts(Some(&id)).await;
        Ok(pb::AddAccountResponse {
            token_file: state.token_file(&id).display().to_string(),
            approver_token_file: state.approver_token_file(&id).display().to_string(),
        })
    }

    /// `RemoveAccount`: drops the entry first (the supervisor stops the account's services and
    /// the broker refuses its tokens), then moves the account's directory aside.
    pub(crate) async fn remove_account(&self, id: &str, uid: u32) -> Result<(), Status> {
        let _one = self.account_changes.lock().await;
        let state = &self.state_dir;
        let config = state.load_config().map_err(internal)?;
        let (mut raw, _) = state.load_added_accounts().map_err(internal)?;
        let config_ids: Vec<AccountId> = config.accounts.iter().map(|a| a.id.clone()).collect();
        let added_ids: Vec<AccountId> = raw
            .accounts
            .iter()
            .filter_map(|a| AccountId::parse(&a.id).ok())
            .collect();
        let shown = if is_valid_account_id(id) { id } else { "" };
        if let Err(why) = check_remove(id, &config_ids, &added_ids) {
            self.audit_account(shown, Outcome::Refused, uid, format!("remove: {why}"))
                .await;
            return Err(Status::failed_precondition(why.0));
        }
        raw.accounts.retain(|a| a.id != id);
        state.save_added_accounts(&raw).map_err(internal)?;
        // Forgotten at once: its executor and pack host are refused from here on, its pack
        // host's `mcp.json` stream ends, and its calls are denied as an unknown account's.
        self.reload_accounts(Some(id)).await;
        let dir = state.account_dir(id);
        if dir.exists() {
            let aside = removed_dir(state, id);
            let moved = glovebox_config::create_private_dir(aside.parent().unwrap_or(state.root()))
                .map_err(|e| e.to_string())
                .and_then(|_| std::fs::rename(&dir, &aside).map_err(|e| e.to_string()));
            if let Err(e) = moved {
                // The entry is gone, so its tokens no longer authenticate; the files stay.
                tracing::warn!(account = %id, error = %e, "could not move a removed account's directory aside");
            }
        }
        self.audit_account(id, Outcome::Removed, uid, "remove".into())
            .await;
        Ok(())
    }

    /// `ListAccounts`: every account as in effect (glovebox.yaml's first, in its order), with
    /// where it comes from and whether its tools are on now.
    pub(crate) fn list_accounts(&self) -> Result<pb::ListAccountsResponse, Status> {
        use glovebox_config::added_accounts::{Source, source};
        let state = &self.state_dir;
        let (_, file) = state.load_config_and_entries().map_err(internal)?;
        let (raw, _) = state.load_added_accounts().map_err(internal)?;
        let merged = state.load_merged_config().map_err(internal)?;
        let accounts = merged
            .accounts
            .iter()
            .map(|a| {
                let from = source(&file, &raw, &a.id);
                pb::AccountEntry {
                    id: a.id.to_string(),
                    workdir: a.workdir.display().to_string(),
                    roots: a.roots.iter().map(|r| r.display().to_string()).collect(),
                    run_as: a.run_as.clone().unwrap_or_default(),
                    owner: a.owner.clone().unwrap_or_default(),
                    enabled: self.enablement.is_enabled(&a.id),
                    added: from == Some(Source::Added),
                    taken_over: from == Some(Source::TakenOver),
                }
            })
            .collect();
        Ok(pb::ListAccountsResponse { accounts })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> pb::AddAccountRequest {
        pb::AddAccountRequest {
            id: "new".into(),
            workdir: "/w".into(),
            ..Default::default()
        }
    }

    fn facts() -> Facts {
        Facts {
            own_uid: 1000,
            config_ids: vec!["me".parse().unwrap()],
            added_ids: vec!["old".parse().unwrap()],
            service_uids: vec![990, 991],
            workdir_is_dir: true,
            workdir_searchable: true,
            ..Default::default()
        }
    }

    fn user(uid: u32) -> Option<UserFacts> {
        Some(UserFacts { uid, gid: uid })
    }

    #[test]
    fn add_decisions() {
        type Case = (
            &'static str,
            fn(&mut pb::AddAccountRequest, &mut Facts),
            Option<&'static str>,
        );
        let cases: &[Case] = &[
            ("a plain account", |_, _| {}, None),
            (
                "a bad id",
                |r, _| r.id = "../x".into(),
                Some("expected 1-64"),
            ),
            (
                "an id of glovebox.yaml",
                |r, _| r.id = "me".into(),
                Some("in glovebox.yaml"),
            ),
            (
                "an id added before",
                |r, _| r.id = "old".into(),
                Some("already exists"),
            ),
            (
                "too many",
                |_, f| f.added_ids = (0..64).map(|i| format!("a{i}").parse().unwrap()).collect(),
                Some("at most 64"),
            ),
            (
                "a relative workdir",
                |r, _| r.workdir = "w".into(),
                Some("absolute"),
            ),
            (
                "a missing workdir",
                |_, f| f.workdir_is_dir = false,
                Some("not a directory"),
            ),
            (
                "a workdir the gate cannot search",
                |_, f| f.workdir_searchable = false,
                Some("the gate cannot look inside it"),
            ),
            (
                "a missing root",
                |r, f| {
                    r.roots = vec!["/r".into()];
                    f.roots_are_dirs = vec![false];
                },
                Some("root \"/r\""),
            ),
            (
                "an unknown run_as",
                |r, _| r.run_as = "ghost".into(),
                Some("does not exist"),
            ),
            (
                "root as owner",
                |r, f| {
                    r.owner = "toor".into();
                    f.owner = user(0);
                },
                Some("must not be root"),
            ),
            (
                "a service user as run_as",
                |r, f| {
                    r.run_as = "glovebox-gate".into();
                    f.run_as = user(990);
                },
                Some("service users"),
            ),
            (
                "another user without root",
                |r, f| {
                    r.run_as = "bob".into();
                    f.run_as = user(1001);
                },
                Some("only glovebox run as root"),
            ),
            (
                "another user under root",
                |r, f| {
                    r.run_as = "bob".into();
                    f.run_as = user(1001);
                    f.own_uid = 0;
                },
                None,
            ),
            (
                "system mode without run_as",
                |r, f| {
                    f.system = true;
                    r.owner = "alice".into();
                    f.owner = user(1000);
                },
                Some("run_as is required"),
            ),
            (
                "system mode without owner",
                |r, f| {
                    f.system = true;
                    r.run_as = "agent".into();
                    f.run_as = user(1002);
                },
                Some("owner is required"),
            ),
            (
                "system mode, run_as the owner",
                |r, f| {
                    f.system = true;
                    f.own_uid = 0;
                    r.run_as = "alice".into();
                    f.run_as = user(1000);
                    r.owner = "alice".into();
                    f.owner = user(1000);
                },
                Some("the same user"),
            ),
            (
                "system mode, run_as another name of the owner's uid",
                |r, f| {
                    f.system = true;
                    f.own_uid = 0;
                    r.run_as = "alias".into();
                    f.run_as = user(1000);
                    r.owner = "alice".into();
                    f.owner = user(1000);
                },
                Some("the same user"),
            ),
            (
                "user mode, run_as the owner",
                |r, f| {
                    f.own_uid = 0;
                    r.run_as = "alice".into();
                    f.run_as = user(1000);
                    r.owner = "alice".into();
                    f.owner = user(1000);
                },
                None,
            ),
            (
                "system mode with both",
                |r, f| {
                    f.system = true;
                    f.own_uid = 0;
                    r.run_as = "agent".into();
                    f.run_as = user(1002);
                    r.owner = "alice".into();
                    f.owner = user(1000);
                },
                None,
            ),
        ];
        for (name, change, wanted) in cases {
            let (mut r, mut f) = (request(), facts());
            change(&mut r, &mut f);
            match (check_add(&r, &f), wanted) {
                (Ok(entry), None) => {
                    assert_eq!(entry.id, r.id, "{name}");
                    assert!(entry.token_sha256.is_empty(), "{name}");
                }
                (Err(Refused(why)), Some(w)) => assert!(why.contains(w), "{name}: {why}"),
                (got, _) => panic!("{name}: {got:?}"),
            }
        }
    }

    #[test]
    fn only_added_accounts_are_removed() {
        let config = vec!["me".parse().unwrap()];
        let added = vec!["new".parse().unwrap()];
        assert!(check_remove("new", &config, &added).is_ok());
        let why = check_remove("me", &config, &added).unwrap_err().0;
        assert!(why.contains("cannot be removed at run time"), "{why}");
        let why = check_remove("ghost", &config, &added).unwrap_err().0;
        assert!(why.contains("no account"), "{why}");
    }
}
