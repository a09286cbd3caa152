//! Each account's current policy, compiled from three layers of files: the administrator's
//! managed files (every `*.yaml` in the managed directories), the account's `permissions.yaml`
//! and the project's `<workdir>/.glovebox/permissions.yaml`.
//!
//! Files are reloaded when they change: a decision checks the account and project files (one
//! `stat` each) unless the file watcher proves that nothing changed since they were last checked
//! ([`freshness`]), and the watcher ([`crate::watch`]) tells this module when a managed
//! directory changed. A change that does not compile keeps the last good policy and
//! records the error (file, line, what was expected); an account whose files never compiled is
//! denied everything until they are fixed. Every change yields a [`PolicyEvent`] for the audit.
//! The rule-management operations edit the account file's text, keeping its comments, and write
//! it only if it still compiles.

mod edit;
mod files;
pub(crate) mod freshness;

use glovebox_proto::audit_row::Outcome;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use glovebox_config::{AccountId, StateDir};
use glovebox_policy::{Inputs, Policy, RawPolicy, Source, applies_to};
use glovebox_watch::DirWatcher;

use files::{FileError, read_root_only_source, read_source, root_only_dir};

/// What identifies one version of a file on disk.
type Stamp = Option<glovebox_config::FileStamp>;
/// A managed file's stamp, with its owner and mode (system mode takes only root's files).
type ManagedStamp = (PathBuf, Stamp, Option<(u32, u32)>);

/// A policy change or a failed reload, for the audit and the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyEvent {
    pub account: String,
    /// `reloaded`, `invalid`, `rule_added`, `rule_revoked`, `reset`, `confinement`, `sandbox`
    pub outcome: Outcome,
    pub detail: String,
}

#[derive(Default)]
struct Cached {
    /// Stamps of the account file, the project file, and the managed generation they saw.
    stamps: Option<(Stamp, Stamp, u64)>,
    policy: Option<Arc<Policy>>,
    error: Option<String>,
    /// When `stamps` were taken, if the watcher could tell.
    checked: Option<freshness::Checked>,
    /// When the watcher last found every way to the account's files watched, if it did.
    covered: Option<freshness::Checked>,
}

/// Where an account may act: its canonical workdir and roots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountPaths {
    pub id: AccountId,
    pub workdir: String,
    /// Nothing outside these can be acted on; a path outside is denied naming them.
    pub roots: Vec<String>,
}

impl AccountPaths {
    /// An account whose only root is its workdir (tests name accounts by literals).
    #[cfg(test)]
    pub fn in_workdir(id: &str, workdir: &str) -> AccountPaths {
        AccountPaths {
            id: AccountId::parse(id).expect("a test's account id"),
            workdir: workdir.to_owned(),
            roots: vec![workdir.to_owned()],
        }
    }
}

struct AccountEntry {
    workdir: String,
    roots: Vec<String>,
    file: PathBuf,
    project_file: PathBuf,
    cache: Mutex<Cached>,
}

/// Managed files as last read: (file name, parsed policy) or the error.
#[derive(Default)]
struct Managed {
    /// Each file's stamp, and its owner and mode (a chown or chmod changes whether system mode
    /// takes it, and changes neither the stamp's time nor its inode).
    stamps: Vec<ManagedStamp>,
    files: Vec<(String, RawPolicy, i64)>,
    error: Option<FileError>,
}

/// Why an account's policy could not be made: a file of one of its layers, or the layers
/// together (a rule the compiler refuses).
#[derive(Debug, thiserror::Error)]
enum LoadError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Compile(glovebox_policy::PolicyError),
}

/// The policy of every configured account.
pub struct AccountPolicies {
    /// The accounts as of now: replaced at run time ([`AccountPolicies::set_accounts`]); a
    /// caller holds an entry only for the one decision or edit it makes.
    accounts: RwLock<HashMap<AccountId, Arc<AccountEntry>>>,
    state: StateDir,
    protected: Vec<String>,
    managed_dirs: Vec<PathBuf>,
    /// Whether managed files must be root's and writable by root alone (system mode).
    managed_root_only: bool,
    managed: Mutex<Managed>,
    /// Bumped when a managed file actually changed.
    managed_version: AtomicU64,
    events: Mutex<Vec<PolicyEvent>>,
    /// Serializes edits of policy files.
    edit_lock: Mutex<()>,
    /// The file watcher's word on the account and project files ([`freshness`]).
    freshness: freshness::Freshness,
}

/// An account's policy as of now, and the problem with its files if there is one.
pub struct Current {
    pub policy: Option<Arc<Policy>>,
    pub error: Option<String>,
}

/// Why a rule-management operation failed.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error("unknown account {0:?}")]
    UnknownAccount(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{file}: {message}")]
    File { file: String, message: String },
}

impl AccountPolicies {
    /// `protected` are canonical directories on the floor; `managed_dirs` hold the
    /// administrator's `*.yaml` files.
    pub fn new(
        state: &StateDir,
        accounts: Vec<AccountPaths>,
        protected: Vec<String>,
        managed_dirs: Vec<PathBuf>,
    ) -> AccountPolicies {
        let accounts = accounts
            .into_iter()
            .map(|paths| (paths.id.clone(), Arc::new(AccountEntry::new(state, paths))))
            .collect();
        let policies = AccountPolicies {
            accounts: RwLock::new(accounts),
            state: state.clone(),
            protected,
            managed_dirs,
            managed_root_only: false,
            managed: Mutex::new(Managed::default()),
            managed_version: AtomicU64::new(0),
            events: Mutex::new(Vec::new()),
            edit_lock: Mutex::new(()),
            freshness: freshness::Freshness::default(),
        };
        policies.refresh_managed();
        policies
    }

    /// System mode: the managed layer takes only directories and files owned by root and
    /// writable by no one else, none of them a symlink; one that is not fails the whole managed
    /// layer closed (as a managed file that does not compile does), with the reason in health.
    pub fn managed_root_only(mut self, on: bool) -> AccountPolicies {
        self.managed_root_only = on;
        self.managed_version.store(0, Ordering::SeqCst);
        self.refresh_managed();
        self
    }

    pub fn workdir(&self, account: &str) -> Option<String> {
        self.entry(account).map(|e| e.workdir.clone())
    }

    /// The account's entry as of now.
    fn entry(&self, account: &str) -> Option<Arc<AccountEntry>> {
        read(&self.accounts).get(account).cloned()
    }

    /// Every account's paths as of now.
    pub fn accounts(&self) -> Vec<AccountPaths> {
        let mut out: Vec<AccountPaths> = read(&self.accounts)
            .iter()
            .map(|(id, e)| AccountPaths {
                id: id.clone(),
                workdir: e.workdir.clone(),
                roots: e.roots.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// Replaces the accounts with `next` (accounts added, removed or moved at run time): an
    /// account whose paths did not change keeps its compiled policy; a new or moved one compiles
    /// afresh at its next decision; a removed one is unknown from now on.
    pub fn set_accounts(&self, next: Vec<AccountPaths>) {
        let mut accounts = self.accounts.write().unwrap_or_else(|p| p.into_inner());
        let mut table = HashMap::new();
        for paths in next {
            let kept = accounts
                .remove(paths.id.as_str())
                .filter(|e| e.workdir == paths.workdir && e.roots == paths.roots);
            let entry =
                kept.unwrap_or_else(|| Arc::new(AccountEntry::new(&self.state, paths.clone())));
            table.insert(paths.id, entry);
        }
        *accounts = table;
    }

    /// Called by the watcher: something changed on disk; reload what changed.
    pub fn invalidate(&self) {
        self.refresh_managed();
        self.load_all();
    }

    /// Loads every account's policy, or reloads what changed of it.
    pub fn load_all(&self) {
        let ids: Vec<AccountId> = read(&self.accounts).keys().cloned().collect();
        for id in ids {
            let _ = self.current(&id);
        }
    }

    /// Policy changes and failed reloads since the last call.
    pub fn take_events(&self) -> Vec<PolicyEvent> {
        std::mem::take(&mut *lock(&self.events))
    }

    fn push_event(&self, account: &str, outcome: Outcome, detail: String) {
        lock(&self.events).push(PolicyEvent {
            account: account.to_owned(),
            outcome,
            detail,
        });
    }

    /// Every account's current policy error, as `account: error`.
    pub fn errors(&self) -> Vec<String> {
        let ids: Vec<AccountId> = read(&self.accounts).keys().cloned().collect();
        let mut out: Vec<String> = ids
            .iter()
            .filter_map(|id| {
                self.current(id)
                    .and_then(|c| c.error)
                    .map(|e| format!("{id}: {e}"))
            })
            .collect();
        out.sort();
        out
    }

    /// Watches the managed directories and every way to each account's policy files with
    /// `watcher` (again: call it after each change it reports), and lets the accounts whose
    /// files are all covered trust it from their next check of the files on ([`freshness`]). The
    /// first call ties `watcher` to these policies for good.
    pub fn watch_files(&self, watcher: &mut DirWatcher) {
        let entries: Vec<Arc<AccountEntry>> = read(&self.accounts).values().cloned().collect();
        let (covered, watched) = self.freshness.watch(watcher, |watcher| {
            for dir in &self.managed_dirs {
                if dir.is_dir()
                    && let Err(error) = watcher.watch(dir)
                {
                    tracing::warn!(path = %dir.display(), %error, "cannot watch a managed directory");
                }
            }
            entries
                .iter()
                .map(|e| freshness::watch_account(watcher, &e.files()))
                .collect::<Vec<bool>>()
        });
        for (entry, covered) in entries.iter().zip(covered) {
            lock(&entry.cache).covered = watched.covered(covered);
        }
    }

    /// How many times a decision looked at the account and project files.
    pub fn file_checks(&self) -> u64 {
        self.freshness.looks()
    }

    /// The account's policy, reloading files that changed. `None` for unknown accounts.
    pub fn current(&self, account: &str) -> Option<Current> {
        let entry = self.entry(account)?;
        let entry = entry.as_ref();
        {
            let cache = lock(&entry.cache);
            if let (Some((_, _, managed)), Some(policy)) = (cache.stamps, &cache.policy)
                && managed == self.managed_version.load(Ordering::SeqCst)
                && self.freshness.trusted(cache.covered, cache.checked)
            {
                return Some(Current {
                    policy: Some(policy.clone()),
                    error: cache.error.clone(),
                });
            }
        }
        // Before the files are looked at: what the watcher can vouch for from then on.
        let looked = self.freshness.looking();
        // Stat before taking the lock: concurrent decisions only share it for the comparison.
        let stamps = (
            glovebox_config::file_stamp(&entry.file),
            glovebox_config::file_stamp(&entry.project_file),
            self.managed_version.load(Ordering::SeqCst),
        );
        let mut cache = lock(&entry.cache);
        cache.checked = looked;
        if cache.policy.is_none() || cache.stamps != Some(stamps) {
            let first = cache.stamps.is_none();
            let old_error = cache.error.clone();
            cache.stamps = Some(stamps);
            match self.load(account, entry) {
                Ok(policy) => {
                    cache.policy = Some(Arc::new(policy));
                    cache.error = None;
                    if !first || old_error.is_some() {
                        tracing::info!(account, "reloaded policy");
                        self.push_event(
                            account,
                            Outcome::Reloaded,
                            summary(cache.policy.as_deref()),
                        );
                    }
                }
                Err(error) => {
                    // Kept as the text the administrator is shown.
                    let error = error.to_string();
                    glovebox_telemetry::metrics::gate().policy_reload_error();
                    if old_error.as_deref() != Some(error.as_str()) {
                        tracing::error!(account, %error, "policy is invalid; keeping the last good policy");
                        self.push_event(account, Outcome::Invalid, error.clone());
                    }
                    cache.error = Some(error);
                }
            }
        }
        Some(Current {
            policy: cache.policy.clone(),
            error: cache.error.clone(),
        })
    }

    fn load(&self, account: &str, entry: &AccountEntry) -> Result<Policy, LoadError> {
        let managed = self.managed_sources(account)?;
        let account_src = read_source(&entry.file)?.unwrap_or_else(|| {
            Source::new(entry.file.display().to_string(), RawPolicy::default(), 0)
        });
        let project = read_source(&entry.project_file)?;
        Policy::compile_layers(&Inputs {
            workdir: entry.workdir.clone(),
            protected: self.protected.clone(),
            roots: entry.roots.clone(),
            managed,
            account: account_src,
            project,
        })
        .map_err(LoadError::Compile)
    }

    /// Re-reads the managed directories if any file in them changed.
    fn refresh_managed(&self) {
        let mut managed = lock(&self.managed);
        let mut files: Vec<PathBuf> = Vec::new();
        let mut error = None;
        for dir in &self.managed_dirs {
            if self.managed_root_only
                && let Err(why) = root_only_dir(dir)
            {
                error = Some(why);
                continue;
            }
            match std::fs::read_dir(dir) {
                Ok(entries) => files.extend(
                    entries
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml")),
                ),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    error = Some(FileError::Unreadable {
                        path: dir.display().to_string(),
                        why: e.to_string(),
                    })
                }
            }
        }
        files.sort();
        let owner_mode = |f: &Path| {
            use std::os::unix::fs::MetadataExt;
            std::fs::symlink_metadata(f)
                .ok()
                .map(|m| (m.uid(), m.mode()))
        };
        let stamps: Vec<ManagedStamp> = files
            .iter()
            .map(|f| (f.clone(), glovebox_config::file_stamp(f), owner_mode(f)))
            .collect();
        let first = self.managed_version.load(Ordering::SeqCst) == 0;
        if !first && stamps == managed.stamps && error == managed.error {
            return;
        }
        managed.stamps = stamps;
        let mut parsed = Vec::new();
        for f in &files {
            let read = if self.managed_root_only {
                read_root_only_source(f)
            } else {
                read_source(f)
            };
            match read {
                Ok(Some(s)) => parsed.push((s.name, s.raw, s.modified)),
                Ok(None) => {}
                Err(e) => error = Some(e),
            }
        }
        if error.is_none() {
            managed.files = parsed;
        } else if first {
            // Never read: nothing to keep, so every account is denied until it is fixed.
            managed.files.clear();
        }
        managed.error = error;
        self.managed_version.fetch_add(1, Ordering::SeqCst);
    }

    /// The managed files that apply to `account`, as last read.
    fn managed_sources(&self, account: &str) -> Result<Vec<Source>, FileError> {
        let managed = lock(&self.managed);
        if let Some(e) = &managed.error {
            return Err(e.clone());
        }
        Ok(managed
            .files
            .iter()
            .filter(|(_, raw, _)| applies_to(raw, account))
            .map(|(name, raw, modified)| Source::new(name.clone(), raw.clone(), *modified))
            .collect())
    }
}

fn summary(policy: Option<&Policy>) -> String {
    match policy {
        Some(p) => format!(
            "{} rule(s); sandbox {}; confined {}",
            p.rules().count(),
            if p.sandbox_enabled() { "on" } else { "OFF" },
            p.confined()
        ),
        None => "no policy".to_owned(),
    }
}

/// Unix seconds now, for rule expiries (0 if the clock is before 1970: rules with an expiry then
/// count as live, so allows last no longer than their time and denies no shorter).
pub fn now_unix() -> i64 {
    glovebox_ticket::now_ms().map_or(0, |ms| (ms / 1000) as i64)
}

/// Reads `m`, going on after a panic elsewhere held it.
fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|p| p.into_inner())
}

impl AccountEntry {
    fn new(state: &StateDir, AccountPaths { id, workdir, roots }: AccountPaths) -> AccountEntry {
        AccountEntry {
            roots,
            file: state.permissions_file(&id),
            project_file: Path::new(&workdir)
                .join(glovebox_policy::policy::PROJECT_DIR)
                .join("permissions.yaml"),
            workdir,
            cache: Mutex::new(Cached::default()),
        }
    }
}

impl AccountEntry {
    fn files(&self) -> freshness::AccountFiles<'_> {
        freshness::AccountFiles {
            account_dir: self.file.parent().unwrap_or(Path::new("/")),
            file: &self.file,
            workdir: Path::new(&self.workdir),
            project_dir: self.project_file.parent().unwrap_or(Path::new("/")),
            project_file: &self.project_file,
        }
    }
}

/// Locks `m`, going on after a panic elsewhere held it (the data is kept consistent by each user).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use glovebox_policy::{Kind, RawRule, Section};
    use std::time::Duration;

    struct Setup {
        _dir: tempfile::TempDir,
        workdir: PathBuf,
        policies: Arc<AccountPolicies>,
    }

    fn setup() -> Setup {
        setup_at("work")
    }

    /// An account whose workdir is `workdir` in a temporary directory.
    fn setup_at(workdir: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let workdir = dir.path().join(workdir);
        std::fs::create_dir_all(workdir.join(".glovebox")).unwrap();
        let state = StateDir::new(dir.path().join("state"));
        let policies = Arc::new(AccountPolicies::new(
            &state,
            vec![AccountPaths::in_workdir(
                "a",
                &workdir.display().to_string(),
            )],
            Vec::new(),
            Vec::new(),
        ));
        Setup {
            _dir: dir,
            workdir,
            policies,
        }
    }

    /// The account's policy and error, failing instead of hanging if reading blocks.
    fn current(policies: &Arc<AccountPolicies>) -> (bool, Option<String>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let p = policies.clone();
        std::thread::spawn(move || {
            let c = p.current("a").unwrap();
            let _ = tx.send((c.policy.is_some(), c.error));
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("reading the policy blocked")
    }

    fn project_file(s: &Setup) -> PathBuf {
        s.workdir.join(".glovebox/permissions.yaml")
    }

    fn make_fifo(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }

    #[test]
    fn a_fifo_as_the_project_file_is_an_error_not_a_hang() {
        let s = setup();
        make_fifo(&project_file(&s));
        let (compiled, error) = current(&s.policies);
        assert!(!compiled, "never compiled: everything is denied");
        let error = error.unwrap();
        assert!(error.contains("not a regular file"), "{error}");
    }

    #[test]
    fn a_symlinked_project_file_is_refused_without_quoting_its_target() {
        let s = setup();
        let secret = s.workdir.join("../secret.txt");
        std::fs::write(&secret, "SECRET-CONTENT-42\n").unwrap();
        std::os::unix::fs::symlink(&secret, project_file(&s)).unwrap();
        let (compiled, error) = current(&s.policies);
        assert!(!compiled);
        let error = error.unwrap();
        assert!(error.contains("symlink"), "{error}");
        assert!(!error.contains("SECRET"), "{error}");
    }

    #[test]
    fn an_oversized_policy_file_is_refused_and_the_last_good_policy_kept() {
        let s = setup();
        std::fs::write(project_file(&s), "paths:\n  read:\n    deny: ['./x/**']\n").unwrap();
        assert_eq!(current(&s.policies), (true, None));
        let mut huge = String::from("paths:\n  read:\n    deny:\n");
        while huge.len() as u64 <= files::MAX_POLICY_BYTES {
            huge.push_str("      - './generated/some/long/path/**'\n");
        }
        std::fs::write(project_file(&s), huge).unwrap();
        let (compiled, error) = current(&s.policies);
        assert!(compiled, "the last good policy still decides");
        let error = error.unwrap();
        assert!(error.contains("larger than"), "{error}");
        // a swap to a FIFO is noticed too, and also keeps the last good policy
        std::fs::remove_file(project_file(&s)).unwrap();
        make_fifo(&project_file(&s));
        let (compiled, error) = current(&s.policies);
        assert!(compiled);
        assert!(error.unwrap().contains("not a regular file"));
    }

    fn account_file(s: &Setup) -> PathBuf {
        s._dir.path().join("state/accounts/a/permissions.yaml")
    }

    fn decide_command(s: &Setup, command: &str) -> glovebox_policy::Decision {
        let p = s.policies.current("a").unwrap().policy.unwrap();
        p.decide_command_at(command, &s.workdir.display().to_string(), Some(now_unix()))
            .decision
    }

    const VALID: &str = "commands:\n  allow: ['ls']\n";
    const INVALID: &str = "commands: [\n";

    /// Watches the account's files and waits until the watcher has read what it was told of; the
    /// next decision checks the files, and the ones after it trust the watcher.
    async fn watched(s: &Setup, w: &mut DirWatcher) {
        for _ in 0..400 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            s.policies.watch_files(w);
            let checks = s.policies.file_checks();
            s.policies.current("a").unwrap();
            s.policies.current("a").unwrap();
            if s.policies.file_checks() == checks + 1 {
                return;
            }
        }
        panic!("the watcher never settled");
    }

    /// Watches the account's files again once the watcher has read what it was told of.
    async fn watched_once(s: &Setup, w: &mut DirWatcher) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        s.policies.watch_files(w);
    }

    /// Whether the account's files compile, asked once.
    fn compiles(s: &Setup) -> bool {
        s.policies.current("a").unwrap().error.is_none()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_edit_applies_to_the_next_decision_while_decisions_trust_the_watcher() {
        let s = setup_at("projects/work");
        let file = account_file(&s);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, VALID).unwrap();
        let mut w = DirWatcher::start().unwrap();
        watched(&s, &mut w).await;
        let checks = s.policies.file_checks();
        for _ in 0..50 {
            assert!(compiles(&s));
        }
        assert_eq!(s.policies.file_checks(), checks, "no file looked at");

        let outside = s._dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let project = project_file(&s);
        let mut edits = freshness::edits::of_a_file(&file, &outside);
        let more: [freshness::edits::Edit; 2] = [
            (
                "the project file, its directory made afresh",
                Box::new(|t| {
                    let _ = std::fs::remove_dir_all(project.parent().unwrap());
                    std::fs::create_dir(project.parent().unwrap()).unwrap();
                    std::fs::write(&project, t).unwrap();
                }),
            ),
            (
                "the workdir's parent renamed and made again",
                Box::new(|t| {
                    let parent = s.workdir.parent().unwrap();
                    let moved = parent.with_file_name(format!("moved-{}", t.len()));
                    std::fs::rename(parent, &moved).unwrap();
                    std::fs::create_dir_all(project.parent().unwrap()).unwrap();
                    std::fs::write(&project, t).unwrap();
                }),
            ),
        ];
        edits.extend(more);
        for (what, edit) in edits {
            for (text, valid) in [(INVALID, false), (VALID, true)] {
                watched(&s, &mut w).await;
                edit(text);
                assert_eq!(compiles(&s), valid, "{what}: the next decision");
            }
        }
        // The gate's own edits.
        watched(&s, &mut w).await;
        s.policies
            .add_exact_rules("a", &[(Section::Commands, "make".to_owned())])
            .unwrap();
        assert_eq!(decide_command(&s, "make"), glovebox_policy::Decision::Allow);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_symlink_on_the_way_to_a_policy_file_has_it_looked_at_on_every_decision() {
        let s = setup();
        std::fs::create_dir_all(account_file(&s).parent().unwrap()).unwrap();
        let project = project_file(&s);
        let elsewhere = s._dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("permissions.yaml"), VALID).unwrap();
        let mut w = DirWatcher::start().unwrap();
        type Swap<'a> = (&'a str, Box<dyn Fn() + 'a>);
        let swaps: [Swap; 2] = [
            (
                "the project file a symlink",
                Box::new(|| {
                    std::fs::remove_file(&project).unwrap();
                    std::os::unix::fs::symlink(elsewhere.join("permissions.yaml"), &project)
                        .unwrap();
                }),
            ),
            (
                "the project directory a symlink",
                Box::new(|| {
                    std::fs::remove_dir_all(project.parent().unwrap()).unwrap();
                    std::os::unix::fs::symlink(&elsewhere, project.parent().unwrap()).unwrap();
                }),
            ),
        ];
        for (what, swap) in swaps {
            // A compiled policy first, so that decisions could trust the watcher at all.
            let _ = std::fs::remove_file(&project);
            let _ = std::fs::remove_file(project.parent().unwrap());
            std::fs::create_dir_all(project.parent().unwrap()).unwrap();
            std::fs::write(&project, VALID).unwrap();
            watched(&s, &mut w).await;
            assert!(compiles(&s));
            swap();
            watched_once(&s, &mut w).await;
            assert!(s.policies.current("a").unwrap().policy.is_some(), "{what}");
            let checks = s.policies.file_checks();
            for _ in 0..10 {
                s.policies.current("a").unwrap();
            }
            assert_eq!(s.policies.file_checks(), checks + 10, "{what}");
        }
    }

    #[test]
    fn a_rule_that_does_not_compile_is_refused_and_the_file_left_untouched() {
        use glovebox_policy::Decision;
        let s = setup();
        std::fs::create_dir_all(account_file(&s).parent().unwrap()).unwrap();
        let add = |section, pattern: &str| {
            s.policies.add_rule(
                "a",
                section,
                Kind::Allow,
                RawRule::Pattern(pattern.to_owned()),
            )
        };
        add(Section::Commands, "ls").unwrap().unwrap();
        let before = std::fs::read_to_string(account_file(&s)).unwrap();
        for (section, pattern, rule) in [
            (Section::Commands, "(", "commands.allow[1]: ("),
            (Section::PathsRead, "a[", "paths.read.allow[0]: a["),
        ] {
            let e = add(section, pattern).unwrap_err();
            assert!(matches!(e, EditError::Invalid(_)), "{e:?}");
            assert!(e.to_string().contains("would not compile"), "{e}");
            assert!(e.to_string().contains(rule), "{e}");
            assert_eq!(std::fs::read_to_string(account_file(&s)).unwrap(), before);
        }
        // the file still compiles, so a later change takes effect
        add(Section::Commands, "git status").unwrap().unwrap();
        assert_eq!(s.policies.current("a").unwrap().error, None);
        assert_eq!(decide_command(&s, "git status"), Decision::Allow);
        let events: Vec<Outcome> = s
            .policies
            .take_events()
            .into_iter()
            .map(|e| e.outcome)
            .collect();
        assert_eq!(
            events.iter().filter(|o| **o == Outcome::RuleAdded).count(),
            2,
            "{events:?}"
        );
    }

    #[test]
    fn no_writer_leaves_the_account_file_not_compiling() {
        let s = setup();
        let file = account_file(&s);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        // broken by hand: every edit but a reset would keep it broken, so each is refused
        let broken = "commands:\n  allow: ['ls', '(']\n";
        std::fs::write(&file, broken).unwrap();
        let refused: Vec<Result<Option<String>, EditError>> = vec![
            s.policies.set_switch("a", "confine_to_workdir", true),
            s.policies.set_switch("a", "sandbox", false),
            s.policies
                .revoke_rule("a", Section::Commands, Kind::Allow, 0, "ls"),
            s.policies.add_rule(
                "a",
                Section::PathsRead,
                Kind::Allow,
                RawRule::Pattern("./**".to_owned()),
            ),
        ];
        for r in refused {
            let e = r.unwrap_err();
            assert!(e.to_string().contains("would not compile"), "{e}");
        }
        let always = s
            .policies
            .add_exact_rules("a", &[(Section::Commands, "make".to_owned())]);
        assert!(always.unwrap_err().contains("would not compile"));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), broken);
        // a reset is the way out: it always compiles
        s.policies.reset_rules("a").unwrap().unwrap();
        assert_eq!(s.policies.current("a").unwrap().error, None);
        s.policies
            .add_exact_rules("a", &[(Section::Commands, "make".to_owned())])
            .unwrap();
        assert_eq!(decide_command(&s, "make"), glovebox_policy::Decision::Allow);
    }
}
