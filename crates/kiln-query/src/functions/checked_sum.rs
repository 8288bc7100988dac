//! `sum` of integers fails when the total leaves its type's range
//! ("integer sum out of range", SQLSTATE 22003), where DataFusion's wraps
//! around and answers a wrong total without a word.
//!
//! It replaces DataFusion's `sum` under the same name, and is DataFusion's
//! for everything but the accumulators of an integer sum: signature,
//! return types, states (so cube parts and partial states keep their
//! form), and the other types' accumulators. Integer sums add with
//! checked adds, in a row or group at a time; the groups accumulator is
//! DataFusion's own, given a checked add that flags an overflow, and the
//! flag is read after every batch.
//!
//! Not covered, still wrapping: `sum(DISTINCT x)` and `sum(x)` over a
//! window frame that slides (`ROWS BETWEEN ...`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow::array::{ArrayRef, AsArray, BooleanArray};
use arrow::datatypes::{
    ArrowNativeTypeOp, ArrowNumericType, DataType, FieldRef, Int64Type, UInt64Type,
};
use arrow::error::ArrowError;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::functions_aggregate::sum::Sum;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, EmitTo, GroupsAccumulator,
    ReversedUDAF, SetMonotonicity, Signature, StatisticsArgs,
};
use datafusion_functions_aggregate_common::aggregate::groups_accumulator::prim_op::PrimitiveGroupsAccumulator;

/// DataFusion's `sum`, its integer totals checked.
#[derive(Debug, Default, PartialEq, Eq, Hash)]
pub struct CheckedSum {
    inner: Sum,
}

impl CheckedSum {
    pub fn udaf() -> AggregateUDF {
        AggregateUDF::new_from_impl(Self::default())
    }
}

/// The error of a total out of its type's range.
fn out_of_range(t: &DataType) -> DataFusionError {
    DataFusionError::ArrowError(
        Box::new(ArrowError::ArithmeticOverflow(format!(
            "integer sum out of range of {t}"
        ))),
        None,
    )
}

impl AggregateUDFImpl for CheckedSum {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }
    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if args.is_distinct {
            return self.inner.accumulator(args);
        }
        match args.return_type() {
            DataType::Int64 => Ok(Box::new(Total::<Int64Type>::default())),
            DataType::UInt64 => Ok(Box::new(Total::<UInt64Type>::default())),
            _ => self.inner.accumulator(args),
        }
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }
    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        match args.return_type() {
            DataType::Int64 => Ok(totals::<Int64Type>()),
            DataType::UInt64 => Ok(totals::<UInt64Type>()),
            _ => self.inner.create_groups_accumulator(args),
        }
    }
    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.create_sliding_accumulator(args)
    }
    fn reverse_expr(&self) -> ReversedUDAF {
        self.inner.reverse_expr()
    }
    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.order_sensitivity()
    }
    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.set_monotonicity(data_type)
    }
    fn value_from_stats(&self, args: &StatisticsArgs) -> Option<ScalarValue> {
        self.inner.value_from_stats(args)
    }
}

/// The integer types a total is kept in.
trait Numeric: ArrowNumericType + Send + Sync + std::fmt::Debug {}
impl<T: ArrowNumericType + Send + Sync + std::fmt::Debug> Numeric for T {}

/// One total, added to with checked adds.
#[derive(Debug)]
struct Total<T: Numeric> {
    sum: Option<T::Native>,
}

impl<T: Numeric> Default for Total<T> {
    fn default() -> Self {
        Self { sum: None }
    }
}

impl<T: Numeric> Accumulator for Total<T> {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let values = values[0].as_primitive::<T>();
        let overflow = || out_of_range(&T::DATA_TYPE);
        if let Some(x) = arrow::compute::sum_checked(values).map_err(|_| overflow())? {
            let v = self.sum.get_or_insert(T::Native::ZERO);
            *v = v.add_checked(x).map_err(|_| overflow())?;
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        ScalarValue::new_primitive::<T>(self.sum, &T::DATA_TYPE)
    }
    fn size(&self) -> usize {
        size_of::<Self>()
    }
}

/// Totals per group: DataFusion's accumulator, given an add that flags an
/// overflow instead of wrapping.
fn totals<T: Numeric>() -> Box<dyn GroupsAccumulator> {
    let overflowed = Arc::new(AtomicBool::new(false));
    let flag = overflowed.clone();
    let add = move |x: &mut T::Native, y: T::Native| match x.add_checked(y) {
        Ok(v) => *x = v,
        Err(_) => flag.store(true, Ordering::Relaxed),
    };
    Box::new(Totals {
        inner: PrimitiveGroupsAccumulator::<T, _>::new(&T::DATA_TYPE, add),
        overflowed,
        data_type: T::DATA_TYPE,
    })
}

/// A groups accumulator whose adds flag an overflow in `overflowed`.
struct Totals<A> {
    inner: A,
    overflowed: Arc<AtomicBool>,
    data_type: DataType,
}

impl<A> Totals<A> {
    /// The batch's result, or the overflow one of its adds flagged.
    fn checked(&self, r: Result<()>) -> Result<()> {
        match self.overflowed.swap(false, Ordering::Relaxed) {
            true => Err(out_of_range(&self.data_type)),
            false => r,
        }
    }
}

impl<A: GroupsAccumulator> GroupsAccumulator for Totals<A> {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let r = self
            .inner
            .update_batch(values, group_indices, opt_filter, total_num_groups);
        self.checked(r)
    }
    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        let r = self
            .inner
            .merge_batch(values, group_indices, total_num_groups);
        self.checked(r)
    }
    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        self.inner.evaluate(emit_to)
    }
    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        self.inner.state(emit_to)
    }
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        self.inner.convert_to_state(values, opt_filter)
    }
    fn size(&self) -> usize {
        self.inner.size() + size_of::<Self>()
    }
}

#[cfg(test)]
mod tests;
