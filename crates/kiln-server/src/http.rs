//! The HTTP API (axum): health and readiness, writes of NDJSON, CSV, Arrow
//! IPC and Parquet bodies, SQL with JSON, CSV or NDJSON results, and
//! Prometheus metrics. Handlers only translate; the work is done by the
//! shared `Engine` and `Db`, and every error goes through [`ApiError`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use arrow::array::RecordBatch;
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use futures::StreamExt;
use kiln_query::Output;
use serde_json::{Value, json};

use crate::AppState;
use crate::decode::{self, BodyFormat, Encoding};
use crate::error::ApiError;
use crate::metrics::HTTP;

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/v1/write/{table}", post(write))
        .route("/v1/sql", post(sql))
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

async fn ready(State(st): State<Arc<AppState>>) -> Response {
    if st.shutting_down.load(Ordering::Acquire) {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response()
    } else {
        "ready".into_response()
    }
}

async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let text = st.metrics.render(st.engine.db());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Reads the whole body, refusing more than `limit` bytes.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let declared = header_str(headers, header::CONTENT_LENGTH).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::too_large(limit));
    }
    let mut buf = Vec::with_capacity(declared.unwrap_or(0) as usize);
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
        if buf.len() + chunk.len() > limit {
            return Err(ApiError::too_large(limit));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.into())
}

async fn write(
    State(st): State<Arc<AppState>>,
    Path(table): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let format = BodyFormat::from_content_type(header_str(&headers, header::CONTENT_TYPE));
    let label = match &format {
        Ok(f) => format!("{f:?}").to_ascii_lowercase(),
        Err(_) => "unknown".into(),
    };
    let res = match format {
        Ok(f) => do_write(&st, &table, f, &headers, body).await,
        Err(e) => Err(e),
    };
    let elapsed = started.elapsed();
    match res {
        Ok(rows) => {
            st.metrics.write(&label, "ok", elapsed);
            tracing::debug!(table = %table, rows, elapsed_ms = elapsed.as_millis() as u64, "write");
            axum::Json(json!({ "rows": rows })).into_response()
        }
        Err(e) => {
            st.metrics.write(&label, e.outcome(), elapsed);
            tracing::info!(table = %table, code = e.code, "write rejected: {}", e.message);
            e.into_response()
        }
    }
}

async fn do_write(
    st: &AppState,
    table: &str,
    format: BodyFormat,
    headers: &HeaderMap,
    body: Body,
) -> Result<usize, ApiError> {
    let enc = Encoding::from_header(header_str(headers, header::CONTENT_ENCODING))?;
    let db = st.engine.db();
    let t = db
        .table(table)
        .ok_or_else(|| kiln_storage::Error::TableNotFound(table.into()))?;
    let limit = st.config.max_body_bytes;
    let raw = read_body(headers, body, limit).await?;
    let schema = t.schema.clone();
    let decoded = tokio::task::spawn_blocking(move || {
        let body = decode::decompress(raw, enc, limit)?;
        decode::decode(body, format, &schema)
    })
    .await
    .map_err(|e| ApiError::internal(format!("decoding task: {e}")))??;
    if decoded.rows() == 0 {
        return Ok(0);
    }
    db.write(table, &decoded.batches)
        .await
        .map_err(|e| match e {
            kiln_storage::Error::InvalidRow { row, msg } => {
                let mut api = ApiError::from(kiln_storage::Error::InvalidRow {
                    row,
                    msg: msg.clone(),
                });
                api.message = format!("{}: {msg}", decoded.locate(row));
                api
            }
            other => other.into(),
        })
}

#[derive(Debug, serde::Deserialize)]
struct SqlParams {
    format: Option<String>,
}

#[derive(Debug, serde::Deserialize)]
struct SqlBody {
    sql: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ResultFormat {
    Json,
    Csv,
    Ndjson,
}

async fn sql(
    State(st): State<Arc<AppState>>,
    Query(params): Query<SqlParams>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let mut text = String::new();
    let res = run_sql(&st, params, &headers, body, &mut text, started).await;
    let elapsed = started.elapsed();
    let outcome = match &res {
        Ok(_) => "ok",
        Err(e) => e.outcome(),
    };
    st.metrics.query(HTTP, outcome, elapsed);
    if elapsed >= st.config.slow_query {
        tracing::warn!(
            protocol = HTTP,
            elapsed_ms = elapsed.as_millis() as u64,
            outcome,
            sql = %text,
            "slow query"
        );
    }
    res.unwrap_or_else(|e| e.into_response())
}

async fn run_sql(
    st: &AppState,
    params: SqlParams,
    headers: &HeaderMap,
    body: Body,
    text: &mut String,
    started: Instant,
) -> Result<Response, ApiError> {
    let format = match params.format.as_deref() {
        None | Some("json") => ResultFormat::Json,
        Some("csv") => ResultFormat::Csv,
        Some("ndjson") => ResultFormat::Ndjson,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown format '{other}' (json, csv, ndjson)"
            )));
        }
    };
    let raw = read_body(headers, body, st.config.max_body_bytes).await?;
    let is_json = header_str(headers, header::CONTENT_TYPE)
        .is_some_and(|ct| ct.trim_start().starts_with("application/json"));
    *text = if is_json {
        serde_json::from_slice::<SqlBody>(&raw)
            .map_err(|e| ApiError::bad_request(format!("expected {{\"sql\": \"...\"}}: {e}")))?
            .sql
    } else {
        String::from_utf8(raw.to_vec())
            .map_err(|_| ApiError::bad_request("SQL text is not valid UTF-8"))?
    };
    let out = st.engine.execute(text).await?;
    let Some(last) = out.into_iter().last() else {
        return Err(ApiError::bad_request("no SQL statement in the request"));
    };
    let (schema, batches) = match last {
        Output::Rows { schema, batches } => (schema, batches),
        Output::Command { tag, rows } => {
            let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
            return Ok(axum::Json(json!({
                "command": tag,
                "rows_affected": rows,
                "columns": [],
                "rows": [],
                "elapsed_ms": elapsed_ms,
            }))
            .into_response());
        }
    };
    let internal = |e: arrow::error::ArrowError| ApiError::internal(format!("encoding rows: {e}"));
    match format {
        ResultFormat::Json => {
            let columns: Vec<Value> = schema
                .fields()
                .iter()
                .map(|f| json!({ "name": f.name(), "type": f.data_type().to_string() }))
                .collect();
            let mut out = Vec::with_capacity(256);
            out.extend_from_slice(b"{\"columns\":");
            serde_json::to_writer(&mut out, &columns)
                .map_err(|e| ApiError::internal(format!("encoding columns: {e}")))?;
            out.extend_from_slice(b",\"rows\":");
            rows_json(&batches, &mut out).map_err(internal)?;
            let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
            out.extend_from_slice(format!(",\"elapsed_ms\":{elapsed_ms}}}").as_bytes());
            Ok(([(header::CONTENT_TYPE, "application/json")], out).into_response())
        }
        ResultFormat::Csv => {
            let mut w = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(Vec::new());
            if batches.is_empty() {
                w.write(&RecordBatch::new_empty(schema.clone()))
                    .map_err(internal)?;
            }
            for b in &batches {
                w.write(b).map_err(internal)?;
            }
            Ok(([(header::CONTENT_TYPE, "text/csv")], w.into_inner()).into_response())
        }
        ResultFormat::Ndjson => {
            let mut w = arrow::json::WriterBuilder::new()
                .with_explicit_nulls(true)
                .build::<_, arrow::json::writer::LineDelimited>(Vec::new());
            for b in &batches {
                w.write(b).map_err(internal)?;
            }
            w.finish().map_err(internal)?;
            Ok((
                [(header::CONTENT_TYPE, "application/x-ndjson")],
                w.into_inner(),
            )
                .into_response())
        }
    }
}

/// Writes rows as a JSON array of arrays in column order, encoded straight
/// from Arrow with arrow-json's value encoders (no intermediate JSON values;
/// duplicate column names are fine).
fn rows_json(batches: &[RecordBatch], out: &mut Vec<u8>) -> Result<(), arrow::error::ArrowError> {
    let opts = arrow::json::writer::EncoderOptions::default();
    out.push(b'[');
    let mut first = true;
    for b in batches {
        let schema = b.schema();
        let mut encoders = schema
            .fields()
            .iter()
            .zip(b.columns())
            .map(|(f, c)| arrow::json::writer::make_encoder(f, c.as_ref(), &opts))
            .collect::<Result<Vec<_>, _>>()?;
        for r in 0..b.num_rows() {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            out.push(b'[');
            for (i, e) in encoders.iter_mut().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                if e.is_null(r) {
                    out.extend_from_slice(b"null");
                } else {
                    e.encode(r, out);
                }
            }
            out.push(b']');
        }
    }
    out.push(b']');
    Ok(())
}
