//! Scalar functions over serialized bitmaps: `bitmap_count`,
//! `bitmap_and_count`, `bitmap_or_count`, `bitmap_andnot_count`,
//! `bitmap_contains` and `bitmap_to_array`. NULL in, NULL out.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, Int64Builder, ListBuilder,
};
use datafusion::arrow::datatypes::{DataType, Int64Type, UInt64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use roaring::RoaringTreemap;

use super::bitmap::deserialize;
use super::{check_arity, coerce_bitmap, coerce_id};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Count,
    AndCount,
    OrCount,
    AndNotCount,
    Contains,
    ToArray,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Count => "bitmap_count",
            Kind::AndCount => "bitmap_and_count",
            Kind::OrCount => "bitmap_or_count",
            Kind::AndNotCount => "bitmap_andnot_count",
            Kind::Contains => "bitmap_contains",
            Kind::ToArray => "bitmap_to_array",
        }
    }
}

/// Every scalar bitmap function.
pub fn udfs() -> Vec<ScalarUDF> {
    [
        Kind::Count,
        Kind::AndCount,
        Kind::OrCount,
        Kind::AndNotCount,
        Kind::Contains,
        Kind::ToArray,
    ]
    .into_iter()
    .map(|kind| {
        super::udf(BitmapScalar {
            kind,
            signature: Signature::user_defined(Volatility::Immutable),
        })
    })
    .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct BitmapScalar {
    kind: Kind,
    signature: Signature,
}

/// Deserializes bitmaps row by row, reusing the last one when the bytes
/// repeat (a constant bitmap argument is broadcast to every row).
struct Reader<'a> {
    name: &'static str,
    last: Option<(&'a [u8], RoaringTreemap)>,
}

impl<'a> Reader<'a> {
    fn new(name: &'static str) -> Self {
        Self { name, last: None }
    }

    fn get(&mut self, bytes: &'a [u8]) -> Result<&RoaringTreemap> {
        let hit = matches!(&self.last, Some((b, _)) if *b == bytes);
        if !hit {
            self.last = Some((bytes, deserialize(self.name, bytes)?));
        }
        Ok(&self.last.as_ref().expect("set above").1)
    }
}

impl ScalarUDFImpl for BitmapScalar {
    fn name(&self) -> &str {
        self.kind.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let name = self.name();
        match self.kind {
            Kind::Count | Kind::ToArray => {
                check_arity(name, args, 1, 1)?;
                Ok(vec![coerce_bitmap(name, &args[0])?])
            }
            Kind::AndCount | Kind::OrCount | Kind::AndNotCount => {
                check_arity(name, args, 2, 2)?;
                Ok(vec![
                    coerce_bitmap(name, &args[0])?,
                    coerce_bitmap(name, &args[1])?,
                ])
            }
            Kind::Contains => {
                check_arity(name, args, 2, 2)?;
                Ok(vec![
                    coerce_bitmap(name, &args[0])?,
                    coerce_id(name, &args[1])?,
                ])
            }
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(match self.kind {
            Kind::Contains => DataType::Boolean,
            Kind::ToArray => DataType::new_list(DataType::Int64, true),
            _ => DataType::Int64,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let out = self.eval(&arrays)?;
        if all_scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?))
        } else {
            Ok(ColumnarValue::Array(out))
        }
    }
}

/// Views a coerced bitmap argument (`Binary`, or `Null` for a NULL literal)
/// as optional byte slices.
fn binary_at(array: &ArrayRef, row: usize) -> Option<&[u8]> {
    if array.data_type() == &DataType::Null || array.is_null(row) {
        None
    } else {
        Some(array.as_binary::<i32>().value(row))
    }
}

/// An id argument at `row`: `None` for NULL, `Some(None)` for a negative id
/// (which no bitmap contains).
fn id_at(array: &ArrayRef, row: usize) -> Option<Option<u64>> {
    if array.data_type() == &DataType::Null || array.is_null(row) {
        return None;
    }
    Some(match array.data_type() {
        DataType::UInt64 => Some(array.as_primitive::<UInt64Type>().value(row)),
        _ => u64::try_from(array.as_primitive::<Int64Type>().value(row)).ok(),
    })
}

impl BitmapScalar {
    fn eval(&self, arrays: &[ArrayRef]) -> Result<ArrayRef> {
        let name = self.kind.name();
        let rows = arrays[0].len();
        let mut a = Reader::new(name);
        let mut b = Reader::new(name);
        match self.kind {
            Kind::Count | Kind::AndCount | Kind::OrCount | Kind::AndNotCount => {
                let mut out = Int64Builder::with_capacity(rows);
                for row in 0..rows {
                    let Some(x) = binary_at(&arrays[0], row) else {
                        out.append_null();
                        continue;
                    };
                    let x = a.get(x)?;
                    let n = if self.kind == Kind::Count {
                        x.len()
                    } else {
                        let Some(y) = binary_at(&arrays[1], row) else {
                            out.append_null();
                            continue;
                        };
                        let y = b.get(y)?;
                        match self.kind {
                            Kind::AndCount => x.intersection_len(y),
                            Kind::OrCount => x.union_len(y),
                            _ => x.difference_len(y),
                        }
                    };
                    out.append_value(n as i64);
                }
                Ok(Arc::new(out.finish()))
            }
            Kind::Contains => {
                let mut out = BooleanBuilder::with_capacity(rows);
                for row in 0..rows {
                    match (binary_at(&arrays[0], row), id_at(&arrays[1], row)) {
                        (Some(x), Some(id)) => {
                            let x = a.get(x)?;
                            out.append_value(id.is_some_and(|id| x.contains(id)));
                        }
                        _ => out.append_null(),
                    }
                }
                Ok(Arc::new(out.finish()))
            }
            Kind::ToArray => {
                let mut out = ListBuilder::new(Int64Builder::new());
                for row in 0..rows {
                    let Some(x) = binary_at(&arrays[0], row) else {
                        out.append_null();
                        continue;
                    };
                    for id in a.get(x)?.iter() {
                        let Ok(id) = i64::try_from(id) else {
                            return exec_err!("{name}: id {id} does not fit in BIGINT");
                        };
                        out.values().append_value(id);
                    }
                    out.append(true);
                }
                Ok(Arc::new(out.finish()))
            }
        }
    }
}
