//! Ingestion: bytes in the formats Kiln accepts, decoded into a table's
//! rows, for every way rows come in: HTTP write bodies (NDJSON, CSV,
//! Arrow IPC stream, Parquet; gzip or zstd), PostgreSQL `COPY ... FROM
//! STDIN` (text, CSV: [`copy`]) and `kiln import` files ([`file`]).
//!
//! Why one module: the same format must be read the same way and fail with
//! the same message whichever door it came in by. Input is decoded
//! completely before anything is written, then committed in one step, so
//! bad input changes nothing; errors name the line and column (or the row
//! or byte offset where a format has no lines). Decoding only parses: rows
//! are checked against the table (NOT NULL, casts) when written.

use std::io::{Cursor, Read};
use std::path::Path;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use kiln_storage::TimestampUnit;

pub mod copy;
pub mod copy_binary;
pub mod file;
mod parquet;
mod text;

pub use file::import_file;
pub use text::{decode_csv, decode_ndjson};

/// Formats of rows coming in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// CSV with a header row naming the table's columns.
    Csv,
    /// Newline-delimited JSON objects.
    Ndjson,
    /// An Arrow IPC stream.
    ArrowStream,
    Parquet,
}

impl Format {
    /// The format's label in metrics and messages.
    pub fn label(self) -> &'static str {
        match self {
            Self::Ndjson => "ndjson",
            Self::Csv => "csv",
            Self::ArrowStream => "arrowstream",
            Self::Parquet => "parquet",
        }
    }

    /// The format of a media type (`Content-Type` without parameters).
    pub fn from_mime(mime: &str) -> Option<Self> {
        Some(match mime {
            "application/x-ndjson"
            | "application/json"
            | "application/jsonl"
            | "application/x-jsonlines" => Self::Ndjson,
            "text/csv" => Self::Csv,
            "application/vnd.apache.arrow.stream" => Self::ArrowStream,
            "application/vnd.apache.parquet" | "application/x-parquet" => Self::Parquet,
            _ => return None,
        })
    }

    /// The format named by a file's extension.
    pub fn from_path(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "csv" => Some(Format::Csv),
            "ndjson" | "jsonl" | "json" => Some(Format::Ndjson),
            "parquet" => Some(Format::Parquet),
            "arrow" | "arrows" => Some(Format::ArrowStream),
            _ => None,
        }
    }

    /// Parses a `--format` value.
    pub fn parse(s: &str) -> Option<Self> {
        Self::from_path(Path::new(&format!("x.{s}")))
    }
}

/// Decoded rows of a file or request body, plus how to turn a row number
/// into a line number.
#[derive(Debug)]
pub struct Decoded {
    pub batches: Vec<RecordBatch>,
    /// Line of each row when lines and rows do not line up (NDJSON with blank lines).
    row_lines: Option<Vec<usize>>,
    /// Lines before the first row (the CSV header).
    first_line: usize,
    /// Whether the format has lines at all (not Arrow IPC or Parquet).
    lines: bool,
}

impl Decoded {
    /// The bytes the rows take once cast to the table's types (`table`),
    /// before they are: a dictionary column's values once for each row
    /// referring to them, a column of no values (Arrow's `Null` type) or a
    /// table column the body leaves out as wide as a table value, other
    /// columns their buffers.
    ///
    /// Why: the body's size does not bound them. A dictionary of one
    /// 500 KB string that 2,000 rows refer to is an 838-byte Parquet file
    /// and 1 GB once cast; a `Null` column of 2^31 rows is a 224-byte
    /// Arrow stream and 17 GB once cast.
    pub fn bytes_in(&self, table: &SchemaRef) -> u64 {
        self.batches
            .iter()
            .map(|b| batch_bytes(b, table))
            .fold(0, u64::saturating_add)
    }

    /// Rows from a format without lines: errors name rows.
    pub fn unlined(batches: Vec<RecordBatch>) -> Self {
        Self {
            batches,
            row_lines: None,
            first_line: 0,
            lines: false,
        }
    }

    /// Rows with the line each one started on (`lines[i]`: row i + 1's).
    pub fn with_lines(batches: Vec<RecordBatch>, lines: Vec<usize>) -> Self {
        Self {
            batches,
            row_lines: Some(lines),
            first_line: 0,
            lines: true,
        }
    }

    /// Where row `row` (1-based) came from, for error messages: `line N` or `row N`.
    pub fn locate(&self, row: usize) -> String {
        if self.lines {
            format!("line {}", self.line_of(row))
        } else {
            format!("row {row}")
        }
    }

    /// Line number (1-based) of row `row` (1-based).
    pub fn line_of(&self, row: usize) -> usize {
        match &self.row_lines {
            Some(lines) => lines.get(row.wrapping_sub(1)).copied().unwrap_or(row),
            None => row + self.first_line,
        }
    }

    pub fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}

/// What [`Decoded::bytes_in`] counts, for one batch: what the storage
/// layer reserves for it when it is written.
fn batch_bytes(b: &RecordBatch, table: &SchemaRef) -> u64 {
    kiln_storage::budget::footprint(b, table)
}

/// Why a body was not decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// It is not valid in its format; the message names where.
    Invalid(String),
    /// Its rows would take more than [`Options::max_row_bytes`] once cast
    /// to the table's types: `bytes` of them, or of the part read before
    /// decoding stopped.
    TooLarge { bytes: u64 },
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid(msg) => f.write_str(msg),
            Self::TooLarge { bytes } => {
                write!(f, "the rows would take at least {bytes} bytes once decoded")
            }
        }
    }
}

impl From<String> for Refused {
    fn from(msg: String) -> Self {
        Self::Invalid(msg)
    }
}

/// Rows per decoded batch.
pub const BATCH_ROWS: usize = 64 * 1024;

/// How to read a body.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The unit of integer timestamps in text formats; without one they
    /// are refused.
    pub timestamp_unit: Option<TimestampUnit>,
    /// Most bytes a body may declare it decodes to (compressed Arrow IPC
    /// buffers state their size before they are inflated).
    pub max_bytes: usize,
    /// Most bytes the rows may take once cast to the table's types
    /// ([`Decoded::bytes_in`]). Parquet is checked while it is read (a
    /// small file can hold rows of any size); every format once decoded.
    pub max_row_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            timestamp_unit: None,
            max_bytes: usize::MAX,
            max_row_bytes: usize::MAX,
        }
    }
}

/// Decodes `body` (already decompressed) in `format` for a table of schema
/// `table`.
pub fn decode(
    body: Bytes,
    format: Format,
    table: &SchemaRef,
    opts: &Options,
) -> Result<Decoded, Refused> {
    let len = body.len() as u64;
    let decoded = match format {
        Format::Csv => decode_csv(Cursor::new(body), len, table, opts.timestamp_unit)?,
        Format::Ndjson => decode_ndjson(Cursor::new(body), len, table, opts.timestamp_unit)?,
        Format::ArrowStream => Decoded::unlined(kiln_storage::ipc::decode(body, opts.max_bytes)?),
        Format::Parquet => parquet::decode(body, table, opts.max_row_bytes)?,
    };
    let bytes = decoded.bytes_in(table);
    if bytes > opts.max_row_bytes as u64 {
        return Err(Refused::TooLarge { bytes });
    }
    Ok(decoded)
}

/// A body's `Content-Encoding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Identity,
    Gzip,
    Zstd,
}

/// Why a body could not be decompressed.
#[derive(Debug, PartialEq, Eq)]
pub enum Decompress {
    /// It would be larger than the limit.
    TooLarge,
    /// It is not valid in its encoding.
    Invalid(String),
}

/// Decompresses `body`, refusing to produce more than `limit` bytes.
pub fn decompress(body: Bytes, enc: Encoding, limit: usize) -> Result<Bytes, Decompress> {
    let reader: Box<dyn Read> = match enc {
        Encoding::Identity => return Ok(body),
        Encoding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(Cursor::new(body))),
        Encoding::Zstd => Box::new(
            zstd::stream::read::Decoder::new(Cursor::new(body))
                .map_err(|e| Decompress::Invalid(format!("zstd: {e}")))?,
        ),
    };
    let mut out = Vec::new();
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| Decompress::Invalid(format!("cannot decompress the body: {e}")))?;
    if out.len() > limit {
        return Err(Decompress::TooLarge);
    }
    Ok(out.into())
}

#[cfg(test)]
mod tests;
