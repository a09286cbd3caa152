//! A Unix stream socket that the event loop watches for reading only.
//!
//! On a Unix stream socket the kernel signals "writable" to the sender every time the receiver
//! reads (`unix_write_space` runs as each message's buffer is freed), and tokio registers every
//! socket for both directions. So each gRPC message between two glovebox processes woke the
//! sender's parked thread a second time, for nothing: with every call crossing three such links
//! in both directions, a share of each service's CPU went to those thread switches.
//! [`QuietStream`] is registered for reading only; a write goes straight to the socket, and only
//! when the socket is full does it register for writability (on a duplicate of the descriptor,
//! dropped once the write went through).

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// A connected Unix stream socket, watched for reading only (see the module doc).
#[derive(Debug)]
pub struct QuietStream {
    socket: AsyncFd<StdUnixStream>,
    /// A duplicate of the socket registered for writability, only while a write waits for room.
    room: Option<AsyncFd<OwnedFd>>,
}

impl QuietStream {
    /// Takes over a tokio stream (which stops being registered as such).
    pub fn new(stream: tokio::net::UnixStream) -> io::Result<QuietStream> {
        let stream = stream.into_std()?;
        stream.set_nonblocking(true)?;
        Ok(QuietStream {
            socket: register(stream, Interest::READABLE)?,
            room: None,
        })
    }

    /// The socket, for checks such as its peer's credentials.
    pub fn get_ref(&self) -> &StdUnixStream {
        self.socket.get_ref()
    }

    /// Runs `write` until the socket takes some bytes, waiting for room when it is full.
    fn poll_write_with(
        &mut self,
        cx: &mut Context<'_>,
        mut write: impl FnMut(&StdUnixStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            if let Some(room) = &self.room {
                let mut ready = ready!(room.poll_write_ready(cx))?;
                let socket = self.socket.get_ref();
                let Ok(result) = ready.try_io(|_| write(socket)) else {
                    continue;
                };
                // Through: nothing waits for room any more.
                self.room = None;
                return Poll::Ready(result);
            }
            match write(self.socket.get_ref()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let copy = self.socket.get_ref().as_fd().try_clone_to_owned()?;
                    self.room = Some(register(copy, Interest::WRITABLE)?);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                result => return Poll::Ready(result),
            }
        }
    }
}

/// Registers `io` with the event loop for `interest` only. Only for types that own their
/// descriptor (a std `UnixStream`, an `OwnedFd`).
#[allow(unsafe_code)]
fn register<T: AsRawFd>(io: T, interest: Interest) -> io::Result<AsyncFd<T>> {
    // SAFETY: `io` owns its descriptor: it stays open and the same while the `AsyncFd` holds it,
    // and is closed only when it is dropped, after the registration is gone.
    unsafe { AsyncFd::register_with_interest(io, interest) }.map_err(io::Error::from)
}

impl AsyncRead for QuietStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let mut ready = ready!(this.socket.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match ready.try_io(|socket| {
                let mut socket = socket.get_ref();
                loop {
                    match socket.read(unfilled) {
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        result => return result,
                    }
                }
            }) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for QuietStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .poll_write_with(cx, |mut socket| socket.write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .poll_write_with(cx, |mut socket| socket.write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.socket.get_ref().shutdown(std::net::Shutdown::Write))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn pair() -> (QuietStream, QuietStream) {
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        (QuietStream::new(a).unwrap(), QuietStream::new(b).unwrap())
    }

    #[tokio::test]
    async fn bytes_go_both_ways_and_a_shutdown_ends_the_peers_reads() {
        let (mut a, mut b) = pair();
        a.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        b.write_all(b"pong").await.unwrap();
        a.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"pong");
        a.shutdown().await.unwrap();
        let mut rest = Vec::new();
        assert_eq!(b.read_to_end(&mut rest).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_write_larger_than_the_socket_waits_for_room_and_loses_nothing() {
        let (mut a, mut b) = pair();
        // Far more than a socket buffer holds: the writer must wait for the reader, many times.
        let sent: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
        let expected = sent.clone();
        let writer = tokio::spawn(async move {
            a.write_all(&sent).await.unwrap();
            a.shutdown().await.unwrap();
            assert!(
                a.room.is_none(),
                "room is awaited only while the socket is full"
            );
        });
        let mut got = Vec::new();
        let mut chunk = vec![0u8; 4096];
        loop {
            let n = b.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&chunk[..n]);
            // A slow reader, now and then.
            if got.len() % (1024 * 1024) < 4096 {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
        writer.await.unwrap();
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "the bytes arrived changed or out of order");
    }

    #[tokio::test]
    async fn a_write_waiting_for_room_fails_when_the_reader_is_gone_and_reads_end() {
        let (mut a, mut b) = pair();
        let big = vec![7u8; 8 * 1024 * 1024];
        let writer = tokio::spawn(async move { a.write_all(&big).await });
        // The reader takes a little, then its process dies (its socket is closed unread).
        let mut some = [0u8; 4096];
        b.read_exact(&mut some).await.unwrap();
        drop(b);
        let written = tokio::time::timeout(std::time::Duration::from_secs(10), writer)
            .await
            .expect("a writer waiting for room must not hang when its peer is gone")
            .unwrap();
        assert!(
            written.is_err(),
            "the peer is gone: the write cannot succeed"
        );
        // And a reader whose peer dies sees the end, not a hang.
        let (c, mut d) = pair();
        drop(c);
        let mut rest = Vec::new();
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), d.read_to_end(&mut rest))
            .await
            .expect("a reader must see its peer go")
            .unwrap();
        assert_eq!(n, 0);
    }

    #[tokio::test]
    async fn vectored_writes_arrive_in_order() {
        let (mut a, mut b) = pair();
        let parts = [
            IoSlice::new(b"one "),
            IoSlice::new(b"two "),
            IoSlice::new(b"three"),
        ];
        let n = a.write_vectored(&parts).await.unwrap();
        assert_eq!(n, 13);
        let mut got = [0u8; 13];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"one two three");
    }
}
