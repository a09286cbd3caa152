//! Whether each account's tools are switched on: `enabled` in `glovebox.yaml`, owned by the gate.
//! The gate judges it (a switched-off account's calls are denied like any other decision, and
//! audited), tells the front doors what to list (`AccountInfo`), and is the one place it is
//! switched: the approver's `set_enabled` (through the broker) and the administrator's
//! `glovebox enable|disable` (through the admin socket) both write it here. A hand edit of the
//! file is seen at the next decision (one `stat`).

use std::collections::HashMap;
use std::sync::Mutex;

use glovebox_config::{ConfigError, FileStamp, StateDir, file_stamp};

pub struct Enablement {
    state: StateDir,
    /// The file's stamp when last read, and every account's switch.
    current: Mutex<(Option<FileStamp>, HashMap<String, bool>)>,
}

impl Enablement {
    /// `initial` is what the gate read at start.
    pub fn new(state: StateDir, initial: HashMap<String, bool>) -> Enablement {
        let stamp = file_stamp(&state.config_file());
        Enablement {
            state,
            current: Mutex::new((stamp, initial)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Option<FileStamp>, HashMap<String, bool>)> {
        crate::policies::lock(&self.current)
    }

    /// Whether `account`'s tools are on. Unknown accounts are off; a file that no longer parses
    /// keeps the last known switches.
    pub fn is_enabled(&self, account: &str) -> bool {
        let path = self.state.config_file();
        let stamp = file_stamp(&path);
        let mut current = self.lock();
        if stamp != current.0 {
            current.0 = stamp;
            match self.state.load_merged_config() {
                Ok(config) => {
                    current.1 = config
                        .accounts
                        .iter()
                        .map(|a| (a.id.clone(), a.enabled))
                        .collect();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not re-read enablement; keeping the last known")
                }
            }
        }
        current.1.get(account).copied().unwrap_or(false)
    }

    /// Takes every account's switch as the accounts now are (after an account was added or
    /// removed at run time): a removed account is off, as any unknown one.
    pub fn replace(&self, switches: HashMap<String, bool>) {
        self.lock().1 = switches;
    }

    /// Switches `account`'s tools on or off in `glovebox.yaml`. Returns whether it changed.
    pub fn set(&self, account: &str, enabled: bool) -> Result<bool, ConfigError> {
        let mut current = self.lock();
        let mut raw = self.state.load_raw_config()?;
        let Some(entry) = raw.accounts.iter_mut().find(|a| a.id == account) else {
            return self.set_added(&mut current, account, enabled);
        };
        let changed = entry.enabled != enabled;
        entry.enabled = enabled;
        if changed {
            self.state.save_raw_config(&raw)?;
        }
        current.0 = file_stamp(&self.state.config_file());
        current.1.insert(account.to_owned(), enabled);
        Ok(changed)
    }
}

impl Enablement {
    /// [`Enablement::set`] for an account added at run time: its entry in `accounts.yaml`.
    fn set_added(
        &self,
        current: &mut (Option<FileStamp>, HashMap<String, bool>),
        account: &str,
        enabled: bool,
    ) -> Result<bool, ConfigError> {
        let (mut raw, _) = self.state.load_added_accounts()?;
        let Some(entry) = raw.accounts.iter_mut().find(|a| a.id == account) else {
            return Err(ConfigError::Invalid {
                path: self.state.added_accounts_file(),
                line: None,
                message: format!("no account {account:?}"),
            });
        };
        let changed = entry.enabled != enabled;
        entry.enabled = enabled;
        if changed {
            self.state.save_added_accounts(&raw)?;
        }
        current.1.insert(account.to_owned(), enabled);
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_is_written_read_back_and_followed() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        std::fs::write(
            state.config_file(),
            "accounts:\n  - id: a\n    workdir: /w\n  - id: b\n    workdir: /v\n    enabled: true\n",
        )
        .unwrap();
        let initial = state
            .load_config()
            .unwrap()
            .accounts
            .iter()
            .map(|a| (a.id.clone(), a.enabled))
            .collect();
        let e = Enablement::new(state.clone(), initial);
        assert!(!e.is_enabled("a"));
        assert!(e.is_enabled("b"));
        assert!(!e.is_enabled("nobody"));
        assert!(e.set("a", true).unwrap());
        assert!(!e.set("a", true).unwrap());
        assert!(e.is_enabled("a"));
        assert!(state.load_config().unwrap().account("a").unwrap().enabled);
        assert!(e.set("nobody", true).is_err());
        // A hand edit is followed.
        let text = std::fs::read_to_string(state.config_file()).unwrap();
        glovebox_config::write_private_file(
            &state.config_file(),
            text.replace("enabled: true", "enabled: false").as_bytes(),
        )
        .unwrap();
        assert!(!e.is_enabled("b"));
    }

    #[test]
    fn an_added_accounts_switch_is_written_to_its_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        let config = "accounts:\n  - id: a\n    workdir: /w\n";
        std::fs::write(state.config_file(), config).unwrap();
        let hash = "11".repeat(32);
        glovebox_config::write_private_file(
            &state.added_accounts_file(),
            format!("accounts:\n  - id: b\n    workdir: /v\n    token_sha256: ['{hash}']\n")
                .as_bytes(),
        )
        .unwrap();
        let e = Enablement::new(state.clone(), HashMap::new());
        assert!(e.set("b", true).unwrap());
        assert!(e.is_enabled("b"));
        let (added, _) = state.load_added_accounts().unwrap();
        assert!(added.accounts.iter().any(|a| a.id == "b" && a.enabled));
        assert_eq!(
            std::fs::read_to_string(state.config_file()).unwrap(),
            config,
            "glovebox.yaml is not touched"
        );
        let err = e.set("nobody", true).unwrap_err().to_string();
        assert!(err.contains("accounts.yaml"), "{err}");
    }
}
