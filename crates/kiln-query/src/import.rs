//! Reading CSV (with a header row), NDJSON and Parquet files into a table's
//! rows. A file is decoded completely before anything is written, then
//! committed in one step, so a bad file changes nothing. Errors name the
//! file, the line and the column.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Field, Schema, SchemaRef};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::error::{Error, Result};

/// Input file formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Csv,
    Ndjson,
    Parquet,
}

impl Format {
    /// The format named by a file's extension.
    pub fn from_path(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "csv" => Some(Format::Csv),
            "ndjson" | "jsonl" | "json" => Some(Format::Ndjson),
            "parquet" => Some(Format::Parquet),
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
    /// Rows from a format without lines: errors name rows.
    pub fn unlined(batches: Vec<RecordBatch>) -> Self {
        Self {
            batches,
            row_lines: None,
            first_line: 0,
            lines: false,
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

/// Rows per decoded batch.
pub const BATCH_ROWS: usize = 64 * 1024;

/// Decodes `path` for a table of schema `table`. Rows are checked against
/// the table (NOT NULL, casts) when written; this only parses.
pub fn decode(
    path: &Path,
    format: Format,
    table: &SchemaRef,
    progress: &dyn Fn(u64),
) -> Result<Decoded> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|e| Error::Io {
        context: format!("opening {name}"),
        source: e,
    })?;
    let reader = Progress {
        inner: file,
        read: 0,
        report: progress,
    };
    let res = match format {
        Format::Csv => decode_csv(reader, table),
        Format::Ndjson => decode_ndjson(reader, table),
        Format::Parquet => decode_parquet(path),
    };
    res.map_err(|msg| Error::Import { file: name, msg })
}

/// All table columns, nullable: NOT NULL is enforced later with the row named.
fn relaxed(fields: impl IntoIterator<Item = Arc<Field>>) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .into_iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}

/// Decodes CSV with a header row naming the table's columns (any order, any subset).
pub fn decode_csv(reader: impl Read, table: &SchemaRef) -> std::result::Result<Decoded, String> {
    let mut reader = BufReader::with_capacity(1 << 20, reader);
    let mut header = String::new();
    reader
        .read_line(&mut header)
        .map_err(|e| format!("line 1: {e}"))?;
    let header = header.trim_end_matches(['\n', '\r']);
    if header.is_empty() {
        return Err("line 1: missing header row".into());
    }
    let mut fields = vec![];
    for (i, name) in header.split(',').enumerate() {
        let name = name.trim().trim_matches('"');
        let field = table
            .field_with_name(name)
            .map_err(|_| format!("line 1, column {}: the table has no column '{name}'", i + 1))?;
        fields.push(Arc::new(field.clone()));
    }
    let schema = relaxed(fields);
    let csv = arrow::csv::ReaderBuilder::new(schema.clone())
        .with_header(false)
        .with_batch_size(BATCH_ROWS)
        .build_buffered(reader)
        .map_err(|e| e.to_string())?;
    let batches = csv
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| csv_error(&e.to_string(), &schema))?;
    Ok(Decoded {
        batches,
        row_lines: None,
        first_line: 1,
        lines: true,
    })
}

/// Rewrites arrow-csv's messages with file lines (the header is line 1)
/// and column names. arrow-csv counts data lines from 1 in structural errors
/// and from 0 (columns too) in value errors.
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

/// Decodes newline-delimited JSON objects, one row per non-blank line.
pub fn decode_ndjson(reader: impl Read, table: &SchemaRef) -> std::result::Result<Decoded, String> {
    let schema = relaxed(table.fields().iter().cloned());
    let mut decoder = arrow::json::ReaderBuilder::new(schema)
        .with_batch_size(BATCH_ROWS)
        .with_strict_mode(true)
        .build_decoder()
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::with_capacity(1 << 20, reader);
    let mut line = Vec::with_capacity(1024);
    let mut batches = vec![];
    let mut row_lines = vec![];
    let mut blank = false;
    let mut lineno = 0;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("line {}: {e}", lineno + 1))?;
        if n == 0 {
            break;
        }
        lineno += 1;
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            blank = true;
            continue;
        }
        let at = |e: arrow::error::ArrowError| format!("line {lineno}: {e}");
        std::str::from_utf8(&line).map_err(|e| {
            format!(
                "line {lineno}: invalid UTF-8 at byte {} of the line",
                e.valid_up_to() + 1
            )
        })?;
        let used = decoder.decode(&line).map_err(at)?;
        // A line holding two values, or a value cut short, is an error.
        if used < line.len() && !line[used..].iter().all(|b| b.is_ascii_whitespace()) {
            return Err(format!(
                "line {lineno}: more than one JSON value on the line"
            ));
        }
        decoder.decode(b"\n").map_err(at)?;
        row_lines.push(lineno);
        if decoder.len() >= BATCH_ROWS
            && let Some(b) = decoder.flush().map_err(at)?
        {
            batches.push(b);
        }
        if decoder.has_partial_record() {
            return Err(format!("line {lineno}: incomplete JSON value"));
        }
    }
    if let Some(b) = decoder.flush().map_err(|e| format!("line {lineno}: {e}"))? {
        batches.push(b);
    }
    Ok(Decoded {
        batches,
        row_lines: blank.then_some(row_lines),
        first_line: 0,
        lines: true,
    })
}

fn decode_parquet(path: &Path) -> std::result::Result<Decoded, String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| e.to_string())?
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| e.to_string())?;
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    Ok(Decoded::unlined(batches))
}

/// Counts bytes read, for a progress bar.
struct Progress<'a, R> {
    inner: R,
    read: u64,
    report: &'a dyn Fn(u64),
}

impl<R: Read> Read for Progress<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        (self.report)(self.read);
        Ok(n)
    }
}

/// Imports one file into `table` atomically. Returns rows written.
pub async fn import_file(
    db: &kiln_storage::Db,
    table: &str,
    path: &Path,
    format: Format,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<usize> {
    let t = db
        .table(table)
        .ok_or_else(|| kiln_storage::Error::TableNotFound(table.into()))?;
    let (p, schema) = (path.to_path_buf(), t.schema.clone());
    let decoded = tokio::task::block_in_place(|| decode(&p, format, &schema, progress))?;
    db.load(table, &decoded.batches)
        .await
        .map_err(|e| match e.bad_row() {
            Some((row, msg)) => Error::Import {
                file: path.display().to_string(),
                msg: format!("line {}: {msg}", decoded.line_of(row)),
            },
            None => e.into(),
        })
}
