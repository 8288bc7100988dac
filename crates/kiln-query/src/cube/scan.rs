//! Reading a cube: the [`CubeScan`] plan node a rewritten query reads, and
//! [`CubeScanExec`], which at execution pins one snapshot of the table and
//! returns, in the cube's schema (dimensions, then states):
//! - the parts of the segments that have one, each decoded once and kept
//!   ([`super::Cubes`]), limited to the whole time buckets of the query's
//!   range;
//! - the same states computed from raw rows for everything else: the
//!   memstore, segments without a part, and the edges of a range that cuts
//!   a bucket, read with the query's own filters.
//!
//! So an answer includes every row acknowledged before the snapshot, part
//! or not. The snapshot is taken at execution, so a kept (generic) plan
//! reads the table as it is when it runs; the node's expressions (filters
//! and range bounds) are visible to the plan, so a kept plan's parameters
//! reach them.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::compute::kernels::cmp::{gt_eq, lt};
use datafusion::arrow::compute::{and, filter_record_batch};
use datafusion::arrow::datatypes::{Schema, TimestampNanosecondType};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DFSchema, DFSchemaRef, Result, ScalarValue, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlan, Operator, UserDefinedLogicalNodeCore};
use datafusion::physical_expr::expressions::{BinaryExpr, Literal};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ColumnarValue, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
    Partitioning, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};
use kiln_storage::memstore::TableVersion;
use kiln_storage::{Manifest, Segment, TableSnapshot};

use super::Cubes;
use super::plan::CubePlan;
use super::unit::Unit;
use crate::scan::KilnTable;

/// A query's time range over a cube's time dimension: rows of whole
/// buckets come from parts, the rest from raw rows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TimeRange {
    /// The dimension `date_trunc(unit, column)` the parts are cut by.
    pub dimension: String,
    pub unit: Unit,
    /// The raw time column.
    pub column: String,
    /// Inclusive lower bounds (`column >= b`), all of which hold.
    pub lower: Vec<Expr>,
    /// Exclusive upper bounds (`column < b`), all of which hold.
    pub upper: Vec<Expr>,
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
    pub range: Option<TimeRange>,
}

impl CubeScan {
    pub fn new(
        cube: Arc<CubePlan>,
        table: KilnTable,
        filters: Vec<Expr>,
        range: Option<TimeRange>,
    ) -> Result<Self> {
        let schema = Arc::new(DFSchema::try_from_qualified_schema(
            cube.def.name.as_str(),
            &cube.schema,
        )?);
        Ok(Self {
            cube,
            table,
            schema,
            filters,
            range,
        })
    }
}

impl PartialEq for CubeScan {
    fn eq(&self, other: &Self) -> bool {
        self.cube.def.id == other.cube.def.id
            && self.filters == other.filters
            && self.range == other.range
    }
}

impl Eq for CubeScan {}

impl Hash for CubeScan {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.cube.def.id.hash(state);
        self.filters.hash(state);
        self.range.hash(state);
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
        if let Some(r) = &self.range {
            out.extend(r.lower.iter().cloned());
            out.extend(r.upper.iter().cloned());
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
        Ok(())
    }

    fn with_exprs_and_inputs(&self, mut exprs: Vec<Expr>, _: Vec<LogicalPlan>) -> Result<Self> {
        let mut out = self.clone();
        let rest = exprs.split_off(self.filters.len());
        out.filters = exprs;
        if let Some(r) = &mut out.range {
            let mut rest = rest;
            let upper = rest.split_off(r.lower.len());
            r.lower = rest;
            r.upper = upper;
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
    pub lower: Vec<Arc<dyn PhysicalExpr>>,
    pub upper: Vec<Arc<dyn PhysicalExpr>>,
}

/// Executes a [`CubeScan`] (module docs).
#[derive(Debug)]
pub struct CubeScanExec {
    pub(super) cubes: Arc<Cubes>,
    pub(super) cube: Arc<CubePlan>,
    pub(super) table: KilnTable,
    /// The raw rows' filter, over the table's view schema.
    pub(super) filter: Option<Arc<dyn PhysicalExpr>>,
    pub(super) range: Option<Arc<PhysicalRange>>,
    pub(super) properties: Arc<PlanProperties>,
}

impl CubeScanExec {
    pub(super) fn properties_of(cube: &CubePlan) -> Arc<PlanProperties> {
        Arc::new(PlanProperties::new(
            EquivalenceProperties::new(cube.schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ))
    }

    /// The stream of the cube's rows for this execution (module docs).
    async fn rows(
        cubes: Arc<Cubes>,
        cube: Arc<CubePlan>,
        table: KilnTable,
        filter: Option<Arc<dyn PhysicalExpr>>,
        range: Option<Arc<PhysicalRange>>,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let snapshot = table.table().snapshot();
        // The range [a, b) and its whole buckets [lo, hi).
        let (a, b, lo, hi) = match &range {
            Some(r) => {
                let a = bound(&r.lower, true)?;
                let b = bound(&r.upper, false)?;
                let lo = a.map_or(i64::MIN, |v| r.unit.ceil(v));
                let hi = b.map_or(i64::MAX, |v| r.unit.floor(v));
                (a.unwrap_or(i64::MIN), b.unwrap_or(i64::MAX), lo, hi)
            }
            None => (i64::MIN, i64::MAX, i64::MIN, i64::MAX),
        };
        // What the buckets leave of the range, read raw from built segments.
        let edges: Vec<(i64, i64)> = match lo >= hi {
            true => vec![(a, b)],
            false => [(a, lo), (hi, b)]
                .into_iter()
                .filter(|(x, y)| x < y)
                .collect(),
        };
        let mut on_edges = vec![];
        let mut raw = vec![];
        let mut batches = vec![];
        for s in &snapshot.version.manifest.segments {
            let Some(part) = s.part(cube.def.id) else {
                raw.push(s.clone());
                continue;
            };
            let (min, max) = (s.meta.min_time, s.meta.max_time);
            if edges.iter().any(|(x, y)| max >= *x && min < *y) {
                on_edges.push(s.clone());
            }
            if lo >= hi || max < lo || min >= hi {
                continue;
            }
            let batch = cubes.part_rows(table.db(), &part, &cube.schema).await?;
            batches.push(match &range {
                Some(r) if min < lo || max >= hi => in_buckets(&batch, r.dimension, lo, hi)?,
                _ => batch,
            });
        }
        cubes.count_answer(cube.def.id);
        let mut streams = vec![];
        // The memstore and the segments without a part, with the query's filter.
        let memory = !snapshot.version.frozen.is_empty()
            || snapshot.active.iter().any(|(_, b)| !b.is_empty());
        if memory || !raw.is_empty() {
            let unbuilt = pinned(&snapshot, raw, true);
            streams.push(Self::raw(&cube, &table, unbuilt, filter.clone(), &ctx)?);
        }
        if let Some(r) = &range
            && !on_edges.is_empty()
        {
            let edges = outside_buckets(r, lo, hi);
            let filter: Arc<dyn PhysicalExpr> = match &filter {
                Some(f) => Arc::new(BinaryExpr::new(f.clone(), Operator::And, edges)),
                None => edges,
            };
            let edge = pinned(&snapshot, on_edges, false);
            streams.push(Self::raw(&cube, &table, edge, Some(filter), &ctx)?);
        }
        let schema = cube.schema.clone();
        let parts = futures::stream::iter(batches.into_iter().map(Ok));
        let all = parts.chain(futures::stream::iter(streams).flatten());
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, all)))
    }

    /// The cube's states over a pinned snapshot's rows that pass `filter`.
    fn raw(
        cube: &CubePlan,
        table: &KilnTable,
        snapshot: TableSnapshot,
        filter: Option<Arc<dyn PhysicalExpr>>,
        ctx: &Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let rows = table.scan_pinned(snapshot, filter, ctx)?;
        let rows: Arc<dyn ExecutionPlan> = match rows.output_partitioning().partition_count() {
            1 => rows,
            _ => Arc::new(CoalescePartitionsExec::new(rows)),
        };
        cube.aggregate(rows)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?
            .execute(0, ctx.clone())
    }
}

/// The greatest lower (or least upper) bound, if any, as nanoseconds.
fn bound(exprs: &[Arc<dyn PhysicalExpr>], lower: bool) -> Result<Option<i64>> {
    let empty = RecordBatch::new_empty(Arc::new(Schema::empty()));
    let mut out: Option<i64> = None;
    for e in exprs {
        let v = match e.evaluate(&empty)? {
            ColumnarValue::Scalar(ScalarValue::TimestampNanosecond(v, _)) => v,
            ColumnarValue::Scalar(s) if s.is_null() => None,
            other => return internal_err!("cube time bound is not a timestamp: {other:?}"),
        };
        // A NULL bound passes no row: an empty range.
        let v = v.unwrap_or(if lower { i64::MAX } else { i64::MIN });
        out = Some(match (out, lower) {
            (None, _) => v,
            (Some(o), true) => o.max(v),
            (Some(o), false) => o.min(v),
        });
    }
    Ok(out)
}

/// Rows of `batch` whose time dimension is in `[lo, hi)`.
fn in_buckets(batch: &RecordBatch, dimension: usize, lo: i64, hi: i64) -> Result<RecordBatch> {
    let col = batch.column(dimension);
    let Some(ts) = col.as_primitive_opt::<TimestampNanosecondType>() else {
        return internal_err!("cube time dimension is not a nanosecond timestamp");
    };
    let tz = ts.timezone().map(Arc::from);
    let lo = ScalarValue::TimestampNanosecond(Some(lo), tz.clone()).to_scalar()?;
    let hi = ScalarValue::TimestampNanosecond(Some(hi), tz).to_scalar()?;
    let keep = and(&gt_eq(col, &lo)?, &lt(col, &hi)?)?;
    Ok(filter_record_batch(batch, &keep)?)
}

/// `NOT (column >= lo AND column < hi)`: the rows outside the whole buckets.
fn outside_buckets(r: &PhysicalRange, lo: i64, hi: i64) -> Arc<dyn PhysicalExpr> {
    let ts = |v: i64| -> Arc<dyn PhysicalExpr> {
        Arc::new(Literal::new(ScalarValue::TimestampNanosecond(
            Some(v),
            None,
        )))
    };
    let cmp =
        |op, v| -> Arc<dyn PhysicalExpr> { Arc::new(BinaryExpr::new(r.column.clone(), op, ts(v))) };
    Arc::new(BinaryExpr::new(
        cmp(Operator::Lt, lo),
        Operator::Or,
        cmp(Operator::GtEq, hi),
    ))
}

/// A snapshot of `segments`, with the memstore's rows if `memory`.
fn pinned(snapshot: &TableSnapshot, segments: Vec<Arc<Segment>>, memory: bool) -> TableSnapshot {
    let m = &snapshot.version.manifest;
    TableSnapshot {
        version: Arc::new(TableVersion {
            manifest: Arc::new(Manifest {
                version: m.version,
                flushed_seq: m.flushed_seq,
                segments,
            }),
            frozen: match memory {
                true => snapshot.version.frozen.clone(),
                false => vec![],
            },
        }),
        active: match memory {
            true => snapshot.active.clone(),
            false => vec![],
        },
    }
}

impl DisplayAs for CubeScanExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "CubeScanExec: cube={} table={}",
            self.cube.def.name,
            self.table.table().name()
        )?;
        if let Some(p) = &self.filter {
            write!(f, ", raw_filter={p}")?;
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
        match &self.filter {
            Some(p) => f(p),
            None => Ok(TreeNodeRecursion::Continue),
        }
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
        let rows = Self::rows(
            self.cubes.clone(),
            self.cube.clone(),
            self.table.clone(),
            self.filter.clone(),
            self.range.clone(),
            context,
        );
        let stream = futures::stream::once(rows).try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.cube.schema.clone(),
            stream,
        )))
    }
}
