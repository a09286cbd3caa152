//! The OS boundary under the gate: Landlock confines the executor and its jobs to the account's
//! roots, so even an approved call cannot reach outside them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use glovebox_e2e::{Glovebox, expect_error, expect_ok, glovebox_bin};
use serde_json::json;

/// A directory outside the roots and outside the scratch space the sandbox allows.
fn outside_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap()
}

#[tokio::test]
async fn an_approved_read_outside_the_roots_is_refused_by_the_kernel() {
    let g = Glovebox::start();
    let outside = outside_dir();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "outside the roots").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    // The gate asks (outside the workdir), the approver says yes, the ticket is valid: Landlock
    // still refuses.
    let r = agent
        .invoke_asked(
            &mut approver,
            "r",
            "file_read",
            json!({"path": secret.to_str().unwrap()}),
            "once",
        )
        .await
        .1;
    let e = expect_error(&r, "denied");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("operating system refused"),
        "{e}"
    );
    let r = agent
        .invoke_asked(
            &mut approver,
            "w",
            "file_write",
            json!({"path": outside.path().join("new.txt").to_str().unwrap(), "content": "x"}),
            "once",
        )
        .await
        .1;
    expect_error(&r, "denied");
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
    let stderr = tail["stderr"]["text"].as_str().unwrap();
    assert!(stderr.contains("Permission denied"), "{stderr}");
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
