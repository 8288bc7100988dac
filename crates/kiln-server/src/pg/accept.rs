//! The PostgreSQL accept loop, and the bound on sockets that have not yet
//! finished startup.
//!
//! Why a second bound: `--pg-max-connections` is taken at the startup
//! message, so a client that opens sockets and sends nothing (or stalls
//! inside startup or authentication) held one task and its buffers each,
//! without bound, for up to the startup timeout. PostgreSQL bounds its
//! live children at twice `max_connections` and refuses any more with
//! "sorry, too many clients already"; Kiln does the same with sockets: at
//! most [`SOCKETS_PER_CONNECTION`] × `--pg-max-connections` are open at
//! once, started or starting, and one more is sent FATAL 53300 at once and
//! closed, without its startup message being read.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use datafusion_postgres::pgwire::messages::PgWireBackendMessage;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use super::{Handlers, conn, startup};
use crate::metrics::PG;

/// Sockets open at once per `--pg-max-connections`: as PostgreSQL, whose
/// postmaster keeps at most twice its backends' slots in live children.
pub const SOCKETS_PER_CONNECTION: usize = 2;

/// Refusals being written at once; past this a socket is closed unanswered
/// (a flood of connections must not become a flood of tasks).
const REFUSALS: usize = 64;

/// How long a refusal waits for the client to read it and close.
const REFUSAL_LINGER: Duration = Duration::from_secs(2);

/// Accepts connections until `shutdown` turns true; returns the connections
/// still running so the caller can give them a grace period.
pub async fn accept_loop(
    listener: TcpListener,
    handlers: Arc<Handlers>,
    mut shutdown: watch::Receiver<bool>,
) -> JoinSet<()> {
    let max_connections = handlers.startup.max_connections;
    let sockets = Arc::new(Semaphore::new(
        max_connections.saturating_mul(SOCKETS_PER_CONNECTION),
    ));
    let refusals = Arc::new(Semaphore::new(REFUSALS));
    let mut conns = JoinSet::new();
    while !*shutdown.borrow_and_update() {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, addr)) => {
                    let Ok(slot) = sockets.clone().try_acquire_owned() else {
                        handlers.metrics.pg_refused(true);
                        if let Ok(permit) = refusals.clone().try_acquire_owned() {
                            tokio::spawn(async move {
                                refuse(socket, max_connections).await;
                                drop(permit);
                            });
                        }
                        continue;
                    };
                    let handlers = handlers.clone();
                    let open = handlers.metrics.connection(PG);
                    conns.spawn(async move {
                        let _open = open;
                        if let Err(e) = conn::serve(socket, handlers).await {
                            tracing::debug!(%addr, "pg connection: {e}");
                        }
                        drop(slot);
                    });
                }
                Err(e) => {
                    tracing::warn!("pg accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    break;
                }
            }
        }
        while conns.try_join_next().is_some() {}
    }
    conns
}

/// Sends FATAL 53300 on a socket past the bound, then waits briefly for the
/// client to close, so the close does not reset the connection before the
/// client has read the error (unread bytes at close make the kernel send a
/// reset, which can discard what the client has not read yet).
async fn refuse(mut socket: TcpStream, max_connections: usize) {
    let mut reply = BytesMut::new();
    let message = PgWireBackendMessage::ErrorResponse(startup::too_many(max_connections).into());
    if message.encode(&mut reply).is_err() {
        return;
    }
    let _ = tokio::time::timeout(REFUSAL_LINGER, async {
        socket.write_all(&reply).await?;
        socket.shutdown().await?;
        let mut sink = [0u8; 1024];
        while socket.read(&mut sink).await? > 0 {}
        std::io::Result::Ok(())
    })
    .await;
}
