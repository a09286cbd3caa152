//! Accounts added at run time (`glovebox account add`): `<state>/accounts.yaml`, owned and
//! written (atomically, 0600) by the gate alone, in the same format as `glovebox.yaml`'s
//! `accounts:` and validated by the same rules. [`merge`] puts them after the config's accounts.
//!
//! The file also holds the accounts of `glovebox.yaml` changed while glovebox runs (`glovebox
//! account set-workdir|add-root|remove-root|set-owner`, and in system mode, where the gate may
//! not write root's `glovebox.yaml`, a token rotation or a switch): the gate *takes the account
//! over*, writing its whole entry here with the [`fingerprint`] of the file's entry it started
//! from (`taken_over`). That entry replaces the file's for as long as the file's entry is what it
//! was; once an administrator edits or removes it there, the file wins again. So every account
//! is administrable at run time, the latest change rules, and an id is never in effect twice.

use std::collections::BTreeMap;
use std::path::Path;

use sha2::{Digest, Sha256};

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
    /// Accounts of `glovebox.yaml` taken over at run time: id → the [`fingerprint`] of the
    /// file's entry when it was. Each names an entry of `accounts`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub taken_over: BTreeMap<String, String>,
}

/// What identifies one version of an account's entry: the SHA-256 (hex) of its YAML.
pub fn fingerprint(entry: &RawAccount) -> String {
    let yaml = serde_yaml::to_string(entry).unwrap_or_default();
    hex::encode(Sha256::digest(yaml.as_bytes()))
}

/// Where the entry in effect for an account comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `glovebox.yaml`, as written there.
    File,
    /// `accounts.yaml`: added at run time.
    Added,
    /// `accounts.yaml`: a `glovebox.yaml` account changed at run time, whose file entry is still
    /// the one it was taken over from.
    TakenOver,
}

/// Where account `id`'s entry in effect comes from, given the file's entries and the added
/// accounts (`None`: no such account).
pub fn source(file: &[RawAccount], added: &RawAddedAccounts, id: &str) -> Option<Source> {
    let in_file = file.iter().find(|a| a.id == id);
    let in_added = added.accounts.iter().any(|a| a.id == id);
    match (in_file, in_added, added.taken_over.get(id)) {
        (Some(entry), true, Some(was)) if fingerprint(entry) == *was => Some(Source::TakenOver),
        (Some(_), _, _) => Some(Source::File),
        (None, true, None) => Some(Source::Added),
        // Taken over, then removed from the file: the file's removal is the later change.
        (None, _, _) => None,
    }
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
        for (id, was) in &raw.taken_over {
            if !raw.accounts.iter().any(|a| &a.id == id) {
                return Err(invalid(
                    None,
                    format!("taken_over: {id:?} is not one of the accounts"),
                ));
            }
            if was.len() != 64 || !was.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(invalid(
                    None,
                    format!("taken_over.{id}: expected 64 hex digits"),
                ));
            }
        }
        let mut accounts: Vec<Account> = Vec::new();
        for (i, a) in raw.accounts.iter().enumerate() {
            let account =
                validate_account(&format!("accounts[{i}]"), a).map_err(|m| invalid(None, m.0))?;
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

    /// The entry in effect for account `id` (`file` being `glovebox.yaml`'s entries): where a
    /// run-time change of it starts from.
    pub fn entry_in_effect(&self, file: &[RawAccount], id: &str) -> Option<RawAccount> {
        match source(file, self, id)? {
            Source::File => file.iter().find(|a| a.id == id).cloned(),
            Source::Added | Source::TakenOver => self.accounts.iter().find(|a| a.id == id).cloned(),
        }
    }

    /// Writes `next` as the entry in effect for its account: in place, or (for an account of
    /// `glovebox.yaml` not taken over, or taken over from an entry the file has changed since)
    /// taking it over from the file's entry as it is now. Returns whether it took it over.
    pub fn put(&mut self, file: &[RawAccount], next: RawAccount) -> bool {
        let id = next.id.clone();
        let from_file = match source(file, self, &id) {
            Some(Source::File) => file.iter().find(|a| a.id == id),
            _ => None,
        };
        if let Some(entry) = from_file {
            self.taken_over.insert(id.clone(), fingerprint(entry));
        }
        match self.accounts.iter_mut().find(|a| a.id == id) {
            Some(slot) => *slot = next,
            None => self.accounts.push(next),
        }
        from_file.is_some()
    }

    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        Ok(format!(
            "# Accounts added with `glovebox account add`; written by glovebox, do not edit while it\n\
             # runs. Tokens are stored as SHA-256 hashes.\n{}",
            serde_yaml::to_string(self)?
        ))
    }
}

/// Puts the accounts of `accounts.yaml` (`added`, as written, and `validated`, the same
/// validated) into `config`, whose file entries are `file`: an added account after the file's, a
/// taken-over one in place of the file's while that is still the entry it took over (see
/// [`source`]). An id in both files that is not taken over is an error naming both.
pub fn merge(
    config: &mut Config,
    file: &[RawAccount],
    added: &RawAddedAccounts,
    validated: Vec<Account>,
    path: &Path,
) -> Result<(), ConfigError> {
    for a in validated {
        let position = config.accounts.iter().position(|b| b.id == a.id);
        match (source(file, added, &a.id), position) {
            (Some(Source::TakenOver), Some(i)) => config.accounts[i] = a,
            (Some(Source::Added), None) => config.accounts.push(a),
            (Some(Source::File), Some(_)) if !added.taken_over.contains_key(a.id.as_str()) => {
                return Err(ConfigError::Invalid {
                    path: path.to_owned(),
                    line: None,
                    message: format!(
                        "account {:?} is also in glovebox.yaml: an id may be in one file only",
                        a.id
                    ),
                });
            }
            // Taken over from a file entry edited or removed since: the file rules.
            _ => {}
        }
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

    /// `glovebox.yaml` with the accounts of `accounts.yaml` in it (see [`merge`]).
    pub fn load_merged_config(&self) -> Result<Config, ConfigError> {
        let (mut config, file) = self.load_config_and_entries()?;
        let (raw, added) = self.load_added_accounts()?;
        merge(&mut config, &file, &raw, added, &self.added_accounts_file())?;
        Ok(config)
    }

    /// Where account `id`'s entry in effect comes from (`None`: no such account).
    pub fn account_source(&self, id: &str) -> Result<Option<Source>, ConfigError> {
        let (_, file) = self.load_config_and_entries()?;
        let (raw, _) = self.load_added_accounts()?;
        Ok(source(&file, &raw, id))
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
            ..Default::default()
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
    fn a_taken_over_account_replaces_the_files_entry_until_the_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        let file = "accounts:\n  - id: a\n    workdir: /w\n  - id: z\n    workdir: /z\n";
        std::fs::write(state.config_file(), file).unwrap();
        let (_, entries) = state.load_config_and_entries().unwrap();
        let mut changed = RawAccount {
            workdir: "/v".into(),
            ..entries[0].clone()
        };
        changed.roots = vec!["/v".into()];
        let added = RawAddedAccounts {
            accounts: vec![changed, raw("b")],
            taken_over: [("a".to_owned(), fingerprint(&entries[0]))].into(),
        };
        state.save_added_accounts(&added).unwrap();
        let workdirs = |state: &StateDir| {
            let merged = state.load_merged_config().unwrap();
            merged
                .accounts
                .iter()
                .map(|a| format!("{}={}", a.id, a.workdir.display()))
                .collect::<Vec<_>>()
        };
        // In place of the file's entry, in the file's order; the added one after.
        assert_eq!(workdirs(&state), ["a=/v", "z=/z", "b=/w"]);
        assert_eq!(state.account_source("a").unwrap(), Some(Source::TakenOver));
        assert_eq!(state.account_source("z").unwrap(), Some(Source::File));
        assert_eq!(state.account_source("b").unwrap(), Some(Source::Added));
        // An administrator edits the file's entry: the file wins again.
        std::fs::write(state.config_file(), file.replace("/w\n", "/u\n")).unwrap();
        assert_eq!(workdirs(&state), ["a=/u", "z=/z", "b=/w"]);
        assert_eq!(state.account_source("a").unwrap(), Some(Source::File));
        // ... or removes it: the account is gone.
        std::fs::write(
            state.config_file(),
            "accounts:\n  - id: z\n    workdir: /z\n",
        )
        .unwrap();
        assert_eq!(workdirs(&state), ["z=/z", "b=/w"]);
        assert_eq!(state.account_source("a").unwrap(), None);
        // A change of the file's (new) entry takes it over again, from the entry as it is now.
        std::fs::write(state.config_file(), file.replace("/w\n", "/u\n")).unwrap();
        let (_, entries) = state.load_config_and_entries().unwrap();
        let (mut store, _) = state.load_added_accounts().unwrap();
        let next = store.entry_in_effect(&entries, "a").unwrap();
        assert_eq!(next.workdir, "/u");
        assert!(store.put(
            &entries,
            RawAccount {
                workdir: "/t".into(),
                roots: vec![],
                ..next
            }
        ));
        state.save_added_accounts(&store).unwrap();
        assert_eq!(workdirs(&state), ["a=/t", "z=/z", "b=/w"]);
        // Then a change of the taken-over entry is made in place.
        let next = store.entry_in_effect(&entries, "a").unwrap();
        assert!(!store.put(
            &entries,
            RawAccount {
                enabled: true,
                ..next
            }
        ));
        assert_eq!(store.accounts.iter().filter(|a| a.id == "a").count(), 1);
        // A takeover naming no entry, or with a malformed fingerprint, is refused.
        for (taken_over, wanted) in [
            (("q", "0".repeat(64)), "not one of the accounts"),
            (("b", "zz".to_owned()), "64 hex digits"),
        ] {
            let bad = RawAddedAccounts {
                accounts: vec![raw("b")],
                taken_over: [(taken_over.0.to_owned(), taken_over.1)].into(),
            };
            let err = RawAddedAccounts::parse(&bad.to_yaml().unwrap(), Path::new("/s"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(wanted), "{err}");
        }
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
                    ..Default::default()
                },
                "also in glovebox.yaml",
            ),
            (
                "twice",
                RawAddedAccounts {
                    accounts: vec![raw("b"), raw("b")],
                    ..Default::default()
                },
                "duplicate account",
            ),
            (
                "bad id",
                RawAddedAccounts {
                    accounts: vec![raw("../x")],
                    ..Default::default()
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
                    ..Default::default()
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
                    ..Default::default()
                },
                "run_as",
            ),
            (
                "too many",
                RawAddedAccounts {
                    accounts: (0..=MAX_ADDED_ACCOUNTS)
                        .map(|i| raw(&format!("x{i}")))
                        .collect(),
                    ..Default::default()
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
