//! Transaction characteristics: `BEGIN [ISOLATION LEVEL ...] [READ ONLY |
//! READ WRITE]`, `SET TRANSACTION ...` and `SET SESSION CHARACTERISTICS
//! AS TRANSACTION ...` (pgjdbc's `setTransactionIsolation` and
//! `setReadOnly`, connection pools resetting a connection).
//!
//! Kiln's isolation is read committed (each query reads the newest
//! committed data), which is also what PostgreSQL gives for read
//! uncommitted; a stronger level is refused rather than promised. A
//! read-only transaction or session refuses every statement that writes,
//! as PostgreSQL does (25006). Which statements write, and which are the
//! transaction hook's own, is decided here.

use datafusion::sql::sqlparser::ast::{
    CopySource, Set, Statement, TransactionAccessMode, TransactionIsolationLevel, TransactionMode,
};

use crate::error::ApiError;

/// Session metadata keys, named as the settings `SHOW` reads.
pub(super) const ISOLATION: &str = "transaction_isolation";
pub(super) const DEFAULT_ISOLATION: &str = "default_transaction_isolation";
pub(super) const READ_ONLY: &str = "transaction_read_only";
pub(super) const DEFAULT_READ_ONLY: &str = "default_transaction_read_only";

/// What a list of transaction modes asks for (None: not said).
#[derive(Debug, Default, PartialEq)]
pub(super) struct Modes {
    pub isolation: Option<&'static str>,
    pub read_only: Option<bool>,
}

/// The modes of `modes`; an isolation level stronger than read committed
/// is refused (0A000).
pub(super) fn parse(modes: &[TransactionMode]) -> Result<Modes, ApiError> {
    let mut out = Modes::default();
    for mode in modes {
        match mode {
            TransactionMode::IsolationLevel(level) => {
                out.isolation = Some(match level {
                    TransactionIsolationLevel::ReadCommitted => "read committed",
                    TransactionIsolationLevel::ReadUncommitted => "read uncommitted",
                    other => {
                        return Err(ApiError::unsupported(format!(
                            "transaction isolation level {other} is not supported: Kiln's \
                             isolation is read committed (each query reads the newest \
                             committed data)"
                        )));
                    }
                })
            }
            TransactionMode::AccessMode(TransactionAccessMode::ReadOnly) => {
                out.read_only = Some(true)
            }
            TransactionMode::AccessMode(TransactionAccessMode::ReadWrite) => {
                out.read_only = Some(false)
            }
        }
    }
    Ok(out)
}

/// The command `stmt` is if it may write (data, tables, cubes, users,
/// settings of the server), as PostgreSQL names it in its 25006 error;
/// None for what a read-only transaction may run.
pub(super) fn writes(stmt: &Statement) -> Option<String> {
    if is_control(stmt) {
        return None;
    }
    match stmt {
        Statement::Query(_)
        | Statement::ShowVariable { .. }
        | Statement::ShowVariables { .. }
        | Statement::ShowTables { .. }
        | Statement::ShowColumns { .. }
        | Statement::Set(_)
        | Statement::Declare { .. }
        | Statement::Fetch { .. }
        | Statement::Close { .. }
        | Statement::Prepare { .. }
        | Statement::Execute { .. }
        | Statement::Kill { .. } => None,
        Statement::Copy {
            to: true,
            source: CopySource::Query(_) | CopySource::Table { .. },
            ..
        } => None,
        Statement::Explain {
            statement, analyze, ..
        } => match analyze {
            true => writes(statement),
            false => None,
        },
        other => {
            // The statement's leading keywords: `INSERT`, `CREATE TABLE`.
            let text = other.to_string();
            let mut words = text.split_whitespace();
            let first = words.next().unwrap_or_default().to_ascii_uppercase();
            Some(match first.as_str() {
                "CREATE" | "DROP" | "ALTER" => match words.next() {
                    Some(w) => format!("{first} {}", w.to_ascii_uppercase()),
                    None => first,
                },
                _ => first,
            })
        }
    }
}

/// Whether `stmt` is answered by the transaction hook alone (transaction
/// control and session resets).
pub(super) fn is_control(stmt: &Statement) -> bool {
    matches!(
        stmt,
        Statement::StartTransaction { .. }
            | Statement::Commit { .. }
            | Statement::Rollback { .. }
            | Statement::Savepoint { .. }
            | Statement::ReleaseSavepoint { .. }
            | Statement::Deallocate { .. }
            | Statement::Discard { .. }
            | Statement::Reset(_)
            | Statement::Set(Set::SetTransaction { .. })
    )
}

#[cfg(test)]
mod tests;
