//! Audit shipping throughput: rows/s that `glovebox audit ship` copies from a real `glovebox up`'s
//! audit to a private PostgreSQL cluster (one transaction per batch of 500, the default), next to
//! a reference from the same run: the same rows copied, in batches of the same size, into a plain
//! local SQLite file (no chain, no triggers, no network).
//!
//! Run: `cargo build --release -p glovebox -p glovebox-e2e --bins && target/release/glovebox-ship-bench`
//! (the first argument sets the rows, default 50,000). The shipping figure is the whole command:
//! process start, connecting, and comparing the one row it re-sends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::Instant;

use glovebox_e2e::postgres::Postgres;
use glovebox_e2e::{Glovebox, glovebox_bin};
use sqlx::Row;

const ROWS: usize = 50_000;
const BATCH: usize = 500;

const COLUMNS: &str = "id, ts, call_id, client_call_id, account, source, kind, tool, subject, \
    verdict, rule, reason, approval, outcome, error_code, detail, prev_hash, hash, duration_ms, \
    bytes, keyed";

fn ship(g: &Glovebox, url: &str, machine: &str) -> f64 {
    let started = Instant::now();
    let out = Command::new(glovebox_bin())
        .args(["audit", "ship", "--postgres", url, "--machine", machine])
        .args(["--batch", &BATCH.to_string()])
        .arg("--state-dir")
        .arg(&g.state)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    started.elapsed().as_secs_f64()
}

/// Copies every row of `audit.db` into a fresh SQLite file, `BATCH` rows per transaction.
async fn sqlite_copy(g: &Glovebox, rows: usize) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let source = g.audit_pool().await;
    let dest = sqlx::SqlitePool::connect_with(
        sqlx::sqlite::SqliteConnectOptions::from_str("sqlite://")
            .unwrap()
            .filename(dir.path().join("copy.db"))
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .synchronous(sqlx::sqlite::SqliteSynchronous::Normal),
    )
    .await
    .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE events ({})",
        COLUMNS
            .split(", ")
            .map(|c| if c == "id" {
                "id INTEGER PRIMARY KEY".to_owned()
            } else {
                c.to_owned()
            })
            .collect::<Vec<_>>()
            .join(", ")
    )))
    .execute(&dest)
    .await
    .unwrap();
    let n_cols = COLUMNS.split(", ").count();
    let mut after = 0i64;
    let mut copied = 0;
    loop {
        let batch = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM events WHERE id > ? ORDER BY id LIMIT ?"
        )))
        .bind(after)
        .bind(BATCH as i64)
        .fetch_all(&source)
        .await
        .unwrap();
        if batch.is_empty() {
            break;
        }
        let tuple = format!("({})", vec!["?"; n_cols].join(", "));
        let sql = format!(
            "INSERT INTO events ({COLUMNS}) VALUES {}",
            vec![tuple.as_str(); batch.len()].join(", ")
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for r in &batch {
            q = q.bind(r.get::<i64, _>(0));
            for i in 1..18 {
                q = q.bind(r.get::<Option<String>, _>(i));
            }
            for i in 18..21 {
                q = q.bind(r.get::<Option<i64>, _>(i));
            }
        }
        let mut tx = dest.begin().await.unwrap();
        q.execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
        after = batch.last().unwrap().get(0);
        copied += batch.len();
    }
    assert!(copied >= rows);
    started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let rows: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(ROWS);
    let g = Glovebox::start();
    g.append_rows(rows).await;
    let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
        .fetch_one(&g.audit_pool().await)
        .await
        .unwrap();
    let pg = Postgres::start();
    let url = pg.url("postgres");
    // Warm-up: the schema, the page cache, the binary.
    ship(&g, &url, "warm-up");
    let _ = sqlite_copy(&g, rows).await;

    let shipped = ship(&g, &url, "bench");
    let copied = sqlite_copy(&g, rows).await;
    let again = ship(&g, &url, "bench");
    let total = total as f64;
    println!("rows in the audit: {total:.0}, {BATCH} per transaction");
    println!(
        "{:<58} {:>9.0} rows/s ({shipped:.2}s)",
        "glovebox audit ship to PostgreSQL (private cluster, socket)",
        total / shipped
    );
    println!(
        "{:<58} {:>9.0} rows/s ({copied:.2}s)",
        "reference: the same rows copied to a local SQLite file",
        total / copied
    );
    println!("ship / local copy = {:.2}", copied / shipped);
    println!("a second ship with nothing new: {:.3}s", again);
}
