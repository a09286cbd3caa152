//! The bridge's stdin and stdout, read and written by the runtime's own event loop when they are
//! pipes or Unix stream sockets — what MCP clients give a stdio server (Python's SDK pipes,
//! Node's socket pairs). tokio's `stdin()`/`stdout()` hand every read and every write to a
//! blocking thread, a thread hop per message each way that cost the bridge about a third of its
//! CPU under eight calls in flight. A terminal, a file, anything else, and a stdout that is also
//! stderr keep tokio's way.
//!
//! Both descriptors are shared with whoever else holds them (the launching shell, say), so the
//! non-blocking mode they need is put back as it was when the [`ModesBack`] guard is dropped.
//! [`write_blocking`] is the bridge's own write to stdout outside the runtime (answers it gives
//! while no broker holds the session), which waits for room in a non-blocking stdout.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use glovebox_proto::stdio::fds::{self, Kind, Reader, Writer, kind};
use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl, fstat};

/// stdin and stdout, each driven the fastest way it allows, and a guard that puts their modes
/// back when dropped (drop it after the transport is done with them). Must run inside the
/// runtime.
pub fn take() -> (ModesBack, Reader, Writer) {
    let mut modes = ModesBack(Vec::new());
    let reader = event_loop_reader(&mut modes).unwrap_or_else(|| Box::new(tokio::io::stdin()));
    let writer = event_loop_writer(&mut modes).unwrap_or_else(|| Box::new(tokio::io::stdout()));
    (modes, reader, writer)
}

/// File status flags to put back, by standard stream.
pub struct ModesBack(Vec<(Standard, OFlags)>);

#[derive(Clone, Copy)]
enum Standard {
    In,
    Out,
}

impl Standard {
    fn with_fd<T>(self, f: impl FnOnce(BorrowedFd<'_>) -> T) -> T {
        match self {
            Standard::In => f(std::io::stdin().as_fd()),
            Standard::Out => f(std::io::stdout().as_fd()),
        }
    }
}

impl ModesBack {
    /// Notes `which`'s flags before the runtime makes it non-blocking.
    fn note(&mut self, which: Standard) -> bool {
        match which.with_fd(|fd| fcntl_getfl(fd)) {
            Ok(flags) => {
                self.0.push((which, flags));
                true
            }
            Err(_) => false,
        }
    }

    /// The flags of stdin and stdout as they are now, before they are handed over.
    pub fn of_both() -> ModesBack {
        let mut modes = ModesBack(Vec::new());
        modes.note(Standard::In);
        modes.note(Standard::Out);
        modes
    }

    /// Puts the noted flags back now (the guard puts them back again when dropped).
    pub fn put_back(&self) {
        for (which, flags) in &self.0 {
            let _ = which.with_fd(|fd| fcntl_setfl(fd, *flags));
        }
    }
}

impl Drop for ModesBack {
    fn drop(&mut self) {
        self.put_back();
    }
}

/// Whether stdin and stdout can be handed to the broker: each [`drivable`] (the broker drives
/// them from its event loop).
pub fn can_hand_over() -> bool {
    drivable(Standard::In) && drivable(Standard::Out)
}

/// Whether `which` can be driven from an event loop: a pipe or a Unix stream socket, and not
/// stderr's too (`2>&1`): non-blocking is a property of what the descriptors share, and a
/// diagnostic written to a full non-blocking stderr would fail.
fn drivable(which: Standard) -> bool {
    let stderr = std::io::stderr();
    which.with_fd(|fd| kind(fd) != Kind::Other && !same_file(fd, stderr.as_fd()))
}

/// `which`'s own descriptor, when the event loop can drive it (its flags noted to be put back).
fn event_loop_fd(which: Standard, modes: &mut ModesBack) -> Option<OwnedFd> {
    if !drivable(which) || !modes.note(which) {
        return None;
    }
    which.with_fd(|fd| fd.try_clone_to_owned()).ok()
}

/// Whether `a` and `b` are the same pipe, socket or file (unknown counts as the same).
fn same_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> bool {
    match (fstat(a), fstat(b)) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => true,
    }
}

fn event_loop_reader(modes: &mut ModesBack) -> Option<Reader> {
    fds::reader(event_loop_fd(Standard::In, modes)?)
}

fn event_loop_writer(modes: &mut ModesBack) -> Option<Writer> {
    fds::writer(event_loop_fd(Standard::Out, modes)?)
}

/// Writes `bytes` to stdout, waiting for room if stdout is non-blocking.
pub(super) fn write_blocking(mut bytes: &[u8]) {
    let stdout = std::io::stdout();
    while !bytes.is_empty() {
        match rustix::io::write(stdout.as_fd(), bytes) {
            Ok(0) => return,
            Ok(n) => bytes = &bytes[n..],
            Err(rustix::io::Errno::AGAIN) => wait_for(&stdout, rustix::event::PollFlags::OUT),
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
    }
}

fn wait_for(fd: &impl AsFd, flags: rustix::event::PollFlags) {
    let mut polled = [rustix::event::PollFd::new(fd, flags)];
    let _ = rustix::event::poll(&mut polled, None);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_or_socket_shared_with_another_descriptor_is_known_as_the_same() {
        let (r, w) = std::io::pipe().unwrap();
        let (_other_r, other_w) = std::io::pipe().unwrap();
        let dup = w.try_clone().unwrap();
        assert!(same_file(w.as_fd(), dup.as_fd()), "2>&1 onto the same pipe");
        assert!(same_file(r.as_fd(), w.as_fd()), "two ends of one pipe");
        assert!(!same_file(w.as_fd(), other_w.as_fd()));
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(same_file(a.as_fd(), a.try_clone().unwrap().as_fd()));
        assert!(!same_file(a.as_fd(), b.as_fd()));
    }
}
