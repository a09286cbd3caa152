//! Each account's current policy: loaded from `permissions.yaml`, reloaded when the file changes,
//! and updated when an approver answers "always".
//!
//! A hand edit that does not parse keeps the last good policy (and the error is reported); an
//! account whose file never parsed is denied everything until it is fixed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use glovebox_config::{StateDir, write_private_file};
use glovebox_policy::{Domain, Kind, Policy, RawPolicy, RawRule, Section, edit, exact_path_rule};

/// What identifies one version of a file on disk.
type Stamp = (SystemTime, u64, u64);

struct Cached {
    stamp: Option<Stamp>,
    policy: Option<Arc<Policy>>,
    error: Option<String>,
}

struct AccountEntry {
    workdir: String,
    file: PathBuf,
    cache: Mutex<Cached>,
}

/// The policy of every configured account.
pub struct AccountPolicies {
    accounts: HashMap<String, AccountEntry>,
    protected: Vec<String>,
}

/// An account's policy as of now, and the problem with its file if there is one.
pub struct Current {
    pub policy: Option<Arc<Policy>>,
    pub error: Option<String>,
}

impl AccountPolicies {
    /// `accounts` are (id, canonical workdir); `protected` are canonical directories on the floor.
    pub fn new(
        state: &StateDir,
        accounts: Vec<(String, String)>,
        protected: Vec<String>,
    ) -> AccountPolicies {
        let accounts = accounts
            .into_iter()
            .map(|(id, workdir)| {
                let file = state.permissions_file(&id);
                let entry = AccountEntry {
                    workdir,
                    file,
                    cache: Mutex::new(Cached {
                        stamp: None,
                        policy: None,
                        error: None,
                    }),
                };
                (id, entry)
            })
            .collect();
        AccountPolicies {
            accounts,
            protected,
        }
    }

    pub fn workdir(&self, account: &str) -> Option<&str> {
        self.accounts.get(account).map(|e| e.workdir.as_str())
    }

    /// The account's policy, reloading the file if it changed. `None` for unknown accounts.
    pub fn current(&self, account: &str) -> Option<Current> {
        let entry = self.accounts.get(account)?;
        let mut cache = entry.cache.lock().unwrap_or_else(|p| p.into_inner());
        let stamp = stamp_of(&entry.file);
        if cache.policy.is_none() || stamp != cache.stamp {
            cache.stamp = stamp;
            match self.load(entry) {
                Ok(policy) => {
                    if cache.policy.is_some() {
                        tracing::info!(account, file = %entry.file.display(), "reloaded policy");
                    }
                    cache.policy = Some(Arc::new(policy));
                    cache.error = None;
                }
                Err(error) => {
                    tracing::error!(account, %error, "policy file is invalid; keeping the last good policy");
                    cache.error = Some(error);
                }
            }
        }
        Some(Current {
            policy: cache.policy.clone(),
            error: cache.error.clone(),
        })
    }

    fn load(&self, entry: &AccountEntry) -> Result<Policy, String> {
        let text = match std::fs::read_to_string(&entry.file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(format!("{}: {e}", entry.file.display())),
        };
        let raw = RawPolicy::parse(&text).map_err(|e| format!("{}: {e}", entry.file.display()))?;
        Policy::compile(&raw, &entry.workdir, self.protected.clone())
            .map_err(|e| format!("{}: {e}", entry.file.display()))
    }

    /// Persists an exact allow rule for each (domain, canonical path) and reloads the policy.
    pub fn add_exact_rules(
        &self,
        account: &str,
        subjects: &[(Domain, String)],
    ) -> Result<usize, String> {
        let entry = self
            .accounts
            .get(account)
            .ok_or_else(|| format!("unknown account {account:?}"))?;
        let mut cache = entry.cache.lock().unwrap_or_else(|p| p.into_inner());
        let text = match std::fs::read_to_string(&entry.file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(format!("{}: {e}", entry.file.display())),
        };
        let mut text = text;
        let mut added = 0;
        for (domain, path) in subjects {
            let rule = RawRule::Pattern(exact_path_rule(path));
            let edited = edit::add_rule(&text, Section::for_domain(*domain), Kind::Allow, &rule)
                .map_err(|e| format!("{}: {e}", entry.file.display()))?;
            if let Some(e) = edited {
                text = e.text;
                added += 1;
            }
        }
        if added > 0 {
            write_private_file(&entry.file, text.as_bytes()).map_err(|e| e.to_string())?;
        }
        // Force a reload on the next decision.
        cache.stamp = None;
        cache.policy = None;
        drop(cache);
        let _ = self.current(account);
        Ok(added)
    }
}

fn stamp_of(path: &std::path::Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len(), meta.ino()))
}
