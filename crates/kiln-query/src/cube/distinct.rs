//! The state a cube keeps for `count(DISTINCT x)` over an integer column: a
//! 64-bit roaring bitmap of the values per group, which stays small for the
//! dense ids (users, sessions) dashboards count, merges by union and counts
//! exactly. DataFusion's own state (the list of distinct values) is kept
//! for other types.
//!
//! Signed values are mapped to `u64` with the sign bit flipped, which keeps
//! them distinct (and in order).

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BinaryBuilder, BooleanArray, Int64Array,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Int64Type, UInt64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, EmitTo, GroupsAccumulator, Signature, Volatility,
};
use roaring::{MultiOps, RoaringTreemap};

use crate::functions::bitmap::{deserialize, serialize};

/// Whether a distinct count over `t` keeps a bitmap.
pub fn kept_as_bitmap(t: &DataType) -> bool {
    t.is_integer()
}

/// `count(DISTINCT x)` of integers, with a bitmap state.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DistinctBitmap {
    signature: Signature,
}

impl Default for DistinctBitmap {
    fn default() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

const NAME: &str = "cube_distinct_count";

impl AggregateUDFImpl for DistinctBitmap {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format_state_name(args.name, "bitmap"),
            DataType::Binary,
            true,
        ))])
    }

    fn accumulator(&self, _: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(One(Pending::default())))
    }

    fn groups_accumulator_supported(&self, _: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(&self, _: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(Groups(vec![], 0)))
    }

    fn default_value(&self, _: &DataType) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(Some(0)))
    }
}

/// Calls `f(row, key)` for each non-NULL value of `values`.
fn keys(values: &ArrayRef, mut f: impl FnMut(usize, u64)) -> Result<()> {
    if values.data_type() == &DataType::UInt64 {
        let a = values.as_primitive::<UInt64Type>();
        for (row, v) in a.iter().enumerate() {
            if let Some(v) = v {
                f(row, v);
            }
        }
        return Ok(());
    }
    if !values.data_type().is_integer() {
        return exec_err!("{NAME}: not an integer column: {}", values.data_type());
    }
    let a = cast(values, &DataType::Int64)?;
    for (row, v) in a.as_primitive::<Int64Type>().iter().enumerate() {
        if let Some(v) = v {
            f(row, (v as u64) ^ (1 << 63));
        }
    }
    Ok(())
}

/// Each non-NULL bitmap of a state column.
fn bitmaps(states: &ArrayRef, mut f: impl FnMut(usize, RoaringTreemap)) -> Result<()> {
    let a = states.as_binary::<i32>();
    for (row, b) in a.iter().enumerate() {
        if let Some(b) = b {
            f(row, deserialize(NAME, b)?);
        }
    }
    Ok(())
}

/// One group's bitmap, with the states merged into it since it was last
/// read. Merging thousands of small bitmaps into a large one, one at a time,
/// rewrites the large one's containers each time; they are kept and united
/// in one pass when the value is needed.
#[derive(Debug, Default)]
struct Pending {
    bitmap: RoaringTreemap,
    merged: Vec<RoaringTreemap>,
}

impl Pending {
    fn get(&mut self) -> &mut RoaringTreemap {
        if !self.merged.is_empty() {
            let merged = std::mem::take(&mut self.merged);
            let own = std::mem::take(&mut self.bitmap);
            self.bitmap = std::iter::once(own).chain(merged).union();
        }
        &mut self.bitmap
    }

    fn take(mut self) -> RoaringTreemap {
        self.get();
        self.bitmap
    }
}

#[derive(Debug)]
struct One(Pending);

impl Accumulator for One {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let bitmap = self.0.get();
        keys(&values[0], |_, k| {
            bitmap.insert(k);
        })
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        bitmaps(&states[0], |_, b| self.0.merged.push(b))
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Binary(Some(serialize(self.0.get())))])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(Some(self.0.get().len() as i64)))
    }

    fn size(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.0.bitmap.serialized_size()
            + self.0.merged.iter().map(|b| b.serialized_size()).sum::<usize>()
    }
}

/// Each group's bitmap, and the bytes of the states merged, for `size`.
struct Groups(Vec<Pending>, usize);

impl Groups {
    fn grow(&mut self, total: usize) {
        if self.0.len() < total {
            self.0.resize_with(total, Pending::default);
        }
    }

    fn take(&mut self, emit_to: EmitTo) -> Vec<RoaringTreemap> {
        let groups = emit_to.take_needed(&mut self.0);
        if self.0.is_empty() {
            self.1 = 0;
        }
        groups.into_iter().map(Pending::take).collect()
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
        self.grow(total_num_groups);
        let pass = |row: usize| opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row));
        keys(&values[0], |row, k| {
            if pass(row) {
                self.0[group_indices[row]].get().insert(k);
            }
        })
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.grow(total_num_groups);
        bitmaps(&values[0], |row, b| {
            self.1 += b.serialized_size();
            self.0[group_indices[row]].merged.push(b);
        })
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let groups = self.take(emit_to);
        Ok(Arc::new(Int64Array::from_iter_values(
            groups.iter().map(|b| b.len() as i64),
        )))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let groups = self.take(emit_to);
        let mut out = BinaryBuilder::new();
        for b in &groups {
            out.append_value(serialize(b));
        }
        Ok(vec![Arc::new(out.finish())])
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let mut rows = vec![RoaringTreemap::new(); values[0].len()];
        let pass = |row: usize| opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row));
        keys(&values[0], |row, k| {
            if pass(row) {
                rows[row].insert(k);
            }
        })?;
        let out: BinaryArray = rows.iter().map(|b| Some(serialize(b))).collect();
        Ok(vec![Arc::new(out)])
    }

    fn size(&self) -> usize {
        // The merged states' bytes, and a few bytes a group for its own.
        self.1 + self.0.capacity() * (std::mem::size_of::<Pending>() + 64)
    }
}
