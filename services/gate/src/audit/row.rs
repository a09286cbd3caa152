//! One audit row exactly as stored — NULLs kept apart from empty text — the same in SQLite and in
//! the fleet's PostgreSQL copy: what shipping copies and compares, and what either `verify` turns
//! into the chain's [`StoredRow`] before the one [`chain::check`] walks it.

use sqlx::Row;

use super::chain::{self, AuditKey, Fields, StoredRow};

/// The text columns of `events`, in the order [`RawRow::text`] holds them.
pub const TEXT_COLUMNS: [&str; 17] = [
    "ts",
    "call_id",
    "client_call_id",
    "account",
    "source",
    "kind",
    "tool",
    "subject",
    "verdict",
    "rule",
    "reason",
    "approval",
    "outcome",
    "error_code",
    "detail",
    "prev_hash",
    "hash",
];
/// The number columns besides `id`, in the order [`RawRow::numbers`] holds them.
pub const NUMBER_COLUMNS: [&str; 3] = ["duration_ms", "bytes", "keyed"];

/// Every column of `events` but `id`, comma-separated, text first.
pub fn column_list() -> String {
    TEXT_COLUMNS
        .iter()
        .chain(NUMBER_COLUMNS.iter())
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRow {
    pub id: i64,
    pub text: [Option<String>; 17],
    pub numbers: [Option<i64>; 3],
}

impl RawRow {
    /// Reads `id` and [`column_list`] from a SQLite or PostgreSQL row.
    pub fn from_row<'r, R>(row: &'r R) -> Result<RawRow, sqlx::Error>
    where
        R: Row,
        usize: sqlx::ColumnIndex<R>,
        &'r str: sqlx::ColumnIndex<R>,
        Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        Option<i64>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    {
        let mut text: [Option<String>; 17] = Default::default();
        for (slot, name) in text.iter_mut().zip(TEXT_COLUMNS) {
            *slot = row.try_get(name)?;
        }
        let mut numbers = [None; 3];
        for (slot, name) in numbers.iter_mut().zip(NUMBER_COLUMNS) {
            *slot = row.try_get(name)?;
        }
        Ok(RawRow {
            id: row.try_get("id")?,
            text,
            numbers,
        })
    }

    fn text_of(&self, name: &str) -> String {
        TEXT_COLUMNS
            .iter()
            .position(|c| *c == name)
            .and_then(|i| self.text[i].clone())
            .unwrap_or_default()
    }

    /// The row as the chain sees it (NULL is empty text, or 0).
    pub fn stored(&self) -> StoredRow {
        let t = |name: &str| self.text_of(name);
        let n = |i: usize| self.numbers[i].unwrap_or(0).max(0) as u64;
        StoredRow {
            id: self.id,
            fields: Fields {
                ts: t("ts"),
                call_id: t("call_id"),
                client_call_id: t("client_call_id"),
                account: t("account"),
                source: t("source"),
                kind: t("kind"),
                tool: t("tool"),
                subject: t("subject"),
                verdict: t("verdict"),
                rule: t("rule"),
                reason: t("reason"),
                approval: t("approval"),
                outcome: t("outcome"),
                error_code: t("error_code"),
                detail: t("detail"),
                duration_ms: n(0),
                bytes: n(1),
            },
            prev: t("prev_hash"),
            mac: t("hash"),
            keyed: self.numbers[2].unwrap_or(0) == 1,
        }
    }

    /// The first column in which `other` differs from this row.
    pub fn first_difference(&self, other: &RawRow) -> Option<&'static str> {
        if self.id != other.id {
            return Some("id");
        }
        for (i, name) in TEXT_COLUMNS.iter().enumerate() {
            if self.text[i] != other.text[i] {
                return Some(name);
            }
        }
        for (i, name) in NUMBER_COLUMNS.iter().enumerate() {
            if self.numbers[i] != other.numbers[i] {
                return Some(name);
            }
        }
        None
    }
}

/// Checks a chain of rows (oldest first) against `key` and a head file's text: the one
/// computation behind `glovebox audit verify`, on the local file and on a machine's rows in the
/// fleet database alike.
pub fn check_rows(rows: &[RawRow], key: &AuditKey, head: Option<&str>) -> chain::Report {
    chain::check(rows.iter().map(RawRow::stored), key, head)
}
