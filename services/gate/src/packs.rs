//! What the gate keeps for MCP tool packs, because the state directory is its own and pack hosts
//! may run as other users: each account's `mcp.json` (followed as it changes and served to the
//! account's pack host), project pack trust ([`trust`]) and pack secrets ([`secrets`]).

pub mod secrets;
pub mod trust;

use std::collections::HashMap;
use std::sync::RwLock;

use glovebox_config::StateDir;
use glovebox_config::mcp_json::MAX_FILE_BYTES;
use glovebox_proto::v1::PackConfig;
use tokio::sync::watch;

pub struct PackState {
    pub trust: trust::TrustStore,
    pub secrets: secrets::SecretStore,
    /// Each account's `mcp.json`, followed; an account removed at run time drops its sender, so
    /// its pack host's stream ends.
    configs: RwLock<HashMap<String, watch::Sender<PackConfig>>>,
    state: StateDir,
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
    pub fn new(state: StateDir, accounts: impl IntoIterator<Item = String>) -> PackState {
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
            state,
        }
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
    pub fn set_accounts(&self, accounts: &[String]) {
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
        let packs = PackState::new(state.clone(), ["a".to_owned()]);
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
        let packs = PackState::new(state.clone(), ["a".to_owned()]);
        let a = packs.follow("a").unwrap();
        packs.set_accounts(&["b".to_owned()]);
        assert!(a.has_changed().is_err(), "a's follower is told it ended");
        assert!(packs.follow("a").is_none());
        assert!(packs.follow("b").unwrap().borrow().exists);
        // Kept accounts keep their followers.
        let b = packs.follow("b").unwrap();
        packs.set_accounts(&["b".to_owned(), "c".to_owned()]);
        assert!(!b.has_changed().unwrap());
        assert!(packs.follow("c").is_some());
    }
}
