//! Shipping the audit to a fleet PostgreSQL database: `glovebox audit ship` once, or the gate's
//! `audit.ship` section continuously ([`spawn`]). Rows are copied as stored, keyed by
//! (machine id, row id) and carrying the chain, so `verify_postgres` re-computes each machine's
//! chain centrally with the local verify's own function ([`row::check_rows`]).
//!
//! - Idempotent: `ON CONFLICT DO NOTHING` on the key, and every row PostgreSQL already had is
//!   compared with the local one: a difference is an error naming the row ([`ShipError::Differs`]),
//!   never skipped. The first batch after connecting re-sends the last row shipped, so a fleet
//!   copy that was changed, or a second machine shipping under the same id, is caught at once.
//! - Resumable: a cursor per fleet database (`<state>/audit-ship/<target>.cursor`, the last row
//!   committed there) is written after each committed batch. It lives outside `audit.db`, whose
//!   one writer is the gate and whose rows never change; a cursor moves, and the command-line
//!   shipper may run beside the gate. A crash between the commit and the cursor write re-sends one
//!   batch, which the comparison then checks. PostgreSQL has the last word: a database holding
//!   fewer rows than the cursor says (restored, replaced) is shipped to again from its own last row.
//! - Batched: each batch is one transaction (`UNNEST` arrays, one statement).
//! - Never in the way of calls: a read-only connection of its own to `audit.db` (WAL readers do not
//!   block the writer), in a task of its own; failures are logged and retried with backoff.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use glovebox_config::StateDir;
use glovebox_config::audit_ship::{check_machine_id, check_url, redact_url};
use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

use super::chain::{self, AuditKey};
use super::row::{self, NUMBER_COLUMNS, RawRow, TEXT_COLUMNS};

/// How long connecting to PostgreSQL may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The continuous shipper's retry delay after a failure: from the first, doubling, to the second.
pub const BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));
/// Where the fleet id comes from first.
pub const SYSTEM_MACHINE_ID: &str = "/etc/machine-id";

#[derive(Debug, thiserror::Error)]
pub enum ShipError {
    #[error("{0}")]
    Config(String),
    #[error("read the local audit {path}: {source}")]
    Local { path: String, source: sqlx::Error },
    #[error("{action} at {url}: {source}")]
    Postgres {
        action: &'static str,
        url: String,
        source: sqlx::Error,
    },
    #[error("prepare the fleet schema at {url}: {source}")]
    Migrate {
        url: String,
        source: sqlx::migrate::MigrateError,
    },
    #[error(
        "row {id} of machine {machine} in PostgreSQL differs from the local row (column {column}): the fleet copy was changed, or another machine ships under this id; nothing more is shipped"
    )]
    Differs {
        machine: String,
        id: i64,
        column: &'static str,
    },
    #[error("{path}: {message}")]
    State { path: PathBuf, message: String },
    #[error(
        "machine {machine} is registered in the fleet database with another public checkpoint key: another machine ships under this id, or the key was replaced there; nothing is shipped"
    )]
    KeyDiffers { machine: String },
}

/// The fleet schema's migrations (`services/gate/migrations-postgres`).
pub fn pg_migrator() -> Migrator {
    Migrator::with_migrations(vec![
        Migration::new(
            1,
            "fleet".into(),
            MigrationType::Simple,
            include_str!("../../migrations-postgres/0001_fleet.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            2,
            "machine head".into(),
            MigrationType::Simple,
            include_str!("../../migrations-postgres/0002_machine_head.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            3,
            "machine public key".into(),
            MigrationType::Simple,
            include_str!("../../migrations-postgres/0003_machine_public_key.sql").into_sql_str(),
            false,
        ),
    ])
}

/// This machine's fleet id: `/etc/machine-id` if readable, else the one kept in the state
/// directory (made on first use).
pub fn machine_id(state: &StateDir) -> Result<String, ShipError> {
    machine_id_from(Path::new(SYSTEM_MACHINE_ID), state)
}

pub fn machine_id_from(system: &Path, state: &StateDir) -> Result<String, ShipError> {
    if let Ok(text) = std::fs::read_to_string(system) {
        let id = text.trim();
        if check_machine_id(id).is_ok() {
            return Ok(id.to_owned());
        }
    }
    let path = state.machine_id_file();
    let bad = |message: String| ShipError::State {
        path: path.clone(),
        message,
    };
    if let Ok(text) = std::fs::read_to_string(&path) {
        let id = text.trim();
        check_machine_id(id).map_err(|e| bad(e.0))?;
        return Ok(id.to_owned());
    }
    let bytes = glovebox_config::random_bytes::<16>()
        .map_err(|e| bad(format!("no randomness for a machine id: {e}")))?;
    let id = hex::encode(bytes);
    glovebox_config::write_private_file(&path, format!("{id}\n").as_bytes())
        .map_err(|e| bad(e.to_string()))?;
    Ok(id)
}

/// Connects to PostgreSQL (the URL's password never appears in an error).
pub async fn connect_pg(url: &str) -> Result<PgPool, ShipError> {
    check_url(url).map_err(|e| ShipError::Config(e.0))?;
    let options = PgConnectOptions::from_str(url).map_err(|_| {
        ShipError::Config(format!(
            "not a PostgreSQL URL the driver accepts: {}",
            redact_url(url)
        ))
    })?;
    PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect_with(options.application_name("glovebox"))
        .await
        .map_err(|source| ShipError::Postgres {
            action: "connect to PostgreSQL",
            url: redact_url(url),
            source,
        })
}

/// What one shipper copies, and where.
#[derive(Clone)]
pub struct Options {
    /// The local `audit.db`.
    pub db: PathBuf,
    /// Where cursors are kept (`<state>/audit-ship`).
    pub cursor_dir: PathBuf,
    /// With its password: never shown.
    pub url: String,
    pub machine: String,
    pub batch: u32,
    /// The signed head file (`<state>/audit.head`), shipped once the rows it names are; a
    /// shipper that cannot read it ships rows only.
    pub head: PathBuf,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("db", &self.db)
            .field("url", &redact_url(&self.url))
            .field("machine", &self.machine)
            .field("batch", &self.batch)
            .finish()
    }
}

/// One committed batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    /// Rows sent (0: nothing left to ship).
    pub sent: u64,
    /// Rows PostgreSQL did not have yet.
    pub new: u64,
    /// The last row id now committed there.
    pub last_id: i64,
}

pub struct Shipper {
    local: SqlitePool,
    pg: PgPool,
    options: Options,
    url: String,
    hostname: String,
    cursor: PathBuf,
    /// The first local row id the next batch sends.
    next: i64,
    /// The machine's public checkpoint key (`audit.pub`, hex), registered with its rows.
    public_key: Option<String>,
}

impl std::fmt::Debug for Shipper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shipper")
            .field("options", &self.options)
            .field("next", &self.next)
            .finish()
    }
}

impl Shipper {
    /// Connects to both ends, prepares the fleet schema, and finds where to resume.
    pub async fn connect(options: Options) -> Result<Shipper, ShipError> {
        check_machine_id(&options.machine)
            .map_err(|m| ShipError::Config(format!("machine id: {m}")))?;
        let url = redact_url(&options.url);
        let local_err = |source| ShipError::Local {
            path: options.db.display().to_string(),
            source,
        };
        if !options.db.exists() {
            return Err(ShipError::Config(format!(
                "no audit store at {}",
                options.db.display()
            )));
        }
        let local = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(
                SqliteConnectOptions::from_str("sqlite://")
                    .map_err(local_err)?
                    .filename(&options.db)
                    .read_only(true)
                    .busy_timeout(Duration::from_secs(5)),
            )
            .await
            .map_err(local_err)?;
        let pg = connect_pg(&options.url).await?;
        pg_migrator()
            .run(&pg)
            .await
            .map_err(|source| ShipError::Migrate {
                url: url.clone(),
                source,
            })?;
        let cursor = cursor_path(&options.cursor_dir, &url, &options.machine);
        let saved = read_cursor(&cursor);
        let shipped: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(id), 0)::BIGINT FROM events WHERE machine_id = $1",
        )
        .bind(&options.machine)
        .fetch_one(&pg)
        .await
        .map_err(|source| ShipError::Postgres {
            action: "read the last shipped row",
            url: url.clone(),
            source,
        })?;
        let resume = match saved {
            Some(c) if c > shipped => {
                tracing::warn!(
                    target_url = %url, machine = %options.machine, cursor = c, shipped,
                    "the fleet database has fewer of this machine's rows than were shipped to it: shipping again from its last row"
                );
                shipped
            }
            Some(c) => c,
            None => shipped,
        };
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default();
        let public_key = std::fs::read_to_string(options.head.with_file_name("audit.pub"))
            .ok()
            .map(|k| k.trim().to_owned())
            .filter(|k| super::signed::parse_public_key(k).is_some());
        Ok(Shipper {
            local,
            pg,
            url,
            hostname,
            cursor,
            public_key,
            // Re-send the last row shipped: it must be the same there.
            next: resume.max(1),
            options,
        })
    }

    /// The redacted URL (for messages).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Ships the next batch in one transaction, then moves the cursor.
    pub async fn ship_batch(&mut self) -> Result<Batch, ShipError> {
        let sql = format!(
            "SELECT id, {} FROM events WHERE id >= ? ORDER BY id LIMIT ?",
            row::column_list()
        );
        // Safe: built from the constant column list.
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(self.next)
            .bind(i64::from(self.options.batch))
            .fetch_all(&self.local)
            .await
            .map_err(|source| ShipError::Local {
                path: self.options.db.display().to_string(),
                source,
            })?;
        let rows = rows
            .iter()
            .map(RawRow::from_row)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| ShipError::Local {
                path: self.options.db.display().to_string(),
                source,
            })?;
        let Some(last) = rows.last().map(|r| r.id) else {
            self.ship_head(self.next - 1).await?;
            return Ok(Batch {
                sent: 0,
                new: 0,
                last_id: self.next - 1,
            });
        };
        let new = self.insert(&rows).await?;
        write_cursor(&self.cursor, &self.url, &self.options.machine, last);
        self.next = last + 1;
        self.ship_head(last).await?;
        Ok(Batch {
            sent: rows.len() as u64,
            new,
            last_id: last,
        })
    }

    /// Ships the machine's head file when every row it names is shipped (up to `shipped`) and
    /// it is newer than the one there. Its signature is checked where it is verified.
    async fn ship_head(&self, shipped: i64) -> Result<(), ShipError> {
        let Ok(text) = std::fs::read_to_string(&self.options.head) else {
            return Ok(());
        };
        let Some(last_id) = head_last_id(&text).filter(|id| *id <= shipped) else {
            return Ok(());
        };
        sqlx::query(
            "UPDATE machine SET head = $2, head_last_id = $3 \
             WHERE id = $1 AND COALESCE(head_last_id, 0) <= $3",
        )
        .bind(&self.options.machine)
        .bind(&text)
        .bind(last_id)
        .execute(&self.pg)
        .await
        .map_err(|source| ShipError::Postgres {
            action: "ship the audit head",
            url: self.url.clone(),
            source,
        })?;
        Ok(())
    }

    async fn insert(&self, rows: &[RawRow]) -> Result<u64, ShipError> {
        let last = rows.last().map_or(0, |r| r.id);
        let mut tx = self
            .pg
            .begin()
            .await
            .map_err(self.pg_err("begin a transaction"))?;
        self.register_machine(&mut tx, last).await?;
        let inserted = self.insert_rows(&mut tx, rows).await?;
        if inserted.len() < rows.len() {
            self.compare_had(&mut tx, rows, &inserted).await?;
        }
        tx.commit().await.map_err(self.pg_err("commit"))?;
        Ok(inserted.len() as u64)
    }

    /// An error of PostgreSQL while doing `action`.
    fn pg_err(&self, action: &'static str) -> impl FnOnce(sqlx::Error) -> ShipError + use<> {
        let url = self.url.clone();
        move |source| ShipError::Postgres {
            action,
            url,
            source,
        }
    }

    /// Records the machine and how far it shipped. Its public checkpoint key is registered with
    /// its first rows and never replaced: a machine shipping under another key is refused.
    async fn register_machine(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        last: i64,
    ) -> Result<(), ShipError> {
        let machine = &self.options.machine;
        let registered: Option<String> = sqlx::query_scalar(
            "INSERT INTO machine (id, hostname, last_row_id, public_key) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (id) DO UPDATE SET hostname = EXCLUDED.hostname, last_shipped_at = now(), \
             last_row_id = GREATEST(machine.last_row_id, EXCLUDED.last_row_id), \
             public_key = COALESCE(machine.public_key, EXCLUDED.public_key) \
             RETURNING public_key",
        )
        .bind(machine)
        .bind(&self.hostname)
        .bind(last)
        .bind(&self.public_key)
        .fetch_one(&mut **tx)
        .await
        .map_err(self.pg_err("record the machine"))?;
        if let Some(ours) = &self.public_key
            && registered.as_ref() != Some(ours)
        {
            return Err(ShipError::KeyDiffers {
                machine: machine.to_owned(),
            });
        }
        Ok(())
    }

    /// Inserts the rows it does not have yet, one column array per column; the ids inserted.
    async fn insert_rows(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        rows: &[RawRow],
    ) -> Result<Vec<i64>, ShipError> {
        let arrays: Vec<String> = (0..TEXT_COLUMNS.len())
            .map(|i| format!("${}::text[]", i + 3))
            .chain(
                (0..NUMBER_COLUMNS.len())
                    .map(|i| format!("${}::bigint[]", i + 3 + TEXT_COLUMNS.len())),
            )
            .collect();
        let sql = format!(
            "INSERT INTO events (machine_id, id, {}) SELECT $1, u.* FROM UNNEST($2::bigint[], {}) AS u \
             ON CONFLICT (machine_id, id) DO NOTHING RETURNING id",
            row::column_list(),
            arrays.join(", ")
        );
        // Safe: built from the constant column list and numbered parameters.
        let mut q = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(&self.options.machine)
            .bind(rows.iter().map(|r| r.id).collect::<Vec<i64>>());
        for i in 0..TEXT_COLUMNS.len() {
            q = q.bind(
                rows.iter()
                    .map(|r| r.text[i].clone())
                    .collect::<Vec<Option<String>>>(),
            );
        }
        for i in 0..NUMBER_COLUMNS.len() {
            q = q.bind(
                rows.iter()
                    .map(|r| r.numbers[i])
                    .collect::<Vec<Option<i64>>>(),
            );
        }
        q.fetch_all(&mut **tx)
            .await
            .map_err(self.pg_err("insert audit rows"))
    }

    /// The rows the fleet database had already (not `inserted`): each must be the local row.
    async fn compare_had(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        rows: &[RawRow],
        inserted: &[i64],
    ) -> Result<(), ShipError> {
        let machine = &self.options.machine;
        let had: Vec<i64> = rows
            .iter()
            .map(|r| r.id)
            .filter(|id| !inserted.contains(id))
            .collect();
        let sql = format!(
            "SELECT id, {} FROM events WHERE machine_id = $1 AND id = ANY($2) ORDER BY id",
            row::column_list()
        );
        let theirs = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(machine)
            .bind(&had)
            .fetch_all(&mut **tx)
            .await
            .map_err(self.pg_err("compare shipped rows"))?;
        for stored in &theirs {
            let stored = RawRow::from_row(stored).map_err(self.pg_err("compare shipped rows"))?;
            let Some(local) = rows.iter().find(|r| r.id == stored.id) else {
                continue;
            };
            if let Some(column) = local.first_difference(&stored) {
                return Err(ShipError::Differs {
                    machine: machine.clone(),
                    id: stored.id,
                    column,
                });
            }
        }
        Ok(())
    }

    /// Ships until nothing is left; `progress` sees each batch. Returns the rows PostgreSQL did
    /// not have.
    pub async fn ship_all(&mut self, mut progress: impl FnMut(&Batch)) -> Result<u64, ShipError> {
        let mut new = 0;
        loop {
            let batch = self.ship_batch().await?;
            if batch.sent == 0 {
                return Ok(new);
            }
            new += batch.new;
            progress(&batch);
        }
    }
}

/// The cursor file of one fleet database and machine.
/// The row a head file's text names (read without its key: the shipper only copies it; a
/// forged one fails where it is verified).
fn head_last_id(text: &str) -> Option<i64> {
    let mut lines = text.lines();
    if lines.next() != Some("glovebox audit head v1") {
        return None;
    }
    lines
        .find_map(|l| l.strip_prefix("last_id "))
        .and_then(|v| v.parse().ok())
}

fn cursor_path(dir: &Path, url: &str, machine: &str) -> PathBuf {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{url}\n{machine}").as_bytes());
    dir.join(format!("{}.cursor", &hex::encode(digest)[..16]))
}

fn read_cursor(path: &Path) -> Option<i64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("last_id "))
        .and_then(|n| n.trim().parse().ok())
}

/// Writes the cursor (atomically). A failure is logged: the next run re-sends and compares.
fn write_cursor(path: &Path, url: &str, machine: &str, last_id: i64) {
    if let Some(dir) = path.parent()
        && let Err(e) = glovebox_config::create_private_dir(dir)
    {
        tracing::warn!(error = %e, "could not make the audit shipping cursor directory");
        return;
    }
    let text = format!("target {url}\nmachine {machine}\nlast_id {last_id}\n");
    if let Err(e) = glovebox_config::write_file_unsynced(path, text.as_bytes()) {
        tracing::warn!(error = %e, "could not write the audit shipping cursor");
    }
}

/// A machine's rows in the fleet database and what it registered there, to be checked with the
/// local verify's own functions (`None`: the machine is unknown there).
pub async fn verify_postgres(
    pg: &PgPool,
    url: &str,
    machine: &str,
) -> Result<Option<FleetRows>, ShipError> {
    let pg_err = |action: &'static str| {
        let url = redact_url(url);
        move |source| ShipError::Postgres {
            action,
            url,
            source,
        }
    };
    let machine_row: Option<(i64, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT last_row_id, head, public_key FROM machine WHERE id = $1")
            .bind(machine)
            .fetch_optional(pg)
            .await
            .map_err(pg_err("read the machine"))?;
    let Some((last, head, public_key)) = machine_row else {
        return Ok(None);
    };
    let sql = format!(
        "SELECT id, {} FROM events WHERE machine_id = $1 ORDER BY id",
        row::column_list()
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(machine)
        .fetch_all(pg)
        .await
        .map_err(pg_err("read the machine's rows"))?;
    let rows = rows
        .iter()
        .map(RawRow::from_row)
        .collect::<Result<Vec<_>, _>>()
        .map_err(pg_err("read the machine's rows"))?;
    Ok(Some(FleetRows {
        rows,
        last_shipped: last,
        head,
        public_key,
    }))
}

/// One machine's rows in the fleet database, and what it registered there.
#[derive(Debug, Clone)]
pub struct FleetRows {
    pub rows: Vec<RawRow>,
    /// The last row id the machine says it shipped.
    pub last_shipped: i64,
    /// Its signed head file's text (checked with its audit key).
    pub head: Option<String>,
    /// Its public checkpoint key (hex), as registered with its first rows.
    pub public_key: Option<String>,
}

impl FleetRows {
    /// The rows checked with the machine's audit key and head: the keyed check.
    pub fn check_keyed(&self, key: &AuditKey) -> chain::Report {
        row::check_rows(&self.rows, key, self.head.as_deref())
    }

    /// The rows checked with a public checkpoint key only.
    pub fn check_signed(
        &self,
        public: &ed25519_dalek::VerifyingKey,
    ) -> super::signed::SignedReport {
        super::signed::check_public(self.rows.iter().map(RawRow::stored), public)
    }
}

/// Runs `ship` in the background until `stopped` says so: connects (retrying with backoff),
/// ships what is new, waits `interval` once caught up. Nothing here waits on, or fails, a call.
pub fn spawn(
    state: StateDir,
    ship: glovebox_config::audit_ship::Ship,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let machine = match ship.machine.clone().map_or_else(|| machine_id(&state), Ok) {
            Ok(m) => m,
            Err(e) => {
                tracing::error!(error = %e, "audit shipping is off: no machine id");
                return;
            }
        };
        let options = Options {
            db: state.audit_db(),
            cursor_dir: state.audit_ship_dir(),
            url: ship.postgres.clone(),
            machine,
            batch: ship.batch,
            head: state.audit_head(),
        };
        let mut shipper: Option<Shipper> = None;
        let mut backoff = BACKOFF.0;
        loop {
            if *stopped.borrow() {
                return;
            }
            let wait = match &mut shipper {
                None => match Shipper::connect(options.clone()).await {
                    Ok(s) => {
                        tracing::info!(target_url = %s.url(), machine = %options.machine, "shipping the audit");
                        shipper = Some(s);
                        Duration::ZERO
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "audit shipping: cannot start");
                        backoff_next(&mut backoff)
                    }
                },
                Some(s) => match s.ship_batch().await {
                    Ok(b) if b.sent == 0 => {
                        backoff = BACKOFF.0;
                        ship.interval
                    }
                    Ok(_) => {
                        backoff = BACKOFF.0;
                        Duration::ZERO
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "audit shipping failed");
                        shipper = None;
                        backoff_next(&mut backoff)
                    }
                },
            };
            if wait.is_zero() {
                tokio::task::yield_now().await;
                continue;
            }
            tokio::select! {
                _ = stopped.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    });
}

/// The current delay; doubles the next one up to the cap.
fn backoff_next(backoff: &mut Duration) -> Duration {
    let now = *backoff;
    *backoff = (*backoff * 2).min(BACKOFF.1);
    now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_id_comes_from_the_system_else_is_made_once() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        let system = dir.path().join("etc-machine-id");
        std::fs::write(&system, "0123456789abcdef0123456789abcdef\n").unwrap();
        assert_eq!(
            machine_id_from(&system, &state).unwrap(),
            "0123456789abcdef0123456789abcdef"
        );
        let missing = dir.path().join("none");
        let made = machine_id_from(&missing, &state).unwrap();
        assert_eq!(made.len(), 32);
        assert_eq!(machine_id_from(&missing, &state).unwrap(), made);
        std::fs::write(&system, "\n").unwrap();
        assert_eq!(machine_id_from(&system, &state).unwrap(), made);
    }

    #[test]
    fn cursors_are_per_target_and_machine_and_survive_rewrites() {
        let dir = tempfile::tempdir().unwrap();
        let a = cursor_path(dir.path(), "postgres://u:***@h/d", "m1");
        let b = cursor_path(dir.path(), "postgres://u:***@h/d", "m2");
        assert_ne!(a, b);
        assert_eq!(read_cursor(&a), None);
        write_cursor(&a, "postgres://u:***@h/d", "m1", 41);
        write_cursor(&a, "postgres://u:***@h/d", "m1", 42);
        assert_eq!(read_cursor(&a), Some(42));
        assert!(!std::fs::read_to_string(&a).unwrap().contains("secret"));
    }

    #[test]
    fn a_head_names_its_last_row_and_anything_else_names_none() {
        let head = "glovebox audit head v1\nrows 7\nlast_id 42\nmac ab\nts t\nsignature cd\n";
        assert_eq!(head_last_id(head), Some(42));
        for bad in [
            "",
            "rows 7\nlast_id 42\n",
            "glovebox audit head v2\nlast_id 42\n",
            "glovebox audit head v1\nrows 7\nlast_id x\n",
        ] {
            assert_eq!(head_last_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn backoff_doubles_to_its_cap() {
        let mut b = BACKOFF.0;
        let seen: Vec<u64> = (0..9).map(|_| backoff_next(&mut b).as_secs()).collect();
        assert_eq!(seen, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }
}
