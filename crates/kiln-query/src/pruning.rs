//! Pruning: which segments and memory partitions a query's filters can skip,
//! decided from manifest statistics (no file is opened) with DataFusion's
//! `PruningPredicate`, or directly when the filter is a conjunction of
//! column-vs-value comparisons ([`Bounds`]). Inside the files that remain,
//! Parquet row groups and pages are pruned again by the Parquet reader.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, Scalar, UInt64Array};
use arrow::compute::and_kleene as and;
use arrow::compute::kernels::cmp;
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Column as PhysicalColumn};
use datafusion::physical_expr::utils::{collect_columns, split_conjunction};
use datafusion::physical_expr_common::physical_expr::is_volatile;
use datafusion::physical_optimizer::pruning::{PruningPredicate, PruningPredicateBuilder};
use kiln_storage::{NANOS_PER_DAY, StatValue};

/// Min/max/null statistics of one container (a segment or a memory partition).
#[derive(Debug, Clone, Default)]
pub struct ContainerStats {
    /// Per table column: (min, max, null count); None where unknown.
    pub columns: Vec<(Option<StatValue>, Option<StatValue>, Option<u64>)>,
    pub rows: Option<u64>,
}

impl ContainerStats {
    /// Statistics of a memory partition: only its time range (the day) is known.
    pub fn day(ncols: usize, time_column: usize, day: i32) -> Self {
        let mut columns = vec![(None, None, None); ncols];
        let start = day as i64 * NANOS_PER_DAY;
        columns[time_column] = (
            Some(StatValue::Int(start)),
            Some(StatValue::Int(start + NANOS_PER_DAY - 1)),
            None,
        );
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
/// commonest shape of filter, two comparison kernels per conjunct decide
/// the same.
#[derive(Debug)]
pub struct Bounds {
    terms: Vec<Bound>,
}

#[derive(Debug)]
struct Bound {
    column: Column,
    data_type: DataType,
    /// With the column on the left.
    op: Operator,
    value: Arc<dyn PhysicalExpr>,
}

impl Bounds {
    /// The bounds of `predicate`, if every conjunct is one.
    fn of(predicate: &Arc<dyn PhysicalExpr>, schema: &SchemaRef) -> Option<Self> {
        let terms = split_conjunction(predicate)
            .into_iter()
            .map(|e| Bound::of(e, schema))
            .collect::<Option<Vec<_>>>()?;
        Some(Self { terms })
    }

    fn prune(&self, stats: &dyn PruningStatistics) -> Option<Vec<bool>> {
        let n = stats.num_containers();
        let mut kept = vec![true; n];
        // The values hold no column: evaluated against one row of nothing.
        let one_row = RecordBatch::try_new_with_options(
            Arc::new(arrow::datatypes::Schema::empty()),
            vec![],
            &RecordBatchOptions::new().with_row_count(Some(1)),
        )
        .ok()?;
        for t in &self.terms {
            if let Some(k) = t.keep(stats, &one_row, n) {
                for (i, keep) in k.iter().enumerate() {
                    // Null: the statistics are unknown, so the container stays.
                    kept[i] &= keep != Some(false);
                }
            }
        }
        Some(kept)
    }
}

impl Bound {
    fn of(expr: &Arc<dyn PhysicalExpr>, schema: &SchemaRef) -> Option<Self> {
        let b = expr.downcast_ref::<BinaryExpr>()?;
        let (column, op, value) = match (column_of(b.left()), column_of(b.right())) {
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
        let field = schema.field_with_name(column.name()).ok()?;
        Some(Self {
            column: Column::new_unqualified(column.name()),
            data_type: field.data_type().clone(),
            op,
            value: value.clone(),
        })
    }

    /// Per container: false where no row can match; None when this term
    /// cannot decide (unknown value, type or statistics).
    fn keep(
        &self,
        stats: &dyn PruningStatistics,
        one_row: &RecordBatch,
        n: usize,
    ) -> Option<BooleanArray> {
        let value = match self.value.evaluate(one_row).ok()? {
            ColumnarValue::Scalar(v) => v,
            ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0).ok()?,
        };
        // `column op NULL` matches nothing, but keeping is always safe.
        let value = value
            .cast_to(&self.data_type)
            .ok()
            .filter(|v| !v.is_null())?;
        let value = Scalar::new(value.to_array().ok()?);
        let min = || stats.min_values(&self.column).filter(|a| a.len() == n);
        let max = || stats.max_values(&self.column).filter(|a| a.len() == n);
        let kept = match self.op {
            Operator::Eq => and(
                &cmp::lt_eq(&min()?, &value).ok()?,
                &cmp::gt_eq(&max()?, &value).ok()?,
            )
            .ok()?,
            Operator::Lt => cmp::lt(&min()?, &value).ok()?,
            Operator::LtEq => cmp::lt_eq(&min()?, &value).ok()?,
            Operator::Gt => cmp::gt(&max()?, &value).ok()?,
            Operator::GtEq => cmp::gt_eq(&max()?, &value).ok()?,
            _ => return None,
        };
        // A container whose values are all null matches no comparison.
        match (stats.null_counts(&self.column), stats.row_counts()) {
            (Some(nulls), Some(rows)) if nulls.len() == n && rows.len() == n => {
                and(&kept, &cmp::neq(&nulls, &rows).ok()?).ok()
            }
            _ => Some(kept),
        }
    }
}

/// The column `expr` is, if it is a bare column.
fn column_of(expr: &Arc<dyn PhysicalExpr>) -> Option<&PhysicalColumn> {
    expr.downcast_ref::<PhysicalColumn>()
}

#[cfg(test)]
mod tests;
