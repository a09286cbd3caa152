//! Reading the audit for an account's approver: its last calls (the `tool_calls` view) and every
//! row of one of its calls. A read-only pool of its own, apart from the single writer, so a slow
//! read never holds up a decision; every query is bounded and filtered by the account the caller
//! authenticated for.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use glovebox_proto::v1::{AuditEvent, AuditRow, CallSummary};
use sqlx::Row;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

/// Most calls one read returns.
pub const MAX_CALLS: u32 = 200;
/// Most rows of one call returned.
pub const MAX_CALL_ROWS: u32 = 1000;
/// Rows scanned back from the newest to find an account's last calls.
const SCAN_ROWS: u32 = 100_000;

/// A read-only view of the audit store.
#[derive(Clone, Debug)]
pub struct AuditReader {
    pool: SqlitePool,
}

impl AuditReader {
    /// Opens the audit database at `path` read-only (the gate has created and migrated it).
    pub async fn open(path: &Path) -> Result<AuditReader, sqlx::Error> {
        let options = SqliteConnectOptions::from_str("sqlite://")?
            .filename(path)
            .read_only(true)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await?;
        Ok(AuditReader { pool })
    }

    /// The read-only pool, for a check that reads every row (`verify`, `verify_signed`).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The account's last `limit` finished calls, newest first.
    pub async fn recent_calls(
        &self,
        account: &str,
        limit: u32,
    ) -> Result<Vec<CallSummary>, sqlx::Error> {
        let limit = limit.clamp(1, MAX_CALLS);
        // The newest result rows of the account (one per finished call), found by walking back
        // from the newest row; then those calls from the view, which SQLite narrows by call_id.
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT call_id FROM (SELECT call_id, account, kind FROM events ORDER BY id DESC LIMIT ?3) \
             WHERE account = ?1 AND kind = 'result' AND call_id IS NOT NULL AND call_id != '' LIMIT ?2",
        )
        .bind(account)
        .bind(limit)
        .bind(SCAN_ROWS)
        .fetch_all(&self.pool)
        .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let marks = vec!["?"; ids.len()].join(",");
        let sql = format!(
            "SELECT call_id, client_call_id, started_at, tool, subject, verdict, rule, approval, \
             outcome, error_code, duration_ms FROM tool_calls WHERE call_id IN ({marks}) AND account = ?"
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)); // only `?` marks are spliced in
        for id in &ids {
            query = query.bind(id);
        }
        let rows = query.bind(account).fetch_all(&self.pool).await?;
        let mut calls: Vec<CallSummary> = rows
            .iter()
            .map(|r| CallSummary {
                call_id: text(r, "call_id"),
                client_call_id: text(r, "client_call_id"),
                started_at: text(r, "started_at"),
                tool: text(r, "tool"),
                subject: text(r, "subject"),
                verdict: text(r, "verdict"),
                rule: text(r, "rule"),
                approval: text(r, "approval"),
                outcome: text(r, "outcome"),
                error_code: text(r, "error_code"),
                duration_ms: number(r, "duration_ms"),
            })
            .collect();
        let order = |c: &CallSummary| ids.iter().position(|i| *i == c.call_id);
        calls.sort_by_key(order);
        Ok(calls)
    }

    /// Every row of one of the account's calls, oldest first (none if the call is another
    /// account's).
    pub async fn call_events(
        &self,
        account: &str,
        call_id: &str,
    ) -> Result<Vec<AuditRow>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT ts, call_id, client_call_id, account, source, kind, tool, subject, verdict, rule, \
             reason, approval, outcome, error_code, duration_ms, bytes, detail FROM events \
             WHERE call_id = ?1 AND account = ?2 ORDER BY id LIMIT ?3",
        )
        .bind(call_id)
        .bind(account)
        .bind(MAX_CALL_ROWS)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| AuditRow {
                ts: text(r, "ts"),
                event: Some(AuditEvent {
                    call_id: text(r, "call_id"),
                    client_call_id: text(r, "client_call_id"),
                    account: text(r, "account"),
                    source: text(r, "source"),
                    kind: text(r, "kind"),
                    tool: text(r, "tool"),
                    subject: text(r, "subject"),
                    verdict: text(r, "verdict"),
                    rule: text(r, "rule"),
                    reason: text(r, "reason"),
                    approval: text(r, "approval"),
                    outcome: text(r, "outcome"),
                    error_code: text(r, "error_code"),
                    duration_ms: number(r, "duration_ms"),
                    bytes: number(r, "bytes"),
                    detail: text(r, "detail"),
                    ..Default::default()
                }),
            })
            .collect())
    }
}

fn text(row: &sqlx::sqlite::SqliteRow, column: &str) -> String {
    row.try_get::<Option<String>, _>(column)
        .ok()
        .flatten()
        .unwrap_or_default()
}

fn number(row: &sqlx::sqlite::SqliteRow, column: &str) -> u64 {
    row.try_get::<Option<i64>, _>(column)
        .ok()
        .flatten()
        .unwrap_or(0)
        .max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditFiles, AuditStore, chain::AuditKey};

    fn row(kind: &str, call: &str, account: &str) -> AuditEvent {
        AuditEvent {
            kind: kind.into(),
            call_id: call.into(),
            account: account.into(),
            source: "gate".into(),
            tool: "file_write".into(),
            subject: format!("write /w/{call}"),
            verdict: "ask".into(),
            outcome: if kind == "result" { "ok" } else { "" }.into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn an_account_reads_its_own_calls_newest_first_and_no_one_elses() {
        let dir = tempfile::tempdir().unwrap();
        let files = AuditFiles {
            db: dir.path().join("audit.db"),
            head: dir.path().join("audit.head"),
            key: AuditKey::from_bytes(&[3u8; 32]).unwrap(),
        };
        let store = AuditStore::open(&files).await.unwrap();
        for (call, account) in [("c1", "alice"), ("c2", "bob"), ("c3", "alice")] {
            assert!(store.append(row("decide", call, account)).await);
            assert!(store.append(row("result", call, account)).await);
        }
        // a call still waiting has no result row yet
        assert!(store.append(row("decide", "c4", "alice")).await);
        let reader = AuditReader::open(&files.db).await.unwrap();
        let calls = reader.recent_calls("alice", 10).await.unwrap();
        let ids: Vec<&str> = calls.iter().map(|c| c.call_id.as_str()).collect();
        assert_eq!(ids, ["c3", "c1"]);
        assert_eq!(calls[0].subject, "write /w/c3");
        assert_eq!(calls[0].outcome, "ok");
        assert_eq!(reader.recent_calls("alice", 1).await.unwrap().len(), 1);
        assert!(reader.recent_calls("mallory", 10).await.unwrap().is_empty());

        let rows = reader.call_events("alice", "c1").await.unwrap();
        let kinds: Vec<String> = rows
            .iter()
            .map(|r| r.event.as_ref().unwrap().kind.clone())
            .collect();
        assert_eq!(kinds, ["decide", "result"]);
        assert!(
            reader.call_events("alice", "c2").await.unwrap().is_empty(),
            "bob's call is not alice's to read"
        );
    }
}
