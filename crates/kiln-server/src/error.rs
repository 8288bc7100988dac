//! The one place where errors become HTTP statuses, JSON error codes and
//! PostgreSQL SQLSTATEs. Both protocols go through [`ApiError`], so a given
//! failure (unknown table, bad row, bad SQL) is reported the same way
//! whichever door the client came in by.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::parser::ParserError;
use datafusion_postgres::pgwire::error::{ErrorInfo, PgWireError};

/// A client-facing error: what to answer on HTTP and on the PostgreSQL wire.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    /// Stable machine-readable code for the HTTP JSON body.
    pub code: &'static str,
    /// PostgreSQL SQLSTATE.
    pub sqlstate: &'static str,
    pub message: String,
    /// Where in the statement the error lies (characters from 1).
    pub position: Option<usize>,
}

impl ApiError {
    fn new(
        status: StatusCode,
        code: &'static str,
        sqlstate: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            code,
            sqlstate,
            message: message.into(),
            position: None,
        }
    }

    /// Input that cannot be decoded; the message names line, row or column.
    pub fn bad_input(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_data", "22P02", message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", "08P01", message)
    }

    /// A setting given a value it cannot take.
    pub fn invalid_parameter(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_parameter_value",
            "22023",
            message,
        )
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            "54000",
            format!("request body is larger than --max-body-bytes ({limit} bytes)"),
        )
    }

    /// A request whose body could not reserve its `need` bytes of
    /// `--body-memory-limit` (`limit`) while other bodies held them, for
    /// as long as it waited.
    pub fn bodies_full(need: u64, limit: u64, waited: std::time::Duration) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "body_memory_full",
            "53200",
            format!(
                "this request's body needs {need} bytes of --body-memory-limit ({limit}), and the bodies being read held them for {}; retry shortly",
                humantime::format_duration(waited)
            ),
        )
    }

    /// A body that did not arrive within `--body-read-timeout`.
    pub fn body_timeout(timeout: std::time::Duration, got: usize) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            "08006",
            format!(
                "the request body did not arrive within --body-read-timeout ({}); {got} bytes came",
                humantime::format_duration(timeout)
            ),
        )
    }

    /// A body whose rows, once in the table's types, would take more than
    /// the `limit` bytes one write may hold (a dictionary's values
    /// repeated for each row).
    pub fn decoded_too_large(bytes: u64, limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            "54000",
            format!(
                "the body's rows would take at least {bytes} bytes once decoded, more than the {limit} bytes one write may hold"
            ),
        )
    }

    /// A statement in a transaction an earlier error aborted.
    pub fn in_failed_transaction() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "in_failed_transaction",
            "25P02",
            "current transaction is aborted, commands ignored until end of transaction block",
        )
    }

    /// A statement that runs only inside a transaction block.
    pub fn no_transaction(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "no_transaction", "25P01", message)
    }

    /// A statement that may not run inside a transaction block.
    pub fn in_transaction(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "in_transaction", "25001", message)
    }

    /// A write in a read-only transaction or session.
    pub fn read_only_transaction(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "read_only_transaction",
            "25006",
            message,
        )
    }

    /// A `SET` of a setting fixed when the server was built or started.
    pub fn cant_change(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "cant_change_runtime_param",
            "55P02",
            message,
        )
    }

    /// Something PostgreSQL does that Kiln does not.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "not_supported", "0A000", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "0A000",
            message,
        )
    }

    /// A request head past `--max-header-bytes`.
    pub fn header_too_large(size: usize, limit: usize) -> Self {
        Self::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            "54000",
            format!("request headers are {size} bytes, more than --max-header-bytes ({limit})"),
        )
    }

    /// A plaintext PostgreSQL connection to a server run with `--tls-required`.
    pub fn tls_required() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "tls_required",
            "28000",
            "this server requires TLS (sslmode=require)",
        )
    }

    /// A plaintext HTTP request to a server run with `--tls-required`.
    pub fn https_required() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "tls_required",
            "28000",
            "this server requires https",
        )
    }

    /// A browser page from an origin not in `--http-allowed-origins`.
    /// A request without valid credentials (401, 28P01).
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        kiln_query::Error::AuthFailed(message.into()).into()
    }

    pub fn origin_not_allowed(origin: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "origin_not_allowed",
            "42501",
            format!("origin '{origin}' is not allowed: list it in --http-allowed-origins"),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "XX000",
            message,
        )
    }

    /// Outcome label for metrics.
    pub fn outcome(&self) -> &'static str {
        if self.status.is_server_error() {
            "error"
        } else {
            "rejected"
        }
    }

    /// The error as sent on the PostgreSQL wire.
    pub fn to_pg(&self) -> PgWireError {
        let mut info = ErrorInfo::new("ERROR".into(), self.sqlstate.into(), self.message.clone());
        info.position = self.position.map(|p| p.to_string());
        PgWireError::UserError(Box::new(info))
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.sqlstate, self.message)
    }
}

impl std::error::Error for ApiError {}

impl From<kiln_storage::Error> for ApiError {
    fn from(e: kiln_storage::Error) -> Self {
        storage_error(e.kind(), e.to_string())
    }
}

/// Status, code and SQLSTATE of each storage error kind.
fn storage_error(kind: kiln_storage::ErrorKind, msg: String) -> ApiError {
    use kiln_storage::ErrorKind as K;
    let (status, code, sqlstate) = match kind {
        K::TableNotFound => (StatusCode::NOT_FOUND, "table_not_found", "42P01"),
        K::TableExists => (StatusCode::CONFLICT, "table_exists", "42P07"),
        K::CubeNotFound => (StatusCode::NOT_FOUND, "cube_not_found", "42704"),
        K::CubeExists => (StatusCode::CONFLICT, "cube_exists", "42710"),
        K::InvalidSchema => (StatusCode::BAD_REQUEST, "invalid_schema", "42P16"),
        K::InvalidData => (StatusCode::BAD_REQUEST, "invalid_data", "22P02"),
        K::NotNull => (StatusCode::BAD_REQUEST, "not_null_violation", "23502"),
        K::IdempotencyConflict => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_conflict",
            "22000",
        ),
        K::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down", "57P01"),
        K::Backpressure => (StatusCode::SERVICE_UNAVAILABLE, "memstore_full", "53000"),
        K::WritesFull => (
            StatusCode::SERVICE_UNAVAILABLE,
            "write_memory_full",
            "53200",
        ),
        K::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable", "58030"),
        K::Io => (StatusCode::INTERNAL_SERVER_ERROR, "io_error", "58030"),
        K::DiskFull => (StatusCode::INSUFFICIENT_STORAGE, "disk_full", "53100"),
        K::Corrupt => (StatusCode::INTERNAL_SERVER_ERROR, "data_corrupted", "XX001"),
        K::CommitConflict => (StatusCode::CONFLICT, "commit_conflict", "40001"),
        K::Config => (StatusCode::INTERNAL_SERVER_ERROR, "config_error", "F0000"),
        K::Locked | K::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal", "XX000"),
    };
    ApiError::new(status, code, sqlstate, msg)
}

impl ApiError {
    /// A write's error, with a bad row named where it came from
    /// (`locate(row)`: e.g. `line 7` of a body or a COPY).
    pub fn from_write(e: kiln_storage::Error, locate: impl Fn(usize) -> String) -> Self {
        let location = e.bad_row().map(|(row, msg)| (locate(row), msg));
        let mut api = Self::from(e);
        if let Some((at, msg)) = location {
            api.message = format!("{at}: {msg}");
        }
        api
    }
}

impl From<kiln_query::Error> for ApiError {
    fn from(e: kiln_query::Error) -> Self {
        use kiln_query::ErrorKind as K;
        let msg = e.to_string();
        let position = e.position();
        let (status, code, sqlstate) = match e.kind() {
            K::Storage(kind) => return storage_error(kind, msg),
            K::Syntax => (StatusCode::BAD_REQUEST, "syntax_error", "42601"),
            K::UndefinedColumn => (StatusCode::BAD_REQUEST, "undefined_column", "42703"),
            K::AmbiguousColumn => (StatusCode::BAD_REQUEST, "ambiguous_column", "42702"),
            K::UndefinedFunction => (StatusCode::BAD_REQUEST, "undefined_function", "42883"),
            K::Unsupported => (StatusCode::BAD_REQUEST, "not_supported", "0A000"),
            K::InvalidData => (StatusCode::BAD_REQUEST, "invalid_data", "22P02"),
            K::DivisionByZero => (StatusCode::BAD_REQUEST, "division_by_zero", "22012"),
            K::InvalidLogarithmArgument => (
                StatusCode::BAD_REQUEST,
                "invalid_argument_for_logarithm",
                "2201E",
            ),
            K::InvalidPowerArgument => (
                StatusCode::BAD_REQUEST,
                "invalid_argument_for_power_function",
                "2201F",
            ),
            K::InvalidParameterValue => {
                (StatusCode::BAD_REQUEST, "invalid_parameter_value", "22023")
            }
            K::InvalidNthValueArgument => (
                StatusCode::BAD_REQUEST,
                "invalid_argument_for_nth_value_function",
                "22016",
            ),
            K::InvalidRegularExpression => (
                StatusCode::BAD_REQUEST,
                "invalid_regular_expression",
                "2201B",
            ),
            K::NumericOutOfRange => (StatusCode::BAD_REQUEST, "numeric_out_of_range", "22003"),
            K::DataException => (StatusCode::BAD_REQUEST, "data_exception", "22000"),
            K::DatetimeOutOfRange => (StatusCode::BAD_REQUEST, "datetime_out_of_range", "22008"),
            K::ResourcesExhausted => (StatusCode::SERVICE_UNAVAILABLE, "out_of_memory", "53200"),
            K::Overloaded => (StatusCode::SERVICE_UNAVAILABLE, "overloaded", "53300"),
            K::TooComplex => (StatusCode::BAD_REQUEST, "statement_too_complex", "54001"),
            K::TooManyColumns => (StatusCode::BAD_REQUEST, "too_many_columns", "54011"),
            K::LimitExceeded => (StatusCode::PAYLOAD_TOO_LARGE, "too_large", "54000"),
            K::NoSavepoint => (StatusCode::BAD_REQUEST, "no_savepoint", "3B001"),
            K::PermissionDenied => (StatusCode::FORBIDDEN, "permission_denied", "42501"),
            K::AuthFailed => (StatusCode::UNAUTHORIZED, "unauthenticated", "28P01"),
            K::DuplicateObject => (StatusCode::CONFLICT, "duplicate_object", "42710"),
            K::UndefinedObject => (StatusCode::NOT_FOUND, "undefined_object", "42704"),
            K::Timeout => (StatusCode::GATEWAY_TIMEOUT, "timeout", "57014"),
            K::Cancelled => (StatusCode::SERVICE_UNAVAILABLE, "cancelled", "57014"),
            K::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal", "XX000"),
        };
        Self {
            position,
            ..Self::new(status, code, sqlstate, msg)
        }
    }
}

impl From<DataFusionError> for ApiError {
    fn from(e: DataFusionError) -> Self {
        kiln_query::Error::from(e).into()
    }
}

/// An error on its way to a PostgreSQL client, whatever raised it: Kiln's
/// own errors and DataFusion's get their SQLSTATEs here.
pub fn pg_error(e: PgWireError) -> PgWireError {
    match e {
        PgWireError::ApiError(inner) => match inner.downcast::<kiln_query::Error>() {
            Ok(kiln) => ApiError::from(*kiln).to_pg(),
            Err(inner) => match inner.downcast::<DataFusionError>() {
                Ok(df) => ApiError::from(*df).to_pg(),
                Err(inner) => match inner.downcast::<ParserError>() {
                    Ok(parse) => ApiError::from(kiln_query::shape::parse_error(*parse, "")).to_pg(),
                    Err(other) => PgWireError::ApiError(other),
                },
            },
        },
        other => other,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code, "{}", self.message);
        }
        let mut error = serde_json::json!({ "code": self.code, "message": self.message });
        if let Some(position) = self.position {
            error["position"] = position.into();
        }
        let body = serde_json::json!({ "error": error });
        let mut resp = (self.status, Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Basic realm=\"kiln\", Bearer realm=\"kiln\""),
            );
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_errors_map_to_status_and_sqlstate() {
        let e = ApiError::from(kiln_storage::Error::TableNotFound("t".into()));
        assert_eq!((e.status.as_u16(), e.sqlstate), (404, "42P01"));
        let e = ApiError::from(kiln_storage::Error::NotNull {
            row: 3,
            column: "x".into(),
            time: false,
        });
        assert_eq!((e.status.as_u16(), e.sqlstate), (400, "23502"));
        let e = ApiError::from(kiln_query::Error::Sql("SQL error: oops".into()));
        assert_eq!((e.status.as_u16(), e.sqlstate), (400, "42601"));
        let e = ApiError::from(kiln_query::Error::Unsupported("CTAS".into()));
        assert_eq!((e.status.as_u16(), e.sqlstate), (400, "0A000"));
        let e = ApiError::from(kiln_query::Error::InvalidRegex("(".into()));
        assert_eq!((e.status.as_u16(), e.sqlstate), (400, "2201B"));
        let e = ApiError::from(DataFusionError::ArrowError(
            Box::new(arrow::error::ArrowError::DivideByZero),
            None,
        ));
        assert_eq!((e.status.as_u16(), e.sqlstate), (400, "22012"));
        let e = ApiError::from(DataFusionError::ArrowError(
            Box::new(arrow::error::ArrowError::ArithmeticOverflow(
                "1 + i64::MAX".into(),
            )),
            None,
        ));
        assert_eq!((e.status.as_u16(), e.sqlstate), (400, "22003"));
        let e = ApiError::from(DataFusionError::ArrowError(
            Box::new(arrow::error::ArrowError::ComputeError(
                "Int64Array overflow on abs(-9223372036854775808)".into(),
            )),
            None,
        ));
        assert_eq!((e.status.as_u16(), e.sqlstate), (400, "22000"));
        // Kiln's error carried through a row stream keeps its kind.
        let e = ApiError::from(DataFusionError::External(Box::new(
            kiln_query::Error::Cancelled,
        )));
        assert_eq!((e.code, e.sqlstate), ("cancelled", "57014"));
        let e = ApiError::from(kiln_storage::Error::ShuttingDown);
        assert_eq!((e.status.as_u16(), e.code), (503, "shutting_down"));
        let e = ApiError::from(kiln_storage::Error::Wal(kiln_wal::Error::Poisoned(
            "disk full".into(),
        )));
        assert_eq!((e.status.as_u16(), e.code), (503, "unavailable"));
        let e = ApiError::from(kiln_query::Error::Overloaded("busy".into()));
        assert_eq!(
            (e.status.as_u16(), e.sqlstate, e.code),
            (503, "53300", "overloaded")
        );
        let e = ApiError::from(kiln_query::Error::Timeout(std::time::Duration::from_secs(
            1,
        )));
        assert_eq!(
            (e.status.as_u16(), e.sqlstate, e.code),
            (504, "57014", "timeout")
        );
        let e = ApiError::from(kiln_query::Error::Cancelled);
        assert_eq!(e.sqlstate, "57014");
        let e = ApiError::from(kiln_query::Error::TooManyColumns("2,000".into()));
        assert_eq!(
            (e.status.as_u16(), e.sqlstate, e.code),
            (400, "54011", "too_many_columns")
        );
        // A function's argument refused with PostgreSQL's class for it,
        // also when carried through a row stream.
        for (kind, sqlstate) in [
            (kiln_query::ErrorKind::InvalidLogarithmArgument, "2201E"),
            (kiln_query::ErrorKind::InvalidPowerArgument, "2201F"),
            (kiln_query::ErrorKind::InvalidNthValueArgument, "22016"),
            (kiln_query::ErrorKind::InvalidParameterValue, "22023"),
            (kiln_query::ErrorKind::NumericOutOfRange, "22003"),
        ] {
            let e = ApiError::from(DataFusionError::External(Box::new(
                kiln_query::Error::Argument(kind, "f(x): why".into()),
            )));
            assert_eq!((e.status.as_u16(), e.sqlstate), (400, sqlstate));
            assert_eq!(e.message, "f(x): why");
        }
    }
}
