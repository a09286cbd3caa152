//! The audit checked with a public checkpoint key only: `glovebox audit verify --public-key` on
//! the local file, and the signed half of `glovebox audit verify --postgres` (see the gate's
//! `audit::signed`). What it proves is said with the result: every row up to the last signed
//! checkpoint, against anyone without the audit key — a database owner included, when the key
//! is pinned rather than read from the database.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use ed25519_dalek::VerifyingKey;
use glovebox_config::StateDir;
use glovebox_gate::audit::signed::{SignedReport, parse_public_key};

use crate::outln;

/// A public key given as hex or as a file holding it (`audit.pub`).
pub fn read_public_key(given: &str) -> anyhow::Result<(VerifyingKey, String)> {
    let text = match parse_public_key(given) {
        Some(_) => given.to_owned(),
        None => std::fs::read_to_string(given).with_context(|| {
            format!("--public-key: {given} is neither a key (64 hex digits) nor a readable file")
        })?,
    };
    let key = parse_public_key(&text).with_context(|| {
        format!("--public-key: {given} does not hold an Ed25519 public key in hex")
    })?;
    Ok((key, fingerprint(&text)))
}

/// The first 16 hex digits of a key, as it is shown.
pub fn fingerprint(hex: &str) -> String {
    hex.trim().chars().take(16).collect()
}

/// Prints what `report` proves about `what` (e.g. `audit.db`), checked with the key `shown`;
/// returns the exit code: 0 proven, 1 something wrong, 3 nothing signed.
pub fn report(what: &str, shown: &str, report: &SignedReport) -> ExitCode {
    if let Some(problem) = &report.problem {
        let word = if problem.exit_code() == 3 {
            "UNPROVEN"
        } else {
            "BROKEN"
        };
        outln!("signed checkpoints {word} for {what} (public key {shown}…): {problem}");
        return ExitCode::from(problem.exit_code());
    }
    outln!(
        "signed checkpoints verified for {what} with public key {shown}…: {} rows, the first {} \
         proven by {} signed checkpoints",
        report.rows,
        report.covered,
        report.checkpoints
    );
    let open = report.rows - report.covered;
    if open > 0 {
        outln!("  the last {open} rows come after the newest checkpoint: the next one covers them");
    }
    ExitCode::SUCCESS
}

/// `glovebox audit verify --public-key HEX|FILE`: the local rows with the public key only.
pub async fn verify_local(state_dir: &Path, public_key: &str) -> anyhow::Result<ExitCode> {
    let state = StateDir::new(state_dir);
    let db = state.audit_db();
    anyhow::ensure!(db.exists(), "no audit store at {}", db.display());
    let (key, shown) = read_public_key(public_key)?;
    let reader = glovebox_gate::audit::query::AuditReader::open(&db).await?;
    let found = glovebox_gate::audit::verify_signed(reader.pool(), &key).await?;
    Ok(report(&db.display().to_string(), &shown, &found))
}
