//! [`KilnTable`]: DataFusion's view of a Kiln table.
//!
//! `scan` pins one [`TableSnapshot`] (a manifest version plus the memstore
//! rows not in it), prunes segments and memory partitions with the query's
//! filters, and plans a Parquet scan of the remaining segments (with the
//! session's footer/page-index cache) next to an in-memory scan of the
//! memstore rows and of the segments held decoded in the [`SegmentCache`].
//! The filters are applied here, not by a `FilterExec` above (see
//! [`slices`]). No lock is held while planning or executing. `insert_into`
//! writes an INSERT's rows as one atomic write through the WAL.
//!
//! A plan kept for reuse ([`crate::plan_cache`]) gets a [`LazyScan`] instead,
//! which does the same when it executes, with the parameters bound then.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, not_impl_err};
use datafusion::config::TableParquetOptions;
use datafusion::datasource::TableType;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::CachedParquetFileReaderFactory;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::Result as DfResult;
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::utils::{collect_columns, reassign_expr_columns};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::filter::FilterExecBuilder;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::TryStreamExt;
use kiln_storage::schema::view_schema;
use kiln_storage::{Db, STORE_URL, Table};
use object_store::ObjectStore;

use crate::cache::Caches;
use crate::cache::segment::{DecodedSegment, kept_slice_ids};
use crate::error::to_df;
use crate::pruning::{Conjuncts, ContainerStats, Pruner, Residual, keep, pruner};

mod lazy;
mod partials;
mod slices;

use lazy::LazyScan;
pub(crate) use partials::partials_over;
use slices::{Filtered, SliceScan};

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
}

impl KilnTable {
    pub fn new(db: Db, table: Arc<Table>, caches: Arc<Caches>) -> Self {
        let schema = view_schema(&table.schema);
        Self {
            db,
            table,
            schema,
            caches,
        }
    }

    /// The storage table it reads.
    pub fn table(&self) -> &Arc<Table> {
        &self.table
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
        // prove. Volatile filters are left to DataFusion.
        Ok(filters
            .iter()
            .map(|f| match f.is_volatile() {
                true => TableProviderFilterPushDown::Inexact,
                false => TableProviderFilterPushDown::Exact,
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
        let exact = filters.iter().filter(|f| !f.is_volatile()).cloned();
        let predicate = match conjunction(exact) {
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
        _state: &dyn Session,
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
        let scan = self.scan_snapshot(spec, pruning, false, false)?;
        // All in memory, held segments included: a group-by over it may
        // keep its partials per segment.
        let partials = self.caches.segments.capacity() > 0 && self.caches.partials.enabled();
        if scan.from_held && scan.files.is_none() && partials {
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

    /// Pins one snapshot and prunes it: what is left to read, as a plan
    /// over Parquet files and batches held in memory (memstore rows and
    /// cached segments). `parquet_predicate` also hands the predicate to
    /// the Parquet reader (needed by a plan built at execution, which
    /// DataFusion's physical filter pushdown never sees). With `by_segment`
    /// the kept slices of each held segment are returned apart
    /// (`SnapshotScan::held`), not as batches.
    fn scan_snapshot(
        &self,
        spec: &ScanSpec,
        pruning: Option<&Pruner>,
        parquet_predicate: bool,
        by_segment: bool,
    ) -> DfResult<SnapshotScan> {
        let schema = self.schema.clone();
        let snapshot = self.table.snapshot();
        let (target, projection, limit) = (spec.target, spec.projection.as_ref(), spec.limit);
        let mut files_plan = None;

        // Persisted segments. Those held decoded in the segment cache are
        // pruned by slice (finer than the segment's statistics, so they skip
        // that pass), all in one pass. The others are pruned by their
        // manifest statistics, read from Parquet and queued for decoding.
        let mut decoded = vec![];
        let mut on_disk = vec![];
        for s in &snapshot.version.manifest.segments {
            match self.caches.segments.peek(&s.meta.path) {
                Some(d) => decoded.push((s, d)),
                None => on_disk.push(s),
            }
        }
        let stats: Vec<_> = on_disk
            .iter()
            .map(|s| ContainerStats::segment(&s.meta))
            .collect();
        let kept = keep(pruning, &schema, &stats);
        let mut files = vec![];
        for (s, _) in on_disk.into_iter().zip(kept).filter(|(_, k)| *k) {
            // Counts the miss (or the hit, if it was just decoded).
            let _ = self.caches.segments.get(&s.meta.path);
            self.caches.segments.load_later(s.clone(), schema.clone());
            files.push(s.clone());
        }
        let held: Vec<&DecodedSegment> = decoded.iter().map(|(_, d)| d.as_ref()).collect();
        let conjuncts = spec.conjuncts.as_deref();
        // The filter of each set of conjuncts left, made once.
        let mut filters: HashMap<Residual, Option<Arc<dyn PhysicalExpr>>> = HashMap::new();
        let mut filter = |left: Residual| {
            let c = conjuncts?;
            filters
                .entry(left)
                .or_insert_with(|| c.filter(left))
                .clone()
        };
        let mut in_memory = vec![];
        let mut held_kept = vec![];
        let mut from_held = false;
        for ((s, d), kept) in decoded
            .iter()
            .zip(kept_slice_ids(&held, pruning, conjuncts))
        {
            if kept.is_empty() {
                continue;
            }
            // Counts the hit and refreshes the segment's LRU place.
            let _ = self.caches.segments.get(&s.meta.path);
            from_held = true;
            match by_segment {
                true => held_kept.push(Held {
                    segment: d.clone(),
                    kept,
                }),
                false => in_memory.extend(
                    d.merged(kept)
                        .into_iter()
                        .map(|(b, left)| (b, filter(left))),
                ),
            }
        }
        if !files.is_empty() {
            files.sort_by_key(|s| std::cmp::Reverse(s.meta.bytes));
            // Balance groups by bytes: biggest file to the lightest group.
            let mut groups: Vec<(u64, Vec<PartitionedFile>)> =
                vec![(0, vec![]); target.min(files.len())];
            for s in files {
                let g = groups
                    .iter_mut()
                    .min_by_key(|g| g.0)
                    .expect("at least one group");
                g.0 += s.meta.bytes;
                // The segment rides along so its file outlives this plan.
                g.1.push(
                    PartitionedFile::new(s.meta.path.clone(), s.meta.bytes)
                        .with_extension(s.clone()),
                );
            }
            // The filters reach the Parquet reader (row group and page
            // pruning) through DataFusion's physical filter pushdown, or here.
            let mut source = ParquetSource::new(schema.clone())
                .with_table_parquet_options(spec.parquet.clone())
                .with_parquet_file_reader_factory(Arc::new(CachedParquetFileReaderFactory::new(
                    spec.store.clone(),
                    spec.metadata.clone(),
                )))
                .with_enable_page_index(true);
            if parquet_predicate && let Some(p) = &spec.predicate {
                source = source.with_predicate(p.clone());
            }
            // With a filter: its columns are read too, and the filter and
            // then the limit applied over the files.
            let (read, keep) = match (&spec.predicate, projection) {
                (None, _) => (projection.cloned(), None),
                (Some(_), None) => (None, None),
                (Some(p), Some(wanted)) => {
                    let mut read = wanted.clone();
                    for c in collect_columns(p) {
                        if !read.contains(&c.index()) {
                            read.push(c.index());
                        }
                    }
                    (Some(read), Some((0..wanted.len()).collect::<Vec<_>>()))
                }
            };
            let conf = FileScanConfigBuilder::new(spec.store_url.clone(), Arc::new(source))
                .with_file_groups(groups.into_iter().map(|g| FileGroup::new(g.1)).collect())
                .with_projection_indices(read.clone())?
                .with_limit(if spec.predicate.is_some() {
                    None
                } else {
                    limit
                })
                .build();
            let mut plan = DataSourceExec::from_data_source(conf) as Arc<dyn ExecutionPlan>;
            if let Some(p) = &spec.predicate {
                let read_schema = match &read {
                    Some(r) => schema.project(r)?,
                    None => schema.as_ref().clone(),
                };
                let p = reassign_expr_columns(p.clone(), &read_schema)?;
                plan = Arc::new(
                    FilterExecBuilder::new(p, plan)
                        .apply_projection(keep)?
                        .with_fetch(limit)
                        .build()?,
                );
            }
            files_plan = Some(plan);
        }

        // Rows still in memory, pruned by day partition.
        let days: Vec<i32> = snapshot
            .version
            .frozen
            .iter()
            .map(|c| c.day)
            .chain(snapshot.active.iter().map(|(d, _)| *d))
            .collect();
        let ncols = schema.fields().len();
        let day_stats: Vec<_> = days
            .iter()
            .map(|d| ContainerStats::day(ncols, self.table.def.time_column, *d))
            .collect();
        let kept_days: Vec<i32> = days
            .iter()
            .zip(keep(pruning, &schema, &day_stats))
            .filter(|(_, k)| *k)
            .map(|(d, _)| *d)
            .collect();
        let everything = spec.predicate.clone();
        in_memory.extend(
            snapshot
                .mem_viewed_batches(|d| kept_days.contains(&d))
                .into_iter()
                .map(|b| (b, everything.clone())),
        );
        Ok(SnapshotScan {
            files: files_plan,
            in_memory,
            held: held_kept,
            from_held,
        })
    }
}

/// What a pinned, pruned snapshot leaves to read.
struct SnapshotScan {
    /// The Parquet scan of the segments not held decoded, if any.
    files: Option<Arc<dyn ExecutionPlan>>,
    /// Batches of the table's full (view) schema: memstore rows and kept
    /// slices of cached segments, each with the filter its rows still need.
    in_memory: Vec<Filtered>,
    /// With `by_segment`: the held segments with slices to read.
    held: Vec<Held>,
    /// Whether any held segment has slices to read.
    from_held: bool,
}

/// A held segment's slices a scan reads: each slice's index and the
/// conjuncts left on it.
struct Held {
    segment: Arc<DecodedSegment>,
    kept: Vec<(usize, Residual)>,
}

/// Collects an INSERT's rows and writes them as one atomic WAL record.
#[derive(Debug)]
struct KilnSink {
    db: Db,
    table: Arc<Table>,
    /// The provider's (view) schema INSERT input arrives in.
    schema: SchemaRef,
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
        let rows = self
            .db
            .write(self.table.name(), &batches)
            .await
            .map_err(to_df)?;
        Ok(rows as u64)
    }
}
