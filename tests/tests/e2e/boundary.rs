//! The OS boundary under the gate: Landlock confines the executor and its jobs to the account's
//! roots, so even an approved job cannot reach outside them; the gate denies a call's path
//! outside them before anyone is asked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use glovebox_e2e::{Glovebox, expect_error, expect_ok, glovebox_bin};
use serde_json::json;

/// A directory outside the roots and outside the scratch space the sandbox allows.
fn outside_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap()
}

/// Nothing outside the roots can be acted on, so the gate denies it at once, naming the roots,
/// instead of asking the approver for something the kernel would refuse after a yes.
#[tokio::test]
async fn a_read_or_write_outside_the_roots_is_denied_naming_the_roots_without_an_ask() {
    let g = Glovebox::start();
    let outside = outside_dir();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "outside the roots").unwrap();
    let _approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    for (id, tool, params) in [
        ("r", "file_read", json!({"path": secret.to_str().unwrap()})),
        (
            "w",
            "file_write",
            json!({"path": outside.path().join("new.txt").to_str().unwrap(), "content": "x"}),
        ),
        (
            "x",
            "exec_run",
            json!({"command": "ls", "cwd": outside.path().to_str().unwrap()}),
        ),
    ] {
        // an approver is connected, yet the result comes without an ask
        let r = agent.invoke(id, tool, params).await;
        let e = expect_error(&r, "denied");
        assert_eq!(e["rule"], "roots", "{e}");
        let reason = e["deny_reason"].as_str().unwrap();
        assert!(
            reason.contains("outside the account's roots")
                && reason.contains(g.workdir.to_str().unwrap()),
            "{reason}"
        );
    }
    assert!(!outside.path().join("new.txt").exists());
}

#[tokio::test]
async fn jobs_inherit_the_sandbox() {
    let g = Glovebox::start();
    let outside = outside_dir();
    std::fs::write(outside.path().join("secret.txt"), "outside").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let command = format!(
        "cat {0}/secret.txt; echo escaped > {0}/escaped.txt; echo inside > inside.txt",
        outside.path().display()
    );
    let r = agent
        .invoke_asked(
            &mut approver,
            "j",
            "exec_run",
            json!({ "command": command }),
            "once",
        )
        .await
        .1;
    let job = expect_ok(&r)["job_id"].as_str().unwrap().to_owned();
    let state = agent.wait_job(&job).await;
    assert_eq!(state["state"], "exited", "{state}");
    let tail = expect_ok(
        &agent
            .invoke("t", "exec_tail", json!({ "job_id": job }))
            .await,
    );
    // Refused by Landlock, or not even there: /var/tmp is a private tmpfs under namespaces.
    let stderr = tail["stderr"]["text"].as_str().unwrap();
    assert!(
        stderr.contains("Permission denied") || stderr.contains("No such file or directory"),
        "{stderr}"
    );
    assert!(
        !tail["stdout"]["text"].as_str().unwrap().contains("outside"),
        "{tail}"
    );
    assert!(!outside.path().join("escaped.txt").exists());
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("inside.txt")).unwrap(),
        "inside\n"
    );
}

#[tokio::test]
async fn up_reports_the_sandbox_state() {
    // A second instance on its own state dir: read its banner directly.
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("w");
    std::fs::create_dir_all(&work).unwrap();
    let mut child = Command::new(glovebox_bin())
        .args(["up", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(dir.path().join("state"))
        .arg("--workdir")
        .arg(&work)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut banner = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let done = line.starts_with("Try ");
        banner.push(line);
        if done {
            break;
        }
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    let text = banner.join("\n");
    assert!(text.contains("landlock=fully_enforced"), "{text}");
    assert!(
        text.contains(&format!(
            "roots:     {}",
            std::fs::canonicalize(&work).unwrap().display()
        )),
        "{text}"
    );
    assert!(text.contains("OS identity separation is off"), "{text}");
}
