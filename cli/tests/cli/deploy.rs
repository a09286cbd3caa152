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
    // A list item that is a path (`- /home/alice/src/project`).
    if rest.trim_start().starts_with("- /") {
        return true;
    }
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
    // As shipped it has no account: the package's service starts with none.
    assert!(config.accounts.is_empty());
    // The commented-out accounts are valid system-mode accounts.
    let full = uncommented(&text).replace("\naccounts: []\n", "\naccounts:\n");
    let config = glovebox_config::Config::parse(&full, Path::new(EXAMPLE_CONFIG))
        .unwrap_or_else(|e| panic!("{e}\n{full}"));
    let ids: Vec<&str> = config.accounts.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["alice", "ci-bot"], "{full}");
    assert_eq!(config.accounts[0].roots.len(), 2);
    for a in &config.accounts {
        assert!(a.run_as.is_some() && a.owner.is_some(), "{}", a.id);
    }
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
        } else if let Some(dir) = source.strip_suffix("/*.md") {
            // The documentation pages: a directory of them, into a directory.
            assert!(dest.ends_with('/'), "{dest}: a directory for {source}");
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
            let pages = std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "md"))
                .count();
            assert!(pages > 0, "{source} matches no page");
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

const SYSUSERS: &str = "deploy/sysusers.d/glovebox.conf";
const TMPFILES: &str = "deploy/tmpfiles.d/glovebox.conf";

/// The (type, name or path, rest...) entries of a sysusers.d or tmpfiles.d file.
fn entries(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            // A quoted field (a GECOS) is one word.
            let mut words = Vec::new();
            let mut rest = l;
            while !rest.is_empty() {
                rest = rest.trim_start();
                if let Some(quoted) = rest.strip_prefix('"') {
                    let (word, after) = quoted.split_once('"').unwrap();
                    words.push(word.to_owned());
                    rest = after;
                } else {
                    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                    words.push(rest[..end].to_owned());
                    rest = &rest[end..];
                }
            }
            words
        })
        .collect()
}

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

#[test]
fn sysusers_makes_the_users_and_group_the_code_names() {
    use glovebox_config::system::{AUDIT_GROUP, BROKER_USER, GATE_USER};
    let text = read(SYSUSERS);
    let made: Vec<(String, String)> = entries(&text)
        .into_iter()
        .map(|e| (e[0].clone(), e[1].clone()))
        .collect();
    let want = [
        ("g".to_owned(), AUDIT_GROUP.to_owned()),
        ("u".to_owned(), GATE_USER.to_owned()),
        ("u".to_owned(), BROKER_USER.to_owned()),
    ];
    assert_eq!(made, want, "{SYSUSERS}");
    if !is_root() {
        eprintln!("not root: systemd-sysusers --root is not run");
        return;
    }
    // What systemd-sysusers makes of it, in an empty root: system ids, no login shell.
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("etc")).unwrap();
    systemd_tool("systemd-sysusers", root.path(), &[], &text);
    let passwd = std::fs::read_to_string(root.path().join("etc/passwd")).unwrap();
    for user in [GATE_USER, BROKER_USER] {
        let fields: Vec<&str> = passwd
            .lines()
            .find(|l| l.starts_with(&format!("{user}:")))
            .unwrap_or_else(|| panic!("no {user}: {passwd}"))
            .split(':')
            .collect();
        let uid: u32 = fields[2].parse().unwrap();
        assert!(uid > 0 && uid < 1000, "{fields:?}");
        assert!(fields[6].ends_with("nologin"), "{fields:?}");
    }
    let group = std::fs::read_to_string(root.path().join("etc/group")).unwrap();
    assert!(
        group
            .lines()
            .any(|l| l.starts_with(&format!("{AUDIT_GROUP}:"))),
        "{group}"
    );
}

/// Runs `tool` (systemd-sysusers, systemd-tmpfiles) on `config` (read from stdin) in the
/// empty root `root`, with `args`; fails the test if it fails.
fn systemd_tool(tool: &str, root: &Path, args: &[&str], config: &str) {
    let mut child = Command::new(tool)
        .arg(format!("--root={}", root.display()))
        .args(args)
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{tool} (the systemd package) checks deploy/: {e}"));
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), config.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{tool}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn tmpfiles_makes_the_default_directories_root_0755() {
    use glovebox_config::system::{RUNTIME_DIR, STATE_DIR};
    let text = read(TMPFILES);
    let dirs: Vec<Vec<String>> = entries(&text);
    // The state directory's mode and owners only when tmpfiles makes it: an upgrade must not
    // take it back from the gate.
    let want: Vec<Vec<String>> = [
        [STATE_DIR, ":0755", ":root", ":root"],
        [RUNTIME_DIR, "0755", "root", "root"],
    ]
    .iter()
    .map(|[p, mode, user, group]| {
        ["d", p, mode, user, group, "-"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    })
    .collect();
    assert_eq!(dirs, want, "{TMPFILES}");
    if !is_root() {
        eprintln!("not root: systemd-tmpfiles --root is not run");
        return;
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let root = tempfile::tempdir().unwrap();
    let create = || systemd_tool("systemd-tmpfiles", root.path(), &["--create"], &text);
    create();
    let state = root.path().join(&STATE_DIR[1..]);
    for dir in [STATE_DIR, RUNTIME_DIR] {
        let meta = std::fs::metadata(root.path().join(&dir[1..])).unwrap();
        assert_eq!((meta.mode() & 0o7777, meta.uid()), (0o755, 0), "{dir}");
    }
    // As the supervisor leaves it; an upgrade's --create leaves it so.
    std::os::unix::fs::chown(&state, Some(4242), Some(4243)).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o2710)).unwrap();
    create();
    let meta = std::fs::metadata(&state).unwrap();
    assert_eq!(
        (meta.mode() & 0o7777, meta.uid(), meta.gid()),
        (0o2710, 4242, 4243)
    );
}

/// Runs maintainer script `name` with `args`, the system commands it may call replaced by ones
/// that log their arguments (nothing on this machine changes): what it would have run.
fn run_maintainer_script(name: &str, prelude: &str, args: &[&str]) -> Vec<String> {
    run_script_text(name, &read(&format!("deploy/debian/{name}")), prelude, args)
}

/// [`run_maintainer_script`] with the script's text given.
fn run_script_text(name: &str, script: &str, prelude: &str, args: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = dir.path().join("log");
    for command in [
        "systemd-sysusers",
        "systemd-tmpfiles",
        "systemctl",
        "useradd",
        "groupadd",
        "userdel",
        "groupdel",
        "rm",
        "install",
        "getent",
    ] {
        // getent finds nothing before a purge's users are made; everything after a purge exists.
        let status = if command == "getent" { "$GETENT" } else { "0" };
        let path = bin.join(command);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho \"{command} $*\" >> {}\nexit {status}\n",
                log.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{prelude}\n{script}"))
        .arg(name)
        .args(args)
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("GETENT", if args == ["purge"] { "0" } else { "2" })
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with("getent ") && !l.starts_with("systemctl "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_maintainer_scripts_make_users_and_remove_them_and_the_state_only_on_purge() {
    use glovebox_config::system::{AUDIT_GROUP, BROKER_USER, GATE_USER, STATE_DIR};
    use std::os::unix::fs::PermissionsExt;
    let (assets, _) = deb_metadata();
    let dests: Vec<&str> = assets.iter().map(|(_, d)| d.as_str()).collect();
    for (file, dest) in [
        (SYSUSERS, "usr/lib/sysusers.d/glovebox.conf"),
        (TMPFILES, "usr/lib/tmpfiles.d/glovebox.conf"),
    ] {
        assert!(dests.contains(&dest), "{file} is not packaged as {dest}");
        assert!(
            read("deploy/debian/postinst").contains(&format!("/{dest}")),
            "postinst does not apply /{dest}"
        );
    }
    assert!(
        read("cli/Cargo.toml").contains("\nmaintainer-scripts = \"../deploy/debian/\"\n"),
        "cargo-deb metadata names deploy/debian/"
    );
    for name in ["postinst", "prerm", "postrm"] {
        let path = repo().join("deploy/debian").join(name);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755, "{name}");
        let syntax = Command::new("/bin/sh")
            .arg("-n")
            .arg(&path)
            .output()
            .unwrap();
        assert!(syntax.status.success(), "{name}: {syntax:?}");
    }
    // postinst: systemd-sysusers and systemd-tmpfiles on the packaged files ...
    let ran = run_maintainer_script("postinst", "", &["configure"]);
    assert_eq!(
        ran,
        [
            "systemd-sysusers /usr/lib/sysusers.d/glovebox.conf",
            "systemd-tmpfiles --create /usr/lib/tmpfiles.d/glovebox.conf"
        ]
    );
    // ... and without them, the shadow tools make the same users from the same file.
    let fallback = format!(
        "command() {{ case \"$2\" in systemd-*) return 1;; esac; return 0; }}\n\
         SYSUSERS_FILE={}",
        repo().join(SYSUSERS).display()
    );
    let script = read("deploy/debian/postinst").replace(
        "SYSUSERS=/usr/lib/sysusers.d/glovebox.conf",
        "SYSUSERS=$SYSUSERS_FILE",
    );
    let ran = run_script_text("postinst", &script, &fallback, &["configure"]);
    let nologin = if Path::new("/usr/sbin/nologin").exists() {
        "/usr/sbin/nologin"
    } else {
        "/bin/false"
    };
    let useradd = |u: &str| {
        format!("useradd --system --user-group --no-create-home --home-dir / --shell {nologin} {u}")
    };
    // Only the directories that are missing (here, on this machine) are made.
    let mut want = vec![
        format!("groupadd --system {AUDIT_GROUP}"),
        useradd(GATE_USER),
        useradd(BROKER_USER),
    ];
    for dir in ["/var/lib/glovebox", "/run/glovebox"] {
        if !Path::new(dir).is_dir() {
            want.push(format!("install -d -m 0755 -o root -g root {dir}"));
        }
    }
    assert_eq!(ran, want);
    // prerm stops nothing it does not run; postrm keeps users and state on remove and upgrade ...
    for args in [["remove"], ["upgrade"]] {
        assert!(
            run_maintainer_script("postrm", "", &args).is_empty(),
            "{args:?}"
        );
        assert!(
            run_maintainer_script("prerm", "", &args).is_empty(),
            "{args:?}"
        );
    }
    // ... and removes them on purge.
    let ran = run_maintainer_script("postrm", "", &["purge"]);
    assert_eq!(
        ran,
        [
            format!("rm -rf {STATE_DIR} {STATE_DIR}-packs /run/glovebox"),
            format!("userdel {GATE_USER}"),
            format!("userdel {BROKER_USER}"),
            format!("groupdel {AUDIT_GROUP}"),
            format!("groupdel {GATE_USER}"),
            format!("groupdel {BROKER_USER}"),
        ]
    );
}

/// `NOTICE`: the third-party crates compiled into the `glovebox` binary (its normal
/// dependencies, for this machine's target, without proc-macros, which run only while building),
/// each with its version, license and source, as `cargo metadata` reads `Cargo.lock`.
fn notice_text() -> String {
    let target = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--offline",
            "--filter-platform",
            &target,
        ])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages: std::collections::HashMap<&str, &serde_json::Value> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect();
    let nodes: std::collections::HashMap<&str, &serde_json::Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    let is_proc_macro = |p: &serde_json::Value| {
        p["targets"].as_array().unwrap().iter().all(|t| {
            t["kind"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k == "proc-macro")
        })
    };
    let root = packages
        .values()
        .find(|p| p["name"] == "glovebox" && p["source"].is_null())
        .unwrap()["id"]
        .as_str()
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut todo = vec![root];
    while let Some(id) = todo.pop() {
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let normal = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null());
            let dep_id = dep["pkg"].as_str().unwrap();
            if normal && !is_proc_macro(packages[dep_id]) && seen.insert(dep_id) {
                todo.push(dep_id);
            }
        }
    }
    let mut lines: Vec<String> = seen
        .iter()
        .map(|id| packages[id])
        .filter(|p| !p["source"].is_null())
        .map(|p| {
            format!(
                "{} {}: {}{}",
                p["name"].as_str().unwrap(),
                p["version"].as_str().unwrap(),
                p["license"].as_str().unwrap_or("see its license file"),
                p["repository"]
                    .as_str()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )
        })
        .collect();
    lines.sort();
    lines.dedup();
    format!(
        "glovebox\nCopyright the glovebox developers. Licensed under the Apache License, Version 2.0 \
         (LICENSE).\n\nThe glovebox binary includes the following third-party Rust crates, each \
         under the license named (their license texts ship with their sources on crates.io):\n\n{}\n",
        lines.join("\n")
    )
}

/// NOTICE is current with Cargo.lock (`GLOVEBOX_WRITE_NOTICE=1 cargo test -p glovebox --test
/// cli notice` rewrites it), and the package ships it beside LICENSE.
#[test]
fn the_notice_names_every_crate_the_binary_includes() {
    let want = notice_text();
    if std::env::var_os("GLOVEBOX_WRITE_NOTICE").is_some() {
        std::fs::write(repo().join("NOTICE"), &want).unwrap();
    }
    let have = read("NOTICE");
    assert!(
        have == want,
        "NOTICE is not current with Cargo.lock: GLOVEBOX_WRITE_NOTICE=1 cargo test -p glovebox \
         --test cli notice"
    );
    for crate_line in ["tokio ", "tonic ", "serde ", "landlock "] {
        assert!(
            have.lines().any(|l| l.starts_with(crate_line)),
            "{crate_line}"
        );
    }
    let manifest = read("cli/Cargo.toml");
    assert!(
        manifest.contains(r#"["../NOTICE", "usr/share/doc/glovebox/NOTICE", "644"]"#),
        "the package does not ship NOTICE"
    );
}
