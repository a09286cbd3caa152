//! `glovebox approve` end to end: the real command, its stdin a pipe, answering the asks of a
//! running glovebox. An answer counts only for the ask on screen when it was typed: a line typed
//! while no ask was shown (after one was withdrawn, say) never answers the next ask.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use glovebox_e2e::{Client, Glovebox, WAIT, expect_error, expect_ok, glovebox_bin};
use serde_json::json;

/// `approve` waits this long before trusting a line typed after an ask appeared
/// (`MIN_READING_TIME` in cli/src/client/typeahead.rs), with a wide margin.
const READING_TIME: Duration = Duration::from_millis(750);

/// A running `glovebox approve`: its stdin, and its stdout and stderr as lines.
struct Approve {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Approve {
    fn start(g: &Glovebox) -> Approve {
        let mut child = Command::new(glovebox_bin())
            .arg("approve")
            .arg("--state-dir")
            .arg(&g.state)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        for stream in [
            Box::new(stdout) as Box<dyn std::io::Read + Send>,
            Box::new(stderr),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let stdin = child.stdin.take().unwrap();
        let mut approve = Approve {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        };
        approve.expect("waiting for asks");
        approve
    }

    /// Waits for an output line containing `needle` and returns it.
    fn expect(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "approve printed no {needle:?}; it printed:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    fn type_line(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }
}

impl Drop for Approve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- approve output ----\n{}", self.seen.join("\n"));
        }
    }
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
    let mut approve = Approve::start(&g);
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
    let answered = approve.expect("answered:");
    assert!(answered.ends_with("answered: deny"), "{answered}");
    expect_error(&agent.result_for("two").await, "denied");
    assert!(!g.workdir.join("two.txt").exists());

    // and a "y" typed after ask 3 was shown answers it
    invoke_write(&mut agent, "three", "three.txt").await;
    approve.expect("── call three");
    std::thread::sleep(READING_TIME);
    approve.type_line("y");
    let answered = approve.expect("answered:");
    assert!(answered.ends_with("answered: once"), "{answered}");
    expect_ok(&agent.result_for("three").await);
    assert!(g.workdir.join("three.txt").exists());
}

#[tokio::test]
async fn a_word_other_than_an_answer_explains_the_choices_and_an_empty_line_is_no_answer() {
    let g = Glovebox::start();
    let mut approve = Approve::start(&g);
    let mut agent = g.connect("agent").await;
    invoke_write(&mut agent, "one", "one.txt").await;
    approve.expect("── call one");
    std::thread::sleep(READING_TIME);
    approve.type_line("maybe");
    let explained = approve.expect("not an answer");
    assert!(explained.contains("y to allow once") && explained.contains("n to deny"));
    approve.type_line("");
    approve.type_line("n");
    let answered = approve.expect("answered:");
    assert!(answered.ends_with("answered: deny"), "{answered}");
    expect_error(&agent.result_for("one").await, "denied");
}

#[tokio::test]
async fn ctrl_c_ends_approve_at_once_even_at_a_prompt() {
    let g = Glovebox::start();
    let mut approve = Approve::start(&g);
    let mut agent = g.connect("agent").await;
    invoke_write(&mut agent, "one", "one.txt").await;
    approve.expect("── call one");
    let pid = nix::unistd::Pid::from_raw(approve.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let started = Instant::now();
    let status = approve.child.wait().unwrap();
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
    let mut approve = Approve::start(&g);
    assert!(g.stop().unwrap().success());
    approve.expect("the broker went away");
    let status = approve.child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{status:?}");
}
