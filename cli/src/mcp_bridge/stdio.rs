//! The bridge's stdin and stdout, read and written by the runtime's own event loop when they are
//! pipes or Unix stream sockets — what MCP clients give a stdio server (Python's SDK pipes,
//! Node's socket pairs). tokio's `stdin()`/`stdout()` hand every read and every write to a
//! blocking thread, a thread hop per message each way that cost the bridge about a third of its
//! CPU under eight calls in flight. A terminal, a file, anything else, and a stdout that is also
//! stderr keep tokio's way.
//!
//! Both descriptors are shared with whoever else holds them (the launching shell, say), so the
//! non-blocking mode they need is put back as it was when the [`ModesBack`] guard is dropped.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{FileType, OFlags, fcntl_getfl, fcntl_setfl, fstat};
use rustix::net::{AddressFamily, SocketType, getsockname, sockopt};
use tokio::io::{AsyncRead, AsyncWrite};

/// How a descriptor can be driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pipe,
    UnixStream,
    /// A terminal, a file, another kind of socket: tokio's blocking-thread way.
    Other,
}

/// What `fd` is.
pub fn kind(fd: BorrowedFd<'_>) -> Kind {
    let Ok(stat) = fstat(fd) else {
        return Kind::Other;
    };
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Fifo => Kind::Pipe,
        FileType::Socket
            if sockopt::socket_type(fd).is_ok_and(|t| t == SocketType::STREAM)
                && getsockname(fd).is_ok_and(|a| a.address_family() == AddressFamily::UNIX) =>
        {
            Kind::UnixStream
        }
        _ => Kind::Other,
    }
}

/// A reader of the bridge's stdin.
pub type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// A writer of the bridge's stdout.
pub type Writer = Box<dyn AsyncWrite + Send + Unpin>;

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
}

impl Drop for ModesBack {
    fn drop(&mut self) {
        for (which, flags) in self.0.drain(..) {
            let _ = which.with_fd(|fd| fcntl_setfl(fd, flags));
        }
    }
}

/// `which`'s own descriptor and what it is, when the event loop can drive it (its flags noted
/// to be put back).
/// Not when stderr is the same pipe or socket (`2>&1`): non-blocking is a property of what
/// the descriptors share, and a diagnostic written to a full non-blocking stderr would fail.
fn event_loop_fd(which: Standard, modes: &mut ModesBack) -> Option<(Kind, OwnedFd)> {
    let (kind, owned, shared_with_stderr) = which.with_fd(|fd| {
        let stderr = std::io::stderr();
        (
            kind(fd),
            fd.try_clone_to_owned(),
            same_file(fd, stderr.as_fd()),
        )
    });
    if kind == Kind::Other || shared_with_stderr || !modes.note(which) {
        return None;
    }
    Some((kind, owned.ok()?))
}

/// Whether `a` and `b` are the same pipe, socket or file (unknown counts as the same).
fn same_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> bool {
    match (fstat(a), fstat(b)) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => true,
    }
}

fn event_loop_reader(modes: &mut ModesBack) -> Option<Reader> {
    match event_loop_fd(Standard::In, modes)? {
        (Kind::Pipe, fd) => tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
            .ok()
            .map(|r| Box::new(r) as _),
        (_, fd) => unix_stream(fd).map(|s| Box::new(s) as _),
    }
}

fn event_loop_writer(modes: &mut ModesBack) -> Option<Writer> {
    match event_loop_fd(Standard::Out, modes)? {
        (Kind::Pipe, fd) => tokio::net::unix::pipe::Sender::from_owned_fd(fd)
            .ok()
            .map(|w| Box::new(w) as _),
        (_, fd) => unix_stream(fd).map(|s| Box::new(s) as _),
    }
}

fn unix_stream(owned: OwnedFd) -> Option<tokio::net::UnixStream> {
    let stream = std::os::unix::net::UnixStream::from(owned);
    stream.set_nonblocking(true).ok()?;
    tokio::net::UnixStream::from_std(stream).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipes_and_unix_stream_sockets_are_driven_by_the_event_loop_and_nothing_else() {
        let (r, w) = std::io::pipe().unwrap();
        assert_eq!(kind(r.as_fd()), Kind::Pipe);
        assert_eq!(kind(w.as_fd()), Kind::Pipe);
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(kind(a.as_fd()), Kind::UnixStream);
        let datagrams = std::os::unix::net::UnixDatagram::unbound().unwrap();
        assert_eq!(kind(datagrams.as_fd()), Kind::Other);
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert_eq!(kind(tcp.as_fd()), Kind::Other);
        let file = tempfile::tempfile().unwrap();
        assert_eq!(kind(file.as_fd()), Kind::Other);
    }

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
