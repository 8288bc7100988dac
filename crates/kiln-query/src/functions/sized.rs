//! DataFusion's functions whose result size is an argument (`repeat`,
//! `lpad`, `rpad`, `array_repeat`, and PostgreSQL's `format` with its
//! widths and repeated arguments), refusing a result larger than
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
        ("format", Size::Format),
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
    /// `format(f, args...)`: at most `f`'s length, plus each specifier's
    /// width (a `*` width is at most the largest integer argument), plus
    /// each specifier's largest argument.
    Format,
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
            // Bounded row by row in `check_format`.
            Size::Format => unit,
        }
    }

    fn check(&self, args: &[ColumnarValue], rows: usize) -> Result<()> {
        if self.size == Size::Format {
            return self.check_format(args, rows);
        }
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
            self.refuse_over(self.bytes(unit, count.value(row)))?;
        }
        Ok(())
    }

    /// [`Size::Format`]'s bound, row by row.
    fn check_format(&self, args: &[ColumnarValue], rows: usize) -> Result<()> {
        let rows = match args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
            true => 1,
            false => rows,
        };
        let arrays = args
            .iter()
            .map(|a| a.to_array(rows))
            .collect::<Result<Vec<_>>>()?;
        let Some((format, values)) = arrays.split_first() else {
            return Ok(());
        };
        for row in 0..rows {
            let Some(f) = str_value(format.as_ref(), row) else {
                continue;
            };
            let Some((specifiers, widths, stars)) = format_widths(f) else {
                // There the wrapped function takes the next argument in
                // sequence, PostgreSQL the one after the positioned one:
                // refused rather than answered differently.
                return exec_err!(
                    "{}(): a specifier without a position after one with a position (%2$s, then %s) is not supported; give each a position",
                    self.inner.name()
                );
            };
            // A value other than text prints in a few dozen bytes.
            let longest = values
                .iter()
                .map(|a| value_len(a.as_ref(), row).max(64))
                .max()
                .unwrap_or(0);
            let star = match stars {
                0 => 0,
                _ => values
                    .iter()
                    .filter_map(|a| int_value(a.as_ref(), row))
                    .map(i64::saturating_abs)
                    .max()
                    .unwrap_or(0),
            };
            let bytes = (f.len() as i64)
                .saturating_add(widths)
                .saturating_add(stars.saturating_mul(star))
                .saturating_add(specifiers.saturating_mul(longest));
            self.refuse_over(bytes)?;
        }
        Ok(())
    }

    fn refuse_over(&self, bytes: i64) -> Result<()> {
        if bytes > MAX_VALUE_BYTES {
            return exec_err!(
                "{}(): a result of {bytes} bytes is larger than the {MAX_VALUE_BYTES}-byte limit on one value",
                self.inner.name()
            );
        }
        Ok(())
    }
}

/// The specifiers of a `format` string, the sum of their written widths,
/// and how many take their width from an argument (`*`); None when a
/// specifier without a position follows one with a position.
fn format_widths(f: &str) -> Option<(i64, i64, i64)> {
    let b = f.as_bytes();
    let number = |mut i: usize| {
        let mut n: i64 = 0;
        while i < b.len() && b[i].is_ascii_digit() {
            n = n.saturating_mul(10).saturating_add(i64::from(b[i] - b'0'));
            i += 1;
        }
        (n, i)
    };
    let (mut specifiers, mut widths, mut stars) = (0i64, 0i64, 0i64);
    let mut positioned = false;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            i += 1;
            continue;
        }
        i += 1;
        if b.get(i) == Some(&b'%') {
            i += 1;
            continue;
        }
        specifiers += 1;
        // `N$`: a position, not a width.
        let (_, j) = number(i);
        if b.get(j) == Some(&b'$') {
            i = j + 1;
            positioned = true;
        } else if positioned {
            return None;
        }
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        if b.get(i) == Some(&b'*') {
            stars += 1;
            let (_, j) = number(i + 1);
            i = if b.get(j) == Some(&b'$') {
                j + 1
            } else {
                i + 1
            };
        } else {
            let (width, j) = number(i);
            widths = widths.saturating_add(width);
            i = j;
        }
    }
    Some((specifiers, widths, stars))
}

fn str_value(a: &dyn Array, row: usize) -> Option<&str> {
    if a.is_null(row) {
        return None;
    }
    match a.data_type() {
        DataType::Utf8 => Some(a.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => Some(a.as_string::<i64>().value(row)),
        DataType::Utf8View => Some(a.as_string_view().value(row)),
        _ => None,
    }
}

fn int_value(a: &dyn Array, row: usize) -> Option<i64> {
    if a.is_null(row) || !a.data_type().is_integer() {
        return None;
    }
    let a = arrow::compute::cast(&a.slice(row, 1), &DataType::Int64).ok()?;
    Some(a.as_primitive::<Int64Type>().value(0))
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
