//! PostgreSQL's `COPY ... FROM STDIN` data: the text format (tab-separated,
//! `\N` for NULL, backslash escapes, `\.` to end) and CSV (optional quoting,
//! an empty unquoted field is NULL), as psql's `\copy`, psycopg's
//! `cursor.copy()` and JDBC's `CopyManager` send it.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema};

use super::Decoded;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyFormat {
    /// PostgreSQL's text format: tab-separated, `\N` for NULL, backslash escapes.
    Text,
    /// CSV with optional quoting; an empty unquoted field is NULL.
    Csv,
    /// PostgreSQL's binary format ([`super::copy_binary`]).
    Binary,
}

/// How a COPY's rows are laid out: its columns and its format options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyLayout {
    pub columns: Vec<String>,
    /// The columns' types in the table (the binary format is read by them).
    pub types: Vec<DataType>,
    pub format: CopyFormat,
    pub delimiter: u8,
    pub null: String,
    pub header: bool,
}

impl CopyLayout {
    /// The text format's defaults for `columns`: tab-separated, `\N` for NULL, no header.
    pub fn text(columns: Vec<String>) -> Self {
        Self {
            columns,
            types: vec![],
            format: CopyFormat::Text,
            delimiter: b'\t',
            null: "\\N".into(),
            header: false,
        }
    }

    /// Parses COPY data into one batch of text columns named as the
    /// columns (the write casts them to the table's types), each row's
    /// line kept for errors.
    pub fn decode(&self, data: &[u8]) -> Result<Decoded, String> {
        if self.format == CopyFormat::Binary {
            return super::copy_binary::decode(&self.columns, &self.types, data);
        }
        let (batch, lines) = decode(self, data)?;
        Ok(Decoded::with_lines(vec![batch], lines))
    }
}

fn decode(copy: &CopyLayout, data: &[u8]) -> Result<(RecordBatch, Vec<usize>), String> {
    let n = copy.columns.len();
    let mut builders: Vec<StringBuilder> = (0..n).map(|_| StringBuilder::new()).collect();
    let mut lines = vec![];
    let mut push = |line: usize, fields: &mut dyn Iterator<Item = Option<String>>| {
        let mut got = 0;
        for f in fields {
            if let Some(b) = builders.get_mut(got) {
                b.append_option(f);
            }
            got += 1;
        }
        if got != n {
            return Err(format!("line {line}: expected {n} columns, got {got}"));
        }
        lines.push(line);
        Ok(())
    };
    match copy.format {
        CopyFormat::Text => {
            let text = std::str::from_utf8(data)
                .map_err(|e| format!("byte {}: invalid UTF-8", e.valid_up_to()))?;
            let text = text.strip_suffix('\n').unwrap_or(text);
            for (i, line) in text.split('\n').enumerate() {
                let line = line.strip_suffix('\r').unwrap_or(line);
                if line == "\\." {
                    break;
                }
                if (i == 0 && copy.header) || text.is_empty() {
                    continue;
                }
                let fields = line
                    .split(copy.delimiter as char)
                    .map(|f| (f != copy.null).then(|| unescape(f)).transpose())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("line {}: {e}", i + 1))?;
                push(i + 1, &mut fields.into_iter())?;
            }
        }
        CopyFormat::Binary => unreachable!("decoded by copy_binary"),
        CopyFormat::Csv => {
            let mut reader = csv::ReaderBuilder::new()
                .delimiter(copy.delimiter)
                .has_headers(copy.header)
                .flexible(true)
                .from_reader(data);
            for record in reader.records() {
                let record = record.map_err(|e| match e.position() {
                    Some(p) => format!("line {}: {e}", p.line()),
                    None => e.to_string(),
                })?;
                if record.len() == 1 && record.get(0) == Some("\\.") {
                    break;
                }
                let line = record.position().map_or(0, |p| p.line() as usize);
                let mut fields = record
                    .iter()
                    .map(|f| (f != copy.null).then(|| f.to_string()));
                push(line, &mut fields)?;
            }
        }
    }
    let fields: Vec<Field> = copy
        .columns
        .iter()
        .map(|c| Field::new(c, DataType::Utf8, true))
        .collect();
    let arrays: Vec<ArrayRef> = builders
        .into_iter()
        .map(|mut b| Arc::new(b.finish()) as ArrayRef)
        .collect();
    let batch =
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).map_err(|e| e.to_string())?;
    Ok((batch, lines))
}

/// Undoes the text format's backslash escapes: `\t`, `\n`, `\\` and the
/// other letters, `\NNN` (one to three octal digits) and `\xHH` (one or
/// two hex digits) for a byte; the bytes must still be UTF-8.
fn unescape(field: &str) -> Result<String, String> {
    if !field.contains('\\') {
        return Ok(field.to_string());
    }
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    // Up to `max` digits of `radix` from `bytes[at..]`: (value, count).
    let digits = |at: usize, radix: u32, max: usize| {
        let mut value = 0u32;
        let mut n = 0;
        while n < max && at + n < bytes.len() {
            match (bytes[at + n] as char).to_digit(radix) {
                Some(d) => value = value * radix + d,
                None => break,
            }
            n += 1;
        }
        (value, n)
    };
    while i < bytes.len() {
        let b = bytes[i];
        i += 1;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let Some(&e) = bytes.get(i) else {
            out.push(b'\\');
            break;
        };
        i += 1;
        match e {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let (v, n) = digits(i - 1, 8, 3);
                out.push((v & 0xff) as u8);
                i += n - 1;
            }
            b'x' => match digits(i, 16, 2) {
                (_, 0) => out.push(b'x'),
                (v, n) => {
                    out.push(v as u8);
                    i += n;
                }
            },
            other => out.push(other),
        }
    }
    String::from_utf8(out).map_err(|_| format!("\"{field}\" is not valid UTF-8 once unescaped"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(format: CopyFormat, header: bool, data: &str) -> (CopyLayout, Vec<u8>) {
        let layout = CopyLayout {
            columns: vec!["a".into(), "b".into()],
            types: vec![],
            format,
            delimiter: if format == CopyFormat::Csv {
                b','
            } else {
                b'\t'
            },
            null: if format == CopyFormat::Csv { "" } else { "\\N" }.into(),
            header,
        };
        (layout, data.as_bytes().to_vec())
    }

    fn decode((layout, data): &(CopyLayout, Vec<u8>)) -> Result<(RecordBatch, Vec<usize>), String> {
        super::decode(layout, data)
    }

    fn column(batch: &RecordBatch, i: usize) -> Vec<Option<String>> {
        let a = batch
            .column(i)
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .unwrap();
        a.iter().map(|v| v.map(str::to_string)).collect()
    }

    #[test]
    fn text_format_nulls_escapes_and_end_marker() {
        let (b, lines) = decode(&copy(
            CopyFormat::Text,
            false,
            "1\tx\\ty\n2\t\\N\r\n3\ta\\\\b\n\\.\nignored\n",
        ))
        .unwrap();
        assert_eq!(
            column(&b, 0),
            [Some("1"), Some("2"), Some("3")].map(|v| v.map(String::from))
        );
        assert_eq!(
            column(&b, 1),
            [Some("x\ty"), None, Some("a\\b")].map(|v| v.map(String::from))
        );
        assert_eq!(lines, [1, 2, 3]);
    }

    #[test]
    fn octal_and_hex_escapes_are_bytes() {
        assert_eq!(unescape("\\101\\x41\\x4a\\7").unwrap(), "AAJ\u{7}");
        assert_eq!(unescape("caf\\303\\251").unwrap(), "café");
        assert_eq!(unescape("\\xg").unwrap(), "xg");
        let e = unescape("\\377").unwrap_err();
        assert!(e.contains("not valid UTF-8"), "{e}");
    }

    #[test]
    fn csv_format_header_quotes_and_lines() {
        let (b, lines) =
            decode(&copy(CopyFormat::Csv, true, "a,b\n1,\"two\nlines\"\n2,\n")).unwrap();
        assert_eq!(
            column(&b, 0),
            [Some("1"), Some("2")].map(|v| v.map(String::from))
        );
        assert_eq!(column(&b, 1), [Some("two\nlines".to_string()), None]);
        assert_eq!(lines, [2, 4]);
    }

    #[test]
    fn a_wrong_column_count_names_the_line() {
        let err = decode(&copy(CopyFormat::Text, false, "1\tx\n2\n")).unwrap_err();
        assert_eq!(err, "line 2: expected 2 columns, got 1");
        let err = decode(&copy(CopyFormat::Csv, false, "1,x\n2,y,z\n")).unwrap_err();
        assert_eq!(err, "line 2: expected 2 columns, got 3");
        let err = decode(&copy(CopyFormat::Text, false, "1\t\u{0}\u{ff}")).is_ok();
        assert!(err, "any valid UTF-8 is a value");
        let mut bad = copy(CopyFormat::Text, false, "");
        bad.1 = vec![b'1', b'\t', 0xff];
        assert_eq!(decode(&bad).unwrap_err(), "byte 2: invalid UTF-8");
    }
}
