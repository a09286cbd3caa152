//! End to end through broker, gate and executor: reads, the secret floor, escapes judged by their
//! real target, and writes that ask.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::symlink;
use std::time::{Duration, Instant};

use glovebox_e2e::{Glovebox, expect_error, expect_ok};
use serde_json::json;

#[tokio::test]
async fn allowed_read_returns_the_content() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("hello.txt"), "hello\nworld\n").unwrap();
    let mut agent = g.connect("agent").await;
    let r = expect_ok(
        &agent
            .invoke("c1", "file_read", json!({"path": "hello.txt"}))
            .await,
    );
    assert_eq!(r["content"], "hello\nworld\n");
    assert_eq!(r["lines"], 2);
    assert_eq!(r["path"], g.workdir.join("hello.txt").to_str().unwrap());
}

#[tokio::test]
async fn hello_ok_lists_tools_and_context() {
    let g = Glovebox::start();
    let agent = g.connect("agent").await;
    let h = &agent.hello_ok;
    assert_eq!(h["account"], g.account);
    let names: Vec<&str> = h["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "file_read",
            "file_list",
            "file_write",
            "file_edit",
            "file_grep",
            "file_find",
            "file_count",
            "file_head_tail",
            "file_delete",
            "file_move",
            "file_info",
            "file_roots",
            "file_mkdir",
            "file_read_many",
            "file_read_media",
            "file_tree",
            "exec_run",
            "exec_status",
            "exec_tail",
            "exec_kill",
            "exec_stat",
            "exec_input"
        ]
    );
    assert_eq!(h["tools"][0]["input_schema"]["type"], "object");
    assert_eq!(h["context"]["cwd"], g.workdir.to_str().unwrap());
    assert_eq!(h["context"]["sandbox_enabled"], true);
    assert_eq!(h["context"]["os"], "linux");
}

#[tokio::test]
async fn floor_paths_are_denied_and_name_the_floor() {
    let g = Glovebox::start();
    std::fs::create_dir_all(g.workdir.join("x/.ssh")).unwrap();
    for (path, entry) in [
        (".env", ".env*"),
        ("x/.ssh/id_rsa", ".ssh"),
        ("key.pem", "*.pem"),
    ] {
        std::fs::write(g.workdir.join(path), "secret").unwrap();
        let mut agent = g.connect("agent").await;
        let e = expect_error(
            &agent
                .invoke("c", "file_read", json!({ "path": path }))
                .await,
            "denied",
        );
        let reason = e["deny_reason"].as_str().unwrap();
        assert!(
            reason.contains("secret floor") && reason.contains(entry),
            "{path}: {e}"
        );
        assert_eq!(e["rule"], format!("floor:{entry}"));
    }
}

#[tokio::test]
async fn a_symlink_to_a_floor_file_is_denied_by_its_target() {
    let g = Glovebox::start();
    let secrets = g.root().join("home/.ssh");
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(secrets.join("id_ed25519"), "KEY").unwrap();
    symlink(secrets.join("id_ed25519"), g.workdir.join("notes.txt")).unwrap();
    let mut agent = g.connect("agent").await;
    let e = expect_error(
        &agent
            .invoke("c", "file_read", json!({"path": "notes.txt"}))
            .await,
        "denied",
    );
    assert_eq!(e["rule"], "floor:.ssh", "{e}");
}

#[tokio::test]
async fn dot_dot_escapes_are_judged_by_their_real_target() {
    let g = Glovebox::with_extra_roots(&["outside", "elsewhere"]);
    let outside = g.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("data.txt"), "outside").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "esc", "tool": "file_read", "params": {"path": "../outside/data.txt"}})).await;
    let ask = approver.next_ask().await;
    assert_eq!(
        ask["subjects"][0]["path"],
        outside.join("data.txt").to_str().unwrap(),
        "{ask}"
    );
    assert_eq!(ask["subjects"][0]["domain"], "read");
    approver.answer(&ask, "deny").await;
    expect_error(&agent.result_for("esc").await, "denied");
}

#[tokio::test]
async fn a_symlink_pointing_outside_is_judged_by_its_real_target() {
    // `outside` is another root of the account (Landlock lets it through; the gate asks).
    let g = Glovebox::start_with(glovebox_e2e::Options {
        extra_roots: vec!["outside".into()],
        ..Default::default()
    });
    let outside = g.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("data.txt"), "outside").unwrap();
    symlink(&outside, g.workdir.join("inside")).unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "s", "tool": "file_read", "params": {"path": "inside/data.txt"}})).await;
    let ask = approver.next_ask().await;
    assert_eq!(
        ask["subjects"][0]["path"],
        outside.join("data.txt").to_str().unwrap()
    );
    approver.answer(&ask, "once").await;
    let r = expect_ok(&agent.result_for("s").await);
    assert_eq!(r["content"], "outside");
}

#[tokio::test]
async fn write_asks_and_once_writes_it() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("notes.txt"), "one\ntwo\n").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent
        .send(json!({"type": "invoke", "call_id": "w1", "tool": "file_write", "params": {"path": "notes.txt", "content": "one\n2\n"}}))
        .await;
    let ask = approver.next_ask().await;
    assert_eq!(ask["tool"], "file_write");
    assert_eq!(ask["account"], g.account);
    assert_eq!(ask["call_id"], "w1");
    assert_eq!(ask["subjects"][0]["domain"], "write");
    assert_eq!(ask["expires_in_ms"], 25_000);
    let preview = ask["preview"].as_str().unwrap();
    assert!(preview.contains("-two\n+2\n"), "{preview}");
    approver.answer(&ask, "once").await;
    let r = expect_ok(&agent.result_for("w1").await);
    assert_eq!(r["bytes"], 6);
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("notes.txt")).unwrap(),
        "one\n2\n"
    );
    // once is once: the next write asks again
    agent.send(json!({"type": "invoke", "call_id": "w2", "tool": "file_write", "params": {"path": "notes.txt", "content": "x"}})).await;
    let again = approver.next_ask().await;
    assert_eq!(again["call_id"], "w2");
    approver.answer(&again, "deny").await;
    expect_error(&agent.result_for("w2").await, "denied");
}

#[tokio::test]
async fn deny_leaves_the_file_unchanged() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("keep.txt"), "original").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "d", "tool": "file_write", "params": {"path": "keep.txt", "content": "changed"}})).await;
    let ask = approver.next_ask().await;
    approver.answer(&ask, "deny").await;
    let e = expect_error(&agent.result_for("d").await, "denied");
    assert!(
        e["deny_reason"]
            .as_str()
            .unwrap()
            .contains("approver denied"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("keep.txt")).unwrap(),
        "original"
    );
}

#[tokio::test]
async fn always_persists_an_exact_rule_and_stops_asking() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "a1", "tool": "file_write", "params": {"path": "out[1].txt", "content": "v1"}})).await;
    let ask = approver.next_ask().await;
    approver.answer(&ask, "always").await;
    expect_ok(&agent.result_for("a1").await);
    let target = g.workdir.join("out[1].txt");
    let policy = std::fs::read_to_string(g.permissions_file()).unwrap();
    // The glob escapes `[` and `]` with a backslash, which the YAML double-quoted scalar doubles.
    let escaped = target
        .to_str()
        .unwrap()
        .replace('[', "\\\\[")
        .replace(']', "\\\\]");
    assert!(
        policy.contains(&escaped),
        "exact, escaped rule for {}: {policy}",
        target.display()
    );
    drop(approver);
    // No approver is connected now, yet the same write goes through: the rule decides.
    let r = agent
        .invoke(
            "a2",
            "file_write",
            json!({"path": "out[1].txt", "content": "v2"}),
        )
        .await;
    expect_ok(&r);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "v2");
    // ...and only that path: a sibling still asks (and is denied without an approver).
    expect_error(
        &agent
            .invoke(
                "a3",
                "file_write",
                json!({"path": "out1.txt", "content": "x"}),
            )
            .await,
        "denied",
    );
}

#[tokio::test]
async fn no_approver_means_denied_at_once() {
    let g = Glovebox::start();
    let mut agent = g.connect("agent").await;
    let started = Instant::now();
    let e = expect_error(
        &agent
            .invoke("n", "file_write", json!({"path": "a.txt", "content": "x"}))
            .await,
        "denied",
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "denied after {:?}, not at once",
        started.elapsed()
    );
    assert!(
        e["deny_reason"].as_str().unwrap().contains("no approver"),
        "{e}"
    );
    assert!(!g.workdir.join("a.txt").exists());
}

/// The ask timeout an approver is told: glovebox.yaml's `limits.ask_timeout_secs` when `up` is
/// not given `--ask-timeout-secs`, which wins over it; 25 s when neither is set.
#[tokio::test]
async fn the_ask_timeout_is_set_in_glovebox_yaml_and_up_overrides_it() {
    for (limit, flag, want_ms) in [
        (None, None, 25_000),
        (Some("ask_timeout_secs: 7"), None, 7_000),
        (Some("ask_timeout_secs: 7"), Some(3), 3_000),
    ] {
        let g = Glovebox::start_with(glovebox_e2e::Options {
            ask_timeout_secs: flag,
            limits: limit.into_iter().map(str::to_owned).collect(),
            ..Default::default()
        });
        let mut approver = g.connect("approver").await;
        let mut agent = g.connect("agent").await;
        agent.send(json!({"type": "invoke", "call_id": "t", "tool": "file_write", "params": {"path": "a.txt", "content": "x"}})).await;
        let ask = approver.next_ask().await;
        assert_eq!(ask["expires_in_ms"], want_ms, "{limit:?} {flag:?}");
    }
}

#[tokio::test]
async fn an_unanswered_ask_times_out_as_denied() {
    let g = Glovebox::start_with(glovebox_e2e::Options {
        ask_timeout_secs: Some(1),
        ..Default::default()
    });
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "t", "tool": "file_write", "params": {"path": "a.txt", "content": "x"}})).await;
    let ask = approver.next_ask().await;
    assert_eq!(ask["expires_in_ms"], 1000);
    let e = expect_error(&agent.result_for("t").await, "denied");
    assert!(
        e["deny_reason"]
            .as_str()
            .unwrap()
            .contains("did not answer in time"),
        "{e}"
    );
    let closed = approver.next().await;
    assert_eq!(
        closed,
        json!({"type": "ask_closed", "ask_id": ask["ask_id"], "reason": "timeout"})
    );
    // a late answer changes nothing
    approver.answer(&ask, "once").await;
    let err = approver.next().await;
    assert_eq!(err["type"], "error");
    assert!(!g.workdir.join("a.txt").exists());
}

#[tokio::test]
async fn approver_disconnecting_denies_its_pending_ask() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "g", "tool": "file_write", "params": {"path": "a.txt", "content": "x"}})).await;
    approver.next_ask().await;
    drop(approver);
    expect_error(&agent.result_for("g").await, "denied");
    assert!(!g.workdir.join("a.txt").exists());
}

#[tokio::test]
async fn a_file_changed_after_approval_is_not_overwritten() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("race.txt"), "before").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "r", "tool": "file_write", "params": {"path": "race.txt", "content": "agent"}})).await;
    let ask = approver.next_ask().await;
    // Someone edits the file while the approver looks at the diff.
    std::fs::write(g.workdir.join("race.txt"), "edited by the user").unwrap();
    approver.answer(&ask, "once").await;
    expect_error(&agent.result_for("r").await, "changed");
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("race.txt")).unwrap(),
        "edited by the user"
    );
}

#[tokio::test]
async fn a_hard_linked_file_is_refused() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "data").unwrap();
    std::fs::hard_link(g.workdir.join("a.txt"), g.root().join("elsewhere.txt")).unwrap();
    let mut agent = g.connect("agent").await;
    let e = expect_error(
        &agent
            .invoke("h", "file_read", json!({"path": "a.txt"}))
            .await,
        "denied",
    );
    assert!(e["message"].as_str().unwrap().contains("hard links"), "{e}");
}

#[tokio::test]
async fn list_hides_floor_entries() {
    let g = Glovebox::start();
    for name in ["visible.txt", ".env", "server.key"] {
        std::fs::write(g.workdir.join(name), "x").unwrap();
    }
    std::fs::create_dir(g.workdir.join(".ssh")).unwrap();
    let mut agent = g.connect("agent").await;
    let r = expect_ok(&agent.invoke("l", "file_list", json!({})).await);
    let names: Vec<&str> = r["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["visible.txt"]);
    assert_eq!(r["hidden"], 3);
}

#[tokio::test]
async fn writing_through_a_dangling_symlink_is_refused() {
    let g = Glovebox::start();
    let target = g.root().join("outside-new.txt");
    symlink(&target, g.workdir.join("trap")).unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    // Judged at the link's own name, exactly as if nothing were there (the plan does not say a
    // link exists), and refused only after the approval.
    let (ask, result) = agent
        .invoke_asked(
            &mut approver,
            "t",
            "file_write",
            json!({"path": "trap", "content": "x"}),
            "once",
        )
        .await;
    assert_eq!(
        ask["subjects"][0]["path"],
        g.workdir.join("trap").to_str().unwrap()
    );
    let e = expect_error(&result, "invalid_params");
    assert!(e["message"].as_str().unwrap().contains("dangling"), "{e}");
    assert!(!target.exists());
}

#[tokio::test]
async fn the_cli_call_command_prints_results_and_errors() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("c.txt"), "from cli").unwrap();
    let (code, out, _) = g.run_cli(&["call", "file_read", r#"{"path":"c.txt"}"#]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["content"], "from cli");
    // The largest read there is: one result frame of over 1 MiB, read by the client in many parts.
    let large: String = (0..glovebox_proto::tools::MAX_READ_BYTES)
        .map(|i| char::from(b'a' + (i % 23) as u8))
        .collect();
    std::fs::write(g.workdir.join("large.txt"), &large).unwrap();
    let (code, out, err) = g.run_cli(&["call", "file_read", r#"{"path":"large.txt"}"#]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["truncated"], false, "{}", v["bytes"]);
    assert!(v["content"] == large.as_str(), "{} bytes", v["bytes"]);
    let (code, out, _) = g.run_cli(&["call", "file_read", r#"{"path":".env"}"#]);
    assert_eq!(code, 1);
    assert!(out.contains("\"denied\""), "{out}");
}

#[tokio::test]
async fn existence_is_reported_only_after_the_gate_allowed_the_path() {
    let g = Glovebox::start();
    let mut agent = g.connect("agent").await;
    // A missing floor file is denied, exactly like an existing one: no existence probe.
    let e = expect_error(
        &agent
            .invoke("m1", "file_read", json!({"path": "x/.ssh/id_rsa"}))
            .await,
        "denied",
    );
    assert_eq!(e["rule"], "floor:.ssh");
    // A missing file the policy allows is not found.
    expect_error(
        &agent
            .invoke("m2", "file_read", json!({"path": "missing.txt"}))
            .await,
        "not_found",
    );
    // A directory given to file_read is a clear error, after the decision.
    std::fs::create_dir(g.workdir.join("d")).unwrap();
    let e = expect_error(
        &agent.invoke("m3", "file_read", json!({"path": "d"})).await,
        "invalid_params",
    );
    assert!(
        e["message"].as_str().unwrap().contains("use file_list"),
        "{e}"
    );
}

#[tokio::test]
async fn a_file_swapped_for_a_symlink_after_approval_is_not_followed() {
    let g = Glovebox::start();
    let outside = g.root().join("victim.txt");
    std::fs::write(&outside, "precious").unwrap();
    std::fs::write(g.workdir.join("target.txt"), "old").unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "s", "tool": "file_write", "params": {"path": "target.txt", "content": "new"}})).await;
    let ask = approver.next_ask().await;
    std::fs::remove_file(g.workdir.join("target.txt")).unwrap();
    symlink(&outside, g.workdir.join("target.txt")).unwrap();
    approver.answer(&ask, "once").await;
    expect_error(&agent.result_for("s").await, "changed");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "precious");
}

#[tokio::test]
async fn a_parent_directory_swapped_for_a_symlink_after_approval_is_not_followed() {
    let g = Glovebox::start();
    let outside = g.root().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(g.workdir.join("sub")).unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "p", "tool": "file_write", "params": {"path": "sub/new.txt", "content": "x"}})).await;
    let ask = approver.next_ask().await;
    std::fs::remove_dir(g.workdir.join("sub")).unwrap();
    symlink(&outside, g.workdir.join("sub")).unwrap();
    approver.answer(&ask, "once").await;
    let r = agent.result_for("p").await;
    assert_eq!(r["ok"], false, "{r}");
    assert!(
        !outside.join("new.txt").exists(),
        "the write followed a symlink planted after approval"
    );
}

#[tokio::test]
async fn a_new_file_appearing_after_approval_is_not_overwritten() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "n", "tool": "file_write", "params": {"path": "fresh.txt", "content": "agent"}})).await;
    let ask = approver.next_ask().await;
    std::fs::write(g.workdir.join("fresh.txt"), "the user's").unwrap();
    approver.answer(&ask, "once").await;
    expect_error(&agent.result_for("n").await, "changed");
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("fresh.txt")).unwrap(),
        "the user's"
    );
}

#[tokio::test]
async fn a_replaced_file_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let g = Glovebox::start();
    let path = g.workdir.join("script.sh");
    std::fs::write(&path, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o750)).unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "m", "tool": "file_write", "params": {"path": "script.sh", "content": "#!/bin/sh\necho hi\n"}})).await;
    let ask = approver.next_ask().await;
    approver.answer(&ask, "once").await;
    expect_ok(&agent.result_for("m").await);
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o750
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "#!/bin/sh\necho hi\n"
    );
    // no temporary file left behind
    let leftovers: Vec<_> = std::fs::read_dir(&g.workdir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("glovebox"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn hidden_characters_in_an_ask_are_shown_as_tokens_and_flagged() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let name = "invoice\u{202E}fdp.exe";
    agent
        .send(
            json!({"type": "invoke", "call_id": "b", "tool": "file_write",
                     "params": {"path": name, "content": "\u{1b}[2Jok\r\n"}}),
        )
        .await;
    let ask = approver.next_ask().await;
    // The raw fields are what will run; the display form is what a person reads.
    assert!(ask["subjects"][0]["path"].as_str().unwrap().ends_with(name));
    let shown = ask["display"]["subjects"][0]["path"].as_str().unwrap();
    assert!(shown.ends_with("invoice⟨U+202E⟩fdp.exe"), "{shown}");
    let preview = ask["display"]["preview"].as_str().unwrap();
    assert!(preview.contains("⟨ESC[2J⟩ok⟨CRLF⟩"), "{preview}");
    assert!(
        ask["warning"]
            .as_str()
            .unwrap()
            .contains("hidden or control characters"),
        "{ask}"
    );
    assert_eq!(ask["connection_id"], agent.hello_ok["connection_id"]);
    approver.answer(&ask, "deny").await;
    expect_error(&agent.result_for("b").await, "denied");
    // a plain ask carries no warning
    agent.send(json!({"type": "invoke", "call_id": "p", "tool": "file_write", "params": {"path": "plain.txt", "content": "x"}})).await;
    let ask = approver.next_ask().await;
    assert!(ask.get("warning").is_none(), "{ask}");
    approver.answer(&ask, "deny").await;
}

#[tokio::test]
async fn misleading_whitespace_and_look_alike_letters_in_asks_are_shown_and_named() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let cases = [
        (
            "file_write",
            json!({"path": "notes.txt\u{A0}", "content": "x"}),
            "/notes.txt⟨U+00A0⟩",
            "trailing whitespace in a path",
        ),
        (
            "file_write",
            json!({"path": "a.txt\n  write /x (approved by policy)", "content": "x"}),
            "/a.txt⟨LF⟩  write⟨SP⟩/x (approved by policy)",
            "a line break in a path",
        ),
        (
            "file_write",
            json!({"path": "docs/ notes.txt", "content": "x"}),
            "/docs/⟨SP⟩notes.txt",
            "leading whitespace in a path component",
        ),
        (
            "file_write",
            json!({"path": "\u{430}\u{440}\u{440}\u{4CF}\u{435}.txt", "content": "x"}),
            "\u{4CF}⟨U+04CF CYRILLIC⟩\u{435}⟨U+0435 CYRILLIC⟩.txt",
            "passes for the ASCII `apple` (Cyrillic letters)",
        ),
        (
            "exec_run",
            json!({"command": "\u{FF45}\u{FF43}\u{FF48}\u{FF4F} hi"}),
            "\u{FF4F}⟨U+FF4F FULLWIDTH⟩ hi",
            "passes for the ASCII `echo` (fullwidth letters)",
        ),
        (
            "exec_run",
            json!({"command": "\u{435}cho hi"}),
            "\u{435}⟨U+0435 CYRILLIC⟩cho hi",
            "mixed scripts (Latin and Cyrillic look-alikes) in `\u{435}cho`",
        ),
        (
            "exec_run",
            json!({"command": format!("echo ok{}; echo hidden", " ".repeat(300))}),
            "echo ok⟨300 spaces⟩; echo hidden",
            "a run of 300 spaces in a command",
        ),
    ];
    for (i, (tool, params, shown, named)) in cases.into_iter().enumerate() {
        let call_id = format!("m{i}");
        let (ask, r) = agent
            .invoke_asked(&mut approver, &call_id, tool, params, "deny")
            .await;
        expect_error(&r, "denied");
        let subjects = ask["display"]["subjects"].as_array().unwrap();
        let first = subjects[0]["path"].as_str().unwrap();
        assert!(
            first.ends_with(shown),
            "{first:?} does not end with {shown:?}"
        );
        for s in subjects {
            let path = s["path"].as_str().unwrap();
            assert!(
                !path.contains('\n'),
                "a displayed subject spans lines: {path:?}"
            );
        }
        let warning = ask["warning"].as_str().unwrap_or_default();
        assert!(
            warning.contains(named),
            "{warning:?} does not name {named:?}"
        );
    }
}

#[tokio::test]
async fn an_agent_can_withdraw_a_call_waiting_for_approval() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "w", "tool": "file_write", "params": {"path": "w.txt", "content": "x"}})).await;
    let ask = approver.next_ask().await;
    agent.send(json!({"type": "cancel", "call_id": "w"})).await;
    let e = expect_error(&agent.result_for("w").await, "denied");
    assert!(
        e["deny_reason"].as_str().unwrap().contains("withdrawn"),
        "{e}"
    );
    let closed = approver.next().await;
    assert_eq!(
        closed,
        json!({"type": "ask_closed", "ask_id": ask["ask_id"], "reason": "withdrawn"})
    );
    // a late answer to the withdrawn ask is refused, and nothing was written
    approver.answer(&ask, "once").await;
    assert_eq!(approver.next().await["type"], "error");
    assert!(!g.workdir.join("w.txt").exists());
    // cancelling a call that is not in flight is an error frame
    agent
        .send(json!({"type": "cancel", "call_id": "nope"}))
        .await;
    assert_eq!(agent.next().await["type"], "error");
    let pool = g.audit_pool().await;
    let approval: String =
        sqlx::query_scalar("SELECT approval FROM tool_calls WHERE client_call_id = 'w'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(approval, "cancelled");
}

#[tokio::test]
async fn a_disconnecting_agent_withdraws_its_pending_asks() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "d", "tool": "file_write", "params": {"path": "d.txt", "content": "x"}})).await;
    let ask = approver.next_ask().await;
    drop(agent);
    let closed = approver.next().await;
    assert_eq!(closed["type"], "ask_closed");
    assert_eq!(closed["ask_id"], ask["ask_id"]);
    // the approver is free for the next ask at once
    let mut other = g.connect("agent").await;
    other.send(json!({"type": "invoke", "call_id": "n", "tool": "file_write", "params": {"path": "n.txt", "content": "y"}})).await;
    let next = approver.next_ask().await;
    assert_eq!(next["call_id"], "n");
    approver.answer(&next, "once").await;
    expect_ok(&other.result_for("n").await);
    assert!(!g.workdir.join("d.txt").exists());
}

#[tokio::test]
async fn approvers_see_the_account_become_busy_and_idle() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "w", "tool": "file_write", "params": {"path": "a.txt", "content": "x"}})).await;
    let busy = approver.next_any().await;
    assert_eq!(
        busy,
        json!({"type": "activity", "account": g.account, "active": true})
    );
    let ask = approver.next_any().await;
    assert_eq!(ask["type"], "ask");
    approver.answer(&ask, "once").await;
    expect_ok(&agent.result_for("w").await);
    let idle = approver.next_any().await;
    assert_eq!(
        idle,
        json!({"type": "activity", "account": g.account, "active": false})
    );
}

/// A small file is read before its verdict. A job that keeps putting in place of the file an
/// agent reads a symbolic link to a file the policy denies, a hard link to it and a named pipe,
/// as fast as it can, never has the denied file's content told and never holds the executor:
/// every read is answered, with the file's own content or an error.
#[tokio::test]
async fn a_job_swapping_the_file_read_gets_nothing_of_a_denied_file() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("a.txt"), "plain").unwrap();
    std::fs::write(g.workdir.join("secret.txt"), "secret-content").unwrap();
    let policy = std::fs::read_to_string(g.permissions_file()).unwrap();
    let denying = policy.replace("    deny: []\n", "    deny: ['./secret.txt']\n");
    assert_ne!(denying, policy);
    std::fs::write(g.permissions_file(), denying).unwrap();
    let mut agent = g.connect("agent").await;
    let mut approver = g.connect("approver").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while agent
        .invoke("s", "file_read", json!({"path": "secret.txt"}))
        .await["ok"]
        == true
    {
        assert!(Instant::now() < deadline, "the deny never applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let swaps = "while :; do \
        ln -sf secret.txt t && mv -f t a.txt; \
        printf plain > t && mv -f t a.txt; \
        ln -f secret.txt t && mv -f t a.txt; \
        printf plain > t && mv -f t a.txt; \
        rm -f t; mkfifo t && mv -f t a.txt; \
        printf plain > t && mv -f t a.txt; \
        done";
    let (_, r) = agent
        .invoke_asked(
            &mut approver,
            "swaps",
            "exec_run",
            json!({ "command": swaps }),
            "once",
        )
        .await;
    let job = expect_ok(&r)["job_id"].as_str().unwrap().to_owned();
    let (mut told, mut refused) = (0, 0);
    for n in 0..2000 {
        let r = agent
            .invoke(&format!("r{n}"), "file_read", json!({"path": "a.txt"}))
            .await;
        assert!(!r.to_string().contains("secret-content"), "{r}");
        if r["ok"] == true {
            assert_eq!(r["result"]["content"], "plain", "{r}");
            told += 1;
        } else {
            refused += 1;
        }
        if told >= 20 && refused >= 20 {
            break;
        }
    }
    eprintln!("figures: told {told}, refused {refused}");
    assert!(
        told >= 20 && refused >= 20,
        "told {told}, refused {refused}"
    );
    agent.kill_running_job(&job, "the swaps").await;
}
