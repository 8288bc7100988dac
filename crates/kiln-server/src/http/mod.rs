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
    let text = st.metrics.render(&st.engine);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

pub(crate) fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Reads the whole body, refusing more than `limit` bytes.
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, ApiError> {
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
