//! The connection's user: who logged in (when authentication is on), and
//! account statements ([`kiln_query::auth`]) run as that user on either
//! protocol.

use std::sync::Arc;

use datafusion_postgres::pgwire::api::ClientInfo;
use datafusion_postgres::pgwire::api::portal::Format;
use datafusion_postgres::pgwire::api::results::Response;
use datafusion_postgres::pgwire::error::PgWireResult;
use kiln_query::{Engine, Origin};

use super::{begin, respond, to_pg};

/// The user a connection logged in as (in its session extensions, which
/// a client cannot set), when authentication is on.
pub(super) struct LoggedIn(pub Arc<str>);

/// The user whose privileges `client`'s statements need (None:
/// authentication is off).
pub(super) fn user<C: ClientInfo + ?Sized>(client: &C) -> Option<Arc<str>> {
    client
        .session_extensions()
        .get::<LoggedIn>()
        .map(|u| u.0.clone())
}

/// Who `client`'s session is (`current_user`): the logged-in user, or
/// with authentication off the name it gave at startup.
pub(super) fn session_user<C: ClientInfo + ?Sized>(client: &C) -> Option<Arc<str>> {
    user(client).or_else(|| client.metadata().get("user").map(|u| Arc::from(u.as_str())))
}

/// Runs an account statement ([`kiln_query::auth`]) of `client`: `text`
/// (recorded with its passwords hidden) parsed as `stmt`.
pub(super) async fn run_own<C: ClientInfo + Send + Sync>(
    engine: &Engine,
    text: &str,
    stmt: kiln_query::Result<kiln_query::OwnStatement>,
    client: &C,
) -> PgWireResult<Response> {
    let stmt = match stmt {
        Ok(s) => s,
        Err(e) => {
            engine.record_failed(Origin::pg(client.pid_and_secret_key().0), text, &e);
            return Err(to_pg(e));
        }
    };
    if stmt.writes() && super::transaction::read_only(client) {
        return Err(super::transaction::refused(stmt.tag()).to_pg());
    }
    let query = begin(engine, text, client, true).await?;
    let streamed = engine.run_own(&query, stmt).await.map_err(to_pg)?;
    respond(streamed, &Format::UnifiedText, None, client)
}
