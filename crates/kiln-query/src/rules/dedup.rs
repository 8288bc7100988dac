//! Repeats dropped before a GROUP BY that computes nothing but its groups.
//!
//! A `GROUP BY` without aggregate functions (`SELECT DISTINCT`, or the
//! inner half DataFusion makes of `count(DISTINCT x)`) gives the same groups
//! if a row equal to the row just before it on every key is dropped: that
//! group already exists. So do `DISTINCT` aggregates, `min` and `max`, if
//! the row also repeats their arguments and filters. On a table whose sort
//! key holds the group keys (`sort_key = 'experiment_id,user_id'` grouped
//! by `arm, user_id`), the rows of one user in one segment sit together, so
//! most rows are such repeats. Comparing each row with the one before is a
//! tight loop per key column ([`changes`]), a nanosecond or two a row; a
//! hash-table probe with multi-column keys costs tens (the dashboard
//! profile of 2026-11-23, docs/benchmark-history.md).
//!
//! [`DropRepeats`] puts a [`DedupExec`] under each such aggregation that
//! reads raw rows. On rows in no such order it drops almost nothing, so each
//! stream checks its first [`PROBE_ROWS`] rows and steps aside (passes
//! batches through untouched) if fewer than a quarter were repeats.

use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, BooleanBufferBuilder, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::compute::kernels::cmp::distinct;
use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr_common::physical_expr::is_volatile;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, ReplaceChildrenOptions,
    apply_expression_roots, replace_children_if_necessary,
};
use futures::StreamExt;

mod changes;

/// Rows a stream checks before it decides whether dropping repeats pays.
pub const PROBE_ROWS: usize = 64 * 1024;

/// Puts a [`DedupExec`] under every aggregation that reads raw rows
/// (`Partial` or `Single` mode) and whose aggregates ignore repeats: none
/// at all, `DISTINCT` ones, `min` and `max`.
#[derive(Debug, Default)]
pub struct DropRepeats;

impl PhysicalOptimizerRule for DropRepeats {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(agg) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            let raw_rows = matches!(
                agg.mode(),
                AggregateMode::Partial | AggregateMode::Single | AggregateMode::SinglePartitioned
            );
            let Some(keys) = repeat_blind(agg).filter(|_| raw_rows) else {
                return Ok(Transformed::no(node));
            };
            let input = Arc::new(DedupExec::new(agg.input().clone(), keys));
            Ok(Transformed::yes(replace_children_if_necessary(
                node,
                vec![input],
            )?))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "drop_repeats"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The columns a repeat must match for `agg` to give the same answer
/// without it: the group keys, then each aggregate's arguments and filter.
/// `None` when some aggregate counts repeats (`count(*)`, `sum(x)`) or is
/// ordered, the grouping has sets, or a key is volatile or nested.
fn repeat_blind(agg: &AggregateExec) -> Option<Vec<Arc<dyn PhysicalExpr>>> {
    let group = agg.group_expr();
    if !group.is_single() || group.is_empty() || agg.input().is::<DedupExec>() {
        return None;
    }
    let mut keys = group.input_exprs();
    for (f, filter) in agg.aggr_expr().iter().zip(agg.filter_expr()) {
        let blind = f.is_distinct() || matches!(f.fun().name(), "min" | "max");
        if !blind || !f.order_bys().is_empty() {
            return None;
        }
        keys.extend(f.expressions());
        keys.extend(filter.clone());
    }
    // A volatile key evaluated twice (here and in the group-by) could
    // differ; arrow's `distinct` kernel compares no nested values.
    let schema = agg.input().schema();
    let comparable =
        |k: &Arc<dyn PhysicalExpr>| !is_volatile(k) && k.data_type(&schema).is_ok_and(|t| flat(&t));
    keys.iter().all(comparable).then_some(keys)
}

/// Whether arrow's `distinct` kernel compares values of type `t`: no
/// lists, structs, maps or unions, nor dictionaries or run-end encodings
/// of them.
fn flat(t: &DataType) -> bool {
    match t {
        DataType::Dictionary(_, v) => !v.is_nested() && !matches!(**v, DataType::Dictionary(..)),
        DataType::RunEndEncoded(..) => false,
        t => !t.is_nested(),
    }
}

/// Passes its input's rows on, less each row whose `keys` all equal the
/// previous row's. Order, partitioning and schema are its input's.
#[derive(Debug)]
pub struct DedupExec {
    input: Arc<dyn ExecutionPlan>,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    metrics: ExecutionPlanMetricsSet,
}

impl DedupExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, keys: Vec<Arc<dyn PhysicalExpr>>) -> Self {
        Self {
            input,
            keys,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for DedupExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let keys: Vec<String> = self.keys.iter().map(|k| k.to_string()).collect();
        write!(f, "DedupExec: keys=[{}]", keys.join(", "))
    }
}

impl ExecutionPlan for DedupExec {
    fn name(&self) -> &str {
        "DedupExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        apply_expression_roots(&self.keys, f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        #[expect(deprecated)]
        self.with_new_children(children)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return internal_err!("DedupExec has one child, got {}", children.len());
        }
        Ok(Arc::new(Self::new(
            children.swap_remove(0),
            self.keys.clone(),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let mut state = Repeats {
            keys: self.keys.clone(),
            last: None,
            seen: 0,
            dropped: 0,
            on: true,
            baseline: BaselineMetrics::new(&self.metrics, partition),
            dropped_metric: MetricBuilder::new(&self.metrics).counter("repeats_dropped", partition),
        };
        let schema = input.schema();
        let out = input.map(move |batch| state.batch(batch?));
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, out)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// One stream's state: the last row's keys and whether dropping pays.
struct Repeats {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The keys of the previous batch's last row, as one-row arrays.
    last: Option<Vec<ArrayRef>>,
    seen: usize,
    dropped: usize,
    /// False once the first [`PROBE_ROWS`] rows held too few repeats.
    on: bool,
    baseline: BaselineMetrics,
    dropped_metric: Count,
}

impl Repeats {
    fn batch(&mut self, batch: RecordBatch) -> Result<RecordBatch> {
        let n = batch.num_rows();
        if !self.on || n == 0 {
            self.baseline.record_output(n);
            return Ok(batch);
        }
        let _timer = self.baseline.elapsed_compute().timer();
        let keys = self
            .keys
            .iter()
            .map(|k| k.evaluate(&batch)?.into_array(n))
            .collect::<Result<Vec<_>>>()?;
        let keep = self.new_rows(&keys)?;
        let kept = keep.true_count();
        self.last = Some(keys.iter().map(|k| k.slice(n - 1, 1)).collect());
        let probing = self.seen < PROBE_ROWS;
        self.seen += n;
        self.dropped += n - kept;
        self.dropped_metric.add(n - kept);
        // Decided once, as the probe ends.
        if probing && self.seen >= PROBE_ROWS && self.dropped * 4 < self.seen {
            self.on = false;
            self.last = None;
        }
        self.baseline.record_output(kept);
        if kept == n {
            return Ok(batch);
        }
        Ok(filter_record_batch(&batch, &keep)?)
    }

    /// True for each row whose keys differ from the row before it (the
    /// first row is compared with the previous batch's last).
    fn new_rows(&self, keys: &[ArrayRef]) -> Result<BooleanArray> {
        let n = keys.first().map_or(0, |k| k.len());
        let mut first = self.last.is_none();
        if let Some(last) = &self.last {
            for (key, last) in keys.iter().zip(last) {
                first = first || distinct(&key.slice(0, 1), last)?.value(0);
            }
        }
        let mut mask = BooleanBufferBuilder::new(n);
        mask.append(first);
        if let Some(rest) = changes::any_changes(keys)? {
            mask.append_buffer(&rest);
        }
        Ok(BooleanArray::new(mask.finish(), None))
    }
}

#[cfg(test)]
mod tests;
