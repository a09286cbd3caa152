//! Accounts added at run time in system mode (`glovebox account add --system` as root): two
//! accounts owned by two users; each owner reads only its own agent token (`glovebox token show
//! --system`, over the approve socket, known by its uid), never from the state; another user
//! cannot add an account; and from inside an approved job of one account, the other's token and
//! the admin socket stay out of reach. The gate takes every change (add, set-workdir, remove)
//! without restarting, refuses a removed account's executor credential at once, and refuses an
//! account whose agent user is its own approver.

use super::*;

/// `glovebox ARGS --system` against this glovebox, as root.
pub(super) fn as_root(s: &System, args: &[&str]) -> std::process::Output {
    as_user(s, None, args)
}

/// `glovebox ARGS --system --state-dir STATE --runtime-dir RUNTIME`, as `user` (root if `None`).
fn as_user(s: &System, user: Option<&TestUser>, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(glovebox_bin());
    c.args(args)
        .arg("--system")
        .arg("--state-dir")
        .arg(&s.state)
        .arg("--runtime-dir")
        .arg(&s.runtime)
        .stdin(Stdio::null());
    if let Some(u) = user {
        c.uid(u.uid).gid(u.gid).env("HOME", "/");
    }
    c.output().unwrap()
}

/// `glovebox token show --system [--account ID]` run by `user`.
fn token_show_as(s: &System, user: &TestUser, account: Option<&str>) -> std::process::Output {
    s.run_as_user(Some(user), &["token", "show"], account)
}

/// An account added at run time: its users and workdir.
pub(super) struct Added {
    pub(super) id: &'static str,
    pub(super) run_as: TestUser,
    pub(super) owner: TestUser,
    pub(super) workdir: PathBuf,
}

pub(super) fn add(s: &System, id: &'static str) -> Added {
    let run_as = TestUser::new("r");
    let owner = TestUser::new("o");
    let workdir = s.root.join(format!("work-{id}"));
    std::fs::create_dir(&workdir).unwrap();
    std::fs::write(workdir.join("hello.txt"), id).unwrap();
    std::os::unix::fs::chown(&workdir, Some(run_as.uid), Some(run_as.gid)).unwrap();
    std::fs::set_permissions(&workdir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = as_root(
        s,
        &[
            "account",
            "add",
            id,
            "--workdir",
            workdir.to_str().unwrap(),
            "--run-as",
            &run_as.name,
            "--owner",
            &owner.name,
            "--enabled",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Added {
        id,
        run_as,
        owner,
        workdir,
    }
}

/// A channel to the gate's audit socket proving `peer`'s key (derived, as the supervisor does,
/// from the state's control key).
fn audit_channel_as(s: &System, peer: &str) -> glovebox_proto::transport::Link {
    use glovebox_proto::transport::handover::{ControlKeys, socket};
    let keys =
        ControlKeys::from_bytes(&std::fs::read(s.state.join("control.key")).unwrap()).unwrap();
    glovebox_proto::transport::authenticated_channel(
        &s.runtime.join("audit/audit.sock"),
        peer,
        keys.key(socket::AUDIT, peer),
    )
}

/// The owner's `token show`, once the supervisor has told the broker of the account.
fn own_token(s: &System, a: &Added) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let out = token_show_as(s, &a.owner, None);
        if out.status.success() {
            return String::from_utf8(out.stdout).unwrap().trim().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "{}'s owner never got its token: {}",
            a.id,
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test]
async fn a_service_with_no_accounts_starts_and_doctor_passes_it_before_and_after_one_is_added() {
    if !is_root() {
        return;
    }
    // As the package ships it: no account in glovebox.yaml.
    let s = System::start(Setup::default());
    let report = s.doctor_passes();
    assert!(
        report.contains("WARN accounts: no accounts yet\n    fix: glovebox account add ID"),
        "doctor:\n{report}"
    );
    let a = add(&s, "late");
    // Once the supervisor runs its executor, doctor knows the account and its sockets.
    let exec_dir = s.runtime.join("exec-late");
    let deadline = Instant::now() + WAIT;
    while !exec_dir.join("executor.sock").exists() {
        assert!(
            Instant::now() < deadline,
            "no executor for the added account"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let report = s.doctor_passes();
    assert!(
        report.contains("OK accounts: late (added)\n"),
        "doctor:\n{report}"
    );
    assert!(
        report.contains(&format!(
            "OK dir {}: 0750 {}",
            exec_dir.display(),
            a.run_as.name
        )),
        "doctor:\n{report}"
    );
    assert!(report.contains(" OK, 0 WARN, 0 FAIL"), "doctor:\n{report}");
    // And the account works.
    let token = own_token(&s, &a);
    let mut agent = Client::connect(&s.url, Auth::Header(&token), "agent").await;
    let r = agent
        .invoke("r1", "file_read", json!({"path": "hello.txt"}))
        .await;
    assert_eq!(expect_ok(&r)["content"], "late", "{r}");
    // The only account is the one a command acts for when --account is left out, in system
    // mode as in user mode: root rotates its token without naming it, and the old one is refused.
    let out = as_root(&s, &["token", "rotate", "--role", "agent"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("new agent token for account late"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_ne!(own_token(&s, &a), token);
    assert_eq!(
        glovebox_e2e::open(&s.url, Auth::Header(&token)).await.err(),
        Some(401)
    );
}

/// Whether `user` owns `account` as the running broker sees it: `secret list` over the approve
/// socket works only for the account's owner.
fn owns(s: &System, user: &TestUser, account: &str) -> bool {
    super::glovebox_as(s, user, &["secret", "list", "--account", account], "").0 == 0
}

#[tokio::test]
async fn an_account_of_glovebox_yaml_gets_another_owner_and_workdir_at_run_time() {
    if !is_root() {
        return;
    }
    let s = System::start(Setup {
        accounts: &["a"],
        ..Default::default()
    });
    let a = s.account("a");
    assert!(owns(&s, &a.owner, "a"));
    let next = TestUser::new("o");
    assert!(!owns(&s, &next, "a"));
    // Its own agent user, root, or nobody: refused, and nothing written.
    for (owner, why) in [
        (a.run_as.name.as_str(), "are the same user"),
        ("root", "must not be root"),
        ("no-such-user-here", "does not exist"),
    ] {
        let out = as_root(&s, &["account", "set-owner", "a", owner]);
        assert!(!out.status.success(), "{owner}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{owner}: {err}");
    }
    assert!(!s.state.join("accounts.yaml").exists());
    // Another person: the account is taken over into accounts.yaml, and the broker follows.
    let out = as_root(&s, &["account", "set-owner", "a", &next.name]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + WAIT;
    while !owns(&s, &next, "a") {
        assert!(
            Instant::now() < deadline,
            "the new owner never owned the account"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!owns(&s, &a.owner, "a"), "the old owner still owns it");
    // And it moves, as an added account does; its agent's token still works there.
    let two = s.root.join("work-a-two");
    std::fs::create_dir(&two).unwrap();
    std::fs::write(two.join("hello.txt"), "moved").unwrap();
    std::os::unix::fs::chown(&two, Some(a.run_as.uid), Some(a.run_as.gid)).unwrap();
    std::fs::set_permissions(&two, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = as_root(&s, &["account", "set-workdir", "a", two.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut agent = s.agent("a").await;
    let deadline = Instant::now() + WAIT;
    loop {
        let r = agent
            .invoke("r", "file_read", json!({"path": "hello.txt"}))
            .await;
        if r["result"]["content"] == "moved" {
            break;
        }
        assert!(Instant::now() < deadline, "{r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = s.doctor_passes();
    assert!(
        report.contains("OK accounts: a (changed at run time)\n"),
        "doctor:\n{report}"
    );
}

#[tokio::test]
async fn owners_of_accounts_added_at_run_time_read_only_their_own_tokens() {
    if !is_root() {
        return;
    }
    let s = System::start(Setup {
        accounts: &["base"],
        ..Default::default()
    });
    let gate = s.pid_of("gate", None);
    // An agent user that is its own approver is refused, and nothing is written.
    let both = TestUser::new("b");
    let work = s.root.join("work-same");
    std::fs::create_dir(&work).unwrap();
    // Refused adds write nothing.
    let refused_add = |id: &str, run_as: &str, owner: &str| {
        let out = as_root(
            &s,
            &[
                "account",
                "add",
                id,
                "--workdir",
                work.to_str().unwrap(),
                "--run-as",
                run_as,
                "--owner",
                owner,
            ],
        );
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused_add("same", &both.name, &both.name);
    assert!(err.contains("the same user"), "{err}");
    // A workdir private to its agent user (0700): the gate could not read the project's policy
    // there, so every call would be denied.
    let owner = TestUser::new("q");
    std::os::unix::fs::chown(&work, Some(both.uid), Some(both.gid)).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o700)).unwrap();
    let err = refused_add("private", &both.name, &owner.name);
    assert!(err.contains("the gate cannot look inside it"), "{err}");
    assert!(!s.state.join("accounts.yaml").exists());
    assert!(!s.state.join("accounts/private").exists());
    let (c, d) = (add(&s, "c"), add(&s, "d"));
    let (token_c, token_d) = (own_token(&s, &c), own_token(&s, &d));
    assert_ne!(token_c, token_d);
    for t in [&token_c, &token_d] {
        assert!(
            t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit()),
            "{t}"
        );
    }
    // The token works: c's agent reads c's workdir, through c's executor, which runs as c's user.
    let mut agent = Client::connect(&s.url, Auth::Header(&token_c), "agent").await;
    assert_eq!(agent.hello_ok["account"], "c");
    let read = expect_ok(
        &agent
            .invoke("r", "file_read", json!({"path": "hello.txt"}))
            .await,
    );
    assert_eq!(read["content"], "c");
    let executor = s.pid_of("executor", Some("c"));
    let (uids, ..) = identity_of(executor);
    assert!(uids.iter().all(|u| *u == c.run_as.uid), "{uids:?}");
    assert_eq!(
        s.pid_of("gate", None),
        gate,
        "adding accounts did not restart the gate"
    );
    // c moved to another workdir: its executor restarts there, the gate stays.
    let moved = s.root.join("work-c2");
    std::fs::create_dir(&moved).unwrap();
    std::fs::write(moved.join("hello.txt"), "c moved").unwrap();
    std::os::unix::fs::chown(&moved, Some(c.run_as.uid), Some(c.run_as.gid)).unwrap();
    let out = as_root(
        &s,
        &["account", "set-workdir", "c", moved.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + WAIT;
    let read = loop {
        let r = agent
            .invoke("moved", "file_read", json!({"path": "hello.txt"}))
            .await;
        if r["error"]["code"] != "unavailable" || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(expect_ok(&read)["content"], "c moved");
    assert_eq!(
        s.pid_of("gate", None),
        gate,
        "set-workdir did not restart the gate"
    );

    // c's owner asking for d's token is refused, and the refusal audited with its uid.
    let out = token_show_as(&s, &c.owner, Some("d"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not the owner of account \"d\""), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(&token_d));
    let reasons = s.audit_reasons().await;
    let wanted = format!("peer uid {}", c.owner.uid);
    assert!(
        reasons
            .iter()
            .any(|r| r.contains(&wanted) && r.contains("not the owner of account \"d\"")),
        "{reasons:?}"
    );
    // c's run_as (what c's jobs run as) owns nothing, and the token file is the gate's alone.
    let out = token_show_as(&s, &c.run_as, None);
    assert!(!out.status.success());
    let file = s.state.join("accounts/c/token");
    for who in [&c.owner, &c.run_as, &d.owner] {
        let out = Command::new("cat")
            .arg(&file)
            .uid(who.uid)
            .gid(who.gid)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{} read the token file", who.name);
    }
    // Another user cannot add an account (the admin socket is root's), and nothing changes.
    let before = std::fs::read_to_string(s.state.join("accounts.yaml")).unwrap();
    let out = as_user(
        &s,
        Some(&c.owner),
        &[
            "account",
            "add",
            "e",
            "--workdir",
            c.workdir.to_str().unwrap(),
            "--run-as",
            &c.run_as.name,
            "--owner",
            &c.owner.name,
        ],
    );
    assert!(!out.status.success());
    assert_eq!(
        std::fs::read_to_string(s.state.join("accounts.yaml")).unwrap(),
        before
    );

    // From inside an approved job of c: d's token and the admin socket are out of reach.
    let approve = s.runtime.join("broker/approve.sock");
    let admin = s.runtime.join("admin/admin.sock");
    let command = format!(
        "curl -s --unix-socket {} 'http://localhost/v1/token?account=d'; echo; \
         curl -s --unix-socket {} 'http://localhost/v1/token'; echo; \
         curl -s --unix-socket {} http://localhost/ || echo admin-unreachable",
        approve.display(),
        approve.display(),
        admin.display()
    );
    let mut approver = s.approve(&c.owner, Some("c"));
    approver.expect("approving for account c");
    agent
        .send(
            json!({"type": "invoke", "call_id": "job", "tool": "exec_run",
                     "params": {"command": command}}),
        )
        .await;
    approver.expect("call job");
    // What is typed before the ask could be read is not taken as the answer.
    std::thread::sleep(Duration::from_millis(1500));
    approver.type_line("y");
    let job = expect_ok(&agent.result_for("job").await)["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let status = agent.wait_job(&job).await;
    assert_eq!(status["state"], "exited", "{status}");
    let tail = expect_ok(
        &agent
            .invoke("tail", "exec_tail", json!({"job_id": job, "since": 0}))
            .await,
    );
    let stdout = tail["stdout"]["text"].as_str().unwrap();
    assert!(
        !stdout.contains(&token_d) && !stdout.contains(&token_c),
        "{stdout}"
    );
    // Each attempt is refused by the owner check, or cannot reach the socket at all (the job's
    // walls hide the state directory's sockets where namespaces stand).
    let refusal = format!("uid {} is not the owner", c.run_as.uid);
    let refused = stdout.matches(&refusal).count();
    assert!(
        refused == 2 || (refused == 0 && stdout.contains("unreachable")),
        "{stdout}"
    );
    assert!(stdout.contains("admin-unreachable"), "{stdout}");

    // Removed: the token is refused, the executor is gone, and the gate refuses d's executor
    // credential at once, even on a connection opened before.
    let d_executor = audit_channel_as(&s, "executor:d");
    glovebox_e2e::append_probe(&d_executor, "d").await.unwrap();
    let out = as_root(&s, &["account", "remove", "d"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + WAIT;
    while glovebox_e2e::open(&s.url, Auth::Header(&token_d))
        .await
        .is_ok()
    {
        assert!(Instant::now() < deadline, "d's token still works");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!token_show_as(&s, &d.owner, None).status.success());
    let refused = glovebox_e2e::append_probe(&d_executor, "d")
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(
        glovebox_e2e::append_probe(&audit_channel_as(&s, "executor:d"), "d")
            .await
            .is_err()
    );
    assert!(
        glovebox_e2e::append_probe(&audit_channel_as(&s, "executor:c"), "c")
            .await
            .is_ok()
    );
    assert_eq!(
        s.pid_of("gate", None),
        gate,
        "removing an account did not restart the gate"
    );
    assert!(
        !d.workdir.join(".glovebox").exists(),
        "nothing was written into d's workdir"
    );

    // Root rotates c's agent token: the owner gets the new one, the old is refused at once, the
    // file stays the gate's alone, and c's owner cannot rotate it (the admin socket is root's).
    let out = as_user(
        &s,
        Some(&c.owner),
        &["token", "rotate", "--account", "c", "--role", "agent"],
    );
    assert!(!out.status.success());
    assert_eq!(
        own_token(&s, &c),
        token_c,
        "the owner's attempt changed nothing"
    );
    let out = as_root(
        &s,
        &["token", "rotate", "--account", "c", "--role", "agent"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rotated = own_token(&s, &c);
    assert_ne!(rotated, token_c);
    assert_eq!(
        glovebox_e2e::open(&s.url, Auth::Header(&token_c))
            .await
            .err(),
        Some(401),
        "the old token is refused when `token rotate` returns"
    );
    assert!(
        glovebox_e2e::open(&s.url, Auth::Header(&rotated))
            .await
            .is_ok()
    );
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(
        (meta.uid(), meta.mode() & 0o777),
        (user("glovebox-gate").0, 0o600),
        "the new token file is the gate's alone"
    );
}
