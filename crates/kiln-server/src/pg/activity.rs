//! `pg_stat_activity`: one row per open PostgreSQL connection, saying who
//! it is, where it comes from, since when, and what it runs or last ran.
//!
//! Why: pgAdmin's dashboard, DBeaver's session manager and monitoring
//! scripts read it to list sessions and to find a long query to stop
//! (`pg_cancel_backend(pid)` takes the pid shown here); without it they
//! failed with "table not found". Connections are registered when their
//! startup ends and removed when they close ([`Sessions`]); what a session
//! runs comes from the query registry behind `system.queries`, so the
//! answer is built when a query scans the table, never kept in a plan.
//! What changes between statements (the transaction block a session is in,
//! its `application_name` after a `SET`) is published by the connection
//! loop after each message a ReadyForQuery answers (Query, Sync, the end
//! of a COPY: [`Registered::publish`]), so a session inside
//! `BEGIN` shows `idle in transaction` with its `xact_start`. Columns
//! PostgreSQL has and Kiln has nothing for (transaction ids, wait events,
//! the database's oid) are NULL. `pg_blocking_pids(pid)` is always empty:
//! no query waits on another's lock in Kiln.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::time::SystemTime;

use arrow::array::{ArrayRef, Int32Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::Result;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_postgres::pgwire::api::ClientInfo;
use datafusion_postgres::pgwire::messages::response::TransactionStatus;
use kiln_query::{QueryInfo, QueryRegistry};

/// The open connections, by backend pid.
#[derive(Debug, Default)]
pub struct Sessions {
    open: parking_lot::Mutex<BTreeMap<i32, Connected>>,
}

/// What a connection said at startup, and when.
#[derive(Debug, Clone)]
struct Connected {
    user: String,
    application: String,
    addr: SocketAddr,
    /// Microseconds since the Unix epoch.
    start_us: i64,
    live: Arc<Live>,
}

/// What a connection's statements change, as of its last message.
#[derive(Debug, Default)]
struct Live {
    /// [`IDLE`], [`IN_TRANSACTION`] or [`FAILED_TRANSACTION`].
    transaction: AtomicU8,
    /// When its transaction block began, in microseconds since the Unix
    /// epoch; 0 outside one.
    xact_start_us: AtomicI64,
    /// `application_name` as last `SET`, if it was.
    application: parking_lot::Mutex<Option<String>>,
}

const IDLE: u8 = 0;
const IN_TRANSACTION: u8 = 1;
const FAILED_TRANSACTION: u8 = 2;

/// A connection's place in [`Sessions`], given back when it closes (kept
/// in the connection's session extensions).
pub(super) struct Registered {
    sessions: Arc<Sessions>,
    pid: i32,
    live: Arc<Live>,
}

impl Registered {
    /// Publishes what `client`'s last message changed: its transaction
    /// block (and when it began) and its `application_name`.
    pub(super) fn publish<C: ClientInfo + ?Sized>(&self, client: &C) {
        let now = match client.transaction_status() {
            TransactionStatus::Idle => IDLE,
            TransactionStatus::Transaction => IN_TRANSACTION,
            TransactionStatus::Error => FAILED_TRANSACTION,
        };
        let before = self.live.transaction.swap(now, Ordering::Relaxed);
        if now == IDLE {
            self.live.xact_start_us.store(0, Ordering::Relaxed);
        } else if before == IDLE {
            let at = micros(SystemTime::now());
            self.live.xact_start_us.store(at, Ordering::Relaxed);
        }
        let set = client.metadata().get("application_name");
        let mut held = self.live.application.lock();
        if held.as_ref() != set {
            *held = set.cloned();
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.sessions.open.lock().remove(&self.pid);
    }
}

fn micros(at: SystemTime) -> i64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

impl Sessions {
    /// Registers `client`, whose startup ended at `at` as backend `pid`.
    pub(super) fn register<C: ClientInfo + ?Sized>(
        self: &Arc<Self>,
        pid: i32,
        client: &C,
        at: SystemTime,
    ) -> Registered {
        let said = |key: &str| client.metadata().get(key).cloned().unwrap_or_default();
        let live = Arc::new(Live::default());
        let connected = Connected {
            user: said("user"),
            application: said("application_name"),
            addr: client.socket_addr(),
            start_us: micros(at),
            live: live.clone(),
        };
        let registered = Registered {
            sessions: self.clone(),
            pid,
            live,
        };
        registered.publish(client);
        self.open.lock().insert(pid, connected);
        registered
    }
}

/// The `pg_stat_activity` table over the open connections and the queries
/// they ran.
#[derive(Debug)]
pub(super) struct Activity {
    pub(super) sessions: Arc<Sessions>,
    pub(super) queries: Arc<QueryRegistry>,
}

/// The table's columns: PostgreSQL 16's, in its order.
const COLUMNS: [(&str, Column); 20] = [
    ("datid", Column::Oid),
    ("datname", Column::Text),
    ("pid", Column::Int),
    ("leader_pid", Column::Int),
    ("usesysid", Column::Oid),
    ("usename", Column::Text),
    ("application_name", Column::Text),
    ("client_addr", Column::Text),
    ("client_hostname", Column::Text),
    ("client_port", Column::Int),
    ("backend_start", Column::Time),
    ("xact_start", Column::Time),
    ("query_start", Column::Time),
    ("state_change", Column::Time),
    ("wait_event_type", Column::Text),
    ("wait_event", Column::Text),
    ("state", Column::Text),
    ("query_id", Column::Int),
    ("query", Column::Text),
    ("backend_type", Column::Text),
];

#[derive(Clone, Copy)]
enum Column {
    Oid,
    Int,
    Text,
    Time,
}

impl Column {
    fn data_type(self) -> DataType {
        match self {
            Column::Oid | Column::Int => DataType::Int32,
            Column::Text => DataType::Utf8,
            Column::Time => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
        }
    }
}

/// One connection's row: the values Kiln has.
struct Row {
    pid: i32,
    on: Connected,
    /// `active`, `idle`, `idle in transaction` or `idle in transaction
    /// (aborted)`.
    state: &'static str,
    query: String,
    query_start: Option<i64>,
    state_change: i64,
    xact_start: Option<i64>,
    application: String,
}

impl Activity {
    /// A row per open connection, its state from the latest query it
    /// started: running (or queued) is `active`, else `idle` (or `idle in
    /// transaction` inside a transaction block) showing the query it ran
    /// last, as PostgreSQL does.
    fn rows(&self) -> Vec<Row> {
        let open = self.sessions.open.lock().clone();
        // Each session's latest query, in one pass over the registry.
        let mut latest: BTreeMap<i32, Arc<QueryInfo>> = BTreeMap::new();
        for q in self.queries.snapshot() {
            let Some(pid) = q.session else { continue };
            let newer = |held: &Arc<QueryInfo>| (q.started_ns, q.id) > (held.started_ns, held.id);
            if latest.get(&pid).is_none_or(newer) {
                latest.insert(pid, q);
            }
        }
        open.into_iter()
            .map(|(pid, on)| {
                let idle = match on.live.transaction.load(Ordering::Relaxed) {
                    IDLE => "idle",
                    IN_TRANSACTION => "idle in transaction",
                    _ => "idle in transaction (aborted)",
                };
                let xact_start = match on.live.xact_start_us.load(Ordering::Relaxed) {
                    0 => None,
                    at => Some(at),
                };
                let application = on
                    .live
                    .application
                    .lock()
                    .clone()
                    .unwrap_or_else(|| on.application.clone());
                let Some(q) = latest.remove(&pid) else {
                    return Row {
                        pid,
                        state: idle,
                        query: String::new(),
                        query_start: None,
                        state_change: on.start_us,
                        xact_start,
                        application,
                        on,
                    };
                };
                let started = q.started_ns / 1000;
                let (state, state_change) = if q.status().is_finished() {
                    (idle, started + q.elapsed().as_micros() as i64)
                } else {
                    ("active", started)
                };
                // A statement outside a block is a transaction of its own.
                let xact_start = match state {
                    "active" => xact_start.or(Some(started)),
                    _ => xact_start,
                };
                Row {
                    pid,
                    on,
                    state,
                    query: q.text.clone(),
                    query_start: Some(started),
                    state_change,
                    xact_start,
                    application,
                }
            })
            .collect()
    }

    fn batch(&self) -> Result<RecordBatch> {
        let rows = self.rows();
        let text = |f: &dyn Fn(&Row) -> Option<String>| -> ArrayRef {
            Arc::new(rows.iter().map(f).collect::<StringArray>())
        };
        let int = |f: &dyn Fn(&Row) -> Option<i32>| -> ArrayRef {
            Arc::new(rows.iter().map(f).collect::<Int32Array>())
        };
        let time = |f: &dyn Fn(&Row) -> Option<i64>| -> ArrayRef {
            Arc::new(
                rows.iter()
                    .map(f)
                    .collect::<TimestampMicrosecondArray>()
                    .with_timezone("+00:00"),
            )
        };
        let columns = COLUMNS
            .iter()
            .map(|(name, column)| match *name {
                // The database every connection is given, whatever name it
                // asked for (`current_database()`).
                "datname" => text(&|_| Some(kiln_query::CATALOG.to_string())),
                "pid" => int(&|r| Some(r.pid)),
                "usename" => text(&|r| Some(r.on.user.clone())),
                "application_name" => text(&|r| Some(r.application.clone())),
                "client_addr" => text(&|r| Some(r.on.addr.ip().to_string())),
                "client_port" => int(&|r| Some(i32::from(r.on.addr.port()))),
                "backend_start" => time(&|r| Some(r.on.start_us)),
                "query_start" => time(&|r| r.query_start),
                "xact_start" => time(&|r| r.xact_start),
                "state_change" => time(&|r| Some(r.state_change)),
                "state" => text(&|r| Some(r.state.to_string())),
                "query" => text(&|r| Some(r.query.clone())),
                "backend_type" => text(&|_| Some("client backend".to_string())),
                _ => arrow::array::new_null_array(&column.data_type(), rows.len()),
            })
            .collect();
        Ok(RecordBatch::try_new(self.schema(), columns)?)
    }
}

#[async_trait]
impl TableProvider for Activity {
    fn schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            COLUMNS
                .iter()
                .map(|(name, c)| Field::new(*name, c.data_type(), true))
                .collect::<Vec<_>>(),
        ))
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![self.batch()?]],
            self.schema(),
            projection.cloned(),
        )?)
    }
}

/// `pg_blocking_pids(pid)`: the sessions `pid` waits for a lock of; always
/// none, as no query in Kiln waits on another's lock (pgAdmin's dashboard
/// and lock-monitoring queries call it for every session).
pub(super) fn blocking_pids() -> datafusion::logical_expr::ScalarUDF {
    use arrow::array::{Array, ListArray};
    use arrow::buffer::OffsetBuffer;
    use datafusion::logical_expr::{ColumnarValue, Signature, SimpleScalarUDF, Volatility};
    let item = Arc::new(Field::new_list_field(DataType::Int32, true));
    let list = DataType::List(item.clone());
    let signature = Signature::uniform(
        1,
        vec![DataType::Int32, DataType::Int64],
        Volatility::Volatile,
    );
    let fun = Arc::new(move |args: &[ColumnarValue]| {
        let pids = ColumnarValue::values_to_arrays(args)?;
        let pids = &pids[0];
        let empty = ListArray::try_new(
            item.clone(),
            OffsetBuffer::new_zeroed(pids.len()),
            Arc::new(Int32Array::from(Vec::<i32>::new())),
            pids.logical_nulls(),
        )?;
        Ok(ColumnarValue::Array(Arc::new(empty) as ArrayRef))
    });
    datafusion::logical_expr::ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        "pg_blocking_pids",
        signature,
        list,
        fun,
    ))
}
