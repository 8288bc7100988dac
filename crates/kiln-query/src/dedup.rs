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
//! vectorized kernel per key column, a few nanoseconds a row; a hash-table
//! probe with multi-column keys costs tens (the dashboard profile, ninth
//! session).
//!
//! `count` does depend on repeats, but only on how many there are: in run
//! mode each row passed on carries the length of the run of equal rows it
//! starts ([`RUN_ROWS`]), and the counts become sums of those ([`runs`]).
//! So `count(*)` beside `count(DISTINCT user_id)`, or alone, collapses too.
//!
//! [`DropRepeats`] puts a [`DedupExec`] under each such aggregation that
//! reads raw rows. On rows in no such order it drops almost nothing, so each
//! stream checks its first [`PROBE_ROWS`] rows and steps aside (passes
//! batches through untouched) if fewer than a quarter were repeats.

use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, BooleanBufferBuilder, Int64Array, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::compute::kernels::cmp::distinct;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_expr_common::physical_expr::is_volatile;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, ReplaceChildrenOptions,
    apply_expression_roots, replace_children_if_necessary,
};
use futures::StreamExt;

mod changes;
mod runs;

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
            let Some(Repeatable { keys, counts }) = repeatable(agg).filter(|_| raw_rows) else {
                return Ok(Transformed::no(node));
            };
            if !counts.contains(&true) {
                let input = Arc::new(DedupExec::new(agg.input().clone(), keys, false)?);
                return Ok(Transformed::yes(replace_children_if_necessary(
                    node,
                    vec![input],
                )?));
            }
            // Each kept row carries the length of its run; counts sum them.
            let input: Arc<dyn ExecutionPlan> =
                Arc::new(DedupExec::new(agg.input().clone(), keys, true)?);
            let schema = input.schema();
            let run_rows = Arc::new(Column::new(RUN_ROWS, schema.fields().len() - 1));
            let aggr = agg
                .aggr_expr()
                .iter()
                .zip(counts)
                .map(|(f, count)| match count {
                    true => runs::count_over_runs(f, run_rows.clone(), schema.clone()),
                    false => Ok(f.clone()),
                })
                .collect::<Result<Vec<_>>>()?;
            let rebuilt = AggregateExec::try_new(
                *agg.mode(),
                agg.group_expr().clone(),
                aggr,
                agg.filter_expr().to_vec(),
                input,
                schema,
            )?
            .with_limit_options(agg.limit_options());
            Ok(Transformed::yes(Arc::new(rebuilt)))
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

/// What an aggregation needs for a row equal to the one before it to be
/// dropped (or, for counts, folded into it).
struct Repeatable {
    /// The columns a repeat must match: the group keys, then each
    /// aggregate's arguments and filter.
    keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Per aggregate, whether it is a `count` that needs the run lengths.
    counts: Vec<bool>,
}

/// `None` when some aggregate depends on each repeat (`sum(x)`) or is
/// ordered, the grouping has sets, or a key is volatile or nested.
/// `DISTINCT` aggregates, `min` and `max` ignore repeats; `count` sums the
/// run lengths instead ([`runs`]).
fn repeatable(agg: &AggregateExec) -> Option<Repeatable> {
    let group = agg.group_expr();
    if !group.is_single() || group.is_empty() || !may_repeat(agg.input()) {
        return None;
    }
    let mut keys = group.input_exprs();
    let mut counts = vec![];
    for (f, filter) in agg.aggr_expr().iter().zip(agg.filter_expr()) {
        if !f.order_bys().is_empty() {
            return None;
        }
        let count = !f.is_distinct() && f.fun().name() == "count";
        if count {
            keys.extend(runs::counted_args(f));
        } else if f.is_distinct() || matches!(f.fun().name(), "min" | "max") {
            keys.extend(f.expressions());
        } else {
            return None;
        }
        keys.extend(filter.clone());
        counts.push(count);
    }
    // A volatile key evaluated twice (here and in the group-by) could
    // differ; arrow's `distinct` kernel compares no nested values.
    let schema = agg.input().schema();
    let comparable =
        |k: &Arc<dyn PhysicalExpr>| !is_volatile(k) && k.data_type(&schema).is_ok_and(|t| flat(&t));
    keys.iter()
        .all(comparable)
        .then_some(Repeatable { keys, counts })
}

/// Whether `plan`'s rows may hold runs of repeats: not a [`DedupExec`]'s
/// and not a group-by's (under a projection, too), whose rows are unique on
/// its keys (the outer half of `count(DISTINCT x)`).
fn may_repeat(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let plan = match plan.downcast_ref::<ProjectionExec>() {
        Some(p) => p.input(),
        None => plan,
    };
    !plan.is::<DedupExec>() && !plan.is::<AggregateExec>()
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

/// Name of the column a [`DedupExec`] in run mode appends: how many rows
/// of its input each row it passes on stands for.
pub const RUN_ROWS: &str = "__kiln_run_rows";

/// Passes its input's rows on, less each row whose `keys` all equal the
/// previous row's. Order and partitioning are its input's; so is the
/// schema, plus [`RUN_ROWS`] in run mode.
#[derive(Debug)]
pub struct DedupExec {
    input: Arc<dyn ExecutionPlan>,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Whether each row passed on carries its run's length ([`RUN_ROWS`]).
    runs: bool,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl DedupExec {
    pub fn new(
        input: Arc<dyn ExecutionPlan>,
        keys: Vec<Arc<dyn PhysicalExpr>>,
        runs: bool,
    ) -> Result<Self> {
        let properties = match runs {
            false => input.properties().clone(),
            true => {
                let mut fields = input.schema().fields().to_vec();
                fields.push(Arc::new(Field::new(RUN_ROWS, DataType::Int64, false)));
                let schema = Arc::new(Schema::new_with_metadata(
                    fields,
                    input.schema().metadata().clone(),
                ));
                // The input's columns keep their places, so its orderings hold.
                let p = input.properties();
                let orderings = p.equivalence_properties().oeq_class().iter().cloned();
                Arc::new(PlanProperties::new(
                    EquivalenceProperties::new_with_orderings(schema, orderings),
                    p.output_partitioning().clone(),
                    p.emission_type,
                    p.boundedness,
                ))
            }
        };
        Ok(Self {
            input,
            keys,
            runs,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }
}

impl DisplayAs for DedupExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let keys: Vec<String> = self.keys.iter().map(|k| k.to_string()).collect();
        write!(f, "DedupExec: keys=[{}]", keys.join(", "))?;
        if self.runs {
            write!(f, ", runs={RUN_ROWS}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for DedupExec {
    fn name(&self) -> &str {
        "DedupExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
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
            self.runs,
        )?))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let mut state = Repeats {
            keys: self.keys.clone(),
            runs: self.runs.then(|| self.schema()),
            last: None,
            seen: 0,
            dropped: 0,
            on: true,
            baseline: BaselineMetrics::new(&self.metrics, partition),
            dropped_metric: MetricBuilder::new(&self.metrics).counter("repeats_dropped", partition),
        };
        let schema = self.schema();
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
    /// In run mode, the output schema (the input's plus [`RUN_ROWS`]).
    runs: Option<SchemaRef>,
    /// The keys of the previous batch's last row, as one-row arrays. Never
    /// kept in run mode: a run that goes on in the next batch is passed on
    /// once more there, as its length so far is already out.
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
            return self.with_runs(batch, None);
        }
        let _timer = self.baseline.elapsed_compute().timer();
        let keys = self
            .keys
            .iter()
            .map(|k| k.evaluate(&batch)?.into_array(n))
            .collect::<Result<Vec<_>>>()?;
        let keep = self.new_rows(&keys)?;
        let kept = keep.true_count();
        if self.runs.is_none() {
            self.last = Some(keys.iter().map(|k| k.slice(n - 1, 1)).collect());
        }
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
            return self.with_runs(batch, None);
        }
        let filtered = filter_record_batch(&batch, &keep)?;
        self.with_runs(filtered, Some(&keep))
    }

    /// In run mode, `batch` with [`RUN_ROWS`]: for each row `keep` kept,
    /// the rows from it to the next kept one (all ones without `keep`).
    fn with_runs(&self, batch: RecordBatch, keep: Option<&BooleanArray>) -> Result<RecordBatch> {
        let Some(schema) = &self.runs else {
            return Ok(batch);
        };
        let runs: Int64Array = match keep {
            None => Int64Array::from_value(1, batch.num_rows()),
            Some(keep) => {
                let starts: Vec<usize> = keep.values().set_indices().collect();
                let ends = starts.iter().skip(1).copied().chain([keep.len()]);
                starts
                    .iter()
                    .zip(ends)
                    .map(|(s, e)| (e - s) as i64)
                    .collect()
            }
        };
        let mut columns = batch.columns().to_vec();
        columns.push(Arc::new(runs));
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
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
