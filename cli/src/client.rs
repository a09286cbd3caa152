//! `glovebox call` and `glovebox approve`: terminal clients of the WebSocket API, acting as the
//! account whose credential they read (the agent token for `call`, the approver token for
//! `approve`).
//!
//! Why one file past 800 lines: both commands share the connection (the target, the token, the
//! Unix socket tried first, the hello) and the frames' rendering; the terminal's key mode and the
//! type-ahead guard are modules of their own.

pub(crate) mod terminal;
mod typeahead;

use glovebox_proto::call_id::ClientCallId;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::{SinkExt, StreamExt};
use glovebox_config::StateDir;
use glovebox_proto::ws::{ClientFrame, Decision, Role, ServerFrame};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use typeahead::{Input, Mode, Verdict};

use crate::Env;
use crate::shared_args::ClientArgs;

/// `glovebox call`.
#[derive(clap::Args, Debug)]
pub(crate) struct CallArgs {
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// Tool name, e.g. file_read.
    pub(crate) tool: String,
    /// Parameters as a JSON object.
    #[arg(default_value = "{}")]
    pub(crate) params: String,
}

/// `glovebox approve`.
#[derive(clap::Args, Debug)]
pub(crate) struct ApproveArgs {
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// System mode: connect to the system service's approve socket as yourself, the owner of
    /// the account (no token: the kernel tells glovebox who you are).
    #[arg(long)]
    pub(crate) system: bool,
    /// System mode: the runtime directory (default: /run/glovebox).
    #[arg(long, value_name = "DIR", requires = "system")]
    pub(crate) runtime_dir: Option<PathBuf>,
}

/// Where to connect and as whom.
pub struct Target {
    url: String,
    /// The broker's Unix socket, tried before `url` (user mode, when the URL is the running
    /// broker's own).
    socket: Option<std::path::PathBuf>,
    token: String,
    /// Where the token was read from (named when the broker refuses it).
    token_file: std::path::PathBuf,
    role: Role,
}

/// Where the running broker is, and the credential of `account` for `role`.
pub fn target(
    state_dir: &Path,
    account: Option<String>,
    url: Option<String>,
    role: Role,
) -> anyhow::Result<Target> {
    let state = StateDir::new(state_dir);
    anyhow::ensure!(
        state.config_file().exists(),
        "glovebox is not set up in {}: run `glovebox up` first",
        state.root().display()
    );
    // The accounts of glovebox.yaml and those added while it runs.
    let account = crate::which_account::choose_in(&state, account)?;
    let token_file = match role {
        Role::Agent => state.token_file(&account),
        Role::Approver => state.approver_token_file(&account),
    };
    let token = std::fs::read_to_string(&token_file)
        .with_context(|| {
            format!(
                "read the {} token of {account:?} from {}",
                role.as_str(),
                token_file.display()
            )
        })?
        .trim()
        .to_owned();
    // The running broker's own Unix socket, unless another URL was asked for.
    let socket = url.is_none().then(|| state.agent_socket()).flatten();
    let url = match url {
        Some(u) => u,
        None => match std::fs::read_to_string(state.broker_url_file()) {
            Ok(url) => url.trim().to_owned(),
            Err(_) => anyhow::bail!(
                "glovebox is not running (state dir {}): run `glovebox up` first",
                state.root().display()
            ),
        },
    };
    Ok(Target {
        url,
        socket,
        token,
        token_file,
        role,
    })
}

impl Target {
    /// The broker at `url`, with the token in `token_file` for `role`.
    pub fn new(url: &str, token_file: &Path, role: Role) -> anyhow::Result<Target> {
        let token = std::fs::read_to_string(token_file)
            .with_context(|| format!("read the {} token {}", role.as_str(), token_file.display()))?
            .trim()
            .to_owned();
        Ok(Target {
            url: url.to_owned(),
            socket: None,
            token,
            token_file: token_file.to_owned(),
            role,
        })
    }

    /// The running broker's Unix socket, when the target is that broker (user mode).
    pub fn local_socket(&self) -> Option<&Path> {
        self.socket.as_deref()
    }

    /// The credential, for a request made by hand (`glovebox mcp`'s handover).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Where the credential was read from (named when the broker refuses it).
    pub fn token_file(&self) -> &Path {
        &self.token_file
    }

    /// The broker's HTTP origin (`http://127.0.0.1:7420`), from its WebSocket URL.
    pub fn http_origin(&self) -> anyhow::Result<String> {
        Target::origin_of(&self.url)
    }

    /// The HTTP origin of a broker's WebSocket URL.
    pub fn origin_of(url: &str) -> anyhow::Result<String> {
        let (scheme, rest) = if let Some(rest) = url.strip_prefix("ws://") {
            ("http", rest)
        } else if let Some(rest) = url.strip_prefix("wss://") {
            ("https", rest)
        } else {
            anyhow::bail!("the broker URL {url} is not a ws:// URL");
        };
        let authority = rest.split('/').next().unwrap_or_default();
        anyhow::ensure!(!authority.is_empty(), "the broker URL {url} has no host");
        Ok(format!("{scheme}://{authority}"))
    }
}

/// A WebSocket to the broker: over its Unix socket or TCP.
pub type Socket = Ws<Box<dyn Stream + Send>>;

/// A WebSocket over any stream: TCP to the broker's port, or system mode's approve socket.
pub type Ws<S> = tokio_tungstenite::WebSocketStream<S>;

/// What a WebSocket can run over.
pub trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin {}
impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> Stream for S {}

/// The WebSocket's settings toward the broker: each read takes at most 16 KiB, as a read's
/// result frame fits in one and a longer frame takes a few (the library's 128 KiB default is
/// zeroed before every read, a cost paid per frame by `glovebox mcp`).
fn ws_config() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default().read_buffer_size(16 * 1024)
}

/// Connects and says hello; returns the socket and the `hello_ok` frame.
/// The broker refused the credential: trying again with it will not help.
#[derive(Debug)]
pub struct CredentialRefused(pub String);

impl std::fmt::Display for CredentialRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CredentialRefused {}

pub async fn connect_with_hello(
    target: &Target,
    role: Role,
) -> anyhow::Result<(Socket, ServerFrame)> {
    let mut request = target.url.as_str().into_client_request()?;
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {}", target.token).parse()?);
    use tokio_tungstenite::tungstenite::Error;
    let stream = open_stream(target, request.uri()).await.map_err(|e| {
        let why = format!(
            "cannot reach glovebox at {} ({e}): is `glovebox up` running?",
            target.url
        );
        anyhow::Error::new(e).context(why)
    })?;
    let (mut socket, _) = match tokio_tungstenite::client_async_with_config(
        request,
        stream,
        Some(ws_config()),
    )
    .await
    {
        Ok(connected) => connected,
        Err(Error::Http(response)) if response.status() == 401 => {
            return Err(anyhow::Error::new(CredentialRefused(format!(
                "the broker refused the {} token in {} (it may have been rotated: `glovebox token rotate`)",
                target.role.as_str(),
                target.token_file.display()
            ))));
        }
        Err(Error::Io(e)) => {
            let why = format!(
                "cannot reach glovebox at {} ({e}): is `glovebox up` running?",
                target.url
            );
            return Err(anyhow::Error::new(e).context(why));
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("connect to {}", target.url))),
    };
    send_frame(&mut socket, &ClientFrame::Hello { role }).await?;
    match next_frame(&mut socket).await? {
        ok @ ServerFrame::HelloOk { .. } => Ok((socket, ok)),
        other => anyhow::bail!("unexpected answer to hello: {other:?}"),
    }
}

/// One `manage` operation over the system service's approve socket, as this user for the account
/// they own (`account` when they own several): the account's id and the operation's result, or
/// the broker's refusal as an error.
pub async fn manage_system(
    socket: &Path,
    account: Option<&str>,
    op: glovebox_proto::ws::ManageOp,
) -> anyhow::Result<(String, serde_json::Value)> {
    let (mut socket, hello) = connect_system(socket, account).await?;
    let ServerFrame::HelloOk { account, .. } = hello else {
        anyhow::bail!("unexpected answer to hello");
    };
    let request_id = format!("{}-1", op.name());
    send_frame(
        &mut socket,
        &ClientFrame::Manage {
            request_id: request_id.clone(),
            op,
        },
    )
    .await?;
    loop {
        if let ServerFrame::ManageResult {
            request_id: id,
            ok,
            result,
            error,
        } = next_frame(&mut socket).await?
            && id == request_id
        {
            if !ok {
                let why = error.map(|e| e.message).unwrap_or_default();
                anyhow::bail!("the broker refused: {why}");
            }
            return Ok((account, result.unwrap_or_default()));
        }
    }
}

/// A stream to the broker: its Unix socket if `target` has one that answers, else a TCP
/// connection to `uri`'s host and port (plain `ws://` only).
async fn open_stream(
    target: &Target,
    uri: &tokio_tungstenite::tungstenite::http::Uri,
) -> std::io::Result<Box<dyn Stream + Send>> {
    if let Some(path) = &target.socket
        && let Ok(stream) = tokio::net::UnixStream::connect(path).await
    {
        return Ok(Box::new(stream));
    }
    let unsupported = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
    if uri.scheme_str() != Some("ws") {
        return Err(unsupported("only ws:// URLs are supported"));
    }
    let host = uri
        .host()
        .ok_or_else(|| unsupported("the URL has no host"))?;
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port)).await?;
    stream.set_nodelay(true)?;
    Ok(Box::new(stream))
}

/// Waits until the broker accepts `target`'s token (a new one takes effect once glovebox has
/// applied it): `Some(false)` if it has not within `wait`, `None` if no broker answers at all
/// (glovebox is not running; it reads the token when it starts).
pub async fn wait_accepted(target: &Target, wait: Duration) -> Option<bool> {
    let deadline = Instant::now() + wait;
    loop {
        match connect_with_hello(target, target.role).await {
            Ok(_) => return Some(true),
            Err(e) if e.chain().any(|c| c.is::<std::io::Error>()) => return None,
            Err(_) if Instant::now() > deadline => return Some(false),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Sends one frame (its JSON is defined by `glovebox_proto::ws`, like the broker's parser).
pub async fn send_frame<S: Stream>(socket: &mut Ws<S>, frame: &ClientFrame) -> anyhow::Result<()> {
    socket.send(Message::Text(frame.to_json()?.into())).await?;
    Ok(())
}

async fn connect(target: &Target, role: Role) -> anyhow::Result<Socket> {
    Ok(connect_with_hello(target, role).await?.0)
}

pub async fn next_frame<S: Stream>(socket: &mut Ws<S>) -> anyhow::Result<ServerFrame> {
    loop {
        match socket.next().await {
            Some(Ok(Message::Text(t))) => {
                return serde_json::from_str(t.as_str()).context("malformed frame from the broker");
            }
            Some(Ok(Message::Close(c))) => anyhow::bail!("the broker closed the connection: {c:?}"),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.into()),
            None => anyhow::bail!("the broker closed the connection"),
        }
    }
}

/// `glovebox call`: invokes one tool as the account's agent and prints its result (progress on
/// stderr); exits 1 when the tool fails.
pub async fn call(env: &Env, args: CallArgs) -> anyhow::Result<ExitCode> {
    let target = env.target(args.client, Role::Agent)?;
    let params: serde_json::Value =
        serde_json::from_str(&args.params).context("params must be a JSON object")?;
    let mut socket = connect(&target, Role::Agent).await?;
    let call_id = ClientCallId::random("cli");
    let invoke = ClientFrame::Invoke {
        call_id: call_id.clone(),
        tool: args.tool,
        params,
        tables: false,
        // A pack's long call says how far it got, on stderr, while stdout waits for the result.
        progress: true,
    };
    send_frame(&mut socket, &invoke).await?;
    loop {
        match next_frame(&mut socket).await? {
            ServerFrame::Progress {
                call_id: id,
                progress,
                total,
                message,
            } if id == call_id.as_str() => eprintln!("{}", progress_line(progress, total, message)),
            ServerFrame::Result {
                call_id: id,
                ok,
                result,
                error,
            } if id == call_id.as_str() => {
                let _ = socket.close(None).await;
                if ok {
                    crate::outln!(
                        "{}",
                        serde_json::to_string_pretty(&result.unwrap_or_default())?
                    );
                    return Ok(ExitCode::SUCCESS);
                }
                let error = serde_json::to_value(&error)?;
                crate::outln!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({ "error": error }))?
                );
                return Ok(ExitCode::from(1));
            }
            ServerFrame::Error { code, message } => anyhow::bail!("{code}: {message}"),
            _ => continue,
        }
    }
}

/// A progress report as `glovebox call` prints it: `progress 3/10: message`, the server's message
/// (untrusted) with control characters shown escaped and cut to a line.
fn progress_line(progress: f64, total: Option<f64>, message: Option<String>) -> String {
    let mut line = match total {
        Some(t) => format!("progress {progress}/{t}"),
        None => format!("progress {progress}"),
    };
    if let Some(m) = message {
        let shown: String = m.chars().take(200).flat_map(char::escape_debug).collect();
        line.push_str(&format!(": {shown}"));
    }
    line
}

/// The ask on screen.
struct Shown {
    ask_id: String,
    /// When it was on screen, prompt and all (or, while confirming, the confirmation prompt).
    at: Instant,
    deadline: Instant,
    /// Its preview was cut: allowing needs the same answer typed again.
    preview_cut: bool,
    /// The allowing answer given once, waiting to be typed again.
    confirming: Option<Decision>,
    /// The ask as it was shown (header, warning, tool, subjects, preview), shown again on `?`.
    details: String,
}

impl Shown {
    /// The ask's id as the approver sees it: its first four hex digits (`ask 3f2a`).
    fn short_id(&self) -> &str {
        short_ask_id(&self.ask_id)
    }
}

/// The first four hex digits of an ask id (`ask-3f2a…` → `3f2a`), as the terminal shows it.
fn short_ask_id(ask_id: &str) -> &str {
    let hex = ask_id.strip_prefix("ask-").unwrap_or(ask_id);
    hex.get(..4).unwrap_or(hex)
}

/// What `approve` waits for.
// One value at a time, moved straight into a match: its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Event {
    Frame(ServerFrame),
    Input(Option<Input>),
    Tick,
    /// A signal to stop: `approve` denies the ask on screen and exits with this code.
    Stop(Stopped),
}

/// Why `approve` was told to stop, by a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopped {
    /// Ctrl-C (SIGINT).
    Interrupt,
    /// SIGTERM.
    Terminate,
    /// The terminal went away (SIGHUP).
    HangUp,
}

impl Stopped {
    /// The exit code, as a shell reports a command a signal ended: 128 + the signal's number.
    fn exit_code(self) -> u8 {
        match self {
            Stopped::Interrupt => 130,
            Stopped::Terminate => 143,
            Stopped::HangUp => 129,
        }
    }

    /// What the denial of the ask on screen is put down to.
    fn reason(self) -> &'static str {
        match self {
            Stopped::Interrupt => "Ctrl-C",
            Stopped::Terminate => "approve was stopped",
            Stopped::HangUp => "the terminal went away",
        }
    }
}

/// The exit code of `glovebox approve` when the broker goes away.
const BROKER_GONE: u8 = 1;

/// `glovebox approve`: shows each ask of the account and sends the approver's answer, a single
/// key on a terminal (a line from a pipe). An answer applies only to the ask on screen, and only
/// if it was typed a second after that ask appeared (see `typeahead`). Ctrl-C denies the ask on
/// screen and exits 130; a stdin that ends is an error (the ask on screen is denied first), and
/// one already closed fails before connecting. With `--system`, see [`approve_system`].
pub async fn approve(env: &Env, args: ApproveArgs) -> anyhow::Result<ExitCode> {
    if args.system {
        let layout = env.system_runtime(args.runtime_dir);
        return approve_system(&layout.approve_socket(), args.client.account.as_deref()).await;
    }
    let target = env.target(args.client, Role::Approver)?;
    ensure_stdin_open()?;
    let (socket, hello) = connect_with_hello(&target, Role::Approver).await?;
    show_audit_checkpoint(&hello);
    approve_on(socket).await
}

/// Fails if stdin cannot bring an answer (`/dev/null`, a file, a pipe already closed): better at
/// once than at the first ask.
fn ensure_stdin_open() -> anyhow::Result<()> {
    if terminal::stdin_is_closed() {
        anyhow::bail!(terminal::STDIN_CLOSED);
    }
    Ok(())
}

/// Prints the audit's newest signed checkpoint the broker gave an approver: a person outside the
/// gate's user saw it, so a later rewrite of the audit would have to match it.
fn show_audit_checkpoint(hello: &ServerFrame) {
    if let ServerFrame::HelloOk {
        audit_checkpoint: Some(checkpoint),
        ..
    } = hello
    {
        eprintln!("audit: newest signed checkpoint {checkpoint}");
    }
}

/// `glovebox approve --system`: the same, over system mode's approve socket, where the kernel
/// tells the broker who is connecting: this user is the approver of the account they own
/// (`account` chooses when they own several). No token is read.
pub async fn approve_system(socket: &Path, account: Option<&str>) -> anyhow::Result<ExitCode> {
    ensure_stdin_open()?;
    let (socket, hello) = connect_system(socket, account).await?;
    let ServerFrame::HelloOk { account, .. } = &hello else {
        anyhow::bail!("unexpected answer to hello: {hello:?}");
    };
    eprintln!("approving for account {account}");
    show_audit_checkpoint(&hello);
    approve_on(socket).await
}

/// An approver connection over system mode's approve socket, as the user running this (the
/// owner of `account`, or of the only account it owns), past hello; and its `hello_ok`.
pub async fn connect_system(
    socket: &Path,
    account: Option<&str>,
) -> anyhow::Result<(Ws<tokio::net::UnixStream>, ServerFrame)> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .with_context(|| {
            format!(
                "cannot reach glovebox's approve socket {} (is the glovebox service running?)",
                socket.display()
            )
        })?;
    let url = match account {
        Some(a) => format!("ws://localhost/v1/ws?account={a}"),
        None => "ws://localhost/v1/ws".to_owned(),
    };
    use tokio_tungstenite::tungstenite::Error;
    let (mut socket, _) =
        match tokio_tungstenite::client_async_with_config(url, stream, Some(ws_config())).await {
            Ok(connected) => connected,
            Err(Error::Http(response)) => {
                let body = response
                    .body()
                    .as_ref()
                    .map(|b| String::from_utf8_lossy(b).trim().to_owned())
                    .unwrap_or_default();
                anyhow::bail!("the broker refused this user as an approver: {body}")
            }
            Err(e) => return Err(anyhow::Error::new(e).context("connect to the approve socket")),
        };
    send_frame(
        &mut socket,
        &ClientFrame::Hello {
            role: Role::Approver,
        },
    )
    .await?;
    match next_frame(&mut socket).await? {
        ok @ ServerFrame::HelloOk { .. } => Ok((socket, ok)),
        other => anyhow::bail!("unexpected answer to hello: {other:?}"),
    }
}

async fn approve_on<S: Stream>(socket: Ws<S>) -> anyhow::Result<ExitCode> {
    // Listening before the terminal changes mode, so a signal at any point ends `approve` through
    // the code that puts the mode back.
    let stops = Stops::listen()?;
    // Restored when dropped: on return, on error, and while a panic unwinds.
    let key_mode = terminal::KeyMode::enable().context("switch the terminal to single keys")?;
    let mode = match key_mode {
        Some(_) => Mode::Keys,
        None => Mode::Lines,
    };
    let input = typeahead::spawn_stdin_reader(mode).context("read stdin")?;
    let mut approver = Approver {
        socket,
        mode,
        shown: None,
    };
    let result = approver.run(input, stops).await;
    drop(key_mode);
    result
}

/// The signals that stop `approve`.
struct Stops {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hang_up: tokio::signal::unix::Signal,
}

impl Stops {
    fn listen() -> std::io::Result<Stops> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Stops {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hang_up: signal(SignalKind::hangup())?,
        })
    }

    async fn recv(&mut self) -> Stopped {
        tokio::select! {
            _ = self.interrupt.recv() => Stopped::Interrupt,
            _ = self.terminate.recv() => Stopped::Terminate,
            _ = self.hang_up.recv() => Stopped::HangUp,
        }
    }
}

/// `approve`'s connection and screen.
struct Approver<S: Stream> {
    socket: Ws<S>,
    mode: Mode,
    shown: Option<Shown>,
}

impl<S: Stream> Approver<S> {
    async fn run(
        &mut self,
        mut input: tokio::sync::mpsc::UnboundedReceiver<Input>,
        mut stops: Stops,
    ) -> anyhow::Result<ExitCode> {
        eprintln!("{}", waiting_line(self.mode));
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            let event = tokio::select! {
                stopped = stops.recv() => Event::Stop(stopped),
                frame = next_frame(&mut self.socket) => match frame {
                    Ok(frame) => Event::Frame(frame),
                    Err(e) => {
                        eprintln!(
                            "\nthe broker went away ({}): glovebox stopped or restarted; no more asks",
                            crate::out::error_chain(&e)
                        );
                        return Ok(ExitCode::from(BROKER_GONE));
                    }
                },
                typed = input.recv() => Event::Input(typed),
                _ = tick.tick() => Event::Tick,
            };
            match event {
                Event::Stop(stopped) => return self.stop(stopped).await,
                Event::Frame(frame) => self.on_frame(frame)?,
                Event::Input(Some(Input::Typed(entries))) => {
                    if let Some(stopped) = self.on_typed(entries).await? {
                        return self.stop(stopped).await;
                    }
                }
                Event::Input(Some(Input::End) | None) => {
                    // No answer can come any more: deny rather than leave the agent waiting.
                    self.answer(Decision::Deny, Some("stdin is closed")).await?;
                    self.close().await;
                    anyhow::bail!(terminal::STDIN_CLOSED);
                }
                Event::Tick => {
                    if let Some(ask) = &self.shown {
                        if Instant::now() >= ask.deadline {
                            crate::outln!("\n(timed out: denied)");
                            self.shown = None;
                        } else {
                            prompt(ask)?;
                        }
                    }
                }
            }
        }
    }

    fn on_frame(&mut self, frame: ServerFrame) -> anyhow::Result<()> {
        match frame {
            ask @ ServerFrame::Ask { .. } => {
                if let Some(previous) = self.shown.take() {
                    crate::outln!("\n(ask {} is no longer shown)", previous.short_id());
                }
                let ask = show(ask)?;
                // Anything typed but not yet read predates this ask.
                typeahead::discard_unread_terminal_input();
                self.shown = Some(Shown {
                    at: Instant::now(),
                    ..ask
                });
            }
            ServerFrame::AskClosed { ask_id, reason }
                if self.shown.as_ref().is_some_and(|s| s.ask_id == ask_id) =>
            {
                crate::outln!("\n(ask closed: {reason})");
                self.shown = None;
            }
            ServerFrame::AuditHealth {
                healthy, message, ..
            } => {
                if healthy {
                    crate::outln!("\n(audit: {message})");
                } else {
                    crate::outln!("\nWARNING: audit: {message}");
                }
                if let Some(ask) = &self.shown {
                    prompt(ask)?;
                }
            }
            ServerFrame::Error { code, message } => eprintln!("broker: {code}: {message}"),
            _ => {}
        }
        Ok(())
    }

    /// Acts on what one read of stdin brought, in order; at most one notice (an ignored entry,
    /// a reminder of the choices) is printed for it. `Some` if it asked to stop (Ctrl-C read as
    /// a key).
    async fn on_typed(
        &mut self,
        entries: Vec<typeahead::Entry>,
    ) -> anyhow::Result<Option<Stopped>> {
        let mut noticed = false;
        for entry in entries {
            let verdict = typeahead::judge(&entry, self.shown.as_ref().map(|s| s.at));
            let notice = match verdict {
                Verdict::Answer(decision) => {
                    if self.mode == Mode::Keys {
                        // The key pressed, where a line's answer would be echoed.
                        print!("{}", entry.text.trim());
                    }
                    self.decide(decision).await?;
                    continue;
                }
                Verdict::Details => {
                    if let Some(ask) = &self.shown {
                        crate::outln!("\n{}\nask id: {}", ask.details, ask.ask_id);
                        prompt(ask)?;
                    }
                    continue;
                }
                Verdict::Interrupt => return Ok(Some(Stopped::Interrupt)),
                Verdict::Nothing => {
                    // An empty line: the question again.
                    if self.mode == Mode::Lines
                        && let Some(ask) = &self.shown
                    {
                        prompt(ask)?;
                    }
                    continue;
                }
                Verdict::Stale => {
                    "\n(ignored what was typed before this ask was shown, or within a second of it)"
                }
                Verdict::NoAsk => "(ignored: no ask is shown)",
                Verdict::Unknown => match self.mode {
                    Mode::Keys => {
                        "\n(not an answer: press y to allow once, a to always allow, n to deny, \
                         ? for the details; Ctrl-C denies and stops)"
                    }
                    Mode::Lines => {
                        "\n(not an answer: type y to allow once, a to always allow, n to deny, \
                         ? for the details)"
                    }
                },
            };
            if !std::mem::replace(&mut noticed, true) {
                crate::outln!("{notice}");
                if let Some(ask) = &self.shown {
                    prompt(ask)?;
                }
            }
        }
        Ok(None)
    }

    /// An answer the approver gave to the ask on screen: sent, unless its preview was cut and
    /// it allows: then the same answer is asked for again, read after the question is shown.
    async fn decide(&mut self, decision: Decision) -> anyhow::Result<()> {
        if let Some(ask) = self.shown.as_mut().filter(|s| {
            s.preview_cut && decision != Decision::Deny && s.confirming != Some(decision)
        }) {
            ask.confirming = Some(decision);
            ask.at = Instant::now();
            let again = if decision == Decision::Always {
                "a"
            } else {
                "y"
            };
            crate::outln!(
                "\nask {}'s preview was cut: not all of what it allows is shown above. {} {again} \
                 again to allow it anyway, n to deny.",
                ask.short_id(),
                match self.mode {
                    Mode::Keys => "Press",
                    Mode::Lines => "Type",
                }
            );
            prompt(ask)?;
            return Ok(());
        }
        self.answer(decision, None).await
    }

    /// Told to stop: denies the ask on screen (saying so) and ends with the signal's exit code.
    async fn stop(&mut self, stopped: Stopped) -> anyhow::Result<ExitCode> {
        self.answer(Decision::Deny, Some(stopped.reason())).await?;
        self.close().await;
        Ok(ExitCode::from(stopped.exit_code()))
    }

    /// Answers the ask on screen (if any), which then leaves the screen; `why` says what the
    /// answer is put down to when the approver did not choose it.
    async fn answer(&mut self, decision: Decision, why: Option<&str>) -> anyhow::Result<()> {
        let Some(ask) = self.shown.take() else {
            return Ok(());
        };
        let frame = ClientFrame::Answer {
            ask_id: ask.ask_id.clone(),
            decision,
            confirm_cut: ask.confirming == Some(decision),
        };
        send_frame(&mut self.socket, &frame).await?;
        let word = match decision {
            Decision::Once => "once",
            Decision::Always => "always",
            Decision::Deny => "deny",
        };
        match why {
            None => crate::outln!("\nask {}: answered {word}", ask.short_id()),
            Some(why) => crate::outln!("\nask {}: answered {word} ({why})", ask.short_id()),
        }
        Ok(())
    }

    /// Ends the connection politely, not waiting long for the broker.
    async fn close(&mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(1), self.socket.close(None)).await;
    }
}

/// What `approve` says when it starts waiting.
fn waiting_line(mode: Mode) -> &'static str {
    match mode {
        Mode::Keys => {
            "waiting for asks (keys: y allow once, a always allow, n deny, ? details; Ctrl-C denies \
             the ask on screen and stops)"
        }
        Mode::Lines => {
            "waiting for asks (lines: y, a, n or ?; Ctrl-C denies the ask on screen and stops)"
        }
    }
}

/// Prints an ask (only its display form: hidden characters appear as ⟨…⟩ tokens) and the
/// question.
fn show(frame: ServerFrame) -> anyhow::Result<Shown> {
    let ServerFrame::Ask {
        ask_id,
        call_id,
        account,
        connection_id,
        expires_in_ms,
        display,
        warning,
        preview_cut,
        ..
    } = frame
    else {
        anyhow::bail!("not an ask: {frame:?}");
    };
    let mut details = format!(
        "── ask {} ── account {account} ── connection {connection_id} ── call {call_id}",
        short_ask_id(&ask_id)
    );
    if let Some(warning) = &warning {
        details.push_str(&format!("\nWARNING: {warning}"));
    }
    details.push_str(&format!("\ntool: {}", display.tool));
    for s in &display.subjects {
        details.push_str(&format!("\n  {} {}", s.domain, s.path));
    }
    if !display.preview.is_empty() {
        details.push_str(&format!("\n{}", display.preview));
    }
    crate::outln!("\n{details}");
    let now = Instant::now();
    let ask = Shown {
        ask_id,
        at: now,
        deadline: now
            .checked_add(Duration::from_millis(expires_in_ms))
            .unwrap_or(now),
        preview_cut,
        confirming: None,
        details,
    };
    prompt(&ask)?;
    Ok(ask)
}

/// (Re)prints the question for the ask on screen, with the seconds left.
fn prompt(ask: &Shown) -> anyhow::Result<()> {
    let left = ask
        .deadline
        .saturating_duration_since(Instant::now())
        .as_secs()
        + 1;
    let id = ask.short_id();
    match ask.confirming {
        Some(Decision::Always) => {
            print!("\rask {id}, cut preview: [a] always, [n] deny ({left:>2}s left): ")
        }
        Some(_) => print!("\rask {id}, cut preview: [y] once, [n] deny ({left:>2}s left): "),
        None => print!(
            "\rask {id}: allow? [y] once, [a] always, [n] deny, [?] details ({left:>2}s left): "
        ),
    }
    std::io::stdout().flush()?;
    Ok(())
}

/// `GET path` on system mode's approve socket, as the user running this (the broker knows them
/// by their uid): the status and at most `limit` bytes of body.
pub async fn approve_socket_get(
    socket: &Path,
    path: &str,
    limit: u64,
) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut stream = tokio::net::UnixStream::connect(socket).await.map_err(|e| {
            anyhow::anyhow!(
                "cannot reach glovebox's approve socket {} ({e}): is the glovebox service running?",
                socket.display()
            )
        })?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
        let mut raw = Vec::new();
        stream.take(limit).read_to_end(&mut raw).await?;
        parse_reply(&raw)
    };
    tokio::time::timeout(APPROVE_SOCKET_WAIT, ask)
        .await
        .map_err(|_| anyhow::anyhow!("the broker did not answer within {APPROVE_SOCKET_WAIT:?}"))?
}

/// How long a request on the approve socket may take.
const APPROVE_SOCKET_WAIT: Duration = Duration::from_secs(10);

/// The status and body of an HTTP/1.1 answer without chunking.
fn parse_reply(raw: &[u8]) -> anyhow::Result<(u16, String)> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("the broker's answer was cut"))?;
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("the broker's answer has no status"))?;
    anyhow::ensure!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "the broker's answer is chunked"
    );
    Ok((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_printed_on_one_line_with_the_servers_words_escaped() {
        assert_eq!(progress_line(3.0, Some(10.0), None), "progress 3/10");
        assert_eq!(progress_line(0.5, None, None), "progress 0.5");
        assert_eq!(
            progress_line(1.0, Some(2.0), Some("half\n\u{1b}[2Jdone".into())),
            "progress 1/2: half\\n\\u{1b}[2Jdone"
        );
        let long = progress_line(1.0, None, Some("x".repeat(1000)));
        assert_eq!(long.len(), "progress 1: ".len() + 200);
    }

    #[test]
    fn replies_are_read_by_status_and_body() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nabcd\n";
        assert_eq!(parse_reply(ok).unwrap(), (200, "abcd\n".into()));
        let refused = b"HTTP/1.1 403 Forbidden\r\n\r\nuid 5 is not the owner\n";
        assert_eq!(parse_reply(refused).unwrap().0, 403);
        assert!(parse_reply(b"HTTP/1.1 200 OK\r\n").is_err(), "cut");
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n";
        assert!(parse_reply(chunked).is_err());
    }
}
