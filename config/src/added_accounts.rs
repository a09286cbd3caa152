//! Accounts added at run time (`glovebox account add`): `<state>/accounts.yaml`, owned and
//! written (atomically, 0600) by the gate alone, in the same format as `glovebox.yaml`'s
//! `accounts:` and validated by the same rules. [`merge`] puts them after the config's accounts;
//! an id in both is refused, so neither file can shadow the other.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Account, Config, ConfigError, RawAccount, StateDir, validate_account};

/// Most accounts `accounts.yaml` may hold.
pub const MAX_ADDED_ACCOUNTS: usize = 64;
/// Longest `accounts.yaml` read.
pub const MAX_ADDED_ACCOUNTS_BYTES: u64 = 1024 * 1024;

/// `accounts.yaml` as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAddedAccounts {
    #[serde(default)]
    pub accounts: Vec<RawAccount>,
}

impl RawAddedAccounts {
    /// Parses and checks the text of `accounts.yaml` read from `path`: each account valid, no id
    /// twice, at most [`MAX_ADDED_ACCOUNTS`].
    pub fn parse(text: &str, path: &Path) -> Result<(RawAddedAccounts, Vec<Account>), ConfigError> {
        let invalid = |line: Option<usize>, message: String| ConfigError::Invalid {
            path: path.to_owned(),
            line,
            message,
        };
        let raw: RawAddedAccounts = serde_yaml::from_str(text)
            .map_err(|e| invalid(e.location().map(|l| l.line()), e.to_string()))?;
        if raw.accounts.len() > MAX_ADDED_ACCOUNTS {
            return Err(invalid(
                None,
                format!("accounts: at most {MAX_ADDED_ACCOUNTS} accounts may be added"),
            ));
        }
        let mut accounts: Vec<Account> = Vec::new();
        for (i, a) in raw.accounts.iter().enumerate() {
            let account =
                validate_account(&format!("accounts[{i}]"), a).map_err(|m| invalid(None, m))?;
            if accounts.iter().any(|b| b.id == account.id) {
                return Err(invalid(
                    None,
                    format!("accounts[{i}].id: duplicate account {:?}", a.id),
                ));
            }
            accounts.push(account);
        }
        Ok((raw, accounts))
    }

    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        Ok(format!(
            "# Accounts added with `glovebox account add`; written by glovebox, do not edit while it\n\
             # runs. Tokens are stored as SHA-256 hashes.\n{}",
            serde_yaml::to_string(self)?
        ))
    }
}

/// Puts `added` after `config`'s accounts; an id in both is an error naming both files.
pub fn merge(config: &mut Config, added: Vec<Account>, path: &Path) -> Result<(), ConfigError> {
    for a in added {
        if config.account(&a.id).is_some() {
            return Err(ConfigError::Invalid {
                path: path.to_owned(),
                line: None,
                message: format!(
                    "account {:?} is also in glovebox.yaml: an id may be in one file only",
                    a.id
                ),
            });
        }
        config.accounts.push(a);
    }
    Ok(())
}

impl StateDir {
    /// `<state>/accounts.yaml`: the accounts added at run time.
    pub fn added_accounts_file(&self) -> std::path::PathBuf {
        self.root.join("accounts.yaml")
    }

    /// The accounts added at run time, as written and validated (none if the file is missing).
    pub fn load_added_accounts(&self) -> Result<(RawAddedAccounts, Vec<Account>), ConfigError> {
        use std::io::Read;
        let path = self.added_accounts_file();
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok((RawAddedAccounts::default(), Vec::new()));
            }
            Err(e) => return Err(ConfigError::io(&path, e)),
        };
        let mut text = String::new();
        file.take(MAX_ADDED_ACCOUNTS_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| ConfigError::io(&path, e))?;
        if text.len() as u64 > MAX_ADDED_ACCOUNTS_BYTES {
            return Err(ConfigError::Invalid {
                path,
                line: None,
                message: format!("longer than {MAX_ADDED_ACCOUNTS_BYTES} bytes"),
            });
        }
        RawAddedAccounts::parse(&text, &path)
    }

    /// Validates and writes `accounts.yaml` atomically (0600).
    pub fn save_added_accounts(&self, raw: &RawAddedAccounts) -> Result<(), ConfigError> {
        let path = self.added_accounts_file();
        let text = raw.to_yaml().map_err(|e| ConfigError::Invalid {
            path: path.clone(),
            line: None,
            message: e.to_string(),
        })?;
        RawAddedAccounts::parse(&text, &path)?;
        crate::write_private_file(&path, text.as_bytes())
    }

    /// `glovebox.yaml` with the accounts added at run time after its own.
    pub fn load_merged_config(&self) -> Result<Config, ConfigError> {
        let mut config = self.load_config()?;
        let (_, added) = self.load_added_accounts()?;
        merge(&mut config, added, &self.added_accounts_file())?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(id: &str) -> RawAccount {
        RawAccount {
            id: id.into(),
            workdir: "/w".into(),
            run_as: None,
            owner: None,
            roots: vec![],
            job_env: vec![],
            pack_env: Vec::new(),
            sandbox: Default::default(),
            enabled: false,
            token_sha256: vec![hex::encode([1u8; 32])],
            approver_token_sha256: vec![],
        }
    }

    #[test]
    fn added_accounts_round_trip_and_merge_after_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        std::fs::write(
            state.config_file(),
            "accounts:\n  - id: a\n    workdir: /w\n",
        )
        .unwrap();
        assert!(state.load_added_accounts().unwrap().1.is_empty());
        let added = RawAddedAccounts {
            accounts: vec![raw("b")],
        };
        state.save_added_accounts(&added).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(state.added_accounts_file())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(state.load_added_accounts().unwrap().0, added);
        let merged = state.load_merged_config().unwrap();
        let ids: Vec<&str> = merged.accounts.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
    }

    #[test]
    fn bad_added_accounts_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        std::fs::write(
            state.config_file(),
            "accounts:\n  - id: a\n    workdir: /w\n",
        )
        .unwrap();
        let cases: Vec<(&str, RawAddedAccounts, &str)> = vec![
            (
                "in both files",
                RawAddedAccounts {
                    accounts: vec![raw("a")],
                },
                "also in glovebox.yaml",
            ),
            (
                "twice",
                RawAddedAccounts {
                    accounts: vec![raw("b"), raw("b")],
                },
                "duplicate account",
            ),
            (
                "bad id",
                RawAddedAccounts {
                    accounts: vec![raw("../x")],
                },
                "id: expected",
            ),
            (
                "relative workdir",
                RawAddedAccounts {
                    accounts: vec![RawAccount {
                        workdir: "w".into(),
                        ..raw("c")
                    }],
                },
                "workdir: expected an absolute path",
            ),
            (
                "root as run_as",
                RawAddedAccounts {
                    accounts: vec![RawAccount {
                        run_as: Some("root".into()),
                        ..raw("c")
                    }],
                },
                "run_as",
            ),
            (
                "too many",
                RawAddedAccounts {
                    accounts: (0..=MAX_ADDED_ACCOUNTS)
                        .map(|i| raw(&format!("x{i}")))
                        .collect(),
                },
                "at most",
            ),
        ];
        for (name, file, wanted) in cases {
            let text = file.to_yaml().unwrap();
            std::fs::write(state.added_accounts_file(), text).unwrap();
            let err = state.load_merged_config().unwrap_err().to_string();
            assert!(err.contains(wanted), "{name}: {err}");
        }
        std::fs::write(state.added_accounts_file(), "accounts: []\nextra: 1\n").unwrap();
        assert!(state.load_added_accounts().is_err(), "unknown fields");
    }
}
