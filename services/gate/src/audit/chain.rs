//! What makes the audit evidence: each row carries a MAC, under the gate's audit key, over the row
//! before it and every field of its own; the head of the chain (row count, last id and MAC) is
//! also kept outside the database, signed, in `<state>/audit.head`; and `check` walks the rows and
//! says where the first thing is wrong — a rewritten row, a row inserted or removed, a gap in the
//! ids, a missing tail, a wiped database.
//!
//! What it proves: without the audit key nobody can change, add, remove or reorder rows, or
//! remove the tail up to the last head written, without `check` saying so. What it cannot prove:
//! anything against someone who holds the audit key (the gate's user, root), or a head file
//! replaced by an older genuine one (then a tail removed since is not seen); rows written before
//! the chain was keyed are checked with the older unkeyed hash, which anyone can recompute.
//! Pure: the store reads and writes, this module only computes.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// The value a chain starts from.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// Length of the audit key.
pub const KEY_BYTES: usize = 32;

/// The gate's audit key (separate from ticket keys). Its `Debug` never shows the bytes.
#[derive(Clone)]
pub struct AuditKey([u8; KEY_BYTES]);

impl std::fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuditKey(<redacted>)")
    }
}

impl AuditKey {
    pub fn from_bytes(bytes: &[u8]) -> Option<AuditKey> {
        Some(AuditKey(bytes.try_into().ok()?))
    }

    /// The gate's Ed25519 signing key for checkpoints, derived from the audit key (so it is
    /// exactly as private: the gate's user and root hold it, nobody else). Its public half
    /// ([`super::signed::public_key_hex`]) verifies checkpoints without any secret.
    pub fn signing_key(&self) -> ed25519_dalek::SigningKey {
        let seed: [u8; 32] = self
            .mac(b"glovebox audit signing key v1\0")
            .finalize()
            .into_bytes()
            .into();
        ed25519_dalek::SigningKey::from_bytes(&seed)
    }

    fn mac(&self, label: &[u8]) -> HmacSha256 {
        let mut mac = match <HmacSha256 as Mac>::new_from_slice(&self.0) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC accepts any key length"),
        };
        mac.update(label);
        mac
    }
}

/// The columns of one row that the chain covers, in chain order. Empty strings are stored as
/// NULL and read back as empty.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fields {
    pub ts: String,
    pub call_id: String,
    pub client_call_id: String,
    pub account: String,
    pub source: String,
    pub kind: String,
    pub tool: String,
    pub subject: String,
    pub verdict: String,
    pub rule: String,
    pub reason: String,
    pub approval: String,
    pub outcome: String,
    pub error_code: String,
    pub detail: String,
    pub duration_ms: u64,
    pub bytes: u64,
}

impl Fields {
    /// The text columns, named, in chain order (`client_call_id` is not in the unkeyed chain).
    pub fn text(&self, keyed: bool) -> Vec<(&'static str, &str)> {
        let mut out = vec![("ts", self.ts.as_str()), ("call_id", self.call_id.as_str())];
        if keyed {
            out.push(("client_call_id", self.client_call_id.as_str()));
        }
        out.extend([
            ("account", self.account.as_str()),
            ("source", self.source.as_str()),
            ("kind", self.kind.as_str()),
            ("tool", self.tool.as_str()),
            ("subject", self.subject.as_str()),
            ("verdict", self.verdict.as_str()),
            ("rule", self.rule.as_str()),
            ("reason", self.reason.as_str()),
            ("approval", self.approval.as_str()),
            ("outcome", self.outcome.as_str()),
            ("error_code", self.error_code.as_str()),
            ("detail", self.detail.as_str()),
        ]);
        out
    }

    /// The bytes a row's MAC (or legacy hash) covers: each field as `\n<name>:<length>:<value>`
    /// (length-prefixed, so that no two different rows encode alike), then the two numbers as
    /// `\n<name>:<n>`. Built in one buffer: the writer encodes every row it commits.
    pub(crate) fn encode(&self, keyed: bool) -> Vec<u8> {
        let text = self.text(keyed);
        let values: usize = text
            .iter()
            .map(|(name, value)| name.len() + value.len())
            .sum();
        let mut out = Vec::with_capacity(values + 16 * text.len() + 64);
        let mut number = itoa::Buffer::new();
        for (name, value) in text {
            out.push(b'\n');
            out.extend_from_slice(name.as_bytes());
            out.push(b':');
            out.extend_from_slice(number.format(value.len()).as_bytes());
            out.push(b':');
            out.extend_from_slice(value.as_bytes());
        }
        for (name, n) in [("duration_ms", self.duration_ms), ("bytes", self.bytes)] {
            out.push(b'\n');
            out.extend_from_slice(name.as_bytes());
            out.push(b':');
            out.extend_from_slice(number.format(n).as_bytes());
        }
        out
    }
}

/// A row's MAC: over the previous row's MAC and every field, under the audit key.
pub fn row_mac(key: &AuditKey, prev: &str, fields: &Fields) -> String {
    let mut mac = key.mac(b"glovebox audit row v1\0");
    mac.update(prev.as_bytes());
    mac.update(&fields.encode(true));
    hex::encode(mac.finalize().into_bytes())
}

/// The unkeyed hash of rows written before the chain was keyed.
pub fn legacy_hash(prev: &str, fields: &Fields) -> String {
    let mut h = Sha256::new();
    h.update(prev.as_bytes());
    h.update(fields.encode(false));
    hex::encode(h.finalize())
}

/// The head of the chain as last written: kept outside the database so that a removed tail or a
/// wiped database shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Rows in the chain.
    pub rows: u64,
    /// The id of the last row.
    pub last_id: i64,
    /// The last row's MAC.
    pub mac: String,
    /// When it was written (RFC 3339).
    pub ts: String,
}

/// Why a head file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("the head file is not in the expected format")]
    Malformed,
    #[error("the head file's signature does not verify: it was not written with this audit key")]
    Forged,
}

impl Head {
    fn signature(&self, key: &AuditKey) -> String {
        let mut mac = key.mac(b"glovebox audit head v1\0");
        mac.update(
            format!("{}\n{}\n{}\n{}", self.rows, self.last_id, self.mac, self.ts).as_bytes(),
        );
        hex::encode(mac.finalize().into_bytes())
    }

    /// The head file's text, signed.
    pub fn encode(&self, key: &AuditKey) -> String {
        format!(
            "glovebox audit head v1\nrows {}\nlast_id {}\nmac {}\nts {}\nsignature {}\n",
            self.rows,
            self.last_id,
            self.mac,
            self.ts,
            self.signature(key)
        )
    }

    /// Reads a head file's text and checks its signature.
    pub fn decode(text: &str, key: &AuditKey) -> Result<Head, HeadError> {
        let mut lines = text.lines();
        if lines.next() != Some("glovebox audit head v1") {
            return Err(HeadError::Malformed);
        }
        let mut field = |name: &str| -> Result<String, HeadError> {
            lines
                .next()
                .and_then(|l| l.strip_prefix(name))
                .and_then(|v| v.strip_prefix(' '))
                .map(str::to_owned)
                .ok_or(HeadError::Malformed)
        };
        let rows = field("rows")?.parse().map_err(|_| HeadError::Malformed)?;
        let last_id = field("last_id")?
            .parse()
            .map_err(|_| HeadError::Malformed)?;
        let head = Head {
            rows,
            last_id,
            mac: field("mac")?,
            ts: field("ts")?,
        };
        let signature = field("signature")?;
        let want = head.signature(key);
        if !bool::from(subtle::ConstantTimeEq::ct_eq(
            want.as_bytes(),
            signature.as_bytes(),
        )) {
            return Err(HeadError::Forged);
        }
        Ok(head)
    }
}

/// One row as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRow {
    pub id: i64,
    pub fields: Fields,
    pub prev: String,
    pub mac: String,
    /// Written under the audit key (rows from before that are unkeyed).
    pub keyed: bool,
}

/// The first thing found wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("row {id}: its content was changed (the MAC does not match)")]
    Rewritten { id: i64 },
    #[error(
        "row {id}: it does not follow the row before it (a row was inserted, removed or reordered)"
    )]
    Unchained { id: i64 },
    #[error("rows {from} to {to} are missing (the ids jump)")]
    Gap { from: i64, to: i64 },
    #[error("row {id}: an unkeyed row after keyed ones (someone without the key wrote it)")]
    UnkeyedAfterKeyed { id: i64 },
    #[error(
        "the tail is missing: the head says {head_rows} rows up to row {head_last_id}, the database has {rows}"
    )]
    MissingTail {
        head_rows: u64,
        head_last_id: i64,
        rows: u64,
    },
    #[error("the database was wiped: the head says {head_rows} rows, the database has none")]
    Wiped { head_rows: u64 },
    #[error("row {id}: it is not the row the head names (the chain was rewritten)")]
    HeadMismatch { id: i64 },
    #[error("{0}")]
    Head(HeadError),
    #[error("no head: nothing proves that no tail was cut or that the database was not emptied")]
    NoHead,
    #[error(
        "none of the {rows} rows is under the audit key: the chain was rewritten without it (or the key is not this database's)"
    )]
    NothingKeyed { rows: u64 },
}

impl Problem {
    /// The exit code `audit verify` gives it: 3 when only the head is missing (the rows are
    /// whole, but a cut cannot be ruled out), 1 for everything found wrong.
    pub fn exit_code(&self) -> u8 {
        match self {
            Problem::NoHead => 3,
            _ => 1,
        }
    }
}

/// What `check` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Rows read (up to the first problem).
    pub rows: u64,
    /// Of those, written before the chain was keyed.
    pub unkeyed: u64,
    /// Whether a head file was there to check the tail against.
    pub head_checked: bool,
    pub problem: Option<Problem>,
}

/// Checks rows (in id order) against the key and, if given, the head file's text.
pub fn check(
    rows: impl IntoIterator<Item = StoredRow>,
    key: &AuditKey,
    head: Option<&str>,
) -> Report {
    let mut report = Report {
        rows: 0,
        unkeyed: 0,
        head_checked: false,
        problem: None,
    };
    let head = match head.map(|t| Head::decode(t, key)) {
        None => None,
        Some(Ok(h)) => Some(h),
        Some(Err(e)) => {
            report.problem = Some(Problem::Head(e));
            return report;
        }
    };
    let mut prev = GENESIS.to_owned();
    let mut prev_id: Option<i64> = None;
    let mut seen_keyed = false;
    let mut at_head: Option<(i64, String)> = None;
    for row in rows {
        let problem = row_problem(&row, key, (&prev, prev_id), seen_keyed);
        if problem.is_some() {
            report.problem = problem;
            return report;
        }
        seen_keyed |= row.keyed;
        report.rows += 1;
        report.unkeyed += u64::from(!row.keyed);
        if head.as_ref().is_some_and(|h| h.last_id == row.id) {
            at_head = Some((row.id, row.mac.clone()));
        }
        prev = row.mac;
        prev_id = Some(row.id);
    }
    // A database with the audit key whose rows are all unkeyed was rewritten with the old
    // unkeyed hash, which anyone can compute (a real chain has keyed rows after its legacy ones,
    // whose MACs cover the legacy rows before them).
    if report.rows > 0 && report.rows == report.unkeyed {
        report.problem = Some(Problem::NothingKeyed { rows: report.rows });
        return report;
    }
    let Some(head) = head else {
        report.problem = Some(Problem::NoHead);
        return report;
    };
    report.head_checked = true;
    report.problem = against_head(&head, at_head, report.rows);
    report
}

/// What is wrong with `row`, coming after the row whose MAC and id are `prev` (none for the
/// first), if anything: a gap in the ids, a broken link, an unkeyed row after keyed ones, or a
/// MAC that is not the row's.
fn row_problem(
    row: &StoredRow,
    key: &AuditKey,
    (prev, prev_id): (&str, Option<i64>),
    seen_keyed: bool,
) -> Option<Problem> {
    if let Some(p) = prev_id.filter(|p| row.id != p + 1) {
        Some(Problem::Gap {
            from: p + 1,
            to: row.id - 1,
        })
    } else if row.prev != prev {
        Some(Problem::Unchained { id: row.id })
    } else if !row.keyed && seen_keyed {
        Some(Problem::UnkeyedAfterKeyed { id: row.id })
    } else {
        let want = if row.keyed {
            row_mac(key, prev, &row.fields)
        } else {
            legacy_hash(prev, &row.fields)
        };
        (want != row.mac).then_some(Problem::Rewritten { id: row.id })
    }
}

/// Whether `rows` whole rows, with the row the head names at `at_head` (its id and MAC, if it
/// was found), match the signed head: none wiped, none cut from the tail, the head's row not
/// rewritten.
fn against_head(head: &Head, at_head: Option<(i64, String)>, rows: u64) -> Option<Problem> {
    match at_head {
        _ if rows == 0 && head.rows > 0 => Some(Problem::Wiped {
            head_rows: head.rows,
        }),
        None => Some(Problem::MissingTail {
            head_rows: head.rows,
            head_last_id: head.last_id,
            rows,
        }),
        Some((id, mac)) if mac != head.mac => Some(Problem::HeadMismatch { id }),
        Some(_) if rows < head.rows => Some(Problem::MissingTail {
            head_rows: head.rows,
            head_last_id: head.last_id,
            rows,
        }),
        Some(_) => None,
    }
}

/// Formats a time as RFC 3339 in UTC with milliseconds, e.g. `2026-11-29T23:42:41.123Z`.
pub fn rfc3339_millis(t: std::time::SystemTime) -> String {
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    glovebox_policy::expiry::format_rfc3339_millis(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> AuditKey {
        AuditKey::from_bytes(&[5u8; 32]).unwrap()
    }

    /// A keyed chain of `n` rows with ids from 1.
    fn chain(n: usize) -> Vec<StoredRow> {
        let mut prev = GENESIS.to_owned();
        (1..=n as i64)
            .map(|id| {
                let fields = Fields {
                    ts: format!("2026-12-01T00:00:0{id}.000Z"),
                    call_id: format!("c{id}"),
                    source: "gate".into(),
                    kind: "decide".into(),
                    verdict: "allow".into(),
                    ..Default::default()
                };
                let mac = row_mac(&key(), &prev, &fields);
                let row = StoredRow {
                    id,
                    fields,
                    prev: prev.clone(),
                    mac: mac.clone(),
                    keyed: true,
                };
                prev = mac;
                row
            })
            .collect()
    }

    fn head_of(rows: &[StoredRow]) -> String {
        let last = rows.last().unwrap();
        Head {
            rows: rows.len() as u64,
            last_id: last.id,
            mac: last.mac.clone(),
            ts: "2026-12-01T00:00:09.000Z".into(),
        }
        .encode(&key())
    }

    /// Rows already stored must verify: the encoding is exactly the documented text, field by
    /// field, lengths in bytes.
    #[test]
    fn rows_encode_as_the_chain_has_always_encoded_them() {
        let fields = Fields {
            ts: "2026-12-03T16:00:00.000Z".into(),
            call_id: "call-1".into(),
            client_call_id: "stdio-ab-7".into(),
            account: "ålice".into(),
            kind: "execute".into(),
            subject: "read /w/a:b\nc".into(),
            duration_ms: 0,
            bytes: u64::MAX,
            ..Fields::default()
        };
        for keyed in [true, false] {
            let mut want = String::new();
            for (name, value) in fields.text(keyed) {
                want.push_str(&format!("\n{name}:{}:{value}", value.len()));
            }
            want.push_str(&format!("\nduration_ms:0\nbytes:{}", u64::MAX));
            assert_eq!(String::from_utf8(fields.encode(keyed)).unwrap(), want);
        }
        let text = |keyed| String::from_utf8(fields.encode(keyed)).unwrap();
        assert!(text(true).contains("\naccount:6:ålice\n"), "{}", text(true));
        assert!(!text(false).contains("client_call_id"));
    }

    #[test]
    fn an_untouched_chain_verifies_with_its_head_and_without_it_cannot_rule_out_a_cut() {
        let rows = chain(4);
        let head = head_of(&rows);
        let r = check(rows.clone(), &key(), Some(&head));
        assert_eq!(r.problem, None);
        assert_eq!((r.rows, r.head_checked), (4, true));
        // The rows are whole, but with the head gone a cut tail or a wipe would look the same.
        let r = check(rows, &key(), None);
        assert_eq!((r.problem, r.head_checked), (Some(Problem::NoHead), false));
        assert_eq!(Problem::NoHead.exit_code(), 3);
        let r = check(Vec::new(), &key(), None);
        assert_eq!(r.problem, Some(Problem::NoHead));
    }

    /// The downgrade: every row rewritten with the unkeyed hash anyone can compute (and the head
    /// deleted, or kept) — a whole chain of legacy rows is never taken for one.
    #[test]
    fn a_chain_rewritten_without_the_key_is_refused_with_or_without_a_head() {
        let mut prev = GENESIS.to_owned();
        let forged: Vec<StoredRow> = chain(4)
            .into_iter()
            .map(|mut row| {
                row.prev = prev.clone();
                row.mac = legacy_hash(&prev, &row.fields);
                row.keyed = false;
                prev = row.mac.clone();
                row
            })
            .collect();
        let head = head_of(&chain(4));
        for head in [None, Some(head.as_str())] {
            let r = check(forged.clone(), &key(), head);
            assert_eq!(
                r.problem,
                Some(Problem::NothingKeyed { rows: 4 }),
                "{head:?}"
            );
            assert_eq!(r.problem.unwrap().exit_code(), 1);
        }
    }

    #[test]
    fn every_tampering_names_its_first_bad_row() {
        let rows = chain(5);
        let head = head_of(&rows);
        let check_with = |rows: Vec<StoredRow>| check(rows, &key(), Some(&head)).problem;

        let mut edited = rows.clone();
        edited[2].fields.verdict = "deny".into();
        assert_eq!(check_with(edited), Some(Problem::Rewritten { id: 3 }));

        // Edited and the chain recomputed without the key (with the old unkeyed hash).
        let mut recomputed = rows.clone();
        recomputed[2].fields.approval = "approved".into();
        recomputed[2].mac = legacy_hash(&recomputed[2].prev, &recomputed[2].fields);
        assert_eq!(check_with(recomputed), Some(Problem::Rewritten { id: 3 }));

        let mut removed = rows.clone();
        removed.remove(2);
        assert_eq!(check_with(removed), Some(Problem::Gap { from: 3, to: 3 }));

        let mut renumbered = rows.clone();
        renumbered.remove(2);
        for r in renumbered.iter_mut().skip(2) {
            r.id -= 1;
        }
        assert_eq!(check_with(renumbered), Some(Problem::Unchained { id: 3 }));

        let mut forged = rows.clone();
        forged[4].keyed = false;
        forged[4].mac = legacy_hash(&forged[4].prev, &forged[4].fields);
        assert_eq!(
            check_with(forged),
            Some(Problem::UnkeyedAfterKeyed { id: 5 })
        );

        let tail_cut: Vec<StoredRow> = rows[..3].to_vec();
        assert!(matches!(
            check_with(tail_cut),
            Some(Problem::MissingTail {
                head_rows: 5,
                rows: 3,
                ..
            })
        ));
        assert_eq!(
            check_with(Vec::new()),
            Some(Problem::Wiped { head_rows: 5 })
        );
    }

    #[test]
    fn a_head_from_another_key_or_edited_is_refused() {
        let rows = chain(2);
        let head = head_of(&rows);
        let other = AuditKey::from_bytes(&[6u8; 32]).unwrap();
        assert_eq!(
            check(rows.clone(), &other, Some(&head)).problem,
            Some(Problem::Head(HeadError::Forged))
        );
        let edited = head.replace("rows 2", "rows 1");
        assert_eq!(
            check(rows.clone(), &key(), Some(&edited)).problem,
            Some(Problem::Head(HeadError::Forged))
        );
        assert_eq!(
            check(rows, &key(), Some("nonsense")).problem,
            Some(Problem::Head(HeadError::Malformed))
        );
    }

    #[test]
    fn legacy_unkeyed_rows_verify_before_keyed_ones() {
        let mut prev = GENESIS.to_owned();
        let mut rows = Vec::new();
        for id in 1..=3 {
            let fields = Fields {
                call_id: format!("c{id}"),
                kind: "decide".into(),
                ..Default::default()
            };
            let keyed = id == 3;
            let mac = if keyed {
                row_mac(&key(), &prev, &fields)
            } else {
                legacy_hash(&prev, &fields)
            };
            rows.push(StoredRow {
                id,
                fields,
                prev: prev.clone(),
                mac: mac.clone(),
                keyed,
            });
            prev = mac;
        }
        let head = head_of(&rows);
        let r = check(rows, &key(), Some(&head));
        assert_eq!((r.problem, r.rows, r.unkeyed), (None, 3, 2));
    }
}
