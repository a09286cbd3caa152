//! A command driven like a person at a terminal (for `glovebox approve`): either in a real
//! pseudo-terminal, its controlling terminal, where keys are typed without Enter and Ctrl-C is
//! the byte a terminal sends; or with its stdin a pipe to type lines into (a script). What it
//! prints is read as lines. Killed on drop, with what it printed shown when a test fails.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::WAIT;

pub struct Interactive {
    child: Child,
    /// Where typing goes: the pipe on the command's stdin, or the terminal's master side.
    /// `None` when its stdin is `/dev/null` or was closed.
    input: Option<Box<dyn Write + Send>>,
    /// The terminal's slave side, when the command runs in one: its mode is read there.
    terminal: Option<std::fs::File>,
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
        let input = child.stdin.take().unwrap();
        Interactive::reading(child, Some(Box::new(input)))
    }

    /// Starts `command` with its stdin `/dev/null` and its output piped.
    pub fn start_without_stdin(mut command: Command) -> Interactive {
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Interactive::reading(child, None)
    }

    /// Starts `command` in a new session whose controlling terminal is a new pseudo-terminal,
    /// which is its stdin, stdout and stderr: what a person's shell gives it.
    pub fn start_in_terminal(mut command: Command) -> Interactive {
        let pty = nix::pty::openpty(None, None).unwrap();
        let slave = std::fs::File::from(pty.slave);
        let terminal = slave.try_clone().unwrap();
        command
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave);
        // In the child, between fork and exec: a session of its own, with its stdin (the
        // terminal) as the controlling terminal, so the terminal's Ctrl-C signals it.
        #[allow(unsafe_code)]
        // SAFETY: used only in the child, between fork and exec, where descriptor 0 is the
        // terminal set up above.
        let stdin = unsafe { std::os::fd::BorrowedFd::borrow_raw(0) };
        #[allow(unsafe_code)]
        // SAFETY: the closure makes two async-signal-safe system calls (setsid, the TIOCSCTTY
        // ioctl) and allocates nothing.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                rustix::process::setsid()?;
                rustix::process::ioctl_tiocsctty(stdin)?;
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        // The parent's other copies of the terminal's slave side close with `command`.
        drop(command);
        let master = std::fs::File::from(pty.master);
        let input = master.try_clone().unwrap();
        let (tx, lines) = mpsc::channel();
        read_lines(Box::new(master), tx);
        Interactive {
            child,
            input: Some(Box::new(input)),
            terminal: Some(terminal),
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads the piped stdout and stderr of `child` as lines.
    fn reading(mut child: Child, input: Option<Box<dyn Write + Send>>) -> Interactive {
        let (tx, lines) = mpsc::channel();
        read_lines(Box::new(child.stdout.take().unwrap()), tx.clone());
        read_lines(Box::new(child.stderr.take().unwrap()), tx);
        Interactive {
            child,
            input,
            terminal: None,
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

    /// Everything printed so far, as lines (what `expect` and `wait_for` have read).
    pub fn seen(&self) -> &[String] {
        &self.seen
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the command to exit, however long that takes.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }

    /// Types `line` and Enter.
    pub fn type_line(&mut self, line: &str) {
        self.type_keys(&format!("{line}\n"));
    }

    /// Types `keys` as they are, without Enter (on a terminal each is a key press).
    pub fn type_keys(&mut self, keys: &str) {
        let input = self
            .input
            .as_mut()
            .expect("the command has no stdin to type into");
        input.write_all(keys.as_bytes()).unwrap();
        input.flush().unwrap();
    }

    /// Closes the command's stdin (a pipe): it reads end-of-file.
    pub fn close_stdin(&mut self) {
        assert!(
            self.terminal.is_none(),
            "a terminal's master side stays open"
        );
        self.input = None;
    }

    /// The local modes of the command's terminal now (echo, canonical input, signals…).
    pub fn terminal_modes(&self) -> nix::sys::termios::LocalFlags {
        let terminal = self
            .terminal
            .as_ref()
            .expect("the command runs in no terminal");
        nix::sys::termios::tcgetattr(terminal).unwrap().local_flags
    }

    /// Presses Ctrl-C: the byte a terminal sends for it, which the terminal turns into SIGINT
    /// for the command (when it runs in one, see [`Interactive::start_in_terminal`]).
    pub fn ctrl_c(&mut self) {
        self.type_keys("\x03");
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

    /// Waits for the command to exit and for the rest of what it printed (stdout and stderr, in
    /// no particular order between them), within [`WAIT`]; returns its exit code (`None`: still
    /// running, or killed by a signal). What it printed is then in [`Interactive::seen`]. A
    /// terminal's mode can no longer be read after this (its slave side is let go, so that its
    /// output ends).
    pub fn finish(&mut self) -> Option<i32> {
        let code = self.exit_code();
        self.terminal = None;
        let deadline = Instant::now() + WAIT;
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.push(line);
        }
        code
    }

    /// Whether a line printed so far contains `needle`.
    pub fn printed(&self, needle: &str) -> bool {
        self.seen.iter().any(|l| l.contains(needle))
    }
}

/// Sends each line `stream` brings to `tx` (a terminal's `\r\n` as a line's end), until it
/// ends (a terminal's master side fails once the command and its children have closed it).
fn read_lines(stream: Box<dyn std::io::Read + Send>, tx: mpsc::Sender<String>) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if tx.send(line.trim_end_matches('\r').to_owned()).is_err() {
                break;
            }
        }
    });
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
