//! The connection's transaction over the PostgreSQL wire: `BEGIN`,
//! `COMMIT`, `ROLLBACK`, and the session resets pooled clients send
//! (`DEALLOCATE`, `DISCARD ALL`, `RESET`).
//!
//! Why here and not in datafusion-postgres's transaction hook: that hook
//! answers `BEGIN`/`ROLLBACK` without a transaction, so rolled-back INSERTs
//! stayed in the table. This hook runs first: `BEGIN` opens a
//! [`Transaction`] kept in the connection's session extensions, the
//! statements of the transaction stage their writes there (the engine's
//! INSERT sink and COPY check the rows, then stage them), `COMMIT` writes
//! them as one atomic write and `ROLLBACK` drops them. After an error the
//! transaction is aborted: every statement but `COMMIT`/`ROLLBACK` gets
//! 25P02 until it ends, and ending it writes nothing, as in PostgreSQL.
//! Savepoints mark what was staged: `ROLLBACK TO` drops what came after
//! (and, after an error, resumes the transaction, see [`resumes`]).
//! `AND CHAIN` is refused (0A000) rather than pretended.

use datafusion::common::ScalarValue;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::DFSchema;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::{DiscardObject, Reset, ResetStatement, Set, Statement};
use datafusion_postgres::hooks::HookClient;
use datafusion_postgres::pgwire::api::ClientInfo;
use datafusion_postgres::pgwire::api::results::{Response, Tag};
use datafusion_postgres::pgwire::api::store::PortalStore;
use datafusion_postgres::pgwire::error::PgWireResult;
use datafusion_postgres::pgwire::messages::response::TransactionStatus;
use kiln_query::{Engine, Transaction};
use parking_lot::Mutex;

use super::hook::Answer;
use crate::error::ApiError;

mod modes;

/// The connection's open transaction, in its session extensions.
#[derive(Default)]
struct Open(Mutex<Option<Arc<Transaction>>>);

/// The transaction `client`'s statements run in: `Some` between `BEGIN`
/// and its end, while no error has aborted it.
pub(crate) fn current<C: ClientInfo + ?Sized>(client: &C) -> Option<Arc<Transaction>> {
    if client.transaction_status() != TransactionStatus::Transaction {
        return None;
    }
    client.session_extensions().get::<Open>()?.0.lock().clone()
}

/// Ends `client`'s transaction, returning it (its staged writes); the
/// session's characteristics apply again.
fn close(client: &mut dyn HookClient) -> Option<Arc<Transaction>> {
    client.set_transaction_status(TransactionStatus::Idle);
    let metadata = client.metadata_mut();
    for (key, default) in [
        (modes::ISOLATION, modes::DEFAULT_ISOLATION),
        (modes::READ_ONLY, modes::DEFAULT_READ_ONLY),
    ] {
        match metadata.get(default).cloned() {
            Some(v) => metadata.insert(key.to_string(), v),
            None => metadata.remove(key),
        };
    }
    client.session_extensions().get::<Open>()?.0.lock().take()
}

/// Client metadata keys of the settings `SET` keeps per session (written
/// by datafusion-postgres's SET hook), which `RESET ALL` clears.
const SESSION_SETTINGS: &[(&str, &str)] = &[
    ("statement_timeout", super::STATEMENT_TIMEOUT_MS),
    ("timezone", "timezone"),
    (modes::DEFAULT_ISOLATION, modes::DEFAULT_ISOLATION),
    (modes::DEFAULT_ISOLATION, modes::ISOLATION),
    (modes::DEFAULT_READ_ONLY, modes::DEFAULT_READ_ONLY),
    (modes::DEFAULT_READ_ONLY, modes::READ_ONLY),
];

/// Whether `client`'s statements may not write: its transaction is read
/// only, or (outside one) its session's default is.
pub(crate) fn read_only<C: ClientInfo + ?Sized>(client: &C) -> bool {
    let key = match client.transaction_status() {
        TransactionStatus::Idle => modes::DEFAULT_READ_ONLY,
        _ => modes::READ_ONLY,
    };
    client.metadata().get(key).is_some_and(|v| v == "on")
}

/// The error of a write in a read-only transaction or session.
pub(crate) fn refused(what: &str) -> ApiError {
    ApiError::read_only_transaction(format!("cannot execute {what} in a read-only transaction"))
}

/// Records `modes` under the session's keys (`SET SESSION
/// CHARACTERISTICS`, which also sets the current values outside a
/// transaction) or the transaction's.
fn apply(client: &mut dyn HookClient, modes: &modes::Modes, session: bool) {
    let idle = client.transaction_status() == TransactionStatus::Idle;
    let metadata = client.metadata_mut();
    let mut set = |key: &str, default: &str, value: String| {
        if session {
            metadata.insert(default.to_string(), value.clone());
        }
        if !session || idle {
            metadata.insert(key.to_string(), value);
        }
    };
    if let Some(level) = modes.isolation {
        set(
            modes::ISOLATION,
            modes::DEFAULT_ISOLATION,
            level.to_string(),
        );
    }
    if let Some(read_only) = modes.read_only {
        let value = if read_only { "on" } else { "off" };
        set(
            modes::READ_ONLY,
            modes::DEFAULT_READ_ONLY,
            value.to_string(),
        );
    }
}

/// Answers transaction control and session resets.
pub(crate) struct TransactionHook {
    pub(crate) engine: Arc<Engine>,
    /// Most bytes of rows one transaction may stage (`--max-body-bytes`).
    pub(crate) limit: usize,
}

impl TransactionHook {
    async fn answer(
        &self,
        stmt: &Statement,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        let status = client.transaction_status();
        let aborted = status == TransactionStatus::Error;
        let ok = |tag: &str| Some(Ok(Response::Execution(Tag::new(tag))));
        // The session's flag first: naming the command renders it.
        if !aborted
            && read_only(client)
            && let Some(what) = modes::writes(stmt)
        {
            return Some(Err(refused(&what).to_pg()));
        }
        match stmt {
            Statement::StartTransaction { modes, .. } => match status {
                TransactionStatus::Idle => {
                    let modes = match modes::parse(modes) {
                        Ok(m) => m,
                        Err(e) => return Some(Err(e.to_pg())),
                    };
                    let open = client
                        .session_extensions()
                        .get_or_insert_with(Open::default);
                    *open.0.lock() = Some(Arc::new(Transaction::new(self.limit)));
                    // Seen at once by the next statements of the same
                    // simple query (pgwire applies the response's own
                    // transition only after them).
                    client.set_transaction_status(TransactionStatus::Transaction);
                    apply(client, &modes, false);
                    Some(Ok(Response::TransactionStart(Tag::new("BEGIN"))))
                }
                // PostgreSQL warns and stays in the transaction.
                TransactionStatus::Transaction => ok("BEGIN"),
                TransactionStatus::Error => Some(Err(ApiError::in_failed_transaction().to_pg())),
            },
            Statement::Commit { chain: false, .. } => {
                let txn = close(client);
                if aborted {
                    return Some(Ok(Response::TransactionEnd(Tag::new("ROLLBACK"))));
                }
                if let Some(txn) = txn
                    && let Err(e) = self.engine.commit(&txn).await
                {
                    // The transaction is over either way; nothing was written.
                    return Some(Err(ApiError::from(e).to_pg()));
                }
                Some(Ok(Response::TransactionEnd(Tag::new("COMMIT"))))
            }
            Statement::Rollback {
                chain: false,
                savepoint: None,
            } => {
                close(client);
                Some(Ok(Response::TransactionEnd(Tag::new("ROLLBACK"))))
            }
            Statement::Commit { chain: true, .. } | Statement::Rollback { chain: true, .. } => {
                Some(Err(
                    ApiError::unsupported("AND CHAIN is not supported").to_pg()
                ))
            }
            Statement::Rollback {
                savepoint: Some(name),
                ..
            } => Some(self.savepoint(client, "ROLLBACK", |t| t.rollback_to(&name.value))),
            _ if aborted => Some(Err(ApiError::in_failed_transaction().to_pg())),
            Statement::Savepoint { name } => Some(self.savepoint(client, "SAVEPOINT", |t| {
                t.savepoint(&name.value);
                Ok(())
            })),
            Statement::ReleaseSavepoint { name } => {
                Some(self.savepoint(client, "RELEASE", |t| t.release(&name.value)))
            }
            Statement::Set(Set::SetTransaction {
                modes,
                snapshot,
                session,
            }) => {
                if snapshot.is_some() {
                    let msg = "SET TRANSACTION SNAPSHOT is not supported";
                    return Some(Err(ApiError::unsupported(msg).to_pg()));
                }
                let modes = match modes::parse(modes) {
                    Ok(m) => m,
                    Err(e) => return Some(Err(e.to_pg())),
                };
                // Outside a transaction, PostgreSQL's `SET TRANSACTION`
                // warns and changes nothing.
                if *session || status == TransactionStatus::Transaction {
                    apply(client, &modes, *session);
                }
                ok("SET")
            }
            Statement::Deallocate { name, .. } => {
                if !name.value.eq_ignore_ascii_case("all") || name.quote_style.is_some() {
                    client.portal_store().rm_statement(&name.value);
                }
                ok("DEALLOCATE")
            }
            Statement::Discard {
                object_type: DiscardObject::ALL,
            } => {
                if status != TransactionStatus::Idle {
                    let msg = "DISCARD ALL cannot run inside a transaction block";
                    return Some(Err(ApiError::in_transaction(msg).to_pg()));
                }
                client.portal_store().clear_portals();
                reset(client, None);
                ok("DISCARD ALL")
            }
            Statement::Reset(ResetStatement { reset: which }) => {
                match which {
                    Reset::ALL => reset(client, None),
                    Reset::ConfigurationParameter(name) => {
                        reset(client, Some(&name.to_string().to_ascii_lowercase()))
                    }
                }
                ok("RESET")
            }
            _ => None,
        }
    }
}

impl TransactionHook {
    /// Applies a savepoint statement to the open transaction.
    fn savepoint(
        &self,
        client: &mut dyn HookClient,
        tag: &str,
        apply: impl FnOnce(&Transaction) -> kiln_query::Result<()>,
    ) -> PgWireResult<Response> {
        let open = client
            .session_extensions()
            .get::<Open>()
            .and_then(|o| o.0.lock().clone());
        let Some(txn) = open else {
            let msg = format!("{tag} can only be used in transaction blocks");
            return Err(ApiError::no_transaction(msg).to_pg());
        };
        apply(&txn).map_err(|e| ApiError::from(e).to_pg())?;
        Ok(Response::Execution(Tag::new(tag)))
    }
}

/// Whether `stmt`, sent while `client`'s transaction is aborted, may
/// resume it: `ROLLBACK TO` a savepoint of the open transaction. The
/// connection's status is set back to in-transaction before it runs (the
/// protocol reports the status it started with plus the transitions of
/// its responses, and none leads from aborted back to in-transaction); if
/// the savepoint does not exist the error aborts it again.
pub(crate) fn resumes(stmt: &Statement, client: &mut (dyn ClientInfo + Send + Sync)) -> bool {
    let rollback_to = matches!(
        stmt,
        Statement::Rollback {
            savepoint: Some(_),
            chain: false
        }
    );
    let open = client
        .session_extensions()
        .get::<Open>()
        .is_some_and(|o| o.0.lock().is_some());
    if rollback_to && open && client.transaction_status() == TransactionStatus::Error {
        client.set_transaction_status(TransactionStatus::Transaction);
        return true;
    }
    false
}

/// Clears the session's `name` setting (None: every one) back to the
/// server's default.
fn reset(client: &mut dyn HookClient, name: Option<&str>) {
    let metadata = client.metadata_mut();
    for (setting, key) in SESSION_SETTINGS {
        if name.is_none_or(|n| n == *setting) {
            metadata.remove(*key);
        }
    }
    // The session's DataFusion options (`SET datafusion.*`).
    match name {
        None => metadata.retain(|k, _| !k.starts_with("datafusion.")),
        Some(n) if n.starts_with("datafusion.") => {
            metadata.remove(n);
        }
        Some(_) => {}
    }
}

#[async_trait]
impl Answer for TransactionHook {
    async fn respond(
        &self,
        stmt: &Statement,
        _params: &[ScalarValue],
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        self.answer(stmt, client).await
    }

    fn plan(
        &self,
        stmt: &Statement,
        _client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        // No parameters, no columns: answered at Execute.
        modes::is_control(stmt).then(|| Ok(super::no_rows(DFSchema::empty())))
    }
}
