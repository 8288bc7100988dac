//! Request bodies of `POST /v1/write/{table}` into Arrow batches. A body is
//! decompressed and decoded completely before anything is written, so a bad
//! body changes nothing; errors name the line (NDJSON, CSV) and column.
//!
//! The CSV and NDJSON decoding follows `kiln_query::import` (header mapped to
//! table columns, NDJSON fed to arrow-json line by line) but reads from memory
//! and keeps each row's line so storage errors can be reported by line too.

use std::io::{Cursor, Read};

use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

pub use kiln_query::import::Decoded;
use kiln_query::import::{BATCH_ROWS, decode_csv, decode_ndjson};

use crate::error::ApiError;

/// Body formats, from `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFormat {
    Ndjson,
    Csv,
    ArrowStream,
    Parquet,
}

impl BodyFormat {
    /// The `format` label of the write metrics (one of `metrics::FORMATS`).
    pub fn label(self) -> &'static str {
        match self {
            Self::Ndjson => "ndjson",
            Self::Csv => "csv",
            Self::ArrowStream => "arrowstream",
            Self::Parquet => "parquet",
        }
    }

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

/// Decodes a (decompressed) body for a table of schema `table`. Rows are
/// checked against the table (NOT NULL, casts) by the write; this only parses.
pub fn decode(body: Bytes, format: BodyFormat, table: &SchemaRef) -> Result<Decoded, ApiError> {
    match format {
        BodyFormat::Csv => decode_csv(Cursor::new(body), table).map_err(ApiError::bad_input),
        BodyFormat::Ndjson => decode_ndjson(Cursor::new(body), table).map_err(ApiError::bad_input),
        BodyFormat::ArrowStream => {
            let reader = arrow::ipc::reader::StreamReader::try_new(Cursor::new(body), None)
                .map_err(|e| ApiError::bad_input(format!("Arrow IPC stream: {e}")))?;
            let batches = reader
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ApiError::bad_input(format!("Arrow IPC stream: {e}")))?;
            Ok(Decoded::unlined(batches))
        }
        BodyFormat::Parquet => {
            let reader = ParquetRecordBatchReaderBuilder::try_new(body)
                .and_then(|b| b.with_batch_size(BATCH_ROWS).build())
                .map_err(|e| ApiError::bad_input(format!("Parquet: {e}")))?;
            let batches = reader
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ApiError::bad_input(format!("Parquet: {e}")))?;
            Ok(Decoded::unlined(batches))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};

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
