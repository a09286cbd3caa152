//! `glovebox audit ship` and `glovebox audit verify --postgres`: the local audit copied to a
//! fleet PostgreSQL database, and a machine's chain re-computed there (see the gate's
//! `audit::ship`). The URL's password is never printed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use glovebox_config::StateDir;
use glovebox_config::audit_ship::redact_url;
use glovebox_gate::audit::ship;

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

/// `glovebox audit verify --postgres URL [--machine ID] [--audit-key FILE]`.
pub async fn verify_postgres(
    state_dir: &Path,
    url: &str,
    machine_id: Option<String>,
    key_file: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let state = StateDir::new(state_dir);
    let machine = machine(&state, machine_id)?;
    let key_file = key_file.unwrap_or_else(|| state.audit_key());
    let key_bytes = std::fs::read(&key_file).with_context(|| {
        format!(
            "read the machine's audit key {} (give it with --audit-key)",
            key_file.display()
        )
    })?;
    let key = glovebox_gate::audit::chain::AuditKey::from_bytes(&key_bytes)
        .context("the audit key is not 32 bytes")?;
    let pg = ship::connect_pg(url).await?;
    let shown = redact_url(url);
    let Some((report, last)) = ship::verify_postgres(&pg, url, &machine, &key).await? else {
        outln!("machine {machine} has shipped nothing to {shown}");
        return Ok(ExitCode::from(1));
    };
    if let Some(problem) = &report.problem {
        outln!("audit chain BROKEN for machine {machine} in {shown}: {problem}");
        return Ok(ExitCode::from(problem.exit_code()));
    }
    let first_missing = report.rows as i64 + 1;
    if (report.rows as i64) < last {
        outln!(
            "audit chain BROKEN for machine {machine} in {shown}: rows {first_missing} to {last} are missing (the machine shipped up to row {last})"
        );
        return Ok(ExitCode::from(1));
    }
    outln!(
        "audit chain verified: {} rows of machine {machine} in {shown}, up to its shipped signed head",
        report.rows
    );
    Ok(ExitCode::SUCCESS)
}
