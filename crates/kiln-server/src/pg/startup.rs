//! Connection startup: a slot of `--pg-max-connections` taken (FATAL
//! 53300 when none is free, as PostgreSQL's `max_connections`),
//! authentication (SCRAM-SHA-256 when it is on, none when it is off), the
//! connection registered so cancel requests find it and listed in
//! `pg_stat_activity`, and settings a client gives at startup applied to
//! its session.
//!
//! Why not pgwire's SASL handler: it checks a SCRAM proof against the
//! salted password, which Kiln does not keep ([`kiln_query::auth::scram`]),
//! and it keeps one exchange's state for the whole handler, which Kiln
//! shares between connections; here each connection's exchange lives in its
//! session extensions.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use datafusion_postgres::pgwire::api::auth::{
    DefaultServerParameterProvider, StartupHandler, finish_authentication, protocol_negotiation,
    save_startup_parameters_to_metadata,
};
use datafusion_postgres::pgwire::api::{
    ClientInfo, ConnectionManager, PgWireConnectionState, PidSecretKeyGenerator,
    RandomPidSecretKeyGenerator,
};
use datafusion_postgres::pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use datafusion_postgres::pgwire::messages::startup::Authentication;
use datafusion_postgres::pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use futures::{Sink, SinkExt};
use kiln_query::Engine;
use kiln_query::auth::scram::{ClientFirst, Exchange};
use std::time::SystemTime;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::STATEMENT_TIMEOUT_MS;
use crate::error::ApiError;

/// The one SASL mechanism offered.
const SCRAM_SHA_256: &str = "SCRAM-SHA-256";

/// Startup of every connection; see the module docs.
pub struct Startup {
    pub(super) connections: Arc<ConnectionManager>,
    pub(super) engine: Arc<Engine>,
    pub(super) pids: RandomPidSecretKeyGenerator,
    /// One permit per connection that may be open (`--pg-max-connections`).
    pub(super) slots: Arc<Semaphore>,
    pub(super) max_connections: usize,
    /// The open connections, for `pg_stat_activity`.
    pub(super) sessions: Arc<super::activity::Sessions>,
    pub(super) metrics: Arc<crate::metrics::Metrics>,
}

/// A connection's slot, held in its session until it closes.
struct Slot {
    _permit: OwnedSemaphorePermit,
}

/// FATAL 53300, as PostgreSQL refuses a connection past `max_connections`.
pub(super) fn too_many(max_connections: usize) -> ErrorInfo {
    ErrorInfo::new(
        "FATAL".into(),
        "53300".into(),
        format!("sorry, too many clients already (--pg-max-connections is {max_connections})"),
    )
}

/// A connection's SCRAM exchange after the server's first message.
struct Challenged(Exchange);

/// A login refused: FATAL 28P01, the user named, the reason not (a client
/// is not told whether the user exists).
fn refused(user: &str) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".into(),
        "28P01".into(),
        format!("password authentication failed for user \"{user}\""),
    )))
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let auth = self.engine.auth();
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                let slot = self.slots.clone().try_acquire_owned().map_err(|_| {
                    self.metrics.pg_refused(false);
                    PgWireError::UserError(Box::new(too_many(self.max_connections)))
                })?;
                client.session_extensions().insert(Slot { _permit: slot });
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                if !auth.enabled() {
                    return self.finish(client).await;
                }
                client.set_state(PgWireConnectionState::AuthenticationInProgress);
                client
                    .send(PgWireBackendMessage::Authentication(Authentication::SASL(
                        vec![SCRAM_SHA_256.to_string()],
                    )))
                    .await?;
            }
            PgWireFrontendMessage::PasswordMessageFamily(msg) if auth.enabled() => {
                let user = client.metadata().get("user").cloned().unwrap_or_default();
                let fail = |why: &str| {
                    auth.counters.pg_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(user, addr = %client.socket_addr(), why, "pg login refused");
                    refused(&user)
                };
                match client.session_extensions().get::<Challenged>() {
                    None => {
                        let first = msg.into_sasl_initial_response()?;
                        if first.auth_method != SCRAM_SHA_256 {
                            return Err(fail("unsupported SASL mechanism"));
                        }
                        let data = first.data.unwrap_or_default();
                        let first = ClientFirst::parse(&data).map_err(|m| fail(m.0))?;
                        let (verifier, _) = auth.scram_verifier(&user);
                        let nonce = auth.nonce().map_err(|e| ApiError::from(e).to_pg())?;
                        let (exchange, server_first) = Exchange::start(first, verifier, &nonce);
                        client.session_extensions().insert(Challenged(exchange));
                        client
                            .send(PgWireBackendMessage::Authentication(
                                Authentication::SASLContinue(server_first.into()),
                            ))
                            .await?;
                    }
                    Some(challenged) => {
                        let response = msg.into_sasl_response()?;
                        let server_final =
                            challenged.0.finish(&response.data).map_err(|m| fail(m.0))?;
                        client
                            .feed(PgWireBackendMessage::Authentication(
                                Authentication::SASLFinal(server_final.into()),
                            ))
                            .await?;
                        client
                            .session_extensions()
                            .insert(super::account::LoggedIn(user.as_str().into()));
                        self.finish(client).await?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl Startup {
    /// The end of a successful startup: pid and secret key, the
    /// connection registered for cancel requests, startup settings
    /// applied, AuthenticationOk, parameters and ReadyForQuery.
    async fn finish<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (pid, secret_key) = self.pids.generate(client);
        client.set_pid_and_secret_key(pid, secret_key.clone());
        let (handle, guard) = self.connections.register(pid, secret_key);
        client.session_extensions().insert(handle);
        client.session_extensions().insert(guard);
        let listed = self.sessions.register(pid, client, SystemTime::now());
        client.session_extensions().insert(listed);
        startup_timeout(client)?;
        finish_authentication(client, &DefaultServerParameterProvider::default()).await
    }
}

/// A `statement_timeout` given at startup, as a parameter of its own
/// (node-postgres's `statement_timeout` option) or in `options` (`-c
/// statement_timeout=5s`, libpq's `PGOPTIONS`), applies to the session as
/// `SET statement_timeout` would.
fn startup_timeout<C: ClientInfo>(client: &mut C) -> PgWireResult<()> {
    let metadata = client.metadata();
    let given = metadata.get("statement_timeout").cloned().or_else(|| {
        let options = metadata.get("options")?;
        options
            .split_whitespace()
            .filter_map(|o| {
                o.strip_prefix("statement_timeout=")
                    .or(o.strip_prefix("-cstatement_timeout="))
            })
            .next_back()
            .map(str::to_string)
    });
    if let Some(given) = given {
        let ms = pg_duration_ms(&given).ok_or_else(|| {
            ApiError::invalid_parameter(format!(
                "invalid value for parameter \"statement_timeout\": \"{given}\""
            ))
            .to_pg()
        })?;
        client
            .metadata_mut()
            .insert(STATEMENT_TIMEOUT_MS.to_string(), ms.to_string());
    }
    Ok(())
}

/// A PostgreSQL time setting (`5000`, `5s`, `250ms`, `1min`, `1h`) in
/// milliseconds; a bare number is milliseconds.
pub(super) fn pg_duration_ms(text: &str) -> Option<u64> {
    let text = text.trim().trim_matches('\'');
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale = match unit.trim() {
        "" | "ms" => 1.0,
        "s" => 1e3,
        "min" => 60e3,
        "h" => 3600e3,
        "d" => 86400e3,
        _ => return None,
    };
    Some((number * scale) as u64)
}
