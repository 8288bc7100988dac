//! `POST /v1/write/{table}[?ack=durable|memory][&timestamp_unit=s|ms|us|ns]`: decode the body (any
//! supported format and encoding), then one atomic `Db::write_with`.
//!
//! `ack=durable` (default) answers after the WAL fsync; `ack=memory` answers
//! once the rows are validated and queued for the WAL (an async
//! mode: lower latency, the rows are lost if the process dies before the
//! next group commit). An `Idempotency-Key` header makes a retry of the same
//! request (same key, table, body and content type, within
//! `--idempotency-window`) answer the first response with `"replayed": true`
//! instead of writing again; the guarantees are in `kiln_storage`'s
//! idempotency module. The response is `{"rows": N, "ack": "durable"|"memory"}`.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderName, header};
use axum::response::{IntoResponse, Response};
use kiln_storage::{Ack, IdempotencyKey, TimestampUnit, WriteOptions, Written};
use serde_json::json;

use super::{header_str, read_body};
use crate::AppState;
use crate::auth::Identity;
use crate::error::ApiError;
use kiln_query::auth::Access;
use kiln_query::ingest::{self, Decompress, Encoding, Format, Refused};

/// The most bytes a write's rows may take once decoded into the table's
/// types ([`ingest::Decoded::bytes_in`]): the most one WAL record holds,
/// so a write past it could not be logged anyway. Checked before any
/// value is cast: the body's size does not bound it (a dictionary's one
/// value may stand for every row).
const MAX_WRITE_BYTES: usize = kiln_storage::MAX_RECORD_BYTES;

/// The `Idempotency-Key` request header.
pub(crate) const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

#[derive(Debug, serde::Deserialize)]
pub(crate) struct WriteParams {
    ack: Option<String>,
    /// The unit of integer timestamps in NDJSON and CSV: s, ms, us or ns.
    timestamp_unit: Option<String>,
}

fn parse_unit(v: Option<&str>) -> Result<Option<TimestampUnit>, ApiError> {
    v.map(|u| {
        TimestampUnit::parse(u).ok_or_else(|| {
            ApiError::bad_request(format!("unknown timestamp_unit '{u}' (s, ms, us, ns)"))
        })
    })
    .transpose()
}

fn parse_ack(v: Option<&str>) -> Result<Ack, ApiError> {
    match v {
        None | Some("durable") => Ok(Ack::Durable),
        Some("memory") => Ok(Ack::Memory),
        Some(other) => Err(ApiError::bad_request(format!(
            "unknown ack '{other}' (durable, memory)"
        ))),
    }
}

pub(crate) async fn write(
    State(st): State<Arc<AppState>>,
    Extension(identity): Extension<Identity>,
    Path(table): Path<String>,
    Query(params): Query<WriteParams>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let format = body_format(header_str(&headers, header::CONTENT_TYPE));
    let label = format.as_ref().map_or("unknown", |f| f.label());
    let unit = parse_unit(params.timestamp_unit.as_deref());
    let allowed = st
        .engine
        .authorize(identity.0.as_deref(), Access::Write(&table))
        .map_err(ApiError::from);
    let res = match (allowed, format, parse_ack(params.ack.as_deref()), unit) {
        (Ok(()), Ok(f), Ok(ack), Ok(unit)) => {
            do_write(&st, &table, f, ack, unit, &headers, body).await
        }
        (Err(e), ..) | (_, Err(e), _, _) | (_, _, Err(e), _) | (.., Err(e)) => Err(e),
    };
    let elapsed = started.elapsed();
    match res {
        Ok(w) => {
            st.metrics.write(label, "ok", elapsed);
            let (rows, ack, replayed) = (w.rows, w.ack.as_str(), w.replayed);
            tracing::debug!(table = %table, rows, ack, replayed, elapsed_ms = elapsed.as_millis() as u64, "write");
            let mut body = json!({ "rows": rows, "ack": ack });
            if replayed {
                body["replayed"] = true.into();
            }
            axum::Json(body).into_response()
        }
        Err(e) => {
            st.metrics.write(label, e.outcome(), elapsed);
            tracing::info!(table = %table, code = e.code, "write rejected: {}", e.message);
            e.into_response()
        }
    }
}

const FORMATS: &str = "application/x-ndjson, text/csv, application/vnd.apache.arrow.stream, \
                       application/vnd.apache.parquet";

/// The body's format, from its `Content-Type`.
fn body_format(ct: Option<&str>) -> Result<Format, ApiError> {
    let Some(ct) = ct else {
        return Err(ApiError::unsupported_media_type(format!(
            "missing Content-Type ({FORMATS})"
        )));
    };
    let mime = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    Format::from_mime(&mime).ok_or_else(|| {
        ApiError::unsupported_media_type(format!("unsupported Content-Type '{mime}' ({FORMATS})"))
    })
}

/// The body's `Content-Encoding`.
fn encoding(h: Option<&str>) -> Result<Encoding, ApiError> {
    match h.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") | Some("identity") => Ok(Encoding::Identity),
        Some("gzip") | Some("x-gzip") => Ok(Encoding::Gzip),
        Some("zstd") => Ok(Encoding::Zstd),
        Some(other) => Err(ApiError::unsupported_media_type(format!(
            "unsupported Content-Encoding '{other}' (gzip, zstd)"
        ))),
    }
}

async fn do_write(
    st: &AppState,
    table: &str,
    format: Format,
    ack: Ack,
    timestamp_unit: Option<TimestampUnit>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Written, ApiError> {
    let enc = encoding(header_str(headers, header::CONTENT_ENCODING))?;
    let key = match headers.get(IDEMPOTENCY_KEY) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| ApiError::bad_request("Idempotency-Key must be visible ASCII"))?
                .trim()
                .to_string(),
        ),
    };
    let db = st.engine.db();
    let t = db
        .table(table)
        .ok_or_else(|| kiln_storage::Error::TableNotFound(table.into()))?;
    let limit = st.config.max_body_bytes.as_usize();
    // Held until the rows are written: the writes waiting for
    // `--write-memory-limit` with their decoded rows are bounded by the
    // bodies they came in.
    let (raw, _body) = read_body(st, headers, body).await?;
    let idempotency_key = match key {
        None => None,
        Some(key) => {
            // The request's identity: what the body means and the body itself.
            let norm = |h| {
                header_str(headers, h)
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            };
            // The unit changes what the body means: part of its identity.
            let mut ct = norm(header::CONTENT_TYPE);
            if let Some(unit) = timestamp_unit {
                ct.push_str(&format!(";timestamp_unit={unit:?}"));
            }
            let ce = norm(header::CONTENT_ENCODING);
            let parts: [&[u8]; 3] = [ct.as_bytes(), ce.as_bytes(), &raw];
            Some(IdempotencyKey::new(key, &parts)?)
        }
    };
    let schema = t.schema.clone();
    let decoded = tokio::task::spawn_blocking(move || {
        let body = ingest::decompress(raw, enc, limit).map_err(|e| match e {
            Decompress::TooLarge => ApiError::too_large(limit),
            Decompress::Invalid(msg) => ApiError::bad_input(msg),
        })?;
        let opts = ingest::Options {
            timestamp_unit,
            max_bytes: limit,
            max_row_bytes: MAX_WRITE_BYTES,
        };
        ingest::decode(body, format, &schema, &opts).map_err(|e| match e {
            Refused::Invalid(msg) => ApiError::bad_input(msg),
            Refused::TooLarge { bytes } => ApiError::decoded_too_large(bytes, MAX_WRITE_BYTES),
        })
    })
    .await
    .map_err(|e| ApiError::internal(format!("decoding task: {e}")))??;
    let opts = WriteOptions {
        ack,
        idempotency_key,
    };
    db.write_with(table, &decoded.batches, opts)
        .await
        .map_err(|e| ApiError::from_write(e, |row| decoded.locate(row)))
}
