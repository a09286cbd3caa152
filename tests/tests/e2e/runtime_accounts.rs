//! Accounts added and removed while glovebox runs (`glovebox account add|list|show|remove`),
//! in user mode: the new account's executor starts and its token works at once, without a
//! restart (not even of the gate) and without dropping or failing the other accounts' calls; on
//! removal its token is refused, its connections close, its executor is gone and the gate
//! refuses its executor's credential; a bad add changes nothing; every change and refusal is
//! audited with the caller's uid.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use glovebox_e2e::{Auth, Client, Glovebox, eventually, expect_ok, open};
use serde_json::json;

/// Pids of this instance's services of `account` (its executor and pack host).
fn account_pids(g: &Glovebox, account: &str) -> Vec<i32> {
    g.pids_where(|args| {
        args.windows(2)
            .any(|w| w[0] == "--account" && w[1] == account)
    })
    .into_iter()
    .filter(|pid| glovebox_e2e::alive(*pid))
    .collect()
}

/// Connects as an agent with `token`, waiting (within 20 s) for the broker to accept it.
async fn connect_when_accepted(g: &Glovebox, token: &str) -> Client {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match open(&g.url, Auth::Header(token)).await {
            Ok(_) => return Client::connect(&g.url, Auth::Header(token), "agent").await,
            Err(status) => {
                assert_eq!(status, 401, "a token not yet known is refused as unknown");
                assert!(
                    Instant::now() < deadline,
                    "the new token was never accepted"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Invokes `tool` until the call is not refused as `unavailable` (within 10 s): a new account's
/// services may still be starting when the broker first hears of it.
async fn invoke_when_available(
    client: &mut Client,
    tool: &str,
    params: serde_json::Value,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    for n in 0.. {
        let result = client
            .invoke(&format!("retry-{n}"), tool, params.clone())
            .await;
        if result["error"]["code"] != "unavailable" || Instant::now() > deadline {
            return result;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    unreachable!()
}

fn token_in(state: &Path, account: &str) -> String {
    read_token(&state.join("accounts").join(account).join("token"))
}

fn read_token(file: &Path) -> String {
    std::fs::read_to_string(file).unwrap().trim().to_owned()
}

/// Whether the broker closes `client`'s connection within 10 s.
async fn closes(client: &mut Client) -> bool {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            use futures_util::StreamExt;
            match client.socket.next().await {
                None | Some(Err(_)) => return,
                Some(Ok(m)) if m.is_close() => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await
    .is_ok()
}

fn workdir(g: &Glovebox, name: &str) -> PathBuf {
    let dir = g.root().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn account_rows(g: &Glovebox, account: &str) -> Vec<(String, String)> {
    let pool = g.audit_pool().await;
    sqlx::query_as::<_, (String, String)>(
        "SELECT outcome, detail FROM events WHERE kind = 'account' AND account = ? ORDER BY id",
    )
    .bind(account)
    .fetch_all(&pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn an_idle_supervisor_sleeps_and_still_starts_an_added_account_at_once() {
    let g = Glovebox::start();
    let up = g.service_pids("up")[0];
    std::thread::sleep(Duration::from_secs(1));
    let before = glovebox_e2e::process_switches(up);
    std::thread::sleep(Duration::from_secs(3));
    let woke = glovebox_e2e::process_switches(up) - before;
    // It looked at accounts.yaml every 300 ms: at least 10 wake-ups in 3 s.
    assert!(woke <= 6, "the idle supervisor woke {woke} times in 3 s");
    // The gate's write of accounts.yaml wakes it: `account add` waits for the account's
    // services, which start at once, not at the next look (10 s apart).
    let work = workdir(&g, "work-woken");
    let started = Instant::now();
    let (code, out, err) = g.run_cli(&[
        "account",
        "add",
        "woken",
        "--workdir",
        work.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    while account_pids(&g, "woken").len() < 2 && started.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        account_pids(&g, "woken").len(),
        2,
        "its executor and pack host"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the account's services started after {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_account_added_at_run_time_works_until_it_is_removed() {
    let g = Glovebox::start();
    let work = workdir(&g, "work-extra");
    std::fs::write(work.join("hello.txt"), "from extra").unwrap();
    let mut first = g.connect("agent").await;
    let first_executor = g.service_pids("executor");
    assert_eq!(first_executor.len(), 1);

    let work_arg = work.to_str().unwrap();
    let (code, out, err) = g.run_cli(&[
        "account",
        "add",
        "extra",
        "--workdir",
        work_arg,
        "--enabled",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("accounts/extra/token"), "{out}");
    let token_file = g.state.join("accounts/extra/token");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the token file is its owner's alone");
    let token = token_in(&g.state, "extra");

    // Its agent works, in its own workdir, through its own executor.
    let mut agent = connect_when_accepted(&g, &token).await;
    assert_eq!(agent.hello_ok["account"], "extra");
    let read = expect_ok(
        &invoke_when_available(&mut agent, "file_read", json!({"path": "hello.txt"})).await,
    );
    assert_eq!(read["content"], "from extra");
    assert_eq!(read["path"], work.join("hello.txt").to_str().unwrap());
    let pids = account_pids(&g, "extra");
    assert_eq!(pids.len(), 2, "its executor and its pack host: {pids:?}");

    // The first account's connection, open through the change, still works.
    let listed =
        expect_ok(&invoke_when_available(&mut first, "file_list", json!({"path": "."})).await);
    assert!(listed["entries"].is_array(), "{listed}");

    let (code, out, _) = g.run_cli(&["account", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.starts_with("extra\t") && l.ends_with("\tadded")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with(&format!("{}\t", g.account)) && l.ends_with("\tconfig")),
        "{out}"
    );
    let (code, out, _) = g.run_cli(&["account", "show", "extra"]);
    assert_eq!(code, 0);
    assert!(out.contains(&format!("workdir:  {work_arg}")), "{out}");

    // An account of glovebox.yaml is not removed at run time.
    let (code, _, err) = g.run_cli(&["account", "remove", &g.account]);
    assert_ne!(code, 0);
    assert!(err.contains("cannot be removed at run time"), "{err}");

    let (code, out, err) = g.run_cli(&["account", "remove", "extra"]);
    assert_eq!(code, 0, "{out}{err}");
    // Its connection closes, its token is refused, its services are gone.
    assert!(
        closes(&mut agent).await,
        "the removed account's connection was not closed"
    );
    assert_eq!(open(&g.url, Auth::Header(&token)).await.err(), Some(401));
    eventually("the removed account's services to stop", || {
        pids.iter().all(|p| !glovebox_e2e::alive(*p))
    })
    .await;
    assert!(account_pids(&g, "extra").is_empty());
    assert!(!g.state.join("accounts/extra").exists(), "moved aside");
    // The first account's connection stayed open and works.
    let listed = expect_ok(
        &first
            .invoke("after", "file_list", json!({"path": "."}))
            .await,
    );
    assert!(listed["entries"].is_array(), "{listed}");
    assert_eq!(
        first_executor,
        g.service_pids("executor"),
        "its executor kept running"
    );

    let uid = nix::unistd::geteuid().as_raw();
    let rows = account_rows(&g, "extra").await;
    let outcomes: Vec<&str> = rows.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(outcomes, ["added", "removed"], "{rows:?}");
    for (_, detail) in &rows {
        assert!(detail.starts_with(&format!("by uid {uid}:")), "{detail}");
        assert!(!detail.contains(&token), "a token is never audited");
    }
    let refused = account_rows(&g, &g.account).await;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].0, "refused");
}

#[tokio::test]
async fn a_bad_account_add_changes_nothing() {
    let g = Glovebox::start();
    let work = workdir(&g, "work-x");
    let work_arg = work.to_str().unwrap();
    let missing = g.root().join("no-such-dir");
    let accounts_file = g.state.join("accounts.yaml");
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "an unknown user",
            vec![
                "x",
                "--workdir",
                work_arg,
                "--run-as",
                "glovebox-no-such-user",
            ],
            "does not exist",
        ),
        (
            "a missing workdir",
            vec!["x", "--workdir", missing.to_str().unwrap()],
            "not a directory",
        ),
        (
            "the id of glovebox.yaml's account",
            vec![&g.account, "--workdir", work_arg],
            "already exists",
        ),
        (
            "a bad id",
            vec!["../x", "--workdir", work_arg],
            "expected 1-64",
        ),
    ];
    for (name, args, wanted) in &cases {
        let mut all = vec!["account", "add"];
        all.extend(args);
        let (code, out, err) = g.run_cli(&all);
        assert_ne!(code, 0, "{name}: {out}");
        assert!(err.contains(wanted), "{name}: {err}");
        assert!(!accounts_file.exists(), "{name}: accounts.yaml written");
        assert!(!g.state.join("accounts/x").exists(), "{name}");
    }
    // A duplicate of an added account.
    let (code, _, err) = g.run_cli(&["account", "add", "x", "--workdir", work_arg]);
    assert_eq!(code, 0, "{err}");
    let written = std::fs::read_to_string(&accounts_file).unwrap();
    let token = token_in(&g.state, "x");
    let (code, _, err) = g.run_cli(&["account", "add", "x", "--workdir", work_arg]);
    assert_ne!(code, 0);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read_to_string(&accounts_file).unwrap(), written);
    assert_eq!(
        token_in(&g.state, "x"),
        token,
        "the first one's token stays"
    );
    // Refusals are audited (the bad id without its text as the account).
    let pool = g.audit_pool().await;
    let refused: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM events WHERE kind = 'account' AND outcome = 'refused'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(refused, 5);
    // Its tools are off unless --enabled: its agent connects but is denied.
    let mut agent = connect_when_accepted(&g, &token).await;
    glovebox_e2e::expect_error(
        &agent.invoke("r", "file_list", json!({"path": "."})).await,
        "denied",
    );
}

/// Reads `path` as `agent`, asking `approver` (who answers once) if the gate asks.
async fn read_with(agent: &mut Client, approver: &mut Client, path: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    for n in 0.. {
        let call_id = format!("read-{n}");
        agent
            .send(
                json!({"type": "invoke", "call_id": call_id, "tool": "file_read",
                         "params": {"path": path}}),
            )
            .await;
        let result = loop {
            let frame = tokio::select! {
                f = agent.next() => f,
                a = approver.next_ask() => {
                    approver.answer(&a, "once").await;
                    continue;
                }
            };
            if frame["type"] == "result" && frame["call_id"] == call_id.as_str() {
                break frame;
            }
        };
        if result["error"]["code"] != "unavailable" || Instant::now() > deadline {
            return result;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    unreachable!()
}

#[tokio::test]
async fn an_added_account_moves_and_gains_and_loses_roots_at_run_time() {
    let g = Glovebox::start();
    let (one, two, data) = (
        workdir(&g, "work-one"),
        workdir(&g, "work-two"),
        workdir(&g, "data"),
    );
    std::fs::write(one.join("where.txt"), "one").unwrap();
    std::fs::write(two.join("where.txt"), "two").unwrap();
    std::fs::write(data.join("x.txt"), "data").unwrap();
    let outside = data.join("x.txt").to_str().unwrap().to_owned();
    let arg = |p: &PathBuf| p.to_str().unwrap().to_owned();
    let (code, _, err) = g.run_cli(&[
        "account",
        "add",
        "mover",
        "--workdir",
        &arg(&one),
        "--enabled",
    ]);
    assert_eq!(code, 0, "{err}");
    let mut agent = connect_when_accepted(&g, &token_in(&g.state, "mover")).await;
    let approver_token =
        std::fs::read_to_string(g.state.join("accounts/mover/approver.token")).unwrap();
    let mut approver =
        Client::connect(&g.url, Auth::Header(approver_token.trim()), "approver").await;
    let read = read_with(&mut agent, &mut approver, "where.txt").await;
    assert_eq!(expect_ok(&read)["content"], "one");
    let r = read_with(&mut agent, &mut approver, &outside).await;
    let error = glovebox_e2e::expect_error(&r, "denied");
    assert!(
        error["deny_reason"]
            .as_str()
            .unwrap()
            .contains("outside the account's roots"),
        "{r}"
    );

    // Moved: relative paths are the new workdir's; the agent's connection stays.
    let (code, out, err) = g.run_cli(&["account", "set-workdir", "mover", &arg(&two)]);
    assert_eq!(code, 0, "{out}{err}");
    let read = read_with(&mut agent, &mut approver, "where.txt").await;
    assert_eq!(expect_ok(&read)["content"], "two");
    // A root added: the approver may now let it read there.
    let (code, out, err) = g.run_cli(&["account", "add-root", "mover", &arg(&data)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&arg(&data)), "{out}");
    let read = read_with(&mut agent, &mut approver, &outside).await;
    assert_eq!(expect_ok(&read)["content"], "data");
    // And removed: out of reach again.
    let (code, out, err) = g.run_cli(&["account", "remove-root", "mover", &arg(&data)]);
    assert_eq!(code, 0, "{out}{err}");
    let r = read_with(&mut agent, &mut approver, &outside).await;
    let error = glovebox_e2e::expect_error(&r, "denied");
    assert!(
        error["deny_reason"]
            .as_str()
            .unwrap()
            .contains("outside the account's roots"),
        "{r}"
    );

    // What cannot be: the root that holds the workdir, a missing workdir, glovebox.yaml's account.
    let (code, _, err) = g.run_cli(&["account", "remove-root", "mover", &arg(&two)]);
    assert_ne!(code, 0);
    assert!(err.contains("outside every root"), "{err}");
    let (code, _, err) = g.run_cli(&[
        "account",
        "set-workdir",
        "mover",
        &arg(&g.root().join("gone")),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("not a directory"), "{err}");
    // A home directory as a root: refused by the gate, before anything is written.
    let home = g.root().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let before = std::fs::read(g.state.join("accounts.yaml")).unwrap();
    let (code, _, err) = g.run_cli(&["account", "add-root", "mover", &arg(&home)]);
    assert_ne!(code, 0);
    assert!(err.contains("holds the home directory"), "{err}");
    assert_eq!(
        std::fs::read(g.state.join("accounts.yaml")).unwrap(),
        before
    );
    let outcomes: Vec<String> = account_rows(&g, "mover")
        .await
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    assert_eq!(
        outcomes,
        [
            "added", "changed", "changed", "changed", "refused", "refused", "refused"
        ]
    );
}

#[tokio::test]
async fn an_account_of_glovebox_yaml_is_changed_at_run_time_like_an_added_one() {
    let g = Glovebox::start();
    let two = workdir(&g, "work-two");
    std::fs::write(g.workdir.join("where.txt"), "one").unwrap();
    std::fs::write(two.join("where.txt"), "two").unwrap();
    let arg = |p: &PathBuf| p.to_str().unwrap().to_owned();
    let mut agent = g.connect("agent").await;
    let mut approver = g.connect("approver").await;
    let read = read_with(&mut agent, &mut approver, "where.txt").await;
    assert_eq!(expect_ok(&read)["content"], "one");
    // Its first change takes it over into accounts.yaml; the agent's connection stays.
    let (code, out, err) = g.run_cli(&["account", "set-workdir", &g.account, &arg(&two)]);
    assert_eq!(code, 0, "{out}{err}");
    let read = read_with(&mut agent, &mut approver, "where.txt").await;
    assert_eq!(expect_ok(&read)["content"], "two");
    let (code, out, err) = g.run_cli(&["account", "show", &g.account, "--json"]);
    assert_eq!(code, 0, "{err}");
    let shown: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["from"], "changed", "{shown}");
    assert_eq!(shown["workdir"], arg(&two), "{shown}");
    assert_eq!(shown["enabled"], true, "{shown}");
    let added = std::fs::read_to_string(g.state.join("accounts.yaml")).unwrap();
    assert!(added.contains("taken_over:"), "{added}");
    // glovebox.yaml itself is as it was.
    let config = std::fs::read_to_string(g.state.join("glovebox.yaml")).unwrap();
    assert!(!config.contains(&arg(&two)), "{config}");
    // Its token now rotates through the gate: the old one is refused at once, the new one works.
    let (code, out, err) = g.run_cli(&[
        "token",
        "rotate",
        "--role",
        "agent",
        "--account",
        &g.account,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        closes(&mut agent).await,
        "the old token's connection stayed open"
    );
    let token = token_in(&g.state, &g.account);
    assert_ne!(token, g.token);
    let mut agent = connect_when_accepted(&g, &token).await;
    let read = read_with(&mut agent, &mut approver, "where.txt").await;
    assert_eq!(expect_ok(&read)["content"], "two");
    // Switched off and on: in its entry in accounts.yaml, not in glovebox.yaml.
    let (code, _, err) = g.run_cli(&["disable", "--account", &g.account]);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = g.run_cli(&["account", "show", &g.account, "--json"]);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["enabled"],
        false
    );
    assert_eq!(
        std::fs::read_to_string(g.state.join("glovebox.yaml")).unwrap(),
        config
    );
    let outcomes: Vec<String> = account_rows(&g, &g.account)
        .await
        .into_iter()
        .map(|(o, d)| format!("{o}: {d}"))
        .collect();
    assert!(
        outcomes[0].starts_with("changed: ")
            && outcomes[0].ends_with("(taken over from glovebox.yaml)"),
        "{outcomes:?}"
    );
}

/// Calls `file_list` as `client` until `stop` is set; returns each result with when it came.
fn call_continuously(
    mut client: Client,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(Instant, serde_json::Value)>> {
    tokio::spawn(async move {
        let mut results = Vec::new();
        for n in 0.. {
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                break;
            }
            let result = client
                .invoke(&format!("steady-{n}"), "file_list", json!({"path": "."}))
                .await;
            results.push((Instant::now(), result));
        }
        results
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_takes_account_changes_without_restarting() {
    use glovebox_proto::transport::handover::socket;
    let g = Glovebox::start();
    let gate = g.service_pids("gate");
    assert_eq!(gate.len(), 1, "{gate:?}");
    let (one, two) = (workdir(&g, "steady-one"), workdir(&g, "steady-two"));
    std::fs::write(one.join("where.txt"), "one").unwrap();
    std::fs::write(two.join("where.txt"), "two").unwrap();
    // The first account calls all along; none of its calls may fail.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let steady = call_continuously(g.connect("agent").await, stop.clone());

    let add_started = Instant::now();
    let (code, out, err) = g.run_cli(&[
        "account",
        "add",
        "live",
        "--workdir",
        one.to_str().unwrap(),
        "--enabled",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let added_in = add_started.elapsed();
    assert_eq!(
        g.service_pids("gate"),
        gate,
        "the gate was not restarted by add"
    );
    let mut agent = connect_when_accepted(&g, &token_in(&g.state, "live")).await;
    let approver = std::fs::read_to_string(g.state.join("accounts/live/approver.token")).unwrap();
    let mut approver = Client::connect(&g.url, Auth::Header(approver.trim()), "approver").await;
    let read = read_with(&mut agent, &mut approver, "where.txt").await;
    assert_eq!(expect_ok(&read)["content"], "one");
    // Decided by the gate, executed by its own executor, both audited under its id.
    let pool = g.audit_pool().await;
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT source, kind FROM events WHERE account = 'live' AND tool = 'file_read' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    for wanted in [("gate", "decide"), ("executor", "execute")] {
        assert!(
            rows.iter().any(|(s, k)| (s.as_str(), k.as_str()) == wanted),
            "{wanted:?} in {rows:?}"
        );
    }

    // Moved: the gate judges the new workdir's paths, still the same gate.
    let (code, out, err) = g.run_cli(&["account", "set-workdir", "live", two.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let read = read_with(&mut agent, &mut approver, "where.txt").await;
    assert_eq!(expect_ok(&read)["content"], "two");
    assert_eq!(
        g.service_pids("gate"),
        gate,
        "the gate was not restarted by set-workdir"
    );

    // Its executor's credential on the audit socket works while the account is there; a
    // connection opened now stays open through the removal.
    let executor = g.channel_as("audit.sock", socket::AUDIT, "executor:live");
    glovebox_e2e::append_probe(&executor, "live").await.unwrap();
    let remove_started = Instant::now();
    let (code, out, err) = g.run_cli(&["account", "remove", "live"]);
    assert_eq!(code, 0, "{out}{err}");
    let removed_in = remove_started.elapsed();
    assert_eq!(
        g.service_pids("gate"),
        gate,
        "the gate was not restarted by remove"
    );
    // Refused at once, on the open connection and on a new one.
    let refused = glovebox_e2e::append_probe(&executor, "live")
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    let fresh = g.channel_as("audit.sock", socket::AUDIT, "executor:live");
    assert!(glovebox_e2e::append_probe(&fresh, "live").await.is_err());
    let probes: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM events WHERE account = 'live' AND call_id = 'probe'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(probes, 1, "only the row from before the removal");

    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let results = steady.await.unwrap();
    assert!(results.len() >= 3, "{} calls", results.len());
    for (_, r) in &results {
        expect_ok(r);
    }
    // Calls were answered while each change was being applied, not only around them.
    for (what, from, took) in [
        ("add", add_started, added_in),
        ("remove", remove_started, removed_in),
    ] {
        assert!(
            results
                .iter()
                .any(|(at, _)| *at > from && *at < from + took),
            "no call of the first account was answered during {what}"
        );
    }
    assert_eq!(g.service_pids("gate"), gate);
    eprintln!(
        "figures: account add returned in {added_in:?}, remove in {removed_in:?}; \
         {} calls of the first account meanwhile, all ok",
        results.len()
    );
}

#[tokio::test]
async fn an_added_account_is_switched_on_and_off_with_glovebox_enable() {
    let g = Glovebox::start();
    let gate = g.service_pids("gate");
    let work = workdir(&g, "work-switch");
    let (code, out, err) =
        g.run_cli(&["account", "add", "sw", "--workdir", work.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let mut agent = connect_when_accepted(&g, &token_in(&g.state, "sw")).await;
    let off = invoke_when_available(&mut agent, "file_list", json!({"path": "."})).await;
    assert_eq!(
        glovebox_e2e::expect_error(&off, "denied")["rule"],
        "enablement"
    );

    let (code, out, err) = g.run_cli(&["enable", "--account", "sw"]);
    assert_eq!(code, 0, "{out}{err}");
    // On the open connection, at the next call; written to accounts.yaml, not glovebox.yaml.
    expect_ok(&agent.invoke("on", "file_list", json!({"path": "."})).await);
    let added = std::fs::read_to_string(g.state.join("accounts.yaml")).unwrap();
    assert!(added.contains("enabled: true"), "{added}");
    let config = std::fs::read_to_string(g.state.join("glovebox.yaml")).unwrap();
    assert!(!config.contains("sw"), "{config}");

    let (code, out, err) = g.run_cli(&["disable", "--account", "sw"]);
    assert_eq!(code, 0, "{out}{err}");
    let off = agent.invoke("off", "file_list", json!({"path": "."})).await;
    assert_eq!(
        glovebox_e2e::expect_error(&off, "denied")["rule"],
        "enablement"
    );
    let pool = g.audit_pool().await;
    let switches: Vec<String> = sqlx::query_scalar(
        "SELECT outcome FROM events WHERE kind = 'enablement' AND account = 'sw' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(switches, ["enabled", "disabled"]);
    assert_eq!(g.service_pids("gate"), gate);
}

#[tokio::test]
async fn an_added_accounts_tokens_are_rotated_at_once() {
    let g = Glovebox::start();
    let gate = g.service_pids("gate");
    let work = workdir(&g, "work-rotate");
    std::fs::write(work.join("mine.txt"), "rotated").unwrap();
    let (code, out, err) = g.run_cli(&[
        "account",
        "add",
        "rot",
        "--workdir",
        work.to_str().unwrap(),
        "--enabled",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let agent_file = g.state.join("accounts/rot/token");
    let approver_file = g.state.join("accounts/rot/approver.token");
    let (old_agent, old_approver) = (read_token(&agent_file), read_token(&approver_file));
    let mut agent = connect_when_accepted(&g, &old_agent).await;
    let mut approver = Client::connect(&g.url, Auth::Header(&old_approver), "approver").await;

    for (role, file, old, connection) in [
        ("agent", &agent_file, &old_agent, &mut agent),
        ("approver", &approver_file, &old_approver, &mut approver),
    ] {
        let (code, out, err) = g.run_cli(&["token", "rotate", "--account", "rot", "--role", role]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains(file.to_str().unwrap()), "{out}");
        let new = read_token(file);
        assert_ne!(&new, old, "{role}: a new token");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{role}: the token file stays private");
        // In effect when the command returns: the new token works at once, the old one is
        // refused, and the connection that used it is closed.
        assert!(
            open(&g.url, Auth::Header(&new)).await.is_ok(),
            "{role}: the new token works when `token rotate` returns"
        );
        assert_eq!(
            open(&g.url, Auth::Header(old)).await.err(),
            Some(401),
            "{role}"
        );
        assert!(
            closes(connection).await,
            "{role}: the old token's connection closes"
        );
    }
    // `glovebox call` finds the added account and its new token.
    let (code, out, err) = g.run_cli(&[
        "call",
        "--account",
        "rot",
        "file_read",
        r#"{"path":"mine.txt"}"#,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("rotated"), "{out}");
    // glovebox.yaml is untouched; accounts.yaml holds the new hashes alone.
    let config = std::fs::read_to_string(g.state.join("glovebox.yaml")).unwrap();
    assert!(!config.contains("rot"), "{config}");
    let added = std::fs::read_to_string(g.state.join("accounts.yaml")).unwrap();
    for old in [&old_agent, &old_approver] {
        use sha2::Digest as _;
        let hash = hex::encode(sha2::Sha256::digest(old.as_bytes()));
        assert!(!added.contains(&hash), "an old hash is gone: {added}");
    }
    assert_eq!(g.service_pids("gate"), gate, "without restarting the gate");

    // A missing account, or an id that is a path: refused, nothing written anywhere.
    let rotated = read_token(&agent_file);
    for id in ["nobody-here", "../rot", "rot/../../escape"] {
        let (code, _, err) = g.run_cli(&["token", "rotate", "--account", id, "--role", "agent"]);
        assert_ne!(code, 0, "{id}");
        assert!(err.contains("no account"), "{id}: {err}");
    }
    assert!(!g.state.join("accounts/nobody-here").exists());
    assert!(!g.state.join("escape").exists() && !g.root().join("escape").exists());
    assert_eq!(
        read_token(&agent_file),
        rotated,
        "the account's token is untouched"
    );

    let uid = nix::unistd::geteuid().as_raw();
    let rows = account_rows(&g, "rot").await;
    let outcomes: Vec<&str> = rows.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(
        outcomes,
        ["added", "token_rotated", "token_rotated"],
        "{rows:?}"
    );
    assert!(
        rows[1].1.contains("agent") && rows[2].1.contains("approver"),
        "{rows:?}"
    );
    let new = [read_token(&agent_file), read_token(&approver_file)];
    for (_, detail) in &rows {
        assert!(detail.starts_with(&format!("by uid {uid}:")), "{detail}");
        for t in new.iter().chain([&old_agent, &old_approver]) {
            assert!(!detail.contains(t.as_str()), "a token is never audited");
        }
    }
}
