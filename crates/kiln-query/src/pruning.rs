//! Pruning: which segments and memory partitions a query's filters can skip,
//! decided from manifest statistics (no file is opened) with DataFusion's
//! `PruningPredicate`. Inside the files that remain, Parquet row groups and
//! pages are pruned again by the Parquet reader.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, UInt64Array};
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use datafusion::physical_expr::PhysicalExpr;
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
pub fn pruning_predicate(
    predicate: Option<&Arc<dyn PhysicalExpr>>,
    schema: &SchemaRef,
) -> Option<Arc<PruningPredicate>> {
    PruningPredicateBuilder::new()
        .with_file_schema(schema.clone())
        .build(predicate?.clone())
}

/// Which containers may hold rows matching `pruning` (true = keep).
/// Everything is kept when there is no predicate or it cannot be evaluated.
pub fn keep(
    pruning: Option<&PruningPredicate>,
    schema: &SchemaRef,
    containers: &[ContainerStats],
) -> Vec<bool> {
    let all = vec![true; containers.len()];
    let Some(pp) = pruning.filter(|_| !containers.is_empty()) else {
        return all;
    };
    pp.prune(&Stats { schema, containers }).unwrap_or(all)
}
