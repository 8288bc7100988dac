//! `count` over collapsed runs: the row count a [`DedupExec`] in run mode
//! keeps beside each row it lets through.
//!
//! Why: a `count(*)` next to `count(DISTINCT user_id)` (a top-regions or a
//! funnel chart) counts every row, so the repeats of a user's run could not
//! be dropped before the group-by. They can if each kept row carries how
//! many rows it stands for: the count becomes a sum of those. The
//! aggregate keeps `count`'s name, result and partial state (one non-null
//! `Int64`), so a final aggregation that merges it as `count` still does.
//!
//! [`DedupExec`]: super::DedupExec

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Int64Type, SchemaRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, GroupsAccumulator, Signature, Volatility,
};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
use datafusion::physical_expr::expressions::Literal;

/// `count(args...)` as `count_runs(args..., run_rows)`: the sum of
/// `run_rows` over the rows where every other argument is non-null, with
/// `count`'s name, type and state.
pub(super) fn count_over_runs(
    count: &AggregateFunctionExpr,
    run_rows: Arc<dyn PhysicalExpr>,
    schema: SchemaRef,
) -> Result<Arc<AggregateFunctionExpr>> {
    let mut args = counted_args(count);
    args.push(run_rows);
    let mut b = AggregateExprBuilder::new(
        Arc::new(AggregateUDF::new_from_impl(CountRuns::new())),
        args,
    )
    .schema(schema)
    .alias(count.name());
    if let Some(h) = count.human_display() {
        b = b.human_display(h);
    }
    Ok(Arc::new(b.build()?))
}

/// The arguments of `count` whose nulls matter: all but non-null literals
/// (`count(*)` is `count(1)`).
pub(super) fn counted_args(count: &AggregateFunctionExpr) -> Vec<Arc<dyn PhysicalExpr>> {
    count
        .expressions()
        .into_iter()
        .filter(|e| {
            e.downcast_ref::<Literal>()
                .is_none_or(|l| l.value().is_null())
        })
        .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CountRuns {
    signature: Signature,
}

impl CountRuns {
    fn new() -> Self {
        Self {
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for CountRuns {
    fn name(&self) -> &str {
        "count_runs"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn is_nullable(&self) -> bool {
        false
    }

    /// `count`'s state, so a final `count` merges it.
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let name = format_state_name(args.name, "count");
        Ok(vec![Arc::new(Field::new(name, DataType::Int64, false))])
    }

    fn accumulator(&self, _args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(RunsAccumulator(0)))
    }

    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(
        &self,
        _args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(RunsGroupsAccumulator::default()))
    }

    fn default_value(&self, _data_type: &DataType) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(Some(0)))
    }
}

/// The run lengths of the rows where every counted argument is non-null
/// (the last value is the run lengths, the others the arguments).
fn counted_runs(values: &[ArrayRef]) -> Int64Array {
    let (runs, args) = values.split_last().expect("count_runs has its run lengths");
    let nulls = args.iter().fold(None, |acc, a| {
        NullBuffer::union(acc.as_ref(), a.logical_nulls().as_ref())
    });
    let runs = runs.as_primitive::<Int64Type>();
    Int64Array::new(
        runs.values().clone(),
        NullBuffer::union(nulls.as_ref(), runs.nulls()),
    )
}

#[derive(Debug)]
struct RunsAccumulator(i64);

impl Accumulator for RunsAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.0 += counted_runs(values).iter().flatten().sum::<i64>();
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.0 += states[0]
            .as_primitive::<Int64Type>()
            .iter()
            .flatten()
            .sum::<i64>();
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Int64(Some(self.0))])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(Some(self.0)))
    }

    fn size(&self) -> usize {
        size_of_val(self)
    }
}

#[derive(Debug, Default)]
struct RunsGroupsAccumulator {
    counts: Vec<i64>,
}

impl RunsGroupsAccumulator {
    /// Adds `values[row]` to the count of group `groups[row]` for each row
    /// that passes `filter` and has a value.
    fn add(
        &mut self,
        values: &Int64Array,
        groups: &[usize],
        filter: Option<&BooleanArray>,
        total: usize,
    ) {
        self.counts.resize(total, 0);
        let v = values.values();
        if values.null_count() == 0 && filter.is_none() {
            for (&g, &n) in groups.iter().zip(v.iter()) {
                self.counts[g] += n;
            }
            return;
        }
        for (row, &g) in groups.iter().enumerate() {
            let counted =
                values.is_valid(row) && filter.is_none_or(|f| f.is_valid(row) && f.value(row));
            if counted {
                self.counts[g] += v[row];
            }
        }
    }
}

impl GroupsAccumulator for RunsGroupsAccumulator {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.add(
            &counted_runs(values),
            group_indices,
            opt_filter,
            total_num_groups,
        );
        Ok(())
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.add(
            values[0].as_primitive(),
            group_indices,
            None,
            total_num_groups,
        );
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        Ok(Arc::new(Int64Array::from(
            emit_to.take_needed(&mut self.counts),
        )))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(emit_to)?])
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let runs = counted_runs(values);
        let counted = |row: usize| {
            runs.is_valid(row) && opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row))
        };
        let state: Int64Array = (0..runs.len())
            .map(|row| if counted(row) { runs.value(row) } else { 0 })
            .collect();
        Ok(vec![Arc::new(state)])
    }

    fn size(&self) -> usize {
        self.counts.capacity() * size_of::<i64>()
    }
}
