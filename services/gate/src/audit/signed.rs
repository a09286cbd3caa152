//! Signed checkpoints: what lets anyone holding the gate's public key, and no secret at all,
//! check the audit — a fleet verifier, or an administrator without the gate's audit key.
//!
//! Besides the keyed MAC chain ([`super::chain`]), every row extends a public digest chain
//! (SHA-256 over the digest before it and the row's fields, which anyone can recompute). Each
//! checkpoint row carries, in its `detail`, the rows before it, the last one's id and MAC, the
//! digest up to it, and an Ed25519 signature over those under the gate's signing key (derived
//! from the audit key: [`AuditKey::signing_key`]). [`check_public`] walks the rows with the
//! public key: a row changed, added, removed or reordered before a signed checkpoint, or a
//! checkpoint forged or edited, is named; rows after the last signed checkpoint are counted as
//! not yet covered (the next checkpoint covers them). What it cannot show by itself: a tail cut
//! back to an earlier signed checkpoint — compare the newest checkpoint with one kept elsewhere
//! (the gate's log or journal, the fleet copy). Pure.

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use glovebox_proto::audit_row::{RowKind, Source};
use sha2::{Digest, Sha256};

use super::chain::{AuditKey, Fields, GENESIS, StoredRow};

/// The hex of the gate's public checkpoint key.
pub fn public_key_hex(key: &AuditKey) -> String {
    hex::encode(key.signing_key().verifying_key().as_bytes())
}

/// Reads a public key written as hex (64 digits, surrounding whitespace ignored).
pub fn parse_public_key(text: &str) -> Option<VerifyingKey> {
    let bytes: [u8; 32] = hex::decode(text.trim()).ok()?.try_into().ok()?;
    VerifyingKey::from_bytes(&bytes).ok()
}

/// One step of the public digest chain: the digest after a row.
pub fn digest_step(prev: &str, fields: &Fields) -> String {
    let mut h = Sha256::new();
    h.update(b"glovebox audit digest v1\0");
    h.update(prev.as_bytes());
    h.update(fields.encode(true));
    hex::encode(h.finalize())
}

/// What a checkpoint signs: the chain before the checkpoint row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Rows before it.
    pub rows: u64,
    /// The id of the row before it (0 when none).
    pub last_id: i64,
    /// That row's MAC (the chain's genesis when none).
    pub mac: String,
    /// The public digest up to and with that row.
    pub digest: String,
}

impl Checkpoint {
    fn message(&self) -> Vec<u8> {
        format!(
            "glovebox audit checkpoint v1\n{}\n{}\n{}\n{}",
            self.rows, self.last_id, self.mac, self.digest
        )
        .into_bytes()
    }

    /// The checkpoint row's `detail`: the fields and their signature.
    pub fn detail(&self, key: &SigningKey) -> String {
        let signature = key.sign(&self.message());
        format!(
            "rows {} head {} last_id {} digest {} signature {}",
            self.rows,
            self.mac,
            self.last_id,
            self.digest,
            hex::encode(signature.to_bytes())
        )
    }

    /// A signed checkpoint's detail read back; `None` for any other text (a checkpoint from
    /// before signing: `rows N head MAC`).
    pub fn parse(detail: &str) -> Option<(Checkpoint, Signature)> {
        let words: Vec<&str> = detail.split(' ').collect();
        let [
            "rows",
            rows,
            "head",
            mac,
            "last_id",
            last_id,
            "digest",
            digest,
            "signature",
            signature,
        ] = words.as_slice()
        else {
            return None;
        };
        let signature: [u8; 64] = hex::decode(signature).ok()?.try_into().ok()?;
        Some((
            Checkpoint {
                rows: rows.parse().ok()?,
                last_id: last_id.parse().ok()?,
                mac: (*mac).to_owned(),
                digest: (*digest).to_owned(),
            },
            Signature::from_bytes(&signature),
        ))
    }

    /// Whether `signature` is this checkpoint's under `public`.
    pub fn verifies(&self, signature: &Signature, public: &VerifyingKey) -> bool {
        public.verify(&self.message(), signature).is_ok()
    }
}

/// Whether a row is one of the gate's checkpoints.
pub fn is_checkpoint(fields: &Fields) -> bool {
    fields.source == Source::Gate.as_str() && fields.kind == RowKind::Checkpoint.as_str()
}

/// The first thing found wrong with the public key only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignedProblem {
    #[error("rows {from} to {to} are missing (the ids jump)")]
    Gap { from: i64, to: i64 },
    #[error(
        "row {id}: it does not follow the row before it (a row was inserted, removed or reordered)"
    )]
    Unchained { id: i64 },
    #[error(
        "row {id}: a checkpoint whose signature does not verify with this public key (forged, edited, or another machine's)"
    )]
    Forged { id: i64 },
    #[error(
        "row {id}: a signed checkpoint that does not match the rows before it (one of them was changed, added or removed)"
    )]
    Mismatch { id: i64 },
    #[error(
        "none of the {rows} rows is covered by a signed checkpoint: nothing proves them without the audit key"
    )]
    NothingSigned { rows: u64 },
}

impl SignedProblem {
    /// 3 when nothing was found wrong but nothing is signed either; 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            SignedProblem::NothingSigned { .. } => 3,
            _ => 1,
        }
    }
}

/// What [`check_public`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SignedReport {
    /// Rows read (up to the first problem).
    pub rows: u64,
    /// Rows before the last signed checkpoint that verified: proven with the public key.
    pub covered: u64,
    /// Signed checkpoints that verified.
    pub checkpoints: u64,
    pub problem: Option<SignedProblem>,
}

/// Checks rows (in id order) with the gate's public key only.
pub fn check_public(
    rows: impl IntoIterator<Item = StoredRow>,
    public: &VerifyingKey,
) -> SignedReport {
    let mut report = SignedReport::default();
    let mut chain = DigestChain::default();
    for row in rows {
        let problem = if let Some(p) = chain.last_id.filter(|p| row.id != p + 1) {
            Some(SignedProblem::Gap {
                from: p + 1,
                to: row.id - 1,
            })
        } else if row.prev != chain.mac {
            Some(SignedProblem::Unchained { id: row.id })
        } else if is_checkpoint(&row.fields) {
            match Checkpoint::parse(&row.fields.detail) {
                Some((cp, signature)) if !cp.verifies(&signature, public) => {
                    Some(SignedProblem::Forged { id: row.id })
                }
                Some((cp, _)) if cp != chain.checkpoint() => {
                    Some(SignedProblem::Mismatch { id: row.id })
                }
                Some(_) => {
                    report.covered = report.rows;
                    report.checkpoints += 1;
                    None
                }
                None => None,
            }
        } else {
            None
        };
        if problem.is_some() {
            report.problem = problem;
            return report;
        }
        chain.push(&row);
        report.rows += 1;
    }
    if report.checkpoints == 0 && report.rows > 0 {
        report.problem = Some(SignedProblem::NothingSigned { rows: report.rows });
    }
    report
}

/// The chain as far as it was read: what the next checkpoint signs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestChain {
    pub rows: u64,
    pub last_id: Option<i64>,
    pub mac: String,
    pub digest: String,
}

impl Default for DigestChain {
    fn default() -> DigestChain {
        DigestChain {
            rows: 0,
            last_id: None,
            mac: GENESIS.to_owned(),
            digest: GENESIS.to_owned(),
        }
    }
}

impl DigestChain {
    /// Takes the next row in.
    pub fn push(&mut self, row: &StoredRow) {
        self.digest = digest_step(&self.digest, &row.fields);
        self.mac = row.mac.clone();
        self.last_id = Some(row.id);
        self.rows += 1;
    }

    /// The checkpoint of the chain so far.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            rows: self.rows,
            last_id: self.last_id.unwrap_or(0),
            mac: self.mac.clone(),
            digest: self.digest.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::chain::row_mac;

    fn key() -> AuditKey {
        AuditKey::from_bytes(&[7u8; 32]).unwrap()
    }

    /// `n` rows with a signed checkpoint after every `every` of them (and none at the end).
    fn signed_chain(n: usize, every: usize) -> Vec<StoredRow> {
        let signing = key().signing_key();
        let mut chain = DigestChain::default();
        let mut rows = Vec::new();
        let mut next_id = 1;
        let mut push = |fields: Fields, rows: &mut Vec<StoredRow>, chain: &mut DigestChain| {
            let mac = row_mac(&key(), &chain.mac, &fields);
            let row = StoredRow {
                id: next_id,
                fields,
                prev: chain.mac.clone(),
                mac,
                keyed: true,
            };
            next_id += 1;
            chain.push(&row);
            rows.push(row);
        };
        for i in 1..=n {
            let fields = Fields {
                call_id: format!("c{i}"),
                source: "gate".into(),
                kind: "decide".into(),
                subject: format!("exec echo {i}"),
                ..Default::default()
            };
            push(fields, &mut rows, &mut chain);
            if i % every == 0 {
                let detail = chain.checkpoint().detail(&signing);
                let fields = Fields {
                    source: "gate".into(),
                    kind: "checkpoint".into(),
                    detail,
                    ..Default::default()
                };
                push(fields, &mut rows, &mut chain);
            }
        }
        rows
    }

    fn public() -> VerifyingKey {
        parse_public_key(&public_key_hex(&key())).unwrap()
    }

    #[test]
    fn a_signed_chain_verifies_with_the_public_key_and_says_what_is_not_yet_covered() {
        let rows = signed_chain(7, 3);
        // c1 c2 c3 [cp] c4 c5 c6 [cp] c7
        let r = check_public(rows, &public());
        assert_eq!(r.problem, None);
        assert_eq!((r.rows, r.covered, r.checkpoints), (9, 7, 2));
        // with no signed checkpoint nothing is proven
        let r = check_public(signed_chain(2, 3), &public());
        assert_eq!(r.problem, Some(SignedProblem::NothingSigned { rows: 2 }));
        assert_eq!(r.problem.unwrap().exit_code(), 3);
        assert_eq!(check_public(Vec::new(), &public()).problem, None);
    }

    #[test]
    fn what_a_database_owner_without_the_key_can_do_is_named() {
        let rows = signed_chain(6, 3);
        let problem = |rows: Vec<StoredRow>| check_public(rows, &public()).problem;
        // a covered row rewritten (its MAC left as it was: nobody can recompute it)
        let mut edited = rows.clone();
        edited[1].fields.subject = "exec rm -rf /".into();
        assert_eq!(problem(edited), Some(SignedProblem::Mismatch { id: 4 }));
        // removed and renumbered, the chain relinked
        let mut removed = rows.clone();
        removed.remove(1);
        removed[1].prev = removed[0].mac.clone();
        for r in removed.iter_mut().skip(1) {
            r.id -= 1;
        }
        assert_eq!(problem(removed), Some(SignedProblem::Mismatch { id: 3 }));
        // a gap
        let mut gap = rows.clone();
        gap.remove(1);
        assert_eq!(problem(gap), Some(SignedProblem::Gap { from: 2, to: 2 }));
        // a checkpoint's numbers edited, or signed with another key
        let mut edited_cp = rows.clone();
        edited_cp[3].fields.detail = edited_cp[3].fields.detail.replace("rows 3 ", "rows 2 ");
        assert_eq!(problem(edited_cp), Some(SignedProblem::Forged { id: 4 }));
        let other = AuditKey::from_bytes(&[8u8; 32]).unwrap().signing_key();
        let mut resigned = rows.clone();
        let (cp, _) = Checkpoint::parse(&resigned[3].fields.detail).unwrap();
        resigned[3].fields.detail = cp.detail(&other);
        assert_eq!(problem(resigned), Some(SignedProblem::Forged { id: 4 }));
        // every checkpoint removed: nothing proves the rest
        let stripped: Vec<StoredRow> = {
            let mut chain = DigestChain::default();
            rows.iter()
                .filter(|r| !is_checkpoint(&r.fields))
                .enumerate()
                .map(|(i, r)| {
                    let mut r = r.clone();
                    r.id = i as i64 + 1;
                    r.prev = chain.mac.clone();
                    chain.push(&r);
                    r
                })
                .collect()
        };
        assert_eq!(
            problem(stripped),
            Some(SignedProblem::NothingSigned { rows: 6 })
        );
    }

    /// Random edits of random rows (a byte of a field, a number, a removal, a swap, a copy):
    /// never "verified" — by the public key when the edit is under a signed checkpoint, by the
    /// audit key and head wherever it is.
    #[test]
    fn no_random_edit_verifies() {
        let rows = signed_chain(16, 5);
        let last = rows.len() - 1;
        let covered = check_public(rows.clone(), &public()).covered as usize;
        let head = crate::audit::chain::Head {
            rows: rows.len() as u64,
            last_id: rows[last].id,
            mac: rows[last].mac.clone(),
            ts: "t".into(),
        }
        .encode(&key());
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |bound: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % bound as u64) as usize
        };
        for round in 0..400 {
            let mut edited = rows.clone();
            let at = next(covered);
            let what = next(6);
            match what {
                0 => {
                    let f = &mut edited[at].fields;
                    let field = [&mut f.subject, &mut f.call_id, &mut f.detail, &mut f.kind]
                        .into_iter()
                        .nth(next(4))
                        .unwrap();
                    let mut bytes = std::mem::take(field).into_bytes();
                    if bytes.is_empty() {
                        bytes.push(b'x');
                    } else {
                        let i = next(bytes.len());
                        bytes[i] = bytes[i].wrapping_add(1 + next(200) as u8) & 0x7f;
                    }
                    *field = String::from_utf8_lossy(&bytes).into_owned();
                }
                1 => edited[at].fields.duration_ms += 1 + next(9) as u64,
                2 => {
                    edited.remove(at);
                }
                3 => edited.swap(at, at + 1),
                4 => {
                    let copy = edited[at].clone();
                    edited.insert(at + 1, copy);
                }
                _ => edited[at].fields.approval = "approved".into(),
            }
            if edited == rows {
                continue;
            }
            let public_says = check_public(edited.clone(), &public());
            assert!(
                public_says.problem.is_some(),
                "round {round}: edit {what} of row {} verified with the public key",
                at + 1
            );
            let keyed_says = crate::audit::chain::check(edited, &key(), Some(&head));
            assert!(
                keyed_says.problem.is_some(),
                "round {round}: edit {what} of row {} verified with the audit key",
                at + 1
            );
        }
    }

    #[test]
    fn only_a_signed_checkpoints_detail_parses() {
        let cp = Checkpoint {
            rows: 2,
            last_id: 2,
            mac: "ab".into(),
            digest: "cd".into(),
        };
        let detail = cp.detail(&key().signing_key());
        let (back, signature) = Checkpoint::parse(&detail).unwrap();
        assert_eq!(back, cp);
        assert!(back.verifies(&signature, &public()));
        assert!(Checkpoint::parse("rows 2 head ab").is_none());
        assert!(Checkpoint::parse(&detail.replace("signature ", "signature zz")).is_none());
        assert!(parse_public_key("not hex").is_none());
    }
}
