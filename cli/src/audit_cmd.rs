//! `glovebox audit query` and `glovebox audit tail`: the local audit read from a terminal without
//! the sqlite3 shell. The database is opened read-only (`mode=ro`) with `PRAGMA query_only`, so
//! nothing here can change it whatever the SQL says; one statement, bounded in rows, bytes and
//! time; stored text is escaped before it reaches the terminal ([`render`]).

pub mod fleet;
pub mod render;
pub mod signed;
pub mod sql;

use std::path::Path;
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

use crate::outln;

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
