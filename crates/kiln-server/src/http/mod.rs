//! The HTTP API (axum): health and readiness, writes of NDJSON, CSV, Arrow
//! IPC and Parquet bodies, SQL with JSON, CSV or NDJSON results, and
//! Prometheus metrics. Handlers only translate; the work is done by the
//! shared `Engine` and `Db`, and every error goes through [`ApiError`].

mod encode;
mod guard;
mod sql;
mod write;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use futures::StreamExt;
use kiln_storage::budget::{Reserved, Spent};

use crate::AppState;
use crate::error::ApiError;

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/v1/write/{table}", post(write::write))
        .route("/v1/sql", post(sql::sql))
        .layer(DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::guard,
        ))
        .with_state(state)
}

async fn ready(State(st): State<Arc<AppState>>) -> Response {
    if st.shutting_down.load(Ordering::Acquire) {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response()
    } else if let Some(why) = st.engine.db().degraded() {
        // Reads still work; writes or flushes do not (yet): out of rotation
        // for writers until it heals.
        (StatusCode::SERVICE_UNAVAILABLE, format!("degraded: {why}")).into_response()
    } else {
        "ready".into_response()
    }
}

async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let text = st.metrics.render(&st.engine, &st.bodies);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

pub(crate) fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Reads the whole body, refusing more than `--max-body-bytes`, within
/// `--body-read-timeout`, under a reservation of `--body-memory-limit`:
/// its `Content-Length` (the largest body when it has none) is reserved
/// before a byte is read, and all but the body's length given back once
/// it is. The caller holds the reservation until it has answered.
pub(crate) async fn read_body(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Bytes, Reserved), ApiError> {
    let limit = st.config.max_body_bytes.as_usize();
    let timeout = st.config.body_read_timeout;
    let declared = header_str(headers, header::CONTENT_LENGTH).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::too_large(limit));
    }
    let mut reserved = st
        .bodies
        .reserve(declared.unwrap_or(limit as u64), timeout)
        .await
        .map_err(|Spent { need, limit }| ApiError::bodies_full(need, limit, timeout))?;
    let mut buf = Vec::with_capacity(declared.unwrap_or(0) as usize);
    let mut stream = body.into_data_stream();
    let read = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk
                .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
            if buf.len() + chunk.len() > limit {
                return Err(ApiError::too_large(limit));
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(())
    };
    let outcome = tokio::time::timeout(timeout, read).await;
    match outcome {
        Ok(read) => read?,
        Err(_) => return Err(ApiError::body_timeout(timeout, buf.len())),
    }
    reserved.shrink_to(buf.len() as u64);
    Ok((buf.into(), reserved))
}
