//! An added account's tokens. `AgentToken`: its agent token handed to its owner (`glovebox token
//! show --system`, through the broker's approve socket, which knows the owner by uid); the token
//! is read from the state, which the owner cannot read. `RotateToken`: a new agent or approver
//! token (`glovebox token rotate`, on the admin socket). Audit rows name the uid, never a token.

use glovebox_proto::audit_row::Outcome;
use std::path::Path;

use glovebox_config::is_valid_account_id;
use glovebox_proto::v1 as pb;
use tonic::Status;

use super::internal;
use crate::service::GateState;

/// Longest token file read.
const MAX_TOKEN_FILE_BYTES: u64 = 256;

/// A token file's token: one line of hex, as glovebox writes them.
fn read_token(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_TOKEN_FILE_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| {
            format!(
                "the account has no token glovebox keeps ({}: {e}); its administrator holds it",
                path.display()
            )
        })?;
    if text.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(format!("{} is too long to hold a token", path.display()));
    }
    let token = text.trim();
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("{} does not hold a token", path.display()));
    }
    Ok(token.to_owned())
}

impl GateState {
    /// `AgentToken`: the agent token of `account`, for its owner (`uid`, as the broker's approve
    /// socket saw it). Only a well-formed token of an account that exists is ever read out, and
    /// the audit row names the uid, never the token.
    pub(crate) async fn agent_token(&self, account: &str, uid: u32) -> Result<String, Status> {
        let state = &self.state_dir;
        let known = is_valid_account_id(account)
            && state
                .load_merged_config()
                .map_err(internal)?
                .account(account)
                .is_some();
        if !known {
            return Err(Status::not_found(format!("no account {account:?}")));
        }
        let path = state.token_file(account);
        let token = match read_token(&path) {
            Ok(token) => token,
            Err(why) => {
                self.audit_account(account, Outcome::TokenRefused, uid, why.clone())
                    .await;
                return Err(Status::failed_precondition(why));
            }
        };
        self.audit_account(
            account,
            Outcome::TokenShown,
            uid,
            "agent token read by its owner".into(),
        )
        .await;
        Ok(token)
    }
}

impl GateState {
    /// `RotateToken`: a new token for one role of an added account. The file is written first:
    /// if the entry cannot be written, the old token (which its agents hold) still works.
    /// Accounts of `glovebox.yaml` are refused: their hashes are in that file, which `glovebox
    /// token rotate` rewrites itself in user mode (in system mode root owns it).
    pub(crate) async fn rotate_token(
        &self,
        request: pb::RotateTokenRequest,
        uid: u32,
    ) -> Result<pb::RotateTokenResponse, Status> {
        let _one = self.account_changes.lock().await;
        let state = &self.state_dir;
        let id = request.id.as_str();
        let role = if request.approver {
            "approver"
        } else {
            "agent"
        };
        let (_, file) = state.load_config_and_entries().map_err(internal)?;
        let (mut raw, _) = state.load_added_accounts().map_err(internal)?;
        let Some(mut entry) = raw.entry_in_effect(&file, id) else {
            let why = format!("no account {id:?}");
            let shown = if is_valid_account_id(id) { id } else { "" };
            self.audit_account(
                shown,
                Outcome::Refused,
                uid,
                format!("rotate {role} token: {why}"),
            )
            .await;
            return Err(Status::failed_precondition(why));
        };
        let token = glovebox_config::new_token().map_err(internal)?;
        let hashes = vec![hex::encode(glovebox_config::token_hash(&token))];
        let file_path = if request.approver {
            entry.approver_token_sha256 = hashes;
            state.approver_token_file(id)
        } else {
            entry.token_sha256 = hashes;
            state.token_file(id)
        };
        let took = self.put_entry(&mut raw, &file, entry);
        glovebox_config::create_private_dir(&state.account_dir(id)).map_err(internal)?;
        glovebox_config::write_private_file(&file_path, format!("{token}\n").as_bytes())
            .map_err(internal)?;
        if let Err(e) = state.save_added_accounts(&raw) {
            self.audit_account(
                id,
                Outcome::Refused,
                uid,
                format!("rotate {role} token: {e}"),
            )
            .await;
            return Err(Status::failed_precondition(e.to_string()));
        }
        if took {
            self.enablement.taken_over(id).map_err(internal)?;
        }
        self.reload_accounts(Some(id)).await;
        let detail = if took {
            format!("rotate {role} token (taken over from glovebox.yaml)")
        } else {
            format!("rotate {role} token")
        };
        self.audit_account(id, Outcome::TokenRotated, uid, detail)
            .await;
        Ok(pb::RotateTokenResponse {
            token_file: file_path.display().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_line_of_hex_is_a_token() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "abc123\n").unwrap();
        assert_eq!(read_token(&file).unwrap(), "abc123");
        for bad in ["", "\n", "not hex\n", "ab cd\n"] {
            std::fs::write(&file, bad).unwrap();
            assert!(read_token(&file).is_err(), "{bad:?}");
        }
        std::fs::write(&file, "a".repeat(1000)).unwrap();
        assert!(read_token(&file).unwrap_err().contains("too long"));
        assert!(
            read_token(&dir.path().join("none"))
                .unwrap_err()
                .contains("no token")
        );
    }
}
