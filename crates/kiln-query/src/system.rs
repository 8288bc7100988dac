//! The `system` schema: live views of the database's own state, built from
//! the lock-free registry and pinned manifests at scan time.
//! `system.tables`: one row per table; `system.segments`: one row per
//! Parquet segment of the current manifest versions (with the memory it
//! holds in the segment cache, 0 if none); `system.queries`: the
//! running and recent queries of every protocol (see [`crate::admission`]);
//! `system.cubes` ([`cubes`]): one row per cube; `system.cache`
//! ([`cache`]): the caches and the object store's requests;
//! `pg_cancel_backend(pid)` ([`cancel`]) stops those of one session.

pub mod cache;
pub mod cancel;
pub mod cubes;

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Date32Builder, Float64Builder, Int32Builder, Int64Builder, RecordBatch,
    StringBuilder, TimestampNanosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, Session};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use kiln_storage::Db;

use crate::admission::QueryRegistry;
use crate::cache::Caches;
use crate::cube::Cubes;

/// Schema name of the system tables.
pub const SYSTEM: &str = "system";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tables,
    Segments,
    Queries,
    Cubes,
    Cache,
}

const NAMES: [(&str, Kind); 5] = [
    ("tables", Kind::Tables),
    ("segments", Kind::Segments),
    ("queries", Kind::Queries),
    ("cubes", Kind::Cubes),
    ("cache", Kind::Cache),
];

/// The `system` schema provider.
#[derive(Debug)]
pub struct SystemSchema {
    db: Db,
    queries: Arc<QueryRegistry>,
    caches: Arc<Caches>,
    cubes: Arc<Cubes>,
}

impl SystemSchema {
    pub fn new(
        db: Db,
        queries: Arc<QueryRegistry>,
        caches: Arc<Caches>,
        cubes: Arc<Cubes>,
    ) -> Self {
        Self {
            db,
            queries,
            caches,
            cubes,
        }
    }
}

#[async_trait]
impl SchemaProvider for SystemSchema {
    fn table_names(&self) -> Vec<String> {
        NAMES.iter().map(|(n, _)| n.to_string()).collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        Ok(NAMES.iter().find(|(n, _)| *n == name).map(|(_, kind)| {
            Arc::new(SystemTable {
                db: self.db.clone(),
                queries: self.queries.clone(),
                caches: self.caches.clone(),
                cubes: self.cubes.clone(),
                kind: *kind,
            }) as _
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        NAMES.iter().any(|(n, _)| *n == name)
    }
}

#[derive(Debug)]
struct SystemTable {
    db: Db,
    queries: Arc<QueryRegistry>,
    caches: Arc<Caches>,
    cubes: Arc<Cubes>,
    kind: Kind,
}

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, None)
}

impl SystemTable {
    fn build(&self) -> DfResult<RecordBatch> {
        let schema = self.schema();
        let cols: Vec<ArrayRef> = match self.kind {
            Kind::Cubes => return Ok(cubes::batch(&self.db, &self.cubes)?),
            Kind::Cache => return Ok(cache::batch(&self.db, &self.caches)?),
            Kind::Tables => {
                let (mut name, mut id, mut time, mut sort) = (
                    StringBuilder::new(),
                    Int64Builder::new(),
                    StringBuilder::new(),
                    StringBuilder::new(),
                );
                let (mut segs, mut rows, mut bytes, mut mem, mut version, mut flushed) = (
                    Int64Builder::new(),
                    Int64Builder::new(),
                    Int64Builder::new(),
                    Int64Builder::new(),
                    Int64Builder::new(),
                    Int64Builder::new(),
                );
                for t in self.db.tables() {
                    let m = t.mem.manifest();
                    name.append_value(t.name());
                    id.append_value(t.def.id as i64);
                    time.append_value(t.def.time_column_name());
                    let keys: Vec<&str> = t
                        .def
                        .sort_key
                        .iter()
                        .map(|&i| t.def.columns[i].name.as_str())
                        .collect();
                    sort.append_value(keys.join(","));
                    segs.append_value(m.segments.len() as i64);
                    rows.append_value(m.segments.iter().map(|s| s.meta.rows as i64).sum());
                    bytes.append_value(m.segments.iter().map(|s| s.meta.bytes as i64).sum());
                    mem.append_value(t.mem.bytes() as i64);
                    version.append_value(m.version as i64);
                    flushed.append_value(m.flushed_seq as i64);
                }
                vec![
                    Arc::new(name.finish()),
                    Arc::new(id.finish()),
                    Arc::new(time.finish()),
                    Arc::new(sort.finish()),
                    Arc::new(segs.finish()),
                    Arc::new(rows.finish()),
                    Arc::new(bytes.finish()),
                    Arc::new(mem.finish()),
                    Arc::new(version.finish()),
                    Arc::new(flushed.finish()),
                ]
            }
            Kind::Segments => {
                let (mut name, mut day, mut path) = (
                    StringBuilder::new(),
                    Date32Builder::new(),
                    StringBuilder::new(),
                );
                let (mut rows, mut bytes) = (Int64Builder::new(), Int64Builder::new());
                let mut cached = Int64Builder::new();
                let (mut lo, mut hi) = (
                    TimestampNanosecondBuilder::new(),
                    TimestampNanosecondBuilder::new(),
                );
                for t in self.db.tables() {
                    for s in &t.mem.manifest().segments {
                        name.append_value(t.name());
                        day.append_value(s.meta.day);
                        path.append_value(&s.meta.path);
                        rows.append_value(s.meta.rows as i64);
                        bytes.append_value(s.meta.bytes as i64);
                        lo.append_value(s.meta.min_time);
                        hi.append_value(s.meta.max_time);
                        cached.append_value(self.caches.segments.held_bytes(&s.meta.path) as i64);
                    }
                }
                vec![
                    Arc::new(name.finish()),
                    Arc::new(day.finish()),
                    Arc::new(path.finish()),
                    Arc::new(rows.finish()),
                    Arc::new(bytes.finish()),
                    Arc::new(lo.finish()),
                    Arc::new(hi.finish()),
                    Arc::new(cached.finish()),
                ]
            }
            Kind::Queries => {
                let queries = self.queries.snapshot();
                let (mut id, mut protocol, mut session, mut status) = (
                    Int64Builder::new(),
                    StringBuilder::new(),
                    Int32Builder::new(),
                    StringBuilder::new(),
                );
                let (mut started, mut elapsed, mut rows, mut text, mut error) = (
                    TimestampNanosecondBuilder::new(),
                    Float64Builder::new(),
                    Int64Builder::new(),
                    StringBuilder::new(),
                    StringBuilder::new(),
                );
                for q in &queries {
                    id.append_value(q.id as i64);
                    protocol.append_value(q.protocol);
                    session.append_option(q.session);
                    status.append_value(q.status().as_str());
                    started.append_value(q.started_ns);
                    elapsed.append_value(q.elapsed().as_secs_f64() * 1e3);
                    rows.append_value(q.rows() as i64);
                    text.append_value(&q.text);
                    error.append_option(q.error());
                }
                vec![
                    Arc::new(id.finish()),
                    Arc::new(protocol.finish()),
                    Arc::new(session.finish()),
                    Arc::new(status.finish()),
                    Arc::new(started.finish()),
                    Arc::new(elapsed.finish()),
                    Arc::new(rows.finish()),
                    Arc::new(text.finish()),
                    Arc::new(error.finish()),
                ]
            }
        };
        Ok(RecordBatch::try_new(schema, cols)?)
    }
}

#[async_trait]
impl TableProvider for SystemTable {
    fn schema(&self) -> SchemaRef {
        let f = |n: &str, t: DataType| Field::new(n, t, false);
        Arc::new(Schema::new(match self.kind {
            Kind::Cubes => return cubes::schema(),
            Kind::Cache => return cache::schema(),
            Kind::Tables => vec![
                f("table_name", DataType::Utf8),
                f("table_id", DataType::Int64),
                f("time_column", DataType::Utf8),
                f("sort_key", DataType::Utf8),
                f("segments", DataType::Int64),
                f("segment_rows", DataType::Int64),
                f("segment_bytes", DataType::Int64),
                f("memstore_bytes", DataType::Int64),
                f("manifest_version", DataType::Int64),
                f("flushed_seq", DataType::Int64),
            ],
            Kind::Segments => vec![
                f("table_name", DataType::Utf8),
                f("day", DataType::Date32),
                f("path", DataType::Utf8),
                f("rows", DataType::Int64),
                f("bytes", DataType::Int64),
                f("min_time", ts()),
                f("max_time", ts()),
                f("cached_bytes", DataType::Int64),
            ],
            Kind::Queries => vec![
                f("query_id", DataType::Int64),
                f("protocol", DataType::Utf8),
                Field::new("session", DataType::Int32, true),
                f("status", DataType::Utf8),
                f("started", ts()),
                f("elapsed_ms", DataType::Float64),
                f("rows", DataType::Int64),
                f("query", DataType::Utf8),
                Field::new("error", DataType::Utf8, true),
            ],
        }))
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
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let batch = self.build()?;
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            self.schema(),
            projection.cloned(),
        )?)
    }
}
