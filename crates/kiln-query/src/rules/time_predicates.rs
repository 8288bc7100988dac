//! Time predicates rewritten so they compare the bare time column, and
//! fixed intervals added as durations.
//!
//! Why: dashboards filter on expressions of the time column, such as
//! `event_time - INTERVAL '1 day' < $3` or `date_trunc('day', event_time) <
//! $3`. DataFusion evaluates those per row (interval arithmetic and
//! truncation through calendar code, ~100-250 ns a row) and cannot prune
//! segments, row groups or pages with them. Rewritten to `event_time <
//! <constant>`, the same predicate costs one integer comparison a row and
//! prunes like any range on the time column (the retention queries of the
//! dashboard workload spent most of their time in such a filter).
//!
//! The rewrites are exact, and only applied where they are:
//! - `ts ± I  op  c`  →  `ts  op  c ∓ I`, for a timestamp without time zone
//!   and an interval of days and smaller units (months vary in length, and
//!   with a time zone a day does too). Adding a fixed duration is a
//!   bijection, so every comparison is preserved. `c` is a literal, or in
//!   a kept generic plan any constant such as `$3`: `c ∓ I` is then
//!   computed once per batch, and the scan still prunes with it.
//! - `date_trunc(unit, ts)  op  c`  →  a range on `ts`, for a timestamp
//!   without time zone, `unit` in second, minute, hour, day, month, year,
//!   and `c` on a unit boundary (`c` is then the truncation of exactly the
//!   instants in `[c, c + unit)`), as DataFusion's `preimage` does for
//!   `date_part`.
//!
//! One rewrite is not of a predicate but of any expression: `ts ± I` →
//! `ts ± D`, the fixed interval `I` as a duration `D` in the unit of `ts`.
//! arrow adds an interval to a timestamp through `chrono` date times even
//! without a time zone (~40 ns a row); a duration is one checked integer
//! addition. Retention's `u.d = c.d0 + INTERVAL '7 day'` over every joined
//! row was 7% of the dashboard workload's CPU. The shift above accepts
//! both forms, so the two rewrites compose.

use std::sync::Arc;

use arrow::datatypes::{DataType, TimeUnit};
use chrono::{DateTime, Datelike, Months, NaiveDate};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, DFSchemaRef, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::functions::{fixed_interval_ns, shifted};

/// The optimizer rule; see the module docs.
#[derive(Debug, Default)]
pub struct TimePredicates;

impl OptimizerRule for TimePredicates {
    fn name(&self) -> &str {
        "kiln_time_predicates"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let schema = expression_schema(&plan);
        // A projection's or aggregate's output keeps its name.
        let names = NamePreserver::new(&plan);
        plan.map_expressions(|e| {
            let name = names.save(&e);
            e.transform_up(|e| rewrite_expr(e, schema.as_deref()))
                .map(|t| t.update_data(|e| name.restore(e)))
        })
    }
}

/// The schema a plan node's expressions are evaluated against: its inputs'
/// (merged, for a join); for a table scan, whose filters (pushed down as
/// exact, so nowhere else) name source columns, the source's.
fn expression_schema(plan: &LogicalPlan) -> Option<DFSchemaRef> {
    if let LogicalPlan::TableScan(scan) = plan {
        if scan.filters.is_empty() {
            return None;
        }
        let source = scan.source.schema();
        let schema = DFSchema::try_from_qualified_schema(scan.table_name.clone(), &source);
        return schema.ok().map(Arc::new);
    }
    match plan.inputs().as_slice() {
        [] => None,
        [one] => Some(Arc::clone(one.schema())),
        many => {
            let mut merged = DFSchema::empty();
            for input in many {
                merged.merge(input.schema());
            }
            Some(Arc::new(merged))
        }
    }
}

/// A timestamp literal without time zone: its value and a constructor for
/// another value of the same unit.
struct Ts {
    value: i64,
    /// Nanoseconds per tick of the unit.
    tick_ns: i64,
    make: fn(i64) -> ScalarValue,
}

fn timestamp(v: &ScalarValue) -> Option<Ts> {
    let (value, tick_ns, make): (i64, i64, fn(i64) -> ScalarValue) = match v {
        ScalarValue::TimestampNanosecond(Some(x), None) => {
            (*x, 1, |x| ScalarValue::TimestampNanosecond(Some(x), None))
        }
        ScalarValue::TimestampMicrosecond(Some(x), None) => (*x, 1_000, |x| {
            ScalarValue::TimestampMicrosecond(Some(x), None)
        }),
        ScalarValue::TimestampMillisecond(Some(x), None) => (*x, 1_000_000, |x| {
            ScalarValue::TimestampMillisecond(Some(x), None)
        }),
        ScalarValue::TimestampSecond(Some(x), None) => (*x, 1_000_000_000, |x| {
            ScalarValue::TimestampSecond(Some(x), None)
        }),
        _ => return None,
    };
    Some(Ts {
        value,
        tick_ns,
        make,
    })
}

fn is_comparison(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
    )
}

fn rewrite_expr(e: Expr, schema: Option<&DFSchema>) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(be @ BinaryExpr { left, op, right }) = &e else {
        return Ok(Transformed::no(e));
    };
    if matches!(op, Operator::Plus | Operator::Minus) {
        return Ok(match schema.and_then(|s| as_duration(be, s)) {
            Some(new) => Transformed::yes(new),
            None => Transformed::no(e),
        });
    }
    if !is_comparison(*op) {
        return Ok(Transformed::no(e));
    }
    // Put the constant on the right.
    let (lhs, op, c) = if is_constant(right) {
        (left.as_ref(), *op, right.as_ref())
    } else if is_constant(left) {
        match op.swap() {
            Some(op) => (right.as_ref(), op, left.as_ref()),
            None => return Ok(Transformed::no(e)),
        }
    } else {
        return Ok(Transformed::no(e));
    };
    let rewritten = match (lhs, c) {
        (Expr::BinaryExpr(inner), Expr::Literal(c, _)) => {
            timestamp(c).and_then(|c| shift(inner, op, &c))
        }
        (Expr::ScalarFunction(f), Expr::Literal(c, _)) => {
            timestamp(c).and_then(|c| truncation(f, op, &c))
        }
        (Expr::BinaryExpr(inner), c) => schema.and_then(|s| shift_by_expr(inner, op, c, s)),
        _ => None,
    };
    Ok(match rewritten {
        Some(new) => Transformed::yes(new),
        None => Transformed::no(e),
    })
}

/// An expression with one value per execution: no columns, subqueries or
/// aggregates, nothing volatile. A literal, or a generic plan's `$n`
/// (possibly cast or shifted), which is bound before the plan runs.
fn is_constant(e: &Expr) -> bool {
    !e.is_volatile()
        && !e
            .exists(|x| {
                Ok(matches!(
                    x,
                    Expr::Column(_)
                        | Expr::OuterReferenceColumn(..)
                        | Expr::ScalarSubquery(_)
                        | Expr::Exists(_)
                        | Expr::InSubquery(_)
                        | Expr::AggregateFunction(_)
                        | Expr::WindowFunction(_)
                ))
            })
            .unwrap_or(true)
}

/// `ts ± I op c` → `ts op c ∓ I`, for a constant `c` that is not a literal
/// (a generic plan's `$n`): `c ∓ I` is then computed once per batch instead
/// of `ts ± I` once per row. `c` has the type of `ts` (the comparison was
/// coerced), so `c ∓ I` is exact wherever `ts ± I` is; it errs only where
/// `c ∓ I` itself leaves the timestamp range (years before 1677 or after
/// 2262 in nanoseconds).
fn shift_by_expr(inner: &BinaryExpr, op: Operator, c: &Expr, schema: &DFSchema) -> Option<Expr> {
    let (ts, interval, sign) = shifted(inner)?;
    let DataType::Timestamp(unit, None) = ts.get_type(schema).ok()? else {
        return None;
    };
    if is_constant(ts) || c.get_type(schema).ok()? != DataType::Timestamp(unit, None) {
        return None;
    }
    let ns = fixed_interval_ns(interval)?;
    if ns % tick_ns(unit) as i128 != 0 {
        return None;
    }
    let interval = Expr::Literal(interval.clone(), None);
    let moved = if sign > 0 {
        c.clone() - interval
    } else {
        c.clone() + interval
    };
    Some(Expr::BinaryExpr(BinaryExpr::new(
        Box::new(ts.clone()),
        op,
        Box::new(moved),
    )))
}

/// `ts ± I` → `ts ± D`, `D` the duration of the fixed interval `I` in the
/// unit of `ts`: one checked integer addition a row instead of a trip
/// through calendar code (arrow adds an interval to a timestamp by way of a
/// `chrono` date time even without a time zone). Without a time zone a day
/// is always 86,400 s, so the result is the same; it errs on overflow as
/// the interval does.
fn as_duration(inner: &BinaryExpr, schema: &DFSchema) -> Option<Expr> {
    let (ts, interval, _) = shifted(inner)?;
    // Only intervals: a duration is what this makes.
    if !matches!(
        interval,
        ScalarValue::IntervalMonthDayNano(_) | ScalarValue::IntervalDayTime(_)
    ) {
        return None;
    }
    let DataType::Timestamp(unit, None) = ts.get_type(schema).ok()? else {
        return None;
    };
    let ns = fixed_interval_ns(interval)?;
    let tick = tick_ns(unit) as i128;
    if ns % tick != 0 {
        return None;
    }
    let ticks = Some(i64::try_from(ns / tick).ok()?);
    let duration = Expr::Literal(
        match unit {
            TimeUnit::Nanosecond => ScalarValue::DurationNanosecond(ticks),
            TimeUnit::Microsecond => ScalarValue::DurationMicrosecond(ticks),
            TimeUnit::Millisecond => ScalarValue::DurationMillisecond(ticks),
            TimeUnit::Second => ScalarValue::DurationSecond(ticks),
        },
        None,
    );
    Some(Expr::BinaryExpr(BinaryExpr::new(
        Box::new(ts.clone()),
        inner.op,
        Box::new(duration),
    )))
}

fn tick_ns(unit: TimeUnit) -> i64 {
    match unit {
        TimeUnit::Nanosecond => 1,
        TimeUnit::Microsecond => 1_000,
        TimeUnit::Millisecond => 1_000_000,
        TimeUnit::Second => 1_000_000_000,
    }
}

/// `ts ± I op c` → `ts op c ∓ I`.
fn shift(inner: &BinaryExpr, op: Operator, c: &Ts) -> Option<Expr> {
    let (ts, interval, sign) = shifted(inner)?;
    let ns = fixed_interval_ns(interval)?;
    if ns % c.tick_ns as i128 != 0 {
        return None;
    }
    let moved = c.value as i128 - sign * (ns / c.tick_ns as i128);
    let moved = i64::try_from(moved).ok()?;
    Some(Expr::BinaryExpr(BinaryExpr::new(
        Box::new(ts.clone()),
        op,
        Box::new(Expr::Literal((c.make)(moved), None)),
    )))
}

/// `date_trunc(unit, ts) op c` with `c` on a unit boundary → a range on `ts`.
fn truncation(f: &ScalarFunction, op: Operator, c: &Ts) -> Option<Expr> {
    if f.func.name() != "date_trunc" || f.args.len() != 2 {
        return None;
    }
    let unit = match &f.args[0] {
        Expr::Literal(ScalarValue::Utf8(Some(u)) | ScalarValue::Utf8View(Some(u)), _) => {
            u.to_ascii_lowercase()
        }
        _ => return None,
    };
    let (lower, upper) = unit_range(&unit, c)?;
    let ts = f.args[1].clone();
    let at = |v: i64| Expr::Literal((c.make)(v), None);
    Some(match op {
        Operator::Lt => ts.lt(at(lower)),
        Operator::GtEq => ts.gt_eq(at(lower)),
        Operator::Gt => ts.gt_eq(at(upper)),
        Operator::LtEq => ts.lt(at(upper)),
        Operator::Eq => ts.clone().gt_eq(at(lower)).and(ts.lt(at(upper))),
        Operator::NotEq => ts.clone().lt(at(lower)).or(ts.gt_eq(at(upper))),
        _ => return None,
    })
}

/// `[c, c + unit)` in `c`'s ticks, if `c` is on a boundary of `unit`.
fn unit_range(unit: &str, c: &Ts) -> Option<(i64, i64)> {
    let fixed_ns: i64 = match unit {
        "second" => 1_000_000_000,
        "minute" => 60_000_000_000,
        "hour" => 3_600_000_000_000,
        "day" => 86_400_000_000_000,
        "month" | "year" => return calendar_range(unit, c),
        _ => return None,
    };
    if fixed_ns % c.tick_ns != 0 {
        return None;
    }
    let len = fixed_ns / c.tick_ns;
    (c.value.rem_euclid(len) == 0).then_some((c.value, c.value.checked_add(len)?))
}

fn calendar_range(unit: &str, c: &Ts) -> Option<(i64, i64)> {
    let ns = c.value as i128 * c.tick_ns as i128;
    let at = DateTime::from_timestamp_nanos(i64::try_from(ns).ok()?).naive_utc();
    let date = at.date();
    let first = match unit {
        "month" => NaiveDate::from_ymd_opt(date.year(), date.month(), 1)?,
        _ => NaiveDate::from_ymd_opt(date.year(), 1, 1)?,
    };
    if first.and_hms_opt(0, 0, 0)? != at {
        return None;
    }
    let next = first.checked_add_months(Months::new(if unit == "month" { 1 } else { 12 }))?;
    let next_ns = next.and_hms_opt(0, 0, 0)?.and_utc().timestamp_nanos_opt()? as i128;
    let upper = i64::try_from(next_ns / c.tick_ns as i128).ok()?;
    Some((c.value, upper))
}

#[cfg(test)]
mod tests;
