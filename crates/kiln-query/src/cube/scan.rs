//! Reading a cube: the [`CubeScan`] plan node a rewritten query reads, and
//! [`CubeScanExec`], which at execution pins one snapshot of the table and
//! returns, in the cube's schema (dimensions, then states):
//! - the parts of the segments that have one, each decoded once and kept
//!   ([`super::Cubes`]), merged to the dimensions the query reads
//!   ([`super::rollup`]), limited to the whole time buckets of the query's
//!   range and to the rows passing its filters over dimensions (evaluated
//!   here, on slices of the kept parts: a filter above the scan would copy
//!   every row's states);
//! - the same for the memstore's batches, whose states are made on first
//!   read and kept until their rows are flushed: a large batch's with it
//!   (a merged batch's from its inputs' states and its other rows), a
//!   day's small batches' together, with the newest of them
//!   ([`super::mem`]);
//! - the same states computed from raw rows for everything else: segments
//!   without a part and the edges of a range that cuts a bucket, read
//!   with the query's own filters (when
//!   the same filter values repeat, held segments' states are kept in the
//!   partial-aggregate cache under them, and the next query finds them by
//!   one lookup per segment, before planning any read).
//!
//! So an answer includes every row acknowledged before the snapshot, part
//! or not. The snapshot is taken at execution, so a kept (generic) plan
//! reads the table as it is when it runs; the node's expressions (filters
//! and range bounds) are visible to the plan, so a kept plan's parameters
//! reach them.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DFSchema, DFSchemaRef, Result, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlan, Operator, UserDefinedLogicalNodeCore};
use datafusion::physical_expr::expressions::{BinaryExpr, Column};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::projection::{ProjectionExec, all_alias_free_columns};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};
use kiln_storage::memstore::{Days, MemBatch};
use kiln_storage::{Segment, TableSnapshot};

mod select;

use select::{Bound, Cut, bound, boundary, key_values, outside_buckets};

use super::Cubes;
use super::plan::CubePlan;
use super::unit::Unit;
use crate::scan::{KilnTable, narrowed};

/// In-memory batches of at least this many rows get states of their own,
/// made once and kept with the batch; a day's smaller ones (fewer than
/// twice this in all: the memstore's batches halve in size from the first,
/// a binary counter) share states kept with the newest of them
/// ([`super::mem`]).
pub const MEM_STATES_MIN_ROWS: usize = 1024;

/// A query's time range over a cube's time dimension: rows of whole
/// buckets come from parts, the rest from raw rows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TimeRange {
    /// The dimension `date_trunc(unit, column)` the parts are cut by.
    pub dimension: String,
    pub unit: Unit,
    /// The raw time column.
    pub column: String,
    /// Lower limits: the range holds instants at or after each.
    pub lower: Vec<Limit>,
    /// Upper limits: the range holds instants before each.
    pub upper: Vec<Limit>,
}

/// One end of a [`TimeRange`]: an instant given by a value computed when
/// the query runs (a literal, or a kept plan's parameter).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Limit {
    /// A nanosecond timestamp without time zone, or a date (its first
    /// instant).
    pub value: Expr,
    /// The limit is the first instant after the value: after that
    /// nanosecond (`ts <= v`, `ts > v`), after that whole day (`CAST(ts AS
    /// DATE) <= d`).
    pub after: bool,
}

impl Limit {
    pub fn at(value: Expr) -> Self {
        Self {
            value,
            after: false,
        }
    }

    pub fn after(value: Expr) -> Self {
        Self { value, after: true }
    }
}

/// A cube read in place of a table (logical node).
#[derive(Debug, Clone)]
pub struct CubeScan {
    pub cube: Arc<CubePlan>,
    pub table: KilnTable,
    pub schema: DFSchemaRef,
    /// Conjuncts over the table's (unqualified) columns that every raw row
    /// read must pass: the query's own filters.
    pub filters: Vec<Expr>,
    /// The same conjuncts over the cube's dimensions (this node's schema),
    /// which every part row returned must pass. Rows computed from raw rows
    /// pass them already, having passed `filters`; so no filter is needed
    /// above the scan, and the parts' rows are not copied by one.
    pub part_filters: Vec<Expr>,
    /// Equalities on dimensions (`dimension = value`, the value without
    /// columns: a constant or a parameter), which narrow each part to a
    /// slice of its sorted rows when they cover its leading dimensions
    /// before `part_filters` are evaluated on it.
    pub keys: Vec<(String, Expr)>,
    pub range: Option<TimeRange>,
    /// Per dimension, whether the plan reads it (groups, filters, the
    /// range, aggregates' conditions): parts are read merged to those
    /// ([`super::rollup`]), the others holding placeholders.
    pub used: Vec<bool>,
}

impl CubeScan {
    pub fn new(
        cube: Arc<CubePlan>,
        table: KilnTable,
        filters: Vec<Expr>,
        part_filters: Vec<Expr>,
        keys: Vec<(String, Expr)>,
        range: Option<TimeRange>,
        used: Vec<bool>,
    ) -> Result<Self> {
        let schema = Arc::new(DFSchema::try_from_qualified_schema(
            cube.def.name.as_str(),
            &cube.scan_schema,
        )?);
        Ok(Self {
            cube,
            table,
            schema,
            filters,
            part_filters,
            keys,
            range,
            used,
        })
    }
}

impl PartialEq for CubeScan {
    fn eq(&self, other: &Self) -> bool {
        self.cube.def.id == other.cube.def.id
            && self.filters == other.filters
            && self.part_filters == other.part_filters
            && self.keys == other.keys
            && self.range == other.range
            && self.used == other.used
    }
}

impl Eq for CubeScan {}

impl Hash for CubeScan {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.cube.def.id.hash(state);
        self.filters.hash(state);
        self.part_filters.hash(state);
        self.keys.hash(state);
        self.range.hash(state);
        self.used.hash(state);
    }
}

impl PartialOrd for CubeScan {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        match self == other {
            true => Some(Ordering::Equal),
            false => None,
        }
    }
}

impl UserDefinedLogicalNodeCore for CubeScan {
    fn name(&self) -> &str {
        "CubeScan"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        let mut out = self.filters.clone();
        out.extend(self.part_filters.iter().cloned());
        out.extend(self.keys.iter().map(|(_, v)| v.clone()));
        if let Some(r) = &self.range {
            out.extend(r.lower.iter().chain(&r.upper).map(|l| l.value.clone()));
        }
        out
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "CubeScan: cube={} table={}",
            self.cube.def.name,
            self.table.table().name()
        )?;
        if let Some(r) = &self.range {
            write!(f, ", buckets={:?} of {}", r.unit, r.dimension)?;
        }
        if !self.keys.is_empty() {
            let keys: Vec<&str> = self.keys.iter().map(|(d, _)| d.as_str()).collect();
            write!(f, ", keys=[{}]", keys.join(", "))?;
        }
        if let Some(p) = self.part_filters.iter().cloned().reduce(Expr::and) {
            write!(f, ", filter={p}")?;
        }
        if self.used.contains(&false) {
            let dims = self.cube.def.dimensions.iter().zip(&self.used);
            let read: Vec<&str> = dims
                .filter(|(_, u)| **u)
                .map(|(d, _)| d.name.as_str())
                .collect();
            write!(f, ", rollup=[{}]", read.join(", "))?;
        }
        Ok(())
    }

    fn with_exprs_and_inputs(&self, mut exprs: Vec<Expr>, _: Vec<LogicalPlan>) -> Result<Self> {
        let mut out = self.clone();
        let mut rest = exprs.split_off(self.filters.len());
        out.filters = exprs;
        let mut keys = rest.split_off(self.part_filters.len());
        out.part_filters = rest;
        let bounds = keys.split_off(self.keys.len());
        for ((_, v), new) in out.keys.iter_mut().zip(keys) {
            *v = new;
        }
        if let Some(r) = &mut out.range {
            for (limit, new) in r.lower.iter_mut().chain(&mut r.upper).zip(bounds) {
                limit.value = new;
            }
        }
        Ok(out)
    }

    fn supports_limit_pushdown(&self) -> bool {
        false
    }
}

/// Physical bounds of a [`TimeRange`].
#[derive(Debug)]
pub struct PhysicalRange {
    pub dimension: usize,
    pub unit: Unit,
    /// The raw time column, in the table's view schema.
    pub column: Arc<dyn PhysicalExpr>,
    /// [`TimeRange::lower`] and [`TimeRange::upper`]: each value and
    /// whether the limit is after it.
    pub lower: Vec<(Arc<dyn PhysicalExpr>, bool)>,
    pub upper: Vec<(Arc<dyn PhysicalExpr>, bool)>,
}

/// Executes a [`CubeScan`] (module docs).
#[derive(Debug, Clone)]
pub struct CubeScanExec {
    pub(super) cubes: Arc<Cubes>,
    pub(super) cube: Arc<CubePlan>,
    pub(super) table: KilnTable,
    /// The raw rows' filter, over the table's view schema.
    pub(super) filter: Option<Arc<dyn PhysicalExpr>>,
    /// [`CubeScan::part_filters`], over the cube's scan schema.
    pub(super) part_filter: Option<Arc<dyn PhysicalExpr>>,
    pub(super) range: Option<Arc<PhysicalRange>>,
    /// [`CubeScan::keys`]: dimension indexes and values.
    pub(super) keys: Vec<(usize, Arc<dyn PhysicalExpr>)>,
    /// [`CubeScan::used`].
    pub(super) used: Arc<[bool]>,
    /// The columns of the scan schema returned, in order (all: `None`):
    /// a projection of plain columns above the scan is taken into it
    /// ([`ExecutionPlan::try_swapping_with_projection`]), so a
    /// cube-answered plan does not pay for a projection node (its
    /// metrics and a stream) at every execution, as dashboards' queries
    /// are all answered from few rows.
    pub(super) projection: Option<Arc<[usize]>>,
    pub(super) properties: Arc<PlanProperties>,
    /// This run's metrics (EXPLAIN ANALYZE): how long it waited for the
    /// parts' and in-memory rows' states, which the first query after a
    /// change makes and the others wait for, how many parts it read and
    /// how many of those it found not yet decoded or merged (`parts_made`).
    pub(super) metrics: ExecutionPlanMetricsSet,
}

impl CubeScanExec {
    pub(super) fn properties_of(schema: SchemaRef) -> Arc<PlanProperties> {
        Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ))
    }

    /// The stream of the cube's rows for this execution (module docs).
    async fn rows(self, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let Self {
            cubes,
            cube,
            table,
            filter,
            part_filter,
            range,
            keys,
            used,
            projection,
            properties,
            metrics,
        } = self;
        let metric = || MetricBuilder::new(&metrics);
        let (parts_time, parts_read) = (
            metric().subset_time("parts_time", 0),
            metric().counter("parts", 0),
        );
        let parts_made = metric().counter("parts_made", 0);
        let (memory_time, raw_segments) = (
            metric().subset_time("memory_states_time", 0),
            metric().counter("raw_segments", 0),
        );
        let out_schema = properties.eq_properties.schema().clone();
        let keys = key_values(&keys, &cube.scan_schema)?;
        let snapshot = table.table().snapshot();
        // The range [a, b) and its whole buckets [lo, hi), open ends beyond
        // any timestamp (i128). A limit beyond the timestamps on either side
        // (a date of year 3000) leaves every bucket on that side in or out.
        let (a, b, lo, hi) = match &range {
            Some(r) => match (bound(&r.lower, true)?, bound(&r.upper, false)?) {
                (Bound::Null, _) | (_, Bound::Null) => (0, 0, 0, 0),
                (a, b) => {
                    // A bucket boundary out of range: no whole bucket.
                    let lo = match a {
                        Bound::At(v) => boundary(v, |x| r.unit.ceil(x), i128::MAX),
                        _ => i128::MIN,
                    };
                    let hi = match b {
                        Bound::At(v) => boundary(v, |x| r.unit.floor(x), i128::MIN),
                        _ => i128::MAX,
                    };
                    (a.or(i128::MIN), b.or(i128::MAX), lo, hi)
                }
            },
            None => (i128::MIN, i128::MAX, i128::MIN, i128::MAX),
        };
        // What the buckets leave of the range, read raw from built segments.
        let edges: Vec<(i128, i128)> = match lo >= hi {
            true => vec![(a, b)],
            false => [(a, lo), (hi, b)].into_iter().collect(),
        };
        let edges: Vec<_> = edges.into_iter().filter(|(x, y)| x < y).collect();
        // Whether rows timed within [min, max] may fall on the range's
        // edges, or in its whole buckets.
        let on_edge = |min: i128, max: i128| edges.iter().any(|(x, y)| max >= *x && min < *y);
        let in_whole = |min: i128, max: i128| lo < hi && max >= lo && min < hi;
        let cut = Cut::new(
            &cube.scan_schema,
            keys,
            part_filter.as_ref(),
            range.as_ref().map(|r| r.dimension),
            projection.as_deref(),
            out_schema.clone(),
        )?;
        // Rows timed within [min, max] that may fall outside the whole
        // buckets are cut to them.
        let selected = |batch: &RecordBatch, min: i128, max: i128| {
            let cuts = range.is_some() && (min < lo || max >= hi);
            cut.apply(batch, cuts.then_some((lo, hi)))
        };
        let mut on_edges = vec![];
        let mut raw = vec![];
        let mut batches = vec![];
        let timer = parts_time.timer();
        for s in &snapshot.version.manifest.segments {
            let Some(part) = s.part(cube.def.id) else {
                raw.push(s.clone());
                continue;
            };
            let (min, max) = (i128::from(s.meta.min_time), i128::from(s.meta.max_time));
            if on_edge(min, max) {
                on_edges.push(s.clone());
            }
            if !in_whole(min, max) {
                continue;
            }
            let batch = cubes
                .rolled_up(table.db(), &part, &cube, &used, &ctx, &parts_made)
                .await?;
            parts_read.add(1);
            batches.push(selected(&batch, min, max)?);
        }
        timer.done();
        let timer = memory_time.timer();
        // In-memory batches are read like parts: a large one from states
        // made once and kept with it, a day's run of small ones from states
        // kept with the newest of them ([`super::mem`]).
        let time_column = table.table().def.time_column;
        let (mut runs, mut made) = (Vec::<(Days, Vec<Arc<MemBatch>>)>::new(), vec![]);
        for (days, batch) in snapshot.mem_by_days() {
            // Days the range cannot reach: no states made, nothing sliced.
            let (first, last) = days.time_range();
            let (first, last) = (i128::from(first), i128::from(last));
            if !on_edge(first, last) && !in_whole(first, last) {
                continue;
            }
            if batch.rows() < MEM_STATES_MIN_ROWS {
                match runs.last_mut() {
                    Some((d, run)) if *d == days => run.push(batch),
                    _ => runs.push((days, vec![batch])),
                }
                continue;
            }
            let states = cubes
                .mem_states(&batch, &cube, &used, time_column, &ctx)
                .await?;
            made.push((states, days, vec![batch]));
        }
        for (days, run) in runs {
            // Boxed: the states' making is a large future.
            let states = Box::pin(cubes.tail_states(&run, days, &cube, time_column)).await?;
            made.push((states, days, run));
        }
        timer.done();
        let mut mem_edges = vec![];
        for (states, days, read) in made {
            let (min, max) = states.time;
            if on_edge(min, max) {
                mem_edges.extend(read.into_iter().map(|b| (days, b)));
            }
            if in_whole(min, max) {
                batches.push(selected(&states.rows, min, max)?);
            }
        }
        batches.retain(|b| b.num_rows() > 0);
        cube.answered
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut streams = vec![];
        // The segments without a part, with the query's filter.
        if !raw.is_empty() {
            raw_segments.add(raw.len());
            let unbuilt = pinned(&snapshot, raw, vec![]);
            streams.push(Self::raw(&cube, &table, unbuilt, filter.clone(), &ctx)?);
        }
        if let Some(r) = &range
            && !(on_edges.is_empty() && mem_edges.is_empty())
        {
            let filter = match (outside_buckets(r, lo, hi), &filter) {
                (Some(edges), Some(f)) => {
                    Some(Arc::new(BinaryExpr::new(f.clone(), Operator::And, edges))
                        as Arc<dyn PhysicalExpr>)
                }
                (edges, f) => edges.or(f.clone()),
            };
            let edge = pinned(&snapshot, on_edges, mem_edges);
            streams.push(Self::raw(&cube, &table, edge, filter, &ctx)?);
        }
        let parts = futures::stream::iter(batches.into_iter().map(Ok));
        let raw = futures::stream::iter(streams)
            .flatten()
            .map(move |b| match &projection {
                Some(p) => Ok(b?.project(p)?),
                None => b,
            });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            out_schema,
            parts.chain(raw),
        )))
    }

    /// The cube's states over a pinned snapshot's rows that pass `filter`
    /// (held segments' states kept when the same filter values repeat:
    /// [`KilnTable::aggregate_pinned`]).
    fn raw(
        cube: &Arc<CubePlan>,
        table: &KilnTable,
        snapshot: TableSnapshot,
        filter: Option<Arc<dyn PhysicalExpr>>,
        ctx: &Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let aggregate = |rows| {
            cube.aggregate(rows)
                .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))
        };
        let states = table.aggregate_pinned(
            snapshot,
            &cube.projection,
            filter,
            ctx,
            &cube.raw_key,
            aggregate,
        )?;
        let kept = futures::stream::iter(states.kept.into_iter().map(Ok));
        let all = match states.rest {
            Some(rest) => kept.chain(rest.execute(0, ctx.clone())?).boxed(),
            None => kept.boxed(),
        };
        let schema = cube.scan_schema.clone();
        let cube = cube.clone();
        let scanned = all.map(move |b| cube.for_scan(b?));
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, scanned)))
    }
}

/// A snapshot of `segments` and the in-memory batches `mem`.
fn pinned(
    snapshot: &TableSnapshot,
    segments: Vec<Arc<Segment>>,
    mem: Vec<(Days, Arc<MemBatch>)>,
) -> TableSnapshot {
    let mut active: BTreeMap<Days, Vec<Arc<MemBatch>>> = BTreeMap::new();
    for (days, batch) in mem {
        active.entry(days).or_default().push(batch);
    }
    narrowed(snapshot, segments, vec![], active.into_iter().collect())
}

impl DisplayAs for CubeScanExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "CubeScanExec: cube={} table={}",
            self.cube.def.name,
            self.table.table().name()
        )?;
        if let Some(p) = &self.part_filter {
            write!(f, ", filter={p}")?;
        }
        if let Some(p) = &self.filter {
            write!(f, ", raw_filter={p}")?;
        }
        if self.projection.is_some() {
            let names: Vec<_> = self
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
            write!(f, ", projection=[{}]", names.join(", "))?;
        }
        Ok(())
    }
}

impl ExecutionPlan for CubeScanExec {
    fn name(&self) -> &str {
        "CubeScanExec"
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
        for p in self.filter.iter().chain(&self.part_filter) {
            if f(p)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return internal_err!("CubeScanExec has one partition, not {partition}");
        }
        let rows = self.clone().rows(context);
        let stream = futures::stream::once(rows).try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            stream,
        )))
    }

    fn try_swapping_with_projection(
        &self,
        projection: &ProjectionExec,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let exprs = projection.expr();
        if !all_alias_free_columns(exprs) {
            return Ok(None);
        }
        // Indexes into this scan's output, then into the scan schema.
        let mut columns = Vec::with_capacity(exprs.len());
        for e in exprs {
            let Some(c) = e.expr.downcast_ref::<Column>() else {
                return Ok(None);
            };
            columns.push(match &self.projection {
                Some(p) => p[c.index()],
                None => c.index(),
            });
        }
        let schema = Arc::new(self.cube.scan_schema.project(&columns)?);
        Ok(Some(Arc::new(Self {
            projection: Some(columns.into()),
            properties: Self::properties_of(schema),
            metrics: ExecutionPlanMetricsSet::new(),
            ..self.clone()
        })))
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self {
            metrics: ExecutionPlanMetricsSet::new(),
            ..self.as_ref().clone()
        }))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
