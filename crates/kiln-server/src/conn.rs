//! HTTP connections: axum's router served on hyper's HTTP/1 connections,
//! at most `--http-max-connections` open at once and each closed when idle
//! for `--http-idle-timeout`; and each open one counted for
//! `kiln_open_connections`.
//!
//! Why not `axum::serve`: it gives hyper no timer, so a connection that
//! sends nothing (an idle keep-alive, or a request head sent a byte at a
//! time) stays open for ever, and it accepts without bound. Past the limit
//! Kiln stops accepting, so a new connection waits in the listen backlog
//! until one closes, as nginx does past `worker_connections`.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use std::time::Duration;

use axum::Router;
use axum::serve::Listener;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Semaphore, watch};

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

/// How many HTTP connections may be open and how long one may idle.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `--http-max-connections`.
    pub max_connections: usize,
    /// `--http-idle-timeout`: longest wait for a request's head, from the
    /// connection's start or its last answer.
    pub idle: Duration,
}

/// Serves `app` on `listener` until `stop` turns true, then accepts no
/// more and returns once every open connection has answered the requests
/// it was reading or answering (each is told to close after them).
pub async fn serve<L>(mut listener: L, app: Router, limits: Limits, mut stop: watch::Receiver<bool>)
where
    L: Listener,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.idle);
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            accepted = async {
                let slot = slots.clone().acquire_owned().await;
                (slot, listener.accept().await)
            } => accepted,
        };
        let (Ok(slot), (io, _)) = accepted else {
            break;
        };
        let service = TowerToHyperService::new(app.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(io), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("http connection: {e}");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
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
