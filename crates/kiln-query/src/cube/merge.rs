//! `cube_<aggregate>`: the aggregate function a rewritten query calls over
//! a cube's state columns. Its input rows are partial states (what
//! DataFusion's partial aggregation emits), so each row is *merged* into
//! the measure's own accumulator, which then evaluates as the original
//! aggregate would have over the raw rows. A `FILTER (WHERE ...)` on it
//! picks the state rows to merge.
//!
//! It wraps the measure's physical aggregate ([`AggregateFunctionExpr`])
//! rather than re-implementing any aggregate: every function DataFusion
//! can split into partial and final steps can be kept in a cube.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray};
use datafusion::arrow::compute::filter;
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, ScalarValue, not_impl_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, EmitTo, GroupsAccumulator, Signature, Volatility,
};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

/// Merges one measure's states of one cube.
#[derive(Debug)]
pub struct MergeStates {
    name: String,
    /// The measure's aggregate over the table's rows.
    inner: Arc<AggregateFunctionExpr>,
    signature: Signature,
    /// Identity: the cube and the measure's position in it.
    key: (u64, usize),
}

impl MergeStates {
    pub fn new(inner: Arc<AggregateFunctionExpr>, cube_id: u64, measure: usize) -> Self {
        let states = inner.state_fields().map_or(1, |f| f.len());
        Self {
            name: format!("cube_{}", inner.fun().name()),
            signature: Signature::any(states, Volatility::Immutable),
            inner,
            key: (cube_id, measure),
        }
    }
}

impl PartialEq for MergeStates {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for MergeStates {}

impl Hash for MergeStates {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state)
    }
}

impl AggregateUDFImpl for MergeStates {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(self.inner.field().data_type().clone())
    }

    fn return_field(&self, _: &[FieldRef]) -> Result<FieldRef> {
        Ok(self.inner.field())
    }

    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }

    fn accumulator(&self, _: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(Merging(self.inner.create_accumulator()?)))
    }

    fn state_fields(&self, _: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields()
    }

    fn groups_accumulator_supported(&self, _: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported()
    }

    fn create_groups_accumulator(&self, _: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(MergingGroups(
            self.inner.create_groups_accumulator()?,
        )))
    }

    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.inner.fun().default_value(data_type)
    }
}

/// An accumulator whose input rows are states.
#[derive(Debug)]
struct Merging(Box<dyn Accumulator>);

impl Accumulator for Merging {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.0.merge_batch(values)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.0.merge_batch(states)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.0.state()
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.0.evaluate()
    }

    fn size(&self) -> usize {
        self.0.size()
    }
}

/// A groups accumulator whose input rows are states.
struct MergingGroups(Box<dyn GroupsAccumulator>);

impl GroupsAccumulator for MergingGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        // Merging takes no filter: the rows it does not pass are left out.
        let Some(keep) = opt_filter else {
            return self.0.merge_batch(values, group_indices, total_num_groups);
        };
        let values = values
            .iter()
            .map(|v| Ok(filter(v, keep)?))
            .collect::<Result<Vec<_>>>()?;
        let indices: Vec<usize> = group_indices
            .iter()
            .zip(keep.iter())
            .filter(|(_, k)| k.unwrap_or(false))
            .map(|(g, _)| *g)
            .collect();
        debug_assert_eq!(values.first().map_or(0, |v| v.len()), indices.len());
        self.0.merge_batch(&values, &indices, total_num_groups)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.0.merge_batch(values, group_indices, total_num_groups)
    }

    fn convert_to_state(&self, _: &[ArrayRef], _: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        not_impl_err!("cube states are already states")
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        self.0.evaluate(emit_to)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        self.0.state(emit_to)
    }

    fn size(&self) -> usize {
        self.0.size()
    }
}
