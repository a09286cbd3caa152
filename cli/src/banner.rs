//! What `glovebox up` prints once everything runs ([`announce`]): where to connect, each
//! account's files, the sandboxes, and what to look at (policy errors, running as root).

use std::future::Future;
use std::pin::Pin;

use glovebox_supervisor::{Report, SystemReport};

/// Prints the banner of what `up` started (in user mode after asking the broker for policy
/// errors).
pub fn announce(report: Report) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        match &report.system {
            Some(mode) => system(&report, mode),
            None => {
                let errors = crate::status::policy_errors(&report.url, &report.state).await;
                user(&report, &errors);
            }
        }
    })
}

/// What `up --system` prints once everything runs.
fn system(report: &Report, mode: &SystemReport) {
    let Report {
        state,
        config,
        url,
        sandboxes,
        ..
    } = report;
    println!("glovebox is up (system mode)");
    println!("  WebSocket: {url}");
    println!("  MCP:       {}", crate::status::mcp_url(url));
    println!("  config:    {}", state.config_file().display());
    println!("  policy:    {} (managed)", mode.policy_dir.display());
    println!(
        "  state:     {} (owned by {})",
        state.root().display(),
        mode.gate_user
    );
    println!("  sockets:   {}", state.run_dir().display());
    println!(
        "  approve:   {} (`glovebox approve --system` as an account's owner)",
        state.approve_socket().display()
    );
    println!(
        "  audit:     {} (readable by group {})",
        state.audit_db().display(),
        glovebox_config::system::AUDIT_GROUP
    );
    println!("  gate:      runs as {}", mode.gate_user);
    println!("  broker:    runs as {}", mode.broker_user);
    for a in &config.accounts {
        println!(
            "  account:   {} (owner {}, runs as {}, workdir {})",
            a.id,
            a.owner.as_deref().unwrap_or("?"),
            a.run_as.as_deref().unwrap_or("?"),
            a.workdir.display()
        );
    }
    if config.accounts.is_empty() {
        println!(
            "  accounts:  no accounts yet: add one with `glovebox account add ID --workdir DIR \
             --run-as USER --owner USER --system` (as root)"
        );
    }
    for (name, status) in sandboxes {
        println!("  sandbox:   {name} {status}");
    }
}

/// What `up` prints once everything runs, with the policy errors the broker reports.
fn user(report: &Report, policy_errors: &[String]) {
    let Report {
        state,
        config,
        url,
        created,
        sandboxes,
        ..
    } = report;
    let uid = rustix::process::geteuid().as_raw();
    let user = glovebox_supervisor::init::default_account_name();
    println!("glovebox is up");
    println!("  WebSocket: {url}");
    println!("  MCP:       {}", crate::status::mcp_url(url));
    for a in &config.accounts {
        println!("  account:   {} (workdir {})", a.id, a.workdir.display());
        println!("  token:     {} (agent)", state.token_file(&a.id).display());
        println!(
            "  approver:  {}",
            state.approver_token_file(&a.id).display()
        );
        println!("  policy:    {}", state.permissions_file(&a.id).display());
        let roots: Vec<String> = a.roots.iter().map(|r| r.display().to_string()).collect();
        println!("  roots:     {}", roots.join(", "));
    }
    if config.accounts.is_empty() {
        println!("  accounts:  {}", crate::which_account::NO_ACCOUNTS_YET);
    }
    for (name, status) in sandboxes {
        println!("  sandbox:   {name} {status}");
    }
    println!("  audit:     {}", state.audit_db().display());
    if let Some(account) = created {
        println!("  created account {account:?} on first start");
    }
    let separated: Vec<&str> = config
        .accounts
        .iter()
        .filter_map(|a| a.run_as.as_deref())
        .collect();
    if !separated.is_empty() && separated.len() == config.accounts.len() {
        println!(
            "  identities: each executor runs as its account's run_as user ({})",
            separated.join(", ")
        );
    } else {
        println!(
            "  dev mode: OS identity separation is off; services run as {user} (uid {uid}) unless an account sets run_as"
        );
    }
    for e in policy_errors {
        println!("  WARNING: policy: {e}");
    }
    if uid == 0 {
        println!(
            "  WARNING: running as root: the executor has root's reach, limited only by the policy"
        );
    }
    println!(
        "Try `glovebox call file_list` here and `glovebox approve` in another terminal. Ctrl-C stops."
    );
}
