//! Project pack trust: what the account's approver answered when a workdir's
//! `.glovebox/mcp.json` wanted to start a pack. "Always" is stored in the state directory
//! (`<state>/accounts/<id>/trusted-packs.yaml`, never in the workdir a repository controls),
//! keyed by everything that decides what runs (`glovebox_proto::packs::trust_key`: workdir, name,
//! command, arguments, environment as written, working directory, network), so a changed command
//! asks again. "Once" lasts until the gate stops; "no" (the approver refused, or did not answer
//! in time) until the account's packs are reloaded. An unreadable file trusts nothing.

use glovebox_proto::audit_row::Outcome;
use std::collections::HashMap;
use std::sync::Mutex;

use glovebox_config::StateDir;
use glovebox_proto::packs::trust_key;
use glovebox_proto::v1::{Answer, TrustSubject};
use serde::{Deserialize, Serialize};

/// Most "always" entries one account keeps (the oldest go first).
pub const MAX_TRUSTED: usize = 256;

/// A project pack's trust.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    Always,
    Once,
    No,
    Unknown,
}

impl Trust {
    pub fn as_str(self) -> &'static str {
        match self {
            Trust::Always => "always",
            Trust::Once => "once",
            Trust::No => "no",
            Trust::Unknown => "unknown",
        }
    }

    /// The outcome of a `trust` row that records this answer.
    pub fn outcome(self) -> Outcome {
        match self {
            Trust::Always => Outcome::Always,
            Trust::Once => Outcome::Once,
            Trust::No => Outcome::No,
            Trust::Unknown => Outcome::Unknown,
        }
    }
}

/// One stored "always", readable by the user who opens the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    workdir: String,
    pack: String,
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<String>,
    cwd: String,
    network: String,
    /// An HTTP pack's endpoint (absent for stdio packs, and in files written before them).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    url: String,
    /// What the server may also read and write (absent when nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    read: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    write: Vec<String>,
}

impl Entry {
    fn of(s: &TrustSubject) -> Entry {
        Entry {
            workdir: s.workdir.clone(),
            pack: s.pack.clone(),
            command: s.command.clone(),
            args: s.args.clone(),
            env: s.env.clone(),
            cwd: s.cwd.clone(),
            network: s.network.clone(),
            url: s.url.clone(),
            read: s.read.clone(),
            write: s.write.clone(),
        }
    }

    fn subject(&self) -> TrustSubject {
        TrustSubject {
            workdir: self.workdir.clone(),
            pack: self.pack.clone(),
            command: self.command.clone(),
            args: self.args.clone(),
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            network: self.network.clone(),
            url: self.url.clone(),
            read: self.read.clone(),
            write: self.write.clone(),
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    trusted: Vec<Entry>,
}

pub struct TrustStore {
    state: StateDir,
    /// (account, key) → once or no.
    answers: Mutex<HashMap<(String, String), Trust>>,
    /// Serializes changes of the files.
    lock: Mutex<()>,
}

impl TrustStore {
    pub fn new(state: StateDir) -> TrustStore {
        TrustStore {
            state,
            answers: Mutex::new(HashMap::new()),
            lock: Mutex::new(()),
        }
    }

    fn read(&self, account: &str) -> File {
        let path = self.state.trusted_packs_file(account);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_yaml::from_str(&text).unwrap_or_else(|e| {
                tracing::error!(file = %path.display(), error = %e, "cannot read the trusted packs; trusting none");
                File::default()
            }),
            Err(_) => File::default(),
        }
    }

    /// What the approver said of `subject`.
    pub fn get(&self, account: &str, subject: &TrustSubject) -> Trust {
        let key = trust_key(subject);
        let answered = self
            .answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(account.to_owned(), key.clone()))
            .copied();
        if let Some(t) = answered {
            return t;
        }
        let stored = self
            .read(account)
            .trusted
            .iter()
            .any(|e| trust_key(&e.subject()) == key);
        if stored {
            Trust::Always
        } else {
            Trust::Unknown
        }
    }

    /// Forgets the account's refusals (its packs are reloaded, or its approver asked to be asked
    /// again); returns how many there were.
    pub fn forget_refusals(&self, account: &str) -> usize {
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        let before = answers.len();
        answers.retain(|(a, _), t| !(a == account && *t == Trust::No));
        before - answers.len()
    }

    /// Records the approver's answer; returns the trust it gives. An answer that is none (no
    /// approver was connected, the ask was withdrawn) records nothing: the pack stays waiting.
    pub fn resolve(
        &self,
        account: &str,
        subject: &TrustSubject,
        answer: Answer,
    ) -> Result<Trust, String> {
        let key = trust_key(subject);
        let remember = |t: Trust| {
            self.answers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((account.to_owned(), key.clone()), t);
        };
        match answer {
            Answer::Once => {
                remember(Trust::Once);
                Ok(Trust::Once)
            }
            Answer::Always => {
                self.store(account, subject)?;
                self.answers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&(account.to_owned(), key.clone()));
                Ok(Trust::Always)
            }
            Answer::Deny | Answer::Timeout => {
                remember(Trust::No);
                Ok(Trust::No)
            }
            _ => Ok(Trust::Unknown),
        }
    }

    fn store(&self, account: &str, subject: &TrustSubject) -> Result<(), String> {
        let _held = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut file = self.read(account);
        let key = trust_key(subject);
        if file.trusted.iter().any(|e| trust_key(&e.subject()) == key) {
            return Ok(());
        }
        file.trusted.push(Entry::of(subject));
        let excess = file.trusted.len().saturating_sub(MAX_TRUSTED);
        file.trusted.drain(..excess);
        let text = serde_yaml::to_string(&file).map_err(|e| e.to_string())?;
        let text = format!(
            "# Project packs this account's approver trusted \"always\". Each entry holds exactly\n\
             # what ran; a pack whose command, arguments, environment, directory or network\n\
             # differ asks again. Delete an entry to be asked again.\n{text}"
        );
        glovebox_config::write_private_file(
            &self.state.trusted_packs_file(account),
            text.as_bytes(),
        )
        .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(command: &str) -> TrustSubject {
        TrustSubject {
            workdir: "/w".into(),
            pack: "p".into(),
            command: command.into(),
            args: vec!["server.py".into()],
            env: vec!["T=${secret:t}".into()],
            cwd: "/w".into(),
            network: "none".into(),
            url: String::new(),
            read: Vec::new(),
            write: Vec::new(),
        }
    }

    #[test]
    fn answers_are_remembered_as_long_as_they_last() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("accounts/a")).unwrap();
        let state = StateDir::new(dir.path());
        let store = TrustStore::new(state.clone());
        let s = subject("python3");
        assert_eq!(store.get("a", &s), Trust::Unknown);
        // No approver: nothing recorded.
        assert_eq!(
            store.resolve("a", &s, Answer::NoApprover).unwrap(),
            Trust::Unknown
        );
        assert_eq!(store.get("a", &s), Trust::Unknown);
        assert_eq!(store.resolve("a", &s, Answer::Timeout).unwrap(), Trust::No);
        assert_eq!(store.get("a", &s), Trust::No);
        assert_eq!(store.get("b", &s), Trust::Unknown, "per account");
        assert_eq!(store.forget_refusals("b"), 0, "b refused nothing");
        assert_eq!(store.get("a", &s), Trust::No);
        assert_eq!(store.forget_refusals("a"), 1);
        assert_eq!(store.get("a", &s), Trust::Unknown);
        assert_eq!(store.resolve("a", &s, Answer::Once).unwrap(), Trust::Once);
        assert_eq!(store.get("a", &s), Trust::Once);
        // "Always" survives a new gate (a new store on the same state); once does not.
        store.resolve("a", &s, Answer::Always).unwrap();
        let again = TrustStore::new(state.clone());
        assert_eq!(again.get("a", &s), Trust::Always);
        assert_eq!(again.get("a", &subject("python3 -c evil")), Trust::Unknown);
        let file = std::fs::read_to_string(state.trusted_packs_file("a")).unwrap();
        assert!(file.contains("command: python3"), "{file}");
        // A file someone broke trusts nothing.
        std::fs::write(state.trusted_packs_file("a"), "trusted: [oops").unwrap();
        assert_eq!(TrustStore::new(state).get("a", &s), Trust::Unknown);
    }
}
