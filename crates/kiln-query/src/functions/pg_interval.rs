//! `kiln_interval_mul(interval, factor)`: PostgreSQL's `number * INTERVAL`
//! and `INTERVAL * number`, which Arrow has no kernel for (DataFusion
//! refuses "Int64 * Interval"). Dashboards write `now() - 5 * INTERVAL '1
//! minute'`; the PostgreSQL front end rewrites such a product into this
//! call (`shape::postgres`).
//!
//! As PostgreSQL does: each field is multiplied; with a fractional factor
//! the fraction of the months spills into days (30 a month) and the
//! fraction of the days into time (24 hours a day). A result out of range
//! is an error, never a wrapped value. A factor of no type yet (a
//! prepared statement's `$1 * INTERVAL '1 second'`) is a `double
//! precision`, as PostgreSQL resolves `unknown * interval`.
//!
//! Also the length of a fixed interval (no months), which planner rules
//! compare with time units ([`fixed_interval_ns`]), and a timestamp
//! shifted by one ([`shifted`]).

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, IntervalMonthDayNanoArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalUnit};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, Operator, ScalarFunctionArgs, ScalarUDFImpl, Signature,
    Volatility,
};

use crate::shape::postgres::INTERVAL_MUL;

const NANOS_PER_DAY: f64 = 86_400e9;

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct IntervalMul {
    signature: Signature,
}

impl Default for IntervalMul {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

/// `interval * factor` as PostgreSQL computes it; `None` when out of range.
pub fn multiply(i: IntervalMonthDayNano, factor: f64) -> Option<IntervalMonthDayNano> {
    let months = f64::from(i.months) * factor;
    let days = f64::from(i.days) * factor + months.fract() * 30.0;
    let nanos = i.nanoseconds as f64 * factor + days.fract() * NANOS_PER_DAY;
    let fits = |v: f64, max: f64| v.is_finite() && v.abs() <= max;
    if !(fits(months, i32::MAX as f64)
        && fits(days, i32::MAX as f64)
        && fits(nanos, i64::MAX as f64))
    {
        return None;
    }
    Some(IntervalMonthDayNano::new(
        months.trunc() as i32,
        days.trunc() as i32,
        nanos.round() as i64,
    ))
}

/// Exact for integer factors (no float rounding of large nanoseconds).
fn multiply_int(i: IntervalMonthDayNano, factor: i64) -> Option<IntervalMonthDayNano> {
    let f32 = i32::try_from(factor).ok()?;
    Some(IntervalMonthDayNano::new(
        i.months.checked_mul(f32)?,
        i.days.checked_mul(f32)?,
        i.nanoseconds.checked_mul(factor)?,
    ))
}

impl ScalarUDFImpl for IntervalMul {
    fn name(&self) -> &str {
        INTERVAL_MUL
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let [interval, factor] = args else {
            return plan_err!("{INTERVAL_MUL} takes an interval and a number");
        };
        let factor = match factor {
            DataType::Null => DataType::Float64,
            t if t.is_numeric() => t.clone(),
            t => return plan_err!("an INTERVAL can be multiplied by a number only, not {t}"),
        };
        Ok(vec![interval.clone(), factor])
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.get(1) {
            Some(t) if t.is_numeric() || t.is_null() => {
                Ok(DataType::Interval(IntervalUnit::MonthDayNano))
            }
            Some(t) => exec_err!("an INTERVAL can be multiplied by a number only, not {t}"),
            None => exec_err!("{INTERVAL_MUL} takes an interval and a number"),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let interval = args.args[0].to_array(rows)?;
        let interval = cast(&interval, &DataType::Interval(IntervalUnit::MonthDayNano))?;
        let interval =
            interval.as_primitive::<datafusion::arrow::datatypes::IntervalMonthDayNanoType>();
        let factor = args.args[1].to_array(rows)?;
        let integer = factor.data_type().is_integer();
        let factor = cast(&factor, &DataType::Float64)?;
        let factor = factor.as_primitive::<datafusion::arrow::datatypes::Float64Type>();
        let mut out = Vec::with_capacity(rows);
        for row in 0..rows {
            if interval.is_null(row) || factor.is_null(row) {
                out.push(None);
                continue;
            }
            let (i, f) = (interval.value(row), factor.value(row));
            let product = match integer {
                true => multiply_int(i, f as i64),
                false => multiply(i, f),
            };
            match product {
                Some(p) => out.push(Some(p)),
                None => return exec_err!("interval out of range: {i:?} * {f}"),
            }
        }
        let array: IntervalMonthDayNanoArray = out.into_iter().collect();
        let array = Arc::new(array);
        Ok(
            match args
                .args
                .iter()
                .all(|a| matches!(a, ColumnarValue::Scalar(_)))
            {
                true => ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(
                    array.as_ref(),
                    0,
                )?),
                false => ColumnarValue::Array(array),
            },
        )
    }
}

/// A fixed-length interval (no months) or a duration, in nanoseconds.
pub(crate) fn fixed_interval_ns(v: &ScalarValue) -> Option<i128> {
    const DAY_NS: i128 = 86_400_000_000_000;
    match v {
        ScalarValue::DurationNanosecond(Some(d)) => Some(*d as i128),
        ScalarValue::DurationMicrosecond(Some(d)) => Some(*d as i128 * 1_000),
        ScalarValue::DurationMillisecond(Some(d)) => Some(*d as i128 * 1_000_000),
        ScalarValue::DurationSecond(Some(d)) => Some(*d as i128 * 1_000_000_000),
        ScalarValue::IntervalMonthDayNano(Some(i)) if i.months == 0 => {
            Some(i.days as i128 * DAY_NS + i.nanoseconds as i128)
        }
        ScalarValue::IntervalDayTime(Some(i)) => {
            Some(i.days as i128 * DAY_NS + i.milliseconds as i128 * 1_000_000)
        }
        _ => None,
    }
}

/// `ts ± I` split into the time expression, the literal added (an interval
/// or a duration) and the sign.
pub(crate) fn shifted(e: &BinaryExpr) -> Option<(&Expr, &ScalarValue, i128)> {
    match (e.left.as_ref(), e.op, e.right.as_ref()) {
        (ts, Operator::Plus, Expr::Literal(i, _)) => Some((ts, i, 1)),
        (Expr::Literal(i, _), Operator::Plus, ts) => Some((ts, i, 1)),
        (ts, Operator::Minus, Expr::Literal(i, _)) => Some((ts, i, -1)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_scale_as_postgresql_scales_them() {
        let minute = IntervalMonthDayNano::new(0, 0, 60_000_000_000);
        assert_eq!(
            multiply_int(minute, 5),
            Some(IntervalMonthDayNano::new(0, 0, 300_000_000_000))
        );
        // 1 month 1 day * 1.5 = 1 month 16 days 12 hours (PostgreSQL's answer).
        let m = IntervalMonthDayNano::new(1, 1, 0);
        assert_eq!(
            multiply(m, 1.5),
            Some(IntervalMonthDayNano::new(1, 16, 12 * 3_600_000_000_000))
        );
        assert_eq!(
            multiply_int(IntervalMonthDayNano::new(i32::MAX, 0, 0), 2),
            None
        );
        assert_eq!(multiply(minute, f64::INFINITY), None);
    }
}
