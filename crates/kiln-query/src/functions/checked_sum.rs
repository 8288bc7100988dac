//! `sum` of integers fails when the total leaves its type's range
//! ("integer sum out of range", SQLSTATE 22003), where DataFusion's wraps
//! around and answers a wrong total without a word; so does a `sum` of
//! `DECIMAL(p, s)` (p up to 38) whose total has more digits than its type
//! holds ("numeric sum out of range"): DataFusion's wraps past 128 bits
//! and returns a value its type cannot hold below that (two values of 38
//! nines summed to a negative one).
//!
//! It replaces DataFusion's `sum` under the same name, and is DataFusion's
//! for everything but the accumulators of an integer sum: signature,
//! return types, states (so cube parts and partial states keep their
//! form), and the other types' accumulators. Integer sums add with
//! checked adds, in a row or group at a time; the groups accumulator is
//! DataFusion's own, given a checked add that flags an overflow, and the
//! flag is read after every batch.
//!
//! `sum(DISTINCT x)` (of integers or decimals) and a sum of integers over
//! a window frame that slides (`ROWS BETWEEN ...`) keep their total in 128
//! bits (a sum of decimals over one in 256) and fail only when the total
//! itself is out of range: a sliding frame adds its new rows before
//! it takes the old ones away, and a set of distinct values has no order,
//! so a check on each add could fail on a total that fits.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::datatypes::{
    ArrowNativeTypeOp, ArrowNumericType, DataType, Decimal128Type, DecimalType, FieldRef,
    Int64Type, UInt64Type, i256,
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
use datafusion_functions_aggregate_common::utils::GenericDistinctBuffer;

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
    let kind = match t {
        DataType::Decimal128(..) => "numeric",
        _ => "integer",
    };
    DataFusionError::ArrowError(
        Box::new(ArrowError::ArithmeticOverflow(format!(
            "{kind} sum out of range of {t}"
        ))),
        None,
    )
}

/// Refuses a decimal total with more digits than its type's precision.
fn in_precision(totals: &ArrayRef, t: &DataType) -> Result<()> {
    if let DataType::Decimal128(p, _) = t {
        let totals = totals.as_primitive::<Decimal128Type>();
        if totals
            .iter()
            .flatten()
            .any(|v| !Decimal128Type::is_valid_decimal_precision(v, *p))
        {
            return Err(out_of_range(t));
        }
    }
    Ok(())
}

/// Whether `args` sum a `DECIMAL` of up to 38 digits into one.
fn decimal(args: &AccumulatorArgs) -> bool {
    matches!(args.return_type(), DataType::Decimal128(..))
        && args
            .expr_fields
            .first()
            .is_some_and(|f| matches!(f.data_type(), DataType::Decimal128(..)))
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
        match (args.return_type(), args.is_distinct) {
            (DataType::Int64, false) => Ok(Box::new(Total::<Int64Type>::new(DataType::Int64))),
            (DataType::UInt64, false) => Ok(Box::new(Total::<UInt64Type>::new(DataType::UInt64))),
            (t, false) if decimal(&args) => Ok(Box::new(Total::<Decimal128Type>::new(t.clone()))),
            (DataType::Int64, true) => {
                Ok(Box::new(DistinctTotal::<Int64Type>::new(DataType::Int64)))
            }
            (DataType::UInt64, true) => {
                Ok(Box::new(DistinctTotal::<UInt64Type>::new(DataType::UInt64)))
            }
            (t, true) if decimal(&args) => {
                Ok(Box::new(DistinctTotal::<Decimal128Type>::new(t.clone())))
            }
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
            DataType::Int64 => Ok(totals::<Int64Type>(DataType::Int64)),
            DataType::UInt64 => Ok(totals::<UInt64Type>(DataType::UInt64)),
            t if decimal(&args) => Ok(totals::<Decimal128Type>(t.clone())),
            _ => self.inner.create_groups_accumulator(args),
        }
    }
    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        match (args.return_type(), args.is_distinct) {
            (DataType::Int64, false) => Ok(Box::new(SlidingTotal::<Int64Type>::default())),
            (DataType::UInt64, false) => Ok(Box::new(SlidingTotal::<UInt64Type>::default())),
            (DataType::Int64, true) => Ok(Box::new(SlidingDistinctTotal::default())),
            (t, false) if decimal(&args) => Ok(Box::new(SlidingDecimalTotal::new(t.clone()))),
            _ => self.inner.create_sliding_accumulator(args),
        }
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

/// A total's type that a 128-bit total can be kept for.
trait Wide: Numeric<Native: Into<i128> + TryFrom<i128>> {}
impl<T: Numeric<Native: Into<i128> + TryFrom<i128>>> Wide for T {}

/// A 128-bit total as `T`, or the error of one out of its range.
fn narrow<T: Wide>(total: Option<i128>) -> Result<ScalarValue> {
    let v = total
        .map(|t| T::Native::try_from(t).map_err(|_| out_of_range(&T::DATA_TYPE)))
        .transpose()?;
    ScalarValue::new_primitive::<T>(v, &T::DATA_TYPE)
}

/// One total of type `data_type`, added to with checked adds.
#[derive(Debug)]
struct Total<T: Numeric> {
    sum: Option<T::Native>,
    data_type: DataType,
}

impl<T: Numeric> Total<T> {
    fn new(data_type: DataType) -> Self {
        Self {
            sum: None,
            data_type,
        }
    }
}

impl<T: Numeric> Accumulator for Total<T> {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let values = values[0].as_primitive::<T>();
        let overflow = || out_of_range(&self.data_type);
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
        // A partial total may pass its type's digits; the final one may not.
        Ok(vec![ScalarValue::new_primitive::<T>(
            self.sum,
            &self.data_type,
        )?])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let total = ScalarValue::new_primitive::<T>(self.sum, &self.data_type)?;
        in_precision(&total.to_array()?, &self.data_type)?;
        Ok(total)
    }
    fn size(&self) -> usize {
        size_of::<Self>()
    }
}

/// Totals per group of type `data_type`: DataFusion's accumulator, given
/// an add that flags an overflow instead of wrapping.
fn totals<T: Numeric>(data_type: DataType) -> Box<dyn GroupsAccumulator> {
    let overflowed = Arc::new(AtomicBool::new(false));
    let flag = overflowed.clone();
    let add = move |x: &mut T::Native, y: T::Native| match x.add_checked(y) {
        Ok(v) => *x = v,
        Err(_) => flag.store(true, Ordering::Relaxed),
    };
    Box::new(Totals {
        inner: PrimitiveGroupsAccumulator::<T, _>::new(&data_type, add),
        overflowed,
        data_type,
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
        let totals = self.inner.evaluate(emit_to)?;
        in_precision(&totals, &self.data_type)?;
        Ok(totals)
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

/// `sum(DISTINCT x)`: DataFusion's set of distinct values, kept in the
/// total's type `out` as its state is, summed in 128 bits with checked
/// adds.
#[derive(Debug)]
struct DistinctTotal<T: Wide> {
    values: GenericDistinctBuffer<T>,
    out: DataType,
}

impl<T: Wide> DistinctTotal<T> {
    fn new(out: DataType) -> Self {
        Self {
            values: GenericDistinctBuffer::new(out.clone()),
            out,
        }
    }
}

impl<T: Wide> Accumulator for DistinctTotal<T> {
    /// A decimal argument comes in its own precision (a `DECIMAL(10, 2)`
    /// summed into a `DECIMAL(20, 2)`): the same values, relabelled.
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        match values.first() {
            Some(v) if v.data_type() != &self.out => {
                let v = arrow::compute::cast(v, &self.out)?;
                self.values.update_batch(&[v])
            }
            _ => self.values.update_batch(values),
        }
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.values.merge_batch(states)
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.values.state()
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let values = &self.values.values;
        if values.is_empty() {
            return ScalarValue::try_from(&self.out);
        }
        let total = values
            .iter()
            .try_fold(0i128, |t, v| t.checked_add(v.0.into()))
            .ok_or_else(|| out_of_range(&self.out))?;
        if let DataType::Decimal128(p, s) = self.out {
            return match Decimal128Type::is_valid_decimal_precision(total, p) {
                true => Ok(ScalarValue::Decimal128(Some(total), p, s)),
                false => Err(out_of_range(&self.out)),
            };
        }
        narrow::<T>(Some(total))
    }
    fn size(&self) -> usize {
        size_of::<Self>() + self.values.size()
    }
}

/// `sum(x)` over a sliding frame: a 128-bit total that rows are added to
/// and taken from, and how many rows it holds. Its state is DataFusion's
/// (the total as `T`, the count).
#[derive(Debug)]
struct SlidingTotal<T: Wide> {
    sum: i128,
    count: u64,
    _type: PhantomData<T>,
}

impl<T: Wide> Default for SlidingTotal<T> {
    fn default() -> Self {
        Self {
            sum: 0,
            count: 0,
            _type: PhantomData,
        }
    }
}

/// The 128-bit sum of an array's valid values, and how many there are.
fn wide_sum<T: Wide>(values: &ArrayRef) -> (i128, u64) {
    let values = values.as_primitive::<T>();
    let sum = values.iter().flatten().map(Into::<i128>::into).sum();
    (sum, (values.len() - values.null_count()) as u64)
}

impl<T: Wide> Accumulator for SlidingTotal<T> {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let (sum, count) = wide_sum::<T>(&values[0]);
        self.sum += sum;
        self.count += count;
        Ok(())
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let (sum, count) = wide_sum::<T>(&values[0]);
        self.sum -= sum;
        self.count -= count;
        Ok(())
    }
    fn supports_retract_batch(&self) -> bool {
        true
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.sum += wide_sum::<T>(&states[0]).0;
        let counts = states[1].as_primitive::<UInt64Type>();
        self.count += counts.iter().flatten().sum::<u64>();
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            self.evaluate()?,
            ScalarValue::UInt64(Some(self.count)),
        ])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        narrow::<T>((self.count != 0).then_some(self.sum))
    }
    fn size(&self) -> usize {
        size_of::<Self>()
    }
}

/// `sum(x)` of a DECIMAL over a sliding frame: a 256-bit total that rows
/// (128-bit values) are added to and taken from, so no order of adds and
/// retractions leaves its range, checked against the digits of its type
/// `out` when read. Its state is DataFusion's (the total, the count).
#[derive(Debug)]
struct SlidingDecimalTotal {
    sum: i256,
    count: u64,
    out: DataType,
}

impl SlidingDecimalTotal {
    fn new(out: DataType) -> Self {
        Self {
            sum: i256::ZERO,
            count: 0,
            out,
        }
    }

    /// The 256-bit sum of `values` (relabelled in the total's type, as
    /// [`DistinctTotal`] does), and how many there are.
    fn wide_sum(&self, values: &ArrayRef) -> Result<(i256, u64)> {
        let values = match values.data_type() == &self.out {
            true => values.clone(),
            false => arrow::compute::cast(values, &self.out)?,
        };
        let values = values.as_primitive::<Decimal128Type>();
        let sum = values
            .iter()
            .flatten()
            .fold(i256::ZERO, |t, v| t.wrapping_add(i256::from_i128(v)));
        Ok((sum, (values.len() - values.null_count()) as u64))
    }
}

impl Accumulator for SlidingDecimalTotal {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let (sum, count) = self.wide_sum(&values[0])?;
        self.sum = self.sum.wrapping_add(sum);
        self.count += count;
        Ok(())
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let (sum, count) = self.wide_sum(&values[0])?;
        self.sum = self.sum.wrapping_sub(sum);
        self.count -= count;
        Ok(())
    }
    fn supports_retract_batch(&self) -> bool {
        true
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.sum = self.sum.wrapping_add(self.wide_sum(&states[0])?.0);
        let counts = states[1].as_primitive::<UInt64Type>();
        self.count += counts.iter().flatten().sum::<u64>();
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            self.evaluate()?,
            ScalarValue::UInt64(Some(self.count)),
        ])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let DataType::Decimal128(p, s) = self.out else {
            return Err(out_of_range(&self.out));
        };
        if self.count == 0 {
            return Ok(ScalarValue::Decimal128(None, p, s));
        }
        match self.sum.to_i128() {
            Some(v) if Decimal128Type::is_valid_decimal_precision(v, p) => {
                Ok(ScalarValue::Decimal128(Some(v), p, s))
            }
            _ => Err(out_of_range(&self.out)),
        }
    }
    fn size(&self) -> usize {
        size_of::<Self>()
    }
}

/// `sum(DISTINCT x)` of a BIGINT over a sliding frame: how many times each
/// value is in the frame, and the 128-bit total of the values that are.
/// Its state is DataFusion's (the list of values).
#[derive(Debug, Default)]
struct SlidingDistinctTotal {
    counts: HashMap<i64, usize>,
    sum: i128,
}

impl SlidingDistinctTotal {
    fn add(&mut self, values: &ArrayRef) {
        for v in values.as_primitive::<Int64Type>().iter().flatten() {
            let n = self.counts.entry(v).or_default();
            if *n == 0 {
                self.sum += i128::from(v);
            }
            *n += 1;
        }
    }
}

impl Accumulator for SlidingDistinctTotal {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0]);
        Ok(())
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for v in values[0].as_primitive::<Int64Type>().iter().flatten() {
            if let Some(n) = self.counts.get_mut(&v) {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(&v);
                    self.sum -= i128::from(v);
                }
            }
        }
        Ok(())
    }
    fn supports_retract_batch(&self) -> bool {
        true
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for list in states[0].as_list::<i32>().iter().flatten() {
            self.add(&list);
        }
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let keys: Vec<_> = self
            .counts
            .keys()
            .map(|&v| ScalarValue::Int64(Some(v)))
            .collect();
        let list = ScalarValue::new_list_nullable(&keys, &DataType::Int64);
        Ok(vec![ScalarValue::List(list)])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        narrow::<Int64Type>((!self.counts.is_empty()).then_some(self.sum))
    }
    fn size(&self) -> usize {
        size_of::<Self>() + self.counts.capacity() * size_of::<(i64, usize)>()
    }
}

#[cfg(test)]
mod tests;
