//! `glovebox mcp` started on pipes and spoken to line by line, as an MCP client would: for the
//! tests of the stdio handover and of what a job can do to a running bridge.

use std::io::{BufRead, Read, Write};
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use serde_json::{Value, json};

use crate::{Glovebox, WAIT};

/// `glovebox mcp` on pipes, spoken to line by line.
pub struct Bridge {
    pub child: Child,
    pub to: std::fs::File,
    pub from: mpsc::Receiver<Value>,
    /// Notifications read while waiting for answers.
    pub heard: Vec<Value>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Bridge {
    pub fn start(g: &Glovebox) -> Bridge {
        Bridge::start_in(&g.state, &[])
    }

    /// A bridge of the glovebox whose state directory is `state`, with `more` arguments,
    /// initialized.
    pub fn start_in(state: &std::path::Path, more: &[&str]) -> Bridge {
        let mut bridge = Bridge::start_uninitialized(state, more);
        bridge.initialize(json!({"name": "e2e", "version": "1"}));
        bridge
    }

    /// [`Bridge::start_in`], the session not yet initialized.
    pub fn start_uninitialized(state: &std::path::Path, more: &[&str]) -> Bridge {
        let mut child = Command::new(crate::glovebox_bin())
            .args(["mcp", "--state-dir"])
            .arg(state)
            .args(more)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let to = std::fs::File::from(OwnedFd::from(child.stdin.take().unwrap()));
        let out = child.stdout.take().unwrap();
        let (tx, from) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                    return;
                }
            }
        });
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut err = child.stderr.take().unwrap();
        let collected = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    return;
                }
                collected
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Bridge {
            child,
            to,
            from,
            heard: Vec::new(),
            stderr,
        }
    }

    /// Initializes the session as the client `client_info`.
    pub fn initialize(&mut self, client_info: Value) {
        self.send(
            json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client_info}}),
        );
        let init = self.answer("init");
        assert_eq!(init["result"]["serverInfo"]["name"], "glovebox", "{init}");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    /// Waits until the bridge has the client's initialization from the broker, so that the
    /// session can be handed to a restarted broker (the broker tells it just after answering
    /// `initialize`: one killed in between takes the session with it).
    pub fn wait_resumable(&self) {
        let deadline = std::time::Instant::now() + WAIT;
        while !self.stderr().contains("the client initialized") {
            assert!(
                std::time::Instant::now() < deadline,
                "never told the initialization: {}",
                self.stderr()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    pub fn send(&mut self, message: Value) {
        writeln!(self.to, "{message}").unwrap();
    }

    pub fn call(&mut self, id: &str, tool: &str, arguments: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}));
    }

    /// The answer to request `id` (notifications before it are skipped).
    pub fn answer(&mut self, id: &str) -> Value {
        loop {
            let message = self
                .from
                .recv_timeout(WAIT)
                .unwrap_or_else(|e| panic!("no answer to {id} ({e}); {}", self.stderr()));
            if message["id"] == id {
                return message;
            }
            if message.get("id").is_none() {
                self.heard.push(message);
            }
        }
    }

    /// Makes a write that waits for `approver`'s answer: a call in flight in the broker.
    pub async fn hold_a_write(&mut self, id: &str, approver: &mut crate::Client) {
        self.call(id, "file_write", json!({"path": "new.txt", "content": "x"}));
        let ask = approver.next_ask().await;
        assert_eq!(ask["tool"], "file_write", "{ask}");
    }

    /// Checks that call `id` was answered as lost with the broker.
    pub fn answered_lost(&mut self, id: &str) {
        let lost = self.answer(id);
        assert_eq!(lost["result"]["isError"], true, "{lost}");
        assert!(text_of(&lost).contains("may or may not have run"), "{lost}");
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Asserts that the bridge says `what` on its stderr within `WAIT` (shown whole if not): its
    /// stderr is read on a thread of its own, so a line may come after an answer it preceded.
    pub fn assert_said(&self, what: &str) {
        let deadline = std::time::Instant::now() + WAIT;
        while !self.stderr().contains(what) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let said = self.stderr();
        assert!(
            said.contains(what),
            "the bridge did not say {what:?}: {said}"
        );
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
    }
}

pub fn text_of(answer: &Value) -> String {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}
