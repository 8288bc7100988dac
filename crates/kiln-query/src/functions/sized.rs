//! DataFusion's functions whose result size is an argument (`repeat`,
//! `lpad`, `rpad`, `array_repeat`), refusing a result larger than
//! [`MAX_VALUE_BYTES`] before allocating it.
//!
//! Why: these allocate what they are asked for at once, outside any
//! memory accounting, so `SELECT repeat('x', 2e9)` alone took gigabytes.
//! The wrapper keeps the function's name, signature and types and checks
//! the requested size row by row first.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

/// Largest value one of these functions may return (PostgreSQL's limit on
/// one field is 1 GB; a result this size is already a mistake).
pub const MAX_VALUE_BYTES: i64 = 256 << 20;

/// The guarded versions of the sized functions in `registered` (the
/// session's own, so signatures and coercions stay DataFusion's).
pub fn guard(registered: impl Fn(&str) -> Option<std::sync::Arc<ScalarUDF>>) -> Vec<ScalarUDF> {
    [
        ("repeat", Size::RepeatString),
        ("lpad", Size::Pad),
        ("rpad", Size::Pad),
        ("array_repeat", Size::RepeatElement),
    ]
    .into_iter()
    .filter_map(|(name, size)| {
        let inner = registered(name)?;
        Some(super::udf(Sized {
            inner: inner.as_ref().clone(),
            size,
        }))
    })
    .collect()
}

/// How a function's result size follows from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Size {
    /// `repeat(s, n)`: `len(s) * n` bytes.
    RepeatString,
    /// `lpad(s, n [, fill])`: `n` characters, up to 4 bytes each.
    Pad,
    /// `array_repeat(x, n)`: `n` elements of at least 8 bytes.
    RepeatElement,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Sized {
    inner: ScalarUDF,
    size: Size,
}

impl Sized {
    /// Bytes row `row` asks for, from its string (if any) and count.
    fn bytes(&self, unit: i64, count: i64) -> i64 {
        let count = count.max(0);
        match self.size {
            Size::RepeatString => unit.saturating_mul(count),
            Size::Pad => count.saturating_mul(4),
            Size::RepeatElement => count.saturating_mul(8),
        }
    }

    fn check(&self, args: &[ColumnarValue], rows: usize) -> Result<()> {
        let (Some(first), Some(count)) = (args.first(), args.get(1)) else {
            return Ok(());
        };
        let count = count.to_array(rows)?;
        let count = match count.data_type() {
            DataType::Int64 => count,
            _ => arrow::compute::cast(&count, &DataType::Int64)?,
        };
        let count = count.as_primitive::<Int64Type>();
        let unit = match (self.size, first) {
            (Size::RepeatString, ColumnarValue::Scalar(s)) => Some(scalar_len(s)),
            _ => None,
        };
        let first = match (self.size, unit) {
            (Size::RepeatString, None) => Some(first.to_array(rows)?),
            _ => None,
        };
        for row in 0..count.len() {
            if count.is_null(row) {
                continue;
            }
            let unit = match (&first, unit) {
                (_, Some(u)) => u,
                (Some(a), None) => value_len(a.as_ref(), row),
                (None, None) => 0,
            };
            let bytes = self.bytes(unit, count.value(row));
            if bytes > MAX_VALUE_BYTES {
                return exec_err!(
                    "{}(): a result of {bytes} bytes is larger than the {MAX_VALUE_BYTES}-byte limit on one value",
                    self.inner.name()
                );
            }
        }
        Ok(())
    }
}

fn scalar_len(s: &ScalarValue) -> i64 {
    match s {
        ScalarValue::Utf8(Some(v))
        | ScalarValue::LargeUtf8(Some(v))
        | ScalarValue::Utf8View(Some(v)) => v.len() as i64,
        _ => 0,
    }
}

fn value_len(a: &dyn Array, row: usize) -> i64 {
    if a.is_null(row) {
        return 0;
    }
    match a.data_type() {
        DataType::Utf8 => a.as_string::<i32>().value(row).len() as i64,
        DataType::LargeUtf8 => a.as_string::<i64>().value(row).len() as i64,
        DataType::Utf8View => a.as_string_view().value(row).len() as i64,
        _ => 0,
    }
}

impl ScalarUDFImpl for Sized {
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

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.check(&args.args, args.number_rows)?;
        self.inner.invoke_with_args(args)
    }
}
