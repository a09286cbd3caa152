//! The Debian package end to end, as root: built by cargo-deb from the debug binary this test
//! run already has (no release build), installed with `dpkg -i`, checked (`glovebox --version`,
//! `glovebox doctor --system`, the files and their modes, the users postinst made), removed with
//! `dpkg -r` (users and state stay) and purged with `dpkg -P` (they go).
//!
//! dpkg installs into /usr, /etc, /var and /run. The test isolates that from the host: it runs
//! the install in a private mount namespace (`unshare --mount`) where /etc, /usr and /var are
//! overlays whose writes land in a temporary directory and /run is a fresh tmpfs, so the host's
//! package database, users and files never change, and glovebox users another test made on the
//! host do not matter. Where that cannot be set up, it falls back to the host itself, and then
//! only on a machine with no trace of glovebox (no glovebox package from elsewhere, none of the
//! package's paths, no glovebox users or group), holding [`SYSTEM_LOCK`] (which any test that
//! makes glovebox's system users should take too), and purging whatever it installed however it
//! ends. Not root: it says why and returns.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use glovebox_config::system::{AUDIT_GROUP, BROKER_USER, GATE_USER, RUNTIME_DIR, STATE_DIR};

/// Held (flock) by every test that makes or removes glovebox's system users and directories.
pub const SYSTEM_LOCK: &str = "/tmp/glovebox-system-identities.lock";

/// Where the package puts things that must not exist before the test.
const SYSTEM_PATHS: &[&str] = &[
    "/usr/bin/glovebox",
    "/etc/glovebox",
    STATE_DIR,
    RUNTIME_DIR,
    "/usr/lib/sysusers.d/glovebox.conf",
    "/usr/lib/tmpfiles.d/glovebox.conf",
];

fn run(program: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(program)
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn getent(db: &str, name: &str) -> Option<String> {
    let (ok, out) = run("getent", &[db, name]);
    ok.then(|| out.trim().to_owned())
}

/// dpkg's status of the glovebox package (`ii `, `rc `...), empty when dpkg does not know it.
fn package_status() -> String {
    let (known, out) = run("dpkg-query", &["-W", "-f=${db:Status-Abbrev}", "glovebox"]);
    if known {
        out.trim().to_owned()
    } else {
        String::new()
    }
}

/// Why this machine is not one to install the package on, if it is not.
fn not_here() -> Option<String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Some("not root: dpkg -i needs root".to_owned());
    }
    if !Path::new("/usr/bin/dpkg").exists() {
        return Some("no dpkg on this machine".to_owned());
    }
    let status = package_status();
    if status.starts_with('i') || status.starts_with('r') || status.starts_with('h') {
        return Some(format!(
            "a glovebox package is already known to dpkg ({status})"
        ));
    }
    if let Some(path) = SYSTEM_PATHS.iter().find(|p| Path::new(p).exists()) {
        return Some(format!("{path} exists"));
    }
    for (db, name) in [
        ("passwd", GATE_USER),
        ("passwd", BROKER_USER),
        ("group", AUDIT_GROUP),
        ("group", GATE_USER),
        ("group", BROKER_USER),
    ] {
        if getent(db, name).is_some() {
            return Some(format!("the {db} entry {name} exists"));
        }
    }
    None
}

/// Purges the package and anything it left, when the test ends however it ends.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.scrub();
    }
}

impl Cleanup {
    fn scrub(&self) {
        if !package_status().is_empty() && !package_status().starts_with("un") {
            let (ok, out) = run("dpkg", &["--purge", "glovebox"]);
            if !ok {
                eprintln!("cleanup: dpkg --purge glovebox: {out}");
            }
        }
        for user in [GATE_USER, BROKER_USER].into_iter().chain(TEST_USERS) {
            if getent("passwd", user).is_some() {
                let _ = run("userdel", &[user]);
            }
        }
        for group in [AUDIT_GROUP, GATE_USER, BROKER_USER] {
            if getent("group", group).is_some() {
                let _ = run("groupdel", &[group]);
            }
        }
        for path in SYSTEM_PATHS {
            let _ = std::fs::remove_dir_all(path).or_else(|_| std::fs::remove_file(path));
        }
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Builds the .deb from the debug binary: cargo-deb packages `target/release/glovebox`, which it
/// maps into `$CARGO_TARGET_DIR`; a staging target dir holding the debug binary there stands in.
fn build_deb(out: &Path) -> PathBuf {
    let binary = env!("CARGO_BIN_EXE_glovebox");
    let release = out.join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    std::fs::copy(binary, release.join("glovebox")).unwrap();
    // The generated assets, where the metadata expects them (deploy/generated/, ignored by git).
    let assets = Command::new(repo().join("deploy/build-assets.sh"))
        .env("GLOVEBOX", binary)
        .output()
        .unwrap();
    assert!(
        assets.status.success(),
        "{}",
        String::from_utf8_lossy(&assets.stderr)
    );
    let deb = out.join("glovebox.deb");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let built = Command::new(&cargo)
        .args([
            "deb",
            "-p",
            "glovebox",
            "--no-build",
            "--locked",
            "--offline",
            "--fast",
        ])
        .arg("--output")
        .arg(&deb)
        .env("CARGO_TARGET_DIR", out.join("target"))
        .current_dir(repo())
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&built.stdout),
        String::from_utf8_lossy(&built.stderr)
    );
    assert!(
        !said.contains("no such command"),
        "cargo-deb is needed: cargo install cargo-deb --locked (tests/run does)\n{said}"
    );
    assert!(built.status.success(), "{said}");
    deb
}

fn mode_and_owner(path: &str) -> (u32, u32, u32) {
    let meta = std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    (meta.mode() & 0o7777, meta.uid(), meta.gid())
}

/// A passwd entry's uid and shell.
fn passwd(user: &str) -> (u32, String) {
    let entry = getent("passwd", user).unwrap_or_else(|| panic!("no user {user}"));
    let fields: Vec<&str> = entry.split(':').collect();
    (fields[2].parse().unwrap(), fields[6].to_owned())
}

fn doctor_lines(args: &[&str]) -> (i32, Vec<String>) {
    let out = Command::new("/usr/bin/glovebox")
        .arg("doctor")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect(),
    )
}

fn seconds(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// The users [`started_with_no_account_then_one_added`] makes for its account.
const TEST_USERS: [&str; 2] = ["gbpkg-run", "gbpkg-own"];

/// The service as the unit starts it (`up --system`, on a free port): it starts with the
/// config as shipped (no account), says so, and `doctor --system` passes it; an account added
/// at run time runs, and doctor passes that too, and again after the package is upgraded
/// (installed again) under it. Only FAILs of kernel checks that user-mode
/// doctor shares on this machine are allowed.
fn started_with_no_account_then_one_added(deb: &str, kernel_fails: &[String]) {
    use std::io::BufRead;
    /// The service, stopped however the test ends (a failed assertion must not leave it running).
    struct Service(std::process::Child);
    impl Drop for Service {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut up = Service(
        Command::new("/usr/bin/glovebox")
            .args(["up", "--system", "--listen", "127.0.0.1:0"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = up.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut banner = Vec::new();
    while !banner
        .iter()
        .any(|l: &String| l.contains("no accounts yet"))
    {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => banner.push(line),
            Err(_) => {
                panic!(
                    "up --system did not say it has no accounts:\n{}",
                    banner.join("\n")
                );
            }
        }
    }
    let passes = |what: &str| {
        let (code, lines) = doctor_lines(&["--system"]);
        let all = lines.join("\n");
        eprintln!("glovebox doctor --system, {what}:\n{all}");
        let fails: Vec<&String> = lines
            .iter()
            .filter(|l| l.starts_with("FAIL "))
            .filter(|l| {
                !kernel_fails
                    .iter()
                    .any(|k| l.starts_with(&format!("FAIL {k}: ")))
            })
            .collect();
        assert!(fails.is_empty(), "{what}: {fails:?}\n{all}");
        assert_eq!(
            code == 0,
            kernel_fails.is_empty(),
            "{what}: exit {code}\n{all}"
        );
        assert!(all.contains("OK services: health ok"), "{what}:\n{all}");
        all
    };
    let all = passes("started with no account");
    assert!(all.contains("WARN accounts: no accounts yet"), "{all}");
    for user in TEST_USERS {
        let (ok, out) = run("useradd", &["--system", "--no-create-home", user]);
        assert!(ok, "useradd {user}: {out}");
    }
    let work = "/var/lib/gbpkg-work";
    std::fs::create_dir_all(work).unwrap();
    let (ok, out) = run("chown", &[TEST_USERS[0], work]);
    assert!(ok, "{out}");
    let (ok, out) = run(
        "/usr/bin/glovebox",
        &[
            "account",
            "add",
            "pk",
            "--workdir",
            work,
            "--run-as",
            TEST_USERS[0],
            "--owner",
            TEST_USERS[1],
            "--system",
        ],
    );
    assert!(ok, "account add: {out}");
    let socket = Path::new(RUNTIME_DIR).join("exec-pk/executor.sock");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "no executor for the added account"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let all = passes("with an account added");
    assert!(all.contains("OK accounts: pk (added)"), "{all}");
    // An upgrade (the same package again) while it runs leaves its state as glovebox set it:
    // the gate still writes there (a change of the account), and doctor still passes.
    let before = mode_and_owner(STATE_DIR);
    let (ok, out) = run("dpkg", &["-i", deb]);
    assert!(ok, "dpkg -i (upgrade): {out}");
    assert_eq!(
        mode_and_owner(STATE_DIR),
        before,
        "the upgrade changed {STATE_DIR}"
    );
    assert!(Path::new(STATE_DIR).join("accounts.yaml").exists());
    let (ok, out) = run(
        "/usr/bin/glovebox",
        &["account", "set-owner", "pk", "root", "--system"],
    );
    assert!(!ok && out.contains("must not be root"), "{out}");
    let root = "/var/lib/gbpkg-root";
    std::fs::create_dir_all(root).unwrap();
    let (ok, out) = run(
        "/usr/bin/glovebox",
        &["account", "add-root", "pk", root, "--system"],
    );
    assert!(ok, "a change after the upgrade: {out}");
    passes("after an upgrade");
    let _ = std::fs::remove_dir_all(root);
    let (ok, out) = run(
        "/usr/bin/glovebox",
        &["account", "remove", "pk", "--system"],
    );
    assert!(ok, "account remove: {out}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(up.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = up.0.wait().unwrap();
    assert!(status.success(), "up --system stopped with {status}");
    for user in TEST_USERS {
        let _ = run("userdel", &[user]);
    }
    let _ = std::fs::remove_dir_all(work);
}

/// The namespace's mounts: overlays on /etc, /usr and /var with their upper layers in `$1`, a
/// tmpfs on /run; then the command that follows. Exits 97 when a mount fails.
const ISOLATE: &str = r#"upper="$1"; shift
for d in etc usr var; do
    mkdir -p "$upper/$d/up" "$upper/$d/work"
    mount -t overlay overlay -o "lowerdir=/$d,upperdir=$upper/$d/up,workdir=$upper/$d/work" "/$d" || exit 97
done
mount -t tmpfs tmpfs /run || exit 97
exec "$@""#;

/// The test's name, for running it again inside the namespace.
const IN_NAMESPACE: &str = "package::install_check_remove_purge_inside_the_namespace";

#[test]
fn the_deb_installs_runs_doctor_removes_and_purges() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("the package test does not run here: not root (dpkg -i needs root)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let deb = build_deb(dir.path());
    let build_time = started.elapsed();
    let size = std::fs::metadata(&deb).unwrap().len();
    eprintln!(
        "package: {} ({size} bytes, cargo-deb --fast from the debug binary) built in {}",
        deb.display(),
        seconds(build_time)
    );

    // Isolated: this test binary again, inside a private mount namespace.
    let upper = dir.path().join("overlay");
    let isolated = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
            ISOLATE,
            "isolate",
        ])
        .arg(&upper)
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            IN_NAMESPACE,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DEB_ENV, &deb)
        .output();
    match isolated {
        Ok(out) if out.status.code() != Some(97) => {
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success(), "in the namespace:\n{said}");
            assert!(
                said.contains("1 passed"),
                "the test did not run in the namespace:\n{said}"
            );
            eprintln!("{said}");
        }
        other => {
            eprintln!("no private mount namespace here ({other:?}); installing on the host");
            on_the_host(&deb);
        }
    }
}

/// Set (to the .deb) when the test runs inside the namespace.
const DEB_ENV: &str = "GLOVEBOX_TEST_DEB_IN_NAMESPACE";

#[test]
#[ignore = "run by the_deb_installs_runs_doctor_removes_and_purges inside a private mount namespace"]
fn install_check_remove_purge_inside_the_namespace() {
    let Some(deb) = std::env::var_os(DEB_ENV) else {
        eprintln!("only run inside the namespace the package test makes");
        return;
    };
    // Only this namespace's overlays change (checked: never scrub the host): traces of glovebox
    // on the host go from them first.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    for point in ["/etc", "/usr", "/var"] {
        assert!(
            mounts.contains(&format!("overlay {point} overlay ")),
            "{point} is not this namespace's overlay:\n{mounts}"
        );
    }
    Cleanup.scrub();
    if let Some(why) = not_here() {
        panic!("the namespace is not clean: {why}");
    }
    install_check_remove_purge(Path::new(&deb));
}

/// The fallback: the host itself, when nothing of glovebox is there, under the lock.
fn on_the_host(deb: &Path) {
    if let Some(why) = not_here() {
        eprintln!("the package test does not run here: {why}");
        return;
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(SYSTEM_LOCK)
        .unwrap();
    let _lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .unwrap();
    // Checked again under the lock: another such test may have just begun or ended.
    if let Some(why) = not_here() {
        eprintln!("the package test does not run here: {why}");
        return;
    }
    let _cleanup = Cleanup;
    install_check_remove_purge(deb);
}

fn install_check_remove_purge(deb: &Path) {
    let deb = deb.to_str().unwrap();
    // Install.
    let started = Instant::now();
    let (ok, out) = run("dpkg", &["-i", deb]);
    let install_time = started.elapsed();
    assert!(ok, "dpkg -i: {out}");
    assert!(package_status().starts_with("ii"), "{}", package_status());
    let (ok, version) = run("/usr/bin/glovebox", &["--version"]);
    assert!(ok && version.starts_with("glovebox "), "{version}");
    // The license the manifest names, as the repository holds it.
    assert_eq!(
        std::fs::read_to_string("/usr/share/doc/glovebox/LICENSE").unwrap(),
        std::fs::read_to_string(repo().join("LICENSE")).unwrap()
    );

    // The files, root's, with their modes; the directories tmpfiles.d made.
    for (path, mode) in [
        ("/usr/bin/glovebox", 0o755),
        ("/usr/lib/sysusers.d/glovebox.conf", 0o644),
        ("/usr/lib/tmpfiles.d/glovebox.conf", 0o644),
        ("/usr/lib/systemd/user/glovebox.service", 0o644),
        ("/etc/glovebox/glovebox.yaml", 0o644),
        ("/etc/glovebox", 0o755),
        ("/etc/glovebox/policy.d", 0o755),
        ("/etc/glovebox/policy.d/00-baseline.yaml", 0o644),
        ("/usr/share/man/man1/glovebox.1.gz", 0o644),
        ("/usr/share/bash-completion/completions/glovebox", 0o644),
        ("/usr/share/doc/glovebox/LICENSE", 0o644),
        ("/usr/share/doc/glovebox/NOTICE", 0o644),
        (STATE_DIR, 0o755),
        (RUNTIME_DIR, 0o755),
    ] {
        assert_eq!(mode_and_owner(path), (mode, 0, 0), "{path}");
    }
    // The users and group postinst made: system ids, no login shell.
    for user in [GATE_USER, BROKER_USER] {
        let (uid, shell) = passwd(user);
        assert!(uid > 0 && uid < 1000, "{user}: uid {uid}");
        assert!(
            shell.ends_with("nologin") || shell.ends_with("false"),
            "{user}: {shell}"
        );
    }
    assert!(getent("group", AUDIT_GROUP).is_some());

    // doctor --system: the identities and the installed files pass; what fails is only what a
    // running service or an administrator's config adds (and a kernel feature this machine
    // lacks, which user-mode doctor reports the same way).
    let (code, lines) = doctor_lines(&["--system"]);
    let all = lines.join("\n");
    eprintln!("glovebox doctor --system, installed and not started:\n{all}");
    assert_eq!(code, 1, "{all}");
    for ok in [
        format!("OK user {GATE_USER}: "),
        format!("OK user {BROKER_USER}: "),
        format!("OK group {AUDIT_GROUP}: "),
        format!("WARN dir {STATE_DIR}: as the package made it (root 0755)"),
        format!("OK dir {RUNTIME_DIR}: 0755 root"),
        "OK dir /etc/glovebox/policy.d: 0755 root".to_owned(),
        "OK policy /etc/glovebox/policy.d/00-baseline.yaml: compiles".to_owned(),
        "OK config: /etc/glovebox/glovebox.yaml".to_owned(),
    ] {
        assert!(lines.iter().any(|l| l.starts_with(&ok)), "no {ok}:\n{all}");
    }
    let scratch = tempfile::tempdir().unwrap();
    let (_, user_mode) = doctor_lines(&["--state-dir", scratch.path().to_str().unwrap()]);
    let check_of = |l: &str| {
        l.strip_prefix("FAIL ")
            .and_then(|r| r.split_once(": "))
            .map(|(c, _)| c.to_owned())
    };
    let kernel_fails: Vec<String> = user_mode.iter().filter_map(|l| check_of(l)).collect();
    let kernel = [
        "landlock",
        "landlock scopes",
        "no_new_privs",
        "cgroups",
        "walls",
    ];
    let kernel_fails: Vec<String> = kernel_fails
        .into_iter()
        .filter(|c| kernel.contains(&c.as_str()))
        .collect();
    for check in lines.iter().filter_map(|l| check_of(l)) {
        let expected = check == "services" || kernel_fails.contains(&check);
        assert!(expected, "unexpected FAIL {check}:\n{all}");
    }
    // As shipped, the config has no account: doctor says so, with the command that adds one.
    assert!(all.contains("WARN accounts: no accounts yet"), "{all}");
    assert!(
        all.contains("FAIL services: glovebox is not running"),
        "{all}"
    );
    started_with_no_account_then_one_added(deb, &kernel_fails);

    // A key under the state dir, as the supervisor will make them: remove keeps it.
    std::fs::write(Path::new(STATE_DIR).join("marker"), "state").unwrap();

    // Remove: the binary goes; users, group, state and conffiles stay.
    let started = Instant::now();
    let (ok, out) = run("dpkg", &["-r", "glovebox"]);
    let remove_time = started.elapsed();
    assert!(ok, "dpkg -r: {out}");
    assert!(package_status().starts_with("rc"), "{}", package_status());
    assert!(!Path::new("/usr/bin/glovebox").exists());
    assert!(!Path::new("/usr/lib/sysusers.d/glovebox.conf").exists());
    for (db, name) in [
        ("passwd", GATE_USER),
        ("passwd", BROKER_USER),
        ("group", AUDIT_GROUP),
    ] {
        assert!(getent(db, name).is_some(), "dpkg -r removed {name}");
    }
    assert!(
        Path::new(STATE_DIR).join("marker").exists(),
        "dpkg -r removed the state"
    );
    assert!(
        Path::new("/etc/glovebox/glovebox.yaml").exists(),
        "a conffile went on remove"
    );

    // Purge: users, group, state and conffiles go.
    let started = Instant::now();
    let (ok, out) = run("dpkg", &["-P", "glovebox"]);
    let purge_time = started.elapsed();
    assert!(ok, "dpkg -P: {out}");
    assert!(
        package_status().is_empty() || package_status().starts_with("un"),
        "{}",
        package_status()
    );
    for (db, name) in [
        ("passwd", GATE_USER),
        ("passwd", BROKER_USER),
        ("group", AUDIT_GROUP),
        ("group", GATE_USER),
        ("group", BROKER_USER),
    ] {
        assert!(
            getent(db, name).is_none(),
            "dpkg -P left the {db} entry {name}"
        );
    }
    for path in [STATE_DIR, RUNTIME_DIR, "/etc/glovebox"] {
        assert!(!Path::new(path).exists(), "dpkg -P left {path}");
    }
    eprintln!(
        "package: dpkg -i {}, dpkg -r {}, dpkg -P {}",
        seconds(install_time),
        seconds(remove_time),
        seconds(purge_time)
    );
}
