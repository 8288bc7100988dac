//! DataFusion's aggregates whose one value grows with the rows they read
//! (`string_agg`, `array_agg`), refusing a value larger than
//! [`MAX_VALUE_BYTES`], the limit on one value the sized functions share.
//!
//! Why: such a value is bounded only by the query's memory limit, which is
//! gigabytes. `string_agg` of 5,000 values of 300,000 bytes returned one
//! 1.5 GB value, and the server's peak RSS reached 4.5 GB while it did
//! (the text is copied as it is finished and sent); past 2 GiB a value no
//! longer fits the length of a PostgreSQL protocol field, and PostgreSQL
//! refuses one past 1 GB. The wrapper keeps the function's name, signature,
//! types and states, and counts per group, as rows and partial states
//! come in, the bytes of the values the result must hold (a lower bound:
//! NULLs, the list's own offsets and the delimiters between rows are not
//! counted), so it
//! stops as soon as the result is sure to be too large. A `DISTINCT`
//! aggregate keeps only some of what comes in, so it is checked on its
//! result alone, which its state (counted against the query's memory)
//! bounds meanwhile.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, EmitTo, GroupsAccumulator,
    ReversedUDAF, SetMonotonicity, Signature, StatisticsArgs,
};

use super::MAX_VALUE_BYTES;
use crate::error::Error;

/// The aggregates guarded, by name.
const GUARDED: [&str; 2] = ["string_agg", "array_agg"];

/// The guarded versions of the aggregates in `registered` (the session's
/// own, so signatures and coercions stay DataFusion's).
pub fn guard(registered: impl Fn(&str) -> Option<Arc<AggregateUDF>>) -> Vec<AggregateUDF> {
    GUARDED
        .into_iter()
        .filter_map(|name| Some(wrap(registered(name)?.as_ref().clone())))
        .collect()
}

fn wrap(inner: AggregateUDF) -> AggregateUDF {
    AggregateUDF::new_from_impl(Capped { inner })
}

/// The bytes the values of `array`'s row `row` take in a result that holds
/// them: a string's or binary's length, a list's elements', a struct's
/// fields', a fixed-width value's width; 0 for NULL and other types.
fn row_bytes(array: &dyn Array, row: usize) -> u64 {
    if array.is_null(row) {
        return 0;
    }
    let range = |child: &ArrayRef, from: usize, to: usize| -> u64 {
        (from..to).map(|i| row_bytes(child.as_ref(), i)).sum()
    };
    match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().value_length(row) as u64,
        DataType::LargeUtf8 => array.as_string::<i64>().value_length(row) as u64,
        DataType::Binary => array.as_binary::<i32>().value_length(row) as u64,
        DataType::LargeBinary => array.as_binary::<i64>().value_length(row) as u64,
        // A view's low 32 bits are its length.
        DataType::Utf8View => array.as_string_view().views()[row] as u32 as u64,
        DataType::BinaryView => array.as_binary_view().views()[row] as u32 as u64,
        DataType::List(_) => {
            let list = array.as_list::<i32>();
            let o = list.value_offsets();
            range(list.values(), o[row] as usize, o[row + 1] as usize)
        }
        DataType::LargeList(_) => {
            let list = array.as_list::<i64>();
            let o = list.value_offsets();
            range(list.values(), o[row] as usize, o[row + 1] as usize)
        }
        DataType::Struct(_) => array
            .as_struct()
            .columns()
            .iter()
            .map(|c| row_bytes(c.as_ref(), row))
            .sum(),
        t => t.primitive_width().unwrap_or(0) as u64,
    }
}

/// The bytes of a result value, as [`row_bytes`] counts them.
fn value_bytes(value: &ScalarValue) -> u64 {
    match value {
        ScalarValue::List(a) => row_bytes(a.as_ref(), 0),
        ScalarValue::LargeList(a) => row_bytes(a.as_ref(), 0),
        v => super::value_bytes(v).unwrap_or(0) as u64,
    }
}

/// The error for `name`'s value of at least `bytes` bytes.
fn too_large(name: &str, bytes: u64, sure: bool) -> DataFusionError {
    let what = match sure {
        true => format!("a result of {bytes} bytes"),
        false => format!("a result holding at least {bytes} bytes of values"),
    };
    DataFusionError::External(Box::new(Error::LimitExceeded(format!(
        "{name}(): {what} is larger than the {MAX_VALUE_BYTES}-byte limit on one value"
    ))))
}

/// An aggregate of [`GUARDED`], its values' bytes counted.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Capped {
    inner: AggregateUDF,
}

impl AggregateUDFImpl for Capped {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
        self.inner.return_field(arg_fields)
    }
    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }
    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let counted = !args.is_distinct;
        Ok(Box::new(One {
            inner: self.inner.accumulator(args)?,
            name: self.name().to_string(),
            counted,
            floor: 0,
        }))
    }
    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let counted = !args.is_distinct;
        Ok(Box::new(One {
            inner: self.inner.create_sliding_accumulator(args)?,
            name: self.name().to_string(),
            counted,
            floor: 0,
        }))
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }
    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        let counted = !args.is_distinct;
        Ok(Box::new(Groups {
            inner: self.inner.create_groups_accumulator(args)?,
            name: self.name().to_string(),
            counted,
            floors: vec![],
        }))
    }
    fn with_beneficial_ordering(
        self: Arc<Self>,
        beneficial_ordering: bool,
    ) -> Result<Option<Arc<dyn AggregateUDFImpl>>> {
        let inner = self
            .inner
            .clone()
            .with_beneficial_ordering(beneficial_ordering)?;
        Ok(inner.map(|inner| Arc::new(Capped { inner }) as _))
    }
    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.order_sensitivity()
    }
    fn reverse_expr(&self) -> ReversedUDAF {
        match self.inner.reverse_udf() {
            ReversedUDAF::Reversed(udf) => {
                ReversedUDAF::Reversed(Arc::new(wrap(udf.as_ref().clone())))
            }
            other => other,
        }
    }
    fn is_descending(&self) -> Option<bool> {
        self.inner.is_descending()
    }
    fn value_from_stats(&self, args: &StatisticsArgs) -> Option<ScalarValue> {
        self.inner.value_from_stats(args)
    }
    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.inner.default_value(data_type)
    }
    fn supports_null_handling_clause(&self) -> bool {
        self.inner.supports_null_handling_clause()
    }
    fn supports_within_group_clause(&self) -> bool {
        self.inner.supports_within_group_clause()
    }
    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.inner().set_monotonicity(data_type)
    }
}

/// One group's accumulator, with the bytes its result must hold.
#[derive(Debug)]
struct One {
    inner: Box<dyn Accumulator>,
    name: String,
    /// Whether every value that comes in is kept (not `DISTINCT`).
    counted: bool,
    /// The bytes of the values come in so far.
    floor: u64,
}

impl One {
    fn count(&mut self, values: &ArrayRef) -> Result<()> {
        if self.counted {
            let bytes: u64 = (0..values.len()).map(|r| row_bytes(values, r)).sum();
            self.floor = self.floor.saturating_add(bytes);
            if self.floor > MAX_VALUE_BYTES as u64 {
                return Err(too_large(&self.name, self.floor, false));
            }
        }
        Ok(())
    }
}

impl Accumulator for One {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.count(&values[0])?;
        self.inner.update_batch(values)
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.count(&states[0])?;
        self.inner.merge_batch(states)
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if self.counted {
            let bytes: u64 = (0..values[0].len()).map(|r| row_bytes(&values[0], r)).sum();
            self.floor = self.floor.saturating_sub(bytes);
        }
        self.inner.retract_batch(values)
    }
    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.inner.state()
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let value = self.inner.evaluate()?;
        match value_bytes(&value) {
            bytes if bytes > MAX_VALUE_BYTES as u64 => Err(too_large(&self.name, bytes, true)),
            _ => Ok(value),
        }
    }
    fn size(&self) -> usize {
        self.inner.size() + size_of::<Self>() - size_of::<Box<dyn Accumulator>>()
    }
}

/// A groups accumulator, with the bytes each group's result must hold.
struct Groups {
    inner: Box<dyn GroupsAccumulator>,
    name: String,
    /// Whether every value that comes in is kept (not `DISTINCT`).
    counted: bool,
    /// The bytes of the values come in so far, by group.
    floors: Vec<u64>,
}

impl Groups {
    fn count(
        &mut self,
        values: &ArrayRef,
        groups: &[usize],
        filter: Option<&BooleanArray>,
        total: usize,
    ) -> Result<()> {
        if !self.counted {
            return Ok(());
        }
        if self.floors.len() < total {
            self.floors.resize(total, 0);
        }
        for (row, &g) in groups.iter().enumerate() {
            if filter.is_some_and(|f| !f.is_valid(row) || !f.value(row)) {
                continue;
            }
            let floor = &mut self.floors[g];
            *floor = floor.saturating_add(row_bytes(values, row));
            if *floor > MAX_VALUE_BYTES as u64 {
                return Err(too_large(&self.name, *floor, false));
            }
        }
        Ok(())
    }

    /// Drops the counts of the groups `emit_to` emits.
    fn emitted(&mut self, emit_to: EmitTo) {
        if self.counted {
            emit_to.take_needed(&mut self.floors);
        }
    }
}

impl GroupsAccumulator for Groups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.count(&values[0], group_indices, opt_filter, total_num_groups)?;
        self.inner
            .update_batch(values, group_indices, opt_filter, total_num_groups)
    }
    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.count(&values[0], group_indices, None, total_num_groups)?;
        self.inner
            .merge_batch(values, group_indices, total_num_groups)
    }
    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        self.emitted(emit_to);
        let values = self.inner.evaluate(emit_to)?;
        for row in 0..values.len() {
            let bytes = row_bytes(&values, row);
            if bytes > MAX_VALUE_BYTES as u64 {
                return Err(too_large(&self.name, bytes, true));
            }
        }
        Ok(values)
    }
    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        self.emitted(emit_to);
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
        self.inner.size() + self.floors.capacity() * size_of::<u64>()
    }
}

#[cfg(test)]
mod tests;
