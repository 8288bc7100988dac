//! Connection startup: no authentication yet (as `datafusion_postgres::serve`
//! does); connections registered so cancel requests find them; settings a
//! client gives at startup applied to its session.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion_postgres::pgwire::api::auth::noop::NoopStartupHandler;
use datafusion_postgres::pgwire::api::{ClientInfo, ConnectionManager};
use datafusion_postgres::pgwire::error::{PgWireError, PgWireResult};
use datafusion_postgres::pgwire::messages::PgWireBackendMessage;

use super::STATEMENT_TIMEOUT_MS;
use crate::error::ApiError;

/// Startup without authentication (as `datafusion_postgres::serve` does);
/// registers connections so cancel requests can find them.
pub struct Startup {
    pub(super) connections: Arc<ConnectionManager>,
}

#[async_trait]
impl NoopStartupHandler for Startup {
    fn connection_manager(&self) -> Option<Arc<ConnectionManager>> {
        Some(self.connections.clone())
    }

    /// A `statement_timeout` given at startup, as a parameter of its own
    /// (node-postgres's `statement_timeout` option) or in `options` (`-c
    /// statement_timeout=5s`, libpq's `PGOPTIONS`), applies to the session
    /// as `SET statement_timeout` would.
    async fn post_startup<C>(
        &self,
        client: &mut C,
        _message: datafusion_postgres::pgwire::messages::PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + futures::Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: std::fmt::Debug,
        PgWireError: From<<C as futures::Sink<PgWireBackendMessage>>::Error>,
    {
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
