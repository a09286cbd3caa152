//! End to end, adversarially, for the file op set: edits, searches, listings, deletes to the
//! trash and moves, against traversal, symbolic links, hard links, the secret floor, a
//! catastrophic regex and oversized inputs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::symlink;
use std::time::{Duration, Instant};

use glovebox_e2e::{Client, Glovebox, expect_error, expect_ok};
use serde_json::{Value, json};

/// Invokes a call the secret floor denies outright (nobody is asked).
async fn denied_by_the_floor(agent: &mut Client, call_id: &str, tool: &str, params: Value) {
    let e = expect_error(&agent.invoke(call_id, tool, params).await, "denied");
    assert_eq!(e["rule"], "floor:.ssh", "{tool}: {e}");
}

fn paths(list: &Value, key: &str) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|m| m[key].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn edit_asks_with_the_diff_and_replaces_once() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "one\ntwo\nthree\n").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let params = json!({"path": "a.txt", "old_string": "two", "new_string": "2"});
    let (ask, result) = agent
        .invoke_asked(&mut approver, "e1", "file_edit", params, "once")
        .await;
    assert_eq!(ask["subjects"][0]["domain"], "write");
    assert!(
        ask["preview"].as_str().unwrap().contains("-two\n+2\n"),
        "{ask}"
    );
    let r = expect_ok(&result);
    assert_eq!(r["replacements"], 1);
    assert!(r["diff"].as_str().unwrap().contains("-two\n+2\n"), "{r}");
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("a.txt")).unwrap(),
        "one\n2\nthree\n"
    );
}

#[tokio::test]
async fn edit_matching_zero_or_two_times_fails_and_leaves_the_file() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "x and x\n").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    // The preview tells the approver why the edit would fail (the caller learns nothing about
    // the content before an approval); approved anyway, it fails and changes nothing.
    for (id, old, says) in [("e2", "x", "2 times"), ("e0", "zzz", "does not occur")] {
        let (ask, r) = agent
            .invoke_asked(
                &mut approver,
                id,
                "file_edit",
                json!({"path": "a.txt", "old_string": old, "new_string": "y"}),
                "once",
            )
            .await;
        assert!(ask["preview"].as_str().unwrap().contains(says), "{ask}");
        let e = expect_error(&r, "invalid_params");
        assert!(e["message"].as_str().unwrap().contains(says), "{e}");
        assert_eq!(
            std::fs::read_to_string(g.workdir.join("a.txt")).unwrap(),
            "x and x\n"
        );
    }
    // replace_all makes the ambiguous one valid
    let params =
        json!({"path": "a.txt", "old_string": "x", "new_string": "y", "replace_all": true});
    let (_, result) = agent
        .invoke_asked(&mut approver, "ea", "file_edit", params, "once")
        .await;
    assert_eq!(expect_ok(&result)["replacements"], 2);
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("a.txt")).unwrap(),
        "y and y\n"
    );
}

#[tokio::test]
async fn grep_never_reads_the_floor_or_follows_links_out_of_the_tree() {
    let g = Glovebox::start();
    let home = g.root().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), "needle KEY\n").unwrap();
    let outside = g.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("o.txt"), "needle outside\n").unwrap();
    let w = &g.workdir;
    std::fs::create_dir_all(w.join("src")).unwrap();
    std::fs::create_dir_all(w.join("proj/.ssh")).unwrap();
    std::fs::write(w.join("src/a.rs"), "let needle = 1;\n").unwrap();
    std::fs::write(w.join(".env"), "needle=secret\n").unwrap();
    std::fs::write(w.join("proj/.ssh/id_ed25519"), "needle\n").unwrap();
    std::fs::write(w.join("tls.key"), "needle\n").unwrap();
    symlink(&outside, w.join("out")).unwrap();
    symlink(home.join(".ssh/id_rsa"), w.join("notes.txt")).unwrap();
    symlink(home.join(".ssh"), w.join("keys")).unwrap();
    let mut agent = g.connect("agent").await;
    let r = expect_ok(
        &agent
            .invoke(
                "g",
                "file_grep",
                json!({"pattern": "needle", "hidden": true}),
            )
            .await,
    );
    assert_eq!(
        paths(&r["matches"], "path"),
        [w.join("src/a.rs").to_str().unwrap()],
        "{r}"
    );
    assert_eq!(r["skipped"]["links"], 3, "{r}");
    assert!(r["skipped"]["hidden"].as_u64().unwrap() >= 3, "{r}");
    // the audit records the pattern's kind and length, never the pattern
    let pool = g.audit_pool().await;
    let detail: String = sqlx::query_scalar(
        "SELECT detail FROM events WHERE kind = 'execute' AND client_call_id = 'g'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(detail, "pattern: regex, 6 bytes; globs: 0; flags: hidden");
}

#[tokio::test]
async fn grep_roots_are_judged_like_any_path() {
    let g = Glovebox::with_extra_roots(&["outside", "elsewhere"]);
    std::fs::create_dir_all(g.workdir.join(".ssh")).unwrap();
    std::fs::create_dir_all(g.workdir.join("src")).unwrap();
    std::fs::create_dir_all(g.root().join("outside")).unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    denied_by_the_floor(
        &mut agent,
        "f",
        "file_grep",
        json!({"pattern": "x", "path": ".ssh"}),
    )
    .await;
    // traversal out of the workdir is judged where it lands, so it asks
    let (ask, result) = agent
        .invoke_asked(
            &mut approver,
            "t",
            "file_grep",
            json!({"pattern": "x", "path": "src/../../outside"}),
            "deny",
        )
        .await;
    assert_eq!(
        ask["subjects"][0]["path"],
        g.root().join("outside").to_str().unwrap()
    );
    expect_error(&result, "denied");
}

#[tokio::test]
async fn a_catastrophic_regex_stops_at_the_time_cap() {
    let g = Glovebox::start();
    // Random a/b text and a pattern whose DFA is exponential: every byte is slow to match.
    let mut x: u64 = 1;
    let text: String = (0..400_000)
        .map(|i| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            match (i % 1000, (x >> 33) & 1) {
                (999, _) => '\n',
                (_, 0) => 'a',
                _ => 'b',
            }
        })
        .collect();
    for i in 0..20 {
        std::fs::write(g.workdir.join(format!("f{i}.txt")), &text).unwrap();
    }
    let mut agent = g.connect("agent").await;
    let started = Instant::now();
    let r = expect_ok(
        &agent
            .invoke(
                "slow",
                "file_grep",
                json!({"pattern": r"(?:a|b)*a(?:a|b){30}c", "timeout_ms": 300}),
            )
            .await,
    );
    assert_eq!(r["timed_out"], true, "{r}");
    assert_eq!(r["truncated"], true, "{r}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // the executor is still responsive
    std::fs::write(g.workdir.join("ok.txt"), "fine\n").unwrap();
    expect_ok(
        &agent
            .invoke("r", "file_read", json!({"path": "ok.txt"}))
            .await,
    );
}

#[tokio::test]
async fn grep_skips_oversized_and_binary_files() {
    let g = Glovebox::start();
    let big: String = (1..=150_000).map(|i| format!("needle {i}\n")).collect();
    std::fs::write(g.workdir.join("big.txt"), &big).unwrap();
    std::fs::write(g.workdir.join("bin.dat"), b"needle\0\x01\x02").unwrap();
    std::fs::write(g.workdir.join("small.txt"), "needle\n").unwrap();
    let mut agent = g.connect("agent").await;
    let r = expect_ok(
        &agent
            .invoke("g", "file_grep", json!({"pattern": "needle"}))
            .await,
    );
    assert_eq!(r["count"], 1, "{r}");
    assert_eq!(r["skipped"]["too_large"], 1);
    assert_eq!(r["skipped"]["binary"], 1);
    expect_error(
        &agent
            .invoke(
                "g1",
                "file_grep",
                json!({"pattern": "needle", "path": "big.txt"}),
            )
            .await,
        "too_large",
    );
}

#[tokio::test]
async fn a_big_file_is_read_by_range_tail_and_count() {
    let g = Glovebox::start();
    let big: String = (1..=150_000).map(|i| format!("needle {i}\n")).collect();
    std::fs::write(g.workdir.join("big.txt"), &big).unwrap();
    std::fs::write(g.workdir.join("bin.dat"), b"needle\0\x01\x02").unwrap();
    let mut agent = g.connect("agent").await;
    expect_error(
        &agent
            .invoke("r", "file_read", json!({"path": "big.txt"}))
            .await,
        "too_large",
    );
    let r = expect_ok(
        &agent
            .invoke(
                "r2",
                "file_read",
                json!({"path": "big.txt", "offset": 149_999, "limit": 5}),
            )
            .await,
    );
    assert_eq!(r["content"], "needle 149999\nneedle 150000\n");
    assert_eq!(r["total_lines"], 150_000);
    assert_eq!(r["truncated"], false);
    let r = expect_ok(
        &agent
            .invoke(
                "t",
                "file_head_tail",
                json!({"path": "big.txt", "lines": 2, "tail": true}),
            )
            .await,
    );
    assert_eq!(r["content"], "needle 149999\nneedle 150000\n");
    let r = expect_ok(
        &agent
            .invoke("c", "file_count", json!({"path": "big.txt"}))
            .await,
    );
    assert_eq!(r["lines"], 150_000);
    assert_eq!(r["words"], 300_000);
    assert_eq!(r["bytes"], big.len());
    expect_error(
        &agent
            .invoke("b", "file_head_tail", json!({"path": "bin.dat"}))
            .await,
        "binary",
    );
}

#[tokio::test]
async fn params_over_the_limits_are_refused_before_anything_runs() {
    let g = Glovebox::start();
    let mut agent = g.connect("agent").await;
    let r = agent.invoke("l", "file_list", json!({"depth": 6})).await;
    expect_error(&r, "invalid_params");
    let r = agent
        .invoke("p", "file_grep", json!({"pattern": "x".repeat(5000)}))
        .await;
    expect_error(&r, "invalid_params");
}

#[tokio::test]
async fn find_and_list_hide_the_floor_and_do_not_follow_links() {
    let g = Glovebox::start();
    let w = &g.workdir;
    std::fs::create_dir_all(w.join("a/b")).unwrap();
    std::fs::create_dir_all(w.join("a/.aws")).unwrap();
    std::fs::write(w.join("a/b/x.rs"), "").unwrap();
    std::fs::write(w.join("a/.aws/creds.rs"), "").unwrap();
    std::fs::write(w.join("a/server.pem"), "").unwrap();
    let outside = g.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("o.rs"), "").unwrap();
    symlink(&outside, w.join("a/out")).unwrap();
    let mut agent = g.connect("agent").await;
    let r = expect_ok(
        &agent
            .invoke(
                "f",
                "file_find",
                json!({"names": ["*.rs", "*.pem"], "hidden": true}),
            )
            .await,
    );
    assert_eq!(
        paths(&r["entries"], "path"),
        [w.join("a/b/x.rs").to_str().unwrap()],
        "{r}"
    );
    let r = expect_ok(&agent.invoke("l", "file_list", json!({"depth": 5})).await);
    assert_eq!(
        paths(&r["entries"], "name"),
        ["a", "a/b", "a/b/x.rs", "a/out"],
        "{r}"
    );
    assert_eq!(r["hidden"], 2);
}

#[tokio::test]
async fn hard_linked_files_are_refused_for_every_op() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "shared\n").unwrap();
    std::fs::hard_link(g.workdir.join("a.txt"), g.root().join("elsewhere.txt")).unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    // The reads are refused when they open the file.
    for (id, tool, params) in [
        ("r", "file_read", json!({"path": "a.txt"})),
        (
            "h",
            "file_head_tail",
            json!({"path": "a.txt", "tail": true}),
        ),
        ("c", "file_count", json!({"path": "a.txt"})),
        (
            "g",
            "file_grep",
            json!({"pattern": "shared", "path": "a.txt"}),
        ),
    ] {
        let e = expect_error(&agent.invoke(id, tool, params).await, "denied");
        assert!(
            e["message"].as_str().unwrap().contains("hard links"),
            "{tool}: {e}"
        );
    }
    // The changes ask (the plan says nothing about the file before a decision); the preview
    // tells the approver, and an approval does not lift the refusal.
    for (id, tool, params) in [
        ("w", "file_write", json!({"path": "a.txt", "content": "x"})),
        (
            "e",
            "file_edit",
            json!({"path": "a.txt", "old_string": "shared", "new_string": "x"}),
        ),
        ("d", "file_delete", json!({"path": "a.txt"})),
        (
            "m",
            "file_move",
            json!({"source": "a.txt", "destination": "b.txt"}),
        ),
    ] {
        let (ask, r) = agent
            .invoke_asked(&mut approver, id, tool, params, "once")
            .await;
        assert!(
            ask["preview"].as_str().unwrap().contains("hard links"),
            "{tool}: {ask}"
        );
        let e = expect_error(&r, "denied");
        assert!(
            e["message"].as_str().unwrap().contains("hard links"),
            "{tool}: {e}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("a.txt")).unwrap(),
        "shared\n"
    );
    assert!(!g.workdir.join("b.txt").exists());
}

#[tokio::test]
async fn delete_moves_to_the_trash_in_the_freedesktop_layout() {
    let g = Glovebox::start();
    std::fs::create_dir_all(g.workdir.join("d/sub")).unwrap();
    std::fs::write(g.workdir.join("d/sub/f.txt"), "F").unwrap();
    std::fs::write(g.workdir.join("a b.txt"), "A").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let (ask, result) = agent
        .invoke_asked(
            &mut approver,
            "d1",
            "file_delete",
            json!({"path": "a b.txt"}),
            "once",
        )
        .await;
    assert_eq!(ask["subjects"][0]["domain"], "delete");
    assert!(ask["preview"].as_str().unwrap().contains("trash"), "{ask}");
    let r = expect_ok(&result);
    let trash = g.trash_dir();
    assert_eq!(
        r["trashed_as"],
        trash.join("files/a b.txt").to_str().unwrap()
    );
    assert!(!g.workdir.join("a b.txt").exists());
    assert_eq!(
        std::fs::read_to_string(trash.join("files/a b.txt")).unwrap(),
        "A"
    );
    let info = std::fs::read_to_string(trash.join("info/a b.txt.trashinfo")).unwrap();
    let encoded = g.workdir.join("a%20b.txt");
    assert!(
        info.starts_with(&format!(
            "[Trash Info]\nPath={}\nDeletionDate=",
            encoded.display()
        )),
        "{info}"
    );
    let (_, result) = agent
        .invoke_asked(
            &mut approver,
            "d2",
            "file_delete",
            json!({"path": "d"}),
            "once",
        )
        .await;
    assert_eq!(expect_ok(&result)["type"], "dir");
    assert_eq!(
        std::fs::read_to_string(trash.join("files/d/sub/f.txt")).unwrap(),
        "F"
    );
    assert!(trash.join("info/d.trashinfo").exists());
}

#[tokio::test]
async fn delete_of_a_directory_holding_ssh_is_refused() {
    let g = Glovebox::start();
    std::fs::create_dir_all(g.workdir.join("proj/deep/.ssh")).unwrap();
    std::fs::write(g.workdir.join("proj/deep/.ssh/id_rsa"), "KEY").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    // the preview tells the approver; an approval does not lift the refusal
    let (ask, r) = agent
        .invoke_asked(
            &mut approver,
            "d",
            "file_delete",
            json!({"path": "proj"}),
            "once",
        )
        .await;
    assert!(ask["preview"].as_str().unwrap().contains(".ssh"), "{ask}");
    let e = expect_error(&r, "denied");
    assert!(e["message"].as_str().unwrap().contains(".ssh"), "{e}");
    assert!(g.workdir.join("proj/deep/.ssh/id_rsa").exists());
    // the floor entry itself is denied outright, nobody is asked
    denied_by_the_floor(
        &mut agent,
        "d2",
        "file_delete",
        json!({"path": "proj/deep/.ssh"}),
    )
    .await;
    assert!(!g.trash_dir().join("files/proj").exists());
}

#[tokio::test]
async fn delete_of_a_link_trashes_the_link_not_its_target() {
    let g = Glovebox::start();
    let target = g.root().join("precious.txt");
    std::fs::write(&target, "keep me").unwrap();
    symlink(&target, g.workdir.join("link")).unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let (ask, result) = agent
        .invoke_asked(
            &mut approver,
            "d",
            "file_delete",
            json!({"path": "link"}),
            "once",
        )
        .await;
    assert_eq!(
        ask["subjects"][0]["path"],
        g.workdir.join("link").to_str().unwrap()
    );
    assert_eq!(expect_ok(&result)["type"], "symlink");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
}

#[tokio::test]
async fn move_across_a_symlink_is_judged_at_its_target() {
    // `outside` is another root of the account (Landlock lets it through; the gate asks).
    let g = Glovebox::start_with(glovebox_e2e::Options {
        extra_roots: vec!["outside".into()],
        ..Default::default()
    });
    let outside = g.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(g.root().join("home/.ssh")).unwrap();
    symlink(&outside, g.workdir.join("out")).unwrap();
    symlink(g.root().join("home/.ssh"), g.workdir.join("keys")).unwrap();
    std::fs::write(g.workdir.join("a.txt"), "A").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    // into the floor through a link: denied by the floor, nobody asked
    denied_by_the_floor(
        &mut agent,
        "m0",
        "file_move",
        json!({"source": "a.txt", "destination": "keys/authorized_keys"}),
    )
    .await;
    let (ask, result) = agent
        .invoke_asked(
            &mut approver,
            "m1",
            "file_move",
            json!({"source": "a.txt", "destination": "out/a.txt"}),
            "once",
        )
        .await;
    let subjects: Vec<(String, String)> = ask["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["domain"].as_str().unwrap().to_owned(),
                s["path"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let src = g.workdir.join("a.txt").to_str().unwrap().to_owned();
    let dst = outside.join("a.txt").to_str().unwrap().to_owned();
    assert_eq!(
        subjects,
        [
            ("delete".to_owned(), src.clone()),
            ("read".to_owned(), src),
            ("write".to_owned(), dst.clone())
        ]
    );
    assert_eq!(expect_ok(&result)["destination"], dst);
    assert_eq!(std::fs::read_to_string(outside.join("a.txt")).unwrap(), "A");
}

#[tokio::test]
async fn the_gate_denies_plans_that_do_not_fit_their_tool() {
    use glovebox_proto::v1::{DecideRequest, Domain, Plan, Subject, ToolCall, Verdict};
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "a").unwrap();
    let path = g.workdir.join("a.txt").to_str().unwrap().to_owned();
    let subject = |domain: Domain| Subject {
        domain: domain as i32,
        path: path.clone(),
        state: None,
    };
    let cases = [
        // a move that leaves out its delete and write subjects
        ("file_move", vec![subject(Domain::Read)]),
        // a delete dressed up as a read
        ("file_delete", vec![subject(Domain::Read)]),
        // a read with a second, unrelated subject
        (
            "file_read",
            vec![subject(Domain::Read), subject(Domain::Read)],
        ),
        (
            "file_move",
            vec![
                subject(Domain::Write),
                subject(Domain::Read),
                subject(Domain::Delete),
            ],
        ),
    ];
    for (tool, subjects) in cases {
        // Asked as the broker asks: a message on the gate's stream of decisions.
        let r = g
            .decide_as_broker(DecideRequest {
                call: Some(ToolCall {
                    account: g.account.clone(),
                    call_id: "shape".into(),
                    tool: tool.into(),
                    params_json: "{}".into(),
                    client_call_id: String::new(),
                }),
                plan: Some(Plan {
                    subjects,
                    content_tag: Vec::new(),
                    pack: None,
                }),
            })
            .await
            .unwrap();
        assert_eq!(r.verdict, Verdict::Deny as i32, "{tool}: {r:?}");
        assert_eq!(r.rule, "plan", "{tool}: {r:?}");
        assert!(r.ticket.is_none());
    }
}

/// `file_info` is a read of its path: it describes what a read may see, and a refused path —
/// on the floor, through a link into it, outside every root — is refused the same way whether
/// anything is there or not.
#[tokio::test]
async fn info_describes_what_a_read_may_see_and_reveals_nothing_else() {
    let g = Glovebox::start();
    let w = &g.workdir;
    std::fs::write(w.join("a.txt"), "hello").unwrap();
    std::fs::create_dir_all(w.join(".ssh")).unwrap();
    std::fs::write(w.join(".ssh/id_rsa"), "KEY").unwrap();
    let home = g.root().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "KEY").unwrap();
    symlink(home.join(".ssh"), w.join("keys")).unwrap();
    let mut agent = g.connect("agent").await;
    let a = expect_ok(
        &agent
            .invoke("a", "file_info", json!({"path": "a.txt"}))
            .await,
    );
    assert_eq!(
        (&a["type"], &a["size"], &a["path"]),
        (&json!("file"), &json!(5), &json!(w.join("a.txt")))
    );
    let d = expect_ok(&agent.invoke("d", "file_info", json!({"path": "."})).await);
    assert_eq!(d["type"], "directory", "{d}");
    // The floor, there or not, and through a link: the same refusal.
    let mut refusals = Vec::new();
    for (id, path) in [
        ("f1", ".ssh/id_rsa"),
        ("f2", ".ssh/nothing-here"),
        ("f3", "keys/id_ed25519"),
        ("f4", "keys/nothing-here"),
    ] {
        let e = expect_error(
            &agent.invoke(id, "file_info", json!({"path": path})).await,
            "denied",
        );
        assert_eq!(e["rule"], "floor:.ssh", "{path}: {e}");
        refusals.push(e["deny_reason"].clone());
    }
    assert_eq!(refusals[0], refusals[1], "existence shows");
    assert_eq!(refusals[2], refusals[3], "existence shows through a link");
    // Outside every root: refused, naming the roots (no approver is asked).
    std::fs::write(g.root().join("outside.txt"), "o").unwrap();
    let e = expect_error(
        &agent
            .invoke("o", "file_info", json!({"path": "../outside.txt"}))
            .await,
        "denied",
    );
    assert_eq!(e["rule"], "roots", "{e}");
}

/// `file_roots` tells an agent where it may work, without asking anyone, and is audited.
#[tokio::test]
async fn roots_names_the_workdir_and_every_root_without_asking() {
    let g = Glovebox::with_extra_roots(&["elsewhere"]);
    std::fs::create_dir_all(g.root().join("elsewhere")).unwrap();
    let mut agent = g.connect("agent").await;
    let r = expect_ok(&agent.invoke("r", "file_roots", json!({})).await);
    assert_eq!(r["workdir"], json!(g.workdir), "{r}");
    let roots: Vec<&str> = r["roots"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let elsewhere = std::fs::canonicalize(g.root().join("elsewhere")).unwrap();
    assert!(roots.contains(&g.workdir.to_str().unwrap()), "{r}");
    assert!(roots.contains(&elsewhere.to_str().unwrap()), "{r}");
    // Nothing to name: any field is refused.
    expect_error(
        &agent.invoke("x", "file_roots", json!({"path": "/"})).await,
        "invalid_params",
    );
    let pool = g.audit_pool().await;
    let outcome: String = sqlx::query_scalar(
        "SELECT verdict FROM events WHERE kind = 'decide' AND client_call_id = 'r'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(outcome, "allow");
}

/// `file_mkdir` is a write of its path: asked, made with its parents; the floor, a link out of
/// the roots and a file in the way are refused.
#[tokio::test]
async fn mkdir_asks_as_a_write_makes_parents_and_refuses_the_floor() {
    let g = Glovebox::start();
    let w = &g.workdir;
    let outside = g.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    symlink(&outside, w.join("out")).unwrap();
    std::fs::write(w.join("file"), "x").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let (ask, result) = agent
        .invoke_asked(
            &mut approver,
            "m",
            "file_mkdir",
            json!({"path": "a/b/c"}),
            "once",
        )
        .await;
    assert_eq!(ask["subjects"][0]["domain"], "write", "{ask}");
    assert!(
        ask["preview"]
            .as_str()
            .unwrap()
            .contains("create the directory"),
        "{ask}"
    );
    let r = expect_ok(&result);
    assert_eq!(r["created"], true, "{r}");
    assert!(w.join("a/b/c").is_dir());
    denied_by_the_floor(&mut agent, "f", "file_mkdir", json!({"path": ".ssh/x"})).await;
    let e = expect_error(
        &agent
            .invoke("o", "file_mkdir", json!({"path": "out/made"}))
            .await,
        "denied",
    );
    assert_eq!(e["rule"], "roots", "judged where the link leads: {e}");
    assert!(!outside.join("made").exists());
    let (_, result) = agent
        .invoke_asked(
            &mut approver,
            "in-the-way",
            "file_mkdir",
            json!({"path": "file"}),
            "once",
        )
        .await;
    expect_error(&result, "invalid_params");
}

/// Several edits in one call: the approver sees the whole diff, all apply or none; a dry run is
/// asked and bound like an edit (its diff shows the file), says so, and writes nothing.
#[tokio::test]
async fn several_edits_apply_together_and_a_dry_run_writes_nothing() {
    let g = Glovebox::start();
    let file = g.workdir.join("a.txt");
    std::fs::write(&file, "one\ntwo\nthree\n").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let edits = json!([
        {"old_string": "one", "new_string": "1"},
        {"old_string": "three", "new_string": "3"}
    ]);
    let (ask, result) = agent
        .invoke_asked(
            &mut approver,
            "dry",
            "file_edit",
            json!({"path": "a.txt", "edits": edits, "dry_run": true}),
            "once",
        )
        .await;
    let preview = ask["preview"].as_str().unwrap();
    assert!(
        preview.starts_with("dry run: nothing is written\n"),
        "{ask}"
    );
    assert!(
        preview.contains("-one\n+1\n") && preview.contains("-three\n+3\n"),
        "{ask}"
    );
    let r = expect_ok(&result);
    assert_eq!(
        (&r["dry_run"], &r["replacements"]),
        (&json!(true), &json!(2))
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "one\ntwo\nthree\n");
    // The same edits for real.
    let (_, result) = agent
        .invoke_asked(
            &mut approver,
            "real",
            "file_edit",
            json!({"path": "a.txt", "edits": edits}),
            "once",
        )
        .await;
    assert_eq!(expect_ok(&result)["dry_run"], false);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "1\ntwo\n3\n");
    // One edit that does not apply: the approver is told, and nothing is written.
    let (ask, result) = agent
        .invoke_asked(
            &mut approver,
            "half",
            "file_edit",
            json!({"path": "a.txt", "edits": [
                {"old_string": "two", "new_string": "2"},
                {"old_string": "four", "new_string": "4"}]}),
            "once",
        )
        .await;
    assert!(
        ask["preview"]
            .as_str()
            .unwrap()
            .contains("edit 2: old_string does not occur"),
        "{ask}"
    );
    expect_error(&result, "invalid_params");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "1\ntwo\n3\n");
    // The floor holds for a dry run too.
    denied_by_the_floor(
        &mut agent,
        "f",
        "file_edit",
        json!({"path": ".ssh/config", "dry_run": true,
               "edits": [{"old_string": "a", "new_string": "b"}]}),
    )
    .await;
}

/// `file_read_many` judges every path: one on the floor refuses the call (nothing of the others
/// is read), one outside the workdir asks, and once allowed each file comes back with its content
/// or why not; more than 100 paths are refused before anything runs.
#[tokio::test]
async fn read_many_judges_every_path_and_answers_each_file() {
    let g = Glovebox::with_extra_roots(&["outside"]);
    let w = &g.workdir;
    std::fs::write(w.join("a.txt"), "alpha").unwrap();
    std::fs::write(w.join("b.txt"), "beta").unwrap();
    std::fs::create_dir_all(w.join(".ssh")).unwrap();
    std::fs::write(w.join(".ssh/id_rsa"), "KEY").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let r = expect_ok(
        &agent
            .invoke(
                "m",
                "file_read_many",
                json!({"paths": ["a.txt", "missing.txt", "b.txt"]}),
            )
            .await,
    );
    let files = r["files"].as_array().unwrap();
    assert_eq!(files[0]["content"], "alpha");
    assert_eq!(files[1]["error"]["code"], "not_found");
    assert_eq!(files[2]["content"], "beta");
    denied_by_the_floor(
        &mut agent,
        "f",
        "file_read_many",
        json!({"paths": ["a.txt", ".ssh/id_rsa"]}),
    )
    .await;
    // A path in another root asks, naming every subject.
    std::fs::create_dir_all(g.root().join("outside")).unwrap();
    std::fs::write(g.root().join("outside/notes.txt"), "n").unwrap();
    let (ask, result) = agent
        .invoke_asked(
            &mut approver,
            "o",
            "file_read_many",
            json!({"paths": ["a.txt", "../outside/notes.txt"]}),
            "deny",
        )
        .await;
    assert_eq!(ask["subjects"].as_array().unwrap().len(), 2, "{ask}");
    expect_error(&result, "denied");
    let many: Vec<String> = (0..101).map(|i| format!("f{i}")).collect();
    expect_error(
        &agent
            .invoke("x", "file_read_many", json!({ "paths": many }))
            .await,
        "invalid_params",
    );
}

/// `file_tree` shows a tree as a listing would: the floor hidden, links not followed, excluded
/// names left out with all below them; a big tree is cut at its cap and says so.
#[tokio::test]
async fn tree_hides_what_a_listing_hides_and_a_big_tree_is_cut() {
    let g = Glovebox::start();
    let w = &g.workdir;
    for dir in ["src/net", "node_modules/left-pad", ".ssh", "many"] {
        std::fs::create_dir_all(w.join(dir)).unwrap();
    }
    std::fs::write(w.join("src/net/tcp.rs"), "").unwrap();
    std::fs::write(w.join("node_modules/left-pad/index.js"), "").unwrap();
    std::fs::write(w.join(".ssh/id_rsa"), "KEY").unwrap();
    std::fs::write(w.join(".env"), "S=1").unwrap();
    let home = g.root().join("home");
    std::fs::create_dir_all(home.join("docs")).unwrap();
    symlink(&home, w.join("home-link")).unwrap();
    for i in 0..3000 {
        std::fs::write(w.join(format!("many/f{i:04}")), "").unwrap();
    }
    let mut agent = g.connect("agent").await;
    let r = expect_ok(
        &agent
            .invoke(
                "t",
                "file_tree",
                json!({"hidden": true, "exclude": ["node_modules", "many"]}),
            )
            .await,
    );
    let text = r["tree"].to_string();
    assert!(text.contains("tcp.rs"), "{text}");
    for absent in [
        "left-pad",
        "id_rsa",
        ".ssh",
        ".env",
        "home-link",
        "docs",
        "f0001",
    ] {
        assert!(!text.contains(absent), "{absent} shown: {text}");
    }
    assert_eq!(r["truncated"], false, "{r}");
    assert_eq!(r["links"], 1, "{r}");
    let big = expect_ok(
        &agent
            .invoke("b", "file_tree", json!({"path": "many"}))
            .await,
    );
    assert_eq!(big["truncated"], true, "{}", big["count"]);
    assert_eq!(big["count"], 1000);
    denied_by_the_floor(&mut agent, "f", "file_tree", json!({"path": ".ssh"})).await;
}
