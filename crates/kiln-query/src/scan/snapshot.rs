//! What one pinned snapshot of a table leaves a scan to read, in four
//! steps, each its own function: split the segments into those held
//! decoded and those on disk (pruning the latter by their manifest
//! statistics and queueing them for decoding), prune the held ones slice
//! by slice, plan the Parquet read of the rest, and take the memstore's
//! rows of the days the filter keeps, with the conjuncts their day does
//! not prove.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::CachedParquetFileReaderFactory;
use datafusion::datasource::physical_plan::{
    FileGroup, FileScanConfigBuilder, FileSource, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::Result as DfResult;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::utils::{collect_columns, reassign_expr_columns};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::FilterExecBuilder;
use kiln_storage::memstore::Days;
use kiln_storage::{Segment, TableSnapshot};

use super::observed::ObservedStore;

use super::slices::Filtered;
use super::{KilnTable, ScanSpec};
use crate::cache::segment::{DecodedSegment, kept_slice_ids};
use crate::pruning::{Conjuncts, ContainerStats, Pruner, Residual, keep};

/// A segment of the snapshot and its decoded form held in the cache.
type Decoded = (Arc<Segment>, Arc<DecodedSegment>);

/// Who hands the scan's filter to the Parquet reader (row group and page
/// pruning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ParquetFilter {
    /// DataFusion's physical filter pushdown: a scan planned with its query.
    Pushdown,
    /// The scan itself: a scan planned when it executes, which the
    /// pushdown never sees.
    Own,
}

/// What a pinned, pruned snapshot leaves to read.
pub(super) struct SnapshotScan {
    /// The Parquet scan of the segments not held decoded, if any.
    pub files: Option<Arc<dyn ExecutionPlan>>,
    /// Batches of the table's full (view) schema, each with the filter its
    /// rows still need: the memstore's, and the held segments' once
    /// [`SnapshotScan::held_into_batches`] moved them here.
    pub in_memory: Vec<Filtered>,
    /// The held segments with slices to read.
    pub held: Vec<Held>,
    /// The held segments without a slice the filter keeps.
    pub pruned: Vec<Arc<DecodedSegment>>,
}

/// A held segment's slices a scan reads: each slice's index and the
/// conjuncts left on it.
pub(super) struct Held {
    pub segment: Arc<DecodedSegment>,
    pub kept: Vec<(usize, Residual)>,
}

impl SnapshotScan {
    /// Whether any held segment has slices to read.
    pub fn reads_held(&self) -> bool {
        !self.held.is_empty()
    }

    /// Moves the held segments' kept slices into `in_memory`, ahead of the
    /// memstore's batches, as batches of up to a few slices with the
    /// filter of the conjuncts left on them.
    pub fn held_into_batches(&mut self, conjuncts: Option<&Conjuncts>) {
        // The filter of each set of conjuncts left, made once.
        let mut filters: HashMap<Residual, Option<Arc<dyn PhysicalExpr>>> = HashMap::new();
        let mut filter = |left: Residual| {
            let c = conjuncts?;
            filters
                .entry(left)
                .or_insert_with(|| c.filter(left))
                .clone()
        };
        let mut batches = vec![];
        for held in std::mem::take(&mut self.held) {
            batches.extend(
                held.segment
                    .merged(held.kept)
                    .into_iter()
                    .map(|(b, left)| (b, filter(left))),
            );
        }
        batches.append(&mut self.in_memory);
        self.in_memory = batches;
    }
}

impl KilnTable {
    /// Pins one snapshot and prunes it with `pruning`: what is left to read
    /// (see the module docs).
    pub(super) fn scan_snapshot(
        &self,
        spec: &ScanSpec,
        pruning: Option<&Pruner>,
        parquet: ParquetFilter,
    ) -> DfResult<SnapshotScan> {
        let snapshot = match &self.pinned {
            Some(s) => s.clone(),
            None => self.table.snapshot(),
        };
        let (decoded, files) = self.segments_to_read(&snapshot, pruning);
        let (held, pruned) = self.held_slices(decoded, pruning, spec.conjuncts.as_deref());
        Ok(SnapshotScan {
            held,
            pruned,
            files: self.parquet_plan(spec, files, parquet)?,
            in_memory: self.memstore_batches(&snapshot, spec, pruning),
        })
    }

    /// The snapshot's segments held decoded, and those on disk the
    /// manifest statistics keep. Each kept one on disk counts a cache miss
    /// and is queued for decoding, for the next queries.
    fn segments_to_read(
        &self,
        snapshot: &TableSnapshot,
        pruning: Option<&Pruner>,
    ) -> (Vec<Decoded>, Vec<Arc<Segment>>) {
        let mut decoded = vec![];
        let mut on_disk = vec![];
        for s in &snapshot.version.manifest.segments {
            match self.caches.segments.peek(&s.meta.path) {
                Some(d) => decoded.push((s.clone(), d)),
                None => on_disk.push(s),
            }
        }
        let stats: Vec<_> = on_disk
            .iter()
            .map(|s| ContainerStats::segment(&s.meta))
            .collect();
        let kept = keep(pruning, &self.schema, &stats);
        let mut files = vec![];
        for (s, _) in on_disk.into_iter().zip(kept).filter(|(_, k)| *k) {
            // Counts the miss (or the hit, if it was just decoded).
            let _ = self.caches.segments.get(&s.meta.path);
            self.caches
                .segments
                .load_later(s.clone(), self.schema.clone());
            files.push(s.clone());
        }
        (decoded, files)
    }

    /// The slices of the held segments the filter keeps, pruned in one pass
    /// by per-slice statistics (finer than the segment's own, so they skip
    /// that pass), and apart, the segments with none.
    fn held_slices(
        &self,
        decoded: Vec<Decoded>,
        pruning: Option<&Pruner>,
        conjuncts: Option<&Conjuncts>,
    ) -> (Vec<Held>, Vec<Arc<DecodedSegment>>) {
        let all: Vec<&DecodedSegment> = decoded.iter().map(|(_, d)| d.as_ref()).collect();
        let kept = kept_slice_ids(&all, pruning, conjuncts);
        let (mut held, mut pruned) = (vec![], vec![]);
        for ((s, d), kept) in decoded.iter().zip(kept) {
            if kept.is_empty() {
                pruned.push(d.clone());
                continue;
            }
            // Counts the hit and refreshes the segment's LRU place.
            let _ = self.caches.segments.get(&s.meta.path);
            held.push(Held {
                segment: d.clone(),
                kept,
            });
        }
        (held, pruned)
    }

    /// The Parquet read of `files`, in at most `spec.target` groups
    /// balanced by bytes; with a filter, its columns are read too and the
    /// filter, then the limit, applied over the files.
    fn parquet_plan(
        &self,
        spec: &ScanSpec,
        mut files: Vec<Arc<Segment>>,
        parquet: ParquetFilter,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        if files.is_empty() {
            return Ok(None);
        }
        let schema = &self.schema;
        let (projection, limit) = (spec.projection.as_ref(), spec.limit);
        files.sort_by_key(|s| std::cmp::Reverse(s.meta.bytes));
        // Balance groups by bytes: biggest file to the lightest group.
        let mut groups: Vec<(u64, Vec<PartitionedFile>)> =
            vec![(0, vec![]); spec.target.min(files.len())];
        for s in files {
            let g = groups
                .iter_mut()
                .min_by_key(|g| g.0)
                .expect("at least one group");
            g.0 += s.meta.bytes;
            // The segment rides along so its file outlives this plan.
            g.1.push(
                PartitionedFile::new(s.meta.path.clone(), s.meta.bytes).with_extension(s.clone()),
            );
        }
        let source = ParquetSource::new(schema.clone());
        let store = ObservedStore::new(
            spec.store.clone(),
            self.db.store().is_cached(),
            source.metrics(),
        );
        let mut source = source
            .with_table_parquet_options(spec.parquet.clone())
            .with_parquet_file_reader_factory(Arc::new(CachedParquetFileReaderFactory::new(
                Arc::new(store),
                spec.metadata.clone(),
            )))
            .with_enable_page_index(true);
        if parquet == ParquetFilter::Own
            && let Some(p) = &spec.predicate
        {
            source = source.with_predicate(p.clone());
        }
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
        Ok(Some(plan))
    }

    /// The memstore's rows of the partitions the filter keeps, each batch
    /// with the conjuncts its days do not prove: a day inside the query's
    /// time range is not compared row by row with it.
    fn memstore_batches(
        &self,
        snapshot: &TableSnapshot,
        spec: &ScanSpec,
        pruning: Option<&Pruner>,
    ) -> Vec<Filtered> {
        let mem = snapshot.mem_by_days();
        let mut days: Vec<Days> = mem.iter().map(|(d, _)| *d).collect();
        days.sort_unstable();
        days.dedup();
        let ncols = self.schema.fields().len();
        let day_stats: Vec<_> = days
            .iter()
            .map(|d| ContainerStats::days(ncols, self.table.def.time_column, *d))
            .collect();
        let kept = keep(pruning, &self.schema, &day_stats);
        let left = match &spec.conjuncts {
            Some(c) => c.residuals_of(&self.schema, &day_stats),
            None => vec![0; days.len()],
        };
        // Per kept partition, its filter, made once per set of conjuncts left.
        let mut filters: HashMap<Residual, Option<Arc<dyn PhysicalExpr>>> = HashMap::new();
        let by_days: HashMap<Days, Option<Arc<dyn PhysicalExpr>>> = days
            .iter()
            .zip(kept.into_iter().zip(left))
            .filter(|(_, (k, _))| *k)
            .map(|(d, (_, left))| {
                let filter = match &spec.conjuncts {
                    Some(c) => filters
                        .entry(left)
                        .or_insert_with(|| c.filter(left))
                        .clone(),
                    None => spec.predicate.clone(),
                };
                (*d, filter)
            })
            .collect();
        mem.into_iter()
            .filter_map(|(d, b)| Some((b.viewed().clone(), by_days.get(&d)?.clone())))
            .collect()
    }
}
