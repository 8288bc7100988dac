//! The single error type of the WAL.
//!
//! Why one enum: the storage crate needs to tell apart "retry later / shut
//! down" (`Closed`), "this process must stop writing" (`Poisoned`), "the log
//! on disk is damaged and a human must decide" (`Corrupt`) and plain I/O
//! failures, without matching on strings.

use std::io;
use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in the WAL.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system I/O call failed; `context` says which one and on what path.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// A segment file holds a damaged record that is not a torn tail.
    #[error("corrupt WAL record in {} at byte offset {offset}: {reason}", file.display())]
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: String,
    },
    /// The WAL was closed (or its commit thread is gone); nothing was written.
    #[error("WAL is closed")]
    Closed,
    /// An earlier write, fsync or apply failed; the WAL refuses all further
    /// appends because what is on disk can no longer be vouched for.
    #[error("WAL is poisoned by an earlier failure: {0}")]
    Poisoned(String),
    /// A caller-supplied argument cannot be honoured (e.g. `next_seq` would reuse seqs).
    #[error("invalid WAL argument: {0}")]
    InvalidArgument(String),
    /// The payload is larger than a frame may carry ([`crate::MAX_RECORD_BYTES`]).
    #[error("WAL record of {len} bytes exceeds the maximum of {max} bytes")]
    RecordTooLarge { len: usize, max: usize },
}

/// What kind of failure an [`Error`] is, for callers that map errors to
/// statuses: every variant has exactly one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The disk failed or refused (permissions, I/O error): an operator's matter.
    Io,
    /// The disk (or the user's quota) is full. Nothing of the failed write
    /// is kept; writing resumes by itself once space is freed.
    DiskFull,
    /// Damaged data on disk.
    Corrupt,
    /// The WAL no longer accepts appends (closed, or poisoned by an earlier failure).
    Unavailable,
    /// The caller asked for something the WAL cannot do (a record too large).
    InvalidInput,
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { source, .. }
                if matches!(
                    source.kind(),
                    io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
                ) =>
            {
                ErrorKind::DiskFull
            }
            Error::Io { .. } => ErrorKind::Io,
            Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::Closed | Error::Poisoned(_) => ErrorKind::Unavailable,
            Error::InvalidArgument(_) | Error::RecordTooLarge { .. } => ErrorKind::InvalidInput,
        }
    }
}

/// Wraps an `io::Error` with a human-readable context.
pub(crate) fn io_err(context: impl Into<String>, source: io::Error) -> Error {
    Error::Io {
        context: context.into(),
        source,
    }
}

/// `io::Error` is not `Clone`; a failed group answers every waiter with a copy.
pub(crate) fn dup_io(e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), e.to_string())
}
