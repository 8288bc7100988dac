//! `POST /v1/sql`: SQL as the body, or JSON `{"sql": ..., "params": [...]}`;
//! results as JSON, CSV, NDJSON or an Arrow IPC stream.
//!
//! Every request is a query in the engine's registry: it waits for an
//! admission slot (503 when the queue is full), is bounded by
//! `--query-timeout` or its `?timeout=` (504), and shows in `system.queries`. The status code
//! is decided when the first batch is ready, so planning and most execution
//! errors get their proper status; the rest of the result then streams. An
//! error after that point can only cut the response short (the client sees
//! an incomplete body), as with any streaming database API.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use axum::body::Body;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use datafusion::common::ScalarValue;
use datafusion::sql::parser::Statement as DfStatement;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use kiln_query::engine::Learn;
use kiln_query::plan_cache::Door;
use kiln_query::{Begin, Engine, Origin, Streamed};
use serde_json::{Value, json};

use super::encode::{Encoder, ResultFormat};
use super::{header_str, read_body};
use crate::AppState;
use crate::auth::Identity;
use crate::error::ApiError;

#[derive(Debug, serde::Deserialize)]
pub(crate) struct SqlParams {
    format: Option<String>,
    /// This request's own timeout (`250ms`, `5s`); the sooner of it and
    /// `--query-timeout` applies.
    timeout: Option<String>,
    /// `off` answers this request from raw rows only (`SET kiln.cubes`).
    cubes: Option<String>,
}

#[derive(Debug, serde::Deserialize)]
struct SqlBody {
    sql: String,
    #[serde(default)]
    params: Vec<Value>,
}

pub(crate) async fn sql(
    State(st): State<Arc<AppState>>,
    Extension(identity): Extension<Identity>,
    Query(params): Query<SqlParams>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    run_sql(&st, identity, params, &headers, body, started)
        .await
        .unwrap_or_else(|e| e.into_response())
}

/// The request's SQL text and its parameters.
fn parse_body(headers: &HeaderMap, raw: &[u8]) -> Result<(String, Vec<ScalarValue>), ApiError> {
    let is_json = header_str(headers, header::CONTENT_TYPE)
        .is_some_and(|ct| ct.trim_start().starts_with("application/json"));
    if !is_json {
        let text = String::from_utf8(raw.to_vec())
            .map_err(|_| ApiError::bad_request("SQL text is not valid UTF-8"))?;
        return Ok((text, vec![]));
    }
    let body: SqlBody = serde_json::from_slice(raw).map_err(|e| {
        ApiError::bad_request(format!(
            "expected {{\"sql\": \"...\", \"params\": [...]}}: {e}"
        ))
    })?;
    let params = body
        .params
        .iter()
        .enumerate()
        .map(|(i, v)| json_param(i + 1, v))
        .collect::<Result<_, _>>()?;
    Ok((body.sql, params))
}

/// A JSON parameter as a SQL value; the engine casts it to the type the
/// query needs (a string compared with a TIMESTAMP becomes one).
fn json_param(n: usize, v: &Value) -> Result<ScalarValue, ApiError> {
    Ok(match v {
        Value::Null => ScalarValue::Null,
        Value::Bool(b) => ScalarValue::Boolean(Some(*b)),
        Value::Number(x) => match (x.as_i64(), x.as_u64(), x.as_f64()) {
            (Some(i), _, _) => ScalarValue::Int64(Some(i)),
            (None, Some(u), _) => ScalarValue::UInt64(Some(u)),
            (_, _, f) => ScalarValue::Float64(f),
        },
        Value::String(s) => ScalarValue::Utf8(Some(s.clone())),
        Value::Array(_) | Value::Object(_) => {
            return Err(ApiError::bad_request(format!(
                "parameter ${n}: arrays and objects are not supported (use null, a boolean, a number or a string)"
            )));
        }
    })
}

async fn run_sql(
    st: &AppState,
    identity: Identity,
    params: SqlParams,
    headers: &HeaderMap,
    body: Body,
    started: Instant,
) -> Result<Response, ApiError> {
    let format = ResultFormat::parse(params.format.as_deref())?;
    let timeout = params
        .timeout
        .as_deref()
        .map(|t| {
            humantime::parse_duration(t)
                .map_err(|e| ApiError::bad_request(format!("bad timeout '{t}': {e}")))
        })
        .transpose()?;
    let engine = &st.engine;
    let settings = match &params.cubes {
        Some(v) => match engine.check_setting("kiln.cubes", v)? {
            (name, Some(value)) => vec![(name, value)],
            (_, None) => vec![],
        },
        None => vec![],
    };
    // Held while the statement runs: its text is in memory until then.
    let (raw, _body) = read_body(st, headers, body).await?;
    let (text, params) = parse_body(headers, &raw)?;
    let begin = |light| Begin {
        timeout,
        light,
        transaction: None,
        settings: settings.clone(),
        user: identity.0.clone(),
        session_user: identity.0.clone(),
    };
    if let Some(own) = engine.own_statement(&text) {
        let own = own.inspect_err(|e| engine.record_failed(Origin::HTTP, &text, e))?;
        let query = engine.begin_with(Origin::HTTP, &text, begin(true)).await?;
        let streamed = engine.run_own(&query, own).await?;
        return respond(streamed, format, started).await;
    }
    // A text like one already run through a kept shape (or the same
    // text, sent with params) runs unparsed (`kiln_query::plan_cache::texts`).
    let template = engine.template(Door::Http, &text, !params.is_empty());
    let mut query = None;
    if let Some(hit) = template.as_ref().and_then(|t| engine.text_hit(t)) {
        // Learned only from a statement that reads a table: not light.
        let q = engine.begin_with(Origin::HTTP, &text, begin(false)).await?;
        if let Some(streamed) = engine.run_text(&q, &hit, &params).await? {
            return respond(streamed, format, started).await;
        }
        query = Some(q);
    }
    let stmts = engine.parse(&text)?;
    if stmts.is_empty() {
        return Err(ApiError::bad_request("no SQL statement in the request"));
    }
    if !params.is_empty() && stmts.len() > 1 {
        return Err(ApiError::bad_request(
            "\"params\" needs exactly one statement in \"sql\"",
        ));
    }
    let light = stmts
        .iter()
        .all(|s| matches!(s, DfStatement::Statement(s) if Engine::is_light([s.as_ref()])));
    let query = match query {
        Some(q) => q,
        None => engine.begin_with(Origin::HTTP, &text, begin(light)).await?,
    };
    let template = template.filter(|_| stmts.len() == 1 && !light);
    let last = stmts.len() - 1;
    let mut result = None;
    for (i, stmt) in stmts.into_iter().enumerate() {
        let streamed = match &template {
            Some(template) => {
                let learn = Learn {
                    template,
                    labels: None,
                };
                engine.run_learning(&query, stmt, &params, learn).await?
            }
            None => engine.run(&query, stmt, &params).await?,
        };
        if i < last {
            // Earlier statements run to completion; only the last one's result is sent.
            if let Streamed::Rows { stream, .. } = streamed {
                stream.try_for_each(|_| async { Ok(()) }).await?;
            }
        } else {
            result = Some(streamed);
        }
    }
    respond(result.expect("at least one statement"), format, started).await
}

/// The response to a statement's result: a command's tag, or its rows
/// streamed in `format`.
async fn respond(
    result: Streamed,
    format: ResultFormat,
    started: Instant,
) -> Result<Response, ApiError> {
    match result {
        Streamed::Command { tag, rows } => {
            let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
            Ok(axum::Json(json!({
                "command": tag,
                "rows_affected": rows,
                "columns": [],
                "rows": [],
                "elapsed_ms": elapsed_ms,
            }))
            .into_response())
        }
        Streamed::Rows { schema, stream } => {
            // The stream holds the query until the body is sent or dropped
            // (client gone: the query is recorded cancelled).
            let mut rows = stream.map_err(kiln_query::Error::from);
            // The status is decided by the first batch (or the first error).
            let first = match rows.next().await {
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(b)) => Some(b),
                None => None,
            };
            let encoder = Encoder::new(format, schema, started);
            let body = Body::from_stream(encode(encoder, first, rows));
            Ok(([(header::CONTENT_TYPE, format.content_type())], body).into_response())
        }
    }
}

/// The response body: head, the first batch, every further batch as it
/// arrives, tail. Text formats take batches in slices of bounded size
/// ([`kiln_query::chunks`]), one body chunk each.
fn encode<S>(
    encoder: Encoder,
    first: Option<RecordBatch>,
    rows: S,
) -> impl Stream<Item = Result<Bytes, kiln_query::Error>> + Send
where
    S: Stream<Item = Result<RecordBatch, kiln_query::Error>> + Send + Unpin + 'static,
{
    let rows = futures::stream::iter(first.map(Ok)).chain(rows);
    let rows: BoxStream<'static, _> = match encoder.is_text() {
        true => kiln_query::chunks::sliced(rows).boxed(),
        false => rows.boxed(),
    };
    enum Phase {
        Head,
        Rows,
        Done,
    }
    let state = (encoder, rows, Phase::Head);
    futures::stream::unfold(state, |(mut enc, mut rows, phase)| async move {
        let (chunk, next) = match phase {
            Phase::Done => return None,
            Phase::Head => (enc.head(), Phase::Rows),
            Phase::Rows => match rows.next().await {
                Some(Ok(b)) => (enc.batch(&b), Phase::Rows),
                Some(Err(e)) => return Some((Err(e), (enc, rows, Phase::Done))),
                None => (enc.tail(), Phase::Done),
            },
        };
        let item = chunk.map(Bytes::from).map_err(kiln_query::Error::from);
        Some((item, (enc, rows, next)))
    })
}
