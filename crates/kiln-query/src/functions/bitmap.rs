//! `bitmap_agg(id)` and `bitmap_union(bitmap)`: aggregates that build a
//! 64-bit roaring bitmap ([`RoaringTreemap`]) and return it in the portable
//! serialization (`BINARY`). The partial state is the same serialization,
//! so partial results from many partitions merge by union.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Int64Type, UInt64Type};
use datafusion::common::{Result, ScalarValue, exec_err, internal_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};
use roaring::RoaringTreemap;

use super::{check_arity, coerce_bitmap, coerce_id};

/// Serializes `bm` in the portable 64-bit format.
pub(crate) fn serialize(bm: &RoaringTreemap) -> Vec<u8> {
    let mut out = Vec::with_capacity(bm.serialized_size());
    bm.serialize_into(&mut out).expect("write to Vec");
    out
}

/// Reads a bitmap written by [`serialize`] (or by CRoaring / pyroaring
/// `BitMap64.serialize()`), naming `func` in the error.
pub(crate) fn deserialize(func: &str, bytes: &[u8]) -> Result<RoaringTreemap> {
    match RoaringTreemap::deserialize_from(bytes) {
        Ok(bm) => Ok(bm),
        Err(e) => exec_err!("{func}: invalid bitmap ({} bytes): {e}", bytes.len()),
    }
}

/// Calls `f` with every non-NULL id of `array` (`Int64` or `UInt64` after
/// coercion); a negative id is an error naming `func`, the value and the row.
pub(crate) fn for_each_id(func: &str, array: &ArrayRef, mut f: impl FnMut(u64)) -> Result<()> {
    match array.data_type() {
        DataType::Int64 => {
            let a = array.as_primitive::<Int64Type>();
            for (row, v) in a.iter().enumerate() {
                match v {
                    Some(v) if v < 0 => {
                        return exec_err!(
                            "{func}: negative id {v} at row {row} of the batch (ids must be >= 0)"
                        );
                    }
                    Some(v) => f(v as u64),
                    None => {}
                }
            }
        }
        DataType::UInt64 => array
            .as_primitive::<UInt64Type>()
            .iter()
            .flatten()
            .for_each(f),
        DataType::Null => {}
        other => return internal_err!("{func}: unexpected id type {other}"),
    }
    Ok(())
}

/// `bitmap_agg` (ids in) and `bitmap_union` (bitmaps in).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct BitmapAgg {
    signature: Signature,
    union: bool,
}

impl BitmapAgg {
    pub fn udaf() -> AggregateUDF {
        super::udaf(Self {
            signature: Signature::user_defined(Volatility::Immutable),
            union: false,
        })
    }

    fn static_name(&self) -> &'static str {
        if self.union {
            "bitmap_union"
        } else {
            "bitmap_agg"
        }
    }

    pub fn union_udaf() -> AggregateUDF {
        super::udaf(Self {
            signature: Signature::user_defined(Volatility::Immutable),
            union: true,
        })
    }
}

impl AggregateUDFImpl for BitmapAgg {
    fn name(&self) -> &str {
        self.static_name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(self.name(), args, 1, 1)?;
        let t = if self.union {
            coerce_bitmap(self.name(), &args[0])?
        } else {
            coerce_id(self.name(), &args[0])?
        };
        Ok(vec![t])
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Binary)
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

    fn accumulator(&self, _args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(BitmapAccumulator {
            name: self.static_name(),
            union: self.union,
            bitmap: RoaringTreemap::new(),
        }))
    }

    fn default_value(&self, _data_type: &DataType) -> Result<ScalarValue> {
        Ok(ScalarValue::Binary(Some(serialize(&RoaringTreemap::new()))))
    }
}

#[derive(Debug)]
struct BitmapAccumulator {
    name: &'static str,
    union: bool,
    bitmap: RoaringTreemap,
}

impl BitmapAccumulator {
    fn union_binary(&mut self, array: &ArrayRef) -> Result<()> {
        if array.data_type() == &DataType::Null {
            return Ok(());
        }
        for bytes in array.as_binary::<i32>().iter().flatten() {
            self.bitmap |= deserialize(self.name, bytes)?;
        }
        Ok(())
    }
}

impl Accumulator for BitmapAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if self.union {
            return self.union_binary(&values[0]);
        }
        let bm = &mut self.bitmap;
        for_each_id(self.name, &values[0], |v| {
            bm.insert(v);
        })
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.union_binary(&states[0])
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Binary(Some(serialize(&self.bitmap))))
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.bitmap.serialized_size()
    }
}
