//! `kiln sql`: run statements against a data directory, or against a
//! server with `--url` (the same output either way).

use std::io::Cursor;

use arrow::ipc::reader::StreamReader;
use kiln_query::{Engine, Origin, Output};
use kiln_storage::{ByteSize, Db};

use super::BoxError;
use crate::config::SqlArgs;
use crate::output;

pub async fn run(args: SqlArgs) -> Result<(), BoxError> {
    if let Some(url) = &args.url {
        return remote(url, &args).await;
    }
    // One-shot: nothing would read a decoded segment again, and a decode
    // still running at exit would delay it.
    let mut query = args.query;
    query.segment_cache_bytes = ByteSize::ZERO;
    let db = Db::open(args.storage).await?;
    let engine = Engine::with_config(db.clone(), &query)?;
    let result = async {
        let mut out = std::io::stdout().lock();
        let stmts = engine.parse(&args.sql)?;
        let query = engine.begin(Origin::EMBEDDED, &args.sql).await?;
        for stmt in stmts {
            let res = engine.run(&query, stmt, &[]).await?.collect().await?;
            output::print(&mut out, &res, args.format)?;
        }
        Ok::<_, BoxError>(())
    }
    .await;
    let closed = db.close().await;
    result?;
    Ok(closed?)
}

/// Sends each statement to `POST /v1/sql` in turn (results as an Arrow IPC
/// stream) and prints it as the embedded mode does. Stops at the first
/// error, which is the server's message.
async fn remote(url: &str, args: &SqlArgs) -> Result<(), BoxError> {
    let endpoint = format!("{}/v1/sql?format=arrow", url.trim_end_matches('/'));
    let client = kiln_bench::load::http::client(None)?.build()?;
    let mut out = std::io::stdout().lock();
    // Split locally so each statement's result is printed, as embedded.
    for stmt in Engine::split(&args.sql)? {
        let resp = client
            .post(&endpoint)
            .header(reqwest::header::CONTENT_TYPE, "application/sql")
            .body(stmt.to_string())
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        let status = resp.status();
        let is_arrow = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/vnd.apache.arrow"));
        let body = resp.bytes().await?;
        let res = if !status.is_success() {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let msg = v["error"]["message"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
            return Err(format!("{msg} (HTTP {})", status.as_u16()).into());
        } else if is_arrow {
            let reader = StreamReader::try_new(Cursor::new(body), None)?;
            let schema = reader.schema();
            let batches = reader.collect::<Result<Vec<_>, _>>()?;
            Output::Rows { schema, batches }
        } else {
            let v: serde_json::Value = serde_json::from_slice(&body)?;
            Output::Command {
                tag: v["command"].as_str().unwrap_or("OK").to_string(),
                rows: v["rows_affected"].as_u64().unwrap_or(0),
            }
        };
        output::print(&mut out, &res, args.format)?;
    }
    Ok(())
}
