//! [`PartialsExec`]: a `Partial` aggregate over a table scan that keeps
//! each held segment's rows ([`crate::partials`] says why).
//!
//! The scan is a kept plan's [`LazyScan`], or one made from a scan planned
//! with its values (`SliceScan::origin`). At its first `execute` of a run
//! it pins the snapshot as [`LazyScan`] does, but keeps the held segments
//! apart: each is a unit whose partial rows come from the [`PartialCache`]
//! or are computed over that segment alone (the aggregate, and the dedup
//! node if the plan has one, over a scan of its kept slices) and then
//! kept.
//!
//! A read seen before (a [`WholeRead`]) keeps each held segment's rows
//! under its whole key too, and looks each held segment up by it first:
//! pruning a segment's slices and looking its rows up by the slices read
//! cost more than the aggregate's merge when a dashboard repeats a range,
//! so the segments found are not pruned at all. A cube's raw reads are
//! looked up so before they are planned
//! ([`KilnTable::aggregate_pinned`](super::KilnTable::aggregate_pinned));
//! any other read here, at each run.
//!
//! The rest (memstore rows, segments read from Parquet) goes through the
//! aggregate as one plan. Output partition `p` emits the units `p`, `p +
//! n`, ... and the rest's partitions `p`, `p + n`, ...

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock};

use arc_swap::ArcSwapOption;
use arrow::array::RecordBatch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, ScalarValue};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::coop::make_cooperative;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ColumnarValue, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
    PlanProperties, common::collect, displayable, replace_children_if_necessary,
};
use futures::{StreamExt, TryStreamExt};
use parking_lot::Mutex;

use super::KilnTable;
use super::lazy::LazyScan;
use super::slices::{Filtered, SliceScan};
use super::snapshot::ParquetFilter;
use crate::cache::partials::SliceRun;
use crate::cache::segment::DecodedSegment;
use crate::cache::{AggregateKey, FunctionKey, PartialCache, PartialKey};
use crate::pruning::Residual;

/// The node replacing `agg` (a `Partial` aggregate over `dedup`, if any,
/// over `scan`), or None if `scan` is neither a kept plan's scan of a Kiln
/// table nor a scan of held segments planned with its values, the caches
/// are off, or it has a limit. With `whole` (a cube's read, looked up
/// whole by its caller), each held segment's rows are also kept under that
/// read's [`PartialKey::whole`]; without, the node finds its own whole
/// read at each run, if it was seen before.
pub(crate) fn partials_over(
    agg: Arc<dyn ExecutionPlan>,
    dedup: Option<Arc<dyn ExecutionPlan>>,
    scan: Arc<dyn ExecutionPlan>,
    whole: Option<WholeRead>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    // A kept plan's scan, or one planned with its values from held
    // segments, planned again at each run.
    let scan = match scan.downcast_ref::<SliceScan>() {
        Some(s) => match &s.origin {
            Some((table, spec)) => Arc::new(LazyScan::new(table.clone(), spec.clone())?) as _,
            None => return Ok(None),
        },
        None => scan,
    };
    let Some(lazy) = scan.downcast_ref::<LazyScan>() else {
        return Ok(None);
    };
    let caches = &lazy.table.caches;
    if caches.segments.capacity() == 0 || !caches.partials.enabled() || lazy.spec.limit.is_some() {
        return Ok(None);
    }
    Ok(Some(Arc::new(PartialsExec {
        properties: agg.properties().clone(),
        agg,
        dedup,
        scan,
        whole,
        last_key: Arc::default(),
        metrics: ExecutionPlanMetricsSet::new(),
        planned: Mutex::new(None),
    })))
}

/// A read whose held segments' rows are looked up whole
/// ([`PartialKey::whole`]) before their slices are pruned: the key of the
/// aggregate and of the read's predicate, its values bound, the same for
/// every segment.
#[derive(Debug, Clone)]
pub(crate) struct WholeRead(pub PartialKey);

impl WholeRead {
    pub fn key(&self) -> PartialKey {
        self.0.clone()
    }
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct PartialsExec {
    /// The aggregate as planned, over `dedup` or `scan`: a template, never
    /// executed itself.
    agg: Arc<dyn ExecutionPlan>,
    dedup: Option<Arc<dyn ExecutionPlan>>,
    /// A [`LazyScan`].
    scan: Arc<dyn ExecutionPlan>,
    /// A cube's read, looked up whole by its caller; None: any other.
    whole: Option<WholeRead>,
    /// The aggregate's key of a recent run, shared by the plan's runs
    /// ([`Self::interned`]).
    last_key: Arc<ArcSwapOption<AggregateKey>>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    /// This run's units, planned by the first partition to execute.
    planned: Mutex<Option<Arc<Run>>>,
}

/// What one run reads.
#[derive(Debug)]
struct Run {
    units: Vec<Unit>,
    /// The aggregate over the memstore rows and the segments read from
    /// Parquet, if any.
    rest: Option<Arc<dyn ExecutionPlan>>,
}

#[derive(Debug, Clone)]
enum Unit {
    /// A held segment's rows, kept from an earlier run.
    Kept(Arc<[RecordBatch]>),
    /// A held segment's rows to compute (and keep, under `key` and the
    /// whole read's key, if any).
    Compute {
        segment: Arc<DecodedSegment>,
        key: PartialKey,
        whole: Option<PartialKey>,
        batches: Vec<Filtered>,
    },
}

impl PartialsExec {
    fn lazy(&self) -> &LazyScan {
        self.scan
            .downcast_ref::<LazyScan>()
            .expect("made over a LazyScan")
    }

    /// The aggregate (and dedup node) over `input` in place of the scan.
    fn over(&self, input: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        let input = match &self.dedup {
            Some(d) => replace_children_if_necessary(d.clone(), vec![input])?,
            None => input,
        };
        replace_children_if_necessary(self.agg.clone(), vec![input])
    }

    /// `key`, or the equal key of a recent run of this plan: the entries
    /// that run kept hold the same, so a lookup that finds one compares
    /// the aggregate by address, not expression by expression.
    fn interned(&self, key: AggregateKey) -> Arc<AggregateKey> {
        match self.last_key.load_full() {
            Some(last) if *last == key => last,
            _ => {
                let key = Arc::new(key);
                self.last_key.store(Some(key.clone()));
                key
            }
        }
    }

    /// This run's units, with the parameters bound now.
    fn run(&self) -> Result<Arc<Run>> {
        let mut planned = self.planned.lock();
        if let Some(r) = &*planned {
            return Ok(r.clone());
        }
        let lazy = self.lazy();
        let spec = &lazy.spec;
        let cache: &PartialCache = &lazy.table.caches.partials;
        let agg = self
            .agg
            .downcast_ref::<AggregateExec>()
            .expect("made over an AggregateExec");
        // A cube's read carries its aggregate's key, made once per cube.
        let aggregate = match &self.whole {
            Some(read) => read.0.aggregate().clone(),
            None => self.interned(aggregate_key(agg, spec.projection.clone())?),
        };
        // A cube's read was looked up whole before it was planned; any
        // other read seen before is looked up whole here, before its
        // slices are pruned: only the held segments not found are planned.
        let mut units = vec![];
        let (table, whole) = match &self.whole {
            Some(read) => (lazy.table.clone(), Some(read.clone())),
            None => match lazy.table.whole_read(&aggregate, spec.predicate.as_ref())? {
                None => (lazy.table.clone(), None),
                Some(read) => {
                    let table = &lazy.table;
                    let now = table
                        .pinned
                        .clone()
                        .unwrap_or_else(|| table.table.snapshot());
                    let (kept, rest) = table.kept_whole(now, &read, lazy.pruning.as_deref());
                    units.extend(kept.into_iter().map(Unit::Kept));
                    let table = KilnTable {
                        pinned: Some(rest),
                        ..table.clone()
                    };
                    (table, Some(read))
                }
            },
        };
        let mut scan = table.scan_snapshot(spec, lazy.pruning.as_deref(), ParquetFilter::Own)?;
        if let Some(read) = &whole {
            // Held segments the filter prunes whole (on a range's edge by
            // their times, but without a row of it): kept as such too, or
            // the next read would plan this again to find nothing.
            for d in std::mem::take(&mut scan.pruned) {
                cache.insert(&d, read.key(), Arc::from([]));
            }
        }
        let conjuncts = spec.conjuncts.as_deref();
        // Each set of conjuncts' filter, and the same with its values bound
        // (for the key), made once.
        let mut filters: HashMap<Residual, Option<Arc<dyn PhysicalExpr>>> = HashMap::new();
        let mut bound_filters: HashMap<Residual, Option<Arc<dyn PhysicalExpr>>> = HashMap::new();
        for held in std::mem::take(&mut scan.held) {
            let mut slices: Vec<SliceRun> = vec![];
            let mut last: Option<(usize, Residual)> = None;
            for (i, left) in &held.kept {
                if !bound_filters.contains_key(left) {
                    let f = conjuncts.and_then(|c| c.filter(*left));
                    bound_filters.insert(*left, f.as_ref().map(bound).transpose()?);
                    filters.insert(*left, f);
                }
                // Runs of neighbouring slices with the same conjuncts left.
                match (&mut slices.last_mut(), last) {
                    (Some((run, _)), Some((prev, prev_left)))
                        if *i == prev + 1 && prev_left == *left =>
                    {
                        run.end = i + 1;
                    }
                    _ => slices.push((*i..i + 1, bound_filters[left].clone())),
                }
                last = Some((*i, *left));
            }
            let key = PartialKey::new(aggregate.clone(), slices);
            let whole = whole.as_ref().map(WholeRead::key);
            units.push(match cache.get(&held.segment, key.clone()) {
                Some(rows) => {
                    if let Some(whole) = whole {
                        cache.insert(&held.segment, whole, rows.clone());
                    }
                    Unit::Kept(rows)
                }
                None => {
                    // Every set of conjuncts left here has its filter made above.
                    let batches = held
                        .segment
                        .merged(held.kept)
                        .into_iter()
                        .map(|(b, left)| (b, filters[&left].clone()))
                        .collect();
                    Unit::Compute {
                        segment: held.segment,
                        key,
                        whole,
                        batches,
                    }
                }
            });
        }
        let rest = match scan.files.is_none() && scan.in_memory.is_empty() {
            true => None,
            false => Some(self.over(table.plan_scan(spec, scan)?)?),
        };
        let run = Arc::new(Run { units, rest });
        *planned = Some(run.clone());
        Ok(run)
    }

    /// A unit's rows: kept, or computed over the segment alone and kept.
    fn unit_stream(
        &self,
        unit: Unit,
        context: Arc<TaskContext>,
        counts: (Count, Count),
    ) -> Result<SendableRecordBatchStream> {
        let schema = self.properties.eq_properties.schema().clone();
        let (segment, key, whole, batches) = match unit {
            Unit::Kept(rows) => {
                counts.0.add(1);
                let rows: Vec<_> = rows.iter().cloned().map(Ok).collect();
                return Ok(Box::pin(RecordBatchStreamAdapter::new(
                    schema,
                    futures::stream::iter(rows),
                )));
            }
            Unit::Compute {
                segment,
                key,
                whole,
                batches,
            } => (segment, key, whole, batches),
        };
        counts.1.add(1);
        let lazy = self.lazy();
        let input = Arc::new(SliceScan::new(
            batches,
            1,
            lazy.properties().eq_properties.schema().clone(),
            lazy.spec.projection.clone(),
            None,
            lazy.spec.predicate.clone(),
        ));
        let plan = self.over(input)?;
        let caches = lazy.table.caches.clone();
        let rows = async move {
            let rows: Arc<[RecordBatch]> = collect(plan.execute(0, context)?).await?.into();
            caches.partials.insert(&segment, key, rows.clone());
            if let Some(whole) = whole {
                caches.partials.insert(&segment, whole, rows.clone());
            }
            Ok::<_, datafusion::error::DataFusionError>(futures::stream::iter(
                rows.iter().cloned().map(Ok).collect::<Vec<_>>(),
            ))
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::once(rows).try_flatten(),
        )))
    }
}

impl DisplayAs for PartialsExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "SegmentPartials: {}",
            displayable(self.agg.as_ref()).one_line().to_string().trim()
        )?;
        if self.dedup.is_some() {
            write!(f, ", repeats dropped")?;
        }
        write!(
            f,
            ", over {}",
            displayable(self.scan.as_ref())
                .one_line()
                .to_string()
                .trim()
        )
    }
}

impl ExecutionPlan for PartialsExec {
    fn name(&self) -> &str {
        "PartialsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        for node in [Some(&self.agg), self.dedup.as_ref(), Some(&self.scan)]
            .into_iter()
            .flatten()
        {
            if node.apply_expressions(f)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
        _: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn with_new_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    /// A fresh node for the next run: it will take its own snapshot.
    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self {
            agg: self.agg.clone(),
            dedup: self.dedup.clone(),
            scan: self.scan.clone(),
            whole: self.whole.clone(),
            last_key: self.last_key.clone(),
            properties: self.properties.clone(),
            metrics: ExecutionPlanMetricsSet::new(),
            planned: Mutex::new(None),
        }))
    }

    fn metrics(&self) -> Option<datafusion::physical_plan::metrics::MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let run = self.run()?;
        let n = self.properties.output_partitioning().partition_count();
        let kept = MetricBuilder::new(&self.metrics).counter("segments_kept", partition);
        let computed = MetricBuilder::new(&self.metrics).counter("segments_computed", partition);
        let mut streams = vec![];
        for unit in run.units.iter().skip(partition).step_by(n) {
            let counts = (kept.clone(), computed.clone());
            streams.push(self.unit_stream(unit.clone(), context.clone(), counts)?);
        }
        if let Some(rest) = &run.rest {
            let parts = rest.output_partitioning().partition_count();
            for p in (partition..parts).step_by(n) {
                streams.push(rest.execute(p, context.clone())?);
            }
        }
        let schema = self.properties.eq_properties.schema().clone();
        Ok(make_cooperative(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::iter(streams).flatten(),
        ))))
    }
}

/// What identifies the partial rows of `agg` over the columns
/// `projection` apart from its input: its groups, functions, arguments,
/// orders and filters, with each parameter replaced by the value bound for
/// this run.
pub(crate) fn aggregate_key(
    agg: &AggregateExec,
    projection: Option<Vec<usize>>,
) -> Result<AggregateKey> {
    let group = agg.group_expr();
    let bound_all =
        |es: Vec<Arc<dyn PhysicalExpr>>| es.iter().map(bound).collect::<Result<Vec<_>>>();
    let mut functions = Vec::with_capacity(agg.aggr_expr().len());
    for (f, filter) in agg.aggr_expr().iter().zip(agg.filter_expr()) {
        functions.push(FunctionKey {
            name: f.fun().name().to_string(),
            distinct: f.is_distinct(),
            ignore_nulls: f.ignore_nulls(),
            reversed: f.is_reversed(),
            field: f.field(),
            args: bound_all(f.expressions())?,
            order: f
                .order_bys()
                .iter()
                .map(|o| Ok((bound(&o.expr)?, o.options)))
                .collect::<Result<_>>()?,
            filter: filter.as_ref().map(bound).transpose()?,
        });
    }
    Ok(AggregateKey::new(
        group.groups().to_vec(),
        bound_all(group.input_exprs())?,
        functions,
        projection,
    ))
}

/// The settings every function call of a key carries (see [`bound`]).
static KEY_SETTINGS: LazyLock<Arc<ConfigOptions>> =
    LazyLock::new(|| Arc::new(ConfigOptions::default()));

/// `expr` as a key: each call of a function of no arguments replaced by its
/// value now (in a kept plan such calls are its parameters: the plan has no
/// volatile functions, and DataFusion folds the immutable ones, so they
/// read the value bound for the run), and every other call carrying the
/// same settings. DataFusion compares two calls' session settings entry by
/// entry, which is costly, and plans that differ only in their share of
/// the cores must share keys; the settings are not part of a call's hash
/// either.
pub(crate) fn bound(expr: &Arc<dyn PhysicalExpr>) -> Result<Arc<dyn PhysicalExpr>> {
    let one_row = RecordBatch::new_empty(Arc::new(arrow::datatypes::Schema::empty()));
    Ok(Arc::clone(expr)
        .transform_up(|e| {
            let Some(f) = e.downcast_ref::<ScalarFunctionExpr>() else {
                return Ok(Transformed::no(e));
            };
            if !f.args().is_empty() {
                let call = ScalarFunctionExpr::new(
                    f.name(),
                    Arc::new(f.fun().clone()),
                    f.args().to_vec(),
                    f.return_field(one_row.schema_ref())?,
                    KEY_SETTINGS.clone(),
                );
                return Ok(Transformed::yes(Arc::new(call) as _));
            }
            let value = match e.evaluate(&one_row)? {
                ColumnarValue::Scalar(v) => v,
                ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0)?,
            };
            Ok(Transformed::yes(Arc::new(Literal::new(value)) as _))
        })?
        .data)
}

#[cfg(test)]
mod tests;
