//! Server-side cursors: `DECLARE name CURSOR FOR query`, `FETCH`, `CLOSE`
//! (psycopg's named cursors, pandas' chunked reads through SQLAlchemy's
//! `stream_results`).
//!
//! Why not datafusion-postgres's cursor hook: it runs the query on the
//! DataFusion session directly (past Kiln's door: no admission, no
//! `system.queries`, no cancel) and keeps no plan with the cursor, so
//! Describe of the cursor's portal reported no columns and a FETCH over
//! the extended protocol sent rows after a NoData, which crashed psycopg.
//! Here the query is one registered query at the engine's door; its rows
//! are computed as FETCH asks for them (the cursor holds the stream, so a
//! cursor read slowly holds a few batches, not the result), and encoded
//! by each FETCH in the format it asks for: binary where the extended
//! protocol's Bind asks for it (psycopg's binary cursors), or where the
//! cursor was declared `BINARY` and FETCH comes as a simple query. The
//! cursor's portal carries a plan with the query's columns, and so does a
//! FETCH at Parse, so both describe the rows they return. Cursors scan
//! forward only (PostgreSQL's default without SCROLL); they live until
//! CLOSE or the end of the connection (as WITH HOLD).

use datafusion::common::ScalarValue;
use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::common::DFSchema;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    CloseCursor, Declare, DeclareType, FetchDirection, Statement, Value,
};
use datafusion_postgres::hooks::HookClient;
use datafusion_postgres::pgwire::api::ClientInfo;
use datafusion_postgres::pgwire::api::portal::{Format, Portal};
use datafusion_postgres::pgwire::api::results::{Response, Tag};
use datafusion_postgres::pgwire::api::stmt::StoredStatement;
use datafusion_postgres::pgwire::api::store::PortalStore;
use datafusion_postgres::pgwire::error::{PgWireError, PgWireResult};
use futures::StreamExt;
use kiln_query::shape::labels::Labels;
use kiln_query::{Engine, Streamed};
use parking_lot::Mutex;
use tokio::sync::OwnedMutexGuard;

use super::hook::Answer;
use crate::error::ApiError;

/// The connection's open cursors, by name, in its session extensions.
#[derive(Default)]
struct Cursors(Mutex<HashMap<String, Arc<Cursor>>>);

/// One open cursor: its columns (for FETCH's Parse, which sees no
/// portal) and its rows not yet fetched.
struct Cursor {
    schema: SchemaRef,
    labels: Option<Labels>,
    /// Declared `BINARY`: a FETCH sent as a simple query gets binary rows.
    binary: bool,
    rows: Arc<tokio::sync::Mutex<Rows>>,
}

/// The rows of a cursor not yet fetched: the rest of a batch a FETCH
/// stopped inside, then the query's stream.
struct Rows {
    pending: Option<RecordBatch>,
    stream: SendableRecordBatchStream,
}

impl Rows {
    /// The next `max_rows` rows (every one that remains for `usize::MAX`),
    /// as they are computed: nothing is gathered, however many a FETCH
    /// asks for. The stream holds the cursor until it is dropped.
    fn next(
        rows: OwnedMutexGuard<Rows>,
        schema: SchemaRef,
        max_rows: usize,
    ) -> SendableRecordBatchStream {
        let batches = futures::stream::unfold((rows, max_rows), |(mut rows, left)| async move {
            if left == 0 {
                return None;
            }
            let batch = match rows.pending.take() {
                Some(b) => b,
                None => match rows.stream.next().await? {
                    Ok(b) => b,
                    Err(e) => return Some((Err(e), (rows, 0))),
                },
            };
            let n = batch.num_rows().min(left);
            if n < batch.num_rows() {
                rows.pending = Some(batch.slice(n, batch.num_rows() - n));
            }
            Some((Ok(batch.slice(0, n)), (rows, left - n)))
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, batches))
    }
}

pub(crate) struct CursorHook {
    pub(crate) engine: Arc<Engine>,
}

fn error(sqlstate: &str, msg: String) -> PgWireError {
    PgWireError::UserError(Box::new(
        datafusion_postgres::pgwire::error::ErrorInfo::new("ERROR".into(), sqlstate.into(), msg),
    ))
}

impl CursorHook {
    async fn declare(
        &self,
        declares: &[Declare],
        params: &[ScalarValue],
        client: &mut dyn HookClient,
    ) -> PgWireResult<Response> {
        for declare in declares {
            if declare.declare_type != Some(DeclareType::Cursor) {
                return Err(ApiError::unsupported("DECLARE supports cursors only").to_pg());
            }
            if declare.scroll == Some(true) {
                return Err(ApiError::unsupported("cursors scan forward only (no SCROLL)").to_pg());
            }
            let (Some(name), Some(query)) = (declare.names.first(), &declare.for_query) else {
                return Err(error(
                    "42601",
                    "DECLARE needs a cursor name and FOR query".into(),
                ));
            };
            let stmt = Statement::Query(query.clone());
            let text = stmt.to_string();
            let light = Engine::is_light([&stmt]);
            let q = super::begin(&self.engine, &text, &*client, light).await?;
            let streamed = self
                .engine
                .run(&q, DfStatement::Statement(Box::new(stmt.clone())), params)
                .await
                .map_err(|e| ApiError::from(e).to_pg())?;
            let Streamed::Rows { schema, stream } = streamed else {
                return Err(error("42601", "a cursor's query must return rows".into()));
            };
            let labels = kiln_query::shape::labels::labels(&stmt);
            let columns = DFSchema::try_from(schema.clone())
                .map_err(|e| PgWireError::ApiError(Box::new(e)))?;
            let statement = StoredStatement::new(
                name.value.clone(),
                (text, Some((stmt, super::no_rows(columns)))),
                vec![],
            );
            // For Describe of the cursor's portal.
            let portal = Portal::new_cursor(name.value.clone(), Arc::new(statement));
            client.portal_store().put_portal(Arc::new(portal));
            let cursor = Cursor {
                schema,
                labels,
                binary: declare.binary == Some(true),
                rows: Arc::new(tokio::sync::Mutex::new(Rows {
                    pending: None,
                    stream,
                })),
            };
            client
                .session_extensions()
                .get_or_insert_with(Cursors::default)
                .0
                .lock()
                .insert(name.value.clone(), Arc::new(cursor));
        }
        Ok(Response::Execution(Tag::new("DECLARE CURSOR")))
    }

    fn close(cursor: &CloseCursor, client: &mut dyn HookClient) -> PgWireResult<Response> {
        let cursors = client
            .session_extensions()
            .get_or_insert_with(Cursors::default);
        match cursor {
            CloseCursor::All => {
                for name in cursors.0.lock().drain().map(|(n, _)| n) {
                    client.portal_store().rm_portal(&name);
                }
            }
            CloseCursor::Specific { name } => {
                if cursors.0.lock().remove(&name.value).is_none() {
                    return Err(error(
                        "34000",
                        format!("cursor \"{}\" does not exist", name.value),
                    ));
                }
                client.portal_store().rm_portal(&name.value);
            }
        }
        Ok(Response::Execution(Tag::new("CLOSE CURSOR")))
    }
}

/// `FETCH direction FROM name`: the cursor's next rows in `format` (the
/// extended protocol's Bind), or with none (a simple query) in text, or
/// binary for a cursor declared `BINARY`.
pub(super) async fn fetch(
    name: &str,
    direction: &FetchDirection,
    format: Option<&Format>,
    client: &mut dyn HookClient,
) -> PgWireResult<Response> {
    let count = |v: &Value| match v {
        Value::Number(n, _) => n
            .parse::<usize>()
            .map_err(|_| error("22023", format!("bad FETCH count {n}"))),
        other => Err(error("22023", format!("bad FETCH count {other}"))),
    };
    let max_rows = match direction {
        FetchDirection::Next | FetchDirection::Forward { limit: None } => 1,
        FetchDirection::Forward { limit: Some(v) } | FetchDirection::Count { limit: v } => {
            match count(v)? {
                0 => return Err(ApiError::unsupported("FETCH 0 is not supported").to_pg()),
                n => n,
            }
        }
        FetchDirection::ForwardAll | FetchDirection::All => usize::MAX,
        _ => {
            return Err(ApiError::unsupported("cursors scan forward only (no SCROLL)").to_pg());
        }
    };
    let cursor = client
        .session_extensions()
        .get::<Cursors>()
        .and_then(|c| c.0.lock().get(name).cloned());
    let Some(cursor) = cursor else {
        return Err(error("34000", format!("cursor \"{name}\" does not exist")));
    };
    // Rows stream as they are sent: an earlier FETCH of this cursor whose
    // rows the client has not all taken (a suspended portal) holds it.
    let Ok(rows) = cursor.rows.clone().try_lock_owned() else {
        return Err(error(
            "55006",
            format!("cursor \"{name}\" is still being read by an earlier FETCH"),
        ));
    };
    let stream = Rows::next(rows, cursor.schema.clone(), max_rows);
    let format = match (format, cursor.binary) {
        (Some(f), _) => f.clone(),
        (None, true) => Format::UnifiedBinary,
        (None, false) => Format::UnifiedText,
    };
    let mut rows = super::execute::encode(
        &cursor.schema,
        stream,
        &format,
        cursor.labels.as_ref(),
        &*client,
    )?;
    rows.set_command_tag("FETCH");
    Ok(Response::Query(rows))
}

#[async_trait]
impl Answer for CursorHook {
    async fn respond(
        &self,
        stmt: &Statement,
        params: &[ScalarValue],
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        Some(match stmt {
            Statement::Declare { stmts } => self.declare(stmts, params, client).await,
            Statement::Fetch {
                name, direction, ..
            } => fetch(&name.value, direction, None, client).await,
            Statement::Close { cursor } => Self::close(cursor, client),
            _ => return None,
        })
    }

    fn plan(
        &self,
        stmt: &Statement,
        client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        let columns = match stmt {
            Statement::Declare { .. } | Statement::Close { .. } => DFSchema::empty(),
            // A FETCH describes its cursor's columns.
            Statement::Fetch { name, .. } => {
                let schema = client
                    .session_extensions()
                    .get::<Cursors>()
                    .and_then(|c| c.0.lock().get(&name.value).map(|c| c.schema.clone()));
                match schema.map(DFSchema::try_from) {
                    Some(Ok(s)) => s,
                    Some(Err(e)) => return Some(Err(PgWireError::ApiError(Box::new(e)))),
                    None => DFSchema::empty(),
                }
            }
            _ => return None,
        };
        Some(Ok(super::no_rows(columns)))
    }
}
