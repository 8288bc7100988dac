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
//! Columns PostgreSQL has and Kiln has nothing for (transaction ids, wait
//! events, the database's oid) are NULL.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
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
}

/// A connection's place in [`Sessions`], given back when it closes (kept
/// in the connection's session extensions).
pub(super) struct Registered {
    sessions: Arc<Sessions>,
    pid: i32,
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
        let connected = Connected {
            user: said("user"),
            application: said("application_name"),
            addr: client.socket_addr(),
            start_us: micros(at),
        };
        self.open.lock().insert(pid, connected);
        Registered {
            sessions: self.clone(),
            pid,
        }
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
    /// `active` or `idle`.
    state: &'static str,
    query: String,
    query_start: Option<i64>,
    state_change: i64,
}

impl Activity {
    /// A row per open connection, its state from the latest query it
    /// started: running (or queued) is `active`, else `idle` showing the
    /// query it ran last, as PostgreSQL does.
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
                let Some(q) = latest.remove(&pid) else {
                    return Row {
                        pid,
                        state: "idle",
                        query: String::new(),
                        query_start: None,
                        state_change: on.start_us,
                        on,
                    };
                };
                let started = q.started_ns / 1000;
                let (state, state_change) = if q.status().is_finished() {
                    ("idle", started + q.elapsed().as_micros() as i64)
                } else {
                    ("active", started)
                };
                Row {
                    pid,
                    on,
                    state,
                    query: q.text.clone(),
                    query_start: Some(started),
                    state_change,
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
                "application_name" => text(&|r| Some(r.on.application.clone())),
                "client_addr" => text(&|r| Some(r.on.addr.ip().to_string())),
                "client_port" => int(&|r| Some(i32::from(r.on.addr.port()))),
                "backend_start" => time(&|r| Some(r.on.start_us)),
                "query_start" => time(&|r| r.query_start),
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
