//! `glovebox audit ship` and `glovebox audit verify --postgres`: the local audit copied to a
//! fleet PostgreSQL database, and a machine's chain re-computed there (see the gate's
//! `audit::ship`). The URL's password is never printed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use glovebox_config::StateDir;
use glovebox_config::audit_ship::redact_url;
use glovebox_gate::audit::ship;

use super::signed;
use crate::outln;

/// This machine's fleet id, unless one is given.
fn machine(state: &StateDir, given: Option<String>) -> anyhow::Result<String> {
    match given {
        Some(id) => {
            glovebox_config::audit_ship::check_machine_id(&id)
                .map_err(|m| anyhow::anyhow!("--machine: {m}"))?;
            Ok(id)
        }
        None => Ok(ship::machine_id(state)?),
    }
}

/// `glovebox audit ship --postgres URL [--machine ID] [--batch N]`: ships every row not yet
/// there, one transaction per batch, a line per batch.
pub async fn ship_once(
    state_dir: &Path,
    url: &str,
    machine_id: Option<String>,
    batch: u32,
) -> anyhow::Result<ExitCode> {
    let (lo, hi) = glovebox_config::audit_ship::BATCH;
    anyhow::ensure!(
        (lo..=hi).contains(&batch),
        "--batch: expected {lo} to {hi}, got {batch}"
    );
    let state = StateDir::new(state_dir);
    let machine = machine(&state, machine_id)?;
    let mut shipper = ship::Shipper::connect(ship::Options {
        db: state.audit_db(),
        cursor_dir: state.audit_ship_dir(),
        url: url.to_owned(),
        machine: machine.clone(),
        batch,
        head: state.audit_head(),
    })
    .await?;
    let mut last = None;
    let new = shipper
        .ship_all(|b| {
            last = Some(b.last_id);
            outln!("shipped up to row {} ({} new)", b.last_id, b.new);
        })
        .await?;
    outln!(
        "audit shipped: {new} new rows{} for machine {machine} to {}",
        last.map(|l| format!(", up to row {l},"))
            .unwrap_or_default(),
        shipper.url()
    );
    Ok(ExitCode::SUCCESS)
}

/// `glovebox audit verify --postgres URL [--machine ID] [--audit-key FILE] [--public-key K]`:
/// the machine's signed checkpoints with its public key (pinned, or as registered there), and
/// its rows' MACs too when its audit key is at hand.
pub async fn verify_postgres(
    state_dir: &Path,
    url: &str,
    machine_id: Option<String>,
    key_file: Option<PathBuf>,
    public_key: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let state = StateDir::new(state_dir);
    let machine = machine(&state, machine_id)?;
    let key = audit_key(&state, key_file.as_deref())?;
    let pinned = public_key.map(signed::read_public_key).transpose()?;
    let pg = ship::connect_pg(url).await?;
    let shown = redact_url(url);
    let Some(fleet) = ship::verify_postgres(&pg, url, &machine).await? else {
        outln!("machine {machine} has shipped nothing to {shown}");
        return Ok(ExitCode::from(1));
    };
    let what = format!("machine {machine} in {shown}");
    let public = checkpoint_key(pinned.as_ref(), &fleet);
    let mut proven = false;
    // The audit key, when at hand, names the first changed row itself.
    if let Some(key) = &key {
        if let Some(code) = keyed_problem(&fleet, key, &what) {
            return Ok(code);
        }
        proven = true;
    }
    if let Some((public, fp)) = &public {
        let code = signed::report(&what, fp, &fleet.check_signed(public));
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
        proven = true;
        if pinned.is_none() {
            outln!(
                "  the key is the one registered in the database: pin the machine's audit.pub with \
                 --public-key to prove the rows against the database's owner too"
            );
        }
    }
    anyhow::ensure!(
        proven,
        "nothing to verify {what} with: it registered no public key; give --public-key (its \
         audit.pub) or --audit-key"
    );
    Ok(missing_rows(&fleet, &what).unwrap_or(ExitCode::SUCCESS))
}

/// The machine's audit key: the one in `key_file`, which must then be read, or else this
/// machine's when it is readable.
fn audit_key(
    state: &StateDir,
    key_file: Option<&Path>,
) -> anyhow::Result<Option<glovebox_gate::audit::chain::AuditKey>> {
    Ok(match key_file {
        Some(file) => Some(
            read_audit_key(file)
                .with_context(|| format!("read the machine's audit key {}", file.display()))?,
        ),
        None => read_audit_key(&state.audit_key()).ok(),
    })
}

/// The key the signed checkpoints are checked with, and its fingerprint: the pinned one, or the
/// one the machine registered in the database.
fn checkpoint_key(
    pinned: Option<&(ed25519_dalek::VerifyingKey, String)>,
    fleet: &ship::FleetRows,
) -> Option<(ed25519_dalek::VerifyingKey, String)> {
    match (pinned, &fleet.public_key) {
        (Some(pinned), _) => Some(pinned.clone()),
        (None, Some(registered)) => glovebox_gate::audit::signed::parse_public_key(registered)
            .map(|k| (k, signed::fingerprint(registered))),
        (None, None) => None,
    }
}

/// Checks the machine's rows with its audit key and says what that proves; the exit code when
/// a row is changed or the chain is unproven.
fn keyed_problem(
    fleet: &ship::FleetRows,
    key: &glovebox_gate::audit::chain::AuditKey,
    what: &str,
) -> Option<ExitCode> {
    let report = fleet.check_keyed(key);
    if let Some(problem) = &report.problem {
        let word = if problem.exit_code() == 3 {
            "UNPROVEN"
        } else {
            "BROKEN"
        };
        outln!("audit chain {word} for {what}: {problem}");
        return Some(ExitCode::from(problem.exit_code()));
    }
    outln!(
        "audit chain verified with the audit key: {} rows of {what}, up to its shipped signed head",
        report.rows
    );
    None
}

/// Says which rows are missing when the database holds fewer than the machine says it shipped;
/// exit code 1 then.
fn missing_rows(fleet: &ship::FleetRows, what: &str) -> Option<ExitCode> {
    let rows = u64::try_from(fleet.last_shipped)
        .ok()
        .filter(|shipped| (fleet.rows.len() as u64) < *shipped)?;
    outln!(
        "audit chain BROKEN for {what}: rows {} to {rows} are missing (the machine shipped up to row {rows})",
        fleet.rows.len() + 1
    );
    Some(ExitCode::from(1))
}

fn read_audit_key(file: &Path) -> anyhow::Result<glovebox_gate::audit::chain::AuditKey> {
    let bytes = std::fs::read(file)?;
    glovebox_gate::audit::chain::AuditKey::from_bytes(&bytes)
        .context("the audit key is not 32 bytes")
}
