//! `COPY table [(columns)] TO STDOUT` and `COPY (query) TO STDOUT` [WITH
//! (FORMAT text | csv | binary, HEADER, DELIMITER 'c', NULL 's')]: psql's
//! `\copy ... to`, psycopg's `cursor.copy()` reading, JDBC's
//! `CopyManager`, pgx's `CopyTo`.
//!
//! The rows are one registered query at the engine's door, computed as
//! they are sent (one CopyData message per row, as PostgreSQL sends them,
//! so the socket paces the query), encoded a slice of a batch at a time
//! ([`kiln_query::chunks`]). Values are written as PostgreSQL writes them:
//! timestamps `2026-01-01 00:00:00`, booleans `t`/`f`, NULL
//! as `\N` (text) or an empty field (CSV), text-format backslash escapes,
//! CSV quoting of fields that need it (an empty string is `""`, not NULL).
//! The binary format is PostgreSQL's (`PGCOPY` header, each field's
//! length and binary value as a DataRow carries it in binary): the
//! columns' types and encodings are the ones queries' results have.
//!
//! The rows are sent by [`send`], not by pgwire: a copy that fails part
//! way ends with the error alone, an ErrorResponse as PostgreSQL sends
//! it, where pgwire sends CopyFail first, a message only a client may
//! send (psql then reported an unexpected response, not the error). A
//! copy after other statements of one simple query is sent in its turn
//! ([`in_turn`]), the statements before it first.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use bytes::Bytes;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{CopySource, CopyTarget, Statement};
use datafusion_postgres::arrow_pg::encoder::encode_value;
use datafusion_postgres::pgwire::api::ClientInfo;
use datafusion_postgres::pgwire::api::portal::Format;
use datafusion_postgres::pgwire::api::query::{send_execution_response, send_query_response};
use datafusion_postgres::pgwire::api::results::{
    CopyEncoder, CopyResponse, FieldInfo, Response, Tag,
};
use datafusion_postgres::pgwire::error::{PgWireError, PgWireResult};
use datafusion_postgres::pgwire::messages::PgWireBackendMessage;
use datafusion_postgres::pgwire::messages::copy::{CopyData, CopyDone, CopyOutResponse};
use datafusion_postgres::pgwire::messages::response::EmptyQueryResponse;
use futures::{Sink, SinkExt, StreamExt};
use kiln_query::ingest::copy::{CopyFormat, CopyLayout};
use kiln_query::{Engine, Streamed};

use crate::error::ApiError;

/// Answers a `COPY ... TO STDOUT` statement (None: not one).
pub(crate) async fn start(
    stmt: &Statement,
    engine: &Engine,
    client: &(dyn ClientInfo + Send + Sync),
) -> Option<PgWireResult<Response>> {
    let Statement::Copy {
        source,
        to: true,
        target,
        options,
        legacy_options,
        ..
    } = stmt
    else {
        return None;
    };
    Some(
        copy_out(
            source,
            target,
            options,
            legacy_options,
            stmt,
            engine,
            client,
        )
        .await,
    )
}

/// Sends a copy out in its turn among a simple query's statements: the
/// responses of the statements before it (`earlier`, taken) first, as
/// pgwire would, then the copy ([`send`]), and answers the `COPY n`
/// that follows it. Where an earlier statement changed the transaction
/// (pgwire tracks it from the responses it sends), the copy is left for
/// pgwire to send.
pub(crate) async fn in_turn<C>(
    client: &mut C,
    earlier: &mut Vec<Response>,
    copy: CopyResponse,
) -> PgWireResult<Response>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    C::Error: std::fmt::Debug,
    PgWireError: From<C::Error>,
{
    let plain = |r: &Response| {
        matches!(
            r,
            Response::Query(_) | Response::Execution(_) | Response::EmptyQuery
        )
    };
    if !earlier.iter().all(plain) {
        return Ok(Response::CopyOut(copy));
    }
    for r in earlier.drain(..) {
        match r {
            Response::Query(rows) => send_query_response(client, rows, true).await?,
            Response::Execution(tag) => send_execution_response(client, tag).await?,
            _ => {
                client
                    .feed(PgWireBackendMessage::EmptyQueryResponse(
                        EmptyQueryResponse::new(),
                    ))
                    .await?
            }
        }
    }
    send(client, copy).await
}

/// Sends `copy`'s rows to `client` (CopyOutResponse, CopyData, CopyDone)
/// and answers the `COPY n` that follows them. A row that fails stops the
/// copy with its error, which the caller's error path sends as an
/// ErrorResponse.
async fn send<C>(client: &mut C, copy: CopyResponse) -> PgWireResult<Response>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    PgWireError: From<C::Error>,
{
    let formats = copy.column_formats();
    let CopyResponse {
        format,
        columns,
        mut data_stream,
        ..
    } = copy;
    let columns = i16::try_from(columns)
        .map_err(|_| ApiError::bad_input("COPY of more than 32767 columns").to_pg())?;
    let start = CopyOutResponse::new(format, columns, formats);
    client
        .send(PgWireBackendMessage::CopyOutResponse(start))
        .await?;
    let mut rows = 0;
    while let Some(data) = data_stream.next().await {
        let data = data?;
        if data.data.is_empty() {
            continue;
        }
        // The binary format's trailer is not a row.
        if data.data.as_ref() != TRAILER {
            rows += 1;
        }
        client.feed(PgWireBackendMessage::CopyData(data)).await?;
    }
    client
        .send(PgWireBackendMessage::CopyDone(CopyDone::new()))
        .await?;
    Ok(Response::Execution(Tag::new("COPY").with_rows(rows)))
}

/// The last message of a binary copy.
const TRAILER: [u8; 2] = [0xFF, 0xFF];

/// `COPY ... TO 'file'` run by the engine (the file checked there again);
/// answers `COPY n`.
async fn to_file(
    stmt: &Statement,
    engine: &Engine,
    client: &(dyn ClientInfo + Send + Sync),
) -> PgWireResult<Response> {
    let text = stmt.to_string();
    let pg = |e: kiln_query::Error| ApiError::from(e).to_pg();
    let stmts = engine.parse(&text).map_err(pg)?;
    let q = super::begin(engine, &text, client, false).await?;
    let mut rows = 0u64;
    for stmt in stmts {
        if let kiln_query::Output::Rows { batches, .. } = engine
            .run(&q, stmt, &[])
            .await
            .map_err(pg)?
            .collect()
            .await
            .map_err(pg)?
        {
            rows += batches
                .iter()
                .filter_map(|b| {
                    b.column(0)
                        .as_primitive_opt::<arrow::datatypes::UInt64Type>()
                })
                .map(|c| c.values().iter().sum::<u64>())
                .sum::<u64>();
        }
    }
    Ok(Response::Execution(
        Tag::new("COPY").with_rows(rows as usize),
    ))
}

async fn copy_out(
    source: &CopySource,
    target: &CopyTarget,
    options: &[datafusion::sql::sqlparser::ast::CopyOption],
    legacy: &[datafusion::sql::sqlparser::ast::CopyLegacyOption],
    stmt: &Statement,
    engine: &Engine,
    client: &(dyn ClientInfo + Send + Sync),
) -> PgWireResult<Response> {
    match target {
        CopyTarget::Stdout => {}
        // Allowed by --sql-file-access (checked by the caller): DataFusion
        // writes the file, as over HTTP.
        CopyTarget::File { .. } => return to_file(stmt, engine, client).await,
        _ => {
            let msg = "only COPY ... TO STDOUT or a file is supported";
            return Err(ApiError::unsupported(msg).to_pg());
        }
    }
    let query = match source {
        CopySource::Query(q) => Statement::Query(q.clone()),
        CopySource::Table {
            table_name,
            columns,
        } => {
            let list = match columns.is_empty() {
                true => "*".to_string(),
                false => columns
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            let sql = format!("SELECT {list} FROM {table_name}");
            match engine.parse(&sql).map(|mut s| s.pop()) {
                Ok(Some(DfStatement::Statement(s))) => *s,
                Ok(_) => return Err(ApiError::bad_input("COPY needs a table").to_pg()),
                Err(e) => return Err(ApiError::from(e).to_pg()),
            }
        }
    };
    let light = Engine::is_light([&query]);
    let q = super::begin(engine, &stmt.to_string(), client, light).await?;
    let streamed = engine
        .run(&q, DfStatement::Statement(Box::new(query)), &[])
        .await
        .map_err(|e| ApiError::from(e).to_pg())?;
    let Streamed::Rows { schema, stream } = streamed else {
        return Err(ApiError::bad_input("COPY's query returns no rows").to_pg());
    };
    // A batch's rows are encoded a slice of bounded size at a time.
    let stream = kiln_query::chunks::sliced(stream);
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let layout = super::copy::layout(names, options, legacy).map_err(|e| e.to_pg())?;
    if layout.format == CopyFormat::Binary {
        let fields = Arc::new(super::execute::fields(
            &schema,
            Some(&Format::UnifiedBinary),
        )?);
        let columns = fields.len();
        // One encoder for the whole stream: it writes the header once.
        let mut encoder = CopyEncoder::new_binary(fields.clone());
        let rows = stream.flat_map(move |batch| {
            let rows = match batch {
                Ok(batch) => binary_rows(&batch, &fields, &mut encoder),
                Err(e) => vec![Err(ApiError::from(e).to_pg())],
            };
            futures::stream::iter(rows)
        });
        return Ok(Response::CopyOut(CopyResponse::new(1, columns, rows)));
    }
    let layout = Arc::new(layout);
    let header = layout.header.then(|| header_line(&layout));
    let columns = schema.fields().len();
    let mut header = header;
    let rows = stream.flat_map(move |batch| {
        let lines: Vec<PgWireResult<CopyData>> = match batch {
            Ok(batch) => match lines(&batch, &layout) {
                Ok(mut lines) => {
                    // The header travels with the first row, so the COPY
                    // count (one per message) counts rows only.
                    if let Some(h) = header.take() {
                        match lines.first_mut() {
                            Some(first) => {
                                first.splice(0..0, h);
                            }
                            None => lines.push(h),
                        }
                    }
                    lines
                        .into_iter()
                        .map(|l| Ok(CopyData::new(Bytes::from(l))))
                        .collect()
                }
                Err(e) => vec![Err(e)],
            },
            Err(e) => vec![Err(ApiError::from(e).to_pg())],
        };
        futures::stream::iter(lines)
    });
    Ok(Response::CopyOut(CopyResponse::new(0, columns, rows)))
}

/// `batch`'s rows in the binary format, one CopyData message each (the
/// stream's first carries the `PGCOPY` header; pgwire's `CopyResponse`
/// adds the trailer).
fn binary_rows(
    batch: &RecordBatch,
    fields: &[FieldInfo],
    encoder: &mut CopyEncoder,
) -> Vec<PgWireResult<CopyData>> {
    let schema = batch.schema();
    let mut out = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let encoded = batch
            .columns()
            .iter()
            .zip(schema.fields())
            .zip(fields.iter())
            .try_for_each(|((column, arrow_field), pg_field)| {
                // arrow-pg writes some NULLs (intervals) as a zero value:
                // a NULL is sent as one here, whatever its type.
                match column.is_null(row) {
                    true => encoder.encode_field(&None::<i32>),
                    false => encode_value(encoder, column, row, arrow_field, pg_field),
                }
            });
        out.push(encoded.map(|()| encoder.take_copy()));
    }
    out
}

fn header_line(layout: &CopyLayout) -> Vec<u8> {
    let mut line = vec![];
    for (i, name) in layout.columns.iter().enumerate() {
        if i > 0 {
            line.push(layout.delimiter);
        }
        field(&mut line, name, layout);
    }
    line.push(b'\n');
    line
}

/// `batch`'s rows, each a line ending in a newline.
fn lines(batch: &RecordBatch, layout: &CopyLayout) -> PgWireResult<Vec<Vec<u8>>> {
    let options = FormatOptions::default()
        .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.f"))
        .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.f%:z"))
        .with_date_format(Some("%Y-%m-%d"));
    let formatters = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PgWireError::ApiError(Box::new(e)))?;
    let mut out = Vec::with_capacity(batch.num_rows());
    let mut value = String::new();
    for row in 0..batch.num_rows() {
        let mut line = Vec::with_capacity(64);
        for (i, (column, format)) in batch.columns().iter().zip(&formatters).enumerate() {
            if i > 0 {
                line.push(layout.delimiter);
            }
            if column.is_null(row) {
                line.extend_from_slice(layout.null.as_bytes());
                continue;
            }
            value.clear();
            write_value(&mut value, column, row, format);
            field(&mut line, &value, layout);
        }
        line.push(b'\n');
        out.push(line);
    }
    Ok(out)
}

/// One non-null value as PostgreSQL prints it.
fn write_value(out: &mut String, column: &ArrayRef, row: usize, format: &ArrayFormatter) {
    use std::fmt::Write;
    match column.data_type() {
        DataType::Boolean => out.push(if column.as_boolean().value(row) {
            't'
        } else {
            'f'
        }),
        _ => {
            let _ = write!(out, "{}", format.value(row));
        }
    }
}

/// Appends `value` to `line`, escaped or quoted as the format needs.
fn field(line: &mut Vec<u8>, value: &str, layout: &CopyLayout) {
    match layout.format {
        CopyFormat::Text => {
            for b in value.bytes() {
                match b {
                    b'\\' => line.extend_from_slice(b"\\\\"),
                    b'\n' => line.extend_from_slice(b"\\n"),
                    b'\r' => line.extend_from_slice(b"\\r"),
                    b'\t' => line.extend_from_slice(b"\\t"),
                    d if d == layout.delimiter => line.extend_from_slice(&[b'\\', d]),
                    b => line.push(b),
                }
            }
        }
        CopyFormat::Csv => {
            let quote = value.is_empty()
                || value == layout.null
                || value
                    .bytes()
                    .any(|b| b == layout.delimiter || b == b'"' || b == b'\n' || b == b'\r');
            if !quote {
                line.extend_from_slice(value.as_bytes());
                return;
            }
            line.push(b'"');
            for b in value.bytes() {
                if b == b'"' {
                    line.push(b'"');
                }
                line.push(b);
            }
            line.push(b'"');
        }
        CopyFormat::Binary => unreachable!("binary rows are written by binary_rows"),
    }
}

#[cfg(test)]
mod tests;
