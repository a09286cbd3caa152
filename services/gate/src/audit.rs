//! The audit store: an append-only SQLite file, owned by the gate, written through one
//! synchronous connection: by the writer thread, which batches queued appends into one commit,
//! or, while nothing is queued and the writer is not writing, by the caller itself
//! ([`AuditStore::append_all`]).
//!
//! Every row carries a MAC under the gate's audit key over the row before it and its own fields
//! ([`chain`]); after every write the signed head of the chain is also written to
//! `<state>/audit.head`, and a checkpoint row (rows so far and the head) is written at start, at
//! stop and every [`CHECKPOINT_ROWS`] rows or [`CHECKPOINT_INTERVAL`]. `verify` walks the rows and
//! names the first thing wrong. Triggers refuse UPDATE and DELETE. A failing write never stops a
//! tool call: it is counted, logged and reported by `Health`.
//!
//! Why one file past 800 lines: the store's appends, its writer thread and its batching share
//! the writer's private state (the queue, the chain's tip, the counters), which nothing else may
//! touch; the chain, the head file, the WAL, queries, signatures and shipping are modules of their
//! own.

pub mod chain;
mod head;
mod paced;
pub mod query;
pub mod row;
pub mod ship;
pub mod signed;
mod wal;

use std::cell::Cell;
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use glovebox_proto::audit_row::{Outcome, RowKind, Source};
use glovebox_proto::v1::AuditEvent;
use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use tokio::sync::oneshot;

use chain::{AuditKey, Fields, GENESIS, Head};
use head::{ChainEnd, HeadWriter};

pub use chain::rfc3339_millis;

/// Events waiting to be written; appends wait when it is full.
const QUEUE_DEPTH: usize = 4096;
/// A checkpoint row after this many rows...
pub const CHECKPOINT_ROWS: u64 = 1000;
/// ...or this long after the last one, whichever comes first.
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("open audit store {path}: {source}")]
    Open { path: String, source: sqlx::Error },
    #[error("make audit store {path} private: {source}")]
    Mode {
        path: String,
        source: std::io::Error,
    },
    #[error("migrate audit store: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("read audit store: {0}")]
    Read(#[from] sqlx::Error),
    #[error("open the audit writer on {path}: {why}")]
    Writer { path: String, why: String },
}

/// A caller counted in [`AuditStore::appending`] until dropped.
struct Appending(Arc<AtomicUsize>);

impl Appending {
    fn start(count: &Arc<AtomicUsize>) -> Appending {
        count.fetch_add(1, Ordering::Relaxed);
        Appending(count.clone())
    }
}

impl Drop for Appending {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counters that `Health` reports.
#[derive(Debug, Default)]
struct Counters {
    healthy: AtomicBool,
    failures: AtomicU64,
    rows: AtomicU64,
    /// Transactions committed.
    commits: AtomicU64,
    /// The newest signed checkpoint, as approvers are shown it ([`AuditStore::newest_checkpoint`]).
    checkpoint: Mutex<Option<String>>,
}

/// A snapshot of the store's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditHealth {
    pub healthy: bool,
    pub failures: u64,
    pub rows: u64,
}

enum Job {
    /// Rows written together: chained in order and committed in one transaction.
    Events {
        events: Vec<AuditEvent>,
        done: oneshot::Sender<bool>,
    },
    /// Write a checkpoint row now (`why`: start, stop).
    Checkpoint {
        why: Outcome,
        done: oneshot::Sender<bool>,
    },
}

impl Job {
    /// Rows nobody waits for ([`AuditStore::append_queued`]).
    fn unawaited(&self) -> bool {
        matches!(self, Job::Events { done, .. } if done.is_closed())
    }
}

/// A handle to the audit writer. Cheap to clone.
#[derive(Clone)]
pub struct AuditStore {
    jobs: flume::Sender<Job>,
    /// The connection and the chain's tip: the writer thread's, lent to a caller that commits its
    /// own rows while the writer is idle.
    writer: Arc<Mutex<Writer>>,
    /// Jobs sent to the writer thread and not yet done. A caller writes its rows itself only
    /// while this is 0 (under the writer's lock, which the thread holds until it has counted
    /// its batch done), so rows are still committed in the order they were appended.
    unfinished: Arc<AtomicUsize>,
    /// Callers of [`AuditStore::append_all`] not yet answered: with another one, a caller's rows
    /// go to the writer thread, to share a commit with the others'.
    appending: Arc<AtomicUsize>,
    /// Wakes the writer thread out of a hold ([`HoldBell`]).
    bell: Arc<HoldBell>,
    counters: Arc<Counters>,
    /// A pool for the rare read of a committed row ([`AuditStore::has_row`]); the writer has its
    /// own connection.
    pool: SqlitePool,
    /// When this store opened (ms since the epoch): rows queued before it by an earlier run of
    /// the gate are committed or lost, never still on their way.
    opened_ms: u64,
}

impl std::fmt::Debug for AuditStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditStore")
            .field("health", &self.health())
            .finish()
    }
}

/// The embedded schema migrations.
pub fn migrator() -> Migrator {
    Migrator::with_migrations(vec![
        Migration::new(
            1,
            "events".into(),
            MigrationType::Simple,
            include_str!("../migrations/0001_events.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            2,
            "commands view".into(),
            MigrationType::Simple,
            include_str!("../migrations/0002_commands_view.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            3,
            "keyed chain".into(),
            MigrationType::Simple,
            include_str!("../migrations/0003_keyed_chain.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            5,
            "pack calls view".into(),
            MigrationType::Simple,
            include_str!("../migrations/0005_pack_calls_view.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            6,
            "events plain rowid".into(),
            MigrationType::Simple,
            include_str!("../migrations/0006_events_plain_rowid.sql").into_sql_str(),
            false,
        ),
    ])
}

/// How a pool connects to the audit file at `path` (creating it if needed).
fn connect_options(path: &Path) -> Result<SqliteConnectOptions, AuditError> {
    Ok(SqliteConnectOptions::from_str("sqlite://")
        .map_err(|source| AuditError::Open {
            path: path.display().to_string(),
            source,
        })?
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5)))
}

/// How long a connection for a rare read ([`AuditStore::has_row`]) stays open unused.
const READER_IDLE: Duration = Duration::from_secs(5);

/// Opens (creating if needed) and migrates the SQLite file at `path`.
pub async fn open_pool(path: &Path) -> Result<SqlitePool, AuditError> {
    // The audit says who did what on the machine: only the gate's user reads it. SQLite creates
    // its -wal and -shm files with the database file's mode, so the file is made 0600 first (and
    // an older, wider file is narrowed).
    make_private(path, true).map_err(|source| AuditError::Mode {
        path: path.display().to_string(),
        source,
    })?;
    let options = connect_options(path)?;
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .map_err(|source| AuditError::Open {
            path: path.display().to_string(),
            source,
        })?;
    migrator().run(&pool).await?;
    for suffix in ["-wal", "-shm"] {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        make_private(Path::new(&side), false).map_err(|source| AuditError::Mode {
            path: path.display().to_string(),
            source,
        })?;
    }
    Ok(pool)
}

/// Whether the audit files are readable by their group (system mode: the `glovebox-audit`
/// group, which the supervisor gave the state directory and `audit.db`): set once at start.
static GROUP_READABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// System mode: administrators in the audit files' group may read them with `sqlite3` (mode 0640
/// instead of 0600; the group is the one the supervisor gave the state directory).
pub fn share_with_group() {
    GROUP_READABLE.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Makes `path` readable and writable by its owner only, or also readable by its group after
/// [`share_with_group`] (creating it empty when `create`).
fn make_private(path: &Path, create: bool) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mode = if GROUP_READABLE.load(std::sync::atomic::Ordering::SeqCst) {
        0o640
    } else {
        0o600
    };
    if create {
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(mode)
            .open(path)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta)
            if (meta.permissions().mode() & 0o077) & !mode != 0
                || (mode == 0o640 && meta.permissions().mode() & 0o777 != mode) =>
        {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => Ok(()),
        Err(e) => Err(e),
    }
}

/// Where the store lives and what it signs with.
#[derive(Debug, Clone)]
pub struct AuditFiles {
    pub db: std::path::PathBuf,
    /// The signed head of the chain, rewritten after every write.
    pub head: std::path::PathBuf,
    pub key: AuditKey,
}

/// The chain's state as the writer keeps it.
struct Tip {
    rows: u64,
    last_id: i64,
    mac: String,
    /// The public digest chain's value after the last row ([`signed`]).
    digest: String,
    since_checkpoint: u64,
    checkpoint_at: std::time::Instant,
}

impl Tip {
    fn end(&self) -> ChainEnd<'_> {
        ChainEnd {
            rows: self.rows,
            last_id: self.last_id,
            mac: &self.mac,
        }
    }
}

/// The chain's tip as the database holds it: its row count, its last row's id and MAC, and
/// the public digest there.
async fn read_tip(pool: &SqlitePool) -> Result<Tip, AuditError> {
    let last: Option<(i64, String)> =
        sqlx::query_as("SELECT id, hash FROM events ORDER BY id DESC LIMIT 1")
            .fetch_optional(pool)
            .await?;
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
        .fetch_one(pool)
        .await?;
    let (last_id, mac) = last.unwrap_or((0, GENESIS.to_owned()));
    Ok(Tip {
        rows: rows.max(0) as u64,
        last_id,
        mac,
        digest: digest_at_tip(pool).await?,
        since_checkpoint: 0,
        checkpoint_at: std::time::Instant::now(),
    })
}

/// The writer could not be started.
fn writer_error(files: &AuditFiles, why: String) -> AuditError {
    AuditError::Writer {
        path: files.db.display().to_string(),
        why,
    }
}

impl Writer {
    /// The writer of `files` from `tip` on: its own connection, the WAL's checkpoints and the
    /// head file's writer.
    fn open(files: &AuditFiles, tip: Tip, counters: Arc<Counters>) -> Result<Writer, AuditError> {
        let conn = open_writer(&files.db).map_err(|e| writer_error(files, e.to_string()))?;
        let identity = file_identity(&files.db).map_err(|e| writer_error(files, e.to_string()))?;
        Ok(Writer {
            wal: wal::WalCheckpoints::start(&files.db, &conn),
            head: HeadWriter::start(files.head.clone(), &files.key),
            conn,
            tip,
            files: files.clone(),
            counters,
            identity,
            replaced: None,
            signing: files.key.signing_key(),
            masker: Default::default(),
        })
    }
}

impl AuditStore {
    /// Opens the store, checks the database against its head file (a database that lost rows
    /// since is reported: the old head is kept beside it and a row says so), writes a start
    /// checkpoint and starts the writer task.
    pub async fn open(files: &AuditFiles) -> Result<AuditStore, AuditError> {
        let pool = open_pool(&files.db).await?;
        let tip = read_tip(&pool).await?;
        let mismatch = anchor_mismatch(&pool, files, tip.rows).await?;
        let counters = Arc::new(Counters::default());
        counters.healthy.store(true, Ordering::Relaxed);
        counters.rows.store(tip.rows, Ordering::Relaxed);
        let (jobs, rx) = flume::bounded(QUEUE_DEPTH);
        publish_public_key(files);
        let opened_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let writer = Arc::new(Mutex::new(Writer::open(files, tip, counters.clone())?));
        let unfinished = Arc::new(AtomicUsize::new(0));
        // The opening pool is closed, and the rare read later takes a connection that closes
        // when idle: the writer's is then the store's one lasting connection, and closing it
        // (the store dropped) moves the WAL into the file every time, not only when it happened
        // to close after the pool's.
        pool.close().await;
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .idle_timeout(READER_IDLE)
            .connect_lazy_with(connect_options(&files.db)?);
        let (thread_writer, thread_unfinished) = (writer.clone(), unfinished.clone());
        let holding = Arc::new(AtomicBool::new(false));
        let thread_holding = holding.clone();
        let thread = std::thread::Builder::new()
            .name("audit-writer".into())
            .spawn(move || writer_thread(&thread_writer, rx, &thread_unfinished, &thread_holding))
            .map_err(|e| writer_error(files, e.to_string()))?;
        let store = AuditStore {
            jobs,
            writer,
            unfinished,
            appending: Arc::default(),
            bell: Arc::new(HoldBell {
                holding,
                writer: thread.thread().clone(),
            }),
            counters,
            pool,
            opened_ms,
        };
        if let Some(detail) = mismatch {
            tracing::error!(%detail, "the audit database does not match its head");
            store
                .append(AuditEvent {
                    source: Source::Gate.into(),
                    kind: RowKind::Audit.into(),
                    outcome: Outcome::AnchorMismatch.into(),
                    detail,
                    ..Default::default()
                })
                .await;
        }
        store.checkpoint(Outcome::Start).await;
        Ok(store)
    }

    /// Masks every row's `reason` with `known` from now on: the accounts' secret values, besides
    /// what looks like a secret (which is masked without it).
    pub fn mask_reasons_with(&self, known: glovebox_redact::KnownSecrets) {
        lock_writer(&self.writer).masker = known;
    }

    /// Writes a checkpoint row (rows so far and the head) and waits for it.
    pub async fn checkpoint(&self, why: Outcome) -> bool {
        let (done, wait) = oneshot::channel();
        if !self.send(Job::Checkpoint { why, done }).await {
            return false;
        }
        wait.await.unwrap_or(false)
    }

    /// Hands `job` to the writer thread, counted as unfinished until the thread has done it.
    /// Returns whether the thread took it.
    async fn send(&self, job: Job) -> bool {
        let ends_hold = !job.unawaited();
        self.unfinished.fetch_add(1, Ordering::SeqCst);
        let sent = self.jobs.send_async(job).await.is_ok();
        if !sent {
            self.unfinished.fetch_sub(1, Ordering::SeqCst);
        } else if ends_hold || self.jobs.len() >= MAX_BATCH {
            self.bell.ring();
        }
        sent
    }

    /// Appends one event and waits until it is written. Returns whether it was.
    pub async fn append(&self, event: AuditEvent) -> bool {
        self.append_all(vec![event]).await
    }

    /// Appends events as one unit (one place in the queue; chained one after the other and
    /// committed in the same transaction, so either all are written or none) and waits until
    /// they are written. Returns whether they were.
    pub async fn append_all(&self, events: Vec<AuditEvent>) -> bool {
        let _appending = Appending::start(&self.appending);
        // Requests that came in with this one (already read, or waiting on the sockets: a yield
        // has the runtime look) get to their appends first, so that rows arriving together
        // share a commit.
        tokio::task::yield_now().await;
        let events = match self.write_if_idle(events) {
            Ok(written) => return written,
            Err(events) => events,
        };
        let (done, wait) = oneshot::channel();
        if !self.send(Job::Events { events, done }).await {
            self.record_failure("audit writer has stopped");
            return false;
        }
        wait.await.unwrap_or(false)
    }

    /// Commits `events` on the caller's thread if nothing is queued for the writer thread, it
    /// is not writing and no other caller is appending: the rows go in as they would have
    /// (they would have been the writer's whole batch), without the hand-over to the thread and
    /// back — two thread wake-ups, which with calls one at a time cost the gate about as much
    /// CPU as the commit itself. Gives the events back when the writer is busy, another caller
    /// is appending (their rows can share a commit, made by the writer thread while the gate's
    /// worker goes on), or the file is busy (another connection holds its lock: the caller
    /// does not wait for it, the writer thread does); otherwise returns whether they were
    /// written.
    fn write_if_idle(&self, events: Vec<AuditEvent>) -> Result<bool, Vec<AuditEvent>> {
        if self.unfinished.load(Ordering::SeqCst) != 0 || self.appending.load(Ordering::Relaxed) > 1
        {
            return Err(events);
        }
        let Ok(mut writer) = self.writer.try_lock() else {
            return Err(events);
        };
        if self.unfinished.load(Ordering::SeqCst) != 0 {
            return Err(events);
        }
        let written = NO_LOCK_WAIT.with(|no_wait| {
            no_wait.set(true);
            let written = writer.try_commit(&events);
            if written.is_some() {
                writer.checkpoint_if_due_by_rows();
            }
            no_wait.set(false);
            written
        });
        written.ok_or(events)
    }

    /// Queues one event without waiting for its commit: returns once it has its place in the
    /// writer's queue, so any row appended later is committed with it or after it. Only for a
    /// row whose call is acknowledged by a later, awaited append (a failure is still counted).
    pub async fn append_queued(&self, event: AuditEvent) {
        let (done, _) = oneshot::channel();
        let job = Job::Events {
            events: vec![event],
            done,
        };
        if !self.send(job).await {
            self.record_failure("audit writer has stopped");
        }
    }

    /// When this store opened (ms since the epoch).
    pub fn opened_ms(&self) -> u64 {
        self.opened_ms
    }

    /// Whether a committed row of `kind` names call `call_id` of `account`.
    pub async fn has_row(
        &self,
        account: &str,
        call_id: &str,
        kind: &str,
    ) -> Result<bool, sqlx::Error> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM events WHERE call_id = ? AND account = ? AND kind = ? LIMIT 1",
        )
        .bind(call_id)
        .bind(account)
        .bind(kind)
        .fetch_optional(&self.pool)
        .await?;
        Ok(found.is_some())
    }

    fn record_failure(&self, why: &str) {
        self.counters.healthy.store(false, Ordering::Relaxed);
        self.counters.failures.fetch_add(1, Ordering::Relaxed);
        tracing::error!(error = why, "audit write failed");
    }

    /// The newest signed checkpoint written by this gate: `<rows> rows, digest <16 hex digits>`,
    /// what approvers are shown so that a rewrite of the audit would have to match what a person
    /// outside the gate's user saw.
    pub fn newest_checkpoint(&self) -> Option<String> {
        self.counters
            .checkpoint
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn health(&self) -> AuditHealth {
        AuditHealth {
            healthy: self.counters.healthy.load(Ordering::Relaxed),
            failures: self.counters.failures.load(Ordering::Relaxed),
            rows: self.counters.rows.load(Ordering::Relaxed),
        }
    }
}

/// Most appends written at once (each one row, or a call's last two). Under load the writer takes
/// every queued append (up to this) and writes their rows with one multi-row INSERT, which SQLite
/// commits atomically, so one commit serves many calls (appends queue while the one before
/// commits); each caller still waits until its rows are committed.
const MAX_BATCH: usize = 64;
/// Longest a batch of rows nobody waits for is held for rows that someone will: an allowed
/// call's decide row is queued, not awaited, and its execute and result rows follow as soon as
/// the executor has run it — one commit for the three instead of two. (Rows held when the gate
/// dies are the queued decide rows that the executor's ticket restores.)
const HOLD_UNAWAITED: Duration = Duration::from_millis(10);

/// How the writer thread is woken out of a hold. Held, it waits parked rather than on the queue,
/// so that the rows nobody waits for, which keep coming under load, do not wake it one by one (a
/// thread switch each, and a commit of the few rows queued so far): only an awaited job, or a
/// queue holding a full batch, ends the hold early.
struct HoldBell {
    /// Set by the writer thread, before it looks at the queue, for as long as it holds a batch.
    holding: Arc<AtomicBool>,
    writer: std::thread::Thread,
}

impl HoldBell {
    /// Called after a job is queued. Either the writer thread sees the job when it looks at the
    /// queue after setting `holding`, or this sees `holding` set and unparks it (an unpark before
    /// the park makes the park return at once).
    fn ring(&self) {
        if self.holding.load(Ordering::SeqCst) {
            self.writer.unpark();
        }
    }
}

/// Holds `batch`, whose jobs nobody waits for, up to [`HOLD_UNAWAITED`]: takes what is queued
/// meanwhile, and stops early once an awaited job is among it or the batch is full.
fn hold(jobs: &flume::Receiver<Job>, batch: &mut Vec<Job>, holding: &AtomicBool) {
    let deadline = std::time::Instant::now() + HOLD_UNAWAITED;
    holding.store(true, Ordering::SeqCst);
    loop {
        let seen = batch.len();
        take_queued(jobs, batch);
        let now = std::time::Instant::now();
        if batch.len() >= MAX_BATCH
            || batch[seen..].iter().any(|j| !j.unawaited())
            || now >= deadline
        {
            break;
        }
        std::thread::park_timeout(deadline - now);
    }
    holding.store(false, Ordering::SeqCst);
}

/// The writer's connection: WAL (set on the file when the pool opened it) with
/// `synchronous=NORMAL` — a commit survives the process's death; a power loss can take the
/// commits since the WAL was last synced — and room in the statement cache for every batch size.
fn open_writer(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.busy_handler(Some(wait_for_lock))?;
    conn.set_prepared_statement_cache_capacity(MAX_BATCH + 1);
    Ok(conn)
}

thread_local! {
    /// Set while a caller commits its own rows ([`AuditStore::append_all`]): a lock held by
    /// another connection then fails the commit at once, and the rows go to the writer thread.
    static NO_LOCK_WAIT: Cell<bool> = const { Cell::new(false) };
}

/// A commit held by another connection (the WAL thread's restart, a reader's lock) waits in
/// steps of 50 µs — SQLite's own waits start at 1 ms — for 5 s of steps in all; not at all on a
/// caller's thread ([`NO_LOCK_WAIT`]).
fn wait_for_lock(tries: i32) -> bool {
    if NO_LOCK_WAIT.with(Cell::get) {
        return false;
    }
    std::thread::sleep(Duration::from_micros(50));
    tries < 100_000
}

/// What writes the audit: its connection, the chain's tip and the threads that follow commits.
/// The writer thread holds it for each batch; a caller holds it to commit its own rows while the
/// writer is idle ([`AuditStore::append_all`]).
struct Writer {
    // Before `conn`, so dropped (the WAL thread's connection closed) before it.
    wal: Option<wal::WalCheckpoints>,
    head: HeadWriter,
    conn: rusqlite::Connection,
    tip: Tip,
    files: AuditFiles,
    counters: Arc<Counters>,
    /// The database file's device and inode when the store opened it.
    identity: (u64, u64),
    /// Why the file at the database's path is no longer the one open (deleted or replaced
    /// under the running gate): from then on nothing is written or acknowledged.
    replaced: Option<String>,
    /// Signs each checkpoint (derived from the audit key: [`AuditKey::signing_key`]).
    signing: ed25519_dalek::SigningKey,
    /// Masks each row's `reason` (an error message may carry what a server or a file said):
    /// the account's known secrets by value, and what looks like a secret.
    masker: glovebox_redact::KnownSecrets,
}

/// The device and inode of the file at `path` (not following a link).
fn file_identity(path: &std::path::Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path)?;
    Ok((meta.dev(), meta.ino()))
}

fn lock_writer(writer: &Mutex<Writer>) -> std::sync::MutexGuard<'_, Writer> {
    writer
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The writer thread: takes every queued append, writes them in one commit, answers their callers
/// and writes checkpoints; returns once every handle to the store is gone.
fn writer_thread(
    writer: &Mutex<Writer>,
    jobs: flume::Receiver<Job>,
    unfinished: &AtomicUsize,
    holding: &AtomicBool,
) {
    loop {
        let due = {
            let w = lock_writer(writer);
            (w.tip.since_checkpoint > 0)
                .then(|| CHECKPOINT_INTERVAL.saturating_sub(w.tip.checkpoint_at.elapsed()))
        };
        let first = match due {
            Some(due) => match jobs.recv_timeout(due) {
                Ok(job) => job,
                Err(flume::RecvTimeoutError::Timeout) => {
                    let mut w = lock_writer(writer);
                    // A caller's commit may have written one meanwhile.
                    if w.tip.checkpoint_at.elapsed() >= CHECKPOINT_INTERVAL {
                        w.write_checkpoint(Outcome::Interval, false);
                    }
                    continue;
                }
                Err(flume::RecvTimeoutError::Disconnected) => return,
            },
            None => match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        let mut batch = vec![first];
        take_queued(&jobs, &mut batch);
        if batch.iter().all(Job::unawaited) {
            hold(&jobs, &mut batch, holding);
        }
        let metrics = glovebox_telemetry::metrics::gate();
        metrics.audit_queue((jobs.len() + batch.len()) as u64);
        let taken = batch.len();
        let mut events = Vec::new();
        let mut waiting = Vec::new();
        let mut checkpoints = Vec::new();
        for job in batch {
            match job {
                Job::Events {
                    events: mut rows,
                    done,
                } => {
                    events.append(&mut rows);
                    waiting.push(done);
                }
                Job::Checkpoint { why, done } => checkpoints.push((why, done)),
            }
        }
        let mut w = lock_writer(writer);
        if !events.is_empty() {
            let ok = w.commit(&events);
            metrics.audit_queue(jobs.len() as u64);
            for done in waiting {
                let _ = done.send(ok);
            }
        }
        for (why, done) in checkpoints {
            let ok = w.write_checkpoint(why, true);
            let _ = done.send(ok);
        }
        w.checkpoint_if_due_by_rows();
        // Done, and counted so before a caller can take the lock: one that then finds nothing
        // unfinished writes after these rows.
        unfinished.fetch_sub(taken, Ordering::SeqCst);
    }
}

/// Moves what is queued now into `batch`, up to [`MAX_BATCH`].
fn take_queued(jobs: &flume::Receiver<Job>, batch: &mut Vec<Job>) {
    while batch.len() < MAX_BATCH {
        match jobs.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}

impl Writer {
    /// Writes `events` as one batch and hands the new head over; returns whether they were
    /// written (a failure is counted and logged).
    fn commit(&mut self, events: &[AuditEvent]) -> bool {
        self.try_commit(events).unwrap_or(false)
    }

    /// [`Writer::commit`]; on a caller's thread ([`NO_LOCK_WAIT`]), nothing when the file is
    /// locked by another connection (the rows are not written and nothing is counted): `None`.
    fn try_commit(&mut self, events: &[AuditEvent]) -> Option<bool> {
        if self.file_was_replaced() {
            let why = self.replaced.clone().unwrap_or_default();
            return Some(self.count(Err(rusqlite::Error::InvalidPath(why.into())), events));
        }
        let started = std::time::Instant::now();
        let written = write_batch(
            &self.conn,
            events,
            &mut self.tip,
            &self.files.key,
            &self.masker,
        );
        if let Err(rusqlite::Error::SqliteFailure(e, _)) = &written
            && matches!(
                e.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            )
            && NO_LOCK_WAIT.with(Cell::get)
        {
            return None;
        }
        glovebox_telemetry::metrics::gate().audit_commit(started.elapsed().as_secs_f64());
        Some(self.count(written, events))
    }

    /// Whether the file at the database's path is no longer the one this store writes (checked
    /// before every batch: one `lstat`). Rows written to a deleted or replaced file would be
    /// acknowledged and lost, so the first time it is seen the store stops writing, health
    /// turns bad, and the head is kept as `<head>.mismatch-<unix seconds>`, which `verify`
    /// reports.
    fn file_was_replaced(&mut self) -> bool {
        if self.replaced.is_some() {
            return true;
        }
        let why = match file_identity(&self.files.db) {
            Ok(now) if now == self.identity => return false,
            Ok(_) => "the audit database was replaced under the running gate",
            Err(_) => "the audit database was deleted under the running gate",
        };
        let kept = self.files.head.with_extension(format!(
            "head.mismatch-{}",
            glovebox_ticket::now_ms().unwrap_or(0) / 1000
        ));
        let _ = std::fs::copy(&self.files.head, &kept);
        tracing::error!(db = %self.files.db.display(), kept = %kept.display(), "{why}; no call is acknowledged until the gate is restarted");
        self.replaced = Some(why.to_owned());
        self.counters.healthy.store(false, Ordering::Relaxed);
        true
    }

    /// Counts a batch's outcome; after a commit, the head follows: the rows are committed, and a
    /// head one batch behind (the gate killed in between) still anchors every row before it.
    fn count(&mut self, written: rusqlite::Result<()>, events: &[AuditEvent]) -> bool {
        let counters = &self.counters;
        match written {
            Ok(()) => {
                counters.healthy.store(true, Ordering::Relaxed);
                counters.rows.store(self.tip.rows, Ordering::Relaxed);
                counters.commits.fetch_add(1, Ordering::Relaxed);
                self.head.write(&self.files.key, self.tip.end());
                if let Some(wal) = &self.wal {
                    wal.committed();
                }
                true
            }
            Err(e) => {
                counters.healthy.store(false, Ordering::Relaxed);
                counters
                    .failures
                    .fetch_add(events.len() as u64, Ordering::Relaxed);
                for event in events {
                    tracing::error!(error = %e, kind = %event.kind, call_id = %event.call_id, "audit write failed");
                }
                false
            }
        }
    }

    /// A checkpoint row once [`CHECKPOINT_ROWS`] rows followed the last (on a caller's thread,
    /// left for the next commit if the file is busy).
    fn checkpoint_if_due_by_rows(&mut self) {
        if self.tip.since_checkpoint >= CHECKPOINT_ROWS {
            let _ = self.try_write_checkpoint(Outcome::Rows, false);
        }
    }

    /// A checkpoint row: the rows before it and the head it follows, under the chain's MAC.
    fn write_checkpoint(&mut self, why: Outcome, asked: bool) -> bool {
        self.try_write_checkpoint(why, asked).unwrap_or(false)
    }

    /// [`Writer::write_checkpoint`]; `None` as [`Writer::try_commit`].
    fn try_write_checkpoint(&mut self, why: Outcome, asked: bool) -> Option<bool> {
        let checkpoint = signed::Checkpoint {
            rows: self.tip.rows,
            last_id: self.tip.last_id,
            mac: self.tip.mac.clone(),
            digest: self.tip.digest.clone(),
        };
        let event = AuditEvent {
            source: Source::Gate.into(),
            kind: RowKind::Checkpoint.into(),
            outcome: why.into(),
            detail: checkpoint.detail(&self.signing),
            ..Default::default()
        };
        let ok = self.try_commit(std::slice::from_ref(&event))?;
        if ok {
            *self
                .counters
                .checkpoint
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(format!(
                "{} rows, digest {}",
                checkpoint.rows,
                checkpoint.digest.get(..16).unwrap_or(&checkpoint.digest)
            ));
            // Off the database: the log (the journal, under systemd) keeps each signed checkpoint,
            // so a database cut back to an older one shows against it.
            tracing::info!(
                target: "glovebox::audit::checkpoint",
                why = why.as_str(),
                detail = %event.detail,
                "audit checkpoint"
            );
            // A checkpoint asked for (at start, at a stop) has its head on disk when it is
            // answered; one written as the rows or the time came is handed over like any other.
            if asked {
                self.head.write_now(&self.files.key, self.tip.end());
            }
            self.tip.since_checkpoint = 0;
            self.tip.checkpoint_at = std::time::Instant::now();
        }
        Some(ok)
    }
}

/// Compares the database with its head file at start. `Some(what)` when the database lost rows
/// the head had seen (a removed tail, a wiped or replaced database): the old head is kept as
/// `<head>.mismatch-<unix seconds>` for `verify` and people to see.
async fn anchor_mismatch(
    pool: &SqlitePool,
    files: &AuditFiles,
    rows: u64,
) -> Result<Option<String>, AuditError> {
    let Ok(text) = std::fs::read_to_string(&files.head) else {
        return Ok(None);
    };
    let problem = match Head::decode(&text, &files.key) {
        Err(e) => Some(e.to_string()),
        Ok(head) => {
            let at: Option<String> = sqlx::query_scalar("SELECT hash FROM events WHERE id = ?")
                .bind(head.last_id)
                .fetch_optional(pool)
                .await?;
            match at {
                Some(mac) if mac == head.mac && rows >= head.rows => None,
                _ => Some(format!(
                    "the head written at {} says {} rows up to row {}; the database has {rows}",
                    head.ts, head.rows, head.last_id
                )),
            }
        }
    };
    let Some(problem) = problem else {
        return Ok(None);
    };
    let kept = files.head.with_extension(format!(
        "head.mismatch-{}",
        glovebox_ticket::now_ms().unwrap_or(0) / 1000
    ));
    let _ = std::fs::rename(&files.head, &kept);
    Ok(Some(format!(
        "{problem} (old head kept at {})",
        kept.display()
    )))
}

/// Writes a batch in one statement, chaining each row to the one before, and moves `tip` past
/// it. Either every row is written or none is (and `tip` is unchanged).
fn write_batch(
    conn: &rusqlite::Connection,
    events: &[AuditEvent],
    tip: &mut Tip,
    key: &AuditKey,
    masker: &glovebox_redact::KnownSecrets,
) -> rusqlite::Result<()> {
    let mut rows = Vec::with_capacity(events.len());
    let mut prev = tip.mac.clone();
    // The rows of one commit are written at one time.
    let ts = rfc3339_millis(SystemTime::now());
    let mut digest = tip.digest.clone();
    for event in events {
        let fields = fields_of(ts.clone(), event, masker);
        let mac = chain::row_mac(key, &prev, &fields);
        digest = signed::digest_step(&digest, &fields);
        rows.push((fields, prev, mac.clone()));
        prev = mac;
    }
    // One statement for the whole batch: it is atomic without an explicit transaction.
    let last_id = insert(conn, &rows)?;
    tip.rows += rows.len() as u64;
    tip.since_checkpoint += rows.len() as u64;
    tip.last_id = last_id;
    tip.mac = prev;
    tip.digest = digest;
    Ok(())
}

/// The public digest after the last row: read from the newest signed checkpoint and carried
/// over the rows after it (from the first row when none is signed yet).
async fn digest_at_tip(pool: &SqlitePool) -> Result<String, AuditError> {
    let newest: Option<(i64, String)> = sqlx::query_as(
        "SELECT id, detail FROM events WHERE source = 'gate' AND kind = 'checkpoint' \
         AND detail LIKE '% signature %' ORDER BY id DESC LIMIT 1",
    )
    .fetch_optional(pool)
    .await?;
    let (mut digest, from) = match newest
        .as_ref()
        .and_then(|(id, detail)| Some((signed::Checkpoint::parse(detail)?.0.digest, *id)))
    {
        Some(found) => found,
        None => (GENESIS.to_owned(), 0),
    };
    let sql = format!(
        "SELECT id, {} FROM events WHERE id >= ? ORDER BY id LIMIT ?",
        row::column_list()
    );
    let mut next = from;
    loop {
        let page = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(next)
            .bind(DIGEST_PAGE)
            .fetch_all(pool)
            .await?;
        for r in &page {
            let raw = row::RawRow::from_row(r)?;
            digest = signed::digest_step(&digest, &raw.stored().fields);
            next = raw.id + 1;
        }
        if (page.len() as i64) < DIGEST_PAGE {
            return Ok(digest);
        }
    }
}

/// Rows read at a time when the digest is carried over at open.
const DIGEST_PAGE: i64 = 10_000;

/// Writes the public checkpoint key beside the head (`audit.pub`, readable by all): what a
/// verifier without the audit key checks signed checkpoints with.
fn publish_public_key(files: &AuditFiles) {
    let path = files.head.with_file_name("audit.pub");
    let text = format!("{}\n", signed::public_key_hex(&files.key));
    if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let written = glovebox_config::write_file_unsynced(&path, text.as_bytes())
        .map_err(|e| e.to_string())
        .and_then(|()| {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
                .map_err(|e| e.to_string())
        });
    if let Err(e) = written {
        tracing::warn!(error = %e, path = %path.display(), "could not write the public checkpoint key");
    }
}

fn fields_of(ts: String, e: &AuditEvent, masker: &glovebox_redact::KnownSecrets) -> Fields {
    Fields {
        ts,
        call_id: e.call_id.clone(),
        client_call_id: e.client_call_id.clone(),
        account: e.account.clone(),
        source: e.source.clone(),
        kind: e.kind.clone(),
        tool: e.tool.clone(),
        subject: e.subject.clone(),
        verdict: e.verdict.clone(),
        rule: e.rule.clone(),
        reason: masker.mask(&e.account, &e.reason),
        approval: e.approval.clone(),
        outcome: e.outcome.clone(),
        error_code: e.error_code.clone(),
        detail: e.detail.clone(),
        duration_ms: e.duration_ms,
        bytes: e.bytes,
    }
}

/// Inserts keyed rows; returns the last row's id.
fn insert(conn: &rusqlite::Connection, rows: &[(Fields, String, String)]) -> rusqlite::Result<i64> {
    let tuple = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)";
    // Safe: the statement is built only from the constant column list and placeholders.
    let sql = format!(
        "INSERT INTO events (ts, call_id, client_call_id, account, source, kind, tool, subject, \
         verdict, rule, reason, approval, outcome, error_code, detail, duration_ms, bytes, \
         prev_hash, hash, keyed) VALUES {}",
        vec![tuple; rows.len()].join(", ")
    );
    let mut q = conn.prepare_cached(&sql)?;
    let mut at = 0;
    let mut next = || {
        at += 1;
        at
    };
    for (f, prev, mac) in rows {
        for (_, value) in f.text(true) {
            q.raw_bind_parameter(next(), (!value.is_empty()).then_some(value))?;
        }
        for n in [f.duration_ms, f.bytes] {
            q.raw_bind_parameter(next(), i64::try_from(n).unwrap_or(i64::MAX))?;
        }
        q.raw_bind_parameter(next(), prev.as_str())?;
        q.raw_bind_parameter(next(), mac.as_str())?;
    }
    q.raw_execute()?;
    Ok(conn.last_insert_rowid())
}

/// Reads every row and checks the chain against `key` and the head file's text (if any); see
/// [`row::check_rows`], which the fleet's verify shares.
pub async fn verify(
    pool: &SqlitePool,
    key: &AuditKey,
    head: Option<&str>,
) -> Result<chain::Report, AuditError> {
    Ok(row::check_rows(&all_rows(pool).await?, key, head))
}

/// The local rows checked with a public checkpoint key only (no audit key).
pub async fn verify_signed(
    pool: &SqlitePool,
    public: &ed25519_dalek::VerifyingKey,
) -> Result<signed::SignedReport, AuditError> {
    let rows = all_rows(pool).await?;
    Ok(signed::check_public(
        rows.iter().map(row::RawRow::stored),
        public,
    ))
}

/// Every row, oldest first.
async fn all_rows(pool: &SqlitePool) -> Result<Vec<row::RawRow>, AuditError> {
    let sql = format!("SELECT id, {} FROM events ORDER BY id", row::column_list());
    // Safe: built from the constant column list.
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_all(pool)
        .await?;
    Ok(rows
        .iter()
        .map(row::RawRow::from_row)
        .collect::<Result<Vec<_>, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::head::HEAD_INTERVAL;
    use super::*;

    fn event(kind: &str, call: &str) -> AuditEvent {
        AuditEvent {
            call_id: call.into(),
            account: "alice".into(),
            source: "gate".into(),
            kind: kind.into(),
            tool: "file_read".into(),
            ..Default::default()
        }
    }

    fn files(dir: &Path) -> AuditFiles {
        AuditFiles {
            db: dir.join("audit.db"),
            head: dir.join("audit.head"),
            key: AuditKey::from_bytes(&[3u8; 32]).unwrap(),
        }
    }

    async fn check(files: &AuditFiles) -> chain::Report {
        let pool = open_pool(&files.db).await.unwrap();
        let head = std::fs::read_to_string(&files.head).ok();
        verify(&pool, &files.key, head.as_deref()).await.unwrap()
    }

    /// Each of `sqls` is refused by the append-only triggers.
    async fn assert_append_only(pool: &SqlitePool, sqls: &[&'static str]) {
        for sql in sqls {
            let err = sqlx::query(*sql)
                .execute(pool)
                .await
                .unwrap_err()
                .to_string();
            assert!(err.contains("append-only"), "{sql}: {err}");
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339_millis(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_996_961_123);
        assert_eq!(rfc3339_millis(t), "2026-11-30T00:02:41.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339_millis(leap), "2000-02-29T00:00:00.000Z");
    }

    #[tokio::test]
    async fn a_rows_reason_is_stored_with_known_secrets_and_secret_looking_words_masked() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let store = AuditStore::open(&f).await.unwrap();
        let known = glovebox_redact::KnownSecrets::default();
        known.learn("alice", ["open-sesame-42".to_owned()]);
        store.mask_reasons_with(known);
        let mut e = event("result", "c1");
        e.reason = "pack failed: login open-sesame-42 refused (secret=hunter2)".into();
        assert!(store.append(e).await);
        let pool = open_pool(&f.db).await.unwrap();
        let reason: String = sqlx::query_scalar("SELECT reason FROM events WHERE call_id = 'c1'")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(reason, "pack failed: login **** refused (secret=****)");
        // the chain covers what was stored
        let r = check(&f).await;
        assert_eq!(r.problem, None);
    }

    /// The local rows checked with the published public key only.
    async fn check_signed(f: &AuditFiles) -> signed::SignedReport {
        let public = std::fs::read_to_string(f.head.with_file_name("audit.pub")).unwrap();
        let public = signed::parse_public_key(&public).unwrap();
        let pool = open_pool(&f.db).await.unwrap();
        let sql = format!("SELECT id, {} FROM events ORDER BY id", row::column_list());
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(&pool)
            .await
            .unwrap();
        let rows: Vec<_> = rows
            .iter()
            .map(|r| row::RawRow::from_row(r).unwrap().stored())
            .collect();
        signed::check_public(rows, &public)
    }

    #[tokio::test]
    async fn checkpoints_are_signed_across_restarts_and_verify_with_the_public_key_alone() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        for run in 0..3 {
            let store = AuditStore::open(&f).await.unwrap();
            for i in 0..5 {
                assert!(store.append(event("decide", &format!("r{run}-{i}"))).await);
            }
            assert!(store.checkpoint(Outcome::Stop).await);
        }
        let r = check_signed(&f).await;
        assert_eq!(r.problem, None);
        // 3 × (start checkpoint, 5 rows, stop checkpoint); the last checkpoint covers the rest
        assert_eq!((r.rows, r.covered, r.checkpoints), (21, 20, 6));
        // the key is the audit key's: another audit key's public half refuses every checkpoint
        let other = signed::public_key_hex(&AuditKey::from_bytes(&[4u8; 32]).unwrap());
        let public = f.head.with_file_name("audit.pub");
        std::fs::write(&public, &other).unwrap();
        let r = check_signed(&f).await;
        assert_eq!(r.problem, Some(signed::SignedProblem::Forged { id: 1 }));
        // A key swapped into the state directory is put right by the gate's next start.
        drop(AuditStore::open(&f).await.unwrap());
        assert_eq!(
            std::fs::read_to_string(&public).unwrap().trim(),
            signed::public_key_hex(&f.key)
        );
    }

    #[tokio::test]
    async fn rows_chain_and_refuse_changes() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let store = AuditStore::open(&f).await.unwrap();
        assert!(store.append(event("decide", "c1")).await);
        assert!(store.append(event("result", "c1")).await);
        // The start checkpoint, then the two rows.
        assert_eq!(
            store.health(),
            AuditHealth {
                healthy: true,
                failures: 0,
                rows: 3
            }
        );
        let r = check(&f).await;
        assert_eq!((r.problem, r.rows, r.head_checked), (None, 3, true));
        let pool = open_pool(&f.db).await.unwrap();
        assert_append_only(
            &pool,
            &[
                "UPDATE events SET outcome = 'ok'",
                "DELETE FROM events",
                "DELETE FROM events WHERE id = 1",
            ],
        )
        .await;
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tool_calls")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(n, 1);
        // empty strings are NULL for SQL users
        let rule: Option<String> = sqlx::query_scalar("SELECT rule FROM events WHERE id = 2")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(rule, None);
        let first: (String, String) =
            sqlx::query_as("SELECT kind, outcome FROM events WHERE id = 1")
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(first, ("checkpoint".into(), "start".into()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_are_batched_into_one_unbroken_chain() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let store = AuditStore::open(&f).await.unwrap();
        let tasks: Vec<_> = (0..200)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { store.append(event("decide", &format!("c{i}"))).await })
            })
            .collect();
        for t in tasks {
            assert!(t.await.unwrap());
        }
        assert_eq!(store.health().rows, 201);
        let r = check(&f).await;
        assert_eq!((r.problem, r.rows), (None, 201));
        let pool = open_pool(&f.db).await.unwrap();
        let distinct: i64 = sqlx::query_scalar("SELECT COUNT(DISTINCT call_id) FROM events")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(distinct, 200);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rows_appended_together_are_adjacent_and_committed_together() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let store = AuditStore::open(&f).await.unwrap();
        // Other calls' rows race the pairs; each pair still lands as two consecutive rows.
        let tasks: Vec<_> = (0..50)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let call = format!("c{i}");
                    let lone = store.append(event("decide", &format!("d{i}")));
                    let pair =
                        store.append_all(vec![event("execute", &call), event("result", &call)]);
                    let (a, b) = tokio::join!(lone, pair);
                    a && b
                })
            })
            .collect();
        for t in tasks {
            assert!(t.await.unwrap());
        }
        let pool = open_pool(&f.db).await.unwrap();
        let rows: Vec<(i64, String, String)> =
            sqlx::query_as("SELECT id, kind, call_id FROM events WHERE kind <> 'checkpoint'")
                .fetch_all(&pool)
                .await
                .unwrap();
        assert_eq!(rows.len(), 150);
        for (id, kind, call) in &rows {
            if kind == "execute" {
                let next = rows.iter().find(|r| r.0 == id + 1).unwrap();
                assert_eq!((next.1.as_str(), &next.2), ("result", call));
            }
        }
        let r = check(&f).await;
        assert_eq!((r.problem, r.rows), (None, 151));
        // A failing store writes neither row of a pair.
        sqlx::query(
            "CREATE TRIGGER events_fail BEFORE INSERT ON events WHEN NEW.kind = 'result' BEGIN SELECT RAISE(ABORT, 'disk full'); END",
        )
        .execute(&pool)
        .await
        .unwrap();
        assert!(
            !store
                .append_all(vec![event("execute", "lost"), event("result", "lost")])
                .await
        );
        let lost: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE call_id = 'lost'")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(lost, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_writers_rows_are_committed_by_their_caller_who_never_waits_for_a_lock() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let store = AuditStore::open(&f).await.unwrap();
        let commits = || store.counters.commits.load(Ordering::Relaxed);
        let before = commits();
        // Idle: the caller commits (unless the WAL thread happens to hold the file just then).
        let mut rows = vec![event("decide", "c1")];
        for _ in 0..100 {
            match store.write_if_idle(rows) {
                Ok(written) => {
                    assert!(written);
                    rows = Vec::new();
                    break;
                }
                Err(back) => rows = back,
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(rows.is_empty(), "never committed by its caller");
        assert_eq!(commits(), before + 1);
        assert!(store.has_row("alice", "c1", "decide").await.unwrap());
        // Not while a job sent to the writer thread is unfinished (the caller's rows go behind
        // it), nor while the thread writes.
        store.unfinished.fetch_add(1, Ordering::SeqCst);
        let given_back = store
            .write_if_idle(vec![event("decide", "c2")])
            .unwrap_err();
        store.unfinished.fetch_sub(1, Ordering::SeqCst);
        // Nor while another caller appends.
        let (mine, other) = (
            Appending::start(&store.appending),
            Appending::start(&store.appending),
        );
        let given_back = store.write_if_idle(given_back).unwrap_err();
        drop((mine, other));
        let writing = lock_writer(&store.writer);
        let given_back = store.write_if_idle(given_back).unwrap_err();
        drop(writing);
        assert_eq!(given_back.len(), 1);
        assert_eq!(commits(), before + 1);
        assert!(store.append_all(given_back).await);
        // Another connection holds the file's write lock: the caller's rows come back at once,
        // nothing counted as failed, and the writer thread writes them once the lock is gone.
        let other = rusqlite::Connection::open(&f.db).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let started = std::time::Instant::now();
        let given_back = store
            .write_if_idle(vec![event("decide", "c3")])
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "it waited for the lock"
        );
        let waiting = tokio::spawn({
            let store = store.clone();
            async move { store.append_all(given_back).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "written through another's lock");
        other.execute_batch("COMMIT").unwrap();
        assert!(waiting.await.unwrap());
        assert_eq!(store.health().failures, 0);
        let pool = open_pool(&f.db).await.unwrap();
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT call_id, kind FROM events WHERE kind <> 'checkpoint' ORDER BY id",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        let rows: Vec<(&str, &str)> = rows.iter().map(|(c, k)| (c.as_str(), k.as_str())).collect();
        assert_eq!(rows, [("c1", "decide"), ("c2", "decide"), ("c3", "decide")]);
        // Checkpoints by rows follow the callers' commits too.
        for i in 0..CHECKPOINT_ROWS {
            assert!(store.append(event("decide", &format!("n{i}"))).await);
        }
        let by_rows: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM events WHERE kind = 'checkpoint' AND outcome = 'rows'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(by_rows, 1);
        let r = check(&f).await;
        assert_eq!(r.problem, None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queued_row_waits_for_the_awaited_rows_that_follow_it_and_not_longer() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let store = AuditStore::open(&f).await.unwrap();
        let commits = || store.counters.commits.load(Ordering::Relaxed);
        let before = commits();
        // An allowed call: its decide row queued, then its execute and result rows awaited.
        store.append_queued(event("decide", "c")).await;
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(
            store
                .append_all(vec![event("execute", "c"), event("result", "c")])
                .await
        );
        assert_eq!(commits(), before + 1, "the call's three rows in one commit");
        let pool = open_pool(&f.db).await.unwrap();
        let kinds: Vec<String> =
            sqlx::query_scalar("SELECT kind FROM events WHERE call_id = 'c' ORDER BY id")
                .fetch_all(&pool)
                .await
                .unwrap();
        assert_eq!(kinds, ["decide", "execute", "result"]);
        // A queued row with nothing after it is committed once the hold is over.
        store.append_queued(event("decide", "alone")).await;
        tokio::time::sleep(HOLD_UNAWAITED * 5).await;
        assert!(store.has_row("alice", "alone", "decide").await.unwrap());
        assert_eq!(commits(), before + 2);
        let r = check(&f).await;
        assert_eq!((r.problem, r.rows), (None, 5));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rows_nobody_waits_for_do_not_end_a_hold_and_share_its_commit() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let store = AuditStore::open(&f).await.unwrap();
        let commits = || store.counters.commits.load(Ordering::Relaxed);
        let before = commits();
        // Decide rows of calls in flight: the first starts a hold, the others come during it.
        for i in 0..5 {
            store.append_queued(event("decide", &format!("q{i}"))).await;
            if i < 2 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        // The awaited rows of one of those calls end the hold.
        assert!(
            store
                .append_all(vec![event("execute", "q4"), event("result", "q4")])
                .await
        );
        assert_eq!(
            commits(),
            before + 1,
            "the held rows and the awaited ones in one commit"
        );
        let r = check(&f).await;
        assert_eq!((r.problem, r.rows), (None, 8));
    }

    #[tokio::test]
    async fn the_head_catches_up_with_commits_made_while_it_waits_out_its_interval() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let store = AuditStore::open(&f).await.unwrap();
        // Commits in quick succession: the first head goes at once, the later ones arrive while
        // the head's thread waits out HEAD_INTERVAL, without waking it.
        for i in 0..5 {
            assert!(store.append(event("decide", &format!("c{i}"))).await);
        }
        let rows = store.health().rows;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let text = std::fs::read_to_string(&f.head).unwrap_or_default();
            if Head::decode(&text, &f.key).is_ok_and(|h| h.rows == rows) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the head never named all {rows} rows: {text}"
            );
            tokio::time::sleep(HEAD_INTERVAL / 5).await;
        }
        let r = check(&f).await;
        assert!(r.head_checked && r.problem.is_none(), "{:?}", r.problem);
    }

    /// The rows of a database file alone, as a copy without its WAL sees them.
    fn rows_in_file_alone(db: &Path, scratch: &Path) -> i64 {
        let copy = scratch.join("alone.db");
        std::fs::copy(db, &copy).unwrap();
        let conn = rusqlite::Connection::open(&copy).unwrap();
        // Not even the table, while its creation is only in the WAL.
        let n = conn
            .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
            .unwrap_or(0);
        drop(conn);
        std::fs::remove_file(&copy).unwrap();
        n
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_wal_stays_bounded_while_rows_keep_coming() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let store = AuditStore::open(&f).await.unwrap();
        let mut wal = f.db.as_os_str().to_owned();
        wal.push("-wal");
        // Sixteen appenders at once keep the writer busy, as calls in flight do (commits never
        // pause for a checkpoint to find the WAL all copied), until 48,000 rows: some 50 MiB of
        // WAL frames.
        let written = Arc::new(AtomicU64::new(0));
        let appenders: Vec<_> = (0..16)
            .map(|task| {
                let (store, written) = (store.clone(), written.clone());
                tokio::spawn(async move {
                    while written.fetch_add(1, Ordering::Relaxed) < 48_000 {
                        let call = format!("c{task}-{}", written.load(Ordering::Relaxed));
                        assert!(store.append(event("decide", &call)).await);
                    }
                })
            })
            .collect();
        for appender in appenders {
            appender.await.unwrap();
        }
        // The file's length is the most the WAL ever held (it is reused, never cut): 16 MiB, and
        // the commit that crossed it.
        let held = std::fs::metadata(&wal).unwrap().len();
        assert!(held <= 18 << 20, "{held} bytes of WAL");
        // Its rows, the start checkpoint and one about every CHECKPOINT_ROWS.
        assert!(store.health().rows > 48_000 + 40, "{}", store.health().rows);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn committed_rows_reach_the_database_file_while_the_store_stays_open() {
        let dir = tempfile::tempdir().unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let store = AuditStore::open(&f).await.unwrap();
        for i in 0..20 {
            assert!(store.append(event("decide", &format!("c{i}"))).await);
        }
        // Far fewer WAL pages than the writer's own threshold: only the checkpoint thread folds
        // them into the file, within its interval of the last commit.
        let deadline = std::time::Instant::now() + wal::CHECKPOINT_EVERY * 10;
        while rows_in_file_alone(&f.db, scratch.path()) < 21 {
            assert!(
                std::time::Instant::now() < deadline,
                "the database file alone has {} of 21 rows",
                rows_in_file_alone(&f.db, scratch.path())
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(store.health().rows, 21);
    }

    /// The WAL's current generation: its header's salts and the page number of each frame
    /// written since the WAL last began (frames that carry the same salts).
    fn wal_generation(db: &Path) -> ([u8; 8], Vec<u32>) {
        let mut path = db.as_os_str().to_owned();
        path.push("-wal");
        let wal = std::fs::read(path).unwrap_or_default();
        let (header, frames) = wal.split_at(32.min(wal.len()));
        let salts: [u8; 8] = header.get(16..24).map_or([0; 8], |s| s.try_into().unwrap());
        let frame_len = 24 + 4096;
        let pages = frames
            .chunks_exact(frame_len)
            .take_while(|frame| frame[8..16] == salts)
            .map(|frame| u32::from_be_bytes(frame[..4].try_into().unwrap()))
            .collect();
        (salts, pages)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_checkpoint_thread_begins_the_wal_again_so_no_commit_waits_to_sync_its_header() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let store = AuditStore::open(&f).await.unwrap();
        // A version someone else set: the pass rewrites it as it finds it.
        rusqlite::Connection::open(&f.db)
            .unwrap()
            .pragma_update(None, "user_version", 7)
            .unwrap();
        assert!(store.append(event("decide", "c0")).await);
        // The pass after those commits copies the WAL whole and begins it again: one frame, the
        // database's first page, written by the checkpoint thread.
        let deadline = std::time::Instant::now() + wal::CHECKPOINT_EVERY * 10;
        let (begun, _) = loop {
            let generation = wal_generation(&f.db);
            if generation.1 == [1] {
                break generation;
            }
            assert!(std::time::Instant::now() < deadline, "{generation:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        // The next commit appends to that WAL: it did not begin it (nor sync its header).
        assert!(store.append(event("decide", "c1")).await);
        let (salts, pages) = wal_generation(&f.db);
        assert_eq!(salts, begun, "the writer began the WAL again");
        assert!(pages.len() > 1 && pages[0] == 1, "{pages:?}");
        // Nothing in the database changed but the rows: the rewritten version is the one it held.
        let conn = rusqlite::Connection::open(&f.db).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 7);
        assert_eq!(store.health().rows, 3);
    }

    /// A store with `n` decide rows after its start checkpoint, its head file naming them all,
    /// closed; returns its files.
    async fn written(dir: &Path, n: usize) -> AuditFiles {
        let f = files(dir);
        let store = AuditStore::open(&f).await.unwrap();
        for i in 0..n {
            assert!(store.append(event("decide", &format!("c{i}"))).await);
        }
        // The head follows the commits within its interval, on a thread of its own.
        let deadline = std::time::Instant::now() + HEAD_INTERVAL * 100;
        let head_rows = || {
            let text = std::fs::read_to_string(&f.head).unwrap_or_default();
            Head::decode(&text, &f.key).map_or(0, |h| h.rows)
        };
        while head_rows() != n as u64 + 1 {
            assert!(std::time::Instant::now() < deadline, "{}", head_rows());
            tokio::time::sleep(HEAD_INTERVAL / 5).await;
        }
        f
    }

    async fn tamper(f: &AuditFiles, sql: &[&str]) {
        let pool = open_pool(&f.db).await.unwrap();
        // Someone with write access to the file drops the triggers first.
        for s in [
            "DROP TRIGGER IF EXISTS events_refuse_update",
            "DROP TRIGGER IF EXISTS events_refuse_delete",
        ]
        .iter()
        .chain(sql)
        {
            sqlx::query(sqlx::AssertSqlSafe(*s))
                .execute(&pool)
                .await
                .unwrap();
        }
    }

    #[tokio::test]
    async fn verify_names_the_first_bad_row_of_each_tampering() {
        use chain::Problem;
        type Case = (&'static str, &'static [&'static str], fn(&Problem) -> bool);
        let cases: &[Case] = &[
            (
                "an edited row",
                &["UPDATE events SET verdict = 'allow' WHERE id = 3"],
                |p| *p == Problem::Rewritten { id: 3 },
            ),
            (
                "a deleted middle row",
                &["DELETE FROM events WHERE id = 3"],
                |p| *p == Problem::Gap { from: 3, to: 3 },
            ),
            (
                "a removed tail",
                &["DELETE FROM events WHERE id >= 4"],
                |p| {
                    matches!(
                        p,
                        Problem::MissingTail {
                            head_rows: 5,
                            rows: 3,
                            ..
                        }
                    )
                },
            ),
            ("every row deleted", &["DELETE FROM events"], |p| {
                *p == Problem::Wiped { head_rows: 5 }
            }),
            (
                "an inserted approval",
                &[
                    "INSERT INTO events (ts, source, kind, approval, prev_hash, hash, keyed) VALUES ('t', 'gate', 'resolve', 'approved', 'x', 'y', 1)",
                ],
                |p| *p == Problem::Unchained { id: 6 },
            ),
        ];
        for (name, sql, want) in cases {
            let dir = tempfile::tempdir().unwrap();
            let f = written(dir.path(), 4).await;
            assert_eq!(check(&f).await.problem, None, "{name}: before");
            tamper(&f, sql).await;
            let r = check(&f).await;
            let p = r.problem.expect(name);
            assert!(want(&p), "{name}: {p}");
        }
    }

    #[tokio::test]
    async fn a_wiped_database_is_caught_when_the_gate_starts_again() {
        let dir = tempfile::tempdir().unwrap();
        let f = written(dir.path(), 3).await;
        // The whole database goes: its file, and its write-ahead log and index if they are still
        // there (a log left from the old file would be read into the new one).
        std::fs::remove_file(&f.db).unwrap();
        for side in ["-wal", "-shm"] {
            let mut path = f.db.clone().into_os_string();
            path.push(side);
            let _ = std::fs::remove_file(path);
        }
        let store = AuditStore::open(&f).await.unwrap();
        assert!(store.append(event("decide", "after")).await);
        // The old head was kept beside the new one, and a row says what happened.
        let kept: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("mismatch"))
            .collect();
        assert_eq!(kept.len(), 1, "{kept:?}");
        let pool = open_pool(&f.db).await.unwrap();
        let detail: String =
            sqlx::query_scalar("SELECT detail FROM events WHERE outcome = 'anchor_mismatch'")
                .fetch_one(&pool)
                .await
                .unwrap();
        assert!(detail.contains("says 4 rows"), "{detail}");
    }

    #[tokio::test]
    async fn a_failing_store_is_reported_and_the_chain_survives_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let store = AuditStore::open(&f).await.unwrap();
        assert!(store.append(event("decide", "before")).await);
        let pool = open_pool(&f.db).await.unwrap();
        sqlx::query(
            "CREATE TRIGGER events_fail BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'disk full'); END",
        )
        .execute(&pool)
        .await
        .unwrap();
        assert!(!store.append(event("decide", "lost")).await);
        assert!(!store.append(event("decide", "lost too")).await);
        assert!(!store.append(event("result", "lost")).await);
        let h = store.health();
        assert!(!h.healthy && h.failures == 3 && h.rows == 2, "{h:?}");
        sqlx::query("DROP TRIGGER events_fail")
            .execute(&pool)
            .await
            .unwrap();
        assert!(store.append(event("decide", "after")).await);
        let h = store.health();
        assert!(h.healthy && h.rows == 3, "{h:?}");
        // The failed rows left no gap: the chain runs from the first row to the last.
        let r = check(&f).await;
        assert_eq!((r.problem, r.rows), (None, 3));
    }

    /// A database written before `events` lost AUTOINCREMENT keeps every row, id, view and
    /// trigger, its chain still checks against its head, and new rows take the ids after the
    /// last without touching `sqlite_sequence`.
    #[tokio::test]
    async fn a_database_from_before_the_plain_rowid_keeps_its_rows_and_ids() {
        let dir = tempfile::tempdir().unwrap();
        let (new_dir, old_dir) = (dir.path().join("new"), dir.path().join("old"));
        std::fs::create_dir(&new_dir).unwrap();
        std::fs::create_dir(&old_dir).unwrap();
        let new = written(&new_dir, 4).await;
        // The same rows in a file whose schema stops at migration 5.
        let f = files(&old_dir);
        std::fs::copy(&new.head, &f.head).unwrap();
        {
            let options = connect_options(&f.db).unwrap();
            let pool = SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(options)
                .await
                .unwrap();
            let before: Vec<Migration> = migrator()
                .iter()
                .filter(|m| m.version < 6)
                .cloned()
                .collect();
            Migrator::with_migrations(before).run(&pool).await.unwrap();
            let sql: String =
                sqlx::query_scalar("SELECT sql FROM sqlite_schema WHERE name = 'events'")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            assert!(sql.contains("AUTOINCREMENT"), "{sql}");
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "ATTACH DATABASE '{}' AS new",
                new.db.display()
            )))
            .execute(&pool)
            .await
            .unwrap();
            sqlx::query("INSERT INTO events SELECT * FROM new.events ORDER BY id")
                .execute(&pool)
                .await
                .unwrap();
            // Someone with write access to the file dropped the trigger the migration makes
            // again: the file still opens, with the trigger back.
            sqlx::query("DROP TRIGGER events_refuse_update")
                .execute(&pool)
                .await
                .unwrap();
            let seq: i64 =
                sqlx::query_scalar("SELECT seq FROM sqlite_sequence WHERE name = 'events'")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            assert_eq!(seq, 5);
        }
        let store = AuditStore::open(&f).await.unwrap();
        assert!(store.append(event("decide", "after")).await);
        drop(store);
        let r = check(&f).await;
        // Five rows, the start checkpoint of the reopening, the new row.
        assert_eq!((r.problem, r.rows), (None, 7));
        let pool = open_pool(&f.db).await.unwrap();
        let sql: String = sqlx::query_scalar("SELECT sql FROM sqlite_schema WHERE name = 'events'")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert!(!sql.contains("AUTOINCREMENT"), "{sql}");
        // The writer's rows no longer move the sequence AUTOINCREMENT kept.
        let seq: i64 = sqlx::query_scalar("SELECT seq FROM sqlite_sequence WHERE name = 'events'")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(seq, 5);
        let integrity: String = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(integrity, "ok");
        let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM events ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
        assert_eq!(ids, (1..=7).collect::<Vec<i64>>());
        let last: String = sqlx::query_scalar("SELECT call_id FROM events WHERE id = 7")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(last, "after");
        let calls: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tool_calls")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(calls, 5, "c0..c3 and after");
        for view in ["denials", "approvals", "commands", "pack_calls"] {
            sqlx::query(sqlx::AssertSqlSafe(format!("SELECT * FROM {view}")))
                .fetch_all(&pool)
                .await
                .unwrap();
        }
        // Both triggers hold, the one the migration made again among them.
        assert_append_only(
            &pool,
            &[
                "DELETE FROM events WHERE id = 7",
                "UPDATE events SET outcome = 'ok' WHERE id = 7",
            ],
        )
        .await;
    }

    /// Without AUTOINCREMENT a new row takes the id of a removed last row. A tail removed
    /// while the gate runs (by someone with write access to the file) is still caught: the next
    /// row, chained to the removed one, does not chain to the row before it.
    #[tokio::test]
    async fn a_tail_removed_while_the_gate_runs_is_caught_when_new_rows_take_its_ids() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let store = AuditStore::open(&f).await.unwrap();
        for i in 0..4 {
            assert!(store.append(event("decide", &format!("c{i}"))).await);
        }
        tamper(&f, &["DELETE FROM events WHERE id >= 4"]).await;
        assert!(store.append(event("decide", "after")).await);
        drop(store);
        let pool = open_pool(&f.db).await.unwrap();
        let reused: String = sqlx::query_scalar("SELECT call_id FROM events WHERE id = 4")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(reused, "after");
        let problem = check(&f).await.problem.expect("the removed tail");
        assert_eq!(problem, chain::Problem::Unchained { id: 4 }, "{problem}");
    }

    #[tokio::test]
    async fn chain_continues_across_reopen_with_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        {
            let store = AuditStore::open(&f).await.unwrap();
            assert!(store.append(event("decide", "a")).await);
            assert!(store.checkpoint(Outcome::Stop).await);
        }
        let store = AuditStore::open(&f).await.unwrap();
        assert_eq!(store.health().rows, 4);
        assert!(store.append(event("decide", "b")).await);
        let r = check(&f).await;
        assert_eq!((r.problem, r.rows), (None, 5));
        let pool = open_pool(&f.db).await.unwrap();
        let details: Vec<String> = sqlx::query_scalar(
            "SELECT outcome || ': ' || detail FROM events WHERE kind = 'checkpoint' ORDER BY id",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(details.len(), 3, "{details:?}");
        assert!(
            details[0].starts_with("start: rows 0 head 0000"),
            "{details:?}"
        );
        assert!(details[1].starts_with("stop: rows 2 head "), "{details:?}");
        assert!(details[2].starts_with("start: rows 3 head "), "{details:?}");
    }
}
