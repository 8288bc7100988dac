//! PostgreSQL's `age(timestamp, timestamp)` and `age(timestamp)`: the
//! difference of two times as a "symbolic" interval of years, months and
//! days, as a person would say it (`43 years 9 mons 27 days`), not the
//! plain difference in days `-` gives.
//!
//! Why: admin and monitoring queries write `age(now(), backend_start)` or
//! `age(now(), query_start)` over `pg_stat_activity`, and reports write
//! `age(signup_date)`; without it the call failed with 42883.
//!
//! As PostgreSQL computes it (`timestamp_age`): each field of the two
//! wall-clock times is subtracted, the sign is made positive, a negative
//! field borrows from the next larger one (a day borrows the length of the
//! earlier time's month, or the later one's when the first argument is the
//! earlier), and the sign is put back. A time zone's times are compared on
//! that zone's clock. `age(t)` is `age(current_date, t)`, current_date at
//! the query's start in the session's time zone; so the function is
//! stable, not immutable, and a plan that calls it is not kept.
//! `age(xid)` is refused: Kiln has no transaction ids.

use std::sync::Arc;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, TimeZone, Timelike};
use datafusion::arrow::array::timezone::Tz;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, IntervalMonthDayNanoArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Date32Type, IntervalMonthDayNano, IntervalUnit, TimeUnit, TimestampMicrosecondType,
};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Age {
    signature: Signature,
}

impl Default for Age {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Stable),
        }
    }
}

const MICROS_PER_SEC: i64 = 1_000_000;

/// A wall-clock time split as PostgreSQL's `pg_tm`, with microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fields {
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
    micros: i64,
}

impl Fields {
    fn of(t: NaiveDateTime) -> Self {
        Self {
            year: i64::from(t.year()),
            month: i64::from(t.month()),
            day: i64::from(t.day()),
            hour: i64::from(t.hour()),
            minute: i64::from(t.minute()),
            second: i64::from(t.second()),
            micros: i64::from(t.nanosecond() / 1_000),
        }
    }

    fn map(self, f: impl Fn(i64, i64) -> i64, o: Self) -> Self {
        Self {
            year: f(self.year, o.year),
            month: f(self.month, o.month),
            day: f(self.day, o.day),
            hour: f(self.hour, o.hour),
            minute: f(self.minute, o.minute),
            second: f(self.second, o.second),
            micros: f(self.micros, o.micros),
        }
    }
}

/// Days in `month` (1-12) of `year`.
fn month_days(year: i64, month: i64) -> i64 {
    let Ok(year) = i32::try_from(year) else {
        return 30;
    };
    let first = NaiveDate::from_ymd_opt(year, month as u32, 1);
    let next = match month {
        12 => NaiveDate::from_ymd_opt(year + 1, 1, 1),
        m => NaiveDate::from_ymd_opt(year, m as u32 + 1, 1),
    };
    match (first, next) {
        (Some(a), Some(b)) => (b - a).num_days(),
        _ => 30,
    }
}

/// `age(a, b)` as PostgreSQL's `timestamp_age`; `None` out of range.
fn age(a: NaiveDateTime, b: NaiveDateTime) -> Option<IntervalMonthDayNano> {
    let (fa, fb) = (Fields::of(a), Fields::of(b));
    let mut d = fa.map(|x, y| x - y, fb);
    let flip = a < b;
    if flip {
        d = d.map(|x, _| -x, d);
    }
    while d.micros < 0 {
        d.micros += MICROS_PER_SEC;
        d.second -= 1;
    }
    while d.second < 0 {
        d.second += 60;
        d.minute -= 1;
    }
    while d.minute < 0 {
        d.minute += 60;
        d.hour -= 1;
    }
    while d.hour < 0 {
        d.hour += 24;
        d.day -= 1;
    }
    while d.day < 0 {
        let borrowed = if flip { fa } else { fb };
        d.day += month_days(borrowed.year, borrowed.month);
        d.month -= 1;
    }
    while d.month < 0 {
        d.month += 12;
        d.year -= 1;
    }
    if flip {
        d = d.map(|x, _| -x, d);
    }
    let months = i32::try_from(d.year.checked_mul(12)?.checked_add(d.month)?).ok()?;
    let days = i32::try_from(d.day).ok()?;
    let seconds = (d.hour * 60 + d.minute) * 60 + d.second;
    let nanos = (seconds * MICROS_PER_SEC + d.micros).checked_mul(1_000)?;
    Some(IntervalMonthDayNano::new(months, days, nanos))
}

/// The zone both arguments are read in: the first one's that has one.
fn zone(args: &[DataType]) -> Option<Arc<str>> {
    args.iter().find_map(|t| match t {
        DataType::Timestamp(_, Some(tz)) => Some(tz.clone()),
        _ => None,
    })
}

/// Wall-clock times of one argument, in `tz` when it has a zone.
fn wall_clock(arg: &ArrayRef, tz: Option<&Tz>) -> Result<Vec<Option<NaiveDateTime>>> {
    if let DataType::Date32 = arg.data_type() {
        let dates = arg.as_primitive::<Date32Type>();
        return Ok(dates
            .iter()
            .map(|d| {
                d.and_then(|d| {
                    NaiveDate::from_num_days_from_ce_opt(d.checked_add(719_163)?)?
                        .and_hms_opt(0, 0, 0)
                })
            })
            .collect());
    }
    // A zone's instants keep their values cast without it: read on `tz`'s
    // clock below.
    let stripped = cast(arg, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
    let micros = stripped.as_primitive::<TimestampMicrosecondType>();
    let zoned = matches!(arg.data_type(), DataType::Timestamp(_, Some(_)));
    Ok(micros
        .iter()
        .map(|m| {
            let utc = DateTime::from_timestamp_micros(m?)?;
            Some(match (zoned, tz) {
                (true, Some(tz)) => tz.from_utc_datetime(&utc.naive_utc()).naive_local(),
                _ => utc.naive_utc(),
            })
        })
        .collect())
}

impl ScalarUDFImpl for Age {
    fn name(&self) -> &str {
        "age"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        if !(1..=2).contains(&args.len()) {
            return plan_err!(
                "age takes one or two timestamps, got {} arguments",
                args.len()
            );
        }
        let tz = zone(args);
        args.iter()
            .map(|t| match t {
                DataType::Timestamp(..) | DataType::Date32 => Ok(t.clone()),
                DataType::Date64 => Ok(DataType::Date32),
                DataType::Null | DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                    Ok(DataType::Timestamp(TimeUnit::Microsecond, tz.clone()))
                }
                t if t.is_integer() => plan_err!(
                    "age({t}): Kiln has no transaction ids; age takes one or two timestamps"
                ),
                t => plan_err!("age takes timestamps, not {t}"),
            })
            .collect()
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Interval(IntervalUnit::MonthDayNano))
    }
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        // `age(t)`: `age(current_date, t)`, the date of the query's start.
        let (1, Some(start)) = (args.len(), info.query_execution_start_time()) else {
            return Ok(ExprSimplifyResult::Original(args));
        };
        let tz = info
            .config_options()
            .execution
            .time_zone
            .as_ref()
            .and_then(|tz| tz.parse::<Tz>().ok());
        let today = match tz {
            Some(tz) => tz.from_utc_datetime(&start.naive_utc()).date_naive(),
            None => start.date_naive(),
        };
        let days = (today - NaiveDate::from_ymd_opt(1970, 1, 1).expect("epoch")).num_days();
        let today = Expr::Literal(ScalarValue::Date32(Some(days as i32)), None);
        let mut args = args;
        args.insert(0, today);
        Ok(ExprSimplifyResult::Simplified(Expr::ScalarFunction(
            datafusion::logical_expr::expr::ScalarFunction::new_udf(
                Arc::new(datafusion::logical_expr::ScalarUDF::new_from_impl(
                    Age::default(),
                )),
                args,
            ),
        )))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [a, b] = args.args.as_slice() else {
            return exec_err!("age(timestamp) was not given the current date");
        };
        let types = [a.data_type(), b.data_type()];
        let tz = zone(&types)
            .map(|z| z.parse::<Tz>())
            .transpose()
            .map_err(|e| datafusion::error::DataFusionError::Execution(e.to_string()))?;
        let rows = args.number_rows;
        let (a, b) = (a.to_array(rows)?, b.to_array(rows)?);
        let (a, b) = (wall_clock(&a, tz.as_ref())?, wall_clock(&b, tz.as_ref())?);
        let out = a
            .iter()
            .zip(&b)
            .map(|(a, b)| match (a, b) {
                (Some(a), Some(b)) => match age(*a, *b) {
                    Some(i) => Ok(Some(i)),
                    None => exec_err!("interval out of range: age({a}, {b})"),
                },
                _ => Ok(None),
            })
            .collect::<Result<IntervalMonthDayNanoArray>>()?;
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        Ok(match scalar {
            true => ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?),
            false => ColumnarValue::Array(Arc::new(out)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").unwrap()
    }

    fn interval(
        months: i32,
        days: i32,
        hours: i64,
        minutes: i64,
        secs: i64,
    ) -> IntervalMonthDayNano {
        IntervalMonthDayNano::new(
            months,
            days,
            ((hours * 60 + minutes) * 60 + secs) * 1_000_000_000,
        )
    }

    #[test]
    fn ages_are_postgresqls() {
        // PostgreSQL's documentation: 43 years 9 mons 27 days.
        let (a, b) = (at("2001-04-10 00:00:00"), at("1957-06-13 00:00:00"));
        assert_eq!(age(a, b), Some(interval(43 * 12 + 9, 27, 0, 0, 0)));
        assert_eq!(age(b, a), Some(interval(-(43 * 12 + 9), -27, 0, 0, 0)));
        // A day borrows the length of the later argument's month: 1 mon 1 day.
        let (a, b) = (at("2024-03-01 00:00:00"), at("2024-01-31 00:00:00"));
        assert_eq!(age(a, b), Some(interval(1, 1, 0, 0, 0)));
        // The earlier first: the first argument's month (January, 31): -1 mon -1 day.
        assert_eq!(age(b, a), Some(interval(-1, -1, 0, 0, 0)));
        // February of a leap year is 29 days: 2024-03-01 - 2024-02-29 23:00 = 01:00:00.
        let (a, b) = (at("2024-03-01 00:00:00"), at("2024-02-29 23:00:00"));
        assert_eq!(age(a, b), Some(interval(0, 0, 1, 0, 0)));
        // Time borrows through days: 21:30:00.
        let (a, b) = (at("2026-12-03 10:00:00"), at("2026-12-02 12:30:00"));
        assert_eq!(age(a, b), Some(interval(0, 0, 21, 30, 0)));
        // Microseconds borrow from seconds.
        let (a, b) = (at("2026-12-03 10:00:00.25"), at("2026-12-03 09:59:59.5"));
        assert_eq!(
            age(a, b),
            Some(IntervalMonthDayNano::new(0, 0, 750_000_000))
        );
        assert_eq!(age(a, a), Some(IntervalMonthDayNano::new(0, 0, 0)));
    }
}
