//! Adversarial paths end to end: what the gate is asked about is always the real, canonical
//! target, whatever the agent wrote (symlink chains, `..` after a symlink, `/proc/self/...`,
//! `//`, trailing slashes, NUL bytes, empty and very long paths, relative paths).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::symlink;

use glovebox_e2e::{Glovebox, expect_error, expect_ok};
use serde_json::{Value, json};

#[derive(Debug)]
enum Outcome {
    /// The approver was asked about this canonical path (and denied it).
    Asked(String),
    /// The call ended without an ask.
    Result(Value),
}

/// Invokes `tool` with an approver connected; an ask is answered "deny".
async fn outcome(g: &Glovebox, tool: &str, params: Value) -> Outcome {
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent
        .send(json!({"type": "invoke", "call_id": "p", "tool": tool, "params": params}))
        .await;
    tokio::select! {
        ask = approver.next_ask() => {
            let path = ask["subjects"][0]["path"].as_str().unwrap().to_owned();
            approver.answer(&ask, "deny").await;
            expect_error(&agent.result_for("p").await, "denied");
            Outcome::Asked(path)
        }
        r = agent.result_for("p") => Outcome::Result(r),
    }
}

fn denied_rule(o: &Outcome) -> String {
    match o {
        Outcome::Result(r) => expect_error(r, "denied")["rule"]
            .as_str()
            .unwrap()
            .to_owned(),
        other => panic!("expected a deny without an ask, got {other:?}"),
    }
}

#[tokio::test]
async fn a_symlink_chain_to_a_secret_is_denied_by_the_floor() {
    let g = Glovebox::start();
    let secrets = g.root().join("home/.aws");
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(secrets.join("credentials"), "KEY").unwrap();
    symlink(secrets.join("credentials"), g.root().join("hop2")).unwrap();
    symlink(g.root().join("hop2"), g.workdir.join("hop1")).unwrap();
    let o = outcome(&g, "file_read", json!({"path": "hop1"})).await;
    assert_eq!(denied_rule(&o), "floor:.aws");
}

#[tokio::test]
async fn a_symlinked_directory_is_judged_by_its_target() {
    let g = Glovebox::with_extra_roots(&["outside", "elsewhere"]);
    let outside = g.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("f.txt"), "o").unwrap();
    symlink(&outside, g.workdir.join("link")).unwrap();
    let want = outside.join("f.txt").display().to_string();
    match outcome(&g, "file_read", json!({"path": "link/f.txt"})).await {
        Outcome::Asked(p) => assert_eq!(p, want),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_new_file_under_a_symlinked_parent_is_judged_outside_and_not_created() {
    let g = Glovebox::with_extra_roots(&["outside", "elsewhere"]);
    let outside = g.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    symlink(&outside, g.workdir.join("link")).unwrap();
    let o = outcome(
        &g,
        "file_write",
        json!({"path": "link/new.txt", "content": "x"}),
    )
    .await;
    match o {
        Outcome::Asked(p) => assert_eq!(p, outside.join("new.txt").display().to_string()),
        other => panic!("{other:?}"),
    }
    assert!(!outside.join("new.txt").exists());
}

#[tokio::test]
async fn dot_dot_after_a_symlink_follows_the_link_physically() {
    let g = Glovebox::with_extra_roots(&["outside", "elsewhere"]);
    let deep = g.root().join("elsewhere/deep");
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(g.root().join("elsewhere/x.txt"), "x").unwrap();
    // The lexical target exists too, and reading it would be allowed without an ask.
    std::fs::write(g.workdir.join("x.txt"), "lexical").unwrap();
    symlink(&deep, g.workdir.join("link")).unwrap();
    // Lexically `link/../x.txt` is `<workdir>/x.txt`; physically it is `elsewhere/x.txt`.
    match outcome(&g, "file_read", json!({"path": "link/../x.txt"})).await {
        Outcome::Asked(p) => {
            assert_eq!(p, g.root().join("elsewhere/x.txt").display().to_string())
        }
        Outcome::Result(r) => panic!("never the lexical target, always an ask: {r}"),
    }
}

#[tokio::test]
async fn proc_self_root_and_cwd_do_not_reach_a_secret() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join(".env"), "TOKEN=1").unwrap();
    let via_root = format!("/proc/self/root{}/.env", g.workdir.display());
    // Through /proc/self/root the target is the workdir's own `.env`: the floor denies it.
    let o = outcome(&g, "file_read", json!({ "path": via_root })).await;
    assert_eq!(denied_rule(&o), "floor:.env*", "{o:?}");
    for path in [via_root.as_str(), "/proc/self/cwd/.env"] {
        match outcome(&g, "file_read", json!({ "path": path })).await {
            Outcome::Result(r) => {
                assert_eq!(r["ok"], false, "{path}: {r}");
                assert!(!r.to_string().contains("TOKEN"), "{path}: {r}");
            }
            Outcome::Asked(p) => {
                assert!(
                    !p.starts_with("/proc/"),
                    "{path}: the gate saw a magic link: {p}"
                )
            }
        }
    }
}

#[tokio::test]
async fn double_slashes_and_trailing_slashes_are_canonical() {
    let g = Glovebox::start();
    std::fs::create_dir_all(g.workdir.join("d")).unwrap();
    std::fs::write(g.workdir.join("d/a.txt"), "a").unwrap();
    let abs = format!("{}//d///a.txt", g.workdir.display());
    let mut agent = g.connect("agent").await;
    let r = agent.invoke("a", "file_read", json!({ "path": abs })).await;
    assert_eq!(r["result"]["content"], "a", "{r}");
    let r = agent.invoke("b", "file_list", json!({"path": "d/"})).await;
    assert_eq!(r["ok"], true, "{r}");
    // a trailing slash on a file is not the file
    let r = agent
        .invoke("c", "file_read", json!({"path": "d/a.txt/"}))
        .await;
    assert_eq!(r["ok"], false, "{r}");
}

#[tokio::test]
async fn nul_bytes_empty_and_over_long_paths_are_refused_before_any_decision() {
    let g = Glovebox::start();
    let long = "a/".repeat(3000);
    for path in ["a\u{0}b", "", long.as_str()] {
        let o = outcome(&g, "file_read", json!({ "path": path })).await;
        match o {
            Outcome::Result(r) => assert_eq!(r["ok"], false, "{r}"),
            Outcome::Asked(p) => panic!("{path:?} reached the approver as {p}"),
        }
    }
}

#[tokio::test]
async fn relative_paths_resolve_against_the_workdir_not_the_process_cwd() {
    let g = Glovebox::start();
    // The services run with the test's cwd (the repository); `Cargo.toml` exists there only.
    let mut agent = g.connect("agent").await;
    let r = agent
        .invoke("r", "file_read", json!({"path": "Cargo.toml"}))
        .await;
    expect_error(&r, "not_found");
    std::fs::write(g.workdir.join("Cargo.toml"), "mine").unwrap();
    let r = agent
        .invoke("r2", "file_read", json!({"path": "Cargo.toml"}))
        .await;
    assert_eq!(r["result"]["content"], "mine", "{r}");
}

/// What a call ends in when an ask (if any) is answered `answer`: the asked subjects and the
/// result frame.
async fn answered(
    g: &Glovebox,
    call_id: &str,
    tool: &str,
    params: Value,
    answer: &str,
) -> (Vec<String>, Value) {
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent
        .send(json!({"type": "invoke", "call_id": call_id, "tool": tool, "params": params}))
        .await;
    tokio::select! {
        ask = approver.next_ask() => {
            let subjects = ask["subjects"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["path"].as_str().unwrap().to_owned())
                .collect();
            approver.answer(&ask, answer).await;
            (subjects, agent.result_for(call_id).await)
        }
        r = agent.result_for(call_id) => (Vec::new(), r),
    }
}

/// The floor entry under a directory that does not exist and under one that does, for a tool.
fn floor_cases() -> Vec<(&'static str, Value, Value)> {
    let both = |tool: &'static str, f: fn(&str) -> Value| {
        (tool, f("nothere/.ssh/id_rsa"), f("proj/.ssh/id_rsa"))
    };
    vec![
        both("file_read", |p| json!({ "path": p })),
        both("file_list", |p| json!({ "path": p })),
        both("file_delete", |p| json!({ "path": p })),
        both(
            "file_move",
            |p| json!({ "source": p, "destination": "moved" }),
        ),
        both(
            "file_move",
            |p| json!({ "source": "a.txt", "destination": p }),
        ),
    ]
}

#[tokio::test]
async fn a_floor_path_under_a_missing_directory_is_denied_like_one_under_an_existing_directory() {
    let g = Glovebox::start();
    std::fs::create_dir_all(g.workdir.join("proj/.ssh")).unwrap();
    std::fs::write(g.workdir.join("proj/.ssh/id_rsa"), "KEY").unwrap();
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    for (i, (tool, missing, existing)) in floor_cases().into_iter().enumerate() {
        let mut seen = Vec::new();
        for (j, params) in [missing, existing].into_iter().enumerate() {
            let (asked, r) = answered(&g, &format!("f{i}-{j}"), tool, params.clone(), "deny").await;
            assert!(asked.is_empty(), "{tool} {params}: asked about {asked:?}");
            let e = expect_error(&r, "denied");
            assert_eq!(e["rule"], "floor:.ssh", "{tool} {params}: {e}");
            // the same answer, whichever directory exists (the path itself aside)
            let message = e["message"].as_str().unwrap().replace("proj", "nothere");
            seen.push((e["code"].clone(), e["rule"].clone(), message));
        }
        assert_eq!(seen[0], seen[1], "{tool}");
    }
    assert!(g.workdir.join("proj/.ssh/id_rsa").exists());
}

#[tokio::test]
async fn dot_dot_through_a_missing_directory_is_judged_like_the_path_it_names() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "lexical").unwrap();
    let mut agent = g.connect("agent").await;
    // reads of the workdir are allowed: `nothere/../a.txt` is `a.txt`
    let r = agent
        .invoke("r1", "file_read", json!({"path": "nothere/../a.txt"}))
        .await;
    assert_eq!(expect_ok(&r)["content"], "lexical");
    // `nothere/.ssh/../x` is `nothere/x`: not the floor, and not invalid_params
    for (id, tool, params) in [
        ("r2", "file_read", json!({"path": "nothere/.ssh/../x"})),
        ("l2", "file_list", json!({"path": "nothere/.ssh/../x"})),
    ] {
        expect_error(&agent.invoke(id, tool, params).await, "not_found");
    }
    // deletes and moves ask (the default policy): about `nothere/x`
    let want = g.workdir.join("nothere/x").display().to_string();
    let (asked, r) = answered(
        &g,
        "d2",
        "file_delete",
        json!({"path": "nothere/.ssh/../x"}),
        "deny",
    )
    .await;
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0], want);
    expect_error(&r, "denied");
    let (asked, r) = answered(
        &g,
        "m2",
        "file_move",
        json!({"source": "nothere/.ssh/../x", "destination": "y"}),
        "deny",
    )
    .await;
    assert_eq!(asked[0], want);
    expect_error(&r, "denied");
}

#[tokio::test]
async fn a_missing_path_the_policy_allows_is_not_found_only_at_execute() {
    let g = Glovebox::start();
    let mut agent = g.connect("agent").await;
    expect_error(
        &agent
            .invoke("r", "file_read", json!({"path": "nothere/x"}))
            .await,
        "not_found",
    );
    // the gate allowed the path, then the executor (holding a ticket) found nothing there
    let pool = g.audit_pool().await;
    let rows: Vec<String> = sqlx::query_scalar(
        "SELECT source || ' ' || kind || ' ' || coalesce(verdict, '') || ' ' || coalesce(error_code, '')
         FROM events WHERE client_call_id = 'r' AND kind IN ('decide', 'execute') ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rows, ["gate decide allow ", "executor execute  not_found"]);
    // what asks is asked about first; not_found comes only after the approval
    for (id, tool, params) in [
        ("d", "file_delete", json!({"path": "nothere/x"})),
        (
            "m",
            "file_move",
            json!({"source": "nothere/x", "destination": "y"}),
        ),
    ] {
        let (asked, r) = answered(&g, id, tool, params, "once").await;
        assert_eq!(
            asked[0],
            g.workdir.join("nothere/x").display().to_string(),
            "{tool}"
        );
        expect_error(&r, "not_found");
    }
    // denied by the approver: the caller learns nothing about the path
    let (asked, r) = answered(&g, "d0", "file_delete", json!({"path": "gone/x"}), "deny").await;
    assert_eq!(asked.len(), 1);
    expect_error(&r, "denied");
}
