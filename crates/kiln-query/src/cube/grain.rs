//! Expressions of a timestamp that are constant over each bucket of a
//! unit, and so equal the same expression of that timestamp truncated to
//! the unit (or to a finer one): a cube with `date_trunc('hour', ts)`
//! answers a query grouping or filtering by any of them.
//!
//! Why: BI tools seldom write `date_trunc`. Metabase groups by day with
//! `CAST(ts AS DATE)` and by hour of day or day of week with `extract`;
//! Grafana, on a TimescaleDB-flavoured source, buckets with
//! `time_bucket('5m', ts)`; others write `date_bin`. Each is a function of
//! the bucket alone, which is what a cube keeps.
//!
//! The forms, for a timestamp without time zone (a day is then always
//! 86,400 s, and a date is the UTC one):
//! - `date_trunc(unit, ts)`: constant over `unit`;
//! - `CAST(ts AS DATE)`: over a day;
//! - `date_part(field, ts)` (`extract`) for a calendar field: `year`,
//!   `quarter`, `month`, `week` (ISO, Monday to Sunday), `day`, `dow`,
//!   `isodow`, `doy`, `hour`, `minute`. Not `second` and finer parts, nor
//!   `epoch`, whose fractions are finer than any bucket;
//! - `date_bin(stride, ts [, origin])` and `time_bucket(stride, ts)`: over
//!   any unit of fixed length (second to week) whose length divides the
//!   stride and which has a bucket starting at the origin: each bin then
//!   holds whole buckets;
//! - `floor(extract(epoch FROM ts) / n)` for a whole number of seconds
//!   `n`: bins of `n` seconds from 1970-01-01, which Grafana's
//!   PostgreSQL macro `$__timeGroup(ts, '1h')` writes (then times `n`, a
//!   function of this form). The epoch is a float: within a microsecond
//!   before a bin's end (a few hundred nanoseconds for today's dates), a
//!   raw timestamp's epoch can round up into the next bin. The truncated
//!   timestamp's epoch is exact, so a cube puts such a row in its own bin,
//!   as PostgreSQL (whose epoch is exact) does.
//!
//! The timestamp may be shifted first by a fixed length (`ts + INTERVAL
//! '1 day'`, of a timestamp without time zone): Metabase and Superset
//! start weeks on Sunday with `date_trunc('week', ts + INTERVAL '1 day') -
//! INTERVAL '1 day'`, and dashboards of naive timestamps move days to a
//! local time with `ts + INTERVAL '2 hours'`. A shift by whole buckets of
//! a fixed unit maps each bucket onto one bucket, so a form constant over
//! the unit stays so ([`Grain::over`]; [`unshifted`] finds the shift).

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::expr::Cast;
use datafusion::logical_expr::{Expr, ExprSchemable, Operator};

use super::unit::Unit;
use crate::functions::{fixed_interval_ns, shifted};

/// The buckets an expression of a timestamp is constant over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grain {
    /// Each bucket of the unit.
    Unit(Unit),
    /// Each bin of `stride` nanoseconds from `origin`.
    Bins { stride: i64, origin: i64 },
}

impl Grain {
    /// Whether the expression, of a timestamp shifted by `shift`
    /// nanoseconds, is constant over each bucket of `finer` of the
    /// timestamp: it is of the shifted one, and the shift is whole buckets.
    pub fn over(self, finer: Unit, shift: i128) -> bool {
        let whole = shift == 0
            || finer
                .fixed_ns()
                .is_some_and(|len| shift % i128::from(len) == 0);
        whole
            && match self {
                Grain::Unit(u) => u.covers(finer),
                Grain::Bins { stride, origin } => {
                    finer.fixed_ns().is_some_and(|len| stride % len == 0)
                        && finer.floor(origin) == Some(origin)
                }
            }
    }
}

/// `e` as a timestamp shifted by fixed lengths (`ts + INTERVAL '1 day' -
/// INTERVAL '2 hours'`): the timestamp and the sum of the shifts in
/// nanoseconds; `e` itself and 0 when it is not one, or the timestamp has
/// a time zone (whose days vary in length).
pub fn unshifted<'a>(e: &'a Expr, schema: &DFSchema) -> (&'a Expr, i128) {
    let (mut base, mut shift) = (e, 0i128);
    while let Expr::BinaryExpr(b) = base
        && let Some((ts, by, sign)) = shifted(b)
        && let Some(ns) = fixed_interval_ns(by)
    {
        (base, shift) = (ts, shift + sign * ns);
    }
    match base.get_type(schema) {
        Ok(DataType::Timestamp(_, None)) => (base, shift),
        _ => (e, 0),
    }
}

/// `e`'s grain and the timestamp it is an expression of, if `e` is one of
/// the module's forms.
pub fn grain<'a>(e: &'a Expr, schema: &DFSchema) -> Option<(Grain, &'a Expr)> {
    let naive = |ts: &Expr| matches!(ts.get_type(schema), Ok(DataType::Timestamp(_, None)));
    match e {
        Expr::Cast(Cast { expr, field }) if field.data_type() == &DataType::Date32 => {
            naive(expr).then_some((Grain::Unit(Unit::Day), expr.as_ref()))
        }
        Expr::ScalarFunction(f) => {
            let (grain, ts) = match (f.name(), f.args.as_slice()) {
                // Its unit is checked by the cube's own dimensions, which
                // may be of a time zone: no type check.
                ("date_trunc", [u, ts]) => {
                    return Some((Grain::Unit(Unit::parse(&text(u)?)?), ts));
                }
                ("date_part", [field, ts]) => (Grain::Unit(field_unit(&text(field)?)?), ts),
                ("date_bin", [stride, ts]) => (bins(stride, 0)?, ts),
                ("date_bin", [stride, ts, Expr::Literal(origin, _)]) => {
                    (bins(stride, nanos(origin)?)?, ts)
                }
                ("time_bucket", [stride, ts]) => {
                    (bins(stride, crate::functions::TIME_BUCKET_ORIGIN_NS)?, ts)
                }
                ("floor", [quotient]) => {
                    let (epoch, seconds) = quotient_of(quotient)?;
                    (epoch_bins(seconds)?, epoch_of(epoch)?)
                }
                _ => return None,
            };
            naive(ts).then_some((grain, ts))
        }
        _ => None,
    }
}

/// A string literal, in lower case.
fn text(e: &Expr) -> Option<String> {
    match e {
        Expr::Literal(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::Utf8View(Some(s))
            | ScalarValue::LargeUtf8(Some(s)),
            _,
        ) => Some(s.to_ascii_lowercase()),
        _ => None,
    }
}

/// `date_part('epoch', ts)` (`extract(epoch FROM ts)`): `ts`.
fn epoch_of(e: &Expr) -> Option<&Expr> {
    let Expr::ScalarFunction(f) = e else {
        return None;
    };
    match (f.name(), f.args.as_slice()) {
        ("date_part", [field, ts]) if text(field).as_deref() == Some("epoch") => Some(ts),
        _ => None,
    }
}

/// The coarsest unit over which a `date_part` field is constant.
fn field_unit(field: &str) -> Option<Unit> {
    Some(match field {
        "year" => Unit::Year,
        "quarter" => Unit::Quarter,
        "month" => Unit::Month,
        "week" => Unit::Week,
        "day" | "dow" | "isodow" | "doy" => Unit::Day,
        "hour" => Unit::Hour,
        "minute" => Unit::Minute,
        _ => return None,
    })
}

/// Bins of a positive fixed stride (no months) from `origin`.
fn bins(stride: &Expr, origin: i64) -> Option<Grain> {
    let Expr::Literal(stride, _) = stride else {
        return None;
    };
    let stride = i64::try_from(fixed_interval_ns(stride)?)
        .ok()
        .filter(|s| *s > 0)?;
    Some(Grain::Bins { stride, origin })
}

/// `x / n` (or Kiln's checked `float_divide(x, n)`) of a number `n`:
/// `x` and `n`.
fn quotient_of(e: &Expr) -> Option<(&Expr, f64)> {
    let (x, n) = match e {
        Expr::BinaryExpr(b) if b.op == Operator::Divide => (b.left.as_ref(), b.right.as_ref()),
        Expr::ScalarFunction(f) => match (f.name(), f.args.as_slice()) {
            ("float_divide", [x, n]) => (x, n),
            _ => return None,
        },
        _ => return None,
    };
    let n = match n {
        Expr::Cast(Cast { expr, .. }) => expr.as_ref(),
        n => n,
    };
    let Expr::Literal(n, _) = n else {
        return None;
    };
    match n.cast_to(&DataType::Float64).ok()? {
        ScalarValue::Float64(Some(n)) => Some((x, n)),
        _ => None,
    }
}

/// Bins of a whole, positive number of seconds from 1970-01-01.
fn epoch_bins(seconds: f64) -> Option<Grain> {
    // NaN and infinities have no zero fraction; a cast past i64 saturates
    // and the product then overflows.
    let whole = seconds.fract() == 0.0 && seconds >= 1.0;
    let stride = whole
        .then_some(seconds as i64)?
        .checked_mul(1_000_000_000)?;
    Some(Grain::Bins { stride, origin: 0 })
}

/// A timestamp literal without time zone in nanoseconds.
fn nanos(v: &ScalarValue) -> Option<i64> {
    match v {
        ScalarValue::TimestampNanosecond(Some(x), None) => Some(*x),
        ScalarValue::TimestampMicrosecond(Some(x), None) => x.checked_mul(1_000),
        ScalarValue::TimestampMillisecond(Some(x), None) => x.checked_mul(1_000_000),
        ScalarValue::TimestampSecond(Some(x), None) => x.checked_mul(1_000_000_000),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
