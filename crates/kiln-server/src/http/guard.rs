//! What every HTTP request passes before its handler: a bounded head
//! (`--max-header-bytes`, 431), an `Origin` in `--http-allowed-origins`
//! when there is one (403; CORS preflights answered for those origins
//! only), and, for a `POST`, no request a web page could send cross-site
//! without a preflight: a body whose `Content-Type` is missing,
//! `text/plain`, `application/x-www-form-urlencoded` or
//! `multipart/form-data` (the CORS-safelisted ones) needs the header
//! `X-Kiln-Request` (any value), which a page cannot add without a
//! preflight (415 otherwise); then, when authentication is on, who the
//! request is from ([`identify`]: 401 without valid credentials, except
//! on the probes and `/metrics`). See docs/security.md. A panic in the
//! handler is answered with 500 `internal`, the connection kept.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::FutureExt;

use crate::AppState;
use crate::auth::{Identity, OPEN_PATHS, identify};
use crate::error::ApiError;

/// The header that marks a request as sent by a program, not a web page.
pub const KILN_REQUEST: &str = "x-kiln-request";

/// Content types a page can send cross-site without a preflight.
const SIMPLE_TYPES: [&str; 3] = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data",
];

pub(crate) async fn guard(
    State(st): State<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let limit = st.config.max_header_bytes.as_usize();
    let head = head_bytes(&req);
    if head > limit {
        return ApiError::header_too_large(head, limit).into_response();
    }
    let origin = req.headers().get(header::ORIGIN).cloned();
    let allowed = &st.config.http_allowed_origins;
    if let Some(origin) = &origin
        && !allowed
            .iter()
            .any(|a| a.as_bytes().eq_ignore_ascii_case(origin.as_bytes()))
    {
        return ApiError::origin_not_allowed(&String::from_utf8_lossy(origin.as_bytes()))
            .into_response();
    }
    if req.method() == Method::OPTIONS {
        // A preflight from an allowed origin (any other was refused above;
        // without an Origin there is no CORS to answer).
        return match origin {
            Some(origin) => preflight(origin),
            None => StatusCode::NO_CONTENT.into_response(),
        };
    }
    if req.method() == Method::POST
        && let Err(e) = check_not_simple(req.headers())
    {
        return e.into_response();
    }
    let auth = st.engine.auth();
    let identity = if auth.enabled() && !OPEN_PATHS.contains(&req.uri().path()) {
        match identify(auth, req.headers()).await {
            Ok(identity) => identity,
            Err(e) => return e.into_response(),
        }
    } else {
        Identity(None)
    };
    req.extensions_mut().insert(identity);
    // A panic in a handler (an upstream function given a value it does not
    // expect, while planning) is answered as an internal error rather than
    // by a dropped connection.
    let mut resp = match AssertUnwindSafe(next.run(req)).catch_unwind().await {
        Ok(resp) => resp,
        Err(panic) => {
            let why = kiln_query::executor::panic_message(panic);
            tracing::error!(panic = why, "an HTTP request's handler panicked");
            ApiError::internal(format!("the request failed unexpectedly: {why}")).into_response()
        }
    };
    if let Some(origin) = origin {
        let h = resp.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    resp
}

/// The request line and headers' size as sent (near enough: separators
/// counted as four bytes a header).
fn head_bytes(req: &Request<Body>) -> usize {
    let line = req.method().as_str().len() + req.uri().to_string().len() + 12;
    line + req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum::<usize>()
}

/// Refuses a body a page could POST cross-site without a preflight.
fn check_not_simple(headers: &HeaderMap) -> Result<(), ApiError> {
    if headers.get(KILN_REQUEST).is_some_and(|v| !v.is_empty()) {
        return Ok(());
    }
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    match ct {
        Some(ct) if !SIMPLE_TYPES.contains(&ct.as_str()) => Ok(()),
        ct => Err(ApiError::unsupported_media_type(format!(
            "refused: a {} body can be sent by any web page (cross-site request); send Content-Type: application/json (or application/sql, application/x-ndjson, text/csv, ...) or the header X-Kiln-Request: 1",
            ct.as_deref().unwrap_or("Content-Type-less")
        ))),
    }
}

/// The answer to a CORS preflight from an allowed `origin`.
fn preflight(origin: HeaderValue) -> Response {
    let mut resp = StatusCode::NO_CONTENT.into_response();
    let h = resp.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(
            "content-type, content-encoding, x-kiln-request, idempotency-key, authorization",
        ),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
    resp
}
