//! A client socket held with its place in the admission pools ([`Held`]: the place is given
//! back when the socket is dropped), the mark the front door puts on connections of its Unix
//! socket ([`LocalConnection`]), and how the stdio handover takes such a socket back out of an
//! upgraded connection ([`local_stream`]).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::admission::Slot;

/// What a request on the connection knows about it: set by the front door on connections of
/// its Unix socket, the only ones that can carry descriptors.
#[derive(Debug, Clone, Copy)]
pub struct LocalConnection;

/// A client socket with its place: the place is given back when the socket is dropped.
pub(crate) struct Held<S> {
    io: S,
    _slot: Arc<Slot>,
}

impl<S> Held<S> {
    pub(crate) fn new(io: S, slot: Arc<Slot>) -> Held<S> {
        Held { io, _slot: slot }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Held<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Held<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The Unix socket under an upgraded connection, with its place, when nothing it sent after the
/// request is buffered (the stdio handover's descriptors must be read with the bytes they came
/// with).
pub fn local_stream(
    upgraded: hyper::upgrade::Upgraded,
) -> Option<(tokio::net::UnixStream, Arc<Slot>)> {
    let parts = upgraded
        .downcast::<TokioIo<Held<tokio::net::UnixStream>>>()
        .ok()?;
    if !parts.read_buf.is_empty() {
        return None;
    }
    let Held { io, _slot } = parts.io.into_inner();
    Some((io, _slot))
}
