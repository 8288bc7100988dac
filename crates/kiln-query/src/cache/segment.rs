//! [`SegmentCache`]: hot segments kept decoded, as Arrow batches in memory.
//!
//! Why: a dashboard asks the same recent days again and again, and a profile
//! of its queries over Parquet spent most of the scan decompressing and
//! decoding the same pages each time (docs/benchmark-history.md). Segments are
//! immutable, so their decoded rows can be kept without any invalidation:
//! a segment's path is never reused.
//!
//! How: a query that finds a segment here scans its batches in memory, and
//! prunes them in slices of [`SLICE_ROWS`] rows with per-slice min/max (finer
//! than Parquet's pages); neighbouring kept slices are scanned as one batch
//! of up to [`BATCH_ROWS`] rows. A query that misses reads the Parquet file as
//! before and asks for the segment to be decoded in the background, so no
//! query waits for a load. The cache is bounded by bytes
//! (`--segment-cache-bytes`) with least-recently-used eviction; lookups
//! take no global lock. Entries of segments that compaction replaced are
//! dropped at the next insert, once no query pins the segment.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt64Array};
use arrow::compute::concat;
use arrow::datatypes::{DataType, SchemaRef};
use bytes::Bytes;
use dashmap::DashSet;
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use datafusion::error::Result as DfResult;
use datafusion::functions_aggregate::min_max::{MaxAccumulator, MinAccumulator};
use datafusion::logical_expr::Accumulator;
use kiln_storage::schema::view_schema;
use kiln_storage::{Db, Segment, Store};
use object_store::path::Path;
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};

use crate::cache::lru::ByteLru;
use crate::pruning::{Conjuncts, Pruner, Residual};

/// Rows per pruning slice of a cached segment. Small, so that a point
/// lookup filters few rows; a scan does not pay for it in batches, as kept
/// neighbours are merged (see [`BATCH_ROWS`]).
pub const SLICE_ROWS: usize = 1024;

/// Rows per batch a scan of a cached segment emits at most: DataFusion's
/// batch size.
pub const BATCH_ROWS: usize = 8192;

/// A segment's rows, decoded.
#[derive(Debug)]
pub struct DecodedSegment {
    /// One batch per row group.
    batches: Vec<RecordBatch>,
    /// Every slice of the segment, in order, each at most [`SLICE_ROWS`]
    /// rows of one batch.
    slices: Vec<Slice>,
    /// Per column: min and max of every slice (null where unknown).
    mins: Vec<ArrayRef>,
    maxs: Vec<ArrayRef>,
    null_counts: Vec<ArrayRef>,
    row_counts: ArrayRef,
    schema: SchemaRef,
    /// Memory held (the cache's weight).
    bytes: usize,
}

impl DecodedSegment {
    /// Decodes a whole Parquet segment into `schema` (the query schema, with
    /// strings as views) and computes its slice statistics.
    pub fn decode(file: Bytes, schema: &SchemaRef) -> DfResult<Self> {
        let options = ArrowReaderOptions::new().with_schema(schema.clone());
        let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(file, options)?;
        let row_group_rows = builder
            .metadata()
            .row_groups()
            .iter()
            .map(|rg| rg.num_rows() as usize)
            .max()
            .unwrap_or(SLICE_ROWS)
            .max(1);
        // One batch per row group: a string column's dictionary is then
        // shared by the row group's slices, and counted once below.
        let batches = builder
            .with_batch_size(row_group_rows)
            .build()?
            .collect::<Result<Vec<_>, _>>()?;
        let bytes = batches.iter().map(|b| b.get_array_memory_size()).sum();
        let slices: Vec<Slice> = batches
            .iter()
            .enumerate()
            .flat_map(|(batch, b)| {
                (0..b.num_rows())
                    .step_by(SLICE_ROWS)
                    .map(move |offset| Slice {
                        batch,
                        offset,
                        len: SLICE_ROWS.min(b.num_rows() - offset),
                    })
            })
            .collect();
        let mut mins = vec![];
        let mut maxs = vec![];
        let mut null_counts = vec![];
        for (i, field) in schema.fields().iter().enumerate() {
            let dt = field.data_type();
            let (mut lo, mut hi, mut nulls) = (vec![], vec![], vec![]);
            for s in &slices {
                let column = batches[s.batch].column(i).slice(s.offset, s.len);
                let (a, b) = min_max(&column, dt)?;
                lo.push(a);
                hi.push(b);
                nulls.push(column.null_count() as u64);
            }
            mins.push(ScalarValue::iter_to_array(lo)?);
            maxs.push(ScalarValue::iter_to_array(hi)?);
            null_counts.push(Arc::new(UInt64Array::from(nulls)) as ArrayRef);
        }
        let row_counts = Arc::new(UInt64Array::from_iter_values(
            slices.iter().map(|s| s.len as u64),
        ));
        Ok(Self {
            batches,
            slices,
            mins,
            maxs,
            null_counts,
            row_counts,
            schema: schema.clone(),
            bytes,
        })
    }

    /// The rows of the slices that may hold rows matching `pruning` (all
    /// without one), as batches.
    pub fn slices(&self, pruning: Option<&Pruner>) -> Vec<RecordBatch> {
        let kept = kept_slices(&[self], pruning, None)
            .pop()
            .unwrap_or_default();
        kept.into_iter().map(|(b, _)| b).collect()
    }

    /// The kept slices as batches: runs of neighbouring slices in one row
    /// group with the same conjuncts left, up to [`BATCH_ROWS`] rows each,
    /// as zero-copy views.
    pub fn merged(&self, kept: Vec<(usize, Residual)>) -> Vec<(RecordBatch, Residual)> {
        let mut out = vec![];
        let mut run: Option<(Slice, Residual)> = None;
        let view =
            |(r, left): (Slice, Residual)| (self.batches[r.batch].slice(r.offset, r.len), left);
        for (s, left) in kept.into_iter().map(|(i, left)| (&self.slices[i], left)) {
            match &mut run {
                Some((r, l))
                    if r.batch == s.batch
                        && *l == left
                        && r.offset + r.len == s.offset
                        && r.len + s.len <= BATCH_ROWS =>
                {
                    r.len += s.len
                }
                _ => {
                    if let Some(r) = run.replace((s.clone(), left)) {
                        out.push(view(r));
                    }
                }
            }
        }
        out.extend(run.map(view));
        out
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}

/// Rows `offset..offset + len` of one of a segment's batches.
#[derive(Debug, Clone)]
struct Slice {
    batch: usize,
    offset: usize,
    len: usize,
}

/// Min and max of one slice; nulls (unknown) for types without an order
/// pruning can use, and for floats holding NaN.
fn min_max(values: &ArrayRef, dt: &DataType) -> DfResult<(ScalarValue, ScalarValue)> {
    let unknown = || ScalarValue::try_from(dt);
    let has_nan = match values.as_any().downcast_ref::<arrow::array::Float64Array>() {
        Some(f) => f.iter().flatten().any(f64::is_nan),
        None => false,
    };
    if has_nan {
        return Ok((unknown()?, unknown()?));
    }
    let mut lo = MinAccumulator::try_new(dt)?;
    let mut hi = MaxAccumulator::try_new(dt)?;
    lo.update_batch(std::slice::from_ref(values))?;
    hi.update_batch(std::slice::from_ref(values))?;
    Ok((lo.evaluate()?, hi.evaluate()?))
}

/// The rows of the slices of `segments` that may hold rows matching
/// `pruning` (all without one), per segment, as batches. The statistics of
/// every slice of every segment are pruned in one pass: a `prune` call has
/// a fixed cost however few the containers, which showed in point lookups.
///
/// Each batch comes with the conjuncts of `filter` left to evaluate on its
/// rows: those the statistics of its slices do not prove (0, none, without
/// a filter).
pub fn kept_slices(
    segments: &[&DecodedSegment],
    pruning: Option<&Pruner>,
    filter: Option<&Conjuncts>,
) -> Vec<Vec<(RecordBatch, Residual)>> {
    segments
        .iter()
        .zip(kept_slice_ids(segments, pruning, filter))
        .map(|(d, kept)| d.merged(kept))
        .collect()
}

/// [`kept_slices`] before the slices become batches: per segment, the
/// index of each kept slice and the conjuncts left on it. Two scans with
/// the same list read the same rows of the segment with the same filters
/// (if the conjuncts are bound to the same values).
pub fn kept_slice_ids(
    segments: &[&DecodedSegment],
    pruning: Option<&Pruner>,
    filter: Option<&Conjuncts>,
) -> Vec<Vec<(usize, Residual)>> {
    let stats = AllSlices::new(segments);
    let keep = pruning.and_then(|p| p.prune(&stats));
    let residuals = filter.map(|f| f.residuals(&stats));
    let mut at = 0;
    segments
        .iter()
        .map(|d| {
            let kept = (0..d.slices.len())
                .filter(|i| keep.as_ref().is_none_or(|k| k[at + i]))
                .map(|i| (i, residuals.as_ref().map_or(0, |r| r[at + i])))
                .collect();
            at += d.slices.len();
            kept
        })
        .collect()
}

/// The slices of several decoded segments as one list of containers,
/// segment by segment, slice by slice. Each statistic is concatenated once
/// and kept, for pruning and then for the conjuncts the slices prove.
struct AllSlices<'a> {
    segments: &'a [&'a DecodedSegment],
    concatenated: RefCell<HashMap<(Stat, String), Option<ArrayRef>>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Stat {
    Min,
    Max,
    Nulls,
}

impl<'a> AllSlices<'a> {
    fn new(segments: &'a [&'a DecodedSegment]) -> Self {
        Self {
            segments,
            concatenated: RefCell::default(),
        }
    }

    /// One statistic of `column` for every slice; None if a segment lacks
    /// the column.
    fn concat(&self, column: &Column, stat: Stat) -> Option<ArrayRef> {
        let key = (stat, column.name.clone());
        if let Some(a) = self.concatenated.borrow().get(&key) {
            return a.clone();
        }
        let arrays = self
            .segments
            .iter()
            .map(|d| {
                let i = d.schema.index_of(&column.name).ok()?;
                Some(match stat {
                    Stat::Min => &d.mins[i],
                    Stat::Max => &d.maxs[i],
                    Stat::Nulls => &d.null_counts[i],
                })
            })
            .collect::<Option<Vec<_>>>();
        let array = arrays.and_then(|a| concat_all(&a));
        self.concatenated.borrow_mut().insert(key, array.clone());
        array
    }
}

fn concat_all(arrays: &[&ArrayRef]) -> Option<ArrayRef> {
    match arrays {
        [one] => Some((*one).clone()),
        _ => concat(&arrays.iter().map(|a| a.as_ref()).collect::<Vec<_>>()).ok(),
    }
}

impl PruningStatistics for AllSlices<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        self.concat(column, Stat::Min)
    }
    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        self.concat(column, Stat::Max)
    }
    fn num_containers(&self) -> usize {
        self.segments.iter().map(|d| d.slices.len()).sum()
    }
    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        self.concat(column, Stat::Nulls)
    }
    fn row_counts(&self) -> Option<ArrayRef> {
        let counts: Vec<_> = self.segments.iter().map(|d| &d.row_counts).collect();
        concat_all(&counts)
    }
    fn contained(&self, _: &Column, _: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        None
    }
}

/// Decoded hot segments, by path; shared by every query of the process,
/// in a [`ByteLru`] (no global lock on lookups; least recently used
/// evicted, segments compaction replaced first).
pub struct SegmentCache {
    lru: ByteLru<String, Arc<Entry>>,
    store: Store,
    /// Paths being decoded, so concurrent misses start one load (sharded:
    /// a miss is on the query path).
    loading: DashSet<String>,
    /// One decode at a time: loads are background work and must not take
    /// every core from the queries that triggered them.
    decoders: tokio::sync::Semaphore,
}

/// Decoded size over file size assumed by [`SegmentCache::prewarm`]:
/// above the ~6x measured on the benchmark table with LZ4 (1.5 GB decoded
/// from 260 MB of files), so a prewarm does not overfill the cache and
/// evict what it just loaded.
pub const PREWARM_EXPANSION: u64 = 8;

struct Entry {
    segment: Arc<DecodedSegment>,
    /// The storage segment it was decoded from, if known. Once nothing holds
    /// that segment (compaction replaced it and the last query pinning it is
    /// done), no scan can ask for it again: the entry is dead.
    source: Option<Weak<Segment>>,
}

impl Entry {
    fn is_dead(&self) -> bool {
        self.source.as_ref().is_some_and(|s| s.strong_count() == 0)
    }
}

impl std::fmt::Debug for SegmentCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentCache")
            .field("lru", &self.lru)
            .finish()
    }
}

impl SegmentCache {
    /// A cache holding at most `capacity` bytes of decoded segments read
    /// from `store` (0: disabled).
    pub fn new(store: Store, capacity: usize) -> Self {
        Self {
            lru: ByteLru::new(capacity, capacity, 0),
            store,
            loading: DashSet::new(),
            decoders: tokio::sync::Semaphore::new(1),
        }
    }

    pub fn capacity(&self) -> usize {
        self.lru.capacity()
    }

    /// Bytes of decoded segments held now.
    pub fn usage(&self) -> usize {
        self.lru.usage()
    }

    /// Segments held now.
    pub fn entries(&self) -> usize {
        self.lru.entries()
    }

    /// Lookups so far: (hits, misses).
    pub fn lookups(&self) -> (u64, u64) {
        self.lru.lookups()
    }

    /// The decoded segment at `path`, if held.
    pub fn get(&self, path: &str) -> Option<Arc<DecodedSegment>> {
        self.lru.get(path).map(|e| e.segment.clone())
    }

    /// The decoded segment held for `path`, without counting a lookup or
    /// refreshing its place in the LRU order: for deciding what to read
    /// before [`Self::get`] records the reads.
    pub fn peek(&self, path: &str) -> Option<Arc<DecodedSegment>> {
        self.lru.peek(path).map(|e| e.segment.clone())
    }

    /// Bytes held for `path` (0 if none), for observability: unlike
    /// [`Self::get`] it counts no lookup and leaves the LRU order alone.
    pub fn held_bytes(&self, path: &str) -> usize {
        self.peek(path).map_or(0, |d| d.bytes())
    }

    /// Holds `segment` under `path`, evicting to make room. A segment
    /// larger than the cache is not held.
    pub fn insert(&self, path: String, segment: DecodedSegment) {
        self.admit(path, segment, None);
    }

    fn admit(&self, path: String, segment: DecodedSegment, source: Option<Weak<Segment>>) {
        let bytes = segment.bytes();
        let entry = Arc::new(Entry {
            segment: Arc::new(segment),
            source,
        });
        // Segments are few and large: those compaction replaced are
        // dropped now, not left holding memory until room is needed.
        self.lru.remove_dead(|e| e.is_dead());
        self.lru.insert(path, entry, bytes, |e| e.is_dead());
    }

    /// Queues the newest segments of every table for decoding in the
    /// background, as many as should fit, so that the first queries after a
    /// start do not read Parquet; returns how many were queued. Newest
    /// first, because dashboards look at recent days. What fits is estimated
    /// from file sizes: a decoded segment is taken to be
    /// [`PREWARM_EXPANSION`] times its file.
    pub fn prewarm(self: &Arc<Self>, db: &Db) -> usize {
        let mut all: Vec<(Arc<Segment>, SchemaRef)> = db
            .tables()
            .iter()
            .flat_map(|t| {
                let schema = view_schema(&t.schema);
                t.segments().into_iter().map(move |s| (s, schema.clone()))
            })
            .collect();
        all.sort_by_key(|(s, _)| std::cmp::Reverse(s.meta.max_time));
        let budget = self.capacity() as u64 / PREWARM_EXPANSION;
        let (mut queued, mut bytes) = (0, 0);
        for (segment, schema) in all {
            bytes += segment.meta.bytes;
            if bytes > budget {
                break;
            }
            self.load_later(segment, schema);
            queued += 1;
        }
        queued
    }

    /// Starts decoding `segment` in the background, unless it is held,
    /// being loaded, or larger than the whole cache. Needs a tokio runtime;
    /// without one (or disabled) it does nothing.
    pub fn load_later(self: &Arc<Self>, segment: Arc<Segment>, schema: SchemaRef) {
        if self.capacity() == 0 {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let path = segment.meta.path.clone();
        if self.lru.contains(&path) || !self.loading.insert(path.clone()) {
            return;
        }
        let this = self.clone();
        rt.spawn(async move {
            // `segment` is held until the load ends, so its file is not deleted under it.
            match this.load(&segment, schema).await {
                Ok(d) => this.admit(path.clone(), d, Some(Arc::downgrade(&segment))),
                Err(e) => tracing::warn!(path = %path, error = %e, "segment cache: decode failed"),
            }
            this.loading.remove(&path);
        });
    }

    async fn load(&self, segment: &Segment, schema: SchemaRef) -> DfResult<DecodedSegment> {
        let _permit = self.decoders.acquire().await.expect("never closed");
        let file = self
            .store
            .get(&Path::from(segment.meta.path.as_str()))
            .await
            .map_err(crate::error::to_df)?;
        tokio::task::spawn_blocking(move || DecodedSegment::decode(file, &schema))
            .await
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?
    }
}

#[cfg(test)]
mod tests;
