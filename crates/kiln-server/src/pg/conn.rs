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
//!
//! Over TLS, [`Coalesce`] sits above the TLS stream, so one flush seals the
//! held replies into as few records as fit and then flushes the TLS stream
//! itself (rustls keeps sealed records until they are written). With
//! `--tls-required` a plaintext client's startup message is answered with
//! FATAL 28000; a plaintext cancel request is still served (it carries only
//! the key PostgreSQL gave the session, and older libpq sends it so).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use std::sync::Arc;

use datafusion_postgres::pgwire::api::{
    ClientInfo, ErrorHandler, PgWireConnectionState, PgWireServerHandlers,
};
use datafusion_postgres::pgwire::error::{ErrorInfo, PgWireError};
use datafusion_postgres::pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use datafusion_postgres::pgwire::tokio::server::{
    MaybeTls, PgWireMessageServerCodec, negotiate_tls, process_error, process_message,
};
use futures::{FutureExt, SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Duration, sleep};
use tokio_util::codec::{Framed, FramedParts};

use super::activity::Registered;
use super::{Handlers, PgStatement};
use crate::error::ApiError;
use crate::metrics::PG;

/// Written through once this many bytes wait.
pub const HELD_BYTES: usize = 64 * 1024;

/// A client has this long to finish startup and authentication.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// The SSLRequest a client sends before its startup message to ask for TLS.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
/// The first byte of a TLS ClientHello record (direct TLS, PostgreSQL 17).
const TLS_HANDSHAKE: u8 = 0x16;

/// Serves one client until it disconnects (pgwire's `process_socket` over
/// [`Coalesce`]).
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
        s = negotiate(tcp, &handlers) => s?,
    };
    // None: a direct TLS handshake while TLS is not configured.
    let Some(framed) = negotiated else {
        return Ok(());
    };
    let refuse_plaintext = !framed.is_secure() && handlers.tls.as_ref().is_some_and(|t| t.required);
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
                msg = next_message(&mut socket) => msg,
            }
        } else {
            next_message(&mut socket).await
        };
        let msg = match msg {
            Some(Next::Message(msg)) => msg,
            Some(Next::Malformed) => {
                let info = ErrorInfo::new(
                    "FATAL".into(),
                    "08P01".into(),
                    "protocol violation: a message's declared length does not hold its fields"
                        .into(),
                );
                socket
                    .send(PgWireBackendMessage::ErrorResponse(info.into()))
                    .await?;
                break;
            }
            None => break,
        };
        // Terminate: the client is gone; some (asyncpg) wait for the close.
        if matches!(msg, PgWireFrontendMessage::Terminate(_)) {
            break;
        }
        if refuse_plaintext && !matches!(msg, PgWireFrontendMessage::CancelRequest(_)) {
            handlers.metrics.tls_plaintext_refused(PG);
            let e = ApiError::tls_required();
            let info = ErrorInfo::new("FATAL".into(), e.sqlstate.into(), e.message);
            socket
                .send(PgWireBackendMessage::ErrorResponse(info.into()))
                .await?;
            break;
        }
        let extended_query = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => msg.is_extended_query(),
        };
        let pid = socket.pid_and_secret_key().0;
        // The messages a ReadyForQuery answers: where a session's state
        // settles, and so where `pg_stat_activity` learns it.
        let settles = matches!(
            msg,
            PgWireFrontendMessage::Query(_)
                | PgWireFrontendMessage::Sync(_)
                | PgWireFrontendMessage::CopyDone(_)
                | PgWireFrontendMessage::CopyFail(_)
        );
        let outcome = {
            // A panic in a handler (an upstream function given a value it
            // does not expect) fails this message, as an error does,
            // instead of ending the connection without a word.
            let work = std::panic::AssertUnwindSafe(process_message(
                msg,
                &mut socket,
                startup.clone(),
                simple.clone(),
                extended.clone(),
                copy.clone(),
                cancel.clone(),
            ))
            .catch_unwind()
            .map(|r| r.unwrap_or_else(|panic| Err(panicked(panic))));
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
            // A failed login ends the connection: a client gets one try
            // per connection, as with PostgreSQL.
            if starting {
                break;
            }
        }
        if settles && let Some(listed) = socket.session_extensions().get::<Registered>() {
            listed.publish(&socket);
        }
    }
    socket.close().await
}

/// The error a panic while handling a message is answered with.
fn panicked(panic: Box<dyn std::any::Any + Send>) -> PgWireError {
    let why = kiln_query::executor::panic_message(panic);
    tracing::error!(panic = why, "a PostgreSQL message's handler panicked");
    let e = ApiError::internal(format!("the statement failed unexpectedly: {why}"));
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        e.sqlstate.into(),
        e.message,
    )))
}

/// What the client sent next.
enum Next {
    Message(PgWireFrontendMessage),
    /// A message pgwire's decoder could not take apart (see [`next_message`]).
    Malformed,
}

/// The client's next message; `None` when it is gone or its bytes are not
/// a message pgwire can frame.
///
/// pgwire's decoders trust a message's declared length and read its
/// fields from whatever bytes follow: an `Execute` declaring length 0
/// (found by the `pg_message` fuzz target) panicked reading past the end.
/// The panic would end this connection's task without a word to the
/// client, so it is caught here and answered with SQLSTATE 08P01.
async fn next_message(
    socket: &mut Framed<Coalesce, PgWireMessageServerCodec<PgStatement>>,
) -> Option<Next> {
    match std::panic::AssertUnwindSafe(socket.next())
        .catch_unwind()
        .await
    {
        Ok(Some(Ok(msg))) => Some(Next::Message(msg)),
        Ok(_) => None,
        Err(_) => Some(Next::Malformed),
    }
}

/// pgwire's TLS negotiation, with the acceptor when TLS is configured;
/// counts the handshakes of clients that asked for TLS.
async fn negotiate(
    tcp: TcpStream,
    handlers: &Handlers,
) -> io::Result<Option<Framed<MaybeTls, PgWireMessageServerCodec<PgStatement>>>> {
    let Some(tls) = &handlers.tls else {
        return negotiate_tls::<PgStatement>(tcp, None).await;
    };
    let mut first = [0u8; SSL_REQUEST.len()];
    let n = tcp.peek(&mut first).await?;
    let asks = (n >= 1 && first[0] == TLS_HANDSHAKE) || first[..n] == SSL_REQUEST[..];
    let addr = tcp.peer_addr().ok();
    let negotiated = negotiate_tls::<PgStatement>(tcp, Some(tls.pg_acceptor())).await;
    if asks {
        let ok = matches!(&negotiated, Ok(Some(f)) if f.is_secure());
        handlers.metrics.tls_handshake(PG, ok);
        if let Err(e) = &negotiated {
            tracing::debug!(?addr, "pg: TLS handshake failed: {e}");
        }
    }
    negotiated
}

/// Resolves when the peer has closed `watch` (end of stream or reset).
/// Bytes waiting to be read mean the client is still there; they are
/// left for the message loop and looked at again shortly. Over TLS the
/// bytes are TLS records, which is all the same: only the end of the
/// stream is looked for.
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
