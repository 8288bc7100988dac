//! One PostgreSQL connection: pgwire's message loop over a socket whose
//! writes are sent when the server next waits for the client.
//!
//! Why: pgwire flushes after most messages it sends, and the socket has
//! `TCP_NODELAY`, so one prepared query (BindComplete, DataRow,
//! CommandComplete, ReadyForQuery) cost four `sendto` calls, and under
//! pgbench those were a fifth of the server's CPU. PostgreSQL buffers its
//! output and flushes it before it reads: [`Coalesce`] does the same. A
//! flush only marks the bytes ready; they are written when the connection
//! next reads (a reply is never held back while the server waits for the
//! client), when more than [`HELD_BYTES`] are waiting (a long result
//! streams), or when the connection closes.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use std::sync::Arc;

use datafusion_postgres::pgwire::api::{
    ClientInfo, ErrorHandler, PgWireConnectionState, PgWireServerHandlers,
};
use datafusion_postgres::pgwire::messages::PgWireFrontendMessage;
use datafusion_postgres::pgwire::tokio::server::{
    MaybeTls, negotiate_tls, process_error, process_message,
};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Duration, sleep};
use tokio_util::codec::{Framed, FramedParts};

use super::{Handlers, PgStatement};

/// Written through once this many bytes wait.
pub const HELD_BYTES: usize = 64 * 1024;

/// A client has this long to finish startup and authentication.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Serves one client until it disconnects (pgwire's `process_socket`,
/// without TLS, over [`Coalesce`]).
pub async fn serve(tcp: TcpStream, handlers: Arc<Handlers>) -> io::Result<()> {
    // A second handle on the socket, to notice the client leave while a
    // statement runs (the message loop reads only between statements).
    let watch = TcpStream::from_std(std::net::TcpStream::from(
        std::os::fd::AsFd::as_fd(&tcp).try_clone_to_owned()?,
    ))?;
    let startup_timeout = sleep(STARTUP_TIMEOUT);
    tokio::pin!(startup_timeout);
    let negotiated = tokio::select! {
        _ = &mut startup_timeout => return Ok(()),
        s = negotiate_tls::<PgStatement>(tcp, None) => s?,
    };
    // None: a direct TLS handshake, which Kiln does not offer.
    let Some(framed) = negotiated else {
        return Ok(());
    };
    let old = framed.into_parts();
    let mut parts = FramedParts::new(Coalesce::new(old.io), old.codec);
    parts.read_buf = old.read_buf;
    parts.write_buf = old.write_buf;
    let mut socket = Framed::from_parts(parts);

    let startup = handlers.startup.clone();
    let simple = handlers.simple.clone();
    let extended = handlers.extended.clone();
    let copy = handlers.copy.clone();
    let cancel = handlers.cancel.clone();
    let errors = handlers.error_handler();
    loop {
        let starting = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        let msg = if starting {
            tokio::select! {
                _ = &mut startup_timeout => None,
                msg = socket.next() => msg,
            }
        } else {
            socket.next().await
        };
        let Some(Ok(msg)) = msg else { break };
        // Terminate: the client is gone; some (asyncpg) wait for the close.
        if matches!(msg, PgWireFrontendMessage::Terminate(_)) {
            break;
        }
        let extended_query = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => msg.is_extended_query(),
        };
        let pid = socket.pid_and_secret_key().0;
        let outcome = {
            let work = process_message(
                msg,
                &mut socket,
                startup.clone(),
                simple.clone(),
                extended.clone(),
                copy.clone(),
                cancel.clone(),
            );
            tokio::pin!(work);
            tokio::select! {
                biased;
                r = &mut work => Some(r),
                () = closed(&watch), if !starting => {
                    // The client is gone: stop its statement (recorded as
                    // cancelled, its memory and slot freed), then let the
                    // handler unwind.
                    let n = handlers.cancel.queries.cancel_session(pid);
                    tracing::debug!(pid, cancelled = n, "pg client left during a statement");
                    let _ = work.await;
                    None
                }
            }
        };
        let Some(result) = outcome else { break };
        if let Err(mut e) = result {
            errors.on_error(&socket, &mut e);
            process_error(&mut socket, e, extended_query).await?;
        }
    }
    socket.close().await
}

/// Resolves when the peer has closed `watch` (end of stream or reset).
/// Bytes waiting to be read mean the client is still there; they are
/// left for the message loop and looked at again shortly.
async fn closed(watch: &TcpStream) {
    let mut byte = [0u8; 1];
    loop {
        match watch.peek(&mut byte).await {
            Ok(0) => return,
            Ok(_) => sleep(Duration::from_millis(100)).await,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// A socket whose flushes wait for the next read; see the module docs.
pub struct Coalesce {
    io: MaybeTls,
    held: Vec<u8>,
}

impl Coalesce {
    fn new(io: MaybeTls) -> Self {
        Self { io, held: vec![] }
    }

    /// Writes every held byte to the socket.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.held.is_empty() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.held))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.held.drain(..n);
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }
}

impl AsyncRead for Coalesce {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Coalesce {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.held.len() >= HELD_BYTES {
            ready!(this.poll_send(cx))?;
        }
        this.held.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}
