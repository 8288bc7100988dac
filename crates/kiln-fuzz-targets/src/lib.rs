//! Kiln's fuzz targets: every decoder of outside input, each a function of
//! arbitrary bytes that must return (an error is fine) and never panic,
//! overflow its stack or allocate without bound.
//!
//! Why a crate of plain functions: cargo-fuzz's targets (`fuzz/`, nightly,
//! `scripts/fuzz.sh`) call them for coverage-guided runs of any length,
//! and `tests/bounded.rs` feeds each a few thousand mutated inputs on the
//! stable toolchain in every test run, where each crash found becomes a
//! regression input.
//!
//! Targets: the write decoders (NDJSON, CSV, Arrow IPC, Parquet), the WAL
//! record payload decoder, the decoder of a cube part's distinct-count
//! states (read back from storage), the PostgreSQL frontend message
//! decoder and the SQL entry point (parse, depth check, plan, optimize).

use std::sync::{Arc, OnceLock};

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use bytes::{Bytes, BytesMut};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion_postgres::pgwire::messages::{DecodeContext, PgWireFrontendMessage};
use kiln_query::ingest::{self, Format, Options};

/// Most bytes a decoded body may claim (as `--max-body-bytes`).
const MAX_BYTES: usize = 64 << 20;

/// The table every write decoder decodes for: each column type Kiln has.
pub fn table() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
        Field::new("id", DataType::Int64, false),
        Field::new("n", DataType::Int32, true),
        Field::new("x", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("b", DataType::Boolean, true),
        Field::new("d", DataType::Date32, true),
    ]))
}

fn decode(data: &[u8], format: Format) {
    let opts = Options {
        timestamp_unit: None,
        max_bytes: MAX_BYTES,
        max_row_bytes: MAX_BYTES,
    };
    let _ = ingest::decode(Bytes::copy_from_slice(data), format, &table(), &opts);
}

pub fn ndjson(data: &[u8]) {
    decode(data, Format::Ndjson);
}

pub fn csv(data: &[u8]) {
    decode(data, Format::Csv);
}

pub fn arrow_ipc(data: &[u8]) {
    decode(data, Format::ArrowStream);
}

pub fn parquet(data: &[u8]) {
    decode(data, Format::Parquet);
}

/// A WAL record's payload, decoded as recovery decodes it.
pub fn wal_payload(data: &[u8]) {
    let _ = kiln_storage::decode_wal_payload(&Bytes::copy_from_slice(data));
}

/// A cube part's distinct-count state, decoded as a scan of the part
/// decodes it.
pub fn cube_distinct_state(data: &[u8]) {
    let _ = kiln_query::cube::gaps::decode_with(data, |_| {});
}

/// Frontend messages, decoded one after another as a connection would,
/// first as a startup packet, then as messages of an established session.
pub fn pg_message(data: &[u8]) {
    for startup in [true, false] {
        let mut ctx = DecodeContext::default();
        ctx.awaiting_frontend_ssl = startup;
        ctx.awaiting_frontend_startup = startup;
        let mut buf = BytesMut::from(data);
        // A decode that returns a message consumes its bytes; stop if one
        // does not (pgwire answers the startup state's first packet again
        // and again: the connection leaves that state after it).
        while !buf.is_empty() {
            let before = buf.len();
            match PgWireFrontendMessage::decode(&mut buf, &ctx) {
                Ok(Some(_)) if buf.len() < before => {}
                _ => break,
            }
        }
    }
}

/// SQL text through Kiln's entry: split, depth-checked, then planned and
/// optimized by DataFusion (on a session without tables).
pub fn sql(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(stmts) = kiln_query::Engine::split(text) else {
        return;
    };
    let (runtime, ctx) = session();
    for stmt in stmts {
        let mut stmt = stmt;
        if let DfStatement::Statement(s) = &mut stmt
            && kiln_query::shape::check(s, 1000).is_err()
        {
            continue;
        }
        let state = ctx.state();
        runtime.block_on(async {
            if let Ok(plan) = state.statement_to_plan(stmt).await {
                let _ = state.optimize(&plan);
            }
        });
    }
}

fn session() -> &'static (tokio::runtime::Runtime, SessionContext) {
    static SESSION: OnceLock<(tokio::runtime::Runtime, SessionContext)> = OnceLock::new();
    SESSION.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        (runtime, SessionContext::new())
    })
}
