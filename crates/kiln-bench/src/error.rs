//! The one error type of `kiln-bench`: generating files and driving a
//! server over HTTP or the PostgreSQL wire.

use arrow::error::ArrowError;
use parquet::errors::ParquetError;

/// Errors of the generator and the load drivers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("Arrow error: {0}")]
    Arrow(#[from] ArrowError),
    #[error("Parquet error: {0}")]
    Parquet(#[from] ParquetError),
    /// The server could not be reached or the connection broke.
    #[error("HTTP error: {0}")]
    Http(#[from] reqwest::Error),
    /// The server answered with an error status.
    #[error("{what}: HTTP {status}: {body}")]
    Status {
        what: String,
        status: u16,
        body: String,
    },
    #[error("PostgreSQL protocol error: {0}")]
    Pg(#[from] tokio_postgres::Error),
    /// Bad arguments (URL, workload, levels).
    #[error("{0}")]
    Config(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
