//! What the gate keeps for MCP tool packs, because the state directory is its own and pack hosts
//! may run as other users: each account's `mcp.json` (followed as it changes and served to the
//! account's pack host), project pack trust ([`trust`]) and pack secrets ([`secrets`]).

pub mod secrets;
pub mod trust;

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};

use glovebox_config::mcp_json::MAX_FILE_BYTES;
use glovebox_config::{AccountId, StateDir};
use glovebox_proto::v1::PackConfig;
use tokio::sync::watch;

pub struct PackState {
    pub trust: trust::TrustStore,
    pub secrets: secrets::SecretStore,
    /// Each account's `mcp.json`, followed; an account removed at run time drops its sender, so
    /// its pack host's stream ends.
    configs: RwLock<HashMap<AccountId, watch::Sender<PackConfig>>>,
    /// Held while an account's `mcp.json` is read, changed and written back, so that two edits
    /// never lose one.
    edits: Mutex<()>,
    state: StateDir,
}

/// Why an account's `mcp.json` was not changed.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// The change is not valid, or the file as it is cannot be edited (said to the editor).
    #[error("{0}")]
    Refused(String),
    /// The file could not be written.
    #[error("could not write {path}: {why}")]
    Write { path: String, why: String },
}

/// An account's `mcp.json` as the pack host is told it.
pub fn read_config(state: &StateDir, account: &str) -> PackConfig {
    use std::io::Read;
    let path = state.mcp_json_file(account);
    let mut config = PackConfig {
        path: path.display().to_string(),
        ..Default::default()
    };
    match std::fs::File::open(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => config.error = e.to_string(),
        Ok(f) => {
            let mut text = String::new();
            match f.take(MAX_FILE_BYTES as u64 + 1).read_to_string(&mut text) {
                Ok(_) if text.len() > MAX_FILE_BYTES => {
                    config.error = format!("larger than {MAX_FILE_BYTES} bytes; not read")
                }
                Ok(_) => {
                    config.exists = true;
                    config.text = text;
                }
                Err(e) => config.error = e.to_string(),
            }
        }
    }
    config
}

impl PackState {
    pub fn new(state: StateDir, accounts: impl IntoIterator<Item = AccountId>) -> PackState {
        let secrets = secrets::SecretStore::new(state.clone());
        let configs = accounts
            .into_iter()
            .map(|a| {
                secrets.learn_all(&a);
                let (tx, _) = watch::channel(read_config(&state, &a));
                (a, tx)
            })
            .collect();
        PackState {
            trust: trust::TrustStore::new(state.clone()),
            secrets,
            configs: RwLock::new(configs),
            edits: Mutex::new(()),
            state,
        }
    }

    /// Changes `account`'s own `mcp.json` with `edit` (given its text, empty if there is none;
    /// `None` for no change) and tells the account's followers at once. A file that cannot be
    /// read whole is never overwritten. Whether the file changed. Blocking.
    pub fn edit(
        &self,
        account: &str,
        edit: impl FnOnce(&str) -> Result<Option<String>, String>,
    ) -> Result<bool, EditError> {
        let _one_at_a_time = self.edits.lock().unwrap_or_else(|p| p.into_inner());
        let now = read_config(&self.state, account);
        if !now.error.is_empty() {
            return Err(EditError::Refused(format!(
                "{} cannot be read ({}); fix or remove it first",
                now.path, now.error
            )));
        }
        let Some(out) = edit(&now.text).map_err(EditError::Refused)? else {
            return Ok(false);
        };
        if out == now.text {
            return Ok(false);
        }
        if out.len() > MAX_FILE_BYTES {
            return Err(EditError::Refused(format!(
                "the account's mcp.json would be larger than {MAX_FILE_BYTES} bytes"
            )));
        }
        let path = self.state.mcp_json_file(account);
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                glovebox_config::write_private_file(&path, out.as_bytes())
                    .map_err(|e| e.to_string())
            });
        written.map_err(|why| EditError::Write {
            path: path.display().to_string(),
            why,
        })?;
        // Followers get what was written (the file is not read back).
        if let Some(tx) = self
            .configs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(account)
        {
            tx.send_replace(PackConfig {
                exists: true,
                text: out,
                error: String::new(),
                ..now
            });
        }
        Ok(true)
    }

    /// The accounts' secret values as they become known, for masking what others read.
    pub fn known_secrets(&self) -> glovebox_redact::KnownSecrets {
        self.secrets.known()
    }

    /// Reads every account's `mcp.json` again; followers of one that changed are told.
    pub fn refresh(&self) {
        let configs = self.configs.read().unwrap_or_else(|p| p.into_inner());
        for (account, tx) in configs.iter() {
            let now = read_config(&self.state, account);
            tx.send_if_modified(|old| {
                let changed = *old != now;
                *old = now;
                changed
            });
        }
    }

    /// Follows `account`'s `mcp.json` (`None` for an unknown account).
    pub fn follow(&self, account: &str) -> Option<watch::Receiver<PackConfig>> {
        self.configs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(account)
            .map(watch::Sender::subscribe)
    }

    /// Follows the `mcp.json` of `accounts` from now on, and no other's: a new account's file is
    /// read, a removed account's followers are told it ended.
    pub fn set_accounts(&self, accounts: &[AccountId]) {
        let mut configs = self.configs.write().unwrap_or_else(|p| p.into_inner());
        configs.retain(|a, _| accounts.contains(a));
        for a in accounts {
            if !configs.contains_key(a) {
                let (tx, _) = watch::channel(read_config(&self.state, a));
                configs.insert(a.clone(), tx);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn followers_see_the_file_and_each_change() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        std::fs::create_dir_all(state.account_dir("a")).unwrap();
        let packs = PackState::new(state.clone(), ["a".parse().unwrap()]);
        let mut rx = packs.follow("a").unwrap();
        assert!(!rx.borrow_and_update().exists);
        assert!(packs.follow("b").is_none());
        std::fs::write(state.mcp_json_file("a"), r#"{"mcpServers": {}}"#).unwrap();
        packs.refresh();
        assert!(rx.has_changed().unwrap());
        let now = rx.borrow_and_update().clone();
        assert!(now.exists && now.text.contains("mcpServers"));
        packs.refresh();
        assert!(!rx.has_changed().unwrap(), "an unchanged file is not news");
        std::fs::write(state.mcp_json_file("a"), vec![b' '; MAX_FILE_BYTES + 1]).unwrap();
        assert!(!read_config(&state, "a").error.is_empty());
    }

    #[test]
    fn an_account_added_is_followed_and_a_removed_ones_followers_end() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        std::fs::create_dir_all(state.account_dir("b")).unwrap();
        std::fs::write(state.mcp_json_file("b"), r#"{"mcpServers": {}}"#).unwrap();
        let packs = PackState::new(state.clone(), ["a".parse().unwrap()]);
        let a = packs.follow("a").unwrap();
        packs.set_accounts(&["b".parse().unwrap()]);
        assert!(a.has_changed().is_err(), "a's follower is told it ended");
        assert!(packs.follow("a").is_none());
        assert!(packs.follow("b").unwrap().borrow().exists);
        // Kept accounts keep their followers.
        let b = packs.follow("b").unwrap();
        packs.set_accounts(&["b".parse().unwrap(), "c".parse().unwrap()]);
        assert!(!b.has_changed().unwrap());
        assert!(packs.follow("c").is_some());
    }

    #[test]
    fn an_edit_is_written_told_at_once_and_never_overwrites_a_file_it_cannot_read() {
        use glovebox_config::mcp_json;
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        let packs = PackState::new(state.clone(), ["a".parse().unwrap()]);
        let mut rx = packs.follow("a").unwrap();
        rx.borrow_and_update();
        let def = serde_json::json!({"command": "/bin/true"});
        let add = |text: &str| {
            mcp_json::with_pack(text, "t", def.clone())
                .map(Some)
                .map_err(|e| e.0)
        };
        // The account's directory is made when it is missing; followers hear of it at once.
        assert!(packs.edit("a", add).unwrap());
        assert!(rx.has_changed().unwrap());
        assert!(rx.borrow_and_update().text.contains("/bin/true"));
        assert!(
            !packs.edit("a", add).unwrap(),
            "the same pack again is no change"
        );
        assert!(!rx.has_changed().unwrap());
        // An invalid change is refused with its reason, and the file is left as it was.
        let before = std::fs::read_to_string(state.mcp_json_file("a")).unwrap();
        let bad = |text: &str| {
            mcp_json::with_pack(text, "a__b", def.clone())
                .map(Some)
                .map_err(|e| e.0)
        };
        let refused = packs.edit("a", bad).unwrap_err().to_string();
        assert!(refused.contains("pack name"), "{refused}");
        assert_eq!(
            std::fs::read_to_string(state.mcp_json_file("a")).unwrap(),
            before
        );
        // A file too large to read whole is not replaced by an edit of its first part.
        std::fs::write(state.mcp_json_file("a"), vec![b' '; MAX_FILE_BYTES + 1]).unwrap();
        let refused = packs.edit("a", add).unwrap_err().to_string();
        assert!(refused.contains("fix or remove it first"), "{refused}");
        assert_eq!(
            std::fs::metadata(state.mcp_json_file("a")).unwrap().len(),
            MAX_FILE_BYTES as u64 + 1
        );
    }
}
