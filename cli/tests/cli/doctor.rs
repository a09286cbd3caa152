//! `glovebox doctor` on real state: a state dir made by the real `glovebox up`, healthy and then
//! with a key made readable by others; a managed policy file others may write.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

fn doctor(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_glovebox"))
        .arg("doctor")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "{stderr}");
    (out.status.code().unwrap_or(-1), stdout)
}

/// Each check's line and the fix under it (if any).
fn findings(out: &str) -> Vec<(String, Option<String>)> {
    let mut found: Vec<(String, Option<String>)> = Vec::new();
    for line in out.lines() {
        if let Some(fix) = line.strip_prefix("    fix: ") {
            let last = found.last_mut().expect("a fix follows a finding");
            assert!(last.1.is_none(), "two fixes: {out}");
            last.1 = Some(fix.to_owned());
        } else {
            found.push((line.to_owned(), None));
        }
    }
    // The last line is the summary.
    let summary = found.pop().unwrap();
    assert!(summary.0.ends_with(" FAIL"), "{out}");
    found
}

struct Up {
    child: Child,
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

fn up(home: &Path, state: &Path, work: &Path) -> Up {
    let mut child = Command::new(env!("CARGO_BIN_EXE_glovebox"))
        .args(["up", "--state-dir", state.to_str().unwrap()])
        .args([
            "--workdir",
            work.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .env("HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut banner = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while std::io::BufRead::read_line(&mut banner, &mut line).unwrap() > 0
        && !line.contains("glovebox is up")
    {}
    assert!(line.contains("glovebox is up"), "{line}");
    // Keep reading the banner so `up` never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut banner, &mut std::io::sink()));
    Up { child }
}

#[test]
fn a_healthy_running_glovebox_passes_and_a_key_readable_by_others_fails_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let work = dir.path().join("w");
    std::fs::create_dir_all(&work).unwrap();
    let running = up(dir.path(), &state, &work);
    let state_arg = state.to_str().unwrap();

    let (code, out) = doctor(&["--state-dir", state_arg]);
    assert_eq!(code, 0, "{out}");
    let found = findings(&out);
    for check in [
        "landlock:",
        "walls:",
        "no_new_privs:",
        "cgroups:",
        "config:",
        "run_as of account",
        "services:",
    ] {
        assert!(
            found.iter().any(|(l, _)| l.contains(check)),
            "no {check}: {out}"
        );
    }
    for (line, fix) in &found {
        if line.starts_with("OK ") {
            assert!(fix.is_none(), "{line}");
        } else {
            assert!(line.starts_with("WARN "), "{out}");
            assert!(fix.as_ref().is_some_and(|f| !f.is_empty()), "{line}");
        }
    }
    let key = state.join("ticket.key");
    let ok_key = format!("OK file {}: 0600", key.display());
    assert!(out.contains(&ok_key), "{out}");
    assert!(
        out.contains(&format!(
            "OK socket {}",
            state.join("run/gate.sock").display()
        )),
        "{out}"
    );
    assert!(out.contains("OK services: health ok"), "{out}");

    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, out) = doctor(&["--state-dir", state_arg]);
    assert_eq!(code, 1, "{out}");
    let found = findings(&out);
    let failed: Vec<_> = found
        .iter()
        .filter(|(l, _)| l.starts_with("FAIL "))
        .collect();
    assert_eq!(failed.len(), 1, "{out}");
    let (line, fix) = failed[0];
    assert_eq!(
        *line,
        format!(
            "FAIL file {}: mode 0644 (group may read, others may read); it must be at most 0600",
            key.display()
        )
    );
    assert_eq!(
        fix.as_deref(),
        Some(format!("chmod 600 {}", key.display()).as_str())
    );

    // After the fix, nothing fails; once stopped, only the services check does.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(doctor(&["--state-dir", state_arg]).0, 0);
    drop(running);
    let (code, out) = doctor(&["--state-dir", state_arg]);
    assert_eq!(code, 1, "{out}");
    let failed: Vec<_> = findings(&out)
        .into_iter()
        .filter(|(l, _)| l.starts_with("FAIL "))
        .collect();
    assert_eq!(failed.len(), 1, "{out}");
    assert!(
        failed[0]
            .0
            .starts_with("FAIL services: glovebox is not running"),
        "{out}"
    );
    assert!(
        failed[0].1.as_ref().unwrap().contains("glovebox up"),
        "{out}"
    );
}

#[test]
fn a_managed_policy_file_others_may_write_fails_and_a_broken_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.d");
    std::fs::create_dir(&policy).unwrap();
    let baseline =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/etc/policy.d/00-baseline.yaml");
    let good = policy.join("00-baseline.yaml");
    std::fs::copy(&baseline, &good).unwrap();
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o644)).unwrap();
    let open = policy.join("10-open.yaml");
    std::fs::copy(&baseline, &open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
    let broken = policy.join("20-broken.yaml");
    std::fs::write(&broken, "deny:\n  read: [\n").unwrap();
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o644)).unwrap();
    // Not a policy file: ignored, as the gate ignores it.
    std::fs::write(policy.join("README"), "notes").unwrap();
    std::fs::set_permissions(
        policy.join("README"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();

    let state = dir.path().join("state");
    let (code, out) = doctor(&[
        "--state-dir",
        state.to_str().unwrap(),
        "--policy-dir",
        policy.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}");
    let found = findings(&out);
    let line_of = |path: &Path| {
        found
            .iter()
            .find(|(l, _)| l.contains(&format!(" {}:", path.display())))
            .cloned()
            .unwrap_or_else(|| panic!("no line for {}: {out}", path.display()))
    };
    let (line, _) = line_of(&good);
    assert!(
        line.starts_with("OK policy ") && line.contains("compiles"),
        "{line}"
    );
    let (line, fix) = line_of(&open);
    assert!(
        line.starts_with("FAIL file ") && line.contains("others may write"),
        "{line}"
    );
    assert_eq!(fix, Some(format!("chmod 644 {}", open.display())));
    let (line, fix) = line_of(&broken);
    assert!(line.starts_with("FAIL policy "), "{line}");
    assert!(fix.is_some(), "{line}");
    assert!(!out.contains("README"), "{out}");
}

/// The walls doctor reports are the ones a shim raises: tried for real, and the seccomp fallback
/// named with its reason and a fix when namespaces are not to be had.
#[test]
fn doctor_says_which_walls_a_job_gets() {
    let run = |namespaces: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_glovebox"))
            .args(["doctor", "--state-dir", "/nonexistent-glovebox-state"])
            .env("GLOVEBOX_NAMESPACES", namespaces)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        findings(&String::from_utf8_lossy(&out.stdout))
            .into_iter()
            .find(|(line, _)| line.contains("walls:"))
            .expect("a walls finding")
    };
    let (line, fix) = run("on");
    assert!(line.starts_with("OK walls: namespaces"), "{line}");
    assert!(fix.is_none());
    let (line, fix) = run("off");
    assert!(
        line.starts_with("WARN walls: seccomp (namespaces switched off)"),
        "{line}"
    );
    assert!(fix.is_some_and(|f| f.contains("unprivileged user namespaces")));
}
