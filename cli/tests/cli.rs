//! The `glovebox` command's own behaviour that needs no running services: argument and config
//! errors are reported with the file, the line and what was expected, and nothing starts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

fn glovebox(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_glovebox"))
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

#[test]
fn an_invalid_config_is_refused_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("glovebox.yaml"),
        "accounts:\n  - id: a\n    workdir: /tmp\n    colour: blue\n",
    )
    .unwrap();
    let (code, _, err) = glovebox(&[
        "up",
        "--state-dir",
        state.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("glovebox.yaml: line 4") && err.contains("unknown field `colour`"),
        "{err}"
    );
}

#[test]
fn a_non_loopback_listen_address_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let work = dir.path().join("w");
    std::fs::create_dir_all(&work).unwrap();
    let (code, _, err) = glovebox(&[
        "up",
        "--state-dir",
        state.to_str().unwrap(),
        "--workdir",
        work.to_str().unwrap(),
        "--listen",
        "0.0.0.0:0",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("loopback"), "{err}");
}

#[test]
fn first_start_creates_a_private_state_dir() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // `call` needs a running broker, but it loads the state first: an absent state dir is reported.
    let (code, _, err) = glovebox(&["call", "--state-dir", state.to_str().unwrap(), "file_list"]);
    assert_eq!(code, 2);
    assert!(err.contains("glovebox.yaml"), "{err}");
    assert!(!state.exists(), "call must not create state");
    // A broker that cannot start (non-loopback) still leaves a complete, private state dir.
    let work = dir.path().join("w");
    std::fs::create_dir_all(&work).unwrap();
    glovebox(&[
        "up",
        "--state-dir",
        state.to_str().unwrap(),
        "--workdir",
        work.to_str().unwrap(),
        "--listen",
        "0.0.0.0:1",
    ]);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&state.join("ticket.key")), 0o600);
    let config = std::fs::read_to_string(state.join("glovebox.yaml")).unwrap();
    let account = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("- id: "))
        .unwrap()
        .to_owned();
    let token_file = state.join("accounts").join(&account).join("token");
    assert_eq!(mode(&token_file), 0o600);
    let token = std::fs::read_to_string(&token_file).unwrap();
    assert!(
        !config.contains(token.trim()),
        "the config holds only the token's hash"
    );
    let policy = std::fs::read_to_string(
        state
            .join("accounts")
            .join(&account)
            .join("permissions.yaml"),
    )
    .unwrap();
    assert!(policy.contains("./**"), "{policy}");
}
