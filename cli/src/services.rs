//! The service entry points `glovebox up` starts as child processes: parse, validate, bind,
//! announce readiness on stdout (`READY ...`), then call the service's `run`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use glovebox_config::StateDir;
use glovebox_proto::transport::bind_private_socket;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use crate::Env;

/// Completes on Ctrl-C, SIGTERM, or (when `stdin_lifeline`) when standard input closes, which is
/// how a child notices that its supervisor is gone.
pub async fn shutdown_signal(stdin_lifeline: bool) {
    let lifeline = async move {
        if stdin_lifeline {
            let mut sink = [0u8; 256];
            let mut stdin = tokio::io::stdin();
            while let Ok(n) = stdin.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        } else {
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
        _ = lifeline => {}
    }
}

fn ready(line: &str) {
    // stdout belongs to the supervisor's readiness protocol.
    println!("READY {line}");
}

pub async fn gate(state_dir: &Path, exit_on_stdin_eof: bool) -> anyhow::Result<ExitCode> {
    let state = StateDir::new(state_dir);
    let config = glovebox_gate::GateConfig::load(state.clone())?;
    let socket = state.gate_socket();
    let listener =
        bind_private_socket(&socket).with_context(|| format!("bind {}", socket.display()))?;
    ready(&socket.display().to_string());
    glovebox_gate::run(config, listener, shutdown_signal(exit_on_stdin_eof)).await?;
    let _ = std::fs::remove_file(&socket);
    Ok(ExitCode::SUCCESS)
}

pub async fn executor(env: &Env, state_dir: &Path, account: &str) -> anyhow::Result<ExitCode> {
    let state = StateDir::new(state_dir);
    let config = state.load_config()?;
    let entry = config.account(account).with_context(|| {
        format!(
            "no account {account:?} in {}",
            state.config_file().display()
        )
    })?;
    let workdir = std::fs::canonicalize(&entry.workdir)
        .with_context(|| format!("workdir {} of account {account:?}", entry.workdir.display()))?;
    // The supervisor writes this account's ticket key (hex) as the first line of stdin and keeps
    // the pipe open: its closing is the signal to stop.
    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(10), stdin.read_line(&mut line))
        .await
        .context("waiting for the ticket key on stdin")??;
    let key_bytes = hex::decode(line.trim()).context("ticket key on stdin is not hex")?;
    let key = glovebox_ticket::Key::from_bytes(&key_bytes)?;
    let root = std::fs::canonicalize(state.root())?;
    let executor_config = glovebox_executor::ExecutorConfig {
        account: account.to_owned(),
        workdir,
        key,
        gate_socket: state.gate_socket(),
        protected: vec![root.to_string_lossy().into_owned()],
        // Dev mode: executors run as the user who ran `up`, so the account's trash is theirs.
        trash_dir: env.trash_dir.clone(),
    };
    let socket = state.executor_socket(account);
    let listener =
        bind_private_socket(&socket).with_context(|| format!("bind {}", socket.display()))?;
    ready(&socket.display().to_string());
    let lifeline = async move {
        let mut rest = Vec::new();
        let mut reader = stdin;
        let _ = reader.read_to_end(&mut rest).await;
    };
    let shutdown = async move {
        tokio::select! {
            _ = shutdown_signal(false) => {}
            _ = lifeline => {}
        }
    };
    glovebox_executor::run(executor_config, listener, shutdown).await?;
    let _ = std::fs::remove_file(&socket);
    Ok(ExitCode::SUCCESS)
}

pub async fn broker(
    env: &Env,
    state_dir: &Path,
    listen: Option<SocketAddr>,
    ask_timeout_secs: u64,
    exit_on_stdin_eof: bool,
) -> anyhow::Result<ExitCode> {
    let state = StateDir::new(state_dir);
    let config = state.load_config()?;
    let addr = listen.unwrap_or(config.listen);
    anyhow::ensure!(
        addr.ip().is_loopback(),
        "refusing to listen on {addr}: the broker has no TLS yet, so it serves loopback addresses only"
    );
    anyhow::ensure!(
        (1..=3600).contains(&ask_timeout_secs),
        "--ask-timeout-secs must be between 1 and 3600"
    );
    let mut broker_config = glovebox_broker::BrokerConfig::from_state(&state, &config);
    broker_config.ask_timeout = Duration::from_secs(ask_timeout_secs);
    broker_config.shell = env.shell.clone();
    broker_config.timezone = env.timezone.clone();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listen on {addr}"))?;
    let local = listener.local_addr()?;
    ready(&format!("ws://{local}/v1/ws"));
    glovebox_broker::run(broker_config, listener, shutdown_signal(exit_on_stdin_eof)).await?;
    Ok(ExitCode::SUCCESS)
}

pub async fn audit_verify(state_dir: &Path) -> anyhow::Result<ExitCode> {
    let state = StateDir::new(state_dir);
    let db = state.audit_db();
    anyhow::ensure!(db.exists(), "no audit store at {}", db.display());
    let pool = glovebox_gate::audit::open_pool(&db).await?;
    match glovebox_gate::audit::verify(&pool).await {
        Ok(rows) => {
            println!("audit chain verified: {rows} rows in {}", db.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            println!("audit chain BROKEN in {}: {e}", db.display());
            Ok(ExitCode::from(1))
        }
    }
}

/// Reads lines from a child's stdout until one starts with `READY `; returns the rest of it.
pub async fn await_ready<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
) -> anyhow::Result<String> {
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).await?;
        anyhow::ensure!(n > 0, "exited before it was ready");
        if let Some(rest) = line.trim_end().strip_prefix("READY ") {
            return Ok(rest.to_owned());
        }
    }
}
