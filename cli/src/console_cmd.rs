//! `glovebox console`: a one-time login link to the web console the broker serves. The link is
//! minted over an approver connection made with the account's approver credential (the same
//! credential `glovebox approve` reads), so only whoever may approve for the account can open a
//! console for it; in system mode (`--system`) over the approve socket, so the link stands for
//! the OS user who ran it, the account's owner, and no token is read. It is printed on stdout,
//! alone on its line, and with `--open` handed to the desktop's browser; it works once, within a
//! minute.

use glovebox_config::StateDir;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

use glovebox_proto::ws::{ClientFrame, Role, ServerFrame};

use crate::Env;
use crate::client::{self, Stream, Target, Ws};
use crate::shared_args::ClientArgs;

/// `glovebox console`.
#[derive(clap::Args, Debug)]
pub(crate) struct ConsoleArgs {
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// Also open the link in the desktop's browser ($BROWSER, or xdg-open).
    #[arg(long)]
    pub(crate) open: bool,
    /// System mode: the link is for you, the account's owner, over the system service's
    /// approve socket (no token: the kernel tells glovebox who you are).
    #[arg(long)]
    pub(crate) system: bool,
    /// System mode: the runtime directory (default: /run/glovebox).
    #[arg(long, value_name = "DIR", requires = "system")]
    pub(crate) runtime_dir: Option<PathBuf>,
}

/// `glovebox console`: the link for the account's approver, or with `--system` for the account's
/// owner; `--open` hands it to `$BROWSER`.
pub async fn run(env: &Env, args: ConsoleArgs) -> anyhow::Result<ExitCode> {
    let browser = env.environment.iter().find(|(k, _)| k == "BROWSER");
    let browser = browser.map(|(_, v)| v.as_str());
    if args.system {
        let layout = env.system_runtime(args.runtime_dir);
        let account = args.client.account.as_deref();
        return console_system(&layout, account, args.open, browser).await;
    }
    let target = env.target(args.client, Role::Approver)?;
    console(&target, args.open, browser).await
}

/// Mints a login link for the target's account and prints it (and opens it with `browser`, or
/// `xdg-open` when none is set, if `open`).
pub async fn console(
    target: &Target,
    open: bool,
    browser: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let origin = target.http_origin()?;
    let (socket, hello_ok) = client::connect_with_hello(target, Role::Approver).await?;
    mint(socket, &account_of(&hello_ok), &origin, open, browser).await
}

fn account_of(hello_ok: &ServerFrame) -> String {
    match hello_ok {
        ServerFrame::HelloOk { account, .. } => account.clone(),
        _ => String::new(),
    }
}

/// System mode: the same, as the account's owner over the approve socket (`runtime` is the
/// service's runtime layout: its approve socket, and `broker.url` for the page's address).
pub async fn console_system(
    runtime: &StateDir,
    account: Option<&str>,
    open: bool,
    browser: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let url_file = runtime.broker_url_file();
    let url = std::fs::read_to_string(&url_file).map_err(|e| {
        anyhow::anyhow!(
            "cannot read {} ({e}): is the glovebox service running?",
            url_file.display()
        )
    })?;
    let origin = Target::origin_of(url.trim())?;
    let (socket, hello_ok) = client::connect_system(&runtime.approve_socket(), account).await?;
    mint(socket, &account_of(&hello_ok), &origin, open, browser).await
}

/// Asks the broker for a login link on an approver connection and hands it out.
async fn mint<S: Stream>(
    mut socket: Ws<S>,
    account: &str,
    origin: &str,
    open: bool,
    browser: Option<&str>,
) -> anyhow::Result<ExitCode> {
    client::send_frame(&mut socket, &ClientFrame::ConsoleLogin {}).await?;
    let (path, expires_in_ms) = loop {
        match client::next_frame(&mut socket).await? {
            ServerFrame::ConsoleLogin {
                path,
                expires_in_ms,
            } => break (path, expires_in_ms),
            ServerFrame::Error { code, message } => anyhow::bail!("{code}: {message}"),
            _ => continue,
        }
    };
    let _ = socket.close(None).await;
    let url = format!("{origin}{path}");
    eprintln!(
        "console for account {account}: this link works once, within {} seconds",
        expires_in_ms / 1000
    );
    println!("{url}");
    if open {
        let program = browser.filter(|b| !b.is_empty()).unwrap_or("xdg-open");
        let started = Command::new(program)
            .arg(&url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        if let Err(e) = started {
            eprintln!("could not start {program} ({e}): open the link above yourself");
        }
    }
    Ok(ExitCode::SUCCESS)
}
