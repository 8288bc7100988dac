//! `COPY table [(columns)] FROM STDIN [WITH (FORMAT text | csv | binary,
//! HEADER, DELIMITER 'c', NULL 's')]` over the simple query protocol:
//! psql's `\copy ... from`, psycopg's `cursor.copy()`, JDBC's
//! `CopyManager`, pgx's `CopyFrom` (binary).
//!
//! The statement is answered with CopyInResponse; the data that follows is
//! buffered (at most `--max-body-bytes`, reserved from `--body-memory-limit`
//! as it comes, shared with HTTP bodies; 53200 when it stays spent for
//! `--body-read-timeout`) until CopyDone, then written as one
//! atomic write through the WAL, like an HTTP write: every row or none, and
//! an error names the line (and the column). Values arrive as text and are
//! cast to the table's types by the storage layer's checks. The COPY is one
//! query at the engine's door, from its statement to its write.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

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
use kiln_query::auth::Access;
use kiln_query::ingest::copy::{CopyFormat, CopyLayout};
use kiln_query::{Engine, Origin, Query, Transaction};
use kiln_storage::budget::{MemoryBudget, Reserved, Spent};

use crate::error::ApiError;

/// A COPY FROM STDIN between its statement and CopyDone.
pub(crate) struct CopyIn {
    /// The registered query; `None` in unit tests of the decoder.
    query: Option<Query>,
    table: String,
    layout: CopyLayout,
    data: Vec<u8>,
    limit: usize,
    too_large: bool,
    /// The transaction to stage the rows in instead of writing them.
    transaction: Option<Arc<Transaction>>,
    /// What the data holds of `--body-memory-limit`, grown as it comes
    /// and kept until the rows are written.
    reserved: Option<Reserved>,
    /// The budget stayed spent for as long as the data could wait: the
    /// data is dropped and the COPY fails when it ends.
    starved: Option<Spent>,
}

/// A COPY's reservation grows by this much at least, so each CopyData
/// message (libpq sends one per row) does not reserve on its own.
const GROW_STEP: u64 = 1 << 20;

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
    // A server file or program: refused unless --sql-file-access allows it.
    if let Err(e) = engine.check_files(stmt) {
        return Some(Err(ApiError::from(e).to_pg()));
    }
    if let Some(out) = super::copy_out::start(stmt, engine, client).await {
        return Some(out);
    }
    let Statement::Copy {
        source,
        target,
        options,
        legacy_options,
        ..
    } = stmt
    else {
        return None;
    };
    let copy = parse(source, target, options, legacy_options, engine, limit).and_then(|c| {
        let user = super::user(client);
        engine.authorize(user.as_deref(), Access::Write(&c.table))?;
        Ok(c)
    });
    let pid = client.pid_and_secret_key().0;
    Some(match copy {
        Ok(mut copy) => {
            copy.transaction = super::transaction::current(client);
            match engine.begin(Origin::pg(pid), &stmt.to_string()).await {
                Ok(q) => copy.query = Some(q),
                Err(e) => return Some(Err(ApiError::from(e).to_pg())),
            }
            let columns = copy.layout.columns.len();
            // CopyInResponse's format: 1 for binary, 0 for text and CSV.
            let format = i8::from(copy.layout.format == CopyFormat::Binary);
            let pending = client
                .session_extensions()
                .get_or_insert_with(Pending::default);
            *pending.0.lock() = Some(copy);
            Ok(Response::CopyIn(CopyResponse::new(
                format,
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
    target: &CopyTarget,
    options: &[CopyOption],
    legacy: &[CopyLegacyOption],
    engine: &Engine,
    limit: usize,
) -> Result<CopyIn, ApiError> {
    let bad = |m: &str| Err(ApiError::bad_input(m.to_string()));
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
    let mut layout = layout(columns, options, legacy)?;
    if layout.format == CopyFormat::Binary {
        if layout.header {
            return bad("COPY: HEADER is not available in BINARY mode");
        }
        layout.types = layout
            .columns
            .iter()
            .map(|c| {
                table
                    .schema
                    .field_with_name(c)
                    .map(|f| f.data_type().clone())
            })
            .collect::<Result<_, _>>()
            .map_err(|e| ApiError::bad_input(e.to_string()))?;
    }
    Ok(CopyIn {
        query: None,
        table: name,
        layout,
        data: vec![],
        limit,
        too_large: false,
        reserved: None,
        starved: None,
        transaction: None,
    })
}

/// The data layout COPY's options ask for, over `columns`: text (the
/// default) or CSV, header, delimiter and NULL string, in the current
/// syntax or the pre-9.0 one psql's `\copy` still sends.
pub(crate) fn layout(
    columns: Vec<String>,
    options: &[CopyOption],
    legacy: &[CopyLegacyOption],
) -> Result<CopyLayout, ApiError> {
    let mut layout = CopyLayout::text(columns);
    let (mut delimiter, mut null) = (None, None);
    for o in options {
        match o {
            CopyOption::Format(f) => match f.value.to_ascii_lowercase().as_str() {
                "text" => layout.format = CopyFormat::Text,
                "csv" => layout.format = CopyFormat::Csv,
                "binary" => layout.format = CopyFormat::Binary,
                other => {
                    return Err(ApiError::unsupported(format!(
                        "COPY format '{other}' is not supported (text, csv, binary)"
                    )));
                }
            },
            CopyOption::Header(h) => layout.header = *h,
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
                layout.format = CopyFormat::Csv;
                for c in opts {
                    match c {
                        CopyLegacyCsvOption::Header => layout.header = true,
                        other => {
                            return Err(ApiError::bad_input(format!(
                                "COPY option {other} is not supported"
                            )));
                        }
                    }
                }
            }
            CopyLegacyOption::Binary => layout.format = CopyFormat::Binary,
            CopyLegacyOption::Header => layout.header = true,
            CopyLegacyOption::Delimiter(d) => delimiter = Some(*d),
            CopyLegacyOption::Null(n) => null = Some(n.clone()),
            other => {
                return Err(ApiError::bad_input(format!(
                    "COPY option {other} is not supported"
                )));
            }
        }
    }
    if layout.format == CopyFormat::Csv {
        layout.delimiter = b',';
        layout.null = String::new();
    }
    if let Some(d) = delimiter {
        if !d.is_ascii() || d == '\n' || d == '\r' {
            return Err(ApiError::bad_input(
                "COPY delimiter must be one ASCII character other than a newline",
            ));
        }
        layout.delimiter = d as u8;
    }
    if let Some(n) = null {
        layout.null = n;
    }
    Ok(layout)
}

/// Receives COPY data for the connections' pending copies.
pub(crate) struct KilnCopy {
    pub(crate) engine: Arc<Engine>,
    /// `--body-memory-limit`, shared with HTTP request bodies.
    pub(crate) bodies: Arc<MemoryBudget>,
    /// How long COPY data waits for it (`--body-read-timeout`).
    pub(crate) wait: Duration,
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
        let Some(p) = client.session_extensions().get::<Pending>() else {
            return Ok(());
        };
        // What this message needs reserved beyond what the copy holds,
        // reserved outside the lock (it may wait).
        let grow = match p.0.lock().as_ref() {
            Some(copy) if !copy.too_large && copy.starved.is_none() => {
                let need = (copy.data.len() + data.data.len()) as u64;
                let held = copy.reserved.as_ref().map_or(0, Reserved::bytes);
                let limit = copy.limit as u64;
                if need > held && need <= limit {
                    (need - held).max(GROW_STEP).min(limit - held)
                } else {
                    0
                }
            }
            _ => 0,
        };
        let grown = match grow {
            0 => None,
            bytes => Some(self.bodies.reserve(bytes, self.wait).await),
        };
        if let Some(copy) = p.0.lock().as_mut() {
            match (grown, &mut copy.reserved) {
                (Some(Ok(more)), Some(held)) => held.merge(more),
                (Some(Ok(more)), held) => *held = Some(more),
                (Some(Err(spent)), _) => {
                    copy.starved = Some(spent);
                    copy.data = vec![];
                }
                (None, _) => {}
            }
            if copy.starved.is_none() {
                if copy.data.len() + data.data.len() > copy.limit {
                    copy.too_large = true;
                    copy.data = vec![];
                } else if !copy.too_large {
                    copy.data.extend_from_slice(&data.data);
                }
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

    async fn write(&self, mut copy: CopyIn) -> Result<usize, ApiError> {
        if copy.too_large {
            return Err(ApiError::too_large(copy.limit));
        }
        if let Some(Spent { need, limit }) = copy.starved {
            return Err(ApiError::bodies_full(need, limit, self.wait));
        }
        // Held until the rows are written, as an HTTP write's body.
        let _reserved = copy.reserved.take();
        let table = copy.table.clone();
        let copy_txn = copy.transaction.clone();
        let decoded = tokio::task::spawn_blocking(move || copy.layout.decode(&copy.data))
            .await
            .map_err(|e| ApiError::internal(format!("COPY decoding task: {e}")))?
            .map_err(ApiError::bad_input)?;
        let rows = decoded.rows();
        if rows == 0 {
            return Ok(0);
        }
        let db = self.engine.db();
        let located = |e| ApiError::from_write(e, |row| decoded.locate(row));
        match &copy_txn {
            Some(txn) => {
                if let Some(checked) = db.check_rows(&table, &decoded.batches).map_err(located)? {
                    txn.stage(&table, checked).map_err(ApiError::from)?;
                }
            }
            None => {
                db.write(&table, &decoded.batches).await.map_err(located)?;
            }
        }
        Ok(rows)
    }
}
