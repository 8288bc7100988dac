//! Partial aggregates of held segments, kept for the next query that asks
//! the same of the same segment.
//!
//! Why: a dashboard's queries come back again and again with the same
//! experiment and ranges of whole days, and each day is an immutable
//! segment. The part of a `GROUP BY` that reads a segment (DataFusion's
//! `Partial` aggregate: its groups and their mergeable states) then gives
//! the same rows every time, and only the rows still in the memstore, or a
//! day the range cuts, need reading. Druid's per-segment cache and Doris's
//! partition cache answer dashboards the same way.
//!
//! How: [`SegmentPartials`] replaces a `Partial` aggregate over a kept
//! plan's table scan (with or without the [`crate::dedup`] node between)
//! by a [`PartialsExec`](crate::provider), and splits a one-step (`Single`)
//! aggregate into such a node and a `Final` one: at each run it pins the
//! snapshot, and for each segment held decoded in the
//! [`SegmentCache`](crate::SegmentCache) looks up the partial rows under a
//! key made of the aggregate (its groups, functions, arguments and filters,
//! with the run's parameter values) and of the slices of the segment the
//! run reads with the conjuncts left on each (with their values). A
//! conjunct the slice statistics prove for a whole slice (a range that
//! covers the day) is not part of the key, so a week's range and the next
//! day's share six days. A miss computes the segment's partial rows alone
//! and keeps them; the memstore and segments read from Parquet are
//! aggregated as before. The `Final` aggregate above merges all of it.
//!
//! Nothing here is durable. An entry is keyed by its decoded segment's
//! address, which the entry's weak reference keeps from being reused, so
//! it is found only through that segment. When room is needed, entries of
//! segments no longer held go first, then the least recently used, within
//! `--partial-cache-bytes`. Kept plans (prepared statements run with a
//! generic plan, [`crate::reuse`]) use it, whose scans take the snapshot
//! when they run, and plans made with their values whose scan reads held
//! segments only: their scan is planned again when they run.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use arrow::array::RecordBatch;
use dashmap::DashMap;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_expr_common::physical_expr::is_volatile;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ColumnarValue, InputOrderMode};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};

use crate::dedup::DedupExec;
use crate::segment_cache::DecodedSegment;

/// Replaces each `Partial` aggregate over a kept plan's scan of a Kiln table
/// by one that keeps its per-segment rows; see the module docs.
#[derive(Debug, Default)]
pub struct SegmentPartials;

impl PhysicalOptimizerRule for SegmentPartials {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(agg) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            let single = *agg.mode() == AggregateMode::Single;
            if !(single || *agg.mode() == AggregateMode::Partial) || !cacheable(agg) {
                return Ok(Transformed::no(node));
            }
            let input = agg.input();
            let (dedup, mut scan) = match input.is::<DedupExec>() {
                true => (Some(input.clone()), input.children()[0].clone()),
                false => (None, input.clone()),
            };
            // The scans of a kept segment's partial rows are cooperative
            // themselves, and spread over the aggregate's partitions.
            if scan.is::<CooperativeExec>() || round_robin(&scan) {
                scan = scan.children()[0].clone();
            }
            // A one-partition plan aggregates in one step (`Single`): split
            // into the partial step, kept per segment, and the final one.
            let partial = match single {
                true => Arc::new(AggregateExec::try_new(
                    AggregateMode::Partial,
                    agg.group_expr().clone(),
                    agg.aggr_expr().to_vec(),
                    agg.filter_expr().to_vec(),
                    input.clone(),
                    agg.input_schema(),
                )?) as Arc<dyn ExecutionPlan>,
                false => node.clone(),
            };
            let Some(partials) = crate::provider::partials_over(partial.clone(), dedup, scan)?
            else {
                return Ok(Transformed::no(node));
            };
            if !single {
                return Ok(Transformed::yes(partials));
            }
            let merge = match partials.output_partitioning().partition_count() {
                1 => partials,
                _ => Arc::new(CoalescePartitionsExec::new(partials)) as _,
            };
            let partial = partial.downcast_ref::<AggregateExec>().expect("made above");
            Ok(Transformed::yes(Arc::new(AggregateExec::try_new(
                AggregateMode::Final,
                partial.group_expr().as_final(),
                partial.aggr_expr().to_vec(),
                partial.filter_expr().to_vec(),
                merge,
                agg.input_schema(),
            )?)))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "segment_partials"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Whether `plan` only spreads its input's batches over more partitions.
fn round_robin(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.downcast_ref::<RepartitionExec>().is_some_and(|r| {
        matches!(r.partitioning(), Partitioning::RoundRobinBatch(_)) && !r.preserve_order()
    })
}

/// Whether the partial rows of `agg` over a part of its input can be kept:
/// reading in no particular order,
/// with no limit on its groups, no dynamic filter (whose bounds its runs
/// share) and nothing volatile.
fn cacheable(agg: &AggregateExec) -> bool {
    let mut exprs = agg.group_expr().input_exprs();
    for (f, filter) in agg.aggr_expr().iter().zip(agg.filter_expr()) {
        exprs.extend(f.expressions());
        exprs.extend(f.order_bys().iter().map(|o| o.expr.clone()));
        exprs.extend(filter.clone());
    }
    agg.limit_options().is_none()
        && *agg.input_order_mode() == InputOrderMode::Linear
        && agg.dynamic_expressions_produced().is_empty()
        && !exprs.iter().any(is_volatile)
}

/// What identifies the partial rows of `agg` apart from its input: its
/// groups, functions, arguments, orders and filters, with each parameter
/// replaced by the value bound for this run.
pub(crate) fn aggregate_key(agg: &AggregateExec) -> Result<String> {
    let group = agg.group_expr();
    let mut key = format!("groups={:?};", group.groups());
    for e in group.input_exprs() {
        key += &format!("{:?};", bound(&e)?);
    }
    for (f, filter) in agg.aggr_expr().iter().zip(agg.filter_expr()) {
        key += &format!(
            "{}(distinct={},ignore_nulls={},reversed={}) -> {:?}",
            f.fun().name(),
            f.is_distinct(),
            f.ignore_nulls(),
            f.is_reversed(),
            f.field()
        );
        for e in f.expressions() {
            key += &format!(" arg {:?}", bound(&e)?);
        }
        for o in f.order_bys() {
            key += &format!(" order {:?} {:?}", bound(&o.expr)?, o.options);
        }
        if let Some(filter) = filter {
            key += &format!(" filter {:?}", bound(filter)?);
        }
        key += ";";
    }
    Ok(key)
}

/// `expr` with each call of a function of no arguments replaced by its
/// value now. In a kept plan such calls are its parameters (the plan has
/// no volatile functions, and DataFusion folds the immutable ones), which
/// read the value bound for the run.
pub(crate) fn bound(expr: &Arc<dyn PhysicalExpr>) -> Result<Arc<dyn PhysicalExpr>> {
    let one_row = RecordBatch::new_empty(Arc::new(arrow::datatypes::Schema::empty()));
    Ok(Arc::clone(expr)
        .transform_up(|e| {
            let nullary = e
                .downcast_ref::<ScalarFunctionExpr>()
                .is_some_and(|f| f.args().is_empty());
            if !nullary {
                return Ok(Transformed::no(e));
            }
            let value = match e.evaluate(&one_row)? {
                ColumnarValue::Scalar(v) => v,
                ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0)?,
            };
            Ok(Transformed::yes(Arc::new(Literal::new(value)) as _))
        })?
        .data)
}

/// An entry holds at most this share of the cache (1/8).
pub const MAX_ENTRY_SHARE: usize = 8;

/// Partial aggregate rows of held segments, bounded by bytes, least
/// recently used evicted. Lookups take no global lock.
#[derive(Debug)]
pub struct PartialCache {
    capacity: usize,
    /// By the decoded segment's address and the run's key.
    map: DashMap<(usize, String), Entry>,
    usage: AtomicUsize,
    tick: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Serializes inserts and evictions (never a lookup).
    admit: parking_lot::Mutex<()>,
}

#[derive(Debug)]
struct Entry {
    batches: Arc<[RecordBatch]>,
    bytes: usize,
    last_used: AtomicU64,
    /// The segment the rows are of. It also keeps the address in the key
    /// from being reused while the entry lives.
    segment: Weak<DecodedSegment>,
}

impl PartialCache {
    /// A cache of at most `capacity` bytes (0: off).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            map: DashMap::new(),
            usage: AtomicUsize::new(0),
            tick: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            admit: parking_lot::Mutex::new(()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes of partial rows held now.
    pub fn usage(&self) -> usize {
        self.usage.load(Ordering::Relaxed)
    }

    pub fn entries(&self) -> usize {
        self.map.len()
    }

    /// Lookups so far: (hits, misses).
    pub fn lookups(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    fn key(segment: &Arc<DecodedSegment>, key: &str) -> (usize, String) {
        (Arc::as_ptr(segment) as usize, key.to_string())
    }

    /// The rows kept for `segment` under `key`, if any.
    pub fn get(&self, segment: &Arc<DecodedSegment>, key: &str) -> Option<Arc<[RecordBatch]>> {
        // The key's address is the segment's: an entry's weak reference
        // keeps the address from being reused while the entry lives.
        let Some(e) = self.map.get(&Self::key(segment, key)) else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        self.hits.fetch_add(1, Ordering::Relaxed);
        e.last_used
            .store(self.tick.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        Some(e.batches.clone())
    }

    /// Keeps `batches` for `segment` under `key`, evicting the least
    /// recently used entries (and those of segments no longer held) to make
    /// room. Rows larger than a [`MAX_ENTRY_SHARE`]th of the cache are not
    /// kept: one wide group-by would evict every dashboard's rows.
    pub fn insert(&self, segment: &Arc<DecodedSegment>, key: &str, batches: Arc<[RecordBatch]>) {
        let bytes: usize = batches
            .iter()
            .map(RecordBatch::get_array_memory_size)
            .sum::<usize>()
            + key.len();
        if bytes > self.capacity / MAX_ENTRY_SHARE {
            return;
        }
        let _g = self.admit.lock();
        let key = Self::key(segment, key);
        self.remove(&key);
        if self.usage() + bytes > self.capacity {
            // Entries of segments no longer held first, then the least
            // recently used, down to 7/8 of the capacity in one walk: a
            // walk per insert would cost every miss of a working set
            // larger than the cache.
            let mut by_age: Vec<_> = self
                .map
                .iter()
                .map(|e| {
                    let alive = e.segment.strong_count() > 0;
                    (
                        (alive, e.last_used.load(Ordering::Relaxed)),
                        e.key().clone(),
                    )
                })
                .collect();
            by_age.sort_unstable_by_key(|(order, _)| *order);
            let room = self.capacity - self.capacity / 8;
            for (_, k) in by_age {
                if self.usage() + bytes <= room {
                    break;
                }
                self.remove(&k);
            }
        }
        self.usage.fetch_add(bytes, Ordering::Relaxed);
        let entry = Entry {
            batches,
            bytes,
            last_used: AtomicU64::new(self.tick.fetch_add(1, Ordering::Relaxed)),
            segment: Arc::downgrade(segment),
        };
        self.map.insert(key, entry);
    }

    fn remove(&self, key: &(usize, String)) {
        if let Some((_, old)) = self.map.remove(key) {
            self.usage.fetch_sub(old.bytes, Ordering::Relaxed);
        }
    }
}
