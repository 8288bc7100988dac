//! DataFusion's functions whose result size is not bounded by their
//! arguments' sizes (`repeat`, `lpad`, `rpad`, `array_repeat`,
//! `array_resize`, `range` and `generate_series` as arrays, `replace`,
//! `regexp_replace`), or by one row's arguments (`concat`, `concat_ws`
//! and the `||` operator on strings, [`string_concat`], copy a constant
//! argument into every row), refusing a result larger
//! than [`MAX_VALUE_BYTES`], or one call's results larger than
//! [`MAX_CALL_BYTES`], before allocating them.
//!
//! Why: these allocate what they are asked for at once, outside any memory
//! accounting: `SELECT repeat('x', 2e9)` alone took gigabytes, and so did
//! thirty rows of `array_repeat(x, 3e7)` each under the one-value limit, or
//! `range(1, 2e9)`. Enough of them end the process. The wrapper keeps the
//! function's name, signature and types and works out how many bytes the
//! results can take ([`bounds`]) before the function runs: for all rows at
//! once from the arguments' lengths where that bound is small, else row
//! by row.

pub mod aggregates;
mod bounds;
#[cfg(test)]
mod tests;

use std::sync::{Arc, LazyLock};

use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{ColumnarValue, Expr, Operator, ScalarUDF};

use super::guarded::{Check, Guarded};
use super::operator::OperatorFn;
use bounds::{Arg, Patterns, Size};

/// Largest value one of these functions may return (PostgreSQL's limit on
/// one field is 1 GB; a result this size is already a mistake).
pub const MAX_VALUE_BYTES: i64 = 256 << 20;

/// String and binary constants from this size up are counted where an
/// expression copies them into each row (`rules::sized_literals`): smaller
/// ones fill a batch of up to 65,536 rows within 64 MiB.
pub const LARGE_FROM: usize = 1024;

/// The bytes of a string or binary value; `None` for other values and
/// nulls.
pub fn value_bytes(value: &ScalarValue) -> Option<usize> {
    match value {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s.len()),
        ScalarValue::Binary(Some(b))
        | ScalarValue::LargeBinary(Some(b))
        | ScalarValue::BinaryView(Some(b)) => Some(b.len()),
        _ => None,
    }
}

/// Most bytes one call may return over all its rows (a batch of up to a
/// few thousand rows): four values at the limit.
pub const MAX_CALL_BYTES: i64 = 4 * MAX_VALUE_BYTES;

/// The guarded functions, by name, and how their results' sizes follow.
const GUARDED: [(&str, Size); 11] = [
    ("repeat", Size::RepeatString),
    ("lpad", Size::Pad),
    ("rpad", Size::Pad),
    ("array_repeat", Size::RepeatElement),
    ("array_resize", Size::Resize),
    ("range", Size::Range { inclusive: false }),
    ("generate_series", Size::Range { inclusive: true }),
    ("replace", Size::Replace),
    ("regexp_replace", Size::RegexpReplace),
    ("concat", Size::Concat),
    ("concat_ws", Size::ConcatWs),
];

/// The guarded versions of the sized functions in `registered` (the
/// session's own, so signatures and coercions stay DataFusion's).
pub fn guard(registered: impl Fn(&str) -> Option<Arc<ScalarUDF>>) -> Vec<ScalarUDF> {
    GUARDED
        .into_iter()
        .filter_map(|(name, size)| {
            let inner = registered(name)?;
            Some(super::udf(Sized::new(inner.as_ref(), size)))
        })
        .collect()
}

/// `l || r` of two strings of one type, guarded as `concat` is: a
/// recursive query that doubles a string reached gigabytes before Arrow's
/// offsets overflowed and the task panicked.
/// [`crate::rules::arithmetic`] makes the operator a call of it.
pub fn string_concat() -> Arc<ScalarUDF> {
    static MADE: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
        let concat = ScalarUDF::new_from_impl(OperatorFn::new(Operator::StringConcat));
        Arc::new(super::udf(Sized::new(&concat, Size::Concat)))
    });
    MADE.clone()
}

/// `expr` with a call of an unguarded sized function (as DataFusion's
/// simplifications build them: `concat_ws` with an empty separator becomes
/// DataFusion's own `concat`) made a guarded one.
fn guarded(expr: Expr) -> Expr {
    match expr {
        Expr::ScalarFunction(ScalarFunction { func, args })
            if func.inner().downcast_ref::<Sized>().is_none() =>
        {
            let size = GUARDED.iter().find(|(name, _)| *name == func.name());
            let func = match size {
                Some((_, size)) => Arc::new(super::udf(Sized::new(&func, *size))),
                None => func,
            };
            Expr::ScalarFunction(ScalarFunction { func, args })
        }
        expr => expr,
    }
}

/// A sized function: DataFusion's, checked for its results' sizes.
type Sized = Guarded<Size>;

impl Check for Size {
    /// Refuses the call if a row's result, or all of them together, would
    /// pass the limits. Arguments that are all scalars give one value.
    fn check(&self, name: &str, args: &[ColumnarValue], rows: usize) -> Result<()> {
        let args: Vec<Arg> = args.iter().map(Arg::of).collect();
        let rows = match args.iter().all(Arg::is_scalar) {
            true => rows.min(1),
            false => rows,
        };
        // DataFusion raises an internal error for these.
        if *self == Size::Resize
            && let Some(size) = args.get(1)
            && let Some((row, n)) =
                (0..rows).find_map(|r| size.int(r).filter(|n| *n < 0).map(|n| (r, n)))
        {
            return exec_err!("{name}(): size {n} of row {} is negative", row + 1);
        }
        // A bound on all rows at once (then on each) where the lengths
        // give one; then quick bounds row by row; closer ones before
        // refusing a call for them.
        let all_rows = self.all_rows(&args, rows);
        if all_rows.is_some_and(|bytes| bytes <= MAX_VALUE_BYTES as i128)
            || self.total(name, &args, rows, false)? <= MAX_CALL_BYTES
            || self.total(name, &args, rows, true)? <= MAX_CALL_BYTES
        {
            return Ok(());
        }
        exec_err!(
            "{name}(): the results of {rows} rows would take more than the {MAX_CALL_BYTES}-byte limit on one call's results (rows are computed a batch at a time)"
        )
    }

    /// DataFusion's simplifications (`concat` joins adjacent constants)
    /// keep their results guarded.
    fn simplified(&self, expr: Expr) -> Expr {
        guarded(expr)
    }
}

impl Size {
    /// The bytes of `rows` rows' results together, counted until they pass
    /// [`MAX_CALL_BYTES`]; an error for a row past [`MAX_VALUE_BYTES`].
    fn total(&self, name: &str, args: &[Arg], rows: usize, exact: bool) -> Result<i64> {
        let mut total: i64 = 0;
        let mut patterns = Patterns::default();
        for row in 0..rows {
            let bytes = self.bytes_with(name, args, row, exact, &mut patterns)?;
            if bytes > MAX_VALUE_BYTES {
                return exec_err!(
                    "{name}(): a result of {bytes} bytes is larger than the {MAX_VALUE_BYTES}-byte limit on one value"
                );
            }
            total = total.saturating_add(bytes);
            if total > MAX_CALL_BYTES {
                break;
            }
        }
        Ok(total)
    }
}
