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

use datafusion::arrow::array::{ArrayRef, BooleanArray};
use datafusion::arrow::compute::{filter, nullif};
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
    /// Identity: the cube, the measure's position in it, and whether its
    /// states are a part's as kept ([`Self::kept`]).
    key: (u64, usize, bool),
}

impl MergeStates {
    /// Merges the states a scan returns (`inner` merges a distinct
    /// count's in the scan's form).
    pub fn new(inner: Arc<AggregateFunctionExpr>, cube_id: u64, measure: usize) -> Self {
        let states = inner.state_fields().map_or(1, |f| f.len());
        Self {
            name: format!("cube_{}", inner.fun().name()),
            signature: Signature::any(states, Volatility::Immutable),
            inner,
            key: (cube_id, measure, false),
        }
    }

    /// Merges parts' states as they are kept, into states kept the same
    /// way (`inner` is the aggregate that made them).
    pub fn kept(inner: Arc<AggregateFunctionExpr>, cube_id: u64, measure: usize) -> Self {
        Self {
            key: (cube_id, measure, true),
            ..Self::new(inner, cube_id, measure)
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
        let field = self.inner.field();
        let empty_is_null = self.inner.fun().default_value(field.data_type())?.is_null();
        Ok(Box::new(MergingGroups {
            inner: self.inner.create_groups_accumulator()?,
            empty_is_null,
            states: self.inner.state_fields()?,
            seen: None,
        }))
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
///
/// With a `FILTER`, a group may get no row at all. DataFusion's
/// accumulators take a group none of whose rows was filtered out or NULL
/// as seen, so such a group would evaluate to its state's zero (a `sum` of
/// 0, not NULL). Groups that got rows are tracked here, and the others
/// evaluate as an aggregate over no rows does.
struct MergingGroups {
    inner: Box<dyn GroupsAccumulator>,
    /// Whether the aggregate of no rows is NULL (all but counts).
    empty_is_null: bool,
    states: Vec<FieldRef>,
    /// Groups that got a row, once a filter was given.
    seen: Option<Vec<bool>>,
}

impl MergingGroups {
    /// `arrays` with the groups that got no row NULL, where an empty
    /// group's value is NULL and the column can be.
    fn unseen_null(
        &mut self,
        emit_to: EmitTo,
        arrays: Vec<ArrayRef>,
        nullable: impl Fn(usize) -> bool,
    ) -> Result<Vec<ArrayRef>> {
        let Some(seen) = &mut self.seen else {
            return Ok(arrays);
        };
        let seen = emit_to.take_needed(seen);
        if !self.empty_is_null || seen.iter().all(|s| *s) {
            return Ok(arrays);
        }
        let unseen = BooleanArray::from_iter(seen.iter().map(|s| Some(!s)));
        arrays
            .into_iter()
            .enumerate()
            .map(|(i, a)| match nullable(i) {
                true => Ok(nullif(&a, &unseen)?),
                false => Ok(a),
            })
            .collect()
    }
}

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
            return self
                .inner
                .merge_batch(values, group_indices, total_num_groups);
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
        let seen = self.seen.get_or_insert_with(Vec::new);
        seen.resize(total_num_groups, false);
        for g in &indices {
            seen[*g] = true;
        }
        self.inner.merge_batch(&values, &indices, total_num_groups)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner
            .merge_batch(values, group_indices, total_num_groups)
    }

    fn convert_to_state(&self, _: &[ArrayRef], _: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        not_impl_err!("cube states are already states")
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let value = self.inner.evaluate(emit_to)?;
        let mut out = self.unseen_null(emit_to, vec![value], |_| true)?;
        Ok(out.remove(0))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let states = self.inner.state(emit_to)?;
        let nullable: Vec<bool> = self.states.iter().map(|f| f.is_nullable()).collect();
        self.unseen_null(emit_to, states, |i| {
            nullable.get(i).copied().unwrap_or(false)
        })
    }

    fn size(&self) -> usize {
        self.inner.size() + self.seen.as_ref().map_or(0, Vec::capacity)
    }
}
