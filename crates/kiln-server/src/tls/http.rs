//! The HTTP port with TLS: an `axum::serve::Listener` that hands the
//! server connections whose handshake is already done.
//!
//! Why a task per handshake: the server calls `accept()` in a loop
//! ([`crate::conn::serve`]), so a handshake run inside it would make every
//! new client wait for the slowest (or a silent) one. Here an accept task spawns one task per TCP connection,
//! which looks at the first byte: 0x16 (a TLS ClientHello) starts a
//! handshake, anything else is plain HTTP, refused with a 400 when
//! `--tls-required`. Finished connections reach `accept()` through a bounded
//! channel; handshakes in flight, and finished ones the server has not
//! taken yet (it is at `--http-max-connections`), are bounded too, and
//! handshakes time out.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::Tls;
use crate::error::ApiError;
use crate::metrics::{HTTP, Metrics};

/// A client has this long to send its first byte and finish the handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; past it, new connections wait in the
/// kernel's accept queue.
const MAX_HANDSHAKES: usize = 1024;
/// Connections ready for axum but not yet taken.
const READY: usize = 256;
/// The first byte of a TLS record carrying a handshake (the ClientHello).
const TLS_HANDSHAKE: u8 = 0x16;

/// A connection of the HTTP port: TLS or, when allowed, plaintext.
pub enum HttpIo {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// The HTTP port's listener when TLS is configured.
pub struct TlsListener {
    ready: mpsc::Receiver<(HttpIo, SocketAddr)>,
    local: SocketAddr,
    accepting: JoinHandle<()>,
}

impl TlsListener {
    pub fn new(listener: TcpListener, tls: &Tls, metrics: Arc<Metrics>) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(READY);
        let accepting = tokio::spawn(accept_loop(
            listener,
            tls.http_acceptor(),
            tls.required,
            metrics,
            tx,
        ));
        Ok(Self {
            ready,
            local,
            accepting,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl Listener for TlsListener {
    type Io = HttpIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (HttpIo, SocketAddr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept task ends only when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    required: bool,
    metrics: Arc<Metrics>,
    ready: mpsc::Sender<(HttpIo, SocketAddr)>,
) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let Ok(permit) = handshakes.clone().acquire_owned().await else {
            return;
        };
        let (mut tcp, addr) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("http accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        crate::conn::no_delay(&mut tcp);
        let acceptor = acceptor.clone();
        let metrics = metrics.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            let opened =
                tokio::time::timeout(HANDSHAKE_TIMEOUT, open(tcp, &acceptor, required, &metrics))
                    .await;
            match opened {
                Ok(Some(io)) => {
                    // Held until the server takes the connection: while it
                    // is at `--http-max-connections`, no more are accepted.
                    let _ = ready.send((io, addr)).await;
                }
                Ok(None) => {}
                Err(_) => {
                    tracing::debug!(%addr, "http: no TLS handshake within {HANDSHAKE_TIMEOUT:?}");
                }
            }
            drop(permit);
        });
    }
}

/// Sniffs the first byte and, for TLS, runs the handshake. `None`: the
/// connection is closed (it left, failed its handshake, or was refused).
async fn open(
    tcp: TcpStream,
    acceptor: &TlsAcceptor,
    required: bool,
    metrics: &Metrics,
) -> Option<HttpIo> {
    let mut first = [0u8; 1];
    match tcp.peek(&mut first).await {
        Ok(1) => {}
        _ => return None,
    }
    if first[0] == TLS_HANDSHAKE {
        return match acceptor.accept(tcp).await {
            Ok(tls) => {
                metrics.tls_handshake(HTTP, true);
                Some(HttpIo::Tls(Box::new(tls)))
            }
            Err(e) => {
                metrics.tls_handshake(HTTP, false);
                tracing::debug!("http: TLS handshake failed: {e}");
                None
            }
        };
    }
    if !required {
        return Some(HttpIo::Plain(tcp));
    }
    metrics.tls_plaintext_refused(HTTP);
    refuse(tcp).await;
    None
}

/// Answers a plaintext request with a 400 saying https is required. The
/// request head is read first, so closing does not reset the connection
/// before the client has read the answer.
async fn refuse(mut tcp: TcpStream) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let e = ApiError::https_required();
    let body = serde_json::json!({ "error": { "code": e.code, "message": e.message } }).to_string();
    let response = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        e.status.as_u16(),
        e.status.canonical_reason().unwrap_or(""),
        body.len(),
    );
    if tcp.write_all(response.as_bytes()).await.is_ok() {
        let _ = tcp.shutdown().await;
        // Drain what the client still sends (a body) until it closes.
        while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
    }
}

macro_rules! either {
    ($self:ident, $poll:ident($($arg:expr),*)) => {
        match $self.get_mut() {
            HttpIo::Plain(io) => Pin::new(io).$poll($($arg),*),
            HttpIo::Tls(io) => Pin::new(io).$poll($($arg),*),
        }
    };
}

impl AsyncRead for HttpIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        either!(self, poll_read(cx, buf))
    }
}

impl AsyncWrite for HttpIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        either!(self, poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        either!(self, poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            HttpIo::Plain(io) => io.is_write_vectored(),
            HttpIo::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        either!(self, poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        either!(self, poll_shutdown(cx))
    }
}
