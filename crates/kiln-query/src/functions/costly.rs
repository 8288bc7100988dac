//! `levenshtein`, whose work grows with the product of its arguments'
//! lengths, refusing a call that would take more than [`MAX_VALUE_STEPS`]
//! steps for one row or [`MAX_CALL_STEPS`] for all of its rows, before it
//! runs.
//!
//! Why: one call runs to its end without yielding. Two 30,000-character
//! strings took 5.7 s in a debug build; as constants they are compared
//! while the statement is planned, where no timeout reaches, so a 70-byte
//! query held a protocol thread and ran past its `statement_timeout`.
//! PostgreSQL's `levenshtein` refuses strings over 255 characters; these
//! limits let strings a hundred times longer through.

use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{ColumnarValue, ScalarUDF};

use super::guarded::{Check, Guarded};

/// Most steps (a character of one argument against one of the other) one
/// row's comparison may take: about a tenth of a second.
pub const MAX_VALUE_STEPS: u64 = 100_000_000;

/// Most steps one call may take over all its rows (a batch).
pub const MAX_CALL_STEPS: u64 = 10 * MAX_VALUE_STEPS;

/// The guarded `levenshtein`, from the session's own (`registered`).
pub fn guard(registered: impl Fn(&str) -> Option<Arc<ScalarUDF>>) -> Option<ScalarUDF> {
    let inner = registered("levenshtein")?;
    Some(super::udf(Guarded::new(&inner, Quadratic)))
}

/// Refuses a call if a row, or all of them, would take too many steps.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Quadratic;

impl Check for Quadratic {
    fn check(&self, name: &str, args: &[ColumnarValue], rows: usize) -> Result<()> {
        let [a, b] = args else {
            return Ok(());
        };
        let rows = match (a, b) {
            (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_)) => rows.min(1),
            _ => rows,
        };
        let mut total: u64 = 0;
        for row in 0..rows {
            let (Some(x), Some(y)) = (text(a, row), text(b, row)) else {
                continue;
            };
            // Bytes bound characters: count those only when it matters.
            let mut steps = (x.len() as u64).saturating_mul(y.len() as u64);
            if steps > MAX_VALUE_STEPS {
                let (cx, cy) = (x.chars().count() as u64, y.chars().count() as u64);
                steps = cx.saturating_mul(cy);
                if steps > MAX_VALUE_STEPS {
                    return exec_err!(
                        "{name}(): comparing strings of {cx} and {cy} characters takes {steps} steps, more than the {MAX_VALUE_STEPS}-step limit on one value"
                    );
                }
            }
            total = total.saturating_add(steps);
            if total > MAX_CALL_STEPS {
                return exec_err!(
                    "{name}(): the first {} of {rows} rows take more than the {MAX_CALL_STEPS}-step limit on one call (rows are computed a batch at a time)",
                    row + 1
                );
            }
        }
        Ok(())
    }
}

/// Row `row`'s string of a text argument; `None` for a NULL or another type.
fn text(v: &ColumnarValue, row: usize) -> Option<&str> {
    match v {
        ColumnarValue::Scalar(
            ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s),
        ) => s.as_deref(),
        ColumnarValue::Scalar(_) => None,
        ColumnarValue::Array(a) if a.is_null(row) => None,
        ColumnarValue::Array(a) => match a.data_type() {
            DataType::Utf8 => Some(a.as_string::<i32>().value(row)),
            DataType::LargeUtf8 => Some(a.as_string::<i64>().value(row)),
            DataType::Utf8View => Some(a.as_string_view().value(row)),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests;
