//! CSV and NDJSON: the formats with lines, decoded with each row's line
//! kept so an error names it.

use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};

use super::{BATCH_ROWS, Decoded};

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
pub fn decode_csv(reader: impl Read, table: &SchemaRef) -> Result<Decoded, String> {
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
        .collect::<Result<Vec<_>, _>>()
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
pub fn decode_ndjson(reader: impl Read, table: &SchemaRef) -> Result<Decoded, String> {
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
