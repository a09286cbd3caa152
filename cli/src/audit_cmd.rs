//! `glovebox audit ...` ([`run`]): `verify` (the local chain, its signed checkpoints
//! ([`signed`]), or a machine's rows in a fleet database ([`fleet`])), `ship` ([`fleet`]), and
//! `query` and `tail`: the local audit read from a terminal without the sqlite3 shell. The
//! database is opened read-only (`mode=ro`) with `PRAGMA query_only`, so nothing here can change
//! it whatever the SQL says; one statement, bounded in rows, bytes and time; stored text is
//! escaped before it reaches the terminal ([`render`]).

pub mod fleet;
pub mod render;
pub mod signed;
pub mod sql;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::TryStreamExt;
use glovebox_config::StateDir;
use render::Value;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteRow};
use sqlx::{Column, ConnectOptions, Executor, Row, SqlSafeStr, TypeInfo, ValueRef};

use crate::shared_args::StateArgs;
use crate::{Env, outln};

#[derive(clap::Subcommand, Debug)]
pub(crate) enum AuditCommand {
    /// Recompute the hash chain of every audit row and report the first broken one (with
    /// --postgres: of one machine's rows in the fleet database).
    Verify {
        #[command(flatten)]
        state: StateArgs,
        /// Verify a machine's rows in this fleet PostgreSQL database instead of the local file.
        #[arg(long, value_name = "URL")]
        postgres: Option<String>,
        /// The machine (default: this one).
        #[arg(long, value_name = "ID", requires = "postgres")]
        machine: Option<String>,
        /// That machine's audit key, to check its rows' MACs too (default: <state>/audit.key if
        /// readable).
        #[arg(long, value_name = "FILE", requires = "postgres")]
        audit_key: Option<PathBuf>,
        /// Check the signed checkpoints with this public key only (hex, or a file holding it:
        /// the machine's `audit.pub`), no audit key needed. With --postgres, it pins the key
        /// instead of trusting the one registered in the database.
        #[arg(long, value_name = "HEX|FILE")]
        public_key: Option<String>,
    },
    /// Copy the audit rows not yet shipped to a fleet PostgreSQL database (idempotent, resumable).
    Ship {
        #[command(flatten)]
        state: StateArgs,
        /// postgres://user@host/database (put the password in ~/.pgpass or PGPASSWORD, not here).
        #[arg(long, value_name = "URL")]
        postgres: String,
        /// This machine's fleet id (default: /etc/machine-id, else one kept in the state dir).
        #[arg(long, value_name = "ID")]
        machine: Option<String>,
        /// Rows per transaction.
        #[arg(long, value_name = "N", default_value_t = glovebox_config::audit_ship::DEFAULT_BATCH)]
        batch: u32,
    },
    /// Run one read-only SQL statement on the local audit (tables `events`, views `tool_calls`,
    /// `denials`, `approvals`, `commands`, `pack_calls`) and print the rows.
    Query {
        #[command(flatten)]
        state: StateArgs,
        /// One SELECT (or WITH, VALUES, EXPLAIN) statement.
        sql: String,
        /// Print {"columns", "rows", "truncated"} as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the last audit rows, then each new one as it is written, until Ctrl-C.
    Tail {
        #[command(flatten)]
        state: StateArgs,
        /// One JSON object per row instead of a line of text.
        #[arg(long)]
        json: bool,
        /// How many of the existing rows to show first.
        #[arg(long, short = 'n', default_value_t = 10)]
        lines: u32,
    },
}

/// Most rows one query prints.
pub const MAX_ROWS: usize = 10_000;
/// Most bytes of values one query prints.
pub const MAX_BYTES: usize = 16 * 1024 * 1024;
/// Longest a query may run; SQLite is interrupted then.
pub const TIME_LIMIT: Duration = Duration::from_secs(10);
/// SQLite virtual-machine steps between two looks at the clock.
const PROGRESS_STEPS: i32 = 10_000;
/// Rows `tail` reads per poll (its memory bound).
pub const TAIL_BATCH: i64 = 500;
/// `tail`'s polling interval: from the first, doubling while nothing comes, up to the second.
pub const TAIL_POLL: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(2));

/// Opens the state directory's audit read-only; refuses a missing one (never creates it).
pub async fn open_read_only(db: &Path) -> anyhow::Result<SqliteConnection> {
    anyhow::ensure!(db.exists(), "no audit store at {}", db.display());
    SqliteConnectOptions::from_str("sqlite://")?
        .filename(db)
        .read_only(true) // SQLITE_OPEN_READONLY, what `?mode=ro` asks for
        .pragma("query_only", "ON")
        .busy_timeout(Duration::from_secs(5))
        .connect()
        .await
        .with_context(|| format!("open {} read-only", db.display()))
}

/// The result of one query.
#[derive(Debug, Default)]
pub struct Answer {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Value>>,
    /// Which bound cut the output short, if one did.
    pub truncated: Option<&'static str>,
}

/// Runs one read statement on `conn` within [`MAX_ROWS`], [`MAX_BYTES`] and [`TIME_LIMIT`].
pub async fn run_query(conn: &mut SqliteConnection, text: &str) -> anyhow::Result<Answer> {
    let statement = sql::one_read_statement(text)?;
    let expired = Arc::new(AtomicBool::new(false));
    {
        let deadline = Instant::now() + TIME_LIMIT;
        let expired = expired.clone();
        let mut handle = conn.lock_handle().await?;
        handle.set_progress_handler(PROGRESS_STEPS, move || {
            let over = Instant::now() >= deadline;
            expired.store(over, Ordering::Relaxed);
            !over
        });
    }
    let result = fetch(conn, statement).await;
    if let Ok(mut handle) = conn.lock_handle().await {
        handle.remove_progress_handler();
    }
    match result {
        Err(_) if expired.load(Ordering::Relaxed) => anyhow::bail!(
            "the query ran longer than {}s and was stopped (the time limit)",
            TIME_LIMIT.as_secs()
        ),
        other => other,
    }
}

async fn fetch(conn: &mut SqliteConnection, statement: &str) -> anyhow::Result<Answer> {
    // Safe to run as given: it is one statement that starts like a read, on a read-only,
    // query-only connection.
    let prepared = conn
        .prepare(sqlx::AssertSqlSafe(statement.to_owned()).into_sql_str())
        .await
        .map_err(|e| anyhow::anyhow!("{}", db_message(&e)))?;
    let mut answer = Answer {
        columns: sqlx::Statement::columns(&prepared)
            .iter()
            .map(|c| c.name().to_owned())
            .collect(),
        ..Default::default()
    };
    let mut bytes = 0usize;
    let mut rows = sqlx::query(sqlx::AssertSqlSafe(statement))
        .persistent(false)
        .fetch(&mut *conn);
    while let Some(row) = rows
        .try_next()
        .await
        .map_err(|e| anyhow::anyhow!("{}", db_message(&e)))?
    {
        if answer.rows.len() >= MAX_ROWS {
            answer.truncated = Some("MAX_ROWS");
            break;
        }
        let values = values_of(&row);
        bytes += values.iter().map(Value::size).sum::<usize>();
        if bytes > MAX_BYTES {
            answer.truncated = Some("MAX_BYTES");
            break;
        }
        answer.rows.push(values);
    }
    Ok(answer)
}

/// A database error's own message (sqlx prefixes its own words).
fn db_message(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(d) => d.message().to_owned(),
        other => other.to_string(),
    }
}

/// Each column of `row` by the type SQLite stored it with.
fn values_of(row: &SqliteRow) -> Vec<Value> {
    (0..row.columns().len())
        .map(|i| {
            let Ok(raw) = row.try_get_raw(i) else {
                return Value::Null;
            };
            if raw.is_null() {
                return Value::Null;
            }
            let kind = raw.type_info().name().to_owned();
            match kind.as_str() {
                "INTEGER" | "BOOLEAN" => row.try_get::<i64, _>(i).map(Value::Integer),
                "REAL" => row.try_get::<f64, _>(i).map(Value::Real),
                "BLOB" => row.try_get::<Vec<u8>, _>(i).map(Value::Blob),
                _ => row.try_get_unchecked::<String, _>(i).map(Value::Text),
            }
            .unwrap_or(Value::Null)
        })
        .collect()
}

/// `glovebox audit verify|ship|query|tail`. `verify` checks the local chain ([`verify_chain`]),
/// or with `--public-key` only its signed checkpoints, or with `--postgres` a machine's rows in
/// the fleet database.
pub async fn run(env: &Env, command: AuditCommand) -> anyhow::Result<ExitCode> {
    match command {
        AuditCommand::Verify {
            state,
            postgres: None,
            public_key: Some(public_key),
            ..
        } => signed::verify_local(&env.state_dir(&state), &public_key).await,
        AuditCommand::Verify {
            state,
            postgres: None,
            ..
        } => verify_chain(&env.state_dir(&state)).await,
        AuditCommand::Verify {
            state,
            postgres: Some(url),
            machine,
            audit_key,
            public_key,
        } => {
            fleet::verify_postgres(
                &env.state_dir(&state),
                &url,
                machine,
                audit_key.map(|k| env.absolute(k)),
                public_key.as_deref(),
            )
            .await
        }
        AuditCommand::Ship {
            state,
            postgres,
            machine,
            batch,
        } => fleet::ship_once(&env.state_dir(&state), &postgres, machine, batch).await,
        AuditCommand::Query { state, sql, json } => query(&env.state_dir(&state), &sql, json).await,
        AuditCommand::Tail { state, json, lines } => {
            tail(&env.state_dir(&state), json, lines).await
        }
    }
}

/// `glovebox audit verify` of the local audit: the hash chain of every row with the audit key,
/// then the signed checkpoints with its public half, and whether the store was replaced before.
async fn verify_chain(state_dir: &Path) -> anyhow::Result<ExitCode> {
    let state = StateDir::new(state_dir);
    let db = state.audit_db();
    anyhow::ensure!(db.exists(), "no audit store at {}", db.display());
    let key_bytes = std::fs::read(state.audit_key())
        .with_context(|| format!("read the audit key {}", state.audit_key().display()))?;
    let key = glovebox_gate::audit::chain::AuditKey::from_bytes(&key_bytes)
        .context("the audit key is not 32 bytes")?;
    let head = std::fs::read_to_string(state.audit_head()).ok();
    // Read-only: checking the audit never changes it (no migration, no mode change).
    let reader = glovebox_gate::audit::query::AuditReader::open(&db).await?;
    let pool = reader.pool();
    let report = glovebox_gate::audit::verify(pool, &key, head.as_deref()).await?;
    let mismatches: Vec<String> = std::fs::read_dir(state.root())?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("audit.head.mismatch-"))
        .collect();
    if let Some(problem) = &report.problem {
        match problem {
            glovebox_gate::audit::chain::Problem::NoHead => outln!(
                "audit chain UNPROVEN in {}: {problem} ({} is missing)",
                db.display(),
                state.audit_head().display()
            ),
            _ => outln!("audit chain BROKEN in {}: {problem}", db.display()),
        }
        return Ok(ExitCode::from(problem.exit_code()));
    }
    outln!(
        "audit chain verified: {} rows in {}",
        report.rows,
        db.display()
    );
    // The signed checkpoints, with the public half of the same key (what `--public-key` and the
    // fleet check without it); legacy unkeyed rows count only under one of them.
    let public = key.signing_key().verifying_key();
    let signed = glovebox_gate::audit::verify_signed(pool, &public).await?;
    let shown = signed::fingerprint(&hex::encode(public.as_bytes()));
    if let Some(problem) = signed.problem.as_ref().filter(|p| p.exit_code() != 3) {
        outln!("audit chain BROKEN in {}: {problem}", db.display());
        return Ok(ExitCode::from(1));
    }
    outln!(
        "  {} signed checkpoints (public key {shown}…, in {}) prove the first {} rows without the audit key",
        signed.checkpoints,
        state.root().join("audit.pub").display(),
        signed.covered
    );
    if report.unkeyed > 0 {
        if signed.covered < report.unkeyed {
            outln!(
                "audit chain BROKEN in {}: {} rows from before the chain was keyed are not under a signed checkpoint (nothing says where they end)",
                db.display(),
                report.unkeyed
            );
            return Ok(ExitCode::from(1));
        }
        outln!(
            "  {} rows from before the chain was keyed are checked with an unkeyed hash, under the signed checkpoints",
            report.unkeyed
        );
    }
    if !mismatches.is_empty() {
        outln!(
            "audit store REPLACED OR TRUNCATED before: the gate kept the old head as {} (see the anchor_mismatch rows)",
            mismatches.join(", ")
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// `glovebox audit query SQL [--json]`.
pub async fn query(state_dir: &Path, text: &str, json: bool) -> anyhow::Result<ExitCode> {
    let db = StateDir::new(state_dir).audit_db();
    let mut conn = open_read_only(&db).await?;
    let answer = run_query(&mut conn, text).await?;
    if json {
        let rows: Vec<serde_json::Value> = answer
            .rows
            .iter()
            .map(|r| r.iter().map(Value::json).collect())
            .collect();
        outln!(
            "{}",
            serde_json::json!({
                "columns": answer.columns,
                "rows": rows,
                "truncated": answer.truncated.is_some(),
            })
        );
    } else {
        let table = render::table(&answer.columns, &answer.rows);
        outln!("{}", table.trim_end());
        outln!(
            "({} row{})",
            answer.rows.len(),
            if answer.rows.len() == 1 { "" } else { "s" }
        );
    }
    if let Some(bound) = answer.truncated {
        eprintln!(
            "glovebox: output stopped at {} rows ({bound}: at most {MAX_ROWS} rows and {} MiB); narrow the query with WHERE or LIMIT",
            answer.rows.len(),
            MAX_BYTES / (1024 * 1024)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The columns `tail` shows, in order.
const TAIL_COLUMNS: &str = "id, ts, source, kind, account, tool, verdict, approval, outcome, \
    error_code, call_id, subject, detail";

/// `glovebox audit tail [--json] [--lines N]`: the last `lines` rows, then every new one as it
/// is written, until Ctrl-C. Polls by row id, at most [`TAIL_BATCH`] rows at a time.
pub async fn tail(state_dir: &Path, json: bool, lines: u32) -> anyhow::Result<ExitCode> {
    let db = StateDir::new(state_dir).audit_db();
    let mut conn = open_read_only(&db).await?;
    let last: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM events")
        .fetch_one(&mut conn)
        .await?;
    let mut after = last.unwrap_or(0) - i64::from(lines.min(1000));
    let mut wait = TAIL_POLL.0;
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {TAIL_COLUMNS} FROM events WHERE id > ? ORDER BY id LIMIT ?"
        )))
        .bind(after)
        .bind(TAIL_BATCH)
        .fetch_all(&mut conn)
        .await?;
        let full = rows.len() as i64 == TAIL_BATCH;
        for row in &rows {
            after = row.try_get("id")?;
            let values = values_of(row);
            if json {
                let object: serde_json::Map<String, serde_json::Value> = row
                    .columns()
                    .iter()
                    .zip(&values)
                    .map(|(c, v)| (c.name().to_owned(), v.json()))
                    .collect();
                outln!("{}", serde_json::Value::Object(object));
            } else {
                outln!("{}", tail_line(&values));
            }
        }
        if full {
            continue;
        }
        wait = if rows.is_empty() {
            (wait * 2).min(TAIL_POLL.1)
        } else {
            TAIL_POLL.0
        };
        tokio::select! {
            _ = &mut stop => return Ok(ExitCode::SUCCESS),
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// One row of `tail` as a line: fixed columns first, then the subject and detail, escaped.
fn tail_line(values: &[Value]) -> String {
    let cell = |i: usize| {
        values
            .get(i)
            .map(|v| match v {
                Value::Null => "-".to_owned(),
                v => v.cell(),
            })
            .unwrap_or_default()
    };
    let mut line = format!(
        "{:>6} {} {:<8} {:<10} {:<10} {:<14} {:<5} {:<10} {:<8}",
        cell(0),
        cell(1),
        cell(2),
        cell(3),
        cell(4),
        cell(5),
        cell(6),
        cell(7),
        cell(8)
    );
    for (i, name) in [(9, "error"), (10, "call"), (11, "subject"), (12, "detail")] {
        if !matches!(values.get(i), None | Some(Value::Null)) {
            line.push_str(&format!(" {name}={}", cell(i)));
        }
    }
    line
}
