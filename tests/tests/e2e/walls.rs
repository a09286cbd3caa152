//! The walls beyond the file system, tried from inside real approved jobs against real services
//! of the user started by the test: an ssh-agent holding a key, a D-Bus session bus, a tmux
//! server, pathname Unix listeners in /tmp and in /run/user/<uid>, a loopback TCP listener and a
//! UDP "DNS" server. Each attack is first shown to work from outside (the same command, run by
//! the test), then to fail from inside a job; with namespaces (the strong way) and without them
//! (`GLOVEBOX_NAMESPACES=off`: the seccomp wall), with what is in force said by `/healthz`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use glovebox_e2e::{Glovebox, Options, http_request};

/// Real services of the user, each on a socket outside the account's roots.
struct UserServices {
    _dir: tempfile::TempDir,
    run_dir: PathBuf,
    agent: PathBuf,
    bus: PathBuf,
    tmux: PathBuf,
    tmp_listener: PathBuf,
    run_listener: PathBuf,
    children: Vec<Child>,
}

impl Drop for UserServices {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.tmux)
            .arg("kill-server")
            .status();
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

fn sh(command: &str) -> (bool, String) {
    let out = Command::new("/bin/sh")
        .args(["-c", command])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A Unix listener that answers each connection with "hello".
fn listener(path: &Path) -> Child {
    let child = Command::new("python3")
        .args([
            "-c",
            "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\ns.listen()\nwhile True:\n c,_=s.accept(); c.sendall(b'hello'); c.close()",
        ])
        .arg(path)
        .spawn()
        .unwrap();
    wait_for(path);
    child
}

fn wait_for(path: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !path.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn start_user_services() -> UserServices {
    let dir = tempfile::tempdir().unwrap();
    let uid = rustix::process::getuid().as_raw();
    let run_dir = PathBuf::from(format!(
        "/run/user/{uid}/glovebox-walls-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&run_dir).unwrap();
    let mut children = Vec::new();
    // ssh-agent holding a key.
    let agent = dir.path().join("agent.sock");
    let key = dir.path().join("id_ed25519");
    assert!(
        sh(&format!(
            "ssh-keygen -q -t ed25519 -N '' -f {}",
            key.display()
        ))
        .0
    );
    children.push(
        Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&agent)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(&agent);
    let (added, text) = sh(&format!(
        "SSH_AUTH_SOCK={} ssh-add {} 2>&1",
        agent.display(),
        key.display()
    ));
    assert!(added, "{text}");
    // A session bus in the runtime directory (the distribution's session configuration).
    let bus = run_dir.join("bus");
    children.push(
        Command::new("dbus-daemon")
            .arg("--session")
            .arg(format!("--address=unix:path={}", bus.display()))
            .arg("--nofork")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(&bus);
    // A tmux server.
    let tmux = dir.path().join("tmux.sock");
    assert!(sh(&format!("tmux -S {} new-session -d -s s", tmux.display())).0);
    let tmp_listener = dir.path().join("listener.sock");
    children.push(listener(&tmp_listener));
    let run_listener = run_dir.join("listener.sock");
    children.push(listener(&run_listener));
    UserServices {
        _dir: dir,
        run_dir,
        agent,
        bus,
        tmux,
        tmp_listener,
        run_listener,
        children,
    }
}

/// The attacks, as shell commands that print `REACHED <what>` only when they got through; what
/// they leave behind (keys typed into tmux) carries `tag`.
fn attacks(s: &UserServices, tag: &str) -> Vec<(&'static str, String)> {
    let connect = |path: &Path| {
        format!(
            "/usr/bin/python3 -c \"import socket,sys; c=socket.socket(socket.AF_UNIX); c.connect(sys.argv[1]); print('REACHED', c.recv(5).decode())\" {}",
            path.display()
        )
    };
    vec![
        (
            "ssh-agent",
            format!(
                "SSH_AUTH_SOCK={} ssh-add -l >/dev/null 2>&1 && echo REACHED ssh-agent",
                s.agent.display()
            ),
        ),
        (
            "session bus",
            format!(
                "dbus-send --bus=unix:path={} --print-reply --dest=org.freedesktop.DBus \
                 /org/freedesktop/DBus org.freedesktop.DBus.UpdateActivationEnvironment \
                 dict:string:string:LD_PRELOAD,/nonexistent.so >/dev/null 2>&1 \
                 && echo REACHED session bus",
                s.bus.display()
            ),
        ),
        (
            "tmux",
            format!(
                "tmux -S {} send-keys -t s 'echo {tag}' Enter 2>/dev/null && echo REACHED tmux",
                s.tmux.display()
            ),
        ),
        ("listener in /tmp", connect(&s.tmp_listener)),
        ("listener in /run/user", connect(&s.run_listener)),
    ]
}

/// What `/healthz` tells the account's approver of its executor's walls.
async fn sandbox_line(g: &Glovebox) -> String {
    let bearer = format!("Bearer {}", g.credential_of(&g.account, "approver"));
    let (status, _, body) =
        http_request(&g.url, "GET", "/healthz", &[("authorization", &bearer)], "").await;
    assert_eq!(status, 200, "{body}");
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    let line = health["executors"][&g.account]["sandbox"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(line.contains("walls="), "{health}");
    line
}

async fn no_socket_of_the_user_is_reachable(options: Options, wall: &str) {
    let services = start_user_services();
    // From outside, each one works.
    for (what, command) in &attacks(&services, "typed-from-outside") {
        let (_, text) = sh(command);
        assert!(text.contains("REACHED"), "{what} from outside: {text}");
    }
    let g = Glovebox::start_with(options);
    assert!(sandbox_line(&g).await.contains(wall));
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let script: Vec<String> = attacks(&services, "typed-from-a-job")
        .iter()
        .map(|(_, c)| format!("{c}; "))
        .collect();
    let (status, stdout, stderr) = agent
        .run_job(&mut approver, &format!("{} echo done", script.concat()))
        .await;
    assert_eq!(status["state"], "exited", "{status}");
    assert!(stdout.contains("done"), "{stdout}{stderr}");
    assert!(
        !stdout.contains("REACHED"),
        "reached from inside a job: {stdout}"
    );
    // The user's tmux session got no keys.
    let (_, panes) = sh(&format!(
        "tmux -S {} capture-pane -p -t s",
        services.tmux.display()
    ));
    assert!(
        panes.contains("typed-from-outside") && !panes.contains("typed-from-a-job"),
        "{panes}"
    );
}

#[tokio::test]
async fn a_job_reaches_no_socket_of_the_user_with_namespaces() {
    no_socket_of_the_user_is_reachable(Options::default(), "walls=namespaces").await;
}

#[tokio::test]
async fn a_job_reaches_no_socket_of_the_user_with_the_seccomp_wall() {
    no_socket_of_the_user_is_reachable(
        Options {
            env: vec![("GLOVEBOX_NAMESPACES".into(), "off".into())],
            ..Default::default()
        },
        "walls=seccomp",
    )
    .await;
}

/// A job that reaches out: the machine's loopback (a TCP listener of the test), a UDP "DNS"
/// query to a server of the test, and a TCP server of its own.
fn network_probe(tcp: u16, udp: u16) -> String {
    let script = [
        "import socket",
        "def attempt(name, f):",
        "    try:",
        "        f(); print('OK', name)",
        "    except OSError as e:",
        "        print('NO', name, e.errno)",
        &format!(
            "def machine(): socket.create_connection(('127.0.0.1', {tcp}), timeout=3).close()"
        ),
        "def dns():",
        "    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)",
        &format!("    u.sendto(b'q', ('127.0.0.1', {udp})); u.recvfrom(16)"),
        "def own():",
        "    s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()",
        "    socket.create_connection(s.getsockname(), timeout=3).close()",
        "attempt('machine', machine); attempt('dns', dns); attempt('own', own)",
    ]
    .join("\n");
    format!("/usr/bin/python3 - <<'EOF'\n{script}\nEOF")
}

async fn network_as(sandbox: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let (tcp_port, udp_port) = (
        tcp.local_addr().unwrap().port(),
        udp.local_addr().unwrap().port(),
    );
    std::thread::spawn(move || {
        let mut buf = [0u8; 16];
        while let Ok((_, from)) = udp.recv_from(&mut buf) {
            let _ = udp.send_to(b"a", from);
        }
    });
    let g = with_sandbox(sandbox, env);
    let line = sandbox_line(&g).await;
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let (status, stdout, stderr) = agent
        .run_job(&mut approver, &network_probe(tcp_port, udp_port))
        .await;
    assert_eq!(status["state"], "exited", "{status} {stderr}");
    drop(tcp);
    (stdout, line)
}

fn outcome(stdout: &str, name: &str) -> bool {
    let ok = stdout.lines().any(|l| l == format!("OK {name}"));
    let no = stdout
        .lines()
        .any(|l| l.starts_with(&format!("NO {name} ")));
    assert!(ok != no, "{name}: {stdout}");
    ok
}

#[tokio::test]
async fn network_none_loopback_and_any_hold_from_inside_a_job() {
    // The default: loopback, the job's own.
    let (out, line) = network_as(&[], &[]).await;
    assert!(line.contains("network=loopback"), "{line}");
    assert!(
        !outcome(&out, "machine") && !outcome(&out, "dns") && outcome(&out, "own"),
        "{out}"
    );
    let (out, line) = network_as(&["network: none"], &[]).await;
    assert!(line.contains("network=none"), "{line}");
    assert!(
        !outcome(&out, "machine") && !outcome(&out, "dns") && !outcome(&out, "own"),
        "{out}"
    );
    let (out, _) = network_as(&["network: any"], &[]).await;
    assert!(
        outcome(&out, "machine") && outcome(&out, "dns") && outcome(&out, "own"),
        "{out}"
    );
}

#[tokio::test]
async fn without_namespaces_loopback_is_none_and_says_so() {
    let (out, line) = network_as(&[], &[("GLOVEBOX_NAMESPACES", "off")]).await;
    assert!(
        line.contains("walls=seccomp") && line.contains("loopback needs namespaces"),
        "{line}"
    );
    assert!(
        !outcome(&out, "machine") && !outcome(&out, "dns") && !outcome(&out, "own"),
        "{out}"
    );
}

#[tokio::test]
async fn a_job_fills_its_private_tmp_to_the_cap_and_another_accounts_job_writes_fine() {
    let g = Glovebox::start_with(Options {
        accounts: vec![("a".into(), true), ("b".into(), true)],
        sandbox: vec!["tmp_mb: 8".into()],
        ..Default::default()
    });
    let mut approver = g.connect_as("a", "approver").await;
    let mut agent = g.connect_as("a", "agent").await;
    let (status, stdout, stderr) = agent
        .run_job(
            &mut approver,
            "dd if=/dev/zero of=$TMPDIR/fill bs=1M count=64 2>&1; echo TMPDIR=$TMPDIR; \
             ls -l $TMPDIR/fill | awk '{print \"SIZE\", $5}'; sleep 0.5",
        )
        .await;
    assert_eq!(status["state"], "exited", "{status}");
    assert!(
        stdout.contains("No space left on device"),
        "{stdout}{stderr}"
    );
    let size: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("SIZE "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(size <= 8 << 20, "{size}");
    assert!(stdout.contains("TMPDIR=/tmp"), "{stdout}");
    // Its writes failed, and its status says why.
    assert_eq!(status["limit"]["cap"], "tmp", "{status}");
    assert_eq!(status["limit"]["at"], 8 << 20, "{status}");
    let mut approver_b = g.connect_as("b", "approver").await;
    let mut agent_b = g.connect_as("b", "agent").await;
    let (_, stdout, _) = agent_b
        .run_job(
            &mut approver_b,
            "dd if=/dev/zero of=$TMPDIR/some bs=1M count=4 2>/dev/null && echo WROTE",
        )
        .await;
    assert!(stdout.contains("WROTE"), "{stdout}");
}

/// A socket the account grants by path is the one a job reaches: the others beside it and
/// elsewhere stay out of reach. Without namespaces a grant cannot be told from any other socket,
/// and `/healthz` says the Unix sockets are open.
#[tokio::test]
async fn a_granted_socket_is_reached_and_no_other() {
    let services = start_user_services();
    let grant = format!("unix_sockets: [{}]", services.tmp_listener.display());
    let g = Glovebox::start_with(Options {
        sandbox: vec![grant.clone()],
        ..Default::default()
    });
    assert!(sandbox_line(&g).await.contains("walls=namespaces"));
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let script: Vec<String> = attacks(&services, "typed-from-a-job")
        .iter()
        .map(|(what, c)| format!("echo '== {what}'; {c}; "))
        .collect();
    let (_, stdout, stderr) = agent.run_job(&mut approver, &script.concat()).await;
    let reached: Vec<&str> = stdout
        .split("== ")
        .filter(|part| part.contains("REACHED"))
        .map(|part| part.lines().next().unwrap_or_default())
        .collect();
    assert_eq!(reached, ["listener in /tmp"], "{stdout}{stderr}");
    drop(g);
    let g = Glovebox::start_with(Options {
        sandbox: vec![grant],
        env: vec![("GLOVEBOX_NAMESPACES".into(), "off".into())],
        ..Default::default()
    });
    let line = sandbox_line(&g).await;
    assert!(line.contains("walls=seccomp unix_sockets=open"), "{line}");
}

/// `LD_PRELOAD` in a pack's `env` reaches the pack's server only, confined: the library (compiled
/// here, placed in the roots so the confined server may load it) logs every process it is loaded
/// into, with that process's `NoNewPrivs`. The shim, which starts unconfined, never loads it.
#[tokio::test]
async fn a_packs_loader_variable_acts_only_on_its_confined_server() {
    let dir = tempfile::tempdir().unwrap();
    let g = Glovebox::start_with(Options {
        accounts: vec![("test".into(), true)],
        ..Default::default()
    });
    let log = g.workdir.join("preload.log");
    let source = dir.path().join("preload.c");
    std::fs::write(
        &source,
        format!(
            r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void logged(void) {{
    char exe[512] = {{0}}, line[256];
    int nnp = -1;
    readlink("/proc/self/exe", exe, sizeof exe - 1);
    FILE *status = fopen("/proc/self/status", "r");
    while (status && fgets(line, sizeof line, status))
        if (!strncmp(line, "NoNewPrivs:", 11)) nnp = atoi(line + 11);
    if (status) fclose(status);
    FILE *f = fopen("{}", "a");
    if (f) {{ fprintf(f, "%s nnp=%d\n", exe, nnp); fclose(f); }}
}}
"#,
            log.display()
        ),
    )
    .unwrap();
    let library = g.workdir.join("preload.so");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .unwrap();
    assert!(built.success());
    let server = glovebox_e2e::sibling_bin("glovebox-fake-pack");
    std::fs::write(
        g.state.join("accounts/test/mcp.json"),
        serde_json::json!({"mcpServers": {"fake": {
            "command": server, "args": ["good"], "env": {"LD_PRELOAD": library}
        }}})
        .to_string(),
    )
    .unwrap();
    // The pack host sees the file change; the listing starts the server.
    let mut agent = g.connect("agent").await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        agent.send(serde_json::json!({"type": "packs_list"})).await;
        let listed = loop {
            let frame = agent.next().await;
            if frame["type"] == "packs" {
                break frame;
            }
        };
        if listed.to_string().contains("fake__echo") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{listed}\n{}",
            g.stderr()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    let lines: Vec<&str> = logged.lines().collect();
    assert!(
        lines.iter().any(|l| l.contains("glovebox-fake-pack")),
        "the server never loaded the library: {logged}"
    );
    for line in &lines {
        assert!(
            line.ends_with(" nnp=1") && !line.contains("/glovebox "),
            "loaded outside the server's confinement: {logged}"
        );
    }
}

/// Glovebox whose account has the `sandbox:` lines `sandbox`, started with `env`.
fn with_sandbox(sandbox: &[&str], env: &[(&str, &str)]) -> Glovebox {
    Glovebox::start_with(Options {
        sandbox: sandbox.iter().map(|s| (*s).to_owned()).collect(),
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..Default::default()
    })
}

/// The broker's `host:port`.
fn broker_address(g: &Glovebox) -> String {
    g.url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

/// Runs `command` as a job of an account with `sandbox` (and `env` for `up`); returns its final
/// status and output.
async fn job_with(
    sandbox: &[&str],
    env: &[(&str, &str)],
    command: &str,
) -> (serde_json::Value, String, Glovebox) {
    let g = with_sandbox(sandbox, env);
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let (status, stdout, stderr) = agent.run_job(&mut approver, command).await;
    // The account's next job runs as usual.
    let (_, after, _) = agent.run_job(&mut approver, "echo next-job-runs").await;
    assert!(after.contains("next-job-runs"), "{after}");
    (status, format!("{stdout}{stderr}"), g)
}

#[tokio::test]
async fn a_bounded_fork_bomb_is_stopped_at_the_process_cap_and_says_so() {
    for env in [&[][..], &[("GLOVEBOX_NAMESPACES", "off")][..]] {
        let started = std::time::Instant::now();
        let (status, output, g) = job_with(
            &["processes: 32"],
            env,
            "for i in $(seq 2000); do sleep 60 & done; wait; echo ALL-STARTED",
        )
        .await;
        assert_eq!(status["limit"]["cap"], "processes", "{status} {output}");
        assert_eq!(status["limit"]["at"], 32, "{status}");
        assert!(!output.contains("ALL-STARTED"), "{output}");
        assert!(
            output.contains("the job reached its cap of 32 processes"),
            "{output}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
        // And the audit says so: a `job` row of the executor, its command as the subject.
        let pool = g.audit_pool().await;
        let rows: Vec<(String, String, String, String)> = sqlx::query_as(
            "SELECT source, subject, outcome, detail FROM events WHERE kind = 'job'",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        let (source, subject, outcome, detail) = &rows[0];
        assert_eq!((source.as_str(), outcome.as_str()), ("executor", "limit"));
        assert!(
            detail.starts_with("job-") && detail.ends_with(" processes 32"),
            "{detail}"
        );
        // Not a call: the tool_calls view does not list it.
        let calls: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM tool_calls WHERE tool = 'exec_run'")
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(calls, 2, "the two exec_run calls only");
        assert!(subject.contains("seq 2000"), "{subject}");
    }
}

#[tokio::test]
async fn a_job_over_its_memory_or_cpu_cap_is_stopped_and_says_which() {
    let grow = "/usr/bin/python3 -c 'import time\nheld = []\nfor _ in range(128):\n    held.append(bytearray(8 << 20)); time.sleep(0.02)\nprint(\"GREW\")'";
    let (status, output, _) = job_with(&["memory_mb: 64"], &[], grow).await;
    assert_eq!(status["limit"]["cap"], "memory", "{status} {output}");
    assert_eq!(status["limit"]["at"], 64 << 20, "{status}");
    assert!(!output.contains("GREW"), "{output}");
    let spin = "/usr/bin/python3 -c 'while True: pass'";
    let (status, output, _) = job_with(&["cpu_seconds: 1"], &[], spin).await;
    assert_eq!(status["limit"]["cap"], "cpu", "{status} {output}");
    assert_eq!(status["limit"]["at"], 1, "{status}");
}

#[tokio::test]
async fn without_namespaces_a_job_is_stopped_at_its_temporary_space_cap() {
    let (status, output, _) = job_with(
        &["tmp_mb: 8"],
        &[("GLOVEBOX_NAMESPACES", "off")],
        "for i in $(seq 64); do dd if=/dev/zero of=$TMPDIR/f$i bs=1M count=1 2>/dev/null; \
         sleep 0.02; done; echo FILLED",
    )
    .await;
    assert_eq!(status["limit"]["cap"], "tmp", "{status} {output}");
    assert!(!output.contains("FILLED"), "{output}");
}

/// Every `*.sock` under `dir`.
fn sockets_under(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_socket() {
                found.push(entry.path());
            }
        }
    }
    found
}

/// A job that opens 200 silent connections on every control socket and 70 on the broker's port,
/// and holds them: it gets none, and meanwhile the administrator's commands, another account's
/// calls and the user's own approver all go through.
#[tokio::test]
async fn a_job_cannot_starve_the_control_sockets_nor_the_broker() {
    let g = Glovebox::start_with(Options {
        accounts: vec![("a".into(), true), ("b".into(), true)],
        ..Default::default()
    });
    let attack = glovebox_e2e::plant_attack_binary(&g.workdir);
    let sockets = sockets_under(&g.state);
    assert!(sockets.len() >= 5, "{sockets:?}");
    let port = broker_address(&g);
    let mut targets: Vec<String> = sockets.iter().map(|s| s.display().to_string()).collect();
    let per_socket = format!("{} hold 200 6 {}", attack.display(), targets.join(" "));
    targets.push(format!("tcp:{port}"));
    let command = format!(
        "{per_socket} & {} hold 70 6 tcp:{port}; wait",
        attack.display()
    );
    let mut approver = g.connect_as("a", "approver").await;
    let mut agent = g.connect_as("a", "agent").await;
    let (_, started) = agent
        .invoke_asked(
            &mut approver,
            "flood",
            "exec_run",
            serde_json::json!({ "command": command }),
            "once",
        )
        .await;
    let job = glovebox_e2e::expect_ok(&started)["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    // While the job holds what it could get: the administrator, another account, the approver.
    let (code, out, err) = g.run_cli(&["policy", "list", "--account", "b"]);
    assert_eq!(code, 0, "{out}{err}");
    let mut other = g.connect_as("b", "agent").await;
    let listed = other
        .invoke("l", "file_list", serde_json::json!({ "path": "." }))
        .await;
    assert_eq!(listed["ok"], true, "{listed}");
    let _second_approver = g.connect_as("a", "approver").await;
    let status = agent.wait_job(&job).await;
    assert_eq!(status["state"], "exited", "{status}");
    let tail = glovebox_e2e::expect_ok(
        &agent
            .invoke(
                "t",
                "exec_tail",
                serde_json::json!({ "job_id": job, "since": 0 }),
            )
            .await,
    );
    let stdout = tail["stdout"]["text"].as_str().unwrap_or_default();
    let tried = glovebox_e2e::attempts(stdout);
    assert!(tried.len() > sockets.len(), "{stdout}");
    for t in &tried {
        assert!(!t.succeeded, "{} on {}: {}", t.attack, t.target, t.detail);
    }
}

/// A job of glovebox run as root (dev mode, no `run_as`) is `nobody` outside its namespaces: it
/// cannot read `/etc/shadow` or anything else only root may, yet its roots stay writable and
/// what it writes there is root's on disk. Run as another user, a job is that user.
#[tokio::test]
async fn a_job_of_root_is_nobody_outside_and_its_roots_stay_root_owned() {
    use std::os::unix::fs::MetadataExt;
    let root = rustix::process::geteuid().is_root();
    let g = Glovebox::start();
    let line = sandbox_line(&g).await;
    assert_eq!(line.contains("root_jobs=nobody"), root, "{line}");
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let (status, stdout, stderr) = agent
        .run_job(
            &mut approver,
            "cat /proc/self/uid_map; head -c 1 /etc/shadow >/dev/null 2>&1 && echo SHADOW-READ; \
             echo written > by-the-job.txt && echo WROTE",
        )
        .await;
    assert_eq!(status["exit_code"], 0, "{status} {stderr}");
    assert!(
        stdout.contains("WROTE") && !stdout.contains("SHADOW-READ"),
        "{stdout}"
    );
    let map: Vec<u32> = stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    let me = rustix::process::geteuid().as_raw();
    let nobody = nix::unistd::User::from_name("nobody")
        .unwrap()
        .map_or(65534, |u| u.uid.as_raw());
    // inside, outside, count: root's job is nobody outside; anyone else's is themselves.
    assert_eq!(
        map,
        [if root { 0 } else { me }, if root { nobody } else { me }, 1]
    );
    let written = std::fs::metadata(g.workdir.join("by-the-job.txt")).unwrap();
    assert_eq!(
        written.uid(),
        me,
        "what a job writes in its roots is its user's on disk"
    );
}

/// Managed policy caps the network an account's jobs get, whatever the account says: `no-network`
/// leaves none, `local-network` a network of the job's own; the job's status says which.
#[tokio::test]
async fn managed_policy_caps_the_network_of_jobs() {
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let probe = network_probe(
        tcp.local_addr().unwrap().port(),
        udp.local_addr().unwrap().port(),
    );
    let g = with_sandbox(&["network: any"], &[]);
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let managed = g.state.join("managed");
    std::fs::create_dir_all(&managed).unwrap();
    for (cap, network, own) in [
        ("no-network", "none", false),
        ("local-network", "loopback", true),
    ] {
        std::fs::write(managed.join("net.yaml"), format!("cap: [{cap}]\n")).unwrap();
        // Managed files are read again when the watcher sees them change.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            let (status, _, _) = agent.run_job(&mut approver, "true").await;
            if status["network"] == network {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{cap}: {status}");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        let (status, stdout, stderr) = agent.run_job(&mut approver, &probe).await;
        assert_eq!(status["network"], network, "{cap}: {status} {stderr}");
        assert!(!outcome(&stdout, "machine"), "{cap}: {stdout}");
        assert_eq!(outcome(&stdout, "own"), own, "{cap}: {stdout}");
    }
    // Without the cap, the account's own `any`.
    std::fs::remove_file(managed.join("net.yaml")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while agent.run_job(&mut approver, "true").await.0["network"] != "any" {
        assert!(
            std::time::Instant::now() < deadline,
            "the cap outlived its file"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let (status, stdout, _) = agent.run_job(&mut approver, &probe).await;
    assert_eq!(status["network"], "any", "{status}");
    assert!(outcome(&stdout, "machine"), "{stdout}");
}

/// With the walls open (`network: any`, no namespaces), a job that holds 70 silent connections on
/// the broker's port — more than its user may have unauthenticated — does not keep that user's
/// approver out: the oldest silent ones are shed for it.
#[tokio::test]
async fn with_the_network_open_a_jobs_silent_connections_are_shed_for_the_approver() {
    let g = with_sandbox(&["network: any"], &[("GLOVEBOX_NAMESPACES", "off")]);
    let attack = glovebox_e2e::plant_attack_binary(&g.workdir);
    let port = broker_address(&g);
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let (_, started) = agent
        .invoke_asked(
            &mut approver,
            "flood",
            "exec_run",
            serde_json::json!({ "command": format!("{} hold 70 8 tcp:{port}", attack.display()) }),
            "once",
        )
        .await;
    let job = glovebox_e2e::expect_ok(&started)["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The flood is in place: the job got its connections (the network is open).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let tail = agent
            .invoke(
                "t",
                "exec_tail",
                serde_json::json!({ "job_id": job, "since": 0 }),
            )
            .await;
        if tail.to_string().contains("hold connections") {
            assert!(tail.to_string().contains("70 held"), "{tail}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{tail}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // A new approver and a new agent of the same user connect and work while it holds them.
    let _second = g.connect("approver").await;
    let mut other_agent = g.connect("agent").await;
    let listed = other_agent
        .invoke("l", "file_list", serde_json::json!({ "path": "." }))
        .await;
    assert_eq!(listed["ok"], true, "{listed}");
    agent.kill_running_job(&job, "the flood").await;
}
