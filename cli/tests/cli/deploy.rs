//! What `deploy/` ships is checked against the code that will read it: the example
//! `glovebox.yaml` through the real config loader, the baseline policy through the real policy
//! compiler, each unit's `ExecStart` through the binary's own argument parser and
//! `systemd-analyze verify`, and the README's hardening table against the unit.

use std::path::{Path, PathBuf};
use std::process::Command;

use glovebox_policy::{Decision, Domain, Inputs, Layer, Policy, RawPolicy, Source};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The file with every commented-out YAML line (`# - id: ...`, `#   run_as: ...`, `# cap: ...`)
/// turned back on: the examples in comments must be valid too.
fn uncommented(text: &str) -> String {
    text.lines()
        .map(|line| {
            let body = line.trim_start();
            let indent = &line[..line.len() - body.len()];
            match body.strip_prefix("# ") {
                Some(rest) if looks_like_yaml(rest) => format!("{indent}{rest}"),
                _ => line.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn looks_like_yaml(rest: &str) -> bool {
    let key = rest.trim_start().trim_start_matches("- ");
    key.split_once(':').is_some_and(|(k, v)| {
        !k.is_empty()
            && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            && (v.is_empty() || v.starts_with(' '))
    })
}

const EXAMPLE_CONFIG: &str = "deploy/etc/glovebox.yaml";
const BASELINE: &str = "deploy/etc/policy.d/00-baseline.yaml";
const USER_UNIT: &str = "deploy/systemd/glovebox-user.service";
const SYSTEM_UNIT: &str = "deploy/systemd/glovebox.service";

#[test]
fn the_example_config_parses_with_the_real_loader() {
    let text = read(EXAMPLE_CONFIG);
    let config = glovebox_config::Config::parse(&text, Path::new(EXAMPLE_CONFIG)).unwrap();
    assert!(config.listen.ip().is_loopback());
    assert_eq!(config.accounts.len(), 1);
    let alice = &config.accounts[0];
    assert_eq!(alice.id, "alice");
    assert_eq!(alice.roots.len(), 2);
    assert!(alice.run_as.is_none());
    // The commented-out second account is valid as well.
    let full = uncommented(&text);
    let config = glovebox_config::Config::parse(&full, Path::new(EXAMPLE_CONFIG))
        .unwrap_or_else(|e| panic!("{e}\n{full}"));
    assert_eq!(config.accounts.len(), 2, "{full}");
    assert_eq!(config.accounts[1].run_as.as_deref(), Some("ci-bot"));
    assert_eq!(config.accounts[1].owner.as_deref(), Some("alice"));
}

fn baseline_policy(text: &str) -> Policy {
    let raw = RawPolicy::parse(text).unwrap_or_else(|e| panic!("{BASELINE}: {e}"));
    Policy::compile_layers(&Inputs {
        workdir: "/home/alice/src/project".to_owned(),
        protected: Vec::new(),
        roots: Vec::new(),
        managed: vec![Source::new(BASELINE, raw, 0)],
        account: Source::new("permissions.yaml", RawPolicy::default_for_new_account(), 0),
        project: None,
    })
    .unwrap_or_else(|e| panic!("{BASELINE}: {e}"))
}

#[test]
fn the_baseline_policy_compiles_as_a_managed_layer_and_denies() {
    let policy = baseline_policy(&read(BASELINE));
    assert!(policy.warnings().is_empty(), "{:?}", policy.warnings());
    for (domain, path) in [
        (Domain::Read, "/etc/shadow"),
        (Domain::Read, "/home/alice/.netrc"),
        (Domain::Write, "/etc/hosts"),
        (Domain::Write, "/usr/local/bin/x"),
    ] {
        let v = policy.decide_at(domain, path, None);
        assert_eq!(
            (v.decision, v.layer),
            (Decision::Deny, Layer::Managed),
            "{path}: {v:?}"
        );
    }
    for command in [
        "sudo ls",
        "cd / && sudo -i",
        "true;reboot",
        "mkfs.ext4 /dev/sda1",
        "(dd if=/dev/zero of=/dev/sda)",
    ] {
        let v = policy.decide_command_at(command, "/home/alice/src/project", None);
        assert_eq!(
            (v.decision, v.layer),
            (Decision::Deny, Layer::Managed),
            "{command}: {v:?}"
        );
    }
    // It takes nothing else away: the account's own allows still apply, git still runs.
    let v = policy.decide_at(Domain::Read, "/home/alice/src/project/src/main.rs", None);
    assert_eq!(v.decision, Decision::Allow, "{v:?}");
    let v = policy.decide_command_at("git add -A", "/home/alice/src/project", None);
    assert_ne!(v.decision, Decision::Deny, "{v:?}");
}

#[test]
fn the_baseline_policy_commented_options_are_valid() {
    let text = uncommented(&read(BASELINE));
    let raw = RawPolicy::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(raw.accounts.is_some() && !raw.cap.is_empty(), "{text}");
    baseline_policy(&text);
}

/// A unit file as (section, key, value) triples, in order.
fn unit_entries(text: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
        } else if let Some((k, v)) = line.split_once('=') {
            out.push((section.clone(), k.trim().to_owned(), v.trim().to_owned()));
        } else {
            panic!("not a unit file line: {line}");
        }
    }
    out
}

/// The unit's `ExecStart=` lines as argument vectors, specifiers replaced by `dirs`' paths.
fn exec_starts(unit: &str, home: &Path, state_home: &Path) -> Vec<Vec<String>> {
    unit_entries(unit)
        .into_iter()
        .filter(|(s, k, v)| s == "Service" && k == "ExecStart" && !v.is_empty())
        .map(|(_, _, v)| {
            v.trim_start_matches(['-', '@', ':', '+', '!'])
                .split_whitespace()
                .map(|w| {
                    w.replace("%h", &home.to_string_lossy())
                        .replace("%S", &state_home.to_string_lossy())
                })
                .collect()
        })
        .collect()
}

fn parses(args: &[String]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_glovebox"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn every_exec_start_is_accepted_by_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let starts = exec_starts(&read(USER_UNIT), dir.path(), &dir.path().join("state"));
    assert_eq!(starts.len(), 1, "{starts:?}");
    for argv in starts {
        assert_eq!(argv[0], "/usr/bin/glovebox", "{argv:?}");
        let (ok, output) = parses(&argv[1..]);
        assert!(ok, "{argv:?}: {output}");
        assert!(output.contains("Usage: glovebox up"), "{output}");
        // The check has teeth: the same line with a flag `up` lacks is refused.
        let mut bad = argv[1..].to_vec();
        bad.push("--no-such-flag".to_owned());
        let (ok, output) = parses(&bad);
        assert!(!ok, "{bad:?}: {output}");
    }
}

/// The README's hardening table: `Key=Value` in the first cell of each row.
fn readme_claims() -> Vec<(String, String)> {
    let readme = read("README.md");
    let install = readme
        .split("\n## Install")
        .nth(1)
        .expect("README has an Install section");
    let install = install.split("\n## ").next().unwrap_or(install);
    install
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .filter_map(|(cell, _)| cell.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn the_user_unit_has_the_settings_the_readme_claims() {
    let entries = unit_entries(&read(USER_UNIT));
    let claims = readme_claims();
    assert!(claims.len() >= 5, "{claims:?}");
    for (key, value) in claims {
        assert!(
            entries.iter().any(|(_, k, v)| *k == key && *v == value),
            "README claims {key}={value}; {USER_UNIT} has {:?}",
            entries.iter().find(|(_, k, _)| *k == key)
        );
    }
    let has = |section: &str, key: &str| entries.iter().any(|(s, k, _)| s == section && k == key);
    assert!(has("Install", "WantedBy"));
    assert!(has("Unit", "AssertPathExists"));
}

#[test]
fn systemd_accepts_the_user_unit() {
    // `systemd-analyze verify` reports unknown keys and bad values without failing: any output
    // at all is a finding. The ExecStart binary must exist, so the built one stands in.
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    let unit = read(USER_UNIT).replace("/usr/bin/glovebox", env!("CARGO_BIN_EXE_glovebox"));
    let path = dir.path().join("glovebox.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["--user", "--man=no", "verify"])
        .arg(&path)
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .expect("systemd-analyze (the systemd package) is needed to check deploy/systemd");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

#[test]
fn the_system_unit_runs_up_system_as_the_binary_parses_it() {
    let dir = tempfile::tempdir().unwrap();
    let starts = exec_starts(&read(SYSTEM_UNIT), dir.path(), dir.path());
    assert_eq!(starts, vec![vec!["/usr/bin/glovebox", "up", "--system"]]);
    let (ok, output) = parses(&starts[0][1..]);
    assert!(ok && output.contains("Usage: glovebox up"), "{output}");
    assert!(
        output.contains("--system") && output.contains("--policy-dir"),
        "{output}"
    );
    let mut bad = starts[0][1..].to_vec();
    bad.push("--no-such-flag".to_owned());
    assert!(!parses(&bad).0);
    // The system mode overrides need --system (refused while parsing, before anything runs).
    let out = Command::new(env!("CARGO_BIN_EXE_glovebox"))
        .args(["up", "--runtime-dir", "/nonexistent/x"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("--system"), "{said}");
}

#[test]
fn the_system_unit_keeps_the_hardening_system_mode_needs() {
    let entries = unit_entries(&read(SYSTEM_UNIT));
    let value = |key: &str| {
        entries
            .iter()
            .find(|(s, k, _)| s == "Service" && k == key)
            .map(|(_, _, v)| v.clone())
            .unwrap_or_else(|| panic!("{SYSTEM_UNIT} has no {key}="))
    };
    // The supervisor starts as root: no User=, and the capabilities to switch and set up only.
    assert!(
        !entries
            .iter()
            .any(|(_, k, _)| k == "User" || k == "DynamicUser")
    );
    let caps: Vec<String> = value("CapabilityBoundingSet")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    for needed in [
        "CAP_SETUID",
        "CAP_SETGID",
        "CAP_CHOWN",
        "CAP_FOWNER",
        "CAP_KILL",
    ] {
        assert!(
            caps.iter().any(|c| c == needed),
            "{needed} missing: {caps:?}"
        );
    }
    assert!(!caps.iter().any(|c| c == "CAP_SYS_ADMIN"), "{caps:?}");
    assert_eq!(value("NoNewPrivileges"), "yes");
    assert_eq!(value("ProtectSystem"), "full");
    assert_eq!(value("PrivateTmp"), "yes");
    assert_eq!(value("RuntimeDirectory"), "glovebox");
    // Workdirs are usually in /home: not hidden from the executors.
    assert!(!entries.iter().any(|(_, k, _)| k == "ProtectHome"));
    assert!(value("RestrictAddressFamilies").contains("AF_UNIX"));
    assert!(value("SystemCallFilter").starts_with('~'));
}

#[test]
fn systemd_accepts_the_system_unit() {
    let dir = tempfile::tempdir().unwrap();
    let unit = read(SYSTEM_UNIT).replace("/usr/bin/glovebox", env!("CARGO_BIN_EXE_glovebox"));
    let path = dir.path().join("glovebox.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["--man=no", "verify"])
        .arg(&path)
        .output()
        .expect("systemd-analyze (the systemd package) is needed to check deploy/systemd");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

/// `[package.metadata.deb]` of the CLI crate: its assets (source, destination) and conf-files.
fn deb_metadata() -> (Vec<(String, String)>, Vec<String>) {
    let manifest = read("cli/Cargo.toml");
    let deb = manifest
        .split("\n[package.metadata.deb]\n")
        .nth(1)
        .expect("cli/Cargo.toml has [package.metadata.deb]");
    let deb = deb.split("\n[").next().unwrap_or(deb);
    let quoted = |line: &str| -> Vec<String> {
        line.split('"')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    let assets = deb
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("[\""))
        .map(|l| {
            let q = quoted(l);
            (q[0].clone(), q[1].clone())
        })
        .collect();
    let conf = deb
        .split("conf-files = [")
        .nth(1)
        .expect("conf-files")
        .split(']')
        .next()
        .unwrap()
        .lines()
        .flat_map(quoted)
        .collect();
    (assets, conf)
}

#[test]
fn the_package_ships_files_that_exist_or_that_build_assets_makes() {
    let (assets, conf) = deb_metadata();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(repo().join("deploy/build-assets.sh"))
        .env("GLOVEBOX", env!("CARGO_BIN_EXE_glovebox"))
        .env("OUT", dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut generated: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    generated.sort();
    let mut listed = Vec::new();
    for (source, dest) in &assets {
        assert!(
            !dest.starts_with('/'),
            "{dest}: cargo-deb destinations are relative"
        );
        if source == "target/release/glovebox" {
            assert_eq!(dest, "usr/bin/");
        } else if let Some(name) = source.strip_prefix("../deploy/generated/") {
            let made = std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
            assert!(!made.is_empty(), "build-assets.sh did not make {name}");
            listed.push(name.to_owned());
        } else {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(source);
            assert!(path.is_file(), "{source} is packaged but missing");
        }
    }
    listed.sort();
    assert_eq!(listed, generated, "every generated file is packaged");
    let dests: Vec<&str> = assets.iter().map(|(_, d)| d.as_str()).collect();
    assert!(
        dests.contains(&"usr/lib/systemd/user/glovebox.service"),
        "{dests:?}"
    );
    assert!(
        dests.contains(&"usr/share/man/man1/glovebox.1"),
        "{dests:?}"
    );
    assert_eq!(conf.len(), 2, "{conf:?}");
    for file in conf {
        assert!(
            file.starts_with("/etc/glovebox/") && dests.contains(&&file[1..]),
            "conffile {file} is not a packaged file under /etc/glovebox"
        );
    }
}
