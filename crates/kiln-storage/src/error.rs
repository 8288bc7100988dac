//! The storage layer's one error type. Callers map it to HTTP statuses and
//! SQLSTATEs in one place (the server crate); here each variant only says
//! what went wrong, with the row, column, file or offset where it applies.

use std::path::PathBuf;

/// Errors raised by the storage engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The named table does not exist.
    #[error("table '{0}' does not exist")]
    TableNotFound(String),
    /// A table of that name already exists.
    #[error("table '{0}' already exists")]
    TableExists(String),
    /// The table definition is not acceptable (no time column, unknown type...).
    #[error("invalid table definition: {0}")]
    InvalidSchema(String),
    /// A row that does not fit the table. `row` is 1-based within the write.
    #[error("row {row}: {msg}")]
    InvalidRow { row: usize, msg: String },
    /// Data that does not fit the table, not tied to one row.
    #[error("{0}")]
    InvalidData(String),
    /// Another process owns the data directory.
    #[error("data directory {dir} is in use by another kiln process (lock file {lock})")]
    Locked { dir: PathBuf, lock: PathBuf },
    /// Write-ahead log failure (corruption names file and offset).
    #[error(transparent)]
    Wal(#[from] kiln_wal::Error),
    /// A persisted file (catalog, manifest) could not be parsed.
    #[error("corrupt {what} {path}: {reason}")]
    Corrupt {
        what: &'static str,
        path: String,
        reason: String,
    },
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("object store: {0}")]
    ObjectStore(#[from] object_store::Error),
    #[error("io error {context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    /// An idempotency key already used, within the window, for a write with
    /// a different request (body or content type).
    #[error(
        "idempotency key '{key}' was already used for a different request to this table \
         (a retry must resend the same body and Content-Type; use a new key for a new write)"
    )]
    IdempotencyConflict { key: String },
    /// The database is shutting down.
    #[error("kiln is shutting down")]
    ShuttingDown,
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
    pub(crate) fn data(msg: impl Into<String>) -> Self {
        Error::InvalidData(msg.into())
    }
    pub(crate) fn row(row: usize, msg: impl Into<String>) -> Self {
        Error::InvalidRow {
            row,
            msg: msg.into(),
        }
    }
}

/// Result alias for the storage crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
