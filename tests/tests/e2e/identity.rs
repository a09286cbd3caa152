//! Per-account OS identity: with `run_as`, the executor and its jobs run as that user, with no
//! way back to root, so the kernel refuses what that user may not touch even when the gate allowed
//! it. These tests need root (as CI has) to switch users; elsewhere they say so and stop.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;

use glovebox_e2e::{Client, Glovebox, Options, expect_error, expect_ok};
use serde_json::json;

const USER: &str = "nobody";

fn start() -> Option<Glovebox> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: switching users needs root");
        return None;
    }
    Some(Glovebox::start_with(Options {
        run_as: Some(USER.into()),
        ..Default::default()
    }))
}

fn nobody_uid() -> u32 {
    nix::unistd::User::from_name(USER)
        .unwrap()
        .unwrap()
        .uid
        .as_raw()
}

async fn run_job(agent: &mut Client, approver: &mut Client, command: &str) -> String {
    let (_, started) = agent
        .invoke_asked(
            approver,
            "job",
            "exec_run",
            json!({ "command": command }),
            "once",
        )
        .await;
    let job = expect_ok(&started)["job_id"].as_str().unwrap().to_owned();
    let status = agent.wait_job(&job).await;
    assert_eq!(status["state"], "exited", "{status}");
    let tail = expect_ok(
        &agent
            .invoke("t", "exec_tail", json!({ "job_id": job }))
            .await,
    );
    tail["stdout"]["text"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_executor_process_runs_as_the_account_user() {
    let Some(g) = start() else { return };
    let pids = g.service_pids("executor");
    assert_eq!(pids.len(), 1, "{pids:?}");
    let status = std::fs::read_to_string(format!("/proc/{}/status", pids[0])).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    let uids: Vec<u32> = uid_line
        .split_whitespace()
        .skip(1)
        .map(|u| u.parse().unwrap())
        .collect();
    assert_eq!(
        uids,
        vec![nobody_uid(); 4],
        "real, effective, saved and fs uid: {uid_line}"
    );
    let groups = status.lines().find(|l| l.starts_with("Groups:")).unwrap();
    assert_eq!(groups.trim(), "Groups:", "supplementary groups are dropped");
    let nnp = status
        .lines()
        .find(|l| l.starts_with("NoNewPrivs:"))
        .unwrap();
    assert!(nnp.ends_with('1'), "{nnp}");
}

#[tokio::test]
async fn jobs_run_as_the_account_user_without_capabilities() {
    let Some(g) = start() else { return };
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let out = run_job(
        &mut agent,
        &mut approver,
        "id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; echo HOME=$HOME",
    )
    .await;
    let mut lines = out.lines();
    assert_eq!(lines.next().unwrap(), nobody_uid().to_string(), "{out}");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    let home = nix::unistd::User::from_name(USER).unwrap().unwrap().dir;
    assert!(out.contains(&format!("HOME={}", home.display())), "{out}");
}

#[tokio::test]
async fn a_root_only_file_is_refused_even_with_a_valid_ticket() {
    let Some(g) = start() else { return };
    let private = g.workdir.join("root-only.txt");
    std::fs::write(&private, "root's secret").unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let public = g.workdir.join("shared.txt");
    std::fs::write(&public, "for everyone").unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut agent = g.connect("agent").await;
    // The policy allows reads in the workdir, so the gate signs a ticket; the kernel says no.
    let e = expect_error(
        &agent
            .invoke("r", "file_read", json!({"path": "root-only.txt"}))
            .await,
        "denied",
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("operating system refused"),
        "{e}"
    );
    let ok = expect_ok(
        &agent
            .invoke("p", "file_read", json!({"path": "shared.txt"}))
            .await,
    );
    assert_eq!(ok["content"], "for everyone");
    // and the executor, running as another user, still reached the audit
    let pool = g.audit_pool().await;
    let bytes: Option<i64> =
        sqlx::query_scalar("SELECT bytes FROM tool_calls WHERE client_call_id = 'p'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(bytes, Some(12));
}

/// Every file under `dir` (not following links).
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            out.extend(files_under(&path));
        } else if kind.is_file() {
            out.push(path);
        }
    }
    out
}

#[tokio::test]
async fn another_local_user_cannot_read_the_audit_or_any_state_file() {
    let Some(g) = start() else { return };
    // Make a few audit rows (and so the WAL) first.
    let mut agent = g.connect("agent").await;
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    expect_ok(
        &agent
            .invoke("r", "file_read", json!({"path": "a.txt"}))
            .await,
    );
    let files = files_under(&g.state);
    for name in [
        "audit.db",
        "audit.db-wal",
        "ticket.key",
        "control.key",
        "glovebox.yaml",
    ] {
        assert!(
            files.iter().any(|f| f.ends_with(name)),
            "{name} missing from {files:?}"
        );
    }
    // The one file meant for everyone: the audit's public checkpoint key, 64 hex digits.
    let public = g.state.join("audit.pub");
    let text = std::fs::read_to_string(&public).unwrap();
    assert!(
        text.len() == 65 && text.trim().bytes().all(|b| b.is_ascii_hexdigit()),
        "{text:?}"
    );
    let files: Vec<_> = files.into_iter().filter(|f| *f != public).collect();
    // With run_as the state and run directories can be traversed (the executor reaches its
    // socket through them), so every other file must keep other users out by itself.
    for file in &files {
        let mode = std::fs::metadata(file).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o077,
            0,
            "{} is mode {:o}",
            file.display(),
            mode & 0o777
        );
    }
    // And as two other users (the account's own user, and one without any account), reading
    // each of them fails.
    for uid in [nobody_uid(), 54321] {
        for file in &files {
            let out = std::process::Command::new("/bin/cat")
                .arg(file)
                .uid(uid)
                .gid(uid)
                .stdout(std::process::Stdio::null())
                .output()
                .unwrap();
            assert!(!out.status.success(), "uid {uid} read {}", file.display());
        }
    }
}

#[test]
fn run_as_with_the_state_under_a_directory_it_cannot_pass_is_refused_with_the_fix() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: switching users needs root");
        return;
    }
    // Root's and 0700: the run_as user cannot pass it to reach its socket.
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (state, work) = (root.join("state"), root.join("work"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("glovebox.yaml"),
        format!(
            "listen: 127.0.0.1:0\naccounts:\n  - id: a\n    workdir: {}\n    run_as: {USER}\n",
            work.display()
        ),
    )
    .unwrap();
    let err_file = root.join("stderr");
    let mut refused = std::process::Command::new(glovebox_e2e::glovebox_bin())
        .args(["up", "--state-dir"])
        .arg(&state)
        .env("HOME", root.join("home"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = refused.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = refused.kill();
            let _ = refused.wait();
            panic!(
                "up started: {}",
                std::fs::read_to_string(&err_file).unwrap()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let err = std::fs::read_to_string(&err_file).unwrap();
    assert!(!status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "runs as {USER}, who cannot pass through {}",
            root.display()
        )) && err.contains(&format!("chmod o+x {}", root.display())),
        "{err}"
    );
    // Let it pass, as the message says: it starts.
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711)).unwrap();
    let mut up = std::process::Command::new(glovebox_e2e::glovebox_bin())
        .args(["up", "--state-dir"])
        .arg(&state)
        .env("HOME", root.join("home"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(up.stdout.take().unwrap()).lines();
    while !banner.contains("glovebox is up") {
        match lines.next() {
            Some(Ok(line)) => banner.push_str(&line),
            _ => break,
        }
    }
    let _ = up.kill();
    let _ = up.wait();
    assert!(banner.contains("glovebox is up"), "{banner}");
}
