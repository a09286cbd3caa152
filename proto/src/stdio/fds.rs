//! Byte streams an MCP client hands a stdio server, driven by the runtime's event loop: pipes
//! (Python's SDK) and Unix stream sockets (Node's socket pairs). tokio's `stdin()`/`stdout()`
//! hand every read and write to a blocking thread, a thread hop per message each way; these are
//! read and written where they wake. Used by `glovebox mcp` for its own stdio and by the broker
//! for the stdio a bridge hands it (`handover`). A terminal, a file or any other socket is not
//! driven this way.

use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::fs::{FileType, fstat};
use rustix::net::{AddressFamily, SocketType, getsockname, sockopt};
use tokio::io::{AsyncRead, AsyncWrite};

/// How a descriptor can be driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pipe,
    UnixStream,
    /// A terminal, a file, another kind of socket: not by the event loop.
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

/// A stdio server's input.
pub type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// A stdio server's output.
pub type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// `fd` read from the event loop (made non-blocking), if it is a pipe or a Unix stream socket.
/// Must run inside the runtime.
pub fn reader(fd: OwnedFd) -> Option<Reader> {
    match kind(std::os::fd::AsFd::as_fd(&fd)) {
        Kind::Pipe => tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
            .ok()
            .map(|r| Box::new(r) as _),
        Kind::UnixStream => unix_stream(fd).map(|s| Box::new(s) as _),
        Kind::Other => None,
    }
}

/// `fd` written from the event loop (made non-blocking), if it is a pipe or a Unix stream
/// socket. Must run inside the runtime.
pub fn writer(fd: OwnedFd) -> Option<Writer> {
    match kind(std::os::fd::AsFd::as_fd(&fd)) {
        Kind::Pipe => tokio::net::unix::pipe::Sender::from_owned_fd(fd)
            .ok()
            .map(|w| Box::new(w) as _),
        Kind::UnixStream => unix_stream(fd).map(|s| Box::new(s) as _),
        Kind::Other => None,
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
    use std::os::fd::AsFd;

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

    #[tokio::test]
    async fn only_pipes_and_unix_stream_sockets_become_readers_and_writers() {
        let (r, w) = std::io::pipe().unwrap();
        assert!(reader(r.into()).is_some());
        assert!(writer(w.into()).is_some());
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(reader(a.into()).is_some());
        assert!(writer(b.into()).is_some());
        let file = tempfile::tempfile().unwrap();
        assert!(reader(file.try_clone().unwrap().into()).is_none());
        assert!(writer(file.into()).is_none());
    }
}
