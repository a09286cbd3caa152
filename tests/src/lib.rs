//! End-to-end test harness: starts the real `glovebox up` (which starts the gate, executors and
//! broker as processes) in a temporary state directory and talks to it over its real sockets.
//!
//! One struct per process tree ([`Glovebox`]): temp dirs, a free port, readiness awaited by
//! reading `up`'s banner (never a bare sleep), SIGTERM on drop, and the processes' stderr printed
//! when a test fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod browser;
pub mod client_tools;
pub mod interactive;
pub mod mcp_clients;
pub mod otlp;
pub mod postgres;
pub mod stats;
pub mod stdio_bridge;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// How long any single wait in a test may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// The `glovebox` binary built alongside these tests (`target/<profile>/glovebox`).
pub fn glovebox_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("GLOVEBOX_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> or target/<profile>/<bin> -> target/<profile>/glovebox
    let mut profile_dir = exe.parent().expect("target profile dir");
    if profile_dir.ends_with("deps") {
        profile_dir = profile_dir.parent().expect("target profile dir");
    }
    let bin = profile_dir.join("glovebox");
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test --workspace` (or nextest), which builds it",
        bin.display()
    );
    bin
}

/// A binary built alongside these tests (`target/<profile>/<name>`).
pub fn sibling_bin(name: &str) -> PathBuf {
    let bin = glovebox_bin().with_file_name(name);
    assert!(bin.exists(), "{} is missing", bin.display());
    bin
}

/// Copies the `glovebox-attack` binary into `dir` (a job may only run what lies in its account's
/// roots or the system's directories) and returns its path.
pub fn plant_attack_binary(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dest = dir.join("glovebox-attack");
    std::fs::copy(sibling_bin("glovebox-attack"), &dest).unwrap();
    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755)).unwrap();
    dest
}

/// Runs the glovebox binary with `args` (stdin empty): its exit code, stdout and stderr.
pub fn run_glovebox(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(glovebox_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One attempt the attack binary reported.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub attack: String,
    pub target: String,
    pub succeeded: bool,
    pub detail: String,
}

/// Parses the attack binary's output; panics unless it ran to its end.
/// Appends an `execute` row of `account` over `channel` (an authenticated audit-socket link):
/// whether the gate serves that credential now.
pub async fn append_probe(
    channel: &glovebox_proto::transport::Link,
    account: &str,
) -> Result<(), tonic::Status> {
    use glovebox_proto::v1::{AuditEvent, audit_client::AuditClient};
    AuditClient::new(channel.clone())
        .append(AuditEvent {
            account: account.into(),
            call_id: "probe".into(),
            kind: "execute".into(),
            outcome: "ok".into(),
            ..Default::default()
        })
        .await
        .map(|_| ())
}

pub fn attempts(stdout: &str) -> Vec<Attempt> {
    let mut out = Vec::new();
    let mut done = false;
    for line in stdout.lines() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("attack output line {line:?}: {e}"));
        if v["done"] == true {
            done = true;
            continue;
        }
        out.push(Attempt {
            attack: v["attack"].as_str().unwrap().to_owned(),
            target: v["target"].as_str().unwrap().to_owned(),
            succeeded: v["outcome"] == "succeeded",
            detail: v["detail"].as_str().unwrap_or_default().to_owned(),
        });
    }
    assert!(done, "the attack binary did not run to its end:\n{stdout}");
    out
}

/// A running `glovebox up` in its own temporary state directory.
pub struct Glovebox {
    pub dir: tempfile::TempDir,
    pub state: PathBuf,
    pub workdir: PathBuf,
    pub url: String,
    pub account: String,
    pub token: String,
    child: Option<Child>,
    stderr_file: PathBuf,
}

/// Options for starting glovebox.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `glovebox up --ask-timeout-secs`; without it, glovebox.yaml's `limits.ask_timeout_secs`
    /// or the default (25 s).
    pub ask_timeout_secs: Option<u64>,
    /// Extra environment variables for `glovebox up` (and so for its services).
    pub env: Vec<(String, String)>,
    /// Run the account's executor as this OS user (the state is written before `up` starts, and
    /// the workdir is given to that user).
    pub run_as: Option<String>,
    /// Several accounts (id, enabled), each with its own workdir `work-<id>` and token; the first
    /// is the harness's default account.
    pub accounts: Vec<(String, bool)>,
    /// `job_env` of those accounts (variable names jobs inherit).
    pub job_env: Vec<String>,
    /// `pack_env` of those accounts (variables their own `mcp.json` may read as `${env:NAME}`).
    pub pack_env: Vec<String>,
    /// The `sandbox:` section of those accounts (YAML lines under it, e.g. `network: none`).
    pub sandbox: Vec<String>,
    /// Directories (relative to the temporary root, created) added to every account's roots
    /// besides its workdir; with none of the above, one account `test` is written.
    pub extra_roots: Vec<String>,
    /// Start `up` (and so every service) under `prlimit --nofile=N:N`.
    pub open_files_limit: Option<u64>,
    /// Written as the `limits:` section of `glovebox.yaml` (YAML lines under it, indented by two
    /// spaces); with it, accounts are written as for `accounts` (one account `test` if none).
    pub limits: Vec<String>,
    /// Written as the `client_tools:` section of `glovebox.yaml`, like `limits`.
    pub client_tools: Vec<String>,
    /// The first account's own `mcp.json` (its tool packs), written before `up` starts.
    pub mcp_json: Option<String>,
    /// Written as the `audit:` section of `glovebox.yaml`, like `limits`.
    pub audit: Vec<String>,
}

impl Glovebox {
    pub fn start() -> Glovebox {
        Glovebox::start_with(Options::default())
    }

    /// Glovebox with one account whose roots are its workdir and these directories (relative to
    /// the temporary root, created): paths there are judged by the policy, paths outside every
    /// root are denied by the gate.
    pub fn with_extra_roots(roots: &[&str]) -> Glovebox {
        Glovebox::start_with(Options {
            extra_roots: roots.iter().map(|r| (*r).to_owned()).collect(),
            ..Default::default()
        })
    }

    pub fn start_with(options: Options) -> Glovebox {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let state = root.join("state");
        let workdir = root.join("work");
        std::fs::create_dir_all(&workdir).unwrap();
        let stderr_file = root.join("stderr.log");
        // With run_as, one account `test` runs as that user; with accounts, those accounts.
        let accounts = match &options.run_as {
            Some(_) => vec![("test".to_owned(), true)],
            None if options.accounts.is_empty()
                && (!options.extra_roots.is_empty()
                    || !options.sandbox.is_empty()
                    || !options.limits.is_empty()
                    || !options.client_tools.is_empty()
                    || !options.audit.is_empty()) =>
            {
                vec![("test".to_owned(), true)]
            }
            None => options.accounts.clone(),
        };
        if !accounts.is_empty() {
            write_accounts(&state, &root, &accounts, &options);
        }
        let (child, url) = spawn_up(&state, &workdir, &stderr_file, &options);
        let config = std::fs::read_to_string(state.join("glovebox.yaml")).unwrap();
        let workdir = match accounts.first() {
            Some((id, _)) => root.join(format!("work-{id}")),
            None => workdir,
        };
        let account = config
            .lines()
            .find_map(|l| {
                let l = l.trim();
                l.strip_prefix("- id: ").or_else(|| l.strip_prefix("id: "))
            })
            .expect("account id in glovebox.yaml")
            .trim_matches('\'')
            .trim_matches('"')
            .to_owned();
        let token = std::fs::read_to_string(state.join("accounts").join(&account).join("token"))
            .unwrap()
            .trim()
            .to_owned();
        Glovebox {
            dir,
            state,
            workdir,
            url,
            account,
            token,
            child: Some(child),
            stderr_file,
        }
    }

    /// The root of the temporary directory (holds `state/` and `work/`).
    pub fn root(&self) -> PathBuf {
        self.workdir.parent().unwrap().to_owned()
    }

    /// The account's trash: `up` runs with `HOME` set to `<root>/home`.
    pub fn trash_dir(&self) -> PathBuf {
        self.root().join("home/.local/share/Trash")
    }

    pub fn audit_db(&self) -> PathBuf {
        self.state.join("audit.db")
    }

    pub fn permissions_file(&self) -> PathBuf {
        self.state
            .join("accounts")
            .join(&self.account)
            .join("permissions.yaml")
    }

    pub fn executor_socket(&self) -> PathBuf {
        self.state
            .join("run")
            .join(format!("exec-{}", self.account))
            .join("executor.sock")
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_file).unwrap_or_default()
    }

    /// Runs `glovebox ARGS...` against this state dir and returns (exit code, stdout, stderr).
    pub fn run_cli(&self, args: &[&str]) -> (i32, String, String) {
        let state = self.state.display().to_string();
        let mut all = args.to_vec();
        all.extend(["--state-dir", &state]);
        run_glovebox(&all)
    }

    /// Pids of this instance's child services whose command line contains `service`.
    pub fn service_pids(&self, service: &str) -> Vec<i32> {
        self.pids_where(|args| args.get(1).map(String::as_str) == Some(service))
    }

    /// Pids of this instance's processes (a command line naming its state directory) whose
    /// arguments satisfy `wanted`.
    pub fn pids_where(&self, wanted: impl Fn(&[String]) -> bool) -> Vec<i32> {
        let state = self.state.to_string_lossy().into_owned();
        self.pids_near(&state, wanted)
    }

    /// Pids of processes with an argument under `prefix` (this instance's state or temporary
    /// root) whose arguments satisfy `wanted`.
    pub fn pids_near(&self, prefix: &str, wanted: impl Fn(&[String]) -> bool) -> Vec<i32> {
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            if wanted(&args) && args.iter().any(|a| a.starts_with(prefix)) {
                pids.push(pid);
            }
        }
        pids
    }

    /// Sends SIGKILL to the one running `service` child and returns its pid.
    pub fn kill_service(&self, service: &str) -> i32 {
        let pids = self.service_pids(service);
        assert_eq!(
            pids.len(),
            1,
            "expected one {service} process, found {pids:?}"
        );
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pids[0]),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        pids[0]
    }

    /// Waits until a `service` child with a pid other than `old` runs and `probe` succeeds.
    pub async fn await_restart(&self, service: &str, old: i32) -> i32 {
        let deadline = Instant::now() + WAIT;
        loop {
            let pids = self.service_pids(service);
            if let [pid] = pids.as_slice()
                && *pid != old
                && self.socket_ready(service)
            {
                return *pid;
            }
            assert!(
                Instant::now() < deadline,
                "{service} was not restarted; stderr:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn socket_ready(&self, service: &str) -> bool {
        let socket = match service {
            "gate" => self.state.join("run/gate.sock"),
            "executor" => self.executor_socket(),
            "broker" => {
                let addr = self
                    .url
                    .trim_start_matches("ws://")
                    .trim_end_matches("/v1/ws");
                return std::net::TcpStream::connect(addr).is_ok();
            }
            _ => return true,
        };
        std::os::unix::net::UnixStream::connect(socket).is_ok()
    }

    /// The control keys of this instance's state directory (what the supervisor derives every
    /// socket key from; tests use it to talk to the services as the broker or an administrator).
    pub fn control_keys(&self) -> glovebox_proto::transport::handover::ControlKeys {
        glovebox_proto::transport::handover::ControlKeys::from_bytes(
            &std::fs::read(self.state.join("control.key")).unwrap(),
        )
        .unwrap()
    }

    /// A channel to `socket` (`run/<file>`) proving the key of `peer` on `socket_name`.
    pub fn channel_as(
        &self,
        file: &str,
        socket_name: &str,
        peer: &str,
    ) -> glovebox_proto::transport::Link {
        glovebox_proto::transport::authenticated_channel(
            &self.state.join("run").join(file),
            peer,
            self.control_keys().key(socket_name, peer),
        )
    }

    /// The gate's main socket, as the broker.
    pub fn gate_channel(&self) -> glovebox_proto::transport::Link {
        use glovebox_proto::transport::handover::{peer, socket};
        self.channel_as("gate.sock", socket::GATE, peer::BROKER)
    }

    /// The gate's verdict on `request`, asked as the broker asks it: a message on the gate's
    /// `Decisions` stream (one opened for it), with the broker's client of that stream.
    pub async fn decide_as_broker(
        &self,
        request: glovebox_proto::v1::DecideRequest,
    ) -> Result<glovebox_proto::v1::DecideResponse, tonic::Status> {
        use glovebox_proto::transport::messages::{Decisions, MessageClient};
        MessageClient::<Decisions>::new(self.gate_channel())
            .decide(request)
            .await
    }

    /// The gate's admin socket, as an administrator.
    pub fn admin_channel(&self) -> glovebox_proto::transport::Link {
        use glovebox_proto::transport::handover::{peer, socket};
        self.channel_as("admin.sock", socket::ADMIN, peer::ADMIN)
    }

    /// An account's executor socket, as the broker.
    pub fn executor_channel(&self, account: &str) -> glovebox_proto::transport::Link {
        use glovebox_proto::transport::handover::{peer, socket};
        self.channel_as(
            &format!("exec-{account}/executor.sock"),
            &socket::executor(account),
            peer::BROKER,
        )
    }

    /// Sets secret `name` of `account` to `value` with `glovebox secret set` (the value on its
    /// stdin, as a person would type it), asserting that it succeeded.
    pub fn set_secret(&self, account: &str, name: &str, value: &str) {
        use std::io::Write;
        let mut set = Command::new(glovebox_bin())
            .args(["secret", "set", "--account", account, name, "--state-dir"])
            .arg(&self.state)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        set.stdin
            .take()
            .unwrap()
            .write_all(value.as_bytes())
            .unwrap();
        let out = set.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "glovebox secret set: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The agent token of one of several accounts.
    pub fn token_of(&self, account: &str) -> String {
        self.credential_of(account, "agent")
    }

    /// The token of `account` for `role` (`agent` or `approver`).
    pub fn credential_of(&self, account: &str, role: &str) -> String {
        let file = match role {
            "approver" => "approver.token",
            _ => "token",
        };
        std::fs::read_to_string(self.state.join("accounts").join(account).join(file))
            .unwrap()
            .trim()
            .to_owned()
    }

    /// Connects a WebSocket client as one of several accounts, with the credential of `role`.
    pub async fn connect_as(&self, account: &str, role: &str) -> Client {
        Client::connect(
            &self.url,
            Auth::Header(&self.credential_of(account, role)),
            role,
        )
        .await
    }

    /// Connects a WebSocket client as this instance's account, with the credential of `role`.
    pub async fn connect(&self, role: &str) -> Client {
        self.connect_as(&self.account, role).await
    }

    /// Queries the audit store with a fresh read-only connection.
    pub async fn audit_pool(&self) -> sqlx::SqlitePool {
        let url = format!("sqlite://{}?mode=ro", self.audit_db().display());
        sqlx::SqlitePool::connect(&url).await.unwrap()
    }

    /// Makes every write to the audit fail, as a full disk would, until [`FullAudit::lift`]: a
    /// trigger that aborts each insert.
    pub async fn fail_audit_writes(&self) -> FullAudit {
        let rw = sqlx::SqlitePool::connect(&format!("sqlite://{}", self.audit_db().display()))
            .await
            .unwrap();
        sqlx::query(
            "CREATE TRIGGER full_disk BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'disk full'); END",
        )
        .execute(&rw)
        .await
        .unwrap();
        FullAudit(rw)
    }

    /// Appends `n` broker `result` rows (call ids `bulk-<i>`) over the gate socket, 64 in
    /// flight, as the broker writes them; returns once all are committed.
    pub async fn append_rows(&self, n: usize) {
        use glovebox_proto::v1::{AuditEvent, audit_client::AuditClient};
        let audit = AuditClient::new(self.gate_channel());
        let mut tasks = Vec::new();
        for w in 0..64.min(n) {
            let mut audit = audit.clone();
            let account = self.account.clone();
            tasks.push(tokio::spawn(async move {
                for i in (w..n).step_by(64) {
                    audit
                        .append(AuditEvent {
                            call_id: format!("bulk-{i}"),
                            account: account.clone(),
                            source: "broker".into(),
                            kind: "result".into(),
                            tool: "file_read".into(),
                            outcome: "ok".into(),
                            duration_ms: (i % 50) as u64,
                            ..Default::default()
                        })
                        .await
                        .unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    }

    /// The pid of `glovebox up` itself (the supervisor).
    pub fn up_pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    /// Kills `up` itself with SIGKILL (no chance to stop its children) and reaps it.
    pub fn kill_up(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops `up` with SIGTERM and waits for it; returns its exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Glovebox {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!("---- glovebox stderr ----\n{}", self.stderr());
        }
    }
}

/// Writes a state directory with several accounts, each with its workdir `work-<id>`, token and
/// default policy. With `run_as`, every account runs as that OS user and its workdir is handed to
/// that user.
fn write_accounts(state: &Path, root: &Path, accounts: &[(String, bool)], options: &Options) {
    use std::os::unix::fs::PermissionsExt;
    let (job_env, run_as) = (&options.job_env, options.run_as.as_deref());
    let mut yaml = String::from("accounts:\n");
    for (id, enabled) in accounts {
        let workdir = root.join(format!("work-{id}"));
        std::fs::create_dir_all(&workdir).unwrap();
        if !options.extra_roots.is_empty() {
            let mut roots = vec![workdir.display().to_string()];
            for extra in &options.extra_roots {
                let dir = root.join(extra);
                std::fs::create_dir_all(&dir).unwrap();
                roots.push(dir.display().to_string());
            }
            yaml.push_str(&format!("  - roots: [{}]\n    ", roots.join(", ")));
        } else {
            yaml.push_str("  - ");
        }
        let token = format!("token-of-{id}-{}", root.display()).replace('/', "-");
        let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()));
        yaml.push_str(&format!(
            "id: {id}\n    workdir: {}\n    enabled: {enabled}\n    token_sha256: [{hash}]\n",
            workdir.display()
        ));
        if !options.pack_env.is_empty() {
            yaml.push_str(&format!(
                "    pack_env: [{}]\n",
                options.pack_env.join(", ")
            ));
        }
        if !job_env.is_empty() {
            yaml.push_str(&format!("    job_env: [{}]\n", job_env.join(", ")));
        }
        if !options.sandbox.is_empty() {
            yaml.push_str("    sandbox:\n");
            for line in &options.sandbox {
                yaml.push_str(&format!("      {line}\n"));
            }
        }
        if let Some(user) = run_as {
            yaml.push_str(&format!("    run_as: {user}\n"));
            let pw = nix::unistd::User::from_name(user)
                .unwrap()
                .expect("run_as user exists");
            nix::unistd::chown(&workdir, Some(pw.uid), Some(pw.gid)).unwrap();
        }
        let dir = state.join("accounts").join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), &token).unwrap();
        std::fs::write(
            dir.join("permissions.yaml"),
            "paths:\n  read:\n    allow: ['./**']\n",
        )
        .unwrap();
    }
    for (section, lines) in [
        ("limits", &options.limits),
        ("client_tools", &options.client_tools),
        ("audit", &options.audit),
    ] {
        if !lines.is_empty() {
            yaml.push_str(&format!("{section}:\n"));
            for line in lines {
                yaml.push_str(&format!("  {line}\n"));
            }
        }
    }
    std::fs::write(state.join("glovebox.yaml"), yaml).unwrap();
    if let (Some(text), Some((id, _))) = (&options.mcp_json, accounts.first()) {
        std::fs::write(state.join("accounts").join(id).join("mcp.json"), text).unwrap();
    }
    if run_as.is_some() {
        // The temporary root must be traversable for that user to reach the workdirs.
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711)).unwrap();
    }
}

fn spawn_up(
    state: &Path,
    workdir: &Path,
    stderr_file: &Path,
    options: &Options,
) -> (Child, String) {
    let stderr = std::fs::File::create(stderr_file).unwrap();
    let mut command = match options.open_files_limit {
        Some(n) => {
            let mut c = Command::new("prlimit");
            c.arg(format!("--nofile={n}:{n}"))
                .arg("--")
                .arg(glovebox_bin());
            c
        }
        None => Command::new(glovebox_bin()),
    };
    command.args(["up", "--listen", "127.0.0.1:0"]);
    if let Some(secs) = options.ask_timeout_secs {
        command.arg("--ask-timeout-secs").arg(secs.to_string());
    }
    let mut child = command
        .arg("--state-dir")
        .arg(state)
        .arg("--workdir")
        .arg(workdir)
        .env("GLOVEBOX_LOG", "info")
        .envs(options.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        // The services' own home (the trash lives there), never the real user's.
        .env("HOME", workdir.parent().unwrap().join("home"))
        .env_remove("XDG_DATA_HOME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            if let Some(url) = line.trim().strip_prefix("WebSocket: ") {
                let _ = tx.send(url.to_owned());
            }
            line.clear();
        }
        // keep draining until exit
        let _ = reader.read_to_end(&mut Vec::new());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(url) => (child, url),
        Err(_) => {
            let _ = child.kill();
            panic!(
                "glovebox up did not become ready; stderr:\n{}",
                std::fs::read_to_string(stderr_file).unwrap_or_default()
            );
        }
    }
}

/// How a client authenticates.
pub enum Auth<'a> {
    Header(&'a str),
    Subprotocol(&'a str),
    None,
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket client of `/v1/ws`.
pub struct Client {
    pub socket: Socket,
    pub hello_ok: Value,
}

/// Opens a WebSocket without sending hello; returns the HTTP error status if the upgrade fails.
pub async fn open(
    url: &str,
    auth: Auth<'_>,
) -> Result<
    (
        Socket,
        tokio_tungstenite::tungstenite::handshake::client::Response,
    ),
    u16,
> {
    let mut request = url.into_client_request().unwrap();
    match auth {
        Auth::Header(t) => {
            request
                .headers_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        Auth::Subprotocol(t) => {
            request.headers_mut().insert(
                "sec-websocket-protocol",
                format!("glovebox.v1, bearer.{t}").parse().unwrap(),
            );
        }
        Auth::None => {}
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok(pair) => Ok(pair),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(response.status().as_u16())
        }
        Err(e) => panic!("connect: {e}"),
    }
}

impl Client {
    pub async fn connect(url: &str, auth: Auth<'_>, role: &str) -> Client {
        let (socket, _) = open(url, auth).await.expect("websocket upgrade");
        let mut client = Client {
            socket,
            hello_ok: Value::Null,
        };
        client.send(json!({"type": "hello", "role": role})).await;
        let hello_ok = client.next().await;
        assert_eq!(hello_ok["type"], "hello_ok", "{hello_ok}");
        client.hello_ok = hello_ok;
        client
    }

    pub async fn send(&mut self, frame: Value) {
        self.socket
            .send(Message::Text(frame.to_string().into()))
            .await
            .unwrap();
    }

    pub async fn send_text(&mut self, text: &str) {
        self.socket
            .send(Message::Text(text.to_owned().into()))
            .await
            .unwrap();
    }

    /// The next JSON frame other than an activity event; panics on close or after `WAIT`.
    pub async fn next(&mut self) -> Value {
        loop {
            let frame = self.next_any().await;
            if frame["type"] != "activity" {
                return frame;
            }
        }
    }

    /// The next JSON frame, activity events included.
    pub async fn next_any(&mut self) -> Value {
        match self.next_message().await {
            Message::Text(t) => serde_json::from_str(t.as_str()).unwrap(),
            other => panic!("expected a text frame, got {other:?}"),
        }
    }

    /// The next message of any kind (pings skipped), within `WAIT` however many pings come.
    pub async fn next_message(&mut self) -> Message {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let msg = tokio::time::timeout_at(deadline, self.socket.next())
                .await
                .expect("timed out waiting for a frame")
                .expect("connection ended")
                .expect("websocket error");
            if !matches!(msg, Message::Ping(_) | Message::Pong(_)) {
                return msg;
            }
        }
    }

    /// Sends an invoke and waits for its result frame (other frames are returned to no one).
    pub async fn invoke(&mut self, call_id: &str, tool: &str, params: Value) -> Value {
        self.send(json!({"type": "invoke", "call_id": call_id, "tool": tool, "params": params}))
            .await;
        self.result_for(call_id).await
    }

    pub async fn result_for(&mut self, call_id: &str) -> Value {
        loop {
            let frame = self.next().await;
            if frame["type"] == "result" && frame["call_id"] == call_id {
                return frame;
            }
        }
    }

    /// Waits for the next ask frame.
    pub async fn next_ask(&mut self) -> Value {
        loop {
            let frame = self.next().await;
            if frame["type"] == "ask" {
                return frame;
            }
        }
    }

    /// Invokes a tool that asks, has `approver` give `answer`, and returns (the ask, the result).
    pub async fn invoke_asked(
        &mut self,
        approver: &mut Client,
        call_id: &str,
        tool: &str,
        params: Value,
        answer: &str,
    ) -> (Value, Value) {
        self.send(json!({"type": "invoke", "call_id": call_id, "tool": tool, "params": params}))
            .await;
        let ask = approver.next_ask().await;
        assert_eq!(ask["call_id"], call_id, "{ask}");
        approver.answer(&ask, answer).await;
        (ask, self.result_for(call_id).await)
    }

    /// Polls `exec_status` until the job is no longer running; returns its last status.
    pub async fn wait_job(&mut self, job_id: &str) -> Value {
        let deadline = Instant::now() + WAIT;
        for i in 0.. {
            let call_id = format!("status-{job_id}-{i}");
            let status = expect_ok(
                &self
                    .invoke(&call_id, "exec_status", json!({ "job_id": job_id }))
                    .await,
            );
            if status["state"] != "running" {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "job {job_id} did not finish: {status}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        unreachable!()
    }

    /// Asserts that the job `job_id` still runs (`what` ran throughout what was tested) and kills
    /// it.
    pub async fn kill_running_job(&mut self, job_id: &str, what: &str) {
        let status = expect_ok(
            &self
                .invoke(
                    &format!("status-{job_id}"),
                    "exec_status",
                    json!({ "job_id": job_id }),
                )
                .await,
        );
        assert_eq!(
            status["state"], "running",
            "{what} ran throughout: {status}"
        );
        expect_ok(
            &self
                .invoke(
                    &format!("kill-{job_id}"),
                    "exec_kill",
                    json!({ "job_id": job_id }),
                )
                .await,
        );
    }

    /// Runs `command` as a job (approved once by `approver`), waits for it to end and returns
    /// (its final status, its stdout, its stderr).
    pub async fn run_job(
        &mut self,
        approver: &mut Client,
        command: &str,
    ) -> (Value, String, String) {
        let call_id = format!("job-{}", self.next_id());
        let (_, r) = self
            .invoke_asked(
                approver,
                &call_id,
                "exec_run",
                json!({ "command": command }),
                "once",
            )
            .await;
        let job = expect_ok(&r)["job_id"].as_str().unwrap().to_owned();
        let status = self.wait_job(&job).await;
        let tail = expect_ok(
            &self
                .invoke(
                    &format!("{call_id}-tail"),
                    "exec_tail",
                    json!({ "job_id": job, "since": 0 }),
                )
                .await,
        );
        (
            status,
            tail["stdout"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            tail["stderr"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    }

    fn next_id(&mut self) -> u64 {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    pub async fn answer(&mut self, ask: &Value, decision: &str) {
        self.send(json!({"type": "answer", "ask_id": ask["ask_id"], "decision": decision}))
            .await;
    }
}

/// A plain HTTP/1.1 request to the broker (`Connection: close`; `Host: localhost` unless
/// `headers` name one); returns the status, the headers (names lowercased) and the body read
/// until the server closed or `WAIT` passed.
pub async fn http_request(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url
        .trim_start_matches("ws://")
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request.push_str("Host: localhost\r\n");
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut raw)).await;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

/// Voluntary context switches so far of the thread named `name` of process `pid`: how often it
/// went to sleep, which an idle service should rarely do.
pub fn thread_switches(pid: i32, name: &str) -> u64 {
    let switches = task_switches(pid, |comm| comm == name);
    assert!(!switches.is_empty(), "no thread {name} in process {pid}");
    switches.iter().sum()
}

/// How often every thread of process `pid` together gave up the CPU to wait (its voluntary
/// context switches): each time it slept and was woken.
pub fn process_switches(pid: i32) -> u64 {
    task_switches(pid, |_| true).iter().sum()
}

/// The voluntary context switches of each thread of process `pid` whose name `wanted` takes.
fn task_switches(pid: i32, wanted: impl Fn(&str) -> bool) -> Vec<u64> {
    let mut switches = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !wanted(comm.trim()) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue; // the thread ended meanwhile
        };
        switches.push(
            status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .unwrap()
                .trim()
                .parse()
                .unwrap(),
        );
    }
    switches
}

/// Whether a process exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Polls `check` every 20 ms until it is true; panics with `what` after `WAIT`.
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asserts a result frame failed with `code`, returning its error object.
pub fn expect_error(result: &Value, code: &str) -> Value {
    assert_eq!(result["ok"], false, "{result}");
    assert_eq!(result["error"]["code"], code, "{result}");
    result["error"].clone()
}

/// Asserts a result frame succeeded, returning its result.
pub fn expect_ok(result: &Value) -> Value {
    assert_eq!(result["ok"], true, "{result}");
    result["result"].clone()
}

/// An audit whose writes fail ([`Glovebox::fail_audit_writes`]).
pub struct FullAudit(sqlx::SqlitePool);

impl FullAudit {
    /// Lets writes succeed again.
    pub async fn lift(self) {
        sqlx::query("DROP TRIGGER full_disk")
            .execute(&self.0)
            .await
            .unwrap();
    }
}
