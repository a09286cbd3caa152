//! `glovebox approve` end to end: the real command answering the asks of a running glovebox, in a
//! terminal (a pseudo-terminal: single keys, no Enter; Ctrl-C the byte a terminal sends) or with
//! its stdin a pipe (lines, as a script types them). An answer counts only for the ask on screen
//! when it was typed: a key pressed while no ask was shown (after one was withdrawn, say) never
//! answers the next ask. Ctrl-C denies the ask on screen and exits 130; a stdin that is or
//! becomes closed is an error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use glovebox_e2e::interactive::Interactive;
use glovebox_e2e::{Client, Glovebox, expect_error, expect_ok, glovebox_bin};
use nix::sys::termios::LocalFlags;
use serde_json::json;

/// `approve` waits this long before trusting a key pressed after an ask appeared
/// (`MIN_READING_TIME` in cli/src/client/typeahead.rs), with a wide margin.
const READING_TIME: Duration = Duration::from_millis(1500);

/// What `approve` says when its stdin is closed (`STDIN_CLOSED` in cli/src/client/terminal.rs).
const STDIN_CLOSED: &str = "stdin is closed: glovebox approve needs a terminal";

/// `glovebox approve` for `g`, not yet started.
fn approve_command(g: &Glovebox) -> Command {
    let mut command = Command::new(glovebox_bin());
    command.arg("approve").arg("--state-dir").arg(&g.state);
    command
}

/// A running `glovebox approve` for `g` in a terminal, once it says it waits for asks.
fn start_approve(g: &Glovebox) -> Interactive {
    let mut approve = Interactive::start_in_terminal(approve_command(g));
    approve.expect("waiting for asks");
    approve
}

/// The same with its stdin a pipe: lines, as a script types them.
fn start_approve_with_a_pipe(g: &Glovebox) -> Interactive {
    let mut approve = Interactive::start(approve_command(g));
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

/// An agent whose write of `one.txt` (call `one`) asks, once `approve` shows the ask.
async fn ask_write_of_one(g: &Glovebox, approve: &mut Interactive) -> Client {
    let mut agent = g.connect("agent").await;
    invoke_write(&mut agent, "one", "one.txt").await;
    approve.expect("── call one");
    agent
}

#[tokio::test]
async fn a_key_pressed_while_no_ask_was_shown_never_answers_the_next_ask() {
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
    approve.type_keys("y");
    approve.expect("(ignored: no ask is shown)");

    // ask 2 is shown: the stale "y" must not answer it; a "n" typed after it was shown does
    invoke_write(&mut agent, "two", "two.txt").await;
    approve.expect("── call two");
    std::thread::sleep(READING_TIME);
    approve.type_keys("n");
    let answered = approve.expect("answered");
    assert!(answered.ends_with("answered deny"), "{answered}");
    expect_error(&agent.result_for("two").await, "denied");
    assert!(!g.workdir.join("two.txt").exists());

    // and a "y" typed after ask 3 was shown answers it (the Enter after it is no answer, and
    // nothing is said about it)
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
async fn a_key_pressed_within_a_second_of_the_ask_is_ignored_and_answers_name_their_ask() {
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
    // pressed 0.6 s after the ask appeared: too soon to have been read
    std::thread::sleep(Duration::from_millis(600));
    approve.type_keys("y");
    approve.expect("ignored what was typed before this ask was shown");
    assert!(!g.workdir.join("one.txt").exists());
    std::thread::sleep(READING_TIME);
    approve.type_keys("y");
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
    approve.type_keys("y");
    approve.expect("preview was cut: not all of what it allows is shown");
    assert!(!g.workdir.join("big.txt").exists(), "one y does not allow");
    // the confirmation is judged like an answer: pressed too soon, it is ignored
    approve.type_keys("y");
    approve.expect("ignored what was typed before this ask was shown");
    std::thread::sleep(READING_TIME);
    approve.type_keys("y");
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
    let mut approve = Interactive::start_in_terminal(approve_command(&g));
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
async fn from_a_pipe_approve_reads_lines_and_a_word_other_than_an_answer_explains_the_choices() {
    let g = Glovebox::start();
    let mut approve = start_approve_with_a_pipe(&g);
    let mut agent = ask_write_of_one(&g, &mut approve).await;
    std::thread::sleep(READING_TIME);
    approve.type_line("maybe");
    let explained = approve.expect("not an answer");
    assert!(explained.contains("y to allow once") && explained.contains("n to deny"));
    // "maybe" holds an "a", but a line is judged whole: nothing was answered
    assert!(!g.workdir.join("one.txt").exists());
    approve.type_line("?");
    approve.expect("ask id: ask-");
    approve.type_line("");
    approve.type_line("n");
    let answered = approve.expect("answered");
    assert!(answered.ends_with("answered deny"), "{answered}");
    expect_error(&agent.result_for("one").await, "denied");
}

#[tokio::test]
async fn a_sigint_denies_the_ask_on_screen_and_ends_approve_at_once_with_130() {
    let g = Glovebox::start();
    let mut approve = start_approve_with_a_pipe(&g);
    let mut agent = ask_write_of_one(&g, &mut approve).await;
    let pid = nix::unistd::Pid::from_raw(approve.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let started = Instant::now();
    let status = approve.wait();
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let e = expect_error(&agent.result_for("one").await, "denied");
    assert!(
        e["deny_reason"]
            .as_str()
            .unwrap()
            .contains("approver denied"),
        "{e}"
    );
    assert!(!g.workdir.join("one.txt").exists());
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

#[tokio::test]
async fn a_single_key_answers_without_enter() {
    let g = Glovebox::start();
    let mut approve = start_approve(&g);
    let mut agent = ask_write_of_one(&g, &mut approve).await;
    std::thread::sleep(READING_TIME);
    approve.type_keys("y");
    let answered = approve.expect("answered");
    assert!(answered.ends_with("answered once"), "{answered}");
    expect_ok(&agent.result_for("one").await);
    assert!(g.workdir.join("one.txt").exists());

    invoke_write(&mut agent, "two", "two.txt").await;
    approve.expect("── call two");
    std::thread::sleep(READING_TIME);
    approve.type_keys("n");
    let answered = approve.expect("answered");
    assert!(answered.ends_with("answered deny"), "{answered}");
    expect_error(&agent.result_for("two").await, "denied");
    assert!(!g.workdir.join("two.txt").exists());
}

/// `a` answers "always": the call runs, and the same call again is allowed by the rule it wrote,
/// with nothing shown to the approver.
#[tokio::test]
async fn the_a_key_answers_always_and_the_same_call_is_not_asked_again() {
    let g = Glovebox::start();
    let mut approve = start_approve(&g);
    let mut agent = ask_write_of_one(&g, &mut approve).await;
    std::thread::sleep(READING_TIME);
    approve.type_keys("a");
    let answered = approve.expect("answered");
    assert!(answered.ends_with("answered always"), "{answered}");
    expect_ok(&agent.result_for("one").await);
    let rules = std::fs::read_to_string(g.permissions_file()).unwrap();
    assert!(rules.contains("one.txt"), "{rules}");
    // Asked again, it would wait for a key that never comes: it is answered at once.
    invoke_write(&mut agent, "again", "one.txt").await;
    expect_ok(&agent.result_for("again").await);
    invoke_write(&mut agent, "other", "other.txt").await;
    approve.expect("── call other");
}

#[tokio::test]
async fn question_mark_shows_the_ask_again_with_its_full_id_and_answers_nothing() {
    let g = Glovebox::start();
    let mut approve = start_approve(&g);
    let mut agent = g.connect("agent").await;
    invoke_write(&mut agent, "one", "one.txt").await;
    let header = approve.expect("── call one");
    approve.expect("tool: file_write");
    let subject = approve.expect("one.txt");
    // Asking for the details is never too soon, once approve has taken the ask in: what was
    // typed while it was still printing the ask is dropped as typed ahead (hence the pause, which
    // a loaded machine needs).
    std::thread::sleep(Duration::from_millis(300));
    approve.type_keys("?");
    let again = approve.expect("── call one");
    assert_eq!(again, header);
    approve.expect("tool: file_write");
    assert_eq!(approve.expect("one.txt"), subject);
    let id = approve.expect("ask id: ");
    let id = id.split("ask id: ").nth(1).unwrap().trim();
    let short = header
        .split("── ask ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    assert!(
        id.starts_with(&format!("ask-{short}")) && id.len() > "ask-".len() + short.len(),
        "{id} vs {short}"
    );
    // still unanswered: the agent waits, and the next key answers
    std::thread::sleep(READING_TIME);
    assert!(!g.workdir.join("one.txt").exists());
    approve.type_keys("?");
    approve.expect("ask id: ");
    approve.type_keys("n");
    let answered = approve.expect("answered");
    assert!(answered.ends_with("answered deny"), "{answered}");
    expect_error(&agent.result_for("one").await, "denied");
}

#[tokio::test]
async fn a_key_that_is_no_answer_reminds_of_the_choices() {
    let g = Glovebox::start();
    let mut approve = start_approve(&g);
    let mut agent = ask_write_of_one(&g, &mut approve).await;
    std::thread::sleep(READING_TIME);
    approve.type_keys("x");
    let reminder = approve.expect("not an answer");
    for choice in [
        "y to allow once",
        "a to always allow",
        "n to deny",
        "? for the details",
    ] {
        assert!(reminder.contains(choice), "{reminder}");
    }
    assert!(!g.workdir.join("one.txt").exists());
    approve.type_keys("y");
    approve.expect("answered once");
    expect_ok(&agent.result_for("one").await);
}

#[tokio::test]
async fn ctrl_c_denies_the_ask_on_screen_says_so_exits_130_and_restores_the_terminal() {
    let g = Glovebox::start();
    let mut approve = start_approve(&g);
    // single keys: no lines, no echo; Ctrl-C still the terminal's
    let modes = approve.terminal_modes();
    assert!(
        !modes.intersects(LocalFlags::ICANON | LocalFlags::ECHO),
        "{modes:?}"
    );
    assert!(modes.contains(LocalFlags::ISIG), "{modes:?}");
    let mut agent = ask_write_of_one(&g, &mut approve).await;
    approve.ctrl_c();
    let said = approve.expect("answered deny");
    assert!(said.ends_with("answered deny (Ctrl-C)"), "{said}");
    assert_eq!(approve.exit_code(), Some(130));
    let e = expect_error(&agent.result_for("one").await, "denied");
    assert!(
        e["deny_reason"]
            .as_str()
            .unwrap()
            .contains("approver denied"),
        "{e}"
    );
    assert!(!g.workdir.join("one.txt").exists());
    let modes = approve.terminal_modes();
    assert!(
        modes.contains(LocalFlags::ICANON | LocalFlags::ECHO),
        "the terminal's mode is back: {modes:?}"
    );
}

#[tokio::test]
async fn ctrl_c_with_no_ask_on_screen_exits_130() {
    let g = Glovebox::start();
    let mut approve = start_approve(&g);
    approve.ctrl_c();
    assert_eq!(approve.finish(), Some(130));
    assert!(!approve.printed("answered"), "{:?}", approve.seen());
}

#[tokio::test]
async fn approve_with_stdin_from_dev_null_fails_at_once() {
    let g = Glovebox::start();
    let mut approve = Interactive::start_without_stdin(approve_command(&g));
    assert_eq!(approve.finish(), Some(2));
    assert!(approve.printed(STDIN_CLOSED), "{:?}", approve.seen());
    // before connecting: no checkpoint shown, no waiting
    assert!(
        !approve.printed("waiting for asks") && !approve.printed("checkpoint"),
        "{:?}",
        approve.seen()
    );
}

#[tokio::test]
async fn a_stdin_that_closes_denies_the_ask_on_screen_and_fails() {
    let g = Glovebox::start();
    let mut approve = start_approve_with_a_pipe(&g);
    let mut agent = ask_write_of_one(&g, &mut approve).await;
    approve.close_stdin();
    // the denial on stdout, the error on stderr
    assert_eq!(approve.finish(), Some(2));
    assert!(
        approve.printed("answered deny (stdin is closed)") && approve.printed(STDIN_CLOSED),
        "{:?}",
        approve.seen()
    );
    expect_error(&agent.result_for("one").await, "denied");
    assert!(!g.workdir.join("one.txt").exists());
}
