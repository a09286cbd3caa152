//! The audit store: an append-only SQLite file, owned by the gate, written by one task.
//!
//! Every row carries the hash of the row before it, so `verify` can prove that no row was
//! changed, removed or inserted out of order; triggers refuse UPDATE and DELETE. A failing write
//! never stops a tool call: it is counted, logged and reported by `Health`.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use glovebox_proto::v1::AuditEvent;
use sha2::{Digest, Sha256};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Row, SqlSafeStr};
use tokio::sync::{mpsc, oneshot};

/// Events waiting to be written; appends wait when it is full.
const QUEUE_DEPTH: usize = 4096;
/// The hash a chain starts from.
const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

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
}

/// Counters that `Health` reports.
#[derive(Debug, Default)]
struct Counters {
    healthy: AtomicBool,
    failures: AtomicU64,
    rows: AtomicU64,
}

/// A snapshot of the store's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditHealth {
    pub healthy: bool,
    pub failures: u64,
    pub rows: u64,
}

struct Job {
    event: AuditEvent,
    done: oneshot::Sender<bool>,
}

/// A handle to the audit writer. Cheap to clone.
#[derive(Clone)]
pub struct AuditStore {
    jobs: mpsc::Sender<Job>,
    counters: Arc<Counters>,
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
    ])
}

/// Opens (creating if needed) and migrates the SQLite file at `path`.
pub async fn open_pool(path: &Path) -> Result<SqlitePool, AuditError> {
    // The audit says who did what on the machine: only the gate's user reads it. SQLite creates
    // its -wal and -shm files with the database file's mode, so the file is made 0600 first (and
    // an older, wider file is narrowed).
    make_private(path, true).map_err(|source| AuditError::Mode {
        path: path.display().to_string(),
        source,
    })?;
    let options = SqliteConnectOptions::from_str("sqlite://")
        .map_err(|source| AuditError::Open {
            path: path.display().to_string(),
            source,
        })?
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5));
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

/// Makes `path` readable and writable by its owner only (creating it empty when `create`).
fn make_private(path: &Path, create: bool) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if create {
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.permissions().mode() & 0o077 != 0 => {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => Ok(()),
        Err(e) => Err(e),
    }
}

impl AuditStore {
    /// Opens the store and starts its writer task.
    pub async fn open(path: &Path) -> Result<AuditStore, AuditError> {
        let pool = open_pool(path).await?;
        let last: Option<String> =
            sqlx::query_scalar("SELECT hash FROM events ORDER BY id DESC LIMIT 1")
                .fetch_optional(&pool)
                .await?;
        let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
            .fetch_one(&pool)
            .await?;
        let counters = Arc::new(Counters::default());
        counters.healthy.store(true, Ordering::Relaxed);
        counters.rows.store(rows.max(0) as u64, Ordering::Relaxed);
        let (jobs, rx) = mpsc::channel(QUEUE_DEPTH);
        tokio::spawn(writer(
            pool,
            rx,
            last.unwrap_or_else(|| GENESIS.to_owned()),
            counters.clone(),
        ));
        Ok(AuditStore { jobs, counters })
    }

    /// Queues one event behind every event queued before it, without waiting for the commit.
    /// Used where answering fast matters (a decision): the row is still written before any row
    /// queued later (the call's execute and result), and a failed write is counted as usual.
    pub async fn enqueue(&self, event: AuditEvent) {
        let (done, _ignored) = oneshot::channel();
        if self.jobs.send(Job { event, done }).await.is_err() {
            self.record_failure("audit writer has stopped");
        }
    }

    /// Appends one event and waits until it is written. Returns whether it was.
    pub async fn append(&self, event: AuditEvent) -> bool {
        let (done, wait) = oneshot::channel();
        if self.jobs.send(Job { event, done }).await.is_err() {
            self.record_failure("audit writer has stopped");
            return false;
        }
        wait.await.unwrap_or(false)
    }

    fn record_failure(&self, why: &str) {
        self.counters.healthy.store(false, Ordering::Relaxed);
        self.counters.failures.fetch_add(1, Ordering::Relaxed);
        tracing::error!(error = why, "audit write failed");
    }

    pub fn health(&self) -> AuditHealth {
        AuditHealth {
            healthy: self.counters.healthy.load(Ordering::Relaxed),
            failures: self.counters.failures.load(Ordering::Relaxed),
            rows: self.counters.rows.load(Ordering::Relaxed),
        }
    }
}

/// Most events written at once. Under load the writer takes every queued event (up to this) and
/// writes them with one multi-row INSERT, which SQLite commits atomically, so one round trip to
/// SQLite's worker thread serves many calls; each caller still waits until its row is committed.
const MAX_BATCH: usize = 64;
/// Scheduler turns the writer yields to gather a batch.
const LINGER_TURNS: usize = 4;

async fn writer(
    pool: SqlitePool,
    mut jobs: mpsc::Receiver<Job>,
    mut prev: String,
    counters: Arc<Counters>,
) {
    while let Some(first) = jobs.recv().await {
        let mut batch = vec![first];
        // Let calls that are already being answered enqueue their rows too (a few scheduler
        // turns, no timer), so one write serves them all.
        for _ in 0..LINGER_TURNS {
            while batch.len() < MAX_BATCH {
                match jobs.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            if batch.len() >= MAX_BATCH {
                break;
            }
            tokio::task::yield_now().await;
        }
        let result = write_batch(&pool, &batch, &prev).await;
        let ok = match result {
            Ok(last) => {
                prev = last;
                counters.healthy.store(true, Ordering::Relaxed);
                counters
                    .rows
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                true
            }
            Err(e) => {
                counters.healthy.store(false, Ordering::Relaxed);
                counters
                    .failures
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                for job in &batch {
                    tracing::error!(error = %e, kind = %job.event.kind, call_id = %job.event.call_id, "audit write failed");
                }
                false
            }
        };
        for job in batch {
            let _ = job.done.send(ok);
        }
    }
}

/// Writes a batch in one statement, chaining each row to the one before; returns the last
/// hash. Either every row is written or none is.
async fn write_batch(pool: &SqlitePool, batch: &[Job], prev: &str) -> Result<String, sqlx::Error> {
    let stamps: Vec<String> = batch
        .iter()
        .map(|_| rfc3339_millis(SystemTime::now()))
        .collect();
    let mut rows = Vec::with_capacity(batch.len());
    let mut prev = prev.to_owned();
    for (job, ts) in batch.iter().zip(&stamps) {
        let fields = Fields::of(ts, &job.event);
        let hash = chain_hash(&prev, &fields);
        rows.push((fields, prev, hash.clone()));
        prev = hash;
    }
    let mut conn = pool.acquire().await?;
    // One statement for the whole batch (18 parameters a row, well under SQLite's limit): it is
    // atomic without an explicit transaction.
    insert(&mut conn, &rows).await?;
    Ok(prev)
}

/// The columns of one row, in chain order. Empty strings are stored as NULL.
struct Fields<'a> {
    text: [(&'static str, &'a str); 14],
    numbers: [(&'static str, u64); 2],
}

impl<'a> Fields<'a> {
    fn of(ts: &'a str, e: &'a AuditEvent) -> Fields<'a> {
        Fields {
            text: [
                ("ts", ts),
                ("call_id", &e.call_id),
                ("account", &e.account),
                ("source", &e.source),
                ("kind", &e.kind),
                ("tool", &e.tool),
                ("subject", &e.subject),
                ("verdict", &e.verdict),
                ("rule", &e.rule),
                ("reason", &e.reason),
                ("approval", &e.approval),
                ("outcome", &e.outcome),
                ("error_code", &e.error_code),
                ("detail", &e.detail),
            ],
            numbers: [("duration_ms", e.duration_ms), ("bytes", e.bytes)],
        }
    }
}

async fn insert(
    conn: &mut sqlx::SqliteConnection,
    rows: &[(Fields<'_>, String, String)],
) -> Result<(), sqlx::Error> {
    let tuple = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    let sql = format!(
        "INSERT INTO events (ts, call_id, account, source, kind, tool, subject, verdict, rule, reason, \
         approval, outcome, error_code, detail, duration_ms, bytes, prev_hash, hash) VALUES {}",
        vec![tuple; rows.len()].join(", ")
    );
    // Safe: the statement is built only from the constant column list and placeholders.
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    for (f, prev, hash) in rows {
        for (_, value) in f.text {
            q = q.bind(if value.is_empty() { None } else { Some(value) });
        }
        for (_, n) in f.numbers {
            q = q.bind(i64::try_from(n).unwrap_or(i64::MAX));
        }
        q = q.bind(prev.as_str()).bind(hash.as_str());
    }
    q.execute(conn).await.map(|_| ())
}

/// The hash of a row: SHA-256 over the previous hash and each field, length-prefixed so that no
/// two different rows encode alike.
fn chain_hash(prev: &str, f: &Fields<'_>) -> String {
    let mut h = Sha256::new();
    h.update(prev.as_bytes());
    for (name, value) in f.text {
        h.update(format!("\n{name}:{}:", value.len()).as_bytes());
        h.update(value.as_bytes());
    }
    for (name, n) in f.numbers {
        h.update(format!("\n{name}:{n}").as_bytes());
    }
    hex::encode(h.finalize())
}

/// Why the chain does not verify.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("row {id}: {problem}")]
    Broken { id: i64, problem: &'static str },
    #[error(transparent)]
    Store(#[from] AuditError),
    #[error("read audit store: {0}")]
    Read(#[from] sqlx::Error),
}

/// Recomputes every row's hash and checks the chain. Returns the number of rows.
pub async fn verify(pool: &SqlitePool) -> Result<u64, VerifyError> {
    let rows = sqlx::query(
        "SELECT id, ts, call_id, account, source, kind, tool, subject, verdict, rule, reason, approval, \
         outcome, error_code, detail, duration_ms, bytes, prev_hash, hash FROM events ORDER BY id",
    )
    .fetch_all(pool)
    .await?;
    let mut prev = GENESIS.to_owned();
    let mut count = 0u64;
    for row in rows {
        let id: i64 = row.try_get("id")?;
        let text = |col: &str| -> Result<String, sqlx::Error> {
            Ok(row.try_get::<Option<String>, _>(col)?.unwrap_or_default())
        };
        let event = AuditEvent {
            subjects: Vec::new(),
            call_id: text("call_id")?,
            account: text("account")?,
            source: text("source")?,
            kind: text("kind")?,
            tool: text("tool")?,
            subject: text("subject")?,
            verdict: text("verdict")?,
            rule: text("rule")?,
            reason: text("reason")?,
            approval: text("approval")?,
            outcome: text("outcome")?,
            error_code: text("error_code")?,
            duration_ms: row
                .try_get::<Option<i64>, _>("duration_ms")?
                .unwrap_or(0)
                .max(0) as u64,
            bytes: row.try_get::<Option<i64>, _>("bytes")?.unwrap_or(0).max(0) as u64,
            detail: text("detail")?,
        };
        let ts = text("ts")?;
        if text("prev_hash")? != prev {
            return Err(VerifyError::Broken {
                id,
                problem: "prev_hash does not match the row before",
            });
        }
        let hash = chain_hash(&prev, &Fields::of(&ts, &event));
        if text("hash")? != hash {
            return Err(VerifyError::Broken {
                id,
                problem: "hash does not match the row's content",
            });
        }
        prev = hash;
        count += 1;
    }
    Ok(count)
}

/// Formats a time as RFC 3339 in UTC with milliseconds, e.g. `2026-11-29T23:42:41.123Z`.
pub fn rfc3339_millis(t: SystemTime) -> String {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    glovebox_policy::expiry::format_rfc3339_millis(ms)
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339_millis(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_996_961_123);
        assert_eq!(rfc3339_millis(t), "2026-11-30T00:02:41.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339_millis(leap), "2000-02-29T00:00:00.000Z");
    }

    #[tokio::test]
    async fn rows_chain_and_refuse_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.db");
        let store = AuditStore::open(&path).await.unwrap();
        assert!(store.append(event("decide", "c1")).await);
        assert!(store.append(event("result", "c1")).await);
        assert_eq!(
            store.health(),
            AuditHealth {
                healthy: true,
                failures: 0,
                rows: 2
            }
        );

        let pool = open_pool(&path).await.unwrap();
        assert_eq!(verify(&pool).await.unwrap(), 2);
        for sql in [
            "UPDATE events SET outcome = 'ok'",
            "DELETE FROM events",
            "DELETE FROM events WHERE id = 1",
        ] {
            let err = sqlx::query(sql)
                .execute(&pool)
                .await
                .unwrap_err()
                .to_string();
            assert!(err.contains("append-only"), "{sql}: {err}");
        }
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tool_calls")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(n, 1);
        // empty strings are NULL for SQL users
        let rule: Option<String> = sqlx::query_scalar("SELECT rule FROM events WHERE id = 1")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(rule, None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_are_batched_into_one_unbroken_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.db");
        let store = AuditStore::open(&path).await.unwrap();
        let tasks: Vec<_> = (0..200)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { store.append(event("decide", &format!("c{i}"))).await })
            })
            .collect();
        for t in tasks {
            assert!(t.await.unwrap());
        }
        assert_eq!(store.health().rows, 200);
        let pool = open_pool(&path).await.unwrap();
        assert_eq!(verify(&pool).await.unwrap(), 200);
        let distinct: i64 = sqlx::query_scalar("SELECT COUNT(DISTINCT call_id) FROM events")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(distinct, 200);
    }

    #[tokio::test]
    async fn verify_detects_a_forged_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.db");
        let store = AuditStore::open(&path).await.unwrap();
        for i in 0..3 {
            assert!(store.append(event("decide", &format!("c{i}"))).await);
        }
        let pool = open_pool(&path).await.unwrap();
        // Someone with write access to the file drops the trigger and edits a row.
        sqlx::query("DROP TRIGGER events_refuse_update")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query("UPDATE events SET verdict = 'allow' WHERE id = 2")
            .execute(&pool)
            .await
            .unwrap();
        let err = verify(&pool).await.unwrap_err().to_string();
        assert!(err.starts_with("row 2: hash does not match"), "{err}");
    }

    #[tokio::test]
    async fn a_failing_store_is_reported_and_the_chain_survives_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.db");
        let store = AuditStore::open(&path).await.unwrap();
        assert!(store.append(event("decide", "before")).await);
        let pool = open_pool(&path).await.unwrap();
        sqlx::query(
            "CREATE TRIGGER events_fail BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'disk full'); END",
        )
        .execute(&pool)
        .await
        .unwrap();
        assert!(!store.append(event("decide", "lost")).await);
        store.enqueue(event("decide", "lost too")).await;
        assert!(!store.append(event("result", "lost")).await);
        let h = store.health();
        assert!(!h.healthy && h.failures == 3 && h.rows == 1, "{h:?}");
        sqlx::query("DROP TRIGGER events_fail")
            .execute(&pool)
            .await
            .unwrap();
        assert!(store.append(event("decide", "after")).await);
        let h = store.health();
        assert!(h.healthy && h.rows == 2, "{h:?}");
        // The failed rows left no gap: the chain runs from the first row to the last.
        assert_eq!(verify(&pool).await.unwrap(), 2);
    }

    #[tokio::test]
    async fn chain_continues_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.db");
        {
            let store = AuditStore::open(&path).await.unwrap();
            assert!(store.append(event("decide", "a")).await);
        }
        let store = AuditStore::open(&path).await.unwrap();
        assert_eq!(store.health().rows, 1);
        assert!(store.append(event("decide", "b")).await);
        let pool = open_pool(&path).await.unwrap();
        assert_eq!(verify(&pool).await.unwrap(), 2);
    }
}
