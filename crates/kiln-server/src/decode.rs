//! Request bodies of `POST /v1/write/{table}` into Arrow batches. A body is
//! decompressed and decoded completely before anything is written, so a bad
//! body changes nothing; errors name the line (NDJSON, CSV) and column.
//!
//! The CSV and NDJSON decoding follows `kiln_query::import` (header mapped to
//! table columns, NDJSON fed to arrow-json line by line) but reads from memory
//! and keeps each row's line so storage errors can be reported by line too.

use std::io::{BufRead, Cursor, Read};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Field, Schema, SchemaRef};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::error::ApiError;

const BATCH_ROWS: usize = 64 * 1024;

/// Body formats, from `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFormat {
    Ndjson,
    Csv,
    ArrowStream,
    Parquet,
}

impl BodyFormat {
    pub fn from_content_type(ct: Option<&str>) -> Result<Self, ApiError> {
        let Some(ct) = ct else {
            return Err(ApiError::unsupported_media_type(
                "missing Content-Type (application/x-ndjson, text/csv, \
                 application/vnd.apache.arrow.stream, application/vnd.apache.parquet)",
            ));
        };
        let mime = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        Ok(match mime.as_str() {
            "application/x-ndjson"
            | "application/json"
            | "application/jsonl"
            | "application/x-jsonlines" => Self::Ndjson,
            "text/csv" => Self::Csv,
            "application/vnd.apache.arrow.stream" => Self::ArrowStream,
            "application/vnd.apache.parquet" | "application/x-parquet" => Self::Parquet,
            other => {
                return Err(ApiError::unsupported_media_type(format!(
                    "unsupported Content-Type '{other}' (application/x-ndjson, text/csv, \
                     application/vnd.apache.arrow.stream, application/vnd.apache.parquet)"
                )));
            }
        })
    }
}

/// `Content-Encoding` of a body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Identity,
    Gzip,
    Zstd,
}

impl Encoding {
    pub fn from_header(h: Option<&str>) -> Result<Self, ApiError> {
        match h.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") | Some("identity") => Ok(Self::Identity),
            Some("gzip") | Some("x-gzip") => Ok(Self::Gzip),
            Some("zstd") => Ok(Self::Zstd),
            Some(other) => Err(ApiError::unsupported_media_type(format!(
                "unsupported Content-Encoding '{other}' (gzip, zstd)"
            ))),
        }
    }
}

/// Decompresses `body`, refusing to produce more than `limit` bytes.
pub fn decompress(body: Bytes, enc: Encoding, limit: usize) -> Result<Bytes, ApiError> {
    let reader: Box<dyn Read> = match enc {
        Encoding::Identity => return Ok(body),
        Encoding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(Cursor::new(body))),
        Encoding::Zstd => Box::new(
            zstd::stream::read::Decoder::new(Cursor::new(body))
                .map_err(|e| ApiError::bad_input(format!("zstd: {e}")))?,
        ),
    };
    let mut out = Vec::new();
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| ApiError::bad_input(format!("cannot decompress the body: {e}")))?;
    if out.len() > limit {
        return Err(ApiError::too_large(limit));
    }
    Ok(out.into())
}

/// Decoded rows, plus the line of each row where the format has lines.
#[derive(Debug)]
pub struct Decoded {
    pub batches: Vec<RecordBatch>,
    row_lines: Option<Vec<usize>>,
    first_line: usize,
    lines: bool,
}

impl Decoded {
    pub fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }

    /// Where row `row` (1-based) came from, for error messages.
    pub fn locate(&self, row: usize) -> String {
        if !self.lines {
            return format!("row {row}");
        }
        let line = match &self.row_lines {
            Some(lines) => lines.get(row.wrapping_sub(1)).copied().unwrap_or(row),
            None => row + self.first_line,
        };
        format!("line {line}")
    }
}

/// Decodes a (decompressed) body for a table of schema `table`. Rows are
/// checked against the table (NOT NULL, casts) by the write; this only parses.
pub fn decode(body: Bytes, format: BodyFormat, table: &SchemaRef) -> Result<Decoded, ApiError> {
    match format {
        BodyFormat::Csv => decode_csv(&body, table),
        BodyFormat::Ndjson => decode_ndjson(&body, table),
        BodyFormat::ArrowStream => {
            let reader = arrow::ipc::reader::StreamReader::try_new(Cursor::new(body), None)
                .map_err(|e| ApiError::bad_input(format!("Arrow IPC stream: {e}")))?;
            let batches = reader
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ApiError::bad_input(format!("Arrow IPC stream: {e}")))?;
            Ok(unlined(batches))
        }
        BodyFormat::Parquet => {
            let reader = ParquetRecordBatchReaderBuilder::try_new(body)
                .and_then(|b| b.with_batch_size(BATCH_ROWS).build())
                .map_err(|e| ApiError::bad_input(format!("Parquet: {e}")))?;
            let batches = reader
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ApiError::bad_input(format!("Parquet: {e}")))?;
            Ok(unlined(batches))
        }
    }
}

fn unlined(batches: Vec<RecordBatch>) -> Decoded {
    Decoded {
        batches,
        row_lines: None,
        first_line: 0,
        lines: false,
    }
}

/// All table columns, nullable: NOT NULL is enforced by the write with the row named.
fn relaxed(fields: impl IntoIterator<Item = Arc<Field>>) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .into_iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}

fn decode_csv(body: &[u8], table: &SchemaRef) -> Result<Decoded, ApiError> {
    let mut reader = Cursor::new(body);
    let mut header = String::new();
    reader
        .read_line(&mut header)
        .map_err(|e| ApiError::bad_input(format!("line 1: {e}")))?;
    let header = header.trim_end_matches(['\n', '\r']);
    if header.is_empty() {
        return Err(ApiError::bad_input("line 1: missing header row"));
    }
    let mut fields = vec![];
    for (i, name) in header.split(',').enumerate() {
        let name = name.trim().trim_matches('"');
        let field = table.field_with_name(name).map_err(|_| {
            ApiError::bad_input(format!(
                "line 1, column {}: the table has no column '{name}'",
                i + 1
            ))
        })?;
        fields.push(Arc::new(field.clone()));
    }
    let schema = relaxed(fields);
    let csv = arrow::csv::ReaderBuilder::new(schema.clone())
        .with_header(false)
        .with_batch_size(BATCH_ROWS)
        .build_buffered(reader)
        .map_err(|e| ApiError::bad_input(e.to_string()))?;
    let batches = csv
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ApiError::bad_input(csv_error(&e.to_string(), &schema)))?;
    Ok(Decoded {
        batches,
        row_lines: None,
        first_line: 1,
        lines: true,
    })
}

/// Rewrites arrow-csv's messages with body lines (the header is line 1) and
/// column names, as `kiln import` does for files.
fn csv_error(msg: &str, schema: &SchemaRef) -> String {
    let num_after = |key: &str| -> Option<usize> {
        let at = msg.find(key)? + key.len();
        msg[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    let (line, col) = if msg.contains("incorrect number of fields") {
        (num_after("line ").map(|l| l + 1), None)
    } else if msg.contains("invalid UTF-8") {
        (
            num_after("line ").map(|l| l + 1),
            num_after("field ").map(|f| f.saturating_sub(1)),
        )
    } else {
        (num_after("at line ").map(|l| l + 2), num_after("column "))
    };
    match (line, col.and_then(|c| schema.fields().get(c))) {
        (Some(l), Some(c)) => format!("line {l}, column '{}': {msg}", c.name()),
        (Some(l), None) => format!("line {l}: {msg}"),
        _ => msg.to_string(),
    }
}

fn decode_ndjson(body: &[u8], table: &SchemaRef) -> Result<Decoded, ApiError> {
    let schema = relaxed(table.fields().iter().cloned());
    let mut decoder = arrow::json::ReaderBuilder::new(schema)
        .with_batch_size(BATCH_ROWS)
        .with_strict_mode(true)
        .build_decoder()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let mut batches = vec![];
    let mut row_lines = vec![];
    let mut blank = false;
    let mut lineno = 0;
    for line in body.split_inclusive(|&b| b == b'\n') {
        lineno += 1;
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            blank = true;
            continue;
        }
        let at = |e: arrow::error::ArrowError| ApiError::bad_input(format!("line {lineno}: {e}"));
        std::str::from_utf8(line).map_err(|e| {
            ApiError::bad_input(format!(
                "line {lineno}: invalid UTF-8 at byte {} of the line",
                e.valid_up_to() + 1
            ))
        })?;
        let used = decoder.decode(line).map_err(at)?;
        if used < line.len() && !line[used..].iter().all(|b| b.is_ascii_whitespace()) {
            return Err(ApiError::bad_input(format!(
                "line {lineno}: more than one JSON value on the line"
            )));
        }
        decoder.decode(b"\n").map_err(at)?;
        row_lines.push(lineno);
        if decoder.len() >= BATCH_ROWS
            && let Some(b) = decoder.flush().map_err(at)?
        {
            batches.push(b);
        }
        if decoder.has_partial_record() {
            return Err(ApiError::bad_input(format!(
                "line {lineno}: incomplete JSON value"
            )));
        }
    }
    if let Some(b) = decoder
        .flush()
        .map_err(|e| ApiError::bad_input(format!("line {lineno}: {e}")))?
    {
        batches.push(b);
    }
    Ok(Decoded {
        batches,
        row_lines: blank.then_some(row_lines),
        first_line: 0,
        lines: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::DataType;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]))
    }

    #[test]
    fn ndjson_error_names_the_line() {
        let body = Bytes::from_static(b"{\"id\":1}\n\n{\"id\":\"x\"}\n");
        let err = decode(body, BodyFormat::Ndjson, &schema()).unwrap_err();
        assert!(err.message.starts_with("line 3:"), "{}", err.message);
    }

    #[test]
    fn csv_and_gzip_round_trip() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"name,id\na,1\nb,2\n").unwrap();
        let body = decompress(gz.finish().unwrap().into(), Encoding::Gzip, 1 << 20).unwrap();
        let d = decode(body, BodyFormat::Csv, &schema()).unwrap();
        assert_eq!(d.rows(), 2);
        assert_eq!(d.locate(2), "line 3");
    }

    #[test]
    fn decompression_is_bounded() {
        let big = zstd::encode_all(&vec![b'a'; 10_000][..], 3).unwrap();
        let err = decompress(big.into(), Encoding::Zstd, 1000).unwrap_err();
        assert_eq!(err.status.as_u16(), 413);
    }
}
