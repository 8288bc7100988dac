//! Mathematical functions refusing arguments outside their domain, as
//! PostgreSQL's do, where DataFusion's answer `NaN` or an infinity:
//! - `sqrt` of a negative number (2201F);
//! - `ln`, `log`, `log10`, `log2` of zero or a negative number, or to a
//!   base of zero, a negative number (2201E) or one (22012);
//! - `power` (`pow`) of zero to a negative power, or of a negative number
//!   to a power that is not a whole number (2201F);
//! - `acos`, `asin` outside -1 to 1 (22003);
//! - `abs` of the smallest integer of its type (22003), which has no
//!   positive counterpart (Arrow's kernel reported it as a compute error,
//!   22000);
//! - `regexp_count`, `regexp_instr` from a start position below 1 (22023;
//!   a compute error, 22000, before);
//! - the window function `nth_value` of a row number below 1 (22016,
//!   [`nth_value`]).
//!
//! Why: a `NaN` is a value a dashboard then sums, averages or plots
//! without a word, and one `NaN` turns every total it enters into `NaN`.
//! A `NaN` argument gives `NaN`, as in PostgreSQL; NULL gives NULL.
//! Arguments are checked before the call runs, over the rows that are not
//! NULL; the message names the function and the value.

use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, ScalarUDF};

use super::guarded::{Check, Guarded};

pub mod nth_value;
use crate::error::{Error, ErrorKind};

/// The guarded functions, from the session's own (`registered`).
pub fn guard(registered: impl Fn(&str) -> Option<Arc<ScalarUDF>>) -> Vec<ScalarUDF> {
    [
        ("sqrt", Rule::Sqrt),
        ("ln", Rule::Log),
        ("log", Rule::Log),
        ("log10", Rule::Log),
        ("log2", Rule::Log),
        ("power", Rule::Power),
        ("acos", Rule::Unit),
        ("asin", Rule::Unit),
        ("abs", Rule::Abs),
        ("regexp_count", Rule::Start),
        ("regexp_instr", Rule::Start),
    ]
    .into_iter()
    .filter_map(|(name, rule)| Some(super::udf(Guarded::new(registered(name)?.as_ref(), rule))))
    .collect()
}

/// Which domain a function's arguments must be in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Rule {
    Sqrt,
    /// The number, and the base where there is one (`log(base, x)`).
    Log,
    /// `power(base, exponent)`.
    Power,
    /// -1 to 1.
    Unit,
    /// An integer above its type's smallest.
    Abs,
    /// A third argument, a position, of at least 1.
    Start,
}

impl Check for Rule {
    fn check(&self, name: &str, args: &[ColumnarValue], rows: usize) -> Result<()> {
        let refuse = |kind, msg| {
            Err(DataFusionError::External(Box::new(Error::Argument(
                kind, msg,
            ))))
        };
        match (self, args) {
            (Rule::Abs, [x]) => {
                return match smallest(x)? {
                    Some(v) => refuse(
                        ErrorKind::NumericOutOfRange,
                        format!("{name}({v}): integer out of range"),
                    ),
                    None => Ok(()),
                };
            }
            (Rule::Start, [_, _, start, ..]) => {
                return match below_one(start)? {
                    Some(v) => refuse(
                        ErrorKind::InvalidParameterValue,
                        format!("{name}(): invalid value for parameter \"start\": {v}"),
                    ),
                    None => Ok(()),
                };
            }
            (Rule::Abs | Rule::Start, _) => return Ok(()),
            _ => {}
        }
        let mut columns = Vec::with_capacity(args.len());
        for a in args {
            match floats(a, rows)? {
                Some(c) => columns.push(c),
                None => return Ok(()),
            }
        }
        let rows = if args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
            rows.min(1)
        } else {
            rows
        };
        let refused = |values: &[f64]| {
            let (kind, why) = self.refuses(values)?;
            let shown = values
                .iter()
                .map(f64::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            let msg = format!("{name}({shown}): {why}");
            Some(DataFusionError::External(Box::new(Error::Argument(
                kind, msg,
            ))))
        };
        for row in 0..rows {
            let err = match columns.as_slice() {
                [a] => a.value(row).and_then(|x| refused(&[x])),
                [a, b] => a
                    .value(row)
                    .zip(b.value(row))
                    .and_then(|(x, y)| refused(&[x, y])),
                _ => None,
            };
            if let Some(err) = err {
                return Err(err);
            }
        }
        Ok(())
    }
}

impl Rule {
    /// Why one row's arguments are outside the domain, in PostgreSQL's
    /// words, if they are.
    fn refuses(self, args: &[f64]) -> Option<(ErrorKind, &'static str)> {
        use ErrorKind::{DivisionByZero, InvalidLogarithmArgument, InvalidPowerArgument};
        let log = |x: f64| {
            if x == 0.0 {
                Some((InvalidLogarithmArgument, "cannot take logarithm of zero"))
            } else if x < 0.0 {
                Some((
                    InvalidLogarithmArgument,
                    "cannot take logarithm of a negative number",
                ))
            } else {
                None
            }
        };
        match (self, args) {
            (Rule::Sqrt, [x]) if *x < 0.0 => Some((
                InvalidPowerArgument,
                "cannot take square root of a negative number",
            )),
            (Rule::Log, [x]) => log(*x),
            (Rule::Log, [base, x]) => log(*base).or_else(|| log(*x)).or_else(|| {
                (*base == 1.0).then_some((DivisionByZero, "division by zero (a base of 1)"))
            }),
            (Rule::Power, [base, exp]) if *base == 0.0 && *exp < 0.0 => Some((
                InvalidPowerArgument,
                "zero raised to a negative power is undefined",
            )),
            (Rule::Power, [base, exp]) if *base < 0.0 && exp.is_finite() && exp.fract() != 0.0 => {
                Some((
                    InvalidPowerArgument,
                    "a negative number raised to a non-integer power yields a complex result",
                ))
            }
            (Rule::Unit, [x]) if x.abs() > 1.0 => {
                Some((ErrorKind::NumericOutOfRange, "input is out of range"))
            }
            _ => None,
        }
    }
}

/// The smallest value of an integer argument's type, if it holds it.
fn smallest(arg: &ColumnarValue) -> Result<Option<i64>> {
    let least = match arg.data_type() {
        DataType::Int8 => i64::from(i8::MIN),
        DataType::Int16 => i64::from(i16::MIN),
        DataType::Int32 => i64::from(i32::MIN),
        DataType::Int64 => i64::MIN,
        _ => return Ok(None),
    };
    Ok(integers(arg)?.and_then(|v| (v.min()? == least).then_some(least)))
}

/// An integer argument's first value below 1, if any.
fn below_one(arg: &ColumnarValue) -> Result<Option<i64>> {
    Ok(integers(arg)?.and_then(|v| v.min().filter(|m| *m < 1)))
}

/// An integer argument's values, as 64-bit integers.
fn integers(arg: &ColumnarValue) -> Result<Option<Ints>> {
    if !arg.data_type().is_integer() {
        return Ok(None);
    }
    Ok(Some(match arg {
        ColumnarValue::Scalar(s) => match s.cast_to(&DataType::Int64)? {
            ScalarValue::Int64(v) => Ints::One(v),
            _ => return Ok(None),
        },
        ColumnarValue::Array(a) => Ints::Many(
            cast(a, &DataType::Int64)?
                .as_primitive::<Int64Type>()
                .clone(),
        ),
    }))
}

/// One integer argument's values: a constant or a column.
enum Ints {
    One(Option<i64>),
    Many(arrow::array::Int64Array),
}

impl Ints {
    fn min(&self) -> Option<i64> {
        match self {
            Ints::One(v) => *v,
            Ints::Many(a) => arrow::compute::min(a),
        }
    }
}

/// An argument's values as 64-bit floats, or `None` when it is not a
/// number (DataFusion's own type checks then apply).
fn floats(arg: &ColumnarValue, rows: usize) -> Result<Option<Floats>> {
    if !arg.data_type().is_numeric() {
        return Ok(None);
    }
    Ok(Some(match arg {
        ColumnarValue::Scalar(s) => match s.cast_to(&DataType::Float64)? {
            ScalarValue::Float64(v) => Floats::One(v),
            _ => return Ok(None),
        },
        ColumnarValue::Array(a) if a.len() < rows => return Ok(None),
        ColumnarValue::Array(a) => Floats::Many(
            cast(a, &DataType::Float64)?
                .as_primitive::<Float64Type>()
                .clone(),
        ),
    }))
}

/// One argument's values: a constant or a column.
enum Floats {
    One(Option<f64>),
    Many(arrow::array::Float64Array),
}

impl Floats {
    fn value(&self, row: usize) -> Option<f64> {
        match self {
            Floats::One(v) => *v,
            Floats::Many(a) => a.is_valid(row).then(|| a.value(row)),
        }
    }
}

#[cfg(test)]
mod tests;
