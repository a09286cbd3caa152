//! A command driven like a person at a terminal: its stdin a pipe to type lines into, its stdout
//! and stderr read as lines (for `glovebox approve`). Killed on drop, with what it printed shown
//! when a test fails.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::WAIT;

pub struct Interactive {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Interactive {
    /// Starts `command` with its three streams piped.
    pub fn start(mut command: Command) -> Interactive {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
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
        Interactive {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for an output line containing `needle`; `None` if the command ended or `wait`
    /// passed first.
    pub fn wait_for(&mut self, needle: &str, wait: Duration) -> Option<String> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return Some(line);
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// Waits for an output line containing `needle` and returns it; panics with what the
    /// command printed if none comes within [`WAIT`].
    pub fn expect(&mut self, needle: &str) -> String {
        self.wait_for(needle, WAIT).unwrap_or_else(|| {
            panic!(
                "the command printed no {needle:?}; it printed:\n{}",
                self.seen.join("\n")
            )
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the command to exit, however long that takes.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }

    pub fn type_line(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The command's exit code once it has exited, within [`WAIT`]; `None` if it is still
    /// running (or was killed by a signal).
    pub fn exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Interactive {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- command output ----\n{}", self.seen.join("\n"));
        }
    }
}
