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
    /// The named cube does not exist.
    #[error("cube '{0}' does not exist")]
    CubeNotFound(String),
    /// A cube of that name already exists.
    #[error("cube '{0}' already exists")]
    CubeExists(String),
    /// A cube part could not be computed (the query layer says why).
    #[error("cube '{cube}': {reason}")]
    CubeBuild { cube: String, reason: String },
    /// The table definition is not acceptable (no time column, unknown type...).
    #[error("invalid table definition: {0}")]
    InvalidSchema(String),
    /// A row that does not fit the table. `row` is 1-based within the write.
    #[error("row {row}: {msg}")]
    InvalidRow { row: usize, msg: String },
    /// A NULL, or no value, in a NOT NULL column (`time`: the table's time
    /// column). `row` is 1-based within the write.
    #[error("row {row}: {}", not_null(column, *time))]
    NotNull {
        row: usize,
        column: String,
        time: bool,
    },
    /// Data that does not fit the table, not tied to one row.
    #[error("{0}")]
    InvalidData(String),
    /// A setting that cannot work (`--storage`, the cache); found at startup.
    #[error("{0}")]
    Config(String),
    /// Another writer committed this version of the table first: two Kiln
    /// processes are using one storage location. Nothing of this commit is
    /// visible; its rows stay in this process's WAL.
    #[error(
        "manifest version {version} of table {table_id} was committed by another writer: \
         another kiln process is writing to {location}"
    )]
    CommitConflict {
        table_id: u64,
        version: u64,
        location: String,
    },
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
    /// Rows waiting to be flushed fill `--memstore-max-bytes`; retry shortly.
    #[error(
        "{held} bytes of rows wait to be flushed, more than --memstore-max-bytes ({cap}); retry shortly"
    )]
    MemstoreFull { held: usize, cap: usize },
    /// Writes in flight held `--write-memory-limit` for as long as a write
    /// waits for it; retry shortly.
    #[error(
        "this write needs {need} bytes of --write-memory-limit ({limit}) while it is written, \
         and writes in flight held them for 30 s; retry shortly"
    )]
    WritesFull { need: u64, limit: u64 },
}

/// What kind of failure an [`Error`] is, for callers that map errors to
/// statuses: every variant has exactly one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    TableNotFound,
    TableExists,
    CubeNotFound,
    CubeExists,
    /// A table definition Kiln cannot accept.
    InvalidSchema,
    /// Rows or data that do not fit the table.
    InvalidData,
    /// A NULL where the column forbids it.
    NotNull,
    /// An idempotency key reused for a different request.
    IdempotencyConflict,
    /// Another process owns the data directory.
    Locked,
    /// A setting that cannot work.
    Config,
    /// Another writer committed first (two processes on one storage location).
    CommitConflict,
    /// Damaged data on disk.
    Corrupt,
    /// The disk or the object store failed (permissions, network, I/O).
    Io,
    /// The disk is full: nothing was written; writes resume by themselves
    /// once space is freed.
    DiskFull,
    /// The database is shutting down.
    ShuttingDown,
    /// Writes are coming faster than flushes: retry shortly.
    Backpressure,
    /// Writes in flight hold the memory writes may take: retry shortly.
    WritesFull,
    /// The WAL no longer accepts writes (closed, or poisoned by an earlier
    /// failure).
    Unavailable,
    /// A failure inside Kiln or a library it uses (Arrow, Parquet).
    Internal,
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        use kiln_wal::ErrorKind as W;
        match self {
            Error::TableNotFound(_) => ErrorKind::TableNotFound,
            Error::TableExists(_) => ErrorKind::TableExists,
            Error::CubeNotFound(_) => ErrorKind::CubeNotFound,
            Error::CubeExists(_) => ErrorKind::CubeExists,
            Error::CubeBuild { .. } => ErrorKind::Internal,
            Error::InvalidSchema(_) => ErrorKind::InvalidSchema,
            Error::InvalidRow { .. } | Error::InvalidData(_) => ErrorKind::InvalidData,
            Error::NotNull { .. } => ErrorKind::NotNull,
            Error::IdempotencyConflict { .. } => ErrorKind::IdempotencyConflict,
            Error::Locked { .. } => ErrorKind::Locked,
            Error::Config(_) => ErrorKind::Config,
            Error::CommitConflict { .. } => ErrorKind::CommitConflict,
            Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::Io { source, .. }
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
                ) =>
            {
                ErrorKind::DiskFull
            }
            Error::Io { .. } | Error::ObjectStore(_) => ErrorKind::Io,
            Error::ShuttingDown => ErrorKind::ShuttingDown,
            Error::MemstoreFull { .. } => ErrorKind::Backpressure,
            Error::WritesFull { .. } => ErrorKind::WritesFull,
            Error::Arrow(_) | Error::Parquet(_) => ErrorKind::Internal,
            Error::Wal(w) => match w.kind() {
                W::Io => ErrorKind::Io,
                W::DiskFull => ErrorKind::DiskFull,
                W::Corrupt => ErrorKind::Corrupt,
                W::Unavailable => ErrorKind::Unavailable,
                W::InvalidInput => ErrorKind::InvalidData,
            },
        }
    }

    /// The 1-based row of the write a row error names, and what is wrong
    /// with it.
    pub fn bad_row(&self) -> Option<(usize, String)> {
        match self {
            Error::InvalidRow { row, msg } => Some((*row, msg.clone())),
            Error::NotNull { row, column, time } => Some((*row, not_null(column, *time))),
            _ => None,
        }
    }

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

fn not_null(column: &str, time: bool) -> String {
    match time {
        true => format!("missing time value in column '{column}'"),
        false => format!("NULL in NOT NULL column '{column}'"),
    }
}

/// Result alias for the storage crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
