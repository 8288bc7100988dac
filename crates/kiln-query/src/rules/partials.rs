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
//! plan's table scan (with or without the [`crate::rules::dedup`] node between)
//! by a [`PartialsExec`](crate::scan), and splits a one-step (`Single`)
//! aggregate into such a node and a `Final` one: at each run it pins the
//! snapshot, and for each segment held decoded in the
//! [`SegmentCache`](crate::cache::SegmentCache) looks up the partial rows under a
//! key made of the aggregate (its groups, functions, arguments and filters,
//! with the run's parameter values) and of the slices of the segment the
//! run reads with the conjuncts left on each (with their values). A
//! conjunct the slice statistics prove for a whole slice (a range that
//! covers the day) is not part of the key, so a week's range and the next
//! day's share six days. A miss computes the segment's partial rows alone
//! and keeps them; the memstore and segments read from Parquet are
//! aggregated as before. The `Final` aggregate above merges all of it. A
//! read seen before (the same aggregate and values) also keeps and looks
//! up each segment's rows under the whole read, before any slice is
//! pruned ([`crate::scan`]'s `WholeRead`).
//!
//! Nothing here is durable. An entry is keyed by its decoded segment's
//! address, which the entry's weak reference keeps from being reused, so
//! it is found only through that segment. When room is needed, entries of
//! segments no longer held go first, then the least recently used, within
//! `--partial-cache-bytes`. Kept plans (prepared statements run with a
//! generic plan, [`crate::plan_cache`]) use it, whose scans take the snapshot
//! when they run, and plans made with their values whose scan reads held
//! segments only: their scan is planned again when they run.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_expr_common::physical_expr::is_volatile;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::InputOrderMode;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};

use crate::rules::dedup::DedupExec;

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
            let Some(partials) = crate::scan::partials_over(partial.clone(), dedup, scan, None)?
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
