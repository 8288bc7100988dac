//! The query layer's one error type and its [`ErrorKind`]. Storage errors
//! raised inside DataFusion execution (an INSERT's sink) and Kiln's own
//! errors carried through a row stream are unwrapped back into [`Error`],
//! so a caller maps every kind in one place (the server's status codes and
//! SQLSTATEs) by matching kinds, never messages.

use arrow::error::ArrowError;
use datafusion::common::SchemaError;
use datafusion::error::DataFusionError;

/// Errors raised while planning or running SQL, or importing files.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Rejected by the storage engine (unknown table, bad rows, I/O...).
    #[error(transparent)]
    Storage(#[from] kiln_storage::Error),
    /// SQL that does not parse or plan (a syntax error, an unknown column,
    /// a parameter without a value).
    #[error("{0}")]
    Sql(String),
    /// SQL that does not parse, and where: `position` counts characters
    /// from 1, as PostgreSQL's error position does.
    #[error("syntax error: {message}")]
    Syntax {
        message: String,
        position: Option<usize>,
    },
    /// SQL Kiln understands but does not support.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// Planning or execution failure inside DataFusion; shown by its
    /// innermost cause ([`user_message`]), without the planner's internals.
    #[error("{}", user_message(.0))]
    DataFusion(Box<DataFusionError>),
    /// A function no registry knows (found by name when planning fails).
    #[error("function {0} does not exist")]
    UndefinedFunction(String),
    /// A file that cannot be imported; names file, line and column where known.
    #[error("{file}: {msg}")]
    Import { file: String, msg: String },
    /// Refused at admission: too many queries running and waiting.
    #[error("{0}")]
    Overloaded(String),
    /// A statement whose expressions nest deeper than the limit
    /// ([`crate::shape`]).
    #[error("{0}")]
    TooComplex(String),
    /// A select list, GROUP BY, ORDER BY or row of VALUES with more
    /// entries than the limit ([`crate::shape::width`]).
    #[error("{0}")]
    TooManyColumns(String),
    /// A regular expression literal that does not compile
    /// ([`crate::shape::patterns`]): names the pattern, where and why.
    #[error("{0}")]
    InvalidRegex(String),
    /// A function's argument outside the values it is defined for
    /// (`sqrt(-1)`, `ln(0)`, `nth_value(x, 0)`), with the kind of refusal
    /// PostgreSQL reports for it ([`crate::functions`]' domain guards).
    #[error("{1}")]
    Argument(ErrorKind, String),
    /// A date or time value no door can print ([`crate::displayable`]).
    #[error("{0}")]
    DatetimeOutOfRange(String),
    /// A limit that is not a resource shortage: retrying the same will
    /// fail again (a transaction staging more than it may).
    #[error("{0}")]
    LimitExceeded(String),
    /// `RELEASE` or `ROLLBACK TO` a savepoint the transaction does not have.
    #[error("savepoint \"{0}\" does not exist")]
    NoSavepoint(String),
    /// Something SQL may not do on this server: use the server's files
    /// (unless `--sql-file-access` allows them), change a server-wide setting.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// A login refused: a wrong password, an unknown user, a bad,
    /// expired or revoked token. Never names the secret.
    #[error("{0}")]
    AuthFailed(String),
    /// A user or token that already exists.
    #[error("{0}")]
    DuplicateObject(String),
    /// A user or token that does not exist.
    #[error("{0}")]
    UndefinedObject(String),
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

/// What kind of failure an [`Error`] is: every error has exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Raised by the storage engine.
    Storage(kiln_storage::ErrorKind),
    /// SQL that does not parse or plan.
    Syntax,
    /// A column the statement names that its tables do not have.
    UndefinedColumn,
    /// A column name more than one of the statement's tables has.
    AmbiguousColumn,
    /// A function that does not exist.
    UndefinedFunction,
    /// SQL Kiln or DataFusion does not support.
    Unsupported,
    /// Values that do not fit: a bad cast, a bad file or body.
    InvalidData,
    DivisionByZero,
    /// A logarithm of zero or a negative number.
    InvalidLogarithmArgument,
    /// A square root of a negative number, zero to a negative power, a
    /// negative number to a fractional one.
    InvalidPowerArgument,
    /// `nth_value` of a row number below 1.
    InvalidNthValueArgument,
    /// A function's parameter outside its values (a start position of 0).
    InvalidParameterValue,
    /// A regular expression that does not compile.
    InvalidRegularExpression,
    /// A result outside its type's range (an arithmetic overflow).
    NumericOutOfRange,
    /// A date or time outside the range that can be shown.
    DatetimeOutOfRange,
    /// Values a computation refuses, its cause known only by its message
    /// (Arrow's compute errors: a timestamp moved past its years).
    DataException,
    /// A memory or other resource limit was reached.
    ResourcesExhausted,
    /// Refused at admission.
    Overloaded,
    /// A statement nested deeper than the limit.
    TooComplex,
    /// A list of a query longer than the limit.
    TooManyColumns,
    /// A size limit of the request (a transaction's staged rows).
    LimitExceeded,
    /// A savepoint that does not exist.
    NoSavepoint,
    /// Not allowed on this server (files, server-wide settings), or not
    /// to this user (a privilege it lacks).
    PermissionDenied,
    /// A login refused.
    AuthFailed,
    /// A user or token that already exists.
    DuplicateObject,
    /// A user or token that does not exist.
    UndefinedObject,
    Timeout,
    Cancelled,
    /// A failure inside Kiln or DataFusion; a bug or the environment.
    Internal,
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Storage(s) => ErrorKind::Storage(s.kind()),
            Error::Sql(_) | Error::Syntax { .. } => ErrorKind::Syntax,
            Error::Unsupported(_) => ErrorKind::Unsupported,
            Error::DataFusion(df) => datafusion_kind(df),
            Error::UndefinedFunction(_) => ErrorKind::UndefinedFunction,
            Error::Import { .. } => ErrorKind::InvalidData,
            Error::Overloaded(_) => ErrorKind::Overloaded,
            Error::TooComplex(_) => ErrorKind::TooComplex,
            Error::TooManyColumns(_) => ErrorKind::TooManyColumns,
            Error::InvalidRegex(_) => ErrorKind::InvalidRegularExpression,
            Error::Argument(kind, _) => *kind,
            Error::DatetimeOutOfRange(_) => ErrorKind::DatetimeOutOfRange,
            Error::LimitExceeded(_) => ErrorKind::LimitExceeded,
            Error::NoSavepoint(_) => ErrorKind::NoSavepoint,
            Error::PermissionDenied(_) => ErrorKind::PermissionDenied,
            Error::AuthFailed(_) => ErrorKind::AuthFailed,
            Error::DuplicateObject(_) => ErrorKind::DuplicateObject,
            Error::UndefinedObject(_) => ErrorKind::UndefinedObject,
            Error::Timeout(_) => ErrorKind::Timeout,
            Error::Cancelled => ErrorKind::Cancelled,
            Error::Io { .. } => ErrorKind::Storage(kiln_storage::ErrorKind::Io),
        }
    }
}

impl Error {
    /// Where in the statement's text the error lies (characters from 1),
    /// if known.
    pub fn position(&self) -> Option<usize> {
        match self {
            Error::Syntax { position, .. } => *position,
            _ => None,
        }
    }
}

/// The kind of a DataFusion error, from its innermost typed cause.
fn datafusion_kind(e: &DataFusionError) -> ErrorKind {
    use arrow::error::ArrowError as A;
    match e.find_root() {
        DataFusionError::ArrowError(a, _) => match a.as_ref() {
            A::DivideByZero => ErrorKind::DivisionByZero,
            A::ArithmeticOverflow(_) => ErrorKind::NumericOutOfRange,
            A::CastError(_) | A::ParseError(_) | A::InvalidArgumentError(_) => {
                ErrorKind::InvalidData
            }
            A::MemoryError(_) => ErrorKind::ResourcesExhausted,
            A::ComputeError(_) => ErrorKind::DataException,
            _ => ErrorKind::Internal,
        },
        DataFusionError::NotImplemented(_) => ErrorKind::Unsupported,
        DataFusionError::SchemaError(s, _) => match s.as_ref() {
            SchemaError::FieldNotFound { .. } => ErrorKind::UndefinedColumn,
            SchemaError::AmbiguousReference { .. } => ErrorKind::AmbiguousColumn,
            _ => ErrorKind::Syntax,
        },
        // A setting's or an option's value DataFusion does not know
        // (`EXPLAIN (FORMAT yaml)`).
        DataFusionError::Plan(_) | DataFusionError::SQL(..) | DataFusionError::Configuration(_) => {
            ErrorKind::Syntax
        }
        DataFusionError::Execution(_) => ErrorKind::InvalidData,
        DataFusionError::ResourcesExhausted(_) => ErrorKind::ResourcesExhausted,
        DataFusionError::External(inner) => match inner.downcast_ref::<Error>() {
            Some(kiln) => kiln.kind(),
            None => match inner.downcast_ref::<kiln_storage::Error>() {
                Some(s) => ErrorKind::Storage(s.kind()),
                None => ErrorKind::Internal,
            },
        },
        _ => ErrorKind::Internal,
    }
}

impl From<DataFusionError> for Error {
    fn from(e: DataFusionError) -> Self {
        match e {
            DataFusionError::External(inner) => match inner.downcast::<kiln_storage::Error>() {
                Ok(s) => Error::Storage(*s),
                Err(other) => match other.downcast::<Error>() {
                    Ok(kiln) => *kiln,
                    Err(other) => Error::DataFusion(Box::new(DataFusionError::External(other))),
                },
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

/// What a client is told of a DataFusion error: its innermost cause (the
/// optimizer rule or operator it passed through is not the client's
/// business), in PostgreSQL's words where it has them.
fn user_message(e: &DataFusionError) -> String {
    let root = e.find_root();
    match root {
        DataFusionError::SchemaError(s, _) => match s.as_ref() {
            SchemaError::FieldNotFound { field, .. } => match &field.relation {
                Some(r) => format!("column {r}.{} does not exist", field.name),
                None => format!("column \"{}\" does not exist", field.name),
            },
            SchemaError::AmbiguousReference { field } => {
                format!("column reference \"{}\" is ambiguous", field.name)
            }
            _ => root.message().into_owned(),
        },
        DataFusionError::ArrowError(a, _) if matches!(**a, ArrowError::DivideByZero) => {
            "division by zero".into()
        }
        _ => root.message().into_owned(),
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
