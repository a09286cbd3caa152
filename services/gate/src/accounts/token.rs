//! `AgentToken`: an account's agent token handed to its owner (`glovebox token show --system`,
//! through the broker's approve socket, which knows the owner by uid). The token is read from
//! the state, which the owner cannot read; the audit row names the uid, never the token.

use std::path::Path;

use glovebox_config::is_valid_account_id;
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
                self.audit_account(account, "token_refused", uid, why.clone())
                    .await;
                return Err(Status::failed_precondition(why));
            }
        };
        self.audit_account(
            account,
            "token_shown",
            uid,
            "agent token read by its owner".into(),
        )
        .await;
        Ok(token)
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
