//! First start: create the state directory with a default account for the user who runs
//! `glovebox up` (workdir, bearer token, default policy), the gate's ticket key and the control
//! key the control sockets' keys derive from (read back with [`control_keys`]).

use std::path::{Path, PathBuf};

use anyhow::Context;
use glovebox_config::{
    Config, DEFAULT_LISTEN, RawAccount, RawConfig, StateDir, create_private_dir,
    is_valid_account_id, new_token, random_bytes, token_hash, write_private_file,
};
use glovebox_policy::RawPolicy;

/// The account name for the current OS user, or `default` if that name cannot name an account.
pub fn default_account_name() -> String {
    let uid = nix::unistd::Uid::effective();
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .filter(|n| is_valid_account_id(n))
        .unwrap_or_else(|| "default".to_owned())
}

/// The control keys of a state directory (for the supervisor and administrators' commands).
pub fn control_keys(
    state: &StateDir,
) -> anyhow::Result<glovebox_proto::transport::handover::ControlKeys> {
    let path = state.control_key();
    let bytes = std::fs::read(&path).with_context(|| {
        format!(
            "read {} (is glovebox set up in this state dir, and may you administer it?)",
            path.display()
        )
    })?;
    glovebox_proto::transport::handover::ControlKeys::from_bytes(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Makes the ticket and control keys if they are missing (user and system mode alike).
pub fn ensure_keys(state: &StateDir) -> anyhow::Result<()> {
    if !state.ticket_key().exists() {
        write_private_file(
            &state.ticket_key(),
            &random_bytes::<{ glovebox_ticket::KEY_BYTES }>()?,
        )?;
    }
    if !state.control_key().exists() {
        write_private_file(
            &state.control_key(),
            &random_bytes::<{ glovebox_proto::transport::handshake::KEY_BYTES }>()?,
        )?;
    }
    Ok(())
}

/// Creates what is missing of the state directory. Returns the new account's id on first start.
pub fn ensure_state(state: &StateDir, workdir: &Path) -> anyhow::Result<Option<String>> {
    create_private_dir(state.root())?;
    create_private_dir(&state.run_dir())?;
    ensure_keys(state)?;
    if state.config_file().exists() {
        ensure_approver_tokens(state)?;
        for path in glovebox_config::tighten_state(state)? {
            eprintln!(
                "glovebox: {} was readable by other users; it is now private to its owner",
                path.display()
            );
        }
        return Ok(None);
    }
    let workdir =
        std::fs::canonicalize(workdir).with_context(|| format!("workdir {}", workdir.display()))?;
    anyhow::ensure!(
        workdir.is_dir(),
        "workdir {} is not a directory",
        workdir.display()
    );
    let account = default_account_name();
    let token = new_token()?;
    let approver_token = new_token()?;
    create_private_dir(&state.account_dir(&account))?;
    write_private_file(&state.token_file(&account), format!("{token}\n").as_bytes())?;
    write_private_file(
        &state.approver_token_file(&account),
        format!("{approver_token}\n").as_bytes(),
    )?;
    let policy = RawPolicy::default_for_new_account().to_yaml()?;
    write_private_file(&state.permissions_file(&account), policy.as_bytes())?;
    let raw = RawConfig {
        listen: DEFAULT_LISTEN.to_owned(),
        accounts: vec![RawAccount {
            id: account.clone(),
            workdir: workdir.to_string_lossy().into_owned(),
            roots: Vec::new(),
            run_as: None,
            owner: None,
            job_env: Vec::new(),
            pack_env: Vec::new(),
            sandbox: Default::default(),
            // The user who runs `up` is its own administrator: their account starts enabled.
            enabled: true,
            token_sha256: vec![hex::encode(token_hash(&token))],
            approver_token_sha256: vec![hex::encode(token_hash(&approver_token))],
        }],
        limits: Default::default(),
        client_tools: Default::default(),
        audit: Default::default(),
        telemetry: Default::default(),
    };
    let text = raw.to_yaml()?;
    // What we write must be what we would accept.
    Config::parse(&text, &state.config_file())?;
    write_private_file(&state.config_file(), text.as_bytes())?;
    Ok(Some(account))
}

/// Gives every account that has no approver credential one (state written before approvers had
/// their own credential, or by hand): a new `approver.token` and its hash in `glovebox.yaml`.
fn ensure_approver_tokens(state: &StateDir) -> anyhow::Result<()> {
    let mut raw = state.load_raw_config()?;
    let mut changed = false;
    for account in raw.accounts.iter_mut() {
        if !account.approver_token_sha256.is_empty() {
            continue;
        }
        let token = new_token()?;
        create_private_dir(&state.account_dir(&account.id))?;
        write_private_file(
            &state.approver_token_file(&account.id),
            format!("{token}\n").as_bytes(),
        )?;
        account.approver_token_sha256 = vec![hex::encode(token_hash(&token))];
        changed = true;
    }
    if changed {
        state.save_raw_config(&raw)?;
    }
    Ok(())
}

/// `glovebox token rotate`: replaces every credential of one role of an account with a new token
/// (written to its file, 0600; its hash to `glovebox.yaml`). The broker follows the file: the old
/// token stops working for new connections at once, and connections that used it are closed.
pub fn rotate_token(state: &StateDir, account: &str, approver: bool) -> anyhow::Result<PathBuf> {
    let mut raw = state.load_raw_config()?;
    let entry = raw
        .accounts
        .iter_mut()
        .find(|a| a.id == account)
        .with_context(|| {
            format!(
                "no account {account:?} in {}",
                state.config_file().display()
            )
        })?;
    let token = new_token()?;
    let hashes = vec![hex::encode(token_hash(&token))];
    let file = if approver {
        entry.approver_token_sha256 = hashes;
        state.approver_token_file(account)
    } else {
        entry.token_sha256 = hashes;
        state.token_file(account)
    };
    create_private_dir(&state.account_dir(account))?;
    // The file first: if writing the config fails, the old token still works and nothing is lost.
    write_private_file(&file, format!("{token}\n").as_bytes())?;
    state.save_raw_config(&raw)?;
    Ok(file)
}
