//! `COPY table [(columns)] FROM STDIN [WITH (FORMAT text | csv, HEADER,
//! DELIMITER 'c', NULL 's')]` over the simple query protocol: psql's
//! `\copy ... from`, psycopg's `cursor.copy()`, JDBC's `CopyManager`.
//!
//! The statement is answered with CopyInResponse; the data that follows is
//! buffered (at most `--max-body-bytes`) until CopyDone, then written as one
//! atomic write through the WAL, like an HTTP write: every row or none, and
//! an error names the line (and the column). Values arrive as text and are
//! cast to the table's types by the storage layer's checks. The COPY is one
//! query at the engine's door, from its statement to its write.

use std::fmt::Debug;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema};
use async_trait::async_trait;
use datafusion::sql::sqlparser::ast::{
    CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, CopyTarget, Ident, Statement,
};
use datafusion_postgres::pgwire::api::ClientInfo;
use datafusion_postgres::pgwire::api::copy::CopyHandler;
use datafusion_postgres::pgwire::api::results::{CopyResponse, Response, Tag};
use datafusion_postgres::pgwire::error::{PgWireError, PgWireResult};
use datafusion_postgres::pgwire::messages::PgWireBackendMessage;
use datafusion_postgres::pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use futures::{Sink, SinkExt};
use kiln_query::{Engine, Origin, Query};

use crate::error::ApiError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// PostgreSQL's text format: tab-separated, `\N` for NULL, backslash escapes.
    Text,
    /// CSV with optional quoting; an empty unquoted field is NULL.
    Csv,
}

/// A COPY FROM STDIN between its statement and CopyDone.
pub(crate) struct CopyIn {
    /// The registered query; `None` in unit tests of the decoder.
    query: Option<Query>,
    table: String,
    columns: Vec<String>,
    format: Format,
    delimiter: u8,
    null: String,
    header: bool,
    data: Vec<u8>,
    limit: usize,
    too_large: bool,
}

/// The connection's COPY in progress, kept in its session extensions.
#[derive(Default)]
struct Pending(parking_lot::Mutex<Option<CopyIn>>);

/// Answers a `COPY ... FROM STDIN` statement (None: not a COPY): checks the
/// table, columns and options, and leaves the copy pending on `client`.
pub(crate) async fn start(
    stmt: &Statement,
    engine: &Engine,
    limit: usize,
    client: &(dyn ClientInfo + Send + Sync),
) -> Option<PgWireResult<Response>> {
    let Statement::Copy {
        source,
        to,
        target,
        options,
        legacy_options,
        ..
    } = stmt
    else {
        return None;
    };
    let copy = parse(source, *to, target, options, legacy_options, engine, limit);
    let pid = client.pid_and_secret_key().0;
    Some(match copy {
        Ok(mut copy) => {
            match engine.begin(Origin::pg(pid), &stmt.to_string()).await {
                Ok(q) => copy.query = Some(q),
                Err(e) => return Some(Err(ApiError::from(e).to_pg())),
            }
            let columns = copy.columns.len();
            let pending = client
                .session_extensions()
                .get_or_insert_with(Pending::default);
            *pending.0.lock() = Some(copy);
            Ok(Response::CopyIn(CopyResponse::new(
                0,
                columns,
                futures::stream::empty(),
            )))
        }
        Err(e) => Err(e.to_pg()),
    })
}

/// A table or column name as PostgreSQL folds it: lower case unless quoted.
fn fold(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_ascii_lowercase(),
    }
}

fn parse(
    source: &CopySource,
    to: bool,
    target: &CopyTarget,
    options: &[CopyOption],
    legacy: &[CopyLegacyOption],
    engine: &Engine,
    limit: usize,
) -> Result<CopyIn, ApiError> {
    let bad = |m: &str| Err(ApiError::bad_input(m.to_string()));
    if to {
        return bad("COPY ... TO is not supported; run a SELECT instead");
    }
    let CopySource::Table {
        table_name,
        columns,
    } = source
    else {
        return bad("COPY FROM needs a table");
    };
    if !matches!(target, CopyTarget::Stdin) {
        return bad("only COPY ... FROM STDIN is supported: the server reads no files");
    }
    let Some(name) = table_name.0.last().and_then(|p| p.as_ident()).map(fold) else {
        return bad("COPY FROM needs a table name");
    };
    let Some(table) = engine.db().table(&name) else {
        return Err(ApiError::from(kiln_storage::Error::TableNotFound(name)));
    };
    let columns: Vec<String> = if columns.is_empty() {
        table
            .schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    } else {
        columns.iter().map(fold).collect()
    };
    for c in &columns {
        if table.schema.field_with_name(c).is_err() {
            return Err(ApiError::bad_input(format!(
                "table '{name}' has no column '{c}'"
            )));
        }
    }
    let mut copy = CopyIn {
        query: None,
        table: name,
        columns,
        format: Format::Text,
        delimiter: b'\t',
        null: "\\N".into(),
        header: false,
        data: vec![],
        limit,
        too_large: false,
    };
    let (mut delimiter, mut null) = (None, None);
    for o in options {
        match o {
            CopyOption::Format(f) => match f.value.to_ascii_lowercase().as_str() {
                "text" => copy.format = Format::Text,
                "csv" => copy.format = Format::Csv,
                other => {
                    return Err(ApiError::bad_input(format!(
                        "COPY format '{other}' is not supported (text, csv)"
                    )));
                }
            },
            CopyOption::Header(h) => copy.header = *h,
            CopyOption::Delimiter(d) => delimiter = Some(*d),
            CopyOption::Null(n) => null = Some(n.clone()),
            CopyOption::Encoding(e) if e.eq_ignore_ascii_case("utf8") => {}
            CopyOption::Encoding(e) if e.eq_ignore_ascii_case("utf-8") => {}
            other => {
                return Err(ApiError::bad_input(format!(
                    "COPY option {other} is not supported"
                )));
            }
        }
    }
    // The pre-9.0 syntax psql's \copy still sends: `FROM STDIN csv header`.
    for o in legacy {
        match o {
            CopyLegacyOption::Csv(opts) => {
                copy.format = Format::Csv;
                for c in opts {
                    match c {
                        CopyLegacyCsvOption::Header => copy.header = true,
                        other => {
                            return Err(ApiError::bad_input(format!(
                                "COPY option {other} is not supported"
                            )));
                        }
                    }
                }
            }
            CopyLegacyOption::Header => copy.header = true,
            CopyLegacyOption::Delimiter(d) => delimiter = Some(*d),
            CopyLegacyOption::Null(n) => null = Some(n.clone()),
            other => {
                return Err(ApiError::bad_input(format!(
                    "COPY option {other} is not supported"
                )));
            }
        }
    }
    if copy.format == Format::Csv {
        copy.delimiter = b',';
        copy.null = String::new();
    }
    if let Some(d) = delimiter {
        if !d.is_ascii() || d == '\n' || d == '\r' {
            return bad("COPY delimiter must be one ASCII character other than a newline");
        }
        copy.delimiter = d as u8;
    }
    if let Some(n) = null {
        copy.null = n;
    }
    Ok(copy)
}

/// Parses the buffered data into one batch of text columns named as the
/// COPY's columns, plus the line each row started on.
fn decode(copy: &CopyIn) -> Result<(RecordBatch, Vec<usize>), String> {
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
        Format::Text => {
            let text = std::str::from_utf8(&copy.data)
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
                let mut fields = line
                    .split(copy.delimiter as char)
                    .map(|f| (f != copy.null).then(|| unescape(f)));
                push(i + 1, &mut fields)?;
            }
        }
        Format::Csv => {
            let mut reader = csv::ReaderBuilder::new()
                .delimiter(copy.delimiter)
                .has_headers(copy.header)
                .flexible(true)
                .from_reader(copy.data.as_slice());
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

/// Undoes the text format's backslash escapes (`\t`, `\n`, `\\`, ...).
fn unescape(field: &str) -> String {
    if !field.contains('\\') {
        return field.to_string();
    }
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('v') => out.push('\u{b}'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// Receives COPY data for the connections' pending copies.
pub(crate) struct KilnCopy {
    pub(crate) engine: Arc<Engine>,
}

fn pending<C: ClientInfo>(client: &C) -> Option<CopyIn> {
    client
        .session_extensions()
        .get::<Pending>()?
        .0
        .lock()
        .take()
}

#[async_trait]
impl CopyHandler for KilnCopy {
    async fn on_copy_data<C>(&self, client: &mut C, data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Some(p) = client.session_extensions().get::<Pending>()
            && let Some(copy) = p.0.lock().as_mut()
        {
            if copy.data.len() + data.data.len() > copy.limit {
                copy.too_large = true;
                copy.data = vec![];
            } else if !copy.too_large {
                copy.data.extend_from_slice(&data.data);
            }
        }
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let Some(copy) = pending(client) else {
            return Err(ApiError::bad_input("COPY data without a COPY statement").to_pg());
        };
        let rows = self.finish(copy).await.map_err(|e| e.to_pg())?;
        let tag = Tag::new("COPY").with_rows(rows);
        client
            .send(PgWireBackendMessage::CommandComplete(tag.into()))
            .await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        pending(client);
        ApiError::bad_input(format!("COPY cancelled by the client: {}", fail.message)).to_pg()
    }
}

impl KilnCopy {
    /// Decodes and writes a finished copy under its query; returns the
    /// rows written.
    async fn finish(&self, mut copy: CopyIn) -> Result<usize, ApiError> {
        let query = copy.query.take();
        let written = match &query {
            Some(q) => match q.run(self.write(copy)).await {
                Ok(written) => written,
                Err(stopped) => Err(stopped.into()),
            },
            None => self.write(copy).await,
        };
        if let Some(q) = &query {
            match &written {
                Ok(rows) => q.add_rows(*rows as u64),
                Err(e) => q.fail(&kiln_query::Error::Sql(e.message.clone())),
            }
        }
        written
    }

    async fn write(&self, copy: CopyIn) -> Result<usize, ApiError> {
        if copy.too_large {
            return Err(ApiError::too_large(copy.limit));
        }
        let table = copy.table.clone();
        let (batch, lines) = tokio::task::spawn_blocking(move || decode(&copy))
            .await
            .map_err(|e| ApiError::internal(format!("COPY decoding task: {e}")))?
            .map_err(ApiError::bad_input)?;
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(0);
        }
        self.engine
            .db()
            .write(&table, &[batch])
            .await
            .map_err(|e| {
                ApiError::from_write(e, |row| {
                    let line = lines.get(row.wrapping_sub(1)).copied().unwrap_or(row);
                    format!("line {line}")
                })
            })?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(format: Format, header: bool, data: &str) -> CopyIn {
        CopyIn {
            query: None,
            table: "t".into(),
            columns: vec!["a".into(), "b".into()],
            format,
            delimiter: if format == Format::Csv { b',' } else { b'\t' },
            null: if format == Format::Csv { "" } else { "\\N" }.into(),
            header,
            data: data.as_bytes().to_vec(),
            limit: 1 << 20,
            too_large: false,
        }
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
            Format::Text,
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
    fn csv_format_header_quotes_and_lines() {
        let (b, lines) = decode(&copy(Format::Csv, true, "a,b\n1,\"two\nlines\"\n2,\n")).unwrap();
        assert_eq!(
            column(&b, 0),
            [Some("1"), Some("2")].map(|v| v.map(String::from))
        );
        assert_eq!(column(&b, 1), [Some("two\nlines".to_string()), None]);
        assert_eq!(lines, [2, 4]);
    }

    #[test]
    fn a_wrong_column_count_names_the_line() {
        let err = decode(&copy(Format::Text, false, "1\tx\n2\n")).unwrap_err();
        assert_eq!(err, "line 2: expected 2 columns, got 1");
        let err = decode(&copy(Format::Csv, false, "1,x\n2,y,z\n")).unwrap_err();
        assert_eq!(err, "line 2: expected 2 columns, got 3");
        let err = decode(&copy(Format::Text, false, "1\t\u{0}\u{ff}")).is_ok();
        assert!(err, "any valid UTF-8 is a value");
        let mut bad = copy(Format::Text, false, "");
        bad.data = vec![b'1', b'\t', 0xff];
        assert_eq!(decode(&bad).unwrap_err(), "byte 2: invalid UTF-8");
    }
}
