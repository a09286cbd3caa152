//! `glovebox approve` end to end: the real command, its stdin a pipe, answering the asks of a
//! running glovebox. An answer counts only for the ask on screen when it was typed: a line typed
//! while no ask was shown (after one was withdrawn, say) never answers the next ask.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use glovebox_e2e::interactive::Interactive;
use glovebox_e2e::{Client, Glovebox, expect_error, expect_ok, glovebox_bin};
use serde_json::json;

/// `approve` waits this long before trusting a line typed after an ask appeared
/// (`MIN_READING_TIME` in cli/src/client/typeahead.rs), with a wide margin.
const READING_TIME: Duration = Duration::from_millis(1500);

/// A running `glovebox approve` for `g`, once it says it waits for asks.
fn start_approve(g: &Glovebox) -> Interactive {
    let mut command = Command::new(glovebox_bin());
    command.arg("approve").arg("--state-dir").arg(&g.state);
    let mut approve = Interactive::start(command);
    approve.expect("waiting for asks");
    approve
}

async fn invoke_write(agent: &mut Client, call_id: &str, path: &str) {
    agent
        .send(
            json!({"type": "invoke", "call_id": call_id, "tool": "file_write",
                     "params": {"path": path, "content": "x"}}),
        )
        .await;
}

#[tokio::test]
async fn a_line_typed_while_no_ask_was_shown_never_answers_the_next_ask() {
    let g = Glovebox::start();
    let mut approve = start_approve(&g);
    let mut agent = g.connect("agent").await;

    // ask 1 is shown, then withdrawn by the agent
    invoke_write(&mut agent, "one", "one.txt").await;
    approve.expect("── call one");
    agent
        .send(json!({"type": "cancel", "call_id": "one"}))
        .await;
    expect_error(&agent.result_for("one").await, "denied");
    approve.expect("(ask closed: withdrawn)");

    // the approver's "y", meant for ask 1, arrives after it is gone
    approve.type_line("y");
    approve.expect("(ignored: no ask is shown)");

    // ask 2 is shown: the stale "y" must not answer it; a "n" typed after it was shown does
    invoke_write(&mut agent, "two", "two.txt").await;
    approve.expect("── call two");
    std::thread::sleep(READING_TIME);
    approve.type_line("n");
    let answered = approve.expect("answered");
    assert!(answered.ends_with("answered deny"), "{answered}");
    expect_error(&agent.result_for("two").await, "denied");
    assert!(!g.workdir.join("two.txt").exists());

    // and a "y" typed after ask 3 was shown answers it
    invoke_write(&mut agent, "three", "three.txt").await;
    approve.expect("── call three");
    std::thread::sleep(READING_TIME);
    approve.type_line("y");
    let answered = approve.expect("answered");
    assert!(answered.ends_with("answered once"), "{answered}");
    expect_ok(&agent.result_for("three").await);
    assert!(g.workdir.join("three.txt").exists());
}

#[tokio::test]
async fn an_answer_typed_within_a_second_of_the_ask_is_ignored_and_answers_name_their_ask() {
    let g = Glovebox::start();
    let mut approve = start_approve(&g);
    let mut agent = g.connect("agent").await;
    invoke_write(&mut agent, "one", "one.txt").await;
    let header = approve.expect("── call one");
    // `── ask 3f2a ── account …`: the short id the answer is echoed with
    let short = header
        .split("── ask ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .to_owned();
    assert_eq!(short.len(), 4, "{header}");
    // typed 0.6 s after the ask appeared: too soon to have been read
    std::thread::sleep(Duration::from_millis(600));
    approve.type_line("y");
    approve.expect("ignored what was typed before this ask was shown");
    assert!(!g.workdir.join("one.txt").exists());
    std::thread::sleep(READING_TIME);
    approve.type_line("y");
    let answered = approve.expect("answered");
    assert!(
        answered.ends_with(&format!("ask {short}: answered once")),
        "{answered}"
    );
    expect_ok(&agent.result_for("one").await);
}

#[tokio::test]
async fn allowing_an_ask_whose_preview_was_cut_needs_the_answer_twice() {
    let g = Glovebox::start();
    let mut approve = start_approve(&g);
    let mut agent = g.connect("agent").await;
    // a diff over the preview's 256 KiB limit
    let content = "line of a large file\n".repeat(16 * 1024);
    agent
        .send(
            json!({"type": "invoke", "call_id": "big", "tool": "file_write",
                     "params": {"path": "big.txt", "content": content}}),
        )
        .await;
    approve.expect("── call big");
    approve.expect("the preview was cut at its limit");
    std::thread::sleep(READING_TIME);
    approve.type_line("y");
    approve.expect("preview was cut: not all of what it allows is shown");
    assert!(!g.workdir.join("big.txt").exists(), "one y does not allow");
    // the confirmation is judged like an answer: typed too soon, it is ignored
    approve.type_line("y");
    approve.expect("ignored what was typed before this ask was shown");
    std::thread::sleep(READING_TIME);
    approve.type_line("y");
    let answered = approve.expect("answered");
    assert!(answered.ends_with("answered once"), "{answered}");
    expect_ok(&agent.result_for("big").await);
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("big.txt")).unwrap(),
        content
    );
}

#[tokio::test]
async fn the_broker_refuses_to_allow_a_cut_preview_without_the_confirmation() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let content = "x".repeat(300 * 1024);
    agent
        .send(
            json!({"type": "invoke", "call_id": "big", "tool": "file_write",
                     "params": {"path": "big.txt", "content": content}}),
        )
        .await;
    let ask = approver.next_ask().await;
    assert_eq!(ask["preview_cut"], true, "{ask}");
    let id = ask["ask_id"].clone();
    approver
        .send(json!({"type": "answer", "ask_id": id, "decision": "once"}))
        .await;
    let refused = approver.next().await;
    assert_eq!(refused["type"], "error", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("needs confirm_cut"),
        "{refused}"
    );
    assert!(!g.workdir.join("big.txt").exists());
    // still pending: the confirmed answer is taken
    approver
        .send(json!({"type": "answer", "ask_id": id, "decision": "once", "confirm_cut": true}))
        .await;
    expect_ok(&agent.result_for("big").await);
    assert!(g.workdir.join("big.txt").exists());
}

#[tokio::test]
async fn approve_shows_the_audits_newest_signed_checkpoint() {
    let g = Glovebox::start();
    let mut command = Command::new(glovebox_bin());
    command.arg("approve").arg("--state-dir").arg(&g.state);
    let mut approve = Interactive::start(command);
    let line = approve.expect("audit: newest signed checkpoint");
    // the start checkpoint: what the gate wrote, as the audit has it
    let pool = g.audit_pool().await;
    let detail: String = sqlx::query_scalar(
        "SELECT detail FROM events WHERE kind = 'checkpoint' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let (cp, _) = glovebox_gate::audit::signed::Checkpoint::parse(&detail).unwrap();
    assert!(
        line.ends_with(&format!("{} rows, digest {}", cp.rows, &cp.digest[..16])),
        "{line} vs {detail}"
    );
    approve.expect("waiting for asks");
}

#[tokio::test]
async fn a_word_other_than_an_answer_explains_the_choices_and_an_empty_line_is_no_answer() {
    let g = Glovebox::start();
    let mut approve = start_approve(&g);
    let mut agent = g.connect("agent").await;
    invoke_write(&mut agent, "one", "one.txt").await;
    approve.expect("── call one");
    std::thread::sleep(READING_TIME);
    approve.type_line("maybe");
    let explained = approve.expect("not an answer");
    assert!(explained.contains("y to allow once") && explained.contains("n to deny"));
    approve.type_line("");
    approve.type_line("n");
    let answered = approve.expect("answered");
    assert!(answered.ends_with("answered deny"), "{answered}");
    expect_error(&agent.result_for("one").await, "denied");
}

#[tokio::test]
async fn ctrl_c_ends_approve_at_once_even_at_a_prompt() {
    let g = Glovebox::start();
    let mut approve = start_approve(&g);
    let mut agent = g.connect("agent").await;
    invoke_write(&mut agent, "one", "one.txt").await;
    approve.expect("── call one");
    let pid = nix::unistd::Pid::from_raw(approve.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let started = Instant::now();
    let status = approve.wait();
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn approve_says_so_and_ends_when_glovebox_stops() {
    let mut g = Glovebox::start();
    let mut approve = start_approve(&g);
    assert!(g.stop().unwrap().success());
    approve.expect("the broker went away");
    let status = approve.wait();
    assert_eq!(status.code(), Some(1), "{status:?}");
}
