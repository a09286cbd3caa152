//! Where job shims are started and signalled from: one thread of the executor that was started
//! before the executor confined itself, and so stands outside its Landlock domain.
//!
//! Why: a shim makes a job's namespaces and mounts (its private `/tmp`, the user's sockets
//! hidden), which Landlock forbids to any process inside a domain, and a forked child inherits
//! the domain of the thread that forked it. So the executor's confined threads hand the shim's
//! `Command` to this thread, which forks it. The shim then confines itself in the job's own
//! domain, which is not nested in the executor's: the executor's signal scope keeps its
//! confined threads from signalling it, so signals to jobs and the search for a job's marked
//! processes also go through this thread.
//!
//! The same goes for removing the executor's scratch directory when it stops (the directory is an
//! entry of `/tmp`, outside the domain). The thread does nothing else and takes requests only over
//! its channel, from the executor's own code. Without it ([`Launcher::inline`]: unit tests, an executor without Landlock) the
//! same requests run on the caller's thread.

use std::io;
use std::process::{Child, Command};
use std::sync::Mutex;
use std::sync::mpsc::{Sender, channel};

use rustix::process::Signal;

type Reply<T> = Sender<T>;

enum Request {
    Spawn(Box<Command>, Reply<io::Result<Child>>),
    Signal(i32, Signal),
    KillMarked(i32, String, Reply<()>),
    Output(Box<Command>, Reply<io::Result<std::process::Output>>),
    RemoveDir(std::path::PathBuf, Reply<io::Result<()>>),
}

/// Starts and signals job shims from outside the executor's domain.
pub struct Launcher {
    requests: Option<Mutex<Sender<Request>>>,
}

impl std::fmt::Debug for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launcher")
            .field("thread", &self.requests.is_some())
            .finish()
    }
}

impl Default for Launcher {
    fn default() -> Self {
        Launcher::inline()
    }
}

impl Launcher {
    /// Requests run on the caller's thread.
    pub fn inline() -> Launcher {
        Launcher { requests: None }
    }

    /// Starts the launcher's thread. Call before the executor confines itself.
    pub fn start() -> io::Result<Launcher> {
        let (tx, rx) = channel::<Request>();
        std::thread::Builder::new()
            .name("job-launcher".into())
            .spawn(move || {
                for request in rx {
                    serve(request);
                }
            })?;
        Ok(Launcher {
            requests: Some(Mutex::new(tx)),
        })
    }

    fn send<T>(&self, make: impl FnOnce(Reply<T>) -> Request) -> Option<T> {
        let (tx, rx) = channel();
        let request = make(tx);
        match &self.requests {
            None => serve(request),
            Some(requests) => {
                let sent = crate::sync::lock(requests).send(request);
                sent.ok()?;
            }
        }
        rx.recv().ok()
    }

    /// Starts `command` (a shim).
    pub fn spawn(&self, command: Command) -> io::Result<Child> {
        self.send(|reply| Request::Spawn(Box::new(command), reply))
            .unwrap_or_else(|| Err(io::Error::other("the job launcher is gone")))
    }

    /// Runs `command` to its end (the walls probe) from outside the executor's domain.
    pub fn output(&self, command: Command) -> io::Result<std::process::Output> {
        self.send(|reply| Request::Output(Box::new(command), reply))
            .unwrap_or_else(|| Err(io::Error::other("the job launcher is gone")))
    }

    /// Removes the executor's scratch directory and what is in it, links not followed: the
    /// directory itself lies in `/tmp`, where the executor's domain may not remove entries.
    pub fn remove_scratch(&self, dir: std::path::PathBuf) -> io::Result<()> {
        self.send(|reply| Request::RemoveDir(dir, reply))
            .unwrap_or_else(|| Err(io::Error::other("the job launcher is gone")))
    }

    /// Sends `signal` to process `pid` (a shim).
    pub fn signal(&self, pid: i32, signal: Signal) {
        match &self.requests {
            None => serve(Request::Signal(pid, signal)),
            Some(requests) => {
                let _ = crate::sync::lock(requests).send(Request::Signal(pid, signal));
            }
        }
    }

    /// Kills job `pid`'s process group and every descendant of the executor carrying `marker`;
    /// returns when that is done.
    pub fn kill_marked(&self, pid: i32, marker: String) {
        let _ = self.send(|reply| Request::KillMarked(pid, marker, reply));
    }
}

fn serve(request: Request) {
    match request {
        Request::Spawn(mut command, reply) => {
            let _ = reply.send(command.spawn());
        }
        Request::Output(mut command, reply) => {
            let _ = reply.send(command.output());
        }
        Request::RemoveDir(dir, reply) => {
            let _ = reply.send(std::fs::remove_dir_all(dir));
        }
        Request::Signal(pid, signal) => {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, signal);
            }
        }
        Request::KillMarked(pid, marker, reply) => {
            super::tree::kill_all(pid, &marker);
            let _ = reply.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn what_the_launcher_starts_is_outside_the_domain_its_caller_confined_itself_in() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let file = dir.path().join("outside");
        std::fs::write(&file, "reachable").unwrap();
        let launcher = Launcher::start().unwrap();
        let (confined, launched, signalled) = std::thread::spawn(move || {
            let plan = glovebox_sandbox::SandboxPlan::for_job(&[], std::path::Path::new("/nx"));
            let applied = glovebox_sandbox::apply(&plan).unwrap();
            let confined = std::fs::read_to_string(&file).map_err(|e| e.kind());
            let mut cat = Command::new("/bin/cat");
            cat.arg(&file);
            let launched = launcher.output(cat).unwrap();
            let mut sleep = Command::new("/bin/sleep");
            sleep.arg("30");
            let mut child = launcher.spawn(sleep).unwrap();
            launcher.signal(child.id() as i32, Signal::KILL);
            let signalled = child.wait().unwrap().signal();
            (
                (applied.enforcement, confined),
                String::from_utf8(launched.stdout).unwrap(),
                signalled,
            )
        })
        .join()
        .unwrap();
        if confined.0 != glovebox_sandbox::Enforcement::None {
            assert_eq!(confined.1, Err(std::io::ErrorKind::PermissionDenied));
        }
        assert_eq!(launched, "reachable");
        assert_eq!(signalled, Some(9));
    }
}
