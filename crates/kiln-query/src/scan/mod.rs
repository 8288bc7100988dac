//! [`KilnTable`]: DataFusion's view of a Kiln table.
//!
//! `scan` pins one [`TableSnapshot`] (a manifest version plus the memstore
//! rows not in it), prunes segments and memory partitions with the query's
//! filters, and plans a Parquet scan of the remaining segments (with the
//! session's footer/page-index cache) next to an in-memory scan of the
//! memstore rows and of the segments held decoded in the
//! [`SegmentCache`](crate::cache::SegmentCache)
//! ([`snapshot`]: each of those steps is a function of its own).
//! The filters are applied here, not by a `FilterExec` above (see
//! [`slices`]). No lock is held while planning or executing. `insert_into`
//! writes an INSERT's rows as one atomic write through the WAL.
//!
//! A plan kept for reuse ([`crate::plan_cache`]) gets a [`LazyScan`] instead,
//! which does the same when it executes, with the parameters bound then.

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, not_impl_err};
use datafusion::config::TableParquetOptions;
use datafusion::datasource::TableType;
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::TryStreamExt;
use kiln_storage::memstore::{Days, FrozenChunk, MemBatch, TableVersion};
use kiln_storage::schema::view_schema;
use kiln_storage::{Db, Manifest, STORE_URL, Segment, Table, TableSnapshot};
use object_store::ObjectStore;

use crate::cache::{AggregateKey, Caches, PartialKey};
use crate::error::to_df;
use crate::functions::{LARGE_FROM, value_bytes};
use crate::pruning::{Conjuncts, ContainerStats, Pruner, keep, pruner};
use crate::shape::balanced;
use crate::transaction::Transaction;

mod lazy;
mod observed;
mod partials;
mod slices;
mod snapshot;

use lazy::LazyScan;
pub(crate) use partials::{WholeRead, aggregate_key, bound, partials_over};
use slices::{Filtered, SliceScan};
use snapshot::{ParquetFilter, SnapshotScan};

/// Session-config marker: the plan being built will be kept, so scans must
/// take their snapshot at execution ([`crate::scan`]).
#[derive(Debug)]
pub(crate) struct KeptPlan;

/// A Kiln table as a DataFusion `TableProvider`.
///
/// Strings are exposed as `Utf8View`: Parquet pages decode straight into
/// views and DataFusion's comparisons and grouping run faster on them; the
/// memstore keeps plain `Utf8` and is viewed at scan time (no copy of the
/// string bytes).
#[derive(Debug, Clone)]
pub struct KilnTable {
    db: Db,
    table: Arc<Table>,
    schema: SchemaRef,
    caches: Arc<Caches>,
    /// A snapshot fixed by the caller ([`KilnTable::aggregate_pinned`]), read
    /// instead of the table's current one.
    pinned: Option<TableSnapshot>,
}

impl KilnTable {
    pub fn new(db: Db, table: Arc<Table>, caches: Arc<Caches>) -> Self {
        let schema = view_schema(&table.schema);
        Self {
            db,
            table,
            schema,
            caches,
            pinned: None,
        }
    }

    /// The storage table it reads.
    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    /// The database it reads from.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// `aggregate` (a `Partial` aggregation, built over the scan it is
    /// given, identified by `key`) over the rows of `snapshot`, pinned by
    /// the caller, planned now from an execution's context rather than by
    /// DataFusion's planner: the `projection`'s columns of the rows passing
    /// `predicate` (over the whole view schema), one partition. A cube
    /// reads its raw rows with it.
    ///
    /// With the partial cache on, a call whose aggregate and predicate
    /// values were seen before
    /// ([`PartialCache::seen_before`](crate::cache::PartialCache::seen_before))
    /// keeps each held segment's partial rows, under its slices' key (found
    /// by later reads that prune alike, [`partials_over`]) and under the
    /// whole read's ([`WholeRead`]). Such a call first takes the rows kept
    /// whole for its held segments, and plans only the rest: a dashboard's
    /// repeated range reads its cut buckets' rows once, and then plans
    /// nothing for them, while a range read once is read in one plan,
    /// keeping nothing. Memstore rows and segments read from Parquet are
    /// aggregated at every call.
    pub(crate) fn aggregate_pinned(
        &self,
        mut snapshot: TableSnapshot,
        projection: &[usize],
        predicate: Option<Arc<dyn PhysicalExpr>>,
        ctx: &TaskContext,
        key: &Arc<AggregateKey>,
        aggregate: impl FnOnce(Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<PinnedAggregate> {
        let mut kept = vec![];
        let whole = self.whole_read(key, predicate.as_ref())?;
        if let Some(read) = &whole {
            let found;
            (found, snapshot) = self.kept_whole(snapshot, read, None);
            kept.extend(found.iter().flat_map(|rows| rows.iter().cloned()));
        }
        let unread = snapshot.version.manifest.segments.is_empty()
            && snapshot.version.frozen.is_empty()
            && snapshot.active.iter().all(|(_, b)| b.is_empty());
        if unread {
            return Ok(PinnedAggregate { kept, rest: None });
        }
        let table = KilnTable {
            pinned: Some(snapshot),
            ..self.clone()
        };
        let store_url = ObjectStoreUrl::parse(STORE_URL)?;
        let mut parquet = TableParquetOptions::default();
        parquet.global = ctx.session_config().options().execution.parquet.clone();
        let spec = ScanSpec {
            store: ctx.runtime_env().object_store(&store_url)?,
            store_url,
            projection: Some(projection.to_vec()),
            limit: None,
            target: 1,
            conjuncts: predicate
                .as_ref()
                .map(|p| Arc::new(Conjuncts::of(p, &self.schema))),
            predicate,
            parquet,
            metadata: ctx.runtime_env().cache_manager.get_file_metadata_cache(),
        };
        let scan: Arc<dyn ExecutionPlan> = Arc::new(LazyScan::new(table, spec)?);
        let agg = aggregate(scan.clone())?;
        let rest = match whole {
            Some(read) => partials_over(agg.clone(), None, scan, Some(read))?.unwrap_or(agg),
            None => agg,
        };
        Ok(PinnedAggregate {
            kept,
            rest: Some(rest),
        })
    }

    /// The whole read of `key` under `predicate` if its rows are to be
    /// kept: the partial cache is on and the read was seen before. The
    /// fingerprint hashes the aggregate and the bound predicate: the same
    /// read from another plan (another connection's prepared statement, a
    /// query planned with its values) counts as seen.
    fn whole_read(
        &self,
        key: &Arc<AggregateKey>,
        predicate: Option<&Arc<dyn PhysicalExpr>>,
    ) -> DfResult<Option<WholeRead>> {
        let partials = &self.caches.partials;
        if !partials.enabled() {
            return Ok(None);
        }
        let key = PartialKey::whole(key.clone(), predicate.map(bound).transpose()?);
        Ok(partials
            .seen_before(key.fingerprint())
            .then(|| WholeRead(key)))
    }

    /// The rows kept under `read` for each held segment of `snapshot` that
    /// has them, and `snapshot` without those segments, nor those whose
    /// statistics `pruning` rules out (they have no row to read, and are
    /// neither looked up nor kept): what is left to plan.
    fn kept_whole(
        &self,
        snapshot: TableSnapshot,
        read: &WholeRead,
        pruning: Option<&Pruner>,
    ) -> (Vec<Arc<[RecordBatch]>>, TableSnapshot) {
        let segments = &snapshot.version.manifest.segments;
        let stats: Vec<_> = match pruning {
            Some(_) => segments
                .iter()
                .map(|s| ContainerStats::segment(&s.meta))
                .collect(),
            None => vec![],
        };
        let possible = keep(pruning, &self.schema, &stats);
        let (mut kept, mut rest) = (vec![], Vec::with_capacity(segments.len()));
        for (i, s) in segments.iter().enumerate() {
            if !possible.get(i).copied().unwrap_or(true) {
                continue;
            }
            let held = self.caches.segments.peek(&s.meta.path);
            match held.and_then(|d| self.caches.partials.get(&d, read.key())) {
                Some(rows) => {
                    // Counts the segment's read, as a scan of it would.
                    let _ = self.caches.segments.get(&s.meta.path);
                    kept.push(rows);
                }
                None => rest.push(s.clone()),
            }
        }
        if rest.len() == segments.len() {
            return (kept, snapshot);
        }
        let (frozen, active) = (&snapshot.version.frozen, &snapshot.active);
        let rest = narrowed(&snapshot, rest, frozen.clone(), active.clone());
        (kept, rest)
    }
}

/// What [`KilnTable::aggregate_pinned`] returns: partial rows kept whole
/// for held segments, and the aggregate over the rest of the snapshot, if
/// any is left.
pub(crate) struct PinnedAggregate {
    pub kept: Vec<RecordBatch>,
    pub rest: Option<Arc<dyn ExecutionPlan>>,
}

/// `snapshot`'s manifest version holding only `segments` of it, the
/// frozen chunks `frozen` and the active batches `active`: a narrower
/// snapshot for a read to pin.
pub(crate) fn narrowed(
    snapshot: &TableSnapshot,
    segments: Vec<Arc<Segment>>,
    frozen: Vec<Arc<FrozenChunk>>,
    active: Vec<(Days, Vec<Arc<MemBatch>>)>,
) -> TableSnapshot {
    let m = &snapshot.version.manifest;
    TableSnapshot {
        version: Arc::new(TableVersion {
            manifest: Arc::new(Manifest {
                version: m.version,
                flushed_seq: m.flushed_seq,
                segments,
            }),
            frozen,
        }),
        active,
    }
}

#[async_trait]
impl datafusion::datasource::TableProvider for KilnTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Applied by the scan itself (`SliceScan`, or a filter over the
        // Parquet files), which skips the conjuncts a slice's statistics
        // prove. Volatile filters are left to DataFusion, and so are those
        // that build strings from a large constant, to a filter whose
        // batches are cut to fit the copies (`rules::sized_literals`).
        Ok(filters
            .iter()
            .map(|f| {
                if copies_large_constant(f) {
                    TableProviderFilterPushDown::Unsupported
                } else if f.is_volatile() {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Exact
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let exact: Vec<Expr> = filters
            .iter()
            .filter(|f| !f.is_volatile())
            .cloned()
            .collect();
        // Balanced: thousands of pushed-down terms must not nest thousands deep.
        let predicate = match (!exact.is_empty()).then(|| balanced(exact, Expr::and)) {
            Some(expr) => {
                let df_schema = DFSchema::try_from(self.schema.as_ref().clone())?;
                Some(state.create_physical_expr(expr, &df_schema)?)
            }
            None => None,
        };
        let store_url = ObjectStoreUrl::parse(STORE_URL)?;
        let spec = ScanSpec {
            store: state.runtime_env().object_store(&store_url)?,
            store_url,
            projection: projection.cloned(),
            limit,
            target: state.config().target_partitions().max(1),
            conjuncts: predicate
                .as_ref()
                .map(|p| Arc::new(Conjuncts::of(p, &self.schema))),
            predicate,
            parquet: state.table_options().parquet.clone(),
            metadata: state.runtime_env().cache_manager.get_file_metadata_cache(),
        };
        if state.config().get_extension::<KeptPlan>().is_some() {
            return Ok(Arc::new(LazyScan::new(self.clone(), spec)?));
        }
        let pruning = pruner(spec.predicate.as_ref(), &self.schema);
        self.plan_snapshot(&spec, pruning.as_deref())
    }

    async fn insert_into(
        &self,
        state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        op: InsertOp,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if op != InsertOp::Append {
            return not_impl_err!("{op} is not supported; Kiln tables accept INSERT INTO only");
        }
        let sink = KilnSink {
            db: self.db.clone(),
            table: self.table.clone(),
            schema: self.schema.clone(),
            transaction: state.config().get_extension::<Transaction>(),
        };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }
}

/// What one scan reads, fixed when it is planned.
#[derive(Debug, Clone)]
struct ScanSpec {
    projection: Option<Vec<usize>>,
    limit: Option<usize>,
    /// Partitions to spread the scan over.
    target: usize,
    /// The query's pushed-down filters (but volatile ones), for pruning,
    /// and applied by the scan.
    predicate: Option<Arc<dyn PhysicalExpr>>,
    /// The same as conjuncts, to skip those a slice's statistics prove.
    conjuncts: Option<Arc<Conjuncts>>,
    parquet: TableParquetOptions,
    store_url: ObjectStoreUrl,
    store: Arc<dyn ObjectStore>,
    metadata: Arc<FileMetadataCache>,
}

impl KilnTable {
    /// Plans the scan of the table's data now: pins one snapshot, prunes it
    /// with `pruning` (the form of `spec.predicate`), and reads the rest
    /// from the segment cache, Parquet files and the memstore.
    fn plan_snapshot(
        &self,
        spec: &ScanSpec,
        pruning: Option<&Pruner>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let mut scan = self.scan_snapshot(spec, pruning, ParquetFilter::Pushdown)?;
        let from_held = scan.reads_held();
        scan.held_into_batches(spec.conjuncts.as_deref());
        // All in memory, held segments included: a group-by over it may
        // keep its partials per segment.
        let partials = self.caches.segments.capacity() > 0 && self.caches.partials.enabled();
        if from_held && scan.files.is_none() && partials {
            let slices = self.slice_scan(spec, scan.in_memory)?;
            return Ok(Arc::new(slices.with_origin(self.clone(), spec.clone())));
        }
        self.plan_scan(spec, scan)
    }

    /// The plan reading what `scan_snapshot` left.
    fn plan_scan(&self, spec: &ScanSpec, scan: SnapshotScan) -> DfResult<Arc<dyn ExecutionPlan>> {
        let mut inputs: Vec<Arc<dyn ExecutionPlan>> = scan.files.into_iter().collect();
        if !scan.in_memory.is_empty() {
            inputs.push(Arc::new(self.slice_scan(spec, scan.in_memory)?));
        }
        match inputs.len() {
            0 => Ok(Arc::new(EmptyExec::new(self.projected_schema(spec)?))),
            _ => UnionExec::try_new(inputs),
        }
    }

    /// The scan of `batches` held in memory.
    fn slice_scan(&self, spec: &ScanSpec, batches: Vec<Filtered>) -> DfResult<SliceScan> {
        Ok(SliceScan::new(
            batches,
            spec.target,
            self.projected_schema(spec)?,
            spec.projection.clone(),
            spec.limit,
            spec.predicate.clone(),
        ))
    }

    /// The schema a scan outputs.
    fn projected_schema(&self, spec: &ScanSpec) -> DfResult<SchemaRef> {
        Ok(match &spec.projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => self.schema.clone(),
        })
    }
}

/// Collects an INSERT's rows and writes them as one atomic WAL record, or,
/// in an explicit transaction, checks them and stages them there until
/// COMMIT.
#[derive(Debug)]
struct KilnSink {
    db: Db,
    table: Arc<Table>,
    /// The provider's (view) schema INSERT input arrives in.
    schema: SchemaRef,
    transaction: Option<Arc<Transaction>>,
}

impl DisplayAs for KilnSink {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "KilnSink: table={}", self.table.name())
    }
}

#[async_trait]
impl DataSink for KilnSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        _: &Arc<TaskContext>,
    ) -> DfResult<u64> {
        let batches: Vec<_> = data.try_collect().await?;
        if let Some(txn) = &self.transaction {
            let Some(rows) = self
                .db
                .check_rows(self.table.name(), &batches)
                .map_err(to_df)?
            else {
                return Ok(0);
            };
            let n = rows.num_rows() as u64;
            txn.stage(self.table.name(), rows)
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            return Ok(n);
        }
        let rows = self
            .db
            .write(self.table.name(), &batches)
            .await
            .map_err(to_df)?;
        Ok(rows as u64)
    }
}

#[cfg(test)]
mod tests;

/// Whether `f` builds a string or binary value from a string or binary
/// constant of at least [`LARGE_FROM`] bytes (`x || '<300 KB>'`, a
/// function's argument, a `CASE` result), copying it into each row. A
/// constant only compared with (`s = '<...>'`) is not copied.
fn copies_large_constant(f: &Expr) -> bool {
    let large = |e: &Expr| matches!(e, Expr::Literal(v, _) if value_bytes(v).is_some_and(|b| b >= LARGE_FROM));
    f.exists(|e| {
        Ok(match e {
            Expr::BinaryExpr(b) => {
                b.op == Operator::StringConcat && (large(&b.left) || large(&b.right))
            }
            Expr::ScalarFunction(s) => s.args.iter().any(large),
            Expr::Case(c) => {
                c.when_then_expr.iter().any(|(_, then)| large(then))
                    || c.else_expr.as_deref().is_some_and(large)
            }
            Expr::Cast(c) => large(&c.expr),
            _ => false,
        })
    })
    .unwrap_or(false)
}
