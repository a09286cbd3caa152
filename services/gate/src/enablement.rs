//! Whether each account's tools are switched on: `enabled` in `glovebox.yaml` (or, for an account
//! added at run time, in `accounts.yaml`), owned by the gate. The gate judges it (a switched-off
//! account's calls are denied like any other decision, and audited), tells the front doors what to
//! list (`AccountInfo`), and is the one place it is switched: the approver's `set_enabled`
//! (through the broker) and the administrator's `glovebox enable|disable` (through the admin
//! socket) both write it here. A hand edit of the file is seen at the next decision: it takes a
//! `stat` of the file, or none while the gate's file watcher proves nothing changed (as for the
//! policy files, `policies::freshness`: the file, its directory and every one above watched, and
//! the switches checked against the file since, with no event read in between).
//!
//! In system mode `glovebox.yaml` is root's, which the gate may not write: a switch of one of its
//! accounts goes to the gate's own `<state>/switches.yaml` instead, recorded with the value the
//! file had ([`Switch::over`]). It holds while the file still says that; once an administrator
//! edits the account's `enabled`, the file wins ([`apply_switches`]), so the latest change rules
//! either way and an approver's "off" is never lost to a restart.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;

use glovebox_config::{AccountId, ConfigError, FileStamp, StateDir, file_stamp};
use glovebox_watch::DirWatcher;

use crate::policies::freshness::{self, Checked, Freshness};
use serde::{Deserialize, Serialize};

/// Longest `switches.yaml` read.
const MAX_SWITCHES_BYTES: u64 = 1024 * 1024;

/// A run-time switch of a `glovebox.yaml` account (system mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Switch {
    pub enabled: bool,
    /// What `glovebox.yaml` said when the switch was made.
    pub over: bool,
}

/// `<state>/switches.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Switches {
    #[serde(default)]
    pub accounts: BTreeMap<String, Switch>,
}

/// What the switches make of the files' values: a switch holds while the file still says what it
/// said when the switch was made; one whose file has changed since is dropped (the edit is the
/// later change). Returns whether any was dropped.
pub fn apply_switches(from_files: &mut HashMap<AccountId, bool>, switches: &mut Switches) -> bool {
    let before = switches.accounts.len();
    switches
        .accounts
        .retain(|id, switch| match from_files.get_mut(id.as_str()) {
            Some(enabled) if *enabled == switch.over => {
                *enabled = switch.enabled;
                true
            }
            Some(_) => false,
            // Not an account of the files (now): kept for when it is again.
            None => true,
        });
    switches.accounts.len() != before
}

/// The switches as read at start; `None` if the file is there but unreadable (then every
/// `glovebox.yaml` account is off: a lost "off" must not turn into "on").
fn load_switches(path: &std::path::Path) -> Option<Switches> {
    use std::io::Read;
    let mut text = String::new();
    match std::fs::File::open(path) {
        Ok(f) => {
            if let Err(e) = f.take(MAX_SWITCHES_BYTES).read_to_string(&mut text) {
                tracing::error!(error = %e, "could not read the switches; glovebox.yaml's accounts are off");
                return None;
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(Switches::default()),
        Err(e) => {
            tracing::error!(error = %e, "could not read the switches; glovebox.yaml's accounts are off");
            return None;
        }
    }
    match serde_yaml::from_str::<Switches>(&text) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!(error = %e, "the switches do not parse; glovebox.yaml's accounts are off");
            None
        }
    }
}

/// What the gate knows of the switches.
struct Current {
    /// `glovebox.yaml`'s stamp when last read.
    stamp: Option<FileStamp>,
    /// Every account's switch, files and switches applied.
    enabled: HashMap<AccountId, bool>,
    /// The run-time switches (`None`: unreadable, see [`load_switches`]).
    switches: Option<Switches>,
    /// The accounts of `glovebox.yaml`.
    config_ids: Vec<AccountId>,
    /// When `stamp` was taken, if the watcher could tell.
    checked: Option<Checked>,
    /// When the watcher last found every way to `glovebox.yaml` watched, if it did.
    covered: Option<Checked>,
}

impl Current {
    /// Takes the files' values and applies the switches; writes them back if one was dropped.
    fn take(&mut self, mut from_files: HashMap<AccountId, bool>, state: &StateDir) {
        match &mut self.switches {
            Some(switches) => {
                if apply_switches(&mut from_files, switches)
                    && let Err(e) = save_switches(state, switches)
                {
                    tracing::error!(error = %e, "could not write the switches");
                }
            }
            None => {
                for id in &self.config_ids {
                    from_files.insert(id.clone(), false);
                }
            }
        }
        self.enabled = from_files;
    }
}

pub struct Enablement {
    state: StateDir,
    current: Mutex<Current>,
    /// The file watcher's word on `glovebox.yaml` ([`Enablement::watch_file`]).
    freshness: Freshness,
}

impl Enablement {
    /// `initial` is what the gate read at start (every account's `enabled` in the files).
    pub fn new(state: StateDir, initial: HashMap<AccountId, bool>) -> Enablement {
        let stamp = file_stamp(&state.config_file());
        let config_ids = state
            .load_config()
            .map(|c| c.accounts.into_iter().map(|a| a.id).collect())
            .unwrap_or_default();
        let mut current = Current {
            stamp,
            enabled: HashMap::new(),
            switches: load_switches(&switches_file(&state)),
            config_ids,
            checked: None,
            covered: None,
        };
        current.take(initial, &state);
        Enablement {
            state,
            current: Mutex::new(current),
            freshness: Freshness::default(),
        }
    }

    /// Watches every way to `glovebox.yaml` with `watcher` (again: call it after each change it
    /// reports), and lets decisions trust it from their next check of the file on, if that is all
    /// of them. The first call ties `watcher` to this for good.
    pub fn watch_file(&self, watcher: &mut DirWatcher) {
        let file = self.state.config_file();
        let (covered, watched) = self.freshness.watch(watcher, |watcher| {
            freshness::watch_lone_file(watcher, &file)
        });
        self.lock().covered = watched.covered(covered);
    }

    /// How many times a decision looked at `glovebox.yaml`.
    pub fn file_checks(&self) -> u64 {
        self.freshness.looks()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        crate::policies::lock(&self.current)
    }

    /// Whether `account`'s tools are on. Unknown accounts are off; a file that no longer parses
    /// keeps the last known switches.
    pub fn is_enabled(&self, account: &str) -> bool {
        {
            let current = self.lock();
            if self.freshness.trusted(current.covered, current.checked) {
                return current.enabled.get(account).copied().unwrap_or(false);
            }
        }
        // Before the file is looked at: what the watcher can vouch for from then on.
        let looked = self.freshness.looking();
        let path = self.state.config_file();
        let stamp = file_stamp(&path);
        let mut current = self.lock();
        current.checked = looked;
        if stamp != current.stamp {
            current.stamp = stamp;
            match (self.state.load_merged_config(), self.state.load_config()) {
                (Ok(merged), Ok(config)) => {
                    current.config_ids = config.accounts.into_iter().map(|a| a.id).collect();
                    current.take(
                        merged
                            .accounts
                            .iter()
                            .map(|a| (a.id.clone(), a.enabled))
                            .collect(),
                        &self.state,
                    );
                }
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(error = %e, "could not re-read enablement; keeping the last known")
                }
            }
        }
        current.enabled.get(account).copied().unwrap_or(false)
    }

    /// Takes every account's switch as the accounts now are (after an account was added or
    /// removed at run time): a removed account is off, as any unknown one.
    pub fn replace(&self, from_files: HashMap<AccountId, bool>) {
        self.lock().take(from_files, &self.state);
    }

    /// An account of `glovebox.yaml` was taken over into `accounts.yaml`, whose entry holds its
    /// switch from now on: its switch in `switches.yaml`, if any, goes.
    pub fn taken_over(&self, account: &str) -> Result<(), ConfigError> {
        let mut current = self.lock();
        if let Some(switches) = current.switches.as_mut()
            && switches.accounts.remove(account).is_some()
        {
            save_switches(&self.state, switches)?;
        }
        Ok(())
    }

    /// Switches `account`'s tools on or off: in `glovebox.yaml`, or in system mode (whose
    /// `glovebox.yaml` is root's) in the gate's `switches.yaml`; for an account whose entry in
    /// effect is in `accounts.yaml` (added, or taken over), there. Returns whether it changed.
    pub fn set(&self, account: &AccountId, enabled: bool) -> Result<bool, ConfigError> {
        use glovebox_config::added_accounts::Source;
        let mut current = self.lock();
        if self.state.account_source(account)? != Some(Source::File) {
            return self.set_added(&mut current, account, enabled);
        }
        let mut raw = self.state.load_raw_config()?;
        let Some(entry) = raw.accounts.iter_mut().find(|a| a.id == account.as_str()) else {
            return self.set_added(&mut current, account, enabled);
        };
        if self.state.system_paths().is_none() {
            let changed = entry.enabled != enabled;
            entry.enabled = enabled;
            if changed {
                self.state.save_raw_config(&raw)?;
            }
            current.stamp = file_stamp(&self.state.config_file());
            current.enabled.insert(account.clone(), enabled);
            return Ok(changed);
        }
        let was = current.enabled.get(account).copied().unwrap_or(false);
        let over = entry.enabled;
        let Some(mut switches) = current.switches.clone() else {
            // Rewriting it would forget the switches it holds (an "off" among them).
            return Err(ConfigError::Invalid {
                path: switches_file(&self.state),
                line: None,
                message: "cannot be read: fix or remove it (glovebox.yaml's accounts are off \
                          meanwhile)"
                    .into(),
            });
        };
        if enabled == over {
            switches.accounts.remove(account.as_str());
        } else {
            switches
                .accounts
                .insert(account.to_string(), Switch { enabled, over });
        }
        save_switches(&self.state, &switches)?;
        current.switches = Some(switches);
        current.enabled.insert(account.clone(), enabled);
        Ok(was != enabled)
    }
}

/// Writes `<state>/switches.yaml` (0600, atomically).
fn save_switches(state: &StateDir, switches: &Switches) -> Result<(), ConfigError> {
    let path = switches_file(state);
    let text = serde_yaml::to_string(switches).map_err(|e| ConfigError::Invalid {
        path: path.clone(),
        line: None,
        message: e.to_string(),
    })?;
    glovebox_config::write_private_file(&path, text.as_bytes())
}

/// `<state>/switches.yaml`.
fn switches_file(state: &StateDir) -> PathBuf {
    state.root().join("switches.yaml")
}

impl Enablement {
    /// [`Enablement::set`] for an account added at run time: its entry in `accounts.yaml`.
    fn set_added(
        &self,
        current: &mut Current,
        account: &AccountId,
        enabled: bool,
    ) -> Result<bool, ConfigError> {
        let (mut raw, _) = self.state.load_added_accounts()?;
        let Some(entry) = raw.accounts.iter_mut().find(|a| a.id == account.as_str()) else {
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
        current.enabled.insert(account.clone(), enabled);
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_holds_while_the_file_says_what_it_said() {
        let sw = |enabled, over| Switch { enabled, over };
        type Case = (&'static str, bool, Switch, bool, bool);
        // (what, the file now, the switch, enabled, switch kept)
        let cases: &[Case] = &[
            (
                "off over on, file still on",
                true,
                sw(false, true),
                false,
                true,
            ),
            (
                "on over off, file still off",
                false,
                sw(true, false),
                true,
                true,
            ),
            (
                "off over on, file edited to off",
                false,
                sw(false, true),
                false,
                false,
            ),
            (
                "on over off, file edited to on",
                true,
                sw(true, false),
                true,
                false,
            ),
        ];
        for (what, file, switch, enabled, kept) in cases {
            let mut from_files =
                HashMap::from([("a".parse().unwrap(), *file), ("b".parse().unwrap(), true)]);
            let mut switches = Switches {
                accounts: BTreeMap::from([("a".to_owned(), *switch), ("gone".to_owned(), *switch)]),
            };
            let dropped = apply_switches(&mut from_files, &mut switches);
            assert_eq!(from_files["a"], *enabled, "{what}");
            assert!(from_files["b"], "{what}: another account untouched");
            assert_eq!(switches.accounts.contains_key("a"), *kept, "{what}");
            assert_eq!(dropped, !*kept, "{what}");
            assert!(
                switches.accounts.contains_key("gone"),
                "{what}: kept for later"
            );
            assert!(
                !from_files.contains_key("gone"),
                "{what}: no account made up"
            );
        }
    }

    /// A system-mode state in `dir`: `glovebox.yaml` beside it, as root's would be.
    fn system_state(dir: &std::path::Path, yaml: &str) -> StateDir {
        let config = dir.join("glovebox.yaml");
        std::fs::write(&config, yaml).unwrap();
        let state = StateDir::system(dir.join("state"), dir.join("run"), config);
        std::fs::create_dir_all(state.root()).unwrap();
        state
    }

    fn from_files(state: &StateDir) -> HashMap<AccountId, bool> {
        state
            .load_merged_config()
            .unwrap()
            .accounts
            .iter()
            .map(|a| (a.id.clone(), a.enabled))
            .collect()
    }

    #[test]
    fn in_system_mode_a_switch_goes_to_the_state_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = "accounts:\n  - id: a\n    workdir: /w\n    enabled: true\n";
        let state = system_state(dir.path(), yaml);
        let e = Enablement::new(state.clone(), from_files(&state));
        assert!(e.is_enabled("a"));
        assert!(e.set(&"a".parse().unwrap(), false).unwrap());
        assert!(!e.is_enabled("a"));
        assert_eq!(
            std::fs::read_to_string(state.config_file()).unwrap(),
            yaml,
            "root's file is not written"
        );
        use std::os::unix::fs::PermissionsExt;
        let file = switches_file(&state);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A new gate reads it back.
        let again = Enablement::new(state.clone(), from_files(&state));
        assert!(!again.is_enabled("a"));
        // Back to the file's value: the switch is gone.
        assert!(again.set(&"a".parse().unwrap(), true).unwrap());
        assert!(again.is_enabled("a"));
        let left: Switches =
            serde_yaml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert!(left.accounts.is_empty(), "{left:?}");
    }

    #[test]
    fn unreadable_switches_keep_the_config_accounts_off_and_are_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let state = system_state(
            dir.path(),
            "accounts:\n  - id: a\n    workdir: /w\n    enabled: true\n",
        );
        std::fs::write(switches_file(&state), "accounts: [not, a, map]\n").unwrap();
        let e = Enablement::new(state.clone(), from_files(&state));
        assert!(
            !e.is_enabled("a"),
            "a lost switch must not turn an account on"
        );
        let err = e.set(&"a".parse().unwrap(), true).unwrap_err().to_string();
        assert!(err.contains("fix or remove it"), "{err}");
        assert_eq!(
            std::fs::read_to_string(switches_file(&state)).unwrap(),
            "accounts: [not, a, map]\n"
        );
    }

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
        assert!(e.set(&"a".parse().unwrap(), true).unwrap());
        assert!(!e.set(&"a".parse().unwrap(), true).unwrap());
        assert!(e.is_enabled("a"));
        assert!(state.load_config().unwrap().account("a").unwrap().enabled);
        assert!(e.set(&"nobody".parse().unwrap(), true).is_err());
        // A hand edit is followed.
        let text = std::fs::read_to_string(state.config_file()).unwrap();
        glovebox_config::write_private_file(
            &state.config_file(),
            text.replace("enabled: true", "enabled: false").as_bytes(),
        )
        .unwrap();
        assert!(!e.is_enabled("b"));
    }

    /// Watches `glovebox.yaml` and waits until the watcher has read what it was told of: the next
    /// decision checks the file, and the ones after it trust the watcher.
    async fn watched(e: &Enablement, w: &mut DirWatcher) {
        for _ in 0..400 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            e.watch_file(w);
            let checks = e.file_checks();
            e.is_enabled("a");
            e.is_enabled("a");
            if e.file_checks() == checks + 1 {
                return;
            }
        }
        panic!("the watcher never settled");
    }

    const ON: &str = "accounts:\n  - id: a\n    workdir: /w\n    enabled: true\n";
    const OFF: &str = "accounts:\n  - id: a\n    workdir: /w\n    enabled: false\n";

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hand_edit_applies_to_the_next_decision_while_decisions_trust_the_watcher() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("home/state");
        std::fs::create_dir_all(&root).unwrap();
        let state = StateDir::new(&root);
        let file = state.config_file();
        std::fs::write(&file, ON).unwrap();
        let e = Enablement::new(state.clone(), from_files(&state));
        let mut w = DirWatcher::start().unwrap();
        watched(&e, &mut w).await;
        let checks = e.file_checks();
        for _ in 0..50 {
            assert!(e.is_enabled("a"));
        }
        assert_eq!(e.file_checks(), checks, "no file looked at");
        // The audit's own files change beside it all the time: no reason to look.
        std::fs::write(root.join("audit.db-wal"), "frames").unwrap();
        assert!(e.is_enabled("a"));
        assert_eq!(e.file_checks(), checks, "a write beside the file");

        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let mut edits = freshness::edits::of_a_file(&file, &outside);
        let more: [freshness::edits::Edit; 2] = [
            (
                "the state directory renamed and made again",
                Box::new(|t| {
                    let moved = dir.path().join(format!("state-{}", t.len()));
                    let _ = std::fs::remove_dir_all(&moved);
                    std::fs::rename(&root, &moved).unwrap();
                    std::fs::create_dir_all(&root).unwrap();
                    std::fs::write(&file, t).unwrap();
                }),
            ),
            (
                "the state directory's parent renamed and made again",
                Box::new(|t| {
                    let home = dir.path().join("home");
                    let moved = dir.path().join(format!("moved-{}", t.len()));
                    let _ = std::fs::remove_dir_all(&moved);
                    std::fs::rename(&home, &moved).unwrap();
                    std::fs::create_dir_all(&root).unwrap();
                    std::fs::write(&file, t).unwrap();
                }),
            ),
        ];
        edits.extend(more);
        for (what, edit) in edits {
            for (text, on) in [(OFF, false), (ON, true)] {
                watched(&e, &mut w).await;
                edit(text);
                assert_eq!(e.is_enabled("a"), on, "{what}: the next decision");
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_symlink_on_the_way_to_glovebox_yaml_has_it_looked_at_on_every_decision() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir_all(&real).unwrap();
        std::fs::write(real.join("glovebox.yaml"), ON).unwrap();
        let linked = |state: &StateDir| {
            let e = Enablement::new(state.clone(), from_files(state));
            (e, DirWatcher::start().unwrap())
        };
        // The file a symlink, then its directory.
        let file_linked = dir.path().join("a");
        std::fs::create_dir(&file_linked).unwrap();
        std::os::unix::fs::symlink(
            real.join("glovebox.yaml"),
            file_linked.join("glovebox.yaml"),
        )
        .unwrap();
        let dir_linked = dir.path().join("b");
        std::os::unix::fs::symlink(&real, &dir_linked).unwrap();
        for (what, root) in [("the file", file_linked), ("its directory", dir_linked)] {
            let state = StateDir::new(&root);
            let (e, mut w) = linked(&state);
            e.watch_file(&mut w);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            e.watch_file(&mut w);
            let checks = e.file_checks();
            for _ in 0..10 {
                assert!(e.is_enabled("a"));
            }
            assert_eq!(e.file_checks(), checks + 10, "{what} a symlink");
        }
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
        assert!(e.set(&"b".parse().unwrap(), true).unwrap());
        assert!(e.is_enabled("b"));
        let (added, _) = state.load_added_accounts().unwrap();
        assert!(added.accounts.iter().any(|a| a.id == "b" && a.enabled));
        assert_eq!(
            std::fs::read_to_string(state.config_file()).unwrap(),
            config,
            "glovebox.yaml is not touched"
        );
        let err = e
            .set(&"nobody".parse().unwrap(), true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("accounts.yaml"), "{err}");
    }
}
