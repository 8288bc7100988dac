//! Pruning: which segments and memory partitions a query's filters can skip,
//! decided from manifest statistics (no file is opened) with DataFusion's
//! `PruningPredicate`, or directly when the filter is a conjunction of
//! column-vs-value comparisons ([`Bounds`]; a timestamp's day against a
//! date is one, [`Midnight`]). Inside the files that remain,
//! Parquet row groups and pages are pruned again by the Parquet reader.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, ArrowNativeTypeOp, ArrowPrimitiveType, AsArray, BooleanArray, PrimitiveArray,
    RecordBatch, RecordBatchOptions, Scalar, UInt64Array, downcast_primitive_array,
};
use arrow::compute::kernels::cmp;
use arrow::datatypes::{DataType, SchemaRef, TimeUnit, UInt64Type};
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr, Column as PhysicalColumn};
use datafusion::physical_expr::utils::{collect_columns, split_conjunction};
use datafusion::physical_expr_common::physical_expr::is_volatile;
use datafusion::physical_optimizer::pruning::{PruningPredicate, PruningPredicateBuilder};
use kiln_storage::memstore::Days;
use kiln_storage::{NANOS_PER_DAY, StatValue};

/// Min/max/null statistics of one container (a segment or a memory partition).
#[derive(Debug, Clone, Default)]
pub struct ContainerStats {
    /// Per table column: (min, max, null count); None where unknown.
    pub columns: Vec<(Option<StatValue>, Option<StatValue>, Option<u64>)>,
    pub rows: Option<u64>,
}

impl ContainerStats {
    /// Statistics of a memory partition: only its time range (its days) is known.
    pub fn days(ncols: usize, time_column: usize, days: Days) -> Self {
        let mut columns = vec![(None, None, None); ncols];
        let (start, end) = days.time_range();
        columns[time_column] = (Some(StatValue::Int(start)), Some(StatValue::Int(end)), None);
        Self {
            columns,
            rows: None,
        }
    }

    /// Statistics of a segment, from its manifest entry.
    pub fn segment(meta: &kiln_storage::SegmentMeta) -> Self {
        Self {
            columns: meta
                .columns
                .iter()
                .map(|c| (c.min.clone(), c.max.clone(), Some(c.null_count)))
                .collect(),
            rows: Some(meta.rows),
        }
    }
}

struct Stats<'a> {
    schema: &'a SchemaRef,
    containers: &'a [ContainerStats],
}

fn scalar(v: Option<&StatValue>, dt: &DataType) -> ScalarValue {
    let v = v.cloned();
    match (dt, v) {
        (DataType::Boolean, Some(StatValue::Bool(b))) => ScalarValue::Boolean(Some(b)),
        (DataType::Int32, Some(StatValue::Int(i))) => ScalarValue::Int32(Some(i as i32)),
        (DataType::Int64, Some(StatValue::Int(i))) => ScalarValue::Int64(Some(i)),
        (DataType::Date32, Some(StatValue::Int(i))) => ScalarValue::Date32(Some(i as i32)),
        (DataType::Timestamp(TimeUnit::Nanosecond, tz), Some(StatValue::Int(i))) => {
            ScalarValue::TimestampNanosecond(Some(i), tz.clone())
        }
        (DataType::Float64, Some(StatValue::Float(f))) => ScalarValue::Float64(Some(f)),
        (DataType::Float64, Some(StatValue::Int(i))) => ScalarValue::Float64(Some(i as f64)),
        (DataType::Utf8, Some(StatValue::Str(s))) => ScalarValue::Utf8(Some(s)),
        (DataType::Utf8View, Some(StatValue::Str(s))) => ScalarValue::Utf8View(Some(s)),
        _ => ScalarValue::try_from(dt).unwrap_or(ScalarValue::Null),
    }
}

impl Stats<'_> {
    fn values(
        &self,
        column: &Column,
        pick: impl Fn(&ContainerStats, usize) -> Option<&StatValue>,
    ) -> Option<ArrayRef> {
        let idx = self.schema.index_of(&column.name).ok()?;
        let dt = self.schema.field(idx).data_type();
        let scalars = self.containers.iter().map(|c| scalar(pick(c, idx), dt));
        ScalarValue::iter_to_array(scalars).ok()
    }
}

impl PruningStatistics for Stats<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        self.values(column, |c, i| c.columns.get(i).and_then(|s| s.0.as_ref()))
    }
    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        self.values(column, |c, i| c.columns.get(i).and_then(|s| s.1.as_ref()))
    }
    fn num_containers(&self) -> usize {
        self.containers.len()
    }
    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        let idx = self.schema.index_of(&column.name).ok()?;
        Some(Arc::new(UInt64Array::from_iter(
            self.containers
                .iter()
                .map(|c| c.columns.get(idx).and_then(|s| s.2)),
        )))
    }
    fn row_counts(&self) -> Option<ArrayRef> {
        Some(Arc::new(UInt64Array::from_iter(
            self.containers.iter().map(|c| c.rows),
        )))
    }
    fn contained(&self, _: &Column, _: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        None
    }
}

/// The pruning form of a query's filter over `schema`; None when there is
/// no filter or it cannot prune.
pub fn pruner(
    predicate: Option<&Arc<dyn PhysicalExpr>>,
    schema: &SchemaRef,
) -> Option<Arc<Pruner>> {
    let predicate = predicate?;
    if let Some(bounds) = Bounds::of(predicate, schema) {
        return Some(Arc::new(Pruner::Bounds(bounds)));
    }
    PruningPredicateBuilder::new()
        .with_file_schema(schema.clone())
        .build(predicate.clone())
        .map(|p| Arc::new(Pruner::Full(Arc::unwrap_or_clone(p))))
}

/// Which containers may hold rows matching `pruning` (true = keep).
/// Everything is kept when there is no predicate or it cannot be evaluated.
pub fn keep(
    pruning: Option<&Pruner>,
    schema: &SchemaRef,
    containers: &[ContainerStats],
) -> Vec<bool> {
    let all = vec![true; containers.len()];
    let Some(p) = pruning.filter(|_| !containers.is_empty()) else {
        return all;
    };
    p.prune(&Stats { schema, containers }).unwrap_or(all)
}

/// A query's filter in the form used to skip containers.
#[derive(Debug)]
pub enum Pruner {
    /// Every conjunct compares a column with a value: evaluated directly on
    /// the min/max arrays.
    Bounds(Bounds),
    /// Anything else: DataFusion's general rewrite.
    Full(PruningPredicate),
}

impl Pruner {
    /// Which containers may hold matching rows (true = keep); None if that
    /// cannot be decided (keep everything).
    pub fn prune(&self, stats: &dyn PruningStatistics) -> Option<Vec<bool>> {
        match self {
            Pruner::Bounds(b) => b.prune(stats),
            Pruner::Full(p) => p.prune(stats).ok(),
        }
    }
}

/// A conjunction of `column op value` comparisons (`=`, `<`, `<=`, `>`,
/// `>=`), where the values hold no column and nothing volatile: literals,
/// and parameters of a kept plan, read when `prune` runs.
///
/// Why not always DataFusion's `PruningPredicate`: it rebuilds its
/// statistics batch and evaluates a rewritten expression tree on every
/// call, microseconds however few the containers, and a cached point lookup
/// prunes on every run (15% of its CPU in a profile). For this, the
/// commonest shape of filter, a comparison of each container's min or max
/// with the value (one or two per conjunct) decides the same.
#[derive(Debug)]
pub struct Bounds {
    terms: Vec<Bound>,
    /// One row of no columns, to evaluate the values on (they hold none).
    one_row: RecordBatch,
}

#[derive(Debug)]
struct Bound {
    column: Column,
    data_type: DataType,
    /// Whether the column may hold nulls (else its null counts are not read).
    nullable: bool,
    /// The comparisons of the column the conjunct is, all true for a row
    /// it keeps, with the column on the left: one with the value itself
    /// (None), or for a timestamp's day compared with a date, one or two
    /// with a midnight of it ([`Midnight`]).
    cmp: Vec<(Operator, Option<Midnight>)>,
    value: Arc<dyn PhysicalExpr>,
}

/// A timestamp column's day (`CAST(ts AS DATE)`, as BI tools filter by
/// day) compared with a date `d` is the column compared with a midnight,
/// as the day of a timestamp grows with it: `day >= d` is `ts >=` d's
/// midnight, `day > d` is `ts >=` the next one, `day < d` is `ts <` d's,
/// `day <= d` is `ts <` the next one, and `day = d` is both `ts >=` d's
/// and `ts <` the next one. So statistics of the column decide it, and a
/// slice or a memstore day inside the range is not compared row by row.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Midnight {
    /// The date's own.
    Of,
    /// The next day's.
    After,
}

impl Bounds {
    /// The bounds of `predicate`, if every conjunct is one.
    fn of(predicate: &Arc<dyn PhysicalExpr>, schema: &SchemaRef) -> Option<Self> {
        let terms = split_conjunction(predicate)
            .into_iter()
            .map(|e| Bound::of(e, schema))
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            terms,
            one_row: one_row(),
        })
    }

    fn prune(&self, stats: &dyn PruningStatistics) -> Option<Vec<bool>> {
        let mut kept = vec![true; stats.num_containers()];
        for t in &self.terms {
            // A term that cannot decide (unknown value, type or statistics)
            // keeps everything it has not yet cut.
            let _ = t.keep(stats, &self.one_row, &mut kept);
        }
        Some(kept)
    }
}

impl Bound {
    fn of(expr: &Arc<dyn PhysicalExpr>, schema: &SchemaRef) -> Option<Self> {
        let b = expr.downcast_ref::<BinaryExpr>()?;
        let (column, op, value) = match (compared(b.left()), compared(b.right())) {
            (Some(c), None) => (c, *b.op(), b.right()),
            (None, Some(c)) => (c, b.op().swap()?, b.left()),
            _ => return None,
        };
        let ordered = matches!(
            op,
            Operator::Eq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
        );
        if !ordered || !collect_columns(value).is_empty() || is_volatile(value) {
            return None;
        }
        let (column, day) = column;
        let field = schema.field_with_name(column.name()).ok()?;
        use Midnight::*;
        use Operator::*;
        let cmp = match day {
            false => vec![(op, None)],
            // Nanoseconds without a time zone: days are UTC days of them.
            true if field.data_type() == &DataType::Timestamp(TimeUnit::Nanosecond, None) => {
                match op {
                    GtEq => vec![(GtEq, Some(Of))],
                    Gt => vec![(GtEq, Some(After))],
                    Lt => vec![(Lt, Some(Of))],
                    LtEq => vec![(Lt, Some(After))],
                    Eq => vec![(GtEq, Some(Of)), (Lt, Some(After))],
                    _ => return None,
                }
            }
            true => return None,
        };
        Some(Self {
            column: Column::new_unqualified(column.name()),
            data_type: field.data_type().clone(),
            nullable: field.is_nullable(),
            cmp,
            value: value.clone(),
        })
    }

    /// The value compared with (or its `midnight`), as a one-element array
    /// of the column's type; None if it is null or cannot be had.
    fn value(&self, one_row: &RecordBatch, midnight: Option<Midnight>) -> Option<ArrayRef> {
        let value = match self.value.evaluate(one_row).ok()? {
            ColumnarValue::Scalar(v) => v,
            ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0).ok()?,
        };
        let value = match (midnight, value) {
            (None, v) => v,
            (Some(m), ScalarValue::Date32(Some(d))) => {
                let day = i64::from(d) + i64::from(m == Midnight::After);
                ScalarValue::TimestampNanosecond(Some(day.checked_mul(NANOS_PER_DAY)?), None)
            }
            // A null or another type: undecided.
            (Some(_), _) => return None,
        };
        value
            .cast_to(&self.data_type)
            .ok()
            .filter(|v| !v.is_null())?
            .to_array()
            .ok()
    }

    /// The column's minimum (or maximum) per container, if there is one
    /// for each of the `n` containers.
    fn stat(&self, stats: &dyn PruningStatistics, on_min: bool, n: usize) -> Option<ArrayRef> {
        match on_min {
            true => stats.min_values(&self.column),
            false => stats.max_values(&self.column),
        }
        .filter(|a| a.len() == n)
    }

    /// Clears `kept` where no row of the container can match.
    fn keep(
        &self,
        stats: &dyn PruningStatistics,
        one_row: &RecordBatch,
        kept: &mut [bool],
    ) -> Option<()> {
        for &(op, midnight) in &self.cmp {
            // `column op NULL` matches nothing, but keeping is always safe.
            let value = self.value(one_row, midnight)?;
            // Each comparison as conditions on the minimum or the maximum.
            use Operator::*;
            let conditions: &[(bool, Operator)] = match op {
                Eq => &[(true, LtEq), (false, GtEq)],
                Lt | LtEq => &[(true, op)],
                Gt | GtEq => &[(false, op)],
                _ => return None,
            };
            for &(on_min, op) in conditions {
                if let Some(stat) = self.stat(stats, on_min, kept.len()) {
                    compare(&stat, op, &value, true, kept)?;
                }
            }
        }
        // A container whose values are all null matches no comparison.
        if !self.nullable {
            return Some(());
        }
        let nulls = stats.null_counts(&self.column)?;
        let rows = stats.row_counts()?;
        let (Some(nulls), Some(rows)) = (
            nulls.as_primitive_opt::<UInt64Type>(),
            rows.as_primitive_opt::<UInt64Type>(),
        ) else {
            return None;
        };
        if nulls.len() == kept.len() && rows.len() == kept.len() {
            for (i, k) in kept.iter_mut().enumerate() {
                let known = nulls.is_valid(i) && rows.is_valid(i);
                *k &= !(known && nulls.value(i) == rows.value(i));
            }
        }
        Some(())
    }

    /// Clears `holds` where the container may have a row for which the
    /// comparison is not true: it stays set only where the statistics
    /// prove it for every row (no nulls, and the whole min..max range on
    /// the right side of the value).
    fn holds(&self, stats: &dyn PruningStatistics, one_row: &RecordBatch, holds: &mut [bool]) {
        if self.proves(stats, one_row, holds).is_none() {
            holds.fill(false);
        }
    }

    fn proves(
        &self,
        stats: &dyn PruningStatistics,
        one_row: &RecordBatch,
        holds: &mut [bool],
    ) -> Option<()> {
        for &(op, midnight) in &self.cmp {
            let value = self.value(one_row, midnight)?;
            use Operator::*;
            let conditions: &[(bool, Operator)] = match op {
                Eq => &[(true, GtEq), (false, LtEq)],
                Lt | LtEq => &[(false, op)],
                Gt | GtEq => &[(true, op)],
                _ => return None,
            };
            for &(on_min, op) in conditions {
                let stat = self.stat(stats, on_min, holds.len())?;
                compare(&stat, op, &value, false, holds)?;
            }
        }
        if self.nullable {
            let nulls = stats.null_counts(&self.column)?;
            let nulls = nulls.as_primitive_opt::<UInt64Type>()?;
            if nulls.len() != holds.len() {
                return None;
            }
            for (i, h) in holds.iter_mut().enumerate() {
                *h &= nulls.is_valid(i) && nulls.value(i) == 0;
            }
        }
        Some(())
    }
}

/// A query's filter as its conjuncts, and which of them the statistics of
/// a container prove for all its rows.
///
/// Why: Kiln applies its filters itself (the provider reports them exact),
/// and a slice of a sorted segment mostly lies wholly inside the query's
/// ranges: `experiment_id = 3` over a slice whose min and max are 3, or a
/// time range over a slice of one day inside it. Such conjuncts are not
/// evaluated on its rows, and a slice with none left is passed on without
/// a filter or a copy.
#[derive(Debug)]
pub struct Conjuncts {
    /// Each conjunct, with its bound if it compares a column with a value.
    terms: Vec<(Arc<dyn PhysicalExpr>, Option<Bound>)>,
    /// One row of no columns, to evaluate the values on.
    one_row: RecordBatch,
}

/// Which conjuncts are left to evaluate on a container's rows: bit `i` for
/// conjunct `i` (conjuncts past the 64th are always left).
pub type Residual = u64;

impl Conjuncts {
    pub fn of(predicate: &Arc<dyn PhysicalExpr>, schema: &SchemaRef) -> Self {
        let terms = split_conjunction(predicate)
            .into_iter()
            .map(|e| (e.clone(), Bound::of(e, schema)))
            .collect();
        Self {
            terms,
            one_row: one_row(),
        }
    }

    /// Per container, the conjuncts its statistics do not prove for every
    /// row.
    pub fn residuals(&self, stats: &dyn PruningStatistics) -> Vec<Residual> {
        let n = stats.num_containers();
        let mut left = vec![0; n];
        let mut holds = vec![true; n];
        for (i, (_, bound)) in self.terms.iter().enumerate().take(64) {
            holds.fill(true);
            match bound {
                Some(b) => b.holds(stats, &self.one_row, &mut holds),
                None => holds.fill(false),
            }
            for (l, h) in left.iter_mut().zip(&holds) {
                *l |= u64::from(!h) << i;
            }
        }
        left
    }

    /// [`Self::residuals`] of containers described by `containers`, over
    /// `schema` (a memory partition's day proves a time range around it).
    pub fn residuals_of(&self, schema: &SchemaRef, containers: &[ContainerStats]) -> Vec<Residual> {
        self.residuals(&Stats { schema, containers })
    }

    /// The filter of the conjuncts in `residual`; None if it has none.
    pub fn filter(&self, residual: Residual) -> Option<Arc<dyn PhysicalExpr>> {
        let left: Vec<_> = self
            .terms
            .iter()
            .enumerate()
            .filter(|(i, _)| *i >= 64 || residual & (1 << i) != 0)
            .map(|(_, (e, _))| e.clone())
            .collect();
        // Balanced: thousands of terms must not nest thousands deep.
        (!left.is_empty()).then(|| {
            crate::shape::balanced(left, |l, r| {
                Arc::new(BinaryExpr::new(l, Operator::And, r)) as Arc<dyn PhysicalExpr>
            })
        })
    }
}

fn one_row() -> RecordBatch {
    RecordBatch::try_new_with_options(
        Arc::new(arrow::datatypes::Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )
    .expect("a batch of one row and no columns")
}

/// Clears `kept` where `stat op value` is false; a null statistic is
/// unknown and gives `unknown`. A loop for primitive statistics, with the
/// total order Arrow's kernels use; a kernel for the others.
fn compare(
    stat: &ArrayRef,
    op: Operator,
    value: &ArrayRef,
    unknown: bool,
    kept: &mut [bool],
) -> Option<()> {
    fn primitive<T: ArrowPrimitiveType>(
        stat: &PrimitiveArray<T>,
        op: Operator,
        value: &ArrayRef,
        unknown: bool,
        kept: &mut [bool],
    ) -> Option<()> {
        let v = value.as_primitive_opt::<T>()?.value(0);
        let holds = |s: T::Native| match op {
            Operator::Lt => s.is_lt(v),
            Operator::LtEq => s.is_le(v),
            Operator::Gt => s.is_gt(v),
            _ => s.is_ge(v),
        };
        match stat.nulls() {
            None => kept
                .iter_mut()
                .zip(stat.values())
                .for_each(|(k, s)| *k &= holds(*s)),
            Some(n) => kept
                .iter_mut()
                .zip(stat.values())
                .zip(n.iter())
                .for_each(|((k, s), valid)| *k &= if valid { holds(*s) } else { unknown }),
        }
        Some(())
    }
    if stat.data_type() != value.data_type() {
        return None;
    }
    downcast_primitive_array!(
        stat => primitive(stat, op, value, unknown, kept),
        _ => {
            let value = Scalar::new(value);
            let holds = match op {
                Operator::Lt => cmp::lt(stat, &value),
                Operator::LtEq => cmp::lt_eq(stat, &value),
                Operator::Gt => cmp::gt(stat, &value),
                _ => cmp::gt_eq(stat, &value),
            }
            .ok()?;
            for (k, h) in kept.iter_mut().zip(holds.iter()) {
                *k &= h.unwrap_or(unknown);
            }
            Some(())
        }
    )
}

/// The column `expr` compares: the column itself (false), or its day,
/// `CAST(column AS DATE)` (true, [`Midnight`]).
fn compared(expr: &Arc<dyn PhysicalExpr>) -> Option<(&PhysicalColumn, bool)> {
    if let Some(c) = expr.downcast_ref::<PhysicalColumn>() {
        return Some((c, false));
    }
    let cast = expr.downcast_ref::<CastExpr>()?;
    match cast.cast_type() {
        DataType::Date32 => Some((cast.expr().downcast_ref::<PhysicalColumn>()?, true)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
