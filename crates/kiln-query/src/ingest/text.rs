//! CSV and NDJSON: the formats with lines, decoded with each row's line
//! kept so an error names it.
//!
//! Numbers and timestamps are read as text and converted exactly by
//! [`kiln_storage::strict`] (the Arrow readers round fractions into
//! integers, overflow into infinity and guess timestamp units). A CSV
//! starting with a UTF-8 byte-order mark is read without it; a duplicate
//! header column or a quote never closed is an error, not a dropped column
//! or a swallowed row.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use kiln_storage::TimestampUnit;
use kiln_storage::strict;

use super::{BATCH_ROWS, Decoded};

/// Deepest nesting of arrays and objects an NDJSON line may have (Kiln's
/// columns are scalars; a deeper value is refused before it is parsed).
pub const MAX_JSON_DEPTH: usize = 64;

/// All table columns, nullable: NOT NULL is enforced later with the row
/// named. Columns [`strict`] converts are read as text.
fn relaxed(fields: impl IntoIterator<Item = Arc<Field>>) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .into_iter()
            .map(|f| {
                let ty = match strict::reads_as_text(f.data_type()) {
                    true => DataType::Utf8,
                    false => f.data_type().clone(),
                };
                f.as_ref().clone().with_nullable(true).with_data_type(ty)
            })
            .collect::<Vec<_>>(),
    ))
}

/// Converts the text columns of `decoded` (read by a [`relaxed`] schema)
/// to the `table`'s types, naming the line and column of the first value
/// that does not fit.
fn typed(
    mut decoded: Decoded,
    table: &SchemaRef,
    unit: Option<TimestampUnit>,
) -> Result<Decoded, String> {
    let mut first_row = 0;
    let mut batches = Vec::with_capacity(decoded.batches.len());
    for batch in std::mem::take(&mut decoded.batches) {
        let schema = batch.schema();
        let mut fields = Vec::with_capacity(schema.fields().len());
        let mut columns = Vec::with_capacity(schema.fields().len());
        for (field, col) in schema.fields().iter().zip(batch.columns()) {
            let ty = table
                .field_with_name(field.name())
                .map_err(|e| e.to_string())?
                .data_type();
            if strict::reads_as_text(ty) && col.data_type() == &DataType::Utf8 {
                let converted = strict::convert(col.as_string::<i32>(), ty, unit).map_err(|u| {
                    format!(
                        "{}, column '{}': {}",
                        decoded.locate(first_row + u.row + 1),
                        field.name(),
                        u.msg
                    )
                })?;
                columns.push(converted);
                fields.push(field.as_ref().clone().with_data_type(ty.clone()));
            } else {
                columns.push(col.clone());
                fields.push(field.as_ref().clone());
            }
        }
        first_row += batch.num_rows();
        batches.push(
            RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
                .map_err(|e| e.to_string())?,
        );
    }
    decoded.batches = batches;
    Ok(decoded)
}

/// Rows per decoded batch of a text input of `bytes` bytes: [`BATCH_ROWS`],
/// fewer for a small input. Arrow's decoders reserve a whole batch up
/// front (the JSON tape about 400 bytes a row of a dozen columns, CSV
/// offsets zero-filled), so a request of 100 rows decoded in batches of
/// 65,536 mapped, faulted in and unmapped megabytes each time, costing
/// more than the decoding and interrupting every core to unmap. A row takes
/// at least [`MIN_TEXT_ROW_BYTES`] in any realistic input; one of shorter
/// rows is decoded in more batches, not refused.
fn batch_rows(bytes: u64) -> usize {
    let rows = usize::try_from(bytes / MIN_TEXT_ROW_BYTES).unwrap_or(usize::MAX);
    rows.clamp(1024, BATCH_ROWS)
}

/// Input bytes per row [`batch_rows`] assumes.
pub(super) const MIN_TEXT_ROW_BYTES: u64 = 32;

/// The read buffer for a text input of `bytes` bytes: at most 1 MiB, and
/// no larger than the input.
fn buffer_bytes(bytes: u64) -> usize {
    bytes.clamp(8 << 10, 1 << 20) as usize
}

/// Decodes CSV of `bytes` bytes (a size for its buffers; any length
/// reads right) with a header row naming the table's columns (any order,
/// any subset); integer timestamps are read in `unit`.
pub fn decode_csv(
    reader: impl Read,
    bytes: u64,
    table: &SchemaRef,
    unit: Option<TimestampUnit>,
) -> Result<Decoded, String> {
    let mut quotes = Quotes::new(reader);
    let mut reader = BufReader::with_capacity(buffer_bytes(bytes), &mut quotes);
    let mut header = String::new();
    reader
        .read_line(&mut header)
        .map_err(|e| format!("line 1: {e}"))?;
    let header = header.trim_end_matches(['\n', '\r']);
    let header = header.strip_prefix('\u{feff}').unwrap_or(header);
    if header.is_empty() {
        return Err("line 1: missing header row".into());
    }
    let mut fields = vec![];
    let mut seen = HashSet::new();
    for (i, name) in header.split(',').enumerate() {
        let name = name.trim().trim_matches('"');
        let field = table
            .field_with_name(name)
            .map_err(|_| format!("line 1, column {}: the table has no column '{name}'", i + 1))?;
        if !seen.insert(name) {
            return Err(format!(
                "line 1, column {}: column '{name}' appears twice in the header",
                i + 1
            ));
        }
        fields.push(Arc::new(field.clone()));
    }
    let schema = relaxed(fields);
    let csv = arrow::csv::ReaderBuilder::new(schema.clone())
        .with_header(false)
        .with_batch_size(batch_rows(bytes))
        .build_buffered(reader)
        .map_err(|e| e.to_string())?;
    let batches = csv
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| csv_error(&e.to_string(), &schema))?;
    if let Some(line) = quotes.unclosed() {
        return Err(format!(
            "line {line}: a quoted field is never closed (a missing '\"' would join the lines after it into one value)"
        ));
    }
    let decoded = Decoded {
        batches,
        row_lines: None,
        first_line: 1,
        lines: true,
    };
    typed(decoded, table, unit)
}

/// Follows CSV quoting over the bytes read through it, to tell whether the
/// input ended inside a quoted field (which the CSV reader accepts as a
/// value running to the end of the input).
struct Quotes<R> {
    inner: R,
    state: QuoteState,
    line: usize,
    opened: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum QuoteState {
    FieldStart,
    Unquoted,
    Quoted,
    /// A quote inside a quoted field: the end of it, or the first of `""`.
    QuoteInQuoted,
}

impl<R> Quotes<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            state: QuoteState::FieldStart,
            line: 1,
            opened: 0,
        }
    }

    /// The line of a quote still open at the end of the input.
    fn unclosed(&self) -> Option<usize> {
        (self.state == QuoteState::Quoted).then_some(self.opened)
    }

    fn scan(&mut self, bytes: &[u8]) {
        use QuoteState::*;
        for &b in bytes {
            if b == b'\n' {
                self.line += 1;
            }
            self.state = match (self.state, b) {
                (Quoted, b'"') => QuoteInQuoted,
                (Quoted, _) => Quoted,
                (FieldStart, b'"') => {
                    self.opened = self.line;
                    Quoted
                }
                (QuoteInQuoted, b'"') => Quoted,
                (_, b',' | b'\n') => FieldStart,
                _ => Unquoted,
            };
        }
    }
}

impl<R: Read> Read for Quotes<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.scan(&buf[..n]);
        Ok(n)
    }
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

/// Decodes newline-delimited JSON objects of `bytes` bytes (a size for its
/// buffers; any length reads right), one row per non-blank line; integer
/// timestamps are read in `unit`.
pub fn decode_ndjson(
    reader: impl Read,
    bytes: u64,
    table: &SchemaRef,
    unit: Option<TimestampUnit>,
) -> Result<Decoded, String> {
    let schema = relaxed(table.fields().iter().cloned());
    let batch = batch_rows(bytes);
    let mut decoder = arrow::json::ReaderBuilder::new(schema)
        .with_batch_size(batch)
        .with_strict_mode(true)
        .with_coerce_primitive(true)
        .build_decoder()
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::with_capacity(buffer_bytes(bytes), reader);
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
        if nesting(&line) > MAX_JSON_DEPTH {
            return Err(format!(
                "line {lineno}: JSON nested deeper than {MAX_JSON_DEPTH} levels"
            ));
        }
        let used = decoder.decode(&line).map_err(at)?;
        // A line holding two values, or a value cut short, is an error.
        if used < line.len() && !line[used..].iter().all(|b| b.is_ascii_whitespace()) {
            return Err(format!(
                "line {lineno}: more than one JSON value on the line"
            ));
        }
        decoder.decode(b"\n").map_err(at)?;
        row_lines.push(lineno);
        if decoder.len() >= batch
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
    let decoded = Decoded {
        batches,
        row_lines: blank.then_some(row_lines),
        first_line: 0,
        lines: true,
    };
    typed(decoded, table, unit)
}

/// How deeply arrays and objects nest in one JSON line (0 when the line
/// cannot be deeper than [`MAX_JSON_DEPTH`]: the common case costs one count).
fn nesting(line: &[u8]) -> usize {
    let opens = line.iter().filter(|&&b| b == b'[' || b == b'{').count();
    if opens <= MAX_JSON_DEPTH {
        return 0;
    }
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0, false, false);
    for &b in line {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}
