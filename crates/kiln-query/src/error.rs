//! The query layer's one error type. Storage errors raised inside DataFusion
//! execution (an INSERT's sink) are unwrapped back into
//! [`Error::Storage`], so callers can map every error kind in one place.

use datafusion::error::DataFusionError;

/// Errors raised while planning or running SQL, or importing files.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Rejected by the storage engine (unknown table, bad rows, I/O...).
    #[error(transparent)]
    Storage(#[from] kiln_storage::Error),
    /// SQL that does not parse, or that Kiln does not support.
    #[error("{0}")]
    Sql(String),
    /// Planning or execution failure inside DataFusion.
    #[error("{0}")]
    DataFusion(Box<DataFusionError>),
    /// A file that cannot be imported; names file, line and column where known.
    #[error("{file}: {msg}")]
    Import { file: String, msg: String },
    /// Refused at admission: too many queries running and waiting.
    #[error("{0}")]
    Overloaded(String),
    /// The query ran past its deadline (`--query-timeout`) and was stopped.
    #[error("canceling statement due to statement timeout ({})", humantime_ms(*.0))]
    Timeout(std::time::Duration),
    /// The query was cancelled (PostgreSQL CancelRequest, or by the server).
    #[error("canceling statement due to user request")]
    Cancelled,
    #[error("io error {context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

impl From<DataFusionError> for Error {
    fn from(e: DataFusionError) -> Self {
        match e {
            DataFusionError::External(inner) => match inner.downcast::<kiln_storage::Error>() {
                Ok(s) => Error::Storage(*s),
                Err(other) => Error::DataFusion(Box::new(DataFusionError::External(other))),
            },
            DataFusionError::Context(ctx, inner) => match Error::from(*inner) {
                Error::DataFusion(inner) => {
                    Error::DataFusion(Box::new(DataFusionError::Context(ctx, inner)))
                }
                other => other,
            },
            DataFusionError::SQL(e, _) => Error::Sql(format!("SQL error: {e}")),
            DataFusionError::Plan(msg) => Error::Sql(msg),
            other => Error::DataFusion(Box::new(other)),
        }
    }
}

impl From<arrow::error::ArrowError> for Error {
    fn from(e: arrow::error::ArrowError) -> Self {
        Error::DataFusion(Box::new(e.into()))
    }
}

fn humantime_ms(d: std::time::Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// Wraps a storage error for DataFusion, to be unwrapped by `From` above.
pub(crate) fn to_df(e: kiln_storage::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
