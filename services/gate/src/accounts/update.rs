//! `UpdateAccount`: an account moved to another workdir, a root added or removed, or another
//! owner (`glovebox account set-workdir|add-root|remove-root|set-owner`). Any account: one of
//! `glovebox.yaml` is taken over into `accounts.yaml` by its first such change (see
//! `glovebox_config::added_accounts`). [`apply`] is the decision, pure and table-tested; the gate
//! applies the result to itself at once (`live`), and the supervisor restarts the account's
//! executor and pack host with it.

use glovebox_proto::audit_row::Outcome;
use std::path::Path;

use glovebox_config::RawAccount;
use glovebox_proto::v1 as pb;
use tonic::Status;

use super::{Refused, internal};
use crate::service::GateState;

/// Most roots an account may have.
pub const MAX_ROOTS: usize = 32;

/// The entry `raw` becomes under `request`; `is_dir` says whether a path is a directory.
pub fn apply(
    raw: &RawAccount,
    request: &pb::UpdateAccountRequest,
    is_dir: impl Fn(&str) -> bool,
) -> Result<RawAccount, Refused> {
    let no = |m: String| Err(Refused(m));
    let mut next = raw.clone();
    // The roots as they apply now: none written means the workdir alone.
    if next.roots.is_empty() {
        next.roots = vec![raw.workdir.clone()];
    }
    if !request.workdir.is_empty() {
        if !Path::new(&request.workdir).is_absolute() {
            return no(format!(
                "workdir {:?}: expected an absolute path",
                request.workdir
            ));
        }
        if !is_dir(&request.workdir) {
            return no(format!(
                "workdir {:?} is not a directory (or the gate cannot reach it)",
                request.workdir
            ));
        }
        // A root that was the old workdir alone follows it.
        if raw.roots.is_empty() {
            next.roots = vec![request.workdir.clone()];
        }
        next.workdir = request.workdir.clone();
    }
    for root in &request.add_roots {
        if !Path::new(root).is_absolute() || root == "/" {
            return no(format!(
                "root {root:?}: expected an absolute directory other than /"
            ));
        }
        if !is_dir(root) {
            return no(format!(
                "root {root:?} is not a directory (or the gate cannot reach it)"
            ));
        }
        if !next.roots.contains(root) {
            next.roots.push(root.clone());
        }
    }
    for root in &request.remove_roots {
        let before = next.roots.len();
        next.roots.retain(|r| r != root);
        if next.roots.len() == before {
            return no(format!("{root:?} is not one of the account's roots"));
        }
    }
    if !request.owner.is_empty() {
        next.owner = Some(request.owner.clone());
    }
    if next.roots.len() > MAX_ROOTS {
        return no(format!("at most {MAX_ROOTS} roots"));
    }
    if !next
        .roots
        .iter()
        .any(|r| Path::new(&next.workdir).starts_with(r))
    {
        return no(format!(
            "the workdir {:?} would be outside every root: keep a root that holds it",
            next.workdir
        ));
    }
    if next.roots == [next.workdir.clone()] {
        next.roots.clear();
    }
    Ok(next)
}

impl GateState {
    /// `UpdateAccount`: checks the change of an account and writes it (audited).
    pub(crate) async fn update_account(
        &self,
        request: pb::UpdateAccountRequest,
        uid: u32,
    ) -> Result<pb::UpdateAccountResponse, Status> {
        let _one = self.account_changes.lock().await;
        let state = &self.state_dir;
        let (_, file) = state.load_config_and_entries().map_err(internal)?;
        let (mut raw, _) = state.load_added_accounts().map_err(internal)?;
        let id = request.id.clone();
        let shown = if glovebox_config::is_valid_account_id(&id) {
            id.as_str()
        } else {
            ""
        };
        let summary = format!(
            "update: workdir {:?}, add roots {:?}, remove roots {:?}, owner {:?}",
            request.workdir, request.add_roots, request.remove_roots, request.owner
        );
        let decided = raw
            .entry_in_effect(&file, &id)
            .ok_or_else(|| Refused(format!("no account {id:?}")))
            .and_then(|entry| {
                if !request.workdir.is_empty()
                    && Path::new(&request.workdir).is_dir()
                    && !super::searchable(&request.workdir)
                {
                    return Err(Refused(super::unsearchable(&request.workdir)));
                }
                if !request.owner.is_empty() {
                    self.check_new_owner(&entry, &request.owner)?;
                }
                let next = apply(&entry, &request, |p| Path::new(p).is_dir())?;
                super::placed(state, &next)?;
                Ok(next)
            });
        let next = match decided {
            Ok(next) => next,
            Err(why) => {
                self.audit_account(shown, Outcome::Refused, uid, format!("{summary}: {why}"))
                    .await;
                return Err(Status::failed_precondition(why.0));
            }
        };
        let roots = if next.roots.is_empty() {
            vec![next.workdir.clone()]
        } else {
            next.roots.clone()
        };
        let took = self.put_entry(&mut raw, &file, next);
        let summary = if took {
            format!("{summary} (taken over from glovebox.yaml)")
        } else {
            summary
        };
        if let Err(e) = state.save_added_accounts(&raw) {
            self.audit_account(shown, Outcome::Refused, uid, format!("{summary}: {e}"))
                .await;
            return Err(Status::failed_precondition(e.to_string()));
        }
        if took {
            self.enablement.taken_over(&id).map_err(internal)?;
        }
        self.audit_account(&id, Outcome::Changed, uid, summary)
            .await;
        self.reload_accounts(Some(&id)).await;
        Ok(pb::UpdateAccountResponse { roots })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(workdir: &str, roots: &[&str]) -> RawAccount {
        RawAccount {
            id: "a".into(),
            workdir: workdir.into(),
            run_as: None,
            owner: None,
            roots: roots.iter().map(|r| (*r).to_owned()).collect(),
            job_env: vec![],
            pack_env: Vec::new(),
            sandbox: Default::default(),
            enabled: true,
            token_sha256: vec![],
            approver_token_sha256: vec![],
        }
    }

    fn request(workdir: &str, add: &[&str], remove: &[&str]) -> pb::UpdateAccountRequest {
        pb::UpdateAccountRequest {
            id: "a".into(),
            workdir: workdir.into(),
            add_roots: add.iter().map(|r| (*r).to_owned()).collect(),
            remove_roots: remove.iter().map(|r| (*r).to_owned()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn updates() {
        let dirs = |p: &str| !p.contains("missing");
        type Case<'a> = (
            &'a str,
            RawAccount,
            pb::UpdateAccountRequest,
            Result<(&'a str, Vec<&'a str>), &'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                "a new workdir takes the implicit root along",
                raw("/w", &[]),
                request("/v", &[], &[]),
                Ok(("/v", vec![])),
            ),
            (
                "a new workdir inside the roots",
                raw("/w", &["/w", "/data"]),
                request("/data/p", &[], &[]),
                Ok(("/data/p", vec!["/w", "/data"])),
            ),
            (
                "a new workdir outside the roots",
                raw("/w", &["/w", "/data"]),
                request("/v", &[], &[]),
                Err("outside every root"),
            ),
            (
                "a missing workdir",
                raw("/w", &[]),
                request("/missing", &[], &[]),
                Err("not a directory"),
            ),
            (
                "a relative workdir",
                raw("/w", &[]),
                request("v", &[], &[]),
                Err("absolute"),
            ),
            (
                "a root added",
                raw("/w", &[]),
                request("", &["/data"], &[]),
                Ok(("/w", vec!["/w", "/data"])),
            ),
            (
                "a root added twice is one",
                raw("/w", &["/w", "/data"]),
                request("", &["/data"], &[]),
                Ok(("/w", vec!["/w", "/data"])),
            ),
            (
                "a missing root",
                raw("/w", &[]),
                request("", &["/missing"], &[]),
                Err("not a directory"),
            ),
            (
                "/ as a root",
                raw("/w", &[]),
                request("", &["/"], &[]),
                Err("other than /"),
            ),
            (
                "a root removed",
                raw("/w", &["/w", "/data"]),
                request("", &[], &["/data"]),
                Ok(("/w", vec![])),
            ),
            (
                "a root it does not have",
                raw("/w", &[]),
                request("", &[], &["/data"]),
                Err("not one of"),
            ),
            (
                "the root of the workdir",
                raw("/w", &["/w", "/data"]),
                request("", &[], &["/w"]),
                Err("outside every root"),
            ),
        ];
        for (name, before, req, wanted) in cases {
            match (apply(&before, &req, dirs), wanted) {
                (Ok(next), Ok((workdir, roots))) => {
                    assert_eq!(next.workdir, workdir, "{name}");
                    assert_eq!(next.roots, roots, "{name}");
                }
                (Err(Refused(why)), Err(w)) => assert!(why.contains(w), "{name}: {why}"),
                (got, _) => panic!("{name}: {got:?}"),
            }
        }
    }
}
