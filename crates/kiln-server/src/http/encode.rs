//! Result encoders for `POST /v1/sql`: each turns a stream of record batches
//! into body chunks (head, one chunk per batch, tail), so large results are
//! sent as they are computed instead of being held in memory.

use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::ipc::writer::StreamWriter;
use serde_json::{Value, json};

use crate::error::ApiError;

/// `?format=` of `POST /v1/sql`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ResultFormat {
    Json,
    Csv,
    Ndjson,
    Arrow,
}

impl ResultFormat {
    pub(crate) fn parse(v: Option<&str>) -> Result<Self, ApiError> {
        match v {
            None | Some("json") => Ok(Self::Json),
            Some("csv") => Ok(Self::Csv),
            Some("ndjson") => Ok(Self::Ndjson),
            Some("arrow") => Ok(Self::Arrow),
            Some(other) => Err(ApiError::bad_request(format!(
                "unknown format '{other}' (json, csv, ndjson, arrow)"
            ))),
        }
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Self::Json => "application/json",
            Self::Csv => "text/csv",
            Self::Ndjson => "application/x-ndjson",
            Self::Arrow => "application/vnd.apache.arrow.stream",
        }
    }
}

/// Encodes one result, chunk by chunk.
pub(crate) struct Encoder {
    format: ResultFormat,
    schema: SchemaRef,
    started: Instant,
    rows: u64,
    ipc: Option<StreamWriter<Vec<u8>>>,
}

impl Encoder {
    pub(crate) fn new(format: ResultFormat, schema: SchemaRef, started: Instant) -> Self {
        Self {
            format,
            schema,
            started,
            rows: 0,
            ipc: None,
        }
    }

    /// Whether rows are written as text (their size then follows the
    /// values, not the batch's memory: see [`kiln_query::chunks`]).
    pub(crate) fn is_text(&self) -> bool {
        self.format != ResultFormat::Arrow
    }

    /// What comes before the rows: JSON's column list, CSV's header line,
    /// the Arrow IPC schema message.
    pub(crate) fn head(&mut self) -> Result<Vec<u8>, ArrowError> {
        match self.format {
            ResultFormat::Json => {
                let columns: Vec<Value> = self
                    .schema
                    .fields()
                    .iter()
                    .map(|f| json!({ "name": f.name(), "type": f.data_type().to_string() }))
                    .collect();
                let mut out = b"{\"columns\":".to_vec();
                serde_json::to_writer(&mut out, &columns)
                    .map_err(|e| ArrowError::JsonError(e.to_string()))?;
                out.extend_from_slice(b",\"rows\":[");
                Ok(out)
            }
            ResultFormat::Csv => {
                let mut w = arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(Vec::new());
                w.write(&RecordBatch::new_empty(self.schema.clone()))?;
                Ok(w.into_inner())
            }
            ResultFormat::Ndjson => Ok(Vec::new()),
            ResultFormat::Arrow => {
                let mut w = StreamWriter::try_new(Vec::new(), &self.schema)?;
                let head = std::mem::take(w.get_mut());
                self.ipc = Some(w);
                Ok(head)
            }
        }
    }

    pub(crate) fn batch(&mut self, b: &RecordBatch) -> Result<Vec<u8>, ArrowError> {
        let first = self.rows == 0;
        self.rows += b.num_rows() as u64;
        match self.format {
            ResultFormat::Json => {
                let mut out = Vec::with_capacity(64 * b.num_rows());
                rows_json(b, !first, &mut out)?;
                Ok(out)
            }
            ResultFormat::Csv => {
                let mut w = arrow::csv::WriterBuilder::new()
                    .with_header(false)
                    .build(Vec::new());
                w.write(b)?;
                Ok(w.into_inner())
            }
            ResultFormat::Ndjson => {
                let mut w = arrow::json::WriterBuilder::new()
                    .with_explicit_nulls(true)
                    .build::<_, arrow::json::writer::LineDelimited>(Vec::new());
                w.write(b)?;
                w.finish()?;
                Ok(w.into_inner())
            }
            ResultFormat::Arrow => {
                let w = self.ipc.as_mut().expect("head() was called");
                w.write(b)?;
                Ok(std::mem::take(w.get_mut()))
            }
        }
    }

    /// What comes after the rows: JSON's row count and elapsed time, the
    /// Arrow IPC end-of-stream marker.
    pub(crate) fn tail(&mut self) -> Result<Vec<u8>, ArrowError> {
        match self.format {
            ResultFormat::Json => {
                let elapsed_ms = self.started.elapsed().as_secs_f64() * 1e3;
                Ok(format!(
                    "],\"row_count\":{},\"elapsed_ms\":{elapsed_ms}}}",
                    self.rows
                )
                .into_bytes())
            }
            ResultFormat::Csv | ResultFormat::Ndjson => Ok(Vec::new()),
            ResultFormat::Arrow => {
                let w = self.ipc.as_mut().expect("head() was called");
                w.finish()?;
                Ok(std::mem::take(w.get_mut()))
            }
        }
    }
}

/// Appends a batch's rows as JSON arrays in column order, encoded straight
/// from Arrow with arrow-json's value encoders (no intermediate JSON values;
/// duplicate column names are fine). `comma`: a row was written before.
fn rows_json(b: &RecordBatch, mut comma: bool, out: &mut Vec<u8>) -> Result<(), ArrowError> {
    let opts = arrow::json::writer::EncoderOptions::default();
    let schema = b.schema();
    let mut encoders = schema
        .fields()
        .iter()
        .zip(b.columns())
        .map(|(f, c)| arrow::json::writer::make_encoder(f, c.as_ref(), &opts))
        .collect::<Result<Vec<_>, _>>()?;
    for r in 0..b.num_rows() {
        if std::mem::replace(&mut comma, true) {
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
    Ok(())
}
