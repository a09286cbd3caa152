//! The `glovebox` command's own behaviour that needs no running services: argument and config
//! errors are reported with the file, the line and what was expected, and nothing starts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

#[path = "cli/audit.rs"]
mod audit;
#[path = "cli/deploy.rs"]
mod deploy;
#[path = "cli/doctor.rs"]
mod doctor;
#[path = "cli/imports.rs"]
mod imports;
#[path = "cli/maps.rs"]
mod maps;
#[path = "cli/package.rs"]
mod package;

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
    assert!(err.contains("run `glovebox up` first"), "{err}");
    assert!(!state.exists(), "call must not create state");
    // A first start that fails (the broker refuses a non-loopback address) leaves nothing.
    let work = dir.path().join("w");
    std::fs::create_dir_all(&work).unwrap();
    let up = |listen: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_glovebox"))
            .args(["up", "--state-dir", state.to_str().unwrap()])
            .args(["--workdir", work.to_str().unwrap(), "--listen", listen])
            .env("HOME", dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let failed = up("0.0.0.0:1").wait_with_output().unwrap();
    assert_eq!(failed.status.code(), Some(2));
    assert!(
        !state.exists(),
        "a failed first start leaves no state: {:?}\n{}",
        std::fs::read_dir(&state)
            .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
            .unwrap_or_default(),
        String::from_utf8_lossy(&failed.stderr)
    );
    // A first start that succeeds leaves a complete, private state dir.
    let mut running = up("127.0.0.1:0");
    let mut banner = std::io::BufReader::new(running.stdout.take().unwrap());
    let mut line = String::new();
    while std::io::BufRead::read_line(&mut banner, &mut line).unwrap() > 0
        && !line.contains("glovebox is up")
    {}
    assert!(line.contains("glovebox is up"), "{line}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(running.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    running.wait().unwrap();
    // A later start with another --workdir says so instead of ignoring it.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let later = std::process::Command::new(env!("CARGO_BIN_EXE_glovebox"))
        .args(["up", "--state-dir", state.to_str().unwrap()])
        .args([
            "--workdir",
            other.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .env("HOME", dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&later.stderr);
    assert_eq!(later.status.code(), Some(2), "{err}");
    assert!(
        err.contains("already has the workdir") && err.contains("glovebox.yaml"),
        "{err}"
    );
    assert!(
        state.join("glovebox.yaml").exists(),
        "a failed later start keeps the state"
    );
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

#[test]
fn help_hides_the_internal_service_commands() {
    let (code, out, _) = glovebox(&["--help"]);
    assert_eq!(code, 0);
    for shown in ["up", "status", "stop", "tools", "call", "approve", "mcp"] {
        assert!(out.contains(&format!("\n  {shown} ")), "{shown}: {out}");
    }
    for hidden in [
        "gate",
        "executor",
        "broker",
        "job-shim",
        "completions",
        "man",
    ] {
        assert!(!out.contains(&format!("\n  {hidden} ")), "{hidden}: {out}");
    }
}

#[test]
fn output_to_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_glovebox"))
        .args(["tools", "--state-dir", dir.path().to_str().unwrap()])
        .stdout(writer)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn status_stop_and_call_say_when_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap();
    let (code, out, _) = glovebox(&["status", "--state-dir", state]);
    assert_eq!(code, 1);
    assert!(out.contains("run `glovebox up`"), "{out}");
    let (code, out, _) = glovebox(&["stop", "--state-dir", state]);
    assert_eq!(code, 0);
    assert!(out.contains("not running"), "{out}");
}

/// The subcommands `glovebox --help` lists (the public ones).
fn public_subcommands() -> Vec<String> {
    let (_, help, _) = glovebox(&["--help"]);
    help.split("Commands:")
        .nth(1)
        .unwrap()
        .split("Options:")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| *w != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn completions_name_every_public_subcommand_and_no_internal_one() {
    let public = public_subcommands();
    assert!(public.len() >= 10, "{public:?}");
    for shell in ["bash", "zsh", "fish"] {
        let (code, script, err) = glovebox(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        for sub in &public {
            assert!(script.contains(sub.as_str()), "{shell}: no {sub}");
        }
        for internal in ["job-shim", "exit-on-stdin-eof"] {
            assert!(!script.contains(internal), "{shell} offers {internal}");
        }
    }
    let (code, _, err) = glovebox(&["completions", "powershell"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn the_man_page_is_roff_naming_every_public_subcommand() {
    let (code, page, err) = glovebox(&["man"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        page.starts_with(".ie") || page.contains(".TH glovebox"),
        "{page}"
    );
    for sub in public_subcommands() {
        let entry = format!("glovebox\\-{}(1)", sub.replace('-', "\\-"));
        assert!(page.contains(&entry), "no {entry}: {page}");
    }
    assert!(!page.contains("job\\-shim"), "{page}");
}
