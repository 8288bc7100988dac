//! Counting open HTTP connections for `kiln_open_connections`: axum's
//! listener wrapped so each accepted socket carries a gauge guard that is
//! released when hyper drops the connection.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::metrics::{ConnectionGuard, HTTP, Metrics};

/// Sends each write at once (`TCP_NODELAY`): a response's last bytes (the
/// final chunk of a streamed body) are a small write of their own, which
/// Nagle's algorithm would hold until the client acknowledges the rest,
/// up to its delayed-ACK timer (40 ms on Linux).
pub fn no_delay(tcp: &mut tokio::net::TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!("TCP_NODELAY: {e}");
    }
}

/// A listener whose connections are counted while open.
pub struct Counted<L> {
    pub inner: L,
    pub metrics: Arc<Metrics>,
}

impl<L: Listener> Listener for Counted<L> {
    type Io = CountedIo<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = self.inner.accept().await;
        let guard = self.metrics.connection(HTTP);
        (CountedIo { io, _guard: guard }, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A socket that holds its connection-count guard.
pub struct CountedIo<I> {
    io: I,
    _guard: ConnectionGuard,
}

impl<I: AsyncRead + Unpin> AsyncRead for CountedIo<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for CountedIo<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
