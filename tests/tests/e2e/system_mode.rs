//! System mode end to end: the real `glovebox up --system` as root, with real users made for each
//! test (`useradd --system`, removed after) and temporary directories for the config, the managed
//! policy, the state and the sockets. Each service runs as its own user with nothing left over;
//! the broker's user cannot read the state; an account's user (and its jobs) cannot reach the
//! gate or another account's executor; each owner approves only its own account's asks; the
//! managed policy is root's alone and beats an account's allow. These tests need root (as CI
//! has); elsewhere they say so and stop.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use glovebox_e2e::interactive::Interactive;
use glovebox_e2e::{Auth, Client, WAIT, attempts, expect_error, expect_ok, glovebox_bin};
use serde_json::json;
use sha2::Digest;

fn is_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    eprintln!("skipped: system mode needs root (it creates users and switches to them)");
    false
}

/// Runs `useradd`/`userdel`/`groupadd`, retrying while another process holds the lock on
/// `/etc/passwd` (tests run in parallel processes). `Ok(false)` when it failed for good.
fn account_tool(program: &str, args: &[&str]) -> (bool, String) {
    let deadline = Instant::now() + WAIT;
    loop {
        let out = Command::new(program).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success() {
            return (true, stderr);
        }
        let locked = stderr.contains("lock") || stderr.contains("try again");
        if !locked || Instant::now() > deadline {
            return (false, stderr);
        }
        std::thread::sleep(Duration::from_millis(
            50 + u64::from(std::process::id() % 50),
        ));
    }
}

/// The service users system mode needs: created if missing, and kept (the package's own).
fn ensure_service_users() {
    for user in ["glovebox-gate", "glovebox-broker"] {
        if nix::unistd::User::from_name(user).unwrap().is_none() {
            let (ok, e) = account_tool(
                "useradd",
                &[
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    user,
                ],
            );
            assert!(ok || e.contains("already exists"), "useradd {user}: {e}");
        }
    }
    if nix::unistd::Group::from_name("glovebox-audit")
        .unwrap()
        .is_none()
    {
        let (ok, e) = account_tool("groupadd", &["--system", "glovebox-audit"]);
        assert!(ok || e.contains("already exists"), "groupadd: {e}");
    }
}

fn user(name: &str) -> (u32, u32) {
    let u = nix::unistd::User::from_name(name)
        .unwrap()
        .unwrap_or_else(|| panic!("no user {name}"));
    (u.uid.as_raw(), u.gid.as_raw())
}

/// A system user made for one test, removed when dropped.
struct TestUser {
    name: String,
    uid: u32,
    gid: u32,
}

impl TestUser {
    fn new(role: &str) -> TestUser {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "gbt{}{}{role}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let (ok, e) = account_tool(
            "useradd",
            &[
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                &name,
            ],
        );
        assert!(ok, "useradd {name}: {e}");
        let (uid, gid) = user(&name);
        TestUser { name, uid, gid }
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let (ok, e) = account_tool("userdel", &[&self.name]);
        if !ok {
            eprintln!("userdel {}: {e}", self.name);
        }
    }
}

/// One account of a system-mode glovebox: its users, workdir and agent token.
struct Account {
    id: String,
    run_as: TestUser,
    owner: TestUser,
    workdir: PathBuf,
    token: String,
}

/// A running `glovebox up --system`. Dropped: stopped, then its users removed.
struct System {
    _dir: tempfile::TempDir,
    root: PathBuf,
    config: PathBuf,
    policy_dir: PathBuf,
    state: PathBuf,
    runtime: PathBuf,
    url: String,
    child: Option<Child>,
    accounts: Vec<Account>,
}

/// What a test sets up before `up --system` starts.
#[derive(Default)]
struct Setup<'a> {
    accounts: &'a [&'a str],
    /// Files of the managed policy directory: (name, text, mode).
    managed: &'a [(&'a str, &'a str, u32)],
    /// Each account's own policy (`permissions.yaml`), written into the state before the start.
    account_policy: Option<&'a str>,
}

impl System {
    fn start(setup: Setup<'_>) -> System {
        ensure_service_users();
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        // The services read the config and the managed policy, and reach the workdirs, through it.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let etc = root.join("etc");
        let policy_dir = etc.join("policy.d");
        std::fs::create_dir_all(&policy_dir).unwrap();
        for (name, text, mode) in setup.managed {
            let path = policy_dir.join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode)).unwrap();
        }
        let state = root.join("state");
        let runtime = root.join("run");
        let mut accounts = Vec::new();
        let mut yaml = String::from("listen: 127.0.0.1:0\naccounts:\n");
        for id in setup.accounts {
            let run_as = TestUser::new("r");
            let owner = TestUser::new("o");
            let workdir = root.join(format!("work-{id}"));
            std::fs::create_dir(&workdir).unwrap();
            std::os::unix::fs::chown(&workdir, Some(run_as.uid), Some(run_as.gid)).unwrap();
            // The gate (another user) reads the project layer, `.glovebox/permissions.yaml`, in
            // it: a workdir it cannot enter fails every call closed (see the README).
            std::fs::set_permissions(&workdir, std::fs::Permissions::from_mode(0o755)).unwrap();
            let token = hex::encode(sha2::Sha256::digest(format!("{id}-{}", run_as.name)));
            let hash = hex::encode(sha2::Sha256::digest(token.as_bytes()));
            yaml.push_str(&format!(
                "  - id: {id}\n    workdir: {}\n    run_as: {}\n    owner: {}\n    enabled: true\n    token_sha256: ['{hash}']\n",
                workdir.display(),
                run_as.name,
                owner.name
            ));
            if let Some(policy) = setup.account_policy {
                let file = state.join("accounts").join(id).join("permissions.yaml");
                std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                std::fs::write(&file, policy).unwrap();
            }
            accounts.push(Account {
                id: (*id).to_owned(),
                run_as,
                owner,
                workdir,
                token,
            });
        }
        let config = etc.join("glovebox.yaml");
        std::fs::write(&config, yaml).unwrap();
        let mut system = System {
            _dir: dir,
            root,
            config,
            policy_dir,
            state,
            runtime,
            url: String::new(),
            child: None,
            accounts,
        };
        let (child, url) = system.spawn_up();
        system.child = Some(child);
        system.url = url;
        system
    }

    fn up_command(&self) -> Command {
        self.system_command("up")
    }

    /// `glovebox COMMAND --system` on this service's config, state, runtime and policy paths.
    fn system_command(&self, command: &str) -> Command {
        let mut c = Command::new(glovebox_bin());
        c.arg(command)
            .arg("--system")
            .arg("--config")
            .arg(&self.config)
            .arg("--state-dir")
            .arg(&self.state)
            .arg("--runtime-dir")
            .arg(&self.runtime)
            .arg("--policy-dir")
            .arg(&self.policy_dir);
        c
    }

    /// `glovebox ARGS --system --runtime-dir RUNTIME [--account ID]`, a command a user runs
    /// against the service, as `user` (root when `None`).
    fn run_as_user(
        &self,
        user: Option<&TestUser>,
        args: &[&str],
        account: Option<&str>,
    ) -> std::process::Output {
        let mut c = Command::new(glovebox_bin());
        c.args(args)
            .args(["--system", "--runtime-dir"])
            .arg(&self.runtime);
        if let Some(a) = account {
            c.args(["--account", a]);
        }
        if let Some(u) = user {
            c.uid(u.uid).gid(u.gid);
        }
        c.env("HOME", "/").stdin(Stdio::null()).output().unwrap()
    }

    /// `glovebox doctor --system` on this service's paths, as root: its report, once it has
    /// checked that no line is a FAIL and it exits 0.
    fn doctor_passes(&self) -> String {
        let doctor = self.system_command("doctor").output().unwrap();
        let report = String::from_utf8_lossy(&doctor.stdout).into_owned();
        let failed: Vec<&str> = report.lines().filter(|l| l.starts_with("FAIL")).collect();
        assert!(failed.is_empty(), "doctor:\n{report}");
        assert!(doctor.status.success(), "doctor:\n{report}");
        assert!(
            report.contains("OK services: health ok"),
            "doctor:\n{report}"
        );
        report
    }

    fn stderr_file(&self) -> PathBuf {
        self.root.join("stderr.log")
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.stderr_file()).unwrap_or_default()
    }

    /// Starts `up --system` and waits for its banner's WebSocket URL.
    fn spawn_up(&self) -> (Child, String) {
        let mut child = self
            .up_command()
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(self.stderr_file()).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.trim().strip_prefix("WebSocket: ") {
                    let _ = tx.send(url.to_owned());
                }
            }
        });
        match rx.recv_timeout(WAIT) {
            Ok(url) => (child, url),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("glovebox up --system did not start:\n{}", self.stderr());
            }
        }
    }

    fn account(&self, id: &str) -> &Account {
        self.accounts.iter().find(|a| a.id == id).unwrap()
    }

    async fn agent(&self, id: &str) -> Client {
        Client::connect(&self.url, Auth::Header(&self.account(id).token), "agent").await
    }

    /// The pid of the child of `up` serving `service` (`gate`, `broker`, `executor`,
    /// `pack-host`) for `account` (the services of an account name it after `--account`).
    fn pid_of(&self, service: &str, account: Option<&str>) -> i32 {
        let up = self.child.as_ref().unwrap().id() as i32;
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            let ppid: i32 = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            if ppid != up {
                continue;
            }
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let account_matches = match account {
                None => true,
                Some(a) => args.windows(2).any(|w| w[0] == "--account" && w[1] == a),
            };
            if args.get(1).map(String::as_str) == Some(service) && account_matches {
                return pid;
            }
        }
        panic!("no {service} process of {account:?} under up (pid {up})");
    }

    /// Runs the attack binary as `uid`/`gid` (no supplementary groups) with `args`.
    fn attack_as(&self, uid: u32, gid: u32, args: &[&str]) -> Vec<glovebox_e2e::Attempt> {
        let out = Command::new(glovebox_e2e::sibling_bin("glovebox-attack"))
            .args(args)
            .uid(uid)
            .gid(gid)
            .output()
            .unwrap();
        attempts(&String::from_utf8_lossy(&out.stdout))
    }

    fn gate_sockets(&self) -> Vec<String> {
        ["gate/gate.sock", "admin/admin.sock"]
            .iter()
            .map(|s| self.runtime.join(s).display().to_string())
            .collect()
    }

    fn executor_socket(&self, id: &str) -> String {
        self.runtime
            .join(format!("exec-{id}/executor.sock"))
            .display()
            .to_string()
    }

    /// `glovebox approve --system` run by `as_user`.
    fn approve(&self, as_user: &TestUser, account: Option<&str>) -> Interactive {
        let mut command = Command::new(glovebox_bin());
        command
            .args(["approve", "--system", "--runtime-dir"])
            .arg(&self.runtime);
        if let Some(a) = account {
            command.args(["--account", a]);
        }
        command.uid(as_user.uid).gid(as_user.gid).env("HOME", "/");
        Interactive::start(command)
    }

    async fn audit_reasons(&self) -> Vec<String> {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(self.state.join("audit.db"))
            .read_only(true);
        let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
        sqlx::query_scalar("SELECT COALESCE(reason, '') FROM events ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap()
    }
}

impl System {
    /// Stops `up --system` (SIGTERM, then SIGKILL after [`WAIT`]).
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + WAIT;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops and starts `up --system` again, with the same state.
    fn restart(&mut self) {
        self.stop();
        let (child, url) = self.spawn_up();
        self.child = Some(child);
        self.url = url;
    }
}

impl Drop for System {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!("---- glovebox up --system stderr ----\n{}", self.stderr());
        }
    }
}

/// `/proc/<pid>/status`'s identity lines: (uids, gids, groups, NoNewPrivs, CapEff, CapPrm).
fn identity_of(pid: i32) -> (Vec<u32>, Vec<u32>, Vec<u32>, String, String, String) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> String {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let numbers = |name: &str| -> Vec<u32> {
        field(name)
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect()
    };
    (
        numbers("Uid"),
        numbers("Gid"),
        numbers("Groups"),
        field("NoNewPrivs"),
        field("CapEff"),
        field("CapPrm"),
    )
}

fn mode_of(path: &Path) -> (u32, u32, u32) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    (meta.uid(), meta.gid(), meta.mode() & 0o7777)
}

#[tokio::test]
async fn each_service_runs_as_its_own_user_with_no_privilege_left() {
    if !is_root() {
        return;
    }
    let s = System::start(Setup {
        accounts: &["a"],
        ..Default::default()
    });
    let gate = user("glovebox-gate");
    let broker = user("glovebox-broker");
    let a = s.account("a");
    let expected = [
        ("gate", None, gate),
        ("broker", None, broker),
        ("executor", Some("a"), (a.run_as.uid, a.run_as.gid)),
        ("pack-host", Some("a"), (a.run_as.uid, a.run_as.gid)),
    ];
    for (service, account, (uid, gid)) in expected {
        let pid = s.pid_of(service, account);
        let (uids, gids, groups, nnp, eff, prm) = identity_of(pid);
        assert_eq!(uids, vec![uid; 4], "{service}: Uid");
        assert_eq!(gids, vec![gid; 4], "{service}: Gid");
        assert!(
            groups.iter().all(|g| *g == gid),
            "{service}: Groups {groups:?}"
        );
        assert_eq!(nnp, "1", "{service}: NoNewPrivs");
        assert_eq!(eff, "0000000000000000", "{service}: CapEff");
        assert_eq!(prm, "0000000000000000", "{service}: CapPrm");
    }
    // The files and sockets: the gate owns the state, the audit group reads audit.db only.
    let audit_gid = nix::unistd::Group::from_name("glovebox-audit")
        .unwrap()
        .unwrap()
        .gid
        .as_raw();
    assert_eq!(mode_of(&s.state), (gate.0, audit_gid, 0o2710));
    assert_eq!(
        mode_of(&s.state.join("audit.db")),
        (gate.0, audit_gid, 0o640)
    );
    for key in ["ticket.key", "control.key", "audit.key"] {
        let (uid, _, mode) = mode_of(&s.state.join(key));
        assert_eq!((uid, mode), (gate.0, 0o600), "{key}");
    }
    assert_eq!(mode_of(&s.runtime), (0, 0, 0o755));
    assert_eq!(mode_of(&s.runtime.join("gate")), (gate.0, broker.1, 0o750));
    assert_eq!(mode_of(&s.runtime.join("admin")), (gate.0, 0, 0o700));
    assert_eq!(
        mode_of(&s.runtime.join("exec-a")),
        (a.run_as.uid, broker.1, 0o750)
    );
    assert_eq!(mode_of(&s.runtime.join("broker/approve.sock")).2, 0o666);
    // `glovebox doctor --system` finds this layout in order: nothing fails.
    let report = s.doctor_passes();
    assert!(report.contains("OK accounts: a\n"), "doctor:\n{report}");
    // And they work: the agent calls through the broker, gate and executor.
    std::fs::write(a.workdir.join("hello.txt"), "hi").unwrap();
    let mut agent = s.agent("a").await;
    let r = agent
        .invoke("r1", "file_read", json!({"path": "hello.txt"}))
        .await;
    assert_eq!(expect_ok(&r)["content"], "hi", "{r}");
}

#[tokio::test]
async fn up_system_refuses_what_it_cannot_run_safely() {
    if !is_root() {
        return;
    }
    ensure_service_users();
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let work = root.join("work");
    std::fs::create_dir(&work).unwrap();
    let run = |yaml: &str, mode: u32| -> String {
        let config = root.join("glovebox.yaml");
        std::fs::write(&config, yaml).unwrap();
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = Command::new(glovebox_bin())
            .args(["up", "--system", "--config"])
            .arg(&config)
            .arg("--state-dir")
            .arg(root.join("state"))
            .arg("--runtime-dir")
            .arg(root.join("run"))
            .arg("--policy-dir")
            .arg(root.join("policy.d"))
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let w = work.display();
    let e = run(
        &format!("accounts:\n  - id: a\n    workdir: {w}\n    owner: nobody\n"),
        0o644,
    );
    assert!(e.contains("run_as is required in system mode"), "{e}");
    let e = run(
        &format!("accounts:\n  - id: a\n    workdir: {w}\n    run_as: nobody\n"),
        0o644,
    );
    assert!(e.contains("owner is required in system mode"), "{e}");
    let e = run(
        &format!(
            "accounts:\n  - id: a\n    workdir: {w}\n    run_as: glovebox-gate\n    owner: nobody\n"
        ),
        0o644,
    );
    assert!(e.contains("glovebox's own service users"), "{e}");
    let e = run(
        &format!(
            "accounts:\n  - id: a\n    workdir: {w}\n    run_as: no-such-user-gb\n    owner: nobody\n"
        ),
        0o644,
    );
    assert!(e.contains("does not exist"), "{e}");
    let e = run(
        &format!("accounts:\n  - id: a\n    workdir: {w}\n    run_as: nobody\n    owner: nobody\n"),
        0o644,
    );
    assert!(e.contains("are the same user"), "{e}");
    let e = run(
        &format!("accounts:\n  - id: a\n    workdir: {w}\n    run_as: nobody\n    owner: daemon\n"),
        0o666,
    );
    assert!(e.contains("writable by root alone"), "{e}");
    // A symlink planted in the state directory stops the start.
    let state = root.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", state.join("audit.db")).unwrap();
    let e = run(
        &format!("accounts:\n  - id: a\n    workdir: {w}\n    run_as: nobody\n    owner: daemon\n"),
        0o644,
    );
    assert!(e.contains("is a symlink"), "{e}");
}

#[tokio::test]
async fn the_broker_cannot_read_the_state_and_an_account_user_cannot_reach_the_gate_or_another_executor()
 {
    if !is_root() {
        return;
    }
    let s = System::start(Setup {
        accounts: &["a", "b"],
        ..Default::default()
    });
    let broker = user("glovebox-broker");
    let secrets: Vec<String> = [
        "audit.db",
        "control.key",
        "ticket.key",
        "audit.key",
        "accounts/a/permissions.yaml",
    ]
    .iter()
    .map(|f| s.state.join(f).display().to_string())
    .collect();
    let mut args = vec!["read"];
    args.extend(secrets.iter().map(String::as_str));
    let tried = s.attack_as(broker.0, broker.1, &args);
    assert_eq!(tried.len(), secrets.len());
    for t in &tried {
        assert!(!t.succeeded, "the broker's user read {}: {t:?}", t.target);
    }
    // Account a's user: not the gate's sockets, not b's executor (the kernel refuses the connect).
    let a = s.account("a");
    let mut targets = s.gate_sockets();
    targets.push(s.executor_socket("b"));
    let mut args = vec!["connect"];
    args.extend(targets.iter().map(String::as_str));
    let tried = s.attack_as(a.run_as.uid, a.run_as.gid, &args);
    assert_eq!(tried.len(), targets.len());
    for t in &tried {
        assert!(!t.succeeded, "a's user connected to {}: {t:?}", t.target);
        assert!(t.detail.contains("ermission denied"), "{t:?}");
    }
    // Nor may it read the state.
    let mut args = vec!["read"];
    args.extend(secrets.iter().map(String::as_str));
    for t in s.attack_as(a.run_as.uid, a.run_as.gid, &args) {
        assert!(!t.succeeded, "a's user read {}: {t:?}", t.target);
    }
}

#[tokio::test]
async fn each_owner_approves_only_its_own_account_and_a_job_cannot_reach_the_control_plane() {
    if !is_root() {
        return;
    }
    let s = System::start(Setup {
        accounts: &["a", "b"],
        ..Default::default()
    });
    let (a, b) = (s.account("a"), s.account("b"));
    // b's owner asking to approve a's account is refused, and the refusal audited with its uid.
    let mut intruder = s.approve(&b.owner, Some("a"));
    intruder.expect("refused this user as an approver");
    assert_ne!(intruder.exit_code(), Some(0));
    let reasons = s.audit_reasons().await;
    let wanted = format!("peer uid {}", b.owner.uid);
    assert!(
        reasons
            .iter()
            .any(|r| r.contains(&wanted) && r.contains("not the owner of account \"a\"")),
        "{reasons:?}"
    );
    // root owns no account either (its stdin stays open: refused for that, not for a closed
    // stdin).
    let mut command = Command::new(glovebox_bin());
    command
        .args(["approve", "--system", "--runtime-dir"])
        .arg(&s.runtime);
    let mut root = Interactive::start(command);
    root.expect("root owns no account");
    assert_eq!(root.exit_code(), Some(2));
    // Each owner's approve is its own account's approver.
    let mut approver_a = s.approve(&a.owner, None);
    approver_a.expect("approving for account a");
    let mut approver_b = s.approve(&b.owner, None);
    approver_b.expect("approving for account b");
    // A job of a: plant the attack binary in a's workdir (a's user may run what is there).
    let attack = glovebox_e2e::plant_attack_binary(&a.workdir);
    std::os::unix::fs::chown(&attack, Some(a.run_as.uid), Some(a.run_as.gid)).unwrap();
    let mut targets = s.gate_sockets();
    targets.push(s.executor_socket("b"));
    targets.push(s.runtime.join("exec-b/packs.sock").display().to_string());
    // ...and the gate's files: its own tokens, the switches and accounts it keeps.
    let state_files: Vec<String> = [
        "accounts/a/token",
        "accounts/a/approver.token",
        "switches.yaml",
        "accounts.yaml",
        "control.key",
    ]
    .iter()
    .map(|f| s.state.join(f).display().to_string())
    .collect();
    let command = format!(
        "./glovebox-attack connect {}; ./glovebox-attack read {files}; ./glovebox-attack write {files}",
        targets.join(" "),
        files = state_files.join(" ")
    );
    let mut agent = s.agent("a").await;
    agent
        .send(
            json!({"type": "invoke", "call_id": "job-one", "tool": "exec_run",
                     "params": {"command": command}}),
        )
        .await;
    if approver_a
        .wait_for("call job-one", Duration::from_secs(15))
        .is_none()
    {
        let r = agent.result_for("job-one").await;
        panic!("a's owner was not asked; the call ended: {r}");
    }
    // b's owner is never shown a's ask.
    assert!(
        approver_b
            .wait_for("job-one", Duration::from_millis(500))
            .is_none(),
        "b's owner saw a's ask"
    );
    // an answer counts once the ask has been on screen for a second
    std::thread::sleep(Duration::from_millis(1000));
    approver_a.type_line("y");
    let started = agent.result_for("job-one").await;
    let job = expect_ok(&started)["job_id"].as_str().unwrap().to_owned();
    let status = agent.wait_job(&job).await;
    assert_eq!(status["state"], "exited", "{status}");
    let tail = expect_ok(
        &agent
            .invoke("tail", "exec_tail", json!({"job_id": job, "since": 0}))
            .await,
    );
    let tried = attempts(tail["stdout"]["text"].as_str().unwrap());
    assert_eq!(
        tried.len(),
        targets.len() + 2 * state_files.len(),
        "{tried:?}"
    );
    for t in &tried {
        assert!(!t.succeeded, "a job of a reached {}: {t:?}", t.target);
    }
    assert!(!s.state.join("switches.yaml").exists(), "nothing planted");
    // b's own ask goes to b's owner.
    let mut agent_b = s.agent("b").await;
    agent_b
        .send(
            json!({"type": "invoke", "call_id": "job-two", "tool": "exec_run",
                     "params": {"command": "true"}}),
        )
        .await;
    approver_b.expect("call job-two");
    std::thread::sleep(Duration::from_millis(1500));
    approver_b.type_line("n");
    let r = agent_b.result_for("job-two").await;
    expect_error(&r, "denied");
}

const ALLOW_READS: &str = "paths:\n  read:\n    allow: ['./**']\n";

/// `glovebox.yaml` is root's in system mode: a run-time switch of one of its accounts goes to
/// the gate's own state, holds across a restart, and yields to a later edit of the file.
#[tokio::test]
async fn a_config_accounts_tools_switch_at_run_time_without_touching_roots_file() {
    if !is_root() {
        return;
    }
    let mut s = System::start(Setup {
        accounts: &["a"],
        account_policy: Some(ALLOW_READS),
        ..Default::default()
    });
    std::fs::write(s.account("a").workdir.join("f.txt"), "f").unwrap();
    let config = std::fs::read(&s.config).unwrap();
    let switch = |s: &System, verb: &str| {
        let out = accounts::as_root(s, &[verb, "--account", "a"]);
        assert!(
            out.status.success(),
            "{verb}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let read = |s: &System| {
        let s_url = s.url.clone();
        let token = s.account("a").token.clone();
        async move {
            let mut agent = Client::connect(&s_url, Auth::Header(&token), "agent").await;
            agent
                .invoke("r", "file_read", json!({"path": "f.txt"}))
                .await
        }
    };
    expect_ok(&read(&s).await);
    switch(&s, "disable");
    let off = read(&s).await;
    assert_eq!(expect_error(&off, "denied")["rule"], "enablement", "{off}");
    assert_eq!(
        std::fs::read(&s.config).unwrap(),
        config,
        "root's file untouched"
    );
    let switches = s.state.join("switches.yaml");
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&switches).unwrap();
    assert_eq!(
        (meta.uid(), meta.mode() & 0o777),
        (user("glovebox-gate").0, 0o600),
        "the gate's own file"
    );
    // Still off after a restart.
    s.restart();
    let off = read(&s).await;
    assert_eq!(expect_error(&off, "denied")["rule"], "enablement", "{off}");
    switch(&s, "enable");
    expect_ok(&read(&s).await);
    // Off again; then root edits the file's `enabled` to false and back to true while glovebox
    // runs: the edit is the later change, and the account is on.
    switch(&s, "disable");
    let text = String::from_utf8(config.clone()).unwrap();
    assert!(text.contains("enabled: true"), "{text}");
    std::fs::write(&s.config, text.replace("enabled: true", "enabled: false")).unwrap();
    let off = read(&s).await;
    assert_eq!(expect_error(&off, "denied")["rule"], "enablement", "{off}");
    std::fs::write(&s.config, &text).unwrap();
    expect_ok(&read(&s).await);
}

#[tokio::test]
async fn a_managed_deny_beats_an_account_allow() {
    if !is_root() {
        return;
    }
    // The managed file names the workdir, known only once the system is set up: deny by name.
    let managed = "paths:\n  read:\n    deny: ['/**/managed-secret.txt']\n";
    let s = System::start(Setup {
        accounts: &["a"],
        managed: &[("corp.yaml", managed, 0o644)],
        account_policy: Some(ALLOW_READS),
    });
    let a = s.account("a");
    std::fs::write(a.workdir.join("managed-secret.txt"), "s").unwrap();
    std::fs::write(a.workdir.join("fine.txt"), "f").unwrap();
    let mut agent = s.agent("a").await;
    expect_ok(
        &agent
            .invoke("ok", "file_read", json!({"path": "fine.txt"}))
            .await,
    );
    let r = agent
        .invoke("no", "file_read", json!({"path": "managed-secret.txt"}))
        .await;
    let e = expect_error(&r, "denied");
    assert!(
        e["deny_reason"]
            .as_str()
            .unwrap_or_default()
            .contains("managed"),
        "{e}"
    );
}

#[tokio::test]
async fn a_managed_policy_file_others_may_write_fails_the_managed_layer_closed() {
    if !is_root() {
        return;
    }
    let s = System::start(Setup {
        accounts: &["a"],
        managed: &[("loose.yaml", "paths:\n  read:\n    deny: []\n", 0o666)],
        account_policy: Some(ALLOW_READS),
    });
    let a = s.account("a");
    std::fs::write(a.workdir.join("fine.txt"), "f").unwrap();
    let mut agent = s.agent("a").await;
    let r = agent
        .invoke("r", "file_read", json!({"path": "fine.txt"}))
        .await;
    let e = expect_error(&r, "denied");
    assert!(
        e.to_string().contains("writable by group or others"),
        "the refusal names why: {e}"
    );
    // Fixed by root: the managed layer is read again (hot reload) and calls go through.
    std::fs::set_permissions(
        s.policy_dir.join("loose.yaml"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let deadline = Instant::now() + WAIT;
    for i in 0.. {
        let r = agent
            .invoke(
                &format!("again-{i}"),
                "file_read",
                json!({"path": "fine.txt"}),
            )
            .await;
        if r["ok"] == true {
            break;
        }
        assert!(Instant::now() < deadline, "still refused: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A file owned by another user is refused: it is never read (its rule does not apply), the
    // refusal is reported, and the last policy built from root's files alone stays.
    let other = s.policy_dir.join("theirs.yaml");
    std::fs::write(
        s.root.join("theirs.tmp"),
        "paths:\n  read:\n    deny: ['/**/fine.txt']\n",
    )
    .unwrap();
    std::os::unix::fs::chown(s.root.join("theirs.tmp"), Some(a.owner.uid), None).unwrap();
    std::fs::rename(s.root.join("theirs.tmp"), &other).unwrap();
    let wanted = format!(
        "theirs.yaml: managed policy file is owned by uid {}, not root",
        a.owner.uid
    );
    let deadline = Instant::now() + WAIT;
    while !s.stderr().contains(&wanted) {
        assert!(
            Instant::now() < deadline,
            "no refusal of theirs.yaml:\n{}",
            s.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = agent
        .invoke("after", "file_read", json!({"path": "fine.txt"}))
        .await;
    assert_eq!(
        expect_ok(&r)["content"],
        "f",
        "the foreign file's deny was applied: {r}"
    );
}

/// `glovebox COMMAND --system --runtime-dir <s's> REST` (`args` is COMMAND and REST; the options
/// go before REST, which may end in `--` and a command line) run as `user` (`HOME=/`), `stdin`
/// its input: (exit code, stdout, stderr).
fn glovebox_as(s: &System, user: &TestUser, args: &[&str], stdin: &str) -> (i32, String, String) {
    use std::io::Write;
    let (command, rest) = args.split_first().expect("a command");
    let mut child = Command::new(glovebox_bin())
        .arg(command)
        .args(["--system", "--runtime-dir"])
        .arg(&s.runtime)
        .args(rest)
        .uid(user.uid)
        .gid(user.gid)
        .env("HOME", "/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

mod accounts;
mod console;
mod packs;
mod secrets;
mod starvation;
mod status;
